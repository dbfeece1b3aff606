/* The forwarding implementation of every H5VL_class_t callback: unwrap, observe, call below, wrap. */
#include "h5fpt_int.h"

#include <stdlib.h>
#include <string.h>

#define CALL(OP, OBJ, ARGS, NAME) {.op = (OP), .obj = (OBJ), .args = (ARGS), .name = (NAME)}

static const char *const op_names[H5FPT_OP_COUNT] = {
    "attr_create", "attr_open", "attr_read", "attr_write", "attr_get", "attr_specific", "attr_optional",
    "attr_close", "dataset_create", "dataset_open", "dataset_read", "dataset_write", "dataset_get",
    "dataset_specific", "dataset_optional", "dataset_close", "datatype_commit", "datatype_open",
    "datatype_get", "datatype_specific", "datatype_optional", "datatype_close", "file_create", "file_open",
    "file_get", "file_specific", "file_optional", "file_close", "group_create", "group_open", "group_get",
    "group_specific", "group_optional", "group_close", "link_create", "link_copy", "link_move", "link_get",
    "link_specific", "link_optional", "object_open", "object_copy", "object_get", "object_specific",
    "object_optional", "introspect_get_conn_cls", "introspect_get_cap_flags", "introspect_opt_query",
    "request_wait", "request_notify", "request_cancel", "request_specific", "request_optional",
    "request_free", "blob_put", "blob_get", "blob_specific", "blob_optional", "token_cmp", "token_to_str",
    "token_from_str", "optional",
};

const char *h5fpt_op_name(h5fpt_op_t op)
{
    return (op >= 0 && op < H5FPT_OP_COUNT) ? op_names[op] : NULL;
}

/* The wrapper of an object the call below returned (NULL stays NULL), and its request. */
static void *wrapped(void *under, const h5fpt_obj_t *parent, H5I_type_t type, hid_t dxpl_id, void **req)
{
    hid_t uvid = parent->under_vol_id;
    h5fpt_wrap_req(req, uvid);
    return h5fpt_obj_wrap_or_close(under, uvid, type, parent, NULL, dxpl_id);
}

static void *under_of(void *obj) { return obj ? ((h5fpt_obj_t *)obj)->under_object : NULL; }

/* f(obj, args, dxpl, req) */
#define FWD_OBJ_ARGS(FN, OP, ARGT, UNDER)                                                                      \
    herr_t FN(void *obj, ARGT *args, hid_t dxpl_id, void **req)                                                 \
    {                                                                                                            \
        h5fpt_obj_t *o = obj;                                                                                    \
        hid_t uvid = o->under_vol_id; /* kept: a refresh may replace what o points to */                       \
        h5fpt_call_t c = CALL(OP, o, args, NULL);                                                                \
        h5fpt_before(&c);                                                                                        \
        herr_t r = UNDER(o->under_object, uvid, args, dxpl_id, req);                                             \
        h5fpt_wrap_req(req, uvid);                                                                               \
        h5fpt_after(&c, r < 0);                                                                                  \
        return r;                                                                                                \
    }

/* f(obj, loc, args, dxpl, req) */
#define FWD_LOC_ARGS(FN, OP, ARGT, UNDER)                                                                      \
    herr_t FN(void *obj, const H5VL_loc_params_t *loc, ARGT *args, hid_t dxpl_id, void **req)                  \
    {                                                                                                            \
        h5fpt_obj_t *o = obj;                                                                                    \
        hid_t uvid = o->under_vol_id;                                                                            \
        h5fpt_call_t c = CALL(OP, o, args, NULL);                                                                \
        h5fpt_before(&c);                                                                                        \
        herr_t r = UNDER(o->under_object, loc, uvid, args, dxpl_id, req);                                        \
        h5fpt_wrap_req(req, uvid);                                                                               \
        h5fpt_after(&c, r < 0);                                                                                  \
        return r;                                                                                                \
    }

