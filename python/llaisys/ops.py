"""Operators on Tensors; each writes into a caller-created output (see include/llaisys/ops.h)."""

from __future__ import annotations

import ctypes
from typing import Optional

import numpy as np

from .libllaisys import LIB, check
from .libllaisys.model import RopeScaling
from .libllaisys.ops import llaisysPackedLinear_t
from .libllaisys.tensor import llaisysTensor_t as T
from .tensor import Tensor
from .owned import OwnedHandle


def add(out: Tensor, a: Tensor, b: Tensor) -> Tensor:
    check(LIB.llaisysAdd(out.handle, a.handle, b.handle))
    return out


def mul(out: Tensor, a: Tensor, b: Tensor) -> Tensor:
    check(LIB.llaisysMul(out.handle, a.handle, b.handle))
    return out


def embedding(out: Tensor, index: Tensor, weight: Tensor) -> Tensor:
    check(LIB.llaisysEmbedding(out.handle, index.handle, weight.handle))
    return out


def dequantize(out: Tensor, inp: Tensor) -> Tensor:
    """out [.., k] (f32, f16 or bf16) = the values of the quantized inp [.., k], bit-identical
    to gguf-py's gguf.quants.dequantize (f16 / bf16: those values rounded once)."""
    check(LIB.llaisysDequantize(out.handle, inp.handle))
    return out


def quantize(out: Tensor, inp: Tensor) -> Tensor:
    """out [.., k] (a quantized dtype) = inp [.., k] (f32, f16 or bf16, finite) quantized as
    gguf-py (q4_0, q5_0, q8_0) and llama.cpp's reference quantizers (q4_k, q5_k, q6_k) do."""
    check(LIB.llaisysQuantize(out.handle, inp.handle))
    return out


