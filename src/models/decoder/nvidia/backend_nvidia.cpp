// The decoder's primitives on an NVIDIA GPU, over the CUDA launchers of src/ops/*/nvidia/, all
// queued on one stream of the model's own. Per step the host packs the step's index arrays
// (token ids, positions, write slots, the attention view, the sample rows) into one pinned
// staging buffer and copies it to the device in one cudaMemcpyAsync (begin_step); nothing
// waits on the host until the sample rows' ids (head) or finish(), but for one synchronisation
// per sparse (mixture-of-experts) layer, whose route is decided on the host (moe_route).
// Activations are f32 as on the CPU; each linear rounds its input to the weight dtype and
// multiplies on the tensor cores with f32 accumulation (ops/linear/nvidia), or, over GGUF
// blocks, runs the quantized GEMV (decode) or dequantized panels through cuBLAS (prefill;
// quant_linear_nvidia.hpp).
#include "../backend.hpp"
#include "decode_graphs.hpp"
#include "device_buffer.hpp"
#include "int8_fold.hpp"

#include "../../../core/allocator.hpp"
#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../ops/elementwise/nvidia/elementwise_nvidia.hpp"
#include "../../../ops/embedding/nvidia/embedding_nvidia.hpp"
#include "../../../ops/linear/nvidia/gemv16_nvidia.hpp"
#include "../../../ops/linear/nvidia/linear_nvidia.hpp"
#include "../../../ops/linear/nvidia/quant_linear_nvidia.hpp"
#include "../../../ops/moe/cpu/moe_cpu.hpp"
#include "../../../ops/moe/nvidia/moe_nvidia.hpp"
#include "../../../ops/paged_attention/nvidia/kv_write_nvidia.hpp"
#include "../../../ops/paged_attention/nvidia/paged_attention_nvidia.hpp"
#include "../../../ops/paged_attention/nvidia/rope_kv_write_nvidia.hpp"
#include "../../../ops/rms_norm/nvidia/rms_norm_nvidia.hpp"
#include "../../../ops/rope/nvidia/rope_nvidia.hpp"
#include "../../../ops/swiglu/nvidia/swiglu_nvidia.hpp"
#include "../../../quant/nvidia/dequant_nvidia.hpp"
#include "../../../sampling/nvidia/sampler_nvidia.hpp"
#include "../../../utils/error.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace llaisys::models {
namespace {

using device::nvidia::DeviceGuard;
using nvidia::Buffer;
using nvidia::Int8Fold;
constexpr llaisysDataType_t kF32 = LLAISYS_DTYPE_F32;

std::byte *bytes(float *p) { return reinterpret_cast<std::byte *>(p); }
const std::byte *bytes(const float *p) { return reinterpret_cast<const std::byte *>(p); }


// Offsets of the step's index arrays inside one staging buffer (8-byte aligned each).
struct IndexLayout {
    size_t token_ids, positions, write_slot, sample_rows;  // int64 [n], [n], [n], [n_sample]
    size_t query_start, kv_start;                           // int32 [n_seqs + 1] each
    size_t kv_slots, kv_pos;                                // int32 / int64 [n_visible]
    size_t block_tables, context_lens;                      // int32 [table_entries], [n_seqs] (BLOCK)
    size_t bytes;
};

IndexLayout layout_of(size_t n, size_t n_seqs, size_t n_visible, size_t n_sample, size_t table_entries) {
    IndexLayout L{};
    size_t at = 0;
    auto take = [&](size_t count, size_t elem) {
        size_t off = at;
        at += (count * elem + 7) / 8 * 8;
        return off;
    };
    L.token_ids = take(n, 8);
    L.positions = take(n, 8);
    L.write_slot = take(n, 8);
    L.sample_rows = take(n_sample, 8);
    L.query_start = take(n_seqs + 1, 4);
    L.kv_start = take(n_seqs + 1, 4);
    L.kv_slots = take(n_visible, 4);
    L.kv_pos = take(n_visible, 8);
    L.block_tables = take(table_entries, 4);
    L.context_lens = take(table_entries ? n_seqs : 0, 4);
    L.bytes = at;
    return L;
}

class NvidiaBackend final : public Backend {
public:
    NvidiaBackend(const Config &c, const Weights &w, int device_id)
        : c_(c), w_(w), id_(device_id), staging_(LLAISYS_MEMORY_PINNED_HOST, device_id),
          embeds_(LLAISYS_MEMORY_PINNED_HOST, device_id),
          index_(LLAISYS_MEMORY_DEVICE, device_id), fixed_index_(LLAISYS_MEMORY_DEVICE, device_id),
          inv_freq_(LLAISYS_MEMORY_DEVICE, device_id),
          route_host_(LLAISYS_MEMORY_PINNED_HOST, device_id), route_dev_(LLAISYS_MEMORY_DEVICE, device_id),
          int8_fold_(c, device_id) {
        DeviceGuard guard(id_);
        LLAISYS_CUDA_CHECK(cudaStreamCreateWithFlags(&st_, cudaStreamNonBlocking));
        const size_t freq_bytes = c_.inv_freq.size() * sizeof(float);  // [head_dim / 2]
        inv_freq_.reserve(freq_bytes);
        LLAISYS_CUDA_CHECK(cudaMemcpy(inv_freq_.data(), c_.inv_freq.data(), freq_bytes, cudaMemcpyHostToDevice));
    }
    ~NvidiaBackend() override {
        DeviceGuard guard(id_);
        (void)cudaStreamSynchronize(st_);  // the buffers must not be in use when released
        graphs_.clear();
        (void)cudaStreamDestroy(st_);
    }

