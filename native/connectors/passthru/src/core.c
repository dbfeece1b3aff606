/* The pass-through core's objects, info (parsing and printing), wrap contexts, errors and class. */
#include "h5fpt_int.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Write-once module state: set by h5fpt_class_init (descriptor, class) and by the class's initialize
 * (error class) before any file can be opened; read-only while files are open. */
const h5fpt_desc_t *h5fpt_g_desc;
static const H5VL_class_t *g_cls;
static hid_t err_class = H5I_INVALID_HID;
static hid_t err_major = H5I_INVALID_HID;
static hid_t err_minor = H5I_INVALID_HID;

const h5fpt_desc_t *h5fpt_desc(void) { return h5fpt_g_desc; }
const H5VL_class_t *h5fpt_class(void) { return g_cls; }

/* ---------------------------------------------------------------------------------------- errors */

static void push_error(hid_t stack, const char *file, const char *func, unsigned line, const char *fmt,
                       va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    const char *name = h5fpt_g_desc ? h5fpt_g_desc->name : "h5flow pass-through";
    if (err_class >= 0)
        H5Epush2(stack, file, func, line, err_class, err_major, err_minor, "%s: %s", name, msg);
    else
        H5Epush2(stack, file, func, line, H5E_ERR_CLS, H5E_VOL, H5E_CANTOPERATE, "%s: %s", name, msg);
}

void h5fpt_error(const char *file, const char *func, unsigned line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    push_error(H5E_DEFAULT, file, func, line, fmt, ap);
    va_end(ap);
}

void h5fpt_error_on(hid_t stack, const char *file, const char *func, unsigned line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    push_error(stack, file, func, line, fmt, ap);
    va_end(ap);
}

static void err_unregister(void)
{
    if (err_minor >= 0)
        H5Eclose_msg(err_minor);
    if (err_major >= 0)
        H5Eclose_msg(err_major);
    if (err_class >= 0)
        H5Eunregister_class(err_class);
    err_class = err_major = err_minor = H5I_INVALID_HID;
}

/* HDF5 clears the calling thread's error stack on entry to every API call, also when a connector makes
 * one. initialize and terminate also run for programs that never chose this connector (HDF5 loads every
 * VOL plugin on HDF5_PLUGIN_PATH when a native open fails), so the calls they make are bracketed: the
 * caller's error stack (h5py's FileNotFoundError comes from it) comes back as it was. */
static hid_t estack_save(void) { return H5Eget_current_stack(); }

static void estack_restore(hid_t saved)
{
    if (saved >= 0 && H5Eset_current_stack(saved) < 0)
        H5Eclose_stack(saved);
}

static herr_t core_initialize_kept(hid_t vipl_id);

static herr_t core_initialize(hid_t vipl_id)
{
    hid_t saved = estack_save();
    herr_t rc = core_initialize_kept(vipl_id);
    if (rc >= 0)
        estack_restore(saved);
    else if (saved >= 0)
        H5Eclose_stack(saved);
    return rc;
}

static herr_t core_initialize_kept(hid_t vipl_id)
{
    if (err_class < 0) {
        char major[256];
        snprintf(major, sizeof major, "%s VOL connector", h5fpt_g_desc->name);
        err_class = H5Eregister_class(h5fpt_g_desc->name, h5fpt_g_desc->name, "1");
        if (err_class >= 0) {
            err_major = H5Ecreate_msg(err_class, H5E_MAJOR, major);
            err_minor = H5Ecreate_msg(err_class, H5E_MINOR, "operation failed");
        }
        if (err_class < 0 || err_major < 0 || err_minor < 0) {
            err_unregister();
            return -1;
        }
    }
    return h5fpt_g_desc->initialize ? h5fpt_g_desc->initialize(vipl_id) : 0;
}

static herr_t core_terminate(void)
{
    /* no MPI here: H5close may run inside MPI_Finalize */
    hid_t saved = estack_save();
    herr_t rc = h5fpt_g_desc->terminate ? h5fpt_g_desc->terminate() : 0;
    err_unregister();
    estack_restore(saved);
    return rc;
}

/* --------------------------------------------------------------------------------------- objects */

