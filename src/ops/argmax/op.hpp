#pragma once

#include "../../tensor/tensor.hpp"

namespace llaisys::ops {

// Index and value of each row's maximum (see include/llaisys/ops.h).
void argmax(Tensor &max_idx, Tensor &max_val, const Tensor &vals);

}  // namespace llaisys::ops
