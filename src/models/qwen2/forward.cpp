// One engine step: validate the flat batch, place its K/V, run every layer over all tokens
// at once, then norm + lm_head + sampling for the sample rows only.
#include "model.hpp"

#include "../../ops/elementwise/cpu/elementwise_cpu.hpp"
#include "../../ops/embedding/cpu/embedding_cpu.hpp"
#include "../../ops/linear/cpu/linear_cpu.hpp"
#include "../../ops/paged_attention/op.hpp"
#include "../../ops/rms_norm/cpu/rms_norm_cpu.hpp"
#include "../../ops/rope/cpu/rope_cpu.hpp"
#include "../../ops/swiglu/cpu/swiglu_cpu.hpp"
#include "../../sampling/sampler.hpp"
#include "../../utils/checked.hpp"
#include "../../utils/error.hpp"
#include "../../utils/types.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace llaisys::models::qwen2 {
namespace {

std::byte *bytes(std::vector<float> &v) { return reinterpret_cast<std::byte *>(v.data()); }
std::byte *bytes(float *p) { return reinterpret_cast<std::byte *>(p); }

template <class T>
void grow(std::vector<T> &v, size_t n) {
    if (v.size() < n) v.resize(n);
}

// f32 row -> KV storage dtype
void store_row(std::byte *dst, llaisysDataType_t dt, const float *src, size_t n) {
    dispatch_float(dt, [&](auto tag) {
        using T = decltype(tag);
        T *d = reinterpret_cast<T *>(dst);
        for (size_t i = 0; i < n; i++) d[i] = from_f32<T>(src[i]);
    });
}

}  // namespace

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
        LLAISYS_CHECK(b.token_ids[i] >= 0 && size_t(b.token_ids[i]) < meta_.vocab_size, LLAISYS_STATUS_OUT_OF_RANGE,
                      "batch: token_ids[", i, "] = ", b.token_ids[i], " is outside the vocabulary [0, ",
                      meta_.vocab_size, ")");
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

