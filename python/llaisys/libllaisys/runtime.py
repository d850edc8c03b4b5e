"""ctypes declarations of include/llaisys/runtime.h."""

from __future__ import annotations

import ctypes

llaisysStream_t = ctypes.c_void_p
llaisysEvent_t = ctypes.c_void_p

MAX_THREADS = 1024  # LLAISYS_MAX_THREADS


def declare(lib: ctypes.CDLL) -> None:
    c_int, c_size_t, c_void_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p
    status = ctypes.c_int32
    table = {
        "llaisysGetDeviceCount": [c_int, ctypes.POINTER(c_int)],
        "llaisysSetNumThreads": [c_int],
        "llaisysGetNumThreads": [ctypes.POINTER(c_int)],
        "llaisysSetBatchInvariant": [c_int],
        "llaisysGetBatchInvariant": [ctypes.POINTER(c_int)],
        "llaisysCpuQuantPrefetch": [ctypes.POINTER(c_size_t), ctypes.POINTER(ctypes.c_char_p)],
        "llaisysSetDevice": [c_int, c_int],
        "llaisysDeviceSynchronize": [c_int, c_int],
        "llaisysMalloc": [c_int, c_int, c_int, c_size_t, ctypes.POINTER(c_void_p)],
        "llaisysFree": [c_int, c_int, c_int, c_void_p],
        "llaisysMemoryStats": [c_int, c_int, ctypes.POINTER(c_size_t), ctypes.POINTER(c_size_t)],
        "llaisysGetMemoryInfo": [c_int, c_int, ctypes.POINTER(c_size_t), ctypes.POINTER(c_size_t)],
        "llaisysEmptyCache": [c_int, c_int],
        "llaisysMemcpy": [c_int, c_int, c_void_p, c_void_p, c_size_t, c_int],
        "llaisysMemcpyAsync": [c_int, c_int, c_void_p, c_void_p, c_size_t, c_int, llaisysStream_t],
        "llaisysStreamCreate": [c_int, c_int, ctypes.POINTER(llaisysStream_t)],
        "llaisysStreamDestroy": [llaisysStream_t],
        "llaisysStreamSynchronize": [llaisysStream_t],
        "llaisysEventCreate": [c_int, c_int, ctypes.POINTER(llaisysEvent_t)],
        "llaisysEventDestroy": [llaisysEvent_t],
        "llaisysEventRecord": [llaisysEvent_t, llaisysStream_t],
        "llaisysEventQuery": [llaisysEvent_t],
        "llaisysEventSynchronize": [llaisysEvent_t],
        "llaisysEventElapsedTime": [llaisysEvent_t, llaisysEvent_t, ctypes.POINTER(ctypes.c_float)],
    }
    for name, argtypes in table.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = status
    lib.llaisysCpuIsa.argtypes = []
    lib.llaisysCpuIsa.restype = ctypes.c_char_p
    lib.llaisysCpuUsesAmx.argtypes = []
    lib.llaisysCpuUsesAmx.restype = ctypes.c_int
    lib.llaisysCpuQuantVnni.argtypes = []
    lib.llaisysCpuQuantVnni.restype = ctypes.c_int
    lib.llaisysCpuSplits256.argtypes = []
    lib.llaisysCpuSplits256.restype = ctypes.c_int
    lib.llaisysCpuQuantRepacked.argtypes = [ctypes.c_int]
    lib.llaisysCpuQuantRepacked.restype = ctypes.c_int
    lib.llaisysCpuQuantPlan.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    lib.llaisysCpuQuantPlan.restype = ctypes.c_int32
    lib.llaisysCpuAmxBuilt.argtypes = []
    lib.llaisysCpuAmxBuilt.restype = ctypes.c_int
