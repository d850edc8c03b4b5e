"""Mixture-of-experts models on an NVIDIA GPU (skips without one), on the tiny random
checkpoints of test_moe (Qwen3-MoE, Qwen2-MoE with its shared expert and a dense layer,
Mixtral) and the quantized experts of test_moe_quant.

The GPU decides each route on the host with the CPU's code, so the experts a token goes to
are the CPU's wherever the router logits agree; the routers are drawn wide (test_moe), so f32
rounding never moves a token across a near tie. Checked:

- f32: logits at every position (batched prefill, chunked prefill, decode; BLOCK and SLOT)
  within the CPU's bound of transformers (f32 GEMMs without TF32), and the CPU's within
  twice that bound; 32 greedy tokens through llaisys.LLM identical to transformers';
- bf16 (weights rounded at load): logits against transformers over the same rounded weights,
  within the bound of the dense GPU test (test_archs: the GPU's prefill GEMMs round their
  activations to bf16) at 90% of rows, within BF16_WORST at all (test_logits_bf16 says why);
- experts quantized at load (q8_0, q4_k): within test_moe_quant's bound of transformers over
  the dequantized weights, greedy tokens equal where its top two are clearly apart."""

import copy

import numpy as np
import pytest
import torch

from llaisys import LLM, DeviceType, SamplingParams, runtime
from llaisys.models.model import Model

from .test_archs import N_GEN, PROMPTS, check_logits_every_position, hf_greedy
from .test_moe import MOE_FAMILIES, make_tiny_moe
from .test_moe_quant import ATOL as QUANT_ATOL
from .test_moe_quant import check_quantized_logits, quantized_with_reference
from .test_tiny_qwen2 import ATOL, Reference, Runner

BF16_WORST = 1.0  # logits of a row; a wrong expert moves them by units
pytestmark = pytest.mark.skipif(runtime.device_count(DeviceType.NVIDIA) == 0,
                                reason="no NVIDIA GPU in this build/machine")


@pytest.fixture(scope="module", params=list(MOE_FAMILIES))
def ckpt(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"tiny_{request.param}")
    return request.param, path, make_tiny_moe(path, request.param)


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_logits_every_position_f32(ckpt, layout):
    _, path, hf = ckpt
    with Model.from_path(path, device=DeviceType.NVIDIA) as m:
        check_logits_every_position(m, Reference(hf, False), layout)


def two_rows(m):
    """Logits of PROMPTS[2][:9] and PROMPTS[1] prefilled together, then 6 decode steps of both
    (fed PROMPTS[2][9:15]): (the long row's [15, V], the short row's [17, V], its ids)."""
    long, short = PROMPTS[2], PROMPTS[1]
    runner = Runner(m, "block", 2)
    logits, qs = runner.step([0, 1], [long[:9], short])
    got_long, got_short = [logits[qs[0]:qs[1]]], [logits[qs[1]:qs[2]]]
    for t in long[9:15]:
        logits, _ = runner.step([0, 1], [[t], [t]])
        got_long.append(logits[:1])
        got_short.append(logits[1:])
    return np.concatenate(got_long), np.concatenate(got_short), short + long[9:15]


def test_logits_equal_the_cpus(ckpt):
    _, path, _ = ckpt
    with Model.from_path(path, device=DeviceType.NVIDIA) as m:
        gpu = two_rows(m)[:2]
    with Model.from_path(path) as m:
        cpu = two_rows(m)[:2]
    for g, c in zip(gpu, cpu):
        np.testing.assert_allclose(g, c, atol=2 * ATOL, rtol=0)


def test_logits_bf16(ckpt):
    """bf16 weights: rounding moves router logits by a few hundredths, enough to swap a token's
    k-th and (k+1)-th experts where the reference has them that close (measured with the CPU
    in the GPU's place: one row past the bound, by 0.15). So: at least 90% of rows within the
    dense bf16 bound (test_archs), and every row within BF16_WORST (a wrong route, or wrong
    expert weights, move logits by units)."""
    _, path, hf = ckpt
    rounded = copy.deepcopy(hf)
    with torch.no_grad():
        for p in rounded.parameters():
            p.copy_(p.bfloat16().float())  # the weights as loaded with dtype="bf16"
    ref = Reference(rounded, True)
    with Model.from_path(path, dtype="bf16", device=DeviceType.NVIDIA) as m:
        got_long, got_short, short = two_rows(m)
    errs, bounds = [], []
    for got, ids in ((got_long, PROMPTS[2][:15]), (got_short, short)):
        errs.append(np.abs(got - ref(ids)).max(axis=1))
        bounds.append(np.full(len(ids), ref.atol(ids)))
    errs, bounds = np.concatenate(errs), np.concatenate(bounds)
    assert (errs <= bounds).mean() >= 0.9, f"rows past the bound: {np.flatnonzero(errs > bounds)}, errors {errs}"
    assert errs.max() <= BF16_WORST, errs


def test_greedy_matches_generate(ckpt):
    """transformers' 32 greedy tokens from llaisys.LLM on the GPU, batched with the prefix
    cache on (then a prefix-cache hit), and alone."""
    _, path, hf = ckpt
    want = [hf_greedy(hf, p) for p in PROMPTS]
    sp = SamplingParams(temperature=0.0, max_tokens=N_GEN, ignore_eos=True)
    with LLM(str(path), device="nvidia", kv_dtype="f32", enable_prefix_caching=True, block_size=4,
             kv_cache_memory=4 << 20, max_num_seqs=4) as engine:
        assert [list(o.outputs[0].token_ids) for o in engine.generate(PROMPTS, sp)] == want
        again = engine.generate(PROMPTS[2], sp)[0]
        assert again.usage.cached_tokens > 0 and list(again.outputs[0].token_ids) == want[2]
        assert [list(engine.generate(p, sp)[0].outputs[0].token_ids) for p in PROMPTS] == want


@pytest.mark.parametrize("scheme", ["q8_0", "q4_k"])
@pytest.mark.parametrize("family", ["qwen3_moe", "qwen2_moe"])
def test_quantized_experts(tmp_path, family, scheme):
    """Expert weights kept as GGUF blocks on the GPU. The chunks of check_quantized_logits run
    the prefill path (dequantized panels); one decode step of one token runs the quantized
    GEMV, checked against the CPU's (each within QUANT_ATOL of the reference)."""
    _, loaded, hf = quantized_with_reference(tmp_path, family, scheme)
    prompt = PROMPTS[2]
    with Model(loaded, device=DeviceType.NVIDIA) as m:
        check_quantized_logits(m, hf, prompt)
        runner = Runner(m, "block", 1)
        decode = [runner.step([0], [prompt[:-1]])[0][-1:], runner.step([0], [prompt[-1:]])[0]]
    with Model(loaded) as m:
        runner = Runner(m, "block", 1)
        cpu = [runner.step([0], [prompt[:-1]])[0][-1:], runner.step([0], [prompt[-1:]])[0]]
    err = float(np.abs(np.concatenate(decode) - np.concatenate(cpu)).max())
    assert err <= 2 * QUANT_ATOL, f"decode logits differ from the CPU's by {err}"