h5fpt_obj_t *h5fpt_obj_new(void *under, hid_t under_vol_id, H5I_type_t type, const h5fpt_obj_t *parent,
                           const h5fpt_info_t *info)
{
    h5fpt_obj_t *o = calloc(1, sizeof *o);
    if (!o) {
        H5FPT_ERR("out of memory for an object wrapper");
        return NULL;
    }
    o->magic = H5FPT_OBJ_MAGIC;
    o->under_object = under;
    o->under_vol_id = under_vol_id;
    o->type = type;
    atomic_init(&o->refs, 1u);
    if (H5Iinc_ref(under_vol_id) < 0) {
        free(o);
        H5FPT_ERR("cannot hold the under connector's id");
        return NULL;
    }
    if (type != H5I_BADID && h5fpt_g_desc->obj_init && h5fpt_g_desc->obj_init(o, parent, info) < 0) {
        H5Idec_ref(under_vol_id);
        free(o);
        return NULL;
    }
    return o;
}

/* Close an under object of a type after its wrapper could not be made. */
static void close_under(void *under, hid_t under_vol_id, H5I_type_t type, hid_t dxpl_id)
{
    switch (type) {
    case H5I_FILE: H5VLfile_close(under, under_vol_id, dxpl_id, NULL); break;
    case H5I_GROUP: H5VLgroup_close(under, under_vol_id, dxpl_id, NULL); break;
    case H5I_DATASET: H5VLdataset_close(under, under_vol_id, dxpl_id, NULL); break;
    case H5I_DATATYPE: H5VLdatatype_close(under, under_vol_id, dxpl_id, NULL); break;
    case H5I_ATTR: H5VLattr_close(under, under_vol_id, dxpl_id, NULL); break;
    default: break;
    }
}

h5fpt_obj_t *h5fpt_obj_wrap_or_close(void *under, hid_t under_vol_id, H5I_type_t type,
                                     const h5fpt_obj_t *parent, const h5fpt_info_t *info, hid_t dxpl_id)
{
    if (!under)
        return NULL;
    h5fpt_obj_t *o = h5fpt_obj_new(under, under_vol_id, type, parent, info);
    if (!o)
        close_under(under, under_vol_id, type, dxpl_id);
    return o;
}

void h5fpt_obj_retain(h5fpt_obj_t *obj) { atomic_fetch_add(&obj->refs, 1u); }

void h5fpt_obj_release(h5fpt_obj_t *obj)
{
    if (!obj || atomic_fetch_sub(&obj->refs, 1u) != 1u)
        return;
    hid_t err = H5Eget_current_stack(); /* releasing never changes what the caller reports */
    if (obj->type != H5I_BADID && h5fpt_g_desc->obj_fini)
        h5fpt_g_desc->obj_fini(obj);
    H5Idec_ref(obj->under_vol_id);
    if (err >= 0)
        H5Eset_current_stack(err);
    obj->magic = 0;
    free(obj);
}

void *h5fpt_request_wrap(void *under_req, hid_t under_vol_id)
{
    return h5fpt_obj_new(under_req, under_vol_id, H5I_BADID, NULL, NULL);
}

void h5fpt_wrap_req(void **req, hid_t under_vol_id)
{
    if (req && *req)
        *req = h5fpt_request_wrap(*req, under_vol_id);
}

/* ------------------------------------------------------------------------------------------ info */

static h5fpt_info_t *info_alloc(void)
{
    h5fpt_info_t *info = calloc(1, sizeof *info);
    if (!info)
        return NULL;
    info->under_vol_id = H5I_INVALID_HID;
    if (h5fpt_g_desc->opts_size) {
        info->opts = calloc(1, h5fpt_g_desc->opts_size);
        if (!info->opts) {
            free(info);
            return NULL;
        }
    }
    return info;
}

h5fpt_info_t *h5fpt_info_default(void)
{
    h5fpt_info_t *info = info_alloc();
    if (!info) {
        H5FPT_ERR("out of memory for the connector info");
        return NULL;
    }
    if (info->opts && h5fpt_g_desc->opts_default)
        h5fpt_g_desc->opts_default(info->opts);
    info->under_vol_id = H5VL_NATIVE;
    if (info->under_vol_id < 0 || H5Iinc_ref(info->under_vol_id) < 0) {
        free(info->opts);
        free(info);
        H5FPT_ERR("cannot hold the native connector's id");
        return NULL;
    }
    return info;
}

