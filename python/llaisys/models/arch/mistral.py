"""Mistral: the Llama decoder with one sliding window on every layer (`sliding_window`, null:
full attention; transformers' default when the field is absent is 4096)."""

from . import ArchSpec, register
from .common import base_hf_dict, parse_common, window

ARCHITECTURE = "MistralForCausalLM"


def windows(d: dict, source: str, n_layers: int, max_pos: int) -> tuple:
    size = window(d, "sliding_window", source, max_pos, 4096)
    return (size or 0,) * n_layers


def parse(d: dict, source: str):
    return parse_common(d, source, architecture=ARCHITECTURE, arch="mistral", head_dim_default=None,
                        max_pos_default=4096 * 32, qkv_bias=False, qk_norm=False, windows=windows)


def to_hf_dict(p) -> dict:
    return {**base_hf_dict(p, "mistral"), "sliding_window": p.layer_window[0] or None}


SPEC = register(ArchSpec(ARCHITECTURE, "mistral", "mistral", parse, to_hf_dict))
