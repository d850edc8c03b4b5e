"""The packed-panel linear (llaisys.ops.PackedLinear, the GEMM the model runs) against torch.

Weights are made in torch in f32, f16 or bf16 and handed to llaisys bit for bit; the
reference is float64 over those rounded values; the bound is TOLERANCES["f32"] grown with
sqrt(k), as for ops.linear. Shapes straddle every edge of the kernels: m around the register
tiles (AVX2 6 rows, AVX-512 8) and the 96-row blocks, n off the 16/32-column panels, k off
the 256-deep k blocks and off the vector width. The current process runs the CPU's best ISA;
child processes force each lower one with LLAISYS_ISA (the ISA is chosen once per process).

Under avx512bf16, bf16 weights run the bf16 dot-product GEMM, which rounds the activations to
bf16 first: there the reference takes x rounded the same way (to nearest even), so the bound
still measures only the kernel's f32 accumulation. That GEMM also sums every output element
in one order whatever m is, which test_rows_do_not_depend_on_m checks bit for bit.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import llaisys
from llaisys import Status, ops, runtime
from llaisys.libllaisys import LIB

from cpu_features import can_run, run_on_isa

M_VALUES = [1, 2, 5, 6, 7, 13, 64, 200]
NK_VALUES = [(1, 1), (17, 7), (47, 300), (33, 513), (100, 64), (70, 1000)]  # (n, k)


def rounds_activations(wdt: str) -> bool:
    """Whether PackedLinear rounds x to bf16 in this process (the bf16 dot-product GEMM)."""
    return wdt == "bf16" and runtime.cpu_isa() == "avx512bf16"


def packed_case(bridge, wdt: str, m: int, n: int, k: int, bias: bool):
    x = bridge.randn((m, k), "f32")
    w = bridge.randn((n, k), wdt)
    b = bridge.randn((n,), wdt) if bias else None
    out = bridge.empty((m, n), "f32")
    with ops.PackedLinear(bridge.to_llaisys(w)) as packed:
        packed(out, bridge.to_llaisys(x), bridge.to_llaisys(b) if bias else None)
    xr = x.bfloat16() if rounds_activations(wdt) else x  # torch rounds to nearest even
    expected = xr.double() @ w.double().T + (b.double() if bias else 0.0)
    return out, expected


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("n,k", NK_VALUES)
@pytest.mark.parametrize("m", M_VALUES)
def test_packed_linear(bridge, weight_dtype, m, n, k, bias):
    out, expected = packed_case(bridge, weight_dtype, m, n, k, bias)
    bridge.assert_close(out, expected, "f32", scale=k ** 0.5)


def test_packed_linear_matches_linear(bridge, weight_dtype):
    """Same weights, same inputs: the packed GEMM and ops.linear agree to accumulation order
    (ops.linear gets x rounded to bf16 where the packed GEMM rounds it)."""
    x, w = bridge.randn((9, 130), "f32"), bridge.randn((37, 130), weight_dtype)
    b = bridge.randn((37,), weight_dtype)
    plain, packed_out = bridge.empty((9, 37), "f32"), bridge.empty((9, 37), "f32")
    xr = x.bfloat16().float() if rounds_activations(weight_dtype) else x
    ops.linear(plain, bridge.to_llaisys(xr), bridge.to_llaisys(w), bridge.to_llaisys(b))
    with ops.PackedLinear(bridge.to_llaisys(w)) as packed:
        packed(packed_out, bridge.to_llaisys(x), bridge.to_llaisys(b))
    torch.testing.assert_close(bridge.to_torch(packed_out), bridge.to_torch(plain), atol=1e-4, rtol=1e-5)


# m = 1..40 (every tile height and tail of the 8-row tiles, beyond one 32-row decode batch),
# odd k (the zero-padded last pair), n off the 32-column panels
@pytest.mark.parametrize("n,k", [(1, 3), (45, 257), (33, 896), (70, 1001)])
@pytest.mark.parametrize("m", range(1, 41))
def test_packed_linear_bf16_m_sweep(bridge, m, n, k):
    out, expected = packed_case(bridge, "bf16", m, n, k, bias=True)
    bridge.assert_close(out, expected, "f32", scale=k ** 0.5)


@pytest.mark.parametrize("n,k", [(45, 257), (70, 1001)])
def test_rows_do_not_depend_on_m(bridge, n, k):
    """avx512bf16 + bf16: row i of a batch is bit-identical to row i run alone, for every m
    (the engine's greedy output must not depend on how many sequences share a step)."""
    if not rounds_activations("bf16"):
        pytest.skip(f"the {runtime.cpu_isa()} GEMM does not promise batch-independent sums")
    x, w, b = bridge.randn((40, k), "f32"), bridge.randn((n, k), "bf16"), bridge.randn((n,), "bf16")
    with ops.PackedLinear(bridge.to_llaisys(w)) as packed:
        alone = []
        for i in range(40):
            out = bridge.empty((1, n), "f32")
            packed(out, bridge.to_llaisys(x[i:i + 1]), bridge.to_llaisys(b))
            alone.append(out.numpy())
        for m in (2, 7, 8, 9, 16, 17, 33, 40):
            out = bridge.empty((m, n), "f32")
            packed(out, bridge.to_llaisys(x[:m]), bridge.to_llaisys(b))
            for i in range(m):
                assert (out.numpy()[i] == alone[i][0]).all(), f"m={m} row {i}"


def test_packed_weight_outlives_its_tensor(bridge):
    w = bridge.randn((20, 40), "bf16")
    packed = ops.PackedLinear(bridge.to_llaisys(w))  # the tensor is freed right away
    x = bridge.randn((3, 40), "f32")
    out = bridge.empty((3, 20), "f32")
    packed(out, bridge.to_llaisys(x))
    xr = x.bfloat16() if rounds_activations("bf16") else x
    bridge.assert_close(out, xr.double() @ w.double().T, "f32", scale=40 ** 0.5)
    packed.close()
    with pytest.raises(ValueError, match="closed"):
        packed(out, bridge.to_llaisys(x))


# ------------------------------------------------------------------------------------------
# every ISA, in child processes

CHILD = r"""
import json, sys, zlib
import torch
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/.."]  # test/ops and test/ (cpu_features)
from llaisys import runtime
print(runtime.cpu_isa())
from op_bridge import TOLERANCES, Bridge
from test_linear_shapes import M_VALUES, NK_VALUES, packed_case
worst = {}
for wdt in ("f32", "f16", "bf16"):
    for m in M_VALUES:
        for n, k in NK_VALUES:
            for bias in (False, True):
                g = torch.Generator(); g.manual_seed(zlib.crc32(f"{wdt}{m}{n}{k}{bias}".encode()))
                out, expected = packed_case(Bridge(g), wdt, m, n, k, bias)
                atol, rtol = TOLERANCES["f32"]
                err = (Bridge.to_torch(out).double() - expected).abs() / (atol * k ** 0.5 + rtol * expected.abs())
                worst[f"{wdt} m={m} n={n} k={k} bias={bias}"] = float(err.max())
print(json.dumps(worst))
"""


def test_default_isa_is_the_best_the_cpu_has():
    if os.environ.get("LLAISYS_ISA"):
        pytest.skip("LLAISYS_ISA is set")
    best = "scalar"
    for isa in ("avx2", "avx512", "avx512bf16"):  # each needs the one before
        if can_run(isa):
            best = isa
    assert runtime.cpu_isa() == best


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512", "avx512bf16"])
def test_packed_linear_on_every_isa(isa):
    worst = run_on_isa(isa, CHILD, str(Path(__file__).parent))
    bad = {case: err for case, err in worst.items() if not err <= 1.0}
    assert not bad, f"{isa}: error above the f32 tolerance (x tolerance): {bad}"


# ------------------------------------------------------------------------------------------
# the C ABI misused


def tensor(*shape: int, dtype: str = "f32") -> llaisys.Tensor:
    return llaisys.Tensor.from_numpy(np.zeros(shape, dtype=np.float32), dtype=dtype)



@pytest.fixture
def packed_handle():
    h = ctypes.c_void_p()
    w = tensor(5, 12, dtype="bf16")
    assert LIB.llaisysPackedLinearCreate(w.handle, ctypes.byref(h)) == Status.OK
    yield h.value
    LIB.llaisysPackedLinearDestroy(h.value)


def assert_status(status: int, expected: Status, *fragments: str) -> None:
    message = LIB.llaisysGetLastError().decode()
    assert status == expected, f"status {status}, want {expected!r}: {message}"
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"


def test_create_misuse():
    out = ctypes.c_void_p(1234)
    assert_status(LIB.llaisysPackedLinearCreate(None, ctypes.byref(out)), Status.INVALID_ARGUMENT, "weight")
    assert out.value is None, "a failed create leaves *out NULL"
    ok = tensor(4, 4)
    assert_status(LIB.llaisysPackedLinearCreate(ok.handle, None), Status.INVALID_ARGUMENT, "out")
    # (tensors are kept in names: a temporary's handle would be freed before the call)
    flat, empty = tensor(12), tensor(0, 4)
    ints = llaisys.Tensor.from_numpy(np.zeros((3, 4), dtype=np.int64))
    transposed = tensor(4, 3).permute(1, 0)
    assert_status(LIB.llaisysPackedLinearCreate(flat.handle, ctypes.byref(out)), Status.SHAPE_MISMATCH, "weight")
    assert_status(LIB.llaisysPackedLinearCreate(ints.handle, ctypes.byref(out)), Status.DTYPE_MISMATCH)
    assert_status(LIB.llaisysPackedLinearCreate(empty.handle, ctypes.byref(out)), Status.INVALID_ARGUMENT, "empty")
    assert_status(LIB.llaisysPackedLinearCreate(transposed.handle, ctypes.byref(out)), Status.INVALID_ARGUMENT,
                  "contiguous")
    assert out.value is None
    LIB.llaisysPackedLinearDestroy(None)  # NULL is ignored


def test_apply_misuse(packed_handle):
    x, out = tensor(3, 12), tensor(3, 5)
    x11, out6, x_bf16 = tensor(3, 11), tensor(3, 6), tensor(3, 12, dtype="bf16")
    bias_f32, bias_short, bias = tensor(5), tensor(4, dtype="bf16"), tensor(5, dtype="bf16")
    apply = LIB.llaisysPackedLinearApply
    assert_status(apply(None, out.handle, x.handle, None), Status.INVALID_ARGUMENT, "packed")
    assert_status(apply(packed_handle, None, x.handle, None), Status.INVALID_ARGUMENT, "out")
    assert_status(apply(packed_handle, out.handle, x11.handle, None), Status.SHAPE_MISMATCH, "inner")
    assert_status(apply(packed_handle, out6.handle, x.handle, None), Status.SHAPE_MISMATCH, "out")
    assert_status(apply(packed_handle, out.handle, x_bf16.handle, None), Status.DTYPE_MISMATCH, "in")
    assert_status(apply(packed_handle, out.handle, x.handle, bias_f32.handle), Status.DTYPE_MISMATCH, "bias")
    assert_status(apply(packed_handle, out.handle, x.handle, bias_short.handle), Status.SHAPE_MISMATCH, "bias")
    assert apply(packed_handle, out.handle, x.handle, bias.handle) == Status.OK


def test_python_wrapper_errors():
    flat, w, out, x = tensor(7), tensor(5, 12), tensor(2, 5), tensor(2, 13)
    with pytest.raises(llaisys.LlaisysInputError) as info:
        ops.PackedLinear(flat)
    assert info.value.status == Status.SHAPE_MISMATCH
    with ops.PackedLinear(w) as packed:
        with pytest.raises(llaisys.LlaisysInputError) as info:
            packed(out, x)
        assert info.value.status == Status.SHAPE_MISMATCH
