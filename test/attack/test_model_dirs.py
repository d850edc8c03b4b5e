"""Crafted model directories, loaded as users load them: llaisys.LLM(path).

Each case copies the tiny valid directory, breaks one thing, and expects a ValueError whose
message names the file and the field (a hang, a crash, running out of memory or another
exception type fails the case; see conftest.run_isolated).
"""

import json
import os
import shutil

import pytest

import llaisys

from .crafted import expect_refused, run_isolated, safetensors_bytes

DELETE = object()


def cfg(**changes):
    def mutate(path):
        d = json.loads((path / "config.json").read_text())
        for k, v in changes.items():
            d.pop(k, None) if v is DELETE else d.__setitem__(k, v)
        (path / "config.json").write_text(json.dumps(d))
    return mutate


def write(name, data):
    def mutate(path):
        target = path / name
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
        target.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    return mutate


def config_text(replace_from: str, replace_to: str):
    def mutate(path):
        text = (path / "config.json").read_text()
        assert replace_from in text
        (path / "config.json").write_text(text.replace(replace_from, replace_to))
    return mutate


def json_file(name, **changes):
    def mutate(path):
        d = json.loads((path / name).read_text())
        d.update(changes)
        (path / name).write_text(json.dumps(d))
    return mutate


def st_header(fn):
    """Rewrite model.safetensors with fn(header) (the same data region)."""
    def mutate(path):
        raw = (path / "model.safetensors").read_bytes()
        n = int.from_bytes(raw[:8], "little")
        header = json.loads(raw[8:8 + n])
        new = fn(header)
        (path / "model.safetensors").write_bytes(safetensors_bytes(new, raw[8 + n:]))
    return mutate


def st_entry(name, **changes):
    def fn(header):
        header[name] = {**header[name], **changes} if isinstance(header[name], dict) else changes
        return header
    return st_header(fn)


def st_raw(data: bytes):
    return write("model.safetensors", data)


def special(kind):
    def mutate(path):
        target = path / "config.json"
        target.unlink()
        if kind == "fifo":
            os.mkfifo(target)
        else:
            target.mkdir()
    return mutate


def overlap(header):
    ln = header["model.layers.0.input_layernorm.weight"]["data_offsets"]
    header["model.norm.weight"]["data_offsets"] = [ln[0] + 2, ln[0] + 2 + 32]
    return header


def index(text):
    def mutate(path):
        (path / "model.safetensors.index.json").write_text(text)
    return mutate


def deep_object(depth=50_000):
    return '{"a":' * depth + "1" + "}" * depth


