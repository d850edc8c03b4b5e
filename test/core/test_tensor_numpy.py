"""Tensors <-> numpy: round trips for every dtype, and 16-bit float rounding that matches
torch bit for bit (random values and the special ones: NaN, inf, subnormals, ties)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import llaisys
from llaisys import DataType, Status
from llaisys.dtypes import as_dtype, is_quantized, storage_numpy_dtype

ALL_DTYPES = [d for d in DataType if d != DataType.INVALID and not is_quantized(d)]  # quantized: test_quant_tensors


def sample(dtype: DataType, shape, rng: np.random.Generator) -> np.ndarray:
    """Random values of `dtype`'s numpy storage type (bf16: its uint16 bit patterns)."""
    np_dtype = storage_numpy_dtype(dtype)
    if dtype == DataType.BOOL:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(np_dtype, np.integer):
        info = np.iinfo(np_dtype)
        return rng.integers(info.min, info.max, shape, dtype=np_dtype, endpoint=True)
    return (rng.standard_normal(shape) * 100).astype(np_dtype)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: d.name.lower())
@pytest.mark.parametrize("shape", [(), (1,), (7,), (3, 5), (2, 0, 3), (2, 3, 1, 4)])
def test_round_trip_every_dtype(dtype, shape):
    rng = np.random.default_rng(len(shape) * 31 + int(dtype))
    a = sample(dtype, shape, rng)
    t = llaisys.Tensor.from_numpy(a, dtype=dtype)
    assert t.dtype == dtype and t.shape == shape and t.numel() == a.size and t.ndim == len(shape)
    assert t.is_contiguous()
    back = t.numpy(raw=True)
    assert back.dtype == storage_numpy_dtype(dtype) and back.shape == shape
    assert back.tobytes() == a.tobytes()


def test_from_numpy_infers_dtype_and_copies():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = llaisys.Tensor.from_numpy(a[:, ::2])  # a strided source is copied in row-major order
    assert t.dtype == DataType.I32 and t.shape == (3, 2)
    np.testing.assert_array_equal(t.numpy(), a[:, ::2])
    a[:] = 0  # the tensor holds its own copy
    assert t.numpy()[2, 1] == 10
    with pytest.raises(ValueError):
        llaisys.Tensor.from_numpy(np.zeros(3, dtype=np.complex64))


def test_dtype_names():
    assert as_dtype("bf16") == as_dtype("bfloat16") == DataType.BF16
    assert as_dtype(DataType.I8) == DataType.I8
    with pytest.raises(ValueError, match="unknown dtype"):
        as_dtype("f8")
    with pytest.raises(ValueError):
        llaisys.Tensor((2,), "complex")


def special_f32() -> np.ndarray:
    """float32 values that stress 16-bit rounding."""
    f = np.float32
    bits = np.array([
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  # +-0, +-inf
        0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFF812345,  # NaNs, quiet and signalling
        0x00000001, 0x007FFFFF, 0x00800000, 0x80000001, 0x00400000,  # f32 subnormals, min normal
        0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x7F7F8001,  # max float, bf16 overflow edge
        0x3F808000, 0x3F818000, 0x3F808001, 0x3F807FFF,  # bf16 ties (even down / even up) and near ties
        0x3F801000, 0x3F803000, 0x3F801001, 0x3F800FFF,  # f16 ties around 1.0
        0x477FE000, 0x477FF000, 0x477FEFFF, 0x47800000,  # f16 max (65504), its overflow tie, 65536
        0x33800000, 0x33000000, 0x33000001, 0x387FC000, 0x38800000, 0x387FE000,  # f16 subnormals and min normal
        0x00008000, 0x00018000, 0x00010000,  # bf16 subnormal ties
    ], dtype=np.uint32).view(f)
    return bits


