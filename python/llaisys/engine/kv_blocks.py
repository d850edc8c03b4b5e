"""The KV block pool as views: KVBlock and BlockPool (KVCacheManager.blocks).

KVCacheManager (kv_cache_manager.py) keeps each block's ref count in an array and the prefix
cache's fields of a block (its hash, its parent's hash, its token ids) in a map of the cached
blocks only, so that a pool of any size is a few objects for Python's garbage collector. These
views give the per-block fields an object's face, made on access, for tests and the prompt cache.
"""

from __future__ import annotations

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
