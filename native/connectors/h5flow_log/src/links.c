/* Soft links (docs/FORMAT.md "Links"): a soft link is a directory holding one file, @softlink, whose
 * bytes are the link's target path. A directory is used (rather than a file beside the objects) so that
 * a link and an object of the same name collide when either is renamed to the name (util.c), and moves
 * and deletions of links are the same renames and removals as those of objects. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* renameat2, RENAME_EXCHANGE */
#endif
#include "h5fl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <limits.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define H5FL_SOFT_MAX 65536 /* bytes of a soft link's target that are read back */

char *h5fl_softlink_read(const char *dir)
{
    char *p = h5fl_join(dir, H5FL_SOFT_FILE);
    void *buf = NULL;
    size_t len = 0;
    int st = p ? h5fl_read_file(p, &buf, &len) : -1;
    free(p);
    if (st != 0)
        return NULL;
    if (len == 0 || len > H5FL_SOFT_MAX || memchr(buf, '\0', len)) {
        h5fl_err("soft link file %s/" H5FL_SOFT_FILE " is damaged (empty, too long or holding a NUL byte)",
                 dir);
        free(buf);
        return NULL;
    }
    char *s = malloc(len + 1);
    if (!s) {
        h5fl_err("out of memory");
        free(buf);
        return NULL;
    }
    memcpy(s, buf, len);
    s[len] = '\0';
    free(buf);
    return s;
}

int h5fl_softlink_create(const char *dir, const char *path, const char *target, bool sync)
{
    size_t len = strlen(target);
    if (len == 0 || len > H5FL_SOFT_MAX) {
        h5fl_err("cannot create soft link '%s': its target must be 1 to %d bytes long", path, H5FL_SOFT_MAX);
        return -1;
    }
    return h5fl_write_file_atomic(dir, H5FL_SOFT_FILE, target, len, sync);
}

/* ---------------------------------------------------------------- creation order
 * A group (or the root) whose links track creation order holds @corder, and an object whose attributes
 * track it holds @acorder: decimal text, the next order to give. A link of such a group holds its order
 * in @crt inside its directory; an attribute in @acrt.<escaped name> beside its @attr file. Orders are
 * given by rank 0 when the link or attribute is created, moved in, copied in or renamed. */
#define H5FL_ACRT_PREFIX "@acrt."

static int read_u64_flags(const char *dir, const char *name, uint64_t *v, unsigned *flags);
int h5fl_read_u64(const char *dir, const char *name, uint64_t *v) { return read_u64_flags(dir, name, v, NULL); }

static int read_u64_flags(const char *dir, const char *name, uint64_t *v, unsigned *flags)
{
    char *p = h5fl_join(dir, name);
    void *buf = NULL;
    size_t len = 0;
    int st = p ? h5fl_read_file(p, &buf, &len) : -1;
    free(p);
    if (st != 0)
        return -1;
    char txt[32];
    if (len == 0 || len >= sizeof txt) {
        free(buf);
        h5fl_err("creation order file %s/%s is damaged", dir, name);
        return -1;
    }
    memcpy(txt, buf, len);
    txt[len] = '\0';
    free(buf);
    char *end;
    errno = 0;
    unsigned long long n = strtoull(txt, &end, 10);
    unsigned long fl = H5P_CRT_ORDER_TRACKED;
    if (*end == ' ') { /* counters: "<next> <H5P_CRT_ORDER_* flags>" */
        char *e2;
        fl = strtoul(end + 1, &e2, 10);
        end = e2;
    }
    if (errno || end == txt || (*end && *end != '\n')) {
        h5fl_err("creation order file %s/%s is damaged", dir, name);
        return -1;
    }
    *v = n;
    if (flags)
        *flags = (unsigned)fl;
    return 0;
}

static int write_u64_flags(const char *dir, const char *name, uint64_t v, unsigned flags, bool sync)
{
    char txt[48];
    int n = flags ? snprintf(txt, sizeof txt, "%llu %u\n", (unsigned long long)v, flags)
                  : snprintf(txt, sizeof txt, "%llu\n", (unsigned long long)v);
    return h5fl_write_file_atomic(dir, name, txt, (size_t)n, sync);
}

