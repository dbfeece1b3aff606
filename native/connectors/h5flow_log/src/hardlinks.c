/* Hard links (docs/FORMAT.md "Hard links"): the object store @objects/, @hardlink stubs, link counts
 * (@nlink), and the walk that visits every object of a container once whatever its number of names.
 * Creation order and soft and external links are in links.c. */
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

/* ---------------------------------------------------------------- hard links
 * docs/FORMAT.md "Hard links". An object with one name is the directory at that name. When it gets a
 * second name it moves into the object store, @objects/<id> at the container root (id: its persistent
 * reference id, refs.c, as 16 hex digits), and every name becomes a stub: a directory holding @hardlink
 * (the id: u64 little endian + CRC32C, as @id). The object holds its link count in @nlink (decimal text).
 * Once in the store an object stays there (a later deletion of names never moves it again), so a stub
 * resolves with one path computation, and moves of stubs or of groups holding stubs are plain renames.
 *
 * Steps (rank 0), each leaving a container that opens and reads the same values if the process dies
 * after it:
 *   giving object X at /a a second name /b:
 *     1. X gets its id (@id, refs.c); @objects/ exists; the marker says format 4;
 *     2. X/@nlink = 1 (X still has one name);
 *     3. a stub for id X is made at @objects/<id> (a stub nothing names: ignored), with /a's @crt;
 *     4. renameat2(/a, @objects/<id>, RENAME_EXCHANGE): atomically /a is the stub and the store slot is X;
 *     5. X/@nlink = 2, then the stub /b is made (mkdir, then @hardlink written by rename(2)).
 *   An object already in the store: @nlink + 1, then the new stub.
 *   Deleting a name: the stub's @hardlink is removed (the name is gone), its directory, then @nlink - 1;
 *   at 0 the object is renamed to @gone.hl.<id> (removed by the next writable open, as any @gone.*).
 * A crash between steps can leave a link count above the number of stubs (the object is then never
 * removed: a leak, not a loss) but never below it. */
#define H5FL_GONE_HARD H5FL_GONE_PREFIX "hl."

int h5fl_hard_read(const char *stubdir, uint64_t *id)
{
    char *p = h5fl_join(stubdir, H5FL_HARD_FILE);
    void *buf = NULL;
    size_t len = 0;
    int st = p ? h5fl_read_file(p, &buf, &len) : -1;
    if (st == 0 && (len != 12 || h5fl_crc32c(0, buf, 8) != h5fl_get_u32((uint8_t *)buf + 8) ||
                    !(h5fl_get_u64(buf) >> 63))) {
        h5fl_err("hard link file %s is damaged (expected an object id and its CRC32C); the link cannot be "
                 "followed",
                 p);
        st = -1;
    }
    if (st == 0)
        *id = h5fl_get_u64(buf);
    free(buf);
    free(p);
    return st;
}

char *h5fl_hard_store_dir(const char *root, uint64_t id)
{
    if (id == H5FL_ROOT_ID)
        return h5fl_strdup(root);
    size_t n = strlen(root) + sizeof H5FL_STORE_DIR + 24;
    char *p = malloc(n);
    if (!p) {
        h5fl_err("out of memory");
        return NULL;
    }
    snprintf(p, n, "%s/" H5FL_STORE_DIR "/%016llx", root, (unsigned long long)id);
    return p;
}

int h5fl_hard_follow(const char *root, char **dir, H5I_type_t *t, char **ldir)
{
    if (*t != H5FL_I_HARD)
        return 0;
    uint64_t id;
    if (h5fl_hard_read(*dir, &id) != 0)
        return -1;
    char *sd = h5fl_hard_store_dir(root, id);
    if (!sd)
        return -1;
    H5I_type_t ot = h5fl_dir_type(sd, false);
    if (ot == H5I_BADID || ot == H5FL_I_HARD || ot == H5FL_I_SOFT || ot == H5FL_I_EXT) {
        h5fl_err("hard link %s names object %016llx, which is missing from the object store %s/" H5FL_STORE_DIR
                 " (the container is damaged: restore it from a backup, or delete the link)",
                 *dir, (unsigned long long)id, root);
        free(sd);
        return -1;
    }
    if (ldir) {
        free(*ldir);
        *ldir = *dir;
    } else {
        free(*dir);
    }
    *dir = sd;
    *t = ot;
    return 0;
}

