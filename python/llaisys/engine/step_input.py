"""StepInput: the flat step contract between the engine and the model runner.

One StepInput is one call into the core (llaisysModelStep): the scheduled tokens of
every sequence, flattened, with the index arrays the core needs, built with numpy.
Shapes follow include/llaisys/models/model.h (llaisysBatch_t).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Callable, Optional, Sequence

import numpy as np

from ..models.step_io import StepResult  # the one step result (re-exported)


@dataclass
class StepInput:
    """A flat batch of n_tokens tokens in n_seqs rows (one row per scheduled sequence)."""

    token_ids: np.ndarray  # [n_tokens] int64 ids to compute
    positions: np.ndarray  # [n_tokens] int64 logical position of each token
    seq_of_token: np.ndarray  # [n_tokens] int32 row of each token
    query_start: np.ndarray  # [n_seqs + 1] int32 token range of each row; [0] = 0, [-1] = n_tokens
    context_lens: np.ndarray  # [n_seqs] int32 KV length of each row after this step
    sample_rows: np.ndarray  # [n_sample] int32 flat token indices whose logits are sampled
    req_ids: list  # [n_seqs] request id of each row
    sample_requests: list  # [n_sample] Request of each sample row (its sampling params, seed,
    #                        prompt/output ids, logit_bias_at(step))
    pooling: np.ndarray  # [n_seqs] bool rows of pooling requests: every token's final hidden state is
    #                      wanted (hidden_rows), nothing is sampled for them
    kv_layout: str  # "block" or "slot"
    block_size: int  # token slots per block
    # BLOCK layout (None for SLOT)
    slot_mapping: Optional[np.ndarray] = None  # [n_tokens] int64 block * block_size + offset to write K/V
    block_tables: Optional[np.ndarray] = None  # [n_seqs, max_blocks] int32 blocks of each row; padding 0, never read
    # SLOT layout (None for BLOCK)
    seq_ids: Optional[np.ndarray] = None  # [n_seqs] int32 the core's seq id of each row
    free_seq_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # [n_free] int32
    #   SLOT: seq ids released since the previous step; clear them (seq_rm) before computing
    finished_req_ids: set = field(default_factory=set)  # requests gone since the previous step
    # True when the batch recomputes tokens that a failed attempt of the same step may already
    # have placed (LLMEngine's failure isolation). BLOCK: nothing to do, the same slots are
    # written again. SLOT: drop each row's cells from its first position here on
    # (seq_rm(seq, positions[query_start[s]], -1)) before computing.
    rewind: bool = False
    # speculative decoding: a speculating row samples its last known token and every draft
    sample_offsets: Optional[np.ndarray] = None  # [n_sample] int32 draws ahead of the request's next
    #   one (0 for every plain row; 0..k for the k + 1 sample rows of a row verifying k drafts)
    spec: dict = field(default_factory=dict)  # req_id -> Request whose drafts (spec_token_ids,
    #   spec_probs) this step verifies
    trims: list = field(default_factory=list)  # SLOT: (seq id, position) drop the seq's cells from
    #   position on before computing (rejected drafts of the previous step)
    want_logits: bool = False  # the runner returns the sample rows' raw logits (a sampled draft's p)
    # prompts given as input embeddings: these tokens enter as the given rows, not by their id
    embed_rows: Optional[np.ndarray] = None  # [n_embed] int32 flat token indices, increasing; None: none
    embeds: Optional[np.ndarray] = None  # [n_embed, hidden] f32 the rows of those tokens
    # [n_sample] int64 the output draw each sample row makes (its request's num_output_tokens when
    # the step started, plus its sample offset, plus 1 when a step in flight samples first),
    # taken on the engine's thread: the seed's step, min_tokens (StepRunner.start sets it)
    sample_steps: Optional[np.ndarray] = None
    # the runner's own form of the sample rows, made on the engine's thread before the call
    # (ModelRunner.prepare; None: execute makes it)
    prepared: object = None
    # [(sample row, fill(token id))]: what the prepared rows read that the token a step in flight
    # samples for that row decides (the penalties' last output id, a grammar's mask), made by
    # fill with that token before the call (model_runner.row_sampling)
    awaiting: list = field(default_factory=list)

    @property
    def offsets(self) -> list:
        """[n_sample] sample_offsets as a list (all 0 without speculation)."""
        return [0] * self.n_sample if self.sample_offsets is None else self.sample_offsets.tolist()

    @property
    def n_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def n_seqs(self) -> int:
        return len(self.req_ids)

    @property
    def n_sample(self) -> int:
        return int(self.sample_rows.shape[0])

    @property
    def hidden_rows(self) -> np.ndarray:
        """[n_hidden] int32 flat token indices of the pooling rows' tokens, in order (row by row)."""
        return np.flatnonzero(self.pooling[self.seq_of_token]).astype(np.int32)

    @property
    def max_blocks(self) -> int:
        return 0 if self.block_tables is None else int(self.block_tables.shape[1])


