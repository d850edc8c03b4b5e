#pragma once

#include "../../tensor/tensor.hpp"

namespace llaisys::ops {

// out = in / sqrt(mean(in^2) + eps) * weight, per row (see include/llaisys/ops.h).
void rms_norm(Tensor &out, const Tensor &in, const Tensor &weight, float eps);

}  // namespace llaisys::ops
