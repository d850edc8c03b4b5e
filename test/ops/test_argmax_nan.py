"""The argmax NaN rule (doc/architecture.md, "NaN in argmax"): a NaN counts as larger than every
number, +inf included, and among NaNs the first index wins; torch.argmax is the reference.

Checked on the argmax op (CPU, whatever LLAISYS_ISA this process runs, and NVIDIA where a GPU
is present) in f32, f16 and bf16, and on the greedy lm_head screen (PackedLinear.argmax, CPU):
it must decline whenever a logit it would look at is not finite, and the full product it falls
back to applies the rule through the row kernel's argmax.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import llaisys
from llaisys import DeviceType, ops
from llaisys import runtime as rt

NV = DeviceType.NVIDIA
NAN, INF = float("nan"), float("inf")

DEVICES = [
    pytest.param(DeviceType.CPU, id="cpu"),
    pytest.param(NV, id="nvidia", marks=pytest.mark.skipif(rt.device_count(NV) == 0,
                                                           reason="no NVIDIA GPU in this build/machine")),
]


def on_device(t: torch.Tensor, device: DeviceType) -> llaisys.Tensor:
    """A tensor on `device` holding exactly the bits of `t` (bf16 travels as uint16 bits)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return llaisys.Tensor.from_numpy(t.view(torch.int16).numpy().view(np.uint16), dtype="bf16", device=device)
    return llaisys.Tensor.from_numpy(t.numpy(), device=device)


def special_rows(n: int, gen: torch.Generator) -> tuple[torch.Tensor, list[int]]:
    """[11, n] f32 (n >= 12) of random values with NaN / inf placed, and each row's expected
    index under the rule."""
    rows, want = [], []

    def row(at: dict, expected: int, fill: float | None = None):
        r = torch.randn(n, generator=gen, dtype=torch.float64).float()
        if fill is not None:
            r.fill_(fill)
        for i, v in at.items():
            r[i] = v
        rows.append(r)
        want.append(expected)

    mid, third = n // 2, n // 3
    row({0: NAN}, 0)                                  # NaN first
    row({5: NAN, 9: NAN, mid: NAN}, 5)                # several NaNs: the first
    row({n - 1: NAN}, n - 1)                          # NaN last (in the SIMD tail when n % 8)
    row({3: INF, 7: INF, mid: NAN}, mid)              # NaN beats +inf
    row({2: -INF, 11: NAN}, 11)                       # and -inf
    row({}, 0, fill=NAN)                              # all NaN
    row({}, 0, fill=-INF)                             # all -inf: the first index
    row({mid: NAN}, mid, fill=-INF)
    row({10: INF, 6: -INF, third + 10: INF}, 10)      # +inf ties: the first
    row({third: -NAN}, third)                         # a NaN with the sign bit set
    plain = torch.randn(n, generator=gen, dtype=torch.float64).float()
    rows.append(plain)
    want.append(-1)                                   # no special value: torch decides
    return torch.stack(rows), want


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("n", [1000, 37, 151936])  # 37: a vector tail on every ISA
def test_argmax_op_follows_the_nan_rule(bridge, dtype, device, n):
    vals32, want = special_rows(n, bridge.gen)
    vals = vals32.to(bridge.torch_dtype(dtype))  # NaN, inf and -NaN survive the rounding
    rows = vals.shape[0]
    src = on_device(vals, device)
    idx = llaisys.Tensor((rows,), "i64", device=device)
    val = llaisys.Tensor((rows,), dtype, device=device)
    ops.argmax(idx, val, src)
    got = bridge.to_torch(idx)
    ref = torch.argmax(vals.float(), dim=-1).tolist()  # torch's rule
    assert got.tolist() == ref
    want = [ref[r] if w < 0 else w for r, w in enumerate(want)]
    assert got.tolist() == want
    v = bridge.to_torch(val)
    for r in range(rows):
        x = float(vals[r, want[r]].float())
        assert (math.isnan(v[r]) and math.isnan(x)) or float(v[r]) == x


@pytest.mark.parametrize("n", [1, 2, 8, 9])
def test_argmax_op_short_rows(bridge, dtype, n):
    """Rows shorter than a vector, a NaN in each position in turn."""
    for pos in range(n):
        vals = torch.full((1, n), -INF)
        vals[0, pos] = NAN
        vals = vals.to(bridge.torch_dtype(dtype))
        idx, val = bridge.empty((1,), "i64"), bridge.empty((1,), dtype)
        ops.argmax(idx, val, bridge.to_llaisys(vals))
        assert int(bridge.to_torch(idx)[0]) == pos
        assert math.isnan(bridge.to_torch(val)[0])


# ------------------------------------------------------------------------------------------
# the greedy lm_head screen


def screen_and_full(bridge, w: torch.Tensor, x: torch.Tensor):
    """(ids, screened, torch.argmax of the full packed product)."""
    m, n = x.shape[0], w.shape[0]
    with ops.PackedLinear(bridge.to_llaisys(w)) as packed:
        ids, screened = packed.argmax(bridge.to_llaisys(x))
        out = bridge.empty((m, n), "f32")
        packed(out, bridge.to_llaisys(x))
    full = torch.from_numpy(out.numpy())
    return np.asarray(ids), screened, torch.argmax(full, dim=-1).numpy(), full


@pytest.mark.parametrize("wdt", ["f32", "bf16"])
def test_screen_declines_on_a_nan_weight_and_the_nan_wins(bridge, wdt):
    w = bridge.randn((3000, 64), wdt, scale=0.05)
    w[1700, 3] = NAN  # output 1700 is NaN for every row of x
    w[2500, 9] = NAN
    x = w[torch.arange(4) * 7].float() * 60.0  # rows that would pick 0, 7, 14, 21
    ids, screened, want, _ = screen_and_full(bridge, w, x)
    assert not screened
    assert (want == 1700).all()
    assert (ids == want).all()


def test_screen_declines_on_a_nan_row_of_x_and_keeps_the_others(bridge):
    w = bridge.randn((3000, 64), "bf16", scale=0.05)
    x = w[torch.tensor([11, 22, 33])].float() * 60.0
    x[1, 5] = NAN  # every logit of row 1 is NaN: index 0
    ids, screened, want, full = screen_and_full(bridge, w, x)
    assert not screened
    assert torch.isnan(full[1]).all()
    assert ids.tolist() == want.tolist() == [11, 0, 33]


def test_screen_never_decides_an_overflowing_row(bridge):
    """x and W finite, but some products overflow: those logits are inf or NaN (inf - inf). The
    screen must not settle the row on the finite logits: the answer is torch's argmax of the
    full product, whatever the bounds did."""
    w = bridge.randn((3000, 64), "f32", scale=0.05)
    w[100, 0] = 1e20
    w[200, 0], w[200, 1] = 1e20, -1e20  # +inf - inf = NaN
    x = w[torch.tensor([5, 6])].float() * 60.0
    x[:, 0] = 1e25
    x[:, 1] = 1e25
    ids, screened, want, full = screen_and_full(bridge, w, x)
    assert torch.isnan(full[:, 200]).all() or torch.isinf(full[:, 100]).all()
    assert ids.tolist() == want.tolist()
    assert not screened
