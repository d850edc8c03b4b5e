"""The one constructor and destroy convention (doc/c_api.md, "Constructors and Destroy"),
through ctypes and through the Python wrappers: every handle type is made by a Create that
returns a status and writes *out (NULL on error, whatever it held), every Destroy returns a
status (OK once, NULL a no-op, INVALID_ARGUMENT for a second or wrong-type destroy), and the
deprecated handle-returning constructors still work. Dead-handle use is in
test_handle_misuse.py."""

from __future__ import annotations

import ctypes
import gc
import sys

import numpy as np
import pytest

import llaisys
from llaisys import DeviceType, LlaisysInputError, Status
from llaisys.kv_cache import KVCache, KVLayout
from llaisys.libllaisys import LIB
from llaisys.libllaisys.kv_cache import KVCacheParams
from llaisys.runtime import Event, Stream

F32, CPU, INV = 1, 0, Status.INVALID_ARGUMENT
STALE = 0x1230  # a value *out held before the call: Create must overwrite it


def sizes(*v: int):
    return (ctypes.c_size_t * max(len(v), 1))(*v)


def kv_params(**kw) -> KVCacheParams:
    p = dict(layout=1, dtype=F32, n_layers=1, n_kv_heads=1, head_dim=2, n_slots=8, block_size=4, rope_theta=1e4,
             device=CPU, device_id=0)
    p.update(kw)
    return KVCacheParams(**p)


def make_weight() -> int:
    out = ctypes.c_void_p(STALE)
    assert LIB.llaisysTensorCreate2(sizes(4, 4), 2, F32, CPU, 0, ctypes.byref(out)) == Status.OK
    w = np.ones(16, np.float32)
    assert LIB.llaisysTensorLoad(out.value, w.ctypes.data, w.nbytes) == Status.OK
    return out.value


# name: (create(out_ptr) -> status, failing create(out_ptr) -> status, message fragment, Destroy, use(h) -> status)
TYPES = {
    "tensor": (lambda out: LIB.llaisysTensorCreate2(sizes(2, 3), 2, F32, CPU, 0, out),
               lambda out: LIB.llaisysTensorCreate2(sizes(2, 3), 2, 42, CPU, 0, out), "unknown dtype 42",
               LIB.llaisysTensorDestroy, LIB.llaisysTensorNdim),
    "kv": (lambda out: LIB.llaisysKVCacheCreate2(ctypes.byref(kv_params()), out),
           lambda out: LIB.llaisysKVCacheCreate2(ctypes.byref(kv_params(n_layers=0)), out), "n_layers",
           LIB.llaisysKVCacheDestroy, LIB.llaisysKVCacheClear),
    "packed": (lambda out: LIB.llaisysPackedLinearCreate(_weight, out),
               lambda out: LIB.llaisysPackedLinearCreate(None, out), "weight is NULL",
               LIB.llaisysPackedLinearDestroy, lambda h: LIB.llaisysPackedLinearApply(h, None, None, None)),
    "stream": (lambda out: LIB.llaisysStreamCreate(CPU, 0, out), lambda out: LIB.llaisysStreamCreate(CPU, 9, out),
               "9", LIB.llaisysStreamDestroy, LIB.llaisysStreamSynchronize),
    "event": (lambda out: LIB.llaisysEventCreate(CPU, 0, out), lambda out: LIB.llaisysEventCreate(7, 0, out),
              "unknown device type 7", LIB.llaisysEventDestroy, LIB.llaisysEventQuery),
}
_weight = make_weight()


def refused(status: int, *fragments: str) -> None:
    message = LIB.llaisysGetLastError().decode()
    assert status == INV, (status, message)
    for f in fragments:
        assert f in message, (f, message)


@pytest.mark.parametrize("kind", list(TYPES))
def test_create_fills_out_or_clears_it(kind):
    create, failing, fragment, destroy, _ = TYPES[kind]
    out = ctypes.c_void_p(STALE)
    assert create(ctypes.byref(out)) == Status.OK, LIB.llaisysGetLastError()
    assert out.value and out.value != STALE
    bad = ctypes.c_void_p(STALE)
    status = failing(ctypes.byref(bad))
    assert status < 0 and bad.value is None, (status, bad.value)
    assert fragment in LIB.llaisysGetLastError().decode() and LIB.llaisysGetLastStatus() == status
    refused(create(None), "out is NULL")
    assert destroy(out.value) == Status.OK