int h5fl_write_u64(const char *dir, const char *name, uint64_t v, bool sync)
{
    return write_u64_flags(dir, name, v, 0, sync);
}

int h5fl_crt_flags(hid_t ocpl, unsigned *links, unsigned *attrs)
{
    *links = *attrs = 0;
    if (ocpl == H5P_DEFAULT || ocpl < 0)
        return 0;
    unsigned lf = 0, af = 0;
    H5E_BEGIN_TRY
    {
        if (H5Pget_link_creation_order(ocpl, &lf) < 0)
            lf = 0;
        if (H5Pget_attr_creation_order(ocpl, &af) < 0)
            af = 0;
    }
    H5E_END_TRY
    *links = lf & H5P_CRT_ORDER_TRACKED ? lf & (H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) : 0;
    *attrs = af & H5P_CRT_ORDER_TRACKED ? af & (H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) : 0;
    return 0;
}

int h5fl_corder_enable(const char *dir, unsigned links, unsigned attrs, bool sync)
{
    if (links && write_u64_flags(dir, H5FL_CORDER_FILE, 0, links, sync) != 0)
        return -1;
    if (attrs && write_u64_flags(dir, H5FL_ACORDER_FILE, 0, attrs, sync) != 0)
        return -1;
    return 0;
}

unsigned h5fl_corder_flags(const char *dir, bool attrs)
{
    uint64_t n;
    unsigned fl = 0;
    if (h5fl_corder_tracked(dir, attrs) &&
        read_u64_flags(dir, attrs ? H5FL_ACORDER_FILE : H5FL_CORDER_FILE, &n, &fl) != 0) {
        h5fl_err_clear();
        fl = H5P_CRT_ORDER_TRACKED;
    }
    return fl;
}

bool h5fl_corder_tracked(const char *dir, bool attrs)
{
    return h5fl_exists(dir, attrs ? H5FL_ACORDER_FILE : H5FL_CORDER_FILE);
}

uint64_t h5fl_corder_next(const char *dir, bool attrs)
{
    uint64_t n = 0;
    if (h5fl_corder_tracked(dir, attrs) && h5fl_read_u64(dir, attrs ? H5FL_ACORDER_FILE : H5FL_CORDER_FILE, &n) != 0)
        n = 0;
    return n;
}

/* Take the next order of `dir`'s counter (links or attributes); 1: not tracked. */
static int take(const char *dir, bool attrs, uint64_t *n, bool sync)
{
    const char *ctr = attrs ? H5FL_ACORDER_FILE : H5FL_CORDER_FILE;
    if (!h5fl_exists(dir, ctr))
        return 1;
    unsigned fl;
    if (read_u64_flags(dir, ctr, n, &fl) != 0 || write_u64_flags(dir, ctr, *n + 1, fl, sync) != 0)
        return -1;
    return 0;
}

int h5fl_corder_assign(const char *gdir, const char *child_dir, bool sync)
{
    uint64_t n;
    int r = take(gdir, false, &n, sync);
    return r < 0 ? -1 : r == 1 ? 0 : h5fl_write_u64(child_dir, H5FL_CRT_FILE, n, sync);
}

int h5fl_corder_reset_if_empty(const char *link_dir, bool sync)
{
    char *g = h5fl_strdup(link_dir), *slash = g ? strrchr(g, '/') : NULL;
    int st = g ? 0 : -1;
    if (slash) {
        *slash = '\0';
        unsigned fl;
        uint64_t n;
        h5fl_names_t kids;
        if (h5fl_corder_tracked(g, false) && (st = h5fl_list_children(g, &kids)) == 0) {
            if (kids.n == 0 && (st = read_u64_flags(g, H5FL_CORDER_FILE, &n, &fl)) == 0 && n != 0)
                st = write_u64_flags(g, H5FL_CORDER_FILE, 0, fl, sync); /* as native: an empty group restarts */
            h5fl_names_free(&kids);
        }
    }
    free(g);
    return st;
}

