"""ctypes declarations of include/llaisys/sampler.h."""

from __future__ import annotations

import ctypes

_i64p = ctypes.POINTER(ctypes.c_int64)
_f32p = ctypes.POINTER(ctypes.c_float)
_u32p = ctypes.POINTER(ctypes.c_uint32)


class SamplingParams(ctypes.Structure):
    """Mirror of llaisysSamplingParams_t."""

    _fields_ = [
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("repetition_penalty", ctypes.c_float),
        ("presence_penalty", ctypes.c_float),
        ("frequency_penalty", ctypes.c_float),
        ("seed", ctypes.c_uint64),
        ("step", ctypes.c_uint64),
        ("n_logprobs", ctypes.c_int32),
        ("prompt_tokens", _i64p),
        ("n_prompt", ctypes.c_size_t),
        ("output_tokens", _i64p),
        ("n_output", ctypes.c_size_t),
        ("bias_ids", _i64p),
        ("bias_values", _f32p),
        ("n_bias", ctypes.c_size_t),
        ("allowed_mask", _u32p),  # [mask_words] bit id % 32 of word id // 32 allows id; NULL: all
        ("mask_words", ctypes.c_size_t),
    ]


class SampleOutput(ctypes.Structure):
    """Mirror of llaisysSampleOutput_t."""

    _fields_ = [
        ("token_ids", ctypes.c_void_p),  # int64 [n_rows] (addresses, as in model.Batch)
        ("logprobs", ctypes.c_void_p),  # f32 [n_rows] or NULL
        ("top_ids", ctypes.c_void_p),  # int64 [n_rows, top_capacity] or NULL
        ("top_logprobs", ctypes.c_void_p),  # f32 [n_rows, top_capacity] or NULL
        ("top_capacity", ctypes.c_size_t),
    ]


def declare(lib: ctypes.CDLL) -> None:
    lib.llaisysSamplingDefaultParams.argtypes = []
    lib.llaisysSamplingDefaultParams.restype = SamplingParams
    lib.llaisysSample.argtypes = [_f32p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(SamplingParams),
                                  ctypes.POINTER(SampleOutput)]
    lib.llaisysSample.restype = ctypes.c_int32
    lib.llaisysSampleDevice.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                        ctypes.POINTER(SamplingParams), ctypes.POINTER(SampleOutput)]
    lib.llaisysSampleDevice.restype = ctypes.c_int32
