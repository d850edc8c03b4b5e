"""The device runtime through llaisys.runtime: devices, memory, copies, streams, events."""

from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest

import llaisys
from llaisys import DeviceType, MemcpyKind, MemoryKind, Status, runtime

CPU, NVIDIA = DeviceType.CPU, DeviceType.NVIDIA


def nvidia_backend_built() -> bool:
    """Whether this libllaisys has the NVIDIA backend compiled in (pip's default build has not).
    Without it every NVIDIA call fails with UNSUPPORTED; with it but without a GPU, device id 0
    is out of range instead."""
    if runtime.device_count(NVIDIA) > 0:
        return True
    try:
        runtime.set_device(NVIDIA, 0)
    except llaisys.LlaisysError as e:
        return e.status != Status.UNSUPPORTED
    return True


without_nvidia_backend = pytest.mark.skipif(nvidia_backend_built(), reason="this build has the NVIDIA backend "
                                            "(test_nvidia_runtime.py covers it)")


def addr(a: np.ndarray) -> int:
    return a.ctypes.data


def expect_status(call, status: Status, *fragments: str) -> llaisys.LlaisysError:
    with pytest.raises(llaisys.LlaisysError) as info:
        call()
    assert info.value.status == status, str(info.value)
    for f in fragments:
        assert f in str(info.value)
    return info.value


def test_device_counts():
    assert runtime.device_count(CPU) == 1
    if not nvidia_backend_built():
        assert runtime.device_count(NVIDIA) == 0
    runtime.set_device(CPU, 0)
    runtime.synchronize(CPU, 0)


def test_bad_device_ids_and_types():
    expect_status(lambda: runtime.set_device(CPU, 1), Status.INVALID_ARGUMENT, "device id 1")
    expect_status(lambda: runtime.set_device(CPU, -1), Status.INVALID_ARGUMENT, "device id")
    expect_status(lambda: runtime.synchronize(CPU, 3), Status.INVALID_ARGUMENT)
    expect_status(lambda: runtime.malloc(CPU, 16, device_id=1), Status.INVALID_ARGUMENT)
    expect_status(lambda: runtime.memory_stats(CPU, 2), Status.INVALID_ARGUMENT)
    expect_status(lambda: runtime.Stream(CPU, 1), Status.INVALID_ARGUMENT)
    expect_status(lambda: runtime.Event(CPU, 1), Status.INVALID_ARGUMENT)
    expect_status(lambda: llaisys.Tensor((2,), "f32", device_id=1), Status.INVALID_ARGUMENT, "device id")
    expect_status(lambda: runtime.device_count(7), Status.INVALID_ARGUMENT, "device type")
    expect_status(lambda: runtime.malloc(7, 16), Status.INVALID_ARGUMENT, "device type")


@without_nvidia_backend
def test_nvidia_tensors_are_unsupported():
    """Creating a tensor on a device this build cannot drive fails cleanly."""
    with pytest.raises(llaisys.LlaisysError) as info:
        llaisys.Tensor((2, 3), "f32", device=NVIDIA)
    assert info.value.status == Status.UNSUPPORTED
    assert not isinstance(info.value, ValueError), "a missing backend is not the caller's input mistake"
    assert "NVIDIA" in str(info.value)
    with pytest.raises(llaisys.LlaisysError) as info:
        llaisys.Tensor.from_numpy(np.zeros(3, dtype=np.float32), device=NVIDIA)
    assert info.value.status == Status.UNSUPPORTED


@without_nvidia_backend
def test_nvidia_calls_are_unsupported():
    for call in [lambda: runtime.set_device(NVIDIA, 0), lambda: runtime.malloc(NVIDIA, 16),
                 lambda: runtime.memory_stats(NVIDIA), lambda: runtime.Stream(NVIDIA),
                 lambda: runtime.Event(NVIDIA), lambda: runtime.synchronize(NVIDIA),
                 lambda: runtime.memcpy(NVIDIA, 1, 1, 1, MemcpyKind.H2D)]:
        err = expect_status(call, Status.UNSUPPORTED, "NVIDIA")
        assert not isinstance(err, ValueError)


@pytest.mark.parametrize("kind", list(MemoryKind), ids=lambda k: k.name.lower())
def test_malloc_free_and_memory_stats(kind, quiet_gc):
    before = runtime.memory_stats(CPU)
    assert before.reserved >= before.allocated
    p = runtime.malloc(CPU, 1000, kind)
    q = runtime.malloc(CPU, 24, kind)
    assert p and q and p % 64 == 0
    during = runtime.memory_stats(CPU)
    assert during.allocated == before.allocated + 1024
    assert during.reserved >= during.allocated
    ctypes.memset(p, 0xAB, 1000)  # the memory is really ours
    runtime.free(CPU, p, kind)
    runtime.free(CPU, q, kind)
    assert runtime.memory_stats(CPU).allocated == before.allocated
    assert runtime.malloc(CPU, 0, kind) == 0  # size 0 gives NULL
    runtime.free(CPU, 0, kind)  # freeing NULL is a no-op


def _meminfo_kib(key: str) -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def test_memory_info_of_the_host():
    # other processes move MemAvailable between two reads: bracket the call with reads of our own
    lo = _meminfo_kib("MemAvailable") * 1024
    free, total = runtime.memory_info(CPU)
    hi = _meminfo_kib("MemAvailable") * 1024
    assert total == _meminfo_kib("MemTotal") * 1024
    slack = 256 << 20
    assert min(lo, hi) - slack <= free <= max(lo, hi) + slack, (lo, free, hi)
    assert 0 < free <= total
    with pytest.raises(llaisys.LlaisysError) as e:
        runtime.memory_info(CPU, device_id=1)
    assert e.value.status == Status.INVALID_ARGUMENT


