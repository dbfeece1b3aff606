/* Selections as runs of linear element indices, and where two selections overlap.
 *
 * A write to a dataset maps the i-th element of its memory selection to the i-th element of its file
 * selection, both in HDF5's iteration order: increasing linear index for "all" and hyperslab selections,
 * list order for point selections. A run records, for a stretch of consecutive linear indices, the position
 * of its first element in that order, which is all the overlay of a cached write on a read needs. */
#include "hfc.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    hfc_run_t *v;
    size_t n, cap;
} vec_t;

/* Append a run; merge: continue the previous run when it goes on in both orders. */
static int append(vec_t *v, uint64_t off, uint64_t len, uint64_t pos, int merge)
{
    if (merge && v->n && v->v[v->n - 1].off + v->v[v->n - 1].len == off &&
        v->v[v->n - 1].pos + v->v[v->n - 1].len == pos) {
        v->v[v->n - 1].len += len;
        return 0;
    }
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 16;
        hfc_run_t *nv = realloc(v->v, cap * sizeof *nv);
        if (!nv) {
            hfc_err("h5flow_cache: out of memory describing a selection");
            return -1;
        }
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = (hfc_run_t){off, len, pos};
    return 0;
}

static int push(vec_t *v, uint64_t off, uint64_t len, uint64_t pos) { return append(v, off, len, pos, 1); }

static int by_off(const void *a, const void *b)
{
    uint64_t x = ((const hfc_run_t *)a)->off, y = ((const hfc_run_t *)b)->off;
    return x < y ? -1 : x > y;
}

void hfc_runs_free(hfc_runs_t *r)
{
    free(r->runs);
    memset(r, 0, sizeof *r);
}

int hfc_runs_of(hid_t space, hfc_runs_t *out)
{
    memset(out, 0, sizeof *out);
    int rank = H5Sget_simple_extent_ndims(space);
    H5S_sel_type st = H5Sget_select_type(space);
    hssize_t np = H5Sget_select_npoints(space);
    if (rank < 0 || st < 0 || np < 0) {
        hfc_err("h5flow_cache: cannot read a selection");
        return -1;
    }
    hsize_t dims[H5S_MAX_RANK] = {0};
    if (rank > 0 && H5Sget_simple_extent_dims(space, dims, NULL) < 0) {
        hfc_err("h5flow_cache: cannot read a dataspace's extent");
        return -1;
    }
    uint64_t stride[H5S_MAX_RANK + 1];
    stride[rank > 0 ? rank - 1 : 0] = 1;
    for (int i = rank - 2; i >= 0; i--)
        stride[i] = stride[i + 1] * dims[i + 1];
    vec_t v = {0};
    int rc = 0;
    out->npoints = (uint64_t)np;
    if (np == 0 || st == H5S_SEL_NONE) {
        out->npoints = 0;
        return 0;
    }
    if (rank == 0 || st == H5S_SEL_ALL) {
        rc = push(&v, 0, (uint64_t)np, 0);
    }
    else if (st == H5S_SEL_POINTS) {
        hsize_t *c = malloc((size_t)np * (size_t)rank * sizeof *c);
        if (!c || H5Sget_select_elem_pointlist(space, 0, (hsize_t)np, c) < 0) {
            free(c);
            hfc_err("h5flow_cache: cannot read a point selection");
            return -1;
        }
        for (hssize_t i = 0; i < np && rc == 0; i++) {
            uint64_t off = 0;
            for (int k = 0; k < rank; k++)
                off += c[(size_t)i * (size_t)rank + (size_t)k] * stride[k];
            rc = append(&v, off, 1, (uint64_t)i, 0); /* no merging: positions follow the list */
        }
        free(c);
        if (rc == 0)
            qsort(v.v, v.n, sizeof *v.v, by_off);
    }
    else if (st == H5S_SEL_HYPERSLABS) {
        hssize_t nb = H5Sget_select_hyper_nblocks(space);
        hsize_t *b = nb > 0 ? malloc((size_t)nb * 2 * (size_t)rank * sizeof *b) : NULL;
        if (nb <= 0 || !b || H5Sget_select_hyper_blocklist(space, 0, (hsize_t)nb, b) < 0) {
            free(b);
            hfc_err("h5flow_cache: cannot read a hyperslab selection");
            return -1;
        }
        /* rows of each block (all dimensions but the last), gathered, then sorted into iteration order */
        vec_t rows = {0};
        for (hssize_t i = 0; i < nb && rc == 0; i++) {
            const hsize_t *s = b + (size_t)i * 2 * (size_t)rank, *e = s + rank;
            hsize_t idx[H5S_MAX_RANK];
            memcpy(idx, s, (size_t)rank * sizeof *idx);
            uint64_t len = e[rank - 1] - s[rank - 1] + 1;
            for (;;) {
                uint64_t off = 0;
                for (int k = 0; k < rank; k++)
                    off += idx[k] * stride[k];
                if ((rc = append(&rows, off, len, 0, 0)) != 0) /* positions after sorting */
                    break;
                int k = rank - 2;
                for (; k >= 0; k--) {
                    if (idx[k] < e[k]) {
                        idx[k]++;
                        break;
                    }
                    idx[k] = s[k];
                }
                if (k < 0)
                    break;
            }
        }
        free(b);
        if (rc == 0) {
            qsort(rows.v, rows.n, sizeof *rows.v, by_off);
            uint64_t pos = 0;
            for (size_t i = 0; i < rows.n && rc == 0; i++) {
                rc = push(&v, rows.v[i].off, rows.v[i].len, pos);
                pos += rows.v[i].len;
            }
            if (rc == 0 && pos != (uint64_t)np) {
                hfc_err("h5flow_cache: a hyperslab selection's blocks hold %llu elements, HDF5 counts %lld",
                        (unsigned long long)pos, (long long)np);
                rc = -1;
            }
        }
        free(rows.v);
    }
    else {
        hfc_err("h5flow_cache: unknown selection type %d", (int)st);
        rc = -1;
    }
    if (rc != 0) {
        free(v.v);
        return -1;
    }
    out->runs = v.v;
    out->n = v.n;
    return 0;
}

void hfc_runs_overlap(const hfc_runs_t *a, const hfc_runs_t *b, hfc_overlap_fn fn, void *arg)
{
    size_t i = 0, j = 0;
    while (i < a->n && j < b->n) {
        const hfc_run_t *x = &a->runs[i], *y = &b->runs[j];
        uint64_t lo = x->off > y->off ? x->off : y->off;
        uint64_t xe = x->off + x->len, ye = y->off + y->len;
        uint64_t hi = xe < ye ? xe : ye;
        if (lo < hi)
            fn(x->pos + (lo - x->off), y->pos + (lo - y->off), hi - lo, arg);
        if (xe <= ye)
            i++;
        else
            j++;
    }
}
