"""CoreModelRunner: executes one StepInput with one call into the core (llaisysModelStep)."""

from __future__ import annotations

import functools
import operator
from typing import Optional

import numpy as np

from ..kv_cache import KVCache
from ..models.model import Model, RowSampling
from ..models.step_io import PackedSampling
from .executor import empty_result
from .input_batch import DEFERRED
from .request import Request
from .step_input import StepInput, StepResult, sample_steps


def row_sampling(req: Request, offset: int = 0, drafts=(), step: Optional[int] = None,
                 awaiting: Optional[list] = None, row: int = 0) -> RowSampling:
    """The core's sampling parameters for the next draw of `req`, or (speculative decoding)
    for the draw ``offset`` positions later, after the drafts ``drafts[:offset]``: exactly what
    a plain step would use there (step, penalties over the output with the drafts, min_tokens).
    Constrained requests never speculate, so their mask is always the next draw's. ``step``:
    the draw's index when the caller knows it (StepInput.sample_steps: async scheduling counts
    a draw still being made); by default num_output_tokens + offset. What that draw's token
    decides is then made before the call: the penalties' output ends with a DEFERRED slot, and a
    grammar's mask waits (Matcher.ahead); ``awaiting`` gets (``row``, fill(token id)) for each,
    which the step thread calls with the token (StepInput.awaiting)."""
    sp = req.sampling_params
    if step is None:
        step = req.num_output_tokens + offset
    penalties = sp.repetition_penalty != 1.0 or sp.presence_penalty != 0.0 or sp.frequency_penalty != 0.0
    output = req.output_token_ids if not offset else list(req.output_token_ids) + list(drafts[:offset])
    pending = step - req.num_output_tokens - offset  # draws a step in flight makes first (0 or 1)
    mask = None
    if pending > 0 and (penalties or req.structured is not None):
        if pending != 1 or awaiting is None:
            raise RuntimeError(f"a draw {pending} ahead of request {req.request_id}'s output cannot be made")
        if penalties:
            output = np.asarray(list(output) + [DEFERRED], np.int64)
            awaiting.append((row, functools.partial(output.__setitem__, -1)))
        if req.structured is not None:
            ahead = req.structured.ahead()
            mask = ahead.out
            awaiting.append((row, ahead.fill))
    elif req.structured is not None:
        mask = req.structured.mask()
    return RowSampling(
        temperature=sp.temperature, top_k=max(sp.top_k, 0), top_p=sp.top_p, min_p=sp.min_p,
        repetition_penalty=sp.repetition_penalty, presence_penalty=sp.presence_penalty,
        frequency_penalty=sp.frequency_penalty, seed=req.seed, step=step,
        n_logprobs=sp.logprobs or 0,
        # an embeddings prompt's ids are unknown: its penalties count the output only
        prompt_tokens=np.asarray(req.prompt_token_ids if req.prompt_embeds is None else [], np.int64)
        if penalties else None,
        output_tokens=np.asarray(output, np.int64) if penalties else None,
        logit_bias=req.logit_bias_at(step) or None,
        allowed_mask=mask)


# The draw of a pooling row in a step that also samples generation rows: plain greedy (the
# cheapest draw the core has; its id is ignored).
POOLING_ROW = RowSampling()


def _steady(req: Request) -> bool:
    """Whether the request's row_sampling (offset 0) changes only in ``step`` from now on: no
    penalties (they read the output), no grammar mask, min_tokens reached (the bias is fixed)."""
    sp = req.sampling_params
    return (sp.repetition_penalty == 1.0 and sp.presence_penalty == 0.0 and sp.frequency_penalty == 0.0
            and req.structured is None and len(req.output_token_ids) >= sp.min_tokens)


# what row_sampling reads of a request and its SamplingParams, besides the output (C-speed getters)
_REQ_KEY = operator.attrgetter("seed", "sampling_params", "structured")
_SP_KEY = operator.attrgetter("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                              "frequency_penalty", "logprobs", "min_tokens", "logit_bias", "stop_token_ids",
                              "ignore_eos")


