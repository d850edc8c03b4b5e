"""GGUF files run directly (gguf_model.load_gguf) on tiny synthetic Qwen2 files: the config,
tokenizer and template equal what the converter writes, every tensor is mapped with its stored
bytes, and a model built from it generates what the converted directory generates."""

import json

import gguf
import numpy as np
import pytest

from llaisys.models import bf16, hub
from llaisys.models.arch import hf_config_dict, parse_config, weight_slots
from llaisys.models.gguf_check import read_gguf
from llaisys.models.gguf_convert import convert_gguf, hf_tensor_name
from llaisys.models.gguf_export import export_gguf
from llaisys.models.gguf_model import is_gguf, load_gguf, quant_summary
from llaisys.models.tensors import QUANT_BLOCKS, QuantTensor
from llaisys.models.tokenizer import Tokenizer

from test_gguf_convert_tiny import TEXTS

CHAT = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello the world"}]


@pytest.fixture(scope="module", params=["untied", "tied"])
def pair(request, tiny_gguf, tiny_gguf_tied, tmp_path_factory):
    """(kind, the GGUF, load_gguf of it, the directory convert_gguf makes of it)."""
    src = tiny_gguf if request.param == "untied" else tiny_gguf_tied
    return request.param, src, load_gguf(src), convert_gguf(src, tmp_path_factory.mktemp("conv") / "hf")


def test_metadata_config_equals_the_converted_config_json(pair):
    kind, _, g, hf = pair
    assert hf_config_dict(g.loaded.config) == json.loads((hf / "config.json").read_text())
    assert g.loaded.config.tie_word_embeddings is (kind == "tied")


def test_tokenizer_and_template_equal_the_converted_directory(pair):
    _, _, g, hf = pair
    ref, ours = Tokenizer.from_dir(hf), g.tokenizer
    for text in TEXTS:
        assert ours.encode(text) == ref.encode(text), text
    assert ours.special == ref.special and ours.special_tokens_map == ref.special_tokens_map
    assert ours.vocab_size == ref.vocab_size and ours.chat_template == ref.chat_template
    assert ours.apply_chat_template(CHAT) == ref.apply_chat_template(CHAT)


