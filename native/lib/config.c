/* libh5flow: the producer settings of an XML configuration (the hdf5 transport's attributes of
 * docs/CONFIG.md), read with libxml2. Every attribute is checked by the rule of its declaration in Python
 * (Hdf5Settings), which config_table.h holds (generated: python -m h5flow.settings_gen), with the same
 * messages; the library uses the producer settings, accepts the consumers' and refuses what the table's
 * c_refused lists, with the reason. */
#define _DEFAULT_SOURCE
#include "h5flow.h"
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
#include <regex.h>

#include "config_table.h"

void h5fl_config_defaults(h5fl_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->layout_nn = 1; /* n-n: the default layout (docs/STREAM.md, "Layouts"), as in Python's Hdf5Settings */
    cfg->async_write = 1;
    cfg->heartbeat = 1.0;
    cfg->poll_min = 0.0005;
    cfg->poll_max = 0.02;
    cfg->async_max_mem = 512ull << 20; /* h5flow_async's own default, as DEFAULT_ASYNC_MAX_MEM in Python */
}

static const char *const TRANSPORT_TYPES[] = {"adios1", "adios2", "hdf5", "socket"};
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

static int is_transport_type(const char *t)
{
    for (size_t i = 0; i < sizeof TRANSPORT_TYPES / sizeof TRANSPORT_TYPES[0]; i++)
        if (!strcasecmp(t, TRANSPORT_TYPES[i]))
            return 1;
    return 0;
}

/* One value of setting `s` as its declaration reads it (h5flow.settings.Declaration.parse): 0, or -1 with the
 * message Python gives. */
typedef struct {
    const char *attr; /* the attribute it came from, NULL when absent */
    char *text;       /* xmlFree it */
    int flag;         /* bool */
    int64_t integer;  /* int, bytes */
    double number;    /* seconds, float */
    int choice;       /* choice: index into s->choices */
} value_t;

static int parse_integer(const char *v, const h5fl_setting *s, int64_t *out)
{
    const char *p = v + (*v == '+');
    if (!*p || strspn(p, "0123456789") != strlen(p))
        return -1;
    errno = 0;
    long long x = strtoll(p, NULL, 10);
    if (errno || x < (long long)s->minimum || x > (long long)s->maximum) /* both within 64 bits for integers */
        return -1;
    *out = x;
    return 0;
}

static int parse_bytes(const char *v, const h5fl_setting *s, int64_t *out)
{
    static const char *const units[] = {"", "b", "kb", "mb", "gb", "tb", "kib", "mib", "gib", "tib"};
    static const double scale[] = {1, 1, 1e3, 1e6, 1e9, 1e12, 1024.0, 1048576.0, 1073741824.0, 1099511627776.0};
    const char *p = v;
    int digits = 0;
    while (isdigit((unsigned char)*p))
        p++, digits++;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p))
            p++, digits++;
    }
    const char *unit = p;
    while (isspace((unsigned char)*unit))
        unit++;
    if (!digits)
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (!strcasecmp(unit, units[i])) {
            double x = strtod(v, NULL) * scale[i];
            if (x < s->minimum || x > s->maximum)
                return -1;
            *out = (int64_t)x;
            return 0;
        }
    }
    return -1;
}

static int parse_number(const char *v, const h5fl_setting *s, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x) || x < s->minimum || x > s->maximum)
        return -1;
    *out = x;
    return 0;
}

