/* h5flow pass-through core: what every stacking h5flow VOL connector shares.
 *
 * Not a connector itself. A connector (h5flow_async, h5flow_cache, h5flow_trace) links this static
 * library, describes itself in an h5fpt_desc_t, builds its class with h5fpt_class_init() and then
 * replaces only the callbacks it needs; every other callback of HDF5 1.14.5's H5VL_class_t forwards
 * to the connector below unchanged. The forwarding implementations are exported (h5fpt_<class>_<op>)
 * so that an overriding callback can still call the plain forwarding path.
 *
 * Info string (HDF5_VOL_CONNECTOR="<name> <info>", or H5Pset_vol with a parsed info):
 *     key=value;key=value;under_vol=<value or name>;under_info={<the under connector's info string>}
 * The keys other than under_vol/under_info are the connector's own options, handed one by one to
 * desc->opts_set. Without under_vol the connector stacks on native; an empty or absent info string
 * means native underneath and default options.
 *
 * One class per module: h5fpt_class_init() records the descriptor and the class once, before HDF5
 * can call anything; they are read-only afterwards. All other state lives in objects and infos.
 */
#ifndef H5FPT_H
#define H5FPT_H

#include <hdf5.h>
#include <H5VLconnector.h>
#include <H5VLconnector_passthru.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The wrapper every object, file and request of a stacking connector is. A wrapper whose under_vol_id
 * is H5I_INVALID_HID is the connector's own request (made by it, not by the connector below): the
 * core's wrap callbacks give it no wrap context; the connector's request callbacks handle it. */
typedef struct h5fpt_obj {
    uint32_t magic;      /* H5FPT_OBJ_MAGIC: tells a wrapper from another kind of object sharing a class (the
                            first 4 bytes of an h5flow_log object are its H5I_type_t, never this value) */
    hid_t under_vol_id;  /* the connector below (a reference held by this wrapper) */
    void *under_object;  /* its object */
    H5I_type_t type;     /* H5I_FILE, H5I_GROUP, H5I_DATASET, H5I_DATATYPE, H5I_ATTR; H5I_BADID for requests */
    void *ext;           /* the connector's own state for this object (desc->obj_init / obj_fini) */
    atomic_uint refs;    /* 1 for the handle HDF5 holds, +1 per wrap context that refers to it */
} h5fpt_obj_t;

#define H5FPT_OBJ_MAGIC 0x54504648u /* "HFPT" */

/* Whether p (an object handed to a callback, at least 4 bytes) is a wrapper made by this core. */
static inline int h5fpt_is_obj(const void *p)
{
    return p && *(const uint32_t *)p == H5FPT_OBJ_MAGIC;
}

/* The connector's info: where it stacks and its own options. */
typedef struct h5fpt_info {
    hid_t under_vol_id;   /* a reference held by this info */
    void *under_vol_info; /* the under connector's info (its own copy/free) or NULL */
    void *opts;           /* desc->opts_size bytes of plain data (no pointers), or NULL when opts_size is 0 */
    /* Why the info string was refused, or "". A refused string still gives an info (HDF5 would
     * otherwise fall back to native when HDF5_VOL_CONNECTOR holds it): every file create, open or
     * check with it fails with this message. */
    char refused[512];
} h5fpt_info_t;

