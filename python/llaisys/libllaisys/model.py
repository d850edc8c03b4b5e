"""ctypes declarations of include/llaisys/models/model.h (the architecture-agnostic model)."""

from __future__ import annotations

import ctypes
from enum import IntEnum

from .kv_cache import llaisysKVCache_t
from .sampler import SampleOutput, SamplingParams

llaisysModel_t = ctypes.c_void_p
_sizep = ctypes.POINTER(ctypes.c_size_t)


class Arch(IntEnum):
    """Mirror of llaisysArch_t."""

    QWEN2 = 0
    LLAMA = 1
    QWEN3 = 2
    MISTRAL = 3
    QWEN2_MOE = 4
    QWEN3_MOE = 5
    MIXTRAL = 6


class RopeScaling(IntEnum):
    """Mirror of llaisysRopeScaling_t."""

    DEFAULT = 0
    LINEAR = 1
    LLAMA3 = 2
    YARN = 3


class Activation(IntEnum):
    """Mirror of llaisysActivation_t."""

    SILU = 0


class WeightKind(IntEnum):
    """Mirror of llaisysWeightKind_t."""

    EMBED = 0
    FINAL_NORM = 1
    LM_HEAD = 2
    ATTN_NORM = 3
    Q = 4
    K = 5
    V = 6
    Q_BIAS = 7
    K_BIAS = 8
    V_BIAS = 9
    O = 10
    Q_NORM = 11
    K_NORM = 12
    MLP_NORM = 13
    GATE = 14
    UP = 15
    DOWN = 16
    ROUTER = 17
    EXPERT_GATE = 18
    EXPERT_UP = 19
    EXPERT_DOWN = 20
    SHARED_GATE = 21
    SHARED_UP = 22
    SHARED_DOWN = 23
    SHARED_EXPERT_GATE = 24


class ModelParams(ctypes.Structure):
    """Mirror of llaisysModelParams_t (struct_size first: fields past it take their defaults)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("arch", ctypes.c_int),
        ("dtype", ctypes.c_int),
        ("n_layers", ctypes.c_size_t),
        ("hidden_size", ctypes.c_size_t),
        ("intermediate_size", ctypes.c_size_t),
        ("n_heads", ctypes.c_size_t),
        ("n_kv_heads", ctypes.c_size_t),
        ("head_dim", ctypes.c_size_t),
        ("vocab_size", ctypes.c_size_t),
        ("max_position_embeddings", ctypes.c_size_t),
        ("rms_norm_eps", ctypes.c_float),
        ("rope_theta", ctypes.c_float),
        ("rope_scaling", ctypes.c_int),
        ("rope_factor", ctypes.c_float),
        ("rope_low_freq_factor", ctypes.c_float),
        ("rope_high_freq_factor", ctypes.c_float),
        ("rope_original_max_position", ctypes.c_size_t),
        ("rope_beta_fast", ctypes.c_float),
        ("rope_beta_slow", ctypes.c_float),
        ("rope_attention_factor", ctypes.c_float),
        ("qkv_bias", ctypes.c_int),
        ("qk_norm", ctypes.c_int),
        ("tie_word_embeddings", ctypes.c_int),
        ("activation", ctypes.c_int),
        ("layer_window", ctypes.POINTER(ctypes.c_uint32)),  # [n_layers] or NULL
        ("n_experts", ctypes.c_size_t),
        ("n_experts_per_tok", ctypes.c_size_t),
        ("moe_intermediate_size", ctypes.c_size_t),
        ("shared_expert_intermediate_size", ctypes.c_size_t),
        ("norm_topk_prob", ctypes.c_int),
        ("layer_sparse", ctypes.POINTER(ctypes.c_uint8)),  # [n_layers] or NULL
    ]


class ModelStats(ctypes.Structure):
    """Mirror of llaisysModelStats_t."""

    _fields_ = [
        ("weight_bytes", ctypes.c_size_t),
        ("workspace_bytes", ctypes.c_size_t),
        ("workspace_tokens", ctypes.c_size_t),
        ("scratch_bytes", ctypes.c_size_t),
        ("graphs", ctypes.c_size_t),
        ("graph_capture_us", ctypes.c_size_t),
        ("padded_bytes", ctypes.c_size_t),
    ]


class Batch(ctypes.Structure):
    """Mirror of llaisysBatch_t (the step contract). The array fields are plain addresses
    (c_void_p, set from ndarray.ctypes.data): typed ctypes pointers cost a few microseconds each
    to make, ten of them a step; the C types are in the comments."""

    _fields_ = [
        ("n_tokens", ctypes.c_size_t),
        ("token_ids", ctypes.c_void_p),  # int64 [n_tokens]
        ("positions", ctypes.c_void_p),  # int64 [n_tokens]
        ("n_seqs", ctypes.c_size_t),
        ("query_start", ctypes.c_void_p),  # int32 [n_seqs + 1]
        ("slot_mapping", ctypes.c_void_p),  # int64 [n_tokens] (BLOCK)
        ("block_tables", ctypes.c_void_p),  # int32 [n_seqs, max_blocks] (BLOCK)
        ("max_blocks", ctypes.c_size_t),
        ("context_lens", ctypes.c_void_p),  # int32 [n_seqs] (BLOCK)
        ("seq_ids", ctypes.c_void_p),  # int32 [n_seqs] (SLOT)
        ("n_sample", ctypes.c_size_t),
        ("sample_rows", ctypes.c_void_p),  # int32 [n_sample]
    ]


class BatchEmbeds(ctypes.Structure):
    """Mirror of llaisysBatchEmbeds_t (input embedding rows of a step)."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("n_rows", ctypes.c_size_t),
        ("rows", ctypes.c_void_p),  # int32 [n_rows] flat token indices, increasing
        ("data", ctypes.c_void_p),  # f32 [n_rows, hidden_size]
    ]


