"""The wide-load decode attention (LLAISYS_WIDE_DECODE=1; src/ops/paged_attention/nvidia/
decode_wide_kernel.cuh) in whole models on an NVIDIA GPU (skips without one). The tiny
architectures of test_archs have head sizes the kernel does not serve (16 to 24), so these
random Qwen2 checkpoints have Qwen2.5's: head size 128 with 6 query heads per kv head (the 1.5B's
grouping) and 64 with 7 (the 0.5B's). The same requests run in child processes with the kernel
on and off (it is chosen at every launch, and a CUDA graph keeps the one it captured): 64 greedy
steps at batch 1, then 9 (one process each way), prompts of 3 to 300 tokens, f16 and bf16 KV, BLOCK (block tables) and
SLOT (slot lists), and BLOCK with CUDA graphs.
  - Greedy ids equal the first split-K kernel's, but where that run's top two logprobs are a
    near tie (the two kernels sum in other orders).
  - Logprobs agree within f32 rounding of the attention (1e-3) up to the first difference."""

import pytest

from llaisys import DeviceType, runtime

from .gpu_child import assert_same_greedy, run_child, write_qwen2

SHAPES = {  # name: (hidden, heads, kv heads, head size)
    "d128-group6": (768, 6, 1, 128),
    "d64-group7": (448, 7, 1, 64),
}


@pytest.fixture(scope="module", params=list(SHAPES))
def ckpt(request, tmp_path_factory):
    if runtime.device_count(DeviceType.NVIDIA) == 0:
        pytest.skip("no NVIDIA GPU in this build/machine")
    path = tmp_path_factory.mktemp(f"wide_{request.param}")
    write_qwen2(path, *SHAPES[request.param], intermediate=256, qk_scale=4.0)
    return path


def wide(on: bool, graphs: str = "0") -> dict:
    return {"LLAISYS_WIDE_DECODE": "1" if on else "0", "LLAISYS_CUDA_GRAPHS": graphs}


@pytest.mark.parametrize("kv_dtype", ["f16", "bf16"])
@pytest.mark.parametrize("layout", ["block", "slot"])
def test_wide_decode_greedy_equals_first_kernel(ckpt, layout, kv_dtype):
    kw = {"kv_layout": layout, "kv_dtype": kv_dtype}
    assert_same_greedy(run_child(ckpt, wide(True), **kw), run_child(ckpt, wide(False), **kw), lp_tol=1e-3)


def test_wide_decode_in_cuda_graphs(ckpt):
    """Captured into the decode graphs (its split count fixed per graph, padding rows with no key)."""
    kw = {"kv_layout": "block", "kv_dtype": "f16"}
    assert_same_greedy(run_child(ckpt, wide(True, graphs="1"), **kw), run_child(ckpt, wide(False), **kw), lp_tol=1e-3)
