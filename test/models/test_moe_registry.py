"""The mixture-of-experts families in the registry (Qwen3-MoE, Qwen2-MoE, Mixtral): their config
parsers against transformers' config classes, their weight maps, and every contradiction a
config or a checkpoint can hold, each a ValueError (ModelFileError) naming the field; then the
core's own checks of the MoE params and expert weights (llaisysModelCreate / SetWeight)."""

import ctypes
import json

import numpy as np
import pytest

from llaisys.libllaisys import LIB, DataType, LlaisysError, check
from llaisys.libllaisys.model import WeightKind, llaisysModel_t
from llaisys.models.arch import hf_config_dict, parse_config, weight_slots
from llaisys.models.files import ModelFileError
from llaisys.models.model import c_params

COMMON = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4, "num_attention_heads": 4,
          "num_key_value_heads": 2, "vocab_size": 384, "max_position_embeddings": 512, "rms_norm_eps": 1e-6}
BASES = {
    "qwen3_moe": {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", **COMMON, "head_dim": 16,
                  "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": True},
    "qwen2_moe": {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", **COMMON, "num_experts": 6,
                  "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
                  "mlp_only_layers": [1], "decoder_sparse_step": 1},
    "mixtral": {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", **COMMON, "num_local_experts": 4,
                "num_experts_per_tok": 2},
}


def parse(family, **change):
    d = {**BASES[family], **change}
    return parse_config({k: v for k, v in d.items() if v is not ...}, "config.json")


@pytest.mark.parametrize("family", list(BASES))
def test_round_trip_and_transformers_reads_our_dict(family):
    transformers = pytest.importorskip("transformers")
    p = parse(family)
    assert p.arch == family and parse_config(hf_config_dict(p)) == p
    d = hf_config_dict(p)
    cfg = transformers.AutoConfig.for_model(d.pop("model_type"), **d)
    n_experts = getattr(cfg, "num_experts", None) or cfg.num_local_experts
    assert (n_experts, cfg.num_experts_per_tok) == (p.n_experts, p.n_experts_per_tok)
    if family != "mixtral":
        assert cfg.moe_intermediate_size == p.moe_intermediate_size and cfg.norm_topk_prob == p.norm_topk_prob
        sparse = tuple(i not in cfg.mlp_only_layers and (i + 1) % cfg.decoder_sparse_step == 0 for i in range(4))
        assert sparse == p.layer_sparse


def test_family_fields():
    q3, q2, mx = parse("qwen3_moe"), parse("qwen2_moe"), parse("mixtral")
    assert (q3.n_experts, q3.n_experts_per_tok, q3.moe_intermediate_size, q3.norm_topk_prob) == (8, 2, 32, True)
    assert q3.layer_sparse == (True,) * 4 and q3.shared_expert_intermediate_size == 0 and q3.qk_norm
    assert q2.layer_sparse == (True, False, True, True) and q2.shared_expert_intermediate_size == 48
    assert q2.qkv_bias and not q2.norm_topk_prob and not parse("qwen2_moe", qkv_bias=False).qkv_bias
    assert (mx.n_experts, mx.moe_intermediate_size, mx.norm_topk_prob) == (4, 96, True)  # experts are I wide
    assert parse("qwen2_moe", mlp_only_layers=[], decoder_sparse_step=2).layer_sparse == (False, True, False, True)
    # transformers 5 writes Qwen3-MoE's expert count as num_local_experts
    d = {**BASES["qwen3_moe"], "num_local_experts": 8}
    del d["num_experts"]
    assert parse_config(d).n_experts == 8


@pytest.mark.parametrize("family,change,field,message", [
    ("qwen3_moe", {"num_experts_per_tok": 9}, "num_experts_per_tok", "num_experts_per_tok 9 is larger than "
                                                                      "num_experts 8"),
    ("mixtral", {"num_experts_per_tok": 5}, "num_experts_per_tok", "larger than num_local_experts 4"),
    ("qwen3_moe", {"num_experts": 0}, "num_experts", "must be positive"),
    ("qwen3_moe", {"num_experts_per_tok": 0}, "num_experts_per_tok", "must be positive"),
    ("qwen3_moe", {"moe_intermediate_size": -1}, "moe_intermediate_size", "must be positive"),
    ("qwen3_moe", {"norm_topk_prob": "yes"}, "norm_topk_prob", "must be bool"),
    ("qwen2_moe", {"shared_expert_intermediate_size": -4}, "shared_expert_intermediate_size", "got -4"),
    ("qwen2_moe", {"decoder_sparse_step": 0}, "decoder_sparse_step", "must be positive"),
    ("qwen2_moe", {"mlp_only_layers": [4]}, "mlp_only_layers", r"must list layer indices in \[0, 4\)"),
    ("qwen2_moe", {"mlp_only_layers": "1"}, "mlp_only_layers", "must list layer indices"),
    ("qwen3_moe", {"attention_bias": True}, "attention_bias", "not supported for Qwen3-MoE"),
])
def test_bad_configs_name_the_field(family, change, field, message):
    with pytest.raises(ModelFileError, match=message) as e:
        parse(family, **change)
    assert e.value.field == field and str(e.value).startswith("config.json: ")


