// The x16 kernels (quant_x16.hpp) on 512-bit vectors with AVX-512 VNNI: each vector lane is one
// of the group's 16 weight rows (one output), each vpdpbusd adds 4 k of all 16 rows against one
// broadcast of 4 activation bytes. Compile flags in CMakeLists.txt; called only where
// cpu_has_avx512_vnni(). As in quant_dot.inc nothing here has external linkage but dot_x16.
//
// Q4_K, per superblock and activation row: the 32 vectors of nibbles are split once per tile
// (two ands: the high nibbles stay in place, 16 x their value) and each feeds MR rows' vpdpbusd;
// the 8 sub-blocks' int32 sums are scaled by their 16 scales in f32 (the high nibbles' by scale
// / 16: exact, as 16 x a sum of 32 products of 4-bit and 8-bit values stays below 2^24), the
// mins subtracted through the activations' dsums.
// GCC 12 reports the _mm512_undefined source operand of the masked builtins behind the convert
// intrinsics as (maybe-)uninitialized (as in gemm_avx512bf16.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "../../../utils/cpu_isa.hpp"
#include "quant_kernels.hpp"
#include "quant_x16.hpp"

#include <cstring>

namespace llaisys::ops::cpu::quant_avx512 {
namespace {

constexpr size_t kMr = 4;
  // activation rows per tile: 4 x (2 sums + 2 f32) + 8 vectors in use

inline __m512 f16x16(const fp16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p))); }
inline __m512 u8x16(const uint8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))));
}
inline __m512i bcast4(const int8_t *p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

// One line of a weight stream, in three passes (q4_k_tile): into L3 from 2 KiB beyond far, into
// L2 from far, into L1 from near. The L3 pass put decode of the 1.5B files on the Xeon VM at
// +2.5% (Q4_K_M 26.4 -> 27.0, Q8_0 30.5 -> 31.2 GB/s of weights, alternating processes; the
// 0.5B within noise): the far pass then finds more of its lines on the way.
inline void prefetch_line(const char *near, const char *far) {
    _mm_prefetch(far + 2048, _MM_HINT_T2);
    _mm_prefetch(far, _MM_HINT_T1);
    _mm_prefetch(near, _MM_HINT_T0);
}

// out[i * ldo + r] (r < rows, i < MR) = lane r of w [nb] . x[i] [nb]. pf > 0: every line of the
// stream is prefetched in passes, pf * 3 / 2 bytes ahead into L2 and pf * 3 / 8 into L1, as
// the one-row walks do (quant_prefetch_bytes(); on the Intel Xeon VM two threads decoding the
// 1.5B Q4_K_M went from 21.5-22.8 tok/s without to 25.0-26.2, 512 / 3072 and 1024 / 2048 bytes
// measuring alike), by the first tile of a group only: the others find it in cache.
template <size_t MR>
void q4_k_tile(float *out, size_t ldo, const x16::BlockQ4_K *w, size_t rows, const BlockQ8_K *const *x, size_t nb,
               size_t pf) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F), hi4 = _mm512_set1_epi8(char(0xF0));
    __m512 acc[MR];
    for (size_t i = 0; i < MR; i++) acc[i] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const x16::BlockQ4_K &wb = w[b];
        const char *near = reinterpret_cast<const char *>(&wb) + pf * 3 / 8, *far = near + pf * 9 / 8;
        if (pf)
            for (size_t off = 0; off < offsetof(x16::BlockQ4_K, qs); off += 64) {
                prefetch_line(near + off, far + off);
            }
        __m512 sb[MR];  // sum over sub-blocks of scale * integer sum, per row
        for (size_t i = 0; i < MR; i++) sb[i] = _mm512_setzero_ps();
        for (size_t p = 0; p < 4; p++) {
            __m512i s0[MR], s1[MR];  // sub-blocks 2p (low nibbles) and 2p + 1 (high)
            for (size_t i = 0; i < MR; i++) s0[i] = s1[i] = _mm512_setzero_si512();
            for (size_t c = 0; c < 8; c++) {
                if (pf) {
                    const size_t off = offsetof(x16::BlockQ4_K, qs) + (8 * p + c) * 64;
                    prefetch_line(near + off, far + off);
                }
                const __m512i v = _mm512_load_si512(wb.qs[p][c]);
                // the high nibbles in place: 16 x their value (sums stay far below 2^31), the 16
                // taken out with their scales below; one instruction a line less than shifting
                const __m512i lo = _mm512_and_si512(v, lo4), hi = _mm512_and_si512(v, hi4);
                for (size_t i = 0; i < MR; i++) {
                    s0[i] = _mm512_dpbusd_epi32(s0[i], lo, bcast4(x[i][b].qs + 64 * p + 4 * c));
                    s1[i] = _mm512_dpbusd_epi32(s1[i], hi, bcast4(x[i][b].qs + 64 * p + 32 + 4 * c));
                }
            }
            const __m512 c0 = u8x16(wb.sc[2 * p]), c1 = _mm512_mul_ps(u8x16(wb.sc[2 * p + 1]), _mm512_set1_ps(1.0f / 16));
            for (size_t i = 0; i < MR; i++) {
                sb[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0[i]), c0, sb[i]);
                sb[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1[i]), c1, sb[i]);
            }
        }
        __m512 mins[MR];  // sum over sub-blocks of min * d_x * sum(x)
        for (size_t i = 0; i < MR; i++) mins[i] = _mm512_setzero_ps();
        for (size_t j = 0; j < 8; j++) {
            const __m512 mj = u8x16(wb.mn[j]);
            for (size_t i = 0; i < MR; i++) mins[i] = _mm512_fmadd_ps(mj, _mm512_set1_ps(x[i][b].dsums[j]), mins[i]);
        }
        const __m512 d = f16x16(wb.d), dmin = f16x16(wb.dmin);
        for (size_t i = 0; i < MR; i++) {
            acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(sb[i], d), _mm512_set1_ps(x[i][b].d), acc[i]);
            acc[i] = _mm512_fnmadd_ps(mins[i], dmin, acc[i]);
        }
    }
    const __mmask16 keep = __mmask16((1u << rows) - 1);
    for (size_t i = 0; i < MR; i++) _mm512_mask_storeu_ps(out + i * ldo, keep, acc[i]);
}

