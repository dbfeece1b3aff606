/* Dataset callbacks: the metadata sidecar, per-writer append logs, the merged read index. */
#include "h5fl.h"

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

#define DBUF_CAP (8u << 20)   /* data append buffer (largest size) */
#define BUF_START (64u << 10) /* first size of both append buffers */
#define IBUF_CAP (1u << 20)   /* index append buffer */
#define DIRECT_MIN (256u << 10) /* a write this large skips the copy into the buffer: one pwrite */
static const char SIDECAR_MAGIC[8] = {'H', '5', 'F', 'L', 'D', 'S', '0', '1'};

/* ---------------------------------------------------------------- metadata sidecar */
static int encode_sidecar(hid_t type, hid_t space, hid_t dcpl, uint8_t **out, size_t *outlen)
{
    size_t lt = 0, ls = 0, lp = 0;
    if (H5Tencode(type, NULL, &lt) < 0 || H5Sencode2(space, NULL, &ls, H5P_DEFAULT) < 0 ||
        H5Pencode2(dcpl, NULL, &lp, H5P_DEFAULT) < 0) {
        h5fl_err("cannot encode the dataset's datatype, dataspace or creation properties");
        return -1;
    }
    size_t n = 8 + 16 + lt + ls + lp + 4;
    uint8_t *b = calloc(1, n);
    if (!b) {
        h5fl_err("out of memory");
        return -1;
    }
    memcpy(b, SIDECAR_MAGIC, 8);
    h5fl_put_u32(b + 8, H5FL_FORMAT_VERSION);
    h5fl_put_u32(b + 12, (uint32_t)lt);
    h5fl_put_u32(b + 16, (uint32_t)ls);
    h5fl_put_u32(b + 20, (uint32_t)lp);
    uint8_t *p = b + 24;
    if (H5Tencode(type, p, &lt) < 0 || H5Sencode2(space, p + lt, &ls, H5P_DEFAULT) < 0 ||
        H5Pencode2(dcpl, p + lt + ls, &lp, H5P_DEFAULT) < 0) {
        free(b);
        h5fl_err("cannot encode the dataset metadata");
        return -1;
    }
    h5fl_put_u32(b + n - 4, h5fl_crc32c(0, b, n - 4));
    *out = b;
    *outlen = n;
    return 0;
}

static int write_sidecar(const char *dir, hid_t type, hid_t space, hid_t dcpl, bool sync)
{
    uint8_t *b;
    size_t n;
    if (encode_sidecar(type, space, dcpl, &b, &n) != 0)
        return -1;
    int rc = h5fl_write_file_atomic(dir, H5FL_DSET_FILE, b, n, sync);
    /* Mirror to an extended attribute where the file system supports them (best effort). */
    if (rc == 0)
        (void)setxattr(dir, H5FL_XATTR, b, n, 0);
    free(b);
    return rc;
}

static int read_sidecar(const char *dir, hid_t *type, hid_t *space, hid_t *dcpl)
{
    char *path = h5fl_join(dir, H5FL_DSET_FILE);
    void *vb = NULL;
    size_t n = 0;
    int rc = -1;
    *type = *space = *dcpl = H5I_INVALID_HID;
    if (!path || h5fl_read_file(path, &vb, &n) != 0)
        goto done;
    uint8_t *b = vb;
    if (n < 28 || memcmp(b, SIDECAR_MAGIC, 8) != 0 || h5fl_crc32c(0, b, n - 4) != h5fl_get_u32(b + n - 4)) {
        h5fl_err("dataset metadata %s is corrupt (bad magic or checksum)", path);
        goto done;
    }
    if (h5fl_get_u32(b + 8) != H5FL_FORMAT_VERSION) {
        h5fl_err("dataset metadata %s has format %u, expected %d", path, h5fl_get_u32(b + 8),
                 H5FL_FORMAT_VERSION);
        goto done;
    }
    size_t lt = h5fl_get_u32(b + 12), ls = h5fl_get_u32(b + 16), lp = h5fl_get_u32(b + 20);
    if (24 + lt + ls + lp + 4 != n) {
        h5fl_err("dataset metadata %s is corrupt (inconsistent lengths)", path);
        goto done;
    }
    *type = H5Tdecode(b + 24);
    *space = H5Sdecode(b + 24 + lt);
    *dcpl = H5Pdecode(b + 24 + lt + ls);
    if (*type < 0 || *space < 0 || *dcpl < 0) {
        h5fl_err("dataset metadata %s cannot be decoded", path);
        goto done;
    }
    rc = 0;
done:
    if (rc != 0) {
        if (*type >= 0)
            H5Tclose(*type);
        if (*space >= 0)
            H5Sclose(*space);
        if (*dcpl >= 0)
            H5Pclose(*dcpl);
        *type = *space = *dcpl = H5I_INVALID_HID;
    }
    free(vb);
    free(path);
    return rc;
}

/* ---------------------------------------------------------------- dataset object */
static void ix_free(h5fl_index_t *ix)
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

