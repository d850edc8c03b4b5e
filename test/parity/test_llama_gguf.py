"""Dense `llama` GGUF files (Llama 2/3.x, Mistral) as llama.cpp's converter writes them: q/k rows
permuted for llama.cpp's RoPE, `llama.*` hyperparameters, and RoPE scaling as metadata
(`llama.rope.scaling.type` / `factor`) or, for Llama 3.1's `llama3` scaling, as the
`rope_freqs.weight` tensor of per-frequency divisors (convert_hf_to_gguf's formula, computed here
from the checkpoint's own rope parameters). Written with gguf-py from tiny random transformers
checkpoints: run directly their logits and greedy tokens are transformers' (f32 file) or those of
the checkpoint quantized at load (Q8_0 file); `convert-gguf` gives the checkpoint back; what
llaisys cannot honour is a ValueError naming the GGUF key or tensor."""

import math

import gguf
import numpy as np
import pytest
import torch

from llaisys.models.files import ModelFileError
from llaisys.models.gguf_convert import convert_gguf
from llaisys.models.gguf_model import load_gguf
from llaisys.models.gguf_rope import llama3_params
from llaisys.models.loader import load_model
from llaisys.models.model import Model

from .conftest import ARCH_VOCAB, write_word_tokenizer
from .test_archs import PROMPTS, check_logits_every_position, hf_greedy
from .test_mixtral_gguf import add_llama_layer
from .test_moe_gguf import write_byte_vocab
from .test_moe_gguf import greedy
from .test_tiny_qwen2 import Reference

LAYER_NAMES = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
               "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
               "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
               "mlp.down_proj": "ffn_down"}
# llama3 scaling with a short original context, so most frequency bands are rescaled
LLAMA3 = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
LINEAR = {"rope_type": "linear", "rope_theta": 50000.0, "factor": 4.0}
VARIANTS = {  # name -> (HF model class, rope parameters, tied, sliding window)
    "llama3_tied": ("Llama", LLAMA3, True),
    "linear_untied": ("Llama", LINEAR, False),
    "mistral": ("Mistral", {"rope_type": "default", "rope_theta": 1e6}, False),  # no window: llama.cpp's has none
}


def make_tiny_llama(path, variant: str):
    """A random checkpoint (H 64, 4 heads of 16 over 2 KV heads, FFN 96: Q8_0 rows) saved by transformers."""
    import transformers

    family, rope, tied = VARIANTS[variant]
    torch.manual_seed(3)
    extra = {"sliding_window": None} if family == "Mistral" else {}
    cfg = getattr(transformers, f"{family}Config")(
        vocab_size=ARCH_VOCAB, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
        num_hidden_layers=2, max_position_embeddings=512, rms_norm_eps=1e-5, tie_word_embeddings=tied,
        rope_parameters=rope, bos_token_id=None, eos_token_id=None, pad_token_id=None, **extra)
    model = getattr(transformers, f"{family}ForCausalLM")(cfg).eval()
    with torch.no_grad():  # norms start at 1: make them matter
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(torch.randn_like(p) * 0.2)
    model.save_pretrained(path, safe_serialization=True)
    write_word_tokenizer(path)
    return getattr(transformers, f"{family}ForCausalLM").from_pretrained(path, dtype=torch.float32).eval()