    bool reads_block_tables() const override { return true; }

    std::unique_ptr<Scope> enter() override {
        struct DeviceScope final : Scope {
            explicit DeviceScope(int id) : guard(id) {}
            DeviceGuard guard;
        };
        return std::make_unique<DeviceScope>(id_);
    }

    void begin_step(const llaisysBatch_t &b, const KvPlan &plan) override {
        int8_fold_.begin_step();
        stage(b, plan, index_, 0);
    }

    // The arrays of every padded shape sit at the start of fixed_index_, which only grows with
    // the graphs dropped; attention is sized for the table's width (its split count fixed).
    void begin_padded_step(const llaisysBatch_t &b, const KvPlan &plan, PaddedShape shape) override {
        int8_fold_.begin_step();
        const size_t bytes = layout_of(b.n_tokens, b.n_seqs, 0, b.n_sample, b.n_seqs * plan.max_blocks).bytes;
        if (bytes > fixed_index_.size()) {
            drop_graphs();
            fixed_index_.reserve(bytes);
        }
        stage(b, plan, fixed_index_, shape.width * plan.block_size);
    }

    bool pads_decode() const override { return DecodeGraphs::mode() != DecodeGraphs::Mode::Off; }

    void run_padded(PaddedShape shape, const kv::KVCache &cache, const std::function<void()> &body) override {
        DeviceGuard guard(id_);
        graphs_.run(shape, cache, st_, body);
    }

    void drop_graphs() override {
        if (graphs_.size() == 0) return;
        finish();
        graphs_.clear();
    }

    size_t graphs() const override { return graphs_.size(); }
    double graph_capture_seconds() const override { return graphs_.capture_seconds(); }
    size_t padded_bytes() const override { return fixed_index_.size(); }

