/* H5Ocopy (docs/FORMAT.md "Object copy"): the object's directory tree is copied file by file. Inside one
 * container a dataset's data and index logs are copied as they are when all of them are of epochs before
 * the destination writer's (so every later write orders after the copied records); otherwise, and into
 * another container, the data is read and written anew. */
#include "dset.h"

#include <H5VLnative.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Layout entries of a container root that belong to the container, not to its root group. */
static bool container_only(const char *name)
{
    return !strcmp(name, H5FL_MARKER) || !strcmp(name, H5FL_EPOCH_DIR) ||
           !strncmp(name, H5FL_ANON_PREFIX, strlen(H5FL_ANON_PREFIX)) ||
           !strncmp(name, H5FL_GONE_PREFIX, strlen(H5FL_GONE_PREFIX)) || !strcmp(name, H5FL_STORE_DIR) ||
           !strcmp(name, H5FL_BLOB_DIR) || !strcmp(name, H5FL_USERBLOCK_FILE);
}

static int copy_file(const char *from, const char *to, bool sync)
{
    int in = h5fl_open_file(from, O_RDONLY, 0);
    if (in < 0)
        return -1;
    int out = open(to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        h5fl_err("cannot create %s: %s", to, strerror(errno));
        close(in);
        return -1;
    }
    static __thread char buf[1 << 16];
    int st = 0;
    uint64_t off = 0;
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            h5fl_err("cannot read %s: %s", from, strerror(errno));
            st = -1;
            break;
        }
        if (n == 0)
            break;
        if (h5fl_pwrite_all(out, buf, (size_t)n, off) != 0) {
            h5fl_err("cannot write %s (copying %s): %s", to, from, strerror(errno));
            st = -1;
            break;
        }
        off += (uint64_t)n;
    }
    if (st == 0 && sync && fsync(out) != 0) {
        h5fl_err("cannot sync %s: %s", to, strerror(errno));
        st = -1;
    }
    close(in);
    close(out);
    return st;
}

typedef struct copy_opts {
    bool sync;
    bool logs;     /* same container: copy the logs as they are; else the data is written anew */
    bool attrs;    /* !H5O_COPY_WITHOUT_ATTR_FLAG */
    bool shallow;  /* H5O_COPY_SHALLOW_HIERARCHY_FLAG: members of the top group only */
    bool expand;   /* H5O_COPY_EXPAND_SOFT_LINK_FLAG: a soft link is copied as the object it names */
    bool expand_ext; /* H5O_COPY_EXPAND_EXT_LINK_FLAG: refused when the copy meets an external link */
    bool expand_refs; /* H5O_COPY_EXPAND_REFERENCE_FLAG: references keep their ids until expand_refs() maps them */
    bool same;     /* source and destination are one container (object ids keep their meaning) */
    h5fl_file_t *sf, *df;
    struct hard_map *hm; /* objects with several names met so far (copy_hard) */
    struct type_map *tm; /* committed datatypes copied, and the copied datasets created with one */
} copy_opts_t;

/* A dataset created with a committed datatype records its id (@dtype, vol_datatype.c). Copied into another
 * container together with that type, the copy of the dataset names the copy of the type, as native H5Ocopy
 * makes it; a type left outside such a copy is dropped (the copy keeps its own copy of the type). Within
 * a container the copy names the original type, as native's does. */
typedef struct type_use {
    uint64_t id; /* the source type's id */
    char *dir;   /* types: the copy of the type; users: the copy of the dataset */
} type_use_t;
typedef struct type_map {
    type_use_t *types, *users;
    size_t nt, nu;
} type_map_t;

static int type_note(type_use_t **v, size_t *n, uint64_t id, const char *dir)
{
    type_use_t *nv = realloc(*v, (*n + 1) * sizeof *nv);
    char *d = h5fl_strdup(dir);
    if (!nv || !d) {
        free(d);
        if (nv)
            *v = nv;
        h5fl_err("out of memory");
        return -1;
    }
    *v = nv;
    nv[(*n)++] = (type_use_t){id, d};
    return 0;
}

/* The copies under `from` moved to `to` (copy_hard's rename into the store). */
static int type_moved(type_map_t *m, const char *from, const char *to)
{
    size_t fl = strlen(from);
    type_use_t *lists[2] = {m->types, m->users};
    size_t ns[2] = {m->nt, m->nu};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < ns[k]; i++) {
            char *d = lists[k][i].dir;
            if (strncmp(d, from, fl) != 0 || (d[fl] && d[fl] != '/'))
                continue;
            char *nd = malloc(strlen(to) + strlen(d + fl) + 1);
            if (!nd) {
                h5fl_err("out of memory");
                return -1;
            }
            sprintf(nd, "%s%s", to, d + fl);
            free(d);
            lists[k][i].dir = nd;
        }
    return 0;
}

/* Each copied dataset whose type was copied with it names the copy (its id minted now). */
static int type_relink(const copy_opts_t *c, const char *dpath)
{
    type_map_t *m = c->tm;
    int st = 0;
    for (size_t i = 0; st == 0 && i < m->nu; i++)
        for (size_t j = 0; st == 0 && j < m->nt; j++) {
            if (m->types[j].id != m->users[i].id)
                continue;
            uint64_t nid;
            uint8_t b[12];
            st = h5fl_ref_object_id(c->df, m->types[j].dir, dpath, &nid);
            if (st == 0) {
                h5fl_put_u64(b, nid);
                h5fl_put_u32(b + 8, h5fl_crc32c(0, b, 8));
                st = h5fl_write_file_atomic(m->users[i].dir, H5FL_DTYPE_USE_FILE, b, sizeof b, c->sync);
            }
            break;
        }
    return st;
}

