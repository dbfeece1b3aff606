/* File callbacks: the container directory, its marker, the MPI communicator, flush and close. */
#include "h5fl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- objects and their file */
void h5fl_obj_init(h5fl_obj_t *o, H5I_type_t type, h5fl_file_t *f, const char *path, const char *dir)
{
    o->type = type;
    o->rc = 1;
    o->file = f;
    o->path = path ? h5fl_strdup(path) : NULL;
    o->dir = dir ? h5fl_strdup(dir) : NULL;
    if (f && (void *)f != (void *)o)
        f->o.rc++;
    if (type != H5I_FILE && o->dir)
        h5fl_reg_add(o); /* a file registers once its container exists (set_fileno) */
}

static void file_free(h5fl_file_t *f)
{
    h5fl_reg_remove(&f->o);
    if (f->epoch_of)
        h5fl_file_decref(f->epoch_of);
    if (f->fapl >= 0)
        H5Pclose(f->fapl);
    if (f->fcpl >= 0)
        H5Pclose(f->fcpl);
    if (f->comm != MPI_COMM_NULL) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin)
            MPI_Comm_free(&f->comm);
    }
    if (f->memdir) /* an in-memory file: nothing of it outlives its close */
        h5fl_rm_rf(f->memdir);
    free(f->memdir);
    free(f->name);
    free(f->o.path);
    free(f->o.dir);
    free(f);
}

void h5fl_file_decref(h5fl_file_t *f)
{
    if (--f->o.rc == 0)
        file_free(f);
}

void h5fl_obj_release(h5fl_obj_t *o)
{
    h5fl_reg_remove(o);
    free(o->path);
    free(o->dir);
    o->path = o->dir = NULL;
    if (o->file && (void *)o->file != (void *)o)
        h5fl_file_decref(o->file);
}

bool h5fl_writable(const h5fl_file_t *f)
{
    if (!(f->intent & H5F_ACC_RDWR)) {
        h5fl_err("the container %s is open read-only", f->name);
        return false;
    }
    return true;
}

int h5fl_collective(h5fl_file_t *f, int local_status)
{
    if (f->comm == MPI_COMM_NULL || f->size == 1)
        return local_status;
    struct {
        int status;
        char msg[512];
    } s;
    memset(&s, 0, sizeof s);
    s.status = local_status;
    if (f->rank == 0 && local_status != 0)
        snprintf(s.msg, sizeof s.msg, "%s", h5fl_err_msg());
    MPI_Request req;
    MPI_Ibcast(&s, (int)sizeof s, MPI_BYTE, 0, f->comm, &req);
    h5fl_mpi_wait(&req);
    if (f->rank != 0 && s.status != 0)
        h5fl_err("%s (reported by rank 0)", s.msg);
    return s.status;
}

void h5fl_mpi_wait(MPI_Request *req)
{
    int done = 0;
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    while (!done) {
        sched_yield();
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
    }
}

void h5fl_collective_begin(h5fl_file_t *f)
{
    if (f->comm != MPI_COMM_NULL && f->size > 1) {
        MPI_Request req;
        MPI_Ibarrier(f->comm, &req);
        h5fl_mpi_wait(&req);
    }
}

/* Flush every dataset handle of the file, including those HDF5 closed while their flush failed
 * (d->closed): these are released once their data is written. Every handle is tried; the first error
 * is reported. The file stays alive throughout: the caller holds a reference on it. */
int h5fl_file_flush(h5fl_file_t *f, bool sync)
{
    /* every open dataset of the container, whichever file handle opened it; collected first, since a
     * release frees registry entries */
    size_t n = 0, cap = 0;
    h5fl_dset_t **v = NULL;
    for (h5fl_obj_t *o = h5fl_reg_next(NULL); o; o = h5fl_reg_next(o)) {
        if (o->type != H5I_DATASET || o->file->fileno != f->fileno)
            continue;
        if (n == cap) {
            h5fl_dset_t **nv = realloc(v, (cap = cap ? 2 * cap : 16) * sizeof *nv);
            if (!nv) {
                free(v);
                h5fl_err("out of memory");
                return -1;
            }
            v = nv;
        }
        v[n++] = (h5fl_dset_t *)o;
    }
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        h5fl_dset_t *d = v[i];
        if (d->closed ? h5fl_dset_release_closed(d) != 0 : h5fl_dset_flush(d, sync) != 0)
            rc = -1;
    }
    free(v);
    return rc;
}

