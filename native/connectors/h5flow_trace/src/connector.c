/* h5flow_trace: a pass-through VOL connector that records every callback (docs/TRACE.md).
 *
 * Built on the shared pass-through core (native/connectors/passthru): every callback forwards to the connector
 * below. The core's observer times each forwarded call and records it; the callbacks whose records carry more
 * (file create/open, dataset create/open/read/write, attribute create/open/read/write, group create/open, object
 * open) are overridden here, record themselves, and are skipped by the observer.
 *
 * State: the trace is one per process (one file per rank), so the writer, its lock and the one transfer whose
 * "actual I/O mode" is read back after its API call returns are process-wide; everything about an object (its
 * file, path and datatype) lives in the wrapper's extension.
 *
 * One file on purpose, though it is long: the overrides and the observer are the connector's callbacks,
 * each a few lines of forward-then-record over the same process-wide trace; the trace file's format and the
 * descriptions of objects already live apart (trace_file.c, describe.c). */
#include "describe.h"
#include "h5fpt.h"
#include "trace_file.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define H5FT_NAME "h5flow_trace"
#define H5FT_VALUE 314 /* in the 256-511 range HDF5 reserves for testing new connectors */
#define H5FT_DIR_MAX 1024

typedef struct {
    char dir[H5FT_DIR_MAX];
    unsigned block;
} h5ft_opts_t;

/* What the trace knows about an object. */
typedef struct {
    uint32_t file;  /* string id of the file name */
    uint32_t path;  /* string id of the object path */
    char *pathstr;  /* the path, to build children's paths */
    unsigned char *type; /* dataset/attribute: its file datatype, H5Tencode'd (a held datatype id would
                            count among the program's open objects), else NULL */
    size_t type_len;
    uint32_t type_sid;
    int io_info;    /* file and its objects: the actual I/O mode can be read back (MPI-IO under native) */
} h5ft_ext_t;

/* ---- process-wide trace ------------------------------------------------------------------------- */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static h5ft_writer *g_writer;
static int g_open_failed;
static char g_open_err[768];    /* why the trace could not be opened (pushed on the failing open's stack) */
static unsigned long g_anonymous; /* objects created without a name so far: their placeholder paths */
/* The last transfer whose actual I/O mode HDF5 writes to its DXPL when the API call returns. */
static struct {
    hid_t dxpl;
    h5ft_record *slot;
    size_t n;
} g_pending = {H5I_INVALID_HID, NULL, 0};

static uint32_t intern(const char *s)
{
    uint32_t id = g_writer ? h5ft_writer_intern(g_writer, s) : 0;
    return id == UINT32_MAX ? 0 : id;
}

static void rank_of(unsigned *rank, unsigned *nranks)
{
    int init = 0, fin = 0;
    *rank = 0;
    *nranks = 1;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (init && !fin) {
        int r = 0, n = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
        MPI_Comm_size(MPI_COMM_WORLD, &n);
        *rank = (unsigned)r;
        *nranks = (unsigned)n;
    }
}

/* Under g_lock. 0 when the writer is open. */
static int ensure_writer(const h5ft_opts_t *opts)
{
    if (g_writer)
        return 0;
    if (g_open_failed)
        return -1;
    const char *dir = opts && opts->dir[0] ? opts->dir : getenv("H5FLOW_TRACE_DIR");
    if (!dir || !*dir)
        dir = "h5flow-trace";
    size_t block = opts ? opts->block : 0;
    const char *b = getenv("H5FLOW_TRACE_BLOCK");
    if (!block && b && *b) {
        char *end = NULL;
        unsigned long v = strtoul(b, &end, 10);
        if (*end || v == 0 || v > (1ul << 24)) {
            g_open_failed = 1;
            snprintf(g_open_err, sizeof g_open_err,
                     "H5FLOW_TRACE_BLOCK=%s: give a number of records per block, 1 to 16777216", b);
            return -1;
        }
        block = v;
    }
    unsigned rank, nranks;
    rank_of(&rank, &nranks);
    char err[512];
    g_writer = h5ft_writer_open(dir, rank, nranks, block, err, sizeof err);
    if (!g_writer) {
        g_open_failed = 1;
        snprintf(g_open_err, sizeof g_open_err,
                 "%s (set H5FLOW_TRACE_DIR or dir= in the connector string to a writable directory)", err);
        return -1;
    }
    return 0;
}

static uint8_t io_mode_code(H5D_mpio_actual_io_mode_t m)
{
    switch (m) {
    case H5D_MPIO_NO_COLLECTIVE: return 1;
    case H5D_MPIO_CHUNK_INDEPENDENT: return 2;
    case H5D_MPIO_CHUNK_COLLECTIVE: return 3;
    case H5D_MPIO_CHUNK_MIXED: return 4;
    case H5D_MPIO_CONTIGUOUS_COLLECTIVE: return 5;
    default: return 0;
    }
}

