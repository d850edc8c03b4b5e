"""LLMEngine: requests in, RequestOutputs out, one batched core call per step."""

from __future__ import annotations

import logging
import random
import time
from typing import Callable, Iterable, Optional, Union

import numpy as np

from .config import EngineConfig
from .executor import ModelRunner
from .metrics import EngineMetrics
from .output_processor import OutputProcessor
from .request import Request, RequestStatus, RequestTimes
from .sampling_params import SamplingParams
from .scheduler import Scheduler, SchedulerOutput, check_fits
from .step_input import StepInput, build_step_input, unpack_result

log = logging.getLogger(__name__)


def _eos_ids(tokenizer, eos_token_ids) -> frozenset:
    """eos_token_ids if given, else the tokenizer's (``eos_token_ids`` or ``special.stop_token_ids``)."""
    if eos_token_ids is None:
        eos_token_ids = getattr(tokenizer, "eos_token_ids", None)
    if eos_token_ids is None and getattr(tokenizer, "special", None) is not None:
        eos_token_ids = tokenizer.special.stop_token_ids
    return frozenset(int(t) for t in (eos_token_ids or ()))


def _check_prompt(prompt_token_ids, vocab_size: Optional[int]) -> list:
    try:
        ids = np.asarray(prompt_token_ids)
    except (TypeError, ValueError, OverflowError):
        raise ValueError("prompt_token_ids must be a flat sequence of integers") from None
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise ValueError("prompt_token_ids must be a flat sequence of integers")
    if ids.size == 0:
        raise ValueError("prompt_token_ids is empty: the prompt must hold at least one token")
    bad = ids[(ids < 0) | (ids >= vocab_size)] if vocab_size else ids[ids < 0]
    if bad.size:
        raise ValueError(f"prompt token id {int(bad[0])} is outside the vocabulary [0, {vocab_size or 'inf'})")
    return ids.tolist()


class LLMEngine:
    def __init__(self, config: EngineConfig, runner: ModelRunner, tokenizer,
                 eos_token_ids: Optional[Iterable[int]] = None, clock: Callable[[], float] = time.monotonic):
        self.config = config
        self.runner = runner  # computes steps (see executor.ModelRunner)
        self.tokenizer = tokenizer  # decode(ids, skip_special_tokens=...) and eos ids
        self.eos_token_ids = _eos_ids(tokenizer, eos_token_ids)
        self.clock = clock
        self.processor = OutputProcessor(tokenizer.decode)
        self.scheduler = Scheduler(config, self.processor, clock)
        self.metrics = EngineMetrics()
        self._rng = random.Random(config.seed)  # picks seeds for requests that give none
        self._aborted: list = []  # sequences finished outside a step; their last output is due

    # ---- requests ------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt_token_ids, sampling_params: Optional[SamplingParams] = None,
                    arrival_time: Optional[float] = None, prompt: Optional[str] = None) -> None:
        """Queue a request; ValueError if it is malformed or could never fit."""
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"request_id must be a non-empty string, got {request_id!r}")
        sp = sampling_params if sampling_params is not None else SamplingParams()
        ids, max_tokens = self.check_request(prompt_token_ids, sp)
        seq_ids = [request_id] if sp.n == 1 else [f"{request_id}#{i}" for i in range(sp.n)]
        if self.processor.has_group(request_id) or any(s in self.scheduler.requests for s in seq_ids):
            raise ValueError(f"request id {request_id!r} is already in use")
        base_seed = (sp.seed if sp.seed is not None else self._rng.getrandbits(64)) % 2 ** 64
        arrival = self.clock() if arrival_time is None else arrival_time
        seqs = []
        for i, sid in enumerate(seq_ids):
            leader = seqs[0] if i and self.config.enable_prefix_caching else None
            seqs.append(Request(sid, request_id, i, ids, sp, seed=(base_seed + i) % 2 ** 64, max_tokens=max_tokens,
                                eos_token_ids=self.eos_token_ids, times=RequestTimes(arrival), leader=leader))
        self.processor.add_group(request_id, prompt, seqs)
        for req in seqs:
            self.scheduler.add_request(req)

    def check_request(self, prompt_token_ids, sampling_params: SamplingParams) -> tuple:
        """(prompt ids as a list, the max_tokens the request gets), or ValueError: the checks of
        add_request that need no engine state (safe to call from any thread)."""
        ids = _check_prompt(prompt_token_ids, getattr(self.tokenizer, "vocab_size", None))
        return ids, check_fits(self.config, len(ids), sampling_params.max_tokens)

    def abort_request(self, request_ids: Union[str, Iterable[str]], error: Optional[str] = None) -> None:
        """Abort requests in any state (unknown or finished ids are ignored); their last
        output (finish_reason "abort", or "error" with `error` as the reason when given)
        comes from the next step()."""
        status = RequestStatus.FINISHED_ABORTED if error is None else RequestStatus.FINISHED_ERROR
        for rid in [request_ids] if isinstance(request_ids, str) else request_ids:
            self._finish_group(rid, status, error)

    def _finish_group(self, request_id: str, status: RequestStatus, error: Optional[str] = None) -> None:
        for req in self.processor.group(request_id):
            if self.scheduler.abort(req.request_id, status, error) is not None:
                self._aborted.append(req)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests() or bool(self._aborted)

    def reset_prefix_cache(self) -> bool:
        """Forget the prefix cache; False (nothing done) while any request holds blocks."""
        return self.scheduler.kv.reset_prefix_cache()

    # ---- the step ------------------------------------------------------------------------
    def step(self) -> list:
        """Schedule, compute one batch, append the sampled tokens; the RequestOutputs that changed."""
        out = self.scheduler.schedule()
        batch = build_step_input(out, self.scheduler.kv)
        sampled, logprobs = self._execute(out, batch)
        touched = self.scheduler.update_from_output(out, sampled, logprobs)
        return self._outputs(out, touched, len(sampled))

    def _execute(self, out: SchedulerOutput, batch: StepInput) -> tuple:
        if batch.n_tokens == 0 and batch.free_seq_ids.size == 0 and not batch.finished_req_ids:
            return {}, {}
        try:
            return unpack_result(batch, self.runner.execute(batch))
        except Exception as e:  # the step's sequences end with "error"; the engine goes on
            log.exception("engine step failed")
            for req in out.scheduled:
                if self.scheduler.abort(req.request_id, RequestStatus.FINISHED_ERROR, f"{type(e).__name__}: {e}"):
                    self._aborted.append(req)
            return {}, {}

    def _outputs(self, out: SchedulerOutput, touched: list, num_sampled: int) -> list:
        changed, self._aborted = self._aborted + touched, []
        self.metrics.update(self.scheduler, out, num_sampled, [r for r in changed if r.is_finished])
        return self.processor.make_outputs(changed)