/* close(obj, dxpl, req): the wrapper goes when the object below closed */
#define FWD_CLOSE(FN, OP, UNDER)                                                                               \
    herr_t FN(void *obj, hid_t dxpl_id, void **req)                                                            \
    {                                                                                                            \
        h5fpt_obj_t *o = obj;                                                                                    \
        hid_t uvid = o->under_vol_id;                                                                            \
        h5fpt_call_t c = CALL(OP, o, NULL, NULL);                                                                \
        h5fpt_before(&c);                                                                                        \
        herr_t r = UNDER(o->under_object, uvid, dxpl_id, req);                                                   \
        h5fpt_wrap_req(req, uvid);                                                                               \
        h5fpt_after(&c, r < 0);                                                                                  \
        if (r >= 0)                                                                                              \
            h5fpt_obj_release(o);                                                                                \
        return r;                                                                                                \
    }

/* a call that returns herr_t and makes nothing to wrap: observe around EXPR */
#define FWD_SIMPLE(OP, O, ARGS, EXPR)                                                                          \
    do {                                                                                                       \
        h5fpt_call_t c = CALL(OP, O, ARGS, NULL);                                                              \
        h5fpt_before(&c);                                                                                      \
        herr_t r = (EXPR);                                                                                     \
        h5fpt_after(&c, r < 0);                                                                                \
        return r;                                                                                              \
    } while (0)

/* a create or open on location o: observe, call EXPR below, wrap what it made (of TYPE) */
#define FWD_MAKE(OP, NAME, TYPE, EXPR)                                                                         \
    do {                                                                                                       \
        h5fpt_call_t c = CALL(OP, o, NULL, NAME);                                                              \
        h5fpt_before(&c);                                                                                      \
        void *u = (EXPR);                                                                                      \
        void *r = wrapped(u, o, (TYPE), dxpl_id, req);                                                         \
        h5fpt_after(&c, r == NULL);                                                                            \
        return r;                                                                                              \
    } while (0)

/* ------------------------------------------------------------------------------------- attribute */

void *h5fpt_attr_create(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t type_id,
                        hid_t space_id, hid_t acpl_id, hid_t aapl_id, hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *o = obj;
    FWD_MAKE(H5FPT_ATTR_CREATE, name, H5I_ATTR,
             H5VLattr_create(o->under_object, loc, o->under_vol_id, name, type_id, space_id, acpl_id, aapl_id,
                 dxpl_id, req));
}

void *h5fpt_attr_open(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t aapl_id, hid_t dxpl_id,
                      void **req)
{
    h5fpt_obj_t *o = obj;
    FWD_MAKE(H5FPT_ATTR_OPEN, name, H5I_ATTR,
             H5VLattr_open(o->under_object, loc, o->under_vol_id, name, aapl_id, dxpl_id, req));
}

herr_t h5fpt_attr_read(void *attr, hid_t mem_type_id, void *buf, hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *o = attr;
    h5fpt_call_t c = CALL(H5FPT_ATTR_READ, o, NULL, NULL);
    h5fpt_before(&c);
    herr_t r = H5VLattr_read(o->under_object, o->under_vol_id, mem_type_id, buf, dxpl_id, req);
    h5fpt_wrap_req(req, o->under_vol_id);
    h5fpt_after(&c, r < 0);
    return r;
}

herr_t h5fpt_attr_write(void *attr, hid_t mem_type_id, const void *buf, hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *o = attr;
    h5fpt_call_t c = CALL(H5FPT_ATTR_WRITE, o, NULL, NULL);
    h5fpt_before(&c);
    herr_t r = H5VLattr_write(o->under_object, o->under_vol_id, mem_type_id, buf, dxpl_id, req);
    h5fpt_wrap_req(req, o->under_vol_id);
    h5fpt_after(&c, r < 0);
    return r;
}

FWD_OBJ_ARGS(h5fpt_attr_get, H5FPT_ATTR_GET, H5VL_attr_get_args_t, H5VLattr_get)
FWD_LOC_ARGS(h5fpt_attr_specific, H5FPT_ATTR_SPECIFIC, H5VL_attr_specific_args_t, H5VLattr_specific)
FWD_OBJ_ARGS(h5fpt_attr_optional, H5FPT_ATTR_OPTIONAL, H5VL_optional_args_t, H5VLattr_optional)
FWD_CLOSE(h5fpt_attr_close, H5FPT_ATTR_CLOSE, H5VLattr_close)

/* --------------------------------------------------------------------------------------- dataset */

