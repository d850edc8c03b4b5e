"""SLOT (unified cell) KV cache: sequence operations, out-of-cells status, shifts; on the CPU
and, where there is one, on an NVIDIA GPU (the tiny model is f32, so the GPU path is held to
the same tolerance)."""

import numpy as np
import pytest
import torch

from llaisys import DeviceType, runtime
from llaisys.models.qwen2 import Qwen2Model

from .conftest import make_tiny_qwen2

P = [5, 9, 2, 77, 31, 8, 100, 3]
ATOL = 2e-4


@pytest.fixture(scope="module", params=["cpu", "nvidia"])
def tiny(request, tmp_path_factory):
    device = DeviceType[request.param.upper()]
    if device == DeviceType.NVIDIA and runtime.device_count(device) == 0:
        pytest.skip("no NVIDIA GPU in this build/machine")
    path = tmp_path_factory.mktemp("tiny_slot")
    hf = make_tiny_qwen2(path, tie=True, seed=3)
    with Qwen2Model.from_path(path, device=device) as m:
        yield m, hf


def hf_last(hf, ids):
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0, -1].numpy()


def step(m, cache, seq, toks, start):
    res = m.step(cache, token_ids=toks, positions=np.arange(start, start + len(toks)), query_start=[0, len(toks)],
                 seq_ids=[seq], sample_rows=[len(toks) - 1], want_logits=True)
    return None if res is None else res.logits[0]


def test_out_of_cells_is_recoverable_and_writes_nothing(tiny):
    m, _ = tiny
    with m.create_kv_cache("slot", n_slots=8) as cache:
        assert step(m, cache, 0, P + [1, 2], 0) is None
        assert cache.stats().used == 0
        assert step(m, cache, 0, P, 0) is not None
        assert cache.stats().used == 8 and cache.stats().free == 0
        assert step(m, cache, 0, [4], 8) is None  # full: nothing is evicted
        assert cache.seq_pos_max(0) == 7


def test_seq_cp_shares_a_prefix(tiny):
    m, hf = tiny
    with m.create_kv_cache("slot", n_slots=64) as cache:
        step(m, cache, 0, P, 0)
        cache.seq_cp(0, 1)
        assert cache.stats().used == len(P)  # shared cells, no copies
        np.testing.assert_allclose(step(m, cache, 1, [42], len(P)), hf_last(hf, P + [42]), atol=ATOL)
        np.testing.assert_allclose(step(m, cache, 0, [7], len(P)), hf_last(hf, P + [7]), atol=ATOL)
        assert cache.stats().used == len(P) + 2


def test_seq_rm_truncates_then_recomputes(tiny):
    m, hf = tiny
    with m.create_kv_cache("slot", n_slots=64) as cache:
        step(m, cache, 0, P + [11, 12, 13], 0)
        cache.seq_rm(0, len(P), -1)
        assert cache.seq_pos_max(0) == len(P) - 1
        np.testing.assert_allclose(step(m, cache, 0, [20, 21], len(P)), hf_last(hf, P + [20, 21]), atol=ATOL)
        cache.seq_rm(-1)
        assert cache.stats().used == 0 and cache.seq_pos_max(0) == -1


def test_seq_add_shift_keeps_relative_attention(tiny):
    """RoPE depends on position differences: shifting every cached position by d and asking at
    n + d gives the logits of the unshifted cache at n; shifting back restores them."""
    m, hf = tiny
    with m.create_kv_cache("slot", n_slots=64) as cache:
        step(m, cache, 0, P, 0)
        cache.seq_cp(0, 1)
        cache.seq_keep(1)  # seq 1 alone owns the cells now; seq 0 is gone
        assert cache.seq_pos_max(0) == -1
        cache.seq_add(1, 0, -1, 40)
        assert cache.seq_pos_max(1) == len(P) - 1 + 40
        np.testing.assert_allclose(step(m, cache, 1, [42], len(P) + 40), hf_last(hf, P + [42]), atol=ATOL)
        cache.seq_rm(1, len(P) + 40, -1)
        cache.seq_add(1, 0, -1, -40)
        np.testing.assert_allclose(step(m, cache, 1, [42], len(P)), hf_last(hf, P + [42]), atol=ATOL)


def test_seq_add_refuses_shared_cells_and_bad_positions(tiny):
    m, _ = tiny
    with m.create_kv_cache("slot", n_slots=64) as cache:
        step(m, cache, 0, P, 0)
        cache.seq_cp(0, 1)
        with pytest.raises(ValueError, match="shared"):
            cache.seq_add(0, 0, -1, 5)
        with pytest.raises(ValueError, match="already holds position"):
            step(m, cache, 0, [1], 3)
        with pytest.raises(ValueError):
            cache.seq_rm(300)


def test_block_layout_rejects_slot_operations(tiny):
    m, _ = tiny
    with m.create_kv_cache("block", n_slots=64, block_size=16) as cache:
        with pytest.raises(Exception, match="SLOT"):
            cache.seq_rm(0)
        assert cache.stats().capacity == 64 and cache.stats().block_size == 16