bool Model::plan_kv(kv::KVCache &cache, const llaisysBatch_t &b) {
    RunState &rs = rs_;
    rs.kv_start.assign(1, 0);
    rs.kv_slots.clear();
    rs.kv_pos.clear();
    rs.write_slot.resize(b.n_tokens);
    if (cache.layout() == LLAISYS_KV_LAYOUT_BLOCK) {
        const size_t bs = cache.params().block_size;
        std::memcpy(rs.write_slot.data(), b.slot_mapping, b.n_tokens * sizeof(int64_t));
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

void Model::reserve(size_t n, size_t n_sample) {
    const size_t H = meta_.hidden_size, I = meta_.intermediate_size, hd = meta_.head_dim;
    const size_t qkv_dim = (meta_.n_heads + 2 * meta_.n_kv_heads) * hd;
    if (n > rs_.capacity_tokens) {
        checked_mul(n, std::max({H, qkv_dim, 2 * I}), "step buffers (n_tokens * widest row)");
        grow(rs_.x, n * H);
        grow(rs_.h, n * H);
        grow(rs_.qkv, n * qkv_dim);
        grow(rs_.attn, n * meta_.n_heads * hd);
        grow(rs_.proj, n * H);
        grow(rs_.gate_up, n * 2 * I);
        grow(rs_.act, n * I);
        rs_.capacity_tokens = n;
    }
    if (n_sample > rs_.capacity_samples) {
        checked_mul(n_sample, std::max(H, meta_.vocab_size), "step buffers (n_sample * vocab)");
        grow(rs_.xs, n_sample * H);
        grow(rs_.logits, n_sample * meta_.vocab_size);
        rs_.capacity_samples = n_sample;
    }
}

void Model::forward_layers(kv::KVCache &cache, const llaisysBatch_t &b) {
    const size_t n = b.n_tokens, H = meta_.hidden_size, I = meta_.intermediate_size, hd = meta_.head_dim;
    const size_t nh = meta_.n_heads, nkv = meta_.n_kv_heads;
    const size_t q_dim = nh * hd, kv_dim = nkv * hd, qkv_dim = q_dim + 2 * kv_dim;
    const llaisysDataType_t f32 = LLAISYS_DTYPE_F32, wdt = meta_.dtype;
    const float scale = 1.0f / std::sqrt(float(hd));
    RunState &rs = rs_;
    const ops::cpu::AttentionView view{b.n_seqs, b.query_start, b.positions, rs.kv_start.data(), rs.kv_slots.data(),
                                       rs.kv_pos.data()};
    const size_t kv_row_bytes = kv_dim * dtype_size(cache.dtype());

    if (w_.embed) {
        ops::cpu::embedding(bytes(rs.x), f32, b.token_ids, w_.embed->data(), wdt, n, meta_.vocab_size, H);
    } else {  // tied: the embedding is stored once, as the packed lm_head (ids checked above)
        for (size_t t = 0; t < n; t++) w_.lm_head.packed->row_f32(size_t(b.token_ids[t]), rs.x.data() + t * H);
    }
    // x is the residual stream, h its normalised copy. Each residual add is fused with the
    // norm that follows it (post_norm of this layer, in_norm of the next).
    ops::cpu::rms_norm(bytes(rs.h), bytes(rs.x), f32, w_.layers[0].in_norm->data(), wdt, n, H, meta_.rms_norm_eps);
    for (size_t l = 0; l < meta_.n_layers; l++) {
        const LayerWeights &L = w_.layers[l];
        // attention block (h = in_norm(x) already)
        ops::cpu::linear_packed(rs.qkv.data(), rs.h.data(), *L.qkv_w.packed, L.qkv_b->data(), n);  // [n, qkv_dim]
        ops::cpu::rope(bytes(rs.qkv), bytes(rs.qkv), b.positions, f32, n, nh, hd, qkv_dim, meta_.rope_theta);
        ops::cpu::rope(bytes(rs.qkv.data() + q_dim), bytes(rs.qkv.data() + q_dim), b.positions, f32, n, nkv, hd,
                       qkv_dim, meta_.rope_theta);
        for (size_t t = 0; t < n; t++) {  // K/V of this step into the cache
            size_t slot = size_t(rs.write_slot[t]);
            const float *row = rs.qkv.data() + t * qkv_dim;
            store_row(cache.k(l) + slot * kv_row_bytes, cache.dtype(), row + q_dim, kv_dim);
            store_row(cache.v(l) + slot * kv_row_bytes, cache.dtype(), row + q_dim + kv_dim, kv_dim);
        }
        ops::cpu::paged_attention(bytes(rs.attn), q_dim, bytes(rs.qkv), qkv_dim, f32, cache.k(l), cache.v(l),
                                  cache.dtype(), view, nh, nkv, hd, hd, scale);
        ops::cpu::linear_packed(rs.proj.data(), rs.attn.data(), *L.o_w.packed, nullptr, n);  // [n, H]
        // MLP block: x += o_proj; h = post_norm(x)
        ops::cpu::add_rms_norm(bytes(rs.h), bytes(rs.x), bytes(rs.proj), f32, L.post_norm->data(), wdt, n, H,
                               meta_.rms_norm_eps);
        ops::cpu::linear_packed(rs.gate_up.data(), rs.h.data(), *L.gate_up_w.packed, nullptr, n);  // [n, 2 I]
        ops::cpu::swiglu(bytes(rs.act), bytes(rs.gate_up), bytes(rs.gate_up.data() + I), f32, n, I, 2 * I, I);
        ops::cpu::linear_packed(rs.proj.data(), rs.act.data(), *L.down_w.packed, nullptr, n);  // [n, H]
        if (l + 1 < meta_.n_layers) {  // x += down_proj; h = next layer's in_norm(x)
            ops::cpu::add_rms_norm(bytes(rs.h), bytes(rs.x), bytes(rs.proj), f32, w_.layers[l + 1].in_norm->data(),
                                   wdt, n, H, meta_.rms_norm_eps);
        } else {  // the final norm runs on the sampled rows only (step)
            ops::cpu::binary(ops::cpu::BinaryOp::Add, bytes(rs.x), bytes(rs.x), bytes(rs.proj), f32, n * H);
        }
    }
}

llaisysStatus_t Model::step(kv::KVCache &cache, const llaisysBatch_t &b, const llaisysSamplingParams_t *params,
                            const llaisysStepOutput_t &out) {
    const kv::KVCache &ccache = cache;
    const auto &cp = ccache.params();
    LLAISYS_CHECK(cp.n_layers == meta_.n_layers && cp.n_kv_heads == meta_.n_kv_heads && cp.head_dim == meta_.head_dim,
                  LLAISYS_STATUS_SHAPE_MISMATCH, "the KV cache was shaped for another model");
    LLAISYS_CHECK(cp.device == device_ && cp.device_id == device_id_, LLAISYS_STATUS_DEVICE_MISMATCH,
                  "the KV cache is on another device than the model");
    auto missing = missing_weights();
    LLAISYS_CHECK_ARG(missing.empty(), missing.size(), " weight(s) are not set, e.g. '",
                      missing.empty() ? "" : missing.front(), "'");
    validate_batch(ccache, b);
    const size_t H = meta_.hidden_size, V = meta_.vocab_size;
    const llaisysSampleOutput_t &so = out.sample;
    if (params && b.n_sample) {
        sampling::check_output(so, b.n_sample);
        for (size_t i = 0; i < b.n_sample; i++) sampling::check_params(params[i], V, so.top_capacity);
    }
    if (!plan_kv(cache, b)) {
        return LLAISYS_STATUS_NO_KV_SPACE;
    }
    if (device_ == LLAISYS_DEVICE_NVIDIA) {
        step_nvidia(cache, b, params, out);
        return LLAISYS_STATUS_OK;
    }
    reserve(b.n_tokens, b.n_sample);
    forward_layers(cache, b);
    if (b.n_sample == 0) return LLAISYS_STATUS_OK;

    for (size_t i = 0; i < b.n_sample; i++) {
        std::memcpy(rs_.xs.data() + i * H, rs_.x.data() + size_t(b.sample_rows[i]) * H, H * sizeof(float));
    }
    const llaisysDataType_t f32 = LLAISYS_DTYPE_F32;
    ops::cpu::rms_norm(bytes(rs_.xs), bytes(rs_.xs), f32, w_.final_norm->data(), meta_.dtype, b.n_sample, H,
                       meta_.rms_norm_eps);
    if (out.hidden) std::memcpy(out.hidden, rs_.xs.data(), b.n_sample * H * sizeof(float));
    if (!params && !out.logits) return LLAISYS_STATUS_OK;
    // Greedy rows that want no logprobs need only the index of the largest logit: the screen
    // finds it reading half of the lm_head's bytes (it declines when unsure; then all logits).
    if (params && !out.logits && !so.logprobs && w_.screen && sampling::all_plain_greedy(params, b.n_sample) &&
        w_.screen->argmax(so.token_ids, rs_.xs.data(), b.n_sample, rs_.logits.data())) {
        return LLAISYS_STATUS_OK;
    }
    ops::cpu::linear_packed(rs_.logits.data(), rs_.xs.data(), *w_.lm_head.packed, nullptr, b.n_sample);  // [n_sample, V]
    if (out.logits) std::memcpy(out.logits, rs_.logits.data(), b.n_sample * V * sizeof(float));
    if (params) sampling::sample(rs_.logits.data(), b.n_sample, V, params, so);
    return LLAISYS_STATUS_OK;
}

#ifndef LLAISYS_ENABLE_NVIDIA
void Model::step_nvidia(kv::KVCache &, const llaisysBatch_t &, const llaisysSamplingParams_t *,
                        const llaisysStepOutput_t &) {
    fail(LLAISYS_STATUS_UNSUPPORTED, "this build of libllaisys has no NVIDIA backend (build with -DLLAISYS_NVIDIA=ON)");
}
#endif

}  // namespace llaisys::models::qwen2
