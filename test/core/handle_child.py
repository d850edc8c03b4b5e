"""Child process of test_handle_misuse.py: misuses one kind of C handle (the kind named by
argv[1]) and prints "ok" when every misuse was refused. On a library without handle checks
these calls touch freed or foreign memory, so they run here, where a crash ends this process
and the parent reports it, instead of killing pytest."""

from __future__ import annotations

import ctypes
import sys

import numpy as np

from llaisys import Status
from llaisys.libllaisys import LIB
from llaisys.libllaisys.kv_cache import KVCacheParams
from llaisys.libllaisys.qwen2 import Qwen2Meta

F32, CPU = 1, 0
INV = Status.INVALID_ARGUMENT
DATA = np.arange(16, dtype=np.float32)


def out_handle(create) -> int:
    """Run create(byref(out)), a constructor with an out-pointer, and return the handle."""
    h = ctypes.c_void_p()
    assert create(ctypes.byref(h)) == Status.OK, LIB.llaisysGetLastError()
    return h.value


def tensor(*shape: int) -> int:
    h = out_handle(lambda out: LIB.llaisysTensorCreate2((ctypes.c_size_t * len(shape))(*shape), len(shape), F32,
                                                         CPU, 0, out))
    assert LIB.llaisysTensorLoad(h, DATA.ctypes.data, DATA[:int(np.prod(shape))].nbytes) == Status.OK
    return h


def kv_params() -> KVCacheParams:
    return KVCacheParams(layout=0, dtype=F32, n_layers=1, n_kv_heads=1, head_dim=2, n_slots=16, block_size=4,
                         rope_theta=1e4, device=CPU, device_id=0)


def model_meta() -> Qwen2Meta:
    return Qwen2Meta(dtype=F32, n_layers=1, hidden_size=8, intermediate_size=8, n_heads=2, n_kv_heads=1,
                     head_dim=4, vocab_size=16, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=1e4,
                     tie_word_embeddings=1)


def packed() -> int:
    w = tensor(4, 4)
    try:
        return out_handle(lambda out: LIB.llaisysPackedLinearCreate(w, out))
    finally:
        assert LIB.llaisysTensorDestroy(w) == Status.OK


_count = ctypes.c_size_t()
_x, _y = tensor(1, 4), tensor(1, 4)

# kind: (create() -> handle, destroy(h) -> status, use(h) -> status)
KINDS = {
    "tensor": (lambda: tensor(4), LIB.llaisysTensorDestroy,
               lambda h: LIB.llaisysTensorLoad(h, DATA.ctypes.data, 16)),
    "packed": (packed, LIB.llaisysPackedLinearDestroy, lambda h: LIB.llaisysPackedLinearApply(h, _y, _x, None)),
    "stream": (lambda: out_handle(lambda out: LIB.llaisysStreamCreate(CPU, 0, out)), LIB.llaisysStreamDestroy,
               LIB.llaisysStreamSynchronize),
    "event": (lambda: out_handle(lambda out: LIB.llaisysEventCreate(CPU, 0, out)), LIB.llaisysEventDestroy,
              lambda h: LIB.llaisysEventRecord(h, None)),
    "kv": (lambda: out_handle(lambda out: LIB.llaisysKVCacheCreate2(ctypes.byref(kv_params()), out)),
           LIB.llaisysKVCacheDestroy,
           LIB.llaisysKVCacheClear),
    "model": (lambda: LIB.llaisysQwen2ModelCreate(ctypes.byref(model_meta()), CPU, 0), LIB.llaisysQwen2ModelDestroy,
              lambda h: LIB.llaisysQwen2ModelMissingWeights(h, ctypes.byref(_count), None, 0)),
}


def refused(status, *fragments: str) -> None:
    """A call was refused with INVALID_ARGUMENT and a message holding every fragment."""
    message = LIB.llaisysGetLastError().decode()
    assert status == INV and LIB.llaisysGetLastStatus() == INV, (status, message)
    for f in fragments:
        assert f in message, (f, message)


def destroy_refused(destroy, h, *fragments: str) -> None:
    """A Destroy of a dead or foreign handle does nothing and returns INVALID_ARGUMENT, with
    the message (every Destroy returns a status: doc/c_api.md, "Conventions")."""
    LIB.llaisysClearLastError()
    refused(destroy(h), *fragments)


def main(kind: str) -> None:
    create, destroy, use = KINDS[kind]
    h = create()
    assert h, LIB.llaisysGetLastError()
    assert use(h) == Status.OK, LIB.llaisysGetLastError()
    assert destroy(h) == Status.OK, LIB.llaisysGetLastError()

    refused(use(h))  # use after destroy
    destroy_refused(destroy, h)  # double destroy
    # A new object of the same kind (often at the freed address): the old handle stays dead.
    fresh = create()
    refused(use(h), "destroyed")
    destroy_refused(destroy, h, "destroyed")
    assert use(fresh) == Status.OK, LIB.llaisysGetLastError()

    # A live handle of another kind, and foreign values: refused, and the object untouched.
    other = _x if kind != "tensor" else create_other()
    refused(use(other), "handle, not a")
    destroy_refused(destroy, other, "handle, not a")
    junk = ctypes.create_string_buffer(b"\xa5" * 256)
    for foreign in (ctypes.addressof(junk), id(junk), 0xDEADBEEF0):
        refused(use(foreign), "not a")
        destroy_refused(destroy, foreign, "not a")
    assert use(fresh) == Status.OK, LIB.llaisysGetLastError()
    assert destroy(fresh) == Status.OK, LIB.llaisysGetLastError()
    LIB.llaisysClearLastError()
    assert destroy(None) == Status.OK and LIB.llaisysGetLastStatus() == Status.OK  # NULL: a no-op
    print("ok")


def create_other() -> int:
    return KINDS["kv"][0]()


if __name__ == "__main__":
    main(sys.argv[1])
