"""SamplingParams: how one request samples and when it stops, checked on construction.

Ranges follow vLLM and the OpenAI API, and every value must also survive the C types the
model step packs it into (include/llaisys/sampler.h): token ids and top_k are int32, the seed
uint64, the float fields float32 (a value whose float32 is infinite, or rounds to a bound the
core rejects, is refused here rather than by the step). Collections are bounded so one
request cannot make every step slow. Every bad value raises ``SamplingParamsError`` (a
``ValueError``) whose message names the field and its allowed range, and whose ``param``
attribute is the field name (the server puts it in the error body).

What needs the model (token ids below its logits width) is checked at admission, by
``LLMEngine.check_request``.
"""

from __future__ import annotations

import ctypes
import math
import numbers
import re
from dataclasses import dataclass
from typing import Optional, Union

MAX_N = 128  # most completions (sibling sequences) one request may ask for
MAX_STOP_STRINGS = 16  # most stop strings one request may give
MAX_STOP_STRING_CHARS = 1024  # longest stop string (each is matched against the text every token)
MAX_STOP_TOKEN_IDS = 1024  # most stop token ids one request may give
MAX_LOGPROBS = 20  # most top logprobs per token (OpenAI's limit)
MAX_LOGIT_BIAS = 100.0  # |bias| limit (OpenAI's)
MAX_LOGIT_BIAS_TOKENS = 1024  # most logit_bias entries one request may give
MAX_INT32 = 2 ** 31 - 1  # token ids, top_k, max_tokens and min_tokens must fit an int32
SEED_LIMIT = 2 ** 64  # seeds are uint64: [0, 2**64)
# Temperatures below this sample greedily (vLLM's _SAMPLING_EPS): dividing logits by a
# temperature this small overflows float32, so the draw would be meaningless.
MIN_TEMPERATURE = 1e-5

_TOKEN_ID_TEXT = re.compile(r"[0-9]{1,10}")  # a logit_bias key as JSON gives it: ASCII digits only


class SamplingParamsError(ValueError):
    """A sampling parameter out of range; ``param`` names the field."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


def _is_int(v) -> bool:
    """An integer (Python or numpy), not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _f32(v: float) -> float:
    """The float32 the core will see (an overflow is inf, an underflow 0)."""
    return ctypes.c_float(v).value


def _token_id(v) -> Optional[int]:
    """v as a token id in [0, MAX_INT32], or None. Accepts ints and strings of ASCII digits
    (JSON object keys are strings)."""
    if isinstance(v, str):
        v = int(v) if _TOKEN_ID_TEXT.fullmatch(v) else None
    if not _is_int(v) or not 0 <= v <= MAX_INT32:
        return None
    return int(v)


