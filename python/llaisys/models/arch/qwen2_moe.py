"""Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): the Qwen2 decoder (q/k/v bias unless
qkv_bias is false) with mixture-of-experts FFNs (arch/moe.py) and a shared expert scaled by
sigmoid(shared_expert_gate . x); top-k weights not renormalised unless norm_topk_prob."""

from . import ArchSpec, register
from .common import base_hf_dict, parse_common, qwen_windows, window
from .fields import typed
from .moe import moe_hf_fields, moe_weights, parse_moe

ARCHITECTURE = "Qwen2MoeForCausalLM"


def windows(d: dict, source: str, n_layers: int, max_pos: int) -> tuple:
    """transformers' Qwen2MoeConfig: `layer_types` when given, else (with use_sliding_window)
    the odd-numbered layers (i + 1 odd) below max_window_layers slide."""
    if d.get("layer_types") is not None:
        return qwen_windows(d, source, n_layers, max_pos)
    use = typed(d.get("use_sliding_window", False), "use_sliding_window", bool, source)
    if not use:
        return (0,) * n_layers
    size = window(d, "sliding_window", source, max_pos, 4096) or 0
    first = typed(d.get("max_window_layers", 28), "max_window_layers", int, source)
    return tuple(size if (i + 1) % 2 and i < first else 0 for i in range(n_layers))


def parse(d: dict, source: str):
    qkv_bias = typed(d.get("qkv_bias", True), "qkv_bias", bool, source)
    base = parse_common(d, source, architecture=ARCHITECTURE, arch="qwen2_moe", head_dim_default=None,
                        max_pos_default=32768, qkv_bias=qkv_bias, qk_norm=False, windows=windows)
    # transformers' Qwen2MoeConfig defaults
    return parse_moe(d, source, base, experts_default=60, top_k_default=4, inner_key="moe_intermediate_size",
                     inner_default=1408, shared_default=5632, norm=None, sparse_rule=True)


def to_hf_dict(p) -> dict:
    types = ["sliding_attention" if w else "full_attention" for w in p.layer_window]
    size = next((w for w in p.layer_window if w), 0)
    return {**base_hf_dict(p, "qwen2_moe"), **moe_hf_fields(p), "qkv_bias": p.qkv_bias,
            "use_sliding_window": bool(size), "sliding_window": size or None, "layer_types": types}


SPEC = register(ArchSpec(ARCHITECTURE, "qwen2_moe", "qwen2_moe", parse, to_hf_dict, weights=moe_weights,
                         gguf_arch="qwen2moe"))
