"""Mixture-of-experts GGUF files (llama.cpp's qwen3moe and qwen2moe layout: experts stacked in
blk.N.ffn_{gate,up,down}_exps [E, rows, cols], the router ffn_gate_inp, Qwen2-MoE's shared
expert ffn_*_shexp and its gate ffn_gate_inp_shexp [H]) written from the tiny transformers
checkpoints of test_moe.py: run directly (LLM("x.gguf")) they give transformers' greedy tokens
(f32 file) and the tokens of the same checkpoint quantized at load (Q8_0 file vs
quantize="q8_0": the same blocks); `convert-gguf` turns them back into the checkpoint's tensors."""

import gguf
import numpy as np
import pytest
import torch

from llaisys import LLM, SamplingParams
from llaisys.models.files import ModelFileError
from llaisys.models.gguf_convert import convert_gguf
from llaisys.models.gguf_model import load_gguf
from llaisys.models.gguf_tokenizer import bytes_to_unicode
from llaisys.models.loader import load_model

from .test_archs import N_GEN, PROMPTS, hf_greedy
from .test_moe import VOCAB, make_tiny_moe

GGUF_ARCH = {"qwen3_moe": "qwen3moe", "qwen2_moe": "qwen2moe"}
LAYER_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
               "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down", "mlp.gate": "ffn_gate_inp",
               "mlp.shared_expert.gate_proj": "ffn_gate_shexp", "mlp.shared_expert.up_proj": "ffn_up_shexp",
               "mlp.shared_expert.down_proj": "ffn_down_shexp", "mlp.shared_expert_gate": "ffn_gate_inp_shexp"}


def write_byte_vocab(w: gguf.GGUFWriter, size: int) -> None:
    """A byte-level BPE vocabulary of `size` tokens: the 256 bytes, one merge ("ab"), padding."""
    tokens = sorted(bytes_to_unicode().values(), key=ord) + ["ab"]
    tokens += [f"[PAD{i}]" for i in range(len(tokens), size)]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([1] * 257 + [5] * (size - 257))
    w.add_token_merges(["a b"])


def add_moe_header(w: gguf.GGUFWriter, cfg, top_k: int) -> None:
    """The metadata every MoE family's GGUF carries (sizes, rope base, norm epsilon, experts)."""
    w.add_block_count(cfg.n_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.n_heads)
    w.add_head_count_kv(cfg.n_kv_heads)
    w.add_rope_freq_base(float(cfg.rope_theta))
    w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    w.add_expert_count(cfg.n_experts)
    w.add_expert_used_count(top_k)


def write_moe_gguf(path, ckpt_dir, family: str, quant: bool):
    """The checkpoint as llama.cpp's convert_hf_to_gguf lays a Qwen-MoE out (experts stacked,
    norms and routers f32; the other matrices f32 or Q8_0)."""
    loaded = load_model(ckpt_dir)
    cfg, t = loaded.config, {n: np.asarray(x.data, np.float32) for n, x in loaded.tensors.items()}
    w = gguf.GGUFWriter(str(path), GGUF_ARCH[family])
    add_moe_header(w, cfg, cfg.n_experts_per_tok)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
    if cfg.shared_expert_intermediate_size:
        w.add_expert_shared_feed_forward_length(cfg.shared_expert_intermediate_size)
    write_byte_vocab(w, VOCAB)
    w.add_add_bos_token(False)

    def add(name, data):
        if quant and data.ndim >= 2 and "ffn_gate_inp" not in name and data.shape[-1] % 32 == 0:
            w.add_tensor(name, gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, np.ascontiguousarray(data.reshape(-1) if "shexp" in name and data.shape[0] == 1
                                                    else data))

    add("token_embd.weight", t.pop("model.embed_tokens.weight"))
    add("output_norm.weight", t.pop("model.norm.weight"))
    add("output.weight", t.pop("lm_head.weight"))
    for n in range(cfg.n_layers):
        pre = f"model.layers.{n}."
        for proj, short in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down")):
            names = [f"{pre}mlp.experts.{e}.{proj}.weight" for e in range(cfg.n_experts)]
            if names[0] in t:
                add(f"blk.{n}.ffn_{short}_exps.weight", np.stack([t.pop(x) for x in names]))
        for hf, g in LAYER_NAMES.items():
            for kind in ("weight", "bias"):
                if f"{pre}{hf}.{kind}" in t:
                    add(f"blk.{n}.{g}.{kind}", t.pop(f"{pre}{hf}.{kind}"))
    assert not t, sorted(t)  # every tensor written
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module", params=list(GGUF_ARCH))
def ckpt(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"gguf_{request.param}")
    hf = make_tiny_moe(path / "hf", request.param, moe_intermediate_size=64,
                       **({"shared_expert_intermediate_size": 96} if request.param == "qwen2_moe" else {}))
    for quant in (False, True):
        write_moe_gguf(path / f"{'q8_0' if quant else 'f32'}.gguf", path / "hf", request.param, quant)
    return request.param, path, hf


