"""The block manager: allocation, prefix caching (hits, LRU eviction, collision safety),
sharing, counters and the invariant checker."""

import pytest

from llaisys.engine import KVCacheManager, Request, RequestTimes, SamplingParams
from llaisys.engine import kv_cache_manager as kvm

BS = 4


def req(rid, tokens):
    return Request(rid, rid, 0, list(tokens), SamplingParams(), seed=0, max_tokens=8,
                   eos_token_ids=frozenset(), times=RequestTimes(0.0))


def admit(kv, r):
    """Admission as the scheduler does it; returns the hit."""
    hit = kv.get_computed_blocks(r)
    assert kv.allocate_slots(r, r.num_tokens - hit.num_tokens, hit)
    r.num_computed_tokens = hit.num_tokens
    return hit


def compute_all(kv, r):
    r.num_computed_tokens = r.num_tokens
    kv.cache_blocks(r)


def test_allocate_and_free_round_trip():
    kv = KVCacheManager(8, BS)
    a = req("a", range(10))
    assert kv.can_allocate(10) and not kv.can_allocate(33)
    admit(kv, a)
    assert len(kv.block_table("a")) == 3 and kv.num_used_blocks == 3 and kv.num_free_blocks == 5
    a.num_computed_tokens = 10
    assert kv.allocate_slots(a, 2)  # positions 10, 11 fit in block 3
    assert len(kv.block_table("a")) == 3
    assert kv.allocate_slots(a, 3)  # 13 tokens: 4 blocks
    assert len(kv.block_table("a")) == 4
    kv.check_invariants()
    kv.free(a)
    assert kv.num_used_blocks == 0 and kv.usage == 0.0
    kv.check_invariants()


def test_allocation_failure_changes_nothing():
    kv = KVCacheManager(3, BS)
    a, b = req("a", range(8)), req("b", range(100, 108))
    admit(kv, a)
    assert not kv.allocate_slots(b, 8, kv.get_computed_blocks(b))
    assert "b" not in kv.tables and kv.num_free_blocks == 1
    kv.check_invariants()
    kv.free(a)


def test_second_turn_reuses_first_turns_blocks_and_counts():
    kv = KVCacheManager(16, BS)
    turn1 = req("t1", range(10))  # blocks [0..3] [4..7] full, [8, 9] partial
    hit = admit(kv, turn1)
    assert hit.num_tokens == 0
    compute_all(kv, turn1)
    t1_blocks = kv.block_table("t1")
    kv.free(turn1)
    assert kv.num_cached_blocks == 2  # only full blocks are cached
    turn2 = req("t2", list(range(10)) + [50, 51, 52, 53, 54])
    hit = admit(kv, turn2)
    assert hit.num_tokens == 8 and hit.block_ids == t1_blocks[:2]
    assert kv.block_table("t2")[:2] == t1_blocks[:2]
    s = kv.stats
    assert (s.queries, s.query_hits, s.query_misses) == (2, 1, 1)
    assert (s.query_tokens, s.hit_tokens, s.miss_tokens) == (25, 8, 17)
    assert s.hit_rate == pytest.approx(8 / 25)
    kv.check_invariants()
    kv.free(turn2)


def test_hit_never_covers_the_last_token():
    kv = KVCacheManager(16, BS)
    a = req("a", range(8))  # exactly two full blocks
    admit(kv, a)
    compute_all(kv, a)
    kv.free(a)
    again = req("b", range(8))
    hit = admit(kv, again)
    assert hit.num_tokens == 4  # the last block is recomputed so token 7 has logits
    kv.free(again)


def test_shared_blocks_ref_counts_and_fork():
    kv = KVCacheManager(16, BS)
    a = req("a", range(9))
    admit(kv, a)
    compute_all(kv, a)
    siblings = [req(f"s{i}", range(9)) for i in range(3)]
    for s in siblings:
        assert admit(kv, s).num_tokens == 8
    shared = kv.block_table("a")[:2]
    assert all(kv.blocks[b].ref_cnt == 4 for b in shared)
    kv.check_invariants()
    for r in [a] + siblings:
        kv.free(r)
    assert all(kv.blocks[b].ref_cnt == 0 for b in shared)
    kv.check_invariants()


