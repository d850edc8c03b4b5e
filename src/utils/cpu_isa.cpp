#include "cpu_isa.hpp"

#include <cstdlib>
#include <cstring>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

bool cpu_has_avx_vnni() {
    static const bool vnni = [] {
        const char *env = std::getenv("LLAISYS_AVX_VNNI");
        if (env && std::strcmp(env, "0") == 0) return false;
#if defined(__x86_64__) || defined(__i386__)
        unsigned a, b, c, d;  // CPUID leaf 7 sub-leaf 1: EAX bit 4 AVX-VNNI
        return active_isa() >= Isa::Avx2 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
#else
        return false;
#endif
    }();
    return vnni;
}

bool cpu_has_gfni() {
    static const bool gfni = [] {
        const char *env = std::getenv("LLAISYS_GFNI");
        if (env && std::strcmp(env, "0") == 0) return false;
#if defined(__x86_64__) || defined(__i386__)
        return cpu_has_avx512_vnni() && __builtin_cpu_supports("gfni");
#else
        return false;
#endif
    }();
    return gfni;
}

namespace {

// Whether the CPUID vendor string is `want` ("GenuineIntel", "AuthenticAMD"); false off x86.
bool cpu_vendor_is(const char *want) {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    char vendor[13];
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    vendor[12] = '\0';
    return std::strcmp(vendor, want) == 0;
#else
    (void)want;
    return false;
#endif
}

}  // namespace

size_t quant_prefetch_bytes() {
    static const size_t bytes = [] {
        const char *env = std::getenv("LLAISYS_QUANT_PREFETCH");
        if (env && *env) {
            char *end = nullptr;
            const long v = std::strtol(env, &end, 10);
            if (end && *end == '\0' && v >= 0 && v <= (1 << 16)) return size_t(v);
        }
        return cpu_vendor_is("GenuineIntel") ? size_t(2048) : size_t(0);
    }();
    return bytes;
}

bool cpu_uses_amx() {
    static const bool amx = [] {
        const char *env = std::getenv("LLAISYS_AMX");
        if (env && std::strcmp(env, "0") == 0) return false;
        if (active_isa() < Isa::Avx512Bf16) return false;
#if defined(__linux__) && defined(__x86_64__) && !defined(LLAISYS_NO_AMX)
        unsigned a, b, c, d;  // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE
        if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) return false;
        // Linux hands out the 8 KiB of tile state only on request, once per process (the
        // kernel's Documentation/arch/x86/xstate.rst); without it the first tile instruction
        // faults. ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18.
        return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
        return false;
#endif
    }();
    return amx;
}

bool cpu_splits_256() {
    static const bool split = [] {
        const char *env = std::getenv("LLAISYS_SPLIT_256");
        if (env && (std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0)) return env[0] == '1';
#if defined(__x86_64__) || defined(__i386__)
        unsigned a, b, c, d;
        if (!cpu_vendor_is("AuthenticAMD") || !__get_cpuid(1, &a, &b, &c, &d)) return false;
        const unsigned base = (a >> 8) & 0xF;
        const unsigned family = base == 0xF ? base + ((a >> 20) & 0xFF) : base;
        const unsigned model = ((a >> 4) & 0xF) | (base == 0xF ? ((a >> 16) & 0xF) << 4 : 0);
        return family == 0x17 && model < 0x30;
#else
        return false;
#endif
    }();
    return split;
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
