"""The processed sampling distribution of rows of logits (llaisysSampleProbs): what the core's
sampler draws from after bias, penalties, temperature, top-k, top-p and min-p. Speculative
sampling needs it for the target (p) and the draft (q) alike."""

from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from .libllaisys import LIB, check
from .libllaisys.speculative import available
from .models.step_io import RowSampling
from .sampler import row_params


def sample_probs_available() -> bool:
    return available(LIB)


def sample_probs(logits: np.ndarray, rows: Sequence[RowSampling]) -> np.ndarray:
    """[n_rows, vocab] f32: row i's distribution under rows[i] (a one-hot where the sampler
    decides without a draw: greedy, NaN, +inf). logits: [n_rows, vocab] f32."""
    if not available(LIB):
        raise RuntimeError("the loaded libllaisys has no llaisysSampleProbs (rebuild it)")
    logits, params, _keep = row_params(logits, rows)
    n, vocab = logits.shape
    probs = np.empty((n, vocab), np.float32)  # [n_rows, vocab]
    f32p = ctypes.POINTER(ctypes.c_float)
    check(LIB.llaisysSampleProbs(logits.ctypes.data_as(f32p), n, vocab, params, probs.ctypes.data_as(f32p)))
    return probs
