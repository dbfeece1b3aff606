/* Parsing one case line of the case file written by the Python driver. */
#include "iotest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_ulong(const char *v, unsigned long long *out)
{
    char *end = NULL;
    errno = 0;
    if (*v == '-' || *v == '\0')
        return -1;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = x;
    return 0;
}

static int parse_long(const char *v, long *out)
{
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || *v == '\0')
        return -1;
    *out = x;
    return 0;
}

static int set_str(char *dst, size_t n, const char *v)
{
    if (strlen(v) >= n)
        return -1;
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

static void defaults(iot_case *c)
{
    memset(c, 0, sizeof(*c));
    c->op = IOT_OP_IOTEST;
    c->steps = c->arrays = 1;
    c->rows = c->cols = 2;
    c->prows = c->pcols = 1;
    c->rank = 2;
    c->align_inc = 1;
    c->mblk = 2048;
    strcpy(c->fmt_low, "earliest");
    strcpy(c->fmt_high, "latest");
    strcpy(c->io, "independent");
    strcpy(c->vfd, "mpio");
    c->gzip = -1;
}

static int is_one_of(const char *v, const char *const *names)
{
    for (; *names != NULL; ++names)
        if (strcmp(v, *names) == 0)
            return 1;
    return 0;
}

static const char *const LIBVERS[] = {"earliest", "v18", "v110", "v112", "v114", "latest", NULL};
static const char *const IOS[] = {"independent", "collective", "posix", "core", "mpi-io-uni", NULL};
static const char *const VFDS[] = {"mpio", "subfiling", NULL};

/* key=value tokens separated by blanks; `file=` is last and takes the rest of the line. */
int iot_parse_case(char *line, int lineno, iot_case *c, char *err, size_t errlen)
{
    defaults(c);
    char *p = line;
    int have_index = 0, have_file = 0, have_read_seed = 0;
    while (*p != '\0') {
        while (*p == ' ' || *p == '\t')
            ++p;
        if (*p == '\0' || *p == '\n')
            break;
        char *eq = strchr(p, '=');
        if (eq == NULL) {
            snprintf(err, errlen, "case line %d: token without '=' at \"%.40s\"", lineno, p);
            return -1;
        }
        *eq = '\0';
        const char *key = p;
        char *val = eq + 1;
        if (strcmp(key, "file") == 0) {
            size_t n = strcspn(val, "\n");
            val[n] = '\0';
            if (set_str(c->file, sizeof(c->file), val) != 0 || n == 0) {
                snprintf(err, errlen, "case line %d: file name empty or too long", lineno);
                return -1;
            }
            have_file = 1;
            break;
        }
        char *end = val + strcspn(val, " \t\n");
        int last = (*end == '\0');
        *end = '\0';
        unsigned long long u = 0;
        long l = 0;
        int bad = 0;
        if (strcmp(key, "index") == 0) {
            bad = parse_long(val, &l) || l < 0;
            c->index = (int)l;
            have_index = 1;
        } else if (strcmp(key, "op") == 0) {
            if (strcmp(val, "iotest") == 0)
                c->op = IOT_OP_IOTEST;
            else if (strcmp(val, "filecreate") == 0)
                c->op = IOT_OP_FILECREATE;
            else if (strcmp(val, "objscan") == 0)
                c->op = IOT_OP_OBJSCAN;
            else
                bad = 1;
        } else if (strcmp(key, "steps") == 0) {
            bad = parse_ulong(val, &u) || u == 0 || u > 1000000000ULL;
            c->steps = (unsigned)u;
        } else if (strcmp(key, "arrays") == 0) {
            bad = parse_ulong(val, &u) || u == 0 || u > 1000000000ULL;
            c->arrays = (unsigned)u;
        } else if (strcmp(key, "rows") == 0) {
            bad = parse_ulong(val, &u) || u < 2;
            c->rows = (unsigned long)u;
        } else if (strcmp(key, "cols") == 0) {
            bad = parse_ulong(val, &u) || u < 2;
            c->cols = (unsigned long)u;
        } else if (strcmp(key, "prows") == 0) {
            bad = parse_ulong(val, &u) || u == 0 || u > 1000000ULL;
            c->prows = (unsigned)u;
        } else if (strcmp(key, "pcols") == 0) {
            bad = parse_ulong(val, &u) || u == 0 || u > 1000000ULL;
            c->pcols = (unsigned)u;
        } else if (strcmp(key, "scaling") == 0) {
            bad = strcmp(val, "weak") != 0 && strcmp(val, "strong") != 0;
            c->strong = strcmp(val, "strong") == 0;
        } else if (strcmp(key, "rank") == 0) {
            bad = parse_long(val, &l) || l < 2 || l > 4;
            c->rank = (int)l;
        } else if (strcmp(key, "slowdim") == 0) {
            bad = strcmp(val, "step") != 0 && strcmp(val, "array") != 0;
            c->slow_array = strcmp(val, "array") == 0;
        } else if (strcmp(key, "layout") == 0) {
            bad = strcmp(val, "contiguous") != 0 && strcmp(val, "chunked") != 0;
            c->chunked = strcmp(val, "chunked") == 0;
        } else if (strcmp(key, "fill") == 0) {
            bad = strcmp(val, "true") != 0 && strcmp(val, "false") != 0;
            c->fill_alloc = strcmp(val, "true") == 0;
        } else if (strcmp(key, "align-inc") == 0) {
            bad = parse_ulong(val, &u) || u == 0;
            c->align_inc = (hsize_t)u;
        } else if (strcmp(key, "align-thr") == 0) {
            bad = parse_ulong(val, &u);
            c->align_thr = (hsize_t)u;
        } else if (strcmp(key, "mblk") == 0) {
            bad = parse_ulong(val, &u);
            c->mblk = (hsize_t)u;
        } else if (strcmp(key, "fmt-low") == 0) {
            bad = !is_one_of(val, LIBVERS) || set_str(c->fmt_low, sizeof(c->fmt_low), val);
        } else if (strcmp(key, "fmt-high") == 0) {
            bad = !is_one_of(val, LIBVERS) || set_str(c->fmt_high, sizeof(c->fmt_high), val);
        } else if (strcmp(key, "io") == 0) {
            bad = !is_one_of(val, IOS) || set_str(c->io, sizeof(c->io), val);
        } else if (strcmp(key, "vfd") == 0) {
            bad = !is_one_of(val, VFDS) || set_str(c->vfd, sizeof(c->vfd), val);
        } else if (strcmp(key, "split") == 0) {
            bad = parse_long(val, &l) || (l != 0 && l != 1);
            c->split = (int)l;
        } else if (strcmp(key, "gzip") == 0) {
            bad = parse_long(val, &l) || l < -1 || l > 9;
            c->gzip = (int)l;
        } else if (strcmp(key, "szip-mask") == 0) {
            bad = parse_long(val, &l) || l < 0;
            c->szip_mask = (int)l;
        } else if (strcmp(key, "szip-ppb") == 0) {
            bad = parse_long(val, &l) || l < 0 || l > 32;
            c->szip_ppb = (int)l;
        } else if (strcmp(key, "delay-us") == 0) {
            bad = parse_long(val, &l) || l < 0;
            c->delay_us = l;
        } else if (strcmp(key, "seed") == 0) {
            bad = parse_long(val, &c->seed);
        } else if (strcmp(key, "read-seed") == 0) {
            bad = parse_long(val, &c->read_seed);
            have_read_seed = 1;
        } else if (strcmp(key, "count") == 0) {
            bad = parse_ulong(val, &u) || u == 0 || u > 100000000ULL;
            c->count = (unsigned)u;
        } else if (strcmp(key, "keep") == 0) {
            bad = parse_long(val, &l) || (l != 0 && l != 1);
            c->keep = (int)l;
        } else {
            snprintf(err, errlen, "case line %d: unknown key '%s'", lineno, key);
            return -1;
        }
        if (bad) {
            snprintf(err, errlen, "case line %d: bad value '%s' for key '%s'", lineno, val, key);
            return -1;
        }
        if (last)
            break;
        p = end + 1;
    }
    if (!have_read_seed)
        c->read_seed = c->seed;
    if (!have_index || !have_file) {
        snprintf(err, errlen, "case line %d: needs index= and file= (file last)", lineno);
        return -1;
    }
    if (c->strong && (c->rows % c->prows != 0 || c->cols % c->pcols != 0)) {
        snprintf(err, errlen, "case line %d: strong scaling needs rows %% process-rows == 0 and "
                 "columns %% process-columns == 0", lineno);
        return -1;
    }
    if (c->op != IOT_OP_IOTEST && c->count == 0) {
        snprintf(err, errlen, "case line %d: filecreate/objscan need count=", lineno);
        return -1;
    }
    return 0;
}