static void type_map_free(type_map_t *m)
{
    for (size_t i = 0; i < m->nt; i++)
        free(m->types[i].dir);
    for (size_t i = 0; i < m->nu; i++)
        free(m->users[i].dir);
    free(m->types);
    free(m->users);
}

/* Note a copied committed type (`from` holds @datatype and has an id) or a dataset's use of one. */
static int type_note_object(const copy_opts_t *c, const char *from, const char *to)
{
    uint64_t id;
    if (h5fl_exists(from, H5FL_DTYPE_FILE)) {
        int r = h5fl_ref_read_id(from, &id);
        return r < 0 ? -1 : r == 1 ? type_note(&c->tm->types, &c->tm->nt, id, to) : 0;
    }
    if (!h5fl_exists(from, H5FL_DTYPE_USE_FILE))
        return 0;
    char *p = h5fl_join(from, H5FL_DTYPE_USE_FILE);
    void *vb = NULL;
    size_t n = 0;
    int st = p && h5fl_read_file(p, &vb, &n) == 0 ? 0 : -1;
    if (st == 0 && n == 12 && h5fl_crc32c(0, vb, 8) == h5fl_get_u32((uint8_t *)vb + 8))
        st = type_note(&c->tm->users, &c->tm->nu, h5fl_get_u64(vb), to);
    free(vb);
    free(p);
    return st;
}

/* Objects with several names (hardlinks.c) inside the copied tree are copied once, into the
 * destination's object store, and every name met becomes a stub of the copy, as native H5Ocopy links one
 * copy twice. */
typedef struct hard_map {
    h5fl_ids_t src, dst; /* source object ids and their copies' ids (same index) */
    uint64_t *names;     /* stubs made for each copy: its link count, written before the copy is named */
    uint64_t top_ino;    /* the copied object's directory: met again inside itself, the copy is refused */
} hard_map_t;

/* Cross-container: write the data of dataset `from` (HDF5 path `spath`) into the dataset `to` (`dpath`),
 * whose directory already holds the copied sidecar, in blocks of at most 64 MiB along the first axis. */
static int copy_data(const copy_opts_t *c, const char *from, const char *spath, const char *to,
                     const char *dpath)
{
    h5fl_dset_t *s = h5fl_dset_open_dir(c->sf, from, spath);
    if (!s)
        return -1;
    h5fl_dset_t *d = h5fl_dset_open_dir(c->df, to, dpath);
    if (!d) {
        h5fl_dataset_close(s, H5P_DEFAULT, NULL);
        return -1;
    }
    if (s->vds) { /* no data of its own: the copied creation property list holds its mappings */
        h5fl_dataset_close(d, H5P_DEFAULT, NULL);
        h5fl_dataset_close(s, H5P_DEFAULT, NULL);
        return 0;
    }
    /* every rank flushed before the copy: read what all of them wrote, not the index built earlier */
    h5fl_dset_forget_index(s);
    int st = 0;
    hid_t ms = H5I_INVALID_HID, fs = H5I_INVALID_HID;
    void *buf = NULL;
    /* Object references name ids of the source container: within it they are copied as they are; into
     * another one they become NULL references, as native H5Ocopy makes them without
     * H5O_COPY_EXPAND_REFERENCE_FLAG (that container mints the same ids for its own objects). */
    bool plain_refs = H5Tget_class(s->type) == H5T_REFERENCE; /* expand_refs: kept, mapped by expand_refs() */
    bool null_refs = !c->same && !c->expand_refs && plain_refs;
    if (!c->same && !plain_refs && H5Tdetect_class(s->type, H5T_REFERENCE) > 0) {
        h5fl_err("cannot copy dataset '%s' to another container: references inside its compound or array "
                 "elements would name objects of the source container; copy it within the container, or "
                 "write the other members into a new dataset",
                 spath);
        st = -1;
        goto done;
    }
    int rank = H5Sget_simple_extent_ndims(s->space);
    hssize_t npts = H5Sget_simple_extent_npoints(s->space);
    size_t esz = H5Tget_size(s->type);
    if (rank < 0 || npts < 0 || esz == 0) {
        h5fl_err("cannot copy dataset '%s': invalid type or dataspace", spath);
        st = -1;
        goto done;
    }
    if (npts == 0 || H5Sget_simple_extent_type(s->space) == H5S_NULL)
        goto done;
    hsize_t dims[H5S_MAX_RANK], start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(s->space, dims, NULL);
    hsize_t rows = rank > 0 ? dims[0] : 1, rowpts = rank > 0 && dims[0] ? (hsize_t)npts / dims[0] : 1;
    const hsize_t limit = (hsize_t)64 << 20;
    hsize_t per = rowpts * esz >= limit ? 1 : limit / (rowpts * esz);
    if (per > rows)
        per = rows;
    if (per != 0 && rowpts > SIZE_MAX / esz / per) {
        h5fl_err("cannot copy dataset '%s': a block does not fit in memory", spath);
        st = -1;
        goto done;
    }
    buf = malloc((size_t)(per * rowpts * esz));
    if (!buf) {
        h5fl_err("out of memory copying dataset '%s'", spath);
        st = -1;
        goto done;
    }
    fs = H5Scopy(s->space);
    for (hsize_t r = 0; st == 0 && r < rows; r += per) {
        hsize_t n = rows - r < per ? rows - r : per;
        if (rank > 0) {
            for (int k = 0; k < rank; k++) {
                start[k] = 0;
                count[k] = dims[k];
            }
            start[0] = r;
            count[0] = n;
            H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
            ms = H5Screate_simple(rank, count, NULL);
        } else {
            ms = H5Screate(H5S_SCALAR);
        }
        void *sv[1] = {s}, *dv[1] = {d}, *bv[1] = {buf};
        const void *cbv[1] = {buf};
        hid_t tv[1] = {s->type}, msv[1] = {ms}, fsv[1] = {fs};
        if (null_refs)
            memset(buf, 0, (size_t)(n * rowpts * esz));
        if ((!null_refs && h5fl_dataset_read(1, sv, tv, msv, fsv, H5P_DATASET_XFER_DEFAULT, bv, NULL) < 0) ||
            h5fl_dataset_write(1, dv, tv, msv, fsv, H5P_DATASET_XFER_DEFAULT, cbv, NULL) < 0) {
            if (!h5fl_err_msg()[0])
                h5fl_err("cannot copy the data of dataset '%s'", spath);
            st = -1;
        }
        if (H5Tdetect_class(s->type, H5T_VLEN) > 0 || H5Tis_variable_str(s->type) > 0)
            H5Treclaim(s->type, ms, H5P_DEFAULT, buf);
        H5Sclose(ms);
        ms = H5I_INVALID_HID;
    }
done:
    free(buf);
    if (fs >= 0)
        H5Sclose(fs);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", h5fl_err_msg()); /* closing must not lose why the copy failed */
    if (h5fl_dataset_close(d, H5P_DEFAULT, NULL) < 0)
        st = -1;
    h5fl_dataset_close(s, H5P_DEFAULT, NULL);
    if (st != 0 && msg[0])
        h5fl_err("%s", msg);
    return st;
}

