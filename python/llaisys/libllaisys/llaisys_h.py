"""Mirror of include/llaisys.h: enums, status codes, the error type, base functions."""

from __future__ import annotations

import ctypes
from enum import IntEnum


class DeviceType(IntEnum):
    CPU = 0
    NVIDIA = 1


class DataType(IntEnum):
    INVALID = 0
    F32 = 1
    F16 = 2
    BF16 = 3
    I32 = 4
    I64 = 5
    U8 = 6
    I8 = 7
    F64 = 8
    BOOL = 9
    # block-quantized (GGUF layouts): 100 + the GGML type id
    Q4_0 = 102
    Q4_1 = 103
    Q5_0 = 106
    Q5_1 = 107
    Q8_0 = 108
    Q2_K = 110
    Q3_K = 111
    Q4_K = 112
    Q5_K = 113
    Q6_K = 114
    IQ4_XS = 123
    IQ2_XXS = 116
    IQ2_XS = 117
    IQ3_XXS = 118
    IQ1_S = 119
    IQ3_S = 121
    IQ2_S = 122
    IQ1_M = 129


class Status(IntEnum):
    OK = 0
    NOT_READY = 1
    NO_KV_SPACE = 2
    INVALID_ARGUMENT = -1
    SHAPE_MISMATCH = -2
    DTYPE_MISMATCH = -3
    DEVICE_MISMATCH = -4
    OUT_OF_RANGE = -5
    BUFFER_TOO_SMALL = -6
    OUT_OF_MEMORY = -7
    UNSUPPORTED = -8
    DEVICE_ERROR = -9
    DEVICE_LOST = -10  # a sticky device error: the device's context is unusable until the process restarts
    INTERNAL = -100


class MemoryKind(IntEnum):
    """Mirror of llaisysMemoryKind_t (include/llaisys/runtime.h)."""

    HOST = 0
    PINNED_HOST = 1
    DEVICE = 2


class MemcpyKind(IntEnum):
    """Mirror of llaisysMemcpyKind_t (include/llaisys/runtime.h)."""

    H2H = 0
    H2D = 1
    D2H = 2
    D2D = 3


class LlaisysError(RuntimeError):
    """A non-zero status from libllaisys, with the library's message."""

    def __init__(self, status: int, message: str):
        self.status = status
        try:
            name = Status(status).name
        except ValueError:
            name = str(status)
        super().__init__(f"[{name}] {message}")
        self.message = message


class LlaisysInputError(LlaisysError, ValueError):
    """A status that blames the caller's input (bad argument, shape, dtype, device, index,
    buffer size): also a ValueError, so input mistakes read as such everywhere."""


class DeviceLostError(LlaisysError):
    """DEVICE_LOST: the device hit a sticky error (a CUDA illegal address, a device-side
    assert, an uncorrectable ECC error...) and its context is unusable: every later call on it
    fails until the process restarts. ``fatal`` tells the engine, which imports nothing from
    here, that no retry can succeed (executor.ModelRunner's contract)."""

    fatal = True


_INPUT_STATUSES = {
    Status.INVALID_ARGUMENT,
    Status.SHAPE_MISMATCH,
    Status.DTYPE_MISMATCH,
    Status.DEVICE_MISMATCH,
    Status.OUT_OF_RANGE,
    Status.BUFFER_TOO_SMALL,
}


def error_for(status: int, message: str) -> LlaisysError:
    """The exception for a status: LlaisysInputError for input mistakes, DeviceLostError for
    a lost device, else LlaisysError."""
    if status == Status.DEVICE_LOST:
        return DeviceLostError(status, message)
    cls = LlaisysInputError if status in _INPUT_STATUSES else LlaisysError
    return cls(status, message)


def declare_base(lib: ctypes.CDLL) -> None:
    lib.llaisysGetLastError.argtypes = []
    lib.llaisysGetLastError.restype = ctypes.c_char_p
    lib.llaisysGetLastStatus.argtypes = []
    lib.llaisysGetLastStatus.restype = ctypes.c_int32
    lib.llaisysClearLastError.argtypes = []
    lib.llaisysClearLastError.restype = None
    lib.llaisysDataTypeSize.argtypes = [ctypes.c_int]
    lib.llaisysDataTypeSize.restype = ctypes.c_size_t
    lib.llaisysDataTypeBlockSize.argtypes = [ctypes.c_int]
    lib.llaisysDataTypeBlockSize.restype = ctypes.c_size_t
    lib.llaisysDataTypeBlockBytes.argtypes = [ctypes.c_int]
    lib.llaisysDataTypeBlockBytes.restype = ctypes.c_size_t
    lib.llaisysDataTypeName.argtypes = [ctypes.c_int]
    lib.llaisysDataTypeName.restype = ctypes.c_char_p
    lib.llaisysVersion.argtypes = []
    lib.llaisysVersion.restype = ctypes.c_char_p
