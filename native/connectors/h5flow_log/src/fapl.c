/* File creation/access property lists: what h5flow_log honours, and a clear refusal of the rest.
 *
 * Drivers a container cannot live in (h5py's file objects, file images, multi-file drivers) never reach
 * these checks: native.c makes native HDF5 files of them. The driver check below stays for the paths that
 * open a container directly (H5Freopen, external links).
 *
 * An h5flow_log "file" is a directory of plain POSIX files (docs/FORMAT.md). A file driver (VFD) or a
 * file-creation property that asks for something else (an in-memory file, a Python file object, a
 * userblock, paged file-space management, a page buffer, ...) cannot be honoured; before this check
 * such requests were ignored silently (h5py.File(io.BytesIO(), 'w') made a directory named after the
 * object's repr and left the buffer empty). docs/FORMAT.md ("File drivers and file properties") lists
 * what is supported, what is accepted without effect, and what is refused. */
#include "h5fl.h"

#include <stdio.h>
#include <string.h>

#define H5FL_USE_NATIVE "unset HDF5_VOL_CONNECTOR to use HDF5's native connector"

/* The id of an optional MPI driver, only when the program has registered it: the macros register it on first
 * use, and registering the subfiling or IOC driver initializes MPI (a file access list cannot carry a driver
 * that is not registered). */
#define REGISTERED_ONLY(value, macro) (H5FDis_driver_registered_by_value(value) > 0 ? (macro) : H5I_INVALID_HID)

