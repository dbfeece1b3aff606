/* Object references: persistent object ids (docs/FORMAT.md "Object references").
 *
 * A reference (hobj_ref_t, H5R_ref_t) holds the 8-byte token H5VL_OBJECT_LOOKUP returns. A directory's
 * inode is no such token: copying a container (cp -r, tar, rsync) gives every object a new inode, and
 * an inode freed by a deleted object is reused by the next one created, so a reference made from an
 * inode could later name another object. The token of a reference is therefore the object's id, kept
 * in the file @id of its directory, minted the first time a reference to it is made:
 *
 *     id = 1 << 63 | epoch << 40 | writer << 20 | n
 *
 * (epoch: the writer epoch of the handle that mints it, claimed by exactly one process; writer: its MPI
 * rank; n: a counter of that handle), which no other object of the container can ever have been given,
 * copies included. The file is published with link(2), so two processes minting for one object agree
 * on the first. Renames carry @id along (it is inside the directory); H5Ocopy must not (a copy is
 * another object). Resolving a token scans the container for the directory whose @id is the token: a
 * token no directory holds fails ("does not exist any more"), one two directories hold fails
 * ("ambiguous"): a reference never opens an object other than the one it was made from. Tokens without
 * the top bit (H5Oget_info, link info) are inodes, resolved as before (vol_group.c). */
#include "h5fl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define REF_ID_FILE H5FL_ID_FILE
#define REF_BIT (UINT64_C(1) << 63)
#define REF_EPOCH_BITS 23
#define REF_WRITER_BITS 20
#define REF_COUNT_BITS 20
#define REF_ROOT H5FL_ROOT_ID /* the root group's id: epoch 0 is never claimed, so no minted id is this */

bool h5fl_ref_is_id(const H5O_token_t *tok)
{
    uint64_t v;
    memcpy(&v, tok->__data, sizeof v);
    return (v & REF_BIT) != 0;
}

/* The id stored in dir/@id: 1 and *id, 0 if there is none, -1 on a damaged file (error recorded). */
static int read_id(const char *dir, uint64_t *id)
{
    char *p = h5fl_join(dir, REF_ID_FILE);
    if (!p) {
        h5fl_err("out of memory");
        return -1;
    }
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        free(p);
        if (e == ENOENT || e == ENOTDIR)
            return 0;
        h5fl_err("cannot read the object id %s/%s: %s", dir, REF_ID_FILE, strerror(e));
        return -1;
    }
    uint8_t b[16];
    ssize_t n = read(fd, b, sizeof b);
    close(fd);
    if (n != 12 || h5fl_crc32c(0, b, 8) != h5fl_get_u32(b + 8) || !(h5fl_get_u64(b) & REF_BIT)) {
        h5fl_err("the object id file %s is damaged: references to this object cannot be resolved; "
                 "remove the file only if no reference to the object is stored anywhere",
                 p);
        free(p);
        return -1;
    }
    free(p);
    *id = h5fl_get_u64(b);
    return 1;
}

static int mint(h5fl_file_t *f, uint64_t *id)
{
    if (f->epoch >= (UINT64_C(1) << REF_EPOCH_BITS) || (uint64_t)f->rank >= (UINT64_C(1) << REF_WRITER_BITS)) {
        h5fl_err("cannot give an object of %s a reference id: writer epoch %llu / rank %d exceed the id's "
                 "%d / %d bits; copy the container's objects into a new container (h5repack)",
                 f->name, (unsigned long long)f->epoch, f->rank, REF_EPOCH_BITS, REF_WRITER_BITS);
        return -1;
    }
    h5fl_file_t *owner = h5fl_epoch_owner(f); /* its epoch's counter, shared by every handle writing in it */
    if (owner->ref_minted >= (UINT64_C(1) << REF_COUNT_BITS)) {
        h5fl_err("%s: this open gave %llu objects their first reference, the most one open can; close and "
                 "reopen the container to make more",
                 f->name, (unsigned long long)owner->ref_minted);
        return -1;
    }
    uint64_t n = owner->ref_minted++;
    *id = REF_BIT | f->epoch << (REF_WRITER_BITS + REF_COUNT_BITS) | (uint64_t)f->rank << REF_COUNT_BITS | n;
    return 0;
}