/* Under g_lock: the previous transfer's API call has returned; its DXPL now holds what HDF5 did. */
static void resolve_pending(void)
{
    if (g_pending.dxpl == H5I_INVALID_HID)
        return;
    H5D_mpio_actual_io_mode_t mode;
    uint32_t local = 0, global = 0;
    H5E_BEGIN_TRY
    {
        if (H5Pget_mpio_actual_io_mode(g_pending.dxpl, &mode) >= 0 &&
            H5Pget_mpio_no_collective_cause(g_pending.dxpl, &local, &global) >= 0) {
            for (size_t i = 0; i < g_pending.n; i++) {
                g_pending.slot[i].io_actual = io_mode_code(mode);
                g_pending.slot[i].no_coll_local = local;
                g_pending.slot[i].no_coll_global = global;
            }
        }
        H5Idec_ref(g_pending.dxpl);
    }
    H5E_END_TRY
    g_pending.dxpl = H5I_INVALID_HID;
    g_pending.slot = NULL;
    g_pending.n = 0;
}

static const h5ft_ext_t *ext_of(const void *obj)
{
    return obj ? (const h5ft_ext_t *)((const h5fpt_obj_t *)obj)->ext : NULL;
}

static void fill_loc(h5ft_record *r, const h5ft_ext_t *e)
{
    if (e) {
        r->file = e->file;
        r->obj = e->path;
    }
}

/* ---- extensions ------------------------------------------------------------------------------- */
static herr_t obj_init(h5fpt_obj_t *obj, const h5fpt_obj_t *parent, const h5fpt_info_t *info)
{
    (void)info;
    h5ft_ext_t *e = calloc(1, sizeof *e);
    if (!e) {
        H5FPT_ERR("out of memory");
        return -1;
    }
    const h5ft_ext_t *pe = parent ? (const h5ft_ext_t *)parent->ext : NULL;
    if (pe) {
        e->file = pe->file;
        e->io_info = pe->io_info;
    }
    obj->ext = e;
    return 0;
}

static void obj_fini(h5fpt_obj_t *obj)
{
    h5ft_ext_t *e = obj->ext;
    if (!e)
        return;
    free(e->type);
    free(e->pathstr);
    free(e);
    obj->ext = NULL;
}

/* Under g_lock: the path of `name` at loc relative to the object parent (NULL name: the object itself). */
static void set_path(h5ft_ext_t *e, const h5ft_ext_t *parent, const char *name, const char *sep)
{
    const char *base = parent && parent->pathstr ? parent->pathstr : "";
    size_t n = strlen(base) + (name ? strlen(name) : 0) + 4;
    char *p = malloc(n);
    if (!p)
        return;
    if (!name) {
        /* anonymous (H5Dcreate_anon): a placeholder until a hard link names it (see tr_link_create) */
        free(p);
        n = 32;
        if (!(p = malloc(n)))
            return;
        snprintf(p, n, "#anonymous-%lu", ++g_anonymous);
    } else if (name[0] == '/')
        snprintf(p, n, "%s", name);
    else if (!strcmp(sep, "/@"))
        snprintf(p, n, "%s/@%s", strcmp(base, "/") ? base : "", name);
    else if (!strcmp(base, "/") || !*base)
        snprintf(p, n, "/%s", name);
    else
        snprintf(p, n, "%s/%s", base, name);
    free(e->pathstr);
    e->pathstr = p;
    e->path = intern(p);
}

static const char *loc_name(const H5VL_loc_params_t *loc, const char *name)
{
    if (name)
        return name;
    if (loc && loc->type == H5VL_OBJECT_BY_NAME)
        return loc->loc_data.loc_by_name.name;
    return NULL;
}

/* type's encoding, in a malloc'd buffer (*len bytes), or NULL. */
static unsigned char *encode_type(hid_t type, size_t *len)
{
    size_t n = 0;
    unsigned char *buf = NULL;
    H5E_BEGIN_TRY
    {
        if (type >= 0 && H5Tencode(type, NULL, &n) >= 0 && n > 0 && (buf = malloc(n)) != NULL &&
            H5Tencode(type, buf, &n) < 0) {
            free(buf);
            buf = NULL;
        }
    }
    H5E_END_TRY
    *len = buf ? n : 0;
    return buf;
}

/* Whether mem_type differs from the file datatype encoded in e (a datatype conversion on the transfer). */
static int converts(const h5ft_ext_t *e, hid_t mem_type)
{
    if (!e || !e->type || mem_type < 0)
        return 0;
    size_t n = 0;
    unsigned char *m = encode_type(mem_type, &n);
    int differ = 1;
    if (m && n == e->type_len && !memcmp(m, e->type, n))
        differ = 0;
    else {
        /* the same type can encode differently (a committed one, for example): compare the decoded types */
        H5E_BEGIN_TRY
        {
            hid_t ft = H5Tdecode(e->type);
            if (ft >= 0) {
                differ = H5Tequal(mem_type, ft) <= 0;
                H5Tclose(ft);
            }
        }
        H5E_END_TRY
    }
    free(m);
    return differ;
}