void *h5fpt_dataset_create(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t lcpl_id,
                           hid_t type_id, hid_t space_id, hid_t dcpl_id, hid_t dapl_id, hid_t dxpl_id,
                           void **req)
{
    h5fpt_obj_t *o = obj;
    FWD_MAKE(H5FPT_DATASET_CREATE, name, H5I_DATASET,
             H5VLdataset_create(o->under_object, loc, o->under_vol_id, name, lcpl_id, type_id, space_id,
                 dcpl_id, dapl_id, dxpl_id, req));
}

void *h5fpt_dataset_open(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t dapl_id,
                         hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *o = obj;
    FWD_MAKE(H5FPT_DATASET_OPEN, name, H5I_DATASET,
             H5VLdataset_open(o->under_object, loc, o->under_vol_id, name, dapl_id, dxpl_id, req));
}

/* The under objects of a multi-dataset call (into local when it fits) and their one under connector. */
static void **unwrap_dsets(size_t count, void *dset[], void **local, size_t nlocal, hid_t *uvid)
{
    void **u = count <= nlocal ? local : malloc(count * sizeof *u);
    if (!u) {
        H5FPT_ERR("out of memory for %zu datasets", count);
        return NULL;
    }
    *uvid = ((h5fpt_obj_t *)dset[0])->under_vol_id;
    for (size_t i = 0; i < count; i++) {
        const h5fpt_obj_t *o = dset[i];
        if (o->under_vol_id != *uvid) {
            H5FPT_ERR("the datasets of one multi-dataset call are on different connectors below");
            if (u != local)
                free(u);
            return NULL;
        }
        u[i] = o->under_object;
    }
    return u;
}

/* dataset read (write == 0) or write of count datasets in one call below */
static herr_t dataset_rw(int write, size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                         hid_t file_space_id[], hid_t dxpl_id, void *buf[], void **req)
{
    void *local[8];
    hid_t uvid;
    h5fpt_call_t c = CALL(write ? H5FPT_DATASET_WRITE : H5FPT_DATASET_READ, count ? dset[0] : NULL, NULL, NULL);
    c.count = count;
    h5fpt_before(&c);
    void **u = count ? unwrap_dsets(count, dset, local, 8, &uvid) : NULL;
    herr_t r = -1;
    if (u) {
        r = write ? H5VLdataset_write(count, u, uvid, mem_type_id, mem_space_id, file_space_id, dxpl_id,
                                      (const void **)buf, req)
                  : H5VLdataset_read(count, u, uvid, mem_type_id, mem_space_id, file_space_id, dxpl_id, buf, req);
        h5fpt_wrap_req(req, uvid);
        if (u != local)
            free(u);
    }
    h5fpt_after(&c, r < 0);
    return r;
}

herr_t h5fpt_dataset_read(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                          hid_t file_space_id[], hid_t dxpl_id, void *buf[], void **req)
{
    return dataset_rw(0, count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id, buf, req);
}

herr_t h5fpt_dataset_write(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                           hid_t file_space_id[], hid_t dxpl_id, const void *buf[], void **req)
{
    /* the buffers are only read: the one helper takes them as the read path does */
    return dataset_rw(1, count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id, (void **)buf, req);
}

FWD_OBJ_ARGS(h5fpt_dataset_get, H5FPT_DATASET_GET, H5VL_dataset_get_args_t, H5VLdataset_get)
FWD_OBJ_ARGS(h5fpt_dataset_specific, H5FPT_DATASET_SPECIFIC, H5VL_dataset_specific_args_t, H5VLdataset_specific)
FWD_OBJ_ARGS(h5fpt_dataset_optional, H5FPT_DATASET_OPTIONAL, H5VL_optional_args_t, H5VLdataset_optional)
FWD_CLOSE(h5fpt_dataset_close, H5FPT_DATASET_CLOSE, H5VLdataset_close)

/* -------------------------------------------------------------------------------------- datatype */

void *h5fpt_datatype_commit(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t type_id,
                            hid_t lcpl_id, hid_t tcpl_id, hid_t tapl_id, hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *o = obj;
    FWD_MAKE(H5FPT_DATATYPE_COMMIT, name, H5I_DATATYPE,
             H5VLdatatype_commit(o->under_object, loc, o->under_vol_id, name, type_id, lcpl_id, tcpl_id,
                 tapl_id, dxpl_id, req));
}

