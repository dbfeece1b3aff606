/* The native fallback: ordinary HDF5 files, and file drivers a container cannot live in, through this
 * connector (docs/FORMAT.md "Native HDF5 files through h5flow_log").
 *
 * A job that sets HDF5_VOL_CONNECTOR=h5flow_log still reads its native input files and still uses drivers
 * such as h5py's file-object driver or a file image. Such a file is opened (or created) by HDF5's native
 * connector underneath, and every object of it is a wrapper of the pass-through core (passthru/h5fpt.h):
 * an h5fpt_obj_t, whose first 4 bytes are H5FPT_OBJ_MAGIC. The class HDF5 registers is a dispatch over the
 * container class h5fl_class: every callback asks which kind of object it was given and calls the core's
 * forwarding implementation (h5fpt_*) for a wrapper, h5fl_class's callback for a container object.
 * Operations that take objects of two files (hard links, link copy and move, object copy, mount) refuse
 * to mix a container with a native file, naming what to use instead; multi-dataset I/O splits by kind; a
 * container's committed type given to a native create becomes a transient copy. External links lead
 * from a container into a native file (a detour, below) and from a native file into a container.
 *
 * Which files go native:
 *   - open: a path that is a regular file with HDF5's signature (a container is a directory);
 *   - create, open, is_accessible, delete: a file access list whose driver cannot hold a container
 *     (anything but sec2, stdio, mpio and core; core with a file image).
 */
#include "h5fl.h"

#include <h5fpt.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAT(o) h5fpt_is_obj(o)
#define MIXED_HINT                                                                                         \
    "objects cannot be shared between an h5flow_log container and a native HDF5 file: convert one with "  \
    "`h5flow unpack` (native to container) or `h5flow pack` (container to native), or use HDF5's tools "  \
    "with --vol flags (h5copy, h5repack)"

static const H5VL_class_t *base; /* h5fl_class: the container callbacks */
static H5VL_class_t dispatch;    /* what HDF5 registers: written once, by h5fl_nat_class */
static pthread_once_t once = PTHREAD_ONCE_INIT;

bool h5fl_nat_is(const void *obj) { return NAT(obj); }

bool h5fl_nat_id(hid_t id)
{
    hbool_t native = false;
    herr_t rc;
    H5E_BEGIN_TRY { rc = H5VLobject_is_native(id, &native); }
    H5E_END_TRY
    return rc >= 0 && native;
}

h5fl_dset_t *h5fl_container_dset(hid_t dset)
{
    char name[64] = "";
    if (H5Iget_type(dset) != H5I_DATASET || H5VLget_connector_name(dset, name, sizeof name) < 0 ||
        strcmp(name, H5FL_NAME) != 0) {
        h5fl_err("not a dataset of an h5flow_log container (connector '%s')", name);
        return NULL;
    }
    h5fl_dset_t *d = H5VLobject(dset);
    if (!d)
        h5fl_err("cannot reach the dataset's connector object");
    else if (h5fl_nat_id(dset)) { /* H5VLobject gave native's own object */
        char path[512] = "";
        H5Iget_name(dset, path, sizeof path);
        h5fl_err("dataset '%s' is in a native HDF5 file, not in an h5flow_log container (make a container "
                 "of the file with `h5flow unpack`)", path);
        d = NULL;
    }
    return d;
}

/* ---------------------------------------------------------------- which files are native */

bool h5fl_nat_driver(hid_t fapl)
{
    if (fapl < 0 || fapl == H5P_DEFAULT)
        return false;
    hid_t drv;
    H5E_BEGIN_TRY { drv = H5Pget_driver(fapl); }
    H5E_END_TRY
    if (drv < 0 || drv == H5FD_SEC2 || drv == H5FD_STDIO || drv == H5FD_MPIO)
        return false;
    if (drv != H5FD_CORE)
        return true; /* fileobj, family, multi/split, log, direct, ... : a native file of that driver */
    size_t len = 0; /* the size only: no copy of the image, no call of its callbacks */
    herr_t rc;
    H5E_BEGIN_TRY { rc = H5Pget_file_image(fapl, NULL, &len); }
    H5E_END_TRY
    return rc >= 0 && len > 0; /* an image to open: a native file in memory */
}

