"""DeviceThread: core calls in order on one thread; a call queued behind another gets ready
with that call's outcome before that call's Future is resolved (so the engine, waiting on it,
wakes when the next call can start at once)."""

import threading

import pytest

from llaisys.engine.device_thread import DeviceThread


def test_calls_run_in_order_on_one_thread_and_close_runs_what_is_queued():
    dev, seen = DeviceThread(), []
    futures = [dev.submit(lambda i=i: seen.append((i, threading.current_thread().name)) or i) for i in range(20)]
    dev.close()
    assert [f.result(timeout=5) for f in futures] == list(range(20))
    assert seen == [(i, "llaisys-step_0") for i in range(20)]
    with pytest.raises(RuntimeError, match="closed"):
        dev.submit(lambda: None)


def test_the_call_before_is_answered_only_once_the_next_is_ready():
    dev, gate, log = DeviceThread(), threading.Event(), []
    first = dev.submit(lambda: gate.wait(5) and "first")

    def ready(outcome):
        log.append(("ready", outcome, first.done()))

    second = dev.submit(lambda: log.append(("call", first.done())) or "second", after=first, ready=ready)
    gate.set()
    assert second.result(timeout=5) == "second" and first.result() == "first"
    # ready saw the first call's result while its Future was still open; the second call ran after it closed
    assert log == [("ready", "first", False), ("call", True)]
    dev.close()


def test_a_failed_call_before_reaches_ready_and_a_failing_ready_skips_the_call():
    dev, called = DeviceThread(), []

    def boom():
        raise ValueError("the call before failed")

    first = dev.submit(boom)

    def ready(outcome):
        assert isinstance(outcome, ValueError)
        raise KeyError("not run")

    second = dev.submit(lambda: called.append(1), after=first, ready=ready)
    with pytest.raises(KeyError):
        second.result(timeout=5)
    with pytest.raises(ValueError):
        first.result()
    assert not called
    third = dev.submit(lambda: "after", after=first, ready=lambda outcome: None)  # first is answered by now
    assert third.result(timeout=5) == "after"
    dev.close()