// Q6_K: quarter T of a half, 4 k of 16 rows, from its ql word (low nibbles for T < 2, high
// for T >= 2) and its qh word (bits 2 T): (nibble) | (2 bits << 4), one select (vpternlogd).
template <int T>
inline __m512i q6_quarter(__m512i ql, __m512i qh) {
    const __m512i lo = T < 2 ? ql : _mm512_srli_epi16(ql, 4);
    const __m512i hi = T == 0 ? _mm512_slli_epi16(qh, 4)
                       : T == 1 ? _mm512_slli_epi16(qh, 2)
                       : T == 2 ? qh
                                : _mm512_srli_epi16(qh, 2);
    // bits 0-3 from lo, 4-5 from hi, 6-7 zero: select(0x0F ? lo : hi & 0x30)
    return _mm512_ternarylogic_epi32(_mm512_set1_epi8(0x0F), lo, _mm512_and_si512(hi, _mm512_set1_epi8(0x30)), 0xCA);
}

// Quarter T of half h of a Q6_K x16 block: its two sub-blocks of 16 into sb (scale * sum).
template <int T, size_t MR>
inline void q6_k_quarter(const x16::BlockQ6_K &wb, size_t h, const BlockQ8_K *const *x, size_t b, __m512 *sb,
                         const char *near, const char *far) {
#pragma GCC unroll 2  // (left rolled, GCC kept the loops' bounds in registers: 1.3x slower)
    for (size_t half = 0; half < 2; half++) {  // elements l = 16 half .. 16 half + 15: sub-block 8 h + 2 T + half
        const size_t j = 8 * h + 2 * T + half;
        if (near) {  // 64 iterations a block, 53 lines: the first 53 prefetch one each
            const size_t line = 8 * (4 * h + T) + 4 * half;
#pragma GCC unroll 4
            for (size_t l = line; l < line + 4; l++) {
                if (l < sizeof(x16::BlockQ6_K) / 64) prefetch_line(near + 64 * l, far + 64 * l);
            }
        }
        __m512i s[MR];  // the -32 offset first: -32 sum(x) of the sub-block
        for (size_t i = 0; i < MR; i++) s[i] = _mm512_set1_epi32(-32 * x[i][b].bsums[j]);
#pragma GCC unroll 4
        for (size_t c = 4 * half; c < 4 * half + 4; c++) {
            const __m512i q = q6_quarter<T>(_mm512_load_si512(wb.ql[16 * h + 8 * (T & 1) + c]),
                                            _mm512_load_si512(wb.qh[8 * h + c]));
            for (size_t i = 0; i < MR; i++)
                s[i] = _mm512_dpbusd_epi32(s[i], q, bcast4(x[i][b].qs + 128 * h + 32 * T + 4 * c));
        }
        const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(wb.sc[j]))));
        for (size_t i = 0; i < MR; i++) sb[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i]), sc, sb[i]);
    }
}

