// CUDA launcher of linear through cuBLAS (see /src/ops/linear/cpu/linear_cpu.hpp).
#pragma once

#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// out [m, n] = in [m, k] @ weight [n, k]^T + bias [n] (bias may be null), f32 accumulation,
// through cublasGemmEx (DEVICE buffers; out and in of dtype act, weight and bias of wdt).
//   act == wdt == f32:         f32 GEMM with CUBLAS_COMPUTE_32F_PEDANTIC (no TF32)
//   act == wdt (bf16/f16):     tensor-core GEMM, f32 accumulation; with a bias the product
//                              goes to an f32 scratch and is rounded once after the bias add
//   act f32, wdt bf16/f16, m <= 8: gemv16 (gemv16_nvidia.hpp), no cuBLAS: exact f32 products,
//                              f32 sums, the bias in its epilogue
//   act f32, wdt bf16/f16:     in is rounded to wdt in a scratch buffer, the product written
//                              in f32 (unlike the CPU, which keeps the activations in f32)
//   act bf16/f16, wdt other:   both operands widened to f32 in scratch, f32 GEMM (exact
//                              products, as the CPU; the weight is converted on every call)
// The bias is added in f32 by a small kernel. m, n, k must each be below 2^31.
// One cuBLAS handle and one scratch buffer per (device, thread), shared with linear_quant
// (gemm_common.hpp) and created on first use; the scratch grows on demand through core::allocate (the device is synchronized before an old
// buffer is released). Asynchronous on `stream` otherwise; calls of one thread that share the
// scratch must be ordered on one stream. The caller made device_id current.
void linear(std::byte *out, const std::byte *in, llaisysDataType_t act, const std::byte *weight,
            const std::byte *bias, llaisysDataType_t wdt, size_t m, size_t n, size_t k,
            int device_id, cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
