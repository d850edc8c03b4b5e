"""The flat step contract the runner builds (InputBatch.prepare) from a scheduler output."""

import numpy as np
import pytest

from fake_runner import FakeRunner
from llaisys.engine import (KVCacheManager, ModelRunner, PoolingParams, Request, RequestTimes, SamplingParams,
                            SchedulerOutput, StepResult, unpack_result)
from llaisys.engine.input_batch import InputBatch
from llaisys.engine.sched_output import NewRequestData
from llaisys.engine.step_input import select_rows


def req(rid, n_prompt, computed, logprobs=None, pooling=False):
    r = Request(rid, rid, 0, list(range(100, 100 + n_prompt)), SamplingParams(logprobs=logprobs), seed=0,
                max_tokens=8, eos_token_ids=frozenset(), times=RequestTimes(0.0),
                pooling_params=PoolingParams() if pooling else None)
    r.num_computed_tokens = computed
    return r


def build_step_input(out, kv):
    """The StepInput of `out` from a fresh runner state: every row arrives as a new request."""
    ib = InputBatch(kv.layout, kv.block_size)
    out.new_reqs = [NewRequestData(r.request_id, r, list(r.all_token_ids),
                                   list(kv.block_table(r.request_id)) if kv.layout == "block" else [], r.slot_seq_id)
                    for r in out.scheduled]
    ib.update(out)
    return ib.prepare(out)


def schedule(kv, rows):
    out = SchedulerOutput()
    for r, n in rows:
        assert kv.allocate_slots(r, n)
        out.scheduled.append(r)
        out.num_scheduled_tokens[r.request_id] = n
        out.num_computed_tokens[r.request_id] = r.num_computed_tokens
        if r.is_pooling:
            out.pooling_req_ids.add(r.request_id)
        elif r.num_computed_tokens + n == r.num_tokens:
            out.sample_req_ids.add(r.request_id)
        out.total_num_scheduled_tokens += n
    return out