static int writer_flush(h5fl_writer_t *w, bool sync)
{
    if (w->dlen) {
        if (h5fl_pwrite_all(w->dfd, w->dbuf, w->dlen, w->dend) != 0)
            return -1;
        w->dend += w->dlen;
        w->dlen = 0;
        w->dirty_sync = true;
    }
    if (sync && w->dirty_sync && fdatasync(w->dfd) != 0) {
        h5fl_err("fdatasync of the data log failed: %s", strerror(errno));
        return -1;
    }
    if (w->ilen) {
        if (h5fl_pwrite_all(w->ifd, w->ibuf, w->ilen, w->iend) != 0)
            return -1;
        w->iend += w->ilen;
        w->ilen = 0;
        w->dirty_sync = true;
    }
    if (sync && w->dirty_sync) {
        if (fdatasync(w->ifd) != 0) {
            h5fl_err("fdatasync of the index log failed: %s", strerror(errno));
            return -1;
        }
        w->dirty_sync = false;
    }
    return 0;
}

static void writer_free(h5fl_writer_t *w)
{
    if (!w)
        return;
    if (w->dfd >= 0)
        close(w->dfd);
    if (w->ifd >= 0)
        close(w->ifd);
    free(w->dbuf);
    free(w->ibuf);
    free(w->dpath);
    free(w);
}

void h5fl_dset_forget_index(h5fl_dset_t *d)
{
    ix_free(d->ix);
    d->ix = NULL;
}

int h5fl_dset_flush(h5fl_dset_t *d, bool sync)
{
    return d->w ? writer_flush(d->w, sync && d->o.file->fsync) : 0;
}

static h5fl_dset_t *dset_new(h5fl_file_t *f, const char *dir, const char *path, hid_t type, hid_t space,
                             hid_t dcpl, hid_t dapl)
{
    h5fl_dset_t *d = calloc(1, sizeof *d);
    if (!d) {
        h5fl_err("out of memory");
        return NULL;
    }
    h5fl_obj_init(&d->o, H5I_DATASET, f, path, dir);
    d->type = type;
    d->space = space;
    d->dcpl = dcpl;
    d->dapl = (dapl >= 0 && dapl != H5P_DEFAULT) ? H5Pcopy(dapl) : H5Pcreate(H5P_DATASET_ACCESS);
    d->vstr = H5Tis_variable_str(type) > 0;
    d->esize = d->vstr ? 16 : H5Tget_size(type);
    d->fill = calloc(1, d->esize ? d->esize : 1);
    if (!d->o.path || !d->o.dir || !d->fill || d->esize == 0) {
        h5fl_err("cannot set up dataset '%s'", path);
        goto fail;
    }
    H5D_fill_value_t fs;
    if (!d->vstr && H5Pfill_value_defined(dcpl, &fs) >= 0 && fs != H5D_FILL_VALUE_UNDEFINED)
        if (H5Pget_fill_value(dcpl, type, d->fill) < 0)
            memset(d->fill, 0, d->esize);
    d->next_open = f->open_dsets;
    f->open_dsets = d;
    return d;
fail:
    H5Tclose(type);
    H5Sclose(space);
    H5Pclose(dcpl);
    if (d->dapl >= 0)
        H5Pclose(d->dapl);
    free(d->fill);
    h5fl_obj_release(&d->o);
    free(d);
    return NULL;
}

static void dset_free(h5fl_dset_t *d)
{
    h5fl_file_t *f = d->o.file;
    for (h5fl_dset_t **p = &f->open_dsets; *p; p = &(*p)->next_open)
        if (*p == d) {
            *p = d->next_open;
            break;
        }
    if (d->w && --d->w->users == 0)
        writer_free(d->w);
    ix_free(d->ix);
    H5Tclose(d->type);
    H5Sclose(d->space);
    H5Pclose(d->dcpl);
    H5Pclose(d->dapl);
    free(d->fill);
    h5fl_obj_release(&d->o);
    free(d);
}

void *h5fl_dset_open_dir(h5fl_file_t *f, const char *dir, const char *path)
{
    hid_t t, s, p;
    if (read_sidecar(dir, &t, &s, &p) != 0)
        return NULL;
    return dset_new(f, dir, path, t, s, p, H5P_DEFAULT);
}

int h5fl_dset_relink(h5fl_dset_t *d, const char *dir, const char *path)
{
    char *nd = h5fl_strdup(dir), *np = h5fl_strdup(path);
    char *dp = NULL;
    if (nd && d->w) {
        const char *base = strrchr(d->w->dpath, '/');
        dp = h5fl_join(nd, base + 1);
    }
    if (!nd || !np || (d->w && !dp)) {
        free(nd);
        free(np);
        free(dp);
        return -1;
    }
    free(d->o.dir);
    free(d->o.path);
    d->o.dir = nd;
    d->o.path = np;
    d->o.anon = false;
    if (dp) { /* open descriptors follow the renamed directory; only the name changes */
        free(d->w->dpath);
        d->w->dpath = dp;
    }
    return 0;
}

/* ---------------------------------------------------------------- create / open */
static int check_supported(hid_t type, hid_t dcpl)
{
    H5T_class_t cls = H5Tget_class(type);
    if (cls == H5T_VLEN) {
        h5fl_err("variable-length sequences are not supported in h5flow_log datasets (variable-length "
                 "strings are)");
        return -1;
    }
    if (cls == H5T_REFERENCE) {
        h5fl_err("reference datatypes are not supported by h5flow_log");
        return -1;
    }
    if ((cls != H5T_STRING && H5Tdetect_class(type, H5T_VLEN) > 0) ||
        (cls == H5T_COMPOUND && H5Tdetect_class(type, H5T_STRING) > 0 && H5Tdetect_class(type, H5T_VLEN) > 0) ||
        H5Tdetect_class(type, H5T_REFERENCE) > 0) {
        h5fl_err("datatypes containing variable-length or reference members are not supported");
        return -1;
    }
    if (dcpl != H5P_DEFAULT && dcpl >= 0) {
        if (H5Pget_nfilters(dcpl) > 0) {
            h5fl_err("h5flow_log does not apply filters (compression, shuffle, ...): create the dataset "
                     "without them");
            return -1;
        }
        if (H5Pget_layout(dcpl) == H5D_VIRTUAL) {
            h5fl_err("virtual datasets are not supported by h5flow_log");
            return -1;
        }
        if (H5Pget_external_count(dcpl) > 0) {
            h5fl_err("external storage is not supported by h5flow_log");
            return -1;
        }
    }
    return 0;
}

