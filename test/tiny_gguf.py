"""A tiny synthetic Qwen2 GGUF (fast, no download): the model-file tests' fixtures
(test/models/conftest.py) and any test that needs a small real GGUF write it with this."""

import gguf
import numpy as np

from llaisys.models.gguf_tokenizer import bytes_to_unicode

# Tiny Qwen2: H=64, I=128, 2 layers, 4 query heads, 2 KV heads (head_dim 16).
TINY = dict(hidden=64, inter=128, layers=2, heads=4, kv_heads=2, ctx=256)

TINY_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def tiny_vocab():
    """(tokens, token_types, merges): 256 byte tokens, a few merges, control/user tokens, padding."""
    tokens = sorted(bytes_to_unicode().values(), key=ord)
    merges = ["h e", "Ġ t", "Ġt he", "l l", "he ll", "Ġ Ġ", "ä ½"]
    tokens += ["he", "Ġt", "Ġthe", "ll", "hell", "ĠĠ", "ä½"]
    types = [1] * len(tokens)
    for tok, kind in [("<|endoftext|>", 3), ("<|im_start|>", 3), ("<|im_end|>", 3), ("<tool_call>", 4)]:
        tokens.append(tok)
        types.append(kind)
    while len(tokens) % 16:
        tokens.append(f"[PAD{len(tokens)}]")
        types.append(5)
    return tokens, types, merges


def write_tiny_gguf(path, tied: bool, seed: int = 0, dims: dict = TINY, arch: str = "qwen2", blocks=None):
    """Write a tiny random Qwen2 GGUF (Q8_0 matrices, F32 norms/biases) and return the f32 weights used.

    dims: TINY's keys, for rows that other block sizes divide; arch "llama": the same tensors without
    the q/k/v biases under llama.* keys; blocks(name, f32 weights, rng): (uint8 rows, GGML type) to
    store a matrix as instead of its Q8_0."""
    rng = np.random.default_rng(seed)
    tokens, types, merges = tiny_vocab()
    h, i, nl = dims["hidden"], dims["inter"], dims["layers"]
    hd = h // dims["heads"]
    kv = dims["kv_heads"] * hd
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(nl)
    w.add_context_length(dims["ctx"])
    w.add_embedding_length(h)
    w.add_feed_forward_length(i)
    w.add_head_count(dims["heads"])
    w.add_head_count_kv(dims["kv_heads"])
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(TINY_CHAT_TEMPLATE)
    shapes = {"token_embd.weight": (len(tokens), h), "output_norm.weight": (h,)}
    if not tied:
        shapes["output.weight"] = (len(tokens), h)
    for n in range(nl):
        shapes.update({
            f"blk.{n}.attn_norm.weight": (h,), f"blk.{n}.ffn_norm.weight": (h,),
            f"blk.{n}.attn_q.weight": (h, h), f"blk.{n}.attn_q.bias": (h,),
            f"blk.{n}.attn_k.weight": (kv, h), f"blk.{n}.attn_k.bias": (kv,),
            f"blk.{n}.attn_v.weight": (kv, h), f"blk.{n}.attn_v.bias": (kv,),
            f"blk.{n}.attn_output.weight": (h, h),
            f"blk.{n}.ffn_gate.weight": (i, h), f"blk.{n}.ffn_up.weight": (i, h), f"blk.{n}.ffn_down.weight": (h, i),
        })
    if arch == "llama":
        shapes = {name: shape for name, shape in shapes.items() if not name.endswith(".bias")}
    weights = {}
    for name, shape in shapes.items():
        data = rng.standard_normal(shape).astype(np.float32) * 0.05
        weights[name] = data
        if len(shape) == 2 and blocks is not None:
            raw, qtype = blocks(name, data, rng)
            w.add_tensor(name, raw, raw_dtype=qtype)
        elif len(shape) == 2:
            q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return weights
