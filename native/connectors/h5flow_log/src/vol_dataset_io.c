/* Dataset callbacks that move data: write (append to this process's logs: plain, filtered, variable-length,
 * references, external storage) and read (through the merged index). */
#include "dset.h"
#include "stats.h"

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

/* A filtered dataset: run the write's packed bytes through the pipeline, append them, index them. */
static int write_filtered(h5fl_dset_t *d, hid_t fsel, const uint8_t *src, uint64_t nbytes)
{
    h5fl_writer_t *w = d->w;
    size_t n = (size_t)nbytes, cap = n ? n : 1;
    void *buf = H5allocate_memory(cap, false);
    if (!buf) {
        h5fl_err("out of memory filtering a write of %zu bytes", n);
        return -1;
    }
    memcpy(buf, src, n);
    unsigned mask = 0;
    uint64_t data_off = w->dend + w->dlen;
    int rc = -1;
    if (h5fl_filter_run(d->dcpl, false, &mask, &buf, &n, &cap, nbytes / d->esize, d->o.path) == 0 &&
        h5fl_writer_append_data(w, buf, n) == 0)
        rc = h5fl_dset_append_record_f(d, fsel, data_off, n, H5FL_REC_FILTER, nbytes, mask, src);
    H5free_memory(buf);
    return rc;
}

/* Pointers of the memory selection, packed in selection order (n entries). */
static char **gather_ptrs(const sel_t *s, const void *buf)
{
    char **v = malloc(s->n * sizeof *v);
    if (!v) {
        h5fl_err("out of memory");
        return NULL;
    }
    copy_ctx_t c = {(uint8_t *)(uintptr_t)buf, (uint8_t *)v, 0, true};
    if (s->msel == H5S_BLOCK)
        memcpy(v, buf, s->n * sizeof *v);
    else if (h5fl_for_each_seq(s->msel, sizeof(char *), h5fl_copy_seq, &c) != 0) {
        free(v);
        return NULL;
    }
    return v;
}

/* Variable-length strings: append the string bytes, then one (offset, length) pair per element; the
 * index record covers the pairs, so the merge and the latest-wins rules are those of fixed types. */
static int write_vstr(h5fl_dset_t *d, hid_t mtype, const sel_t *s, const void *buf)
{
    if (H5Tis_variable_str(mtype) <= 0) {
        h5fl_err("dataset '%s' holds variable-length strings: write it with a variable-length string type",
                 d->o.path);
        return -1;
    }
    h5fl_writer_t *w = d->w;
    char **v = gather_ptrs(s, buf);
    uint8_t *pairs = v ? malloc(s->n * 16) : NULL;
    int rc = -1;
    if (!pairs) {
        if (v)
            h5fl_err("out of memory");
        goto done;
    }
    for (hsize_t i = 0; i < s->n; i++) {
        size_t l = v[i] ? strlen(v[i]) : 0;
        h5fl_put_u64(pairs + 16 * i, w->dend + w->dlen);
        h5fl_put_u64(pairs + 16 * i + 8, v[i] ? l : UINT64_MAX);
        if (l && h5fl_writer_append_data(w, v[i], l) != 0)
            goto done;
    }
    uint64_t data_off = w->dend + w->dlen;
    if (h5fl_writer_append_data(w, pairs, s->n * 16) != 0)
        goto done;
    rc = h5fl_dset_append_record(d, s->fsel, data_off, s->n * 16, 0, NULL);
done:
    free(v);
    free(pairs);
    return rc;
}

/* Values with variable-length parts: append each element's encoding (blob.c), then one (offset, length)
 * pair per element, exactly as write_vstr does for strings. A memory type other than the dataset's is
 * converted to it first (h5fl_blob_convert: every member given, no references). */
