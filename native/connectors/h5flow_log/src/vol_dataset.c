/* Dataset callbacks: create/open, get, extent changes, close; the state one dataset's handles share. The
 * write and read callbacks are in vol_dataset_io.c. */
#include "dset.h"
#include "stats.h"

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

void h5fl_dset_forget_index(h5fl_dset_t *d)
{
    h5fl_ix_free(d->ix);
    d->ix = NULL;
}

int h5fl_dset_flush(h5fl_dset_t *d, bool sync)
{
    return d->w ? h5fl_writer_commit(d->w, sync && d->o.file->fsync) : 0;
}

/* The value unwritten elements read as: the creation property list's fill value converted to the
 * dataset's type (variable-length strings included), zero bytes with H5D_FILL_TIME_NEVER (native HDF5
 * leaves such storage uninitialised) or with no fill value defined. A fill value that cannot be
 * converted to the dataset's type is an error, as in native HDF5's H5Dcreate. */
static int load_fill(h5fl_dset_t *d)
{
    H5D_fill_value_t fs = H5D_FILL_VALUE_UNDEFINED;
    H5D_fill_time_t ft = H5D_FILL_TIME_IFSET;
    if (H5Pfill_value_defined(d->dcpl, &fs) < 0 || H5Pget_fill_time(d->dcpl, &ft) < 0) {
        h5fl_err("cannot read the fill value settings of dataset '%s'", d->o.path);
        return -1;
    }
    if (fs == H5D_FILL_VALUE_UNDEFINED)
        return 0;
    if (d->vstr) {
        char *s = NULL;
        if (H5Pget_fill_value(d->dcpl, d->type, &s) < 0) {
            h5fl_err("the fill value of dataset '%s' cannot be converted to its string type", d->o.path);
            return -1;
        }
        if (s) {
            d->vfill = h5fl_strdup(s);
            H5free_memory(s);
            if (!d->vfill)
                return -1;
        }
        return 0;
    }
    if (d->blob) /* no fill values for these (refused at creation): unwritten values read as empty */
        return 0;
    uint8_t *v = calloc(1, d->esize);
    if (!v) {
        h5fl_err("out of memory");
        return -1;
    }
    if (H5Pget_fill_value(d->dcpl, d->type, v) < 0) {
        free(v);
        h5fl_err("the fill value of dataset '%s' cannot be converted to its datatype", d->o.path);
        return -1;
    }
    if (ft != H5D_FILL_TIME_NEVER)
        memcpy(d->fill, v, d->esize);
    free(v);
    return 0;
}

static h5fl_dset_t *dset_new(h5fl_file_t *f, const char *dir, const char *path, hid_t type, hid_t space,
                             hid_t dcpl, hid_t dapl)
{
    h5fl_dset_t *d = calloc(1, sizeof *d);
    if (!d) {
        h5fl_err("out of memory");
        return NULL;
    }
    h5fl_obj_init(&d->o, H5I_DATASET, f, path, dir);
    d->type = type;
    d->space = space;
    d->dcpl = dcpl;
    d->dapl = (dapl >= 0 && dapl != H5P_DEFAULT) ? H5Pcopy(dapl) : H5Pcreate(H5P_DATASET_ACCESS);
    d->vds = h5fl_vds_layout(dcpl);
    d->vstr = H5Tis_variable_str(type) > 0;
    d->blob = h5fl_blob_type(type);
    d->filtered = h5fl_filtered(dcpl);
    d->tsize = H5Tget_size(type);
    d->esize = d->vstr || d->blob ? 16 : H5Tget_size(type);
    d->fill = calloc(1, d->esize ? d->esize : 1);
    if (!d->o.path || !d->o.dir || !d->fill || d->esize == 0) {
        h5fl_err("cannot set up dataset '%s'", path);
        goto fail;
    }
    /* native HDF5 writes the fill value of a variable-length type (a string, or a member of one) when its
     * storage is allocated, whatever the list asked for: its creation list reports that fill time
     * (H5Tdetect_class counts variable-length string members as H5T_VLEN, not the type itself) */
    if (d->vstr || H5Tdetect_class(type, H5T_VLEN) > 0) {
        if (H5Pset_fill_time(d->dcpl, H5D_FILL_TIME_ALLOC) < 0) {
            h5fl_err("cannot set the fill time of dataset '%s'", path);
            goto fail;
        }
    }
    if (load_fill(d) != 0 || h5fl_ext_setup(d) != 0)
        goto fail;
    return d;
fail:
    H5Tclose(type);
    H5Sclose(space);
    H5Pclose(dcpl);
    if (d->dapl >= 0)
        H5Pclose(d->dapl);
    free(d->fill);
    free(d->vfill);
    h5fl_obj_release(&d->o);
    free(d);
    return NULL;
}