def test_lru_eviction_under_pressure():
    kv = KVCacheManager(4, BS)
    old, new = req("old", range(5)), req("new", range(100, 105))
    for r in (old, new):
        admit(kv, r)
        compute_all(kv, r)
        kv.free(r)
    assert kv.num_cached_blocks == 2 and kv.num_free_blocks == 4
    # a 3-block request takes the two uncached blocks first, then evicts the oldest cached one
    big = req("big", range(200, 212))
    admit(kv, big)
    assert kv.stats.evictions == 1 and kv.num_cached_blocks == 1
    assert kv.get_computed_blocks(req("x", range(5))).num_tokens == 0  # "old" was evicted
    assert kv.get_computed_blocks(req("y", range(100, 105))).num_tokens == 4  # "new" survives
    kv.free(big)
    kv.check_invariants()


def test_hit_on_a_free_cached_block_needs_no_free_space_for_it():
    kv = KVCacheManager(2, BS)
    a = req("a", range(5))
    admit(kv, a)
    compute_all(kv, a)
    kv.free(a)
    b = req("b", range(6))  # hits block 0 (sitting in the free queue) and needs one more
    hit = admit(kv, b)
    assert hit.num_tokens == 4 and kv.num_free_blocks == 0
    kv.free(b)
    kv.check_invariants()