void *h5fl_dataset_create(void *obj, const H5VL_loc_params_t *lp, const char *name, hid_t lcpl, hid_t type,
                          hid_t space, hid_t dcpl, hid_t dapl, hid_t dxpl, void **req)
{
    (void)lp;
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    h5fl_file_t *f = o->file;
    h5fl_loc_t parent = {0};
    char leaf[NAME_MAX + 1], *leafname = NULL, *dir = NULL, *path = NULL;
    hid_t t = H5I_INVALID_HID, s = H5I_INVALID_HID, p = H5I_INVALID_HID;
    h5fl_dset_t *d = NULL;
    h5fl_collective_begin(f);
    if (!h5fl_writable(f) || check_supported(type, dcpl) != 0 ||
        h5fl_check_plist(dcpl, H5P_DATASET_CREATE, "dataset creation property list") != 0 ||
        h5fl_check_plist(dapl, H5P_DATASET_ACCESS, "dataset access property list") != 0 ||
        h5fl_check_plist(lcpl, H5P_LINK_CREATE, "link creation property list") != 0 ||
        h5fl_check_no_crt_order(dcpl, false) != 0)
        goto done;
    unsigned crt = 0;
    if (lcpl != H5P_DEFAULT && lcpl >= 0)
        H5Pget_create_intermediate_group(lcpl, &crt);
    t = H5Tcopy(type);
    s = H5Scopy(space);
    p = (dcpl != H5P_DEFAULT && dcpl >= 0) ? H5Pcopy(dcpl) : H5Pcreate(H5P_DATASET_CREATE);
    if (t < 0 || s < 0 || p < 0) {
        h5fl_err("cannot copy the dataset's type, space or creation properties");
        goto done;
    }
    H5Sselect_all(s);
    int st = 0;
    if (!name) { /* anonymous (h5py's `group[name] = array` creates, writes, then links) */
        snprintf(leaf, sizeof leaf, H5FL_ANON_PREFIX "%llu.%llu", (unsigned long long)f->epoch,
                 (unsigned long long)f->anon_counter++);
        dir = h5fl_join(f->o.dir, leaf);
        path = h5fl_strdup("");
        if (!dir || !path)
            st = -1;
    } else {
        int mode = f->rank == 0 ? (crt ? H5FL_MKPARENTS : H5FL_CHECK) : H5FL_COMPUTE;
        st = h5fl_resolve_parent(o, name, mode, &parent, leaf, sizeof leaf, &leafname);
    }
    if (st == 0 && name) {
        dir = h5fl_join(parent.dir, leaf);
        size_t a = strlen(parent.path);
        path = malloc(a + strlen(leafname) + 2);
        if (!dir || !path)
            st = -1;
        else
            sprintf(path, "%s%s%s", parent.path, (a == 1) ? "" : "/", leafname);
    }
    if (st == 0 && f->rank == 0) {
        if (mkdir(dir, 0755) != 0 && !(errno == EEXIST && h5fl_dir_type(dir, false) == H5I_BADID)) {
            h5fl_err(errno == EEXIST ? "cannot create dataset '%s': a link with this name already exists"
                                     : "cannot create dataset '%s': %s",
                     path, strerror(errno));
            st = -1;
        }
        if (st == 0 && write_sidecar(dir, t, s, p, f->fsync) != 0)
            st = -1;
    }
    st = h5fl_collective(f, st);
    if (st == 0) {
        d = dset_new(f, dir, path, t, s, p, dapl);
        t = s = p = H5I_INVALID_HID; /* owned by d (or freed by dset_new on failure) */
        if (d)
            d->o.anon = !name;
    }
done:
    if (t >= 0)
        H5Tclose(t);
    if (s >= 0)
        H5Sclose(s);
    if (p >= 0)
        H5Pclose(p);
    free(leafname);
    free(dir);
    free(path);
    h5fl_loc_free(&parent);
    if (!d)
        h5fl_err_push(__func__);
    return d;
}

void *h5fl_dataset_open(void *obj, const H5VL_loc_params_t *lp, const char *name, hid_t dapl, hid_t dxpl,
                        void **req)
{
    (void)lp;
    (void)dapl;
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    h5fl_loc_t loc;
    void *d = NULL;
    if (h5fl_resolve(o, name, &loc) == 0) {
        if (loc.type != H5I_DATASET)
            h5fl_err(loc.type == H5I_BADID ? "dataset '%s' does not exist" : "'%s' is not a dataset", name);
        else
            d = h5fl_dset_open_dir(o->file, loc.dir, loc.path);
        h5fl_loc_free(&loc);
    }
    if (!d)
        h5fl_err_push(__func__);
    return d;
}

