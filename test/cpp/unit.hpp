// The check macro of the C++ unit tests (test_parallel, test_host_alloc), which test internal
// helpers without the library and so without llaisysGetLastError (expect.h is the C programs').
// Each test is one translation unit, so the counters are its own; it ends with `return finish();`.
#pragma once

#include <cstdio>

static int failures = 0, checks = 0;

#define EXPECT(cond, what)                                                          \
    do {                                                                            \
        checks++;                                                                   \
        if (!(cond)) {                                                              \
            failures++;                                                             \
            std::fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, what);      \
        }                                                                           \
    } while (0)

// Prints the tally; the process exit code (0: every check passed).
static inline int finish() {
    std::printf("%d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
