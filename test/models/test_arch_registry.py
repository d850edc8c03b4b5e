"""The architecture registry: every family's config parser and weight map, and every config
llaisys refuses, each with a ModelFileError that names the field."""

import pytest

from llaisys.models.arch import REGISTRY, hf_config_dict, parse_config, spec_for_gguf, weight_slots
from llaisys.models.files import ModelFileError

COMMON = {"hidden_size": 80, "intermediate_size": 136, "num_hidden_layers": 3, "num_attention_heads": 5,
          "num_key_value_heads": 1, "vocab_size": 384, "max_position_embeddings": 512, "rms_norm_eps": 1e-6}
BASES = {
    "qwen2": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **COMMON},
    "llama": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **COMMON},
    "qwen3": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **COMMON, "head_dim": 24},
    "mistral": {"architectures": ["MistralForCausalLM"], "model_type": "mistral", **COMMON, "sliding_window": 7},
}
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 64}


def parse(family, **change):
    d = {**BASES[family], **change}
    return parse_config({k: v for k, v in d.items() if v is not ...}, "config.json")


def test_registry_lists_the_families():  # the mixture-of-experts ones: test_moe_registry.py
    assert sorted(REGISTRY) == ["LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM",
                                "Qwen2MoeForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM"]


@pytest.mark.parametrize("family", list(BASES))
def test_each_family_round_trips_through_its_hf_dict(family):
    p = parse(family)
    assert p.arch == family and parse_config(hf_config_dict(p)) == p


@pytest.mark.parametrize("family", list(BASES))
def test_transformers_reads_our_hf_dict_as_we_do(family):
    transformers = pytest.importorskip("transformers")
    p = parse(family, rope_scaling=LLAMA3) if family == "llama" else parse(family)
    d = hf_config_dict(p)
    cfg = transformers.AutoConfig.for_model(d.pop("model_type"), **d)
    assert cfg.num_hidden_layers == p.n_layers and getattr(cfg, "head_dim", p.head_dim) == p.head_dim
    assert cfg.rope_parameters.get("rope_type", "default") == p.rope.scaling


def test_family_flags_and_head_dims():
    q2, ll, q3, mi = (parse(f) for f in ("qwen2", "llama", "qwen3", "mistral"))
    assert (q2.qkv_bias, q2.qk_norm, q2.head_dim) == (True, False, 16)
    assert (ll.qkv_bias, ll.qk_norm, ll.head_dim) == (False, False, 16)
    assert (q3.qkv_bias, q3.qk_norm, q3.head_dim) == (False, True, 24)
    assert parse("qwen3", head_dim=...).head_dim == 128  # transformers' Qwen3Config default
    assert parse("llama", head_dim=32, hidden_size=96).head_dim == 32
    assert mi.layer_window == (7, 7, 7) and parse("mistral", sliding_window=None).layer_window == (0, 0, 0)


def test_mistral_window_default_is_transformers_4096():
    with pytest.raises(ModelFileError, match="sliding_window 4096 is larger than max_position_embeddings 512"):
        parse("mistral", sliding_window=...)
    assert parse("mistral", sliding_window=..., max_position_embeddings=8192).layer_window == (4096,) * 3


