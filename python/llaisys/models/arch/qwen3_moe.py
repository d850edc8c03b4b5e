"""Qwen3-MoE (Qwen3-30B-A3B, Qwen3-Coder-30B-A3B): the Qwen3 decoder (head_dim stated, per-head
q/k RMSNorm, no bias) with mixture-of-experts FFNs (arch/moe.py); no shared expert. A sliding
window, when use_sliding_window, covers every layer."""

from . import ArchSpec, register
from .common import base_hf_dict, parse_common, refuse_true, window
from .fields import typed
from .moe import moe_hf_fields, moe_weights, parse_moe

ARCHITECTURE = "Qwen3MoeForCausalLM"


def windows(d: dict, source: str, n_layers: int, max_pos: int) -> tuple:
    use = typed(d.get("use_sliding_window", False), "use_sliding_window", bool, source)
    size = window(d, "sliding_window", source, max_pos, 4096) if use else None
    return (size or 0,) * n_layers


def parse(d: dict, source: str):
    refuse_true(d, source, "Qwen3-MoE", "attention_bias")
    base = parse_common(d, source, architecture=ARCHITECTURE, arch="qwen3_moe", head_dim_default=128,
                        max_pos_default=32768, qkv_bias=False, qk_norm=True, windows=windows)
    # transformers' Qwen3MoeConfig defaults
    return parse_moe(d, source, base, experts_default=128, top_k_default=8, inner_key="moe_intermediate_size",
                     inner_default=768, shared_default=None, norm=None, sparse_rule=True)


def to_hf_dict(p) -> dict:
    size = p.layer_window[0] if p.layer_window else 0
    return {**base_hf_dict(p, "qwen3_moe"), **moe_hf_fields(p), "attention_bias": False,
            "use_sliding_window": bool(size), "sliding_window": size or None}


SPEC = register(ArchSpec(ARCHITECTURE, "qwen3_moe", "qwen3_moe", parse, to_hf_dict, weights=moe_weights,
                         gguf_arch="qwen3moe"))