void *h5fpt_info_copy(const void *src_)
{
    const h5fpt_info_t *src = src_;
    h5fpt_info_t *dst = info_alloc();
    if (!dst) {
        H5FPT_ERR("out of memory copying the connector info");
        return NULL;
    }
    if (dst->opts)
        memcpy(dst->opts, src->opts, h5fpt_g_desc->opts_size);
    memcpy(dst->refused, src->refused, sizeof dst->refused);
    dst->under_vol_id = src->under_vol_id;
    H5Iinc_ref(dst->under_vol_id);
    if (src->under_vol_info &&
        H5VLcopy_connector_info(dst->under_vol_id, &dst->under_vol_info, src->under_vol_info) < 0) {
        h5fpt_info_free(dst);
        H5FPT_ERR("cannot copy the under connector's info");
        return NULL;
    }
    return dst;
}

herr_t h5fpt_info_cmp(int *cmp, const void *a_, const void *b_)
{
    const h5fpt_info_t *a = a_, *b = b_;
    *cmp = 0;
    if (H5VLcmp_connector_cls(cmp, a->under_vol_id, b->under_vol_id) < 0)
        return -1;
    if (*cmp)
        return 0;
    if (H5VLcmp_connector_info(cmp, a->under_vol_id, a->under_vol_info, b->under_vol_info) < 0)
        return -1;
    if (*cmp)
        return 0;
    if (h5fpt_g_desc->opts_size)
        *cmp = memcmp(a->opts, b->opts, h5fpt_g_desc->opts_size);
    if (!*cmp)
        *cmp = strcmp(a->refused, b->refused);
    return 0;
}

herr_t h5fpt_info_free(void *info_)
{
    h5fpt_info_t *info = info_;
    if (!info)
        return 0;
    hid_t err = H5Eget_current_stack();
    if (info->under_vol_info)
        H5VLfree_connector_info(info->under_vol_id, info->under_vol_info);
    if (info->under_vol_id >= 0)
        H5Idec_ref(info->under_vol_id);
    if (err >= 0)
        H5Eset_current_stack(err);
    free(info->opts);
    free(info);
    return 0;
}

herr_t h5fpt_info_to_str(const void *info_, char **str)
{
    const h5fpt_info_t *info = info_;
    H5VL_class_value_t value = -1;
    char *under = NULL;
    char opts[4096] = "";
    if (H5VLget_value(info->under_vol_id, &value) < 0)
        return -1;
    if (H5VLconnector_info_to_str(info->under_vol_info, info->under_vol_id, &under) < 0)
        return -1;
    if (h5fpt_g_desc->opts_size && h5fpt_g_desc->opts_to_str) {
        int n = h5fpt_g_desc->opts_to_str(info->opts, opts, sizeof opts - 1);
        if (n < 0) {
            H5free_memory(under);
            H5FPT_ERR("the connector's options do not fit in %zu bytes", sizeof opts);
            return -1;
        }
        if (n > 0)
            strcat(opts, ";");
    }
    size_t len = strlen(opts) + strlen(under ? under : "") + 64;
    *str = H5allocate_memory(len, false);
    if (*str)
        snprintf(*str, len, "%sunder_vol=%d;under_info={%s}", opts, (int)value, under ? under : "");
    H5free_memory(under);
    return *str ? 0 : -1;
}

/* Trim spaces at both ends of [*b, *e). */
static void trim(const char **b, const char **e)
{
    while (*b < *e && isspace((unsigned char)**b))
        ++*b;
    while (*e > *b && isspace((unsigned char)(*e)[-1]))
        --*e;
}

/* Record why an info string is refused (the first reason counts) and push it on the error stack. */
__attribute__((format(printf, 5, 6))) static void refuse(h5fpt_info_t *info, const char *file, const char *func,
                                                         unsigned line, const char *fmt, ...)
{
    char msg[sizeof info->refused];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!info->refused[0])
        snprintf(info->refused, sizeof info->refused, "%s", msg);
    h5fpt_error(file, func, line, "%s", msg);
}
#define REFUSE(info, ...) refuse(info, __FILE__, __func__, __LINE__, __VA_ARGS__)

/* HDF5's plugin cache keeps the name pointer a plugin was first loaded by (H5PL__add_plugin copies the key
 * shallowly) and compares later by-name searches against it: a name freed after
 * H5VLregister_connector_by_name leaves an entry that can match another search once its memory holds that
 * name, and the wrong plugin is stacked. Names handed to HDF5 are therefore kept here for the process's
 * life (a handful of short names; static storage, so never at an address HDF5 freed). */
