"""Model: a loaded checkpoint of any registered architecture in the core, and the
one-call-per-step interface the engine drives (include/llaisys/models/model.h)."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from ..dtypes import as_dtype
from ..kv_cache import KVCache, as_layout
from ..libllaisys import LIB, DataType, DeviceType, Status, check
from ..libllaisys.kv_cache import llaisysKVCache_t
from ..libllaisys.model import (Activation, Arch, ModelStats, RopeScaling, StepOutput, WeightKind, has_step_embeds,
                                llaisysModel_t)
from ..libllaisys.sampler import SamplingParams as CSamplingParams
from ..owned import OwnedHandle
from .arch import weight_slots
from .config import ModelParams
from .loader import LoadedModel, load_model
from .step_io import (PackedSampling, PreparedStep, RowSampling, StepResult, fill_sampling, make_batch, make_embeds,
                      ptr)

__all__ = ["Model", "ModelStatsInfo", "RowSampling", "StepResult", "c_params"]


@dataclass(frozen=True)
class ModelStatsInfo:
    """Memory the model holds (llaisysModelStats_t), in bytes."""

    weight_bytes: int  # weights as stored (packed panels on the CPU)
    workspace_bytes: int  # the per-step activation workspace now reserved
    workspace_tokens: int  # the largest step (tokens) it is sized for
    # NVIDIA: every thread's kernel scratch and cuBLAS workspaces on the model's device (shared
    # by the models there); 0 on the CPU
    scratch_bytes: int = 0
    # NVIDIA: CUDA graphs of decode steps held now, the seconds spent capturing them, and the
    # padded decode steps' own memory (their workspace and index arrays); 0 when none ran
    graphs: int = 0
    graph_capture_s: float = 0.0
    padded_bytes: int = 0


def c_params(p: ModelParams, dtype: DataType) -> tuple:
    """(llaisysModelParams_t, the layer_window and layer_sparse arrays it points at) for `p` in
    `dtype`. The arrays must stay alive until llaisysModelCreate has copied them."""
    c = LIB.llaisysModelDefaultParams()  # struct_size and the defaults of fields we leave alone
    c.arch, c.dtype = int(Arch[p.arch.upper()]), int(dtype)
    c.n_layers, c.hidden_size, c.intermediate_size = p.n_layers, p.hidden_size, p.intermediate_size
    c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size = p.n_heads, p.n_kv_heads, p.head_dim, p.vocab_size
    c.max_position_embeddings, c.rms_norm_eps, c.rope_theta = p.max_position_embeddings, p.rms_norm_eps, p.rope_theta
    r = p.rope
    c.rope_scaling, c.rope_factor = int(RopeScaling[r.scaling.upper()]), r.factor
    c.rope_low_freq_factor, c.rope_high_freq_factor = r.low_freq_factor, r.high_freq_factor
    c.rope_original_max_position = r.original_max_position
    c.rope_beta_fast, c.rope_beta_slow, c.rope_attention_factor = r.beta_fast, r.beta_slow, r.attention_factor
    c.qkv_bias, c.qk_norm, c.tie_word_embeddings = int(p.qkv_bias), int(p.qk_norm), int(p.tie_word_embeddings)
    c.activation = int(Activation[p.activation.upper()])
    window = sparse = None
    if any(p.layer_window):
        window = (ctypes.c_uint32 * p.n_layers)(*p.layer_window)  # [n_layers]
        c.layer_window = ctypes.cast(window, ctypes.POINTER(ctypes.c_uint32))
    if p.n_experts:
        c.n_experts, c.n_experts_per_tok = p.n_experts, p.n_experts_per_tok
        c.moe_intermediate_size, c.shared_expert_intermediate_size = p.moe_intermediate_size, \
            p.shared_expert_intermediate_size
        c.norm_topk_prob = int(p.norm_topk_prob)
        sparse = (ctypes.c_uint8 * p.n_layers)(*(int(s) for s in p.layer_sparse))  # [n_layers]
        c.layer_sparse = ctypes.cast(sparse, ctypes.POINTER(ctypes.c_uint8))
    return c, (window, sparse)


def stack_experts(parts: dict, n_experts: int) -> tuple:
    """(data [E, rows, cols] or [E, rows, row bytes] for blocks, dtype, shape [E, rows, cols]) of
    one sparse layer's expert tensors {expert: tensor}, all of one dtype and shape (the loader
    checked names and shapes; a quantization that differs between experts is refused here)."""
    first = parts[0]
    for e in range(n_experts):
        t = parts[e]
        if t.dtype != first.dtype:
            raise ValueError(f"tensor {t.name!r} is {t.dtype} but expert 0's is {first.dtype}: the experts of "
                             f"one projection are stored as one tensor, in one dtype")
    data = np.stack([np.asarray(parts[e].data) for e in range(n_experts)])
    return data, first.dtype, (n_experts, *first.shape)


class Model(OwnedHandle):
    """A decoder of any registered architecture in libllaisys. Weights are copied into the core
    once at construction, each to the (kind, layer) slot the architecture's weight map names."""

    _DESTROY = "llaisysModelDestroy"

    def __init__(self, loaded: LoadedModel, device: DeviceType = DeviceType.CPU, device_id: int = 0):
        cfg = loaded.config
        self.config = cfg  # ModelParams
        self.path = loaded.path
        self.dtype = as_dtype(loaded.dtype)
        self.device = device
        self.device_id = device_id
        self._handle = None
        params, window = c_params(cfg, self.dtype)
        handle = llaisysModel_t()
        check(LIB.llaisysModelCreate(ctypes.byref(params), int(device), device_id, ctypes.byref(handle)))
        del window  # copied by Create
        self._handle = handle.value
        try:
            self._set_weights(loaded)
        except Exception:
            self.close()
            raise

    def _set_weights(self, loaded: LoadedModel) -> None:
        slots = weight_slots(self.config)
        experts: dict = {}  # (kind, layer) -> {expert: tensor}: stacked into one 3-D slot below
        for name, t in loaded.tensors.items():
            slot = slots[name]  # the loader checked every name against the same map
            if slot.expert >= 0:
                experts.setdefault((slot.kind, slot.layer), {})[slot.expert] = t
                continue
            self._set_one(slot.kind, slot.layer, t.data, t.dtype, t.shape)
        for (kind, layer), parts in experts.items():
            data, dtype, shape = stack_experts(parts, self.config.n_experts)
            self._set_one(kind, layer, data, dtype, shape)
            del data  # one layer's stacked copy at a time
        self._check_complete()

    def _set_one(self, kind: str, layer: int, data, dtype: str, shape: tuple) -> None:
        c_shape = (ctypes.c_size_t * len(shape))(*shape)
        data = np.ascontiguousarray(data)
        check(LIB.llaisysModelSetWeight(self._handle, None, int(WeightKind[kind]), layer,
                                        data.ctypes.data_as(ctypes.c_void_p), int(as_dtype(dtype)), c_shape,
                                        len(shape)))

    def _check_complete(self) -> None:
        missing = ctypes.c_size_t()
        first = ctypes.create_string_buffer(256)
        check(LIB.llaisysModelMissingWeights(self._handle, ctypes.byref(missing), first, 256))
        if missing.value:
            raise ValueError(f"{missing.value} weight(s) missing, e.g. {first.value.decode()!r}")

    @classmethod
    def from_path(cls, path, dtype: Optional[str] = None, device: DeviceType = DeviceType.CPU,
                  device_id: int = 0) -> "Model":
        return cls(load_model(path, dtype=dtype), device=device, device_id=device_id)

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise ValueError("model is closed")
        return self._handle

    @property
    def architecture(self) -> str:
        """The HF architectures name the model was loaded as ("LlamaForCausalLM", ...)."""
        return self.config.architecture

    def stats(self) -> ModelStatsInfo:
        s = ModelStats()
        check(LIB.llaisysModelGetStats(self.handle, ctypes.byref(s)))
        return ModelStatsInfo(s.weight_bytes, s.workspace_bytes, s.workspace_tokens, s.scratch_bytes, s.graphs,
                              s.graph_capture_us / 1e6, s.padded_bytes)

    def capture_graphs(self, cache: KVCache, max_rows: int) -> int:
        """Captures the CUDA graphs of decode steps over `cache` for every bucket of rows up to
        max_rows now, instead of at each shape's first step (llaisysModelCaptureGraphs; an
        NVIDIA GPU with LLAISYS_CUDA_GRAPHS=1). Returns how many shapes ran, 0 where decode
        steps are not padded; nothing is written to the cache."""
        if max_rows <= 0:
            raise ValueError(f"max_rows must be > 0, got {max_rows}")
        n = ctypes.c_size_t(0)
        check(LIB.llaisysModelCaptureGraphs(self.handle, cache.handle, max_rows, ctypes.byref(n)))
        return n.value

    def create_kv_cache(self, layout: str = "block", n_slots: int = 4096, block_size: int = 16,
                        dtype: "DataType | str" = DataType.F32) -> KVCache:
        lay = as_layout(layout)
        out = llaisysKVCache_t()
        check(LIB.llaisysModelCreateKVCache(self.handle, int(lay), int(as_dtype(dtype)), n_slots, block_size,
                                            ctypes.byref(out)))
        return KVCache(out.value, lay)

    def step(self, cache: KVCache, *, token_ids, positions, query_start, sample_rows=None,
             slot_mapping=None, block_tables=None, context_lens=None, seq_ids=None,
             sampling: "Optional[Sequence[RowSampling] | PackedSampling]" = None, top_capacity: int = 0,
             want_logits: bool = False, want_hidden: bool = False,
             want_logprobs: bool = True, embed_rows=None, embeds=None) -> Optional[StepResult]:
        """One core call for a flat batch (llaisysModelStep; shapes in llaisysBatch_t).

        embed_rows [n_embed] int32 (flat token indices, increasing) with embeds [n_embed, hidden]
        f32: those tokens' input rows instead of their embedding lookup (llaisysModelStepEmbeds;
        their token_ids are ignored).

        sampling: one RowSampling per sample row, or a step_io.PackedSampling of them (already in
        C form, kept between steps by the engine's runner).

        With want_logprobs=False the result's logprobs is None; greedy rows may then be decided
        without computing every logit (the lm_head screen, doc/architecture.md).

        Returns None when a SLOT cache has no room (nothing was written). The same as
        run_step(prepare_step(...)): the engine's runner makes the arguments on its own thread."""
        return self.run_step(self.prepare_step(
            cache, token_ids=token_ids, positions=positions, query_start=query_start, sample_rows=sample_rows,
            slot_mapping=slot_mapping, block_tables=block_tables, context_lens=context_lens, seq_ids=seq_ids,
            sampling=sampling, top_capacity=top_capacity, want_logits=want_logits, want_hidden=want_hidden,
            want_logprobs=want_logprobs, embed_rows=embed_rows, embeds=embeds))

    def prepare_step(self, cache: KVCache, *, token_ids, positions, query_start, sample_rows=None,
                     slot_mapping=None, block_tables=None, context_lens=None, seq_ids=None,
                     sampling: "Optional[Sequence[RowSampling] | PackedSampling]" = None, top_capacity: int = 0,
                     want_logits: bool = False, want_hidden: bool = False,
                     want_logprobs: bool = True, embed_rows=None, embeds=None) -> PreparedStep:
        """step()'s arguments in their C form, and its result arrays, without the call. The
        batch's ids are ``PreparedStep.token_ids``, which the call reads: ids written there
        before run_step are the ones computed."""
        keep: list = []  # arrays that must outlive the call
        batch = make_batch(keep, token_ids=token_ids, positions=positions, query_start=query_start,
                           sample_rows=sample_rows, slot_mapping=slot_mapping, block_tables=block_tables,
                           context_lens=context_lens, seq_ids=seq_ids)
        n_sample = batch.n_sample
        out = StepOutput()
        params_ptr = None
        res = StepResult(None, None, None, None, None, None)
        if sampling is not None:
            if len(sampling) != n_sample:
                raise ValueError(f"{len(sampling)} sampling rows for {n_sample} sample rows")
            if isinstance(sampling, PackedSampling):  # packed by the caller (kept between steps)
                params_ptr = sampling.params
            else:
                params_ptr = (CSamplingParams * max(n_sample, 1))()
                for i, r in enumerate(sampling):
                    fill_sampling(params_ptr[i], r, keep)
            res.token_ids = np.zeros(n_sample, np.int64)  # [n_sample]
            out.sample.token_ids = ptr(res.token_ids)
            if want_logprobs:
                res.logprobs = np.zeros(n_sample, np.float32)  # [n_sample]
                out.sample.logprobs = ptr(res.logprobs)
            if top_capacity > 0:
                res.top_ids = np.zeros((n_sample, top_capacity), np.int64)  # [n_sample, top_capacity]
                res.top_logprobs = np.zeros((n_sample, top_capacity), np.float32)
                out.sample.top_ids = ptr(res.top_ids)
                out.sample.top_logprobs = ptr(res.top_logprobs)
                out.sample.top_capacity = top_capacity
        if want_logits:
            res.logits = np.zeros((n_sample, self.config.vocab_size), np.float32)  # [n_sample, vocab]
            out.logits = ptr(res.logits)
        if want_hidden:
            res.hidden = np.zeros((n_sample, self.config.hidden_size), np.float32)  # [n_sample, hidden]
            out.hidden = ptr(res.hidden)
        emb = None
        if embed_rows is not None and len(embed_rows):
            if not has_step_embeds(LIB):
                raise ValueError("prompt_embeds: the loaded libllaisys has no llaisysModelStepEmbeds (rebuild it)")
            emb = make_embeds(keep, embed_rows, embeds, self.config.hidden_size)
        return PreparedStep(cache, batch, emb, params_ptr, out, res, keep, token_ids=keep[0])

    def run_step(self, prepared: PreparedStep) -> Optional[StepResult]:
        """The core call of a prepare_step (None when a SLOT cache has no room)."""
        p = prepared
        if p.embeds is not None:
            status = LIB.llaisysModelStepEmbeds(self.handle, p.cache.handle, ctypes.byref(p.batch),
                                                ctypes.byref(p.embeds), p.params, ctypes.byref(p.out))
        else:
            status = LIB.llaisysModelStep(self.handle, p.cache.handle, ctypes.byref(p.batch), p.params,
                                          ctypes.byref(p.out))
        if status == Status.NO_KV_SPACE:
            return None
        check(status)
        return p.result
