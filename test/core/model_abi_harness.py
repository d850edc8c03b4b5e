"""The harness of test_model_abi_misuse.py: a tiny random Qwen2 (2 layers, GQA 4/2 heads, vocab 64)
set weight by weight from numpy through the C ABI, step batches built from numpy fields (any of
them NULL or miscounted on purpose), reference prompts for the BLOCK and SLOT layouts, and a
Scenario that holds a cache with the prompt and checks that a failed call changed nothing; and the
status checks (last_error, assert_failed, assert_null) test_c_abi_misuse.py uses too."""

from __future__ import annotations

import ctypes

import numpy as np

from llaisys import Status
from llaisys.libllaisys import LIB
from llaisys.libllaisys.kv_cache import KVCacheStats
from llaisys.libllaisys.qwen2 import Batch, Qwen2Meta, StepOutput
from llaisys.libllaisys.sampler import SamplingParams

F32, I32, CPU, BLOCK, SLOT = 1, 4, 0, 0, 1
V, H, I, LAYERS, NH, NKV, HD = 64, 32, 48, 2, 4, 2, 8
BS, N_BLOCKS = 4, 8  # BLOCK cache: 8 blocks of 4 slots
N_CELLS = 16  # SLOT cache
BAD_ENUMS = [99, -1]
NULL = None

_ARRAY_TYPES = {"token_ids": np.int64, "positions": np.int64, "query_start": np.int32, "slot_mapping": np.int64,
                "block_tables": np.int32, "context_lens": np.int32, "seq_ids": np.int32, "sample_rows": np.int32}


def last_error() -> str:
    return LIB.llaisysGetLastError().decode()


def assert_failed(status: int, expected: int, *fragments: str) -> None:
    """`status` is `expected`, and the thread's last error says so with every fragment."""
    assert status == expected, f"status {status}, want {Status(expected)!r}: {last_error()}"
    assert last_error(), "a failing call must leave a message"
    assert LIB.llaisysGetLastStatus() == expected
    for f in fragments:
        assert f in last_error(), f"{f!r} not in {last_error()!r}"


def assert_null(handle, expected: int, *fragments: str) -> None:
    """A constructor returned NULL and set the last error."""
    assert not handle
    assert_failed(LIB.llaisysGetLastStatus(), expected, *fragments)


# ------------------------------------------------------------------------------------------
# the tiny model


def meta(**over) -> Qwen2Meta:
    m = Qwen2Meta(dtype=F32, n_layers=LAYERS, hidden_size=H, intermediate_size=I, n_heads=NH, n_kv_heads=NKV,
                  head_dim=HD, vocab_size=V, max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=1e4,
                  tie_word_embeddings=0)
    for k, v in over.items():
        setattr(m, k, v)
    return m


def weight_shapes(layers: int = LAYERS) -> dict[str, tuple[int, ...]]:
    shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,), "lm_head.weight": (V, H)}
    for l in range(layers):
        p = f"model.layers.{l}."
        shapes.update({
            p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
            p + "self_attn.q_proj.weight": (NH * HD, H), p + "self_attn.q_proj.bias": (NH * HD,),
            p + "self_attn.k_proj.weight": (NKV * HD, H), p + "self_attn.k_proj.bias": (NKV * HD,),
            p + "self_attn.v_proj.weight": (NKV * HD, H), p + "self_attn.v_proj.bias": (NKV * HD,),
            p + "self_attn.o_proj.weight": (H, NH * HD), p + "mlp.gate_proj.weight": (I, H),
            p + "mlp.up_proj.weight": (I, H), p + "mlp.down_proj.weight": (H, I),
        })
    return shapes


def set_weight(model, name: str, data: np.ndarray, dtype: int = F32, shape=None) -> int:
    shape = data.shape if shape is None else shape
    dims = (ctypes.c_size_t * max(len(shape), 1))(*shape)
    return LIB.llaisysQwen2ModelSetWeight(model, name.encode(), data.ctypes.data, dtype, dims, len(shape))


def make_model(layers: int = LAYERS):
    model = LIB.llaisysQwen2ModelCreate(ctypes.byref(meta(n_layers=layers)), CPU, 0)
    assert model, last_error()
    rng = np.random.default_rng(0)
    for name, shape in weight_shapes(layers).items():
        w = (1.0 + 0.1 * rng.standard_normal(shape) if name.endswith("norm.weight")
             else 0.3 * rng.standard_normal(shape)).astype(np.float32)
        assert set_weight(model, name, w) == Status.OK, last_error()
    return model


# ------------------------------------------------------------------------------------------
# step calls


