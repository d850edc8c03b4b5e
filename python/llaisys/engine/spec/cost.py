"""The measured cost model behind adaptive k and the off-switch.

Step time is modelled as t(n) = a + b n for a step of n tokens, fitted by least squares over
the most recent decode-shaped steps (their token counts and wall times; steps carrying a
prefill chunk are left out: they measure compute-bound prefill, not the decode a draft token
is added to). A draft token adds b to the
target's step (and, with a draft model, its own per-token cost); it is worth proposing when
the tokens it is expected to add per second beat the step's tokens per second without it.
"""

from __future__ import annotations

from collections import deque
from typing import Optional

# Before enough steps are seen: a token costs 2% of a step's fixed cost (decode is a weight
# stream); replaced by the fit as soon as two different step sizes have been timed.
PRIOR_A, PRIOR_B = 1.0, 0.02
WINDOW = 64  # steps kept for the fit (recent ones: the machine's load changes)
MIN_PER_SIZE = 3  # timings a step size needs before it enters the fit (a shared machine's noise)


class LinearCost:
    """Least-squares t(n) = a + b n over a window of (n, seconds) observations."""

    def __init__(self, prior_a: float = PRIOR_A, prior_b: float = PRIOR_B, window: int = WINDOW):
        self.samples: deque = deque(maxlen=window)  # (n tokens, seconds)
        self.prior = (prior_a, prior_b)
        self._fit: Optional[tuple] = None
        self._largest = 0  # the largest step size seen

    def observe(self, n: int, seconds: float) -> None:
        if n > self._largest:  # the first step of a new largest size grows the core's workspace
            self._largest = n
            return
        if n > 0 and seconds > 0:
            self.samples.append((n, seconds))
            self._fit = None

    def coefficients(self) -> tuple:
        """(a, b) in seconds and seconds per token; the prior (relative units) until the data
        holds two step sizes."""
        if self._fit is None:
            self._fit = self._solve()
        return self._fit

    def by_size(self) -> dict:
        """{n: [seconds, ...]} of the sizes timed at least MIN_PER_SIZE times in the window."""
        by_n: dict = {}
        for x, y in self.samples:
            by_n.setdefault(x, []).append(y)
        return {x: ys for x, ys in by_n.items() if len(ys) >= MIN_PER_SIZE}

    @property
    def measured(self) -> bool:
        return len(self.by_size()) >= 2

    def _solve(self) -> tuple:
        """Least squares over the median time of each step size timed MIN_PER_SIZE times or more
        (weighted by how often it was seen): one slow step (a workspace growing, a busy
        neighbour) cannot tilt the line, nor can a size seen once on a quiet moment."""
        by_n = self.by_size()
        if len(by_n) < 2:
            return self.prior
        pts = [(x, sorted(ys)[len(ys) // 2], len(ys)) for x, ys in by_n.items()]
        w = sum(c for _, _, c in pts)
        mx = sum(x * c for x, _, c in pts) / w
        my = sum(y * c for _, y, c in pts) / w
        sxx = sum(c * (x - mx) ** 2 for x, _, c in pts)
        sxy = sum(c * (x - mx) * (y - my) for x, y, c in pts)
        b = max(sxy / sxx if sxx > 0 else 0.0, 0.0)
        a = max(my - b * mx, 1e-9)
        return a, b

    def time_at(self, n: int) -> Optional[float]:
        """Seconds of a step of n tokens: the fit once measured, else the median of the steps of
        that size timed so far (None if none)."""
        if self.measured:
            return self(n)
        ys = sorted(y for x, y in self.samples if x == n)
        return ys[len(ys) // 2] if ys else None

    def __call__(self, n: float) -> float:
        a, b = self.coefficients()
        return a + b * n


class DraftCost:
    """What the draft model costs, from the time of each of its rounds (one model step over the
    rows still drafting). A steady round (every row computing at most the k + 1 tokens accepted
    since its last round: one draft token each) takes a + b rows seconds, a LinearCost over the
    steady rounds: a is the weight stream every round pays however few rows draft, so a row
    drafting alone pays all of it, and a draft token's cost depends on how many rows share the
    round. While one row count only has been timed (batch 1 always), that count's median time is
    taken as a and b as 0: exact at that count, and a round of another size is timed when it
    runs. Catch-up (a new request's prompt, or a row that did not draft for a while: paid once,
    before its first draft) is timed per token, from the rounds that had such rows, less the
    steady cost of their rows (exponentially averaged)."""

    def __init__(self, catchup_min: int, decay: float = 0.8):
        self.catchup_min = catchup_min  # tokens a row computes in a round in steady state, at most
        self.decay = decay
        self.rounds = LinearCost()  # steady rounds: seconds by rows
        self.per_catchup = None  # averaged seconds per catch-up token

    def observe(self, rows: int, catchup_tokens: int, seconds: float) -> None:
        """One round over `rows` rows, of which some computed `catchup_tokens` tokens beyond
        steady state (0: a steady round)."""
        if rows <= 0 or seconds <= 0:
            return
        if catchup_tokens <= 0:
            self.rounds.observe(rows, seconds)
            return
        rest = seconds - (self.round_seconds(rows) if self.measured else 0.0)  # before: all of it
        if rest > 0:
            new = rest / catchup_tokens
            self.per_catchup = new if self.per_catchup is None else self.decay * self.per_catchup + (1 - self.decay) * new

    @property
    def measured(self) -> bool:
        """Whether some round size has been timed MIN_PER_SIZE times."""
        return bool(self.rounds.by_size())

    def coefficients(self) -> tuple:
        """(a, b): seconds per steady round, and per row in it; (0, 0) until measured."""
        if self.rounds.measured:
            return self.rounds.coefficients()
        by_n = self.rounds.by_size()
        if not by_n:
            return 0.0, 0.0
        return self.rounds.time_at(max(by_n, key=lambda n: len(by_n[n]))), 0.0  # the most timed size

    def round_seconds(self, rows: int) -> float:
        a, b = self.coefficients()
        return a + b * rows

    def catchup_seconds(self, n_tokens: int) -> float:
        """Seconds to bring a row n_tokens forward; 0 within steady state, and until a catch-up
        has been timed (the first row to need one pays for the measurement)."""
        if n_tokens <= self.catchup_min or self.per_catchup is None:
            return 0.0
        return n_tokens * self.per_catchup