static int read_nlink(const char *dir, uint64_t *n)
{
    if (!h5fl_exists(dir, H5FL_NLINK_FILE)) {
        *n = 1;
        return 0;
    }
    return h5fl_read_u64(dir, H5FL_NLINK_FILE, n);
}

unsigned h5fl_hard_nlink(const char *dir)
{
    uint64_t n = 1;
    if (read_nlink(dir, &n) != 0) {
        h5fl_err_clear();
        n = 1;
    }
    return n > UINT_MAX ? UINT_MAX : n == 0 ? 1 : (unsigned)n;
}

/* Whether `dir` is an object of the store of the container at `root` (not one inside a stored group). */
static bool in_store(const char *root, const char *dir)
{
    size_t rl = strlen(root), sl = strlen("/" H5FL_STORE_DIR "/");
    return !strncmp(dir, root, rl) && !strncmp(dir + rl, "/" H5FL_STORE_DIR "/", sl) && !strchr(dir + rl + sl, '/');
}

int h5fl_hard_write_stub(const char *dir, uint64_t id, bool sync)
{
    uint8_t b[12];
    h5fl_put_u64(b, id);
    h5fl_put_u32(b + 8, h5fl_crc32c(0, b, 8));
    return h5fl_write_file_atomic(dir, H5FL_HARD_FILE, b, sizeof b, sync);
}

int h5fl_hard_store_ready(h5fl_file_t *f)
{
    char *store = h5fl_join(f->o.dir, H5FL_STORE_DIR);
    int st = store ? 0 : -1;
    if (st == 0 && mkdir(store, 0755) != 0 && errno != EEXIST) {
        h5fl_err("cannot create the object store %s: %s", store, strerror(errno));
        st = -1;
    }
    free(store);
    return st == 0 ? h5fl_marker_upgrade(f) : -1;
}

/* Rank 0: move the object at `odir` (one name, `path`) into the store; its name becomes a stub. */
static int hard_convert(h5fl_file_t *f, const char *odir, const char *path, uint64_t id, char **sd_out)
{
    const char *root = f->o.dir;
    char *sd = h5fl_hard_store_dir(root, id);
    int st = sd ? h5fl_hard_store_ready(f) : -1;
    if (st == 0)
        st = h5fl_write_u64(odir, H5FL_NLINK_FILE, 1, f->fsync);
    if (st == 0 && mkdir(sd, 0755) != 0 && !(errno == EEXIST && h5fl_dir_type(sd, false) != H5I_DATASET &&
                                               h5fl_dir_type(sd, false) != H5I_GROUP &&
                                               h5fl_dir_type(sd, false) != H5I_DATATYPE)) {
        h5fl_err("cannot give '%s' a second name: cannot create %s: %s", path, sd, strerror(errno));
        st = -1;
    }
    if (st == 0)
        st = h5fl_hard_write_stub(sd, id, f->fsync);
    if (st == 0 && h5fl_exists(odir, H5FL_CRT_FILE)) { /* the name's creation order stays with the name */
        uint64_t crt;
        st = h5fl_read_u64(odir, H5FL_CRT_FILE, &crt);
        if (st == 0)
            st = h5fl_write_u64(sd, H5FL_CRT_FILE, crt, f->fsync);
    }
    if (st == 0 && renameat2(AT_FDCWD, odir, AT_FDCWD, sd, RENAME_EXCHANGE) != 0) {
        h5fl_err(errno == EINVAL || errno == ENOSYS
                     ? "cannot give '%s' a second name: the file system of the container does not support "
                       "atomic directory exchange (renameat2 RENAME_EXCHANGE: %s), which h5flow_log needs to move "
                       "an object into its object store safely; use a local file system (ext4, xfs, btrfs, tmpfs)"
                     : "cannot give '%s' a second name: moving it into the object store failed: %s",
                 path, strerror(errno));
        h5fl_rm_rf(sd);
        st = -1;
    }
    if (st == 0) {
        char *c = h5fl_join(sd, H5FL_CRT_FILE);
        if (c)
            unlink(c); /* the old name's order, now in the stub */
        free(c);
    }
    if (st == 0)
        *sd_out = sd;
    else
        free(sd);
    return st;
}

