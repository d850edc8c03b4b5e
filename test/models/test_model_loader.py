"""The checkpoint loader against tiny random Qwen2 models saved by transformers."""

import json
import shutil

import numpy as np
import pytest
import torch
from transformers import Qwen2Config as HFQwen2Config
from transformers import Qwen2ForCausalLM

from llaisys.models.loader import load_model
from llaisys.models.safetensors_io import read_safetensors, write_safetensors

TORCH = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def _save_tiny(path, tied: bool, dtype=torch.float32, shard: str = None):
    torch.manual_seed(0)
    cfg = HFQwen2Config(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, vocab_size=128, max_position_embeddings=256,
                        tie_word_embeddings=tied)
    model = Qwen2ForCausalLM(cfg).to(dtype)
    with torch.no_grad():  # norms start at 1.0 and biases at 0: make every tensor distinctive
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    kwargs = {"max_shard_size": "20KB"} if shard else {}
    model.save_pretrained(path, safe_serialization=True, **kwargs)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _raw(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny_hf")
    dirs = {}
    for key, tied, dtype, shard in [("untied", False, torch.float32, None), ("tied", True, torch.bfloat16, None),
                                    ("sharded", False, torch.bfloat16, "20KB")]:
        dirs[key] = (root / key, _save_tiny(root / key, tied, dtype, shard))
    return dirs


@pytest.mark.parametrize("key", ["untied", "tied", "sharded"])
def test_tensors_equal_state_dict(tiny_dirs, key):
    path, state = tiny_dirs[key]
    if key == "sharded":
        assert (path / "model.safetensors.index.json").is_file()
        assert len(list(path.glob("model-*.safetensors"))) > 1
    m = load_model(path)
    assert m.path == path and m.config.num_hidden_layers == 2
    assert m.dtype == {"untied": "f32", "tied": "bf16", "sharded": "bf16"}[key]
    tied = key == "tied"
    assert m.config.tie_word_embeddings is tied
    assert ("lm_head.weight" in m.tensors) is not tied
    expected = {k for k in state if not (tied and k == "lm_head.weight")}
    assert set(m.tensors) == expected
    for name in expected:
        t = m.tensors[name]
        assert t.shape == tuple(state[name].shape)
        assert np.array_equal(t.data, _raw(state[name])), name


@pytest.mark.parametrize("key", ["untied", "tied"])
@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
def test_dtype_override_matches_torch_casts(tiny_dirs, key, dtype):
    path, state = tiny_dirs[key]
    m = load_model(path, dtype=dtype)
    assert m.dtype == dtype
    for name, t in m.tensors.items():
        assert t.dtype == dtype
        want = _raw(state[name].to(TORCH[dtype]))
        assert t.data.dtype == want.dtype and np.array_equal(t.data, want), name


def _copy(tiny_dirs, key, tmp_path):
    dst = tmp_path / key
    shutil.copytree(tiny_dirs[key][0], dst)
    return dst


def _rewrite(path, edit):
    tensors = dict(read_safetensors(path / "model.safetensors").tensors)
    tensors = {n: type(t)(t.name, t.dtype, t.shape, np.array(t.data)) for n, t in tensors.items()}
    edit(tensors)
    write_safetensors(path / "model.safetensors", list(tensors.values()))


def test_missing_tensor(tiny_dirs, tmp_path):
    path = _copy(tiny_dirs, "untied", tmp_path)
    _rewrite(path, lambda ts: ts.pop("model.layers.1.mlp.up_proj.weight"))
    with pytest.raises(ValueError, match="missing tensors: model.layers.1.mlp.up_proj.weight"):
        load_model(path)


def test_missing_lm_head_when_untied(tiny_dirs, tmp_path):
    path = _copy(tiny_dirs, "untied", tmp_path)
    _rewrite(path, lambda ts: ts.pop("lm_head.weight"))
    with pytest.raises(ValueError, match="missing tensors: lm_head.weight"):
        load_model(path)


def test_wrong_shape(tiny_dirs, tmp_path):
    from llaisys.models.safetensors_io import RawTensor

    def edit(ts):
        ts["model.norm.weight"] = RawTensor("model.norm.weight", "f32", (63,), np.zeros(63, np.float32))

    path = _copy(tiny_dirs, "untied", tmp_path)
    _rewrite(path, edit)
    with pytest.raises(ValueError, match=r"model.norm.weight.*\(63,\).*\(64,\)"):
        load_model(path)


def test_unknown_extra_tensor(tiny_dirs, tmp_path):
    from llaisys.models.safetensors_io import RawTensor

    def edit(ts):
        ts["model.layers.0.self_attn.rotary_emb.inv_freq"] = RawTensor(
            "model.layers.0.self_attn.rotary_emb.inv_freq", "f32", (8,), np.zeros(8, np.float32))

    path = _copy(tiny_dirs, "untied", tmp_path)
    _rewrite(path, edit)
    with pytest.raises(ValueError, match="unexpected tensors.*inv_freq"):
        load_model(path)


def test_integer_dtype_rejected(tiny_dirs, tmp_path):
    from llaisys.models.safetensors_io import RawTensor

    def edit(ts):
        ts["model.norm.weight"] = RawTensor("model.norm.weight", "i32", (64,), np.zeros(64, np.int32))

    path = _copy(tiny_dirs, "untied", tmp_path)
    _rewrite(path, edit)
    with pytest.raises(ValueError, match="model.norm.weight.*dtype i32"):
        load_model(path)


def test_config_mismatch(tiny_dirs, tmp_path):
    path = _copy(tiny_dirs, "untied", tmp_path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["num_hidden_layers"] = 3
    cfg.pop("layer_types", None)  # transformers 5 writes one per layer (a mismatch there is the config's own error)
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="config.json: field 'num_hidden_layers' is 3 but the weights hold 2 layers"):
        load_model(path)
    weights = read_safetensors(tiny_dirs["untied"][0] / "model.safetensors").tensors
    del_name = "model.layers.1.mlp.down_proj.weight"
    write_safetensors(path / "model.safetensors", {n: t for n, t in weights.items() if n != del_name})
    cfg["num_hidden_layers"] = 2
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="missing tensors: model.layers.1.mlp.down_proj.weight"):
        load_model(path)


def test_pickle_only_directory(tiny_dirs, tmp_path):
    path = _copy(tiny_dirs, "untied", tmp_path)
    (path / "model.safetensors").unlink()
    torch.save(tiny_dirs["untied"][1], path / "pytorch_model.bin")
    with pytest.raises(ValueError, match="pytorch_model.bin.*requires safetensors"):
        load_model(path)


def test_missing_config(tiny_dirs, tmp_path):
    path = _copy(tiny_dirs, "untied", tmp_path)
    (path / "config.json").unlink()
    with pytest.raises(ValueError, match="config.json not found"):
        load_model(path)


def test_missing_directory_and_bad_dtype(tmp_path, tiny_dirs):
    with pytest.raises(ValueError, match="does not exist"):
        load_model(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="dtype"):
        load_model(tiny_dirs["untied"][0], dtype="int8")


def test_sharded_index_errors(tiny_dirs, tmp_path):
    path = _copy(tiny_dirs, "sharded", tmp_path)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[0]
    (path / shard).unlink()
    with pytest.raises(ValueError, match="does not exist"):
        load_model(path)
    shutil.copy(tiny_dirs["sharded"][0] / shard, path / shard)
    index["weight_map"]["model.norm.weight"] = "../evil.safetensors"
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError, match="invalid shard file name"):
        load_model(path)
