"""N-gram prompt lookup: find the request's last n tokens earlier in its prompt + output and
propose the tokens that followed (n from ngram_max down to ngram_min, longest first; the
latest earlier occurrence wins)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .proposer import Draft


def ngram_lookup(tokens: np.ndarray, k: int, n_max: int, n_min: int) -> list:
    """Up to k ids following the latest earlier occurrence of the last n ids of ``tokens``
    ([n_tokens] int64), for the largest n in [n_min, n_max] that occurs; [] if none does."""
    total = int(tokens.shape[0])
    for n in range(min(n_max, total - 1), n_min - 1, -1):
        suffix = tokens[total - n:]
        # windows [i, i + n) for i in [0, total - n): every earlier start (the suffix itself excluded)
        windows = np.lib.stride_tricks.sliding_window_view(tokens[:total - 1], n)
        hits = np.flatnonzero((windows == suffix).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return tokens[start:start + k].tolist()
    return []


class NgramProposer:
    """Prompt lookup over each request's own tokens; keeps no state."""

    kind = "ngram"

    def __init__(self, n_max: int = 4, n_min: int = 1):
        self.n_max, self.n_min = n_max, n_min

    def propose(self, requests: Sequence, num_tokens: Sequence[int]) -> list:
        out = []
        for req, k in zip(requests, num_tokens):
            ids = np.asarray(req.all_token_ids, np.int64) if k > 0 else None
            out.append(Draft(ngram_lookup(ids, k, self.n_max, self.n_min) if k > 0 else []))
        return out

    def drop(self, request_id: str) -> None:
        pass

    def close(self) -> None:
        pass
