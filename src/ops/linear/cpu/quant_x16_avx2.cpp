// The x16 kernels (quant_x16.hpp) on 256-bit vectors (AVX2): a group's 16 rows as two halves of
// 8 lanes, one after the other (16 vector registers hold one half's sums for 2 activation rows).
// maddubs multiplies 2 k of 8 rows against the broadcast activation bytes into int16, summed
// over a sub-block's 8 vectors before one madd widens them: 8 x 2 x 15 x 127 = 30480 cannot
// saturate. Compile flags in CMakeLists.txt; nothing here has external linkage but dot_x16.
#include <immintrin.h>

#include "quant_kernels.hpp"
#include "quant_x16.hpp"

#include <cstring>

namespace llaisys::ops::cpu::quant_avx2 {
namespace {

constexpr size_t kMr = 2;

inline __m256 f16x8(const fp16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
inline __m256 u8x8(const uint8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(p))));
}
inline __m256i bcast4(const int8_t *p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// out[i * ldo + r] = lane r of acc[i] for r < rows, i < mr.
inline void store_rows(float *out, size_t ldo, const __m256 *acc, size_t mr, size_t rows) {
    for (size_t i = 0; i < mr; i++) {
        alignas(32) float v[8];
        _mm256_store_ps(v, acc[i]);
        for (size_t r = 0; r < rows; r++) out[i * ldo + r] = v[r];
    }
}

// out[i * ldo + r] (r < 8 lanes of half h, i < MR) = lane 8 h + r of w [nb] . x[i] [nb].
template <size_t MR>
void q4_k_half(float *out, size_t ldo, const x16::BlockQ4_K *w, size_t h, size_t rows, const BlockQ8_K *const *x,
               size_t nb) {
    const __m256i lo4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    __m256 acc[MR];
    for (size_t i = 0; i < MR; i++) acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const x16::BlockQ4_K &wb = w[b];
        __m256 sb[MR];
        for (size_t i = 0; i < MR; i++) sb[i] = _mm256_setzero_ps();
        for (size_t p = 0; p < 4; p++) {
            __m256i s0[MR], s1[MR];  // int16 pair sums of sub-blocks 2p and 2p + 1
            for (size_t i = 0; i < MR; i++) s0[i] = s1[i] = _mm256_setzero_si256();
            for (size_t c = 0; c < 8; c++) {
                const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i *>(wb.qs[p][c] + 32 * h));
                const __m256i lo = _mm256_and_si256(v, lo4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
                for (size_t i = 0; i < MR; i++) {
                    s0[i] = _mm256_add_epi16(s0[i], _mm256_maddubs_epi16(lo, bcast4(x[i][b].qs + 64 * p + 4 * c)));
                    s1[i] = _mm256_add_epi16(s1[i], _mm256_maddubs_epi16(hi, bcast4(x[i][b].qs + 64 * p + 32 + 4 * c)));
                }
            }
            const __m256 c0 = u8x8(wb.sc[2 * p] + 8 * h), c1 = u8x8(wb.sc[2 * p + 1] + 8 * h);
            for (size_t i = 0; i < MR; i++) {
                sb[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(s0[i], ones)), c0, sb[i]);
                sb[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(s1[i], ones)), c1, sb[i]);
            }
        }
        __m256 mins[MR];
        for (size_t i = 0; i < MR; i++) mins[i] = _mm256_setzero_ps();
        for (size_t j = 0; j < 8; j++) {
            const __m256 mj = u8x8(wb.mn[j] + 8 * h);
            for (size_t i = 0; i < MR; i++) mins[i] = _mm256_fmadd_ps(mj, _mm256_set1_ps(x[i][b].dsums[j]), mins[i]);
        }
        const __m256 d = f16x8(wb.d + 8 * h), dmin = f16x8(wb.dmin + 8 * h);
        for (size_t i = 0; i < MR; i++) {
            acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(sb[i], d), _mm256_set1_ps(x[i][b].d), acc[i]);
            acc[i] = _mm256_fnmadd_ps(mins[i], dmin, acc[i]);
        }
    }
    store_rows(out, ldo, acc, MR, rows);
}

// Q6_K: quarter T of a half, 4 k of 8 rows (quant_x16_avx512.cpp's q6_quarter).
template <int T>
inline __m256i q6_quarter(__m256i ql, __m256i qh) {
    const __m256i lo = T < 2 ? ql : _mm256_srli_epi16(ql, 4);
    const __m256i hi = T == 0 ? _mm256_slli_epi16(qh, 4)
                       : T == 1 ? _mm256_slli_epi16(qh, 2)
                       : T == 2 ? qh
                                : _mm256_srli_epi16(qh, 2);
    return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi8(0x0F)), _mm256_and_si256(hi, _mm256_set1_epi8(0x30)));
}