@pytest.mark.parametrize("kind", list(TYPES))
def test_destroy_returns_a_status(kind):
    create, _, _, destroy, _ = TYPES[kind]
    out = ctypes.c_void_p()
    assert create(ctypes.byref(out)) == Status.OK
    assert destroy(out.value) == Status.OK
    refused(destroy(out.value), "destroyed")
    LIB.llaisysClearLastError()
    assert destroy(None) == Status.OK and LIB.llaisysGetLastStatus() == Status.OK


@pytest.mark.parametrize("kind", list(TYPES))
def test_wrong_type_destroy_is_refused_and_leaves_both_alive(kind):
    create, _, _, destroy, _ = TYPES[kind]
    other_kind = "kv" if kind != "kv" else "tensor"
    other_create, _, _, other_destroy, other_use = TYPES[other_kind]
    mine, other = ctypes.c_void_p(), ctypes.c_void_p()
    assert create(ctypes.byref(mine)) == Status.OK and other_create(ctypes.byref(other)) == Status.OK
    refused(destroy(other.value), "handle, not a")
    refused(other_destroy(mine.value), "handle, not a")
    if other_kind == "tensor":
        assert other_use(other.value) == 2  # llaisysTensorNdim
    else:
        assert other_use(other.value) == Status.OK
    assert destroy(mine.value) == Status.OK and other_destroy(other.value) == Status.OK


def test_deprecated_constructors_still_work():
    t = LIB.llaisysTensorCreate(sizes(2, 3), 2, F32, CPU, 0)
    assert t and LIB.llaisysTensorNumel(t) == 6
    LIB.llaisysClearLastError()
    assert not LIB.llaisysTensorCreate(sizes(2), 1, 42, CPU, 0)
    assert LIB.llaisysGetLastStatus() == INV and b"dtype" in LIB.llaisysGetLastError()
    c = LIB.llaisysKVCacheCreate(ctypes.byref(kv_params()))
    assert c and LIB.llaisysKVCacheClear(c) == Status.OK
    LIB.llaisysClearLastError()
    assert not LIB.llaisysKVCacheCreate(None) and LIB.llaisysGetLastStatus() == INV
    assert LIB.llaisysTensorDestroy(t) == Status.OK and LIB.llaisysKVCacheDestroy(c) == Status.OK


def test_python_wrappers_use_the_convention():
    t = llaisys.Tensor((2, 3))
    v = t.view(3, 2)
    t.close()
    t.close()  # a second close does nothing
    assert v.shape == (3, 2)
    with pytest.raises(LlaisysInputError):  # refused by the library (llaisysTensorCreate2)
        llaisys.Tensor((2,), "f32", DeviceType.CPU, 7)
    # Destroyed behind the wrapper's back: close() says so, __del__ stays silent.
    LIB.llaisysTensorDestroy(v.handle)
    with pytest.raises(LlaisysInputError, match="destroyed tensor"):
        v.close()
    unraisable = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        for obj in (llaisys.Tensor((1,)), KVCache.create("slot", "f32", 1, 1, 2, 8), Stream(), Event()):
            handle = obj._handle if hasattr(obj, "_handle") else obj.handle
            destroy = {llaisys.Tensor: LIB.llaisysTensorDestroy, KVCache: LIB.llaisysKVCacheDestroy,
                       Stream: LIB.llaisysStreamDestroy, Event: LIB.llaisysEventDestroy}[type(obj)]
            assert destroy(handle) == Status.OK
            obj.__del__()  # close() refused by the library: __del__ swallows it
            del obj
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert unraisable == []

    cache = KVCache.create("slot", "f32", n_layers=1, n_kv_heads=1, head_dim=2, n_slots=8)
    assert cache.layout == KVLayout.SLOT and cache.stats().capacity == 8
    cache.close()
    with pytest.raises(ValueError, match="closed"):
        cache.stats()
    with pytest.raises(LlaisysInputError, match="head_dim"):
        KVCache.create("block", "f32", n_layers=1, n_kv_heads=1, head_dim=0, n_slots=8, block_size=4)

    with Stream(DeviceType.CPU) as s, Event(DeviceType.CPU) as e:
        e.record(s)
        assert e.query()
    assert s.handle is None and e.handle is None
    with pytest.raises(LlaisysInputError):
        Stream(DeviceType.CPU, 9)