/* The id of the object at `dir`, minted if it has none (the container must be writable then). */
int h5fl_ref_object_id(h5fl_file_t *f, const char *dir, const char *path, uint64_t *id)
{
    int r = read_id(dir, id);
    if (r != 0)
        return r < 0 ? -1 : 0;
    if (!(f->intent & H5F_ACC_RDWR)) {
        h5fl_err("object '%s' has never been referenced and the container %s is open read-only: a "
                 "reference needs an id stored with the object; open the container read-write once to "
                 "create the first reference to it",
                 path, f->name);
        return -1;
    }
    uint64_t nid;
    if (mint(f, &nid) != 0)
        return -1;
    uint8_t b[12];
    h5fl_put_u64(b, nid);
    h5fl_put_u32(b + 8, h5fl_crc32c(0, b, 8));
    char tmpname[64];
    snprintf(tmpname, sizeof tmpname, "@tmp.%016llx" REF_ID_FILE, (unsigned long long)nid);
    if (h5fl_write_file_atomic(dir, tmpname, b, sizeof b, f->fsync) != 0)
        return -1;
    char *tp = h5fl_join(dir, tmpname), *ip = h5fl_join(dir, REF_ID_FILE);
    int rc = -1;
    if (!tp || !ip) {
        h5fl_err("out of memory");
    } else if (link(tp, ip) == 0) {
        *id = nid;
        rc = 0;
    } else if (errno == EEXIST) { /* another process minted first: its id is the object's */
        rc = read_id(dir, id) == 1 ? 0 : -1;
        if (rc != 0) /* h5fl_err keeps an earlier, more specific message */
            h5fl_err("the object id of '%s' vanished while it was being created", path);
    } else {
        h5fl_err("cannot store the object id of '%s' in %s: %s", path, dir, strerror(errno));
    }
    if (tp)
        unlink(tp);
    free(tp);
    free(ip);
    return rc;
}

int h5fl_ref_token(h5fl_file_t *f, const char *dir, const char *path, H5O_token_t *tok)
{
    uint64_t id = REF_ROOT; /* the root group is one per container: a fixed id, nothing to store */
    if (strcmp(path, "/") != 0 && strcmp(dir, f->o.dir) != 0 && h5fl_ref_object_id(f, dir, path, &id) != 0)
        return -1;
    memset(tok, 0, sizeof *tok);
    memcpy(tok->__data, &id, sizeof id); /* native byte order, as the inode tokens */
    return 0;
}

/* Over the container, every object once (hard links followed once: refs.c sees an object in the store
 * through its first name): count the objects whose id is `id`, keep the first in *out. */
typedef struct scan_arg {
    uint64_t id;
    h5fl_loc_t *out;
    int found;
} scan_arg_t;

int h5fl_ref_read_id(const char *dir, uint64_t *id)
{
    return read_id(dir, id);
}

static int scan_cb(const char *dir, const char *path, H5I_type_t t, void *arg)
{
    scan_arg_t *a = arg;
    uint64_t v;
    int r = read_id(dir, &v);
    if (r < 0)
        return -1;
    if (r == 1 && v == a->id && a->found++ == 0) {
        a->out->dir = h5fl_strdup(dir);
        a->out->path = h5fl_strdup(path);
        a->out->type = t;
        if (!a->out->dir || !a->out->path)
            return -1;
    }
    return 0;
}

static int scan(const char *root, uint64_t id, h5fl_loc_t *out, int *found)
{
    scan_arg_t a = {.id = id, .out = out};
    int rc = h5fl_tree_walk(root, root, "/", scan_cb, &a);
    *found = a.found;
    return rc;
}

/* Where ids were last found (per process, by container): a hit is trusted only after reading the id
 * back from that directory, so a move or a deletion since makes it a miss and a full scan. */
#define REF_CACHE 256
static struct {
    unsigned long fileno;
    uint64_t id;
    char *dir, *path;
    H5I_type_t type;
} cache[REF_CACHE];

static void cache_put(unsigned long fileno, uint64_t id, const h5fl_loc_t *l)
{
    size_t k = (size_t)((id ^ (id >> 20) ^ (uint64_t)fileno) % REF_CACHE);
    char *d = h5fl_strdup(l->dir), *p = h5fl_strdup(l->path);
    if (!d || !p) {
        free(d);
        free(p);
        return;
    }
    free(cache[k].dir);
    free(cache[k].path);
    cache[k].fileno = fileno;
    cache[k].id = id;
    cache[k].dir = d;
    cache[k].path = p;
    cache[k].type = l->type;
}

