"""Quantize an HF checkpoint's matrices at load (`--quantize q8_0|q4_k`, `LLM(..., quantize=)`).

The linear weights and the embedding (tensors.QUANTIZABLE_KINDS) are quantized one tensor at a
time by the library's quantize op (llaisysQuantize: Q8_0 bit-identical to gguf-py, the K-quants
following llama.cpp's reference quantizers); norms and biases stay float. The schemes:

    q8_0   every matrix Q8_0 (rows of a multiple of 32 elements; others stay float)
    q4_k   llama.cpp's Q4_K_M recipe: Q4_K, with Q6_K for lm_head (the embedding when tied) and
           for attn_v / ffn_down of the layers llama.cpp gives more bits (the first and last
           eighth, and every third in between). A row that is not a multiple of 256 elements
           takes llama.cpp's fallback: Q4_K -> Q5_0, Q6_K -> Q8_0 (the 0.5B's 896-wide rows).

The result is what a GGUF of the same recipe holds, so `LLM(dir, quantize="q4_k")` and the
Q4_K_M file of the same weights run the same kernels.
"""

from __future__ import annotations

from .arch import weight_slots
from .config import ModelParams
from .tensors import QUANT_BLOCKS, QUANTIZABLE_KINDS, QuantTensor

SCHEMES = ("q8_0", "q4_k")
_FALLBACK = {"q4_k": "q5_0", "q6_k": "q8_0", "q5_k": "q5_0"}  # llama.cpp's for rows not a multiple of 256


def check_scheme(scheme) -> str:
    if scheme not in SCHEMES:
        raise ValueError(f"quantize must be one of {', '.join(SCHEMES)} or None, got {scheme!r}")
    return scheme


def _more_bits(layer: int, n_layers: int) -> bool:
    """llama.cpp's use_more_bits: the layers whose attn_v / ffn_down get Q6_K in Q4_K_M."""
    return layer < n_layers // 8 or layer >= 7 * n_layers // 8 or (layer - n_layers // 8) % 3 == 2


def _fits(tag: str, k: int) -> str:
    """`tag`, or its fallback when rows of k elements do not divide into its blocks; "" if none fits."""
    while tag and k % QUANT_BLOCKS[tag][0]:
        tag = _FALLBACK.get(tag, "")
    return tag


def plan_types(config: ModelParams, names, scheme: str) -> dict:
    """HF name -> quant dtype tag for the tensors of `names` that `scheme` quantizes."""
    check_scheme(scheme)
    slots = weight_slots(config)
    tied = "lm_head.weight" not in names
    out = {}
    for name in names:
        slot = slots.get(name)
        kind, layer = (slot.kind, slot.layer) if slot else ("LM_HEAD", -1)
        shape = slot.shape if slot else (config.vocab_size, config.hidden_size)  # [rows, k]
        if kind not in QUANTIZABLE_KINDS or len(shape) != 2:
            continue
        tag = scheme
        if scheme == "q4_k":
            output = kind == "LM_HEAD" or (kind == "EMBED" and tied)
            if output or (kind in ("V", "DOWN", "EXPERT_DOWN") and _more_bits(layer, config.n_layers)):
                tag = "q6_k"
        tag = _fits(tag, shape[1])
        if tag:
            out[name] = tag
    return out


def quantize_tensor(t, tag: str) -> QuantTensor:
    """A float RawTensor (f32, f16 or bf16, [rows, k]) quantized to `tag` by the library."""
    from ..ops import quantize
    from ..tensor import Tensor

    with Tensor.from_numpy(t.data, t.dtype) as src, Tensor(t.shape, tag) as out:  # src [rows, k]; out [rows, k]
        quantize(out, src)
        data = out.numpy()  # uint8 [rows, k / block * block bytes]
    return QuantTensor(t.name, tag, t.shape, data)


def quantize_tensors(config: ModelParams, tensors: dict, scheme: str) -> dict:
    """`tensors` (HF name -> float RawTensor) with the matrices `scheme` covers quantized."""
    plan = plan_types(config, list(tensors), scheme)
    return {name: quantize_tensor(t, plan[name]) if name in plan else t for name, t in tensors.items()}
