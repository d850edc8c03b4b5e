#include "padded_decode.hpp"

#include <algorithm>
#include <cstring>

namespace llaisys::models {

size_t PaddedDecode::bucket(size_t n) {
    if (n == 0 || n > kMaxRows) return 0;
    if (n <= 4) return n == 3 ? 4 : n;
    return (n + 7) / 8 * 8;
}

size_t PaddedDecode::width(size_t blocks) {
    size_t w = kMinWidth;
    while (w < blocks && w <= kMaxWidth) w *= 2;
    return w <= kMaxWidth ? w : 0;
}

PaddedShape PaddedDecode::shape_of(const llaisysBatch_t &b, size_t block_size) {
    const size_t n = b.n_seqs;
    if (block_size == 0 || !b.block_tables || !b.context_lens || b.n_tokens != n || b.n_sample != n) return {};
    const size_t rows = bucket(n);
    if (rows == 0) return {};
    size_t blocks = 0;
    for (size_t s = 0; s < n; s++) {
        if (b.query_start[s + 1] - b.query_start[s] != 1 || b.sample_rows[s] != int32_t(s)) return {};
        blocks = std::max(blocks, (size_t(b.context_lens[s]) + block_size - 1) / block_size);
    }
    const size_t w = width(blocks);
    if (w == 0) return {};
    return {rows, w};
}

const llaisysBatch_t &PaddedDecode::pad(const llaisysBatch_t &b, PaddedShape shape) {
    const size_t n = b.n_seqs, B = shape.rows, W = shape.width;
    token_ids_.assign(B, 0);
    positions_.assign(B, 0);
    slots_.assign(B, -1);
    context_lens_.assign(B, 0);
    sample_rows_.resize(B);
    query_start_.resize(B + 1);
    block_tables_.assign(B * W, 0);
    std::copy(b.token_ids, b.token_ids + n, token_ids_.begin());
    std::copy(b.positions, b.positions + n, positions_.begin());
    std::copy(b.slot_mapping, b.slot_mapping + n, slots_.begin());
    std::copy(b.context_lens, b.context_lens + n, context_lens_.begin());
    for (size_t i = 0; i <= B; i++) query_start_[i] = int32_t(i);
    for (size_t i = 0; i < B; i++) sample_rows_[i] = int32_t(i);
    const size_t cols = std::min(b.max_blocks, W);  // the columns a row uses fit in W (shape_of)
    for (size_t s = 0; s < n; s++) {
        std::memcpy(block_tables_.data() + s * W, b.block_tables + s * b.max_blocks, cols * sizeof(int32_t));
    }
    padded_ = llaisysBatch_t{};
    padded_.n_tokens = B;
    padded_.token_ids = token_ids_.data();
    padded_.positions = positions_.data();
    padded_.n_seqs = B;
    padded_.query_start = query_start_.data();
    padded_.slot_mapping = slots_.data();
    padded_.block_tables = block_tables_.data();
    padded_.max_blocks = W;
    padded_.context_lens = context_lens_.data();
    padded_.n_sample = B;
    padded_.sample_rows = sample_rows_.data();
    return padded_;
}

}  // namespace llaisys::models
