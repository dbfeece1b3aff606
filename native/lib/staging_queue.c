/* libh5flow, the queue and the room on disk: garbage collection of released steps, the queue's verdict
 * (queue_limit, quota, block/discard) and the reservation of a step's room (.space). Rank 0 only. */
#define _DEFAULT_SOURCE
#include "h5flow_internal.h"

/* Rank 0: collect garbage, then (unreleased published steps, their bytes still staged). */
void queue_state(h5flow_writer *w, int64_t *unreleased, uint64_t *staged, char *names, size_t n)
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


/* ---- end_step ---------------------------------------------------------------------------------------- */
/* Rank 0: the queue's verdict. 0 with *publish / *seq set, or an error (the stream may be stopped). */
int admit(h5flow_writer *w, uint64_t nbytes, int *publish, int64_t *seq, char *reason, size_t rlen)
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
int reserve_room(h5flow_writer *w, uint64_t need)
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
            int lost = hb_lost_while_waiting(w);
            if (lost)
                return lost;
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
