"""Admission helpers of LLMEngine: private copies of request parameters, prompt checks, the
tokenizer's eos ids, a decode that tolerates padding ids, and whether a request can ever fit
(check_fits, check_pooling_fits)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

from .config import EngineConfig
from .pooling_params import PoolingParams
from .sampling_params import SamplingParams


def _positive_int(v) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def snapshot_sampling_params(sampling_params: Optional[SamplingParams]) -> SamplingParams:
    """A private, re-validated copy: a caller mutating its SamplingParams after add_request
    (or sharing one across requests) cannot change what the engine admitted."""
    if sampling_params is None:
        return SamplingParams()
    if not isinstance(sampling_params, SamplingParams):
        raise TypeError(f"sampling_params must be a SamplingParams, got {type(sampling_params).__name__}")
    return dataclasses.replace(sampling_params)


def snapshot_pooling_params(pooling_params) -> PoolingParams:
    """A private, re-validated copy of a PoolingParams (None: the defaults)."""
    if pooling_params is None:
        return PoolingParams()
    if not isinstance(pooling_params, PoolingParams):
        raise TypeError(f"pooling_params must be a PoolingParams, got {type(pooling_params).__name__}")
    return dataclasses.replace(pooling_params)


def _tolerant_decode(tokenizer, logits_width: Optional[int]) -> Callable:
    """tokenizer.decode, made to give no text for ids the tokenizer does not know when the
    model's logits are wider than the tokenizer (padding rows): such an id can be sampled (or
    pushed by a logit_bias) and must not break the request's text, let alone the step. When
    every id the model can produce is known (the usual case), decode is used as it is, so the
    per-token path does no extra scan."""
    decode = tokenizer.decode
    n = _positive_int(getattr(tokenizer, "vocab_size", None))
    if n is None or (logits_width is not None and logits_width <= n):
        # every id the model can produce is known: the unvalidated decode when there is one
        return getattr(tokenizer, "decode_known", decode) if logits_width is not None else decode

    def tolerant(ids, skip_special_tokens: bool = False) -> str:
        ids = list(ids)
        if any(not 0 <= t < n for t in ids):
            ids = [t for t in ids if 0 <= t < n]
        return decode(ids, skip_special_tokens=skip_special_tokens)

    return tolerant


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


def check_fits(config: EngineConfig, num_prompt_tokens: int, max_tokens: Optional[int]) -> int:
    """Admission control: the resolved max_tokens, or ValueError when the request could never run."""
    if num_prompt_tokens < 1:
        raise ValueError("the prompt must hold at least one token")
    if max_tokens is None:  # as many as fit in max_model_len and in the KV pool
        room = min(config.max_model_len, config.num_kv_slots)
        max_tokens = room - num_prompt_tokens
        if max_tokens < 1:
            raise ValueError(f"the prompt has {num_prompt_tokens} tokens, which leaves no room to generate within "
                             f"max_model_len ({config.max_model_len}) and the KV pool ({config.num_kv_slots} tokens)")
    total = num_prompt_tokens + max_tokens
    if total > config.max_model_len:
        raise ValueError(f"prompt ({num_prompt_tokens} tokens) + max_tokens ({max_tokens}) = {total} tokens exceeds "
                         f"max_model_len ({config.max_model_len})")
    _check_pool(config, total, f"prompt ({num_prompt_tokens} tokens) + max_tokens ({max_tokens}) = {total} tokens")
    return max_tokens


def _check_pool(config: EngineConfig, num_tokens: int, what: str) -> None:
    """ValueError when `what` (num_tokens tokens) needs more KV blocks than the pool has."""
    need = -(-num_tokens // config.block_size)
    if need > config.num_blocks:
        raise ValueError(f"{what} needs {need} KV blocks of {config.block_size} but the pool has {config.num_blocks}")


def check_pooling_fits(config: EngineConfig, num_prompt_tokens: int) -> None:
    """Admission control of a pooling request: ValueError when its prompt could never run."""
    if num_prompt_tokens < 1:
        raise ValueError("the prompt must hold at least one token")
    if num_prompt_tokens > config.max_model_len:
        raise ValueError(f"the input has {num_prompt_tokens} tokens, more than max_model_len "
                         f"({config.max_model_len})")
    _check_pool(config, num_prompt_tokens, f"the input ({num_prompt_tokens} tokens)")