void *h5fpt_datatype_open(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t tapl_id,
                          hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *o = obj;
    FWD_MAKE(H5FPT_DATATYPE_OPEN, name, H5I_DATATYPE,
             H5VLdatatype_open(o->under_object, loc, o->under_vol_id, name, tapl_id, dxpl_id, req));
}

FWD_OBJ_ARGS(h5fpt_datatype_get, H5FPT_DATATYPE_GET, H5VL_datatype_get_args_t, H5VLdatatype_get)
FWD_OBJ_ARGS(h5fpt_datatype_specific, H5FPT_DATATYPE_SPECIFIC, H5VL_datatype_specific_args_t,
             H5VLdatatype_specific)
FWD_OBJ_ARGS(h5fpt_datatype_optional, H5FPT_DATATYPE_OPTIONAL, H5VL_optional_args_t, H5VLdatatype_optional)
FWD_CLOSE(h5fpt_datatype_close, H5FPT_DATATYPE_CLOSE, H5VLdatatype_close)

/* ------------------------------------------------------------------------------------------ file */

/* create != 0: H5VLfile_create, else H5VLfile_open; the FAPL below carries the under connector. */
static void *file_open_or_create(int create, const char *name, unsigned flags, hid_t fcpl_id, hid_t fapl_id,
                                 hid_t dxpl_id, void **req)
{
    h5fpt_call_t c = CALL(create ? H5FPT_FILE_CREATE : H5FPT_FILE_OPEN, NULL, NULL, name);
    h5fpt_before(&c);
    h5fpt_obj_t *o = NULL;
    h5fpt_info_t *info = h5fpt_info_from_fapl(fapl_id);
    if (info) {
        hid_t under_fapl = h5fpt_under_fapl(fapl_id, info);
        if (under_fapl >= 0) {
            void *u = create ? H5VLfile_create(name, flags, fcpl_id, under_fapl, dxpl_id, req)
                             : H5VLfile_open(name, flags, under_fapl, dxpl_id, req);
            h5fpt_wrap_req(req, info->under_vol_id);
            o = h5fpt_obj_wrap_or_close(u, info->under_vol_id, H5I_FILE, NULL, info, dxpl_id);
            H5Pclose(under_fapl);
        }
        h5fpt_info_free(info);
    }
    c.obj = o;
    h5fpt_after(&c, o == NULL);
    return o;
}

void *h5fpt_file_create(const char *name, unsigned flags, hid_t fcpl_id, hid_t fapl_id, hid_t dxpl_id,
                        void **req)
{
    return file_open_or_create(1, name, flags, fcpl_id, fapl_id, dxpl_id, req);
}

void *h5fpt_file_open(const char *name, unsigned flags, hid_t fapl_id, hid_t dxpl_id, void **req)
{
    return file_open_or_create(0, name, flags, H5P_DEFAULT, fapl_id, dxpl_id, req);
}

FWD_OBJ_ARGS(h5fpt_file_get, H5FPT_FILE_GET, H5VL_file_get_args_t, H5VLfile_get)

/* The checks that take a FAPL instead of an object (is_accessible, delete): run below with the FAPL
 * of the under connector. */
static herr_t file_specific_by_fapl(H5VL_file_specific_args_t *args, hid_t dxpl_id, void **req)
{
    hid_t *fapl = args->op_type == H5VL_FILE_IS_ACCESSIBLE ? &args->args.is_accessible.fapl_id
                                                             : &args->args.del.fapl_id;
    if (args->op_type == H5VL_FILE_IS_ACCESSIBLE) {
        /* No info of ours on the list: HDF5 is asking every plugin on HDF5_PLUGIN_PATH after a native open
         * failed (H5VL_file_open's search, which sets each connector with no info). A stacking connector
         * owns no file format: "not mine", without touching the caller's error stack, so that the native
         * error (h5py's FileNotFoundError, 'a' creating a missing file) reaches the program unchanged. */
        void *given = NULL;
        hid_t saved = H5Eget_current_stack();
        herr_t got = H5Pget_vol_info(*fapl, &given);
        if (saved >= 0 && H5Eset_current_stack(saved) < 0)
            H5Eclose_stack(saved);
        if (got >= 0 && !given) {
            *args->args.is_accessible.accessible = false;
            return 0;
        }
        if (given)
            h5fpt_info_free(given);
    }
    h5fpt_info_t *info = h5fpt_info_from_fapl(*fapl);
    if (!info)
        return -1;
    herr_t r = -1;
    H5VL_file_specific_args_t mine = *args;
    hid_t *my_fapl = args->op_type == H5VL_FILE_IS_ACCESSIBLE ? &mine.args.is_accessible.fapl_id
                                                                : &mine.args.del.fapl_id;
    *my_fapl = h5fpt_under_fapl(*fapl, info);
    if (*my_fapl >= 0) {
        r = H5VLfile_specific(NULL, info->under_vol_id, &mine, dxpl_id, req);
        h5fpt_wrap_req(req, info->under_vol_id);
        H5Pclose(*my_fapl);
    }
    h5fpt_info_free(info);
    return r;
}

