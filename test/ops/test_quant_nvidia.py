"""Block-quantized weights on the NVIDIA device (src/quant/nvidia, src/ops/linear/nvidia/quant_*):
llaisysDequantize on the GPU against the CPU's, and linear over GGUF blocks on the GPU against
x @ dequantize(W)^T in float64 (gguf-py's dequantizer), for every format of quant_cases.FORMATS
(the i-quants IQ1-3 included).

- dequantize: bit-identical to the CPU (itself bit-identical to gguf-py), for f32, f16 and bf16
  outputs, random blocks, the edge blocks of quant_cases (NaN / Inf / subnormal scales) and
  real rows of the cached GGUF files.
- linear, decode (m <= 8): Q8_0, Q4_K and Q6_K run the int8 GEMV (activations quantized to
  int8 blocks of 32, dp4a), within the CPU int8 path's per-format bound; the other formats run
  the dequantize-in-register GEMV (exact products summed in f32, so within 1e-5 |x| . |W| of
  the float64 product, as the CPU's float path), as do all formats under LLAISYS_GEMV_INT8=0.
- linear, prefill (m > 8, 16-bit panels through cuBLAS): each operand rounded once to bf16
  (f16 for f16 activations), so each product moves by at most (2^-8 + 2^-16) of |x_i w_i|:
  within 4e-3 |x| . |W|. Both paths stay inside the CPU int8 path's per-format bound
  (test_quant_linear.py), which the test checks too.
16-bit outputs add their one rounding. Skipped as a whole where there is no NVIDIA GPU.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import llaisys
from llaisys import DeviceType, ops
from llaisys import runtime as rt

from quant_cases import FORMATS, as_rows, dequantize, edge_blocks, gguf_file, qtype, random_blocks, real_rows

gguf = pytest.importorskip("gguf")

NV = DeviceType.NVIDIA
pytestmark = pytest.mark.skipif(rt.device_count(NV) == 0, reason="no NVIDIA GPU in this build/machine")

GEMV_ROWS = 8  # ops/linear/nvidia/quant_linear_nvidia.hpp kQuantGemvRows
# the formats whose decode runs the int8 GEMV (the library reads LLAISYS_GEMV_INT8 once)
INT8_GEMV = set() if os.environ.get("LLAISYS_GEMV_INT8", "1").startswith("0") else {"q8_0", "q4_k", "q6_k"}
F32_BOUND = 1e-5  # decode: |err| <= F32_BOUND |x| . |W|
BF16_BOUND = 4e-3  # prefill: |err| <= BF16_BOUND |x| . |W|
OUT_ULP = {"f32": 0.0, "f16": 1e-3, "bf16": 8e-3}  # relative: a 16-bit output's one rounding


def gpu_dequantize(raw: np.ndarray, fmt: str, shape, out_dtype: str) -> np.ndarray:
    """llaisysDequantize on GPU 0 of raw bytes [rows, row bytes] (bf16 as uint16 bits)."""
    with llaisys.Tensor.from_numpy(raw, fmt, shape=shape, device=NV) as q, \
            llaisys.Tensor(shape, out_dtype, device=NV) as out:
        ops.dequantize(out, q)
        return out.numpy(raw=True)


def weight(fmt: str, n: int, k: int, rng: np.random.Generator):
    """(raw blocks [n, row bytes], W [n, k] float64 as gguf-py dequantizes them)."""
    bs, _ = gguf.GGML_QUANT_SIZES[qtype(fmt)]
    raw, shape = as_rows(random_blocks(fmt, n * k // bs, rng, scale=0.01), fmt, k // bs)
    assert shape == (n, k)
    return raw, gguf.quants.dequantize(raw, qtype(fmt)).astype(np.float64)


def act_block(fmt: str) -> int:
    """Elements of the activation blocks the CPU int8 path quantizes x in for fmt (256 for the
    K-quants and the i-quants, as quant_linear_harness.act_block)."""
    return 256 if fmt.endswith("_k") or fmt.startswith("iq") else 32


def int8_bound(x: np.ndarray, W: np.ndarray, fmt: str) -> np.ndarray:
    """[m, n] the CPU int8 path's bound of each output (test_quant_linear.py)."""
    m, k = x.shape
    bs = act_block(fmt)
    d = np.abs(x).reshape(m, k // bs, bs).max(-1) / 127
    return 0.5 * d @ np.abs(W).reshape(W.shape[0], k // bs, bs).sum(-1).T + 1e-4 * np.abs(x) @ np.abs(W).T


def decode_bound(xd: np.ndarray, W: np.ndarray, fmt: str) -> np.ndarray:
    """[m, n] the decode GEMV's bound: the int8 path's, or the float path's F32_BOUND."""
    if fmt in INT8_GEMV:
        return int8_bound(xd, W, fmt)
    return F32_BOUND * (np.abs(xd) @ np.abs(W).T)


def gpu_linear(raw, fmt, n, k, x: np.ndarray, act: str, bias=None, bias_dtype="f32") -> np.ndarray:
    """out [m, n] of linear on the GPU, activations given in `act`, read back as f32."""
    with llaisys.Tensor.from_numpy(raw, fmt, shape=(n, k), device=NV) as w, \
            llaisys.Tensor.from_numpy(x.astype(np.float32), act, device=NV) as xt, \
            llaisys.Tensor((x.shape[0], n), act, device=NV) as out:
        if bias is None:
            ops.linear(out, xt, w)
        else:
            with llaisys.Tensor.from_numpy(bias.astype(np.float32), bias_dtype, device=NV) as b:
                ops.linear(out, xt, w, b)
        return out.numpy().astype(np.float64)


def as_act(x: np.ndarray, act: str) -> np.ndarray:
    """x as the activations the GPU sees (rounded to act), float64."""
    with llaisys.Tensor.from_numpy(x.astype(np.float32), act) as t:
        return t.numpy().astype(np.float64)


# ------------------------------------------------------------------------------------------
# dequantize


@pytest.mark.parametrize("out_dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_dequantize_is_the_cpus_bit_for_bit(fmt, out_dtype):
    rng = np.random.default_rng(7)
    bs, _ = gguf.GGML_QUANT_SIZES[qtype(fmt)]
    blocks = np.concatenate([random_blocks(fmt, 70, rng), edge_blocks(fmt, rng)])  # 80 blocks
    for per_row in (1, 2, 8):  # rows of 1, 2, 8 blocks
        raw, shape = as_rows(blocks, fmt, per_row)
        cpu = dequantize(raw, fmt, shape, out_dtype)
        got = gpu_dequantize(raw, fmt, shape, out_dtype)
        assert got.dtype == cpu.dtype and got.shape == cpu.shape
        assert np.array_equal(got.view(np.uint8), cpu.view(np.uint8)), (fmt, out_dtype, per_row)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["0.5b", "1.5b"])
def test_dequantize_real_rows_is_the_cpus_bit_for_bit(model):
    path = gguf_file(model)
    if not path.is_file():
        pytest.skip(f"{path} is not cached")
    for fmt in FORMATS:
        found = real_rows(path, fmt)
        if found is None:
            continue
        _, raw, shape = found
        cpu = dequantize(raw, fmt, shape, "f32")
        assert np.array_equal(gpu_dequantize(raw, fmt, shape, "f32").view(np.uint32), cpu.view(np.uint32)), fmt


def test_dequantize_checks_before_running():
    rng = np.random.default_rng(1)
    raw, shape = as_rows(random_blocks("q8_0", 4, rng), "q8_0", 2)
    with llaisys.Tensor.from_numpy(raw, "q8_0", shape=shape, device=NV) as q:
        with llaisys.Tensor((shape[0], shape[1] + 32), "f32", device=NV) as out, \
                pytest.raises(llaisys.LlaisysError, match="out"):
            ops.dequantize(out, q)
        with llaisys.Tensor(shape, "f32") as host_out, pytest.raises(llaisys.LlaisysError, match="device"):
            ops.dequantize(host_out, q)
        with llaisys.Tensor(shape, "f32", device=NV) as x, pytest.raises(llaisys.LlaisysError, match="no kernel"):
            ops.quantize(q, x)  # quantize stays CPU-only


# ------------------------------------------------------------------------------------------
# linear


@pytest.mark.parametrize("m", [1, 3, 8, 9, 64, 300])
@pytest.mark.parametrize("fmt", FORMATS)
def test_linear_f32_within_its_bound(fmt, m):
    rng = np.random.default_rng(11 + m)
    for k in (256, 1536):
        n = 37  # not a multiple of the GEMV's 4 rows per block
        raw, W = weight(fmt, n, k, rng)
        x = rng.standard_normal((m, k))
        got = gpu_linear(raw, fmt, n, k, x, "f32")
        xd = as_act(x, "f32")
        ref = xd @ W.T
        scale = np.abs(xd) @ np.abs(W).T
        err = np.abs(got - ref)
        assert np.isfinite(got).all()
        bound = decode_bound(xd, W, fmt) if m <= GEMV_ROWS else BF16_BOUND * scale
        assert (err <= bound).all(), (fmt, k, m, float((err / scale).max()))
        assert (err <= int8_bound(xd, W, fmt)).all(), (fmt, k, m)


@pytest.mark.parametrize("m", [2, 17])
@pytest.mark.parametrize("act", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("fmt", ["q8_0", "q4_k", "q6_k"])
def test_linear_bias_and_activation_dtypes(fmt, act, m):
    rng = np.random.default_rng(5)
    n, k = 19, 512
    raw, W = weight(fmt, n, k, rng)
    x = rng.standard_normal((m, k))
    bias = as_act(rng.standard_normal(n), "bf16")
    got = gpu_linear(raw, fmt, n, k, x, act, bias, "bf16")
    xd = as_act(x, act)
    ref = xd @ W.T + bias
    scale = np.abs(xd) @ np.abs(W).T
    bound = (decode_bound(xd, W, fmt) if m <= GEMV_ROWS else BF16_BOUND * scale) + OUT_ULP[act] * np.abs(ref) + 1e-6
    assert (np.abs(got - ref) <= bound).all(), (fmt, act, m)


@pytest.mark.slow
@pytest.mark.parametrize("m", [1, 4, 128])
def test_linear_real_rows(m):
    """Rows of the cached GGUF files' real tensors, with activations of a realistic size."""
    rng = np.random.default_rng(2)
    seen = 0
    for model in ("0.5b", "1.5b"):
        path = gguf_file(model)
        if not path.is_file():
            continue
        for fmt in FORMATS:
            found = real_rows(path, fmt)
            if found is None:
                continue
            _, raw, (n, k) = found
            W = gguf.quants.dequantize(raw, qtype(fmt)).astype(np.float64)
            x = rng.standard_normal((m, k))
            got = gpu_linear(raw, fmt, n, k, x, "f32")
            bound = decode_bound(x, W, fmt) if m <= GEMV_ROWS else BF16_BOUND * (np.abs(x) @ np.abs(W).T)
            assert (np.abs(got - x @ W.T) <= bound).all(), (model, fmt, m)
            seen += 1
    if seen == 0:
        pytest.skip("no GGUF file cached")


def test_linear_empty_and_checked():
    rng = np.random.default_rng(3)
    raw, _ = weight("q4_k", 8, 256, rng)
    with llaisys.Tensor.from_numpy(raw, "q4_k", shape=(8, 256), device=NV) as w:
        with llaisys.Tensor((0, 256), "f32", device=NV) as x, llaisys.Tensor((0, 8), "f32", device=NV) as out:
            ops.linear(out, x, w)  # nothing to do
        with llaisys.Tensor((2, 512), "f32", device=NV) as x, llaisys.Tensor((2, 8), "f32", device=NV) as out, \
                pytest.raises(llaisys.LlaisysError, match="inner dimension"):
            ops.linear(out, x, w)
        with llaisys.Tensor((2, 256), "f32") as x, llaisys.Tensor((2, 8), "f32", device=NV) as out, \
                pytest.raises(llaisys.LlaisysError, match="device"):
            ops.linear(out, x, w)


@pytest.mark.parametrize("fmt", FORMATS)
def test_decode_nonfinite_activations_stay_in_their_row(fmt):
    """A NaN or an infinity in one activation row makes that row's outputs non-finite, never a
    finite wrong number, and leaves the other rows as they are alone."""
    rng = np.random.default_rng(13)
    n, k, m = 21, 512, 3
    raw, W = weight(fmt, n, k, rng)
    x = rng.standard_normal((m, k))
    alone = gpu_linear(raw, fmt, n, k, x[2:], "f32")
    for bad in (np.nan, np.inf):
        xb = x.copy()
        xb[1, 37] = bad
        got = gpu_linear(raw, fmt, n, k, xb, "f32")
        assert not np.isfinite(got[1]).any(), (fmt, bad)
        assert np.isfinite(got[[0, 2]]).all(), (fmt, bad)
        assert np.array_equal(got[2], alone[0]), (fmt, bad)  # a row's result does not depend on the others
        ref = x[0] @ W.T
        assert (np.abs(got[0] - ref) <= decode_bound(x[:1], W, fmt)[0]).all(), (fmt, bad)