bool h5fl_nat_file(const char *name)
{
    static const unsigned char sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    struct stat st;
    if (!name || stat(name, &st) != 0 || !S_ISREG(st.st_mode))
        return false;
    int fd = open(name, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool found = false;
    /* HDF5's signature is at 0 or, after a userblock, at 512, 1024, 2048, ... */
    for (off_t off = 0; !found && off + 8 <= st.st_size; off = off ? off * 2 : 512) {
        unsigned char buf[8];
        found = pread(fd, buf, sizeof buf, off) == (ssize_t)sizeof buf && !memcmp(buf, sig, sizeof sig);
    }
    close(fd);
    return found;
}

/* ---------------------------------------------------------------- errors */

static void refuse(const char *func, const char *what)
{
    h5fl_err("%s: " MIXED_HINT, what);
    h5fl_err_push(func);
}

/* A callback the container class leaves out (HDF5's words for it: "VOL connector has no 'dataset
 * optional' method"), asked of a container object. */
static void unsupported(const char *func, const char *slot)
{
    char words[64];
    snprintf(words, sizeof words, "%s", slot);
    for (char *c = words; *c; c++)
        *c = *c == '_' ? ' ' : *c;
    h5fl_err("h5flow_log has no '%s' method for a container (an operation of native HDF5 files only)", words);
    h5fl_err_push(func);
}

/* Both kinds NULL-safe: a NULL second object is taken to be of the first's kind. */
static int kinds(const void *a, const void *b, const char *func, const char *what)
{
    bool na = NAT(a), nb = b ? NAT(b) : na;
    if (a && b && na != nb) {
        refuse(func, what);
        return -1;
    }
    return na || nb ? 1 : 0;
}

/* ---------------------------------------------------------------- external links into native files
 * Path resolution in a container that meets an external link into a native HDF5 file records a detour and
 * fails; the open (or by-name query) that asked is then run by the native connector on that file, at the
 * object's path there. The record is the calling thread's and lives for one callback. */

typedef struct detour {
    bool set;
    unsigned intent;
    char file[4096];
    char path[4096];
} detour_t;
static _Thread_local detour_t detour;

void h5fl_nat_detour_set(const char *file, const char *path, unsigned intent)
{
    detour.set = strlen(file) < sizeof detour.file && strlen(path) < sizeof detour.path;
    detour.intent = intent;
    snprintf(detour.file, sizeof detour.file, "%s", file);
    snprintf(detour.path, sizeof detour.path, "%s", path);
}

void h5fl_nat_detour_append(const char *component)
{
    size_t len = strlen(detour.path);
    if (!detour.set)
        return;
    if (len + 1 + strlen(component) >= sizeof detour.path) {
        detour.set = false;
        return;
    }
    snprintf(detour.path + len, sizeof detour.path - len, "%s%s", len && detour.path[len - 1] == '/' ? "" : "/",
             component);
}

/* The native file of the pending detour (NULL: no detour, or it failed): opened with H5Fopen (a VOL
 * callback cannot open a native file itself: H5Fopen sets up what the native connector needs), its
 * object wrapped as the core's. An object opened in it keeps the file open after detour_done closes this
 * handle (native's weak close). */
static void *detour_file(hid_t *fid)
{
    *fid = H5I_INVALID_HID;
    if (!detour.set)
        return NULL;
    detour.set = false;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0)
        return NULL;
    if (H5Pset_vol(fapl, H5VL_NATIVE, NULL) >= 0)
        *fid = H5Fopen(detour.file, detour.intent, fapl);
    H5Pclose(fapl);
    void *under = *fid >= 0 ? H5VLobject(*fid) : NULL;
    h5fpt_obj_t *nf = under ? h5fpt_obj_new(under, H5VL_NATIVE, H5I_FILE, NULL, NULL) : NULL;
    if (!nf && *fid >= 0) {
        H5Fclose(*fid);
        *fid = H5I_INVALID_HID;
    }
    return nf;
}

static void detour_done(void *nf, hid_t fid)
{
    h5fpt_obj_release(nf);
    H5Fclose(fid);
}

/* Run after a container callback failed with a detour pending: CALL, with `nf` the native file and
 * `nloc` the object's location in it (by name), replaces the failure; the container's error goes. */
#define DETOUR(RESULT, FAILED, CALL)                                                                       \
    do {                                                                                                   \
        hid_t fid;                                                                                         \
        void *nf = (FAILED) ? detour_file(&fid) : NULL;                                                    \
        if (nf) {                                                                                          \
            H5VL_loc_params_t nloc = {.obj_type = H5I_FILE, .type = H5VL_OBJECT_BY_NAME};                  \
            nloc.loc_data.loc_by_name.name = detour.path;                                                  \
            nloc.loc_data.loc_by_name.lapl_id = H5P_LINK_ACCESS_DEFAULT;                                   \
            H5VL_loc_params_t self = {.obj_type = H5I_FILE, .type = H5VL_OBJECT_BY_SELF};                  \
            (void)self;                                                                                    \
            (void)nloc;                                                                                    \
            RESULT = (CALL);                                                                               \
            if (!(FAILED))                                                                                 \
                H5Eclear2(H5E_DEFAULT);                                                                    \
            detour_done(nf, fid);                                                                          \
        }                                                                                                  \
    } while (0)

/* The other way: an open by name in a native file whose path crosses an external link into a container.
 * HDF5's own link traversal opens only native files, so after the native open failed, the path's prefixes
 * are asked (native link info) for the first external link; if it names a container, the object is opened
 * there, at the link's object path followed by the rest of the path. NULL: not that case (the native
 * error stands). */
static bool is_container_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && h5fl_exists(path, H5FL_MARKER);
}

