/* h5flow_log — virtual datasets (H5D_VIRTUAL layout, h5py `create_virtual_dataset`).
 *
 * A virtual dataset stores no data: its creation property list (kept in the sidecar, H5Pencode'd, like
 * every dataset's) maps selections of its dataspace to selections of source datasets in other files or in
 * its own container ("."). A read fills the memory selection with the fill value, then reads each mapping's
 * part of the request from its source; a write sends each mapping's part to its source. The parts are
 * found the way native HDF5 finds them: H5Sselect_project_intersection of the request with the mapping's
 * virtual selection, projected onto the memory selection and onto the source selection.
 *
 * A source file is an h5flow_log container (opened through this connector) or a native HDF5 file (opened
 * through the native connector). Relative names are looked up as native HDF5 does: under the dataset access
 * list's prefix or $HDF5_VDS_PREFIX, then next to the container, then as given. A source file or dataset
 * that does not exist reads as the fill value (native semantics); a write to it fails. A source dataset
 * smaller than its mapping's source selection fails the read, as in native HDF5.
 *
 * Refused at creation, with a message: printf-style source names (%b) and unlimited mappings, and virtual
 * datasets opened by more than one MPI process (a source open would have to be collective inside an
 * independent read).
 */
#include "dset.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool h5fl_vds_layout(hid_t dcpl)
{
    return dcpl >= 0 && dcpl != H5P_DEFAULT && H5Pget_layout(dcpl) == H5D_VIRTUAL;
}

