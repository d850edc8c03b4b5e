"""async_scheduling: each step is planned and started while the one before still computes
(vLLM's async scheduling), its decoding rows taking their token from that step's result.

What must hold: the outputs are the synchronous engine's (test_llm_engine, test_async_engine
and test_engine_properties run all three step orders; here the parts only this order has); the
next step really is planned and queued while the one before computes; a token ended by eos
costs one dropped row, one ended by max_tokens none; a preemption of a request in flight, a
failing step and grammar and penalised rows behave as without it (a lost device and the
flag's checks: test_async_output.py, for both flags). The autouse
leak check (conftest.py) runs after each test."""

import collections
import threading
import time
import types

import pytest

from fake_runner import EOS, FakeRunner, make_engine, run_all
from llaisys.engine import EngineConfig, SamplingParams, step_runner
from llaisys.engine.cache_reuse import CacheReuse
from llaisys.engine.scheduler import Scheduler

from test_async_output import PermitRunner
from test_llm_engine import results, workload


@pytest.fixture
def starts(monkeypatch):
    """Counts StepRunner.start calls: all of them, and those planned beside a step in flight."""
    seen = {"all": 0, "ahead": 0, "deferred": 0, "beside": []}  # beside: the rows of each step planned beside
    start = step_runner.StepRunner.start

    def counted(self, out, after=None):
        seen["all"] += 1
        seen["ahead"] += after is not None
        seen["deferred"] += len(out.deferred_req_ids)
        if after is not None:
            seen["beside"].append({r.request_id for r in after.out.scheduled})
        return start(self, out, after)

    monkeypatch.setattr(step_runner.StepRunner, "start", counted)
    return seen


def test_the_next_step_is_planned_while_the_one_before_computes():
    runner = PermitRunner()
    eng = make_engine(runner, async_scheduling=True)
    eng.add_request("a", [72, 105, 33], SamplingParams(max_tokens=4, ignore_eos=True))
    assert eng.step() == []  # the prefill started on the step thread
    assert runner.entered.acquire(timeout=5) and runner.ended == 0  # and is held there
    req = eng.scheduler.requests["a"]
    stepping = threading.Thread(target=eng.step)
    stepping.start()
    deadline = time.monotonic() + 5
    # the first decode is planned and queued while the prefill still computes: the request counts
    # both steps' tokens in flight and both of their samples on the way
    while (req.num_inflight_tokens, req.num_pending_tokens) != (4, 2) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert (req.num_inflight_tokens, req.num_pending_tokens) == (4, 2) and runner.ended == 0
    assert not req.output_token_ids
    runner.permits.release()  # the prefill ends; the decode runs at once, from its sampled id
    stepping.join(5)
    assert runner.entered.acquire(timeout=5)
    assert len(req.output_token_ids) == 1 and (req.num_inflight_tokens, req.num_pending_tokens) == (1, 1)
    for _ in range(8):
        runner.permits.release()
    got = results(run_all(eng, check_deltas=False))  # (the first outputs went to the steps above)
    eng.close()
    ref = make_engine()
    ref.add_request("a", [72, 105, 33], SamplingParams(max_tokens=4, ignore_eos=True))
    assert got == results(run_all(ref))


def rows_of(runner, rid: str) -> int:
    return sum(rid in step for step in runner.steps)