def added_token(path):
    d = json.loads((path / "tokenizer.json").read_text())
    d["added_tokens"].append({"id": 1_000_000, "content": "<|evil|>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True})
    (path / "tokenizer.json").write_text(json.dumps(d))


def sparse(name, size):
    def mutate(path):
        with open(path / name, "wb") as f:
            f.truncate(size)
    return mutate


def too_many_tensors(path):
    entries = ",".join(f'"t{i}":{{"dtype":"BF16","shape":[0],"data_offsets":[0,0]}}' for i in range(70_000))
    (path / "model.safetensors").write_bytes(safetensors_bytes("{" + entries + "}"))


CASES = [  # (id, mutation, file named in the error, field named in the error)
    # config.json: ranges, types, and agreement with the tensors present
    ("layers_million", cfg(num_hidden_layers=1_000_000), "config.json", "num_hidden_layers"),
    ("layers_more_than_file", cfg(num_hidden_layers=3), "config.json", "num_hidden_layers"),
    ("layers_fewer_than_file", cfg(num_hidden_layers=1), "config.json", "num_hidden_layers"),
    ("layers_zero", cfg(num_hidden_layers=0), "config.json", "num_hidden_layers"),
    ("layers_negative", cfg(num_hidden_layers=-1), "config.json", "num_hidden_layers"),
    ("layers_float", cfg(num_hidden_layers=2.0), "config.json", "num_hidden_layers"),
    ("layers_bool", cfg(num_hidden_layers=True), "config.json", "num_hidden_layers"),
    ("layers_string", cfg(num_hidden_layers="2"), "config.json", "num_hidden_layers"),
    ("layers_10e30", cfg(num_hidden_layers=10**30), "config.json", "num_hidden_layers"),
    ("hidden_2e40", cfg(hidden_size=2**40), "config.json", "hidden_size"),
    ("hidden_not_file", cfg(hidden_size=32), "config.json", "hidden_size"),
    ("heads_zero", cfg(num_attention_heads=0), "config.json", "num_attention_heads"),
    ("heads_not_dividing", cfg(num_attention_heads=3), "config.json", "num_attention_heads"),
    ("heads_2e31", cfg(num_attention_heads=2**31), "config.json", "num_attention_heads"),
    ("heads_change_head_dim", cfg(num_attention_heads=4), "config.json", "num_key_value_heads"),
    ("kv_heads_zero", cfg(num_key_value_heads=0), "config.json", "num_key_value_heads"),
    ("kv_heads_not_dividing", cfg(num_key_value_heads=3), "config.json", "num_key_value_heads"),
    ("kv_heads_not_file", cfg(num_key_value_heads=2), "config.json", "num_key_value_heads"),
    ("head_dim_odd", cfg(hidden_size=18), "config.json", "head_dim"),
    ("head_dim_wrong", cfg(head_dim=4), "config.json", "head_dim"),
    ("vocab_2e40", cfg(vocab_size=2**40), "config.json", "vocab_size"),
    ("vocab_not_file", cfg(vocab_size=4096), "config.json", "vocab_size"),
    ("vocab_zero", cfg(vocab_size=0), "config.json", "vocab_size"),
    ("vocab_missing", cfg(vocab_size=DELETE), "config.json", "vocab_size"),
    ("intermediate_not_file", cfg(intermediate_size=64), "config.json", "intermediate_size"),
    ("intermediate_2e40", cfg(intermediate_size=2**40), "config.json", "intermediate_size"),
    ("max_positions_2e40", cfg(max_position_embeddings=2**40), "config.json", "max_position_embeddings"),
    ("max_positions_zero", cfg(max_position_embeddings=0), "config.json", "max_position_embeddings"),
    ("rope_theta_nan", config_text('"rope_theta": 1000000.0', '"rope_theta": NaN'), "config.json", "rope_theta"),
    ("rope_theta_inf", config_text('"rope_theta": 1000000.0', '"rope_theta": 1e999'), "config.json", "rope_theta"),
    ("rope_theta_negative", cfg(rope_theta=-1.0), "config.json", "rope_theta"),
    ("rope_theta_1e30", cfg(rope_theta=1e30), "config.json", "rope_theta"),
    ("eps_zero", cfg(rms_norm_eps=0), "config.json", "rms_norm_eps"),
    ("eps_five", cfg(rms_norm_eps=5.0), "config.json", "rms_norm_eps"),
    ("eps_string", cfg(rms_norm_eps="x"), "config.json", "rms_norm_eps"),
    ("dtype_list", cfg(torch_dtype=[]), "config.json", "torch_dtype"),
    ("dtype_int8", cfg(torch_dtype="int8"), "config.json", "torch_dtype"),
    ("tie_string", cfg(tie_word_embeddings="yes"), "config.json", "tie_word_embeddings"),
    ("sliding_window_string", cfg(use_sliding_window="false"), "config.json", "use_sliding_window"),
    ("rope_scaling_string", cfg(rope_scaling="yarn"), "config.json", "rope_scaling"),
    ("rope_scaling_dynamic", cfg(rope_scaling={"type": "dynamic", "factor": 4.0}), "config.json",
     "rope_scaling.rope_type"),
    ("rope_scaling_yarn_mscale", cfg(rope_scaling={"type": "yarn", "factor": 4.0, "mscale": 0.7}), "config.json",
     "rope_scaling.mscale"),
    ("rope_scaling_llama3_no_original", cfg(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                          "high_freq_factor": 4.0}), "config.json",
     "rope_scaling.original_max_position_embeddings"),
    ("model_type_llama", cfg(model_type="llama"), "config.json", "model_type"),
    ("model_type_missing", cfg(model_type=DELETE), "config.json", "model_type"),
    ("architectures_string", cfg(architectures="Qwen2ForCausalLM"), "config.json", "architectures"),
    ("hidden_act_gelu", cfg(hidden_act="gelu"), "config.json", "hidden_act"),
    ("eos_outside_vocab", cfg(eos_token_id=10**9), "config.json", "eos_token_id"),
    ("eos_100k_ids", cfg(eos_token_id=list(range(100_000))), "config.json", "eos_token_id"),
    ("eos_string", cfg(eos_token_id="2"), "config.json", "eos_token_id"),
    ("bos_negative", cfg(bos_token_id=-1), "config.json", "bos_token_id"),
    ("config_list", write("config.json", "[]"), "config.json", None),
    ("config_50k_deep", write("config.json", deep_object()), "config.json", None),
    ("config_5mb", write("config.json", " " * (5 << 20) + "{}"), "config.json", None),
    ("config_bad_utf8", write("config.json", b'{"model_type": "\xff"}'), "config.json", None),
    ("config_is_directory", special("dir"), "config.json", None),
    ("config_is_fifo", special("fifo"), "config.json", None),
    # model.safetensors: header size and nesting, entries, offsets; then the tensor set
    ("st_header_50k_deep", st_raw(safetensors_bytes(deep_object())), "model.safetensors", "header"),
    ("st_header_past_eof", st_raw(safetensors_bytes("{}", length=1000)), "model.safetensors", "header"),
    ("st_header_2e40", st_raw(safetensors_bytes("{}", length=2**40)), "model.safetensors", "header"),
    ("st_header_20mb", st_raw(safetensors_bytes(" " * (20 << 20) + "{}")), "model.safetensors", "header"),
    ("st_4_bytes", st_raw(b"\x02\x00\x00\x00"), "model.safetensors", "header"),
    ("st_header_not_json", st_raw(safetensors_bytes("{not json")), "model.safetensors", "header"),
    ("st_header_list", st_raw(safetensors_bytes("[]")), "model.safetensors", "header"),
    ("st_duplicate_key", st_raw(safetensors_bytes('{"a": {}, "a": {}}')), "model.safetensors", "header"),
    ("st_70k_tensors", too_many_tensors, "model.safetensors", "header"),
    ("st_unknown_dtype", st_entry("model.norm.weight", dtype="F8"), "model.safetensors", "model.norm.weight"),
    ("st_negative_dim", st_entry("model.norm.weight", shape=[-16]), "model.safetensors", "model.norm.weight"),
    ("st_float_dim", st_entry("model.norm.weight", shape=[16.0]), "model.safetensors", "model.norm.weight"),
    ("st_100_dims", st_entry("model.norm.weight", shape=[1] * 100), "model.safetensors", "model.norm.weight"),
    ("st_shape_overflow", st_entry("model.norm.weight", shape=[2**62, 2**62]), "model.safetensors",
     "model.norm.weight"),
    ("st_empty_huge", st_entry("model.norm.weight", shape=[0, 2**62, 2**62], data_offsets=[0, 0]),
     "model.safetensors", "model.norm.weight"),
    ("st_offsets_past_eof", st_entry("model.norm.weight", data_offsets=[10**9, 10**9 + 32]), "model.safetensors",
     "model.norm.weight"),
    ("st_offsets_overlap", st_header(overlap), "model.safetensors", "model.norm.weight"),
    ("st_offsets_reversed", st_entry("model.norm.weight", data_offsets=[32, 0]), "model.safetensors",
     "model.norm.weight"),
    ("st_offsets_one", st_entry("model.norm.weight", data_offsets=[0]), "model.safetensors", "model.norm.weight"),
    ("st_offsets_negative", st_entry("model.norm.weight", data_offsets=[-32, 0]), "model.safetensors",
     "model.norm.weight"),
    ("st_size_mismatch", st_entry("model.norm.weight", shape=[8]), "model.safetensors", "model.norm.weight"),
    ("st_entry_not_object", st_header(lambda h: {**h, "model.norm.weight": [1, 2]}), "model.safetensors",
     "model.norm.weight"),
    ("st_metadata_int", st_header(lambda h: {**h, "__metadata__": {"format": 1}}), "model.safetensors",
     "__metadata__"),
    ("st_wrong_dtype", st_entry("model.norm.weight", dtype="I16"), None, "model.norm.weight"),
    ("st_missing_tensor", st_header(lambda h: {k: v for k, v in h.items() if k != "model.norm.weight"}), None,
     "model.norm.weight"),
    ("st_unexpected_tensor", st_header(lambda h: {**h, "model.evil": h["model.norm.weight"]}), None,
     "model.evil"),
    ("st_is_fifo", lambda p: ((p / "model.safetensors").unlink(), os.mkfifo(p / "model.safetensors")), None, None),
    # model.safetensors.index.json
    ("index_empty_map", index('{"weight_map": {}}'), "model.safetensors.index.json", "weight_map"),
    ("index_path_traversal", index('{"weight_map": {"model.norm.weight": "../../etc/x.safetensors"}}'),
     "model.safetensors.index.json", "weight_map"),
    ("index_50k_deep", index(deep_object()), "model.safetensors.index.json", None),
    ("index_missing_shard", index('{"weight_map": {"model.norm.weight": "gone.safetensors"}}'),
     "model.safetensors.index.json", "weight_map"),
    ("index_not_object", index("[]"), "model.safetensors.index.json", None),
    # tokenizer.json, tokenizer_config.json, generation_config.json
    ("tokenizer_garbage", write("tokenizer.json", "{not json"), "tokenizer.json", None),
    ("tokenizer_50k_deep", write("tokenizer.json", deep_object()), "tokenizer.json", None),
    ("tokenizer_300mb", sparse("tokenizer.json", 300 << 20), "tokenizer.json", None),
    ("tokenizer_id_outside_vocab", added_token, "tokenizer.json", "<|evil|>"),
    ("tokenizer_config_eos_int", json_file("tokenizer_config.json", eos_token=5), "tokenizer_config.json",
     "eos_token"),
    ("tokenizer_config_eos_surrogate", json_file("tokenizer_config.json", eos_token="\ud800"),
     "tokenizer_config.json", "eos_token"),
    ("tokenizer_config_50k_deep", write("tokenizer_config.json", deep_object()), "tokenizer_config.json", None),
    ("tokenizer_config_template_int", json_file("tokenizer_config.json", chat_template=123), "tokenizer_config.json",
     "chat_template"),
    ("tokenizer_config_template_surrogate", json_file("tokenizer_config.json", chat_template="{{ '\ud800' }}"),
     "tokenizer_config.json", "chat_template"),
    ("generation_eos_outside_vocab", json_file("generation_config.json", eos_token_id=10**6),
     "generation_config.json", "eos_token_id"),
    ("generation_eos_string", json_file("generation_config.json", eos_token_id="x"), "generation_config.json",
     "eos_token_id"),
    ("generation_pad_list_of_lists", json_file("generation_config.json", pad_token_id=[[1]]),
     "generation_config.json", "pad_token_id"),
    ("generation_50k_deep", write("generation_config.json", deep_object()), "generation_config.json", None),
    ("generation_not_object", write("generation_config.json", "[1]"), "generation_config.json", None),
    # chat_template.jinja, compiled at load
    ("jinja_syntax_error", write("chat_template.jinja", "{% for %}"), "chat_template.jinja", "chat_template"),
    ("jinja_bad_utf8", write("chat_template.jinja", b"{{ '\xff' }}"), "chat_template.jinja", "chat_template"),
    ("jinja_2mb", write("chat_template.jinja", "x" * (2 << 20)), "chat_template.jinja", "chat_template"),
    ("jinja_5000_parens", write("chat_template.jinja", "{{" + "(" * 5000 + "1" + ")" * 5000 + "}}"),
     "chat_template.jinja", "chat_template"),
    ("jinja_30_nested_loops", write("chat_template.jinja", "{% for a in [1] %}" * 30 + "{% endfor %}" * 30),
     "chat_template.jinja", "chat_template"),
]
# the reproducers of issue 16 item 3 (each hangs, crashes or raises another type on the old code)
REPRODUCERS = {"layers_million", "st_header_50k_deep", "dtype_list", "config_is_fifo"}


@pytest.mark.parametrize("mutate,file,field", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_crafted_directory_is_refused(tiny_dir, tmp_path, mutate, file, field):
    path = tmp_path / "model"
    shutil.copytree(tiny_dir, path)
    mutate(path)
    outcome = run_isolated(lambda: llaisys.LLM(str(path), kv_cache_memory="16MiB"))
    expect_refused(outcome, field, file)


def test_the_uncrafted_directory_loads_and_generates(tiny_dir):
    """The base every case starts from is valid: each refusal above is the mutation's doing."""
    llm = llaisys.LLM(str(tiny_dir), kv_cache_memory="16MiB")
    out = llm.generate("hello", llaisys.SamplingParams(max_tokens=2, temperature=0.0))
    assert 1 <= len(out[0].outputs[0].token_ids) <= 2


def test_case_count():
    assert len(CASES) >= 70 and REPRODUCERS <= {c[0] for c in CASES}
