// CUDA launchers of the mixture-of-experts gather and combine around the experts' linears (see
// /src/ops/moe/cpu/moe_cpu.hpp: same semantics, DEVICE buffers, f32). The routing itself (top-k
// and the grouping by expert) runs on the host with the CPU's code (the NVIDIA backend's
// moe_route), so the route these read is the CPU's to the bit. Asynchronous on `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// xg [nk, d] = x[row_of[i]] for each position i (x [n, d], row_of [nk]).
void moe_gather(float *xg, const float *x, const int32_t *row_of, size_t nk, size_t d, cudaStream_t stream);

// out [n, d] = sum over j < k, in order j = 0, 1, ..., of weights[t, j] * y[pos[t k + j]]
// (y [n k, d], weights [n, k], pos [n k]): the CPU's products and sums, never contracted into
// an FMA, so equal y gives equal bits.
void moe_combine(float *out, const float *y, const float *weights, const int32_t *pos, size_t n, size_t k, size_t d,
                 cudaStream_t stream);

// out [n, d] += sigmoid(gate[t]) * y [n, d] (gate [n], one per row), the CPU's expression order.
void add_sigmoid_gated(float *out, const float *y, const float *gate, size_t n, size_t d, cudaStream_t stream);

}  // namespace llaisys::ops::nvidia
