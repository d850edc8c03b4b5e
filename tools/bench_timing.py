"""Timing shared by the op-level benchmarks (bench_gemm.py, bench_attention.py)."""

from __future__ import annotations

import time


def time_per_call(fn, min_time: float) -> float:
    """Seconds per call of fn, over as many calls as fill min_time (at least one)."""
    fn()  # warm: page in, spin up the OpenMP team
    calls, t0 = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time:
            return elapsed / calls


def run_header(*details: str) -> str:
    """The first line of a benchmark's output: when, on how many threads, under what load."""
    import os

    threads = f"threads: {os.environ.get('OMP_NUM_THREADS', 'all')} of {os.cpu_count()}"
    load = f"load average {os.getloadavg()[0]:.2f} at start"
    return ", ".join([time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), threads, *details, load])
