"""Qwen2 model configuration, parsed and validated from a HuggingFace `config.json`.

Accepts both the transformers 4.x spelling (`torch_dtype`, top-level `rope_theta`)
and the 5.x spelling (`dtype`, `rope_parameters.rope_theta`).
"""

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

_ARCHITECTURE = "Qwen2ForCausalLM"
_MODEL_TYPE = "qwen2"
# HF torch dtype names -> our dtype tags
TORCH_DTYPE_TAGS = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}


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
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ValueError(f"{path}: config.json not found") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"{path}: cannot read config: {e}") from None
        try:
            d = json.loads(text)
        except ValueError as e:
            raise ValueError(f"{path}: invalid JSON: {e}") from None
        return _parse(d, str(path))

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
        raise ValueError(f"{source}: missing required field {key!r}")
    return _typed(d[key], key, kind, source)


def _typed(value, key: str, kind: type, source: str):
    if kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise ValueError(f"{source}: field {key!r} must be {kind.__name__}, got {type(value).__name__} {value!r}")
    return value


def _positive(source: str, **fields) -> None:
    for key, value in fields.items():
        if value <= 0:
            raise ValueError(f"{source}: field {key!r} must be positive, got {value}")


def _check_identity(d: dict, source: str) -> None:
    archs = d.get("architectures")
    model_type = d.get("model_type")
    if archs is not None and (not isinstance(archs, list) or _ARCHITECTURE not in archs):
        raise ValueError(f"{source}: architectures {archs!r} is not supported (need {_ARCHITECTURE!r})")
    if model_type != _MODEL_TYPE:
        raise ValueError(f"{source}: model_type {model_type!r} is not supported (need {_MODEL_TYPE!r})")
    act = d.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(f"{source}: hidden_act {act!r} is not supported (Qwen2 uses 'silu')")
    if d.get("use_sliding_window"):
        raise ValueError(f"{source}: sliding-window attention (use_sliding_window=true) is not supported")


def _rope_theta(d: dict, source: str) -> float:
    params = d.get("rope_parameters")
    if params is not None and not isinstance(params, dict):
        raise ValueError(f"{source}: rope_parameters must be an object")
    scaling = d.get("rope_scaling")
    for rope in (params, scaling):
        if isinstance(rope, dict):
            rope_type = rope.get("rope_type", rope.get("type", "default"))
            if rope_type != "default":
                raise ValueError(f"{source}: RoPE scaling type {rope_type!r} is not supported")
    if "rope_theta" in d:
        return _typed(d["rope_theta"], "rope_theta", float, source)
    if params is not None and "rope_theta" in params:
        return _typed(params["rope_theta"], "rope_parameters.rope_theta", float, source)
    return 10000.0  # transformers' Qwen2Config default


def _token_ids(value, key: str, source: str) -> tuple:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    return tuple(_typed(v, key, int, source) for v in items)


def _parse(d, source: str) -> Qwen2Config:
    if not isinstance(d, dict):
        raise ValueError(f"{source}: config must be a JSON object, got {type(d).__name__}")
    _check_identity(d, source)
    hidden = _req(d, "hidden_size", int, source)
    inter = _req(d, "intermediate_size", int, source)
    layers = _req(d, "num_hidden_layers", int, source)
    heads = _req(d, "num_attention_heads", int, source)
    kv_heads = _typed(d.get("num_key_value_heads", heads), "num_key_value_heads", int, source)
    vocab = _req(d, "vocab_size", int, source)
    max_pos = _typed(d.get("max_position_embeddings", 32768), "max_position_embeddings", int, source)
    eps = _typed(d.get("rms_norm_eps", 1e-6), "rms_norm_eps", float, source)
    tie = _typed(d.get("tie_word_embeddings", False), "tie_word_embeddings", bool, source)
    _positive(source, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
              num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
              max_position_embeddings=max_pos, rms_norm_eps=eps)
    if hidden % heads:
        raise ValueError(f"{source}: num_attention_heads {heads} does not divide hidden_size {hidden}")
    if heads % kv_heads:
        raise ValueError(f"{source}: num_key_value_heads {kv_heads} does not divide num_attention_heads {heads}")
    head_dim = d.get("head_dim")
    if head_dim is not None and _typed(head_dim, "head_dim", int, source) != hidden // heads:
        raise ValueError(f"{source}: head_dim {head_dim} != hidden_size / num_attention_heads ({hidden // heads})")
    if (hidden // heads) % 2:
        raise ValueError(f"{source}: head_dim {hidden // heads} must be even for RoPE")
    theta = _rope_theta(d, source)
    _positive(source, rope_theta=theta)
    torch_dtype = d.get("torch_dtype", d.get("dtype"))
    if torch_dtype is not None and torch_dtype not in TORCH_DTYPE_TAGS:
        raise ValueError(f"{source}: torch_dtype {torch_dtype!r} is not one of {sorted(TORCH_DTYPE_TAGS)}")
    bos = d.get("bos_token_id")
    bos = None if bos is None else _typed(bos, "bos_token_id", int, source)
    eos = _token_ids(d.get("eos_token_id"), "eos_token_id", source)
    for tid in (() if bos is None else (bos,)) + eos:
        if not 0 <= tid < vocab:
            raise ValueError(f"{source}: special token id {tid} outside the vocabulary (size {vocab})")
    return Qwen2Config(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                       num_attention_heads=heads, num_key_value_heads=kv_heads, vocab_size=vocab,
                       max_position_embeddings=max_pos, rms_norm_eps=eps, rope_theta=theta,
                       tie_word_embeddings=tie, torch_dtype=torch_dtype, bos_token_id=bos,
                       eos_token_ids=eos)
