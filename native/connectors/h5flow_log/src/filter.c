/* Filters (compression, shuffle, checksums, ...) applied per written extent (docs/FORMAT.md "Filters").
 *
 * HDF5 1.14 has no public function that runs a filter pipeline, and none that hands out a registered
 * filter's H5Z_class2_t. It does export (default visibility, declared H5_DLL in H5Zprivate.h) the library
 * function H5Z_find, whose signature uses public types only; we look it up at run time with dlsym, so a
 * library without it makes filtered datasets fail with a clear error instead of failing to load. Before
 * the lookup the public H5Zfilter_avail loads the filter from HDF5_PLUGIN_PATH if it is not registered
 * yet (that is where HDF5 itself loads plugins). With the class in hand the filters run exactly as HDF5's
 * H5Z_pipeline runs them: the public H5Z_func_t callback, in the dcpl's order to write, in reverse order
 * with H5Z_FLAG_REVERSE to read, an optional filter that fails is skipped and recorded in the filter mask.
 * can_apply and set_local run at dataset creation like HDF5's (on the chunk's dataspace), so the stored
 * creation list carries the same filter parameters a native dataset's would.
 */
#include "h5fl.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef herr_t (*h5z_find_fn)(bool try_, H5Z_filter_t id, H5Z_class2_t **cls);

/* H5Zfilter_avail without its traces: a filter that is not found leaves HDF5's plugin-search errors on
 * the stack, which would hide the message the connector pushes. */
static htri_t filter_avail(H5Z_filter_t id)
{
    hid_t es = H5Eget_current_stack();
    htri_t avail;
    H5E_BEGIN_TRY { avail = H5Zfilter_avail(id); }
    H5E_END_TRY
    if (es >= 0)
        H5Eset_current_stack(es);
    return avail;
}

static const H5Z_class2_t *filter_class(H5Z_filter_t id, const char *dname)
{
    /* the address of a library function: the same for every open file, no mutable state */
    h5z_find_fn find = (h5z_find_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "H5Z_find");
    if (!find) {
        h5fl_err("dataset '%s': this HDF5 library does not export H5Z_find, which h5flow_log needs to run "
                 "filters; use HDF5 1.14 built by scripts/setup.sh or create the dataset without filters",
                 dname);
        return NULL;
    }
    htri_t avail = filter_avail(id);
    H5Z_class2_t *cls = NULL;
    if (avail <= 0 || find(true, id, &cls) < 0 || !cls || !cls->filter) {
        h5fl_err("dataset '%s': filter %d is not available (neither built into HDF5 nor found as a plugin on "
                 "HDF5_PLUGIN_PATH); install the filter plugin or create the dataset without it",
                 dname, (int)id);
        return NULL;
    }
    return cls;
}

bool h5fl_filtered(hid_t dcpl) { return dcpl >= 0 && dcpl != H5P_DEFAULT && H5Pget_nfilters(dcpl) > 0; }

