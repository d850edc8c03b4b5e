"""The KV block pool's structures: KVBlock and BlockPool (KVCacheManager.blocks), FreeQueue.

KVCacheManager (kv_cache_manager.py) keeps each block's ref count in an array and the prefix
cache's fields of a block (its hash, its parent's hash, its token ids) in a map of the cached
blocks only, so that a pool of any size is a few objects for Python's garbage collector. These
views give the per-block fields an object's face, made on access, for tests and the prompt cache.
"""

from __future__ import annotations

from array import array

UNCACHED = (None, None, None)


def _cached_field(i: int, doc: str) -> property:
    return property(lambda self: self._kv._meta.get(self.block_id, UNCACHED)[i], doc=doc)


class KVBlock:
    """One block of the pool, as a view. KVCacheManager keeps the ref counts in an array and the
    prefix cache's fields in a map of the cached blocks only, so the pool is no Python object a
    block for the garbage collector to walk: as objects, 262,144 of them made every full
    collection 52 ms, a stall of the engine's loop (doc/engine.md, "The pool and the garbage
    collector")."""

    __slots__ = ("_kv", "block_id")

    def __init__(self, kv, block_id: int):
        self._kv, self.block_id = kv, block_id  # the KVCacheManager; block_id: index into the pool

    @property
    def ref_cnt(self) -> int:
        """Block tables holding it; 0: in the free queue."""
        return self._kv._ref[self.block_id]

    @ref_cnt.setter
    def ref_cnt(self, value: int) -> None:
        self._kv._ref[self.block_id] = value

    block_hash = _cached_field(0, "its hash while it is in the prefix cache, else None")
    parent_hash = _cached_field(1, "the hash of the block before it when it was cached")
    token_ids = _cached_field(2, "the block_size ids its K/V stands for, when cached")


class BlockPool:
    """KVCacheManager.blocks: the pool as a sequence of KVBlock views, made on access."""

    __slots__ = ("_kv",)

    def __init__(self, kv):
        self._kv = kv  # the KVCacheManager

    def __len__(self) -> int:
        return self._kv.num_blocks

    def __getitem__(self, bid: int) -> KVBlock:
        if not -self._kv.num_blocks <= bid < self._kv.num_blocks:
            raise IndexError(f"block {bid} is not in a pool of {self._kv.num_blocks}")
        return KVBlock(self._kv, bid % self._kv.num_blocks)

    def __iter__(self):
        return (KVBlock(self._kv, b) for b in range(self._kv.num_blocks))


class FreeQueue:
    """The pool's free blocks in LRU order (the front is taken first), with OrderedDict's face
    for what KVCacheManager uses (len, in, del, q[bid] = None appends, popitem(last=False),
    move_to_end, iteration front to back), kept as a doubly linked list in two arrays: O(1)
    each, and no object per entry for the garbage collector (an OrderedDict of 2,097,152
    blocks made a full collection 40 ms)."""

    __slots__ = ("_next", "_prev", "_in", "_len", "_end")

    def __init__(self, num_blocks: int):
        end = self._end = num_blocks  # the sentinel: _next[end] is the front, _prev[end] the back
        self._next = array("i", range(1, end + 1))  # [num_blocks + 1]
        self._next.append(0 if end else end)
        self._prev = array("i", [end])  # [num_blocks + 1]
        self._prev.extend(range(end))
        self._prev[end] = end - 1 if end else end
        self._in = bytearray(b"\x01") * end  # [num_blocks] 1 while queued
        self._len = end

    def __len__(self) -> int:
        return self._len

    def __contains__(self, bid) -> bool:
        return 0 <= bid < self._end and self._in[bid] == 1

    def __iter__(self):
        nxt, b = self._next, self._next[self._end]
        while b != self._end:
            yield b
            b = nxt[b]

    def _unlink(self, bid: int) -> None:
        if not (0 <= bid < self._end and self._in[bid]):
            raise KeyError(bid)
        p, n = self._prev[bid], self._next[bid]
        self._next[p], self._prev[n] = n, p
        self._in[bid] = 0
        self._len -= 1

    def _link(self, bid: int, front: bool) -> None:
        if front:
            p, n = self._end, self._next[self._end]
        else:
            p, n = self._prev[self._end], self._end
        self._prev[bid], self._next[bid] = p, n
        self._next[p], self._prev[n] = bid, bid
        self._in[bid] = 1
        self._len += 1

    def __delitem__(self, bid: int) -> None:
        self._unlink(bid)

    def __setitem__(self, bid: int, _value) -> None:
        """Queue a block at the back (a block already queued keeps its place, as in an OrderedDict)."""
        if not 0 <= bid < self._end:
            raise KeyError(bid)
        if not self._in[bid]:
            self._link(bid, front=False)

    def popitem(self, last: bool = True) -> tuple:
        if not self._len:
            raise KeyError("popitem(): the free queue is empty")
        bid = self._prev[self._end] if last else self._next[self._end]
        self._unlink(bid)
        return bid, None

    def move_to_end(self, bid: int, last: bool = True) -> None:
        self._unlink(bid)
        self._link(bid, front=not last)
