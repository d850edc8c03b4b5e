#pragma once

#include "../../tensor/tensor.hpp"
#include "cpu/logit_screen.hpp"
#include "cpu/packed.hpp"
#include "cpu/quant_weight.hpp"

#include <memory>
#include <vector>

namespace llaisys::ops {

// out = in @ weight^T + bias; bias may be null (see include/llaisys/ops.h). A block-quantized
// weight (CPU) runs the quantized kernels over its bytes in place (cpu/quant_weight.hpp), for
// f32, f16 or bf16 activations; its bias is then of any float dtype.
void linear(Tensor &out, const Tensor &in, const Tensor &weight, const Tensor *bias);

// A copy of a block-quantized weight [n, k] (contiguous, CPU) for linear_quant.
std::unique_ptr<cpu::QuantWeight> pack_linear_quant(const Tensor &weight);
// The same from parts [n_i, k] stacked in order (one k; quant dtypes may differ).
std::unique_ptr<cpu::QuantWeight> pack_linear_quant(const std::vector<const Tensor *> &parts);
// out [m, n] = in [m, k] @ W^T + bias [n] (or null, any float dtype); out and in f32 on the CPU.
void linear_quant(Tensor &out, const Tensor &in, const cpu::QuantWeight &w, const Tensor *bias);
// ids[i] = the first index of the largest value of in[i] @ W^T (NaNs as argmax_packed), every
// output computed (quantized weights have no screen).
void argmax_quant(int64_t *ids, const Tensor &in, const cpu::QuantWeight &w);

// A copy of weight [n, k] (f32/f16/bf16, contiguous, CPU) packed for linear_packed.
std::unique_ptr<cpu::PackedWeight> pack_linear(const Tensor &weight);

// out [m, n] = in [m, k] @ W^T + bias [n] (or null, W's dtype); out and in f32 on the CPU.
void linear_packed(Tensor &out, const Tensor &in, const cpu::PackedWeight &w, const Tensor *bias);

// ids[i] = the first index of the largest value of in[i] @ W^T (NaNs ignored), in [m, k] f32
// on the CPU: the screen decides up to kMaxRows rows at a time, and rows it declines get every
// output computed. Returns whether the screen decided all of them.
bool argmax_packed(int64_t *ids, const Tensor &in, const cpu::PackedWeight &w, const cpu::LogitScreen &screen);

}  // namespace llaisys::ops
