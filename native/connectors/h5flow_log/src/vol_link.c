/* Link callbacks: creation (hard, soft, external, user-defined), copy, move, info and values, existence,
 * deletion, iteration and visiting (H5Ovisit too, through h5fl_visit_objects). */
#include "dset.h"

#include <H5VLnative.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The container-relative part of directory `dir` of an object of file `f` ("" if it is not under it). */
static const char *rel_dir(const h5fl_file_t *f, const char *dir)
{
    size_t rl = strlen(f->o.dir);
    return strncmp(dir, f->o.dir, rl) == 0 ? dir + rl : "";
}

/* ---------------------------------------------------------------- links */
static int soft_create2(h5fl_obj_t *o, const char *target, const void *ebuf, size_t elen,
                        const H5VL_loc_params_t *lp, hid_t lcpl, hid_t lapl);
static int soft_create(h5fl_obj_t *o, const char *target, const H5VL_loc_params_t *lp, hid_t lcpl, hid_t lapl)
{
    return soft_create2(o, target, NULL, 0, lp, lcpl, lapl);
}

/* A soft link to `target`, or (target NULL) an external link with the encoded value ebuf[0..elen). */
static int soft_create2(h5fl_obj_t *o, const char *target, const void *ebuf, size_t elen,
                        const H5VL_loc_params_t *lp, hid_t lcpl, hid_t lapl)
{
    h5fl_file_t *f = o->file;
    h5fl_loc_t parent = {0};
    char leaf[NAME_MAX + 1], *leafname = NULL, *dir = NULL;
    unsigned crt = 0;
    if (lcpl != H5P_DEFAULT && lcpl >= 0)
        H5Pget_create_intermediate_group(lcpl, &crt);
    int st = -1;
    h5fl_collective_begin(f);
    if (!h5fl_writable(f))
        ;
    else if (lp->type != H5VL_OBJECT_BY_NAME)
        h5fl_err("a new link needs a name");
    else if (!ebuf && (!target || !target[0]))
        h5fl_err("a soft link needs a non-empty target path");
    else if (h5fl_check_plist(lapl, H5P_LINK_ACCESS, "link access property list") == 0 &&
             h5fl_check_plist(lcpl, H5P_LINK_CREATE, "link creation property list") == 0)
        st = h5fl_resolve_parent(o, lp->loc_data.loc_by_name.name,
                                 f->rank == 0 ? (crt ? H5FL_MKPARENTS : H5FL_CHECK) : H5FL_COMPUTE, &parent,
                                 leaf, sizeof leaf, &leafname);
    if (st == 0 && !(dir = h5fl_join(parent.dir, leaf)))
        st = -1;
    if (st == 0 && f->rank == 0) { /* built privately, renamed to its name complete (util.c) */
        const char *name = lp->loc_data.loc_by_name.name;
        char *tmp = h5fl_create_tmp(f);
        st = !tmp ? -1
             : ebuf ? h5fl_extlink_create(tmp, name, ebuf, elen, f->fsync)
                    : h5fl_softlink_create(tmp, name, target, f->fsync);
        if (st == 0)
            st = h5fl_corder_assign(parent.dir, tmp, f->fsync);
        if (st == 0)
            st = h5fl_create_publish_new(tmp, dir, ebuf ? "external link" : "soft link", name);
        else
            h5fl_create_abandon(tmp);
        free(tmp);
    }
    st = h5fl_collective(f, st);
    free(leafname);
    free(dir);
    h5fl_loc_free(&parent);
    if (st != 0)
        h5fl_err_push("h5fl_link_create");
    return st;
}

/* Fill link info for the link whose directory is `dir` and type `t`; `odir`: its object's directory (a
 * hard link stub's object is in the store, links.c), NULL: `dir`. */
