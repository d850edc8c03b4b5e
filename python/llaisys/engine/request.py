"""Request: one sequence the scheduler runs, and its lifecycle.

A user request with ``n`` completions becomes ``n`` sibling ``Request`` objects (one per
completion) that share the prompt; the scheduler and the KV manager only see these. A pooling
request (``pooling_params`` set) is one ``Request`` that computes its prompt and samples
nothing: it ends FINISHED_STOPPED once its last prompt token is computed.

    WAITING ──▶ RUNNING ──▶ FINISHED_STOPPED | FINISHED_LENGTH
       ▲           │
       └─PREEMPTED◀┘        any unfinished state ──▶ FINISHED_ABORTED | FINISHED_ERROR
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .pooling_params import PoolingParams
from .sampling_params import SamplingParams
from .structured_spec import StructuredOutputError

# Added to the eos / stop-id logits while a request is under min_tokens (finite: the C
# sampler rejects non-finite biases; exp(-1e9) is 0 in float32).
MIN_TOKENS_BIAS = -1.0e9


class RequestStatus(enum.IntEnum):
    WAITING = 0  # queued, never run
    RUNNING = 1  # holds KV blocks and is computed each step
    PREEMPTED = 2  # blocks taken back; queued again, will recompute prompt + output so far
    FINISHED_STOPPED = 3  # eos, a stop token or a stop string
    FINISHED_LENGTH = 4  # max_tokens or max_model_len
    FINISHED_ABORTED = 5  # abort_request / client went away
    FINISHED_ERROR = 6  # the step that computed it failed

    @property
    def is_finished(self) -> bool:
        return self >= RequestStatus.FINISHED_STOPPED

    @property
    def finish_reason(self) -> Optional[str]:
        """OpenAI finish_reason of a finished status, None otherwise."""
        return _FINISH_REASONS.get(self)


_FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
    RequestStatus.FINISHED_ERROR: "error",
}

_ENDS = {RequestStatus.FINISHED_ABORTED, RequestStatus.FINISHED_ERROR}
# status -> statuses it may move to
TRANSITIONS = {
    RequestStatus.WAITING: {RequestStatus.RUNNING} | _ENDS,
    RequestStatus.RUNNING: {RequestStatus.PREEMPTED, RequestStatus.FINISHED_STOPPED,
                            RequestStatus.FINISHED_LENGTH} | _ENDS,
    RequestStatus.PREEMPTED: {RequestStatus.RUNNING} | _ENDS,
    RequestStatus.FINISHED_STOPPED: set(),
    RequestStatus.FINISHED_LENGTH: set(),
    RequestStatus.FINISHED_ABORTED: set(),
    RequestStatus.FINISHED_ERROR: set(),
}


class InvalidTransitionError(RuntimeError):
    """A request was moved between statuses the lifecycle does not connect (an engine bug)."""


@dataclass
class RequestTimes:
    """Timestamps of one sequence on the engine's clock (None until it happens)."""

    arrival: float  # add_request
    first_scheduled: Optional[float] = None  # first step that computed any of its tokens
    first_token: Optional[float] = None  # first output token appended
    last_token: Optional[float] = None  # latest output token appended
    finished: Optional[float] = None  # reached a finished status


