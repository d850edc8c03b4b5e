"""SpeculativeConfig: which proposer, how many draft tokens, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

MAX_SPECULATIVE_TOKENS = 16  # most draft tokens one row may verify in a step
METHODS = ("ngram", "draft")


class SpeculativeConfigError(ValueError):
    """A speculative-decoding setting is invalid; ``param`` names it."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


@dataclass
class SpeculativeConfig:
    """Speculative decoding of an engine (doc/engine.md, "Speculative decoding")."""

    method: str = "ngram"  # "ngram" (prompt lookup) or "draft" (a smaller model with the same tokenizer)
    num_speculative_tokens: int = 4  # the most draft tokens a row verifies per step (adaptive k stays below)
    draft_model: Optional[str] = None  # method "draft": a model directory, .gguf file or known name
    ngram_max: int = 4  # n-gram: longest suffix matched (tried first, down to ngram_min)
    ngram_min: int = 1  # n-gram: shortest suffix matched
    adaptive: bool = True  # choose k per request from its acceptance and the measured step cost

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise SpeculativeConfigError("speculative", f"speculative method must be one of {METHODS}, "
                                                        f"got {self.method!r}")
        k = self.num_speculative_tokens
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_SPECULATIVE_TOKENS:
            raise SpeculativeConfigError("num_speculative_tokens", f"num_speculative_tokens must be an integer in "
                                                                   f"[1, {MAX_SPECULATIVE_TOKENS}], got {k!r}")
        if self.method == "draft" and not self.draft_model:
            raise SpeculativeConfigError("speculative", "speculative method 'draft' needs a draft model "
                                                        "('draft:MODEL')")
        if self.method == "ngram" and self.draft_model:
            raise SpeculativeConfigError("speculative", "a draft model is given but the method is 'ngram'")
        for name in ("ngram_max", "ngram_min"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpeculativeConfigError(name, f"{name} must be an integer >= 1, got {v!r}")
        if self.ngram_min > self.ngram_max:
            raise SpeculativeConfigError("ngram_min", f"ngram_min ({self.ngram_min}) exceeds ngram_max "
                                                      f"({self.ngram_max})")


def parse_speculative(value: Union[None, str, dict, SpeculativeConfig],
                      num_speculative_tokens: Optional[int] = None) -> Optional[SpeculativeConfig]:
    """None (no speculation), or a SpeculativeConfig from "ngram", "draft:MODEL", a dict of its
    fields or a SpeculativeConfig; ``num_speculative_tokens`` overrides the config's k."""
    if value is None or value is False or value == "" or value == "off":
        if num_speculative_tokens is not None:
            raise SpeculativeConfigError("num_speculative_tokens", "num_speculative_tokens needs speculative "
                                                                   "('ngram' or 'draft:MODEL')")
        return None
    extra = {} if num_speculative_tokens is None else {"num_speculative_tokens": num_speculative_tokens}
    if isinstance(value, SpeculativeConfig):
        cfg = SpeculativeConfig(**{**value.__dict__, **extra})
    elif isinstance(value, dict):
        try:
            cfg = SpeculativeConfig(**{**value, **extra})
        except TypeError as e:
            raise SpeculativeConfigError("speculative", f"speculative: {e}") from None
    elif isinstance(value, str):
        method, sep, model = value.partition(":")
        if method == "ngram" and not sep:
            cfg = SpeculativeConfig("ngram", **extra)
        elif method == "draft" and model:
            cfg = SpeculativeConfig("draft", draft_model=model, **extra)
        else:
            raise SpeculativeConfigError("speculative", f"speculative must be 'ngram' or 'draft:MODEL', got {value!r}")
    else:
        raise SpeculativeConfigError("speculative", f"speculative must be a string, dict or SpeculativeConfig, "
                                                    f"got {type(value).__name__}")
    return cfg