#define KEPT_NAMES 16
#define KEPT_NAME_MAX 128
static char kept_names[KEPT_NAMES][KEPT_NAME_MAX];
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *kept_name(const char *name)
{
    const char *out = NULL;
    if (strlen(name) >= KEPT_NAME_MAX)
        return NULL;
    pthread_mutex_lock(&kept_lock);
    for (size_t i = 0; i < KEPT_NAMES && !out; i++) {
        if (!kept_names[i][0])
            memcpy(kept_names[i], name, strlen(name) + 1);
        if (!strcmp(kept_names[i], name))
            out = kept_names[i];
    }
    pthread_mutex_unlock(&kept_lock);
    return out;
}

/* A connector by name: the registered one of that name, else loaded as a plugin; and only if the connector
 * then registered under that name really is the one asked for. */
static hid_t register_by_name(const char *text)
{
    hid_t id = H5I_INVALID_HID;
    H5E_BEGIN_TRY
    {
        hid_t loaded = H5I_INVALID_HID;
        if (H5VLis_connector_registered_by_name(text) <= 0) {
            const char *name = kept_name(text);
            if (name)
                loaded = H5VLregister_connector_by_name(name, H5P_VOL_INITIALIZE_DEFAULT);
        }
        if (H5VLis_connector_registered_by_name(text) > 0)
            id = H5VLget_connector_id_by_name(text);
        if (loaded >= 0)
            H5VLclose(loaded); /* id (when set) holds the connector registered under that name */
    }
    H5E_END_TRY
    return id;
}

/* The under connector named by text: a registered value (digits) or a name. */
static hid_t register_under(h5fpt_info_t *info, const char *text)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    hid_t id;
    if (*text && end && *end == '\0' && errno == 0) {
        if (v < 0 || v > 65535) {
            REFUSE(info, "under_vol=%s: a connector value is between 0 and 65535", text);
            return H5I_INVALID_HID;
        }
        H5E_BEGIN_TRY { id = H5VLregister_connector_by_value((H5VL_class_value_t)v, H5P_VOL_INITIALIZE_DEFAULT); }
        H5E_END_TRY
    }
    else
        id = register_by_name(text);
    if (id < 0)
        REFUSE(info, "under_vol=%s: no such VOL connector (is it on HDF5_PLUGIN_PATH?)", text);
    return id;
}

/* One `key=value` item (not under_info). */
static int parse_item(h5fpt_info_t *info, const char *key, const char *value)
{
    if (!strcmp(key, "under_vol")) {
        hid_t id = register_under(info, value);
        if (id < 0)
            return -1;
        H5Idec_ref(info->under_vol_id);
        info->under_vol_id = id;
        return 0;
    }
    char err[512] = "";
    if (!h5fpt_g_desc->opts_size || !h5fpt_g_desc->opts_set) {
        REFUSE(info, "unknown setting '%s' (this connector takes only under_vol and under_info)", key);
        return -1;
    }
    if (h5fpt_g_desc->opts_set(info->opts, key, value, err, sizeof err) < 0) {
        REFUSE(info, "%s=%s: %s", key, value, err[0] ? err : "refused");
        return -1;
    }
    return 0;
}

/* Parse str into info (default on entry); -1 with the reason in info->refused. */
static int parse_info(const char *str, h5fpt_info_t *info)
{
    char *under_str = NULL;
    const char *p = str ? str : "";
    while (*p) {
        /* one item: up to a ';' outside braces */
        const char *b = p, *e = p;
        int depth = 0;
        while (*e && (depth > 0 || *e != ';')) {
            depth += (*e == '{') - (*e == '}');
            if (depth < 0)
                break;
            ++e;
        }
        if (depth != 0) {
            REFUSE(info, "unbalanced braces in the info string '%s'", str);
            goto fail;
        }
        p = *e ? e + 1 : e;
        trim(&b, &e);
        if (b == e)
            continue;
        const char *eq = memchr(b, '=', (size_t)(e - b));
        if (!eq) {
            REFUSE(info, "'%.*s' is not key=value (info string '%s')", (int)(e - b), b, str);
            goto fail;
        }
        const char *kb = b, *ke = eq, *vb = eq + 1, *ve = e;
        trim(&kb, &ke);
        trim(&vb, &ve);
        char key[64];
        if ((size_t)(ke - kb) >= sizeof key || ke == kb) {
            REFUSE(info, "bad key '%.*s' in the info string", (int)(ke - kb), kb);
            goto fail;
        }
        memcpy(key, kb, (size_t)(ke - kb));
        key[ke - kb] = '\0';
        if (!strcmp(key, "under_info")) {
            if (ve - vb < 2 || *vb != '{' || ve[-1] != '}') {
                REFUSE(info, "under_info must be {...}, got '%.*s'", (int)(ve - vb), vb);
                goto fail;
            }
            free(under_str);
            under_str = strndup(vb + 1, (size_t)(ve - vb - 2));
            if (!under_str)
                goto fail;
            continue;
        }
        char *value = strndup(vb, (size_t)(ve - vb));
        if (!value)
            goto fail;
        int rc = parse_item(info, key, value);
        free(value);
        if (rc < 0)
            goto fail;
    }
    if (under_str) {
        const char *u = under_str;
        while (isspace((unsigned char)*u))
            ++u;
        if (*u && H5VLconnector_str_to_info(u, info->under_vol_id, &info->under_vol_info) < 0) {
            REFUSE(info, "the under connector refused its info '%s'", u);
            goto fail;
        }
    }
    free(under_str);
    return 0;
fail:
    free(under_str);
    return -1;
}

