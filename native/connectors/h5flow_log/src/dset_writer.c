/* One writer's append-only data and index logs: buffering, flushing, reopening after a crash. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* fallocate, FALLOC_FL_KEEP_SIZE */
#endif
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define DBUF_CAP (8u << 20)   /* data append buffer (largest size) */
#define BUF_START (64u << 10) /* first size of both append buffers */
#define IBUF_CAP (1u << 20)   /* index append buffer */
#define DIRECT_MIN (256u << 10) /* a write this large skips the copy into the buffer: one pwrite */
#define SCAN_BLOCK (24u << 10)  /* the checksum and the statistics' first pass share blocks this large (L1) */
#define HIST_CHUNK (1u << 20)   /* with statistics, a direct write goes out in pieces this large (L2) */

/* Durability of acknowledged writes (docs/FORMAT.md, "Full disks and other write errors"): a write
 * returns success only once the file space for every byte it leaves in an append buffer is secured with
 * fallocate(FALLOC_FL_KEEP_SIZE) (the file size, which readers use, does not change) and lies within
 * RLIMIT_FSIZE, so the later flush cannot fail with ENOSPC, EDQUOT or EFBIG. Space is secured in steps
 * that grow with the log (an eighth of it, at least a block, at most the buffer's capacity), so small
 * writes make few fallocate calls and a log never holds much reserved space past its end: more than
 * RES_RELEASE is given back when the writer closes (ftruncate; it costs milliseconds on ext4, so smaller
 * remainders, less than an eighth of the log, stay). A file system without fallocate puts the writer
 * in write-through mode (so does H5FLOW_LOG_WRITE_THROUGH=1): each write is flushed before it returns.
 * Writes of DIRECT_MIN bytes or more go to the disk at once and fail there. */
#define RES_BLOCK 4096u          /* reservations end on a multiple of this */
#define RES_RELEASE (256u << 10) /* reserved space past the end of a log given back at close */

#define LOG_KIND(w, fd) ((fd) == (w)->dfd ? "data" : "index")

static const char *log_path(const h5fl_writer_t *w, int fd) { return fd == w->dfd ? w->dpath : w->ipath; }

/* The size a log may reach in this process (RLIMIT_FSIZE), UINT64_MAX without a limit. */
static uint64_t fsize_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return UINT64_MAX;
    return (uint64_t)rl.rlim_cur;
}

/* `end` = base + len without overflow past what an off_t can address; the error names the log. */
static int end_of(const h5fl_writer_t *w, int fd, uint64_t base, uint64_t len, uint64_t *end)
{
    if (base > (uint64_t)INT64_MAX || len > (uint64_t)INT64_MAX - base) {
        h5fl_err("dataset '%s': the %s log %s would exceed the largest file offset: %s (errno %d)", w->dname,
                 LOG_KIND(w, fd), log_path(w, fd), strerror(EFBIG), EFBIG);
        return -1;
    }
    *end = base + len;
    return 0;
}

/* A log growing to `end` must stay within RLIMIT_FSIZE (beyond it a write fails with EFBIG, or kills the
 * process with SIGXFSZ): refuse the write before any of it is stored. */
static int check_fsize(const h5fl_writer_t *w, int fd, uint64_t end, uint64_t len)
{
    uint64_t lim = fsize_limit();
    if (end <= lim)
        return 0;
    h5fl_err("dataset '%s': cannot store the %llu bytes of this write: the %s log %s would grow to %llu "
             "bytes, beyond the file size limit of this process (RLIMIT_FSIZE = %llu bytes): %s (errno %d); "
             "nothing of this write was stored: raise the limit (ulimit -f) or write less",
             w->dname, (unsigned long long)len, LOG_KIND(w, fd), log_path(w, fd), (unsigned long long)end,
             (unsigned long long)lim, strerror(EFBIG), EFBIG);
    return -1;
}

