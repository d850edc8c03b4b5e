"""Run a GGUF file as it is: config, tokenizer, chat template and weights from the one file.

`load_gguf(path)` is what `LLM("model.gguf")` and `llaisys serve model.gguf` call. Nothing is
converted or written: the hyperparameters come from the `<arch>.*` metadata (as gguf_convert
reads them), the tokenizer and chat template from `tokenizer.*` (gguf_tokenizer), and every
tensor is handed to the model in its stored type:

    Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K   linear weights and the embedding: a QuantTensor holding the
    Q3_K Q4_K Q5_K Q6_K IQ4_XS      raw GGUF blocks (memory-mapped; the core copies them)
    IQ2_XXS IQ2_XS IQ2_S IQ3_XXS
    IQ3_S IQ1_S IQ1_M
    IQ4_NL                          rewritten at load into Q8_0, which holds its values exactly,
                                    and run as that (gguf_transcode.py)
    F32 F16 BF16                    any tensor: a float tensor in the model's float dtype
    a quant type on a 1-D tensor    dequantized (gguf-py) into the float dtype: tiny, and not
                                    something the core's kernels take
    a type without our kernels      widened at load: dequantized (gguf-py) into the float dtype,
    (TQ1_0, TQ2_0, MXFP4, ...)      with a warning naming the types and the bytes it costs (more
                                    than the file: f32 is 4 bytes a weight), refused where that
                                    would not fit in the memory available
    anything else                   refused, naming the tensor

The model's float dtype (norms, biases, any float matrix, activations) is by default f32 for a
quantized file: GGUF stores norms and biases in f32, so they keep their exact values (as in
llama.cpp), and the quantized kernels take f32 activations, so nothing is rounded to bf16 before
it is quantized per block. A file of float matrices keeps their dtype (an exported bf16 GGUF runs
as bf16). The whole file is validated (gguf_check: counts, byte sizes, types, alignment; then
shapes against the config) before any tensor is read.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import gguf
import numpy as np

from . import bf16
from .arch import hf_config_dict
from .chat_template import ChatTemplate
from .files import ModelFileError
from .gguf_check import GGUFFile, TensorInfo, read_gguf
from .gguf_convert import _read_config, gguf_error, hf_tensor_name
from .gguf_moe import (SHARED_GATE, expert_name, is_mixtral, is_permuted, is_stack, permuted_heads, stack_shapes,
                       unpermute_rows)
from .gguf_rope import ROPE_FREQS, rope_freqs_values
from .gguf_spm import tokenizer_files
from .gguf_tokenizer import TokenizerFiles
from .gguf_transcode import TRANSCODES, Transcoded
from .loader import LoadedModel, validate_tensors
from .safetensors_io import RawTensor, TensorSpec
from .tensors import QUANT_BLOCKS, QUANTIZABLE_KINDS, QuantTensor
from .tokenizer import Tokenizer, _checked_vocab, _config_ids, _ID_KEYS, _resolve_special, _SPECIAL_KEYS, _special_text

_Q = gguf.GGMLQuantizationType
QUANT_TAGS = {_Q.Q4_0: "q4_0", _Q.Q4_1: "q4_1", _Q.Q5_0: "q5_0", _Q.Q5_1: "q5_1", _Q.Q8_0: "q8_0", _Q.Q2_K: "q2_k",
              _Q.Q3_K: "q3_k", _Q.Q4_K: "q4_k", _Q.Q5_K: "q5_k", _Q.Q6_K: "q6_k", _Q.IQ4_XS: "iq4_xs",
              _Q.IQ2_XXS: "iq2_xxs", _Q.IQ2_XS: "iq2_xs", _Q.IQ2_S: "iq2_s", _Q.IQ3_XXS: "iq3_xxs", _Q.IQ3_S: "iq3_s",
              _Q.IQ1_S: "iq1_s", _Q.IQ1_M: "iq1_m"}
FLOAT_TAGS = {_Q.F32: "f32", _Q.F16: "f16", _Q.BF16: "bf16"}
_FLOAT_DTYPES = ("bf16", "f16", "f32")
WIDEN = "widen"  # the plan's tag of a type without our kernels that gguf-py dequantizes: widened at load
log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=None)
def _widens(type_id: int) -> bool:
    """Whether gguf-py dequantizes this tensor type (a zero block of it)."""
    try:
        qtype = _Q(type_id)
        _, type_size = gguf.GGML_QUANT_SIZES[qtype]
        gguf.quants.dequantize(np.zeros(type_size, np.uint8), qtype)
        return True
    except Exception:  # noqa: BLE001 - an unknown id, or a type gguf-py does not implement
        return False


def _available_bytes() -> Optional[int]:
    """MemAvailable (Linux), else None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


