"""Write a GGUF of random weights shaped like Qwen3-30B-A3B, in llama.cpp's Q4_K_M recipe.

    python tools/make_moe_gguf.py OUT.gguf [--layers 7] [--seed 0] [--tokenizer-from GGUF]
                                  [--shape qwen3-30b-a3b|tiny] [--histogram]

The real 30B files cannot be downloaded here; this file has Qwen3-30B-A3B's exact per-layer
shapes (hidden 2048, 32 query heads / 4 KV heads of 128, q/k norms, 128 experts of width 768,
top 8 renormalised, rope theta 1e6, vocab 151936, untied lm_head) and fewer layers: 7 layers
make about 3 GB, so a decode token reads what one of Qwen3-30B-A3B's does per layer (its
attention, router and 8 of 128 experts) and the speed per active byte is the real model's.

The layout is llama.cpp's `qwen3moe`: experts stacked in `blk.N.ffn_{gate,up,down}_exps`
[128, rows, cols], the router `blk.N.ffn_gate_inp` [128, 2048] in f32, norms f32. The types are
llama.cpp's Q4_K_M recipe as `llaisys export-gguf --dtype q4_k_m` writes it (quantize.plan_types:
Q4_K, Q6_K for the output and for attn_v / ffn_down_exps of llama.cpp's "more bits" layers),
quantized by the library's own quantizers. The tokenizer metadata is copied from a GGUF of the
same vocabulary (default: the cached Qwen2.5-Coder-0.5B file), so llama.cpp loads the file.

Weights are N(0, 1/fan_in) (router logits N(0, 1) on the normed hidden state; norms 1), drawn
from `--seed` per tensor and written a chunk of rows at a time: memory stays near one chunk,
the same seed gives the same bytes. --histogram runs a float reference forward (numpy, weights
dequantized by gguf-py) over a sample prompt and prints how often each expert was chosen per
layer: random routers spread tokens over the experts as trained ones do (no expert starves,
none takes most tokens), which is what makes the file's batch speed representative.
`--shape tiny` writes a 2-layer file of the same recipe in seconds (the tests' file).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

_Q = gguf.GGMLQuantizationType
_CHUNK = 1 << 22  # elements drawn and quantized at once


@dataclass(frozen=True)
class Shape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    experts: int
    top_k: int
    expert_ffn: int
    layers: int
    dense_ffn: int  # feed_forward_length in the metadata (Qwen3-30B-A3B: 6144; no layer is dense)
    max_pos: int = 40960
    rope_theta: float = 1e6
    eps: float = 1e-6


SHAPES = {
    # Qwen3-30B-A3B's config.json, with 7 of its 48 layers (about 3 GB in Q4_K_M)
    "qwen3-30b-a3b": Shape(hidden=2048, heads=32, kv_heads=4, head_dim=128, experts=128, top_k=8,
                           expert_ffn=768, layers=7, dense_ffn=6144),
    # the tests' file: the same recipe, every row a whole number of Q4_K / Q6_K blocks
    "tiny": Shape(hidden=256, heads=4, kv_heads=2, head_dim=64, experts=8, top_k=2, expert_ffn=256, layers=2,
                  dense_ffn=512, max_pos=4096),
}


def hf_config(s: Shape, vocab: int) -> dict:
    return {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "vocab_size": vocab,
            "hidden_size": s.hidden, "intermediate_size": s.dense_ffn, "num_hidden_layers": s.layers,
            "num_attention_heads": s.heads, "num_key_value_heads": s.kv_heads, "head_dim": s.head_dim,
            "max_position_embeddings": s.max_pos, "rms_norm_eps": s.eps, "rope_theta": s.rope_theta,
            "num_experts": s.experts, "num_experts_per_tok": s.top_k, "moe_intermediate_size": s.expert_ffn,
            "norm_topk_prob": True, "tie_word_embeddings": False, "torch_dtype": "float32", "hidden_act": "silu"}


def tensor_plan(s: Shape, vocab: int) -> list:
    """[(GGUF name, shape, std, quant tag or "f32")] in the order llama.cpp's converter writes them."""
    from llaisys.models.arch import parse_config, weight_slots
    from llaisys.models.quantize import plan_types

    config = parse_config(hf_config(s, vocab), "make_moe_gguf")
    types = plan_types(config, list(weight_slots(config)) + ["lm_head.weight"], "q4_k")
    h, q, kv, ie = s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim, s.expert_ffn
    out = [("token_embd.weight", (vocab, h), 1.0, types["model.embed_tokens.weight"])]
    for n in range(s.layers):
        pre, ex = f"model.layers.{n}.", f"model.layers.{n}.mlp.experts.0."
        out += [(f"blk.{n}.attn_norm.weight", (h,), 0.0, "f32"),
                (f"blk.{n}.attn_q.weight", (q, h), h ** -0.5, types[pre + "self_attn.q_proj.weight"]),
                (f"blk.{n}.attn_k.weight", (kv, h), h ** -0.5, types[pre + "self_attn.k_proj.weight"]),
                (f"blk.{n}.attn_v.weight", (kv, h), h ** -0.5, types[pre + "self_attn.v_proj.weight"]),
                (f"blk.{n}.attn_output.weight", (h, q), q ** -0.5, types[pre + "self_attn.o_proj.weight"]),
                (f"blk.{n}.attn_q_norm.weight", (s.head_dim,), 0.0, "f32"),
                (f"blk.{n}.attn_k_norm.weight", (s.head_dim,), 0.0, "f32"),
                (f"blk.{n}.ffn_norm.weight", (h,), 0.0, "f32"),
                (f"blk.{n}.ffn_gate_inp.weight", (s.experts, h), h ** -0.5, "f32"),
                (f"blk.{n}.ffn_gate_exps.weight", (s.experts, ie, h), h ** -0.5, types[ex + "gate_proj.weight"]),
                (f"blk.{n}.ffn_up_exps.weight", (s.experts, ie, h), h ** -0.5, types[ex + "up_proj.weight"]),
                (f"blk.{n}.ffn_down_exps.weight", (s.experts, h, ie), ie ** -0.5, types[ex + "down_proj.weight"])]
    out += [("output_norm.weight", (h,), 0.0, "f32"), ("output.weight", (vocab, h), h ** -0.5, types["lm_head.weight"])]
    return out


