"""Padded decode steps (src/models/decoder/padded_decode.hpp), the shapes CUDA graphs replay,
run on the CPU: LLAISYS_PADDED_DECODE=1 pads every pure decode step to its bucket of rows
(1, 2, 4, then multiples of 8) and its block tables to a power-of-two width, with inert padding
rows (no K/V slot, no context, never sampled). The same requests, in a child process with it and
one without, must give the same tokens and logprobs: the padding rows touch nothing of the real
ones, on every architecture family (windows, q/k norms, tied heads, rope scaling), through
batches that shrink as requests finish (7 rows in a bucket of 8, then 6, 5, 4, 3 in 4, ...),
greedy, seeded sampling and penalties, and the real 0.5B model as `make serve` runs it. The
engine's load runs every padded shape once with padding rows only (capture_graphs: where a GPU
captures its graphs), which must leave the cache as it was."""

import json
import os
import subprocess
import sys

import pytest

from .conftest import ARCH_FAMILIES, make_tiny_arch

CHILD = r"""
import json, sys
from llaisys import LLM, SamplingParams
path, real = sys.argv[1], sys.argv[2] == "real"
if real:
    prompts = ["Write a haiku about the sea.", "def fib(n):", "The capital of France is",
               "List three prime numbers:", "Explain recursion in one sentence."]
else:
    prompts = [[7, 300, 42, 42, 9, 250, 11, 64 + i, 5, 77][: 4 + i] for i in range(7)]
sps = [SamplingParams(temperature=0.0, max_tokens=6 + 3 * i, ignore_eos=True, logprobs=2) for i in range(len(prompts))]
sps[1] = SamplingParams(temperature=0.8, top_p=0.9, seed=11, max_tokens=12, ignore_eos=True, logprobs=1)
sps[2] = SamplingParams(temperature=0.0, repetition_penalty=1.3, max_tokens=14, ignore_eos=True, logprobs=1)
with LLM(path, kv_layout="block", kv_dtype="f32", block_size=4, kv_cache_memory=8 << 20, max_num_seqs=8) as llm:
    outs = llm.generate(prompts, sps)  # after the load ran every shape of up to 8 rows (capture_graphs)
    padded = llm.engine.memory_stats().padded_bytes
    shapes = llm.worker.model.capture_graphs(llm.worker.cache, 8)
# per token: {id: logprob} of the sampled id and the top ones, as sorted pairs
lps = [[sorted((int(k), float(v)) for k, v in d.items()) for d in o.outputs[0].logprobs] for o in outs]
print(json.dumps({"ids": [list(o.outputs[0].token_ids) for o in outs], "lps": lps, "padded_bytes": padded,
                  "shapes": shapes}))
"""


def run_child(path, kind: str, padded: bool) -> dict:
    env = dict(os.environ)
    env.pop("LLAISYS_PADDED_DECODE", None)
    if padded:
        env["LLAISYS_PADDED_DECODE"] = "1"
    child = subprocess.run([sys.executable, "-c", CHILD, str(path), kind], env=env, capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 0, child.stderr[-4000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def assert_same(plain: dict, padded: dict, what: str) -> None:
    assert plain["padded_bytes"] == 0, f"{what}: a step was padded without LLAISYS_PADDED_DECODE"
    assert padded["padded_bytes"] > 0, f"{what}: no step was padded under LLAISYS_PADDED_DECODE=1"
    assert (plain["shapes"], padded["shapes"]) == (0, 4), f"{what}: capture_graphs ran 1, 2, 4 and 8 rows"
    assert padded["ids"] == plain["ids"], what
    for r, (a, b) in enumerate(zip(plain["lps"], padded["lps"], strict=True)):
        for t, (x, y) in enumerate(zip(a, b, strict=True)):
            assert [i for i, _ in x] == [i for i, _ in y], f"{what}: row {r} token {t}: other top ids"
            for (_, lx), (_, ly) in zip(x, y):
                assert abs(lx - ly) <= 1e-4, f"{what}: row {r} token {t}: logprob {lx} vs {ly}"


@pytest.mark.parametrize("family", list(ARCH_FAMILIES))
def test_padded_steps_change_nothing_tiny(family, tmp_path):
    make_tiny_arch(tmp_path, family)
    assert_same(run_child(tmp_path, "tiny", False), run_child(tmp_path, "tiny", True), family)


@pytest.mark.slow
def test_padded_steps_change_nothing_real(qwen05_served):
    assert_same(run_child(qwen05_served, "real", False), run_child(qwen05_served, "real", True), "qwen2.5 0.5B")
