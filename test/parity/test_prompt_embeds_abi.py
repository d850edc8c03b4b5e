"""llaisysModelStepEmbeds (include/llaisys/models/model.h): a step whose tokens are partly given
as input embedding rows, on a tiny random Qwen2 (f32 and bf16 weights, tied and untied: the
embedding lookup differs in each) and a tiny Qwen3-MoE.

- Rows equal to the embedding table's rows of the ids give bit-identical logits to the id step,
  whichever tokens of a mixed batch are embedded (the embedded tokens' ids are ignored: they are
  set out of the vocabulary here), on BLOCK and SLOT.
- Each malformed embeds argument gets its status and a message naming the field, and a refused
  step changes nothing: the next good step gives the same logits as on a fresh cache."""

import ctypes
import re

import numpy as np
import pytest
import torch

from llaisys.libllaisys import LIB, Status, last_error
from llaisys.libllaisys.model import Batch, BatchEmbeds, StepOutput
from llaisys.models.model import Model
from llaisys.models.step_io import make_batch

from .conftest import make_tiny_arch
from .test_moe import make_tiny_moe

TOKENS = [[5, 17, 300, 42, 9, 11], [201, 99, 4], [7]]  # three rows: prefill chunks of 6, 3 and 1


@pytest.fixture(scope="module", params=["qwen2-f32", "qwen2-bf16", "llama-tied", "qwen3_moe"])
def core(request, tmp_path_factory):
    """(Model, embed_tokens weight [vocab, hidden] f32 as the model holds it)."""
    family, _, kind = request.param.partition("-")
    path = tmp_path_factory.mktemp(f"abi_{family}")
    if family.endswith("_moe"):
        hf = make_tiny_moe(path, family)
    else:
        hf = make_tiny_arch(path, family, dtype=torch.bfloat16 if kind == "bf16" else torch.float32)
    table = hf.model.embed_tokens.weight.detach().to(torch.float32).numpy().copy()
    with Model.from_path(path) as m:
        yield m, table


def flat():
    ids = np.concatenate([np.asarray(t, np.int64) for t in TOKENS])
    qs = np.zeros(len(TOKENS) + 1, np.int32)
    qs[1:] = np.cumsum([len(t) for t in TOKENS])
    pos = np.concatenate([np.arange(len(t), dtype=np.int64) for t in TOKENS])
    return ids, pos, qs


def layout_args(layout, qs):
    if layout == "slot":
        return dict(seq_ids=np.arange(len(TOKENS), dtype=np.int32))
    # row s: blocks [s * 2, s * 2 + 2) of 4 slots
    lens = np.diff(qs).astype(np.int32)
    tables = np.arange(2 * len(TOKENS), dtype=np.int32).reshape(len(TOKENS), 2)
    slots = np.concatenate([tables[s, np.arange(n) // 4] * 4 + np.arange(n) % 4 for s, n in enumerate(lens)])
    return dict(slot_mapping=slots.astype(np.int64), block_tables=tables, context_lens=lens)


def logits(m, layout, rows=None, table=None):
    """The logits of every token of TOKENS on a fresh cache, `rows` given as embeddings."""
    ids, pos, qs = flat()
    emb = None
    if rows is not None:
        rows = np.asarray(rows, np.int32)
        emb = table[ids[rows]]
        ids = ids.copy()
        ids[rows] = 10 ** 9  # ignored for embedded tokens
    with m.create_kv_cache(layout, n_slots=64, block_size=4, dtype="f32") as cache:
        res = m.step(cache, token_ids=ids, positions=pos, query_start=qs, sample_rows=np.arange(len(ids)),
                     want_logits=True, embed_rows=rows, embeds=emb, **layout_args(layout, qs))
    return res.logits


@pytest.mark.parametrize("layout", ["block", "slot"])
def test_embedded_rows_give_the_ids_logits(core, layout):
    m, table = core
    want = logits(m, layout)
    for rows in ([0], [0, 1, 2, 3, 4, 5], [6, 7, 8, 9], [2, 5, 9], list(range(10))):
        np.testing.assert_array_equal(logits(m, layout, rows, table), want, err_msg=f"rows {rows}")


def raw_step(m, cache, emb, ids=None):
    """llaisysModelStepEmbeds on TOKENS (BLOCK) with the given llaisysBatchEmbeds_t; its status."""
    fid, pos, qs = flat()
    keep: list = []
    batch = make_batch(keep, token_ids=fid if ids is None else ids, positions=pos, query_start=qs,
                       sample_rows=None, **layout_args("block", qs), seq_ids=None)
    out = StepOutput()
    return LIB.llaisysModelStepEmbeds(m.handle, cache.handle, ctypes.byref(batch), emb, None, ctypes.byref(out))


def embeds_struct(keep, rows, data, size=None):
    rows = np.ascontiguousarray(rows, np.int32)
    data = np.ascontiguousarray(data, np.float32)
    keep.extend((rows, data))
    e = BatchEmbeds(struct_size=size if size is not None else ctypes.sizeof(BatchEmbeds), n_rows=len(rows),
                    rows=rows.ctypes.data, data=data.ctypes.data)
    return ctypes.byref(e), e


def test_bad_embeds_get_a_status_naming_the_field(core):
    m, table = core
    H, keep = table.shape[1], []
    good = table[:2]
    nan = good.copy()
    nan[1, 3] = np.nan
    cases = [
        (embeds_struct(keep, [0, 1], good, size=8)[0], Status.INVALID_ARGUMENT, "embeds: struct_size 8"),
        (embeds_struct(keep, [0, 10], good)[0], Status.OUT_OF_RANGE, r"rows\[1\] = 10 is not a token"),
        (embeds_struct(keep, [-1, 2], good)[0], Status.OUT_OF_RANGE, r"rows\[0\] = -1"),
        (embeds_struct(keep, [3, 3], good)[0], Status.INVALID_ARGUMENT, "rows must increase"),
        (embeds_struct(keep, [0, 1], nan)[0], Status.INVALID_ARGUMENT, r"data\[1, 3\] \(the row of token 1\) is not "
                                                                        "finite"),
        (embeds_struct(keep, np.arange(11), np.zeros((11, H)))[0], Status.INVALID_ARGUMENT, "n_rows 11 exceeds"),
    ]
    _, null = embeds_struct(keep, [0], good[:1])
    null.data = None
    cases.append((ctypes.byref(null), Status.INVALID_ARGUMENT, "rows and data are required"))
    want = logits(m, "block")
    with m.create_kv_cache("block", n_slots=64, block_size=4, dtype="f32") as cache:
        for arg, status, message in cases:
            assert raw_step(m, cache, arg) == status
            assert re.search(message, last_error()), last_error()
        bad_ids = flat()[0].copy()
        bad_ids[4] = 10 ** 9  # an id outside the vocabulary, not embedded: still refused
        assert raw_step(m, cache, embeds_struct(keep, [0, 1], good)[0], ids=bad_ids) == Status.OUT_OF_RANGE
        assert "outside the vocabulary" in last_error()
        assert raw_step(m, cache, None) == Status.OK  # NULL embeds: llaisysModelStep
        empty, _ = embeds_struct(keep, np.zeros(0), np.zeros((0, H)))
        assert raw_step(m, cache, empty) == Status.OK  # n_rows 0 likewise
    # nothing the refused steps did is visible to a good one (a fresh cache and the same model)
    np.testing.assert_array_equal(logits(m, "block"), want)
