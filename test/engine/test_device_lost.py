"""A lost device (a sticky CUDA error: the context is unusable until the process restarts)
closes the engine instead of being retried. The runner raises what the core's binding raises
for LLAISYS_STATUS_DEVICE_LOST (llaisys.libllaisys.error_for, checked here too); the core's
side, which errors are sticky, is test/cpp/test_cuda_errors.cpp. The engine must not call the
runner again (no bisection, not even the frees of a next step), must end every request with
"error" and the cause, and must refuse later steps and requests with EngineDeadError. The
autouse leak check (conftest.py) runs after each test."""

import pytest

from fake_runner import FakeRunner, make_engine
from llaisys import DeviceLostError, LlaisysError, Status
from llaisys.engine import AsyncEngine, EngineDeadError, SamplingParams
from llaisys.libllaisys import error_for

from test_llm_engine import workload

CUDA_MESSAGE = ("cudaStreamSynchronize(stream) failed: an illegal memory access was encountered "
                "(cudaErrorIllegalAddress) at src/models/decoder/nvidia/backend_nvidia.cpp:1; the CUDA context is lost")


class LosingRunner(FakeRunner):
    """The fake model until call number `lose_at` (1-based), which raises DEVICE_LOST as the
    core would; every call after that is recorded (there must be none)."""

    def __init__(self, lose_at: int, first_fails_ordinarily: bool = False):
        super().__init__()
        self.lose_at = lose_at
        self.first_fails_ordinarily = first_fails_ordinarily  # call lose_at - 1 raises a plain error
        self.after_loss = 0

    def execute(self, batch):
        if self.calls >= self.lose_at:
            self.after_loss += 1
        if self.calls + 1 == self.lose_at:
            self.calls += 1
            raise error_for(int(Status.DEVICE_LOST), CUDA_MESSAGE)
        if self.first_fails_ordinarily and self.calls + 2 == self.lose_at:
            self.calls += 1
            raise RuntimeError("an ordinary failure: the engine searches for the failing rows")
        return super().execute(batch)


def test_the_status_maps_to_a_fatal_error_and_others_do_not():
    e = error_for(int(Status.DEVICE_LOST), CUDA_MESSAGE)
    assert isinstance(e, DeviceLostError) and isinstance(e, LlaisysError) and not isinstance(e, ValueError)
    assert e.fatal and e.status == Status.DEVICE_LOST and "[DEVICE_LOST]" in str(e)
    for status in (Status.DEVICE_ERROR, Status.OUT_OF_MEMORY, Status.INVALID_ARGUMENT, Status.INTERNAL):
        assert not getattr(error_for(int(status), "x"), "fatal", False), status.name


@pytest.mark.parametrize("lose_at", [1, 4])  # in the first (prefill) step, or while requests decode
def test_a_lost_device_ends_every_request_without_a_retry(lose_at):
    runner = LosingRunner(lose_at)
    eng = make_engine(runner, max_num_seqs=4)  # 10 requests: some still wait when the device goes
    workload(eng)
    finals = {}
    for _ in range(100):
        outs = eng.step()
        finals.update({o.request_id: o for o in outs if o.finished})
        if eng.dead is not None:
            break
    assert eng.dead is not None and runner.calls == lose_at and runner.after_loss == 0
    assert sorted(finals) == sorted(f"r{i}" for i in range(10))
    for o in finals.values():
        assert o.outputs[0].finish_reason == "error"
        assert "cudaErrorIllegalAddress" in o.error and "restart the process" in o.error
    assert not eng.has_unfinished_requests()
    with pytest.raises(EngineDeadError, match="cudaErrorIllegalAddress"):
        eng.step()
    with pytest.raises(EngineDeadError, match="restart the process"):
        eng.add_request("late", [1, 2, 3], SamplingParams(max_tokens=2))
    assert runner.after_loss == 0  # nothing ran on the lost device


def test_a_device_lost_while_searching_for_failing_rows_stops_the_search():
    runner = LosingRunner(lose_at=2, first_fails_ordinarily=True)  # step 1 fails, its first retry loses it
    eng = make_engine(runner, max_num_seqs=8)
    workload(eng, n=8)
    outs = eng.step()
    assert runner.calls == 2 and runner.after_loss == 0 and eng.dead is not None
    assert len(outs) == 8 and all(o.finished and o.outputs[0].finish_reason == "error" for o in outs)


def test_the_async_engine_fails_its_streams_and_refuses_new_requests():
    runner = LosingRunner(lose_at=3)
    eng = AsyncEngine(make_engine(runner, max_num_seqs=4))
    try:
        streams = [eng.add_request(f"a{i}", [i + 1, 2, 3, 4], SamplingParams(max_tokens=50, ignore_eos=True))
                   for i in range(6)]
        finals = [list(s)[-1] for s in streams]
        assert all(o.finished and o.outputs[0].finish_reason == "error" for o in finals)
        assert all("cudaErrorIllegalAddress" in o.error for o in finals)
        eng._thread.join(timeout=10)
        assert not eng.is_alive and "restart the process" in eng.error
        with pytest.raises(EngineDeadError, match="cudaErrorIllegalAddress"):
            eng.add_request("late", [1, 2], SamplingParams(max_tokens=2))
        assert runner.after_loss == 0
    finally:
        eng.shutdown()