/* ---------------------------------------------------------------- the marker and the epoch claims */
/* Write the marker through a temporary file named after the epoch this process just claimed (unique: no
 * two writers hold one epoch, whatever host or pid they have), then rename(2) it over the marker. */
static int write_marker(const char *dir, uint64_t epoch, uint64_t version, uint64_t mine, bool sync)
{
    char buf[128], tmp[64];
    int n = snprintf(buf, sizeof buf, "%s\nformat %llu\nepoch %llu\n", H5FL_NAME, (unsigned long long)version,
                     (unsigned long long)epoch);
    snprintf(tmp, sizeof tmp, "@tmp.%llu" H5FL_MARKER, (unsigned long long)mine);
    char *tpath = h5fl_join(dir, tmp), *path = h5fl_join(dir, H5FL_MARKER);
    int rc = -1, fd = -1;
    if (!tpath || !path) {
        h5fl_err("out of memory");
        goto done;
    }
    fd = open(tpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        h5fl_err("cannot create %s: %s", tpath, strerror(errno));
        goto done;
    }
    if (h5fl_pwrite_all(fd, buf, (size_t)n, 0) != 0)
        goto done;
    if (sync && fsync(fd) != 0) {
        h5fl_err("fsync %s: %s", tpath, strerror(errno));
        goto done;
    }
    if (rename(tpath, path) != 0) {
        h5fl_err("cannot rename %s to %s: %s", tpath, path, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    if (fd >= 0)
        close(fd);
    if (rc != 0 && tpath)
        unlink(tpath);
    free(tpath);
    free(path);
    return rc;
}

/* A decimal number of 1 to 20 digits without sign, spaces or leading zeros, that fits in 64 bits. */
static bool parse_u64(const char *s, size_t len, uint64_t *out)
{
    if (len == 0 || len > 20 || (s[0] == '0' && len > 1))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        unsigned dgt = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - dgt) / 10)
            return false;
        v = v * 10 + dgt;
    }
    *out = v;
    return true;
}

/* The marker is exactly "h5flow_log\nformat <V>\nepoch <N>\n"; every field is checked, nothing is
 * guessed: an epoch outside 1..H5FL_EPOCH_MAX would make the next writer's epoch wrap (its writes would
 * order before every earlier one and read back as the old values). */
static int read_marker(const char *dir, uint64_t *epoch, uint64_t *format)
{
    char *path = h5fl_join(dir, H5FL_MARKER);
    void *buf = NULL;
    size_t len = 0;
    int rc = -1;
    if (!path)
        return -1;
    struct stat st;
    if (stat(dir, &st) != 0) { /* "errno = N" lets h5py raise FileNotFoundError (its mode 'a' needs it) */
        h5fl_err("cannot open %s: %s (errno = %d)", dir, strerror(errno), errno);
        goto done;
    }
    if (!S_ISDIR(st.st_mode) || access(path, F_OK) != 0) {
        h5fl_err("%s is not an h5flow_log container (no %s marker); open it without "
                 "HDF5_VOL_CONNECTOR=h5flow_log if it is a native HDF5 file",
                 dir, H5FL_MARKER);
        goto done;
    }
    if (h5fl_read_file(path, &buf, &len) != 0)
        goto done;
    const char *t = buf, *end = t + len;
    static const char head[] = H5FL_NAME "\nformat ";
    const char *nl1 = NULL, *nl2 = NULL;
    if (len < sizeof head - 1 || memcmp(t, head, sizeof head - 1) != 0 ||
        !(nl1 = memchr(t + sizeof head - 1, '\n', (size_t)(end - t - (sizeof head - 1)))) ||
        (size_t)(end - nl1 - 1) < 6 || memcmp(nl1 + 1, "epoch ", 6) != 0 ||
        !(nl2 = memchr(nl1 + 7, '\n', (size_t)(end - nl1 - 7))) || nl2 + 1 != end) {
        h5fl_err("%s is malformed: expected \"%s\\nformat <version>\\nepoch <number>\\n\"; restore it from "
                 "a backup",
                 path, H5FL_NAME);
        goto done;
    }
    uint64_t version = 0, e = 0;
    const char *vs = t + sizeof head - 1, *es = nl1 + 7;
    if (!parse_u64(vs, (size_t)(nl1 - vs), &version) || version < H5FL_FORMAT_OLDEST ||
        version > H5FL_FORMAT_VERSION) {
        h5fl_err("%s: format '%.*s' is not one this connector reads (%d to %d); a newer h5flow wrote it, or "
                 "the marker is damaged",
                 path, (int)(nl1 - vs < 32 ? nl1 - vs : 32), vs, H5FL_FORMAT_OLDEST, H5FL_FORMAT_VERSION);
        goto done;
    }
    if (!parse_u64(es, (size_t)(nl2 - es), &e) || e < 1 || e > H5FL_EPOCH_MAX) {
        h5fl_err("%s: epoch '%.*s' is not a number in 1..%llu; the marker is damaged: set it to the largest "
                 "epoch in the @log.<epoch>.<writer>.idx names under the container (or in %s/), or restore "
                 "it from a backup",
                 path, (int)(nl2 - es < 32 ? nl2 - es : 32), es, (unsigned long long)H5FL_EPOCH_MAX,
                 H5FL_EPOCH_DIR);
        goto done;
    }
    *epoch = e;
    *format = version;
    rc = 0;
done:
    free(buf);
    free(path);
    return rc;
}

