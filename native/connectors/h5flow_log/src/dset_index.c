/* The merged read index of a dataset: every writer's logs, mapped, merged latest-write-wins; gathering. */
#include "dset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

void h5fl_ix_free(h5fl_index_t *ix)
{
    if (!ix)
        return;
    for (size_t i = 0; i < ix->nlogs; i++) {
        if (ix->logs[i].filtered)
            H5free_memory(ix->logs[i].map); /* the decoded write (filter.c allocates with HDF5) */
        else if (ix->logs[i].map)
            munmap(ix->logs[i].map, ix->logs[i].mapsize);
        if (ix->logs[i].fd >= 0)
            close(ix->logs[i].fd);
        free(ix->logs[i].path);
    }
    free(ix->logs);
    free(ix->recs);
    h5fl_map_free(&ix->map);
    free(ix->pending);
    h5fl_base_free(ix->base);
    h5fl_cview_free(ix->cview);
    free(ix);
}

/* Room for one more entry in ix->logs (doubling: one per filtered write can be many). */
static int logs_reserve(h5fl_index_t *ix)
{
    if (ix->nlogs < ix->caplogs)
        return 0;
    size_t cap = ix->caplogs ? 2 * ix->caplogs : 8;
    h5fl_log_t *nl = cap <= SIZE_MAX / sizeof *nl ? realloc(ix->logs, cap * sizeof *nl) : NULL;
    if (!nl) {
        h5fl_err("out of memory");
        return -1;
    }
    ix->logs = nl;
    ix->caplogs = cap;
    return 0;
}

int h5fl_ix_add_log(h5fl_index_t *ix, const char *path)
{
    if (logs_reserve(ix) != 0)
        return -1;
    h5fl_log_t *l = &ix->logs[ix->nlogs];
    l->path = h5fl_strdup(path);
    l->fd = h5fl_open_file(path, O_RDONLY, 0);
    l->map = NULL;
    l->mapsize = 0;
    l->filtered = false;
    if (!l->path || l->fd < 0) {
        if (!l->path)
            h5fl_err("out of memory");
        free(l->path);
        if (l->fd >= 0)
            close(l->fd);
        return -1;
    }
    return (int)ix->nlogs++;
}

/* A filtered write: bytes [foff, foff+flen) of log `src`, `raw` bytes once decoded (see h5fl_log_t). */
static int ix_add_filtered(h5fl_index_t *ix, uint32_t src, uint64_t foff, uint64_t flen, uint64_t raw,
                           uint32_t fmask)
{
    if (ix->nlogs >= H5FL_FILL_LOG - 1) {
        h5fl_err("too many writes in one dataset to index (%zu)", ix->nlogs);
        return -1;
    }
    if (logs_reserve(ix) != 0)
        return -1;
    char *path = h5fl_strdup(ix->logs[src].path);
    if (!path)
        return -1;
    ix->logs[ix->nlogs] = (h5fl_log_t){.path = path, .fd = -1, .filtered = true, .src = src, .fmask = fmask,
                                       .foff = foff, .flen = flen, .raw = raw};
    return (int)ix->nlogs++;
}

/* The first read that touches a filtered write decodes it whole (and keeps it for the index's life). */
static int log_decode(const h5fl_dset_t *d, h5fl_log_t *l)
{
    const h5fl_log_t *s = &d->ix->logs[l->src];
    if (l->foff > s->mapsize || l->flen > s->mapsize - l->foff || l->flen > SIZE_MAX - 1) {
        h5fl_err("dataset '%s': data log %s is shorter (%zu bytes) than its index says (%llu)", d->o.path,
                 s->path, s->mapsize, (unsigned long long)(l->foff + l->flen));
        return -1;
    }
    size_t n = (size_t)l->flen, cap = n ? n : 1;
    void *buf = H5allocate_memory(cap, false);
    if (!buf) {
        h5fl_err("out of memory decoding %zu filtered bytes", n);
        return -1;
    }
    memcpy(buf, s->map + l->foff, n);
    unsigned mask = l->fmask;
    int st = h5fl_filter_run(d->dcpl, true, &mask, &buf, &n, &cap, l->raw / d->esize, d->o.path);
    if (st == 0 && n != l->raw) {
        h5fl_err("dataset '%s': a filtered write decoded to %zu bytes, its index record says %llu", d->o.path,
                 n, (unsigned long long)l->raw);
        st = -1;
    }
    if (st != 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", h5fl_err_msg() ? h5fl_err_msg() : "decoding failed");
        h5fl_err_clear();
        h5fl_err("%s (bytes %llu..%llu of %s)", msg, (unsigned long long)l->foff,
                 (unsigned long long)(l->foff + l->flen), s->path);
        H5free_memory(buf);
        return -1;
    }
    l->map = buf;
    l->mapsize = n;
    return 0;
}

