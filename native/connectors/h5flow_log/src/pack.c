/* Zero-copy access to a dataset's stored elements, for h5flow pack (src/h5flow/packing.py, through ctypes).
 *
 * `h5flow pack` copies a container into a native file. Through H5Dread every element is first copied from
 * the mapped data log into the caller's buffer and only then written to the native file; here the caller
 * gets a pointer into the mapped log instead and hands it straight to H5Dwrite / H5Dwrite_chunk (one copy
 * fewer, no buffer to fault in). The data checksums are checked exactly as a read checks them (the first
 * time a write is touched, unless H5FLOW_LOG_VERIFY=0). docs/FORMAT.md, "Pack and unpack". */
#include "dset.h"

#include <string.h>

__attribute__((visibility("default"))) int64_t h5flow_log_stored_run(hid_t dset, uint64_t start, uint64_t n,
                                                                     const void **ptr, char *err, size_t errlen);

static int64_t fail(char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", h5fl_err_msg()[0] ? h5fl_err_msg() : "unknown error");
    h5fl_err_clear();
    return -1;
}

/* Elements [start, start+n) of the open dataset `dset` (row-major linear order of its current extent): the
 * number m (1..n) of elements from `start` on that lie back to back in one mapped, unfiltered data log, and
 * in *ptr the address of their m * (element size) bytes, in the dataset's datatype. The address stays valid
 * until the dataset is next read, written, refreshed or closed (or its file flushed or closed).
 * 0 (and *ptr NULL): the element at `start` is not stored that way (never written or discarded by a shrink:
 * it reads as the fill value; a variable-length, virtual or filtered dataset) — read it with H5Dread.
 * -1: an error (a checksum mismatch, a damaged log, not an h5flow_log dataset), its message in err.
 * It answers from the merged index (d->ix->map), as h5fl_gather_seq reads: a layout that reads from
 * elsewhere must return 0 here (h5flow.packing also compares each run's end elements with H5Dread). */
int64_t h5flow_log_stored_run(hid_t dset, uint64_t start, uint64_t n, const void **ptr, char *err, size_t errlen)
{
    h5fl_err_clear();
    *ptr = NULL;
    if (errlen)
        err[0] = '\0';
    char name[64] = "";
    if (H5Iget_type(dset) != H5I_DATASET || H5VLget_connector_name(dset, name, sizeof name) < 0 ||
        strcmp(name, H5FL_NAME) != 0) {
        h5fl_err("not a dataset of an h5flow_log container (connector '%s')", name);
        return fail(err, errlen);
    }
    h5fl_dset_t *d = H5VLobject(dset);
    if (!d) {
        h5fl_err("cannot reach the dataset's connector object");
        return fail(err, errlen);
    }
    if (d->vds || d->vstr || d->blob || d->filtered || n == 0)
        return 0;
    if (h5fl_ix_ready(d) != 0)
        return fail(err, errlen);
    const h5fl_map_t *m = &d->ix->map;
    size_t k = h5fl_map_find(m, start);
    uint64_t pos = start, end = start + n, es = d->esize;
    const uint8_t *base = NULL, *next = NULL;
    for (; k < m->n && pos < end; k++) {
        const h5fl_extent_t *e = &m->ext[k];
        if (e->start > pos || e->log == H5FL_FILL_LOG)
            break; /* unwritten or discarded from pos on */
        h5fl_log_t *l = &d->ix->logs[e->log];
        if (l->filtered || !l->map)
            break;
        uint64_t stop = e->start + e->len < end ? e->start + e->len : end;
        uint64_t from = e->loff + (pos - e->start) * es, nb = (stop - pos) * es;
        if (nb > l->mapsize || from > l->mapsize - nb) {
            h5fl_err("dataset '%s': index points beyond the mapped data log %s", d->o.path, l->path);
            return fail(err, errlen);
        }
        if (next && l->map + from != next)
            break; /* the run goes on elsewhere: the caller asks again from pos */
        if (e->rec != H5FL_NO_REC && d->o.file->verify && !d->ix->recs[e->rec].checked &&
            h5fl_verify_rec(d, e->rec) != 0)
            return fail(err, errlen);
        if (!base)
            base = l->map + from;
        next = l->map + from + nb;
        pos = stop;
    }
    if (!base)
        return 0;
    *ptr = base;
    return (int64_t)(pos - start);
}
