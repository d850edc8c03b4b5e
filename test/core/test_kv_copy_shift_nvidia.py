"""llaisysKVCacheCopyShift on an NVIDIA GPU (shift_kernel.cu's copy_shift) against the CPU's: two
BLOCK caches, one per device, filled with the same bytes and given the same copies must end
with the same V bytes, the same untouched slots and delta-0 keys, and keys equal to the CPU's
rotated ones within one rounding of the storage dtype (the GPU's sincosf may differ from the
CPU's cos/sin in the last bit), in f32, f16 and bf16, for rows of fewer and more elements
than a thread block's 256; and in a one-layer model on the GPU (its scaled RoPE table), tokens
copied with a delta continue as if prefilled there. Skipped where this build or machine has no
NVIDIA GPU (a GPU cache has no q8_0: refused when it is made)."""

from __future__ import annotations

import numpy as np
import pytest

from llaisys import DeviceType
from llaisys import runtime as rt
from llaisys.kv_cache import KVCache

NV = DeviceType.NVIDIA
pytestmark = pytest.mark.skipif(rt.device_count(NV) == 0, reason="no NVIDIA GPU in this build/machine")

LAYERS, BS, NBLOCKS = 3, 16, 8
NSLOTS = BS * NBLOCKS
SRC = [1, 2, 3, 17, 18, 33, 34, 64, 65, 66, 100]
DST = [40, 41, 42, 60, 5, 20, 127, 80, 81, 82, 0]
DELTA = [5, -1, 100, 1000, -3, 0, 70000, 7, 7, 7, -100]
NP_DTYPE = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}


def random_rows(rng, dtype: str, n: int) -> np.ndarray:
    """n values of dtype (bf16 as the top half of an f32's bits), all finite."""
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    if dtype == "bf16":
        return (x.view(np.uint32) >> 16).astype(np.uint16)
    return x.astype(NP_DTYPE[dtype])


def to_f32(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float32)


def slots(cache: KVCache, dtype: str, nkv: int, hd: int) -> tuple:
    """K and V [layers, n_slots, nkv * hd] in the storage dtype, read block by block."""
    k = np.zeros((LAYERS, NSLOTS, nkv * hd), NP_DTYPE[dtype])
    v = np.zeros_like(k)
    for b in range(NBLOCKS):
        raw = np.frombuffer(bytes(cache.read_block(b)), NP_DTYPE[dtype]).reshape(LAYERS, 2, BS, nkv * hd)
        k[:, b * BS:(b + 1) * BS], v[:, b * BS:(b + 1) * BS] = raw[:, 0], raw[:, 1]
    return k, v


def pair(dtype: str, nkv: int, hd: int, theta: float) -> tuple:
    """A CPU and a GPU cache holding the same random bytes."""
    rng = np.random.default_rng(nkv * hd)
    caches = [KVCache.create("block", dtype, LAYERS, nkv, hd, NSLOTS, BS, rope_theta=theta, device=dev)
              for dev in (DeviceType.CPU, NV)]
    for b in range(NBLOCKS):
        data = random_rows(rng, dtype, LAYERS * 2 * BS * nkv * hd).tobytes()
        for c in caches:
            c.write_block(b, data)
    return caches


@pytest.mark.parametrize("nkv,hd", [(2, 64), (8, 128)])  # rows of 128 and 1,024 elements
@pytest.mark.parametrize("theta", [1e4, 1e6])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_the_gpu_copy_equals_the_cpu_copy(dtype, theta, nkv, hd):
    cpu, gpu = pair(dtype, nkv, hd, theta)
    try:
        k0, v0 = slots(gpu, dtype, nkv, hd)
        for c in (cpu, gpu):
            c.copy_shift(SRC, DST, DELTA)
        (kc, vc), (kg, vg) = slots(cpu, dtype, nkv, hd), slots(gpu, dtype, nkv, hd)
    finally:
        cpu.close()
        gpu.close()
    np.testing.assert_array_equal(vg, vc)
    np.testing.assert_array_equal(vg[:, DST], v0[:, SRC])
    others = [s for s in range(NSLOTS) if s not in DST]
    np.testing.assert_array_equal(kg[:, others], k0[:, others])
    still = [d for d, e in zip(DST, DELTA) if e == 0]
    np.testing.assert_array_equal(kg[:, still], kc[:, still])
    moved = [d for d, e in zip(DST, DELTA) if e != 0]
    a, b = to_f32(kg[:, moved], dtype), to_f32(kc[:, moved], dtype)
    # one rounding in the storage dtype of a value up to |x| (rotations keep the pair's norm)
    ulp = {"f32": 2.0 ** -21, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}[dtype]
    np.testing.assert_allclose(a, b, rtol=0, atol=ulp * np.abs(b).max())
    assert np.abs(to_f32(kg[:, moved], dtype) - to_f32(k0[:, SRC][:, [DST.index(d) for d in moved]], dtype)).max() > \
        100 * ulp * np.abs(b).max()  # and it did rotate


