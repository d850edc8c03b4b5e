"""Load and validate a HuggingFace model directory (safetensors only) of any registered family.

A directory holds `config.json` and either one `model.safetensors` or shards listed
in `model.safetensors.index.json`. The architecture registry (`models/arch/`) parses the
config and says which tensors the family holds; every expected tensor is checked against the
config (name, shape, float dtype) before anything is sized; unknown tensors are an error. Pickle checkpoints
(`*.bin`, `*.pt`, `*.pth`) are refused: loading them can run arbitrary code.

A LoadedModel may also hold block-quantized matrices (`tensors.QuantTensor`: GGUF's raw blocks, from
gguf_model.load_gguf or quantized at load by models/quantize.py); only the linear weights and
the embedding (QUANTIZABLE_KINDS) may be quantized, everything else is a float tensor.
"""

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

from . import bf16
from .arch import read_config, weight_slots
from .config import ModelParams
from .files import ModelFileError, read_json_file
from .safetensors_io import RawTensor, read_safetensors
from .tensors import QUANT_BLOCKS, QUANTIZABLE_KINDS

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_LOADABLE_DTYPES = ("bf16", "f16", "f32")
@dataclass
class LoadedModel:
    """A validated checkpoint, all tensors in one dtype."""

    config: ModelParams  # parsed config.json
    tensors: dict = field(default_factory=dict)  # HF name -> RawTensor (memory-mapped unless converted),
    # or QuantTensor for quantized matrices; no "lm_head.weight" when config.tie_word_embeddings
    dtype: str = "bf16"  # the model's float dtype, of every RawTensor: "bf16", "f16" or "f32"
    path: Optional[Path] = None  # the model directory, or the GGUF file


def expected_shapes(config: ModelParams) -> dict:
    """HF tensor name -> shape for every tensor a checkpoint of `config`'s family must hold.

    `lm_head.weight` is included only when embeddings are not tied.
    """
    return {name: slot.shape for name, slot in weight_slots(config).items()}