def make_batch(fields: dict, **over):
    """(Batch, keep-alive list) from numpy-able fields; `over` replaces fields (None: a NULL
    pointer) or sets a count (n_tokens, n_seqs, max_blocks, n_sample) outright. Counts
    follow the arrays unless set."""
    f = {**fields, **{k: v for k, v in over.items() if k in _ARRAY_TYPES}}
    arrays = {k: None if v is None else np.ascontiguousarray(v, _ARRAY_TYPES[k]) for k, v in f.items()}
    base = {k: np.asarray(v) for k, v in fields.items() if v is not None}
    counts = {"n_tokens": len((arrays.get("token_ids") if arrays.get("token_ids") is not None
                               else base["token_ids"])),
              "n_seqs": len(arrays["query_start"] if arrays.get("query_start") is not None
                            else base["query_start"]) - 1,
              "n_sample": len(arrays["sample_rows"] if arrays.get("sample_rows") is not None
                              else base["sample_rows"]),
              "max_blocks": (arrays["block_tables"] if arrays.get("block_tables") is not None
                             else base.get("block_tables", np.zeros((1, 0)))).shape[1]}
    counts.update({k: v for k, v in over.items() if k in counts})
    ptrs = {k: None if a is None else a.ctypes.data for k, a in arrays.items()}  # c_void_p fields
    return Batch(**counts, **ptrs), list(arrays.values())


def greedy(n: int = 1, **over):
    params = (SamplingParams * n)(*[LIB.llaisysSamplingDefaultParams() for _ in range(n)])
    for k, v in over.items():
        for p in params:
            setattr(p, k, v)
    return params


def step(model, cache, fields: dict, params=..., out: StepOutput | None = None, **over):
    """Run one step; returns (status, logits [n_sample, V], sampled ids [n_sample])."""
    batch, keep = make_batch(fields, **over)
    n_sample = batch.n_sample
    logits = np.full((max(n_sample, 1), V), np.nan, np.float32)
    ids = np.full(max(n_sample, 1), -1, np.int64)
    if out is None:
        out = StepOutput()
        out.logits = logits.ctypes.data
        out.sample.token_ids = ids.ctypes.data
    params = greedy(max(n_sample, 1)) if params is ... else params
    status = LIB.llaisysQwen2ModelStep(model, cache, ctypes.byref(batch), params, ctypes.byref(out))
    del keep
    return status, logits, ids


PROMPT = [3, 17, 42, 8, 60]  # positions 0..4
NEXT = 25  # decoded at position 5

# BLOCK: the row owns blocks 5 and 2, so positions 0..3 live in slots 20..23 and 4, 5 in 8, 9.
BLOCK_PREFILL = dict(token_ids=PROMPT, positions=range(5), query_start=[0, 5], slot_mapping=[20, 21, 22, 23, 8],
                     block_tables=[[5, 2, 0, 0]], context_lens=[5], sample_rows=[4])
BLOCK_DECODE = dict(token_ids=[NEXT], positions=[5], query_start=[0, 1], slot_mapping=[9],
                    block_tables=[[5, 2, 0, 0]], context_lens=[6], sample_rows=[0])
# SLOT: seq 3; the decode's cell is removed again after each good step, so it repeats.
SLOT_PREFILL = dict(token_ids=PROMPT, positions=range(5), query_start=[0, 5], seq_ids=[3], sample_rows=[4])
SLOT_DECODE = dict(token_ids=[NEXT], positions=[5], query_start=[0, 1], seq_ids=[3], sample_rows=[0])


def new_cache(model, layout: int, n_slots: int):
    cache = LIB.llaisysQwen2ModelCreateKVCache(model, layout, F32, n_slots, BS)
    assert cache, last_error()
    return cache


class Scenario:
    """A cache holding the prompt, and the decode step's reference logits and token."""

    def __init__(self, model, layout: int):
        self.model, self.layout = model, layout
        self.prefill, self.decode = (BLOCK_PREFILL, BLOCK_DECODE) if layout == BLOCK else (SLOT_PREFILL, SLOT_DECODE)
        self.cache = new_cache(model, layout, N_BLOCKS * BS if layout == BLOCK else N_CELLS)
        status, _, _ = step(model, self.cache, self.prefill)
        assert status == Status.OK, last_error()
        self.ref_logits, self.ref_ids = self.good_decode()
        assert np.isfinite(self.ref_logits).all() and 0 <= self.ref_ids[0] < V

    def used(self) -> int:
        s = KVCacheStats()
        assert LIB.llaisysKVCacheGetStats(self.cache, ctypes.byref(s)) == Status.OK
        return s.used

    def good_decode(self):
        status, logits, ids = step(self.model, self.cache, self.decode)
        assert status == Status.OK, last_error()
        if self.layout == SLOT:
            assert LIB.llaisysKVCacheSeqRm(self.cache, 3, 5, -1) == Status.OK
        return logits, ids

    def assert_usable(self) -> None:
        """The failed call changed nothing: the cache holds the prompt alone and the decode
        step gives the same logits and token as before any misuse."""
        if self.layout == SLOT:
            assert self.used() == len(PROMPT)
        logits, ids = self.good_decode()
        np.testing.assert_array_equal(logits, self.ref_logits)
        np.testing.assert_array_equal(ids, self.ref_ids)
