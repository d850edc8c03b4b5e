// choose_quant_prefetch (src/utils/cpu_isa.*), tested for CPUs this machine is not: each row of
// the per-CPU table (Intel Skylake-SP, other Intel, AMD Zen 4/5 with AVX-512F, Zen 3), CPUs not in it (Zen 1/Zen+/Zen 2 among them),
// and LLAISYS_QUANT_PREFETCH overriding the table (or ignored, said in the reason, when it is not a
// byte count in 0..65536). The reason must name the CPU kind, so `llaisys info` can show it.
#include "../../src/utils/cpu_isa.hpp"
#include "unit.hpp"

#include <string>

using llaisys::CpuKind;
using llaisys::Tunable;

static CpuKind cpu(const char *vendor, unsigned family, unsigned model, bool avx512f) {
    CpuKind k;
    k.vendor = vendor;
    k.family = family;
    k.model = model;
    k.avx512f = avx512f;
    return k;
}

static bool has(const std::string &s, const char *part) { return s.find(part) != std::string::npos; }

static bool starts(const std::string &s, const char *part) { return s.rfind(part, 0) == 0; }

int main() {
    const CpuKind sapphire = cpu("GenuineIntel", 6, 0x8F, true), skylake_client = cpu("GenuineIntel", 6, 0x5E, false);
    const CpuKind skylake_sp = cpu("GenuineIntel", 6, 0x55, true);
    const CpuKind genoa = cpu("AuthenticAMD", 0x19, 0x11, true), raphael = cpu("AuthenticAMD", 0x19, 0x61, true);
    const CpuKind turin = cpu("AuthenticAMD", 0x1A, 0x02, true), milan = cpu("AuthenticAMD", 0x19, 0x01, false);
    const CpuKind rome = cpu("AuthenticAMD", 0x17, 0x31, false), naples = cpu("AuthenticAMD", 0x17, 0x01, false);
    const CpuKind hygon = cpu("HygonGenuine", 0x18, 0x01, false), bulldozer = cpu("AuthenticAMD", 0x15, 0x01, false);
    const CpuKind zen5_masked = cpu("AuthenticAMD", 0x1A, 0x02, false), none = cpu("", 0, 0, false);

    for (const CpuKind &k : {sapphire, skylake_client}) {
        const Tunable t = llaisys::choose_quant_prefetch(k, nullptr);
        EXPECT(t.value == 2048, "Intel: 2048");
        EXPECT(starts(t.reason, "Intel: measured") && has(t.reason, "9.7 -> 21.8"), "Intel's reason cites the Xeon VM");
    }
    {
        const Tunable t = llaisys::choose_quant_prefetch(skylake_sp, nullptr);
        EXPECT(t.value == 2048, "Intel Skylake-SP: 2048");
        EXPECT(starts(t.reason, "Intel Skylake-SP") && has(t.reason, "8.8 -> 11.0"), "Skylake-SP's reason cites its run");
    }
    for (const CpuKind &k : {genoa, raphael, turin}) {
        const Tunable t = llaisys::choose_quant_prefetch(k, nullptr);
        EXPECT(t.value == 2048, "AMD with AVX-512F (Zen 4/5): 2048");
        EXPECT(starts(t.reason, "AMD Zen 4/5") && has(t.reason, "+30%") && has(t.reason, "+21% on Zen 5"),
               "Zen 4/5's reason cites both measurements");
    }
    {
        const Tunable t = llaisys::choose_quant_prefetch(milan, nullptr);
        EXPECT(t.value == 1024, "Zen 3: 1024");
        EXPECT(starts(t.reason, "AMD Zen 3:") && has(t.reason, "15.2 -> 18.1"), "Zen 3's reason cites its measurement");
    }
    for (const CpuKind &k : {rome, naples, hygon, bulldozer, zen5_masked, none}) {
        const Tunable t = llaisys::choose_quant_prefetch(k, nullptr);
        EXPECT(t.value == 0, "a CPU not in the table (Zen 1/Zen+/Zen 2 among them): 0");
        EXPECT(has(t.reason, "not measured here; LLAISYS_QUANT_PREFETCH=512 or 2048 to try"), "unknown CPU's reason");
    }
    EXPECT(starts(llaisys::choose_quant_prefetch(hygon, nullptr).reason, "HygonGenuine family 18h model 1h:"),
           "an unknown CPU is named by vendor, family and model");
    EXPECT(llaisys::choose_quant_prefetch(milan, "").value == 1024, "an empty variable counts as unset");

    // The environment overrides every row, and the reason keeps the table's choice beside it.
    {
        const Tunable t = llaisys::choose_quant_prefetch(milan, "4096");
        EXPECT(t.value == 4096, "LLAISYS_QUANT_PREFETCH=4096 on Zen 3: 4096");
        EXPECT(starts(t.reason, "LLAISYS_QUANT_PREFETCH=4096 from the environment (without it 1024: AMD Zen 3:"),
               "the override's reason names the variable and the table's value");
    }
    EXPECT(llaisys::choose_quant_prefetch(sapphire, "0").value == 0, "LLAISYS_QUANT_PREFETCH=0 turns it off on Intel");
    EXPECT(llaisys::choose_quant_prefetch(hygon, "65536").value == 65536, "65536 is the largest taken");
    for (const char *bad : {"65537", "-1", "2k", "abc", " ", "99999999999999999999999"}) {
        const Tunable t = llaisys::choose_quant_prefetch(genoa, bad);
        EXPECT(t.value == 2048, "an unusable value leaves the table's");
        EXPECT(starts(t.reason, "AMD Zen 4/5") && has(t.reason, "ignored: not a byte count in 0..65536"),
               "an unusable value is said to be ignored");
    }
    const Tunable long_env = llaisys::choose_quant_prefetch(genoa, std::string(200, 'x').c_str());
    EXPECT(long_env.reason.size() < 400 && has(long_env.reason, "x..."),
           "a long value is shortened in the reason");

    // This machine's own choice agrees with the pure function of its kind.
    const Tunable here = llaisys::choose_quant_prefetch(llaisys::cpu_kind(), nullptr);
    EXPECT(!here.reason.empty(), "a reason on this machine too");
    return finish();
}
