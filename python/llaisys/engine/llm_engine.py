"""LLMEngine: requests in, RequestOutputs out, one batched core call per step."""

from __future__ import annotations

import functools
import logging
import random
import time
from typing import Callable, Iterable, Optional, Union


from .config import EngineConfig
from .executor import ModelRunner
from .metrics import EngineMetrics
from .output_processor import OutputProcessor
from .pooling_params import PoolingParams
from .prompt_embeds import check_prompt_embeds, placeholder_ids
from .request import Request, RequestStatus, RequestTimes
from .sampling_params import SamplingParams, SamplingParamsError
from .scheduler import Scheduler, SchedulerOutput
from .step_cost import StepCost
from .step_runner import RunnerOutput, StartedStep, StepRunner
from .structured_matcher import StructuredBackend
from .admission import (_check_prompt, _eos_ids, _positive_int, _tolerant_decode,  # noqa: F401
                        check_fits, check_pooling_fits, snapshot_pooling_params, snapshot_sampling_params)

log = logging.getLogger(__name__)


def _fatal_closes(step):
    """LLMEngine.step's guard: a closed engine refuses the step (EngineDeadError), and a fatal
    error (an exception whose ``fatal`` is true: the device is lost) closes the engine: that
    step returns the final outputs of every unfinished request, ended with "error" and the
    reason, and every later step() and add_request raises EngineDeadError."""

    @functools.wraps(step)
    def guarded(self) -> list:
        self._check_alive()
        try:
            return step(self)
        except Exception as e:
            if not getattr(e, "fatal", False):
                raise
            return self._close_on_fatal(e)

    return guarded


# _finish's answer when no step is in flight (never modified: _process only reads it)
_IDLE = (None, RunnerOutput(), [])


class EngineDeadError(RuntimeError):
    """The engine has stopped: shut down, died after repeated failures, or closed after a fatal
    device error (its device was lost); no request is taken any more."""