/* A printable name for a driver h5flow_log refuses. */
static void driver_name(hid_t drv, char *buf, size_t bufsz)
{
    struct {
        hid_t id;
        const char *name;
    } known[] = {
        {H5FD_CORE, "core (in-memory file)"},
        {H5FD_FAMILY, "family"},
        {H5FD_LOG, "log"},
        {H5FD_MULTI, "multi/split"},
        {H5FD_ONION, "onion"},
        {H5FD_SPLITTER, "splitter"},
    /* The optional drivers only where built (1.14.5's H5FDmirror.h misspells the fallback macro). */
#ifdef H5_HAVE_DIRECT
        {H5FD_DIRECT, "direct (O_DIRECT)"},
#endif
#ifdef H5_HAVE_SUBFILING_VFD
        {REGISTERED_ONLY(H5_VFD_SUBFILING, H5FD_SUBFILING), "subfiling"},
#endif
#ifdef H5_HAVE_IOC_VFD
        {REGISTERED_ONLY(H5_VFD_IOC, H5FD_IOC), "ioc"},
#endif
#ifdef H5_HAVE_ROS3_VFD
        {H5FD_ROS3, "ros3"},
#endif
#ifdef H5_HAVE_LIBHDFS
        {H5FD_HDFS, "hdfs"},
#endif
#ifdef H5_HAVE_MIRROR_VFD
        {H5FD_MIRROR, "mirror"},
#endif
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (known[i].id >= 0 && known[i].id == drv) {
            snprintf(buf, bufsz, "'%s'", known[i].name);
            return;
        }
    /* Drivers registered by the application have no public name lookup; h5py's one is named here. */
    htri_t reg = H5FDis_driver_registered_by_name("fileobj");
    if (reg > 0) {
        hid_t tmp = H5Pcreate(H5P_FILE_ACCESS);
        if (tmp >= 0) {
            bool same = H5Pset_driver_by_name(tmp, "fileobj", NULL) >= 0 && H5Pget_driver(tmp) == drv;
            H5Pclose(tmp);
            if (same) {
                snprintf(buf, bufsz, "'fileobj' (h5py's driver for Python file-like objects)");
                return;
            }
        }
    }
    snprintf(buf, bufsz, "with id %lld (registered by the application, not one of HDF5's)", (long long)drv);
}

static int check_fapl(const char *name, hid_t fapl)
{
    if (fapl < 0 || fapl == H5P_DEFAULT)
        return 0;
    hid_t drv = H5Pget_driver(fapl);
    if (drv < 0) {
        h5fl_err("cannot read the file driver of the file access property list for %s", name);
        return -1;
    }
    if (drv == H5FD_CORE) {
        /* With a backing store the core driver's file is, once closed (or flushed), the file on disk the
         * connector writes all along; without one (h5fl_fapl_in_memory) the container lives in memory, in
         * a private directory of a memory file system removed at close (vol_file.c). */
        size_t inc = 0;
        hbool_t backing = false;
        if (H5Pget_fapl_core(fapl, &inc, &backing) < 0) {
            h5fl_err("cannot read the core driver's settings of the file access property list for %s", name);
            return -1;
        }
    } else if (drv != H5FD_SEC2 && drv != H5FD_STDIO && drv != H5FD_MPIO) {
        char dn[160];
        driver_name(drv, dn, sizeof dn);
        h5fl_err("h5flow_log cannot honour the file driver %s for %s: an h5flow_log file is a directory "
                 "of plain POSIX files. Use the sec2 (default), stdio or mpio driver with h5flow_log, or "
                 "unset HDF5_VOL_CONNECTOR to use this driver with HDF5's native connector",
                 dn, name);
        return -1;
    }
    size_t pbuf = 0;
    unsigned min_meta = 0, min_raw = 0;
    if (H5Pget_page_buffer_size(fapl, &pbuf, &min_meta, &min_raw) < 0 || pbuf != 0) {
        h5fl_err("h5flow_log has no page buffer (page buffer size %zu asked for %s): set it to 0 "
                 "(h5py: no page_buf_size), or " H5FL_USE_NATIVE,
                 pbuf, name);
        return -1;
    }
    H5F_close_degree_t degree = H5F_CLOSE_DEFAULT;
    if (H5Pget_fclose_degree(fapl, &degree) < 0 ||
        (degree != H5F_CLOSE_DEFAULT && degree != H5F_CLOSE_WEAK)) {
        h5fl_err("h5flow_log closes a file only once its last object is closed (H5F_CLOSE_WEAK); the "
                 "close degree %d asked for %s is not supported: use H5F_CLOSE_DEFAULT or H5F_CLOSE_WEAK, "
                 "or " H5FL_USE_NATIVE,
                 (int)degree, name);
        return -1;
    }
    H5F_flush_cb_t cb = NULL;
    void *udata = NULL;
    if (H5Pget_object_flush_cb(fapl, &cb, &udata) < 0 || cb != NULL) {
        h5fl_err("h5flow_log does not call object flush callbacks (H5Pset_object_flush_cb on the file "
                 "access property list for %s): remove the callback, or " H5FL_USE_NATIVE,
                 name);
        return -1;
    }
    return 0;
}

static int check_fcpl(const char *name, hid_t fcpl)
{
    if (fcpl < 0 || fcpl == H5P_DEFAULT)
        return 0;
    hsize_t ub = 0; /* a userblock is honoured: the file @userblock (vol_file.c) */
    if (H5Pget_userblock(fcpl, &ub) < 0 || ub > ((hsize_t)1 << 30)) {
        h5fl_err("a userblock of %llu bytes asked for %s: h5flow_log keeps userblocks up to 1 GiB",
                 (unsigned long long)ub, name);
        return -1;
    }
    H5F_fspace_strategy_t strategy = H5F_FSPACE_STRATEGY_FSM_AGGR;
    hbool_t persist = false;
    hsize_t threshold = 1;
    if (H5Pget_file_space_strategy(fcpl, &strategy, &persist, &threshold) < 0 ||
        strategy != H5F_FSPACE_STRATEGY_FSM_AGGR || persist || threshold != 1) {
        h5fl_err("h5flow_log manages no free space inside its files (file space strategy %d, persist %d, "
                 "threshold %llu asked for %s): keep the defaults (h5py: no fs_strategy, fs_persist, "
                 "fs_threshold), or " H5FL_USE_NATIVE,
                 (int)strategy, (int)persist, (unsigned long long)threshold, name);
        return -1;
    }
    /* The defaults, read from HDF5's default list: H5F_FILE_SPACE_PAGE_SIZE_DEF and 8/8 in 1.14. */
    hsize_t page = 0, page_def = 0;
    size_t addr = 0, size = 0, addr_def = 0, size_def = 0;
    if (H5Pget_file_space_page_size(fcpl, &page) < 0 ||
        H5Pget_file_space_page_size(H5P_FILE_CREATE_DEFAULT, &page_def) < 0 || page != page_def) {
        h5fl_err("h5flow_log files are not paged (file space page size %llu asked for %s): keep the "
                 "default (h5py: no fs_page_size), or " H5FL_USE_NATIVE,
                 (unsigned long long)page, name);
        return -1;
    }
    if (H5Pget_sizes(fcpl, &addr, &size) < 0 ||
        H5Pget_sizes(H5P_FILE_CREATE_DEFAULT, &addr_def, &size_def) < 0 || addr != addr_def ||
        size != size_def) {
        h5fl_err("h5flow_log has its own offset and length encoding (H5Pset_sizes %zu/%zu asked for %s): "
                 "keep the defaults (%zu/%zu), or " H5FL_USE_NATIVE,
                 addr, size, name, addr_def, size_def);
        return -1;
    }
    return 0;
}

bool h5fl_fapl_in_memory(hid_t fapl)
{
    size_t inc = 0;
    hbool_t backing = true;
    if (fapl < 0 || fapl == H5P_DEFAULT || H5Pget_driver(fapl) != H5FD_CORE)
        return false;
    return H5Pget_fapl_core(fapl, &inc, &backing) >= 0 && !backing;
}

int h5fl_check_file_plists(const char *name, hid_t fcpl, hid_t fapl)
{
    int rc;
    H5E_BEGIN_TRY { rc = check_fapl(name, fapl) != 0 || check_fcpl(name, fcpl) != 0 ? -1 : 0; }
    H5E_END_TRY
    return rc;
}
