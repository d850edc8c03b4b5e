"""CUDA graphs of decode steps (issue 40; src/models/decoder/nvidia/decode_graphs.*), on an
NVIDIA GPU (skips without one). The same requests run in three child processes:
LLAISYS_CUDA_GRAPHS=1 (padded steps replayed as graphs), =padded (the same padded steps run
eagerly, never captured) and =0 (every step as it comes). 128 greedy steps at batch 1, 7 (in a
bucket of 8) and 64, on tiny random checkpoints of two families in f32 and bf16, block size 4 so
that the block-table width grows through 16, 32 and 64 columns mid-run.
  - A replay equals the eager padded step bit for bit: ids and logprobs.
  - Against unpadded steps the ids are identical, but where the unpadded run's top two
    logprobs are a near tie (other row counts may take other GEMM kernels).
  - The graphs were captured (model stats), in at most 2 s and 200 MB of padded memory."""

import json
import os
import subprocess
import sys

import pytest

from llaisys import DeviceType, runtime

from .conftest import make_tiny_arch

CHILD = r"""
import json, sys
from llaisys import LLM, SamplingParams
path, n = sys.argv[1], int(sys.argv[2])
prompts = [[7 + i % 50, 300, 42, 9 + i % 7, 250, 11, 64, 5, 77][: 3 + i % 6] for i in range(n)]
sp = SamplingParams(temperature=0.0, max_tokens=128, ignore_eos=True, logprobs=2)
with LLM(path, device="nvidia", kv_layout="block", block_size=4, kv_cache_memory=64 << 20, max_num_seqs=64) as llm:
    outs = llm.generate(prompts, sp)
    st = llm.engine.memory_stats()
lps = [[sorted(((int(k), float(v)) for k, v in d.items()), key=lambda e: -e[1]) for d in o.outputs[0].logprobs]
       for o in outs]
print(json.dumps({"ids": [list(o.outputs[0].token_ids) for o in outs], "lps": lps, "graphs": st.graphs,
                  "capture_s": st.graph_capture_s, "padded_bytes": st.padded_bytes}))
"""


def run_child(path, n: int, mode: str) -> dict:
    env = dict(os.environ, LLAISYS_CUDA_GRAPHS=mode)
    child = subprocess.run([sys.executable, "-c", CHILD, str(path), str(n)], env=env, capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stderr[-4000:]
    assert "capturing a CUDA graph" not in child.stderr, child.stderr[-2000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=[("qwen2", "f32"), ("qwen2", "bf16"), ("qwen3", "bf16")],
                ids=lambda p: "-".join(p))
def ckpt(request, tmp_path_factory):
    import torch

    if runtime.device_count(DeviceType.NVIDIA) == 0:
        pytest.skip("no NVIDIA GPU in this build/machine")
    family, dtype = request.param
    path = tmp_path_factory.mktemp(f"graphs_{family}_{dtype}")
    make_tiny_arch(path, family, {"f32": torch.float32, "bf16": torch.bfloat16}[dtype])
    return path


@pytest.mark.parametrize("n", [1, 7, 64])
def test_graph_replay_equals_eager(ckpt, n):
    graphs, padded, plain = (run_child(ckpt, n, m) for m in ("1", "padded", "0"))
    assert graphs["graphs"] >= 1, "no graph was captured"
    assert graphs["capture_s"] <= 2.0 and graphs["padded_bytes"] <= 200 << 20, graphs
    assert padded["graphs"] == 0 and plain["padded_bytes"] == 0
    assert graphs["ids"] == padded["ids"] and graphs["lps"] == padded["lps"], "a replay differs from its eager step"
    for r, (g, p, lp) in enumerate(zip(graphs["ids"], plain["ids"], plain["lps"], strict=True)):
        diff = next((t for t, (a, b) in enumerate(zip(g, p)) if a != b), None)
        if diff is None:
            assert len(g) == len(p) == 128
            continue
        top = lp[diff]
        gap = top[0][1] - top[1][1]
        assert gap <= 1e-2, f"row {r} differs at token {diff} where the unpadded run's top two are {gap:.5f} apart"
