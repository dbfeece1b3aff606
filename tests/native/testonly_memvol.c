/*
 * testonly_memvol — a TEST-ONLY terminal HDF5 VOL connector (not a product, never installed).
 *
 * Its one purpose is to be a *non-native terminal* connector that h5py can drive, so that
 * tests/test_patch_110_api.py can exercise HDF5's 1.10-API shims (H5Literate_by_name1, H5Lget_info1,
 * H5Oget_info_by_name1, H5Ovisit*1, ...) that h5py calls, and which stock HDF5 1.14.5 refuses for
 * non-native objects (third_party/hdf5/patches/0001-*.patch lifts that).
 *
 * It keeps a tree of groups in memory for as long as the file is open: files cannot be reopened,
 * there are no datasets, attributes or soft links. Every handle the library gets (file or group) is an
 * `mv_obj_t` pointing at a node of its file's tree; the tree is freed when the last handle of the file
 * is closed. A node's token is its number in the file (zero-padded to the 16 token bytes), so with the
 * patch the 1.10 "address" h5py sees is that number.
 *
 * Built by the test itself with mpicc into a temporary directory, never into build/plugins.
 */
#include <H5PLextern.h>
#include <H5VLconnector.h>
#include <H5VLconnector_passthru.h>
#include <hdf5.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MV_NAME  "testonly_memvol"
#define MV_VALUE 299 /* 256-511: values for testing connectors */

typedef struct mv_node_t {
    char              *name; /* link name in the parent ("" for the root) */
    struct mv_node_t  *parent;
    struct mv_node_t **kids; /* in creation order */
    size_t             nkids, cap;
    uint64_t           number; /* unique in the file; the token */
    hid_t              gcpl;
} mv_node_t;

typedef struct mv_file_t {
    char      *name;
    unsigned   intent;
    hid_t      fcpl, fapl;
    mv_node_t *root;
    uint64_t   next_number;
    size_t     handles;     /* open mv_obj_t of this file, the file handle included */
    void      *file_handle; /* what file create returned, while it is open (H5VL_OBJECT_GET_FILE) */
} mv_file_t;

typedef struct mv_obj_t {
    H5I_type_t type; /* H5I_FILE or H5I_GROUP */
    mv_file_t *file;
    mv_node_t *node;
} mv_obj_t;

static const H5VL_class_t mv_class_g;

/* ---- tree ------------------------------------------------------------------------------------------ */

static void
mv_node_free(mv_node_t *n)
{
    for (size_t i = 0; i < n->nkids; i++)
        mv_node_free(n->kids[i]);
    if (n->gcpl >= 0)
        H5Pclose(n->gcpl);
    free(n->kids);
    free(n->name);
    free(n);
}

static mv_node_t *
mv_node_new(mv_file_t *f, mv_node_t *parent, const char *name, size_t len, hid_t gcpl)
{
    mv_node_t *n = calloc(1, sizeof(*n));
    if (!n || !(n->name = strndup(name, len))) {
        free(n);
        return NULL;
    }
    n->parent = parent;
    n->number = f->next_number++;
    n->gcpl   = H5Pcopy(gcpl);
    if (n->gcpl < 0) {
        free(n->name);
        free(n);
        return NULL;
    }
    if (parent) {
        if (parent->nkids == parent->cap) {
            size_t      cap  = parent->cap ? 2 * parent->cap : 4;
            mv_node_t **kids = realloc(parent->kids, cap * sizeof(*kids));
            if (!kids) {
                mv_node_free(n);
                return NULL;
            }
            parent->kids = kids;
            parent->cap  = cap;
        }
        parent->kids[parent->nkids++] = n;
    }
    return n;
}

static mv_node_t *
mv_child(const mv_node_t *n, const char *name, size_t len)
{
    for (size_t i = 0; i < n->nkids; i++)
        if (strlen(n->kids[i]->name) == len && 0 == strncmp(n->kids[i]->name, name, len))
            return n->kids[i];
    return NULL;
}

/* Resolve `path` (absolute or relative to `start`). With `create`, missing groups are made (all of
 * them if `intermediate`, else only the last component). NULL if a component does not exist. */