/* pwrite all of buf at off; the error names the dataset, the log, the offset, the byte counts and errno. */
static int log_pwrite(const h5fl_writer_t *w, int fd, const void *buf, size_t len, uint64_t off)
{
    uint64_t end;
    if (end_of(w, fd, off, len, &end) != 0)
        return -1;
    const uint8_t *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(fd, p + done, len - done, (off_t)(off + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int e = n < 0 ? errno : EIO;
            h5fl_err("dataset '%s': writing %zu bytes at offset %llu of the %s log %s failed after %zu bytes: "
                     "%s (errno %d)%s",
                     w->dname, len, (unsigned long long)off, LOG_KIND(w, fd), log_path(w, fd), done,
                     strerror(e), e, (e == ENOSPC || e == EDQUOT) ? "; free space on the file system" : "");
            errno = e;
            return -1;
        }
        done += (size_t)n;
    }
    return 0;
}

/* Cut what a failed write left past `end` (its space is freed; nothing references it), best effort. */
static void cut_tail(int fd, uint64_t end)
{
    while (ftruncate(fd, (off_t)end) != 0 && errno == EINTR)
        ;
}

/* Secure the file space of the log `fd` up to `need` for a write of `len` bytes (bytes below `disk_end`
 * are written already), a step ahead (see above) for a buffer of capacity `cap`. */
static int reserve(h5fl_writer_t *w, int fd, uint64_t disk_end, uint64_t *res, uint64_t need, size_t cap,
                   size_t len)
{
    if (need <= *res || w->through)
        return 0;
    uint64_t start = *res > disk_end ? *res : disk_end;
    if (check_fsize(w, fd, need, len) != 0)
        return -1;
    uint64_t step = need / 8 < cap ? need / 8 : cap, want = need, lim = fsize_limit();
    if (want <= UINT64_MAX - step - RES_BLOCK)
        want = (want + step + RES_BLOCK - 1) / RES_BLOCK * RES_BLOCK;
    if (want > lim)
        want = lim;
    if (want < need)
        want = need;
#ifdef FALLOC_FL_KEEP_SIZE
    for (;;) {
        if (fallocate(fd, FALLOC_FL_KEEP_SIZE, (off_t)start, (off_t)(want - start)) == 0) {
            *res = want;
            return 0;
        }
        int e = errno;
        if (e == EINTR)
            continue;
        if ((e == ENOSPC || e == EDQUOT) && want > need) {
            want = need; /* the window ahead does not fit: secure just this write */
            continue;
        }
        if (e == EOPNOTSUPP || e == ENOSYS) {
            w->through = true; /* e.g. NFSv3, some FUSE file systems: write through instead */
            return 0;
        }
        h5fl_err("dataset '%s': cannot secure space for the %zu bytes of this write in the %s log %s (%llu "
                 "bytes past the space already secured): %s (errno %d); nothing of this write was stored%s",
                 w->dname, len, LOG_KIND(w, fd), log_path(w, fd), (unsigned long long)(need - start),
                 strerror(e), e,
                 (e == ENOSPC || e == EDQUOT) ? ": free space on the file system and write again" : "");
        return -1;
    }
#else
    w->through = true;
    return 0;
#endif
}

static int flush_data(h5fl_writer_t *w)
{
    if (!w->dlen)
        return 0;
    /* on failure the buffer stays: a retry rewrites the same bytes from dend */
    if (log_pwrite(w, w->dfd, w->dbuf, w->dlen, w->dend) != 0)
        return -1;
    w->dend += w->dlen;
    w->dlen = 0;
    w->dirty_sync = true;
    return 0;
}

int h5fl_writer_flush(h5fl_writer_t *w, bool sync)
{
    if (flush_data(w) != 0)
        return -1;
    if (sync && w->dirty_sync && fdatasync(w->dfd) != 0) {
        int e = errno;
        h5fl_err("dataset '%s': fdatasync of the data log %s failed: %s (errno %d)", w->dname, w->dpath,
                 strerror(e), e);
        return -1;
    }
    /* Index records only after the data they point to. A failed write keeps the buffer: the retry writes
     * the same records (and maybe more) from iend, so a partial record is overwritten, never followed. */
    if (w->ilen) {
        if (log_pwrite(w, w->ifd, w->ibuf, w->ilen, w->iend) != 0)
            return -1;
        w->iend += w->ilen;
        w->ilen = 0;
        w->dirty_sync = true;
    }
    if (sync && w->dirty_sync) {
        if (fdatasync(w->ifd) != 0) {
            int e = errno;
            h5fl_err("dataset '%s': fdatasync of the index log %s failed: %s (errno %d)", w->dname, w->ipath,
                     strerror(e), e);
            return -1;
        }
        w->dirty_sync = false;
    }
    h5fl_stats_flush(w, sync); /* statistics records only after the index records they describe */
    return 0;
}