static bool cache_get(unsigned long fileno, uint64_t id, h5fl_loc_t *out)
{
    size_t k = (size_t)((id ^ (id >> 20) ^ (uint64_t)fileno) % REF_CACHE);
    uint64_t v;
    if (!cache[k].dir || cache[k].fileno != fileno || cache[k].id != id || read_id(cache[k].dir, &v) != 1 ||
        v != id || h5fl_dir_type(cache[k].dir, false) != cache[k].type) {
        h5fl_err_clear();
        return false;
    }
    out->dir = h5fl_strdup(cache[k].dir);
    out->path = h5fl_strdup(cache[k].path);
    out->type = cache[k].type;
    if (!out->dir || !out->path) {
        h5fl_loc_free(out);
        return false;
    }
    return true;
}

int h5fl_ref_resolve(h5fl_file_t *f, const H5O_token_t *tok, h5fl_loc_t *out)
{
    uint64_t id;
    memcpy(&id, tok->__data, sizeof id);
    memset(out, 0, sizeof *out);
    int found = 0;
    if (id == REF_ROOT) {
        found = 1;
        out->dir = h5fl_strdup(f->o.dir);
        out->path = h5fl_strdup("/");
        out->type = H5I_GROUP;
        if (!out->dir || !out->path) {
            h5fl_loc_free(out);
            h5fl_err("out of memory");
            return -1;
        }
        return 0;
    }
    if (cache_get(f->fileno, id, out))
        return 0;
    if (scan(f->o.dir, id, out, &found) != 0) {
        h5fl_loc_free(out);
        return -1;
    }
    if (found == 0) { /* an object in the store kept by its count (H5Oincr_refcount) after its names went */
        char *sd = h5fl_hard_store_dir(f->o.dir, id);
        uint64_t v;
        if (sd && read_id(sd, &v) == 1 && v == id && (out->path = h5fl_strdup(""))) {
            out->dir = sd;
            out->type = h5fl_dir_type(sd, false);
            return 0;
        }
        free(sd);
        h5fl_err_clear();
    }
    if (found == 0) {
        h5fl_err("the object this reference points to (id %016llx) does not exist in %s any more (it was "
                 "deleted, or the reference was made in another container)",
                 (unsigned long long)id, f->name);
        return -1;
    }
    if (found > 1) {
        h5fl_err("reference id %016llx is held by %d objects of %s (an @id file was copied by hand): "
                 "refusing to guess; remove the @id file from the copies",
                 (unsigned long long)id, found, f->name);
        h5fl_loc_free(out);
        return -1;
    }
    cache_put(f->fileno, id, out);
    return 0;
}

/* Whether every reference inside `type` is one the connector stores: an object reference (H5T_STD_REF_OBJ:
 * the 8-byte token, stored as it is; H5T_STD_REF: blob.c) or a 1.10 region reference (H5T_STD_REF_DSETREG:
 * the blob id and length HDF5 patch 0004 puts there, stored as they are); 1 yes, 0 no, -1 on a library
 * error. */
static int only_obj_refs(hid_t type)
{
    H5T_class_t cls = H5Tget_class(type);
    if (cls == H5T_REFERENCE)
        return H5Tequal(type, H5T_STD_REF_OBJ) > 0 || H5Tequal(type, H5T_STD_REF) > 0 ||
                       H5Tequal(type, H5T_STD_REF_DSETREG) > 0
                   ? 1
                   : 0;
    if (cls == H5T_COMPOUND) {
        int n = H5Tget_nmembers(type);
        if (n < 0)
            return -1;
        for (unsigned i = 0; i < (unsigned)n; i++) {
            hid_t m = H5Tget_member_type(type, i);
            if (m < 0)
                return -1;
            int r = only_obj_refs(m);
            H5Tclose(m);
            if (r != 1)
                return r;
        }
        return 1;
    }
    if (cls == H5T_ARRAY || cls == H5T_VLEN) {
        hid_t b = H5Tget_super(type);
        if (b < 0)
            return -1;
        int r = only_obj_refs(b);
        H5Tclose(b);
        return r;
    }
    return 1;
}

/* The kinds of reference inside `type`: bit 1 H5T_STD_REF_OBJ, bit 2 H5T_STD_REF, bit 8
 * H5T_STD_REF_DSETREG, bit 4 any other. */
