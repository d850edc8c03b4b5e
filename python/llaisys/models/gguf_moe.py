"""Mixture-of-experts GGUF files (llama.cpp's `qwen3moe`, `qwen2moe`) as the registry's HF terms.

llama.cpp stores a sparse layer's experts stacked, `blk.N.ffn_{gate,up,down}_exps.weight`
[E, rows, cols] (a quantized stack: E * rows GGUF rows of blocks), the router
`blk.N.ffn_gate_inp.weight` [E, H], and Qwen2-MoE's shared expert `ffn_{gate,up,down}_shexp`
with its gate `ffn_gate_inp_shexp` [H] (HF: [1, H]). gguf_convert.hf_tensor_name names a stack
as the core's 3-D slot (`model.layers.N.mlp.experts.gate_proj.weight`); `split_stack` cuts it
into the per-expert HF tensors (`mlp.experts.{e}.gate_proj.weight`, views, nothing copied) that
the loader validates and models.model stacks again into the core's slot.

The metadata: `<arch>.expert_count`, `.expert_used_count`, `.expert_feed_forward_length`,
`.expert_shared_feed_forward_length`. llama.cpp renormalises the top-k weights of qwen3moe and
not of qwen2moe (its build_moe_ffn's norm_w), and a layer holding `ffn_gate` instead of
`ffn_gate_exps` is dense (mlp_only_layers).

Mixtral: llama.cpp writes it as `general.architecture` "llama" with `llama.expert_count` and
`llama.expert_used_count` (the experts are `llama.feed_forward_length` wide, the top k always
renormalised), the experts either stacked as above or, in older files, one tensor per expert
(`blk.N.ffn_{gate,up,down}.E.weight`). Its HF names are `block_sparse_moe.gate` (router) and
`block_sparse_moe.experts.{e}.w1` / `w3` / `w2` (gate / up / down). As in every `llama` file, the
q and k rows of each head are permuted for llama.cpp's RoPE (convert_hf_to_gguf's `permute`:
the two halves of a head interleaved); `unpermute` restores HF's order, whole rows at a time, so
a quantized tensor's blocks move unchanged."""

from __future__ import annotations

import re
from typing import Iterable

import numpy as np

from .files import ModelFileError
from .gguf_tokenizer import metadata

_KEYS = {"num_experts": "{arch}.expert_count", "num_experts_per_tok": "{arch}.expert_used_count",
         "moe_intermediate_size": "{arch}.expert_feed_forward_length",
         "shared_expert_intermediate_size": "{arch}.expert_shared_feed_forward_length"}
_MIXTRAL_KEYS = {"num_local_experts": "llama.expert_count", "num_experts_per_tok": "llama.expert_used_count"}
_NORM_TOPK = {"qwen3moe": True, "qwen2moe": False}  # llama.cpp's norm_w of each architecture
_STACK = re.compile(r"(model\.layers\.\d+\.(?:mlp|block_sparse_moe)\.experts)\.((?:(?:gate|up|down)_proj|w1|w2|w3)"
                    r"\.weight)$")
# Mixtral's GGUF block tensors -> HF names (stacks named as the core's 3-D slot, as for Qwen)
MIXTRAL_BLOCK_NAMES = {"ffn_gate_inp": "block_sparse_moe.gate", "ffn_gate_exps": "block_sparse_moe.experts.w1",
                       "ffn_up_exps": "block_sparse_moe.experts.w3", "ffn_down_exps": "block_sparse_moe.experts.w2"}
_MIXTRAL_EXPERT = {"ffn_gate": "w1", "ffn_up": "w3", "ffn_down": "w2"}  # blk.N.ffn_gate.E.weight, older files
_MIXTRAL_HF_EXPERT = re.compile(r"model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.(w1|w2|w3)\.weight$")
MAX_EXPERTS = 1 << 16  # an expert index in a tensor name beyond this is refused before anything is sized
_DENSE = re.compile(r"model\.layers\.(\d+)\.mlp\.gate_proj\.weight$")
SHARED_GATE = re.compile(r"model\.layers\.\d+\.mlp\.shared_expert_gate\.weight$")


def is_mixtral(reader) -> bool:
    """A `llama` file with experts (`llama.expert_count`): Mixtral."""
    arch = reader.fields.get("general.architecture")
    return arch is not None and arch.contents() == "llama" and "llama.expert_count" in reader.fields


def is_permuted(reader) -> bool:
    """A `llama` file (Llama, Mistral, Mixtral): llama.cpp stored its q/k rows permuted for its RoPE."""
    arch = reader.fields.get("general.architecture")
    return arch is not None and arch.contents() == "llama"


def moe_keys(arch: str) -> dict:
    """HF config field -> GGUF metadata key, for an architecture with experts (else {})."""
    if arch == "llama":  # the loader's checks name num_experts whatever the family calls it
        return {**_MIXTRAL_KEYS, "num_experts": "llama.expert_count"}
    return {f: k.format(arch=arch) for f, k in _KEYS.items()} if arch in _NORM_TOPK else {}


