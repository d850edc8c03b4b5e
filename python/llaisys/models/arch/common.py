"""What the decoder families share: the parsing every family calls (over the field readers of fields.py), the RoPE and
sliding-window readers, the standard HF weight names, and the base of the config.json writer.

A family file (qwen2.py, llama.py, ...) states only where it differs: its defaults, its bias
and q/k-norm flags, and how its config names the per-layer windows."""

import math
from dataclasses import dataclass
from typing import Callable, Optional

from ..config import LIMITS, ROPE_TYPES, TORCH_DTYPE_TAGS, ModelParams, RopeParams
from ..files import ModelFileError
from .fields import in_range, limited, req, shown, token_ids, typed


@dataclass(frozen=True)
class WeightSlot:
    """Where one HF tensor goes in the core (llaisysModelSetWeight's (kind, layer))."""

    kind: str  # a llaisysWeightKind_t name without the prefix: "EMBED", "Q", "K_NORM", ...
    layer: int  # decoder block, -1 for the model-wide weights
    shape: tuple  # the shape the checkpoint must hold
    expert: int = -1  # EXPERT_*: this tensor is expert `expert`'s slice of the stacked 3-D slot


def sizes(d: dict, source: str, head_dim_default: Optional[int], max_pos_default: int) -> dict:
    """The integer hyperparameters, typed and range-checked, before anything uses them.

    head_dim_default None: head_dim (if absent) is implied as hidden_size / num_attention_heads,
    which must then divide exactly."""
    s = {key: limited(d, key, int, source) if key in d else req(d, key, int, source)
         for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")}
    heads = s["num_attention_heads"]
    kv = d.get("num_key_value_heads")  # null means "same as num_attention_heads" in transformers
    s["num_key_value_heads"] = heads if kv is None else limited(d, "num_key_value_heads", int, source)
    s["max_position_embeddings"] = limited(d, "max_position_embeddings", int, source, max_pos_default)
    hidden = s["hidden_size"]
    if heads % s["num_key_value_heads"]:
        raise ModelFileError(source, "num_key_value_heads", f"num_key_value_heads {s['num_key_value_heads']} "
                                                            f"does not divide num_attention_heads {heads}")
    if d.get("head_dim") is not None:
        s["head_dim"] = limited(d, "head_dim", int, source)
    elif head_dim_default is not None:
        s["head_dim"] = head_dim_default
    else:
        if hidden % heads:
            raise ModelFileError(source, "num_attention_heads",
                                 f"num_attention_heads {heads} does not divide hidden_size {hidden} "
                                 f"(head_dim is not given, so it is hidden_size / num_attention_heads)")
        s["head_dim"] = hidden // heads
    if s["head_dim"] % 2:
        raise ModelFileError(source, "head_dim", f"head_dim {s['head_dim']} must be even for RoPE")
    return s


def rope(d: dict, source: str, max_pos: int) -> tuple:
    """(rope_theta, RopeParams) from `rope_theta` + `rope_scaling` (4.x) or `rope_parameters` (5.x)."""
    merged, where = {}, None
    for key in ("rope_scaling", "rope_parameters"):
        value = d.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise ModelFileError(source, key, f"field {key!r} must be an object or null, got {type(value).__name__}")
        merged.update(value)
        where = key  # errors name the spelling the file used (rope_parameters wins when both are given)
    where = where or "rope_parameters"
    theta_key = "rope_theta" if "rope_theta" in d else f"{where}.rope_theta"
    theta = typed(d["rope_theta"] if "rope_theta" in d else merged.get("rope_theta", 10000.0), theta_key, float, source)
    in_range(source, theta_key, theta, *LIMITS["rope_theta"])
    partial = d.get("partial_rotary_factor", merged.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        raise ModelFileError(source, "partial_rotary_factor",
                             f"partial_rotary_factor {shown(partial)} is not supported (only 1.0)")
    kind = merged.get("rope_type", merged.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ModelFileError(source, f"{where}.rope_type", f"{where}.rope_type: RoPE scaling type {shown(kind)} "
                                                           f"is not supported (supported: {', '.join(ROPE_TYPES)})")
    if kind == "default":
        return theta, RopeParams()

    def num(key: str, default=None, kind_=float):
        name = f"{where}.{key}"
        if merged.get(key) is None:
            if default is None:
                raise ModelFileError(source, name, f"RoPE scaling {kind!r} needs field {name!r}")
            return default
        value = typed(merged[key], name, kind_, source)
        if value <= 0:
            raise ModelFileError(source, name, f"field {name!r} must be positive, got {value}")
        return value

    factor = num("factor")
    if kind == "linear":
        return theta, RopeParams("linear", factor=factor)
    # YaRN without it means the trained context (transformers' standardize_rope_params fills it
    # in the same way); llama3 must state it
    original = num("original_max_position_embeddings", default=max_pos if kind == "yarn" else None, kind_=int)
    if original > max_pos:
        raise ModelFileError(source, f"{where}.original_max_position_embeddings",
                             f"original_max_position_embeddings {original} exceeds max_position_embeddings {max_pos}")
    if kind == "llama3":
        low, high = num("low_freq_factor"), num("high_freq_factor")
        if high <= low:
            raise ModelFileError(source, f"{where}.high_freq_factor",
                                 f"high_freq_factor {high} must exceed low_freq_factor {low}")
        return theta, RopeParams("llama3", factor=factor, low_freq_factor=low, high_freq_factor=high,
                                 original_max_position=original)
    for key in ("mscale", "mscale_all_dim"):  # DeepSeek-style attention factors
        if merged.get(key):
            raise ModelFileError(source, f"{where}.{key}", f"YaRN field '{where}.{key}' is not supported")
    if merged.get("truncate", True) is not True:
        raise ModelFileError(source, f"{where}.truncate", "YaRN with truncate=false is not supported")
    attention = num("attention_factor", 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)
    return theta, RopeParams("yarn", factor=factor, original_max_position=original,
                             beta_fast=num("beta_fast", 32.0), beta_slow=num("beta_slow", 1.0),
                             attention_factor=attention)


def window(d: dict, key: str, source: str, max_pos: int, default: Optional[int]) -> Optional[int]:
    """The sliding window in d[key] (null: none), checked against max_position_embeddings."""
    value = d.get(key, default)
    if value is None:
        return None
    value = typed(value, key, int, source)
    in_range(source, key, value, *LIMITS["sliding_window"])
    if value > max_pos:
        raise ModelFileError(source, key, f"{key} {value} is larger than max_position_embeddings {max_pos}")
    return value


def refuse_true(d: dict, source: str, family: str, *keys: str) -> None:
    """Refuse flags this family's decoder does not implement (attention_bias, mlp_bias, ...)."""
    for key in keys:
        if typed(d.get(key, False), key, bool, source):
            raise ModelFileError(source, key, f"{key}=true is not supported for {family} models")


def parse_common(d: dict, source: str, *, architecture: str, arch: str, head_dim_default: Optional[int],
                 max_pos_default: int, qkv_bias: bool, qk_norm: bool,
                 windows: Callable[[dict, str, int, int], tuple]) -> ModelParams:
    """The fields every family reads the same way; `windows(d, source, n_layers, max_pos)`
    returns the per-layer sliding windows (0: full)."""
    act = d.get("hidden_act", "silu")
    if act != "silu":
        raise ModelFileError(source, "hidden_act", f"hidden_act {shown(act)} is not supported (only 'silu')")
    s = sizes(d, source, head_dim_default, max_pos_default)
    eps = typed(d.get("rms_norm_eps", 1e-6), "rms_norm_eps", float, source)
    in_range(source, "rms_norm_eps", eps, *LIMITS["rms_norm_eps"])
    theta, rope_params = rope(d, source, s["max_position_embeddings"])
    tie = typed(d.get("tie_word_embeddings", False), "tie_word_embeddings", bool, source)
    dtype_key = "torch_dtype" if "torch_dtype" in d else "dtype"
    torch_dtype = d.get(dtype_key)
    if torch_dtype is not None and (not isinstance(torch_dtype, str) or torch_dtype not in TORCH_DTYPE_TAGS):
        raise ModelFileError(source, dtype_key,
                             f"{dtype_key} {shown(torch_dtype)} is not one of {sorted(TORCH_DTYPE_TAGS)}")
    vocab = s["vocab_size"]
    bos = token_ids(d.get("bos_token_id"), "bos_token_id", source, vocab)
    if len(bos) > 1:
        raise ModelFileError(source, "bos_token_id", "field 'bos_token_id' must be one id, got a list")
    eos = token_ids(d.get("eos_token_id"), "eos_token_id", source, vocab)
    layer_window = windows(d, source, s["num_hidden_layers"], s["max_position_embeddings"])
    assert len(layer_window) == s["num_hidden_layers"]
    return ModelParams(
        architecture=architecture, arch=arch, n_layers=s["num_hidden_layers"], hidden_size=s["hidden_size"],
        intermediate_size=s["intermediate_size"], n_heads=s["num_attention_heads"],
        n_kv_heads=s["num_key_value_heads"], head_dim=s["head_dim"], vocab_size=vocab,
        max_position_embeddings=s["max_position_embeddings"], rms_norm_eps=eps, rope_theta=theta, rope=rope_params,
        qkv_bias=qkv_bias, qk_norm=qk_norm, tie_word_embeddings=tie, layer_window=tuple(layer_window),
        torch_dtype=torch_dtype, bos_token_id=bos[0] if bos else None, eos_token_ids=eos)


def no_windows(d: dict, source: str, n_layers: int, max_pos: int) -> tuple:
    return (0,) * n_layers


def standard_weights(p: ModelParams) -> dict:
    """HF tensor name -> WeightSlot for the Llama-style decoder every supported family uses."""
    h, i, v, hd = p.hidden_size, p.intermediate_size, p.vocab_size, p.head_dim
    q_out, kv_out = p.n_heads * hd, p.n_kv_heads * hd
    slots = {"model.embed_tokens.weight": WeightSlot("EMBED", -1, (v, h))}
    for n in range(p.n_layers):
        pre = f"model.layers.{n}."
        layer = {
            "input_layernorm.weight": ("ATTN_NORM", (h,)),
            "self_attn.q_proj.weight": ("Q", (q_out, h)),
            "self_attn.k_proj.weight": ("K", (kv_out, h)),
            "self_attn.v_proj.weight": ("V", (kv_out, h)),
            "self_attn.o_proj.weight": ("O", (h, q_out)),
            "post_attention_layernorm.weight": ("MLP_NORM", (h,)),
            "mlp.gate_proj.weight": ("GATE", (i, h)),
            "mlp.up_proj.weight": ("UP", (i, h)),
            "mlp.down_proj.weight": ("DOWN", (h, i)),
        }
        if p.qkv_bias:
            layer.update({"self_attn.q_proj.bias": ("Q_BIAS", (q_out,)),
                          "self_attn.k_proj.bias": ("K_BIAS", (kv_out,)),
                          "self_attn.v_proj.bias": ("V_BIAS", (kv_out,))})
        if p.qk_norm:
            layer.update({"self_attn.q_norm.weight": ("Q_NORM", (hd,)), "self_attn.k_norm.weight": ("K_NORM", (hd,))})
        slots.update({pre + name: WeightSlot(kind, n, shape) for name, (kind, shape) in layer.items()})
    slots["model.norm.weight"] = WeightSlot("FINAL_NORM", -1, (h,))
    if not p.tie_word_embeddings:
        slots["lm_head.weight"] = WeightSlot("LM_HEAD", -1, (v, h))
    return slots


def base_hf_dict(p: ModelParams, model_type: str) -> dict:
    """The config.json fields every family writes the same way (4.x spelling, which 5.x reads)."""
    eos = list(p.eos_token_ids)
    r = p.rope
    scaling = None
    if r.scaling == "linear":
        scaling = {"rope_type": "linear", "factor": r.factor}
    elif r.scaling == "llama3":
        scaling = {"rope_type": "llama3", "factor": r.factor, "low_freq_factor": r.low_freq_factor,
                   "high_freq_factor": r.high_freq_factor, "original_max_position_embeddings": r.original_max_position}
    elif r.scaling == "yarn":
        scaling = {"rope_type": "yarn", "factor": r.factor, "original_max_position_embeddings": r.original_max_position,
                   "beta_fast": r.beta_fast, "beta_slow": r.beta_slow, "attention_factor": r.attention_factor}
    return {
        "architectures": [p.architecture], "model_type": model_type, "hidden_size": p.hidden_size,
        "intermediate_size": p.intermediate_size, "num_hidden_layers": p.n_layers,
        "num_attention_heads": p.n_heads, "num_key_value_heads": p.n_kv_heads, "head_dim": p.head_dim,
        "vocab_size": p.vocab_size, "max_position_embeddings": p.max_position_embeddings,
        "rms_norm_eps": p.rms_norm_eps, "rope_theta": p.rope_theta, "rope_scaling": scaling,
        "tie_word_embeddings": p.tie_word_embeddings, "torch_dtype": p.torch_dtype, "bos_token_id": p.bos_token_id,
        "eos_token_id": eos[0] if len(eos) == 1 else (eos or None), "hidden_act": p.activation,
        "attention_dropout": 0.0, "use_cache": True,
    }


def qwen_windows(d: dict, source: str, n_layers: int, max_pos: int) -> tuple:
    """Qwen2 / Qwen3: transformers' rule. The window is `sliding_window` when
    `use_sliding_window`, else none; `layer_types` (if given) says which layers slide, else
    layers i >= `max_window_layers` do (Qwen2Config.__post_init__, transformers 5.x)."""
    use = typed(d.get("use_sliding_window", False), "use_sliding_window", bool, source)
    size = window(d, "sliding_window", source, max_pos, 4096) if use else None
    types = d.get("layer_types")
    if types is None:
        first = typed(d.get("max_window_layers", 28), "max_window_layers", int, source)
        if first < 0:
            raise ModelFileError(source, "max_window_layers", f"field 'max_window_layers' must be >= 0, got {first}")
        types = ["sliding_attention" if size is not None and i >= first else "full_attention" for i in range(n_layers)]
    elif not isinstance(types, list) or any(t not in ("full_attention", "sliding_attention") for t in types):
        raise ModelFileError(source, "layer_types", f"field 'layer_types' must list 'full_attention' or "
                                                    f"'sliding_attention' for each layer, got {shown(types)}")
    elif len(types) != n_layers:
        raise ModelFileError(source, "layer_types", f"field 'layer_types' lists {len(types)} layers but "
                                                    f"num_hidden_layers is {n_layers}")
    return tuple(size if t == "sliding_attention" and size is not None else 0 for t in types)


def qwen_window_fields(p: ModelParams) -> dict:
    """config.json window fields (use_sliding_window, sliding_window, layer_types) for Qwen2 / Qwen3."""
    sizes_ = {w for w in p.layer_window if w}
    assert len(sizes_) <= 1, "one window size per model"
    size = sizes_.pop() if sizes_ else None
    types = ["sliding_attention" if w else "full_attention" for w in p.layer_window]
    first = next((i for i, w in enumerate(p.layer_window) if w), p.n_layers)
    return {"use_sliding_window": size is not None, "sliding_window": size, "max_window_layers": first,
            "layer_types": types}
