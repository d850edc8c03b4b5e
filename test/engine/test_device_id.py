"""The device id is configuration: LLM(device_id=...), WorkerConfig.device_id and
`llaisys serve --device-id` reach the model (whose KV cache and sampler live on its device)
and the memory queries that size the KV pool. A bad id is a ValueError before any weight is
read: the CPU is device 0 only, an NVIDIA id must name a GPU this process sees. The GPU half
(a model really made on a second GPU) needs a machine with two; here the runtime's answers
are stood in for to follow the id through the worker."""

import argparse

import pytest

from llaisys import DeviceType, runtime
from llaisys.engine import LLM
from llaisys.engine import worker as worker_mod
from llaisys.engine.worker import Worker, WorkerConfig, check_device_id


@pytest.mark.parametrize("bad", [-1, True, 1.0, "0", None])
def test_a_device_id_is_a_non_negative_int(bad):
    with pytest.raises(ValueError, match="device_id must be an integer >= 0"):
        check_device_id(DeviceType.CPU, bad)


def test_the_cpu_is_device_zero_only():
    assert check_device_id(DeviceType.CPU, 0) == 0
    with pytest.raises(ValueError, match="device_id 1 with device='cpu'"):
        check_device_id(DeviceType.CPU, 1)


def test_an_nvidia_id_must_name_a_gpu_this_process_sees():
    n = runtime.device_count(DeviceType.NVIDIA)
    with pytest.raises(ValueError, match=f"device_id {n} is out of range"):
        check_device_id(DeviceType.NVIDIA, n)
    if n:
        assert check_device_id(DeviceType.NVIDIA, n - 1) == n - 1


def test_llm_refuses_a_bad_id_before_loading(tmp_path):
    # the model path does not exist: the id is refused before the path is even looked at
    with pytest.raises(ValueError, match="device_id 3 with device='cpu'"):
        LLM(str(tmp_path / "absent"), device="cpu", device_id=3)
    with pytest.raises(ValueError, match="out of range"):
        LLM(str(tmp_path / "absent"), device="nvidia", device_id=runtime.device_count(DeviceType.NVIDIA))


def test_the_id_reaches_the_model_and_the_memory_queries(tiny, monkeypatch):
    """device="nvidia", device_id=1 on a machine said to have two GPUs: the worker sizes the KV
    pool from GPU 1's memory and makes the model on GPU 1 (the stand-in Model stops there)."""
    seen = []

    class Made(Exception):
        pass

    def fake_model(loaded, device, device_id):
        seen.append(("model", device, device_id))
        raise Made

    monkeypatch.setattr(worker_mod.runtime, "device_count", lambda d: 2 if d == DeviceType.NVIDIA else 1)
    monkeypatch.setattr(worker_mod.runtime, "empty_cache", lambda d, i: seen.append(("empty_cache", d, i)))
    monkeypatch.setattr(worker_mod.runtime, "memory_info",
                        lambda d, i: seen.append(("memory_info", d, i)) or (80 << 30, 80 << 30))
    monkeypatch.setattr(worker_mod, "Model", fake_model)
    with pytest.raises(Made):
        Worker(WorkerConfig(model=tiny, device="nvidia", device_id=1, gpu_memory_utilization=0.5))
    nv = DeviceType.NVIDIA
    assert seen == [("empty_cache", nv, 1), ("memory_info", nv, 1), ("model", nv, 1)]


def test_the_cpu_model_is_made_on_device_zero(tiny):
    with LLM(tiny, device="cpu", device_id=0, kv_cache_memory=4 << 20) as llm:
        assert llm.worker.model.device == DeviceType.CPU and llm.worker.model.device_id == 0
        assert llm.worker.config.device_id == 0


def test_serve_takes_device_id_and_checks_it_before_any_load():
    from llaisys.server.serve import add_serve_parser, build_state

    parser = argparse.ArgumentParser()
    add_serve_parser(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["serve", "/nonexistent/model", "--device-id", "2"])
    assert args.device_id == 2
    with pytest.raises(ValueError, match="device_id 2 with device='cpu'"):
        build_state(args)
    args = parser.parse_args(["serve", "/nonexistent/model", "--device", "nvidia", "--device-id", "7"])
    if runtime.device_count(DeviceType.NVIDIA) <= 7:
        with pytest.raises(ValueError, match="device_id 7 is out of range"):
            build_state(args)
    assert parser.parse_args(["serve"]).device_id == 0


def test_the_core_runner_reports_the_models_memory(tiny):
    """CoreModelRunner.memory_stats (the /metrics memory gauges) is llaisysModelGetStats: on the
    CPU the weights and workspace, and no device scratch (the CUDA linears' is counted on a GPU)."""
    from llaisys.engine.async_engine import AsyncEngine

    with LLM(tiny, device="cpu", kv_cache_memory=4 << 20) as llm:
        llm.generate("hello")
        st = llm.engine.memory_stats()
        assert st == llm.worker.model.stats()
        assert st.weight_bytes > 0 and st.workspace_bytes > 0 and st.scratch_bytes == 0
        aeng = AsyncEngine(llm.engine)
        try:
            assert aeng.snapshot().memory == st
        finally:
            aeng.shutdown()