void h5fl_writer_free(h5fl_writer_t *w)
{
    if (!w)
        return;
    /* give back the space reserved past the end of the logs, when it is worth a truncation */
    if (w->dfd >= 0 && w->dres > w->dend + RES_RELEASE)
        cut_tail(w->dfd, w->dend);
    if (w->ifd >= 0 && w->ires > w->iend + RES_RELEASE)
        cut_tail(w->ifd, w->iend);
    if (w->dfd >= 0)
        close(w->dfd);
    if (w->ifd >= 0)
        close(w->ifd);
    h5fl_stats_close(w);
    free(w->dbuf);
    free(w->ibuf);
    free(w->dpath);
    free(w->ipath);
    free(w->dname);
    free(w);
}

int h5fl_writer_open(h5fl_dset_t *d)
{
    h5fl_file_t *f = d->o.file;
    h5fl_writer_t *w = calloc(1, sizeof *w);
    if (!w) {
        h5fl_err("out of memory");
        return -1;
    }
    w->dfd = w->ifd = -1;
    if (f->rank < 0 || (uint32_t)f->rank > H5FL_WRITER_MAX) {
        h5fl_err("cannot write dataset '%s' from MPI rank %d: the index format tells at most %u writers apart "
                 "(ranks 0..%u); write from fewer ranks",
                 d->o.path, f->rank, H5FL_WRITER_MAX + 1, H5FL_WRITER_MAX);
        free(w);
        return -1;
    }
    h5fl_layout_t lay; /* a restructure after this file was opened supersedes this epoch's writes */
    if (!d->vds && h5fl_sidecar_layout(d->o.dir, &lay) == 0 && lay.order && lay.epoch >= f->epoch) {
        h5fl_err("cannot write dataset '%s': it was restructured (h5flow restructure) after this file was "
                 "opened for writing, so writes of this open (epoch %llu) would order before the restructured "
                 "data (epoch %llu); close the file and open it again to write",
                 d->o.path, (unsigned long long)f->epoch, (unsigned long long)lay.epoch);
        free(w);
        return -1;
    }
    h5fl_err_clear();
    const char *through = getenv("H5FLOW_LOG_WRITE_THROUGH"); /* see docs/FORMAT.md */
    w->through = through && *through && strcmp(through, "0") != 0;
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
    w->ipath = h5fl_join(d->o.dir, name);
    w->dname = h5fl_strdup(d->o.path && *d->o.path ? d->o.path : "(anonymous)");
    if (!w->dbuf || !w->ibuf || !w->dpath || !w->ipath || !w->dname) {
        h5fl_err("out of memory");
        goto fail;
    }
    w->dfd = h5fl_open_file(w->dpath, O_WRONLY | O_CREAT, 0644);
    w->ifd = w->dfd < 0 ? -1 : h5fl_open_file(w->ipath, O_RDWR | O_CREAT, 0644);
    if (w->dfd < 0 || w->ifd < 0) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", h5fl_err_msg());
        h5fl_err("cannot open the write logs of dataset '%s': %s", d->o.path, msg);
        goto fail;
    }
    /* Reopened in the same epoch (the dataset was closed and opened again): continue after the last
     * complete record, so sequence numbers keep increasing and a torn tail is cut off. */
    struct stat st;
    if (fstat(w->dfd, &st) != 0) {
        h5fl_err("cannot stat %s: %s", w->dpath, strerror(errno));
        goto fail;
    }
    w->dend = w->dres = (uint64_t)st.st_size;
    void *ib = NULL;
    size_t il = 0;
    if (h5fl_read_file(w->ipath, &ib, &il) != 0)
        goto fail;
    size_t pos = 0;
    for (;;) {
        h5fl_record_t r;
        ssize_t k = h5fl_index_next(ib, il, pos, &r);
        if (k < 0) { /* never cut a damaged log: what follows the damage was written and may be repaired */
            char msg[512];
            snprintf(msg, sizeof msg, "%s", h5fl_err_msg());
            h5fl_err_clear();
            h5fl_err("cannot append to the logs of dataset '%s': %s of %s; the index log is damaged (move the "
                     "@log.%llu.%u.* pair aside to write, losing its writes)",
                     d->o.path, msg, w->ipath, (unsigned long long)w->epoch, w->id);
            free(ib);
            goto fail;
        }
        if (k == 0)
            break;
        pos += (size_t)k;
        if (r.flags & H5FL_REC_COMMIT) {
            w->committed = pos;
            continue;
        }
        uint64_t c = (r.seq.order >> 20) + 1;
        if (c > w->counter)
            w->counter = c;
    }
    free(ib);
    if (w->counter < d->min_counter)
        w->counter = d->min_counter;
    if (pos != il && ftruncate(w->ifd, (off_t)pos) != 0) {
        h5fl_err("cannot cut the torn tail of %s: %s", w->ipath, strerror(errno));
        goto fail;
    }
    w->iend = w->ires = pos;
    w->crc_start = w->dend; /* the next checksummed record covers the data appended from here */
    h5fl_stats_open(d, w);  /* never fails: without it, readers compute statistics from the data */
    d->w = w;
    return 0;
