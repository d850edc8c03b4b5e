// Weight storage and loading by HuggingFace name. q/k/v and gate/up land in fused tensors.
#include "model.hpp"

#include "../../device/runtime_api.hpp"
#include "../../utils/checked.hpp"
#include "../../utils/error.hpp"
#include "../../utils/types.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace llaisys::models::qwen2 {
namespace {

void check_meta(const llaisysQwen2Meta_t &m) {
    LLAISYS_CHECK(is_float_dtype(m.dtype), LLAISYS_STATUS_DTYPE_MISMATCH, "model dtype must be f32, f16 or bf16");
    LLAISYS_CHECK_ARG(m.n_layers > 0 && m.hidden_size > 0 && m.intermediate_size > 0 && m.vocab_size > 0,
                      "meta: n_layers, hidden_size, intermediate_size and vocab_size must be > 0");
    LLAISYS_CHECK_ARG(m.n_heads > 0 && m.n_kv_heads > 0 && m.n_heads % m.n_kv_heads == 0,
                      "meta: n_heads (", m.n_heads, ") must be a positive multiple of n_kv_heads (", m.n_kv_heads, ")");
    LLAISYS_CHECK_ARG(m.head_dim > 0 && m.head_dim % 2 == 0, "meta: head_dim must be even and > 0, got ", m.head_dim);
    LLAISYS_CHECK_ARG(std::isfinite(m.rms_norm_eps) && m.rms_norm_eps > 0, "meta: rms_norm_eps must be > 0");
    LLAISYS_CHECK_ARG(std::isfinite(m.rope_theta) && m.rope_theta > 0, "meta: rope_theta must be > 0");
    // every derived width must fit in size_t: (nh + 2 nkv) * hd, 2 I, and the per-token rows
    size_t heads = checked_add(m.n_heads, checked_mul(2, m.n_kv_heads, "meta: 2 * n_kv_heads"), "meta: n_heads + 2 * n_kv_heads");
    size_t qkv = checked_mul(heads, m.head_dim, "meta: (n_heads + 2 * n_kv_heads) * head_dim");
    size_t gate_up = checked_mul(2, m.intermediate_size, "meta: 2 * intermediate_size");
    size_t layer = checked_add(checked_mul(qkv, m.hidden_size, "meta: qkv weight elements"),
                               checked_mul(gate_up, m.hidden_size, "meta: gate/up weight elements"), "meta: layer weights");
    checked_mul(m.n_layers, layer, "meta: n_layers * layer weight elements");
    checked_mul(m.vocab_size, m.hidden_size, "meta: embedding elements");
}

// Copy `rows` x `cols` elements of dtype src_dt into dst (dtype dst_dt) at row offset row0.
void convert_rows(Tensor &dst, size_t row0, const void *src, llaisysDataType_t src_dt, size_t n) {
    std::byte *out = dst.data() + row0 * (dst.numel() / dst.shape()[0]) * dst.element_size();
    if (src_dt == dst.dtype()) {
        device::runtime(dst.device()).memcpy(dst.device_id(), out, src, n * dst.element_size(),
                                             dst.device() == LLAISYS_DEVICE_CPU ? LLAISYS_MEMCPY_H2H : LLAISYS_MEMCPY_H2D);
        return;
    }
    // convert on the host, then copy
    std::vector<std::byte> tmp(n * dst.element_size());
    dispatch_float(src_dt, [&](auto stag) {
        using TS = decltype(stag);
        dispatch_float(dst.dtype(), [&](auto dtag) {
            using TD = decltype(dtag);
            auto *s = static_cast<const TS *>(src);
            auto *d = reinterpret_cast<TD *>(tmp.data());
#pragma omp parallel for schedule(static) if (n > 65536)
            for (ptrdiff_t i = 0; i < ptrdiff_t(n); i++) d[i] = from_f32<TD>(to_f32(s[i]));
        });
    });
    device::runtime(dst.device()).memcpy(dst.device_id(), out, tmp.data(), tmp.size(),
                                         dst.device() == LLAISYS_DEVICE_CPU ? LLAISYS_MEMCPY_H2H : LLAISYS_MEMCPY_H2D);
}

}  // namespace

