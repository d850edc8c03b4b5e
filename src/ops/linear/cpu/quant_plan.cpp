// The quantized linear's plan (quant_plan.hpp): one table, format x ISA x rows -> kernel.
#include "quant_plan.hpp"

#include "../../../quant/blocks.hpp"
#include "../../../utils/cpu_isa.hpp"
#include "../../../utils/error.hpp"
#include "../../../utils/types.hpp"
#include "quant_kernels.hpp"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace llaisys::ops::cpu {
namespace {

constexpr llaisysDataType_t kFormats[] = {LLAISYS_DTYPE_Q4_0, LLAISYS_DTYPE_Q4_1, LLAISYS_DTYPE_Q5_0, LLAISYS_DTYPE_Q5_1,
                                          LLAISYS_DTYPE_Q8_0, LLAISYS_DTYPE_Q2_K, LLAISYS_DTYPE_Q3_K, LLAISYS_DTYPE_Q4_K,
                                          LLAISYS_DTYPE_Q5_K, LLAISYS_DTYPE_Q6_K, LLAISYS_DTYPE_IQ4_XS,
                                          LLAISYS_DTYPE_IQ2_XXS, LLAISYS_DTYPE_IQ2_XS, LLAISYS_DTYPE_IQ2_S,
                                          LLAISYS_DTYPE_IQ3_XXS, LLAISYS_DTYPE_IQ3_S, LLAISYS_DTYPE_IQ1_S,
                                          LLAISYS_DTYPE_IQ1_M};

// The layout: from AVX2 on, Q4_K, Q8_0, Q5_0, Q4_1 and Q5_1 are repacked 16 rows at a time (x16: one
// vpdpbusd / vpmaddubsw covers 4 k of 8-16 rows, no horizontal sums); Q6_K only for the 512-bit
// vpdpbusd kernels, Q2_K, Q3_K and IQ4_XS for those and the 256-bit VEX vpdpbusd of AVX-VNNI (on
// the same Zen 5 cores limited to AVX2 + AVX-VNNI, gate_up at m = 1: Q2_K 34 -> 53-56 GB/s, Q3_K
// 13 -> 36-44, IQ4_XS 32 -> 78 against the file's rows; 1.4-2x at m = 16 and 64), not for plain
// AVX2, whose vpmaddubsw form was not measured where it matters (Zen 3). Q6_K: on 256-bit
// vectors its x16 kernel spent about twice the file's one-row walk
// per weight (6-bit values rebuilt 8 rows at a time, one broadcast activation word per 4 k): on
// Zen 3 (AVX2, 2 threads) it lost at every m, 2x at m = 1 to 4 (lm_head 22.7 ms against 12.3 at
// m = 1), 1.3x at 64, and tied at 256 where both take the float path; as half the 1.5B Q4_K_M's
// bytes (ffn_down, lm_head) it cost decode 15-30%. Q4_0 and Q5_K have no x16 kernels. Without
// AVX2 a plain-loop x16 kernel ran 4-25x slower than the float path: the file's layout.
bool repacks(llaisysDataType_t dt) {
    static const bool on = [] {
        const char *env = std::getenv("LLAISYS_QUANT_X16");
        return !(env && std::strcmp(env, "0") == 0) && active_isa() >= Isa::Avx2;
    }();
    if (dt == LLAISYS_DTYPE_Q6_K) return on && cpu_has_avx512_vnni();
    if (dt == LLAISYS_DTYPE_Q2_K || dt == LLAISYS_DTYPE_Q3_K || dt == LLAISYS_DTYPE_IQ4_XS)
        return on && (cpu_has_avx512_vnni() || cpu_has_avx_vnni());
    return on && (dt == LLAISYS_DTYPE_Q4_K || dt == LLAISYS_DTYPE_Q8_0 || dt == LLAISYS_DTYPE_Q5_0 ||
                  dt == LLAISYS_DTYPE_Q4_1 || dt == LLAISYS_DTYPE_Q5_1);
}

// The crossover: the smallest m at which the float path beats the int8 one.
size_t f32_min_rows(llaisysDataType_t dt, bool x16) {
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
    // (Q4_0 taken as Q8_0, Q5_K, Q2_K and IQ4_XS as Q4_K, Q3_K as Q6_K's o, from 128; Q4_1 and Q5_1, not measured,
    // as Q4_0 and Q5_0: the same 32-blocks and int8 walk, plus one f32 term a block for the min).
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
    // The i-quants (file rows; Zen 5, one core, gate_up, 2026-11-30), float path speedup:
    //   AVX-512 VNNI, over the row walks, m = 8 / 16 / 32: IQ2_XXS 0.31 / 0.55 / 1.07, IQ3_XXS 0.36 /
    //   0.83 / 1.53, IQ2_S 0.31 / 0.67 / 1.46, IQ1_S 0.33 / 0.66 / 1.37; over the 16-row groups
    //   expanded from 8 rows on (quant_iq_dot.inc), m = 16 / 32 / 64 / 128: 0.40-0.42 / 0.57-0.59 /
    //   0.51-0.53 / 0.48 for all four: never
    //   AVX2 (LLAISYS_ISA=avx2), m = 16 / 32 / 64: IQ2_XXS 0.78 / 0.92 / 1.00   IQ3_S 1.01 / 1.05 / 1.56
    //   over the row walks; over AVX2's 8-row expanded groups (from 16 rows on; a Zen 4 core, o,
    //   2026-11-30), m = 16 / 64 / 128 / 256 / 512: IQ2_XXS 0.74 / 0.66 / 0.66 / 0.67 / 0.70, IQ3_S
    //   0.78 / 0.64 / 0.65 / 0.59 / 0.66, IQ1_S 0.71 / 0.61 / 0.60 / 0.72 / 0.83: never
    //   AVX-512 without VNNI (Intel Skylake-SP, 2026-12-01, 2 threads, one run of --crossover; the
    //   int8 path on AVX2's vpmaddubsw kernels, the float path on AVX-512 f32 FMAs, twice AVX2's
    //   width), float path speedup at m = 16 / 32 / 64 / 128 / 256:
    //     o, x16:  Q4_K - / 0.65 / 0.81 / 1.05 / -   Q8_0 0.38 / 0.83 / 0.96 / 1.10 / -
    //              Q5_0 0.43 / 0.77 / 1.04 / 1.25 / -   Q4_1 0.41 / 0.71 / 1.02 / 1.12 / 1.13
    //              Q5_1 0.40 / 0.86 / 1.12 / 1.36 / 1.12
    //     gate_up, x16: Q4_K - / 0.77 / 0.90 / 1.01 / 1.27 (1.34 at 512)   Q8_0 - / 0.74 / 0.82 / 0.92 / 1.17
    //              Q5_0 - / 0.76 / 1.06 / 1.01 / 1.45
    //     o, rows: Q4_0 0.84 / 1.47 / 2.01   Q3_K 0.55 / 1.13 / 1.41   IQ4_XS 0.64 / 1.32 / 1.47
    //              Q6_K 0.43 / 0.81 / 1.02 / 1.13 (gate_up 0.98 / 1.22 at 32 / 64)   Q5_K 0.44 / 0.97 / 1.20
    //              Q2_K 0.52 / 0.84 / 1.08
    //     o, i-quants (expanded groups), m = 16 / 64: IQ2_XXS 0.68 / 1.15, IQ3_XXS 0.77 / 1.21, IQ3_S
    //              0.75 / 1.26, IQ1_S 0.76 / 1.30, IQ2_S 0.82 / 1.46
    //   (down at m = 512, k = 8960, is the exception: Q4_K 0.95, Q6_K 0.82; the crossover is per format.)
    //   Applied to the file rows only, where the float path lost at 32 rows: Q5_K and Q2_K from
    //   64, and Q6_K never (it won 2-22% at 64-128 on o and gate_up but lost 18% on down at 512,
    //   and a 512-token prefill did not move beyond the host's noise). The x16 formats keep the
    //   int8 path: each call chooses its path by the rows of the whole step, so a finite
    //   crossover lets a request's greedy answer depend on what it shares a step with and on the
    //   prefix cache (with Q5_0 / Q4_K / Q6_K at 64-128 the 0.5B's answer changed inside a wave
    //   of 24 requests, test_async_scheduling_server). With Q6_K never, the default Q4_K_M file
    //   runs int8 at every size here, as on every CPU with VNNI; elsewhere llaisysSetBatchInvariant
    //   (serve --batch-invariant) gives that at the float path's cost.
    if (x16) {
        if (cpu_uses_amx()) return 64;
        if (cpu_has_avx512_vnni() || cpu_has_avx_vnni()) return SIZE_MAX;
        return dt == LLAISYS_DTYPE_Q8_0 ? 128 : SIZE_MAX;  // (the K-quants but Q4_K are x16 only on AVX-512 VNNI)
    }
    const bool k_quant = reads_q8k(dt);
    if (quant::is_i_quant(dt) && active_isa() >= Isa::Avx2)  // the expanded groups (quant_iq_dot.inc): as x16's
        return cpu_uses_amx() ? 64 : SIZE_MAX;
    if (cpu_uses_amx()) return k_quant ? 12 : 8;
    const Isa isa = active_isa();
    if (isa == Isa::Scalar) return k_quant ? 16 : 8;
    if (isa >= Isa::Avx512 && !cpu_has_avx512_vnni()) {  // Skylake-SP (above)
        if (dt == LLAISYS_DTYPE_Q6_K) return SIZE_MAX;
        return dt == LLAISYS_DTYPE_Q5_K || dt == LLAISYS_DTYPE_Q2_K ? 64 : 32;
    }
    if (isa >= Isa::Avx512) return 32;
    if (isa == Isa::Avx2 && !cpu_splits_256()) {
        switch (dt) {
        case LLAISYS_DTYPE_Q5_0:
        case LLAISYS_DTYPE_Q5_1: return 16;
        case LLAISYS_DTYPE_Q4_0:
        case LLAISYS_DTYPE_Q4_1:
        case LLAISYS_DTYPE_Q8_0: return 32;
        case LLAISYS_DTYPE_Q3_K: return 128;
        case LLAISYS_DTYPE_Q6_K: return SIZE_MAX;  // gate_up lost at every m measured, o won 6% at 128
        default: return 64;  // Q4_K, Q5_K, Q2_K, IQ4_XS
        }
    }
    return k_quant ? 32 : 16;
}

// LLAISYS_QUANT_F32_ROWS=<m>, read once: every format's crossover at m; -1 when unset.
long forced_f32_rows() {
    static const long forced = [] {
        const char *env = std::getenv("LLAISYS_QUANT_F32_ROWS");
        char *end = nullptr;
        const long v = env && *env ? std::strtol(env, &end, 10) : -1;
        return end && *end == '\0' && v >= 0 ? v : -1;
    }();
    return forced;
}

// Whether i-quant dt's one-row walk (m = 1: decode, and a MoE expert given one token) takes the
// AVX2 build's instead of the AVX-512 VNNI one's. In the AVX-512 build GCC holds some of the
// IQ2_XXS and IQ3_XXS walks' general registers in vector ones (objdump: 48 / 94 and 143 / 193
// moves in / out), and on AMD Zen 4 that costs more than VNNI saves: gate_up of the 1.5B, one
// core, m = 1, AVX-512 against AVX2 (2026-12-01, CPU time, 2 alternated runs): IQ2_XXS 2.13 / 1.83 ms,
// IQ3_XXS 2.75 / 2.44, IQ1_S 1.84 / 1.79, IQ1_M 2.83 / 2.97, IQ2_XS 1.83 / 2.07; at m = 4 the AVX-512
// walk leads or ties (IQ2_XXS 2.58 / 2.70-2.80, IQ3_XXS 3.37 / 3.20-3.33), so it keeps m > 1.
// Other kinds are not measured and keep the AVX-512 walk. LLAISYS_IQ_WALK_AVX2=1 takes the AVX2
// walk for every i-quant at m = 1, 0 for none.
bool iq_walks_avx2(llaisysDataType_t dt) {
    static const int forced = [] {
        const char *env = std::getenv("LLAISYS_IQ_WALK_AVX2");
        return env && (std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0) ? env[0] - '0' : -1;
    }();
    if (!quant::is_i_quant(dt) || !cpu_has_avx512_vnni() || active_isa() < Isa::Avx2) return false;
    if (forced >= 0) return forced == 1;
    const CpuKind &cpu = cpu_kind();
    const bool zen4 = cpu.vendor == "AuthenticAMD" && cpu.family == 0x19 && cpu.avx512f;
    return zen4 && (dt == LLAISYS_DTYPE_IQ2_XXS || dt == LLAISYS_DTYPE_IQ3_XXS);
}

void dot_rows_avx2_walk(llaisysDataType_t dt, float *out, size_t ldo, const std::byte *w, size_t row_bytes,
                        size_t rows, const std::byte *xq, size_t xq_stride, size_t m, size_t nb) {
    (m == 1 ? quant_avx2::dot_rows : quant_avx512::dot_rows)(dt, out, ldo, w, row_bytes, rows, xq, xq_stride, m, nb);
}

QuantPlan make_plan(llaisysDataType_t dt) {
    QuantPlan p;
    p.x16 = repacks(dt);
    const long forced = forced_f32_rows();
    p.f32_min_rows = forced >= 0 ? size_t(forced) : f32_min_rows(dt, false);
    p.f32_min_rows_x16 = forced >= 0 ? size_t(forced) : f32_min_rows(dt, true);
    std::string int8;
    if (iq_walks_avx2(dt)) {
        p.dot_rows = dot_rows_avx2_walk;
        int8 = "the AVX2 row walk at 1 row, AVX-512 VNNI row kernels above (from 8 rows 16-row int8 groups, "
               "expanded per call)";
    } else if (cpu_has_avx512_vnni()) {
        p.dot_rows = quant_avx512::dot_rows;
        int8 = quant::is_i_quant(dt) ? "AVX-512 VNNI row kernels (from 8 rows 16-row int8 groups, expanded per call)"
                                     : "AVX-512 VNNI row kernels";
    } else if (active_isa() >= Isa::Avx2) {
        p.dot_rows = quant_avx2::dot_rows;
        const bool tiles = cpu_splits_256() && !reads_q8k(dt);
        int8 = quant::is_i_quant(dt) ? "AVX2 row kernels (from 16 rows 8-row int8 groups, expanded per call)"
               : tiles              ? "AVX2 128-bit 4 x 4 tiles (this CPU splits 256-bit ops)"
                                    : "AVX2 row kernels";
    } else {
        p.dot_rows = quant_scalar::dot_rows;
        int8 = "scalar loops";
    }
    if (p.x16) {  // x16 groups exist from AVX2 on
        if (cpu_has_avx512_vnni()) {
            p.dot_x16 = cpu_has_gfni() ? quant_avx512_gfni::dot_x16 : quant_avx512::dot_x16;
            int8 = cpu_has_gfni() ? "AVX-512 VNNI + GFNI" : "AVX-512 VNNI";
        } else {
            p.dot_x16 = cpu_has_avx_vnni() ? quant_avxvnni::dot_x16 : quant_avx2::dot_x16;
            int8 = cpu_has_avx_vnni() ? "AVX-VNNI (256-bit vpdpbusd)" : "AVX2 (vpmaddubsw)";
        }
    }
    const size_t from = p.x16 ? p.f32_min_rows_x16 : p.f32_min_rows;  // (batch invariance aside)
    const Isa isa = active_isa();
    const char *flt = cpu_uses_amx() ? "AMX bf16 tiles"
                      : isa >= Isa::Avx512 ? "f32 GEMM, AVX-512"
                      : isa == Isa::Avx2  ? "f32 GEMM, AVX2"
                                          : "f32 GEMM, scalar";
    p.text = std::string(dtype_name(dt)) + ": " + (p.x16 ? "x16 groups" : "file rows") + ", int8 on " + int8;
    if (from == SIZE_MAX)
        p.text += " at every batch size";
    else if (from == 0)
        p.text = std::string(dtype_name(dt)) + ": float path (" + flt + ") at every batch size";
    else
        p.text += " below " + std::to_string(from) + " rows, float path (" + flt + ") from there";
    if (forced >= 0) p.text += " (LLAISYS_QUANT_F32_ROWS=" + std::to_string(forced) + ")";
    return p;
}

}  // namespace

namespace {
std::atomic<bool> g_batch_invariant{false};
}  // namespace

bool batch_invariant() { return g_batch_invariant.load(std::memory_order_relaxed); }

void set_batch_invariant(bool on) { g_batch_invariant.store(on, std::memory_order_relaxed); }

const QuantPlan &quant_plan(llaisysDataType_t dt) {
    static const auto plans = [] {
        struct Table {
            QuantPlan p[sizeof kFormats / sizeof kFormats[0]];
        } t;
        for (size_t i = 0; i < sizeof kFormats / sizeof kFormats[0]; i++) t.p[i] = make_plan(kFormats[i]);
        return t;
    }();
    for (size_t i = 0; i < sizeof kFormats / sizeof kFormats[0]; i++)
        if (kFormats[i] == dt) return plans.p[i];
    fail(LLAISYS_STATUS_INVALID_ARGUMENT, "quant plan: dtype ", int(dt), " is not block-quantized");
}

}  // namespace llaisys::ops::cpu
