"""Device runtime: devices, memory, copies, streams and events (include/llaisys/runtime.h)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from .libllaisys import LIB, DeviceType, LlaisysInputError, MemcpyKind, MemoryKind, Status, check
from .libllaisys.runtime import MAX_THREADS
from .owned import OwnedHandle


def cpu_isa() -> str:
    """The SIMD path of this process's CPU kernels: "scalar", "avx2", "avx512" or "avx512bf16"
    (the best the CPU has, or a lower one forced with LLAISYS_ISA)."""
    return LIB.llaisysCpuIsa().decode()


def cpu_amx() -> bool:
    """Whether the quantized linear's float path (prefill and batches of a GGUF weight) runs on
    AMX tiles in bf16 in this process (off with LLAISYS_AMX=0 or LLAISYS_ISA below avx512bf16)."""
    return bool(LIB.llaisysCpuUsesAmx())


def cpu_vnni() -> bool:
    """Whether the quantized weights' int8 kernels run on vpdpbusd in this process: AVX-512 VNNI
    (cpu_isa() avx512 or avx512bf16), or AVX-VNNI on Intel's client cores without AVX-512 (off
    with LLAISYS_AVX_VNNI=0 or LLAISYS_ISA=scalar); the library's own choice."""
    return bool(LIB.llaisysCpuQuantVnni())


# the GGUF block formats the CPU runs
QUANT_FORMATS = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs",
                 "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m")


def cpu_splits_256() -> bool:
    """Whether this CPU executes 256-bit vector ops as two 128-bit halves (AMD Zen 1 / Zen+;
    LLAISYS_SPLIT_256=0|1 overrides it): the library's own answer, read once per process."""
    return bool(LIB.llaisysCpuSplits256())


def quant_repacked() -> list:
    """The GGUF block formats ("q4_k", ...) whose weights this process repacks 16 rows at a time
    at load for its int8 kernels (the x16 layout, doc/architecture.md); the others keep the
    file's layout. The library's own choice, made once per process."""
    from .libllaisys import DataType

    return [f for f in QUANT_FORMATS if LIB.llaisysCpuQuantRepacked(int(DataType[f.upper()]))]


def quant_plan(fmt: str) -> str:
    """How this process runs a linear over weights of GGUF block format `fmt` ("q4_k", ...): one
    line naming the layout, the int8 kernel, the activation row count from which the float path
    takes over and what it runs on (the library's table, src/ops/linear/cpu/quant_plan.cpp).
    ValueError for a name that is not one of QUANT_FORMATS."""
    from .libllaisys import DataType

    if fmt not in QUANT_FORMATS:
        raise ValueError(f"fmt must be one of {QUANT_FORMATS}, got {fmt!r}")
    text = ctypes.c_char_p()
    check(LIB.llaisysCpuQuantPlan(int(DataType[fmt.upper()]), ctypes.byref(text)))
    return (text.value or b"").decode("utf-8", "replace")


def quant_prefetch() -> tuple[int, str]:
    """(bytes, reason): how far ahead the quantized kernels prefetch each weight row in this
    process (0: not at all), and why: the CPU kind and the measurement behind the value, or
    LLAISYS_QUANT_PREFETCH=<bytes> from the environment. Chosen once per process."""
    n, why = ctypes.c_size_t(0), ctypes.c_char_p()
    check(LIB.llaisysCpuQuantPrefetch(ctypes.byref(n), ctypes.byref(why)))
    return n.value, (why.value or b"").decode("utf-8", "replace")


def amx_built() -> bool:
    """Whether this library was built with the AMX kernel (CMake LLAISYS_AMX): without it
    cpu_amx() is False on every CPU."""
    return bool(LIB.llaisysCpuAmxBuilt())


