"""Scheduling: order, token budget, chunked prefill, no decode starvation, preemption, abort."""

import pytest

from fake_runner import FakeRunner, drain, make_engine, run_all
from llaisys.engine import (EngineConfig, Request, RequestStatus, RequestTimes, SamplingParams,
                            Scheduler)

S = RequestStatus


def new_req(rid, n_prompt, max_tokens=100, **sp):
    base = 1000 * (sum(map(ord, rid)) % 50)  # distinct prompts: no accidental prefix hits
    return Request(rid, rid, 0, list(range(base + 1, base + n_prompt + 1)), SamplingParams(max_tokens=max_tokens, **sp),
                   seed=0, max_tokens=max_tokens, eos_token_ids=frozenset(), times=RequestTimes(0.0))


def make_scheduler(**cfg):
    base = dict(max_num_seqs=8, max_num_batched_tokens=16, max_model_len=512, block_size=4, num_blocks=64)
    base.update(cfg)
    return Scheduler(EngineConfig(**base))


def step(sched, token=7):
    """One step without a model: every sampled request gets `token`."""
    out = sched.schedule()
    sched.update_from_output(out, {rid: [token] for rid in out.sample_req_ids})
    return out


def add(sched, *reqs):
    for r in reqs:
        sched.add_request(r)


def finish_all(sched):
    for rid in list(sched.requests):
        sched.abort(rid)


def test_running_first_then_waiting_in_arrival_order():
    sched = make_scheduler(max_num_batched_tokens=10)
    a = new_req("a", 4)
    add(sched, a)
    assert step(sched).num_scheduled_tokens == {"a": 4}
    add(sched, new_req("b", 20), new_req("c", 3))
    out = step(sched)
    assert out.num_scheduled_tokens == {"a": 1, "b": 9} and out.new_req_ids == ["b"]
    assert out.sample_req_ids == {"a"}  # b's chunk is in the middle of its prompt
    out = step(sched)
    assert out.num_scheduled_tokens == {"a": 1, "b": 9}
    out = step(sched)
    assert list(out.num_scheduled_tokens.items()) == [("a", 1), ("b", 2), ("c", 3)]
    assert out.sample_req_ids == {"a", "b", "c"} and out.total_num_scheduled_tokens == 6
    finish_all(sched)


def test_max_num_seqs_caps_the_running_set():
    sched = make_scheduler(max_num_seqs=2, max_num_batched_tokens=64)
    add(sched, *[new_req(f"r{i}", 3) for i in range(4)])
    out = step(sched)
    assert out.new_req_ids == ["r0", "r1"] and len(sched.waiting) == 2
    finish_all(sched)


def test_chunked_prefill_respects_threshold_and_samples_only_at_the_end():
    sched = make_scheduler(max_num_batched_tokens=64, long_prefill_token_threshold=8)
    r = new_req("long", 30)
    add(sched, r)
    chunks = [step(sched) for _ in range(4)]
    assert [o.num_scheduled_tokens["long"] for o in chunks] == [8, 8, 8, 6]
    assert [o.num_computed_tokens["long"] for o in chunks] == [0, 8, 16, 24]
    assert [bool(o.sample_req_ids) for o in chunks] == [False, False, False, True]
    assert r.output_token_ids == [7] and r.num_computed_tokens == 30
    finish_all(sched)


def test_long_prefill_never_stalls_decodes():
    """A long prompt ahead of short ones in the running list: the short ones still get one
    token, and produce one token, every step."""
    eng = make_engine(max_num_batched_tokens=16, long_prefill_token_threshold=12, num_blocks=128)
    eng.add_request("long", list(range(1, 201)), SamplingParams(max_tokens=4, ignore_eos=True))
    eng.step()  # long is running first, mid-prefill
    for i in range(3):
        eng.add_request(f"s{i}", [10 + i, 11, 12], SamplingParams(max_tokens=30, ignore_eos=True))
    runner = eng.runner
    while not all(eng.scheduler.requests[f"s{i}"].output_token_ids for i in range(3)):
        eng.step()  # the short ones are admitted and prefilled with what the budget leaves
    while eng.scheduler.requests["long"].num_computed_tokens < 200:
        before = {f"s{i}": eng.scheduler.requests[f"s{i}"].num_output_tokens for i in range(3)}
        outs = {o.request_id: o for o in eng.step()}
        sched = runner.steps[-1]
        assert sum(sched.values()) <= 16
        assert all(sched[f"s{i}"] == 1 for i in range(3)), sched
        for i in range(3):
            assert outs[f"s{i}"].outputs[0].delta_token_ids and \
                len(outs[f"s{i}"].outputs[0].token_ids) == before[f"s{i}"] + 1
    drain(eng)


