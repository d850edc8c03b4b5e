"""RoPE with scaled frequency tables (issue 17): the tables llaisys derives for each rope
scaling type against transformers' own functions, the table-driven rope kernel against a
float64 torch rotation, and the errors that name a bad field."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

import llaisys
from llaisys import ops
from llaisys.libllaisys.model import RopeScaling

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from transformers import LlamaConfig, Qwen2Config
    from transformers.modeling_rope_utils import (
        _compute_linear_scaling_rope_parameters,
        _compute_llama3_parameters,
        _compute_yarn_parameters,
    )
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

# name -> (head_dim, llaisys fields, HF rope_parameters, HF config class, max_position_embeddings)
SPECS = {
    "default_qwen2": (64, dict(theta=1000000.0), {"rope_type": "default", "rope_theta": 1000000.0},
                      Qwen2Config, 32768),
    "default_llama2": (128, dict(theta=10000.0), {"rope_type": "default", "rope_theta": 10000.0},
                       LlamaConfig, 4096),
    "linear_x4": (128, dict(theta=10000.0, scaling=RopeScaling.LINEAR, factor=4.0),
                  {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, LlamaConfig, 16384),
    "llama3_1": (128, dict(theta=500000.0, scaling=RopeScaling.LLAMA3, factor=8.0, low_freq_factor=1.0,
                           high_freq_factor=4.0, original_max_position=8192),
                 {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, LlamaConfig, 131072),
    "llama3_2_32": (64, dict(theta=500000.0, scaling=RopeScaling.LLAMA3, factor=32.0, low_freq_factor=1.0,
                             high_freq_factor=4.0, original_max_position=8192),
                    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, LlamaConfig, 131072),
    "yarn_qwen2_5": (128, dict(theta=1000000.0, scaling=RopeScaling.YARN, factor=4.0, original_max_position=32768),
                     {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                      "original_max_position_embeddings": 32768}, Qwen2Config, 131072),
    "yarn_betas_attn": (64, dict(theta=10000.0, scaling=RopeScaling.YARN, factor=2.5, original_max_position=4096,
                                 beta_fast=16.0, beta_slow=2.0, attention_factor=0.9),
                        {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.5,
                         "original_max_position_embeddings": 4096, "beta_fast": 16.0, "beta_slow": 2.0,
                         "attention_factor": 0.9}, LlamaConfig, 10240),
}

HF_FUNCTIONS = {
    "default": lambda c: LlamaRotaryEmbedding.compute_default_rope_parameters(c),
    "linear": lambda c: _compute_linear_scaling_rope_parameters(c, "cpu"),
    "llama3": lambda c: _compute_llama3_parameters(c, "cpu"),
    "yarn": lambda c: _compute_yarn_parameters(c, "cpu"),
}


def hf_table(name: str) -> tuple[torch.Tensor, float]:
    head_dim, _, params, cls, max_pos = SPECS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = cls(hidden_size=head_dim * 4, num_attention_heads=4, num_key_value_heads=2, head_dim=head_dim,
                     max_position_embeddings=max_pos, rope_parameters=dict(params))
        inv_freq, attention = HF_FUNCTIONS[params["rope_type"]](config)
    return inv_freq, float(attention)


@pytest.mark.parametrize("name", list(SPECS))
def test_table_matches_transformers(name):
    head_dim, fields, _, _, _ = SPECS[name]
    expected, expected_scale = hf_table(name)
    got, scale = ops.rope_frequencies(head_dim, **fields)
    assert got.shape == (head_dim // 2,) and got.dtype == np.float32
    # the same f32 steps as transformers: equal to within an ulp or two of each entry
    torch.testing.assert_close(torch.from_numpy(got), expected, rtol=3e-7, atol=0.0)
    assert scale == pytest.approx(expected_scale, rel=1e-7)


def test_scaled_tables_differ_from_default():
    """A guard on the test above: the scaled tables really are other tables."""
    base, _ = ops.rope_frequencies(128, theta=500000.0)
    llama3, _ = ops.rope_frequencies(128, **SPECS["llama3_1"][1])
    assert np.array_equal(base[:20], llama3[:20]) and not np.allclose(base[-20:], llama3[-20:])
    linear, _ = ops.rope_frequencies(128, **SPECS["linear_x4"][1])
    np.testing.assert_allclose(linear, ops.rope_frequencies(128)[0] / 4, rtol=1e-6)


def rope_reference(x: torch.Tensor, pos: torch.Tensor, inv_freq: np.ndarray, attn_scale: float) -> torch.Tensor:
    """float64 rotate-half RoPE with the angles llaisys uses (pos * inv_freq in f32)."""
    angle = (pos.float()[:, None] * torch.from_numpy(inv_freq)[None, :]).double()  # [n, d/2]
    cos, sin = angle.cos()[:, None, :] * attn_scale, angle.sin()[:, None, :] * attn_scale
    xd = x.double()
    half = x.shape[-1] // 2
    x1, x2 = xd[..., :half], xd[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


@pytest.mark.parametrize("name", ["default_llama2", "linear_x4", "llama3_1", "yarn_qwen2_5", "yarn_betas_attn"])
def test_rope_with_table(bridge, dtype, name):
    head_dim, fields, _, _, _ = SPECS[name]
    inv_freq, attn_scale = ops.rope_frequencies(head_dim, **fields)
    n, heads = 23, 3
    x = bridge.randn((n, heads, head_dim), dtype)
    pos = torch.cat([torch.tensor([0, 1, 7, 4095, 8191, 8192, 40000, 131071]), bridge.randint((n - 8,), 0, 60000)])
    out = bridge.empty((n, heads, head_dim), dtype)
    ops.rope_table(out, bridge.to_llaisys(x), bridge.to_llaisys(pos), llaisys.Tensor.from_numpy(inv_freq),
                   attn_scale)
    # angles up to ~1e5 rad: f32 sin/cos of them differ from float64's by ~ulp(angle)
    bridge.assert_close(out, rope_reference(x, pos, inv_freq, attn_scale), dtype, scale=8.0 if dtype == "f32" else 1.0,
                        rtol_factor=4.0)


def test_rope_table_in_place_and_default_equals_theta(bridge):
    x = bridge.randn((9, 2, 32), "f32")
    pos = torch.arange(9) * 101
    inv_freq, scale = ops.rope_frequencies(32, theta=10000.0)
    assert scale == 1.0
    a, b = bridge.to_llaisys(x), bridge.empty((9, 2, 32), "f32")
    ops.rope(b, a, bridge.to_llaisys(pos), 10000.0)
    ops.rope_table(a, a, bridge.to_llaisys(pos), llaisys.Tensor.from_numpy(inv_freq), 1.0)  # out aliases in
    assert np.array_equal(a.numpy(), b.numpy())


def test_yarn_attention_scale_default():
    _, scale = ops.rope_frequencies(64, theta=10000.0, scaling=RopeScaling.YARN, factor=4.0,
                                    original_max_position=2048)
    assert scale == pytest.approx(0.1 * math.log(4.0) + 1.0, rel=1e-7)
    _, scale = ops.rope_frequencies(64, theta=10000.0, scaling=RopeScaling.YARN, factor=1.0,
                                    original_max_position=2048)
    assert scale == 1.0


@pytest.mark.parametrize("fields,field", [
    (dict(theta=0.0), "rope_theta"),
    (dict(theta=float("nan")), "rope_theta"),
    (dict(scaling=7), "rope_scaling"),
    (dict(scaling=RopeScaling.LINEAR, factor=0.5), "rope_factor"),
    (dict(scaling=RopeScaling.LINEAR, factor=float("inf")), "rope_factor"),
    (dict(scaling=RopeScaling.LLAMA3, factor=8.0, original_max_position=8192, low_freq_factor=4.0,
          high_freq_factor=1.0), "rope_high_freq_factor"),
    (dict(scaling=RopeScaling.LLAMA3, factor=8.0, original_max_position=8192, low_freq_factor=0.0),
     "rope_low_freq_factor"),
    (dict(scaling=RopeScaling.LLAMA3, factor=8.0), "rope_original_max_position"),
    (dict(scaling=RopeScaling.YARN, factor=4.0), "rope_original_max_position"),
    (dict(scaling=RopeScaling.YARN, factor=4.0, original_max_position=4096, beta_fast=1.0, beta_slow=32.0),
     "rope_beta_fast"),
    (dict(scaling=RopeScaling.YARN, factor=4.0, original_max_position=4096, beta_slow=0.0), "rope_beta_slow"),
    (dict(scaling=RopeScaling.YARN, factor=4.0, original_max_position=4096, attention_factor=-1.0),
     "rope_attention_factor"),
])
def test_bad_fields_are_named(fields, field):
    with pytest.raises(ValueError, match=field):
        ops.rope_frequencies(64, **fields)


def test_bad_head_dim_and_table(bridge):
    with pytest.raises(ValueError, match="head_dim"):
        ops.rope_frequencies(63)
    x, out = bridge.to_llaisys(bridge.randn((2, 1, 8), "f32")), bridge.empty((2, 1, 8), "f32")
    pos = bridge.to_llaisys(torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="inv_freq"):
        ops.rope_table(out, x, pos, llaisys.Tensor.from_numpy(np.ones(3, np.float32)), 1.0)  # [d/2] is [4]
    with pytest.raises(ValueError, match="inv_freq"):
        ops.rope_table(out, x, pos, llaisys.Tensor.from_numpy(np.array([1, 1, np.nan, 1], np.float32)), 1.0)
    with pytest.raises(ValueError, match="attn_scale"):
        ops.rope_table(out, x, pos, llaisys.Tensor.from_numpy(np.ones(4, np.float32)), 0.0)