_OUTPUT = attrgetter("output_token_ids")


def sample_steps(batch: StepInput, deferred: frozenset = frozenset()) -> np.ndarray:
    """[n_sample] int64 the output draw of each sample row (StepInput.sample_steps): its
    request's output count, plus its sample offset, plus 1 for the rows in `deferred` (a step in
    flight makes their draw before)."""
    reqs = batch.sample_requests
    steps = np.fromiter(map(len, map(_OUTPUT, reqs)), np.int64, len(reqs))
    if batch.sample_offsets is not None:
        steps += batch.sample_offsets
    if deferred:  # a step in flight makes one draw of these first
        if len(deferred) == len(reqs):  # every sample row (steady decoding)
            steps += 1
        else:
            steps += np.fromiter((r.request_id in deferred for r in reqs), bool, len(reqs))
    return steps


def select_rows(batch: StepInput, rows: Sequence[int], keep_frees: bool) -> StepInput:
    """The sub-batch of `batch` that computes only `rows` (ascending row indices) exactly as
    `batch` would: same tokens, positions, context, slots, seq ids and sample requests. It is
    marked ``rewind`` (it repeats tokens of a failed attempt). ``keep_frees``: carry the
    step's ``free_seq_ids`` and ``finished_req_ids``, which is safe only while no attempt of
    this step has succeeded (a freed seq id may already hold a new row's cells after that)."""
    rows = np.asarray(rows, np.int64)
    qs = batch.query_start.astype(np.int64)
    q_lens = (qs[1:] - qs[:-1])[rows]
    keep = np.zeros(batch.n_seqs, bool)
    keep[rows] = True
    tok_keep = keep[batch.seq_of_token]  # flat tokens of the kept rows, in order
    new_index = np.cumsum(tok_keep) - 1  # old flat index -> new flat index (for kept tokens)
    query_start = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(q_lens, out=query_start[1:])
    sample_keep = tok_keep[batch.sample_rows]
    kept_ids = {batch.req_ids[i] for i in rows.tolist()}
    sub = StepInput(
        token_ids=batch.token_ids[tok_keep], positions=batch.positions[tok_keep],
        seq_of_token=np.repeat(np.arange(len(rows), dtype=np.int32), q_lens), query_start=query_start,
        context_lens=batch.context_lens[rows], sample_rows=new_index[batch.sample_rows[sample_keep]].astype(np.int32),
        req_ids=[batch.req_ids[i] for i in rows.tolist()],
        sample_requests=[r for r, k in zip(batch.sample_requests, sample_keep.tolist()) if k],
        pooling=batch.pooling[rows], kv_layout=batch.kv_layout, block_size=batch.block_size,
        free_seq_ids=batch.free_seq_ids if keep_frees else np.zeros(0, np.int32),
        finished_req_ids=set(batch.finished_req_ids) if keep_frees else set(), rewind=True,
        sample_offsets=None if batch.sample_offsets is None else batch.sample_offsets[sample_keep],
        sample_steps=None if batch.sample_steps is None else batch.sample_steps[sample_keep],
        spec={rid: r for rid, r in batch.spec.items() if rid in kept_ids},
        trims=batch.trims if keep_frees else [], want_logits=batch.want_logits)
    if batch.embed_rows is not None:
        emb_keep = tok_keep[batch.embed_rows]
        if emb_keep.any():
            sub.embed_rows = new_index[batch.embed_rows[emb_keep]].astype(np.int32)
            sub.embeds = batch.embeds[emb_keep]
    if batch.kv_layout == "slot":
        sub.seq_ids = batch.seq_ids[rows]
    else:
        sub.block_tables = batch.block_tables[rows]
        sub.slot_mapping = batch.slot_mapping[tok_keep]
    return sub


