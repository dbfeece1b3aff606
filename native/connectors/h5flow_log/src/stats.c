/* h5flow_log — the writer side of per-write statistics and the user data functions (stats.h;
 * docs/FORMAT.md, "Statistics"): each write's record computed with the accumulator (stats_acc.c) and
 * buffered into the writer's @stats sidecar. The query over the records is stats_json.c. */
#include "stats_acc.h"

#include "h5flow_udf.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SBUF_FLUSH (1u << 20)  /* buffered records past this are written at the next index flush */
#define UDF_MSG_MAX 512u       /* bytes of a UDF failure message kept */

struct h5flow_udf_result {
    unsigned n;
    char key[H5FLOW_UDF_KEYS_MAX][H5FLOW_UDF_KEY_MAX + 1];
    double val[H5FLOW_UDF_KEYS_MAX];
};

typedef struct h5fl_stats_w {
    int fd;
    char *path;
    uint64_t end;  /* bytes of the sidecar written */
    bool broken;   /* a write failed: no more records from this writer (readers use the data) */
    uint8_t *buf;
    size_t len, cap;
    int kind;
    size_t esize;
    /* the user data function (@udf), loaded at the first write */
    bool udf_tried;
    char *udf_lib, *udf_sym;
    void *lib;
    h5flow_udf_fn fn;
    void (*free_fn)(void *);
    void *state;
    char *udf_err; /* why the function could not be loaded (every write's result says it) */
    /* the fused passes over the write being appended (h5fl_stats_arm) */
    bool armed;
    uint64_t want, seen, hseen; /* bytes of the write; seen by the first pass; by the histogram */
    struct acc *pend;
    h5fl_bytecount_t *bc; /* 1-byte integers: the count table of the write being appended (pend->bc) */
} h5fl_stats_w_t;

/* Linear element index of the k-th element of a selection given as (start, len) runs. */
static uint64_t run_pos(const uint8_t *runs, uint64_t nruns, uint64_t k)
{
    for (uint64_t i = 0; i < nruns; i++) {
        uint64_t s = h5fl_get_u64(runs + i * 16), l = h5fl_get_u64(runs + i * 16 + 8);
        if (k < l)
            return s + k;
        k -= l;
    }
    return UINT64_MAX;
}

/* ---------------------------------------------------------------- the writer side */

static void sw_free(h5fl_stats_w_t *s)
{
    if (!s)
        return;
    if (s->free_fn && s->state)
        s->free_fn(s->state);
    /* the library stays loaded: code of it may still be referenced (atexit handlers, thread keys) */
    if (s->fd >= 0)
        close(s->fd);
    free(s->path);
    free(s->buf);
    free(s->udf_lib);
    free(s->udf_sym);
    free(s->udf_err);
    free(s->pend);
    free(s->bc);
    free(s);
}

void h5fl_stats_close(h5fl_writer_t *w)
{
    sw_free(w->stats);
    w->stats = NULL;
}

static int spec_from_plist(hid_t pl, const char *what, char **lib, char **sym);

static int read_udf_file(const char *dir, char **lib, char **sym)
{
    char *p = h5fl_join(dir, H5FL_UDF_FILE);
    void *b = NULL;
    size_t l = 0;
    *lib = *sym = NULL;
    if (!p)
        return -1;
    struct stat st;
    if (stat(p, &st) != 0) {
        free(p);
        return 0; /* no user data function */
    }
    int rc = h5fl_read_file(p, &b, &l);
    free(p);
    if (rc != 0)
        return -1;
    static const char head[] = "h5flow_log udf 1\n";
    char *s = b;
    char *nl1 = l > sizeof head - 1 ? memchr(s + sizeof head - 1, '\n', l - (sizeof head - 1)) : NULL;
    char *nl2 = nl1 ? memchr(nl1 + 1, '\n', l - (size_t)(nl1 + 1 - s)) : NULL;
    if (l < sizeof head - 1 || memcmp(s, head, sizeof head - 1) != 0 || !nl2 || nl2 != s + l - 1) {
        free(b);
        h5fl_err("the user data function file %s/%s is malformed (expected \"h5flow_log udf 1\\nLIBRARY\\n"
                 "SYMBOL\\n\")",
                 dir, H5FL_UDF_FILE);
        return -1;
    }
    *nl1 = *nl2 = 0;
    *lib = h5fl_strdup(s + sizeof head - 1);
    *sym = h5fl_strdup(nl1 + 1);
    free(b);
    return *lib && *sym ? 0 : -1;
}

