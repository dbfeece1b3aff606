/* Errors and the connector's settings (info string keys and environment). */
#include "hfc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- errors */
/* The failing callback's message, per thread (never shared between files or threads). */
static _Thread_local char err_msg[1024];

void hfc_err(const char *fmt, ...)
{
    if (err_msg[0])
        return; /* keep the root cause */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
}

void hfc_err_clear(void) { err_msg[0] = '\0'; }
const char *hfc_err_msg(void) { return err_msg; }

typedef struct {
    char *buf;
    size_t n;
} walk_t;

static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *arg)
{
    walk_t *w = arg;
    (void)n;
    if (e->desc && e->desc[0]) /* keep the last one with a description: the innermost cause */
        snprintf(w->buf, w->n, "%s (in %s)", e->desc, e->func_name ? e->func_name : "?");
    return 0;
}

void hfc_h5_error_text(char *buf, size_t n)
{
    snprintf(buf, n, "no message on HDF5's error stack");
    hid_t st = H5Eget_current_stack();
    if (st < 0)
        return;
    walk_t w = {buf, n};
    H5Ewalk2(st, H5E_WALK_UPWARD, walk_cb, &w);
    H5Eclose_stack(st);
}

/* ---------------------------------------------------------------- settings */
void hfc_cfg_defaults(hfc_cfg_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->policy = HFC_POLICY_BLOCK;
    cfg->background = 1;
}

int hfc_parse_size(const char *s, uint64_t *out)
{
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return -1;
    double mul = 1;
    if (*end) {
        switch (*end) {
        case 'k': case 'K': mul = 1024.0; break;
        case 'm': case 'M': mul = 1024.0 * 1024; break;
        case 'g': case 'G': mul = 1024.0 * 1024 * 1024; break;
        case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
        default: return -1;
        }
        end++;
        if (*end == 'i' || *end == 'I')
            end++;
        if (*end == 'b' || *end == 'B')
            end++;
        if (*end)
            return -1;
    }
    *out = (uint64_t)(v * mul);
    return 0;
}

int hfc_cfg_set(hfc_cfg_t *cfg, const char *key, const char *value)
{
    if (!strcmp(key, "path")) {
        if (strlen(value) >= sizeof cfg->path) {
            hfc_err("h5flow_cache: path=%s is too long", value);
            return -1;
        }
        snprintf(cfg->path, sizeof cfg->path, "%s", value);
        cfg->given |= HFC_GIVEN_PATH;
        return 0;
    }
    if (!strcmp(key, "capacity")) {
        if (hfc_parse_size(value, &cfg->capacity) != 0 || cfg->capacity == 0) {
            hfc_err("h5flow_cache: capacity=%s is not a size in bytes (examples: 1048576, 512M, 4G)", value);
            return -1;
        }
        cfg->given |= HFC_GIVEN_CAPACITY;
        return 0;
    }
    if (!strcmp(key, "policy")) {
        if (!strcasecmp(value, "block"))
            cfg->policy = HFC_POLICY_BLOCK;
        else if (!strcasecmp(value, "write_through") || !strcasecmp(value, "write-through"))
            cfg->policy = HFC_POLICY_WRITE_THROUGH;
        else {
            hfc_err("h5flow_cache: policy=%s is not one of block, write_through", value);
            return -1;
        }
        cfg->given |= HFC_GIVEN_POLICY;
        return 0;
    }
    if (!strcmp(key, "background")) {
        if (!strcmp(value, "1") || !strcasecmp(value, "on") || !strcasecmp(value, "yes"))
            cfg->background = 1;
        else if (!strcmp(value, "0") || !strcasecmp(value, "off") || !strcasecmp(value, "no"))
            cfg->background = 0;
        else {
            hfc_err("h5flow_cache: background=%s is not one of on, off", value);
            return -1;
        }
        cfg->given |= HFC_GIVEN_BACKGROUND;
        return 0;
    }
    hfc_err("h5flow_cache: unknown setting '%s' (known: path, capacity, policy, background, under_vol, "
            "under_info)", key);
    return -1;
}

int hfc_cfg_from_env(hfc_cfg_t *cfg)
{
    static const struct {
        const char *env, *key;
    } map[] = {{"H5FLOW_CACHE_DIR", "path"},
               {"H5FLOW_CACHE_CAPACITY", "capacity"},
               {"H5FLOW_CACHE_POLICY", "policy"},
               {"H5FLOW_CACHE_BACKGROUND", "background"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        const char *v = getenv(map[i].env);
        if (!v || !v[0])
            continue;
        if (hfc_cfg_set(cfg, map[i].key, v) != 0) {
            char m[1100];
            snprintf(m, sizeof m, "%s (from the environment variable %s)", hfc_err_msg(), map[i].env);
            hfc_err_clear();
            hfc_err("%s", m);
            return -1;
        }
    }
    return 0;
}

int hfc_cfg_effective(const hfc_cfg_t *info, hfc_cfg_t *out)
{
    hfc_cfg_defaults(out);
    if (hfc_cfg_from_env(out) != 0)
        return -1;
    if (!info)
        return 0;
    if (info->given & HFC_GIVEN_PATH)
        snprintf(out->path, sizeof out->path, "%s", info->path);
    if (info->given & HFC_GIVEN_CAPACITY)
        out->capacity = info->capacity;
    if (info->given & HFC_GIVEN_POLICY)
        out->policy = info->policy;
    if (info->given & HFC_GIVEN_BACKGROUND)
        out->background = info->background;
    return 0;
}

/* Only the keys given (the environment is read again where the info is used). */
int hfc_cfg_to_str(const hfc_cfg_t *cfg, char *buf, size_t n)
{
    size_t w = 0;
    int k;
    if (n)
        buf[0] = '\0';
#define ADD(...)                                                                                             \
    do {                                                                                                     \
        k = snprintf(buf + w, n - w, "%s", w ? ";" : "");                                                    \
        if (k < 0 || (size_t)k >= n - w)                                                                     \
            return -1;                                                                                       \
        w += (size_t)k;                                                                                      \
        k = snprintf(buf + w, n - w, __VA_ARGS__);                                                           \
        if (k < 0 || (size_t)k >= n - w)                                                                     \
            return -1;                                                                                       \
        w += (size_t)k;                                                                                      \
    } while (0)
    if (cfg->given & HFC_GIVEN_PATH)
        ADD("path=%s", cfg->path);
    if (cfg->given & HFC_GIVEN_CAPACITY)
        ADD("capacity=%llu", (unsigned long long)cfg->capacity);
    if (cfg->given & HFC_GIVEN_POLICY)
        ADD("policy=%s", cfg->policy == HFC_POLICY_BLOCK ? "block" : "write_through");
    if (cfg->given & HFC_GIVEN_BACKGROUND)
        ADD("background=%s", cfg->background ? "on" : "off");
#undef ADD
    return (int)w;
}