def test_eos_costs_one_dropped_row_and_max_tokens_none(starts):
    # the fake model ends "e" with eos at its 3rd token (the history length says which: a
    # request's output count changes on the engine thread while the step computes)
    def next_fn(hist, req):
        return EOS if req.request_id == "e" and len(hist) == 3 + 2 else 65

    counts = {}
    for mode in ({}, dict(async_scheduling=True)):
        runner = FakeRunner(next_fn=next_fn)
        eng = make_engine(runner, **mode)
        eng.add_request("e", [1, 2, 3], SamplingParams(max_tokens=10))
        eng.add_request("m", [4, 5, 6], SamplingParams(max_tokens=3, ignore_eos=True))
        eng.add_request("long", [7, 8, 9], SamplingParams(max_tokens=12, ignore_eos=True))
        got = results(run_all(eng))
        counts[bool(mode)] = (rows_of(runner, "e"), rows_of(runner, "m"), got)
        eng.close()
    assert starts["ahead"] > 5
    (e0, m0, want), (e1, m1, got) = counts[False], counts[True]
    assert got == want and want["e"] == [([65, 65, EOS], "AA", "stop")]
    assert (e0, m0) == (3, 3) and (e1, m1) == (4, 3)  # the row after eos is computed and dropped


def test_a_request_in_flight_can_be_preempted(monkeypatch, starts):
    """A tiny pool: planning ahead preempts requests whose row the step in flight computes;
    their in-flight token is dropped and recomputed, and every output is the roomy engine's."""
    in_flight = []
    preempt = Scheduler._preempt

    def watched(self, req, out):
        in_flight.append(req.num_inflight_tokens > 0)
        preempt(self, req, out)

    monkeypatch.setattr(Scheduler, "_preempt", watched)
    ref = make_engine(num_blocks=512, max_num_batched_tokens=256, max_num_seqs=16)
    workload(ref)
    want = results(run_all(ref))
    for layout in ("block", "slot"):
        in_flight.clear()
        eng = make_engine(num_blocks=14, max_num_batched_tokens=24, kv_layout=layout, async_scheduling=True)
        workload(eng)
        assert results(run_all(eng)) == want
        assert any(in_flight), "no preemption hit a request with a row in flight"
        eng.close()
    assert starts["deferred"] > 100


def test_a_failing_step_skips_the_one_planned_beside_it(starts):
    """Every step with r3 fails: the step planned beside a failed one is not run on the step
    thread but after the failing rows are found, without them; the others' outputs are unchanged."""
    ref = make_engine()
    workload(ref, n=8)
    want = results(run_all(ref))
    runner = FakeRunner(fail_when=lambda b: "r3" in b.req_ids)
    eng = make_engine(runner, async_scheduling=True)
    workload(eng, n=8)
    got = results(run_all(eng))
    assert got["r3"][0][2] == "error"
    assert {k: v for k, v in got.items() if k != "r3"} == {k: v for k, v in want.items() if k != "r3"}
    assert starts["ahead"] > 10  # and the engine went on planning ahead after the failure
    eng.close()


class StubGrammar:
    """Stands in for a grammar's matcher (structured_matcher.Matcher): accepts every token (the
    fake runner makes no sampling rows, so no mask is asked of it)."""

    done = False

    def advance(self, token_id: int) -> None:
        pass


def two_requests(eng) -> None:
    eng.add_request("p", [97, 98], SamplingParams(max_tokens=6, ignore_eos=True, temperature=1.0, seed=5,
                                                  presence_penalty=0.5))
    eng.add_request("q", [99, 98], SamplingParams(max_tokens=9, ignore_eos=True))
    eng.scheduler.requests["q"].structured = StubGrammar()


def test_grammar_and_penalised_rows_are_planned_ahead(starts):
    """What the token in flight decides for a row (a grammar's mask, the penalties' output) is
    made on the step thread from that token (the 0.5B checks the tokens: test_real_model_engine,
    and the fill itself: test_structured_ahead)."""
    eng = make_engine(async_scheduling=True)
    two_requests(eng)
    got = results(run_all(eng))
    assert len([rows for rows in starts["beside"] if {"p", "q"} <= rows]) >= 4
    ref = make_engine()
    two_requests(ref)
    assert got == results(run_all(ref))
    eng.close()


