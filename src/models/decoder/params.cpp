// Model params: struct_size handling, validation naming the field, derived sizes.
#include "params.hpp"

#include "../../utils/checked.hpp"
#include "../../utils/error.hpp"
#include "../../utils/types.hpp"

#include <cmath>
#include <cstddef>
#include <cstring>

namespace llaisys::models {
namespace {

// The int a C caller stored in an enum field, read by its bytes (an out-of-range value in a
// C++ enum object is undefined behaviour to load as the enum).
template <class E>
int bits(const E &e) {
    static_assert(sizeof(E) == sizeof(int), "a C enum is an int");
    int v;
    std::memcpy(&v, &e, sizeof v);
    return v;
}

bool finite_positive(float x) { return std::isfinite(x) && x > 0; }

// The mixture-of-experts fields: all zero for a dense model; otherwise a top-k within the
// experts, a positive expert width, flags 0/1 and every derived size overflow-checked.
void validate_moe(Config &c, const char *pre) {
    llaisysModelParams_t &p = c.p;
    c.moe = p.n_experts > 0;
    c.sparse.assign(p.n_layers, c.moe ? 1 : 0);
    if (!c.moe) {
        LLAISYS_CHECK_ARG(p.n_experts_per_tok == 0 && p.moe_intermediate_size == 0 &&
                              p.shared_expert_intermediate_size == 0 && p.norm_topk_prob == 0,
                          pre, ": n_experts is 0 (a dense model) but n_experts_per_tok, moe_intermediate_size, "
                          "shared_expert_intermediate_size or norm_topk_prob is set");
        c.any_dense = true;
        p.layer_sparse = nullptr;
        return;
    }
    LLAISYS_CHECK_ARG(p.n_experts <= (size_t(1) << 16), pre, ": n_experts ", p.n_experts, " is larger than 65536");
    LLAISYS_CHECK_ARG(p.n_experts_per_tok >= 1 && p.n_experts_per_tok <= p.n_experts, pre, ": n_experts_per_tok (",
                      p.n_experts_per_tok, ") must be in [1, n_experts = ", p.n_experts, "]");
    LLAISYS_CHECK_ARG(p.moe_intermediate_size > 0, pre, ": moe_intermediate_size must be > 0 with n_experts > 0");
    LLAISYS_CHECK_ARG(p.norm_topk_prob == 0 || p.norm_topk_prob == 1, pre, ": norm_topk_prob must be 0 or 1, got ",
                      p.norm_topk_prob);
    const size_t Ie = p.moe_intermediate_size, Is = p.shared_expert_intermediate_size;
    size_t expert = checked_mul(checked_mul(3, Ie, "3 * moe_intermediate_size"), p.hidden_size, "expert elements");
    checked_mul(checked_mul(p.n_experts, expert, "n_experts * expert elements"), p.n_layers, "expert elements");
    checked_mul(checked_mul(2, Is, "2 * shared_expert_intermediate_size"), p.hidden_size, "shared expert elements");
    checked_mul(p.n_experts_per_tok, checked_mul(2, Ie, "2 * moe_intermediate_size"), "top-k expert width");
    if (p.layer_sparse) {
        for (size_t l = 0; l < p.n_layers; l++) {
            LLAISYS_CHECK_ARG(p.layer_sparse[l] <= 1, pre, ": layer_sparse[", l, "] must be 0 or 1, got ",
                              int(p.layer_sparse[l]));
            c.sparse[l] = p.layer_sparse[l];
        }
    }
    c.any_dense = false;
    for (uint8_t s : c.sparse) c.any_dense = c.any_dense || s == 0;
    p.layer_sparse = c.sparse.data();
}

// `pre` is "params" (llaisysModelParams_t) or "meta" (the Qwen2 meta): it starts each message.
void validate(Config &c, const char *pre) {
    llaisysModelParams_t &p = c.p;
    const int arch = bits(p.arch), dt = bits(p.dtype), rs = bits(p.rope_scaling), act = bits(p.activation);
    LLAISYS_CHECK_ARG(arch >= LLAISYS_ARCH_QWEN2 && arch <= LLAISYS_ARCH_MIXTRAL, pre, ": unknown arch ", arch);
    LLAISYS_CHECK(dt == LLAISYS_DTYPE_F32 || dt == LLAISYS_DTYPE_F16 || dt == LLAISYS_DTYPE_BF16,
                  LLAISYS_STATUS_DTYPE_MISMATCH, pre, ": dtype (", dt, ") must be f32, f16 or bf16");
    LLAISYS_CHECK_ARG(rs >= LLAISYS_ROPE_DEFAULT && rs <= LLAISYS_ROPE_YARN, pre, ": unknown rope_scaling ", rs);
    LLAISYS_CHECK_ARG(act == LLAISYS_ACT_SILU, pre, ": unknown activation ", act, " (SILU is supported)");
    LLAISYS_CHECK_ARG(p.n_layers > 0, pre, ": n_layers must be > 0");
    LLAISYS_CHECK_ARG(p.hidden_size > 0, pre, ": hidden_size must be > 0");
    LLAISYS_CHECK_ARG(p.intermediate_size > 0, pre, ": intermediate_size must be > 0");
    LLAISYS_CHECK_ARG(p.vocab_size > 0, pre, ": vocab_size must be > 0");
    LLAISYS_CHECK_ARG(p.max_position_embeddings > 0, pre, ": max_position_embeddings must be > 0");
    LLAISYS_CHECK_ARG(p.n_heads > 0 && p.n_kv_heads > 0 && p.n_heads % p.n_kv_heads == 0, pre, ": n_heads (",
                      p.n_heads, ") must be a positive multiple of n_kv_heads (", p.n_kv_heads, ")");
    LLAISYS_CHECK_ARG(p.head_dim > 0 && p.head_dim % 2 == 0, pre, ": head_dim must be even and > 0, got ", p.head_dim);
    LLAISYS_CHECK_ARG(finite_positive(p.rms_norm_eps), pre, ": rms_norm_eps must be finite and > 0");
    LLAISYS_CHECK_ARG(finite_positive(p.rope_theta), pre, ": rope_theta must be finite and > 0");
    LLAISYS_CHECK_ARG(p.qkv_bias == 0 || p.qkv_bias == 1, pre, ": qkv_bias must be 0 or 1, got ", p.qkv_bias);
    LLAISYS_CHECK_ARG(p.qk_norm == 0 || p.qk_norm == 1, pre, ": qk_norm must be 0 or 1, got ", p.qk_norm);
    LLAISYS_CHECK_ARG(p.tie_word_embeddings == 0 || p.tie_word_embeddings == 1, pre,
                      ": tie_word_embeddings must be 0 or 1, got ", p.tie_word_embeddings);
    // every derived width must fit in size_t: (nh + 2 nkv) * hd, 2 I, the layer and embedding sizes
    size_t heads = checked_add(p.n_heads, checked_mul(2, p.n_kv_heads, "2 * n_kv_heads"), "n_heads + 2 * n_kv_heads");
    c.qkv_dim = checked_mul(heads, p.head_dim, "(n_heads + 2 * n_kv_heads) * head_dim");
    c.q_dim = p.n_heads * p.head_dim;
    c.kv_dim = p.n_kv_heads * p.head_dim;
    size_t gate_up = checked_mul(2, p.intermediate_size, "2 * intermediate_size");
    size_t layer = checked_add(checked_mul(c.qkv_dim, p.hidden_size, "qkv weight elements"),
                               checked_mul(gate_up, p.hidden_size, "gate/up weight elements"), "layer weights");
    layer = checked_add(layer, checked_mul(c.q_dim, p.hidden_size, "o_proj weight elements"), "layer weights");
    checked_mul(p.n_layers, layer, "n_layers * layer weight elements");
    checked_mul(p.vocab_size, p.hidden_size, "embedding elements (vocab_size * hidden_size)");

    c.window.assign(p.n_layers, 0);
    if (p.layer_window) {
        for (size_t l = 0; l < p.n_layers; l++) {
            c.window[l] = p.layer_window[l];
            LLAISYS_CHECK_ARG(c.window[l] <= p.max_position_embeddings, pre, ": layer_window[", l, "] = ", c.window[l],
                              " is larger than max_position_embeddings (", p.max_position_embeddings, ")");
        }
    }
    p.layer_window = c.window.data();
    validate_moe(c, pre);

    ops::RopeSpec &r = c.rope;
    r.theta = p.rope_theta;
    r.type = static_cast<llaisysRopeScaling_t>(rs);
    r.factor = p.rope_factor;
    r.low_freq_factor = p.rope_low_freq_factor;
    r.high_freq_factor = p.rope_high_freq_factor;
    r.original_max_position = p.rope_original_max_position;
    r.beta_fast = p.rope_beta_fast;
    r.beta_slow = p.rope_beta_slow;
    r.attention_factor = p.rope_attention_factor;
    ops::check_rope_spec(r, p.head_dim);
    c.inv_freq = ops::rope_inv_freq(r, p.head_dim);
    c.rope_scale = ops::rope_attention_scale(r);
    c.softmax_scale = 1.0f / std::sqrt(float(p.head_dim));
}

}  // namespace

Config &Config::operator=(const Config &o) {
    if (this == &o) return *this;
    p = o.p;
    window = o.window;
    sparse = o.sparse;
    moe = o.moe;
    any_dense = o.any_dense;
    rope = o.rope;
    inv_freq = o.inv_freq;
    rope_scale = o.rope_scale;
    softmax_scale = o.softmax_scale;
    q_dim = o.q_dim;
    kv_dim = o.kv_dim;
    qkv_dim = o.qkv_dim;
    p.layer_window = window.empty() ? nullptr : window.data();
    p.layer_sparse = moe ? sparse.data() : nullptr;
    return *this;
}

llaisysModelParams_t default_params() {
    llaisysModelParams_t p;
    std::memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.arch = LLAISYS_ARCH_QWEN2;
    p.dtype = LLAISYS_DTYPE_BF16;
    p.rms_norm_eps = 1e-6f;
    p.rope_theta = 10000.0f;
    p.rope_scaling = LLAISYS_ROPE_DEFAULT;
    p.rope_factor = 1.0f;
    p.rope_low_freq_factor = 1.0f;
    p.rope_high_freq_factor = 4.0f;
    p.rope_beta_fast = 32.0f;
    p.rope_beta_slow = 1.0f;
    p.activation = LLAISYS_ACT_SILU;
    p.layer_window = nullptr;
    return p;
}

Config make_config(const llaisysModelParams_t *params) {
    LLAISYS_CHECK_ARG(params != nullptr, "params is NULL");
    size_t size;  // read struct_size by its bytes: the caller's struct may be shorter than ours
    std::memcpy(&size, params, sizeof size);
    constexpr size_t kMin = offsetof(llaisysModelParams_t, layer_window);
    LLAISYS_CHECK_ARG(size >= kMin, "params: struct_size ", size, " is smaller than ", kMin,
                      " (every field before layer_window is required; set struct_size = sizeof(llaisysModelParams_t))");
    // A caller built against a newer header: accepted when every field this library does not
    // know is zero (the newer fields' "unset"), as the Linux kernel's copy_struct_from_user.
    const auto *raw = reinterpret_cast<const unsigned char *>(params);
    for (size_t i = sizeof(llaisysModelParams_t); i < size; i++) {
        LLAISYS_CHECK_ARG(raw[i] == 0, "params: struct_size ", size, " is larger than this library's ",
                          sizeof(llaisysModelParams_t), " and byte ", i, " is set (a field this library does not know)");
    }
    Config c;
    c.p = default_params();
    std::memcpy(&c.p, params, std::min(size, sizeof(llaisysModelParams_t)));
    c.p.struct_size = sizeof(llaisysModelParams_t);
    validate(c, "params");
    return c;
}

Config config_from_qwen2(const llaisysQwen2Meta_t &m) {
    Config c;
    c.p = default_params();
    c.p.arch = LLAISYS_ARCH_QWEN2;
    std::memcpy(&c.p.dtype, &m.dtype, sizeof m.dtype);  // by its bytes: checked in validate
    c.p.n_layers = m.n_layers;
    c.p.hidden_size = m.hidden_size;
    c.p.intermediate_size = m.intermediate_size;
    c.p.n_heads = m.n_heads;
    c.p.n_kv_heads = m.n_kv_heads;
    c.p.head_dim = m.head_dim;
    c.p.vocab_size = m.vocab_size;
    // the meta allowed 0 (the core never used it); the params need a positive context
    c.p.max_position_embeddings = m.max_position_embeddings > 0 ? m.max_position_embeddings : SIZE_MAX;
    c.p.rms_norm_eps = m.rms_norm_eps;
    c.p.rope_theta = m.rope_theta;
    c.p.qkv_bias = 1;
    c.p.qk_norm = 0;
    c.p.tie_word_embeddings = m.tie_word_embeddings ? 1 : 0;
    validate(c, "meta");
    return c;
}

const char *arch_name(llaisysArch_t arch) {
    switch (bits(arch)) {
    case LLAISYS_ARCH_QWEN2: return "Qwen2";
    case LLAISYS_ARCH_LLAMA: return "Llama";
    case LLAISYS_ARCH_QWEN3: return "Qwen3";
    case LLAISYS_ARCH_MISTRAL: return "Mistral";
    case LLAISYS_ARCH_QWEN2_MOE: return "Qwen2-MoE";
    case LLAISYS_ARCH_QWEN3_MOE: return "Qwen3-MoE";
    case LLAISYS_ARCH_MIXTRAL: return "Mixtral";
    default: return "unknown";
    }
}

}  // namespace llaisys::models
