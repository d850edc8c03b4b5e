"""Shared inputs of the quantized-format tests (test_quant_*.py): random GGUF blocks with sane
f16 scales and their edge cases, real weight rows read from the cached GGUF files with
gguf.GGUFReader, and llaisys's dequantize / quantize as numpy in, numpy out.

gguf-py (gguf.quants) is the reference: its dequantize for every format, its quantize for
Q4_0, Q5_0 and Q8_0 (Q4_1, Q5_1, Q2_K, Q3_K, IQ4_XS and the i-quants IQ1-3 have no quantizer in
llaisys: they run as files store them). llama.cpp's reference quantizers (libggml-base's quantize_row_*_ref) are the
reference for the K-quants where that library is at hand.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
from pathlib import Path

import numpy as np
import pytest

import llaisys
from block_scales import get_f16, put_f16
from llaisys import ops

gguf = pytest.importorskip("gguf")

IQ_FORMATS = ["iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m"]  # the i-quants
FORMATS = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_xs"] + IQ_FORMATS
NO_QUANTIZER = ("q4_1", "q5_1", "q2_k", "q3_k", "iq4_xs", *IQ_FORMATS)  # run as files store them
QUANTIZERS = [f for f in FORMATS if f not in NO_QUANTIZER]  # the formats llaisys can quantize into
GGUF_QUANTIZES = ["q4_0", "q5_0", "q8_0"]  # the formats gguf-py can quantize
MODELS = {"0.5b": "qwen2.5-coder-0.5b-instruct", "1.5b": "qwen2.5-coder-1.5b-instruct"}
LIBGGML = Path.home() / ".cache/llaisys/peers/build-avx2/bin/libggml-base.so"


def qtype(fmt: str):
    return gguf.GGMLQuantizationType[fmt.upper()]


def sizes(fmt: str) -> tuple[int, int]:
    """(elements, bytes) of one block."""
    return gguf.GGML_QUANT_SIZES[qtype(fmt)]


def scale_offsets(fmt: str) -> list[int]:
    """Byte offsets of a block's f16 scales (d, and dmin for Q2_K / Q4_K / Q5_K, the min m for Q4_1 / Q5_1;
    IQ1_M: 48, its 4 uint16 scales at 48..56, which hold d in their top nibbles: put_f16)."""
    return {"q4_1": [0, 2], "q5_1": [0, 2], "q2_k": [80, 82], "q3_k": [108], "q4_k": [0, 2], "q5_k": [0, 2],
            "q6_k": [208], "iq1_m": [48]}.get(fmt, [0])


def random_blocks(fmt: str, n_blocks: int, rng: np.random.Generator, scale: float = 0.05) -> np.ndarray:
    """[n_blocks, block bytes] uint8: random bytes, the f16 scales normal(0, scale) (signed)."""
    raw = rng.integers(0, 256, size=(n_blocks, sizes(fmt)[1]), dtype=np.uint8)
    for off in scale_offsets(fmt):
        d = np.clip(rng.standard_normal(n_blocks) * scale, -65504, 65504).astype(np.float16)  # finite
        put_f16(raw, fmt, off, d.view(np.uint16))
    return raw


def edge_blocks(fmt: str, rng: np.random.Generator) -> np.ndarray:
    """Edge cases, one block each: zero scales, negative scales, every quant bit set (max
    nibbles), every quant bit clear, the largest f16 scale, subnormal scales, NaN and +-Inf
    scales (which gguf-py propagates)."""
    base = random_blocks(fmt, 10, rng)
    specials = [0x0000, 0xBC00, None, None, 0x7BFF, 0x0001, 0x7E00, 0x7C00, 0xFC00, 0x8000]
    for i, bits in enumerate(specials):
        row = base[i:i + 1]
        scales = {off: get_f16(row, fmt, off) if bits is None else np.array([bits], np.uint16) for off in scale_offsets(fmt)}
        quant = [j for j in range(base.shape[1]) if not any(o <= j < o + 2 for o in scale_offsets(fmt))]
        if i == 2:
            base[i, quant] = 0xFF  # max nibbles (and Q6_K scales of -1)
        if i == 3:
            base[i, quant] = 0x00
        for off, d in scales.items():
            put_f16(row, fmt, off, d)
    return base


def as_rows(blocks: np.ndarray, fmt: str, blocks_per_row: int) -> tuple[np.ndarray, tuple[int, int]]:
    """Blocks regrouped as [rows, row bytes] with the element shape (rows, k)."""
    bs, bb = sizes(fmt)
    rows = blocks.reshape(-1, blocks_per_row * bb)
    return rows, (rows.shape[0], blocks_per_row * bs)


def dequantize(raw: np.ndarray, fmt: str, shape, out_dtype: str = "f32") -> np.ndarray:
    """llaisys's dequantize of raw bytes [rows, row bytes] with element shape `shape`
    (bf16 comes back as its uint16 bit patterns)."""
    with llaisys.Tensor.from_numpy(raw, fmt, shape=shape) as q, llaisys.Tensor(shape, out_dtype) as out:
        ops.dequantize(out, q)
        return out.numpy(raw=True)


def quantize(x: np.ndarray, fmt: str, in_dtype: str = "f32") -> np.ndarray:
    """llaisys's quantize of x [rows, k] (given to llaisys in `in_dtype`): raw bytes."""
    with llaisys.Tensor.from_numpy(x, in_dtype) as t, llaisys.Tensor(x.shape, fmt) as q:
        ops.quantize(q, t)
        return q.numpy()


