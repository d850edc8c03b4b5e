"""The proposer seam: what speculative decoding asks of whatever guesses the next tokens.

A proposer sees the requests that will speculate this step (running, decoding: every known
token but the last is in the target's KV) and how many tokens each may propose, and returns
one Draft per request. The engine verifies the drafts in its one batched step (the target
computes the last known token and every draft token of the row; verify.py accepts a prefix)
and tells the proposer nothing else: a proposer that keeps state per request (the draft
model's KV) must reconcile it with ``req.all_token_ids`` at its next call and drop it in
``drop``.

Where an MTP or EAGLE head plugs in: such a proposer needs the target's final hidden states of
the row's last accepted position (the step can return them: ``llaisysStepOutput_t.hidden``,
``Model.step(want_hidden=True)``) and runs its head over them and the sampled token,
autoregressively k times; its ``propose`` would read the hidden states the previous step left
on the request (a field the runner fills for speculating rows) instead of recomputing the
sequence. No such model is supported yet, so no such proposer exists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

import numpy as np


@dataclass
class Draft:
    """The tokens one proposer guessed for one request."""

    token_ids: list  # [k] proposed ids (k may be 0: nothing to verify)
    # [k, vocab] f32 the distribution each token was drawn from (q of speculative sampling), for
    # rows sampled at temperature > 0; None: each token is deterministic (a point mass)
    probs: Optional[np.ndarray] = None


class Proposer(Protocol):
    """Guesses tokens. ``propose(requests, num_tokens)`` returns one Draft per request with at
    most ``num_tokens[i]`` tokens; ``drop(request_id)`` forgets a request (finished or
    preempted); ``close()`` releases what it holds. ``kind`` names it in stats."""

    kind: str

    def propose(self, requests: Sequence, num_tokens: Sequence[int]) -> list: ...

    def drop(self, request_id: str) -> None: ...

    def close(self) -> None: ...
