/* Semantic restructuring of one dataset (docs/FORMAT.md "Restructured datasets"): its current contents,
 * read through the merged index (latest write wins), rewritten into shards of a requested shape in one
 * data file, @shards.<gen>.dat, switched to by one atomic rename of its @dataset sidecar (version 5, which
 * carries the constant-size description: order, shard shape, extent, epoch, generation); the superseded logs
 * are removed after the switch. Reads take every element no later write covers from the shards. */
#include "dset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHARDS_PREFIX "@shards."
#define TMP_PREFIX "@tmp.restructure."
#define SLAB_BYTES ((uint64_t)64 << 20) /* rows read per step: at most this many bytes (at least one row) */

/* ---------------------------------------------------------------- reading the shards */
static char *shards_name(const char *dir, uint64_t gen)
{
    char name[64];
    snprintf(name, sizeof name, SHARDS_PREFIX "%" PRIu64 ".dat", gen);
    return h5fl_join(dir, name);
}

/* Shards per dimension, their number and bytes, with arithmetic that cannot wrap; -1 if too large. */
static int shard_geometry(const h5fl_layout_t *lay, size_t esize, uint64_t *nch, uint64_t *nchunks,
                          uint64_t *cbytes)
{
    uint64_t n = 1, c = esize;
    for (uint32_t k = 0; k < lay->rank; k++) {
        nch[k] = lay->dims[k] / lay->chunk[k] + (lay->dims[k] % lay->chunk[k] != 0);
        if ((nch[k] && n > UINT64_MAX / nch[k]) || c > UINT64_MAX / lay->chunk[k])
            return -1;
        n *= nch[k];
        c *= lay->chunk[k];
    }
    if (c > SIZE_MAX / 2 || (n && c > (UINT64_MAX / 2) / n) || n > (UINT64_MAX / 2 - n * c) / 4)
        return -1;
    *nchunks = n;
    *cbytes = c;
    return 0;
}

void h5fl_base_free(h5fl_base_t *b)
{
    if (!b)
        return;
    if (b->map)
        munmap(b->map, b->mapsize);
    if (b->fd >= 0)
        close(b->fd);
    free(b->checked);
    free(b->path);
    free(b);
}

int h5fl_base_open(const char *dir, const h5fl_layout_t *lay, size_t esize, h5fl_base_t **out)
{
    *out = NULL;
    h5fl_base_t *b = calloc(1, sizeof *b);
    if (!b) {
        h5fl_err("out of memory");
        return -1;
    }
    b->fd = -1;
    b->cur_space = H5I_INVALID_HID;
    b->lay = *lay;
    if (!(b->path = shards_name(dir, lay->gen)))
        goto fail;
    if (shard_geometry(lay, esize, b->nch, &b->nchunks, &b->cbytes) != 0) {
        h5fl_err("restructured data %s: the layout's extent and shard shape are too large (corrupt)", b->path);
        goto fail;
    }
    uint64_t want = b->nchunks * b->cbytes + 4 * b->nchunks;
    struct stat st;
    if ((b->fd = h5fl_open_file(b->path, O_RDONLY, 0)) < 0)
        goto fail;
    if (fstat(b->fd, &st) != 0) {
        h5fl_err("cannot open the restructured data %s: %s", b->path, strerror(errno));
        goto fail;
    }
    if ((uint64_t)st.st_size != want || want > SIZE_MAX) {
        h5fl_err("restructured data %s has %lld bytes, its layout says %" PRIu64 " (truncated or corrupt)",
                 b->path, (long long)st.st_size, want);
        goto fail;
    }
    if (!(b->checked = calloc(b->nchunks ? b->nchunks : 1, 1))) {
        h5fl_err("out of memory");
        goto fail;
    }
    if (want) {
        void *m = mmap(NULL, (size_t)want, PROT_READ, MAP_SHARED, b->fd, 0);
        if (m == MAP_FAILED) {
            h5fl_err("cannot map the restructured data %s: %s", b->path, strerror(errno));
            goto fail;
        }
        b->map = m;
        b->mapsize = (size_t)want;
    }
    *out = b;
    return 0;
fail:
    h5fl_base_free(b);
    return -1;
}

