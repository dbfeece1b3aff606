/* Direct chunk I/O and chunk queries of chunked datasets (docs/FORMAT.md "Direct chunk I/O"): HDF5's native
 * dataset optional operations H5Dwrite_chunk, H5Dread_chunk, H5Dget_chunk_storage_size, H5Dget_num_chunks,
 * H5Dget_chunk_info, H5Dget_chunk_info_by_coord and H5Dchunk_iter.
 *
 * A container has no chunks on disk: a direct chunk write is a write record whose selection is the chunk's
 * box, in an extent large enough to hold the whole box (an edge chunk's elements past the dataset's extent
 * are kept, and show when the dataset grows, as in native HDF5), carrying the caller's bytes as they are
 * (filtered datasets: flag 8 with the caller's filter mask). The chunk queries look at the chunk view: the
 * dataset's logs indexed in the linear order of its extent rounded up to whole chunks, so that every
 * element of every chunk is in it. A chunk holds written data when any element of its box is covered by a
 * write (not a shrink's fill); its bytes are the one write that covers the box exactly and is the newest
 * everywhere in it (as stored, with its mask), or else the chunk built from its elements (the fill value
 * where never written) and run through the creation list's filters (mask 0). */
#include "dset.h"
#include "stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct h5fl_cview {
    int rank;
    hsize_t cur[H5S_MAX_RANK];   /* the extent the view was made for */
    hsize_t chunk[H5S_MAX_RANK]; /* the chunk shape */
    hsize_t vdims[H5S_MAX_RANK]; /* cur rounded up to whole chunks: the linear order of ix */
    hsize_t nch[H5S_MAX_RANK];   /* chunks per dimension */
    uint64_t celems;             /* elements per chunk */
    h5fl_index_t *ix;            /* own (built for vdims) or the dataset's own index (vdims == cur) */
    bool own;
    bool listed; /* the written chunks (linear index in the chunk grid, ascending) */
    size_t n;
    uint64_t *lin;
    hsize_t *size;   /* per listed chunk: its storage size, */
    uint32_t *mask;  /* its filter mask, */
    uint8_t *known;  /* whether those two are computed */
    bool bvalid;     /* the last chunk built (from its elements): */
    uint64_t blin;
    void *bbuf; /* H5allocate_memory (the filters may replace it) */
    size_t blen;
    uint32_t bmask;
} h5fl_cview_t;

void h5fl_cview_free(h5fl_cview_t *cv)
{
    if (!cv)
        return;
    if (cv->own)
        h5fl_ix_free(cv->ix);
    free(cv->lin);
    free(cv->size);
    free(cv->mask);
    free(cv->known);
    if (cv->bbuf)
        H5free_memory(cv->bbuf);
    free(cv);
}

/* The chunk shape of a chunked dataset (rank dimensions); -1 with an error otherwise. */
static int chunk_shape(const h5fl_dset_t *d, int rank, hsize_t *chunk)
{
    if (d->vds || d->ext || H5Pget_layout(d->dcpl) != H5D_CHUNKED ||
        H5Pget_chunk(d->dcpl, H5S_MAX_RANK, chunk) != rank || rank < 1) {
        h5fl_err("dataset '%s' is not a chunked dataset", d->o.path);
        return -1;
    }
    for (int k = 0; k < rank; k++)
        if (chunk[k] == 0) {
            h5fl_err("dataset '%s' has a chunk dimension of 0", d->o.path);
            return -1;
        }
    return 0;
}

void h5fl_chunk_round(const h5fl_dset_t *d, int rank, const hsize_t *dims, hsize_t *out)
{
    hsize_t chunk[H5S_MAX_RANK];
    bool chunked = !d->vds && !d->ext && H5Pget_layout(d->dcpl) == H5D_CHUNKED &&
                   H5Pget_chunk(d->dcpl, H5S_MAX_RANK, chunk) == rank;
    for (int k = 0; k < rank; k++) {
        out[k] = dims[k];
        if (chunked && chunk[k] && dims[k] % chunk[k] && dims[k] <= UINT64_MAX - chunk[k])
            out[k] = dims[k] + chunk[k] - dims[k] % chunk[k];
    }
}

