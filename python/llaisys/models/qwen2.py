"""Qwen2Model: a loaded checkpoint in the core, and the one-call-per-step interface."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ..dtypes import as_dtype
from ..kv_cache import KVCache, as_layout
from ..libllaisys import LIB, DataType, DeviceType, Status, check, error_for, last_error
from ..libllaisys.qwen2 import Batch, Qwen2Meta, StepOutput
from ..libllaisys.sampler import SamplingParams as CSamplingParams
from .loader import LoadedModel, load_model


@dataclass
class RowSampling:
    """Sampling of one sample row, as the core takes it (see include/llaisys/sampler.h)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int = 0
    step: int = 0  # index of this draw within the request (its number of output tokens)
    n_logprobs: int = 0
    prompt_tokens: Optional[np.ndarray] = None  # int64, for the repetition penalty
    output_tokens: Optional[np.ndarray] = None  # int64, for all penalties
    logit_bias: Optional[dict] = None  # token id -> bias


@dataclass
class StepResult:
    token_ids: Optional[np.ndarray]  # [n_sample] int64 sampled ids (None when not sampling)
    logprobs: Optional[np.ndarray]  # [n_sample] f32 logprob of each sampled id
    top_ids: Optional[np.ndarray]  # [n_sample, top_n] int64
    top_logprobs: Optional[np.ndarray]  # [n_sample, top_n] f32
    logits: Optional[np.ndarray]  # [n_sample, vocab] f32 when asked
    hidden: Optional[np.ndarray]  # [n_sample, hidden] f32 when asked


def _ptr(a: Optional[np.ndarray], ctype):
    return None if a is None else a.ctypes.data_as(ctypes.POINTER(ctype))


def _arr(a, dtype) -> Optional[np.ndarray]:
    return None if a is None else np.ascontiguousarray(a, dtype=dtype)


