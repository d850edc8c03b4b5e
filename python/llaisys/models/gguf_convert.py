"""Convert a GGUF file into a HuggingFace model directory (bf16 safetensors).

Its `general.architecture` picks the family through the registry (models/arch/: qwen2,
qwen3, qwen2moe, qwen3moe, whose stacked experts become per-expert tensors: gguf_moe.py; llama:
Llama 2/3.x and Mistral, or Mixtral when it has experts); a `llama` file's q/k rows are
un-permuted from llama.cpp's RoPE order, and its RoPE scaling is read by gguf_rope.py.

Every tensor is dequantized to float32 with `gguf.quants.dequantize`, rounded to bf16
(nearest even, as torch does) and streamed into `model.safetensors` one tensor at a
time. The tokenizer (byte-level BPE or SentencePiece: gguf_spm.py), chat template, special tokens and
hyperparameters come from the GGUF metadata. The output directory appears
atomically: it is built under a temporary name and renamed when complete.
"""

import json
import os
import shutil
from dataclasses import dataclass
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable, Optional, Union

import gguf
import numpy as np

from . import bf16
from .arch import hf_config_dict, parse_config, spec_for_gguf, spec_for_name
from .config import ModelParams
from .files import ModelFileError
from .gguf_check import check_gguf
from .gguf_moe import (SHARED_GATE, is_mixtral, is_permuted, is_stack, mixtral_gguf_name, mixtral_tensor_name,
                       moe_config_fields, moe_keys, permuted_heads, stack_shapes, unpermute_rows)
from .gguf_rope import ROPE_FREQS, gguf_rope_keys, rope_freqs_values, rope_scaling
from .gguf_spm import tokenizer_files
from .gguf_tokenizer import metadata
from .loader import validate_tensors
from .safetensors_io import TensorSpec, write_safetensors_streaming

_CHUNK_ELEMS = 1 << 22  # elements dequantized at once: bounds the f32 temporaries per worker

_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    # mixture of experts (gguf_moe.py): the router, the stacked experts [E, rows, cols] (named as
    # the core's 3-D slot, split per expert by the loaders), the shared expert and its gate
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_exps": "mlp.experts.gate_proj",
    "ffn_up_exps": "mlp.experts.up_proj",
    "ffn_down_exps": "mlp.experts.down_proj",
    "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
    "ffn_up_shexp": "mlp.shared_expert.up_proj",
    "ffn_down_shexp": "mlp.shared_expert.down_proj",
    "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
}


# tensor types gguf.quants can dequantize
_DEQUANTIZABLE = frozenset([gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16,
                            *gguf.quants._type_traits])  # noqa: SLF001 - the package's own registry
# HF config field -> the GGUF metadata key it comes from; "{arch}" is general.architecture
_GGUF_KEY_PATTERNS = {
    "hidden_size": "{arch}.embedding_length",
    "intermediate_size": "{arch}.feed_forward_length",
    "num_hidden_layers": "{arch}.block_count",
    "num_attention_heads": "{arch}.attention.head_count",
    "num_key_value_heads": "{arch}.attention.head_count_kv",
    "head_dim": "{arch}.attention.key_length",
    "max_position_embeddings": "{arch}.context_length",
    "rms_norm_eps": "{arch}.attention.layer_norm_rms_epsilon",
    "rope_theta": "{arch}.rope.freq_base",
    "bos_token_id": "tokenizer.ggml.bos_token_id",
    "eos_token_id": "tokenizer.ggml.eos_token_id",
    "vocab_size": "token_embd.weight",
}
_OPTIONAL = ("rope_theta", "head_dim")  # metadata keys a GGUF file may leave out


def _gguf_keys(arch: str) -> dict:
    return {f: k.format(arch=arch) for f, k in _GGUF_KEY_PATTERNS.items()}