/* Format 4 (hard links) from now on: the marker is rewritten with the epoch it holds (a hint only). */
int h5fl_marker_upgrade(h5fl_file_t *f)
{
    uint64_t epoch, version;
    if (read_marker(f->o.dir, &epoch, &version) != 0)
        return -1;
    return version >= H5FL_FORMAT_VERSION ? 0 : write_marker(f->o.dir, epoch, H5FL_FORMAT_VERSION, f->epoch, f->fsync);
}

/* Claim a writer epoch: create @epochs/<N> with O_CREAT|O_EXCL, which succeeds for exactly one process
 * whichever hosts race for it (POSIX; NFSv3+, Lustre, GPFS implement exclusive creation atomically).
 * Tries after/from the marker's epoch upwards; *epoch receives the epoch claimed. */
static int claim_epoch(const char *dir, uint64_t from, bool sync, uint64_t *epoch)
{
    char *edir = h5fl_join(dir, H5FL_EPOCH_DIR);
    int rc = -1;
    if (!edir) {
        h5fl_err("out of memory");
        return -1;
    }
    if (mkdir(edir, 0755) != 0 && errno != EEXIST) {
        h5fl_err("cannot create %s (writer epoch claims): %s", edir, strerror(errno));
        goto done;
    }
    for (uint64_t e = from;; e++) {
        if (e < 1 || e > H5FL_EPOCH_MAX) {
            h5fl_err("cannot open %s for writing: no writer epoch is left (epochs are 1..%llu)", dir,
                     (unsigned long long)H5FL_EPOCH_MAX);
            goto done;
        }
        char name[32];
        snprintf(name, sizeof name, "%llu", (unsigned long long)e);
        char *p = h5fl_join(edir, name);
        if (!p) {
            h5fl_err("out of memory");
            goto done;
        }
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        int err = errno;
        free(p);
        if (fd < 0 && err == EEXIST)
            continue; /* another writer holds it (or held it): the next one */
        if (fd < 0) {
            h5fl_err("cannot claim writer epoch %llu in %s: %s", (unsigned long long)e, edir, strerror(err));
            goto done;
        }
        /* who claimed it, for people looking at the container (informational only) */
        char host[256] = "?", info[400];
        if (gethostname(host, sizeof host) != 0)
            snprintf(host, sizeof host, "?");
        host[sizeof host - 1] = '\0';
        int n = snprintf(info, sizeof info, "host %s\npid %ld\ntime %lld\n", host, (long)getpid(),
                         (long long)time(NULL));
        int wr = h5fl_pwrite_all(fd, info, (size_t)n < sizeof info ? (size_t)n : sizeof info - 1, 0);
        if (wr == 0 && sync && fsync(fd) != 0) {
            h5fl_err("fsync of the epoch claim %s/%s: %s", edir, name, strerror(errno));
            wr = -1;
        }
        close(fd);
        if (wr != 0)
            goto done; /* the epoch stays claimed (unused): harmless */
        *epoch = e;
        rc = 0;
        break;
    }
done:
    free(edir);
    return rc;
}

static bool is_container(const char *dir)
{
    struct stat st;
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && h5fl_exists(dir, H5FL_MARKER);
}

/* Objects deleted while they were open (vol_link.c link_delete) wait in @gone.* directories; a writable
 * open removes those no handle of this process still uses. */