int h5fl_filter_prepare(hid_t dcpl, hid_t type, const char *dname)
{
    int n = H5Pget_nfilters(dcpl);
    if (n <= 0)
        return 0;
    if (H5Tis_variable_str(type) > 0 || h5fl_blob_type(type)) {
        h5fl_err("dataset '%s': h5flow_log does not apply filters to datatypes with variable-length parts; "
                 "create it without filters",
                 dname);
        return -1;
    }
    hsize_t cdims[H5S_MAX_RANK];
    int crank = H5Pget_layout(dcpl) == H5D_CHUNKED ? H5Pget_chunk(dcpl, H5S_MAX_RANK, cdims) : -1;
    if (crank <= 0) {
        h5fl_err("dataset '%s': filters need a chunked layout (as in HDF5): set a chunk shape", dname);
        return -1;
    }
    hid_t cspace = H5Screate_simple(crank, cdims, NULL);
    if (cspace < 0) {
        h5fl_err("dataset '%s': invalid chunk shape", dname);
        return -1;
    }
    int rc = -1;
    for (int i = 0; i < n; i++) {
        unsigned flags = 0, cd[32];
        size_t ncd = 32;
        char fname[64];
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof fname, fname, NULL);
        if (id < 0) {
            h5fl_err("dataset '%s': cannot read filter %d of the creation property list", dname, i);
            goto done;
        }
        if (filter_avail(id) <= 0)
            continue; /* as HDF5: a filter not available now is checked when data is written (h5py's
                       * allow_unknown_filter); an optional one is then skipped, a mandatory one fails */
        const H5Z_class2_t *cls = filter_class(id, dname);
        if (!cls)
            goto done;
        unsigned cfg = 0;
        if (H5Zget_filter_info(id, &cfg) < 0 || !(cfg & H5Z_FILTER_CONFIG_ENCODE_ENABLED)) {
            h5fl_err("dataset '%s': filter %d (%s) cannot encode in this HDF5 build; create the dataset "
                     "without it",
                     dname, (int)id, fname);
            goto done;
        }
        if (cls->can_apply) {
            htri_t ok;
            H5E_BEGIN_TRY { ok = cls->can_apply(dcpl, type, cspace); }
            H5E_END_TRY
            if (ok <= 0 && !(flags & H5Z_FLAG_OPTIONAL)) {
                h5fl_err("dataset '%s': filter %d (%s) cannot be applied to this datatype or chunk shape",
                         dname, (int)id, fname);
                goto done;
            }
        }
        if (cls->set_local) {
            herr_t st;
            H5E_BEGIN_TRY { st = cls->set_local(dcpl, type, cspace); }
            H5E_END_TRY
            if (st < 0) {
                h5fl_err("dataset '%s': filter %d (%s) failed to set its parameters for this dataset", dname,
                         (int)id, fname);
                goto done;
            }
        }
    }
    rc = 0;
done:
    H5Sclose(cspace);
    return rc;
}

int h5fl_filter_run(hid_t dcpl, bool reverse, unsigned *mask, void **buf, size_t *nbytes, size_t *bufsize,
                    uint64_t nelem, const char *dname)
{
    int n = H5Pget_nfilters(dcpl);
    if (n < 0 || n > 32) {
        h5fl_err("dataset '%s': cannot read the filter pipeline", dname);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        int i = reverse ? n - 1 - k : k;
        if (*mask & (1u << i))
            continue; /* skipped when written (an optional filter that failed) */
        unsigned flags = 0, cd[32];
        size_t ncd = 32;
        char fname[64];
        H5Z_filter_t id = H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof fname, fname, NULL);
        if (id < 0) {
            h5fl_err("dataset '%s': cannot read filter %d of the creation property list", dname, i);
            return -1;
        }
        if (ncd > 32) {
            h5fl_err("dataset '%s': filter %d (%s) has %zu parameters, more than 32", dname, (int)id, fname, ncd);
            return -1;
        }
        if ((id == H5Z_FILTER_NBIT || id == H5Z_FILTER_SCALEOFFSET) && ncd > 2) {
            /* their set_local stores the chunk's element count in cd_values[2] (H5Znbit.c,
             * H5Zscaleoffset.c: "number of elements in the chunk"); an extent has its own count */
            if (nelem > UINT_MAX) {
                h5fl_err("dataset '%s': a write of %llu elements through filter %d (%s) exceeds its limit of "
                         "%u elements per write; write in smaller pieces",
                         dname, (unsigned long long)nelem, (int)id, fname, UINT_MAX);
                return -1;
            }
            cd[2] = (unsigned)nelem;
        }
        const H5Z_class2_t *cls = filter_class(id, dname);
        if (!cls && !reverse && (flags & H5Z_FLAG_OPTIONAL)) { /* as H5Z_pipeline: skip it, note it */
            h5fl_err_clear();
            *mask |= 1u << i;
            continue;
        }
        if (!cls)
            return -1;
        size_t out;
        H5E_BEGIN_TRY
        {
            out = cls->filter(flags | (reverse ? H5Z_FLAG_REVERSE : 0), ncd, cd, *nbytes, bufsize, buf);
        }
        H5E_END_TRY
        if (out == 0) {
            if (!reverse && (flags & H5Z_FLAG_OPTIONAL)) {
                *mask |= 1u << i;
                continue;
            }
            h5fl_err(reverse ? "dataset '%s': filter %d (%s) failed to decode the data (corrupt data, or a "
                               "checksum filter found a mismatch)"
                             : "dataset '%s': filter %d (%s) failed to encode the data",
                     dname, (int)id, fname);
            return -1;
        }
        *nbytes = out;
    }
    return 0;
}