static int write_blob(h5fl_dset_t *d, hid_t mtype, hid_t dxpl, const sel_t *s, const void *buf)
{
    htri_t eq = H5Tequal(mtype, d->type);
    size_t ts = d->tsize, ms = H5Tget_size(mtype);
    if (eq < 0 || ms == 0) {
        h5fl_err("invalid memory datatype");
        return -1;
    }
    h5fl_writer_t *w = d->w;
    size_t big = ts > ms ? ts : ms;
    uint8_t *v = malloc(s->n * big + 1), *pairs = malloc(s->n * 16 + 1), *bkg = NULL;
    h5fl_buf_t enc = {0};
    bool converted = false; /* v holds values HDF5's conversion allocated: reclaim them */
    int rc = -1;
    if (!v || !pairs) {
        h5fl_err("out of memory");
        goto done;
    }
    copy_ctx_t c = {(uint8_t *)(uintptr_t)buf, v, 0, true};
    if (s->msel == H5S_BLOCK)
        memcpy(v, buf, s->n * ms);
    else if (h5fl_for_each_seq(s->msel, ms, h5fl_copy_seq, &c) != 0)
        goto done;
    if (eq == 0) {
        if (h5fl_needs_bkg(d->type) && !(bkg = calloc(s->n, ts))) {
            h5fl_err("out of memory");
            goto done;
        }
        if (h5fl_blob_convert(mtype, d->type, s->n, v, bkg, dxpl, true, "dataset", d->o.path) != 0)
            goto done;
        converted = true;
    }
    for (hsize_t i = 0; i < s->n; i++) {
        enc.len = 0;
        h5fl_blob_ctx_t bx = {.f = d->o.file}; /* encoding holds no template: nothing to end */
        if (h5fl_blob_encode(&bx, d->type, v + i * ts, &enc) != 0)
            goto done;
        h5fl_put_u64(pairs + 16 * i, w->dend + w->dlen);
        h5fl_put_u64(pairs + 16 * i + 8, enc.len);
        if (enc.len && h5fl_writer_append_data(w, enc.p, enc.len) != 0)
            goto done;
    }
    uint64_t data_off = w->dend + w->dlen;
    if (h5fl_writer_append_data(w, pairs, s->n * 16) != 0)
        goto done;
    rc = h5fl_dset_append_record(d, s->fsel, data_off, s->n * 16, 0, NULL);
done:
    if (converted) {
        h5fl_blob_reclaim(d->type, s->n, dxpl, v);
    }
    free(enc.p);
    free(v);
    free(bkg);
    free(pairs);
    return rc;
}

typedef struct ext_put {
    h5fl_dset_t *d;
    uint8_t *p;
} ext_put_t;

static int ext_put_seq(void *vctx, hsize_t start, size_t len)
{
    ext_put_t *c = vctx;
    uint64_t nb = (uint64_t)len * c->d->esize;
    if (h5fl_ext_io(c->d, start * c->d->esize, nb, c->p, true) != 0)
        return -1;
    c->p += nb;
    return 0;
}

/* External storage (extfile.c): the elements in the stored datatype, in selection order (members the memory
 * type lacks keep their stored values), each run of the file selection then written to its place. */
