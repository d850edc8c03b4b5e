"""KVCacheManager: block ids, ref counts and the prefix cache (pure bookkeeping, no tensors).

The pool has ``num_blocks`` blocks of ``block_size`` token slots. Each running request holds
a block table (its blocks in position order). Full blocks whose K/V has been computed are
keyed by a chained SHA-256 of (parent block hash, token ids; the rows' bytes for a prompt given
as embeddings) and kept in a hash -> block map;
when a request frees them they go to the back of an LRU free queue but stay findable until
a new allocation takes them from the front (eviction). A hit shares the block (ref count + 1)
after comparing the stored parent hash and token ids with the request's (collision safety).

In the SLOT layout the same accounting counts cells conservatively (a sequence of L tokens
holds ceil(L / block_size) blocks' worth), prefix caching is off, and each request that holds
KV also holds a seq id; released seq ids are queued for the runner to clear with seq_rm.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import deque
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from .kv_blocks import UNCACHED, BlockPool, FreeQueue
from .prompt_embeds import embed_digest
from .request import Request


def hash_block_tokens(parent_hash: Optional[bytes], token_ids: Sequence[int], embeds: bytes = b"") -> bytes:
    """SHA-256 over the parent's hash and the block's ids as little-endian int64, then, for a
    block of a prompt given as embeddings, its rows' float32 bytes (prompt_embeds.embed_digest):
    embedded rows are keyed by their values, not by their placeholder ids."""
    h = hashlib.sha256(parent_hash or b"\0" * 32)
    h.update(np.asarray(token_ids, dtype="<i8").tobytes())
    if embeds:
        h.update(b"prompt_embeds")
        h.update(embeds)
    return h.digest()


@dataclass
class ComputedBlocks:
    """A prefix-cache hit: blocks holding the first ``num_tokens`` tokens of a request."""

    block_ids: list  # hit blocks in position order
    num_tokens: int  # len(block_ids) * block_size, plus the tokens a cache-reuse plan copies after them
    reuse: Optional[object] = None  # cache_reuse.ReusePlan: those tokens, copied by allocate_slots


@dataclass
class PrefixCacheStats:
    """Prefix-cache counters since start-up (counted when an admission succeeds)."""

    queries: int = 0  # admissions looked up
    query_hits: int = 0  # lookups that hit at least one block
    query_misses: int = 0  # lookups that hit nothing
    query_tokens: int = 0  # tokens looked up (the requests' known tokens)
    hit_tokens: int = 0  # tokens served from the cache (compute saved)
    evictions: int = 0  # cached blocks reused for other tokens

    @property
    def miss_tokens(self) -> int:
        return self.query_tokens - self.hit_tokens

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.query_tokens if self.query_tokens else 0.0


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 layout: str = "block", max_seq_ids: int = 256):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching and layout == "block"
        self.layout = layout
        self._ref = array("i", bytes(4 * num_blocks))  # [num_blocks] block tables holding each (0: free)
        # block id -> (its hash, the hash of the block before it, its block_size token ids), for
        # the blocks in the prefix cache only
        self._meta: dict = {}
        self.blocks = BlockPool(self)  # the same as KVBlock views (tests, the prompt cache)
        self.free_queue = FreeQueue(num_blocks)  # blocks no table holds, LRU: the front is evicted first
        self.cached: dict = {}  # block hash -> block id
        self.tables: dict = {}  # request id -> [block ids]
        self._num_hashed: dict = {}  # request id -> leading blocks of its table already in the cache
        self.stats = PrefixCacheStats()
        self._free_seq_ids = deque(range(max_seq_ids))  # SLOT: seq ids not held, oldest-freed first
        self.released_seq_ids: list = []  # SLOT: freed since the scheduler last drained them
        self.trims: list = []  # SLOT: (seq id, position) whose cells from position on must go (truncate)
        # a lower tier (prompt_cache.PromptCacheTier: save, restore, contains, start_lookup, miss)
        # that keeps evicted cached blocks and gives them back on a lookup; None: memory only
        self.tier = None
        # cache_reuse.CacheReuse (cache_reuse > 0): takes a request's tokens past its hit from a
        # recent request's cached blocks at another position; None: off
        self.reuse = None

    # ---- queries -------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks no table holds (cached ones included: they can be evicted)."""
        return len(self.free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_queue)

    @property
    def num_cached_blocks(self) -> int:
        return len(self.cached)

    @property
    def usage(self) -> float:
        """Fraction of the pool held by requests."""
        return self.num_used_blocks / self.num_blocks

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def block_table(self, request_id: str) -> list:
        return self.tables.get(request_id, [])

    def can_allocate(self, num_tokens: int) -> bool:
        """Whether a request with no blocks could get KV for num_tokens tokens now."""
        return self.blocks_for(num_tokens) <= len(self.free_queue)

    # ---- prefix cache --------------------------------------------------------------------
    def _hashes(self, req: Request, num_blocks: int) -> list:
        """The request's chained block hashes, at least num_blocks of them (memoised on it)."""
        bs, hashes, emb = self.block_size, req.block_hashes, req.prompt_embeds
        while len(hashes) < num_blocks:
            i = len(hashes)
            key = (hashes[-1] if i else None, req.all_token_ids[i * bs:(i + 1) * bs])
            if emb is not None:  # embedded prompt rows: their bytes too
                key += (embed_digest(emb, i * bs, (i + 1) * bs),)
            hashes.append(hash_block_tokens(*key))
        return hashes

    def get_computed_blocks(self, req: Request) -> ComputedBlocks:
        """The longest cached prefix of the request's tokens, in whole blocks, stopping before
        its last token (that one is always computed so the step has its logits). None for a
        pooling request: it needs the hidden state of every token, so it computes them all
        (its full blocks still enter the cache for others, see cache_blocks)."""
        if not self.enable_prefix_caching or req.is_pooling:
            return ComputedBlocks([], 0)
        bs, hits = self.block_size, []
        n_max = (req.num_tokens - 1) // bs
        for i, h in enumerate(self._hashes(req, n_max)[:n_max]):
            bid = self.cached.get(h)
            if bid is None:
                if self.tier is not None:
                    self._restore_from_tier(req, i, n_max, hits)
                break
            parent = req.block_hashes[i - 1] if i else None
            _, stored_parent, stored = self._meta[bid]
            if stored_parent != parent or stored != tuple(req.all_token_ids[i * bs:(i + 1) * bs]):
                break  # hash collision: not the same tokens
            hits.append(bid)
        if self.reuse is not None:
            plan = self.reuse.plan(req, len(hits) * bs, self)
            if plan is not None:
                return ComputedBlocks(hits, plan.num_tokens, plan)
        return ComputedBlocks(hits, len(hits) * bs)

    def _restore_from_tier(self, req: Request, start: int, n_max: int, hits: list) -> None:
        """Extend `hits` (blocks [0, start) of the request) with its blocks from `start` on that
        the lower tier holds, each read into a free block (never one of the hits) that then
        enters the prefix cache at the back of the LRU queue, as a block just freed would."""
        bs, hashes, tier = self.block_size, req.block_hashes, self.tier
        taken = set(hits)
        tier.start_lookup()
        for i in range(start, n_max):
            h = hashes[i]
            if h in self.cached:  # in memory after a gap: the prefix stops at the gap
                return
            if not tier.contains(h):
                tier.miss()
                return
            bid = next((b for b in self.free_queue if b not in taken), None)
            if bid is None:
                return
            del self.free_queue[bid]
            self._evict(bid)
            parent, tokens = (hashes[i - 1] if i else None), tuple(req.all_token_ids[i * bs:(i + 1) * bs])
            if not tier.restore(bid, h, parent, tokens):
                self.free_queue[bid] = None
                self.free_queue.move_to_end(bid, last=False)  # holds nothing: reused first
                return
            self._meta[bid] = (h, parent, tokens)
            self.cached[h] = bid
            self.free_queue[bid] = None
            hits.append(bid)
            taken.add(bid)

    def cached_blocks(self) -> list:
        """Blocks in the prefix cache, least recently used first (free ones in LRU order, then
        the ones requests hold)."""
        meta = self._meta
        free = [b for b in self.free_queue if b in meta]
        held = [b for b in self.cached.values() if self._ref[b] > 0]
        return [self.blocks[b] for b in free + sorted(held)]

    def cache_blocks(self, req: Request) -> None:
        """Enter the request's newly computed full blocks into the prefix cache. A hash that
        another block already holds leaves this block uncached (it stays private)."""
        if not self.enable_prefix_caching:
            return
        bs = self.block_size
        n_full = req.num_computed_tokens // bs
        start = self._num_hashed.get(req.request_id, 0)
        if start >= n_full:
            return  # no newly completed block (every decode step but one in block_size)
        table = self.tables.get(req.request_id, [])
        n_full = min(n_full, len(table))
        if start >= n_full:
            return
        hashes = self._hashes(req, n_full)
        for i in range(start, n_full):
            bid = table[i]
            if bid not in self._meta and hashes[i] not in self.cached:
                self._meta[bid] = (hashes[i], hashes[i - 1] if i else None,
                                   tuple(req.all_token_ids[i * bs:(i + 1) * bs]))
                self.cached[hashes[i]] = bid
        self._num_hashed[req.request_id] = n_full

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block. Refused (False) while any block is in use."""
        if self.num_used_blocks:
            return False
        for bid in self.cached.values():
            self._uncache(bid)
        self.cached.clear()
        return True

    def _uncache(self, bid: int) -> None:
        self._meta.pop(bid, None)

    # ---- allocation ----------------------------------------------------------------------
    def allocate_slots(self, req: Request, num_new_tokens: int, computed: Optional[ComputedBlocks] = None) -> bool:
        """Give the request blocks for its KV up to (computed tokens + num_new_tokens).

        ``computed`` is given on admission (the hit from get_computed_blocks, possibly empty):
        the hit blocks are shared and the lookup is counted. Returns False, changing nothing,
        when the free pool is too small.
        """
        table = self.tables.get(req.request_id, [])
        if (computed is None and table and len(table) * self.block_size >= req.num_computed_tokens + num_new_tokens
                and (req.slot_seq_id is not None or self.layout != "slot")):
            return True  # its table already covers them (a decode step but one in block_size)
        hit = computed.block_ids if computed is not None else []
        start = computed.num_tokens if computed is not None else req.num_computed_tokens
        need = self.blocks_for(start + num_new_tokens) - len(table) - len(hit)
        ref = self._ref
        reclaimed = sum(1 for b in hit if ref[b] == 0)  # hits now sitting in the free queue
        plan = computed.reuse if computed is not None else None
        read = [b for b in plan.blocks_read(self.block_size) if b in self.free_queue and b not in set(hit)] \
            if plan is not None else []  # free source blocks the copy reads: no allocation below may take them
        if need > len(self.free_queue) - reclaimed - len(read):
            return False
        for bid in read:
            del self.free_queue[bid]
        if self.layout == "slot" and req.slot_seq_id is None:
            req.slot_seq_id = self._free_seq_ids.popleft()
        for bid in hit:
            if ref[bid] == 0:
                del self.free_queue[bid]
            ref[bid] += 1
        table = table + hit + [self._take_free_block() for _ in range(max(need, 0))]
        self.tables[req.request_id] = table
        if plan is not None:
            self.reuse.apply(computed, table, self.block_size)  # on a failure computed falls back to the hit
            for bid in read:  # back in the queue, as just used
                self.free_queue[bid] = None
        if computed is not None:
            self._num_hashed[req.request_id] = len(hit)
            self._count_lookup(req, computed)
        return True

    def _take_free_block(self) -> int:
        bid, _ = self.free_queue.popitem(last=False)
        self._evict(bid)
        self._ref[bid] = 1
        return bid

    def _evict(self, bid: int) -> None:
        """Take a free block out of the prefix cache before it is reused (its K/V goes to the
        lower tier first, if there is one)."""
        meta = self._meta.get(bid)
        if meta is None:
            return
        h = meta[0]
        if self.tier is not None:
            self.tier.save(bid, *meta)
        if self.cached.get(h) == bid:
            del self.cached[h]
        self._uncache(bid)
        self.stats.evictions += 1

    def _count_lookup(self, req: Request, computed: ComputedBlocks) -> None:
        if not self.enable_prefix_caching or req.is_pooling:  # pooling requests do not look up
            return
        s = self.stats
        s.queries += 1
        s.query_tokens += req.num_tokens
        s.hit_tokens += computed.num_tokens
        if computed.num_tokens:
            s.query_hits += 1
        else:
            s.query_misses += 1

    def free(self, req: Request) -> None:
        """Release the request's blocks (tail first into the LRU queue, so the tail is evicted
        before the reusable prefix) and, in the SLOT layout, its seq id."""
        ref = self._ref
        for bid in reversed(self.tables.pop(req.request_id, [])):
            ref[bid] -= 1
            if ref[bid] == 0:
                self.free_queue[bid] = None
        n_hashed = self._num_hashed.pop(req.request_id, None)
        if self.reuse is not None and n_hashed:
            self.reuse.remember(req, n_hashed, self.block_size)
        if req.slot_seq_id is not None:
            self._free_seq_ids.append(req.slot_seq_id)
            self.released_seq_ids.append(req.slot_seq_id)
            req.slot_seq_id = None

    def truncate(self, req: Request, num_tokens: int) -> None:
        """Keep only the blocks that hold the first ``num_tokens`` tokens of the request and
        release the rest (speculative decoding: the blocks of rejected draft positions).
        Blocks past the request's computed full blocks were never hashed, so no rejected
        token enters the prefix cache. In the SLOT layout the cells past ``num_tokens`` are
        queued for the runner to remove (``take_trims``) before the seq is computed again."""
        table = self.tables.get(req.request_id)
        if table is None:
            return
        keep = self.blocks_for(num_tokens)
        assert keep >= self._num_hashed.get(req.request_id, 0), "truncating a block in the prefix cache"
        ref = self._ref
        for bid in reversed(table[keep:]):
            ref[bid] -= 1
            if ref[bid] == 0:
                self.free_queue[bid] = None
        del table[keep:]
        if self.layout == "slot" and req.slot_seq_id is not None:
            self.trims.append((req.slot_seq_id, num_tokens))

    def take_trims(self) -> list:
        """SLOT: (seq id, first position to drop) queued by truncate since the last call."""
        out, self.trims = self.trims, []
        return out

    def take_released_seq_ids(self) -> list:
        """SLOT: seq ids freed since the last call (the runner clears them before the next step)."""
        out, self.released_seq_ids = self.released_seq_ids, []
        return out

    # ---- invariants (tests) --------------------------------------------------------------
    def check_invariants(self) -> None:
        """Raise AssertionError if the bookkeeping is inconsistent."""
        def fail(msg):
            raise AssertionError(f"KVCacheManager: {msg}")

        holders = [0] * self.num_blocks
        for rid, table in self.tables.items():
            if len(set(table)) != len(table):
                fail(f"table of {rid} holds a block twice: {table}")
            for bid in table:
                holders[bid] += 1
        for bid, ref in enumerate(self._ref):
            h = self._meta.get(bid, UNCACHED)[0]
            if ref != holders[bid]:
                fail(f"block {bid} ref_cnt {ref} but {holders[bid]} tables hold it")
            if (ref == 0) != (bid in self.free_queue):
                fail(f"block {bid} (ref_cnt {ref}) is {'not ' if ref == 0 else ''}free")
            if h is not None and self.cached.get(h) != bid:
                fail(f"block {bid} has a hash the map does not point at it")
        if len(self.free_queue) != len(set(self.free_queue)):
            fail("free queue holds duplicates")
        for h, bid in self.cached.items():
            if self._meta.get(bid, UNCACHED)[0] != h:
                fail(f"map entry for block {bid} does not match the block's hash")
        if self.layout == "slot" and len(self._free_seq_ids) != len(set(self._free_seq_ids)):
            fail("free seq ids hold duplicates")
