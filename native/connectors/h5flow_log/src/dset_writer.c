/* One writer's append-only data and index logs: buffering, flushing, reopening after a crash. */
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

#define DBUF_CAP (8u << 20)   /* data append buffer (largest size) */
#define BUF_START (64u << 10) /* first size of both append buffers */
#define IBUF_CAP (1u << 20)   /* index append buffer */
#define DIRECT_MIN (256u << 10) /* a write this large skips the copy into the buffer: one pwrite */

int h5fl_writer_flush(h5fl_writer_t *w, bool sync)
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

void h5fl_writer_free(h5fl_writer_t *w)
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
        ssize_t k = h5fl_index_next(ib, il, pos, &r);
        if (k < 0) { /* never cut a damaged log: what follows the damage was written and may be repaired */
            char msg[512];
            snprintf(msg, sizeof msg, "%s", h5fl_err_msg());
            h5fl_err_clear();
            h5fl_err("cannot append to the logs of dataset '%s': %s of %s; the index log is damaged (move the "
                     "@log.%llu.%u.* pair aside to write, losing its writes)",
                     d->o.path, msg, ipath, (unsigned long long)w->epoch, w->id);
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
        h5fl_err("cannot cut the torn tail of %s: %s", ipath, strerror(errno));
        goto fail;
    }
    w->iend = pos;
    w->crc_start = w->dend; /* the next checksummed record covers the data appended from here */
    free(ipath);
    d->w = w;
    return 0;
fail:
    free(ipath);
    h5fl_writer_free(w);
    return -1;
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

static void crc_add(h5fl_writer_t *w, const void *src, size_t len)
{
    w->crc = h5fl_crc32c(w->crc, src, len);
    w->crc_len += len;
}

int h5fl_writer_append_data(h5fl_writer_t *w, const void *src, size_t len)
{
    if (len < DIRECT_MIN)
        grow(&w->dbuf, &w->dcap, w->dlen + len, DBUF_CAP);
    if (w->dlen + len <= w->dcap) {
        memcpy(w->dbuf + w->dlen, src, len);
        w->dlen += len;
        crc_add(w, src, len);
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
        crc_add(w, src, len);
        return 0;
    }
    memcpy(w->dbuf, src, len);
    w->dlen = len;
    crc_add(w, src, len);
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
    if (h5fl_pwrite_all(w->ifd, rec, sizeof rec, w->iend) != 0)
        return -1;
    w->iend += sizeof rec;
    w->committed = w->iend;
    w->dirty_sync = true;
    return 0;
}

/* An index record may only reach the disk after the data it points to. */
int h5fl_writer_append_index(h5fl_writer_t *w, const uint8_t *rec, size_t len)
{
    grow(&w->ibuf, &w->icap, w->ilen + len, IBUF_CAP);
    if (w->ilen + len > w->icap) {
        if (h5fl_writer_flush(w, false) != 0)
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