class LLMEngine:
    def __init__(self, config: EngineConfig, runner: ModelRunner, tokenizer,
                 eos_token_ids: Optional[Iterable[int]] = None, clock: Callable[[], float] = time.monotonic,
                 speculative=None):
        self.config = config
        # spec.SpecDecoder (speculative decoding: drafts verified in the step), or None
        self.spec = speculative
        self.runner = runner  # computes one StepInput (see executor.ModelRunner)
        self.tokenizer = tokenizer  # decode(ids, skip_special_tokens=...) and eos ids
        # the logits width: every token id a request carries must be below it (the runner's
        # vocab_size, the lm_head rows; else the tokenizer's vocabulary; None: unknown)
        tok_vocab = _positive_int(getattr(tokenizer, "vocab_size", None))
        self.vocab_size = _positive_int(getattr(runner, "vocab_size", None)) or tok_vocab
        # prompt ids must also be known to the tokenizer (their text is the detokenizer's context)
        self._prompt_vocab = min(v for v in (self.vocab_size, tok_vocab, float("inf")) if v is not None)
        # the width of a prompt's input embedding rows (the runner's model; None: it takes none)
        self.hidden_size = _positive_int(getattr(runner, "hidden_size", None))
        eos = _eos_ids(tokenizer, eos_token_ids)
        if self.vocab_size is not None and any(t >= self.vocab_size for t in eos):
            # never sampled, so they need no min_tokens ban (which the core would refuse)
            log.warning("eos ids %s are outside the model's logits [0, %d); ignored",
                        sorted(t for t in eos if t >= self.vocab_size), self.vocab_size)
            eos = frozenset(t for t in eos if t < self.vocab_size)
        self.eos_token_ids = eos
        self.clock = clock
        self.processor = OutputProcessor(_tolerant_decode(tokenizer, self.vocab_size),
                                         bool(getattr(tokenizer, "decode_concatenates", False)))
        # matchers of structured-output requests (llguidance, built on first use)
        self.structured = StructuredBackend(tokenizer, self.vocab_size or 0, eos)
        self.step_cost = StepCost()  # step seconds by tokens and attention pairs, fitted as steps run
        # the runner side of the step: each request's state, the step's arrays, drafts, failures
        if config.async_output and speculative is not None:
            name = "async_scheduling" if config.async_scheduling else "async_output"
            raise ValueError(f"{name} does not combine with speculative decoding (its drafts are made "
                             f"from the tokens of the step before); turn one of them off")
        self.step_runner = StepRunner(runner, config.kv_layout, config.block_size, self.step_cost, speculative,
                                      overlap=config.async_output)
        self._in_flight: Optional[StartedStep] = None  # async_output: the step computing on the device thread
        self._memory = None  # the runner's memory_stats() as last read
        self.scheduler = Scheduler(config, clock, self.step_cost,
                                   None if speculative is None else self.step_runner.propose)
        self.scheduler.spec_stats = None if speculative is None else speculative.stats  # read by the metrics
        self.metrics = EngineMetrics()
        self._rng = random.Random(config.seed)  # picks seeds for requests that give none
        self._aborted: list = []  # sequences finished outside a step; their last output is due
        # why the engine closed for good (a fatal runner error: the device is lost), or None
        self.dead: Optional[str] = None

    # ---- requests ------------------------------------------------------------------------
    def add_request(self, request_id: str, prompt_token_ids, sampling_params: Optional[SamplingParams] = None,
                    arrival_time: Optional[float] = None, prompt: Optional[str] = None, *,
                    pooling_params: Optional[PoolingParams] = None, final_only: bool = False,
                    prompt_embeds=None) -> None:
        """Queue a request; ValueError if it is malformed or could never fit
        (SamplingParamsError, naming the field, for a sampling parameter).

        With ``pooling_params`` it is a pooling (embedding) request instead: its prompt is
        computed through the same scheduler, nothing is sampled, and its one final output is a
        PoolingRequestOutput carrying the pooled vector (give sampling_params or pooling_params).

        ``final_only``: step() reports the request only when it finishes (its final output
        holds the whole text, as its one delta), as LLM.generate wants (vLLM's FINAL_ONLY).

        ``prompt_embeds`` (with ``prompt_token_ids`` None): the prompt as input embedding rows,
        float [n, hidden] (engine/prompt_embeds.py: a ValueError naming the shape otherwise).
        Such a request never speculates (``speculative=True`` is refused)."""
        if not isinstance(request_id, str) or not request_id:
            raise ValueError(f"request_id must be a non-empty string, got {request_id!r}")
        self._check_alive()
        if pooling_params is not None:
            if sampling_params is not None:
                raise ValueError("give sampling_params (generation) or pooling_params (embedding), not both")
            pp = snapshot_pooling_params(pooling_params)
            embeds = self._check_embeds(prompt_token_ids, prompt_embeds)
            ids = self.check_pooling_request(prompt_token_ids if embeds is None else placeholder_ids(embeds), pp)
            self.add_pooling_checked(request_id, ids, pp, arrival_time, prompt, prompt_embeds=embeds)
            return
        sp = snapshot_sampling_params(sampling_params)
        embeds = self._check_embeds(prompt_token_ids, prompt_embeds)
        ids, max_tokens = self._admit(prompt_token_ids, sp) if embeds is None else self._admit_embeds(embeds, sp)
        self.add_checked(request_id, ids, sp, max_tokens, arrival_time, prompt, final_only, prompt_embeds=embeds)

    def check_embeds_request(self, prompt_embeds, sampling_params: Optional[SamplingParams] = None) -> tuple:
        """check_request for a prompt given as input embeddings: (its placeholder ids, the
        max_tokens it gets, its checked read-only float32 rows for add_checked's
        ``prompt_embeds``), or the ValueError of check_request or engine/prompt_embeds.py."""
        sp = snapshot_sampling_params(sampling_params)
        if prompt_embeds is None:
            raise ValueError(f"prompt_embeds must be a float array of shape [n, {self.hidden_size}], got None")
        embeds = self._check_embeds(None, prompt_embeds)
        admitted = self._admit_embeds(embeds, sp)
        if sp.structured is not None:
            self.structured.matcher(sp.structured)
        return (*admitted, embeds)

    def _admit_embeds(self, embeds, sp: SamplingParams) -> tuple:
        if sp.speculative:
            raise SamplingParamsError("speculative", "a prompt given as prompt_embeds does not speculate (its "
                                                     "proposers need token ids); leave speculative unset")
        return self._admit(placeholder_ids(embeds), sp)

    def _check_embeds(self, prompt_token_ids, prompt_embeds):
        """The checked float32 rows of an embeddings prompt (None when the prompt is ids)."""
        if prompt_embeds is None:
            return None
        if prompt_token_ids is not None:
            raise ValueError("give prompt_token_ids or prompt_embeds, not both")
        return check_prompt_embeds(prompt_embeds, self.hidden_size, self.config.max_model_len)

    def add_checked(self, request_id: str, ids: list, sp: SamplingParams, max_tokens: int,
                    arrival_time: Optional[float] = None, prompt: Optional[str] = None, final_only: bool = False,
                    prompt_embeds=None) -> None:
        """Queue a request that check_request admitted, checking nothing again: `ids` and
        `max_tokens` are what it returned, `sp` the snapshot it checked, and `request_id` is
        new (AsyncEngine's map of live requests answers a caller at once). The one admission
        pass of a request that comes through AsyncEngine. ValueError (that request fails, no
        other) if an id is taken in the scheduler, where a sequence of n > 1 is "<id>#<i>", so
        "x#1" beside a live "x" of n = 2 is caught here, or a structured matcher cannot be made."""
        self._check_alive()
        seq_ids = [request_id] if sp.n == 1 else [f"{request_id}#{i}" for i in range(sp.n)]
        if self.processor.has_group(request_id) or any(s in self.scheduler.requests for s in seq_ids):
            raise ValueError(f"request id {request_id!r} is already in use")
        base_seed = sp.seed if sp.seed is not None else self._rng.getrandbits(64)
        arrival = self.clock() if arrival_time is None else arrival_time
        seqs = []
        for i, sid in enumerate(seq_ids):
            leader = seqs[0] if i and self.config.enable_prefix_caching else None
            seqs.append(Request(sid, request_id, i, ids, sp, seed=(base_seed + i) % 2 ** 64, max_tokens=max_tokens,
                                eos_token_ids=self.eos_token_ids, times=RequestTimes(arrival), leader=leader,
                                prompt_embeds=prompt_embeds))
        if sp.structured is not None:  # one matcher per sequence (ValueError if it cannot be made)
            for req in seqs:
                req.structured = self.structured.matcher(sp.structured)
        self.processor.add_group(request_id, prompt, seqs, final_only)
        for req in seqs:
            self.scheduler.add_request(req)

    def add_pooling_checked(self, request_id: str, ids: list, pp: PoolingParams, arrival_time: Optional[float] = None,
                            prompt: Optional[str] = None, prompt_embeds=None) -> None:
        """add_checked for a pooling request: `ids` from check_pooling_request, `pp` its snapshot
        (`prompt_embeds`: the checked rows of an embeddings prompt, `ids` its placeholders)."""
        self._check_alive()
        if self.processor.has_group(request_id) or request_id in self.scheduler.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        arrival = self.clock() if arrival_time is None else arrival_time
        req = Request(request_id, request_id, 0, ids, SamplingParams(), seed=0, max_tokens=0,
                      eos_token_ids=frozenset(), times=RequestTimes(arrival), pooling_params=pp,
                      prompt_embeds=prompt_embeds)
        self.processor.add_group(request_id, prompt, [req])
        self.scheduler.add_request(req)

    def check_pooling_request(self, prompt_token_ids, pooling_params: Optional[PoolingParams] = None) -> list:
        """The prompt ids as a list, or ValueError: every check of a pooling add_request that
        needs no engine state (the prompt, the fit in max_model_len and the KV pool; a
        PoolingParamsError naming the field for a pooling parameter)."""
        snapshot_pooling_params(pooling_params)
        ids = _check_prompt(prompt_token_ids, None if self._prompt_vocab == float("inf") else self._prompt_vocab)
        check_pooling_fits(self.config, len(ids))
        return ids

    def check_request(self, prompt_token_ids, sampling_params: Optional[SamplingParams] = None) -> tuple:
        """(prompt ids as a list, the max_tokens the request gets), or ValueError: every check
        of add_request that needs no engine state (safe to call from any thread).

        - SamplingParamsError (a ValueError; ``.param`` names the field) for a sampling
          parameter: any SamplingParams check (run again here, on a copy), a ``logit_bias``
          or ``stop_token_ids`` id at or above the model's logits width (``vocab_size``), or
          ``logprobs`` above it;
        - StructuredOutputError (a ValueError naming ``structured``) when the structured-output
          constraint cannot be built for this tokenizer (it is compiled and cached here);
        - ValueError for the prompt (empty, not flat ints, an id outside the vocabulary) and
          for a request that could never fit (``check_fits``)."""
        sp = snapshot_sampling_params(sampling_params)
        admitted = self._admit(prompt_token_ids, sp)
        if sp.structured is not None:  # tokenizer + grammar built here, on the caller's thread: the
            self.structured.matcher(sp.structured)  # loop's add_request then hits the caches
        return admitted

    def _admit(self, prompt_token_ids, sp: SamplingParams) -> tuple:
        ids = _check_prompt(prompt_token_ids, None if self._prompt_vocab == float("inf") else self._prompt_vocab)
        self._check_token_params(sp)
        if sp.speculative and self.spec is None:
            raise SamplingParamsError("speculative", "speculative decoding was asked for but this engine runs "
                                                     "without it (start it with speculative='ngram' or 'draft:MODEL')")
        return ids, check_fits(self.config, len(ids), sp.max_tokens)

    def _check_token_params(self, sp: SamplingParams) -> None:
        """The ids a request hands the sampler must be rows of the model's logits."""
        v = self.vocab_size
        if v is None:
            return
        for name, ids in (("logit_bias", sp.logit_bias), ("stop_token_ids", sp.stop_token_ids)):
            bad = next((t for t in ids if t >= v), None)
            if bad is not None:
                raise SamplingParamsError(name, f"{name}: token id {bad} is outside the model's vocabulary [0, {v})")
        if sp.logprobs is not None and sp.logprobs > v:
            raise SamplingParamsError("logprobs", f"logprobs {sp.logprobs} exceeds the model's vocabulary ({v})")

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
        return self.scheduler.has_unfinished_requests() or bool(self._aborted) or self._computing()

    def _computing(self) -> bool:
        """A step with rows is in flight (async_output; one of frees only has nothing to report)."""
        return self._in_flight is not None and self._in_flight.batch is not None and self._in_flight.batch.n_seqs > 0

    def memory_stats(self):
        """The runner's memory_stats() (models.model.ModelStatsInfo for the core's runner), or
        None when the runner has none. While a core call runs on the step thread (async_output)
        the last figures read (the core is not called from a second thread meanwhile)."""
        step = self._in_flight
        if step is not None and step.call is not None and not step.call.done():
            return self._memory
        stats = getattr(self.runner, "memory_stats", None)
        self._memory = None if stats is None else stats()
        return self._memory

    def reset_prefix_cache(self) -> bool:
        """Forget the prefix cache; False (nothing done) while any request holds blocks."""
        return self.scheduler.kv.reset_prefix_cache()

    # ---- the step ------------------------------------------------------------------------
    @_fatal_closes
    def step(self) -> list:
        """Schedule, start the step, process outputs (async_output: the step before's, as this one computes)."""
        ahead, done = self._start_ahead(), self._finish()  # in this order: the step in flight finishes second
        self._in_flight = ahead or self.step_runner.start(self.scheduler.schedule())
        return self._process(*(done if self.config.async_output else self._finish()))

    def _start_ahead(self) -> Optional[StartedStep]:
        """async_scheduling: the next step, planned and started while the one in flight still
        computes (None when it cannot be: _plans_ahead)."""
        return self.step_runner.start(self.scheduler.schedule(), self._in_flight) if self._plans_ahead() else None

    def _plans_ahead(self) -> bool:
        """async_scheduling: the next step can be planned before the one in flight is applied.
        Not beside the disk prompt cache or cache reuse (they move K/V on this thread while
        scheduling), nor after a step that was skipped (it runs when finished)."""
        step = self._in_flight
        kv = self.scheduler.kv
        return (self.config.async_scheduling and step is not None and not step.skipped() and kv.tier is None
                and kv.reuse is None)

    def _finish(self) -> tuple:
        """Wait for the step in flight and apply its tokens (eos, stop ids and max_tokens end
        requests here): (its SchedulerOutput, its RunnerOutput, the requests it touched); (None,
        an empty RunnerOutput, []) when no step is in flight.

        With async_output the step started here runs on the device thread while _process makes
        the outputs of the one before: detokenization, stop strings, RequestOutputs. A request
        a stop string ends then has a row in the step in flight, whose token is dropped
        (update_from_output skips finished requests); its blocks, freed at once, are handed
        out only by the next schedule(), after that step is finished."""
        step, self._in_flight = self._in_flight, None
        if step is None:
            return _IDLE
        result = self.step_runner.finish(step)
        return step.out, result, self._apply(step.out, result)

    def close(self) -> None:
        """Wait for a step still computing (async_output) and end the step thread; call before
        the model is freed. The engine takes no step after it."""
        self._in_flight = None
        self.step_runner.close()

    def _check_alive(self) -> None:
        if self.dead is not None:
            raise EngineDeadError(self.dead)

    def _close_on_fatal(self, error: Exception) -> list:
        """No retry can succeed and nothing may run on the device again (not even the frees of
        a next step): end every unfinished request with "error" and refuse further work."""
        self.dead = (f"the engine is closed: its device failed with an unrecoverable error, restart the process "
                     f"to use it again ({type(error).__name__}: {error})")
        log.error("%s", self.dead)
        for rid in list(self.scheduler.requests):
            req = self.scheduler.abort(rid, RequestStatus.FINISHED_ERROR, self.dead)
            if req is not None:
                self._aborted.append(req)
        changed, self._aborted = self._aborted, []
        return self.processor.make_outputs(changed)

    def _apply(self, out: SchedulerOutput, result: RunnerOutput) -> list:
        """Apply the step's tokens (token-level stops: the scheduler); the requests touched."""
        for rid, text in result.failed.items():
            req = self.scheduler.abort(rid, RequestStatus.FINISHED_ERROR, text)
            if req is not None:
                self._aborted.append(req)
        return self.scheduler.update_from_output(out, result.sampled, result.logprobs, result.pooled)

    def _process(self, out: Optional[SchedulerOutput], result: RunnerOutput, touched: list) -> list:
        """The text of the requests a step touched (stop strings: the output processor, whose
        ends the scheduler carries out); make outputs (also of requests aborted since)."""
        for req, status, error in self.processor.process(touched):
            self.scheduler.stop(req, status, error)
        changed, self._aborted = self._aborted + touched, []
        failed: list = []
        outputs = self.processor.make_outputs(changed, on_error=lambda seqs, msg: failed.extend(
            self._fail_seqs(seqs, msg)))
        finished = [r for r in changed if r.status >= RequestStatus.FINISHED_STOPPED]  # r.is_finished (hot)
        if failed:
            finished += [r for r in failed if r not in changed]
        self.step_runner.release(r.request_id for r in finished)
        self.metrics.update(self.scheduler, out, result.num_sampled, finished)
        return outputs

    def _fail_seqs(self, seqs: list, error: str) -> list:
        """Finish the unfinished of `seqs` with "error" (their output could not be made)."""
        done = []
        for req in seqs:
            if self.scheduler.abort(req.request_id, RequestStatus.FINISHED_ERROR, error) is not None:
                done.append(req)
        return done
