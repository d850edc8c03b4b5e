// Mixture-of-experts routing on the CPU: the top-k of the router, the grouping of the routed
// (token, choice) pairs by expert, and the gather / weighted combine around the experts'
// linears. The experts themselves run through the linear kernels (linear_cpu.hpp,
// quant_weight.hpp), one call per expert over its rows.
#pragma once

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::cpu {

// For each token t of logits [n, E] (f32): p = softmax(logits[t]); ids[t, :] = the k largest
// (largest first, the lower index first on ties), weights[t, :] = their p, divided by their sum
// when norm. ids [n, k], weights [n, k]. Needs 1 <= k <= E.
void moe_topk(int32_t *ids, float *weights, const float *logits, size_t n, size_t E, size_t k, bool norm);

// The pairs i = t * k + j of ids [n k] ordered by expert (stable: by token within an expert):
// offsets [E + 1] (expert e's pairs are positions [offsets[e], offsets[e + 1])), row_of
// [n k] (the token of the pair at each position), pos [n k] (the position of pair i).
void moe_group(int32_t *offsets, int32_t *row_of, int32_t *pos, const int32_t *ids, size_t n, size_t E, size_t k);

// xg [n k, d] = x[row_of[i]] for each position i (x [n, d]).
void moe_gather(float *xg, const float *x, const int32_t *row_of, size_t nk, size_t d);

// out [n, d] = sum over j of weights[t, j] * y[pos[t k + j]] (y [n k, d], weights [n, k]).
void moe_combine(float *out, const float *y, const float *weights, const int32_t *pos, size_t n, size_t k, size_t d);

// out [n, d] += sigmoid(gate[t]) * y [n, d] (gate [n], one per row).
void add_sigmoid_gated(float *out, const float *y, const float *gate, size_t n, size_t d);

}  // namespace llaisys::ops::cpu
