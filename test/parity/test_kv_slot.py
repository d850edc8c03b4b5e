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


def sharpen(hf, path):
    """Sharp attention (q and k scaled by 8), so a key rotated wrongly shows in the logits."""
    with torch.no_grad():
        for layer in hf.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
    hf.save_pretrained(path, safe_serialization=True)


@pytest.fixture(scope="module")
def cpu_and_gpu(tmp_path_factory):
    """The same tiny model on the CPU and on the GPU (the GPU's seq_add against the CPU's)."""
    if runtime.device_count(DeviceType.NVIDIA) == 0:
        pytest.skip("no NVIDIA GPU in this build/machine")
    path = tmp_path_factory.mktemp("tiny_slot_both")
    sharpen(make_tiny_qwen2(path, tie=True, seed=5), path)
    with Qwen2Model.from_path(path, device=DeviceType.CPU) as cpu, \
            Qwen2Model.from_path(path, device=DeviceType.NVIDIA) as gpu:
        yield cpu, gpu


def shifted_logits(m, kv_dtype, delta):
    """Two sequences whose cells interleave; seq 0's middle positions [2, 6) shifted by delta
    (some of its cells, scattered among seq 1's, in every layer: one launch on a GPU); then a
    token of each sequence (seq 0's at position 40 whatever delta is, so only the keys differ)."""
    with m.create_kv_cache("slot", n_slots=64, dtype=kv_dtype) as cache:
        step(m, cache, 0, P[:3], 0)
        step(m, cache, 1, [50, 51, 52], 0)
        step(m, cache, 0, P[3:], 3)
        if delta:
            cache.seq_add(0, 2, 6, delta)
        return step(m, cache, 0, [42], 40), step(m, cache, 1, [7], 3)


@pytest.mark.parametrize("kv_dtype", ["f32", "f16"])
def test_seq_add_of_scattered_cells_on_the_gpu_matches_the_cpu(cpu_and_gpu, kv_dtype):
    cpu, gpu = cpu_and_gpu
    # relative to the largest logit. On the CPU, f16 keys move these logits by 1.3e-4 of it, no
    # rotation at all by 7e-2, a shift one position off by 3e-2: the bound tells them apart
    tol = 1e-3 if kv_dtype == "f32" else 2e-3
    want0, want1 = shifted_logits(cpu, kv_dtype, 30)
    got0, got1 = shifted_logits(gpu, kv_dtype, 30)
    np.testing.assert_allclose(got0, want0, atol=tol * np.abs(want0).max())
    np.testing.assert_allclose(got1, want1, atol=tol * np.abs(want1).max())  # seq 1's keys left alone
    unshifted, _ = shifted_logits(cpu, kv_dtype, 0)
    assert np.abs(unshifted - want0).max() > 10 * tol * np.abs(want0).max()  # the shift is visible