@dataclass
class GGUFModel:
    """A GGUF file ready for Model(): the loaded weights and the tokenizer built from its metadata."""

    loaded: LoadedModel  # config, tensors (QuantTensor / RawTensor), float dtype, path = the .gguf file
    tokenizer: Tokenizer  # from tokenizer.ggml.* and tokenizer.chat_template
    file: GGUFFile  # the parsed metadata and tensor table


def is_gguf(path: Union[str, os.PathLike]) -> bool:
    """True for an existing regular file named *.gguf (what the engine runs directly)."""
    p = Path(path)
    return p.suffix.lower() == ".gguf" and p.is_file()


def type_name(type_id: int) -> str:
    try:
        return _Q(type_id).name
    except ValueError:
        return f"type id {type_id}"


def _plan(f: GGUFFile, source: str) -> dict:
    """HF name -> (TensorInfo, dtype tag as stored) for every tensor, names and types checked."""
    plan, seen = {}, {}
    mixtral = is_mixtral(f)
    for info in f.tensors:
        if info.name == ROPE_FREQS and is_permuted(f):  # RoPE scaling (gguf_rope.py): read by the config
            continue
        name = hf_tensor_name(info.name, source, mixtral)
        if name in seen:
            raise ModelFileError(source, info.name, f"GGUF tensors {seen[name]!r} and {info.name!r} both map to {name!r}")
        seen[name] = info.name
        tag = QUANT_TAGS.get(info.type_id) or FLOAT_TAGS.get(info.type_id) or TRANSCODES.get(info.type_id)
        if tag is None and _widens(info.type_id):
            tag = WIDEN
        if tag is None:
            raise ModelFileError(source, info.name, f"GGUF tensor {info.name!r} has type {type_name(info.type_id)}, "
                                                    f"which llaisys can neither run (it runs "
                                                    f"{', '.join(t.name for t in (*QUANT_TAGS, *FLOAT_TAGS))}) "
                                                    f"nor dequantize")
        plan[name] = (info, tag)
    return plan


def _config_and_check(f: GGUFFile, plan: dict, source: str):
    """The ModelParams from the metadata, with every tensor's shape and type checked against it."""
    embed = plan.get("model.embed_tokens.weight")
    if embed is None:
        raise ModelFileError(source, "token_embd.weight", "GGUF file has no token_embd.weight tensor")
    if len(embed[0].shape) != 2:
        raise ModelFileError(source, "token_embd.weight", f"token_embd.weight has shape {embed[0].shape}, need 2-D")
    freqs = next((rope_freqs_values(i.type_id, i.shape, f.tensor_bytes(i), source) for i in f.tensors
                  if i.name == ROPE_FREQS and is_permuted(f)), None)
    config = _read_config(f, source, vocab_size=embed[0].shape[0], tied="lm_head.weight" not in plan,
                          tensor_names=plan, rope_freqs=freqs)
    specs = {}
    for name, (info, tag) in plan.items():
        # a quantized 1-D tensor is dequantized to float; checked as the float it becomes
        stored = tag if (tag in FLOAT_TAGS.values() or (len(info.shape) >= 2 and tag != WIDEN)) else "f32"
        if is_stack(name):  # experts: checked as the per-expert tensors they are cut into
            specs.update({n: TensorSpec(n, stored, shape) for n, shape in stack_shapes(name, info.shape, source,
                                                                                      info.name)})
        else:
            specs[name] = TensorSpec(name, stored, _hf_shape(name, info.shape))
    try:
        validate_tensors(config, specs, source)
    except ModelFileError as e:  # name GGUF keys and tensors, not HF ones
        raise gguf_error(e, source, f.fields["general.architecture"].contents(),
                         {hf: info.name for hf, (info, _) in plan.items()}, is_mixtral(f)) from None
    return config


def _hf_shape(name: str, shape: tuple) -> tuple:
    """The HF shape of a GGUF tensor: Qwen2-MoE's shared-expert gate is [H] in GGUF, [1, H] in HF."""
    return (1, *shape) if len(shape) == 1 and SHARED_GATE.match(name) else shape