def has_step_embeds(lib: ctypes.CDLL) -> bool:
    """Whether the loaded library exports llaisysModelStepEmbeds (a library built before it did
    still loads; a prompt given as embeddings is then refused, naming the missing symbol)."""
    return hasattr(lib, "llaisysModelStepEmbeds")


class StepOutput(ctypes.Structure):
    """Mirror of llaisysStepOutput_t."""

    _fields_ = [
        ("sample", SampleOutput),
        ("logits", ctypes.c_void_p),  # f32 [n_sample, vocab] or NULL (addresses as in Batch)
        ("hidden", ctypes.c_void_p),  # f32 [n_rows, hidden] or NULL
    ]


def declare(lib: ctypes.CDLL) -> None:
    """Declare the model functions of include/llaisys/models/model.h."""
    M, S = llaisysModel_t, ctypes.c_int32
    lib.llaisysModelDefaultParams.argtypes = []
    lib.llaisysModelDefaultParams.restype = ModelParams
    signatures = {
        "llaisysModelCreate": [ctypes.POINTER(ModelParams), ctypes.c_int, ctypes.c_int, ctypes.POINTER(M)],
        "llaisysModelDestroy": [M],
        "llaisysModelGetParams": [M, ctypes.POINTER(ModelParams)],
        "llaisysModelSetWeight": [M, ctypes.c_char_p, ctypes.c_int, ctypes.c_int32, ctypes.c_void_p, ctypes.c_int,
                                  _sizep, ctypes.c_size_t],
        "llaisysModelMissingWeights": [M, _sizep, ctypes.c_char_p, ctypes.c_size_t],
        "llaisysModelCreateKVCache": [M, ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t,
                                      ctypes.POINTER(llaisysKVCache_t)],
        "llaisysModelGetStats": [M, ctypes.POINTER(ModelStats)],
        "llaisysModelCaptureGraphs": [M, llaisysKVCache_t, ctypes.c_size_t, _sizep],
        "llaisysModelStep": [M, llaisysKVCache_t, ctypes.POINTER(Batch), ctypes.POINTER(SamplingParams),
                             ctypes.POINTER(StepOutput)],
    }
    if has_step_embeds(lib):
        signatures["llaisysModelStepEmbeds"] = [M, llaisysKVCache_t, ctypes.POINTER(Batch), ctypes.POINTER(BatchEmbeds),
                                                ctypes.POINTER(SamplingParams), ctypes.POINTER(StepOutput)]
    for name, argtypes in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = S
