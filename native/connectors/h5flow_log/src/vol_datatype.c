/* Committed (named) datatypes: H5Tcommit2 / H5Topen2, h5py f["t"] = np.dtype(...).
 *
 * A committed datatype is a directory holding @datatype (docs/FORMAT.md "Committed datatypes"):
 * magic "H5FLDT01", u32 version 1, u32 length n, the H5Tencode form of the type (n bytes), CRC32C of all
 * before it. Datasets and attributes created with a committed type record the type itself (as native
 * HDF5 does in effect: their type is a copy); they keep no link to the committed one. */
#include "h5fl.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char DT_MAGIC[8] = {'H', '5', 'F', 'L', 'D', 'T', '0', '1'};

/* The type is held in its H5Tencode form, not as a datatype id: HDF5 closes a committed type left open by
 * the application at H5close while it tears down every datatype id, in an order of its own; a datatype id
 * held here could already be freed by then, and closing it from this close would free it twice. */
typedef struct h5fl_dtype {
    h5fl_obj_t o; /* first: the generic callbacks see an h5fl_obj_t */
    uint8_t *enc; /* H5Tencode of the type */
    size_t nenc;
} h5fl_dtype_t;

static int store(const char *dir, hid_t type, bool sync)
{
    size_t lt = 0;
    if (H5Tencode(type, NULL, &lt) < 0 || lt > UINT32_MAX) {
        h5fl_err("cannot encode the datatype");
        return -1;
    }
    size_t n = 16 + lt + 4;
    uint8_t *b = calloc(1, n);
    if (!b) {
        h5fl_err("out of memory");
        return -1;
    }
    memcpy(b, DT_MAGIC, 8);
    h5fl_put_u32(b + 8, 1);
    h5fl_put_u32(b + 12, (uint32_t)lt);
    int rc = -1;
    if (H5Tencode(type, b + 16, &lt) >= 0) {
        h5fl_put_u32(b + n - 4, h5fl_crc32c(0, b, n - 4));
        rc = h5fl_write_file_atomic(dir, H5FL_DTYPE_FILE, b, n, sync);
    } else {
        h5fl_err("cannot encode the datatype");
    }
    free(b);
    return rc;
}

static hid_t load(const char *dir)
{
    char *p = h5fl_join(dir, H5FL_DTYPE_FILE);
    void *vb = NULL;
    size_t n = 0;
    hid_t t = H5I_INVALID_HID;
    if (!p || h5fl_read_file(p, &vb, &n) != 0)
        goto done;
    const uint8_t *b = vb;
    if (n < 20 || memcmp(b, DT_MAGIC, 8) != 0 || h5fl_crc32c(0, b, n - 4) != h5fl_get_u32(b + n - 4) ||
        h5fl_get_u32(b + 8) != 1 || (size_t)h5fl_get_u32(b + 12) + 20 != n) {
        h5fl_err("committed datatype %s is corrupt (bad magic, version, length or checksum)", p);
        goto done;
    }
    t = H5Tdecode(b + 16);
    if (t < 0)
        h5fl_err("committed datatype %s cannot be decoded", p);
    else if (h5fl_blob_type(t)) { /* see h5fl_blob_memtype */
        hid_t mt = h5fl_blob_memtype(t);
        H5Tclose(t);
        t = mt;
    }
done:
    free(vb);
    free(p);
    return t;
}

static h5fl_dtype_t *dtype_new(h5fl_file_t *f, const char *path, const char *dir, hid_t type)
{
    h5fl_dtype_t *t = calloc(1, sizeof *t);
    if (!t) {
        h5fl_err("out of memory");
        return NULL;
    }
    h5fl_obj_init(&t->o, H5I_DATATYPE, f, path, dir);
    bool ok = t->o.path && t->o.dir && type >= 0;
    if (!ok)
        h5fl_err("out of memory");
    else if (H5Tencode(type, NULL, &t->nenc) < 0 || !(t->enc = malloc(t->nenc ? t->nenc : 1)) ||
             H5Tencode(type, t->enc, &t->nenc) < 0) {
        h5fl_err("cannot encode the committed datatype '%s'", path);
        ok = false;
    }
    if (type >= 0)
        H5Tclose(type);
    if (!ok) {
        free(t->enc);
        h5fl_obj_release(&t->o);
        free(t);
        return NULL;
    }
    return t;
}