def row_bytes(tag: str, k: int) -> int:
    from llaisys.models.tensors import QUANT_BLOCKS

    if tag == "f32":
        return 4 * k
    elems, nbytes = QUANT_BLOCKS[tag]
    return k // elems * nbytes


class _Drawn:
    """A tensor's bytes, made when GGUFWriter writes them: N(0, std) rows (norms: ones) drawn from
    its own seed a chunk at a time and quantized to `tag` by the library."""

    def __init__(self, seed: list, shape: tuple, std: float, tag: str):
        self.seed, self.shape, self.std, self.tag = seed, shape, std, tag
        self.rows, self.k = int(np.prod(shape[:-1])), shape[-1]
        self.nbytes = self.rows * row_bytes(tag, self.k)

    def chunks(self):
        from llaisys.models.quantize import quantize_tensor
        from llaisys.models.safetensors_io import RawTensor

        rng = np.random.default_rng(self.seed)
        step = max(1, _CHUNK // self.k)
        for r in range(0, self.rows, step):
            n = min(step, self.rows - r)
            if self.std == 0.0:
                x = np.ones((n, self.k), np.float32)
            else:
                x = rng.standard_normal((n, self.k), dtype=np.float32)
                x *= np.float32(self.std)
            yield x if self.tag == "f32" else quantize_tensor(RawTensor("w", "f32", x.shape, x), self.tag).data

    def tofile(self, f) -> None:
        written = 0
        for c in self.chunks():
            c = np.ascontiguousarray(c)
            written += c.nbytes
            c.tofile(f)
        assert written == self.nbytes  # invariant: matches the size declared in the header


_TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                   "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                   "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.chat_template")


def read_tokenizer(source) -> dict:
    """The tokenizer.* metadata of a GGUF file (its vocabulary is the new file's), or `source`
    itself when it is already such a dict (the tests' byte-level vocabulary)."""
    from llaisys.models.gguf_check import read_gguf

    md = source if isinstance(source, dict) else read_gguf(Path(source)).metadata
    out = {k: md[k] for k in _TOKENIZER_KEYS if k in md}
    if not out.get("tokenizer.ggml.tokens"):
        raise ValueError("the tokenizer source has no tokenizer.ggml.tokens to copy")
    return out


def _add_tokenizer(w: gguf.GGUFWriter, tok: dict) -> None:
    w.add_tokenizer_model(tok["tokenizer.ggml.model"])
    if "tokenizer.ggml.pre" in tok:
        w.add_tokenizer_pre(tok["tokenizer.ggml.pre"])
    w.add_token_list(tok["tokenizer.ggml.tokens"])
    if "tokenizer.ggml.token_type" in tok:
        w.add_token_types(tok["tokenizer.ggml.token_type"])
    if "tokenizer.ggml.merges" in tok:
        w.add_token_merges(tok["tokenizer.ggml.merges"])
    for key, add in (("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id),
                     ("padding_token_id", w.add_pad_token_id)):
        if f"tokenizer.ggml.{key}" in tok:
            add(int(tok[f"tokenizer.ggml.{key}"]))
    w.add_add_bos_token(bool(tok.get("tokenizer.ggml.add_bos_token", False)))
    if "tokenizer.chat_template" in tok:
        w.add_chat_template(tok["tokenizer.chat_template"])


def make_moe_gguf(out_path, tokenizer, shape: str = "qwen3-30b-a3b", layers: int | None = None,
                  seed: int = 0, progress: bool = False) -> Path:
    """Write the random file (replaced atomically); returns its path. `tokenizer`: a GGUF path
    whose tokenizer.* metadata is copied, or that metadata as a dict."""
    from llaisys.models.gguf_export import writing_gguf

    s = SHAPES[shape]
    if layers is not None:
        if not 1 <= layers <= 48:
            raise ValueError(f"layers must be in [1, 48], got {layers}")
        s = Shape(**{**s.__dict__, "layers": layers})
    tok = read_tokenizer(tokenizer)
    vocab = len(tok["tokenizer.ggml.tokens"])
    out_path = Path(out_path).expanduser()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with writing_gguf(out_path, "qwen3moe", progress) as w:
        w.add_name(f"random {shape} ({s.layers} layers, seed {seed})")
        w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
        w.add_block_count(s.layers)
        w.add_context_length(s.max_pos)
        w.add_embedding_length(s.hidden)
        w.add_feed_forward_length(s.dense_ffn)
        w.add_head_count(s.heads)
        w.add_head_count_kv(s.kv_heads)
        w.add_key_length(s.head_dim)
        w.add_value_length(s.head_dim)
        w.add_rope_freq_base(s.rope_theta)
        w.add_layer_norm_rms_eps(s.eps)
        w.add_expert_count(s.experts)
        w.add_expert_used_count(s.top_k)
        w.add_expert_feed_forward_length(s.expert_ffn)
        _add_tokenizer(w, tok)
        for i, (name, shp, std, tag) in enumerate(tensor_plan(s, vocab)):
            t = _Drawn([seed, i], shp, std, tag)
            if tag == "f32":
                w.add_tensor_info(name, shp, np.dtype(np.float32), t.nbytes)
            else:
                w.add_tensor_info(name, (*shp[:-1], row_bytes(tag, shp[-1])), np.dtype(np.uint8), t.nbytes,
                                  raw_dtype=_Q[tag.upper()])
            w.tensors[-1][name].tensor = t
    return out_path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-30b-a3b")
    ap.add_argument("--layers", type=int, default=None, help="default: 7 (qwen3-30b-a3b, about 3 GB), 2 (tiny)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-from", default=None,
                    help="GGUF whose tokenizer.* metadata is copied (default: the cached Qwen2.5-Coder-0.5B file)")
    ap.add_argument("--histogram", action="store_true", help="print the expert-use histogram of a sample prompt")
    args = ap.parse_args()
    src = args.tokenizer_from
    if src is None:
        from llaisys.models import hub

        src = hub.gguf_path("qwen2.5-coder-0.5b-instruct")
    path = make_moe_gguf(args.out, src, args.shape, args.layers, args.seed, progress=True)
    print(f"wrote {path}: {path.stat().st_size / 1e9:.2f} GB")
    if args.histogram:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from moe_reference import expert_histogram, print_histogram

        print_histogram(expert_histogram(path, sample_prompt(path)))


def sample_prompt(path, n: int = 64) -> list:
    """`n` token ids of ordinary text, tokenized by the file's own tokenizer."""
    from llaisys.models.gguf_model import load_gguf

    text = ("def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n"
            "The quick brown fox jumps over the lazy dog while the committee reviews the budget for next year.")
    return load_gguf(path).tokenizer.encode(text)[:n]


if __name__ == "__main__":
    main()
