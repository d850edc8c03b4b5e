#pragma once

#include "../../tensor/tensor.hpp"

namespace llaisys::ops {

// The mixture-of-experts routing of the decoder (include/llaisys/ops.h, llaisysMoeTopk).
void moe_topk(Tensor &ids, Tensor &weights, const Tensor &logits, bool norm_topk_prob);
// A sparse FFN's experts over their routed rows (llaisysMoeExperts): the decoder's gather,
// grouped linears, SwiGLU and weighted combine, with each expert packed as the model packs it.
void moe_experts(Tensor &out, const Tensor &x, const Tensor &ids, const Tensor &weights, const Tensor &gate_up,
                 const Tensor &down);

}  // namespace llaisys::ops
