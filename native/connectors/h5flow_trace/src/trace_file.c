/* h5flow_trace: the trace file writer. Records go to a fixed buffer of `block` records; the string table is an
 * open-addressing hash set of interned strings whose new entries wait in a byte buffer until the next flush,
 * which writes them before the records that refer to them. */
#include "trace_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_BLOCK 4096u

_Static_assert(sizeof(h5ft_record) == H5FT_RECORD_SIZE, "records are encoded in place");

typedef struct {
    char *s;   /* NULL: empty slot */
    uint32_t id;
    uint64_t hash;
} slot_t;

struct h5ft_writer {
    int fd_trace, fd_strings;
    uint64_t mono_origin;
    unsigned char *recbuf;
    size_t block, nrec;
    slot_t *slots;
    size_t nslots, nstrings;
    unsigned char *strbuf;
    size_t strlen_, strcap;
    int failed; /* a write failed: reported once, later records dropped */
    uint64_t written; /* records written so far */
    char path[4096];
};

uint64_t h5ft_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t h5ft_now(const h5ft_writer *w) { return h5ft_monotonic_ns() - w->mono_origin; }

static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static int write_all(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int open_pair(h5ft_writer *w, const char *dir, const char *stem)
{
    char spath[4200];
    snprintf(w->path, sizeof w->path, "%s/%s.trace", dir, stem);
    snprintf(spath, sizeof spath, "%s/%s.strings", dir, stem);
    w->fd_trace = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w->fd_trace < 0)
        return -1;
    w->fd_strings = open(spath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd_strings < 0) {
        int e = errno;
        close(w->fd_trace);
        unlink(w->path);
        errno = e;
        w->fd_trace = -1;
        return -1;
    }
    return 0;
}

h5ft_writer *h5ft_writer_open(const char *dir, unsigned rank, unsigned nranks, size_t block, char *err,
                              size_t errlen)
{
    h5ft_writer *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->fd_trace = w->fd_strings = -1;
    w->block = block ? block : DEFAULT_BLOCK;
    w->recbuf = malloc(w->block * H5FT_RECORD_SIZE);
    w->nslots = 1024;
    w->slots = calloc(w->nslots, sizeof *w->slots);
    if (!w->recbuf || !w->slots) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot create the trace directory %s: %s", dir, strerror(errno));
        goto fail;
    }
    char stem[64];
    snprintf(stem, sizeof stem, "rank-%u", rank);
    if (open_pair(w, dir, stem) != 0) {
        if (errno == EEXIST) {
            snprintf(stem, sizeof stem, "rank-%u-%ld", rank, (long)getpid());
            if (open_pair(w, dir, stem) != 0) {
                snprintf(err, errlen, "cannot create %s/%s.trace: %s", dir, stem, strerror(errno));
                goto fail;
            }
        } else {
            snprintf(err, errlen, "cannot create %s: %s", w->path, strerror(errno));
            goto fail;
        }
    }
    unsigned char hdr[H5FT_HEADER_SIZE];
    memset(hdr, 0, sizeof hdr);
    struct timespec wall;
    w->mono_origin = h5ft_monotonic_ns();
    clock_gettime(CLOCK_REALTIME, &wall);
    memcpy(hdr, "H5FTRACE", 8);
    put32(hdr + 8, H5FT_VERSION);
    put32(hdr + 12, H5FT_HEADER_SIZE);
    put32(hdr + 16, H5FT_RECORD_SIZE);
    put32(hdr + 20, rank);
    put32(hdr + 24, nranks);
    put32(hdr + 28, (uint32_t)getpid());
    put64(hdr + 32, w->mono_origin);
    put64(hdr + 40, (uint64_t)wall.tv_sec * 1000000000u + (uint64_t)wall.tv_nsec);
    gethostname((char *)hdr + 48, 63);
    hdr[48 + 63] = 0;
    if (write_all(w->fd_trace, hdr, sizeof hdr) != 0) {
        snprintf(err, errlen, "cannot write %s: %s", w->path, strerror(errno));
        goto fail;
    }
    return w;
fail:
    if (w->fd_trace >= 0)
        close(w->fd_trace);
    if (w->fd_strings >= 0)
        close(w->fd_strings);
    free(w->recbuf);
    free(w->slots);
    free(w);
    return NULL;
}

static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

static int grow_slots(h5ft_writer *w)
{
    size_t n = w->nslots * 2;
    slot_t *ns = calloc(n, sizeof *ns);
    if (!ns)
        return -1;
    for (size_t i = 0; i < w->nslots; i++) {
        if (!w->slots[i].s)
            continue;
        size_t j = (size_t)w->slots[i].hash & (n - 1);
        while (ns[j].s)
            j = (j + 1) & (n - 1);
        ns[j] = w->slots[i];
    }
    free(w->slots);
    w->slots = ns;
    w->nslots = n;
    return 0;
}