void h5fl_stats_open(h5fl_dset_t *d, h5fl_writer_t *w)
{
    const char *env = getenv("H5FLOW_LOG_STATS"); /* "0": no statistics records (docs/FORMAT.md) */
    if (env && strcmp(env, "0") == 0)
        return;
    size_t esize;
    int kind = d->vstr || d->blob ? K_NONE : h5fl_kind_of(d->type, &esize);
    char *lib = NULL, *sym = NULL;
    char udf_load_err[600] = "";
    /* the function given when this process opened the dataset (access list) wins over the dataset's */
    int st = spec_from_plist(d->dapl, "dataset access", &lib, &sym);
    if (st < 0 || (st == 0 && read_udf_file(d->o.dir, &lib, &sym) != 0)) {
        /* recorded as the failure of every write's function: the writes still land */
        snprintf(udf_load_err, sizeof udf_load_err, "%s", h5fl_err_msg()[0] ? h5fl_err_msg() : "out of memory");
        h5fl_err_clear();
        free(lib);
        free(sym);
        lib = sym = NULL;
    }
    if (kind == K_NONE && !lib && !udf_load_err[0]) {
        free(sym);
        return; /* nothing to record for this type */
    }
    h5fl_stats_w_t *s = calloc(1, sizeof *s);
    char name[64];
    snprintf(name, sizeof name, H5FL_STATS_PREFIX "%llu.%u", (unsigned long long)w->epoch, w->id);
    if (!s || !(s->path = h5fl_join(d->o.dir, name))) {
        free(s);
        free(lib);
        free(sym);
        h5fl_err_clear();
        return;
    }
    s->fd = -1;
    s->kind = kind;
    s->esize = kind == K_NONE ? 0 : esize;
    s->udf_lib = lib;
    s->udf_sym = sym;
    if (udf_load_err[0])
        s->udf_err = h5fl_strdup(udf_load_err);
    s->fd = h5fl_open_file(s->path, O_RDWR | O_CREAT, 0644);
    void *b = NULL;
    size_t l = 0;
    if (s->fd < 0 || h5fl_read_file(s->path, &b, &l) != 0) {
        h5fl_err_clear();
        sw_free(s);
        return; /* no statistics from this writer: readers compute from the data */
    }
    /* Reopened in the same epoch: continue after the last complete record (a torn tail is cut). */
    size_t v = h5fl_stats_valid_prefix(b, l);
    free(b);
    if (v != l && ftruncate(s->fd, (off_t)v) != 0) {
        sw_free(s);
        return;
    }
    s->end = v;
    w->stats = s;
}

static void udf_load(h5fl_stats_w_t *s)
{
    s->udf_tried = true;
    if (!s->udf_lib)
        return;
    char msg[UDF_MSG_MAX];
    dlerror();
    void *h = dlopen(s->udf_lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(msg, sizeof msg, "cannot load the user data function library %s: %s", s->udf_lib,
                 e ? e : "dlopen failed");
        s->udf_err = h5fl_strdup(msg);
        return;
    }
    void *f = dlsym(h, s->udf_sym);
    if (!f) {
        snprintf(msg, sizeof msg, "the library %s has no symbol '%s' (the user data function)", s->udf_lib,
                 s->udf_sym);
        s->udf_err = h5fl_strdup(msg);
        return;
    }
    char fname[H5FLOW_UDF_SPEC_MAX + 8];
    snprintf(fname, sizeof fname, "%s_free", s->udf_sym);
    s->lib = h;
    /* POSIX: a function pointer read from dlsym's object pointer */
    memcpy(&s->fn, &f, sizeof f);
    void *ff = dlsym(h, fname);
    if (ff)
        memcpy(&s->free_fn, &ff, sizeof ff);
}

