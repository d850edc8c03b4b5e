// CUDA launcher of RoPE (see /src/ops/rope/cpu/rope_cpu.hpp; same semantics, DEVICE buffers).
#pragma once

#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// out/in [n, heads, d] with `stride` elements between tokens, pos [n] (DEVICE, may be
// negative); HF rotate-half RoPE with base theta, angles in f32. out may alias in.
void rope(std::byte *out, const std::byte *in, const int64_t *pos, llaisysDataType_t dtype, size_t n,
          size_t heads, size_t d, size_t stride, float theta, cudaStream_t stream);

// The same with the frequency table inv_freq [d/2] (DEVICE, rope_freqs.hpp) and cos and sin
// multiplied by attn_scale.
void rope(std::byte *out, const std::byte *in, const int64_t *pos, llaisysDataType_t dtype, size_t n,
          size_t heads, size_t d, size_t stride, const float *inv_freq, float attn_scale, cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
