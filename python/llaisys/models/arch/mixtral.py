"""Mixtral: the Mistral decoder (one optional sliding window on every layer) with every FFN a
mixture of `num_local_experts` experts of width `intermediate_size`; the top-k weights are
always renormalised. HF names its experts block_sparse_moe.experts.{e}.w1 (gate), w3 (up), w2
(down) and its router block_sparse_moe.gate."""

from . import ArchSpec, register
from .common import base_hf_dict, parse_common, window
from .moe import mixtral_weights, moe_hf_fields, parse_moe

ARCHITECTURE = "MixtralForCausalLM"


def windows(d: dict, source: str, n_layers: int, max_pos: int) -> tuple:
    size = window(d, "sliding_window", source, max_pos, None)  # MixtralConfig's default: none
    return (size or 0,) * n_layers


def parse(d: dict, source: str):
    base = parse_common(d, source, architecture=ARCHITECTURE, arch="mixtral", head_dim_default=None,
                        max_pos_default=4096 * 32, qkv_bias=False, qk_norm=False, windows=windows)
    return parse_moe(d, source, base, experts_default=8, top_k_default=2, inner_key="intermediate_size",
                     inner_default=base.intermediate_size, shared_default=None, norm=True, sparse_rule=False)


def to_hf_dict(p) -> dict:
    fields = moe_hf_fields(p, experts_key="num_local_experts", sparse_rule=False)
    fields.pop("norm_topk_prob")  # Mixtral always renormalises
    return {**base_hf_dict(p, "mixtral"), **fields, "sliding_window": p.layer_window[0] or None}


SPEC = register(ArchSpec(ARCHITECTURE, "mixtral", "mixtral", parse, to_hf_dict, weights=mixtral_weights))