def test_block_layout_arrays():
    kv = KVCacheManager(16, 4)
    decode, middle, last = req("d", 10, 9), req("m", 10, 0), req("l", 7, 4)
    out = schedule(kv, [(decode, 1), (middle, 6), (last, 3)])
    b = build_step_input(out, kv)
    assert b.n_tokens == 10 and b.n_seqs == 3 and b.req_ids == ["d", "m", "l"]
    assert b.token_ids.tolist() == [109] + list(range(100, 106)) + [104, 105, 106]
    assert b.positions.tolist() == [9, 0, 1, 2, 3, 4, 5, 4, 5, 6]
    assert b.query_start.tolist() == [0, 1, 7, 10] and b.query_start.dtype == np.int32
    assert b.seq_of_token.tolist() == [0, 1, 1, 1, 1, 1, 1, 2, 2, 2]
    assert b.context_lens.tolist() == [10, 6, 7]
    assert b.sample_rows.tolist() == [0, 9] and [r.request_id for r in b.sample_requests] == ["d", "l"]
    tables = [kv.block_table(x) for x in "dml"]
    assert b.block_tables.shape == (3, 3) and b.max_blocks == 3
    for i, t in enumerate(tables):
        assert b.block_tables[i, :len(t)].tolist() == t
    want = [tables[s][p // 4] * 4 + p % 4 for s, p in zip(b.seq_of_token.tolist(), b.positions.tolist())]
    assert b.slot_mapping.tolist() == want and b.slot_mapping.dtype == np.int64
    assert b.seq_ids is None and b.kv_layout == "block"
    for x in (decode, middle, last):
        kv.free(x)


def test_slot_layout_arrays():
    kv = KVCacheManager(16, 4, enable_prefix_caching=False, layout="slot")
    a, c = req("a", 5, 0), req("c", 3, 0)
    out = schedule(kv, [(a, 5), (c, 3)])
    out.free_seq_ids = [7]
    b = build_step_input(out, kv)
    assert b.seq_ids.tolist() == [0, 1] and b.slot_mapping is None and b.block_tables is None
    assert b.free_seq_ids.tolist() == [7] and b.sample_rows.tolist() == [4, 7]
    kv.free(a)
    kv.free(c)


def test_empty_batch():
    b = build_step_input(SchedulerOutput(), KVCacheManager(4, 4))
    assert b.n_tokens == 0 and b.n_seqs == 0 and b.n_sample == 0 and b.block_tables.shape == (0, 0)


def test_unpack_result_maps_rows_and_logprobs():
    kv = KVCacheManager(16, 4)
    x, y = req("x", 3, 0, logprobs=2), req("y", 3, 0)
    b = build_step_input(schedule(kv, [(x, 3), (y, 3)]), kv)
    res = StepResult(np.array([5, 6]), np.array([-0.5, -0.25], np.float32),
                     np.array([[1, 2, 3], [4, 5, 6]]), np.array([[-1, -2, -3], [-1, -2, -3]], np.float32))
    sampled, lps, pooled = unpack_result(b, res)
    assert sampled == {"x": [5], "y": [6]} and lps == {"x": [{1: -1.0, 2: -2.0, 5: -0.5}]} and pooled == {}
    with pytest.raises(RuntimeError, match="returned 1 sampled ids for 2 sample rows"):
        unpack_result(b, StepResult(np.array([5])))
    kv.free(x)
    kv.free(y)


def test_pooling_rows_ask_hidden_states_of_every_token():
    """Pooling rows sample nothing; their tokens are the hidden rows, summed per request in
    float64; select_rows (failure isolation) keeps them."""
    kv = KVCacheManager(16, 4)
    g, p1, p2 = req("g", 5, 4), req("p1", 6, 0, pooling=True), req("p2", 9, 4, pooling=True)
    b = build_step_input(schedule(kv, [(g, 1), (p1, 3), (p2, 5)]), kv)
    assert b.pooling.tolist() == [False, True, True]
    assert b.sample_rows.tolist() == [0] and [r.request_id for r in b.sample_requests] == ["g"]
    assert b.hidden_rows.tolist() == list(range(1, 9)) and b.hidden_rows.dtype == np.int32
    hidden = np.arange(8 * 2, dtype=np.float32).reshape(8, 2) + 0.25  # [n_hidden, H]
    sampled, _, pooled = unpack_result(b, StepResult(np.array([7]), hidden=hidden))
    assert sampled == {"g": [7]} and set(pooled) == {"p1", "p2"}
    np.testing.assert_array_equal(pooled["p1"], hidden[:3].sum(0, dtype=np.float64))
    np.testing.assert_array_equal(pooled["p2"], hidden[3:].sum(0, dtype=np.float64))
    assert pooled["p1"].dtype == np.float64
    with pytest.raises(RuntimeError, match=r"hidden states of shape None for 8 pooling tokens"):
        unpack_result(b, StepResult(np.array([7])))
    sub = select_rows(b, [0, 2], keep_frees=True)
    assert sub.pooling.tolist() == [False, True] and sub.hidden_rows.tolist() == [1, 2, 3, 4, 5]
    for r in (g, p1, p2):
        kv.free(r)


def test_fake_runner_satisfies_the_protocol():
    assert isinstance(FakeRunner(), ModelRunner)


class Shadow:
    """Checks every prepare of an engine's InputBatch against a full gather of the same step:
    the steady-decode path (reusing the previous step's index arrays) must build the same
    StepInput, and counts how often it ran."""

    def __init__(self, engine):
        self.ib = engine.step_runner.inputs
        self.real_prepare, self.real_advanced = self.ib.prepare, self.ib._advanced
        self.ib.prepare, self.ib._advanced = self.prepare, self.advanced
        self.fast = self.steps = 0

    def advanced(self, out, starts):
        b = self.real_advanced(out, starts)
        self.fast += b is not None
        return b

    def prepare(self, out):
        got = self.real_prepare(out)
        self.steps += 1
        starts = np.fromiter((out.num_computed_tokens[r.request_id] for r in out.scheduled), np.int64,
                             len(out.scheduled))
        want = self.ib._gather(out, starts)
        for name in ("token_ids", "positions", "seq_of_token", "query_start", "context_lens", "sample_rows",
                     "pooling", "slot_mapping", "block_tables", "seq_ids", "free_seq_ids", "sample_offsets"):
            a, b = getattr(got, name), getattr(want, name)
            assert (a is None) == (b is None) and (a is None or (a.dtype == b.dtype and np.array_equal(a, b))), name
        assert got.req_ids == want.req_ids and got.finished_req_ids == want.finished_req_ids
        assert [r.request_id for r in got.sample_requests] == [r.request_id for r in want.sample_requests]
        return got


@pytest.mark.parametrize("layout", ["block", "slot"])
@pytest.mark.parametrize("num_blocks", [20, 400])  # preempting each other; all fit (steady decoding)
def test_steady_decode_steps_reuse_the_previous_arrays_and_build_the_same_input(layout, num_blocks):
    from fake_runner import make_engine, run_all

    eng = make_engine(FakeRunner(), kv_layout=layout, num_blocks=num_blocks, max_num_batched_tokens=16)
    shadow = Shadow(eng)
    for i in range(5):
        prompt = [(7 * i + 3 * j) % 250 + 1 for j in range(23 + 5 * i)]
        eng.add_request(f"r{i}", prompt, SamplingParams(max_tokens=20 + 3 * i, ignore_eos=True))
    finals = run_all(eng)
    assert all(len(o.outputs[0].token_ids) == 20 + 3 * int(rid[1:]) for rid, o in finals.items())
    assert shadow.fast > 0  # the steady-decode path ran, and matched the full gather every time
    if num_blocks == 400:  # nothing preempts: once the prompts are in, every step but a finish is steady
        assert shadow.fast >= shadow.steps // 2, (shadow.fast, shadow.steps)