def _split(name: str, t):
    """{HF name: tensor}: a stack of experts cut into its experts (views), else {name: t}."""
    if not is_stack(name):
        return {name: t}
    n_exp = t.shape[0]
    if isinstance(t, Transcoded):
        return {expert_name(name, e): dataclasses.replace(t, name=expert_name(name, e), shape=t.shape[1:],
                                                          source=t.source[e]) for e in range(n_exp)}
    if isinstance(t, _QuantStack):
        rows = t.raw.reshape(n_exp, t.shape[1], -1)  # [E, rows, row bytes]
        return {expert_name(name, e): QuantTensor(expert_name(name, e), t.dtype, t.shape[1:], rows[e])
                for e in range(n_exp)}
    return {expert_name(name, e): RawTensor(expert_name(name, e), t.dtype, t.shape[1:], t.data[e])
            for e in range(n_exp)}


def _float_dtype(plan: dict, dtype: Optional[str]) -> str:
    """The model's float dtype: `dtype`, else the float matrices' own (one dtype), else f32."""
    if dtype is not None:
        if dtype not in _FLOAT_DTYPES:
            raise ValueError(f"dtype must be one of {_FLOAT_DTYPES} or None, got {dtype!r}")
        return dtype
    matrix_tags = {tag for info, tag in plan.values() if len(info.shape) >= 2 and tag in _FLOAT_DTYPES}
    return matrix_tags.pop() if len(matrix_tags) == 1 else "f32"


def _tensor(f: GGUFFile, name: str, info: TensorInfo, tag: str, dtype: str, source: str):
    """One tensor, in its stored type (quantized matrices) or the float dtype (everything else)."""
    raw = f.tensor_bytes(info)  # uint8 [n_bytes], memory-mapped
    shape = _hf_shape(name, info.shape)
    if info.type_id in TRANSCODES and len(shape) >= 2:  # rewritten when read, rows (of a stack) as they are
        return Transcoded(name, tag, shape, raw.reshape(*shape[:-1], -1), info.type_id)
    if tag in QUANT_BLOCKS and len(shape) == 3:  # a stack of experts: [E * rows] GGUF rows, cut by _split
        return _QuantStack(tag, shape, raw)
    if tag in QUANT_BLOCKS and len(shape) == 2:
        return QuantTensor(name, tag, shape, raw.reshape(shape[0], -1))
    if tag in QUANT_BLOCKS or tag == WIDEN:  # e.g. a Q8_0 norm, or a TQ2_0 matrix: dequantize (gguf-py)
        try:
            values = gguf.quants.dequantize(raw, _Q(info.type_id)).reshape(shape).astype(np.float32)
        except Exception as e:  # noqa: BLE001 - gguf.quants on crafted bytes
            raise ModelFileError(source, info.name, f"cannot dequantize {info.name!r}: {e}") from None
        tag, data = "f32", values
    else:
        storage = {"f32": np.float32, "f16": np.float16, "bf16": np.uint16}[tag]
        data = raw.view(storage).reshape(shape)
    if tag != dtype:
        data = bf16.convert(data, tag, dtype)
    return RawTensor(name, dtype, shape, data)


@dataclass
class _QuantStack:
    """A quantized stack of experts before _split cuts it: quant tag, shape [E, rows, cols], bytes."""

    dtype: str
    shape: tuple
    raw: np.ndarray  # uint8 [E * rows * row bytes], memory-mapped

    @property
    def data(self) -> np.ndarray:
        return self.raw


def tokenizer_from_files(files: TokenizerFiles, config, source: str) -> Tokenizer:
    """A Tokenizer from what gguf_tokenizer built: the same one Tokenizer.from_dir reads back
    from a converted directory (its tokenizer.json, tokenizer_config.json, generation_config.json
    and config.json)."""
    src = Path(source)
    backend, tok_config, gen_config = files.tokenizer, files.tokenizer_config, files.generation_config
    model_config = hf_config_dict(config)
    vocab = _checked_vocab(backend, model_config.get("vocab_size"), src, src)
    special_map = {k: t for k in _SPECIAL_KEYS if (t := _special_text(tok_config, k, src)) is not None}
    gen_ids = {k: _config_ids(gen_config, k, src, vocab) for k in _ID_KEYS}
    model_ids = {k: _config_ids(model_config, k, src, vocab) for k in _ID_KEYS}
    special = _resolve_special(backend, special_map, gen_ids, model_ids)
    template = tok_config.get("chat_template")
    chat = ChatTemplate(template, f"{source} (tokenizer.chat_template)") if template is not None else None
    return Tokenizer(backend, special_map, special, chat)


def _header(path: Path) -> tuple:
    """(file, tensor plan, config, tokenizer) of a GGUF file, validated: all but the weights."""
    source = str(path)
    f = read_gguf(path)  # bounded walk: counts, sizes and types checked against the file
    plan = _plan(f, source)
    config = _config_and_check(f, plan, source)
    return f, plan, config, tokenizer_from_files(tokenizer_files(f, config, source), config, source)


