/* libh5flow, consumer groups: their registration files, and dead_consumer for groups that stopped beating
 * (docs/STREAM.md "Consumer liveness"; staging.py). Rank 0 only. */
#define _DEFAULT_SOURCE
#include "h5flow_internal.h"

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

int load_groups(const h5flow_writer *w, int64_t *released, char *names, size_t n)
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

/* Rank 0, blocked on its consumers before step `step`: fail if its own heartbeat stopped, else apply
 * dead_consumer to every group that stopped beating. 0 to go on waiting, or an error (the stream is then stopped). */
int check_dead(h5flow_writer *w)
{
    int lost = hb_lost_while_waiting(w);
    if (lost)
        return lost;
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
int dropped_error(h5flow_writer *w)
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