def llama3_rope_freqs(head_dim: int, r: dict) -> np.ndarray:
    """convert_hf_to_gguf's rope_freqs for llama3 scaling (the band divisors)."""
    freqs = 1.0 / (r["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    old = r["original_max_position_embeddings"]
    low_wl, high_wl = old / r["low_freq_factor"], old / r["high_freq_factor"]
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < high_wl:
            out.append(1.0)
        elif wl > low_wl:
            out.append(r["factor"])
        else:
            s = (old / wl - r["low_freq_factor"]) / (r["high_freq_factor"] - r["low_freq_factor"])
            out.append(1 / ((1 - s) / r["factor"] + s))
    return np.array(out, np.float32)


def write_gpt2_vocab(w: gguf.GGUFWriter) -> None:
    """A byte-level BPE vocabulary of ARCH_VOCAB tokens (test_mixtral_gguf's writer)."""
    write_byte_vocab(w, ARCH_VOCAB)


def write_llama_gguf(path, ckpt_dir, rope: dict, quant: bool = False, meta=None, freqs="auto", vocab=write_gpt2_vocab):
    """The checkpoint as llama.cpp lays a dense `llama` file out; `meta` adds or overrides
    metadata (key -> value, None: leave the key out), `freqs` overrides rope_freqs.weight,
    `vocab(writer)` writes the tokenizer metadata."""
    loaded = load_model(ckpt_dir)
    cfg, t = loaded.config, {n: np.asarray(x.data, np.float32) for n, x in loaded.tensors.items()}
    w = gguf.GGUFWriter(str(path), "llama")
    kv = {"llama.block_count": cfg.n_layers, "llama.context_length": cfg.max_position_embeddings,
          "llama.embedding_length": cfg.hidden_size, "llama.feed_forward_length": cfg.intermediate_size,
          "llama.attention.head_count": cfg.n_heads, "llama.attention.head_count_kv": cfg.n_kv_heads,
          "llama.rope.freq_base": float(cfg.rope_theta), "llama.attention.layer_norm_rms_epsilon": cfg.rms_norm_eps,
          "llama.rope.dimension_count": cfg.head_dim}
    if rope["rope_type"] == "linear":
        kv.update({"llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": rope["factor"]})
    kv.update(meta or {})
    for key, value in kv.items():
        if value is None:
            continue
        kind = {int: gguf.GGUFValueType.UINT32, float: gguf.GGUFValueType.FLOAT32,
                str: gguf.GGUFValueType.STRING}[type(value)]
        w.add_key_value(key, value, kind)
    vocab(w)

    def add(name, data):
        if quant and data.ndim == 2:
            w.add_tensor(name, gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, np.ascontiguousarray(data))

    if isinstance(freqs, str):  # "auto"
        freqs = llama3_rope_freqs(cfg.head_dim, rope) if rope["rope_type"] == "llama3" else None
    if freqs is not None:
        w.add_tensor("rope_freqs.weight", np.asarray(freqs, np.float32))
    add("token_embd.weight", t.pop("model.embed_tokens.weight"))
    add("output_norm.weight", t.pop("model.norm.weight"))
    if "lm_head.weight" in t:
        add("output.weight", t.pop("lm_head.weight"))
    for n in range(cfg.n_layers):
        add_llama_layer(add, t, cfg, n, LAYER_NAMES)
    assert not t, sorted(t)  # every tensor written
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module", params=list(VARIANTS))
def ckpt(request, tmp_path_factory):
    variant = request.param
    path = tmp_path_factory.mktemp(f"gguf_{variant}")
    hf = make_tiny_llama(path / "hf", variant)
    rope = VARIANTS[variant][1]
    write_llama_gguf(path / "f32.gguf", path / "hf", rope)
    write_llama_gguf(path / "q8_0.gguf", path / "hf", rope, quant=True)
    return variant, path, hf


def test_the_gguf_reads_as_the_checkpoint(ckpt):
    variant, path, _ = ckpt
    want = load_model(path / "hf")
    got = load_gguf(path / "f32.gguf").loaded
    assert got.config.architecture == "LlamaForCausalLM"
    assert got.config.tie_word_embeddings == VARIANTS[variant][2] and got.config.rope_theta == want.config.rope_theta
    assert got.config.rope.scaling == want.config.rope.scaling
    if variant == "linear_untied":
        assert got.config.rope.factor == 4.0
    assert set(got.tensors) == set(want.tensors)
    for name, t in want.tensors.items():  # q/k back in HF's row order
        np.testing.assert_array_equal(np.asarray(got.tensors[name].data), np.asarray(t.data), err_msg=name)
    q = load_gguf(path / "q8_0.gguf").loaded
    assert q.tensors["model.layers.1.self_attn.k_proj.weight"].dtype == "q8_0"


def test_gguf_logits_every_position(ckpt):
    _, path, hf = ckpt
    with Model(load_gguf(path / "f32.gguf").loaded) as m:
        check_logits_every_position(m, Reference(hf, False), "block")


def test_gguf_greedy_tokens(ckpt):
    _, path, hf = ckpt
    assert greedy(path / "f32.gguf") == [hf_greedy(hf, p) for p in PROMPTS]
    assert greedy(path / "q8_0.gguf") == greedy(path / "hf", quantize="q8_0")


def test_convert_gguf_gives_the_checkpoint(ckpt, tmp_path):
    _, path, _ = ckpt
    out = convert_gguf(path / "f32.gguf", tmp_path / "converted")
    got, want = load_model(out, dtype="f32"), load_model(path / "hf", dtype="f32")
    assert got.config.architecture == "LlamaForCausalLM" and got.config.rope.scaling == want.config.rope.scaling
    assert set(got.tensors) == set(want.tensors)
    for name, t in want.tensors.items():  # through bf16: the converter writes bf16
        ref = torch.from_numpy(np.array(t.data)).bfloat16().float().numpy()
        np.testing.assert_array_equal(np.asarray(got.tensors[name].data), ref, err_msg=name)


@pytest.mark.parametrize("meta, freqs, key", [
    ({"llama.rope.scaling.type": "longrope", "llama.rope.scaling.factor": 2.0}, None, "llama.rope.scaling.type"),
    ({"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": None}, None, "llama.rope.scaling.factor"),
    ({"llama.rope.scaling.type": 3}, None, "llama.rope.scaling.type"),
    ({"llama.rope.dimension_count": 8}, None, "llama.rope.dimension_count"),
    ({"llama.rope.scaling.attn_factor": 0.5}, None, "llama.rope.scaling.attn_factor"),
    ({}, np.linspace(1, 3, 8)[::-1], "rope_freqs.weight"),  # not a llama3 shape: decreasing
    ({}, np.ones(5), "rope_freqs.weight"),  # the wrong length
    ({"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 2.0}, np.full(8, 2.0), "rope_freqs.weight"),
    ({"llama.attention.head_count": 5}, None, "llama.attention.head_count"),
])
def test_what_llaisys_cannot_honour_is_named(tmp_path, meta, freqs, key):
    make_tiny_llama(tmp_path / "hf", "linear_untied")
    bad = write_llama_gguf(tmp_path / "bad.gguf", tmp_path / "hf", LINEAR, meta=meta, freqs=freqs)
    for read in (load_gguf, lambda p: convert_gguf(p, tmp_path / "out")):
        with pytest.raises(ValueError, match=key.replace(".", r"\.")) as e:
            read(bad)
        assert isinstance(e.value, ModelFileError)


@pytest.mark.parametrize("head_dim, theta, factor, low, high, original, exact", [
    (128, 500000.0, 8.0, 1.0, 4.0, 8192, True),  # Llama 3.1 8B/70B/405B
    (64, 500000.0, 32.0, 1.0, 4.0, 8192, True),  # Llama 3.2 1B
    (128, 500000.0, 8.0, 2.0, 3.0, 8192, True),  # two entries between the bands
    (16, 10000.0, 8.0, 1.0, 4.0, 256, False),  # one entry between: band edges equivalent, not unique
    (8, 10000.0, 2.0, 1.0, 4.0, 8192, False),  # no entry at the full factor
])
def test_llama3_parameters_are_recovered_from_rope_freqs(head_dim, theta, factor, low, high, original, exact):
    """Recovered parameters give the file's divisors (so the same RoPE); with two or more entries
    between the bands, llama.cpp's converter's parameters themselves."""
    r = {"rope_theta": theta, "factor": factor, "low_freq_factor": low, "high_freq_factor": high,
         "original_max_position_embeddings": original}
    freqs = llama3_rope_freqs(head_dim, r).astype(np.float64)
    got = llama3_params(freqs, "x.gguf", head_dim, theta, 131072)
    back = llama3_rope_freqs(head_dim, {**r, **got, "rope_theta": theta})
    np.testing.assert_allclose(back, freqs, rtol=1e-4)
    if exact:
        assert got == {"rope_type": "llama3", **{k: pytest.approx(v) for k, v in r.items() if k != "rope_theta"}}


@pytest.mark.parametrize("meta, want", [
    ({"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0,
      "llama.rope.scaling.original_context_length": 128, "llama.rope.scaling.yarn_beta_fast": 16.0,
      "llama.rope.scaling.yarn_ext_factor": -1.0}, ("yarn", 4.0, 128, 16.0)),
    ({"llama.rope.scaling.type": None, "llama.rope.scaling.factor": None, "llama.rope.scale_linear": 2.0},
     ("linear", 2.0, 0, 32.0)),  # an older file's key; no type means linear, as in llama.cpp
    ({"llama.rope.scaling.type": "none", "llama.rope.scaling.factor": None}, ("default", 1.0, 0, 32.0)),
])
def test_rope_metadata_reads_as_the_config(tmp_path, meta, want):
    make_tiny_llama(tmp_path / "hf", "linear_untied")
    f = write_llama_gguf(tmp_path / "x.gguf", tmp_path / "hf", LINEAR, meta=meta)
    r = load_gguf(f).loaded.config.rope
    assert (r.scaling, r.factor, r.original_max_position, r.beta_fast) == want
    if r.scaling == "yarn":
        assert r.attention_factor == pytest.approx(0.1 * math.log(4.0) + 1.0)
