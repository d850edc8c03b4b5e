#pragma once

#include "../../tensor/tensor.hpp"

namespace llaisys::ops {

// out[i, :] = weight[index[i], :] (see include/llaisys/ops.h).
void embedding(Tensor &out, const Tensor &index, const Tensor &weight);

}  // namespace llaisys::ops
