// f32 row kernels compiled once per SIMD path (row_kernels_{scalar,avx2,avx512}.cpp, with
// per-file -m flags in CMakeLists.txt; the code is row_kernels.inc over vec.inc) and picked
// at run time for the process's ISA. They serve the passes around the GEMMs that run over
// every token of a step (SwiGLU, the residual add + RMSNorm, the quantized linears' activation
// quantization) or over the whole vocabulary per sampled row (greedy argmax, log-softmax):
// plain loops there call libm's scalar expf once per element, and the baseline build (SSE2)
// left the norm's and the quantizers' loops scalar: in decode of the 0.5B they ran while the
// other threads waited, ~3% of a step.
#pragma once

#include "../linear/cpu/quant_kernels.hpp"
#include "llaisys.h"

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
    // residual[i] += in[i], then out[i] = residual[i] / rms(residual) * w[i], for i < n: rms =
    // sqrt(mean of squares + eps), the squares summed in kLanes partial sums; w f32, f16 or bf16.
    void (*add_rms_norm)(float *out, float *residual, const float *in, const void *w, llaisysDataType_t w_dtype,
                         size_t n, float eps);
    // x [32 nb] -> nb blocks, x [256 nb] -> nb K blocks (quant_kernels.hpp): d = max|x| / 127,
    // qs = x / d rounded to nearest even, their sums. Bit for bit the same on every SIMD path; a
    // block holding a NaN or an infinity gets d = NaN (so its outputs are NaN).
    void (*quantize_q8_32)(const float *x, BlockQ8_32 *out, size_t nb);
    void (*quantize_q8_k)(const float *x, BlockQ8_K *out, size_t nb);
};

// The kernels of the active ISA (cpu_isa.hpp).
const RowKernels &row_kernels();

}  // namespace llaisys::ops::cpu::simd