static int log_map(h5fl_log_t *l, size_t need)
{
    if (need <= l->mapsize)
        return 0;
    struct stat st;
    if (fstat(l->fd, &st) != 0 || (size_t)st.st_size < need) {
        h5fl_err("data log %s is shorter than its index says", l->path);
        return -1;
    }
    if (l->map)
        munmap(l->map, l->mapsize);
    l->map = NULL;
    l->mapsize = 0;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, l->fd, 0);
    if (m == MAP_FAILED) {
        h5fl_err("cannot map data log %s: %s", l->path, strerror(errno));
        return -1;
    }
    l->map = m;
    l->mapsize = (size_t)st.st_size;
    return 0;
}


int h5fl_ev_push(ext_vec_t *e, uint64_t start, uint64_t len, h5fl_seq_t seq, uint32_t log, uint32_t rec,
                 uint64_t loff)
{
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 256;
        h5fl_extent_t *nv = realloc(e->v, cap * sizeof *nv);
        if (!nv) {
            h5fl_err("out of memory");
            return -1;
        }
        e->v = nv;
        e->cap = cap;
    }
    e->v[e->n++] = (h5fl_extent_t){start, len, seq, log, rec, loff};
    return 0;
}

/* Add a run written under extent `odims` to the index of a dataset whose extent is now `ndims`. The run
 * lies within odims (load_log checked it) and its data within the data log, so no sum below wraps. */
static int add_remapped(ext_vec_t *ev, int rank, const uint64_t *odims, const hsize_t *ndims, uint64_t start,
                        uint64_t len, h5fl_seq_t seq, uint32_t log, uint32_t rec, uint64_t loff, size_t esize)
{
    bool same = true;
    for (int k = 1; k < rank; k++)
        same = same && odims[k] == ndims[k];
    if (same || rank <= 1)
        return h5fl_ev_push(ev, start, len, seq, log, rec, loff);
    uint64_t last = odims[rank - 1], stride[H5S_MAX_RANK];
    if (last == 0)
        return 0; /* an empty extent holds no element */
    stride[rank - 1] = 1;
    for (int k = rank - 2; k >= 0; k--)
        stride[k] = stride[k + 1] * odims[k + 1]; /* <= the product of odims, which load_log bounded */
    while (len) {
        uint64_t rem = start, coords[H5S_MAX_RANK], lin = 0;
        for (int k = rank - 1; k > 0; k--) {
            coords[k] = rem % odims[k];
            rem /= odims[k];
        }
        coords[0] = rem;
        /* rows beyond the current extent stay, past its end (as the unchanged-trailing path above keeps
         * them): a later growth of the first dimension shows them without a rebuild, unless a shrink's
         * fill record covers them (an edge chunk's elements written directly, dset_chunk.c) */
        int out = 0; /* the outermost trailing dimension outside the current extent, 0 if none */
        for (int k = 1; k < rank && !out; k++)
            if (coords[k] >= ndims[k])
                out = k;
        uint64_t piece;
        if (out) { /* skip to the next index of dimension out-1 in one step */
            piece = (odims[out] - coords[out]) * stride[out] - start % stride[out];
            if (piece > len)
                piece = len;
        } else {
            uint64_t col = start % last;
            piece = last - col < len ? last - col : len;
            for (int k = 0; k < rank; k++)
                lin = lin * (k ? ndims[k] : 1) + coords[k];
            uint64_t np = ndims[rank - 1] - coords[rank - 1];
            if (np > piece)
                np = piece;
            if (h5fl_ev_push(ev, lin, np, seq, log, rec, loff) != 0)
                return -1;
        }
        start += piece;
        loff += piece * esize;
        len -= piece;
    }
    return 0;
}

