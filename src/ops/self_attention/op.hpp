#pragma once

#include "../../tensor/tensor.hpp"

namespace llaisys::ops {

// Causal GQA self-attention (see include/llaisys/ops.h).
void self_attention(Tensor &out, const Tensor &q, const Tensor &k, const Tensor &v, float scale);

}  // namespace llaisys::ops