static unsigned ref_kinds(hid_t type)
{
    H5T_class_t cls = H5Tget_class(type);
    if (cls == H5T_REFERENCE)
        return H5Tequal(type, H5T_STD_REF_OBJ) > 0       ? 1u
               : H5Tequal(type, H5T_STD_REF) > 0         ? 2u
               : H5Tequal(type, H5T_STD_REF_DSETREG) > 0 ? 8u
                                                         : 4u;
    unsigned k = 0;
    if (cls == H5T_COMPOUND) {
        int n = H5Tget_nmembers(type);
        for (int i = 0; i < n; i++) {
            hid_t m = H5Tget_member_type(type, (unsigned)i);
            if (m >= 0) {
                k |= ref_kinds(m);
                H5Tclose(m);
            }
        }
    } else if (cls == H5T_ARRAY || cls == H5T_VLEN) {
        hid_t b = H5Tget_super(type);
        if (b >= 0) {
            k = ref_kinds(b);
            H5Tclose(b);
        }
    }
    return k;
}

/* Whether `from` and `to` are H5T_STD_REF and one of the 1.10 kinds (H5T_STD_REF_OBJ, H5T_STD_REF_DSETREG),
 * one reference per element (not members): h5fl_convert converts those. */
static bool plain_ref_kinds(hid_t from, hid_t to)
{
    if (H5Tget_class(from) != H5T_REFERENCE || H5Tget_class(to) != H5T_REFERENCE)
        return false;
    unsigned a = ref_kinds(from), b = ref_kinds(to);
    return (a == 2u && (b == 1u || b == 8u)) || (b == 2u && (a == 1u || a == 8u));
}

/* A 1.10 region reference (the blob id and length of HDF5 patch 0004) as an H5R_ref_t and back, through
 * HDF5's public reference calls on the container's root group `g`. */
static int region_to_std(hid_t g, const uint8_t *src, H5R_ref_t *dst)
{
    char name[PATH_MAX];
    hid_t sp = H5Rget_region(g, H5R_DATASET_REGION1, src);
    ssize_t nl = sp >= 0 ? H5Rget_name(g, H5R_DATASET_REGION1, src, name, sizeof name) : -1;
    int rc = nl > 0 && (size_t)nl < sizeof name && H5Rcreate_region(g, name, sp, H5P_DEFAULT, dst) >= 0 ? 0 : -1;
    if (sp >= 0)
        H5Sclose(sp);
    if (rc != 0)
        h5fl_err("cannot read a region reference as an H5R_ref_t (its region or dataset cannot be found)");
    return rc;
}

static int std_to_region(h5fl_blob_ctx_t *ctx, hid_t g, const H5R_ref_t *src, uint8_t *dst)
{
    static const H5R_ref_t zero;
    memset(dst, 0, sizeof(hdset_reg_ref_t));
    if (!memcmp(src, &zero, sizeof zero))
        return 0; /* the null reference */
    if (H5Rget_type(src) != H5R_DATASET_REGION2) {
        h5fl_err("only region references can be stored as H5T_STD_REF_DSETREG");
        return -1;
    }
    if (h5fl_blob_same_container(ctx, src) != 0)
        return -1;
    char name[PATH_MAX];
    hid_t sp = H5Ropen_region((H5R_ref_t *)src, H5P_DEFAULT, H5P_DEFAULT);
    ssize_t nl = sp >= 0 ? H5Rget_obj_name((H5R_ref_t *)src, H5P_DEFAULT, name, sizeof name) : -1;
    int rc = nl > 0 && (size_t)nl < sizeof name && H5Rcreate(dst, g, name, H5R_DATASET_REGION1, sp) >= 0 ? 0 : -1;
    if (sp >= 0)
        H5Sclose(sp);
    if (rc != 0)
        h5fl_err("cannot store a region reference (H5R_ref_t) as H5T_STD_REF_DSETREG");
    return rc;
}