def test_seeded_and_min_tokens_draws_are_the_synchronous_ones(starts):
    """The draw a row makes (its seed's step, the min_tokens ban on eos) counts the token the step
    in flight samples first."""
    def workload_min(eng):
        for i in range(6):
            eng.add_request(f"s{i}", [10 + i, 20, 30], SamplingParams(max_tokens=12, temperature=1.0, seed=i,
                                                                     min_tokens=4 + i))
    ref = FakeRunner(next_fn=None)
    want_eng = make_engine(ref)
    workload_min(want_eng)
    want = results(run_all(want_eng))
    eng = make_engine(FakeRunner(), async_scheduling=True)
    workload_min(eng)
    assert results(run_all(eng)) == want and starts["deferred"] > 20
    eng.close()


@pytest.mark.parametrize("part", ["tier", "reuse"])
def test_not_beside_the_disk_prompt_cache_or_cache_reuse(starts, part):
    """They move K/V on the engine's thread while it schedules (LLM wires them; stood in for
    here, never called: no block is evicted or reused)."""
    eng = make_engine(async_scheduling=True)
    kv = eng.scheduler.kv
    if part == "tier":
        kv.tier = types.SimpleNamespace(stats=None)
    else:
        kv.reuse = CacheReuse(4, cache=None)  # one request: nothing to plan from, nothing copied
    eng.add_request("a", [1, 2, 3], SamplingParams(max_tokens=4, ignore_eos=True))
    run_all(eng)
    assert starts["ahead"] == 0
    eng.close()


def test_the_flag_implies_async_output_and_serve_refuses_the_disk_cache_beside_it():
    """(A bad value, speculation and the flag's way through serve: test_async_output.py, both flags.)"""
    from llaisys.cli import build_parser
    from llaisys.server.serve import build_state

    assert EngineConfig(async_scheduling=True).async_output is True
    for flags in (["--prompt-cache-dir", "/tmp/x"], ["--cache-reuse", "64"]):
        with pytest.raises(ValueError, match="--async-scheduling does not combine"):
            build_state(build_parser().parse_args(["serve", "some-model", "--async-scheduling"] + flags))


def test_a_skipped_step_whose_rows_all_failed_still_frees_its_seq_ids():
    """SLOT: c ends while a failing request's prefill computes; the step planned beside that
    prefill holds only the failing row and c's freed seq id. Run after the failure search without
    its row, it must still clear the seq, or the next request given that seq id reads c's cells."""
    class Recording(FakeRunner):  # records every call that raised (the failure search hides them)
        def __init__(self, **kw):
            super().__init__(**kw)
            self.raised = []

        def execute(self, batch):
            try:
                return super().execute(batch)
            except Exception as e:
                self.raised.append((list(batch.req_ids), str(e)))
                raise

    runner = Recording(fail_when=lambda b: "bad" in b.req_ids)
    eng = make_engine(runner, kv_layout="slot", async_scheduling=True, max_num_seqs=2)
    eng.scheduler.kv._free_seq_ids = collections.deque([0, 1])  # two seq ids: d and e reuse c's and bad's
    eng.add_request("c", [1, 2, 3], SamplingParams(max_tokens=3, ignore_eos=True))
    c = eng.scheduler.requests["c"]
    while not (c.num_pending_tokens and len(c.output_token_ids) + c.num_pending_tokens >= c.max_tokens):
        eng.step()
    eng.add_request("bad", [4, 5, 6], SamplingParams(max_tokens=4, ignore_eos=True))
    finals = run_all(eng, check_deltas=False)
    assert finals["bad"].outputs[0].finish_reason == "error"
    assert finals["c"].outputs[0].finish_reason == "length"
    eng.add_request("d", [7, 8, 9], SamplingParams(max_tokens=4, ignore_eos=True))  # takes a freed seq id
    eng.add_request("e", [7, 8, 9, 10], SamplingParams(max_tokens=4, ignore_eos=True))
    finals = run_all(eng)
    assert [finals[r].outputs[0].finish_reason for r in "de"] == ["length", "length"], finals
    assert all("bad" in rows for rows, _ in runner.raised), runner.raised  # no stale seq met d or e
    eng.close()
