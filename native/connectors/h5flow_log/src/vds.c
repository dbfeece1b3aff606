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
 * through the native connector). Names are looked up as native HDF5 does (open_source_file): an absolute
 * name as given, then each entry of $HDF5_VDS_PREFIX, the prefix ($HDF5_VDS_PREFIX, else the access list's),
 * the container's directory and the name as given (an absolute name by its last component). A source file or dataset
 * that does not exist reads as the fill value (native semantics); a write to it fails. A source dataset
 * smaller than its mapping's source selection fails the read, as in native HDF5.
 *
 * Unlimited and printf-style (%b) mappings: the extent is worked out again at every H5Dget_space, read
 * and write from the sources' current extents (or which printf-named sources exist), by native HDF5's
 * rules; see "unlimited mappings" below. Nothing of it is stored: the container keeps the creation list.
 *
 * Refused: virtual datasets opened by more than one MPI process (a source open would have to be
 * collective inside an independent read).
 */
#include "dset.h"

#include <errno.h>
#include <fcntl.h>
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
    return 0;
}

/* Open one candidate source file through its connector (a container through this one, anything else through
 * the native connector), into *id. 0: opened; 1: passed over (the name is NULL, or the file does not exist
 * or cannot be opened with this access, as native's "try" open passes it over); -1: the file opens but is no
 * HDF5 file or container (native fails the read there too), error recorded. */
static int try_source(h5fl_dset_t *d, const char *path, bool write, hid_t *id)
{
    *id = H5I_INVALID_HID;
    if (!path)
        return 1;
    bool container = h5fl_exists(path, H5FL_MARKER);
    if (container ? access(path, write ? R_OK | W_OK : R_OK) != 0 : false)
        return 1;
    if (!container) {
        int fd = open(path, write ? O_RDWR : O_RDONLY);
        if (fd < 0)
            return 1;
        close(fd);
    }
    h5fl_file_t *f = d->o.file;
    hid_t fapl = container ? H5Pcopy(f->fapl) : H5Pcreate(H5P_FILE_ACCESS);
    if (fapl >= 0 && !container && H5Pset_vol(fapl, H5VL_NATIVE, NULL) < 0) {
        H5Pclose(fapl);
        fapl = H5I_INVALID_HID;
    }
    if (fapl >= 0) {
        H5E_BEGIN_TRY { *id = H5Fopen(path, write ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl); }
        H5E_END_TRY
        H5Pclose(fapl);
    }
    if (*id >= 0)
        return 0;
    h5fl_err("virtual dataset '%s': its source file %s cannot be opened as an HDF5 file or container", d->o.path,
             path);
    return -1;
}

/* Open the source file `file` (not "."), trying native HDF5's candidates in its order
 * (h5fl_lookup_candidates: $HDF5_VDS_PREFIX's entries, then the dataset's prefix built from
 * $HDF5_VDS_PREFIX or the access list's, with ${ORIGIN}). A candidate that does not exist or cannot be
 * opened is passed over; the first that opens is the source. 0 with *id set (negative: none found), or -1
 * when a candidate exists but is no HDF5 file, or on error (recorded). */