static int link_info(const char *dir, const char *odir, H5I_type_t t, H5L_info2_t *li)
{
    memset(li, 0, sizeof *li);
    li->cset = H5T_CSET_ASCII;
    char *parent = h5fl_strdup(dir), *slash = parent ? strrchr(parent, '/') : NULL;
    if (slash) {
        /* The character set is not stored: a name with bytes >= 0x80 (escaped %80..%FF) is UTF-8, others
         * ASCII — what h5py asks for, and native's default for plain names (docs/FORMAT.md "Names"). */
        for (const char *q = slash + 1; *q; q++)
            if (q[0] == '%' && ((q[1] >= '8' && q[1] <= '9') || (q[1] >= 'A' && q[1] <= 'F')))
                li->cset = H5T_CSET_UTF8;
        *slash = '\0';
        if (h5fl_corder_tracked(parent, false)) {
            li->corder_valid = true;
            li->corder = (int64_t)h5fl_corder_of(dir);
        }
    }
    free(parent);
    if (t == H5FL_I_SOFT) {
        char *v = h5fl_softlink_read(dir);
        if (!v)
            return -1;
        li->type = H5L_TYPE_SOFT;
        li->u.val_size = strlen(v) + 1;
        free(v);
        return 0;
    }
    if (t == H5FL_I_EXT) {
        void *b = NULL;
        size_t l = 0;
        if (h5fl_extlink_read(dir, &b, &l) != 0)
            return -1;
        free(b);
        li->type = H5L_TYPE_EXTERNAL;
        li->u.val_size = l;
        return 0;
    }
    li->type = H5L_TYPE_HARD;
    h5fl_token_of(odir ? odir : dir, &li->u.token);
    return 0;
}
herr_t h5fl_link_create(H5VL_link_create_args_t *args, void *obj, const H5VL_loc_params_t *lp, hid_t lcpl,
                        hid_t lapl, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj, *target = args->op_type == H5VL_LINK_CREATE_HARD ? args->args.hard.curr_obj : NULL;
    if (args->op_type == H5VL_LINK_CREATE_HARD && !target)
        target = o; /* H5L_SAME_LOC as the object's location: its name is relative to the new link's */
    if (args->op_type == H5VL_LINK_CREATE_SOFT && o)
        return soft_create(o, args->args.soft.target, lp, lcpl, lapl);
    if (args->op_type == H5VL_LINK_CREATE_UD && o && args->args.ud.type == H5L_TYPE_EXTERNAL)
        return soft_create2(o, NULL, args->args.ud.buf, args->args.ud.buf_size, lp, lcpl, lapl);
    if (!target) {
        h5fl_err("user-defined links are not supported by h5flow_log (hard, soft and external links are)");
        h5fl_err_push(__func__);
        return -1;
    }
    /* H5Olink, H5Lcreate_hard (by name, "." included) and H5Lcopy all name the object their location
     * resolves to: an anonymous object gets its first name (h5fl_anon_link), any other one more (links.c) */
    h5fl_obj_t *lo = o ? o : target;
    h5fl_loc_t tl = {0};
    int st = h5fl_loc_from_params(target, &args->args.hard.curr_loc_params, &tl);
    if (st == 0 && tl.type == H5I_BADID) {
        h5fl_err("cannot create hard link: object '%s' does not exist", tl.path);
        st = -1;
    }
    if (st == 0 && lo->file != target->file && lo->file->fileno != target->file->fileno) {
        h5fl_err("cannot create hard link: the link and its object are in different files (a hard link "
                 "cannot cross files; use an external link)");
        st = -1;
    }
    if (st == 0 && (h5fl_check_plist(lapl, H5P_LINK_ACCESS, "link access property list") != 0 ||
                    h5fl_check_plist(lcpl, H5P_LINK_CREATE, "link creation property list") != 0))
        st = -1;
    if (st == 0) {
        h5fl_collective_begin(lo->file);
        if (!h5fl_writable(lo->file))
            st = -1;
        else
            st = h5fl_hard_create(lo, lp, &tl, lcpl);
    }
    h5fl_loc_free(&tl);
    if (st != 0)
        h5fl_err_push(__func__);
    return st;
}