    // The step's index arrays: packed into the pinned staging buffer, then one copy into
    // `index` (index_, or fixed_index_ for a padded step). max_kv > 0: the attention's work is
    // sized for that many keys a row instead of the longest context of the step.
    void stage(const llaisysBatch_t &b, const KvPlan &plan, Buffer &index, size_t max_kv) {
        DeviceGuard guard(id_);
        const size_t n = b.n_tokens, n_visible = plan.kv_slots.size(), ns = b.n_sample;
        const bool blocks = plan.block_tables != nullptr;  // the BLOCK layout's tables as they are
        const size_t table_entries = blocks ? b.n_seqs * plan.max_blocks : 0;
        const IndexLayout ix = layout_of(n, b.n_seqs, n_visible, ns, table_entries);
        // the previous step's copy out of staging has completed: every step ends synchronized
        staging_.reserve(ix.bytes);
        index.reserve(ix.bytes);
        std::byte *hs = staging_.data();
        std::memcpy(hs + ix.token_ids, b.token_ids, n * sizeof(int64_t));
        std::memcpy(hs + ix.positions, b.positions, n * sizeof(int64_t));
        std::memcpy(hs + ix.write_slot, plan.write_slot.data(), n * sizeof(int64_t));
        for (size_t i = 0; i < ns; i++) reinterpret_cast<int64_t *>(hs + ix.sample_rows)[i] = b.sample_rows[i];
        std::memcpy(hs + ix.query_start, b.query_start, (b.n_seqs + 1) * sizeof(int32_t));
        if (blocks) {
            std::memcpy(hs + ix.block_tables, plan.block_tables, table_entries * sizeof(int32_t));
            std::memcpy(hs + ix.context_lens, plan.context_lens, b.n_seqs * sizeof(int32_t));
        } else {
            std::memcpy(hs + ix.kv_start, plan.kv_start.data(), (b.n_seqs + 1) * sizeof(int32_t));
            std::memcpy(hs + ix.kv_slots, plan.kv_slots.data(), n_visible * sizeof(int32_t));
            std::memcpy(hs + ix.kv_pos, plan.kv_pos.data(), n_visible * sizeof(int64_t));
        }
        LLAISYS_CUDA_CHECK(cudaMemcpyAsync(index.data(), hs, ix.bytes, cudaMemcpyHostToDevice, st_));
        const std::byte *d = index.data();
        auto i64 = [&](size_t off) { return reinterpret_cast<const int64_t *>(d + off); };
        auto i32 = [&](size_t off) { return reinterpret_cast<const int32_t *>(d + off); };
        n_tokens_ = n;
        token_ids_ = i64(ix.token_ids);
        positions_ = i64(ix.positions);
        write_slot_ = i64(ix.write_slot);
        sample_rows_ = i64(ix.sample_rows);
        block_view_ = {};  // block_tables == nullptr: view_ is this step's view
        if (blocks) {
            bounds_ = ops::cpu::ViewBounds{};
            for (size_t s = 0; s < b.n_seqs; s++) {
                bounds_.max_q = std::max(bounds_.max_q, size_t(b.query_start[s + 1] - b.query_start[s]));
                bounds_.max_kv = std::max(bounds_.max_kv, size_t(plan.context_lens[s]));
            }
            if (max_kv) bounds_.max_kv = max_kv;
            block_view_ = ops::nvidia::BlockTableView{b.n_seqs,          i32(ix.query_start),  positions_,
                                                      i32(ix.block_tables), i32(ix.context_lens), plan.max_blocks,
                                                      plan.block_size};
        } else {
            bounds_ = ops::cpu::view_bounds(b.n_seqs, b.query_start, plan.kv_start.data());
            view_ = ops::cpu::AttentionView{b.n_seqs,       i32(ix.query_start), positions_,
                                            i32(ix.kv_start), i32(ix.kv_slots),  i64(ix.kv_pos)};
        }
    }

    void embed(float *x, size_t n) override {
        if (!w_.embed && !w_.lm_head.qrows.empty()) {  // tied to a quantized lm_head: one part [V, H]
            const ops::cpu::QuantRows &t = w_.lm_head.qrows.front();
            quant::nvidia::dequantize_rows(x, kF32, t.data, t.dt, n, c_.p.hidden_size, token_ids_, 0, st_);
            return;
        }
        // tied: the dense lm_head holds the embedding
        const tensor_t &table = w_.embed ? w_.embed : w_.lm_head.dense;
        ops::nvidia::embedding(bytes(x), kF32, token_ids_, table->data(), c_.p.dtype, n, c_.p.vocab_size,
                               c_.p.hidden_size, st_);
    }

