// The decoder's primitives on the CPU, over ops::cpu::* (OpenMP inside each op). Linear
// weights are packed panels or block-quantized (GGUF) weights; greedy rows without logprobs go
// through the lm_head screen when the lm_head is packed.
#include "../backend.hpp"

#include "../../../kv_cache/hadamard.hpp"
#include "../../../ops/elementwise/cpu/elementwise_cpu.hpp"
#include "../../../ops/embedding/cpu/embedding_cpu.hpp"
#include "../../../ops/linear/cpu/linear_cpu.hpp"
#include "../../../ops/moe/cpu/moe_cpu.hpp"
#include "../../../ops/paged_attention/cpu/paged_attention_cpu.hpp"
#include "../../../ops/rms_norm/cpu/rms_norm_cpu.hpp"
#include "../../../ops/rope/cpu/rope_cpu.hpp"
#include "../../../ops/swiglu/cpu/swiglu_cpu.hpp"
#include "../../../quant/quantize.hpp"
#include "../../../sampling/sampler.hpp"
#include "../../../utils/types.hpp"

#include <cstdlib>
#include <cstring>
#include <vector>

namespace llaisys::models {
namespace {

constexpr llaisysDataType_t kF32 = LLAISYS_DTYPE_F32;

std::byte *bytes(float *p) { return reinterpret_cast<std::byte *>(p); }
const std::byte *bytes(const float *p) { return reinterpret_cast<const std::byte *>(p); }

// f32 row -> KV storage dtype. q8_0: blocks of 32 (n is heads x head_dim, head_dim a multiple
// of 32, so each head's row is its own blocks), rounded to nearest with d = max|x| / 127 as
// ggml's quantize_row_q8_0 (quant::quantize_block, bit-identical to gguf-py).
void store_row(std::byte *dst, llaisysDataType_t dt, const float *src, size_t n) {
    if (dt == LLAISYS_DTYPE_Q8_0) {
        auto *b = reinterpret_cast<quant::BlockQ8_0 *>(dst);
        for (size_t i = 0; i < n / quant::kBlock32; i++) quant::quantize_block(src + i * quant::kBlock32, b[i]);
        return;
    }
    dispatch_float(dt, [&](auto tag) {
        using T = decltype(tag);
        T *d = reinterpret_cast<T *>(dst);
        for (size_t i = 0; i < n; i++) d[i] = from_f32<T>(src[i]);
    });
}

class CpuBackend final : public Backend {
public:
    CpuBackend(const Config &c, const Weights &w) : c_(c), w_(w) {}

    std::unique_ptr<Scope> enter() override { return nullptr; }

    void begin_step(const llaisysBatch_t &b, const KvPlan &plan) override {
        b_ = &b;
        plan_ = &plan;
        view_ = ops::cpu::AttentionView{b.n_seqs,           b.query_start,          b.positions,
                                        plan.kv_start.data(), plan.kv_slots.data(), plan.kv_pos.data()};
    }

    void embed(float *x, size_t n) override {
        const size_t H = c_.p.hidden_size;
        if (w_.embed) {
            ops::cpu::embedding(bytes(x), kF32, b_->token_ids, w_.embed->data(), c_.p.dtype, n, c_.p.vocab_size, H);
            return;
        }
        // quantized, or tied (stored once, as the lm_head): rows dequantized / widened (ids checked)
        for (size_t t = 0; t < n; t++) {
            const size_t id = size_t(b_->token_ids[t]);
            if (w_.embed_q) w_.embed_q->row_f32(id, x + t * H);
            else if (w_.lm_head.quant) w_.lm_head.quant->row_f32(id, x + t * H);
            else w_.lm_head.packed->row_f32(id, x + t * H);
        }
    }

    void embed_rows(float *x, const float *data, const int32_t *rows, size_t n_rows) override {
        const size_t H = c_.p.hidden_size;
        for (size_t j = 0; j < n_rows; j++) std::memcpy(x + size_t(rows[j]) * H, data + j * H, H * sizeof(float));
    }

    void rms_norm(float *out, const float *in, const Tensor &w, size_t m, size_t d) override {
        ops::cpu::rms_norm(bytes(out), bytes(in), kF32, w.data(), c_.p.dtype, m, d, c_.p.rms_norm_eps);
    }

    void add_rms_norm(float *out, float *residual, const float *in, const Tensor &w, size_t m, size_t d) override {
        ops::cpu::add_rms_norm(bytes(out), bytes(residual), bytes(in), kF32, w.data(), c_.p.dtype, m, d,
                               c_.p.rms_norm_eps);
    }