static char *mapping_name(hid_t dcpl, size_t i, bool file)
{
    ssize_t n = file ? H5Pget_virtual_filename(dcpl, i, NULL, 0) : H5Pget_virtual_dsetname(dcpl, i, NULL, 0);
    if (n < 0)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return NULL;
    if ((file ? H5Pget_virtual_filename(dcpl, i, s, (size_t)n + 1)
              : H5Pget_virtual_dsetname(dcpl, i, s, (size_t)n + 1)) < 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* Whether a selection reaches H5S_UNLIMITED (an unlimited mapping). */
static bool unlimited_sel(hid_t space)
{
    if (H5Sget_select_type(space) != H5S_SEL_HYPERSLABS || H5Sis_regular_hyperslab(space) <= 0)
        return false;
    int r = H5Sget_simple_extent_ndims(space);
    hsize_t start[H5S_MAX_RANK], stride[H5S_MAX_RANK], count[H5S_MAX_RANK], block[H5S_MAX_RANK];
    if (r <= 0 || H5Sget_regular_hyperslab(space, start, stride, count, block) < 0)
        return false;
    for (int k = 0; k < r; k++)
        if (count[k] == H5S_UNLIMITED || block[k] == H5S_UNLIMITED)
            return true;
    return false;
}

int h5fl_vds_check(hid_t type, hid_t dcpl, const char *name)
{
    size_t n = 0;
    if (h5fl_blob_type(type)) {
        h5fl_err("virtual dataset '%s': virtual datasets of types with variable-length sequences are not "
                 "supported by h5flow_log",
                 name);
        return -1;
    }
    if (H5Pget_virtual_count(dcpl, &n) < 0) {
        h5fl_err("virtual dataset '%s': cannot read its mappings", name);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char *file = mapping_name(dcpl, i, true), *dset = mapping_name(dcpl, i, false);
        hid_t vs = H5Pget_virtual_vspace(dcpl, i), ss = H5Pget_virtual_srcspace(dcpl, i);
        int st = 0;
        if (!file || !dset || vs < 0 || ss < 0) {
            h5fl_err("virtual dataset '%s': cannot read mapping %zu", name, i);
            st = -1;
        } else if (strchr(file, '%') || strchr(dset, '%')) {
            h5fl_err("virtual dataset '%s': printf-style source names ('%s', '%s') are not supported by "
                     "h5flow_log; map each source file explicitly",
                     name, file, dset);
            st = -1;
        } else if (unlimited_sel(vs) || unlimited_sel(ss)) {
            h5fl_err("virtual dataset '%s': unlimited mappings are not supported by h5flow_log; map the "
                     "sources' current extents",
                     name);
            st = -1;
        }
        free(file);
        free(dset);
        if (vs >= 0)
            H5Sclose(vs);
        if (ss >= 0)
            H5Sclose(ss);
        if (st)
            return -1;
    }
    return 0;
}

/* The source file's path to try, in native HDF5's order; NULL when none exists. */
static char *find_source(const h5fl_dset_t *d, const char *file)
{
    if (file[0] == '/')
        return access(file, F_OK) == 0 ? h5fl_strdup(file) : NULL;
    char *cand[3] = {NULL, NULL, NULL};
    char prefix[PATH_MAX] = "";
    ssize_t pl = H5Pget_virtual_prefix(d->dapl, prefix, sizeof prefix);
    const char *env = getenv("HDF5_VDS_PREFIX");
    if ((pl <= 0 || !prefix[0]) && env && *env)
        snprintf(prefix, sizeof prefix, "%s", env);
    if (prefix[0])
        cand[0] = h5fl_join(prefix, file);
    /* next to the container: the directory holding it */
    char *cdir = h5fl_strdup(d->o.file->o.dir);
    if (cdir) {
        char *slash = strrchr(cdir, '/');
        if (slash && slash != cdir) {
            *slash = '\0';
            cand[1] = h5fl_join(cdir, file);
        } else if (slash) {
            cand[1] = h5fl_join("/", file);
        } else {
            cand[1] = h5fl_strdup(file);
        }
        free(cdir);
    }
    cand[2] = h5fl_strdup(file);
    char *found = NULL;
    for (int i = 0; i < 3; i++) {
        if (!found && cand[i] && access(cand[i], F_OK) == 0)
            found = cand[i];
        else
            free(cand[i]);
    }
    return found;
}

typedef struct source {
    hid_t file, dset; /* file: -1 for the container itself ("."), then dset opened through its root */
} source_t;

static void source_close(source_t *s)
{
    if (s->dset >= 0)
        H5Dclose(s->dset);
    if (s->file >= 0)
        H5Fclose(s->file);
    s->dset = s->file = H5I_INVALID_HID;
}

/* Open mapping i's source; 0 with s->dset < 0 when it does not exist (reads give the fill value). */
static int source_open(h5fl_dset_t *d, const char *file, const char *dset, bool write, source_t *s)
{
    h5fl_file_t *f = d->o.file;
    s->file = s->dset = H5I_INVALID_HID;
    hid_t loc = H5I_INVALID_HID;
    if (!strcmp(file, ".")) {
        h5fl_loc_t root = {.dir = f->o.dir, .path = "/", .type = H5I_GROUP};
        loc = h5fl_register_for_callback(f, &root);
        if (loc < 0)
            return -1;
    } else {
        char *path = find_source(d, file);
        if (!path)
            return 0;
        bool container = h5fl_exists(path, H5FL_MARKER);
        hid_t fapl = container ? H5Pcopy(f->fapl) : H5Pcreate(H5P_FILE_ACCESS);
        if (fapl >= 0 && !container && H5Pset_vol(fapl, H5VL_NATIVE, NULL) < 0) {
            H5Pclose(fapl);
            fapl = H5I_INVALID_HID;
        }
        if (fapl >= 0) {
            H5E_BEGIN_TRY { s->file = H5Fopen(path, write ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl); }
            H5E_END_TRY
            H5Pclose(fapl);
        }
        if (s->file < 0) {
            if (write)
                h5fl_err("virtual dataset '%s': cannot open its source file %s for writing", d->o.path, path);
            free(path);
            return write ? -1 : 0; /* an unreadable source reads as the fill value, as native */
        }
        free(path);
        loc = s->file;
    }
    H5E_BEGIN_TRY { s->dset = H5Dopen2(loc, dset, H5P_DEFAULT); }
    H5E_END_TRY
    if (!strcmp(file, "."))
        H5Idec_ref(loc);
    h5fl_err_clear(); /* a missing source dataset: the fill value */
    if (s->dset < 0 && write) {
        h5fl_err("virtual dataset '%s': its source dataset %s in %s cannot be opened for writing", d->o.path,
                 dset, file);
        source_close(s);
        return -1;
    }
    return 0;
}

/* The source selection of the request's part in a mapping, on the source dataset's current dataspace: a
 * mapping's source space records the source's extent when the mapping was made (it may have grown since,
 * up to that space's maximum), so the selection is copied onto the dataset's own space, as native does. */
static hid_t source_part(hid_t sdset, hid_t vsel, hid_t ssel, hid_t fs)
{
    hid_t part = H5Sselect_project_intersection(vsel, ssel, fs);
    if (part < 0)
        return H5I_INVALID_HID;
    hid_t cur = H5Dget_space(sdset);
    if (cur < 0 || H5Sget_simple_extent_ndims(cur) != H5Sget_simple_extent_ndims(part) ||
        H5Sselect_copy(cur, part) < 0) {
        if (cur >= 0)
            H5Sclose(cur);
        H5Sclose(part);
        return H5I_INVALID_HID;
    }
    H5Sclose(part);
    return cur;
}

int h5fl_vds_io(h5fl_dset_t *d, hid_t mtype, hid_t mspace, hid_t fspace, hid_t dxpl, void *buf, bool write)
{
    h5fl_file_t *f = d->o.file;
    if (f->comm != MPI_COMM_NULL && f->size > 1) {
        h5fl_err("virtual dataset '%s': h5flow_log reads and writes virtual datasets in one process only",
                 d->o.path);
        return -1;
    }
    sel_t s;
    if (h5fl_resolve_sel(d, mspace, fspace, &s) != 0)
        return -1;
    if (s.n == 0)
        return 0;
    hid_t fs = H5Scopy(s.fsel), ms = H5I_INVALID_HID;
    if (mspace == H5S_BLOCK) {
        hsize_t n = s.n;
        ms = H5Screate_simple(1, &n, NULL);
    } else {
        ms = H5Scopy(s.msel);
    }
    int st = 0;
    if (fs < 0 || ms < 0) {
        h5fl_err("cannot copy the selections");
        st = -1;
    }
    if (st == 0 && !write) {
        /* unmapped elements, missing sources and elements beyond a source's extent: the fill value */
        H5D_fill_value_t fv = H5D_FILL_VALUE_UNDEFINED;
        void *fill = NULL;
        if (H5Pfill_value_defined(d->dcpl, &fv) >= 0 && fv == H5D_FILL_VALUE_USER_DEFINED && !d->vstr &&
            !d->blob && (fill = calloc(1, d->tsize)) && H5Pget_fill_value(d->dcpl, d->type, fill) < 0) {
            free(fill);
            fill = NULL;
        }
        if (H5Dfill(fill, d->type, buf, mtype, ms) < 0) {
            h5fl_err("virtual dataset '%s': cannot fill the memory buffer with the fill value", d->o.path);
            st = -1;
        }
        free(fill);
    }
    size_t n = 0;
    if (st == 0 && H5Pget_virtual_count(d->dcpl, &n) < 0) {
        h5fl_err("virtual dataset '%s': cannot read its mappings", d->o.path);
        st = -1;
    }
    for (size_t i = 0; st == 0 && i < n; i++) {
        char *file = mapping_name(d->dcpl, i, true), *dset = mapping_name(d->dcpl, i, false);
        hid_t vsel = H5Pget_virtual_vspace(d->dcpl, i), ssel = H5Pget_virtual_srcspace(d->dcpl, i);
        hid_t msub = H5I_INVALID_HID, ssub = H5I_INVALID_HID;
        source_t src = {H5I_INVALID_HID, H5I_INVALID_HID};
        if (!file || !dset || vsel < 0 || ssel < 0) {
            h5fl_err("virtual dataset '%s': cannot read mapping %zu", d->o.path, i);
            st = -1;
        }
        /* the request's part in this mapping: its memory selection first, to skip untouched mappings
         * before opening anything, then the matching source selection (both in the request's order) */
        if (st == 0 && (msub = H5Sselect_project_intersection(fs, ms, vsel)) < 0) {
            h5fl_err("virtual dataset '%s': the request cannot be projected onto mapping %zu", d->o.path, i);
            st = -1;
        }
        if (st == 0 && H5Sget_select_npoints(msub) == 0)
            goto next;
        if (st == 0)
            st = source_open(d, file, dset, write, &src);
        if (st == 0 && src.dset >= 0 && (ssub = source_part(src.dset, vsel, ssel, fs)) < 0) {
            h5fl_err("virtual dataset '%s': mapping %zu cannot be projected onto its source %s in %s", d->o.path,
                     i, dset, file);
            st = -1;
        }
        if (st == 0 && src.dset >= 0 &&
            (write ? H5Dwrite(src.dset, mtype, msub, ssub, dxpl, buf) : H5Dread(src.dset, mtype, msub, ssub, dxpl, buf)) < 0) {
            h5fl_err("virtual dataset '%s': cannot %s its source %s in %s", d->o.path, write ? "write" : "read", dset,
                     file);
            st = -1;
        }
    next:;
        char msg[1024]; /* closing the source (a call into a connector) must not lose why this failed */
        snprintf(msg, sizeof msg, "%s", h5fl_err_msg());
        if (msub >= 0)
            H5Sclose(msub);
        if (ssub >= 0)
            H5Sclose(ssub);
        if (vsel >= 0)
            H5Sclose(vsel);
        if (ssel >= 0)
            H5Sclose(ssel);
        source_close(&src);
        free(file);
        free(dset);
        if (st != 0 && msg[0]) {
            h5fl_err_clear();
            h5fl_err("%s", msg);
        }
    }
    if (fs >= 0)
        H5Sclose(fs);
    if (ms >= 0)
        H5Sclose(ms);
    return st;
}
