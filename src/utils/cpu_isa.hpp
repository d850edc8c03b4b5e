// Which SIMD code path the CPU kernels take: the best the CPU supports, or a lower one
// forced by the environment (LLAISYS_ISA=scalar|avx2|avx512|avx512bf16), so every path can
// be tested on one machine. The library itself is built for baseline x86-64 and runs anywhere.
// Avx512Bf16 is Avx512 plus the AVX512_BF16 dot products (vdpbf16ps): bf16 weights then run
// a bf16 x bf16 GEMM; everything else runs as under Avx512.
#pragma once

#include <cstddef>
#include <string>

namespace llaisys {

// Ordered: each level can run every lower one.
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2, Avx512Bf16 = 3 };

Isa active_isa();
const char *isa_name(Isa isa);
// Whether the quantized kernels may use AVX-512 VNNI (vpdpbusd, with AVX512VL): the CPU has it
// and active_isa() is Avx512 or above (LLAISYS_ISA=avx2 turns it off with the rest of AVX-512).
bool cpu_has_avx512_vnni();
// Whether the CPU has AVX-VNNI (the VEX vpdpbusd on 256-bit vectors: Intel Alder Lake and later
// client cores, which lack AVX-512) and active_isa() is Avx2 or above; LLAISYS_AVX_VNNI=0 (read
// once) turns it off, so both forms of the x16 AVX2 kernels can be tested on one machine.
bool cpu_has_avx_vnni();
// Whether the AVX-512 x16 kernels may use GFNI (vgf2p8affineqb: Ice Lake, Sapphire Rapids, Zen 4;
// Cascade Lake has AVX-512 VNNI without it): the CPU has it and cpu_has_avx512_vnni();
// LLAISYS_GFNI=0 (read once) turns it off, so both builds can be tested on one machine.
bool cpu_has_gfni();
// Whether the quantized linear's float path runs on AMX tiles (bf16 TDPBF16PS, quant_amx.cpp):
// the CPU has AMX-TILE and AMX-BF16, Linux granted this process the tile state, active_isa() is
// Avx512Bf16 (LLAISYS_ISA=avx512 or lower turns it off with it), LLAISYS_AMX is not "0" and the
// library was built with the AMX kernel (CMake LLAISYS_AMX, on where the compiler has the flags).
bool cpu_uses_amx();
// Whether the CPU executes 256-bit vector ops as two 128-bit halves (AMD Zen 1 and Zen+: family
// 17h, models below 30h), where kernels built from 128-bit ops can beat 256-bit ones. The
// environment overrides it (LLAISYS_SPLIT_256=0|1), so both kernel forms can be tested anywhere.
bool cpu_splits_256();
// A CPU as the per-CPU tunables below tell kinds apart: the CPUID vendor string ("GenuineIntel",
// "AuthenticAMD"; "" off x86), the display family and model (extended fields folded in, as
// cpuinfo prints them), and whether CPUID lists AVX-512F (the chip's, not active_isa(): LLAISYS_ISA
// changes the kernels, not the memory system). Zen 4 and Zen 5 are the AMD parts with AVX-512F;
// Zen 1 / Zen+ / Zen 2 are family 17h, Zen 3 family 19h without it (so a Zen 4 whose VM hides
// AVX-512 reads as Zen 3 and keeps that kind's values).
struct CpuKind {
    std::string vendor;
    unsigned family = 0, model = 0;
    bool avx512f = false;
};
// This machine's CPU, read once.
const CpuKind &cpu_kind();

// A tunable's value in this process and why: the table entry's one-line reason (the measurement
// it rests on), or the environment variable that overrode it.
struct Tunable {
    size_t value = 0;
    std::string reason;
};

// How far ahead (bytes) the quantized kernels' one-weight-row walks prefetch each block, 0 for
// not at all (the int8 walks make two passes from it, 1.5x ahead into L2 and 3/8 ahead into
// L1: quant_dot.inc; the x16 kernels (256- and 512-bit) and the AMX path use it too). Chosen per CPU kind by
// measurement (2 threads; Intel and Zen 3 with tools/bench_compare.py --quant), from a table
// in cpu_isa.cpp:
//   Intel: 2048. Xeon VM (AVX-512, AMX): doubled decode (1.5B Q4_K_M 9.7 -> 21.8 tok/s, Q8_0
//     7.9 -> 14.6), Q8_0 batch-16 +40%. Skylake-SP (family 6 model 55h, AVX-512 without VNNI;
//     2026-12-01, alternating processes, 14 runs each): 8.8 -> 11.0 tok/s (+25%; 1024 and 4096 B
//     alike within the host's noise, 512 B +17%): its own row, with its own reason.
//   AMD with AVX-512F (Zen 4, Zen 5): 2048. Zen 4 EPYC, by an outside tester: 1.5B Q4_K_M decode
//     23.4 -> 30.5 tok/s (+30%; llama.cpp's tg128 33.0). Zen 5 EPYC (family 1Ah, 2026-11-29,
//     alternating processes, 3 each): 32.5 -> 39.4 (+21%; 512 B +11%, 1024 +13%, 3072-4096 +15%).
//   AMD Zen 3 (family 19h without AVX-512): 1024. EPYC Milan (2026-11-29, alternating processes):
//     1.5B Q4_K_M decode 15.2 -> 18.1 tok/s (768 to 2048 bytes alike, 512 +10%), since the
//     256-bit x16 kernels prefetch as the one-row walks do; before, the single T0 pass of the
//     row walks halved it at 2048 (13.8 -> 6.8) and the x16 kernels took none.
//   Any other CPU (AMD Zen 1 / Zen+ / Zen 2 among them): 0, "not measured here;
//     LLAISYS_QUANT_PREFETCH=512 or 2048 to try". The Python loader calibrates such a kind once
//     (libllaisys/cpu_tuning.py: 512 and 2048 against none) and sets the variable.
// LLAISYS_QUANT_PREFETCH=<bytes> (0..65536, read once) overrides the table; a value outside that
// is ignored and the reason says so.
size_t quant_prefetch_bytes();
// The value and the reason (cpu_kind() and the environment, chosen once per process).
const Tunable &quant_prefetch();
// The decision itself, a pure function of the CPU kind and LLAISYS_QUANT_PREFETCH's value (NULL:
// unset), so every row of the table can be tested on one machine.
Tunable choose_quant_prefetch(const CpuKind &cpu, const char *env);

}  // namespace llaisys
