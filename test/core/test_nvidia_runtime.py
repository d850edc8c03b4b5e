"""The NVIDIA device runtime through the C ABI: copies in every direction, pinned memory,
async copies on streams, event timing, and the allocator's counters.

Everything that needs a GPU is skipped unless this build has the NVIDIA backend and the
machine has a device; the checks at the bottom hold on every machine.
"""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest

import llaisys
from llaisys import DeviceType, LlaisysError, LlaisysInputError, MemcpyKind, MemoryKind, Status
from llaisys import runtime as rt

NV = DeviceType.NVIDIA
N_GPUS = rt.device_count(NV)

needs_gpu = pytest.mark.skipif(N_GPUS == 0, reason="no NVIDIA GPU in this build/machine")


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def _host_view(addr: int, nbytes: int) -> np.ndarray:
    """A uint8 numpy view of host memory at `addr` (for pinned buffers)."""
    return np.frombuffer((ctypes.c_uint8 * nbytes).from_address(addr), dtype=np.uint8)


def _allocated(device_id: int = 0) -> int:
    gc.collect()  # drop tensors of earlier tests that are only waiting for the collector
    return rt.memory_stats(NV, device_id).allocated


class DeviceBuffer:
    """A raw allocation that is freed on exit, so a failing assert leaks nothing."""

    def __init__(self, size: int, kind: MemoryKind = MemoryKind.DEVICE, device_id: int = 0):
        self.size, self.kind, self.device_id = size, kind, device_id
        self.ptr = rt.malloc(NV, size, kind, device_id)

    def __enter__(self) -> "DeviceBuffer":
        return self

    def __exit__(self, *exc) -> None:
        rt.free(NV, self.ptr, self.kind, self.device_id)


# -- every machine -------------------------------------------------------------------------


def test_device_count_never_raises():
    assert isinstance(N_GPUS, int) and N_GPUS >= 0


@pytest.mark.skipif(N_GPUS > 0, reason="checks the no-GPU path")
def test_without_a_gpu_nvidia_calls_fail_cleanly():
    with pytest.raises(LlaisysError) as e:
        rt.malloc(NV, 1024)
    assert e.value.status in (Status.INVALID_ARGUMENT, Status.UNSUPPORTED)
    with pytest.raises(LlaisysError):
        llaisys.Tensor([4], "f32", NV)
    assert rt.memory_stats(DeviceType.CPU).allocated >= 0  # the CPU side is unaffected


# -- with a GPU ------------------------------------------------------------------------------


@needs_gpu
def test_set_device_and_synchronize():
    for i in range(N_GPUS):
        rt.set_device(NV, i)
        rt.synchronize(NV, i)
    rt.set_device(NV, 0)
    with pytest.raises(LlaisysInputError):
        rt.set_device(NV, N_GPUS)
    with pytest.raises(LlaisysInputError):
        rt.synchronize(NV, -1)


@needs_gpu
@pytest.mark.parametrize("size", [1, 4099, 1 << 22])
def test_h2d_d2d_d2h_round_trip(size):
    src = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    out = np.zeros_like(src)
    with DeviceBuffer(size) as a, DeviceBuffer(size) as b:
        rt.memcpy(NV, a.ptr, _ptr(src), size, MemcpyKind.H2D)
        rt.memcpy(NV, b.ptr, a.ptr, size, MemcpyKind.D2D)
        rt.memcpy(NV, _ptr(out), b.ptr, size, MemcpyKind.D2H)
    np.testing.assert_array_equal(out, src)


@needs_gpu
def test_h2h_and_zero_size_copies():
    src = np.arange(64, dtype=np.uint8)
    out = np.zeros_like(src)
    rt.memcpy(NV, _ptr(out), _ptr(src), src.nbytes, MemcpyKind.H2H)
    np.testing.assert_array_equal(out, src)
    rt.memcpy(NV, 0, 0, 0, MemcpyKind.H2D)  # nothing to copy: NULL pointers are fine
    assert rt.malloc(NV, 0) == 0


@needs_gpu
def test_pinned_memory_round_trip():
    n = 1 << 20
    with DeviceBuffer(n, MemoryKind.PINNED_HOST) as pin_in, DeviceBuffer(n, MemoryKind.PINNED_HOST) as pin_out, \
            DeviceBuffer(n) as dev:
        assert pin_in.ptr % 64 == 0 and pin_out.ptr % 64 == 0
        src = _host_view(pin_in.ptr, n)
        src[:] = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8)
        _host_view(pin_out.ptr, n)[:] = 0
        rt.memcpy(NV, dev.ptr, pin_in.ptr, n, MemcpyKind.H2D)
        rt.memcpy(NV, pin_out.ptr, dev.ptr, n, MemcpyKind.D2H)
        np.testing.assert_array_equal(_host_view(pin_out.ptr, n), src)


@needs_gpu
def test_plain_host_memory_of_the_nvidia_device():
    with DeviceBuffer(100, MemoryKind.HOST) as h:
        assert h.ptr % 64 == 0
        _host_view(h.ptr, 100)[:] = 7
        assert _host_view(h.ptr, 100).sum() == 700