/* ---------------------------------------------------------------- the writer */
static int writer_open(h5fl_dset_t *d)
{
    h5fl_file_t *f = d->o.file;
    h5fl_writer_t *w = calloc(1, sizeof *w);
    if (!w) {
        h5fl_err("out of memory");
        return -1;
    }
    w->dfd = w->ifd = -1;
    w->id = (uint32_t)f->rank;
    w->epoch = f->epoch;
    w->dcap = BUF_START; /* grows up to DBUF_CAP / IBUF_CAP: many open datasets stay cheap */
    w->icap = BUF_START;
    w->dbuf = malloc(w->dcap);
    w->ibuf = malloc(w->icap);
    char name[64];
    snprintf(name, sizeof name, H5FL_LOG_PREFIX "%llu.%u.dat", (unsigned long long)w->epoch, w->id);
    w->dpath = h5fl_join(d->o.dir, name);
    snprintf(name, sizeof name, H5FL_LOG_PREFIX "%llu.%u.idx", (unsigned long long)w->epoch, w->id);
    char *ipath = h5fl_join(d->o.dir, name);
    if (!w->dbuf || !w->ibuf || !w->dpath || !ipath) {
        h5fl_err("out of memory");
        goto fail;
    }
    w->dfd = open(w->dpath, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    w->ifd = open(ipath, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (w->dfd < 0 || w->ifd < 0) {
        h5fl_err("cannot open the write logs of dataset '%s': %s", d->o.path, strerror(errno));
        goto fail;
    }
    /* Reopened in the same epoch (the dataset was closed and opened again): continue after the last
     * complete record, so sequence numbers keep increasing and a torn tail is cut off. */
    struct stat st;
    if (fstat(w->dfd, &st) != 0)
        goto fail;
    w->dend = (uint64_t)st.st_size;
    void *ib = NULL;
    size_t il = 0;
    if (h5fl_read_file(ipath, &ib, &il) != 0)
        goto fail;
    size_t pos = 0;
    for (;;) {
        h5fl_record_t r;
        ssize_t k = h5fl_record_parse((uint8_t *)ib + pos, il - pos, &r);
        if (k <= 0)
            break;
        pos += (size_t)k;
        uint64_t c = (r.seq.order >> 20) + 1;
        if (c > w->counter)
            w->counter = c;
    }
    free(ib);
    if (w->counter < d->min_counter)
        w->counter = d->min_counter;
    if (pos != il && ftruncate(w->ifd, (off_t)pos) != 0) {
        h5fl_err("cannot cut the torn tail of %s: %s", ipath, strerror(errno));
        goto fail;
    }
    w->iend = pos;
    free(ipath);
    d->w = w;
    return 0;
fail:
    free(ipath);
    writer_free(w);
    return -1;
}

/* Handles of one dataset opened twice in one file share one writer: two appenders to the same logs
 * would overwrite each other. */
static int writer_get(h5fl_dset_t *d)
{
    for (h5fl_dset_t *o = d->o.file->open_dsets; o; o = o->next_open)
        if (o != d && o->w && !strcmp(o->o.dir, d->o.dir)) {
            d->w = o->w;
            d->w->users++;
            return 0;
        }
    if (writer_open(d) != 0)
        return -1;
    d->w->users = 1;
    return 0;
}

/* Grow an append buffer towards `max` so that `need` bytes fit; false if it is already at `max`. */
static bool grow(uint8_t **buf, size_t *cap, size_t need, size_t max)
{
    if (need <= *cap)
        return true;
    if (*cap >= max)
        return false;
    size_t n = *cap;
    while (n < need && n < max)
        n *= 2;
    if (n > max)
        n = max;
    uint8_t *nb = realloc(*buf, n);
    if (!nb)
        return false;
    *buf = nb;
    *cap = n;
    return need <= n;
}

static int append_data(h5fl_writer_t *w, const void *src, size_t len)
{
    if (len < DIRECT_MIN)
        grow(&w->dbuf, &w->dcap, w->dlen + len, DBUF_CAP);
    if (w->dlen + len <= w->dcap) {
        memcpy(w->dbuf + w->dlen, src, len);
        w->dlen += len;
        return 0;
    }
    if (w->dlen) {
        if (h5fl_pwrite_all(w->dfd, w->dbuf, w->dlen, w->dend) != 0)
            return -1;
        w->dend += w->dlen;
        w->dlen = 0;
    }
    if (len >= DIRECT_MIN || len > w->dcap) {
        if (h5fl_pwrite_all(w->dfd, src, len, w->dend) != 0)
            return -1;
        w->dend += len;
        w->dirty_sync = true;
        return 0;
    }
    memcpy(w->dbuf, src, len);
    w->dlen = len;
    return 0;
}

/* An index record may only reach the disk after the data it points to. */
static int append_index(h5fl_writer_t *w, const uint8_t *rec, size_t len)
{
    grow(&w->ibuf, &w->icap, w->ilen + len, IBUF_CAP);
    if (w->ilen + len > w->icap) {
        if (writer_flush(w, false) != 0)
            return -1;
        if (len > w->icap) {
            if (h5fl_pwrite_all(w->ifd, rec, len, w->iend) != 0)
                return -1;
            w->iend += len;
            return 0;
        }
    }
    memcpy(w->ibuf + w->ilen, rec, len);
    w->ilen += len;
    return 0;
}

/* ---------------------------------------------------------------- selections */
typedef int (*seq_fn)(void *ctx, hsize_t off, size_t len);

static int for_each_seq(hid_t space, size_t esize, seq_fn fn, void *ctx)
{
    hid_t it = H5Ssel_iter_create(space, esize, 0);
    if (it < 0) {
        h5fl_err("cannot iterate over the selection");
        return -1;
    }
    enum { NSEQ = 512 };
    hsize_t off[NSEQ];
    size_t len[NSEQ];
    int rc = 0;
    for (;;) {
        size_t nseq = 0, nelem = 0;
        if (H5Ssel_iter_get_seq_list(it, NSEQ, (size_t)-1, &nseq, &nelem, off, len) < 0) {
            h5fl_err("cannot iterate over the selection");
            rc = -1;
            break;
        }
        if (nseq == 0)
            break;
        for (size_t i = 0; i < nseq && rc == 0; i++)
            rc = fn(ctx, off[i], len[i]);
        if (rc)
            break;
    }
    H5Ssel_iter_close(it);
    return rc;
}

/* Whether the selection of `space` is one contiguous byte range; its offset in *off. */
static bool contiguous(hid_t space, size_t esize, hsize_t npoints, hsize_t *off)
{
    if (space == H5S_BLOCK) {
        *off = 0;
        return true;
    }
    hid_t it = H5Ssel_iter_create(space, esize, 0);
    if (it < 0)
        return false;
    hsize_t o[1];
    size_t l[1], nseq = 0, nelem = 0;
    bool ok = H5Ssel_iter_get_seq_list(it, 1, (size_t)-1, &nseq, &nelem, o, l) >= 0 && nseq == 1 &&
              l[0] == npoints * esize;
    H5Ssel_iter_close(it);
    if (ok)
        *off = o[0];
    return ok || npoints == 0;
}

typedef struct copy_ctx {
    uint8_t *mem;  /* user buffer */
    uint8_t *flat; /* packed buffer */
    size_t pos;
    bool to_flat;
} copy_ctx_t;

static int copy_seq(void *vctx, hsize_t off, size_t len)
{
    copy_ctx_t *c = vctx;
    if (c->to_flat)
        memcpy(c->flat + c->pos, c->mem + off, len);
    else
        memcpy(c->mem + off, c->flat + c->pos, len);
    c->pos += len;
    return 0;
}

typedef struct runs_ctx {
    uint8_t *buf;
    size_t n, cap;
    uint64_t elems;
} runs_ctx_t;

static int add_run(void *vctx, hsize_t off, size_t len)
{
    runs_ctx_t *r = vctx;
    if (r->n == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        uint8_t *nb = realloc(r->buf, cap * 16);
        if (!nb) {
            h5fl_err("out of memory");
            return -1;
        }
        r->buf = nb;
        r->cap = cap;
    }
    h5fl_put_u64(r->buf + 16 * r->n, off);
    h5fl_put_u64(r->buf + 16 * r->n + 8, len);
    r->n++;
    r->elems += len;
    return 0;
}

typedef struct sel {
    hid_t fsel, msel; /* msel may be H5S_BLOCK */
    hsize_t n;
} sel_t;

static int resolve_sel(h5fl_dset_t *d, hid_t mspace, hid_t fspace, sel_t *s)
{
    if (fspace == H5S_BLOCK || fspace == H5S_PLIST) {
        h5fl_err("H5S_BLOCK / H5S_PLIST are not valid file dataspaces");
        return -1;
    }
    s->fsel = fspace == H5S_ALL ? d->space : fspace;
    hssize_t n = H5Sget_select_npoints(s->fsel);
    if (n < 0) {
        h5fl_err("invalid file selection");
        return -1;
    }
    s->n = (hsize_t)n;
    if (fspace != H5S_ALL) {
        htri_t ok = H5Sselect_valid(fspace);
        int r1 = H5Sget_simple_extent_ndims(fspace), r2 = H5Sget_simple_extent_ndims(d->space);
        if (ok <= 0 || r1 != r2) {
            h5fl_err("the file selection lies outside the dataset's extent");
            return -1;
        }
    }
    if (mspace == H5S_PLIST) {
        h5fl_err("H5S_PLIST memory dataspaces are not supported by h5flow_log");
        return -1;
    }
    s->msel = mspace == H5S_ALL ? s->fsel : mspace;
    if (mspace != H5S_BLOCK && H5Sget_select_npoints(s->msel) != n) {
        h5fl_err("memory and file selections have different numbers of elements");
        return -1;
    }
    return 0;
}


/* ---------------------------------------------------------------- the index */
static int ix_add_log(h5fl_index_t *ix, const char *path)
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

typedef struct ext_vec {
    h5fl_extent_t *v;
    size_t n, cap;
} ext_vec_t;

static int ev_push(ext_vec_t *e, uint64_t start, uint64_t len, h5fl_seq_t seq, uint32_t log, uint64_t loff)
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
        return ev_push(ev, start, len, seq, log, loff);
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
            if (ev_push(ev, lin, np, seq, log, loff) != 0)
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
    int li = ix_add_log(ix, dpath);
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
    if (d->w && writer_flush(d->w, false) != 0)
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
        ix_free(ix);
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
        ix_free(ix);
        return -1;
    }
    d->ix = ix;
    return 0;
}

