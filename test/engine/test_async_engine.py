"""AsyncEngine with the fake runner: the background loop gives the same outputs as the
synchronous engine, takes requests and aborts from many threads, survives step failures,
dies cleanly when it must, and shuts down with or without draining. The autouse leak check
(conftest.py) runs after each test, once the loop has stopped."""

import threading
import time

import pytest

from fake_runner import FakeRunner, make_engine, run_all
from llaisys.engine import AsyncEngine, EngineDeadError, PoolingParams, PoolingRequestOutput, SamplingParams

from test_llm_engine import MODES, results, workload


@pytest.fixture
def started():
    """make(...) -> an AsyncEngine over a fake engine; every one is shut down after the test."""
    made = []

    def make(runner=None, **config):
        eng = AsyncEngine(make_engine(runner, **config))
        made.append(eng)
        return eng

    yield make
    for eng in made:
        eng.shutdown()


class GatedRunner(FakeRunner):
    """A fake runner whose steps wait for `gate` (to hold requests mid-flight)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.gate = threading.Event()
        self.entered = threading.Event()

    def execute(self, batch):
        self.entered.set()
        assert self.gate.wait(10), "test never opened the gate"
        return super().execute(batch)


def collect(streams):
    return {rid: list(s)[-1] for rid, s in streams.items()}


@pytest.mark.parametrize("mode", list(MODES))
def test_outputs_match_the_synchronous_engine(started, mode):
    ref = make_engine(num_blocks=14, max_num_batched_tokens=24)
    workload(ref)
    want = results(run_all(ref))

    eng = started(num_blocks=14, max_num_batched_tokens=24, **MODES[mode])
    recorder = make_engine()  # only to capture the workload's add_request calls
    calls = []
    recorder.add_request = lambda rid, ids, sp, **kw: calls.append((rid, ids, sp))
    workload(recorder)
    streams = {rid: eng.add_request(rid, ids, sp) for rid, ids, sp in calls}
    assert results(collect(streams)) == want


def test_deltas_add_up_to_the_final_text(started):
    eng = started()
    stream = eng.add_request("d", [72, 105, 32], SamplingParams(max_tokens=20, ignore_eos=True, temperature=0.7,
                                                                 seed=3))
    outs = list(stream)
    assert outs[-1].finished and stream.finished and all(not o.finished for o in outs[:-1])
    assert "".join(o.outputs[0].delta_text for o in outs) == outs[-1].outputs[0].text
    assert sum(len(o.outputs[0].delta_token_ids) for o in outs) == 20
    with pytest.raises(RuntimeError, match="already delivered"):
        stream.get(0.1)


def test_many_threads_add_and_read_at_once(started):
    eng = started(num_blocks=40, max_num_seqs=4, max_num_batched_tokens=16)  # forces queueing and preemption
    finals, errors = {}, []

    def client(i):
        try:
            s = eng.add_request(f"c{i}", [i + 1] * (3 + i % 11), SamplingParams(max_tokens=5 + i % 7, ignore_eos=True))
            finals[i] = list(s)[-1]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(finals) == 24
    for i, out in finals.items():
        assert out.outputs[0].finish_reason == "length" and len(out.outputs[0].token_ids) == 5 + i % 7
    assert eng.num_unfinished == 0
    m = eng.snapshot()
    assert m.num_running == 0 and m.num_waiting == 0 and m.kv_usage == 0.0
    assert m.finished_total == {"length": 24}


def test_bad_requests_fail_at_once_in_the_callers_thread(started):
    eng = started(max_model_len=64)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        eng.add_request("a", [1, 10 ** 6])
    with pytest.raises(ValueError, match=r"exceeds max_model_len \(64\)"):
        eng.add_request("a", [1] * 10, SamplingParams(max_tokens=60))
    with pytest.raises(ValueError, match="non-empty string"):
        eng.add_request("", [1])
    s = eng.add_request("a", [1], SamplingParams(max_tokens=3))
    with pytest.raises(ValueError, match="already in use"):
        eng.add_request("a", [1])
    assert list(s)[-1].finished
    again = eng.add_request("a", [1], SamplingParams(max_tokens=1))  # the id is free once finished
    assert list(again)[-1].outputs[0].finish_reason == "length"


def test_abort_while_waiting_and_while_running(started):
    runner = GatedRunner()
    eng = started(runner, max_num_seqs=1, max_num_batched_tokens=8)
    running = eng.add_request("run", [1, 2, 3], SamplingParams(max_tokens=50, ignore_eos=True))
    assert runner.entered.wait(5)  # "run" is inside a step
    waiting = eng.add_request("wait", [4, 5, 6], SamplingParams(max_tokens=50, ignore_eos=True))
    waiting.abort()
    running.abort()
    runner.gate.set()
    w, r = list(waiting), list(running)
    assert w[-1].outputs[0].finish_reason == "abort" and w[-1].outputs[0].token_ids == []
    assert r[-1].outputs[0].finish_reason == "abort" and len(r[-1].outputs[0].token_ids) < 50
    eng.abort("never-added")  # ignored
    assert eng.num_unfinished == 0


def test_get_times_out_while_the_step_is_held(started):
    runner = GatedRunner()
    eng = started(runner)
    s = eng.add_request("t", [1, 2], SamplingParams(max_tokens=2, ignore_eos=True))
    with pytest.raises(TimeoutError, match="within 0.05 s"):
        s.get(timeout=0.05)
    runner.gate.set()
    assert list(s)[-1].outputs[0].finish_reason == "length"


def test_a_waker_is_called_after_every_output_and_a_failing_one_harms_nothing(started):
    """An event loop waits on set_waker instead of polling: the waker runs (in the engine's
    thread) once an output is already queued, so get(timeout=0) then finds it."""
    import asyncio

    async def read(eng, rid, sp):
        loop, ready = asyncio.get_running_loop(), asyncio.Event()
        s = eng.add_request(rid, [1, 2], sp)
        s.set_waker(lambda: loop.call_soon_threadsafe(ready.set))
        outs, wakes = [], 0
        while not s.finished:
            ready.clear()
            try:
                outs.append(s.get(timeout=0))
            except TimeoutError:
                await asyncio.wait_for(ready.wait(), 10)  # no polling: only the waker ends the wait
                wakes += 1
        return outs, wakes

    runner = GatedRunner()
    runner.gate.set()
    eng = started(runner)
    outs, wakes = asyncio.run(read(eng, "w", SamplingParams(max_tokens=5, ignore_eos=True)))
    assert outs[-1].outputs[0].finish_reason == "length" and len(outs[-1].outputs[0].token_ids) == 5
    assert 1 <= wakes <= len(outs)

    def broken():
        raise RuntimeError("event loop is closed")

    s = eng.add_request("x", [1, 2], SamplingParams(max_tokens=3, ignore_eos=True))
    s.set_waker(broken)
    assert list(s)[-1].outputs[0].finish_reason == "length"  # the engine thread shrugs it off
    assert eng.is_alive


def test_runner_failure_ends_only_that_step_with_error(started):
    fail = {"on": True}
    eng = started(FakeRunner(fail_when=lambda batch: fail["on"] and "bad" in batch.req_ids))
    bad = list(eng.add_request("bad", [1, 2, 3], SamplingParams(max_tokens=4)))[-1]
    assert bad.outputs[0].finish_reason == "error" and "injected failure" in bad.error
    fail["on"] = False
    good = list(eng.add_request("good", [1, 2, 3], SamplingParams(max_tokens=4, ignore_eos=True)))[-1]
    assert good.outputs[0].finish_reason == "length" and eng.is_alive


def test_a_step_that_raises_fails_the_requests_in_flight_and_the_loop_goes_on(started):
    eng = started()
    real_schedule, calls = eng.engine.scheduler.schedule, {"n": 0}

    def schedule_once_broken():
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyError("scheduler bug")
        return real_schedule()

    eng.engine.scheduler.schedule = schedule_once_broken
    out = list(eng.add_request("x", [1, 2, 3], SamplingParams(max_tokens=10, ignore_eos=True)))[-1]
    assert out.outputs[0].finish_reason == "error" and "scheduler bug" in out.error
    assert eng.is_alive
    ok = list(eng.add_request("y", [1, 2, 3], SamplingParams(max_tokens=3, ignore_eos=True)))[-1]
    assert ok.outputs[0].finish_reason == "length"


def test_a_loop_that_keeps_failing_dies_and_says_why(started):
    eng = started()

    def broken():
        raise RuntimeError("scheduler is broken")

    eng.engine.scheduler.schedule = broken
    out = list(eng.add_request("x", [1, 2], SamplingParams(max_tokens=3)))[-1]
    assert out.outputs[0].finish_reason == "error" and "broken" in out.error
    deadline = time.monotonic() + 5
    while eng.is_alive and time.monotonic() < deadline:
        eng.add_request(f"probe{time.monotonic()}", [1], SamplingParams(max_tokens=1))
        time.sleep(0.01)
    assert not eng.is_alive and "scheduler is broken" in eng.error
    with pytest.raises(EngineDeadError, match="died"):
        eng.add_request("z", [1])
    with pytest.raises(EngineDeadError, match="died"):
        eng.encode("z", [1])


def test_a_failing_loop_gives_pooling_streams_an_error_output(started):
    eng = started()

    def broken():
        raise RuntimeError("scheduler is broken")

    eng.engine.scheduler.schedule = broken
    out = eng.encode("e", [1, 2, 3]).get(timeout=10)
    assert isinstance(out, PoolingRequestOutput) and out.finished and out.finish_reason == "error"
    assert out.outputs is None and "broken" in out.error


def test_encode_is_a_request_of_the_loop(started):
    """Pooling requests go through the same loop and scheduler as generation (there is no
    other way onto the loop thread): streams, aborts and the dead-loop output work alike."""
    eng = started(GatedRunner())
    assert not hasattr(eng, "submit")
    gen = eng.add_request("g", [1, 2, 3], SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True))
    emb = eng.encode("e", list(range(40, 60)), PoolingParams())
    gone = eng.encode("x", list(range(40, 60)))
    eng.abort("x")
    eng.engine.runner.gate.set()
    out = emb.get(timeout=10)
    assert isinstance(out, PoolingRequestOutput) and out.finished and out.finish_reason == "stop"
    assert out.outputs.data.shape == (8,) and emb.finished
    assert gone.get(timeout=10).finish_reason == "abort"
    assert list(gen)[-1].outputs[0].finish_reason == "length"
    dup = eng.add_request("dup", [1], SamplingParams(max_tokens=1))
    with pytest.raises(ValueError, match="already in use"):
        eng.encode("dup", [1])
    assert list(dup)[-1].finished
    with pytest.raises(ValueError, match="empty"):
        eng.encode("bad", [])


def test_shutdown_drains_in_flight_requests(started):
    eng = started()
    s = eng.add_request("d", [1, 2, 3], SamplingParams(max_tokens=30, ignore_eos=True))
    eng.shutdown(drain_timeout=10)
    assert list(s)[-1].outputs[0].finish_reason == "length"
    with pytest.raises(EngineDeadError, match="shutting down"):
        eng.add_request("late", [1])
    eng.shutdown()  # idempotent


def test_shutdown_without_drain_aborts_in_flight_requests(started):
    runner = GatedRunner()
    eng = started(runner)
    s = eng.add_request("a", [1, 2, 3], SamplingParams(max_tokens=30, ignore_eos=True))
    assert runner.entered.wait(5)
    closer = threading.Thread(target=eng.shutdown)
    closer.start()
    time.sleep(0.05)
    runner.gate.set()
    closer.join(10)
    assert not closer.is_alive()
    assert list(s)[-1].outputs[0].finish_reason == "abort"


def test_the_loop_does_not_copy_the_latency_samples_after_every_step(started):
    # A long-running server's EngineMetrics holds 4 x 10,000 samples; copying them after every
    # step cost 126 us a step. The loop's copy and snapshot() carry the counters only.
    from llaisys.engine.metrics import MAX_SAMPLES

    eng = started()
    inner = eng.engine
    inner.metrics.ttft.extend([0.5] * MAX_SAMPLES)
    stream = eng.add_request("s", [72, 105], SamplingParams(max_tokens=3, ignore_eos=True))
    assert list(stream)[-1].finished
    m = eng.snapshot()
    assert m.finished_total == {"length": 1} and m.generation_tokens_total == 3
    assert len(m.ttft) == len(m.e2e) == 0  # not copied
    assert len(inner.metrics.ttft) == MAX_SAMPLES and inner.metrics.ttft[-1] != 0.5  # the engine's own has them
    assert len(inner.metrics.copy().ttft) == MAX_SAMPLES


def test_freeze_startup_objects_moves_what_exists_out_of_the_collectors_reach():
    """What `llaisys serve` and a Ray replica call once their models are loaded: everything made so
    far is frozen (gc.get_freeze_count), an object made before it among them."""
    import gc

    from llaisys.engine.async_engine import freeze_startup_objects

    made_before = [[i] for i in range(1000)]  # tracked containers
    gc.unfreeze()
    try:
        frozen = freeze_startup_objects()
        # the count can only fall after the call: another thread of this process (an engine loop
        # an earlier test left winding down) may free frozen objects in between, and did (by 2)
        assert frozen >= gc.get_freeze_count() >= len(made_before)
        assert not any(made_before[0] is o for o in gc.get_objects())  # out of the collected generations
    finally:
        gc.unfreeze()
    assert any(made_before[0] is o for o in gc.get_objects())
