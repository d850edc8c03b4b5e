"""Cache reuse without a model: the walk against a literal transcription of llama-server's loop,
its bounds, the options' validation, and the KV manager's plans and copies against a fake core
cache that tracks which (token, position) each slot holds, over many random requests (blocks
stay referenced correctly; the engine conftest checks that none leaks)."""

from __future__ import annotations

import numpy as np
import pytest

from llaisys.engine import KVCacheManager, Request, RequestTimes, SamplingParams
from llaisys.engine import cache_reuse as cr
from llaisys.engine.config import EngineConfig

BS = 4


def server_walk(cache: list, prompt: list, n_past: int, n_reuse: int) -> list:
    """llama-server's --cache-reuse loop (tools/server), token by token: the runs it shifts."""
    head_c = head_p = n_past
    runs = [(0, 0, n_past)] if n_past else []
    while head_c < len(cache) and head_p < len(prompt):
        n = 0
        while head_c + n < len(cache) and head_p + n < len(prompt) and cache[head_c + n] == prompt[head_p + n]:
            n += 1
        if n >= n_reuse:
            runs.append((head_c, head_p, n))
            head_c, head_p = head_c + n, head_p + n
        else:
            head_c += 1
    return runs


def merged_end(runs: list) -> int:
    return runs[-1][1] + runs[-1][2] if runs else 0


@pytest.mark.parametrize("seed", range(40))
def test_walk_matches_llama_servers_loop(seed, monkeypatch):
    monkeypatch.setattr(cr, "_SCAN", 7)  # slices that split runs
    rng = np.random.default_rng(seed)
    alphabet = int(rng.integers(2, 6))
    chunks = [list(rng.integers(0, alphabet, int(rng.integers(1, 12)))) for _ in range(8)]
    cache = sum((chunks[i] for i in rng.permutation(8)[:6]), [])
    prompt = sum((chunks[i] for i in rng.permutation(8)[:6]), [])
    n_reuse = int(rng.integers(1, 6))
    n_past = cr.common_length(np.asarray(cache), np.asarray(prompt))
    want = server_walk(cache, prompt, n_past, n_reuse)
    got = cr.walk(np.asarray(cache, np.int64), np.asarray(prompt, np.int64), 0, 0, n_reuse)
    assert got == [r for r in want if r[2]]
    for c, p, n in got:  # each run is the same tokens, contiguous in the prompt
        assert cache[c:c + n] == prompt[p:p + n]
    assert merged_end(got) == merged_end(want)


def test_walk_takes_a_moved_ring_and_stops_at_a_new_chunk():
    h, a, b, c, d, t = [list(range(k * 100, k * 100 + 20)) for k in range(6)]
    source = np.asarray(h[:3] + a + b + c + t, np.int64)
    prompt = np.asarray(h[:3] + b + c + d + t, np.int64)
    runs = cr.walk(source, prompt, 0, 0, 8)
    assert runs == [(0, 0, 3), (23, 3, 40)]  # the header in place, b + c moved back 20; d is new
    assert cr.walk(source, prompt, 0, 0, 41) == [(0, 0, 3)]  # runs shorter than N are not taken
    assert cr.walk(source, prompt, 0, 3, 8) == [(23, 3, 40)]  # head_c < head_p: no common run


@pytest.mark.parametrize("value,fragment", [(-1, ">= 0"), (1.5, "integer"), (True, "integer"), ("8", "integer")])
def test_bad_values_are_errors(value, fragment):
    with pytest.raises(ValueError, match=fragment):
        cr.check_cache_reuse(value)
    with pytest.raises(ValueError, match="cache_reuse"):
        EngineConfig(cache_reuse=value)


def test_the_options_it_needs():
    assert EngineConfig(cache_reuse=256).cache_reuse == 256 and EngineConfig().cache_reuse == 0
    with pytest.raises(ValueError, match="SLOT"):
        EngineConfig(kv_layout="slot", cache_reuse=8)
    with pytest.raises(ValueError, match="prefix cache"):
        EngineConfig(enable_prefix_caching=False, cache_reuse=8)
    assert cr.check_cache_reuse(8, device="nvidia") == 8  # llaisysKVCacheCopyShift's CUDA kernel
    with pytest.raises(ValueError, match="CPU and NVIDIA"):
        cr.check_cache_reuse(8, device="metal")
    assert EngineConfig(kv_layout="slot", cache_reuse=0).cache_reuse == 0


