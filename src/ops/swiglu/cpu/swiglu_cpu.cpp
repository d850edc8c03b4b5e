#include "swiglu_cpu.hpp"

#include "../../../utils/types.hpp"
#include "../../cpu_simd/row_kernels.hpp"

#include <cmath>

namespace llaisys::ops::cpu {

void swiglu(std::byte *out, const std::byte *gate, const std::byte *up, llaisysDataType_t dtype, size_t rows,
            size_t cols, size_t in_stride, size_t out_stride) {
    if (dtype == LLAISYS_DTYPE_F32) {  // the model's activations: the SIMD row kernel
        const auto kernel = simd::row_kernels().swiglu;
#pragma omp parallel for schedule(static) if (rows * cols > 16384)
        for (ptrdiff_t r = 0; r < ptrdiff_t(rows); r++) {
            kernel(reinterpret_cast<float *>(out) + size_t(r) * out_stride,
                   reinterpret_cast<const float *>(gate) + size_t(r) * in_stride,
                   reinterpret_cast<const float *>(up) + size_t(r) * in_stride, cols);
        }
        return;
    }
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
#pragma omp parallel for schedule(static) collapse(2) if (rows * cols > 16384)
        for (ptrdiff_t r = 0; r < ptrdiff_t(rows); r++) {
            for (ptrdiff_t i = 0; i < ptrdiff_t(cols); i++) {
                const T *g = reinterpret_cast<const T *>(gate) + size_t(r) * in_stride;
                const T *u = reinterpret_cast<const T *>(up) + size_t(r) * in_stride;
                T *o = reinterpret_cast<T *>(out) + size_t(r) * out_stride;
                float x = to_f32(g[i]);
                o[i] = from_f32<T>(to_f32(u[i]) * x / (1.0f + std::exp(-x)));
            }
        }
    });
}

}  // namespace llaisys::ops::cpu
