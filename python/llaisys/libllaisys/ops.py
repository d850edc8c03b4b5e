"""ctypes declarations of include/llaisys/ops.h."""

from __future__ import annotations

import ctypes

from .tensor import llaisysTensor_t as T


def declare(lib: ctypes.CDLL) -> None:
    f = ctypes.c_float
    signatures = {
        "llaisysAdd": [T, T, T],
        "llaisysMul": [T, T, T],
        "llaisysEmbedding": [T, T, T],
        "llaisysLinear": [T, T, T, T],
        "llaisysRmsNorm": [T, T, T, f],
        "llaisysRope": [T, T, T, f],
        "llaisysSelfAttention": [T, T, T, T, f],
        "llaisysPagedAttention": [T, T, T, T, T, T, T, T, T, f],
        "llaisysSwiGLU": [T, T, T],
        "llaisysArgmax": [T, T, T],
        "llaisysSoftmax": [T, T],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int32