def reference_dequantize(raw: np.ndarray, fmt: str) -> np.ndarray:
    with np.errstate(all="ignore"):  # NaN / Inf scales propagate, as intended
        return gguf.quants.dequantize(raw, qtype(fmt)).astype(np.float32)


def libggml():
    """libggml-base with the reference quantizers, or None where it is absent (as in CI)."""
    if not LIBGGML.is_file():
        return None
    lib = ctypes.CDLL(str(LIBGGML))
    return lib if hasattr(lib, "quantize_row_q4_K_ref") else None


def libggml_quantize(lib, x: np.ndarray, fmt: str) -> np.ndarray:
    """llama.cpp's quantize_row_<fmt>_ref of x [rows, k] f32: raw bytes [rows, row bytes]."""
    bs, bb = sizes(fmt)
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.zeros((x.shape[0], x.shape[1] // bs * bb), dtype=np.uint8)
    name = "quantize_row_" + fmt[:3] + fmt[3].replace("k", "K") + "_ref"
    fn = getattr(lib, name)
    fn.argtypes, fn.restype = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64], None
    fn(x.ctypes.data, out.ctypes.data, x.size)
    return out


def digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def gguf_file(model: str) -> Path:
    from llaisys.models import hub

    return hub.gguf_path(MODELS[model])


def real_rows(path: Path, fmt: str, n_rows: int = 48):
    """(name, raw [n_rows, row bytes], (n_rows, k)) of the first tensor of type fmt in the GGUF,
    rows spread over the tensor; None when the file has no tensor of that type."""
    return _real_rows_of_file(str(path), n_rows).get(fmt)


@functools.lru_cache(maxsize=None)
def _real_rows_of_file(path: str, n_rows: int) -> dict:
    """real_rows for every format at once, each file once per session. The tensor table comes
    from the library's own reader (gguf.GGUFReader spends ~25 s on a 150k-token vocabulary in
    the metadata; the bytes checked are the same, and gguf still dequantizes them)."""
    from llaisys.models.gguf_check import read_gguf

    file = read_gguf(path)
    found = {}
    for t in file.tensors:
        fmt = gguf.GGMLQuantizationType(t.type_id).name.lower()
        if fmt in FORMATS and fmt not in found:
            data = file.tensor_bytes(t).reshape(t.shape[0], -1)  # [rows, row bytes] (memory-mapped)
            idx = np.linspace(0, data.shape[0] - 1, n_rows).astype(np.int64)
            found[fmt] = (t.name, np.ascontiguousarray(data[idx]), (n_rows, int(t.dims[0])))
    return found
