/* The h5flow_cache VOL class: the shared pass-through core, with the callbacks the cache changes. */
#include "hfc.h"

#include <h5fpt.h>
#include <H5PLextern.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every object's extension: the engine of its file, and for a dataset its engine state. */
typedef struct {
    hfc_file_t *f;
    hfc_dset_t *d;
} ext_t;

static hfc_file_t *engine_of(const void *obj)
{
    const h5fpt_obj_t *o = obj;
    return o && o->ext ? ((const ext_t *)o->ext)->f : NULL;
}

static hfc_dset_t *dset_of(const void *obj)
{
    const h5fpt_obj_t *o = obj;
    return o && o->ext ? ((const ext_t *)o->ext)->d : NULL;
}

/* the pending message of this thread onto HDF5's error stack, in the core's error class */
static void report(void)
{
    H5FPT_ERR("%s", hfc_err_msg()[0] ? hfc_err_msg() : "operation failed");
    hfc_err_clear();
}

/* A file cannot be opened through the cache (a setting, the tier): also said on stderr, because h5py and
 * many programs show only the outermost message of HDF5's error stack ("file create failed"). */
static void report_open(void)
{
    fprintf(stderr, "%s\n", hfc_err_msg());
    report();
}

/* ------------------------------------------------------------------ options */
static void opts_default(void *opts) { hfc_cfg_defaults(opts); }

static int opts_set(void *opts, const char *key, const char *value, char *err, size_t errlen)
{
    if (hfc_cfg_set(opts, key, value) != 0) {
        snprintf(err, errlen, "%s", hfc_err_msg());
        hfc_err_clear();
        return -1;
    }
    return 0;
}

static int opts_to_str(const void *opts, char *buf, size_t len) { return hfc_cfg_to_str(opts, buf, len); }

/* ------------------------------------------------------------------ objects */
/* The file access list of the file create or open this thread is in (H5I_INVALID_HID outside one): the
 * engine reads the driver and the communicator from it, instead of asking the connector below for a copy of
 * the whole list (H5VL_FILE_GET_FAPL), which costs more than the rest of the engine's open. Set and cleared
 * around one call on one thread: nothing is shared between files. */
static _Thread_local hid_t opening_fapl = H5I_INVALID_HID;