fail:
    h5fl_writer_free(w);
    return -1;
}

/* The running data checksum over `src` (not yet added). When statistics are armed for this write
 * (stats.h), their first pass runs in the same loop, block by block while each block is in cache. */
static uint32_t crc_of(h5fl_writer_t *w, const void *src, size_t len)
{
    if (!h5fl_stats_armed(w))
        return h5fl_crc32c(w->crc, src, len);
    const uint8_t *p = src;
    uint32_t c = w->crc;
    for (size_t o = 0; o < len; o += SCAN_BLOCK) {
        size_t n = len - o < SCAN_BLOCK ? len - o : SCAN_BLOCK;
        c = h5fl_crc32c(c, p + o, n);
        h5fl_stats_scan(w, p + o, n);
    }
    return c;
}

static void crc_add(h5fl_writer_t *w, const void *src, size_t len)
{
    w->crc = crc_of(w, src, len);
    w->crc_len += len;
}

/* A direct write of `len` bytes at the end of the data log. With statistics armed it goes out in
 * HIST_CHUNK pieces, each given to the histogram pass first, so that the kernel copies it from cache. */
static int write_direct(h5fl_writer_t *w, const void *src, size_t len)
{
    if (!h5fl_stats_armed(w))
        return log_pwrite(w, w->dfd, src, len, w->dend);
    const uint8_t *p = src;
    for (size_t o = 0; o < len; o += HIST_CHUNK) {
        size_t n = len - o < HIST_CHUNK ? len - o : HIST_CHUNK;
        h5fl_stats_hist(w, p + o, n);
        if (log_pwrite(w, w->dfd, p + o, n, w->dend + o) != 0)
            return -1;
    }
    return 0;
}

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

int h5fl_writer_append_data(h5fl_writer_t *w, const void *src, size_t len)
{
    uint64_t end;
    if (end_of(w, w->dfd, w->dend + w->dlen, len, &end) != 0)
        return -1;
    if (len < DIRECT_MIN && !w->through) {
        grow(&w->dbuf, &w->dcap, w->dlen + len, DBUF_CAP);
        if (w->dlen + len > w->dcap && len <= w->dcap) { /* fits once the buffer is written */
            if (flush_data(w) != 0)
                return -1;
            end = w->dend + len;
        }
        if (w->dlen + len <= w->dcap) {
            if (reserve(w, w->dfd, w->dend, &w->dres, end, w->dcap, len) != 0)
                return -1;
            if (!w->through) {
                memcpy(w->dbuf + w->dlen, src, len);
                w->dlen += len;
                crc_add(w, src, len);
                return 0;
            }
        }
    }
    /* Large, or the file system cannot reserve space: to the disk now, after what is buffered. A write
     * that fails leaves nothing behind for a later flush to trip over (and no record points at it). */
    if (flush_data(w) != 0 || check_fsize(w, w->dfd, w->dend + len, len) != 0)
        return -1;
    uint32_t crc = crc_of(w, src, len); /* (and the statistics' first pass) before the bytes go out */
    if (write_direct(w, src, len) != 0) {
        cut_tail(w->dfd, w->dend); /* the buffer is empty: nothing reserved is needed any more */
        w->dres = w->dend;
        return -1;
    }
    w->dend += len;
    w->dirty_sync = true;
    w->crc = crc;
    w->crc_len += len;
    return 0;
}