void *h5fl_datatype_open_dir(h5fl_file_t *f, const char *dir, const char *path)
{
    hid_t t = load(dir);
    return t < 0 ? NULL : dtype_new(f, path, dir, t);
}

void *h5fl_datatype_commit(void *obj, const H5VL_loc_params_t *lp, const char *name, hid_t type_id, hid_t lcpl,
                           hid_t tcpl, hid_t tapl, hid_t dxpl, void **req)
{
    (void)lp;
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    h5fl_file_t *f = o->file;
    h5fl_loc_t parent = {0};
    char leaf[NAME_MAX + 1], *leafname = NULL, *dir = NULL, *path = NULL;
    h5fl_dtype_t *t = NULL;
    h5fl_collective_begin(f);
    if (!h5fl_writable(f) || h5fl_check_plist(tcpl, H5P_DATATYPE_CREATE, "datatype creation property list") ||
        h5fl_check_plist(tapl, H5P_DATATYPE_ACCESS, "datatype access property list") ||
        h5fl_check_plist(lcpl, H5P_LINK_CREATE, "link creation property list"))
        goto fail;
    if (h5fl_check_ref_types(type_id, "committed datatype", name ? name : "(anonymous)") != 0)
        goto fail;
    if (!name) { /* H5Tcommit_anon: lives under @anon.* until H5Olink names it (or goes away at close) */
        char *adir = h5fl_anon_dir(f);
        int sta = adir ? 0 : -1;
        if (sta == 0 && f->rank == 0) {
            if (mkdir(adir, 0755) != 0) {
                h5fl_err("cannot commit an anonymous datatype: cannot create %s: %s", adir, strerror(errno));
                sta = -1;
            } else {
                unsigned crt_links, crt_attrs;
                h5fl_crt_flags(tcpl, &crt_links, &crt_attrs);
                sta = store(adir, type_id, f->fsync);
                if (sta == 0)
                    sta = h5fl_corder_enable(adir, 0, crt_attrs, f->fsync);
            }
        }
        sta = h5fl_collective(f, sta);
        if (sta == 0 && (t = dtype_new(f, "", adir, H5Tcopy(type_id))))
            t->o.anon = true;
        free(adir);
        if (t)
            return t;
        goto fail;
    }
    unsigned crt = 0;
    if (lcpl != H5P_DEFAULT && lcpl >= 0)
        H5Pget_create_intermediate_group(lcpl, &crt);
    int mode = f->rank == 0 ? (crt ? H5FL_MKPARENTS : H5FL_CHECK) : H5FL_COMPUTE;
    int st = h5fl_resolve_parent(o, name, mode, &parent, leaf, sizeof leaf, &leafname);
    if (st == 0) {
        dir = h5fl_join(parent.dir, leaf);
        path = h5fl_path_join(parent.path, leafname);
        if (!dir || !path) {
            h5fl_err("out of memory");
            st = -1;
        }
    }
    if (st == 0 && f->rank == 0) { /* built privately, renamed to its name complete (util.c) */
        char *tmp = h5fl_create_tmp(f);
        unsigned crt_links, crt_attrs; /* attribute creation order asked for in the tcpl (links.c) */
        h5fl_crt_flags(tcpl, &crt_links, &crt_attrs);
        if (!tmp || store(tmp, type_id, f->fsync) != 0 || h5fl_corder_enable(tmp, 0, crt_attrs, f->fsync) != 0 ||
            h5fl_corder_assign(parent.dir, tmp, f->fsync) != 0) {
            h5fl_create_abandon(tmp);
            st = -1;
        } else {
            st = h5fl_create_publish_new(tmp, dir, "committed datatype", path);
        }
        free(tmp);
    }
    st = h5fl_collective(f, st);
    if (st == 0)
        t = dtype_new(f, path, dir, H5Tcopy(type_id));
    free(leafname);
    free(dir);
    free(path);
    h5fl_loc_free(&parent);
    if (t)
        return t;
fail:
    h5fl_err_push(__func__);
    return NULL;
}