Model::Model(const llaisysQwen2Meta_t &meta, llaisysDeviceType_t device, int device_id)
    : meta_(meta), device_(device), device_id_(device_id) {
    check_meta(meta_);
    const size_t H = meta_.hidden_size, I = meta_.intermediate_size, V = meta_.vocab_size, hd = meta_.head_dim;
    const size_t nq = meta_.n_heads * hd, nkv = meta_.n_kv_heads * hd;
    auto make = [&](std::vector<size_t> shape) { return Tensor::create(shape, meta_.dtype, device_, device_id_); };
    auto make_linear = [&](size_t n, size_t k) {
        LinearWeight lw;
        if (device_ == LLAISYS_DEVICE_CPU) {
            lw.packed = std::make_unique<ops::cpu::PackedWeight>(n, k, meta_.dtype);
        } else {
            lw.dense = make({n, k});
        }
        return lw;
    };
    auto slot = [&](const std::string &name, tensor_t dst, size_t row0, std::vector<size_t> shape) {
        slots_[name] = WeightSlot{std::move(dst), nullptr, row0, std::move(shape)};
    };
    auto slot_linear = [&](const std::string &name, const LinearWeight &dst, size_t row0, std::vector<size_t> shape) {
        slots_[name] = WeightSlot{dst.dense, dst.packed.get(), row0, std::move(shape)};
    };

    w_.final_norm = make({H});
    w_.lm_head = make_linear(V, H);
    slot("model.norm.weight", w_.final_norm, 0, {H});
    if (meta_.tie_word_embeddings) {
        slot_linear("model.embed_tokens.weight", w_.lm_head, 0, {V, H});
    } else {
        w_.embed = make({V, H});
        slot("model.embed_tokens.weight", w_.embed, 0, {V, H});
        slot_linear("lm_head.weight", w_.lm_head, 0, {V, H});
    }

    w_.layers.resize(meta_.n_layers);
    for (size_t l = 0; l < meta_.n_layers; l++) {
        LayerWeights &L = w_.layers[l];
        L.in_norm = make({H});
        L.qkv_w = make_linear(nq + 2 * nkv, H);
        L.qkv_b = make({nq + 2 * nkv});
        L.o_w = make_linear(H, nq);
        L.post_norm = make({H});
        L.gate_up_w = make_linear(2 * I, H);
        L.down_w = make_linear(H, I);
        std::string p = "model.layers." + std::to_string(l) + ".";
        slot(p + "input_layernorm.weight", L.in_norm, 0, {H});
        slot_linear(p + "self_attn.q_proj.weight", L.qkv_w, 0, {nq, H});
        slot_linear(p + "self_attn.k_proj.weight", L.qkv_w, nq, {nkv, H});
        slot_linear(p + "self_attn.v_proj.weight", L.qkv_w, nq + nkv, {nkv, H});
        slot(p + "self_attn.q_proj.bias", L.qkv_b, 0, {nq});
        slot(p + "self_attn.k_proj.bias", L.qkv_b, nq, {nkv});
        slot(p + "self_attn.v_proj.bias", L.qkv_b, nq + nkv, {nkv});
        slot_linear(p + "self_attn.o_proj.weight", L.o_w, 0, {H, nq});
        slot(p + "post_attention_layernorm.weight", L.post_norm, 0, {H});
        slot_linear(p + "mlp.gate_proj.weight", L.gate_up_w, 0, {I, H});
        slot_linear(p + "mlp.up_proj.weight", L.gate_up_w, I, {I, H});
        slot_linear(p + "mlp.down_proj.weight", L.down_w, 0, {H, I});
    }
}

void Model::set_weight(const std::string &name, const void *data, llaisysDataType_t dtype,
                       const std::vector<size_t> &shape) {
    auto it = slots_.find(name);
    LLAISYS_CHECK_ARG(it != slots_.end(), "unknown Qwen2 weight name '", name, "'",
                      meta_.tie_word_embeddings && name == "lm_head.weight" ? " (embeddings are tied)" : "");
    WeightSlot &s = it->second;
    LLAISYS_CHECK(shape == s.shape, LLAISYS_STATUS_SHAPE_MISMATCH, "weight '", name, "' has the wrong shape for this model");
    LLAISYS_CHECK(is_float_dtype(dtype), LLAISYS_STATUS_DTYPE_MISMATCH, "weight '", name,
                  "' must be f32, f16 or bf16, got ", dtype_name(dtype));
    LLAISYS_CHECK_ARG(data != nullptr, "weight '", name, "' data is NULL");
    if (s.packed) {
        s.packed->set_rows(s.row0, shape[0], data, dtype);
        if (s.packed == w_.lm_head.packed.get()) {  // the lm_head is one tensor: it is whole now
            const char *env = std::getenv("LLAISYS_GREEDY_SCREEN");
            w_.screen.reset();
            if (!(env && std::strcmp(env, "0") == 0)) w_.screen = std::make_unique<ops::cpu::LogitScreen>(*s.packed);
        }
    } else {
        size_t n = 1;
        for (size_t d : shape) n *= d;
        convert_rows(*s.dst, s.row0, data, dtype, n);
    }
    s.set = true;
}

std::vector<std::string> Model::missing_weights() const {
    std::vector<std::string> out;
    for (const auto &[name, s] : slots_) {
        if (!s.set) out.push_back(name);
    }
    return out;
}

}  // namespace llaisys::models::qwen2
