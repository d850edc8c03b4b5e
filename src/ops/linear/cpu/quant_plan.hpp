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
// Batch invariance (set_batch_invariant, llaisysSetBatchInvariant) is the one switch that moves
// at run time: on, no crossover applies, so a sequence's rows take one path whatever they share
// a step with.
#pragma once

#include "llaisys.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace llaisys::ops::cpu {

using DotRowsFn = void (*)(llaisysDataType_t, float *, size_t, const std::byte *, size_t, size_t, const std::byte *,
                           size_t, size_t, size_t);
using DotX16Fn = void (*)(llaisysDataType_t, float *, size_t, const std::byte *, size_t, const std::byte *, size_t,
                          size_t, size_t);

// Whether the quantized linear keeps one path at every batch size for the whole process (off by
// default). Each call chooses its path by its whole row count, and the two paths round
// differently (int8 activations against f32), so with crossovers a sequence's numerics, and at
// times its greedy tokens, depend on the rows it shares a step with, on how its prompt was cut
// into chunks and on how much of it came from the prefix cache. Read by every call; set it
// between steps.
bool batch_invariant();
void set_batch_invariant(bool on);

// (Weights a model or ops.PackedLinear loads take the plan's layout; a tensor's own bytes passed
// to ops.linear stay in the file's rows, whose kernel and crossover the plan has too.)
struct QuantPlan {
    bool x16 = false;              // rows repacked 16 at a time at load (quant_x16.hpp)
    DotRowsFn dot_rows = nullptr;  // the int8 kernel over the file's rows
    DotX16Fn dot_x16 = nullptr;    // the int8 kernel over x16 groups (where x16)
    size_t f32_min_rows = 0;       // activation rows from which the float path runs for the file's rows
    size_t f32_min_rows_x16 = 0;   // the same for x16 groups (where x16; SIZE_MAX: never)
    std::string text;              // one line for `llaisys info`: layout, int8 kernel, crossover, float path

    // Activation rows from which a call takes the float path: the crossover, or with batch
    // invariance on SIZE_MAX (the int8 kernels at every size) unless it is 0 (the float path at
    // every size, forced with LLAISYS_QUANT_F32_ROWS=0: one path too).
    size_t f32_from(bool x16_rows) const {
        const size_t from = x16_rows ? f32_min_rows_x16 : f32_min_rows;
        return from != 0 && batch_invariant() ? SIZE_MAX : from;
    }
};


// The plan of block-quantized dtype dt (kQuantDtypeNames) in this process; INVALID_ARGUMENT for any other dtype.
const QuantPlan &quant_plan(llaisysDataType_t dt);

}  // namespace llaisys::ops::cpu