def random_bit_patterns(n: int, seed: int) -> np.ndarray:
    """Uniform random float32 bit patterns: every exponent, NaNs and subnormals included."""
    return np.random.default_rng(seed).integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def assert_same_bits(got: np.ndarray, want: np.ndarray, is_nan: np.ndarray) -> None:
    """Bit equality except that any NaN may stand for any NaN (torch canonicalises NaNs)."""
    got, want = got.astype(np.uint32), want.astype(np.uint32)
    bad = (got != want) & ~is_nan
    assert not bad.any(), f"{bad.sum()} values differ; first: got {got[bad][0]:#06x}, want {want[bad][0]:#06x}"


@pytest.mark.parametrize("values", ["special", "random", "normal"])
def test_bf16_rounding_matches_torch(values):
    x = {"special": special_f32, "random": lambda: random_bit_patterns(100_000, 1),
         "normal": lambda: np.random.default_rng(2).standard_normal(50_000).astype(np.float32)}[values]()
    t = llaisys.Tensor.from_numpy(x, dtype="bf16")
    ref = torch.from_numpy(x.copy()).to(torch.bfloat16)
    is_nan = np.isnan(x)
    assert_same_bits(t.numpy(raw=True), ref.view(torch.int16).numpy().view(np.uint16), is_nan)
    widened = t.numpy()  # bf16 -> f32 is exact
    assert widened.dtype == np.float32
    assert np.array_equal(np.isnan(widened), is_nan)
    np.testing.assert_array_equal(widened[~is_nan], ref.float().numpy()[~is_nan])


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")  # values beyond f16 -> inf
@pytest.mark.parametrize("values", ["special", "random", "normal"])
def test_f16_rounding_matches_torch_and_numpy(values):
    x = {"special": special_f32, "random": lambda: random_bit_patterns(100_000, 3),
         "normal": lambda: np.random.default_rng(4).standard_normal(50_000).astype(np.float32) * 1e3}[values]()
    t = llaisys.Tensor.from_numpy(x, dtype="f16")
    got = t.numpy()
    assert got.dtype == np.float16
    is_nan = np.isnan(x)
    torch_bits = torch.from_numpy(x.copy()).to(torch.float16).view(torch.int16).numpy().view(np.uint16)
    assert_same_bits(got.view(np.uint16), torch_bits, is_nan)
    assert_same_bits(got.view(np.uint16), x.astype(np.float16).view(np.uint16), is_nan)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_all_16bit_patterns_survive_storage(dtype):
    bits = np.arange(2 ** 16, dtype=np.uint16)
    src = bits if dtype == "bf16" else bits.view(np.float16)
    t = llaisys.Tensor.from_numpy(src, dtype=dtype)
    np.testing.assert_array_equal(t.numpy(raw=True).view(np.uint16), bits)


def test_load_and_read_checks():
    t = llaisys.Tensor((2, 3), "f32")
    t.load(np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3))
    with pytest.raises(ValueError):
        t.load(np.zeros((3, 2), dtype=np.float32))
    # a strided destination is loaded through a copy
    t.permute(1, 0).load(np.array([[10, 11], [12, 13], [14, 15]], dtype=np.float32))
    np.testing.assert_array_equal(t.numpy(), [[10, 12, 14], [11, 13, 15]])


def test_negative_and_too_many_dims_are_rejected():
    with pytest.raises(ValueError, match="negative"):
        llaisys.Tensor((2, -1), "f32")
    with pytest.raises(ValueError, match="at most"):
        llaisys.Tensor((1,) * 9, "f32")
    t = llaisys.Tensor((1,) * 8, "f32")  # the maximum is fine
    assert t.ndim == 8
    with pytest.raises(ValueError):
        t.view(*(1,) * 9)


def test_huge_tensor_fails_cleanly():
    with pytest.raises(llaisys.LlaisysError) as info:
        llaisys.Tensor((2 ** 40, 2 ** 30), "f32")  # overflows size_t
    assert info.value.status == Status.INVALID_ARGUMENT
    with pytest.raises(llaisys.LlaisysError) as info:
        llaisys.Tensor((2 ** 61,), "f32")  # 8 EiB: no machine has it
    assert info.value.status in (Status.OUT_OF_MEMORY, Status.INVALID_ARGUMENT)