static int udf_put(h5flow_udf_result_t *res, const char *key, double value)
{
    size_t kl = key ? strlen(key) : 0;
    if (kl == 0 || kl > H5FLOW_UDF_KEY_MAX)
        return -1;
    for (unsigned i = 0; i < res->n; i++)
        if (strcmp(res->key[i], key) == 0) {
            res->val[i] = value;
            return 0;
        }
    if (res->n >= H5FLOW_UDF_KEYS_MAX)
        return -1;
    memcpy(res->key[res->n], key, kl + 1);
    res->val[res->n++] = value;
    return 0;
}

static bool sbuf_room(h5fl_stats_w_t *s, size_t need)
{
    if (s->len + need <= s->cap)
        return true;
    size_t n = s->cap ? s->cap : 4096;
    while (n < s->len + need)
        n *= 2;
    uint8_t *nb = realloc(s->buf, n);
    if (!nb)
        return false;
    s->buf = nb;
    s->cap = n;
    return true;
}

void h5fl_stats_arm(h5fl_dset_t *d, uint64_t nbytes)
{
    h5fl_stats_w_t *s = d->w ? d->w->stats : NULL;
    if (!s)
        return;
    s->armed = false;
    if (s->broken || s->kind == K_NONE || nbytes % s->esize ||
        (!s->pend && !(s->pend = malloc(sizeof *s->pend))))
        return; /* h5fl_stats_note computes what it needs from the data */
    memset(s->pend, 0, sizeof *s->pend);
    s->pend->kind = s->kind;
    s->pend->esize = s->esize;
    if (s->esize == 1 && !s->bc && (s->bc = malloc(sizeof *s->bc)))
        h5fl_bc_init(s->bc);
    if (s->esize == 1 && s->bc) { /* (without one: the scans) */
        h5fl_bc_reset(s->bc);    /* clears only the rows the last write used */
        s->pend->bc = s->bc;
    }
    s->want = nbytes;
    s->seen = s->hseen = 0;
    s->armed = true;
}

bool h5fl_stats_armed(const h5fl_writer_t *w) { return w->stats && w->stats->armed; }

void h5fl_stats_scan(h5fl_writer_t *w, const void *p, size_t len)
{
    h5fl_stats_w_t *s = w->stats;
    if (!s || !s->armed)
        return;
    if (s->hseen || len > s->want - s->seen || len % s->esize) {
        s->armed = false; /* not the order this was made for: computed from the data instead */
        return;
    }
    h5fl_acc_scan(s->pend, p, len / s->esize, s->seen / s->esize);
    s->seen += len;
    if (s->seen == s->want)
        s->pend->has_hist = hist_ok(s->pend);
}

void h5fl_stats_hist(h5fl_writer_t *w, const void *p, size_t len)
{
    h5fl_stats_w_t *s = w->stats;
    if (!s || !s->armed)
        return;
    if (s->seen != s->want || len > s->want - s->hseen || len % s->esize) {
        s->armed = false;
        return;
    }
    if (s->pend->has_hist)
        h5fl_hist_scan(s->pend, p, len / s->esize);
    s->hseen += len;
}