def hf_tensor_name(gguf_name: str, source: str = "GGUF file", mixtral: bool = False) -> str:
    """GGUF tensor name -> HF name, e.g. "blk.3.attn_q.bias" -> "model.layers.3.self_attn.q_proj.bias";
    mixtral: a Mixtral file's router and experts under their Mixtral names (gguf_moe)."""
    parts = gguf_name.split(".")
    if mixtral and parts[0] == "blk" and len(parts) in (4, 5) and parts[1].isdecimal() and len(parts[1]) <= 6:
        name = mixtral_tensor_name(parts)
        if name is not None:
            return name
    if len(parts) == 2 and parts[0] in _GLOBAL_NAMES and parts[1] in ("weight", "bias"):
        return f"{_GLOBAL_NAMES[parts[0]]}.{parts[1]}"
    if (len(parts) == 4 and parts[0] == "blk" and parts[1].isdecimal() and len(parts[1]) <= 6
            and parts[2] in _BLOCK_NAMES and parts[3] in ("weight", "bias")):
        return f"model.layers.{int(parts[1])}.{_BLOCK_NAMES[parts[2]]}.{parts[3]}"
    raise ModelFileError(source, gguf_name, f"GGUF tensor {gguf_name!r} has no HuggingFace equivalent")


def _read_config(reader: gguf.GGUFReader, source: str, vocab_size: int, tied: bool,
                 tensor_names: Iterable[str] = (), rope_freqs: Optional[np.ndarray] = None) -> ModelParams:
    """The config from `<arch>.*` metadata; `tensor_names` (HF names) tell a MoE file's dense layers,
    `rope_freqs` is the `rope_freqs.weight` tensor's values, if the file has one (gguf_rope.py)."""
    arch = metadata(reader, "general.architecture", str, source)
    spec = spec_for_name("MixtralForCausalLM") if is_mixtral(reader) else spec_for_gguf(arch, source)
    keys = _gguf_keys(arch)
    d = {"architectures": [spec.architecture], "model_type": spec.model_type, "vocab_size": vocab_size,
         "tie_word_embeddings": tied, "torch_dtype": "bfloat16"}
    for field, key in keys.items():
        if key.startswith(f"{arch}."):
            kind = float if field in ("rms_norm_eps", "rope_theta") else int
            value = metadata(reader, key, kind, source, required=field not in _OPTIONAL)
            if value is not None:
                d[field] = value
    for field in ("bos_token_id", "eos_token_id"):
        d[field] = metadata(reader, keys[field], int, source, required=False)
    d.update(moe_config_fields(reader, arch, source, tensor_names))
    heads, hidden = d.get("num_attention_heads"), d.get("hidden_size")
    head_dim = d.get("head_dim") or (hidden // heads if heads and hidden and hidden % heads == 0 else None)
    d["rope_scaling"] = rope_scaling(reader, arch, source, head_dim, d.get("rope_theta", 10000.0),
                                     d.get("max_position_embeddings", 1), rope_freqs)
    try:
        return parse_config(d, source)
    except ModelFileError as e:  # name the GGUF key the field came from
        key = {**keys, **moe_keys(arch), **gguf_rope_keys(arch)}.get(e.field, e.field)
        raise ModelFileError(source, key, f"{e.message} (GGUF key {key})") from None


def _plan(reader: gguf.GGUFReader, source: str = "GGUF file"):
    """Map and shape every GGUF tensor; returns (config, [(TensorSpec, ReaderTensor)])."""
    plan, seen, freqs = [], {}, None
    mixtral = is_mixtral(reader)
    for t in reader.tensors:
        if t.name == ROPE_FREQS and is_permuted(reader):  # llama3 RoPE scaling (gguf_rope.py), not a weight
            freqs = rope_freqs_values(int(t.tensor_type), tuple(int(d) for d in t.shape), t.data, source)
            continue
        name = hf_tensor_name(t.name, source, mixtral)
        if name in seen:
            raise ModelFileError(source, t.name, f"GGUF tensors {seen[name]!r} and {t.name!r} both map to {name!r}")
        if t.tensor_type not in _DEQUANTIZABLE:
            raise ModelFileError(source, t.name, f"GGUF tensor {t.name!r} has type {t.tensor_type.name}, "
                                                 f"which cannot be dequantized")
        seen[name] = t.name
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # GGUF lists dims innermost first
        if is_stack(name):  # a stack of experts: one bf16 tensor per expert, cut from the stack
            data = t.data.reshape(shape[0], shape[1], -1)  # [E, rows, values or row bytes]
            plan.extend((TensorSpec(n, "bf16", s), _ExpertSlice(t.name, t.tensor_type, data[e]))
                        for e, (n, s) in enumerate(stack_shapes(name, shape, source, t.name)))
            continue
        if len(shape) == 1 and SHARED_GATE.match(name):
            shape = (1, *shape)  # HF's [1, H]
        plan.append((TensorSpec(name, "bf16", shape), t))
    if "model.embed_tokens.weight" not in seen:
        raise ModelFileError(source, "token_embd.weight", "GGUF file has no token_embd.weight tensor")
    embed = next(s for s, _ in plan if s.name == "model.embed_tokens.weight")
    if len(embed.shape) != 2:
        raise ModelFileError(source, "token_embd.weight", f"token_embd.weight has shape {embed.shape}, need 2-D")
    config = _read_config(reader, source, vocab_size=embed.shape[0], tied="lm_head.weight" not in seen,
                          tensor_names=seen, rope_freqs=freqs)
    try:
        validate_tensors(config, {s.name: s for s, _ in plan}, source)
    except ModelFileError as e:  # name GGUF keys and tensors, not HF ones
        arch = metadata(reader, "general.architecture", str, source)
        raise gguf_error(e, source, arch, seen, mixtral) from None
    if is_permuted(reader):  # llama.cpp's q/k row permutation undone, whole rows (quantized blocks move unchanged)
        plan = [(spec, _unpermuted(spec, t, config, source)) for spec, t in plan]
    return config, plan


def gguf_error(e: ModelFileError, source: str, arch: str, seen: dict, mixtral: bool) -> ModelFileError:
    """`e` (about HF names and config fields) restated with the GGUF key or tensor it came from."""
    per_expert = mixtral and any(len(g.split(".")) == 5 for g in seen.values())
    key = ({**_gguf_keys(arch), **moe_keys(arch)}.get(e.field) or seen.get(e.field)
           or (mixtral_gguf_name(e.field, per_expert) if mixtral else None) or e.field)
    return ModelFileError(source, key, f"{e.message} (GGUF: {key})")


def _unpermuted(spec: TensorSpec, t, config: ModelParams, source: str):
    heads = permuted_heads(spec.name, config.n_heads, config.n_kv_heads)
    if heads is None:
        return t
    order = unpermute_rows(spec.shape[0], heads, source, t.name)
    data = t.data.reshape(spec.shape[0], -1)  # [rows, values or row bytes]
    return _ExpertSlice(t.name, t.tensor_type, data[order])


@dataclass
class _ExpertSlice:
    """Rows of a GGUF tensor (one expert of a stack; a q/k weight in HF's row order), read as a
    reader tensor is: its rows (values or row bytes)."""

    name: str  # the stack's GGUF name, for errors
    tensor_type: gguf.GGMLQuantizationType
    data: np.ndarray  # [rows, values or row bytes], a view into the memory-mapped file


def _to_bf16(spec: TensorSpec, tensor) -> np.ndarray:
    """Dequantize one GGUF tensor to f32 and round it to bf16, in row chunks to bound temporaries."""
    try:
        return _dequantize(spec, tensor)
    except ModelFileError:
        raise
    except Exception as e:  # noqa: BLE001 - gguf.quants on crafted bytes
        raise ModelFileError("GGUF file", tensor.name, f"cannot dequantize {tensor.name!r}: {e}") from None


def _dequantize(spec: TensorSpec, tensor) -> np.ndarray:
    raw = tensor.data  # [rows, bytes per row] for quantized types, else the values
    if raw.ndim != 2 or len(spec.shape) != 2 or raw.shape[0] != spec.shape[0]:
        f32 = gguf.quants.dequantize(raw, tensor.tensor_type)
        if f32.size != int(np.prod(spec.shape)):
            raise ModelFileError("GGUF file", tensor.name,
                                 f"GGUF tensor {tensor.name!r} dequantized to {f32.shape}, expected {spec.shape}")
        return bf16.f32_to_bf16(f32.reshape(spec.shape))
    out = np.empty(spec.shape, dtype=np.uint16)  # [rows, cols] bf16 bits
    step = max(1, _CHUNK_ELEMS // spec.shape[1])
    for r in range(0, spec.shape[0], step):
        f32 = gguf.quants.dequantize(raw[r:r + step], tensor.tensor_type)
        if f32.shape != (min(step, spec.shape[0] - r), spec.shape[1]):
            raise ModelFileError("GGUF file", tensor.name, f"GGUF tensor {tensor.name!r} dequantized to rows of "
                                                           f"{f32.shape[1:]}, expected {spec.shape[1]} columns")
        out[r:r + step] = bf16.f32_to_bf16(f32)
    return out


def _write_weights(path: Path, plan, progress: Optional[Callable[[int, int], None]]) -> None:
    total = sum(int(np.prod(s.shape)) * 2 for s, _ in plan)
    by_name = {s.name: t for s, t in plan}
    specs = [s for s, _ in plan]
    done = 0
    # two workers dequantize ahead while the main thread writes, at most `window` tensors in flight
    window = 3
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {}

        def submit(i):
            if i < len(specs):
                futures[i] = pool.submit(_to_bf16, specs[i], by_name[specs[i].name])

        for i in range(window):
            submit(i)
        order = iter(range(len(specs)))

        def produce(spec: TensorSpec) -> np.ndarray:
            nonlocal done
            i = next(order)
            assert specs[i] is spec  # invariant: the writer asks in spec order
            data = futures.pop(i).result()
            submit(i + window)
            done += data.nbytes
            if progress is not None:
                progress(done, total)
            return data

        write_safetensors_streaming(path, specs, produce, metadata={"format": "pt", "source": "gguf"})


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def convert_gguf(gguf_path: Union[str, os.PathLike], out_dir: Union[str, os.PathLike],
                 progress: Optional[Callable[[int, int], None]] = None) -> Path:
    """Convert `gguf_path` into the HF directory `out_dir` (which must not exist or be empty).

    progress(done_bytes, total_bytes) is called after each tensor is written.
    Returns `out_dir` as a Path.
    """
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise ValueError(f"{out_dir}: output directory already exists and is not empty")
    check_gguf(gguf_path)  # bounded structure walk: the reader below trusts every count it reads
    try:
        reader = gguf.GGUFReader(gguf_path)
    except Exception as e:  # noqa: BLE001 - structure already checked; anything left is still the file's fault
        raise ModelFileError(gguf_path, None, f"not a readable GGUF file: {type(e).__name__}: {e}") from None
    config, plan = _plan(reader, str(gguf_path))
    tmp = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        files = tokenizer_files(reader, config, str(gguf_path))
        files.tokenizer.save(str(tmp / "tokenizer.json"))
        _write_json(tmp / "tokenizer_config.json", files.tokenizer_config)
        _write_json(tmp / "generation_config.json", files.generation_config)
        _write_json(tmp / "config.json", hf_config_dict(config))
        _write_weights(tmp / "model.safetensors", plan, progress)
        if out_dir.exists():
            out_dir.rmdir()  # empty, checked above
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
