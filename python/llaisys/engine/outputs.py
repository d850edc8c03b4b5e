"""What the engine hands back each step: one RequestOutput per user request that changed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import numpy as np

from .request import RequestTimes


@dataclass
class CompletionOutput:
    """One of the n completions of a request, cumulative so far plus what is new."""

    index: int  # which of the n completions (0-based)
    text: str  # text so far; a matched stop string is cut (kept with include_stop_str_in_output)
    token_ids: list  # [n_output] every sampled id so far (a stop token included)
    delta_text: str  # text added since the previous RequestOutput of this request
    delta_token_ids: list  # ids added since the previous RequestOutput of this request
    logprobs: Optional[list]  # per output token {id: logprob} (sampled + top N); None unless asked
    finish_reason: Optional[str]  # "stop" | "length" | "abort" | "error"; None while running
    stop_reason: Union[None, int, str] = None  # the stop string or stop token id; None for eos/length

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class Usage:
    """Token counts of a request (OpenAI usage)."""

    prompt_tokens: int  # tokens in the prompt
    completion_tokens: int  # output tokens over all n completions
    cached_tokens: int  # prompt tokens served from the prefix cache

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class RequestOutput:
    """The state of one user request after a step."""

    request_id: str  # the id given to add_request
    prompt: Optional[str]  # the prompt text if it was given
    prompt_token_ids: list  # [n_prompt]
    outputs: list  # [CompletionOutput] one per completion, by index
    finished: bool  # every completion has finished; this is the request's last output
    usage: Usage
    metrics: RequestTimes  # timestamps of completion 0 (arrival, first token, ...)
    error: Optional[str] = None  # why a completion finished with "error"
    # the request field at fault when the request's own input ended it (its grammar failed: a
    # client error, not the engine's); None for an engine fault
    error_param: Optional[str] = None

    @property
    def text(self) -> str:
        """The text of the first completion (the only one unless n > 1)."""
        return self.outputs[0].text if self.outputs else ""


@dataclass
class PoolingOutput:
    """The pooled vector of a pooling request (vLLM's PoolingOutput)."""

    data: np.ndarray  # [hidden] float32 mean of the final normed hidden states (L2-normalised if asked)


@dataclass
class PoolingRequestOutput:
    """The one (final) output of a pooling request: its vector, or why it has none."""

    request_id: str  # the id given to add_request
    prompt: Optional[str]  # the prompt text if it was given
    prompt_token_ids: list  # [n_prompt]
    outputs: Optional[PoolingOutput]  # None unless finish_reason is "stop"
    finished: bool  # always True: a pooling request reports once, when it ends
    finish_reason: str  # "stop" (pooled) | "abort" | "error"
    usage: Usage  # prompt_tokens; no completion tokens
    metrics: RequestTimes  # arrival, first scheduled, finished
    error: Optional[str] = None  # why it finished with "error"
