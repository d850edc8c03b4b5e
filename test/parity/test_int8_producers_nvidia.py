"""Decode steps whose producers write the int8 GEMV's activations (LLAISYS_INT8_PRODUCERS=1;
rms_norm_quant, swiglu_quant, linear_quant_int8 in src/ops/*/nvidia, the folded norms of
src/models/decoder/nvidia/backend_nvidia.cpp), on an NVIDIA GPU (skips without one). A random
Qwen2 checkpoint whose widths are multiples of 256 (Q4_K's block), quantized at load to q4_k and
q8_0, runs the same greedy requests in child processes with the producers on and off (read once
a process): 64 steps at batch 1, then 5 (decode steps of at most 8 rows fold), with CUDA graphs
off and on, and with the first and the pipelined int8 GEMV. The producers share the norm's, SwiGLU's
and the quantizer's arithmetic and the GEMV adds into the residual as the separate add did, so
the ids and the logprobs must be the same bits."""

import pytest

from llaisys import DeviceType, runtime

from .gpu_child import assert_same_greedy, run_child, write_qwen2


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    if runtime.device_count(DeviceType.NVIDIA) == 0:
        pytest.skip("no NVIDIA GPU in this build/machine")
    path = tmp_path_factory.mktemp("int8_producers")
    write_qwen2(path, hidden=256, heads=4, kv_heads=2, head_dim=64, intermediate=512)
    return path


@pytest.mark.parametrize("gemv", ["1", "2"], ids=["first-int8", "pipelined-int8"])
@pytest.mark.parametrize("graphs", ["0", "1"], ids=["eager", "graphs"])
@pytest.mark.parametrize("quantize", ["q4_k", "q8_0"])
def test_int8_producers_give_the_same_bits(ckpt, quantize, graphs, gemv):
    env = {"LLAISYS_CUDA_GRAPHS": graphs, "LLAISYS_GEMV_INT8": gemv}
    on = run_child(ckpt, dict(env, LLAISYS_INT8_PRODUCERS="1"), batches=(1, 5), quantize=quantize)
    off = run_child(ckpt, dict(env, LLAISYS_INT8_PRODUCERS="0"), batches=(1, 5), quantize=quantize)
    assert_same_greedy(on, off, lp_tol=0.0, tie_gap=0.0)