static void remove_gone(h5fl_file_t *f)
{
    DIR *dir = opendir(f->o.dir);
    if (!dir)
        return;
    struct dirent *e;
    size_t pl = strlen(H5FL_GONE_PREFIX);
    while ((e = readdir(dir))) {
        if (strncmp(e->d_name, H5FL_GONE_PREFIX, pl) != 0)
            continue;
        char rel[NAME_MAX + 2];
        snprintf(rel, sizeof rel, "/%s", e->d_name);
        char *p = h5fl_join(f->o.dir, e->d_name);
        if (p && !h5fl_reg_busy(f->fileno, rel))
            (void)h5fl_rm_rf(p); /* best effort: a leftover is invisible (names starting with '@') */
        free(p);
    }
    closedir(dir);
}

/* ---------------------------------------------------------------- create / open */
static h5fl_file_t *file_new(const char *name, unsigned intent, hid_t fcpl, hid_t fapl)
{
    h5fl_file_t *f = calloc(1, sizeof *f);
    if (!f) {
        h5fl_err("out of memory");
        return NULL;
    }
    f->fapl = f->fcpl = H5I_INVALID_HID;
    f->comm = MPI_COMM_NULL;
    h5fl_obj_init(&f->o, H5I_FILE, f, "/", name);
    f->handles = 1;
    f->name = h5fl_strdup(name);
    f->intent = intent;
    f->fapl = H5Pcopy(fapl);
    f->fcpl = H5Pcopy(fcpl == H5P_DEFAULT || fcpl < 0 ? H5P_FILE_CREATE_DEFAULT : fcpl);
    if (!f->name || !f->o.path || !f->o.dir || f->fapl < 0 || f->fcpl < 0) {
        h5fl_err("cannot set up the file object for %s", name);
        file_free(f);
        return NULL;
    }
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) {
        MPI_Comm comm = MPI_COMM_NULL;
        MPI_Info info = MPI_INFO_NULL;
        herr_t st;
        H5E_BEGIN_TRY { st = H5Pget_mpi_params(fapl, &comm, &info); }
        H5E_END_TRY
        if (st >= 0 && comm != MPI_COMM_NULL) {
            f->comm = comm;
            MPI_Comm_rank(comm, &f->rank);
            MPI_Comm_size(comm, &f->size);
        }
        if (info != MPI_INFO_NULL)
            MPI_Info_free(&info);
    }
    if (f->comm == MPI_COMM_NULL)
        f->size = 1;
    const char *sync = getenv("H5FLOW_LOG_FSYNC");
    f->fsync = sync && *sync && strcmp(sync, "0") != 0;
    const char *verify = getenv("H5FLOW_LOG_VERIFY");
    f->verify = !(verify && !strcmp(verify, "0"));
    return f;
}

static void set_fileno(h5fl_file_t *f)
{
    struct stat st;
    if (stat(f->o.dir, &st) == 0)
        f->fileno = (unsigned long)st.st_ino ^ ((unsigned long)st.st_dev << 40);
    h5fl_reg_add(&f->o);
}

/* The userblock of the creation list, as the file @userblock of that many zero bytes (docs/FORMAT.md
 * "File drivers and file properties"): the reserved bytes a native file holds before its superblock,
 * for the application, which writes them there. Written before the marker: no container without it. */
static int make_userblock(const char *name, hid_t fcpl, bool sync)
{
    hsize_t ub = 0;
    if (fcpl < 0 || fcpl == H5P_DEFAULT || H5Pget_userblock(fcpl, &ub) < 0 || ub == 0)
        return 0;
    char *p = h5fl_join(name, H5FL_USERBLOCK_FILE);
    int fd = p ? h5fl_open_file(p, O_WRONLY | O_CREAT | O_EXCL, 0644) : -1, st = -1;
    if (fd >= 0 && ftruncate(fd, (off_t)ub) == 0 && (!sync || fsync(fd) == 0))
        st = 0;
    else if (p)
        h5fl_err("cannot create the userblock %s (%llu bytes): %s", p, (unsigned long long)ub, strerror(errno));
    if (fd >= 0)
        close(fd);
    free(p);
    return st;
}

/* An existing container's userblock size into the file's creation list (0 without @userblock). */
static int load_userblock(h5fl_file_t *f)
{
    char *p = h5fl_join(f->o.dir, H5FL_USERBLOCK_FILE);
    struct stat sb;
    int st = p ? 0 : -1;
    if (st == 0 && lstat(p, &sb) == 0) {
        if (!S_ISREG(sb.st_mode) || H5Pset_userblock(f->fcpl, (hsize_t)sb.st_size) < 0) {
            h5fl_err("the userblock %s is not a regular file of a power of 2 bytes >= 512 (the container is "
                     "damaged)",
                     p);
            st = -1;
        }
    } else if (st == 0 && errno != ENOENT) {
        h5fl_err("cannot read the userblock %s: %s", p, strerror(errno));
        st = -1;
    }
    free(p);
    return st;
}