static int write_ext(h5fl_dset_t *d, hid_t mtype, hid_t dxpl, const sel_t *s, const void *buf)
{
    size_t msize = H5Tget_size(mtype), big = msize > d->esize ? msize : d->esize;
    htri_t eq = H5Tequal(mtype, d->type);
    if (eq < 0 || msize == 0) {
        h5fl_err("invalid memory datatype");
        return -1;
    }
    uint8_t *tmp = malloc(s->n * big + 1), *bkg = NULL;
    int rc = -1;
    if (!tmp) {
        h5fl_err("out of memory staging a write of %llu elements", (unsigned long long)s->n);
        return -1;
    }
    copy_ctx_t c = {(uint8_t *)(uintptr_t)buf, tmp, 0, true};
    if (s->msel == H5S_BLOCK)
        memcpy(tmp, buf, s->n * msize);
    else if (h5fl_for_each_seq(s->msel, msize, h5fl_copy_seq, &c) != 0)
        goto done;
    if (eq == 0) {
        if (h5fl_needs_bkg(d->type)) {
            gather_ctx_t g = {d, bkg = calloc(s->n, d->esize)};
            if (!bkg) {
                h5fl_err("out of memory");
                goto done;
            }
            if (h5fl_for_each_seq(s->fsel, 1, h5fl_gather_seq, &g) != 0)
                goto done;
        }
        if (h5fl_convert(d->o.file, mtype, d->type, s->n, tmp, bkg, dxpl) < 0) {
            h5fl_err("cannot convert the memory datatype to the dataset's datatype");
            goto done;
        }
    }
    ext_put_t e = {d, tmp};
    rc = h5fl_for_each_seq(s->fsel, 1, ext_put_seq, &e);
done:
    free(tmp);
    free(bkg);
    return rc;
}

static int write_one(h5fl_dset_t *d, hid_t mtype, hid_t mspace, hid_t fspace, hid_t dxpl, const void *buf)
{
    h5fl_file_t *f = d->o.file;
    sel_t s;
    if (!buf) {
        h5fl_err("write buffer is NULL");
        return -1;
    }
    if (!h5fl_writable(f))
        return -1;
    if (d->vds)
        return h5fl_vds_io(d, mtype, mspace, fspace, dxpl, (void *)buf, true);
    if (h5fl_resolve_sel(d, mspace, fspace, &s) != 0)
        return -1;
    if (s.n == 0)
        return 0;
    if (d->ext)
        return write_ext(d, mtype, dxpl, &s, buf);
    if (!d->w && h5fl_writer_open(d) != 0)
        return -1;
    h5fl_writer_t *w = d->w;
    size_t msize = H5Tget_size(mtype);
    htri_t eq = H5Tequal(mtype, d->type);
    if (eq < 0 || msize == 0) {
        h5fl_err("invalid memory datatype");
        return -1;
    }
    uint64_t nbytes = s.n * d->esize, data_off = w->dend + w->dlen;
    uint8_t *tmp = NULL, *bkg = NULL;
    int rc = -1;
    hsize_t moff;
    const void *stored = NULL; /* the elements as stored (dataset type, selection order) */
    if (d->vstr)
        return write_vstr(d, mtype, &s, buf);
    if (d->blob)
        return write_blob(d, mtype, dxpl, &s, buf);
    if (eq > 0 && h5fl_sel_contiguous(s.msel, msize, s.n, &moff)) {
        if (d->filtered)
            return write_filtered(d, s.fsel, (const uint8_t *)buf + moff, nbytes);
        h5fl_stats_arm(d, nbytes); /* statistics fused with the checksum (stats.h) */
        if (h5fl_writer_append_data(w, (const uint8_t *)buf + moff, nbytes) != 0)
            goto done;
        stored = (const uint8_t *)buf + moff;
    } else {
        size_t big = msize > d->esize ? msize : d->esize;
        tmp = malloc(s.n * big);
        if (!tmp) {
            h5fl_err("out of memory staging a write of %llu elements", (unsigned long long)s.n);
            goto done;
        }
        copy_ctx_t c = {(uint8_t *)(uintptr_t)buf, tmp, 0, true};
        if (s.msel == H5S_BLOCK)
            memcpy(tmp, buf, s.n * msize);
        else if (h5fl_for_each_seq(s.msel, msize, h5fl_copy_seq, &c) != 0)
            goto done;
        if (eq == 0) {
            if (h5fl_check_ref_conversion(mtype, d->type, "dataset", d->o.path) != 0)
                goto done;
            if (h5fl_needs_bkg(d->type)) { /* members the memory type lacks keep their stored values */
                if (!(bkg = calloc(s.n, d->esize))) {
                    h5fl_err("out of memory");
                    goto done;
                }
                gather_ctx_t g = {d, bkg};
                if (h5fl_ix_ready(d) != 0 || h5fl_for_each_seq(s.fsel, 1, h5fl_gather_seq, &g) != 0)
                    goto done;
            }
            if (h5fl_convert(d->o.file, mtype, d->type, s.n, tmp, bkg, dxpl) < 0) {
                h5fl_err("cannot convert the memory datatype to the dataset's datatype");
                goto done;
            }
        }
        if (d->filtered) {
            rc = write_filtered(d, s.fsel, tmp, nbytes);
            goto done;
        }
        h5fl_stats_arm(d, nbytes);
        if (h5fl_writer_append_data(w, tmp, nbytes) != 0)
            goto done;
        stored = tmp;
    }
    rc = h5fl_dset_append_record(d, s.fsel, data_off, nbytes, 0, stored);
done:
    free(tmp);
    free(bkg);
    return rc;
}

