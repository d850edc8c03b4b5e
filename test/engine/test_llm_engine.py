"""LLMEngine end to end with the fake runner: preemption/recompute, prefix caching, n > 1,
abort, errors, the SLOT layout and metrics. Identical outputs across configurations show
that no bookkeeping path feeds the model a wrong history."""

import pytest

from fake_runner import EOS, FakeRunner, drain, make_engine, run_all
from llaisys.engine import SamplingParams
from llaisys.engine.config import STEP_ORDERS


def workload(eng, n=10, seed_base=100):
    for i in range(n):
        prompt = [(7 * i + j) % 250 + 1 for j in range(5 + (13 * i) % 37)]
        sp = SamplingParams(max_tokens=4 + (5 * i) % 23, temperature=0.8 if i % 3 else 0.0, seed=seed_base + i,
                            ignore_eos=i % 2 == 0, stop=["\n\n"] if i % 4 == 1 else None)
        eng.add_request(f"r{i}", prompt, sp)


def results(finals):
    return {k: [(c.token_ids, c.text, c.finish_reason) for c in o.outputs] for k, o in finals.items()}


@pytest.fixture(scope="module")
def reference():
    eng = make_engine(num_blocks=512, max_num_batched_tokens=256, max_num_seqs=16)
    workload(eng)
    return results(run_all(eng))


MODES = STEP_ORDERS  # the engine's three step orders (test_async_engine and the property test run them too)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("config", [
    dict(num_blocks=14, max_num_batched_tokens=24),
    dict(num_blocks=14, max_num_batched_tokens=24, enable_prefix_caching=False),
    dict(num_blocks=20, max_num_batched_tokens=8, max_num_seqs=3, long_prefill_token_threshold=5),
    dict(num_blocks=14, max_num_batched_tokens=24, kv_layout="slot"),
    dict(num_blocks=40, block_size=16, max_num_batched_tokens=32),
])
def test_constrained_runs_match_the_unconstrained_one(reference, config, mode):
    eng = make_engine(**config, **MODES[mode])
    workload(eng)
    assert results(run_all(eng)) == reference
    if config["num_blocks"] == 14:
        assert eng.metrics.num_preemptions_total > 0


def test_second_turn_reuses_first_turn_blocks():
    eng = make_engine(block_size=4)
    p1 = list(range(1, 11))
    (o1,) = run_all_one(eng, "t1", p1, SamplingParams(max_tokens=6, ignore_eos=True))
    assert o1.usage.cached_tokens == 0
    turn2 = p1 + o1.outputs[0].token_ids + [42, 43, 44]
    (o2,) = run_all_one(eng, "t2", turn2, SamplingParams(max_tokens=6, ignore_eos=True))
    computed_before = len(p1) + 6 - 1  # the last sampled token was never computed
    assert o2.usage.cached_tokens == computed_before // 4 * 4 == 12
    stats = eng.scheduler.kv.stats
    assert (stats.queries, stats.query_hits, stats.hit_tokens) == (2, 1, 12)
    cold = make_engine(enable_prefix_caching=False)
    (o3,) = run_all_one(cold, "t2", turn2, SamplingParams(max_tokens=6, ignore_eos=True))
    assert o3.outputs[0].token_ids == o2.outputs[0].token_ids


def test_eviction_under_pressure_then_miss_with_same_output():
    eng = make_engine(num_blocks=8, block_size=4, max_model_len=32)
    p = list(range(1, 13))
    (a,) = run_all_one(eng, "a", p, SamplingParams(max_tokens=3))
    for i in range(3):  # fill the pool with other prompts: the cached blocks get evicted
        run_all_one(eng, f"x{i}", [200 + i] * 20, SamplingParams(max_tokens=4))
    assert eng.scheduler.kv.stats.evictions > 0
    (b,) = run_all_one(eng, "b", p, SamplingParams(max_tokens=3))
    assert b.usage.cached_tokens == 0 and b.outputs[0].token_ids == a.outputs[0].token_ids


