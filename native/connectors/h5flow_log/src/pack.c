/* Stored elements of a dataset for h5flow pack (src/h5flow/packing.py, through ctypes).
 *
 * `h5flow pack` copies a container into a native file. Through H5Dread every element is copied from the
 * mapped data log into the caller's buffer after the whole write's checksum was computed from the mapped
 * log (a page fault per few KiB of log, then every byte read from memory twice). Here the caller gets the
 * stored bytes with pread into one reused, cache-sized buffer, each write's checksum computed from that
 * buffer while it is hot (unless H5FLOW_LOG_VERIFY=0), and hands them to H5Dwrite / H5Dwrite_chunk at once:
 * the same work as h5repack (pread, pwrite) plus the checksum. docs/FORMAT.md, "Pack and unpack". */
#include "dset.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

__attribute__((visibility("default"))) int64_t h5flow_log_read_stored(hid_t dset, uint64_t start, uint64_t n,
                                                                      void *buf, uint64_t *state, char *err,
                                                                      size_t errlen);
__attribute__((visibility("default"))) int h5flow_log_read_done(hid_t dset, uint64_t *state, char *err,
                                                                size_t errlen);

static int64_t fail(char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", h5fl_err_msg()[0] ? h5fl_err_msg() : "unknown error");
    h5fl_err_clear();
    return -1;
}

static h5fl_dset_t *dset_of(hid_t dset) { return h5fl_container_dset(dset); }

/* ---------------------------------------------------------------- pread into the caller's buffer
 *
 * h5flow_log_read_stored copies stored elements with pread into the caller's (reused, cache-sized) buffer
 * instead of handing out mapped pages: no page fault per 4 KiB of the logs, and the data checksum of each
 * write is computed from that buffer while it is hot, as the bytes go by, instead of from the mapped log
 * first. The caller's `state` (4 uint64_t, zeroed before the first call on a dataset, one per open dataset)
 * carries the one write whose checksum is being accumulated across calls:
 *   state[0] 1 + its record index (0: none), state[1] the CRC32C so far, state[2] the next log byte expected.
 * A write read from its first byte to its last, in order (a pack reads row-major, logs are appended in
 * order), is checked when its last byte arrives; any other (a read that starts inside it, or leaves it
 * unfinished) is checked from the mapped log as the read path checks it (h5fl_verify_rec).
 * So bytes of a write can reach the caller before its checksum is compared: the caller must discard what it
 * made of them when a later call, or h5flow_log_read_done, fails (h5flow pack removes its temporary output),
 * and must call h5flow_log_read_done before it trusts anything. Never use this for a plain read. */

static int state_finish(h5fl_dset_t *d, uint64_t *state)
{
    if (!state[0])
        return 0;
    uint32_t ri = (uint32_t)(state[0] - 1);
    state[0] = 0;
    if (!d->ix || ri >= d->ix->nrecs || d->ix->recs[ri].checked)
        return 0;
    return h5fl_verify_rec(d, ri); /* read only in part: the whole write from the mapped log */
}

/* Account bytes [a, a+nb) of log `log`, now at p, to record ri's checksum. */
static int state_add(h5fl_dset_t *d, uint64_t *state, uint32_t ri, uint64_t a, const uint8_t *p, uint64_t nb)
{
    h5fl_crcrec_t *c = &d->ix->recs[ri];
    if (c->checked)
        return 0;
    if (!(state[0] == (uint64_t)ri + 1 && state[2] == a)) {
        if (state_finish(d, state) != 0)
            return -1;
        if (a != c->from) /* not from its start: the whole write from the mapped log */
            return h5fl_verify_rec(d, ri);
        state[0] = (uint64_t)ri + 1;
        state[1] = 0;
    }
    if (a + nb > c->to) { /* the index says the extent runs past its write: check it the old way */
        state[0] = 0;
        return h5fl_verify_rec(d, ri);
    }
    state[1] = h5fl_crc32c((uint32_t)state[1], p, (size_t)nb);
    state[2] = a + nb;
    if (state[2] == c->to) {
        state[0] = 0;
        if ((uint32_t)state[1] != c->crc) {
            h5fl_err("dataset '%s': data checksum mismatch in bytes %llu..%llu of %s (the write indexed at byte "
                     "%llu of its .idx): the data log is corrupt (CRC32C %08x, recorded %08x); "
                     "H5FLOW_LOG_VERIFY=0 in the environment reads it unchecked",
                     d->o.path, (unsigned long long)c->from, (unsigned long long)c->to,
                     d->ix->logs[c->log].path, (unsigned long long)c->ipos, (uint32_t)state[1], c->crc);
            return -1;
        }
        c->checked = true;
    }
    return 0;
}

