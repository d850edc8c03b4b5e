#include "swiglu_cpu.hpp"

#include "../../../utils/types.hpp"

#include <cmath>

namespace llaisys::ops::cpu {

void swiglu(std::byte *out, const std::byte *gate, const std::byte *up, llaisysDataType_t dtype, size_t n) {
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        auto *o = reinterpret_cast<T *>(out);
        auto *g = reinterpret_cast<const T *>(gate);
        auto *u = reinterpret_cast<const T *>(up);
#pragma omp parallel for schedule(static) if (n > 16384)
        for (ptrdiff_t i = 0; i < ptrdiff_t(n); i++) {
            float x = to_f32(g[i]);
            o[i] = from_f32<T>(to_f32(u[i]) * x / (1.0f + std::exp(-x)));
        }
    });
}

}  // namespace llaisys::ops::cpu
