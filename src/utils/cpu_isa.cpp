#include "cpu_isa.hpp"

#include <cstdlib>
#include <cstring>

namespace llaisys {
namespace {

Isa detect() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("fma"))
        return __builtin_cpu_supports("avx512bf16") ? Isa::Avx512Bf16 : Isa::Avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        return Isa::Avx2;
#endif
    return Isa::Scalar;
}

Isa choose() {
    Isa best = detect();
    const char *want = std::getenv("LLAISYS_ISA");
    if (!want || !*want) return best;
    Isa asked = best;
    if (std::strcmp(want, "scalar") == 0) asked = Isa::Scalar;
    else if (std::strcmp(want, "avx2") == 0) asked = Isa::Avx2;
    else if (std::strcmp(want, "avx512") == 0) asked = Isa::Avx512;
    else if (std::strcmp(want, "avx512bf16") == 0) asked = Isa::Avx512Bf16;
    return asked < best ? asked : best;  // never above what the CPU can run
}

}  // namespace

Isa active_isa() {
    static const Isa isa = choose();
    return isa;
}

bool cpu_has_avx512_vnni() {
    static const bool vnni = [] {
#if defined(__x86_64__) || defined(__i386__)
        return active_isa() >= Isa::Avx512 && __builtin_cpu_supports("avx512vnni") &&
               __builtin_cpu_supports("avx512vl");
#else
        return false;
#endif
    }();
    return vnni;
}

const char *isa_name(Isa isa) {
    switch (isa) {
    case Isa::Avx512Bf16: return "avx512bf16";
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    default: return "scalar";
    }
}

}  // namespace llaisys
