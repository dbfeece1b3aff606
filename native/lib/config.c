/* libh5flow: the producer settings of an XML configuration (the hdf5 transport's attributes of
 * docs/CONFIG.md), read with libxml2, checked as strictly as h5flow's Python reader (xmlconfig.py). */
#define _DEFAULT_SOURCE
#include "h5flow_util.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <libxml/parser.h>
#include <libxml/tree.h>

void h5fl_config_defaults(h5fl_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->layout_nn = 1; /* n-n: the default layout (docs/STREAM.md, "Layouts"), as in Python's Hdf5Settings */
    cfg->heartbeat = 1.0;
    cfg->poll_min = 0.0005;
    cfg->poll_max = 0.02;
}

#define HEARTBEAT_MIN 0.05
#define HEARTBEAT_MAX 3600.0
#define POLL_MIN 1e-5
#define POLL_MAX 60.0

static const char *const TRANSPORT_TYPES[] = {"adios1", "adios2", "hdf5", "socket"};
static const char *const HDF5_ATTRS[] = {"type", "enabled", "filename", "file_name", "queue_limit", "queue_policy",
                                         "group", "heartbeat", "poll_min", "poll_max", "method", "collective",
                                         "layout", "driver", "quota", "keep", "dead_consumer"};
#define N_HDF5_ATTRS (sizeof HDF5_ATTRS / sizeof HDF5_ATTRS[0])

typedef struct {
    const char *path;
    char *err;
    size_t errlen;
} ctx_t;

/* The attribute's value with surrounding blanks removed (xmlFree it), or NULL when absent. */
static char *attr(xmlNodePtr node, const char *name)
{
    xmlChar *v = xmlGetProp(node, (const xmlChar *)name);
    if (!v)
        return NULL;
    char *s = (char *)v;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    size_t k = 0;
    while (s[k] && isspace((unsigned char)s[k]))
        k++;
    memmove(s, s + k, n - k + 1);
    return s;
}