herr_t h5fpt_file_specific(void *obj, H5VL_file_specific_args_t *args, hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *o = obj;
    h5fpt_call_t c = CALL(H5FPT_FILE_SPECIFIC, o, args, NULL);
    h5fpt_before(&c);
    herr_t r;
    if (args->op_type == H5VL_FILE_IS_ACCESSIBLE || args->op_type == H5VL_FILE_DELETE)
        r = file_specific_by_fapl(args, dxpl_id, req);
    else {
        hid_t uvid = o->under_vol_id;
        r = H5VLfile_specific(o->under_object, uvid, args, dxpl_id, req);
        h5fpt_wrap_req(req, uvid);
        if (r >= 0 && args->op_type == H5VL_FILE_REOPEN && *args->args.reopen.file) {
            *args->args.reopen.file =
                h5fpt_obj_wrap_or_close(*args->args.reopen.file, uvid, H5I_FILE, o, NULL, dxpl_id);
            if (!*args->args.reopen.file)
                r = -1;
        }
    }
    h5fpt_after(&c, r < 0);
    return r;
}

FWD_OBJ_ARGS(h5fpt_file_optional, H5FPT_FILE_OPTIONAL, H5VL_optional_args_t, H5VLfile_optional)
FWD_CLOSE(h5fpt_file_close, H5FPT_FILE_CLOSE, H5VLfile_close)

/* ----------------------------------------------------------------------------------------- group */

void *h5fpt_group_create(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t lcpl_id,
                         hid_t gcpl_id, hid_t gapl_id, hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *o = obj;
    FWD_MAKE(H5FPT_GROUP_CREATE, name, H5I_GROUP,
             H5VLgroup_create(o->under_object, loc, o->under_vol_id, name, lcpl_id, gcpl_id, gapl_id, dxpl_id,
                 req));
}

void *h5fpt_group_open(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t gapl_id,
                       hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *o = obj;
    FWD_MAKE(H5FPT_GROUP_OPEN, name, H5I_GROUP,
             H5VLgroup_open(o->under_object, loc, o->under_vol_id, name, gapl_id, dxpl_id, req));
}

FWD_OBJ_ARGS(h5fpt_group_get, H5FPT_GROUP_GET, H5VL_group_get_args_t, H5VLgroup_get)

herr_t h5fpt_group_specific(void *obj, H5VL_group_specific_args_t *args, hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *o = obj;
    hid_t uvid = o->under_vol_id; /* a refresh may replace what o points to */
    h5fpt_call_t c = CALL(H5FPT_GROUP_SPECIFIC, o, args, NULL);
    h5fpt_before(&c);
    H5VL_group_specific_args_t mine = *args;
    if (args->op_type == H5VL_GROUP_MOUNT) /* the child file arrives wrapped by us */
        mine.args.mount.child_file = under_of(args->args.mount.child_file);
    herr_t r = H5VLgroup_specific(o->under_object, uvid, &mine, dxpl_id, req);
    h5fpt_wrap_req(req, uvid);
    h5fpt_after(&c, r < 0);
    return r;
}

FWD_OBJ_ARGS(h5fpt_group_optional, H5FPT_GROUP_OPTIONAL, H5VL_optional_args_t, H5VLgroup_optional)
FWD_CLOSE(h5fpt_group_close, H5FPT_GROUP_CLOSE, H5VLgroup_close)

/* ------------------------------------------------------------------------------------------ link */

