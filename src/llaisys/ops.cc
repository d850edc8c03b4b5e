// C ABI: operators (include/llaisys/ops.h). Wrappers only: checks live in src/ops/<op>/op.cpp.
#include "guard.hpp"

#include "../ops/add/op.hpp"
#include "../ops/argmax/op.hpp"
#include "../ops/embedding/op.hpp"
#include "../ops/moe/op.hpp"
#include "../ops/linear/op.hpp"
#include "../ops/mul/op.hpp"
#include "../ops/paged_attention/op.hpp"
#include "../ops/quantize/op.hpp"
#include "../ops/rms_norm/op.hpp"
#include "../ops/rope/op.hpp"
#include "../ops/rope/rope_freqs.hpp"
#include "../ops/self_attention/op.hpp"
#include "../ops/softmax/op.hpp"
#include "../ops/swiglu/op.hpp"
#include "llaisys/ops.h"

#include <cstring>

using namespace llaisys;
using capi::guard;
using capi::tensor_of;

namespace {

// What a packed-linear handle holds.
struct PackedLinear {
    std::unique_ptr<ops::cpu::PackedWeight> weight;  // a float weight's panels, or null
    std::unique_ptr<ops::cpu::LogitScreen> screen;   // built by the first llaisysPackedLinearArgmax
    std::unique_ptr<ops::cpu::QuantWeight> qweight;  // a block-quantized weight's rows, or null
};

}  // namespace

LLAISYS_HANDLE_TYPE(llaisysPackedLinear_t, PackedLinear, llaisys::capi::HandleKind::PackedLinear);

