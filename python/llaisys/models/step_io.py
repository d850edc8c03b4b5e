"""The host side of one model step: per-row sampling parameters and the step result, and their
ctypes forms (llaisysSamplingParams_t, llaisysBatch_t). Shared by Model.step and llaisys.sampler."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..libllaisys.model import Batch, BatchEmbeds
from ..libllaisys.sampler import SamplingParams as CSamplingParams


@dataclass
class RowSampling:
    """Sampling of one sample row, as the core takes it (see include/llaisys/sampler.h)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = 0
    step: int = 0  # index of this draw within the request (its number of output tokens)
    n_logprobs: int = 0
    prompt_tokens: Optional[np.ndarray] = None  # int64, for the repetition penalty
    output_tokens: Optional[np.ndarray] = None  # int64, for all penalties
    logit_bias: Optional[dict] = None  # token id -> bias
    # [(vocab + 31) // 32] uint32: bit id % 32 of word id // 32 allows token id (structured
    # output); None: every id allowed. Logprobs stay the unmasked model's (doc/sampling.md).
    allowed_mask: Optional[np.ndarray] = None


@dataclass
class StepResult:
    """What one step (Model.step, llaisys.sampler, an engine ModelRunner) returns; row i belongs
    to sample row i."""

    token_ids: Optional[np.ndarray] = None  # [n_sample] int64 sampled ids (None when not sampling)
    logprobs: Optional[np.ndarray] = None  # [n_sample] f32 logprob of each sampled id, or None
    top_ids: Optional[np.ndarray] = None  # [n_sample, top_n] int64 top ids by logprob (top_n >= every
    #                                       row's n_logprobs), or None
    top_logprobs: Optional[np.ndarray] = None  # [n_sample, top_n] f32 their logprobs, or None
    logits: Optional[np.ndarray] = None  # [n_sample, vocab] f32 raw logits when asked
    hidden: Optional[np.ndarray] = None  # [n_rows, hidden] f32 final normed hidden states when asked
    #   (the engine's runners: of batch.hidden_rows, None when the batch has no pooling row)


def ptr(a: Optional[np.ndarray]) -> Optional[int]:
    """The address of a contiguous array for a c_void_p field of the step structs, None for None
    (``a.ctypes.data`` without building the ctypes helper object: ~9 arrays a step)."""
    return None if a is None else a.__array_interface__["data"][0]


def arr(a, dtype) -> Optional[np.ndarray]:
    return None if a is None else np.ascontiguousarray(a, dtype=dtype)


