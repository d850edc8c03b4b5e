"""llaisys: an LLM inference engine for decoder-only models (Qwen2, Llama 2/3, Qwen3, Mistral).

The C++ core lives in libllaisys (bound with ctypes in ``llaisys.libllaisys``); this package
adds tensors, ops, the device runtime, and (in later layers) the models, the engine and the
OpenAI-compatible server. Importing it never imports torch or transformers.
"""

from . import ops, runtime
from .libllaisys import (DataType, DeviceLostError, DeviceType, LlaisysError, LlaisysInputError, MemcpyKind,
                         MemoryKind, Status)
from .libllaisys import LIB as _LIB
from .engine import LLM, PoolingParams, SamplingParams
from .tensor import Tensor

__version__ = _LIB.llaisysVersion().decode()

__all__ = [
    "DataType",
    "LLM",
    "PoolingParams",
    "SamplingParams",
    "DeviceType",
    "DeviceLostError",
    "LlaisysError",
    "LlaisysInputError",
    "MemcpyKind",
    "MemoryKind",
    "Status",
    "Tensor",
    "ops",
    "runtime",
    "__version__",
]
