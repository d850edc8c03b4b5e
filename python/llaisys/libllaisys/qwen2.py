"""ctypes declarations of include/llaisys/models/qwen2.h."""

from __future__ import annotations

import ctypes

from .kv_cache import llaisysKVCache_t
from .model import Batch, StepOutput  # the step structs are model.h's, shared
from .sampler import SamplingParams

llaisysQwen2Model_t = ctypes.c_void_p


class Qwen2Meta(ctypes.Structure):
    """Mirror of llaisysQwen2Meta_t."""

    _fields_ = [
        ("dtype", ctypes.c_int),
        ("n_layers", ctypes.c_size_t),
        ("hidden_size", ctypes.c_size_t),
        ("intermediate_size", ctypes.c_size_t),
        ("n_heads", ctypes.c_size_t),
        ("n_kv_heads", ctypes.c_size_t),
        ("head_dim", ctypes.c_size_t),
        ("vocab_size", ctypes.c_size_t),
        ("max_position_embeddings", ctypes.c_size_t),
        ("rms_norm_eps", ctypes.c_float),
        ("rope_theta", ctypes.c_float),
        ("tie_word_embeddings", ctypes.c_int),
    ]


def declare(lib: ctypes.CDLL) -> None:
    M = llaisysQwen2Model_t
    lib.llaisysQwen2ModelCreate.argtypes = [ctypes.POINTER(Qwen2Meta), ctypes.c_int, ctypes.c_int]
    lib.llaisysQwen2ModelCreate.restype = M
    lib.llaisysQwen2ModelDestroy.argtypes = [M]
    lib.llaisysQwen2ModelDestroy.restype = ctypes.c_int32
    lib.llaisysQwen2ModelSetWeight.argtypes = [M, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int,
                                               ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t]
    lib.llaisysQwen2ModelSetWeight.restype = ctypes.c_int32
    lib.llaisysQwen2ModelMissingWeights.argtypes = [M, ctypes.POINTER(ctypes.c_size_t), ctypes.c_char_p,
                                                    ctypes.c_size_t]
    lib.llaisysQwen2ModelMissingWeights.restype = ctypes.c_int32
    lib.llaisysQwen2ModelCreateKVCache.argtypes = [M, ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t]
    lib.llaisysQwen2ModelCreateKVCache.restype = llaisysKVCache_t
    lib.llaisysQwen2ModelStep.argtypes = [M, llaisysKVCache_t, ctypes.POINTER(Batch), ctypes.POINTER(SamplingParams),
                                          ctypes.POINTER(StepOutput)]
    lib.llaisysQwen2ModelStep.restype = ctypes.c_int32