template <size_t MR>
void q6_k_tile(float *out, size_t ldo, const x16::BlockQ6_K *w, size_t rows, const BlockQ8_K *const *x, size_t nb,
               size_t pf) {
    __m512 acc[MR];
    for (size_t i = 0; i < MR; i++) acc[i] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const x16::BlockQ6_K &wb = w[b];
        const char *near = pf ? reinterpret_cast<const char *>(&wb) + pf * 3 / 8 : nullptr;
        const char *far = pf ? near + pf * 9 / 8 : nullptr;
        __m512 sb[MR];
        for (size_t i = 0; i < MR; i++) sb[i] = _mm512_setzero_ps();
        for (size_t h = 0; h < 2; h++) {
            q6_k_quarter<0, MR>(wb, h, x, b, sb, near, far);
            q6_k_quarter<1, MR>(wb, h, x, b, sb, near, far);
            q6_k_quarter<2, MR>(wb, h, x, b, sb, near, far);
            q6_k_quarter<3, MR>(wb, h, x, b, sb, near, far);
        }
        const __m512 d = f16x16(wb.d);
        for (size_t i = 0; i < MR; i++) acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(sb[i], d), _mm512_set1_ps(x[i][b].d), acc[i]);
    }
    const __mmask16 keep = __mmask16((1u << rows) - 1);
    for (size_t i = 0; i < MR; i++) _mm512_mask_storeu_ps(out + i * ldo, keep, acc[i]);
}

// The 32-blocks' integer sums of one block into s (which start at the format's offset):
// Q8_0's stored bytes are q + 128, so -128 sum(x); Q5_0's quants q + 16, so -16 sum(x).
struct Q8_0Sums {
    using W = x16::BlockQ8_0;
    static constexpr int kOffset = -128;
    template <size_t MR>
    static void add(const W &wb, const BlockQ8_32 *const *x, size_t b, __m512i *s) {
        for (size_t c = 0; c < 8; c++) {
            const __m512i q = _mm512_loadu_si512(wb.qs[c]);
            for (size_t i = 0; i < MR; i++) s[i] = _mm512_dpbusd_epi32(s[i], q, bcast4(x[i][b].qs + 4 * c));
        }
    }
};

// Q5_0: chunk C's quants, nibble (low for C < 4, high after) | fifth bit (bit C of qh's bytes) << 4.
template <int C>
inline __m512i q5_chunk(const x16::BlockQ5_0 &wb, __m512i qh) {
    const __m512i v = _mm512_loadu_si512(wb.qs[C % 4]);
    const __m512i nib = C < 4 ? v : _mm512_srli_epi16(v, 4);
    const __m512i hb = C <= 4 ? _mm512_slli_epi16(qh, 4 - C) : _mm512_srli_epi16(qh, C - 4);
    return _mm512_ternarylogic_epi32(_mm512_set1_epi8(0x0F), nib, _mm512_and_si512(hb, _mm512_set1_epi8(0x10)), 0xCA);
}

template <int C, size_t MR>
inline void q5_step(const x16::BlockQ5_0 &wb, __m512i qh, const BlockQ8_32 *const *x, size_t b, __m512i *s) {
    const __m512i q = q5_chunk<C>(wb, qh);
    for (size_t i = 0; i < MR; i++) s[i] = _mm512_dpbusd_epi32(s[i], q, bcast4(x[i][b].qs + 4 * C));
}

struct Q5_0Sums {
    using W = x16::BlockQ5_0;
    static constexpr int kOffset = -16;
    template <size_t MR>
    static void add(const W &wb, const BlockQ8_32 *const *x, size_t b, __m512i *s) {
        const __m512i qh = _mm512_loadu_si512(wb.qh);
        q5_step<0, MR>(wb, qh, x, b, s);
        q5_step<1, MR>(wb, qh, x, b, s);
        q5_step<2, MR>(wb, qh, x, b, s);
        q5_step<3, MR>(wb, qh, x, b, s);
        q5_step<4, MR>(wb, qh, x, b, s);
        q5_step<5, MR>(wb, qh, x, b, s);
        q5_step<6, MR>(wb, qh, x, b, s);
        q5_step<7, MR>(wb, qh, x, b, s);
    }
};

// A 32-block format's tile: per block the int32 sums (Sums::add, from the offset) scaled once.
template <class Sums, size_t MR>
void b32_tile(float *out, size_t ldo, const typename Sums::W *w, size_t rows, const BlockQ8_32 *const *x, size_t nb,
              size_t pf) {
    __m512 acc[MR];
    for (size_t i = 0; i < MR; i++) acc[i] = _mm512_setzero_ps();
    for (size_t b = 0; b < nb; b++) {
        const typename Sums::W &wb = w[b];
        if (pf) {
            const char *near = reinterpret_cast<const char *>(&wb) + pf * 3 / 8, *far = near + pf * 9 / 8;
            for (size_t off = 0; off < sizeof wb; off += 64) prefetch_line(near + off, far + off);
        }
        __m512i s[MR];
        for (size_t i = 0; i < MR; i++) s[i] = _mm512_set1_epi32(Sums::kOffset * x[i][b].sum);
        Sums::template add<MR>(wb, x, b, s);
        const __m512 d = f16x16(wb.d);
        for (size_t i = 0; i < MR; i++)
            acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[i]), _mm512_mul_ps(d, _mm512_set1_ps(x[i][b].d)), acc[i]);
    }
    const __mmask16 keep = __mmask16((1u << rows) - 1);
    for (size_t i = 0; i < MR; i++) _mm512_mask_storeu_ps(out + i * ldo, keep, acc[i]);
}

