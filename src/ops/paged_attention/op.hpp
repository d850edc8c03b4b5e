#pragma once

#include "../../tensor/tensor.hpp"
#include "cpu/paged_attention_cpu.hpp"

namespace llaisys::ops {

// Attention over cache slots (see include/llaisys/ops.h, llaisysPagedAttention). window > 0:
// sliding window, a query at p sees kv_pos in (p - window, p] (cpu/paged_attention_cpu.hpp);
// 0: the whole causal context; negative: INVALID_ARGUMENT.
void paged_attention(Tensor &out, const Tensor &q, const Tensor &k_cache, const Tensor &v_cache, const Tensor &q_pos,
                     const Tensor &query_start, const Tensor &kv_start, const Tensor &kv_slots, const Tensor &kv_pos,
                     float scale, int64_t window = 0);

// The same, computed by the plain per-key reference kernel (tests and benchmarks compare).
void paged_attention_reference(Tensor &out, const Tensor &q, const Tensor &k_cache, const Tensor &v_cache,
                               const Tensor &q_pos, const Tensor &query_start, const Tensor &kv_start,
                               const Tensor &kv_slots, const Tensor &kv_pos, float scale, int64_t window = 0);

// Checks an attention view against the sizes it indexes (ranges monotonic, slots in
// range, positions ascending); throws INVALID_ARGUMENT / OUT_OF_RANGE naming the fault.
void check_attention_view(const cpu::AttentionView &view, size_t n_tokens, size_t n_slots);

}  // namespace llaisys::ops
