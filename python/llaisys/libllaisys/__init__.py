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


def _load() -> ctypes.CDLL:
    path = _library_path()
    if not path.exists():
        raise ImportError(
            f"libllaisys not found at {path}: install the package with `pip install .` "
            "(which builds it), or point LLAISYS_LIBRARY at a built libllaisys.so"
        )
    return ctypes.CDLL(str(path))


LIB = _load()
declare_base(LIB)

from . import kv_cache as _kv_cache  # noqa: E402
from . import model as _model  # noqa: E402
from . import ops as _ops  # noqa: E402
from . import qwen2 as _qwen2  # noqa: E402
from . import runtime as _runtime  # noqa: E402
from . import sampler as _sampler  # noqa: E402
from . import tensor as _tensor  # noqa: E402

for _module in (_runtime, _tensor, _ops, _sampler, _kv_cache, _qwen2, _model):
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
