"""The C ABI misused directly through ctypes (llaisys.libllaisys.LIB): NULL handles and
out-pointers, small buffers, and the per-thread last error. Nothing may crash."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

import llaisys
from llaisys import Status
from llaisys.libllaisys import LIB
from model_abi_harness import assert_failed, last_error  # the status checks of every C ABI misuse test

DTYPE_F32, DTYPE_I64, DTYPE_INVALID = 1, 5, 0
CPU = 0
NULL = None


def sizes(*values: int):
    return (ctypes.c_size_t * max(len(values), 1))(*values)


def handle(*shape: int, dtype: int = DTYPE_F32) -> int:
    h = LIB.llaisysTensorCreate(sizes(*shape), len(shape), dtype, CPU, 0)
    assert h, LIB.llaisysGetLastError()
    return h


@pytest.fixture
def handles():
    """Live tensor handles made for a test, destroyed after it."""
    made: list[int] = []

    def make(*shape: int, dtype: int = DTYPE_F32) -> int:
        made.append(handle(*shape, dtype=dtype))
        return made[-1]

    yield make
    for h in made:
        LIB.llaisysTensorDestroy(h)


# ------------------------------------------------------------------------------------------
# NULL handles to every op


def op_calls(make):
    """(name, number of tensor args, call(args)); every call is valid with live handles."""
    f = make
    i64 = lambda *s: make(*s, dtype=DTYPE_I64)  # noqa: E731
    return [
        ("llaisysAdd", lambda a: LIB.llaisysAdd(*a), [f(2, 3), f(2, 3), f(2, 3)]),
        ("llaisysMul", lambda a: LIB.llaisysMul(*a), [f(2, 3), f(2, 3), f(2, 3)]),
        ("llaisysEmbedding", lambda a: LIB.llaisysEmbedding(*a), [f(2, 4), i64(2), f(5, 4)]),
        ("llaisysLinear", lambda a: LIB.llaisysLinear(*a, NULL), [f(2, 3), f(2, 4), f(3, 4)]),
        ("llaisysRmsNorm", lambda a: LIB.llaisysRmsNorm(*a, 1e-6), [f(2, 4), f(2, 4), f(4)]),
        ("llaisysRope", lambda a: LIB.llaisysRope(*a, 1e4), [f(2, 1, 4), f(2, 1, 4), i64(2)]),
        ("llaisysSelfAttention", lambda a: LIB.llaisysSelfAttention(*a, 0.5),
         [f(1, 2, 4), f(1, 2, 4), f(3, 1, 4), f(3, 1, 4)]),
        ("llaisysSwiGLU", lambda a: LIB.llaisysSwiGLU(*a), [f(5), f(5), f(5)]),
        ("llaisysArgmax", lambda a: LIB.llaisysArgmax(*a), [i64(2), f(2), f(2, 5)]),
        ("llaisysSoftmax", lambda a: LIB.llaisysSoftmax(*a), [f(2, 5), f(2, 5)]),
    ]


def test_null_handles_to_every_op(handles):
    for name, call, args in op_calls(handles):
        for h in args:  # zero-filled, so that the valid call is well defined
            nbytes = LIB.llaisysTensorNumel(h) * LIB.llaisysDataTypeSize(LIB.llaisysTensorDataType(h))
            assert LIB.llaisysTensorLoad(h, np.zeros(nbytes, dtype=np.uint8).ctypes.data, nbytes) == Status.OK
        assert call(args) == Status.OK, f"{name}: {last_error()}"
        for i in range(len(args)):
            LIB.llaisysClearLastError()
            bad = list(args)
            bad[i] = NULL
            assert_failed(call(bad), Status.INVALID_ARGUMENT, "is NULL")


def test_linear_bias_may_be_null_but_not_wrong(handles):
    out, x, w = handles(2, 3), handles(2, 4), handles(3, 4)
    for h in (x, w):
        LIB.llaisysTensorLoad(h, np.ones(LIB.llaisysTensorNumel(h), np.float32).ctypes.data,
                              LIB.llaisysTensorNumel(h) * 4)
    assert LIB.llaisysLinear(out, x, w, NULL) == Status.OK
    assert_failed(LIB.llaisysLinear(out, x, w, handles(2)), Status.SHAPE_MISMATCH, "bias")


# ------------------------------------------------------------------------------------------
# NULL handles to every tensor function


def test_null_handles_to_tensor_functions(handles):
    t = handles(2, 3)
    buf = (ctypes.c_size_t * 4)()
    strides = (ctypes.c_ssize_t * 4)()
    data = np.zeros(6, dtype=np.float32)
    status_calls = {
        "Load": lambda: LIB.llaisysTensorLoad(NULL, data.ctypes.data, 24),
        "Read": lambda: LIB.llaisysTensorRead(NULL, data.ctypes.data, 24),
        "Shape": lambda: LIB.llaisysTensorShape(NULL, buf, 4),
        "Strides": lambda: LIB.llaisysTensorStrides(NULL, strides, 4),
        "Copy dst": lambda: LIB.llaisysTensorCopy(NULL, t),
        "Copy src": lambda: LIB.llaisysTensorCopy(t, NULL),
        "Debug": lambda: LIB.llaisysTensorDebug(NULL, 0),
    }
    for name, call in status_calls.items():
        LIB.llaisysClearLastError()
        assert_failed(call(), Status.INVALID_ARGUMENT, "NULL")
    # queries and constructors: a neutral value, with the error set
    value_calls = {
        "Ndim": (lambda: LIB.llaisysTensorNdim(NULL), 0),
        "Numel": (lambda: LIB.llaisysTensorNumel(NULL), 0),
        "DataType": (lambda: LIB.llaisysTensorDataType(NULL), DTYPE_INVALID),
        "DeviceId": (lambda: LIB.llaisysTensorDeviceId(NULL), -1),
        "IsContiguous": (lambda: LIB.llaisysTensorIsContiguous(NULL), 0),
        "Data": (lambda: LIB.llaisysTensorData(NULL), None),
        "View": (lambda: LIB.llaisysTensorView(NULL, sizes(6), 1), None),
        "Permute": (lambda: LIB.llaisysTensorPermute(NULL, sizes(1, 0), 2), None),
        "Slice": (lambda: LIB.llaisysTensorSlice(NULL, 0, 0, 1), None),
        "Reshape": (lambda: LIB.llaisysTensorReshape(NULL, sizes(6), 1), None),
        "Contiguous": (lambda: LIB.llaisysTensorContiguous(NULL), None),
    }
    for name, (call, neutral) in value_calls.items():
        LIB.llaisysClearLastError()
        assert call() == neutral, name
        assert "NULL" in last_error(), name
        assert LIB.llaisysGetLastStatus() == Status.INVALID_ARGUMENT, name
    LIB.llaisysClearLastError()
    LIB.llaisysTensorDeviceType(NULL)
    assert LIB.llaisysGetLastStatus() == Status.INVALID_ARGUMENT
    LIB.llaisysTensorDestroy(NULL)  # a no-op, like free(NULL)


def test_null_arrays_and_bad_constructor_arguments(handles):
    t = handles(2, 3)
    for call, status in [
        (lambda: LIB.llaisysTensorCreate(NULL, 2, DTYPE_F32, CPU, 0), Status.INVALID_ARGUMENT),
        (lambda: LIB.llaisysTensorCreate(sizes(2), 1, 42, CPU, 0), Status.INVALID_ARGUMENT),
        (lambda: LIB.llaisysTensorCreate(sizes(2), 1, DTYPE_INVALID, CPU, 0), Status.INVALID_ARGUMENT),
        (lambda: LIB.llaisysTensorCreate(sizes(*[1] * 9), 9, DTYPE_F32, CPU, 0), Status.INVALID_ARGUMENT),
        (lambda: LIB.llaisysTensorCreate(sizes(2), 1, DTYPE_F32, 5, 0), Status.INVALID_ARGUMENT),
        (lambda: LIB.llaisysTensorView(t, NULL, 2), Status.INVALID_ARGUMENT),
        (lambda: LIB.llaisysTensorPermute(t, NULL, 2), Status.INVALID_ARGUMENT),
        (lambda: LIB.llaisysTensorReshape(t, NULL, 2), Status.INVALID_ARGUMENT),
        (lambda: LIB.llaisysTensorView(t, sizes(*[1] * 9), 9), Status.INVALID_ARGUMENT),
    ]:
        LIB.llaisysClearLastError()
        assert not call()
        assert LIB.llaisysGetLastStatus() == status and last_error()
    # a scalar needs no shape array at all
    s = LIB.llaisysTensorCreate(NULL, 0, DTYPE_F32, CPU, 0)
    assert s and LIB.llaisysTensorNdim(s) == 0 and LIB.llaisysTensorNumel(s) == 1
    LIB.llaisysTensorDestroy(s)


def test_small_buffers_and_null_out_pointers(handles):
    t = handles(2, 3)
    small = (ctypes.c_size_t * 1)()
    assert_failed(LIB.llaisysTensorShape(t, small, 1), Status.BUFFER_TOO_SMALL, "2 dims")
    assert_failed(LIB.llaisysTensorStrides(t, (ctypes.c_ssize_t * 1)(), 1), Status.BUFFER_TOO_SMALL)
    data = np.zeros(6, dtype=np.float32)
    assert_failed(LIB.llaisysTensorRead(t, data.ctypes.data, 23), Status.BUFFER_TOO_SMALL, "24 bytes")
    assert LIB.llaisysTensorRead(t, data.ctypes.data, 24) == Status.OK
    assert LIB.llaisysTensorRead(t, data.ctypes.data, 1000) == Status.OK  # larger is fine
    assert_failed(LIB.llaisysTensorRead(t, NULL, 24), Status.INVALID_ARGUMENT, "NULL")
    assert_failed(LIB.llaisysTensorShape(t, NULL, 2), Status.INVALID_ARGUMENT, "NULL")
    assert_failed(LIB.llaisysTensorStrides(t, NULL, 2), Status.INVALID_ARGUMENT, "NULL")
    assert_failed(LIB.llaisysTensorLoad(t, NULL, 24), Status.INVALID_ARGUMENT, "NULL")
    assert_failed(LIB.llaisysTensorLoad(t, data.ctypes.data, 20), Status.SHAPE_MISMATCH, "24 bytes")
    # runtime out-pointers
    assert_failed(LIB.llaisysGetDeviceCount(CPU, NULL), Status.INVALID_ARGUMENT, "NULL")
    assert_failed(LIB.llaisysMalloc(CPU, 0, 0, 16, NULL), Status.INVALID_ARGUMENT, "NULL")
    assert_failed(LIB.llaisysStreamCreate(CPU, 0, NULL), Status.INVALID_ARGUMENT, "NULL")
    assert_failed(LIB.llaisysEventCreate(CPU, 0, NULL), Status.INVALID_ARGUMENT, "NULL")
    assert LIB.llaisysMemoryStats(CPU, 0, NULL, NULL) == Status.OK  # both optional
    for call in [lambda: LIB.llaisysStreamSynchronize(NULL), lambda: LIB.llaisysEventRecord(NULL, NULL),
                 lambda: LIB.llaisysEventQuery(NULL), lambda: LIB.llaisysEventSynchronize(NULL)]:
        LIB.llaisysClearLastError()
        assert_failed(call(), Status.INVALID_ARGUMENT, "NULL")
    ev = ctypes.c_void_p()
    assert LIB.llaisysEventCreate(CPU, 0, ctypes.byref(ev)) == Status.OK
    try:
        assert LIB.llaisysEventRecord(ev, NULL) == Status.OK
        assert_failed(LIB.llaisysEventElapsedTime(ev, ev, NULL), Status.INVALID_ARGUMENT, "NULL")
        assert_failed(LIB.llaisysEventElapsedTime(ev, NULL, ctypes.byref(ctypes.c_float())),
                      Status.INVALID_ARGUMENT, "NULL")
    finally:
        assert LIB.llaisysEventDestroy(ev) == Status.OK
    assert LIB.llaisysStreamDestroy(NULL) == Status.OK and LIB.llaisysEventDestroy(NULL) == Status.OK


def test_success_does_not_need_clearing_and_clear_works(handles):
    t = handles(2)
    assert_failed(LIB.llaisysTensorShape(t, NULL, 1), Status.INVALID_ARGUMENT)
    LIB.llaisysClearLastError()
    assert last_error() == "" and LIB.llaisysGetLastStatus() == Status.OK


def test_last_error_is_per_thread(handles):
    t = handles(2, 3)
    LIB.llaisysClearLastError()
    seen = {}

    def worker():
        seen["before"] = (last_error(), LIB.llaisysGetLastStatus())
        seen["status"] = LIB.llaisysTensorRead(t, NULL, 24)
        seen["after"] = (last_error(), LIB.llaisysGetLastStatus())

    th = threading.Thread(target=worker)
    th.start()
    th.join()
    assert seen["status"] == Status.INVALID_ARGUMENT
    assert seen["after"][0] and seen["after"][1] == Status.INVALID_ARGUMENT
    assert last_error() == "" and LIB.llaisysGetLastStatus() == Status.OK, "the error leaked to another thread"

    # and the other way round: this thread's error is not seen by a new thread
    assert_failed(LIB.llaisysTensorShape(t, (ctypes.c_size_t * 1)(), 1), Status.BUFFER_TOO_SMALL)
    th = threading.Thread(target=worker)
    th.start()
    th.join()
    assert seen["before"] == ("", Status.OK)
    assert LIB.llaisysGetLastStatus() == Status.BUFFER_TOO_SMALL


def test_dtype_helpers_on_bad_values():
    assert LIB.llaisysDataTypeSize(0) == 0 and LIB.llaisysDataTypeSize(99) == 0
    assert LIB.llaisysDataTypeName(99) == b"invalid" and LIB.llaisysDataTypeName(-1) == b"invalid"
    assert LIB.llaisysVersion().decode() == llaisys.__version__


# ------------------------------------------------------------------------------------------
# sizes that overflow size_t (or ptrdiff_t) when multiplied or rounded up

SIZE_MAX = (1 << 64) - 1
HOST, PINNED, DEVICE = 0, 1, 2


@pytest.mark.parametrize("kind", [HOST, PINNED, DEVICE])
@pytest.mark.parametrize("size", [SIZE_MAX, SIZE_MAX - 10, SIZE_MAX - 63, 1 << 63, 1 << 62])
def test_huge_malloc_is_out_of_memory(kind, size):
    """A size whose round-up to whole 64-byte lines wraps must not give a tiny block."""
    out = ctypes.c_void_p(0x1234)
    status = LIB.llaisysMalloc(CPU, 0, kind, size, ctypes.byref(out))
    if status == Status.OK:  # the old bug: success with a block of a few bytes
        LIB.llaisysFree(CPU, 0, kind, out)
    assert_failed(status, Status.OUT_OF_MEMORY, "bytes")
    assert out.value is None


@pytest.mark.parametrize("shape, dtype, status", [
    ((1 << 62, 1 << 62), DTYPE_F32, Status.INVALID_ARGUMENT),  # elements overflow
    ((1 << 61, 4), DTYPE_F32, Status.INVALID_ARGUMENT),  # bytes overflow
    ((0, 1 << 62, 1 << 62), DTYPE_F32, Status.INVALID_ARGUMENT),  # empty, but its strides overflow
    ((1 << 63,), 6, Status.INVALID_ARGUMENT),  # u8: byte offsets past PTRDIFF_MAX
    ((1 << 62,), 6, Status.OUT_OF_MEMORY),  # fits the arithmetic; no machine has 4 EiB
])
def test_overflowing_shapes_are_refused(shape, dtype, status):
    LIB.llaisysClearLastError()
    h = LIB.llaisysTensorCreate(sizes(*shape), len(shape), dtype, CPU, 0)
    if h:
        LIB.llaisysTensorDestroy(h)
    assert not h, f"created a tensor of shape {shape}"
    assert LIB.llaisysGetLastStatus() == status, last_error()


def test_views_of_an_empty_tensor_cannot_overflow_their_strides(handles):
    empty = handles(0, 4)
    for make in (LIB.llaisysTensorView, LIB.llaisysTensorReshape):
        LIB.llaisysClearLastError()
        h = make(empty, sizes(0, 1 << 62, 1 << 62), 3)
        if h:
            LIB.llaisysTensorDestroy(h)
        assert not h and LIB.llaisysGetLastStatus() == Status.INVALID_ARGUMENT, last_error()
        assert "too large" in last_error() or "overflows" in last_error()
    ok = LIB.llaisysTensorView(empty, sizes(4, 0), 2)  # a legal view of it still works
    assert ok, last_error()
    LIB.llaisysTensorDestroy(ok)
