// Linear. f32 activations take the SIMD GEMM of the active instruction set (gemm_kernel.inc);
// everything else, and LLAISYS_ISA=scalar, takes the plain reference below: activations
// widened to f32 once, each weight row once per call, OpenMP SIMD dot products.
// linear_packed runs the packed-panel GEMM (gemm_packed_kernel.inc) of the ISA a
// PackedWeight was packed for, the bf16 dot-product GEMM (gemm_avx512bf16.cpp) for bf16
// weights packed under Isa::Avx512Bf16, or, for Isa::Scalar, the plain loop over panels below.
#include "linear_cpu.hpp"

#include "../../../utils/cpu_isa.hpp"
#include "../../../utils/types.hpp"
#include "gemm.hpp"

#include <algorithm>
#include <vector>

namespace llaisys::ops::cpu {
namespace {

template <class T>
void to_f32_buffer(float *dst, const T *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = to_f32(src[i]);
}

template <class TA, class TW>
void linear_impl(TA *out, const TA *in, const TW *weight, const TW *bias, size_t m, size_t n, size_t k) {
    std::vector<float> x(m * k);  // [m, k] activations in f32
    to_f32_buffer(x.data(), in, m * k);
#pragma omp parallel
    {
        std::vector<float> w(k);  // [k] one weight row in f32
#pragma omp for schedule(static)
        for (ptrdiff_t j = 0; j < ptrdiff_t(n); j++) {
            to_f32_buffer(w.data(), weight + size_t(j) * k, k);
            float b = bias ? to_f32(bias[j]) : 0.0f;
            for (size_t i = 0; i < m; i++) {
                const float *xi = x.data() + i * k;
                const float *wj = w.data();
                float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
                for (size_t p = 0; p < k; p++) acc += xi[p] * wj[p];
                out[i * n + size_t(j)] = from_f32<TA>(acc + b);
            }
        }
    }
}

// The packed GEMM without SIMD: per panel, per row, NR f32 sums over k.
template <class TW>
void packed_reference(float *out, const float *x, const PackedWeight &w, const TW *bias, size_t m,
                      const uint32_t *sel, size_t n_sel) {
    const size_t n = w.n(), k = w.k(), nr = w.nr();
    std::vector<size_t> lane(nr);  // where column c of a panel row is stored (bf16 interleaves)
    for (size_t c = 0; c < nr; c++) lane[c] = w.lane(c);
#pragma omp parallel for schedule(static)
    for (ptrdiff_t pp = 0; pp < ptrdiff_t(sel ? n_sel : w.n_panels()); pp++) {
        const size_t p = sel ? sel[pp] : size_t(pp), j0 = p * nr, cols = std::min(nr, n - j0);
        const TW *panel = reinterpret_cast<const TW *>(w.data()) + p * k * nr;  // [k][nr]
        std::vector<float> acc(nr);
        for (size_t i = 0; i < m; i++) {
            std::fill(acc.begin(), acc.end(), 0.0f);
            for (size_t kk = 0; kk < k; kk++) {
                const float a = x[i * k + kk];
                for (size_t c = 0; c < nr; c++) acc[c] += a * to_f32(panel[kk * nr + lane[c]]);
            }
            for (size_t c = 0; c < cols; c++) out[i * n + j0 + c] = acc[c] + (bias ? to_f32(bias[j0 + c]) : 0.0f);
        }
    }
}

}  // namespace

void linear_packed(float *out, const float *x, const PackedWeight &w, const std::byte *bias, size_t m) {
    linear_packed_panels(out, x, w, bias, m, nullptr, 0);
}

void linear_packed_panels(float *out, const float *x, const PackedWeight &w, const std::byte *bias, size_t m,
                          const uint32_t *sel, size_t n_sel) {
    const int wdt = int(w.dtype());
    switch (w.isa()) {
    case Isa::Avx512Bf16: {
        // [m, ceil(k / 2)] x rounded to bf16 pairs; kept per thread, so prefill does not
        // fault in fresh pages on every call
        thread_local std::vector<uint32_t> xb;
        const size_t need = m * ((w.k() + 1) / 2);
        if (xb.size() < need) xb.resize(need);
        avx512bf16::linear_packed_bf16(out, x, xb.data(), w.data(), bias, m, w.n(), w.k(), sel, n_sel);
        return;
    }
    case Isa::Avx512: avx512::linear_packed_f32(out, x, w.data(), bias, wdt, m, w.n(), w.k(), sel, n_sel); return;
    case Isa::Avx2: avx2::linear_packed_f32(out, x, w.data(), bias, wdt, m, w.n(), w.k(), sel, n_sel); return;
    default:
        dispatch_float(w.dtype(), [&](auto tag) {
            using TW = decltype(tag);
            packed_reference(out, x, w, reinterpret_cast<const TW *>(bias), m, sel, n_sel);
        });
    }
}

void linear(std::byte *out, const std::byte *in, llaisysDataType_t act, const std::byte *weight,
            const std::byte *bias, llaisysDataType_t wdt, size_t m, size_t n, size_t k) {
    Isa isa = active_isa();
    if (act == LLAISYS_DTYPE_F32 && is_float_dtype(wdt) && isa != Isa::Scalar) {
        auto *o = reinterpret_cast<float *>(out);
        auto *x = reinterpret_cast<const float *>(in);
        if (isa >= Isa::Avx512) avx512::linear_f32(o, x, weight, bias, int(wdt), m, n, k);
        else avx2::linear_f32(o, x, weight, bias, int(wdt), m, n, k);
        return;
    }
    dispatch_float(act, [&](auto atag) {
        using TA = decltype(atag);
        dispatch_float(wdt, [&](auto wtag) {
            using TW = decltype(wtag);
            linear_impl(reinterpret_cast<TA *>(out), reinterpret_cast<const TA *>(in),
                        reinterpret_cast<const TW *>(weight), reinterpret_cast<const TW *>(bias), m, n, k);
        });
    });
}

}  // namespace llaisys::ops::cpu