/* Bytes-safe parse of "<16 hex digits>" (a store entry's name). */
static bool parse_hex_id(const char *s, uint64_t *id)
{
    if (strlen(s) != 16)
        return false;
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        int c = s[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *id = v;
    return true;
}

/* Every rank: open objects of f whose store directory was removed (its last name deleted) live on, unnamed,
 * in @gone.hl.<id>, as any deleted object still open. */
int h5fl_hard_sweep(h5fl_file_t *f)
{
    const char *root = f->o.dir;
    size_t rl = strlen(root), sl = strlen("/" H5FL_STORE_DIR "/");
    int rc = 0;
    for (bool again = true; again;) {
        again = false;
        for (h5fl_obj_t *o = h5fl_reg_next(NULL); o; o = h5fl_reg_next(o)) {
            if (o->type == H5I_FILE || !o->file || o->file->fileno != f->fileno || !o->dir || o->gone ||
                strncmp(o->dir, root, rl) || strncmp(o->dir + rl, "/" H5FL_STORE_DIR "/", sl))
                continue;
            char hex[17];
            uint64_t id;
            snprintf(hex, sizeof hex, "%.16s", o->dir + rl + sl);
            struct stat sb;
            char *sd = parse_hex_id(hex, &id) ? h5fl_hard_store_dir(root, id) : NULL;
            if (!sd || stat(sd, &sb) == 0) {
                free(sd);
                continue;
            }
            char from[64], to[64];
            snprintf(from, sizeof from, "/" H5FL_STORE_DIR "/%s", hex);
            snprintf(to, sizeof to, "/" H5FL_GONE_HARD "%s", hex);
            free(sd);
            if (h5fl_reg_moved(f->fileno, from, to, o->path ? o->path : "", NULL) != 0)
                rc = -1;
            again = true; /* the list was rewritten: start over */
            break;
        }
    }
    return rc;
}

int h5fl_ids_add(h5fl_ids_t *l, uint64_t id)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        uint64_t *nv = realloc(l->v, cap * sizeof *nv);
        if (!nv) {
            h5fl_err("out of memory");
            return -1;
        }
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = id;
    return 0;
}

bool h5fl_ids_has(const h5fl_ids_t *l, uint64_t id)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == id)
            return true;
    return false;
}

static int collect(const char *dir, bool top, h5fl_ids_t *out)
{
    H5I_type_t t = h5fl_dir_type(dir, false);
    if (t == H5FL_I_HARD) {
        uint64_t id;
        return h5fl_hard_read(dir, &id) == 0 ? h5fl_ids_add(out, id) : -1;
    }
    if (t != H5I_GROUP && !(top && t == H5I_BADID))
        return 0;
    h5fl_names_t kids;
    if (h5fl_list_children(dir, &kids) != 0)
        return -1;
    int st = 0;
    for (size_t i = 0; i < kids.n && st == 0; i++) {
        char esc[NAME_MAX + 1];
        char *cd = h5fl_escape(kids.v[i], esc, sizeof esc) == 0 ? h5fl_join(dir, esc) : NULL;
        st = cd ? collect(cd, false, out) : -1;
        free(cd);
    }
    h5fl_names_free(&kids);
    return st;
}

int h5fl_hard_collect(const char *dir, uint64_t **ids, size_t *n)
{
    h5fl_ids_t l = {0};
    int st = collect(dir, true, &l);
    if (st != 0) {
        free(l.v);
        return -1;
    }
    *ids = l.v;
    *n = l.n;
    return 0;
}

