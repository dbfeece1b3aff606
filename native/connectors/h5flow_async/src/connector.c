/* h5flow_async: the settings, the VOL class (the pass-through core with the data path replaced),
 * the order rules and the plugin entry points. docs/ASYNC.md says what it promises. */
#include "h5fa.h"

#include <H5PLextern.h>
#include <mpi.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------- settings */

#define DEFAULT_MAX_MEM (512ull << 20)
#define DEFAULT_ADAPT (1ull << 20)

static void opts_default(void *p)
{
    h5fa_opts_t *o = p;
    memset(o, 0, sizeof *o);
    o->max_mem = DEFAULT_MAX_MEM;
    o->implicit = 1;
    o->merge = 1;
    o->adapt = DEFAULT_ADAPT;
    o->explicit_copy = 1;
}

static int parse_bool(const char *v, int *out)
{
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "on") || !strcmp(v, "yes"))
        *out = 1;
    else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "off") || !strcmp(v, "no"))
        *out = 0;
    else
        return -1;
    return 0;
}

/* "64M", "1GiB", "4096": bytes */
static int parse_size(const char *v, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || errno || x <= 0)
        return -1;
    while (isspace((unsigned char)*end))
        end++;
    double mult = 1;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': mult = 1024.0; break;
    case 'M': mult = 1024.0 * 1024; break;
    case 'G': mult = 1024.0 * 1024 * 1024; break;
    case 'T': mult = 1024.0 * 1024 * 1024 * 1024; break;
    default: return -1;
    }
    if (*end) {
        const char *rest = end + 1;
        if (strcmp(rest, "") && strcmp(rest, "B") && strcmp(rest, "iB") && strcmp(rest, "b"))
            return -1;
    }
    *out = (uint64_t)(x * mult);
    return *out > 0 ? 0 : -1;
}

static int opts_set(void *p, const char *key, const char *value, char *err, size_t errlen)
{
    h5fa_opts_t *o = p;
    if (!strcmp(key, "max_mem")) {
        if (parse_size(value, &o->max_mem) < 0) {
            snprintf(err, errlen, "a size in bytes, with an optional K, M, G or T suffix (binary)");
            return -1;
        }
        return 0;
    }
    if (!strcmp(key, "adapt")) {
        if (!strcmp(value, "off") || !strcmp(value, "0"))
            o->adapt = 0;
        else if (parse_size(value, &o->adapt) < 0) {
            snprintf(err, errlen, "a size in bytes (optional K, M, G or T suffix, binary), or off");
            return -1;
        }
        return 0;
    }
    int *flag = !strcmp(key, "implicit")        ? &o->implicit
                : !strcmp(key, "merge")         ? &o->merge
                : !strcmp(key, "defer")         ? &o->defer
                : !strcmp(key, "explicit_copy") ? &o->explicit_copy
                                                : NULL;
    if (flag) {
        if (parse_bool(value, flag) < 0) {
            snprintf(err, errlen, "1 or 0 (true/false, on/off)");
            return -1;
        }
        return 0;
    }
    if (!strcmp(key, "stats")) {
        if (strlen(value) >= sizeof o->stats) {
            snprintf(err, errlen, "a path of at most %zu bytes", sizeof o->stats - 1);
            return -1;
        }
        strcpy(o->stats, value);
        return 0;
    }
    snprintf(err, errlen, "unknown setting (h5flow_async takes max_mem, implicit, merge, defer, adapt, "
                          "explicit_copy, stats, under_vol, under_info)");
    return -1;
}

static int opts_to_str(const void *p, char *buf, size_t len)
{
    const h5fa_opts_t *o = p;
    int n = snprintf(buf, len, "max_mem=%llu;implicit=%d;merge=%d;defer=%d;adapt=%llu;explicit_copy=%d%s%s",
                     (unsigned long long)o->max_mem, o->implicit, o->merge, o->defer, (unsigned long long)o->adapt,
                     o->explicit_copy, o->stats[0] ? ";stats=" : "", o->stats);
    return (n < 0 || (size_t)n >= len) ? -1 : n;
}

/* ---------------------------------------------------------------------------------- object hooks */

static herr_t obj_init(h5fpt_obj_t *obj, const h5fpt_obj_t *parent, const h5fpt_info_t *info)
{
    h5fa_ext_t *e = calloc(1, sizeof *e);
    if (!e) {
        H5FPT_ERR("out of memory for an object's state");
        return -1;
    }
    h5fa_file_t *f = h5fa_file_of(parent);
    if (f)
        h5fa_file_retain(f);
    else if (info) {
        f = h5fa_file_new(info->opts);
        if (!f) {
            free(e);
            H5FPT_ERR("out of memory for a file's state");
            return -1;
        }
    }
    else {
        free(e);
        H5FPT_ERR("an object without a file (internal)");
        return -1;
    }
    e->file = f;
    obj->ext = e;
    return 0;
}

