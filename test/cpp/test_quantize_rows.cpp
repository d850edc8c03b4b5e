// The activation quantizers of the row kernels (src/ops/cpu_simd/row_kernels.inc) on every
// SIMD path this CPU runs, byte for byte against the one-value-at-a-time definition below
// (the quantizer the library had before they were vectorized, and what quant_kernels.hpp
// states): d = max|x| / 127 (NaN for a block with a NaN or an infinity), q = x * (1 / d)
// rounded to nearest even and clamped to +-127, the sums of q. Rows of random values, exact
// halves of d (the ties), zeros, one large value, NaN and infinities.
#include "../../src/ops/cpu_simd/row_kernels.hpp"
#include "unit.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace llaisys::ops::cpu::simd {
namespace scalar { extern const RowKernels kRowKernels; }
namespace avx2 { extern const RowKernels kRowKernels; }
namespace avx512 { extern const RowKernels kRowKernels; }
}  // namespace llaisys::ops::cpu::simd

using namespace llaisys::ops::cpu;

static float ref_scale(const float *x, size_t n) {
    float amax = 0.0f, z = 0.0f;
    for (size_t i = 0; i < n; i++) {
        amax = std::max(amax, std::fabs(x[i]));
        z += x[i] * 0.0f;
    }
    return z == 0.0f ? amax / 127.0f : NAN;
}

static int8_t ref_q(float v) {  // v + 1.5 x 2^23 keeps the rounded integer in the low bits
    volatile float r = v;  // no fused multiply-add with the product before it
    r = r + 12582912.0f;
    const float rr = r;
    int32_t i;
    std::memcpy(&i, &rr, 4);
    return int8_t(std::clamp(i - 0x4B400000, -127, 127));
}

static void ref_q8_32(const float *x, BlockQ8_32 *out, size_t nb) {
    for (size_t b = 0; b < nb; b++, x += 32) {
        const float d = ref_scale(x, 32), id = d > 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (size_t i = 0; i < 32; i++) {
            volatile float p = x[i] * id;
            out[b].qs[i] = ref_q(p);
            sum += out[b].qs[i];
        }
        out[b].d = d;
        out[b].sum = sum;
    }
}

static void ref_q8_k(const float *x, BlockQ8_K *out, size_t nb) {
    const size_t K = llaisys::quant::kBlockK;
    for (size_t b = 0; b < nb; b++, x += K) {
        const float d = ref_scale(x, K), id = d > 0.0f ? 1.0f / d : 0.0f;
        for (size_t s = 0; s < K / 16; s++) {
            int sum = 0;
            for (size_t i = 16 * s; i < 16 * s + 16; i++) {
                volatile float p = x[i] * id;
                out[b].qs[i] = ref_q(p);
                sum += out[b].qs[i];
            }
            out[b].bsums[s] = int16_t(sum);
        }
        for (size_t j = 0; j < K / 32; j++) out[b].dsums[j] = d * float(out[b].bsums[2 * j] + out[b].bsums[2 * j + 1]);
        out[b].d = d;
    }
}

// k values of one test row: kind 0 random, 1 ties (multiples of d / 2), 2 zeros, 3 one large
// value among small ones, 4 a NaN, 5 an infinity, 6 values near the 127.5 d clamp
static std::vector<float> make_row(size_t k, int kind, std::mt19937 &rng) {
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> x(k);
    for (auto &v : x) v = nd(rng);
    if (kind == 1) {
        for (size_t i = 0; i < k; i++) x[i] = float(int(rng() % 255) - 127) * 0.5f;  // d = 63.5 / 127 = 0.5
        for (size_t b = 0; b < k; b += 32) x[b] = 63.5f;
    }
    if (kind == 2) std::fill(x.begin(), x.end(), 0.0f);
    if (kind == 3) x[k / 3] = 1e30f;
    if (kind == 4) x[k - 5] = NAN;
    if (kind == 5) x[7] = -INFINITY;
    if (kind == 6)
        for (size_t i = 0; i < k; i++) x[i] = (i % 2 ? -1.0f : 1.0f) * (126.5f + float(i % 3) * 0.5f);
    return x;
}

// The blocks the path's quantizer and the definition make of x (nb blocks of B), byte for byte
// (a NaN d compared by its bits; both start from zeroed padding).
template <class B>
static bool same_blocks(const std::vector<float> &x, size_t nb, void (*path)(const float *, B *, size_t),
                        void (*ref)(const float *, B *, size_t)) {
    std::vector<B> a(nb), b(nb);
    std::memset(a.data(), 0, nb * sizeof(B));
    std::memset(b.data(), 0, nb * sizeof(B));
    path(x.data(), a.data(), nb);
    ref(x.data(), b.data(), nb);
    return std::memcmp(a.data(), b.data(), nb * sizeof(B)) == 0;
}

static void check_path(const llaisys::ops::cpu::simd::RowKernels &rk, const char *name) {
    std::mt19937 rng(7);
    for (size_t k : {256u, 896u, 4864u}) {
        for (int kind = 0; kind < 7; kind++) {
            for (int rep = 0; rep < 20; rep++) {
                const std::vector<float> x = make_row(k, kind, rng);
                EXPECT(same_blocks<BlockQ8_32>(x, k / 32, rk.quantize_q8_32, ref_q8_32), name);
                EXPECT(same_blocks<BlockQ8_K>(x, k / 256, rk.quantize_q8_k, ref_q8_k), name);
            }
        }
    }
}

int main() {
    using namespace llaisys::ops::cpu::simd;
    check_path(scalar::kRowKernels, "scalar (SSE2) path");
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
        check_path(avx2::kRowKernels, "AVX2 path");
    else
        std::printf("AVX2 path not run: this CPU lacks it\n");
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        check_path(avx512::kRowKernels, "AVX-512 path");
    else
        std::printf("AVX-512 path not run: this CPU lacks it\n");
    return finish();
}
