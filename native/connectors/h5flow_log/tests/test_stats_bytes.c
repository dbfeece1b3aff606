/* The count table of 1-byte statistics (stats_bytes.c) against a brute-force count: every length and
 * alignment around the 16-byte steps, both flips, the move to 64-bit totals before a 32-bit counter could
 * overflow, first/last, and a reset that clears only the rows used. */
#include "stats_bytes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int same(const h5fl_bytecount_t *c, const uint64_t *want)
{
    for (int i = 0; i < 256; i++)
        if (h5fl_bc_get(c, i) != want[i])
            return 0;
    return 1;
}

static int all_zero(const h5fl_bytecount_t *c)
{
    uint64_t z[256] = {0};
    return same(c, z);
}

int main(void)
{
    static h5fl_bytecount_t c;
    uint8_t buf[300];
    uint64_t want[256];
    for (unsigned flip = 0; flip <= 0x80; flip += 0x80)
        for (size_t off = 0; off < 8; off++)
            for (size_t n = 0; n + off <= sizeof buf; n += 7) {
                h5fl_bc_init(&c);
                memset(want, 0, sizeof want);
                for (size_t i = 0; i < n; i++) {
                    buf[off + i] = (uint8_t)(n % 3 ? xr() : 42); /* random, or constant */
                    want[buf[off + i] ^ flip]++;
                }
                h5fl_bc_count(&c, buf + off, n, flip);
                h5fl_bc_count(&c, buf + off, n / 2, flip); /* a second call adds */
                for (size_t i = 0; i < n / 2; i++)
                    want[buf[off + i] ^ flip]++;
                CHECK(same(&c, want));
                int lo = -1, hi = -1;
                for (int i = 0; i < 256; i++)
                    if (want[i]) {
                        lo = lo < 0 ? i : lo;
                        hi = i;
                    }
                CHECK(h5fl_bc_first(&c, 0, 256) == lo && h5fl_bc_last(&c, 0, 256) == hi);
                if (lo >= 0) {
                    CHECK(h5fl_bc_first(&c, 0, lo) == -1 && h5fl_bc_last(&c, hi + 1, 256) == -1);
                    CHECK(h5fl_bc_first(&c, lo, hi + 1) == lo && h5fl_bc_last(&c, lo, hi + 1) == hi);
                    h5fl_bc_touch(&c, lo);
                    h5fl_bc_touch(&c, hi);
                }
                h5fl_bc_reset(&c);
                CHECK(all_zero(&c) && c.pend == 0);
            }
    /* near the 32-bit limit: counts move to the totals, none lost */
    h5fl_bc_init(&c);
    memset(want, 0, sizeof want);
    c.sub[1][7] = c.sub[0][7] = UINT32_MAX - 40; /* as if pend elements were counted */
    c.pend = UINT32_MAX - 20;
    want[7] = 2ull * (UINT32_MAX - 40);
    for (size_t i = 0; i < sizeof buf; i++) {
        buf[i] = (uint8_t)(i % 5 ? 7 : 200);
        want[buf[i]]++;
    }
    h5fl_bc_count(&c, buf, sizeof buf, 0);
    CHECK(same(&c, want));
    CHECK(c.pend < sizeof buf && c.tot[7] >= 2ull * (UINT32_MAX - 40));
    h5fl_bc_touch(&c, 7);
    h5fl_bc_touch(&c, 200);
    h5fl_bc_reset(&c);
    CHECK(all_zero(&c));
    if (failures)
        fprintf(stderr, "%d failures\n", failures);
    return failures != 0;
}
