"""A GGUF file's RoPE scaling as the HF `rope_scaling` the config parser reads (gguf_convert._read_config).

llama.cpp's converter states it in `<arch>.rope.*` metadata and, for Llama 3.1's `llama3`
scaling, in a tensor:

    <arch>.rope.scaling.type            "none", "linear", "yarn" (others, e.g. "longrope": refused)
    <arch>.rope.scaling.factor          the context scale factor (older files: <arch>.rope.scale_linear)
    <arch>.rope.scaling.original_context_length     YaRN's pre-scaling context
    <arch>.rope.scaling.yarn_beta_fast / _slow      YaRN's ramp (llama.cpp's defaults 32 / 1)
    <arch>.rope.scaling.attn_factor, yarn_attn_factor, yarn_ext_factor, yarn_log_multiplier:
                                        llama.cpp-only knobs; any value but the neutral one (1, 1,
                                        negative or 1, 0) is refused
    <arch>.rope.dimension_count         the rotated dimensions: must be the whole head (else refused)
    rope_freqs.weight                   f32 [head_dim / 2]: llama.cpp divides each frequency by its
                                        entry. convert_hf_to_gguf writes it for `llama3` scaling only
                                        (and no scaling type); `llama3_params` recovers the llama3
                                        parameters from it and checks they reproduce every entry.

With no scaling type, llama.cpp treats a factor as linear (its default), as here. Every error
names the GGUF key or the tensor."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .files import ModelFileError
from .gguf_tokenizer import metadata

ROPE_FREQS = "rope_freqs.weight"
_L3_ORIGINAL = 8192  # convert_hf_to_gguf's default original context (any value gives the same factors)
_RTOL = 1e-4  # recovered llama3 factors against the file's f32 entries


def gguf_rope_keys(arch: str) -> dict:
    """HF config field (as the parser names it in errors) -> the GGUF key it came from."""
    pre = f"{arch}.rope.scaling"
    return {"rope_scaling.rope_type": f"{pre}.type", "rope_scaling.factor": f"{pre}.factor",
            "rope_scaling.original_max_position_embeddings": f"{pre}.original_context_length",
            "rope_scaling.beta_fast": f"{pre}.yarn_beta_fast", "rope_scaling.beta_slow": f"{pre}.yarn_beta_slow",
            "rope_scaling.low_freq_factor": ROPE_FREQS, "rope_scaling.high_freq_factor": ROPE_FREQS}


def rope_scaling(reader, arch: str, source: str, head_dim: Optional[int], theta: float, max_pos: int,
                 freqs: Optional[np.ndarray]) -> Optional[dict]:
    """The HF `rope_scaling` dict the file's metadata (and rope_freqs) describe, or None for plain RoPE."""
    pre = f"{arch}.rope"
    dims = metadata(reader, f"{pre}.dimension_count", int, source, required=False)
    if dims is not None and head_dim is not None and dims != head_dim:
        raise ModelFileError(source, f"{pre}.dimension_count", f"{pre}.dimension_count is {dims} but the head has "
                                                               f"{head_dim} dimensions; partial RoPE is not supported")
    kind = metadata(reader, f"{pre}.scaling.type", str, source, required=False)
    factor = metadata(reader, f"{pre}.scaling.factor", float, source, required=False)
    if factor is None:
        factor = metadata(reader, f"{pre}.scale_linear", float, source, required=False)
    for key, neutral in (("attn_factor", 1.0), ("yarn_attn_factor", 1.0), ("yarn_ext_factor", -1.0),
                         ("yarn_log_multiplier", 0.0)):
        value = metadata(reader, f"{pre}.scaling.{key}", float, source, required=False)
        if value is not None and value != neutral and not (key == "yarn_ext_factor" and (value < 0 or value == 1)):
            raise ModelFileError(source, f"{pre}.scaling.{key}", f"{pre}.scaling.{key} = {value} is not supported "
                                                                 f"(only the neutral {neutral})")
    if freqs is not None:
        if kind not in (None, "none") or (factor is not None and factor != 1.0):
            raise ModelFileError(source, ROPE_FREQS, f"{ROPE_FREQS} together with {pre}.scaling.type "
                                                     f"{kind!r} / factor {factor} is not supported")
        return llama3_params(freqs, source, head_dim, theta, max_pos)
    if kind is None:
        kind = "linear" if factor is not None and factor != 1.0 else "none"
    if kind == "none":
        return None
    if kind not in ("linear", "yarn"):
        raise ModelFileError(source, f"{pre}.scaling.type", f"{pre}.scaling.type {kind[:40]!r} is not supported "
                                                            f"(supported: none, linear, yarn)")
    if factor is None:
        raise ModelFileError(source, f"{pre}.scaling.factor", f"{pre}.scaling.type {kind!r} needs "
                                                              f"{pre}.scaling.factor")
    out = {"rope_type": kind, "factor": factor}
    if kind == "yarn":
        for field, key in (("original_max_position_embeddings", "original_context_length"),
                           ("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow")):
            value = metadata(reader, f"{pre}.scaling.{key}", int if key.startswith("orig") else float, source,
                             required=False)
            if value is not None:
                out[field] = value
        out["attention_factor"] = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0  # llama.cpp's mscale
    return out