static void set_type(h5ft_ext_t *e, hid_t type)
{
    char buf[64];
    free(e->type);
    e->type = encode_type(type, &e->type_len);
    h5ft_type_str(type, buf, sizeof buf);
    e->type_sid = intern(buf);
}

/* ---- the observer: every callback not recorded by an override ---------------------------------- */
static int overridden(h5fpt_op_t op)
{
    switch (op) {
    case H5FPT_FILE_CREATE: case H5FPT_FILE_OPEN: case H5FPT_DATASET_CREATE: case H5FPT_DATASET_OPEN:
    case H5FPT_DATASET_READ: case H5FPT_DATASET_WRITE: case H5FPT_ATTR_CREATE: case H5FPT_ATTR_OPEN:
    case H5FPT_ATTR_READ: case H5FPT_ATTR_WRITE: case H5FPT_GROUP_CREATE: case H5FPT_GROUP_OPEN:
    case H5FPT_OBJECT_OPEN: case H5FPT_LINK_CREATE:
    /* forwarded, not recorded: called many times inside one user call, no I/O */
    case H5FPT_INTROSPECT_GET_CONN_CLS: case H5FPT_INTROSPECT_GET_CAP_FLAGS: case H5FPT_INTROSPECT_OPT_QUERY:
    case H5FPT_BLOB_PUT: case H5FPT_BLOB_GET: case H5FPT_BLOB_SPECIFIC: case H5FPT_BLOB_OPTIONAL:
    case H5FPT_TOKEN_CMP: case H5FPT_TOKEN_TO_STR: case H5FPT_TOKEN_FROM_STR:
        return 1;
    default: return 0;
    }
}

/* h5fpt_op_t order -> the trace's operation codes (docs/TRACE.md "Operation codes") */
static uint16_t op_code(h5fpt_op_t op)
{
    static const uint16_t base[] = {
        [H5FPT_ATTR_CREATE] = 1,       [H5FPT_DATASET_CREATE] = 10,         [H5FPT_DATATYPE_COMMIT] = 20,
        [H5FPT_FILE_CREATE] = 30,      [H5FPT_GROUP_CREATE] = 40,           [H5FPT_LINK_CREATE] = 50,
        [H5FPT_OBJECT_OPEN] = 60,      [H5FPT_INTROSPECT_GET_CONN_CLS] = 70, [H5FPT_REQUEST_WAIT] = 80,
        [H5FPT_BLOB_PUT] = 90,         [H5FPT_TOKEN_CMP] = 100,             [H5FPT_OPTIONAL] = 110,
    };
    /* the first op of each class and its code; ops of a class are consecutive in both lists */
    static const h5fpt_op_t first[] = {H5FPT_ATTR_CREATE,    H5FPT_DATASET_CREATE, H5FPT_DATATYPE_COMMIT,
                                       H5FPT_FILE_CREATE,    H5FPT_GROUP_CREATE,   H5FPT_LINK_CREATE,
                                       H5FPT_OBJECT_OPEN,    H5FPT_INTROSPECT_GET_CONN_CLS,
                                       H5FPT_REQUEST_WAIT,   H5FPT_BLOB_PUT,       H5FPT_TOKEN_CMP,
                                       H5FPT_OPTIONAL};
    h5fpt_op_t f = first[0];
    for (size_t i = 0; i < sizeof first / sizeof first[0]; i++)
        if (first[i] <= op)
            f = first[i];
    return (uint16_t)(base[f] + (op - f));
}

static void observe(h5fpt_call_t *c)
{
    if (overridden(c->op))
        return;
    if (!c->after) {
        c->scratch = 0;
        pthread_mutex_lock(&g_lock);
        resolve_pending();
        if (g_writer)
            c->scratch = h5ft_now(g_writer);
        pthread_mutex_unlock(&g_lock);
        return;
    }
    pthread_mutex_lock(&g_lock);
    if (g_writer) {
        h5ft_record r = {0};
        r.t0_ns = c->scratch;
        r.t1_ns = h5ft_now(g_writer);
        r.op = op_code(c->op);
        r.ncount = 1;
        r.flags = c->failed ? H5FT_FLAG_FAILED : 0;
        fill_loc(&r, ext_of(c->obj));
        if (c->name && (c->op == H5FPT_DATATYPE_COMMIT || c->op == H5FPT_DATATYPE_OPEN))
            r.obj = intern(c->name);
        h5ft_writer_add(g_writer, &r);
    }
    pthread_mutex_unlock(&g_lock);
}

/* ---- overrides ---------------------------------------------------------------------------------- */
typedef struct {
    uint64_t t0;
} span_t;

static span_t begin(void)
{
    span_t s = {0};
    pthread_mutex_lock(&g_lock);
    resolve_pending();
    if (g_writer)
        s.t0 = h5ft_now(g_writer);
    pthread_mutex_unlock(&g_lock);
    return s;
}

