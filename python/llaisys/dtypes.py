"""dtype names, numpy equivalents, and bf16 <-> f32 conversion without torch.

numpy has no bfloat16: bf16 data travels as uint16 bit patterns, converted to and from f32
with round-to-nearest-even (what torch's ``.to(torch.bfloat16)`` does).
"""

from __future__ import annotations

import numpy as np

from .libllaisys import LIB, DataType

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
    "q4_0": DataType.Q4_0, "q4_1": DataType.Q4_1, "q5_0": DataType.Q5_0, "q5_1": DataType.Q5_1,
    "q8_0": DataType.Q8_0,
    "q2_k": DataType.Q2_K, "q3_k": DataType.Q3_K, "q4_k": DataType.Q4_K, "q5_k": DataType.Q5_K, "q6_k": DataType.Q6_K,
    "iq4_xs": DataType.IQ4_XS,
    "iq2_xxs": DataType.IQ2_XXS, "iq2_xs": DataType.IQ2_XS, "iq2_s": DataType.IQ2_S, "iq3_xxs": DataType.IQ3_XXS,
    "iq3_s": DataType.IQ3_S, "iq1_s": DataType.IQ1_S, "iq1_m": DataType.IQ1_M,
}


def as_dtype(dtype: "DataType | str") -> DataType:
    """A DataType from an enum value or a name such as 'bf16' or 'float32'."""
    if isinstance(dtype, DataType):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _BY_NAME:
        return _BY_NAME[dtype.lower()]
    raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(_BY_NAME)}")


# Block-quantized dtypes (GGUF layouts) -> (elements per block, bytes per block), read from the
# library (llaisysDataTypeBlockSize / BlockBytes) so the geometry is written down once.
_BLOCKS = {dt: (int(LIB.llaisysDataTypeBlockSize(int(dt))), int(LIB.llaisysDataTypeBlockBytes(int(dt))))
           for dt in DataType if LIB.llaisysDataTypeBlockSize(int(dt)) > 1}


def is_quantized(dtype: "DataType | str") -> bool:
    """True for the block-quantized dtypes (q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k,
    iq4_xs and the i-quants iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m)."""
    return as_dtype(dtype) in _BLOCKS


def block_size(dtype: "DataType | str") -> int:
    """Elements per block: 32 or 256 for a quantized dtype, 1 for any other."""
    return _BLOCKS.get(as_dtype(dtype), (1, 0))[0]


def block_bytes(dtype: "DataType | str") -> int:
    """Bytes per block of a quantized dtype (ValueError for any other)."""
    dt = as_dtype(dtype)
    if dt not in _BLOCKS:
        raise ValueError(f"dtype {dt.name.lower()} is not block-quantized")
    return _BLOCKS[dt][1]


def quant_byte_shape(shape: "tuple[int, ...]", dtype: "DataType | str") -> "tuple[int, ...]":
    """The uint8 shape holding a quantized tensor of element shape `shape`: the last dim
    becomes its bytes (last / block_size * block_bytes). ValueError when shape has no dims or
    its last dim is not a multiple of the block size."""
    dt = as_dtype(dtype)
    shape = tuple(int(d) for d in shape)
    bs, bb = block_size(dt), block_bytes(dt)
    if not shape or shape[-1] % bs:
        raise ValueError(f"shape {shape}: the last dim of a {dt.name.lower()} tensor must be a multiple "
                         f"of its block size {bs}")
    return (*shape[:-1], shape[-1] // bs * bb)


def quant_element_shape(byte_shape: "tuple[int, ...]", dtype: "DataType | str") -> "tuple[int, ...]":
    """The element shape of quantized bytes of shape `byte_shape` (last dim: bytes per row).
    ValueError when the bytes per row are not whole blocks."""
    dt = as_dtype(dtype)
    byte_shape = tuple(int(d) for d in byte_shape)
    bs, bb = block_size(dt), block_bytes(dt)
    if not byte_shape or byte_shape[-1] % bb:
        raise ValueError(f"array of shape {byte_shape}: the bytes per row of a {dt.name.lower()} tensor "
                         f"must be a multiple of its block bytes {bb}")
    return (*byte_shape[:-1], byte_shape[-1] // bb * bs)


def storage_numpy_dtype(dtype: DataType) -> np.dtype:
    """The numpy dtype that holds this dtype's bytes (uint16 for bf16, uint8 for the
    quantized dtypes, whose rows are bytes: see quant_byte_shape)."""
    if dtype in _BLOCKS:
        return np.dtype(np.uint8)
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
