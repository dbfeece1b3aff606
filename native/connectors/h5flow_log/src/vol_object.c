/* Object callbacks: open by name, info, token lookup, visiting, existence, reference counts, flush and
 * refresh (the link callbacks are in vol_link.c). */
#include "dset.h"

#include <H5VLnative.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static H5O_type_t otype(H5I_type_t t)
{
    return t == H5I_GROUP     ? H5O_TYPE_GROUP
           : t == H5I_DATASET  ? H5O_TYPE_DATASET
           : t == H5I_DATATYPE ? H5O_TYPE_NAMED_DATATYPE
                               : H5O_TYPE_UNKNOWN;
}

int h5fl_fill_oinfo(h5fl_file_t *f, const char *dir, H5I_type_t type, unsigned fields, H5O_info2_t *oi)
{
    memset(oi, 0, sizeof *oi);
    oi->fileno = f->fileno;
    h5fl_token_of(dir, &oi->token);
    oi->type = otype(type);
    oi->rc = h5fl_hard_nlink(dir); /* hardlinks.c: the object's names */
    if ((fields & H5O_INFO_BASIC) && type == H5I_DATATYPE) /* and, as native, the objects using it */
        oi->rc += h5fl_datatype_uses(f, dir);
    struct stat st;
    bool times = true;
    if ((fields & H5O_INFO_TIME) && type == H5I_DATASET) { /* created with track_times off: 0, as native */
        hid_t t, s, p;
        if (h5fl_sidecar_read(dir, &t, &s, &p) == 0) {
            hbool_t tt = true;
            if (H5Pget_obj_track_times(p, &tt) >= 0 && !tt)
                times = false;
            H5Tclose(t);
            H5Sclose(s);
            H5Pclose(p);
        } else
            h5fl_err_clear(); /* an unreadable sidecar reports times; opening the dataset reports the error */
    }
    if ((fields & H5O_INFO_TIME) && times && stat(dir, &st) == 0) {
        oi->atime = st.st_atime;
        oi->mtime = st.st_mtime;
        oi->ctime = st.st_ctime;
        oi->btime = st.st_mtime;
    }
    if (fields & H5O_INFO_NUM_ATTRS) {
        h5fl_names_t names;
        if (h5fl_list_attrs(dir, &names) != 0)
            return -1;
        oi->num_attrs = names.n;
        h5fl_names_free(&names);
    }
    return 0;
}

/* ---------------------------------------------------------------- objects */
void *h5fl_object_open(void *obj, const H5VL_loc_params_t *lp, H5I_type_t *opened_type, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    h5fl_loc_t loc;
    void *r = NULL;
    if (h5fl_loc_from_params(o, lp, &loc) == 0) {
        r = h5fl_open_loc(o->file, &loc, opened_type);
        h5fl_loc_free(&loc);
    }
    if (!r)
        h5fl_err_push(__func__);
    return r;
}

herr_t h5fl_object_get(void *obj, const H5VL_loc_params_t *lp, H5VL_object_get_args_t *args, hid_t dxpl,
                       void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    h5fl_file_t *f = o->file;
    if (args->op_type == H5VL_OBJECT_GET_FILE) {
        /* The library looks the file id up by this pointer; with no file id left open it registers a new
         * one, whose close will come back to h5fl_file_close: account for it. */
        if (f->handles == 0) {
            f->handles++;
            f->o.rc++;
        }
        *args->args.get_file.file = f;
        return 0;
    }
    h5fl_loc_t loc;
    if (h5fl_loc_from_params(o, lp, &loc) != 0)
        goto fail;
    int rc = -1;
    if (loc.type == H5I_BADID) {
        h5fl_err("object '%s' does not exist", loc.path);
    } else if (args->op_type == H5VL_OBJECT_GET_NAME) {
        const char *p = o->type == H5I_ATTR ? o->path : loc.path;
        size_t l = strlen(p);
        if (args->args.get_name.buf && args->args.get_name.buf_size) {
            size_t n = l < args->args.get_name.buf_size - 1 ? l : args->args.get_name.buf_size - 1;
            memcpy(args->args.get_name.buf, p, n);
            args->args.get_name.buf[n] = '\0';
        }
        if (args->args.get_name.name_len)
            *args->args.get_name.name_len = l;
        rc = 0;
    } else if (args->op_type == H5VL_OBJECT_GET_TYPE) {
        *args->args.get_type.obj_type = otype(loc.type);
        rc = 0;
    } else if (args->op_type == H5VL_OBJECT_GET_INFO) {
        rc = h5fl_fill_oinfo(f, loc.dir, loc.type, args->args.get_info.fields,
                             args->args.get_info.oinfo);
    } else {
        h5fl_err("object get operation %d is not supported", (int)args->op_type);
    }
    h5fl_loc_free(&loc);
    if (rc == 0)
        return 0;
fail:
    h5fl_err_push(__func__);
    return -1;
}