herr_t h5fpt_info_from_str(const char *str, void **out)
{
    *out = NULL;
    h5fpt_info_t *info = h5fpt_info_default();
    if (!info)
        return -1;
    if (parse_info(str, info) < 0) {
        /* Keep the reason in the info and succeed: the library would otherwise drop a refused
         * HDF5_VOL_CONNECTOR string and use native, silently. Files opened with it fail instead. */
        H5Eclear2(H5E_DEFAULT); /* the reason stays in info->refused */
        if (!info->refused[0])
            snprintf(info->refused, sizeof info->refused, "the info string '%s' was refused", str ? str : "");
        if (info->under_vol_info) {
            H5VLfree_connector_info(info->under_vol_id, info->under_vol_info);
            info->under_vol_info = NULL;
        }
    }
    *out = info;
    return 0;
}

h5fpt_info_t *h5fpt_info_from_fapl(hid_t fapl_id)
{
    h5fpt_info_t *info = NULL;
    if (H5Pget_vol_info(fapl_id, (void **)&info) < 0) {
        H5FPT_ERR("cannot read the connector info from the file access list");
        return NULL;
    }
    if (info && info->refused[0]) {
        H5FPT_ERR("%s (fix HDF5_VOL_CONNECTOR or the info given to H5Pset_vol)", info->refused);
        h5fpt_info_free(info);
        return NULL;
    }
    return info ? info : h5fpt_info_default();
}

hid_t h5fpt_under_fapl(hid_t fapl_id, const h5fpt_info_t *info)
{
    hid_t under = H5Pcopy(fapl_id);
    if (under < 0)
        return H5I_INVALID_HID;
    if (H5Pset_vol(under, info->under_vol_id, info->under_vol_info) < 0) {
        H5Pclose(under);
        H5FPT_ERR("cannot set the under connector on the file access list");
        return H5I_INVALID_HID;
    }
    return under;
}

/* ---------------------------------------------------------------------------------- wrap context */

typedef struct wrap_ctx {
    hid_t under_vol_id;
    void *under_wrap_ctx;
    h5fpt_obj_t *origin; /* the object the context came from (held): the parent of what it wraps */
} wrap_ctx_t;

void *h5fpt_get_object(const void *obj)
{
    const h5fpt_obj_t *o = obj;
    return H5VLget_object(o->under_object, o->under_vol_id);
}

herr_t h5fpt_get_wrap_ctx(const void *obj, void **wrap_ctx)
{
    h5fpt_obj_t *o = (h5fpt_obj_t *)obj; /* the context holds a reference to it */
    if (o->under_vol_id < 0) { /* the connector's own request: nothing below to wrap for */
        *wrap_ctx = NULL;
        return 0;
    }
    wrap_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        H5FPT_ERR("out of memory for a wrap context");
        return -1;
    }
    ctx->under_vol_id = o->under_vol_id;
    H5Iinc_ref(ctx->under_vol_id);
    if (H5VLget_wrap_ctx(o->under_object, o->under_vol_id, &ctx->under_wrap_ctx) < 0) {
        H5Idec_ref(ctx->under_vol_id);
        free(ctx);
        return -1;
    }
    ctx->origin = o;
    h5fpt_obj_retain(o);
    *wrap_ctx = ctx;
    return 0;
}