/* Every callback the core forwards, for the observer. */
typedef enum h5fpt_op {
    H5FPT_ATTR_CREATE, H5FPT_ATTR_OPEN, H5FPT_ATTR_READ, H5FPT_ATTR_WRITE, H5FPT_ATTR_GET,
    H5FPT_ATTR_SPECIFIC, H5FPT_ATTR_OPTIONAL, H5FPT_ATTR_CLOSE,
    H5FPT_DATASET_CREATE, H5FPT_DATASET_OPEN, H5FPT_DATASET_READ, H5FPT_DATASET_WRITE, H5FPT_DATASET_GET,
    H5FPT_DATASET_SPECIFIC, H5FPT_DATASET_OPTIONAL, H5FPT_DATASET_CLOSE,
    H5FPT_DATATYPE_COMMIT, H5FPT_DATATYPE_OPEN, H5FPT_DATATYPE_GET, H5FPT_DATATYPE_SPECIFIC,
    H5FPT_DATATYPE_OPTIONAL, H5FPT_DATATYPE_CLOSE,
    H5FPT_FILE_CREATE, H5FPT_FILE_OPEN, H5FPT_FILE_GET, H5FPT_FILE_SPECIFIC, H5FPT_FILE_OPTIONAL,
    H5FPT_FILE_CLOSE,
    H5FPT_GROUP_CREATE, H5FPT_GROUP_OPEN, H5FPT_GROUP_GET, H5FPT_GROUP_SPECIFIC, H5FPT_GROUP_OPTIONAL,
    H5FPT_GROUP_CLOSE,
    H5FPT_LINK_CREATE, H5FPT_LINK_COPY, H5FPT_LINK_MOVE, H5FPT_LINK_GET, H5FPT_LINK_SPECIFIC,
    H5FPT_LINK_OPTIONAL,
    H5FPT_OBJECT_OPEN, H5FPT_OBJECT_COPY, H5FPT_OBJECT_GET, H5FPT_OBJECT_SPECIFIC, H5FPT_OBJECT_OPTIONAL,
    H5FPT_INTROSPECT_GET_CONN_CLS, H5FPT_INTROSPECT_GET_CAP_FLAGS, H5FPT_INTROSPECT_OPT_QUERY,
    H5FPT_REQUEST_WAIT, H5FPT_REQUEST_NOTIFY, H5FPT_REQUEST_CANCEL, H5FPT_REQUEST_SPECIFIC,
    H5FPT_REQUEST_OPTIONAL, H5FPT_REQUEST_FREE,
    H5FPT_BLOB_PUT, H5FPT_BLOB_GET, H5FPT_BLOB_SPECIFIC, H5FPT_BLOB_OPTIONAL,
    H5FPT_TOKEN_CMP, H5FPT_TOKEN_TO_STR, H5FPT_TOKEN_FROM_STR,
    H5FPT_OPTIONAL,
    H5FPT_OP_COUNT
} h5fpt_op_t;

/* "dataset_write", ... (NULL for an out-of-range value). */
const char *h5fpt_op_name(h5fpt_op_t op);

/* One forwarded call, as the observer sees it: once with after == 0 just before the call goes down,
 * once with after == 1 just after it returned (same struct, so `scratch` carries state across). */
typedef struct h5fpt_call {
    h5fpt_op_t op;
    int after;
    const h5fpt_obj_t *obj;  /* the wrapper the call is on; NULL for file create/open (before), for the
                                file checks that take no object, and for introspection without one */
    const void *args;        /* the callback's args struct (H5VL_*_args_t, H5VL_optional_args_t) or NULL */
    const char *name;        /* the name argument (file, dataset, group, attribute ...) or NULL */
    size_t count;            /* dataset read/write: number of datasets; blob put/get: bytes; else 0 */
    int failed;              /* after: nonzero when the call below failed */
    uint64_t scratch;        /* the observer's own, zero before the first call */
} h5fpt_call_t;