static void dset_free(h5fl_dset_t *d)
{
    h5fl_ext_free(d);
    h5fl_writer_free(d->w);
    h5fl_ix_free(d->ix);
    H5Tclose(d->type);
    H5Sclose(d->space);
    H5Pclose(d->dcpl);
    H5Pclose(d->dapl);
    free(d->fill);
    free(d->vfill);
    h5fl_obj_release(&d->o);
    free(d);
}

/* A dataset already open in this process (through any handle of its container) is shared: one state, so
 * every handle sees every write, extent change and rename made through any other, as in native HDF5. */
void *h5fl_dset_open_dir(h5fl_file_t *f, const char *dir, const char *path)
{
    h5fl_dset_t *open = (h5fl_dset_t *)h5fl_reg_find(H5I_DATASET, dir, NULL, NULL);
    if (open) {
        if (open->closed) { /* closed with its data unwritten (see h5fl_dataset_close): HDF5 holds it again */
            open->closed = false;
            open->o.rc = 1;
        } else {
            open->o.rc++;
        }
        if (!h5fl_writable(open->o.file) && (f->intent & H5F_ACC_RDWR) && open->o.file->comm == f->comm) {
            h5fl_file_t *old = open->o.file; /* opened read-only before: writes go through the writable handle */
            f->o.rc++;
            open->o.file = f;
            h5fl_file_decref(old);
        }
        h5fl_err_clear();
        return open;
    }
    hid_t t, s, p;
    if (h5fl_sidecar_read(dir, &t, &s, &p) != 0)
        return NULL;
    return dset_new(f, dir, path, t, s, p, H5P_DEFAULT);
}

int h5fl_dset_moved(h5fl_dset_t *d)
{
    int rc = 0;
    if (d->w) { /* open descriptors follow the renamed directory; only the names change */
        h5fl_writer_t *w = d->w;
        char *dp = h5fl_join(d->o.dir, strrchr(w->dpath, '/') + 1);
        char *ip = h5fl_join(d->o.dir, strrchr(w->ipath, '/') + 1);
        char *dn = h5fl_strdup(d->o.gone ? "(deleted while open)" : d->o.path);
        if (!dp || !ip || !dn) {
            free(dp);
            free(ip);
            free(dn);
            return -1;
        }
        free(w->dpath);
        free(w->ipath);
        free(w->dname);
        w->dpath = dp;
        w->ipath = ip;
        w->dname = dn;
        rc = h5fl_writer_flush(w, false);
    }
    h5fl_dset_forget_index(d); /* log paths changed: rebuilt from the new directory at the next read */
    return rc;
}

