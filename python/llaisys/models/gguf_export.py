"""Write a HuggingFace Qwen2 directory as a GGUF file for llama.cpp, keeping the exact values.

The inverse of gguf_convert: weights keep their checkpoint dtype (bf16 stays bf16, f16 stays
f16, f32 stays f32) except 1-D tensors (norms, biases), which llama.cpp wants in f32 and which
widen exactly. dtype "q8_0" writes every matrix as Q8_0 instead, quantized from its exact f32
values by gguf-py (`gguf.quants.quantize`, which llaisys's own Q8_0 quantizer matches bit for
bit), one tensor at a time as the file is written; "q4_k_m" writes llama.cpp's Q4_K_M recipe
(quantize.plan_types: Q4_K, Q6_K for the output and some attn_v / ffn_down, llama.cpp's
fallbacks for rows not a multiple of 256) through the library's own quantizers, the very bytes
`LLM(dir, quantize="q4_k")` runs. The tokenizer (byte-level BPE tokens, token types, merges), the special ids and
the chat template come from the directory's tokenizer files. Used by tools/bench_compare.py
so that llama.cpp runs on the very weights llaisys runs on.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Union

import gguf
import numpy as np

from . import bf16
from .gguf_convert import _BLOCK_NAMES, _GLOBAL_NAMES
from .loader import load_model
from .tokenizer import Tokenizer

_CONTROL, _USER_DEFINED, _NORMAL, _UNUSED = 3, 4, 1, 5  # llama.cpp token types
_GGML_TYPE = {"bf16": gguf.GGMLQuantizationType.BF16, "f16": gguf.GGMLQuantizationType.F16,
              "f32": gguf.GGMLQuantizationType.F32}
_FILE_TYPE = {"bf16": gguf.LlamaFileType.MOSTLY_BF16, "f16": gguf.LlamaFileType.MOSTLY_F16,
              "f32": gguf.LlamaFileType.ALL_F32, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
              "q4_k_m": gguf.LlamaFileType.MOSTLY_Q4_K_M}
QUANT_DTYPES = ("q8_0", "q4_k_m")  # export dtypes that quantize the matrices
_Q8_0 = gguf.GGMLQuantizationType.Q8_0
_HF_TO_GGUF = {hf: g for g, hf in _GLOBAL_NAMES.items()}
_HF_BLOCK_TO_GGUF = {hf: g for g, hf in _BLOCK_NAMES.items()}


@contextmanager
def writing_gguf(out_path: Path, arch: str, progress: bool = False) -> Iterator[gguf.GGUFWriter]:
    """A GGUFWriter on a temporary file beside out_path for the body to fill (metadata, tensor
    infos and tensors); after it, the file is written and renamed over out_path, so a reader
    never sees half a file. If the body or the write fails, the temporary file is removed."""
    tmp = out_path.with_name(f".{out_path.name}.tmp-{os.getpid()}")
    w = gguf.GGUFWriter(str(tmp), arch)
    try:
        yield w
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file(progress=progress)
        w.close()
        os.replace(tmp, out_path)
    except BaseException:
        w.close()
        tmp.unlink(missing_ok=True)
        raise


def gguf_tensor_name(hf_name: str) -> str:
    """HF tensor name -> GGUF name, e.g. "model.layers.3.self_attn.q_proj.bias" -> "blk.3.attn_q.bias"."""
    stem, _, kind = hf_name.rpartition(".")
    if stem in _HF_TO_GGUF:
        return f"{_HF_TO_GGUF[stem]}.{kind}"
    parts = stem.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in _HF_BLOCK_TO_GGUF:
        return f"blk.{int(parts[2])}.{_HF_BLOCK_TO_GGUF[parts[3]]}.{kind}"
    raise ValueError(f"tensor {hf_name!r} has no Qwen2 GGUF equivalent")


def _vocab(model_dir: Path, vocab_size: int) -> tuple:
    """(tokens by id, token types, merges) from tokenizer.json, padded to the embedding's rows."""
    data = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        raise ValueError(f"{model_dir}: only byte-level BPE tokenizers can be exported, got {model.get('type')!r}")
    by_id = {int(i): t for t, i in model["vocab"].items()}
    types = {i: _NORMAL for i in by_id}
    for added in data.get("added_tokens", []):
        by_id[int(added["id"])] = added["content"]
        types[int(added["id"])] = _CONTROL if added.get("special") else _USER_DEFINED
    if max(by_id) >= vocab_size:
        raise ValueError(f"{model_dir}: token id {max(by_id)} is outside the embedding's {vocab_size} rows")
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(vocab_size)]
    token_types = [types.get(i, _UNUSED) for i in range(vocab_size)]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, token_types, merges


def _widen(data: np.ndarray, dtype: str) -> np.ndarray:
    """A 1-D tensor's values as f32 (bf16 travels as uint16 bit patterns)."""
    if dtype == "bf16":
        return (data.astype(np.uint32) << 16).view(np.float32)
    return data.astype(np.float32)


def _q8_0(data: np.ndarray, dtype: str) -> np.ndarray:
    """uint8 [rows, k / 32 * 34]: a [rows, k] float matrix quantized to Q8_0 from its exact f32 values."""
    return gguf.quants.quantize(bf16.convert(np.asarray(data), dtype, "f32"), _Q8_0)


