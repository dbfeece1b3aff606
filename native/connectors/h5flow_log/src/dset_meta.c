/* The dataset metadata sidecar (@dataset): datatype, dataspace and creation properties, checksummed. */
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
    h5fl_put_u32(b + 8, h5fl_vds_layout(dcpl)   ? H5FL_SIDECAR_VERSION_VDS
                        : h5fl_blob_type(type) ? H5FL_SIDECAR_VERSION_VLEN
                        : h5fl_filtered(dcpl)  ? H5FL_SIDECAR_VERSION_FILTER
                                               : H5FL_SIDECAR_VERSION);
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

int h5fl_sidecar_write(const char *dir, hid_t type, hid_t space, hid_t dcpl, bool sync)
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

int h5fl_sidecar_read(const char *dir, hid_t *type, hid_t *space, hid_t *dcpl)
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
    uint32_t sv = h5fl_get_u32(b + 8);
    if (sv < H5FL_SIDECAR_VERSION || sv > H5FL_SIDECAR_VERSION_FILTER) {
        h5fl_err("dataset metadata %s has format %u, expected %d to %d (written by a newer h5flow_log?)", path,
                 sv, H5FL_SIDECAR_VERSION, H5FL_SIDECAR_VERSION_FILTER);
        goto done;
    }
    size_t lt = h5fl_get_u32(b + 12), ls = h5fl_get_u32(b + 16), lp = h5fl_get_u32(b + 20);
    if (24 + lt + ls + lp + 4 != n) {
        h5fl_err("dataset metadata %s is corrupt (inconsistent lengths)", path);
        goto done;
    }
    *type = H5Tdecode(b + 24);
    if (*type >= 0 && sv == H5FL_SIDECAR_VERSION_VLEN) { /* see h5fl_blob_memtype */
        hid_t mt = h5fl_blob_memtype(*type);
        H5Tclose(*type);
        *type = mt;
    }
    if (*type >= 0 && (sv == H5FL_SIDECAR_VERSION_VLEN) != h5fl_blob_type(*type)) {
        h5fl_err("dataset metadata %s: format %u does not match its datatype (corrupt)", path, sv);
        goto done;
    }
    *space = H5Sdecode(b + 24 + lt);
    *dcpl = H5Pdecode(b + 24 + lt + ls);
    if (*type < 0 || *space < 0 || *dcpl < 0) {
        h5fl_err("dataset metadata %s cannot be decoded", path);
        goto done;
    }
    if ((sv == H5FL_SIDECAR_VERSION_VDS) != h5fl_vds_layout(*dcpl)) {
        h5fl_err("dataset metadata %s: format %u does not match its layout (corrupt)", path, sv);
        goto done;
    }
    if ((sv == H5FL_SIDECAR_VERSION_FILTER) != h5fl_filtered(*dcpl)) {
        h5fl_err("dataset metadata %s: format %u does not match its filters (corrupt)", path, sv);
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
