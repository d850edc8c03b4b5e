"""Cache reuse (llama-server's --cache-reuse N): cached K/V taken at a new position.

The prefix cache stops at the first block that changed. When an editor's ring of chunks moves
(a chunk appended, the oldest dropped), every token after the change sits at a new position,
its chained block hashes differ, and it would be computed again although its K/V is in the
cache, shifted. With ``cache_reuse = N > 0``, admission walks the tokens of a recent request
(the source: its full blocks still in the prefix cache) and the new prompt together, as
llama-server does with a slot's tokens: after their common prefix, where the prompt's next
tokens continue as a run of at least N tokens somewhere further on in the source, that run
is taken (its K/V copied into the request's fresh blocks with the keys re-rotated by the
position delta: ``KVCache.copy_shift``) and the walk goes on after it; where they do not,
the source advances one token. The reused prefix is contiguous; the request computes the rest.

An approximation, hence opt-in (default 0, as in llama-server): a reused token's K/V was
computed after the source's preceding tokens, not the prompt's. It is exact for layer 0 (K and
V depend on the token and its position only) and for the common-prefix part (delta 0, same
context). The reused blocks enter the prefix cache like computed ones (as llama-server's slot
keeps its shifted cache), so a later request sharing that prefix gets the same approximation.
BLOCK layout, on the CPU or an NVIDIA GPU (llaisysKVCacheCopyShift has a kernel for each).
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

log = logging.getLogger(__name__)

MAX_SOURCES = 4  # recent requests remembered as sources (the walk runs over each)
_SCAN = 4096  # source positions compared per slice in find_run (bounds its memory)


def check_cache_reuse(value, kv_layout: str = "block", enable_prefix_caching: Optional[bool] = None,
                      device: str = "cpu") -> int:
    """The minimum run length (0: off), or a ValueError naming cache_reuse."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"cache_reuse must be an integer >= 0 (0: off), got {value!r}")
    if not value:
        return 0
    if _name(kv_layout) != "block":
        raise ValueError("cache_reuse needs kv_layout='block' (the SLOT layout is not supported)")
    if enable_prefix_caching is False:
        raise ValueError("cache_reuse needs the prefix cache (it reuses cached blocks)")
    if _name(device) not in ("cpu", "nvidia"):
        raise ValueError(f"cache_reuse runs on the CPU and NVIDIA GPUs, not on device {_name(device)!r}")
    return int(value)


def _name(v) -> str:
    """An enum member's or a string's lower-case name ('block', 'cpu')."""
    return str(getattr(v, "name", v)).lower()


