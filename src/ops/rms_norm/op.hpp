#pragma once

#include "../../tensor/tensor.hpp"

namespace llaisys::ops {

// out = in / sqrt(mean(in^2) + eps) * weight, per row (see include/llaisys/ops.h).
void rms_norm(Tensor &out, const Tensor &in, const Tensor &weight, float eps);

// residual += in; out = rms_norm(residual, weight, eps), fused (see include/llaisys/ops.h).
void add_rms_norm(Tensor &out, Tensor &residual, const Tensor &in, const Tensor &weight, float eps);

// Per-head RMSNorm in place: x [n, heads, d] (contiguous), weight [d] (see llaisysRmsNormHeads).
void rms_norm_heads(Tensor &x, const Tensor &weight, float eps);

}  // namespace llaisys::ops