_LAYER = re.compile(r"model\.layers\.(\d+)\.")
# one expert's projection: (layer, expert, projection name) of Qwen-MoE or Mixtral HF names
_EXPERT = re.compile(r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight$")


def _check_experts(config: ModelParams, tensors: dict, field_error) -> None:
    """The expert count and width the tensors hold against num_experts / moe_intermediate_size."""
    top, rows = -1, None
    for name, t in tensors.items():
        m = _EXPERT.match(name)
        if m:
            top = max(top, int(m.group(2)))
            if m.group(3) in ("gate_proj", "w1") and len(t.shape) == 2:
                rows = rows if rows is not None else t.shape[0]
    if top < 0:
        if any(config.layer_sparse):
            field_error("num_experts", config.n_experts, "no expert tensors (mlp.experts.N.*)")
        return
    if top + 1 > config.n_experts:
        field_error("num_experts", config.n_experts, f"experts numbered up to {top}")
    if rows is not None and rows != config.moe_intermediate_size:
        key = "intermediate_size" if config.arch == "mixtral" else "moe_intermediate_size"
        field_error(key, config.moe_intermediate_size, f"experts with a gate projection of {rows} rows")


def check_config_against_tensors(config: ModelParams, tensors: dict, config_source: str) -> None:
    """Raise a ModelFileError naming the config field when the tensors present contradict it.

    Runs before anything is sized by the config: a config claiming a million layers over a
    two-layer file fails here, in time proportional to the file, not to the claim.
    """
    def field_error(key: str, claimed, held: str):
        raise ModelFileError(config_source, key, f"field {key!r} is {claimed} but the weights hold {held}")

    layers = {m.group(1) for name in tensors if (m := _LAYER.match(name))}
    if config.num_hidden_layers != len(layers):
        field_error("num_hidden_layers", config.num_hidden_layers, f"{len(layers)} layers")

    def dims(name: str) -> Optional[tuple]:
        t = tensors.get(name)
        return tuple(t.shape) if t is not None and len(t.shape) == 2 else None

    embed = dims("model.embed_tokens.weight")
    if embed is not None:
        if embed[0] != config.vocab_size:
            field_error("vocab_size", config.vocab_size, f"{embed[0]} embedding rows")
        if embed[1] != config.hidden_size:
            field_error("hidden_size", config.hidden_size, f"{embed[1]} embedding columns")
    if config.n_experts:
        _check_experts(config, tensors, field_error)
    up = dims("model.layers.0.mlp.up_proj.weight")
    if up is not None and up[0] != config.intermediate_size:
        field_error("intermediate_size", config.intermediate_size, f"an up_proj of {up[0]} rows")
    q, k = dims("model.layers.0.self_attn.q_proj.weight"), dims("model.layers.0.self_attn.k_proj.weight")
    hd = config.head_dim
    if q is not None and q[0] != config.num_attention_heads * hd:
        # an explicit head_dim (not hidden_size / heads) is the likelier culprit than the head count
        explicit = hd != config.hidden_size // config.num_attention_heads
        key = "head_dim" if explicit else "num_attention_heads"
        field_error(key, hd if explicit else config.num_attention_heads,
                    f"a q_proj of {q[0]} rows, not num_attention_heads {config.num_attention_heads} x head_dim {hd}")
    if k is not None and k[0] != config.num_key_value_heads * hd:
        field_error("num_key_value_heads", config.num_key_value_heads,
                    f"a k_proj of {k[0]} rows, not num_key_value_heads x head_dim {hd}")
    qn = tensors.get("model.layers.0.self_attn.q_norm.weight")
    if config.qk_norm and qn is not None and tuple(qn.shape) != (hd,):
        field_error("head_dim", hd, f"a q_norm of shape {tuple(qn.shape)}")


def validate_tensors(config: ModelParams, tensors: dict, source: str, config_source: Optional[str] = None) -> None:
    """Raise ModelFileError unless `tensors` is exactly a checkpoint for `config`.

    `tensors` maps name -> anything with `.shape` and `.dtype` (RawTensor, or TensorSpec before data exists).
    A quant dtype (QUANT_BLOCKS) is accepted for the matrices of QUANTIZABLE_KINDS when its block size
    divides the row. `config_source` names where the config came from (default `source`), for errors
    about its fields.
    """
    check_config_against_tensors(config, tensors, config_source or source)
    want = expected_shapes(config)
    optional = {"lm_head.weight": (config.vocab_size, config.hidden_size)} if config.tie_word_embeddings else {}
    missing = sorted(set(want) - set(tensors))
    if missing:
        more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
        raise ModelFileError(source, missing[0], f"missing tensors: {', '.join(missing[:5])}{more}")
    unknown = sorted(set(tensors) - set(want) - set(optional))
    if unknown:
        more = f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else ""
        raise ModelFileError(source, unknown[0],
                             f"unexpected tensors for a {config.architecture} model: "
                             f"{', '.join(map(repr, unknown[:5]))}{more}")
    slots = weight_slots(config)
    for name, t in tensors.items():
        shape = want.get(name, optional.get(name))
        if tuple(t.shape) != shape:
            raise ModelFileError(source, name, f"tensor {name!r} has shape {tuple(t.shape)}, config needs {shape}")
        if t.dtype in QUANT_BLOCKS:
            kind = slots[name].kind if name in slots else "LM_HEAD"
            block = QUANT_BLOCKS[t.dtype][0]
            if kind not in QUANTIZABLE_KINDS or len(shape) != 2:
                raise ModelFileError(source, name, f"tensor {name!r} is {t.dtype}: only the linear weights and the "
                                                   f"embedding may be quantized (norms and biases are float)")
            if shape[1] % block:
                raise ModelFileError(source, name, f"tensor {name!r} has rows of {shape[1]} elements, not a "
                                                   f"multiple of the {t.dtype} block size {block}")
        elif t.dtype not in _LOADABLE_DTYPES:
            raise ModelFileError(source, name, f"tensor {name!r} has dtype {t.dtype}; need one of {_LOADABLE_DTYPES}")


def _refuse_pickles(path: Path) -> None:
    pickles = sorted(p.name for p in path.iterdir() if p.suffix in _PICKLE_SUFFIXES)
    detail = f"; found only pickle checkpoints ({', '.join(pickles)}), which are not loaded" if pickles else ""
    raise ModelFileError(
        path, None, f"no {SINGLE_FILE} or {INDEX_FILE}{detail}. llaisys requires safetensors weights "
        f"(convert with transformers: model.save_pretrained(dir, safe_serialization=True)).")


def _shard_files(path: Path) -> dict:
    """Read the shard index; returns tensor name -> shard file name, validated."""
    index_path = path / INDEX_FILE
    weight_map = read_json_file(index_path).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelFileError(index_path, "weight_map", "needs a non-empty 'weight_map' object")
    for name, shard in weight_map.items():
        if (not isinstance(shard, str) or shard in (".", "..") or Path(shard).name != shard
                or not shard.endswith(".safetensors")):
            raise ModelFileError(index_path, "weight_map",
                                 f"weight_map: tensor {name!r} maps to invalid shard file name {str(shard)[:80]!r}")
    for shard in set(weight_map.values()):
        if not (path / shard).is_file():
            raise ModelFileError(index_path, "weight_map", f"weight_map: shard {shard!r} does not exist")
    return weight_map


def _read_all(path: Path) -> dict:
    """name -> RawTensor from the single file or from every shard."""
    if (path / INDEX_FILE).is_file():
        weight_map = _shard_files(path)
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            for name, t in read_safetensors(path / shard).tensors.items():
                if weight_map.get(name) != shard:
                    raise ModelFileError(path / shard, name,
                                         f"tensor {name!r} is not mapped to this shard in {INDEX_FILE}")
                tensors[name] = t
        absent = sorted(set(weight_map) - set(tensors))
        if absent:
            raise ModelFileError(path / INDEX_FILE, absent[0],
                                 f"tensors listed in {INDEX_FILE} but absent from their shards: {absent[:5]}")
        return tensors
    if (path / SINGLE_FILE).is_file():
        return dict(read_safetensors(path / SINGLE_FILE).tensors)
    _refuse_pickles(path)
    return {}  # unreachable: _refuse_pickles always raises


def _convert(t, dtype: str):
    """A float tensor in `dtype` (quantized ones stay as they are)."""
    if t.dtype == dtype or t.dtype in QUANT_BLOCKS:
        return t
    return RawTensor(t.name, dtype, t.shape, bf16.convert(t.data, t.dtype, dtype))


def load_model(path: Union[str, os.PathLike], dtype: Optional[str] = None,
               quantize: Optional[str] = None) -> LoadedModel:
    """Load a model directory of any registered architecture.

    dtype: "bf16", "f16", "f32" converts every tensor at load (round to nearest even,
    as torch casts); None keeps the checkpoint dtype, and if the checkpoint mixes
    dtypes, converts everything to the embedding's dtype.
    quantize: "q8_0" or "q4_k" quantizes the linear weights and the embedding at load
    (models/quantize.py, through the library's quantize op); None keeps them float.
    """
    if dtype is not None and dtype not in _LOADABLE_DTYPES:
        raise ValueError(f"dtype must be one of {_LOADABLE_DTYPES} or None, got {dtype!r}")
    if quantize is not None:
        from .quantize import check_scheme

        check_scheme(quantize)  # a ValueError naming quantize before anything is read
    path = Path(path)
    if not path.is_dir():
        raise ModelFileError(path, None, "model directory does not exist")
    config = read_config(path / "config.json")
    tensors = _read_all(path)
    validate_tensors(config, tensors, str(path), config_source=str(path / "config.json"))
    if config.tie_word_embeddings:
        tensors.pop("lm_head.weight", None)  # tied: HF ignores a stored lm_head and uses the embedding
    target = dtype or tensors["model.embed_tokens.weight"].dtype
    if quantize is not None:
        from .quantize import quantize_tensors

        tensors = quantize_tensors(config, tensors, quantize)
    tensors = {name: _convert(t, target) for name, t in tensors.items()}
    return LoadedModel(config=config, tensors=tensors, dtype=target, path=path)
