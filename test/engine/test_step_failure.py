"""Step-failure isolation with the fake runner (fast; the same on the real model is in
test_real_model_failures.py): a step that raises ends only the requests whose rows fail;
the others keep the output they would have had without them, in both KV layouts, whether the
failure comes before or after the step wrote K/V, and the search is bounded. An exception
while making one request's output ends that request only. The autouse leak check
(conftest.py) runs after each test."""

import pytest

from fake_runner import FakeRunner, FakeTokenizer, make_engine, run_all
from llaisys.engine import AsyncEngine, SamplingParams
from llaisys.engine.step_runner import isolation_budget

from test_llm_engine import results, workload


def bad_in(batch):
    return any(r.startswith("bad") for r in batch.req_ids)


def with_bad(eng, at_step=0, n_bad=1):
    """The workload plus n_bad requests named bad*, added before step `at_step`; finals."""
    workload(eng)
    finals = {}
    for step in range(10000):
        if step == at_step:
            for b in range(n_bad):
                eng.add_request(f"bad{b}", [9, 8, 7, 6][:1 + b % 4], SamplingParams(max_tokens=8, ignore_eos=True))
        if not eng.has_unfinished_requests():
            break
        finals.update({o.request_id: o for o in eng.step() if o.finished})
    return finals


@pytest.fixture(scope="module", params=["block", "slot"])
def layout(request):
    return request.param


def reference_for(layout):
    eng = make_engine(kv_layout=layout)
    workload(eng)
    return results(run_all(eng))


@pytest.mark.parametrize("at_step", [0, 3])  # in the prefill step, or once the others decode
@pytest.mark.parametrize("when", ["before", "after"])  # the runner raises before / after writing K/V
def test_only_the_failing_request_ends_and_the_others_are_unchanged(layout, at_step, when):
    ref = reference_for(layout)
    kw = {"fail_when": bad_in} if when == "before" else {"fail_after_write_when": bad_in}
    eng = make_engine(FakeRunner(**kw), kv_layout=layout)
    finals = with_bad(eng, at_step)
    bad = finals.pop("bad0")
    assert bad.outputs[0].finish_reason == "error" and "injected failure" in bad.error
    assert bad.outputs[0].token_ids == []
    assert results(finals) == ref
    assert eng.metrics.finished_total["error"] == 1


def test_several_failing_requests_are_all_found(layout):
    ref = reference_for(layout)
    runner = FakeRunner(fail_when=bad_in)
    eng = make_engine(runner, kv_layout=layout)
    finals = with_bad(eng, 0, n_bad=2)
    assert [finals.pop(f"bad{b}").outputs[0].finish_reason for b in range(2)] == ["error", "error"]
    assert results(finals) == ref


def test_a_failure_of_the_whole_batch_retries_a_bounded_number_of_times():
    calls = []
    runner = FakeRunner(fail_when=lambda batch: calls.append(batch.n_seqs) or True)  # the device is gone
    eng = make_engine(runner, max_num_seqs=16)
    for i in range(16):
        eng.add_request(f"r{i}", [i + 1, 2, 3], SamplingParams(max_tokens=4))
    finals = {o.request_id: o for o in eng.step()}
    assert len(finals) == 16 and all(o.outputs[0].finish_reason == "error" for o in finals.values())
    assert calls[0] == 16 and len(calls) - 1 == isolation_budget(16) == 16  # bounded, not 2 * 16 - 1
    assert all("injected failure" in o.error for o in finals.values())
    assert not eng.has_unfinished_requests()


def test_a_transient_failure_fails_nobody():
    state = {"failed": False}

    def once(batch):
        if not state["failed"]:
            state["failed"] = True
            return True
        return False

    eng = make_engine(FakeRunner(fail_after_write_when=once))
    workload(eng)
    assert results(run_all(eng)) == reference_for("block")


def test_isolation_costs_about_two_calls_per_halving():
    runner = FakeRunner(fail_when=bad_in)
    eng = make_engine(runner, max_num_seqs=16)
    for i in range(15):
        eng.add_request(f"r{i}", [i + 1, 2, 3], SamplingParams(max_tokens=1))
    eng.add_request("bad", [1, 2, 3], SamplingParams(max_tokens=1))
    finals = {o.request_id: o for o in eng.step()}
    assert finals["bad"].outputs[0].finish_reason == "error"
    assert all(finals[f"r{i}"].outputs[0].finish_reason == "length" for i in range(15))
    assert runner.calls == 1 + 2 * 4  # the failed step, then two halves at each of log2(16) levels


class PoisonTokenizer(FakeTokenizer):
    """Decoding POISON raises (a tokenizer bug that only one request's output reaches)."""

    POISON = 200

    def decode(self, ids, skip_special_tokens=False):
        if self.POISON in ids:
            raise KeyError("cannot decode the poison token")
        return super().decode(ids, skip_special_tokens)


def poison_next(hist, req):
    return PoisonTokenizer.POISON if req.request_id == "bad" and req.num_output_tokens == 2 else 65


def test_an_output_that_cannot_be_made_ends_only_its_request():
    from llaisys.engine import EngineConfig, LLMEngine

    eng = LLMEngine(EngineConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=256, block_size=4,
                                 num_blocks=64), FakeRunner(next_fn=poison_next), PoisonTokenizer())
    for rid in ("a", "bad", "b"):
        eng.add_request(rid, [1, 2, 3], SamplingParams(max_tokens=6, ignore_eos=True))
    finals = run_all(eng, check_deltas=False)
    assert finals["bad"].outputs[0].finish_reason == "error" and "poison" in finals["bad"].error
    assert finals["bad"].outputs[0].token_ids == [65, 65, PoisonTokenizer.POISON]
    for rid in ("a", "b"):
        assert finals[rid].outputs[0].finish_reason == "length" and finals[rid].outputs[0].text == "A" * 6


def test_sampled_ids_beyond_the_tokenizer_have_no_text():
    # the model's logits may be wider than the tokenizer (padding rows): such an id is sampled
    # (here: the runner's vocab is 300, the tokenizer knows 266) and decodes to nothing
    runner = FakeRunner(vocab=300, next_fn=lambda hist, req: 290 if req.num_output_tokens % 2 else 66)
    eng = make_engine(runner)
    eng.add_request("w", [1, 2, 3], SamplingParams(max_tokens=4, ignore_eos=True, logit_bias={290: 5}))
    (o,) = run_all(eng).values()
    assert o.outputs[0].token_ids == [66, 290, 66, 290] and o.outputs[0].text == "BB"
    assert o.outputs[0].finish_reason == "length"


def test_the_async_loop_survives_a_request_that_fails_every_step():
    ref = reference_for("block")
    eng = AsyncEngine(make_engine(FakeRunner(fail_when=bad_in)))
    try:
        recorder, calls = make_engine(), []
        recorder.add_request = lambda rid, ids, sp, **kw: calls.append((rid, ids, sp))
        workload(recorder)
        streams = {rid: eng.add_request(rid, ids, sp) for rid, ids, sp in calls}
        bads = [eng.add_request(f"bad{i}", [1, 2, 3], SamplingParams(max_tokens=5)) for i in range(5)]
        finals = {rid: list(s)[-1] for rid, s in streams.items()}
        assert results(finals) == ref
        assert all(list(b)[-1].outputs[0].finish_reason == "error" for b in bads)
        assert eng.is_alive and eng.num_unfinished == 0
    finally:
        eng.shutdown()
