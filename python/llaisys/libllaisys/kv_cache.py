"""ctypes declarations of include/llaisys/kv_cache.h."""

from __future__ import annotations

import ctypes
from enum import IntEnum

llaisysKVCache_t = ctypes.c_void_p
MAX_SEQS = 256  # LLAISYS_KV_MAX_SEQS


class KVLayout(IntEnum):
    BLOCK = 0
    SLOT = 1


class KVCacheParams(ctypes.Structure):
    """Mirror of llaisysKVCacheParams_t."""

    _fields_ = [
        ("layout", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("n_layers", ctypes.c_size_t),
        ("n_kv_heads", ctypes.c_size_t),
        ("head_dim", ctypes.c_size_t),
        ("n_slots", ctypes.c_size_t),
        ("block_size", ctypes.c_size_t),
        ("rope_theta", ctypes.c_float),
        ("device", ctypes.c_int),
        ("device_id", ctypes.c_int),
    ]


class KVCacheStats(ctypes.Structure):
    """Mirror of llaisysKVCacheStats_t."""

    _fields_ = [
        ("layout", ctypes.c_int),
        ("capacity", ctypes.c_size_t),
        ("used", ctypes.c_size_t),
        ("free", ctypes.c_size_t),
        ("bytes", ctypes.c_size_t),
        ("block_size", ctypes.c_size_t),
    ]


def declare(lib: ctypes.CDLL) -> None:
    C, i32, i64 = llaisysKVCache_t, ctypes.c_int32, ctypes.c_int64
    lib.llaisysKVCacheSlotsForBytes.argtypes = [ctypes.POINTER(KVCacheParams), ctypes.c_size_t]
    lib.llaisysKVCacheSlotsForBytes.restype = ctypes.c_size_t
    lib.llaisysKVCacheCreate.argtypes = [ctypes.POINTER(KVCacheParams)]  # deprecated: Create2
    lib.llaisysKVCacheCreate.restype = C
    signatures = {
        "llaisysKVCacheCreate2": [ctypes.POINTER(KVCacheParams), ctypes.POINTER(C)],
        "llaisysKVCacheDestroy": [C],
        "llaisysKVCacheGetStats": [C, ctypes.POINTER(KVCacheStats)],
        "llaisysKVCacheSeqRm": [C, i32, i64, i64],
        "llaisysKVCacheSeqCp": [C, i32, i32, i64, i64],
        "llaisysKVCacheSeqKeep": [C, i32],
        "llaisysKVCacheSeqAdd": [C, i32, i64, i64, i64],
        "llaisysKVCacheSeqPosMax": [C, i32, ctypes.POINTER(i64)],
        "llaisysKVCacheClear": [C],
        "llaisysKVCacheBlockBytes": [C, ctypes.POINTER(ctypes.c_size_t)],
        "llaisysKVCacheBlockRead": [C, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t],
        "llaisysKVCacheBlockWrite": [C, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t],
        "llaisysKVCacheCopyShift": [C, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p],
    }
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int32
