#pragma once

#include "../../tensor/tensor.hpp"

namespace llaisys::ops {

// Softmax over the last dimension (see include/llaisys/ops.h).
void softmax(Tensor &out, const Tensor &in);

}  // namespace llaisys::ops
