// Shared checks and dispatch of the elementwise binary ops (add, mul).
#pragma once

#include "../../tensor/tensor.hpp"
#include "cpu/elementwise_cpu.hpp"

namespace llaisys::ops {

void binary_op(const char *name, cpu::BinaryOp op, Tensor &out, const Tensor &a, const Tensor &b);

}  // namespace llaisys::ops