@pytest.mark.parametrize("change,windows", [
    ({}, (0, 0, 0)),
    ({"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 1}, (0, 6, 6)),
    ({"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 3}, (0, 0, 0)),
    ({"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 0}, (6, 6, 6)),
    ({"use_sliding_window": False, "sliding_window": 100000, "max_window_layers": 0}, (0, 0, 0)),  # Qwen2.5 files
    ({"use_sliding_window": True, "sliding_window": None}, (0, 0, 0)),
    ({"use_sliding_window": True, "sliding_window": 6,
      "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}, (6, 0, 6)),
])
@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_qwen_windows_follow_transformers(family, change, windows):
    assert parse(family, **change).layer_window == windows
    transformers = pytest.importorskip("transformers")
    cls = {"qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[family]
    cfg = cls(**{k: v for k, v in {**BASES[family], **change}.items() if k not in ("architectures", "model_type")})
    assert tuple(cfg.sliding_window if t == "sliding_attention" and cfg.sliding_window else 0
                 for t in cfg.layer_types) == windows


@pytest.mark.parametrize("spelling", ["rope_scaling", "rope_parameters"])
def test_rope_scaling_types(spelling):
    r = parse("llama", **{spelling: LLAMA3}).rope
    assert (r.scaling, r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_position) == \
        ("llama3", 8.0, 1.0, 4.0, 64)
    assert parse("llama", **{spelling: {"type": "linear", "factor": 2.0}}).rope.factor == 2.0
    y = parse("llama", **{spelling: {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}})
    assert y.rope.scaling == "yarn" and y.rope.attention_factor == pytest.approx(0.1 * 1.3862944 + 1)
    assert (y.rope.beta_fast, y.rope.beta_slow) == (32.0, 1.0)
    # YaRN without original_max_position_embeddings: the trained context, as transformers fills it in
    y = parse("llama", **{spelling: {"rope_type": "yarn", "factor": 4.0}})
    assert y.rope.original_max_position == y.max_position_embeddings
    assert parse("qwen2", rope_theta=..., rope_parameters={"rope_type": "default", "rope_theta": 5e5}).rope_theta == 5e5


@pytest.mark.parametrize("family,change,field,message", [
    ("qwen2", {"architectures": ["GPT2LMHeadModel"]}, "architectures",
     "not supported; known: LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM, "
     "Qwen2MoeForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM"),
    ("qwen2", {"architectures": "Qwen2ForCausalLM"}, "architectures", "must be a list"),
    ("qwen2", {"architectures": ..., "model_type": "gpt2"}, "model_type", "known: "),
    ("llama", {"model_type": "qwen2"}, "model_type", "does not match LlamaForCausalLM"),
    ("llama", {"num_attention_heads": 6, "num_key_value_heads": 2}, "num_attention_heads",
     "num_attention_heads 6 does not divide hidden_size 80"),
    ("qwen3", {"num_key_value_heads": 2}, "num_key_value_heads", "does not divide num_attention_heads 5"),
    ("llama", {"head_dim": 15}, "head_dim", "must be even"),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 513}, "sliding_window",
     "sliding_window 513 is larger than max_position_embeddings 512"),
    ("mistral", {"sliding_window": 1000}, "sliding_window", "larger than max_position_embeddings"),
    ("mistral", {"sliding_window": 0}, "sliding_window", "must be positive"),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 6, "layer_types": ["full_attention"]}, "layer_types",
     "lists 1 layers but num_hidden_layers is 3"),
    ("qwen2", {"layer_types": ["full", "full", "full"]}, "layer_types", "'full_attention' or 'sliding_attention'"),
    ("qwen2", {"max_window_layers": -1}, "max_window_layers", ">= 0"),
    ("llama", {"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_scaling.rope_type",
     "'dynamic' is not supported \\(supported: default, linear, llama3, yarn\\)"),
    ("llama", {"rope_parameters": {"rope_type": "longrope"}}, "rope_parameters.rope_type", "longrope"),
    ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64}},
     "rope_scaling.low_freq_factor", "needs field 'rope_scaling.low_freq_factor'"),
    ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}},
     "rope_scaling.original_max_position_embeddings", "needs"),
    ("llama", {"rope_scaling": {**LLAMA3, "high_freq_factor": 0.5}}, "rope_scaling.high_freq_factor",
     "must exceed low_freq_factor"),
    ("llama", {"rope_scaling": {**LLAMA3, "original_max_position_embeddings": 1024}},
     "rope_scaling.original_max_position_embeddings", "exceeds max_position_embeddings"),
    ("llama", {"rope_scaling": {"rope_type": "linear", "factor": -1.0}}, "rope_scaling.factor", "positive"),
    ("llama", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                "mscale": 0.7}}, "rope_scaling.mscale", "not supported"),
    ("llama", {"rope_scaling": "llama3"}, "rope_scaling", "must be an object"),
    ("llama", {"partial_rotary_factor": 0.5}, "partial_rotary_factor", "not supported"),
    ("llama", {"attention_bias": True}, "attention_bias", "attention_bias=true is not supported for Llama"),
    ("llama", {"mlp_bias": True}, "mlp_bias", "not supported"),
    ("qwen3", {"attention_bias": True}, "attention_bias", "not supported for Qwen3"),
    ("mistral", {"hidden_act": "gelu"}, "hidden_act", "hidden_act 'gelu' is not supported"),
    ("qwen2", {"hidden_act": "relu"}, "hidden_act", "only 'silu'"),
    ("qwen3", {"head_dim": 0}, "head_dim", "positive"),
    ("qwen2", {"dtype": "int4"}, "dtype", "not one of"),
])
def test_bad_configs_name_the_field(family, change, field, message):
    with pytest.raises(ModelFileError, match=message) as e:
        parse(family, **change)
    assert e.value.field == field and str(e.value).startswith("config.json: ")


