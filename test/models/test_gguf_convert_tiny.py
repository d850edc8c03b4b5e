"""The GGUF converter on tiny synthetic Qwen2 files, checked against transformers' GGUF loader."""

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from llaisys.models.gguf_convert import convert_gguf, hf_tensor_name
from llaisys.models.loader import load_model
from llaisys.models.safetensors_io import read_safetensors
from llaisys.models.tokenizer import Tokenizer

TEXTS = ["hello the world", "  the hell<|im_end|> 你好 <tool_call>x", "a\n\n  b\t\r\n", "", "<|im_start|>user\nhi"]


@pytest.fixture(scope="module", params=["untied", "tied"])
def converted(request, tiny_gguf, tiny_gguf_tied, tmp_path_factory):
    src = tiny_gguf if request.param == "untied" else tiny_gguf_tied
    out = convert_gguf(src, tmp_path_factory.mktemp("conv") / "hf")
    return request.param, src, out


def test_weights_equal_transformers_gguf_load_cast_to_bf16(converted):
    kind, src, out = converted
    ref = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32).state_dict()
    ours = read_safetensors(out / "model.safetensors").tensors
    if kind == "tied":
        assert "lm_head.weight" not in ours
        ref.pop("lm_head.weight", None)
    assert set(ours) == set(ref)
    for name, t in ours.items():
        want = ref[name].to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        assert t.dtype == "bf16" and np.array_equal(t.data, want), name


def test_config_and_loader(converted):
    kind, _, out = converted
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen2ForCausalLM"] and cfg["model_type"] == "qwen2"
    assert cfg["torch_dtype"] == "bfloat16" and cfg["tie_word_embeddings"] is (kind == "tied")
    assert (cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]) == (64, 4, 2)
    assert cfg["rope_theta"] == 1e6 and cfg["max_position_embeddings"] == 256
    m = load_model(out)
    assert m.dtype == "bf16" and m.config.num_hidden_layers == 2


def test_transformers_loads_converted_directory(converted):
    kind, src, out = converted
    ours = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    ids = torch.tensor([[1, 5, 260, 262, 100, 7]])
    with torch.no_grad():
        ours_logits = ours(ids).logits
        ref_logits = ref.to(torch.bfloat16).to(torch.float32)(ids).logits
    torch.testing.assert_close(ours_logits, ref_logits)


def test_tokenizer_matches_transformers_gguf_tokenizer(converted):
    _, src, out = converted
    ref = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    ours = Tokenizer.from_dir(out)
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == ref.encode(text, add_special_tokens=False), text
        assert ours.decode(ids) == ref.decode(ids) == text
    assert ours.special.eos_token_id == ours.token_to_id("<|im_end|>") == ours.special.im_end_id
    assert ours.special.bos_token_id == ours.special.pad_token_id == ours.token_to_id("<|endoftext|>")
    assert ours.special.stop_token_ids == (ours.special.eos_token_id, ours.special.bos_token_id)


def test_chat_template_carried_over(converted):
    _, _, out = converted
    text = Tokenizer.from_dir(out).apply_chat_template([{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_name_mapping():
    assert hf_tensor_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_tensor_name("output.weight") == "lm_head.weight"
    assert hf_tensor_name("output_norm.weight") == "model.norm.weight"
    assert hf_tensor_name("blk.11.attn_output.weight") == "model.layers.11.self_attn.o_proj.weight"
    assert hf_tensor_name("blk.0.attn_k.bias") == "model.layers.0.self_attn.k_proj.bias"
    assert hf_tensor_name("blk.3.ffn_norm.weight") == "model.layers.3.post_attention_layernorm.weight"
    with pytest.raises(ValueError, match="rope_freqs"):
        hf_tensor_name("rope_freqs.weight")


def test_refuses_non_empty_output_and_bad_input(tiny_gguf, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        convert_gguf(tiny_gguf, tmp_path / "out")
    with pytest.raises(ValueError, match="does not exist"):
        convert_gguf(tmp_path / "missing.gguf", tmp_path / "out2")
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf at all" * 10)
    with pytest.raises(ValueError, match="junk.gguf"):
        convert_gguf(tmp_path / "junk.gguf", tmp_path / "out3")
    assert not (tmp_path / "out3").exists()


def test_interrupted_conversion_leaves_nothing(tiny_gguf, tmp_path, monkeypatch):
    from llaisys.models import gguf_convert

    def boom(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_convert.bf16, "f32_to_bf16", boom)
    with pytest.raises(KeyboardInterrupt):
        convert_gguf(tiny_gguf, tmp_path / "hf")
    assert list(tmp_path.iterdir()) == []


def test_progress_reports_bytes(tiny_gguf, tmp_path):
    seen = []
    convert_gguf(tiny_gguf, tmp_path / "hf", progress=lambda done, total: seen.append((done, total)))
    total = seen[-1][1]
    assert seen[-1][0] == total and all(a[0] < b[0] for a, b in zip(seen, seen[1:]))
    assert total == sum(t.nbytes for t in read_safetensors(tmp_path / "hf" / "model.safetensors").tensors.values())


@pytest.mark.parametrize("fraction", [0.0, 0.001, 0.01, 0.1, 0.5, 0.999])
def test_truncated_gguf_is_value_error(tiny_gguf, tmp_path, fraction):
    data = tiny_gguf.read_bytes()
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(data[:int(len(data) * fraction)])
    with pytest.raises(ValueError):
        convert_gguf(bad, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
