/* What a Linux process must do before AMX tile instructions run, tried case by case on this
 * machine: the question behind llama.cpp's AMX crash on the Intel Xeon VM (doc/benchmarks.md:
 * an invalid opcode at tileloadd on its first quantized product, while llaisys' own AMX path
 * and a plain AMX program run there).
 *
 *     cc -O1 -pthread -fopenmp tools/amx_probe.c -o /tmp/amx_probe && /tmp/amx_probe
 *
 * One JSON object a line: first the machine (kernel, CPUID, XCR0, the process's XCOMP
 * permission), then one line per case, each run in a child process so that a fault ends only
 * that case: {"case": ..., "outcome": "ok" | "SIGILL" | "SIGSEGV" | "exit N" | "skip", "detail"}.
 * Without AMX in CPUID it prints {"amx": false} and exits 0. The cases:
 *   no_permission      tile data used without ARCH_REQ_XCOMP_PERM (the kernel's XFD: SIGILL)
 *   permission         requested first, then ldtilecfg, tileloadd, tdpbssd, tilestored, checked
 *   no_config          permission, then tileloadd with no tile configuration loaded (#UD)
 *   thread_before      a thread made before the permission request uses the tiles after it
 *   config_kept        4 threads load the configuration once (as ggml does, per thread), then
 *                      run 100,000 products each with sched_yield and short sleeps between:
 *                      does the configuration survive context switches and migrations?
 *   after_signal       the configuration survives a signal handler
 *   small_altstack     a sigaltstack of MINSIGSTKSZ installed before the permission request
 *   openmp_once        an OpenMP team loads the configuration once per thread and runs 2,000
 *                      parallel regions (ggml's pattern under OpenMP)
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <errno.h>
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ARCH_GET_XCOMP_SUPP 0x1021
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

static int8_t A[16][64], B[16][64];
static int32_t want[16][16];

#define AMX __attribute__((target("amx-tile,amx-int8")))

AMX static void load_config(void) {
    struct tile_config c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 3; t++) {
        c.rows[t] = 16;
        c.colsb[t] = 64;
    }
    _tile_loadconfig(&c);
}

AMX static int config_loaded(void) {
    struct tile_config c;
    memset(&c, 0xff, sizeof c);
    _tile_storeconfig(&c);
    return c.palette == 1;
}

/* C = A . B (A 16 x 64 int8, B as 16 rows of 16 4-byte groups): 0 when C is right. */
AMX static int product(void) {
    int32_t C[16][16];
    _tile_zero(0);
    _tile_loadd(1, A, 64);
    _tile_loadd(2, B, 64);
    _tile_dpbssd(0, 1, 2);
    _tile_stored(0, C, 64);
    return memcmp(C, want, sizeof C) != 0;
}

static long request_permission(void) { return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); }

static void make_operands(void) {
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 64; k++) {
            A[i][k] = (int8_t)((i * 7 + k * 3) % 23 - 11);
            B[i][k] = (int8_t)((i * 5 + k * 11) % 19 - 9);
        }
    /* tdpbssd: C[m][n] += sum_k A[m][4k + j] * B[k][4n + j] over k < 16, j < 4 */
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 16; n++) {
            int32_t s = 0;
            for (int k = 0; k < 16; k++)
                for (int j = 0; j < 4; j++) s += A[m][4 * k + j] * B[k][4 * n + j];
            want[m][n] = s;
        }
}

/* ---- the cases: each returns its exit status (0 ok) or dies of a signal */

static int case_no_permission(void) {
    load_config();
    return product();
}

static int case_permission(void) {
    if (request_permission()) return 10;
    load_config();
    return product();
}

static int case_no_config(void) {
    if (request_permission()) return 10;
    return product();
}

static volatile int go;
static void *use_after_go(void *arg) {
    (void)arg;
    while (!go) sched_yield();
    load_config();
    return (void *)(intptr_t)product();
}

static int case_thread_before(void) {
    pthread_t t;
    pthread_create(&t, NULL, use_after_go, NULL);
    usleep(10000);
    if (request_permission()) return 10;
    go = 1;
    void *r;
    pthread_join(t, &r);
    return (int)(intptr_t)r;
}

