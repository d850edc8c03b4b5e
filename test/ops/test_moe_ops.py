"""The mixture-of-experts primitives of the decoder's CPU backend (llaisysMoeTopk,
llaisysMoeExperts: the same kernels moe_route / moe_gather / expert_linear / moe_combine run)
against torch: routing as transformers' Qwen3-MoE / Mixtral routers compute it, and the experts
as a plain loop over each token's chosen experts."""

import numpy as np
import pytest
import torch

from llaisys import LlaisysError, ops
from llaisys.tensor import Tensor
from test_linear_shapes import rounds_activations


def topk(logits: np.ndarray, k: int, norm: bool):
    ids_t, w_t = Tensor((logits.shape[0], k), "i32"), Tensor((logits.shape[0], k), "f32")
    with Tensor.from_numpy(logits.astype(np.float32)) as lg, ids_t as ids, w_t as w:
        ops.moe_topk(ids, w, lg, norm)
        return ids.numpy(), w.numpy()


@pytest.mark.parametrize("n,E,k", [(1, 4, 1), (5, 8, 2), (70, 128, 8), (3, 6, 6)])
@pytest.mark.parametrize("norm", [True, False])
def test_topk_as_transformers_routes(n, E, k, norm):
    logits = torch.randn(n, E, generator=torch.Generator().manual_seed(n * E + k)) * 3
    probs = torch.softmax(logits.float(), dim=-1)  # the routers' softmax, then topk
    want_w, want_ids = torch.topk(probs, k, dim=-1)
    if norm:
        want_w = want_w / want_w.sum(dim=-1, keepdim=True)
    ids, w = topk(logits.numpy(), k, norm)
    np.testing.assert_array_equal(ids, want_ids.numpy())
    np.testing.assert_allclose(w, want_w.numpy(), rtol=1e-5, atol=1e-7)


def test_topk_ties_take_the_lower_index():
    ids, w = topk(np.zeros((2, 5), np.float32), 3, False)
    assert ids.tolist() == [[0, 1, 2]] * 2
    np.testing.assert_allclose(w, 0.2)


def experts_reference(x, ids, weights, gate_up, down, round_inputs=False):
    """A plain loop: each token, each of its chosen experts, SwiGLU, weighted sum (f64).
    round_inputs: each projection's input rounded to bf16 first, as the bf16 dot-product GEMM
    does under avx512bf16 (test_linear_shapes.rounds_activations)."""
    x, gate_up, down = (torch.as_tensor(a, dtype=torch.float64) for a in (x, gate_up, down))
    rnd = (lambda v: v.bfloat16().double()) if round_inputs else (lambda v: v)
    ie = gate_up.shape[1] // 2
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for j, e in enumerate(ids[t]):
            gu = gate_up[e] @ rnd(x[t])
            out[t] += float(weights[t, j]) * (down[e] @ rnd(torch.nn.functional.silu(gu[:ie]) * gu[ie:]))
    return out.numpy()


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("n,H,ie,E,k", [(1, 64, 40, 8, 2), (37, 96, 72, 6, 3), (9, 32, 16, 4, 4)])
def test_experts_against_a_loop(dtype, n, H, ie, E, k):
    rng = np.random.default_rng(n + E)
    x = rng.standard_normal((n, H)).astype(np.float32)
    gate_up = (rng.standard_normal((E, 2 * ie, H)) * 0.2).astype(np.float32)
    down = (rng.standard_normal((E, H, ie)) * 0.2).astype(np.float32)
    if dtype == "bf16":  # the reference runs on the rounded weights
        gate_up, down = (torch.from_numpy(a).bfloat16().float().numpy() for a in (gate_up, down))
    ids, weights = topk(rng.standard_normal((n, E)).astype(np.float32), k, True)
    if n > 1:
        ids[:, :] = np.sort(ids, axis=1)  # any order of a token's experts must do
    with Tensor.from_numpy(x) as xt, Tensor.from_numpy(ids) as it, Tensor.from_numpy(weights) as wt, \
            Tensor.from_numpy(gate_up, dtype) as gt, Tensor.from_numpy(down, dtype) as dt, Tensor((n, H), "f32") as out:
        ops.moe_experts(out, xt, it, wt, gt, dt)
        got = out.numpy()
    want = experts_reference(x, ids, weights, gate_up, down, rounds_activations(dtype))
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-4 * max(1.0, float(np.abs(want).max())))


def test_bad_arguments_are_refused():
    with pytest.raises(LlaisysError, match=r"k \(ids.shape\[1\] = 5\) must be in \[1, E = 4\]"):
        topk(np.zeros((2, 4), np.float32), 5, True)
    x = np.zeros((2, 8), np.float32)
    gu, dn = np.zeros((3, 8, 8), np.float32), np.zeros((3, 8, 4), np.float32)
    ids, w = np.array([[0, 3], [1, 2]], np.int32), np.ones((2, 2), np.float32)
    with Tensor.from_numpy(x) as xt, Tensor.from_numpy(ids) as it, Tensor.from_numpy(w) as wt, \
            Tensor.from_numpy(gu) as gt, Tensor.from_numpy(dn) as dt, Tensor((2, 8), "f32") as out:
        with pytest.raises(LlaisysError, match=r"ids\[1\] = 3 is outside \[0, 3\)"):
            ops.moe_experts(out, xt, it, wt, gt, dt)
        with pytest.raises(LlaisysError, match="down"):
            ops.moe_experts(out, xt, it, wt, gt, gt)


def test_nan_router_logits_route_somewhere_and_propagate():
    """NaN logits (a broken checkpoint) must not break the top-k's ordering: experts in range,
    NaN weights, which the sampler then meets as NaN logits."""
    logits = np.array([[0.0, np.nan, 1.0, 2.0], [np.nan] * 4], np.float32)
    ids, w = topk(logits, 2, True)
    assert ((ids >= 0) & (ids < 4)).all() and np.isnan(w).all()