def moe_config_fields(reader, arch: str, source: str, tensor_names: Iterable[str]) -> dict:
    """The HF config fields of a MoE file's experts ({} for another architecture)."""
    if arch == "llama" and is_mixtral(reader):  # the experts' width is feed_forward_length
        return {field: metadata(reader, key, int, source) for field, key in _MIXTRAL_KEYS.items()}
    if arch not in _NORM_TOPK:
        return {}
    d = {}
    for field, key in moe_keys(arch).items():
        value = metadata(reader, key, int, source, required=field != "shared_expert_intermediate_size")
        if value is not None:
            d[field] = value
    if arch == "qwen2moe" and "shared_expert_intermediate_size" not in d:
        d["shared_expert_intermediate_size"] = 0
    d["norm_topk_prob"] = _NORM_TOPK[arch]
    d["decoder_sparse_step"] = 1
    d["mlp_only_layers"] = sorted(int(m.group(1)) for n in tensor_names if (m := _DENSE.match(n)))
    return d


def is_stack(hf_name: str) -> bool:
    return _STACK.match(hf_name) is not None


def expert_name(stack_name: str, e: int) -> str:
    """"model.layers.3.mlp.experts.up_proj.weight", 5 -> "model.layers.3.mlp.experts.5.up_proj.weight"."""
    m = _STACK.match(stack_name)
    assert m, stack_name  # invariant: callers pass names is_stack accepted
    return f"{m.group(1)}.{e}.{m.group(2)}"


def stack_shapes(stack_name: str, shape: tuple, source: str, gguf_name: str) -> list:
    """[(per-expert HF name, (rows, cols))] of a stack of `shape` [E, rows, cols]."""
    if len(shape) != 3:
        raise ModelFileError(source, gguf_name, f"GGUF tensor {gguf_name!r} has shape {shape}; a stack of experts "
                                                f"is [experts, rows, cols]")
    return [(expert_name(stack_name, e), tuple(shape[1:])) for e in range(shape[0])]


def mixtral_tensor_name(parts: list):
    """The HF name of a Mixtral-only GGUF block tensor split at dots (["blk", "3", "ffn_up", "5",
    "weight"] -> "model.layers.3.block_sparse_moe.experts.5.w3.weight"), or None."""
    if len(parts) == 4 and parts[2] in MIXTRAL_BLOCK_NAMES and parts[3] == "weight":
        return f"model.layers.{int(parts[1])}.{MIXTRAL_BLOCK_NAMES[parts[2]]}.weight"
    if (len(parts) == 5 and parts[2] in _MIXTRAL_EXPERT and parts[3].isdecimal() and len(parts[3]) <= 5
            and parts[4] == "weight" and int(parts[3]) < MAX_EXPERTS):
        proj = _MIXTRAL_EXPERT[parts[2]]
        return f"model.layers.{int(parts[1])}.block_sparse_moe.experts.{int(parts[3])}.{proj}.weight"
    return None


def mixtral_gguf_name(hf_name: str, per_expert: bool):
    """The GGUF tensor a Mixtral expert's HF name comes from (its own tensor in an older file, else
    its stack), for errors; None for another name."""
    m = _MIXTRAL_HF_EXPERT.match(hf_name)
    if m is None:
        return None
    short = {v: k for k, v in _MIXTRAL_EXPERT.items()}[m.group(3)]
    return f"blk.{m.group(1)}.{short}.{m.group(2)}.weight" if per_expert else f"blk.{m.group(1)}.{short}_exps.weight"


def permuted_heads(hf_name: str, n_heads: int, n_kv_heads: int):
    """The heads a `llama` file's tensor `hf_name` was permuted over (q_proj: the query heads,
    k_proj: the key/value heads), or None for a tensor stored as HF stores it."""
    if hf_name.endswith(".self_attn.q_proj.weight"):
        return n_heads
    if hf_name.endswith(".self_attn.k_proj.weight"):
        return n_kv_heads
    return None


def unpermute_rows(rows: int, heads: int, source: str, gguf_name: str):
    """The row order undoing llama.cpp's q/k permutation (HF rows = GGUF rows[order]) for a tensor
    of `rows` rows in `heads` heads of d rows: GGUF stores head h's row (i, half j) at
    h * d + 2 i + j, HF at h * d + j * d / 2 + i."""
    if heads <= 0 or rows % (2 * heads):
        raise ModelFileError(source, gguf_name, f"GGUF tensor {gguf_name!r} has {rows} rows, not whole heads of even "
                                                f"size over {heads} heads")
    return np.arange(rows).reshape(heads, rows // heads // 2, 2).swapaxes(1, 2).reshape(-1)