static void obj_fini(h5fpt_obj_t *obj)
{
    h5fa_ext_t *e = obj->ext;
    if (e)
        h5fa_file_release(e->file);
    free(e);
    obj->ext = NULL;
}

/* Looked up on the application's thread (inside an HDF5 call) the first time a wait or a queued operation
 * needs it; a file handle's number comes from its open. */
bool h5fa_identity_of(const h5fpt_obj_t *o, unsigned long *fileno, H5O_token_t *token)
{
    h5fa_ext_t *e = o ? o->ext : NULL;
    if (!e || o->type == H5I_FILE)
        return false;
    if (e->fileno_state == 0) { /* looked up once per handle */
        H5O_info2_t oi;
        memset(&oi, 0, sizeof oi);
        H5VL_object_get_args_t ga = {.op_type = H5VL_OBJECT_GET_INFO};
        ga.args.get_info.oinfo = &oi;
        ga.args.get_info.fields = H5O_INFO_BASIC;
        H5VL_loc_params_t loc = {.type = H5VL_OBJECT_BY_SELF, .obj_type = o->type};
        herr_t rc;
        H5E_BEGIN_TRY
        {
            rc = H5VLobject_get(o->under_object, &loc, o->under_vol_id, &ga, H5P_DATASET_XFER_DEFAULT, NULL);
        }
        H5E_END_TRY
        e->fileno = oi.fileno;
        e->token = oi.token;
        e->fileno_state = rc >= 0 ? 1 : -1;
    }
    *fileno = e->fileno;
    *token = e->token;
    return e->fileno_state > 0;
}

bool h5fa_fileno_of(const h5fpt_obj_t *o, unsigned long *fileno)
{
    h5fa_ext_t *e = o ? o->ext : NULL;
    if (!e)
        return false;
    if (o->type == H5I_FILE) {
        *fileno = e->file->fileno;
        return e->file->fileno_ok;
    }
    H5O_token_t token;
    return h5fa_identity_of(o, fileno, &token);
}

/* Whether an operation must wait for the queued ones first. On a parallel file every operation does
 * (collectives in program order on every rank); on a serial file the ones that do not depend on
 * dataset contents run beside the queue. */
static bool needs_drain(const h5fpt_call_t *c, const h5fa_file_t *f)
{
    switch (c->op) {
    case H5FPT_INTROSPECT_GET_CONN_CLS:
    case H5FPT_INTROSPECT_GET_CAP_FLAGS:
    case H5FPT_INTROSPECT_OPT_QUERY:
    case H5FPT_TOKEN_CMP:
    case H5FPT_TOKEN_TO_STR:
    case H5FPT_TOKEN_FROM_STR:
    case H5FPT_REQUEST_WAIT:
    case H5FPT_REQUEST_NOTIFY:
    case H5FPT_REQUEST_CANCEL:
    case H5FPT_REQUEST_SPECIFIC:
    case H5FPT_REQUEST_OPTIONAL:
    case H5FPT_REQUEST_FREE: return false;
    case H5FPT_FILE_CREATE:
    case H5FPT_FILE_OPEN: return true;
    /* the class's own read and write wait for what they depend on (fa_dataset_read, fa_dataset_write) */
    case H5FPT_DATASET_READ:
    case H5FPT_DATASET_WRITE: return false;
    default: break;
    }
    if (!f || f->parallel)
        return f != NULL;
    switch (c->op) {
    case H5FPT_ATTR_CREATE:
    case H5FPT_ATTR_OPEN:
    case H5FPT_ATTR_READ:
    case H5FPT_ATTR_WRITE:
    case H5FPT_ATTR_GET:
    case H5FPT_ATTR_SPECIFIC:
    case H5FPT_ATTR_CLOSE:
    case H5FPT_DATASET_CREATE:
    case H5FPT_DATASET_OPEN:
    case H5FPT_DATATYPE_COMMIT:
    case H5FPT_DATATYPE_OPEN:
    case H5FPT_DATATYPE_GET:
    case H5FPT_DATATYPE_CLOSE:
    case H5FPT_FILE_GET:
    case H5FPT_GROUP_CREATE:
    case H5FPT_GROUP_OPEN:
    case H5FPT_GROUP_GET:
    case H5FPT_GROUP_OPTIONAL:
    case H5FPT_GROUP_CLOSE:
    case H5FPT_LINK_CREATE:
    case H5FPT_LINK_GET:
    case H5FPT_OBJECT_OPEN:
    case H5FPT_OBJECT_GET: return false;
    case H5FPT_DATASET_GET: {
        const H5VL_dataset_get_args_t *a = c->args;
        return a && (a->op_type == H5VL_DATASET_GET_STORAGE_SIZE || a->op_type == H5VL_DATASET_GET_SPACE_STATUS);
    }
    case H5FPT_LINK_SPECIFIC: {
        const H5VL_link_specific_args_t *a = c->args;
        return !a || a->op_type == H5VL_LINK_DELETE;
    }
    case H5FPT_OBJECT_SPECIFIC: {
        const H5VL_object_specific_args_t *a = c->args;
        return !a || !(a->op_type == H5VL_OBJECT_EXISTS || a->op_type == H5VL_OBJECT_LOOKUP ||
                       a->op_type == H5VL_OBJECT_VISIT);
    }
    default: return true;
    }
}