/* ---------------------------------------------------------------- create / open */
static int check_supported(hid_t type, hid_t dcpl, const char *name)
{
    H5T_class_t cls = H5Tget_class(type);
    if (h5fl_check_ref_types(type, "dataset", name) != 0) /* refs.c: object references only */
        return -1;
    (void)cls;
    if (dcpl != H5P_DEFAULT && dcpl >= 0) {
        if (h5fl_vds_layout(dcpl) && h5fl_vds_check(type, dcpl, name) != 0) /* vds.c */
            return -1;
        H5D_fill_value_t fs = H5D_FILL_VALUE_UNDEFINED;
        if (H5Pfill_value_defined(dcpl, &fs) >= 0 && fs == H5D_FILL_VALUE_USER_DEFINED && h5fl_blob_type(type)) {
            h5fl_err("dataset '%s': h5flow_log does not support fill values for datatypes with variable-length "
                     "parts (unwritten elements read as empty sequences / null strings)",
                     name);
            return -1;
        }
        if (H5Pfill_value_defined(dcpl, &fs) >= 0 && fs == H5D_FILL_VALUE_USER_DEFINED) {
            size_t sz = H5Tget_size(type);
            uint8_t *v = calloc(1, sz > sizeof(char *) ? sz : sizeof(char *));
            herr_t cv = -1;
            if (v) {
                H5E_BEGIN_TRY { cv = H5Pget_fill_value(dcpl, type, v); }
                H5E_END_TRY
                if (cv >= 0 && H5Tis_variable_str(type) > 0)
                    H5free_memory(*(char **)v);
            }
            free(v);
            if (cv < 0) {
                h5fl_err("the fill value cannot be converted to the dataset's datatype");
                return -1;
            }
        }
    }
    return 0;
}

void *h5fl_dataset_create(void *obj, const H5VL_loc_params_t *lp, const char *name, hid_t lcpl, hid_t type,
                          hid_t space, hid_t dcpl, hid_t dapl, hid_t dxpl, void **req)
{
    (void)lp;
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    h5fl_file_t *f = o->file;
    h5fl_loc_t parent = {0};
    char leaf[NAME_MAX + 1], *leafname = NULL, *dir = NULL, *path = NULL;
    hid_t t = H5I_INVALID_HID, s = H5I_INVALID_HID, p = H5I_INVALID_HID;
    h5fl_dset_t *d = NULL;
    h5fl_collective_begin(f);
    if (!h5fl_writable(f) || check_supported(type, dcpl, name ? name : "(anonymous)") != 0 ||
        (dcpl >= 0 && dcpl != H5P_DEFAULT && h5fl_ext_check(type, space, dcpl, name ? name : "(anonymous)") != 0) ||
        h5fl_check_plist(dcpl, H5P_DATASET_CREATE, "dataset creation property list") != 0 ||
        h5fl_check_plist(dapl, H5P_DATASET_ACCESS, "dataset access property list") != 0 ||
        h5fl_check_plist(lcpl, H5P_LINK_CREATE, "link creation property list") != 0 ||
        h5fl_check_no_crt_order(dcpl, false) != 0)
        goto done;
    unsigned crt = 0;
    if (lcpl != H5P_DEFAULT && lcpl >= 0)
        H5Pget_create_intermediate_group(lcpl, &crt);
    t = H5Tcopy(type);
    s = H5Scopy(space);
    p = (dcpl != H5P_DEFAULT && dcpl >= 0) ? H5Pcopy(dcpl) : H5Pcreate(H5P_DATASET_CREATE);
    if (t < 0 || s < 0 || p < 0) {
        h5fl_err("cannot copy the dataset's type, space or creation properties");
        goto done;
    }
    if (h5fl_filter_prepare(p, t, name ? name : "(anonymous)") != 0) /* filter.c: can_apply, set_local */
        goto done;
    H5Sselect_all(s);
    int st = 0;
    if (!name) { /* anonymous (h5py's `group[name] = array` creates, writes, then links) */
        snprintf(leaf, sizeof leaf, H5FL_ANON_PREFIX "%llu.%llu", (unsigned long long)f->epoch,
                 (unsigned long long)h5fl_epoch_owner(f)->anon_counter++);
        dir = h5fl_join(f->o.dir, leaf);
        path = h5fl_strdup("");
        if (!dir || !path)
            st = -1;
    } else {
        int mode = f->rank == 0 ? (crt ? H5FL_MKPARENTS : H5FL_CHECK) : H5FL_COMPUTE;
        st = h5fl_resolve_parent(o, name, mode, &parent, leaf, sizeof leaf, &leafname);
    }
    if (st == 0 && name) {
        dir = h5fl_join(parent.dir, leaf);
        size_t a = strlen(parent.path);
        path = malloc(a + strlen(leafname) + 2);
        if (!dir || !path)
            st = -1;
        else
            sprintf(path, "%s%s%s", parent.path, (a == 1) ? "" : "/", leafname);
    }
    if (st == 0 && f->rank == 0) {
        /* a named dataset is built in a private directory and renamed to its name complete (util.c);
         * an anonymous one's directory is its own (@anon.<epoch>.<n>) */
        char *tmp = name ? h5fl_create_tmp(f) : NULL;
        const char *w = name ? tmp : dir;
        if (name ? !tmp : mkdir(dir, 0755) != 0) {
            if (!name)
                h5fl_err("cannot create an anonymous dataset: cannot create %s: %s", dir, strerror(errno));
            st = -1;
        }
        if (st == 0 && h5fl_datatype_note_use(f, type, w) != 0) /* vol_datatype.c */
            st = -1;
        if (st == 0 && h5fl_sidecar_write(w, t, s, p, f->fsync) != 0)
            st = -1;
        if (st == 0 && h5fl_udf_persist(w, p, f->fsync) != 0) /* stats.c: the user data function */
            st = -1;
        unsigned crt_links, crt_attrs;
        h5fl_crt_flags(dcpl, &crt_links, &crt_attrs);
        if (st == 0 && (h5fl_corder_enable(w, false, crt_attrs, f->fsync) != 0 ||
                        (name && h5fl_corder_assign(parent.dir, w, f->fsync) != 0)))
            st = -1;
        if (tmp)
            st = st == 0 ? h5fl_create_publish_new(tmp, dir, "dataset", path) : (h5fl_create_abandon(tmp), -1);
        free(tmp);
    }
    st = h5fl_collective(f, st);
    if (st == 0) {
        d = dset_new(f, dir, path, t, s, p, dapl);
        t = s = p = H5I_INVALID_HID; /* owned by d (or freed by dset_new on failure) */
        if (d)
            d->o.anon = !name;
    }
done:
    if (t >= 0)
        H5Tclose(t);
    if (s >= 0)
        H5Sclose(s);
    if (p >= 0)
        H5Pclose(p);
    free(leafname);
    free(dir);
    free(path);
    h5fl_loc_free(&parent);
    if (!d)
        h5fl_err_push(__func__);
    return d;
}

