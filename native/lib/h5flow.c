/* libh5flow: a C producer of the hdf5 transport's staging protocol (docs/STREAM.md, format version 1).
 *
 * The same files, in the same order, as src/h5flow/transports/hdf5/{staging,writer}.py and the Python
 * high-level API (api.py: each array a mesh of one cell array, each piece one image block, block ids in
 * rank order): the owner claim (flock), stream.json, the index (P/D/E/X lines, one O_APPEND write each),
 * heartbeats (a thread instead of the helper process: no GIL here), step-N/ published by rename, the queue
 * (queue_limit, quota, block/discard), garbage collection, the reservation of a step's room on disk.
 */
#define _DEFAULT_SOURCE
#include "extents.h"
#include "h5flow.h"
#include "h5flow_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NAME_LEN 128
#define EMERGENCY_RESERVE (64 * 1024)
#define FILE_OVERHEAD (64 * 1024)
#define DATASET_OVERHEAD (8 * 1024)
#define WRITE_LEASE_MIN 30.0
#define WRITE_RATE 20e6

/* ---- heartbeat: a thread refreshing hb/<rank> while the writer makes progress --------------------- */
typedef struct {
    char path[H5FL_PATH_MAX];
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    double deadline; /* < 0: no lease */
    char what[H5FL_PATH_MAX + 128];
    double period;
} heartbeat_t;

/* An array seen in an earlier step and its element type: an array keeps its type for the whole stream. */
typedef struct {
    char name[NAME_LEN + 1];
    int32_t type;
} known_t;

/* A piece's description, gathered from every rank as raw bytes. */
typedef struct {
    char name[NAME_LEN + 1];
    int32_t type, ndims;
    uint64_t gdims[3], off[3], cnt[3];
} piece_desc;

typedef struct {
    piece_desc d;
    void *data;
} piece_t;

typedef struct {
    int64_t seq, step;
    uint64_t nbytes;
    int gone;
} published_t;

/* One mesh (array) of a step: its blocks are gathered[first..] entries with that name, in rank order. */
typedef struct {
    const char *name;
    int type, ndims;
    uint64_t gdims[3];
    size_t nblocks;
    size_t *idx;      /* indices into the gathered descriptors */
    int *owner;       /* rank of each block */
    uint64_t *rows;   /* first row of each block; rows[nblocks] = total */
    int64_t gext[6];
} mesh_t;

struct h5flow_writer {
    MPI_Comm comm;
    int rank, size, opened, in_step, stopped, failed, local_code;
    h5fl_config cfg;
    char root[H5FL_PATH_MAX];
    char run_id[33];
    int claim_fd;
    heartbeat_t hb;
    int64_t step, last_step;
    double time;
    piece_t *pieces;
    size_t npieces, cap;
    published_t *pub;
    size_t npub, cappub;
    known_t *known; /* every array of the steps published so far, with its type */
    size_t nknown, capknown;
    int64_t next_seq;
    char told[2048];    /* rank 0: consumer groups said to have stopped beating ("name\n" each; dead_consumer) */
    char dropped[2048]; /* rank 0: consumer groups dropped (dead_consumer="drop"), "name\n" each */
    char errmsg[H5FL_MSG_MAX];
    char local_msg[H5FL_MSG_MAX];
};

static const struct {
    const char *dtype;
    size_t size;
} TYPES[] = {{"<f4", 4}, {"<f8", 8}, {"<i4", 4}, {"<i8", 8}, {"<u4", 4}, {"<u8", 8}, {"|i1", 1}, {"|u1", 1}};
#define NTYPES ((int)(sizeof TYPES / sizeof TYPES[0]))

static hid_t mem_type(int t)
{
    switch (t) {
    case H5FLOW_FLOAT32: return H5T_NATIVE_FLOAT;
    case H5FLOW_FLOAT64: return H5T_NATIVE_DOUBLE;
    case H5FLOW_INT32: return H5T_NATIVE_INT32;
    case H5FLOW_INT64: return H5T_NATIVE_INT64;
    case H5FLOW_UINT32: return H5T_NATIVE_UINT32;
    case H5FLOW_UINT64: return H5T_NATIVE_UINT64;
    case H5FLOW_INT8: return H5T_NATIVE_INT8;
    default: return H5T_NATIVE_UINT8;
    }
}

static hid_t file_type(int t)
{
    switch (t) {
    case H5FLOW_FLOAT32: return H5T_IEEE_F32LE;
    case H5FLOW_FLOAT64: return H5T_IEEE_F64LE;
    case H5FLOW_INT32: return H5T_STD_I32LE;
    case H5FLOW_INT64: return H5T_STD_I64LE;
    case H5FLOW_UINT32: return H5T_STD_U32LE;
    case H5FLOW_UINT64: return H5T_STD_U64LE;
    case H5FLOW_INT8: return H5T_STD_I8LE;
    default: return H5T_STD_U8LE;
    }
}

/* ---- errors ---------------------------------------------------------------------------------------- */
static int set_err(h5flow_writer *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_err(h5flow_writer *w, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->errmsg, sizeof w->errmsg, fmt, ap);
    va_end(ap);
    return code;
}

/* Collective: the code (and message) of the lowest failing rank, on every rank; 0 when none failed. */
static int agree(h5flow_writer *w, int code)
{
    int mine = code ? w->rank : w->size, first;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, w->comm);
    if (first == w->size)
        return 0;
    MPI_Bcast(&code, 1, MPI_INT, first, w->comm);
    MPI_Bcast(w->errmsg, (int)sizeof w->errmsg, MPI_CHAR, first, w->comm);
    return code;
}

/* A barrier that sleeps instead of spinning (transports/_mpiutil.py sleepy_wait): MPICH busy-polls inside
 * blocking collectives, and ranks waiting there while rank 0 waits for the queue or the file system would
 * each burn a core that consumers on the same node need. */
static void sleepy_wait(h5flow_writer *w)
{
    if (w->size == 1)
        return;
    MPI_Request req;
    MPI_Ibarrier(w->comm, &req);
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    while (!done) {
        h5fl_sleep(0.0005);
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    }
}

/* The HDF5 error stack, innermost first ("" when empty). */
typedef struct {
    char *out;
    size_t n;
} h5err_ctx;

static herr_t h5err_walk(unsigned n, const H5E_error2_t *e, void *data)
{
    h5err_ctx *c = data;
    size_t len = strlen(c->out);
    if (n < 4 && e->desc && len + 4 < c->n)
        snprintf(c->out + len, c->n - len, "%s%s", len ? "; " : "", e->desc);
    return 0;
}

static void h5_errtext(char *out, size_t n)
{
    out[0] = '\0';
    h5err_ctx c = {out, n};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5err_walk, &c);
    if (!out[0])
        snprintf(out, n, "HDF5 error");
}

/* ---- heartbeat ------------------------------------------------------------------------------------- */
static void *hb_main(void *arg)
{
    heartbeat_t *hb = arg;
    int stalled = 0;
    char stalled_path[H5FL_PATH_MAX + 16];
    snprintf(stalled_path, sizeof stalled_path, "%s.stalled", hb->path);
    pthread_mutex_lock(&hb->mu);
    while (!hb->stop) {
        double t = h5fl_now();
        if (hb->deadline < 0 || t < hb->deadline) {
            if (stalled) {
                unlink(stalled_path);
                stalled = 0;
            }
            if (utimensat(AT_FDCWD, hb->path, NULL, 0) != 0 && errno == ENOENT)
                break; /* the stream was removed */
        } else if (!stalled) {
            stalled = 1; /* no progress within the lease: stop beating, say what hung */
            FILE *f = fopen(stalled_path, "w");
            if (f) {
                fprintf(f, "%s\n", hb->what);
                fclose(f);
            }
        }
        double until = h5fl_now() + hb->period;
        struct timespec ts = {(time_t)until, (long)((until - (double)(time_t)until) * 1e9)};
        pthread_cond_timedwait(&hb->cv, &hb->mu, &ts);
    }
    pthread_mutex_unlock(&hb->mu);
    return NULL;
}

static int hb_start(h5flow_writer *w)
{
    heartbeat_t *hb = &w->hb;
    if (snprintf(hb->path, sizeof hb->path, "%s/hb/%d", w->root, w->rank) >= (int)sizeof hb->path)
        return set_err(w, H5FLOW_ERR_CONFIG, "rank %d: the heartbeat path in %s is too long", w->rank, w->root);
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    char text[300];
    int n = snprintf(text, sizeof text, "%s %ld\n", host, (long)getpid());
    FILE *f = fopen(hb->path, "w");
    if (!f || fwrite(text, 1, (size_t)n, f) != (size_t)n) {
        int e = errno;
        if (f)
            fclose(f);
        return set_err(w, H5FLOW_ERR_IO, "rank %d: cannot start its heartbeat in %s/hb: %s", w->rank, w->root,
                       strerror(e));
    }
    fclose(f);
    char stalled[H5FL_PATH_MAX + 16];
    snprintf(stalled, sizeof stalled, "%s.stalled", hb->path);
    unlink(stalled);
    hb->period = w->cfg.heartbeat / 2;
    hb->deadline = -1;
    hb->stop = 0;
    pthread_mutex_init(&hb->mu, NULL);
    pthread_cond_init(&hb->cv, NULL);
    int e = pthread_create(&hb->thread, NULL, hb_main, hb);
    if (e) {
        pthread_mutex_destroy(&hb->mu);
        pthread_cond_destroy(&hb->cv);
        return set_err(w, H5FLOW_ERR_IO, "rank %d: cannot start its heartbeat thread: %s", w->rank, strerror(e));
    }
    hb->started = 1;
    return 0;
}

static void hb_lease(heartbeat_t *hb, double seconds, const char *what)
{
    if (!hb->started)
        return;
    pthread_mutex_lock(&hb->mu);
    hb->deadline = seconds < 0 ? -1 : h5fl_now() + seconds;
    if (what)
        snprintf(hb->what, sizeof hb->what, "%s", what);
    pthread_cond_signal(&hb->cv);
    pthread_mutex_unlock(&hb->mu);
}

static void hb_stop(heartbeat_t *hb)
{
    if (!hb->started)
        return;
    pthread_mutex_lock(&hb->mu);
    hb->stop = 1;
    pthread_cond_signal(&hb->cv);
    pthread_mutex_unlock(&hb->mu);
    pthread_join(hb->thread, NULL);
    pthread_mutex_destroy(&hb->mu);
    pthread_cond_destroy(&hb->cv);
    hb->started = 0;
}

/* ---- the staging directory (rank 0) -------------------------------------------------------------- */
static void path_of(const h5flow_writer *w, char out[H5FL_PATH_MAX], const char *name)
{
    snprintf(out, H5FL_PATH_MAX, "%s/%s", w->root, name);
}