void h5fl_stats_note(h5fl_dset_t *d, const h5fl_record_t *r, const runs_ctx_t *runs, const void *data)
{
    h5fl_writer_t *w = d->w;
    h5fl_stats_w_t *s = w ? w->stats : NULL;
    bool armed = s && s->armed;
    if (s)
        s->armed = false; /* what the fused passes computed belongs to this write or to none */
    if (!s || s->broken || (r->flags & H5FL_REC_FILL) || !(r->flags & H5FL_REC_DCRC) || !data)
        return;
    uint64_t n = runs->elems;
    acc_t a = {0};
    a.kind = s->kind;
    a.esize = s->esize;
    h5fl_bytecount_t bc; /* 1-byte integers not computed by the fused passes */
    /* a filtered write's record holds its filtered length; `data` is its bytes before filtering */
    uint64_t raw = (r->flags & H5FL_REC_FILTER) ? r->raw : r->nbytes;
    bool fused =
        armed && !(r->flags & H5FL_REC_FILTER) && s->seen == raw && (s->hseen == 0 || s->hseen == raw);
    if (a.kind != K_NONE && n * a.esize == raw && fused) {
        a = *s->pend; /* the first pass ran with the checksum; the histogram too if the write went out in chunks */
        if (a.has_hist && s->hseen == 0)
            h5fl_hist_scan(&a, data, n);
    } else if (a.kind != K_NONE && n * a.esize == raw) {
        if (a.esize == 1) {
            h5fl_bc_init(&bc);
            a.bc = &bc;
        }
        h5fl_acc_scan(&a, data, n, 0);
        if ((a.has_hist = hist_ok(&a)))
            h5fl_hist_scan(&a, data, n);
    } else {
        a.kind = K_NONE;
    }
    h5fl_bytes_settle(&a);
    /* the user data function */
    int ustat = UDF_NONE;
    char umsg[UDF_MSG_MAX] = "";
    h5flow_udf_result_t *res = NULL;
    if (s->udf_lib || s->udf_err) {
        if (!s->udf_tried && !s->udf_err)
            udf_load(s);
        if (s->udf_err) {
            ustat = UDF_FAILED;
            snprintf(umsg, sizeof umsg, "%s", s->udf_err);
        } else if (!(res = calloc(1, sizeof *res))) {
            ustat = UDF_FAILED;
            snprintf(umsg, sizeof umsg, "out of memory for the user data function's result");
        } else {
            size_t es;
            int k = h5fl_kind_of(d->type, &es);
            h5flow_udf_write_t uw = {0};
            uw.abi_version = H5FLOW_UDF_ABI_VERSION;
            uw.dataset = d->o.path;
            uw.type = d->type;
            uw.kind = k == K_INT ? H5FLOW_UDF_INT : k == K_UINT ? H5FLOW_UDF_UINT : k == K_FLOAT ? H5FLOW_UDF_FLOAT : H5FLOW_UDF_OTHER;
            uw.esize = d->esize;
            uw.buf = data;
            uw.nelems = n;
            uw.rank = (int)r->rank;
            uw.dims = r->dims;
            uw.nruns = runs->n;
            uint64_t *rv = runs->n ? malloc(runs->n * 16) : NULL;
            for (size_t i = 0; rv && i < runs->n * 2; i++)
                rv[i] = h5fl_get_u64(runs->buf + i * 8);
            uw.runs = rv;
            uw.writer = w->id;
            uw.state = &s->state;
            char emsg[UDF_MSG_MAX] = "";
            if (runs->n && !rv) {
                ustat = UDF_FAILED;
                snprintf(umsg, sizeof umsg, "out of memory for the user data function's runs");
            } else if (s->fn(&uw, res, udf_put, emsg, sizeof emsg) != 0) {
                ustat = UDF_FAILED;
                emsg[sizeof emsg - 1] = 0;
                snprintf(umsg, sizeof umsg, "%s returned an error: %s", s->udf_sym,
                         emsg[0] ? emsg : "(no message)");
            } else {
                ustat = UDF_OK;
            }
            free(rv);
        }
    }
    if (a.kind == K_NONE && ustat == UDF_NONE) {
        free(res);
        return;
    }
    size_t ulen = 0;
    if (ustat == UDF_OK) {
        ulen = 4;
        for (unsigned i = 0; i < res->n; i++)
            ulen += 2 + strlen(res->key[i]) + 8;
    } else if (ustat == UDF_FAILED) {
        ulen = strlen(umsg);
    }
    unsigned nbins = a.has_hist ? H5FL_STATS_BINS : 0;
    size_t tot = SREC_HDR + 8 * (size_t)r->rank + 8 * (size_t)nbins + ulen + 4;
    if (!sbuf_room(s, tot)) {
        free(res);
        return; /* no record: readers compute this write's numbers from its data */
    }
    uint8_t *p = s->buf + s->len;
    memset(p, 0, SREC_HDR);
    h5fl_put_u32(p, H5FL_STATS_MAGIC);
    h5fl_put_u32(p + 4, (uint32_t)tot);
    h5fl_put_u64(p + 8, r->seq.epoch);
    h5fl_put_u64(p + 16, r->seq.order);
    h5fl_put_u64(p + 24, r->data_off + r->nbytes);
    h5fl_put_u32(p + 32, r->dcrc);
    h5fl_put_u32(p + 36, (uint32_t)a.kind | ((uint32_t)a.esize << 8));
    h5fl_put_u64(p + 40, n);
    h5fl_put_u64(p + 48, a.nan);
    h5fl_put_u64(p + 56, a.min.u);
    h5fl_put_u64(p + 64, a.max.u);
    sval_t sum = {.f = acc_sum(&a)};
    h5fl_put_u64(p + 72, sum.u);
    h5fl_put_u64(p + 80, a.any ? run_pos(runs->buf, runs->n, a.kmin) : UINT64_MAX);
    h5fl_put_u64(p + 88, a.any ? run_pos(runs->buf, runs->n, a.kmax) : UINT64_MAX);
    uint64_t first = UINT64_MAX, last = 0;
    for (size_t i = 0; i < runs->n; i++) {
        uint64_t st = h5fl_get_u64(runs->buf + i * 16), ln = h5fl_get_u64(runs->buf + i * 16 + 8);
        if (st < first)
            first = st;
        if (ln && st + ln - 1 > last)
            last = st + ln - 1;
    }
    h5fl_put_u64(p + 96, first);
    h5fl_put_u64(p + 104, last);
    h5fl_put_u32(p + 112, r->rank);
    h5fl_put_u32(p + 116, nbins);
    h5fl_put_u32(p + 120, (uint32_t)ustat);
    h5fl_put_u32(p + 124, (uint32_t)ulen);
    uint8_t *q = p + SREC_HDR;
    for (unsigned k = 0; k < r->rank; k++, q += 8)
        h5fl_put_u64(q, r->dims[k]);
    for (unsigned k = 0; k < nbins; k++, q += 8)
        h5fl_put_u64(q, a.hist[k]);
    if (ustat == UDF_OK) {
        h5fl_put_u32(q, res->n);
        q += 4;
        for (unsigned i = 0; i < res->n; i++) {
            size_t kl = strlen(res->key[i]);
            q[0] = (uint8_t)(kl & 0xFF);
            q[1] = (uint8_t)(kl >> 8);
            memcpy(q + 2, res->key[i], kl);
            sval_t v = {.f = res->val[i]};
            h5fl_put_u64(q + 2 + kl, v.u);
            q += 2 + kl + 8;
        }
    } else if (ustat == UDF_FAILED) {
        memcpy(q, umsg, ulen);
        q += ulen;
    }
    h5fl_put_u32(q, h5fl_crc32c(0, p, tot - 4));
    s->len += tot;
    free(res);
    if (s->len >= SBUF_FLUSH && h5fl_writer_flush(w, false) != 0)
        h5fl_err_clear(); /* the write itself is in the buffers; its flush error comes back at close */
}