void *h5fl_dataset_open(void *obj, const H5VL_loc_params_t *lp, const char *name, hid_t dapl, hid_t dxpl,
                        void **req)
{
    (void)lp;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    h5fl_loc_t loc;
    h5fl_dset_t *d = NULL;
    bool first = false; /* no other handle of the dataset is open in this process */
    if (h5fl_resolve(o, name, &loc) == 0) {
        if (loc.type != H5I_DATASET)
            h5fl_err(loc.type == H5I_BADID ? "dataset '%s' does not exist" : "'%s' is not a dataset", name);
        else
            d = h5fl_dset_open_dir(loc.file ? loc.file : o->file, loc.dir, loc.path);
        h5fl_loc_free(&loc);
        first = d && d->o.rc == 1;
        if (d && (h5fl_udf_check_dapl(d, dapl, first) != 0 || (!first && h5fl_ext_check_dapl(d, dapl) != 0))) {
            char msg[768]; /* stats.c: a user data function for this open; extfile.c: the same prefix */
            snprintf(msg, sizeof msg, "%s", h5fl_err_msg());
            h5fl_dataset_close(d, dxpl, NULL);
            h5fl_err("%s", msg);
            d = NULL;
        }
    }
    if (d && first && dapl >= 0 && dapl != H5P_DEFAULT && dapl != H5P_DATASET_ACCESS_DEFAULT) {
        /* The dataset's state is shared by its handles (h5fl_dset_open_dir), and so is its access list: the
         * first open's, as native HDF5 keeps the first open's virtual view, printf gap and prefixes for every
         * handle (H5D_open); H5Dget_access_plist reports it. */
        hid_t copy = H5Pcopy(dapl);
        if (copy >= 0) {
            H5Pclose(d->dapl);
            d->dapl = copy;
        }
        if (d->ext) { /* external files: their names again, under this open's prefix */
            h5fl_ext_free(d);
            if (copy < 0 || h5fl_ext_setup(d) != 0) {
                char msg[768];
                snprintf(msg, sizeof msg, "%s", copy < 0 ? "cannot copy the dataset access property list"
                                                         : h5fl_err_msg());
                h5fl_dataset_close(d, dxpl, NULL);
                h5fl_err("%s", msg);
                d = NULL;
            }
        }
    }
    if (!d)
        h5fl_err_push(__func__);
    return d;
}

