// Step validation and KV placement, shared by every device: a malformed batch is refused
// before anything is written, and both KV layouts reduce to one attention view (KvPlan).
#include "decoder.hpp"

#include "../../utils/checked.hpp"
#include "../../utils/error.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace llaisys::models {

void Model::validate_batch(const kv::KVCache &cache, const llaisysBatch_t &b) const {
    const size_t n = b.n_tokens;
    LLAISYS_CHECK_ARG(n > 0 && b.n_seqs > 0, "batch: needs at least one token and one row");
    LLAISYS_CHECK_ARG(n <= size_t(INT32_MAX), "batch: n_tokens ", n, " exceeds ", INT32_MAX, " (query_start is int32)");
    LLAISYS_CHECK_ARG(b.n_seqs <= n, "batch: ", b.n_seqs, " rows for ", n, " tokens (every row needs a token)");
    LLAISYS_CHECK_ARG(b.token_ids && b.positions && b.query_start, "batch: token_ids, positions and query_start are required");
    // query_start first: every later loop indexes tokens through it
    LLAISYS_CHECK_ARG(b.query_start[0] == 0, "batch: query_start[0] must be 0, got ", b.query_start[0]);
    for (size_t s = 0; s < b.n_seqs; s++) {
        LLAISYS_CHECK_ARG(b.query_start[s] < b.query_start[s + 1], "batch: query_start must increase (row ", s,
                          " has no tokens: query_start[", s, "] = ", b.query_start[s], ", query_start[", s + 1,
                          "] = ", b.query_start[s + 1], ")");
    }
    LLAISYS_CHECK_ARG(size_t(b.query_start[b.n_seqs]) == n, "batch: query_start must end at n_tokens (", n,
                      "), got ", b.query_start[b.n_seqs]);
    for (size_t i = 0; i < n; i++) {
        LLAISYS_CHECK(b.token_ids[i] >= 0 && size_t(b.token_ids[i]) < c_.p.vocab_size, LLAISYS_STATUS_OUT_OF_RANGE,
                      "batch: token_ids[", i, "] = ", b.token_ids[i], " is outside the vocabulary [0, ",
                      c_.p.vocab_size, ")");
        LLAISYS_CHECK(b.positions[i] >= 0, LLAISYS_STATUS_OUT_OF_RANGE, "batch: positions[", i, "] = ", b.positions[i],
                      " is negative");
    }
    for (size_t s = 0; s < b.n_seqs; s++) {
        for (int32_t t = b.query_start[s] + 1; t < b.query_start[s + 1]; t++) {
            LLAISYS_CHECK_ARG(b.positions[t] > b.positions[t - 1], "batch: positions must increase within row ", s);
        }
    }
    LLAISYS_CHECK_ARG(b.n_sample == 0 || b.sample_rows, "batch: sample_rows is NULL");
    for (size_t i = 0; i < b.n_sample; i++) {
        LLAISYS_CHECK(b.sample_rows[i] >= 0 && size_t(b.sample_rows[i]) < n, LLAISYS_STATUS_OUT_OF_RANGE,
                      "batch: sample_rows[", i, "] = ", b.sample_rows[i], " is not a token of the batch");
    }

    if (cache.layout() == LLAISYS_KV_LAYOUT_BLOCK) {
        const size_t bs = cache.params().block_size, n_blocks = cache.n_slots() / bs;
        LLAISYS_CHECK_ARG(b.slot_mapping && b.block_tables && b.context_lens,
                          "batch: the BLOCK layout needs slot_mapping, block_tables and context_lens");
        checked_mul(b.n_seqs, b.max_blocks, "batch: n_seqs * max_blocks");
        size_t visible = 0;  // KV entries the attention view will list (int32 offsets)
        for (size_t s = 0; s < b.n_seqs; s++) {
            size_t q_len = size_t(b.query_start[s + 1] - b.query_start[s]);
            LLAISYS_CHECK_ARG(b.context_lens[s] >= 0 && size_t(b.context_lens[s]) >= q_len, "batch: context_lens[", s,
                              "] is shorter than the row's ", q_len, " query tokens");
            size_t ctx = size_t(b.context_lens[s]);
            visible += ctx;
            LLAISYS_CHECK_ARG(visible <= size_t(INT32_MAX), "batch: context_lens add up to more than ", INT32_MAX);
            LLAISYS_CHECK_ARG((ctx + bs - 1) / bs <= b.max_blocks, "batch: row ", s, " needs ", (ctx + bs - 1) / bs,
                              " blocks but block_tables has ", b.max_blocks, " columns");
            const int32_t *table = b.block_tables + s * b.max_blocks;
            for (size_t j = 0; j < (ctx + bs - 1) / bs; j++) {
                LLAISYS_CHECK(table[j] >= 0 && size_t(table[j]) < n_blocks, LLAISYS_STATUS_OUT_OF_RANGE, "batch: block ",
                              table[j], " of row ", s, " is outside the pool of ", n_blocks, " blocks");
            }
            for (size_t i = 0; i < q_len; i++) {
                size_t t = size_t(b.query_start[s]) + i;
                int64_t want_pos = int64_t(ctx - q_len + i);
                LLAISYS_CHECK_ARG(b.positions[t] == want_pos, "batch: token ", t, " of row ", s, " has position ",
                                  b.positions[t], " but the BLOCK layout puts it at ", want_pos, " (context_len ", ctx, ")");
                int64_t slot = int64_t(table[size_t(want_pos) / bs]) * int64_t(bs) + want_pos % int64_t(bs);
                LLAISYS_CHECK_ARG(b.slot_mapping[t] == slot, "batch: slot_mapping[", t, "] = ", b.slot_mapping[t],
                                  " disagrees with the block table (slot ", slot, ")");
            }
        }
    } else {
        LLAISYS_CHECK_ARG(b.seq_ids, "batch: the SLOT layout needs seq_ids");
        for (size_t s = 0; s < b.n_seqs; s++) {
            LLAISYS_CHECK(b.seq_ids[s] >= 0 && b.seq_ids[s] < LLAISYS_KV_MAX_SEQS, LLAISYS_STATUS_OUT_OF_RANGE,
                          "batch: seq_ids[", s, "] = ", b.seq_ids[s], " is outside [0, ", LLAISYS_KV_MAX_SEQS, ")");
            for (size_t r = 0; r < s; r++) {
                LLAISYS_CHECK_ARG(b.seq_ids[r] != b.seq_ids[s], "batch: seq id ", b.seq_ids[s], " appears in two rows");
            }
        }
    }
}

