"""The scheduler's part of speculative decoding: how many drafts a row verifies this step, and
applying a verified row's emitted tokens (scheduler.Scheduler calls both; the drafts come from
the runner's proposers, engine/spec)."""

from __future__ import annotations

from typing import Optional

from .request import Request
from .sched_output import SchedulerOutput


def drafts_fitting(req: Request, n: int, budget: int) -> int:
    """How many of the request's drafts (speculative decoding) this step can verify: none
    unless its chunk reaches its last known token, at most what the budget leaves."""
    if not req.spec_token_ids or req.num_computed_tokens + n != req.num_tokens:
        return 0
    k = min(len(req.spec_token_ids), budget - n)
    if k < len(req.spec_token_ids):
        req.spec_token_ids = req.spec_token_ids[:max(k, 0)]
        if req.spec_probs is not None:
            req.spec_probs = req.spec_probs[:max(k, 0)]
    return max(k, 0)


def advance_spec(sched, req: Request, out: SchedulerOutput, sampled: dict, logprobs: Optional[dict],
                 now: float) -> bool:
    """Apply a verified row: its emitted tokens (accepted drafts + one) are appended; the
    KV of the last known token and the accepted drafts counts as computed, the blocks of
    rejected positions are released (SLOT: their cells are queued for removal), and only
    then are full blocks entered into the prefix cache, so no rejected token is hashed."""
    rid = req.request_id
    tokens = sampled.get(rid) or []
    k = len(out.spec_token_ids[rid])
    base = req.num_computed_tokens + out.num_scheduled_tokens[rid] - k  # the last known token computed
    lps = (logprobs or {}).get(rid) or [None] * len(tokens)
    req.spec_token_ids, req.spec_probs = [], None
    for j, (tok, lp) in enumerate(zip(tokens, lps)):
        status = req.append_token(int(tok), lp, now)
        if status is not None:  # the K/V of positions < base + j is that of the request's tokens
            req.num_computed_tokens = min(base + j, req.num_tokens)
            sched.kv.cache_blocks(req)
            sched.finish(req, status, req.error)
            return True
    # positions base .. base + accepted - 1 hold the accepted drafts; the last emitted token is new
    req.num_computed_tokens = base + max(len(tokens) - 1, 0)
    sched.kv.truncate(req, req.num_computed_tokens)
    req.runner_blocks = min(req.runner_blocks, len(sched.kv.block_table(rid)))  # rejected drafts' blocks went
    sched.kv.cache_blocks(req)
    return bool(tokens)
