"""ctypes bindings of libllaisys: the only place in the package that touches ctypes.

One module per C header (llaisys_h, runtime, tensor, ops); each sets argtypes/restype on
the shared library object ``LIB``. Status codes are turned into ``LlaisysError`` by
``check``.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from . import cpu_tuning
from .llaisys_h import (
    DataType,
    DeviceLostError,
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


# How OpenMP's idle threads wait, and (on CPU kinds the library's own table does not know) how
# far ahead the quantized kernels prefetch, chosen per CPU kind before the load: both are read
# once, as the OpenMP runtime loads and at the first kernel (cpu_tuning.py: the environment,
# then the table of measured kinds, then a cached calibration). libgomp's own default spins
# 300k times (~3 ms) at every barrier; beside busy processes the spinning threads take the
# cores from the thread the team waits for, and a single-stream decode of the 0.5B fell from 22
# to 1.6 tok/s (doc/architecture.md, "Threads"). The choice is set around the load only and
# never reaches child processes; setting OMP_WAIT_POLICY, GOMP_SPINCOUNT or KMP_BLOCKTIME (or
# LLAISYS_QUANT_PREFETCH) yourself keeps yours.
WAIT_VARS = cpu_tuning.WAIT_VARS


def _openmp_loaded() -> bool:
    """Whether an OpenMP runtime is already mapped (then it has read its settings already)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return False
    return "libgomp.so" in maps or "libomp.so" in maps or "libiomp5.so" in maps


def _load() -> tuple[ctypes.CDLL, dict, cpu_tuning.Choice]:
    path = _library_path()
    if not path.exists():
        raise ImportError(
            f"libllaisys not found at {path}: install the package with `pip install .` "
            "(which builds it), or point LLAISYS_LIBRARY at a built libllaisys.so"
        )
    choice = cpu_tuning.choose(cpu_tuning.cpu_id())
    if _openmp_loaded():  # its wait settings are read already: say so, set only the prefetch
        choice.env = {k: v for k, v in choice.env.items() if k not in WAIT_VARS}
        if not any(v in os.environ for v in WAIT_VARS):
            choice.wait = "the runtime's own wait policy (an OpenMP runtime was loaded before llaisys)"
    added = dict(choice.env)
    os.environ.update(added)
    try:
        lib = ctypes.CDLL(str(path))
        if cpu_tuning.PREFETCH_VAR in added:  # the library reads it at its first use: use it now
            lib.llaisysCpuQuantPrefetch(ctypes.byref(ctypes.c_size_t()), ctypes.byref(ctypes.c_char_p()))
        return lib, {k: v for k, v in added.items() if k in WAIT_VARS}, choice
    finally:
        for k in added:
            os.environ.pop(k, None)


# WAIT_APPLIED: the wait settings this process's OpenMP got from here ({} when the environment
# set its own or an OpenMP runtime was loaded before llaisys); TUNING: what was chosen and why
LIB, WAIT_APPLIED, TUNING = _load()
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
    "DeviceLostError",
    "DeviceType",
    "LlaisysError",
    "LlaisysInputError",
    "MemcpyKind",
    "MemoryKind",
    "Status",
]
