"""The calibration behind cpu_tuning.choose, for a CPU kind no table knows.

The wait policy and the prefetch distance are read once per process, so each candidate runs in
its own child process (`python -m llaisys.libllaisys.calibrate`), which times what decode does:
one activation row through the four linear shapes of a Qwen2.5-1.5B layer as Q4_K weights,
three layers' worth (79 MB, more than a last-level cache, so the weights stream from memory as
in decode), each call one OpenMP parallel region. A child prints the median seconds of one pass
over the ten it times (~5-20 ms each); the parent compares:

- sleeping (OMP_WAIT_POLICY=passive) against a 20k spin: passive is kept when it costs at most
  WAIT_TOLERANCE of the idle speed, since beside busy processes it is the one that does not
  collapse (a spinning team holds the cores its late thread needs);
- a 2048-byte software prefetch against none: kept when it is PREFETCH_GAIN faster.

Nothing here imports llaisys at module level: the parent runs while the library is loading.
"""

from __future__ import annotations

import os
import sys
from typing import Mapping, Optional

from .cpu_tuning import PASSIVE, PREFETCH_VAR, SPIN, WAIT_VARS, run_child

WAIT_TOLERANCE = 1.03  # passive's time / the spin's time at most this: passive
PREFETCH_GAIN = 0.97   # prefetch's time / none's at most this: prefetch
PREFETCH_BYTES = 2048  # the distance measured best where it helps (Intel Xeon, AMD Zen 4)

# (n, k) of the 1.5B's layer linears: qkv, o, gate+up, down
SHAPES = ((2048, 1536), (1536, 1536), (17920, 1536), (1536, 8960))
LAYERS = 3
PASSES = 10


def calibrate(environ: Mapping[str, str] = os.environ) -> Optional[dict]:
    """Time the candidates in child processes; the choices and the figures behind them, or
    None when a child failed (the caller keeps the defaults)."""
    base = {k: v for k, v in environ.items() if k not in WAIT_VARS and k != PREFETCH_VAR}
    base["LLAISYS_CALIBRATE"] = "0"  # a child never calibrates itself
    user_wait = {k: environ[k] for k in WAIT_VARS if k in environ}
    wait_known = bool(user_wait)
    spin = {**base, **(user_wait or SPIN), PREFETCH_VAR: "0"}
    t_spin = run_child(spin, "decode")
    if t_spin is None:
        return None
    # the host's load when measured: a busy host favours sleeping (delete the cache file to redo)
    out: dict = {"seconds_per_pass": {"spin_20k": t_spin}, "load_average": list(os.getloadavg())}
    out["wait_env"] = dict(user_wait or SPIN)
    out["wait_why"] = "kept from the environment"
    if not wait_known:
        t_passive = run_child({**base, **PASSIVE, PREFETCH_VAR: "0"}, "decode")
        if t_passive is None:
            return None
        out["seconds_per_pass"]["passive"] = t_passive
        ratio = t_passive / t_spin
        if ratio <= WAIT_TOLERANCE:
            out["wait_env"] = dict(PASSIVE)
            out["wait_why"] = (f"passive (idle cost {100 * (ratio - 1):+.1f}%, at most {100 * (WAIT_TOLERANCE - 1):.0f}%"
                               " allowed; it keeps its speed beside busy processes)")
        else:
            out["wait_why"] = f"a 20k spin (passive cost {100 * (ratio - 1):.1f}% idle)"
    t_pf = run_child({**base, **(user_wait or SPIN), PREFETCH_VAR: str(PREFETCH_BYTES)}, "decode")
    if t_pf is None:
        return None
    out["seconds_per_pass"][f"prefetch_{PREFETCH_BYTES}"] = t_pf
    gain = t_pf / t_spin
    out["prefetch"] = PREFETCH_BYTES if gain <= PREFETCH_GAIN else 0
    out["prefetch_why"] = (f"{PREFETCH_BYTES} B ({100 * (1 - gain):.1f}% faster than none)" if out["prefetch"]
                           else f"none ({PREFETCH_BYTES} B ahead changed a pass by {100 * (gain - 1):+.1f}%)")
    return out


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
        sys.exit("usage: python -m llaisys.libllaisys.calibrate decode")
    print(f"{time_decode():.6f}")
