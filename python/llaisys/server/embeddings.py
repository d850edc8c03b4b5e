"""Embeddings from the core: the mean of the final normed hidden states over an input's
tokens, L2-normalised (one float32 vector of the model's hidden size per input).

The work runs on the engine's loop thread (``AsyncEngine.submit``), never beside a step: the
core model is not to be called from two threads. It uses its own temporary SLOT KV cache, so
the engine's KV pool and prefix cache are untouched. Inputs are packed into steps of at most
``max_num_batched_tokens`` tokens (one submit per step, so generation steps interleave with a
large embeddings request); an input longer than that is computed in chunks, its earlier
chunks' K/V kept in the temporary cache as for a chunked prefill.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Optional

import numpy as np

from ..engine.config import KV_MAX_SEQS

CACHE_ALIGN = 16  # the temporary cache's capacity is rounded up to this many cells


def check_inputs(inputs, vocab_size: Optional[int], max_len: int) -> list:
    """`inputs` as lists of ints, or ValueError naming the first bad one."""
    if not isinstance(inputs, list) or not inputs:
        raise ValueError("embeddings need at least one input")
    out = []
    for i, ids in enumerate(inputs):
        if not isinstance(ids, (list, tuple)) or not ids:
            raise ValueError(f"input {i} is empty: each input must hold at least one token")
        if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in ids):
            raise ValueError(f"input {i} must be a list of integer token ids")
        bad = [t for t in ids if t < 0 or (vocab_size is not None and t >= vocab_size)]
        if bad:
            raise ValueError(f"input {i}: token id {bad[0]} is outside the vocabulary [0, {vocab_size})")
        if len(ids) > max_len:
            raise ValueError(f"input {i} has {len(ids)} tokens, more than the model's context of {max_len}")
        out.append([int(t) for t in ids])
    return out


class _EmbedJob:
    """The state of one embeddings call between its steps (touched only on the loop thread)."""

    def __init__(self, inputs: list, budget: int):
        self.inputs = inputs
        self.budget = budget  # most tokens per step
        self.next_input = 0  # first input not fully computed
        self.offset = 0  # tokens of inputs[next_input] already computed
        self.sums: list = []  # per finished input: [hidden] f64 sum of its hidden states
        self.partial: Optional[np.ndarray] = None  # [hidden] f64 sum so far of inputs[next_input]
        self.cache = None

    @property
    def done(self) -> bool:
        return self.next_input >= len(self.inputs)

    def step(self, llm_engine) -> None:
        """Compute the next <= budget tokens (the unfinished part of one input, then whole
        inputs, the last possibly cut) in one core call."""
        model = llm_engine.runner.model
        if self.cache is None:
            cap = max(len(x) for x in self.inputs) + self.budget
            cap = -(-cap // CACHE_ALIGN) * CACHE_ALIGN
            self.cache = model.create_kv_cache("slot", n_slots=cap, block_size=CACHE_ALIGN, dtype="f32")
        rows = []  # (input index, start, end) of each row of this step
        room, i, start = self.budget, self.next_input, self.offset
        while room and i < len(self.inputs) and len(rows) < KV_MAX_SEQS:
            end = min(len(self.inputs[i]), start + room)
            rows.append((i, start, end))
            room -= end - start
            i, start = i + 1, 0
        token_ids = np.concatenate([self.inputs[i][s:e] for i, s, e in rows]).astype(np.int64)  # [n_tokens]
        positions = np.concatenate([np.arange(s, e) for _, s, e in rows]).astype(np.int64)  # [n_tokens]
        query_start = np.cumsum([0] + [e - s for _, s, e in rows]).astype(np.int32)  # [n_rows + 1]
        seq_ids = np.asarray([i % KV_MAX_SEQS for i, _, _ in rows], np.int32)  # [n_rows]
        res = model.step(self.cache, token_ids=token_ids, positions=positions, query_start=query_start,
                         seq_ids=seq_ids, sample_rows=np.arange(len(token_ids), dtype=np.int32), want_hidden=True)
        if res is None:  # the capacity above covers every step; this would be a sizing bug
            raise RuntimeError("the temporary embeddings KV cache ran out of cells")
        hidden = res.hidden  # [n_tokens, hidden] f32, after the final RMSNorm
        for r, (i, s, e) in enumerate(rows):
            part = hidden[query_start[r]:query_start[r + 1]].sum(axis=0, dtype=np.float64)
            self.partial = part if self.partial is None else self.partial + part
            if e == len(self.inputs[i]):  # input finished: keep its sum, free its cells
                self.sums.append(self.partial)
                self.partial = None
                self.cache.seq_rm(i % KV_MAX_SEQS)
                self.next_input, self.offset = i + 1, 0
            else:
                self.next_input, self.offset = i, e

    def close(self, llm_engine=None) -> None:
        if self.cache is not None:
            self.cache.close()
            self.cache = None

    def vectors(self) -> list:
        out = []
        for ids, total in zip(self.inputs, self.sums):
            v = total / len(ids)
            norm = np.linalg.norm(v)
            out.append((v / norm if norm > 0 else v).astype(np.float32))
        return out


def embed(engine, inputs: list, timeout: float) -> list:
    """One [hidden] float32 unit vector per input (lists of token ids), computed on
    `engine`'s loop thread. ValueError for bad inputs, TimeoutError past `timeout` seconds,
    EngineDeadError if the engine is shutting down or dead."""
    from ..engine.async_engine import EngineDeadError

    cfg = engine.config
    ids = check_inputs(inputs, getattr(engine.tokenizer, "vocab_size", None), cfg.max_model_len)
    job = _EmbedJob(ids, cfg.max_num_batched_tokens)
    deadline = time.monotonic() + timeout
    try:
        while not job.done:
            fut = engine.submit(job.step)
            try:
                fut.result(timeout=max(0.0, deadline - time.monotonic()))
            except concurrent.futures.TimeoutError:
                fut.cancel()
                raise TimeoutError(f"embeddings did not finish within {timeout} s") from None
    finally:
        try:  # the cache is freed on the loop thread, after any step still running
            engine.submit(job.close)
        except EngineDeadError:  # no loop to run it: nothing uses the cache any more
            job.close()
    return job.vectors()
