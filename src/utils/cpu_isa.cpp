#include "cpu_isa.hpp"

#include <cerrno>
#include <cstdio>
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

const CpuKind &cpu_kind() {
    static const CpuKind kind = [] {
        CpuKind k;
#if defined(__x86_64__) || defined(__i386__)
        unsigned a, b, c, d;
        if (!__get_cpuid(0, &a, &b, &c, &d)) return k;
        char vendor[13];
        std::memcpy(vendor, &b, 4);
        std::memcpy(vendor + 4, &d, 4);
        std::memcpy(vendor + 8, &c, 4);
        vendor[12] = '\0';
        k.vendor = vendor;
        if (__get_cpuid(1, &a, &b, &c, &d)) {
            const unsigned base = (a >> 8) & 0xF;  // extended fields as the SDM and APM fold them
            k.family = base == 0xF ? base + ((a >> 20) & 0xFF) : base;
            k.model = ((a >> 4) & 0xF) | (base == 0xF || base == 0x6 ? ((a >> 16) & 0xF) << 4 : 0);
        }
        k.avx512f = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 16));  // leaf 7 EBX bit 16
#endif
        return k;
    }();
    return kind;
}

namespace {

// One kind of CPU and the prefetch distance measured on it. The first row that matches wins.
struct PrefetchRow {
    const char *vendor;                // CPUID vendor string
    unsigned family_lo, family_hi;     // display family, inclusive
    unsigned model_lo, model_hi;       // display model, inclusive
    int avx512f;                       // 1: with AVX-512F, 0: without, -1: either
    size_t bytes;
    const char *reason;                // "<kind>: <the measurement>", one line
};

constexpr unsigned kAny = ~0u;

constexpr PrefetchRow kQuantPrefetchTable[] = {
    {"GenuineIntel", 6, 6, 0x55, 0x55, 1, 2048,
     "Intel Skylake-SP (AVX-512 without VNNI; Cascade Lake shares model 55h): measured on a Xeon VM, 2 threads: "
     "+25% decode (1.5B Q4_K_M 8.8 -> 11.0 tok/s, medians of 14 alternated runs; 1024 B 11.1, 4096 11.7, 512 10.3)"},
    {"GenuineIntel", 0, kAny, 0, kAny, -1, 2048,
     "Intel: measured on a Xeon VM (AVX-512, AMX), 2 threads: decode doubled (1.5B Q4_K_M 9.7 -> 21.8 tok/s, "
     "Q8_0 7.9 -> 14.6), Q8_0 batch-16 +40%"},
    {"AuthenticAMD", 0x19, kAny, 0, kAny, 1, 2048,
     "AMD Zen 4/5 (AVX-512): measured on EPYCs, 2 threads: +30% decode on Zen 4 (1.5B Q4_K_M 23.4 -> 30.5 tok/s), "
     "+21% on Zen 5 (32.5 -> 39.4; 512 B +11%, 1024 +13%, 4096 +15%)"},
    {"AuthenticAMD", 0x19, 0x19, 0, kAny, 0, 1024,
     "AMD Zen 3: measured on EPYC Milan, 2 threads: +19% decode (1.5B Q4_K_M 15.2 -> 18.1 tok/s, 768 to 2048 B "
     "alike, 512 +10%)"},
};

// The table's value for `cpu` (no environment).
Tunable table_quant_prefetch(const CpuKind &cpu) {
    for (const PrefetchRow &row : kQuantPrefetchTable) {
        if (cpu.vendor != row.vendor) continue;
        if (cpu.family < row.family_lo || cpu.family > row.family_hi) continue;
        if (cpu.model < row.model_lo || cpu.model > row.model_hi) continue;
        if (row.avx512f >= 0 && cpu.avx512f != (row.avx512f == 1)) continue;
        return {row.bytes, row.reason};
    }
    char who[96];
    if (cpu.vendor.empty()) std::snprintf(who, sizeof who, "a CPU without CPUID");
    else std::snprintf(who, sizeof who, "%s family %xh model %xh%s", cpu.vendor.c_str(), cpu.family, cpu.model,
                       cpu.avx512f ? " (AVX-512)" : "");
    return {0, std::string(who) + ": not measured here; LLAISYS_QUANT_PREFETCH=512 or 2048 to try"};
}

}  // namespace

Tunable choose_quant_prefetch(const CpuKind &cpu, const char *env) {
    Tunable t = table_quant_prefetch(cpu);
    if (!env || !*env) return t;
    std::string shown(env, strnlen(env, 32));
    if (shown.size() < std::strlen(env)) shown += "...";
    char *end = nullptr;
    errno = 0;
    const long v = std::strtol(env, &end, 10);
    if (errno == 0 && end != env && *end == '\0' && v >= 0 && v <= (1 << 16)) {
        return {size_t(v), "LLAISYS_QUANT_PREFETCH=" + shown + " from the environment (without it " +
                               std::to_string(t.value) + ": " + t.reason + ")"};
    }
    t.reason += " (LLAISYS_QUANT_PREFETCH=" + shown + " ignored: not a byte count in 0..65536)";
    return t;
}

const Tunable &quant_prefetch() {
    static const Tunable t = choose_quant_prefetch(cpu_kind(), std::getenv("LLAISYS_QUANT_PREFETCH"));
    return t;
}

size_t quant_prefetch_bytes() { return quant_prefetch().value; }

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
        const CpuKind &cpu = cpu_kind();
        return cpu.vendor == "AuthenticAMD" && cpu.family == 0x17 && cpu.model < 0x30;
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
