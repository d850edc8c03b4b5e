// The CPU's linear over block-quantized weights, planned once per process and format: the
// layout the weights take at load (the file's rows, or 16-row x16 groups: quant_x16.hpp), the
// int8 kernel that runs them (quant_kernels.hpp), and from how many activation rows the float
// path (dequantize + GEMM, quant_gemm.hpp) takes over. Every one of these choices, with the
// measurement behind it, is made in quant_plan.cpp (format x ISA x rows -> kernel); QuantWeight
// and linear_quant_rows only read the plan, and `llaisys info` prints it
// (llaisysCpuQuantPlan). The environment switches that move it, each read once:
//   LLAISYS_ISA (a lower SIMD path), LLAISYS_QUANT_X16=0 (no x16 layout), LLAISYS_AVX_VNNI=0,
//   LLAISYS_GFNI=0, LLAISYS_SPLIT_256=0|1 (the 32-blocks' 128-bit tiles), LLAISYS_AMX=0 (the
//   float path off AMX tiles), LLAISYS_QUANT_F32_ROWS=<m> (every format's crossover at m: 0
//   forces the float path, a huge value the int8 one; tests and bench_quant_linear --crossover).
#pragma once

#include "llaisys.h"

#include <cstddef>
#include <string>

namespace llaisys::ops::cpu {

using DotRowsFn = void (*)(llaisysDataType_t, float *, size_t, const std::byte *, size_t, size_t, const std::byte *,
                           size_t, size_t, size_t);
using DotX16Fn = void (*)(llaisysDataType_t, float *, size_t, const std::byte *, size_t, const std::byte *, size_t,
                          size_t, size_t);

// (Weights a model or ops.PackedLinear loads take the plan's layout; a tensor's own bytes passed
// to ops.linear stay in the file's rows, whose kernel and crossover the plan has too.)
struct QuantPlan {
    bool x16 = false;              // rows repacked 16 at a time at load (quant_x16.hpp)
    DotRowsFn dot_rows = nullptr;  // the int8 kernel over the file's rows
    DotX16Fn dot_x16 = nullptr;    // the int8 kernel over x16 groups (where x16)
    size_t f32_min_rows = 0;       // activation rows from which the float path runs for the file's rows
    size_t f32_min_rows_x16 = 0;   // the same for x16 groups (where x16; SIZE_MAX: never)
    std::string text;              // one line for `llaisys info`: layout, int8 kernel, crossover, float path

    size_t f32_from(bool x16_rows) const { return x16_rows ? f32_min_rows_x16 : f32_min_rows; }
};

// The plan of block-quantized dtype dt (kQuantDtypeNames) in this process; INVALID_ARGUMENT for any other dtype.
const QuantPlan &quant_plan(llaisysDataType_t dt);

}  // namespace llaisys::ops::cpu