static int open_source_file(h5fl_dset_t *d, const char *file, bool write, hid_t *id)
{
    char prop[PATH_MAX] = "";
    if (H5Pget_virtual_prefix(d->dapl, prop, sizeof prop) < 0)
        prop[0] = '\0';
    bool err;
    char *prefix = h5fl_build_prefix("HDF5_VDS_PREFIX", prop, d->o.file, &err);
    char **cand = err ? NULL : h5fl_lookup_candidates(file, "HDF5_VDS_PREFIX", prefix, d->o.file);
    free(prefix);
    if (!cand)
        return -1;
    int st = 1;
    for (size_t i = 0; cand[i] && st == 1; i++)
        st = try_source(d, cand[i], write, id);
    h5fl_lookup_free(cand);
    return st < 0 ? -1 : 0;
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
        if (open_source_file(d, file, write, &s->file) != 0)
            return -1;
        if (s->file < 0) {
            if (write)
                h5fl_err("virtual dataset '%s': cannot open its source file %s for writing", d->o.path, file);
            return write ? -1 : 0; /* an unreadable source reads as the fill value, as native */
        }
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

/* The request's part in a mapping, as a selection of the source dataset's current dataspace. A mapping's
 * source space records the source's extent when the mapping was made (it may have grown since, up to that
 * space's maximum), or none at all (a list read back from a native file before its sources were opened:
 * rank 0, "all" selected); the selection is placed on the dataset's own space, as native HDF5 does. */
static hid_t source_part(hid_t sdset, hid_t vsel, hid_t ssel, hid_t fs)
{
    hid_t cur = H5Dget_space(sdset), part = H5I_INVALID_HID;
    if (cur < 0)
        return H5I_INVALID_HID;
    herr_t ok;
    if (H5Sget_simple_extent_ndims(ssel) == H5Sget_simple_extent_ndims(cur))
        ok = H5Sselect_copy(cur, ssel);
    else if (H5Sget_select_type(ssel) == H5S_SEL_ALL)
        ok = H5Sselect_all(cur);
    else
        ok = -1;
    if (ok >= 0)
        part = H5Sselect_project_intersection(vsel, cur, fs);
    H5Sclose(cur);
    return part;
}

/* ------------------------------------------------------------------------------- unlimited mappings
 *
 * A mapping is fixed (both selections finite), unlimited (both selections reach H5S_UNLIMITED in one
 * dimension: the virtual extent follows the source's current extent) or printf-style (the virtual selection
 * is unlimited, the source selection finite, and %b in a source name stands for the block's index: block j
 * of the virtual selection maps to the source named with j). Each access works out the dataset's current
 * extent and every mapping's part of it the way native HDF5 does (H5Dvirtual.c, H5Shyper.c: the view,
 * H5D_VDS_LAST_AVAILABLE or H5D_VDS_FIRST_MISSING, and the printf gap of the dataset access list): the
 * helpers below follow H5S__hyper_get_clip_diminfo, H5S_hyper_get_clip_extent_match,
 * H5S__hyper_get_clip_extent_real and H5S_hyper_clip_unlim, through the public API. */

/* A regular hyperslab selection; dim: its unlimited dimension, -1 when it has none. */
typedef struct hslab {
    int rank, dim;
    hsize_t start[H5S_MAX_RANK], stride[H5S_MAX_RANK], count[H5S_MAX_RANK], block[H5S_MAX_RANK];
} hslab_t;

static void hslab_get(hid_t sel, hslab_t *h)
{
    h->dim = -1;
    h->rank = H5Sget_simple_extent_ndims(sel);
    if (h->rank <= 0 || H5Sget_select_type(sel) != H5S_SEL_HYPERSLABS || H5Sis_regular_hyperslab(sel) <= 0 ||
        H5Sget_regular_hyperslab(sel, h->start, h->stride, h->count, h->block) < 0)
        return;
    for (int k = 0; k < h->rank; k++)
        if (h->count[k] == H5S_UNLIMITED || h->block[k] == H5S_UNLIMITED)
            h->dim = k;
}

/* Count and block of the unlimited dimension clipped to an extent of `clip`. */
static void clip_diminfo(hsize_t start, hsize_t stride, hsize_t *count, hsize_t *block, hsize_t clip)
{
    if (start >= clip) {
        if (*block == H5S_UNLIMITED)
            *block = 0;
        else
            *count = 0;
    } else if (*block == H5S_UNLIMITED || *block == stride) {
        *block = clip - start;
        *count = 1;
    } else {
        *count = (clip - start + stride - 1) / stride;
    }
}

/* Slices (positions of the unlimited dimension) selected by h clipped to an extent of `clip`. */
static hsize_t clip_slices(const hslab_t *h, hsize_t clip)
{
    int k = h->dim;
    hsize_t count = h->count[k], block = h->block[k];
    clip_diminfo(h->start[k], h->stride[k], &count, &block, clip);
    if (block == 0 || count == 0)
        return 0;
    if (count == 1)
        return block;
    hsize_t n = block * count, span = h->stride[k] * (count - 1) + block, avail = clip - h->start[k];
    return span > avail ? n - (span - avail) : n;
}

/* The extent to clip h to so that it selects `slices` slices; incl_trail: up to the next block's start. */
static hsize_t clip_extent(const hslab_t *h, hsize_t slices, bool incl_trail)
{
    int k = h->dim;
    if (slices == 0)
        return incl_trail ? h->start[k] : 0;
    if (h->block[k] == H5S_UNLIMITED || h->block[k] == h->stride[k])
        return h->start[k] + slices;
    hsize_t count = slices / h->block[k], rem = slices - count * h->block[k];
    if (rem > 0)
        return h->start[k] + count * h->stride[k] + rem;
    return incl_trail ? h->start[k] + count * h->stride[k] : h->start[k] + (count - 1) * h->stride[k] + h->block[k];
}

/* h clipped to an extent of `clip` in its unlimited dimension (a last block cut short included), as a
 * selection of a new dataspace of extent dims. */
static hid_t clip_sel(const hslab_t *h, hsize_t clip, const hsize_t *dims)
{
    hid_t sp = H5Screate_simple(h->rank, dims, NULL);
    if (sp < 0)
        return H5I_INVALID_HID;
    int k = h->dim;
    hsize_t count[H5S_MAX_RANK], block[H5S_MAX_RANK], zero[H5S_MAX_RANK] = {0}, one[H5S_MAX_RANK], box[H5S_MAX_RANK];
    memcpy(count, h->count, sizeof count);
    memcpy(block, h->block, sizeof block);
    clip_diminfo(h->start[k], h->stride[k], &count[k], &block[k], clip);
    herr_t ok;
    if (count[k] == 0 || block[k] == 0) {
        ok = H5Sselect_none(sp);
    } else {
        ok = H5Sselect_hyperslab(sp, H5S_SELECT_SET, h->start, h->stride, count, block);
        if (ok >= 0 && h->stride[k] * (count[k] - 1) + block[k] > clip - h->start[k]) {
            for (int j = 0; j < h->rank; j++) {
                one[j] = 1;
                box[j] = j == k ? clip : h->start[j] + h->stride[j] * (count[j] - 1) + block[j];
            }
            ok = H5Sselect_hyperslab(sp, H5S_SELECT_AND, zero, NULL, one, box);
        }
    }
    if (ok < 0) {
        H5Sclose(sp);
        return H5I_INVALID_HID;
    }
    return sp;
}

/* A source name with its printf substitutions made: %b becomes `blockno`, %% becomes %; *nsubs counts the %b.
 * NULL on a format specifier HDF5 does not know (H5Pset_virtual refuses those). */
static char *source_name(const char *pat, hsize_t blockno, size_t *nsubs)
{
    size_t len = strlen(pat), cap = len + 1, nb = 0;
    for (const char *p = pat; (p = strchr(p, '%')); p += 2)
        nb += p[1] == 'b';
    cap += nb * 20;
    char *out = malloc(cap), *o = out;
    if (!out)
        return NULL;
    for (const char *p = pat; *p; p++) {
        if (*p != '%') {
            *o++ = *p;
            continue;
        }
        if (p[1] == 'b')
            o += snprintf(o, cap - (size_t)(o - out), "%llu", (unsigned long long)blockno);
        else if (p[1] == '%')
            *o++ = '%';
        else {
            free(out);
            return NULL;
        }
        p++;
    }
    *o = '\0';
    if (nsubs)
        *nsubs = nb;
    return out;
}

/* One part of the dataset's current extent read from (written to) one source dataset. */
typedef struct part {
    char *file, *dset; /* names with the printf substitutions made */
    hid_t vsel, ssel;  /* finite selections: of the virtual dataset, and of the source (placed on the source's
                        * current dataspace at each access, see source_part) */
} part_t;

/* What the dataset is now: its extent and the parts that map it. */
typedef struct plan {
    part_t *parts;
    size_t n, cap;
    int rank;
    hsize_t dims[H5S_MAX_RANK];
} plan_t;

static void plan_free(plan_t *pl)
{
    for (size_t i = 0; i < pl->n; i++) {
        free(pl->parts[i].file);
        free(pl->parts[i].dset);
        if (pl->parts[i].vsel >= 0)
            H5Sclose(pl->parts[i].vsel);
        if (pl->parts[i].ssel >= 0)
            H5Sclose(pl->parts[i].ssel);
    }
    free(pl->parts);
    pl->parts = NULL;
    pl->n = pl->cap = 0;
}

/* Takes file, dset, vsel and ssel (closed or freed on failure). */
static int plan_add(plan_t *pl, char *file, char *dset, hid_t vsel, hid_t ssel)
{
    if (file && dset && vsel >= 0 && ssel >= 0 && pl->n == pl->cap) {
        size_t cap = pl->cap ? 2 * pl->cap : 8;
        part_t *p = realloc(pl->parts, cap * sizeof *p);
        if (p) {
            pl->parts = p;
            pl->cap = cap;
        }
    }
    if (!file || !dset || vsel < 0 || ssel < 0 || pl->n == pl->cap) {
        free(file);
        free(dset);
        if (vsel >= 0)
            H5Sclose(vsel);
        if (ssel >= 0)
            H5Sclose(ssel);
        h5fl_err("out of memory (or a dataspace error) while mapping a virtual dataset");
        return -1;
    }
    pl->parts[pl->n++] = (part_t){file, dset, vsel, ssel};
    return 0;
}

/* One mapping as read from the creation list, with what the first pass learnt of its sources. */
typedef struct mapping {
    char *file, *dset; /* as given (printf patterns) */
    hid_t vs, ss;
    hslab_t vh, sh;
    bool printf_style;
    bool found;                 /* unlimited: its source exists */
    hsize_t sdims[H5S_MAX_RANK]; /* unlimited: the source's current extent */
    hsize_t clip;               /* unlimited and printf: the virtual extent it reaches */
    hsize_t nused;              /* printf: blocks up to and including the last source found */
} mapping_t;

static void mapping_free(mapping_t *m)
{
    free(m->file);
    free(m->dset);
    if (m->vs >= 0)
        H5Sclose(m->vs);
    if (m->ss >= 0)
        H5Sclose(m->ss);
}

/* Whether a source exists (opens); its current extent in dims when it does. */
static int source_probe(h5fl_dset_t *d, const char *file, const char *dset, bool *found, hsize_t *dims)
{
    source_t src = {H5I_INVALID_HID, H5I_INVALID_HID};
    if (source_open(d, file, dset, false, &src) != 0)
        return -1;
    *found = src.dset >= 0;
    int st = 0;
    if (*found && dims) {
        hid_t sp = H5Dget_space(src.dset);
        st = sp >= 0 && H5Sget_simple_extent_dims(sp, dims, NULL) >= 0 ? 0 : -1;
        if (sp >= 0)
            H5Sclose(sp);
        if (st)
            h5fl_err("virtual dataset '%s': cannot read the extent of its source %s in %s", d->o.path, dset, file);
    }
    source_close(&src);
    return st;
}

/* First pass over mapping i: read it, open what its extent depends on, and fold it into new_dims/min_dims. */
static int mapping_scan(h5fl_dset_t *d, size_t i, H5D_vds_view_t view, hsize_t gap, mapping_t *m,
                        hsize_t *new_dims, hsize_t *min_dims)
{
    m->file = mapping_name(d->dcpl, i, true);
    m->dset = mapping_name(d->dcpl, i, false);
    m->vs = H5Pget_virtual_vspace(d->dcpl, i);
    m->ss = H5Pget_virtual_srcspace(d->dcpl, i);
    if (!m->file || !m->dset || m->vs < 0 || m->ss < 0) {
        h5fl_err("virtual dataset '%s': cannot read mapping %zu", d->o.path, i);
        return -1;
    }
    hslab_get(m->vs, &m->vh);
    hslab_get(m->ss, &m->sh);
    size_t nf = 0, nd = 0;
    char *f0 = source_name(m->file, 0, &nf), *d0 = source_name(m->dset, 0, &nd);
    free(f0);
    free(d0);
    m->printf_style = nf + nd > 0;
    /* the smallest extent the fixed parts need (an unlimited selection's unlimited dimension excluded) */
    H5S_sel_type t = H5Sget_select_type(m->vs);
    if (t == H5S_SEL_HYPERSLABS || t == H5S_SEL_POINTS) {
        hsize_t lo[H5S_MAX_RANK], hi[H5S_MAX_RANK];
        if (m->vh.dim >= 0) {
            for (int k = 0; k < m->vh.rank; k++)
                hi[k] = m->vh.start[k] + m->vh.stride[k] * (m->vh.count[k] - 1) + m->vh.block[k] - 1;
        } else if (H5Sget_select_bounds(m->vs, lo, hi) < 0) {
            h5fl_err("virtual dataset '%s': cannot read the bounds of mapping %zu", d->o.path, i);
            return -1;
        }
        for (int k = 0; k < m->vh.rank; k++)
            if (k != m->vh.dim && hi[k] >= min_dims[k])
                min_dims[k] = hi[k] + 1;
    }
    if (m->vh.dim < 0)
        return 0;
    int k = m->vh.dim;
    if (!m->printf_style) {
        if (m->sh.dim < 0) {
            h5fl_err("virtual dataset '%s': mapping %zu has an unlimited virtual selection, a limited source "
                     "selection and no printf-style (%%b) source name", d->o.path, i);
            return -1;
        }
        char *file = source_name(m->file, 0, NULL), *dset = source_name(m->dset, 0, NULL);
        int st = file && dset ? source_probe(d, file, dset, &m->found, m->sdims) : -1;
        free(file);
        free(dset);
        if (st)
            return -1;
        m->clip = m->found ? clip_extent(&m->vh, clip_slices(&m->sh, m->sdims[m->sh.dim]),
                                         view == H5D_VDS_FIRST_MISSING)
                           : 0;
    } else {
        hsize_t first_missing = 0;
        for (hsize_t j = 0; j <= gap + first_missing; j++) {
            char *file = source_name(m->file, j, NULL), *dset = source_name(m->dset, j, NULL);
            bool found = false;
            int st = file && dset ? source_probe(d, file, dset, &found, NULL) : -1;
            free(file);
            free(dset);
            if (st)
                return -1;
            if (found)
                first_missing = j + 1;
        }
        m->nused = first_missing;
        if (first_missing == 0)
            m->clip = 0;
        else if (view == H5D_VDS_LAST_AVAILABLE)
            m->clip = m->vh.start[k] + (first_missing - 1) * m->vh.stride[k] + m->vh.block[k];
        else
            m->clip = m->vh.start[k] + first_missing * m->vh.stride[k];
    }
    if (new_dims[k] == HSIZE_UNDEF || (view == H5D_VDS_FIRST_MISSING ? m->clip < new_dims[k] : m->clip > new_dims[k]))
        new_dims[k] = m->clip;
    return 0;
}

/* Second pass: mapping m's parts of the extent pl->dims. */
static int mapping_parts(const mapping_t *m, H5D_vds_view_t view, plan_t *pl)
{
    if (m->vh.dim < 0) /* fixed */
        return plan_add(pl, source_name(m->file, 0, NULL), source_name(m->dset, 0, NULL), H5Scopy(m->vs),
                        H5Scopy(m->ss));
    int k = m->vh.dim;
    if (!m->printf_style) {
        if (!m->found) /* a missing source: the fill value */
            return 0;
        hsize_t vclip = view == H5D_VDS_LAST_AVAILABLE ? m->clip : pl->dims[k];
        hsize_t sclip = view == H5D_VDS_LAST_AVAILABLE ? m->sdims[m->sh.dim]
                                                       : clip_extent(&m->sh, clip_slices(&m->vh, vclip), false);
        return plan_add(pl, source_name(m->file, 0, NULL), source_name(m->dset, 0, NULL),
                        clip_sel(&m->vh, vclip, pl->dims), clip_sel(&m->sh, sclip, m->sdims));
    }
    /* printf: block j of the virtual selection from source j, cut at the extent */
    hslab_t b = m->vh;
    b.count[k] = 1;
    b.dim = -1;
    hsize_t zero[H5S_MAX_RANK] = {0}, one[H5S_MAX_RANK];
    for (int j = 0; j < b.rank; j++)
        one[j] = 1;
    for (hsize_t j = 0; j < m->nused; j++) {
        hsize_t start[H5S_MAX_RANK];
        memcpy(start, b.start, sizeof start);
        start[k] = b.start[k] + j * b.stride[k];
        if (start[k] >= pl->dims[k])
            break;
        hid_t whole = H5Screate_simple(b.rank, pl->dims, NULL), cut = H5I_INVALID_HID, ssel = H5I_INVALID_HID;
        if (whole >= 0 && H5Sselect_hyperslab(whole, H5S_SELECT_SET, start, b.stride, b.count, b.block) >= 0 &&
            (cut = H5Scopy(whole)) >= 0 && H5Sselect_hyperslab(cut, H5S_SELECT_AND, zero, NULL, one, pl->dims) >= 0)
            ssel = H5Sget_select_npoints(cut) == H5Sget_select_npoints(whole)
                       ? H5Scopy(m->ss)
                       : H5Sselect_project_intersection(whole, m->ss, cut);
        if (whole >= 0)
            H5Sclose(whole);
        if (plan_add(pl, source_name(m->file, j, NULL), source_name(m->dset, j, NULL), cut, ssel) != 0)
            return -1;
    }
    return 0;
}

/* The dataset's current extent and parts (opening the sources of unlimited and printf-style mappings). */
static int vds_plan(h5fl_dset_t *d, plan_t *pl)
{
    memset(pl, 0, sizeof *pl);
    pl->rank = H5Sget_simple_extent_ndims(d->space);
    size_t n = 0;
    H5D_vds_view_t view = H5D_VDS_LAST_AVAILABLE;
    hsize_t gap = 0;
    if (pl->rank < 0 || H5Sget_simple_extent_dims(d->space, pl->dims, NULL) < 0 ||
        H5Pget_virtual_count(d->dcpl, &n) < 0 || H5Pget_virtual_view(d->dapl, &view) < 0 ||
        H5Pget_virtual_printf_gap(d->dapl, &gap) < 0) {
        h5fl_err("virtual dataset '%s': cannot read its extent, mappings or access list", d->o.path);
        return -1;
    }
    if (view != H5D_VDS_LAST_AVAILABLE) /* the gap only widens the search for the last source */
        gap = 0;
    mapping_t *maps = calloc(n ? n : 1, sizeof *maps);
    if (!maps) {
        h5fl_err("out of memory");
        return -1;
    }
    hsize_t new_dims[H5S_MAX_RANK], min_dims[H5S_MAX_RANK] = {0};
    for (int k = 0; k < H5S_MAX_RANK; k++)
        new_dims[k] = HSIZE_UNDEF;
    int st = 0;
    for (size_t i = 0; i < n; i++)
        maps[i].vs = maps[i].ss = H5I_INVALID_HID;
    for (size_t i = 0; st == 0 && i < n; i++)
        st = mapping_scan(d, i, view, gap, &maps[i], new_dims, min_dims);
    for (int k = 0; st == 0 && k < pl->rank; k++)
        if (new_dims[k] != HSIZE_UNDEF)
            pl->dims[k] = new_dims[k] < min_dims[k] ? min_dims[k] : new_dims[k];
    for (size_t i = 0; st == 0 && i < n; i++)
        st = mapping_parts(&maps[i], view, pl);
    for (size_t i = 0; i < n; i++)
        mapping_free(&maps[i]);
    free(maps);
    if (st)
        plan_free(pl);
    return st;
}

/* Make d->space the extent the mappings give now (unchanged for a dataset of fixed mappings only). */
static int vds_set_extent(h5fl_dset_t *d, const plan_t *pl)
{
    hsize_t dims[H5S_MAX_RANK], maxd[H5S_MAX_RANK];
    if (H5Sget_simple_extent_dims(d->space, dims, maxd) < 0)
        return -1;
    if (!memcmp(dims, pl->dims, (size_t)pl->rank * sizeof *dims))
        return 0;
    for (int k = 0; k < pl->rank; k++)
        if (maxd[k] != H5S_UNLIMITED && pl->dims[k] > maxd[k]) {
            h5fl_err("virtual dataset '%s': its mappings reach %llu in dimension %d, beyond its maximum %llu",
                     d->o.path, (unsigned long long)pl->dims[k], k, (unsigned long long)maxd[k]);
            return -1;
        }
    if (H5Sset_extent_simple(d->space, pl->rank, pl->dims, maxd) < 0) {
        h5fl_err("virtual dataset '%s': cannot set its extent", d->o.path);
        return -1;
    }
    return 0;
}

/* Whether any mapping is unlimited or printf-style (its virtual selection reaches H5S_UNLIMITED). */
static bool vds_unlimited(h5fl_dset_t *d)
{
    size_t n = 0;
    bool any = false;
    H5Pget_virtual_count(d->dcpl, &n);
    for (size_t i = 0; !any && i < n; i++) {
        hid_t vs = H5Pget_virtual_vspace(d->dcpl, i);
        hslab_t h;
        if (vs < 0)
            return true; /* let vds_plan say what is wrong */
        hslab_get(vs, &h);
        any = h.dim >= 0;
        H5Sclose(vs);
    }
    return any;
}

int h5fl_vds_extent(h5fl_dset_t *d)
{
    if (!vds_unlimited(d)) /* fixed mappings only: the extent is the one created */
        return 0;
    if (d->o.file->comm != MPI_COMM_NULL && d->o.file->size > 1) { /* opening sources: not inside H5Dget_space */
        h5fl_err("virtual dataset '%s': h5flow_log works out the extent of unlimited or printf-style mappings "
                 "in one process only",
                 d->o.path);
        return -1;
    }
    plan_t pl;
    if (vds_plan(d, &pl) != 0)
        return -1;
    int st = vds_set_extent(d, &pl);
    plan_free(&pl);
    return st;
}

int h5fl_vds_io(h5fl_dset_t *d, hid_t mtype, hid_t mspace, hid_t fspace, hid_t dxpl, void *buf, bool write)
{
    h5fl_file_t *f = d->o.file;
    if (f->comm != MPI_COMM_NULL && f->size > 1) {
        h5fl_err("virtual dataset '%s': h5flow_log reads and writes virtual datasets in one process only",
                 d->o.path);
        return -1;
    }
    plan_t pl; /* the extent may have moved with the sources: the request is checked against the new one */
    if (vds_plan(d, &pl) != 0)
        return -1;
    sel_t s;
    if (vds_set_extent(d, &pl) != 0 || h5fl_resolve_sel(d, mspace, fspace, &s) != 0) {
        plan_free(&pl);
        return -1;
    }
    if (s.n == 0) {
        plan_free(&pl);
        return 0;
    }
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
    for (size_t i = 0; st == 0 && i < pl.n; i++) {
        const part_t *p = &pl.parts[i];
        hid_t msub = H5I_INVALID_HID, ssub = H5I_INVALID_HID;
        source_t src = {H5I_INVALID_HID, H5I_INVALID_HID};
        /* the request's part in this mapping: its memory selection first, to skip untouched mappings
         * before opening anything, then the matching source selection (both in the request's order) */
        if ((msub = H5Sselect_project_intersection(fs, ms, p->vsel)) < 0) {
            h5fl_err("virtual dataset '%s': the request cannot be projected onto its mapping of %s in %s",
                     d->o.path, p->dset, p->file);
            st = -1;
        }
        if (st == 0 && H5Sget_select_npoints(msub) == 0)
            goto next;
        if (st == 0)
            st = source_open(d, p->file, p->dset, write, &src);
        if (st == 0 && src.dset >= 0 && (ssub = source_part(src.dset, p->vsel, p->ssel, fs)) < 0) {
            h5fl_err("virtual dataset '%s': its mapping cannot be projected onto its source %s in %s", d->o.path,
                     p->dset, p->file);
            st = -1;
        }
        if (st == 0 && src.dset >= 0 &&
            (write ? H5Dwrite(src.dset, mtype, msub, ssub, dxpl, buf) : H5Dread(src.dset, mtype, msub, ssub, dxpl, buf)) < 0) {
            h5fl_err("virtual dataset '%s': cannot %s its source %s in %s", d->o.path, write ? "write" : "read",
                     p->dset, p->file);
            st = -1;
        }
    next:;
        char msg[1024]; /* closing the source (a call into a connector) must not lose why this failed */
        snprintf(msg, sizeof msg, "%s", h5fl_err_msg());
        if (msub >= 0)
            H5Sclose(msub);
        if (ssub >= 0)
            H5Sclose(ssub);
        source_close(&src);
        if (st != 0 && msg[0]) {
            h5fl_err_clear();
            h5fl_err("%s", msg);
        }
    }
    plan_free(&pl);
    if (fs >= 0)
        H5Sclose(fs);
    if (ms >= 0)
        H5Sclose(ms);
    return st;
}
