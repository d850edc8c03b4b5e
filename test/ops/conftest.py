"""Fixtures for the op tests: the dtype list, per-dtype tolerances, and moving tensors
between torch (the reference) and llaisys with identical bits.

Every op test builds its inputs in torch *in the target dtype*, hands llaisys the very same
bits, computes the reference in float64 from those rounded inputs, and compares in float32.
So the only error measured is the op's own (accumulation order and the final rounding).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
import torch

import llaisys

FLOAT_DTYPES = ["f32", "f16", "bf16"]

TORCH_DTYPE = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "i64": torch.int64,
    "i32": torch.int32,
}

# (atol, rtol) per dtype, for an output compared with a float64 reference computed from the
# same rounded inputs. An op rounds its output to the dtype once, so rtol is about one unit in
# the last place of the dtype (f16: 2^-10 ~ 1e-3, bf16: 2^-7 ~ 8e-3) and 1e-5 for f32 (its
# accumulation error). atol is for quantities of magnitude ~1; a test passes `scale` to grow it
# with the magnitude of what cancels (sqrt(k) for a length-k dot product, |a|+|b| for a sum).
TOLERANCES = {
    "f32": (1e-5, 1e-5),
    "f16": (1e-3, 2e-3),
    "bf16": (1e-2, 1.6e-2),
}


class Bridge:
    """torch <-> llaisys conversions and the comparison used by every op test."""

    def __init__(self, gen: torch.Generator):
        self.gen = gen

    def randn(self, shape, dtype: str, scale: float = 1.0) -> torch.Tensor:
        """Normal(0, scale) values, rounded to `dtype` (a torch tensor of that dtype)."""
        return (torch.randn(*shape, generator=self.gen, dtype=torch.float64) * scale).to(TORCH_DTYPE[dtype])

    def uniform(self, shape, dtype: str, low: float = -1.0, high: float = 1.0) -> torch.Tensor:
        x = torch.rand(*shape, generator=self.gen, dtype=torch.float64) * (high - low) + low
        return x.to(TORCH_DTYPE[dtype])

    @staticmethod
    def torch_dtype(dtype: str) -> torch.dtype:
        return TORCH_DTYPE[dtype]

    def randint(self, shape, low: int, high: int) -> torch.Tensor:
        return torch.randint(low, high, tuple(shape), generator=self.gen, dtype=torch.int64)

    @staticmethod
    def to_llaisys(t: torch.Tensor) -> llaisys.Tensor:
        """A llaisys tensor holding exactly the bits of `t` (bf16 travels as uint16 bits)."""
        t = t.detach().contiguous()
        if t.dtype == torch.bfloat16:
            return llaisys.Tensor.from_numpy(t.view(torch.int16).numpy().view(np.uint16), dtype="bf16")
        return llaisys.Tensor.from_numpy(t.numpy())

    @staticmethod
    def empty(shape, dtype: str) -> llaisys.Tensor:
        return llaisys.Tensor(tuple(shape), dtype)

    @staticmethod
    def to_torch(t: llaisys.Tensor) -> torch.Tensor:
        """The tensor's values as torch: float dtypes widened (exactly) to float32."""
        a = t.numpy()
        out = torch.from_numpy(np.ascontiguousarray(a))
        return out.float() if out.is_floating_point() else out

    @staticmethod
    def bits(t: llaisys.Tensor) -> np.ndarray:
        """Raw storage bits of a 16-bit float tensor as uint16."""
        return t.numpy(raw=True).view(np.uint16)

    @staticmethod
    def assert_close(actual: llaisys.Tensor, expected: torch.Tensor, dtype: str, scale: float = 1.0,
                     rtol_factor: float = 1.0) -> None:
        atol, rtol = TOLERANCES[dtype]
        torch.testing.assert_close(
            Bridge.to_torch(actual), expected.to(torch.float32),
            atol=atol * scale, rtol=rtol * rtol_factor, equal_nan=True,
        )


@pytest.fixture(params=FLOAT_DTYPES)
def dtype(request) -> str:
    """Each test that takes `dtype` runs once per float dtype."""
    return request.param


@pytest.fixture(params=FLOAT_DTYPES)
def weight_dtype(request) -> str:
    """For ops whose weights may have another dtype than the activations."""
    return request.param


@pytest.fixture
def gen(request) -> torch.Generator:
    """A torch generator seeded from the test's id: reproducible, different per test case."""
    g = torch.Generator()
    g.manual_seed(zlib.crc32(request.node.nodeid.encode()))
    return g


@pytest.fixture
def bridge(gen) -> Bridge:
    return Bridge(gen)
