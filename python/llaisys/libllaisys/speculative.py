"""ctypes declarations of include/llaisys/speculative.h."""

from __future__ import annotations

import ctypes

from .sampler import SamplingParams

_f32p = ctypes.POINTER(ctypes.c_float)


def available(lib: ctypes.CDLL) -> bool:
    """Whether the loaded library exports llaisysSampleProbs (a library built before it did
    still loads; speculative sampling then refuses to start, naming the missing symbol)."""
    return hasattr(lib, "llaisysSampleProbs")


def declare(lib: ctypes.CDLL) -> None:
    if not available(lib):
        return
    lib.llaisysSampleProbs.argtypes = [_f32p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(SamplingParams),
                                       _f32p]
    lib.llaisysSampleProbs.restype = ctypes.c_int32