static char *hpath_join(const char *path, const char *comp)
{
    char name[NAME_MAX + 1];
    if (h5fl_unescape(comp, name, sizeof name) != 0)
        return NULL;
    size_t a = strlen(path);
    char *p = malloc(a + strlen(name) + 2);
    if (p)
        sprintf(p, "%s%s%s", path, a && path[a - 1] == '/' ? "" : "/", name);
    else
        h5fl_err("out of memory");
    return p;
}

static int copy_dir(const copy_opts_t *c, const char *from, const char *spath, const char *to,
                    const char *dpath, bool root, int depth);

/* The name `dst` (HDF5 path `dpath`) of the copy is a hard link to source object `sid`, copied once. */
static int copy_hard(const copy_opts_t *c, uint64_t sid, const char *spath, const char *dst, const char *dpath,
                     int depth)
{
    hard_map_t *m = c->hm;
    h5fl_file_t *df = c->df;
    if (sid == H5FL_ROOT_ID) {
        h5fl_err("cannot copy '%s': it is a hard link to the root group, which h5flow_log does not copy into "
                 "a group; copy without it (delete or replace the link) or copy the root group itself",
                 spath);
        return -1;
    }
    size_t k = 0;
    while (k < m->src.n && m->src.v[k] != sid)
        k++;
    int st = 0;
    if (k == m->src.n) { /* first met: the copy gets its id, then its contents, then its store slot */
        char n1[96], n2[96];
        unsigned long long e = (unsigned long long)df->epoch, n = (unsigned long long)h5fl_epoch_owner(df)->create_counter++;
        snprintf(n1, sizeof n1, "@tmp.copyid.%llu.%llu", e, n); /* the writer's epoch: its own on any host */
        snprintf(n2, sizeof n2, "@tmp.copyobj.%llu.%llu", e, n);
        char *sobj = h5fl_hard_store_dir(c->sf->o.dir, sid), *tid = h5fl_join(df->o.dir, n1),
             *tobj = h5fl_join(df->o.dir, n2), *slot = NULL, *idf = NULL, *idt = NULL;
        uint64_t nid = 0, *nn = realloc(m->names, (m->src.n + 1) * sizeof *nn);
        if (nn)
            m->names = nn;
        st = sobj && tid && tobj && nn ? h5fl_hard_store_ready(df) : -1;
        if (st == 0 && mkdir(tid, 0755) != 0) {
            h5fl_err("cannot create %s: %s", tid, strerror(errno));
            st = -1;
        }
        if (st == 0)
            st = h5fl_ref_object_id(df, tid, dpath, &nid);
        if (st == 0 && (h5fl_ids_add(&m->src, sid) != 0 || h5fl_ids_add(&m->dst, nid) != 0))
            st = -1;
        if (st == 0) {
            m->names[k] = 0;
            st = copy_dir(c, sobj, spath, tobj, dpath, false, depth + 1);
        }
        if (st == 0 && (!(slot = h5fl_hard_store_dir(df->o.dir, nid)) || !(idf = h5fl_join(tid, H5FL_ID_FILE)) ||
                        !(idt = h5fl_join(tobj, H5FL_ID_FILE))))
            st = -1;
        if (st == 0 && (rename(idf, idt) != 0 || rename(tobj, slot) != 0)) {
            h5fl_err("cannot copy '%s' into the object store %s: %s", spath, slot, strerror(errno));
            st = -1;
        }
        if (st == 0 && c->tm)
            st = type_moved(c->tm, tobj, slot);
        if (tid)
            h5fl_rm_rf(tid);
        if (st != 0 && tobj)
            h5fl_rm_rf(tobj);
        free(sobj);
        free(tid);
        free(tobj);
        free(slot);
        free(idf);
        free(idt);
        if (st != 0)
            return -1;
    }
    if (mkdir(dst, 0755) != 0) {
        h5fl_err("cannot create %s: %s", dst, strerror(errno));
        return -1;
    }
    m->names[k]++;
    return h5fl_hard_write_stub(dst, m->dst.v[k], c->sync);
}

