"""EngineConfig: the scheduler's and the KV block manager's knobs, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .cache_reuse import check_cache_reuse

# The SLOT layout's largest seq id + 1 (LLAISYS_KV_MAX_SEQS in include/llaisys/kv_cache.h).
KV_MAX_SEQS = 256

KV_LAYOUTS = ("block", "slot")

# K/V storage dtypes the attention kernels read natively, both layouts: f32, f16 and bf16 on
# the CPU and CUDA; q8_0 (llama.cpp's -ctk/-ctv q8_0: 32 values and one f16 scale in 34 bytes)
# on the CPU only, for models whose head_dim is a multiple of 32 (Worker checks both).
KV_DTYPES = ("f32", "f16", "bf16", "q8_0")
KV_DTYPES_CPU_ONLY = ("q8_0",)
# Chosen by measurement (tools/bench_kv_dtype.py, tools/perplexity.py; doc/benchmarks.md "KV
# cache dtype"): f16 halves the KV bytes of f32 and moved no greedy token on the parity prompts,
# with logits closer to f32's than bf16's (10 mantissa bits against 7); llama.cpp's default too.
DEFAULT_KV_DTYPE = "f16"

# The step time aimed at while requests decode beside a prefill: a stream's largest gap stays
# within ~2x of it (the fit's error, the loop's own time); doc/benchmarks.md "Fair steps".
DEFAULT_DECODE_GAP_MS = 500.0
# the engine's step orders, by name -> their EngineConfig / LLM flags: synchronous; a step's
# outputs made while the next computes; and each step also planned while the one before computes
STEP_ORDERS = {"sync": {}, "async_output": {"async_output": True}, "async_scheduling": {"async_scheduling": True}}


def check_kv_dtype(value) -> str:
    """The KV dtype's name, or a ValueError naming kv_dtype."""
    name = getattr(value, "name", value)
    name = str(name).lower() if isinstance(name, str) else name
    if name not in KV_DTYPES:
        raise ValueError(f"kv_dtype must be one of {KV_DTYPES}, got {value!r}")
    return name


def _check_int(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")


@dataclass
class EngineConfig:
    """How much work one step may do and how much KV memory there is.

    Every step computes at most ``max_num_batched_tokens`` tokens for at most
    ``max_num_seqs`` sequences. The KV pool is ``num_blocks`` blocks of ``block_size`` token
    slots (in the SLOT layout the same numbers count cells: ``num_blocks * block_size``).
    """

    max_num_seqs: int = 64  # most sequences computed in one step (and running at once)
    max_num_batched_tokens: int = 2048  # token budget of one step, over all sequences
    max_model_len: int = 4096  # most tokens (prompt + output) one sequence may hold
    block_size: int = 16  # token slots per KV block
    num_blocks: int = 1024  # KV blocks in the pool (from the memory budget at start-up)
    # prefix caching of full blocks; None: on for "block", off for "slot" (where it is unsupported)
    enable_prefix_caching: Optional[bool] = None
    # most tokens one request may compute in one step (its prefill chunk); 0: no cap but the budget
    long_prefill_token_threshold: int = 0
    # while a request decodes (or several are runnable), prefill chunks are cut so a step takes
    # about this many ms, by the step times measured so far (scheduler.py); 0: token budget only
    decode_gap_ms: float = DEFAULT_DECODE_GAP_MS
    kv_layout: str = "block"  # "block" (paged, block tables) or "slot" (unified cells, seq ids)
    # llama-server's --cache-reuse: the shortest run of a recent request's cached tokens taken at
    # a new position (BLOCK, CPU or NVIDIA; cache_reuse.py, an approximation); 0: off. LLM wires it.
    cache_reuse: int = 0
    seed: Optional[int] = None  # seeds the per-request seeds the engine picks; None: from the OS
    # a step's outputs (text, stop strings, RequestOutputs) are made while the next step computes
    # on the step thread (llm_engine.py; doc/engine.md "Overlapped output processing")
    async_output: bool = False
    # plan each step while the one before computes, its sampled ids taken on the step thread
    # (vLLM's async scheduling; implies async_output; scheduler.py, doc/engine.md "Async scheduling")
    async_scheduling: bool = False

    def __post_init__(self) -> None:
        _check_int("max_num_seqs", self.max_num_seqs, 1)
        _check_int("max_num_batched_tokens", self.max_num_batched_tokens, 1)
        _check_int("max_model_len", self.max_model_len, 1)
        _check_int("block_size", self.block_size, 1)
        _check_int("num_blocks", self.num_blocks, 1)
        _check_int("long_prefill_token_threshold", self.long_prefill_token_threshold, 0)
        if isinstance(self.decode_gap_ms, bool) or not isinstance(self.decode_gap_ms, (int, float)) \
                or not 0 <= self.decode_gap_ms < float("inf"):
            raise ValueError(f"decode_gap_ms must be a number >= 0 (0: off), got {self.decode_gap_ms!r}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            # every running sequence computes at least one token per step
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                             f"max_num_seqs ({self.max_num_seqs})")
        if self.kv_layout not in KV_LAYOUTS:
            raise ValueError(f"kv_layout must be one of {KV_LAYOUTS}, got {self.kv_layout!r}")
        if self.enable_prefix_caching is None:
            self.enable_prefix_caching = self.kv_layout == "block"
        if not isinstance(self.enable_prefix_caching, bool):
            raise ValueError(f"enable_prefix_caching must be a bool or None, got {self.enable_prefix_caching!r}")
        if self.kv_layout == "slot":
            if self.enable_prefix_caching:
                raise ValueError("enable_prefix_caching needs kv_layout='block' (the SLOT layout has no block hashes)")
            if self.max_num_seqs > KV_MAX_SEQS:
                raise ValueError(f"max_num_seqs must be <= {KV_MAX_SEQS} with kv_layout='slot' "
                                 f"(seq ids), got {self.max_num_seqs}")
        check_cache_reuse(self.cache_reuse, self.kv_layout, self.enable_prefix_caching)
        for name in ("async_output", "async_scheduling"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if self.async_scheduling:
            self.async_output = True  # a step planned ahead is processed while the next computes
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")

    @property
    def num_kv_slots(self) -> int:
        """Token slots in the KV pool."""
        return self.num_blocks * self.block_size