@pytest.mark.parametrize("family", list(BASES))
def test_weight_maps(family):
    p = parse(family)
    slots = weight_slots(p)
    pre, ex = ("block_sparse_moe.", "block_sparse_moe.experts.3.w1.weight") if family == "mixtral" else \
        ("mlp.", "mlp.experts.3.gate_proj.weight")
    router = slots[f"model.layers.0.{pre}gate.weight"]
    assert (router.kind, router.layer, router.shape) == ("ROUTER", 0, (p.n_experts, 64))
    gate = slots[f"model.layers.2.{ex}"]
    assert (gate.kind, gate.layer, gate.shape, gate.expert) == ("EXPERT_GATE", 2, (p.moe_intermediate_size, 64), 3)
    assert "model.layers.0.mlp.gate_proj.weight" not in slots
    assert ("model.layers.1.mlp.gate_proj.weight" in slots) == (family == "qwen2_moe")  # the dense layer
    assert ("model.layers.0.mlp.shared_expert_gate.weight" in slots) == (family == "qwen2_moe")
    n_sparse = sum(p.layer_sparse)
    assert sum(s.kind.startswith("EXPERT_") for s in slots.values()) == 3 * p.n_experts * n_sparse


def write_checkpoint(path, p, drop=(), extra=None):
    from llaisys.models.safetensors_io import RawTensor, write_safetensors

    tensors = {name: RawTensor(name, "f32", slot.shape, np.zeros(slot.shape, np.float32))
               for name, slot in weight_slots(p).items() if name not in drop}
    tensors.update(extra or {})
    (path / "config.json").write_text(json.dumps(hf_config_dict(p)))
    write_safetensors(path / "model.safetensors", tensors)


def test_the_loader_names_missing_and_extra_experts(tmp_path):
    from llaisys.models.loader import load_model
    from llaisys.models.safetensors_io import RawTensor

    p = parse("qwen3_moe")
    write_checkpoint(tmp_path, p)
    assert load_model(tmp_path).config == p
    write_checkpoint(tmp_path, p, drop=("model.layers.2.mlp.experts.5.up_proj.weight",))
    with pytest.raises(ModelFileError, match="missing tensors: model.layers.2.mlp.experts.5.up_proj.weight"):
        load_model(tmp_path)
    name = "model.layers.0.mlp.experts.8.gate_proj.weight"  # a ninth expert
    write_checkpoint(tmp_path, p, extra={name: RawTensor(name, "f32", (32, 64), np.zeros((32, 64), np.float32))})
    with pytest.raises(ModelFileError, match="'num_experts' is 8 but the weights hold experts numbered up to 8"):
        load_model(tmp_path)
    small = parse("qwen3_moe", moe_intermediate_size=16)  # the config says 32
    write_checkpoint(tmp_path, small)
    d = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**d, "moe_intermediate_size": 32}))
    with pytest.raises(ModelFileError, match="'moe_intermediate_size' is 32 but the weights hold experts with a "
                                             "gate projection of 16 rows"):
        load_model(tmp_path)
    dense = [n for n in weight_slots(p) if ".experts." not in n and ".mlp.gate." not in n]
    write_checkpoint(tmp_path, p, drop=[n for n in weight_slots(p) if n not in dense])
    with pytest.raises(ModelFileError, match="no expert tensors"):
        load_model(tmp_path)


def create(p, **change):
    """llaisysModelCreate over `p`'s params with fields changed; the handle (caller destroys)."""
    c, keep = c_params(p, DataType.F32)
    for k, v in change.items():
        setattr(c, k, v)
    handle = llaisysModel_t()
    check(LIB.llaisysModelCreate(ctypes.byref(c), 0, 0, ctypes.byref(handle)))
    del keep
    return handle.value