    // The rows go through a pinned buffer (the previous step has finished with it: every step
    // ends synchronized) and reach x by one copy per run of consecutive token rows.
    void embed_rows(float *x, const float *data, const int32_t *rows, size_t n_rows) override {
        const size_t row_bytes = c_.p.hidden_size * sizeof(float);
        embeds_.reserve(n_rows * row_bytes);
        std::memcpy(embeds_.data(), data, n_rows * row_bytes);
        for (size_t j = 0; j < n_rows;) {
            size_t end = j + 1;
            while (end < n_rows && rows[end] == rows[end - 1] + 1) end++;
            LLAISYS_CUDA_CHECK(cudaMemcpyAsync(bytes(x) + size_t(rows[j]) * row_bytes, embeds_.data() + j * row_bytes,
                                               (end - j) * row_bytes, cudaMemcpyHostToDevice, st_));
            j = end;
        }
    }

    void rms_norm(float *out, const float *in, const Tensor &w, size_t m, size_t d) override {
        ops::nvidia::rms_norm(bytes(out), bytes(in), kF32, w.data(), c_.p.dtype, m, d, c_.p.rms_norm_eps, st_);
    }

    void add_rms_norm(float *out, float *residual, const float *in, const Tensor &w, size_t m, size_t d) override {
        ops::nvidia::add_rms_norm(bytes(out), bytes(residual), bytes(in), kF32, w.data(), c_.p.dtype, m, d,
                                  c_.p.rms_norm_eps, st_);
    }

    void linear(float *out, const float *in, const LinearWeight &w, const Tensor *bias, size_t m) override {
        if (!w.qrows.empty()) {  // GGUF blocks as loaded
            ops::nvidia::linear_quant(bytes(out), bytes(in), kF32, w.qrows.data(), w.qrows.size(), w.n, w.k,
                                      bias ? bias->data() : nullptr, bias ? bias->dtype() : kF32, m, id_, st_);
            return;
        }
        const Tensor &W = *w.dense;  // [n, k]
        ops::nvidia::linear(bytes(out), bytes(in), kF32, W.data(), bias ? bias->data() : nullptr, c_.p.dtype, m,
                            W.shape()[0], W.shape()[1], id_, st_);
    }

    void rms_norm_heads(float *x, const Tensor &w, size_t n, size_t heads, size_t stride) override {
        ops::nvidia::rms_norm_heads(bytes(x), kF32, w.data(), c_.p.dtype, n, heads, c_.p.head_dim, stride,
                                    c_.p.rms_norm_eps, st_);
    }

    void rope(float *x, size_t n, size_t heads, size_t stride) override {
        ops::nvidia::rope(bytes(x), bytes(x), positions_, kF32, n, heads, c_.p.head_dim, stride,
                          reinterpret_cast<const float *>(inv_freq_.data()), c_.rope_scale, st_);
    }

    void kv_write(kv::KVCache &cache, size_t layer, const float *qkv, size_t n) override {
        ops::nvidia::kv_write(cache.k(layer), cache.v(layer), cache.dtype(), bytes(qkv), kF32, c_.qkv_dim, c_.q_dim,
                              c_.q_dim + c_.kv_dim, write_slot_, n, c_.kv_dim, st_);
    }

    void rope_kv_write(kv::KVCache &cache, size_t layer, float *qkv, size_t n, size_t heads, size_t kv_heads,
                       size_t q_dim, size_t qkv_dim) override {
        ops::nvidia::rope_kv_write(qkv, qkv_dim, heads, kv_heads, c_.p.head_dim, q_dim, q_dim + c_.kv_dim, positions_,
                                   reinterpret_cast<const float *>(inv_freq_.data()), c_.rope_scale, cache.k(layer),
                                   cache.v(layer), cache.dtype(), write_slot_, n, st_);
    }

    void linear_swiglu(float *out, float *gate_up, const float *in, const LinearWeight &w, size_t n,
                       size_t width) override {
        if (gemv(w, n, in)) {
            ops::nvidia::gemv16_swiglu(out, in, w.dense->data(), c_.p.dtype, n, width, w.k, st_);
            return;
        }
        Backend::linear_swiglu(out, gate_up, in, w, n, width);
    }

