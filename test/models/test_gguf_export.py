"""The GGUF exporter: a converted tiny model written back to GGUF keeps every value and the
tokenizer, as read by the gguf package, by transformers' GGUF loader and by our converter."""

import gguf
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from llaisys.cli import main as cli_main
from llaisys.models.gguf_convert import convert_gguf
from llaisys.models.gguf_export import export_gguf, gguf_tensor_name
from llaisys.models.gguf_convert import hf_tensor_name
from llaisys.models.safetensors_io import read_safetensors
from llaisys.models.tokenizer import Tokenizer

from test_gguf_convert_tiny import TEXTS


@pytest.fixture(scope="module", params=["untied", "tied"])
def exported(request, tiny_gguf, tiny_gguf_tied, tmp_path_factory):
    src = tiny_gguf if request.param == "untied" else tiny_gguf_tied
    tmp = tmp_path_factory.mktemp("export")
    hf = convert_gguf(src, tmp / "hf")
    return hf, export_gguf(hf, tmp / "model-bf16.gguf")


def test_tensors_keep_their_values(exported):
    hf, out = exported
    ours = read_safetensors(hf / "model.safetensors").tensors
    reader = gguf.GGUFReader(out)
    assert {hf_tensor_name(t.name) for t in reader.tensors} == set(ours)
    for t in reader.tensors:
        src = ours[hf_tensor_name(t.name)]
        if len(src.shape) == 2:
            assert t.tensor_type == gguf.GGMLQuantizationType.BF16
            assert np.array_equal(np.asarray(t.data).view(np.uint16).reshape(src.shape), src.data), t.name
        else:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32
            widened = (src.data.astype(np.uint32) << 16).view(np.float32)
            assert np.array_equal(np.asarray(t.data), widened), t.name


def test_converting_back_gives_the_same_directory(exported, tmp_path):
    hf, out = exported
    again = convert_gguf(out, tmp_path / "again")
    a = read_safetensors(hf / "model.safetensors").tensors
    b = read_safetensors(again / "model.safetensors").tensors
    assert set(a) == set(b) and all(np.array_equal(a[k].data, b[k].data) for k in a)
    t1, t2 = Tokenizer.from_dir(hf), Tokenizer.from_dir(again)
    for text in TEXTS:
        assert t1.encode(text) == t2.encode(text), text
    assert t1.special == t2.special and t1.chat_template == t2.chat_template


def test_transformers_reads_the_export_as_the_same_model(exported):
    hf, out = exported
    ref = AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32)
    got = AutoModelForCausalLM.from_pretrained(out.parent, gguf_file=out.name, dtype=torch.float32)
    ids = torch.tensor([[1, 5, 260, 262, 100, 7]])
    with torch.no_grad():
        torch.testing.assert_close(got(ids).logits, ref(ids).logits, rtol=0, atol=0)


def test_names_map_both_ways():
    for name in ["token_embd.weight", "output.weight", "output_norm.weight", "blk.7.attn_q.bias",
                 "blk.0.ffn_down.weight", "blk.12.attn_norm.weight", "blk.3.attn_output.weight"]:
        assert gguf_tensor_name(hf_tensor_name(name)) == name
    with pytest.raises(ValueError, match="no Qwen2 GGUF equivalent"):
        gguf_tensor_name("model.layers.0.mlp.experts.weight")


def test_cli_export(exported, tmp_path, capsys):
    hf, _ = exported
    assert cli_main(["export-gguf", str(hf), str(tmp_path / "x.gguf")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "x.gguf")
    assert gguf.GGUFReader(tmp_path / "x.gguf").fields["general.architecture"].contents() == "qwen2"
    assert cli_main(["export-gguf", str(tmp_path / "missing"), str(tmp_path / "y.gguf")]) == 2
    assert "error" in capsys.readouterr().err and not (tmp_path / "y.gguf").exists()