/* What every chunk operation needs of the dataset: chunked, fixed-size elements. */
static int check_kind(const h5fl_dset_t *d)
{
    int rank = H5Sget_simple_extent_ndims(d->space);
    hsize_t chunk[H5S_MAX_RANK];
    if (chunk_shape(d, rank, chunk) != 0)
        return -1;
    if (d->vstr || d->blob) {
        h5fl_err("dataset '%s': h5flow_log has no chunk bytes for datatypes with variable-length parts (native "
                 "HDF5 stores heap references in them); read and write it with H5Dread/H5Dwrite",
                 d->o.path);
        return -1;
    }
    return 0;
}

/* The chunk view of d, made or remade for its current extent and writes. */
static h5fl_cview_t *cview_get(h5fl_dset_t *d)
{
    if (check_kind(d) != 0 || h5fl_ix_ready(d) != 0)
        return NULL;
    int rank = H5Sget_simple_extent_ndims(d->space);
    hsize_t cur[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(d->space, cur, NULL);
    h5fl_cview_t *cv = d->ix->cview;
    if (cv && cv->rank == rank && !memcmp(cv->cur, cur, sizeof(hsize_t) * (size_t)rank))
        return cv;
    h5fl_cview_free(cv);
    d->ix->cview = NULL;
    if (!(cv = calloc(1, sizeof *cv))) {
        h5fl_err("out of memory");
        return NULL;
    }
    cv->rank = rank;
    memcpy(cv->cur, cur, sizeof cur);
    chunk_shape(d, rank, cv->chunk);
    h5fl_chunk_round(d, rank, cur, cv->vdims);
    bool same = true;
    cv->celems = 1;
    for (int k = 0; k < rank; k++) {
        cv->nch[k] = cv->vdims[k] / cv->chunk[k];
        same = same && cv->vdims[k] == cur[k];
        if (cv->chunk[k] > UINT64_MAX / cv->celems / (d->esize ? d->esize : 1)) {
            h5fl_err("dataset '%s': its chunks are too large to address", d->o.path);
            free(cv);
            return NULL;
        }
        cv->celems *= cv->chunk[k];
    }
    if (same) { /* no edge chunk reaches past the extent: the dataset's own index is the view */
        cv->ix = d->ix;
    } else {
        if (h5fl_ix_build_dims(d, cv->vdims, &cv->ix) != 0) {
            free(cv);
            return NULL;
        }
        cv->own = true;
        if (cv->ix->base) { /* restructured: walk the shards in the view's linear order */
            memcpy(cv->ix->base->cur, cv->vdims, sizeof cv->vdims);
            cv->ix->base->cur_space = d->space;
        }
    }
    d->ix->cview = cv;
    return cv;
}

/* ---------------------------------------------------------------- chunk coordinates */
/* The rows of the chunk with grid index `lin`: each call gets a run of the last dimension as (first
 * element in the view's linear order, length, position of its first element in the chunk). */
typedef int (*row_fn)(void *ctx, uint64_t start, uint64_t len, uint64_t boxpos);

static void grid_coords(const h5fl_cview_t *cv, uint64_t lin, hsize_t *off)
{
    for (int k = cv->rank - 1; k >= 0; k--) {
        off[k] = (lin % cv->nch[k]) * cv->chunk[k];
        lin /= cv->nch[k];
    }
}

static int box_rows(const h5fl_cview_t *cv, uint64_t lin, row_fn fn, void *ctx)
{
    int rank = cv->rank, last = rank - 1;
    hsize_t off[H5S_MAX_RANK], idx[H5S_MAX_RANK] = {0};
    uint64_t stride[H5S_MAX_RANK];
    grid_coords(cv, lin, off);
    stride[last] = 1;
    for (int k = last - 1; k >= 0; k--)
        stride[k] = stride[k + 1] * cv->vdims[k + 1];
    uint64_t rowlen = cv->chunk[last], boxpos = 0;
    for (;;) {
        uint64_t start = off[last];
        for (int k = 0; k < last; k++)
            start += (off[k] + idx[k]) * stride[k];
        int rc = fn(ctx, start, rowlen, boxpos);
        if (rc != 0)
            return rc;
        boxpos += rowlen;
        int k = last - 1;
        for (; k >= 0; k--) {
            if (++idx[k] < cv->chunk[k])
                break;
            idx[k] = 0;
        }
        if (k < 0)
            return 0;
    }
}

/* The grid index of the chunk at `off`: 0; 1 when `off` is outside the extent (or, with `aligned`, an
 * error); -1 with an error. `aligned`: the offset must be a chunk's first element (H5Dwrite_chunk,
 * H5Dread_chunk, H5Dget_chunk_storage_size); otherwise the chunk holding it (H5Dget_chunk_info_by_coord,
 * as native HDF5). */
static int chunk_lin(const h5fl_dset_t *d, const h5fl_cview_t *cv, const hsize_t *off, bool aligned,
                     uint64_t *lin)
{
    if (!off) {
        h5fl_err("the chunk offset is NULL");
        return -1;
    }
    *lin = 0;
    for (int k = 0; k < cv->rank; k++) {
        if (aligned && off[k] % cv->chunk[k]) {
            h5fl_err("dataset '%s': chunk offset %llu in dimension %d is not a multiple of the chunk size %llu",
                     d->o.path, (unsigned long long)off[k], k, (unsigned long long)cv->chunk[k]);
            return -1;
        }
        if (off[k] >= cv->cur[k]) {
            if (!aligned)
                return 1;
            h5fl_err("dataset '%s': chunk offset %llu in dimension %d lies outside the dataset's extent (%llu); "
                     "extend the dataset first (H5Dset_extent)",
                     d->o.path, (unsigned long long)off[k], k, (unsigned long long)cv->cur[k]);
            return -1;
        }
        *lin = *lin * cv->nch[k] + off[k] / cv->chunk[k];
    }
    return 0;
}

/* ---------------------------------------------------------------- what a chunk holds */
typedef struct written_ctx {
    const h5fl_map_t *m;
} written_ctx_t;

static int row_written(void *vctx, uint64_t start, uint64_t len, uint64_t boxpos)
{
    (void)boxpos;
    const h5fl_map_t *m = ((written_ctx_t *)vctx)->m;
    for (size_t k = h5fl_map_find(m, start); k < m->n && m->ext[k].start < start + len; k++)
        if (m->ext[k].log != H5FL_FILL_LOG)
            return 1;
    return 0;
}

/* Whether the chunk `lin` holds written data (1), or not (0). */
static int chunk_written(const h5fl_dset_t *d, const h5fl_cview_t *cv, uint64_t lin)
{
    H5D_alloc_time_t at = H5D_ALLOC_TIME_DEFAULT;
    if (H5Pget_alloc_time(d->dcpl, &at) >= 0 && at == H5D_ALLOC_TIME_EARLY)
        return 1; /* native HDF5 allocates every chunk at creation (filled with the fill value) */
    if (cv->ix->base) { /* restructured: the shards hold every element of their extent */
        hsize_t off[H5S_MAX_RANK];
        grid_coords(cv, lin, off);
        bool in = true;
        for (int k = 0; k < cv->rank; k++)
            in = in && off[k] < cv->ix->base->lay.dims[k];
        if (in)
            return 1;
    }
    written_ctx_t w = {&cv->ix->map};
    return box_rows(cv, lin, row_written, &w);
}

typedef struct lin_vec {
    uint64_t *v;
    size_t n, cap;
} lin_vec_t;

static int lv_push(lin_vec_t *l, uint64_t lin)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? 2 * l->cap : 64;
        uint64_t *nv = nc <= SIZE_MAX / sizeof *nv ? realloc(l->v, nc * sizeof *nv) : NULL;
        if (!nv) {
            h5fl_err("out of memory listing chunks");
            return -1;
        }
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = lin;
    return 0;
}