class _Packed:
    """One kept set of packed rows (SamplingRows keeps two)."""

    def __init__(self, reqs: list, keys: list, steps: np.ndarray):
        self.reqs, self.keys = list(reqs), keys  # the Requests of the rows, in order; their parameters
        self.awaiting: list = []  # this packing's: SamplingRows.awaiting
        self.packed = PackedSampling([row_sampling(r, step=s, awaiting=self.awaiting, row=i)
                                      for i, (r, s) in enumerate(zip(reqs, steps.tolist()))])
        self.unsteady = [i for i, r in enumerate(reqs) if not _steady(r)]  # rows packed again each step
        self.wants_logprobs = any(r.sampling_params.logprobs is not None for r in reqs)


class SamplingRows:
    """The sampling rows of the steps before, kept packed (step_io.PackedSampling): while the sample
    rows are the same requests in the same order with the same parameters (steady decoding), a
    step writes only each row's ``step`` and re-packs only the rows that are not steady, instead
    of building and packing every row's parameters again. The parameters are compared each step
    (a request's SamplingParams changed inside the engine must reach the core, which refuses a
    bad one: failure isolation, test_real_model_failures.py).

    Two sets are kept and used in turn: with async scheduling a step is packed while the one
    before it still computes from its own set."""

    def __init__(self):
        self._sets: list = [None, None]  # [_Packed or None] used in turn
        self._turn = 0
        self.wants_logprobs = False  # any row of the last pack asked for logprobs
        self.awaiting: list = []  # the last pack's (row, fill) (row_sampling's awaiting)

    def pack(self, reqs: list, steps: np.ndarray) -> PackedSampling:
        """The rows of `reqs` packed as row_sampling gives them for draws `steps` [n] (the rows'
        StepInput.sample_steps)."""
        self._turn ^= 1
        kept = self._sets[self._turn]
        keys = list(map(_REQ_KEY, reqs))
        keys += list(map(_SP_KEY, [k[1] for k in keys]))
        if (kept is None or len(reqs) != len(kept.reqs) or not all(map(operator.is_, reqs, kept.reqs))
                or keys != kept.keys):
            kept = self._sets[self._turn] = _Packed(reqs, keys, steps)
            self.awaiting = kept.awaiting
        else:
            p, self.awaiting = kept.packed, []
            for i in kept.unsteady:
                p.refill(i, row_sampling(reqs[i], step=int(steps[i]), awaiting=self.awaiting, row=i))
            p.steps[:] = steps
        self.wants_logprobs = kept.wants_logprobs
        return kept.packed


def _head(a: Optional[np.ndarray], n: int) -> Optional[np.ndarray]:
    """The first n rows of a per-sample-row array (the generation rows), or None."""
    return None if a is None else a[:n]