/* The container an external link value names, relative names beside the native file first. */
static bool elink_container(h5fpt_obj_t *o, const char *file, char *out, size_t outsz, hid_t dxpl)
{
    if (file[0] == '/')
        return snprintf(out, outsz, "%s", file) < (int)outsz && is_container_dir(out);
    char here[4096] = "";
    size_t len = 0;
    H5VL_file_get_args_t ga = {.op_type = H5VL_FILE_GET_NAME};
    ga.args.get_name = (H5VL_file_get_name_args_t){o->type, sizeof here, here, &len};
    if (H5VLfile_get(o->under_object, o->under_vol_id, &ga, dxpl, NULL) >= 0 && len < sizeof here) {
        char *slash = strrchr(here, '/');
        if (slash) {
            *slash = '\0';
            if (snprintf(out, outsz, "%s/%s", here, file) < (int)outsz && is_container_dir(out))
                return true;
        }
    }
    return snprintf(out, outsz, "%s", file) < (int)outsz && is_container_dir(out);
}

/* The container an external link on `path` leads into, opened read-only (close it with the container
 * class's file close), and in `inner` the path in it; NULL: the path crosses no such link. */
static void *native_elink_container(h5fpt_obj_t *o, const char *path, hid_t dxpl, char *inner, size_t innersz)
{
    char prefix[4096];
    if (!path || strlen(path) >= sizeof prefix)
        return NULL;
    size_t total = strlen(path), start = path[0] == '/' ? 1 : 0;
    for (size_t n = start + 1; n <= total; n++) { /* each prefix that ends a component */
        if (n < total && path[n] != '/')
            continue;
        memcpy(prefix, path, n);
        prefix[n] = '\0';
        H5VL_loc_params_t at = {.obj_type = o->type, .type = H5VL_OBJECT_BY_NAME};
        at.loc_data.loc_by_name.name = prefix;
        at.loc_data.loc_by_name.lapl_id = H5P_LINK_ACCESS_DEFAULT;
        H5L_info2_t li;
        H5VL_link_get_args_t la = {.op_type = H5VL_LINK_GET_INFO};
        la.args.get_info.linfo = &li;
        herr_t rc;
        H5E_BEGIN_TRY { rc = H5VLlink_get(o->under_object, &at, o->under_vol_id, &la, dxpl, NULL); }
        H5E_END_TRY
        if (rc < 0)
            return NULL;
        if (li.type == H5L_TYPE_EXTERNAL) {
            char val[4096], target[4096];
            unsigned flags = 0;
            const char *file = NULL, *obj = NULL;
            H5VL_link_get_args_t va = {.op_type = H5VL_LINK_GET_VAL};
            va.args.get_val.buf_size = sizeof val;
            va.args.get_val.buf = val;
            if (li.u.val_size > sizeof val ||
                H5VLlink_get(o->under_object, &at, o->under_vol_id, &va, dxpl, NULL) < 0 ||
                H5Lunpack_elink_val(val, li.u.val_size, &flags, &file, &obj) < 0 ||
                !elink_container(o, file, target, sizeof target, dxpl) ||
                snprintf(inner, innersz, "%s%s", obj, path + n) >= (int)innersz)
                return NULL;
            return base->file_cls.open(target, H5F_ACC_RDONLY, H5P_FILE_ACCESS_DEFAULT, dxpl, NULL);
        }
    }
    return NULL;
}

/* Run CALL (on the container `cf`, at `in`) when a native file's by-name call through an external link
 * into a container failed (FAILED); its result replaces RESULT when it succeeds. */
#define INTO_CONTAINER(RESULT, FAILED, OK, CALL)                                                           \
    do {                                                                                                   \
        char inner[8192];                                                                                  \
        void *cf = (FAILED) ? native_elink_container(obj, loc->loc_data.loc_by_name.name, dxpl, inner,     \
                                                     sizeof inner)                                         \
                            : NULL;                                                                        \
        if (cf) {                                                                                          \
            H5VL_loc_params_t in = {.obj_type = H5I_FILE, .type = H5VL_OBJECT_BY_NAME};                    \
            in.loc_data.loc_by_name.name = inner;                                                          \
            in.loc_data.loc_by_name.lapl_id = H5P_LINK_ACCESS_DEFAULT;                                     \
            __typeof__(RESULT) r2 = (CALL);                                                                \
            base->file_cls.close(cf, dxpl, NULL); /* an object opened in it keeps it open */              \
            if (OK(r2)) {                                                                                  \
                RESULT = r2;                                                                               \
                H5Eclear2(H5E_DEFAULT);                                                                    \
            }                                                                                              \
        }                                                                                                  \
    } while (0)
#define PTR_OK(r) ((r) != NULL)
#define HERR_OK(r) ((r) >= 0)

/* ---------------------------------------------------------------- dispatch macros */