static void *config_once_loop(void *arg) {
    (void)arg;
    load_config();
    struct timespec nap = {0, 1000};
    for (int i = 0; i < 100000; i++) {
        if (i % 64 == 0) nanosleep(&nap, NULL);
        else sched_yield();
        if (!config_loaded()) return (void *)(intptr_t)20;  /* lost: the next tileloadd would fault */
        if (product()) return (void *)(intptr_t)21;
    }
    return NULL;
}

static int case_config_kept(void) {
    if (request_permission()) return 10;
    pthread_t t[4];
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, config_once_loop, NULL);
    int rc = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        if (r) rc = (int)(intptr_t)r;
    }
    return rc;
}

static void on_usr1(int sig) { (void)sig; }

static int case_after_signal(void) {
    if (request_permission()) return 10;
    signal(SIGUSR1, on_usr1);
    load_config();
    raise(SIGUSR1);
    if (!config_loaded()) return 20;
    return product();
}

static int case_small_altstack(void) {
    stack_t ss = {.ss_sp = malloc(MINSIGSTKSZ), .ss_size = MINSIGSTKSZ, .ss_flags = 0};
    if (sigaltstack(&ss, NULL)) return 11;
    if (request_permission()) {
        printf("{\"case\": \"small_altstack\", \"request_errno\": %d}\n", errno);
        fflush(stdout);
        return 10;
    }
    load_config();
    return product();
}

static int case_openmp_once(void) {
    if (request_permission()) return 10;
    int bad = 0;
    for (int region = 0; region < 2000; region++) {
#pragma omp parallel reduction(| : bad)
        {
            static __thread int loaded;
            if (!loaded) {
                load_config();
                loaded = 1;
            }
            if (region % 100 == 0) sched_yield();
            bad |= !config_loaded() ? 20 : product();
        }
        if (bad) return bad;
    }
    return 0;
}

struct named_case {
    const char *name;
    int (*run)(void);
};

static void run_case(struct named_case c) {
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) _exit(c.run());
    int status = 0;
    waitpid(pid, &status, 0);
    char outcome[32];
    if (WIFSIGNALED(status)) snprintf(outcome, sizeof outcome, "%s", strsignal(WTERMSIG(status)));
    else if (WEXITSTATUS(status) == 0) snprintf(outcome, sizeof outcome, "ok");
    else snprintf(outcome, sizeof outcome, "exit %d", WEXITSTATUS(status));
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGILL) snprintf(outcome, sizeof outcome, "SIGILL");
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) snprintf(outcome, sizeof outcome, "SIGSEGV");
    printf("{\"case\": \"%s\", \"outcome\": \"%s\"}\n", c.name, outcome);
}

int main(void) {
    unsigned a, b, c, d;
    const int tile = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 24 & 1);
    const int int8 = tile && (d >> 25 & 1);
    if (!tile || !int8) {
        printf("{\"amx\": false}\n");
        return 0;
    }
    struct utsname u;
    uname(&u);
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    unsigned long supp = 0, perm = 0;
    syscall(SYS_arch_prctl, ARCH_GET_XCOMP_SUPP, &supp);
    syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm);
    printf("{\"amx\": true, \"kernel\": \"%s\", \"xcr0_tilecfg\": %u, \"xcr0_tiledata\": %u, \"xcomp_supp\": \"0x%lx\", "
           "\"xcomp_perm_at_start\": \"0x%lx\", \"cpus\": %ld}\n",
           u.release, lo >> 17 & 1, lo >> 18 & 1, supp, perm, sysconf(_SC_NPROCESSORS_ONLN));
    make_operands();
    const struct named_case cases[] = {
        {"no_permission", case_no_permission}, {"permission", case_permission},     {"no_config", case_no_config},
        {"thread_before", case_thread_before}, {"config_kept", case_config_kept},   {"after_signal", case_after_signal},
        {"small_altstack", case_small_altstack}, {"openmp_once", case_openmp_once},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(cases[i]);
    return 0;
}