static herr_t obj_init(h5fpt_obj_t *obj, const h5fpt_obj_t *parent, const h5fpt_info_t *info)
{
    ext_t *e = calloc(1, sizeof *e);
    if (!e) {
        H5FPT_ERR("h5flow_cache: out of memory");
        return -1;
    }
    if (obj->type == H5I_FILE && !parent) {
        hfc_cfg_t cfg;
        if (hfc_cfg_effective(info ? info->opts : NULL, &cfg) != 0) {
            free(e);
            report_open();
            return -1;
        }
        unsigned long fileno = 0;
        H5VL_file_get_args_t ga = {.op_type = H5VL_FILE_GET_FILENO};
        ga.args.get_fileno.fileno = &fileno;
        int key_ok = H5VLfile_get(obj->under_object, obj->under_vol_id, &ga, H5P_DATASET_XFER_DEFAULT, NULL) >= 0;
        if (!key_ok)
            H5Eclear2(H5E_DEFAULT);
        hid_t fapl = opening_fapl, got = H5I_INVALID_HID;
        if (fapl < 0) {
            H5VL_file_get_args_t pa = {.op_type = H5VL_FILE_GET_FAPL};
            if (H5VLfile_get(obj->under_object, obj->under_vol_id, &pa, H5P_DATASET_XFER_DEFAULT, NULL) >= 0)
                fapl = got = pa.args.get_fapl.fapl_id;
            else
                H5Eclear2(H5E_DEFAULT);
        }
        e->f = hfc_file_open(&cfg, fapl, fileno, key_ok);
        if (got >= 0)
            H5Pclose(got);
        if (!e->f) {
            free(e);
            report_open();
            return -1;
        }
    }
    else {
        e->f = engine_of(parent);
        if (e->f)
            hfc_file_retain(e->f);
        if (e->f && obj->type == H5I_DATASET) {
            H5O_info2_t oi;
            memset(&oi, 0, sizeof oi);
            H5VL_object_get_args_t ga = {.op_type = H5VL_OBJECT_GET_INFO};
            ga.args.get_info.oinfo = &oi;
            ga.args.get_info.fields = H5O_INFO_BASIC;
            H5VL_loc_params_t loc = {.type = H5VL_OBJECT_BY_SELF, .obj_type = H5I_DATASET};
            int tok_ok = H5VLobject_get(obj->under_object, &loc, obj->under_vol_id, &ga,
                                        H5P_DATASET_XFER_DEFAULT, NULL) >= 0;
            if (!tok_ok)
                H5Eclear2(H5E_DEFAULT);
            /* A dataset reached through an external link lies in another file than its handle: its cached
             * writes go to that file's engine, which every handle of that file shares (a read through any of
             * them then sees them, and none is migrated over a later write made through another). */
            unsigned long key = 0;
            if (tok_ok && hfc_file_key(e->f, &key) && oi.fileno != key) {
                hfc_file_t *own = hfc_file_open_for(e->f, oi.fileno);
                if (!own) {
                    hfc_file_close(e->f);
                    free(e);
                    report();
                    return -1;
                }
                hfc_file_close(e->f); /* the handle's engine: the handle still holds it */
                e->f = own;
            }
            e->d = hfc_dset_attach(e->f, obj->under_object, obj->under_vol_id, &oi.token, tok_ok);
            if (!e->d) {
                hfc_file_close(e->f);
                free(e);
                report();
                return -1;
            }
        }
    }
    obj->ext = e;
    return 0;
}

static void obj_fini(h5fpt_obj_t *obj)
{
    ext_t *e = obj->ext;
    if (!e)
        return;
    if (e->d) /* released without our close callback (unwrapped): its writes go below first */
        if (hfc_dset_drain(e->d) != 0 || !hfc_dset_detach(e->d, NULL))
            hfc_err_clear();
    if (e->f && hfc_file_close(e->f) != 0) {
        fprintf(stderr, "%s\n", hfc_err_msg());
        hfc_err_clear();
    }
    free(e);
    obj->ext = NULL;
}

/* ------------------------------------------------------------------ datasets */
/* Reads and writes of several datasets at once: each of ours through the engine, the others forwarded. */
static herr_t cache_dataset_io(int writing, size_t count, void *dset[], hid_t mem_type_id[],
                               hid_t mem_space_id[], hid_t file_space_id[], hid_t dxpl_id, void *buf[],
                               void **req)
{
    size_t ours = 0;
    for (size_t i = 0; i < count; i++)
        ours += dset_of(dset[i]) != NULL;
    if (!ours)
        return writing ? h5fpt_dataset_write(count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id,
                                             (const void **)buf, req)
                       : h5fpt_dataset_read(count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id, buf,
                                            req);
    for (size_t i = 0; i < count; i++) {
        hfc_dset_t *d = dset_of(dset[i]);
        int rc;
        if (d && writing)
            rc = hfc_dset_write(d, mem_type_id[i], mem_space_id[i], file_space_id[i], dxpl_id, buf[i], NULL);
        else if (d)
            rc = hfc_dset_read(d, mem_type_id[i], mem_space_id[i], file_space_id[i], dxpl_id, buf[i], NULL);
        else if (writing)
            rc = h5fpt_dataset_write(1, &dset[i], &mem_type_id[i], &mem_space_id[i], &file_space_id[i], dxpl_id,
                                     (const void **)&buf[i], NULL);
        else
            rc = h5fpt_dataset_read(1, &dset[i], &mem_type_id[i], &mem_space_id[i], &file_space_id[i], dxpl_id,
                                    &buf[i], NULL);
        if (rc < 0) {
            if (d)
                report();
            return -1;
        }
    }
    return 0;
}

