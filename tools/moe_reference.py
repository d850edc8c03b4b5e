"""A float reference forward of a `qwen3moe` GGUF file in numpy, and the expert-use histogram.

The forward reads the file with the library's bounded GGUF walker (gguf_check.read_gguf) and
dequantizes each weight with gguf-py, in f32: embedding rows, per layer RMSNorm -> q/k/v ->
q/k RMSNorm per head -> RoPE (rotate-half, as llama.cpp's NEOX mode for qwen3moe) -> causal
GQA attention -> o -> RMSNorm -> router softmax -> top k (renormalised) -> the chosen experts'
SwiGLU, summed by weight -> final norm -> lm_head. It records every token's chosen experts per
layer. Only the experts some token chose are dequantized. Used by tools/make_moe_gguf.py
--histogram and by its test, as an independent reading of llama.cpp's layout.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


class _Weights:
    def __init__(self, path):
        from llaisys.models.gguf_check import read_gguf

        self.f = read_gguf(Path(path))
        self.md = self.f.metadata
        self.by_name = {t.name: t for t in self.f.tensors}

    def rows(self, name: str, first: int = 0, count: int | None = None, index=None) -> np.ndarray:
        """f32 rows [first, first + count) (or the rows `index`) of a tensor viewed as [rows, cols]."""
        info = self.by_name[name]
        cols = info.shape[-1]
        n_rows = int(np.prod(info.shape[:-1])) if len(info.shape) > 1 else 1
        raw = self.f.tensor_bytes(info).reshape(n_rows, -1)
        raw = raw[index] if index is not None else raw[first:first + (n_rows if count is None else count)]
        qtype = gguf.GGMLQuantizationType(info.type_id)
        if qtype == gguf.GGMLQuantizationType.F32:
            return np.ascontiguousarray(raw).view(np.float32).reshape(-1, cols)
        return gguf.quants.dequantize(np.ascontiguousarray(raw), qtype).reshape(-1, cols).astype(np.float32)

    def matrix(self, name: str) -> np.ndarray:
        return self.rows(name)

    def vector(self, name: str) -> np.ndarray:
        return self.rows(name).reshape(-1)

    def expert(self, name: str, e: int) -> np.ndarray:
        n_exp, rows, _ = self.by_name[name].shape
        return self.rows(name, e * rows, rows)


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rope(x: np.ndarray, pos: np.ndarray, theta: float) -> np.ndarray:
    """x [n, heads, d] rotated by position, halves paired (i, i + d/2)."""
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    ang = pos[:, None].astype(np.float64) * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :].astype(np.float32), np.sin(ang)[:, None, :].astype(np.float32)
    a, b = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Causal GQA: q [n, H, d], k/v [n, KV, d] -> [n, H * d]."""
    n, heads, d = q.shape
    group = heads // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    s = np.einsum("nhd,mhd->hnm", q, k) / np.sqrt(d)
    s = np.where(np.tril(np.ones((n, n), bool))[None], s, -np.inf)
    s = np.exp(s - s.max(-1, keepdims=True))
    s /= s.sum(-1, keepdims=True)
    return np.einsum("hnm,mhd->nhd", s, v).reshape(n, heads * d)


def forward(path, ids) -> tuple:
    """(logits [n, vocab] f32, [per layer: chosen experts int [n, k]]) of token ids `ids`."""
    w = _Weights(path)
    md = w.md
    if md.get("general.architecture") != "qwen3moe":
        raise ValueError(f"{path}: the reference forward reads qwen3moe files only")
    a = "qwen3moe"
    eps, theta = float(md[f"{a}.attention.layer_norm_rms_epsilon"]), float(md.get(f"{a}.rope.freq_base", 10000.0))
    heads, kv_heads = int(md[f"{a}.attention.head_count"]), int(md[f"{a}.attention.head_count_kv"])
    top_k = int(md[f"{a}.expert_used_count"])
    ids = np.asarray(ids, np.int64)
    n, pos = len(ids), np.arange(len(ids))
    x = w.rows("token_embd.weight", index=ids)
    chosen = []
    for layer in range(int(md[f"{a}.block_count"])):
        b = f"blk.{layer}."
        h = _rms(x, w.vector(b + "attn_norm.weight"), eps)
        q = (h @ w.matrix(b + "attn_q.weight").T).reshape(n, heads, -1)
        k = (h @ w.matrix(b + "attn_k.weight").T).reshape(n, kv_heads, -1)
        v = (h @ w.matrix(b + "attn_v.weight").T).reshape(n, kv_heads, -1)
        if b + "attn_q_norm.weight" in w.by_name:
            q, k = _rms(q, w.vector(b + "attn_q_norm.weight"), eps), _rms(k, w.vector(b + "attn_k_norm.weight"), eps)
        x = x + _attention(_rope(q, pos, theta), _rope(k, pos, theta), v) @ w.matrix(b + "attn_output.weight").T
        h = _rms(x, w.vector(b + "ffn_norm.weight"), eps)
        logits = h @ w.matrix(b + "ffn_gate_inp.weight").T
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        top = np.argsort(-p, axis=-1, kind="stable")[:, :top_k]
        weight = np.take_along_axis(p, top, -1)
        weight /= weight.sum(-1, keepdims=True)  # qwen3moe renormalises
        y = np.zeros_like(x)
        for e in np.unique(top):
            rows, slot = np.nonzero(top == e)
            he = h[rows]
            g, u = he @ w.expert(b + "ffn_gate_exps.weight", e).T, he @ w.expert(b + "ffn_up_exps.weight", e).T
            act = g / (1.0 + np.exp(-g)) * u
            y[rows] += weight[rows, slot][:, None] * (act @ w.expert(b + "ffn_down_exps.weight", e).T)
        x = x + y
        chosen.append(top)
    x = _rms(x, w.vector("output_norm.weight"), eps)
    return x @ w.matrix("output.weight").T, chosen


def expert_histogram(path, ids, window: int = 16) -> dict:
    """Per layer: how many of the prompt's tokens chose each expert, and the distinct experts a
    batch of `window` consecutive tokens touches (what a batch-16 decode step reads) against
    what uniformly random routing would touch."""
    _, chosen = forward(path, ids)
    md = _Weights(path).md
    n_exp = int(md["qwen3moe.expert_count"])
    top_k = chosen[0].shape[1]
    windows = [[len(np.unique(c[s:s + window])) for s in range(0, len(c) - window + 1, window)] for c in chosen]
    uniform = n_exp * (1 - (1 - top_k / n_exp) ** window)
    return {"experts": n_exp, "top_k": top_k, "tokens": len(ids), "window": window, "uniform_distinct": uniform,
            "counts": [np.bincount(c.reshape(-1), minlength=n_exp).tolist() for c in chosen],
            "distinct": [float(np.mean(w)) if w else float("nan") for w in windows]}


def print_histogram(h: dict) -> None:
    n, k, t = h["experts"], h["top_k"], h["tokens"]
    print(f"expert use over {t} prompt tokens ({t * k} choices of {n} experts, {t * k / n:.1f} per expert if even):")
    for layer, (counts, distinct) in enumerate(zip(h["counts"], h["distinct"])):
        c = np.asarray(counts)
        print(f"  layer {layer}: {np.count_nonzero(c)}/{n} experts used, most-chosen {c.max()} "
              f"({c.max() / (t * k):.1%} of choices), {h['window']}-token batches touch {distinct:.1f} experts "
              f"(uniform routing: {h['uniform_distinct']:.1f})")
        print("    " + " ".join(str(v) for v in counts))