@pytest.mark.parametrize("family", list(BASES))
def test_weight_maps(family):
    p = parse(family, tie_word_embeddings=family == "llama")
    slots = weight_slots(p)
    hd = p.head_dim
    assert slots["model.embed_tokens.weight"].shape == (384, 80) and slots["model.embed_tokens.weight"].layer == -1
    assert ("lm_head.weight" in slots) == (family != "llama")
    q = slots["model.layers.2.self_attn.q_proj.weight"]
    assert (q.kind, q.layer, q.shape) == ("Q", 2, (5 * hd, 80))
    assert slots["model.layers.1.self_attn.o_proj.weight"].shape == (80, 5 * hd)
    assert slots["model.layers.0.self_attn.k_proj.weight"].shape == (hd, 80)
    assert ("model.layers.0.self_attn.q_proj.bias" in slots) == (family == "qwen2")
    assert ("model.layers.0.self_attn.k_norm.weight" in slots) == (family == "qwen3")
    per_layer = 9 + 3 * (family == "qwen2") + 2 * (family == "qwen3")
    assert len(slots) == 2 + (family != "llama") + 3 * per_layer


def test_gguf_architectures():
    assert spec_for_gguf("qwen2").architecture == "Qwen2ForCausalLM"
    assert spec_for_gguf("qwen3").architecture == "Qwen3ForCausalLM"
    assert spec_for_gguf("llama").architecture == "LlamaForCausalLM"  # dense; with experts: Mixtral (gguf_moe)
    with pytest.raises(ModelFileError, match="general.architecture is 'mistral3'; only llama, qwen2, qwen2moe, "
                                             "qwen3, qwen3moe can be converted"):
        spec_for_gguf("mistral3")


def test_the_loader_checks_a_directory_against_the_map(tmp_path):
    """Missing and extra tensors are named before anything is sized."""
    import json

    import numpy as np

    from llaisys.models.loader import load_model
    from llaisys.models.safetensors_io import RawTensor, write_safetensors

    def zeros(name, shape):
        return RawTensor(name, "f32", shape, np.zeros(shape, np.float32))

    p = parse("qwen3")
    tensors = {name: zeros(name, slot.shape) for name, slot in weight_slots(p).items()}
    (tmp_path / "config.json").write_text(json.dumps(hf_config_dict(p)))
    write_safetensors(tmp_path / "model.safetensors", tensors)
    assert load_model(tmp_path).config == p
    del tensors["model.layers.1.self_attn.q_norm.weight"]
    write_safetensors(tmp_path / "model.safetensors", {**tensors, "model.layers.0.self_attn.q_proj.bias":
                                                       zeros("model.layers.0.self_attn.q_proj.bias", (120,))})
    with pytest.raises(ModelFileError, match="missing tensors: model.layers.1.self_attn.q_norm.weight"):
        load_model(tmp_path)
    tensors["model.layers.1.self_attn.q_norm.weight"] = zeros("model.layers.1.self_attn.q_norm.weight", (24,))
    write_safetensors(tmp_path / "model.safetensors", {**tensors, "model.layers.0.self_attn.q_proj.bias":
                                                       zeros("model.layers.0.self_attn.q_proj.bias", (120,))})
    with pytest.raises(ModelFileError, match="unexpected tensors for a Qwen3ForCausalLM model"):
        load_model(tmp_path)
