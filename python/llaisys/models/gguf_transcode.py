"""GGUF block types without llaisys kernels whose every value a type with kernels holds exactly:
their matrices are rewritten into that type at load and run on its quantized kernels, where other
such types are widened to f32 (gguf_model.py).

    Q3_K   -> Q6_K   a weight is d * s * (q - 4): d the block's f16, s in [-32, 31] one per 16
                     weights, q in [0, 7]. Q6_K's weight is d * s * (q6 - 32) with an int8 s per 16
                     weights: the same d and s, q6 = q + 28. 6.56 bits a weight where the file
                     has 3.44 (f32 would take 32); Q3_K_S/M/L files hold Q3_K beside Q4_K-Q6_K.
    IQ4_NL -> Q8_0   a weight is d * T[i], T llama.cpp's 16-entry int8 table: the same d, q8 = T[i].

The rewritten blocks dequantize to the file's values bit for bit (gguf-py's dequantizer, llama.cpp's
own in Python, on both sides: test/models/test_gguf_transcode.py), so the kernels see the weights
llama.cpp sees. A matrix is rewritten when its `data` is read (Transcoded), a bounded number of
blocks at a time, so the model holds no more than the matrix being copied into the core.
"""

from __future__ import annotations

from dataclasses import dataclass

import gguf
import numpy as np

_Q = gguf.GGMLQuantizationType
TRANSCODES = {int(_Q.Q3_K): "q6_k", int(_Q.IQ4_NL): "q8_0"}  # the file's type id -> the type it runs as
_CHUNK = 1 << 16  # blocks rewritten at once: a few MiB of numpy temporaries, whatever the matrix
_IQ4_NL_TABLE = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                         np.int8).view(np.uint8)


def _q3_k_as_q6_k(src: np.ndarray) -> np.ndarray:
    """uint8 [n, 110] Q3_K blocks -> [n, 210] Q6_K blocks of the same values."""
    n = src.shape[0]
    hmask, qs, packed, d = src[:, :32], src[:, 32:96], src[:, 96:108], src[:, 108:110]
    # weight e = 128 h + 32 s + j: low 2 bits from bits 2s of qs[32 h + j], the third from bit e // 32 of hmask[j]
    low = (qs.reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)) & 3
    high = (hmask.reshape(n, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1
    q6 = low.reshape(n, 256) + (high.reshape(n, 256) << 2) + np.uint8(28)  # q6 - 32 = q - 4
    # scale i (weights 16 i ..): low 4 bits from nibble i // 8 of packed[i % 8], high 2 from bits 2 (i // 4) of packed[8 + i % 4]
    lo = (packed[:, :8].reshape(n, 1, 8) >> np.array([0, 4], np.uint8).reshape(1, 2, 1)) & 0x0F
    hi = (packed[:, 8:].reshape(n, 1, 4) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 4, 1)) & 3
    scales = (lo.reshape(n, 16) | (hi.reshape(n, 16) << 4)) - np.uint8(32)  # int8 s, as its uint8 bits
    # Q6_K: ql[64 h + j] holds weights 128 h + j (low nibble) and 128 h + 64 + j (high), qh[32 h + j]
    # bits 2s hold bits 4-5 of weight 128 h + 32 s + j
    q = q6.reshape(n, 2, 2, 64)
    ql = (q[:, :, 0] & 0x0F) | ((q[:, :, 1] & 0x0F) << 4)
    top = q6.reshape(n, 2, 4, 32) >> 4
    qh = top[:, :, 0] | (top[:, :, 1] << 2) | (top[:, :, 2] << 4) | (top[:, :, 3] << 6)
    return np.concatenate([ql.reshape(n, 128), qh.reshape(n, 64), scales, d], axis=1)


def _iq4_nl_as_q8_0(src: np.ndarray) -> np.ndarray:
    """uint8 [n, 18] IQ4_NL blocks -> [n, 34] Q8_0 blocks of the same values."""
    n = src.shape[0]
    # weight j from the low nibble of qs[j], weight 16 + j from its high nibble
    idx = (src[:, 2:].reshape(n, 1, 16) >> np.array([0, 4], np.uint8).reshape(1, 2, 1)) & 0x0F
    return np.concatenate([src[:, :2], _IQ4_NL_TABLE[idx.reshape(n, 32)]], axis=1)


_REWRITE = {int(_Q.Q3_K): _q3_k_as_q6_k, int(_Q.IQ4_NL): _iq4_nl_as_q8_0}


def block_bytes(type_id: int) -> int:
    return gguf.GGML_QUANT_SIZES[_Q(type_id)][1]


def transcode(raw: np.ndarray, type_id: int) -> np.ndarray:
    """uint8 [..., row bytes] rows of TRANSCODES' type `type_id` -> the same rows in the type it
    runs as: uint8 [..., blocks a row x its block bytes]."""
    rewrite, src_bytes = _REWRITE[type_id], block_bytes(type_id)
    dst_bytes = block_bytes(_Q[TRANSCODES[type_id].upper()])
    if raw.shape[-1] % src_bytes:
        raise ValueError(f"{_Q(type_id).name} rows of {raw.shape[-1]} bytes are not whole {src_bytes}-byte blocks")
    blocks = raw.reshape(-1, src_bytes)
    out = np.empty((blocks.shape[0], dst_bytes), np.uint8)
    for at in range(0, blocks.shape[0], _CHUNK):
        out[at:at + _CHUNK] = rewrite(np.asarray(blocks[at:at + _CHUNK]))
    return out.reshape(*raw.shape[:-1], raw.shape[-1] // src_bytes * dst_bytes)


@dataclass
class Transcoded:
    """A matrix of one of TRANSCODES' types, rewritten each time `data` is read."""

    name: str  # HF tensor name
    dtype: str  # the type it runs as: "q6_k" or "q8_0"
    shape: tuple  # element shape: (rows, k), or (experts, rows, k) for a stack that gguf_model cuts
    source: np.ndarray  # uint8 [rows, row bytes] (or [E, rows, row bytes]) as the file stores them, memory-mapped
    type_id: int  # the file's type

    @property
    def data(self) -> np.ndarray:
        return transcode(self.source, self.type_id)

    @property
    def nbytes(self) -> int:
        return self.source.nbytes // block_bytes(self.type_id) * block_bytes(_Q[self.dtype.upper()])