uint32_t h5ft_writer_intern(h5ft_writer *w, const char *s)
{
    if (!s || !*s)
        return 0;
    size_t n = strlen(s);
    if (n > UINT32_MAX / 2)
        n = UINT32_MAX / 2;
    uint64_t h = fnv1a(s, n);
    size_t j = (size_t)h & (w->nslots - 1);
    while (w->slots[j].s) {
        if (w->slots[j].hash == h && strcmp(w->slots[j].s, s) == 0)
            return w->slots[j].id;
        j = (j + 1) & (w->nslots - 1);
    }
    if (w->strlen_ + 4 + n > w->strcap) {
        size_t cap = w->strcap ? w->strcap : 4096;
        while (cap < w->strlen_ + 4 + n)
            cap *= 2;
        unsigned char *nb = realloc(w->strbuf, cap);
        if (!nb)
            return UINT32_MAX;
        w->strbuf = nb;
        w->strcap = cap;
    }
    char *copy = malloc(n + 1);
    if (!copy)
        return UINT32_MAX;
    memcpy(copy, s, n);
    copy[n] = 0;
    put32(w->strbuf + w->strlen_, (uint32_t)n);
    memcpy(w->strbuf + w->strlen_ + 4, s, n);
    w->strlen_ += 4 + n;
    w->slots[j].s = copy;
    w->slots[j].hash = h;
    w->slots[j].id = (uint32_t)++w->nstrings;
    uint32_t id = w->slots[j].id;
    if (2 * w->nstrings > w->nslots && grow_slots(w) != 0)
        return UINT32_MAX;
    return id;
}

static void encode(unsigned char *p, const h5ft_record *r)
{
    put64(p + 0, r->t0_ns);
    put64(p + 8, r->t1_ns);
    put64(p + 16, r->bytes);
    put64(p + 24, r->npoints);
    put64(p + 32, r->nblocks);
    put16(p + 40, r->op);
    p[42] = r->ndims;
    p[43] = r->xfer;
    p[44] = r->io_actual;
    p[45] = r->flags;
    put16(p + 46, r->ncount);
    put32(p + 48, r->no_coll_local);
    put32(p + 52, r->no_coll_global);
    put32(p + 56, r->file);
    put32(p + 60, r->obj);
    put32(p + 64, r->shape);
    put32(p + 68, r->mem_type);
    put32(p + 72, r->file_type);
    put32(p + 76, r->props);
}

/* Records stay in host form (h5ft_record) in the buffer so that callers can patch them; encoded at flush. */
h5ft_record *h5ft_writer_add(h5ft_writer *w, const h5ft_record *rec)
{
    if (w->nrec == w->block && h5ft_writer_flush(w) != 0 && w->nrec == w->block)
        w->nrec = 0; /* writes fail: drop the block rather than grow without bound */
    h5ft_record *slot = (h5ft_record *)(void *)w->recbuf + w->nrec++;
    *slot = *rec;
    return slot;
}

int h5ft_writer_reserve(h5ft_writer *w, size_t n)
{
    if (n > w->block)
        return -1;
    if (w->nrec + n > w->block)
        h5ft_writer_flush(w);
    return 0;
}

int h5ft_writer_flush(h5ft_writer *w)
{
    int rc = 0;
    if (!w->failed && w->strlen_ && write_all(w->fd_strings, w->strbuf, w->strlen_) != 0)
        rc = -1;
    w->strlen_ = 0;
    if (!w->failed && rc == 0 && w->nrec) {
        /* encode in place: each 80-byte wire record fits in its own h5ft_record slot, which is no smaller */
        h5ft_record *recs = (h5ft_record *)(void *)w->recbuf;
        unsigned char *out = w->recbuf;
        for (size_t i = 0; i < w->nrec; i++) {
            h5ft_record r = recs[i];
            encode(out + i * H5FT_RECORD_SIZE, &r);
        }
        if (write_all(w->fd_trace, out, w->nrec * H5FT_RECORD_SIZE) != 0)
            rc = -1;
        else
            w->written += w->nrec;
    }
    w->nrec = 0;
    if (rc != 0 && !w->failed) {
        w->failed = 1;
        fprintf(stderr, "h5flow_trace: cannot write %s: %s; the rest of this process's trace is lost\n", w->path,
                strerror(errno));
    }
    return rc;
}

static void writer_free(h5ft_writer *w)
{
    for (size_t i = 0; i < w->nslots; i++)
        free(w->slots[i].s);
    free(w->slots);
    free(w->strbuf);
    free(w->recbuf);
    free(w);
}

int h5ft_writer_close(h5ft_writer *w)
{
    if (!w)
        return 0;
    /* the end record: a trace without it was cut short (process killed, or a write failed) */
    int rc = 0;
    h5ft_record end;
    memset(&end, 0, sizeof end);
    end.op = H5FT_OP_END;
    end.t0_ns = end.t1_ns = h5ft_now(w);
    end.npoints = w->written + w->nrec;
    end.bytes = w->nstrings;
    h5ft_writer_add(w, &end);
    if (h5ft_writer_flush(w) != 0)
        rc = -1;
    if (w->fd_trace >= 0 && close(w->fd_trace) != 0)
        rc = -1;
    if (w->fd_strings >= 0 && close(w->fd_strings) != 0)
        rc = -1;
    writer_free(w);
    return rc;
}

void h5ft_writer_abandon(h5ft_writer *w)
{
    if (!w)
        return;
    close(w->fd_trace);
    close(w->fd_strings);
    writer_free(w);
}
