#include "rms_norm_cpu.hpp"

#include "../../../utils/types.hpp"
#include "../../cpu_simd/row_kernels.hpp"

#include <cmath>

namespace llaisys::ops::cpu {
namespace {

template <class T, class TW>
void rms_norm_impl(T *out, const T *in, const TW *weight, size_t m, size_t d, float eps) {
#pragma omp parallel for schedule(static) if (m * d > 8192)
    for (ptrdiff_t i = 0; i < ptrdiff_t(m); i++) {
        const T *x = in + size_t(i) * d;
        T *y = out + size_t(i) * d;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (size_t j = 0; j < d; j++) {
            float v = to_f32(x[j]);
            ss += v * v;
        }
        float inv = 1.0f / std::sqrt(ss / float(d) + eps);
        for (size_t j = 0; j < d; j++) y[j] = from_f32<T>(to_f32(x[j]) * inv * to_f32(weight[j]));
    }
}

template <class T, class TW>
void add_rms_norm_impl(T *out, T *residual, const T *in, const TW *weight, size_t m, size_t d, float eps) {
#pragma omp parallel for schedule(static) if (m * d > 8192)
    for (ptrdiff_t i = 0; i < ptrdiff_t(m); i++) {
        T *r = residual + size_t(i) * d;
        const T *x = in + size_t(i) * d;
        T *y = out + size_t(i) * d;
        float ss = 0.0f;
        for (size_t j = 0; j < d; j++) {
            T sum = from_f32<T>(to_f32(r[j]) + to_f32(x[j]));  // what a separate add would store
            r[j] = sum;
            float v = to_f32(sum);
            ss += v * v;
        }
        float inv = 1.0f / std::sqrt(ss / float(d) + eps);
        for (size_t j = 0; j < d; j++) y[j] = from_f32<T>(to_f32(r[j]) * inv * to_f32(weight[j]));
    }
}

template <class T, class TW>
void rms_norm_heads_impl(T *x, const TW *w, size_t n, size_t heads, size_t d, size_t stride, float eps) {
    const ptrdiff_t rows = ptrdiff_t(n * heads);
#pragma omp parallel for schedule(static) if (n * heads * d > 8192)
    for (ptrdiff_t i = 0; i < rows; i++) {
        T *v = x + size_t(i) / heads * stride + size_t(i) % heads * d;  // [d] head h of token t
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (size_t j = 0; j < d; j++) {
            float f = to_f32(v[j]);
            ss += f * f;
        }
        float inv = 1.0f / std::sqrt(ss / float(d) + eps);
        for (size_t j = 0; j < d; j++) v[j] = from_f32<T>(to_f32(from_f32<T>(to_f32(v[j]) * inv)) * to_f32(w[j]));
    }
}

}  // namespace

void rms_norm_heads(std::byte *x, llaisysDataType_t dtype, const std::byte *w, llaisysDataType_t wdt, size_t n,
                    size_t heads, size_t d, size_t stride, float eps) {
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        dispatch_float(wdt, [&](auto wtag) {
            using TW = decltype(wtag);
            rms_norm_heads_impl(reinterpret_cast<T *>(x), reinterpret_cast<const TW *>(w), n, heads, d, stride, eps);
        });
    });
}

void add_rms_norm(std::byte *out, std::byte *residual, const std::byte *in, llaisysDataType_t act,
                  const std::byte *weight, llaisysDataType_t wdt, size_t m, size_t d, float eps) {
    if (act == LLAISYS_DTYPE_F32) {  // the model's residual stream: the SIMD row kernel
        dispatch_float(wdt, [](auto) {});  // (an unsupported weight dtype fails here)
        const auto kernel = simd::row_kernels().add_rms_norm;
        auto *o = reinterpret_cast<float *>(out), *r = reinterpret_cast<float *>(residual);
        const auto *x = reinterpret_cast<const float *>(in);
#pragma omp parallel for schedule(static) if (m * d > 8192)
        for (ptrdiff_t i = 0; i < ptrdiff_t(m); i++)
            kernel(o + size_t(i) * d, r + size_t(i) * d, x + size_t(i) * d, weight, wdt, d, eps);
        return;
    }
    dispatch_float(act, [&](auto tag) {
        using T = decltype(tag);
        dispatch_float(wdt, [&](auto wtag) {
            using TW = decltype(wtag);
            add_rms_norm_impl(reinterpret_cast<T *>(out), reinterpret_cast<T *>(residual),
                              reinterpret_cast<const T *>(in), reinterpret_cast<const TW *>(weight), m, d, eps);
        });
    });
}

void rms_norm(std::byte *out, const std::byte *in, llaisysDataType_t act, const std::byte *weight,
              llaisysDataType_t wdt, size_t m, size_t d, float eps) {
    dispatch_float(act, [&](auto tag) {
        using T = decltype(tag);
        dispatch_float(wdt, [&](auto wtag) {
            using TW = decltype(wtag);
            rms_norm_impl(reinterpret_cast<T *>(out), reinterpret_cast<const T *>(in),
                          reinterpret_cast<const TW *>(weight), m, d, eps);
        });
    });
}

}  // namespace llaisys::ops::cpu