static int u64_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The chunks an extent [pos, end) of the view's linear order touches. A row covered whole touches every
 * chunk of its band of rows (the rows that share their chunk coordinates), so the rest of the band is
 * skipped: the work follows the chunks found, not the elements. */
static int extent_chunks(const h5fl_cview_t *cv, uint64_t pos, uint64_t end, lin_vec_t *out)
{
    int last = cv->rank - 1;
    uint64_t L = cv->vdims[last];
    while (pos < end) {
        uint64_t row = pos / L, col = pos % L, rowend = (row + 1) * L < end ? (row + 1) * L : end;
        uint64_t base = 0, r = row, band = 1; /* band: rows left in this row's band (dimension last-1) */
        hsize_t q[H5S_MAX_RANK];
        for (int k = last - 1; k >= 0; k--) {
            uint64_t c = r % cv->vdims[k];
            r /= cv->vdims[k];
            q[k] = c / cv->chunk[k];
            if (k == last - 1)
                band = cv->chunk[k] - c % cv->chunk[k];
        }
        for (int k = 0; k < last; k++)
            base = base * cv->nch[k] + q[k];
        base *= cv->nch[last];
        for (uint64_t c = col / cv->chunk[last]; c <= (rowend - row * L - 1) / cv->chunk[last]; c++)
            if (lv_push(out, base + c) != 0)
                return -1;
        bool whole = col == 0 && rowend == (row + 1) * L;
        pos = whole && last > 0 ? ((row + band) * L < end ? (row + band) * L : end) : rowend;
    }
    return 0;
}