def fill_sampling(c: CSamplingParams, r: RowSampling, keep: list) -> None:
    """Write `r` into the C struct `c`; arrays it points at are appended to `keep` (they must
    outlive the call)."""
    c.temperature, c.top_k, c.top_p, c.min_p = r.temperature, r.top_k, r.top_p, r.min_p
    c.repetition_penalty, c.presence_penalty = r.repetition_penalty, r.presence_penalty
    c.frequency_penalty, c.seed, c.step, c.n_logprobs = r.frequency_penalty, r.seed, r.step, r.n_logprobs
    for field, count, a in (("prompt_tokens", "n_prompt", r.prompt_tokens),
                            ("output_tokens", "n_output", r.output_tokens)):
        if a is not None and len(a):
            a = np.ascontiguousarray(a, dtype=np.int64)
            keep.append(a)
            setattr(c, field, a.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
            setattr(c, count, len(a))
    if r.logit_bias:
        ids = np.fromiter(r.logit_bias.keys(), np.int64)
        vals = np.fromiter(r.logit_bias.values(), np.float32)
        keep.extend((ids, vals))
        c.bias_ids = ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
        c.bias_values = vals.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        c.n_bias = len(ids)
    if r.allowed_mask is not None:
        mask = np.ascontiguousarray(r.allowed_mask, dtype=np.uint32)
        if mask.ndim != 1:
            raise ValueError(f"allowed_mask must be a flat uint32 array, got shape {mask.shape}")
        keep.append(mask)
        c.allowed_mask = mask.ctypes.data_as(ctypes.POINTER(ctypes.c_uint32))
        c.mask_words = len(mask)


class PackedSampling:
    """Sampling rows already in their C form (an llaisysSamplingParams_t array and the arrays it
    points into), kept between steps by a caller whose rows change only in ``step`` from one
    step to the next (engine/model_runner.SamplingRows); Model.step takes it in place of RowSamplings."""

    def __init__(self, rows: "list[RowSampling]"):
        n, size = len(rows), ctypes.sizeof(CSamplingParams)
        self._raw = np.zeros(max(n, 1) * size, np.uint8)  # the array's memory (numpy owns it)
        self.params = (CSamplingParams * max(n, 1)).from_buffer(self._raw)
        self._keep: list = [[] for _ in range(n)]  # per row: the arrays its pointers hold
        # [n] uint64 view of each row's ``step`` field (the one value a steady row changes)
        self.steps = self._raw.view(np.uint64).reshape(max(n, 1), size // 8)[:n, CSamplingParams.step.offset // 8]
        self.n = n
        self.top = max((r.n_logprobs for r in rows), default=0)  # the widest n_logprobs
        for i, r in enumerate(rows):
            fill_sampling(self.params[i], r, self._keep[i])

    def __len__(self) -> int:
        return self.n

    def refill(self, i: int, r: RowSampling) -> None:
        """Write row i again from scratch (a row whose parameters change: penalties, a mask...)."""
        self.params[i] = CSamplingParams()
        self._keep[i] = []
        fill_sampling(self.params[i], r, self._keep[i])


@dataclass(eq=False)
class PreparedStep:
    """Model.prepare_step's C arguments and result arrays, for Model.run_step."""

    cache: object  # the KVCache
    batch: Batch  # llaisysBatch_t over the arrays in keep
    embeds: Optional[BatchEmbeds]  # llaisysBatchEmbeds_t, or None
    params: object  # the llaisysSamplingParams_t array, or None
    out: object  # the llaisysStepOutput_t pointing into result's arrays
    result: StepResult  # what the call fills
    keep: list  # arrays the structs point into (they must outlive the call)
    token_ids: np.ndarray  # [n_tokens] int64 the ids the call reads (keep's first array)


def make_batch(keep: list, *, token_ids, positions, query_start, sample_rows, slot_mapping, block_tables,
               context_lens, seq_ids) -> Batch:
    """A llaisysBatch_t over contiguous copies of the arrays (appended to `keep`)."""
    token_ids, positions = arr(token_ids, np.int64), arr(positions, np.int64)  # [n_tokens]
    query_start = arr(query_start, np.int32)  # [n_seqs + 1]
    sample_rows = arr(sample_rows if sample_rows is not None else [], np.int32)  # [n_sample]
    slot_mapping = arr(slot_mapping, np.int64)  # [n_tokens] BLOCK
    block_tables = arr(block_tables, np.int32)  # [n_seqs, max_blocks] BLOCK
    context_lens = arr(context_lens, np.int32)  # [n_seqs] BLOCK
    seq_ids = arr(seq_ids, np.int32)  # [n_seqs] SLOT
    keep.extend((token_ids, positions, query_start, sample_rows, slot_mapping, block_tables, context_lens, seq_ids))
    max_blocks = block_tables.shape[1] if block_tables is not None and block_tables.ndim == 2 else 0
    return Batch(
        n_tokens=len(token_ids), token_ids=ptr(token_ids), positions=ptr(positions),
        n_seqs=len(query_start) - 1, query_start=ptr(query_start),
        slot_mapping=ptr(slot_mapping), block_tables=ptr(block_tables),
        max_blocks=max_blocks, context_lens=ptr(context_lens), seq_ids=ptr(seq_ids),
        n_sample=len(sample_rows), sample_rows=ptr(sample_rows))


def make_embeds(keep: list, rows, data, hidden_size: int) -> BatchEmbeds:
    """A llaisysBatchEmbeds_t over contiguous copies of rows [n_rows] int32 (flat token indices)
    and data [n_rows, hidden_size] f32 (appended to `keep`). The core checks the values."""
    rows = arr(rows, np.int32)
    data = arr(data, np.float32)
    if rows.ndim != 1 or data.shape != (rows.shape[0], hidden_size):
        raise ValueError(f"embeds: data of shape {data.shape} for {rows.shape[0]} rows of hidden_size {hidden_size}")
    keep.extend((rows, data))
    return BatchEmbeds(struct_size=ctypes.sizeof(BatchEmbeds), n_rows=rows.shape[0], rows=ptr(rows),
                       data=ptr(data))
