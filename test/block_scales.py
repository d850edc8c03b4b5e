"""Where a GGUF block keeps its f16 scale, for the tests that write random blocks.

Every format keeps each f16 scale as two bytes at a fixed offset, except IQ1_M: its d is split
into four nibbles, nibble i in the top nibble of the uint16 scale word i at bytes 48..56 (the
lower 12 bits are the 3-bit sub-block scales). put_f16 and get_f16 are the one writer and
reader of both forms.
"""

from __future__ import annotations

import numpy as np


def put_f16(raw: np.ndarray, fmt: str, off: int, bits) -> None:
    """Writes the f16 bit patterns bits [...] as the scale at byte offset off of blocks
    raw [..., block bytes] (IQ1_M: as d, in the top nibbles of its scale words, the rest kept)."""
    bits = np.ascontiguousarray(np.asarray(bits, dtype=np.uint16).reshape(raw.shape[:-1]))
    if fmt == "iq1_m":
        sc = raw[..., 48:56].copy().view(np.uint16)
        for i in range(4):
            sc[..., i] = (sc[..., i] & 0x0FFF) | (((bits >> (4 * i)) & 0xF) << 12)
        raw[..., 48:56] = sc.view(np.uint8)
    else:
        raw[..., off:off + 2] = bits[..., None].view(np.uint8)


def get_f16(raw: np.ndarray, fmt: str, off: int) -> np.ndarray:
    """The f16 bit patterns [...] of the scale put_f16 writes."""
    if fmt == "iq1_m":
        sc = raw[..., 48:56].copy().view(np.uint16)
        return sum(((sc[..., i] >> 12) & 0xF) << (4 * i) for i in range(4)).astype(np.uint16)
    return raw[..., off:off + 2].copy().view(np.uint16)[..., 0]


def put_scale(raw: np.ndarray, fmt: str, off: int, values: np.ndarray) -> None:
    """put_f16 of float values, rounded to f16."""
    put_f16(raw, fmt, off, np.asarray(values).astype(np.float16).view(np.uint16))
