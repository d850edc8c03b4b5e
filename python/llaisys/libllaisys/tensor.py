"""ctypes declarations of include/llaisys/tensor.h."""

from __future__ import annotations

import ctypes

llaisysTensor_t = ctypes.c_void_p
MAX_DIMS = 8


def declare(lib: ctypes.CDLL) -> None:
    T, c_size_t, c_int = llaisysTensor_t, ctypes.c_size_t, ctypes.c_int
    size_p = ctypes.POINTER(c_size_t)
    status = ctypes.c_int32
    signatures = {
        # name: (argtypes, restype)
        "llaisysTensorCreate2": ([size_p, c_size_t, c_int, c_int, c_int, ctypes.POINTER(T)], status),
        "llaisysTensorCreate": ([size_p, c_size_t, c_int, c_int, c_int], T),  # deprecated: Create2
        "llaisysTensorDestroy": ([T], status),
        "llaisysTensorLoad": ([T, ctypes.c_void_p, c_size_t], status),
        "llaisysTensorRead": ([T, ctypes.c_void_p, c_size_t], status),
        "llaisysTensorNdim": ([T], c_size_t),
        "llaisysTensorNumel": ([T], c_size_t),
        "llaisysTensorDataType": ([T], c_int),
        "llaisysTensorDeviceType": ([T], c_int),
        "llaisysTensorDeviceId": ([T], c_int),
        "llaisysTensorIsContiguous": ([T], c_int),
        "llaisysTensorShape": ([T, size_p, c_size_t], status),
        "llaisysTensorStrides": ([T, ctypes.POINTER(ctypes.c_ssize_t), c_size_t], status),
        "llaisysTensorData": ([T], ctypes.c_void_p),
        "llaisysTensorView": ([T, size_p, c_size_t], T),
        "llaisysTensorPermute": ([T, size_p, c_size_t], T),
        "llaisysTensorSlice": ([T, c_size_t, c_size_t, c_size_t], T),
        "llaisysTensorReshape": ([T, size_p, c_size_t], T),
        "llaisysTensorContiguous": ([T], T),
        "llaisysTensorCopy": ([T, T], status),
        "llaisysTensorDebug": ([T, c_size_t], status),
    }
    for name, (argtypes, restype) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = restype
