#pragma once

#include "../../tensor/tensor.hpp"
#include "cpu/packed.hpp"

#include <memory>

namespace llaisys::ops {

// out = in @ weight^T + bias; bias may be null (see include/llaisys/ops.h).
void linear(Tensor &out, const Tensor &in, const Tensor &weight, const Tensor *bias);

// A copy of weight [n, k] (f32/f16/bf16, contiguous, CPU) packed for linear_packed.
std::unique_ptr<cpu::PackedWeight> pack_linear(const Tensor &weight);

// out [m, n] = in [m, k] @ W^T + bias [n] (or null, W's dtype); out and in f32 on the CPU.
void linear_packed(Tensor &out, const Tensor &in, const cpu::PackedWeight &w, const Tensor *bias);

}  // namespace llaisys::ops
