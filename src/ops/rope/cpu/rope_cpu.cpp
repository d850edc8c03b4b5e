#include "rope_cpu.hpp"

#include "../../../utils/types.hpp"

#include <cmath>
#include <vector>

namespace llaisys::ops::cpu {
namespace {

template <class T>
void rope_impl(T *out, const T *in, const int64_t *pos, size_t n, size_t heads, size_t d, size_t stride,
               const float *inv_freq, float attn_scale) {
    size_t half = d / 2;
#pragma omp parallel for schedule(static) if (n * heads * d > 8192)
    for (ptrdiff_t i = 0; i < ptrdiff_t(n); i++) {
        float p = float(pos[i]);
        for (size_t j = 0; j < half; j++) {
            float angle = p * inv_freq[j];
            float c = std::cos(angle) * attn_scale, s = std::sin(angle) * attn_scale;
            for (size_t h = 0; h < heads; h++) {
                size_t base = size_t(i) * stride + h * d;
                float x1 = to_f32(in[base + j]), x2 = to_f32(in[base + j + half]);
                out[base + j] = from_f32<T>(x1 * c - x2 * s);
                out[base + j + half] = from_f32<T>(x2 * c + x1 * s);
            }
        }
    }
}

}  // namespace

void rope(std::byte *out, const std::byte *in, const int64_t *pos, llaisysDataType_t dtype, size_t n,
          size_t heads, size_t d, size_t stride, const float *inv_freq, float attn_scale) {
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        rope_impl(reinterpret_cast<T *>(out), reinterpret_cast<const T *>(in), pos, n, heads, d, stride, inv_freq,
                  attn_scale);
    });
}

void rope(std::byte *out, const std::byte *in, const int64_t *pos, llaisysDataType_t dtype, size_t n,
          size_t heads, size_t d, size_t stride, float theta) {
    std::vector<float> inv_freq(d / 2);  // [d/2], computed in f32 as transformers does
    for (size_t j = 0; j < inv_freq.size(); j++) inv_freq[j] = 1.0f / std::pow(theta, float(2 * j) / float(d));
    rope(out, in, pos, dtype, n, heads, d, stride, inv_freq.data(), 1.0f);
}

}  // namespace llaisys::ops::cpu