def run_all_one(eng, rid, prompt, sp):
    eng.add_request(rid, prompt, sp)
    return list(run_all(eng).values())


def test_n_siblings_share_the_prompt_blocks():
    runner = FakeRunner()
    eng = make_engine(runner, block_size=4)
    prompt = list(range(1, 19))  # 18 tokens: 4 full blocks, 2 in the last
    eng.add_request("g", prompt, SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=6, ignore_eos=True))
    (out,) = run_all(eng).values()
    assert [c.index for c in out.outputs] == [0, 1, 2] and out.usage.completion_tokens == 18
    computed = {}
    for step in runner.steps:
        for rid, n in step.items():
            computed[rid] = computed.get(rid, 0) + n
    assert computed["g#0"] == 18 + 5 and computed["g#1"] == computed["g#2"] == 2 + 5  # only the tail
    assert len({tuple(c.token_ids) for c in out.outputs}) == 3  # seeds 5, 6, 7: different samples
    greedy = make_engine()
    greedy.add_request("g", prompt, SamplingParams(n=2, max_tokens=5, ignore_eos=True))
    (g,) = run_all(greedy).values()
    assert g.outputs[0].token_ids == g.outputs[1].token_ids


def test_seed_is_recorded_and_reproduces():
    eng = make_engine(seed=None)
    eng.add_request("a", [1, 2, 3], SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True))
    seed = eng.scheduler.requests["a"].seed
    (a,) = run_all(eng).values()
    eng.add_request("b", [1, 2, 3], SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True, seed=seed))
    (b,) = run_all(eng).values()
    assert a.outputs[0].token_ids == b.outputs[0].token_ids


def test_abort_in_every_state_reports_abort():
    eng = make_engine(num_blocks=10, max_num_batched_tokens=8, max_num_seqs=4)
    eng.add_request("running", list(range(1, 30)), SamplingParams(max_tokens=10, ignore_eos=True))
    eng.add_request("waiting", [5, 6, 7], SamplingParams(max_tokens=3))
    eng.step()  # "running" is mid-prefill, "waiting" waits
    assert eng.scheduler.requests["running"].num_computed_tokens == 8
    eng.abort_request(["running", "waiting", "unknown"])
    outs = {o.request_id: o for o in eng.step()}
    assert set(outs) == {"running", "waiting"}
    assert all(o.finished and o.outputs[0].finish_reason == "abort" for o in outs.values())
    assert not eng.has_unfinished_requests() and eng.step() == []
    eng.abort_request("running")  # finished: no-op
    assert eng.step() == []
    # preempted, and a group of siblings
    for i in range(3):
        eng.add_request(f"p{i}", [10 * i + 1] * 7, SamplingParams(max_tokens=20, ignore_eos=True))
    while not eng.scheduler.num_preempted_waiting:
        eng.step()
    victim = next(r for r in eng.scheduler.waiting).external_id
    eng.abort_request(victim)
    eng.add_request("sib", [1, 2, 3], SamplingParams(n=2, max_tokens=30, ignore_eos=True))
    finals = {o.request_id: o for o in eng.step() if o.finished}
    eng.abort_request("sib")
    finals.update(run_all(eng, check_deltas=False))
    assert finals[victim].outputs[0].finish_reason == "abort"
    assert [c.finish_reason for c in finals["sib"].outputs] == ["abort", "abort"]


def test_runner_failure_finishes_the_step_with_error_and_the_engine_goes_on():
    fail = {"on": True}
    runner = FakeRunner(fail_when=lambda batch: fail["on"] and "bad" in batch.req_ids)
    eng = make_engine(runner)
    eng.add_request("bad", [1, 2, 3], SamplingParams(max_tokens=4))
    (o,) = eng.step()
    assert o.finished and o.outputs[0].finish_reason == "error" and "injected failure" in o.error
    fail["on"] = False
    eng.add_request("good", [1, 2, 3], SamplingParams(max_tokens=4, ignore_eos=True))
    (g,) = run_all(eng).values()
    assert g.outputs[0].finish_reason == "length"


