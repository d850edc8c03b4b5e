#include "argmax_cpu.hpp"

#include "../../../utils/types.hpp"

#include <cmath>

namespace llaisys::ops::cpu {

void argmax(int64_t *max_idx, std::byte *max_val, const std::byte *vals, llaisysDataType_t dtype, size_t rows,
            size_t n) {
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        auto *v = reinterpret_cast<const T *>(vals);
        auto *mv = reinterpret_cast<T *>(max_val);
#pragma omp parallel for schedule(static) if (rows > 1 && rows * n > 65536)
        for (ptrdiff_t r = 0; r < ptrdiff_t(rows); r++) {
            const T *row = v + size_t(r) * n;
            size_t best = 0;
            float bv = to_f32(row[0]);
            for (size_t j = 1; j < n && !std::isnan(bv); j++) {
                float x = to_f32(row[j]);
                if (x > bv || std::isnan(x)) {
                    bv = x;
                    best = j;
                }
            }
            max_idx[r] = int64_t(best);
            mv[r] = row[best];
        }
    });
}

}  // namespace llaisys::ops::cpu
