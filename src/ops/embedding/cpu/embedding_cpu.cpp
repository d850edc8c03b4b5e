#include "embedding_cpu.hpp"

#include "../../../utils/error.hpp"

#include <cstring>

namespace llaisys::ops::cpu {

void embedding(std::byte *out, const int64_t *index, const std::byte *weight, size_t elsize, size_t n,
               size_t vocab, size_t d) {
    for (size_t i = 0; i < n; i++) {
        LLAISYS_CHECK(index[i] >= 0 && uint64_t(index[i]) < vocab, LLAISYS_STATUS_OUT_OF_RANGE,
                      "embedding: index[", i, "] = ", index[i], " is outside the vocabulary [0, ", vocab, ")");
    }
    size_t row = d * elsize;
#pragma omp parallel for schedule(static) if (n * row > (1 << 16))
    for (ptrdiff_t i = 0; i < ptrdiff_t(n); i++) std::memcpy(out + i * row, weight + index[i] * row, row);
}

}  // namespace llaisys::ops::cpu
