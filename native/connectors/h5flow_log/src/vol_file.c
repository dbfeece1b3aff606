/* File callbacks: the container directory, its marker, the MPI communicator, flush and close. */
#include "h5fl.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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
}

static void file_free(h5fl_file_t *f)
{
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

int h5fl_file_flush(h5fl_file_t *f, bool sync)
{
    int rc = 0;
    for (h5fl_dset_t *d = f->open_dsets; d; d = d->next_open)
        if (h5fl_dset_flush(d, sync) != 0)
            rc = -1;
    return rc;
}

/* ---------------------------------------------------------------- the marker */
static int write_marker(const char *dir, uint64_t epoch, bool sync)
{
    char buf[128];
    int n = snprintf(buf, sizeof buf, "%s\nformat %d\nepoch %llu\n", H5FL_NAME, H5FL_FORMAT_VERSION,
                     (unsigned long long)epoch);
    return h5fl_write_file_atomic(dir, H5FL_MARKER, buf, (size_t)n, sync);
}

static int read_marker(const char *dir, uint64_t *epoch)
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
    char text[128];
    size_t n = len < sizeof text - 1 ? len : sizeof text - 1;
    memcpy(text, buf, n);
    text[n] = '\0';
    int version = 0;
    unsigned long long e = 0;
    if (sscanf(text, H5FL_NAME "\nformat %d\nepoch %llu", &version, &e) != 2) {
        h5fl_err("%s/%s is malformed", dir, H5FL_MARKER);
        goto done;
    }
    if (version != H5FL_FORMAT_VERSION) {
        h5fl_err("%s uses h5flow_log format %d; this connector reads format %d", dir, version,
                 H5FL_FORMAT_VERSION);
        goto done;
    }
    *epoch = e;
    rc = 0;
done:
    free(buf);
    free(path);
    return rc;
}

static bool is_container(const char *dir)
{
    struct stat st;
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && h5fl_exists(dir, H5FL_MARKER);
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
    return f;
}

static void set_fileno(h5fl_file_t *f)
{
    struct stat st;
    if (stat(f->o.dir, &st) == 0)
        f->fileno = (unsigned long)st.st_ino ^ ((unsigned long)st.st_dev << 40);
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
    h5fl_file_t *f = file_new(name, H5F_ACC_RDWR, fcpl, fapl);
    if (!f) {
        h5fl_err_push(__func__);
        return NULL;
    }
    int st = h5fl_check_no_crt_order(fcpl, true);
    if (st != 0) {
        file_free(f);
        h5fl_err_push(__func__);
        return NULL;
    }
    if (f->rank == 0) {
        struct stat sb;
        if (lstat(name, &sb) == 0) {
            if (flags & H5F_ACC_EXCL) {
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
        if (st == 0 && write_marker(name, 1, f->fsync) != 0)
            st = -1;
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

void *h5fl_file_open(const char *name, unsigned flags, hid_t fapl, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    if (h5fl_check_file_plists(name, H5I_INVALID_HID, fapl) != 0) {
        h5fl_err_push(__func__);
        return NULL;
    }
    h5fl_file_t *f = file_new(name, (flags & H5F_ACC_RDWR) ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT,
                              fapl);
    if (!f) {
        h5fl_err_push(__func__);
        return NULL;
    }
    uint64_t epoch = 0;
    int st = 0;
    if (f->rank == 0) {
        st = read_marker(name, &epoch);
        /* Every writable open starts a new epoch: its writes order after all earlier ones. */
        if (st == 0 && (flags & H5F_ACC_RDWR)) {
            epoch++;
            st = write_marker(name, epoch, f->fsync);
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
            args->args.get_cont_info.info->blob_id_size = 0;
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
        case H5VL_FILE_GET_OBJ_COUNT:
            /* Objects are reference-counted by the connector; closing the file id with objects still
             * open keeps the container alive until they close (like H5F_CLOSE_WEAK). */
            *args->args.get_obj_count.count = 0;
            return 0;
        case H5VL_FILE_GET_OBJ_IDS:
            *args->args.get_obj_ids.count = 0;
            return 0;
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
            for (h5fl_dset_t *d = f->open_dsets; d; d = d->next_open)
                h5fl_dset_forget_index(d);
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
    int rc = h5fl_file_flush(f, true);
    f->handles--;
    h5fl_file_decref(f);
    if (rc != 0)
        h5fl_err_push(__func__);
    return rc;
}