int h5fl_anon_link(h5fl_obj_t *o, const H5VL_loc_params_t *lp, const h5fl_loc_t *target, hid_t lcpl)
{
    h5fl_file_t *f = o->file;
    h5fl_loc_t parent = {0};
    char leaf[NAME_MAX + 1], *leafname = NULL, *dir = NULL, *path = NULL;
    unsigned crt = 0;
    if (lcpl != H5P_DEFAULT && lcpl >= 0)
        H5Pget_create_intermediate_group(lcpl, &crt);
    int st = -1;
    if (lp->type != H5VL_OBJECT_BY_NAME)
        h5fl_err("a new link needs a name");
    else
        st = h5fl_resolve_parent(o, lp->loc_data.loc_by_name.name,
                                 f->rank == 0 ? (crt ? H5FL_MKPARENTS : H5FL_CHECK) : H5FL_COMPUTE, &parent,
                                 leaf, sizeof leaf, &leafname);
    if (st == 0 && (!(dir = h5fl_join(parent.dir, leaf)) || !(path = h5fl_path_join(parent.path, leafname))))
        st = -1;
    if (st == 0 && f->rank == 0) { /* its creation order first, then the one rename that names it */
        st = h5fl_corder_assign(parent.dir, target->dir, f->fsync);
        if (st == 0)
            st = h5fl_name_publish(target->dir, dir, "object", path);
    }
    st = h5fl_collective(f, st);
    if (st == 0) { /* every handle open on it (on every rank) follows it and is named from now on */
        size_t rl = strlen(f->o.dir);
        st = h5fl_reg_moved(f->fileno, target->dir + rl, dir + rl, "", path);
        for (h5fl_obj_t *r = h5fl_reg_next(NULL); r; r = h5fl_reg_next(r))
            if (r->type != H5I_FILE && r->type != H5I_ATTR && r->file && r->file->fileno == f->fileno && r->dir &&
                !strcmp(r->dir, dir))
                r->anon = false;
    }
    free(leafname);
    free(dir);
    free(path);
    h5fl_loc_free(&parent);
    return st;
}

/* Whether `name` has no component but "." (a location's own name: "", ".", "/", "./."). */
static bool names_no_link(const char *name)
{
    for (const char *c = name; *c;) {
        size_t n = strcspn(c, "/");
        if (n > 0 && !(n == 1 && c[0] == '.'))
            return false;
        c += n + (c[n] == '/');
    }
    return true;
}

/* H5Lcopy: a soft link is created anew with the same value (in this or another container); a hard link
 * gives its object one more name (links.c). */
herr_t h5fl_link_copy(void *src, const H5VL_loc_params_t *lp1, void *dst, const H5VL_loc_params_t *lp2,
                      hid_t lcpl, hid_t lapl, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *so = src, *dobj = dst ? dst : src;
    h5fl_loc_t from = {0};
    char *target = NULL;
    if (lp1->type != H5VL_OBJECT_BY_NAME || names_no_link(lp1->loc_data.loc_by_name.name)) {
        /* as native: "." (or "/") is the location itself, not a link (H5Ocopy copies an object, H5Olink or
         * H5Lcreate_hard names one) */
        h5fl_err("cannot copy link '%s': the name names no link, only the location itself",
                 lp1->type == H5VL_OBJECT_BY_NAME ? lp1->loc_data.loc_by_name.name : "(self)");
        goto fail;
    }
    if (h5fl_loc_from_params2(so, lp1, &from, false) != 0)
        goto fail;
    if (from.type == H5I_BADID)
        h5fl_err("link '%s' does not exist", from.path);
    else if (from.type == H5FL_I_EXT) {
        void *b = NULL;
        size_t l = 0;
        int st = h5fl_extlink_read(from.dir, &b, &l);
        h5fl_loc_free(&from);
        if (st != 0)
            goto fail;
        st = soft_create2(dobj, NULL, b, l, lp2, lcpl, lapl);
        free(b);
        return st;
    } else if (from.type != H5FL_I_SOFT) { /* a hard link: another name of its object (links.c) */
        int st = -1;
        if (dobj->file->fileno != so->file->fileno && !from.file)
            h5fl_err("cannot copy hard link '%s' into another file: a hard link cannot cross files", from.path);
        else if (from.file)
            h5fl_err("'%s' is reached through an external link: h5flow_log does not copy hard links through "
                     "external links",
                     from.path);
        else {
            h5fl_collective_begin(dobj->file);
            if (h5fl_writable(dobj->file))
                st = h5fl_hard_create(dobj, lp2, &from, lcpl);
        }
        h5fl_loc_free(&from);
        if (st != 0)
            goto fail;
        return 0;
    } else
        target = h5fl_softlink_read(from.dir);
    h5fl_loc_free(&from);
    if (!target)
        goto fail;
    int st = soft_create(dobj, target, lp2, lcpl, lapl); /* pushes its own error */
    free(target);
    return st;
fail:
    h5fl_err_push(__func__);
    return -1;
}