static mv_node_t *
mv_resolve(mv_file_t *f, mv_node_t *start, const char *path, bool create, bool intermediate, hid_t gcpl)
{
    mv_node_t *n = path[0] == '/' ? f->root : start;
    const char *p = path;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *end = strchr(p, '/');
        size_t      len = end ? (size_t)(end - p) : strlen(p);
        bool        last;
        {
            const char *q = p + len;
            while (*q == '/')
                q++;
            last = (*q == '\0');
        }
        mv_node_t *next = NULL;
        if (len == 1 && p[0] == '.')
            next = n;
        else
            next = mv_child(n, p, len);
        if (create && last && next && next != n)
            return NULL; /* already exists */
        if (!next && create && (last || intermediate))
            next = mv_node_new(f, n, p, len, last ? gcpl : H5P_GROUP_CREATE_DEFAULT);
        if (!next)
            return NULL;
        n = next;
        p += len;
    }
    return n;
}

static mv_obj_t *
mv_handle(mv_file_t *f, mv_node_t *n, H5I_type_t type)
{
    mv_obj_t *o = calloc(1, sizeof(*o));
    if (!o)
        return NULL;
    o->type = type;
    o->file = f;
    o->node = n;
    f->handles++;
    return o;
}

static void
mv_release(mv_obj_t *o)
{
    mv_file_t *f = o->file;
    if (f->file_handle == o)
        f->file_handle = NULL;
    free(o);
    if (--f->handles == 0) {
        mv_node_free(f->root);
        H5Pclose(f->fcpl);
        H5Pclose(f->fapl);
        free(f->name);
        free(f);
    }
}

/* The node a callback addresses: `obj` itself, or a path below it. */
static mv_node_t *
mv_locate(mv_obj_t *o, const H5VL_loc_params_t *lp)
{
    if (lp->type == H5VL_OBJECT_BY_SELF)
        return o->node;
    if (lp->type == H5VL_OBJECT_BY_NAME)
        return mv_resolve(o->file, o->node, lp->loc_data.loc_by_name.name, false, false, H5P_DEFAULT);
    return NULL; /* by index / by token: not supported */
}

static void
mv_token(const mv_node_t *n, H5O_token_t *token)
{
    memset(token, 0, sizeof(*token));
    memcpy(token->__data, &n->number, sizeof(n->number));
}

/* ---- file ------------------------------------------------------------------------------------------ */

static void *
mv_file_create(const char *name, unsigned flags, hid_t fcpl_id, hid_t fapl_id, hid_t dxpl_id, void **req)
{
    (void)dxpl_id;
    (void)req;
    mv_file_t *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->name        = strdup(name);
    f->intent      = H5F_ACC_RDWR;
    (void)flags; /* TRUNC or EXCL: a new file in memory either way */
    f->fcpl        = H5Pcopy(fcpl_id);
    f->fapl        = H5Pcopy(fapl_id);
    f->next_number = 1;
    f->root        = mv_node_new(f, NULL, "", 0, H5P_GROUP_CREATE_DEFAULT);
    if (!f->name || f->fcpl < 0 || f->fapl < 0 || !f->root) {
        if (f->root)
            mv_node_free(f->root);
        free(f->name);
        free(f);
        return NULL;
    }
    return f->file_handle = mv_handle(f, f->root, H5I_FILE);
}

static void *
mv_file_open(const char *name, unsigned flags, hid_t fapl_id, hid_t dxpl_id, void **req)
{
    (void)flags;
    (void)fapl_id;
    (void)dxpl_id;
    (void)req;
    fprintf(stderr, MV_NAME ": cannot open %s: this test-only connector keeps files in memory only\n", name);
    return NULL;
}

static herr_t
mv_file_get(void *obj, H5VL_file_get_args_t *args, hid_t dxpl_id, void **req)
{
    (void)dxpl_id;
    (void)req;
    mv_obj_t *o = obj;
    switch (args->op_type) {
        case H5VL_FILE_GET_FAPL:
            return (args->args.get_fapl.fapl_id = H5Pcopy(o->file->fapl)) < 0 ? -1 : 0;
        case H5VL_FILE_GET_FCPL:
            return (args->args.get_fcpl.fcpl_id = H5Pcopy(o->file->fcpl)) < 0 ? -1 : 0;
        case H5VL_FILE_GET_INTENT:
            *args->args.get_intent.flags = o->file->intent;
            return 0;
        case H5VL_FILE_GET_FILENO:
            *args->args.get_fileno.fileno = (unsigned long)(uintptr_t)o->file;
            return 0;
        case H5VL_FILE_GET_NAME: {
            H5VL_file_get_name_args_t *a   = &args->args.get_name;
            size_t                     len = strlen(o->file->name);
            if (a->buf && a->buf_size) {
                size_t n = len < a->buf_size - 1 ? len : a->buf_size - 1;
                memcpy(a->buf, o->file->name, n);
                a->buf[n] = '\0';
            }
            *a->file_name_len = len;
            return 0;
        }
        case H5VL_FILE_GET_OBJ_COUNT:
            *args->args.get_obj_count.count = 0;
            return 0;
        case H5VL_FILE_GET_OBJ_IDS:
            *args->args.get_obj_ids.count = 0;
            return 0;
        default:
            return -1;
    }
}

