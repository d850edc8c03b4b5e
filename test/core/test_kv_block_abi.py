"""llaisysKVCacheBlockBytes / BlockRead / BlockWrite through ctypes: a block's K and V copied out
and back, and every misuse (NULL, a bad index, a small or wrong-sized buffer, the SLOT layout)
answered with a status and a message, changing nothing."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from llaisys import Status
from llaisys.libllaisys import LIB
from llaisys.libllaisys.kv_cache import KVCacheParams, llaisysKVCache_t

F32, F16, CPU = 1, 2, 0  # llaisysDataType_t F32 / F16, llaisysDeviceType_t CPU
BLOCK, SLOT = 0, 1
LAYERS, NKV, HD, BS, NBLOCKS = 3, 2, 4, 4, 5
NULL = None


def make_cache(layout: int = BLOCK, dtype: int = F32) -> int:
    p = KVCacheParams(layout=layout, dtype=dtype, n_layers=LAYERS, n_kv_heads=NKV, head_dim=HD,
                      n_slots=BS * NBLOCKS, block_size=BS, rope_theta=1e4, device=CPU, device_id=0)
    out = llaisysKVCache_t()
    assert LIB.llaisysKVCacheCreate2(ctypes.byref(p), ctypes.byref(out)) == Status.OK, LIB.llaisysGetLastError()
    return out.value


@pytest.fixture
def cache():
    h = make_cache()
    yield h
    assert LIB.llaisysKVCacheDestroy(h) == Status.OK


def block_bytes(h) -> int:
    n = ctypes.c_size_t()
    assert LIB.llaisysKVCacheBlockBytes(h, ctypes.byref(n)) == Status.OK
    return n.value


def read(h, block: int, capacity: int | None = None) -> tuple:
    buf = np.full(block_bytes(h) if capacity is None else capacity, 0xAB, np.uint8)
    return LIB.llaisysKVCacheBlockRead(h, block, buf.ctypes.data, buf.nbytes), buf


def write(h, block: int, data: np.ndarray) -> int:
    return LIB.llaisysKVCacheBlockWrite(h, block, data.ctypes.data, data.nbytes)


def assert_failed(status: int, expected: Status, fragment: str) -> None:
    msg = LIB.llaisysGetLastError().decode()
    assert status == expected, f"status {status}, want {expected!r}: {msg}"
    assert fragment in msg, msg


def test_block_bytes_is_every_layer_k_and_v(cache):
    assert block_bytes(cache) == 2 * LAYERS * BS * NKV * HD * 4


def test_write_then_read_round_trips_and_touches_one_block(cache):
    n = block_bytes(cache)
    rng = np.random.default_rng(0)
    blocks = {b: rng.integers(0, 256, n, dtype=np.uint8) for b in range(NBLOCKS)}
    for b, data in blocks.items():
        assert write(cache, b, data) == Status.OK
    new = rng.integers(0, 256, n, dtype=np.uint8)
    assert write(cache, 2, new) == Status.OK
    blocks[2] = new
    for b, data in blocks.items():
        status, got = read(cache, b)
        assert status == Status.OK
        assert np.array_equal(got, data), f"block {b}"


def test_a_larger_read_buffer_is_filled_up_to_the_block(cache):
    n = block_bytes(cache)
    data = np.arange(n, dtype=np.uint8)
    assert write(cache, 0, data) == Status.OK
    status, got = read(cache, 0, n + 16)
    assert status == Status.OK
    assert np.array_equal(got[:n], data) and (got[n:] == 0xAB).all()


def test_misuse_is_a_status_and_a_message_and_changes_nothing(cache):
    n = block_bytes(cache)
    data = np.ones(n, np.uint8)
    assert write(cache, 1, data) == Status.OK
    assert_failed(read(cache, NBLOCKS)[0], Status.OUT_OF_RANGE, f"block {NBLOCKS} is outside [0, {NBLOCKS})")
    assert_failed(read(cache, 2**63)[0], Status.OUT_OF_RANGE, "is outside")
    assert_failed(write(cache, NBLOCKS, data), Status.OUT_OF_RANGE, "is outside")
    assert_failed(read(cache, 1, n - 1)[0], Status.BUFFER_TOO_SMALL, f"a block holds {n} bytes, the buffer has {n - 1}")
    assert_failed(write(cache, 1, np.zeros(n - 1, np.uint8)), Status.SHAPE_MISMATCH, f"a block holds {n} bytes")
    assert_failed(write(cache, 1, np.zeros(n + 1, np.uint8)), Status.SHAPE_MISMATCH, f"got {n + 1}")
    assert_failed(LIB.llaisysKVCacheBlockRead(cache, 1, NULL, n), Status.INVALID_ARGUMENT, "dst is NULL")
    assert_failed(LIB.llaisysKVCacheBlockWrite(cache, 1, NULL, n), Status.INVALID_ARGUMENT, "src is NULL")
    assert_failed(LIB.llaisysKVCacheBlockBytes(cache, NULL), Status.INVALID_ARGUMENT, "out is NULL")
    for call in (lambda: LIB.llaisysKVCacheBlockBytes(NULL, ctypes.byref(ctypes.c_size_t())),
                 lambda: LIB.llaisysKVCacheBlockRead(NULL, 0, data.ctypes.data, n),
                 lambda: LIB.llaisysKVCacheBlockWrite(NULL, 0, data.ctypes.data, n)):
        assert_failed(call(), Status.INVALID_ARGUMENT, "cache is NULL")
    status, got = read(cache, 1)
    assert status == Status.OK and np.array_equal(got, data)


def test_slot_layout_refuses_block_copies():
    h = make_cache(SLOT)
    try:
        buf = np.zeros(1 << 12, np.uint8)
        assert_failed(LIB.llaisysKVCacheBlockBytes(h, ctypes.byref(ctypes.c_size_t())), Status.UNSUPPORTED,
                      "BLOCK layout")
        assert_failed(LIB.llaisysKVCacheBlockRead(h, 0, buf.ctypes.data, buf.nbytes), Status.UNSUPPORTED,
                      "BLOCK layout")
        assert_failed(LIB.llaisysKVCacheBlockWrite(h, 0, buf.ctypes.data, buf.nbytes), Status.UNSUPPORTED,
                      "BLOCK layout")
    finally:
        LIB.llaisysKVCacheDestroy(h)


def test_a_destroyed_cache_is_refused():
    h = make_cache(dtype=F16)
    n = block_bytes(h)
    assert n == 2 * LAYERS * BS * NKV * HD * 2
    assert LIB.llaisysKVCacheDestroy(h) == Status.OK
    buf = np.zeros(n, np.uint8)
    assert LIB.llaisysKVCacheBlockRead(h, 0, buf.ctypes.data, n) == Status.INVALID_ARGUMENT