static int acrt_name(const char *name, char *out, size_t outsz)
{
    char esc[NAME_MAX + 1];
    if (h5fl_escape(name, esc, sizeof esc) != 0)
        return -1;
    if ((size_t)snprintf(out, outsz, H5FL_ACRT_PREFIX "%s", esc) >= outsz) {
        h5fl_err("attribute name '%.64s' is too long", name);
        return -1;
    }
    return 0;
}

int h5fl_acorder_assign(const char *odir, const char *name, bool sync)
{
    char comp[NAME_MAX + 16];
    uint64_t n;
    if (acrt_name(name, comp, sizeof comp) != 0)
        return -1;
    int r = take(odir, true, &n, sync);
    return r < 0 ? -1 : r == 1 ? 0 : h5fl_write_u64(odir, comp, n, sync);
}

int h5fl_acorder_drop(const char *odir, const char *name)
{
    char comp[NAME_MAX + 16];
    if (acrt_name(name, comp, sizeof comp) != 0)
        return -1;
    char *p = h5fl_join(odir, comp);
    if (p)
        unlink(p);
    free(p);
    return 0;
}

int h5fl_acorder_rename(const char *odir, const char *from, const char *to)
{
    char a[NAME_MAX + 16], b[NAME_MAX + 16];
    if (acrt_name(from, a, sizeof a) != 0 || acrt_name(to, b, sizeof b) != 0)
        return -1;
    char *pa = h5fl_join(odir, a), *pb = h5fl_join(odir, b);
    if (pa && pb)
        rename(pa, pb); /* none: the object does not track attribute order */
    free(pa);
    free(pb);
    return 0;
}

typedef struct keyed {
    uint64_t order;
    char *name;
} keyed_t;

static int cmp_keyed(const void *a, const void *b)
{
    const keyed_t *x = a, *y = b;
    if (x->order != y->order)
        return x->order < y->order ? -1 : 1;
    return strcmp(x->name, y->name);
}

int h5fl_corder_sort(const char *dir, h5fl_names_t *names, bool attrs)
{
    if (!h5fl_corder_tracked(dir, attrs)) {
        h5fl_err(attrs ? "creation order not tracked for attributes of this object (h5flow_log orders them by "
                         "name; create it with attribute creation order tracked, or use the name index)"
                       : "creation order not tracked for links in group (h5flow_log orders them by name; create "
                         "it with link creation order tracked, or use the name index)");
        return -1;
    }
    if (names->n < 2)
        return 0;
    keyed_t *k = malloc(names->n * sizeof *k);
    if (!k) {
        h5fl_err("out of memory");
        return -1;
    }
    for (size_t i = 0; i < names->n; i++) {
        k[i].name = names->v[i];
        k[i].order = UINT64_MAX; /* none recorded (a creation that stopped half-way): after the others */
        char esc[NAME_MAX + 1], comp[NAME_MAX + 16];
        if (h5fl_escape(names->v[i], esc, sizeof esc) != 0)
            continue;
        if (attrs) {
            if (acrt_name(names->v[i], comp, sizeof comp) == 0 && h5fl_exists(dir, comp))
                h5fl_read_u64(dir, comp, &k[i].order);
        } else {
            char *cd = h5fl_join(dir, esc);
            if (cd && h5fl_exists(cd, H5FL_CRT_FILE))
                h5fl_read_u64(cd, H5FL_CRT_FILE, &k[i].order);
            free(cd);
        }
    }
    h5fl_err_clear();
    qsort(k, names->n, sizeof *k, cmp_keyed);
    for (size_t i = 0; i < names->n; i++)
        names->v[i] = k[i].name;
    free(k);
    return 0;
}

uint64_t h5fl_corder_of(const char *child_dir)
{
    uint64_t n = 0;
    if (h5fl_exists(child_dir, H5FL_CRT_FILE) && h5fl_read_u64(child_dir, H5FL_CRT_FILE, &n) != 0) {
        h5fl_err_clear();
        n = 0;
    }
    return n;
}

int64_t h5fl_acorder_of(const char *odir, const char *name)
{
    char comp[NAME_MAX + 16];
    uint64_t n;
    if (!h5fl_corder_tracked(odir, true) || acrt_name(name, comp, sizeof comp) != 0 || !h5fl_exists(odir, comp) ||
        h5fl_read_u64(odir, comp, &n) != 0 || n > INT64_MAX) {
        h5fl_err_clear();
        return -1;
    }
    return (int64_t)n;
}

