"""Worker: owns the device, the weights, the tokenizer and the KV cache of one model."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Optional, Union

from .. import runtime
from ..dtypes import as_dtype, is_quantized, quant_byte_shape
from ..dtypes import block_size as quant_block_size
from ..kv_cache import as_layout
from ..libllaisys import DeviceType
from ..models import hub
from ..models.checkpoint import load_checkpoint
from ..models.model import Model
from .config import DEFAULT_KV_DTYPE, KV_DTYPES, KV_DTYPES_CPU_ONLY, EngineConfig, check_kv_dtype
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


def kv_budget_from(utilization: float, total: int, free: int, own: int, work: int) -> int:
    """The KV budget of one instance given `utilization` of a GPU of `total` bytes, as vLLM
    sizes it: the instance may hold utilization x total in all, of which its weights (`own`,
    what it allocated so far) and one step's workspace (`work`) are spent; memory other
    processes or instances hold does not count against it, but what is left must be free now."""
    budget = int(utilization * total) - own - work
    mib = lambda b: f"{b / (1 << 20):.0f} MiB"  # noqa: E731
    if budget <= 0:
        raise ValueError(f"gpu_memory_utilization {utilization} leaves no room for the KV cache: it allows "
                         f"{mib(utilization * total)} of {mib(total)}, the weights hold {mib(own)} and a step "
                         f"needs {mib(work)}")
    if budget + work > free:
        raise ValueError(f"gpu_memory_utilization {utilization} asks for {mib(budget + work)} more for the KV cache "
                         f"and a step, but only {mib(free)} of {mib(total)} are free (other processes hold the "
                         f"rest): lower gpu_memory_utilization or free GPU memory")
    return budget


def as_device(device: Union[str, DeviceType]) -> DeviceType:
    if isinstance(device, DeviceType):
        return device
    try:
        return DeviceType[str(device).upper()]
    except KeyError:
        raise ValueError(f"unknown device {device!r}; expected 'cpu' or 'nvidia'") from None


def check_device_id(device: DeviceType, device_id) -> int:
    """`device_id` as an int, or ValueError: the CPU is device 0 only; an NVIDIA id must name a
    GPU this process sees (0 .. runtime.device_count - 1)."""
    if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
        raise ValueError(f"device_id must be an integer >= 0, got {device_id!r}")
    if device == DeviceType.CPU:
        if device_id != 0:
            raise ValueError(f"device_id {device_id} with device='cpu': the CPU is device 0 (device_id picks a GPU "
                             f"with device='nvidia')")
        return 0
    n = runtime.device_count(device)
    if device_id >= n:
        seen = "none (no NVIDIA build, driver or GPU)" if n == 0 else f"{n}, ids 0..{n - 1}"
        raise ValueError(f"device_id {device_id} is out of range: NVIDIA devices this process sees: {seen}")
    return device_id


@dataclass
class WorkerConfig:
    """What to load and how much memory to give the KV cache."""

    model: str  # a model directory, a .gguf file, or a known model name (downloaded on first use)
    dtype: Optional[str] = None  # float weight dtype override: "bf16", "f16", "f32"; None keeps the checkpoint's
    # (a GGUF's quantized matrices stay quantized; its float dtype defaults to f32, gguf_model.py)
    quant: Optional[str] = None  # a known model's download format: "q4_k_m", "q8_0", "bf16" (hub.QUANTS)
    quantize: Optional[str] = None  # quantize an HF directory's matrices at load: "q8_0", "q4_k" (models/quantize.py)
    device: str = "cpu"
    device_id: int = 0  # which device of that type (check_device_id): the model, its KV cache and sampler live there
    kv_layout: str = "block"
    kv_dtype: str = DEFAULT_KV_DTYPE  # K/V storage dtype: "f32", "f16" or "bf16" (config.KV_DTYPES)
    kv_cache_memory: Union[int, str] = DEFAULT_KV_CACHE_MEMORY  # bytes for K and V of all layers
    # GPU only: size the KV pool so that the process uses this fraction of the GPU's memory
    # (after the weights and the step's workspace), instead of kv_cache_memory
    gpu_memory_utilization: Optional[float] = None
    # CPU kernel threads for the whole process (llaisys.runtime.set_num_threads), set before the
    # weights load; None keeps the current count (default: the physical cores)
    threads: Optional[int] = None
    # one quantized-linear path at every batch size for the whole process (llaisys.runtime.
    # set_batch_invariant), CPU only; None keeps the process's setting (default: off)
    batch_invariant: Optional[bool] = None


class Worker:
    """Loads the model once and sizes the KV pool from the memory budget."""

    def __init__(self, cfg: WorkerConfig):
        self.config = cfg  # what was asked for (a draft model is loaded alike)
        u = cfg.gpu_memory_utilization
        if u is not None:  # checked before the load
            if as_device(cfg.device) != DeviceType.NVIDIA:
                raise ValueError("gpu_memory_utilization sizes the KV cache of a GPU; with device='cpu' "
                                 "give kv_cache_memory instead")
            if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0.0 < u <= 1.0:
                raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {u!r}")
        kv_dtype = check_kv_dtype(cfg.kv_dtype)  # checked before the load
        device = as_device(cfg.device)
        if kv_dtype in KV_DTYPES_CPU_ONLY and device != DeviceType.CPU:
            raise ValueError(f"kv_dtype {kv_dtype!r} runs on the CPU only; on device {device.name.lower()!r} "
                             f"use one of {tuple(d for d in KV_DTYPES if d not in KV_DTYPES_CPU_ONLY)}")
        device_id = check_device_id(device, cfg.device_id)
        if cfg.threads is not None:  # checked (ValueError naming threads) before the load
            runtime.set_num_threads(cfg.threads)
        if cfg.batch_invariant is not None:
            if cfg.batch_invariant is True and device != DeviceType.CPU:
                raise ValueError("batch_invariant governs the CPU's quantized linear; the GPU's int8 kernels "
                                 "and its dequantized GEMM still split by batch size")
            runtime.set_batch_invariant(cfg.batch_invariant)
        t0 = time.monotonic()
        self.path = hub.resolve_model(cfg.model, quant=cfg.quant)
        loaded, self.tokenizer = load_checkpoint(self.path, dtype=cfg.dtype, quantize=cfg.quantize)
        self._in_use_before = 0  # device memory in use before the weights (gpu_memory_utilization)
        if u is not None:  # on the device the model below goes to
            runtime.empty_cache(device, device_id)
            free, total = runtime.memory_info(device, device_id)
            self._in_use_before = total - free
        self.model = Model(loaded, device=device, device_id=device_id)
        del loaded  # the core holds its own copy of every weight
        self.load_seconds = time.monotonic() - t0
        self.kv_layout = as_layout(cfg.kv_layout).name.lower()
        self.kv_dtype = as_dtype(kv_dtype)
        head_dim = int(self.model.config.head_dim)
        if is_quantized(self.kv_dtype) and head_dim % quant_block_size(self.kv_dtype):
            self.model.close()
            raise ValueError(f"kv_dtype {kv_dtype!r} stores blocks of {quant_block_size(self.kv_dtype)} values "
                             f"per head; this model's head_dim {head_dim} is not a multiple (use f16, bf16 or f32)")
        self.kv_budget = parse_bytes(cfg.kv_cache_memory)
        self.gpu_memory_utilization = cfg.gpu_memory_utilization
        self.cache = None

    @property
    def name(self) -> str:
        base = os.path.basename(os.path.normpath(self.path))
        return base[:-5] if base.lower().endswith(".gguf") else base

    def bytes_per_token(self) -> int:
        """Bytes of K and V for one token over all layers (the pool is sized by these)."""
        c = self.model.config
        return 2 * c.num_hidden_layers * c.num_key_value_heads * self.kv_row_bytes()

    def kv_row_bytes(self) -> int:
        """Bytes of one head's K (or V) row: head_dim values of the KV dtype, or whole blocks of a
        block-quantized one (q8_0: head_dim / 32 blocks of 34 bytes)."""
        head_dim = int(self.model.config.head_dim)
        if is_quantized(self.kv_dtype):
            return quant_byte_shape((head_dim,), self.kv_dtype)[0]
        from ..libllaisys import LIB

        return head_dim * LIB.llaisysDataTypeSize(int(self.kv_dtype))

    def workspace_bytes(self, max_num_batched_tokens: int, max_num_seqs: int) -> int:
        """Device memory of one step's buffers at the largest batch (the core's run state: f32
        activations of every token, the logits of the sampled rows, a weight-dtype copy of the
        widest linear input), with a quarter on top for the libraries' own scratch."""
        c = self.model.config
        q, kv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
        per_token = 4 * (3 * c.hidden_size + (q + 2 * kv) + q + 3 * c.intermediate_size) + 2 * c.intermediate_size
        per_sample = 4 * (c.vocab_size + c.hidden_size)
        rows = per_token * max_num_batched_tokens + per_sample * max_num_seqs
        if self.model.device == DeviceType.NVIDIA and os.environ.get("LLAISYS_CUDA_GRAPHS", "0") in ("1", "padded"):
            # decode steps padded for CUDA graphs run in a workspace of their own, sized for the
            # bucket of max_num_seqs rows (src/models/decoder/padded_decode.hpp)
            n = min(max_num_seqs, 512)  # PaddedDecode::kMaxRows
            padded = n if n <= 2 else 4 if n <= 4 else -(-n // 8) * 8
            rows += (per_token + per_sample) * padded
        return int(1.25 * rows) + (64 << 20)

    def kv_budget_for(self, max_num_batched_tokens: int, max_num_seqs: int) -> int:
        """Bytes for K and V: kv_cache_memory, or on a GPU with gpu_memory_utilization, this
        instance's share of the GPU (kv_budget_from)."""
        if self.gpu_memory_utilization is None:
            return self.kv_budget
        runtime.empty_cache(self.model.device, self.model.device_id)  # cached free blocks would count as used
        free, total = runtime.memory_info(self.model.device, self.model.device_id)
        own = max(0, (total - free) - self._in_use_before)
        return kv_budget_from(self.gpu_memory_utilization, total, free, own,
                              self.workspace_bytes(max_num_batched_tokens, max_num_seqs))

    def num_blocks(self, block_size: int, max_num_batched_tokens: int = 2048, max_num_seqs: int = 32) -> int:
        budget = self.kv_budget_for(max_num_batched_tokens, max_num_seqs)
        n = budget // (self.bytes_per_token() * block_size)
        if n < 1:
            what = "gpu_memory_utilization" if self.gpu_memory_utilization is not None else "kv_cache_memory"
            raise ValueError(f"{what} leaves {budget} bytes for the KV cache: less than one block of {block_size} "
                             f"tokens ({self.bytes_per_token() * block_size} bytes)")
        return int(n)

    def make_runner(self, config: EngineConfig) -> CoreModelRunner:
        """Allocate the KV cache for `config` (once) and return the runner over it."""
        if self.cache is not None:
            self.cache.close()
        self.cache = self.model.create_kv_cache(config.kv_layout, n_slots=config.num_kv_slots,
                                                block_size=config.block_size, dtype=self.kv_dtype)
        # CUDA graphs of decode steps captured at load (a no-op unless LLAISYS_CUDA_GRAPHS=1 on
        # a GPU); their time and memory are in memory_stats()
        self.model.capture_graphs(self.cache, config.max_num_seqs)
        return CoreModelRunner(self.model, self.cache)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
            self.cache = None
        self.model.close()