herr_t h5fl_link_move(void *src, const H5VL_loc_params_t *lp1, void *dst, const H5VL_loc_params_t *lp2,
                      hid_t lcpl, hid_t lapl, hid_t dxpl, void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *so = src, *dobj = dst ? dst : src;
    h5fl_file_t *f = so->file;
    h5fl_loc_t from = {0}, parent = {0};
    char leaf[NAME_MAX + 1], *leafname = NULL;
    int st = -1;
    if (lp1->type != H5VL_OBJECT_BY_NAME || lp2->type != H5VL_OBJECT_BY_NAME) {
        h5fl_err("link move needs names");
        goto done;
    }
    if (h5fl_check_plist(lapl, H5P_LINK_ACCESS, "link access property list") != 0 ||
        h5fl_check_plist(lcpl, H5P_LINK_CREATE, "link creation property list") != 0)
        goto done;
    if (dobj->file->fileno != f->fileno) {
        h5fl_err("links cannot be moved between containers");
        goto done;
    }
    if (!h5fl_writable(f))
        goto done;
    h5fl_collective_begin(f);
    unsigned crt = 0;
    if (lcpl != H5P_DEFAULT && lcpl >= 0)
        H5Pget_create_intermediate_group(lcpl, &crt);
    /* Every rank computes both names (rank 0 checks them against the disk and renames): open objects at or
     * under the old name follow the move on every rank. */
    st = h5fl_resolve_link(so, lp1->loc_data.loc_by_name.name, &from);
    if (st == 0 && from.file) {
        h5fl_err("'%s' is reached through an external link: h5flow_log does not move links through external "
                 "links; open the other file",
                 lp1->loc_data.loc_by_name.name);
        st = -1;
    }
    if (st == 0 && f->rank == 0 && from.type == H5I_BADID) {
        h5fl_err("link '%s' does not exist", lp1->loc_data.loc_by_name.name);
        st = -1;
    }
    if (st == 0)
        st = h5fl_resolve_parent(dobj, lp2->loc_data.loc_by_name.name,
                                 f->rank != 0 ? H5FL_COMPUTE : crt ? H5FL_MKPARENTS : H5FL_CHECK, &parent, leaf,
                                 sizeof leaf, &leafname);
    if (st == 0 && f->rank == 0) {
        {
            char *to = h5fl_join(parent.dir, leaf);
            const char *fd = from.ldir ? from.ldir : from.dir; /* a hard link's stub holds nothing */
            size_t lf = strlen(fd);
            if (!to)
                st = -1;
            else if (!strncmp(to, fd, lf) && to[lf] == '/') {
                h5fl_err("cannot move '%s' into itself", from.path);
                st = -1;
            } else if (h5fl_name_publish(fd, to, "moved link", lp2->loc_data.loc_by_name.name) != 0) {
                st = -1; /* one rename, refused where a link exists (a hard link: its stub moves; util.c) */
            } else {
                st = h5fl_corder_assign(parent.dir, to, f->fsync); /* a new link of its new group */
                if (st == 0)
                    st = h5fl_corder_reset_if_empty(from.ldir ? from.ldir : from.dir, f->fsync);
            }
            free(to);
        }
    }
    st = h5fl_collective(f, st);
    if (st == 0) {
        char *to = h5fl_join(parent.dir, leaf);
        size_t a = strlen(parent.path);
        char *np = malloc(a + strlen(leafname) + 2);
        if (!to || !np)
            st = -1;
        else {
            sprintf(np, "%s%s%s", parent.path, a == 1 ? "" : "/", leafname);
            st = from.ldir ? 0 /* the object stays in the store */
                           : h5fl_reg_moved(f->fileno, rel_dir(f, from.dir), rel_dir(dobj->file, to), from.path, np);
        }
        free(to);
        free(np);
    }
done:
    free(leafname);
    h5fl_loc_free(&from);
    h5fl_loc_free(&parent);
    if (st != 0)
        h5fl_err_push(__func__);
    return st;
}