def test_bad_memory_kind():
    expect_status(lambda: runtime.malloc(CPU, 16, 3), Status.INVALID_ARGUMENT, "memory kind")
    expect_status(lambda: runtime.malloc(CPU, 16, -1), Status.INVALID_ARGUMENT, "memory kind")


def test_free_of_foreign_pointer_or_twice_is_an_error(quiet_gc):
    before = runtime.memory_stats(CPU).allocated
    buf = np.zeros(64, dtype=np.uint8)
    expect_status(lambda: runtime.free(CPU, addr(buf), MemoryKind.HOST), Status.INVALID_ARGUMENT, "not a live")
    p = runtime.malloc(CPU, 128, MemoryKind.HOST)
    expect_status(lambda: runtime.free(CPU, p + 8, MemoryKind.HOST), Status.INVALID_ARGUMENT)
    expect_status(lambda: runtime.free(CPU, p, MemoryKind.DEVICE), Status.INVALID_ARGUMENT, "another")
    runtime.free(CPU, p, MemoryKind.HOST)  # still live after the rejected frees
    expect_status(lambda: runtime.free(CPU, p, MemoryKind.HOST), Status.INVALID_ARGUMENT, "not a live")
    assert runtime.memory_stats(CPU).allocated == before


def test_out_of_memory_is_a_status():
    expect_status(lambda: runtime.malloc(CPU, 2 ** 62), Status.OUT_OF_MEMORY)


def test_memcpy_h2h():
    src = np.arange(100, dtype=np.float32)
    dst = np.zeros(100, dtype=np.float32)
    runtime.memcpy(CPU, addr(dst), addr(src), 40 * 4, MemcpyKind.H2H)
    np.testing.assert_array_equal(dst[:40], src[:40])
    assert (dst[40:] == 0).all()
    # through library memory and back
    p = runtime.malloc(CPU, 400, MemoryKind.PINNED_HOST)
    try:
        runtime.memcpy(CPU, p, addr(src), 400, MemcpyKind.H2H)
        back = np.empty(100, dtype=np.float32)
        runtime.memcpy(CPU, addr(back), p, 400, MemcpyKind.H2H)
        np.testing.assert_array_equal(back, src)
    finally:
        runtime.free(CPU, p, MemoryKind.PINNED_HOST)
    runtime.memcpy(CPU, 0, 0, 0, MemcpyKind.H2H)  # zero bytes: NULL is fine


def test_memcpy_bad_arguments():
    buf = np.zeros(4, dtype=np.uint8)
    expect_status(lambda: runtime.memcpy(CPU, 0, addr(buf), 4, MemcpyKind.H2H), Status.INVALID_ARGUMENT, "NULL")
    expect_status(lambda: runtime.memcpy(CPU, addr(buf), 0, 4, MemcpyKind.H2H), Status.INVALID_ARGUMENT, "NULL")
    expect_status(lambda: runtime.memcpy(CPU, addr(buf), addr(buf), 4, 9), Status.INVALID_ARGUMENT, "memcpy kind")
    expect_status(lambda: runtime.memcpy(CPU, addr(buf), addr(buf), 4, MemcpyKind.H2H, device_id=1),
                  Status.INVALID_ARGUMENT)


def test_streams_and_async_copies():
    src = np.arange(256, dtype=np.int32)
    dst = np.zeros(256, dtype=np.int32)
    with runtime.Stream(CPU) as stream:
        assert stream.handle
        runtime.memcpy(CPU, addr(dst), addr(src), src.nbytes, MemcpyKind.H2H, stream=stream)
        stream.synchronize()
        np.testing.assert_array_equal(dst, src)
        expect_status(lambda: runtime.memcpy(CPU, addr(dst), addr(src), 4, 8, stream=stream),
                      Status.INVALID_ARGUMENT)
    assert stream.handle is None
    stream.close()  # closing twice is harmless
    # the default stream (NULL)
    dst[:] = 0
    llaisys.libllaisys.check(llaisys.libllaisys.LIB.llaisysMemcpyAsync(
        int(CPU), 0, addr(dst), addr(src), src.nbytes, int(MemcpyKind.H2H), None))
    np.testing.assert_array_equal(dst, src)


def test_events_record_query_synchronize_and_time():
    with runtime.Stream(CPU) as stream, runtime.Event(CPU) as start, runtime.Event(CPU) as end:
        expect_status(start.query, Status.INVALID_ARGUMENT, "never recorded")
        expect_status(lambda: start.elapsed_ms(end), Status.INVALID_ARGUMENT, "recorded")
        start.record(stream)
        assert start.query() is True
        time.sleep(0.05)
        end.record()  # on the default stream
        end.synchronize()
        assert end.query() is True
        ms = start.elapsed_ms(end)
        assert 45.0 <= ms < 2000.0, ms
        assert end.elapsed_ms(start) <= 0.0  # reversed order: negative (or zero)
        start.record(stream)  # re-recording moves the timestamp
        assert start.elapsed_ms(end) <= 0.0
        assert end.elapsed_ms(start) >= 0.0
