"""Tensors on GPU 0 for the NVIDIA op tests (test_nvidia_ops.py, test_nvidia_attention.py): torch
tensors copied bit for bit, empty and filled ones, and the 16-bit patterns of a result."""

from __future__ import annotations

import numpy as np
import torch

import llaisys
from llaisys import DeviceType

NV = DeviceType.NVIDIA


def gpu(t: torch.Tensor) -> llaisys.Tensor:
    """A tensor on GPU 0 holding exactly the bits of `t` (bf16 travels as uint16 bits)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return llaisys.Tensor.from_numpy(t.view(torch.int16).numpy().view(np.uint16), dtype="bf16", device=NV)
    return llaisys.Tensor.from_numpy(t.numpy(), device=NV)


def gpu_empty(shape, dtype: str) -> llaisys.Tensor:
    return llaisys.Tensor(tuple(shape), dtype, device=NV)


def gpu_full(shape, dtype: str, value: float) -> llaisys.Tensor:
    return llaisys.Tensor.from_numpy(np.full(shape, value, dtype=np.float32), dtype=dtype, device=NV)


def bits(t: llaisys.Tensor) -> torch.Tensor:
    return torch.from_numpy(t.numpy(raw=True).view(np.uint16).astype(np.int32))