static herr_t cache_dataset_write(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                                  hid_t file_space_id[], hid_t dxpl_id, const void *buf[], void **req)
{
    return cache_dataset_io(1, count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id, (void **)buf, req);
}

static herr_t cache_dataset_read(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                                 hid_t file_space_id[], hid_t dxpl_id, void *buf[], void **req)
{
    return cache_dataset_io(0, count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id, buf, req);
}

static int drain_dset(void *obj)
{
    hfc_dset_t *d = dset_of(obj);
    if (d && hfc_dset_drain(d) != 0) {
        report();
        return -1;
    }
    return 0;
}

static int drain_file(void *obj)
{
    hfc_file_t *f = engine_of(obj);
    if (f && hfc_file_drain(f) != 0) {
        report();
        return -1;
    }
    return 0;
}

static herr_t cache_dataset_get(void *obj, H5VL_dataset_get_args_t *args, hid_t dxpl_id, void **req)
{
    /* what is stored depends on the cached writes */
    if ((args->op_type == H5VL_DATASET_GET_SPACE_STATUS || args->op_type == H5VL_DATASET_GET_STORAGE_SIZE) &&
        drain_dset(obj) < 0)
        return -1;
    return h5fpt_dataset_get(obj, args, dxpl_id, req);
}

typedef struct {
    void *obj;
    H5VL_dataset_specific_args_t *args;
    hid_t dxpl_id;
    void **req;
} specific_call_t;

static int forward_specific(void *arg)
{
    specific_call_t *c = arg;
    return h5fpt_dataset_specific(c->obj, c->args, c->dxpl_id, c->req);
}

static herr_t cache_dataset_specific(void *obj, H5VL_dataset_specific_args_t *args, hid_t dxpl_id, void **req)
{
    hfc_dset_t *d = dset_of(obj);
    if (d && args->op_type == H5VL_DATASET_SET_EXTENT) {
        /* growing keeps the cached writes cached; shrinking migrates them first */
        specific_call_t c = {obj, args, dxpl_id, req};
        hfc_err_clear();
        int rc = hfc_dset_set_extent(d, args->args.set_extent.size, forward_specific, &c);
        if (rc < 0 && hfc_err_msg()[0])
            report();
        return rc;
    }
    /* a flush or a refresh: the cached writes go first, in program order */
    if (drain_dset(obj) < 0)
        return -1;
    return h5fpt_dataset_specific(obj, args, dxpl_id, req);
}

static herr_t cache_dataset_optional(void *obj, H5VL_optional_args_t *args, hid_t dxpl_id, void **req)
{
    /* the native extras (direct chunk I/O, chunk queries) see the file as written */
    if (drain_file(obj) < 0)
        return -1;
    return h5fpt_dataset_optional(obj, args, dxpl_id, req);
}

static herr_t cache_dataset_close(void *dset, hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *o = dset;
    ext_t *e = o->ext;
    if (e && e->d) {
        hfc_dset_t *d = e->d;
        e->d = NULL;
        if (!hfc_dset_detach(d, o->under_object)) {
            /* the engine closes the dataset below once its cached writes have migrated */
            h5fpt_obj_release(o);
            return 0;
        }
    }
    return h5fpt_dataset_close(dset, dxpl_id, req);
}

/* ------------------------------------------------------------------ files and other objects */
/* Drain before a flush or a close. When a cached write cannot be written, the flush or close fails and
 * changes nothing (HDF5 keeps the file id): the data stays in the cache and the next flush or close tries
 * again. In an MPI file both are collective: the ranks first agree on the outcome, so that every rank
 * fails (or goes on) together and none waits in the operation below for a rank that left it out. */