def _add_q8_0(w: gguf.GGUFWriter, name: str, data: np.ndarray, dtype: str) -> None:
    """Declare a Q8_0 matrix whose bytes are computed only when written (bounds memory to one tensor)."""
    rows, k = data.shape
    byte_shape = (rows, k // 32 * 34)  # uint8 [rows, blocks * 34]; the writer derives the element shape
    n_bytes = byte_shape[0] * byte_shape[1]
    w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), n_bytes, raw_dtype=_Q8_0)
    w.tensors[-1][name].tensor = _Deferred(lambda: _q8_0(data, dtype), n_bytes)


def _add_library_quant(w: gguf.GGUFWriter, name: str, t, tag: str) -> None:
    """Declare a matrix quantized to `tag` by the library (quantize.quantize_tensor) when written."""
    from .quantize import quantize_tensor
    from .tensors import QUANT_BLOCKS

    rows, k = t.data.shape
    elems, nbytes = QUANT_BLOCKS[tag]
    byte_shape = (rows, k // elems * nbytes)
    w.add_tensor_info(name, byte_shape, np.dtype(np.uint8), byte_shape[0] * byte_shape[1],
                      raw_dtype=gguf.GGMLQuantizationType[tag.upper()])
    w.tensors[-1][name].tensor = _Deferred(lambda: np.ascontiguousarray(quantize_tensor(t, tag).data),
                                           byte_shape[0] * byte_shape[1])


class _Deferred:
    """Stands for a tensor's bytes in GGUFWriter's plan: made when write_tensors_to_file reads them."""

    def __init__(self, make, n_bytes: int):
        self.make, self.nbytes = make, n_bytes

    def tofile(self, f) -> None:
        data = self.make()
        assert data.nbytes == self.nbytes  # invariant: matches the size declared in the header
        data.tofile(f)


def export_gguf(model_dir: Union[str, os.PathLike], out_path: Union[str, os.PathLike],
                dtype: Optional[str] = None, progress: bool = False) -> Path:
    """Write `model_dir` (a Qwen2 HF directory) to the GGUF file `out_path` (replaced atomically).

    dtype ("bf16", "f16", "f32") converts the weights first, as `--dtype` does at load; None
    keeps the checkpoint's values exactly; "q8_0" quantizes every matrix whose rows are a
    multiple of 32 elements to Q8_0 (others keep the checkpoint dtype); "q4_k_m" follows
    llama.cpp's Q4_K_M recipe with the library's quantizers. progress shows the gguf
    package's progress bar.
    """
    model_dir, out_path = Path(model_dir), Path(out_path)
    if dtype is not None and dtype not in (*_GGML_TYPE, *QUANT_DTYPES):
        raise ValueError(f"dtype must be one of {', '.join((*_GGML_TYPE, *QUANT_DTYPES))} or None, got {dtype!r}")
    quant = dtype if dtype in QUANT_DTYPES else None
    loaded = load_model(model_dir, dtype=None if quant else dtype)  # validated; memory-mapped unless converted
    cfg, dtype = loaded.config, loaded.dtype
    if cfg.arch != "qwen2" or any(cfg.layer_window) or cfg.head_dim * cfg.n_heads != cfg.hidden_size:
        raise ValueError(f"{model_dir}: only a full-attention Qwen2 model with head_dim = hidden_size / "
                         f"num_attention_heads can be exported to GGUF (this is {cfg.architecture})")
    if dtype not in _GGML_TYPE:
        raise ValueError(f"{model_dir}: weights in {dtype} cannot be exported (bf16, f16 or f32 only)")
    tok = Tokenizer.from_dir(model_dir)
    tokens, token_types, merges = _vocab(model_dir, cfg.vocab_size)

    # the tensors are streamed from the memory-mapped checkpoint as the file is written
    with writing_gguf(out_path, "qwen2", progress) as w:
        w.add_name(model_dir.name)
        w.add_file_type(_FILE_TYPE[quant or dtype])
        w.add_context_length(cfg.max_position_embeddings)
        w.add_embedding_length(cfg.hidden_size)
        w.add_block_count(cfg.num_hidden_layers)
        w.add_feed_forward_length(cfg.intermediate_size)
        w.add_head_count(cfg.num_attention_heads)
        w.add_head_count_kv(cfg.num_key_value_heads)
        w.add_rope_freq_base(float(cfg.rope_theta))
        w.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("qwen2")
        w.add_token_list(tokens)
        w.add_token_types(token_types)
        w.add_token_merges(merges)
        sp = tok.special
        for token_id, add in ((sp.bos_token_id, w.add_bos_token_id), (sp.eos_token_id, w.add_eos_token_id),
                              (sp.pad_token_id, w.add_pad_token_id)):
            if token_id is not None:
                add(int(token_id))
        w.add_add_bos_token(False)
        if tok.chat_template:
            w.add_chat_template(tok.chat_template)
        plan = {}
        if quant == "q4_k_m":
            from .quantize import plan_types

            plan = plan_types(cfg, list(loaded.tensors), "q4_k")
        for name, t in loaded.tensors.items():
            if t.data.ndim == 1:  # norms and biases: llama.cpp reads them as f32; widening is exact
                w.add_tensor(gguf_tensor_name(name), _widen(t.data, dtype))
            elif name in plan:
                _add_library_quant(w, gguf_tensor_name(name), t, plan[name])
            elif quant == "q8_0" and t.data.shape[-1] % 32 == 0:
                _add_q8_0(w, gguf_tensor_name(name), t.data, dtype)
            else:
                w.add_tensor(gguf_tensor_name(name), np.ascontiguousarray(t.data), raw_dtype=_GGML_TYPE[dtype])
    return out_path
