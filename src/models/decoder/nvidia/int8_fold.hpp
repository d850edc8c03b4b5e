// Folded quantized decode steps on an NVIDIA GPU (LLAISYS_INT8_PRODUCERS=1, read once; opt-in
// until a GPU has run it): decode steps over GGUF weights that all take the int8 GEMV fold their
// norms as 16-bit ones do (Backend::folds_norms), and the producers write the GEMV's int8
// activations themselves: the norm before q|k|v and gate|up (rms_norm_quant), SwiGLU before down
// (swiglu_quant); o and down add into the residual inside their GEMV (linear_quant_int8's
// accumulate). 10 launches a layer where the quantizer before every linear and the separate
// norms made 13, with the same bits: the producers share the norm's and the quantizer's
// arithmetic (doc/nvidia.md, "int8 producers").
#pragma once

#include "../params.hpp"
#include "../weights.hpp"
#include "device_buffer.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace llaisys::models::nvidia {

class Int8Fold {
public:
    Int8Fold(const Config &c, int device_id);  // its buffer made once, at its largest: graphs keep its address

    static bool enabled();  // LLAISYS_INT8_PRODUCERS=1
    // whether a folded decode step of n rows runs this linear on int8 activations its producer wrote
    bool serves(const LinearWeight &w, size_t n) const;
    void begin_step() { of_ = nullptr; }  // nothing held from another step
    void forget() { of_ = nullptr; }      // the rows it held were rewritten by another kernel

    // out [n, w.n] = rms_norm(x) * norm_w @ w^T + bias
    void norm_linear(float *out, const float *x, const Tensor &norm_w, const LinearWeight &w, const Tensor *bias,
                     size_t n, cudaStream_t stream);
    // out [n, width] = swiglu(rms_norm(x) * norm_w @ w^T) through gate_up [n, 2 width]; out's int8
    // form is kept for the down projection's linear_residual
    void norm_linear_swiglu(float *out, float *gate_up, const float *x, const Tensor &norm_w, const LinearWeight &w,
                            size_t n, size_t width, cudaStream_t stream);
    // x [n, w.n] += in @ w^T (in quantized here unless it is what norm_linear_swiglu just wrote)
    void linear_residual(float *x, const float *in, const LinearWeight &w, size_t n, cudaStream_t stream);

private:
    size_t d_offset() const;
    int8_t *q();
    float *d();

    const Config &c_;
    int id_;
    Buffer act_;  // q [kQuantGemvRows, k_] int8, then d [kQuantGemvRows, k_ / 32] f32
    size_t k_ = 0;  // the widest k it holds (0: off)
    const float *of_ = nullptr;  // the f32 rows whose q, d it holds now (swiglu_quant's), or null
};

}  // namespace llaisys::models::nvidia
