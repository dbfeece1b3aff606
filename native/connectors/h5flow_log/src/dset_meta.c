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
static int encode_sidecar(hid_t type, hid_t space, hid_t dcpl, const h5fl_layout_t *lay, uint8_t **out,
                          size_t *outlen)
{
    bool layout = lay && lay->order != 0;
    size_t lt = 0, ls = 0, lp = 0;
    if (H5Tencode(type, NULL, &lt) < 0 || H5Sencode2(space, NULL, &ls, H5P_DEFAULT) < 0 ||
        H5Pencode2(dcpl, NULL, &lp, H5P_DEFAULT) < 0) {
        h5fl_err("cannot encode the dataset's datatype, dataspace or creation properties");
        return -1;
    }
    size_t n = 8 + 16 + lt + ls + lp + (layout ? H5FL_LAYOUT_BLOCK(lay->rank) : 0) + 4;
    uint8_t *b = calloc(1, n);
    if (!b) {
        h5fl_err("out of memory");
        return -1;
    }
    memcpy(b, SIDECAR_MAGIC, 8);
    h5fl_put_u32(b + 8, layout                  ? H5FL_SIDECAR_VERSION_LAYOUT
                        : h5fl_vds_layout(dcpl) ? H5FL_SIDECAR_VERSION_VDS
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
    if (layout) { /* u32 order, u32 rank, u64 epoch, u64 generation, rank x u64 extent, rank x u64 shard */
        uint8_t *q = p + lt + ls + lp;
        h5fl_put_u32(q, lay->order);
        h5fl_put_u32(q + 4, lay->rank);
        h5fl_put_u64(q + 8, lay->epoch);
        h5fl_put_u64(q + 16, lay->gen);
        for (uint32_t k = 0; k < lay->rank; k++) {
            h5fl_put_u64(q + 24 + 8 * k, lay->dims[k]);
            h5fl_put_u64(q + 24 + 8 * (lay->rank + k), lay->chunk[k]);
        }
    }
    h5fl_put_u32(b + n - 4, h5fl_crc32c(0, b, n - 4));
    *out = b;
    *outlen = n;
    return 0;
}

int h5fl_sidecar_write(const char *dir, hid_t type, hid_t space, hid_t dcpl, bool sync)
{
    /* A restructured dataset keeps its layout (H5Dset_extent rewrites the sidecar): read it from the file,
     * which another process may have restructured since this one opened the dataset. */
    h5fl_layout_t lay = {0};
    char *path = h5fl_join(dir, H5FL_DSET_FILE);
    bool exists = path && access(path, F_OK) == 0;
    free(path);
    if (exists && h5fl_sidecar_layout(dir, &lay) != 0)
        return -1;
    return h5fl_sidecar_write_layout(dir, type, space, dcpl, &lay, sync);
}

int h5fl_sidecar_write_layout(const char *dir, hid_t type, hid_t space, hid_t dcpl, const h5fl_layout_t *lay,
                              bool sync)
{
    uint8_t *b;
    size_t n;
    if (encode_sidecar(type, space, dcpl, lay, &b, &n) != 0)
        return -1;
    int rc = h5fl_write_file_atomic(dir, H5FL_DSET_FILE, b, n, sync);
    /* Mirror to an extended attribute where the file system supports them (best effort). */
    if (rc == 0)
        (void)setxattr(dir, H5FL_XATTR, b, n, 0);
    free(b);
    return rc;
}

/* The layout block of a version-5 sidecar b[0..n) whose blobs end at `at` (lay->order 0 for other versions). */
static int parse_layout(const char *path, const uint8_t *b, size_t n, size_t at, uint32_t sv, h5fl_layout_t *lay)
{
    memset(lay, 0, sizeof *lay);
    if (sv != H5FL_SIDECAR_VERSION_LAYOUT)
        return at + 4 == n ? 0 : -1;
    if (at > n || n - at < 4 + 24)
        return -1;
    const uint8_t *q = b + at;
    lay->order = h5fl_get_u32(q);
    lay->rank = h5fl_get_u32(q + 4);
    lay->epoch = h5fl_get_u64(q + 8);
    lay->gen = h5fl_get_u64(q + 16);
    if (lay->order < H5FL_ORDER_ROW || lay->order > H5FL_ORDER_CHUNKS || lay->rank < 1 ||
        lay->rank > H5S_MAX_RANK || n - at != H5FL_LAYOUT_BLOCK(lay->rank) + 4 || lay->gen < 1 ||
        lay->epoch > H5FL_EPOCH_MAX) {
        h5fl_err("dataset metadata %s: its restructured layout is corrupt", path);
        return -2;
    }
    for (uint32_t k = 0; k < lay->rank; k++) {
        lay->dims[k] = h5fl_get_u64(q + 24 + 8 * k);
        lay->chunk[k] = h5fl_get_u64(q + 24 + 8 * (lay->rank + k));
        if (lay->chunk[k] < 1) {
            h5fl_err("dataset metadata %s: its restructured layout has an empty shard shape (corrupt)", path);
            return -2;
        }
    }
    return 0;
}

/* Read and check the sidecar's framing: its bytes in *out (free them), version in *sv. */
static int sidecar_load(const char *path, uint8_t **out, size_t *outn, uint32_t *sv)
{
    void *vb = NULL;
    size_t n = 0;
    if (h5fl_read_file(path, &vb, &n) != 0)
        return -1;
    uint8_t *b = vb;
    if (n < 28 || memcmp(b, SIDECAR_MAGIC, 8) != 0 || h5fl_crc32c(0, b, n - 4) != h5fl_get_u32(b + n - 4)) {
        h5fl_err("dataset metadata %s is corrupt (bad magic or checksum)", path);
        free(vb);
        return -1;
    }
    *sv = h5fl_get_u32(b + 8);
    if (*sv < H5FL_SIDECAR_VERSION || *sv > H5FL_SIDECAR_VERSION_LAYOUT) {
        h5fl_err("dataset metadata %s has format %u, expected %d to %d (written by a newer h5flow_log?)", path,
                 *sv, H5FL_SIDECAR_VERSION, H5FL_SIDECAR_VERSION_LAYOUT);
        free(vb);
        return -1;
    }
    size_t lt = h5fl_get_u32(b + 12), ls = h5fl_get_u32(b + 16), lp = h5fl_get_u32(b + 20);
    h5fl_layout_t lay;
    int pl = lt + ls + lp <= n ? parse_layout(path, b, n, 24 + lt + ls + lp, *sv, &lay) : -1;
    if (pl != 0) {
        if (pl == -1)
            h5fl_err("dataset metadata %s is corrupt (inconsistent lengths)", path);
        free(vb);
        return -1;
    }
    *out = b;
    *outn = n;
    return 0;
}

int h5fl_sidecar_layout(const char *dir, h5fl_layout_t *lay)
{
    char *path = h5fl_join(dir, H5FL_DSET_FILE);
    uint8_t *b = NULL;
    size_t n = 0;
    uint32_t sv = 0;
    int rc = path && sidecar_load(path, &b, &n, &sv) == 0 ? 0 : -1;
    if (rc == 0) {
        size_t at = 24 + (size_t)h5fl_get_u32(b + 12) + h5fl_get_u32(b + 16) + h5fl_get_u32(b + 20);
        rc = parse_layout(path, b, n, at, sv, lay) == 0 ? 0 : -1;
    }
    free(b);
    free(path);
    return rc;
}

int h5fl_sidecar_read(const char *dir, hid_t *type, hid_t *space, hid_t *dcpl)
{
    char *path = h5fl_join(dir, H5FL_DSET_FILE);
    void *vb = NULL;
    size_t n = 0;
    int rc = -1;
    *type = *space = *dcpl = H5I_INVALID_HID;
    uint8_t *b = NULL;
    uint32_t sv = 0;
    if (!path || sidecar_load(path, &b, &n, &sv) != 0)
        goto done;
    vb = b;
    size_t lt = h5fl_get_u32(b + 12), ls = h5fl_get_u32(b + 16);
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

int h5fl_sidecar_drop_layout(const char *dir, bool sync)
{
    h5fl_layout_t lay;
    if (h5fl_sidecar_layout(dir, &lay) != 0)
        return -1;
    if (!lay.order)
        return 0;
    hid_t t, s, p;
    if (h5fl_sidecar_read(dir, &t, &s, &p) != 0)
        return -1;
    int rc = h5fl_sidecar_write_layout(dir, t, s, p, NULL, sync);
    H5Tclose(t);
    H5Sclose(s);
    H5Pclose(p);
    return rc;
}