def test_eos_from_the_model_stops():
    runner = FakeRunner(next_fn=lambda hist, req: EOS if req.num_output_tokens == 2 else 65)
    eng = make_engine(runner)
    eng.add_request("e", [1, 2], SamplingParams(max_tokens=10))
    eng.add_request("m", [1, 2], SamplingParams(max_tokens=10, min_tokens=4))
    finals = run_all(eng)
    assert finals["e"].outputs[0].token_ids == [65, 65, EOS] and finals["e"].outputs[0].text == "AA"
    assert finals["e"].outputs[0].finish_reason == "stop"
    assert EOS not in finals["m"].outputs[0].token_ids  # banned by the min_tokens bias


def test_bad_requests_are_rejected():
    eng = make_engine(max_model_len=64)
    with pytest.raises(ValueError, match="empty"):
        eng.add_request("a", [], SamplingParams())
    with pytest.raises(ValueError, match="outside the vocabulary"):
        eng.add_request("a", [1, 999], SamplingParams())
    with pytest.raises(ValueError, match="flat sequence of integers"):
        eng.add_request("a", [[1]], SamplingParams())
    with pytest.raises(ValueError, match=r"max_tokens \(60\) = 70 tokens exceeds max_model_len \(64\)"):
        eng.add_request("a", [1] * 10, SamplingParams(max_tokens=60))
    eng.add_request("a", [1], SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="already in use"):
        eng.add_request("a", [1], SamplingParams())
    drain(eng)


def test_metrics():
    eng = make_engine(num_blocks=14, max_num_batched_tokens=24)
    workload(eng)
    finals = run_all(eng)
    m = eng.metrics
    assert m.num_running == m.num_waiting == 0 and m.kv_usage == 0.0
    assert sum(m.finished_total.values()) == 10 and len(m.ttft) == len(m.e2e) == 10
    assert m.generation_tokens_total == sum(len(c.token_ids) for o in finals.values() for c in o.outputs)
    assert m.prompt_tokens_total == sum(5 + (13 * i) % 37 for i in range(10))
    assert m.num_preemptions_total > 0 and m.computed_tokens_total >= m.prompt_tokens_total
    assert all(t > 0 for t in m.tpot) and 0.0 <= m.prefix_cache_hit_rate <= 1.0


def test_max_tokens_none_runs_to_max_model_len():
    eng = make_engine(max_model_len=20)
    eng.add_request("a", list(range(1, 13)), SamplingParams(max_tokens=None, ignore_eos=True))
    (o,) = run_all(eng).values()
    assert len(o.outputs[0].token_ids) == 8 and o.outputs[0].finish_reason == "length"


def test_final_only_requests_report_once_with_the_whole_text():
    """final_only (LLM.generate): no per-step outputs; the one final output equals a streamed
    run's final output, its delta the whole text (stop strings and n > 1 included)."""
    sp = SamplingParams(n=2, temperature=1.0, seed=3, max_tokens=12, stop=["a"], ignore_eos=True)
    streamed = make_engine()
    streamed.add_request("s", [5, 6, 7], sp)
    (want,) = run_all(streamed).values()
    eng = make_engine()
    eng.add_request("s", [5, 6, 7], sp, final_only=True)
    seen = []
    while eng.has_unfinished_requests():
        seen += eng.step()
    assert len(seen) == 1 and seen[0].finished
    got = seen[0]
    for g, w in zip(got.outputs, want.outputs):
        assert (g.text, g.token_ids, g.finish_reason, g.stop_reason) == (w.text, w.token_ids, w.finish_reason,
                                                                          w.stop_reason)
        assert g.delta_text == g.text and g.delta_token_ids == g.token_ids