/* Append the index record of a write whose data is at data_off (nbytes) in this writer's data log. */
int h5fl_dset_append_record(h5fl_dset_t *d, hid_t fsel, uint64_t data_off, uint64_t nbytes, uint32_t flags,
                            const void *data)
{
    return h5fl_dset_append_record_f(d, fsel, data_off, nbytes, flags, 0, 0, data);
}

/* ... with H5FL_REC_FILTER in flags: nbytes filtered bytes, raw before filtering, fmask filters skipped.
 * data: the write's elements as stored, unfiltered (statistics and the user data function, stats.c). */
int h5fl_dset_append_record_f(h5fl_dset_t *d, hid_t fsel, uint64_t data_off, uint64_t nbytes, uint32_t flags,
                              uint64_t raw, uint32_t fmask, const void *data)
{
    h5fl_writer_t *w = d->w;
    runs_ctx_t runs = {0};
    int rc = -1;
    if (h5fl_for_each_seq(fsel, 1, h5fl_add_run, &runs) != 0)
        goto done;
    h5fl_record_t r = {0};
    r.seq.epoch = w->epoch;
    r.seq.order = (w->counter++ << 20) | (w->id & 0xFFFFF);
    r.data_off = data_off;
    r.nbytes = nbytes;
    r.flags = flags;
    r.raw = raw;
    r.fmask = fmask;
    /* the extent the runs were computed in: the file selection's own (h5fl_for_each_seq) */
    int rank = H5Sget_simple_extent_ndims(fsel);
    hsize_t dims[H5S_MAX_RANK];
    if (rank != H5Sget_simple_extent_ndims(d->space) || H5Sget_simple_extent_dims(fsel, dims, NULL) < 0) {
        h5fl_err("dataset '%s': the file selection's rank differs from the dataset's", d->o.path);
        goto done;
    }
    r.rank = (uint32_t)rank;
    for (int k = 0; k < rank; k++)
        r.dims[k] = dims[k];
    r.nruns = runs.n;
    if (h5fl_writer_seal_data(w, &r) != 0) /* the data checksum (flags, crc_start, dcrc) */
        goto done;
    size_t total = h5fl_record_size(r.rank, r.nruns, r.flags);
    uint8_t stackrec[1024], *rec = total <= sizeof stackrec ? stackrec : malloc(total);
    if (!rec) {
        h5fl_err("out of memory");
        goto done;
    }
    size_t hdr = h5fl_record_begin(rec, &r);
    memcpy(rec + hdr, runs.buf, runs.n * 16);
    h5fl_record_seal(rec, total);
    rc = h5fl_writer_append_index(w, rec, total);
    if (rec != stackrec)
        free(rec);
    if (rc == 0) /* every handle shares this state: all see the write at their next read */
        rc = h5fl_ix_note_write2(d, &runs, dims, r.seq, data_off, flags & H5FL_REC_FILL,
                                 (flags & H5FL_REC_FILTER) ? &r : NULL);
    if (rc == 0) /* the write stands: its statistics and user data function (stats.c) */
        h5fl_stats_note(d, &r, &runs, data);
done:
    free(runs.buf);
    return rc;
}

