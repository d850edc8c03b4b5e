"""Shared by the GPU A/B tests of opt-in kernels (test_wide_decode_nvidia.py,
test_int8_producers_nvidia.py): a random Qwen2 checkpoint of a chosen shape, the same greedy
requests through LLM in a child process per setting (the kernels are chosen from environment
variables, some read once a process), and the comparison of two runs' ids and logprobs."""

import json
import os
import subprocess
import sys

CHILD = r"""
import json, sys
from llaisys import LLM, SamplingParams
path, sizes, kw = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
sp = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True, logprobs=2)
res = {}
with LLM(path, device="nvidia", block_size=16, kv_cache_memory=64 << 20, max_num_seqs=16, **kw) as llm:
    for n in sizes:  # one generate call a batch size: its steps run n rows, then fewer as rows end
        prompts = [[(7 * i + 13 * j) % 250 + 1 for j in range(3 + 37 * i)] for i in range(n)]
        outs = llm.generate(prompts, sp)
        res[str(n)] = {"ids": [list(o.outputs[0].token_ids) for o in outs],
                       "lps": [[sorted(((int(k), float(v)) for k, v in d.items()), key=lambda e: -e[1])
                                for d in o.outputs[0].logprobs] for o in outs]}
print(json.dumps(res))
"""
N_TOKENS = 64


def write_qwen2(path, hidden: int, heads: int, kv_heads: int, head_dim: int, intermediate: int, qk_scale: float = 1.0):
    """A random 2-layer Qwen2 of this shape in bf16 with a word-level tokenizer of 256 ids; q and
    k projections scaled by qk_scale (sharper attention: the weights differ key to key)."""
    import torch
    import transformers

    from .conftest import write_word_tokenizer

    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=256, hidden_size=hidden, num_attention_heads=heads,
                                   num_key_value_heads=kv_heads, head_dim=head_dim, intermediate_size=intermediate,
                                   num_hidden_layers=2, max_position_embeddings=512, rms_norm_eps=1e-6,
                                   bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "q_proj" in name or "k_proj" in name:
                p.mul_(qk_scale)
    model.to(torch.bfloat16).save_pretrained(path, safe_serialization=True)
    write_word_tokenizer(path, vocab=256)


def run_child(path, env: dict, batches=(1, 9), **llm_kwargs) -> dict:
    """For each batch size n of `batches`, n greedy requests (prompts of 3 to 3 + 37 (n - 1)
    tokens, N_TOKENS generated each), in one process with these environment variables and LLM
    arguments: {"n": {"ids": [...], "lps": [[top-2 per token]]}}."""
    child = subprocess.run([sys.executable, "-c", CHILD, str(path), json.dumps(list(batches)), json.dumps(llm_kwargs)],
                           env=dict(os.environ, **env), capture_output=True, text=True, timeout=600)
    assert child.returncode == 0, child.stderr[-4000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def assert_same_greedy(new: dict, base: dict, lp_tol: float, tie_gap: float = 1e-2) -> None:
    """For every batch size, every row's ids equal base's, but where base's top two logprobs at
    the first difference are within tie_gap (tie_gap 0: no difference allowed); logprobs within
    lp_tol up to there."""
    assert set(new) == set(base) and new
    for n in new:
        _same_greedy(new[n], base[n], lp_tol, tie_gap, f"batch {n}")


def _same_greedy(new: dict, base: dict, lp_tol: float, tie_gap: float, where: str) -> None:
    for r, (w, p, wl, pl) in enumerate(zip(new["ids"], base["ids"], new["lps"], base["lps"], strict=True)):
        assert len(w) == len(p) == N_TOKENS
        diff = next((t for t, (a, b) in enumerate(zip(w, p)) if a != b), len(w))
        for t in range(diff):  # the chosen token's logprob, and the runner-up's
            for (_, va), (_, vb) in zip(wl[t], pl[t]):
                assert abs(va - vb) <= lp_tol, f"{where}, row {r} token {t}: logprob {va} against {vb}"
        if diff < len(w):
            top = pl[diff]
            gap = top[0][1] - top[1][1]
            assert gap <= tie_gap, f"{where}, row {r} differs at token {diff} where the base's top two are {gap:.5f} apart"
