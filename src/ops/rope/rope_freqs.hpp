// RoPE frequency tables (host code, device-neutral): the inverse frequencies each rope
// scaling type gives, computed as transformers' modeling_rope_utils does
// (_compute_default / linear / llama3 / yarn_parameters), in the same f32 / f64 steps.
#pragma once

#include "llaisys/models/model.h"

#include <cstddef>
#include <vector>

namespace llaisys::ops {

struct RopeSpec {            // mirrors the rope fields of llaisysModelParams_t (models/model.h)
    float theta = 10000.0f;
    llaisysRopeScaling_t type = LLAISYS_ROPE_DEFAULT;
    float factor = 1.0f, low_freq_factor = 1.0f, high_freq_factor = 4.0f;
    size_t original_max_position = 0;
    float beta_fast = 32.0f, beta_slow = 1.0f, attention_factor = 0.0f;
};

// Throws INVALID_ARGUMENT naming the field: theta not finite and > 0, head_dim odd or 0, an
// unknown type, and for the type in use: factor not finite and >= 1 (LINEAR, LLAMA3, YARN),
// high_freq_factor <= low_freq_factor or low_freq_factor <= 0 (LLAMA3), original_max_position
// 0 (LLAMA3, YARN), betas not finite and > 0 or beta_fast < beta_slow, attention_factor < 0
// (YARN). YaRN's `truncate` is always true (transformers' default; configs that set it false,
// or give mscale / mscale_all_dim instead of an attention factor, are refused by the caller).
void check_rope_spec(const RopeSpec &s, size_t head_dim);

// inv_freq [head_dim / 2]: the angle of pair j at position p is p * inv_freq[j].
std::vector<float> rope_inv_freq(const RopeSpec &s, size_t head_dim);

// The factor multiplying cos and sin: 1 unless YARN, where it is attention_factor, or when that
// is 0, 0.1 ln(factor) + 1 (1 for factor <= 1), as transformers' get_mscale.
float rope_attention_scale(const RopeSpec &s);

}  // namespace llaisys::ops