def unpack_result(batch: StepInput, result: StepResult, verifier: Optional[Callable] = None) -> tuple:
    """(sampled, logprobs, pooled): req_id -> [token ids], req_id -> [{id: logprob}] (only for
    requests that asked for logprobs) and pooling req_id -> [hidden] f64 sum of the hidden
    states of its tokens in this step.

    A speculating row (``batch.spec``) has k + 1 sample rows; ``verifier(batch, result)`` makes
    the step's ``verify(req, ids [k + 1], logits [k + 1, vocab] or None)``, which gives the
    tokens the row emits (spec/verify.py), each with the logprobs of its position."""
    ids = np.asarray(result.token_ids).reshape(-1)
    if ids.shape[0] != batch.n_sample:
        raise RuntimeError(f"the runner returned {ids.shape[0]} sampled ids for {batch.n_sample} sample rows")
    pooled = _pooled_sums(batch, result.hidden)
    sampled, logprobs = {}, {}
    if not batch.spec:  # one sample row a request (no drafts to verify): the common step
        reqs = batch.sample_requests
        toks = ids.tolist() if ids.dtype.kind in "iu" else [int(t) for t in ids]
        sampled = {req.request_id: [t] for req, t in zip(reqs, toks)}
        for i in [i for i, req in enumerate(reqs) if req.sampling_params.logprobs is not None]:
            req = reqs[i]
            logprobs[req.request_id] = [_logprob_entry(req.sampling_params.logprobs, result, i, toks[i], ids)]
        return sampled, logprobs, pooled
    verify = verifier(batch, result) if verifier is not None else None
    i, reqs = 0, batch.sample_requests
    while i < len(reqs):
        req = reqs[i]
        rid = req.request_id
        n = len(req.spec_token_ids) + 1 if rid in batch.spec else 1  # this row's sample rows
        if n == 1:
            tokens = [int(ids[i])]
        else:
            if verify is None:
                raise RuntimeError("a speculating row needs a verifier")
            tokens = verify(req, ids[i:i + n], None if result.logits is None else result.logits[i:i + n])
        sampled[rid] = tokens
        if req.sampling_params.logprobs is not None:
            logprobs[rid] = [_logprob_entry(req.sampling_params.logprobs, result, i + j, t, ids)
                             for j, t in enumerate(tokens)]
        i += n
    return sampled, logprobs, pooled


def _logprob_entry(want: int, result: StepResult, row: int, token: int, ids: np.ndarray) -> dict:
    """{id: logprob} of sample row ``row``: its top ``want`` and the emitted ``token`` (which a
    sampled draft may make differ from the row's own draw: then from the row's raw logits)."""
    entry = {}
    if result.top_ids is not None and result.top_logprobs is not None and want:
        entry = dict(zip(result.top_ids[row, :want].tolist(), result.top_logprobs[row, :want].tolist()))
    if token == int(ids[row]) and result.logprobs is not None:
        entry[token] = float(result.logprobs[row])
    elif result.logits is not None:
        lg = result.logits[row].astype(np.float64)  # [vocab]
        mx = lg.max()
        entry[token] = float(lg[token] - mx - np.log(np.exp(lg - mx).sum()))
    return entry


def _pooled_sums(batch: StepInput, hidden: Optional[np.ndarray]) -> dict:
    """pooling req_id -> [hidden] f64 sum over its rows of ``hidden`` [n_hidden, H]."""
    if not np.count_nonzero(batch.pooling):  # no pooling row (the usual step; cheaper than flatnonzero)
        return {}
    rows = np.flatnonzero(batch.pooling)
    q_lens = np.diff(batch.query_start.astype(np.int64))[rows]  # tokens of each pooling row
    if hidden is None or hidden.ndim != 2 or hidden.shape[0] != int(q_lens.sum()):
        got = None if hidden is None else hidden.shape
        raise RuntimeError(f"the runner returned hidden states of shape {got} for {int(q_lens.sum())} pooling tokens")
    ends = np.cumsum(q_lens)
    return {batch.req_ids[s]: hidden[e - n:e].sum(axis=0, dtype=np.float64)
            for s, n, e in zip(rows.tolist(), q_lens.tolist(), ends.tolist())}
