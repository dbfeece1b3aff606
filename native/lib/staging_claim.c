/* libh5flow, the staging directory's owner: the claim (flock on <root>/owner, transports/_claim.py) and the
 * refusal to take over a run whose producer ranks still beat (staging.py). Rank 0 only. */
#define _DEFAULT_SOURCE
#include "h5flow_internal.h"

/* ---- the staging directory (rank 0) -------------------------------------------------------------- */
void path_of(const h5flow_writer *w, char out[H5FL_PATH_MAX], const char *name)
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
int claim(h5flow_writer *w)
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

void release_claim(h5flow_writer *w)
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
int refuse_if_live(h5flow_writer *w)
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
