"""GGUF block types without llaisys kernels whose every value a type with kernels holds exactly:
their matrices are rewritten into that type at load and run on its quantized kernels, where other
such types are widened to f32 (gguf_model.py).

    IQ4_NL -> Q8_0   a weight is d * T[i], T llama.cpp's 16-entry int8 table: the same d, q8 = T[i]
                     (8.5 bits a weight where the file has 4.5; f32 would take 32).

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
TRANSCODES = {int(_Q.IQ4_NL): "q8_0"}  # the file's type id -> the type it runs as
_CHUNK = 1 << 16  # blocks rewritten at once: a few MiB of numpy temporaries, whatever the matrix
_IQ4_NL_TABLE = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                         np.int8).view(np.uint8)


def _iq4_nl_as_q8_0(src: np.ndarray) -> np.ndarray:
    """uint8 [n, 18] IQ4_NL blocks -> [n, 34] Q8_0 blocks of the same values."""
    n = src.shape[0]
    # weight j from the low nibble of qs[j], weight 16 + j from its high nibble
    idx = (src[:, 2:].reshape(n, 1, 16) >> np.array([0, 4], np.uint8).reshape(1, 2, 1)) & 0x0F
    return np.concatenate([src[:, :2], _IQ4_NL_TABLE[idx.reshape(n, 32)]], axis=1)


_REWRITE = {int(_Q.IQ4_NL): _iq4_nl_as_q8_0}


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
    dtype: str  # the type it runs as ("q8_0")
    shape: tuple  # element shape: (rows, k), or (experts, rows, k) for a stack that gguf_model cuts
    source: np.ndarray  # uint8 [rows, row bytes] (or [E, rows, row bytes]) as the file stores them, memory-mapped
    type_id: int  # the file's type

    @property
    def data(self) -> np.ndarray:
        return transcode(self.source, self.type_id)

    @property
    def nbytes(self) -> int:
        return self.source.nbytes // block_bytes(self.type_id) * block_bytes(_Q[self.dtype.upper()])