/* The core driver without a backing store: a private directory in a memory file system (/dev/shm, else
 * $TMPDIR or /tmp) for the container, which is `*path` there; removed when the file is closed. */
static char *make_memdir(const char *name, unsigned flags, char **path)
{
    struct stat sb;
    if ((flags & H5F_ACC_EXCL) && lstat(name, &sb) == 0) {
        h5fl_err("cannot create %s: it already exists (opened with H5F_ACC_EXCL; errno = %d)", name, EEXIST);
        return NULL;
    }
    const char *base = getenv("TMPDIR");
    if (stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) && access("/dev/shm", W_OK | X_OK) == 0)
        base = "/dev/shm";
    else if (!base || !base[0])
        base = "/tmp";
    char tmpl[PATH_MAX];
    if ((size_t)snprintf(tmpl, sizeof tmpl, "%s/h5flow_log-core.XXXXXX", base) >= sizeof tmpl || !mkdtemp(tmpl)) {
        h5fl_err("cannot make a directory in %s for the in-memory file %s (core driver without a backing "
                 "store): %s",
                 base, name, strerror(errno));
        return NULL;
    }
    char *dir = h5fl_strdup(tmpl);
    *path = dir ? h5fl_join(dir, "file.h5") : NULL;
    if (!*path) {
        rmdir(tmpl);
        free(dir);
        return NULL;
    }
    return dir;
}

void *h5fl_file_create(const char *name, unsigned flags, hid_t fcpl, hid_t fapl, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    if (h5fl_check_file_plists(name, fcpl, fapl) != 0) {
        h5fl_err_push(__func__);
        return NULL;
    }
    char *mempath = NULL, *memdir = h5fl_fapl_in_memory(fapl) ? make_memdir(name, flags, &mempath) : NULL;
    if (h5fl_fapl_in_memory(fapl) && !memdir) {
        h5fl_err_push(__func__);
        return NULL;
    }
    if (memdir) { /* the file on disk named `name` is not touched, as native's core driver leaves it */
        name = mempath;
        flags &= ~(unsigned)H5F_ACC_EXCL;
    }
    h5fl_file_t *f = file_new(name, H5F_ACC_RDWR, fcpl, fapl);
    free(mempath);
    if (!f) {
        if (memdir)
            h5fl_rm_rf(memdir);
        free(memdir);
        h5fl_err_push(__func__);
        return NULL;
    }
    f->memdir = memdir;
    name = f->name;
    int st = h5fl_check_no_crt_order(fcpl, true);
    if (st != 0) {
        file_free(f);
        h5fl_err_push(__func__);
        return NULL;
    }
    if (f->rank == 0) {
        struct stat sb;
        if (lstat(name, &sb) == 0) {
            if (h5fl_reg_find_file(name)) {
                h5fl_err("cannot create %s: it is open in this process; close it before truncating it "
                         "(as native HDF5, which refuses to truncate an open file)",
                         name);
                st = -1;
            } else if (flags & H5F_ACC_EXCL) {
                h5fl_err("cannot create %s: it already exists (opened with H5F_ACC_EXCL; errno = %d)", name,
                         EEXIST);
                st = -1;
            } else if (S_ISDIR(sb.st_mode) && !is_container(name)) {
                h5fl_err("cannot truncate %s: it is a directory but not an h5flow_log container; "
                         "refusing to delete it",
                         name);
                st = -1;
            } else if (h5fl_rm_rf(name) != 0) {
                st = -1;
            }
        }
        if (st == 0 && mkdir(name, 0755) != 0) {
            h5fl_err("cannot create the container directory %s: %s", name, strerror(errno));
            st = -1;
        }
        if (st == 0)
            st = make_userblock(name, fcpl, f->fsync);
        uint64_t first = 0;
        unsigned crt_links, crt_attrs;
        h5fl_crt_flags(fcpl, &crt_links, &crt_attrs);
        if (st == 0 && (claim_epoch(name, 1, f->fsync, &first) != 0 ||
                        h5fl_corder_enable(name, crt_links, crt_attrs, f->fsync) != 0 ||
                        write_marker(name, first, H5FL_FORMAT_BASE, first, f->fsync) != 0))
            st = -1;
        if (st == 0 && first != 1) {
            h5fl_err("cannot create %s: another process created it at the same time", name);
            st = -1;
        }
    }
    if (h5fl_collective(f, st) != 0) {
        file_free(f);
        h5fl_err_push(__func__);
        return NULL;
    }
    f->epoch = 1;
    set_fileno(f);
    return f;
}

