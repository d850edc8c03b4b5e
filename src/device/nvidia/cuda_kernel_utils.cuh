// Device-side helpers shared by the CUDA kernels under src/ops/<op>/nvidia/ (nvcc only).
//
// - Storage types are the CPU's (llaisys::bf16_t, fp16_t: 16 raw bits), so a kernel template
//   is instantiated with the same tags as dispatch_float hands out on the host.
// - to_float / from_float<T> convert exactly as utils/types.hpp does on the CPU: widening is
//   exact, narrowing rounds to nearest even, overflows to inf, keeps subnormals, and turns a
//   NaN into the same quiet NaN bits (bf16: payload | 0x40, f16: sign | 0x7e00). Kernels are
//   built without fast-math, so f32 arithmetic is IEEE round-to-nearest without flush-to-zero.
// - Reductions: warp_* use shuffles over a full warp; block_* combine the warps through a
//   small shared array and return the result to every thread (the block size must be a
//   multiple of 32, at most 1024).
#pragma once

#include "../../utils/types.hpp"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::device::nvidia {

constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16_t x) { return __uint_as_float(uint32_t(x.bits) << 16); }
__device__ __forceinline__ float to_float(fp16_t x) {
    if ((x.bits & 0x7c00u) == 0x7c00u && (x.bits & 0x3ffu)) {  // NaN: the payload as the CPU keeps it
        return __uint_as_float(uint32_t(x.bits & 0x8000u) << 16 | 0x7f800000u | uint32_t(x.bits & 0x3ffu) << 13);
    }
    return __half2float(__ushort_as_half(x.bits));
}

template <class T>
__device__ __forceinline__ T from_float(float x);

template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }

template <>
__device__ __forceinline__ bf16_t from_float<bf16_t>(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{uint16_t((u >> 16) | 0x40u)};  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return bf16_t{uint16_t(u >> 16)};
}

template <>
__device__ __forceinline__ fp16_t from_float<fp16_t>(float x) {
    uint32_t u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return fp16_t{uint16_t(((u >> 16) & 0x8000u) | 0x7e00u)};
    return fp16_t{__half_as_ushort(__float2half_rn(x))};  // round to nearest even, subnormals kept
}

// x86's NaN rules for one f32 multiply, add or subtract, for kernels that must give the CPU's
// bits (dequantize): a NaN operand comes out quieted (the first, if both are), and an invalid
// operation (0 x inf, inf - inf) gives the default NaN 0xffc00000. The GPU itself returns
// 0x7fffffff for every NaN result, which a 16-bit output would round to other bits than the
// CPU's. Round to nearest, never contracted into an FMA.
__device__ __forceinline__ float x86_nan(float a, float b, float r) {
    if (!isnan(r)) return r;
    if (isnan(a)) return __uint_as_float(__float_as_uint(a) | 0x00400000u);
    if (isnan(b)) return __uint_as_float(__float_as_uint(b) | 0x00400000u);
    return __uint_as_float(0xffc00000u);
}
__device__ __forceinline__ float x86_mul(float a, float b) { return x86_nan(a, b, __fmul_rn(a, b)); }
__device__ __forceinline__ float x86_sub(float a, float b) { return x86_nan(a, b, __fsub_rn(a, b)); }
__device__ __forceinline__ float x86_add(float a, float b) { return x86_nan(a, b, __fadd_rn(a, b)); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(kFullMask, v, off);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, off));
    return v;
}

// Sum over the block, returned to every thread. `scratch` is shared memory of >= 32 floats;
// it may be reused right after the call returns (the call ends with a barrier).
__device__ __forceinline__ float block_sum(float v, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = lane < n_warps ? scratch[lane] : 0.0f;
    r = warp_sum(r);
    __syncthreads();
    return r;
}

__device__ __forceinline__ float block_max(float v, float *scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float r = lane < n_warps ? scratch[lane] : -INFINITY;
    r = warp_max(r);
    __syncthreads();
    return r;
}

inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

// Blocks for a grid-stride loop over n items: enough to fill the GPU, never past the
// grid.x limit (the loop covers the rest).
inline unsigned grid_for(size_t n, unsigned threads) {
    size_t blocks = ceil_div(n, threads);
    const size_t cap = size_t(1) << 20;
    return unsigned(blocks < cap ? blocks : cap);
}

// Blocks for a one-block-per-row kernel that grid-strides over rows beyond 65536.
inline unsigned row_blocks(size_t rows) { return unsigned(rows < 65536 ? rows : 65536); }

// Threads for a block that walks a row of `width` elements: whole warps, at most 256.
inline unsigned row_threads(size_t width) { return width >= 256 ? 256 : 32 * unsigned(ceil_div(width, 32)); }

}  // namespace llaisys::device::nvidia
