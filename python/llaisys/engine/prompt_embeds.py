"""Prompts given as input embeddings (vLLM's ``{"prompt_embeds": array}``): the checks at the
edge, and the values a request carries through the engine.

A prompt of n embedding rows is a request of n prompt tokens whose ids are unknown: it carries
n placeholder ids (PLACEHOLDER_ID, never looked up, never shown) and the rows themselves, a
read-only float32 [n, hidden] array that stays with the request (a preempted request recomputes
from it). The rows enter the first layer instead of the embedding lookup (the core's
llaisysModelStepEmbeds); everything after them, the generated tokens included, is ids.

dtype: any numpy floating array (float16, float32, float64, or what ``numpy.asarray`` makes of
a list or an array-like) is converted to float32; a value float32 cannot hold becomes inf and
is refused. Integer, bool, complex and object arrays are refused: they are almost certainly
token ids or a mistake, not embeddings.
"""

from __future__ import annotations

import numpy as np

PLACEHOLDER_ID = 0  # the id an embedded prompt row carries (ignored by the core)


def check_prompt_embeds(x, hidden_size, max_model_len=None) -> np.ndarray:
    """The rows as a read-only C-contiguous float32 [n, hidden_size] array (a private copy), or
    ValueError naming ``prompt_embeds`` and the shape at fault."""
    if hidden_size is None:
        raise ValueError("prompt_embeds: this engine's model runner takes no input embeddings")
    try:
        a = np.asarray(x)
    except (TypeError, ValueError, OverflowError) as e:
        raise ValueError(f"prompt_embeds must be a float array of shape [n, {hidden_size}]: {e}") from None
    if a.dtype.kind != "f":
        raise ValueError(f"prompt_embeds must be a floating array (float32, or float16/float64 converted to "
                         f"float32) of shape [n, {hidden_size}], got dtype {a.dtype}")
    if a.ndim != 2:
        raise ValueError(f"prompt_embeds must have shape [n, {hidden_size}] (2-D), got shape {tuple(a.shape)}")
    n, width = a.shape
    if n == 0:
        raise ValueError(f"prompt_embeds is empty (shape {tuple(a.shape)}): the prompt must hold at least one row")
    if width != hidden_size:
        raise ValueError(f"prompt_embeds has shape {tuple(a.shape)}: its rows must be the model's hidden_size "
                         f"({hidden_size}) wide, got {width}")
    if max_model_len is not None and n > max_model_len:
        raise ValueError(f"prompt_embeds has shape {tuple(a.shape)}: {n} rows exceed max_model_len ({max_model_len})")
    with np.errstate(over="ignore"):  # overflow becomes inf, refused below
        out = np.array(a, dtype=np.float32, order="C", copy=True)
    bad = np.argwhere(~np.isfinite(out))
    if bad.size:
        r, c = (int(v) for v in bad[0])
        raise ValueError(f"prompt_embeds[{r}, {c}] is {float(a[r, c])}: every value must be finite in float32")
    out.flags.writeable = False
    return out


def placeholder_ids(embeds: np.ndarray) -> list:
    """The prompt ids of an embedded prompt: one placeholder per row."""
    return [PLACEHOLDER_ID] * int(embeds.shape[0])


def embed_digest(embeds: np.ndarray, start: int, stop: int) -> bytes:
    """The bytes of rows [start, stop) of a prompt's embeddings that key a prefix-cache block
    (kv_cache_manager.hash_block_tokens): rows past the prompt give b""."""
    if start >= embeds.shape[0]:
        return b""
    return embeds[start:stop].tobytes()