def test_every_tensor_is_mapped_with_its_stored_bytes(pair):
    kind, src, g, _ = pair
    slots = weight_slots(g.loaded.config)
    tensors = g.loaded.tensors
    assert set(tensors) == set(slots)  # complete: the tied file has no lm_head, and needs none
    reader = gguf.GGUFReader(src)
    for t in reader.tensors:
        ours = tensors[hf_tensor_name(t.name)]
        shape = tuple(reversed(t.shape.tolist()))
        assert ours.shape == shape, t.name
        if t.tensor_type == gguf.GGMLQuantizationType.Q8_0:
            assert isinstance(ours, QuantTensor) and ours.dtype == "q8_0"
            assert ours.data.shape == (shape[0], shape[1] // 32 * 34)
            assert np.array_equal(ours.data, np.asarray(t.data)), t.name
        else:  # F32 norms and biases, in the f32 float dtype: exact
            assert ours.dtype == "f32" and np.array_equal(ours.data, np.asarray(t.data)), t.name
    summary = quant_summary(g.loaded)
    assert sum(b for _, b in summary.values()) == sum(int(t.n_bytes) for t in reader.tensors)
    assert g.loaded.dtype == "f32" and g.loaded.path == src


def test_float_dtype_choice(tiny_gguf, tmp_path):
    g = load_gguf(tiny_gguf, dtype="bf16")
    norm = g.loaded.tensors["model.norm.weight"]
    assert g.loaded.dtype == "bf16" and norm.dtype == "bf16"
    assert np.array_equal(norm.data, bf16.f32_to_bf16(load_gguf(tiny_gguf).loaded.tensors["model.norm.weight"].data))
    assert g.loaded.tensors["model.layers.0.mlp.up_proj.weight"].dtype == "q8_0"  # matrices stay quantized
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_gguf(tiny_gguf, dtype="q8_0")
    # a float GGUF keeps its matrices' dtype
    hf = convert_gguf(tiny_gguf, tmp_path / "hf")
    exported = export_gguf(hf, tmp_path / "tiny-bf16.gguf")
    f = load_gguf(exported)
    assert f.loaded.dtype == "bf16" and {t.dtype for t in f.loaded.tensors.values()} == {"bf16"}


def test_read_gguf_equals_the_gguf_reader(tiny_gguf):
    ours, ref = read_gguf(tiny_gguf), gguf.GGUFReader(tiny_gguf)
    for key, field in ref.fields.items():
        if not key.startswith("GGUF."):
            assert ours.metadata[key] == field.contents() and type(ours.metadata[key]) is type(field.contents()), key
    for info, t in zip(ours.tensors, ref.tensors):
        assert (info.name, info.dims, info.type_id) == (t.name, tuple(t.shape.tolist()), int(t.tensor_type))
        assert np.array_equal(ours.tensor_bytes(info), np.asarray(t.data).view(np.uint8).ravel())


def test_is_gguf_and_resolve(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("LLAISYS_HOME", str(tmp_path / "home"))
    assert is_gguf(tiny_gguf) and not is_gguf(tiny_gguf.parent)
    assert hub.resolve_model(tiny_gguf) == tiny_gguf
    with pytest.raises(ValueError, match="GGUF file does not exist"):
        hub.resolve_model(tmp_path / "missing.gguf")
    with pytest.raises(ValueError, match="quant chooses the download of a known model"):
        hub.resolve_model(tiny_gguf, quant="q8_0")
    with pytest.raises(ValueError, match="quant must be one of q4_k_m, q8_0, bf16"):
        hub.resolve_model(hub.DEFAULT_MODEL, quant="q3")


def _greedy(model, prompts, n=8):
    from llaisys.engine import LLM, SamplingParams

    with LLM(str(model), kv_cache_memory="16MiB", max_num_batched_tokens=256, max_num_seqs=4) as llm:
        outs = llm.generate(prompts, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True))
        return [o.outputs[0].token_ids for o in outs], llm.worker.name


def test_a_bf16_gguf_generates_what_its_directory_generates(tiny_gguf, tmp_path):
    hf = convert_gguf(tiny_gguf, tmp_path / "tiny")
    exported = export_gguf(hf, tmp_path / "tiny-bf16.gguf")
    prompts = [[1, 5, 260, 262, 100, 7], [3, 4, 5]]
    ours, name = _greedy(exported, prompts)
    ref, _ = _greedy(hf, prompts)
    assert ours == ref and name == "tiny-bf16"


def test_a_q8_0_gguf_runs_as_it_is(tiny_gguf, tmp_path):
    """The quantized path end to end: GGUF-direct greedy tokens against the converted bf16 directory
    (random tiny weights: tokens may differ where logits are close, so agreement, not identity)."""
    hf = convert_gguf(tiny_gguf, tmp_path / "tiny")
    prompts = [[1, 5, 260, 262, 100, 7], [3, 4, 5], [9, 9, 9, 9]]
    ours, _ = _greedy(tiny_gguf, prompts)
    ref, _ = _greedy(hf, prompts)
    assert [o[0] for o in ours] == [r[0] for r in ref]  # the first token of every prompt
    agree = np.mean([a == b for o, r in zip(ours, ref) for a, b in zip(o, r)])
    assert agree >= 0.75


def test_quantize_plans():
    from llaisys.models.quantize import plan_types

    cfg = parse_config({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 512,
                  "intermediate_size": 896, "num_hidden_layers": 16, "num_attention_heads": 8,
                  "num_key_value_heads": 2, "vocab_size": 1024, "tie_word_embeddings": False})
    names = list(weight_slots(cfg))
    q8 = plan_types(cfg, names, "q8_0")
    assert set(q8.values()) == {"q8_0"} and "model.norm.weight" not in q8 and "lm_head.weight" in q8
    q4 = plan_types(cfg, names, "q4_k")
    assert q4["lm_head.weight"] == "q6_k" and q4["model.embed_tokens.weight"] == "q4_k"
    assert q4["model.layers.0.mlp.down_proj.weight"] == "q8_0"  # more bits (Q6_K), 896-wide rows: Q8_0
    assert q4["model.layers.3.mlp.down_proj.weight"] == "q5_0"  # Q4_K, 896-wide rows: Q5_0
    assert q4["model.layers.0.self_attn.v_proj.weight"] == "q6_k" and q4["model.layers.3.self_attn.v_proj.weight"] == "q4_k"
    assert "model.layers.0.self_attn.q_proj.bias" not in q4
    with pytest.raises(ValueError, match="quantize must be one of q8_0, q4_k"):
        plan_types(cfg, names, "q2_k")


def test_quantize_at_load_q8_0_equals_gguf_py(tiny_gguf, tmp_path):
    from llaisys.models.loader import load_model

    hf = convert_gguf(tiny_gguf, tmp_path / "tiny")
    plain, q = load_model(hf), load_model(hf, quantize="q8_0")
    for name, t in q.tensors.items():
        if isinstance(t, QuantTensor):
            want = gguf.quants.quantize(bf16.bf16_to_f32(plain.tensors[name].data), gguf.GGMLQuantizationType.Q8_0)
            assert t.dtype == "q8_0" and np.array_equal(t.data, want), name
        else:
            assert len(t.shape) == 1 and np.array_equal(t.data, plain.tensors[name].data)
    k = load_model(hf, quantize="q4_k")
    assert {t.dtype for t in k.tensors.values()} <= {"bf16", *QUANT_BLOCKS}
    with pytest.raises(ValueError, match="quantize must be one of"):
        load_model(hf, quantize="q8")


def test_quantize_option_reaches_the_worker(tiny_gguf, tmp_path):
    from llaisys.engine import LLM

    hf = convert_gguf(tiny_gguf, tmp_path / "tiny")
    with pytest.raises(ValueError, match="quantize applies to HF safetensors directories"):
        LLM(str(tiny_gguf), quantize="q8_0")
    with pytest.raises(ValueError, match="quantize must be one of"):
        LLM(str(hf), quantize="q5")