    // Decode steps of a dense 16-bit model: every linear is gemv16, which takes the norms and
    // the residual adds into itself (6 launches a layer instead of 8). Each call below still
    // falls back to the separate kernels when gemv16 does not serve it.
    // With LLAISYS_INT8_PRODUCERS=1 the same for GGUF weights that take the int8 GEMV (int8_fold.hpp).
    bool folds_norms(size_t n) const override {
        const auto folds = [&](const LinearWeight &w) {
            return (dense16(w) && n <= ops::nvidia::kGemv16MaxRows) || int8_fold_.serves(w, n);
        };
        for (const LayerWeights &L : w_.layers) {
            if (L.sparse || !folds(L.qkv_w) || !folds(L.o_w) || !folds(L.gate_up_w) || !folds(L.down_w)) return false;
        }
        return true;
    }

    void norm_linear(float *out, float *h, const float *x, const Tensor &norm_w, const LinearWeight &w,
                     const Tensor *bias, size_t n) override {
        if (gemv(w, n, x, norm_w.data())) {
            ops::nvidia::gemv16_norm(out, x, norm_w.data(), c_.p.rms_norm_eps, w.dense->data(),
                                     bias ? bias->data() : nullptr, c_.p.dtype, n, w.n, w.k, st_);
            return;
        }
        if (int8_fold_.serves(w, n)) {
            int8_fold_.norm_linear(out, x, norm_w, w, bias, n, st_);
            return;
        }
        Backend::norm_linear(out, h, x, norm_w, w, bias, n);
    }

    void norm_linear_swiglu(float *out, float *gate_up, float *h, const float *x, const Tensor &norm_w,
                            const LinearWeight &w, size_t n, size_t width) override {
        int8_fold_.forget();  // out is rewritten: down must not reuse an older layer's swiglu_quant rows
        if (gemv(w, n, x, norm_w.data())) {
            ops::nvidia::gemv16_swiglu(out, x, w.dense->data(), c_.p.dtype, n, width, w.k, st_, norm_w.data(),
                                       c_.p.rms_norm_eps);
            return;
        }
        if (int8_fold_.serves(w, n)) {
            int8_fold_.norm_linear_swiglu(out, gate_up, x, norm_w, w, n, width, st_);
            return;
        }
        Backend::norm_linear_swiglu(out, gate_up, h, x, norm_w, w, n, width);
    }

    void linear_residual(float *x, float *proj, const float *in, const LinearWeight &w, size_t n) override {
        if (gemv(w, n, in)) {
            ops::nvidia::gemv16_accumulate(x, in, w.dense->data(), nullptr, c_.p.dtype, n, w.n, w.k, st_);
            return;
        }
        if (int8_fold_.serves(w, n)) {
            int8_fold_.linear_residual(x, in, w, n, st_);
            return;
        }
        Backend::linear_residual(x, proj, in, w, n);
    }

    void attention(float *out, const float *qkv, const kv::KVCache &cache, size_t layer, uint32_t window) override {
        const size_t hd = c_.p.head_dim;
        if (block_view_.block_tables) {
            ops::nvidia::paged_attention(bytes(out), c_.q_dim, bytes(qkv), c_.qkv_dim, kF32, cache.k(layer),
                                         cache.v(layer), cache.dtype(), block_view_, n_tokens_, bounds_.max_q,
                                         bounds_.max_kv, c_.p.n_heads, c_.p.n_kv_heads, hd, hd, c_.softmax_scale, st_,
                                         int64_t(window));
            return;
        }
        ops::nvidia::paged_attention(bytes(out), c_.q_dim, bytes(qkv), c_.qkv_dim, kF32, cache.k(layer),
                                     cache.v(layer), cache.dtype(), view_, n_tokens_, bounds_.max_q, bounds_.max_kv,
                                     c_.p.n_heads, c_.p.n_kv_heads, hd, hd, c_.softmax_scale, st_, int64_t(window));
    }