def test_token_budget_and_seq_cap_every_step():
    runner = FakeRunner()
    eng = make_engine(runner, max_num_seqs=5, max_num_batched_tokens=20, num_blocks=40)
    for i in range(12):
        eng.add_request(f"r{i}", list(range(1, 3 + 7 * i % 40)), SamplingParams(max_tokens=5 + i, ignore_eos=True))
    run_all(eng)
    assert runner.steps and all(sum(s.values()) <= 20 and len(s) <= 5 for s in runner.steps)


def test_preempts_newest_and_requeues_it_first():
    sched = make_scheduler(num_blocks=6, max_num_batched_tokens=64)  # 24 slots
    a, b, c = new_req("a", 7), new_req("b", 7), new_req("c", 7)
    add(sched, a, b, c)
    step(sched)  # each computes 7 tokens in 2 blocks (8 slots): all 6 used
    step(sched)  # position 7 still fits
    out = step(sched)  # position 8 needs a third block: c (newest) goes
    assert out.preempted_req_ids == ["c"] and c.status == S.PREEMPTED
    assert c.num_computed_tokens == 0 and c.output_token_ids == [7, 7] and sched.waiting[0] is c
    assert out.num_scheduled_tokens == {"a": 1, "b": 1} and not out.new_req_ids
    assert sched.num_preemptions == 1 and c.num_preemptions == 1
    finish_all(sched)


def test_a_request_that_alone_cannot_grow_preempts_itself_and_resumes():
    sched = make_scheduler(num_blocks=3, max_num_batched_tokens=64)
    a, b = new_req("a", 4, max_tokens=6), new_req("b", 4, max_tokens=2)
    add(sched, a, b)
    step(sched)
    out = step(sched)  # a needs a 2nd block (b holds 1, a 1, 1 free) -> fine; b too -> b preempted
    assert out.preempted_req_ids == ["b"]
    while sched.requests:
        step(sched)
    assert a.output_token_ids == [7] * 6 and b.output_token_ids == [7] * 2
    assert b.status == S.FINISHED_LENGTH and b.num_preemptions >= 1


def test_abort_in_every_state():
    sched = make_scheduler(num_blocks=6, max_num_batched_tokens=8)
    waiting, prefilling = new_req("w", 3), new_req("p", 20)
    add(sched, prefilling, waiting)
    step(sched)  # p takes the whole budget mid-prefill; w waits
    assert prefilling.status == S.RUNNING and prefilling.num_computed_tokens == 8 and waiting.status == S.WAITING
    assert sched.abort("p") is prefilling and prefilling.status == S.FINISHED_ABORTED
    assert sched.kv.num_used_blocks == 0
    assert sched.abort("w") is waiting and waiting.status == S.FINISHED_ABORTED and not sched.waiting
    out = sched.schedule()
    assert out.finished_req_ids == {"p", "w"} and out.total_num_scheduled_tokens == 0
    assert sched.abort("p") is None and sched.abort("nope") is None  # finished / unknown: no-op
    # preempted
    a, b, c = new_req("a", 7), new_req("b", 7), new_req("c", 7)
    add(sched, a, b, c)
    while c.status != S.PREEMPTED:
        step(sched)
    sched.abort("c")
    assert c.status == S.FINISHED_ABORTED and c not in sched.waiting
    finish_all(sched)


def test_abort_while_the_step_runs_is_skipped_by_update():
    sched = make_scheduler()
    r = new_req("r", 5)
    add(sched, r)
    out = sched.schedule()
    sched.abort("r")
    assert sched.update_from_output(out, {"r": [1]}) == []
    assert r.output_token_ids == [] and r.status == S.FINISHED_ABORTED


def test_duplicate_ids_rejected():
    sched = make_scheduler()
    add(sched, new_req("r", 3))
    with pytest.raises(ValueError, match="already in use"):
        sched.add_request(new_req("r", 3))
    finish_all(sched)