llaisysBatch_t Model::with_embeds(const llaisysBatch_t &b, const llaisysBatchEmbeds_t *e) {
    if (e == nullptr) return b;
    constexpr size_t kMin = offsetof(llaisysBatchEmbeds_t, data) + sizeof(e->data);
    LLAISYS_CHECK_ARG(e->struct_size >= kMin, "embeds: struct_size ", e->struct_size, " is smaller than ", kMin,
                      " (set it to sizeof(llaisysBatchEmbeds_t))");
    const size_t n = b.n_tokens, m = e->n_rows, H = c_.p.hidden_size;
    if (m == 0) return b;
    LLAISYS_CHECK_ARG(e->rows && e->data, "embeds: rows and data are required when n_rows (", m, ") > 0");
    LLAISYS_CHECK_ARG(m <= n, "embeds: n_rows ", m, " exceeds the batch's n_tokens ", n);
    LLAISYS_CHECK_ARG(b.token_ids != nullptr, "batch: token_ids, positions and query_start are required");
    for (size_t j = 0; j < m; j++) {
        LLAISYS_CHECK(e->rows[j] >= 0 && size_t(e->rows[j]) < n, LLAISYS_STATUS_OUT_OF_RANGE, "embeds: rows[", j,
                      "] = ", e->rows[j], " is not a token of the batch (n_tokens ", n, ")");
        LLAISYS_CHECK_ARG(j == 0 || e->rows[j] > e->rows[j - 1], "embeds: rows must increase (rows[", j, "] = ",
                          e->rows[j], " after ", e->rows[j - 1], ")");
    }
    checked_mul(m, H, "embeds: n_rows * hidden_size");
    for (size_t j = 0; j < m; j++) {
        const float *row = e->data + j * H;
        for (size_t k = 0; k < H; k++) {
            LLAISYS_CHECK_ARG(std::isfinite(row[k]), "embeds: data[", j, ", ", k, "] (the row of token ", e->rows[j],
                              ") is not finite");
        }
    }
    ids_.assign(b.token_ids, b.token_ids + n);
    for (size_t j = 0; j < m; j++) ids_[size_t(e->rows[j])] = 0;  // ignored: the lookup's row is overwritten
    llaisysBatch_t out = b;
    out.token_ids = ids_.data();
    return out;
}

bool Model::plan_kv(kv::KVCache &cache, const llaisysBatch_t &b) {
    KvPlan &rs = plan_;
    rs.kv_start.assign(1, 0);
    rs.kv_slots.clear();
    rs.kv_pos.clear();
    rs.write_slot.resize(b.n_tokens);
    rs.block_tables = rs.context_lens = nullptr;
    if (cache.layout() == LLAISYS_KV_LAYOUT_BLOCK) {
        const size_t bs = cache.params().block_size;
        std::memcpy(rs.write_slot.data(), b.slot_mapping, b.n_tokens * sizeof(int64_t));
        if (be_->reads_block_tables()) {  // the GPU reads the tables: nothing flattened per key
            rs.block_tables = b.block_tables;
            rs.context_lens = b.context_lens;
            rs.max_blocks = b.max_blocks;
            rs.block_size = bs;
            return true;
        }
        for (size_t s = 0; s < b.n_seqs; s++) {
            const int32_t *table = b.block_tables + s * b.max_blocks;
            for (int32_t p = 0; p < b.context_lens[s]; p++) {
                rs.kv_slots.push_back(table[size_t(p) / bs] * int32_t(bs) + p % int32_t(bs));
                rs.kv_pos.push_back(p);
            }
            rs.kv_start.push_back(int32_t(rs.kv_slots.size()));
        }
        return true;
    }
    kv::UnifiedCells &cells = cache.cells();
    for (size_t s = 0; s < b.n_seqs; s++) {
        int64_t last = cells.seq_pos_max(b.seq_ids[s]);
        LLAISYS_CHECK_ARG(b.positions[b.query_start[s]] > last, "batch: row ", s, " (seq ", b.seq_ids[s],
                          ") starts at position ", b.positions[b.query_start[s]], " but the cache already holds position ",
                          last, " of that seq (remove it with seq_rm first)");
    }
    std::vector<int32_t> free_cells;
    if (!cells.find_free(b.n_tokens, free_cells)) return false;
    for (size_t s = 0; s < b.n_seqs; s++) {
        for (int32_t t = b.query_start[s]; t < b.query_start[s + 1]; t++) {
            cells.assign(size_t(free_cells[size_t(t)]), b.seq_ids[s], b.positions[t]);
            rs.write_slot[size_t(t)] = free_cells[size_t(t)];
        }
    }
    for (size_t s = 0; s < b.n_seqs; s++) {
        cells.visible(b.seq_ids[s], rs.kv_slots, rs.kv_pos);
        rs.kv_start.push_back(int32_t(rs.kv_slots.size()));
    }
    return true;
}

}  // namespace llaisys::models
