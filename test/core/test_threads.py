"""The CPU kernels' thread count: llaisysSetNumThreads / llaisysGetNumThreads and their Python
mirrors (llaisys.runtime.set_num_threads / num_threads), the default (physical cores, or
OMP_NUM_THREADS), that the count reaches the OpenMP teams of every calling thread, and that
results do not depend on it."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llaisys import runtime
from llaisys.libllaisys import LIB, LlaisysInputError, Status, last_error
from llaisys.libllaisys.runtime import MAX_THREADS

INCLUDE = Path(__file__).parents[2] / "include" / "llaisys" / "runtime.h"


@pytest.fixture
def restore_threads():
    before = runtime.num_threads()
    yield
    runtime.set_num_threads(before)


def run_python(code: str, **env) -> str:
    """Run `code` in a fresh interpreter with this one's environment plus `env` (a value of None
    removes the variable); its stdout."""
    e = dict(os.environ)
    for k, v in env.items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    proc = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def physical_cores() -> int:
    """Distinct (package, core) pairs of the CPUs this process may run on, capped by a cgroup quota."""
    cores = set()
    for cpu in os.sched_getaffinity(0):
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        cores.add(((topo / "physical_package_id").read_text().strip(), (topo / "core_id").read_text().strip()))
    n = len(cores)
    cpu_max = Path("/sys/fs/cgroup/cpu.max")
    if cpu_max.exists():
        quota, period = cpu_max.read_text().split()
        if quota != "max":
            n = min(n, -(-int(quota) // int(period)))
    return max(n, 1)


def test_max_threads_mirrors_the_header():
    assert f"#define LLAISYS_MAX_THREADS {MAX_THREADS}" in INCLUDE.read_text()


@pytest.mark.skipif(not Path("/sys/devices/system/cpu/cpu0/topology/core_id").exists(), reason="no sysfs topology")
def test_default_is_the_physical_cores():
    out = run_python("from llaisys import runtime; print(runtime.num_threads())", OMP_NUM_THREADS=None)
    assert int(out) == physical_cores()


@pytest.mark.parametrize("env, expected", [("3", 3), ("5,2", 5), ("1", 1)])
def test_default_follows_omp_num_threads(env, expected):
    out = run_python("from llaisys import runtime; print(runtime.num_threads())", OMP_NUM_THREADS=env)
    assert int(out) == expected


def test_set_and_get(restore_threads):
    for n in (1, 3, MAX_THREADS, 2):
        runtime.set_num_threads(n)
        assert runtime.num_threads() == n


@pytest.mark.parametrize("bad", [0, -1, MAX_THREADS + 1, 2**40])
def test_out_of_range_is_a_value_error_naming_threads(restore_threads, bad):
    runtime.set_num_threads(2)
    with pytest.raises(ValueError, match="threads") as info:
        runtime.set_num_threads(bad)
    assert isinstance(info.value, LlaisysInputError)
    assert runtime.num_threads() == 2  # unchanged


@pytest.mark.parametrize("bad", [2.0, "2", True, None])
def test_non_integer_is_a_type_error(bad):
    with pytest.raises(TypeError, match="threads"):
        runtime.set_num_threads(bad)


@pytest.mark.parametrize("bad", [0, -5, MAX_THREADS + 1, -(2**31)])
def test_c_abi_refuses_out_of_range_with_a_status(restore_threads, bad):
    before = runtime.num_threads()
    assert LIB.llaisysSetNumThreads(bad) == Status.INVALID_ARGUMENT
    msg = last_error()
    assert "threads" in msg and str(bad) in msg
    assert runtime.num_threads() == before


def test_c_abi_get_refuses_null():
    assert LIB.llaisysGetNumThreads(None) == Status.INVALID_ARGUMENT
    assert "out is NULL" in last_error()
    n = ctypes.c_int(-1)
    assert LIB.llaisysGetNumThreads(ctypes.byref(n)) == Status.OK and n.value >= 1


# The kernels' team size is seen from outside as the threads OpenMP creates: libgomp keeps a
# pool of team-size - 1 workers per calling thread, so /proc/self/task grows by that much.
TEAM_PROBE = r"""
import os, threading, time
import numpy as np
from llaisys import ops, runtime
from llaisys.tensor import Tensor

def tasks():
    return len(os.listdir("/proc/self/task"))

def settle(target):
    # A finished thread's OpenMP workers exit on their own time after its join: on a busy
    # machine they are still listed for a while. Wait (bounded) until they are gone.
    deadline = time.monotonic() + 20
    while tasks() > target and time.monotonic() < deadline:
        time.sleep(0.01)

x = Tensor.from_numpy(np.ones((64, 512), np.float32))
w = Tensor.from_numpy(np.ones((1024, 512), np.float32))
out = Tensor.from_numpy(np.zeros((64, 1024), np.float32))
runtime.set_num_threads(1)
base = tasks()
ops.linear(out, x, w)
one = tasks()
runtime.set_num_threads(4)
ops.linear(out, x, w)
four = tasks()
seen = []
def other():
    ops.linear(out, x, w)   # a thread that never set the count gets the process's
    seen.append(tasks())
