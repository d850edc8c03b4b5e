"""ctypes bindings of libllaisys: the only place in the package that touches ctypes.

One module per C header (llaisys_h, runtime, tensor, ops); each sets argtypes/restype on
the shared library object ``LIB``. Status codes are turned into ``LlaisysError`` by
``check``.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from .llaisys_h import (
    DataType,
    DeviceType,
    LlaisysError,
    LlaisysInputError,
    MemcpyKind,
    MemoryKind,
    Status,
    declare_base,
    error_for,
)


def _library_path() -> Path:
    override = os.environ.get("LLAISYS_LIBRARY")
    if override:
        return Path(override)
    return Path(__file__).with_name("libllaisys.so")


# How OpenMP's idle threads wait, when the environment does not say: spin 20k times (tens of
# microseconds), then sleep. libgomp's default spins 300k times (~3 ms) at every barrier and
# after every parallel region; beside other busy processes the spinning threads take the cores
# from the thread the team waits for, and a single-stream decode of the 0.5B fell from 22 to 1.6
# tok/s. A short spin still catches the next region of the same step (an idle machine decodes as
# fast as before), where OMP_WAIT_POLICY=passive paid a wake-up per region (-6% idle); see the
# table in doc/architecture.md, "Threads". libgomp reads this once, as it loads, so it is set
# around the load only and never reaches child processes; setting OMP_WAIT_POLICY,
# GOMP_SPINCOUNT or KMP_BLOCKTIME yourself keeps yours.
WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
WAIT_DEFAULTS = {"GOMP_SPINCOUNT": "20000"}  # GNU OpenMP (what the build links); libomp ignores it


def _openmp_loaded() -> bool:
    """Whether an OpenMP runtime is already mapped (then it has read its settings already)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return False
    return "libgomp.so" in maps or "libomp.so" in maps or "libiomp5.so" in maps


def _load() -> tuple[ctypes.CDLL, dict]:
    path = _library_path()
    if not path.exists():
        raise ImportError(
            f"libllaisys not found at {path}: install the package with `pip install .` "
            "(which builds it), or point LLAISYS_LIBRARY at a built libllaisys.so"
        )
    added = {}
    if not any(v in os.environ for v in WAIT_VARS) and not _openmp_loaded():
        added = dict(WAIT_DEFAULTS)
    os.environ.update(added)
    try:
        return ctypes.CDLL(str(path)), added
    finally:
        for k in added:
            os.environ.pop(k, None)


# WAIT_APPLIED: the wait settings this process's OpenMP got from here ({} when the environment
# set its own or an OpenMP runtime was loaded before llaisys)
LIB, WAIT_APPLIED = _load()
declare_base(LIB)

from . import kv_cache as _kv_cache  # noqa: E402
from . import model as _model  # noqa: E402
from . import ops as _ops  # noqa: E402
from . import qwen2 as _qwen2  # noqa: E402
from . import runtime as _runtime  # noqa: E402
from . import sampler as _sampler  # noqa: E402
from . import speculative as _speculative  # noqa: E402
from . import tensor as _tensor  # noqa: E402

for _module in (_runtime, _tensor, _ops, _sampler, _speculative, _kv_cache, _qwen2, _model):
    _module.declare(LIB)


def check(status: int) -> int:
    """Raise LlaisysError for a negative status; return the status otherwise."""
    if status < 0:
        raise error_for(status, last_error())
    return status


def last_error() -> str:
    return LIB.llaisysGetLastError().decode("utf-8", "replace")


__all__ = [
    "LIB",
    "check",
    "last_error",
    "DataType",
    "DeviceType",
    "LlaisysError",
    "LlaisysInputError",
    "MemcpyKind",
    "MemoryKind",
    "Status",
]
