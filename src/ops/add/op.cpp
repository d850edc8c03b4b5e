#include "op.hpp"

#include "../elementwise/elementwise.hpp"

namespace llaisys::ops {

void add(Tensor &out, const Tensor &a, const Tensor &b) { binary_op("add", cpu::BinaryOp::Add, out, a, b); }

}  // namespace llaisys::ops
