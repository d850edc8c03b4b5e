"""The calibration child of libllaisys/cpu_tuning.py (`python -m llaisys.calibrate_child decode`).

The wait policy and the prefetch distance are read once per process, so each candidate runs in its own
child, which times what decode does: one activation row through the four linear shapes of a Qwen2.5-1.5B
layer as Q4_K weights, three layers' worth (79 MB, more than a last-level cache, so the weights stream from
memory as in decode), each call one OpenMP parallel region. It prints the median seconds of one pass over the
ten it times (~5-20 ms each); the parent (cpu_tuning.calibrate) compares them.

A program apart from libllaisys, which names it but never imports it: it loads the library, which the
calibrating parent is itself in the middle of loading."""

from __future__ import annotations

import sys

# (n, k) of the 1.5B's layer linears: qkv, o, gate+up, down
SHAPES = ((2048, 1536), (1536, 1536), (17920, 1536), (1536, 8960))
LAYERS = 3
PASSES = 10


def q4_k_blocks(n: int, k: int, rng):
    """uint8 [n, k / 256 * 144]: random quants, f16 scales d and dmin of 0.01 (finite values:
    the kernels' speed does not depend on them)."""
    import numpy as np

    b = rng.integers(0, 256, (n, k // 256, 144), dtype=np.uint8)
    b[:, :, 0:4] = np.full((n, k // 256, 2), 0.01, np.float16).view(np.uint8).reshape(n, k // 256, 4)
    return b.reshape(n, -1)


def time_decode() -> float:
    """Median seconds of one pass of one row through LAYERS layers of SHAPES (Q4_K)."""
    import time

    import numpy as np

    import llaisys
    from llaisys import ops

    rng = np.random.default_rng(0)
    calls = []
    for _ in range(LAYERS):
        for n, k in SHAPES:
            w = llaisys.Tensor.from_numpy(q4_k_blocks(n, k, rng), "q4_k", shape=(n, k))
            packed = ops.PackedLinear(w)
            w.close()
            x = llaisys.Tensor.from_numpy(rng.standard_normal((1, k), dtype=np.float32))
            calls.append((packed, llaisys.Tensor((1, n), "f32"), x))
    times = []
    for i in range(PASSES + 2):  # two untimed passes first
        t0 = time.perf_counter()
        for packed, out, x in calls:
            packed(out, x)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


if __name__ == "__main__":
    if sys.argv[1:] != ["decode"]:
        sys.exit("usage: python -m llaisys.calibrate_child decode")
    print(f"{time_decode():.6f}")
