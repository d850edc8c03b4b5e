#include "op.hpp"

#include "../elementwise/elementwise.hpp"

namespace llaisys::ops {

void mul(Tensor &out, const Tensor &a, const Tensor &b) { binary_op("mul", cpu::BinaryOp::Mul, out, a, b); }

}  // namespace llaisys::ops