int h5fl_hard_unref(h5fl_file_t *f, const uint64_t *ids, size_t n)
{
    h5fl_ids_t work = {0};
    int st = 0;
    for (size_t i = 0; i < n && st == 0; i++)
        st = h5fl_ids_add(&work, ids[i]);
    while (st == 0 && work.n > 0) {
        uint64_t id = work.v[--work.n], cnt;
        char *sd = h5fl_hard_store_dir(f->o.dir, id);
        if (!sd) {
            st = -1;
            break;
        }
        if (read_nlink(sd, &cnt) != 0) {
            st = -1;
        } else if (cnt > 1 || id == H5FL_ROOT_ID) { /* the root group stays, whatever its count */
            st = cnt > 1 ? h5fl_write_u64(sd, H5FL_NLINK_FILE, cnt - 1, f->fsync) : 0;
        } else { /* the last name is gone: so is the object (its own stubs drop their objects' counts) */
            char to[64];
            snprintf(to, sizeof to, "/" H5FL_GONE_HARD "%016llx", (unsigned long long)id);
            char *gd = h5fl_join(f->o.dir, to + 1);
            h5fl_ids_t sub = {0};
            st = gd ? collect(sd, true, &sub) : -1;
            if (st == 0 && rename(sd, gd) != 0) {
                h5fl_err("cannot delete object %s (its last link was deleted): %s", sd, strerror(errno));
                st = -1;
            }
            for (size_t i = 0; i < sub.n && st == 0; i++)
                st = h5fl_ids_add(&work, sub.v[i]);
            free(sub.v);
            free(gd);
        }
        free(sd);
    }
    free(work.v);
    return st;
}

/* If *p is `from` or lies under it, make it lie the same way under `to`. */
static int rebase(char **p, const char *from, const char *to)
{
    size_t fl = strlen(from);
    if (strncmp(*p, from, fl) != 0 || ((*p)[fl] != '\0' && (*p)[fl] != '/'))
        return 0;
    size_t tl = strlen(to), rest = strlen(*p + fl);
    char *n = malloc(tl + rest + 1);
    if (!n) {
        h5fl_err("out of memory");
        return -1;
    }
    memcpy(n, to, tl);
    memcpy(n + tl, *p + fl, rest + 1);
    free(*p);
    *p = n;
    return 0;
}

/* Rank 0: *id and *sd (the object's directory from now on) of `target`, which moves into the store first
 * unless it is there already (`store`) or is the root group (`root`). */
static int hard_prepare(h5fl_file_t *f, const h5fl_loc_t *target, bool root, bool store, uint64_t *id, char **sd)
{
    int st;
    if (root) { /* the container directory: it stays where it is; its stubs name it by its id */
        *id = H5FL_ROOT_ID;
        st = h5fl_marker_upgrade(f);
    } else if ((st = h5fl_ref_object_id(f, target->dir, target->path, id)) == 0 && !store) {
        return hard_convert(f, target->dir, target->path, *id, sd);
    }
    if (st == 0 && !(*sd = h5fl_strdup(target->dir)))
        st = -1;
    return st;
}

/* Every rank, after the collective status `st` of a change that may have moved `target` into the store:
 * open objects at or under its old directory follow it. */
static int hard_finish(h5fl_file_t *f, const h5fl_loc_t *target, bool store, int st, uint64_t id)
{
    st = h5fl_collective(f, st);
    if (st == 0 && f->comm != MPI_COMM_NULL && f->size > 1) {
        MPI_Request req;
        MPI_Ibcast(&id, 1, MPI_UINT64_T, 0, f->comm, &req);
        h5fl_mpi_wait(&req);
    }
    if (st == 0 && !store) {
        size_t rl = strlen(f->o.dir);
        char *sd = h5fl_hard_store_dir(f->o.dir, id);
        st = sd ? h5fl_reg_moved(f->fileno, target->dir + rl, sd + rl, target->path, target->path) : -1;
        free(sd);
    }
    return st;
}