def load_gguf_tokenizer(path: Union[str, os.PathLike]) -> Tokenizer:
    """The tokenizer of a GGUF file, as load_gguf builds it, without reading the weights."""
    return _header(Path(path))[3]


def load_gguf(path: Union[str, os.PathLike], dtype: Optional[str] = None) -> GGUFModel:
    """Read, validate and map a GGUF file (Qwen2, Qwen3, Qwen2-MoE, Qwen3-MoE, Llama, Mistral, Mixtral) for the model;
    see the module docstring (gguf_moe.py for the experts).

    dtype: the float dtype ("bf16", "f16", "f32") of everything that is not a quantized matrix;
    None: f32 for a quantized file, the matrices' own dtype for a float one.
    """
    path = Path(path)
    source = str(path)
    if dtype is not None and dtype not in _FLOAT_DTYPES:
        raise ValueError(f"dtype must be one of {_FLOAT_DTYPES} or None, got {dtype!r}")
    f, plan, config, tokenizer = _header(path)
    dtype = _float_dtype(plan, dtype)
    _check_widened(plan, dtype, source)
    tensors = {}
    permuted = is_permuted(f)
    for name, (info, tag) in plan.items():
        t = _tensor(f, name, info, tag, dtype, source)
        heads = permuted_heads(name, config.n_heads, config.n_kv_heads) if permuted else None
        if heads is not None:  # llama.cpp's q/k row permutation undone (gguf_moe.py), a copy of the rows
            rows, field = unpermute_rows(t.shape[0], heads, source, info.name), _rows_field(t)
            t = dataclasses.replace(t, **{field: np.ascontiguousarray(getattr(t, field)[rows])})
        tensors.update(_split(name, t))
    return GGUFModel(LoadedModel(config=config, tensors=tensors, dtype=dtype, path=path), tokenizer, f)


def _rows_field(t) -> str:
    """The field holding t's rows: the file's blocks of a Transcoded matrix, else its data."""
    return "source" if isinstance(t, Transcoded) else "data"


def _check_widened(plan: dict, dtype: str, source: str) -> None:
    """The tensors of types without our kernels: a log line for those rewritten exactly
    (gguf_transcode.py), a warning of what widening the others costs, or a ModelFileError where
    that would take more than the memory available."""
    rewritten = [info for info, _ in plan.values() if info.type_id in TRANSCODES and len(info.shape) >= 2]
    if rewritten:
        log.info("%s: %d tensors of type %s run as %s, which hold their values exactly", source, len(rewritten),
                 "/".join(sorted({type_name(i.type_id) for i in rewritten})),
                 "/".join(sorted({TRANSCODES[i.type_id].upper() for i in rewritten})))
    widened = [(info, int(np.prod(info.shape))) for info, tag in plan.values() if tag == WIDEN]
    if not widened:
        return
    size = sum(n for _, n in widened) * {"f32": 4, "f16": 2, "bf16": 2}[dtype]
    stored = sum(info.n_bytes for info, _ in widened)
    types = ", ".join(sorted({type_name(info.type_id) for info, _ in widened}))
    available = _available_bytes()
    if available is not None and size > available:
        raise ModelFileError(source, widened[0][0].name,
                             f"GGUF tensors of type {types} have no llaisys kernel, and widening their "
                             f"{stored / 2**20:.0f} MiB to {dtype} takes {size / 2**20:.0f} MiB, more than the "
                             f"{available / 2**20:.0f} MiB available; a Q4_K_M or Q8_0 file of the model runs as it is")
    log.warning("%s: %d tensors of type %s have no llaisys kernel: widened to %s at load (%.0f MiB, from %.0f MiB "
                "in the file); a Q4_K_M or Q8_0 file of the model runs faster", source, len(widened), types, dtype,
                size / 2**20, stored / 2**20)


def quant_summary(loaded: LoadedModel) -> dict:
    """dtype tag -> (tensor count, bytes) over the model's tensors: what the file runs as."""
    out: dict = {}
    for t in loaded.tensors.values():
        n, b = out.get(t.dtype, (0, 0))
        out[t.dtype] = (n + 1, b + t.nbytes)
    return out


__all__ = ["GGUFModel", "QUANT_TAGS", "QUANTIZABLE_KINDS", "is_gguf", "load_gguf", "load_gguf_tokenizer",
           "quant_summary", "tokenizer_from_files"]
