/* The check macro of the C unit tests: report and count, keep going. */
#ifndef H5FL_TEST_CHECK_H
#define H5FL_TEST_CHECK_H
#include <stdio.h>

static int failures;
#define CHECK(c)                                                                                           \
    do {                                                                                                   \
        if (!(c)) {                                                                                        \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);                          \
            failures++;                                                                                    \
        }                                                                                                  \
    } while (0)

#endif
