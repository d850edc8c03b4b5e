"""Timing and summary statistics shared by the benchmarks (standard library only)."""

from __future__ import annotations

import os
import time
from typing import Optional


def time_per_call(fn, min_time: float, clock=time.perf_counter) -> float:
    """Seconds per call of fn, over as many calls as fill min_time (at least one), on `clock`:
    wall time, or time.process_time for the CPU seconds of this process."""
    fn()  # warm: page in, spin up the OpenMP team
    calls, t0 = 0, clock()
    while True:
        fn()
        calls += 1
        elapsed = clock() - t0
        if elapsed >= min_time:
            return elapsed / calls


def run_header(*details: str) -> str:
    """The first line of a benchmark's output: when, on how many threads, under what load."""
    threads = f"threads: {os.environ.get('OMP_NUM_THREADS', 'all')} of {os.cpu_count()}"
    load = f"load average {os.getloadavg()[0]:.2f} at start"
    return ", ".join([time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), threads, *details, load])


def percentile(values: list, q: float) -> Optional[float]:
    """The q-th percentile (0..100) with linear interpolation (numpy's default); None if empty."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)
