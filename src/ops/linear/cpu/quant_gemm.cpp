// The quantized linear's float path (quant_gemm.hpp).
//
// The GEMM is run transposed: out^T [n, m] = W [n, k] @ x^T, with the dequantized weight rows
// as the broadcast operand (the "a" rows of panel_block_f32, row-major as a dequantizer writes
// them) and the activations packed once per call into panels of NR rows, the layout the packed
// kernel streams (packed.hpp's row panels, f32):
//   xp [ceil(m / NR)][k][NR]   xp[p][kk][c] = x[p NR + c, kk], zero past row m.
// A work item is (a group of kGroup weight rows of one segment, up to kRowsMax activation
// rows); for each k-block of kKc it dequantizes the group's blocks once ([kGroup][kKc] f32,
// 24 KiB, in L1/L2) and runs every activation panel of the item over them, so each weight byte
// is read once per call per kRowsMax rows and decoded as often. OpenMP splits the items
// statically (contiguous ranges of weight rows per thread).
#include "quant_gemm.hpp"

#include "../../../utils/checked.hpp"
#include "../../../utils/cpu_isa.hpp"
#include "../../../utils/types.hpp"
#include "gemm.hpp"
#include "quant_kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace llaisys::ops::cpu {
namespace {

constexpr size_t kKc = 256;      // k per dequantized block: one K-quant block, eight 32-blocks
constexpr size_t kGroup = 24;    // weight rows per item: 4 AVX2 tiles of 6, 3 AVX-512 tiles of 8
constexpr size_t kRowsMax = 256; // activation rows per item (the partial sums: 24 KiB)
constexpr size_t kFileBytes = 288; // >= the file's bytes of kKc elements in any format (Q8_0: 272)

using DequantFn = void (*)(llaisysDataType_t, float *, size_t, const std::byte *, size_t, size_t, size_t, size_t);
using PanelFn = void (*)(float *, const float *, size_t, size_t, const float *, size_t, bool);

// panel_block_f32 without SIMD intrinsics (LLAISYS_ISA=scalar): NR = kPackedNrAvx2.
void panel_scalar(float *c, const float *a, size_t lda, size_t rows, const float *blk, size_t kc, bool accumulate) {
    constexpr size_t nr = kPackedNrAvx2;
    for (size_t r = 0; r < rows; r++) {
        float s[nr];  // [nr] row r of c
        for (size_t j = 0; j < nr; j++) s[j] = accumulate ? c[r * nr + j] : 0.0f;
        for (size_t kk = 0; kk < kc; kk++) {
            const float av = a[r * lda + kk];
#pragma omp simd
            for (size_t j = 0; j < nr; j++) s[j] += av * blk[kk * nr + j];
        }
        for (size_t j = 0; j < nr; j++) c[r * nr + j] = s[j];
    }
}

struct Kernels {
    DequantFn dequant;
    PanelFn panel;
    size_t nr;  // activation rows per panel
};

Kernels kernels() {
    const Isa isa = active_isa();
    if (isa >= Isa::Avx512) return {quant_avx2::dequant_rows, avx512::panel_block_f32, kPackedNrAvx512};
    if (isa == Isa::Avx2) return {quant_avx2::dequant_rows, avx2::panel_block_f32, kPackedNrAvx2};
    return {quant_scalar::dequant_rows, panel_scalar, kPackedNrAvx2};
}

// xp [n_xp][k][nr] from x [m, k] (layout at the top), parallel over panels.
void pack_x(float *xp, const float *x, size_t m, size_t k, size_t nr) {
    const size_t n_xp = ceil_div(m, nr);
#pragma omp parallel for schedule(static) if (m * k >= 65536)
    for (ptrdiff_t pp = 0; pp < ptrdiff_t(n_xp); pp++) {
        const size_t p = size_t(pp), rows = std::min(nr, m - p * nr);
        float *dst = xp + p * k * nr;          // [k][nr]
        const float *src = x + p * nr * k;     // [rows][k]
        for (size_t kk = 0; kk < k; kk++, dst += nr) {
            for (size_t c = 0; c < rows; c++) dst[c] = src[c * k + kk];
            for (size_t c = rows; c < nr; c++) dst[c] = 0.0f;
        }
    }
}

}  // namespace

