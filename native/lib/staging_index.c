/* libh5flow, the staging directory's files: a new run's reset, index lines (P/D/E/X, one O_APPEND write each)
 * and the X line that stops the stream (staging.py). Rank 0 only. */
#define _DEFAULT_SOURCE
#include "h5flow_internal.h"

/* Remove an earlier run's files; recreate hb/, consumers/, an empty index and the emergency reserve. */
int reset(h5flow_writer *w)
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
int append(h5flow_writer *w, const char *line)
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
void stop_stream(h5flow_writer *w, const char *reason)
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
