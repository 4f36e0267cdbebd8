/* check.h — the smallest test harness that reports like the others: CHECK(cond, fmt, …)
 * records a failure with file:line and goes on; CHECK_DONE() prints "N passed, N failed"
 * and returns the exit status. One binary per module, tests/unit/<folder>/test_<module>.c. */
#ifndef CHECK_H
#define CHECK_H

#include <stdio.h>

static int check_passed, check_failed;

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        if (cond) {                                                                            \
            check_passed++;                                                                    \
        } else {                                                                               \
            check_failed++;                                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                    \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fputc('\n', stderr);                                                               \
        }                                                                                      \
    } while (0)

#define CHECK_DONE()                                                                           \
    (printf("%s: %d passed, %d failed\n", __FILE__, check_passed, check_failed), check_failed != 0)

#endif
