#pragma once

#include "../../tensor/tensor.hpp"

namespace llaisys::ops {

// out [.., k] (f32, f16 or bf16) = the values of in [.., k] (a block-quantized dtype),
// bit-identical to gguf-py's dequantize (see include/llaisys/ops.h).
void dequantize(Tensor &out, const Tensor &in);

// out [.., k] (a block-quantized dtype) = in [.., k] (f32, f16 or bf16) quantized
// (src/quant/quantize.hpp says to what it is identical).
void quantize(Tensor &out, const Tensor &in);

}  // namespace llaisys::ops