void linear_quant_f32(float *out, const float *x, const QuantRows *segs, size_t n_segs, size_t n, size_t k,
                      const std::byte *bias, llaisysDataType_t bias_dt, size_t m) {
#ifndef LLAISYS_NO_AMX
    if (cpu_uses_amx()) return amx::linear_quant_bf16(out, x, segs, n_segs, n, k, bias, bias_dt, m);
#endif
    const Kernels kn = kernels();
    const size_t nr = kn.nr, n_xp = ceil_div(m, nr);
    thread_local std::vector<float> xp_buf;  // [n_xp][k][nr], kept per calling thread across calls
    if (xp_buf.size() < n_xp * k * nr) xp_buf.resize(n_xp * k * nr);
    float *xp = xp_buf.data();
    pack_x(xp, x, m, k, nr);

    const size_t panels_per_item = kRowsMax / nr, n_mb = ceil_div(n_xp, panels_per_item);
    size_t items = 0;  // (group of kGroup rows of one segment, block of activation panels)
    for (size_t i = 0; i < n_segs; i++) items += ceil_div(segs[i].rows, kGroup) * n_mb;
#pragma omp parallel for schedule(static)
    for (ptrdiff_t t = 0; t < ptrdiff_t(items); t++) {
        size_t g = size_t(t) / n_mb, si = 0;
        const size_t mb = size_t(t) % n_mb;
        while (g >= ceil_div(segs[si].rows, kGroup)) g -= ceil_div(segs[si++].rows, kGroup);
        const QuantRows &s = segs[si];
        const size_t r0 = g * kGroup, rows = std::min(kGroup, s.rows - r0), j0 = s.row0 + r0;
        const size_t p0 = mb * panels_per_item, p1 = std::min(n_xp, p0 + panels_per_item);
        const size_t bs = quant_block_size(s.dt);
        alignas(64) float wbuf[kGroup * kKc];            // [rows][kKc] this k-block of W, dequantized
        alignas(64) float ctile[kRowsMax * kGroup];      // [p1 - p0][rows][nr] partial sums (out^T)
        alignas(64) std::byte fbuf[kGroup * kFileBytes];  // [rows][kKc / bs] file blocks of an x16 segment
        for (size_t k0 = 0; k0 < k; k0 += kKc) {
            const size_t kc = std::min(kKc, k - k0);  // a multiple of bs: k is, and kKc is
            if (s.x16) {  // this k-block's file blocks first (quant_x16.hpp)
                const size_t ld = kc / bs * quant_block_bytes(s.dt);
                for (size_t r = 0; r < rows; r++) file_blocks(s, r0 + r, k0 / bs, kc / bs, fbuf + r * ld);
                kn.dequant(s.dt, wbuf, kKc, fbuf, ld, rows, 0, kc / bs);
            } else {
                kn.dequant(s.dt, wbuf, kKc, s.data + r0 * s.row_bytes, s.row_bytes, rows, k0 / bs, kc / bs);
            }
            for (size_t p = p0; p < p1; p++)
                kn.panel(ctile + (p - p0) * rows * nr, wbuf, kKc, rows, xp + (p * k + k0) * nr, kc, k0 > 0);
        }
        float b[kGroup];  // [rows] bias of these outputs
        for (size_t r = 0; r < rows; r++) b[r] = 0.0f;
        if (bias) {
            dispatch_float(bias_dt, [&](auto tag) {
                const auto *bp = reinterpret_cast<const decltype(tag) *>(bias) + j0;  // [rows]
                for (size_t r = 0; r < rows; r++) b[r] = to_f32(bp[r]);
            });
        }
        for (size_t p = p0; p < p1; p++) {
            const float *c = ctile + (p - p0) * rows * nr;  // [rows][nr]
            for (size_t ci = 0; ci < nr && p * nr + ci < m; ci++) {
                float *o = out + (p * nr + ci) * n + j0;  // [rows] of output row p nr + ci
                for (size_t r = 0; r < rows; r++) o[r] = c[r * nr + ci] + b[r];
            }
        }
    }
}

}  // namespace llaisys::ops::cpu