/* "@log.<epoch>.<writer>.idx": the epoch and writer every record in it must carry. */
static bool log_name(const char *name, uint64_t *epoch, uint32_t *writer)
{
    const char *p = name + strlen(H5FL_LOG_PREFIX);
    uint64_t v[2];
    for (int i = 0; i < 2; i++) {
        if (*p < '0' || *p > '9' || (*p == '0' && p[1] >= '0' && p[1] <= '9'))
            return false;
        v[i] = 0;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (v[i] > (UINT64_MAX - 9) / 10)
                return false;
            v[i] = v[i] * 10 + (uint64_t)(*p - '0');
        }
        if (*p++ != '.')
            return false;
    }
    if (strcmp(p, "idx") != 0 || v[0] < 1 || v[0] > H5FL_EPOCH_MAX || v[1] > H5FL_WRITER_MAX)
        return false;
    *epoch = v[0];
    *writer = (uint32_t)v[1];
    return true;
}

static int add_crcrec(h5fl_index_t *ix, const h5fl_record_t *r, uint32_t log, uint64_t ipos, uint32_t *out)
{
    if (ix->nrecs >= H5FL_NO_REC) {
        h5fl_err("too many writes in one dataset to index (%zu)", ix->nrecs);
        return -1;
    }
    if (ix->nrecs == ix->caprecs) {
        size_t cap = ix->caprecs ? 2 * ix->caprecs : 64;
        h5fl_crcrec_t *nv = realloc(ix->recs, cap * sizeof *nv);
        if (!nv) {
            h5fl_err("out of memory");
            return -1;
        }
        ix->recs = nv;
        ix->caprecs = cap;
    }
    ix->recs[ix->nrecs] = (h5fl_crcrec_t){r->crc_start, r->data_off + r->nbytes, ipos, log, r->dcrc, false};
    *out = (uint32_t)ix->nrecs++;
    return 0;
}

/* Every field of a record is checked against the log it is in, the dataset and the data log, with
 * arithmetic that cannot wrap: a record that passes its CRC may still be crafted or written by a bug. */
static int check_record(const h5fl_dset_t *d, const h5fl_record_t *r, int rank, uint64_t epoch, uint32_t writer,
                        uint64_t dsize, const char **why)
{
    bool fill = r->flags & H5FL_REC_FILL;
    if (r->seq.epoch != epoch || (r->seq.order & H5FL_WRITER_MAX) != writer) {
        *why = "its epoch or writer differs from its log's name";
        return -1;
    }
    if (r->flags & H5FL_REC_COMMIT) {
        if (r->nbytes > dsize) {
            *why = "the data log is shorter than when the log was committed (truncated)";
            return -1;
        }
        return 0;
    }
    if ((int)r->rank != rank) {
        *why = "rank differs from the dataset's";
        return -1;
    }
    if (fill ? (r->nbytes != 0 || r->data_off != 0)
             : (r->data_off > dsize || r->nbytes > dsize - r->data_off)) {
        *why = fill ? "a fill record with data" : "data beyond the data log";
        return -1;
    }
    uint64_t npts = 1; /* elements of the extent the write was made under */
    for (int k = 0; k < rank; k++) {
        if (r->dims[k] && npts > UINT64_MAX / r->dims[k]) {
            *why = "its extent has more elements than 2^64";
            return -1;
        }
        npts *= r->dims[k];
    }
    uint64_t total = 0;
    for (uint64_t j = 0; j < r->nruns; j++) {
        uint64_t s = h5fl_get_u64(r->runs + 16 * j), n = h5fl_get_u64(r->runs + 16 * j + 8);
        if (s > npts || n > npts - s) {
            *why = "a run lies outside the extent the write was made under";
            return -1;
        }
        if (n > UINT64_MAX - total) {
            *why = "its runs hold more than 2^64 elements";
            return -1;
        }
        total += n;
    }
    if (!fill && (bool)(r->flags & H5FL_REC_FILTER) != d->filtered) {
        *why = d->filtered ? "an unfiltered write in a dataset with filters"
                           : "a filtered write in a dataset without filters";
        return -1;
    }
    uint64_t raw = (r->flags & H5FL_REC_FILTER) ? r->raw : r->nbytes;
    if (!fill && (total > UINT64_MAX / d->esize || total * d->esize != raw || raw > SIZE_MAX / 2)) {
        *why = "runs and byte count disagree";
        return -1;
    }
    return 0;
}

