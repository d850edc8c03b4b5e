"""llaisysKVCacheCopyShift (cache reuse, BLOCK layout) against a torch reference: a key stored as
RoPE(x, p) and copied with delta must read back as RoPE(x, p + delta) computed directly
(transformers' apply_rotary_pos_emb), its V unchanged, every other slot untouched; in each
storage dtype (q8_0 re-quantizes the rotated row, as SeqAdd does, in the Hadamard basis its rows
are stored in) and two RoPE bases. Then
every misuse answered with a status and a message, changing nothing."""

from __future__ import annotations

import ctypes
import warnings

import numpy as np
import pytest
import torch

from kv_basis import hadamard, key_rotation, value_rotation
from llaisys import Status
from llaisys.kv_cache import KVCache
from llaisys.libllaisys import LIB

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

LAYERS, NKV, HD, BS, NBLOCKS = 2, 2, 64, 16, 4
NSLOTS = BS * NBLOCKS
SRC = [1, 2, 3, 17, 18, 33]
DST = [40, 41, 42, 60, 5, 20]
DELTA = [5, -1, 100, 1000, -3, 0]


def pos_of(slot):
    return 3 * np.asarray(slot) + 7  # the position each slot's key was stored for


def rope_ref(x: np.ndarray, pos: np.ndarray, theta: float) -> np.ndarray:
    """x [n, heads, d] rotated to positions pos [n] by transformers' rotate-half RoPE."""
    inv = 1.0 / theta ** (torch.arange(0, HD, 2, dtype=torch.int64).double() / HD)
    ang = torch.as_tensor(pos, dtype=torch.float64)[:, None] * inv[None, :]  # [n, d/2]
    emb = torch.cat([ang, ang], dim=-1)
    t = torch.as_tensor(x, dtype=torch.float64)  # [n, heads, d]; cos, sin [n, d] unsqueezed at dim 1
    k, _ = apply_rotary_pos_emb(t, t, emb.cos(), emb.sin(), unsqueeze_dim=1)
    return k.numpy()


# ---- storage codecs: [..., heads * d] f32 <-> the cache's bytes -------------------------------
def basis(which: int) -> int:
    """A q8_0 cache's Hadamard block for its keys (which 0) or values (1)."""
    return key_rotation(HD) if which == 0 else value_rotation(HD)


def encode(x: np.ndarray, dtype: str, which: int = 0) -> bytes:
    x = np.ascontiguousarray(x, np.float32)
    if dtype == "f32":
        return x.tobytes()
    if dtype == "f16":
        return x.astype(np.float16).tobytes()
    if dtype == "bf16":
        return torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    blocks = hadamard(x, basis(which)).reshape(-1, 32)  # q8_0: an f16 scale and 32 int8 per block
    d = (np.abs(blocks).max(axis=1) / 127).astype(np.float16)
    inv = np.where(d.astype(np.float32) > 0, 1 / np.maximum(d.astype(np.float32), 1e-30), 0)
    q = np.clip(np.rint(blocks * inv[:, None]), -127, 127).astype(np.int8)
    out = np.zeros((len(blocks), 34), np.uint8)
    out[:, :2] = d.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def decode(b: bytes, dtype: str, which: int = 0) -> np.ndarray:
    if dtype == "f32":
        return np.frombuffer(b, np.float32).copy()
    if dtype == "f16":
        return np.frombuffer(b, np.float16).astype(np.float32)
    if dtype == "bf16":
        return torch.from_numpy(np.frombuffer(b, np.int16).copy()).view(torch.bfloat16).float().numpy()
    raw = np.frombuffer(b, np.uint8).reshape(-1, 34)
    d = raw[:, :2].copy().view(np.float16).astype(np.float32)
    return hadamard((raw[:, 2:].copy().view(np.int8).astype(np.float32) * d).reshape(-1), basis(which))