herr_t h5fpt_link_create(H5VL_link_create_args_t *args, void *obj, const H5VL_loc_params_t *loc,
                         hid_t lcpl_id, hid_t lapl_id, hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *o = obj;
    h5fpt_call_t c = CALL(H5FPT_LINK_CREATE, o, args, NULL);
    h5fpt_before(&c);
    H5VL_link_create_args_t mine = *args;
    hid_t uvid = o ? o->under_vol_id : H5I_INVALID_HID;
    if (args->op_type == H5VL_LINK_CREATE_HARD && args->args.hard.curr_obj) {
        const h5fpt_obj_t *target = args->args.hard.curr_obj;
        if (uvid < 0)
            uvid = target->under_vol_id;
        mine.args.hard.curr_obj = target->under_object;
    }
    herr_t r = -1;
    if (uvid < 0)
        H5FPT_ERR("link create without a location object");
    else {
        r = H5VLlink_create(&mine, under_of(o), loc, uvid, lcpl_id, lapl_id, dxpl_id, req);
        h5fpt_wrap_req(req, uvid);
    }
    h5fpt_after(&c, r < 0);
    return r;
}

/* link copy (move == 0) or move: either location may be absent (H5L_SAME_LOC) */
static herr_t link_copy_or_move(int move, void *src, const H5VL_loc_params_t *loc1, void *dst,
                                const H5VL_loc_params_t *loc2, hid_t lcpl_id, hid_t lapl_id, hid_t dxpl_id,
                                void **req)
{
    h5fpt_obj_t *s = src, *d = dst;
    h5fpt_call_t c = CALL(move ? H5FPT_LINK_MOVE : H5FPT_LINK_COPY, s ? s : d, NULL, NULL);
    h5fpt_before(&c);
    hid_t uvid = s ? s->under_vol_id : d ? d->under_vol_id : H5I_INVALID_HID;
    herr_t r = -1;
    if (uvid < 0)
        H5FPT_ERR("link %s without a location object", move ? "move" : "copy");
    else {
        r = (move ? H5VLlink_move : H5VLlink_copy)(under_of(s), loc1, under_of(d), loc2, uvid, lcpl_id, lapl_id,
                                                   dxpl_id, req);
        h5fpt_wrap_req(req, uvid);
    }
    h5fpt_after(&c, r < 0);
    return r;
}

herr_t h5fpt_link_copy(void *src, const H5VL_loc_params_t *loc1, void *dst, const H5VL_loc_params_t *loc2,
                       hid_t lcpl_id, hid_t lapl_id, hid_t dxpl_id, void **req)
{
    return link_copy_or_move(0, src, loc1, dst, loc2, lcpl_id, lapl_id, dxpl_id, req);
}

herr_t h5fpt_link_move(void *src, const H5VL_loc_params_t *loc1, void *dst, const H5VL_loc_params_t *loc2,
                       hid_t lcpl_id, hid_t lapl_id, hid_t dxpl_id, void **req)
{
    return link_copy_or_move(1, src, loc1, dst, loc2, lcpl_id, lapl_id, dxpl_id, req);
}

FWD_LOC_ARGS(h5fpt_link_get, H5FPT_LINK_GET, H5VL_link_get_args_t, H5VLlink_get)
FWD_LOC_ARGS(h5fpt_link_specific, H5FPT_LINK_SPECIFIC, H5VL_link_specific_args_t, H5VLlink_specific)
FWD_LOC_ARGS(h5fpt_link_optional, H5FPT_LINK_OPTIONAL, H5VL_optional_args_t, H5VLlink_optional)

/* ---------------------------------------------------------------------------------------- object */

void *h5fpt_object_open(void *obj, const H5VL_loc_params_t *loc, H5I_type_t *opened_type, hid_t dxpl_id,
                        void **req)
{
    h5fpt_obj_t *o = obj;
    FWD_MAKE(H5FPT_OBJECT_OPEN, NULL, u ? *opened_type : H5I_BADID,
             H5VLobject_open(o->under_object, loc, o->under_vol_id, opened_type, dxpl_id, req));
}

