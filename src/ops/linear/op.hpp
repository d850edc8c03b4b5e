#pragma once

#include "../../tensor/tensor.hpp"

namespace llaisys::ops {

// out = in @ weight^T + bias; bias may be null (see include/llaisys/ops.h).
void linear(Tensor &out, const Tensor &in, const Tensor &weight, const Tensor *bias);

}  // namespace llaisys::ops