    void linear(float *out, const float *in, const LinearWeight &w, const Tensor *bias, size_t m) override {
        if (w.quant) {
            ops::cpu::linear_quant(out, in, *w.quant, bias ? bias->data() : nullptr, c_.p.dtype, m);
        } else {
            ops::cpu::linear_packed(out, in, *w.packed, bias ? bias->data() : nullptr, m);
        }
    }

    void rms_norm_heads(float *x, const Tensor &w, size_t n, size_t heads, size_t stride) override {
        ops::cpu::rms_norm_heads(bytes(x), kF32, w.data(), c_.p.dtype, n, heads, c_.p.head_dim, stride,
                                 c_.p.rms_norm_eps);
    }

    void rope(float *x, size_t n, size_t heads, size_t stride) override {
        ops::cpu::rope(bytes(x), bytes(x), b_->positions, kF32, n, heads, c_.p.head_dim, stride, c_.inv_freq.data(),
                       c_.rope_scale);
    }

    // A q8_0 cache keeps keys and values in a Hadamard basis (kv_cache/hadamard.hpp): after RoPE,
    // q and k are rotated in k_rotation() blocks and v in v_rotation() blocks, in place in qkv
    // (attention reads q from there); attention() rotates its output back.
    void rope_kv_write(kv::KVCache &cache, size_t layer, float *qkv, size_t n, size_t heads, size_t kv_heads,
                       size_t q_dim, size_t qkv_dim) override {
        rope(qkv, n, heads, qkv_dim);
        rope(qkv + q_dim, n, kv_heads, qkv_dim);
        if (const size_t rk = cache.k_rotation()) {
            kv::hadamard(qkv, n, q_dim + c_.kv_dim, qkv_dim, rk);  // q | k, both whole heads of rk blocks
            kv::hadamard(qkv + q_dim + c_.kv_dim, n, c_.kv_dim, qkv_dim, cache.v_rotation());
        }
        kv_write(cache, layer, qkv, n);
    }

    void kv_write(kv::KVCache &cache, size_t layer, const float *qkv, size_t n) override {
        const size_t kv_dim = c_.kv_dim, row_bytes = cache.row_bytes();
        for (size_t t = 0; t < n; t++) {
            if (plan_->write_slot[t] < 0) continue;  // a padding row (padded_decode.hpp) stores nothing
            const size_t slot = size_t(plan_->write_slot[t]);
            const float *row = qkv + t * c_.qkv_dim;
            store_row(cache.k(layer) + slot * row_bytes, cache.dtype(), row + c_.q_dim, kv_dim);
            store_row(cache.v(layer) + slot * row_bytes, cache.dtype(), row + c_.q_dim + kv_dim, kv_dim);
        }
    }

    void attention(float *out, const float *qkv, const kv::KVCache &cache, size_t layer, uint32_t window) override {
        const size_t hd = c_.p.head_dim;
        ops::cpu::paged_attention(bytes(out), c_.q_dim, bytes(qkv), c_.qkv_dim, kF32, cache.k(layer), cache.v(layer),
                                  cache.dtype(), view_, c_.p.n_heads, c_.p.n_kv_heads, hd, hd, c_.softmax_scale,
                                  int64_t(window));
        if (const size_t rv = cache.v_rotation()) kv::hadamard(out, b_->n_tokens, c_.q_dim, c_.q_dim, rv);
    }

    void swiglu(float *out, const float *gate_up, size_t n, size_t width) override {
        const size_t I = width;
        ops::cpu::swiglu(bytes(out), bytes(gate_up), bytes(gate_up + I), kF32, n, I, 2 * I, I);
    }

    void moe_route(const float *logits, size_t n) override {
        const size_t E = c_.p.n_experts, k = c_.p.n_experts_per_tok;
        route_n_ = n;
        ids_.resize(n * k);
        weights_.resize(n * k);
        offsets_.resize(E + 1);
        row_of_.resize(n * k);
        pos_.resize(n * k);
        ops::cpu::moe_topk(ids_.data(), weights_.data(), logits, n, E, k, c_.p.norm_topk_prob != 0);
        ops::cpu::moe_group(offsets_.data(), row_of_.data(), pos_.data(), ids_.data(), n, E, k);
    }

    void moe_gather(float *xg, const float *x) override {
        ops::cpu::moe_gather(xg, x, row_of_.data(), row_of_.size(), c_.p.hidden_size);
    }