/* herr_t slot(obj, ...) */
#define D_HERR(SLOT, CLS, FN, PARAMS, ARGS)                                                                \
    static herr_t d_##FN PARAMS                                                                            \
    {                                                                                                      \
        if (NAT(obj))                                                                                      \
            return h5fpt_##FN ARGS;                                                                        \
        if (!base->CLS.SLOT) {                                                                             \
            unsupported(__func__, #FN);                                                                    \
            return -1;                                                                                     \
        }                                                                                                  \
        return base->CLS.SLOT ARGS;                                                                        \
    }

/* void *slot(obj, ...) */
#define D_PTR(SLOT, CLS, FN, PARAMS, ARGS)                                                                 \
    static void *d_##FN PARAMS                                                                             \
    {                                                                                                      \
        if (NAT(obj))                                                                                      \
            return h5fpt_##FN ARGS;                                                                        \
        if (!base->CLS.SLOT) {                                                                             \
            unsupported(__func__, #FN);                                                                    \
            return NULL;                                                                                   \
        }                                                                                                  \
        return base->CLS.SLOT ARGS;                                                                        \
    }

#define LOC const H5VL_loc_params_t *

/* group/dataset/datatype open: a path through an external link into a native file opens natively */
#define D_OPEN(K)                                                                                          \
    static void *d_##K##_open(void *obj, LOC loc, const char *name, hid_t apl, hid_t dxpl, void **req)     \
    {                                                                                                      \
        if (NAT(obj))                                                                                      \
            return h5fpt_##K##_open(obj, loc, name, apl, dxpl, req);                                       \
        detour.set = false;                                                                                \
        void *r = base->K##_cls.open(obj, loc, name, apl, dxpl, req);                                      \
        DETOUR(r, r == NULL, h5fpt_##K##_open(nf, &self, detour.path, apl, dxpl, NULL));                   \
        return r;                                                                                          \
    }

/* object/link get and specific by name: the same through an external link into a native file, and from
 * a native file through one into a container (NO(a): the native answer was "does not exist") */
#define D_LOC_QUERY(K, OP, NO)                                                                             \
    static herr_t d_##K##_##OP(void *obj, LOC loc, H5VL_##K##_##OP##_args_t *a, hid_t dxpl, void **req)    \
    {                                                                                                      \
        if (NAT(obj)) {                                                                                    \
            herr_t rn = h5fpt_##K##_##OP(obj, loc, a, dxpl, req);                                          \
            if (loc->type == H5VL_OBJECT_BY_NAME)                                                          \
                INTO_CONTAINER(rn, rn < 0 || NO(a), HERR_OK, base->K##_cls.OP(cf, &in, a, dxpl, NULL));    \
            return rn;                                                                                     \
        }                                                                                                  \
        detour.set = false;                                                                                \
        herr_t r = base->K##_cls.OP(obj, loc, a, dxpl, req);                                               \
        if (loc->type == H5VL_OBJECT_BY_NAME)                                                              \
            DETOUR(r, r < 0, h5fpt_##K##_##OP(nf, &nloc, a, dxpl, NULL));                                  \
        return r;                                                                                          \
    }

/* get(obj, args), specific(obj, args), optional and close of a class K (dataset, datatype) */
#define D_GET_SPECIFIC_OPTIONAL_CLOSE(K)                                                                   \
    D_HERR(get, K##_cls, K##_get, (void *obj, H5VL_##K##_get_args_t *a, hid_t dxpl, void **req),            \
           (obj, a, dxpl, req))                                                                            \
    D_HERR(specific, K##_cls, K##_specific, (void *obj, H5VL_##K##_specific_args_t *a, hid_t dxpl, void **req), \
           (obj, a, dxpl, req))                                                                            \
    D_HERR(optional, K##_cls, K##_optional, (void *obj, H5VL_optional_args_t *a, hid_t dxpl, void **req),   \
           (obj, a, dxpl, req))                                                                            \
    D_HERR(close, K##_cls, K##_close, (void *obj, hid_t dxpl, void **req), (obj, dxpl, req))

/* A committed datatype of a container given to a native file's create: native HDF5 reads a committed
 * type's object as its own H5T_t (H5T_get_actual_type), so it gets a transient copy instead, as native
 * HDF5 keeps a copy of a committed type of another file. H5I_INVALID_HID: use the type as it is. */
static hid_t native_usable_type(hid_t type)
{
    if (H5Tcommitted(type) <= 0 || h5fl_nat_id(type))
        return H5I_INVALID_HID;
    return H5Tcopy(type);
}

/* attributes */
static void *d_attr_create(void *obj, LOC loc, const char *name, hid_t t, hid_t s, hid_t acpl, hid_t aapl,
                           hid_t dxpl, void **req)
{
    if (!NAT(obj))
        return base->attr_cls.create(obj, loc, name, t, s, acpl, aapl, dxpl, req);
    hid_t copy = native_usable_type(t);
    void *r = h5fpt_attr_create(obj, loc, name, copy >= 0 ? copy : t, s, acpl, aapl, dxpl, req);
    if (copy >= 0)
        H5Tclose(copy);
    return r;
}
D_PTR(open, attr_cls, attr_open, (void *obj, LOC loc, const char *name, hid_t aapl, hid_t dxpl, void **req),
      (obj, loc, name, aapl, dxpl, req))
D_HERR(read, attr_cls, attr_read, (void *obj, hid_t t, void *buf, hid_t dxpl, void **req),
       (obj, t, buf, dxpl, req))
D_HERR(write, attr_cls, attr_write, (void *obj, hid_t t, const void *buf, hid_t dxpl, void **req),
       (obj, t, buf, dxpl, req))
D_HERR(get, attr_cls, attr_get, (void *obj, H5VL_attr_get_args_t *a, hid_t dxpl, void **req),
       (obj, a, dxpl, req))
D_HERR(specific, attr_cls, attr_specific,
       (void *obj, LOC loc, H5VL_attr_specific_args_t *a, hid_t dxpl, void **req), (obj, loc, a, dxpl, req))
D_HERR(optional, attr_cls, attr_optional, (void *obj, H5VL_optional_args_t *a, hid_t dxpl, void **req),
       (obj, a, dxpl, req))
D_HERR(close, attr_cls, attr_close, (void *obj, hid_t dxpl, void **req), (obj, dxpl, req))

/* datasets */
static void *d_dataset_create(void *obj, LOC loc, const char *name, hid_t lcpl, hid_t t, hid_t s, hid_t dcpl,
                              hid_t dapl, hid_t dxpl, void **req)
{
    if (!NAT(obj))
        return base->dataset_cls.create(obj, loc, name, lcpl, t, s, dcpl, dapl, dxpl, req);
    hid_t copy = native_usable_type(t);
    void *r = h5fpt_dataset_create(obj, loc, name, lcpl, copy >= 0 ? copy : t, s, dcpl, dapl, dxpl, req);
    if (copy >= 0)
        H5Tclose(copy);
    return r;
}
D_OPEN(dataset)
D_GET_SPECIFIC_OPTIONAL_CLOSE(dataset)

/* H5Dread_multi/H5Dwrite_multi may name datasets of both kinds: each kind's run goes to its own side. */
static herr_t d_dataset_io(bool write, size_t count, void *dset[], hid_t mt[], hid_t ms[], hid_t fs[], hid_t dxpl,
                           void *buf[], void **req)
{
    size_t nat = 0;
    for (size_t i = 0; i < count; i++)
        nat += NAT(dset[i]) ? 1 : 0;
    if (nat == 0 || nat == count) {
        if (write)
            return nat ? h5fpt_dataset_write(count, dset, mt, ms, fs, dxpl, (const void **)buf, req)
                       : base->dataset_cls.write(count, dset, mt, ms, fs, dxpl, (const void **)buf, req);
        return nat ? h5fpt_dataset_read(count, dset, mt, ms, fs, dxpl, buf, req)
                   : base->dataset_cls.read(count, dset, mt, ms, fs, dxpl, buf, req);
    }
    for (size_t i = 0; i < count; i++) /* mixed: one dataset at a time, in order */
        if (d_dataset_io(write, 1, &dset[i], &mt[i], &ms[i], &fs[i], dxpl, &buf[i], req) < 0)
            return -1;
    return 0;
}

static herr_t d_dataset_read(size_t count, void *dset[], hid_t mt[], hid_t ms[], hid_t fs[], hid_t dxpl,
                             void *buf[], void **req)
{
    return d_dataset_io(false, count, dset, mt, ms, fs, dxpl, buf, req);
}

static herr_t d_dataset_write(size_t count, void *dset[], hid_t mt[], hid_t ms[], hid_t fs[], hid_t dxpl,
                              const void *buf[], void **req)
{
    return d_dataset_io(true, count, dset, mt, ms, fs, dxpl, (void **)buf, req);
}

/* committed datatypes */
D_PTR(commit, datatype_cls, datatype_commit,
      (void *obj, LOC loc, const char *name, hid_t t, hid_t lcpl, hid_t tcpl, hid_t tapl, hid_t dxpl, void **req),
      (obj, loc, name, t, lcpl, tcpl, tapl, dxpl, req))
D_OPEN(datatype)
D_GET_SPECIFIC_OPTIONAL_CLOSE(datatype)

/* files */
static void *d_file_create(const char *name, unsigned flags, hid_t fcpl, hid_t fapl, hid_t dxpl, void **req)
{
    if (h5fl_nat_driver(fapl))
        return h5fpt_file_create(name, flags, fcpl, fapl, dxpl, req);
    return base->file_cls.create(name, flags, fcpl, fapl, dxpl, req);
}

static void *d_file_open(const char *name, unsigned flags, hid_t fapl, hid_t dxpl, void **req)
{
    if (h5fl_nat_driver(fapl) || h5fl_nat_file(name))
        return h5fpt_file_open(name, flags, fapl, dxpl, req);
    return base->file_cls.open(name, flags, fapl, dxpl, req);
}

D_HERR(get, file_cls, file_get, (void *obj, H5VL_file_get_args_t *a, hid_t dxpl, void **req), (obj, a, dxpl, req))
D_HERR(optional, file_cls, file_optional, (void *obj, H5VL_optional_args_t *a, hid_t dxpl, void **req),
       (obj, a, dxpl, req))
D_HERR(close, file_cls, file_close, (void *obj, hid_t dxpl, void **req), (obj, dxpl, req))

/* is_accessible and delete name a file and a FAPL (no object); the core's own versions look for its info
 * on the FAPL, which h5flow_log never puts there, so the native connector is asked here directly. */
static herr_t native_by_name(H5VL_file_specific_args_t *args, hid_t dxpl, void **req)
{
    H5VL_file_specific_args_t mine = *args;
    hid_t *fapl = args->op_type == H5VL_FILE_IS_ACCESSIBLE ? &mine.args.is_accessible.fapl_id
                                                             : &mine.args.del.fapl_id;
    hid_t nfapl = H5Pcopy(*fapl == H5P_DEFAULT ? H5P_FILE_ACCESS_DEFAULT : *fapl);
    herr_t r = -1;
    if (nfapl >= 0 && H5Pset_vol(nfapl, H5VL_NATIVE, NULL) >= 0) {
        *fapl = nfapl;
        r = H5VLfile_specific(NULL, H5VL_NATIVE, &mine, dxpl, req);
    }
    if (nfapl >= 0)
        H5Pclose(nfapl);
    return r;
}

static herr_t d_file_specific(void *obj, H5VL_file_specific_args_t *args, hid_t dxpl, void **req)
{
    if (args->op_type == H5VL_FILE_IS_ACCESSIBLE) {
        /* HDF5 also asks this when a native H5Fopen failed in a program that never selected the connector
         * (it tries every plugin on HDF5_PLUGIN_PATH): the answer must leave that program's error stack as
         * it was (h5py derives FileNotFoundError from it), although the driver check calls API functions. */
        const char *name = args->args.is_accessible.filename;
        hid_t saved = h5fl_estack_save();
        herr_t r = 0;
        if (h5fl_nat_driver(args->args.is_accessible.fapl_id))
            r = native_by_name(args, dxpl, req);
        else if (h5fl_nat_file(name)) /* a native HDF5 file opens through this connector */
            *args->args.is_accessible.accessible = true;
        else
            r = base->file_cls.specific(obj, args, dxpl, req);
        if (r >= 0)
            h5fl_estack_restore(saved);
        else if (saved >= 0)
            H5Eclose_stack(saved);
        return r;
    }
    if (args->op_type == H5VL_FILE_DELETE) {
        if (h5fl_nat_driver(args->args.del.fapl_id) || h5fl_nat_file(args->args.del.filename))
            return native_by_name(args, dxpl, req);
        return base->file_cls.specific(obj, args, dxpl, req);
    }
    if (args->op_type == H5VL_FILE_IS_EQUAL && NAT(obj) != NAT(args->args.is_equal.obj2)) {
        *args->args.is_equal.same_file = false; /* a container is never the native file */
        return 0;
    }
    if (NAT(obj))
        return h5fpt_file_specific(obj, args, dxpl, req);
    return base->file_cls.specific(obj, args, dxpl, req);
}

/* groups */
D_PTR(create, group_cls, group_create,
      (void *obj, LOC loc, const char *name, hid_t lcpl, hid_t gcpl, hid_t gapl, hid_t dxpl, void **req),
      (obj, loc, name, lcpl, gcpl, gapl, dxpl, req))
D_OPEN(group)
D_HERR(get, group_cls, group_get, (void *obj, H5VL_group_get_args_t *a, hid_t dxpl, void **req),
       (obj, a, dxpl, req))
D_HERR(optional, group_cls, group_optional, (void *obj, H5VL_optional_args_t *a, hid_t dxpl, void **req),
       (obj, a, dxpl, req))
D_HERR(close, group_cls, group_close, (void *obj, hid_t dxpl, void **req), (obj, dxpl, req))

static herr_t d_group_specific(void *obj, H5VL_group_specific_args_t *args, hid_t dxpl, void **req)
{
    if (args->op_type == H5VL_GROUP_MOUNT &&
        kinds(obj, args->args.mount.child_file, __func__, "cannot mount a file of the other kind (H5Fmount)") < 0)
        return -1;
    if (NAT(obj))
        return h5fpt_group_specific(obj, args, dxpl, req);
    return base->group_cls.specific(obj, args, dxpl, req);
}

/* links */
static herr_t d_link_create(H5VL_link_create_args_t *args, void *obj, LOC loc, hid_t lcpl, hid_t lapl, hid_t dxpl,
                            void **req)
{
    int k = 0;
    if (args->op_type == H5VL_LINK_CREATE_HARD)
        k = kinds(obj, args->args.hard.curr_obj, __func__,
                  "cannot create a hard link between an h5flow_log container and a native HDF5 file "
                  "(H5Lcreate_hard, H5Olink); an external link can name an object of the other file");
    else
        k = NAT(obj) ? 1 : 0;
    if (k < 0)
        return -1;
    if (k)
        return h5fpt_link_create(args, obj, loc, lcpl, lapl, dxpl, req);
    return base->link_cls.create(args, obj, loc, lcpl, lapl, dxpl, req);
}

/* H5Lcopy (OP copy) and H5Lmove (OP move) */
#define D_LINK_TWO(OP, API)                                                                                \
    static herr_t d_link_##OP(void *src, LOC l1, void *dst, LOC l2, hid_t lcpl, hid_t lapl, hid_t dxpl,      \
                              void **req)                                                                  \
    {                                                                                                      \
        int k = kinds(src, dst, __func__,                                                                  \
                      "cannot " #OP " a link between an h5flow_log container and a native HDF5 file (" API ")"); \
        if (k < 0)                                                                                         \
            return -1;                                                                                     \
        return k ? h5fpt_link_##OP(src, l1, dst, l2, lcpl, lapl, dxpl, req)                                \
                 : base->link_cls.OP(src, l1, dst, l2, lcpl, lapl, dxpl, req);                             \
    }
D_LINK_TWO(copy, "H5Lcopy")
D_LINK_TWO(move, "H5Lmove")

#define NEVER(a) ((void)(a), false)
#define LINK_NO(a) ((a)->op_type == H5VL_LINK_EXISTS && !*(a)->args.exists.exists)
#define OBJECT_NO(a) ((a)->op_type == H5VL_OBJECT_EXISTS && !*(a)->args.exists.exists)
D_LOC_QUERY(link, get, NEVER)
D_LOC_QUERY(link, specific, LINK_NO)
D_HERR(optional, link_cls, link_optional, (void *obj, LOC loc, H5VL_optional_args_t *a, hid_t dxpl, void **req),
       (obj, loc, a, dxpl, req))

/* objects */
static void *d_object_open(void *obj, LOC loc, H5I_type_t *type, hid_t dxpl, void **req)
{
    if (NAT(obj)) {
        void *r = h5fpt_object_open(obj, loc, type, dxpl, req);
        if (loc->type == H5VL_OBJECT_BY_NAME)
            INTO_CONTAINER(r, r == NULL, PTR_OK, base->object_cls.open(cf, &in, type, dxpl, NULL));
        return r;
    }
    detour.set = false;
    void *r = base->object_cls.open(obj, loc, type, dxpl, req);
    if (loc->type == H5VL_OBJECT_BY_NAME)
        DETOUR(r, r == NULL, h5fpt_object_open(nf, &nloc, type, dxpl, NULL));
    return r;
}

D_LOC_QUERY(object, get, NEVER)
D_LOC_QUERY(object, specific, OBJECT_NO)
D_HERR(optional, object_cls, object_optional,
       (void *obj, LOC loc, H5VL_optional_args_t *a, hid_t dxpl, void **req), (obj, loc, a, dxpl, req))

static herr_t d_object_copy(void *src, LOC l1, const char *sname, void *dst, LOC l2, const char *dname,
                            hid_t ocpypl, hid_t lcpl, hid_t dxpl, void **req)
{
    int k = kinds(src, dst, __func__, "cannot copy an object between an h5flow_log container and a native HDF5 "
                                      "file (H5Ocopy)");
    if (k < 0)
        return -1;
    return k ? h5fpt_object_copy(src, l1, sname, dst, l2, dname, ocpypl, lcpl, dxpl, req)
             : base->object_cls.copy(src, l1, sname, dst, l2, dname, ocpypl, lcpl, dxpl, req);
}

/* introspection: per object kind; the class of the current level is always the dispatch class */
static herr_t d_get_conn_cls(void *obj, H5VL_get_conn_lvl_t lvl, const H5VL_class_t **cls)
{
    if (NAT(obj))
        return h5fpt_introspect_get_conn_cls(obj, lvl, cls);
    *cls = &dispatch;
    return 0;
}

static herr_t d_opt_query(void *obj, H5VL_subclass_t cls, int opt_type, uint64_t *flags)
{
    if (NAT(obj))
        return h5fpt_introspect_opt_query(obj, cls, opt_type, flags);
    return base->introspect_cls.opt_query(obj, cls, opt_type, flags);
}

/* blobs (the file object) */
static herr_t d_blob_put(void *obj, const void *buf, size_t size, void *id, void *ctx)
{
    return NAT(obj) ? h5fpt_blob_put(obj, buf, size, id, ctx) : base->blob_cls.put(obj, buf, size, id, ctx);
}

static herr_t d_blob_get(void *obj, const void *id, void *buf, size_t size, void *ctx)
{
    return NAT(obj) ? h5fpt_blob_get(obj, id, buf, size, ctx) : base->blob_cls.get(obj, id, buf, size, ctx);
}

static herr_t d_blob_specific(void *obj, void *id, H5VL_blob_specific_args_t *a)
{
    return NAT(obj) ? h5fpt_blob_specific(obj, id, a) : base->blob_cls.specific(obj, id, a);
}

static herr_t d_blob_optional(void *obj, void *id, H5VL_optional_args_t *a)
{
    if (NAT(obj))
        return h5fpt_blob_optional(obj, id, a);
    if (!base->blob_cls.optional) {
        unsupported(__func__, "blob_optional");
        return -1;
    }
    return base->blob_cls.optional(obj, id, a);
}

/* tokens: a container's are compared and printed as HDF5 does for a connector without token callbacks */
static herr_t d_token_cmp(void *obj, const H5O_token_t *a, const H5O_token_t *b, int *cmp)
{
    if (NAT(obj))
        return h5fpt_token_cmp(obj, a, b, cmp);
    if (base->token_cls.cmp)
        return base->token_cls.cmp(obj, a, b, cmp);
    *cmp = memcmp(a, b, sizeof *a);
    return 0;
}

static herr_t d_token_to_str(void *obj, H5I_type_t type, const H5O_token_t *t, char **str)
{
    if (NAT(obj))
        return h5fpt_token_to_str(obj, type, t, str);
    if (base->token_cls.to_str)
        return base->token_cls.to_str(obj, type, t, str);
    *str = NULL;
    return 0;
}

static herr_t d_token_from_str(void *obj, H5I_type_t type, const char *str, H5O_token_t *t)
{
    if (NAT(obj))
        return h5fpt_token_from_str(obj, type, str, t);
    if (base->token_cls.from_str)
        return base->token_cls.from_str(obj, type, str, t);
    *t = H5O_TOKEN_UNDEF;
    return 0;
}

static herr_t d_optional(void *obj, H5VL_optional_args_t *a, hid_t dxpl, void **req)
{
    if (NAT(obj))
        return h5fpt_optional(obj, a, dxpl, req);
    if (!base->optional) {
        unsupported(__func__, "optional");
        return -1;
    }
    return base->optional(obj, a, dxpl, req);
}

/* wrapping: a container's objects are not wrapped (no context); a native file's are the core's wrappers */
static void *d_get_object(const void *obj)
{
    return NAT(obj) ? h5fpt_get_object(obj) : (void *)obj;
}

static herr_t d_get_wrap_ctx(const void *obj, void **ctx)
{
    if (NAT(obj))
        return h5fpt_get_wrap_ctx(obj, ctx);
    *ctx = NULL;
    return 0;
}

static void *d_wrap_object(void *obj, H5I_type_t type, void *ctx)
{
    return ctx ? h5fpt_wrap_object(obj, type, ctx) : obj;
}

static void *d_unwrap_object(void *obj)
{
    return NAT(obj) ? h5fpt_unwrap_object(obj) : obj;
}

/* ---------------------------------------------------------------- the class */

static const h5fpt_desc_t desc = {.name = H5FL_NAME, .value = H5FL_VALUE, .conn_version = H5FL_FORMAT_VERSION};

static void build(void)
{
    H5VL_class_t scratch;
    h5fpt_class_init(&scratch, &desc); /* records the descriptor the forwarders read */
    dispatch = *base;
    dispatch.wrap_cls = (H5VL_wrap_class_t){d_get_object, d_get_wrap_ctx, d_wrap_object, d_unwrap_object,
                                            h5fpt_free_wrap_ctx};
    dispatch.attr_cls = (H5VL_attr_class_t){d_attr_create, d_attr_open, d_attr_read, d_attr_write, d_attr_get,
                                            d_attr_specific, d_attr_optional, d_attr_close};
    dispatch.dataset_cls =
        (H5VL_dataset_class_t){d_dataset_create, d_dataset_open,     d_dataset_read,     d_dataset_write,
                               d_dataset_get,    d_dataset_specific, d_dataset_optional, d_dataset_close};
    dispatch.datatype_cls = (H5VL_datatype_class_t){d_datatype_commit,   d_datatype_open,     d_datatype_get,
                                                    d_datatype_specific, d_datatype_optional, d_datatype_close};
    dispatch.file_cls = (H5VL_file_class_t){d_file_create,   d_file_open,     d_file_get,
                                            d_file_specific, d_file_optional, d_file_close};
    dispatch.group_cls = (H5VL_group_class_t){d_group_create,   d_group_open,     d_group_get,
                                              d_group_specific, d_group_optional, d_group_close};
    dispatch.link_cls = (H5VL_link_class_t){d_link_create, d_link_copy,     d_link_move,
                                            d_link_get,    d_link_specific, d_link_optional};
    dispatch.object_cls = (H5VL_object_class_t){d_object_open, d_object_copy, d_object_get, d_object_specific,
                                                d_object_optional};
    dispatch.introspect_cls.get_conn_cls = d_get_conn_cls;
    dispatch.introspect_cls.opt_query = d_opt_query;
    /* a container makes no requests: every request is a native file's */
    dispatch.request_cls = (H5VL_request_class_t){h5fpt_request_wait,     h5fpt_request_notify,
                                                  h5fpt_request_cancel,   h5fpt_request_specific,
                                                  h5fpt_request_optional, h5fpt_request_free};
    dispatch.blob_cls = (H5VL_blob_class_t){d_blob_put, d_blob_get, d_blob_specific, d_blob_optional};
    dispatch.token_cls = (H5VL_token_class_t){d_token_cmp, d_token_to_str, d_token_from_str};
    dispatch.optional = d_optional;
}

const H5VL_class_t *h5fl_nat_class(const H5VL_class_t *containers)
{
    base = containers;
    pthread_once(&once, build);
    return &dispatch;
}