static int fail(ctx_t *c, xmlNodePtr node, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(ctx_t *c, xmlNodePtr node, const char *fmt, ...)
{
    int n = snprintf(c->err, c->errlen, "%s:%ld: ", c->path, node ? (long)xmlGetLineNo(node) : 0L);
    if (n < 0 || (size_t)n >= c->errlen)
        n = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static int bad_value(ctx_t *c, xmlNodePtr node, const char *name, const char *value, const char *hint)
{
    return fail(c, node, "bad value '%s' for attribute '%s' on <%s type=\"hdf5\">; %s", value, name,
                (const char *)node->name, hint);
}

static int get_bool(ctx_t *c, xmlNodePtr node, const char *name, int def, int *out)
{
    char *v = attr(node, name);
    *out = def;
    if (!v)
        return 0;
    int rc = 0;
    if (!strcmp(v, "1") || !strcasecmp(v, "true"))
        *out = 1;
    else if (!strcmp(v, "0") || !strcasecmp(v, "false"))
        *out = 0;
    else
        rc = bad_value(c, node, name, v, "accepted: 0, 1, true, false");
    xmlFree(v);
    return rc;
}

static int get_seconds(ctx_t *c, xmlNodePtr node, const char *name, double lo, double hi, double *out)
{
    char *v = attr(node, name);
    if (!v)
        return 0;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    int rc = 0;
    if (end == v || *end || errno || !isfinite(x) || x < lo || x > hi) {
        char hint[120];
        snprintf(hint, sizeof hint, "accepted: a number of seconds from %g to %g", lo, hi);
        rc = bad_value(c, node, name, v, hint);
    } else {
        *out = x;
    }
    xmlFree(v);
    return rc;
}

static int get_choice(ctx_t *c, xmlNodePtr node, const char *name, const char *const *choices, int n, int *out)
{
    char *v = attr(node, name);
    if (!v)
        return 0;
    for (int i = 0; i < n; i++) {
        if (!strcasecmp(v, choices[i])) {
            *out = i;
            xmlFree(v);
            return 0;
        }
    }
    char hint[200] = "accepted: ";
    for (int i = 0; i < n; i++) {
        strncat(hint, choices[i], sizeof hint - strlen(hint) - 1);
        if (i + 1 < n)
            strncat(hint, ", ", sizeof hint - strlen(hint) - 1);
    }
    int rc = bad_value(c, node, name, v, hint);
    xmlFree(v);
    return rc;
}

static int get_bytes(ctx_t *c, xmlNodePtr node, const char *name, uint64_t *out)
{
    static const char *const units[] = {"", "b", "kb", "mb", "gb", "tb", "kib", "mib", "gib", "tib"};
    static const double scale[] = {1, 1, 1e3, 1e6, 1e9, 1e12, 1024.0, 1048576.0, 1073741824.0, 1099511627776.0};
    char *v = attr(node, name);
    if (!v)
        return 0;
    const char *p = v;
    int digits = 0;
    while (isdigit((unsigned char)*p)) {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) {
            p++;
            digits++;
        }
    }
    const char *unit = p;
    while (*unit == ' ' || *unit == '\t')
        unit++;
    int ok = digits > 0 && (p == v || *v != '+');
    int k = -1;
    for (int i = 0; ok && i < (int)(sizeof units / sizeof units[0]); i++)
        if (!strcasecmp(unit, units[i]))
            k = i;
    if (!ok || k < 0) {
        int rc = bad_value(c, node, name, v,
                           "accepted: a byte count, optionally with a unit: B, kB, MB, GB, TB (powers of 1000) or "
                           "KiB, MiB, GiB, TiB (powers of 1024), e.g. 512MiB, 2GiB, 100MB; 0 = unlimited");
        xmlFree(v);
        return rc;
    }
    *out = (uint64_t)(strtod(v, NULL) * scale[k]);
    xmlFree(v);
    return 0;
}

static int is_transport_type(const char *t)
{
    for (size_t i = 0; i < sizeof TRANSPORT_TYPES / sizeof TRANSPORT_TYPES[0]; i++)
        if (!strcasecmp(t, TRANSPORT_TYPES[i]))
            return 1;
    return 0;
}

static int read_hdf5(ctx_t *c, xmlNodePtr node, h5fl_config *cfg)
{
    for (xmlAttrPtr a = node->properties; a; a = a->next) {
        int known = 0;
        for (size_t i = 0; i < N_HDF5_ATTRS; i++)
            known |= !strcmp((const char *)a->name, HDF5_ATTRS[i]);
        if (!known) {
            char list[400] = "";
            for (size_t i = 0; i < N_HDF5_ATTRS; i++) {
                strncat(list, HDF5_ATTRS[i], sizeof list - strlen(list) - 1);
                if (i + 1 < N_HDF5_ATTRS)
                    strncat(list, ", ", sizeof list - strlen(list) - 1);
            }
            return fail(c, node, "unknown attribute '%s' on <%s type=\"hdf5\">; accepted: %s", (const char *)a->name,
                        (const char *)node->name, list);
        }
    }
    char *fn = attr(node, "filename"), *fn2 = attr(node, "file_name");
    int rc = 0;
    if (fn && fn2)
        rc = fail(c, node, "both 'filename' and 'file_name' on <%s type=\"hdf5\">; give one of them",
                  (const char *)node->name);
    else if (!fn && !fn2)
        rc = fail(c, node, "missing attribute 'filename' on <%s type=\"hdf5\">; give filename=\"...\" (the stream's "
                           "name; the steps are staged in <filename>.h5flow/)", (const char *)node->name);
    else if (!*(fn ? fn : fn2))
        rc = fail(c, node, "empty 'filename' on <%s type=\"hdf5\">; give the stream's name", (const char *)node->name);
    else if (strlen(fn ? fn : fn2) >= sizeof cfg->filename - 64)
        rc = fail(c, node, "the filename is longer than %zu characters", sizeof cfg->filename - 64);
    else
        snprintf(cfg->filename, sizeof cfg->filename, "%s", fn ? fn : fn2);
    if (fn)
        xmlFree(fn);
    if (fn2)
        xmlFree(fn2);
    if (rc)
        return rc;

    int from_method = 0;
    char *method = attr(node, "method");
    if (method) {
        if (!*method || tolower((unsigned char)method[0]) != 's') {
            rc = bad_value(c, node, "method", method,
                           "h5flow only streams; accepted: a value starting with 's': stream, s, sc (a second "
                           "character 'c' asks for collective transfers)");
            xmlFree(method);
            return rc;
        }
        from_method = strlen(method) > 1 && tolower((unsigned char)method[1]) == 'c';
        xmlFree(method);
    }
    char *coll = attr(node, "collective");
    if (get_bool(c, node, "collective", from_method, &cfg->collective)) {
        xmlFree(coll);
        return -1;
    }
    if (from_method && coll && !cfg->collective)
        rc = fail(c, node, "method asks for collective transfers but collective=\"%s\" refuses them; drop one of the "
                           "two, or make them agree", coll);
    if (coll)
        xmlFree(coll);
    if (rc)
        return rc;

    /* collective transfers only act on a shared file: left out, the layout is then n-1 (else the default n-n);
     * an explicit layout="n-n" with them is refused, as in Python (a setting is never silently ignored) */
    static const char *const layouts[] = {"n-1", "n-n"};
    char *layout = attr(node, "layout");
    cfg->layout_nn = !cfg->collective;
    if (get_choice(c, node, "layout", layouts, 2, &cfg->layout_nn)) {
        xmlFree(layout);
        return -1;
    }
    if (layout && cfg->layout_nn && cfg->collective)
        rc = fail(c, node, "collective transfers (collective=\"true\" or method=\"sc\") only act on a shared file "
                           "(layout=\"n-1\"), but layout=\"%s\" writes one file per producer rank, where they would "
                           "be ignored; give layout=\"n-1\" (or leave layout out: collective transfers then imply "
                           "it), or drop the collective request to keep layout=\"%s\"", layout, layout);
    if (layout)
        xmlFree(layout);
    if (rc)
        return rc;
    static const char *const drivers[] = {"mpio", "subfiling"};
    int driver = 0;
    if (get_choice(c, node, "driver", drivers, 2, &driver))
        return -1;
    if (driver != 0)
        return fail(c, node, "driver=\"subfiling\" is not offered by the C library; use driver=\"mpio\" or leave the "
                             "attribute out, or write subfiling from Python");
    if (get_bytes(c, node, "quota", &cfg->quota))
        return -1;
    static const char *const keeps[] = {"released", "all"};
    if (get_choice(c, node, "keep", keeps, 2, &cfg->keep_all))
        return -1;
    char *ql = attr(node, "queue_limit");
    if (ql) {
        const char *p = ql + (*ql == '+');
        int ok = *p != '\0' && strspn(p, "0123456789") == strlen(p) && strlen(p) < 18;
        if (!ok) {
            rc = bad_value(c, node, "queue_limit", ql, "accepted: an integer >= 0");
            xmlFree(ql);
            return rc;
        }
        cfg->queue_limit = strtoll(p, NULL, 10);
        xmlFree(ql);
    }
    static const char *const policies[] = {"block", "discard"};
    if (get_choice(c, node, "queue_policy", policies, 2, &cfg->discard))
        return -1;
    static const char *const dead[] = {"wait", "drop", "error"};
    if (get_choice(c, node, "dead_consumer", dead, 3, &cfg->dead_consumer))
        return -1;
    if (get_seconds(c, node, "heartbeat", HEARTBEAT_MIN, HEARTBEAT_MAX, &cfg->heartbeat) ||
        get_seconds(c, node, "poll_min", POLL_MIN, POLL_MAX, &cfg->poll_min) ||
        get_seconds(c, node, "poll_max", POLL_MIN, POLL_MAX, &cfg->poll_max))
        return -1;
    if (cfg->poll_min > cfg->poll_max)
        return fail(c, node, "poll_min %g s is larger than poll_max %g s; give poll_min <= poll_max (defaults 0.0005 "
                             "and 0.02)", cfg->poll_min, cfg->poll_max);
    /* group, <mesh> and <partitioner> concern consumers: accepted, not used by a producer */
    snprintf(cfg->source, sizeof cfg->source, "%s:%ld", c->path, (long)xmlGetLineNo(node));
    return 0;
}

int h5fl_config_from_xml(h5fl_config *cfg, const char *path, char *err, size_t errlen)
{
    ctx_t c = {path, err, errlen};
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot read the configuration file: %s; check the path (give a SENSEI <sensei> "
                              "XML file or the stream's name)", path, strerror(errno));
        return -1;
    }
    fclose(f);
    xmlDocPtr doc = xmlReadFile(path, NULL, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
    if (!doc) {
        const xmlError *e = xmlGetLastError();
        char msg[512] = "not well-formed";
        if (e && e->message) {
            snprintf(msg, sizeof msg, "%s", e->message);
            msg[strcspn(msg, "\n")] = '\0';
        }
        snprintf(err, errlen, "%s:%d: not a well-formed XML file (%s); fix the XML syntax (every element closed, "
                              "attribute values in quotes, one root <sensei>)", path, e ? e->line : 0, msg);
        return -1;
    }
    int rc = 0;
    xmlNodePtr root = xmlDocGetRootElement(doc);
    if (!root || strcmp((const char *)root->name, "sensei") != 0) {
        rc = fail(&c, root, "the root element is <%s>; a configuration's root element must be <sensei>",
                  root ? (const char *)root->name : "");
        goto done;
    }
    xmlNodePtr chosen = NULL;
    int enabled_count = 0;
    for (xmlNodePtr n = root->children; n; n = n->next) {
        if (n->type != XML_ELEMENT_NODE)
            continue;
        if (strcmp((const char *)n->name, "transport") != 0 && strcmp((const char *)n->name, "analysis") != 0) {
            rc = fail(&c, n, "unexpected element <%s> inside <sensei>; accepted: <analysis>, <transport>",
                      (const char *)n->name);
            goto done;
        }
        char *type = attr(n, "type");
        if (!type) {
            rc = fail(&c, n, "missing attribute 'type' on <%s>; accepted: adios1, adios2, hdf5, socket",
                      (const char *)n->name);
            goto done;
        }
        int transport = is_transport_type(type);
        xmlFree(type);
        if (!transport)
            continue; /* an analysis: the consumers' business */
        int enabled = 1;
        if (get_bool(&c, n, "enabled", 1, &enabled)) {
            rc = -1;
            goto done;
        }
        if (enabled) {
            enabled_count++;
            if (!chosen)
                chosen = n;
        }
    }
    if (enabled_count != 1) {
        rc = fail(&c, root, "expected exactly one enabled transport, found %d; give one <transport type=\"hdf5\" "
                            "filename=\"...\"/> (or <analysis type=\"hdf5\" .../>)", enabled_count);
        goto done;
    }
    char *type = attr(chosen, "type");
    if (strcasecmp(type, "hdf5") != 0) {
        rc = fail(&c, chosen, "the C library writes the hdf5 transport only; this transport is type=\"%s\": use "
                              "type=\"hdf5\", or the Python API (h5flow.open) for socket and adios2", type);
        xmlFree(type);
        goto done;
    }
    xmlFree(type);
    rc = read_hdf5(&c, chosen, cfg);
done:
    xmlFreeDoc(doc);
    return rc;
}
