/* h5flow_log — statistics of 1-byte integers from a count table (stats_bytes.c; used by the accumulator, stats_acc.c).
 *
 * For int8/uint8 every statistic follows from how often each of the 256 values occurs: min and max are
 * the first and last values that occur, the sum is sum(v * count[v]), and the histogram bin of an
 * element depends on its value alone, so binning the 256 values (with the histogram's own formula) and
 * adding their counts gives the histogram exactly. One counting pass over the bytes replaces the
 * min/max/sum scan and the histogram's second pass.
 *
 * Table index i = byte ^ flip: flip 0 for uint8 (i = v), 0x80 for int8 (i = v + 128), so that index
 * order is value order in both. */
#ifndef H5FL_STATS_BYTES_H
#define H5FL_STATS_BYTES_H

#include <stddef.h>
#include <stdint.h>

typedef struct h5fl_bytecount {
    /* four sub-tables, filled round-robin: consecutive equal bytes increment different counters, so an
     * increment does not wait for the store of the one before (store-to-load forwarding) */
    uint32_t sub[4][256];
    uint64_t tot[256]; /* counts moved out of the sub-tables before a 32-bit counter could overflow */
    uint64_t pend;     /* elements counted into the sub-tables since they were last emptied */
    int lo, hi;        /* rows that may be nonzero: [lo, hi] (lo > hi: none) */
} h5fl_bytecount_t;

/* All zero (a table of unknown content). */
void h5fl_bc_init(h5fl_bytecount_t *c);
/* All zero again, clearing only rows [c->lo, c->hi]: the caller keeps that range covering every
 * value counted (h5fl_bc_touch). */
void h5fl_bc_reset(h5fl_bytecount_t *c);
static inline void h5fl_bc_touch(h5fl_bytecount_t *c, int i)
{
    c->lo = i < c->lo ? i : c->lo;
    c->hi = i > c->hi ? i : c->hi;
}
/* Count the n bytes at p (each as index byte ^ flip). */
void h5fl_bc_count(h5fl_bytecount_t *c, const uint8_t *p, size_t n, unsigned flip);
/* The first (last) index in [from, to) whose count is nonzero; -1 if none. */
int h5fl_bc_first(const h5fl_bytecount_t *c, int from, int to);
int h5fl_bc_last(const h5fl_bytecount_t *c, int from, int to);
/* The count of index i. */
static inline uint64_t h5fl_bc_get(const h5fl_bytecount_t *c, int i)
{
    return c->tot[i] + (uint64_t)c->sub[0][i] + c->sub[1][i] + c->sub[2][i] + c->sub[3][i];
}

#endif