int h5fl_convert(h5fl_file_t *f, hid_t from, hid_t to, size_t n, void *buf, void *bkg, hid_t dxpl)
{
    if (!plain_ref_kinds(from, to))
        return H5Tconvert(from, to, n, buf, bkg, dxpl) < 0 ? -1 : 0;
    /* HDF5's H5T__conv_ref needs the native file behind the references: convert here. An object
     * reference's kinds both hold the object's token (its id, see above), an H5R_ref_t also its file; a
     * region reference goes through HDF5's reference calls. */
    bool to_std = ref_kinds(to) == 2u, region = ref_kinds(to_std ? from : to) == 8u;
    size_t old = region ? sizeof(hdset_reg_ref_t) : 8;
    size_t in = to_std ? old : sizeof(H5R_ref_t), out = to_std ? sizeof(H5R_ref_t) : old;
    uint8_t *src = malloc(n * in + 1);
    if (!src) {
        h5fl_err("out of memory");
        return -1;
    }
    memcpy(src, buf, n * in);
    h5fl_blob_ctx_t bx = {.f = f};
    hid_t g = H5I_INVALID_HID;
    if (region) {
        h5fl_loc_t root = {.dir = f->o.dir, .path = "/", .type = H5I_GROUP};
        g = h5fl_register_for_callback(f, &root);
    }
    int rc = region && g < 0 ? -1 : 0;
    size_t i = 0;
    static const uint8_t null_region[sizeof(hdset_reg_ref_t)];
    for (; i < n && rc == 0; i++) {
        uint8_t *d = (uint8_t *)buf + i * out, *s = src + i * in;
        if (to_std && region) {
            if (memcmp(s, null_region, sizeof null_region) == 0)
                memset(d, 0, sizeof(H5R_ref_t));
            else
                rc = region_to_std(g, s, (H5R_ref_t *)d);
        } else if (to_std)
            rc = h5fl_blob_ref_make(&bx, s, (H5R_ref_t *)d);
        else if (region)
            rc = std_to_region(&bx, g, (const H5R_ref_t *)s, d);
        else
            rc = h5fl_blob_ref_take(&bx, (const H5R_ref_t *)s, d) < 0 ? -1 : 0;
    }
    if (rc != 0 && to_std) /* release the references made before the failing one */
        for (size_t j = 0; j + 1 < i; j++)
            H5Rdestroy((H5R_ref_t *)((uint8_t *)buf + j * out));
    if (g >= 0)
        H5Idec_ref(g);
    h5fl_blob_ctx_end(&bx);
    free(src);
    return rc;
}

int h5fl_check_ref_conversion(hid_t from, hid_t to, const char *what, const char *name)
{
    if (H5Tdetect_class(from, H5T_REFERENCE) <= 0 && H5Tdetect_class(to, H5T_REFERENCE) <= 0)
        return 0;
    unsigned a = ref_kinds(from), b = ref_kinds(to);
    if (a == b && (a & ~9u) == 0)
        return 0; /* 1.10 references on both sides (or none): HDF5 copies them as they are */
    if (a == 2u && b == 2u)
        return 0; /* H5R_ref_t on both sides: handled by the variable-length encoding */
    if (plain_ref_kinds(from, to))
        return 0; /* one reference per element, H5T_STD_REF_OBJ <-> H5T_STD_REF: h5fl_convert */
    /* HDF5's reference conversion (H5T__conv_ref) needs the native file behind the references and crashes
     * without one: refuse instead */
    h5fl_err("%s '%s': cannot convert its references between H5T_STD_REF_OBJ (hobj_ref_t) and H5T_STD_REF "
             "(H5R_ref_t); h5flow_log reads and writes references with the stored type only (use the "
             "dataset's or attribute's own datatype as the memory type)",
             what, name);
    return -1;
}

int h5fl_check_ref_types(hid_t type, const char *what, const char *name)
{
    if (H5Tdetect_class(type, H5T_REFERENCE) <= 0)
        return 0;
    int r = only_obj_refs(type);
    if (r == 1)
        return 0;
    h5fl_err("%s '%s': h5flow_log stores object references (H5T_STD_REF_OBJ, hobj_ref_t, h5py.ref_dtype; "
             "H5T_STD_REF holding object references) and 1.10 region references (H5T_STD_REF_DSETREG, "
             "h5py.regionref_dtype) only; this type holds another kind (docs/FORMAT.md, \"Object "
             "references\")",
             what, name);
    return -1;
}

/* ---------------------------------------------------------------- the VOL blob class
 *
 * HDF5 keeps what a reference cannot hold itself (a 1.10 region reference's selection: HDF5 patch 0004)
 * in the connector's blobs. A blob is the file @blobs/<id as 16 hex digits> at the container's root: its
 * bytes, then their CRC32C (u32 little endian). Its id (8 bytes, little endian) is minted as reference
 * ids are, so no two blobs of a container, copies included, ever get one id; the all-zero id is the null
 * blob. A blob is written once and never changed. */