/* 0 if the file locking settings of `fapl` are those of the open `other`, else -1 (error recorded): a
 * container open twice in one process shares its settings, as native HDF5 requires of a file it opens
 * twice ("file locking flag values don't match"). */
static int same_locking(const char *name, const h5fl_file_t *other, hid_t fapl)
{
    hbool_t a = true, b = true, ia = false, ib = false;
    if (H5Pget_file_locking(fapl, &a, &ia) < 0 || H5Pget_file_locking(other->fapl, &b, &ib) < 0) {
        h5fl_err("cannot read the file locking settings of the file access property list");
        return -1;
    }
    if (a == b && ia == ib)
        return 0;
    h5fl_err("cannot open %s with file locking %s: it is open in this process with file locking %s (file "
             "locking flag values don't match; open it with the same setting, or close it first)",
             name, !a ? "off" : ia ? "best-effort" : "on", !b ? "off" : ib ? "best-effort" : "on");
    return -1;
}

void *h5fl_file_open(const char *name, unsigned flags, hid_t fapl, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_file_t *open_already = h5fl_reg_find_file(name);
    if (h5fl_fapl_in_memory(fapl) && (flags & H5F_ACC_RDWR)) {
        h5fl_err("cannot open %s read-write with the core driver without a backing store: its changes may "
                 "not reach the disk, and h5flow_log does not copy a container into memory; open it "
                 "read-only, or with a backing store (h5py backing_store=True)",
                 name);
        h5fl_err_push(__func__);
        return NULL;
    }
    if (h5fl_check_file_plists(name, H5I_INVALID_HID, fapl) != 0 ||
        (open_already && same_locking(name, open_already, fapl) != 0)) {
        h5fl_err_push(__func__);
        return NULL;
    }
    /* SWMR flags are kept for H5Fget_intent (h5py's swmr_mode): readers of a container always see what
     * writers flushed (docs/FORMAT.md "SWMR"), so they change nothing else */
    h5fl_file_t *f = file_new(name,
                              ((flags & H5F_ACC_RDWR) ? H5F_ACC_RDWR : H5F_ACC_RDONLY) |
                                  (flags & (H5F_ACC_SWMR_READ | H5F_ACC_SWMR_WRITE)),
                              H5P_DEFAULT, fapl);
    if (!f) {
        h5fl_err_push(__func__);
        return NULL;
    }
    uint64_t epoch = 0;
    int st = 0;
    if (f->rank == 0) {
        uint64_t format = 0;
        st = read_marker(name, &epoch, &format);
        /* Every writable open starts a new epoch, its own: its writes order after all earlier ones, and
         * its logs (@log.<epoch>.<rank>.*) belong to it alone. The claim is what makes an epoch one
         * writer's; the marker is the hint where to start looking (two writers may rewrite it in either
         * order: a later claim skips epochs already taken). Rank 0 claims for the communicator. */
        h5fl_file_t *writer = (flags & H5F_ACC_RDWR) && f->size <= 1 ? h5fl_reg_find_serial_writer(name) : NULL;
        if (st == 0 && writer) { /* this process writes it already: one epoch, one order (h5fl.h) */
            f->epoch_of = h5fl_epoch_owner(writer);
            f->epoch_of->o.rc++;
            epoch = f->epoch_of->epoch;
        }
        else if (st == 0 && (flags & H5F_ACC_RDWR)) {
            uint64_t mine = 0;
            st = claim_epoch(name, epoch + 1, f->fsync, &mine);
            if (st == 0)
                st = write_marker(name, mine,
                                  h5fl_exists(name, H5FL_STORE_DIR) ? H5FL_FORMAT_VERSION /* hard links */
                                  : format > H5FL_FORMAT_BASE       ? format
                                                                    : H5FL_FORMAT_BASE,
                                  mine, f->fsync);
            epoch = mine;
        }
    }
    st = h5fl_collective(f, st);
    if (st == 0 && f->comm != MPI_COMM_NULL && f->size > 1) {
        MPI_Request mreq;
        MPI_Ibcast(&epoch, 1, MPI_UINT64_T, 0, f->comm, &mreq);
        h5fl_mpi_wait(&mreq);
    }
    if (st != 0) {
        file_free(f);
        h5fl_err_push(__func__);
        return NULL;
    }
    f->epoch = epoch;
    set_fileno(f);
    if (load_userblock(f) != 0) {
        file_free(f);
        h5fl_err_push(__func__);
        return NULL;
    }
    if (f->rank == 0 && (flags & H5F_ACC_RDWR))
        remove_gone(f);
    return f;
}