void *h5fpt_wrap_object(void *obj, H5I_type_t obj_type, void *wrap_ctx)
{
    wrap_ctx_t *ctx = wrap_ctx;
    if (!ctx) {
        H5FPT_ERR("no wrap context to wrap an object with");
        return NULL;
    }
    void *under = H5VLwrap_object(obj, obj_type, ctx->under_vol_id, ctx->under_wrap_ctx);
    if (!under)
        return NULL;
    return h5fpt_obj_new(under, ctx->under_vol_id, obj_type, ctx->origin, NULL);
}

void *h5fpt_unwrap_object(void *obj)
{
    h5fpt_obj_t *o = obj;
    void *under = H5VLunwrap_object(o->under_object, o->under_vol_id);
    if (under)
        h5fpt_obj_release(o);
    return under;
}

herr_t h5fpt_free_wrap_ctx(void *wrap_ctx)
{
    wrap_ctx_t *ctx = wrap_ctx;
    if (!ctx)
        return 0;
    hid_t err = H5Eget_current_stack();
    if (ctx->under_wrap_ctx)
        H5VLfree_wrap_ctx(ctx->under_wrap_ctx, ctx->under_vol_id);
    H5Idec_ref(ctx->under_vol_id);
    h5fpt_obj_release(ctx->origin);
    if (err >= 0)
        H5Eset_current_stack(err);
    free(ctx);
    return 0;
}

/* ----------------------------------------------------------------------------------------- class */

herr_t h5fpt_class_init(H5VL_class_t *cls, const h5fpt_desc_t *desc)
{
    if (!desc || !desc->name || (desc->opts_size && (!desc->opts_set || !desc->opts_default)))
        return -1;
    h5fpt_g_desc = desc;
    g_cls = cls;
    *cls = (H5VL_class_t){
        .version = H5VL_VERSION,
        .value = desc->value,
        .name = desc->name,
        .conn_version = desc->conn_version,
        .cap_flags = desc->cap_flags,
        .initialize = core_initialize,
        .terminate = core_terminate,
        .info_cls = {sizeof(h5fpt_info_t), h5fpt_info_copy, h5fpt_info_cmp, h5fpt_info_free, h5fpt_info_to_str,
                     h5fpt_info_from_str},
        .wrap_cls = {h5fpt_get_object, h5fpt_get_wrap_ctx, h5fpt_wrap_object, h5fpt_unwrap_object,
                     h5fpt_free_wrap_ctx},
        .attr_cls = {h5fpt_attr_create, h5fpt_attr_open, h5fpt_attr_read, h5fpt_attr_write, h5fpt_attr_get,
                     h5fpt_attr_specific, h5fpt_attr_optional, h5fpt_attr_close},
        .dataset_cls = {h5fpt_dataset_create, h5fpt_dataset_open, h5fpt_dataset_read, h5fpt_dataset_write,
                        h5fpt_dataset_get, h5fpt_dataset_specific, h5fpt_dataset_optional, h5fpt_dataset_close},
        .datatype_cls = {h5fpt_datatype_commit, h5fpt_datatype_open, h5fpt_datatype_get,
                         h5fpt_datatype_specific, h5fpt_datatype_optional, h5fpt_datatype_close},
        .file_cls = {h5fpt_file_create, h5fpt_file_open, h5fpt_file_get, h5fpt_file_specific,
                     h5fpt_file_optional, h5fpt_file_close},
        .group_cls = {h5fpt_group_create, h5fpt_group_open, h5fpt_group_get, h5fpt_group_specific,
                      h5fpt_group_optional, h5fpt_group_close},
        .link_cls = {h5fpt_link_create, h5fpt_link_copy, h5fpt_link_move, h5fpt_link_get, h5fpt_link_specific,
                     h5fpt_link_optional},
        .object_cls = {h5fpt_object_open, h5fpt_object_copy, h5fpt_object_get, h5fpt_object_specific,
                       h5fpt_object_optional},
        .introspect_cls = {h5fpt_introspect_get_conn_cls, h5fpt_introspect_get_cap_flags,
                           h5fpt_introspect_opt_query},
        .request_cls = {h5fpt_request_wait, h5fpt_request_notify, h5fpt_request_cancel, h5fpt_request_specific,
                        h5fpt_request_optional, h5fpt_request_free},
        .blob_cls = {h5fpt_blob_put, h5fpt_blob_get, h5fpt_blob_specific, h5fpt_blob_optional},
        .token_cls = {h5fpt_token_cmp, h5fpt_token_to_str, h5fpt_token_from_str},
        .optional = h5fpt_optional,
    };
    return 0;
}