/* Before a call that needs queued work done: a file create or open waits for the whole queue (an open may
 * read what queued writes still change, and the file number of a path is not known before it opens); any
 * other call waits for what its file depends on (h5fa_wait_for). */
static void observe(h5fpt_call_t *c)
{
    if (c->after)
        return;
    const h5fpt_obj_t *o = c->obj && c->obj->type != H5I_BADID ? c->obj : NULL;
    h5fa_file_t *f = h5fa_file_of(o);
    if (!needs_drain(c, f))
        return;
    if (f)
        h5fa_wait_for(f, o);
    else
        h5fa_drain();
}

static herr_t initialize(hid_t vipl_id)
{
    (void)vipl_id;
    return 0;
}

static herr_t terminate(void)
{
    h5fa_queue_stop(); /* no MPI here: H5close may run inside MPI_Finalize */
    return 0;
}

static const h5fpt_desc_t desc = {
    .name = H5FA_NAME,
    .value = H5FA_VALUE,
    .conn_version = 1,
    .cap_flags = H5VL_CAP_FLAG_ASYNC,
    .opts_size = sizeof(h5fa_opts_t),
    .opts_default = opts_default,
    .opts_set = opts_set,
    .opts_to_str = opts_to_str,
    .obj_init = obj_init,
    .obj_fini = obj_fini,
    .observe = observe,
    .initialize = initialize,
    .terminate = terminate,
};

/* ------------------------------------------------------------------------------------ callbacks */

static const char *thread_level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
    }
}

/* A file on a driver that uses MPI (MPI-IO, subfiling, its I/O concentrator) gets MPI calls from the
 * background thread beside the application's: MPI must provide MPI_THREAD_MULTIPLE.
 *
 * The driver is asked for its feature flags instead of being compared with H5FD_MPIO and H5FD_SUBFILING:
 * those macros register their driver on first use, and registering the subfiling driver initializes MPI
 * (MPI_Init_thread plus an atexit MPI_Finalize) in a program that never asked for it: tens of milliseconds
 * at the first file open of every serial program, and an MPI the program can no longer initialize itself. */
static int check_parallel(const char *name, hid_t fapl_id, bool *parallel)
{
    hid_t drv = H5Pget_driver(fapl_id);
    unsigned long features = 0;
    *parallel = drv >= 0 && H5FDdriver_query(drv, &features) >= 0 && (features & H5FD_FEAT_HAS_MPI);
    if (!*parallel)
        return 0;
    int init = 0, level = MPI_THREAD_SINGLE;
    MPI_Initialized(&init);
    if (init)
        MPI_Query_thread(&level);
    if (init && level == MPI_THREAD_MULTIPLE)
        return 0;
    H5FPT_ERR("'%s' is opened with MPI-IO and h5flow_async makes MPI calls from its background thread: MPI must "
              "provide MPI_THREAD_MULTIPLE, it provides %s; initialize MPI with MPI_Init_thread(..., "
              "MPI_THREAD_MULTIPLE, ...) (mpi4py does unless mpi4py.rc.thread_level is changed)",
              name, init ? thread_level_name(level) : "nothing (MPI is not initialized)");
    return -1;
}

static void *file_open_common(int create, const char *name, unsigned flags, hid_t fcpl_id, hid_t fapl_id,
                              hid_t dxpl_id, void **req)
{
    bool parallel = false;
    if (check_parallel(name, fapl_id, &parallel) < 0)
        return NULL;
    h5fpt_obj_t *o = create ? h5fpt_file_create(name, flags, fcpl_id, fapl_id, dxpl_id, req)
                            : h5fpt_file_open(name, flags, fapl_id, dxpl_id, req);
    if (o) {
        h5fa_file_t *f = h5fa_file_of(o);
        f->parallel = parallel;
        snprintf(f->name, sizeof f->name, "%s", name);
        H5VL_file_get_args_t ga = {.op_type = H5VL_FILE_GET_FILENO};
        ga.args.get_fileno.fileno = &f->fileno;
        H5E_BEGIN_TRY
        {
            f->fileno_ok = H5VLfile_get(o->under_object, o->under_vol_id, &ga, H5P_DATASET_XFER_DEFAULT, NULL) >= 0;
        }
        H5E_END_TRY
    }
    return o;
}

