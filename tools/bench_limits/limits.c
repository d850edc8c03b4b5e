/* This machine's limits for an inference engine: memory read bandwidth and fp32 FMA peak.
 *
 *   cc -O3 -march=native -fopenmp limits.c -o limits && ./limits [threads]
 *
 * Prints one JSON object. Bandwidth: every thread sums its share of a buffer far larger than
 * the caches with wide loads, best of several passes, both plainly and with a software
 * prefetch 4 KiB ahead on a buffer advised for huge pages (on the build VM the plain loop
 * reads 35-41 GB/s and the prefetching one 50-53: the larger is the machine's limit). Peak: every thread runs independent
 * chains of vector FMAs held in registers (enough chains to cover the FMA latency), best of
 * several runs. Both use the widest vectors the compiler was allowed (-march=native).
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#if defined(__AVX512F__)
typedef __m512 vec;
#define VLEN 16
#define VZERO() _mm512_setzero_ps()
#define VSET(x) _mm512_set1_ps(x)
#define VLOAD(p) _mm512_load_ps(p)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VSUM(v) _mm512_reduce_add_ps(v)
#define ISA "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
typedef __m256 vec;
#define VLEN 8
#define VZERO() _mm256_setzero_ps()
#define VSET(x) _mm256_set1_ps(x)
#define VLOAD(p) _mm256_load_ps(p)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
static float VSUM(__m256 v) {
    float t[8];
    _mm256_storeu_ps(t, v);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#define ISA "avx2"
#else
#error "needs AVX2+FMA or AVX-512 (compile with -march=native on such a CPU)"
#endif

/* Bytes read per second over `bytes` of memory, best of `passes`; with `prefetch`, every 256
 * bytes read ask for the 256 bytes 4 KiB further on. */
static double read_bandwidth(size_t bytes, int passes, int prefetch, double *sink) {
    size_t n = bytes / sizeof(float);
    float *buf = aligned_alloc(1 << 21, n * sizeof(float));
    if (!buf) return 0;
#ifdef MADV_HUGEPAGE
    madvise(buf, n * sizeof(float), MADV_HUGEPAGE);
#endif
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);  /* first touch on the reading thread */
    double best = 0;
    for (int p = 0; p < passes; p++) {
        double total = 0, t0 = now();
#pragma omp parallel reduction(+ : total)
        {
            vec a0 = VZERO(), a1 = VZERO(), a2 = VZERO(), a3 = VZERO();
#pragma omp for schedule(static)
            for (size_t i = 0; i < n; i += 4 * VLEN) {
                if (prefetch) {  /* past the end is harmless: a prefetch never faults */
                    const char *ahead = (const char *)(buf + i) + 4096;
                    for (int l = 0; l < 4 * VLEN * 4; l += 64) _mm_prefetch(ahead + l, _MM_HINT_T0);
                }
                a0 = VADD(a0, VLOAD(buf + i));
                a1 = VADD(a1, VLOAD(buf + i + VLEN));
                a2 = VADD(a2, VLOAD(buf + i + 2 * VLEN));
                a3 = VADD(a3, VLOAD(buf + i + 3 * VLEN));
            }
            total += VSUM(VADD(VADD(a0, a1), VADD(a2, a3)));
        }
        double dt = now() - t0;
        *sink += total;
        if (bytes / dt > best) best = bytes / dt;
    }
    free(buf);
    return best;
}

/* fp32 FLOP/s of register-resident FMAs (2 flops per lane), best of `runs`. */
static double fma_peak(long iters, int runs, double *sink) {
    double best = 0;
    for (int r = 0; r < runs; r++) {
        double total = 0, t0 = now();
        int threads = 1;
#pragma omp parallel reduction(+ : total)
        {
#pragma omp single
            threads = omp_get_num_threads();
            vec m = VSET(0.999999f), c = VSET(1e-7f);
            vec x0 = VSET(1), x1 = VSET(2), x2 = VSET(3), x3 = VSET(4), x4 = VSET(5), x5 = VSET(6);
            vec x6 = VSET(7), x7 = VSET(8), x8 = VSET(9), x9 = VSET(10), x10 = VSET(11), x11 = VSET(12);
            for (long i = 0; i < iters; i++) {  /* 12 independent chains cover a 4-cycle latency x 2 ports */
                x0 = VFMA(x0, m, c); x1 = VFMA(x1, m, c); x2 = VFMA(x2, m, c); x3 = VFMA(x3, m, c);
                x4 = VFMA(x4, m, c); x5 = VFMA(x5, m, c); x6 = VFMA(x6, m, c); x7 = VFMA(x7, m, c);
                x8 = VFMA(x8, m, c); x9 = VFMA(x9, m, c); x10 = VFMA(x10, m, c); x11 = VFMA(x11, m, c);
            }
            vec s = VADD(VADD(VADD(x0, x1), VADD(x2, x3)), VADD(VADD(x4, x5), VADD(x6, x7)));
            total += VSUM(VADD(s, VADD(VADD(x8, x9), VADD(x10, x11))));
        }
        double dt = now() - t0;
        *sink += total;
        double flops = 2.0 * VLEN * 12.0 * (double)iters * threads / dt;
        if (flops > best) best = flops;
    }
    return best;
}

int main(int argc, char **argv) {
    if (argc > 1) omp_set_num_threads(atoi(argv[1]));
    double sink = 0;
    double plain = read_bandwidth((size_t)1 << 30, 5, 0, &sink);
    double fetched = read_bandwidth((size_t)1 << 30, 5, 1, &sink);
    double bw = plain > fetched ? plain : fetched;
    double peak = fma_peak(200000000L / VLEN, 5, &sink);
    printf("{\"isa\": \"%s\", \"threads\": %d, \"read_bandwidth_gb_s\": %.2f, \"plain_read_gb_s\": %.2f, "
           "\"prefetched_read_gb_s\": %.2f, \"fp32_fma_peak_gflop_s\": %.1f, \"sink\": %g}\n",
           ISA, omp_get_max_threads(), bw / 1e9, plain / 1e9, fetched / 1e9, peak / 1e9, sink);
    return 0;
}