int h5fl_hard_create(h5fl_obj_t *o, const H5VL_loc_params_t *lp, const h5fl_loc_t *target, hid_t lcpl)
{
    h5fl_file_t *f = o->file;
    h5fl_loc_t parent = {0};
    char leaf[NAME_MAX + 1], *leafname = NULL, *dir = NULL, *path = NULL, *sd = NULL;
    unsigned crt = 0;
    if (lcpl != H5P_DEFAULT && lcpl >= 0)
        H5Pget_create_intermediate_group(lcpl, &crt);
    int st = -1;
    bool root = !strcmp(target->dir, f->o.dir), store = root || in_store(f->o.dir, target->dir);
    uint64_t id = 0;
    if ((target->type == H5I_GROUP || target->type == H5I_DATASET || target->type == H5I_DATATYPE) &&
        (!target->file || target->file->fileno == f->fileno) && h5fl_is_anon_dir(f->o.dir, target->dir))
        return h5fl_anon_link(o, lp, target, lcpl); /* vol_link.c: its first name */
    if (lp->type != H5VL_OBJECT_BY_NAME)
        h5fl_err("a new link needs a name");
    else if (target->type != H5I_GROUP && target->type != H5I_DATASET && target->type != H5I_DATATYPE)
        h5fl_err("cannot link to '%s': no such object", target->path ? target->path : "?");
    else if (target->file && target->file->fileno != f->fileno)
        h5fl_err("cannot link to '%s': a hard link cannot name an object of another file", target->path);
    else
        st = h5fl_resolve_parent(o, lp->loc_data.loc_by_name.name,
                                 f->rank == 0 ? (crt ? H5FL_MKPARENTS : H5FL_CHECK) : H5FL_COMPUTE, &parent, leaf,
                                 sizeof leaf, &leafname);
    if (st == 0 && (!(dir = h5fl_join(parent.dir, leaf)) || !(path = h5fl_path_join(parent.path, leafname))))
        st = -1;
    if (st == 0 && f->rank == 0) {
        uint64_t cnt = 0;
        bool counted = false;
        char *tmp = NULL;
        if (access(dir, F_OK) == 0 && h5fl_dir_type(dir, false) != H5I_BADID) {
            h5fl_err("cannot create hard link '%s': a link with this name already exists", path);
            st = -1;
        } else {
            st = hard_prepare(f, target, root, store, &id, &sd);
        }
        /* the new name may lie in the object that just moved (a group linked into itself) */
        if (st == 0 && !store && (rebase(&dir, target->dir, sd) != 0 || rebase(&parent.dir, target->dir, sd) != 0))
            st = -1;
        /* the count first (a crash after it leaves a count above the names: a leak, never a loss), then
         * the stub, built privately and renamed to its name complete (util.c) */
        if (st == 0 && (st = read_nlink(sd, &cnt)) == 0 &&
            (st = h5fl_write_u64(sd, H5FL_NLINK_FILE, cnt + 1, f->fsync)) == 0)
            counted = true;
        if (st == 0 && !(tmp = h5fl_create_tmp(f)))
            st = -1;
        if (st == 0)
            st = h5fl_hard_write_stub(tmp, id, f->fsync);
        if (st == 0)
            st = h5fl_corder_assign(parent.dir, tmp, f->fsync);
        if (st == 0)
            st = h5fl_create_publish_new(tmp, dir, "hard link", path);
        else
            h5fl_create_abandon(tmp);
        if (st != 0 && counted) { /* not named after all: the count goes back */
            char keep[1024];
            snprintf(keep, sizeof keep, "%s", h5fl_err_msg());
            h5fl_write_u64(sd, H5FL_NLINK_FILE, cnt, f->fsync);
            h5fl_err_clear();
            h5fl_err("%s", keep);
        }
        free(tmp);
    }
    st = hard_finish(f, target, store, st, id);
    free(sd);
    free(dir);
    free(path);
    free(leafname);
    h5fl_loc_free(&parent);
    return st;
}

