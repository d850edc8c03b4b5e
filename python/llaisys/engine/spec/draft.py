"""The draft-model proposer: a smaller model with the target's tokenizer guesses k tokens per
request, batched across requests, in its own KV cache (BLOCK layout, its own block manager).

Each propose() runs at most max(k) draft steps, each one llaisysModelStep over all the
requests still drafting: the first computes the tokens the draft has not seen yet (the prompt
for a new request, the tokens accepted since the last round and the last known token) and
samples d_0 at the last; step i computes d_{i-1} and samples d_i. Drafts are sampled with the
request's own sampling parameters (temperature, top-k/p, min-p, penalties with the earlier
drafts counted as output, logit bias): greedy rows by the core's sampler, rows at temperature
> 0 from the processed distribution q (llaisysSampleProbs), which is returned for
verification. The draft's KV of a request is reconciled with the request's tokens at the next
call (the longest common prefix stays, the rest is truncated), so rejected drafts, preemption
and recomputation need no message; finished requests are dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from ...sampling_probs import sample_probs
from ..kv_cache_manager import KVCacheManager
from ..model_runner import row_sampling
from .cost import DraftCost
from .proposer import Draft

_DRAFT_TAG = 0xd4af7  # separates the draft's draws from the target's (seed, step) stream


@dataclass(eq=False)
class _DraftSeq:
    """What the draft's block manager sees of one request."""

    request_id: str
    num_computed_tokens: int = 0  # tokens whose K/V is in the draft cache
    tokens: list = field(default_factory=list)  # [num_computed_tokens] those tokens
    slot_seq_id: Optional[int] = None  # unused (BLOCK layout)
    is_pooling: bool = False
    block_hashes: list = field(default_factory=list)


def common_prefix(a: list, b: list) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    x, y = np.asarray(a[:n], np.int64), np.asarray(b[:n], np.int64)
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if diff.size else n