herr_t h5fl_link_get(void *obj, const H5VL_loc_params_t *lp, H5VL_link_get_args_t *args, hid_t dxpl,
                     void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    h5fl_loc_t loc;
    if (h5fl_loc_from_params2(o, lp, &loc, false) != 0)
        goto fail;
    int rc = -1;
    if (loc.type == H5I_BADID) {
        h5fl_err("link '%s' does not exist", loc.path);
    } else if (args->op_type == H5VL_LINK_GET_INFO) {
        rc = link_info(loc.ldir ? loc.ldir : loc.dir, loc.dir, loc.type, args->args.get_info.linfo);
    } else if (args->op_type == H5VL_LINK_GET_VAL && loc.type == H5FL_I_EXT) {
        void *b = NULL;
        size_t l = 0;
        if (h5fl_extlink_read(loc.dir, &b, &l) == 0) {
            size_t n = args->args.get_val.buf_size;
            if (args->args.get_val.buf && n)
                memcpy(args->args.get_val.buf, b, l < n ? l : n);
            free(b);
            rc = 0;
        }
    } else if (args->op_type == H5VL_LINK_GET_VAL && loc.type == H5FL_I_SOFT) {
        char *v = h5fl_softlink_read(loc.dir);
        if (v) {
            size_t l = strlen(v) + 1, n = args->args.get_val.buf_size;
            if (args->args.get_val.buf && n) {
                memcpy(args->args.get_val.buf, v, l < n ? l : n);
                if (l > n)
                    ((char *)args->args.get_val.buf)[n - 1] = '\0';
            }
            free(v);
            rc = 0;
        }
    } else if (args->op_type == H5VL_LINK_GET_NAME) {
        const char *base = strrchr(loc.path, '/');
        base = base ? base + 1 : loc.path;
        size_t l = strlen(base);
        if (args->args.get_name.name && args->args.get_name.name_size) {
            size_t n = l < args->args.get_name.name_size - 1 ? l : args->args.get_name.name_size - 1;
            memcpy(args->args.get_name.name, base, n);
            args->args.get_name.name[n] = '\0';
        }
        *args->args.get_name.name_len = l;
        rc = 0;
    } else {
        h5fl_err("'%s' is a hard link: it has no link value", loc.path);
    }
    h5fl_loc_free(&loc);
    if (rc == 0)
        return 0;
fail:
    h5fl_err_push(__func__);
    return -1;
}

typedef struct iter {
    h5fl_file_t *f;
    hid_t gid;
    bool recursive, objects, crt;
    H5_iter_order_t order;
    unsigned fields;
    H5L_iterate2_t lop;
    H5O_iterate2_t oop;
    void *op_data;
    h5fl_ids_t seen; /* inodes of the objects visited that can have several names (cycle-safe, once each) */
} iter_t;

/* Whether object `dir` was visited; else it is recorded (1: seen, 0: first visit, -1: out of memory). */
static int seen_before(iter_t *it, const char *dir)
{
    uint64_t ino = h5fl_objno(dir);
    return h5fl_ids_has(&it->seen, ino) ? 1 : h5fl_ids_add(&it->seen, ino);
}