def tiny_llama(path) -> str:
    """A one-layer Llama with llama3-scaled RoPE and sharp attention (a wrong rotation shows)."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        cfg = LlamaConfig(vocab_size=384, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                          rms_norm_eps=1e-6, rope_parameters=rope, tie_word_embeddings=False)
        hf = LlamaForCausalLM(cfg).eval()
        with torch.no_grad():
            hf.model.layers[0].self_attn.q_proj.weight.mul_(8.0)
            hf.model.layers[0].self_attn.k_proj.weight.mul_(8.0)
        hf.save_pretrained(path, safe_serialization=True)
    return str(path)


def test_tokens_copied_on_the_gpu_continue_as_if_prefilled_there(tmp_path):
    """One layer: a token's K/V depend on the token and its position only, so P prefilled at 0..
    and copied after Q with delta len(Q) (the model's scaled table, on the GPU) must continue
    as Q + P prefilled directly; with delta 0 it must not."""
    from llaisys.models.model import Model

    p = [5, 17, 300, 41, 9, 250, 77, 3, 120, 64, 11]
    q = [int(t) for t in np.random.default_rng(1).integers(1, 384, 37)]

    def run(m, cache, toks, start, table):
        pos = np.arange(start, start + len(toks))
        slot = np.asarray(table)[pos // BS] * BS + pos % BS
        return m.step(cache, token_ids=toks, positions=pos, query_start=[0, len(toks)], sample_rows=[len(toks) - 1],
                      slot_mapping=slot, block_tables=[table], context_lens=[start + len(toks)],
                      want_logits=True).logits[0]

    def continued(m, delta):
        with m.create_kv_cache("block", n_slots=8 * BS, block_size=BS, dtype="f32") as cache:
            run(m, cache, p, 0, [7])
            run(m, cache, q, 0, [0, 1, 2, 3])
            dst = np.arange(len(q), len(q) + len(p))
            cache.copy_shift(7 * BS + np.arange(len(p)), dst, np.full(len(p), delta))  # blocks 0-3 are slots 0..63
            return run(m, cache, [42], len(q) + len(p), [0, 1, 2, 3])

    with Model.from_path(tiny_llama(tmp_path / "llama1"), device=NV) as m:
        got, unrotated = continued(m, len(q)), continued(m, 0)
        with m.create_kv_cache("block", n_slots=8 * BS, block_size=BS, dtype="f32") as direct:
            run(m, direct, q + p, 0, [0, 1, 2, 3])
            want = run(m, direct, [42], len(q) + len(p), [0, 1, 2, 3])
    np.testing.assert_allclose(got, want, atol=2e-4 * np.abs(want).max())
    assert np.abs(unrotated - want).max() > 6e-4 * np.abs(want).max()


def test_misuse_on_the_gpu_changes_nothing_and_q8_0_is_refused():
    _, gpu = pair("f16", 2, 64, 1e4)
    try:
        before = [bytes(gpu.read_block(b)) for b in range(NBLOCKS)]
        with pytest.raises(Exception, match="given twice"):
            gpu.copy_shift([1, 2], [3, 3], [1, 1])
        with pytest.raises(Exception, match="outside"):
            gpu.copy_shift([1], [NSLOTS], [1])
        assert [bytes(gpu.read_block(b)) for b in range(NBLOCKS)] == before
        gpu.copy_shift([], [], [])  # n = 0: nothing to launch
        assert [bytes(gpu.read_block(b)) for b in range(NBLOCKS)] == before
    finally:
        gpu.close()
    with pytest.raises(Exception, match="q8_0"):
        KVCache.create("block", "q8_0", LAYERS, 2, 64, NSLOTS, BS, device=NV)