static void describe_owner(const char *json, char *out, size_t n)
{
    char host[256] = "?", run[64] = "";
    double pid = 0, started = 0;
    if (!json || h5fl_json_str(json, "host", host, sizeof host) || h5fl_json_num(json, "pid", &pid)) {
        snprintf(out, n, "a process that has not written its details yet");
        return;
    }
    h5fl_json_num(json, "started", &started);
    h5fl_json_str(json, "run", run, sizeof run);
    char when[64];
    time_t t = (time_t)started;
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
    snprintf(out, n, "host %s, pid %.0f, started %s%s%s", host, pid, when, run[0] ? ", run " : "", run);
}

/* flock(LOCK_EX | LOCK_NB) on <root>/owner, then write who we are (transports/_claim.py). */
static int claim(h5flow_writer *w)
{
    char path[H5FL_PATH_MAX];
    path_of(w, path, "owner");
    for (;;) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
            return set_err(w, H5FLOW_ERR_IO, "cannot start stream in %s: cannot open %s: %s", w->root, path,
                           strerror(errno));
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            if (e != EWOULDBLOCK) {
                close(fd);
                return set_err(w, H5FLOW_ERR_IO, "cannot start stream in %s: flock %s: %s", w->root, path,
                               strerror(e));
            }
            char who[512], buf[4096];
            double until = h5fl_now() + 2.0;
            for (;;) { /* the owner writes its details just after locking */
                ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
                buf[n > 0 ? n : 0] = '\0';
                describe_owner(buf, who, sizeof who);
                if (strncmp(who, "host ", 5) == 0 || h5fl_now() > until)
                    break;
                h5fl_sleep(0.01);
            }
            close(fd);
            return set_err(w, H5FLOW_ERR_CLAIMED,
                           "cannot start stream in %s: stream %s is already claimed by another producer (%s); stop "
                           "that producer first or use another filename", w->root, w->root, who);
        }
        struct stat a, b;
        if (stat(path, &a) != 0 || fstat(fd, &b) != 0 || a.st_ino != b.st_ino) {
            close(fd); /* unlinked between open and lock: the lock is on an orphan */
            continue;
        }
        char host[256] = "unknown", started[32];
        gethostname(host, sizeof host - 1);
        h5fl_repr(h5fl_now(), started);
        h5fl_buf js = {0};
        h5fl_buf_printf(&js, "{\"host\": \"");
        h5fl_json_escape(&js, host);
        h5fl_buf_printf(&js, "\", \"pid\": %ld, \"started\": %s, \"run\": \"%s\"}", (long)getpid(), started,
                        w->run_id);
        int rc = js.oom ? ENOMEM : 0;
        if (!rc && (ftruncate(fd, 0) != 0 || pwrite(fd, js.data, js.len, 0) != (ssize_t)js.len || fsync(fd) != 0))
            rc = errno ? errno : EIO;
        h5fl_buf_free(&js);
        if (rc) {
            close(fd);
            return set_err(w, H5FLOW_ERR_IO, "cannot start stream in %s: writing %s: %s", w->root, path,
                           strerror(rc));
        }
        w->claim_fd = fd;
        return 0;
    }
}

static void release_claim(h5flow_writer *w)
{
    if (w->claim_fd >= 0) {
        close(w->claim_fd);
        w->claim_fd = -1;
    }
}

/* A reason when some producer rank of the run in stream.json stopped beating, else "" (staging.py). */
static void lost_producer(const h5flow_writer *w, int producers, double heartbeat, char *out, size_t n)
{
    out[0] = '\0';
    double t = h5fl_now();
    for (int r = 0; r < producers; r++) {
        char p[H5FL_PATH_MAX];
        snprintf(p, sizeof p, "%s/hb/%d", w->root, r);
        struct stat st;
        double age = stat(p, &st) == 0 ? t - ((double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9) : INFINITY;
        if (age > 1.5 * heartbeat) {
            snprintf(out, n, "producer rank %d lost", r);
            return;
        }
    }
}

/* Second line behind the claim: a run that has not ended and whose ranks all beat is live. */
static int refuse_if_live(h5flow_writer *w)
{
    char p[H5FL_PATH_MAX], *js = NULL, *index = NULL;
    path_of(w, p, "stream.json");
    if (h5fl_read_file(p, &js, 1 << 20))
        return 0;
    double producers = 0, heartbeat = 0, created = 0;
    char run[64] = "";
    int ok = !h5fl_json_num(js, "producers", &producers) && !h5fl_json_num(js, "heartbeat", &heartbeat) &&
             !h5fl_json_num(js, "created", &created) && !h5fl_json_str(js, "run_id", run, sizeof run);
    free(js);
    if (!ok)
        return 0;
    path_of(w, p, "index");
    int ended = 0;
    if (!h5fl_read_file(p, &index, (size_t)1 << 30)) {
        for (char *line = index; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
            ended |= (line[0] == 'E' || line[0] == 'X') && line[1] == ' ';
        free(index);
    }
    char lost[128];
    lost_producer(w, (int)producers, heartbeat, lost, sizeof lost);
    if (ended || lost[0])
        return 0;
    char who[300] = "", hb0[H5FL_PATH_MAX], *text = NULL;
    snprintf(hb0, sizeof hb0, "%s/hb/0", w->root);
    if (!h5fl_read_file(hb0, &text, 4096)) {
        char host[256];
        long pid;
        if (sscanf(text, "%255s %ld", host, &pid) == 2)
            snprintf(who, sizeof who, "host %s, pid %ld, ", host, pid);
        free(text);
    }
    char when[64];
    time_t t = (time_t)created;
    struct tm tm;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
    return set_err(w, H5FLOW_ERR_CLAIMED,
                   "cannot start stream in %s: %s: another producer (%sstarted %s, run %s) is still writing this "
                   "stream (its heartbeats are fresh and it has not ended); use another filename or stop it first",
                   w->root, w->root, who, when, run);
}

/* Remove an earlier run's files; recreate hb/, consumers/, an empty index and the emergency reserve. */
static int reset(h5flow_writer *w)
{
    char p[H5FL_PATH_MAX];
    path_of(w, p, "stream.json");
    unlink(p); /* first: readers stop trusting the old run */
    DIR *d = opendir(w->root);
    if (!d)
        return set_err(w, H5FLOW_ERR_IO, "cannot start stream in %s: %s", w->root, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strncmp(e->d_name, "step-", 5) || !strncmp(e->d_name, ".step-", 6)) {
            path_of(w, p, e->d_name);
            h5fl_rmtree(p);
        }
    }
    closedir(d);
    static const char *const files[] = {"index", ".reserve", ".space"};
    for (int i = 0; i < 3; i++) {
        path_of(w, p, files[i]);
        unlink(p);
    }
    static const char *const dirs[] = {"hb", "consumers"};
    for (int i = 0; i < 2; i++) {
        path_of(w, p, dirs[i]);
        h5fl_rmtree(p);
        if (mkdir(p, 0700) != 0)
            return set_err(w, H5FLOW_ERR_IO, "cannot start stream in %s: mkdir %s: %s", w->root, p, strerror(errno));
    }
    path_of(w, p, "index");
    int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return set_err(w, H5FLOW_ERR_IO, "cannot start stream in %s: creating %s: %s", w->root, p, strerror(errno));
    close(fd);
    path_of(w, p, ".reserve");
    fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
        int r = posix_fallocate(fd, 0, EMERGENCY_RESERVE);
        close(fd);
        if (r) {
            unlink(p);
            if (h5fl_is_full_errno(r))
                return set_err(w, H5FLOW_ERR_IO, "cannot start stream in %s: no room for the stream in %s (%lld bytes "
                               "free): %s", w->root, w->root, (long long)h5fl_free_bytes(w->root), strerror(r));
        }
    }
    return 0;
}

/* Append an index line; when the file system is full, free the emergency reserve and retry once. */
static int append(h5flow_writer *w, const char *line)
{
    char p[H5FL_PATH_MAX], r[H5FL_PATH_MAX];
    path_of(w, p, "index");
    int e = h5fl_append_line(p, line);
    path_of(w, r, ".reserve");
    if (e && h5fl_is_full_errno(e) && access(r, F_OK) == 0) {
        unlink(r);
        e = h5fl_append_line(p, line);
    }
    return e;
}

/* Rank 0: tell consumers the stream stopped on an error (an X line). */
static void stop_stream(h5flow_writer *w, const char *reason)
{
    if (w->stopped)
        return;
    w->stopped = 1;
    fprintf(stderr, "h5flow: error: %s\n", reason);
    h5fl_buf line = {0};
    char t[32];
    h5fl_repr(h5fl_now(), t);
    h5fl_buf_printf(&line, "X %s", t);
    const char *s = reason;
    while (*s) { /* whitespace collapsed: one line */
        while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r')
            s++;
        size_t k = strcspn(s, " \n\t\r");
        if (k)
            h5fl_buf_printf(&line, " %.*s", (int)k, s);
        s += k;
    }
    h5fl_buf_printf(&line, "\n");
    int e = line.oom ? ENOMEM : append(w, line.data);
    if (e)
        fprintf(stderr, "h5flow: cannot write the error to %s/index (%s); consumers will see the producer lost when "
                        "its heartbeat stops\n", w->root, strerror(e));
    h5fl_buf_free(&line);
}

/* Rank 0: the registered groups of this run: min released_seq (-1 when none) and their names. */
/* Whether a group file says the producer dropped the group (a non-empty "dropped"). */
static int group_dropped(const char *text)
{
    const char *p = strstr(text, "\"dropped\"");
    if (!p)
        return 0;
    for (p += 9; *p == ' ' || *p == ':'; p++) {
    }
    return *p == '"' && p[1] != '"';
}

static int load_groups(const h5flow_writer *w, int64_t *released, char *names, size_t n)
{
    char dir[H5FL_PATH_MAX];
    path_of(w, dir, "consumers");
    *released = -1;
    if (names)
        names[0] = '\0';
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 6 || e->d_name[0] == '.' || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        char p[H5FL_PATH_MAX], *text = NULL, run[64];
        double rel;
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p || h5fl_read_file(p, &text, 65536))
            continue;
        int ok = !h5fl_json_str(text, "run_id", run, sizeof run) && !strcmp(run, w->run_id) &&
                 !h5fl_json_num(text, "released_seq", &rel);
        int dropped = ok && group_dropped(text);
        free(text);
        if (!ok)
            continue;
        if (dropped) { /* holds no step back; if every group was dropped, every step is released */
            if (!count)
                *released = INT64_MAX;
            continue;
        }
        if (*released == INT64_MAX)
            *released = -1;
        if (!count || (int64_t)rel < *released)
            *released = (int64_t)rel;
        if (names) {
            size_t used = strlen(names);
            snprintf(names + used, n - used, "%s%.*s", count ? ", " : "", (int)(len - 5), e->d_name);
        }
        count++;
    }
    closedir(d);
    return count;
}