/* The first read that touches a shard checks its CRC32C (stored after the shards, one u32 each). */
static int shard_verify(const h5fl_dset_t *d, h5fl_base_t *b, uint64_t c)
{
    if (b->checked[c] || !d->o.file->verify)
        return 0;
    const uint8_t *p = b->map + c * b->cbytes;
    uint32_t want = h5fl_get_u32(b->map + b->nchunks * b->cbytes + 4 * c);
    uint32_t got = h5fl_crc32c(0, p, (size_t)b->cbytes);
    if (got != want) {
        h5fl_err("dataset '%s': data checksum mismatch in shard %" PRIu64 " (bytes %" PRIu64 "..%" PRIu64
                 ") of %s: the restructured data is corrupt (CRC32C %08x, recorded %08x); "
                 "H5FLOW_LOG_VERIFY=0 in the environment reads it unchecked",
                 d->o.path, c, c * b->cbytes, (c + 1) * b->cbytes, b->path, got, want);
        return -1;
    }
    b->checked[c] = 1;
    return 0;
}

int h5fl_base_walk(const h5fl_dset_t *d, h5fl_base_t *b, const hsize_t *cur, uint64_t pos, uint64_t stop,
                   h5fl_base_fn fn, void *ctx)
{
    const h5fl_layout_t *L = &b->lay;
    unsigned D = L->rank, last = D - 1;
    uint64_t co[H5S_MAX_RANK];
    size_t es = d->esize;
    while (pos < stop) {
        uint64_t rem = pos; /* coordinates of pos in the current extent */
        for (unsigned k = last; k > 0; k--) {
            co[k] = rem % cur[k];
            rem /= cur[k];
        }
        co[0] = rem;
        uint64_t seg = cur[last] - co[last] < stop - pos ? cur[last] - co[last] : stop - pos;
        bool in = true; /* the row (all but the last coordinate) lies in the restructured extent */
        uint64_t ci = 0, loff = 0;
        for (unsigned k = 0; k < last && in; k++) {
            in = co[k] < L->dims[k];
            ci = ci * b->nch[k] + co[k] / L->chunk[k];
            loff = loff * L->chunk[k] + co[k] % L->chunk[k];
        }
        uint64_t x = co[last], xend = co[last] + seg, done = 0;
        while (in && x < xend && x < L->dims[last]) {
            uint64_t cx = x / L->chunk[last], cend = (cx + 1) * L->chunk[last];
            uint64_t e = xend < cend ? xend : cend;
            e = e < L->dims[last] ? e : L->dims[last];
            uint64_t c = ci * b->nch[last] + cx, off = loff * L->chunk[last] + x % L->chunk[last];
            if (shard_verify(d, b, c) != 0 || fn(ctx, b->map + c * b->cbytes + off * es, e - x, c, pos + done) != 0)
                return -1;
            done += e - x;
            x = e;
        }
        if (done < seg && fn(ctx, NULL, seg - done, UINT64_MAX, pos + done) != 0)
            return -1;
        pos += seg;
    }
    return 0;
}

