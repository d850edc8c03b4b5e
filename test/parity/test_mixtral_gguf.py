"""Mixtral GGUF files as llama.cpp writes them: `general.architecture` "llama" with
`llama.expert_count` / `llama.expert_used_count`, q/k rows permuted for llama.cpp's RoPE
(convert_hf_to_gguf's `permute`), the router `ffn_gate_inp`, and the experts either stacked
(`blk.N.ffn_{gate,up,down}_exps`) or one tensor per expert as older files hold them
(`blk.N.ffn_gate.E.weight`). Written with gguf-py from test_moe.py's tiny transformers Mixtral:
both forms read back as the checkpoint's tensors, run directly they give transformers' greedy
tokens (the Q8_0 file: the tokens of the checkpoint quantized at load), `convert-gguf` gives
the checkpoint back, and contradictions are ValueErrors naming the GGUF key or tensor."""

import gguf
import numpy as np
import pytest
import torch

from llaisys.models.files import ModelFileError
from llaisys.models.gguf_convert import convert_gguf
from llaisys.models.gguf_model import load_gguf
from llaisys.models.loader import load_model

from .test_archs import PROMPTS, hf_greedy
from .test_moe import VOCAB, make_tiny_moe
from .test_moe_gguf import add_moe_header, greedy, write_byte_vocab

FORMS = ("merged", "per_expert")
LAYER_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "block_sparse_moe.gate": "ffn_gate_inp"}
EXPERTS = {"w1": "ffn_gate", "w3": "ffn_up", "w2": "ffn_down"}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute: each head's two rotary halves interleaved by row."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def add_llama_layer(add, t: dict, cfg, n: int, names: dict) -> None:
    """Layer n of checkpoint tensors `t` as llama.cpp writes a `llama` file's: q/k rows permuted
    for its RoPE, then each HF name of `names` under its GGUF name, through add(name, data); the
    tensors written are popped from t."""
    pre = f"model.layers.{n}."
    t[f"{pre}self_attn.q_proj.weight"] = llama_cpp_permute(t[f"{pre}self_attn.q_proj.weight"], cfg.n_heads)
    t[f"{pre}self_attn.k_proj.weight"] = llama_cpp_permute(t[f"{pre}self_attn.k_proj.weight"], cfg.n_kv_heads)
    for hf, g in names.items():
        add(f"blk.{n}.{g}.weight", t.pop(f"{pre}{hf}.weight"))


def write_mixtral_gguf(path, ckpt_dir, form: str, quant: bool = False, top_k=None, drop: str = ""):
    """The checkpoint as llama.cpp's converter lays Mixtral out (`form`: stacked or per-expert
    experts; quant: matrices Q8_0, router and norms f32); top_k overrides expert_used_count and
    `drop` leaves one GGUF tensor out (the bad files)."""
    loaded = load_model(ckpt_dir)
    cfg, t = loaded.config, {n: np.asarray(x.data, np.float32) for n, x in loaded.tensors.items()}
    w = gguf.GGUFWriter(str(path), "llama")
    add_moe_header(w, cfg, cfg.n_experts_per_tok if top_k is None else top_k)
    w.add_rope_dimension_count(cfg.head_dim)
    write_byte_vocab(w, VOCAB)
    w.add_add_bos_token(False)

    def add(name, data):
        if name == drop:
            return
        if quant and data.ndim >= 2 and "ffn_gate_inp" not in name:
            w.add_tensor(name, gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, np.ascontiguousarray(data))

    add("token_embd.weight", t.pop("model.embed_tokens.weight"))
    add("output_norm.weight", t.pop("model.norm.weight"))
    add("output.weight", t.pop("lm_head.weight"))
    for n in range(cfg.n_layers):
        pre = f"model.layers.{n}."
        add_llama_layer(add, t, cfg, n, LAYER_NAMES)
        for proj, short in EXPERTS.items():
            mats = [t.pop(f"{pre}block_sparse_moe.experts.{e}.{proj}.weight") for e in range(cfg.n_experts)]
            if form == "merged":
                add(f"blk.{n}.{short}_exps.weight", np.stack(mats))
            else:
                for e, m in enumerate(mats):
                    add(f"blk.{n}.{short}.{e}.weight", m)
    assert not t, sorted(t)  # every tensor written
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf_mixtral")
    hf = make_tiny_moe(path / "hf", "mixtral", intermediate_size=64)  # Q8_0 rows: a multiple of 32
    for form in FORMS:
        write_mixtral_gguf(path / f"{form}.gguf", path / "hf", form)
    write_mixtral_gguf(path / "q8_0.gguf", path / "hf", "per_expert", quant=True)
    return path, hf


