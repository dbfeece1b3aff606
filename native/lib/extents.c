/* rank-<r>.extents.json beside a closed n-n rank file: where HDF5 put each dataset's raw data, so consumers
 * read rows with pread instead of opening the file through HDF5 (docs/STREAM.md, "Raw reads"). The document
 * the Python producer writes (h5flow.transports.hdf5._h5.extents_document), byte for byte in its structure, with
 * the CRC-32 of its content last: consumers refuse a document whose checksum does not match. */
#define _DEFAULT_SOURCE
#include "extents.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "h5flow_util.h"

void h5fl_extent_of(h5fl_extent *e, hid_t dset, const char *mesh, const char *assoc, const char *name,
                    const char *dtype, uint64_t rows, uint64_t ncomp)
{
    snprintf(e->path, sizeof e->path, "%s/%s/%s", mesh, assoc, name);
    snprintf(e->dtype, sizeof e->dtype, "%s", dtype);
    e->rows = rows;
    e->ncomp = ncomp;
    haddr_t off = H5Dget_offset(dset); /* HADDR_UNDEF: not contiguous, or no storage (no rows) */
    e->has_offset = off != HADDR_UNDEF;
    e->offset = e->has_offset ? (uint64_t)off : 0;
    e->nbytes = (uint64_t)H5Dget_storage_size(dset);
}

int h5fl_write_extents(const char *rank_file, const h5fl_extent *ext, size_t n)
{
    size_t len = strlen(rank_file);
    char path[H5FL_PATH_MAX];
    if (len < 3 || strcmp(rank_file + len - 3, ".h5") != 0 ||
        snprintf(path, sizeof path, "%.*s.extents.json", (int)(len - 3), rank_file) >= (int)sizeof path)
        return ENAMETOOLONG;
    struct stat st;
    if (stat(rank_file, &st) != 0)
        return errno;
    h5fl_buf b = {0};
    h5fl_buf_printf(&b, "{\"format\":\"h5flow-extents\",\"version\":2,\"file_size\":%" PRIu64 ",\"datasets\":{",
                    (uint64_t)st.st_size);
    for (size_t i = 0; i < n; i++) {
        h5fl_buf_printf(&b, "%s\"", i ? "," : "");
        h5fl_json_escape(&b, ext[i].path);
        if (ext[i].has_offset)
            h5fl_buf_printf(&b, "\":[%" PRIu64 ",%" PRIu64 ",\"%s\",[%" PRIu64 ",%" PRIu64 "]]", ext[i].offset,
                            ext[i].nbytes, ext[i].dtype, ext[i].rows, ext[i].ncomp);
        else
            h5fl_buf_printf(&b, "\":null");
    }
    h5fl_buf_printf(&b, "}");
    /* the checksum of every byte before it, last (h5flow.transports.hdf5._h5.extents_document) */
    if (!b.oom)
        h5fl_buf_printf(&b, ",\"crc32\":\"%08" PRIx32 "\"}", h5fl_crc32(b.data, b.len));
    /* a plain write: the file is inside the step's .tmp directory, published (or removed) with it */
    int rc = b.oom ? ENOMEM : 0;
    if (!rc) {
        FILE *f = fopen(path, "w");
        if (!f)
            rc = errno;
        else {
            if (fwrite(b.data, 1, b.len, f) != b.len)
                rc = errno ? errno : EIO;
            if (fclose(f) != 0 && !rc)
                rc = errno;
        }
    }
    h5fl_buf_free(&b);
    /* a published step's files are never written: read-only, even to their owner (docs/STREAM.md) */
    if (!rc && (chmod(path, 0400) != 0 || chmod(rank_file, 0400) != 0))
        rc = errno;
    return rc;
}