static int cview_list(const h5fl_dset_t *d, h5fl_cview_t *cv)
{
    if (cv->listed)
        return 0;
    lin_vec_t l = {0};
    uint64_t total = 1, nchunks = 1;
    for (int k = 0; k < cv->rank; k++) {
        total *= cv->vdims[k];
        nchunks *= cv->nch[k];
    }
    H5D_alloc_time_t at = H5D_ALLOC_TIME_DEFAULT;
    bool all = H5Pget_alloc_time(d->dcpl, &at) >= 0 && at == H5D_ALLOC_TIME_EARLY;
    int rc = 0;
    if (all || cv->ix->base) { /* every chunk (early allocation), or those of the restructured extent */
        for (uint64_t lin = 0; rc == 0 && lin < nchunks; lin++) {
            int w = chunk_written(d, cv, lin);
            rc = w < 0 ? -1 : w ? lv_push(&l, lin) : 0;
        }
    } else {
        const h5fl_map_t *m = &cv->ix->map;
        for (size_t k = 0; rc == 0 && k < m->n && m->ext[k].start < total; k++)
            if (m->ext[k].log != H5FL_FILL_LOG) {
                uint64_t e = m->ext[k].start + m->ext[k].len;
                rc = extent_chunks(cv, m->ext[k].start, e < total ? e : total, &l);
            }
    }
    if (rc != 0) {
        free(l.v);
        return -1;
    }
    qsort(l.v, l.n, sizeof *l.v, u64_cmp);
    size_t n = 0;
    for (size_t i = 0; i < l.n; i++)
        if (n == 0 || l.v[i] != l.v[n - 1])
            l.v[n++] = l.v[i];
    cv->lin = l.v;
    cv->n = n;
    size_t cap = n ? n : 1;
    cv->size = calloc(cap, sizeof *cv->size);
    cv->mask = calloc(cap, sizeof *cv->mask);
    cv->known = calloc(cap, 1);
    if (!cv->size || !cv->mask || !cv->known) {
        h5fl_err("out of memory listing the chunks of '%s'", d->o.path);
        return -1;
    }
    cv->listed = true;
    return 0;
}

/* Whether any chunk holds written data (without listing them). */
static bool any_written(const h5fl_dset_t *d, const h5fl_cview_t *cv)
{
    H5D_alloc_time_t at = H5D_ALLOC_TIME_DEFAULT;
    if ((H5Pget_alloc_time(d->dcpl, &at) >= 0 && at == H5D_ALLOC_TIME_EARLY) || cv->ix->base)
        return true;
    uint64_t total = 1;
    for (int k = 0; k < cv->rank; k++)
        total *= cv->vdims[k];
    const h5fl_map_t *m = &cv->ix->map;
    for (size_t k = 0; k < m->n && m->ext[k].start < total; k++)
        if (m->ext[k].log != H5FL_FILL_LOG)
            return true;
    return false;
}

/* The single write that holds the whole chunk, newest everywhere in it, in the chunk's element order. */
typedef struct single_ctx {
    const h5fl_dset_t *d;
    const h5fl_map_t *m;
    uint32_t log;
    uint32_t rec;
    bool first;
} single_ctx_t;