def common_length(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common prefix of two 1-D arrays."""
    m = min(len(a), len(b))
    diff = np.flatnonzero(a[:m] != b[:m])
    return int(diff[0]) if diff.size else m


def find_run(source: np.ndarray, start: int, window: np.ndarray) -> int:
    """The first c >= start with source[c:c + len(window)] == window, or -1."""
    n = len(window)
    for c0 in range(start, len(source) - n + 1, _SCAN):
        view = sliding_window_view(source[c0:c0 + _SCAN + n - 1], n)  # [<= _SCAN, n]
        cand = np.flatnonzero(view[:, 0] == window[0])
        if cand.size:
            ok = np.flatnonzero((view[cand] == window).all(axis=1))
            if ok.size:
                return c0 + int(cand[ok[0]])
    return -1


def walk(source: np.ndarray, prompt: np.ndarray, head_c: int, head_p: int, min_run: int) -> list:
    """llama-server's cache-reuse walk: runs (src, dst, n) that make prompt[head_p:end] out of
    source tokens, contiguous from head_p. The common run at the start (head_c == head_p) is
    taken at any length; after it, only runs of >= min_run tokens. Linear in len(source) * min_run."""
    runs = []
    if head_c == head_p:
        n = common_length(source[head_c:], prompt[head_p:])
        if n:
            runs.append((head_c, head_p, n))
            head_c, head_p = head_c + n, head_p + n
    while head_c < len(source) and head_p + min_run <= len(prompt):
        c = find_run(source, head_c, prompt[head_p:head_p + min_run])
        if c < 0:
            break
        n = min_run + common_length(source[c + min_run:], prompt[head_p + min_run:])
        runs.append((c, head_p, n))
        head_c, head_p = c + n, head_p + n
    return runs


@dataclass
class ReusePlan:
    """Tokens of a request past its prefix-cache hit that admission copies from a source."""

    runs: list  # [(src position, dst position, n)] in order, contiguous from the hit's end
    src_blocks: list  # [block id] the source's resident blocks, by source position // block_size
    num_tokens: int  # the request's computed tokens once copied (the hit + the runs)

    @property
    def num_reused(self) -> int:
        return sum(n for _, _, n in self.runs)

    def blocks_read(self, block_size: int) -> set:
        """The source blocks the copy reads."""
        out = set()
        for c, _, n in self.runs:
            out.update(self.src_blocks[c // block_size:(c + n - 1) // block_size + 1])
        return out


@dataclass
class ReuseStats:
    """Counters since start-up."""

    requests: int = 0  # admissions that took tokens from a source
    tokens: int = 0  # tokens copied (their compute saved)
    failures: int = 0  # copies that failed (the tokens were computed instead)


class CacheReuse:
    """The KV manager's cache-reuse helper: remembers recent requests' cached tokens, plans
    the runs for a new request and copies them (KVCacheManager.reuse)."""

    def __init__(self, min_run: int, cache, max_sources: int = MAX_SOURCES):
        self.min_run = check_cache_reuse(min_run)
        if self.min_run < 1:
            raise ValueError("CacheReuse needs cache_reuse >= 1")
        self.cache = cache  # llaisys.kv_cache.KVCache (copy_shift)
        self.sources: deque = deque(maxlen=max_sources)  # (ids int64 [n_blocks * bs], [block hash]) newest last
        self.stats = ReuseStats()

    def remember(self, req, num_blocks: int, block_size: int) -> None:
        """Keep the request's first num_blocks blocks (hashed into the prefix cache) as a source."""
        num_blocks = min(num_blocks, len(req.block_hashes))
        if num_blocks < 1 or req.prompt_embeds is not None:  # embedded rows: their ids say nothing
            return
        ids = np.asarray(req.all_token_ids[:num_blocks * block_size], np.int64)
        self.sources.append((ids, list(req.block_hashes[:num_blocks])))

    def plan(self, req, num_hit: int, kv) -> Optional[ReusePlan]:
        """The best plan over the remembered sources for a request whose first num_hit tokens
        come from the prefix cache, or None when none reaches further."""
        bs = kv.block_size
        limit = req.num_tokens - 1  # the last known token is always computed (its logits)
        if req.prompt_embeds is not None or limit <= num_hit:
            return None
        prompt = np.asarray(req.all_token_ids[:limit], np.int64)
        best = None
        for ids, hashes in reversed(self.sources):  # newest first: it wins a tie
            blocks = _resident(kv, ids, hashes)
            source = ids[:len(blocks) * bs]
            head_c = min(num_hit, common_length(source, prompt))
            runs = walk(source, prompt, head_c, num_hit, self.min_run) if len(source) > head_c else []
            end = runs[-1][1] + runs[-1][2] if runs else num_hit
            if end > (best.num_tokens if best else num_hit):
                best = ReusePlan(runs, blocks, end)
        return best

    def apply(self, computed, table: list, block_size: int) -> None:
        """Copy the plan's runs into the request's blocks (`table`, the hit then fresh blocks).
        On a failure the request computes those tokens instead: computed.num_tokens drops to
        the hit and computed.reuse to None."""
        plan = computed.reuse
        try:
            src = np.concatenate([np.arange(c, c + n) for c, _, n in plan.runs])
            dst = np.concatenate([np.arange(p, p + n) for _, p, n in plan.runs])
            src_slots = np.asarray(plan.src_blocks)[src // block_size] * block_size + src % block_size
            dst_slots = np.asarray(table)[dst // block_size] * block_size + dst % block_size
            self.cache.copy_shift(src_slots, dst_slots, dst - src)
        except Exception:  # never fail the admission: the tokens are computed instead
            log.exception("cache reuse: copying %d tokens failed; computing them instead", plan.num_reused)
            self.stats.failures += 1
            computed.num_tokens, computed.reuse = len(computed.block_ids) * block_size, None
            return
        self.stats.requests += 1
        self.stats.tokens += plan.num_reused


def _resident(kv, ids: np.ndarray, hashes: list) -> list:
    """The ids of the source's leading blocks still in the prefix cache, holding its tokens."""
    bs, out = kv.block_size, []
    for i, h in enumerate(hashes):
        bid = kv.cached.get(h)
        if bid is None:
            break
        blk = kv.blocks[bid]
        if blk.parent_hash != (hashes[i - 1] if i else None) or blk.token_ids != tuple(ids[i * bs:(i + 1) * bs]):
            break
        out.append(bid)
    return out
