/* The node-local tier: choosing its directory, one cache directory per open file, segment files. */
#include "hfc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define DIR_PREFIX "h5flow-cache."

static int usable_dir(const char *dir, uint64_t *free_bytes)
{
    struct stat sb;
    struct statvfs vs;
    if (!dir || !dir[0] || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode) || access(dir, W_OK | X_OK) != 0)
        return 0;
    if (statvfs(dir, &vs) != 0)
        return 0;
    *free_bytes = (uint64_t)vs.f_bavail * (uint64_t)vs.f_frsize;
    return 1;
}

int hfc_tier_choose(const char *given, const char *source, hfc_tier_t *out)
{
    memset(out, 0, sizeof *out);
    if (given && given[0]) {
        if (!usable_dir(given, &out->free_bytes)) {
            hfc_err("h5flow_cache: the cache directory '%s' (from the %s) is not a writable directory: %s; "
                    "create it or give another with path=... or H5FLOW_CACHE_DIR",
                    given, source, errno ? strerror(errno) : "not a directory");
            return -1;
        }
        snprintf(out->dir, sizeof out->dir, "%s", given);
        out->source = source;
        return 0;
    }
    const char *cands[] = {"/dev/shm", getenv("TMPDIR"), "/var/tmp", "/tmp"};
    for (size_t i = 0; i < sizeof cands / sizeof cands[0]; i++) {
        if (cands[i] && usable_dir(cands[i], &out->free_bytes) && out->free_bytes > 0) {
            snprintf(out->dir, sizeof out->dir, "%s", cands[i]);
            out->source = "automatic";
            /* said once per process: which directory, and how to choose another */
            static atomic_int said = 0;
            if (atomic_exchange(&said, 1) == 0 && !getenv("H5FLOW_CACHE_QUIET"))
                fprintf(stderr,
                        "h5flow_cache: no cache directory given (info path=... or H5FLOW_CACHE_DIR); "
                        "caching in %s (%.1f GiB free)\n",
                        out->dir, (double)out->free_bytes / (1024.0 * 1024.0 * 1024.0));
            return 0;
        }
    }
    hfc_err("h5flow_cache: none of /dev/shm, $TMPDIR, /var/tmp, /tmp is a writable directory; give the cache "
            "directory with path=... in the connector string or H5FLOW_CACHE_DIR");
    return -1;
}

/* this host's name as it appears in cache directory names ('.' and '/' replaced) */
static void host_tag(char *host, size_t n)
{
    host[0] = '\0';
    gethostname(host, n - 1);
    host[n - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/' || *c == '.')
            *c = '_';
}

static int rm_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    char p[2 * PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p)
            unlink(p);
    }
    closedir(d);
    return rmdir(dir);
}

void hfc_tier_sweep(const char *root)
{
    char host[256];
    host_tag(host, sizeof host);
    size_t hl = strlen(host);
    DIR *d = opendir(root);
    if (!d)
        return;
    struct dirent *e;
    char p[2 * PATH_MAX];
    while ((e = readdir(d)) != NULL) {
        /* h5flow-cache.<host>.<pid>.<n> */
        const char *n = e->d_name;
        if (strncmp(n, DIR_PREFIX, strlen(DIR_PREFIX)) != 0)
            continue;
        n += strlen(DIR_PREFIX);
        if (strncmp(n, host, hl) != 0 || n[hl] != '.')
            continue;
        char *end = NULL;
        long pid = strtol(n + hl + 1, &end, 10);
        if (!end || *end != '.' || pid <= 0)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* alive (or not ours to judge) */
        if (snprintf(p, sizeof p, "%s/%s", root, e->d_name) < (int)sizeof p)
            rm_tree(p);
    }
    closedir(d);
}

/* ------------------------------------------------------------------ store */
struct hfc_seg {
    hfc_seg_t *next;
    int fd;
    unsigned id;
    uint64_t size;  /* bytes appended */
    uint64_t live;  /* bytes not yet released */
};

struct hfc_store {
    pthread_mutex_t mu;
    char dir[PATH_MAX + 320];
    uint64_t segment_size;
    unsigned next_id;
    hfc_seg_t *segs; /* all existing segments; the first is the one being appended to */
};

static atomic_uint store_seq = 0;

hfc_store_t *hfc_store_open(const char *root, uint64_t segment_size)
{
    hfc_store_t *st = calloc(1, sizeof *st);
    if (!st) {
        hfc_err("h5flow_cache: out of memory");
        return NULL;
    }
    char host[256];
    host_tag(host, sizeof host);
    snprintf(st->dir, sizeof st->dir, "%s/" DIR_PREFIX "%s.%ld.%u", root, host, (long)getpid(),
             atomic_fetch_add(&store_seq, 1));
    if (mkdir(st->dir, 0700) != 0) {
        hfc_err("h5flow_cache: cannot create the cache directory %s: %s", st->dir, strerror(errno));
        free(st);
        return NULL;
    }
    st->segment_size = segment_size ? segment_size : (64u << 20);
    pthread_mutex_init(&st->mu, NULL);
    return st;
}

const char *hfc_store_dir(const hfc_store_t *st) { return st->dir; }

static void seg_path(const hfc_store_t *st, unsigned id, char *p, size_t n)
{
    snprintf(p, n, "%s/seg.%06u", st->dir, id);
}