static herr_t
mv_file_specific(void *obj, H5VL_file_specific_args_t *args, hid_t dxpl_id, void **req)
{
    (void)obj;
    (void)dxpl_id;
    (void)req;
    switch (args->op_type) {
        case H5VL_FILE_FLUSH:
            return 0;
        case H5VL_FILE_IS_ACCESSIBLE:
            *args->args.is_accessible.accessible = false; /* nothing on disk is ours */
            return 0;
        case H5VL_FILE_IS_EQUAL:
            *args->args.is_equal.same_file = ((mv_obj_t *)obj)->file == ((mv_obj_t *)args->args.is_equal.obj2)->file;
            return 0;
        default:
            return -1;
    }
}

static herr_t
mv_close(void *obj, hid_t dxpl_id, void **req)
{
    (void)dxpl_id;
    (void)req;
    mv_release(obj);
    return 0;
}

/* ---- group ----------------------------------------------------------------------------------------- */

static void *
mv_group_create(void *obj, const H5VL_loc_params_t *lp, const char *name, hid_t lcpl_id, hid_t gcpl_id,
                hid_t gapl_id, hid_t dxpl_id, void **req)
{
    (void)gapl_id;
    (void)dxpl_id;
    (void)req;
    mv_obj_t  *o     = obj;
    mv_node_t *where = mv_locate(o, lp);
    unsigned   inter = 0;
    if (!where || !name)
        return NULL;
    if (lcpl_id != H5P_DEFAULT && H5Pget_create_intermediate_group(lcpl_id, &inter) < 0)
        return NULL;
    mv_node_t *n = mv_resolve(o->file, where, name, true, inter != 0, gcpl_id);
    return n ? mv_handle(o->file, n, H5I_GROUP) : NULL;
}

static void *
mv_group_open(void *obj, const H5VL_loc_params_t *lp, const char *name, hid_t gapl_id, hid_t dxpl_id,
              void **req)
{
    (void)gapl_id;
    (void)dxpl_id;
    (void)req;
    mv_obj_t  *o     = obj;
    mv_node_t *where = mv_locate(o, lp);
    mv_node_t *n     = where ? mv_resolve(o->file, where, name, false, false, H5P_DEFAULT) : NULL;
    return n ? mv_handle(o->file, n, H5I_GROUP) : NULL;
}

static herr_t
mv_group_get(void *obj, H5VL_group_get_args_t *args, hid_t dxpl_id, void **req)
{
    (void)dxpl_id;
    (void)req;
    mv_obj_t *o = obj;
    if (args->op_type == H5VL_GROUP_GET_GCPL)
        return (args->args.get_gcpl.gcpl_id = H5Pcopy(o->node->gcpl)) < 0 ? -1 : 0;
    if (args->op_type == H5VL_GROUP_GET_INFO) {
        mv_node_t *n = mv_locate(o, &args->args.get_info.loc_params);
        if (!n)
            return -1;
        args->args.get_info.ginfo->storage_type = H5G_STORAGE_TYPE_COMPACT;
        args->args.get_info.ginfo->nlinks       = n->nkids;
        args->args.get_info.ginfo->max_corder   = (int64_t)n->nkids;
        args->args.get_info.ginfo->mounted      = false;
        return 0;
    }
    return -1;
}

/* ---- link ------------------------------------------------------------------------------------------ */

static void
mv_link_info(const mv_node_t *n, H5L_info2_t *li)
{
    memset(li, 0, sizeof(*li));
    li->type = H5L_TYPE_HARD;
    li->cset = H5T_CSET_ASCII;
    mv_token(n, &li->u.token);
}

/* Calls `op` for the links below `n` (recursively if asked), names relative to the iteration start. */
static herr_t
mv_iterate(mv_node_t *n, const char *prefix, bool recursive, hid_t gid, H5L_iterate2_t op, void *op_data)
{
    for (size_t i = 0; i < n->nkids; i++) {
        mv_node_t  *k = n->kids[i];
        size_t      len = strlen(prefix) + strlen(k->name) + 2;
        char       *path = malloc(len);
        H5L_info2_t li;
        herr_t      ret;
        if (!path)
            return -1;
        snprintf(path, len, "%s%s%s", prefix, *prefix ? "/" : "", k->name);
        mv_link_info(k, &li);
        ret = op(gid, path, &li, op_data);
        if (ret == 0 && recursive)
            ret = mv_iterate(k, path, true, gid, op, op_data);
        free(path);
        if (ret != 0)
            return ret;
    }
    return 0;
}

