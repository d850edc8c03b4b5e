// Which SIMD code path the CPU kernels take: the best the CPU supports, or a lower one
// forced by the environment (LLAISYS_ISA=scalar|avx2|avx512), so every path can be tested
// on one machine. The library itself is built for baseline x86-64 and runs anywhere.
#pragma once

namespace llaisys {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

Isa active_isa();
const char *isa_name(Isa isa);

}  // namespace llaisys
