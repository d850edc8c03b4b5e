"""bfloat16 <-> float32 conversion in numpy (numpy has no bf16 dtype).

bf16 values are carried as ``uint16`` arrays holding the raw bit patterns.
f32 -> bf16 rounds to nearest, ties to even, exactly like torch's
``tensor.to(torch.bfloat16)`` on CPU, which turns every NaN into 0xFFFF (a quiet NaN).
Large arrays are converted in chunks so temporaries stay small.
"""

import numpy as np

_CHUNK = 1 << 22  # elements per chunk: bounds the uint32 temporaries to ~16 MiB each
_BF16_NAN = np.uint16(0xFFFF)  # what torch's CPU cast writes for any NaN


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 array (any shape) -> uint16 array of bf16 bits, same shape."""
    src = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty(src.shape, dtype=np.uint16)
    flat_in = src.reshape(-1).view(np.uint32)
    flat_out = out.reshape(-1)
    for start in range(0, flat_in.size, _CHUNK):
        bits = flat_in[start:start + _CHUNK]
        # round to nearest even: add 0x7FFF plus the lowest kept bit, then truncate
        rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
        chunk = (rounded >> np.uint32(16)).astype(np.uint16)
        nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
        if nan.any():
            chunk[nan] = _BF16_NAN
        flat_out[start:start + _CHUNK] = chunk
    return out


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """uint16 array of bf16 bits -> float32 array (exact), same shape."""
    if bits.dtype != np.uint16:
        raise ValueError(f"bf16 data must be carried as uint16, got {bits.dtype}")
    out = np.empty(bits.shape, dtype=np.uint32)
    np.left_shift(bits, 16, out=out, dtype=np.uint32)
    return out.view(np.float32)


def convert(data: np.ndarray, src: str, dst: str) -> np.ndarray:
    """Convert raw storage between float tags "bf16", "f16", "f32".

    bf16 is uint16 storage. Conversions go through float32 (exact for bf16/f16
    inputs) and round to nearest even on the way down, as torch does.
    Returns ``data`` itself when ``src == dst``.
    """
    for tag in (src, dst):
        if tag not in ("bf16", "f16", "f32"):
            raise ValueError(f"cannot convert float dtype {tag!r}: expected bf16, f16 or f32")
    if src == dst:
        return data
    f32 = bf16_to_f32(data) if src == "bf16" else np.asarray(data, dtype=np.float32)
    if dst == "f32":
        return f32
    if dst == "bf16":
        return f32_to_bf16(f32)
    return f32.astype(np.float16)