def row_bytes(dtype: str) -> int:
    return {"f32": 4 * NKV * HD, "f16": 2 * NKV * HD, "bf16": 2 * NKV * HD, "q8_0": NKV * HD // 32 * 34}[dtype]


def read_all(cache: KVCache, dtype: str) -> tuple:
    """K and V [layers, n_slots, heads * d] f32 and the raw bytes of every block."""
    raw = [bytes(cache.read_block(b)) for b in range(NBLOCKS)]
    rb, part = row_bytes(dtype), BS * row_bytes(dtype)
    k = np.zeros((LAYERS, NSLOTS, NKV * HD), np.float32)
    v = np.zeros_like(k)
    for b, data in enumerate(raw):
        for layer in range(LAYERS):
            for which, arr in ((0, k), (1, v)):
                chunk = data[(2 * layer + which) * part:(2 * layer + which + 1) * part]
                for s in range(BS):
                    arr[layer, b * BS + s] = decode(chunk[s * rb:(s + 1) * rb], dtype, which)
    return k, v, raw


def fill(cache: KVCache, dtype: str, theta: float, seed: int = 0) -> np.ndarray:
    """Write RoPE(x, pos_of(slot)) as every key and random values; returns x [layers, n_slots, heads, d]."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((LAYERS, NSLOTS, NKV, HD)).astype(np.float32)
    v = rng.standard_normal((LAYERS, NSLOTS, NKV * HD)).astype(np.float32)
    k = np.stack([rope_ref(x[layer], pos_of(np.arange(NSLOTS)), theta) for layer in range(LAYERS)])
    k = k.reshape(LAYERS, NSLOTS, NKV * HD).astype(np.float32)
    for b in range(NBLOCKS):
        sl = slice(b * BS, (b + 1) * BS)
        payload = b"".join(encode(k[layer, sl], dtype, 0) + encode(v[layer, sl], dtype, 1) for layer in range(LAYERS))
        cache.write_block(b, payload)
    return x


@pytest.mark.parametrize("theta", [1e4, 1e6])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "q8_0"])
def test_copy_shift_equals_rope_at_the_new_position(dtype, theta):
    with KVCache.create("block", dtype, LAYERS, NKV, HD, NSLOTS, BS, rope_theta=theta) as cache:
        x = fill(cache, dtype, theta)
        k0, v0, raw0 = read_all(cache, dtype)
        cache.copy_shift(SRC, DST, DELTA)
        k1, v1, raw1 = read_all(cache, dtype)
    moved = np.asarray(pos_of(SRC)) + np.asarray(DELTA)
    # one rounding of the stored key, one of the rotated one (q8_0: a 1/127 step of the row's max)
    tol = {"f32": 1e-5, "f16": 4e-3, "bf16": 3e-2, "q8_0": 4e-2}[dtype]
    for layer in range(LAYERS):
        want = rope_ref(x[layer, SRC], moved, theta).reshape(len(SRC), -1)
        np.testing.assert_allclose(k1[layer, DST], want, atol=tol * np.abs(want).max())
        np.testing.assert_array_equal(v1[layer, DST], v0[layer, SRC])
        # the rotation is real: the unshifted key is far from the wanted one where delta != 0
        far = [i for i, d in enumerate(DELTA) if d]
        assert np.abs(k0[layer, np.asarray(SRC)[far]] - want[far]).max() > 5 * tol * np.abs(want).max()
    others = [s for s in range(NSLOTS) if s not in DST]
    np.testing.assert_array_equal(k1[:, others], k0[:, others])
    np.testing.assert_array_equal(v1[:, others], v0[:, others])


def call(cache: KVCache, src, dst, delta, n=None) -> int:
    s = np.ascontiguousarray(src, np.int32)
    d = np.ascontiguousarray(dst, np.int32)
    e = np.ascontiguousarray(delta, np.int64)
    return LIB.llaisysKVCacheCopyShift(cache.handle, len(s) if n is None else n, s.ctypes.data, d.ctypes.data,
                                       e.ctypes.data)


def assert_failed(status: int, expected: Status, fragment: str) -> None:
    msg = LIB.llaisysGetLastError().decode()
    assert status == expected, f"status {status}, want {expected!r}: {msg}"
    assert fragment in msg, msg


@pytest.mark.parametrize("src,dst,delta,status,fragment", [
    ([1, 2], [3, NSLOTS], [1, 1], Status.OUT_OF_RANGE, "outside"),
    ([-1], [3], [1], Status.OUT_OF_RANGE, "outside"),
    ([1, 2], [3, 3], [1, 1], Status.INVALID_ARGUMENT, "given twice"),
    ([1, 2], [2, 4], [1, 1], Status.INVALID_ARGUMENT, "both a src"),
    ([1], [2], [2**31], Status.INVALID_ARGUMENT, "delta"),
])
def test_misuse_is_refused_and_changes_nothing(src, dst, delta, status, fragment):
    with KVCache.create("block", "f32", LAYERS, NKV, HD, NSLOTS, BS, rope_theta=1e4) as cache:
        fill(cache, "f32", 1e4)
        before = [bytes(cache.read_block(b)) for b in range(NBLOCKS)]
        assert_failed(call(cache, src, dst, delta), status, fragment)
        assert [bytes(cache.read_block(b)) for b in range(NBLOCKS)] == before


def test_null_arrays_zero_entries_and_the_slot_layout():
    with KVCache.create("block", "f32", LAYERS, NKV, HD, NSLOTS, BS, rope_theta=1e4) as cache:
        assert LIB.llaisysKVCacheCopyShift(cache.handle, 0, None, None, None) == Status.OK
        assert_failed(LIB.llaisysKVCacheCopyShift(cache.handle, 1, None, None, None), Status.INVALID_ARGUMENT, "NULL")
        with pytest.raises(ValueError, match="one length"):
            cache.copy_shift([1, 2], [3], [0, 0])
    with KVCache.create("slot", "f32", LAYERS, NKV, HD, NSLOTS, BS, rope_theta=1e4) as cache:
        assert_failed(call(cache, [1], [2], [1]), Status.UNSUPPORTED, "BLOCK layout")


def test_a_cache_without_a_rope_table_copies_but_does_not_rotate():
    with KVCache.create("block", "f32", LAYERS, NKV, HD, NSLOTS, BS, rope_theta=0.0) as cache:
        fill(cache, "f32", 1e4)
        k0, v0, _ = read_all(cache, "f32")
        assert_failed(call(cache, [1], [2], [1]), Status.INVALID_ARGUMENT, "no RoPE table")
        assert call(cache, [1], [2], [0]) == Status.OK
        k1, v1, _ = read_all(cache, "f32")
    np.testing.assert_array_equal(k1[:, 2], k0[:, 1])
    np.testing.assert_array_equal(v1[:, 2], v0[:, 1])


def test_declared_with_ctypes():
    fn = LIB.llaisysKVCacheCopyShift
    assert fn.restype is ctypes.c_int32 and len(fn.argtypes) == 5