static int load_log(h5fl_dset_t *d, h5fl_index_t *ix, const char *idxname, ext_vec_t *ev, uint64_t superseded,
                    const hsize_t *dims)
{
    char *ipath = h5fl_join(d->o.dir, idxname);
    char *dpath = ipath ? h5fl_strdup(ipath) : NULL;
    void *ib = NULL;
    size_t il = 0;
    int rc = -1, rank = H5Sget_simple_extent_ndims(d->space);
    if (!dpath)
        goto done;
    uint64_t epoch;
    uint32_t writer;
    if (!log_name(idxname, &epoch, &writer)) {
        h5fl_err("dataset '%s': %s is not a log name this format uses (@log.<epoch>.<writer>.idx, epoch "
                 "1..%llu, writer 0..%u); move it out of the dataset directory",
                 d->o.path, ipath, (unsigned long long)H5FL_EPOCH_MAX, H5FL_WRITER_MAX);
        goto done;
    }
    if (epoch <= superseded) { /* restructured: its contents are in the shards (restructure.c) */
        rc = 0;
        goto done;
    }
    ix->max_epoch = epoch > ix->max_epoch ? epoch : ix->max_epoch;
    memcpy(dpath + strlen(dpath) - 3, "dat", 3);
    int li = h5fl_ix_add_log(ix, dpath);
    if (li < 0 || h5fl_read_file(ipath, &ib, &il) != 0)
        goto done;
    if (d->w && !strcmp(dpath, d->w->dpath))
        ix->own_log = li;
    struct stat st;
    if (fstat(ix->logs[li].fd, &st) != 0) {
        h5fl_err("cannot stat %s: %s", dpath, strerror(errno));
        goto done;
    }
    uint64_t dsize = (uint64_t)st.st_size;
    size_t pos = 0;
    bool have_prev = false;
    uint64_t prev = 0;
    for (;;) {
        h5fl_record_t r;
        ssize_t k = h5fl_index_next(ib, il, pos, &r);
        if (k == 0)
            break; /* the end, or the torn tail of a writer that died mid-append */
        if (k < 0) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", h5fl_err_msg());
            h5fl_err_clear();
            h5fl_err("%s of %s (dataset '%s')", msg, ipath, d->o.path);
            goto done;
        }
        const char *why = NULL;
        if (check_record(d, &r, rank, epoch, writer, dsize, &why) == 0 && !(r.flags & H5FL_REC_COMMIT)) {
            if (have_prev && r.seq.order <= prev)
                why = "sequence numbers do not increase (a record repeated or out of place)";
            have_prev = true;
            prev = r.seq.order;
        }
        if (why) {
            h5fl_err("corrupt index record at byte %zu of %s (dataset '%s'): %s", pos, ipath, d->o.path, why);
            goto done;
        }
        if (r.flags & H5FL_REC_COMMIT) {
            pos += (size_t)k;
            continue;
        }
        bool fill = r.flags & H5FL_REC_FILL;
        uint32_t rec = H5FL_NO_REC;
        if ((r.flags & H5FL_REC_DCRC) && add_crcrec(ix, &r, (uint32_t)li, pos, &rec) != 0)
            goto done;
        uint64_t loff = r.data_off;
        int dl = li; /* the log the extents point into: for a filtered write, its decoded bytes */
        if (r.flags & H5FL_REC_FILTER) {
            if ((dl = ix_add_filtered(ix, (uint32_t)li, r.data_off, r.nbytes, r.raw, r.fmask)) < 0)
                goto done;
            loff = 0;
        }
        for (uint64_t j = 0; j < r.nruns; j++) {
            uint64_t s = h5fl_get_u64(r.runs + 16 * j), n = h5fl_get_u64(r.runs + 16 * j + 8);
            if (n && add_remapped(ev, rank, r.dims, dims, s, n, r.seq, fill ? H5FL_FILL_LOG : (uint32_t)dl,
                                  fill ? H5FL_NO_REC : rec, fill ? 0 : loff, d->esize) != 0)
                goto done;
            if (!fill)
                loff += n * d->esize; /* <= data_off + nbytes: checked */
        }
        pos += (size_t)k;
    }
    rc = 0;