static int ix_ready(h5fl_dset_t *d)
{
    if (!d->ix && ix_build(d) != 0)
        return -1;
    h5fl_index_t *ix = d->ix;
    if (ix->npending) {
        if (writer_flush(d->w, false) != 0)
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
static int ix_note_write(h5fl_dset_t *d, const runs_ctx_t *runs, h5fl_seq_t seq, uint64_t data_off, bool fill)
{
    h5fl_index_t *ix = d->ix;
    if (!ix)
        return 0;
    if (!fill && ix->own_log < 0) {
        int li = ix_add_log(ix, d->w->dpath);
        if (li < 0)
            return -1;
        ix->own_log = li;
    }
    uint64_t loff = data_off;
    for (size_t j = 0; j < runs->n; j++) {
        uint64_t s = h5fl_get_u64(runs->buf + 16 * j), n = h5fl_get_u64(runs->buf + 16 * j + 8);
        ext_vec_t v = {ix->pending, ix->npending, ix->cappending};
        int r = ev_push(&v, s, n, seq, fill ? H5FL_FILL_LOG : (uint32_t)ix->own_log, fill ? 0 : loff);
        ix->pending = v.v;
        ix->npending = v.n;
        ix->cappending = v.cap;
        if (r != 0)
            return -1;
        loff += n * d->esize;
    }
    return 0;
}

/* ---------------------------------------------------------------- write */
static int append_record(h5fl_dset_t *d, hid_t fsel, uint64_t data_off, uint64_t nbytes, uint32_t flags);
typedef struct gather_ctx {
    h5fl_dset_t *d;
    uint8_t *out;
} gather_ctx_t;
static int gather_seq(void *vctx, hsize_t start, size_t len);

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
    else if (for_each_seq(s->msel, sizeof(char *), copy_seq, &c) != 0) {
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
        if (l && append_data(w, v[i], l) != 0)
            goto done;
    }
    uint64_t data_off = w->dend + w->dlen;
    if (append_data(w, pairs, s->n * 16) != 0)
        goto done;
    rc = append_record(d, s->fsel, data_off, s->n * 16, 0);
done:
    free(v);
    free(pairs);
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
    if (!h5fl_writable(f) || resolve_sel(d, mspace, fspace, &s) != 0)
        return -1;
    if (s.n == 0)
        return 0;
    if (!d->w && writer_get(d) != 0)
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
    if (d->vstr)
        return write_vstr(d, mtype, &s, buf);
    if (eq > 0 && contiguous(s.msel, msize, s.n, &moff)) {
        if (append_data(w, (const uint8_t *)buf + moff, nbytes) != 0)
            goto done;
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
        else if (for_each_seq(s.msel, msize, copy_seq, &c) != 0)
            goto done;
        if (eq == 0) {
            if (h5fl_needs_bkg(d->type)) { /* members the memory type lacks keep their stored values */
                if (!(bkg = calloc(s.n, d->esize))) {
                    h5fl_err("out of memory");
                    goto done;
                }
                gather_ctx_t g = {d, bkg};
                if (ix_ready(d) != 0 || for_each_seq(s.fsel, 1, gather_seq, &g) != 0)
                    goto done;
            }
            if (H5Tconvert(mtype, d->type, s.n, tmp, bkg, dxpl) < 0) {
                h5fl_err("cannot convert the memory datatype to the dataset's datatype");
                goto done;
            }
        }
        if (append_data(w, tmp, nbytes) != 0)
            goto done;
    }
    rc = append_record(d, s.fsel, data_off, nbytes, 0);
done:
    free(tmp);
    free(bkg);
    return rc;
}

/* Append the index record of a write whose data is at data_off (nbytes) in this writer's data log. */
static int append_record(h5fl_dset_t *d, hid_t fsel, uint64_t data_off, uint64_t nbytes, uint32_t flags)
{
    h5fl_writer_t *w = d->w;
    runs_ctx_t runs = {0};
    int rc = -1;
    if (for_each_seq(fsel, 1, add_run, &runs) != 0)
        goto done;
    h5fl_record_t r = {0};
    r.seq.epoch = w->epoch;
    r.seq.order = (w->counter++ << 20) | (w->id & 0xFFFFF);
    r.data_off = data_off;
    r.nbytes = nbytes;
    r.flags = flags;
    int rank = H5Sget_simple_extent_ndims(d->space);
    hsize_t dims[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(d->space, dims, NULL);
    r.rank = (uint32_t)rank;
    for (int k = 0; k < rank; k++)
        r.dims[k] = dims[k];
    r.nruns = runs.n;
    size_t total = h5fl_record_size(r.rank, r.nruns);
    uint8_t stackrec[1024], *rec = total <= sizeof stackrec ? stackrec : malloc(total);
    if (!rec) {
        h5fl_err("out of memory");
        goto done;
    }
    size_t hdr = h5fl_record_begin(rec, &r);
    memcpy(rec + hdr, runs.buf, runs.n * 16);
    h5fl_record_seal(rec, total);
    rc = append_index(w, rec, total);
    if (rec != stackrec)
        free(rec);
    if (rc == 0)
        for (h5fl_dset_t *o = d->o.file->open_dsets; o && rc == 0; o = o->next_open)
            if (o->w == w) /* every handle sharing these logs sees the write at its next read */
                rc = ix_note_write(o, &runs, r.seq, data_off, flags & H5FL_REC_FILL);
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

/* ---------------------------------------------------------------- read */
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

static int gather_seq(void *vctx, hsize_t start, size_t len)
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
                    if (!(((char **)g->out)[i] = h5fl_strdup("")))
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
                    if (!(((char **)g->out)[i] = h5fl_strdup("")))
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
    int rc = for_each_seq(s->fsel, 1, gather_seq, &g);
    if (rc == 0) {
        copy_ctx_t c = {buf, (uint8_t *)v, 0, false};
        if (s->msel == H5S_BLOCK)
            memcpy(buf, v, s->n * sizeof *v);
        else
            rc = for_each_seq(s->msel, sizeof(char *), copy_seq, &c);
    }
    if (rc != 0)
        for (hsize_t i = 0; i < s->n; i++)
            free(v[i]);
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
    if (resolve_sel(d, mspace, fspace, &s) != 0)
        return -1;
    if (s.n == 0)
        return 0;
    if (ix_ready(d) != 0)
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
    if (eq > 0 && contiguous(s.msel, msize, s.n, &moff)) {
        gather_ctx_t g = {d, (uint8_t *)buf + moff};
        return for_each_seq(s.fsel, 1, gather_seq, &g);
    }
    size_t big = msize > d->esize ? msize : d->esize;
    uint8_t *tmp = malloc(s.n * big), *bkg = NULL;
    int rc = -1;
    if (!tmp) {
        h5fl_err("out of memory staging a read of %llu elements", (unsigned long long)s.n);
        return -1;
    }
    gather_ctx_t g = {d, tmp};
    if (for_each_seq(s.fsel, 1, gather_seq, &g) != 0)
        goto done;
    if (eq == 0) {
        if (h5fl_needs_bkg(mtype)) {
            if (!(bkg = calloc(s.n, msize))) {
                h5fl_err("out of memory");
                goto done;
            }
            copy_ctx_t c = {buf, bkg, 0, true};
            if (s.msel == H5S_BLOCK)
                memcpy(bkg, buf, s.n * msize);
            else if (for_each_seq(s.msel, msize, copy_seq, &c) != 0)
                goto done;
        }
        if (H5Tconvert(d->type, mtype, s.n, tmp, bkg, dxpl) < 0) {
            h5fl_err("cannot convert the dataset's datatype to the memory datatype");
            goto done;
        }
    }
    copy_ctx_t c = {buf, tmp, 0, false};
    if (s.msel == H5S_BLOCK)
        memcpy(buf, tmp, s.n * msize);
    else if (for_each_seq(s.msel, msize, copy_seq, &c) != 0)
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

/* ---------------------------------------------------------------- get / specific / close */
static hsize_t storage_size(const h5fl_dset_t *d)
{
    hsize_t total = 0;
    DIR *dir = opendir(d->o.dir);
    if (!dir)
        return 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t l = strlen(e->d_name);
        if (!strncmp(e->d_name, H5FL_LOG_PREFIX, strlen(H5FL_LOG_PREFIX)) && l > 4 &&
            !strcmp(e->d_name + l - 4, ".dat")) {
            char *p = h5fl_join(d->o.dir, e->d_name);
            struct stat st;
            if (p && stat(p, &st) == 0)
                total += (hsize_t)st.st_size;
            free(p);
        }
    }
    closedir(dir);
    return total + (d->w ? d->w->dlen : 0);
}

herr_t h5fl_dataset_get(void *obj, H5VL_dataset_get_args_t *args, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_dset_t *d = obj;
    switch (args->op_type) {
        case H5VL_DATASET_GET_DAPL:
            if ((args->args.get_dapl.dapl_id = H5Pcopy(d->dapl)) >= 0)
                return 0;
            break;
        case H5VL_DATASET_GET_DCPL:
            if ((args->args.get_dcpl.dcpl_id = H5Pcopy(d->dcpl)) >= 0)
                return 0;
            break;
        case H5VL_DATASET_GET_SPACE:
            if ((args->args.get_space.space_id = H5Scopy(d->space)) >= 0)
                return 0;
            break;
        case H5VL_DATASET_GET_SPACE_STATUS:
            *args->args.get_space_status.status = H5D_SPACE_STATUS_ALLOCATED;
            return 0;
        case H5VL_DATASET_GET_STORAGE_SIZE:
            *args->args.get_storage_size.storage_size = storage_size(d);
            return 0;
        case H5VL_DATASET_GET_TYPE:
            if ((args->args.get_type.type_id = H5Tcopy(d->type)) >= 0)
                return 0;
            break;
        default:
            h5fl_err("dataset get operation %d is not supported", (int)args->op_type);
    }
    h5fl_err_push(__func__);
    return -1;
}

/* A shrink discards the elements outside the new extent (growing again shows the fill value): a fill
 * record over them, ordered after every earlier write of this epoch on every rank (collective). */
static int shrink_fill(h5fl_dset_t *d, int rank, const hsize_t *dims, const hsize_t *size)
{
    h5fl_file_t *f = d->o.file;
    uint64_t c = d->w ? d->w->counter : 0;
    if (c < d->min_counter)
        c = d->min_counter;
    if (f->comm != MPI_COMM_NULL && f->size > 1) {
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, &c, 1, MPI_UINT64_T, MPI_MAX, f->comm, &req);
        h5fl_mpi_wait(&req);
    }
    d->min_counter = c + 1;
    if (d->w && d->w->counter < c + 1)
        d->w->counter = c + 1;
    hid_t gone = H5Screate_simple(rank, dims, NULL);
    hsize_t start[H5S_MAX_RANK] = {0}, keep[H5S_MAX_RANK];
    bool empty = false;
    for (int k = 0; k < rank; k++) {
        keep[k] = size[k] < dims[k] ? size[k] : dims[k];
        empty = empty || keep[k] == 0;
    }
    int rc = -1;
    if (gone < 0 || H5Sselect_all(gone) < 0 ||
        (!empty && H5Sselect_hyperslab(gone, H5S_SELECT_NOTB, start, NULL, keep, NULL) < 0)) {
        h5fl_err("cannot compute the region a shrink discards");
        goto done;
    }
    if (f->rank == 0) {
        if (!d->w && writer_get(d) != 0)
            goto done;
        d->w->counter = c;
        if (append_record(d, gone, 0, 0, H5FL_REC_FILL) != 0 || writer_flush(d->w, false) != 0)
            goto done; /* flushed: ranks that rebuild their index from the logs see it */
    } else if (d->ix) { /* the same record, seen from here: merge it at the next read */
        runs_ctx_t runs = {0};
        h5fl_seq_t seq = {f->epoch, c << 20};
        int r = for_each_seq(gone, 1, add_run, &runs);
        if (r == 0)
            r = ix_note_write(d, &runs, seq, 0, true);
        free(runs.buf);
        if (r != 0)
            goto done;
    }
    rc = 0;
done:
    if (gone >= 0)
        H5Sclose(gone);
    return rc;
}

static int set_extent(h5fl_dset_t *d, const hsize_t *size)
{
    h5fl_file_t *f = d->o.file;
    if (!h5fl_writable(f))
        return -1;
    h5fl_collective_begin(f);
    int rank = H5Sget_simple_extent_ndims(d->space);
    hsize_t dims[H5S_MAX_RANK], maxd[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(d->space, dims, maxd);
    if (H5Pget_layout(d->dcpl) != H5D_CHUNKED) {
        h5fl_err("cannot change the extent of '%s': only chunked datasets can (as in HDF5)", d->o.path);
        return -1;
    }
    bool trailing = false, shrink = false;
    for (int k = 0; k < rank; k++) {
        if (maxd[k] != H5S_UNLIMITED && size[k] > maxd[k]) {
            h5fl_err("cannot extend dimension %d of '%s' to %llu: its maximum is %llu", k, d->o.path,
                     (unsigned long long)size[k], (unsigned long long)maxd[k]);
            return -1;
        }
        if (k > 0 && size[k] != dims[k])
            trailing = true;
        if (size[k] < dims[k])
            shrink = true;
    }
    if (shrink && shrink_fill(d, rank, dims, size) != 0)
        return -1;
    hid_t ns = H5Scopy(d->space);
    if (ns < 0 || H5Sset_extent_simple(ns, rank, size, maxd) < 0) {
        h5fl_err("cannot set the new extent");
        if (ns >= 0)
            H5Sclose(ns);
        return -1;
    }
    int st = 0;
    if (f->rank == 0)
        st = write_sidecar(d->o.dir, d->type, ns, d->dcpl, f->fsync);
    if (h5fl_collective(f, st) != 0) {
        H5Sclose(ns);
        return -1;
    }
    H5Sclose(d->space);
    d->space = ns;
    /* other handles of this dataset in this process see the new extent too */
    for (h5fl_dset_t *o = f->open_dsets; o; o = o->next_open)
        if (o != d && !strcmp(o->o.dir, d->o.dir)) {
            hid_t c = H5Scopy(ns);
            if (c >= 0) {
                H5Sclose(o->space);
                o->space = c;
            }
            if (o->ix && (trailing || shrink)) {
                ix_free(o->ix);
                o->ix = NULL;
            }
        }
    if (trailing && d->ix) { /* the linear order changed: rebuild from the logs at the next read */
        if (d->w && writer_flush(d->w, false) != 0)
            return -1;
        ix_free(d->ix);
        d->ix = NULL;
    }
    return 0;
}

herr_t h5fl_dataset_specific(void *obj, H5VL_dataset_specific_args_t *args, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_dset_t *d = obj;
    int rc = -1;
    switch (args->op_type) {
        case H5VL_DATASET_SET_EXTENT:
            rc = set_extent(d, args->args.set_extent.size);
            break;
        case H5VL_DATASET_FLUSH:
            rc = h5fl_dset_flush(d, true);
            break;
        case H5VL_DATASET_REFRESH: {
            /* see other writers' flushed data and a changed extent */
            hid_t t, s, p;
            rc = (d->w ? writer_flush(d->w, false) : 0) == 0 ? read_sidecar(d->o.dir, &t, &s, &p) : -1;
            if (rc == 0) {
                H5Tclose(t);
                H5Pclose(p);
                H5Sclose(d->space);
                d->space = s;
                ix_free(d->ix);
                d->ix = NULL;
            }
            break;
        }
        default:
            h5fl_err("dataset operation %d is not supported", (int)args->op_type);
    }
    if (rc != 0)
        h5fl_err_push(__func__);
    return rc;
}

herr_t h5fl_dataset_close(void *obj, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_dset_t *d = obj;
    if (--d->o.rc > 0)
        return 0;
    int rc = h5fl_dset_flush(d, true);
    if (d->o.anon && d->o.file->rank == 0) /* never linked: like HDF5, the object goes away */
        h5fl_rm_rf(d->o.dir);
    dset_free(d);
    if (rc != 0)
        h5fl_err_push(__func__);
    return rc;
}