/* Visit the links of directory `dir` (HDF5 path `path`), names relative to the iteration root. */
static int iter_dir(iter_t *it, const char *dir, const char *rel, hsize_t *idx_p)
{
    h5fl_names_t kids;
    if (h5fl_list_children(dir, &kids) != 0)
        return -1;
    /* by creation order where the group tracks it; a visit goes by name through a group that does not
     * (as native HDF5); a one-group iteration by creation order of such a group is an error */
    if (it->crt && (!it->recursive || h5fl_corder_tracked(dir, false)) && h5fl_corder_sort(dir, &kids, false)) {
        h5fl_names_free(&kids);
        return -1;
    }
    int ret = 0;
    size_t i = idx_p ? (size_t)*idx_p : 0;
    for (; i < kids.n && ret == 0; i++) {
        const char *name = kids.v[it->order == H5_ITER_DEC ? kids.n - 1 - i : i];
        char esc[NAME_MAX + 1];
        if (h5fl_escape(name, esc, sizeof esc) != 0) {
            ret = -1;
            break;
        }
        char *cd = h5fl_join(dir, esc);
        size_t rl = rel ? strlen(rel) : 0;
        char *cr = malloc(rl + strlen(name) + 2);
        if (!cd || !cr) {
            free(cd);
            free(cr);
            ret = -1;
            break;
        }
        sprintf(cr, "%s%s%s", rel ? rel : "", rel ? "/" : "", name);
        H5I_type_t t = h5fl_dir_type(cd, false);
        char *ld = NULL; /* a hard link's stub (links.c); cd becomes its object's directory */
        int seen = 0;    /* an object with several names met before: H5Ovisit skips it, nobody recurses */
        if (t == H5FL_I_HARD) {
            ret = h5fl_hard_follow(it->f->o.dir, &cd, &t, &ld);
            if (ret == 0 && it->recursive && (seen = seen_before(it, cd)) < 0)
                ret = -1;
        }
        if (ret != 0 || seen) {
            ;
        } else if (it->objects && (t == H5FL_I_SOFT || t == H5FL_I_EXT)) {
            ; /* H5Ovisit follows hard links only */
        } else if (it->objects) {
            H5O_info2_t oi;
            if (h5fl_fill_oinfo(it->f, cd, t, it->fields, &oi) != 0)
                ret = -1;
            else
                ret = it->oop(it->gid, cr, &oi, it->op_data);
        }
        if (ret == 0 && !it->objects) { /* H5Lvisit: every link, also a second one to an object */
            H5L_info2_t li;
            ret = link_info(ld ? ld : cd, cd, t, &li);
            if (ret == 0)
                ret = it->lop(it->gid, cr, &li, it->op_data);
        }
        if (ret == 0 && it->recursive && t == H5I_GROUP && !seen)
            ret = iter_dir(it, cd, cr, NULL);
        free(ld);
        free(cd);
        free(cr);
    }
    if (idx_p)
        *idx_p = i;
    h5fl_names_free(&kids);
    return ret;
}

static int iterate(h5fl_obj_t *o, const h5fl_loc_t *loc, iter_t *it, hsize_t *idx_p)
{
    if (loc->type != H5I_GROUP && !it->objects) {
        h5fl_err("'%s' is not a group", loc->path);
        return -1;
    }
    it->f = o->file;
    it->gid = h5fl_register_for_callback(o->file, loc);
    if (it->gid < 0)
        return -1;
    int ret = it->recursive && seen_before(it, loc->dir) < 0 ? -1 : 0; /* a group linked into itself */
    if (ret == 0 && it->objects) { /* H5Ovisit: the starting object itself first, as "." */
        H5O_info2_t oi;
        ret = h5fl_fill_oinfo(o->file, loc->dir, loc->type, it->fields, &oi);
        if (ret == 0)
            ret = it->oop(it->gid, ".", &oi, it->op_data);
    }
    if (ret == 0 && loc->type == H5I_GROUP)
        ret = iter_dir(it, loc->dir, NULL, idx_p);
    H5Idec_ref(it->gid);
    free(it->seen.v);
    it->seen.v = NULL;
    if (ret < 0 && !h5fl_err_msg()[0])
        h5fl_err("iteration callback failed");
    return ret;
}

