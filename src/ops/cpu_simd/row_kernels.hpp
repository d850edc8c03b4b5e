// f32 row kernels compiled once per SIMD path (row_kernels_{scalar,avx2,avx512}.cpp, with
// per-file -m flags in CMakeLists.txt; the code is row_kernels.inc over vec.inc) and picked
// at run time for the process's ISA. They serve the passes around the GEMMs that run over
// every token of a step (SwiGLU) or over the whole vocabulary per sampled row (greedy argmax,
// log-softmax): plain loops there call libm's scalar expf once per element.
#pragma once

#include <cstddef>

namespace llaisys::ops::cpu::simd {

struct RowKernels {
    // out[i] = up[i] * g / (1 + exp(-g)), g = gate[i], for i < n (out may alias gate or up).
    void (*swiglu)(float *out, const float *gate, const float *up, size_t n);
    // Index of the first NaN of v[0..n) if there is one, else of its first largest value (the
    // argmax rule of doc/architecture.md, "NaN in argmax"); 0 when n == 0.
    size_t (*argmax)(const float *v, size_t n);
    // The sum over i < n of exp(v[i] - shift); f32 within blocks of a few thousand, double
    // across them. NaN if any v[i] is NaN.
    double (*sum_exp)(const float *v, size_t n, float shift);
};

// The kernels of the active ISA (cpu_isa.hpp).
const RowKernels &row_kernels();

}  // namespace llaisys::ops::cpu::simd