herr_t h5fpt_object_copy(void *src, const H5VL_loc_params_t *loc1, const char *src_name, void *dst,
                         const H5VL_loc_params_t *loc2, const char *dst_name, hid_t ocpypl_id, hid_t lcpl_id,
                         hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *s = src, *d = dst;
    h5fpt_call_t c = CALL(H5FPT_OBJECT_COPY, s, NULL, src_name);
    h5fpt_before(&c);
    herr_t r = H5VLobject_copy(s->under_object, loc1, src_name, d->under_object, loc2, dst_name, s->under_vol_id,
                               ocpypl_id, lcpl_id, dxpl_id, req);
    h5fpt_wrap_req(req, s->under_vol_id);
    h5fpt_after(&c, r < 0);
    return r;
}

FWD_LOC_ARGS(h5fpt_object_get, H5FPT_OBJECT_GET, H5VL_object_get_args_t, H5VLobject_get)
FWD_LOC_ARGS(h5fpt_object_specific, H5FPT_OBJECT_SPECIFIC, H5VL_object_specific_args_t, H5VLobject_specific)
FWD_LOC_ARGS(h5fpt_object_optional, H5FPT_OBJECT_OPTIONAL, H5VL_optional_args_t, H5VLobject_optional)

/* ------------------------------------------------------------------------------------ introspect */

herr_t h5fpt_introspect_get_conn_cls(void *obj, H5VL_get_conn_lvl_t lvl, const H5VL_class_t **conn_cls)
{
    h5fpt_obj_t *o = obj;
    h5fpt_call_t c = CALL(H5FPT_INTROSPECT_GET_CONN_CLS, o, NULL, NULL);
    h5fpt_before(&c);
    herr_t r;
    if (lvl == H5VL_GET_CONN_LVL_CURR) {
        *conn_cls = h5fpt_class();
        r = 0;
    }
    else if (!o) {
        H5FPT_ERR("the terminal connector asked of no object");
        r = -1;
    }
    else
        r = H5VLintrospect_get_conn_cls(o->under_object, o->under_vol_id, lvl, conn_cls);
    h5fpt_after(&c, r < 0);
    return r;
}

herr_t h5fpt_introspect_get_cap_flags(const void *info_, uint64_t *cap_flags)
{
    h5fpt_call_t c = CALL(H5FPT_INTROSPECT_GET_CAP_FLAGS, NULL, NULL, NULL);
    h5fpt_before(&c);
    const h5fpt_info_t *info = info_;
    h5fpt_info_t *fallback = info ? NULL : h5fpt_info_default(); /* no info: native underneath */
    if (!info)
        info = fallback;
    herr_t r = -1;
    if (info) {
        r = H5VLintrospect_get_cap_flags(info->under_vol_info, info->under_vol_id, cap_flags);
        if (r >= 0)
            *cap_flags |= h5fpt_g_desc->cap_flags;
    }
    h5fpt_info_free(fallback);
    h5fpt_after(&c, r < 0);
    return r;
}

herr_t h5fpt_introspect_opt_query(void *obj, H5VL_subclass_t cls, int opt_type, uint64_t *flags)
{
    h5fpt_obj_t *o = obj;
    FWD_SIMPLE(H5FPT_INTROSPECT_OPT_QUERY, o, NULL,
               H5VLintrospect_opt_query(o->under_object, o->under_vol_id, cls, opt_type, flags));
}

/* --------------------------------------------------------------------------------------- request */

herr_t h5fpt_request_wait(void *req, uint64_t timeout, H5VL_request_status_t *status)
{
    h5fpt_obj_t *o = req;
    FWD_SIMPLE(H5FPT_REQUEST_WAIT, o, NULL, H5VLrequest_wait(o->under_object, o->under_vol_id, timeout, status));
}

herr_t h5fpt_request_notify(void *req, H5VL_request_notify_t cb, void *ctx)
{
    h5fpt_obj_t *o = req;
    FWD_SIMPLE(H5FPT_REQUEST_NOTIFY, o, NULL, H5VLrequest_notify(o->under_object, o->under_vol_id, cb, ctx));
}

herr_t h5fpt_request_cancel(void *req, H5VL_request_status_t *status)
{
    h5fpt_obj_t *o = req;
    FWD_SIMPLE(H5FPT_REQUEST_CANCEL, o, NULL, H5VLrequest_cancel(o->under_object, o->under_vol_id, status));
}