/* ---------------------------------------------------------------- get / specific / close */
static hsize_t storage_size(const h5fl_dset_t *d)
{
    hsize_t total = 0;
    DIR *dir = opendir(d->o.dir);
    if (!dir)
        return 0;
    struct dirent *e;
    h5fl_layout_t lay; /* restructured: the shards count, the logs they superseded do not */
    if (h5fl_sidecar_layout(d->o.dir, &lay) != 0) {
        h5fl_err_clear();
        lay.order = 0;
    }
    while ((e = readdir(dir))) {
        size_t l = strlen(e->d_name);
        if (h5fl_layout_superseded(e->d_name, &lay))
            continue;
        if ((!strncmp(e->d_name, H5FL_LOG_PREFIX, strlen(H5FL_LOG_PREFIX)) ||
             !strncmp(e->d_name, "@shards.", 8)) && l > 4 && !strcmp(e->d_name + l - 4, ".dat")) {
            char *p = h5fl_join(d->o.dir, e->d_name);
            struct stat st;
            if (p && stat(p, &st) == 0)
                total += (hsize_t)st.st_size;
            free(p);
        }
    }
    closedir(dir);
    return total + (d->w ? d->w->dlen : 0);
}

herr_t h5fl_dataset_get(void *obj, H5VL_dataset_get_args_t *args, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_dset_t *d = obj;
    switch (args->op_type) {
        case H5VL_DATASET_GET_DAPL:
            if ((args->args.get_dapl.dapl_id = H5Pcopy(d->dapl)) >= 0)
                return 0;
            break;
        case H5VL_DATASET_GET_DCPL:
            if ((args->args.get_dcpl.dcpl_id = H5Pcopy(d->dcpl)) >= 0)
                return 0;
            break;
        case H5VL_DATASET_GET_SPACE:
            if (d->vds && h5fl_vds_extent(d) != 0) /* the extent follows the sources (vds.c) */
                break;
            if ((args->args.get_space.space_id = H5Scopy(d->space)) >= 0)
                return 0;
            break;
        case H5VL_DATASET_GET_SPACE_STATUS:
            *args->args.get_space_status.status = H5D_SPACE_STATUS_ALLOCATED;
            return 0;
        case H5VL_DATASET_GET_STORAGE_SIZE:
            *args->args.get_storage_size.storage_size = storage_size(d);
            return 0;
        case H5VL_DATASET_GET_TYPE:
            if ((args->args.get_type.type_id = h5fl_datatype_reopen(d->o.file, d->o.dir, d->type)) >= 0 ||
                (args->args.get_type.type_id = H5Tcopy(d->type)) >= 0)
                return 0;
            break;
        default:
            h5fl_err("dataset get operation %d is not supported", (int)args->op_type);
    }
    h5fl_err_push(__func__);
    return -1;
}

/* A shrink discards the elements outside the new extent (growing again shows the fill value): a fill
 * record over them, ordered after every earlier write of this epoch on every rank (collective). */