done:
    free(ib);
    free(ipath);
    free(dpath);
    return rc;
}

static int ix_build_with(h5fl_dset_t *d, const h5fl_layout_t *lay, const hsize_t *dims, h5fl_index_t **out)
{
    h5fl_index_t *ix = calloc(1, sizeof *ix);
    ext_vec_t ev = {0};
    if (!ix) {
        h5fl_err("out of memory");
        return -1;
    }
    ix->own_log = -1;
    if (lay->order && (d->vstr || d->blob || d->filtered || d->vds || (int)lay->rank !=
                       H5Sget_simple_extent_ndims(d->space))) {
        h5fl_err("dataset '%s': a restructured layout for a dataset of this kind or rank (corrupt metadata)",
                 d->o.path);
        h5fl_ix_free(ix);
        return -1;
    }
    if (lay->order && h5fl_base_open(d->o.dir, lay, d->esize, &ix->base) != 0) {
        h5fl_ix_free(ix);
        return -1;
    }
    DIR *dir = opendir(d->o.dir);
    if (!dir) {
        h5fl_err("cannot list dataset directory %s: %s", d->o.dir, strerror(errno));
        h5fl_ix_free(ix);
        return -1;
    }
    struct dirent *e;
    int rc = 0;
    size_t plen = strlen(H5FL_LOG_PREFIX);
    while (rc == 0 && (e = readdir(dir))) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, H5FL_LOG_PREFIX, plen) == 0 && l > 4 && !strcmp(e->d_name + l - 4, ".idx"))
            rc = load_log(d, ix, e->d_name, &ev, lay->order ? lay->epoch : 0, dims);
    }
    closedir(dir);
    if (rc == 0)
        rc = h5fl_map_merge(&ix->map, ev.v, ev.n, d->esize);
    free(ev.v);
    if (rc != 0) {
        h5fl_ix_free(ix);
        return -1;
    }
    *out = ix;
    return 0;
}

/* A restructure elsewhere may switch the layout and then remove the logs it supersedes while this index
 * is built (a log missing from the listing, or one that vanished before it was opened): the layout is read
 * again after the build, and a build under a layout that changed meanwhile is done again with the new one.
 * The switch comes before any removal, so a build that saw the layout unchanged saw every log it needs. */
static int ix_build(h5fl_dset_t *d, const hsize_t *dims, h5fl_index_t **out)
{
    if (d->w && h5fl_writer_flush(d->w, false) != 0)
        return -1;
    h5fl_layout_t lay;
    if (h5fl_sidecar_layout(d->o.dir, &lay) != 0)
        return -1;
    for (int attempt = 0;; attempt++) {
        int rc = ix_build_with(d, &lay, dims, out);
        h5fl_layout_t now;
        int lr = h5fl_sidecar_layout(d->o.dir, &now);
        if (lr == 0 && now.gen == lay.gen)
            return rc;
        if (rc == 0) {
            h5fl_ix_free(*out);
            *out = NULL;
        }
        if (lr != 0)
            return -1;
        if (attempt == 3) {
            h5fl_err("dataset '%s' is being restructured again and again while it is read; try again later",
                     d->o.path);
            return -1;
        }
        h5fl_err_clear();
        lay = now;
    }
}

/* Map every data log of `ix` (this process's own up to its writer's end). */
static int ix_map_logs(const h5fl_dset_t *d, h5fl_index_t *ix)
{
    if (ix->own_log >= 0 && d->w && log_map(&ix->logs[ix->own_log], d->w->dend) != 0)
        return -1;
    for (size_t i = 0; i < ix->nlogs; i++)
        if ((int)i != ix->own_log && !ix->logs[i].map && !ix->logs[i].filtered) {
            struct stat st;
            if (fstat(ix->logs[i].fd, &st) == 0 && st.st_size > 0 &&
                log_map(&ix->logs[i], (size_t)st.st_size) != 0)
                return -1;
        }
    return 0;
}