/* Rank 0: collect garbage, then (unreleased published steps, their bytes still staged). */
static void queue_state(h5flow_writer *w, int64_t *unreleased, uint64_t *staged, char *names, size_t n)
{
    int64_t released;
    int groups = load_groups(w, &released, names, n);
    *unreleased = 0;
    *staged = 0;
    for (size_t i = 0; i < w->npub; i++) {
        published_t *p = &w->pub[i];
        char dir[H5FL_PATH_MAX];
        snprintf(dir, sizeof dir, "%s/step-%09lld", w->root, (long long)p->step);
        if (!p->gone && (groups || released == INT64_MAX) && !w->cfg.keep_all && p->seq <= released) {
            h5fl_rmtree(dir);
            p->gone = 1;
        }
        if (p->seq > released) {
            (*unreleased)++;
            if (!p->gone && access(dir, F_OK) == 0)
                *staged += p->nbytes;
        }
    }
}

/* ---- open ------------------------------------------------------------------------------------------ */
static void new_run_id(char out[33])
{
    unsigned char b[16] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(b, 1, sizeof b, f) : 0;
    if (f)
        fclose(f);
    if (got != sizeof b) { /* no /dev/urandom: time and pid */
        uint64_t x = (uint64_t)(h5fl_now() * 1e9) ^ ((uint64_t)getpid() << 32);
        for (int i = 0; i < 16; i++, x = x * 6364136223846793005ULL + 1442695040888963407ULL)
            b[i] = (unsigned char)(x >> 56);
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* a version 4 uuid, as Python's uuid4().hex */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static int looks_like_xml(const char *arg)
{
    size_t n = strlen(arg);
    if (n >= 4 && strcmp(arg + n - 4, ".xml") == 0)
        return 1;
    struct stat st;
    if (stat(arg, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    FILE *f = fopen(arg, "rb");
    if (!f)
        return 0;
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\t' || c == '\r') {
    }
    fclose(f);
    return c == '<';
}

/* The settings from the argument (every rank; errors agreed by the caller). */
static int configure(h5flow_writer *w, const char *arg)
{
    h5fl_config_defaults(&w->cfg);
    if (!arg || !*arg)
        return set_err(w, H5FLOW_ERR_CONFIG, "h5flow_writer_open: no stream given; give an XML file or the stream's "
                                             "name (steps are staged in <name>.h5flow/)");
    if (looks_like_xml(arg)) {
        if (h5fl_config_from_xml(&w->cfg, arg, w->errmsg, sizeof w->errmsg))
            return H5FLOW_ERR_CONFIG;
    } else {
        if (strlen(arg) >= sizeof w->cfg.filename - 64)
            return set_err(w, H5FLOW_ERR_CONFIG, "h5flow_writer_open: the stream name is longer than %zu characters",
                           sizeof w->cfg.filename - 64);
        snprintf(w->cfg.filename, sizeof w->cfg.filename, "%s", arg);
        size_t n = strlen(w->cfg.filename);
        if (n > 7 && strcmp(w->cfg.filename + n - 7, ".h5flow") == 0) /* the staging directory itself */
            w->cfg.filename[n - 7] = '\0';
        while (n > 1 && w->cfg.filename[strlen(w->cfg.filename) - 1] == '/')
            w->cfg.filename[strlen(w->cfg.filename) - 1] = '\0', n--;
    }
    snprintf(w->root, sizeof w->root, "%s.h5flow", w->cfg.filename);
    return 0;
}

/* The directory holding the staging directory. */
static void parent_dir(const h5flow_writer *w, char parent[H5FL_PATH_MAX])
{
    snprintf(parent, H5FL_PATH_MAX, "%s", w->root);
    char *slash = strrchr(parent, '/');
    if (!slash)
        snprintf(parent, H5FL_PATH_MAX, ".");
    else if (slash == parent)
        parent[1] = '\0';
    else
        *slash = '\0';
}

static int trusted_uid(uid_t uid)
{
    return uid == geteuid() || uid == 0;
}

/* The stream directory only this user (or root) can write, in a parent others cannot rename it out of
 * (src/h5flow/transports/_ownership.py: the same rule, the same words). */
static int check_private_dir(h5flow_writer *w, const char *parent)
{
    struct stat st, pst;
    if (lstat(w->root, &st) != 0)
        return set_err(w, H5FLOW_ERR_IO, "cannot start stream in %s: %s", w->root, strerror(errno));
    char why[160] = "";
    if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode))
        snprintf(why, sizeof why, "it is not a directory (a symbolic link or a file)");
    else if (!trusted_uid(st.st_uid))
        snprintf(why, sizeof why, "it is owned by uid %ld, not by you (uid %ld)", (long)st.st_uid, (long)geteuid());
    else if (st.st_mode & 022)
        snprintf(why, sizeof why, "it is writable by %s (mode %04o)",
                 (st.st_mode & 022) == 022 ? "group and others" : (st.st_mode & 02) ? "others" : "its group",
                 (unsigned)(st.st_mode & 07777));
    else if (stat(parent, &pst) == 0 && (pst.st_mode & 02) && !(pst.st_mode & S_ISVTX) && !trusted_uid(pst.st_uid))
        snprintf(why, sizeof why, "its directory %.60s is writable by others without the sticky bit (mode %04o)",
                 parent, (unsigned)(pst.st_mode & 07777));
    if (!why[0])
        return 0;
    return set_err(w, H5FLOW_ERR_CONFIG, "%s: refusing the stream directory: %s, so another user could change what "
                   "the stream delivers. Remove it (its owner or root can), or choose another filename, and let h5flow "
                   "create the directory itself (mode 0700) (streams are per-user, as ssh's StrictModes trusts only the "
                   "user's own, not group- or world-writable files)", w->root, why);
}

/* Rank 0: claim the stream and prepare a new run. */
static int start_run(h5flow_writer *w)
{
    char parent[H5FL_PATH_MAX];
    parent_dir(w, parent);
    struct stat st;
    if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
        return set_err(w, H5FLOW_ERR_CONFIG, "cannot start stream in %s: the directory %s of the stream's filename "
                       "does not exist: create it (on fast storage: a burst buffer, NVMe, /dev/shm) or point filename "
                       "elsewhere", w->root, parent);
    if (mkdir(w->root, 0700) != 0 && errno != EEXIST)
        return set_err(w, H5FLOW_ERR_IO, "cannot start stream in %s: mkdir: %s", w->root, strerror(errno));
    int rc = check_private_dir(w, parent);
    if (rc)
        return rc;
    rc = claim(w);
    if (rc)
        return rc;
    rc = refuse_if_live(w);
    if (!rc)
        rc = reset(w);
    if (rc)
        release_claim(w);
    return rc;
}

static int announce(h5flow_writer *w, double created)
{
    char p[H5FL_PATH_MAX], hb[32], cr[32];
    path_of(w, p, "stream.json");
    h5fl_repr(w->cfg.heartbeat, hb);
    h5fl_repr(created, cr);
    char text[512];
    int n = snprintf(text, sizeof text,
                     "{\"run_id\": \"%s\", \"producers\": %d, \"layout\": \"%s\", \"driver\": \"mpio\", \"heartbeat\": "
                     "%s, \"created\": %s, \"keep\": \"%s\", \"format\": \"h5flow-stream\", \"version\": 1}",
                     w->run_id, w->size, w->cfg.layout_nn ? "n-n" : "n-1", hb, cr, w->cfg.keep_all ? "all" : "released");
    int e = h5fl_atomic_write(p, text, (size_t)n);
    if (e)
        return set_err(w, H5FLOW_ERR_IO, "cannot announce the stream in %s: %s", w->root, strerror(e));
    return 0;
}

int h5flow_writer_open(MPI_Comm comm, const char *xml_or_dir, h5flow_writer **writer)
{
    if (!writer)
        return H5FLOW_ERR_ARGUMENT;
    h5flow_writer *w = calloc(1, sizeof *w);
    *writer = w;
    if (!w)
        return H5FLOW_ERR_NOMEM;
    w->claim_fd = -1;
    w->comm = MPI_COMM_NULL;
    w->last_step = -1;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
        return w->failed = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_writer_open: MPI is not initialised: call "
                                                           "MPI_Init first");
    if (comm == MPI_COMM_NULL || MPI_Comm_dup(comm, &w->comm) != MPI_SUCCESS)
        return w->failed = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_writer_open: give a valid communicator (the "
                                                           "producer ranks)");
    MPI_Comm_rank(w->comm, &w->rank);
    MPI_Comm_size(w->comm, &w->size);
    int rc = agree(w, configure(w, xml_or_dir));
    if (!rc) {
        if (w->rank == 0)
            new_run_id(w->run_id);
        MPI_Bcast(w->run_id, sizeof w->run_id, MPI_CHAR, 0, w->comm);
        rc = agree(w, w->rank == 0 ? start_run(w) : 0);
    }
    if (!rc)
        rc = agree(w, hb_start(w));
    double created = h5fl_now();
    if (!rc)
        rc = agree(w, w->rank == 0 ? announce(w, created) : 0);
    if (rc) {
        hb_stop(&w->hb);
        release_claim(w);
        w->failed = rc;
        return rc;
    }
    w->opened = 1;
    return H5FLOW_OK;
}

/* ---- steps ----------------------------------------------------------------------------------------- */
static int usable(h5flow_writer *w, const char *what)
{
    if (!w)
        return H5FLOW_ERR_ARGUMENT;
    if (w->failed)
        return set_err(w, H5FLOW_ERR_STOPPED, "%s: the writer stopped on an earlier error; call h5flow_writer_close",
                       what);
    return 0;
}

static void free_pieces(h5flow_writer *w)
{
    for (size_t i = 0; i < w->npieces; i++)
        free(w->pieces[i].data);
    w->npieces = 0;
}

int h5flow_begin_step(h5flow_writer *w, int64_t step, double time)
{
    int rc = usable(w, "h5flow_begin_step");
    if (rc)
        return rc;
    int64_t s = step < 0 ? -1 : step, mine[2] = {s, -s}, all[2]; /* no overflow for INT64_MIN */
    MPI_Allreduce(mine, all, 2, MPI_INT64_T, MPI_MIN, w->comm);
    if (w->in_step)
        rc = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_begin_step(%lld): step %lld is not ended yet; call "
                     "h5flow_end_step first", (long long)step, (long long)w->step);
    else if (all[0] != -all[1])
        rc = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_begin_step: the ranks give different step numbers (%lld to %lld); "
                     "every rank must begin the same step", (long long)all[0], (long long)-all[1]);
    else if (step < 0 || step <= w->last_step)
        rc = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_begin_step(%lld): steps must be >= 0 and increasing (the last "
                     "was %lld)", (long long)step, (long long)w->last_step);
    else if (!isfinite(time))
        rc = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_begin_step(%lld): the time %g is not a finite number", (long long)step,
                     time);
    rc = agree(w, rc);
    if (rc)
        return rc;
    w->in_step = 1;
    w->step = step;
    w->time = time;
    w->local_code = 0;
    free_pieces(w);
    return H5FLOW_OK;
}

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > NAME_LEN || *s == '.' || *s == '+' || *s == '-')
        return 0;
    for (; *s; s++)
        if (!(((*s | 32) >= 'a' && (*s | 32) <= 'z') || (*s >= '0' && *s <= '9') || strchr("_.+-", *s)))
            return 0;
    return 1;
}