#define BLOB_DIR H5FL_BLOB_DIR

static char *blob_path(h5fl_file_t *f, uint64_t id)
{
    char name[sizeof BLOB_DIR + 20];
    snprintf(name, sizeof name, BLOB_DIR "/%016llx", (unsigned long long)id);
    char *p = h5fl_join(f->o.dir, name);
    if (!p)
        h5fl_err("out of memory");
    return p;
}

herr_t h5fl_blob_put(void *obj, const void *buf, size_t size, void *blob_id, void *ctx)
{
    (void)ctx;
    h5fl_err_clear();
    h5fl_file_t *f = ((h5fl_obj_t *)obj)->file;
    uint64_t id;
    char *dir = NULL, name[20];
    uint8_t *b = NULL;
    if (!h5fl_writable(f) || mint(f, &id) != 0)
        goto fail;
    if (!(dir = h5fl_join(f->o.dir, BLOB_DIR)) || !(b = malloc(size + 4))) {
        h5fl_err("out of memory");
        goto fail;
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        h5fl_err("cannot create %s: %s", dir, strerror(errno));
        goto fail;
    }
    if (size)
        memcpy(b, buf, size);
    h5fl_put_u32(b + size, h5fl_crc32c(0, b, size));
    snprintf(name, sizeof name, "%016llx", (unsigned long long)id);
    if (h5fl_write_file_atomic(dir, name, b, size + 4, f->fsync) != 0)
        goto fail;
    h5fl_put_u64(blob_id, id);
    free(dir);
    free(b);
    return 0;
fail:
    free(dir);
    free(b);
    h5fl_err_push(__func__);
    return -1;
}

herr_t h5fl_blob_get(void *obj, const void *blob_id, void *buf, size_t size, void *ctx)
{
    (void)ctx;
    h5fl_err_clear();
    h5fl_file_t *f = ((h5fl_obj_t *)obj)->file;
    uint64_t id = h5fl_get_u64(blob_id);
    void *data = NULL;
    size_t len = 0;
    char *p = NULL;
    if (id == 0) {
        h5fl_err("the null blob (a null reference) has no contents");
        goto fail;
    }
    if (!(p = blob_path(f, id)))
        goto fail;
    if (h5fl_read_file(p, &data, &len) != 0) {
        h5fl_err("blob %016llx of %s cannot be read (made in another container, or removed)",
                 (unsigned long long)id, f->name);
        goto fail;
    }
    if (len != size + 4) {
        h5fl_err("blob %s is damaged or not the one asked for: %zu bytes, %zu expected", p, len, size + 4);
        goto fail;
    }
    if (h5fl_crc32c(0, data, size) != h5fl_get_u32((uint8_t *)data + size)) {
        h5fl_err("blob %s is damaged: its checksum does not match its contents", p);
        goto fail;
    }
    memcpy(buf, data, size);
    free(data);
    free(p);
    return 0;
fail:
    free(data);
    free(p);
    h5fl_err_push(__func__);
    return -1;
}

herr_t h5fl_blob_specific(void *obj, void *blob_id, H5VL_blob_specific_args_t *args)
{
    h5fl_err_clear();
    h5fl_file_t *f = ((h5fl_obj_t *)obj)->file;
    switch (args->op_type) {
        case H5VL_BLOB_ISNULL:
            *args->args.is_null.isnull = h5fl_get_u64(blob_id) == 0;
            return 0;
        case H5VL_BLOB_SETNULL:
            memset(blob_id, 0, 8);
            return 0;
        case H5VL_BLOB_DELETE: { /* each blob has one owner (ids are never shared): remove it */
            uint64_t id = h5fl_get_u64(blob_id);
            char *p = id ? blob_path(f, id) : NULL;
            int rc = 0;
            if (id && (!p || !h5fl_writable(f) || (unlink(p) != 0 && errno != ENOENT))) {
                if (p)
                    h5fl_err("cannot remove blob %s: %s", p, strerror(errno));
                rc = -1;
            }
            free(p);
            if (rc == 0)
                return 0;
            break;
        }
        default:
            h5fl_err("blob operation %d is not supported by h5flow_log", (int)args->op_type);
            break;
    }
    h5fl_err_push(__func__);
    return -1;
}