typedef struct h5fpt_desc {
    const char *name;            /* registered name (plugin lookup matches on it) */
    H5VL_class_value_t value;    /* registered value */
    unsigned conn_version;
    uint64_t cap_flags;          /* the connector's own flags; the under connector's are OR-ed in */

    /* Options. opts_size == 0: the connector takes none (any key other than under_* is an error). */
    size_t opts_size;
    void (*opts_default)(void *opts);
    /* One key=value of the info string: 0 when taken, -1 with a message in err when refused. */
    int (*opts_set)(void *opts, const char *key, const char *value, char *err, size_t errlen);
    /* The options as "k=v;k=v" (no trailing ';'), into buf of len bytes: length written, -1 if too small. */
    int (*opts_to_str)(const void *opts, char *buf, size_t len);

    /* A wrapper was made for an under object. parent: the object the call was made on (or the object
     * a wrap context came from); NULL for file create/open and reopen, where info is the file's info
     * (never NULL; default options when the FAPL carries none). Return <0 to refuse (the under object
     * is then closed by the core). */
    herr_t (*obj_init)(h5fpt_obj_t *obj, const h5fpt_obj_t *parent, const h5fpt_info_t *info);
    /* The wrapper goes away (after its under object was closed, or when it was unwrapped). */
    void (*obj_fini)(h5fpt_obj_t *obj);

    /* Called before and after every forwarded callback (see h5fpt_call_t); NULL: none. */
    void (*observe)(h5fpt_call_t *call);

    /* Library start/stop, after the core's own (which registers the error class). May be NULL. */
    herr_t (*initialize)(hid_t vipl_id);
    herr_t (*terminate)(void);
} h5fpt_desc_t;

/* Fill *cls with the forwarding class of desc (name, value, flags from desc). Call once, before the
 * class is handed to HDF5 (H5PLget_plugin_info); override callbacks in *cls afterwards. */
herr_t h5fpt_class_init(H5VL_class_t *cls, const h5fpt_desc_t *desc);

/* The descriptor and class recorded by h5fpt_class_init. */
const h5fpt_desc_t *h5fpt_desc(void);
const H5VL_class_t *h5fpt_class(void);

/* --- objects ----------------------------------------------------------------------------------- */
/* A wrapper for under (with a reference to under_vol_id), obj_init called; NULL on failure, in which
 * case the under object is NOT closed (the caller decides). */
h5fpt_obj_t *h5fpt_obj_new(void *under, hid_t under_vol_id, H5I_type_t type, const h5fpt_obj_t *parent,
                           const h5fpt_info_t *info);
/* Like h5fpt_obj_new, but on failure closes the under object of the given type. */
h5fpt_obj_t *h5fpt_obj_wrap_or_close(void *under, hid_t under_vol_id, H5I_type_t type,
                                     const h5fpt_obj_t *parent, const h5fpt_info_t *info, hid_t dxpl_id);
void h5fpt_obj_retain(h5fpt_obj_t *obj);
/* Drop one reference; the last one calls obj_fini, releases under_vol_id and frees the wrapper. */
void h5fpt_obj_release(h5fpt_obj_t *obj);
/* A request of the under connector wrapped (no obj_init: requests carry no extension). */
void *h5fpt_request_wrap(void *under_req, hid_t under_vol_id);
/* Wrap *req in place when the call below produced one. */
void h5fpt_wrap_req(void **req, hid_t under_vol_id);

/* --- info -------------------------------------------------------------------------------------- */
/* The connector info on fapl (a copy: free with h5fpt_info_free), or default info (native
 * underneath, default options) when the FAPL carries none. NULL on failure or when the info string
 * was refused (error pushed, naming the setting). */
h5fpt_info_t *h5fpt_info_from_fapl(hid_t fapl_id);
/* A copy of fapl with the under connector of info set on it (H5Pclose it). */
hid_t h5fpt_under_fapl(hid_t fapl_id, const h5fpt_info_t *info);
h5fpt_info_t *h5fpt_info_default(void);
void *h5fpt_info_copy(const void *info);
herr_t h5fpt_info_cmp(int *cmp, const void *a, const void *b);
herr_t h5fpt_info_free(void *info);
herr_t h5fpt_info_to_str(const void *info, char **str);
herr_t h5fpt_info_from_str(const char *str, void **info);

