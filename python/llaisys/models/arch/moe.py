"""What the mixture-of-experts families share (Qwen2-MoE, Qwen3-MoE, Mixtral): the MoE fields of
config.json read into ModelParams, which layers are sparse, the HF tensors of a sparse layer
(per-expert 2-D tensors, stacked into the core's 3-D expert slots at load by models.model),
and the MoE fields of the config.json writer.

A sparse layer's FFN (include/llaisys/models/model.h): router logits -> softmax -> top k
(renormalised when norm_topk_prob) -> the weighted sum of those experts' SwiGLU outputs, plus
the sigmoid-gated shared expert when shared_expert_intermediate_size > 0."""

import dataclasses
from typing import Optional

from ..config import ModelParams
from ..files import ModelFileError
from .common import WeightSlot, standard_weights
from .fields import limited, shown, typed

# the HF names of one expert's projections under a sparse layer's prefix, per family
QWEN_EXPERT_NAMES = {"router": "mlp.gate.weight", "expert": "mlp.experts.{e}.",
                     "gate": "gate_proj.weight", "up": "up_proj.weight", "down": "down_proj.weight"}
MIXTRAL_EXPERT_NAMES = {"router": "block_sparse_moe.gate.weight", "expert": "block_sparse_moe.experts.{e}.",
                        "gate": "w1.weight", "up": "w3.weight", "down": "w2.weight"}


def parse_moe(d: dict, source: str, base: ModelParams, *, experts_default: int, top_k_default: int,
              inner_key: str, inner_default: Optional[int], shared_default: Optional[int],
              norm: Optional[bool], sparse_rule: bool) -> ModelParams:
    """`base` (parse_common's params) with the MoE fields of `d`.

    The expert count is `num_experts` or `num_local_experts` (transformers 5 writes the latter
    for Qwen3-MoE, 4.x the former). inner_key names the experts' width (`moe_intermediate_size`;
    Mixtral's experts are `intermediate_size` wide). shared_default None: the family has no
    shared expert. norm None: the config's `norm_topk_prob` (default false); a bool: fixed (Mixtral
    always renormalises). sparse_rule: `decoder_sparse_step` / `mlp_only_layers` pick the sparse
    layers (Qwen); else every layer is sparse. `router_aux_loss_coef` and the like (training) are
    ignored."""
    n = base.n_layers
    experts_key = "num_experts" if "num_experts" in d or "num_local_experts" not in d else "num_local_experts"
    n_experts = limited(d, experts_key, int, source, experts_default, "num_experts")
    top_k = limited(d, "num_experts_per_tok", int, source, top_k_default)
    if top_k > n_experts:
        raise ModelFileError(source, "num_experts_per_tok", f"num_experts_per_tok {top_k} is larger than "
                                                            f"{experts_key} {n_experts}: a token cannot be routed "
                                                            f"to more experts than there are")
    inner = limited(d, inner_key, int, source, inner_default, "moe_intermediate_size")
    shared = 0
    if shared_default is not None:
        shared = limited(d, "shared_expert_intermediate_size", int, source, shared_default)
    if norm is None:
        norm = typed(d.get("norm_topk_prob", False), "norm_topk_prob", bool, source)
    sparse = (True,) * n
    if sparse_rule:
        step = limited(d, "decoder_sparse_step", int, source, 1)
        only = d.get("mlp_only_layers")
        only = [] if only is None else only
        if not isinstance(only, list) or len(only) > n or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n for i in only):
            raise ModelFileError(source, "mlp_only_layers", f"field 'mlp_only_layers' must list layer indices in "
                                                            f"[0, {n}), got {shown(only)}")
        dense = set(only)
        sparse = tuple(i not in dense and (i + 1) % step == 0 for i in range(n))
    return dataclasses.replace(base, n_experts=n_experts, n_experts_per_tok=top_k, moe_intermediate_size=inner,
                               shared_expert_intermediate_size=shared, norm_topk_prob=norm, layer_sparse=sparse)


def moe_weights(p: ModelParams, names: dict = QWEN_EXPERT_NAMES) -> dict:
    """HF tensor name -> WeightSlot: the standard decoder's, with each sparse layer's MLP replaced
    by its router, its experts' gate/up/down (one 2-D tensor each, `expert` set) and the shared
    expert when the family has one."""
    slots = standard_weights(p)
    h, n_e, ie, s = p.hidden_size, p.n_experts, p.moe_intermediate_size, p.shared_expert_intermediate_size
    for layer, sparse in enumerate(p.layer_sparse):
        if not sparse:
            continue
        pre = f"model.layers.{layer}."
        for proj in ("gate_proj", "up_proj", "down_proj"):
            del slots[f"{pre}mlp.{proj}.weight"]
        slots[pre + names["router"]] = WeightSlot("ROUTER", layer, (n_e, h))
        for e in range(n_e):
            ex = pre + names["expert"].format(e=e)
            slots[ex + names["gate"]] = WeightSlot("EXPERT_GATE", layer, (ie, h), e)
            slots[ex + names["up"]] = WeightSlot("EXPERT_UP", layer, (ie, h), e)
            slots[ex + names["down"]] = WeightSlot("EXPERT_DOWN", layer, (h, ie), e)
        if s:
            slots[pre + "mlp.shared_expert.gate_proj.weight"] = WeightSlot("SHARED_GATE", layer, (s, h))
            slots[pre + "mlp.shared_expert.up_proj.weight"] = WeightSlot("SHARED_UP", layer, (s, h))
            slots[pre + "mlp.shared_expert.down_proj.weight"] = WeightSlot("SHARED_DOWN", layer, (h, s))
            slots[pre + "mlp.shared_expert_gate.weight"] = WeightSlot("SHARED_EXPERT_GATE", layer, (1, h))
    return slots


def mixtral_weights(p: ModelParams) -> dict:
    return moe_weights(p, MIXTRAL_EXPERT_NAMES)


def moe_hf_fields(p: ModelParams, *, experts_key: str = "num_experts", sparse_rule: bool = True) -> dict:
    """config.json MoE fields of `p` (parse_moe reads them back)."""
    out = {experts_key: p.n_experts, "num_experts_per_tok": p.n_experts_per_tok, "norm_topk_prob": p.norm_topk_prob,
           "output_router_logits": False, "router_aux_loss_coef": 0.001}
    if sparse_rule:
        out.update({"moe_intermediate_size": p.moe_intermediate_size, "decoder_sparse_step": 1,
                    "mlp_only_layers": [i for i, sparse in enumerate(p.layer_sparse) if not sparse]})
    if p.shared_expert_intermediate_size:
        out["shared_expert_intermediate_size"] = p.shared_expert_intermediate_size
    return out
