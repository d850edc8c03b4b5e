"""PoolingParams: what a pooling (embedding) request asks for, and the pooling arithmetic.

A pooling request runs through the same scheduler as generation (same token budget, chunked
prefill, blocks, preemption) but samples nothing: each of its prompt tokens is a row whose
final normed hidden state the step returns. The engine sums those rows in float64 as the
chunks are computed; when the last prompt token is done the request finishes with the mean,
L2-normalised unless ``normalize`` is False (vLLM's ``PoolingParams`` / ``LLM.embed`` shape).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class PoolingParamsError(ValueError):
    """A pooling parameter is out of range; ``param`` names it."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


@dataclass
class PoolingParams:
    """Mean pooling over every prompt token of the final normed hidden states."""

    normalize: bool = True  # divide the mean by its L2 norm (cosine-ready unit vectors)

    def __post_init__(self) -> None:
        if not isinstance(self.normalize, bool):
            raise PoolingParamsError("normalize", f"normalize must be a bool, got {self.normalize!r}")


def pooled_vector(hidden_sum: np.ndarray, num_tokens: int, normalize: bool) -> np.ndarray:
    """[hidden] float32: the mean of the summed hidden states (``hidden_sum`` [hidden] f64 over
    ``num_tokens`` rows), divided by its L2 norm when ``normalize`` (a zero mean stays zero)."""
    assert num_tokens > 0, "a pooled request has at least one token"
    v = hidden_sum / num_tokens
    if normalize:
        norm = np.linalg.norm(v)
        if norm > 0:
            v = v / norm
    return v.astype(np.float32)
