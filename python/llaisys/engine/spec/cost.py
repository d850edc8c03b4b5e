"""The measured cost model behind adaptive k and the off-switch.

Step time is modelled as t(n) = a + b n for a step of n tokens, fitted by least squares over
the most recent steps (their token counts and wall times). A draft token adds b to the
target's step (and, with a draft model, its own per-token cost); it is worth proposing when
the tokens it is expected to add per second beat the step's tokens per second without it.
"""

from __future__ import annotations

from collections import deque
from typing import Optional

# Before enough steps are seen: a token costs 2% of a step's fixed cost (decode is a weight
# stream); replaced by the fit as soon as two different step sizes have been timed.
PRIOR_A, PRIOR_B = 1.0, 0.02
WINDOW = 128  # steps kept for the fit


class LinearCost:
    """Least-squares t(n) = a + b n over a window of (n, seconds) observations."""

    def __init__(self, prior_a: float = PRIOR_A, prior_b: float = PRIOR_B, window: int = WINDOW):
        self.samples: deque = deque(maxlen=window)  # (n tokens, seconds)
        self.prior = (prior_a, prior_b)
        self._fit: Optional[tuple] = None

    def observe(self, n: int, seconds: float) -> None:
        if n > 0 and seconds > 0:
            self.samples.append((n, seconds))
            self._fit = None

    def coefficients(self) -> tuple:
        """(a, b) in seconds and seconds per token; the prior (relative units) until the data
        holds two step sizes."""
        if self._fit is None:
            self._fit = self._solve()
        return self._fit

    @property
    def measured(self) -> bool:
        return len({n for n, _ in self.samples}) >= 2

    def _solve(self) -> tuple:
        if not self.measured:
            return self.prior
        n = len(self.samples)
        sx = sum(x for x, _ in self.samples)
        sy = sum(y for _, y in self.samples)
        sxx = sum(x * x for x, _ in self.samples)
        sxy = sum(x * y for x, y in self.samples)
        den = n * sxx - sx * sx
        b = (n * sxy - sx * sy) / den if den > 0 else 0.0
        b = max(b, 0.0)
        a = max((sy - b * sx) / n, 1e-9)
        return a, b

    def __call__(self, n: float) -> float:
        a, b = self.coefficients()
        return a + b * n
