/* External storage (H5Pset_external, h5py `external=`): a dataset whose raw data lives in files the
 * application names, laid out as native HDF5 lays it out (docs/FORMAT.md "External storage"): the elements
 * in row-major order of the dataset's extent, as the stored datatype's bytes, over the listed segments
 * (file, offset, size) one after the other. The connector keeps no log for such a dataset: a write goes to
 * those files with pwrite, a read comes from them with pread (bytes past a file's end read as zeros, as
 * native); no checksums, no write ordering between processes beyond POSIX's, as with native HDF5.
 * Names are resolved as native resolves them: an absolute name as it is, a relative one under the dataset
 * access list's external file prefix (H5Pset_efile_prefix; "${ORIGIN}": the container's directory) or
 * HDF5_EXTFILE_PREFIX, else relative to the working directory. */
#include "dset.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct h5fl_ext {
    size_t n;
    struct {
        char *path;
        off_t off;
        hsize_t size; /* H5F_UNLIMITED: to the end of the address space */
    } *seg;
};

/* The prefix of relative names, built as native HDF5 builds it (h5fl_build_prefix): $HDF5_EXTFILE_PREFIX
 * when set, else the access list `dapl`'s, "${ORIGIN}" being the container's directory. NULL with *err
 * unset: none. */
static char *ext_prefix(h5fl_dset_t *d, hid_t dapl, bool *err)
{
    char *prop = NULL;
    ssize_t n = H5Pget_efile_prefix(dapl, NULL, 0);
    if (n > 0 && (prop = malloc((size_t)n + 1)))
        H5Pget_efile_prefix(dapl, prop, (size_t)n + 1);
    char *r = h5fl_build_prefix("HDF5_EXTFILE_PREFIX", prop, d->o.file, err);
    free(prop);
    return r;
}

void h5fl_ext_free(h5fl_dset_t *d)
{
    if (!d->ext)
        return;
    for (size_t i = 0; i < d->ext->n; i++)
        free(d->ext->seg[i].path);
    free(d->ext->seg);
    free(d->ext);
    d->ext = NULL;
}

int h5fl_ext_setup(h5fl_dset_t *d)
{
    int cnt = H5Pget_external_count(d->dcpl);
    if (cnt <= 0)
        return cnt < 0 ? -1 : 0;
    bool perr;
    char *prefix = ext_prefix(d, d->dapl, &perr);
    if (perr)
        return -1;
    if (prefix && H5Pset_efile_prefix(d->dapl, prefix) < 0) { /* reported as native reports it, resolved */
        h5fl_err("cannot set the external file prefix of dataset '%s'", d->o.path);
        free(prefix);
        return -1;
    }
    d->ext = calloc(1, sizeof *d->ext);
    if (d->ext)
        d->ext->seg = calloc((size_t)cnt, sizeof *d->ext->seg);
    int st = d->ext && d->ext->seg ? 0 : -1;
    for (int i = 0; st == 0 && i < cnt; i++) {
        char name[PATH_MAX];
        off_t off = 0;
        hsize_t size = 0;
        if (H5Pget_external(d->dcpl, (unsigned)i, sizeof name, name, &off, &size) < 0) {
            st = -1;
            break;
        }
        size_t need = strlen(name) + (prefix ? strlen(prefix) : 0) + 2;
        char *path = malloc(need);
        if (!path) {
            st = -1;
            break;
        }
        if (name[0] == '/' || !prefix || !prefix[0])
            snprintf(path, need, "%s", name);
        else
            snprintf(path, need, "%s/%s", prefix, name);
        d->ext->seg[i].path = path;
        d->ext->seg[i].off = off;
        d->ext->seg[i].size = size;
        d->ext->n++;
    }
    free(prefix);
    if (st != 0) {
        h5fl_ext_free(d);
        h5fl_err("cannot read the external file list of dataset '%s'", d->o.path);
    }
    return st;
}

int h5fl_ext_check_dapl(h5fl_dset_t *d, hid_t dapl)
{
    bool e1, e2;
    char *have = ext_prefix(d, d->dapl, &e1), *want = ext_prefix(d, dapl, &e2);
    int rc = e1 || e2 ? -1 : 0;
    if (rc == 0 && (have || want) && (!have || !want || strcmp(have, want) != 0)) {
        h5fl_err("dataset '%s': the external file prefix of this open (%s) does not match the one of the "
                 "dataset's handle already open in this process (%s); native HDF5 refuses it too: close the "
                 "other handles first or open with the same prefix",
                 d->o.path, want ? want : "none", have ? have : "none");
        rc = -1;
    }
    free(have);
    free(want);
    return rc;
}