/* H5O_COPY_EXPAND_SOFT_LINK_FLAG: the soft link `link` (entry `n` of group `gdir`, HDF5 path `gpath`) is
 * copied as the object it names; a dangling one stays a soft link (as native HDF5). */
static int copy_expanded(const copy_opts_t *c, const char *gdir, const char *gpath, const char *link,
                         const char *n, const char *dst, const char *dpath, int depth)
{
    char *target = h5fl_softlink_read(link);
    if (!target)
        return -1;
    h5fl_obj_t g = {.type = H5I_GROUP, .file = c->sf, .path = (char *)gpath, .dir = (char *)gdir};
    h5fl_loc_t loc = {0};
    int st = h5fl_resolve(&g, target, &loc);
    free(target);
    if (st != 0)
        return -1;
    char *dp = hpath_join(dpath, n);
    size_t ll = loc.dir ? strlen(loc.dir) : 0;
    if (!dp) {
        st = -1;
    } else if (loc.type == H5I_GROUP && !loc.file && !strncmp(gdir, loc.dir, ll) && (!gdir[ll] || gdir[ll] == '/')) {
        /* the link names a group that contains it: expanding would never end (native HDF5 makes a second
         * hard link to the copy there, which h5flow_log cannot store) */
        h5fl_err("cannot expand soft link '%s': it names '%s', a group that contains it; copy without "
                 "H5O_COPY_EXPAND_SOFT_LINK_FLAG",
                 dp, loc.path);
        st = -1;
    } else if (loc.ldir) { /* the soft link names an object with several names: one more name of its copy */
        uint64_t id;
        st = h5fl_hard_read(loc.ldir, &id) == 0 ? copy_hard(c, id, loc.path, dst, dp, depth) : -1;
    } else if (loc.type == H5I_GROUP || loc.type == H5I_DATASET)
        st = copy_dir(c, loc.dir, loc.path, dst, dp, false, depth + 1);
    else
        st = copy_dir(c, link, loc.path, dst, dp, false, depth + 1); /* dangling: the link itself */
    free(dp);
    h5fl_loc_free(&loc);
    return st;
}

/* Whether dataset directory `dir` holds a log of epoch >= `epoch`. Such records (the copying writer's own,
 * or another writer's of this or a later epoch) could order after the destination's later writes to the
 * copy, so that copy's data is written anew instead. */
static bool has_late_logs(const char *dir, uint64_t epoch)
{
    DIR *d = opendir(dir);
    if (!d)
        return true;
    bool late = false;
    struct dirent *e;
    size_t pl = strlen(H5FL_LOG_PREFIX);
    while (!late && (e = readdir(d))) {
        if (strncmp(e->d_name, H5FL_LOG_PREFIX, pl) != 0)
            continue;
        char *end;
        errno = 0;
        unsigned long long ep = strtoull(e->d_name + pl, &end, 10);
        late = errno != 0 || end == e->d_name + pl || ep >= epoch;
    }
    closedir(d);
    return late;
}

