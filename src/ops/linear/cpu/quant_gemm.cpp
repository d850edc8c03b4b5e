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
#include <cstdlib>
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

size_t quant_f32_min_rows(llaisysDataType_t dt, bool x16) {
    static const long forced = [] {  // LLAISYS_QUANT_F32_ROWS=<m>, read once; -1 when unset
        const char *env = std::getenv("LLAISYS_QUANT_F32_ROWS");
        char *end = nullptr;
        const long v = env && *env ? std::strtol(env, &end, 10) : -1;
        return end && *end == '\0' && v >= 0 ? v : -1;
    }();
    if (forced >= 0) return size_t(forced);
    // Measured with tools/bench_quant_linear.py --crossover (1.5B o shape, k = n = 1536, two
    // threads, AMD EPYC AVX2, load average 6-9 on 2 cores; medians of 3 alternating children),
    // float path speedup over int8 at m = 8 / 16 / 32 / 64:
    //   avx2:   Q4_K 0.61 / 0.94 / 1.03 / 1.14   Q6_K 0.65 / 1.02 / 1.14 / 1.24
    //           Q5_0 0.77 / 1.25 / 1.50 / 1.64   Q8_0 0.76 / 1.21 / 1.28 / 1.37
    //   scalar: Q4_K 0.71 / 1.15 / 2.04 at m = 8 / 16 / 32; Q8_0 1.03 / 1.85 / 2.33
    // (between 16 and 32 the float path pads m to a whole panel of 16: Q4_K 0.85 at m = 24).
    // Q4_0 is taken as Q8_0/Q5_0 and Q5_K as Q4_K/Q6_K; AVX-512 (not on this machine) as AVX2.
    // These int8 figures predate the 128-bit 4 x 4 tiles of the 32-blocks (quant_dot.inc), which
    // run m = 8 at 1.6x (Q5_0) and 1.25x (Q8_0) the old speed per core: about the float path's
    // speed at m = 16 now, so their crossover of 16 is, if anything, low (to be re-measured on a
    // quiet host with --crossover).
    // Those are Zen 1's (cpu_splits_256). On a full-width core (Zen 3, AVX2; medians of 3
    // alternating children, 2026-11-25, after the int8 kernels' 256-bit rows and register-held
    // sums) the int8 path holds on longer, float path speedup at m = 16 / 32 / 64 / 128:
    //   o:       Q8_0 0.95 / 1.01          Q5_0 1.30 / 1.51 / 1.65    Q4_K 0.94 / 1.03 / 0.91 / 0.97
    //            Q6_K 0.69 / 0.78 / 0.89 / 1.06
    //   gate_up: Q8_0 - / 1.10 / 1.24      Q4_K 0.80 / 0.94 / 0.99    Q6_K 0.59 / 0.68 / 0.75
    // (Q4_0 taken as Q8_0, Q5_K as Q4_K).
    // AVX-512 (Xeon with VNNI and BF16, 2 threads, 2026-11-26; the int8 path on vpdpbusd, the
    // float path on f32 FMAs even where the CPU has vdpbf16ps), float path speedup at m = 8 /
    // 16 / 32 / 64:
    //   o:       Q4_K 0.29 / 0.58 / 1.12 / 1.25   Q6_K 0.33 / 0.65 / 1.24 / 1.43
    //            Q8_0 0.55 / 1.10 / 2.08 / 2.29   Q5_0 0.52 / 1.04 / 2.07 / 2.22
    //   gate_up: Q4_K 0.30 / 0.58 / 1.13 / 1.25   Q6_K 0.30 / 0.58 / 1.08 / 1.20
    //            Q8_0 0.51 / 0.94 / 1.82 / 1.96   Q5_0 0.47 / 0.84 / 1.88 / 2.11
    // The float path costs about the same from 8 to 32 rows (one panel of kPackedNrAvx512 = 32
    // activation rows either way); at 16 the int8 path wins on the large matrices (o + gate_up:
    // Q8_0 5%, Q5_0 15%), so 32 for all.
    // AMX (the same Xeon, 2026-11-26; the float path on bf16 tiles, quant_amx.cpp: its cost is
    // the dequantization, flat from 4 to 32 rows), gate_up, float path speedup at m = 4 / 8 / 16:
    //   Q4_K 0.33 / 0.66 / 1.35   Q6_K 0.41 / 0.84 / 1.59   Q8_0 0.66 / 1.47 / 2.87
    // and at m = 128 3.5x to 6.2x; int8 grows linearly in m, so the K-quants cross near 12.
    // Rows in the x16 layout (quant_x16.hpp; Intel Xeon VM, 2026-11-27, 2 threads, one run;
    // float path speedup over the x16 int8 kernels at m = 16 / 32 / 64 / 128):
    //   AMX tiles, gate_up:      Q4_K 0.53 / 0.92 / 1.40 / 2.14   Q6_K 0.52 / 1.01 / 1.59 / 1.83
    //                            Q8_0 0.40 / 0.70 / 1.05 / 1.16   Q5_0 0.39 / 0.75 / 1.12 / 1.39
    //   AVX-512 VNNI, f32 FMAs:  0.37-0.57 at m = 512 (o; gate_up 0.36-0.61 at 64 and 256): never
    //   AVX2 (LLAISYS_ISA=avx2 on the same CPU), o: Q4_K 0.56 / 0.72 / 0.73 / 0.79 (0.80 at 512)
    //       Q6_K 0.73 / 0.93 / 1.09 / 1.14   Q8_0 0.64 / 0.83 / 0.90 / 1.05   Q5_0 0.54 / .. / 0.86 at 512
    //   AVX-VNNI (the same, LLAISYS_ISA=avx2 with the VEX vpdpbusd), o, m = 16 / 64 / 128 / 256:
    //       Q4_K 0.36 / 0.48 / 0.49 / 0.50   Q6_K 0.59 / 0.85 / 0.85 / 0.84
    //       Q8_0 0.36 / 0.47 / 0.48 / 0.45   Q5_0 0.43 / 0.62 / 0.62 / 0.61: never
    // (A full-width AMD core may differ: not measured.)
    if (x16) {
        if (cpu_uses_amx()) return 64;
        if (cpu_has_avx512_vnni() || cpu_has_avx_vnni()) return SIZE_MAX;
        return dt == LLAISYS_DTYPE_Q8_0 ? 128 : SIZE_MAX;  // (Q6_K is x16 only on AVX-512 VNNI)
    }
    const bool k_quant = reads_q8k(dt);
    if (cpu_uses_amx()) return k_quant ? 12 : 8;
    const Isa isa = active_isa();
    if (isa == Isa::Scalar) return k_quant ? 16 : 8;
    if (isa >= Isa::Avx512) return 32;
    if (isa == Isa::Avx2 && !cpu_splits_256()) {
        switch (dt) {
        case LLAISYS_DTYPE_Q5_0: return 16;
        case LLAISYS_DTYPE_Q4_0:
        case LLAISYS_DTYPE_Q8_0: return 32;
        case LLAISYS_DTYPE_Q6_K: return 128;
        default: return 64;  // Q4_K, Q5_K
        }
    }
    return k_quant ? 32 : 16;
}

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
