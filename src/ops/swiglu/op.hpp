#pragma once

#include "../../tensor/tensor.hpp"

namespace llaisys::ops {

// out = up * silu(gate) (see include/llaisys/ops.h).
void swiglu(Tensor &out, const Tensor &gate, const Tensor &up);

}  // namespace llaisys::ops