def linear(out: Tensor, inp: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tensor:
    check(LIB.llaisysLinear(out.handle, inp.handle, weight.handle, bias.handle if bias is not None else None))
    return out


class PackedLinear(OwnedHandle):
    """A linear weight [n, k] packed once for the CPU GEMM (the form the model runs).

    ``packed(out, inp, bias)`` computes out [m, n] = inp [m, k] @ weight^T + bias, with out and
    inp f32 and bias (optional) of the weight's dtype. The object holds its own packed copy,
    so ``weight`` may be freed; close() (or the end of a ``with`` block) frees it.

    A block-quantized weight (q4_0 .. q6_k) is kept in its GGUF blocks and run by the quantized
    kernels (activations quantized to int8 per block); its bias may be of any float dtype and
    ``argmax`` computes every output (no screen).
    """

    _DESTROY = "llaisysPackedLinearDestroy"

    def __init__(self, weight: Tensor):
        self._handle: Optional[int] = None
        handle = llaisysPackedLinear_t()
        check(LIB.llaisysPackedLinearCreate(weight.handle, ctypes.byref(handle)))
        self._handle = handle.value
        self.n, self.k = weight.shape

    @classmethod
    def stacked(cls, parts: "list[Tensor]") -> "PackedLinear":
        """One packed weight from block-quantized parts [n_i, k] stacked in order (one k; the
        dtypes may differ, e.g. Q4_K q and k rows beside Q6_K v rows): [sum n_i, k]."""
        parts = list(parts)
        if not parts:
            raise ValueError("parts: no weight parts")
        arr = (T * len(parts))(*[p.handle for p in parts])
        self = cls.__new__(cls)
        self._handle = None
        handle = llaisysPackedLinear_t()
        check(LIB.llaisysPackedLinearCreateStacked(arr, len(parts), ctypes.byref(handle)))
        self._handle = handle.value
        self.n, self.k = sum(p.shape[0] for p in parts), parts[0].shape[1]
        return self

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise ValueError("PackedLinear is closed")
        return self._handle

    def __call__(self, out: Tensor, inp: Tensor, bias: Optional[Tensor] = None) -> Tensor:
        check(LIB.llaisysPackedLinearApply(self.handle, out.handle, inp.handle,
                                           bias.handle if bias is not None else None))
        return out

    def argmax(self, inp: Tensor) -> "tuple[np.ndarray, bool]":
        """(ids, screened): ids [m] int64, the first index of the largest value of each row of
        inp [m, k] @ weight^T (f32 inp, no bias), as ``self(out, inp)`` and a first-index argmax
        give it; screened is whether the int8 screen decided every row (else some rows had
        every output computed). The first call builds the screen (n * k bytes, kept)."""
        if len(inp.shape) != 2:
            raise ValueError(f"inp must be [m, k], got shape {tuple(inp.shape)}")
        ids = np.zeros(inp.shape[0], np.int64)
        screened = ctypes.c_int(0)
        check(LIB.llaisysPackedLinearArgmax(self.handle, inp.handle,
                                            ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
                                            ctypes.byref(screened)))
        return ids, bool(screened.value)


def rms_norm(out: Tensor, inp: Tensor, weight: Tensor, eps: float) -> Tensor:
    check(LIB.llaisysRmsNorm(out.handle, inp.handle, weight.handle, float(eps)))
    return out


def add_rms_norm(out: Tensor, residual: Tensor, inp: Tensor, weight: Tensor, eps: float) -> Tensor:
    """residual += inp, then out = rms_norm(residual, weight, eps); returns out."""
    check(LIB.llaisysAddRmsNorm(out.handle, residual.handle, inp.handle, weight.handle, float(eps)))
    return out


def rope(out: Tensor, inp: Tensor, pos: Tensor, theta: float) -> Tensor:
    check(LIB.llaisysRope(out.handle, inp.handle, pos.handle, float(theta)))
    return out


def rope_frequencies(head_dim: int, theta: float = 10000.0, scaling: "RopeScaling | int" = RopeScaling.DEFAULT,
                     factor: float = 1.0, low_freq_factor: float = 1.0, high_freq_factor: float = 4.0,
                     original_max_position: int = 0, beta_fast: float = 32.0, beta_slow: float = 1.0,
                     attention_factor: float = 0.0) -> "tuple[np.ndarray, float]":
    """The model's RoPE table for these rope fields: (inv_freq [head_dim // 2] f32, the factor
    multiplying cos and sin). Bad fields raise LlaisysInputError naming the field."""
    table = Tensor([head_dim // 2 if head_dim > 1 else 1], "f32")
    scale = ctypes.c_float()
    check(LIB.llaisysRopeFrequencies(float(theta), int(scaling), float(factor), float(low_freq_factor),
                                     float(high_freq_factor), int(original_max_position), float(beta_fast),
                                     float(beta_slow), float(attention_factor), int(head_dim), table.handle,
                                     ctypes.byref(scale)))
    return table.numpy(), scale.value


def rope_table(out: Tensor, inp: Tensor, pos: Tensor, inv_freq: Tensor, attn_scale: float = 1.0) -> Tensor:
    """rope with a frequency table inv_freq [d/2] (f32) and cos, sin multiplied by attn_scale."""
    check(LIB.llaisysRopeTable(out.handle, inp.handle, pos.handle, inv_freq.handle, float(attn_scale)))
    return out


def self_attention(out: Tensor, q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    check(LIB.llaisysSelfAttention(out.handle, q.handle, k.handle, v.handle, float(scale)))
    return out


def _paged(fn, out: Tensor, tensors: tuple, scale: float) -> Tensor:
    check(fn(out.handle, *(t.handle for t in tensors), float(scale)))
    return out


def paged_attention(out: Tensor, q: Tensor, k_cache: Tensor, v_cache: Tensor, q_pos: Tensor,
                    query_start: Tensor, kv_start: Tensor, kv_slots: Tensor, kv_pos: Tensor,
                    scale: float) -> Tensor:
    return _paged(LIB.llaisysPagedAttention, out,
                  (q, k_cache, v_cache, q_pos, query_start, kv_start, kv_slots, kv_pos), scale)


def paged_attention_reference(out: Tensor, q: Tensor, k_cache: Tensor, v_cache: Tensor, q_pos: Tensor,
                              query_start: Tensor, kv_start: Tensor, kv_slots: Tensor, kv_pos: Tensor,
                              scale: float) -> Tensor:
    """paged_attention by the plain key-by-key reference kernel (for tests and benchmarks)."""
    return _paged(LIB.llaisysPagedAttentionReference, out,
                  (q, k_cache, v_cache, q_pos, query_start, kv_start, kv_slots, kv_pos), scale)


def paged_attention_window(out: Tensor, q: Tensor, k_cache: Tensor, v_cache: Tensor, q_pos: Tensor,
                           query_start: Tensor, kv_start: Tensor, kv_slots: Tensor, kv_pos: Tensor,
                           scale: float, window: int, reference: bool = False) -> Tensor:
    """paged_attention with a sliding window: token t sees kv_pos in (q_pos[t] - window, q_pos[t]]
    (window 0: no window); reference=True runs the plain key-by-key kernel."""
    check(LIB.llaisysPagedAttentionWindow(out.handle, q.handle, k_cache.handle, v_cache.handle, q_pos.handle,
                                          query_start.handle, kv_start.handle, kv_slots.handle, kv_pos.handle,
                                          float(scale), int(window), 1 if reference else 0))
    return out


def rms_norm_heads(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """Per-head RMSNorm in place over x [n, heads, d] with weight [d] (Qwen3's q/k norm); returns x."""
    check(LIB.llaisysRmsNormHeads(x.handle, weight.handle, float(eps)))
    return x


def moe_topk(ids: Tensor, weights: Tensor, logits: Tensor, norm_topk_prob: bool) -> tuple:
    """ids [n, k] i32, weights [n, k] f32 = the top k of softmax(logits [n, E] f32) per row,
    renormalised to sum 1 when norm_topk_prob (a sparse layer's routing); returns (ids, weights)."""
    check(LIB.llaisysMoeTopk(ids.handle, weights.handle, logits.handle, int(bool(norm_topk_prob))))
    return ids, weights


def moe_experts(out: Tensor, x: Tensor, ids: Tensor, weights: Tensor, gate_up: Tensor, down: Tensor) -> Tensor:
    """out [n, H] = sum_j weights[t, j] * expert ids[t, j] (SwiGLU: gate_up [E, 2 Ie, H], down [E, H, Ie]) of x [n, H]."""
    check(LIB.llaisysMoeExperts(out.handle, x.handle, ids.handle, weights.handle, gate_up.handle, down.handle))
    return out


def swiglu(out: Tensor, gate: Tensor, up: Tensor) -> Tensor:
    check(LIB.llaisysSwiGLU(out.handle, gate.handle, up.handle))
    return out


def argmax(max_idx: Tensor, max_val: Tensor, vals: Tensor) -> tuple[Tensor, Tensor]:
    check(LIB.llaisysArgmax(max_idx.handle, max_val.handle, vals.handle))
    return max_idx, max_val


def softmax(out: Tensor, inp: Tensor) -> Tensor:
    check(LIB.llaisysSoftmax(out.handle, inp.handle))
    return out
