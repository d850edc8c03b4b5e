"""The allocator's counters and cache through the C ABI: on the CPU nothing is cached
(reserved == allocated); on NVIDIA freed blocks are reused, empty_cache returns them, and a
bad free is refused either way."""

from __future__ import annotations

import gc

import pytest

import llaisys
from llaisys import DeviceType, LlaisysInputError, MemoryKind, Status
from llaisys import runtime as rt

CPU, NV = DeviceType.CPU, DeviceType.NVIDIA
needs_gpu = pytest.mark.skipif(rt.device_count(NV) == 0, reason="no NVIDIA GPU in this build/machine")
MiB = 1 << 20


def test_cpu_reserved_equals_allocated_through_malloc_free_and_empty_cache(quiet_gc):
    base = rt.memory_stats(CPU)
    assert base.reserved == base.allocated
    ptrs = [rt.malloc(CPU, n, MemoryKind.DEVICE) for n in (1, 1000, 3 * MiB)]
    s = rt.memory_stats(CPU)
    assert s.allocated == base.allocated + 1 + 1000 + 3 * MiB and s.reserved == s.allocated
    rt.free(CPU, ptrs.pop(), MemoryKind.DEVICE)
    rt.empty_cache(CPU)  # nothing cached: a no-op
    s = rt.memory_stats(CPU)
    assert s.allocated == base.allocated + 1001 and s.reserved == s.allocated
    for p in ptrs:
        rt.free(CPU, p, MemoryKind.DEVICE)
    assert rt.memory_stats(CPU) == base


def test_cpu_double_free_and_foreign_pointer_are_invalid_argument(quiet_gc):
    p = rt.malloc(CPU, 256, MemoryKind.HOST)
    rt.free(CPU, p, MemoryKind.HOST)
    with pytest.raises(LlaisysInputError) as e:
        rt.free(CPU, p, MemoryKind.HOST)
    assert e.value.status == Status.INVALID_ARGUMENT


def test_empty_cache_checks_the_device():
    with pytest.raises(LlaisysInputError):
        rt.empty_cache(CPU, 5)
    with pytest.raises(llaisys.LlaisysError) as e:
        rt.empty_cache(NV, rt.device_count(NV))  # one past the last GPU (0 here without one)
    assert e.value.status in (Status.INVALID_ARGUMENT, Status.UNSUPPORTED)  # UNSUPPORTED: no backend built


# -- NVIDIA ---------------------------------------------------------------------------------


def _clean() -> rt.MemoryStats:
    gc.collect()
    rt.empty_cache(NV)
    return rt.memory_stats(NV)


@needs_gpu
@pytest.mark.parametrize("kind", [MemoryKind.DEVICE, MemoryKind.PINNED_HOST])
def test_nvidia_freed_block_is_reused_and_empty_cache_returns_it(kind, quiet_gc):
    base = _clean()
    p = rt.malloc(NV, 3 * MiB, kind)
    s = rt.memory_stats(NV)
    assert s.allocated == base.allocated + 3 * MiB
    assert s.reserved == base.reserved + 4 * MiB  # 2 MiB granularity above 1 MiB
    rt.free(NV, p, kind)
    cached = rt.memory_stats(NV)
    assert cached.allocated == base.allocated and cached.reserved == s.reserved  # kept
    q = rt.malloc(NV, 3 * MiB + 5, kind)  # same rounded size: the cached block, reserved flat
    assert q == p and rt.memory_stats(NV).reserved == s.reserved
    rt.free(NV, q, kind)
    with pytest.raises(LlaisysInputError) as e:
        rt.free(NV, q, kind)  # double free: refused though the block sits in the cache
    assert e.value.status == Status.INVALID_ARGUMENT
    rt.empty_cache(NV)
    assert rt.memory_stats(NV) == base


@needs_gpu
def test_nvidia_small_sizes_round_to_512_and_big_blocks_are_not_spent_on_small_requests(quiet_gc):
    base = _clean()
    big = rt.malloc(NV, 64 * MiB)
    rt.free(NV, big)
    small = rt.malloc(NV, 1000)  # the 64 MiB block is far too big for it: a new 1024-byte block
    s = rt.memory_stats(NV)
    assert small != big and s.reserved == base.reserved + 64 * MiB + 1024
    assert s.allocated == base.allocated + 1000
    rt.free(NV, small)
    rt.empty_cache(NV)
    assert rt.memory_stats(NV) == base


@needs_gpu
def test_nvidia_out_of_memory_still_reported_and_cache_survives(quiet_gc):
    base = _clean()
    p = rt.malloc(NV, 8 * MiB)
    rt.free(NV, p)
    with pytest.raises(llaisys.LlaisysError) as e:
        rt.malloc(NV, 1 << 50)  # fails even after emptying the cache
    assert e.value.status == Status.OUT_OF_MEMORY
    assert rt.memory_stats(NV) == base  # the retry gave the cached 8 MiB back