@dataclass
class SamplingParams:
    """Per-request sampling and stopping parameters (the defaults sample greedily)."""

    n: int = 1  # completions to generate for the prompt (sibling sequences), 1..MAX_N
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
    seed: Optional[int] = None  # [0, 2**64); None: the engine picks one per request and records it
    logprobs: Optional[int] = None  # None: none; N in 0..20: the sampled token's logprob + top N
    logit_bias: Optional[dict] = None  # token id -> bias in [-100, 100] added to its logit
    skip_special_tokens: bool = True  # leave special tokens out of the text
    # structured output: a StructuredSpec (engine/structured_spec.py) the text must match; None: free
    structured: Optional[object] = None
    # speculative decoding of this request: None follows the engine, False opts out, True
    # requires it (LLMEngine refuses the request when the engine has none)
    speculative: Optional[bool] = None

    def __post_init__(self) -> None:
        self._check_counts()
        self._check_floats()
        self._check_stops()
        self._check_flags()
        self._check_extras()
        self._check_structured()

    def _check_counts(self) -> None:
        if not _is_int(self.n) or not 1 <= self.n <= MAX_N:
            raise SamplingParamsError("n", f"n must be an integer in [1, {MAX_N}], got {self.n!r}")
        if not _is_int(self.top_k) or not -1 <= self.top_k <= MAX_INT32:
            raise SamplingParamsError("top_k", f"top_k must be -1 or 0 (off) or an integer in [1, {MAX_INT32}], "
                                               f"got {self.top_k!r}")
        if self.max_tokens is not None and (not _is_int(self.max_tokens) or not 1 <= self.max_tokens <= MAX_INT32):
            raise SamplingParamsError("max_tokens", f"max_tokens must be an integer in [1, {MAX_INT32}] or None, "
                                                    f"got {self.max_tokens!r}")
        if not _is_int(self.min_tokens) or not 0 <= self.min_tokens <= MAX_INT32:
            raise SamplingParamsError("min_tokens", f"min_tokens must be an integer in [0, {MAX_INT32}], "
                                                    f"got {self.min_tokens!r}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise SamplingParamsError("min_tokens", f"min_tokens ({self.min_tokens}) must be <= max_tokens "
                                                    f"({self.max_tokens})")
        self.n, self.top_k, self.min_tokens = int(self.n), int(self.top_k), int(self.min_tokens)
        if self.max_tokens is not None:
            self.max_tokens = int(self.max_tokens)

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
            if ok:  # the float32 the step packs must pass the same check (no inf, no 0 for "> 0")
                f = _f32(v)
                ok = math.isfinite(f) and (f >= lo if lo_inclusive else f > lo) and f <= hi
            if not ok:
                raise SamplingParamsError(name, f"{name} must be a number {text} that fits a float32, got {v!r}")
            setattr(self, name, float(v))
        if self.temperature < MIN_TEMPERATURE:
            self.temperature = 0.0

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
        if any(len(s) > MAX_STOP_STRING_CHARS for s in stop):
            raise SamplingParamsError("stop", f"stop strings may be at most {MAX_STOP_STRING_CHARS} characters long, "
                                              f"got one of {max(map(len, stop))}")
        self.stop = list(stop)
        ids = [] if self.stop_token_ids is None else self.stop_token_ids
        if not isinstance(ids, (list, tuple)):
            raise SamplingParamsError("stop_token_ids", f"stop_token_ids must be a list of token ids, "
                                                        f"got {self.stop_token_ids!r}")
        if len(ids) > MAX_STOP_TOKEN_IDS:
            raise SamplingParamsError("stop_token_ids", f"stop_token_ids may hold at most {MAX_STOP_TOKEN_IDS} ids, "
                                                        f"got {len(ids)}")
        bad = next((t for t in ids if not _is_int(t) or not 0 <= t <= MAX_INT32), None)
        if bad is not None:
            raise SamplingParamsError("stop_token_ids", f"stop_token_ids must be a list of integers in "
                                                        f"[0, {MAX_INT32}], got {bad!r}")
        self.stop_token_ids = [int(t) for t in ids]

    def _check_flags(self) -> None:
        for name in ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise SamplingParamsError(name, f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.speculative is not None and not isinstance(self.speculative, bool):
            raise SamplingParamsError("speculative", f"speculative must be a bool or None, got {self.speculative!r}")

    def _check_extras(self) -> None:
        if self.seed is not None and (not _is_int(self.seed) or not 0 <= self.seed < SEED_LIMIT):
            raise SamplingParamsError("seed", f"seed must be an integer in [0, 2**64) or None, got {self.seed!r}")
        if self.seed is not None:
            self.seed = int(self.seed)
        if self.logprobs is not None and (not _is_int(self.logprobs) or not 0 <= self.logprobs <= MAX_LOGPROBS):
            raise SamplingParamsError("logprobs", f"logprobs must be None or an integer in [0, {MAX_LOGPROBS}], "
                                                  f"got {self.logprobs!r}")
        if self.logprobs is not None:
            self.logprobs = int(self.logprobs)
        bias = {} if self.logit_bias is None else self.logit_bias
        if not isinstance(bias, dict):
            raise SamplingParamsError("logit_bias", f"logit_bias must be a dict of token id -> bias, got {bias!r}")
        if len(bias) > MAX_LOGIT_BIAS_TOKENS:
            raise SamplingParamsError("logit_bias", f"logit_bias may hold at most {MAX_LOGIT_BIAS_TOKENS} entries, "
                                                    f"got {len(bias)}")
        clean = {}
        for k, v in bias.items():
            key = _token_id(k)
            if key is None:
                raise SamplingParamsError("logit_bias", f"logit_bias keys must be token ids in [0, {MAX_INT32}] "
                                                        f"(integers or strings of digits), got {k!r}")
            if key in clean:
                raise SamplingParamsError("logit_bias", f"logit_bias gives token {key} twice")
            if not _is_number(v) or abs(v) > MAX_LOGIT_BIAS:
                raise SamplingParamsError("logit_bias", f"logit_bias values must be numbers in "
                                                        f"[-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}], got {v!r} "
                                                        f"for token {key}")
            clean[key] = float(v)
        self.logit_bias = clean

    def _check_structured(self) -> None:
        if self.structured is None:
            return
        from .structured import grammar_of  # llguidance only when used
        from .structured_spec import StructuredOutputError
        try:
            grammar_of(self.structured)
        except StructuredOutputError as e:
            raise SamplingParamsError("structured", str(e)) from None

    @property
    def greedy(self) -> bool:
        """True when sampling is deterministic argmax (temperature 0)."""
        return self.temperature == 0.0

    @property
    def max_stop_len(self) -> int:
        """Length of the longest stop string (0 if none): the detokenizer holds back one less."""
        return max((len(s) for s in self.stop), default=0)