void h5fl_stats_flush(h5fl_writer_t *w, bool sync)
{
    h5fl_stats_w_t *s = w->stats;
    if (!s || !s->len)
        return;
    if (s->broken) {
        s->len = 0;
        return;
    }
    if (h5fl_pwrite_all(s->fd, s->buf, s->len, s->end) != 0 || (sync && fdatasync(s->fd) != 0)) {
        /* Statistics are an optimisation: a failed write (full disk) does not fail the data write. Cut
         * what may have reached the file; later writes get no records (readers use the data). */
        h5fl_err_clear();
        while (ftruncate(s->fd, (off_t)s->end) != 0 && errno == EINTR)
            ;
        s->broken = true;
        s->len = 0;
        return;
    }
    s->end += s->len;
    s->len = 0;
}

/* The user data function named in property list `pl` (property H5FLOW_UDF_PROP): 1 and *lib, *sym
 * (malloc'd; the library path made absolute), 0 if the list names none, -1 with an error recorded. */
static int spec_from_plist(hid_t pl, const char *what, char **lib, char **sym)
{
    *lib = *sym = NULL;
    if (pl < 0 || pl == H5P_DEFAULT)
        return 0;
    htri_t ex = H5Pexist(pl, H5FLOW_UDF_PROP);
    if (ex <= 0)
        return 0;
    char spec[H5FLOW_UDF_SPEC_MAX + 1];
    memset(spec, 0, sizeof spec);
    size_t sz = 0;
    if (H5Pget_size(pl, H5FLOW_UDF_PROP, &sz) < 0 || sz != H5FLOW_UDF_SPEC_MAX || H5Pget(pl, H5FLOW_UDF_PROP, spec) < 0) {
        h5fl_err("the %s property %s must hold %u bytes \"LIBRARY\\nSYMBOL\" (set it with h5flow_udf_set() of "
                 "h5flow_udf.h or h5flow.stats.set_udf())",
                 what, H5FLOW_UDF_PROP, H5FLOW_UDF_SPEC_MAX);
        return -1;
    }
    char *nl = strchr(spec, '\n');
    if (!nl || nl == spec || !nl[1] || strchr(nl + 1, '\n')) {
        h5fl_err("the %s property %s is \"%.200s\": expected \"LIBRARY\\nSYMBOL\" (set it with h5flow_udf_set())",
                 what, H5FLOW_UDF_PROP, spec);
        return -1;
    }
    *nl = 0;
    /* an absolute path: later writers may run in another directory */
    char abs[PATH_MAX];
    const char *l = spec;
    if (strchr(spec, '/') && realpath(spec, abs))
        l = abs;
    *lib = h5fl_strdup(l);
    *sym = h5fl_strdup(nl + 1);
    if (!*lib || !*sym) {
        free(*lib);
        free(*sym);
        *lib = *sym = NULL;
        return -1;
    }
    return 1;
}