class DraftModelProposer:
    kind = "draft"

    def __init__(self, worker, num_blocks: int, block_size: int, num_speculative_tokens: int):
        self.worker = worker  # engine.worker.Worker of the draft model (owned: closed by close())
        self.model = worker.model
        self.block_size = block_size
        self.cache = self.model.create_kv_cache("block", n_slots=num_blocks * block_size, block_size=block_size,
                                                dtype=worker.kv_dtype)
        self.kv = KVCacheManager(num_blocks, block_size, enable_prefix_caching=False, layout="block")
        self.seqs: dict = {}  # request id -> _DraftSeq
        # the draft's time per row and round and per catch-up token (for the cost model); a row
        # in steady state computes at most k + 1 tokens in a round (those accepted, and the last)
        self.cost = DraftCost(catchup_min=num_speculative_tokens + 1)

    # ---- state ---------------------------------------------------------------------------
    def _sync(self, req) -> _DraftSeq:
        """The request's draft state, its KV cut back to the prefix it shares with the
        request's tokens (and at most every token but the last)."""
        seq = self.seqs.get(req.request_id)
        if seq is None:
            seq = self.seqs[req.request_id] = _DraftSeq(req.request_id)
        keep = min(common_prefix(seq.tokens, req.all_token_ids), req.num_tokens - 1)
        if keep < seq.num_computed_tokens:
            seq.tokens = seq.tokens[:keep]
            seq.num_computed_tokens = keep
            self.kv.truncate(seq, keep)
        return seq

    def catchup_tokens(self, req) -> int:
        """Tokens of the request the draft has not computed (its whole prompt when new): an upper
        bound, without reconciling the draft's KV."""
        seq = self.seqs.get(req.request_id)
        return req.num_tokens - (0 if seq is None else min(seq.num_computed_tokens, req.num_tokens - 1))

    def drop(self, request_id: str) -> None:
        seq = self.seqs.pop(request_id, None)
        if seq is not None:
            self.kv.free(seq)

    def close(self) -> None:
        for rid in list(self.seqs):
            self.drop(rid)
        self.cache.close()
        self.worker.close()

    # ---- proposing -----------------------------------------------------------------------
    def propose(self, requests: Sequence, num_tokens: Sequence[int]) -> list:
        drafts = [Draft([]) for _ in requests]
        rows = []  # (index, request, seq, k) of the requests that draft
        for i, (req, k) in enumerate(zip(requests, num_tokens)):
            if k <= 0:
                continue
            seq = self._sync(req)
            new = req.num_tokens - seq.num_computed_tokens  # catch-up tokens, the last known one included
            if not self.kv.allocate_slots(seq, new + k - 1):  # room for every round now
                self.drop(req.request_id)  # out of draft KV: this request does not speculate now
                continue
            rows.append((i, req, seq, k))
        if not rows:
            return drafts
        probs = {i: [] for i, req, _, _ in rows if req.sampling_params.temperature > 0}
        for rnd in range(max(k for *_, k in rows)):
            live = [(i, req, seq, k) for i, req, seq, k in rows if k > rnd]
            self._round(rnd, live, drafts, probs)
        for i, req, seq, k in rows:
            d = drafts[i].token_ids
            seq.tokens = list(req.all_token_ids) + d[:k - 1]
            seq.num_computed_tokens = len(seq.tokens)
            if i in probs:
                drafts[i].probs = np.stack(probs[i])  # [k, vocab]
        return drafts

    def _round(self, rnd: int, live: list, drafts: list, probs: dict) -> None:
        """One draft step: round 0 computes each row's unseen tokens, round r > 0 the draft
        d_{r-1}; every row samples its next draft at its last token."""
        chunks, starts = [], []
        for i, req, seq, _ in live:
            if rnd == 0:
                chunks.append(req.all_token_ids[seq.num_computed_tokens:])
                starts.append(seq.num_computed_tokens)
            else:
                chunks.append([drafts[i].token_ids[rnd - 1]])
                starts.append(req.num_tokens - 1 + rnd)
        q_lens = np.fromiter((len(c) for c in chunks), np.int64, len(chunks))
        query_start = np.zeros(len(chunks) + 1, np.int32)
        np.cumsum(q_lens, out=query_start[1:])
        n = int(query_start[-1])
        token_ids = np.fromiter((t for c in chunks for t in c), np.int64, n)  # [n]
        starts_a = np.asarray(starts, np.int64)
        positions = np.arange(n, dtype=np.int64) + np.repeat(starts_a - query_start[:-1], q_lens)  # [n]
        seq_of_token = np.repeat(np.arange(len(chunks)), q_lens)
        tables = [self.kv.block_table(seq.request_id) for _, _, seq, _ in live]
        block_tables = np.zeros((len(live), max(len(t) for t in tables)), np.int32)  # [n_rows, max_blocks]
        for r, t in enumerate(tables):
            block_tables[r, :len(t)] = t
        bs = self.block_size
        slot_mapping = block_tables[seq_of_token, positions // bs].astype(np.int64) * bs + positions % bs  # [n]
        sampling = [row_sampling(req, rnd, drafts[i].token_ids[:rnd]) for i, req, _, _ in live]
        want_logits = any(i in probs for i, *_ in live)
        catchup = int(q_lens[q_lens > self.cost.catchup_min].sum())  # rows beyond steady state (new prompts)
        t0 = time.perf_counter()
        res = self.model.step(self.cache, token_ids=token_ids, positions=positions, query_start=query_start,
                              sample_rows=query_start[1:] - 1, slot_mapping=slot_mapping, block_tables=block_tables,
                              context_lens=(starts_a + q_lens).astype(np.int32), sampling=sampling,
                              want_logits=want_logits, want_logprobs=False)
        self.cost.observe(len(live), catchup, time.perf_counter() - t0)
        sampled_rows = [r for r, (i, *_) in enumerate(live) if i in probs]
        q = sample_probs(res.logits[sampled_rows], [sampling[r] for r in sampled_rows]) if sampled_rows else None
        for r, (i, req, _, _) in enumerate(live):
            if i in probs:
                qi = q[sampled_rows.index(r)]  # [vocab]
                probs[i].append(qi)
                rng = np.random.Generator(np.random.PCG64([req.seed % 2 ** 64, req.num_output_tokens + rnd,
                                                           _DRAFT_TAG]))
                cdf = np.cumsum(qi, dtype=np.float64)
                tok = int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(cdf) - 1))
            else:
                tok = int(res.token_ids[r])
            drafts[i].token_ids.append(tok)
