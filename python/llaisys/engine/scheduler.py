"""Scheduler: each step, how many tokens of which requests to compute (vLLM v1 style).

There is no prefill phase and decode phase, only computed vs. known tokens. One token
budget per step (``max_num_batched_tokens``) is spent first on the running requests in
admission order (a decode token, or the next chunk of an unfinished prefill), then on
waiting requests in arrival order (``max_num_seqs`` caps the running set). While a running
request is served, one token per running request after it is kept back, so a long prefill
never stalls a decode. When the pool runs out of blocks the most recently admitted running
request is preempted: its blocks are freed and it goes back to the front of the queue, to be
recomputed from prompt + output so far (its sampled tokens stay).

Steps are also sized in time: while a request decodes (or more than one request is runnable),
prefill chunks are cut so the step takes about ``config.decode_gap_ms``, by a cost model fitted
to the steps that ran (``step_cost.StepCost``, which the engine feeds). A long prompt then
arrives beside a stream as several short steps, each carrying the stream's next token, instead
of one step of ``max_num_batched_tokens`` that holds the stream for seconds.

With ``config.async_scheduling`` a step may be planned while the one before it computes
(vLLM's async scheduling): each scheduled request then counts the tokens the steps in flight
compute (``num_inflight_tokens``) as computed and the tokens they sample (``num_pending_tokens``)
as known, so a decoding request's next row is the token still being sampled; the runner takes
that token from the step in flight (``SchedulerOutput.deferred_req_ids``). A request whose
pending token is its last (max_tokens) is not scheduled again; one that the pending token ends
otherwise (eos, a stop string) has one row computed for nothing, which update_from_output drops.
Without the flag both counters stay 0.

Pooling (embedding) requests are scheduled exactly like generation: they spend the same
budget, are chunked, hold blocks and are preempted the same way. Every token of their chunks
is a hidden-state row of the step (``pooling_req_ids``); they never sample and finish when the
last prompt token is computed. They publish their full prompt blocks to the prefix cache but
take no hits from it (every token's hidden state is needed).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from itertools import repeat
from typing import Callable, Optional

from .config import EngineConfig
from .kv_cache_manager import KVCacheManager
from .pooling_params import pooled_vector
from .request import Request, RequestStatus
from .sched_output import NewRequestData, SchedulerOutput
from .sched_spec import advance_spec, drafts_fitting
from .step_cost import StepCost

log = logging.getLogger(__name__)

_RUNNING = RequestStatus.RUNNING


def _uncomputed(req: Request) -> int:
    """Known tokens whose K/V neither the cache nor a step in flight holds (1: it decodes)."""
    return len(req.all_token_ids) + req.num_pending_tokens - req.num_computed_tokens - req.num_inflight_tokens


def _ends_with_pending(req: Request) -> bool:
    """The tokens a step in flight samples reach max_tokens: the request ends with them."""
    return len(req.output_token_ids) + req.num_pending_tokens >= req.max_tokens


class Scheduler:
    def __init__(self, config: EngineConfig, clock: Callable[[], float] = time.monotonic,
                 step_cost: Optional[StepCost] = None, propose: Optional[Callable[[list], None]] = None):
        # propose(running): the runner sets the running requests' drafts (spec_token_ids) for the
        # step being planned (speculative decoding; None: no drafts)
        self.propose = propose
        self.config = config
        self.step_cost = step_cost  # StepCost the engine feeds with measured steps (None: token budget only)
        self._time_left: Optional[float] = None  # seconds of prefill this schedule() may still add (None: no cap)
        self.clock = clock
        self.kv = KVCacheManager(config.num_blocks, config.block_size, config.enable_prefix_caching,
                                 config.kv_layout)
        self.waiting: deque = deque()  # [Request] WAITING or PREEMPTED, front first
        self.running: list = []  # [Request] RUNNING, in admission order (the last is preempted first)
        self.requests: dict = {}  # req_id -> unfinished Request
        self._finished_ids: set = set()  # finished since the last schedule()
        self.num_preemptions = 0  # preemptions since start-up

    # ---- admission -----------------------------------------------------------------------
    def add_request(self, req: Request) -> None:
        if req.request_id in self.requests:
            raise ValueError(f"request id {req.request_id!r} is already in use")
        self.requests[req.request_id] = req
        self.waiting.append(req)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    @property
    def num_preempted_waiting(self) -> int:
        return sum(1 for r in self.waiting if r.status == RequestStatus.PREEMPTED)

    # ---- one step ------------------------------------------------------------------------
    def schedule(self) -> SchedulerOutput:
        if self.propose is not None:
            self.propose(self.running)
        out = SchedulerOutput(finished_req_ids=self._finished_ids)
        self._finished_ids = set()
        self._time_left = self._prefill_seconds()
        budget = self._schedule_running(out, self.config.max_num_batched_tokens)
        if not out.preempted_req_ids:  # out of blocks: admit nothing new this step
            self._schedule_waiting(out, budget)
        out.free_seq_ids = self.kv.take_released_seq_ids()
        out.trims = self.kv.take_trims()
        if self.config.async_scheduling:  # what this step computes and samples is in flight until applied
            for req in out.scheduled:
                req.num_inflight_tokens += out.num_scheduled_tokens[req.request_id]
                req.num_pending_tokens += req.request_id in out.sample_req_ids
        return out

    def _prefill_seconds(self) -> Optional[float]:
        """Seconds of prefill this step may carry: the time target less the step's fixed part
        and its decode rows, when a request decodes or more than one is runnable; else None
        (also when no row can be a prefill chunk, since only _chunk's prefill chunks read it)."""
        cost, target = self.step_cost, self.config.decode_gap_ms / 1e3
        if cost is None or target <= 0:
            return None
        ahead = self.config.async_scheduling  # (the counters are 0 without it: not read, this is hot)
        if not self.waiting:  # no prompt waiting and every running row decodes: no chunk to cut
            for r in self.running:
                if (_uncomputed(r) if ahead else len(r.all_token_ids) - r.num_computed_tokens) != 1:
                    break
            else:
                return None
        tokens = pairs = 0  # of the decode rows
        for r in self.running:
            start = r.num_computed_tokens + r.num_inflight_tokens
            if _uncomputed(r) == 1:
                n = 1 + len(r.spec_token_ids)
                tokens += n
                pairs += n * start + n * (n + 1) // 2  # attention_pairs(n, start), inlined (hot)
        if not tokens and len(self.running) + len(self.waiting) < 2:
            return None  # one prompt alone: its chunks take the whole token budget
        return target - cost.seconds(tokens, pairs)  # less the fixed part and the decode rows

    def _chunk(self, req: Request, num_computed: int, budget: int) -> int:
        n = req.num_tokens + req.num_pending_tokens - num_computed
        if self.config.long_prefill_token_threshold:
            n = min(n, self.config.long_prefill_token_threshold)
        n = min(n, budget)
        if n > 1 and self._time_left is not None:  # a prefill chunk, cut to the time this step has left
            n = self.step_cost.chunk_tokens(self._time_left, num_computed, n)
            self._time_left -= self.step_cost.row_seconds(n, num_computed)
        return n

    def _add_row(self, out: SchedulerOutput, req: Request, n: int, drafts: Optional[list] = None) -> None:
        rid = req.request_id
        computed = req.num_computed_tokens + req.num_inflight_tokens
        out.scheduled.append(req)
        out.num_scheduled_tokens[rid] = n
        out.num_computed_tokens[rid] = computed
        if drafts:
            out.spec_token_ids[rid] = drafts
            n -= len(drafts)
        if req.pooling_params is not None:
            out.pooling_req_ids.add(rid)
        elif computed + n == len(req.all_token_ids) + req.num_pending_tokens:
            out.sample_req_ids.add(rid)
        if req.num_pending_tokens:  # its first token is sampled by the step in flight
            out.deferred_req_ids.add(rid)
        out.total_num_scheduled_tokens += n
        if req.times.first_scheduled is None:
            req.times.first_scheduled = self.clock()
        self._send(out, req)

    def _send(self, out: SchedulerOutput, req: Request) -> None:
        """What the runner learns of a scheduled request: all of it the first time, after that
        the tokens and blocks it gained since it was last scheduled (sched_output.py)."""
        rid = req.request_id
        table = self.kv.tables.get(rid, ()) if self.kv.layout == "block" else ()
        known = req.all_token_ids
        if req.runner_tokens < 0:
            out.new_reqs.append(NewRequestData(rid, req, list(known), list(table), req.slot_seq_id))
        else:
            keep = min(req.runner_blocks, len(table))
            out.cached_reqs.add(rid, bool(out.resumed_req_ids) and rid in out.resumed_req_ids,
                                known[req.runner_tokens:], keep, table[keep:] if table else [], req.slot_seq_id)
        req.runner_tokens, req.runner_blocks = len(known), len(table)

    def _decode_rows(self, out: SchedulerOutput, i: int, budget: int) -> int:
        """From running row i on, the decode rows (one token, no drafts) of generating requests
        the runner holds whose tables already cover their token, up to the first other row:
        what allocate_slots, _add_row and _send do for each, without their choices, in one loop
        (the common rows of a step). How many it scheduled."""
        running, kv, c = self.running, self.kv, out.cached_reqs
        tables, bs, block, slot = kv.tables, kv.block_size, kv.layout == "block", kv.layout == "slot"
        scheduled, n_sched, n_comp, sample = out.scheduled, out.num_scheduled_tokens, out.num_computed_tokens, \
            out.sample_req_ids
        j, n_run, ahead = i, len(running), self.config.async_scheduling
        pending = 0
        while j < n_run:
            req = running[j]
            known, computed, rid = req.all_token_ids, req.num_computed_tokens, req.request_id
            if ahead:  # (the counters are 0 without it: not read, this is the hottest loop)
                computed += req.num_inflight_tokens
                pending = req.num_pending_tokens
            table = tables.get(rid)
            # the reserve of _schedule_running: one token for each running row after this one
            if (len(known) + pending - computed != 1 or budget <= n_run - j - 1 or req.runner_tokens < 0
                    or not table or len(table) * bs <= computed or req.spec_token_ids or req.spec_probs is not None
                    or req.pooling_params is not None or (slot and req.slot_seq_id is None)
                    or (pending and _ends_with_pending(req))):
                break
            scheduled.append(req)
            n_sched[rid] = 1
            n_comp[rid] = computed
            sample.add(rid)  # its one token is its last known one
            if pending:  # that token is sampled by the step in flight
                out.deferred_req_ids.add(rid)
            if not block:
                table = ()
            keep = min(req.runner_blocks, len(table))  # a running row is never a resumed one
            c.add(rid, False, known[req.runner_tokens:], keep, table[keep:] if table else [], req.slot_seq_id)
            req.runner_tokens, req.runner_blocks = len(known), len(table)
            budget -= 1
            j += 1
        out.total_num_scheduled_tokens += j - i
        return j - i

    def _schedule_running(self, out: SchedulerOutput, budget: int) -> int:
        i = 0
        while i < len(self.running):
            took = self._decode_rows(out, i, budget)  # the common rows, all done
            budget -= took
            i += took
            if i == len(self.running):
                break
            req = self.running[i]
            if req.num_pending_tokens and _ends_with_pending(req):
                i += 1  # the token in flight is its last: nothing more to compute
                continue
            # keep one token for each running request after this one (budget >= len(running) - i holds)
            reserve = len(self.running) - i - 1
            if _uncomputed(req) == 1 and budget > reserve:
                n = 1  # a decode row (what _chunk gives it)
            else:
                n = self._chunk(req, req.num_computed_tokens + req.num_inflight_tokens, budget - reserve)
            assert n >= 1, "a running request must get a token (max_num_batched_tokens >= max_num_seqs)"
            k = drafts_fitting(req, n, budget - reserve) if req.spec_token_ids else 0
            if k and self.kv.allocate_slots(req, n + k):  # never preempts: drafts only use free room
                self._add_row(out, req, n + k, req.spec_token_ids[:k])
                budget -= n + k
                i += 1
                continue
            if req.spec_token_ids or req.spec_probs is not None:
                req.spec_token_ids, req.spec_probs = [], None
            while not self.kv.allocate_slots(req, req.num_inflight_tokens + n):
                victim = self.running.pop()
                self._preempt(victim, out)
                if victim is req:
                    return budget
            self._add_row(out, req, n)
            budget -= n
            i += 1
        return budget

    def _schedule_waiting(self, out: SchedulerOutput, budget: int) -> None:
        held_back = []  # siblings waiting for their leader's prompt blocks
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            req = self.waiting.popleft()
            if self._waits_for_leader(req):
                held_back.append(req)
                continue
            computed = self.kv.get_computed_blocks(req)
            n = self._chunk(req, computed.num_tokens, budget)
            if not self.kv.allocate_slots(req, n, computed):
                self.waiting.appendleft(req)  # first come, first served: nobody overtakes it
                break
            resumed = req.status == RequestStatus.PREEMPTED
            req.set_status(RequestStatus.RUNNING)
            req.num_computed_tokens = computed.num_tokens
            if req.num_cached_tokens < 0:
                req.num_cached_tokens = computed.num_tokens
            self.running.append(req)
            (out.resumed_req_ids if resumed else out.new_req_ids).append(req.request_id)
            self._add_row(out, req, n)
            budget -= n
        self.waiting.extendleft(reversed(held_back))

    def _waits_for_leader(self, req: Request) -> bool:
        """An n > 1 sibling is admitted once its leader has computed the prompt, so the prompt's
        full blocks are shared from the prefix cache instead of computed n times."""
        lead = req.leader
        if lead is None:
            return False
        if lead.is_finished or lead.num_computed_tokens >= lead.num_prompt_tokens:
            req.leader = None
            return False
        return True

    def _preempt(self, req: Request, out: SchedulerOutput) -> None:
        self.kv.free(req)
        req.runner_blocks = 0  # its table is gone; the runner keeps its tokens
        # a step in flight may still compute it: update_from_output drops that row (not RUNNING)
        req.num_inflight_tokens = req.num_pending_tokens = 0
        req.spec_token_ids, req.spec_probs = [], None
        req.set_status(RequestStatus.PREEMPTED)
        req.num_computed_tokens = 0
        req.hidden_sum = None  # pooling: its rows are computed (and summed) again
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)
        out.preempted_req_ids.append(req.request_id)

    # ---- after the step ------------------------------------------------------------------
    def update_from_output(self, out: SchedulerOutput, sampled: dict, logprobs: Optional[dict] = None,
                           pooled: Optional[dict] = None) -> list:
        """Advance the scheduled requests by the tokens just computed and append what was
        sampled (``sampled``: req_id -> [token ids]; ``logprobs``: req_id -> [{id: logprob}];
        ``pooled``: pooling req_id -> [hidden] f64 sum of its chunk's hidden states).
        Requests that hit a token-level stop (Request.append_token), and pooling requests whose
        prompt is computed, are finished and their blocks freed. Returns the requests that got tokens or finished."""
        touched = []
        now = self.clock()
        in_flight = self.config.async_scheduling
        for req in out.scheduled:
            if req.status != _RUNNING:  # aborted while the step ran (or failed in it); async
                continue  # scheduling: ended by the step before, or preempted since this one started
            if in_flight:
                req.num_inflight_tokens -= out.num_scheduled_tokens[req.request_id]
                req.num_pending_tokens -= req.request_id in out.sample_req_ids
            try:
                if self._advance(req, out, sampled, logprobs, pooled, now):
                    touched.append(req)
            except Exception as e:  # this request's output broke: it alone ends, with "error"
                log.exception("request %s failed after the step", req.request_id)
                if not req.is_finished:
                    self.finish(req, RequestStatus.FINISHED_ERROR, f"{type(e).__name__}: {e}")
                touched.append(req)
        return touched

    def _advance(self, req: Request, out: SchedulerOutput, sampled: dict, logprobs: Optional[dict],
                 pooled: Optional[dict], now: float) -> bool:
        """Apply the step to one request; True if it got tokens or finished."""
        rid = req.request_id
        if rid in out.spec_token_ids:
            return advance_spec(self, req, out, sampled, logprobs, now)
        req.num_computed_tokens += out.num_scheduled_tokens[rid]
        self.kv.cache_blocks(req)
        if req.pooling_params is not None:
            return self._pool(req, (pooled or {}).get(rid))
        tokens = sampled.get(rid) if rid in out.sample_req_ids else None
        if not tokens:
            return False  # a middle prefill chunk: nothing sampled
        lps = logprobs.get(rid) if logprobs else None
        for tok, lp in zip(tokens, lps or repeat(None)):
            status = req.append_token(int(tok), lp, now)
            if status is not None:
                self.finish(req, status, req.error)  # the request's reason (a grammar failure) is kept
                break
        return True

    def _pool(self, req: Request, chunk_sum) -> bool:
        """Add a pooling request's chunk (``chunk_sum`` [hidden] f64); finish it with its vector
        once its prompt is computed. True if it finished."""
        if chunk_sum is None:  # the runner skipped this row: the pooled vector would be wrong
            raise RuntimeError("the step returned no hidden states for this pooling request")
        req.hidden_sum = chunk_sum if req.hidden_sum is None else req.hidden_sum + chunk_sum
        if req.num_computed_tokens < req.num_prompt_tokens:
            return False  # a middle chunk
        req.embedding = pooled_vector(req.hidden_sum, req.num_prompt_tokens, req.pooling_params.normalize)
        self.finish(req, RequestStatus.FINISHED_STOPPED)
        return True

    def finish(self, req: Request, status: RequestStatus, error: Optional[str] = None) -> None:
        """End a request in any unfinished state: leave the queues, free its blocks."""
        if req.status == RequestStatus.RUNNING:
            self.running.remove(req)
        else:
            self.waiting.remove(req)
        req.set_status(status)
        req.error = error
        req.times.finished = self.clock()
        self.kv.free(req)
        self._finished_ids.add(req.request_id)
        del self.requests[req.request_id]

    def stop(self, req: Request, status: RequestStatus, error: Optional[str] = None) -> None:
        """Finish a request the output processor ended (a stop string, or its text broke); one
        the step already finished on length or a grammar's end takes the stop string's reason."""
        if not req.is_finished:
            self.finish(req, status, error)
        elif status == RequestStatus.FINISHED_STOPPED and req.status == RequestStatus.FINISHED_LENGTH:
            req.status = status  # the text ended before the length did (vLLM: the stop string wins)

    def abort(self, request_id: str, status: RequestStatus = RequestStatus.FINISHED_ABORTED,
              error: Optional[str] = None) -> Optional[Request]:
        """Finish an unfinished request (waiting, running, preempted); None (a no-op) when the
        id is unknown or already finished."""
        req = self.requests.get(request_id)
        if req is not None:
            self.finish(req, status, error)
        return req