def rope_freqs_values(type_id: int, shape: tuple, data: np.ndarray, source: str) -> np.ndarray:
    """The f32 entries of the `rope_freqs.weight` tensor (an f32 vector)."""
    if type_id != 0 or len(shape) != 1:  # GGML_TYPE_F32
        raise ModelFileError(source, ROPE_FREQS, f"{ROPE_FREQS} must be an f32 vector, got type id {type_id} "
                                                 f"shape {tuple(shape)}")
    return np.asarray(data).view(np.float32).reshape(-1).astype(np.float64)


def llama3_factors(head_dim: int, theta: float, factor: float, low: float, high: float, original: int) -> np.ndarray:
    """convert_hf_to_gguf's rope_freqs for llama3 scaling (transformers' inverse: each band's divisor)."""
    freqs = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * math.pi / freqs
    smooth = (original / wavelen - low) / (high - low)
    mid = 1 / ((1 - smooth) / factor + smooth)
    return np.where(wavelen < original / high, 1.0, np.where(wavelen > original / low, factor, mid))


def llama3_params(freqs: np.ndarray, source: str, head_dim: Optional[int], theta: float, max_pos: int) -> Optional[dict]:
    """The llama3 `rope_scaling` whose factors are `freqs` (None when every entry is 1).

    The entries fix the scale factor (the largest) and the two band edges in frequency
    u = 1 / wavelength: entries of 1 lie above u_high = high / original, entries of `factor`
    below u_low = low / original, and between them 1 / f = (1 - s) / factor + s with s linear in
    u. Only the ratios low / original and high / original matter, so `original` is taken as
    llama.cpp's converter's default (or the context length, if shorter)."""
    if head_dim is None or freqs.shape != (head_dim // 2,) or not np.all(np.isfinite(freqs)) or freqs.min() <= 0:
        raise ModelFileError(source, ROPE_FREQS, f"{ROPE_FREQS} must hold head_dim / 2 = {(head_dim or 0) // 2} "
                                                 f"positive finite entries, got {freqs.size}")
    factor = float(freqs.max())
    if abs(factor - 1.0) <= _RTOL:
        return None  # every band unscaled
    if freqs.min() < 1 - _RTOL:
        raise ModelFileError(source, ROPE_FREQS, f"{ROPE_FREQS} has entries below 1: not a llama3 RoPE scaling")
    u = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim) / (2 * math.pi)  # descending
    ones, full = np.abs(freqs - 1) <= _RTOL * factor, np.abs(freqs - factor) <= _RTOL * factor
    mid = ~(ones | full)
    s = (1 / freqs - 1 / factor) / (1 - 1 / factor)  # 1 at u >= u_high, 0 at u <= u_low
    above = u[ones].min() if ones.any() else u[0] * 2  # the band edges lie between these
    below = u[full].max() if full.any() else u[-1] / 2
    if mid.sum() >= 2:  # s = (u - u_low) / (u_high - u_low)
        slope, icpt = np.polyfit(u[mid], s[mid], 1)
        if slope <= 0:
            raise ModelFileError(source, ROPE_FREQS, f"{ROPE_FREQS} does not describe a llama3 RoPE scaling")
        u_low, u_high = -icpt / slope, (1 - icpt) / slope
    elif mid.sum() == 1:  # u_high between the entry and the 1s; u_low from the entry's s
        um, sm = float(u[mid][0]), float(s[mid][0])
        u_high = (um + above) / 2
        u_low = (um - sm * u_high) / (1 - sm)
    else:  # two edges in the gap between the 1s and the full factors
        u_low, u_high = below + (above - below) / 3, below + 2 * (above - below) / 3
    original = min(_L3_ORIGINAL, max_pos)
    low, high = u_low * original, u_high * original
    if not (0 < low < high):
        raise ModelFileError(source, ROPE_FREQS, f"{ROPE_FREQS} does not describe a llama3 RoPE scaling")
    want = llama3_factors(head_dim, theta, factor, low, high, original)
    if not np.allclose(want, freqs, rtol=_RTOL, atol=0):
        raise ModelFileError(source, ROPE_FREQS, f"{ROPE_FREQS} does not describe a llama3 RoPE scaling "
                                                 f"(largest difference {float(np.abs(want - freqs).max()):.3g})")
    return {"rope_type": "llama3", "factor": factor, "low_freq_factor": float(low), "high_freq_factor": float(high),
            "original_max_position_embeddings": original}
