"""The model, KV-cache and sampler C functions misused through ctypes (llaisys.libllaisys.LIB):
NULL handles, out-of-range enums, bad sizes, malformed step batches and missing output
arrays. Each must return an error status with a message, and leave the process, the model
and the cache usable: a correct step afterwards gives exactly the logits it gave before.

The model is a tiny random Qwen2 (2 layers, GQA 4/2 heads, vocab 64) set weight by weight
from numpy (model_abi_harness.py), so these tests need neither torch nor a checkpoint and run
under ASan (`make test-asan`)."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import numpy as np
import pytest

from llaisys import Status
from llaisys.libllaisys import LIB
from llaisys.libllaisys.kv_cache import KVCacheParams, KVCacheStats
from llaisys.libllaisys.qwen2 import StepOutput
from llaisys.libllaisys.sampler import SampleOutput
from model_abi_harness import (BAD_ENUMS, BLOCK, BS, CPU, F32, HD, I32, LAYERS, N_BLOCKS, N_CELLS, NEXT, NKV, NULL,
                               PROMPT, SLOT, H, Scenario, V, assert_failed, assert_null, greedy, last_error, make_batch,
                               make_model, meta, new_cache, set_weight, step, weight_shapes)

_i64, _f32 = ctypes.c_int64, ctypes.c_float


@pytest.fixture(scope="module")
def model():
    m = make_model()
    yield m
    LIB.llaisysQwen2ModelDestroy(m)


@pytest.fixture(scope="module")
def block(model):
    s = Scenario(model, BLOCK)
    yield s
    LIB.llaisysKVCacheDestroy(s.cache)


@pytest.fixture(scope="module")
def slot(model):
    s = Scenario(model, SLOT)
    yield s
    LIB.llaisysKVCacheDestroy(s.cache)


TWO = dict(token_ids=[NEXT, NEXT], positions=[5, 6], slot_mapping=[9, 10], block_tables=[[5, 2, 0, 0]] * 2,
           context_lens=[6, 7], sample_rows=[0])
OOR, INV = Status.OUT_OF_RANGE, Status.INVALID_ARGUMENT

BLOCK_CASES = {
    "token id = vocab": (dict(token_ids=[V]), OOR, "outside the vocabulary"),
    "token id -1": (dict(token_ids=[-1]), OOR, "outside the vocabulary"),
    "negative position": (dict(positions=[-1]), OOR, "negative"),
    "position off its context": (dict(positions=[4]), INV, "BLOCK layout puts it at 5"),
    "query_start[0] != 0": (dict(query_start=[1, 1]), INV, "query_start[0] must be 0"),
    "query_start past n_tokens": (dict(query_start=[0, 2]), INV, "must end at n_tokens"),
    "query_start short of n_tokens": (dict(**TWO, query_start=[0, 1]), INV, "must end at n_tokens"),
    "query_start not monotone": (dict(**TWO, query_start=[0, 3, 2]), INV, "query_start must increase"),
    "empty row": (dict(**TWO, query_start=[0, 0, 2]), INV, "row 0 has no tokens"),
    "more rows than tokens": (dict(query_start=[0, 1, 1]), INV, "every row needs a token"),
    "no tokens": (dict(n_tokens=0), INV, "at least one token"),
    "slot_mapping off the table": (dict(slot_mapping=[10]), INV, "disagrees with the block table"),
    "slot_mapping far out": (dict(slot_mapping=[1 << 40]), INV, "disagrees with the block table"),
    "block id = pool size": (dict(block_tables=[[5, N_BLOCKS, 0, 0]]), OOR, "outside the pool of 8 blocks"),
    "block id -1": (dict(block_tables=[[-1, 2, 0, 0]]), OOR, "outside the pool"),
    "context shorter than query": (dict(context_lens=[0]), INV, "shorter than"),
    "context negative": (dict(context_lens=[-3]), INV, "shorter than"),
    "context off the positions": (dict(context_lens=[7]), INV, "BLOCK layout puts it at 6"),
    "context beyond the table": (dict(context_lens=[1000]), INV, "columns"),
    "max_blocks too small": (dict(max_blocks=1), INV, "columns"),
    "sample row = n_tokens": (dict(sample_rows=[1]), OOR, "not a token of the batch"),
    "sample row -1": (dict(sample_rows=[-1]), OOR, "not a token of the batch"),
    "token_ids NULL": (dict(token_ids=None), INV, "required"),
    "positions NULL": (dict(positions=None), INV, "required"),
    "query_start NULL": (dict(query_start=None), INV, "required"),
    "slot_mapping NULL": (dict(slot_mapping=None), INV, "needs slot_mapping"),
    "block_tables NULL": (dict(block_tables=None), INV, "needs slot_mapping, block_tables"),
    "context_lens NULL": (dict(context_lens=None), INV, "context_lens"),
    "sample_rows NULL": (dict(sample_rows=None), INV, "sample_rows is NULL"),
}


@pytest.mark.parametrize("case", list(BLOCK_CASES))
def test_bad_block_batch_is_refused_and_changes_nothing(model, block, case):
    over, status, fragment = BLOCK_CASES[case]
    LIB.llaisysClearLastError()
    assert_failed(step(model, block.cache, block.decode, **over)[0], status, fragment)
    block.assert_usable()


SLOT_CASES = {
    "seq id = max": (dict(seq_ids=[256]), OOR, "outside [0, 256)"),
    "seq id -1": (dict(seq_ids=[-1]), OOR, "outside [0, 256)"),
    "seq_ids NULL": (dict(seq_ids=None), INV, "needs seq_ids"),
    "seq in two rows": (dict(token_ids=[NEXT, NEXT], positions=[5, 5], query_start=[0, 1, 2], seq_ids=[3, 3]),
                        INV, "appears in two rows"),
    "position already held": (dict(positions=[4]), INV, "already holds position 4"),
    "token id = vocab": (dict(token_ids=[V]), OOR, "outside the vocabulary"),
    "positions not increasing": (dict(token_ids=[NEXT, NEXT], positions=[6, 5], query_start=[0, 2]), INV,
                                 "positions must increase"),
}


@pytest.mark.parametrize("case", list(SLOT_CASES))
def test_bad_slot_batch_is_refused_and_changes_nothing(model, slot, case):
    over, status, fragment = SLOT_CASES[case]
    LIB.llaisysClearLastError()
    assert_failed(step(model, slot.cache, slot.decode, **over)[0], status, fragment)
    slot.assert_usable()


def test_full_slot_cache_is_recoverable(model, slot):
    n = N_CELLS - len(PROMPT) + 1  # one more token than there are free cells
    status, _, _ = step(model, slot.cache, dict(token_ids=[NEXT] * n, positions=range(5, 5 + n), query_start=[0, n],
                                                seq_ids=[3], sample_rows=[n - 1]))
    assert_failed(status, Status.NO_KV_SPACE, "too few free cells")
    slot.assert_usable()


def sample_out(n: int = 1, top: int = 0, token_ids: bool = True, top_arrays: bool = True):
    """(SampleOutput, keep-alive arrays) for n rows with `top` logprobs per row."""
    ids, lp = np.zeros(n, np.int64), np.zeros(n, np.float32)
    tids, tlp = np.zeros((n, max(top, 1)), np.int64), np.zeros((n, max(top, 1)), np.float32)
    o = SampleOutput(token_ids=ids.ctypes.data if token_ids else None, logprobs=lp.ctypes.data, top_capacity=top)
    if top_arrays:
        o.top_ids = tids.ctypes.data
        o.top_logprobs = tlp.ctypes.data
    return o, [ids, lp, tids, tlp]


def test_bad_sampling_and_outputs_are_refused(model, block):
    bad_ids = np.array([V + 1], np.int64)
    cases = [
        ("token_ids NULL", greedy(), sample_out(token_ids=False), INV, "token_ids is NULL"),
        ("logprobs over capacity", greedy(n_logprobs=3), sample_out(top=2), Status.BUFFER_TOO_SMALL, "capacity of 2"),
        ("capacity without arrays", greedy(), sample_out(top=2, top_arrays=False), INV, "top_ids"),
        ("negative temperature", greedy(temperature=-1.0), sample_out(), INV, "temperature"),
        ("NaN top_p", greedy(top_p=float("nan")), sample_out(), INV, "top_p"),
        ("penalty id out of vocab", greedy(prompt_tokens=bad_ids.ctypes.data_as(ctypes.POINTER(_i64)), n_prompt=1),
         sample_out(), INV, "prompt_tokens[0]"),
        ("penalty ids NULL", greedy(n_output=3), sample_out(), INV, "output_tokens is NULL"),
        ("bias values NULL", greedy(bias_ids=bad_ids.ctypes.data_as(ctypes.POINTER(_i64)), n_bias=1), sample_out(),
         INV, "bias_ids[0]"),
    ]
    for name, params, (out, keep), status, fragment in cases:
        so = StepOutput(sample=out)
        LIB.llaisysClearLastError()
        assert_failed(step(model, block.cache, block.decode, params=params, out=so)[0], status, fragment)
        block.assert_usable()
    # logits without sampling is allowed: params NULL needs no token_ids
    status, logits, _ = step(model, block.cache, block.decode, params=None)
    assert status == Status.OK, last_error()
    np.testing.assert_array_equal(logits, block.ref_logits)


def test_null_handles(model, block):
    fields = block.decode
    for call, fragment in [
        (lambda **k: step(NULL, block.cache, fields, **k)[0], "model is NULL"),
        (lambda **k: step(model, NULL, fields, **k)[0], "cache is NULL"),
        (lambda: LIB.llaisysQwen2ModelStep(model, block.cache, NULL, NULL, ctypes.byref(StepOutput())),
         "batch is NULL"),
        (lambda: LIB.llaisysQwen2ModelStep(model, block.cache, ctypes.byref(make_batch(fields)[0]), NULL, NULL),
         "out is NULL"),
        (lambda: set_weight(NULL, "model.norm.weight", np.ones(H, np.float32)), "model is NULL"),
        (lambda: LIB.llaisysQwen2ModelMissingWeights(NULL, NULL, NULL, 0), "model is NULL"),
        (lambda: LIB.llaisysKVCacheGetStats(NULL, ctypes.byref(KVCacheStats())), "cache is NULL"),
        (lambda: LIB.llaisysKVCacheGetStats(block.cache, NULL), "out is NULL"),
        (lambda: LIB.llaisysKVCacheSeqRm(NULL, 0, 0, -1), "cache is NULL"),
        (lambda: LIB.llaisysKVCacheSeqCp(NULL, 0, 1, 0, -1), "cache is NULL"),
        (lambda: LIB.llaisysKVCacheSeqKeep(NULL, 0), "cache is NULL"),
        (lambda: LIB.llaisysKVCacheSeqAdd(NULL, 0, 0, -1, 1), "cache is NULL"),
        (lambda: LIB.llaisysKVCacheSeqPosMax(NULL, 0, ctypes.byref(_i64())), "cache is NULL"),
        (lambda: LIB.llaisysKVCacheClear(NULL), "cache is NULL"),
    ]:
        LIB.llaisysClearLastError()
        assert_failed(call(), INV, fragment)
    LIB.llaisysClearLastError()
    assert_null(LIB.llaisysQwen2ModelCreate(NULL, CPU, 0), INV, "meta is NULL")
    assert_null(LIB.llaisysQwen2ModelCreateKVCache(NULL, BLOCK, F32, 16, BS), INV, "model is NULL")
    assert_null(LIB.llaisysKVCacheCreate(NULL), INV, "params is NULL")
    LIB.llaisysClearLastError()
    assert LIB.llaisysKVCacheSlotsForBytes(NULL, 1 << 20) == 0
    assert_failed(LIB.llaisysGetLastStatus(), INV, "params is NULL")
    LIB.llaisysQwen2ModelDestroy(NULL)  # no-ops, like free(NULL)
    LIB.llaisysKVCacheDestroy(NULL)
    block.assert_usable()


def kv_params(**over) -> KVCacheParams:
    p = KVCacheParams(layout=BLOCK, dtype=F32, n_layers=LAYERS, n_kv_heads=NKV, head_dim=HD, n_slots=32, block_size=BS,
                      rope_theta=1e4, device=CPU, device_id=0)
    for k, v in over.items():
        setattr(p, k, v)
    return p


@pytest.mark.parametrize("bad", BAD_ENUMS)
def test_out_of_range_enums_are_refused(model, block, bad):
    w = np.ones(H, np.float32)
    LIB.llaisysClearLastError()
    assert_null(LIB.llaisysQwen2ModelCreate(ctypes.byref(meta()), bad, 0), INV, f"unknown device type {bad}")
    assert_null(LIB.llaisysQwen2ModelCreate(ctypes.byref(meta(dtype=bad)), CPU, 0), INV, f"unknown dtype {bad}")
    assert_failed(set_weight(model, "model.norm.weight", w, dtype=bad), INV, f"unknown dtype {bad}")
    assert_null(LIB.llaisysQwen2ModelCreateKVCache(model, bad, F32, 16, BS), INV, f"unknown KV layout {bad}")
    assert_null(LIB.llaisysQwen2ModelCreateKVCache(model, BLOCK, bad, 16, BS), INV, f"unknown dtype {bad}")
    for field, what in (("layout", "KV layout"), ("dtype", "dtype"), ("device", "device type")):
        p = kv_params(**{field: bad})
        LIB.llaisysClearLastError()
        assert_null(LIB.llaisysKVCacheCreate(ctypes.byref(p)), INV, f"unknown {what} {bad}")
        LIB.llaisysClearLastError()
        assert LIB.llaisysKVCacheSlotsForBytes(ctypes.byref(p), 1 << 20) == 0
        assert_failed(LIB.llaisysGetLastStatus(), INV, f"unknown {what} {bad}")
    block.assert_usable()


def test_valid_but_unusable_enums_are_refused(model):
    assert_null(LIB.llaisysQwen2ModelCreate(ctypes.byref(meta(dtype=I32)), CPU, 0), Status.DTYPE_MISMATCH, "f32")
    assert_null(LIB.llaisysQwen2ModelCreateKVCache(model, BLOCK, I32, 16, BS), Status.DTYPE_MISMATCH, "f32")
    assert_failed(set_weight(model, "model.norm.weight", np.ones(H, np.int32), dtype=I32), Status.DTYPE_MISMATCH,
                  "i32")


BIG = 1 << 40


@pytest.mark.parametrize("over, fragment", [
    (dict(vocab_size=0), "must be > 0"),
    (dict(n_layers=0), "must be > 0"),
    (dict(n_heads=3), "multiple of n_kv_heads"),
    (dict(n_kv_heads=0), "multiple of n_kv_heads"),
    (dict(head_dim=7), "head_dim must be even"),
    (dict(rms_norm_eps=0.0), "rms_norm_eps"),
    (dict(rope_theta=float("inf")), "rope_theta"),
    (dict(vocab_size=BIG, hidden_size=BIG), "overflows"),
    (dict(n_heads=1 << 62, n_kv_heads=1 << 61), "overflows"),
    (dict(intermediate_size=(1 << 63) + 1), "overflows"),
    (dict(n_layers=1 << 62), "overflows"),  # was an INTERNAL length_error
], ids=lambda x: x if isinstance(x, str) else None)
def test_bad_model_sizes_are_refused(over, fragment):
    LIB.llaisysClearLastError()
    assert_null(LIB.llaisysQwen2ModelCreate(ctypes.byref(meta(**over)), CPU, 0), INV, fragment)


HUGE_VOCAB_CHILD = """
import ctypes
from llaisys.libllaisys import LIB
from llaisys.libllaisys.qwen2 import Qwen2Meta
m = Qwen2Meta(dtype=1, n_layers=1, hidden_size=1, intermediate_size=1, n_heads=1, n_kv_heads=1, head_dim=2,
              vocab_size=2**64 - 1, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=1e4,
              tie_word_embeddings=1)