herr_t h5fl_dataset_write(size_t count, void *dset[], hid_t mtype[], hid_t mspace[], hid_t fspace[], hid_t dxpl,
                          const void *buf[], void **req)
{
    (void)req;
    h5fl_err_clear();
    for (size_t i = 0; i < count; i++)
        if (write_one(dset[i], mtype[i], mspace[i], fspace[i], dxpl, buf[i]) != 0) {
            h5fl_err_push(__func__);
            return -1;
        }
    return 0;
}

static int read_vstr(h5fl_dset_t *d, hid_t mtype, const sel_t *s, void *buf)
{
    if (H5Tis_variable_str(mtype) <= 0) {
        h5fl_err("dataset '%s' holds variable-length strings: read it with a variable-length string type",
                 d->o.path);
        return -1;
    }
    char **v = calloc(s->n, sizeof *v);
    if (!v) {
        h5fl_err("out of memory");
        return -1;
    }
    gather_ctx_t g = {d, (uint8_t *)v};
    int rc = h5fl_for_each_seq(s->fsel, 1, h5fl_gather_seq, &g);
    if (rc == 0) {
        copy_ctx_t c = {buf, (uint8_t *)v, 0, false};
        if (s->msel == H5S_BLOCK)
            memcpy(buf, v, s->n * sizeof *v);
        else
            rc = h5fl_for_each_seq(s->msel, sizeof(char *), h5fl_copy_seq, &c);
    }
    if (rc != 0)
        for (hsize_t i = 0; i < s->n; i++)
            free(v[i]);
    free(v);
    return rc;
}

/* Values with variable-length parts are decoded with the stored datatype, then converted to the memory
 * datatype where it differs (h5fl_blob_convert; the memory selection's values are the background). */
static int read_blob(h5fl_dset_t *d, hid_t mtype, hid_t dxpl, const sel_t *s, void *buf)
{
    htri_t eq = H5Tequal(mtype, d->type);
    size_t ts = d->tsize, ms = H5Tget_size(mtype);
    if (eq < 0 || ms == 0) {
        h5fl_err("invalid memory datatype");
        return -1;
    }
    size_t big = eq > 0 || ts > ms ? ts : ms;
    uint8_t *v = calloc(s->n, big), *bkg = NULL;
    if (!v) {
        h5fl_err("out of memory");
        return -1;
    }
    gather_ctx_t g = {d, v};
    h5fl_blob_ctx_t bx = {0};
    h5fl_blob_ctx_set_alloc(&bx, dxpl);
    d->valloc = bx.alloc;
    d->valloc_info = bx.alloc_info;
    int rc = h5fl_for_each_seq(s->fsel, 1, h5fl_gather_seq, &g);
    d->valloc = NULL;
    d->valloc_info = NULL;
    bool decoded = true; /* v holds values of the stored type to reclaim on failure */
    if (rc == 0 && eq == 0) {
        if (h5fl_needs_bkg(mtype)) {
            copy_ctx_t c = {buf, NULL, 0, true};
            if (!(bkg = malloc(s->n * ms + 1))) {
                h5fl_err("out of memory");
                rc = -1;
            } else if (s->msel == H5S_BLOCK)
                memcpy(bkg, buf, s->n * ms);
            else {
                c.flat = bkg;
                rc = h5fl_for_each_seq(s->msel, ms, h5fl_copy_seq, &c);
            }
        }
        if (rc == 0) { /* the decoded values are released by the conversion, failed or not */
            decoded = false;
            rc = h5fl_blob_convert(d->type, mtype, s->n, v, bkg, dxpl, false, "dataset", d->o.path);
        }
    }
    if (rc == 0) {
        copy_ctx_t c = {buf, v, 0, false};
        if (s->msel == H5S_BLOCK)
            memcpy(buf, v, s->n * ms);
        else
            rc = h5fl_for_each_seq(s->msel, ms, h5fl_copy_seq, &c);
    }
    if (rc != 0 && decoded) { /* free what was decoded: the caller's buffer was not handed any of it */
        h5fl_blob_reclaim(d->type, s->n, dxpl, v);
    }
    free(bkg);
    free(v);
    return rc;
}

