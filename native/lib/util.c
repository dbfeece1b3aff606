/* libh5flow internals: strings, files, JSON scraps. */
#define _DEFAULT_SOURCE
#include "h5flow_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

void h5fl_buf_printf(h5fl_buf *b, const char *fmt, ...)
{
    if (b->oom)
        return;
    for (;;) {
        size_t room = b->cap - b->len;
        va_list ap;
        va_start(ap, fmt);
        int n = b->data ? vsnprintf(b->data + b->len, room, fmt, ap) : -1;
        va_end(ap);
        if (n >= 0 && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t need = b->len + (n > 0 ? (size_t)n : 0) + 1;
        size_t cap = b->cap ? b->cap : 256;
        while (cap < need)
            cap *= 2;
        char *p = realloc(b->data, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->data = p;
        b->cap = cap;
    }
}

void h5fl_buf_free(h5fl_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->oom = 0;
}

void h5fl_repr(double x, char out[32])
{
    for (int p = 1; p <= 17; p++) {
        snprintf(out, 32, "%.*g", p, x);
        if (strtod(out, NULL) == x)
            break;
    }
    if (!strpbrk(out, ".eEni"))
        strcat(out, ".0");
}

double h5fl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void h5fl_sleep(double seconds)
{
    if (seconds <= 0)
        return;
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int h5fl_rmtree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : errno;
    if (!S_ISDIR(st.st_mode))
        return unlink(path) == 0 || errno == ENOENT ? 0 : errno;
    DIR *d = opendir(path);
    if (!d)
        return errno;
    int rc = 0;
    struct dirent *e;
    char child[H5FL_PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (snprintf(child, sizeof child, "%s/%s", path, e->d_name) >= (int)sizeof child) {
            rc = ENAMETOOLONG;
            continue;
        }
        int r = h5fl_rmtree(child);
        if (r && !rc)
            rc = r;
    }
    closedir(d);
    if (rmdir(path) != 0 && errno != ENOENT && !rc)
        rc = errno;
    return rc;
}

int h5fl_read_file(const char *path, char **text, size_t limit)
{
    *text = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return ENOMEM;
    }
    for (;;) {
        if (len == cap) {
            if (cap >= limit) {
                free(buf);
                close(fd);
                return EFBIG;
            }
            cap *= 2;
            char *p = realloc(buf, cap + 1);
            if (!p) {
                free(buf);
                close(fd);
                return ENOMEM;
            }
            buf = p;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            free(buf);
            close(fd);
            return e;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    *text = buf;
    return 0;
}

static int write_all(int fd, const char *p, size_t len)
{
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return ENOSPC;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int h5fl_atomic_write(const char *path, const char *text, size_t len)
{
    char tmp[H5FL_PATH_MAX];
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    if (snprintf(tmp, sizeof tmp, "%.*s.%s.%ld.tmp", dirlen, path, slash ? slash + 1 : path, (long)getpid()) >=
        (int)sizeof tmp)
        return ENAMETOOLONG;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    int rc = write_all(fd, text, len);
    if (!rc && fsync(fd) != 0)
        rc = errno;
    if (close(fd) != 0 && !rc)
        rc = errno;
    if (!rc && rename(tmp, path) != 0)
        rc = errno;
    if (rc)
        unlink(tmp);
    return rc;
}

int h5fl_append_line(const char *path, const char *line)
{
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return errno;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return e;
    }
    size_t len = strlen(line);
    int rc = 0;
    ssize_t n;
    do {
        n = write(fd, line, len); /* one write: readers never see half a line */
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        rc = errno;
    else if ((size_t)n != len)
        rc = ENOSPC;
    if (!rc && fsync(fd) != 0)
        rc = errno;
    if (rc && ftruncate(fd, st.st_size) != 0) {
        /* nothing more to do: the reader skips nothing, but the error is reported */
    }
    close(fd);
    return rc;
}

int h5fl_is_full_errno(int e)
{
    return e == ENOSPC || e == EDQUOT || e == EFBIG;
}

int64_t h5fl_free_bytes(const char *path)
{
    struct statvfs st;
    if (statvfs(path, &st) != 0)
        return -1;
    return (int64_t)st.f_bavail * (int64_t)st.f_frsize;
}

int64_t h5fl_capacity_bytes(const char *path)
{
    struct statvfs st;
    if (statvfs(path, &st) != 0)
        return -1;
    return (int64_t)(st.f_blocks - (st.f_bfree - st.f_bavail)) * (int64_t)st.f_frsize;
}

static const char *json_value(const char *text, const char *key)
{
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(text, pat);
    if (!p)
        return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    if (*p != ':')
        return NULL;
    p++;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

int h5fl_json_str(const char *text, const char *key, char *out, size_t n)
{
    const char *p = json_value(text, key);
    if (!p || *p != '"')
        return -1;
    p++;
    const char *end = strchr(p, '"');
    if (!end || memchr(p, '\\', (size_t)(end - p)) || (size_t)(end - p) >= n)
        return -1;
    memcpy(out, p, (size_t)(end - p));
    out[end - p] = '\0';
    return 0;
}

int h5fl_json_num(const char *text, const char *key, double *out)
{
    const char *p = json_value(text, key);
    if (!p)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(p, &end);
    if (end == p || errno)
        return -1;
    *out = v;
    return 0;
}

void h5fl_json_escape(h5fl_buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            h5fl_buf_printf(b, "\\%c", c);
        else if (c >= 0x20)
            h5fl_buf_printf(b, "%c", c);
    }
}

uint32_t h5fl_crc32(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}
