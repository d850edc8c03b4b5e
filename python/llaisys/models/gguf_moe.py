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
`ffn_gate_exps` is dense (mlp_only_layers)."""

from __future__ import annotations

import re
from typing import Iterable

from .files import ModelFileError
from .gguf_tokenizer import metadata

_KEYS = {"num_experts": "{arch}.expert_count", "num_experts_per_tok": "{arch}.expert_used_count",
         "moe_intermediate_size": "{arch}.expert_feed_forward_length",
         "shared_expert_intermediate_size": "{arch}.expert_shared_feed_forward_length"}
_NORM_TOPK = {"qwen3moe": True, "qwen2moe": False}  # llama.cpp's norm_w of each architecture
_STACK = re.compile(r"(model\.layers\.\d+\.mlp\.experts)\.((?:gate|up|down)_proj\.weight)$")
_DENSE = re.compile(r"model\.layers\.(\d+)\.mlp\.gate_proj\.weight$")
SHARED_GATE = re.compile(r"model\.layers\.\d+\.mlp\.shared_expert_gate\.weight$")


def moe_keys(arch: str) -> dict:
    """HF config field -> GGUF metadata key, for an architecture with experts (else {})."""
    return {f: k.format(arch=arch) for f, k in _KEYS.items()} if arch in _NORM_TOPK else {}


def moe_config_fields(reader, arch: str, source: str, tensor_names: Iterable[str]) -> dict:
    """The HF config fields of a MoE file's experts ({} for another architecture)."""
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