def greedy(model, **kw) -> list:
    sp = SamplingParams(temperature=0.0, max_tokens=N_GEN, ignore_eos=True)
    with LLM(str(model), kv_dtype="f32", block_size=4, kv_cache_memory=4 << 20, max_num_seqs=4, **kw) as engine:
        return [list(o.outputs[0].token_ids) for o in engine.generate(PROMPTS, sp)]


def test_the_gguf_reads_as_the_checkpoint(ckpt):
    family, path, _ = ckpt
    hf = load_model(path / "hf")
    g = load_gguf(path / "f32.gguf").loaded
    assert g.config.n_experts == hf.config.n_experts and g.config.layer_sparse == hf.config.layer_sparse
    assert g.config.norm_topk_prob == hf.config.norm_topk_prob
    assert g.config.shared_expert_intermediate_size == hf.config.shared_expert_intermediate_size
    assert set(g.tensors) == set(hf.tensors)
    for name, t in hf.tensors.items():
        np.testing.assert_array_equal(np.asarray(g.tensors[name].data), np.asarray(t.data), err_msg=name)
    q = load_gguf(path / "q8_0.gguf").loaded
    assert q.tensors["model.layers.0.mlp.experts.3.down_proj.weight"].dtype == "q8_0"


def test_gguf_greedy_tokens(ckpt):
    family, path, hf = ckpt
    want = [hf_greedy(hf, p) for p in PROMPTS]
    assert greedy(path / "f32.gguf") == want
    assert greedy(path / "q8_0.gguf") == greedy(path / "hf", quantize="q8_0")


def test_convert_gguf_gives_the_checkpoint(ckpt, tmp_path):
    family, path, _ = ckpt
    out = convert_gguf(path / "f32.gguf", tmp_path / "converted")
    got, want = load_model(out, dtype="f32"), load_model(path / "hf", dtype="f32")
    assert got.config.n_experts == want.config.n_experts and set(got.tensors) == set(want.tensors)
    for name, t in want.tensors.items():  # through bf16: the converter writes bf16
        ref = torch.from_numpy(np.array(t.data)).bfloat16().float().numpy()
        np.testing.assert_array_equal(np.asarray(got.tensors[name].data), ref, err_msg=name)


def test_a_stack_of_the_wrong_count_is_named(ckpt, tmp_path):
    family, path, _ = ckpt
    reader = gguf.GGUFReader(path / "f32.gguf")
    w = gguf.GGUFWriter(str(tmp_path / "bad.gguf"), GGUF_ARCH[family])
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        value = field.contents()
        if field.name.endswith(".expert_count"):
            value = value + 1  # the metadata claims one expert more than the stacks hold
        vtype = field.types[0]
        w.add_key_value(field.name, value, vtype, sub_type=field.types[-1] if vtype == gguf.GGUFValueType.ARRAY
                        else None)
    for t in reader.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_shape=tuple(reversed(t.shape.tolist())), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ModelFileError, match="missing tensors: .*experts") as e:
        load_gguf(tmp_path / "bad.gguf")
    assert "GGUF" in str(e.value)
