"""The core's Qwen2 forward against transformers on small random checkpoints.

Logits must agree at every position of a batch of unequal-length prompts, on both KV
layouts, for prefill in one step, prefill in chunks, and token-by-token decode; on the CPU
and, where there is one, on an NVIDIA GPU.

The checkpoints are f32 and bf16 (the real models' dtype; transformers then runs the same
bf16-rounded weights in f32). With f32 activations the bound is ATOL: accumulation order only
(the GPU runs f32 GEMMs without TF32). Where bf16 linears round their inputs to bf16 before the
product (the CPU's avx512bf16 vdpbf16ps GEMM, and cuBLAS on a GPU), no f32 reference can follow
that exactly: a value near a bf16 tie rounds either way on a 1e-7 difference upstream, and every
layer passes the flip on. There the bound is the noise of that rounding measured on transformers
itself (the same model with every nn.Linear's input rounded, against without) times
BF16_NOISE_FACTOR."""

import numpy as np
import pytest
import torch

from llaisys import DeviceType, runtime
from llaisys.models.qwen2 import Qwen2Model

from .conftest import make_tiny_qwen2

PROMPTS = [[1, 5, 7, 9, 11, 13, 2], [3, 4], [100, 200, 300, 400, 500, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]]
BLOCK = 4  # small blocks so prompts span several, out of order
ATOL = 2e-4
BF16_NOISE_FACTOR = 2.0


def hf_logits(hf, ids):
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].numpy()


class Reference:
    """transformers' logits for a prompt and the bound llaisys must meet on them."""

    def __init__(self, hf, rounds_activations: bool):
        self.hf, self.rounds = hf, rounds_activations

    def __call__(self, ids):
        return hf_logits(self.hf, ids)

    def atol(self, ids) -> float:
        if not self.rounds:
            return ATOL
        rounded = logits_with_rounded_inputs(self.hf, ids, lambda x: x.bfloat16().float())
        return max(ATOL, BF16_NOISE_FACTOR * float(np.abs(rounded - hf_logits(self.hf, ids)).max()))


def logits_with_rounded_inputs(hf, ids, rounding):
    """transformers' logits with every nn.Linear's input passed through `rounding` first: the
    reference side of a kernel that rounds its activations before the product."""
    hooks = [mod.register_forward_pre_hook(lambda _mod, args: (rounding(args[0]),))
             for mod in hf.modules() if isinstance(mod, torch.nn.Linear)]
    try:
        return hf_logits(hf, ids)
    finally:
        for h in hooks:
            h.remove()


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
def device(request):
    dev = DeviceType[request.param.upper()]
    if dev == DeviceType.NVIDIA and runtime.device_count(dev) == 0:
        pytest.skip("no NVIDIA GPU in this build/machine")
    return dev


@pytest.fixture(scope="module", params=[(True, torch.float32), (False, torch.float32), (True, torch.bfloat16),
                                        (False, torch.bfloat16)], ids=["tied", "untied", "tied-bf16", "untied-bf16"])
def model(request, device, tmp_path_factory):
    tie, dtype = request.param
    path = tmp_path_factory.mktemp("tiny_qwen2")
    hf = make_tiny_qwen2(path, tie=tie, dtype=dtype)  # f32 copy of the saved weights
    rounds = dtype == torch.bfloat16 and (device == DeviceType.NVIDIA or runtime.cpu_isa() == "avx512bf16")
    with Qwen2Model.from_path(path, device=device) as m:
        yield m, Reference(hf, rounds)


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_batched_prefill_matches_transformers(model, layout):
    m, ref = model
    runner = Runner(m, layout, len(PROMPTS))
    logits, qs = runner.step(list(range(len(PROMPTS))), PROMPTS)
    for i, p in enumerate(PROMPTS):
        np.testing.assert_allclose(logits[qs[i]:qs[i + 1]], ref(p), atol=ref.atol(p), rtol=0)


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_chunked_prefill_and_decode_match_transformers(model, layout):
    """Prefill in uneven chunks mixed with other rows' decode tokens, then decode one by one."""
    m, ref = model
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
    np.testing.assert_allclose(np.concatenate(got_long), ref(long), atol=ref.atol(long), rtol=0)
    short = short + [21, 22]
    np.testing.assert_allclose(np.concatenate(got_short), ref(short), atol=ref.atol(short), rtol=0)


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
