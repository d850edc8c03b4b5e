"""A model's weights and tokenizer from either form hub.resolve_model returns: a HuggingFace
directory or a .gguf file (a leaf module: the GGUF reader is imported only for GGUF files)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

from .loader import load_model


def load_checkpoint(path: Union[str, os.PathLike], dtype: Optional[str] = None, quantize: Optional[str] = None):
    """(LoadedModel, Tokenizer) of a model directory or a .gguf file, the two forms
    hub.resolve_model returns. A GGUF's matrices run in their stored types, so `quantize` is
    refused there (ValueError)."""
    path = Path(path)
    if path.is_file():
        if quantize is not None:
            raise ValueError(f"quantize applies to HF safetensors directories; {path.name} is a GGUF file, "
                             f"whose weights run in their stored types")
        from .gguf_model import load_gguf  # imported here: gguf is only needed for GGUF files

        g = load_gguf(path, dtype=dtype)
        return g.loaded, g.tokenizer
    from .tokenizer import Tokenizer

    return load_model(path, dtype=dtype, quantize=quantize), Tokenizer.from_dir(path)


def load_tokenizer(path: Union[str, os.PathLike]):
    """The Tokenizer alone of a model directory or a .gguf file (no weights are read)."""
    path = Path(path)
    if path.is_file():
        from .gguf_model import load_gguf_tokenizer

        return load_gguf_tokenizer(path)
    from .tokenizer import Tokenizer

    return Tokenizer.from_dir(path)