/* Under g_lock (taken by the caller). */
static h5ft_record *add(const span_t *s, uint16_t op, int failed, const h5ft_ext_t *e, h5ft_record *r)
{
    if (!g_writer)
        return NULL;
    r->t0_ns = s->t0;
    r->t1_ns = h5ft_now(g_writer);
    r->op = op;
    if (!r->ncount)
        r->ncount = 1;
    if (failed)
        r->flags |= H5FT_FLAG_FAILED;
    if (e && !r->file)
        fill_loc(r, e);
    return h5ft_writer_add(g_writer, r);
}

static int file_io_info(void *under, hid_t under_vol_id, hid_t fapl_id)
{
    /* HDF5 sets the actual I/O mode for MPI-IO files of the native connector only */
    if (H5Pget_driver(fapl_id) != H5FD_MPIO)
        return 0;
    const H5VL_class_t *cls = NULL;
    herr_t rc;
    H5E_BEGIN_TRY { rc = H5VLintrospect_get_conn_cls(under, under_vol_id, H5VL_GET_CONN_LVL_TERM, &cls); }
    H5E_END_TRY
    return rc >= 0 && cls && cls->value == H5_VOL_NATIVE;
}

/* An MPI-IO file is opened by every rank of its communicator together: a rank whose trace could not be
 * opened must not leave the others waiting in the collective open. All ranks learn whether every trace is
 * open: 0 when all are (or the file is not MPI-IO), else 1 + the lowest failing rank in the communicator. */
static int agree_on_trace(hid_t fapl_id, int ok)
{
    if (H5Pget_driver(fapl_id) != H5FD_MPIO)
        return 0;
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Info minfo = MPI_INFO_NULL;
    int rank = 0, failed = INT_MAX, first = INT_MAX;
    herr_t rc;
    H5E_BEGIN_TRY { rc = H5Pget_fapl_mpio(fapl_id, &comm, &minfo); }
    H5E_END_TRY
    if (rc < 0 || comm == MPI_COMM_NULL)
        return 0; /* the open itself reports a broken file access property list */
    MPI_Comm_rank(comm, &rank);
    if (!ok)
        failed = rank;
    MPI_Allreduce(&failed, &first, 1, MPI_INT, MPI_MIN, comm);
    if (minfo != MPI_INFO_NULL)
        MPI_Info_free(&minfo);
    MPI_Comm_free(&comm);
    return first == INT_MAX ? 0 : first + 1;
}

static void *file_open_common(int create, const char *name, unsigned flags, hid_t fcpl_id, hid_t fapl_id,
                              hid_t dxpl_id, void **req)
{
    h5fpt_info_t *info = h5fpt_info_from_fapl(fapl_id);
    if (!info)
        return NULL;
    pthread_mutex_lock(&g_lock);
    int ok = ensure_writer(info->opts) == 0;
    pthread_mutex_unlock(&g_lock);
    h5fpt_info_free(info);
    int failed = agree_on_trace(fapl_id, ok);
    /* pushed after the last HDF5 call here: an API call empties the error stack */
    if (!ok) {
        H5FPT_ERR("%s", g_open_err);
        return NULL;
    }
    if (failed) {
        H5FPT_ERR("the trace of rank %d (of this file's communicator) could not be opened (that rank says why); "
                  "no rank opens the file", failed - 1);
        return NULL;
    }
    span_t s = begin();
    h5fpt_obj_t *f = create ? h5fpt_file_create(name, flags, fcpl_id, fapl_id, dxpl_id, req)
                            : h5fpt_file_open(name, flags, fapl_id, dxpl_id, req);
    char props[2048];
    h5ft_fapl_json(fapl_id, props, sizeof props);
    pthread_mutex_lock(&g_lock);
    h5ft_record r = {0};
    r.file = intern(name);
    r.obj = intern("/");
    r.props = intern(props);
    if (f && f->ext) {
        h5ft_ext_t *e = f->ext;
        e->file = r.file;
        e->io_info = file_io_info(f->under_object, f->under_vol_id, fapl_id);
        set_path(e, NULL, "/", "/");
    }
    add(&s, create ? 30 : 31, f == NULL, NULL, &r);
    pthread_mutex_unlock(&g_lock);
    return f;
}

static void *tr_file_create(const char *name, unsigned flags, hid_t fcpl_id, hid_t fapl_id, hid_t dxpl_id,
                            void **req)
{
    return file_open_common(1, name, flags, fcpl_id, fapl_id, dxpl_id, req);
}

static void *tr_file_open(const char *name, unsigned flags, hid_t fapl_id, hid_t dxpl_id, void **req)
{
    return file_open_common(0, name, flags, H5P_DEFAULT, fapl_id, dxpl_id, req);
}

/* A new object (group, dataset, attribute, object open) at loc/name of parent: record and name it. */
static void opened(const span_t *s, uint16_t op, h5fpt_obj_t *parent, h5fpt_obj_t *o, const char *name,
                   const char *sep, h5ft_record *r)
{
    const h5ft_ext_t *pe = ext_of(parent);
    pthread_mutex_lock(&g_lock);
    if (o && o->ext) {
        if (name || op == 10 || op == 40) /* an object opened by token stays without a path */
            set_path(o->ext, pe, name, sep);
        r->obj = ((h5ft_ext_t *)o->ext)->path;
        r->file = ((h5ft_ext_t *)o->ext)->file;
    } else if (pe) {
        r->file = pe->file;
        r->obj = intern(name);
    }
    add(s, op, o == NULL, pe, r);
    pthread_mutex_unlock(&g_lock);
}

