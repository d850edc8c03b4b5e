"""The architecture registry: HF `architectures` name -> ArchSpec.

An ArchSpec is all llaisys knows about a family: how to read its config.json into a
ModelParams (include/llaisys/models/model.h's llaisysModelParams_t), which HF tensors it holds
and where each goes in the core (kind, layer, shape), and how to write its config.json back.
The loader, the Worker and the model runner never name an architecture: they ask here.
Adding a family is one file in this folder (doc/adding_a_model.md).
"""

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

from ..config import ModelParams
from ..files import ModelFileError, read_json_file
from .common import WeightSlot, standard_weights
from .fields import shown


@dataclass(frozen=True)
class ArchSpec:
    """One supported family."""

    architecture: str  # the HF "architectures" name, e.g. "Qwen2ForCausalLM"
    arch: str  # the family: lower-case LLAISYS_ARCH_* name ("qwen2"); ModelParams.arch
    model_type: str  # HF "model_type" a config of this family carries
    parse: Callable[[dict, str], ModelParams]  # (config dict, source for errors) -> validated params
    to_hf_dict: Callable[[ModelParams], dict]  # params -> config.json dict (transformers reads it)
    weights: Callable[[ModelParams], dict] = standard_weights  # params -> {HF name: WeightSlot}
    gguf_arch: Optional[str] = None  # GGUF general.architecture that converts to this family, if any


REGISTRY: dict = {}  # HF architectures name -> ArchSpec


def register(spec: ArchSpec) -> ArchSpec:
    assert spec.architecture not in REGISTRY, f"{spec.architecture} registered twice"
    REGISTRY[spec.architecture] = spec
    return spec


def known() -> str:
    return ", ".join(sorted(REGISTRY))


def spec_for_name(architecture: str) -> ArchSpec:
    """The spec registered under `architecture` (a ValueError naming the known ones if none)."""
    spec = REGISTRY.get(architecture)
    if spec is None:
        raise ValueError(f"unknown architecture {architecture!r}; known: {known()}")
    return spec


def spec_for(d, source: str) -> ArchSpec:
    """The spec a config dict names: the first known entry of `architectures`, or, when a
    config lists none, its `model_type`. The `model_type` must be given and agree with the spec."""
    if not isinstance(d, dict):
        raise ModelFileError(source, None, f"config must be a JSON object, got {type(d).__name__}")
    archs, model_type = d.get("architectures"), d.get("model_type")
    if archs is None:
        spec = next((s for s in REGISTRY.values() if s.model_type == model_type), None)
        if spec is None:
            raise ModelFileError(source, "model_type", f"config names no architectures and model_type "
                                                       f"{shown(model_type)} is not supported; known: {known()}")
        return spec
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ModelFileError(source, "architectures", f"field 'architectures' must be a list of names, "
                                                      f"got {shown(archs)}")
    spec = next((REGISTRY[a] for a in archs if a in REGISTRY), None)
    if spec is None:
        raise ModelFileError(source, "architectures",
                             f"architectures {shown(archs)} is not supported; known: {known()}")
    if model_type is None:  # transformers cannot load such a config either (AutoConfig keys on it)
        raise ModelFileError(source, "model_type", f"config has no model_type ({spec.architecture} needs "
                                                   f"{spec.model_type!r})")
    if model_type != spec.model_type:
        raise ModelFileError(source, "model_type", f"model_type {shown(model_type)} does not match "
                                                   f"{spec.architecture} (need {spec.model_type!r})")
    return spec


def parse_config(d, source: str = "config") -> ModelParams:
    """A config dict -> validated ModelParams, by the parser of the family it names."""
    return spec_for(d, source).parse(d, source)


def read_config(path: Union[str, os.PathLike]) -> ModelParams:
    """A config.json file -> validated ModelParams (errors name the file)."""
    path = Path(path)
    return parse_config(read_json_file(path), str(path))


def hf_config_dict(params: ModelParams) -> dict:
    """A HuggingFace-style config.json dict of `params` (readable by transformers and by parse_config)."""
    return spec_for_name(params.architecture).to_hf_dict(params)


def spec_for_gguf(gguf_arch: str, source: str = "GGUF file") -> ArchSpec:
    """The spec whose GGUF `general.architecture` is `gguf_arch`."""
    spec = next((s for s in REGISTRY.values() if s.gguf_arch == gguf_arch), None)
    if spec is None:
        convertible = ", ".join(sorted(s.gguf_arch for s in REGISTRY.values() if s.gguf_arch))
        raise ModelFileError(source, "general.architecture", f"general.architecture is {gguf_arch[:40]!r}; "
                                                             f"only {convertible} can be converted")
    return spec


def weight_slots(params: ModelParams) -> dict:
    """HF tensor name -> WeightSlot (kind, layer, shape) for every tensor `params` needs."""
    return spec_for_name(params.architecture).weights(params)


from . import llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, qwen3_moe  # noqa: E402,F401  (each registers its spec)

__all__ = ["ArchSpec", "REGISTRY", "WeightSlot", "hf_config_dict", "parse_config", "read_config", "register",
           "spec_for", "spec_for_gguf", "spec_for_name", "weight_slots"]