static void *fa_file_create(const char *name, unsigned flags, hid_t fcpl_id, hid_t fapl_id, hid_t dxpl_id,
                            void **req)
{
    return file_open_common(1, name, flags, fcpl_id, fapl_id, dxpl_id, req);
}

static void *fa_file_open(const char *name, unsigned flags, hid_t fapl_id, hid_t dxpl_id, void **req)
{
    return file_open_common(0, name, flags, H5P_DEFAULT, fapl_id, dxpl_id, req);
}

static herr_t fa_dataset_write(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                               hid_t file_space_id[], hid_t dxpl_id, const void *buf[], void **req)
{
    int rc = count ? h5fa_queue_write(count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id, buf, req) : 1;
    if (rc <= 0)
        return rc;
    /* at the call, after what was queued before it for the files of its datasets */
    for (size_t i = 0; i < count; i++)
        h5fa_wait_for(h5fa_file_of(dset[i]), dset[i]);
    herr_t ret = h5fpt_dataset_write(count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id, buf, req);
    h5fa_count_at_call(h5fa_file_of(dset[0]), count);
    return ret;
}

static herr_t fa_dataset_read(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                              hid_t file_space_id[], hid_t dxpl_id, void *buf[], void **req)
{
    h5fa_file_t *f = count ? h5fa_file_of(dset[0]) : NULL;
    if (req && f) {
        if (h5fa_check(f) < 0)
            return -1;
        int rc = h5fa_queue_read(count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id, buf, req);
        if (rc <= 0)
            return rc;
    }
    for (size_t i = 1; i < count; i++) /* datasets of other files in the same call */
        h5fa_wait_for(h5fa_file_of(dset[i]), dset[i]);
    if (f && h5fa_wait_and_check(f, dset[0]) < 0)
        return -1; /* the data would miss a write that failed */
    return h5fpt_dataset_read(count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id, buf, req);
}

static herr_t fa_dataset_specific(void *obj, H5VL_dataset_specific_args_t *args, hid_t dxpl_id, void **req)
{
    if (h5fa_wait_and_check(h5fa_file_of(obj), obj) < 0)
        return -1;
    return h5fpt_dataset_specific(obj, args, dxpl_id, req);
}

static herr_t fa_file_specific(void *obj, H5VL_file_specific_args_t *args, hid_t dxpl_id, void **req)
{
    if (args->op_type == H5VL_FILE_FLUSH && h5fa_wait_and_check(h5fa_file_of(obj), obj) < 0)
        return -1;
    return h5fpt_file_specific(obj, args, dxpl_id, req);
}

/* A failure never reported fails the close, and the close changes nothing: the handle and the file below
 * stay open and usable (an object of the file used after a close that closed the file below would reach
 * freed state), and the next close, the failure now reported, closes it (library shutdown does too). */
static herr_t fa_file_close(void *obj, hid_t dxpl_id, void **req)
{
    h5fa_file_t *f = h5fa_file_of(obj);
    h5fa_wait_for(f, obj);
    if (h5fa_check(f) < 0)
        return -1;
    h5fa_write_stats(f);
    return h5fpt_file_close(obj, dxpl_id, req);
}

/* ------------------------------------------------------------------------------------- the class */

static H5VL_class_t cls;
static pthread_once_t cls_once = PTHREAD_ONCE_INIT;
static int cls_ok;

static void build_class(void)
{
    if (h5fpt_class_init(&cls, &desc) < 0)
        return;
    cls.file_cls.create = fa_file_create;
    cls.file_cls.open = fa_file_open;
    cls.file_cls.specific = fa_file_specific;
    cls.file_cls.close = fa_file_close;
    cls.dataset_cls.write = fa_dataset_write;
    cls.dataset_cls.read = fa_dataset_read;
    cls.dataset_cls.specific = fa_dataset_specific;
    cls.request_cls = (H5VL_request_class_t){h5fa_request_wait,     h5fa_request_notify,   h5fa_request_cancel,
                                             h5fa_request_specific, h5fa_request_optional, h5fa_request_free};
    cls_ok = 1;
}

__attribute__((visibility("default"))) H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_VOL; }

__attribute__((visibility("default"))) const void *H5PLget_plugin_info(void)
{
    pthread_once(&cls_once, build_class);
    return cls_ok ? &cls : NULL;
}