static herr_t drain_then(void *obj, int close, H5VL_file_specific_args_t *args, hid_t dxpl_id, void **req)
{
    hfc_file_t *f = engine_of(obj);
    int rc = f ? hfc_file_drain(f) : 0;
    if (f && hfc_file_is_mpi(f))
        rc = hfc_file_agree(f, rc);
    if (rc != 0) {
        report();
        return -1;
    }
    return close ? h5fpt_file_close(obj, dxpl_id, req) : h5fpt_file_specific(obj, args, dxpl_id, req);
}

static herr_t cache_file_specific(void *obj, H5VL_file_specific_args_t *args, hid_t dxpl_id, void **req)
{
    if (args->op_type != H5VL_FILE_FLUSH)
        return h5fpt_file_specific(obj, args, dxpl_id, req);
    return drain_then(obj, 0, args, dxpl_id, req);
}

static herr_t cache_file_close(void *file, hid_t dxpl_id, void **req)
{
    /* H5Fclose returns when every cached write is below */
    return drain_then(file, 1, NULL, dxpl_id, req);
}

static void *cache_file_create(const char *name, unsigned flags, hid_t fcpl_id, hid_t fapl_id, hid_t dxpl_id,
                               void **req)
{
    opening_fapl = fapl_id;
    void *o = h5fpt_file_create(name, flags, fcpl_id, fapl_id, dxpl_id, req);
    opening_fapl = H5I_INVALID_HID;
    return o;
}

static void *cache_file_open(const char *name, unsigned flags, hid_t fapl_id, hid_t dxpl_id, void **req)
{
    opening_fapl = fapl_id;
    void *o = h5fpt_file_open(name, flags, fapl_id, dxpl_id, req);
    opening_fapl = H5I_INVALID_HID;
    return o;
}

static herr_t cache_object_copy(void *src, const H5VL_loc_params_t *loc1, const char *src_name, void *dst,
                                const H5VL_loc_params_t *loc2, const char *dst_name, hid_t ocpypl_id,
                                hid_t lcpl_id, hid_t dxpl_id, void **req)
{
    if (drain_file(src) < 0)
        return -1;
    return h5fpt_object_copy(src, loc1, src_name, dst, loc2, dst_name, ocpypl_id, lcpl_id, dxpl_id, req);
}

/* ------------------------------------------------------------------ class */
static const h5fpt_desc_t desc = {
    .name = HFC_NAME,
    .value = HFC_VALUE,
    .conn_version = 1,
    .cap_flags = 0,
    .opts_size = sizeof(hfc_cfg_t),
    .opts_default = opts_default,
    .opts_set = opts_set,
    .opts_to_str = opts_to_str,
    .obj_init = obj_init,
    .obj_fini = obj_fini,
};

static H5VL_class_t cache_cls;
static pthread_once_t cls_once = PTHREAD_ONCE_INIT;
static int cls_ok;

static void cls_build(void)
{
    if (h5fpt_class_init(&cache_cls, &desc) < 0)
        return;
    cls_ok = 1;
    cache_cls.dataset_cls.write = cache_dataset_write;
    cache_cls.dataset_cls.read = cache_dataset_read;
    cache_cls.dataset_cls.get = cache_dataset_get;
    cache_cls.dataset_cls.specific = cache_dataset_specific;
    cache_cls.dataset_cls.optional = cache_dataset_optional;
    cache_cls.dataset_cls.close = cache_dataset_close;
    cache_cls.file_cls.create = cache_file_create;
    cache_cls.file_cls.open = cache_file_open;
    cache_cls.file_cls.specific = cache_file_specific;
    cache_cls.file_cls.close = cache_file_close;
    cache_cls.object_cls.copy = cache_object_copy;
}

H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_VOL; }

const void *H5PLget_plugin_info(void)
{
    pthread_once(&cls_once, cls_build);
    return cls_ok ? &cache_cls : NULL;
}
