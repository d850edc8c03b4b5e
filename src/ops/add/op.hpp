#pragma once

#include "../../tensor/tensor.hpp"

namespace llaisys::ops {

// out = a + b elementwise (see include/llaisys/ops.h).
void add(Tensor &out, const Tensor &a, const Tensor &b);

}  // namespace llaisys::ops