h = LIB.llaisysQwen2ModelCreate(ctypes.byref(m), 0, 0)
print(bool(h), LIB.llaisysGetLastStatus(), LIB.llaisysGetLastError().decode())
"""


def test_vocab_whose_packed_panels_wrap_is_refused():
    """vocab_size SIZE_MAX with tied embeddings: ceil(vocab / 16) panels wrapped to 0, the lm_head
    got an empty block and its tail panel was cleared 64 bytes before it (heap corruption, an
    abort at a later free). In a child process, so that a corrupted heap fails this test only."""
    run = subprocess.run([sys.executable, "-c", HUGE_VOCAB_CHILD], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"rc {run.returncode}: {run.stdout} {run.stderr[-2000:]}"
    created, status, message = run.stdout.split(" ", 2)
    assert created == "False" and int(status) == INV and "overflows" in message, run.stdout


def test_bad_cache_sizes_are_refused(model, block):
    for n_slots, block_size, fragment in [(0, BS, "at least one slot"), (30, BS, "multiple of block_size"),
                                          (32, 0, "multiple of block_size"), (BIG, BS, "exceeds")]:
        LIB.llaisysClearLastError()
        assert_null(LIB.llaisysQwen2ModelCreateKVCache(model, BLOCK, F32, n_slots, block_size), INV, fragment)
    for over, fragment in [(dict(n_layers=1 << 62), "overflows"), (dict(head_dim=BIG, n_kv_heads=BIG), "overflows"),
                           (dict(n_layers=1 << 20, head_dim=1 << 20, n_slots=1 << 30), "overflows"),
                           (dict(n_layers=0), "n_layers")]:
        p = kv_params(**over)
        LIB.llaisysClearLastError()
        assert_null(LIB.llaisysKVCacheCreate(ctypes.byref(p)), INV, fragment)
    LIB.llaisysClearLastError()
    assert LIB.llaisysKVCacheSlotsForBytes(ctypes.byref(kv_params(n_layers=0)), 1 << 20) == 0
    assert_failed(LIB.llaisysGetLastStatus(), INV, "empty slot")
    # the good case: whole blocks of 2 layers * 2 (K, V) * 2 heads * 8 dims * 4 bytes = 256 bytes a slot
    assert LIB.llaisysKVCacheSlotsForBytes(ctypes.byref(kv_params()), 256 * 10) == 8
    block.assert_usable()


def test_set_weight_misuse_leaves_the_model_intact(model, block):
    w = np.ones(H, np.float32)
    for call, status, fragment in [
        (lambda: set_weight(model, "model.layers.9.mlp.up_proj.weight", w), INV, "unknown Qwen2 weight name"),
        (lambda: set_weight(model, "model.norm.weight", np.ones(H + 1, np.float32)), Status.SHAPE_MISMATCH,
         "wrong shape"),
        (lambda: LIB.llaisysQwen2ModelSetWeight(model, NULL, w.ctypes.data, F32, (ctypes.c_size_t * 1)(H), 1), INV,
         "name is NULL"),
        (lambda: LIB.llaisysQwen2ModelSetWeight(model, b"model.norm.weight", NULL, F32, (ctypes.c_size_t * 1)(H), 1),
         INV, "data is NULL"),
        (lambda: LIB.llaisysQwen2ModelSetWeight(model, b"model.norm.weight", w.ctypes.data, F32, NULL, 1), INV,
         "shape is NULL"),
        (lambda: set_weight(model, "model.norm.weight", w, shape=(1,) * 9), INV, "too large"),
    ]:
        LIB.llaisysClearLastError()
        assert_failed(call(), status, fragment)
    count = ctypes.c_size_t(99)
    assert LIB.llaisysQwen2ModelMissingWeights(model, ctypes.byref(count), NULL, 0) == Status.OK
    assert count.value == 0
    block.assert_usable()


def test_unfinished_model_and_foreign_cache_are_refused(model, block):
    bare = LIB.llaisysQwen2ModelCreate(ctypes.byref(meta(n_layers=1)), CPU, 0)
    assert bare, last_error()
    try:
        name = ctypes.create_string_buffer(4)
        count = ctypes.c_size_t()
        assert_failed(LIB.llaisysQwen2ModelMissingWeights(bare, ctypes.byref(count), name, 4),
                      Status.BUFFER_TOO_SMALL, "too small")
        assert count.value == len(weight_shapes(1))
        cache = new_cache(bare, BLOCK, N_BLOCKS * BS)
        try:
            assert_failed(step(bare, cache, block.decode)[0], INV, "not set")
            # a cache shaped for another model (1 layer, not 2)
            assert_failed(step(model, cache, block.decode)[0], Status.SHAPE_MISMATCH, "another model")
        finally:
            LIB.llaisysKVCacheDestroy(cache)
    finally:
        LIB.llaisysQwen2ModelDestroy(bare)
    block.assert_usable()


def test_seq_operations_misuse(slot, block):
    c = slot.cache
    out = _i64()
    for call, status, fragment in [
        (lambda: LIB.llaisysKVCacheSeqRm(c, 256, 0, -1), OOR, "seq 256"),
        (lambda: LIB.llaisysKVCacheSeqRm(c, -2, 0, -1), OOR, "seq -2"),
        (lambda: LIB.llaisysKVCacheSeqCp(c, -1, 0, 0, -1), OOR, "src -1"),
        (lambda: LIB.llaisysKVCacheSeqCp(c, 3, 256, 0, -1), OOR, "dst 256"),
        (lambda: LIB.llaisysKVCacheSeqKeep(c, 1000), OOR, "seq 1000"),
        (lambda: LIB.llaisysKVCacheSeqAdd(c, 256, 0, -1, 1), OOR, "seq 256"),
        (lambda: LIB.llaisysKVCacheSeqAdd(c, 3, 0, -1, (1 << 63) - 1), INV, "overflows"),
        (lambda: LIB.llaisysKVCacheSeqPosMax(c, 256, ctypes.byref(out)), OOR, "seq 256"),
        (lambda: LIB.llaisysKVCacheSeqPosMax(c, 3, NULL), INV, "out is NULL"),
        (lambda: LIB.llaisysKVCacheSeqRm(block.cache, 0, 0, -1), Status.UNSUPPORTED, "SLOT layout"),
        (lambda: LIB.llaisysKVCacheSeqPosMax(block.cache, 0, ctypes.byref(out)), Status.UNSUPPORTED, "SLOT layout"),
    ]:
        LIB.llaisysClearLastError()
        assert_failed(call(), status, fragment)
    assert LIB.llaisysKVCacheSeqPosMax(c, 3, ctypes.byref(out)) == Status.OK and out.value == 4
    slot.assert_usable()
    block.assert_usable()


def test_sample_misuse():
    logits = np.arange(2 * V, dtype=np.float32).reshape(2, V)[:, ::-1].copy()  # argmax 0 in each row
    lp = logits.ctypes.data_as(ctypes.POINTER(_f32))
    out, keep = sample_out(2)
    for call, status, fragment in [
        (lambda: LIB.llaisysSample(NULL, 2, V, greedy(2), ctypes.byref(out)), INV, "logits is NULL"),
        (lambda: LIB.llaisysSample(lp, 2, V, NULL, ctypes.byref(out)), INV, "params is NULL"),
        (lambda: LIB.llaisysSample(lp, 2, V, greedy(2), NULL), INV, "out is NULL"),
        (lambda: LIB.llaisysSample(lp, 2, V, greedy(2), ctypes.byref(sample_out(2, token_ids=False)[0])), INV,
         "token_ids is NULL"),
        (lambda: LIB.llaisysSample(lp, 2, V, greedy(2), ctypes.byref(sample_out(2, 4, top_arrays=False)[0])), INV,
         "top_ids"),
        (lambda: LIB.llaisysSample(lp, 2, V, greedy(2, n_logprobs=5), ctypes.byref(out)), Status.BUFFER_TOO_SMALL,
         "capacity"),
        (lambda: LIB.llaisysSample(lp, 2, 0, greedy(2), ctypes.byref(out)), INV, "vocab must be > 0"),
        (lambda: LIB.llaisysSample(lp, 1 << 62, 1 << 8, greedy(2), ctypes.byref(out)), INV, "overflows"),
        (lambda: LIB.llaisysSample(lp, 2, V, greedy(2, min_p=2.0), ctypes.byref(out)), INV, "min_p"),
        (lambda: LIB.llaisysSample(lp, 2, V, greedy(2, repetition_penalty=0.0), ctypes.byref(out)), INV,
         "repetition_penalty"),
    ]:
        LIB.llaisysClearLastError()
        assert_failed(call(), status, fragment)
    assert LIB.llaisysSample(lp, 2, V, greedy(2), ctypes.byref(out)) == Status.OK, last_error()
    np.testing.assert_array_equal(keep[0], [0, 0])
