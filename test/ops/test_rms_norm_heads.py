"""Per-head RMSNorm (Qwen3's q_norm / k_norm, issue 17) against transformers' Qwen3RMSNorm."""

from __future__ import annotations

import warnings

import pytest
import torch

from llaisys import ops

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm


def hf_reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Qwen3RMSNorm over the last dim, with its rounding: f32 maths, the normalised value cast
    to x's dtype, then weight * it (the product in x's dtype when the weight shares it)."""
    norm = Qwen3RMSNorm(x.shape[-1], eps=eps).to(w.dtype)
    with torch.no_grad():
        norm.weight.copy_(w)
        return norm(x)


@pytest.mark.parametrize("n,heads,d", [(1, 1, 8), (7, 16, 128), (33, 2, 64), (300, 8, 128)])
def test_rms_norm_heads(bridge, dtype, n, heads, d):
    x = bridge.randn((n, heads, d), dtype, scale=3.0)
    w = bridge.uniform((d,), dtype, 0.5, 1.5)
    eps = 1e-6
    got = bridge.to_llaisys(x)
    ops.rms_norm_heads(got, bridge.to_llaisys(w), eps)
    expected = hf_reference(x, w, eps)
    # f32: the same maths; f16 / bf16: the intermediate rounding matches, the product may differ
    # by the last ulp (torch multiplies in the dtype's op math)
    bridge.assert_close(got, expected.float(), dtype)


def test_each_head_separately(bridge):
    """A head's result depends on that head only (not the token's other heads)."""
    x = bridge.randn((3, 4, 16), "f32")
    x[:, 2] *= 1000.0
    w = bridge.uniform((16,), "f32", 0.5, 1.5)
    got = bridge.to_llaisys(x)
    ops.rms_norm_heads(got, bridge.to_llaisys(w), 1e-6)
    ref = x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * w
    torch.testing.assert_close(bridge.to_torch(got), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("wdt", ["f32", "bf16"])
def test_weight_dtype_may_differ(bridge, wdt):
    x = bridge.randn((5, 3, 32), "f32")
    w = bridge.uniform((32,), wdt, 0.5, 1.5)
    got = bridge.to_llaisys(x)
    ops.rms_norm_heads(got, bridge.to_llaisys(w), 1e-5)
    ref = x.double() / x.double().pow(2).mean(-1, keepdim=True).add(1e-5).sqrt() * w.double()
    bridge.assert_close(got, ref, "f32")


def test_bad_arguments(bridge):
    x = bridge.to_llaisys(bridge.randn((2, 3, 8), "f32"))
    with pytest.raises(ValueError, match="weight"):
        ops.rms_norm_heads(x, bridge.to_llaisys(bridge.randn((7,), "f32")), 1e-6)
    with pytest.raises(ValueError, match="eps"):
        ops.rms_norm_heads(x, bridge.to_llaisys(bridge.randn((8,), "f32")), 0.0)
    with pytest.raises(ValueError, match="x"):
        ops.rms_norm_heads(bridge.to_llaisys(bridge.randn((2, 8), "f32")), bridge.to_llaisys(bridge.randn((8,), "f32")),
                           1e-6)
