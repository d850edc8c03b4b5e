"""Worker: owns the device, the weights, the tokenizer and the KV cache of one model."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Optional, Union

from ..dtypes import as_dtype
from ..kv_cache import as_layout
from ..libllaisys import DeviceType
from ..models import hub
from ..models.loader import load_model
from ..models.qwen2 import Qwen2Model
from ..models.tokenizer import Tokenizer
from .config import EngineConfig
from .model_runner import CoreModelRunner

DEFAULT_KV_CACHE_MEMORY = 1 << 30  # 1 GiB
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 1 << 10, "m": 1e6, "mb": 1e6, "mib": 1 << 20,
          "g": 1e9, "gb": 1e9, "gib": 1 << 30, "t": 1e12, "tb": 1e12, "tib": 1 << 40}


def parse_bytes(value: Union[int, str]) -> int:
    """A byte count from an int or a string such as '512MiB' or '2GB'."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        m = _SIZE.match(str(value))
        if not m or m.group(2) is not None and m.group(2).lower() not in _UNITS:
            raise ValueError(f"cannot read {value!r} as a size (e.g. 1073741824, '512MiB', '2GB')")
        n = int(float(m.group(1)) * _UNITS[(m.group(2) or "").lower()])
    if n <= 0:
        raise ValueError(f"a memory size must be positive, got {value!r}")
    return n


def as_device(device: Union[str, DeviceType]) -> DeviceType:
    if isinstance(device, DeviceType):
        return device
    try:
        return DeviceType[str(device).upper()]
    except KeyError:
        raise ValueError(f"unknown device {device!r}; expected 'cpu' or 'nvidia'") from None


@dataclass
class WorkerConfig:
    """What to load and how much memory to give the KV cache."""

    model: str  # a model directory or a known model name (downloaded on first use)
    dtype: Optional[str] = None  # weight dtype override: "bf16", "f16", "f32"; None keeps the checkpoint's
    device: str = "cpu"
    kv_layout: str = "block"
    kv_dtype: str = "f32"  # K/V storage dtype
    kv_cache_memory: Union[int, str] = DEFAULT_KV_CACHE_MEMORY  # bytes for K and V of all layers


class Worker:
    """Loads the model once and sizes the KV pool from the memory budget."""

    def __init__(self, cfg: WorkerConfig):
        t0 = time.monotonic()
        self.path = hub.resolve_model(cfg.model)
        self.tokenizer = Tokenizer.from_dir(self.path)
        self.model = Qwen2Model(load_model(self.path, dtype=cfg.dtype), device=as_device(cfg.device))
        self.load_seconds = time.monotonic() - t0
        self.kv_layout = as_layout(cfg.kv_layout).name.lower()
        self.kv_dtype = as_dtype(cfg.kv_dtype)
        self.kv_budget = parse_bytes(cfg.kv_cache_memory)
        self.cache = None

    @property
    def name(self) -> str:
        return os.path.basename(os.path.normpath(self.path))

    def bytes_per_token(self) -> int:
        c = self.model.config
        return 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * self.kv_dtype_size()

    def kv_dtype_size(self) -> int:
        from ..libllaisys import LIB

        return LIB.llaisysDataTypeSize(int(self.kv_dtype))

    def num_blocks(self, block_size: int) -> int:
        n = self.kv_budget // (self.bytes_per_token() * block_size)
        if n < 1:
            raise ValueError(f"kv_cache_memory of {self.kv_budget} bytes holds less than one block of {block_size} "
                             f"tokens ({self.bytes_per_token() * block_size} bytes)")
        return int(n)

    def make_runner(self, config: EngineConfig) -> CoreModelRunner:
        """Allocate the KV cache for `config` (once) and return the runner over it."""
        if self.cache is not None:
            self.cache.close()
        self.cache = self.model.create_kv_cache(config.kv_layout, n_slots=config.num_kv_slots,
                                                block_size=config.block_size, dtype=self.kv_dtype)
        return CoreModelRunner(self.model, self.cache)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
            self.cache = None
        self.model.close()