/* Bytes [pos, pos+len) of the dataset's external address space to/from buf. */
int h5fl_ext_io(h5fl_dset_t *d, uint64_t pos, uint64_t len, uint8_t *buf, bool write)
{
    uint64_t base = 0;
    for (size_t i = 0; i < d->ext->n && len > 0; i++) {
        hsize_t size = d->ext->seg[i].size;
        uint64_t end = size == H5F_UNLIMITED || base + size < base ? UINT64_MAX : base + size;
        if (pos >= end) {
            base = end;
            continue;
        }
        uint64_t nb = end - pos < len ? end - pos : len, at = (uint64_t)d->ext->seg[i].off + (pos - base);
        const char *path = d->ext->seg[i].path;
        int fd = h5fl_open_file(path, write ? O_RDWR | O_CREAT : O_RDONLY, 0666);
        if (fd < 0) {
            h5fl_err("dataset '%s': cannot open its external file %s: %s", d->o.path, path, strerror(errno));
            return -1;
        }
        uint64_t done = 0;
        while (done < nb) {
            ssize_t r = write ? pwrite(fd, buf + done, (size_t)(nb - done), (off_t)(at + done))
                              : pread(fd, buf + done, (size_t)(nb - done), (off_t)(at + done));
            if (r < 0 && errno == EINTR)
                continue;
            if (r < 0) {
                h5fl_err("dataset '%s': cannot %s its external file %s: %s", d->o.path, write ? "write" : "read",
                         path, strerror(errno));
                close(fd);
                return -1;
            }
            if (r == 0) { /* past the file's end: zeros, as native reads them */
                memset(buf + done, 0, (size_t)(nb - done));
                break;
            }
            done += (uint64_t)r;
        }
        if (close(fd) != 0) {
            h5fl_err("dataset '%s': cannot close its external file %s: %s", d->o.path, path, strerror(errno));
            return -1;
        }
        buf += nb;
        pos += nb;
        len -= nb;
        base = end;
    }
    if (len > 0) {
        h5fl_err("dataset '%s': its elements reach past the end of its external files (%zu segments)", d->o.path,
                 d->ext->n);
        return -1;
    }
    return 0;
}

/* Creation: fixed-size values only; the segments must hold the dataset at its maximum extent where that is
 * finite (as native checks). */
int h5fl_ext_check(hid_t type, hid_t space, hid_t dcpl, const char *name)
{
    int cnt = H5Pget_external_count(dcpl);
    if (cnt <= 0)
        return 0;
    if (h5fl_blob_type(type) || H5Tis_variable_str(type) > 0 || H5Tdetect_class(type, H5T_REFERENCE) > 0) {
        h5fl_err("dataset '%s': its values have variable-length parts or references; store them in the "
                 "container: h5flow_log keeps only fixed-size values without references in external storage",
                 name);
        return -1;
    }
    hsize_t total = 0;
    bool unlimited = false;
    for (int i = 0; i < cnt; i++) {
        char nm[8];
        off_t off;
        hsize_t size;
        if (H5Pget_external(dcpl, (unsigned)i, sizeof nm, nm, &off, &size) < 0)
            return -1;
        if (size == H5F_UNLIMITED || total + size < total)
            unlimited = true;
        else
            total += size;
    }
    int rank = H5Sget_simple_extent_ndims(space);
    hsize_t dims[H5S_MAX_RANK], maxd[H5S_MAX_RANK], n = H5Tget_size(type);
    if (rank < 0 || H5Sget_simple_extent_dims(space, dims, maxd) < 0)
        return -1;
    bool finite = true;
    for (int k = 0; k < rank; k++) {
        if (maxd[k] == H5S_UNLIMITED)
            finite = false;
        else
            n *= maxd[k];
    }
    if (!unlimited && finite && n > total) {
        h5fl_err("dataset '%s': its external files hold %llu bytes, less than its %llu bytes (external storage "
                 "not big enough)",
                 name, (unsigned long long)total, (unsigned long long)n);
        return -1;
    }
    return 0;
}