herr_t h5fpt_request_specific(void *req, H5VL_request_specific_args_t *args)
{
    h5fpt_obj_t *o = req;
    FWD_SIMPLE(H5FPT_REQUEST_SPECIFIC, o, args, H5VLrequest_specific(o->under_object, o->under_vol_id, args));
}

herr_t h5fpt_request_optional(void *req, H5VL_optional_args_t *args)
{
    h5fpt_obj_t *o = req;
    FWD_SIMPLE(H5FPT_REQUEST_OPTIONAL, o, args, H5VLrequest_optional(o->under_object, o->under_vol_id, args));
}

herr_t h5fpt_request_free(void *req)
{
    h5fpt_obj_t *o = req;
    h5fpt_call_t c = CALL(H5FPT_REQUEST_FREE, o, NULL, NULL);
    h5fpt_before(&c);
    herr_t r = H5VLrequest_free(o->under_object, o->under_vol_id);
    h5fpt_after(&c, r < 0);
    if (r >= 0)
        h5fpt_obj_release(o);
    return r;
}

/* ------------------------------------------------------------------------------------------ blob */

herr_t h5fpt_blob_put(void *obj, const void *buf, size_t size, void *blob_id, void *ctx)
{
    h5fpt_obj_t *o = obj;
    h5fpt_call_t c = CALL(H5FPT_BLOB_PUT, o, NULL, NULL);
    c.count = size;
    h5fpt_before(&c);
    herr_t r = H5VLblob_put(o->under_object, o->under_vol_id, buf, size, blob_id, ctx);
    h5fpt_after(&c, r < 0);
    return r;
}

herr_t h5fpt_blob_get(void *obj, const void *blob_id, void *buf, size_t size, void *ctx)
{
    h5fpt_obj_t *o = obj;
    h5fpt_call_t c = CALL(H5FPT_BLOB_GET, o, NULL, NULL);
    c.count = size;
    h5fpt_before(&c);
    herr_t r = H5VLblob_get(o->under_object, o->under_vol_id, blob_id, buf, size, ctx);
    h5fpt_after(&c, r < 0);
    return r;
}

herr_t h5fpt_blob_specific(void *obj, void *blob_id, H5VL_blob_specific_args_t *args)
{
    h5fpt_obj_t *o = obj;
    FWD_SIMPLE(H5FPT_BLOB_SPECIFIC, o, args, H5VLblob_specific(o->under_object, o->under_vol_id, blob_id, args));
}

herr_t h5fpt_blob_optional(void *obj, void *blob_id, H5VL_optional_args_t *args)
{
    h5fpt_obj_t *o = obj;
    FWD_SIMPLE(H5FPT_BLOB_OPTIONAL, o, args, H5VLblob_optional(o->under_object, o->under_vol_id, blob_id, args));
}

/* ----------------------------------------------------------------------------------------- token */

herr_t h5fpt_token_cmp(void *obj, const H5O_token_t *t1, const H5O_token_t *t2, int *cmp_value)
{
    h5fpt_obj_t *o = obj;
    FWD_SIMPLE(H5FPT_TOKEN_CMP, o, NULL, H5VLtoken_cmp(o->under_object, o->under_vol_id, t1, t2, cmp_value));
}

herr_t h5fpt_token_to_str(void *obj, H5I_type_t obj_type, const H5O_token_t *token, char **str)
{
    h5fpt_obj_t *o = obj;
    FWD_SIMPLE(H5FPT_TOKEN_TO_STR, o, NULL, H5VLtoken_to_str(o->under_object, obj_type, o->under_vol_id, token, str));
}

herr_t h5fpt_token_from_str(void *obj, H5I_type_t obj_type, const char *str, H5O_token_t *token)
{
    h5fpt_obj_t *o = obj;
    h5fpt_call_t c = CALL(H5FPT_TOKEN_FROM_STR, o, NULL, str);
    h5fpt_before(&c);
    herr_t r = H5VLtoken_from_str(o->under_object, obj_type, o->under_vol_id, str, token);
    h5fpt_after(&c, r < 0);
    return r;
}

/* -------------------------------------------------------------------------------------- optional */

FWD_OBJ_ARGS(h5fpt_optional, H5FPT_OPTIONAL, H5VL_optional_args_t, H5VLoptional)
