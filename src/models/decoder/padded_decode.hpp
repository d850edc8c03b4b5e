// Decode steps at fixed shapes: the host half of CUDA graphs (doc/nvidia.md, "CUDA graphs").
//
// A graph replays its kernels with the arguments they were captured with: the row count, every
// pointer, the attention's split count. So a pure decode step (every row one token, sampled in
// row order, the BLOCK layout) is padded to a shape fixed per graph: its rows to a bucket (1,
// 2, 4, then multiples of 8), its block tables to a power-of-two width. The step's arrays then
// have the same sizes for every step of that shape, and the backend keeps them at the same
// addresses. Padding rows are inert:
//   - token 0 at position 0;
//   - write slot -1: the K/V store skips them;
//   - context length 0: attention sees no key and writes zeros;
//   - sampled by no one: their logits are computed and dropped.
// Nothing here touches a device, so the whole bookkeeping is tested on the CPU
// (test/cpp/test_padded_decode.cpp), and the CPU runs padded steps itself under
// LLAISYS_PADDED_DECODE=1 (test/parity/test_padded_decode.py).
#pragma once

#include "llaisys/models/model.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace llaisys::models {

// The shape a padded step is captured and replayed at.
struct PaddedShape {
    size_t rows = 0;   // a bucket (PaddedDecode::bucket)
    size_t width = 0;  // block-table columns, a power of two
    bool operator==(const PaddedShape &o) const { return rows == o.rows && width == o.width; }
    bool operator<(const PaddedShape &o) const { return rows != o.rows ? rows < o.rows : width < o.width; }
};

class PaddedDecode {
public:
    static constexpr size_t kMaxRows = 512;   // wider decode steps run as they come
    static constexpr size_t kMinWidth = 16;   // block-table columns of the narrowest shape
    static constexpr size_t kMaxWidth = 8192; // 128k keys at 16 a block; longer rows run as they come

    // The bucket of n rows: 1, 2, 4, then the next multiple of 8; 0 when n is 0 or over kMaxRows.
    static size_t bucket(size_t n);
    // The table width for rows that need `blocks` blocks: the next power of two at least
    // kMinWidth; 0 over kMaxWidth.
    static size_t width(size_t blocks);

    // The shape of a validated batch b when it is a pure decode step of the BLOCK layout
    // (block_size > 0) that padding serves: every row one token, every row sampled in row
    // order (sample_rows[i] = i), within kMaxRows and kMaxWidth. {0, 0} otherwise.
    static PaddedShape shape_of(const llaisysBatch_t &b, size_t block_size);

    // b padded to `shape` (from shape_of(b)) in this object's arrays: n_tokens = n_seqs =
    // n_sample = shape.rows, max_blocks = shape.width. The rows of b come first, unchanged;
    // then the padding rows. Valid until the next pad().
    const llaisysBatch_t &pad(const llaisysBatch_t &b, PaddedShape shape);

private:
    std::vector<int64_t> token_ids_, positions_, slots_;
    std::vector<int32_t> query_start_, block_tables_, context_lens_, sample_rows_;
    llaisysBatch_t padded_{};
};

}  // namespace llaisys::models