/* ---------------------------------------------------------------- the restructure */
/* Test hook: H5FLOW_LOG_RESTRUCTURE_KILL=<point> kills the process there (crash-safety tests). */
static void kill_point(const char *point)
{
    const char *e = getenv("H5FLOW_LOG_RESTRUCTURE_KILL");
    if (e && !strcmp(e, point))
        raise(SIGKILL);
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || fsync(fd) != 0) {
        h5fl_err("cannot sync directory %s: %s", dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

static bool parse_u64(const char **p, uint64_t *v)
{
    const char *s = *p;
    if (*s < '0' || *s > '9' || (*s == '0' && s[1] >= '0' && s[1] <= '9'))
        return false;
    for (*v = 0; *s >= '0' && *s <= '9'; s++) {
        if (*v > (UINT64_MAX - 9) / 10)
            return false;
        *v = *v * 10 + (uint64_t)(*s - '0');
    }
    *p = s;
    return true;
}

/* Whether `name` is a file the layout `lay` supersedes: a log or statistics file of epoch <= lay->epoch, a
 * shard file of another generation, or a restructure's temporary file. Never a file a reader uses. */
bool h5fl_layout_superseded(const char *name, const h5fl_layout_t *lay)
{
    const char *p;
    uint64_t v;
    if (!strncmp(name, TMP_PREFIX, strlen(TMP_PREFIX)))
        return true;
    if (!strncmp(name, SHARDS_PREFIX, strlen(SHARDS_PREFIX))) { /* without a layout, every one (gen 0) */
        p = name + strlen(SHARDS_PREFIX);
        return parse_u64(&p, &v) && !strcmp(p, ".dat") && v != lay->gen;
    }
    if (!lay->order)
        return false;
    if (!strncmp(name, H5FL_LOG_PREFIX, strlen(H5FL_LOG_PREFIX)))
        p = name + strlen(H5FL_LOG_PREFIX);
    else if (!strncmp(name, "@stats.", 7))
        p = name + 7;
    else
        return false;
    return parse_u64(&p, &v) && *p == '.' && v <= lay->epoch;
}

/* Remove what `lay` supersedes from dir; *removed counts the files. */
static int sweep(const char *dir, const h5fl_layout_t *lay, uint64_t *removed)
{
    DIR *dp = opendir(dir);
    if (!dp) {
        h5fl_err("cannot list dataset directory %s: %s", dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (!h5fl_layout_superseded(e->d_name, lay))
            continue;
        char *path = h5fl_join(dir, e->d_name);
        if (!path || (unlink(path) != 0 && errno != ENOENT)) {
            h5fl_err("cannot remove %s (superseded by the restructured layout): %s", path ? path : e->d_name,
                     strerror(errno));
            rc = -1;
        } else {
            ++*removed;
            if (*removed == 1)
                kill_point("cleanup");
        }
        free(path);
        if (rc)
            break;
    }
    closedir(dp);
    return rc;
}

static int pwrite_all(int fd, const uint8_t *p, size_t n, uint64_t off, const char *path)
{
    while (n) {
        ssize_t k = pwrite(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            h5fl_err("cannot write %s at byte %" PRIu64 ": %s", path, off, k < 0 ? strerror(errno) : "no progress");
            return -1;
        }
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

typedef struct rs {
    h5fl_dset_t *d;
    h5fl_layout_t lay;
    uint64_t nch[H5S_MAX_RANK], nchunks, cbytes;
    uint32_t *crc;
    int fd;
    const char *tmp;
} rs_t;

/* Rows [r0, r1) of the dataset are in `rows` (row-major, all trailing coordinates): write their part of
 * every shard of shard row r0 / chunk[0] (within a shard, rows are contiguous) and advance its checksum. */
static int scatter(rs_t *s, const uint8_t *rows, uint64_t r0, uint64_t r1, uint8_t *tmp)
{
    const h5fl_layout_t *L = &s->lay;
    unsigned D = L->rank;
    size_t es = s->d->esize;
    uint64_t crow = r0 / L->chunk[0], l0 = r0 % L->chunk[0], inner = s->cbytes / L->chunk[0]; /* bytes per row */
    uint64_t per_row = s->nchunks / s->nch[0]; /* shards in one shard row */
    uint64_t rowlen = 1;                        /* elements of one dataset row */
    for (unsigned k = 1; k < D; k++)
        rowlen *= L->dims[k];
    for (uint64_t j = 0; j < per_row; j++) {
        uint64_t cc[H5S_MAX_RANK], rem = j; /* shard coordinates in dimensions 1.. */
        for (unsigned k = D - 1; k > 0; k--) {
            cc[k] = rem % s->nch[k];
            rem /= s->nch[k];
        }
        size_t nb = (size_t)((r1 - r0) * inner);
        memset(tmp, 0, nb); /* edge shards: padding past the extent is zero */
        uint64_t lines = 1;  /* lines along the last dimension in one row of the shard */
        for (unsigned k = 1; k + 1 < D; k++)
            lines *= L->chunk[k];
        for (uint64_t r = r0; r < r1; r++)
            for (uint64_t li = 0; li < lines; li++) {
                uint64_t lr = li, src = 0, ok = 1;
                uint64_t lc[H5S_MAX_RANK];
                for (unsigned k = D - 1; k > 0; k--) {
                    if (k == D - 1) {
                        lc[k] = 0;
                        continue;
                    }
                    lc[k] = lr % L->chunk[k];
                    lr /= L->chunk[k];
                }
                for (unsigned k = 1; k < D; k++) {
                    uint64_t g = cc[k] * L->chunk[k] + lc[k];
                    ok = ok && g < L->dims[k];
                    src = src * L->dims[k] + g;
                }
                if (!ok)
                    continue;
                uint64_t n = D > 1 ? L->chunk[D - 1] : 1;
                if (D > 1 && cc[D - 1] * L->chunk[D - 1] + n > L->dims[D - 1])
                    n = L->dims[D - 1] - cc[D - 1] * L->chunk[D - 1];
                memcpy(tmp + (r - r0) * inner + li * (D > 1 ? L->chunk[D - 1] : 1) * es,
                       rows + ((r - r0) * rowlen + src) * es, (size_t)(n * es));
            }
        uint64_t c = crow * per_row + j;
        s->crc[c] = h5fl_crc32c(s->crc[c], tmp, nb);
        if (pwrite_all(s->fd, tmp, nb, c * s->cbytes + l0 * inner, s->tmp) != 0)
            return -1;
    }
    return 0;
}

/* The shard file: every shard row in slabs of whole rows (bounded memory), then the checksums. */
static int write_shards(rs_t *s)
{
    const h5fl_layout_t *L = &s->lay;
    uint64_t rowlen = 1;
    for (unsigned k = 1; k < L->rank; k++)
        rowlen *= L->dims[k];
    uint64_t rowbytes = rowlen * s->d->esize, step = rowbytes ? SLAB_BYTES / rowbytes : L->chunk[0];
    step = step < 1 ? 1 : step > L->chunk[0] ? L->chunk[0] : step;
    uint64_t inner = s->cbytes / L->chunk[0];
    if (step * rowbytes > SIZE_MAX / 2 || step * inner > SIZE_MAX / 2) {
        h5fl_err("dataset '%s': a row is too large to restructure", s->d->o.path);
        return -1;
    }
    size_t rowsz = (size_t)(step * rowbytes), tmpsz = (size_t)(step * inner);
    uint8_t *rows = malloc(rowsz ? rowsz : 1);
    uint8_t *tmp = malloc(tmpsz ? tmpsz : 1);
    int rc = rows && tmp ? 0 : -1;
    if (rc)
        h5fl_err("out of memory restructuring '%s'", s->d->o.path);
    for (uint64_t r0 = 0; rc == 0 && r0 < L->dims[0];) {
        uint64_t band_end = (r0 / L->chunk[0] + 1) * L->chunk[0];
        uint64_t r1 = r0 + step < band_end ? r0 + step : band_end;
        r1 = r1 < L->dims[0] ? r1 : L->dims[0];
        gather_ctx_t g = {s->d, rows};
        rc = h5fl_gather_seq(&g, r0 * rowlen, (size_t)((r1 - r0) * rowlen));
        if (rc == 0)
            rc = scatter(s, rows, r0, r1, tmp);
        if (rc == 0 && r0 == 0)
            kill_point("data");
        r0 = r1;
    }
    /* rows of padding of the last shard row: zero bytes (the file was extended with ftruncate) */
    uint64_t pad = L->dims[0] % L->chunk[0];
    if (rc == 0 && pad) {
        uint64_t per_row = s->nchunks / s->nch[0], padbytes = (L->chunk[0] - pad) * inner;
        memset(tmp, 0, (size_t)(step * inner));
        for (uint64_t j = 0; j < per_row; j++)
            for (uint64_t done = 0; done < padbytes;) {
                uint64_t n = padbytes - done < step * inner ? padbytes - done : step * inner;
                uint64_t c = (s->nch[0] - 1) * per_row + j;
                s->crc[c] = h5fl_crc32c(s->crc[c], tmp, (size_t)n);
                done += n;
            }
    }
    for (uint64_t c = 0; rc == 0 && c < s->nchunks; c++) {
        uint8_t b[4];
        h5fl_put_u32(b, s->crc[c]);
        rc = pwrite_all(s->fd, b, 4, s->nchunks * s->cbytes + 4 * c, s->tmp);
    }
    free(rows);
    free(tmp);
    return rc;
}

static int restructure(h5fl_dset_t *d, unsigned order, const uint64_t *chunk, unsigned nchunk, char *res,
                       size_t reslen)
{
    const char *dir = d->o.dir;
    int rank = H5Sget_simple_extent_ndims(d->space);
    hsize_t dims[H5S_MAX_RANK];
    if (d->vds || d->filtered || d->vstr || d->blob || d->ext) {
        h5fl_err("dataset '%s' cannot be restructured: it is %s (supported: fixed-size types without filters)",
                 d->o.path,
                 d->vds        ? "a virtual dataset"
                 : d->ext      ? "stored in external files"
                 : d->filtered ? "filtered"
                               : "of a variable-length type");
        return -1;
    }
    if (rank < 1 || H5Sget_simple_extent_dims(d->space, dims, NULL) < 0) {
        h5fl_err("dataset '%s' cannot be restructured: it is scalar or null (nothing to lay out)", d->o.path);
        return -1;
    }
    if (d->w) {
        h5fl_err("dataset '%s' is open for writing in this process: close it before restructuring", d->o.path);
        return -1;
    }
    h5fl_layout_t old = {0}, lay = {0};
    if (h5fl_sidecar_layout(dir, &old) != 0)
        return -1;
    lay.rank = (uint32_t)rank;
    lay.order = order;
    for (int k = 0; k < rank; k++) {
        lay.dims[k] = dims[k];
        if (order == H5FL_ORDER_ROW)
            lay.chunk[k] = k == 0 ? 1 : dims[k];
        else if (order == H5FL_ORDER_COLUMN)
            lay.chunk[k] = k == rank - 1 ? 1 : dims[k];
        else if (nchunk != (unsigned)rank || chunk[k] < 1) {
            h5fl_err("dataset '%s' has %d dimensions: give %d shard sizes of at least 1 (got %u)", d->o.path, rank,
                     rank, nchunk);
            return -1;
        } else {
            lay.chunk[k] = chunk[k];
        }
        if (lay.chunk[k] < 1)
            lay.chunk[k] = 1; /* an empty dimension */
        if (lay.chunk[k] > lay.dims[k] && lay.dims[k] > 0)
            lay.chunk[k] = lay.dims[k]; /* a shard never needs to be larger than the extent */
    }
    rs_t s = {.d = d, .lay = lay, .fd = -1};
    if (shard_geometry(&lay, d->esize, s.nch, &s.nchunks, &s.cbytes) != 0) {
        h5fl_err("dataset '%s': shards of that shape are too large (at most %zu bytes each)", d->o.path,
                 (size_t)(SIZE_MAX / 2));
        return -1;
    }
    /* a fresh index: exactly the logs (and shards) the snapshot reads */
    h5fl_ix_free(d->ix);
    d->ix = NULL;
    if (h5fl_ix_ready(d) != 0)
        return -1;
    uint64_t removed = 0;
    if (sweep(dir, &old, &removed) != 0) /* what an interrupted restructure left */
        return -1;
    s.lay.epoch = d->ix->max_epoch > old.epoch ? d->ix->max_epoch : old.epoch;
    s.lay.gen = old.gen + 1;
    char tname[96];
    snprintf(tname, sizeof tname, TMP_PREFIX "%" PRIu64 ".%ld", s.lay.gen, (long)getpid());
    char *tmp = h5fl_join(dir, tname), *dst = shards_name(dir, s.lay.gen);
    s.tmp = tmp;
    s.crc = calloc(s.nchunks ? s.nchunks : 1, sizeof *s.crc);
    int rc = -1;
    if (!tmp || !dst || !s.crc) {
        h5fl_err("out of memory");
        goto done;
    }
    uint64_t total = s.nchunks * s.cbytes + 4 * s.nchunks;
    if ((s.fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644)) < 0 ||
        ftruncate(s.fd, (off_t)total) != 0) {
        h5fl_err("cannot create %s (%" PRIu64 " bytes): %s", tmp, total, strerror(errno));
        goto done;
    }
    if (write_shards(&s) != 0)
        goto done;
    if (fsync(s.fd) != 0 || close(s.fd) != 0) {
        s.fd = -1;
        h5fl_err("cannot sync %s: %s", tmp, strerror(errno));
        goto done;
    }
    s.fd = -1;
    /* link, not rename: a second restructure of the same generation running at the same time fails here */
    if (link(tmp, dst) != 0) {
        if (errno == EEXIST)
            h5fl_err("cannot publish %s as %s: it exists (another restructure of this dataset is running; run "
                     "one at a time)", tmp, dst);
        else
            h5fl_err("cannot publish %s as %s: %s", tmp, dst, strerror(errno));
        goto done;
    }
    unlink(tmp);
    if (fsync_dir(dir) != 0)
        goto done;
    kill_point("before_switch");
    /* the switch: readers that read the sidecar from now on take the new shards */
    if (h5fl_sidecar_write_layout(dir, d->type, d->space, d->dcpl, &s.lay, true) != 0 || fsync_dir(dir) != 0)
        goto done;
    kill_point("after_switch");
    removed = 0;
    if (sweep(dir, &s.lay, &removed) != 0)
        goto done;
    rc = 0;
    static const char *names[] = {"", "row", "column", "chunks"};
    int w = snprintf(res, reslen,
                     "{\"order\":\"%s\",\"generation\":%" PRIu64 ",\"epoch\":%" PRIu64 ",\"shards\":%" PRIu64
                     ",\"shard_bytes\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"removed\":%" PRIu64 ",\"chunks\":[",
                     names[order], s.lay.gen, s.lay.epoch, s.nchunks, s.cbytes, total, removed);
    for (int k = 0; k < rank && w > 0 && (size_t)w < reslen; k++)
        w += snprintf(res + w, reslen - (size_t)w, "%s%" PRIu64, k ? "," : "", s.lay.chunk[k]);
    if (w > 0 && (size_t)w < reslen)
        snprintf(res + w, reslen - (size_t)w, "]}");
done:
    if (s.fd >= 0) {
        close(s.fd);
        unlink(tmp);
    } else if (rc != 0 && tmp) {
        unlink(tmp);
    }
    free(s.crc);
    free(tmp);
    free(dst);
    /* the next read rebuilds from the sidecar as it now is */
    h5fl_ix_free(d->ix);
    d->ix = NULL;
    return rc;
}

/* Exported for h5flow.restructure (ctypes): restructure the open dataset `dset` (order: 1 row, 2 column,
 * 3 chunks of `chunk[0..nchunk)`). 0 and *out a JSON summary, or -1 and *out the error message; free *out
 * with h5flow_log_restructure_free. */
__attribute__((visibility("default"))) int h5flow_log_restructure(hid_t dset, unsigned order, const uint64_t *chunk,
                                                                  unsigned nchunk, char **out);
__attribute__((visibility("default"))) void h5flow_log_restructure_free(char *p);

int h5flow_log_restructure(hid_t dset, unsigned order, const uint64_t *chunk, unsigned nchunk, char **out)
{
    h5fl_err_clear();
    *out = NULL;
    char res[1024] = "";
    int rc = -1;
    if (order < H5FL_ORDER_ROW || order > H5FL_ORDER_CHUNKS || nchunk > H5S_MAX_RANK) {
        h5fl_err("unknown restructure order %u (1 row, 2 column, 3 chunks)", order);
    } else {
        h5fl_dset_t *d = h5fl_container_dset(dset);
        if (d)
            rc = restructure(d, order, chunk, nchunk, res, sizeof res);
    }
    *out = h5fl_strdup(rc == 0 ? res : h5fl_err_msg()[0] ? h5fl_err_msg() : "unknown error");
    h5fl_err_clear();
    return rc;
}

void h5flow_log_restructure_free(char *p) { free(p); }
