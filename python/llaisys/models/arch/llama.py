"""Llama 2 and 3.x: no bias, tied or untied lm_head, RoPE default / linear / llama3 / yarn,
head_dim optional (hidden_size / num_attention_heads when absent)."""

from . import ArchSpec, register
from .common import base_hf_dict, no_windows, parse_common, refuse_true

ARCHITECTURE = "LlamaForCausalLM"


def parse(d: dict, source: str):
    refuse_true(d, source, "Llama", "attention_bias", "mlp_bias")
    return parse_common(d, source, architecture=ARCHITECTURE, arch="llama", head_dim_default=None,
                        max_pos_default=2048, qkv_bias=False, qk_norm=False, windows=no_windows)


def to_hf_dict(p) -> dict:
    return {**base_hf_dict(p, "llama"), "attention_bias": False, "mlp_bias": False}


# GGUF "llama" files (Llama 2/3.x, Mistral; with llama.expert_count: Mixtral) store q/k rows permuted
# for llama.cpp's rope; gguf_convert / gguf_model undo it (gguf_moe.unpermute_rows)
SPEC = register(ArchSpec(ARCHITECTURE, "llama", "llama", parse, to_hf_dict, gguf_arch="llama"))
