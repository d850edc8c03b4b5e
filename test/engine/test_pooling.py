"""Pooling requests through the scheduler, on the fake runner (the real core:
test_real_model_pooling.py). The fake runner hashes every token's "hidden state" from the
history it reads back from its fake KV cache, so a wrong block, slot, chunk, or a false prefix
hit changes the vector."""

import numpy as np
import pytest
from fake_runner import FakeRunner, history_hidden, make_engine, run_all

from llaisys.engine import PoolingParams, PoolingParamsError, PoolingRequestOutput, RequestOutput, SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
PROMPT = [ord(c) for c in "pooling requests share the scheduler"]  # 36 tokens


def expected(ids, normalize=True) -> np.ndarray:
    h = np.stack([history_hidden(ids[:p + 1]) for p in range(len(ids))]).astype(np.float64)
    v = h.sum(axis=0) / len(ids)
    return (v / np.linalg.norm(v) if normalize else v).astype(np.float32)


def test_alone_matches_the_model_and_finishes_with_its_vector():
    eng = make_engine()
    eng.add_request("e", PROMPT, pooling_params=PoolingParams())
    out = run_all(eng, check_deltas=False)["e"]
    assert isinstance(out, PoolingRequestOutput) and out.finished and out.finish_reason == "stop"
    np.testing.assert_allclose(out.outputs.data, expected(PROMPT), atol=1e-7)
    assert out.outputs.data.dtype == np.float32
    assert out.usage.prompt_tokens == len(PROMPT) and out.usage.completion_tokens == 0
    eng2 = make_engine()
    eng2.add_request("e", PROMPT, pooling_params=PoolingParams(normalize=False))
    np.testing.assert_allclose(run_all(eng2, check_deltas=False)["e"].outputs.data, expected(PROMPT, False), atol=1e-6)


@pytest.mark.parametrize("layout", ["block", "slot"])
@pytest.mark.parametrize("budget", [64, 8, 3])  # 8 and 3: the prompt is chunked over many steps
def test_mixed_with_generation_in_one_step(layout, budget):
    """Pooling and generation rows share steps (one runner call each): the same tokens and the
    same vectors as each alone; an input longer than the budget is chunked."""
    alone = make_engine(kv_layout=layout)
    alone.add_request("g", PROMPT[:10], GREEDY)
    gen_alone = run_all(alone)["g"].outputs[0].token_ids
    runner = FakeRunner()
    eng = make_engine(runner, kv_layout=layout, max_num_batched_tokens=budget, max_num_seqs=3)
    eng.add_request("g", PROMPT[:10], GREEDY)
    eng.add_request("e1", PROMPT, pooling_params=PoolingParams())
    eng.add_request("e2", PROMPT[5:], pooling_params=PoolingParams())
    finals = run_all(eng, check_deltas=False)
    assert finals["g"].outputs[0].token_ids == gen_alone
    np.testing.assert_allclose(finals["e1"].outputs.data, expected(PROMPT), atol=1e-7)
    np.testing.assert_allclose(finals["e2"].outputs.data, expected(PROMPT[5:]), atol=1e-7)
    mixed = [s for s in runner.steps if "g" in s and ("e1" in s or "e2" in s)]
    assert mixed, "no step computed pooling and generation rows together"
    assert all(n <= budget for s in runner.steps for n in [sum(s.values())])
    if budget < len(PROMPT):
        assert sum(1 for s in runner.steps if "e1" in s) >= len(PROMPT) // budget
    assert not any("e1" in s or "e2" in s for s in runner.sample_steps), "a pooling request was sampled"


def test_preempted_pooling_request_recomputes_and_gets_the_same_vector():
    # 12 blocks of 4 tokens: the 36-token input and a growing generation cannot both hold theirs
    eng = make_engine(num_blocks=12, max_num_batched_tokens=8, max_num_seqs=2, enable_prefix_caching=False)
    eng.add_request("g", PROMPT[:14], SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True))
    eng.add_request("e", PROMPT, pooling_params=PoolingParams())
    req = eng.scheduler.requests["e"]
    finals = run_all(eng, check_deltas=False)
    assert req.num_preemptions > 0  # the newest running request: the pooling one
    assert finals["e"].finish_reason == "stop"
    np.testing.assert_allclose(finals["e"].outputs.data, expected(PROMPT), atol=1e-7)


