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
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .input_batch import InputBatch
from .sched_output import SchedulerOutput
from .step_cost import StepCost, attention_pairs
from .step_input import StepInput, select_rows, unpack_result

log = logging.getLogger(__name__)


def isolation_budget(n_rows: int) -> int:
    """Most extra runner calls a failed step of n_rows rows may spend finding its failing rows:
    bisection isolates one bad row in 2 * ceil(log2 n) calls, this allows two. A failure that
    is not the rows' fault (every half fails) ends the search when the budget is spent."""
    return 4 * max(1, (n_rows - 1).bit_length())


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


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


class StepRunner:
    def __init__(self, model_runner, kv_layout: str, block_size: int, step_cost: Optional[StepCost] = None,
                 speculative=None):
        self.model_runner = model_runner  # executor.ModelRunner: computes one StepInput
        self.inputs = InputBatch(kv_layout, block_size)  # each held request's tokens and blocks
        self.step_cost = step_cost  # fed with each step's time (the scheduler's chunk sizing reads it)
        self.spec = speculative  # spec.SpecDecoder, or None

    def propose(self, running: list) -> None:
        """Set the drafts (``spec_token_ids``) of the running requests for the coming step."""
        if self.spec is not None:
            self.spec.prepare(running)

    def execute(self, out: SchedulerOutput) -> RunnerOutput:
        self.inputs.update(out)
        if self.spec is not None:
            for rid in list(out.finished_req_ids) + out.preempted_req_ids:
                self.spec.drop(rid)  # a proposer's per-request state (the draft's KV) goes with it
        batch = self.inputs.prepare(out)
        if batch.n_tokens == 0 and batch.free_seq_ids.size == 0 and not batch.finished_req_ids:
            return RunnerOutput()
        result = self._run(out, batch)
        if self.spec is not None and out.spec_token_ids:
            self.spec.account(out, result.sampled)
        return result

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

    def _run(self, out: SchedulerOutput, batch: StepInput) -> RunnerOutput:
        try:
            t0 = time.perf_counter()
            result = self.model_runner.execute(batch)
            seconds = time.perf_counter() - t0
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
                s, lp, pl = unpack_result(sub, self.model_runner.execute(sub), self._verifier())
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
