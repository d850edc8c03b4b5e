"""StepRunner: the runner side of the SchedulerOutput contract.

The engine hands it one SchedulerOutput a step and gets back the tokens each row emits:

    SchedulerOutput (deltas) -> InputBatch.update -> InputBatch.prepare -> StepInput
        -> ModelRunner.execute (one core call) -> StepResult -> RunnerOutput

It keeps every request's state between steps (input_batch.InputBatch), runs the step on the
ModelRunner (executor.py: the core, or a test's fake), and owns speculative decoding: the
drafts (``propose``, which the scheduler calls before it plans a step, since drafts take
budget and blocks), their verification, and the proposer's per-request state. The engine
and the scheduler see accepted tokens only. When the step fails as a whole it finds the
failing rows (``_isolate``) and reports them in ``RunnerOutput.failed``; a fatal error (the
device is lost) is raised instead, without a retry.

A step is ``start`` then ``finish``: ``start`` applies the deltas and prepares the arrays, and
the core call runs at once, or, with a device thread (``overlap``: LLMEngine's overlapped step,
doc/engine.md "Overlapped output processing"), on that thread while the caller goes on;
``finish`` waits for it and turns its result into tokens.

With async scheduling a step may start while the one before it still computes (``start``'s
``after``). Its deferred rows (SchedulerOutput.deferred_req_ids) compute the token that step
samples: the device thread copies those ids from that step's result into this step's ids just
before the call, so the two calls run back to back. If that step failed, this one is not run
there (``_Skipped``); ``finish`` runs it once the failure search has said which rows survived.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from .device_thread import DeviceThread
from .input_batch import DEFERRED, InputBatch
from .sched_output import SchedulerOutput
from .step_cost import StepCost, attention_pairs
from .step_input import StepInput, sample_steps, select_rows, unpack_result

log = logging.getLogger(__name__)


def isolation_budget(n_rows: int) -> int:
    """Most extra runner calls a failed step of n_rows rows may spend finding its failing rows:
    bisection isolates one bad row in 2 * ceil(log2 n) calls, this allows two. A failure that
    is not the rows' fault (every half fails) ends the search when the budget is spent."""
    return 4 * max(1, (n_rows - 1).bit_length())


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _sources(batch: StepInput, dst: np.ndarray, before: StepInput) -> np.ndarray:
    """[n_deferred] the sample row of `before` whose id each deferred token of `batch` is."""
    rows = batch.seq_of_token[dst]
    if batch.req_ids is before.req_ids and before.n_sample == before.n_seqs:  # steady decoding
        return rows
    index = {r.request_id: i for i, r in enumerate(before.sample_requests)}
    return np.fromiter((index[batch.req_ids[s]] for s in rows.tolist()), np.int64, len(rows))


def _fatal(e: BaseException) -> bool:
    """A fatal error (executor.ModelRunner): the device is lost and no retry can succeed."""
    return bool(getattr(e, "fatal", False))


@dataclass
class RunnerOutput:
    """What a step gave each row."""

    sampled: dict = field(default_factory=dict)  # req_id -> [token ids] emitted (accepted drafts + one)
    logprobs: dict = field(default_factory=dict)  # req_id -> [{id: logprob}] per emitted token (asked for only)
    pooled: dict = field(default_factory=dict)  # pooling req_id -> [hidden] f64 sum of its chunk's hidden states
    failed: dict = field(default_factory=dict)  # req_id -> error text: rows whose computation failed

    @property
    def num_sampled(self) -> int:
        return sum(map(len, self.sampled.values()))


@dataclass(eq=False)
class StartedStep:
    """A step whose core call has started (StepRunner.start); StepRunner.finish ends it."""

    out: SchedulerOutput  # what it computes
    batch: Optional[StepInput]  # its arrays; None: nothing to compute (no row, no free)
    call: Optional[Future] = None  # with a device thread: the core call there -> (StepResult, seconds)
    result: object = None  # without one: the call's (StepResult, seconds), or the exception it raised
    deferred: Optional[np.ndarray] = None  # async scheduling: flat indices of its DEFERRED ids, or None

    def skipped(self) -> bool:
        """Its call was not run because the step before it failed (finish runs it)."""
        return self.call is not None and self.call.done() and isinstance(self.call.exception(), _Skipped)


class _Skipped(Exception):
    """The step a started step takes its deferred ids from failed: it was not run."""


def _timed(fn: Callable, batch: StepInput) -> tuple:
    t0 = time.perf_counter()
    return fn(batch), time.perf_counter() - t0


