"""Qwen2 config parsing and validation (models.arch.parse_config into a ModelParams; Qwen2Config is its deprecated
alias)."""

import json

import pytest

from llaisys.models.arch import hf_config_dict, parse_config, read_config
from llaisys.models.config import ModelParams, Qwen2Config

BASE = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
    "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "bos_token_id": 151643, "eos_token_id": 151645,
}


def test_parses_transformers_4_style():
    c = parse_config(BASE)
    assert type(c) is ModelParams is Qwen2Config
    assert (c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim) == (896, 14, 2, 64)
    assert c.rope_theta == 1e6 and c.tie_word_embeddings and c.dtype_tag == "bf16"
    assert c.bos_token_id == 151643 and c.eos_token_ids == (151645,)


def test_parses_transformers_5_style():
    d = {k: v for k, v in BASE.items() if k not in ("rope_theta", "torch_dtype")}
    d.update(dtype="float32", rope_parameters={"rope_theta": 5000.0, "rope_type": "default"},
             eos_token_id=[151645, 151643], bos_token_id=None)
    c = parse_config(d)
    assert c.rope_theta == 5000.0 and c.torch_dtype == "float32" and c.dtype_tag == "f32"
    assert c.eos_token_ids == (151645, 151643) and c.bos_token_id is None


def test_round_trips_through_hf_dict():
    c = parse_config(BASE)
    assert parse_config(hf_config_dict(c)) == c


def test_transformers_reads_our_hf_dict(tmp_path):
    transformers = pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps(hf_config_dict(parse_config(BASE))))
    ref = transformers.AutoConfig.from_pretrained(tmp_path)
    assert ref.model_type == "qwen2" and ref.num_key_value_heads == 2 and ref.tie_word_embeddings is True
    assert ref.rope_parameters["rope_theta"] == 1e6


@pytest.mark.parametrize("change,message", [
    ({"architectures": ["GPT2LMHeadModel"]}, "architectures.*known: LlamaForCausalLM, MistralForCausalLM"),
    ({"architectures": ["LlamaForCausalLM"]}, "model_type 'qwen2' does not match LlamaForCausalLM"),
    ({"model_type": "llama"}, "model_type"),
    ({"hidden_size": None}, "hidden_size.*int"),
    ({"hidden_size": "896"}, "hidden_size.*int"),
    ({"num_hidden_layers": True}, "num_hidden_layers.*int"),
    ({"hidden_size": 0}, "hidden_size.*positive"),
    ({"num_attention_heads": 12}, "num_attention_heads 12 does not divide hidden_size 896"),
    ({"num_key_value_heads": 3}, "does not divide num_attention_heads"),
    ({"rms_norm_eps": "x"}, "rms_norm_eps"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings.*bool"),
    ({"torch_dtype": "int8"}, "torch_dtype"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"use_sliding_window": True, "sliding_window": 65536}, "sliding_window 65536 is larger than max_position"),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}},
     "original_max_position_embeddings"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}, "rope_scaling.rope_type.*dynamic.*supported"),
    ({"eos_token_id": 999999}, "outside the vocabulary"),
    ({"head_dim": 63}, "head_dim 63 must be even"),
])
def test_invalid_configs(change, message):
    with pytest.raises(ValueError, match=message):
        parse_config({**BASE, **change})


@pytest.mark.parametrize("key", ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                 "vocab_size"])
def test_missing_required_field(key):
    d = dict(BASE)
    del d[key]
    with pytest.raises(ValueError, match=f"missing required field '{key}'"):
        parse_config(d)


def test_file_errors(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        read_config(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("{oops")
    with pytest.raises(ValueError, match="invalid JSON"):
        read_config(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("[]")
    with pytest.raises(ValueError, match="JSON object"):
        read_config(tmp_path / "config.json")