/* Whether any rank has an object at or under `rel` open (every rank calls it). */
static bool busy_anywhere(h5fl_file_t *f, const char *rel)
{
    int busy = h5fl_reg_busy(f->fileno, rel);
    if (f->comm != MPI_COMM_NULL && f->size > 1) {
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, &busy, 1, MPI_INT, MPI_LOR, f->comm, &req);
        h5fl_mpi_wait(&req);
    }
    return busy != 0;
}

/* Rank 0: remove the link directory `dir` (HDF5 path `path`): first renamed to a private name at the root,
 * so that its name is free at once and a creation of the same name by another process (which may replace a
 * marker-less directory there, util.c) never meets it half-removed. */
static int remove_away(h5fl_file_t *f, const char *dir, const char *path)
{
    char leaf[64];
    snprintf(leaf, sizeof leaf, "@tmp.del.%llu.%llu", (unsigned long long)f->epoch,
             (unsigned long long)h5fl_epoch_owner(f)->create_counter++);
    char *to = h5fl_join(f->o.dir, leaf);
    if (!to)
        return -1;
    int st = 0;
    if (rename(dir, to) != 0) {
        h5fl_err("cannot delete '%s': %s", path, strerror(errno));
        st = -1;
    } else {
        h5fl_rm_rf(to); /* what a failure leaves is a private directory: never a name */
        h5fl_err_clear();
    }
    free(to);
    return st;
}

/* H5Ldelete. An object still open (here or on another rank) lives on, unnamed, until its last handle
 * closes, as in native HDF5: its directory moves to an @gone.* directory at the container root (removed
 * by the next writable open) instead of being deleted under the open handles, which would otherwise
 * write into an unlinked log or, once the name is reused, into another object. */
static int link_delete(h5fl_obj_t *o, const H5VL_loc_params_t *lp)
{
    h5fl_file_t *f = o->file;
    h5fl_loc_t loc = {0};
    h5fl_collective_begin(f);
    int st = h5fl_loc_from_params2(o, lp, &loc, false);
    if (st == 0 && f->rank == 0 && loc.type == H5I_BADID) {
        h5fl_err("link '%s' does not exist", loc.path);
        st = -1;
    }
    if (st == 0 && !strcmp(loc.path, "/")) {
        h5fl_err("the root group cannot be deleted");
        st = -1;
    }
    if (st == 0 && loc.file) {
        h5fl_err("'%s' is reached through an external link: h5flow_log does not delete through external "
                 "links; open the other file and delete it there",
                 loc.path);
        st = -1;
    }
    /* rank 0 decides (the others may look after it removed the name) */
    int stub = st == 0 && loc.ldir;
    if (f->comm != MPI_COMM_NULL && f->size > 1) {
        MPI_Request req;
        MPI_Ibcast(&stub, 1, MPI_INT, 0, f->comm, &req);
        h5fl_mpi_wait(&req);
    }
    if (stub) { /* a name of an object in the store (links.c): the stub goes, then a link */
        if (f->rank == 0 && st == 0) {
            uint64_t id;
            char *hf = h5fl_join(loc.ldir, H5FL_HARD_FILE);
            st = hf && h5fl_hard_read(loc.ldir, &id) == 0 ? 0 : -1;
            if (st == 0 && unlink(hf) != 0) {
                h5fl_err("cannot delete '%s': %s", loc.path, strerror(errno));
                st = -1;
            }
            free(hf);
            if (st == 0)
                st = remove_away(f, loc.ldir, loc.path); /* what is left is no link: ignored until then */
            if (st == 0)
                st = h5fl_hard_unref(f, &id, 1);
            if (st == 0)
                st = h5fl_corder_reset_if_empty(loc.ldir, f->fsync);
        }
        st = h5fl_collective(f, st);
        if (st == 0)
            st = h5fl_hard_sweep(f);
        h5fl_loc_free(&loc);
        return st;
    }
    const char *rel = st == 0 ? rel_dir(f, loc.dir) : "";
    bool busy = busy_anywhere(f, rel); /* collective: every rank reaches it */
    uint64_t *ids = NULL; /* the hard links under it: their objects lose a name */
    size_t nids = 0;
    if (st == 0 && f->rank == 0)
        st = h5fl_hard_collect(loc.dir, &ids, &nids);
    char gone[64];
    snprintf(gone, sizeof gone, "/" H5FL_GONE_PREFIX "%llu.%llu", (unsigned long long)f->epoch,
             (unsigned long long)h5fl_epoch_owner(f)->gone_counter++);
    if (st == 0 && f->rank == 0) {
        if (!busy) {
            st = remove_away(f, loc.dir, loc.path);
        } else {
            char *to = malloc(strlen(f->o.dir) + strlen(gone) + 1);
            if (!to) {
                h5fl_err("out of memory");
                st = -1;
            } else {
                sprintf(to, "%s%s", f->o.dir, gone);
                if (rename(loc.dir, to) != 0) {
                    h5fl_err("cannot delete '%s': %s", loc.path, strerror(errno));
                    st = -1;
                }
                free(to);
            }
        }
    }
    if (st == 0 && nids > 0)
        st = h5fl_hard_unref(f, ids, nids);
    if (st == 0 && f->rank == 0)
        st = h5fl_corder_reset_if_empty(loc.dir, f->fsync);
    free(ids);
    st = h5fl_collective(f, st);
    if (st == 0 && busy)
        st = h5fl_reg_moved(f->fileno, rel, gone, loc.path, NULL);
    if (st == 0)
        st = h5fl_hard_sweep(f);
    h5fl_loc_free(&loc);
    return st;
}