int h5fl_udf_persist(const char *dir, hid_t dcpl, bool sync)
{
    char *lib, *sym;
    int st = spec_from_plist(dcpl, "dataset creation", &lib, &sym);
    if (st <= 0)
        return st;
    size_t n = strlen(lib) + strlen(sym) + 64;
    char *txt = malloc(n);
    int rc = -1;
    if (!txt) {
        h5fl_err("out of memory");
    } else {
        int len = snprintf(txt, n, "h5flow_log udf 1\n%s\n%s\n", lib, sym);
        rc = h5fl_write_file_atomic(dir, H5FL_UDF_FILE, txt, (size_t)len, sync);
    }
    free(txt);
    free(lib);
    free(sym);
    return rc;
}

int h5fl_udf_check_dapl(h5fl_dset_t *d, hid_t dapl, bool first)
{
    char *lib, *sym;
    int st = spec_from_plist(dapl, "dataset access", &lib, &sym);
    free(lib);
    free(sym);
    if (st <= 0)
        return st;
    if (d->w) {
        h5fl_err("dataset '%s' is already being written by this process: a user data function given when "
                 "opening it applies only to a process's first open for writing (close every handle first)",
                 d->o.path);
        return -1;
    }
    if (!first) { /* the other handles' access list stays (vol_dataset.c); the function joins it */
        if (H5Pcopy_prop(d->dapl, dapl, H5FLOW_UDF_PROP) < 0) {
            h5fl_err("cannot copy the user data function into the dataset access property list");
            return -1;
        }
        return 0;
    }
    hid_t c = H5Pcopy(dapl);
    if (c < 0) {
        h5fl_err("cannot copy the dataset access property list");
        return -1;
    }
    H5Pclose(d->dapl);
    d->dapl = c; /* h5fl_stats_open reads the function from it */
    return 0;
}