t = threading.Thread(target=other); t.start(); t.join()
settle(four)
runtime.set_num_threads(2)
t = threading.Thread(target=other); t.start(); t.join()
print(one - base, four - base, seen[0] - four, seen[1] - four)
"""


def test_the_count_reaches_every_calling_thread():
    one, four, other4, other2 = map(int, run_python(TEAM_PROBE, OMP_NUM_THREADS=None).split())
    assert one == 0  # one thread: no workers
    assert four == 3  # the calling thread and 3 workers
    assert other4 == 1 + 3  # another thread (itself) leads a team of 4
    assert other2 == 1 + 1  # ... and of 2 after the count changed


@pytest.mark.parametrize("fmt", ["q5_0", "q4_k", "q8_0"])
def test_quantized_linear_is_identical_across_thread_counts(restore_threads, fmt):
    """Decode's rows (m = 1, 3: every thread quantizes the activations into its own copy, and a
    thread that steals another's row group reads its own) and a wide batch (m = 9 at k = 8192:
    one shared copy), through a packed weight, bit for bit at every team size."""
    from llaisys import ops
    from llaisys.tensor import Tensor

    rng = np.random.default_rng(5)
    n = 16 * 9 + 5  # row groups of 16 that do not split evenly, and a partial last one
    for m, k in ((1, 1024), (3, 4864), (9, 8192)):
        x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
        with Tensor.from_numpy(w) as wf, Tensor((n, k), fmt) as wq, Tensor.from_numpy(x) as tx:
            ops.quantize(wq, wf)
            packed = ops.PackedLinear(wq)
            results = []
            for threads in (1, 2, 3, 8):
                runtime.set_num_threads(threads)
                with Tensor((m, n), "f32") as out:
                    packed(out, tx)
                    results.append(out.numpy())
            packed.close()
        for r in results[1:]:
            np.testing.assert_array_equal(r, results[0])
        assert np.isfinite(results[0]).all()


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_linear_is_identical_across_thread_counts(restore_threads, dtype):
    from llaisys import ops
    from llaisys.tensor import Tensor

    rng = np.random.default_rng(3)
    m, k, n = 7, 200, 333  # odd sizes: uneven shares per thread
    x, w, b = rng.standard_normal((m, k)), rng.standard_normal((n, k)), rng.standard_normal(n)
    results = []
    for threads in (1, 2, 3, 8):
        runtime.set_num_threads(threads)
        with Tensor.from_numpy(x, dtype) as tx, Tensor.from_numpy(w, dtype) as tw, \
                Tensor.from_numpy(b, dtype) as tb, Tensor.from_numpy(np.zeros((m, n)), dtype) as out:
            ops.linear(out, tx, tw, tb)
            results.append(out.numpy(raw=True))
            ref_x, ref_w, ref_b = tx.numpy().astype(np.float64), tw.numpy().astype(np.float64), tb.numpy()
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    import torch

    ref = torch.nn.functional.linear(torch.tensor(ref_x), torch.tensor(ref_w), torch.tensor(ref_b, dtype=torch.float64))
    got = Tensor.from_numpy(results[0], dtype).numpy() if dtype == "bf16" else results[0].astype(np.float64)
    tol = {"f32": 1e-4, "f16": 2e-1, "bf16": 5e-1}[dtype]
    np.testing.assert_allclose(got, ref.numpy(), atol=tol, rtol=1e-2)


def test_llm_threads_is_checked_before_the_load(restore_threads):
    from llaisys import LLM

    with pytest.raises(ValueError, match="threads"):
        LLM("/nonexistent/model", threads=0)


# How idle OpenMP threads wait: the package sets its choice for this CPU kind (a bounded spin, or
# sleeping: libllaisys/cpu_tuning.py) around the library's load when the environment does not choose (libgomp prints what it read with OMP_DISPLAY_ENV=verbose).
WAIT_PROBE = r"""
import os
from llaisys import libllaisys
print(repr(libllaisys.WAIT_APPLIED), [k for k in libllaisys.WAIT_VARS if k in os.environ])
"""


def _wait_probe(**env):
    e = {k: None for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    e.update(env, OMP_DISPLAY_ENV="verbose")
    code = WAIT_PROBE
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in {**os.environ, **e}.items() if v is not None})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip(), proc.stderr


def test_the_cpu_kinds_choice_is_the_default_and_does_not_leak():
    from llaisys.libllaisys import cpu_tuning

    env = {k: v for k, v in os.environ.items() if k not in cpu_tuning.WAIT_VARS}
    expected = {k: v for k, v in cpu_tuning.choose(cpu_tuning.cpu_id(), env).env.items() if k in cpu_tuning.WAIT_VARS}
    assert expected in [cpu_tuning.SPIN, cpu_tuning.PASSIVE] + [row.env for row in cpu_tuning.WAIT_TABLE]
    out, displayed = _wait_probe()
    assert out == f"{expected!r} []"  # applied, and gone from the environment after the load
    if "GOMP_SPINCOUNT" in displayed:  # GNU OpenMP
        if "GOMP_SPINCOUNT" in expected:
            assert f"GOMP_SPINCOUNT = '{expected['GOMP_SPINCOUNT']}'" in displayed
        else:
            assert "OMP_WAIT_POLICY = 'PASSIVE'" in displayed


@pytest.mark.parametrize("var, value, shown", [("OMP_WAIT_POLICY", "active", "OMP_WAIT_POLICY = 'ACTIVE'"),
                                               ("GOMP_SPINCOUNT", "12345", "GOMP_SPINCOUNT = '12345'")])
def test_the_environment_choice_is_kept(var, value, shown):
    out, displayed = _wait_probe(**{var: value})
    assert out == f"{{}} ['{var}']"
    if "GOMP_SPINCOUNT" in displayed:
        assert shown in displayed