/* Whether two pieces (padded to 3-D) share an element. */
static int pieces_overlap(const piece_desc *a, const piece_desc *b)
{
    for (int k = 0; k < 3; k++)
        if (!(a->off[k] < b->off[k] + b->cnt[k] && b->off[k] < a->off[k] + a->cnt[k]))
            return 0;
    return 1;
}

/* "offset (z, y, x) count (z, y, x)" of a piece, as its caller gave them (ndims axes). */
static void piece_text(const piece_desc *d, char *out, size_t n)
{
    int k0 = 3 - d->ndims, len = 0;
    len += snprintf(out + len, n - (size_t)len, "offset (");
    for (int k = k0; k < 3 && len < (int)n; k++)
        len += snprintf(out + len, n - (size_t)len, "%s%llu", k > k0 ? ", " : "", (unsigned long long)d->off[k]);
    if (len < (int)n)
        len += snprintf(out + len, n - (size_t)len, ") count (");
    for (int k = k0; k < 3 && len < (int)n; k++)
        len += snprintf(out + len, n - (size_t)len, "%s%llu", k > k0 ? ", " : "", (unsigned long long)d->cnt[k]);
    if (len < (int)n)
        snprintf(out + len, n - (size_t)len, ")");
}

static int write_error(h5flow_writer *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int write_error(h5flow_writer *w, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->errmsg, sizeof w->errmsg, fmt, ap);
    va_end(ap);
    if (!w->local_code) { /* end_step fails on every rank with the first such error */
        w->local_code = code;
        snprintf(w->local_msg, sizeof w->local_msg, "rank %d: %s", w->rank, w->errmsg);
    }
    return code;
}

/* The type array `name` had in earlier steps, or -1 for an array not seen before. */
static int known_type(const h5flow_writer *w, const char *name)
{
    for (size_t i = 0; i < w->nknown; i++)
        if (!strcmp(w->known[i].name, name))
            return w->known[i].type;
    return -1;
}

#define TYPE_CHANGED "array \"%s\" was %s in earlier steps and is %s now; an array keeps its type for the whole " \
                     "stream (convert it, or write it under another name)"

/* Remember the types of a step's arrays (every rank alike, after build_meshes agreed). */
static int remember_types(h5flow_writer *w, const mesh_t *m, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (known_type(w, m[k].name) >= 0)
            continue;
        if (w->nknown == w->capknown) {
            size_t cap = w->capknown ? 2 * w->capknown : 8;
            known_t *p = realloc(w->known, cap * sizeof *p);
            if (!p)
                return set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory", (long long)w->step);
            w->known = p;
            w->capknown = cap;
        }
        snprintf(w->known[w->nknown].name, sizeof w->known[w->nknown].name, "%s", m[k].name);
        w->known[w->nknown++].type = m[k].type;
    }
    return 0;
}

int h5flow_write(h5flow_writer *w, const char *name, h5flow_type type, int ndims, const uint64_t *global_dims,
                 const uint64_t *offset, const uint64_t *count, const void *buffer)
{
    int rc = usable(w, "h5flow_write");
    if (rc)
        return rc;
    const char *shown = name ? name : "(null)";
    if (!w->in_step)
        return set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%.140s\"): no step begun; call h5flow_begin_step first",
                       shown);
    if (!name || !valid_name(name))
        return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write: array name \"%.140s\" is not allowed: use 1-128 "
                           "letters, digits, '_', '.', '+', '-', not starting with '.', '+' or '-'", shown);
    if ((int)type < 0 || (int)type >= NTYPES)
        return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): element type %d; accepted: H5FLOW_FLOAT32 "
                           "(0) to H5FLOW_UINT8 (%d)", name, (int)type, NTYPES - 1);
    if (ndims < 1 || ndims > 3)
        return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): ndims %d; accepted: 1 to 3", name, ndims);
    int was = known_type(w, name);
    if (was >= 0 && was != (int)type)
        return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\") in step %lld: " TYPE_CHANGED, name,
                           (long long)w->step, name, TYPES[was].dtype, TYPES[type].dtype);
    if (!global_dims || !offset || !count)
        return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): global_dims, offset and count must not be "
                           "NULL", name);
    uint64_t elements = 1;
    for (int a = 0; a < ndims; a++) {
        if (offset[a] > global_dims[a] || count[a] > global_dims[a] - offset[a])
            return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): axis %d: the piece covers [%llu, %llu) "
                               "but the global array has %llu there; check offset, count and global_dims", name, a,
                               (unsigned long long)offset[a], (unsigned long long)(offset[a] + count[a]),
                               (unsigned long long)global_dims[a]);
        if (global_dims[a] > ((uint64_t)1 << 40))
            return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): global_dims[%d] = %llu; accepted: up to "
                               "2^40", name, a, (unsigned long long)global_dims[a]);
        elements *= count[a];
    }
    if (!buffer && elements)
        return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): buffer is NULL for %llu elements", name,
                           (unsigned long long)elements);
    piece_desc desc = {0};
    snprintf(desc.name, sizeof desc.name, "%s", name);
    desc.type = (int32_t)type;
    desc.ndims = ndims;
    for (int a = 0; a < 3; a++) { /* padded to 3-D at the front: (z, y, x) */
        int k = a - (3 - ndims);
        desc.gdims[a] = k >= 0 ? global_dims[k] : 1;
        desc.off[a] = k >= 0 ? offset[k] : 0;
        desc.cnt[a] = k >= 0 ? count[k] : 1;
    }
    for (size_t i = 0; i < w->npieces && elements; i++) { /* each element once per step: at the call, on this rank */
        const piece_desc *old = &w->pieces[i].d;
        if (!strcmp(old->name, name) && old->ndims == ndims && pieces_overlap(old, &desc)) {
            char a[160], b[160];
            piece_text(old, a, sizeof a);
            piece_text(&desc, b, sizeof b);
            return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): in step %lld this rank already wrote a "
                               "piece of \"%s\" at %s, which overlaps this one at %s: every element of an array is "
                               "written once per step (a consumer would get both pieces); write each piece once", name,
                               (long long)w->step, name, a, b);
        }
    }
    size_t nbytes = (size_t)elements * TYPES[type].size;
    if (w->npieces == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 8;
        piece_t *p = realloc(w->pieces, cap * sizeof *p);
        if (!p)
            return write_error(w, H5FLOW_ERR_NOMEM, "h5flow_write(\"%s\"): out of memory", name);
        w->pieces = p;
        w->cap = cap;
    }
    piece_t *p = &w->pieces[w->npieces];
    memset(p, 0, sizeof *p);
    p->data = malloc(nbytes ? nbytes : 1); /* an empty piece is kept until end_step (see drop_empty) */
    if (!p->data)
        return write_error(w, H5FLOW_ERR_NOMEM, "h5flow_write(\"%s\"): out of memory for a copy of %zu bytes", name,
                           nbytes);
    memcpy(p->data, buffer, nbytes);
    p->d = desc;
    w->npieces++;
    return H5FLOW_OK;
}

static uint64_t piece_elements(const piece_desc *d)
{
    return d->cnt[0] * d->cnt[1] * d->cnt[2];
}

/* Every rank alike, after the gather: empty pieces are dropped, except the first one of an array that has no
 * element on any rank (a particle code's step without particles), so consumers still find that array, of shape
 * (0, ...), as the Python API publishes it. Compacts `all` and `owner` and this rank's own pieces. */