@pytest.mark.parametrize("fake_hash", [
    lambda parent, tokens: b"same",  # every block collides
    lambda parent, tokens: bytes(str(list(tokens)), "ascii"),  # ignores the chain
])
def test_hash_collisions_never_give_false_hits(monkeypatch, fake_hash):
    monkeypatch.setattr(kvm, "hash_block_tokens", fake_hash)
    kv = KVCacheManager(16, BS)
    first = req("a", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    admit(kv, first)
    compute_all(kv, first)
    kv.free(first)
    for tokens in ([9, 9, 9, 9, 5, 6, 7, 8, 9], [1, 2, 3, 4, 9, 9, 9, 9, 9], [0, 2, 3, 4, 5, 6, 7, 8, 9]):
        other = req("b", tokens)
        hit = kv.get_computed_blocks(other)
        for i, bid in enumerate(hit.block_ids):  # whatever hit holds exactly our tokens
            assert kv.blocks[bid].token_ids == tuple(tokens[i * BS:(i + 1) * BS])
        if tokens[:4] != [1, 2, 3, 4]:
            assert hit.num_tokens == 0
    same = req("c", [1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert kv.get_computed_blocks(same).num_tokens >= 4
    kv.check_invariants()


def test_duplicate_content_computed_twice_keeps_one_cached_copy():
    kv = KVCacheManager(8, BS)
    a, b = req("a", range(5)), req("b", range(5))
    admit(kv, a)
    admit(kv, b)  # same step: no hit yet
    compute_all(kv, a)
    compute_all(kv, b)
    assert kv.num_cached_blocks == 1
    kv.check_invariants()
    kv.free(a)
    kv.free(b)
    kv.check_invariants()


def test_reset_prefix_cache_only_when_idle():
    kv = KVCacheManager(8, BS)
    a = req("a", range(9))
    admit(kv, a)
    compute_all(kv, a)
    assert kv.reset_prefix_cache() is False and kv.num_cached_blocks == 2
    kv.free(a)
    assert kv.reset_prefix_cache() is True and kv.num_cached_blocks == 0
    assert kv.get_computed_blocks(req("b", range(9))).num_tokens == 0
    kv.check_invariants()


def test_prefix_caching_off_and_slot_layout():
    kv = KVCacheManager(8, BS, enable_prefix_caching=False)
    a = req("a", range(9))
    admit(kv, a)
    compute_all(kv, a)
    kv.free(a)
    b = req("b", range(9))
    assert kv.num_cached_blocks == 0 and admit(kv, b).num_tokens == 0
    kv.free(b)
    slot = KVCacheManager(8, BS, layout="slot", max_seq_ids=4)
    assert not slot.enable_prefix_caching
    rs = [req(f"s{i}", range(3)) for i in range(3)]
    for r in rs:
        admit(slot, r)
    assert sorted(r.slot_seq_id for r in rs) == [0, 1, 2]
    slot.free(rs[1])
    assert rs[1].slot_seq_id is None and slot.take_released_seq_ids() == [1]
    assert slot.take_released_seq_ids() == []
    late = req("late", range(3))
    admit(slot, late)
    assert late.slot_seq_id == 3  # freed ids are reused last
    for r in (rs[0], rs[2], late):
        slot.free(r)
    slot.check_invariants()


def test_check_invariants_catches_corruption():
    kv = KVCacheManager(4, BS)
    kv.skip_leak_check = True
    a = req("a", range(4))
    admit(kv, a)
    kv.blocks[kv.block_table("a")[0]].ref_cnt = 2
    with pytest.raises(AssertionError, match="ref_cnt 2 but 1 tables hold it"):
        kv.check_invariants()
    kv.blocks[kv.block_table("a")[0]].ref_cnt = 1
    kv.free_queue[kv.block_table("a")[0]] = None
    with pytest.raises(AssertionError, match="is free"):
        kv.check_invariants()


def test_the_pool_is_a_few_objects_for_the_garbage_collector_whatever_its_size():
    # A GPU's pool holds hundreds of thousands of blocks; as one Python object each, every full
    # collection walked them all (52 ms at 262,144 blocks, a stall of the engine's loop).
    import gc

    gc.collect()
    before = len(gc.get_objects())
    kv = KVCacheManager(num_blocks=200_000, block_size=16)
    made = len(gc.get_objects()) - before
    assert made < 100, f"a pool of 200,000 blocks made {made} objects the collector tracks"
    # nor does a collection walk an entry a block: what it visits from the manager's fields is few
    fields = [v for v in vars(kv).values() if gc.is_tracked(v)]
    walked = sum(len(gc.get_referents(v)) for v in fields + [kv.free_queue])
    assert walked < 1000, f"a collection visits {walked} references from the pool's fields"
    kv.skip_leak_check = True  # checked below, cheaper than the autouse check's walk
    assert kv.num_free_blocks == 200_000 and kv.blocks[199_999].ref_cnt == 0 and len(kv.blocks) == 200_000
    with pytest.raises(IndexError):
        kv.blocks[200_000]


def test_the_free_queue_is_an_lru_queue_as_an_ordered_dict_is():
    import random
    from collections import OrderedDict

    from llaisys.engine.kv_blocks import FreeQueue

    rnd = random.Random(1)
    for n in (1, 2, 7, 64):
        q, od = FreeQueue(n), OrderedDict((i, None) for i in range(n))
        for _ in range(3000):
            op, b = rnd.randrange(5), rnd.randrange(n)
            if op == 0 and od:
                assert q.popitem(last=False) == od.popitem(last=False)
            elif op == 1:
                if b in od:
                    del od[b], q[b]
                else:
                    with pytest.raises(KeyError):
                        del q[b]
            elif op == 2:
                od[b] = q[b] = None  # a block already queued keeps its place
            elif op == 3 and b in od:
                last = rnd.random() < 0.5
                od.move_to_end(b, last=last)
                q.move_to_end(b, last=last)
            elif op == 4 and od:
                assert q.popitem() == od.popitem()
            assert list(q) == list(od) and len(q) == len(od)
            assert all((i in q) == (i in od) for i in range(-1, n + 1))
        while od:
            assert q.popitem(last=False) == od.popitem(last=False)
        with pytest.raises(KeyError):
            q.popitem()
