/* libh5flow heartbeats: a thread refreshing hb/<rank> while the writer makes progress, with a lease for
 * the long calls (transports/hdf5/heartbeat.py runs the same beat in a helper process). */
#define _DEFAULT_SOURCE
#include "h5flow_internal.h"

/* ---- heartbeat ------------------------------------------------------------------------------------- */
/* "" while hb/<rank> is still the file hb_start made, else what became of it. The beat goes to the open file
 * (futimens), so a file put at that path between this check and the beat is never touched either. */
static const char *hb_lost(const heartbeat_t *hb)
{
    struct stat st;
    if (stat(hb->path, &st) != 0)
        return errno == ENOENT || errno == ENOTDIR ? "was removed" : ""; /* other errors: try again next beat */
    if (st.st_dev != hb->dev || st.st_ino != hb->ino)
        return "was replaced by another file";
    return "";
}

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
            const char *lost = hb_lost(hb);
            if (*lost) { /* a user, a cleanup tool or a new run took the file: stop, keep the reason */
                snprintf(hb->gone, sizeof hb->gone, "its heartbeat file %s %s", hb->path, lost);
                fprintf(stderr, "h5flow: heartbeat thread (pid %ld): %s; it stops beating\n", (long)getpid(),
                        hb->gone);
                break;
            }
            if (stalled) {
                unlink(stalled_path);
                stalled = 0;
            }
            futimens(hb->fd, NULL);
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

int hb_start(h5flow_writer *w)
{
    heartbeat_t *hb = &w->hb;
    if (snprintf(hb->path, sizeof hb->path, "%s/hb/%d", w->root, w->rank) >= (int)sizeof hb->path)
        return set_err(w, H5FLOW_ERR_CONFIG, "rank %d: the heartbeat path in %s is too long", w->rank, w->root);
    char host[256] = "unknown";
    gethostname(host, sizeof host - 1);
    char text[300];
    int n = snprintf(text, sizeof text, "%s %ld\n", host, (long)getpid());
    hb->fd = open(hb->path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    struct stat st;
    if (hb->fd < 0 || write(hb->fd, text, (size_t)n) != (ssize_t)n || fstat(hb->fd, &st) != 0) {
        int e = errno;
        if (hb->fd >= 0)
            close(hb->fd);
        hb->fd = -1;
        return set_err(w, H5FLOW_ERR_IO, "rank %d: cannot start its heartbeat in %s/hb: %s", w->rank, w->root,
                       strerror(e));
    }
    hb->dev = st.st_dev;
    hb->ino = st.st_ino;
    hb->gone[0] = 0;
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
        close(hb->fd);
        hb->fd = -1;
        pthread_mutex_destroy(&hb->mu);
        pthread_cond_destroy(&hb->cv);
        return set_err(w, H5FLOW_ERR_IO, "rank %d: cannot start its heartbeat thread: %s", w->rank, strerror(e));
    }
    hb->started = 1;
    return 0;
}

void hb_lease(heartbeat_t *hb, double seconds, const char *what)
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

void hb_stop(heartbeat_t *hb)
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
    close(hb->fd);
    hb->fd = -1;
    hb->started = 0;
}

/* The writer's error when its heartbeat thread stopped beating its file (0 while it beats): this process goes
 * on, but its peers will report it lost, so the producer must not carry on as if it were seen. */
int hb_failure(h5flow_writer *w)
{
    heartbeat_t *hb = &w->hb;
    if (!hb->started)
        return 0;
    char gone[sizeof hb->gone];
    pthread_mutex_lock(&hb->mu);
    snprintf(gone, sizeof gone, "%s", hb->gone);
    pthread_mutex_unlock(&hb->mu);
    if (!gone[0])
        return 0;
    return set_err(w, H5FLOW_ERR_IO, "rank %d: %s, so its heartbeat thread stopped; hb/%d is no longer refreshed, so "
                   "the stream's peers report this process lost", w->rank, gone, w->rank);
}

/* Rank 0 waiting (for its consumers, for room on disk): its own heartbeat stopped, so its consumers report it
 * lost and will never release the steps it waits for; stop the stream with the reason (0 while it beats). */
int hb_lost_while_waiting(h5flow_writer *w)
{
    int rc = hb_failure(w);
    if (rc)
        stop_stream(w, w->errmsg);
    return rc;
}
