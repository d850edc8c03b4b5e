"""The core's Qwen2 forward against transformers on small random checkpoints.

Logits must agree at every position of a batch of unequal-length prompts, on both KV
layouts, for prefill in one step, prefill in chunks, and token-by-token decode; on the CPU
and, where there is one, on an NVIDIA GPU (f32 checkpoints: the GPU runs f32 GEMMs without
TF32, so the same tolerance holds)."""

import numpy as np
import pytest
import torch

from llaisys import DeviceType, runtime
from llaisys.models.qwen2 import Qwen2Model

PROMPTS = [[1, 5, 7, 9, 11, 13, 2], [3, 4], [100, 200, 300, 400, 500, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]]
BLOCK = 4  # small blocks so prompts span several, out of order
ATOL = 2e-4


def hf_logits(hf, ids):
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].numpy()


class Runner:
    """Drives the core with explicit step batches over either layout."""

    def __init__(self, model: Qwen2Model, layout: str, n_seqs: int, max_len: int = 64):
        self.model, self.layout = model, layout
        self.cache = model.create_kv_cache(layout, n_slots=n_seqs * max_len, block_size=BLOCK)
        blocks_per_seq = max_len // BLOCK
        # a scrambled block assignment, so logical order differs from physical order
        perm = np.random.default_rng(1).permutation(n_seqs * blocks_per_seq).astype(np.int32)
        self.tables = perm.reshape(n_seqs, blocks_per_seq)
        self.lens = [0] * n_seqs

    def step(self, rows, chunks, want_logits=True):
        """rows: seq indices; chunks: token lists to append for each. Returns logits of all tokens."""
        toks = np.concatenate([np.asarray(c, np.int64) for c in chunks])
        qs = np.cumsum([0] + [len(c) for c in chunks]).astype(np.int32)
        pos = np.concatenate([np.arange(self.lens[r], self.lens[r] + len(c)) for r, c in zip(rows, chunks)])
        kw = {}
        if self.layout == "block":
            tables = self.tables[rows]
            ctx = [self.lens[r] + len(c) for r, c in zip(rows, chunks)]
            slots = np.concatenate([tables[i][p // BLOCK] * BLOCK + p % BLOCK
                                    for i, p in enumerate(np.split(pos, qs[1:-1]))])
            kw = dict(block_tables=tables, context_lens=ctx, slot_mapping=slots)
        else:
            kw = dict(seq_ids=rows)
        res = self.model.step(self.cache, token_ids=toks, positions=pos, query_start=qs,
                              sample_rows=np.arange(len(toks)), want_logits=want_logits, **kw)
        for r, c in zip(rows, chunks):
            self.lens[r] += len(c)
        return res.logits, qs


@pytest.fixture(scope="module", params=["cpu", "nvidia"])
def model(request, tiny_qwen2):
    device = DeviceType[request.param.upper()]
    if device == DeviceType.NVIDIA and runtime.device_count(device) == 0:
        pytest.skip("no NVIDIA GPU in this build/machine")
    path, hf = tiny_qwen2
    with Qwen2Model.from_path(path, device=device) as m:
        yield m, hf


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_batched_prefill_matches_transformers(model, layout):
    m, hf = model
    runner = Runner(m, layout, len(PROMPTS))
    logits, qs = runner.step(list(range(len(PROMPTS))), PROMPTS)
    for i, p in enumerate(PROMPTS):
        np.testing.assert_allclose(logits[qs[i]:qs[i + 1]], hf_logits(hf, p), atol=ATOL, rtol=0)


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_chunked_prefill_and_decode_match_transformers(model, layout):
    """Prefill in uneven chunks mixed with other rows' decode tokens, then decode one by one."""
    m, hf = model
    runner = Runner(m, layout, len(PROMPTS))
    long, short = PROMPTS[2], PROMPTS[0]
    got_long, got_short = [], []
    l1, qs = runner.step([0, 2], [short, long[:5]])
    got_short.append(l1[qs[0]:qs[1]])
    got_long.append(l1[qs[1]:qs[2]])
    l2, qs = runner.step([2, 0], [long[5:13], [21]])
    got_long.append(l2[qs[0]:qs[1]])
    got_short.append(l2[qs[1]:qs[2]])
    l3, qs = runner.step([0, 2], [[22], long[13:]])
    got_short.append(l3[qs[0]:qs[1]])
    got_long.append(l3[qs[1]:qs[2]])
    np.testing.assert_allclose(np.concatenate(got_long), hf_logits(hf, long), atol=ATOL, rtol=0)
    np.testing.assert_allclose(np.concatenate(got_short), hf_logits(hf, short + [21, 22]), atol=ATOL, rtol=0)


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_greedy_alone_equals_batched(model, layout):
    """Greedy continuation of a prompt is the same alone and beside prompts of other lengths."""
    m, _ = model

    def greedy(rows_prompts, steps=12):
        runner = Runner(m, layout, len(rows_prompts))
        rows = list(range(len(rows_prompts)))
        logits, qs = runner.step(rows, rows_prompts)
        nxt = [int(np.argmax(logits[qs[i + 1] - 1])) for i in rows]
        outs = [[t] for t in nxt]
        for _ in range(steps - 1):
            logits, qs = runner.step(rows, [[t] for t in nxt])
            nxt = [int(np.argmax(logits[i])) for i in rows]
            for o, t in zip(outs, nxt):
                o.append(t)
        return outs

    together = greedy(PROMPTS)
    for i, p in enumerate(PROMPTS):
        assert greedy([p])[0] == together[i]
