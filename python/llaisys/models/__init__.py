"""Model files: safetensors I/O, model configs (the architecture registry in arch/), checkpoint
loading, tokenizer, GGUF conversion, model cache.

Pure Python (numpy, safetensors-format I/O of our own, tokenizers, jinja2, gguf). The cache and
converter names (`resolve_model`, `download`, `convert_gguf`, ...) import lazily, so importing
this package does not import `gguf`.
"""

from .config import ModelParams, Qwen2Config
from .loader import LoadedModel, load_model
from .safetensors_io import RawTensor, read_safetensors, write_safetensors
from .tokenizer import SpecialTokens, Tokenizer

_LAZY = {
    "resolve_model": "hub",
    "download": "hub",
    "DEFAULT_MODEL": "hub",
    "REGISTRY": "hub",
    "convert_gguf": "gguf_convert",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["LoadedModel", "ModelParams", "Qwen2Config", "RawTensor", "SpecialTokens", "Tokenizer", "load_model",
           "read_safetensors", "write_safetensors", *_LAZY]
