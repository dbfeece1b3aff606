/* h5flow_log — what the statistics writer (stats.c) and the statistics query (stats_json.c) share:
 * the element kinds, the accumulator with its scans and histogram (stats_acc.c), and the framing of a
 * statistics record (docs/FORMAT.md, "Statistics"). Internal to the connector. */
#ifndef H5FL_STATS_ACC_H
#define H5FL_STATS_ACC_H

#include "stats.h"
#include "stats_bytes.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#define SREC_HDR 128u /* fixed part of a statistics record */

enum { K_NONE = 0, K_INT = 1, K_UINT = 2, K_FLOAT = 3 };
enum { UDF_NONE = 0, UDF_OK = 1, UDF_FAILED = 2 };

/* The element kind of `type` (K_NONE: no statistics) and its size in *esize. */
int h5fl_kind_of(hid_t type, size_t *esize);

typedef union sval {
    int64_t i;
    uint64_t u;
    double f;
} sval_t;

typedef struct acc {
    int kind;
    size_t esize;
    uint64_t n, nan;
    bool any; /* a value that is not NaN was seen: min, max, kmin, kmax are set */
    sval_t min, max;
    uint64_t kmin, kmax; /* element index (0-based, in the order the elements were given) */
    double sum; /* floats; integers: the exact sums below, rounded once by acc_sum */
    __extension__ __int128 isum;
    __extension__ unsigned __int128 usum;
    uint64_t hist[H5FL_STATS_BINS];
    bool has_hist;
    /* 1-byte integers (stats_bytes.h): the elements seen are counted in this table, and min/max/kmin/kmax
     * are kept from it as they come; the sum and the histogram are taken from it (h5fl_bytes_settle,
     * h5fl_hist_scan) — NULL: the scans of stats_acc.c */
    h5fl_bytecount_t *bc;
    bool hist_done; /* the histogram was taken from bc */
} acc_t;

/* The sum: integers exactly over all the elements seen, rounded once to a double. */
static inline double acc_sum(const struct acc *a)
{
    return a->kind == K_INT ? (double)a->isum : a->kind == K_UINT ? (double)a->usum : a->sum;
}

static inline double as_double(int kind, sval_t v)
{
    return kind == K_INT ? (double)v.i : kind == K_UINT ? (double)v.u : v.f;
}

/* The histogram: H5FL_STATS_BINS equal bins over [min, max] of the same elements (a second pass, after
 * h5fl_acc_scan saw them all; bin = floor((v - min) * bins / (max - min)), the last bin closed, as numpy's
 * histogram computes it before its edge corrections); none when min or max is infinite. */
static inline bool hist_ok(const acc_t *a)
{
    return a->any && isfinite(as_double(a->kind, a->min)) && isfinite(as_double(a->kind, a->max));
}

/* First pass over the n elements at buf (the k0-th onwards of those the accumulator is given): count,
 * NaN count, min, max, sum, first positions of the min and of the max. */
void h5fl_acc_scan(acc_t *a, const void *buf, uint64_t n, uint64_t k0);
/* Second pass over the same elements: the histogram (only where hist_ok said so after the first). */
void h5fl_hist_scan(acc_t *a, const void *buf, uint64_t n);
/* Done with a->bc (after the histogram, if any): the exact sum from the counts; the table may go. */
void h5fl_bytes_settle(acc_t *a);
/* Length of the valid statistics records at the start of b[0..len). */
size_t h5fl_stats_valid_prefix(const uint8_t *b, size_t len);

#endif