static hfc_seg_t *seg_new(hfc_store_t *st)
{
    hfc_seg_t *s = calloc(1, sizeof *s);
    if (!s) {
        hfc_err("h5flow_cache: out of memory");
        return NULL;
    }
    char p[2 * PATH_MAX];
    s->id = st->next_id++;
    seg_path(st, s->id, p, sizeof p);
    s->fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (s->fd < 0) {
        hfc_err("h5flow_cache: cannot create the cache file %s: %s", p, strerror(errno));
        free(s);
        return NULL;
    }
    s->next = st->segs;
    st->segs = s;
    return s;
}

static void seg_delete(hfc_store_t *st, hfc_seg_t *s)
{
    char p[2 * PATH_MAX];
    for (hfc_seg_t **pp = &st->segs; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            break;
        }
    seg_path(st, s->id, p, sizeof p);
    close(s->fd);
    unlink(p);
    free(s);
}

int hfc_store_put(hfc_store_t *st, const void *buf, uint64_t len, hfc_loc_t *loc)
{
    pthread_mutex_lock(&st->mu);
    hfc_seg_t *s = st->segs;
    if (!s || (s->size > 0 && s->size + len > st->segment_size))
        s = seg_new(st);
    int rc = -1;
    if (s) {
        const char *p = buf;
        uint64_t done = 0;
        while (done < len) {
            ssize_t w = pwrite(s->fd, p + done, (size_t)(len - done), (off_t)(s->size + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                hfc_err("h5flow_cache: writing %llu bytes to the cache in %s failed: %s",
                        (unsigned long long)len, st->dir, w < 0 ? strerror(errno) : "no progress");
                break;
            }
            done += (uint64_t)w;
        }
        if (done == len) {
            loc->seg = s;
            loc->off = s->size;
            loc->len = len;
            s->size += len;
            s->live += len;
            rc = 0;
        }
        else if (s->live == 0)
            seg_delete(st, s); /* nothing in it: give the space back */
        else if (ftruncate(s->fd, (off_t)s->size) != 0) {
            /* the partial bytes stay beyond size and are never read */
        }
    }
    pthread_mutex_unlock(&st->mu);
    return rc;
}

int hfc_store_get(hfc_store_t *st, const hfc_loc_t *loc, void *buf)
{
    (void)st;
    char *p = buf;
    uint64_t done = 0;
    while (done < loc->len) {
        ssize_t r = pread(loc->seg->fd, p + done, (size_t)(loc->len - done), (off_t)(loc->off + done));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            hfc_err("h5flow_cache: reading %llu cached bytes back from %s failed: %s",
                    (unsigned long long)loc->len, st->dir, r < 0 ? strerror(errno) : "file is short");
            return -1;
        }
        done += (uint64_t)r;
    }
    return 0;
}

const void *hfc_store_map(hfc_store_t *st, const hfc_loc_t *loc, hfc_view_t *view)
{
    (void)st;
    view->base = NULL;
    view->len = 0;
    if (loc->len == 0)
        return NULL;
    long page = sysconf(_SC_PAGESIZE);
    uint64_t start = page > 0 ? loc->off / (uint64_t)page * (uint64_t)page : 0;
    size_t len = (size_t)(loc->off - start + loc->len);
    /* read-only and populated at once: the pages are in memory (tmpfs) or were just written (page cache) */
    void *base = mmap(NULL, len, PROT_READ, MAP_SHARED | MAP_POPULATE, loc->seg->fd, (off_t)start);
    if (base == MAP_FAILED)
        return NULL;
    view->base = base;
    view->len = len;
    return (const char *)base + (loc->off - start);
}

void hfc_store_unmap(hfc_view_t *view)
{
    if (view->base)
        munmap(view->base, view->len);
    view->base = NULL;
    view->len = 0;
}

void hfc_store_release(hfc_store_t *st, const hfc_loc_t *loc)
{
    pthread_mutex_lock(&st->mu);
    hfc_seg_t *s = loc->seg;
    s->live -= loc->len;
    if (s->live == 0) {
        if (s == st->segs) { /* the segment being appended to: start it over */
            if (ftruncate(s->fd, 0) == 0)
                s->size = 0;
        }
        else
            seg_delete(st, s);
    }
    pthread_mutex_unlock(&st->mu);
}

uint64_t hfc_store_nsegments(hfc_store_t *st)
{
    pthread_mutex_lock(&st->mu);
    uint64_t n = 0;
    for (hfc_seg_t *s = st->segs; s; s = s->next)
        n++;
    pthread_mutex_unlock(&st->mu);
    return n;
}

void hfc_store_forget(hfc_store_t *st)
{
    if (!st)
        return;
    while (st->segs) {
        hfc_seg_t *s = st->segs;
        st->segs = s->next;
        close(s->fd);
        free(s);
    }
    pthread_mutex_destroy(&st->mu);
    free(st);
}

int hfc_store_close(hfc_store_t *st)
{
    if (!st)
        return 0;
    while (st->segs)
        seg_delete(st, st->segs);
    int rc = rmdir(st->dir);
    if (rc != 0)
        hfc_err("h5flow_cache: cannot remove the cache directory %s: %s", st->dir, strerror(errno));
    pthread_mutex_destroy(&st->mu);
    free(st);
    return rc;
}