void *h5fl_datatype_open(void *obj, const H5VL_loc_params_t *lp, const char *name, hid_t tapl, hid_t dxpl,
                         void **req)
{
    (void)lp;
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    h5fl_loc_t loc = {0};
    void *r = NULL;
    if (h5fl_check_plist(tapl, H5P_DATATYPE_ACCESS, "datatype access property list") == 0 &&
        h5fl_resolve(o, name, &loc) == 0) {
        if (loc.type != H5I_DATATYPE)
            h5fl_err(loc.type == H5I_BADID ? "committed datatype '%s' does not exist"
                                           : "'%s' is not a committed datatype",
                     loc.path ? loc.path : name);
        else
            r = h5fl_datatype_open_dir(o->file, loc.dir, loc.path);
    }
    h5fl_loc_free(&loc);
    if (!r)
        h5fl_err_push(__func__);
    return r;
}

herr_t h5fl_datatype_get(void *obj, H5VL_datatype_get_args_t *args, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_dtype_t *t = obj;
    switch (args->op_type) {
        case H5VL_DATATYPE_GET_BINARY_SIZE:
            *args->args.get_binary_size.size = t->nenc;
            return 0;
        case H5VL_DATATYPE_GET_BINARY:
            /* as H5Tencode: a buffer too small (or none) is left alone */
            if (args->args.get_binary.buf && args->args.get_binary.buf_size >= t->nenc)
                memcpy(args->args.get_binary.buf, t->enc, t->nenc);
            return 0;
        case H5VL_DATATYPE_GET_TCPL:
            if ((args->args.get_tcpl.tcpl_id = H5Pcreate(H5P_DATATYPE_CREATE)) < 0)
                break;
            return 0;
        default:
            h5fl_err("datatype get operation %d is not supported by h5flow_log", (int)args->op_type);
    }
    h5fl_err("cannot describe committed datatype '%s'", t->o.path);
    h5fl_err_push(__func__);
    return -1;
}

herr_t h5fl_datatype_specific(void *obj, H5VL_datatype_specific_args_t *args, hid_t dxpl, void **req)
{
    (void)obj;
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    switch (args->op_type) {
        case H5VL_DATATYPE_FLUSH:
        case H5VL_DATATYPE_REFRESH:
            return 0; /* written at commit; immutable */
        default:
            break;
    }
    h5fl_err("datatype operation %d is not supported by h5flow_log", (int)args->op_type);
    h5fl_err_push(__func__);
    return -1;
}

herr_t h5fl_datatype_close(void *obj, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_dtype_t *t = obj;
    if (--t->o.rc > 0)
        return 0;
    if (t->o.anon && t->o.file->rank == 0) /* never linked: like HDF5, the type goes away */
        h5fl_rm_rf(t->o.dir);
    free(t->enc);
    h5fl_obj_release(&t->o);
    free(t);
    return 0;
}

/* A dataset created with a committed datatype of the same container remembers it (file @dtype in its
 * directory: the datatype's reference id, u64 + CRC32C), so that H5Dget_type hands out the committed
 * type, as native HDF5 does (h5py: dset.id.get_type().committed()). Other types: nothing. */
int h5fl_datatype_use_id(h5fl_file_t *f, hid_t type, uint64_t *id)
{
    if (H5Tcommitted(type) <= 0)
        return 0;
    hid_t ours = H5VLget_connector_id_by_name(H5FL_NAME), theirs = H5VLget_connector_id(type);
    int cmp = 1;
    bool same = ours >= 0 && theirs >= 0 && H5VLcmp_connector_cls(&cmp, ours, theirs) >= 0 && cmp == 0;
    if (ours >= 0)
        H5VLclose(ours);
    if (theirs >= 0)
        H5VLclose(theirs);
    if (!same)
        return 0; /* a committed type of another connector's file: the dataset keeps a copy only */
    if (h5fl_nat_id(type))
        return 0; /* a native file's committed type: a copy only */
    h5fl_dtype_t *t = H5VLobject(type);
    if (!t || t->o.type != H5I_DATATYPE || !t->o.file || t->o.file->fileno != f->fileno)
        return 0; /* another container's: a copy only (like native HDF5 across files) */
    H5O_token_t tok;
    if (h5fl_ref_token(f, t->o.dir, t->o.path, &tok) != 0)
        return -1;
    memcpy(id, tok.__data, sizeof *id);
    return 1;
}

