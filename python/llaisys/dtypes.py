"""dtype names, numpy equivalents, and bf16 <-> f32 conversion without torch.

numpy has no bfloat16: bf16 data travels as uint16 bit patterns, converted to and from f32
with round-to-nearest-even (what torch's ``.to(torch.bfloat16)`` does).
"""

from __future__ import annotations

import numpy as np

from .libllaisys import DataType

_NUMPY = {
    DataType.F32: np.dtype(np.float32),
    DataType.F16: np.dtype(np.float16),
    DataType.BF16: np.dtype(np.uint16),  # bit patterns
    DataType.I32: np.dtype(np.int32),
    DataType.I64: np.dtype(np.int64),
    DataType.U8: np.dtype(np.uint8),
    DataType.I8: np.dtype(np.int8),
    DataType.F64: np.dtype(np.float64),
    DataType.BOOL: np.dtype(np.bool_),
}

_BY_NAME = {
    "f32": DataType.F32, "float32": DataType.F32,
    "f16": DataType.F16, "float16": DataType.F16,
    "bf16": DataType.BF16, "bfloat16": DataType.BF16,
    "i32": DataType.I32, "int32": DataType.I32,
    "i64": DataType.I64, "int64": DataType.I64,
    "u8": DataType.U8, "uint8": DataType.U8,
    "i8": DataType.I8, "int8": DataType.I8,
    "f64": DataType.F64, "float64": DataType.F64,
    "bool": DataType.BOOL,
    "q4_0": DataType.Q4_0, "q5_0": DataType.Q5_0, "q8_0": DataType.Q8_0,
    "q4_k": DataType.Q4_K, "q5_k": DataType.Q5_K, "q6_k": DataType.Q6_K,
}


def as_dtype(dtype: "DataType | str") -> DataType:
    """A DataType from an enum value or a name such as 'bf16' or 'float32'."""
    if isinstance(dtype, DataType):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _BY_NAME:
        return _BY_NAME[dtype.lower()]
    raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(_BY_NAME)}")


def storage_numpy_dtype(dtype: DataType) -> np.dtype:
    """The numpy dtype that holds this dtype's bytes (uint16 for bf16)."""
    if dtype not in _NUMPY:
        raise ValueError(f"dtype {dtype!r} has no numpy storage type")
    return _NUMPY[dtype]


def from_numpy_dtype(dtype: np.dtype) -> DataType:
    for k, v in _NUMPY.items():
        if k != DataType.BF16 and v == dtype:
            return k
    raise ValueError(f"numpy dtype {dtype} has no llaisys equivalent")


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 array -> uint16 bf16 bit patterns, rounding to nearest even (NaN stays NaN)."""
    x = np.asarray(x, dtype=np.float32, order="C")  # (ascontiguousarray would make 0-d 1-d)
    u = x.view(np.uint32)
    rounded = np.asarray((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16),
                         dtype=np.uint16)
    nan = np.isnan(x)
    if nan.any():
        rounded[nan] = ((u[nan] >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
    return rounded


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """uint16 bf16 bit patterns -> float32 (exact)."""
    wide = np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)
    return np.asarray(wide, dtype=np.uint32).view(np.float32)