static int row_single(void *vctx, uint64_t start, uint64_t len, uint64_t boxpos)
{
    single_ctx_t *c = vctx;
    const h5fl_map_t *m = c->m;
    uint64_t pos = start, end = start + len, es = c->d->esize;
    for (size_t k = h5fl_map_find(m, start); pos < end; k++) {
        if (k >= m->n || m->ext[k].start > pos || m->ext[k].log == H5FL_FILL_LOG)
            return 1; /* a gap (never written) or a fill */
        const h5fl_extent_t *e = &m->ext[k];
        if (c->first) {
            c->log = e->log;
            c->rec = e->rec;
            c->first = false;
        } else if (e->log != c->log) {
            return 1;
        }
        if (e->loff + (pos - e->start) * es != (boxpos + (pos - start)) * es)
            return 1; /* the write's elements are in another order */
        pos = e->start + e->len < end ? e->start + e->len : end;
    }
    return 0;
}

/* Gather the chunk's elements (in the view's index) into the context's buffer (a gather_ctx_t). */
static int row_gather(void *vctx, uint64_t start, uint64_t len, uint64_t boxpos)
{
    (void)boxpos;
    return h5fl_gather_seq(vctx, start, (size_t)len) != 0 ? -1 : 0;
}

/* Run fn with the view's index standing in for the dataset's (h5fl_gather_seq and h5fl_verify_rec read
 * d->ix; no other code runs meanwhile: HDF5 holds its lock around the callback). */
static int with_view_index(h5fl_dset_t *d, h5fl_cview_t *cv, uint64_t lin, row_fn fn, void *ctx)
{
    h5fl_index_t *mine = d->ix;
    d->ix = cv->ix;
    int rc = box_rows(cv, lin, fn, ctx);
    d->ix = mine;
    return rc;
}

static int verify_in_view(h5fl_dset_t *d, h5fl_cview_t *cv, uint32_t rec)
{
    if (rec == H5FL_NO_REC || !d->o.file->verify || cv->ix->recs[rec].checked)
        return 0;
    h5fl_index_t *mine = d->ix;
    d->ix = cv->ix;
    int rc = h5fl_verify_rec(d, rec);
    d->ix = mine;
    return rc;
}

/* The bytes of the written chunk `lin` (pointing into the view: valid until its next change), their
 * number and the filter mask. */
static int chunk_bytes(h5fl_dset_t *d, h5fl_cview_t *cv, uint64_t lin, const uint8_t **bytes, size_t *n,
                       uint32_t *mask)
{
    if (d->filtered) {
        single_ctx_t s = {d, &cv->ix->map, 0, H5FL_NO_REC, true};
        if (box_rows(cv, lin, row_single, &s) == 0 && !s.first && s.log < cv->ix->nlogs &&
            cv->ix->logs[s.log].filtered && cv->ix->logs[s.log].raw == cv->celems * d->esize) {
            const h5fl_log_t *l = &cv->ix->logs[s.log], *src = &cv->ix->logs[l->src];
            if (l->foff > src->mapsize || l->flen > src->mapsize - l->foff) {
                h5fl_err("dataset '%s': data log %s is shorter (%zu bytes) than its index says (%llu)", d->o.path,
                         src->path, src->mapsize, (unsigned long long)(l->foff + l->flen));
                return -1;
            }
            if (verify_in_view(d, cv, s.rec) != 0)
                return -1;
            *bytes = src->map + l->foff;
            *n = (size_t)l->flen;
            *mask = l->fmask;
            return 0;
        }
    }
    if (!cv->bvalid || cv->blin != lin) {
        cv->bvalid = false;
        size_t raw = (size_t)(cv->celems * d->esize), cap = raw ? raw : 1;
        if (cv->bbuf)
            H5free_memory(cv->bbuf);
        if (!(cv->bbuf = H5allocate_memory(cap, false))) {
            h5fl_err("out of memory building a chunk of %zu bytes", raw);
            return -1;
        }
        gather_ctx_t g = {d, cv->bbuf};
        if (with_view_index(d, cv, lin, row_gather, &g) != 0)
            return -1;
        size_t len = raw;
        unsigned m = 0;
        if (d->filtered &&
            h5fl_filter_run(d->dcpl, false, &m, &cv->bbuf, &len, &cap, cv->celems, d->o.path) != 0)
            return -1;
        cv->blen = len;
        cv->bmask = m;
        cv->blin = lin;
        cv->bvalid = true;
    }
    *bytes = cv->bbuf;
    *n = cv->blen;
    *mask = cv->bmask;
    return 0;
}

