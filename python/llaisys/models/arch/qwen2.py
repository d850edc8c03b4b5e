"""Qwen2 (Qwen2.5, Qwen2.5-Coder, DeepSeek-R1-Distill-Qwen): q/k/v bias, optional sliding
window on layers >= max_window_layers."""

from . import ArchSpec, register
from .common import base_hf_dict, parse_common, qwen_window_fields, qwen_windows

ARCHITECTURE = "Qwen2ForCausalLM"

def parse(d: dict, source: str):
    # transformers' Qwen2 honours an explicit head_dim, else hidden_size / num_attention_heads
    return parse_common(d, source, architecture=ARCHITECTURE, arch="qwen2", head_dim_default=None,
                        max_pos_default=32768, qkv_bias=True, qk_norm=False, windows=qwen_windows)

def to_hf_dict(p) -> dict:
    return {**base_hf_dict(p, "qwen2"), **qwen_window_fields(p)}

SPEC = register(ArchSpec(ARCHITECTURE, "qwen2", "qwen2", parse, to_hf_dict, gguf_arch="qwen2"))
