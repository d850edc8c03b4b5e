#pragma once

#include "llaisys.h"

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::cpu {

// The flat-batch view that both KV layouts reduce to.
struct AttentionView {
    size_t n_seqs;
    const int32_t *query_start;  // [n_seqs + 1] token range of each row
    const int64_t *q_pos;        // [n_tokens] position of each query token
    const int32_t *kv_start;     // [n_seqs + 1] range of each row in kv_slots / kv_pos
    const int32_t *kv_slots;     // [kv_start[n_seqs]] cache slot of each visible entry
    const int64_t *kv_pos;       // [kv_start[n_seqs]] its position, ascending within a row
};

// The longest row's query count and visible-entry count of a view whose query_start and
// kv_start are in host memory (grid bounds of the GPU kernels).
struct ViewBounds {
    size_t max_q = 0, max_kv = 0;
};
inline ViewBounds view_bounds(size_t n_seqs, const int32_t *query_start, const int32_t *kv_start) {
    ViewBounds b;
    for (size_t s = 0; s < n_seqs; s++) {
        if (size_t(query_start[s + 1] - query_start[s]) > b.max_q) b.max_q = size_t(query_start[s + 1] - query_start[s]);
        if (size_t(kv_start[s + 1] - kv_start[s]) > b.max_kv) b.max_kv = size_t(kv_start[s + 1] - kv_start[s]);
    }
    return b;
}

// Attention of every query token over the cache entries of its row it may see, online softmax
// in f32, GQA (query head h reads kv head h / (heads / kv_heads)).
// Visibility (window >= 0): an entry at kv_pos is visible to a query at position p iff
//   kv_pos <= p  and  (window == 0  or  kv_pos > p - window)
// which is transformers' sliding_window_causal_mask_function (masking_utils:
// kv_idx > q_idx - sliding_window, with causal kv_idx <= q_idx): a query sees itself and the
// window - 1 positions before it. window 0: the whole causal context.
//   out     [n_tokens, heads, dv], rows `out_stride` elements apart (dtype act)
//   q       [n_tokens, heads, d],  rows `q_stride` elements apart (dtype act)
//   k_cache [n_slots, kv_heads, d], v_cache [n_slots, kv_heads, dv] (dtype kvdt: f32, f16, bf16,
//           or q8_0 with d and dv multiples of 32, each head's row d / 32 blocks of 34 bytes)
// A query that sees no entry gets zeros.
// Blocked (flash-attention style) kernel on the process's SIMD path (utils/cpu_isa.hpp).
void paged_attention(std::byte *out, size_t out_stride, const std::byte *q, size_t q_stride, llaisysDataType_t act,
                     const std::byte *k_cache, const std::byte *v_cache, llaisysDataType_t kvdt,
                     const AttentionView &view, size_t heads, size_t kv_heads, size_t d, size_t dv, float scale,
                     int64_t window = 0);

// The same contract, computed key by key with scalar exp: the plain reference the blocked
// kernel is checked and benchmarked against (paged_attention_reference.cpp).
void paged_attention_reference(std::byte *out, size_t out_stride, const std::byte *q, size_t q_stride,
                               llaisysDataType_t act, const std::byte *k_cache, const std::byte *v_cache,
                               llaisysDataType_t kvdt, const AttentionView &view, size_t heads, size_t kv_heads,
                               size_t d, size_t dv, float scale, int64_t window = 0);

// DTYPE_MISMATCH unless kvdt is a KV dtype the CPU kernels read; SHAPE_MISMATCH for q8_0
// with head dims that are not whole blocks.
void check_kv_dtype(llaisysDataType_t kvdt, size_t d, size_t dv);

// The visible entries of a row to a query at position p: [first, end) of the row's ascending
// positions pos [n] (the rule above; binary searches, so a window costs what it covers).
struct VisibleRange {
    size_t first, end;
};
VisibleRange visible_range(const int64_t *pos, size_t n, int64_t p, int64_t window);

}  // namespace llaisys::ops::cpu
