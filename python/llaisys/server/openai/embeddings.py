"""Embeddings through the engine's scheduler: one pooling request per input.

Each input becomes a pooling request (``AsyncEngine.encode``) that the scheduler batches with
the generation requests: same token budget, chunked prefill of long inputs, KV blocks from
the engine's pool, preemption and fairness. The vector is the mean of the final normed
hidden states over the input's tokens (float64 sums), L2-normalised (one float32 vector of
the model's hidden size per input). A timeout, a client that goes away or any other way out
aborts the inputs still running, which frees their blocks.
"""

from __future__ import annotations

import time
import uuid
from typing import Callable, Optional

import numpy as np

from ...engine.async_engine import EngineDeadError
from ...engine.pooling_params import PoolingParams

POLL_S = 0.25  # how often a waiting reader checks its client and deadline


class EmbeddingError(RuntimeError):
    """The engine failed an input (its step raised); the server answers 500."""


def check_inputs(inputs, vocab_size: Optional[int], max_len: int) -> list:
    """`inputs` as lists of ints, or ValueError naming the first bad one."""
    if not isinstance(inputs, list) or not inputs:
        raise ValueError("embeddings need at least one input")
    out = []
    for i, ids in enumerate(inputs):
        if not isinstance(ids, (list, tuple)) or not ids:
            raise ValueError(f"input {i} is empty: each input must hold at least one token")
        if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in ids):
            raise ValueError(f"input {i} must be a list of integer token ids")
        bad = [t for t in ids if t < 0 or (vocab_size is not None and t >= vocab_size)]
        if bad:
            raise ValueError(f"input {i}: token id {bad[0]} is outside the vocabulary [0, {vocab_size})")
        if len(ids) > max_len:
            raise ValueError(f"input {i} has {len(ids)} tokens, more than the model's context of {max_len}")
        out.append([int(t) for t in ids])
    return out


def _final(stream, deadline: float, timeout: float, client_gone: Callable[[], bool]):
    """The stream's final output; TimeoutError past `deadline`, ClientGone if the client left."""
    from ..state.limits import ClientGone

    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"embeddings did not finish within {timeout} s")
        if client_gone():
            raise ClientGone()
        try:
            return stream.get(timeout=min(POLL_S, left))
        except TimeoutError:
            continue


def embed(engine, inputs: list, timeout: float, client_gone: Callable[[], bool] = lambda: False,
          request_id: Optional[str] = None) -> list:
    """One [hidden] float32 unit vector per input (lists of token ids), each input a pooling
    request of `engine` (an AsyncEngine). ValueError for bad inputs (before anything is
    queued), TimeoutError past `timeout` seconds, ClientGone when `client_gone()` turns true,
    EngineDeadError if the engine is shutting down or dead, EmbeddingError if the engine
    failed an input. Every way out but success aborts the inputs still in the engine."""
    cfg = engine.config
    ids = check_inputs(inputs, getattr(engine.tokenizer, "vocab_size", None), cfg.max_model_len)
    deadline = time.monotonic() + timeout
    base = request_id or f"embd-{uuid.uuid4().hex}"
    params = PoolingParams(normalize=True)
    streams, vectors = [], []
    try:
        for i, x in enumerate(ids):
            streams.append(engine.encode(f"{base}-{i}", x, params))
        for s in streams:
            out = _final(s, deadline, timeout, client_gone)
            if out.finish_reason == "error":
                raise EmbeddingError(f"embedding failed: {out.error or 'internal error'}")
            if out.outputs is None:  # aborted from outside: only a shutdown does that
                raise EngineDeadError("the engine is shutting down")
            vectors.append(out.outputs.data)
    finally:
        if len(vectors) < len(ids):
            for s in streams:
                s.abort()  # a no-op for those already finished
    return vectors