/* An index record may only reach the disk after the data it points to. */
int h5fl_writer_append_index(h5fl_writer_t *w, const uint8_t *rec, size_t len)
{
    uint64_t end;
    if (end_of(w, w->ifd, w->iend + w->ilen, len, &end) != 0)
        return -1;
    grow(&w->ibuf, &w->icap, w->ilen + len, IBUF_CAP);
    if (w->ilen + len > w->icap) {
        if (h5fl_writer_flush(w, false) != 0)
            return -1;
        if (len > w->icap) {
            if (check_fsize(w, w->ifd, w->iend + len, len) != 0)
                return -1;
            if (log_pwrite(w, w->ifd, rec, len, w->iend) != 0) {
                /* a partial record must not stay under later, shorter ones: cut it */
                cut_tail(w->ifd, w->iend);
                w->ires = w->iend;
                return -1;
            }
            w->iend += len;
            w->dirty_sync = true;
            return 0;
        }
        end = w->iend + len;
    }
    /* room for the commit record that a flush or close appends after these records, secured now too */
    if (end_of(w, w->ifd, end, H5FL_COMMIT_SIZE, &end) != 0 ||
        reserve(w, w->ifd, w->iend, &w->ires, end, w->icap, len) != 0)
        return -1;
    memcpy(w->ibuf + w->ilen, rec, len);
    w->ilen += len;
    if (w->through && h5fl_writer_flush(w, false) != 0) {
        /* The write fails: take its record back (it is the buffer's last), so that it never reaches the
         * disk later pointing at data this write may not have stored, and cut what reached the disk. */
        w->ilen -= len;
        cut_tail(w->ifd, w->iend);
        w->ires = w->iend;
        return -1;
    }
    return 0;
}

int h5fl_writer_seal_data(h5fl_writer_t *w, h5fl_record_t *r)
{
    if (r->flags & H5FL_REC_FILL)
        return 0; /* no data: the running checksum goes on to the next write's record */
    uint64_t end = w->dend + w->dlen;
    if (w->crc_start > r->data_off || r->data_off + r->nbytes != end || w->crc_start + w->crc_len != end) {
        h5fl_err("internal error: the data checksum does not cover the write's data (bytes %llu..%llu, write "
                 "at %llu..%llu)",
                 (unsigned long long)w->crc_start, (unsigned long long)(w->crc_start + w->crc_len),
                 (unsigned long long)r->data_off, (unsigned long long)(r->data_off + r->nbytes));
        return -1;
    }
    r->flags |= H5FL_REC_DCRC;
    r->crc_start = w->crc_start;
    r->dcrc = w->crc;
    w->crc = 0;
    w->crc_len = 0;
    w->crc_start = end;
    return 0;
}

int h5fl_writer_commit(h5fl_writer_t *w, bool sync)
{
    if (h5fl_writer_flush(w, sync) != 0)
        return -1;
    if (w->iend == w->committed)
        return 0; /* nothing new since the last commit record */
    uint8_t rec[H5FL_COMMIT_SIZE];
    h5fl_seq_t seq = {w->epoch, (w->counter << 20) | w->id};
    h5fl_commit_record(rec, seq, w->iend, w->dend);
    if (log_pwrite(w, w->ifd, rec, sizeof rec, w->iend) != 0)
        return -1; /* nothing follows it: a retry writes the same bytes at the same place */
    w->iend += sizeof rec;
    w->committed = w->iend;
    w->dirty_sync = true;
    return 0;
}