template <int T, size_t MR>
inline void q6_k_quarter(const x16::BlockQ6_K &wb, size_t h8, size_t h, const BlockQ8_K *const *x, size_t b,
                         __m256 *sb) {
    const __m256i ones = _mm256_set1_epi16(1);
    for (size_t half = 0; half < 2; half++) {
        const size_t j = 8 * h + 2 * T + half;
        __m256i s[MR];  // int32, the -32 offset first
        for (size_t i = 0; i < MR; i++) s[i] = _mm256_set1_epi32(-32 * x[i][b].bsums[j]);
        for (size_t c = 4 * half; c < 4 * half + 4; c++) {
            const auto *ql = reinterpret_cast<const __m256i *>(wb.ql[16 * h + 8 * (T & 1) + c] + 32 * h8);
            const auto *qh = reinterpret_cast<const __m256i *>(wb.qh[8 * h + c] + 32 * h8);
            const __m256i q = q6_quarter<T>(_mm256_load_si256(ql), _mm256_load_si256(qh));
            for (size_t i = 0; i < MR; i++)  // pairs of 63 x 127 fit int16
                s[i] = _mm256_add_epi32(
                    s[i], _mm256_madd_epi16(_mm256_maddubs_epi16(q, bcast4(x[i][b].qs + 128 * h + 32 * T + 4 * c)), ones));
        }
        const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(wb.sc[j] + 8 * h8))));
        for (size_t i = 0; i < MR; i++) sb[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i]), sc, sb[i]);
    }
}

template <size_t MR>
void q6_k_half(float *out, size_t ldo, const x16::BlockQ6_K *w, size_t h8, size_t rows, const BlockQ8_K *const *x,
               size_t nb) {
    __m256 acc[MR];
    for (size_t i = 0; i < MR; i++) acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const x16::BlockQ6_K &wb = w[b];
        __m256 sb[MR];
        for (size_t i = 0; i < MR; i++) sb[i] = _mm256_setzero_ps();
        for (size_t h = 0; h < 2; h++) {
            q6_k_quarter<0, MR>(wb, h8, h, x, b, sb);
            q6_k_quarter<1, MR>(wb, h8, h, x, b, sb);
            q6_k_quarter<2, MR>(wb, h8, h, x, b, sb);
            q6_k_quarter<3, MR>(wb, h8, h, x, b, sb);
        }
        const __m256 d = f16x8(wb.d + 8 * h8);
        for (size_t i = 0; i < MR; i++) acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(sb[i], d), _mm256_set1_ps(x[i][b].d), acc[i]);
    }
    store_rows(out, ldo, acc, MR, rows);
}

// The 32-blocks' integer sums of half h8 of one block into s (which start at kOffset sum(x)).
// Q8_0: the stored q + 128 back to q, whose sign moves onto x (maddubs multiplies unsigned by
// signed bytes: 2 x 128 x 127 fits int16), so no offset.
struct Q8_0Sums {
    using W = x16::BlockQ8_0;
    static constexpr int kOffset = 0;
    template <size_t MR>
    static void add(const W &wb, size_t h8, const BlockQ8_32 *const *x, size_t b, __m256i *s) {
        const __m256i ones = _mm256_set1_epi16(1), bias = _mm256_set1_epi8(char(0x80));
        for (size_t c = 0; c < 8; c++) {
            const __m256i q = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(wb.qs[c] + 32 * h8)), bias);
            const __m256i qa = _mm256_sign_epi8(q, q);
            for (size_t i = 0; i < MR; i++)
                s[i] = _mm256_add_epi32(
                    s[i], _mm256_madd_epi16(_mm256_maddubs_epi16(qa, _mm256_sign_epi8(bcast4(x[i][b].qs + 4 * c), q)), ones));
        }
    }
};

