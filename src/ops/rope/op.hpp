#pragma once

#include "../../tensor/tensor.hpp"

namespace llaisys::ops {

// Rotary position embedding, HF rotate-half convention (see include/llaisys/ops.h).
void rope(Tensor &out, const Tensor &in, const Tensor &pos, float theta);

}  // namespace llaisys::ops