def test_abort_mid_prompt_frees_blocks_and_reports_once():
    eng = make_engine(max_num_batched_tokens=8)
    eng.add_request("e", PROMPT, pooling_params=PoolingParams())
    assert eng.step() == []  # a middle chunk: nothing to report
    assert eng.scheduler.kv.num_used_blocks > 0
    eng.abort_request("e")
    outs = eng.step()
    assert len(outs) == 1 and outs[0].finish_reason == "abort" and outs[0].outputs is None
    assert eng.scheduler.kv.num_used_blocks == 0 and not eng.has_unfinished_requests()
    m = eng.metrics
    assert m.pooling_finished_total == {"abort": 1} and m.pooled_tokens_total == 0


def test_a_failing_pooling_row_ends_only_its_request():
    """The engine's bisection covers pooling rows: the poisoned one errors, the others
    (pooling and generation) get exactly their lone results."""
    runner = FakeRunner(fail_when=lambda b: "bad" in b.req_ids)
    eng = make_engine(runner)
    eng.add_request("g", PROMPT[:10], GREEDY)
    eng.add_request("bad", PROMPT[3:], pooling_params=PoolingParams())
    eng.add_request("e", PROMPT, pooling_params=PoolingParams())
    finals = run_all(eng, check_deltas=False)
    assert finals["bad"].finish_reason == "error" and "injected" in finals["bad"].error
    assert finals["bad"].outputs is None
    np.testing.assert_allclose(finals["e"].outputs.data, expected(PROMPT), atol=1e-7)
    alone = make_engine()
    alone.add_request("g", PROMPT[:10], GREEDY)
    assert finals["g"].outputs[0].token_ids == run_all(alone)["g"].outputs[0].token_ids
    assert eng.metrics.pooling_finished_total == {"error": 1, "stop": 1}


def test_prefix_cache_is_shared_but_never_hit_by_pooling():
    """A pooling request publishes its full prompt blocks (a later generation request with the
    same prefix hits them, with unchanged tokens) but computes every token itself."""
    ref = make_engine()
    ref.add_request("g", PROMPT, GREEDY)
    want = run_all(ref)["g"].outputs[0].token_ids
    runner = FakeRunner()
    eng = make_engine(runner)
    eng.add_request("e", PROMPT, pooling_params=PoolingParams())
    run_all(eng, check_deltas=False)
    eng.add_request("g", PROMPT, GREEDY)
    out = run_all(eng)["g"]
    assert out.outputs[0].token_ids == want
    assert out.usage.cached_tokens == 32  # 8 full blocks of 4, before the last token
    eng.add_request("e2", PROMPT, pooling_params=PoolingParams())
    runner.steps.clear()
    np.testing.assert_allclose(run_all(eng, check_deltas=False)["e2"].outputs.data, expected(PROMPT), atol=1e-7)
    assert sum(s.get("e2", 0) for s in runner.steps) == len(PROMPT), "a pooling request took a prefix hit"
    assert eng.metrics.prefix_cache.queries == 1  # only the generation request looked up


def test_metrics_count_pooling_requests():
    eng = make_engine()
    for i in range(3):
        eng.add_request(f"e{i}", PROMPT[i:], pooling_params=PoolingParams())
    eng.add_request("g", PROMPT[:4], GREEDY)
    finals = run_all(eng, check_deltas=False)
    m = eng.metrics
    assert m.pooling_finished_total == {"stop": 3}
    assert m.pooled_tokens_total == sum(len(PROMPT) - i for i in range(3))
    assert m.finished_total == {"stop": 3, "length": 1}
    assert m.generation_tokens_total == 12  # pooling rows sample nothing
    assert isinstance(finals["g"], RequestOutput)


def test_bad_pooling_requests():
    eng = make_engine(max_model_len=32, num_blocks=16)
    with pytest.raises(ValueError, match="not both"):
        eng.add_request("x", [1, 2], GREEDY, pooling_params=PoolingParams())
    with pytest.raises(ValueError, match="more than max_model_len"):
        eng.add_request("x", [1] * 33, pooling_params=PoolingParams())
    with pytest.raises(ValueError, match="empty"):
        eng.add_request("x", [], pooling_params=PoolingParams())
    with pytest.raises(ValueError, match="outside the vocabulary"):
        eng.add_request("x", [1, 10 ** 6], pooling_params=PoolingParams())
    with pytest.raises(TypeError, match="PoolingParams"):
        eng.add_request("x", [1], pooling_params={"normalize": True})
    with pytest.raises(PoolingParamsError, match="normalize") as e:
        PoolingParams(normalize=1)
    assert e.value.param == "normalize"
    eng.add_request("x", [1, 2], pooling_params=PoolingParams())
    with pytest.raises(ValueError, match="already in use"):
        eng.add_request("x", [3], pooling_params=PoolingParams())
    run_all(eng, check_deltas=False)