static int shrink_fill(h5fl_dset_t *d, int rank, const hsize_t *dims, const hsize_t *size)
{
    h5fl_file_t *f = d->o.file;
    /* every rank's writer open first: its counter continues after the records its logs already hold (a
     * dataset closed and opened again has no writer yet, and a fill record numbered below those records
     * would order before them: they would come back) */
    if (h5fl_collective(f, !d->w && h5fl_writer_open(d) != 0 ? -1 : 0) != 0)
        return -1;
    uint64_t c = d->w->counter;
    if (c < d->min_counter)
        c = d->min_counter;
    if (f->comm != MPI_COMM_NULL && f->size > 1) {
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, &c, 1, MPI_UINT64_T, MPI_MAX, f->comm, &req);
        h5fl_mpi_wait(&req);
    }
    d->min_counter = c + 1;
    if (d->w && d->w->counter < c + 1)
        d->w->counter = c + 1;
    /* chunked: over the old extent rounded up to whole chunks, so that what a direct chunk write stored
     * past the extent in an edge chunk is dropped too (dset_chunk.c; native HDF5 prunes edge chunks so) */
    hsize_t gdims[H5S_MAX_RANK];
    h5fl_chunk_round(d, rank, dims, gdims);
    hid_t gone = H5Screate_simple(rank, gdims, NULL);
    hsize_t start[H5S_MAX_RANK] = {0}, keep[H5S_MAX_RANK];
    bool empty = false;
    for (int k = 0; k < rank; k++) {
        keep[k] = size[k] < dims[k] ? size[k] : dims[k];
        empty = empty || keep[k] == 0;
    }
    int rc = -1;
    if (gone < 0 || H5Sselect_all(gone) < 0 ||
        (!empty && H5Sselect_hyperslab(gone, H5S_SELECT_NOTB, start, NULL, keep, NULL) < 0)) {
        h5fl_err("cannot compute the region a shrink discards");
        goto done;
    }
    if (f->rank == 0) {
        d->w->counter = c;
        if (h5fl_dset_append_record(d, gone, 0, 0, H5FL_REC_FILL, NULL) != 0 || h5fl_writer_flush(d->w, false) != 0)
            goto done; /* flushed: ranks that rebuild their index from the logs see it */
    } else if (d->ix) { /* the same record, seen from here: merge it at the next read */
        runs_ctx_t runs = {0};
        h5fl_seq_t seq = {f->epoch, c << 20};
        int r = h5fl_for_each_seq(gone, 1, h5fl_add_run, &runs);
        if (r == 0)
            r = h5fl_ix_note_write(d, &runs, gdims, seq, 0, true);
        free(runs.buf);
        if (r != 0)
            goto done;
    }
    rc = 0;
done:
    if (gone >= 0)
        H5Sclose(gone);
    return rc;
}

