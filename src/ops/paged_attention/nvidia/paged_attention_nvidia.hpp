// CUDA launcher of paged attention (see /src/ops/paged_attention/cpu/paged_attention_cpu.hpp).
#pragma once

#include "../cpu/paged_attention_cpu.hpp"
#include "llaisys.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::nvidia {

// Same semantics as cpu::paged_attention (query t sees the entries of its row with
// kv_pos <= q_pos[t] and, when window > 0, kv_pos > q_pos[t] - window; online softmax in f32,
// GQA, zeros for a query that sees nothing), but
// every buffer and every array of `view` is DEVICE memory; view.n_seqs is a host value.
// n_tokens = query_start[n_seqs] (host value). max_q_len / max_kv_len: host upper bounds on a
// row's query count and visible-entry count; max_q_len must not be exceeded (tokens of a
// longer row would be skipped); max_kv_len only sizes work and may be loose.
// Rows with at most 4 queries take the decode configuration: each (token, kv head)'s keys
// split over up to 64 blocks and merged (decode_kernel.cuh; the split count from the
// multiprocessor count and max_kv_len, the partial states in the thread's scratch buffer of
// gemm_common.hpp), or one block per (token, kv head) for group sizes over 8 or head sizes
// over 128. Longer rows take the prefill configuration (query tiles of ~16 (token, head)
// rows); both are launched on `stream` when the batch mixes them.
void paged_attention(std::byte *out, size_t out_stride, const std::byte *q, size_t q_stride,
                     llaisysDataType_t act, const std::byte *k_cache, const std::byte *v_cache,
                     llaisysDataType_t kvdt, const cpu::AttentionView &view, size_t n_tokens,
                     size_t max_q_len, size_t max_kv_len, size_t heads, size_t kv_heads, size_t d,
                     size_t dv, float scale, cudaStream_t stream, int64_t window = 0);

// The BLOCK layout's view as the engine gives it (DEVICE arrays; n_seqs, max_blocks and
// block_size host values): key j of row s (position j) in slot
// block_tables[s * max_blocks + j / block_size] * block_size + j % block_size, context_lens[s]
// keys a row. Nothing is flattened per key on the host.
struct BlockTableView {
    size_t n_seqs;
    const int32_t *query_start;   // [n_seqs + 1]
    const int64_t *q_pos;         // [n_tokens]
    const int32_t *block_tables;  // [n_seqs, max_blocks]
    const int32_t *context_lens;  // [n_seqs]
    size_t max_blocks, block_size;
};

// paged_attention over a BlockTableView: the same kernels and configurations; a query at
// position p sees positions 0 ..= p of its row (and, with a window, > p - window), which is
// what the flattened view of the same tables gives. The batch must have been validated
// (positions below context_lens, table entries inside the pool).
void paged_attention(std::byte *out, size_t out_stride, const std::byte *q, size_t q_stride,
                     llaisysDataType_t act, const std::byte *k_cache, const std::byte *v_cache,
                     llaisysDataType_t kvdt, const BlockTableView &view, size_t n_tokens,
                     size_t max_q_len, size_t max_kv_len, size_t heads, size_t kv_heads, size_t d,
                     size_t dv, float scale, cudaStream_t stream, int64_t window = 0);

}  // namespace llaisys::ops::nvidia