static void drop_empty(h5flow_writer *w, piece_desc *all, int *owner, size_t *total, size_t first_mine)
{
    size_t n = *total, out = 0, mine = 0;
    for (size_t i = 0; i < n; i++) {
        int keep = piece_elements(&all[i]) != 0;
        if (!keep) {
            keep = 1;
            for (size_t j = 0; j < n && keep; j++)
                if (j != i && !strcmp(all[j].name, all[i].name) && (piece_elements(&all[j]) || j < i))
                    keep = 0; /* the array has elements, or an earlier empty piece stands for it */
        }
        if (i >= first_mine && i < first_mine + w->npieces) { /* one of this rank's own pieces */
            piece_t *p = &w->pieces[i - first_mine];
            if (keep)
                w->pieces[mine++] = *p;
            else
                free(p->data);
        }
        if (keep) {
            all[out] = all[i];
            owner[out++] = owner[i];
        }
    }
    w->npieces = mine;
    *total = out;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The step's meshes from every rank's pieces (same on every rank), or an error. */
static int build_meshes(h5flow_writer *w, const piece_desc *all, const int *owner, size_t total, mesh_t **out,
                        size_t *nout)
{
    *out = NULL;
    *nout = 0;
    const char **names = malloc((total ? total : 1) * sizeof *names);
    if (!names)
        return set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory", (long long)w->step);
    for (size_t i = 0; i < total; i++)
        names[i] = all[i].name;
    qsort(names, total, sizeof *names, cmp_names);
    size_t n = 0;
    for (size_t i = 0; i < total; i++)
        if (!n || strcmp(names[n - 1], names[i]))
            names[n++] = names[i];
    mesh_t *m = calloc(n ? n : 1, sizeof *m);
    if (!m) {
        free(names);
        return set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory", (long long)w->step);
    }
    *out = m;
    *nout = n;
    int rc = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        m[k].name = names[k];
        size_t cnt = 0;
        for (size_t i = 0; i < total; i++)
            cnt += !strcmp(all[i].name, names[k]);
        m[k].idx = malloc(cnt * sizeof *m[k].idx);
        m[k].owner = malloc(cnt * sizeof *m[k].owner);
        m[k].rows = malloc((cnt + 1) * sizeof *m[k].rows);
        if (!m[k].idx || !m[k].owner || !m[k].rows) {
            rc = set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory", (long long)w->step);
            break;
        }
        uint64_t row = 0;
        for (size_t i = 0; i < total; i++) {
            const piece_desc *d = &all[i];
            if (strcmp(d->name, names[k]))
                continue;
            size_t b = m[k].nblocks++;
            if (b == 0) {
                m[k].type = d->type;
                m[k].ndims = d->ndims;
                memcpy(m[k].gdims, d->gdims, sizeof d->gdims);
            } else if (d->type != m[k].type || d->ndims != m[k].ndims || memcmp(d->gdims, m[k].gdims, sizeof d->gdims)) {
                const piece_desc *f = &all[m[k].idx[0]];
                rc = set_err(w, H5FLOW_ERR_ARGUMENT, "step %lld: ranks disagree on array \"%s\": rank %d gives %d-D "
                             "global_dims (%llu, %llu, %llu) of %s, rank %d %d-D (%llu, %llu, %llu) of %s; every rank must "
                             "give the same global_dims and type", (long long)w->step, d->name, m[k].owner[0],
                             f->ndims, (unsigned long long)f->gdims[0], (unsigned long long)f->gdims[1],
                             (unsigned long long)f->gdims[2], TYPES[f->type].dtype, owner[i], d->ndims,
                             (unsigned long long)d->gdims[0], (unsigned long long)d->gdims[1],
                             (unsigned long long)d->gdims[2], TYPES[d->type].dtype);
                break;
            }
            m[k].idx[b] = i;
            m[k].owner[b] = owner[i];
            m[k].rows[b] = row;
            row += d->cnt[0] * d->cnt[1] * d->cnt[2];
            /* extent i0 i1 j0 j1 k0 k1 (x, y, z) */
            int64_t e[6] = {(int64_t)d->off[2], (int64_t)(d->off[2] + d->cnt[2] - 1), (int64_t)d->off[1],
                            (int64_t)(d->off[1] + d->cnt[1] - 1), (int64_t)d->off[0],
                            (int64_t)(d->off[0] + d->cnt[0] - 1)};
            for (int a = 0; a < 6; a++)
                if (b == 0 || (a % 2 ? e[a] > m[k].gext[a] : e[a] < m[k].gext[a]))
                    m[k].gext[a] = e[a];
        }
        m[k].rows[m[k].nblocks] = row;
        /* every element by one rank, once per step: the same verdict on every rank (all see every piece) */
        for (size_t a = 0; a < m[k].nblocks && !rc; a++)
            for (size_t b = a + 1; b < m[k].nblocks && !rc; b++)
                if (pieces_overlap(&all[m[k].idx[a]], &all[m[k].idx[b]])) {
                    char ta[160], tb[160];
                    piece_text(&all[m[k].idx[a]], ta, sizeof ta);
                    piece_text(&all[m[k].idx[b]], tb, sizeof tb);
                    rc = set_err(w, H5FLOW_ERR_ARGUMENT, "step %lld: array \"%s\": the piece of rank %d at %s and the "
                                 "piece of rank %d at %s overlap; every element of an array is written by one rank, "
                                 "once per step (check each rank's offset)", (long long)w->step, m[k].name,
                                 m[k].owner[a], ta, m[k].owner[b], tb);
                }
    }
    for (size_t k = 0; k < n && !rc; k++) { /* every rank alike: a rank that wrote no piece of it checks too */
        int was = known_type(w, m[k].name);
        if (was >= 0 && was != m[k].type)
            rc = set_err(w, H5FLOW_ERR_ARGUMENT, "step %lld: " TYPE_CHANGED, (long long)w->step, m[k].name,
                         TYPES[was].dtype, TYPES[m[k].type].dtype);
    }
    if (!rc)
        rc = remember_types(w, m, n);
    free(names); /* the names themselves live in `all` */
    return rc;
}

static void free_meshes(mesh_t *m, size_t n)
{
    if (!m)
        return;
    for (size_t k = 0; k < n; k++) {
        free(m[k].idx);
        free(m[k].owner);
        free(m[k].rows);
    }
    free(m);
}

/* meta.json: StepMeta as Python's json.dumps(asdict(meta), separators=(",", ":")) writes it. */
static void step_json(const h5flow_writer *w, const piece_desc *all, const mesh_t *m, size_t n, h5fl_buf *b)
{
    char t[32];
    h5fl_repr(w->time, t);
    h5fl_buf_printf(b, "{\"step\":%lld,\"time\":%s,\"producers\":%d,\"meshes\":{", (long long)w->step, t, w->size);
    for (size_t k = 0; k < n; k++) {
        h5fl_buf_printf(b, "%s\"%s\":{\"name\":\"%s\",\"kind\":\"image\",\"blocks\":[", k ? "," : "", m[k].name,
                        m[k].name);
        for (size_t i = 0; i < m[k].nblocks; i++) {
            const piece_desc *d = &all[m[k].idx[i]];
            uint64_t cells = d->cnt[0] * d->cnt[1] * d->cnt[2];
            uint64_t points = (d->cnt[0] + 1) * (d->cnt[1] + 1) * (d->cnt[2] + 1);
            h5fl_buf_printf(b,
                            "%s{\"block_id\":%zu,\"owner\":%d,\"kind\":\"image\",\"num_cells\":%llu,\"num_points\":%llu,"
                            "\"extent\":[%lld,%lld,%lld,%lld,%lld,%lld],\"origin\":[0.0,0.0,0.0],\"spacing\":[1.0,%s,%s],"
                            "\"ghost\":0}",
                            i ? "," : "", i, m[k].owner[i], (unsigned long long)cells, (unsigned long long)points,
                            /* an empty piece ends one below where it starts on its empty axis */
                            (long long)d->off[2], (long long)d->off[2] + (long long)d->cnt[2] - 1,
                            (long long)d->off[1], (long long)d->off[1] + (long long)d->cnt[1] - 1,
                            (long long)d->off[0], (long long)d->off[0] + (long long)d->cnt[0] - 1,
                            m[k].ndims >= 2 ? "1.0" : "0.0", m[k].ndims == 3 ? "1.0" : "0.0");
        }
        h5fl_buf_printf(b, "],\"arrays\":[{\"name\":\"%s\",\"association\":\"cell\",\"dtype\":\"%s\",\"components\":1}],"
                        "\"global_extent\":[%lld,%lld,%lld,%lld,%lld,%lld]}", m[k].name, TYPES[m[k].type].dtype,
                        (long long)m[k].gext[0], (long long)m[k].gext[1], (long long)m[k].gext[2],
                        (long long)m[k].gext[3], (long long)m[k].gext[4], (long long)m[k].gext[5]);
    }
    h5fl_buf_printf(b, "}}");
}

/* ---- writing a step's shared file (collective) ------------------------------------------------------ */
static int attr_str(hid_t obj, const char *name, const char *value)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, t, &value) < 0 ? -1 : 0;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
    return rc;
}

static int attr_num(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *value)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, ftype, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, mtype, value) < 0 ? -1 : 0;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(s);
    return rc;
}

/* The root attributes of a step file (writer.py _write_attrs). */
static int step_attrs(const h5flow_writer *w, hid_t f)
{
    int64_t version = 1, step = w->step, producers = w->size;
    return attr_str(f, "format", "h5flow-step") || attr_num(f, "version", H5T_STD_I64LE, H5T_NATIVE_INT64, &version) ||
           attr_num(f, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &step) ||
           attr_num(f, "time", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &w->time) ||
           attr_num(f, "producers", H5T_STD_I64LE, H5T_NATIVE_INT64, &producers) ||
           attr_str(f, "layout", w->cfg.layout_nn ? "n-n" : "n-1");
}

/* The data of this rank's `local`-th piece named `name` (its pieces of a name are its blocks in id order). */
static const void *local_piece(const h5flow_writer *w, const char *name, size_t local)
{
    for (size_t i = 0, seen = 0; i < w->npieces; i++)
        if (!strcmp(w->pieces[i].d.name, name) && seen++ == local)
            return w->pieces[i].data;
    return NULL;
}

/* Write rows [row, row + n) of a (count, 1) dataset from buf; n == 0: this rank's empty collective part. */
static int write_rows(hid_t dset, hid_t mtype, uint64_t row, uint64_t n, const void *buf, hid_t dxpl)
{
    hid_t fs = H5Dget_space(dset);
    hsize_t start[2] = {row, 0}, cnt[2] = {n, 1}, one[1] = {n ? n : 1};
    hid_t ms = H5Screate_simple(1, one, NULL);
    if (n) {
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
    } else {
        H5Sselect_none(fs);
        H5Sselect_none(ms);
    }
    static const double dummy = 0;
    herr_t r = H5Dwrite(dset, mtype, ms, fs, dxpl, n ? buf : (const void *)&dummy);
    H5Sclose(ms);
    H5Sclose(fs);
    return r < 0 ? -1 : 0;
}

/* Collective: data.h5 of the step. 0, or this rank's error in w->errmsg (the ranks agree afterwards). A failed
 * data write keeps making the collective calls, with nothing to write. */
