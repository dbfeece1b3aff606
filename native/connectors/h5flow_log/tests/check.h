/* The check macro of the C unit tests (report and count, keep going) and their pseudo-random numbers. */
#ifndef H5FL_TEST_CHECK_H
#define H5FL_TEST_CHECK_H
#include <stdint.h>
#include <stdio.h>

static int failures;
#define CHECK(c)                                                                                           \
    do {                                                                                                   \
        if (!(c)) {                                                                                        \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);                          \
            failures++;                                                                                    \
        }                                                                                                  \
    } while (0)

/* xorshift64: the same sequence in every run, so a failure reproduces */
static uint64_t rng = 88172645463325252ull;
static inline uint64_t xr(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

#endif