class Qwen2Model:
    """A Qwen2 model in libllaisys. Weights are copied into the core once at construction."""

    def __init__(self, loaded: LoadedModel, device: DeviceType = DeviceType.CPU, device_id: int = 0):
        cfg = loaded.config
        self.config = cfg
        self.path = loaded.path
        self.dtype = as_dtype(loaded.dtype)
        self.device = device
        self.device_id = device_id
        self.meta = Qwen2Meta(
            dtype=int(self.dtype), n_layers=cfg.num_hidden_layers, hidden_size=cfg.hidden_size,
            intermediate_size=cfg.intermediate_size, n_heads=cfg.num_attention_heads,
            n_kv_heads=cfg.num_key_value_heads, head_dim=cfg.head_dim, vocab_size=cfg.vocab_size,
            max_position_embeddings=cfg.max_position_embeddings, rms_norm_eps=cfg.rms_norm_eps,
            rope_theta=cfg.rope_theta, tie_word_embeddings=int(cfg.tie_word_embeddings))
        handle = LIB.llaisysQwen2ModelCreate(ctypes.byref(self.meta), int(device), device_id)
        if not handle:
            raise error_for(LIB.llaisysGetLastStatus(), last_error())
        self._handle = handle
        try:
            for name, t in loaded.tensors.items():
                shape = (ctypes.c_size_t * len(t.shape))(*t.shape)
                data = np.ascontiguousarray(t.data)
                check(LIB.llaisysQwen2ModelSetWeight(self._handle, name.encode(), data.ctypes.data_as(ctypes.c_void_p),
                                                     int(as_dtype(t.dtype)), shape, len(t.shape)))
            missing = ctypes.c_size_t()
            first = ctypes.create_string_buffer(256)
            check(LIB.llaisysQwen2ModelMissingWeights(self._handle, ctypes.byref(missing), first, 256))
            if missing.value:
                raise ValueError(f"{missing.value} weight(s) missing, e.g. {first.value.decode()!r}")
        except Exception:
            self.close()
            raise

    @classmethod
    def from_path(cls, path, dtype: Optional[str] = None, device: DeviceType = DeviceType.CPU) -> "Qwen2Model":
        return cls(load_model(path, dtype=dtype), device=device)

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise ValueError("model is closed")
        return self._handle

    def create_kv_cache(self, layout: str = "block", n_slots: int = 4096, block_size: int = 16,
                        dtype: "DataType | str" = DataType.F32) -> KVCache:
        lay = as_layout(layout)
        h = LIB.llaisysQwen2ModelCreateKVCache(self.handle, int(lay), int(as_dtype(dtype)), n_slots, block_size)
        return KVCache(h, lay)

    def step(self, cache: KVCache, *, token_ids, positions, query_start, sample_rows=None,
             slot_mapping=None, block_tables=None, context_lens=None, seq_ids=None,
             sampling: Optional[Sequence[RowSampling]] = None, top_capacity: int = 0,
             want_logits: bool = False, want_hidden: bool = False,
             want_logprobs: bool = True) -> Optional[StepResult]:
        """One core call for a flat batch (see include/llaisys/models/qwen2.h).

        With want_logprobs=False the result's logprobs is None; greedy rows may then be decided
        without computing every logit (the lm_head screen, doc/architecture.md).

        Returns None when a SLOT cache has no room (nothing was written)."""
        token_ids = _arr(token_ids, np.int64)
        positions = _arr(positions, np.int64)
        query_start = _arr(query_start, np.int32)
        sample_rows = _arr(sample_rows if sample_rows is not None else [], np.int32)
        slot_mapping = _arr(slot_mapping, np.int64)
        block_tables = _arr(block_tables, np.int32)
        context_lens = _arr(context_lens, np.int32)
        seq_ids = _arr(seq_ids, np.int32)
        n, n_sample = len(token_ids), len(sample_rows)
        batch = Batch(
            n_tokens=n, token_ids=_ptr(token_ids, ctypes.c_int64), positions=_ptr(positions, ctypes.c_int64),
            n_seqs=len(query_start) - 1, query_start=_ptr(query_start, ctypes.c_int32),
            slot_mapping=_ptr(slot_mapping, ctypes.c_int64), block_tables=_ptr(block_tables, ctypes.c_int32),
            max_blocks=0 if block_tables is None else (block_tables.shape[1] if block_tables.ndim == 2 else 0),
            context_lens=_ptr(context_lens, ctypes.c_int32), seq_ids=_ptr(seq_ids, ctypes.c_int32),
            n_sample=n_sample, sample_rows=_ptr(sample_rows, ctypes.c_int32))
        out = StepOutput()
        keep = []  # arrays that must outlive the call
        params_ptr = None
        res = StepResult(None, None, None, None, None, None)
        if sampling is not None:
            if len(sampling) != n_sample:
                raise ValueError(f"{len(sampling)} sampling rows for {n_sample} sample rows")
            params = (CSamplingParams * max(n_sample, 1))()
            for i, r in enumerate(sampling):
                self._fill(params[i], r, keep)
            params_ptr = params
            res.token_ids = np.zeros(n_sample, np.int64)
            out.sample.token_ids = _ptr(res.token_ids, ctypes.c_int64)
            if want_logprobs:
                res.logprobs = np.zeros(n_sample, np.float32)
                out.sample.logprobs = _ptr(res.logprobs, ctypes.c_float)
            if top_capacity > 0:
                res.top_ids = np.zeros((n_sample, top_capacity), np.int64)
                res.top_logprobs = np.zeros((n_sample, top_capacity), np.float32)
                out.sample.top_ids = _ptr(res.top_ids, ctypes.c_int64)
                out.sample.top_logprobs = _ptr(res.top_logprobs, ctypes.c_float)
                out.sample.top_capacity = top_capacity
        if want_logits:
            res.logits = np.zeros((n_sample, self.config.vocab_size), np.float32)
            out.logits = _ptr(res.logits, ctypes.c_float)
        if want_hidden:
            res.hidden = np.zeros((n_sample, self.config.hidden_size), np.float32)
            out.hidden = _ptr(res.hidden, ctypes.c_float)
        status = LIB.llaisysQwen2ModelStep(self.handle, cache.handle, ctypes.byref(batch), params_ptr,
                                           ctypes.byref(out))
        if status == Status.NO_KV_SPACE:
            return None
        check(status)
        return res

    @staticmethod
    def _fill(c: CSamplingParams, r: RowSampling, keep: list) -> None:
        c.temperature, c.top_k, c.top_p, c.min_p = r.temperature, r.top_k, r.top_p, r.min_p
        c.repetition_penalty, c.presence_penalty = r.repetition_penalty, r.presence_penalty
        c.frequency_penalty, c.seed, c.step, c.n_logprobs = r.frequency_penalty, r.seed, r.step, r.n_logprobs
        for field, count, arr in (("prompt_tokens", "n_prompt", r.prompt_tokens),
                                  ("output_tokens", "n_output", r.output_tokens)):
            if arr is not None and len(arr):
                a = np.ascontiguousarray(arr, dtype=np.int64)
                keep.append(a)
                setattr(c, field, a.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)))
                setattr(c, count, len(a))
        if r.logit_bias:
            ids = np.fromiter(r.logit_bias.keys(), np.int64)
            vals = np.fromiter(r.logit_bias.values(), np.float32)
            keep.extend((ids, vals))
            c.bias_ids = ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
            c.bias_values = vals.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            c.n_bias = len(ids)

    def close(self) -> None:
        if getattr(self, "_handle", None):
            LIB.llaisysQwen2ModelDestroy(self._handle)
            self._handle = None

    def __enter__(self) -> "Qwen2Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