@dataclass(eq=False)
class Request:
    """Scheduling state of one sequence (one completion of a user request)."""

    request_id: str  # unique engine-wide; "<external id>" or "<external id>#<index>" when n > 1
    external_id: str  # the id the caller gave add_request
    index: int  # which of the n completions this is
    prompt_token_ids: list  # [n_prompt] prompt ids
    sampling_params: SamplingParams
    seed: int  # resolved sampling seed (uint64), recorded for reproducibility
    max_tokens: int  # resolved output cap: sampling_params.max_tokens or max_model_len - n_prompt
    eos_token_ids: frozenset  # ids that stop it unless ignore_eos (from the tokenizer)
    times: RequestTimes  # lifecycle timestamps
    # the sibling whose prompt blocks this one waits to share (prefix caching, n > 1); None if none
    leader: Optional["Request"] = None
    status: RequestStatus = RequestStatus.WAITING
    output_token_ids: list = field(default_factory=list)  # [n_output] sampled ids
    all_token_ids: list = field(default_factory=list)  # prompt + output ids (kept for slicing)
    num_computed_tokens: int = 0  # tokens whose K/V is in the cache (reset by preemption)
    # async scheduling (scheduler.py): tokens the steps in flight compute, and the tokens they
    # sample, not applied yet (vLLM's output placeholders); 0 when no step is in flight
    num_inflight_tokens: int = 0
    num_pending_tokens: int = 0
    num_cached_tokens: int = -1  # prompt tokens served by the prefix cache at first admission; -1: not yet
    block_hashes: list = field(default_factory=list)  # chained hash of each full block of all_token_ids
    slot_seq_id: Optional[int] = None  # SLOT layout: the core's seq id while it holds KV
    # what the runner holds of it (sched_output.py): its first runner_tokens ids (-1: the runner has
    # never seen it) and the first runner_blocks entries of its block table
    runner_tokens: int = -1
    runner_blocks: int = 0
    num_preemptions: int = 0  # times it was preempted
    stop_reason: object = None  # the stop string or stop token id that ended it (None for eos/length)
    stopped_by_token: bool = False  # its last output token is the eos / stop id that ended it
    logprobs: Optional[list] = None  # per output token {token id: logprob}, when asked for
    error: Optional[str] = None  # why it finished with FINISHED_ERROR
    error_param: Optional[str] = None  # the request field at fault when its own input ended it (its grammar)
    # pooling: set for an embedding request (max_tokens 0, sampling_params unused)
    pooling_params: Optional[PoolingParams] = None
    hidden_sum: Optional[np.ndarray] = None  # [hidden] f64 sum of the hidden states of the computed
    #                                          prompt tokens (pooling; reset by preemption)
    embedding: Optional[np.ndarray] = None  # [hidden] f32 the pooled vector once the prompt is computed
    # speculative decoding (engine/spec): the drafts proposed for the coming step, verified after it
    spec_token_ids: list = field(default_factory=list)  # [k] draft ids ([] : no speculation this step)
    spec_probs: Optional[np.ndarray] = None  # [k, vocab] f32 the draft distributions (None: point masses)
    spec_state: Optional[object] = None  # spec.decoder.SpecRequestState: its recent acceptance
    # a prompt given as input embeddings: [n_prompt, hidden] f32, read-only, shared by siblings;
    # prompt_token_ids are then placeholders (engine/prompt_embeds.py). None: the prompt is ids
    prompt_embeds: Optional[np.ndarray] = None
    # structured output: the grammar's engine.structured_matcher.Matcher, at the position after the
    # output so far (advanced by append_token); None: unconstrained
    structured: Optional[object] = None

    def __post_init__(self) -> None:
        self.all_token_ids = list(self.prompt_token_ids)
        if self.sampling_params.logprobs is not None and self.logprobs is None:
            self.logprobs = []

    @property
    def is_pooling(self) -> bool:
        """An embedding request: every prompt token's hidden state is pooled, nothing is sampled."""
        return self.pooling_params is not None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        """Prompt + output tokens known so far."""
        return len(self.all_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    def set_status(self, new: RequestStatus) -> None:
        """Move along the lifecycle; an edge that TRANSITIONS lacks raises InvalidTransitionError."""
        if new not in TRANSITIONS[self.status]:
            raise InvalidTransitionError(f"request {self.request_id}: {self.status.name} -> {new.name} "
                                         f"is not a legal transition")
        self.status = new

    def append_output_token(self, token_id: int, logprobs: Optional[dict] = None) -> None:
        self.output_token_ids.append(token_id)
        self.all_token_ids.append(token_id)
        if self.logprobs is not None:
            self.logprobs.append(logprobs if logprobs is not None else {})

    def append_token(self, token_id: int, logprobs: Optional[dict], now: float) -> Optional[RequestStatus]:
        """Append a sampled token and check the token-level stops (the scheduler's part; stop
        strings are the OutputProcessor's); the finished status it reaches, or None.

            a token the grammar refuses                 -> FINISHED_ERROR (the sampler's mask prevents it)
            eos (unless ignore_eos) or a stop token id  -> FINISHED_STOPPED (stopped_by_token)
            a structured-output grammar complete, with  -> FINISHED_STOPPED
            nothing allowed after it but eos
            max_tokens (resolved within max_model_len)  -> FINISHED_LENGTH

        As in vLLM, a stop token counts only after min_tokens other tokens (the sampler bans it
        until then, see logit_bias_now), the grammar's end once min_tokens are out."""
        out = self.output_token_ids
        out.append(token_id)  # append_output_token, inlined (once a token a step)
        self.all_token_ids.append(token_id)
        if self.logprobs is not None:
            self.logprobs.append(logprobs if logprobs is not None else {})
        times = self.times
        if times.first_token is None:
            times.first_token = now
        times.last_token = now
        if self.structured is not None:
            try:
                self.structured.advance(token_id)
            except StructuredOutputError as e:  # the grammar refuses the token
                self.error, self.error_param = str(e), e.param
                return RequestStatus.FINISHED_ERROR
        sp, n = self.sampling_params, len(out)
        if n > sp.min_tokens and ((not sp.ignore_eos and token_id in self.eos_token_ids)
                                  or token_id in sp.stop_token_ids):
            self.stop_reason = token_id if token_id in sp.stop_token_ids else None
            self.stopped_by_token = True
            return RequestStatus.FINISHED_STOPPED
        if self.structured is not None and n >= sp.min_tokens and self.structured.done:
            return RequestStatus.FINISHED_STOPPED
        if n >= self.max_tokens:
            return RequestStatus.FINISHED_LENGTH
        return None

    def truncate_output(self, n: int) -> None:
        """Keep the first n output tokens (a stop string ended it inside a step's tokens)."""
        cut = len(self.output_token_ids) - n
        if cut > 0:
            del self.output_token_ids[n:]
            del self.all_token_ids[-cut:]
            if self.logprobs is not None:
                del self.logprobs[n:]

    def logit_bias_now(self, ahead: int = 0) -> dict:
        """The logit bias for the next draw (``ahead`` draws later: speculative positions, or a
        draw a step in flight makes first): logit_bias_at(num_output_tokens + ahead)."""
        return self.logit_bias_at(self.num_output_tokens + ahead)

    def logit_bias_at(self, step: int) -> dict:
        """The logit bias of output draw ``step`` (0 is the first): the user's, plus
        MIN_TOKENS_BIAS on the eos and stop ids while fewer than min_tokens tokens are out
        before it (the runner passes it to the sampler)."""
        sp = self.sampling_params
        if step >= sp.min_tokens:
            return sp.logit_bias
        bias = dict(sp.logit_bias)
        banned = set(sp.stop_token_ids) | (set() if sp.ignore_eos else set(self.eos_token_ids))
        for t in banned:
            bias[t] = MIN_TOKENS_BIAS
        return bias
