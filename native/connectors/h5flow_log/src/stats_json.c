/* h5flow_log — the statistics query h5flow_log_stats_json (docs/FORMAT.md, "Statistics"): the records of
 * every writer's @stats sidecar that still describe visible data, statistics computed from the data
 * (stats_acc.c) for the rest and for restructured datasets, as JSON. */
#include "stats_acc.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the query (h5flow_log_stats_json) */

typedef struct jbuf {
    char *p;
    size_t len, cap;
    bool oom;
} jbuf_t;

static void jput(jbuf_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jput(jbuf_t *j, const char *fmt, ...)
{
    if (j->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(j->p ? j->p + j->len : NULL, j->p ? j->cap - j->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            j->oom = true;
            return;
        }
        if (j->p && (size_t)n < j->cap - j->len) {
            j->len += (size_t)n;
            return;
        }
        size_t nc = j->cap ? j->cap * 2 : 4096;
        while (nc < j->len + (size_t)n + 1)
            nc *= 2;
        char *np = realloc(j->p, nc);
        if (!np) {
            j->oom = true;
            return;
        }
        j->p = np;
        j->cap = nc;
    }
}

static void jstr(jbuf_t *j, const char *s, size_t n)
{
    jput(j, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            jput(j, "\\%c", c);
        else if (c < 0x20 || c >= 0x7F)
            jput(j, "\\u%04x", c); /* bytes above ASCII as code points: keys are meant to be ASCII */
        else
            jput(j, "%c", c);
    }
    jput(j, "\"");
}

static void jnum(jbuf_t *j, double v)
{
    if (v != v)
        jput(j, "NaN");
    else if (isinf(v))
        jput(j, v > 0 ? "Infinity" : "-Infinity");
    else
        jput(j, "%.17g", v);
}

static void jval(jbuf_t *j, int kind, sval_t v)
{
    if (kind == K_INT)
        jput(j, "%" PRId64, v.i);
    else if (kind == K_UINT)
        jput(j, "%" PRIu64, v.u);
    else
        jnum(j, v.f);
}

static void jcoords(jbuf_t *j, uint64_t lin, unsigned rank, const uint64_t *dims)
{
    if (lin == UINT64_MAX) {
        jput(j, "null");
        return;
    }
    uint64_t c[H5S_MAX_RANK];
    for (int k = (int)rank - 1; k >= 0; k--) {
        uint64_t dk = dims[k] ? dims[k] : 1;
        c[k] = k == 0 ? lin : lin % dk;
        lin /= dk;
    }
    jput(j, "[");
    for (unsigned k = 0; k < rank; k++)
        jput(j, "%s%" PRIu64, k ? "," : "", c[k]);
    jput(j, "]");
}

typedef struct srec {
    uint64_t epoch, order, dend;
    uint32_t dcrc;
    const uint8_t *p;
    uint32_t len;
} srec_t;

static int srec_cmp(const void *a, const void *b)
{
    const srec_t *x = a, *y = b;
    if (x->epoch != y->epoch)
        return x->epoch < y->epoch ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int ext_cmp(const void *a, const void *b)
{
    const h5fl_extent_t *x = a, *y = b;
    if (x->seq.epoch != y->seq.epoch)
        return x->seq.epoch < y->seq.epoch ? -1 : 1;
    if (x->seq.order != y->seq.order)
        return x->seq.order < y->seq.order ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

typedef struct sfiles {
    void **bufs;
    size_t nbufs;
    srec_t *v;
    size_t n, cap;
} sfiles_t;

/* Every complete, intact record of every @stats.* sidecar of the dataset directory (a torn or damaged
 * record ends what is read of its file: the writes after it are computed from the data). */
static int load_sidecars(const char *dir, sfiles_t *sf)
{
    DIR *dd = opendir(dir);
    if (!dd) {
        h5fl_err("cannot list %s: %s", dir, strerror(errno));
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(dd))) {
        if (strncmp(de->d_name, H5FL_STATS_PREFIX, sizeof H5FL_STATS_PREFIX - 1) != 0)
            continue;
        char *p = h5fl_join(dir, de->d_name);
        void *b = NULL;
        size_t l = 0;
        if (!p || h5fl_read_file(p, &b, &l) != 0) {
            free(p);
            h5fl_err_clear(); /* vanished or unreadable: its writes are computed from the data */
            continue;
        }
        free(p);
        void **nb = realloc(sf->bufs, (sf->nbufs + 1) * sizeof *nb);
        if (!nb) {
            free(b);
            rc = -1;
            break;
        }
        sf->bufs = nb;
        sf->bufs[sf->nbufs++] = b;
        size_t v = h5fl_stats_valid_prefix(b, l), pos = 0;
        while (pos < v) {
            const uint8_t *q = (const uint8_t *)b + pos;
            if (sf->n == sf->cap) {
                size_t nc = sf->cap ? sf->cap * 2 : 64;
                srec_t *nv = realloc(sf->v, nc * sizeof *nv);
                if (!nv) {
                    rc = -1;
                    break;
                }
                sf->v = nv;
                sf->cap = nc;
            }
            srec_t *r = &sf->v[sf->n++];
            r->epoch = h5fl_get_u64(q + 8);
            r->order = h5fl_get_u64(q + 16);
            r->dend = h5fl_get_u64(q + 24);
            r->dcrc = h5fl_get_u32(q + 32);
            r->p = q;
            r->len = h5fl_get_u32(q + 4);
            pos += r->len;
        }
    }
    closedir(dd);
    if (rc != 0)
        h5fl_err("out of memory reading the statistics sidecars of %s", dir);
    else if (sf->n)
        qsort(sf->v, sf->n, sizeof *sf->v, srec_cmp);
    return rc;
}

static void sfiles_free(sfiles_t *sf)
{
    for (size_t i = 0; i < sf->nbufs; i++)
        free(sf->bufs[i]);
    free(sf->bufs);
    free(sf->v);
}

/* The record's fixed fields are consistent with its length (rank, bins, UDF section). */
static bool srec_sane(const srec_t *r)
{
    uint32_t rank = h5fl_get_u32(r->p + 112), nb = h5fl_get_u32(r->p + 116), ul = h5fl_get_u32(r->p + 124);
    if (rank > H5S_MAX_RANK || (nb != 0 && nb != H5FL_STATS_BINS))
        return false;
    return (uint64_t)SREC_HDR + 8ull * rank + 8ull * nb + ul + 4 == r->len;
}

/* Statistics of the visible elements of one write, computed from its data (verified like any read). */
static int from_data(h5fl_dset_t *d, int kind, size_t esize, const h5fl_extent_t *e, size_t ne, acc_t *a)
{
    a->kind = kind;
    a->esize = esize;
    const uint64_t chunk = 1u << 20;
    uint8_t *buf = malloc(chunk * esize);
    if (!buf) {
        h5fl_err("out of memory");
        return -1;
    }
    h5fl_bytecount_t bc; /* 1-byte integers: counted (stats_bytes.h), settled before returning */
    if (esize == 1) {
        h5fl_bc_init(&bc);
        a->bc = &bc;
    }
    for (int pass = 0; pass < 2; pass++) {
        uint64_t k = 0;
        for (size_t i = 0; i < ne; i++)
            for (uint64_t off = 0; off < e[i].len; off += chunk) {
                uint64_t n = e[i].len - off < chunk ? e[i].len - off : chunk;
                gather_ctx_t g = {d, buf};
                if (h5fl_gather_seq(&g, e[i].start + off, (size_t)n) != 0) {
                    a->bc = NULL;
                    free(buf);
                    return -1;
                }
                if (pass == 0)
                    h5fl_acc_scan(a, buf, n, k);
                else
                    h5fl_hist_scan(a, buf, n);
                k += n;
            }
        if (pass == 0 && !(a->has_hist = hist_ok(a)))
            break;
        if (pass == 0 && a->bc) { /* the histogram from the counts: no second pass over the data */
            h5fl_hist_scan(a, NULL, 0);
            break;
        }
    }
    h5fl_bytes_settle(a);
    free(buf);
    return 0;
}

static uint64_t ext_pos(const h5fl_extent_t *e, size_t ne, uint64_t k)
{
    for (size_t i = 0; i < ne; i++) {
        if (k < e[i].len)
            return e[i].start + k;
        k -= e[i].len;
    }
    return UINT64_MAX;
}

static const char *kind_name(int kind, size_t esize)
{
    static const char *n[4][9] = {{0}, {0, "int8", "int16", 0, "int32", 0, 0, 0, "int64"},
                                  {0, "uint8", "uint16", 0, "uint32", 0, 0, 0, "uint64"},
                                  {0, 0, 0, 0, "float32", 0, 0, 0, "float64"}};
    return kind > 0 && kind < 4 && esize <= 8 && n[kind][esize] ? n[kind][esize] : "none";
}

/* The statistics keys of a shard: count, nan, min, max, sum, argmin, argmax (coordinates in wdims), hist. */
/* from_record: `a` holds a statistics record's numbers, whose sum is already rounded; otherwise it was
 * computed from data here and an integer sum is exact until acc_sum rounds it once. */
static void emit_acc(jbuf_t *j, int kind, const acc_t *a, uint64_t lmin, uint64_t lmax, unsigned wrank,
                     const uint64_t *wdims, bool from_record)
{
    jput(j, ",\"count\":%" PRIu64 ",\"nan\":%" PRIu64 ",\"min\":", a->n, a->nan);
    if (a->any) jval(j, kind, a->min); else jput(j, "null");
    jput(j, ",\"max\":");
    if (a->any) jval(j, kind, a->max); else jput(j, "null");
    jput(j, ",\"sum\":");
    jnum(j, from_record ? a->sum : acc_sum(a));
    jput(j, ",\"argmin\":");
    jcoords(j, lmin, wrank, wdims);
    jput(j, ",\"argmax\":");
    jcoords(j, lmax, wrank, wdims);
    jput(j, ",\"hist\":");
    if (a->has_hist) {
        jput(j, "{\"lo\":");
        jnum(j, as_double(kind, a->min));
        jput(j, ",\"hi\":");
        jnum(j, as_double(kind, a->max));
        jput(j, ",\"counts\":[");
        for (unsigned k = 0; k < H5FL_STATS_BINS; k++)
            jput(j, "%s%" PRIu64, k ? "," : "", a->hist[k]);
        jput(j, "]}");
    } else {
        jput(j, "null");
    }
}

/* ---- restructured datasets (restructure.c): the shards have no statistics records; their statistics
 * are computed from the shards' visible elements (those no later write covers) at every query. */
#define BASE_ROWS_MAX 65536u /* more shards than this: one row for all of them */
typedef struct base_acc {
    acc_t *a;
    uint64_t *vis, *first, *last;
    bool all; /* one row for every shard */
    int pass;
} base_acc_t;

static int base_acc_fn(void *ctx, const uint8_t *src, uint64_t n, uint64_t shard, uint64_t lin)
{
    base_acc_t *b = ctx;
    if (!src)
        return 0; /* outside the restructured extent: the fill value, no shard's */
    uint64_t s = b->all ? 0 : shard;
    if (b->pass == 0) {
        h5fl_acc_scan(&b->a[s], src, n, lin);
        b->first[s] = b->vis[s] ? b->first[s] : lin;
        b->last[s] = lin + n - 1;
        b->vis[s] += n;
    } else if (b->a[s].has_hist) {
        h5fl_hist_scan(&b->a[s], src, n);
    }
    return 0;
}

/* One row per shard with visible elements (after `sep` earlier rows). */
static int base_json(h5fl_dset_t *d, jbuf_t *j, int kind, size_t esize, int rank, const hsize_t *cd,
                     const uint64_t *cdims, bool sep)
{
    h5fl_base_t *bs = d->ix->base;
    const h5fl_map_t *m = &d->ix->map;
    base_acc_t b = {.all = bs->nchunks > BASE_ROWS_MAX};
    uint64_t rows = b.all ? 1 : bs->nchunks, total = 1;
    for (int k = 0; k < rank; k++)
        total *= cdims[k];
    b.a = calloc(rows ? rows : 1, sizeof *b.a);
    b.vis = calloc(rows ? rows : 1, sizeof *b.vis);
    b.first = calloc(rows ? rows : 1, sizeof *b.first);
    b.last = calloc(rows ? rows : 1, sizeof *b.last);
    int rc = -1;
    if (!b.a || !b.vis || !b.first || !b.last) {
        h5fl_err("out of memory");
        goto done;
    }
    for (uint64_t s = 0; s < rows; s++) {
        b.a[s].kind = kind;
        b.a[s].esize = esize;
    }
    for (b.pass = 0; b.pass < 2; b.pass++) {
        uint64_t pos = 0; /* the gaps between the extents (the map covers later writes and shrinks) */
        for (size_t i = 0; i <= m->n && pos < total; i++) { /* (extents past the extent's end: ignored) */
            uint64_t gend = i < m->n && m->ext[i].start < total ? m->ext[i].start : total;
            if (gend > pos && h5fl_base_walk(d, bs, cd, pos, gend, base_acc_fn, &b) != 0)
                goto done;
            if (i < m->n)
                pos = m->ext[i].start + m->ext[i].len;
        }
        for (uint64_t s = 0; b.pass == 0 && s < rows; s++)
            b.a[s].has_hist = hist_ok(&b.a[s]);
        if (kind == K_NONE)
            break;
    }
    for (uint64_t s = 0; s < rows; s++) {
        if (!b.vis[s])
            continue;
        jput(j, "%s{\"layer\":\"restructured\",\"generation\":%" PRIu64 ",\"epoch\":%" PRIu64
                ",\"writer\":null,\"write\":%s%" PRIu64 ",\"source\":\"%s\",\"visible\":%" PRIu64
                ",\"written\":null,\"first\":",
             sep ? "," : "", bs->lay.gen, bs->lay.epoch, b.all ? "null,\"shards\":" : "", b.all ? bs->nchunks : s,
             kind == K_NONE ? "none" : "data", b.vis[s]);
        sep = true;
        jcoords(j, b.first[s], (unsigned)rank, cdims);
        jput(j, ",\"last\":");
        jcoords(j, b.last[s], (unsigned)rank, cdims);
        if (kind != K_NONE)
            emit_acc(j, kind, &b.a[s], b.a[s].any ? b.a[s].kmin : UINT64_MAX, b.a[s].any ? b.a[s].kmax : UINT64_MAX,
                     (unsigned)rank, cdims, false);
        jput(j, ",\"udf_status\":\"none\"}");
    }
    rc = 0;
done:
    free(b.a);
    free(b.vis);
    free(b.first);
    free(b.last);
    return rc;
}

static int stats_json(h5fl_dset_t *d, jbuf_t *j)
{
    if (d->w && h5fl_writer_flush(d->w, false) != 0) /* this process's own records, on disk first */
        return -1;
    if (h5fl_ix_ready(d) != 0)
        return -1;
    size_t esize = 0;
    int kind = d->vstr || d->blob ? K_NONE : h5fl_kind_of(d->type, &esize);
    int rank = H5Sget_simple_extent_ndims(d->space);
    hsize_t cd[H5S_MAX_RANK];
    uint64_t cdims[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(d->space, cd, NULL);
    for (int k = 0; k < rank; k++)
        cdims[k] = cd[k];
    const h5fl_map_t *m = &d->ix->map;
    size_t ne = 0;
    h5fl_extent_t *ev = malloc((m->n ? m->n : 1) * sizeof *ev);
    sfiles_t sf = {0};
    int rc = -1;
    if (!ev) {
        h5fl_err("out of memory");
        goto done;
    }
    uint64_t total = 1; /* the index also holds writes past the extent's end (an edge chunk written
                         * directly, rows before a shrink): only the elements inside it are described */
    for (int k = 0; k < rank; k++)
        total *= cdims[k];
    for (size_t i = 0; i < m->n && m->ext[i].start < total; i++)
        if (m->ext[i].log != H5FL_FILL_LOG) {
            ev[ne] = m->ext[i];
            if (ev[ne].len > total - ev[ne].start)
                ev[ne].len = total - ev[ne].start;
            ne++;
        }
    qsort(ev, ne, sizeof *ev, ext_cmp);
    if (load_sidecars(d->o.dir, &sf) != 0)
        goto done;
    jput(j, "{\"dataset\":");
    jstr(j, d->o.path, strlen(d->o.path));
    jput(j, ",\"dtype\":\"%s\",\"shape\":[", kind_name(kind, esize));
    for (int k = 0; k < rank; k++)
        jput(j, "%s%" PRIu64, k ? "," : "", cdims[k]);
    jput(j, "],\"shards\":[");
    for (size_t i = 0, gi = 0; i < ne; gi++) {
        size_t g = i;
        uint64_t vis = 0, first = UINT64_MAX, last = 0;
        bool one_rec = true;
        for (; i < ne && ev[i].seq.epoch == ev[g].seq.epoch && ev[i].seq.order == ev[g].seq.order; i++) {
            vis += ev[i].len;
            first = ev[i].start < first ? ev[i].start : first;
            last = ev[i].start + ev[i].len - 1 > last ? ev[i].start + ev[i].len - 1 : last;
            one_rec = one_rec && ev[i].rec == ev[g].rec && ev[i].log == ev[g].log;
        }
        size_t gn = i - g;
        /* the statistics record of this write: same sequence number, data log end and data checksum */
        const srec_t *sr = NULL;
        if (one_rec && ev[g].rec != H5FL_NO_REC) {
            const h5fl_crcrec_t *cr = &d->ix->recs[ev[g].rec];
            srec_t key = {.epoch = ev[g].seq.epoch, .order = ev[g].seq.order};
            srec_t *hit = sf.n ? bsearch(&key, sf.v, sf.n, sizeof *sf.v, srec_cmp) : NULL;
            while (hit && hit > sf.v && srec_cmp(hit - 1, &key) == 0)
                hit--;
            for (; hit && hit < sf.v + sf.n && srec_cmp(hit, &key) == 0; hit++)
                if (hit->dend == cr->to && hit->dcrc == cr->crc && srec_sane(hit)) {
                    sr = hit;
                    break;
                }
        }
        uint64_t written = sr ? h5fl_get_u64(sr->p + 40) : 0;
        bool whole = sr && written == vis;
        uint32_t skind = sr ? h5fl_get_u32(sr->p + 36) : 0;
        acc_t a = {0};
        const char *source = "none";
        unsigned wrank = (unsigned)rank;
        uint64_t wdims[H5S_MAX_RANK];
        memcpy(wdims, cdims, sizeof wdims);
        uint64_t lmin = UINT64_MAX, lmax = UINT64_MAX;
        if (whole && (int)(skind & 0xFF) == kind && (skind >> 8) == esize && kind != K_NONE) {
            source = "stats";
            a.kind = kind;
            a.esize = esize;
            a.n = written;
            a.nan = h5fl_get_u64(sr->p + 48);
            a.min.u = h5fl_get_u64(sr->p + 56);
            a.max.u = h5fl_get_u64(sr->p + 64);
            sval_t s = {.u = h5fl_get_u64(sr->p + 72)};
            a.sum = s.f;
            lmin = h5fl_get_u64(sr->p + 80);
            lmax = h5fl_get_u64(sr->p + 88);
            a.any = lmin != UINT64_MAX;
            wrank = h5fl_get_u32(sr->p + 112);
            for (unsigned k = 0; k < wrank; k++)
                wdims[k] = h5fl_get_u64(sr->p + SREC_HDR + 8 * k);
            a.has_hist = h5fl_get_u32(sr->p + 116) == H5FL_STATS_BINS;
            for (unsigned k = 0; a.has_hist && k < H5FL_STATS_BINS; k++)
                a.hist[k] = h5fl_get_u64(sr->p + SREC_HDR + 8 * wrank + 8 * k);
        } else if (kind != K_NONE) {
            source = "data"; /* no record, a torn or damaged one, or the write was partly overwritten */
            if (from_data(d, kind, esize, ev + g, gn, &a) != 0)
                goto done;
            if (a.any) {
                lmin = ext_pos(ev + g, gn, a.kmin);
                lmax = ext_pos(ev + g, gn, a.kmax);
            }
        }
        uint64_t order = ev[g].seq.order;
        jput(j, "%s{\"epoch\":%" PRIu64 ",\"writer\":%" PRIu64 ",\"write\":%" PRIu64 ",\"source\":\"%s\"",
             gi ? "," : "", ev[g].seq.epoch, order & H5FL_WRITER_MAX, order >> 20, source);
        jput(j, ",\"visible\":%" PRIu64 ",\"written\":", vis);
        if (sr)
            jput(j, "%" PRIu64, written);
        else
            jput(j, "null");
        jput(j, ",\"first\":");
        jcoords(j, first, (unsigned)rank, cdims);
        jput(j, ",\"last\":");
        jcoords(j, last, (unsigned)rank, cdims);
        if (strcmp(source, "none") != 0)
            emit_acc(j, kind, &a, lmin, lmax, wrank, wdims, source[0] == 's');
        uint32_t ust = sr ? h5fl_get_u32(sr->p + 120) : UDF_NONE;
        if (ust == UDF_OK || ust == UDF_FAILED) {
            uint32_t rk = h5fl_get_u32(sr->p + 112), nb = h5fl_get_u32(sr->p + 116);
            const uint8_t *u = sr->p + SREC_HDR + 8 * (size_t)rk + 8 * (size_t)nb;
            uint32_t ul = h5fl_get_u32(sr->p + 124);
            /* a partly overwritten write: its function saw values that are no longer all there */
            jput(j, ",\"udf_status\":\"%s\"", ust == UDF_FAILED ? "failed" : whole ? "ok" : "stale");
            if (ust == UDF_FAILED) {
                jput(j, ",\"udf_error\":");
                jstr(j, (const char *)u, ul);
            } else {
                jput(j, ",\"udf\":{");
                uint32_t nk = ul >= 4 ? h5fl_get_u32(u) : 0;
                size_t pos = 4;
                for (uint32_t k = 0; k < nk; k++) {
                    if (pos + 2 > ul)
                        break;
                    size_t kl = (size_t)u[pos] | ((size_t)u[pos + 1] << 8);
                    if (pos + 2 + kl + 8 > ul)
                        break;
                    sval_t v = {.u = h5fl_get_u64(u + pos + 2 + kl)};
                    jput(j, "%s", k ? "," : "");
                    jstr(j, (const char *)u + pos + 2, kl);
                    jput(j, ":");
                    jnum(j, v.f);
                    pos += 2 + kl + 8;
                }
                jput(j, "}");
            }
        } else {
            jput(j, ",\"udf_status\":\"%s\"", sr || kind == K_NONE ? "none" : "unknown");
        }
        jput(j, "}");
    }
    if (d->ix->base && base_json(d, j, kind, esize, rank, cd, cdims, ne > 0) != 0)
        goto done;
    jput(j, "]}");
    if (j->oom) {
        h5fl_err("out of memory formatting the statistics of '%s'", d->o.path);
        goto done;
    }
    rc = 0;
done:
    free(ev);
    sfiles_free(&sf);
    return rc;
}

/* Exported from the plugin for h5flow.stats (ctypes): the statistics of the open dataset `dset` as JSON
 * (docs/FORMAT.md, "Statistics"). Returns 0 and *out (free it with h5flow_log_stats_free), or -1 and *out
 * the error message (free it too). */
__attribute__((visibility("default"))) int h5flow_log_stats_json(hid_t dset, char **out);
__attribute__((visibility("default"))) void h5flow_log_stats_free(char *p);

int h5flow_log_stats_json(hid_t dset, char **out)
{
    h5fl_err_clear();
    *out = NULL;
    jbuf_t j = {0};
    int rc = -1;
    {
        h5fl_dset_t *d = h5fl_container_dset(dset);
        if (!d)
            ;
        else if (d->vds || d->ext) /* no statistics describe its data: never "nothing written" */
            h5fl_err("dataset '%s' has no per-write statistics: its data is %s, not in its logs", d->o.path,
                     d->vds ? "in the sources of a virtual dataset" : "in external files");
        else
            rc = stats_json(d, &j);
    }
    if (rc == 0) {
        *out = j.p;
        return 0;
    }
    free(j.p);
    *out = h5fl_strdup(h5fl_err_msg()[0] ? h5fl_err_msg() : "unknown error");
    h5fl_err_clear();
    return -1;
}

void h5flow_log_stats_free(char *p) { free(p); }