    void swiglu(float *out, const float *gate_up, size_t n, size_t width) override {
        const size_t I = width;
        ops::nvidia::swiglu(bytes(out), bytes(gate_up), bytes(gate_up + I), kF32, n, I, 2 * I, I, st_);
    }

    // Mixture of experts. The route is decided on the host by the CPU's own code (moe_topk,
    // moe_group), so it is the CPU's to the bit: the router logits come back through pinned
    // memory, which costs one stream synchronisation per sparse layer (a device-side top-k is
    // the next step); then the pairs' rows, positions and weights go up in one copy, while
    // the per-expert offsets stay here for expert_linear.
    void moe_route(const float *logits, size_t n) override {
        const size_t E = c_.p.n_experts, k = c_.p.n_experts_per_tok, nk = n * k;
        const size_t route_bytes = 3 * nk * sizeof(int32_t);  // row_of, pos, weights
        const size_t host_bytes = n * E * sizeof(float) + route_bytes;
        if (host_bytes > route_host_.size()) {
            finish();  // the last layer's upload may still read the pinned buffer
            route_host_.reserve(host_bytes);
        }
        auto *h_logits = reinterpret_cast<float *>(route_host_.data());  // [n, E]
        auto *h_row_of = reinterpret_cast<int32_t *>(h_logits + n * E);  // [n k] then pos [n k], weights [n k]
        int32_t *h_pos = h_row_of + nk;
        auto *h_weights = reinterpret_cast<float *>(h_pos + nk);
        LLAISYS_CUDA_CHECK(cudaMemcpyAsync(h_logits, logits, n * E * sizeof(float), cudaMemcpyDeviceToHost, st_));
        LLAISYS_CUDA_CHECK(cudaStreamSynchronize(st_));  // also: nothing queued reads route_dev_ now
        ids_.resize(nk);
        offsets_.resize(E + 1);
        ops::cpu::moe_topk(ids_.data(), h_weights, h_logits, n, E, k, c_.p.norm_topk_prob != 0);
        ops::cpu::moe_group(offsets_.data(), h_row_of, h_pos, ids_.data(), n, E, k);
        route_dev_.reserve(route_bytes);
        LLAISYS_CUDA_CHECK(cudaMemcpyAsync(route_dev_.data(), h_row_of, route_bytes, cudaMemcpyHostToDevice, st_));
        route_n_ = n;
        row_of_ = reinterpret_cast<const int32_t *>(route_dev_.data());
        pos_ = row_of_ + nk;
        weights_ = reinterpret_cast<const float *>(pos_ + nk);
    }

    void moe_gather(float *xg, const float *x) override {
        ops::nvidia::moe_gather(xg, x, row_of_, route_n_ * c_.p.n_experts_per_tok, c_.p.hidden_size, st_);
    }

    // Each chosen expert's linear over its rows (the same path as any linear: gemv16 or cuBLAS
    // over dense weights, the quantized GEMV or panels over GGUF blocks), so a decode step reads
    // only the chosen experts' weights. One launch per chosen expert: a grouped kernel that
    // takes every expert in one launch is the next step.
    void expert_linear(float *out, const float *in, const ExpertWeight &w) override {
        for (size_t e = 0; e < w.experts.size(); e++) {
            const size_t r0 = size_t(offsets_[e]), rows = size_t(offsets_[e + 1]) - r0;
            if (rows) linear(out + r0 * w.n, in + r0 * w.k, w.experts[e], nullptr, rows);
        }
    }

    void moe_combine(float *out, const float *y) override {
        ops::nvidia::moe_combine(out, y, weights_, pos_, route_n_, c_.p.n_experts_per_tok, c_.p.hidden_size, st_);
    }

    void add_sigmoid_gated(float *out, const float *y, const float *gate, size_t n, size_t d) override {
        ops::nvidia::add_sigmoid_gated(out, y, gate, n, d, st_);
    }

    void add(float *x, const float *y, size_t count) override {
        ops::nvidia::binary(ops::cpu::BinaryOp::Add, bytes(x), bytes(x), bytes(y), kF32, count, st_);
    }