/* ---------------------------------------------------------------- external links
 * A directory holding @extlink is an external link: the file holds the link's value exactly as
 * H5Lcreate_external encodes it (version/flags byte, file name, NUL, object path, NUL) and H5Lget_val
 * returns it. The target file is an h5flow_log container, or a native HDF5 file: then the walk stops with
 * EXDEV and a detour (native.c), and the callback opens the object through the native connector. */
int h5fl_extlink_read(const char *dir, void **buf, size_t *len)
{
    char *p = h5fl_join(dir, H5FL_EXT_FILE);
    int st = p ? h5fl_read_file(p, buf, len) : -1;
    free(p);
    if (st == 0 && (*len < 4 || *len > H5FL_SOFT_MAX || ((char *)*buf)[*len - 1] != '\0')) {
        h5fl_err("external link file %s/" H5FL_EXT_FILE " is damaged", dir);
        free(*buf);
        *buf = NULL;
        return -1;
    }
    return st;
}

int h5fl_extlink_create(const char *dir, const char *path, const void *buf, size_t len, bool sync)
{
    unsigned flags;
    const char *file = NULL, *obj = NULL;
    herr_t ok;
    H5E_BEGIN_TRY
    {
        ok = H5Lunpack_elink_val(buf, len, &flags, &file, &obj);
    }
    H5E_END_TRY
    if (ok < 0 || len > H5FL_SOFT_MAX || !file || !obj || !file[0] || !obj[0]) {
        h5fl_err("cannot create external link '%s': invalid link value", path);
        return -1;
    }
    return h5fl_write_file_atomic(dir, H5FL_EXT_FILE, buf, len, sync);
}