herr_t h5fl_object_specific(void *obj, const H5VL_loc_params_t *lp, H5VL_object_specific_args_t *args,
                            hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    h5fl_loc_t loc = {0};
    int rc = -1;
    switch (args->op_type) {
        case H5VL_OBJECT_EXISTS:
            if (h5fl_loc_from_params(o, lp, &loc) != 0)
                break;
            *args->args.exists.exists = loc.type != H5I_BADID;
            rc = 0;
            break;
        case H5VL_OBJECT_LOOKUP:
            if (h5fl_loc_from_params(o, lp, &loc) != 0)
                break;
            if (loc.type == H5I_BADID) {
                h5fl_err("object '%s' does not exist", loc.path);
                break;
            }
            rc = h5fl_ref_token(o->file, loc.dir, loc.path, args->args.lookup.token_ptr); /* refs.c */
            break;
        case H5VL_OBJECT_VISIT: {
            H5VL_object_visit_args_t *a = &args->args.visit;
            if (h5fl_loc_from_params(o, lp, &loc) != 0)
                break;
            if (loc.type == H5I_ATTR) /* H5Ovisit on an attribute visits from the object holding it (native) */
                loc.type = h5fl_dir_type(loc.dir, !strcmp(loc.dir, o->file->o.dir));
            rc = h5fl_visit_objects(o, &loc, a->order, a->fields, a->op, a->op_data,
                                    a->idx_type == H5_INDEX_CRT_ORDER); /* vol_link.c */
            h5fl_loc_free(&loc);
            if (rc >= 0)
                return rc;
            goto fail;
        }
        case H5VL_OBJECT_CHANGE_REF_COUNT: /* H5Oincr_refcount / H5Odecr_refcount (hardlinks.c) */
            if (lp->type != H5VL_OBJECT_BY_SELF)
                h5fl_err("H5Oincr_refcount/H5Odecr_refcount take an open object");
            else
                rc = h5fl_hard_adjust(o, args->args.change_rc.delta);
            break;
        case H5VL_OBJECT_FLUSH:
            rc = h5fl_file_flush(o->file, true);
            break;
        case H5VL_OBJECT_REFRESH:
            rc = 0;
            break;
        default:
            h5fl_err("object operation %d (e.g. H5Oincr_refcount) is not supported by h5flow_log",
                     (int)args->op_type);
    }
    h5fl_loc_free(&loc);
    if (rc == 0)
        return 0;
fail:
    h5fl_err_push(__func__);
    return -1;
}

/* Native-only object operations that tools use on any file: H5Oget_native_info (h5stat) reports an
 * object (group, dataset or committed datatype) without a native object header (all sizes 0: a container has no object headers or B-trees), and
 * H5Oget_comment (h5ls -v, h5dump) reports no comment (comments cannot be set: H5Oset_comment is refused). */
herr_t h5fl_object_optional(void *obj, const H5VL_loc_params_t *lp, H5VL_optional_args_t *args, hid_t dxpl,
                            void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    h5fl_loc_t loc = {0};
    int rc = -1;
    if (args->op_type != H5VL_NATIVE_OBJECT_GET_NATIVE_INFO && args->op_type != H5VL_NATIVE_OBJECT_GET_COMMENT) {
        h5fl_err("object operation %d (native HDF5 only, e.g. H5Oset_comment or metadata cache control) is "
                 "not supported by h5flow_log",
                 args->op_type);
    } else if (h5fl_loc_from_params(o, lp, &loc) == 0) {
        if (loc.type != H5I_GROUP && loc.type != H5I_DATASET && loc.type != H5I_DATATYPE) {
            h5fl_err(loc.type == H5I_BADID ? "object '%s' does not exist" : "'%s' is a link, not an object",
                     loc.path);
        } else if (args->op_type == H5VL_NATIVE_OBJECT_GET_NATIVE_INFO) {
            H5VL_native_object_optional_args_t *a = args->args;
            memset(a->get_native_info.ninfo, 0, sizeof *a->get_native_info.ninfo);
            rc = 0;
        } else {
            H5VL_native_object_optional_args_t *a = args->args;
            if (a->get_comment.buf && a->get_comment.buf_size)
                ((char *)a->get_comment.buf)[0] = '\0';
            if (a->get_comment.comment_len)
                *a->get_comment.comment_len = 0;
            rc = 0;
        }
        h5fl_loc_free(&loc);
    }
    if (rc == 0)
        return 0;
    h5fl_err_push(__func__);
    return -1;
}
