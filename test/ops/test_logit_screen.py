"""The greedy screen (ops.PackedLinear.argmax, the lm_head step of greedy decoding) against the
full product: for every row, the id must be exactly the first index of the largest value of
what PackedLinear computes, ties included, whether the int8 screen decided it or not.

The cases are built so that the screen's bound is what decides: a row of x is a planted weight
row (so one output stands out, as a confident next token does) plus noise and a few outlier
coordinates (Qwen2's hidden states have some); weight rows come in pairs that tie exactly or
differ in one element by one unit in the last place, so the answer is often settled by the
last bits of the f32 sums, which only the exact rescoring can see. `screened` must be true on
those (else the test would pass by always falling back) and false where the screen must
decline: x all zero (every output ties), x or W not finite. Child processes run every ISA.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import pytest
import torch

import llaisys
from llaisys import Status, ops
from llaisys.libllaisys import LIB

from cpu_features import run_on_isa
from op_bridge import Bridge

SHAPES = [(4000, 64), (5003, 130), (8191, 896)]  # (n, k): n off the panels, k off 64


def first_argmax(v: np.ndarray) -> np.ndarray:
    """Per row: the first NaN, else the first index of the largest value (numpy's rule, the
    library's: doc/architecture.md, "NaN in argmax")."""
    return np.argmax(v, axis=1)


def paired_weight(bridge: "Bridge", wdt: str, n: int, k: int) -> torch.Tensor:
    """Random rows where row 2i+1 repeats row 2i (i even) or differs from it in one element by
    one unit in the last place (i odd): exact ties and near ties next to each other."""
    w = bridge.randn((n, k), wdt, scale=0.05)
    for i in range(0, n - 1, 2):
        w[i + 1] = w[i]
        if (i // 2) % 2:
            j = i % k
            w[i + 1, j] = torch.nextafter(w[i, j], torch.tensor(1.0, dtype=w.dtype))
    return w


def planted_x(bridge: "Bridge", w: torch.Tensor, m: int) -> torch.Tensor:
    """Rows of x that each point at a random weight row (scaled up), plus noise and outliers."""
    n, k = w.shape
    targets = torch.randint(0, n, (m,), generator=bridge.gen)
    x = w[targets].float() * 60.0 + bridge.randn((m, k), "f32")
    x[:, :3] *= 40.0  # a few large coordinates, as in real hidden states
    return x


def screen_vs_full(bridge: "Bridge", w: torch.Tensor, x: torch.Tensor):
    """(ids, screened, expected ids from the full packed product)."""
    m, n = x.shape[0], w.shape[0]
    with ops.PackedLinear(bridge.to_llaisys(w)) as packed:
        ids, screened = packed.argmax(bridge.to_llaisys(x))
        out = bridge.empty((m, n), "f32")
        packed(out, bridge.to_llaisys(x))
    return ids, screened, first_argmax(out.numpy())


def run_cases(bridge: "Bridge") -> dict:
    """Every case of this file on the current ISA: {case: (ids match, screened)}."""
    results = {}
    for wdt in ("f32", "f16", "bf16"):
        for n, k in SHAPES:
            w = paired_weight(bridge, wdt, n, k)
            for m in (1, 3, 8, 11):
                ids, screened, want = screen_vs_full(bridge, w, planted_x(bridge, w, m))
                results[f"{wdt} n={n} k={k} m={m}"] = (bool((ids == want).all()), screened)
    return results


def test_screen_matches_the_full_product(bridge):
    results = run_cases(bridge)
    wrong = [case for case, (ok, _) in results.items() if not ok]
    assert not wrong, f"screened ids differ from the full product's argmax: {wrong}"
    declined = [case for case, (_, screened) in results.items() if not screened]
    assert not declined, f"the screen declined rows it should decide: {declined}"


def test_exact_ties_pick_the_first_index(bridge):
    """x planted on the second row of an identical pair: both outputs are bit-equal, and the
    first one (the even row) is the answer."""
    w = paired_weight(bridge, "bf16", 2000, 256)
    pairs = torch.arange(0, 2000, 4)  # i even: rows i and i + 1 are identical
    chosen = pairs[torch.randint(0, len(pairs), (8,), generator=bridge.gen)]
    x = w[chosen + 1].float() * 80.0
    ids, screened, want = screen_vs_full(bridge, w, x)
    assert screened
    assert (ids == want).all()
    assert (ids % 2 == 0).all(), "a tie must go to the first index"


def test_decline_when_every_output_ties(bridge):
    w = bridge.randn((3000, 64), "bf16")
    ids, screened, want = screen_vs_full(bridge, w, torch.zeros(2, 64))
    assert not screened
    assert (ids == 0).all() and (want == 0).all()


def test_decline_on_non_finite_x(bridge):
    w = bridge.randn((500, 64), "bf16")
    x = bridge.randn((3, 64), "f32")
    x[1, 5] = float("nan")
    x[2, 7] = float("inf")
    ids, screened, want = screen_vs_full(bridge, w, x)
    assert not screened
    assert (ids == want).all()


def test_decline_on_non_finite_weights(bridge):
    w = bridge.randn((500, 64), "f32")
    w[17, 3] = float("inf")
    x = planted_x(bridge, w, 4)
    ids, screened, want = screen_vs_full(bridge, w, x)
    assert not screened
    assert (ids == want).all()


def test_many_rows_in_chunks(bridge):
    """More rows than one screen call takes (8): decided in chunks, in order."""
    w = paired_weight(bridge, "bf16", 3000, 128)
    ids, screened, want = screen_vs_full(bridge, w, planted_x(bridge, w, 37))
    assert screened and ids.shape == (37,)
    assert (ids == want).all()


# ------------------------------------------------------------------------------------------
# every ISA, in child processes

CHILD = r"""
import json, sys, torch
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/.."]
from llaisys import runtime
print(runtime.cpu_isa())
from op_bridge import Bridge
from test_logit_screen import run_cases
g = torch.Generator(); g.manual_seed(7)
print(json.dumps(run_cases(Bridge(g))))
"""


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512", "avx512bf16"])
def test_screen_on_every_isa(isa):
    results = run_on_isa(isa, CHILD, str(Path(__file__).parent))
    wrong = [case for case, (ok, _) in results.items() if not ok]
    declined = [case for case, (_, screened) in results.items() if not screened]
    assert not wrong and not declined, f"{isa}: wrong {wrong}, declined {declined}"


# ------------------------------------------------------------------------------------------
# the C ABI misused


def test_argmax_misuse():
    w = llaisys.Tensor.from_numpy(np.ones((5, 12), np.float32), dtype="bf16")
    x = llaisys.Tensor.from_numpy(np.ones((3, 12), np.float32))
    x11 = llaisys.Tensor.from_numpy(np.ones((3, 11), np.float32))
    x_bf16 = llaisys.Tensor.from_numpy(np.ones((3, 12), np.float32), dtype="bf16")
    ids = (ctypes.c_int64 * 3)()
    h = ctypes.c_void_p()
    assert LIB.llaisysPackedLinearCreate(w.handle, ctypes.byref(h)) == Status.OK
    try:
        argmax = LIB.llaisysPackedLinearArgmax
        for args, want, fragment in (
                ((None, x.handle, ids, None), Status.INVALID_ARGUMENT, "packed"),
                ((h.value, None, ids, None), Status.INVALID_ARGUMENT, "in"),
                ((h.value, x.handle, None, None), Status.INVALID_ARGUMENT, "ids"),
                ((h.value, x11.handle, ids, None), Status.SHAPE_MISMATCH, "inner"),
                ((h.value, x_bf16.handle, ids, None), Status.DTYPE_MISMATCH, "in")):
            status = argmax(*args)
            message = LIB.llaisysGetLastError().decode()
            assert status == want and fragment in message, (args, status, want, message)
        assert argmax(h.value, x.handle, ids, None) == Status.OK  # screened may be NULL
        assert list(ids) == [0, 0, 0]  # every output ties: the first index
    finally:
        LIB.llaisysPackedLinearDestroy(h.value)
    with ops.PackedLinear(w) as packed:
        with pytest.raises(ValueError, match=r"\[m, k\]"):
            packed.argmax(llaisys.Tensor.from_numpy(np.ones(12, np.float32)))
    with pytest.raises(ValueError, match="closed"):
        packed.argmax(x)
