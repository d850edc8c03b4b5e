"""The prompt cache's disk tier without a model: the block file format and its refusals, the
store's size cap (LRU across restarts), the write queue, and the KV manager saving evicted
blocks and restoring them on a lookup (a fake core cache that keeps block bytes)."""

from __future__ import annotations

import dataclasses
import logging
import os
import time

import numpy as np
import pytest

from llaisys.engine import KVCacheManager, Request, RequestTimes, SamplingParams
from llaisys.engine.kv_cache_manager import hash_block_tokens
from llaisys.engine.prompt_cache import DiskBlockStore, PromptCacheTier, check_options
from llaisys.engine.prompt_cache_file import BlockSpec, FileRefused, decode, encode

BS = 4
SPEC = BlockSpec(lib_version="9.9.9", model_id=b"m" * 32, kv_dtype=2, block_size=BS, n_layers=2, n_kv_heads=1,
                 head_dim=4, payload_bytes=2 * 2 * BS * 4 * 2)


def chain(tokens):
    """[(hash, parent, block tokens)] of the full blocks of `tokens`."""
    out, parent = [], None
    for i in range(len(tokens) // BS):
        t = tuple(tokens[i * BS:(i + 1) * BS])
        h = hash_block_tokens(parent, t)
        out.append((h, parent, t))
        parent = h
    return out


def payload(seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, SPEC.payload_bytes, dtype=np.uint8).tobytes()


def wait_written(store: DiskBlockStore, n: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while store.stats.files_written < n and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store.stats.files_written >= n


# ---- the file format -------------------------------------------------------------------------
def test_a_file_round_trips_and_every_header_field_is_checked():
    (h, parent, toks), (h2, p2, t2) = chain(range(8))
    data = encode(SPEC, h2, p2, t2, payload(1))
    assert len(data) == SPEC.file_bytes
    assert bytes(decode(SPEC, data, h2, p2, t2)) == payload(1)
    for field, value in (("lib_version", "9.9.10"), ("model_id", b"n" * 32), ("kv_dtype", 1), ("n_layers", 3),
                         ("n_kv_heads", 2), ("head_dim", 8), ("layout", 1)):
        other = dataclasses.replace(SPEC, **{field: value})
        with pytest.raises(FileRefused):
            decode(SPEC, encode(other, h2, p2, t2, payload(1)), h2, p2, t2)
        assert other.prefix != SPEC.prefix  # another spec's files have other names
    f32 = dataclasses.replace(SPEC, kv_dtype=1, payload_bytes=2 * SPEC.payload_bytes)  # same block, f32 K/V
    with pytest.raises(FileRefused, match="KV dtype"):
        decode(SPEC, encode(f32, h2, p2, t2, payload(1) * 2), h2, p2, t2)
    bs8 = dataclasses.replace(SPEC, block_size=8, payload_bytes=2 * SPEC.payload_bytes)
    with pytest.raises(FileRefused, match="block size"):
        decode(SPEC, encode(bs8, h2, p2, tuple(range(8)), payload(1) * 2), h2, p2, t2)
    with pytest.raises(FileRefused, match="block hash"):
        decode(SPEC, data, h, parent, toks)  # another block's file under this name
    with pytest.raises(FileRefused, match="parent"):
        decode(SPEC, data, h2, None, t2)


def test_truncated_padded_and_corrupt_files_are_refused():
    [(h, parent, toks)] = chain(range(4))
    data = encode(SPEC, h, parent, toks, payload(2))
    for bad, why in ((data[:10], "truncated"), (data[:-1], "truncated"), (data + b"\0", "padded"),
                     (b"X" + data[1:], "magic")):
        with pytest.raises(FileRefused, match=why):
            decode(SPEC, bad, h, parent, toks)
    flipped = bytearray(data)
    flipped[-5] ^= 0x10
    with pytest.raises(FileRefused, match="checksum"):
        decode(SPEC, bytes(flipped), h, parent, toks)
    tok = bytearray(data)
    tok[184] ^= 1  # the first token id
    with pytest.raises(FileRefused, match="token ids"):
        decode(SPEC, bytes(tok), h, parent, toks)


# ---- the store -------------------------------------------------------------------------------
def test_store_writes_atomically_reads_back_and_refuses_a_damaged_file(tmp_path, caplog):
    blocks = chain(range(12))
    store = DiskBlockStore(tmp_path, SPEC, max_bytes=1 << 20)
    for i, (h, parent, toks) in enumerate(blocks):
        assert store.put(h, parent, toks, payload(i))
        assert store.contains(h)  # queued blocks count (served from memory until written)
    store.close()
    assert not list(tmp_path.glob("*.tmp"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(SPEC.file_name(h) for h, _, _ in blocks)
    store = DiskBlockStore(tmp_path, SPEC, max_bytes=1 << 20)  # a new process
    assert store.stats.files == 3
    assert bytes(store.get(*blocks[1])) == payload(1)
    path = tmp_path / SPEC.file_name(blocks[2][0])
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="llaisys.engine.prompt_cache"):
        assert store.get(*blocks[2]) is None
    assert "checksum" in caplog.text and store.stats.refused == 1
    assert not path.exists() and not store.contains(blocks[2][0])  # gone: never read again
    assert store.get(*chain(range(100, 104))[0]) is None  # absent: a plain miss
    store.close()


def test_size_cap_evicts_least_recently_used_also_across_restarts(tmp_path):
    blocks = chain(range(40))  # 10 blocks
    cap = 4 * SPEC.file_bytes
    store = DiskBlockStore(tmp_path, SPEC, max_bytes=cap)
    for i, b in enumerate(blocks[:4]):
        store.put(*b, payload(i))
    wait_written(store, 4)
    assert store.get(*blocks[0]) is not None  # block 0 becomes the most recently used
    store.put(*blocks[4], payload(4))
    wait_written(store, 5)
    store.close()
    names = {p.name for p in tmp_path.iterdir()}
    assert SPEC.file_name(blocks[1][0]) not in names  # the least recently used went
    assert SPEC.file_name(blocks[0][0]) in names and len(names) == 4
    assert store.stats.files_evicted == 1 and store.stats.disk_bytes <= cap
    # a later process orders by mtime (a read touches the file): block 0 outlives 2 and 3
    os.utime(tmp_path / SPEC.file_name(blocks[0][0]), ns=(time.time_ns(), time.time_ns() + 10**9))
    store = DiskBlockStore(tmp_path, SPEC, max_bytes=cap)
    for i in (5, 6):
        store.put(*blocks[i], payload(i))
    store.close()
    names = {p.name for p in tmp_path.iterdir()}
    assert SPEC.file_name(blocks[0][0]) in names and len(names) == 4
    assert SPEC.file_name(blocks[2][0]) not in names and SPEC.file_name(blocks[3][0]) not in names


def test_a_full_write_queue_drops_instead_of_blocking(tmp_path):
    store = DiskBlockStore(tmp_path, SPEC, max_bytes=1 << 20, queue_bytes=SPEC.payload_bytes)
    [(h, parent, toks)] = chain(range(4))
    with store._lock:  # held (re-entrant) so that the writer cannot take the block that fills the queue
        store._queue.append(b"x" * 32)
        store._pending[b"x" * 32] = (None, tuple(range(BS)), payload(0))
        store._queued_bytes = SPEC.payload_bytes
        assert not store.put(h, parent, toks, payload(1))
    assert store.stats.writes_dropped == 1
    store.close()


def test_options_are_checked():
    assert check_options("/tmp/x", "1GiB", "block", None) == 1 << 30
    with pytest.raises(ValueError, match="kv_layout='block'"):
        check_options("/tmp/x", "1GiB", "slot", None)
    with pytest.raises(ValueError, match="prefix caching"):
        check_options("/tmp/x", "1GiB", "block", False)
    with pytest.raises(ValueError, match="prompt_cache_max_bytes"):
        check_options("/tmp/x", "lots", "block", None)
    with pytest.raises(ValueError, match="prompt_cache_dir"):
        check_options("", "1GiB", "block", None)
    with pytest.raises(ValueError, match="holds no block"):
        DiskBlockStore("/tmp/never-made", SPEC, max_bytes=10)


# ---- the KV manager over the tier ------------------------------------------------------------
class FakeCoreCache:
    """Block bytes by block id, as llaisys.kv_cache.KVCache.read_block / write_block see them."""

    def __init__(self, n_blocks: int):
        self.data = {b: payload(1000 + b) for b in range(n_blocks)}

    def read_block(self, b: int) -> bytes:
        return self.data[b]

    def write_block(self, b: int, data) -> None:
        self.data[b] = bytes(data)


def req(rid, tokens):
    return Request(rid, rid, 0, list(tokens), SamplingParams(), seed=0, max_tokens=8,
                   eos_token_ids=frozenset(), times=RequestTimes(0.0))


def run(kv, core, rid, tokens, content):
    """Admit, 'compute' (write content(tokens of block) into each new block), cache, free."""
    r = req(rid, tokens)
    hit = kv.get_computed_blocks(r)
    assert kv.allocate_slots(r, r.num_tokens - hit.num_tokens, hit)
    for i, bid in enumerate(kv.block_table(rid)[len(hit.block_ids):], start=len(hit.block_ids)):
        core.data[bid] = content(tuple(tokens[i * BS:(i + 1) * BS]))
    r.num_computed_tokens = r.num_tokens
    kv.cache_blocks(r)
    table = list(kv.block_table(rid))
    kv.free(r)
    kv.check_invariants()
    return hit, table


def content(block_tokens) -> bytes:
    return np.resize(np.asarray(block_tokens, np.uint8), SPEC.payload_bytes).tobytes()


def test_evicted_blocks_go_to_disk_and_come_back_on_a_lookup(tmp_path):
    core = FakeCoreCache(6)
    kv = KVCacheManager(6, BS)
    store = DiskBlockStore(tmp_path, SPEC, max_bytes=1 << 20)
    kv.tier = PromptCacheTier(store, core)
    a, b = list(range(17)), list(range(100, 121))  # 4 and 5 full blocks
    run(kv, core, "a1", a, content)
    hit, _ = run(kv, core, "b", b, content)  # needs 6 blocks: evicts a's cached ones
    assert hit.num_tokens == 0 and store.stats.files_written + len(store._pending) >= 4
    hit, table = run(kv, core, "a2", a, content)
    assert hit.num_tokens == 16 and kv.tier.stats.hits >= 1
    for i, bid in enumerate(table[:4]):
        assert core.data[bid] == content(tuple(a[i * BS:(i + 1) * BS])), f"block {i} restored wrong"
    assert kv.stats.hit_tokens >= 16  # counted as cached tokens
    kv.tier.close(kv)


def test_restore_never_takes_a_block_of_the_hit_itself(tmp_path):
    """The memory hit's free blocks sit at the front of the LRU queue; restoring the rest of the
    prefix from disk must take other free blocks."""
    core = FakeCoreCache(8)
    kv = KVCacheManager(8, BS)
    kv.tier = PromptCacheTier(DiskBlockStore(tmp_path, SPEC, max_bytes=1 << 20), core)
    a = list(range(25))  # 6 full blocks
    run(kv, core, "a1", a, content)
    # evict a's blocks 2.. to disk only: take the tail blocks out of the cache by hand
    for h, _, _ in chain(a)[2:6]:
        blk = kv.blocks[kv.cached[h]]
        kv._evict(blk.block_id)  # saved to disk, out of the prefix cache, still free
        core.data[blk.block_id] = payload(999)  # reused since: a restore must write it back
    kv.tier.store.close()  # let the writer finish; a fresh store on the same directory reads them
    kv.tier = PromptCacheTier(DiskBlockStore(tmp_path, SPEC, max_bytes=1 << 20), core)
    first_two = [kv.cached[chain(a)[i][0]] for i in range(2)]
    for bid in reversed(first_two):
        kv.free_queue.move_to_end(bid, last=False)  # the hit blocks are now the very first to go
    hit, table = run(kv, core, "a2", a, content)
    assert hit.num_tokens == 24 and table[:2] == first_two
    for i, bid in enumerate(table[:6]):
        assert core.data[bid] == content(tuple(a[i * BS:(i + 1) * BS])), f"block {i}"
    kv.tier.close(kv)


def test_close_writes_every_cached_block(tmp_path):
    core = FakeCoreCache(8)
    kv = KVCacheManager(8, BS)
    kv.tier = PromptCacheTier(DiskBlockStore(tmp_path, SPEC, max_bytes=1 << 20), core)
    run(kv, core, "a", list(range(13)), content)
    assert not list(tmp_path.iterdir())  # nothing evicted yet
    kv.tier.close(kv)
    assert len(list(tmp_path.glob("*.kvb"))) == 3


def test_a_failing_core_copy_is_a_miss_and_leaks_no_block(tmp_path, caplog):
    class Broken(FakeCoreCache):
        def write_block(self, b, data):
            raise RuntimeError("device lost")

    core = FakeCoreCache(6)
    kv = KVCacheManager(6, BS)
    kv.tier = PromptCacheTier(DiskBlockStore(tmp_path, SPEC, max_bytes=1 << 20), core)
    a = list(range(17))
    run(kv, core, "a", a, content)
    kv.tier.close(kv)  # a's 4 blocks on disk
    kv = KVCacheManager(6, BS)  # a new process whose core copy fails
    broken = Broken(6)
    kv.tier = PromptCacheTier(DiskBlockStore(tmp_path, SPEC, max_bytes=1 << 20), broken)
    with caplog.at_level(logging.ERROR, logger="llaisys.engine.prompt_cache"):
        hit, _ = run(kv, broken, "a2", a, content)  # run() checks the invariants (no block lost)
    assert hit.num_tokens == 0 and kv.tier.stats.misses == 1 and "restoring a block failed" in caplog.text
    assert kv.num_free_blocks == 6
    kv.tier.close(kv)


def test_a_full_queue_skips_the_copy(tmp_path):
    class Counting(FakeCoreCache):
        reads = 0

        def read_block(self, b):
            Counting.reads += 1
            return super().read_block(b)

    core = Counting(4)
    store = DiskBlockStore(tmp_path, SPEC, max_bytes=1 << 20, queue_bytes=SPEC.payload_bytes)
    tier = PromptCacheTier(store, core)
    with store._lock:  # a block the writer has not taken yet fills the queue
        store._queue.append(b"x" * 32)
        store._pending[b"x" * 32] = (None, tuple(range(BS)), payload(0))
        store._queued_bytes = SPEC.payload_bytes
        [(h, parent, toks)] = chain(range(4))
        assert not store.has_room()
        tier.save(1, h, parent, toks)
    assert Counting.reads == 0 and tier.stats.writes_dropped == 1
    store.close()


def test_reads_stop_at_the_lookup_budget(tmp_path):
    core = FakeCoreCache(6)
    kv = KVCacheManager(6, BS)
    kv.tier = PromptCacheTier(DiskBlockStore(tmp_path, SPEC, max_bytes=1 << 20), core)
    a = list(range(17))
    run(kv, core, "a", a, content)
    kv.tier.close(kv)
    kv = KVCacheManager(6, BS)
    kv.tier = PromptCacheTier(DiskBlockStore(tmp_path, SPEC, max_bytes=1 << 20), FakeCoreCache(6),
                              load_budget_s=-1.0)  # spent before the first read
    hit, _ = run(kv, kv.tier.cache, "a2", a, content)
    assert hit.num_tokens == 0 and kv.tier.stats.hits == 0 and kv.num_free_blocks == 6
    kv.tier.close(kv)
