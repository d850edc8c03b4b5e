"""Verification: which draft tokens a speculating row keeps.

A row that proposed drafts d_0..d_{k-1} was computed at its last known token and every draft,
so the step sampled a target token t_i at each of its k + 1 positions (position i sampled
with step = num_output_tokens + i and the drafts before it counted as output, exactly as a
non-speculative step would have sampled there; model_runner.row_sampling).

- A deterministic draft (greedy rows, the n-gram proposer at any temperature: q is a point
  mass on d_i): keep d_i while t_i == d_i; the first mismatch emits t_i; if all match, t_k is
  the bonus token. For q = δ(d) this is the speculative-sampling rule itself: t_i ~ p_i, so
  d_i is kept with probability p_i(d_i) = min(1, p/q), and on a mismatch t_i is a draw from p_i
  given t_i != d_i, which is norm(max(0, p_i - q_i)). Greedy outputs are those of plain
  decoding token for token; seeded sampled outputs too (same (seed, step) draws).
- A sampled draft (the draft model at temperature > 0; q_i its processed distribution): keep
  d_i with probability min(1, p_i(d_i) / q_i(d_i)) (u from the row's own generator), else emit
  a draw from norm(max(0, p_i - q_i)) and stop; if all are kept, t_k (a draw from p_k) is the
  bonus. p_i is the target's processed distribution (llaisysSampleProbs of the row's logits
  with the same sampling parameters as q_i; SpecDecoder.verifier computes it for the step).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np


_TAG = 0x5bec_0a11  # separates the acceptance stream from every other use of a request's seed


def accept_greedy(drafts: Sequence[int], target_ids: np.ndarray) -> list:
    """Tokens emitted for point-mass drafts: the matching prefix, then the target's token."""
    n = 0
    while n < len(drafts) and int(target_ids[n]) == int(drafts[n]):
        n += 1
    return [int(t) for t in drafts[:n]] + [int(target_ids[n])]


def acceptance_rng(seed: int, step: int) -> np.random.Generator:
    """The generator of one verification: depends only on the request's seed and its step."""
    return np.random.Generator(np.random.PCG64([seed % 2 ** 64, step % 2 ** 64, _TAG]))


def accept_sampled(drafts: Sequence[int], q: np.ndarray, p: np.ndarray, bonus: int,
                   rng: np.random.Generator) -> list:
    """Tokens emitted by the speculative-sampling rule. q: [k, vocab] draft distributions; p:
    [k, vocab] the target's at the same positions; bonus: the target's draw at position k."""
    out = []
    for i, d in enumerate(drafts):
        d = int(d)
        pd, qd = float(p[i, d]), float(q[i, d])
        if qd > 0.0 and rng.random() < min(1.0, pd / qd):
            out.append(d)
            continue
        resid = np.maximum(p[i].astype(np.float64) - q[i], 0.0)
        total = resid.sum()
        if not total > 0.0:  # p <= q everywhere: only when p == q (rounding); p itself is the law
            resid, total = p[i].astype(np.float64), float(p[i].sum())
        cdf = np.cumsum(resid)
        out.append(int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(cdf) - 1)))
        return out
    return out + [int(bonus)]


def verify_row(drafts: Sequence[int], q: Optional[np.ndarray], target_ids: np.ndarray, p: Optional[np.ndarray],
               seed: int, step: int) -> list:
    """The tokens a row emits (1 to k + 1). target_ids: [k + 1] the step's samples at the row's
    positions; q: [k, vocab] the drafts' distributions or None (point masses); p: [k, vocab] the
    target's processed distributions at the draft positions (needed when q is given)."""
    if q is None or not drafts:
        return accept_greedy(drafts, target_ids)
    if p is None:
        raise RuntimeError("a sampled draft needs the target's distributions to verify")
    return accept_sampled(drafts, q, p, int(target_ids[len(drafts)]), acceptance_rng(seed, step))