/* ---------------------------------------------------------------- get / specific / close */
static void copy_name(const char *src, size_t bufsz, char *buf, size_t *len_out)
{
    size_t len = strlen(src);
    if (buf && bufsz) {
        size_t n = len < bufsz - 1 ? len : bufsz - 1;
        memcpy(buf, src, n);
        buf[n] = '\0';
    }
    if (len_out)
        *len_out = len;
}

/* H5Fget_obj_count / H5Fget_obj_ids: the ids of this process that name objects of this container (with
 * H5F_OBJ_LOCAL, only those opened through this file handle). HDF5 keeps the ids; the connector
 * recognises its own objects among them. */
typedef struct obj_ids {
    const h5fl_file_t *f;
    unsigned types;
    size_t max;
    hid_t *out;
    size_t count;
} obj_ids_t;

/* Whether id is an object of this connector: directly, or under stacking connectors (h5flow_async,
 * h5flow_cache, ...), whose ids name the top connector while H5VLobject reaches our object. */
static bool is_ours(hid_t id)
{
    char name[sizeof H5FL_NAME + 1];
    if (h5fl_nat_id(id)) /* a native file's object through this connector */
        return false;
    hid_t vol = H5VLget_connector_id(id);
    if (vol < 0)
        return false;
    ssize_t n = H5VLget_connector_name(id, name, sizeof name);
    H5VLclose(vol);
    if (n == (ssize_t)strlen(H5FL_NAME) && !strcmp(name, H5FL_NAME))
        return true;
    hbool_t native = true;
    if (H5VLobject_is_native(id, &native) < 0 || native)
        return false;
    return h5fl_reg_holds(H5VLobject(id));
}

static herr_t obj_id_cb(hid_t id, void *udata)
{
    obj_ids_t *q = udata;
    /* a transient datatype is no object of any container (and no VOL object to look into) */
    if (H5Iget_type(id) == H5I_DATATYPE && H5Tcommitted(id) <= 0)
        return 0;
    if (!is_ours(id))
        return 0;
    const h5fl_obj_t *o = H5VLobject(id);
    if (!o || !o->file)
        return 0;
    bool local = q->types & H5F_OBJ_LOCAL;
    if (local ? o->file != q->f : o->file->fileno != q->f->fileno)
        return 0;
    if (q->out && q->count >= q->max)
        return 1; /* the caller's array is full */
    if (q->out)
        q->out[q->count] = id;
    q->count++;
    return 0;
}

static int collect_obj_ids(obj_ids_t *q)
{
    static const struct {
        unsigned flag;
        H5I_type_t type;
    } kinds[] = {{H5F_OBJ_FILE, H5I_FILE}, {H5F_OBJ_DATASET, H5I_DATASET}, {H5F_OBJ_GROUP, H5I_GROUP},
                 {H5F_OBJ_DATATYPE, H5I_DATATYPE}, {H5F_OBJ_ATTR, H5I_ATTR}};
    H5E_BEGIN_TRY
    {
        for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
            if ((q->types & kinds[k].flag) && H5Iiterate(kinds[k].type, obj_id_cb, q) < 0) {
                h5fl_err("cannot list the open objects");
                return -1;
            }
    }
    H5E_END_TRY
    return 0;
}