static int copy_dir(const copy_opts_t *c, const char *from, const char *spath, const char *to,
                    const char *dpath, bool root, int depth)
{
    copy_opts_t own;
    if (c->logs && h5fl_exists(from, H5FL_DSET_FILE) && has_late_logs(from, c->df->epoch)) {
        own = *c;
        own.logs = false;
        c = &own;
    }
    if (depth > 0 && c->hm && h5fl_objno(from) == c->hm->top_ino) {
        h5fl_err("cannot copy '%s': it is reached again inside itself through a hard link (%s); native HDF5 "
                 "links the copy to itself there, which h5flow_log does not do: copy without that link",
                 spath, dpath);
        return -1;
    }
    if (mkdir(to, 0755) != 0) {
        h5fl_err("cannot create %s: %s", to, strerror(errno));
        return -1;
    }
    if (c->tm && type_note_object(c, from, to) != 0)
        return -1;
    DIR *d = opendir(from);
    if (!d) {
        h5fl_err("cannot list %s: %s", from, strerror(errno));
        return -1;
    }
    int st = 0;
    struct dirent *e;
    while (st == 0 && (e = readdir(d))) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || (root && container_only(n)) || !strncmp(n, "@tmp.", 5))
            continue;
        if (!c->attrs && !strncmp(n, H5FL_ATTR_PREFIX, strlen(H5FL_ATTR_PREFIX)))
            continue;
        if (!c->logs && (!strncmp(n, H5FL_LOG_PREFIX, strlen(H5FL_LOG_PREFIX)) || !strncmp(n, "@shards.", 8)))
            continue; /* the data is written anew (restructured shards too: the copy is not restructured) */
        if (!strcmp(n, H5FL_ID_FILE) || !strcmp(n, H5FL_NLINK_FILE))
            continue; /* the copy is another object: it gets an id of its own when referenced, one name */
        if (!c->same && !strcmp(n, H5FL_DTYPE_USE_FILE))
            continue; /* a committed type's id means nothing in another container */
        char *src = h5fl_join(from, n), *dst = h5fl_join(to, n);
        struct stat sb;
        if (!src || !dst)
            st = -1;
        else if (lstat(src, &sb) != 0) {
            h5fl_err("cannot copy %s: %s", src, strerror(errno));
            st = -1;
        } else if (S_ISDIR(sb.st_mode)) {
            H5I_type_t t = h5fl_dir_type(src, false);
            if (t == H5I_BADID)
                ; /* not a link: a creation that never completed */
            else if (c->shallow && depth >= 1)
                ; /* a member of a member of the top group: the member group is copied empty */
            else if (t == H5FL_I_HARD) {
                uint64_t id;
                char *sp = hpath_join(spath, n), *dp = hpath_join(dpath, n);
                st = sp && dp && h5fl_hard_read(src, &id) == 0 ? copy_hard(c, id, sp, dst, dp, depth) : -1;
                free(sp);
                free(dp);
            } else if (t == H5FL_I_EXT && c->expand_ext) {
                h5fl_err("cannot copy '%s': expanding external links into objects "
                         "(H5O_COPY_EXPAND_EXT_LINK_FLAG) is not supported by h5flow_log; copy without it (the "
                         "link is copied) or copy the linked object itself",
                         spath);
                st = -1;
            } else if (t == H5FL_I_SOFT && c->expand)
                st = copy_expanded(c, from, spath, src, n, dst, dpath, depth);
            else {
                char *sp = hpath_join(spath, n), *dp = hpath_join(dpath, n);
                st = sp && dp ? copy_dir(c, src, sp, dst, dp, false, depth + 1) : -1;
                free(sp);
                free(dp);
            }
        } else if (S_ISREG(sb.st_mode) && !c->same && !strncmp(n, H5FL_ATTR_PREFIX, strlen(H5FL_ATTR_PREFIX)))
            st = h5fl_attr_copy_across(c->sf, from, spath, c->df, to, dpath, n, c->expand_refs);
        else if (S_ISREG(sb.st_mode)) {
            st = copy_file(src, dst, c->sync);
            /* within a container too, native's copy gives an attribute NULL references (expand_refs: the
             * copies' ids, set by expand_refs()) */
            if (st == 0 && c->same && !c->expand_refs && !strncmp(n, H5FL_ATTR_PREFIX, strlen(H5FL_ATTR_PREFIX)))
                st = h5fl_attr_map_refs(c->df, to, dpath, n, NULL, NULL);
        }
        /* anything else is not part of the format and is not copied */
        free(src);
        free(dst);
    }
    closedir(d);
    if (st == 0 && root && !h5fl_exists(to, H5FL_GROUP_FILE))
        st = h5fl_make_group_dir(to, c->sync);
    if (st == 0 && !c->logs && h5fl_exists(to, H5FL_DSET_FILE))
        st = h5fl_sidecar_drop_layout(to, c->sync);
    if (st == 0 && !c->logs && h5fl_exists(to, H5FL_DSET_FILE))
        st = copy_data(c, from, spath, to, dpath);
    return st;
}

/* ------------------------------------------------------------------ H5O_COPY_EXPAND_REFERENCE_FLAG
 * As native H5Ocopy: every object an object reference of the copy names is copied too, once, and the
 * reference names the copy: the references of attributes (H5T_STD_REF_OBJ), and those of datasets copied
 * into another container (within one, native keeps a dataset's references as they are, naming the
 * originals, and so does this). An object inside the copied tree
 * is that tree's copy; any other object is copied without a name, into the destination's object store
 * (@objects/<id>, link count 0: reachable by its references only, as native's copy with no link), and the
 * references inside it are expanded in turn. The references keep their source ids while the tree is
 * copied; then expand_refs() rewrites each copied dataset and attribute holding references. */
typedef struct expand {
    const copy_opts_t *c;
    const char *sdir, *tdir, *dpath; /* the copied tree: its source directory, the copy's, the copy's path */
    bool sroot;                      /* the copied tree is the source container's root group */
    h5fl_ids_t src, dst;             /* source ids and their copies' ids */
    char **todo;                     /* copies made outside the tree, whose references are still to map */
    size_t ntodo, captodo;
} expand_t;

/* Copy source object `loc` (outside the copied tree) into the destination's object store; its id in *nid. */
static int expand_outside(expand_t *x, const h5fl_loc_t *loc, uint64_t *nid)
{
    const copy_opts_t *c = x->c;
    h5fl_file_t *df = c->df;
    char n1[96];
    snprintf(n1, sizeof n1, "@tmp.copyref.%llu.%llu", (unsigned long long)df->epoch,
             (unsigned long long)h5fl_epoch_owner(df)->create_counter++);
    char *tobj = h5fl_join(df->o.dir, n1), *slot = NULL;
    char **todo = x->ntodo == x->captodo ? realloc(x->todo, (x->captodo = 2 * x->captodo + 4) * sizeof *todo) : x->todo;
    if (todo)
        x->todo = todo;
    int st = tobj && todo ? h5fl_hard_store_ready(df) : -1;
    if (st == 0)
        st = copy_dir(c, loc->dir, loc->path, tobj, loc->path, !strcmp(loc->dir, c->sf->o.dir), 1);
    if (st == 0)
        st = h5fl_ref_object_id(df, tobj, loc->path, nid);
    if (st == 0)
        st = h5fl_write_u64(tobj, H5FL_NLINK_FILE, 0, df->fsync);
    if (st == 0 && !(slot = h5fl_hard_store_dir(df->o.dir, *nid)))
        st = -1;
    if (st == 0 && rename(tobj, slot) != 0) {
        h5fl_err("cannot copy '%s' (which a reference names) into the object store %s: %s", loc->path, slot,
                 strerror(errno));
        st = -1;
    }
    if (st == 0 && c->tm)
        st = type_moved(c->tm, tobj, slot);
    if (st == 0) {
        x->todo[x->ntodo++] = slot;
        slot = NULL;
    } else if (tobj) {
        h5fl_rm_rf(tobj);
    }
    free(tobj);
    free(slot);
    return st;
}

