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
        if (ix->logs[i].map)
            munmap(ix->logs[i].map, ix->logs[i].mapsize);
        if (ix->logs[i].fd >= 0)
            close(ix->logs[i].fd);
        free(ix->logs[i].path);
    }
    free(ix->logs);
    h5fl_map_free(&ix->map);
    free(ix->pending);
    free(ix);
}

int h5fl_ix_add_log(h5fl_index_t *ix, const char *path)
{
    h5fl_log_t *nl = realloc(ix->logs, (ix->nlogs + 1) * sizeof *nl);
    if (!nl) {
        h5fl_err("out of memory");
        return -1;
    }
    ix->logs = nl;
    h5fl_log_t *l = &ix->logs[ix->nlogs];
    l->path = h5fl_strdup(path);
    l->fd = open(path, O_RDONLY | O_CLOEXEC);
    l->map = NULL;
    l->mapsize = 0;
    if (!l->path || l->fd < 0) {
        h5fl_err("cannot open data log %s: %s", path, strerror(errno));
        free(l->path);
        if (l->fd >= 0)
            close(l->fd);
        return -1;
    }
    return (int)ix->nlogs++;
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


int h5fl_ev_push(ext_vec_t *e, uint64_t start, uint64_t len, h5fl_seq_t seq, uint32_t log, uint64_t loff)
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
    e->v[e->n++] = (h5fl_extent_t){start, len, seq, log, loff};
    return 0;
}

/* Add a run written under extent `odims` to the index of a dataset whose extent is now `ndims`. */
static int add_remapped(ext_vec_t *ev, int rank, const uint64_t *odims, const hsize_t *ndims, uint64_t start,
                        uint64_t len, h5fl_seq_t seq, uint32_t log, uint64_t loff, size_t esize)
{
    bool same = true;
    for (int k = 1; k < rank; k++)
        same = same && odims[k] == ndims[k];
    if (same || rank <= 1)
        return h5fl_ev_push(ev, start, len, seq, log, loff);
    uint64_t last = odims[rank - 1];
    if (last == 0)
        return 0; /* an empty extent holds no element */
    while (len) {
        uint64_t col = start % last, piece = last - col < len ? last - col : len;
        uint64_t rem = start, coords[H5S_MAX_RANK], lin = 0;
        for (int k = rank - 1; k > 0; k--) {
            coords[k] = rem % odims[k];
            rem /= odims[k];
        }
        coords[0] = rem;
        bool inside = true;
        for (int k = 1; k < rank; k++)
            inside = inside && coords[k] < ndims[k];
        if (inside) {
            for (int k = 0; k < rank; k++)
                lin = lin * (k ? ndims[k] : 1) + coords[k];
            uint64_t np = ndims[rank - 1] - coords[rank - 1];
            if (np > piece)
                np = piece;
            if (h5fl_ev_push(ev, lin, np, seq, log, loff) != 0)
                return -1;
        }
        start += piece;
        loff += piece * esize;
        len -= piece;
    }
    return 0;
}