typedef struct uses_arg {
    uint64_t id;
    unsigned n;
} uses_arg_t;

static int uses_cb(const char *dir, const char *path, H5I_type_t t, void *arg)
{
    (void)path;
    uses_arg_t *u = arg;
    u->n += h5fl_attr_dtype_uses(dir, u->id);
    if (t != H5I_DATASET)
        return 0;
    char *p = h5fl_join(dir, H5FL_DTYPE_USE_FILE);
    void *vb = NULL;
    size_t n = 0;
    if (p && access(p, F_OK) == 0 && h5fl_read_file(p, &vb, &n) == 0 && n == 12 &&
        h5fl_crc32c(0, vb, 8) == h5fl_get_u32((uint8_t *)vb + 8) && h5fl_get_u64(vb) == u->id)
        u->n++;
    free(vb);
    free(p);
    return 0;
}

/* Counted over the container (each object once), not kept: a count kept beside the type would have to
 * follow every deletion of a dataset, attribute or group holding them. A type without an id was never
 * used (a use records the id). */
unsigned h5fl_datatype_uses(h5fl_file_t *f, const char *dir)
{
    uses_arg_t u = {0, 0};
    if (h5fl_ref_read_id(dir, &u.id) != 1) {
        h5fl_err_clear();
        return 0;
    }
    u.n = h5fl_attr_dtype_uses(f->o.dir, u.id); /* the root's own attributes: the walk starts below it */
    if (h5fl_tree_walk(f->o.dir, f->o.dir, "/", uses_cb, &u) != 0)
        h5fl_err_clear();
    return u.n;
}

int h5fl_datatype_note_use(h5fl_file_t *f, hid_t type, const char *objdir)
{
    uint64_t id;
    int r = h5fl_datatype_use_id(f, type, &id);
    if (r <= 0)
        return r;
    uint8_t b[12];
    h5fl_put_u64(b, id);
    h5fl_put_u32(b + 8, h5fl_crc32c(0, b, 8));
    return h5fl_write_file_atomic(objdir, H5FL_DTYPE_USE_FILE, b, sizeof b, f->fsync);
}

hid_t h5fl_datatype_reopen(h5fl_file_t *f, const char *objdir, hid_t stored)
{
    char *p = h5fl_join(objdir, H5FL_DTYPE_USE_FILE);
    void *vb = NULL;
    size_t n = 0;
    if (!p || access(p, F_OK) != 0 || h5fl_read_file(p, &vb, &n) != 0 || n != 12 ||
        h5fl_crc32c(0, vb, 8) != h5fl_get_u32((uint8_t *)vb + 8)) {
        free(p);
        free(vb);
        return H5I_INVALID_HID; /* none (or unreadable): the caller hands out a copy of the type */
    }
    hid_t r = h5fl_datatype_reopen_id(f, h5fl_get_u64(vb), stored);
    free(p);
    free(vb);
    return r;
}

hid_t h5fl_datatype_reopen_id(h5fl_file_t *f, uint64_t id, hid_t stored)
{
    hid_t r = H5I_INVALID_HID;
    H5O_token_t tok;
    memset(&tok, 0, sizeof tok);
    memcpy(tok.__data, &id, sizeof id);
    h5fl_loc_t loc = {0};
    if (h5fl_ref_resolve(f, &tok, &loc) == 0 && loc.type == H5I_DATATYPE) {
        h5fl_loc_t root = {.dir = f->o.dir, .path = "/", .type = H5I_GROUP};
        hid_t g = h5fl_register_for_callback(f, &root);
        if (g >= 0) {
            H5E_BEGIN_TRY { r = H5Topen2(g, loc.path, H5P_DEFAULT); }
            H5E_END_TRY
            H5Idec_ref(g);
            /* The id names a committed type of this container; the object's own stored type decides.
             * An id recorded in another container (an object copied here) may name a stranger: handing
             * that out would have the caller convert the data to a type it was not written in. */
            if (r >= 0 && H5Tequal(r, stored) <= 0) {
                H5Tclose(r);
                r = H5I_INVALID_HID;
            }
        }
    }
    h5fl_err_clear(); /* a committed type deleted since: the copy does */
    h5fl_loc_free(&loc);
    return r;
}
