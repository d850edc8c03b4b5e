/* This machine's limits for an inference engine: memory read bandwidth, and the peak rate of
 * each SIMD instruction family the CPU kernels use (src/ops/linear/cpu/).
 *
 *   cc -O3 -fopenmp limits.c -o limits && ./limits [threads] [quick]
 *
 * Prints one JSON object. One binary runs on every x86-64 CPU: each peak loop is compiled for
 * its own instruction set with __attribute__((target(...))) and run only where cpuid (and the
 * OS's saved register state, which __builtin_cpu_supports checks) says the CPU has it; the
 * others print null with the reason. `quick` shortens every loop (a smoke test, not a figure).
 *
 * Bandwidth: every thread sums its share of a buffer far larger than the caches with wide
 * loads, best of several passes, both plainly and with a software prefetch 4 KiB ahead on a
 * buffer advised for huge pages (on the build VM the plain loop reads 35-41 GB/s and the
 * prefetching one 50-53: the larger is the machine's limit).
 *
 * Peaks: every thread runs N independent dependency chains of one instruction held in
 * registers, best of several runs, each run sized by a calibration pass to ~0.15 s. N covers
 * latency x issue rate (4-5 cycles x 2 pipes on Zen 2-4, Skylake-SP to Sapphire Rapids, so
 * 12 for ymm where 16 registers must also hold the operands, 16 for zmm). Counting: an f32
 * FMA lane is 2 FLOP (ymm 16, zmm 32 per instruction); vdpbf16ps adds two bf16 products per
 * f32 lane, 2 FLOP each (zmm: 64); an int8 multiply-add is 2 ops (vpdpbusd ymm 64, zmm 128;
 * vpmaddubsw+vpmaddwd+vpaddd on a ymm of 32 byte pairs: 64 per sequence); mulss+addss 2.
 *
 * Theoretical ceilings to hold the figures against (cores x GHz x per cycle per core):
 *   f32 FMA ymm: Zen 1 16 FLOP/cycle (two 128-bit FMA pipes); Zen 2/3/4 and Haswell..Sapphire
 *     Rapids 32 (two ymm FMA pipes). E.g. 2 Zen 2 cores at 3.0-3.3 GHz: 190-210 GFLOP/s.
 *   f32 FMA zmm: Skylake-SP..SPR with two 512-bit FMA units 64; one unit (some Xeon Silver,
 *     Ice Lake client) 32; Zen 4 32 (zmm on the two ymm pipes, double-pumped).
 *   vdpbf16ps zmm: Zen 4 64 (one zmm per cycle, double-pumped); Cooper Lake / Sapphire Rapids
 *     64 (one per cycle on port 0; uops.info has the exact part).
 *   vpdpbusd zmm: Ice Lake-SP / SPR 128 ops/cycle (one per cycle), Zen 4 128. AVX-VNNI ymm
 *     (Alder Lake P-cores): 128 (two per cycle).
 *   vpmaddubsw+vpmaddwd ymm (no VNNI): both run on two pipes on Zen 2-4 and Skylake (p0/p1),
 *     so one 3-instruction sequence per cycle: 64 ops/cycle; Zen 1 16 (one 128-bit integer
 *     multiply pipe: each ymm multiply takes two cycles).
 *   mulss+addss: Zen 1-4 two multiply and two add pipes, 4 FLOP/cycle; Skylake 2 (both on p0/p1).
 * The measured figure should land within ~10% of cores x the all-core clock x these; more
 * means the counting is wrong, much less a busy host (see cpu_share) or a throttled clock.
 * On the 2-core AVX2 EPYC (Zen 1, 2.0 GHz base) under a load of 13, with cpu_share 0.22:
 * FMA ymm 16.6 GFLOP/s, i.e. 75 on-core = 2 x 2.35 GHz x 16; AVX2 int8 17.2 GOP/s (78 = 2 x
 * 2.4 x 16); mulss+addss 4.5 (20 = 2 x 2.45 x 4): each the Zen 1 rate at its boost clock.
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
static double thread_cpu(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }

/* A best rate, and the share of that run's wall time its threads were on a core: below ~0.9
 * other work took the cores (a busy host), and the rate is low by about that much. */