static int load_log(h5fl_dset_t *d, h5fl_index_t *ix, const char *idxname, ext_vec_t *ev)
{
    char *ipath = h5fl_join(d->o.dir, idxname);
    char *dpath = ipath ? h5fl_strdup(ipath) : NULL;
    void *ib = NULL;
    size_t il = 0;
    int rc = -1, rank = H5Sget_simple_extent_ndims(d->space);
    hsize_t dims[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(d->space, dims, NULL);
    if (!dpath)
        goto done;
    memcpy(dpath + strlen(dpath) - 3, "dat", 3);
    int li = h5fl_ix_add_log(ix, dpath);
    if (li < 0 || h5fl_read_file(ipath, &ib, &il) != 0)
        goto done;
    if (d->w && !strcmp(dpath, d->w->dpath))
        ix->own_log = li;
    struct stat st;
    if (fstat(ix->logs[li].fd, &st) != 0)
        goto done;
    size_t pos = 0;
    while (pos < il) {
        h5fl_record_t r;
        ssize_t k = h5fl_record_parse((uint8_t *)ib + pos, il - pos, &r);
        if (k == 0)
            break; /* torn tail of a writer that died mid-append: everything before it is complete */
        if (k < 0) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", h5fl_err_msg());
            h5fl_err_clear();
            h5fl_err("%s at byte %zu of %s (dataset '%s')", msg, pos, ipath, d->o.path);
            goto done;
        }
        if ((int)r.rank != rank || r.data_off > (uint64_t)st.st_size ||
            r.nbytes > (uint64_t)st.st_size - r.data_off) {
            h5fl_err("corrupt index record at byte %zu of %s: %s", pos, ipath,
                     (int)r.rank != rank ? "rank differs from the dataset's" : "data beyond the data log");
            goto done;
        }
        bool fill = r.flags & H5FL_REC_FILL;
        uint64_t loff = r.data_off, total = 0;
        for (uint64_t j = 0; j < r.nruns; j++) {
            uint64_t s = h5fl_get_u64(r.runs + 16 * j), n = h5fl_get_u64(r.runs + 16 * j + 8);
            if (add_remapped(ev, rank, r.dims, dims, s, n, r.seq, fill ? H5FL_FILL_LOG : (uint32_t)li,
                             fill ? 0 : loff, d->esize) != 0)
                goto done;
            loff += n * d->esize;
            total += n;
        }
        if (!fill && total * d->esize != r.nbytes) {
            h5fl_err("corrupt index record at byte %zu of %s: runs and byte count disagree", pos, ipath);
            goto done;
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

static int ix_build(h5fl_dset_t *d)
{
    if (d->w && h5fl_writer_flush(d->w, false) != 0)
        return -1;
    h5fl_index_t *ix = calloc(1, sizeof *ix);
    ext_vec_t ev = {0};
    if (!ix) {
        h5fl_err("out of memory");
        return -1;
    }
    ix->own_log = -1;
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
            rc = load_log(d, ix, e->d_name, &ev);
    }
    closedir(dir);
    if (rc == 0)
        rc = h5fl_map_merge(&ix->map, ev.v, ev.n, d->esize);
    free(ev.v);
    if (rc != 0) {
        h5fl_ix_free(ix);
        return -1;
    }
    d->ix = ix;
    return 0;
}

int h5fl_ix_ready(h5fl_dset_t *d)
{
    if (!d->ix && ix_build(d) != 0)
        return -1;
    h5fl_index_t *ix = d->ix;
    if (ix->npending) {
        if (h5fl_writer_flush(d->w, false) != 0)
            return -1;
        if (h5fl_map_merge(&ix->map, ix->pending, ix->npending, d->esize) != 0)
            return -1;
        ix->npending = 0;
    }
    if (ix->own_log >= 0 && d->w && log_map(&ix->logs[ix->own_log], d->w->dend) != 0)
        return -1;
    for (size_t i = 0; i < ix->nlogs; i++)
        if ((int)i != ix->own_log && !ix->logs[i].map) {
            struct stat st;
            if (fstat(ix->logs[i].fd, &st) == 0 && st.st_size > 0 &&
                log_map(&ix->logs[i], (size_t)st.st_size) != 0)
                return -1;
        }
    return 0;
}

/* Record this process's own write in an already built index (merged lazily at the next read). */
int h5fl_ix_note_write(h5fl_dset_t *d, const runs_ctx_t *runs, h5fl_seq_t seq, uint64_t data_off, bool fill)
{
    h5fl_index_t *ix = d->ix;
    if (!ix)
        return 0;
    if (!fill && ix->own_log < 0) {
        int li = h5fl_ix_add_log(ix, d->w->dpath);
        if (li < 0)
            return -1;
        ix->own_log = li;
    }
    uint64_t loff = data_off;
    for (size_t j = 0; j < runs->n; j++) {
        uint64_t s = h5fl_get_u64(runs->buf + 16 * j), n = h5fl_get_u64(runs->buf + 16 * j + 8);
        ext_vec_t v = {ix->pending, ix->npending, ix->cappending};
        int r = h5fl_ev_push(&v, s, n, seq, fill ? H5FL_FILL_LOG : (uint32_t)ix->own_log, fill ? 0 : loff);
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

int h5fl_gather_seq(void *vctx, hsize_t start, size_t len)
{
    gather_ctx_t *g = vctx;
    h5fl_dset_t *d = g->d;
    const h5fl_map_t *m = &d->ix->map;
    size_t k = h5fl_map_find(m, start);
    uint64_t pos = start, end = start + len, es = d->esize;
    while (pos < end) {
        uint64_t stop;
        if (k < m->n && m->ext[k].start <= pos && m->ext[k].log != H5FL_FILL_LOG) {
            const h5fl_extent_t *e = &m->ext[k];
            stop = e->start + e->len < end ? e->start + e->len : end;
            const h5fl_log_t *l = &d->ix->logs[e->log];
            uint64_t from = e->loff + (pos - e->start) * es, nb = (stop - pos) * es;
            if (from + nb > l->mapsize) {
                h5fl_err("dataset '%s': index points beyond the mapped data log %s", d->o.path, l->path);
                return -1;
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
