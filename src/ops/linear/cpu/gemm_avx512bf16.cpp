// bf16 x bf16 GEMM over pair panels (packed.hpp) with the AVX512_BF16 dot product vdpbf16ps.
// Built with -mavx512bf16 (CMakeLists.txt) and called only under Isa::Avx512Bf16. Like
// gemm_kernel.inc, everything here is intrinsics and plain loops in an anonymous namespace:
// no std template is instantiated, so no function with external linkage is emitted with
// these wider instructions.
//
// out [m, n] = bf16(x) [m, k] @ W^T + bias, f32 sums. The activations are rounded to bf16
// (nearest even) once per call into xb, one 32-bit pair per two steps of k. The register tile
// is MR rows x 32 columns: each step takes one pair row of the panel (two zmm, columns 0-15
// and 16-31), broadcasts one pair of each activation row, and vdpbf16ps adds
// x[2kp] * W[c, 2kp] + x[2kp + 1] * W[c, 2kp + 1] to the f32 sum of each column: twice the
// multiply-adds of an f32 FMA per instruction. MR = 6 rows with two sets of sums taking the
// pairs in turn (24 zmm) measured best on the build VM's EPYC: 8 rows with one set (16 zmm)
// is as fast for prefill but leaves decode's short tiles few independent chains (one thread,
// 1.5B qkv in L3: m = 1 85 vs 115 GFLOP/s, m = 4 ~325 vs ~390). Work items (panel, block of
// MC rows) are split over OpenMP threads panel-major, so decode (m = 1) spreads its panels
// over the cores; inside an item, k is walked in blocks of kPackedKc that stay in L1 while
// every row tile passes over them.
//
// Each output element is summed the same way for every tile height (its even pairs and its
// odd pairs of a k block in two sums, added, k blocks in order): it does not depend on m or on
// where its row falls in a tile, so a sequence's logits do not depend on the batch it shares
// (the engine relies on it; test_linear_shapes.py checks it bit for bit).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "gemm.hpp"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace llaisys::ops::cpu::avx512bf16 {
namespace {

constexpr size_t kNR = kPackedNrAvx512;  // columns per panel: two zmm of 16 f32 sums
constexpr size_t kMR = 6;                // rows per register tile
constexpr size_t kU = 2;                 // accumulator sets: kU * 2 * kMR = 24 zmm sums
constexpr size_t kMC = 96;               // rows per work item, a multiple of kMR
constexpr size_t kKpc = kPackedKc / 2;   // pairs per k block
static_assert(kNR == 32 && kPackedKc % 2 == 0 && kMC % kMR == 0, "tile shapes");

inline size_t smin(size_t a, size_t b) { return a < b ? a : b; }

// dst [kp] pairs = src [k] f32 rounded to bf16, nearest even (subnormal inputs become zero,
// as vdpbf16ps would read them anyway); for odd k the last pair's high half is zero.
inline void row_to_bf16(uint32_t *dst, const float *src, size_t k) {
    const size_t kp = (k + 1) / 2;
    size_t i = 0;
    for (; i + 32 <= k; i += 32) {
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
        _mm512_storeu_si512(dst + i / 2, (__m512i)v);
    }
    if (i < k) {  // 1..31 floats left; the zeros loaded past k round to zero
        const size_t left = k - i;
        const __mmask16 lo = __mmask16(left >= 16 ? 0xffffu : (1u << left) - 1);
        const __mmask16 hi = __mmask16(left <= 16 ? 0u : (1u << (left - 16)) - 1);
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + i + 16), _mm512_maskz_loadu_ps(lo, src + i));
        const size_t halves = 2 * (kp - i / 2);  // bf16 elements still to write, <= 32
        const __mmask32 st = __mmask32(halves >= 32 ? 0xffffffffu : (1u << halves) - 1);
        _mm512_mask_storeu_epi16(dst + i / 2, st, (__m512i)v);
    }
}

// c [R, NR] (+)= a [R rows of stride lda pairs][kpc pairs] . blk [kpc][NR] pairs. kU sets of
// accumulators take the pairs in turn (then add up in order), so a short tile still has
// kU * 2 * R dot-product chains in flight; the order is the same for every R. pf, when set,
// is the block to be read next: each pair row read here prefetches the same row of it.
template <size_t R>
inline void micro(float *c, const uint32_t *a, size_t lda, const uint32_t *blk, size_t kpc, bool accumulate,
                  const uint32_t *pf) {
    __m512 acc[kU][R][2];
    for (size_t u = 0; u < kU; u++)
        for (size_t r = 0; r < R; r++) acc[u][r][0] = acc[u][r][1] = _mm512_setzero_ps();
    if (accumulate) {
        for (size_t r = 0; r < R; r++) {
            acc[0][r][0] = _mm512_loadu_ps(c + r * kNR);
            acc[0][r][1] = _mm512_loadu_ps(c + r * kNR + 16);
        }
    }
    size_t kp = 0;
    for (; kp + kU <= kpc; kp += kU) {
        for (size_t u = 0; u < kU; u++) {
            if (pf) {  // the same pair row of the next block: two cache lines
                _mm_prefetch(reinterpret_cast<const char *>(pf + (kp + u) * kNR), _MM_HINT_T0);
                _mm_prefetch(reinterpret_cast<const char *>(pf + (kp + u) * kNR + 16), _MM_HINT_T0);
            }
            const __m512bh b0 = (__m512bh)_mm512_loadu_si512(blk + (kp + u) * kNR);
            const __m512bh b1 = (__m512bh)_mm512_loadu_si512(blk + (kp + u) * kNR + 16);
            for (size_t r = 0; r < R; r++) {
                const __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[r * lda + kp + u]));
                acc[u][r][0] = _mm512_dpbf16_ps(acc[u][r][0], av, b0);
                acc[u][r][1] = _mm512_dpbf16_ps(acc[u][r][1], av, b1);
            }
        }
    }
    for (; kp < kpc; kp++) {
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(blk + kp * kNR);
        const __m512bh b1 = (__m512bh)_mm512_loadu_si512(blk + kp * kNR + 16);
        for (size_t r = 0; r < R; r++) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32(int(a[r * lda + kp]));
            acc[0][r][0] = _mm512_dpbf16_ps(acc[0][r][0], av, b0);
            acc[0][r][1] = _mm512_dpbf16_ps(acc[0][r][1], av, b1);
        }
    }
    for (size_t u = 1; u < kU; u++)
        for (size_t r = 0; r < R; r++) {
            acc[0][r][0] = _mm512_add_ps(acc[0][r][0], acc[u][r][0]);
            acc[0][r][1] = _mm512_add_ps(acc[0][r][1], acc[u][r][1]);
        }
    for (size_t r = 0; r < R; r++) {
        _mm512_storeu_ps(c + r * kNR, acc[0][r][0]);
        _mm512_storeu_ps(c + r * kNR + 16, acc[0][r][1]);
    }
}