static int read_one(h5fl_dset_t *d, hid_t mtype, hid_t mspace, hid_t fspace, hid_t dxpl, void *buf)
{
    sel_t s;
    if (!buf) {
        h5fl_err("read buffer is NULL");
        return -1;
    }
    if (d->vds)
        return h5fl_vds_io(d, mtype, mspace, fspace, dxpl, buf, false);
    if (h5fl_resolve_sel(d, mspace, fspace, &s) != 0)
        return -1;
    if (s.n == 0)
        return 0;
    if (h5fl_ix_ready(d) != 0)
        return -1;
    size_t msize = H5Tget_size(mtype);
    htri_t eq = H5Tequal(mtype, d->type);
    if (eq < 0 || msize == 0) {
        h5fl_err("invalid memory datatype");
        return -1;
    }
    hsize_t moff;
    if (d->vstr)
        return read_vstr(d, mtype, &s, buf);
    if (d->blob)
        return read_blob(d, mtype, dxpl, &s, buf);
    if (eq > 0 && h5fl_sel_contiguous(s.msel, msize, s.n, &moff)) {
        gather_ctx_t g = {d, (uint8_t *)buf + moff};
        return h5fl_for_each_seq(s.fsel, 1, h5fl_gather_seq, &g);
    }
    size_t big = msize > d->esize ? msize : d->esize;
    uint8_t *tmp = malloc(s.n * big), *bkg = NULL;
    int rc = -1;
    if (!tmp) {
        h5fl_err("out of memory staging a read of %llu elements", (unsigned long long)s.n);
        return -1;
    }
    gather_ctx_t g = {d, tmp};
    if (h5fl_for_each_seq(s.fsel, 1, h5fl_gather_seq, &g) != 0)
        goto done;
    if (eq == 0) {
        if (h5fl_check_ref_conversion(d->type, mtype, "dataset", d->o.path) != 0)
            goto done;
        if (h5fl_needs_bkg(mtype)) {
            if (!(bkg = calloc(s.n, msize))) {
                h5fl_err("out of memory");
                goto done;
            }
            copy_ctx_t c = {buf, bkg, 0, true};
            if (s.msel == H5S_BLOCK)
                memcpy(bkg, buf, s.n * msize);
            else if (h5fl_for_each_seq(s.msel, msize, h5fl_copy_seq, &c) != 0)
                goto done;
        }
        if (h5fl_convert(d->o.file, d->type, mtype, s.n, tmp, bkg, dxpl) < 0) {
            h5fl_err("cannot convert the dataset's datatype to the memory datatype");
            goto done;
        }
    }
    copy_ctx_t c = {buf, tmp, 0, false};
    if (s.msel == H5S_BLOCK)
        memcpy(buf, tmp, s.n * msize);
    else if (h5fl_for_each_seq(s.msel, msize, h5fl_copy_seq, &c) != 0)
        goto done;
    rc = 0;
done:
    free(tmp);
    free(bkg);
    return rc;
}

herr_t h5fl_dataset_read(size_t count, void *dset[], hid_t mtype[], hid_t mspace[], hid_t fspace[], hid_t dxpl,
                         void *buf[], void **req)
{
    (void)req;
    h5fl_err_clear();
    for (size_t i = 0; i < count; i++)
        if (read_one(dset[i], mtype[i], mspace[i], fspace[i], dxpl, buf[i]) != 0) {
            h5fl_err_push(__func__);
            return -1;
        }
    return 0;
}
