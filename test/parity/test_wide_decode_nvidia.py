"""The wide-load decode attention (LLAISYS_WIDE_DECODE=1; src/ops/paged_attention/nvidia/
decode_wide_kernel.cuh) in whole models on an NVIDIA GPU (skips without one). The tiny
architectures of test_archs have head sizes the kernel does not serve (16 to 24), so these
random Qwen2 checkpoints have Qwen2.5's: head size 128 with 6 query heads per kv head (the 1.5B's
grouping) and 64 with 7 (the 0.5B's). The same requests run in child processes with the kernel
on and off (it is chosen at every launch, and a CUDA graph keeps the one it captured): 64 greedy
steps at batch 1 and 9, prompts of 3 to 300 tokens, f16 and bf16 KV, BLOCK (block tables) and
SLOT (slot lists), and BLOCK with CUDA graphs.
  - Greedy ids equal the first split-K kernel's, but where that run's top two logprobs are a
    near tie (the two kernels sum in other orders).
  - Logprobs agree within f32 rounding of the attention (1e-3) up to the first difference."""

import json
import os
import subprocess
import sys

import pytest

from llaisys import DeviceType, runtime

CHILD = r"""
import json, sys
from llaisys import LLM, SamplingParams
path, n, layout, kv_dtype = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
prompts = [[(7 * i + 13 * j) % 250 + 1 for j in range(3 + 37 * i)] for i in range(n)]
sp = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True, logprobs=2)
with LLM(path, device="nvidia", kv_layout=layout, kv_dtype=kv_dtype, block_size=16, kv_cache_memory=64 << 20,
         max_num_seqs=16) as llm:
    outs = llm.generate(prompts, sp)
lps = [[sorted(((int(k), float(v)) for k, v in d.items()), key=lambda e: -e[1]) for d in o.outputs[0].logprobs]
       for o in outs]
print(json.dumps({"ids": [list(o.outputs[0].token_ids) for o in outs], "lps": lps}))
"""

SHAPES = {  # name: (hidden, heads, kv heads, head size)
    "d128-group6": (768, 6, 1, 128),
    "d64-group7": (448, 7, 1, 64),
}


@pytest.fixture(scope="module", params=list(SHAPES))
def ckpt(request, tmp_path_factory):
    import torch
    import transformers

    from .conftest import write_word_tokenizer

    if runtime.device_count(DeviceType.NVIDIA) == 0:
        pytest.skip("no NVIDIA GPU in this build/machine")
    hidden, heads, kv_heads, d = SHAPES[request.param]
    path = tmp_path_factory.mktemp(f"wide_{request.param}")
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=256, hidden_size=hidden, num_attention_heads=heads,
                                   num_key_value_heads=kv_heads, head_dim=d, intermediate_size=256,
                                   num_hidden_layers=2, max_position_embeddings=512, rms_norm_eps=1e-6,
                                   bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # sharper attention than the init's: the weights differ key to key
        for name, p in model.named_parameters():
            if "q_proj" in name or "k_proj" in name:
                p.mul_(4.0)
    model.to(torch.bfloat16).save_pretrained(path, safe_serialization=True)
    write_word_tokenizer(path, vocab=256)
    return path


def run_child(path, n: int, layout: str, kv_dtype: str, wide: str, graphs: str = "0") -> dict:
    env = dict(os.environ, LLAISYS_WIDE_DECODE=wide, LLAISYS_CUDA_GRAPHS=graphs)
    child = subprocess.run([sys.executable, "-c", CHILD, str(path), str(n), layout, kv_dtype], env=env,
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-4000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def assert_same_greedy(wide: dict, plain: dict) -> None:
    for r, (w, p, wl, pl) in enumerate(zip(wide["ids"], plain["ids"], wide["lps"], plain["lps"], strict=True)):
        assert len(w) == len(p) == 64
        diff = next((t for t, (a, b) in enumerate(zip(w, p)) if a != b), len(w))
        for t in range(diff):  # the chosen token's logprob, and the runner-up's
            for (ia, va), (ib, vb) in zip(wl[t], pl[t]):
                assert abs(va - vb) <= 1e-3, f"row {r} token {t}: logprob {va} against {vb}"
        if diff < len(w):
            top = pl[diff]
            gap = top[0][1] - top[1][1]
            assert gap <= 1e-2, f"row {r} differs at token {diff} where the first kernel's top two are {gap:.5f} apart"


@pytest.mark.parametrize("kv_dtype", ["f16", "bf16"])
@pytest.mark.parametrize("layout", ["block", "slot"])
@pytest.mark.parametrize("n", [1, 9])
def test_wide_decode_greedy_equals_first_kernel(ckpt, n, layout, kv_dtype):
    assert_same_greedy(run_child(ckpt, n, layout, kv_dtype, "1"), run_child(ckpt, n, layout, kv_dtype, "0"))


@pytest.mark.parametrize("n", [1, 9])
def test_wide_decode_in_cuda_graphs(ckpt, n):
    """Captured into the decode graphs (its split count fixed per graph, padding rows with no key)."""
    assert_same_greedy(run_child(ckpt, n, "block", "f16", "1", graphs="1"), run_child(ckpt, n, "block", "f16", "0"))