static int write_shared(h5flow_writer *w, const char *path, const piece_desc *all, const mesh_t *m, size_t n,
                        const char *meta, size_t metalen)
{
    H5E_auto2_t old_func;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_func, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int rc = 0;
    char h5msg[1024];
#define H5FAIL(what)                                                                                                   \
    do {                                                                                                               \
        if (!rc) {                                                                                                     \
            h5_errtext(h5msg, sizeof h5msg);                                                                           \
            rc = set_err(w, H5FLOW_ERR_IO, "rank %d: %s %s: %s", w->rank, what, path, h5msg);                          \
        }                                                                                                              \
    } while (0)
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, w->comm, MPI_INFO_NULL);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0) {
        H5FAIL("creating");
        H5Eset_auto2(H5E_DEFAULT, old_func, old_data);
        return rc;
    }
    hid_t indep = H5Pcreate(H5P_DATASET_XFER), dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(indep, H5FD_MPIO_INDEPENDENT);
    H5Pset_dxpl_mpio(dxpl, w->cfg.collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT);
    if (step_attrs(w, f))
        H5FAIL("writing the attributes of");
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    hsize_t mdims[1] = {metalen};
    hid_t ms = H5Screate_simple(1, mdims, NULL);
    hid_t md = H5Dcreate2(f, "meta", H5T_STD_U8LE, ms, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Sclose(ms);
    if (md < 0) {
        H5FAIL("creating the meta dataset of");
    } else {
        hid_t fs = H5Dget_space(md), mem = H5Screate_simple(1, mdims, NULL);
        if (w->rank != 0) {
            H5Sselect_none(fs);
            H5Sselect_none(mem);
        }
        if (H5Dwrite(md, H5T_NATIVE_UINT8, mem, fs, indep, meta) < 0)
            H5FAIL("writing the meta dataset of");
        H5Sclose(fs);
        H5Sclose(mem);
        H5Dclose(md);
    }
    for (size_t k = 0; k < n; k++) {
        hid_t g = H5Gcreate2(f, m[k].name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hid_t gc = g >= 0 ? H5Gcreate2(g, "cell", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
        if (g < 0 || gc < 0 || attr_str(g, "kind", "image")) {
            H5FAIL("creating a group in");
            if (gc >= 0)
                H5Gclose(gc);
            if (g >= 0)
                H5Gclose(g);
            break;
        }
        hsize_t dims[2] = {m[k].rows[m[k].nblocks], 1};
        hid_t s = H5Screate_simple(2, dims, NULL);
        hid_t d = H5Dcreate2(gc, m[k].name, file_type(m[k].type), s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5Sclose(s);
        if (d < 0) {
            H5FAIL("creating a dataset in");
            H5Gclose(gc);
            H5Gclose(g);
            break;
        }
        /* this rank's blocks, in block-id order: its pieces of this name, in the order it wrote them */
        size_t mine = 0, most = 0;
        int *per_rank = calloc((size_t)w->size, sizeof *per_rank);
        for (size_t b = 0; b < m[k].nblocks; b++) {
            if (per_rank)
                per_rank[m[k].owner[b]]++;
            mine += m[k].owner[b] == w->rank;
        }
        for (int r = 0; per_rank && r < w->size; r++)
            most = (size_t)per_rank[r] > most ? (size_t)per_rank[r] : most;
        free(per_rank);
        size_t calls = w->cfg.collective ? most : mine, done = 0, local = 0;
        for (size_t b = 0; b < m[k].nblocks && done < calls; b++) {
            if (m[k].owner[b] != w->rank)
                continue;
            /* the local piece: the (local)-th of this name among this rank's pieces */
            const void *buf = local_piece(w, m[k].name, local++);
            uint64_t nrows = m[k].rows[b + 1] - m[k].rows[b];
            if (write_rows(d, mem_type(m[k].type), m[k].rows[b], rc ? 0 : nrows, buf, dxpl))
                H5FAIL("writing");
            done++;
        }
        for (; done < calls; done++) /* collective transfers: every rank makes as many calls */
            if (write_rows(d, mem_type(m[k].type), 0, 0, NULL, dxpl))
                H5FAIL("writing");
        H5Dclose(d);
        H5Gclose(gc);
        H5Gclose(g);
    }
    (void)all;
    H5Pclose(dcpl);
    H5Pclose(indep);
    H5Pclose(dxpl);
    if (H5Fflush(f, H5F_SCOPE_LOCAL) < 0)
        H5FAIL("flushing");
    if (H5Fclose(f) < 0)
        H5FAIL("closing");
    H5Eset_auto2(H5E_DEFAULT, old_func, old_data);
#undef H5FAIL
    return rc;
}

/* This rank's rank-<r>.h5 (layout n-n, serial HDF5; writer.py _write_per_rank): per mesh a (rows, 1) dataset of
 * the blocks it owns, in block-id order ((0, 1) when it owns none); no meta dataset, no kind attribute. */
static int write_per_rank(h5flow_writer *w, const char *path, const mesh_t *m, size_t n)
{
    H5E_auto2_t old_func;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_func, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int rc = 0;
    char h5msg[1024];
    h5fl_extent *ext = NULL; /* where each dataset's raw data lies, for consumers' raw reads */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    int64_t rank = w->rank;
    const char *what = "creating";
    if (f < 0)
        goto fail;
    what = "writing the attributes of";
    if (step_attrs(w, f) || attr_num(f, "rank", H5T_STD_I64LE, H5T_NATIVE_INT64, &rank))
        goto fail;
    what = "writing";
    ext = calloc(n ? n : 1, sizeof *ext);
    if (!ext)
        goto fail;
    for (size_t k = 0; k < n; k++) {
        uint64_t total = 0;
        for (size_t b = 0; b < m[k].nblocks; b++)
            if (m[k].owner[b] == w->rank)
                total += m[k].rows[b + 1] - m[k].rows[b];
        hid_t g = H5Gcreate2(f, m[k].name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hid_t gc = g >= 0 ? H5Gcreate2(g, "cell", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
        hsize_t dims[2] = {total, 1};
        hid_t s = H5Screate_simple(2, dims, NULL);
        hid_t d = gc >= 0 ? H5Dcreate2(gc, m[k].name, file_type(m[k].type), s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                          : -1;
        H5Sclose(s);
        int bad = d < 0;
        uint64_t row = 0;
        size_t local = 0;
        for (size_t b = 0; b < m[k].nblocks && !bad; b++) {
            if (m[k].owner[b] != w->rank)
                continue;
            uint64_t nrows = m[k].rows[b + 1] - m[k].rows[b];
            bad = write_rows(d, mem_type(m[k].type), row, nrows, local_piece(w, m[k].name, local++), H5P_DEFAULT) != 0;
            row += nrows;
        }
        if (d >= 0) {
            h5fl_extent_of(&ext[k], d, m[k].name, "cell", m[k].name, TYPES[m[k].type].dtype, total, 1);
            H5Dclose(d);
        }
        if (gc >= 0)
            H5Gclose(gc);
        if (g >= 0)
            H5Gclose(g);
        if (bad || g < 0 || gc < 0)
            goto fail;
    }
    what = "closing";
    if (H5Fclose(f) < 0) {
        f = -1;
        goto fail;
    }
    f = -1;
    H5Eset_auto2(H5E_DEFAULT, old_func, old_data);
    int e = h5fl_write_extents(path, ext, n);
    free(ext);
    if (e)
        return set_err(w, H5FLOW_ERR_IO, "rank %d: writing the extents of %s: %s", w->rank, path, strerror(e));
    return 0;
fail:
    free(ext);
    h5_errtext(h5msg, sizeof h5msg);
    rc = set_err(w, H5FLOW_ERR_IO, "rank %d: %s %s: %s", w->rank, what, path, h5msg);
    if (f >= 0)
        H5Fclose(f);
    H5Eset_auto2(H5E_DEFAULT, old_func, old_data);
    return rc;
}

/* ---- consumer groups that stopped beating (dead_consumer, docs/STREAM.md "Consumer liveness") ----------- */
/* Whether "name\n" is in the list `list`. */
static int listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == '\n') && p[n] == '\n')
            return 1;
    return 0;
}

static void list_add(char *list, size_t cap, const char *name)
{
    size_t used = strlen(list);
    if (!listed(list, name))
        snprintf(list + used, cap - used, "%s\n", name);
}

/* Rank 0: group `name` (its file's text) stopped beating with steps unreleased: 1 and what is known of it in
 * `out`; else 0. A group that does not beat (no "heartbeat") is never judged. */
static int group_dead(const h5flow_writer *w, const char *name, const char *text, char *out, size_t n)
{
    double hb = 0, rel = -1, ranks = 1, step = -1;
    if (h5fl_json_num(text, "heartbeat", &hb) || hb <= 0 || h5fl_json_num(text, "released_seq", &rel) ||
        (int64_t)rel >= w->next_seq - 1)
        return 0;
    h5fl_json_num(text, "consumers", &ranks);
    h5fl_json_num(text, "released_step", &step);
    char p[H5FL_PATH_MAX + 64], who[300] = "";
    snprintf(p, sizeof p, "%s/consumers/%s.hb", w->root, name);
    struct stat st;
    double age = stat(p, &st) == 0 ? h5fl_now() - ((double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec)
                                   : -1;
    if (age >= 0 && age <= 1.5 * hb)
        return 0;
    char *hbtext = NULL, host[256], pid[32];
    if (!h5fl_read_file(p, &hbtext, 4096) && sscanf(hbtext, "%255s %31s", host, pid) == 2)
        snprintf(who, sizeof who, "its rank 0 was pid %s on %s, ", pid, host);
    free(hbtext);
    char since[64], last[64];
    if (age < 0)
        snprintf(since, sizeof since, "never beat");
    else
        snprintf(since, sizeof since, "no heartbeat for %.1f s", age);
    if (rel < 0)
        snprintf(last, sizeof last, "none");
    else
        snprintf(last, sizeof last, "%lld (sequence %lld)", (long long)step, (long long)rel);
    snprintf(out, n, "consumer group '%s' stopped beating (%s, heartbeat every %g s; %s%lld rank(s)); last step it "
             "released: %s", name, since, hb, who, (long long)ranks, last);
    return 1;
}

/* Rank 0: the group file of `name` rewritten with "dropped": `reason` (it then holds no step back). 0 or errno. */
static int drop_group(const h5flow_writer *w, const char *name, const char *text, const char *reason)
{
    double rel = -1, ranks = 1, step = -1, hb = 0;
    h5fl_json_num(text, "released_seq", &rel);
    h5fl_json_num(text, "consumers", &ranks);
    h5fl_json_num(text, "released_step", &step);
    h5fl_json_num(text, "heartbeat", &hb);
    char now[32], beat[32], p[H5FL_PATH_MAX + 64];
    h5fl_repr(h5fl_now(), now);
    h5fl_repr(hb, beat);
    h5fl_buf b = {0};
    h5fl_buf_printf(&b, "{\"run_id\": \"%s\", \"released_seq\": %lld, \"consumers\": %lld, \"updated\": %s, "
                    "\"released_step\": %lld, \"heartbeat\": %s, \"dropped\": \"", w->run_id, (long long)rel,
                    (long long)ranks, now, (long long)step, beat);
    h5fl_json_escape(&b, reason);
    h5fl_buf_printf(&b, "\"}");
    snprintf(p, sizeof p, "%s/consumers/%s.json", w->root, name);
    int e = b.oom ? ENOMEM : h5fl_atomic_write(p, b.data, b.len);
    h5fl_buf_free(&b);
    return e;
}

/* Rank 0, blocked on its consumers before step `step`: apply dead_consumer to every group that stopped beating.
 * 0 to go on waiting, or an error (the stream is then stopped). */
static int check_dead(h5flow_writer *w)
{
    char dir[H5FL_PATH_MAX];
    path_of(w, dir, "consumers");
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int rc = 0;
    struct dirent *e;
    while (!rc && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 6 || len > 70 || e->d_name[0] == '.' || strcmp(e->d_name + len - 5, ".json") != 0)
            continue;
        char name[72], p[H5FL_PATH_MAX + 80], *text = NULL, run[64], what[1024];
        snprintf(name, sizeof name, "%.*s", (int)(len - 5), e->d_name);
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (h5fl_read_file(p, &text, 65536))
            continue;
        if (!h5fl_json_str(text, "run_id", run, sizeof run) && !strcmp(run, w->run_id) && !group_dropped(text) &&
            group_dead(w, name, text, what, sizeof what)) {
            if (w->cfg.dead_consumer == 2) {
                char msg[H5FL_MSG_MAX];
                snprintf(msg, sizeof msg, "%s; the stream is stopped before step %lld (dead_consumer='error'; with "
                         "'wait' the producer waits for the group to be restarted, with 'drop' it goes on without it)",
                         what, (long long)w->step);
                stop_stream(w, msg);
                rc = set_err(w, H5FLOW_ERR_CONSUMER, "%s", msg);
            } else if (w->cfg.dead_consumer == 1) {
                char reason[1200];
                snprintf(reason, sizeof reason, "%s; dropped before step %lld (dead_consumer='drop')", what,
                         (long long)w->step);
                int err = drop_group(w, name, text, reason);
                if (err)
                    fprintf(stderr, "h5flow: cannot mark consumer group '%s' dropped in %s: %s\n", name, p,
                            strerror(err));
                else
                    list_add(w->dropped, sizeof w->dropped, name);
                fprintf(stderr, "h5flow: %s; the producer drops it before step %lld and goes on (dead_consumer='drop'): "
                        "the steps it did not take are not kept for it, and the producer fails at its end naming "
                        "them\n", what, (long long)w->step);
            } else if (!listed(w->told, name)) {
                list_add(w->told, sizeof w->told, name);
                fprintf(stderr, "h5flow: %s; the producer waits for it before step %lld (dead_consumer='wait'): "
                        "restart its consumer (group='%s') to resume at its first unreleased step, or set "
                        "dead_consumer='drop' or 'error'\n", what, (long long)w->step, name);
            }
        }
        free(text);
    }
    closedir(d);
    return rc;
}

/* Rank 0 at close: the error naming the steps each dropped group that did not come back never took (0: none). */
static int dropped_error(h5flow_writer *w)
{
    h5fl_buf b = {0};
    for (const char *name = w->dropped; *name;) {
        const char *end = strchr(name, '\n');
        char g[72], p[H5FL_PATH_MAX + 80], *text = NULL, run[64], reason[1400] = "";
        snprintf(g, sizeof g, "%.*s", (int)(end - name), name);
        name = end + 1;
        snprintf(p, sizeof p, "%s/consumers/%s.json", w->root, g);
        double rel = -1;
        if (h5fl_read_file(p, &text, 65536))
            continue;
        int still = !h5fl_json_str(text, "run_id", run, sizeof run) && !strcmp(run, w->run_id) &&
                    group_dropped(text) && !h5fl_json_num(text, "released_seq", &rel);
        h5fl_json_str(text, "dropped", reason, sizeof reason);
        free(text);
        if (!still)
            continue; /* a consumer of the group came back: it reports the steps it missed itself */
        size_t count = 0;
        h5fl_buf steps = {0};
        int64_t first = -1, prev = -2;
        for (size_t i = 0; i <= w->npub; i++) {
            int64_t s = -1;
            if (i < w->npub && w->pub[i].seq > (int64_t)rel) {
                s = w->pub[i].step;
                count++;
                if (first >= 0 && s == prev + 1) {
                    prev = s;
                    continue;
                }
            }
            if (first >= 0) /* the run first..prev ends */
                h5fl_buf_printf(&steps, first == prev ? "%s%lld" : "%s%lld-%lld", steps.len ? ", " : "",
                                (long long)first, (long long)prev);
            first = prev = s;
        }
        if (count)
            h5fl_buf_printf(&b, "%s%s: %zu published step(s) were dropped for consumer group '%s' without being taken: "
                            "steps %s (%s)", b.len ? "; " : "", w->cfg.filename, count, g,
                            steps.data ? steps.data : "", reason);
        h5fl_buf_free(&steps);
    }
    int rc = b.len ? set_err(w, H5FLOW_ERR_CONSUMER, "%s", b.data) : 0;
    h5fl_buf_free(&b);
    return rc;
}

/* ---- end_step ---------------------------------------------------------------------------------------- */
/* Rank 0: the queue's verdict. 0 with *publish / *seq set, or an error (the stream may be stopped). */
static int admit(h5flow_writer *w, uint64_t nbytes, int *publish, int64_t *seq, char *reason, size_t rlen)
{
    const h5fl_config *cfg = &w->cfg;
    *publish = 0;
    if (cfg->quota && nbytes > cfg->quota)
        return set_err(w, H5FLOW_ERR_QUOTA, "step %lld holds %llu bytes, more than the staging quota of %llu bytes: "
                       "raise the quota", (long long)w->step, (unsigned long long)nbytes,
                       (unsigned long long)cfg->quota);
    double t0 = h5fl_now(), delay = cfg->poll_min;
    int announced = 0;
    for (;;) {
        int64_t unreleased;
        uint64_t staged;
        char names[1024];
        queue_state(w, &unreleased, &staged, names, sizeof names);
        char why[256] = "";
        if (cfg->queue_limit && unreleased >= cfg->queue_limit)
            snprintf(why, sizeof why, "queue full: %lld unreleased steps, queue_limit %lld", (long long)unreleased,
                     (long long)cfg->queue_limit);
        else if (cfg->quota && staged + nbytes > cfg->quota)
            snprintf(why, sizeof why, "staging quota: %llu unreleased bytes staged + %llu > quota %llu",
                     (unsigned long long)staged, (unsigned long long)nbytes, (unsigned long long)cfg->quota);
        if (!why[0]) {
            *publish = 1;
            *seq = w->next_seq++;
            return 0;
        }
        if (cfg->discard) {
            char t[32], line[512];
            h5fl_repr(w->time, t);
            snprintf(line, sizeof line, "D %lld %s %s\n", (long long)w->step, t, why);
            int e = append(w, line);
            if (e) {
                char msg[H5FL_MSG_MAX];
                snprintf(msg, sizeof msg, "step %lld: recording its discard in %s/index failed: %s", (long long)w->step,
                         w->root, strerror(e));
                stop_stream(w, msg);
                return set_err(w, H5FLOW_ERR_IO, "%s", msg);
            }
            snprintf(reason, rlen, "step %lld discarded (%s)", (long long)w->step, why);
            fprintf(stderr, "h5flow: %s\n", reason);
            return 0;
        }
        int dead = check_dead(w);
        if (dead)
            return dead;
        if (!announced && h5fl_now() - t0 > 5.0) {
            fprintf(stderr, "h5flow: producer waiting for consumers before step %lld (%s; groups: %s)\n",
                    (long long)w->step, why, names[0] ? names : "no consumer group attached yet");
            announced = 1;
        }
        h5fl_sleep(delay);
        delay = delay * 2 < cfg->poll_max ? delay * 2 : cfg->poll_max;
    }
}

/* Rank 0: reserve the step's room on disk (.space); waits under queue_policy="block". 0 or an error (the stream
 * is then stopped). */
static int reserve_room(h5flow_writer *w, uint64_t need)
{
    char space[H5FL_PATH_MAX], parent[H5FL_PATH_MAX];
    path_of(w, space, ".space");
    parent_dir(w, parent);
    double t0 = h5fl_now(), delay = w->cfg.poll_min;
    int announced = 0, reported = 0;
    for (;;) {
        unlink(space);
        int fd = open(space, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        int e = fd < 0 ? errno : posix_fallocate(fd, 0, (off_t)(need ? need : 1));
        if (fd >= 0)
            close(fd);
        if (!e || e == EOPNOTSUPP || e == EINVAL) { /* reserved, or cannot tell: let the write find out */
            if (e)
                unlink(space);
            if (announced)
                fprintf(stderr, "h5flow: room for step %lld in %s after waiting %.1f s; going on\n", (long long)w->step,
                        w->root, h5fl_now() - t0);
            return 0;
        }
        unlink(space);
        char msg[H5FL_MSG_MAX];
        int n = snprintf(msg, sizeof msg, "step %lld was not published: no room for it in %s (it needs about %llu "
                         "bytes, %lld bytes free): %s", (long long)w->step, w->root, (unsigned long long)need,
                         (long long)h5fl_free_bytes(w->root), strerror(e));
        int64_t cap = h5fl_capacity_bytes(w->root);
        if (e == EFBIG || !h5fl_is_full_errno(e)) {
            snprintf(msg + n, sizeof msg - (size_t)n, "; the stream is stopped");
        } else if (cap >= 0 && cap - EMERGENCY_RESERVE - 2 * 64 * 1024 < (int64_t)need) {
            snprintf(msg + n, sizeof msg - (size_t)n, "; the file system can hold at most %lld bytes of steps, less "
                     "than one step: the stream is stopped (waiting does not help; stage on a larger file system or "
                     "write smaller steps)", (long long)(cap > 0 ? cap : 0));
        } else if (w->cfg.discard) {
            snprintf(msg + n, sizeof msg - (size_t)n, "; the stream is stopped (queue_policy='discard' does not wait "
                     "for room; with 'block' the producer waits until there is)");
        } else {
            if (!announced)
                fprintf(stderr, "h5flow: %s; waiting for room (queue_policy='block'): consumers releasing steps or "
                        "files removed from %s let it go on\n", msg, parent);
            announced = 1;
            int64_t u;
            uint64_t s;
            char names[1024];
            queue_state(w, &u, &s, names, sizeof names);
            double bound = 10 * w->cfg.heartbeat > 2.0 ? 10 * w->cfg.heartbeat : 2.0; /* as the Python producer */
            if (!reported && h5fl_now() - t0 >= bound) { /* once per wait: who holds the room */
                reported = 1;
                int64_t free_now = h5fl_free_bytes(w->root), used = cap >= 0 && free_now >= 0 ? cap - free_now : -1;
                int64_t other = used > (int64_t)s ? used - (int64_t)s : 0;
                fprintf(stderr, "h5flow: step %lld has waited %.0f s for room in %s: %s%s%s %lld unreleased steps "
                        "(%llu bytes of payload); %lld of the file system's %lld bytes are in use, %lld of them by "
                        "other files in %s or elsewhere on it and the stream's own (index, reserve, file overhead); "
                        "still waiting (queue_policy='block')\n", (long long)w->step, h5fl_now() - t0, w->root,
                        names[0] ? "consumer groups " : "no consumer group has registered yet: ", names,
                        names[0] ? " hold" : " published steps hold", (long long)u, (unsigned long long)s,
                        (long long)used, (long long)cap, (long long)other, parent);
            }
            h5fl_sleep(delay);
            delay = delay * 2 < (w->cfg.poll_max > 0.05 ? w->cfg.poll_max : 0.05) ? delay * 2
                    : (w->cfg.poll_max > 0.05 ? w->cfg.poll_max : 0.05);
            continue;
        }
        stop_stream(w, msg);
        return set_err(w, H5FLOW_ERR_IO, "%s", msg);
    }
}

int h5flow_end_step(h5flow_writer *w, int *published)
{
    if (published)
        *published = 0;
    int rc = usable(w, "h5flow_end_step");
    if (rc)
        return rc;
    if (!w->in_step)
        rc = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_end_step: no step begun; call h5flow_begin_step first");
    rc = agree(w, rc);
    if (rc)
        return rc;
    w->in_step = 0;
    w->last_step = w->step;
    if (w->local_code)
        snprintf(w->errmsg, sizeof w->errmsg, "step %lld was not published: %s", (long long)w->step, w->local_msg);
    rc = agree(w, w->local_code);
    piece_desc *all = NULL;
    int *owner = NULL, *counts = NULL, *displs = NULL;
    mesh_t *meshes = NULL;
    size_t nmeshes = 0, total = 0;
    h5fl_buf meta = {0};
    if (rc)
        goto out;
    /* 1. every rank's pieces -> the step's metadata, the same on every rank */
    counts = malloc((size_t)w->size * sizeof *counts);
    displs = malloc((size_t)w->size * sizeof *displs);
    int mine = (int)(w->npieces * sizeof(piece_desc)), nok = counts && displs;
    piece_desc *local = malloc(w->npieces ? w->npieces * sizeof *local : 1);
    nok = nok && local;
    MPI_Allreduce(MPI_IN_PLACE, &nok, 1, MPI_INT, MPI_MIN, w->comm);
    if (!nok) {
        free(local);
        rc = set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory gathering the step's metadata", (long long)w->step);
        goto out;
    }
    for (size_t i = 0; i < w->npieces; i++)
        local[i] = w->pieces[i].d;
    MPI_Allgather(&mine, 1, MPI_INT, counts, 1, MPI_INT, w->comm);
    size_t bytes = 0;
    for (int r = 0; r < w->size; r++) {
        displs[r] = (int)bytes;
        bytes += (size_t)counts[r];
    }
    total = bytes / sizeof(piece_desc);
    all = malloc(bytes ? bytes : 1);
    owner = malloc((total ? total : 1) * sizeof *owner);
    nok = all && owner;
    MPI_Allreduce(MPI_IN_PLACE, &nok, 1, MPI_INT, MPI_MIN, w->comm);
    if (!nok) {
        free(local);
        rc = set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory gathering the step's metadata", (long long)w->step);
        goto out;
    }
    MPI_Allgatherv(local, mine, MPI_BYTE, all, counts, displs, MPI_BYTE, w->comm);
    free(local);
    for (int r = 0, i = 0; r < w->size; r++)
        for (size_t k = 0; k < (size_t)counts[r] / sizeof(piece_desc); k++)
            owner[i++] = r;
    drop_empty(w, all, owner, &total, (size_t)displs[w->rank] / sizeof(piece_desc));
    rc = agree(w, build_meshes(w, all, owner, total, &meshes, &nmeshes)); /* deterministic: same on every rank */
    if (rc)
        goto out;
    uint64_t nbytes = 0;
    for (size_t k = 0; k < nmeshes; k++)
        nbytes += meshes[k].rows[meshes[k].nblocks] * TYPES[meshes[k].type].size;
    step_json(w, all, meshes, nmeshes, &meta);
    if (meta.oom) {
        rc = agree(w, set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory", (long long)w->step));
        goto out;
    }
    /* 2. rank 0 admits the step (queue_limit, quota, block/discard) and reserves its room on disk */
    int64_t decision[2] = {0, -1}; /* publish, seq */
    char reason[512] = "";
    rc = 0;
    if (w->rank == 0) {
        int pub = 0;
        rc = admit(w, nbytes, &pub, &decision[1], reason, sizeof reason);
        decision[0] = pub;
        if (!rc && pub) {
            uint64_t files = w->cfg.layout_nn ? (uint64_t)w->size : 1;
            uint64_t need = nbytes + 3 * meta.len + files * (FILE_OVERHEAD + (2 * nmeshes + 2) * DATASET_OVERHEAD);
            rc = reserve_room(w, need);
        }
    }
    sleepy_wait(w);
    rc = agree(w, rc);
    if (rc)
        goto out;
    MPI_Bcast(decision, 2, MPI_INT64_T, 0, w->comm);
    if (!decision[0]) { /* dropped (queue_policy="discard"): every rank gets rank 0's reason */
        free_pieces(w);
        if (w->rank == 0)
            snprintf(w->errmsg, sizeof w->errmsg, "%s", reason);
        MPI_Bcast(w->errmsg, (int)sizeof w->errmsg, MPI_CHAR, 0, w->comm);
        goto out;
    }
    /* 3. write .step-N.tmp/ (data.h5 collectively, meta.json by rank 0) under a heartbeat lease */
    char tmp[H5FL_PATH_MAX], data[H5FL_PATH_MAX + 16], metaf[H5FL_PATH_MAX + 16], final[H5FL_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.step-%09lld.tmp", w->root, (long long)w->step);
    snprintf(final, sizeof final, "%s/step-%09lld", w->root, (long long)w->step);
    snprintf(data, sizeof data, "%s/data.h5", tmp);
    snprintf(metaf, sizeof metaf, "%s/meta.json", tmp);
    double lease = WRITE_LEASE_MIN + 10 * w->cfg.heartbeat + (double)nbytes / WRITE_RATE;
    char what[H5FL_PATH_MAX + 128];
    snprintf(what, sizeof what, "writing step %lld into %s for more than %.0f s", (long long)w->step, tmp, lease);
    hb_lease(&w->hb, lease, what);
    if (w->rank == 0) {
        h5fl_rmtree(tmp);
        if (mkdir(tmp, 0700) != 0)
            rc = set_err(w, H5FLOW_ERR_IO, "rank 0: cannot create %s: %s", tmp, strerror(errno));
        char space[H5FL_PATH_MAX];
        path_of(w, space, ".space");
        unlink(space); /* the room reserved at admission is the step's now */
    }
    rc = agree(w, rc);
    if (!rc) {
        if (w->cfg.layout_nn) {
            snprintf(data, sizeof data, "%s/rank-%05d.h5", tmp, w->rank);
            rc = write_per_rank(w, data, meshes, nmeshes);
        } else {
            rc = write_shared(w, data, all, meshes, nmeshes, meta.data, meta.len);
        }
        if (!rc && w->rank == 0) {
            int e = h5fl_atomic_write(metaf, meta.data, meta.len);
            if (e)
                rc = set_err(w, H5FLOW_ERR_IO, "rank 0: writing %s: %s", metaf, strerror(e));
        }
        sleepy_wait(w);
        rc = agree(w, rc);
    }
    hb_lease(&w->hb, -1, NULL);
    if (rc) {
        char msg[H5FL_MSG_MAX];
        snprintf(msg, sizeof msg, "step %lld was not published: an error while writing it in %s (the step holds %llu "
                 "bytes, %lld bytes free now): %s", (long long)w->step, w->root, (unsigned long long)nbytes,
                 (long long)h5fl_free_bytes(w->root), w->errmsg);
        set_err(w, rc, "%s", msg);
        if (w->rank == 0) {
            h5fl_rmtree(tmp);
            stop_stream(w, msg);
        }
        goto out;
    }
    /* 4. publish: rename, then the P line */
    if (w->rank == 0) {
        char line[256], t[32], at[32];
        int e = rename(tmp, final) != 0 ? errno : 0;
        h5fl_repr(w->time, t);
        h5fl_repr(h5fl_now(), at);
        snprintf(line, sizeof line, "P %lld %lld %s %llu %s\n", (long long)decision[1], (long long)w->step, t,
                 (unsigned long long)nbytes, at);
        if (!e)
            e = append(w, line);
        if (e) {
            h5fl_rmtree(tmp);
            h5fl_rmtree(final); /* no P line: never visible */
            char msg[H5FL_MSG_MAX];
            snprintf(msg, sizeof msg, "step %lld: publishing it in %s failed: %s", (long long)w->step, w->root,
                     strerror(e));
            stop_stream(w, msg);
            rc = set_err(w, H5FLOW_ERR_IO, "%s", msg);
        } else {
            if (w->npub == w->cappub) {
                size_t cap = w->cappub ? 2 * w->cappub : 64;
                published_t *p = realloc(w->pub, cap * sizeof *p);
                if (p) {
                    w->pub = p;
                    w->cappub = cap;
                }
            }
            if (w->npub < w->cappub)
                w->pub[w->npub++] = (published_t){decision[1], w->step, nbytes, 0};
            else
                fprintf(stderr, "h5flow: out of memory: step %lld is not counted against queue_limit\n",
                        (long long)w->step);
        }
    }
    sleepy_wait(w);
    rc = agree(w, rc);
    if (rc)
        goto out;
    free_pieces(w);
    if (published)
        *published = 1;
out:
    if (rc) {
        w->failed = rc;
        free_pieces(w);
    }
    free(all);
    free(owner);
    free(counts);
    free(displs);
    free_meshes(meshes, nmeshes);
    h5fl_buf_free(&meta);
    return rc;
}

/* ---- end --------------------------------------------------------------------------------------------- */
static void leave(h5flow_writer *w)
{
    hb_stop(&w->hb);
    if (w->rank == 0 && w->opened) {
        char p[H5FL_PATH_MAX];
        path_of(w, p, ".space");
        unlink(p);
        path_of(w, p, ".reserve");
        unlink(p);
    }
    release_claim(w);
    free_pieces(w);
    free(w->pieces);
    free(w->pub);
    free(w->known);
    if (w->comm != MPI_COMM_NULL)
        MPI_Comm_free(&w->comm);
    free(w);
}

int h5flow_writer_close(h5flow_writer *w)
{
    if (!w)
        return H5FLOW_OK;
    if (!w->opened || w->failed) {
        int rc = w->failed ? w->failed : H5FLOW_ERR_STOPPED;
        leave(w);
        return rc;
    }
    int rc = 0;
    if (w->in_step)
        rc = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_writer_close: step %lld was begun but not ended; the stream ends "
                     "without an end-of-stream mark (consumers see the producer lost); call h5flow_end_step first",
                     (long long)w->step);
    rc = agree(w, rc);
    if (rc) {
        if (w->rank == 0) /* the writer is freed: say it here */
            fprintf(stderr, "h5flow: error: %s\n", w->errmsg);
        leave(w);
        return rc;
    }
    if (w->rank == 0) {
        char line[64];
        snprintf(line, sizeof line, "E %lld\n", (long long)w->next_seq);
        int e = append(w, line);
        if (e)
            rc = set_err(w, H5FLOW_ERR_IO, "cannot end the stream in %s: %s", w->root, strerror(e));
        int64_t u;
        uint64_t s;
        queue_state(w, &u, &s, NULL, 0); /* garbage collection */
        if (!rc)
            rc = dropped_error(w); /* never silent: the producer's status says steps were lost */
    }
    sleepy_wait(w);
    rc = agree(w, rc);
    if (rc && w->rank == 0) /* the writer is freed: say it here */
        fprintf(stderr, "h5flow: error: %s\n", w->errmsg);
    leave(w);
    return rc;
}

void h5flow_writer_abort(h5flow_writer *w)
{
    if (w)
        leave(w);
}

const char *h5flow_errmsg(const h5flow_writer *w)
{
    if (!w)
        return "h5flow: no writer (h5flow_writer_open could not allocate one: out of memory, or writer was NULL)";
    return w->errmsg;
}