/* Size and mask of the written chunk `lin` (computed once per view). */
static int chunk_info(h5fl_dset_t *d, h5fl_cview_t *cv, uint64_t lin, hsize_t *size, uint32_t *mask)
{
    size_t i = cv->n;
    if (cv->listed) { /* ascending: binary search */
        size_t lo = 0, hi = cv->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (cv->lin[mid] < lin)
                lo = mid + 1;
            else
                hi = mid;
        }
        i = lo < cv->n && cv->lin[lo] == lin ? lo : cv->n;
        if (i < cv->n && cv->known[i]) {
            *size = cv->size[i];
            *mask = cv->mask[i];
            return 0;
        }
    }
    if (!d->filtered) {
        *size = cv->celems * d->esize;
        *mask = 0;
    } else {
        const uint8_t *b;
        size_t n;
        if (chunk_bytes(d, cv, lin, &b, &n, mask) != 0)
            return -1;
        *size = n;
    }
    if (i < cv->n) {
        cv->size[i] = *size;
        cv->mask[i] = *mask;
        cv->known[i] = 1;
    }
    return 0;
}

static int not_allocated(const h5fl_dset_t *d, const hsize_t *off, int rank)
{
    char where[256] = "";
    size_t p = 0;
    for (int k = 0; k < rank && p < sizeof where - 24; k++)
        p += (size_t)snprintf(where + p, sizeof where - p, "%s%llu", k ? ", " : "", (unsigned long long)off[k]);
    h5fl_err("dataset '%s': the chunk at (%s) was never written: chunk storage is not allocated", d->o.path,
             where);
    return -1;
}