/* The id of the copy of the object source id `id` names, the object copied first if need be. */
static int expand_map(void *ctx, uint64_t *id)
{
    expand_t *x = ctx;
    const copy_opts_t *c = x->c;
    for (size_t k = 0; k < x->src.n; k++)
        if (x->src.v[k] == *id) {
            *id = x->dst.v[k];
            return 0;
        }
    for (size_t k = 0; c->hm && k < c->hm->src.n; k++) /* an object with several names, copied once */
        if (c->hm->src.v[k] == *id) {
            *id = c->hm->dst.v[k];
            return 0;
        }
    H5O_token_t tok;
    memset(&tok, 0, sizeof tok);
    memcpy(tok.__data, id, sizeof *id);
    h5fl_loc_t loc = {0};
    if (h5fl_ref_resolve(c->sf, &tok, &loc) != 0)
        return -1;
    size_t sl = strlen(x->sdir);
    const char *rel = loc.dir + sl;
    char first[NAME_MAX + 1] = "";
    if (!strncmp(loc.dir, x->sdir, sl) && rel[0] == '/')
        snprintf(first, sizeof first, "%.*s", (int)strcspn(rel + 1, "/"), rel + 1);
    bool inside = !strncmp(loc.dir, x->sdir, sl) &&
                  (rel[0] == '\0' || (rel[0] == '/' && !(x->sroot && container_only(first))));
    uint64_t nid = 0;
    int st;
    if (inside) { /* the tree's own copy of it */
        char *cdir = malloc(strlen(x->tdir) + strlen(rel) + 1);
        if (cdir)
            sprintf(cdir, "%s%s", x->tdir, rel);
        st = cdir ? h5fl_ref_object_id(c->df, cdir, x->dpath, &nid) : -1;
        free(cdir);
    } else {
        st = expand_outside(x, &loc, &nid);
    }
    h5fl_loc_free(&loc);
    if (st == 0 && (h5fl_ids_add(&x->src, *id) != 0 || h5fl_ids_add(&x->dst, nid) != 0))
        st = -1;
    if (st == 0)
        *id = nid;
    return st;
}

/* The references of dataset copy `dir` in another container mapped (whole: 8 bytes of memory per element). */
static int expand_dataset(expand_t *x, const char *dir, const char *path)
{
    h5fl_dset_t *d = h5fl_dset_open_dir(x->c->df, dir, path);
    if (!d)
        return -1;
    int st = 0;
    uint64_t *buf = NULL;
    hssize_t n = H5Sget_simple_extent_npoints(d->space);
    if (x->c->same || d->vds || H5Tdetect_class(d->type, H5T_REFERENCE) <= 0 || n <= 0)
        goto done;
    if (H5Tequal(d->type, H5T_STD_REF_OBJ) <= 0) {
        h5fl_err("cannot copy the objects that dataset '%s' references: h5flow_log expands object references "
                 "(H5T_STD_REF_OBJ) only, not region references or references inside compound or array "
                 "elements; copy without H5O_COPY_EXPAND_REFERENCE_FLAG",
                 path);
        st = -1;
        goto done;
    }
    if (!(buf = calloc((size_t)n, sizeof *buf))) {
        h5fl_err("out of memory expanding the references of dataset '%s'", path);
        st = -1;
        goto done;
    }
    void *dv[1] = {d}, *bv[1] = {buf};
    const void *cbv[1] = {buf};
    hid_t tv[1] = {H5T_STD_REF_OBJ}, all[1] = {H5S_ALL};
    if (h5fl_dataset_read(1, dv, tv, all, all, H5P_DATASET_XFER_DEFAULT, bv, NULL) < 0)
        st = -1;
    for (hssize_t i = 0; st == 0 && i < n; i++)
        if (buf[i] != 0)
            st = expand_map(x, &buf[i]);
    if (st == 0 && h5fl_dataset_write(1, dv, tv, all, all, H5P_DATASET_XFER_DEFAULT, cbv, NULL) < 0)
        st = -1;
done:
    free(buf);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", h5fl_err_msg()); /* closing must not lose why it failed */
    if (h5fl_dataset_close(d, H5P_DEFAULT, NULL) < 0)
        st = -1;
    if (st != 0 && msg[0])
        h5fl_err("%s", msg);
    return st;
}

/* Every reference held by the copy at `dir` (an object and the objects under it, hard links excepted:
 * their copies are in the store, mapped on their own) mapped. */
