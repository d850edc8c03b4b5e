"""llaisys.runtime.set_batch_invariant (llaisysSetBatchInvariant): with it on, a row of a linear
over GGUF blocks comes out of a batch of any size as it comes out alone, for every format, in the
file's rows (ops.linear) and packed (ops.PackedLinear); the int8 path runs at every size, and
what is left between the two is f32 summation order. The file runs again under every other SIMD
path the CPU has (LLAISYS_ISA): each has its own kernels for one row and for many. With it off, Q4_0, whose crossover is finite
on every SIMD path (quant_plan.cpp), takes the float path in a batch of 96 rows and its rows move
by the activations' int8 rounding: the difference the switch removes, seen by the same check.

The tolerance. Both sides quantize the row's activations alike and sum exact int8 products per
block; only the f32 scaling and summation may differ, so per output
    |batch - alone| <= 2e-5 |x| . |W|
while the float path against the int8 one differs by up to d / 2 per activation (test_quant_linear's
bound), about 1e-3 |x| . |W| for random data."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import llaisys
from llaisys import ops, runtime
from llaisys.libllaisys import LIB, Status
from cpu_features import skip_a_repeated_path
from quant_linear_harness import COMMON

exec(COMMON)

M, N, K = 96, 48, 512  # 96 rows: above every finite crossover on every SIMD path (at most 64)
ROWS = (0, 37, 95)  # rows run alone against the batch


@pytest.fixture
def invariant():
    runtime.set_batch_invariant(True)
    yield
    runtime.set_batch_invariant(False)


def _apply(fn, x, n):
    out = llaisys.Tensor((x.shape[0], n), "f32")
    fn(out, llaisys.Tensor.from_numpy(np.ascontiguousarray(x)))
    return out.numpy().astype(np.float64)


def _worst(fmt, fn):
    """max over ROWS of |batch - alone| / (|x| . |W|), for fn(out, x) over format fmt's weights."""
    rng = np.random.default_rng(11)
    blocks = rand_blocks(fmt, N, K, rng)
    W = gguf.quants.dequantize(blocks, FORMATS[fmt][0]).astype(np.float64)
    x = rng.standard_normal((M, K)).astype(np.float32)
    w = llaisys.Tensor.from_numpy(blocks, fmt, shape=(N, K))
    worst = 0.0
    with ops.PackedLinear(w) as packed:
        apply = {"rows": lambda o, xt: ops.linear(o, xt, w), "packed": packed}[fn]
        batch = _apply(apply, x, N)
        scale = np.abs(x.astype(np.float64)) @ np.abs(W).T
        for i in ROWS:
            alone = _apply(apply, x[i:i + 1], N)[0]
            worst = max(worst, float((np.abs(batch[i] - alone) / scale[i]).max()))
    return worst


@pytest.mark.parametrize("fn", ["rows", "packed"])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_row_alone_and_in_a_batch_agree(fmt, fn, invariant):
    assert runtime.batch_invariant()
    assert _worst(fmt, fn) <= 2e-5


@pytest.mark.skipif(os.environ.get("LLAISYS_QUANT_F32_ROWS") is not None,
                    reason="LLAISYS_QUANT_F32_ROWS sets every crossover")
def test_off_a_batch_moves_q4_0_rows():
    assert not runtime.batch_invariant()
    assert "float path" in runtime.quant_plan("q4_0")  # finite on every path
    assert _worst("q4_0", "rows") > 1e-4


def test_the_switch_and_its_errors():
    assert runtime.batch_invariant() is False  # off by default
    runtime.set_batch_invariant(True)
    try:
        assert runtime.batch_invariant() is True
        plan = runtime.quant_plan("q4_0")  # the plan is the CPU's, printed as measured
        assert "float path" in plan or os.environ.get("LLAISYS_QUANT_F32_ROWS") is not None
    finally:
        runtime.set_batch_invariant(False)
    assert runtime.batch_invariant() is False
    with pytest.raises(TypeError, match="batch_invariant"):
        runtime.set_batch_invariant(1)
    assert LIB.llaisysSetBatchInvariant(2) == Status.INVALID_ARGUMENT  # the C side
    assert "on must be 0 or 1, got 2" in LIB.llaisysGetLastError().decode()
    assert LIB.llaisysGetBatchInvariant(None) == Status.INVALID_ARGUMENT
    assert "out must not be NULL" in LIB.llaisysGetLastError().decode()
    assert runtime.batch_invariant() is False


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512", "avx512bf16"])
def test_every_simd_path(isa):
    skip_a_repeated_path(isa)
    child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", __file__, "-k",
                            "not every_simd_path"], cwd=Path(__file__).parent.parent.parent,
                           env={**os.environ, "LLAISYS_ISA": isa}, capture_output=True, text=True, timeout=900)
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