/* --- errors ------------------------------------------------------------------------------------ */
/* Push "name: message" on HDF5's error stack under the connector's own error class. */
void h5fpt_error(const char *file, const char *func, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define H5FPT_ERR(...) h5fpt_error(__FILE__, __func__, __LINE__, __VA_ARGS__)
/* The same on the error stack `stack` (an event-set request's stack, for H5ESget_err_info). */
void h5fpt_error_on(hid_t stack, const char *file, const char *func, unsigned line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* --- the forwarding callbacks (every slot of H5VL_class_t) ------------------------------------- */
void *h5fpt_attr_create(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t type_id,
                        hid_t space_id, hid_t acpl_id, hid_t aapl_id, hid_t dxpl_id, void **req);
void *h5fpt_attr_open(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t aapl_id, hid_t dxpl_id,
                      void **req);
herr_t h5fpt_attr_read(void *attr, hid_t mem_type_id, void *buf, hid_t dxpl_id, void **req);
herr_t h5fpt_attr_write(void *attr, hid_t mem_type_id, const void *buf, hid_t dxpl_id, void **req);
herr_t h5fpt_attr_get(void *obj, H5VL_attr_get_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_attr_specific(void *obj, const H5VL_loc_params_t *loc, H5VL_attr_specific_args_t *args,
                           hid_t dxpl_id, void **req);
herr_t h5fpt_attr_optional(void *obj, H5VL_optional_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_attr_close(void *attr, hid_t dxpl_id, void **req);

void *h5fpt_dataset_create(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t lcpl_id,
                           hid_t type_id, hid_t space_id, hid_t dcpl_id, hid_t dapl_id, hid_t dxpl_id,
                           void **req);
void *h5fpt_dataset_open(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t dapl_id,
                         hid_t dxpl_id, void **req);
herr_t h5fpt_dataset_read(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                          hid_t file_space_id[], hid_t dxpl_id, void *buf[], void **req);
herr_t h5fpt_dataset_write(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                           hid_t file_space_id[], hid_t dxpl_id, const void *buf[], void **req);
herr_t h5fpt_dataset_get(void *obj, H5VL_dataset_get_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_dataset_specific(void *obj, H5VL_dataset_specific_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_dataset_optional(void *obj, H5VL_optional_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_dataset_close(void *dset, hid_t dxpl_id, void **req);

void *h5fpt_datatype_commit(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t type_id,
                            hid_t lcpl_id, hid_t tcpl_id, hid_t tapl_id, hid_t dxpl_id, void **req);
void *h5fpt_datatype_open(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t tapl_id,
                          hid_t dxpl_id, void **req);
herr_t h5fpt_datatype_get(void *obj, H5VL_datatype_get_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_datatype_specific(void *obj, H5VL_datatype_specific_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_datatype_optional(void *obj, H5VL_optional_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_datatype_close(void *dt, hid_t dxpl_id, void **req);

void *h5fpt_file_create(const char *name, unsigned flags, hid_t fcpl_id, hid_t fapl_id, hid_t dxpl_id,
                        void **req);
void *h5fpt_file_open(const char *name, unsigned flags, hid_t fapl_id, hid_t dxpl_id, void **req);
herr_t h5fpt_file_get(void *obj, H5VL_file_get_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_file_specific(void *obj, H5VL_file_specific_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_file_optional(void *obj, H5VL_optional_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_file_close(void *file, hid_t dxpl_id, void **req);

void *h5fpt_group_create(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t lcpl_id,
                         hid_t gcpl_id, hid_t gapl_id, hid_t dxpl_id, void **req);
void *h5fpt_group_open(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t gapl_id,
                       hid_t dxpl_id, void **req);
herr_t h5fpt_group_get(void *obj, H5VL_group_get_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_group_specific(void *obj, H5VL_group_specific_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_group_optional(void *obj, H5VL_optional_args_t *args, hid_t dxpl_id, void **req);
herr_t h5fpt_group_close(void *grp, hid_t dxpl_id, void **req);

herr_t h5fpt_link_create(H5VL_link_create_args_t *args, void *obj, const H5VL_loc_params_t *loc,
                         hid_t lcpl_id, hid_t lapl_id, hid_t dxpl_id, void **req);
herr_t h5fpt_link_copy(void *src, const H5VL_loc_params_t *loc1, void *dst, const H5VL_loc_params_t *loc2,
                       hid_t lcpl_id, hid_t lapl_id, hid_t dxpl_id, void **req);
herr_t h5fpt_link_move(void *src, const H5VL_loc_params_t *loc1, void *dst, const H5VL_loc_params_t *loc2,
                       hid_t lcpl_id, hid_t lapl_id, hid_t dxpl_id, void **req);
herr_t h5fpt_link_get(void *obj, const H5VL_loc_params_t *loc, H5VL_link_get_args_t *args, hid_t dxpl_id,
                      void **req);
herr_t h5fpt_link_specific(void *obj, const H5VL_loc_params_t *loc, H5VL_link_specific_args_t *args,
                           hid_t dxpl_id, void **req);
herr_t h5fpt_link_optional(void *obj, const H5VL_loc_params_t *loc, H5VL_optional_args_t *args,
                           hid_t dxpl_id, void **req);

void *h5fpt_object_open(void *obj, const H5VL_loc_params_t *loc, H5I_type_t *opened_type, hid_t dxpl_id,
                        void **req);
herr_t h5fpt_object_copy(void *src, const H5VL_loc_params_t *loc1, const char *src_name, void *dst,
                         const H5VL_loc_params_t *loc2, const char *dst_name, hid_t ocpypl_id, hid_t lcpl_id,
                         hid_t dxpl_id, void **req);
herr_t h5fpt_object_get(void *obj, const H5VL_loc_params_t *loc, H5VL_object_get_args_t *args, hid_t dxpl_id,
                        void **req);
herr_t h5fpt_object_specific(void *obj, const H5VL_loc_params_t *loc, H5VL_object_specific_args_t *args,
                             hid_t dxpl_id, void **req);
herr_t h5fpt_object_optional(void *obj, const H5VL_loc_params_t *loc, H5VL_optional_args_t *args,
                             hid_t dxpl_id, void **req);

herr_t h5fpt_introspect_get_conn_cls(void *obj, H5VL_get_conn_lvl_t lvl, const H5VL_class_t **conn_cls);
herr_t h5fpt_introspect_get_cap_flags(const void *info, uint64_t *cap_flags);
herr_t h5fpt_introspect_opt_query(void *obj, H5VL_subclass_t cls, int opt_type, uint64_t *flags);

herr_t h5fpt_request_wait(void *req, uint64_t timeout, H5VL_request_status_t *status);
herr_t h5fpt_request_notify(void *req, H5VL_request_notify_t cb, void *ctx);
herr_t h5fpt_request_cancel(void *req, H5VL_request_status_t *status);
herr_t h5fpt_request_specific(void *req, H5VL_request_specific_args_t *args);
herr_t h5fpt_request_optional(void *req, H5VL_optional_args_t *args);
herr_t h5fpt_request_free(void *req);

herr_t h5fpt_blob_put(void *obj, const void *buf, size_t size, void *blob_id, void *ctx);
herr_t h5fpt_blob_get(void *obj, const void *blob_id, void *buf, size_t size, void *ctx);
herr_t h5fpt_blob_specific(void *obj, void *blob_id, H5VL_blob_specific_args_t *args);
herr_t h5fpt_blob_optional(void *obj, void *blob_id, H5VL_optional_args_t *args);

herr_t h5fpt_token_cmp(void *obj, const H5O_token_t *t1, const H5O_token_t *t2, int *cmp_value);
herr_t h5fpt_token_to_str(void *obj, H5I_type_t obj_type, const H5O_token_t *token, char **str);
herr_t h5fpt_token_from_str(void *obj, H5I_type_t obj_type, const char *str, H5O_token_t *token);

herr_t h5fpt_optional(void *obj, H5VL_optional_args_t *args, hid_t dxpl_id, void **req);

/* wrap class */
void *h5fpt_get_object(const void *obj);
herr_t h5fpt_get_wrap_ctx(const void *obj, void **wrap_ctx);
void *h5fpt_wrap_object(void *obj, H5I_type_t obj_type, void *wrap_ctx);
void *h5fpt_unwrap_object(void *obj);
herr_t h5fpt_free_wrap_ctx(void *wrap_ctx);

#ifdef __cplusplus
}
#endif
#endif