// The row tail of a block: `rows` (< MR) rows, the tile height chosen at compile time.
template <size_t R = 1>
inline void micro_tail(size_t rows, float *c, const uint32_t *a, size_t lda, const uint32_t *blk, size_t kpc,
                       bool accumulate, const uint32_t *pf) {
    if constexpr (R < kMR) {
        if (rows == R) micro<R>(c, a, lda, blk, kpc, accumulate, pf);
        else micro_tail<R + 1>(rows, c, a, lda, blk, kpc, accumulate, pf);
    }
}

inline float bf16_to_f32(uint16_t h) {
    const uint32_t u = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// One work item: rows [i0, i0 + rows) of out, panel p. xb [m, kp] pairs; panel [kp][NR] pairs.
inline void item(float *out, const uint32_t *xb, const uint32_t *panel, const uint16_t *bias, size_t i0,
                 size_t rows, size_t p, size_t n, size_t kp) {
    alignas(64) float ctile[kMC * kNR];  // [rows, NR] partial sums of this item
    for (size_t k0 = 0; k0 < kp; k0 += kKpc) {
        const size_t kpc = smin(kKpc, kp - k0);
        const uint32_t *blk = panel + k0 * kNR;  // [kpc][NR]
        const uint32_t *a = xb + i0 * kp + k0;
        // The first row tile prefetches the next block of the stream (of this panel, else the
        // next panel's first, which a thread's next item starts with when m <= kMC) while the
        // other tiles compute on this one from L1. Without it, batched decode (m = 16) read its
        // weights and computed in turns: 28 GB/s and 450 GFLOP/s on the 1.5B gate_up and
        // lm_head, against 36-45 GB/s and 600-750 with it (build VM, bench_gemm.py).
        const uint32_t *pf = k0 + kKpc < kp ? blk + kKpc * kNR : panel + kp * kNR;
        size_t i = 0;
        for (; i + kMR <= rows; i += kMR, pf = nullptr) micro<kMR>(ctile + i * kNR, a + i * kp, kp, blk, kpc, k0 > 0, pf);
        if (i < rows) micro_tail(rows - i, ctile + i * kNR, a + i * kp, kp, blk, kpc, k0 > 0, pf);
    }
    const size_t j0 = p * kNR, cols = smin(kNR, n - j0);
    float b[kNR];
    for (size_t c = 0; c < cols; c++) b[c] = bias ? bf16_to_f32(bias[j0 + c]) : 0.0f;
    for (size_t r = 0; r < rows; r++) {
        float *o = out + (i0 + r) * n + j0;
        for (size_t c = 0; c < cols; c++) o[c] = ctile[r * kNR + c] + b[c];
    }
}

}  // namespace

// k > 0 (PackedWeight refuses empty shapes), so every item writes its whole tile.
void linear_packed_bf16(float *out, const float *x, uint32_t *xb, const void *panels, const void *bias, size_t m,
                        size_t n, size_t k, const uint32_t *sel, size_t n_sel) {
    const size_t kp = (k + 1) / 2, n_panels = sel ? n_sel : (n + kNR - 1) / kNR, n_mb = (m + kMC - 1) / kMC;
    const auto *w = static_cast<const uint32_t *>(panels);  // [n_panels][kp][NR] pairs
    const auto *b = static_cast<const uint16_t *>(bias);     // [n] bf16 or null
    const ptrdiff_t items = ptrdiff_t(n_panels * n_mb);
    // The rows are rounded on this thread when they are few (decode: no barrier inside the
    // parallel region, which costs a futex wake under OMP_WAIT_POLICY=passive), else by the
    // team before the items (prefill; the loop's barrier ends that phase).
    const bool serial_round = m * k <= (size_t(1) << 16);
    if (serial_round)
        for (size_t i = 0; i < m; i++) row_to_bf16(xb + i * kp, x + i * k, k);
#pragma omp parallel
    {
        if (!serial_round) {
#pragma omp for schedule(static)
            for (ptrdiff_t i = 0; i < ptrdiff_t(m); i++) row_to_bf16(xb + size_t(i) * kp, x + size_t(i) * k, k);
        }
#pragma omp for schedule(static)
        for (ptrdiff_t t = 0; t < items; t++) {
            const size_t p = sel ? sel[size_t(t) / n_mb] : size_t(t) / n_mb, i0 = (size_t(t) % n_mb) * kMC;
            item(out, xb, w + p * kp * kNR, b, i0, smin(kMC, m - i0), p, n, kp);
        }
    }
}

}  // namespace llaisys::ops::cpu::avx512bf16