    void expert_linear(float *out, const float *in, const ExpertWeight &w) override {
        // quantized experts with few rows each (decode, small batches): one loop over all of them
        bool grouped = true;
        qexperts_.resize(w.experts.size());
        for (size_t e = 0; e < w.experts.size() && grouped; e++) {
            qexperts_[e] = w.experts[e].quant.get();
            grouped = qexperts_[e] != nullptr || offsets_[e + 1] == offsets_[e];
        }
        if (grouped && ops::cpu::linear_quant_grouped(out, in, qexperts_.data(), offsets_.data(), w.experts.size()))
            return;
        for (size_t e = 0; e < w.experts.size(); e++) {  // only the experts the route chose
            const size_t r0 = size_t(offsets_[e]), rows = size_t(offsets_[e + 1]) - r0;
            if (rows) linear(out + r0 * w.n, in + r0 * w.k, w.experts[e], nullptr, rows);
        }
    }

    void moe_combine(float *out, const float *y) override {
        ops::cpu::moe_combine(out, y, weights_.data(), pos_.data(), route_n_, c_.p.n_experts_per_tok,
                              c_.p.hidden_size);
    }

    void add_sigmoid_gated(float *out, const float *y, const float *gate, size_t n, size_t d) override {
        ops::cpu::add_sigmoid_gated(out, y, gate, n, d);
    }

    void add(float *x, const float *y, size_t count) override {
        ops::cpu::binary(ops::cpu::BinaryOp::Add, bytes(x), bytes(x), bytes(y), kF32, count);
    }

    void gather_rows(float *xs, const float *x, size_t n_sample) override {
        const size_t H = c_.p.hidden_size;
        for (size_t i = 0; i < n_sample; i++) {
            std::memcpy(xs + i * H, x + size_t(b_->sample_rows[i]) * H, H * sizeof(float));
        }
    }

    void to_host(void *dst, const float *src, size_t n_bytes) override { std::memcpy(dst, src, n_bytes); }

    void head(const float *xs, float *logits, size_t ns, const llaisysSamplingParams_t *params,
              const llaisysStepOutput_t &out) override {
        const llaisysSampleOutput_t &so = out.sample;
        // Greedy rows that want no logprobs need only the index of the largest (allowed) logit:
        // the screen finds it reading half of the lm_head's bytes, or only the allowed rows when
        // a mask allows few (it declines when unsure; then all logits).
        if (params && !out.logits && !so.logprobs && w_.screen && ns <= ops::cpu::LogitScreen::kMaxRows &&
            sampling::all_plain_greedy(params, ns)) {
            const uint32_t *masks[ops::cpu::LogitScreen::kMaxRows];  // [ns] each row's allowed_mask (or null)
            for (size_t i = 0; i < ns; i++) masks[i] = params[i].allowed_mask;
            if (w_.screen->argmax(so.token_ids, xs, ns, logits, masks)) return;
        }
        linear(logits, xs, w_.lm_head, nullptr, ns);  // [n_sample, V]
        sample_logits(logits, ns, params, out);
    }

    void sample_logits(float *logits, size_t ns, const llaisysSamplingParams_t *params,
                       const llaisysStepOutput_t &out) override {
        const size_t V = c_.p.vocab_size;
        if (out.logits) std::memcpy(out.logits, logits, ns * V * sizeof(float));
        if (params) sampling::sample(logits, ns, V, params, out.sample);
    }

    void finish() override {}

    // The CPU gains nothing from fixed shapes; LLAISYS_PADDED_DECODE=1 pads anyway, so that the
    // padding the GPU's graphs rely on is tested here.
    bool pads_decode() const override {
        static const bool on = [] {
            const char *env = std::getenv("LLAISYS_PADDED_DECODE");
            return env && env[0] == '1';
        }();
        return on;
    }

private:
    const Config &c_;
    const Weights &w_;
    const llaisysBatch_t *b_ = nullptr;  // the step in progress (begin_step)
    const KvPlan *plan_ = nullptr;
    ops::cpu::AttentionView view_{};
    // the route of the sparse layer in progress (moe_route); host arrays reused across layers and steps
    size_t route_n_ = 0;
    std::vector<int32_t> ids_;      // [n, k] each token's experts
    std::vector<float> weights_;    // [n, k] and their weights
    std::vector<int32_t> offsets_;  // [E + 1] expert e's pairs: positions [offsets[e], offsets[e + 1])
    std::vector<int32_t> row_of_;   // [n k] the token of the pair at each position
    std::vector<int32_t> pos_;      // [n k] the position of pair t k + j
    std::vector<const ops::cpu::QuantWeight *> qexperts_;  // [E] expert_linear's weights, for the grouped call
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Config &c, const Weights &w) {
    return std::make_unique<CpuBackend>(c, w);
}

}  // namespace llaisys::models
