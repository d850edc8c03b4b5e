"""The harness of test_quant_linear.py: COMMON, the source its child processes and its in-process
tests share (random blocks of every format, the activation-quantization bound and its ratio), the
x16 repacking rule, and run_child, which runs a source under one SIMD path (LLAISYS_ISA)."""

import json
import os
import subprocess
import sys

from cpu_features import cpu_flags, skip_unless_cpu_runs

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # test/, where block_scales is
COMMON = f"import sys\nsys.path.insert(0, {TESTS!r})\n" + r"""
import numpy as np, gguf, llaisys
from gguf import GGMLQuantizationType as Q
from llaisys import ops
from block_scales import put_f16
FORMATS = {"q4_0": (Q.Q4_0, 32, 18), "q4_1": (Q.Q4_1, 32, 20), "q5_0": (Q.Q5_0, 32, 22), "q5_1": (Q.Q5_1, 32, 24),
           "q8_0": (Q.Q8_0, 32, 34),
           "q2_k": (Q.Q2_K, 256, 84), "q3_k": (Q.Q3_K, 256, 110), "q4_k": (Q.Q4_K, 256, 144), "q5_k": (Q.Q5_K, 256, 176), "q6_k": (Q.Q6_K, 256, 210),
           "iq4_xs": (Q.IQ4_XS, 256, 136),
           "iq2_xxs": (Q.IQ2_XXS, 256, 66), "iq2_xs": (Q.IQ2_XS, 256, 74), "iq2_s": (Q.IQ2_S, 256, 82),
           "iq3_xxs": (Q.IQ3_XXS, 256, 98), "iq3_s": (Q.IQ3_S, 256, 110), "iq1_s": (Q.IQ1_S, 256, 50),
           "iq1_m": (Q.IQ1_M, 256, 56)}

def rand_blocks(fmt, n, k, rng):
    # random quants and packed scales, f16 scales of either sign around 0.01
    qt, bs, bb = FORMATS[fmt]
    b = rng.integers(0, 256, (n, k // bs, bb), dtype=np.uint8)
    def f16(shape, sign, size=0.01):
        v = rng.uniform(0.5, 1.5, shape) * size * (rng.choice([-1, 1], shape) if sign else 1)
        return v.astype(np.float16).view(np.uint8).reshape(*shape[:2], 2)
    if fmt == "q6_k":
        b[:, :, 208:210] = f16((n, k // bs), True)
    elif fmt == "q3_k":
        b[:, :, 108:110] = f16((n, k // bs), True)
    elif fmt == "q2_k":
        b[:, :, 80:82] = f16((n, k // bs), True)
        b[:, :, 82:84] = f16((n, k // bs), False)
    elif fmt == "iq1_m":
        put_f16(b, fmt, 48, f16((n, k // bs), True).view(np.uint16)[..., 0])
    else:
        b[:, :, 0:2] = f16((n, k // bs), True)
    if fmt in ("q4_k", "q5_k"):
        b[:, :, 2:4] = f16((n, k // bs), False)
    if fmt in ("q4_1", "q5_1"):  # the min m, either sign, about half the span d q covers (16 or 32 levels)
        b[:, :, 2:4] = f16((n, k // bs), True, 0.01 * (8 if fmt == "q4_1" else 16))
    return b.reshape(n, -1)

def bound_ratio(got, x, W, bs):
    xd, W = x.astype(np.float64), W.astype(np.float64)
    ref = xd @ W.T
    m, k = x.shape
    d = np.abs(xd).reshape(m, k // bs, bs).max(-1) / 127          # [m, k / bs]
    wsum = np.abs(W).reshape(W.shape[0], k // bs, bs).sum(-1)      # [n, k / bs]
    bound = 0.5 * d @ wsum.T + 1e-4 * np.abs(xd) @ np.abs(W).T
    return float((np.abs(got - ref) / bound).max()), ref

def int8_bound(x, W, bs):
    # [m, n] the activation-quantization bound of each output (the module docstring)
    xd, W = x.astype(np.float64), W.astype(np.float64)
    m, k = x.shape
    d = np.abs(xd).reshape(m, k // bs, bs).max(-1) / 127
    return 0.5 * d @ np.abs(W).reshape(W.shape[0], k // bs, bs).sum(-1).T + 1e-4 * np.abs(xd) @ np.abs(W).T

def act_block(fmt):
    return 256 if fmt.endswith("_k") or fmt.startswith("iq") else 32
"""