/* An hid for `n` that an iteration callback can use; the library closes it through mv_close. */
static hid_t
mv_register(mv_file_t *f, mv_node_t *n)
{
    mv_obj_t *h = mv_handle(f, n, H5I_GROUP);
    hid_t     id;
    if (!h)
        return H5I_INVALID_HID;
    if ((id = H5VLwrap_register(h, H5I_GROUP)) < 0)
        mv_release(h);
    return id;
}

static herr_t
mv_link_get(void *obj, const H5VL_loc_params_t *lp, H5VL_link_get_args_t *args, hid_t dxpl_id, void **req)
{
    (void)dxpl_id;
    (void)req;
    mv_node_t *n = mv_locate(obj, lp);
    if (!n || args->op_type != H5VL_LINK_GET_INFO)
        return -1;
    mv_link_info(n, args->args.get_info.linfo);
    return 0;
}

static herr_t
mv_link_specific(void *obj, const H5VL_loc_params_t *lp, H5VL_link_specific_args_t *args, hid_t dxpl_id,
                 void **req)
{
    (void)dxpl_id;
    (void)req;
    mv_obj_t *o = obj;
    if (args->op_type == H5VL_LINK_EXISTS) {
        *args->args.exists.exists = mv_locate(o, lp) != NULL;
        return 0;
    }
    if (args->op_type == H5VL_LINK_ITER) {
        H5VL_link_iterate_args_t *it = &args->args.iterate;
        mv_node_t                *n  = mv_locate(o, lp);
        hid_t                     gid;
        herr_t                    ret;
        if (!n || (it->idx_p && *it->idx_p != 0))
            return -1; /* resuming at an index is not supported */
        if ((gid = mv_register(o->file, n)) < 0)
            return -1;
        ret = mv_iterate(n, "", it->recursive, gid, it->op, it->op_data);
        if (it->idx_p && ret >= 0)
            *it->idx_p = n->nkids;
        H5Idec_ref(gid);
        return ret;
    }
    return -1;
}

/* ---- object ---------------------------------------------------------------------------------------- */

static void *
mv_object_open(void *obj, const H5VL_loc_params_t *lp, H5I_type_t *opened_type, hid_t dxpl_id, void **req)
{
    (void)dxpl_id;
    (void)req;
    mv_obj_t  *o = obj;
    mv_node_t *n = mv_locate(o, lp);
    if (!n)
        return NULL;
    *opened_type = H5I_GROUP;
    return mv_handle(o->file, n, H5I_GROUP);
}

static void
mv_object_info(const mv_obj_t *o, const mv_node_t *n, H5O_info2_t *oi)
{
    memset(oi, 0, sizeof(*oi));
    oi->fileno = (unsigned long)(uintptr_t)o->file;
    mv_token(n, &oi->token);
    oi->type = H5O_TYPE_GROUP;
    oi->rc   = 1;
}

static herr_t
mv_visit(mv_obj_t *o, mv_node_t *n, const char *path, hid_t id, H5VL_object_visit_args_t *v)
{
    H5O_info2_t oi;
    herr_t      ret;
    mv_object_info(o, n, &oi);
    if ((ret = v->op(id, path, &oi, v->op_data)) != 0)
        return ret;
    for (size_t i = 0; i < n->nkids; i++) {
        size_t len = strlen(path) + strlen(n->kids[i]->name) + 2;
        char  *sub = malloc(len);
        if (!sub)
            return -1;
        if (strcmp(path, ".") == 0)
            snprintf(sub, len, "%s", n->kids[i]->name);
        else
            snprintf(sub, len, "%s/%s", path, n->kids[i]->name);
        ret = mv_visit(o, n->kids[i], sub, id, v);
        free(sub);
        if (ret != 0)
            return ret;
    }
    return 0;
}