struct rate {
    double per_s, cpu_share;
};
static void keep_best(struct rate *best, double per_s, double cpu_s, int threads, double wall_s) {
    if (per_s > best->per_s) best->per_s = per_s, best->cpu_share = cpu_s / (threads * wall_s);
}

/* ---- bandwidth ---- */

typedef float v8f __attribute__((vector_size(32)));  /* one ymm on AVX2, two xmm otherwise */

/* Sum of buf [i0, i1) (i1 - i0 a multiple of 32 floats), optionally prefetching 4 KiB ahead:
 * every 128 bytes read ask for the 128 bytes 4 KiB further on (a prefetch never faults). */
__attribute__((target_clones("avx2", "default")))
static float read_range(const float *buf, size_t i0, size_t i1, int prefetch) {
    v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    for (size_t i = i0; i < i1; i += 32) {
        if (prefetch) {
            __builtin_prefetch((const char *)(buf + i) + 4096);
            __builtin_prefetch((const char *)(buf + i) + 4096 + 64);
        }
        const v8f *p = (const v8f *)(buf + i);
        a0 += p[0], a1 += p[1], a2 += p[2], a3 += p[3];
    }
    v8f s = (a0 + a1) + (a2 + a3);
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

/* Bytes read per second over `bytes` of memory, best of `passes`. Thread t reads the t-th
 * contiguous share (first touched by that thread). */
static struct rate read_bandwidth(size_t bytes, int passes, int prefetch, double *sink) {
    struct rate best = {0, 0};
    size_t n = bytes / sizeof(float);  /* a multiple of 32 * threads: bytes is a power of two */
    float *buf = aligned_alloc(1 << 21, bytes);  /* [n] */
    if (!buf) return best;
#ifdef MADV_HUGEPAGE
    madvise(buf, bytes, MADV_HUGEPAGE);
#endif
    for (int p = -1; p < passes; p++) {  /* pass -1 writes the buffer */
        double total = 0, cpu = 0, t0 = now();
        int nt = 1;
#pragma omp parallel reduction(+ : total, cpu)
        {
            double c0 = thread_cpu();
            size_t t = omp_get_thread_num();
            nt = omp_get_num_threads();  /* the same in every thread */
            size_t i0 = n / 32 * t / nt * 32, i1 = n / 32 * (t + 1) / nt * 32;
            if (p < 0) for (size_t i = i0; i < i1; i++) buf[i] = (float)(i & 7);
            else total += read_range(buf, i0, i1, prefetch);
            cpu += thread_cpu() - c0;
        }
        double dt = now() - t0;
        *sink += total;
        if (p >= 0) keep_best(&best, bytes / dt, cpu, nt, dt);
    }
    free(buf);
    return best;
}

/* ---- peaks: one function per instruction, run by every thread ---- */

/* Runs `iters` rounds of N chains x[j] = STEP(x[j]) in vectors of type V; each chain's end
 * value is stored, so none is optimised away. V is a plain GCC vector type: held in one
 * array of the intrinsics' integer types (declared may_alias), the chains went through memory. */
#define PEAK_KERNEL(name, tgt, V, N, INIT, STEP)                                     \
    __attribute__((target(tgt))) static double name(long iters) {                   \
        V x[N];                                                                      \
        for (int j = 0; j < N; j++) x[j] = INIT(j);                                  \
        for (long i = 0; i < iters; i++) {                                           \
            _Pragma("GCC unroll 16") for (int j = 0; j < N; j++) x[j] = (V)STEP(x[j]); \
        }                                                                            \
        volatile V keep; /* a store per chain keeps every chain; x stays in registers */ \
        for (int j = 0; j < N; j++) keep = x[j];                                     \
        (void)keep;                                                                  \
        return 0;                                                                    \
    }

/* f32 FMA: x = x * 0.999999 + 1e-7 (converges, never denormal). */
#define FMA_YMM(x) _mm256_fmadd_ps(x, _mm256_set1_ps(0.999999f), _mm256_set1_ps(1e-7f))
#define FMA_ZMM(x) _mm512_fmadd_ps(x, _mm512_set1_ps(0.999999f), _mm512_set1_ps(1e-7f))
/* One float, no FMA: the scalar path's plain loops compile to mulss + addss in the baseline
 * (x86-64) library build (packed_reference in linear_cpu.cpp). */
#define MULADD_SS(x) _mm_add_ss(_mm_mul_ss(x, _mm_set1_ps(0.999999f)), _mm_set1_ps(1e-7f))
/* vdpbf16ps: x += pairs of bf16 0.001 x 0.001 (the sums grow by 2e-6 per step). */
#define BF16_ZMM(x) _mm512_dpbf16_ps(x, (__m512bh)_mm512_set1_epi16(0x3a83), (__m512bh)_mm512_set1_epi16(0x3a83))
/* vpdpbusd: x += four u8 x s8 products per int32 lane (wraps, never traps). */
#define VNNI_ZMM(x) _mm512_dpbusd_epi32((__m512i)x, _mm512_set1_epi8(3), _mm512_set1_epi8(5))
#define VNNI_YMM(x) _mm256_dpbusd_avx_epi32((__m256i)x, _mm256_set1_epi8(3), _mm256_set1_epi8(5))
/* AVX2 int8 without VNNI: u8 x s8 pairs summed to int16 (vpmaddubsw), int16 pairs to int32
 * (vpmaddwd by ones), added to the sum; the bytes multiplied are the sum's own, so each
 * sequence depends on the last and none can be hoisted. */
#define MADDUBS_YMM(x) \
    _mm256_add_epi32((__m256i)x, _mm256_madd_epi16(_mm256_maddubs_epi16((__m256i)x, _mm256_set1_epi8(5)), _mm256_set1_epi16(1)))

typedef int v8i __attribute__((vector_size(32)));
typedef int v16i __attribute__((vector_size(64)));
#define F256(j) _mm256_set1_ps((float)(j + 1))
#define F512(j) _mm512_set1_ps((float)(j + 1))
#define F128(j) _mm_set1_ps((float)(j + 1))
#define I256(j) (v8i)_mm256_set1_epi32(j + 1)
#define I512(j) (v16i)_mm512_set1_epi32(j + 1)

PEAK_KERNEL(k_fma_ymm, "avx2,fma", __m256, 12, F256, FMA_YMM)
PEAK_KERNEL(k_fma_zmm, "avx512f", __m512, 16, F512, FMA_ZMM)
PEAK_KERNEL(k_bf16_zmm, "avx512f,avx512bf16", __m512, 16, F512, BF16_ZMM)
PEAK_KERNEL(k_vnni_zmm, "avx512f,avx512vnni", v16i, 16, I512, VNNI_ZMM)
PEAK_KERNEL(k_vnni_ymm, "avx2,avxvnni", v8i, 12, I256, VNNI_YMM)
PEAK_KERNEL(k_maddubs_ymm, "avx2", v8i, 12, I256, MADDUBS_YMM)
PEAK_KERNEL(k_muladd_ss, "sse2", __m128, 12, F128, MULADD_SS)

/* One instruction family: its JSON key, what it measures, and how to know the CPU has it. */
struct family {
    const char *key, *instruction, *unit;
    double ops_per_round;   /* ops one round of the kernel's N chains does */
    double (*kernel)(long);
    int present;            /* from cpuid, filled in by main */
    const char *lacks;      /* the reason printed when absent */
};

/* Ops per second of every thread running f, best of `runs`; each run is ~`seconds` long. */
static struct rate peak(const struct family *f, int runs, double seconds, double *sink) {
    long iters = 1 << 14;
    for (;;) {  /* calibrate on one thread's CPU time: grow until a run is measurable */
        double c0 = thread_cpu();
        *sink += f->kernel(iters);
        double dt = thread_cpu() - c0;
        if (dt > 0.01) { iters = (long)(iters * seconds / dt) + 1; break; }
        iters *= 4;
    }
    struct rate best = {0, 0};
    for (int r = 0; r < runs; r++) {
        double total = 0, cpu = 0, t0 = now();
        int threads = 1;
#pragma omp parallel reduction(+ : total, cpu)
        {
            double c0 = thread_cpu();
            threads = omp_get_num_threads();  /* the same in every thread */
            total += f->kernel(iters);
            cpu += thread_cpu() - c0;
        }
        double dt = now() - t0;
        *sink += total;
        keep_best(&best, f->ops_per_round * (double)iters * threads / dt, cpu, threads, dt);
    }
    return best;
}

int main(int argc, char **argv) {
    if (argc > 1 && atoi(argv[1]) > 0) omp_set_num_threads(atoi(argv[1]));
    int quick = argc > 2 && strcmp(argv[2], "quick") == 0;
    __builtin_cpu_init();
    struct family fams[] = {
        {"f32_fma_ymm", "vfmadd231ps ymm", "GFLOP/s", 12 * 16, k_fma_ymm,
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), "CPU lacks AVX2/FMA"},
        {"f32_fma_zmm", "vfmadd231ps zmm", "GFLOP/s", 16 * 32, k_fma_zmm,
         __builtin_cpu_supports("avx512f"), "CPU lacks AVX-512F"},
        {"bf16_dot_zmm", "vdpbf16ps zmm", "GFLOP/s", 16 * 64, k_bf16_zmm,
         __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16"), "CPU lacks AVX512_BF16"},
        {"int8_vnni_zmm", "vpdpbusd zmm", "GOP/s", 16 * 128, k_vnni_zmm,
         __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni"), "CPU lacks AVX512_VNNI"},
        {"int8_vnni_ymm", "vpdpbusd ymm (AVX-VNNI, VEX)", "GOP/s", 12 * 64, k_vnni_ymm,
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avxvnni"), "CPU lacks AVX-VNNI"},
        {"int8_maddubs_ymm", "vpmaddubsw + vpmaddwd + vpaddd ymm", "GOP/s", 12 * 64, k_maddubs_ymm,
         __builtin_cpu_supports("avx2"), "CPU lacks AVX2"},
        {"f32_muladd_scalar", "mulss + addss (one float, no FMA)", "GFLOP/s", 12 * 2, k_muladd_ss, 1, ""},
    };
    const int nf = sizeof fams / sizeof fams[0];
    double sink = 0;
    size_t bytes = (size_t)1 << (quick ? 26 : 30);
    int passes = quick ? 2 : 5, runs = quick ? 2 : 5;
    double secs = quick ? 0.02 : 0.15;
    struct rate plain = read_bandwidth(bytes, passes, 0, &sink);
    struct rate fetched = read_bandwidth(bytes, passes, 1, &sink);
    struct rate bw = plain.per_s > fetched.per_s ? plain : fetched;
    printf("{\"threads\": %d, \"quick\": %s, \"read_bandwidth_gb_s\": %.2f, \"read_cpu_share\": %.2f, "
           "\"plain_read_gb_s\": %.2f, \"prefetched_read_gb_s\": %.2f,\n \"peaks\": {",
           omp_get_max_threads(), quick ? "true" : "false", bw.per_s / 1e9, bw.cpu_share, plain.per_s / 1e9,
           fetched.per_s / 1e9);
    for (int i = 0; i < nf; i++) {
        const struct family *f = &fams[i];
        printf("%s\n  \"%s\": {\"instruction\": \"%s\", \"unit\": \"%s\", ", i ? "," : "", f->key, f->instruction,
               f->unit);
        if (f->present) {
            struct rate r = peak(f, runs, secs, &sink);
            printf("\"peak\": %.1f, \"cpu_share\": %.2f}", r.per_s / 1e9, r.cpu_share);
        } else {
            printf("\"peak\": null, \"reason\": \"%s\"}", f->lacks);
        }
    }
    printf("},\n \"sink\": %g}\n", sink);
    return 0;
}