// Q5_0: nibble | fifth bit << 4 as quant_x16_avx512.cpp builds it; 2 x 31 x 127 fits int16.
struct Q5_0Sums {
    using W = x16::BlockQ5_0;
    static constexpr int kOffset = -16;
    template <size_t MR>
    static void add(const W &wb, size_t h8, const BlockQ8_32 *const *x, size_t b, __m256i *s) {
        const __m256i ones = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(wb.qh + 32 * h8));
        for (int c = 0; c < 8; c++) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(wb.qs[c % 4] + 32 * h8));
            const __m256i nib = _mm256_and_si256(c < 4 ? v : _mm256_srli_epi16(v, 4), m4);
            const __m256i hb = c <= 4 ? _mm256_slli_epi16(qh, 4 - c) : _mm256_srli_epi16(qh, c - 4);
            const __m256i q = _mm256_or_si256(nib, _mm256_and_si256(hb, m10));
            for (size_t i = 0; i < MR; i++)
                s[i] = _mm256_add_epi32(s[i], _mm256_madd_epi16(_mm256_maddubs_epi16(q, bcast4(x[i][b].qs + 4 * c)), ones));
        }
    }
};

// A 32-block format's half h8 of a group: per block the int32 sums scaled once.
template <class Sums, size_t MR>
void b32_half(float *out, size_t ldo, const typename Sums::W *w, size_t h8, size_t rows, const BlockQ8_32 *const *x,
              size_t nb) {
    __m256 acc[MR];
    for (size_t i = 0; i < MR; i++) acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const typename Sums::W &wb = w[b];
        __m256i s[MR];
        for (size_t i = 0; i < MR; i++) s[i] = _mm256_set1_epi32(Sums::kOffset * x[i][b].sum);
        Sums::template add<MR>(wb, h8, x, b, s);
        const __m256 d = f16x8(wb.d + 8 * h8);
        for (size_t i = 0; i < MR; i++)
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[i]), _mm256_mul_ps(d, _mm256_set1_ps(x[i][b].d)), acc[i]);
    }
    store_rows(out, ldo, acc, MR, rows);
}

// x [kMr]: activation rows i0, i0 + 1, ... of xq (past m: row i0 again), of type X.
template <class X>
void rows_of(const std::byte *xq, size_t xq_stride, size_t m, size_t i0, const X **x) {
    for (size_t i = 0; i < kMr; i++) x[i] = reinterpret_cast<const X *>(xq + (i0 + (i0 + i < m ? i : 0)) * xq_stride);
}

}  // namespace

void dot_x16(llaisysDataType_t dt, float *out, size_t ldo, const std::byte *group, size_t rows, const std::byte *xq,
             size_t xq_stride, size_t m, size_t nb) {
    // (x16::enabled's formats only: no error path in this file)
    for (size_t h = 0; h * 8 < rows; h++) {
        const size_t hr = rows - 8 * h < 8 ? rows - 8 * h : 8;
        for (size_t i0 = 0; i0 < m; i0 += kMr) {
            float *o = out + i0 * ldo + 8 * h;
            const bool two = m - i0 >= 2;
            const BlockQ8_K *xk[kMr];
            const BlockQ8_32 *x32[kMr];
            switch (dt) {
            case LLAISYS_DTYPE_Q4_K: {
                const auto *w = reinterpret_cast<const x16::BlockQ4_K *>(group);
                rows_of(xq, xq_stride, m, i0, xk);
                two ? q4_k_half<2>(o, ldo, w, h, hr, xk, nb) : q4_k_half<1>(o, ldo, w, h, hr, xk, nb);
                break;
            }
            case LLAISYS_DTYPE_Q6_K: {
                const auto *w = reinterpret_cast<const x16::BlockQ6_K *>(group);
                rows_of(xq, xq_stride, m, i0, xk);
                two ? q6_k_half<2>(o, ldo, w, h, hr, xk, nb) : q6_k_half<1>(o, ldo, w, h, hr, xk, nb);
                break;
            }
            case LLAISYS_DTYPE_Q8_0: {
                const auto *w = reinterpret_cast<const x16::BlockQ8_0 *>(group);
                rows_of(xq, xq_stride, m, i0, x32);
                two ? b32_half<Q8_0Sums, 2>(o, ldo, w, h, hr, x32, nb) : b32_half<Q8_0Sums, 1>(o, ldo, w, h, hr, x32, nb);
                break;
            }
            case LLAISYS_DTYPE_Q5_0: {
                const auto *w = reinterpret_cast<const x16::BlockQ5_0 *>(group);
                rows_of(xq, xq_stride, m, i0, x32);
                two ? b32_half<Q5_0Sums, 2>(o, ldo, w, h, hr, x32, nb) : b32_half<Q5_0Sums, 1>(o, ldo, w, h, hr, x32, nb);
                break;
            }
            default: return;
            }
        }
    }
}

}  // namespace llaisys::ops::cpu::quant_avx2