static int expand_tree(expand_t *x, const char *dir, const char *path, int depth)
{
    if (depth > 4096) {
        h5fl_err("cannot expand the references of '%s': nested too deeply", path);
        return -1;
    }
    DIR *dd = opendir(dir);
    if (!dd) {
        h5fl_err("cannot list %s: %s", dir, strerror(errno));
        return -1;
    }
    int st = 0;
    struct dirent *e;
    while (st == 0 && (e = readdir(dd))) {
        const char *n = e->d_name;
        if (!strcmp(n, ".") || !strcmp(n, "..") || !strncmp(n, "@tmp.", 5) || (depth == 0 && container_only(n)))
            continue;
        char *sub = h5fl_join(dir, n);
        struct stat sb;
        if (!sub) {
            st = -1;
        } else if (lstat(sub, &sb) == 0 && S_ISREG(sb.st_mode) &&
                   !strncmp(n, H5FL_ATTR_PREFIX, strlen(H5FL_ATTR_PREFIX))) {
            st = h5fl_attr_map_refs(x->c->df, dir, path, n, expand_map, x);
        } else if (S_ISDIR(sb.st_mode)) {
            H5I_type_t t = h5fl_dir_type(sub, false);
            if (t == H5I_GROUP || t == H5I_DATASET || t == H5I_DATATYPE) {
                char *sp = hpath_join(path, n);
                st = sp ? expand_tree(x, sub, sp, depth + 1) : -1;
                free(sp);
            }
        }
        free(sub);
    }
    closedir(dd);
    if (st == 0 && h5fl_exists(dir, H5FL_DSET_FILE))
        st = expand_dataset(x, dir, path);
    return st;
}

/* The copy at tdir (of sdir, to be named dpath) and every object it references, copied and mapped; the
 * copies made outside the tree, in *made (to remove if the copy fails). */
static int expand_refs(const copy_opts_t *c, const char *sdir, const char *tdir, const char *dpath, bool sroot,
                       h5fl_ids_t *made)
{
    expand_t x = {.c = c, .sdir = sdir, .tdir = tdir, .dpath = dpath, .sroot = sroot};
    int st = expand_tree(&x, tdir, dpath, 0);
    size_t ti = 0, hi = 0;
    while (st == 0 && (ti < x.ntodo || (c->hm && hi < c->hm->dst.n))) {
        char *dir = ti < x.ntodo ? h5fl_strdup(x.todo[ti++]) : h5fl_hard_store_dir(c->df->o.dir, c->hm->dst.v[hi++]);
        st = dir ? expand_tree(&x, dir, "", 1) : -1;
        free(dir);
    }
    for (size_t i = 0; i < x.ntodo; i++) {
        uint64_t id = 0;
        if (h5fl_ref_read_id(x.todo[i], &id) == 1 && h5fl_ids_add(made, id) != 0)
            st = -1;
        free(x.todo[i]);
    }
    free(x.todo);
    free(x.src.v);
    free(x.dst.v);
    return st;
}

/* H5Ocopy. Same container: the tree is copied with its logs. Another container: sidecars, attributes
 * and links are copied and each dataset's data is read and written anew, so that the copy's writes
 * carry the destination's epoch (copied logs of another container's epochs could order after the
 * destination's later writes). */
