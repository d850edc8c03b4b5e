"""async_output: a step's outputs are made while the next step computes on the step thread.

What must hold: the outputs are those of the synchronous engine (test_llm_engine's and
test_engine_properties' comparisons run both ways; here the parts only this mode has); the text
of a step really is processed while the next core call runs; a request a stop string ends
costs one dropped row and nothing else; aborts, failing rows and a lost device behave as
without it; close() waits for the step in flight. The autouse leak check (conftest.py) runs
after each test."""

import threading

import pytest

from fake_runner import FakeRunner, FakeTokenizer, make_engine, run_all
from llaisys.engine import EngineConfig, EngineDeadError, LLMEngine, SamplingParams

from test_async_engine import GatedRunner
from test_device_lost import LosingRunner
from test_llm_engine import results, workload


class PermitRunner(FakeRunner):
    """The fake model, whose every call waits for a permit the test releases, and records the
    thread it ran on and how many calls have ended."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.permits = threading.Semaphore(0)
        self.entered = threading.Semaphore(0)
        self.ended = 0
        self.threads = set()

    def execute(self, batch):
        self.threads.add(threading.current_thread().name)
        self.entered.release()
        assert self.permits.acquire(timeout=10), "the test never let this call run"
        try:
            return super().execute(batch)
        finally:
            self.ended += 1


class WatchingTokenizer(FakeTokenizer):
    """Records, at each decode, whether the engine had a step with rows computing."""

    def __init__(self):
        super().__init__()
        self.engine = None
        self.computing = []

    def decode(self, ids, skip_special_tokens=False):
        self.computing.append(self.engine._computing())
        return super().decode(ids, skip_special_tokens)


def test_a_steps_outputs_are_made_while_the_next_step_computes():
    runner, tok = PermitRunner(), WatchingTokenizer()
    eng = LLMEngine(EngineConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=128, block_size=4,
                                 num_blocks=64, async_output=True), runner, tok)
    tok.engine = eng
    eng.add_request("a", [72, 105], SamplingParams(max_tokens=3, ignore_eos=True))
    assert eng.step() == []  # the prefill started on the step thread; nothing is known yet
    assert runner.entered.acquire(timeout=5) and runner.ended == 0
    runner.permits.release()  # the prefill may finish
    (o,) = eng.step()  # waits for the prefill, starts the first decode, makes the prefill's output
    assert len(o.outputs[0].token_ids) == 1 and not o.finished
    assert runner.entered.acquire(timeout=5)
    assert runner.ended == 1, "the output was made while the decode step still computed"
    runner.permits.release()
    (o,) = eng.step()
    assert len(o.outputs[0].token_ids) == 2 and runner.ended == 2
    assert runner.entered.acquire(timeout=5)
    runner.permits.release()
    assert tok.computing and all(tok.computing), tok.computing  # the text of both was made beside a step
    decoded = len(tok.computing)
    (o,) = eng.step()  # the last token ends the request (max_tokens): no step is started
    assert len(tok.computing) > decoded and not any(tok.computing[decoded:])
    assert o.finished and len(o.outputs[0].token_ids) == 3 and runner.ended == 3
    assert not eng.has_unfinished_requests()
    assert runner.entered.acquire(timeout=5)  # the step that drops the request's runner state
    runner.permits.release()
    eng.close()
    assert runner.ended == 4 and runner.threads == {"llaisys-step_0"}, runner.threads


def test_a_stop_string_costs_one_dropped_row_and_nothing_else():
    tok = FakeTokenizer()
    stop_at = 3  # the STOP piece is the third token
    runner = FakeRunner(next_fn=lambda hist, req: tok.id_of("STOP") if req.num_output_tokens == stop_at - 1
                        else tok.id_of("hello"))
    finals = {}
    for async_output in (False, True):
        runner.steps.clear()
        eng = make_engine(runner, async_output=async_output)
        eng.add_request("s", [1, 2, 3], SamplingParams(max_tokens=10, stop=["STOP"]))
        eng.add_request("o", [4, 5, 6], SamplingParams(max_tokens=8, ignore_eos=True, stop=["nothing"]))
        finals[async_output] = results(run_all(eng))
        rows = sum("s" in step for step in runner.steps)
        # s: a prefill and two decode steps; the step in flight when its text stopped is one more
        assert rows == (4 if async_output else 3), runner.steps
        eng.close()
    assert finals[True] == finals[False]
    assert finals[True]["s"] == [([tok.id_of("hello")] * 2 + [tok.id_of("STOP")], "hello" * 2, "stop")]


def test_an_abort_while_the_row_computes_drops_its_token():
    eng = make_engine(async_output=True)
    eng.add_request("a", [1, 2, 3], SamplingParams(max_tokens=20, ignore_eos=True))
    eng.add_request("b", [4, 5, 6], SamplingParams(max_tokens=5, ignore_eos=True))
    for _ in range(4):
        eng.step()
    seen = len(eng.scheduler.requests["a"].output_token_ids)
    eng.abort_request("a")  # its row is in the step in flight
    finals = run_all(eng, check_deltas=False)
    assert finals["a"].outputs[0].finish_reason == "abort"
    assert len(finals["a"].outputs[0].token_ids) == seen  # the row in flight added nothing
    assert finals["b"].outputs[0].finish_reason == "length" and len(finals["b"].outputs[0].token_ids) == 5
    eng.close()


def test_failing_rows_are_found_and_the_others_are_unchanged():
    ref = make_engine()
    workload(ref, n=8)
    want = results(run_all(ref))
    eng = make_engine(FakeRunner(fail_when=lambda b: "r3" in b.req_ids), async_output=True)
    workload(eng, n=8)
    got = results(run_all(eng))
    assert got["r3"][0][2] == "error"
    assert {k: v for k, v in got.items() if k != "r3"} == {k: v for k, v in want.items() if k != "r3"}
    eng.close()


@pytest.mark.parametrize("name", ["async_output", "async_scheduling"])  # the second: no step planned beside
def test_a_lost_device_closes_the_engine_without_another_call(name):  # the lost one reaches the runner
    runner = LosingRunner(lose_at=3)
    eng = make_engine(runner, **{name: True})
    workload(eng, n=4)
    outs = []
    while eng.dead is None:
        outs += eng.step()
    finals = [o for o in outs if o.finished]
    assert len(finals) == 4 and all(o.outputs[0].finish_reason in ("error", "stop", "length") for o in finals)
    assert any(isinstance(e, str) and "DEVICE_LOST" in e for e in (o.error for o in finals))
    assert runner.after_loss == 0
    with pytest.raises(EngineDeadError):
        eng.step()
    eng.close()


def test_close_waits_for_the_step_in_flight():
    runner = GatedRunner()  # each call waits for the gate
    eng = make_engine(runner, async_output=True)
    eng.add_request("a", [1, 2, 3], SamplingParams(max_tokens=3, ignore_eos=True))
    assert eng.step() == []
    assert runner.entered.wait(5)  # the core call runs, held
    closed = threading.Event()
    closer = threading.Thread(target=lambda: (eng.close(), closed.set()))
    closer.start()
    assert not closed.wait(0.3), "close() returned while the core call was still running"
    runner.gate.set()
    assert closed.wait(5)
    closer.join()
    eng.abort_request("a")  # the engine takes no step now; the request's blocks go back
    assert eng.scheduler.kv.num_used_blocks == 0


@pytest.mark.parametrize("name", ["async_output", "async_scheduling"])  # (the second: test_async_scheduling.py)
def test_a_bad_value_and_speculation_are_refused(name):
    with pytest.raises(ValueError, match=f"{name} must be a bool"):
        EngineConfig(**{name: "yes"})

    class Spec:  # stands in for a SpecDecoder: the engine refuses before it uses one
        stats = None

    with pytest.raises(ValueError, match=f"{name} does not combine with speculative decoding"):
        LLMEngine(EngineConfig(**{name: True}), FakeRunner(), FakeTokenizer(), speculative=Spec())


@pytest.mark.parametrize("name", ["async_output", "async_scheduling"])
def test_serve_passes_the_choice_to_the_engine(name):
    from llaisys.cli import build_parser
    from llaisys.server.serve import build_state

    for flags, want in (([], False), (["--" + name.replace("_", "-")], True)):
        state = build_state(build_parser().parse_args(["serve", "some-model"] + flags))  # nothing loads yet
        assert state.registry.engine_kwargs[name] is want


def test_memory_stats_do_not_call_the_core_while_a_step_computes():
    class Counting(PermitRunner):
        def __init__(self):
            super().__init__()
            self.stats_calls = 0

        def memory_stats(self):
            self.stats_calls += 1
            return ("stats", self.stats_calls)

    runner = Counting()
    eng = make_engine(runner, async_output=True)
    assert eng.memory_stats() == ("stats", 1)
    eng.add_request("a", [1, 2, 3], SamplingParams(max_tokens=2, ignore_eos=True))
    eng.step()
    assert runner.entered.acquire(timeout=5)  # the prefill's core call is running, held
    assert eng.memory_stats() == ("stats", 1) and runner.stats_calls == 1  # the last figures, no call
    runner.permits.release()
    eng._in_flight.call.result(timeout=5)  # the call ended: the core may be asked again
    assert eng.memory_stats() == ("stats", 2)
    for _ in range(3):
        runner.permits.release()
    run_all(eng, check_deltas=False)
    eng.close()
