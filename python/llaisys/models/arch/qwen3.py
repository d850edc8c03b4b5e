"""Qwen3 (dense): head_dim stated explicitly (not hidden_size / num_attention_heads), RMSNorm
over each q and k head before RoPE, no bias; sliding-window fields read as for Qwen2."""

from . import ArchSpec, register
from .common import base_hf_dict, parse_common, qwen_window_fields, qwen_windows, refuse_true

ARCHITECTURE = "Qwen3ForCausalLM"


def parse(d: dict, source: str):
    refuse_true(d, source, "Qwen3", "attention_bias")  # would add a bias to q/k/v and o_proj
    return parse_common(d, source, architecture=ARCHITECTURE, arch="qwen3",
                        head_dim_default=128,  # transformers' Qwen3Config default
                        max_pos_default=32768, qkv_bias=False, qk_norm=True, windows=qwen_windows)


def to_hf_dict(p) -> dict:
    return {**base_hf_dict(p, "qwen3"), **qwen_window_fields(p), "attention_bias": False}


SPEC = register(ArchSpec(ARCHITECTURE, "qwen3", "qwen3", parse, to_hf_dict, gguf_arch="qwen3"))