static int matches(const char *pattern, const char *v)
{
    regex_t re;
    if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
        return 0;
    int ok = regexec(&re, v, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

static int parse_value(ctx_t *c, xmlNodePtr node, const h5fl_setting *s, value_t *val)
{
    const char *v = val->text;
    for (size_t i = 0; i < s->n_refused; i++)
        if (!strcasecmp(v, s->refused[i].value))
            return bad_value(c, node, val->attr, v, s->refused[i].reason);
    int ok = 0;
    switch (s->kind) {
    case H5FL_BOOL:
        ok = !strcmp(v, "1") || !strcasecmp(v, "true") || !strcmp(v, "0") || !strcasecmp(v, "false");
        val->flag = !strcmp(v, "1") || !strcasecmp(v, "true");
        break;
    case H5FL_INT:
        ok = parse_integer(v, s, &val->integer) == 0;
        break;
    case H5FL_BYTES:
        ok = parse_bytes(v, s, &val->integer) == 0;
        break;
    case H5FL_SECONDS:
    case H5FL_FLOAT:
        ok = parse_number(v, s, &val->number) == 0;
        break;
    case H5FL_CHOICE:
        for (size_t i = 0; i < s->n_choices && !ok; i++)
            if (!strcasecmp(v, s->choices[i]))
                ok = 1, val->choice = (int)i;
        break;
    case H5FL_PATTERN:
        ok = matches(s->pattern, v);
        break;
    case H5FL_STRING:
        ok = *v != '\0';
        break;
    }
    if (!ok)
        return bad_value(c, node, val->attr, v, s->accepted);
    for (size_t i = 0; i < s->n_c_refused; i++)
        if (!strcasecmp(v, s->c_refused[i].value))
            return bad_value(c, node, val->attr, v, s->c_refused[i].reason);
    return 0;
}

/* What the producer does with setting `s` (present, parsed): 0, or -1 for a declared producer setting this
 * library does not know (config_table.h regenerated from a newer declaration than config.c handles). */
static int use_value(ctx_t *c, xmlNodePtr node, h5fl_config *cfg, const h5fl_setting *s, const value_t *v)
{
    const char *n = s->name;
    if (!strcmp(n, "queue_limit"))
        cfg->queue_limit = v->integer;
    else if (!strcmp(n, "queue_policy"))
        cfg->discard = v->choice;
    else if (!strcmp(n, "heartbeat"))
        cfg->heartbeat = v->number;
    else if (!strcmp(n, "poll_min"))
        cfg->poll_min = v->number;
    else if (!strcmp(n, "poll_max"))
        cfg->poll_max = v->number;
    else if (!strcmp(n, "dead_consumer"))
        cfg->dead_consumer = v->choice;
    else if (!strcmp(n, "method"))
        cfg->method_collective = tolower((unsigned char)v->text[1]) == 'c';
    else if (!strcmp(n, "collective"))
        cfg->collective = v->flag, cfg->collective_given = 1;
    else if (!strcmp(n, "layout"))
        cfg->layout_nn = !strcmp(s->choices[v->choice], "n-n"), cfg->layout_given = 1;
    else if (!strcmp(n, "driver"))
        ; /* mpio: the only driver left once c_refused has spoken */
    else if (!strcmp(n, "quota_bytes"))
        cfg->quota = (uint64_t)v->integer;
    else if (!strcmp(n, "keep"))
        cfg->keep_all = !strcmp(s->choices[v->choice], "all");
    else if (!strcmp(n, "vol_stack"))
        snprintf(cfg->vol_stack, sizeof cfg->vol_stack, "%s", v->choice ? s->choices[v->choice] : "");
    else if (!strcmp(n, "async_max_mem"))
        cfg->async_max_mem = (uint64_t)v->integer;
    else if (!strcmp(n, "cache_path"))
        snprintf(cfg->cache_path, sizeof cfg->cache_path, "%s", v->text);
    else if (!strcmp(n, "cache_capacity"))
        cfg->cache_capacity = (uint64_t)v->integer;
    else if (!strcmp(n, "async_write"))
        cfg->async_write = v->flag; /* recorded; the library writes each step inside h5flow_end_step */
    else if (s->side != H5FL_CONSUMER)
        return fail(c, node, "the setting '%s' is declared for the hdf5 transport but this C library does not "
                             "handle it; rebuild libh5flow from the same h5flow tree as the Python package", n);
    return 0; /* a consumer setting: accepted, the consumers' business */
}

static int known_attribute(const char *name)
{
    static const char *const common[] = {"type", "enabled", "filename"};
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++)
        if (!strcmp(name, common[i]))
            return 1;
    for (size_t i = 0; i < sizeof H5FL_EXTRA_ATTRS / sizeof H5FL_EXTRA_ATTRS[0]; i++)
        if (!strcmp(name, H5FL_EXTRA_ATTRS[i]))
            return 1;
    for (size_t i = 0; i < sizeof H5FL_SETTINGS / sizeof H5FL_SETTINGS[0]; i++)
        if (!strcmp(name, H5FL_SETTINGS[i].xml) || (H5FL_SETTINGS[i].alias && !strcmp(name, H5FL_SETTINGS[i].alias)))
            return 1;
    return 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int unknown_attribute(ctx_t *c, xmlNodePtr node, const char *name)
{
    enum { N_TABLE = sizeof H5FL_SETTINGS / sizeof H5FL_SETTINGS[0] };
    const char *names[2 * N_TABLE + 8];
    size_t n = 0;
    names[n++] = "type", names[n++] = "enabled", names[n++] = "filename";
    for (size_t i = 0; i < sizeof H5FL_EXTRA_ATTRS / sizeof H5FL_EXTRA_ATTRS[0] && n < 8; i++)
        names[n++] = H5FL_EXTRA_ATTRS[i];
    for (size_t i = 0; i < N_TABLE; i++) {
        names[n++] = H5FL_SETTINGS[i].xml;
        if (H5FL_SETTINGS[i].alias)
            names[n++] = H5FL_SETTINGS[i].alias;
    }
    qsort(names, n, sizeof names[0], by_name);
    char list[1024] = "";
    for (size_t i = 0; i < n; i++) {
        strncat(list, names[i], sizeof list - strlen(list) - 1);
        if (i + 1 < n)
            strncat(list, ", ", sizeof list - strlen(list) - 1);
    }
    return fail(c, node, "unknown attribute '%s' on <%s type=\"hdf5\">; accepted: %s", name,
                (const char *)node->name, list);
}

static int read_filename(ctx_t *c, xmlNodePtr node, h5fl_config *cfg)
{
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
    return rc;
}

/* Hdf5Settings._check_vol_stack: the stack writes n-n rank files only; a connector's option needs its connector. */
static int check_vol_stack(ctx_t *c, xmlNodePtr node, h5fl_config *cfg)
{
    const char *stack = *cfg->vol_stack ? cfg->vol_stack : "none";
    if (*cfg->vol_stack && !cfg->layout_nn)
        return fail(c, node, "vol_stack=\"%s\" stacks connectors over the serial rank files of layout=\"n-n\", but "
                             "layout=\"n-1\" writes one shared file through MPI-IO; give layout=\"n-n\" (the default) "
                             "with vol_stack, or drop vol_stack", stack);
    const struct {
        const char *name, *layer;
        int given;
    } opts[] = {{"async_max_mem", "async", cfg->async_max_mem != 512ull << 20},
                {"cache_path", "cache", *cfg->cache_path != '\0'},
                {"cache_capacity", "cache", cfg->cache_capacity != 0}};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (opts[i].given && !strstr(cfg->vol_stack, opts[i].layer))
            return fail(c, node, "%s sets h5flow_%s, but vol_stack=\"%s\" does not stack it; give vol_stack=\"%s\" "
                                 "(or one of cache,async, async,cache), or drop %s", opts[i].name, opts[i].layer,
                        stack, opts[i].layer, opts[i].name);
    return 0;
}

/* The combinations Hdf5Settings.check and from_xml refuse, with their messages. */
static int check_combinations(ctx_t *c, xmlNodePtr node, h5fl_config *cfg)
{
    char *method = attr(node, "method"), *coll = attr(node, "collective");
    int rc = 0;
    if (cfg->method_collective && cfg->collective_given && !cfg->collective)
        rc = fail(c, node, "method=\"%s\" asks for collective transfers but collective=\"%s\" refuses them on <%s "
                           "type=\"hdf5\">; drop one of the two, or make them agree", method, coll,
                  (const char *)node->name);
    else if (cfg->poll_min > cfg->poll_max)
        rc = fail(c, node, "poll_min %g s is larger than poll_max %g s (on <%s type=\"hdf5\">); give poll_min <= "
                           "poll_max (defaults 0.0005 and 0.02)", cfg->poll_min, cfg->poll_max,
                  (const char *)node->name);
    if (!rc && cfg->method_collective)
        cfg->collective = 1;
    /* collective transfers only act on a shared file: left out, the layout is then n-1 (else the default n-n);
     * an explicit layout="n-n" with them is refused, as in Python (a setting is never silently ignored) */
    if (!rc && !cfg->layout_given)
        cfg->layout_nn = !cfg->collective;
    else if (!rc && cfg->layout_nn && cfg->collective) {
        char what[64];
        if (cfg->method_collective)
            snprintf(what, sizeof what, "method=\"%s\"", method);
        else
            snprintf(what, sizeof what, "collective=\"true\"");
        rc = fail(c, node, "%s only acts on a shared file (layout=\"n-1\"), but layout=\"n-n\" writes one file per "
                           "producer rank, written independently, where it would be ignored (on <%s type=\"hdf5\">); "
                           "give layout=\"n-1\" (or leave layout out: %s then implies it), or drop %s to keep "
                           "layout=\"n-n\"", what, (const char *)node->name, what, what);
    }
    if (!rc)
        rc = check_vol_stack(c, node, cfg);
    if (method)
        xmlFree(method);
    if (coll)
        xmlFree(coll);
    return rc;
}

static int read_hdf5(ctx_t *c, xmlNodePtr node, h5fl_config *cfg)
{
    for (xmlAttrPtr a = node->properties; a; a = a->next)
        if (!known_attribute((const char *)a->name))
            return unknown_attribute(c, node, (const char *)a->name);
    if (read_filename(c, node, cfg))
        return -1;
    for (size_t i = 0; i < sizeof H5FL_SETTINGS / sizeof H5FL_SETTINGS[0]; i++) {
        const h5fl_setting *s = &H5FL_SETTINGS[i];
        value_t v = {0};
        char *main_text = attr(node, s->xml), *alias_text = s->alias ? attr(node, s->alias) : NULL;
        int rc = 0;
        if (main_text && alias_text)
            rc = fail(c, node, "both '%s' and '%s' on <%s type=\"hdf5\">; give one of them (%s, %s name the same "
                               "setting)", s->alias, s->xml, (const char *)node->name, s->xml, s->alias);
        else if (main_text || alias_text) {
            v.attr = main_text ? s->xml : s->alias;
            v.text = main_text ? main_text : alias_text;
            rc = parse_value(c, node, s, &v);
            if (!rc)
                rc = use_value(c, node, cfg, s, &v);
        }
        if (main_text)
            xmlFree(main_text);
        if (alias_text)
            xmlFree(alias_text);
        if (rc)
            return rc;
    }
    if (check_combinations(c, node, cfg))
        return -1;
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

int h5flow_config_check(const char *path, char *msg, size_t len)
{
    h5fl_config *cfg = malloc(sizeof *cfg);
    char err[H5FL_MSG_MAX] = "";
    int rc = H5FLOW_ERR_CONFIG;
    if (!cfg)
        snprintf(err, sizeof err, "h5flow_config_check: out of memory");
    else if (!path)
        snprintf(err, sizeof err, "h5flow_config_check: no path given; give an XML configuration file");
    else {
        h5fl_config_defaults(cfg);
        rc = h5fl_config_from_xml(cfg, path, err, sizeof err) ? H5FLOW_ERR_CONFIG : 0;
    }
    free(cfg);
    if (msg && len)
        snprintf(msg, len, "%s", rc ? err : "");
    return rc;
}
