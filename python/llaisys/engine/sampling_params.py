"""SamplingParams: how one request samples and when it stops, checked on construction.

Ranges follow vLLM and the OpenAI API. Every bad value raises ``SamplingParamsError`` (a
``ValueError``) whose message names the field and its allowed range, and whose ``param``
attribute is the field name (the server puts it in the error body).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

MAX_STOP_STRINGS = 16  # most stop strings one request may give
MAX_LOGPROBS = 20  # most top logprobs per token (OpenAI's limit)
MAX_LOGIT_BIAS = 100.0  # |bias| limit (OpenAI's)


class SamplingParamsError(ValueError):
    """A sampling parameter out of range; ``param`` names the field."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


@dataclass
class SamplingParams:
    """Per-request sampling and stopping parameters (the defaults sample greedily)."""

    n: int = 1  # completions to generate for the prompt (sibling sequences)
    temperature: float = 0.0  # >= 0; 0 is greedy
    top_p: float = 1.0  # (0, 1]; 1 is off
    top_k: int = -1  # -1 or 0 is off, else keep the k most likely tokens
    min_p: float = 0.0  # [0, 1]; 0 is off
    presence_penalty: float = 0.0  # [-2, 2]
    frequency_penalty: float = 0.0  # [-2, 2]
    repetition_penalty: float = 1.0  # > 0; 1 is off
    max_tokens: Optional[int] = 16  # >= 1; None: up to max_model_len
    min_tokens: int = 0  # no stop (eos, stop ids, stop strings) before this many tokens
    stop: Union[None, str, list] = None  # stop strings; normalised to a list of non-empty str
    stop_token_ids: Optional[list] = None  # extra ids that end generation; normalised to a list
    ignore_eos: bool = False  # keep going past the tokenizer's eos ids
    include_stop_str_in_output: bool = False  # keep the matched stop string (or stop token text)
    seed: Optional[int] = None  # None: the engine picks one per request and records it
    logprobs: Optional[int] = None  # None: none; N in 0..20: the sampled token's logprob + top N
    logit_bias: Optional[dict] = None  # token id -> bias in [-100, 100] added to its logit
    skip_special_tokens: bool = True  # leave special tokens out of the text

    def __post_init__(self) -> None:
        self._check_counts()
        self._check_floats()
        self._check_stops()
        self._check_flags()
        self._check_extras()

    def _check_counts(self) -> None:
        if not _is_int(self.n) or self.n < 1:
            raise SamplingParamsError("n", f"n must be an integer >= 1, got {self.n!r}")
        if not _is_int(self.top_k) or self.top_k < -1:
            raise SamplingParamsError("top_k", f"top_k must be -1 or 0 (off) or an integer >= 1, got {self.top_k!r}")
        if self.max_tokens is not None and (not _is_int(self.max_tokens) or self.max_tokens < 1):
            raise SamplingParamsError("max_tokens",
                                      f"max_tokens must be an integer >= 1 or None, got {self.max_tokens!r}")
        if not _is_int(self.min_tokens) or self.min_tokens < 0:
            raise SamplingParamsError("min_tokens", f"min_tokens must be an integer >= 0, got {self.min_tokens!r}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise SamplingParamsError("min_tokens", f"min_tokens ({self.min_tokens}) must be <= max_tokens "
                                                    f"({self.max_tokens})")

    def _check_floats(self) -> None:
        ranges = {  # field -> (low, high, low inclusive, text of the range)
            "temperature": (0.0, math.inf, True, ">= 0 (0 = greedy)"),
            "top_p": (0.0, 1.0, False, "in (0, 1]"),
            "min_p": (0.0, 1.0, True, "in [0, 1]"),
            "presence_penalty": (-2.0, 2.0, True, "in [-2, 2]"),
            "frequency_penalty": (-2.0, 2.0, True, "in [-2, 2]"),
            "repetition_penalty": (0.0, math.inf, False, "> 0 (1 = off)"),
        }
        for name, (lo, hi, lo_inclusive, text) in ranges.items():
            v = getattr(self, name)
            ok = _is_number(v) and (v >= lo if lo_inclusive else v > lo) and v <= hi
            if not ok:
                raise SamplingParamsError(name, f"{name} must be a number {text}, got {v!r}")
            setattr(self, name, float(v))

    def _check_stops(self) -> None:
        stop = self.stop
        if stop is None:
            stop = []
        elif isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) and s for s in stop):
            raise SamplingParamsError("stop", f"stop must be a non-empty string or a list of non-empty strings, "
                                              f"got {self.stop!r}")
        if len(stop) > MAX_STOP_STRINGS:
            raise SamplingParamsError("stop", f"stop may hold at most {MAX_STOP_STRINGS} strings, got {len(stop)}")
        self.stop = list(stop)
        ids = [] if self.stop_token_ids is None else self.stop_token_ids
        if not isinstance(ids, (list, tuple)) or not all(_is_int(t) and t >= 0 for t in ids):
            raise SamplingParamsError("stop_token_ids", f"stop_token_ids must be a list of integers >= 0, "
                                                        f"got {self.stop_token_ids!r}")
        self.stop_token_ids = list(ids)

    def _check_flags(self) -> None:
        for name in ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise SamplingParamsError(name, f"{name} must be a bool, got {getattr(self, name)!r}")

    def _check_extras(self) -> None:
        if self.seed is not None and not _is_int(self.seed):
            raise SamplingParamsError("seed", f"seed must be an integer or None, got {self.seed!r}")
        if self.logprobs is not None and (not _is_int(self.logprobs) or not 0 <= self.logprobs <= MAX_LOGPROBS):
            raise SamplingParamsError("logprobs", f"logprobs must be None or an integer in [0, {MAX_LOGPROBS}], "
                                                  f"got {self.logprobs!r}")
        bias = {} if self.logit_bias is None else self.logit_bias
        if not isinstance(bias, dict):
            raise SamplingParamsError("logit_bias", f"logit_bias must be a dict of token id -> bias, got {bias!r}")
        clean = {}
        for k, v in bias.items():
            key = int(k) if isinstance(k, str) and k.isdigit() else k  # JSON object keys are strings
            if not _is_int(key) or key < 0:
                raise SamplingParamsError("logit_bias", f"logit_bias keys must be token ids >= 0, got {k!r}")
            if not _is_number(v) or abs(v) > MAX_LOGIT_BIAS:
                raise SamplingParamsError("logit_bias", f"logit_bias values must be numbers in "
                                                        f"[-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}], got {v!r} "
                                                        f"for token {key}")
            clean[key] = float(v)
        self.logit_bias = clean

    @property
    def greedy(self) -> bool:
        """True when sampling is deterministic argmax (temperature 0)."""
        return self.temperature == 0.0

    @property
    def max_stop_len(self) -> int:
        """Length of the longest stop string (0 if none): the detokenizer holds back one less."""
        return max((len(s) for s in self.stop), default=0)