    void gather_rows(float *xs, const float *x, size_t n_sample) override {
        // an embedding lookup of the sample rows into the [n, H] rows
        ops::nvidia::embedding(bytes(xs), kF32, sample_rows_, bytes(x), kF32, n_sample, n_tokens_, c_.p.hidden_size,
                               st_);
    }

    void to_host(void *dst, const float *src, size_t n_bytes) override {
        LLAISYS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n_bytes, cudaMemcpyDeviceToHost, st_));
    }

    void head(const float *xs, float *logits, size_t ns, const llaisysSamplingParams_t *params,
              const llaisysStepOutput_t &out) override {
        linear(logits, xs, w_.lm_head, nullptr, ns);  // [n_sample, V]
        sample_logits(logits, ns, params, out);
    }

    void sample_logits(float *logits, size_t ns, const llaisysSamplingParams_t *params,
                       const llaisysStepOutput_t &out) override {
        const size_t V = c_.p.vocab_size;
        if (out.logits) to_host(out.logits, logits, ns * V * sizeof(float));
        if (params) {
            // may use the logits as scratch: queued after the copy above, so the copy sees them
            // raw; returns once the stream is synchronized
            sampling::nvidia::sample(logits, ns, V, params, out.sample, id_, st_);
        } else {
            finish();
        }
    }

    void finish() override {
        DeviceGuard guard(id_);
        LLAISYS_CUDA_CHECK(cudaStreamSynchronize(st_));
    }

private:
    bool dense16(const LinearWeight &w) const {
        return w.qrows.empty() && w.dense && (c_.p.dtype == LLAISYS_DTYPE_BF16 || c_.p.dtype == LLAISYS_DTYPE_F16);
    }
    // whether gemv16 runs this linear of n rows over `in` (and a norm weight)
    bool gemv(const LinearWeight &w, size_t n, const float *in, const std::byte *norm_w = nullptr) const {
        return dense16(w) && ops::nvidia::gemv16_serves(kF32, c_.p.dtype, n, w.k, in, w.dense->data(), norm_w);
    }

    const Config &c_;
    const Weights &w_;
    int id_;
    cudaStream_t st_ = nullptr;
    Buffer staging_;   // pinned host: the step's index arrays (IndexLayout)
    Buffer embeds_;    // pinned host: the step's input embedding rows (embed_rows)
    Buffer index_;     // device copy of staging
    Buffer fixed_index_;  // device: a padded step's copy of staging, where its graph reads it
    DecodeGraphs graphs_;
    Buffer inv_freq_;  // device: [head_dim / 2] the model's RoPE frequencies
    // the step in progress (begin_step): device pointers into index_
    size_t n_tokens_ = 0;
    const int64_t *token_ids_ = nullptr, *positions_ = nullptr, *write_slot_ = nullptr, *sample_rows_ = nullptr;
    ops::cpu::AttentionView view_{};
    ops::nvidia::BlockTableView block_view_{};  // this step's view when it has block tables, else view_
    ops::cpu::ViewBounds bounds_{};
    // the route of the sparse layer in progress (moe_route)
    Buffer route_host_;  // pinned host: the router logits [n, E], then row_of, pos, weights [n k] each
    Buffer route_dev_;   // device: row_of [n k] (the token of each position), pos [n k], weights [n k]
    size_t route_n_ = 0;
    std::vector<int32_t> ids_;      // [n k] each pair's expert (host)
    std::vector<int32_t> offsets_;  // [E + 1] expert e's pairs: positions [offsets[e], offsets[e + 1]) (host)
    const int32_t *row_of_ = nullptr, *pos_ = nullptr;  // device pointers into route_dev_
    const float *weights_ = nullptr;                    // device [n, k]
    Int8Fold int8_fold_;  // quantized decode steps whose producers write int8 (LLAISYS_INT8_PRODUCERS=1)
};

}  // namespace

std::unique_ptr<Backend> make_nvidia_backend(const Config &c, const Weights &w, int device_id) {
    return std::make_unique<NvidiaBackend>(c, w, device_id);
}

}  // namespace llaisys::models
