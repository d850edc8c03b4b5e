"""Qwen2 model configuration, parsed and validated from a HuggingFace `config.json`.

Accepts both the transformers 4.x spelling (`torch_dtype`, top-level `rope_theta`)
and the 5.x spelling (`dtype`, `rope_parameters.rope_theta`). Every value is type- and
range-checked before anything is sized by it (see LIMITS); errors are ModelFileErrors
naming the file and the field.
"""

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from .files import ModelFileError, read_json_file

_ARCHITECTURE = "Qwen2ForCausalLM"
_MODEL_TYPE = "qwen2"
# HF torch dtype names -> our dtype tags
TORCH_DTYPE_TAGS = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}
# field -> (smallest, largest) accepted value. Far above any released Qwen2-family model
# (the largest: 80 layers, hidden 8192, FFN 29568, 64 heads, vocab 152064, 131072
# positions), low enough that nothing sized by a config can exhaust memory or time before
# the tensors in the files are compared with it.
LIMITS = {
    "hidden_size": (1, 1 << 16),
    "intermediate_size": (1, 1 << 20),
    "num_hidden_layers": (1, 1 << 12),
    "num_attention_heads": (1, 1 << 10),
    "num_key_value_heads": (1, 1 << 10),
    "vocab_size": (1, 1 << 22),
    "max_position_embeddings": (1, 1 << 26),
    "rms_norm_eps": (0.0, 0.5),  # exclusive below; the core keeps it as a float32
    "rope_theta": (0.0, 1e12),  # exclusive below; the core keeps it as a float32
}
MAX_EOS_IDS = 256  # end-of-sequence ids one config may list


@dataclass(frozen=True)
class Qwen2Config:
    """Hyperparameters of a Qwen2 decoder (all validated)."""

    hidden_size: int  # H, model width
    intermediate_size: int  # I, SwiGLU inner width
    num_hidden_layers: int  # number of decoder blocks
    num_attention_heads: int  # nh, query heads
    num_key_value_heads: int  # nkv, K/V heads (GQA); divides nh
    vocab_size: int  # V, rows of the embedding and of lm_head
    max_position_embeddings: int  # longest context the model was trained for
    rms_norm_eps: float  # RMSNorm epsilon
    rope_theta: float  # RoPE base frequency
    tie_word_embeddings: bool  # lm_head shares model.embed_tokens.weight
    torch_dtype: Optional[str]  # checkpoint dtype as HF names it ("bfloat16"...), None if not stated
    bos_token_id: Optional[int]  # beginning-of-sequence id, None if not stated
    eos_token_ids: tuple  # end-of-sequence id(s) from config.json, () if not stated

    @property
    def head_dim(self) -> int:
        """hd = H / nh."""
        return self.hidden_size // self.num_attention_heads

    @property
    def dtype_tag(self) -> Optional[str]:
        """torch_dtype as our tag ("bf16", "f16", "f32"), or None."""
        return TORCH_DTYPE_TAGS.get(self.torch_dtype) if self.torch_dtype else None

    @classmethod
    def from_dict(cls, d: dict, source: str = "config") -> "Qwen2Config":
        return _parse(d, source)

    @classmethod
    def from_json_file(cls, path: Union[str, os.PathLike]) -> "Qwen2Config":
        path = Path(path)
        return _parse(read_json_file(path), str(path))

    def to_hf_dict(self) -> dict:
        """A HuggingFace-style config.json dict (readable by transformers and by from_dict)."""
        eos = list(self.eos_token_ids)
        return {
            "architectures": [_ARCHITECTURE],
            "model_type": _MODEL_TYPE,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "vocab_size": self.vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": None,
            "tie_word_embeddings": self.tie_word_embeddings,
            "torch_dtype": self.torch_dtype,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": eos[0] if len(eos) == 1 else (eos or None),
            "hidden_act": "silu",
            "attention_dropout": 0.0,
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": self.num_hidden_layers,
            "use_cache": True,
        }


def _req(d: dict, key: str, kind: type, source: str):
    if key not in d:
        raise ModelFileError(source, key, f"missing required field {key!r}")
    return _typed(d[key], key, kind, source)


def _typed(value, key: str, kind: type, source: str):
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            try:
                value = float(value)
            except OverflowError:  # an int too large for a float
                ok = False
            ok = ok and math.isfinite(value)
    else:
        ok = isinstance(value, kind)
    if not ok:
        want = "a finite number" if kind is float else kind.__name__
        raise ModelFileError(source, key, f"field {key!r} must be {want}, got {type(value).__name__} {_shown(value)}")
    return value


def _in_range(source: str, key: str, value, low, high) -> None:
    """low < value <= high for floats (low exclusive), low <= value <= high for ints."""
    ok = (low < value <= high) if isinstance(value, float) else (low <= value <= high)
    if not ok:
        if isinstance(value, int) and value <= 0:
            raise ModelFileError(source, key, f"field {key!r} must be positive, got {value}")
        raise ModelFileError(source, key, f"field {key!r} is {value}, outside the supported range "
                                          f"{'(' if isinstance(value, float) else '['}{low}, {high}]")