// Every activation row over one group, MR at a time (Tile<MR'> for the last m % MR).
template <size_t MR, class X, class W, template <size_t> class Tile>
void tiles(float *out, size_t ldo, const W *w, size_t rows, const std::byte *xq, size_t xq_stride, size_t m,
           size_t nb, size_t pf) {
    for (size_t i0 = 0; i0 < m; i0 += MR) {
        const size_t mr = m - i0 < MR ? m - i0 : MR;
        const X *x[MR];
        for (size_t i = 0; i < MR; i++)
            x[i] = reinterpret_cast<const X *>(xq + (i0 + (i < mr ? i : mr - 1)) * xq_stride);
        float *o = out + i0 * ldo;
        const size_t p = i0 == 0 ? pf : 0;
        if (mr == MR) Tile<MR>::run(o, ldo, w, rows, x, nb, p);
        else if (mr == 1) Tile<1>::run(o, ldo, w, rows, x, nb, p);
        else if (MR > 2 && mr == 2) Tile<(MR > 2 ? 2 : 1)>::run(o, ldo, w, rows, x, nb, p);
        else Tile<(MR > 3 ? 3 : 1)>::run(o, ldo, w, rows, x, nb, p);
    }
}

template <size_t MR>
struct Q4K {
    static void run(float *o, size_t ldo, const x16::BlockQ4_K *w, size_t rows, const BlockQ8_K *const *x, size_t nb,
                    size_t pf) {
        q4_k_tile<MR>(o, ldo, w, rows, x, nb, pf);
    }
};
template <size_t MR>
struct Q8_0 {
    static void run(float *o, size_t ldo, const x16::BlockQ8_0 *w, size_t rows, const BlockQ8_32 *const *x, size_t nb,
                    size_t pf) {
        b32_tile<Q8_0Sums, MR>(o, ldo, w, rows, x, nb, pf);
    }
};
template <size_t MR>
struct Q5_0 {
    static void run(float *o, size_t ldo, const x16::BlockQ5_0 *w, size_t rows, const BlockQ8_32 *const *x, size_t nb,
                    size_t pf) {
        b32_tile<Q5_0Sums, MR>(o, ldo, w, rows, x, nb, pf);
    }
};
template <size_t MR>
struct Q6K {
    static void run(float *o, size_t ldo, const x16::BlockQ6_K *w, size_t rows, const BlockQ8_K *const *x, size_t nb,
                    size_t pf) {
        q6_k_tile<MR>(o, ldo, w, rows, x, nb, pf);
    }
};

}  // namespace

void dot_x16(llaisysDataType_t dt, float *out, size_t ldo, const std::byte *group, size_t rows, const std::byte *xq,
             size_t xq_stride, size_t m, size_t nb) {
    const size_t pf = quant_prefetch_bytes();
    switch (dt) {  // (x16::enabled's formats only: no error path in this file)
    case LLAISYS_DTYPE_Q4_K:
        return tiles<kMr, BlockQ8_K, x16::BlockQ4_K, Q4K>(out, ldo, reinterpret_cast<const x16::BlockQ4_K *>(group),
                                                         rows, xq, xq_stride, m, nb, pf);
    case LLAISYS_DTYPE_Q6_K:
        return tiles<kMr, BlockQ8_K, x16::BlockQ6_K, Q6K>(out, ldo, reinterpret_cast<const x16::BlockQ6_K *>(group),
                                                         rows, xq, xq_stride, m, nb, pf);
    case LLAISYS_DTYPE_Q8_0:
        return tiles<kMr, BlockQ8_32, x16::BlockQ8_0, Q8_0>(out, ldo, reinterpret_cast<const x16::BlockQ8_0 *>(group),
                                                           rows, xq, xq_stride, m, nb, pf);
    case LLAISYS_DTYPE_Q5_0:
        return tiles<kMr, BlockQ8_32, x16::BlockQ5_0, Q5_0>(out, ldo, reinterpret_cast<const x16::BlockQ5_0 *>(group),
                                                           rows, xq, xq_stride, m, nb, pf);
    default: return;
    }
}

}  // namespace llaisys::ops::cpu::quant_avx512