int h5fl_hard_adjust(h5fl_obj_t *o, int delta)
{
    h5fl_file_t *f = o->file;
    h5fl_loc_t target = {.dir = o->dir, .path = o->path, .type = o->type == H5I_FILE ? H5I_GROUP : o->type};
    bool root = !strcmp(o->dir, f->o.dir), store = root || in_store(f->o.dir, o->dir);
    uint64_t id = 0, cnt = 0;
    char *sd = NULL;
    int st = 0;
    h5fl_collective_begin(f);
    if (!h5fl_writable(f))
        st = -1;
    else if (o->gone || o->anon || (o->type != H5I_GROUP && o->type != H5I_DATASET && o->type != H5I_DATATYPE &&
                                    o->type != H5I_FILE)) {
        h5fl_err("cannot change the reference count of '%s': h5flow_log counts the names of linked groups, "
                 "datasets and committed datatypes only",
                 o->path ? o->path : "?");
        st = -1;
    }
    if (st == 0 && f->rank == 0) {
        if ((st = read_nlink(o->dir, &cnt)) == 0 && (delta < 0 ? cnt <= (uint64_t)-delta : cnt > UINT32_MAX)) {
            h5fl_err(delta < 0 ? "cannot lower the reference count of '%s' to 0: h5flow_log removes an object "
                                 "with its last name (H5Ldelete), not by its count"
                               : "the reference count of '%s' is at its maximum",
                     o->path);
            st = -1;
        }
        /* a count above the names keeps the object when they are deleted: it must live in the store */
        if (st == 0 && delta > 0)
            st = hard_prepare(f, &target, root, store, &id, &sd);
        if (st == 0)
            st = h5fl_write_u64(sd ? sd : o->dir, H5FL_NLINK_FILE, (uint64_t)((int64_t)cnt + delta), f->fsync);
    }
    if (delta < 0)
        store = true; /* nothing moved */
    st = hard_finish(f, &target, store, st, id);
    free(sd);
    return st;
}

/* ---------------------------------------------------------------- visiting every object once */
static int tree_rec(const char *root, const char *dir, const char *path, h5fl_tree_cb cb, void *arg, h5fl_ids_t *seen)
{
    h5fl_names_t kids;
    if (h5fl_list_children(dir, &kids) != 0)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < kids.n && rc == 0; i++) {
        char esc[NAME_MAX + 1];
        if (h5fl_escape(kids.v[i], esc, sizeof esc) != 0)
            continue;
        char *cd = h5fl_join(dir, esc), *cp = h5fl_path_join(path, kids.v[i]);
        H5I_type_t t = cd ? h5fl_dir_type(cd, false) : H5I_BADID;
        if (!cd || !cp) {
            rc = -1;
        } else if (t == H5FL_I_HARD) {
            uint64_t id;
            if (h5fl_hard_read(cd, &id) != 0)
                rc = -1;
            else if (h5fl_ids_has(seen, id))
                t = H5I_BADID; /* met before: visited once */
            else if (h5fl_ids_add(seen, id) != 0 || h5fl_hard_follow(root, &cd, &t, NULL) != 0)
                rc = -1;
        }
        if (rc == 0 && (t == H5I_GROUP || t == H5I_DATASET || t == H5I_DATATYPE))
            rc = cb(cd, cp, t, arg);
        if (rc == 0 && t == H5I_GROUP)
            rc = tree_rec(root, cd, cp, cb, arg, seen);
        free(cd);
        free(cp);
    }
    h5fl_names_free(&kids);
    return rc;
}

int h5fl_tree_walk(const char *root, const char *dir, const char *path, h5fl_tree_cb cb, void *arg)
{
    h5fl_ids_t seen = {0};
    int rc = strcmp(root, dir) == 0 ? h5fl_ids_add(&seen, H5FL_ROOT_ID) : 0; /* the root linked below itself */
    if (rc == 0)
        rc = tree_rec(root, dir, path, cb, arg, &seen);
    free(seen.v);
    return rc;
}