def _check_identity(d: dict, source: str) -> None:
    archs = d.get("architectures")
    model_type = d.get("model_type")
    if archs is not None and (not isinstance(archs, list) or _ARCHITECTURE not in archs):
        raise ModelFileError(source, "architectures",
                             f"architectures {_shown(archs)} is not supported (need {_ARCHITECTURE!r})")
    if model_type != _MODEL_TYPE:
        raise ModelFileError(source, "model_type",
                             f"model_type {_shown(model_type)} is not supported (need {_MODEL_TYPE!r})")
    act = d.get("hidden_act", "silu")
    if act != "silu":
        raise ModelFileError(source, "hidden_act", f"hidden_act {_shown(act)} is not supported (Qwen2 uses 'silu')")
    if _typed(d.get("use_sliding_window", False), "use_sliding_window", bool, source):
        raise ModelFileError(source, "use_sliding_window",
                             "sliding-window attention (use_sliding_window=true) is not supported")


def _rope_theta(d: dict, source: str) -> float:
    for key in ("rope_parameters", "rope_scaling"):
        rope = d.get(key)
        if rope is None:
            continue
        if not isinstance(rope, dict):
            raise ModelFileError(source, key, f"field {key!r} must be an object or null, got {type(rope).__name__}")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ModelFileError(source, key, f"field {key!r}: RoPE scaling type {_shown(rope_type)} is not supported")
    if "rope_theta" in d:
        return _typed(d["rope_theta"], "rope_theta", float, source)
    params = d.get("rope_parameters")
    if params is not None and "rope_theta" in params:
        return _typed(params["rope_theta"], "rope_parameters.rope_theta", float, source)
    return 10000.0  # transformers' Qwen2Config default


def _token_ids(value, key: str, source: str, vocab: int) -> tuple:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    if len(items) > MAX_EOS_IDS:
        raise ModelFileError(source, key, f"field {key!r} lists {len(items)} ids (at most {MAX_EOS_IDS})")
    ids = tuple(_typed(v, key, int, source) for v in items)
    for tid in ids:
        if not 0 <= tid < vocab:
            raise ModelFileError(source, key, f"special token id {tid} ({key}) outside the vocabulary (size {vocab})")
    return ids


def _sizes(d: dict, source: str) -> dict:
    """The integer hyperparameters, typed and range-checked, before anything uses them."""
    sizes = {key: _req(d, key, int, source)
             for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")}
    sizes["num_key_value_heads"] = _typed(d.get("num_key_value_heads", sizes["num_attention_heads"]),
                                          "num_key_value_heads", int, source)
    sizes["max_position_embeddings"] = _typed(d.get("max_position_embeddings", 32768),
                                              "max_position_embeddings", int, source)
    for key, value in sizes.items():
        _in_range(source, key, value, *LIMITS[key])
    hidden, heads, kv_heads = sizes["hidden_size"], sizes["num_attention_heads"], sizes["num_key_value_heads"]
    if hidden % heads:
        raise ModelFileError(source, "num_attention_heads",
                             f"num_attention_heads {heads} does not divide hidden_size {hidden}")
    if heads % kv_heads:
        raise ModelFileError(source, "num_key_value_heads",
                             f"num_key_value_heads {kv_heads} does not divide num_attention_heads {heads}")
    head_dim = d.get("head_dim")
    if head_dim is not None and _typed(head_dim, "head_dim", int, source) != hidden // heads:
        raise ModelFileError(source, "head_dim",
                             f"head_dim {head_dim} != hidden_size / num_attention_heads ({hidden // heads})")
    if (hidden // heads) % 2:
        raise ModelFileError(source, "head_dim", f"head_dim {hidden // heads} must be even for RoPE")
    return sizes


def _parse(d, source: str) -> Qwen2Config:
    if not isinstance(d, dict):
        raise ModelFileError(source, None, f"config must be a JSON object, got {type(d).__name__}")
    _check_identity(d, source)
    sizes = _sizes(d, source)
    eps = _typed(d.get("rms_norm_eps", 1e-6), "rms_norm_eps", float, source)
    _in_range(source, "rms_norm_eps", eps, *LIMITS["rms_norm_eps"])
    theta = _rope_theta(d, source)
    _in_range(source, "rope_theta", theta, *LIMITS["rope_theta"])
    tie = _typed(d.get("tie_word_embeddings", False), "tie_word_embeddings", bool, source)
    dtype_key = "torch_dtype" if "torch_dtype" in d else "dtype"
    torch_dtype = d.get(dtype_key)
    if torch_dtype is not None and (not isinstance(torch_dtype, str) or torch_dtype not in TORCH_DTYPE_TAGS):
        raise ModelFileError(source, dtype_key,
                             f"{dtype_key} {_shown(torch_dtype)} is not one of {sorted(TORCH_DTYPE_TAGS)}")
    vocab = sizes["vocab_size"]
    bos = _token_ids(d.get("bos_token_id"), "bos_token_id", source, vocab)
    if len(bos) > 1:
        raise ModelFileError(source, "bos_token_id", "field 'bos_token_id' must be one id, got a list")
    eos = _token_ids(d.get("eos_token_id"), "eos_token_id", source, vocab)
    return Qwen2Config(**sizes, rms_norm_eps=eps, rope_theta=theta, tie_word_embeddings=tie,
                       torch_dtype=torch_dtype, bos_token_id=bos[0] if bos else None, eos_token_ids=eos)


def _shown(value) -> str:
    """A short repr of a value from a file (never huge, never raising)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        return f"<{type(value).__name__}>"
    return text if len(text) <= 80 else text[:77] + "..."