# ---- the manager with a fake core cache -----------------------------------------------------
class FakeCache:
    """Each slot holds the (token, position) whose K/V it has; copy_shift moves them."""

    def __init__(self, n_slots: int):
        self.slots = [None] * n_slots
        self.copies = 0

    def copy_shift(self, src, dst, delta):
        src, dst, delta = np.asarray(src), np.asarray(dst), np.asarray(delta)
        assert len(set(dst.tolist())) == len(dst) and not set(dst.tolist()) & set(src.tolist())
        got = [self.slots[s] for s in src]
        assert all(g is not None for g in got), "copied from a slot holding nothing"
        for d, g, e in zip(dst, got, delta):
            self.slots[d] = (g[0], g[1] + int(e))
        self.copies += 1


def req(rid, tokens):
    return Request(rid, rid, 0, list(tokens), SamplingParams(), seed=0, max_tokens=8,
                   eos_token_ids=frozenset(), times=RequestTimes(0.0))


def slot(kv, r, pos):
    return kv.block_table(r.request_id)[pos // BS] * BS + pos % BS


def run_request(kv, cache, r):
    """Admit r, check that every computed position's slot holds its token there, compute the
    rest (the fake writes each slot), publish its blocks and free it. Returns its computed tokens."""
    hit = kv.get_computed_blocks(r)
    assert kv.allocate_slots(r, r.num_tokens - hit.num_tokens, hit)
    r.num_computed_tokens = hit.num_tokens
    assert hit.num_tokens < r.num_tokens
    for p in range(hit.num_tokens):
        assert cache.slots[slot(kv, r, p)] == (r.all_token_ids[p], p), f"position {p} of {r.request_id}"
    for p in range(hit.num_tokens, r.num_tokens):
        cache.slots[slot(kv, r, p)] = (r.all_token_ids[p], p)
    r.num_computed_tokens = r.num_tokens
    kv.cache_blocks(r)
    kv.check_invariants()
    kv.free(r)
    kv.check_invariants()
    return hit.num_tokens


def manager(num_blocks, min_run):
    kv = KVCacheManager(num_blocks, BS)
    cache = FakeCache(num_blocks * BS)
    kv.reuse = cr.CacheReuse(min_run, cache)
    return kv, cache


def test_a_dropped_leading_chunk_is_reused_at_its_new_position():
    kv, cache = manager(64, 6)
    head, chunks, tail = [1, 2], [list(range(100 * k, 100 * k + 10)) for k in range(1, 6)], [7, 8, 9]
    first = head + sum(chunks[:4], []) + tail  # 45 tokens: 11 full blocks
    assert run_request(kv, cache, req("a", first)) == 0
    second = head + sum(chunks[1:5], []) + tail  # chunk 0 dropped, chunk 4 new
    got = run_request(kv, cache, req("b", second))
    assert got == 2 + 30  # the header (in place) and chunks 1-3 (moved back 10)
    assert cache.copies == 1 and kv.reuse.stats.tokens == got and kv.reuse.stats.requests == 1
    assert kv.stats.hit_tokens == got  # counted as cached tokens
    # a third request like the second: its blocks are prefix hits now, and reuse adds nothing
    assert run_request(kv, cache, req("c", second)) == 44  # whole blocks up to the last token
    assert kv.reuse.stats.requests == 1


def test_off_changes_nothing():
    kv = KVCacheManager(64, BS)
    cache = FakeCache(64 * BS)
    first = list(range(1, 41))
    run_request(kv, cache, req("a", first))
    assert run_request(kv, cache, req("b", [0] + first[10:])) == 0


def test_evicted_source_blocks_are_not_read_and_reading_ones_are_not_taken():
    kv, cache = manager(16, 4)  # small: the second request's fresh blocks come from the LRU front
    first = list(range(1, 41))  # 10 blocks
    run_request(kv, cache, req("a", first))
    for i in range(3):  # evict the source's last three blocks with unrelated requests
        run_request(kv, cache, req(f"x{i}", [1000 + i] * 12))
    # tokens 3-6 dropped: [1, 2] in place, then 7.. moved back 4, as far as the source is resident;
    # the 9 fresh blocks come from a queue of 16 whose front 7 are the source's (they are read)
    got = run_request(kv, cache, req("b", first[:2] + first[6:]))
    assert got == 2 + 22  # blocks 0-6 resident: tokens 1..28


@pytest.mark.parametrize("seed", range(6))
def test_many_random_requests_keep_the_books(seed):
    rng = np.random.default_rng(seed)
    kv, cache = manager(40, int(rng.integers(2, 6)))
    pool = [list(rng.integers(0, 50, int(rng.integers(3, 12)))) for _ in range(10)]
    for i in range(60):
        toks = sum((pool[j] for j in rng.permutation(10)[:int(rng.integers(1, 6))]), [])
        run_request(kv, cache, req(f"r{i}", toks + [int(rng.integers(0, 50))]))
    assert kv.num_used_blocks == 0


def test_a_failed_copy_falls_back_to_computing():
    kv, cache = manager(64, 4)

    def broken(*a):
        raise RuntimeError("device lost")

    first = list(range(1, 41))
    run_request(kv, cache, req("a", first))
    cache.copy_shift = broken
    assert run_request(kv, cache, req("b", first[:2] + first[6:])) == 0  # 2 + 33 would have been reused
    assert kv.reuse.stats.failures == 1 and kv.reuse.stats.tokens == 0


# ---- the engine's counters (EngineMetrics.cache_reuse, /metrics' llaisys:cache_reuse_*) ------
class RunnerCache:
    """copy_shift over the fake runner's slots (slot -> (token, position)), which it checks on
    every read: a reused token at a wrong position fails the step."""

    def __init__(self, runner, broken: bool = False):
        self.runner, self.broken = runner, broken

    def copy_shift(self, src, dst, delta):
        if self.broken:
            raise RuntimeError("device lost")
        for s, d, e in zip(np.asarray(src).tolist(), np.asarray(dst).tolist(), np.asarray(delta).tolist()):
            tok, pos = self.runner.slots[s]
            self.runner.slots[d] = (tok, pos + e)


@pytest.mark.parametrize("broken", [False, True])
def test_the_engine_counts_reused_tokens_copies_and_fallbacks(broken):
    from fake_runner import FakeRunner, make_engine, run_all

    from llaisys.server.state.metrics import ServerMetrics

    runner = FakeRunner()
    eng = make_engine(runner, cache_reuse=6)
    eng.scheduler.kv.reuse = cr.CacheReuse(6, RunnerCache(runner, broken))
    head, chunks, tail = [1, 2], [list(range(10 * k, 10 * k + 10)) for k in range(1, 6)], [7, 8, 9]
    sp = SamplingParams(max_tokens=2, ignore_eos=True)
    eng.add_request("a", head + sum(chunks[:4], []) + tail, sp)
    first = run_all(eng)["a"]
    eng.add_request("b", head + sum(chunks[1:5], []) + tail, sp)  # chunk 0 dropped: chunks 1-3 moved back 10
    second = run_all(eng)["b"]
    assert first.usage.cached_tokens == 0
    assert second.usage.cached_tokens == (0 if broken else 32)  # the head in place and chunks 1-3
    got = eng.metrics.copy().cache_reuse
    assert (got.tokens, got.requests, got.failures) == ((0, 0, 1) if broken else (32, 1, 0))

    class Snap:  # what ServerMetrics reads: AsyncEngine.snapshot() and is_alive
        is_alive = True

        def snapshot(self):
            return eng.metrics.copy()

    body = ServerMetrics(lambda: {"m": Snap()}).render()[0].decode()
    for series, want in (("tokens", got.tokens), ("copies", got.requests), ("fallbacks", got.failures)):
        assert f'llaisys:cache_reuse_{series}_total{{model_name="m"}} {float(want)}' in body


def test_without_cache_reuse_the_engine_has_no_reuse_counters():
    from fake_runner import make_engine, run_all

    from llaisys.server.state.metrics import ServerMetrics

    eng = make_engine()
    eng.add_request("a", list(range(1, 30)), SamplingParams(max_tokens=1, ignore_eos=True))
    run_all(eng)
    assert eng.metrics.copy().cache_reuse is None

    class Snap:
        is_alive = True

        def snapshot(self):
            return eng.metrics.copy()

    assert "llaisys:cache_reuse_tokens_total{" not in ServerMetrics(lambda: {"m": Snap()}).render()[0].decode()