def _deferred_ids(dst: np.ndarray, src: np.ndarray, batch: StepInput) -> Callable:
    """The ready() of a step planned beside the one before (DeviceThread.submit): on the device
    thread, once that step returned, its sampled ids [src] into this step's ids [dst], and to
    what those ids decide in the sampling rows (StepInput.awaiting)."""
    fills = []  # (fill, index into the step before's ids)
    for i, fill in batch.awaiting:
        k = int(np.searchsorted(dst, batch.sample_rows[i]))  # the row's deferred token is its sampled one
        if k == len(dst) or dst[k] != batch.sample_rows[i]:
            raise RuntimeError("a sample row awaits the step in flight's token but has no deferred token")
        fills.append((fill, int(src[k])))

    def ready(before) -> None:
        if isinstance(before, BaseException):
            raise _Skipped() from before
        ids = np.asarray(before[0].token_ids).reshape(-1)
        batch.token_ids[dst] = ids[src]
        for fill, j in fills:
            fill(int(ids[j]))
    return ready


class StepRunner:
    def __init__(self, model_runner, kv_layout: str, block_size: int, step_cost: Optional[StepCost] = None,
                 speculative=None, overlap: bool = False):
        self.model_runner = model_runner  # executor.ModelRunner: computes one StepInput
        self.inputs = InputBatch(kv_layout, block_size)  # each held request's tokens and blocks
        self.step_cost = step_cost  # fed with each step's time (the scheduler's chunk sizing reads it)
        self.spec = speculative  # spec.SpecDecoder, or None
        # overlap: every core call of a step (and of its failure search) runs on this one thread
        self._device = DeviceThread() if overlap else None
        self._prepare = getattr(model_runner, "prepare", None)  # the runner's sample rows, made here
        self._last: RunnerOutput = RunnerOutput()  # what the last finished step gave (a skipped step's ids)
        self.num_started_ahead = 0  # steps whose rows took their ids from the step in flight (async scheduling)

    def propose(self, running: list) -> None:
        """Set the drafts (``spec_token_ids``) of the running requests for the coming step."""
        if self.spec is not None:
            self.spec.prepare(running)

    def start(self, out: SchedulerOutput, after: Optional[StartedStep] = None) -> StartedStep:
        """Apply the step's deltas, prepare its arrays and start its core call (on the device
        thread, if there is one, returning at once). ``after``: the step still in flight that
        this one was planned beside (async scheduling), whose sampled ids its deferred rows take;
        otherwise the step before has been finished."""
        self.inputs.update(out)
        if self.spec is not None:
            for rid in list(out.finished_req_ids) + out.preempted_req_ids:
                self.spec.drop(rid)  # a proposer's per-request state (the draft's KV) goes with it
        batch = self.inputs.prepare(out)
        if batch.n_tokens == 0 and batch.free_seq_ids.size == 0 and not batch.finished_req_ids:
            return StartedStep(out, None)
        batch.sample_steps = sample_steps(batch, out.deferred_req_ids)
        if self._prepare is not None:
            self._prepare(batch)
        step = StartedStep(out, batch)
        fn = self.model_runner.execute
        if out.deferred_req_ids:
            if after is None or after.call is None:
                raise RuntimeError("a step with deferred rows needs the step in flight on the device thread")
            self.num_started_ahead += 1
            dst = step.deferred = np.flatnonzero(batch.token_ids == DEFERRED)
            step.call = self._device.submit(_timed, fn, batch, after=after.call,
                                            ready=_deferred_ids(dst, _sources(batch, dst, after.batch), batch))
        elif self._device is not None:
            step.call = self._device.submit(_timed, fn, batch)
        else:
            try:
                step.result = _timed(fn, batch)
            except Exception as e:
                step.result = e
        return step


    def finish(self, step: StartedStep) -> RunnerOutput:
        """Wait for a started step's core call; the tokens each row emits (failing rows found
        and reported, a fatal error raised: the class docstring)."""
        if step.batch is None:
            return RunnerOutput()
        result = self._last = self._run(step)
        if self.spec is not None and step.out.spec_token_ids:
            self.spec.account(step.out, result.sampled)
        return result

    def close(self) -> None:
        """Wait for a core call still running and end the device thread (a no-op without one)."""
        if self._device is not None:
            self._device.close()

    def release(self, req_ids) -> None:
        """Requests that ended after this step's computation (a stop, an abort): drop what the
        runner holds for them now (their tokens, a proposer's draft KV) rather than with the next
        step's finished_req_ids, which may never come."""
        for rid in req_ids:
            self.inputs.drop(rid)
            if self.spec is not None:
                self.spec.drop(rid)

    def _verifier(self):
        return None if self.spec is None else self.spec.verifier

    def _call(self, batch: StepInput):
        """One more core call (the failure search's), on the device thread if there is one."""
        if self._device is None:
            return self.model_runner.execute(batch)
        return self._device.submit(self.model_runner.execute, batch).result()

    def _unskipped(self, step: StartedStep) -> Optional[StepInput]:
        """A skipped step's batch with its deferred ids from the finished step before, less the
        rows whose request that step did not advance (it failed there: the engine ended it;
        the step's frees stay); None when nothing is left to run."""
        batch, dst = step.batch, step.deferred
        keep = np.ones(batch.n_seqs, bool)
        for t, row in zip(dst.tolist(), batch.seq_of_token[dst].tolist()):
            got = self._last.sampled.get(batch.req_ids[row])
            if got:
                batch.token_ids[t] = got[0]
            else:
                keep[row] = False
        batch.prepared = None  # made again on the call (the kept sampling sets have moved on)
        if keep.all():
            return batch
        rows = np.flatnonzero(keep).tolist()
        if not rows and not batch.free_seq_ids.size and not batch.finished_req_ids:
            return None
        return select_rows(batch, rows, keep_frees=True)

    def _run(self, step: StartedStep) -> RunnerOutput:
        batch = step.batch
        try:
            try:
                done = step.call.result() if step.call is not None else step.result
            except _Skipped:
                batch = self._unskipped(step)
                if batch is None:
                    return RunnerOutput()
                done = _timed(self._call, batch)
            if isinstance(done, BaseException):
                raise done
            result, seconds = done
            n_tokens = batch.n_tokens
            if n_tokens and self.step_cost is not None:
                if n_tokens == batch.n_seqs:  # one token a row (decoding): a row's pairs are its context
                    pairs = sum(batch.context_lens.tolist())  # (a numpy sum costs more on small batches)
                else:
                    n = np.diff(batch.query_start).astype(np.int64)  # [n_seqs] tokens of each row
                    pairs = int(attention_pairs(n, batch.context_lens.astype(np.int64) - n).sum())
                self.step_cost.observe(n_tokens, pairs, seconds)
            if self.spec is not None:
                self.spec.observe_step(batch.n_tokens, batch.n_seqs, seconds)
            return RunnerOutput(*unpack_result(batch, result, self._verifier()))
        except Exception as e:
            if _fatal(e):  # no row is to blame and nothing can run again: the engine closes
                raise
            if batch.n_seqs == 0:  # only frees: no request to blame
                log.exception("engine step (frees only) failed")
                return RunnerOutput()
            log.warning("engine step of %d rows failed (%s); finding the failing rows", batch.n_seqs, _error_text(e),
                        exc_info=True)
            return self._isolate(batch, e)

    def _isolate(self, batch: StepInput, error: Exception) -> RunnerOutput:
        """The step failed as a whole: find the rows that fail (RunnerOutput.failed, which the
        engine finishes with "error"); every other row gets the result it would have had.

        Bisection: a failed group of rows is split in two and each half is run again as its
        own sub-batch (select_rows, marked rewind); a half that succeeds keeps its results, a
        half that fails is split again, down to single rows, which are the culprits. Every
        row ends up in exactly one successful call or is a culprit. A retry is idempotent: it
        recomputes the same tokens into the same slots (BLOCK; SLOT cells are dropped first,
        see StepInput.rewind), samples with the same (seed, step) (the sampler keeps no state)
        and nothing in the engine advances until the step's results are applied. Greedy
        tokens do not depend on the batch a row is computed in (test_real_model_engine), so
        the survivors' output equals a run without the culprits. Pooling rows are rows like
        the others: a survivor keeps the hidden-state sums of its tokens, a culprit ends with
        "error" (only its own request). At most
        isolation_budget(n) extra calls; rows still unresolved then fail with the error."""
        res = RunnerOutput()
        culprits = {}  # row -> error text
        state = {"calls_left": isolation_budget(batch.n_seqs), "succeeded": False}

        def attempt(rows: list) -> Optional[Exception]:
            state["calls_left"] -= 1
            sub = select_rows(batch, rows, keep_frees=not state["succeeded"])
            try:
                s, lp, pl = unpack_result(sub, self._call(sub), self._verifier())
            except Exception as e:
                if _fatal(e):  # the device was lost during the search: stop retrying
                    raise
                return e
            state["succeeded"] = True
            res.sampled.update(s)
            res.logprobs.update(lp)
            res.pooled.update(pl)
            return None

        def split(rows: list, err: Exception) -> None:  # rows fail together with err
            if len(rows) == 1:
                culprits[rows[0]] = _error_text(err)
                return
            mid = len(rows) // 2
            for half in (rows[:mid], rows[mid:]):
                if state["calls_left"] <= 0:
                    for r in half:
                        culprits[r] = f"{_error_text(err)} (the step failed and its failing rows were not " \
                                      f"found within {isolation_budget(batch.n_seqs)} retries)"
                    continue
                e = attempt(half)
                if e is not None:
                    split(half, e)

        split(list(range(batch.n_seqs)), error)
        for row, text in sorted(culprits.items()):
            rid = batch.req_ids[row]
            log.error("request %s failed in the step: %s", rid, text)
            res.failed[rid] = text
            res.sampled.pop(rid, None)
            res.logprobs.pop(rid, None)
            res.pooled.pop(rid, None)
        return res