def set_num_threads(n: int) -> None:
    """Use `n` threads in the CPU kernels from the next call on, in every thread of the process.

    LlaisysInputError (a ValueError) naming ``threads`` unless 1 <= n <= MAX_THREADS; TypeError
    for a non-integer. Not while another thread runs a step (the engine's loop thread)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"threads must be an integer, got {n!r}")
    if not 1 <= n <= MAX_THREADS:  # the core refuses it too; this keeps huge ints out of c_int
        raise LlaisysInputError(Status.INVALID_ARGUMENT, f"threads must be in 1..{MAX_THREADS}, got {n}")
    check(LIB.llaisysSetNumThreads(n))


def num_threads() -> int:
    """Threads the CPU kernels use: set_num_threads's, else the default (the physical cores this
    process may run on, or OMP_NUM_THREADS when the environment sets it)."""
    n = ctypes.c_int(0)
    check(LIB.llaisysGetNumThreads(ctypes.byref(n)))
    return n.value


def set_batch_invariant(on: bool) -> None:
    """Keep every CPU linear over GGUF blocks on one path at every batch size, for the whole
    process, from the next call on (off by default; set it between steps). Off, a call with at
    least a crossover of rows (quant_plan) takes the float path, which rounds otherwise than the
    int8 kernels, so a request's greedy answer can depend on what shares its steps and on the
    prefix cache; on, it does not, and prefill is slower where a crossover was finite. Float
    weights and attention have one path at every size already; the NVIDIA backend is not governed.
    TypeError unless `on` is a bool."""
    if not isinstance(on, bool):
        raise TypeError(f"batch_invariant must be True or False, got {on!r}")
    check(LIB.llaisysSetBatchInvariant(int(on)))


def batch_invariant() -> bool:
    """Whether set_batch_invariant(True) holds in this process."""
    out = ctypes.c_int(0)
    check(LIB.llaisysGetBatchInvariant(ctypes.byref(out)))
    return bool(out.value)


def device_count(device: DeviceType) -> int:
    n = ctypes.c_int(0)
    check(LIB.llaisysGetDeviceCount(int(device), ctypes.byref(n)))
    return n.value


def set_device(device: DeviceType, device_id: int = 0) -> None:
    check(LIB.llaisysSetDevice(int(device), device_id))


def synchronize(device: DeviceType, device_id: int = 0) -> None:
    check(LIB.llaisysDeviceSynchronize(int(device), device_id))


@dataclass(frozen=True)
class MemoryStats:
    allocated: int  # bytes handed out and not yet freed (as requested)
    reserved: int  # bytes held from the system (>= allocated: rounding and cached free blocks)


def memory_stats(device: DeviceType = DeviceType.CPU, device_id: int = 0) -> MemoryStats:
    a, r = ctypes.c_size_t(0), ctypes.c_size_t(0)
    check(LIB.llaisysMemoryStats(int(device), device_id, ctypes.byref(a), ctypes.byref(r)))
    return MemoryStats(a.value, r.value)


def memory_info(device: DeviceType = DeviceType.CPU, device_id: int = 0) -> tuple[int, int]:
    """(free, total) bytes of the device's memory as the system sees it (the host's RAM for the CPU)."""
    f, t = ctypes.c_size_t(0), ctypes.c_size_t(0)
    check(LIB.llaisysGetMemoryInfo(int(device), device_id, ctypes.byref(f), ctypes.byref(t)))
    return f.value, t.value


def empty_cache(device: DeviceType = DeviceType.CPU, device_id: int = 0) -> None:
    """Free the cached free blocks of a device (NVIDIA) back to the system; no-op on the CPU."""
    check(LIB.llaisysEmptyCache(int(device), device_id))


def malloc(device: DeviceType, size: int, kind: MemoryKind = MemoryKind.DEVICE, device_id: int = 0) -> int:
    """Raw allocation; returns the address (0 for size 0). Release with free()."""
    p = ctypes.c_void_p()
    check(LIB.llaisysMalloc(int(device), device_id, int(kind), size, ctypes.byref(p)))
    return p.value or 0


def free(device: DeviceType, ptr: int, kind: MemoryKind = MemoryKind.DEVICE, device_id: int = 0) -> None:
    check(LIB.llaisysFree(int(device), device_id, int(kind), ctypes.c_void_p(ptr)))


def memcpy(device: DeviceType, dst: int, src: int, size: int, kind: MemcpyKind, device_id: int = 0,
           stream: "Stream | None" = None) -> None:
    """Copy between raw addresses; with a stream the copy is queued on it."""
    if stream is None:
        check(LIB.llaisysMemcpy(int(device), device_id, ctypes.c_void_p(dst), ctypes.c_void_p(src), size, int(kind)))
    else:
        check(LIB.llaisysMemcpyAsync(int(device), device_id, ctypes.c_void_p(dst), ctypes.c_void_p(src), size,
                                     int(kind), stream.handle))


class Stream(OwnedHandle):
    _DESTROY = "llaisysStreamDestroy"
    _HANDLE_ATTR = "handle"

    def __init__(self, device: DeviceType = DeviceType.CPU, device_id: int = 0):
        self.handle = None
        h = ctypes.c_void_p()
        check(LIB.llaisysStreamCreate(int(device), device_id, ctypes.byref(h)))
        self.handle = h.value

    def synchronize(self) -> None:
        check(LIB.llaisysStreamSynchronize(self.handle))


class Event(OwnedHandle):
    _DESTROY = "llaisysEventDestroy"
    _HANDLE_ATTR = "handle"

    def __init__(self, device: DeviceType = DeviceType.CPU, device_id: int = 0):
        self.handle = None
        h = ctypes.c_void_p()
        check(LIB.llaisysEventCreate(int(device), device_id, ctypes.byref(h)))
        self.handle = h.value

    def record(self, stream: "Stream | None" = None) -> None:
        check(LIB.llaisysEventRecord(self.handle, stream.handle if stream else None))

    def query(self) -> bool:
        """True when the recorded work has completed."""
        return check(LIB.llaisysEventQuery(self.handle)) == Status.OK

    def synchronize(self) -> None:
        check(LIB.llaisysEventSynchronize(self.handle))

    def elapsed_ms(self, end: "Event") -> float:
        ms = ctypes.c_float()
        check(LIB.llaisysEventElapsedTime(self.handle, end.handle, ctypes.byref(ms)))
        return ms.value