h5fl_file_t *h5fl_extlink_open(h5fl_file_t *f, const char *dir, char **obj_path)
{
    void *buf = NULL;
    size_t len = 0;
    if (h5fl_extlink_read(dir, &buf, &len) != 0)
        return NULL;
    unsigned flags;
    const char *file = NULL, *obj = NULL;
    herr_t ok;
    H5E_BEGIN_TRY
    {
        ok = H5Lunpack_elink_val(buf, len, &flags, &file, &obj);
    }
    H5E_END_TRY
    if (ok < 0 || !file || !obj) {
        h5fl_err("external link %s is damaged", dir);
        free(buf);
        return NULL;
    }
    if (f->comm != MPI_COMM_NULL && f->size > 1) {
        h5fl_err("h5flow_log does not follow external links in parallel; open '%s' with H5Fopen", file);
        free(buf);
        return NULL;
    }
    /* The file is looked for where native HDF5 looks (h5fl_lookup_candidates): an absolute name as given, then
     * under $HDF5_EXT_PREFIX's entries, the link access list's prefix (H5Pset_elink_prefix), beside the
     * linking container, and in the working directory. A traversal callback (H5Pset_elink_cb) is refused:
     * it may veto the open or change its intent, which this connector does not ask it. */
    char *lprefix = NULL;
    H5L_elink_traverse_t cb = NULL;
    void *cb_data = NULL;
    if (h5fl_cur_lapl != H5P_DEFAULT && h5fl_cur_lapl >= 0) {
        H5E_BEGIN_TRY
        {
            ssize_t pn = H5Pget_elink_prefix(h5fl_cur_lapl, NULL, 0);
            if (pn > 0 && (lprefix = malloc((size_t)pn + 1)) &&
                H5Pget_elink_prefix(h5fl_cur_lapl, lprefix, (size_t)pn + 1) < 0)
                lprefix[0] = '\0';
            if (H5Pget_elink_cb(h5fl_cur_lapl, &cb, &cb_data) < 0)
                cb = NULL;
        }
        H5E_END_TRY
    }
    if (cb) {
        h5fl_err("external link %s: a traversal callback (H5Pset_elink_cb) is set on the link access list; "
                 "h5flow_log does not call it: unset it, or open '%s' with H5Fopen",
                 dir, file);
        free(lprefix);
        free(buf);
        return NULL;
    }
    char **cand = h5fl_lookup_candidates(file, "HDF5_EXT_PREFIX", lprefix && lprefix[0] ? lprefix : NULL, f);
    free(lprefix);
    if (!cand) {
        free(buf);
        return NULL;
    }
    /* H5Pset_elink_acc_flags (h5py elink_mode, elink_swmr): read-only or read-write (refused from a
     * read-only file), SWMR read or not; without it the linking file's intent, SWMR flags included (as
     * native). H5Pset_elink_fapl (h5py elink_locking): the file access list the target is opened with. */
    const unsigned swmr = H5F_ACC_SWMR_READ | H5F_ACC_SWMR_WRITE;
    unsigned intent = (f->intent & H5F_ACC_RDWR ? H5F_ACC_RDWR : H5F_ACC_RDONLY) | (f->intent & swmr);
    unsigned acc = H5F_ACC_DEFAULT;
    hid_t xfapl = H5I_INVALID_HID;
    if (h5fl_cur_lapl != H5P_DEFAULT && h5fl_cur_lapl >= 0) {
        H5E_BEGIN_TRY
        {
            if (H5Pget_elink_acc_flags(h5fl_cur_lapl, &acc) < 0)
                acc = H5F_ACC_DEFAULT;
            xfapl = H5Pget_elink_fapl(h5fl_cur_lapl);
        }
        H5E_END_TRY
    }
    if (acc != H5F_ACC_DEFAULT) {
        if ((acc & H5F_ACC_RDWR) && !(intent & H5F_ACC_RDWR)) {
            h5fl_err("cannot open '%s' (external link %s) read-write from a file open read-only", file, dir);
            if (xfapl >= 0)
                H5Pclose(xfapl);
            h5fl_lookup_free(cand);
            free(buf);
            return NULL;
        }
        intent = (acc & H5F_ACC_RDWR ? H5F_ACC_RDWR : H5F_ACC_RDONLY) | (acc & swmr);
    }
    if (xfapl == H5P_DEFAULT) /* no list of its own: the linking file's */
        xfapl = H5I_INVALID_HID;
    h5fl_file_t *xf = NULL;
    bool native = false;
    for (size_t i = 0; cand[i] && !xf; i++) {
        struct stat sb;
        if (stat(cand[i], &sb) != 0)
            continue;
        if (h5fl_nat_file(cand[i])) { /* a native HDF5 file: the caller opens the object natively */
            h5fl_nat_detour_set(cand[i], obj, intent);
            h5fl_err("external link %s names the native HDF5 file '%s': only objects opened through it are "
                     "served (by the native connector); a container's path cannot continue inside it",
                     dir, cand[i]);
            native = true;
            break;
        }
        if (!S_ISDIR(sb.st_mode) || !h5fl_exists(cand[i], H5FL_MARKER)) {
            h5fl_err("external link %s names '%s', which is not an h5flow_log container: h5flow_log follows "
                     "external links only into containers (open a native file with H5Fopen/h5py.File without "
                     "the connector)",
                     dir, cand[i]);
            break;
        }
        if (xfapl < 0 && (xf = h5fl_reg_find_file(cand[i])) &&
            (xf->intent & (H5F_ACC_RDWR | swmr)) == (intent & (H5F_ACC_RDWR | swmr))) {
            xf->o.rc++;
            break;
        }
        xf = h5fl_file_open(cand[i], intent, xfapl >= 0 ? xfapl : f->fapl, H5P_DATASET_XFER_DEFAULT, NULL);
        if (xf) { /* no file id refers to it: objects opened through the link hold it */
            xf->handles--;
        } else {
            h5fl_err("cannot open '%s', named by external link %s", cand[i], dir);
            break;
        }
    }
    bool missing = !xf && !h5fl_err_msg()[0];
    if (xf && !(*obj_path = h5fl_strdup(obj))) {
        h5fl_file_decref(xf);
        xf = NULL;
    }
    if (missing)
        h5fl_err("file '%s' named by external link %s does not exist", file, dir);
    h5fl_lookup_free(cand);
    free(buf);
    if (xfapl >= 0)
        H5Pclose(xfapl);
    errno = missing ? ENOENT : native ? EXDEV : 0;
    return xf;
}
