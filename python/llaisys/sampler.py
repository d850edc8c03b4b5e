"""Sampling with the core's sampler (the same code the model step uses): on host logits, or on
logits in a device's memory (llaisysSampleDevice: the GPU sampler on NVIDIA)."""

from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from . import runtime
from .libllaisys import LIB, DeviceType, MemcpyKind, MemoryKind, check
from .libllaisys.sampler import SampleOutput
from .libllaisys.sampler import SamplingParams as CSamplingParams
from .models.step_io import RowSampling, StepResult, fill_sampling


def row_params(logits: np.ndarray, rows: Sequence[RowSampling]) -> tuple:
    """(contiguous f32 logits [n_rows, vocab], the C params array of `rows`, arrays it points
    into: keep them alive for the call). ValueError unless there is one row per entry."""
    logits = np.ascontiguousarray(logits, dtype=np.float32)
    if logits.ndim != 2 or logits.shape[0] != len(rows):
        raise ValueError(f"logits must be [n_rows, vocab] with one row per sampling entry, got {logits.shape}")
    keep: list = []
    params = (CSamplingParams * max(len(rows), 1))()
    for i, r in enumerate(rows):
        fill_sampling(params[i], r, keep)
    return logits, params, keep


def _prepare(logits: np.ndarray, rows: Sequence[RowSampling], top_capacity: int):
    """(contiguous f32 logits, C params array, SampleOutput, StepResult it fills, arrays to keep alive)."""
    logits, params, keep = row_params(logits, rows)
    n = logits.shape[0]
    res = StepResult(np.zeros(n, np.int64), np.zeros(n, np.float32), None, None, None, None)
    out = SampleOutput()
    out.token_ids = res.token_ids.ctypes.data
    out.logprobs = res.logprobs.ctypes.data
    if top_capacity:
        res.top_ids = np.zeros((n, top_capacity), np.int64)
        res.top_logprobs = np.zeros((n, top_capacity), np.float32)
        out.top_ids = res.top_ids.ctypes.data
        out.top_logprobs = res.top_logprobs.ctypes.data
        out.top_capacity = top_capacity
    return logits, params, out, res, keep


def sample(logits: np.ndarray, rows: Sequence[RowSampling], top_capacity: int = 0) -> StepResult:
    """Sample one token per row of logits [n_rows, vocab] (f32) with the core's sampler."""
    logits, params, out, res, _keep = _prepare(logits, rows, top_capacity)
    n, vocab = logits.shape
    check(LIB.llaisysSample(logits.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), n, vocab, params,
                            ctypes.byref(out)))
    return res


def sample_on_device(logits: np.ndarray, rows: Sequence[RowSampling], top_capacity: int = 0,
                     device: DeviceType = DeviceType.CPU, device_id: int = 0) -> StepResult:
    """sample() with the logits in the memory of `device` (llaisysSampleDevice): they are copied
    there first, so on NVIDIA this runs the GPU sampler on the same values."""
    logits, params, out, res, _keep = _prepare(logits, rows, top_capacity)
    n, vocab = logits.shape
    if device == DeviceType.CPU:
        check(LIB.llaisysSampleDevice(int(device), device_id, logits.ctypes.data, n, vocab, params, ctypes.byref(out)))
        return res
    ptr = runtime.malloc(device, logits.nbytes, MemoryKind.DEVICE, device_id)
    try:
        runtime.memcpy(device, ptr, logits.ctypes.data, logits.nbytes, MemcpyKind.H2D, device_id)
        check(LIB.llaisysSampleDevice(int(device), device_id, ptr, n, vocab, params, ctypes.byref(out)))
    finally:
        runtime.free(device, ptr, MemoryKind.DEVICE, device_id)
    return res
