#include "hadamard.hpp"

#include "../utils/error.hpp"

#include <cmath>

namespace llaisys::kv {

size_t key_rotation(size_t head_dim) {
    return head_dim & (~head_dim + 1);  // the lowest set bit: the largest power of two dividing it
}

size_t value_rotation(size_t head_dim) { return head_dim % 64 == 0 ? 64 : key_rotation(head_dim); }

namespace {

// x [n] = H x in place: log2(n) butterfly passes, then the 1/sqrt(n) that makes H orthonormal.
void rotate_block(float *x, size_t n, float scale) {
    for (size_t h = 1; h < n; h *= 2) {
        for (size_t i = 0; i < n; i += 2 * h) {
            for (size_t j = i; j < i + h; j++) {
                const float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
        }
    }
    for (size_t j = 0; j < n; j++) x[j] *= scale;
}

}  // namespace

void hadamard(float *x, size_t rows, size_t width, size_t stride, size_t block) {
    LLAISYS_CHECK_ARG(block >= 2 && (block & (block - 1)) == 0 && width % block == 0 && width <= stride,
                      "hadamard: block ", block, " must be a power of two dividing width ", width,
                      " (<= stride ", stride, ")");
    const float scale = 1.0f / std::sqrt(float(block));
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < width; c += block) rotate_block(x + r * stride + c, block, scale);
    }
}

}  // namespace llaisys::kv
