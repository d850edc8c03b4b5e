// Which SIMD code path the CPU kernels take: the best the CPU supports, or a lower one
// forced by the environment (LLAISYS_ISA=scalar|avx2|avx512|avx512bf16), so every path can
// be tested on one machine. The library itself is built for baseline x86-64 and runs anywhere.
// Avx512Bf16 is Avx512 plus the AVX512_BF16 dot products (vdpbf16ps): bf16 weights then run
// a bf16 x bf16 GEMM; everything else runs as under Avx512.
#pragma once

namespace llaisys {

// Ordered: each level can run every lower one.
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2, Avx512Bf16 = 3 };

Isa active_isa();
const char *isa_name(Isa isa);
// Whether the quantized kernels may use AVX-512 VNNI (vpdpbusd, with AVX512VL): the CPU has it
// and active_isa() is Avx512 or above (LLAISYS_ISA=avx2 turns it off with the rest of AVX-512).
bool cpu_has_avx512_vnni();
// Whether the CPU executes 256-bit vector ops as two 128-bit halves (AMD Zen 1 and Zen+: family
// 17h, models below 30h), where kernels built from 128-bit ops can beat 256-bit ones. The
// environment overrides it (LLAISYS_SPLIT_256=0|1), so both kernel forms can be tested anywhere.
bool cpu_splits_256();

}  // namespace llaisys
