"""StepCost: what a step costs in seconds, learnt from the steps that ran, so the scheduler can
size prefill chunks by time and not only by tokens.

A step of T tokens whose rows attend A (query, key) pairs in all takes about

    seconds = w0 + w1 * T + w2 * A

w0 is the step's fixed part (on a CPU, reading every weight once), w1 each token's share of the
linears, w2 attention's share, which grows with the context a chunk starts at. The weights are
a non-negative least-squares fit over the most recent ``WINDOW`` steps, refreshed every
``REFIT_EVERY`` observations while the window fills, then every ``REFIT_EVERY_FULL`` (a fit of
all seven subsets costs about a millisecond: at every fourth step it was most of a small
model's step cost; when the three-term fit is non-negative, as in steady decoding, it is the
best of them and the others are not tried). A fit is due at those observations but computed when
the model is first read after them, over the window as it was then: the same weights, and no fit
at all while nothing reads them (steady decoding with no prompt waiting never does).

What the scheduler asks is ``chunk_tokens(seconds, start)``: the longest prefill chunk starting at
context position ``start`` that fits in ``seconds``. It never plans past twice the longest step
it has seen (``COLD_TOKENS`` before any): a model fit on small steps is not trusted far outside
them, so chunk sizes grow by doubling until they meet the time target (one step each), and the
fit then holds them there. The measured rates are reported in the stats (``rates()``).
"""

from __future__ import annotations

from collections import deque
from typing import Optional

import numpy as np

WINDOW = 64  # observations kept (the most recent steps)
REFIT_EVERY = 4  # observations between two fits while the window fills
REFIT_EVERY_FULL = 16  # observations between two fits once it is full
COLD_TOKENS = 64  # the longest chunk planned before any step has been measured
MIN_CHUNK = 16  # a prefill chunk is never cut below this (progress even when decodes fill the time)


def attention_pairs(n: int, start: int) -> int:
    """(query, key) pairs of a chunk of n tokens after `start` cached tokens (causal)."""
    return n * start + n * (n + 1) // 2


class StepCost:
    """A fitted model of step time (see the module docstring). Not thread-safe: the engine loop
    owns it (it observes steps and the scheduler asks it in the same thread)."""

    def __init__(self):
        self._obs: deque = deque(maxlen=WINDOW)  # (tokens T, attention pairs A, seconds)
        self._w = np.zeros(3)  # [w0 s, w1 s/token, w2 s/pair]
        self._since_fit = 0  # observations since the last fit
        self._max_tokens = 0  # the most tokens of an observed step
        self._fitted = False  # a fit exists (at least 3 observations), maybe still pending
        self._pending: Optional[list] = None  # the window when the last due fit was due, not yet fitted

    def observe(self, tokens: int, pairs: int, seconds: float) -> None:
        """Record one step: `tokens` computed, `pairs` attention pairs, `seconds` of wall time."""
        if tokens <= 0 or not seconds > 0:
            return
        self._obs.append((float(tokens), float(pairs), float(seconds)))
        self._max_tokens = max(self._max_tokens, int(tokens))
        self._since_fit += 1
        every = REFIT_EVERY_FULL if len(self._obs) == WINDOW else REFIT_EVERY
        if len(self._obs) >= 3 and (self._since_fit >= every or not self._fitted):
            self._since_fit = 0
            self._fitted = True
            self._pending = list(self._obs)  # fitted when read (_weights)

    @property
    def fitted(self) -> bool:
        """A fit exists (at least 3 observations)."""
        return self._fitted

    def _weights(self) -> np.ndarray:
        """[w0, w1, w2] of the last due fit (computed now if it is still pending)."""
        if self._pending is not None:
            self._w = self._fit(self._pending)
            self._pending = None
        return self._w

    @staticmethod
    def _fit(obs: list) -> np.ndarray:
        """Non-negative least squares over the observations `obs`: with three terms, the best of
        the fits on each subset of terms whose weights all come out >= 0 (exact, and cheap)."""
        x = np.array(obs)  # [n_obs, 3] tokens, pairs, seconds
        a = np.stack([np.ones(len(x)), x[:, 0], x[:, 1]], axis=1)  # [n_obs, 3] the terms
        scale = np.maximum(np.abs(a).max(axis=0), 1e-30)  # columns of similar size for lstsq
        best, best_err = None, np.inf
        for keep in ([0, 1, 2], [0, 1], [0, 2], [1, 2], [0], [1], [2]):
            w, *_ = np.linalg.lstsq(a[:, keep] / scale[keep], x[:, 2], rcond=None)
            if (w < 0).any():
                continue
            full = np.zeros(3)
            full[keep] = w / scale[keep]
            if len(keep) == 3:  # the unconstrained optimum is feasible: no subset fits better
                best = full
                break
            err = float(np.sum((a @ full - x[:, 2]) ** 2))
            if err < best_err:
                best, best_err = full, err
        if best is None:  # every subset fits a negative weight: one mean cost per token
            best = np.array([0.0, x[:, 2].sum() / x[:, 0].sum(), 0.0])
        return best

    def seconds(self, tokens: int, pairs: int) -> float:
        """Predicted seconds of a step (0 before any fit)."""
        w0, w1, w2 = self._weights()
        return float(w0 + w1 * tokens + w2 * pairs)

    def row_seconds(self, n: int, start: int) -> float:
        """Predicted seconds one row of n tokens after `start` adds to a step (no fixed part)."""
        w = self._weights()
        return float(w[1] * n + w[2] * attention_pairs(n, start))

    def fixed_seconds(self) -> float:
        return float(self._weights()[0])

    def chunk_tokens(self, seconds: float, start: int, limit: int) -> int:
        """The longest chunk (<= limit) starting at context `start` that adds at most `seconds`
        to a step; never below MIN_CHUNK (nor limit, if smaller), never beyond twice the largest
        step measured (COLD_TOKENS before any)."""
        cap = min(limit, max(COLD_TOKENS, 2 * self._max_tokens))
        if not self._fitted:
            return max(1, min(cap, limit))
        _, w1, w2 = self._weights()
        # w1 n + w2 (n start + n (n + 1) / 2) <= seconds: the positive root of a n^2 + b n - c
        a, b, c = w2 / 2, w1 + w2 * (start + 0.5), max(seconds, 0.0)
        if a > 0:
            n = (-b + (b * b + 4 * a * c) ** 0.5) / (2 * a)
        else:
            n = c / b if b > 0 else cap
        return max(min(MIN_CHUNK, limit), min(cap, int(n)))

    def rates(self) -> Optional[dict]:
        """The fit, for the stats: fixed ms a step, prefill tok/s at context 0, None before a fit."""
        if not self._fitted:
            return None
        w0, w1, w2 = self._weights()
        return {"step_fixed_ms": float(1e3 * w0), "token_us": float(1e6 * w1), "pair_ns": float(1e9 * w2),
                "prefill_tok_s_at_512": 512 / max(self.seconds(512, attention_pairs(512, 0)), 1e-9)}
