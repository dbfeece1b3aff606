/* The process's open objects.
 *
 * Native HDF5 keeps one object header per object, whatever the number of handles open on it; every handle
 * sees every write made through any other. The connector gets the same property from one list of the open
 * objects of this process: a dataset or an attribute opened again (through the same file handle, another
 * one, or a file opened twice) is found here by the identity of its directory (device + inode) and shared
 * (one state, reference counted), and renames and deletions rewrite the location of the open objects they
 * move, so an open handle follows its object as in native HDF5.
 *
 * VOL callbacks never run concurrently (HDF5's global lock, thread-safe builds included), so the list
 * needs no lock of its own. */
#include "h5fl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static h5fl_obj_t *reg_head; /* every registered object of this process */

void h5fl_reg_add(h5fl_obj_t *o)
{
    if (o->in_reg)
        return;
    struct stat st;
    if (o->dir && stat(o->dir, &st) == 0) {
        o->dev = st.st_dev;
        o->ino = st.st_ino;
    }
    o->reg_prev = NULL;
    o->reg_next = reg_head;
    if (reg_head)
        reg_head->reg_prev = o;
    reg_head = o;
    o->in_reg = true;
}

void h5fl_reg_remove(h5fl_obj_t *o)
{
    if (!o->in_reg)
        return;
    if (o->reg_prev)
        o->reg_prev->reg_next = o->reg_next;
    else
        reg_head = o->reg_next;
    if (o->reg_next)
        o->reg_next->reg_prev = o->reg_prev;
    o->reg_prev = o->reg_next = NULL;
    o->in_reg = false;
}

h5fl_obj_t *h5fl_reg_next(h5fl_obj_t *o) { return o ? o->reg_next : reg_head; }

bool h5fl_reg_holds(const void *p)
{
    for (const h5fl_obj_t *o = reg_head; o; o = o->reg_next)
        if ((const void *)o == p)
            return true;
    return false;
}

h5fl_obj_t *h5fl_reg_find(H5I_type_t type, const char *dir, bool (*match)(const h5fl_obj_t *, const void *),
                          const void *arg)
{
    struct stat st;
    if (!dir || stat(dir, &st) != 0)
        return NULL;
    for (h5fl_obj_t *o = reg_head; o; o = o->reg_next)
        if (o->type == type && !o->gone && o->dev == st.st_dev && o->ino == st.st_ino && (!match || match(o, arg)))
            return o;
    return NULL;
}

/* If `s` is `prefix` or lies under it ("prefix/..."), the rest after the prefix (possibly ""), else NULL. */
static const char *under(const char *s, const char *prefix)
{
    size_t n = strlen(prefix);
    if (strncmp(s, prefix, n) != 0)
        return NULL;
    if (s[n] == '\0' || s[n] == '/')
        return s + n;
    if (n > 0 && prefix[n - 1] == '/') /* the root "/" */
        return s + n - 1;
    return NULL;
}

static char *concat(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *p = malloc(la + lb + 1);
    if (!p) {
        h5fl_err("out of memory");
        return NULL;
    }
    memcpy(p, a, la);
    memcpy(p + la, b, lb + 1);
    return p;
}

int h5fl_reg_moved(unsigned long fileno, const char *from_rel, const char *to_rel, const char *from_path,
                   const char *to_path)
{
    int rc = 0;
    for (h5fl_obj_t *o = reg_head; o; o = o->reg_next) {
        if (o->type == H5I_FILE || !o->file || o->file->fileno != fileno || !o->dir)
            continue;
        const char *root = o->file->o.dir;
        size_t rl = strlen(root);
        if (strncmp(o->dir, root, rl) != 0)
            continue;
        const char *rest = under(o->dir + rl, from_rel);
        if (!rest)
            continue;
        char *tail = concat(to_rel, rest), *nd = tail ? concat(root, tail) : NULL;
        free(tail);
        const char *prest = o->path && from_path ? under(o->path, from_path) : NULL;
        char *np = NULL;
        if (!to_path)
            np = h5fl_strdup(""); /* deleted: the object has no name any more (as native's H5Iget_name) */
        else if (prest)
            np = concat(to_path, prest);
        if (!nd || ((!to_path || prest) && !np)) {
            free(nd);
            free(np);
            rc = -1;
            continue;
        }
        free(o->dir);
        o->dir = nd;
        if (np) {
            free(o->path);
            o->path = np;
        }
        if (!to_path)
            o->gone = true;
        if (o->type == H5I_DATASET && h5fl_dset_moved((h5fl_dset_t *)o) != 0)
            rc = -1;
    }
    return rc;
}

bool h5fl_reg_busy(unsigned long fileno, const char *rel)
{
    for (h5fl_obj_t *o = reg_head; o; o = o->reg_next) {
        if (o->type == H5I_FILE || !o->file || o->file->fileno != fileno || !o->dir || o->gone)
            continue;
        const char *root = o->file->o.dir;
        size_t rl = strlen(root);
        if (!strncmp(o->dir, root, rl) && under(o->dir + rl, rel))
            return true;
    }
    return false;
}

h5fl_file_t *h5fl_reg_find_serial_writer(const char *dir)
{
    struct stat st;
    if (!dir || stat(dir, &st) != 0)
        return NULL;
    for (h5fl_obj_t *o = reg_head; o; o = o->reg_next) {
        h5fl_file_t *f = (h5fl_file_t *)o;
        if (o->type == H5I_FILE && o->dev == st.st_dev && o->ino == st.st_ino && (f->intent & H5F_ACC_RDWR) &&
            f->size <= 1 && f->rank == 0 && f->epoch > 0)
            return f;
    }
    return NULL;
}

h5fl_file_t *h5fl_reg_find_file(const char *dir)
{
    struct stat st;
    if (!dir || stat(dir, &st) != 0)
        return NULL;
    for (h5fl_obj_t *o = reg_head; o; o = o->reg_next)
        if (o->type == H5I_FILE && o->dev == st.st_dev && o->ino == st.st_ino)
            return (h5fl_file_t *)o;
    return NULL;
}