@pytest.mark.parametrize("form", FORMS)
def test_the_gguf_reads_as_the_checkpoint(ckpt, form):
    path, _ = ckpt
    want = load_model(path / "hf")
    got = load_gguf(path / f"{form}.gguf").loaded
    assert got.config.architecture == "MixtralForCausalLM"
    assert got.config.n_experts == want.config.n_experts == 4 and got.config.n_experts_per_tok == 2
    assert got.config.moe_intermediate_size == want.config.moe_intermediate_size == 64
    assert got.config.norm_topk_prob and got.config.head_dim == want.config.head_dim
    assert set(got.tensors) == set(want.tensors)
    for name, t in want.tensors.items():  # q/k back in HF's row order
        np.testing.assert_array_equal(np.asarray(got.tensors[name].data), np.asarray(t.data), err_msg=name)
    q = load_gguf(path / "q8_0.gguf").loaded
    assert q.tensors["model.layers.1.block_sparse_moe.experts.3.w2.weight"].dtype == "q8_0"
    assert q.tensors["model.layers.0.self_attn.k_proj.weight"].dtype == "q8_0"


def test_gguf_greedy_tokens(ckpt):
    path, hf = ckpt
    want = [hf_greedy(hf, p) for p in PROMPTS]
    for form in FORMS:
        assert greedy(path / f"{form}.gguf") == want, form
    assert greedy(path / "q8_0.gguf") == greedy(path / "hf", quantize="q8_0")


def test_convert_gguf_gives_the_checkpoint(ckpt, tmp_path):
    path, _ = ckpt
    out = convert_gguf(path / "per_expert.gguf", tmp_path / "converted")
    got, want = load_model(out, dtype="f32"), load_model(path / "hf", dtype="f32")
    assert got.config.architecture == "MixtralForCausalLM" and set(got.tensors) == set(want.tensors)
    for name, t in want.tensors.items():  # through bf16: the converter writes bf16
        ref = torch.from_numpy(np.array(t.data)).bfloat16().float().numpy()
        np.testing.assert_array_equal(np.asarray(got.tensors[name].data), ref, err_msg=name)
    out = convert_gguf(path / "q8_0.gguf", tmp_path / "converted_q8")  # permuted rows of blocks
    q = load_model(out, dtype="f32").tensors["model.layers.0.self_attn.q_proj.weight"].data
    ref = np.asarray(want.tensors["model.layers.0.self_attn.q_proj.weight"].data)
    assert np.abs(np.asarray(q) - ref).max() < 0.02 * np.abs(ref).max()  # Q8_0 then bf16 rounding


def test_more_experts_used_than_there_are_is_named(ckpt, tmp_path):
    path, _ = ckpt
    bad = write_mixtral_gguf(tmp_path / "bad.gguf", path / "hf", "merged", top_k=5)  # of 4 experts
    for read in (load_gguf, lambda p: convert_gguf(p, tmp_path / "out")):
        with pytest.raises(ValueError, match="llama.expert_used_count") as e:
            read(bad)
        assert isinstance(e.value, ModelFileError)


@pytest.mark.parametrize("form, drop", [("per_expert", "blk.1.ffn_up.2.weight"),
                                        ("merged", "blk.0.ffn_down_exps.weight")])
def test_a_missing_expert_tensor_is_named(ckpt, tmp_path, form, drop):
    path, _ = ckpt
    bad = write_mixtral_gguf(tmp_path / "bad.gguf", path / "hf", form, drop=drop)
    with pytest.raises(ModelFileError, match=f"missing tensors: .*experts.*GGUF: {drop}"):
        load_gguf(bad)