herr_t h5fl_file_get(void *obj, H5VL_file_get_args_t *args, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    h5fl_file_t *f = o->file;
    switch (args->op_type) {
        case H5VL_FILE_GET_CONT_INFO:
            args->args.get_cont_info.info->version = H5VL_CONTAINER_INFO_VERSION;
            args->args.get_cont_info.info->feature_flags = 0;
            args->args.get_cont_info.info->token_size = sizeof(uint64_t);
            args->args.get_cont_info.info->blob_id_size = sizeof(uint64_t); /* refs.c: the blob class */
            return 0;
        case H5VL_FILE_GET_FAPL:
            if ((args->args.get_fapl.fapl_id = H5Pcopy(f->fapl)) < 0)
                break;
            return 0;
        case H5VL_FILE_GET_FCPL:
            if ((args->args.get_fcpl.fcpl_id = H5Pcopy(f->fcpl)) < 0)
                break;
            return 0;
        case H5VL_FILE_GET_FILENO:
            *args->args.get_fileno.fileno = f->fileno;
            return 0;
        case H5VL_FILE_GET_INTENT:
            *args->args.get_intent.flags = f->intent;
            return 0;
        case H5VL_FILE_GET_NAME:
            copy_name(f->name, args->args.get_name.buf_size, args->args.get_name.buf,
                      args->args.get_name.file_name_len);
            return 0;
        case H5VL_FILE_GET_OBJ_COUNT: {
            /* h5py's File.close closes what these report, as with native files */
            obj_ids_t q = {f, args->args.get_obj_count.types, 0, NULL, 0};
            if (collect_obj_ids(&q) != 0)
                break;
            *args->args.get_obj_count.count = q.count;
            return 0;
        }
        case H5VL_FILE_GET_OBJ_IDS: {
            H5VL_file_get_obj_ids_args_t *a = &args->args.get_obj_ids;
            obj_ids_t q = {f, a->types, a->max_objs, a->oid_list, 0};
            if (collect_obj_ids(&q) != 0)
                break;
            *a->count = q.count;
            return 0;
        }
        default:
            h5fl_err("file get operation %d is not supported by h5flow_log", (int)args->op_type);
            break;
    }
    h5fl_err_push(__func__);
    return -1;
}

herr_t h5fl_file_specific(void *obj, H5VL_file_specific_args_t *args, hid_t dxpl, void **req)
{
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    switch (args->op_type) {
        case H5VL_FILE_FLUSH: {
            /* Collective, as in parallel HDF5: after it, every rank's next read sees what every rank
             * wrote before it (the flush, a barrier, and indexes rebuilt from the logs). */
            h5fl_file_t *f = o->file;
            int st = h5fl_file_flush(f, true);
            if (f->comm != MPI_COMM_NULL && f->size > 1) {
                MPI_Request mreq;
                MPI_Iallreduce(MPI_IN_PLACE, &st, 1, MPI_INT, MPI_MIN, f->comm, &mreq);
                h5fl_mpi_wait(&mreq);
            }
            for (h5fl_obj_t *d = h5fl_reg_next(NULL); d; d = h5fl_reg_next(d))
                if (d->type == H5I_DATASET && d->file->fileno == f->fileno)
                    h5fl_dset_forget_index((h5fl_dset_t *)d);
            if (st != 0)
                break;
            return 0;
        }
        case H5VL_FILE_IS_ACCESSIBLE:
            /* Called with obj == NULL and no connector info during HDF5's open fallback: never fail. */
            *args->args.is_accessible.accessible = is_container(args->args.is_accessible.filename);
            return 0;
        case H5VL_FILE_DELETE:
            if (!is_container(args->args.del.filename)) {
                h5fl_err("%s is not an h5flow_log container", args->args.del.filename);
                break;
            }
            if (h5fl_rm_rf(args->args.del.filename) != 0)
                break;
            return 0;
        case H5VL_FILE_IS_EQUAL: {
            h5fl_obj_t *o2 = args->args.is_equal.obj2;
            *args->args.is_equal.same_file = o2 && o2->file->fileno == o->file->fileno;
            return 0;
        }
        case H5VL_FILE_REOPEN: {
            /* a new, independent handle on the same container (a writable one starts a new epoch) */
            h5fl_file_t *f = o->file;
            void *nf = h5fl_file_open(f->name, f->intent, f->fapl, dxpl, NULL);
            if (!nf)
                return -1; /* h5fl_file_open pushed the error */
            *args->args.reopen.file = nf;
            return 0;
        }
        default:
            h5fl_err("file operation %d (e.g. H5Freopen) is not supported by h5flow_log",
                     (int)args->op_type);
            break;
    }
    h5fl_err_push(__func__);
    return -1;
}

herr_t h5fl_file_close(void *obj, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_file_t *f = obj;
    /* A failed close changes nothing: HDF5 1.14.5 keeps the file id and its VOL wrapper when this
     * callback fails (H5F__close_cb frees the wrapper only on success; H5Fclose and H5Idec_ref keep
     * the id), so the application's next H5Fclose, or H5close at exit, calls here again and retries. */
    if (h5fl_file_flush(f, true) != 0) {
        char msg[768];
        snprintf(msg, sizeof msg, "%s", h5fl_err_msg());
        h5fl_err_clear();
        h5fl_err("%s; the file %s stays open with the unwritten data: fix the cause and close it again", msg,
                 f->name);
        h5fl_err_push(__func__);
        return -1;
    }
    f->handles--;
    h5fl_file_decref(f);
    return 0;
}