class CoreModelRunner:
    """Owns nothing but references: the Worker owns the model and the cache."""

    supports_speculation = True  # sample rows may list every token of a row (speculative verification)

    def __init__(self, model: Model, cache: KVCache):
        self.model = model
        self.cache = cache
        self.sampling_rows = SamplingRows()  # the previous step's sampling rows, kept packed

    @property
    def vocab_size(self) -> int:
        """The logits width: rows of the lm_head (config vocab_size), the bound the core checks
        every token id against. It may exceed the tokenizer's vocabulary (padding rows)."""
        return int(self.model.config.vocab_size)

    @property
    def hidden_size(self) -> int:
        """The width of a prompt's input embedding rows (prompt_embeds)."""
        return int(self.model.config.hidden_size)

    def memory_stats(self):
        """The model's memory (models.model.ModelStatsInfo: weights, step workspace, the
        device's kernel scratch and cuBLAS workspaces); host counters only, no device call."""
        return self.model.stats()

    def prepare(self, batch: StepInput) -> None:
        """Make the step's core arguments (batch.prepared: its sampling rows from its requests, the
        C structs, the result arrays) on the engine's thread, before the call: with async
        scheduling the requests change while a step computes, and the step thread then runs
        little Python between two calls. batch.token_ids becomes the array the call reads."""
        if batch.n_tokens == 0:
            return
        hidden_rows = batch.hidden_rows  # [n_hidden] pooling tokens
        reqs = batch.sample_requests
        steps = batch.sample_steps if batch.sample_steps is not None else sample_steps(batch)
        if reqs and batch.sample_offsets is None and not len(hidden_rows):  # the common step: kept packed
            sampling = self.sampling_rows.pack(reqs, steps)
            top, wants_logprobs = sampling.top, self.sampling_rows.wants_logprobs
            batch.awaiting = self.sampling_rows.awaiting
        else:
            batch.awaiting = []
            rows = [row_sampling(r, o, r.spec_token_ids, step=s, awaiting=batch.awaiting, row=i)
                    for i, (r, o, s) in enumerate(zip(reqs, batch.offsets, steps.tolist()))]
            # One call for both kinds: the core's sample rows are the generation rows' last tokens,
            # then every pooling token ([n_sample + n_hidden]). The core samples all sample rows or
            # none (params NULL), so a step that also samples gives the pooling rows a plain greedy
            # draw whose id is dropped (it costs their lm_head rows; doc/engine.md has the figure).
            sampling = rows + [POOLING_ROW] * len(hidden_rows) if rows else None
            top = max((r.n_logprobs for r in rows), default=0)
            wants_logprobs = any(r.sampling_params.logprobs is not None for r in reqs)
        core_rows = np.concatenate([batch.sample_rows, hidden_rows]) if len(hidden_rows) else batch.sample_rows
        layout = dict(slot_mapping=batch.slot_mapping, block_tables=batch.block_tables,
                      context_lens=batch.context_lens) if batch.kv_layout == "block" else dict(seq_ids=batch.seq_ids)
        step = self.model.prepare_step(
            self.cache, token_ids=batch.token_ids, positions=batch.positions, query_start=batch.query_start,
            sample_rows=core_rows, sampling=sampling, top_capacity=top, want_logprobs=wants_logprobs,
            want_hidden=len(hidden_rows) > 0, want_logits=batch.want_logits, embed_rows=batch.embed_rows,
            embeds=batch.embeds, **layout)
        batch.token_ids = step.token_ids
        batch.prepared = (step, sampling is not None)

    def execute(self, batch: StepInput) -> StepResult:
        if batch.kv_layout == "slot":
            for seq in batch.free_seq_ids:
                self.cache.seq_rm(int(seq))
            for seq, p0 in batch.trims:  # rejected draft positions (speculative decoding)
                self.cache.seq_rm(int(seq), int(p0), -1)
            if batch.rewind:  # a failed attempt may have placed these rows' cells already
                starts = batch.positions[batch.query_start[:-1]]
                for seq, p0 in zip(batch.seq_ids.tolist(), starts.tolist()):
                    self.cache.seq_rm(int(seq), int(p0), -1)
        if batch.n_tokens == 0:
            return empty_result()
        if batch.prepared is None:  # a batch the StepRunner did not prepare (a failure search's part)
            self.prepare(batch)
        step, sampled = batch.prepared
        res = self.model.run_step(step)
        if res is None:  # the scheduler's accounting should make this impossible
            raise RuntimeError("the KV cache ran out of cells for a step the scheduler admitted")
        if not sampled:
            return StepResult(token_ids=np.zeros(0, np.int64), hidden=res.hidden)
        n_sample = batch.n_sample
        return StepResult(token_ids=res.token_ids[:n_sample], logprobs=_head(res.logprobs, n_sample),
                          top_ids=_head(res.top_ids, n_sample), top_logprobs=_head(res.top_logprobs, n_sample),
                          hidden=None if res.hidden is None else res.hidden[n_sample:],
                          logits=_head(res.logits, n_sample))