herr_t h5fl_link_specific(void *obj, const H5VL_loc_params_t *lp, H5VL_link_specific_args_t *args, hid_t dxpl,
                          void **req)
{
    (void)dxpl;
    (void)req;
    h5fl_err_clear();
    h5fl_obj_t *o = obj;
    h5fl_file_t *f = o->file;
    h5fl_loc_t loc = {0};
    int rc = -1;
    switch (args->op_type) {
        case H5VL_LINK_EXISTS:
            if (h5fl_loc_from_params2(o, lp, &loc, false) != 0)
                break;
            *args->args.exists.exists = loc.type != H5I_BADID;
            rc = 0;
            break;
        case H5VL_LINK_DELETE:
            if (h5fl_writable(f))
                rc = link_delete(o, lp);
            break;
        case H5VL_LINK_ITER: {
            H5VL_link_iterate_args_t *a = &args->args.iterate;
            if (h5fl_loc_from_params(o, lp, &loc) != 0)
                break;
            iter_t it = {.recursive = a->recursive, .order = a->order, .lop = a->op, .op_data = a->op_data,
                         .crt = a->idx_type == H5_INDEX_CRT_ORDER};
            rc = iterate(o, &loc, &it, a->recursive ? NULL : a->idx_p);
            h5fl_loc_free(&loc);
            if (rc >= 0)
                return rc; /* a positive value stops the iteration early and is returned */
            goto fail;
        }
        default:
            h5fl_err("link operation %d is not supported", (int)args->op_type);
    }
    h5fl_loc_free(&loc);
    if (rc == 0)
        return 0;
fail:
    h5fl_err_push(__func__);
    return -1;
}

/* H5Ovisit: the objects reachable from `loc`, the starting one first as "." (each object once). */
int h5fl_visit_objects(h5fl_obj_t *o, const h5fl_loc_t *loc, H5_iter_order_t order, unsigned fields,
                       H5O_iterate2_t op, void *op_data, bool crt)
{
    iter_t it = {.recursive = true, .objects = true, .order = order, .fields = fields, .oop = op,
                 .op_data = op_data, .crt = crt};
    return iterate(o, loc, &it, NULL);
}
