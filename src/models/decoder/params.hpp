// The decoder's configuration: the caller's llaisysModelParams_t, validated once, plus the
// sizes and tables derived from it. Every architecture is one of these; nothing else in the
// decoder knows which family it runs.
#pragma once

#include "../../ops/rope/rope_freqs.hpp"
#include "llaisys/models/model.h"
#include "llaisys/models/qwen2.h"

#include <cstdint>
#include <vector>

namespace llaisys::models {

struct Config {
    llaisysModelParams_t p;        // validated copy; p.layer_window points at `window` (never NULL)
    std::vector<uint32_t> window;  // [n_layers] sliding window of each layer, 0: whole context
    std::vector<uint8_t> sparse;   // [n_layers] 1: the layer's FFN is the MoE (p.layer_sparse points here)
    ops::RopeSpec rope;            // the rope fields of p
    std::vector<float> inv_freq;   // [head_dim / 2] RoPE frequencies (ops::rope_inv_freq)
    float rope_scale = 1.0f;       // multiplies cos and sin (ops::rope_attention_scale; 1 unless YaRN)
    float softmax_scale = 1.0f;    // 1 / sqrt(head_dim)
    size_t q_dim = 0;              // n_heads * head_dim
    size_t kv_dim = 0;             // n_kv_heads * head_dim
    size_t qkv_dim = 0;            // q_dim + 2 kv_dim: one row of the fused q/k/v projection
    bool moe = false;              // n_experts > 0
    bool any_dense = true;         // some layer runs the dense MLP (intermediate_size)

    Config() = default;
    Config(const Config &o) { *this = o; }
    Config &operator=(const Config &o);  // keeps p.layer_window / p.layer_sparse pointing at this
};

// llaisysModelDefaultParams().
llaisysModelParams_t default_params();

// Validates caller params: struct_size honoured (fields past it take their defaults; bytes past
// this library's struct must be zero), enums known, sizes > 0 and overflow-checked, n_kv_heads
// divides n_heads, head_dim even, eps and theta finite > 0, rope factors (ops::check_rope_spec),
// each layer window <= max_position_embeddings, activation SILU; with n_experts > 0: top-k in
// [1, n_experts], moe_intermediate_size > 0, norm_topk_prob 0/1, layer_sparse 0/1 (all MoE
// fields 0 when n_experts is 0). Errors are INVALID_ARGUMENT
// (DTYPE_MISMATCH for the dtype) naming the field.
Config make_config(const llaisysModelParams_t *params);

// The deprecated Qwen2 meta as model params (qkv bias, no q/k norm, no window), validated.
Config config_from_qwen2(const llaisysQwen2Meta_t &meta);

// "Qwen2", "Llama", "Qwen3", "Mistral", "Qwen2-MoE", "Qwen3-MoE", "Mixtral".
const char *arch_name(llaisysArch_t arch);

}  // namespace llaisys::models
