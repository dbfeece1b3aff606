/* Dataspace selections as byte sequences: iteration, packing, index runs, validation. */
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


int h5fl_for_each_seq(hid_t space, size_t esize, seq_fn fn, void *ctx)
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

/* Whether the selection of `space` is one h5fl_sel_contiguous byte range; its offset in *off. */
bool h5fl_sel_contiguous(hid_t space, size_t esize, hsize_t npoints, hsize_t *off)
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


int h5fl_copy_seq(void *vctx, hsize_t off, size_t len)
{
    copy_ctx_t *c = vctx;
    if (c->to_flat)
        memcpy(c->flat + c->pos, c->mem + off, len);
    else
        memcpy(c->mem + off, c->flat + c->pos, len);
    c->pos += len;
    return 0;
}


int h5fl_add_run(void *vctx, hsize_t off, size_t len)
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


int h5fl_resolve_sel(h5fl_dset_t *d, hid_t mspace, hid_t fspace, sel_t *s)
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