# Formats a packed handle repacks 16 rows at a time from AVX2 on (src/ops/linear/cpu/quant_x16.hpp).
X16_FORMATS = {"q4_k", "q6_k", "q8_0", "q5_0", "q4_1", "q5_1", "q2_k", "q3_k", "iq4_xs"}
# ... of which these only for the VNNI kernels: Q6_K AVX-512 VNNI's, the low-bit ones AVX-512
# VNNI's or AVX-VNNI's (the VEX vpdpbusd, on where the CPU has it unless LLAISYS_AVX_VNNI=0)
X16_VNNI_ONLY = {"q6_k": ("avx512_vnni",), "q2_k": ("avx512_vnni", "avx_vnni"), "q3_k": ("avx512_vnni", "avx_vnni"),
                 "iq4_xs": ("avx512_vnni", "avx_vnni")}


def repacked(fmt, isa, avx_vnni=True):
    """Whether a packed handle of fmt is in the x16 layout under isa (repacks() in
    src/ops/linear/cpu/quant_plan.cpp); avx_vnni: LLAISYS_AVX_VNNI not 0."""
    if isa == "scalar" or fmt not in X16_FORMATS:
        return False
    if fmt not in X16_VNNI_ONLY:
        return True
    have = {f for f in X16_VNNI_ONLY[fmt] if f in cpu_flags()}
    return (isa.startswith("avx512") and "avx512_vnni" in have) or (avx_vnni and "avx_vnni" in have)


def run_child(isa, code, split="0", avx_vnni="0", gfni="1", prefetch=None, iq_walk_avx2=None):
    """The child's results on SIMD path isa; split: LLAISYS_SPLIT_256, the 32-blocks' kernel form
    (1: the 128-bit 4 x 4 tiles of CPUs that split 256-bit ops, 0: 256-bit rows); avx_vnni:
    LLAISYS_AVX_VNNI, whether the x16 kernels under avx2 take the VEX vpdpbusd (1, where the CPU
    has it) or vpmaddubsw (0); gfni: LLAISYS_GFNI, whether the AVX-512 x16 kernels take their
    GFNI build (1, where the CPU has it) or the one without (0); prefetch: LLAISYS_QUANT_PREFETCH
    (None: this CPU's table value), so that the kernels' walks with and without software
    prefetches both run whatever the table says here; iq_walk_avx2: LLAISYS_IQ_WALK_AVX2, whether
    the i-quants' one-row walks on AVX-512 VNNI take the AVX2 build's (1) or not (0; None: this
    CPU's choice, src/ops/linear/cpu/quant_plan.cpp)."""
    skip_unless_cpu_runs(isa)
    env = dict(os.environ, LLAISYS_ISA=isa, LLAISYS_SPLIT_256=split, LLAISYS_AVX_VNNI=avx_vnni, LLAISYS_GFNI=gfni)
    if prefetch is not None:
        env["LLAISYS_QUANT_PREFETCH"] = prefetch
    if iq_walk_avx2 is not None:
        env["LLAISYS_IQ_WALK_AVX2"] = iq_walk_avx2
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert child.returncode == 0, child.stderr[-4000:]
    lines = child.stdout.splitlines()
    assert lines[0] == isa, f"asked for {isa}, the child ran {lines[0]}"
    return json.loads(lines[-1])
