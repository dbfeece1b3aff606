/* The count table of 1-byte integer statistics (stats_bytes.h). */
#include "stats_bytes.h"

#include <stdbool.h>
#include <string.h>

void h5fl_bc_init(h5fl_bytecount_t *c)
{
    memset(c, 0, sizeof *c);
    c->lo = 256;
    c->hi = -1;
}

void h5fl_bc_reset(h5fl_bytecount_t *c)
{
    if (c->lo <= c->hi) {
        size_t rows = (size_t)(c->hi - c->lo + 1);
        for (unsigned k = 0; k < 4; k++)
            memset(&c->sub[k][c->lo], 0, rows * sizeof c->sub[k][0]);
        memset(&c->tot[c->lo], 0, rows * sizeof c->tot[0]);
    }
    c->pend = 0;
    c->lo = 256;
    c->hi = -1;
}

/* Empty the sub-tables into the 64-bit totals. */
static void bc_spill(h5fl_bytecount_t *c)
{
    for (unsigned i = 0; i < 256; i++) {
        c->tot[i] += (uint64_t)c->sub[0][i] + c->sub[1][i] + c->sub[2][i] + c->sub[3][i];
        c->sub[0][i] = c->sub[1][i] = c->sub[2][i] = c->sub[3][i] = 0;
    }
    c->pend = 0;
}

/* The 8 bytes of one 64-bit word, each to the next sub-table in turn. */
static inline void count8(uint32_t (*s)[256], uint64_t w)
{
    for (unsigned k = 0; k < 8; k++)
        s[k & 3][(w >> (8 * k)) & 255]++;
}

/* 16 bytes per step (two 64-bit loads), each byte to the next sub-table in turn. */
static void bc_run(uint32_t (*s)[256], const uint8_t *p, size_t n, unsigned flip)
{
    const uint64_t fl = (uint64_t)flip * 0x0101010101010101ull;
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        uint64_t a, b;
        memcpy(&a, p + i, 8);
        memcpy(&b, p + i + 8, 8);
        count8(s, a ^ fl);
        count8(s, b ^ fl);
    }
    for (; i < n; i++)
        s[i & 3][p[i] ^ flip]++;
}

void h5fl_bc_count(h5fl_bytecount_t *c, const uint8_t *p, size_t n, unsigned flip)
{
    const uint64_t cap = UINT32_MAX; /* a sub-table counter counts at most `pend` elements */
    while (n) {
        if (c->pend == cap)
            bc_spill(c);
        size_t k = n < cap - c->pend ? n : (size_t)(cap - c->pend);
        bc_run(c->sub, p, k, flip);
        c->pend += k;
        p += k;
        n -= k;
    }
}

static bool bc_row(const h5fl_bytecount_t *c, int i)
{
    return (c->sub[0][i] | c->sub[1][i] | c->sub[2][i] | c->sub[3][i]) != 0 || c->tot[i] != 0;
}

int h5fl_bc_first(const h5fl_bytecount_t *c, int from, int to)
{
    for (int i = from; i < to; i++)
        if (bc_row(c, i))
            return i;
    return -1;
}

int h5fl_bc_last(const h5fl_bytecount_t *c, int from, int to)
{
    for (int i = to - 1; i >= from; i--)
        if (bc_row(c, i))
            return i;
    return -1;
}
