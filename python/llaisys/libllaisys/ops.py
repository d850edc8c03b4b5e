"""ctypes declarations of include/llaisys/ops.h."""

from __future__ import annotations

import ctypes

from .tensor import llaisysTensor_t as T

llaisysPackedLinear_t = ctypes.c_void_p


def declare(lib: ctypes.CDLL) -> None:
    f = ctypes.c_float
    signatures = {
        "llaisysAdd": [T, T, T],
        "llaisysMul": [T, T, T],
        "llaisysEmbedding": [T, T, T],
        "llaisysLinear": [T, T, T, T],
        "llaisysPackedLinearCreate": [T, ctypes.POINTER(llaisysPackedLinear_t)],
        "llaisysPackedLinearCreateStacked": [ctypes.POINTER(T), ctypes.c_size_t,
                                             ctypes.POINTER(llaisysPackedLinear_t)],
        "llaisysPackedLinearApply": [llaisysPackedLinear_t, T, T, T],
        "llaisysPackedLinearArgmax": [llaisysPackedLinear_t, T, ctypes.POINTER(ctypes.c_int64),
                                      ctypes.POINTER(ctypes.c_int)],
        "llaisysPackedLinearDestroy": [llaisysPackedLinear_t],
        "llaisysRmsNorm": [T, T, T, f],
        "llaisysAddRmsNorm": [T, T, T, T, f],
        "llaisysRope": [T, T, T, f],
        "llaisysSelfAttention": [T, T, T, T, f],
        "llaisysPagedAttention": [T, T, T, T, T, T, T, T, T, f],
        "llaisysPagedAttentionReference": [T, T, T, T, T, T, T, T, T, f],
        "llaisysSwiGLU": [T, T, T],
        "llaisysArgmax": [T, T, T],
        "llaisysSoftmax": [T, T],
        "llaisysRopeFrequencies": [f, ctypes.c_int, f, f, f, ctypes.c_size_t, f, f, f, ctypes.c_size_t, T,
                                   ctypes.POINTER(f)],
        "llaisysRopeTable": [T, T, T, T, f],
        "llaisysPagedAttentionWindow": [T, T, T, T, T, T, T, T, T, f, ctypes.c_int64, ctypes.c_int],
        "llaisysRmsNormHeads": [T, T, f],
        "llaisysMoeTopk": [T, T, T, ctypes.c_int],
        "llaisysMoeExperts": [T, T, T, T, T, T],
        "llaisysDequantize": [T, T],
        "llaisysQuantize": [T, T],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int32
