/* The VOL class, introspection and the plugin entry points. */
#include "dset.h"

#include <H5PLextern.h>

/* What the connector really does; HDF5's API tests skip tests whose flags are missing. */
#define H5FL_CAPS                                                                                          \
    (H5VL_CAP_FLAG_FILE_BASIC | H5VL_CAP_FLAG_GROUP_BASIC | H5VL_CAP_FLAG_DATASET_BASIC |                  \
     H5VL_CAP_FLAG_DATASET_MORE | H5VL_CAP_FLAG_ATTR_BASIC | H5VL_CAP_FLAG_ATTR_MORE |                     \
     H5VL_CAP_FLAG_LINK_BASIC | H5VL_CAP_FLAG_HARD_LINKS | H5VL_CAP_FLAG_SOFT_LINKS | H5VL_CAP_FLAG_EXTERNAL_LINKS | H5VL_CAP_FLAG_LINK_MORE | H5VL_CAP_FLAG_OBJECT_BASIC | H5VL_CAP_FLAG_OBJECT_MORE | H5VL_CAP_FLAG_ITERATE | H5VL_CAP_FLAG_CREATION_ORDER | H5VL_CAP_FLAG_BY_IDX |  \
     H5VL_CAP_FLAG_GET_PLIST | H5VL_CAP_FLAG_FLUSH_REFRESH |                                              \
     H5VL_CAP_FLAG_FILL_VALUES | H5VL_CAP_FLAG_STORED_DATATYPES | H5VL_CAP_FLAG_REF_BASIC |                \
     H5VL_CAP_FLAG_FILTERS | H5VL_CAP_FLAG_TRACK_TIMES |                                                  \
     H5VL_CAP_FLAG_REF_MORE | H5VL_CAP_FLAG_OBJ_REF | H5VL_CAP_FLAG_FILE_MORE | H5VL_CAP_FLAG_GROUP_MORE | \
     H5VL_CAP_FLAG_UD_LINKS)

static herr_t init(hid_t vipl)
{
    (void)vipl;
    return h5fl_err_init();
}

static herr_t term(void)
{
    h5fl_err_term(); /* no MPI here: H5close may run inside MPI_Finalize */
    return 0;
}

static herr_t get_conn_cls(void *obj, H5VL_get_conn_lvl_t lvl, const H5VL_class_t **cls)
{
    (void)obj;
    (void)lvl;
    *cls = &h5fl_class; /* terminal connector: every level is us */
    return 0;
}

static herr_t get_cap_flags(const void *info, uint64_t *flags)
{
    (void)info;
    *flags = H5FL_CAPS;
    return 0;
}

static herr_t opt_query(void *obj, H5VL_subclass_t cls, int opt_type, uint64_t *flags)
{
    (void)obj;
    /* of the native-specific operations, only the datasets' chunk operations (dset_chunk.c) */
    *flags = cls == H5VL_SUBCLS_DATASET ? h5fl_dataset_opt_flags(opt_type) : 0;
    return 0;
}

/* Called with group, file or dataset objects for H5Gget_objinfo (h5py's object hashing). */
static herr_t group_optional_any(void *obj, H5VL_optional_args_t *args, hid_t dxpl, void **req)
{
    return h5fl_group_optional(obj, args, dxpl, req);
}

const H5VL_class_t h5fl_class = {
    .version = H5VL_VERSION,
    .value = H5FL_VALUE,
    .name = H5FL_NAME,
    .conn_version = H5FL_FORMAT_VERSION,
    .cap_flags = H5FL_CAPS,
    .initialize = init,
    .terminate = term,
    .attr_cls = {h5fl_attr_create, h5fl_attr_open, h5fl_attr_read, h5fl_attr_write, h5fl_attr_get,
                 h5fl_attr_specific, NULL, h5fl_attr_close},
    .dataset_cls = {h5fl_dataset_create, h5fl_dataset_open, h5fl_dataset_read, h5fl_dataset_write,
                    h5fl_dataset_get, h5fl_dataset_specific, h5fl_dataset_optional, h5fl_dataset_close},
    .datatype_cls = {h5fl_datatype_commit, h5fl_datatype_open, h5fl_datatype_get, h5fl_datatype_specific, NULL,
                     h5fl_datatype_close},
    .file_cls = {h5fl_file_create, h5fl_file_open, h5fl_file_get, h5fl_file_specific, h5fl_file_optional,
                 h5fl_file_close},
    .group_cls = {h5fl_group_create, h5fl_group_open, h5fl_group_get, h5fl_group_specific,
                  group_optional_any, h5fl_group_close},
    .link_cls = {h5fl_link_create, h5fl_link_copy, h5fl_link_move, h5fl_link_get, h5fl_link_specific, NULL},
    .object_cls = {h5fl_object_open, h5fl_object_copy, h5fl_object_get, h5fl_object_specific, h5fl_object_optional},
    .introspect_cls = {get_conn_cls, get_cap_flags, opt_query},
    .blob_cls = {h5fl_blob_put, h5fl_blob_get, h5fl_blob_specific, NULL},
};

H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_VOL; }
/* The class with the native fallback around it (native.c). */
const void *H5PLget_plugin_info(void) { return h5fl_nat_class(&h5fl_class); }
