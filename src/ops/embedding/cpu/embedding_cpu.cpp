#include "embedding_cpu.hpp"

#include "../../../quant/dequant.hpp"
#include "../../../utils/types.hpp"

#include <cstring>

namespace llaisys::ops::cpu {

void embedding(std::byte *out, llaisysDataType_t odt, const int64_t *index, const std::byte *weight,
               llaisysDataType_t wdt, size_t n, size_t vocab, size_t d) {
    for (size_t i = 0; i < n; i++) {
        LLAISYS_CHECK(index[i] >= 0 && uint64_t(index[i]) < vocab, LLAISYS_STATUS_OUT_OF_RANGE,
                      "embedding: index[", i, "] = ", index[i], " is outside the vocabulary [0, ", vocab, ")");
    }
    if (is_quant_dtype(wdt)) {  // quantized table: dequantize the looked-up rows
        const size_t rb = quant::row_bytes(wdt, d);
        dispatch_float(odt, [&](auto otag) {
            using TO = decltype(otag);
            auto *o = reinterpret_cast<TO *>(out);
#pragma omp parallel for schedule(static) if (n * d > (1 << 15))
            for (ptrdiff_t i = 0; i < ptrdiff_t(n); i++) {
                quant::dequantize_row(weight + size_t(index[i]) * rb, wdt, o + size_t(i) * d, d);
            }
        });
        return;
    }
    if (odt == wdt) {  // same dtype: whole-row copies
        size_t row = d * dtype_size(odt);
#pragma omp parallel for schedule(static) if (n * row > (1 << 16))
        for (ptrdiff_t i = 0; i < ptrdiff_t(n); i++) std::memcpy(out + i * row, weight + index[i] * row, row);
        return;
    }
    dispatch_float(odt, [&](auto otag) {
        using TO = decltype(otag);
        dispatch_float(wdt, [&](auto wtag) {
            using TW = decltype(wtag);
            auto *o = reinterpret_cast<TO *>(out);
            auto *w = reinterpret_cast<const TW *>(weight);
            for (size_t i = 0; i < n; i++) {
                const TW *src = w + size_t(index[i]) * d;
                for (size_t j = 0; j < d; j++) o[i * d + j] = from_f32<TO>(to_f32(src[j]));
            }
        });
    });
}

}  // namespace llaisys::ops::cpu
