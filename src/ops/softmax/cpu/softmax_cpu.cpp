#include "softmax_cpu.hpp"

#include "../../../utils/types.hpp"

#include <cmath>
#include <limits>
#include <vector>

namespace llaisys::ops::cpu {

void softmax(std::byte *out, const std::byte *in, llaisysDataType_t dtype, size_t rows, size_t n) {
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        auto *o = reinterpret_cast<T *>(out);
        auto *x = reinterpret_cast<const T *>(in);
#pragma omp parallel if (rows * n > 8192)
        {
            std::vector<float> e(n);  // [n] exponentials of one row
#pragma omp for schedule(static)
            for (ptrdiff_t r = 0; r < ptrdiff_t(rows); r++) {
                const T *xr = x + size_t(r) * n;
                float mx = -std::numeric_limits<float>::infinity();
                for (size_t j = 0; j < n; j++) mx = std::max(mx, to_f32(xr[j]));
                float sum = 0.0f;
                for (size_t j = 0; j < n; j++) {
                    e[j] = std::exp(to_f32(xr[j]) - mx);
                    sum += e[j];
                }
                T *orow = o + size_t(r) * n;
                for (size_t j = 0; j < n; j++) orow[j] = from_f32<T>(e[j] / sum);
            }
        }
    });
}

}  // namespace llaisys::ops::cpu