@needs_gpu
def test_async_copies_on_a_stream_with_event_timing():
    n = 8 << 20
    with DeviceBuffer(n, MemoryKind.PINNED_HOST) as pin_in, DeviceBuffer(n, MemoryKind.PINNED_HOST) as pin_out, \
            DeviceBuffer(n) as a, DeviceBuffer(n) as b, rt.Stream(NV) as s, \
            rt.Event(NV) as start, rt.Event(NV) as end:
        src = _host_view(pin_in.ptr, n)
        src[:] = np.random.default_rng(1).integers(0, 256, n, dtype=np.uint8)
        start.record(s)
        rt.memcpy(NV, a.ptr, pin_in.ptr, n, MemcpyKind.H2D, stream=s)
        rt.memcpy(NV, b.ptr, a.ptr, n, MemcpyKind.D2D, stream=s)
        rt.memcpy(NV, pin_out.ptr, b.ptr, n, MemcpyKind.D2H, stream=s)
        end.record(s)
        end.synchronize()
        assert end.query() and start.query()
        ms = start.elapsed_ms(end)
        assert 0.0 <= ms < 10_000.0
        s.synchronize()
        np.testing.assert_array_equal(_host_view(pin_out.ptr, n), src)


@needs_gpu
def test_async_copy_on_the_default_stream():
    """A NULL stream handle queues on the device's default stream."""
    src = np.arange(1000, dtype=np.float32)
    out = np.zeros_like(src)
    lib = llaisys.libllaisys.LIB
    with DeviceBuffer(src.nbytes) as d, rt.Event(NV) as e:
        for dst, s, kind in ((d.ptr, _ptr(src), MemcpyKind.H2D), (_ptr(out), d.ptr, MemcpyKind.D2H)):
            status = lib.llaisysMemcpyAsync(int(NV), 0, ctypes.c_void_p(dst), ctypes.c_void_p(s), src.nbytes,
                                            int(kind), None)
            assert status == Status.OK, llaisys.libllaisys.last_error()
        e.record(None)
        e.synchronize()
    np.testing.assert_array_equal(out, src)


@needs_gpu
def test_event_misuse_is_an_input_error():
    with rt.Event(NV) as a, rt.Event(NV) as b:
        with pytest.raises(LlaisysInputError, match="never recorded"):
            a.query()
        with pytest.raises(LlaisysInputError, match="never recorded"):
            a.synchronize()
        with pytest.raises(LlaisysInputError):
            a.elapsed_ms(b)
        a.record()
        b.record()
        b.synchronize()
        assert a.elapsed_ms(b) >= 0.0


@needs_gpu
def test_stream_of_another_device_kind_is_rejected():
    with rt.Stream(DeviceType.CPU) as cpu_stream, DeviceBuffer(16) as d:
        src = np.zeros(16, dtype=np.uint8)
        with pytest.raises(LlaisysInputError) as e:
            rt.memcpy(NV, d.ptr, _ptr(src), 16, MemcpyKind.H2D, stream=cpu_stream)
        assert e.value.status == Status.DEVICE_MISMATCH


@needs_gpu
def test_memory_stats_count_every_kind():
    base = _allocated()
    with DeviceBuffer(1000):
        assert _allocated() == base + 1000
        with DeviceBuffer(4096, MemoryKind.PINNED_HOST), DeviceBuffer(10, MemoryKind.HOST):
            assert _allocated() == base + 1000 + 4096 + 10
            stats = rt.memory_stats(NV, 0)
            assert stats.reserved >= stats.allocated
        assert _allocated() == base + 1000
    assert _allocated() == base


@needs_gpu
def test_tensor_round_trip_and_its_counters():
    base = _allocated()
    a = np.random.default_rng(2).standard_normal((33, 65)).astype(np.float32)
    with llaisys.Tensor.from_numpy(a, device=NV) as t:
        assert t.device == NV and t.device_id == 0
        assert _allocated() == base + a.nbytes
        np.testing.assert_array_equal(t.numpy(), a)
        with t.contiguous() as same:  # already contiguous: shares the storage
            assert _allocated() == base + a.nbytes
            np.testing.assert_array_equal(same.numpy(), a)
    assert _allocated() == base


@needs_gpu
def test_bad_frees_and_huge_allocations():
    with DeviceBuffer(64) as d:
        with pytest.raises(LlaisysInputError):
            rt.free(NV, d.ptr, MemoryKind.PINNED_HOST)  # wrong kind: refused, left alone
    with pytest.raises(LlaisysError) as e:
        rt.malloc(NV, 1 << 50)  # 1 PiB
    assert e.value.status == Status.OUT_OF_MEMORY
    with DeviceBuffer(1 << 20):  # the failed allocation left the runtime usable
        pass


@pytest.mark.skipif(N_GPUS < 2, reason="needs two NVIDIA GPUs")
@needs_gpu
def test_second_device_copies_and_counters():
    base = _allocated(1)
    src = np.arange(4096, dtype=np.uint8)
    out = np.zeros_like(src)
    with DeviceBuffer(src.nbytes, device_id=1) as d, rt.Stream(NV, 1) as s:
        assert _allocated(1) == base + src.nbytes
        rt.memcpy(NV, d.ptr, _ptr(src), src.nbytes, MemcpyKind.H2D, device_id=1, stream=s)
        rt.memcpy(NV, _ptr(out), d.ptr, src.nbytes, MemcpyKind.D2H, device_id=1, stream=s)
        s.synchronize()
    np.testing.assert_array_equal(out, src)
    assert _allocated(1) == base