static void *tr_group_create(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t lcpl_id,
                             hid_t gcpl_id, hid_t gapl_id, hid_t dxpl_id, void **req)
{
    span_t s = begin();
    h5fpt_obj_t *g = h5fpt_group_create(obj, loc, name, lcpl_id, gcpl_id, gapl_id, dxpl_id, req);
    h5ft_record r = {0};
    opened(&s, 40, obj, g, loc_name(loc, name), "/", &r);
    return g;
}

static void *tr_group_open(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t gapl_id,
                           hid_t dxpl_id, void **req)
{
    span_t s = begin();
    h5fpt_obj_t *g = h5fpt_group_open(obj, loc, name, gapl_id, dxpl_id, req);
    h5ft_record r = {0};
    opened(&s, 41, obj, g, loc_name(loc, name), "/", &r);
    return g;
}

static void *tr_object_open(void *obj, const H5VL_loc_params_t *loc, H5I_type_t *opened_type, hid_t dxpl_id,
                            void **req)
{
    span_t s = begin();
    h5fpt_obj_t *o = h5fpt_object_open(obj, loc, opened_type, dxpl_id, req);
    h5ft_record r = {0};
    opened(&s, 60, obj, o, loc_name(loc, NULL), "/", &r);
    return o;
}

/* A hard link to an object not named yet (h5py's f["x"] = data: H5Dcreate_anon, then H5Olink) names it. */
static herr_t tr_link_create(H5VL_link_create_args_t *args, void *obj, const H5VL_loc_params_t *loc,
                             hid_t lcpl_id, hid_t lapl_id, hid_t dxpl_id, void **req)
{
    h5fpt_obj_t *target = args->op_type == H5VL_LINK_CREATE_HARD ? args->args.hard.curr_obj : NULL;
    span_t s = begin();
    herr_t rc = h5fpt_link_create(args, obj, loc, lcpl_id, lapl_id, dxpl_id, req);
    const char *name = loc_name(loc, NULL);
    h5ft_record r = {0};
    pthread_mutex_lock(&g_lock);
    h5ft_ext_t *te = target ? target->ext : NULL;
    const h5ft_ext_t *pe = ext_of(obj);
    char props[64] = "";
    if (rc >= 0 && te && te->pathstr && te->pathstr[0] == '#' && name) {
        snprintf(props, sizeof props, "{\"names\": \"%s\"}", te->pathstr);
        set_path(te, pe, name, "/");
    }
    r.props = intern(props);
    if (pe) {
        r.file = pe->file;
        char *tmp = NULL;
        if (name && pe->pathstr) {
            size_t n = strlen(pe->pathstr) + strlen(name) + 2;
            tmp = malloc(n);
            if (tmp)
                snprintf(tmp, n, "%s%s%s", name[0] == '/' ? "" : pe->pathstr,
                         name[0] == '/' || !strcmp(pe->pathstr, "/") ? "" : "/", name);
        }
        r.obj = intern(tmp ? tmp : name);
        free(tmp);
    }
    add(&s, 50, rc < 0, NULL, &r);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* A dataset's or attribute's datatype and dataspace through the connector below (not recorded). */
static hid_t under_dataset_get(const h5fpt_obj_t *o, H5VL_dataset_get_t kind, hid_t dxpl_id)
{
    H5VL_dataset_get_args_t a;
    memset(&a, 0, sizeof a);
    a.op_type = kind;
    if (kind == H5VL_DATASET_GET_SPACE)
        a.args.get_space.space_id = H5I_INVALID_HID;
    else
        a.args.get_type.type_id = H5I_INVALID_HID;
    if (H5VLdataset_get(o->under_object, o->under_vol_id, &a, dxpl_id, NULL) < 0)
        return H5I_INVALID_HID;
    return kind == H5VL_DATASET_GET_SPACE ? a.args.get_space.space_id : a.args.get_type.type_id;
}

static hid_t under_attr_get(const h5fpt_obj_t *o, H5VL_attr_get_t kind, hid_t dxpl_id)
{
    H5VL_attr_get_args_t a;
    memset(&a, 0, sizeof a);
    a.op_type = kind;
    if (H5VLattr_get(o->under_object, o->under_vol_id, &a, dxpl_id, NULL) < 0)
        return H5I_INVALID_HID;
    return kind == H5VL_ATTR_GET_SPACE ? a.args.get_space.space_id : a.args.get_type.type_id;
}

static void fill_space_type(h5ft_record *r, hid_t space, hid_t type)
{
    h5ft_sel sel;
    char t[64];
    h5ft_space_sel(space, &sel);
    h5ft_type_str(type, t, sizeof t);
    r->ndims = (uint8_t)sel.ndims;
    r->shape = intern(sel.shape);
    r->file_type = intern(t);
}

static void *tr_dataset_create(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t lcpl_id,
                               hid_t type_id, hid_t space_id, hid_t dcpl_id, hid_t dapl_id, hid_t dxpl_id,
                               void **req)
{
    span_t s = begin();
    h5fpt_obj_t *d =
        h5fpt_dataset_create(obj, loc, name, lcpl_id, type_id, space_id, dcpl_id, dapl_id, dxpl_id, req);
    char props[1024];
    h5ft_dcpl_json(dcpl_id, props, sizeof props);
    h5ft_record r = {0};
    pthread_mutex_lock(&g_lock);
    fill_space_type(&r, space_id, type_id);
    r.props = intern(props);
    if (d && d->ext)
        set_type(d->ext, type_id);
    pthread_mutex_unlock(&g_lock);
    opened(&s, 10, obj, d, loc_name(loc, name), "/", &r);
    return d;
}

static void *tr_dataset_open(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t dapl_id,
                             hid_t dxpl_id, void **req)
{
    span_t s = begin();
    h5fpt_obj_t *d = h5fpt_dataset_open(obj, loc, name, dapl_id, dxpl_id, req);
    h5ft_record r = {0};
    if (d && d->ext) {
        hid_t type = under_dataset_get(d, H5VL_DATASET_GET_TYPE, dxpl_id);
        hid_t space = under_dataset_get(d, H5VL_DATASET_GET_SPACE, dxpl_id);
        pthread_mutex_lock(&g_lock);
        fill_space_type(&r, space, type);
        set_type(d->ext, type);
        pthread_mutex_unlock(&g_lock);
        if (type >= 0)
            H5Tclose(type);
        if (space >= 0)
            H5Sclose(space);
    }
    opened(&s, 11, obj, d, loc_name(loc, name), "/", &r);
    return d;
}

/* An attribute's name as set_path takes it: "@name" under the object itself, or "OBJ/@name" when the call
 * names the object by path from loc (H5Acreate_by_name, H5Aopen_by_name). *sep is the separator to use.
 * buf holds the combined name when one is needed. */
static const char *attr_name(const H5VL_loc_params_t *loc, const char *name, char *buf, size_t len,
                             const char **sep)
{
    const char *via = loc && loc->type == H5VL_OBJECT_BY_NAME ? loc->loc_data.loc_by_name.name : NULL;
    *sep = "/@";
    if (!name || !via || !strcmp(via, "."))
        return name;
    snprintf(buf, len, "%s/@%s", via, name);
    *sep = "/";
    return buf;
}

static void *tr_attr_create(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t type_id,
                            hid_t space_id, hid_t acpl_id, hid_t aapl_id, hid_t dxpl_id, void **req)
{
    span_t s = begin();
    h5fpt_obj_t *a = h5fpt_attr_create(obj, loc, name, type_id, space_id, acpl_id, aapl_id, dxpl_id, req);
    h5ft_record r = {0};
    pthread_mutex_lock(&g_lock);
    fill_space_type(&r, space_id, type_id);
    if (a && a->ext)
        set_type(a->ext, type_id);
    pthread_mutex_unlock(&g_lock);
    char buf[1024];
    const char *sep;
    const char *an = attr_name(loc, name, buf, sizeof buf, &sep);
    opened(&s, 1, obj, a, an, sep, &r);
    return a;
}

static void *tr_attr_open(void *obj, const H5VL_loc_params_t *loc, const char *name, hid_t aapl_id,
                          hid_t dxpl_id, void **req)
{
    span_t s = begin();
    h5fpt_obj_t *a = h5fpt_attr_open(obj, loc, name, aapl_id, dxpl_id, req);
    h5ft_record r = {0};
    if (a && a->ext) {
        hid_t type = under_attr_get(a, H5VL_ATTR_GET_TYPE, dxpl_id);
        hid_t space = under_attr_get(a, H5VL_ATTR_GET_SPACE, dxpl_id);
        pthread_mutex_lock(&g_lock);
        fill_space_type(&r, space, type);
        set_type(a->ext, type);
        pthread_mutex_unlock(&g_lock);
        if (type >= 0)
            H5Tclose(type);
        if (space >= 0)
            H5Sclose(space);
    }
    char buf[1024];
    const char *sep;
    const char *an = attr_name(loc, name, buf, sizeof buf, &sep);
    opened(&s, 2, obj, a, an, sep, &r);
    return a;
}

/* The details of one transfer: selection (file side), bytes (memory side), types, requested mode. */
static void transfer_details(h5ft_record *r, const h5fpt_obj_t *o, int is_attr, hid_t mem_type, hid_t mem_space,
                             hid_t file_space, hid_t dxpl_id)
{
    const h5ft_ext_t *e = o->ext;
    hid_t own_space = H5I_INVALID_HID;
    if (is_attr || file_space == H5S_ALL) {
        own_space = is_attr ? under_attr_get(o, H5VL_ATTR_GET_SPACE, dxpl_id)
                            : under_dataset_get(o, H5VL_DATASET_GET_SPACE, dxpl_id);
        file_space = own_space;
    }
    h5ft_sel sel;
    h5ft_space_sel(file_space, &sel);
    r->npoints = sel.npoints;
    r->nblocks = sel.nblocks;
    r->ndims = (uint8_t)sel.ndims;
    hssize_t mpoints = sel.npoints;
    if (!is_attr && mem_space != H5S_ALL && mem_space >= 0)
        mpoints = H5Sget_select_npoints(mem_space);
    size_t msize = mem_type >= 0 ? H5Tget_size(mem_type) : 0;
    r->bytes = mpoints > 0 ? (uint64_t)mpoints * msize : 0;
    char t[64];
    h5ft_type_str(mem_type, t, sizeof t);
    pthread_mutex_lock(&g_lock);
    r->shape = intern(sel.shape);
    r->mem_type = intern(t);
    r->file_type = e ? e->type_sid : 0;
    pthread_mutex_unlock(&g_lock);
    if (converts(e, mem_type))
        r->flags |= H5FT_FLAG_CONV;
    if (own_space >= 0)
        H5Sclose(own_space);
    if (is_attr) {
        r->xfer = 0;
        return;
    }
    H5FD_mpio_xfer_t mode = H5FD_MPIO_INDEPENDENT;
    herr_t rc;
    H5E_BEGIN_TRY { rc = H5Pget_dxpl_mpio(dxpl_id, &mode); }
    H5E_END_TRY
    r->xfer = rc >= 0 && mode == H5FD_MPIO_COLLECTIVE ? 2 : 1;
}

static herr_t dataset_io(int write, size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                         hid_t file_space_id[], hid_t dxpl_id, void *rbuf[], const void *wbuf[], void **req)
{
    span_t s = begin();
    herr_t rc = write ? h5fpt_dataset_write(count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id,
                                            wbuf, req)
                      : h5fpt_dataset_read(count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id, rbuf,
                                           req);
    uint64_t t1 = 0;
    pthread_mutex_lock(&g_lock);
    if (g_writer)
        t1 = h5ft_now(g_writer);
    pthread_mutex_unlock(&g_lock);
    h5ft_record *first = NULL;
    int io_info = 0;
    /* the call's records in one block, so that their slots stay valid until resolve_pending fills them */
    pthread_mutex_lock(&g_lock);
    int together = g_writer && h5ft_writer_reserve(g_writer, count) == 0;
    pthread_mutex_unlock(&g_lock);
    for (size_t i = 0; i < count; i++) {
        const h5fpt_obj_t *o = dset[i];
        h5ft_record r = {0};
        transfer_details(&r, o, 0, mem_type_id[i], mem_space_id[i], file_space_id[i], dxpl_id);
        r.ncount = (uint16_t)(count > UINT16_MAX ? UINT16_MAX : count);
        span_t si = {i == 0 ? s.t0 : t1};
        pthread_mutex_lock(&g_lock);
        h5ft_record *slot = add(&si, write ? 13 : 12, rc < 0, o->ext, &r);
        if (slot)
            slot->t1_ns = t1;
        if (i == 0)
            first = slot;
        pthread_mutex_unlock(&g_lock);
        if (o->ext && ((const h5ft_ext_t *)o->ext)->io_info)
            io_info = 1;
    }
    /* HDF5 writes the actual I/O mode onto a non-default DXPL when the API call returns: read it back at the
     * next callback (resolve_pending). The records of one call are consecutive in the writer's block. */
    pthread_mutex_lock(&g_lock);
    if (first && together && io_info && rc >= 0 && dxpl_id != H5P_DATASET_XFER_DEFAULT && H5Iinc_ref(dxpl_id) >= 0) {
        g_pending.dxpl = dxpl_id;
        g_pending.slot = first;
        g_pending.n = count;
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static herr_t tr_dataset_read(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                              hid_t file_space_id[], hid_t dxpl_id, void *buf[], void **req)
{
    return dataset_io(0, count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id, buf, NULL, req);
}

static herr_t tr_dataset_write(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                               hid_t file_space_id[], hid_t dxpl_id, const void *buf[], void **req)
{
    return dataset_io(1, count, dset, mem_type_id, mem_space_id, file_space_id, dxpl_id, NULL, buf, req);
}

static herr_t attr_io(int write, void *attr, hid_t mem_type_id, void *rbuf, const void *wbuf, hid_t dxpl_id,
                      void **req)
{
    span_t s = begin();
    herr_t rc = write ? h5fpt_attr_write(attr, mem_type_id, wbuf, dxpl_id, req)
                      : h5fpt_attr_read(attr, mem_type_id, rbuf, dxpl_id, req);
    h5ft_record r = {0};
    transfer_details(&r, attr, 1, mem_type_id, H5S_ALL, H5S_ALL, dxpl_id);
    pthread_mutex_lock(&g_lock);
    add(&s, write ? 4 : 3, rc < 0, ext_of(attr), &r);
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static herr_t tr_attr_read(void *attr, hid_t mem_type_id, void *buf, hid_t dxpl_id, void **req)
{
    return attr_io(0, attr, mem_type_id, buf, NULL, dxpl_id, req);
}

static herr_t tr_attr_write(void *attr, hid_t mem_type_id, const void *buf, hid_t dxpl_id, void **req)
{
    return attr_io(1, attr, mem_type_id, NULL, buf, dxpl_id, req);
}

/* ---- options and class ------------------------------------------------------------------------ */
static void opts_default(void *p)
{
    memset(p, 0, sizeof(h5ft_opts_t));
}

static int opts_set(void *p, const char *key, const char *value, char *err, size_t errlen)
{
    h5ft_opts_t *o = p;
    if (!strcmp(key, "dir")) {
        if (strlen(value) >= sizeof o->dir) {
            snprintf(err, errlen, "dir= is longer than %d characters", H5FT_DIR_MAX - 1);
            return -1;
        }
        snprintf(o->dir, sizeof o->dir, "%s", value);
        return 0;
    }
    if (!strcmp(key, "block")) {
        char *end = NULL;
        unsigned long v = strtoul(value, &end, 10);
        if (!*value || *end || v == 0 || v > (1ul << 24)) {
            snprintf(err, errlen, "block=%s: give a number of records per block, 1 to 16777216", value);
            return -1;
        }
        o->block = (unsigned)v;
        return 0;
    }
    snprintf(err, errlen, "unknown option %s= (h5flow_trace takes dir=, block=, under_vol=, under_info=)", key);
    return -1;
}

static int opts_to_str(const void *p, char *buf, size_t len)
{
    const h5ft_opts_t *o = p;
    int n;
    if (o->dir[0] && o->block)
        n = snprintf(buf, len, "dir=%s;block=%u", o->dir, o->block);
    else if (o->dir[0])
        n = snprintf(buf, len, "dir=%s", o->dir);
    else if (o->block)
        n = snprintf(buf, len, "block=%u", o->block);
    else
        n = snprintf(buf, len, "%s", "");
    return n < 0 || (size_t)n >= len ? -1 : n;
}

static herr_t terminate(void)
{
    pthread_mutex_lock(&g_lock);
    resolve_pending();
    if (g_writer && h5ft_writer_close(g_writer) != 0)
        fprintf(stderr, "h5flow_trace: the last block of this process's trace could not be written\n");
    g_writer = NULL;
    g_open_failed = 0;
    pthread_mutex_unlock(&g_lock);
    return 0;
}

static const h5fpt_desc_t g_desc = {
    .name = H5FT_NAME,
    .value = H5FT_VALUE,
    .conn_version = 0,
    .cap_flags = 0,
    .opts_size = sizeof(h5ft_opts_t),
    .opts_default = opts_default,
    .opts_set = opts_set,
    .opts_to_str = opts_to_str,
    .obj_init = obj_init,
    .obj_fini = obj_fini,
    .observe = observe,
    .initialize = NULL,
    .terminate = terminate,
};

static H5VL_class_t g_class;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* A forked child (Python's multiprocessing, a program that forks then exits normally) must not write its
 * parent's buffered records a second time: it drops the inherited writer and opens a trace of its own (named
 * with its pid) at its next file open. */
static void forked_child(void)
{
    h5ft_writer_abandon(g_writer);
    g_writer = NULL;
    g_open_failed = 0;
    g_pending.dxpl = H5I_INVALID_HID;
    g_pending.slot = NULL;
    g_pending.n = 0;
    pthread_mutex_init(&g_lock, NULL);
}

static void build_class(void)
{
    pthread_atfork(NULL, NULL, forked_child);
    if (h5fpt_class_init(&g_class, &g_desc) < 0)
        return;
    g_class.file_cls.create = tr_file_create;
    g_class.file_cls.open = tr_file_open;
    g_class.group_cls.create = tr_group_create;
    g_class.group_cls.open = tr_group_open;
    g_class.object_cls.open = tr_object_open;
    g_class.link_cls.create = tr_link_create;
    g_class.dataset_cls.create = tr_dataset_create;
    g_class.dataset_cls.open = tr_dataset_open;
    g_class.dataset_cls.read = tr_dataset_read;
    g_class.dataset_cls.write = tr_dataset_write;
    g_class.attr_cls.create = tr_attr_create;
    g_class.attr_cls.open = tr_attr_open;
    g_class.attr_cls.read = tr_attr_read;
    g_class.attr_cls.write = tr_attr_write;
}

H5PL_type_t H5PLget_plugin_type(void);
const void *H5PLget_plugin_info(void);

__attribute__((visibility("default"))) H5PL_type_t H5PLget_plugin_type(void) { return H5PL_TYPE_VOL; }

__attribute__((visibility("default"))) const void *H5PLget_plugin_info(void)
{
    pthread_once(&g_once, build_class);
    return &g_class;
}