herr_t h5fl_object_copy(void *src_obj, const H5VL_loc_params_t *lp1, const char *src_name, void *dst_obj,
                        const H5VL_loc_params_t *lp2, const char *dst_name, hid_t ocpypl, hid_t lcpl,
                        hid_t dxpl, void **req)
{
    (void)lp1;
    (void)lp2;
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *so = src_obj, *dobj = dst_obj;
    h5fl_file_t *sf = so->file, *df = dobj->file;
    h5fl_loc_t src = {0}, parent = {0};
    char leaf[NAME_MAX + 1], *leafname = NULL, *to = NULL, *dpath = NULL;
    unsigned flags = 0, crt = 0;
    int st = -1;
    if (!h5fl_writable(df))
        goto done;
    if (ocpypl != H5P_DEFAULT && ocpypl >= 0 && H5Pget_copy_object(ocpypl, &flags) < 0) {
        h5fl_err("invalid object copy property list");
        goto done;
    }
    if (sf->fileno != df->fileno && df->comm != MPI_COMM_NULL && df->size > 1) {
        h5fl_err("copying objects between two containers is not supported in parallel by h5flow_log: copy "
                 "in one process, or within one container");
        goto done;
    }
    if (lcpl != H5P_DEFAULT && lcpl >= 0)
        H5Pget_create_intermediate_group(lcpl, &crt);
    h5fl_collective_begin(df);
    st = h5fl_resolve(so, src_name, &src);
    if (st == 0 && src.type != H5I_GROUP && src.type != H5I_DATASET && src.type != H5I_DATATYPE) {
        h5fl_err("object '%s' does not exist", src_name);
        st = -1;
    }
    if (st == 0 && src.file)
        sf = src.file; /* reached through an external link: the source is in that container */
    /* every rank's buffered writes reach the logs before rank 0 copies or reads them */
    if (st == 0 && h5fl_file_flush(sf, false) != 0)
        st = -1;
    if (df->comm != MPI_COMM_NULL && df->size > 1) {
        int all = st;
        MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, df->comm);
        st = all;
    }
    if (st == 0)
        st = h5fl_resolve_parent(dobj, dst_name, df->rank != 0 ? H5FL_COMPUTE : crt ? H5FL_MKPARENTS : H5FL_CHECK,
                                 &parent, leaf, sizeof leaf, &leafname);
    if (st == 0 && !(to = h5fl_join(parent.dir, leaf)))
        st = -1;
    if (st == 0 && !(dpath = hpath_join(parent.path, leaf)))
        st = -1;
    if (st == 0 && df->rank == 0) {
        /* The copy is made under a temporary name at the container root and renamed into place: a failed
         * or interrupted copy leaves nothing under the new name, and a group can be copied into itself. */
        char tmpn[96]; /* the writer's epoch is its own (whatever the host): so is this name */
        snprintf(tmpn, sizeof tmpn, "@tmp.copy.%llu.%llu", (unsigned long long)df->epoch,
                 (unsigned long long)h5fl_epoch_owner(df)->create_counter++);
        char *tmp = h5fl_join(df->o.dir, tmpn);
        if (!tmp) {
            st = -1;
        } else if (access(to, F_OK) == 0 && h5fl_dir_type(to, false) != H5I_BADID) {
            h5fl_err("cannot copy to '%s': a link with this name already exists", dst_name);
            st = -1;
        } else {
            copy_opts_t c = {.sync = df->fsync, .logs = sf->fileno == df->fileno,
                             .attrs = !(flags & H5O_COPY_WITHOUT_ATTR_FLAG),
                             .shallow = (flags & H5O_COPY_SHALLOW_HIERARCHY_FLAG) != 0,
                             .expand = (flags & H5O_COPY_EXPAND_SOFT_LINK_FLAG) != 0,
                             .expand_ext = (flags & H5O_COPY_EXPAND_EXT_LINK_FLAG) != 0,
                             .expand_refs = (flags & H5O_COPY_EXPAND_REFERENCE_FLAG) != 0,
                             .same = sf->fileno == df->fileno, .sf = sf, .df = df};
            hard_map_t hm = {.top_ino = h5fl_objno(src.dir)};
            type_map_t tm = {0};
            c.hm = &hm;
            c.tm = c.same ? NULL : &tm; /* within a container the copy shares the type, as native */
            bool sroot = h5fl_exists(src.dir, H5FL_MARKER);
            h5fl_ids_t made = {0}; /* objects copied because references name them (store slots) */
            st = copy_dir(&c, src.dir, src.path, tmp, dpath, sroot, 0);
            if (st == 0 && c.expand_refs)
                st = expand_refs(&c, src.dir, tmp, dpath, sroot, &made);
            if (st == 0 && c.tm)
                st = type_relink(&c, dpath);
            type_map_free(&tm);
            for (size_t i = 0; st == 0 && i < hm.dst.n; i++) { /* the copies' link counts, before their names */
                char *slot = h5fl_hard_store_dir(df->o.dir, hm.dst.v[i]), txt[32];
                int n = snprintf(txt, sizeof txt, "%llu\n", (unsigned long long)hm.names[i]);
                st = slot ? h5fl_write_file_atomic(slot, H5FL_NLINK_FILE, txt, (size_t)n, df->fsync) : -1;
                free(slot);
            }
            /* its creation order, then the one rename that names it, refused where a link exists (util.c) */
            if (st == 0 && h5fl_corder_assign(parent.dir, tmp, df->fsync) != 0)
                st = -1;
            if (st == 0 && h5fl_name_publish(tmp, to, "copy", dst_name) != 0)
                st = -1;
            for (size_t i = 0; st != 0 && i < hm.dst.n + made.n; i++) { /* a failed copy leaves no copied object */
                char *slot = h5fl_hard_store_dir(df->o.dir, i < hm.dst.n ? hm.dst.v[i] : made.v[i - hm.dst.n]);
                if (slot)
                    h5fl_rm_rf(slot);
                free(slot);
            }
            free(made.v);
            free(hm.src.v);
            free(hm.dst.v);
            free(hm.names);
            if (st != 0) {
                char msg[1024];
                snprintf(msg, sizeof msg, "%s", h5fl_err_msg());
                h5fl_rm_rf(tmp);
                h5fl_err("%s", msg);
            }
        }
        free(tmp);
    }
    st = h5fl_collective(df, st);
done:
    free(leafname);
    free(to);
    free(dpath);
    h5fl_loc_free(&src);
    h5fl_loc_free(&parent);
    if (st != 0)
        h5fl_err_push(__func__);
    return st;
}

/* Bytes of the regular files under `dir` (recursively). */
static int tree_size(const char *dir, uint64_t *total)
{
    DIR *d = opendir(dir);
    if (!d) {
        h5fl_err("cannot list %s: %s", dir, strerror(errno));
        return -1;
    }
    int st = 0;
    struct dirent *e;
    while (st == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *p = h5fl_join(dir, e->d_name);
        struct stat sb;
        if (!p)
            st = -1;
        else if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
            st = tree_size(p, total);
        else if (S_ISREG(sb.st_mode))
            *total += (uint64_t)sb.st_size;
        free(p);
    }
    closedir(d);
    return st;
}

/* File operations of the native connector that tools call on any file: H5Fget_filesize (h5stat, h5py's
 * FileID.get_filesize) is the total size of the container's files. Others are refused. */
herr_t h5fl_file_optional(void *obj, H5VL_optional_args_t *args, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    if (args->op_type == H5VL_NATIVE_FILE_GET_SIZE) {
        H5VL_native_file_optional_args_t *a = args->args;
        uint64_t total = 0;
        if (tree_size(o->file->o.dir, &total) == 0) {
            *a->get_size.size = (hsize_t)total;
            return 0;
        }
    } else if (args->op_type == H5VL_NATIVE_FILE_START_SWMR_WRITE) { /* docs/FORMAT.md "SWMR" */
        h5fl_file_t *f = o->file;
        if (!(f->intent & H5F_ACC_RDWR))
            h5fl_err("cannot start SWMR writing: the file is open read-only (open it read-write)");
        else if (f->intent & H5F_ACC_SWMR_WRITE)
            h5fl_err("SWMR writing has already started for this file");
        else if (h5fl_file_flush(f, false) == 0) {
            f->intent |= H5F_ACC_SWMR_WRITE;
            return 0;
        }
    } else {
        h5fl_err("file operation %d (native HDF5 only) is not supported by h5flow_log", args->op_type);
    }
    h5fl_err_push(__func__);
    return -1;
}
