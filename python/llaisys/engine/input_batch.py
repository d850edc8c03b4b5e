"""InputBatch: the runner's copy of every request it holds, and the step's flat arrays.

Each request the runner holds has a row of two persistent numpy buffers: its known token
ids and its block table. ``update`` applies a SchedulerOutput's deltas (new requests whole,
held ones as the tokens and blocks they gained, finished ones dropped: sched_output.py);
``prepare`` then gathers the step's StepInput from the buffers with a handful of numpy
operations, whatever the batch size: no array is built from the requests' Python lists. A
step that decodes one token for exactly the rows of the previous one (steady decoding, the
common step) reuses that step's index arrays and advances its positions by one.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import is_
from typing import Optional

import numpy as np

from .sched_output import SchedulerOutput
from .step_input import StepInput


@dataclass(eq=False)
class _Held:
    """What the runner keeps of one request between steps."""

    row: int  # its row of InputBatch.tokens / .blocks
    request: object  # the Request (sampling parameters, seed, grammar) the sample rows read
    num_tokens: int  # ids of tokens[row] that are its known tokens
    num_blocks: int  # ids of blocks[row] that are its block table (BLOCK)
    seq_id: Optional[int]  # SLOT: the core's seq id
    embeds: Optional[np.ndarray] = None  # [n_prompt, hidden] f32 its prompt's input rows, or None (ids)


# the id written where a row's next token is the one the step in flight samples (async
# scheduling); StepRunner replaces it in the step's ids with that step's result
DEFERRED = -1

_NO_SEQ_IDS = np.zeros(0, np.int32)  # [0] the free_seq_ids of a step that frees none
_NO_SEQ_IDS.flags.writeable = False  # shared by every such step


def _grown(a: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """`a` with at least rows x cols entries (doubling), its content kept."""
    r, c = a.shape
    if rows <= r and cols <= c:
        return a
    b = np.zeros((max(rows, 2 * r if rows > r else r), max(cols, 2 * c if cols > c else c)), a.dtype)
    b[:r, :c] = a
    return b


class InputBatch:
    def __init__(self, kv_layout: str, block_size: int):
        self.kv_layout = kv_layout  # "block" or "slot"
        self.block_size = block_size
        self.tokens = np.zeros((8, 256), np.int64)  # [rows, cap] known ids of each held request
        self.blocks = np.zeros((8, 16), np.int32)  # [rows, cap] block table of each held request (BLOCK)
        self.held: dict = {}  # req_id -> _Held
        self._last: Optional[StepInput] = None  # the previous step, when it was a plain decode step
        self._last_reqs: Optional[list] = None  # [Request] its rows (out.scheduled)
        self._steps_in_block = 0  # BLOCK: plain steps after _last in which no row enters a new block
        self._last_rows: Optional[np.ndarray] = None  # [n_seqs] its buffer rows
        self._tables_moved = False  # a held row's block table or seq id changed since the previous step
        self._num_embedded = 0  # held requests whose prompt is input embeddings
        self._free_rows: list = list(range(7, -1, -1))  # rows no request holds (popped from the end)
        # every request whose whole token list crossed into the runner (a test reads it)
        self.num_requests_received = 0

    # ---- the deltas ----------------------------------------------------------------------
    def update(self, out: SchedulerOutput) -> None:
        """Apply one step's deltas, in the order the scheduler made them."""
        for rid in out.finished_req_ids:
            self.drop(rid)
        for nr in out.new_reqs:
            if nr.req_id in self.held:  # a runner bug, not the user's
                raise RuntimeError(f"request {nr.req_id!r} was sent as new twice")
            if not self._free_rows:
                n = self.tokens.shape[0]
                self.tokens = _grown(self.tokens, 2 * n, 0)
                self.blocks = _grown(self.blocks, 2 * n, 0)
                self._free_rows = list(range(2 * n - 1, n - 1, -1))
            h = _Held(self._free_rows.pop(), nr.request, 0, 0, nr.seq_id, getattr(nr.request, "prompt_embeds", None))
            self.held[nr.req_id] = h
            self._num_embedded += h.embeds is not None
            self._append_tokens(h, nr.token_ids)
            self._set_blocks(h, 0, nr.block_ids)
            self.num_requests_received += 1
        c = out.cached_reqs
        rows, cols, ids = [], [], []  # the single new tokens (a decode step's), written in one go
        for rid, new, keep, blocks, seq_id in zip(c.req_ids, c.new_token_ids, c.num_kept_blocks, c.new_block_ids,
                                                  c.seq_ids):
            h = self.held[rid]
            if len(new) == 1:
                rows.append(h.row)
                cols.append(h.num_tokens)
                ids.append(new[0])
                h.num_tokens += 1
            elif new:
                self._append_tokens(h, new)
            if blocks or keep != h.num_blocks:
                self._set_blocks(h, keep, blocks)
            if h.seq_id != seq_id:
                h.seq_id, self._tables_moved = seq_id, True
        for rid in out.deferred_req_ids:  # async scheduling: its next id is still being sampled
            h = self.held[rid]
            rows.append(h.row)
            cols.append(h.num_tokens)
            ids.append(DEFERRED)  # a marker, not a known token: the step's ids are filled before the call
        if len(rows) == 1:  # one decoding row (a scalar store is a tenth of a fancy one)
            self.tokens = _grown(self.tokens, 0, cols[0] + 1)
            self.tokens[rows[0], cols[0]] = ids[0]
        elif rows:
            self.tokens = _grown(self.tokens, 0, max(cols) + 1)
            self.tokens[rows, cols] = ids

    def drop(self, req_id: str) -> None:
        """Forget a finished request (unknown ids are ignored)."""
        h = self.held.pop(req_id, None)
        if h is not None:
            self._free_rows.append(h.row)
            self._num_embedded -= h.embeds is not None

    def _append_tokens(self, h: _Held, ids: list) -> None:
        n = h.num_tokens + len(ids)
        self.tokens = _grown(self.tokens, 0, n)
        self.tokens[h.row, h.num_tokens:n] = ids
        h.num_tokens = n

    def _set_blocks(self, h: _Held, keep: int, ids: list) -> None:
        assert keep <= h.num_blocks, "the scheduler keeps only blocks the runner has"
        n = keep + len(ids)
        if ids:
            self.blocks = _grown(self.blocks, 0, n)
            self.blocks[h.row, keep:n] = ids
        if ids or n != h.num_blocks:
            self._tables_moved = True
        h.num_blocks = n

    # ---- the step ------------------------------------------------------------------------
    def prepare(self, out: SchedulerOutput) -> StepInput:
        """The step's flat arrays (step_input.StepInput) for the rows of `out`."""
        reqs = out.scheduled
        n_seqs = len(reqs)
        starts = np.fromiter(map(out.num_computed_tokens.__getitem__, [r.request_id for r in reqs]), np.int64,
                             n_seqs)
        plain = (n_seqs and out.total_num_scheduled_tokens == n_seqs and len(out.sample_req_ids) == n_seqs
                 and not (out.spec_token_ids or out.pooling_req_ids or out.trims or self._num_embedded))
        batch = self._advanced(out, starts) if plain else None
        self._tables_moved = False
        if batch is None:
            batch = self._gather(out, starts)
            if plain and self.kv_layout == "block":
                self._steps_in_block = self._steps_left(batch.positions)
        self._last, self._last_reqs = (batch, reqs) if plain else (None, None)
        return batch

    def _steps_left(self, positions: np.ndarray) -> int:
        """Plain steps after one at `positions` in which no row enters a new block."""
        return int((self.block_size - 1 - positions % self.block_size).min()) if len(positions) else 0

    def _advanced(self, out: SchedulerOutput, starts: np.ndarray) -> Optional[StepInput]:
        """A plain decode step over exactly the previous plain step's rows, in its order, each one
        token further: that step's index arrays, the positions advanced (None otherwise)."""
        last, last_reqs, reqs = self._last, self._last_reqs, out.scheduled
        if last is None or len(last_reqs) != len(reqs) or not all(map(is_, last_reqs, reqs)):
            return None
        positions = starts
        # a plain step's context_lens are its positions + 1: each row must start right there now
        # (count_nonzero, not .all(): a tiny batch's cost is numpy's per-call overhead)
        if np.count_nonzero(positions != last.context_lens):
            return None
        free = out.free_seq_ids
        batch = StepInput(
            token_ids=self.tokens[self._last_rows, positions], positions=positions, seq_of_token=last.seq_of_token,
            query_start=last.query_start, context_lens=last.context_lens + 1,
            sample_rows=last.sample_rows, req_ids=last.req_ids, sample_requests=last.sample_requests,
            pooling=last.pooling, kv_layout=self.kv_layout, block_size=self.block_size,
            free_seq_ids=np.asarray(free, np.int32) if free else _NO_SEQ_IDS,
            finished_req_ids=set(out.finished_req_ids))
        held = [self.held[rid] for rid in last.req_ids] if self._tables_moved else None
        if self.kv_layout == "slot":
            batch.seq_ids = last.seq_ids if held is None else np.fromiter((h.seq_id for h in held), np.int32, len(held))
            return batch
        batch.block_tables = last.block_tables if held is None else self._tables(held, self._last_rows)
        if held is None and self._steps_in_block > 0:  # no row enters a new block: each slot follows the last one
            self._steps_in_block -= 1
            batch.slot_mapping = last.slot_mapping + 1
            return batch
        bs = self.block_size
        blocks = batch.block_tables[last.seq_of_token, positions // bs].astype(np.int64)
        batch.slot_mapping = blocks * bs + positions % bs
        self._steps_in_block = self._steps_left(positions)
        return batch

    def _tables(self, held: list, rows: np.ndarray) -> np.ndarray:
        """[n_seqs, width] int32 the block tables of `held` (buffer rows `rows`), 0 past each one's."""
        num_blocks = np.fromiter((h.num_blocks for h in held), np.int64, len(held))
        width = int(num_blocks.max()) if len(held) else 0
        block_tables = self.blocks[rows, :width]  # [n_seqs, width] one gather
        block_tables[np.arange(width)[None, :] >= num_blocks[:, None]] = 0  # padding past a row's table
        return block_tables

    def _gather(self, out: SchedulerOutput, starts: np.ndarray) -> StepInput:
        """Any step: every array gathered from the buffers."""
        reqs = out.scheduled
        n_seqs = len(reqs)
        held = [self.held[r.request_id] for r in reqs]
        rows = np.fromiter((h.row for h in held), np.int64, n_seqs)  # [n_seqs] buffer row of each row
        self._last_rows = rows
        q_lens = np.fromiter((out.num_scheduled_tokens[r.request_id] for r in reqs), np.int64, n_seqs)
        query_start = np.zeros(n_seqs + 1, np.int32)
        np.cumsum(q_lens, out=query_start[1:])
        n_tokens = int(query_start[-1])
        seq_of_token = np.repeat(np.arange(n_seqs, dtype=np.int32), q_lens)
        # position of flat token t in row s: starts[s] + (t - query_start[s])
        positions = np.arange(n_tokens, dtype=np.int64) + np.repeat(starts - query_start[:-1], q_lens)
        spec = out.spec_token_ids  # req_id -> drafts: written after the row's known ids
        for rid, drafts in spec.items():
            h = self.held[rid]
            self.tokens = _grown(self.tokens, 0, h.num_tokens + len(drafts))
            self.tokens[h.row, h.num_tokens:h.num_tokens + len(drafts)] = drafts
        token_rows = rows[seq_of_token]
        token_ids = self.tokens[token_rows, positions]  # [n_tokens] one gather
        is_sampled = np.fromiter((r.request_id in out.sample_req_ids for r in reqs), bool, n_seqs)
        sample_rows = (query_start[1:][is_sampled] - 1).astype(np.int32)
        sample_requests = [h.request for h, s in zip(held, is_sampled.tolist()) if s]
        sample_offsets = None
        if spec:  # a row verifying k drafts samples its last k + 1 tokens
            n_draws = np.fromiter((len(spec.get(r.request_id, ())) + 1 for r in sample_requests), np.int64,
                                  len(sample_requests))
            ends = np.repeat(sample_rows.astype(np.int64) + 1, n_draws)
            first = np.repeat(np.cumsum(n_draws) - n_draws, n_draws)
            sample_offsets = (np.arange(int(n_draws.sum())) - first).astype(np.int32)  # [n_sample] 0..k per row
            sample_rows = (ends - n_draws.repeat(n_draws) + sample_offsets).astype(np.int32)
            sample_requests = [r for r, m in zip(sample_requests, n_draws.tolist()) for _ in range(m)]
        batch = StepInput(
            token_ids=token_ids, positions=positions, seq_of_token=seq_of_token, query_start=query_start,
            context_lens=(starts + q_lens).astype(np.int32), sample_rows=sample_rows, sample_offsets=sample_offsets,
            spec={r.request_id: r for r in reqs if r.request_id in spec}, trims=list(out.trims),
            want_logits=any(r.spec_probs is not None for r in reqs if r.request_id in spec),
            req_ids=[r.request_id for r in reqs], sample_requests=sample_requests,
            pooling=np.fromiter((r.request_id in out.pooling_req_ids for r in reqs), bool, n_seqs),
            kv_layout=self.kv_layout, block_size=self.block_size,
            free_seq_ids=np.asarray(out.free_seq_ids, np.int32), finished_req_ids=set(out.finished_req_ids))
        if any(h.embeds is not None for h in held):
            batch.embed_rows, batch.embeds = _embedded(held, query_start, starts, q_lens)
        if self.kv_layout == "slot":
            batch.seq_ids = np.fromiter((h.seq_id for h in held), np.int32, n_seqs)
            return batch
        block_tables = self._tables(held, rows)
        bs = self.block_size
        batch.block_tables = block_tables
        batch.slot_mapping = block_tables[seq_of_token, positions // bs].astype(np.int64) * bs + positions % bs
        return batch


def _embedded(held: list, query_start: np.ndarray, starts: np.ndarray, q_lens: np.ndarray) -> tuple:
    """(embed_rows [n_embed] int32, embeds [n_embed, hidden] f32): the step's tokens whose
    position falls in their request's embedded prompt, and those rows (a loop over rows, not
    tokens: each row's embedded tokens are one leading run of its chunk)."""
    rows, parts = [], []
    for s, h in enumerate(held):
        if h.embeds is None:
            continue
        p0, p1 = int(starts[s]), min(int(starts[s] + q_lens[s]), h.embeds.shape[0])
        if p1 > p0:
            t0 = int(query_start[s])
            rows.append(np.arange(t0, t0 + p1 - p0, dtype=np.int32))
            parts.append(h.embeds[p0:p1])
    if not rows:
        return None, None
    return np.concatenate(rows), np.concatenate(parts)