static int set_extent(h5fl_dset_t *d, const hsize_t *size)
{
    h5fl_file_t *f = d->o.file;
    if (!h5fl_writable(f))
        return -1;
    h5fl_collective_begin(f);
    int rank = H5Sget_simple_extent_ndims(d->space);
    hsize_t dims[H5S_MAX_RANK], maxd[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(d->space, dims, maxd);
    if (H5Pget_layout(d->dcpl) != H5D_CHUNKED && !d->ext) {
        h5fl_err("cannot change the extent of '%s': only chunked datasets and datasets with external storage "
                 "can (as in HDF5)",
                 d->o.path);
        return -1;
    }
    bool trailing = false, shrink = false;
    for (int k = 0; k < rank; k++) {
        if (maxd[k] != H5S_UNLIMITED && size[k] > maxd[k]) {
            h5fl_err("cannot extend dimension %d of '%s' to %llu: its maximum is %llu", k, d->o.path,
                     (unsigned long long)size[k], (unsigned long long)maxd[k]);
            return -1;
        }
        if (k > 0 && size[k] != dims[k])
            trailing = true;
        if (size[k] < dims[k])
            shrink = true;
    }
    if (shrink && !d->ext && shrink_fill(d, rank, dims, size) != 0) /* external: the files keep their bytes */
        return -1;
    hid_t ns = H5Scopy(d->space);
    if (ns < 0 || H5Sset_extent_simple(ns, rank, size, maxd) < 0) {
        h5fl_err("cannot set the new extent");
        if (ns >= 0)
            H5Sclose(ns);
        return -1;
    }
    int st = 0;
    if (f->rank == 0)
        st = h5fl_sidecar_write(d->o.dir, d->type, ns, d->dcpl, f->fsync);
    if (h5fl_collective(f, st) != 0) {
        H5Sclose(ns);
        return -1;
    }
    H5Sclose(d->space);
    d->space = ns;
    if (trailing && d->ix) { /* the linear order changed: rebuild from the logs at the next read */
        if (d->w && h5fl_writer_flush(d->w, false) != 0)
            return -1;
        h5fl_ix_free(d->ix);
        d->ix = NULL;
    }
    return 0;
}

herr_t h5fl_dataset_specific(void *obj, H5VL_dataset_specific_args_t *args, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_dset_t *d = obj;
    int rc = -1;
    switch (args->op_type) {
        case H5VL_DATASET_SET_EXTENT:
            rc = set_extent(d, args->args.set_extent.size);
            break;
        case H5VL_DATASET_FLUSH:
            rc = h5fl_dset_flush(d, true);
            break;
        case H5VL_DATASET_REFRESH: {
            /* see other writers' flushed data and a changed extent */
            hid_t t, s, p;
            rc = (d->w ? h5fl_writer_flush(d->w, false) : 0) == 0 ? h5fl_sidecar_read(d->o.dir, &t, &s, &p) : -1;
            if (rc == 0) {
                H5Tclose(t);
                H5Pclose(p);
                H5Sclose(d->space);
                d->space = s;
                h5fl_ix_free(d->ix);
                d->ix = NULL;
            }
            break;
        }
        default:
            h5fl_err("dataset operation %d is not supported", (int)args->op_type);
    }
    if (rc != 0)
        h5fl_err_push(__func__);
    return rc;
}

/* Release a handle whose data is on disk (or that was never linked: like HDF5, it goes away). */
static void dset_release(h5fl_dset_t *d)
{
    if (d->o.anon && d->o.file->rank == 0)
        h5fl_rm_rf(d->o.dir);
    dset_free(d);
}

int h5fl_dset_release_closed(h5fl_dset_t *d)
{
    if (!d->closed || h5fl_dset_flush(d, true) != 0)
        return -1;
    dset_release(d);
    return 0;
}

/* A dataset close never fails: in HDF5 1.14.5, H5D__close_cb frees the dataset's VOL wrapper whatever
 * this callback returns; H5Dclose then drops the id, but H5Idec_ref (h5py) and H5Oclose keep it, stale,
 * and the next H5Idec_ref or H5close dereferences the freed wrapper (and, through it, the freed H5VL_t)
 * inside HDF5: a crash no connector can prevent. So when the final flush fails, the handle is handed to
 * the file instead of being freed: it stays in the registry with d->closed set, holding its writer, its
 * buffered data and its file reference; h5fl_file_flush retries it at every H5Fflush and at the file's
 * close, which fail (and can be retried: HDF5 keeps a file whose close failed) until the data is written,
 * and releases it at the first success. Only when no file id is left to report through is the error
 * printed on stderr (and the data dropped). Writes rarely get here: their space is secured before they
 * return (dset_writer.c), so this takes an I/O error or a file size limit lowered after the write.
 * Invariant relied on: a dataset in the registry owns its writer and one reference on its file, whether
 * HDF5 still holds it (d->closed false) or not; HDF5 never passes a closed one again (a new open of the
 * same dataset revives it: h5fl_dset_open_dir). */
herr_t h5fl_dataset_close(void *obj, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_dset_t *d = obj;
    if (--d->o.rc > 0)
        return 0;
    /* never linked: its data goes away with it, a failed flush loses nothing */
    if (d->o.anon || h5fl_dset_flush(d, true) == 0) {
        dset_release(d);
        return 0;
    }
    if (d->o.file->handles > 0) { /* the file's flush and close report it, with the same message */
        h5fl_err_clear();
        d->closed = true;
        h5fl_dset_forget_index(d);
        return 0;
    }
    char msg[768];
    snprintf(msg, sizeof msg, "%s", h5fl_err_msg());
    h5fl_err_clear();
    h5fl_err("closing dataset '%s' after its file: %s; no file id is left to report this through, so the "
             "buffered data is lost",
             d->o.path, msg);
    h5fl_err_push(__func__);
    H5Eprint2(H5E_DEFAULT, NULL);
    H5Eclear2(H5E_DEFAULT);
    dset_release(d);
    return 0;
}