@pytest.mark.parametrize("change,message", [
    ({"n_experts_per_tok": 9}, r"n_experts_per_tok \(9\) must be in \[1, n_experts = 8\]"),
    ({"n_experts_per_tok": 0}, r"n_experts_per_tok \(0\) must be in"),
    ({"moe_intermediate_size": 0}, "moe_intermediate_size must be > 0"),
    ({"norm_topk_prob": 2}, "norm_topk_prob must be 0 or 1"),
    ({"n_experts": 0}, "n_experts is 0 .a dense model. but n_experts_per_tok"),
])
def test_the_core_refuses_contradictory_moe_params(change, message):
    with pytest.raises(LlaisysError, match=message):
        create(parse("qwen3_moe"), **change)


def test_the_core_checks_expert_weights():
    p = parse("qwen3_moe", moe_intermediate_size=48)  # rows of 48: not whole q8_0 blocks of 32
    handle = create(p)
    try:
        def set_weight(kind, layer, shape, dtype=DataType.F32, nbytes=None):
            data = np.zeros(nbytes or int(np.prod(shape)) * 4, np.uint8)
            c_shape = (ctypes.c_size_t * len(shape))(*shape)
            check(LIB.llaisysModelSetWeight(handle, None, int(WeightKind[kind]), layer,
                                            data.ctypes.data_as(ctypes.c_void_p), int(dtype), c_shape, len(shape)))

        set_weight("EXPERT_GATE", 0, (8, 48, 64))
        with pytest.raises(LlaisysError, match="wrong shape"):
            set_weight("EXPERT_UP", 0, (48, 64))  # one expert: the slot is the 3-D stack
        with pytest.raises(LlaisysError, match="must be 3-D with a row length divisible by 32"):
            set_weight("EXPERT_DOWN", 0, (8, 64, 48), DataType.Q8_0, nbytes=8 * 64 * 51)
        with pytest.raises(LlaisysError, match="no weight GATE in this layer .a sparse layer"):
            set_weight("GATE", 0, (96, 64))
        with pytest.raises(LlaisysError, match="no weight SHARED_GATE"):
            set_weight("SHARED_GATE", 0, (48, 64))
    finally:
        check(LIB.llaisysModelDestroy(handle))


def test_moe_on_nvidia_is_created_as_any_model_there():
    """MoE models run on NVIDIA devices as dense ones do: where the build or the machine has no
    GPU, creating one there fails with the very error a dense model gets (no refusal of its
    own), and no model is made; with a GPU both are created."""
    def create(p):
        c, keep = c_params(p, DataType.F32)
        handle = llaisysModel_t()
        try:
            check(LIB.llaisysModelCreate(ctypes.byref(c), 1, 0, ctypes.byref(handle)))
        except LlaisysError as e:
            assert handle.value is None
            return str(e)
        finally:
            del keep
        check(LIB.llaisysModelDestroy(handle))
        return None

    dense = create(parse_config({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **COMMON,
                                 "head_dim": 16}, "config.json"))
    for family in BASES:
        assert create(parse(family)) == dense, family


@pytest.mark.parametrize("family,change", [
    ("qwen2_moe", {"use_sliding_window": True, "sliding_window": 6, "max_window_layers": 3}),
    ("qwen2_moe", {"use_sliding_window": False, "sliding_window": 6}),
    ("qwen3_moe", {"use_sliding_window": True, "sliding_window": 5}),
    ("mixtral", {"sliding_window": 7}),
    ("mixtral", {}),
])
def test_windows_follow_transformers(family, change):
    """Which layers slide, as each family's transformers config derives it (Qwen2-MoE: the
    layers i with i + 1 odd below max_window_layers; Qwen3-MoE and Mixtral: every layer)."""
    transformers = pytest.importorskip("transformers")
    p = parse(family, **change)
    d = {**BASES[family], **change}
    cfg = transformers.AutoConfig.for_model(d.pop("model_type"), **{k: v for k, v in d.items() if k != "architectures"})
    size = cfg.sliding_window or 0
    if hasattr(cfg, "layer_types") and cfg.layer_types is not None:
        want = tuple(size if t == "sliding_attention" else 0 for t in cfg.layer_types)
    else:
        want = (size,) * cfg.num_hidden_layers
    assert p.layer_window == want
