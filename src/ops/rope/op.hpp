#pragma once

#include "../../tensor/tensor.hpp"

namespace llaisys::ops {

// Rotary position embedding, HF rotate-half convention (see include/llaisys/ops.h).
void rope(Tensor &out, const Tensor &in, const Tensor &pos, float theta);

// The same with a frequency table inv_freq [d/2] (f32, on out's device; rope_freqs.hpp) and
// cos and sin multiplied by attn_scale (see llaisysRopeTable).
void rope(Tensor &out, const Tensor &in, const Tensor &pos, const Tensor &inv_freq, float attn_scale);

}  // namespace llaisys::ops