static herr_t
mv_object_get(void *obj, const H5VL_loc_params_t *lp, H5VL_object_get_args_t *args, hid_t dxpl_id, void **req)
{
    (void)dxpl_id;
    (void)req;
    mv_obj_t  *o = obj;
    mv_node_t *n = mv_locate(o, lp);
    if (!n)
        return -1;
    switch (args->op_type) {
        case H5VL_OBJECT_GET_INFO:
            mv_object_info(o, n, args->args.get_info.oinfo);
            return 0;
        case H5VL_OBJECT_GET_TYPE:
            *args->args.get_type.obj_type = H5O_TYPE_GROUP;
            return 0;
        case H5VL_OBJECT_GET_FILE:
            *args->args.get_file.file = o->file->file_handle;
            return o->file->file_handle ? 0 : -1;
        case H5VL_OBJECT_GET_NAME: {
            char   buf[1024] = "";
            size_t used      = 0;
            /* Build "/a/b" from the parents. */
            const mv_node_t *chain[64];
            size_t           depth = 0;
            for (const mv_node_t *p = n; p && p->parent && depth < 64; p = p->parent)
                chain[depth++] = p;
            if (depth == 0)
                used = (size_t)snprintf(buf, sizeof(buf), "/");
            while (depth > 0 && used < sizeof(buf))
                used += (size_t)snprintf(buf + used, sizeof(buf) - used, "/%s", chain[--depth]->name);
            if (args->args.get_name.buf && args->args.get_name.buf_size) {
                snprintf(args->args.get_name.buf, args->args.get_name.buf_size, "%s", buf);
            }
            *args->args.get_name.name_len = strlen(buf);
            return 0;
        }
        default:
            return -1;
    }
}

static herr_t
mv_object_specific(void *obj, const H5VL_loc_params_t *lp, H5VL_object_specific_args_t *args, hid_t dxpl_id,
                   void **req)
{
    (void)dxpl_id;
    (void)req;
    mv_obj_t *o = obj;
    switch (args->op_type) {
        case H5VL_OBJECT_EXISTS:
            *args->args.exists.exists = mv_locate(o, lp) != NULL;
            return 0;
        case H5VL_OBJECT_VISIT: {
            mv_node_t *n = mv_locate(o, lp);
            hid_t      id;
            herr_t     ret;
            if (!n || (id = mv_register(o->file, n)) < 0)
                return -1;
            ret = mv_visit(o, n, ".", id, &args->args.visit);
            H5Idec_ref(id);
            return ret;
        }
        case H5VL_OBJECT_FLUSH:
        case H5VL_OBJECT_REFRESH:
            return 0;
        default:
            return -1;
    }
}

/* ---- introspection --------------------------------------------------------------------------------- */

static herr_t
mv_get_conn_cls(void *obj, H5VL_get_conn_lvl_t lvl, const H5VL_class_t **conn_cls)
{
    (void)obj;
    (void)lvl;
    *conn_cls = &mv_class_g;
    return 0;
}

static herr_t
mv_get_cap_flags(const void *info, uint64_t *cap_flags)
{
    (void)info;
    *cap_flags = H5VL_CAP_FLAG_FILE_BASIC | H5VL_CAP_FLAG_GROUP_BASIC | H5VL_CAP_FLAG_LINK_BASIC |
                 H5VL_CAP_FLAG_OBJECT_BASIC | H5VL_CAP_FLAG_ITERATE | H5VL_CAP_FLAG_HARD_LINKS;
    return 0;
}

static herr_t
mv_opt_query(void *obj, H5VL_subclass_t cls, int opt_type, uint64_t *flags)
{
    (void)obj;
    (void)cls;
    (void)opt_type;
    *flags = 0;
    return 0;
}

static const H5VL_class_t mv_class_g = {
    .version        = H5VL_VERSION,
    .value          = MV_VALUE,
    .name           = MV_NAME,
    .conn_version   = 1,
    .cap_flags      = H5VL_CAP_FLAG_FILE_BASIC | H5VL_CAP_FLAG_GROUP_BASIC | H5VL_CAP_FLAG_LINK_BASIC |
                 H5VL_CAP_FLAG_OBJECT_BASIC | H5VL_CAP_FLAG_ITERATE | H5VL_CAP_FLAG_HARD_LINKS,
    .file_cls       = {.create   = mv_file_create,
                       .open     = mv_file_open,
                       .get      = mv_file_get,
                       .specific = mv_file_specific,
                       .close    = mv_close},
    .group_cls      = {.create = mv_group_create, .open = mv_group_open, .get = mv_group_get, .close = mv_close},
    .link_cls       = {.get = mv_link_get, .specific = mv_link_specific},
    .object_cls     = {.open = mv_object_open, .get = mv_object_get, .specific = mv_object_specific},
    .introspect_cls = {.get_conn_cls = mv_get_conn_cls, .get_cap_flags = mv_get_cap_flags, .opt_query = mv_opt_query},
};

H5PL_type_t
H5PLget_plugin_type(void)
{
    return H5PL_TYPE_VOL;
}

const void *
H5PLget_plugin_info(void)
{
    return &mv_class_g;
}