extern "C" {

llaisysStatus_t llaisysAdd(llaisysTensor_t out, llaisysTensor_t a, llaisysTensor_t b) {
    return guard([&] { ops::add(*tensor_of(out, "out"), *tensor_of(a, "a"), *tensor_of(b, "b")); });
}

llaisysStatus_t llaisysMul(llaisysTensor_t out, llaisysTensor_t a, llaisysTensor_t b) {
    return guard([&] { ops::mul(*tensor_of(out, "out"), *tensor_of(a, "a"), *tensor_of(b, "b")); });
}

llaisysStatus_t llaisysEmbedding(llaisysTensor_t out, llaisysTensor_t index, llaisysTensor_t weight) {
    return guard(
        [&] { ops::embedding(*tensor_of(out, "out"), *tensor_of(index, "index"), *tensor_of(weight, "weight")); });
}

llaisysStatus_t llaisysLinear(llaisysTensor_t out, llaisysTensor_t in, llaisysTensor_t weight,
                              llaisysTensor_t bias) {
    return guard([&] {
        const tensor_t b = bias ? tensor_of(bias, "bias") : nullptr;
        ops::linear(*tensor_of(out, "out"), *tensor_of(in, "in"), *tensor_of(weight, "weight"), b.get());
    });
}

llaisysStatus_t llaisysPackedLinearCreate(llaisysTensor_t weight, llaisysPackedLinear_t *out) {
    return capi::create_into(out, [&] {
        const tensor_t w = tensor_of(weight, "weight");
        if (w->is_quantized())
            return capi::make_handle<llaisysPackedLinear_t>(
                std::make_shared<PackedLinear>(PackedLinear{nullptr, nullptr, ops::pack_linear_quant(*w)}));
        auto packed = ops::pack_linear(*w);
        return capi::make_handle<llaisysPackedLinear_t>(
            std::make_shared<PackedLinear>(PackedLinear{std::move(packed), nullptr, nullptr}));
    });
}

llaisysStatus_t llaisysPackedLinearCreateStacked(const llaisysTensor_t *parts, size_t n_parts,
                                                 llaisysPackedLinear_t *out) {
    return capi::create_into(out, [&] {
        LLAISYS_CHECK_ARG(parts != nullptr && n_parts > 0, "packed linear: parts is NULL or empty");
        std::vector<tensor_t> held;  // [n_parts] kept alive while packing
        std::vector<const Tensor *> ptrs;
        for (size_t i = 0; i < n_parts; i++) {
            held.push_back(tensor_of(parts[i], "parts[i]"));
            ptrs.push_back(held.back().get());
        }
        return capi::make_handle<llaisysPackedLinear_t>(
            std::make_shared<PackedLinear>(PackedLinear{nullptr, nullptr, ops::pack_linear_quant(ptrs)}));
    });
}

llaisysStatus_t llaisysPackedLinearApply(llaisysPackedLinear_t packed, llaisysTensor_t out, llaisysTensor_t in,
                                         llaisysTensor_t bias) {
    return guard([&] {
        const auto p = capi::live(packed, "packed");
        const tensor_t b = bias ? tensor_of(bias, "bias") : nullptr;
        if (p->qweight) ops::linear_quant(*tensor_of(out, "out"), *tensor_of(in, "in"), *p->qweight, b.get());
        else ops::linear_packed(*tensor_of(out, "out"), *tensor_of(in, "in"), *p->weight, b.get());
    });
}

llaisysStatus_t llaisysPackedLinearArgmax(llaisysPackedLinear_t packed, llaisysTensor_t in, int64_t *ids,
                                          int *screened) {
    return guard([&] {
        const auto p = capi::live(packed, "packed");
        if (p->qweight) {  // no screen for quantized weights: every output computed
            ops::argmax_quant(ids, *tensor_of(in, "in"), *p->qweight);
            if (screened) *screened = 0;
            return;
        }
        if (!p->screen) p->screen = std::make_unique<ops::cpu::LogitScreen>(*p->weight);
        bool all = ops::argmax_packed(ids, *tensor_of(in, "in"), *p->weight, *p->screen);
        if (screened) *screened = all ? 1 : 0;
    });
}

llaisysStatus_t llaisysPackedLinearDestroy(llaisysPackedLinear_t packed) { return capi::destroy(packed, "packed"); }

llaisysStatus_t llaisysRmsNorm(llaisysTensor_t out, llaisysTensor_t in, llaisysTensor_t weight, float eps) {
    return guard(
        [&] { ops::rms_norm(*tensor_of(out, "out"), *tensor_of(in, "in"), *tensor_of(weight, "weight"), eps); });
}

llaisysStatus_t llaisysAddRmsNorm(llaisysTensor_t out, llaisysTensor_t residual, llaisysTensor_t in,
                                  llaisysTensor_t weight, float eps) {
    return guard([&] {
        ops::add_rms_norm(*tensor_of(out, "out"), *tensor_of(residual, "residual"), *tensor_of(in, "in"),
                          *tensor_of(weight, "weight"), eps);
    });
}

llaisysStatus_t llaisysRope(llaisysTensor_t out, llaisysTensor_t in, llaisysTensor_t pos, float theta) {
    return guard([&] { ops::rope(*tensor_of(out, "out"), *tensor_of(in, "in"), *tensor_of(pos, "pos"), theta); });
}

llaisysStatus_t llaisysSelfAttention(llaisysTensor_t out, llaisysTensor_t q, llaisysTensor_t k, llaisysTensor_t v,
                                     float scale) {
    return guard([&] {
        ops::self_attention(*tensor_of(out, "out"), *tensor_of(q, "q"), *tensor_of(k, "k"), *tensor_of(v, "v"), scale);
    });
}

llaisysStatus_t llaisysPagedAttention(llaisysTensor_t out, llaisysTensor_t q, llaisysTensor_t k_cache,
                                      llaisysTensor_t v_cache, llaisysTensor_t q_pos, llaisysTensor_t query_start,
                                      llaisysTensor_t kv_start, llaisysTensor_t kv_slots, llaisysTensor_t kv_pos,
                                      float scale) {
    return guard([&] {
        ops::paged_attention(*tensor_of(out, "out"), *tensor_of(q, "q"), *tensor_of(k_cache, "k_cache"),
                             *tensor_of(v_cache, "v_cache"), *tensor_of(q_pos, "q_pos"),
                             *tensor_of(query_start, "query_start"), *tensor_of(kv_start, "kv_start"),
                             *tensor_of(kv_slots, "kv_slots"), *tensor_of(kv_pos, "kv_pos"), scale);
    });
}

llaisysStatus_t llaisysPagedAttentionReference(llaisysTensor_t out, llaisysTensor_t q, llaisysTensor_t k_cache,
                                               llaisysTensor_t v_cache, llaisysTensor_t q_pos,
                                               llaisysTensor_t query_start, llaisysTensor_t kv_start,
                                               llaisysTensor_t kv_slots, llaisysTensor_t kv_pos, float scale) {
    return guard([&] {
        ops::paged_attention_reference(*tensor_of(out, "out"), *tensor_of(q, "q"), *tensor_of(k_cache, "k_cache"),
                                       *tensor_of(v_cache, "v_cache"), *tensor_of(q_pos, "q_pos"),
                                       *tensor_of(query_start, "query_start"), *tensor_of(kv_start, "kv_start"),
                                       *tensor_of(kv_slots, "kv_slots"), *tensor_of(kv_pos, "kv_pos"), scale);
    });
}

llaisysStatus_t llaisysSwiGLU(llaisysTensor_t out, llaisysTensor_t gate, llaisysTensor_t up) {
    return guard([&] { ops::swiglu(*tensor_of(out, "out"), *tensor_of(gate, "gate"), *tensor_of(up, "up")); });
}

llaisysStatus_t llaisysArgmax(llaisysTensor_t max_idx, llaisysTensor_t max_val, llaisysTensor_t vals) {
    return guard([&] {
        ops::argmax(*tensor_of(max_idx, "max_idx"), *tensor_of(max_val, "max_val"), *tensor_of(vals, "vals"));
    });
}

llaisysStatus_t llaisysSoftmax(llaisysTensor_t out, llaisysTensor_t in) {
    return guard([&] { ops::softmax(*tensor_of(out, "out"), *tensor_of(in, "in")); });
}

llaisysStatus_t llaisysRopeFrequencies(float rope_theta, llaisysRopeScaling_t rope_scaling, float rope_factor,
                                       float rope_low_freq_factor, float rope_high_freq_factor,
                                       size_t rope_original_max_position, float rope_beta_fast, float rope_beta_slow,
                                       float rope_attention_factor, size_t head_dim, llaisysTensor_t inv_freq,
                                       float *attn_scale) {
    return guard([&] {
        ops::RopeSpec spec;
        spec.theta = rope_theta;
        spec.type = capi::enum_in_range(rope_scaling, LLAISYS_ROPE_DEFAULT, LLAISYS_ROPE_YARN, "rope_scaling");
        spec.factor = rope_factor;
        spec.low_freq_factor = rope_low_freq_factor;
        spec.high_freq_factor = rope_high_freq_factor;
        spec.original_max_position = rope_original_max_position;
        spec.beta_fast = rope_beta_fast;
        spec.beta_slow = rope_beta_slow;
        spec.attention_factor = rope_attention_factor;
        const tensor_t out = tensor_of(inv_freq, "inv_freq");
        const std::vector<float> f = ops::rope_inv_freq(spec, head_dim);  // [head_dim / 2]
        LLAISYS_CHECK(out->device() == LLAISYS_DEVICE_CPU && out->dtype() == LLAISYS_DTYPE_F32 &&
                          out->shape() == std::vector<size_t>{f.size()} && out->is_contiguous(),
                      LLAISYS_STATUS_SHAPE_MISMATCH, "rope frequencies: inv_freq must be a contiguous f32 CPU tensor [",
                      f.size(), "], got ", out->describe());
        std::memcpy(out->data(), f.data(), f.size() * sizeof(float));
        if (attn_scale) *attn_scale = ops::rope_attention_scale(spec);
    });
}

llaisysStatus_t llaisysRopeTable(llaisysTensor_t out, llaisysTensor_t in, llaisysTensor_t pos, llaisysTensor_t inv_freq,
                                 float attn_scale) {
    return guard([&] {
        ops::rope(*tensor_of(out, "out"), *tensor_of(in, "in"), *tensor_of(pos, "pos"), *tensor_of(inv_freq, "inv_freq"),
                  attn_scale);
    });
}

llaisysStatus_t llaisysPagedAttentionWindow(llaisysTensor_t out, llaisysTensor_t q, llaisysTensor_t k_cache,
                                            llaisysTensor_t v_cache, llaisysTensor_t q_pos, llaisysTensor_t query_start,
                                            llaisysTensor_t kv_start, llaisysTensor_t kv_slots, llaisysTensor_t kv_pos,
                                            float scale, int64_t window, int reference) {
    return guard([&] {
        auto *kernel = reference ? ops::paged_attention_reference : ops::paged_attention;
        kernel(*tensor_of(out, "out"), *tensor_of(q, "q"), *tensor_of(k_cache, "k_cache"), *tensor_of(v_cache, "v_cache"),
               *tensor_of(q_pos, "q_pos"), *tensor_of(query_start, "query_start"), *tensor_of(kv_start, "kv_start"),
               *tensor_of(kv_slots, "kv_slots"), *tensor_of(kv_pos, "kv_pos"), scale, window);
    });
}

llaisysStatus_t llaisysRmsNormHeads(llaisysTensor_t x, llaisysTensor_t weight, float eps) {
    return guard([&] { ops::rms_norm_heads(*tensor_of(x, "x"), *tensor_of(weight, "weight"), eps); });
}

llaisysStatus_t llaisysMoeTopk(llaisysTensor_t ids, llaisysTensor_t weights, llaisysTensor_t logits,
                               int norm_topk_prob) {
    return guard([&] {
        ops::moe_topk(*tensor_of(ids, "ids"), *tensor_of(weights, "weights"), *tensor_of(logits, "logits"),
                      norm_topk_prob != 0);
    });
}

llaisysStatus_t llaisysMoeExperts(llaisysTensor_t out, llaisysTensor_t x, llaisysTensor_t ids, llaisysTensor_t weights,
                                  llaisysTensor_t gate_up, llaisysTensor_t down) {
    return guard([&] {
        ops::moe_experts(*tensor_of(out, "out"), *tensor_of(x, "x"), *tensor_of(ids, "ids"),
                         *tensor_of(weights, "weights"), *tensor_of(gate_up, "gate_up"), *tensor_of(down, "down"));
    });
}

llaisysStatus_t llaisysDequantize(llaisysTensor_t out, llaisysTensor_t in) {
    return guard([&] { ops::dequantize(*tensor_of(out, "out"), *tensor_of(in, "in")); });
}

llaisysStatus_t llaisysQuantize(llaisysTensor_t out, llaisysTensor_t in) {
    return guard([&] { ops::quantize(*tensor_of(out, "out"), *tensor_of(in, "in")); });
}

}  // extern "C"