int h5fl_ix_ready(h5fl_dset_t *d)
{
    if (!d->ix) {
        hsize_t dims[H5S_MAX_RANK];
        H5Sget_simple_extent_dims(d->space, dims, NULL);
        if (ix_build(d, dims, &d->ix) != 0)
            return -1;
    }
    h5fl_index_t *ix = d->ix;
    if (ix->npending) {
        if (h5fl_writer_flush(d->w, false) != 0)
            return -1;
        if (h5fl_map_merge(&ix->map, ix->pending, ix->npending, d->esize) != 0)
            return -1;
        ix->npending = 0;
    }
    return ix_map_logs(d, ix);
}

int h5fl_ix_build_dims(h5fl_dset_t *d, const hsize_t *dims, h5fl_index_t **out)
{
    *out = NULL;
    if (ix_build(d, dims, out) != 0)
        return -1;
    if (ix_map_logs(d, *out) != 0) {
        h5fl_ix_free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* Record this process's own write in an already built index (merged lazily at the next read). */
int h5fl_ix_note_write(h5fl_dset_t *d, const runs_ctx_t *runs, const hsize_t *rdims, h5fl_seq_t seq,
                       uint64_t data_off, bool fill)
{
    return h5fl_ix_note_write2(d, runs, rdims, seq, data_off, fill, NULL);
}

int h5fl_ix_note_write2(h5fl_dset_t *d, const runs_ctx_t *runs, const hsize_t *rdims, h5fl_seq_t seq,
                        uint64_t data_off, bool fill, const h5fl_record_t *filt)
{
    h5fl_index_t *ix = d->ix;
    if (!ix)
        return 0;
    h5fl_cview_free(ix->cview); /* the chunk view (dset_chunk.c) no longer shows every write */
    ix->cview = NULL;
    int rank = H5Sget_simple_extent_ndims(d->space);
    hsize_t cur[H5S_MAX_RANK];
    uint64_t odims[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(d->space, cur, NULL);
    for (int k = 0; k < rank; k++)
        odims[k] = rdims[k];
    if (!fill && ix->own_log < 0) {
        int li = h5fl_ix_add_log(ix, d->w->dpath);
        if (li < 0)
            return -1;
        ix->own_log = li;
    }
    uint64_t loff = data_off;
    int dl = ix->own_log;
    if (!fill && filt) {
        if ((dl = ix_add_filtered(ix, (uint32_t)ix->own_log, data_off, filt->nbytes, filt->raw, filt->fmask)) < 0)
            return -1;
        loff = 0;
    }
    for (size_t j = 0; j < runs->n; j++) {
        uint64_t s = h5fl_get_u64(runs->buf + 16 * j), n = h5fl_get_u64(runs->buf + 16 * j + 8);
        ext_vec_t v = {ix->pending, ix->npending, ix->cappending};
        /* runs in the linear order of the record's extent (a direct chunk write's or a shrink's may be
         * larger than the dataset's): placed in the current extent's order as a rebuild would place them */
        int r = add_remapped(&v, rank, odims, cur, s, n, seq, fill ? H5FL_FILL_LOG : (uint32_t)dl, H5FL_NO_REC,
                             fill ? 0 : loff, d->esize);
        ix->pending = v.v;
        ix->npending = v.n;
        ix->cappending = v.cap;
        if (r != 0)
            return -1;
        loff += n * d->esize;
    }
    return 0;
}

/* ---------------------------------------------------------------- gathering for reads */
static void put_fill(const h5fl_dset_t *d, uint8_t *out, uint64_t n)
{
    bool zero = true;
    for (size_t i = 0; i < d->esize && zero; i++)
        zero = d->fill[i] == 0;
    if (zero) {
        memset(out, 0, n * d->esize);
        return;
    }
    for (uint64_t i = 0; i < n; i++)
        memcpy(out + i * d->esize, d->fill, d->esize);
}

/* Resolve n (offset, length) pairs at byte `from` of log l into malloc'd strings (freed by the caller
 * with H5Treclaim, as HDF5 does for variable-length data). */
static int strings_out(const h5fl_dset_t *d, const h5fl_log_t *l, uint64_t from, uint64_t n, char **out)
{
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *p = l->map + from + 16 * i;
        uint64_t off = h5fl_get_u64(p), len = h5fl_get_u64(p + 8);
        if (len == UINT64_MAX) {
            out[i] = NULL;
            continue;
        }
        if (off > l->mapsize || len > l->mapsize - off) {
            h5fl_err("dataset '%s': corrupt string reference in %s", d->o.path, l->path);
            return -1;
        }
        if (!(out[i] = malloc(len + 1))) {
            h5fl_err("out of memory");
            return -1;
        }
        memcpy(out[i], l->map + off, len);
        out[i][len] = '\0';
    }
    return 0;
}

/* Elements with variable-length parts (d->blob): decode each stored encoding into out (tsize each). */
static int blobs_decode(h5fl_blob_ctx_t *bx, const h5fl_dset_t *d, const h5fl_log_t *l, uint64_t from, uint64_t n,
                        uint8_t *out)
{
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *p = l->map + from + 16 * i;
        uint64_t off = h5fl_get_u64(p), len = h5fl_get_u64(p + 8);
        if (len == UINT64_MAX) /* never written as such: reads as the empty value */
            continue;
        if (off > l->mapsize || len > l->mapsize - off) {
            h5fl_err("dataset '%s': corrupt value reference in %s", d->o.path, l->path);
            return -1;
        }
        const uint8_t *q = l->map + off;
        if (h5fl_blob_decode(bx, d->type, &q, l->map + off + len, out + i * d->tsize) != 0 ||
            q != l->map + off + len) {
            h5fl_err("dataset '%s': corrupt variable-length value in %s: %s", d->o.path, l->path,
                     h5fl_err_msg() ? h5fl_err_msg() : "trailing bytes");
            return -1;
        }
    }
    return 0;
}

static int blobs_out(const h5fl_dset_t *d, const h5fl_log_t *l, uint64_t from, uint64_t n, uint8_t *out)
{
    h5fl_blob_ctx_t bx = {.f = d->o.file, .alloc = d->valloc, .alloc_info = d->valloc_info};
    int rc = blobs_decode(&bx, d, l, from, n, out);
    h5fl_blob_ctx_end(&bx);
    return rc;
}

/* The first read that touches a checksummed write checks its data (once per index). */
int h5fl_verify_rec(const h5fl_dset_t *d, uint32_t ri)
{
    h5fl_crcrec_t *c = &d->ix->recs[ri];
    const h5fl_log_t *l = &d->ix->logs[c->log];
    if (c->to > l->mapsize || c->from > c->to) {
        h5fl_err("dataset '%s': data log %s is shorter (%zu bytes) than its index says (%llu)", d->o.path,
                 l->path, l->mapsize, (unsigned long long)c->to);
        return -1;
    }
    uint32_t got = h5fl_crc32c(0, l->map + c->from, (size_t)(c->to - c->from));
    if (got != c->crc) {
        h5fl_err("dataset '%s': data checksum mismatch in bytes %llu..%llu of %s (the write indexed at byte "
                 "%llu of its .idx): the data log is corrupt (CRC32C %08x, recorded %08x); "
                 "H5FLOW_LOG_VERIFY=0 in the environment reads it unchecked",
                 d->o.path, (unsigned long long)c->from, (unsigned long long)c->to, l->path,
                 (unsigned long long)c->ipos, got, c->crc);
        return -1;
    }
    c->checked = true;
    return 0;
}

static int base_copy(void *vctx, const uint8_t *src, uint64_t n, uint64_t shard, uint64_t lin)
{
    (void)shard;
    (void)lin;
    gather_ctx_t *g = vctx;
    if (src)
        memcpy(g->out, src, (size_t)(n * g->d->esize));
    else
        put_fill(g->d, g->out, n);
    g->out += n * g->d->esize;
    return 0;
}

int h5fl_gather_seq(void *vctx, hsize_t start, size_t len)
{
    gather_ctx_t *g = vctx;
    h5fl_dset_t *d = g->d;
    if (d->ext) { /* external storage: the elements are in the named files (extfile.c) */
        if (h5fl_ext_io(d, start * d->esize, (uint64_t)len * d->esize, g->out, false) != 0)
            return -1;
        g->out += (uint64_t)len * d->esize;
        return 0;
    }
    const h5fl_map_t *m = &d->ix->map;
    size_t k = h5fl_map_find(m, start);
    uint64_t pos = start, end = start + len, es = d->esize;
    while (pos < end) {
        uint64_t stop;
        if (k < m->n && m->ext[k].start <= pos && m->ext[k].log != H5FL_FILL_LOG) {
            const h5fl_extent_t *e = &m->ext[k];
            stop = e->start + e->len < end ? e->start + e->len : end;
            h5fl_log_t *l = &d->ix->logs[e->log];
            if (e->rec != H5FL_NO_REC && d->o.file->verify && !d->ix->recs[e->rec].checked &&
                h5fl_verify_rec(d, e->rec) != 0)
                return -1;
            if (l->filtered && !l->map && log_decode(d, l) != 0)
                return -1;
            uint64_t from = e->loff + (pos - e->start) * es, nb = (stop - pos) * es;
            if (nb > l->mapsize || from > l->mapsize - nb) {
                h5fl_err("dataset '%s': index points beyond the mapped data log %s", d->o.path, l->path);
                return -1;
            }
            if (d->blob) {
                if (blobs_out(d, l, from, stop - pos, g->out) != 0)
                    return -1;
                g->out += (stop - pos) * d->tsize;
                pos = stop;
                k++;
                continue;
            }
            if (d->vstr) {
                if (strings_out(d, l, from, stop - pos, (char **)g->out) != 0)
                    return -1;
                g->out += (stop - pos) * sizeof(char *);
                pos = stop;
                k++;
                continue;
            }
            memcpy(g->out, l->map + from, nb);
            k++;
        } else if (k < m->n && m->ext[k].start <= pos) { /* a range a shrink discarded */
            stop = m->ext[k].start + m->ext[k].len < end ? m->ext[k].start + m->ext[k].len : end;
            k++;
            if (d->blob) { /* the caller's buffer is zeroed: empty values */
                g->out += (stop - pos) * d->tsize;
                pos = stop;
                continue;
            }
            if (d->vstr) {
                for (uint64_t i = 0; i < stop - pos; i++)
                    if (!(((char **)g->out)[i] = h5fl_strdup(d->vfill ? d->vfill : "")))
                        return -1;
                g->out += (stop - pos) * sizeof(char *);
                pos = stop;
                continue;
            }
            put_fill(d, g->out, stop - pos);
        } else {
            stop = k < m->n && m->ext[k].start < end ? m->ext[k].start : end;
            if (d->ix->base) { /* restructured: what no later write covers is in the shards */
                h5fl_base_t *b = d->ix->base;
                if (b->cur_space != d->space) { /* H5Dset_extent replaces d->space */
                    H5Sget_simple_extent_dims(d->space, b->cur, NULL);
                    b->cur_space = d->space;
                }
                if (h5fl_base_walk(d, b, b->cur, pos, stop, base_copy, g) != 0)
                    return -1;
                pos = stop;
                continue;
            }
            if (d->blob) { /* unwritten: empty values (the caller's buffer is zeroed) */
                g->out += (stop - pos) * d->tsize;
                pos = stop;
                continue;
            }
            if (d->vstr) { /* unwritten variable-length strings read as empty strings */
                for (uint64_t i = 0; i < stop - pos; i++)
                    if (!(((char **)g->out)[i] = h5fl_strdup(d->vfill ? d->vfill : "")))
                        return -1;
                g->out += (stop - pos) * sizeof(char *);
                pos = stop;
                continue;
            }
            put_fill(d, g->out, stop - pos);
        }
        g->out += (stop - pos) * es;
        pos = stop;
    }
    return 0;
}