/* ---------------------------------------------------------------- the operations */
static int op_write(h5fl_dset_t *d, const H5VL_native_dataset_chunk_write_t *a)
{
    if (!h5fl_writable(d->o.file) || check_kind(d) != 0)
        return -1;
    int rank = H5Sget_simple_extent_ndims(d->space);
    hsize_t cur[H5S_MAX_RANK], chunk[H5S_MAX_RANK], rdims[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(d->space, cur, NULL);
    chunk_shape(d, rank, chunk);
    uint64_t celems = 1;
    for (int k = 0; k < rank; k++) {
        if (!a->offset || a->offset[k] % chunk[k] || a->offset[k] >= cur[k]) {
            h5fl_cview_t tmp = {.rank = rank};
            memcpy(tmp.cur, cur, sizeof cur);
            memcpy(tmp.chunk, chunk, sizeof chunk);
            uint64_t lin;
            chunk_lin(d, &tmp, a->offset, true, &lin); /* records the message */
            return -1;
        }
        /* the record's extent holds the whole box: an edge chunk's elements past the extent are kept */
        rdims[k] = a->offset[k] + chunk[k] > cur[k] ? a->offset[k] + chunk[k] : cur[k];
        celems *= chunk[k];
    }
    uint64_t cbytes = celems * d->esize;
    if (!a->buf || a->size == 0) {
        h5fl_err("dataset '%s': a direct chunk write needs a buffer and a size above 0", d->o.path);
        return -1;
    }
    if (!d->filtered && a->size != cbytes) {
        h5fl_err("dataset '%s' has no filters: a direct chunk write must give the chunk's %llu bytes (%llu "
                 "elements of %zu bytes), not %u",
                 d->o.path, (unsigned long long)cbytes, (unsigned long long)celems, d->esize, a->size);
        return -1;
    }
    hsize_t start[H5S_MAX_RANK];
    memcpy(start, a->offset, sizeof(hsize_t) * (size_t)rank);
    hid_t fsel = H5Screate_simple(rank, rdims, NULL);
    if (fsel < 0 || H5Sselect_hyperslab(fsel, H5S_SELECT_SET, start, NULL, chunk, NULL) < 0) {
        h5fl_err("dataset '%s': cannot select the chunk's box", d->o.path);
        if (fsel >= 0)
            H5Sclose(fsel);
        return -1;
    }
    int rc = -1;
    if (!d->w && h5fl_writer_open(d) != 0)
        goto done;
    uint64_t data_off = d->w->dend + d->w->dlen;
    if (d->filtered) { /* the caller's bytes as they are, with the caller's mask; decoded when read */
        if (h5fl_writer_append_data(d->w, a->buf, a->size) == 0)
            rc = h5fl_dset_append_record_f(d, fsel, data_off, a->size, H5FL_REC_FILTER, cbytes, a->filters, NULL);
    } else { /* a plain write of the box (native ignores the mask of a dataset without filters) */
        h5fl_stats_arm(d, cbytes);
        if (h5fl_writer_append_data(d->w, a->buf, a->size) == 0)
            rc = h5fl_dset_append_record(d, fsel, data_off, cbytes, 0, a->buf);
    }
done:
    H5Sclose(fsel);
    return rc;
}

static int op_read(h5fl_dset_t *d, H5VL_native_dataset_chunk_read_t *a)
{
    h5fl_cview_t *cv = cview_get(d);
    uint64_t lin;
    if (!cv || chunk_lin(d, cv, a->offset, true, &lin) != 0)
        return -1;
    if (!a->buf) {
        h5fl_err("the read buffer is NULL");
        return -1;
    }
    int w = chunk_written(d, cv, lin);
    if (w < 0)
        return -1;
    if (!w)
        return not_allocated(d, a->offset, cv->rank);
    const uint8_t *b;
    size_t n;
    uint32_t mask;
    if (chunk_bytes(d, cv, lin, &b, &n, &mask) != 0)
        return -1;
    memcpy(a->buf, b, n);
    a->filters = mask;
    return 0;
}

static int op_storage_size(h5fl_dset_t *d, H5VL_native_dataset_get_chunk_storage_size_t *a)
{
    h5fl_cview_t *cv = cview_get(d);
    uint64_t lin;
    if (!cv || chunk_lin(d, cv, a->offset, true, &lin) != 0)
        return -1;
    int w = chunk_written(d, cv, lin);
    if (w < 0)
        return -1;
    uint32_t mask;
    if (w)
        return chunk_info(d, cv, lin, a->size, &mask);
    if (any_written(d, cv)) /* as native HDF5: an error once the dataset has storage, 0 before */
        return not_allocated(d, a->offset, cv->rank);
    *a->size = 0;
    return 0;
}

static int op_num_chunks(h5fl_dset_t *d, H5VL_native_dataset_get_num_chunks_t *a)
{
    h5fl_cview_t *cv = cview_get(d);
    if (!cv || cview_list(d, cv) != 0)
        return -1;
    *a->nchunks = cv->n;
    return 0;
}

static int op_info_by_idx(h5fl_dset_t *d, H5VL_native_dataset_get_chunk_info_by_idx_t *a)
{
    h5fl_cview_t *cv = cview_get(d);
    if (!cv || cview_list(d, cv) != 0)
        return -1;
    if (a->chk_index >= cv->n) {
        h5fl_err("dataset '%s': chunk index %llu is out of range (%zu chunks hold written data)", d->o.path,
                 (unsigned long long)a->chk_index, cv->n);
        return -1;
    }
    uint64_t lin = cv->lin[a->chk_index];
    hsize_t size;
    uint32_t mask;
    if (chunk_info(d, cv, lin, &size, &mask) != 0)
        return -1;
    if (a->offset)
        grid_coords(cv, lin, a->offset);
    if (a->filter_mask)
        *a->filter_mask = mask;
    if (a->addr) /* a container has no byte offset of a chunk in one file: never invent one */
        *a->addr = HADDR_UNDEF;
    if (a->size)
        *a->size = size;
    return 0;
}

static int op_info_by_coord(h5fl_dset_t *d, H5VL_native_dataset_get_chunk_info_by_coord_t *a)
{
    h5fl_cview_t *cv = cview_get(d);
    uint64_t lin;
    if (!cv)
        return -1;
    if (a->addr)
        *a->addr = HADDR_UNDEF;
    if (a->size)
        *a->size = 0;
    int r = chunk_lin(d, cv, a->offset, false, &lin);
    if (r != 0)
        return r < 0 ? -1 : 0; /* outside the extent: not found, as native HDF5 */
    int w = chunk_written(d, cv, lin);
    if (w <= 0)
        return w;
    hsize_t size;
    uint32_t mask;
    if (chunk_info(d, cv, lin, &size, &mask) != 0)
        return -1;
    if (a->filter_mask)
        *a->filter_mask = mask;
    if (a->size)
        *a->size = size;
    return 0;
}

/* The callback may do anything (read chunks, write, close the dataset's other handles): the chunks are
 * described before the first call, and nothing of the view is used while it runs. */
static herr_t op_iter(h5fl_dset_t *d, H5D_chunk_iter_op_t op, void *op_data)
{
    if (!op) {
        h5fl_err("the chunk iteration callback is NULL");
        return -1;
    }
    h5fl_cview_t *cv = cview_get(d);
    if (!cv || cview_list(d, cv) != 0)
        return -1;
    size_t n = cv->n;
    int rank = cv->rank;
    hsize_t *offs = malloc((n ? n : 1) * sizeof(hsize_t) * (size_t)rank), *sizes = malloc((n ? n : 1) * sizeof *sizes);
    uint32_t *masks = malloc((n ? n : 1) * sizeof *masks);
    herr_t rc = -1;
    if (!offs || !sizes || !masks) {
        h5fl_err("out of memory iterating over the chunks of '%s'", d->o.path);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        grid_coords(cv, cv->lin[i], offs + i * (size_t)rank);
        if (chunk_info(d, cv, cv->lin[i], &sizes[i], &masks[i]) != 0)
            goto done;
    }
    rc = 0;
    for (size_t i = 0; i < n; i++) { /* a positive value stops the iteration: success (0), as native */
        int r = op(offs + i * (size_t)rank, masks[i], HADDR_UNDEF, sizes[i], op_data);
        if (r < 0) {
            h5fl_err("dataset '%s': the chunk iteration callback failed (returned %d)", d->o.path, r);
            rc = -1;
        }
        if (r != 0)
            break;
    }
done:
    free(offs);
    free(sizes);
    free(masks);
    return rc;
}

herr_t h5fl_dataset_optional(void *obj, H5VL_optional_args_t *args, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_dset_t *d = obj;
    H5VL_native_dataset_optional_args_t *a = args->args;
    herr_t rc = -1;
    switch (args->op_type) {
        case H5VL_NATIVE_DATASET_CHUNK_WRITE:
            rc = op_write(d, &a->chunk_write);
            break;
        case H5VL_NATIVE_DATASET_CHUNK_READ:
            rc = op_read(d, &a->chunk_read);
            break;
        case H5VL_NATIVE_DATASET_GET_CHUNK_STORAGE_SIZE:
            rc = op_storage_size(d, &a->get_chunk_storage_size);
            break;
        case H5VL_NATIVE_DATASET_GET_NUM_CHUNKS:
            rc = op_num_chunks(d, &a->get_num_chunks);
            break;
        case H5VL_NATIVE_DATASET_GET_CHUNK_INFO_BY_IDX:
            rc = op_info_by_idx(d, &a->get_chunk_info_by_idx);
            break;
        case H5VL_NATIVE_DATASET_GET_CHUNK_INFO_BY_COORD:
            rc = op_info_by_coord(d, &a->get_chunk_info_by_coord);
            break;
        case H5VL_NATIVE_DATASET_CHUNK_ITER:
            rc = op_iter(d, a->chunk_iter.op, a->chunk_iter.op_data);
            break;
        default:
            h5fl_err("dataset operation %d is native HDF5 only (a file-format internal h5flow_log does not have)",
                     args->op_type);
    }
    if (rc < 0)
        h5fl_err_push(__func__);
    return rc;
}

uint64_t h5fl_dataset_opt_flags(int op_type)
{
    switch (op_type) {
        case H5VL_NATIVE_DATASET_CHUNK_WRITE:
            return H5VL_OPT_QUERY_SUPPORTED | H5VL_OPT_QUERY_WRITE_DATA;
        case H5VL_NATIVE_DATASET_CHUNK_READ:
            return H5VL_OPT_QUERY_SUPPORTED | H5VL_OPT_QUERY_READ_DATA;
        case H5VL_NATIVE_DATASET_GET_CHUNK_STORAGE_SIZE:
        case H5VL_NATIVE_DATASET_GET_NUM_CHUNKS:
        case H5VL_NATIVE_DATASET_GET_CHUNK_INFO_BY_IDX:
        case H5VL_NATIVE_DATASET_GET_CHUNK_INFO_BY_COORD:
        case H5VL_NATIVE_DATASET_CHUNK_ITER:
            return H5VL_OPT_QUERY_SUPPORTED | H5VL_OPT_QUERY_QUERY_METADATA;
        default:
            return 0;
    }
}