/* Elements [start, start+n) of the open dataset `dset` (row-major linear order of its current extent),
 * copied into buf (n * element size bytes) with pread from the data logs: the number m (1..n) of elements
 * from `start` on that are stored unfiltered (any number of logs), their bytes at the start of buf.
 * 0: the element at `start` is not stored that way (never written or discarded by a shrink: it reads as the
 * fill value; a variable-length, virtual or filtered dataset; restructured contents, which read from their
 * shard files) — read it with H5Dread. It answers from the merged index (d->ix->map), as h5fl_gather_seq
 * reads; h5flow.packing also compares each slab's end elements with H5Dread.
 * -1: an error (a checksum mismatch, a damaged or short log, not an h5flow_log dataset), its message in err. */
int64_t h5flow_log_read_stored(hid_t dset, uint64_t start, uint64_t n, void *buf, uint64_t *state, char *err,
                               size_t errlen)
{
    h5fl_err_clear();
    if (errlen)
        err[0] = '\0';
    h5fl_dset_t *d = dset_of(dset);
    if (!d)
        return fail(err, errlen);
    if (d->vds || d->vstr || d->blob || d->filtered || d->ext || n == 0)
        return 0;
    if (h5fl_ix_ready(d) != 0)
        return fail(err, errlen);
    const h5fl_map_t *m = &d->ix->map;
    size_t k = h5fl_map_find(m, start);
    uint64_t es = d->esize;
    if (n > UINT64_MAX - start || n > SIZE_MAX / es) {
        h5fl_err("dataset '%s': %llu elements from %llu overflow a buffer size", d->o.path,
                 (unsigned long long)n, (unsigned long long)start);
        return fail(err, errlen);
    }
    uint64_t pos = start, end = start + n;
    uint8_t *out = buf;
    bool verify = d->o.file->verify;
    for (; k < m->n && pos < end; k++) {
        const h5fl_extent_t *e = &m->ext[k];
        if (e->start > pos || e->log == H5FL_FILL_LOG)
            break; /* unwritten or discarded from pos on */
        h5fl_log_t *l = &d->ix->logs[e->log];
        if (l->filtered || l->fd < 0)
            break;
        uint64_t stop = e->start + e->len < end ? e->start + e->len : end;
        uint64_t from = e->loff + (pos - e->start) * es, nb = (stop - pos) * es;
        if (nb > l->mapsize || from > l->mapsize - nb) {
            h5fl_err("dataset '%s': index points beyond the mapped data log %s", d->o.path, l->path);
            return fail(err, errlen);
        }
        for (uint64_t got = 0; got < nb;) {
            ssize_t r = pread(l->fd, out + got, (size_t)(nb - got), (off_t)(from + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                h5fl_err("dataset '%s': cannot read %llu bytes at %llu of data log %s: %s", d->o.path,
                         (unsigned long long)(nb - got), (unsigned long long)(from + got), l->path,
                         r < 0 ? strerror(errno) : "it ends early (truncated since it was opened?)");
                return fail(err, errlen);
            }
            got += (uint64_t)r;
        }
        if (e->rec != H5FL_NO_REC && verify && state_add(d, state, e->rec, from, out, nb) != 0)
            return fail(err, errlen);
        out += nb;
        pos = stop;
    }
    return (int64_t)(pos - start);
}

/* The end of a sequence of h5flow_log_read_stored calls on `dset`: the write whose checksum was being
 * accumulated and was not read to its end is checked from the mapped log. 0, or -1 (message in err). */
int h5flow_log_read_done(hid_t dset, uint64_t *state, char *err, size_t errlen)
{
    h5fl_err_clear();
    if (errlen)
        err[0] = '\0';
    if (!state[0])
        return 0;
    h5fl_dset_t *d = dset_of(dset);
    if (!d || state_finish(d, state) != 0)
        return (int)fail(err, errlen);
    return 0;
}
