/* The check macro the C test programs share: EXPECT(cond, what) counts a check, and on failure
 * prints where, what and llaisysGetLastError(). Each program is one translation unit, so the
 * counters are its own; it ends with `return finish();`. */
#ifndef LLAISYS_TEST_EXPECT_H
#define LLAISYS_TEST_EXPECT_H

#include <llaisys.h>

#include <stdio.h>

static int failures = 0;
static int checks = 0;

#define EXPECT(cond, what)                                                                      \
    do {                                                                                        \
        checks++;                                                                               \
        if (!(cond)) {                                                                          \
            failures++;                                                                         \
            fprintf(stderr, "FAIL %s:%d %s (last error: %s)\n", __FILE__, __LINE__, what,       \
                    llaisysGetLastError());                                                     \
        }                                                                                       \
    } while (0)

/* Prints the tally; the process exit code (0: every check passed). */
static int finish(void) {
    printf("%d checks, %d failures\n", checks, failures);
    return failures == 0 ? 0 : 1;
}

#endif
