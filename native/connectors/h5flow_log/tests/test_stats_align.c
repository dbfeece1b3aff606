/* The statistics scans (stats_acc.c) of a buffer not aligned to its element size (a write migrated from
 * h5flow_cache's mapping of its cache file: any byte offset) give what they give for the same values
 * aligned, for every element kind and size. Under UBSan (make test-full) the scans must not load through a
 * misaligned pointer. */
#include "stats_acc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static void scan_both(acc_t *a, const void *buf, uint64_t n)
{
    h5fl_acc_scan(a, buf, n, 0);
    if (hist_ok(a))
        h5fl_hist_scan(a, buf, n);
}

int main(void)
{
    enum { N = 5000 }; /* more than one aligned block of the copy */
    static unsigned char store[N * 8 + 16];
    static double aligned_buf[N];
    const struct {
        int kind;
        size_t esize;
    } kinds[] = {{K_INT, 2}, {K_INT, 4}, {K_INT, 8}, {K_UINT, 2}, {K_UINT, 4}, {K_UINT, 8}, {K_FLOAT, 4},
                 {K_FLOAT, 8}};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        size_t es = kinds[k].esize;
        unsigned char *raw = (unsigned char *)aligned_buf;
        for (size_t i = 0; i < N; i++) { /* values with their min and max somewhere in the middle */
            int64_t v = (int64_t)((i * 2654435761u) % 20011) - 10000;
            if (kinds[k].kind == K_FLOAT && es == 4) {
                float x = (float)v / 8;
                memcpy(raw + i * es, &x, es);
            } else if (kinds[k].kind == K_FLOAT) {
                double x = (double)v / 8;
                memcpy(raw + i * es, &x, es);
            } else {
                memcpy(raw + i * es, &v, es); /* little-endian: the low bytes */
            }
        }
        acc_t want = {.kind = kinds[k].kind, .esize = es};
        scan_both(&want, aligned_buf, N);
        for (size_t off = 1; off < es; off++) {
            memcpy(store + off, aligned_buf, N * es);
            acc_t got = {.kind = kinds[k].kind, .esize = es};
            scan_both(&got, store + off, N);
            CHECK(got.n == want.n && got.nan == want.nan && got.any == want.any);
            CHECK(got.kmin == want.kmin && got.kmax == want.kmax);
            CHECK(memcmp(&got.min, &want.min, sizeof got.min) == 0 && memcmp(&got.max, &want.max, sizeof got.max) == 0);
            CHECK(acc_sum(&got) == acc_sum(&want));
            CHECK(memcmp(got.hist, want.hist, sizeof got.hist) == 0);
        }
    }
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("stats scans of misaligned buffers: all checks passed\n");
    return failures ? 1 : 0;
}
