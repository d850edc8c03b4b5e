"""The op tests' bridge between torch (the reference) and llaisys: the dtype list, per-dtype
tolerances and identical-bit copies (conftest.py's fixtures hand out a Bridge). A module of its
own, so that a test imports it by a name no other test directory uses (`from conftest import`
found another directory's conftest when several were collected)."""

from __future__ import annotations

import numpy as np
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
