/* The check of the C tests: CHECK(cond) reports a failed condition with dlock's last error and
 * counts it in `failures`, which main returns. Include it after a dlock.h (today's, or the frozen
 * v1 copy of tests/abi): it needs dlock_last_error() declared. */
#ifndef DLOCK_TESTS_C_CHECK_H
#define DLOCK_TESTS_C_CHECK_H

#include <stdio.h>

static int failures = 0;

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, \
                    #cond, dlock_last_error());                                             \
            ++failures;                                                                     \
        }                                                                                   \
    } while (0)

#endif
