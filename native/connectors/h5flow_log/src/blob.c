/* Values of datatypes with variable-length members (sequences, strings inside compounds or arrays),
 * serialized into one byte string per element (docs/FORMAT.md "Variable-length sequences"):
 *
 *   H5T_VLEN sequence        u64 count, then count elements of the base type
 *   variable-length string   u64 length (UINT64_MAX: a null pointer), then the bytes
 *   H5T_COMPOUND             its members in member order
 *   H5T_ARRAY                its elements
 *   H5T_STD_REF (H5R_ref_t)  u8 0 (a null reference), or u8 2 (H5R_OBJECT2) and the 8-byte token
 *   anything else            the element's bytes as they are in memory (the stored datatype's layout)
 *
 * All integers are little endian. Decoding allocates with malloc (HDF5's H5Treclaim frees them). */
#include "h5fl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int put(h5fl_buf_t *b, const void *p, size_t n)
{
    if (n > SIZE_MAX - b->len) {
        h5fl_err("variable-length value too large");
        return -1;
    }
    if (b->len + n > b->cap) {
        size_t c = b->cap ? b->cap : 64;
        while (c < b->len + n)
            c = c > SIZE_MAX / 2 ? b->len + n : 2 * c;
        uint8_t *q = realloc(b->p, c);
        if (!q) {
            h5fl_err("out of memory");
            return -1;
        }
        b->p = q;
        b->cap = c;
    }
    if (n)
        memcpy(b->p + b->len, p, n);
    b->len += n;
    return 0;
}

static int put_u64(h5fl_buf_t *b, uint64_t v)
{
    uint8_t x[8];
    h5fl_put_u64(x, v);
    return put(b, x, 8);
}

/* Whether values of `type` are stored this way: a non-string type with a variable-length part
 * (H5Tdetect_class counts variable-length strings as H5T_VLEN too). */
static bool has_std_ref(hid_t type)
{
    H5T_class_t cls = H5Tget_class(type);
    if (cls == H5T_REFERENCE)
        return H5Tequal(type, H5T_STD_REF) > 0;
    bool r = false;
    if (cls == H5T_COMPOUND) {
        int n = H5Tget_nmembers(type);
        for (int i = 0; i < n && !r; i++) {
            hid_t m = H5Tget_member_type(type, (unsigned)i);
            r = m >= 0 && has_std_ref(m);
            if (m >= 0)
                H5Tclose(m);
        }
    } else if (cls == H5T_ARRAY || cls == H5T_VLEN) {
        hid_t b = H5Tget_super(type);
        r = b >= 0 && has_std_ref(b);
        if (b >= 0)
            H5Tclose(b);
    }
    return r;
}

static bool needs_encoding(hid_t type)
{
    return H5Tdetect_class(type, H5T_VLEN) > 0 || has_std_ref(type);
}

bool h5fl_blob_type(hid_t type)
{
    return H5Tget_class(type) != H5T_STRING && needs_encoding(type);
}

/* Whether a reference's file is the context's container. */
int h5fl_blob_same_container(h5fl_blob_ctx_t *ctx, const H5R_ref_t *r)
{
    char name[PATH_MAX];
    ssize_t n = H5Rget_file_name(r, name, sizeof name);
    if (n < 0 || (size_t)n >= sizeof name) {
        h5fl_err("cannot get the file of a reference");
        return -1;
    }
    if (!strcmp(name, ctx->f->name))
        return 0;
    char a[PATH_MAX], b[PATH_MAX];
    if (realpath(name, a) && realpath(ctx->f->name, b) && !strcmp(a, b))
        return 0;
    h5fl_err("a reference to an object of another file (%s) cannot be stored in %s: h5flow_log stores "
             "references to objects of the same container only",
             name, ctx->f->name);
    return -1;
}

int h5fl_blob_ref_take(h5fl_blob_ctx_t *ctx, const H5R_ref_t *r, uint8_t tok[8])
{
    static const H5R_ref_t zero;
    memset(tok, 0, 8);
    if (!memcmp(r, &zero, sizeof zero)) /* a zeroed H5R_ref_t (fresh buffers, fill): the null reference */
        return 0;
    H5R_type_t t = H5Rget_type(r);
    if (t != H5R_OBJECT2) {
        h5fl_err("h5flow_log stores object references only (this H5R_ref_t is a %s reference)",
                 t == H5R_DATASET_REGION2 ? "region" : t == H5R_ATTR ? "attribute" : "non-object");
        return -1;
    }
    if (!ctx || h5fl_blob_same_container(ctx, r) != 0) {
        if (!ctx)
            h5fl_err("internal error: no container for a reference");
        return -1;
    }
    memcpy(tok, r, 8); /* H5R_ref_priv_t starts with the object's H5O_token_t (HDF5 1.14 H5Rpkg.h) */
    return 1;
}

static int encode_ref(h5fl_blob_ctx_t *ctx, const H5R_ref_t *r, h5fl_buf_t *out)
{
    uint8_t k[9] = {0};
    int t = h5fl_blob_ref_take(ctx, r, k + 1);
    if (t <= 0)
        return t < 0 ? -1 : put(out, k, 1);
    k[0] = (uint8_t)H5R_OBJECT2;
    return put(out, k, 9);
}

/* A valid H5R_ref_t of the context's container: a copy of one made for the root, then the token. */
static int decode_ref(h5fl_blob_ctx_t *ctx, const uint8_t **pp, const uint8_t *end, H5R_ref_t *r)
{
    memset(r, 0, sizeof *r);
    if (end - *pp < 1) {
        h5fl_err("a stored reference is truncated (damaged data)");
        return -1;
    }
    uint8_t k = **pp;
    if (k == 0) {
        *pp += 1;
        return 0;
    }
    if (k != (uint8_t)H5R_OBJECT2 || end - *pp < 9) {
        h5fl_err("a stored reference is damaged (kind %u)", (unsigned)k);
        return -1;
    }
    if (h5fl_blob_ref_make(ctx, *pp + 1, r) != 0)
        return -1;
    *pp += 9;
    return 0;
}

int h5fl_blob_ref_make(h5fl_blob_ctx_t *ctx, const uint8_t tok[8], H5R_ref_t *r)
{
    static const uint8_t null_tok[8];
    memset(r, 0, sizeof *r);
    if (!memcmp(tok, null_tok, 8)) /* the null reference */
        return 0;
    if (!ctx) {
        h5fl_err("internal error: no container for a reference");
        return -1;
    }
    if (!ctx->have_tmpl) {
        h5fl_loc_t root = {.dir = ctx->f->o.dir, .path = "/", .type = H5I_GROUP};
        hid_t g = h5fl_register_for_callback(ctx->f, &root);
        if (g < 0)
            return -1;
        herr_t st = H5Rcreate_object(g, ".", H5P_DEFAULT, &ctx->tmpl);
        H5Idec_ref(g);
        if (st < 0) {
            h5fl_err("cannot make a reference of %s", ctx->f->name);
            return -1;
        }
        ctx->have_tmpl = true;
    }
    if (H5Rcopy(&ctx->tmpl, r) < 0) {
        h5fl_err("cannot copy a reference");
        return -1;
    }
    memcpy(r, tok, 8);
    return 0;
}

void h5fl_blob_ctx_end(h5fl_blob_ctx_t *ctx)
{
    if (ctx->have_tmpl)
        H5Rdestroy(&ctx->tmpl);
    ctx->have_tmpl = false;
}

int h5fl_blob_encode(h5fl_blob_ctx_t *ctx, hid_t type, const void *elem, h5fl_buf_t *out)
{
    H5T_class_t cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    if (cls == H5T_STRING && H5Tis_variable_str(type) > 0) {
        const char *s = *(char *const *)elem;
        size_t l = s ? strlen(s) : 0;
        return put_u64(out, s ? l : UINT64_MAX) != 0 || put(out, s, l) != 0 ? -1 : 0;
    }
    if (cls == H5T_VLEN) {
        const hvl_t *v = elem;
        hid_t base = H5Tget_super(type);
        size_t bs = base >= 0 ? H5Tget_size(base) : 0;
        int rc = base >= 0 && bs ? put_u64(out, v->p ? (uint64_t)v->len : 0) : -1;
        for (size_t i = 0; rc == 0 && v->p && i < v->len; i++)
            rc = h5fl_blob_encode(ctx, base, (const uint8_t *)v->p + i * bs, out);
        if (base >= 0)
            H5Tclose(base);
        return rc;
    }
    if (cls == H5T_REFERENCE && H5Tequal(type, H5T_STD_REF) > 0)
        return encode_ref(ctx, elem, out);
    if (cls == H5T_COMPOUND || cls == H5T_ARRAY) {
        if (!needs_encoding(type))
            return put(out, elem, size);
        int rc = 0;
        if (cls == H5T_COMPOUND) {
            int n = H5Tget_nmembers(type);
            for (int i = 0; i < n && rc == 0; i++) {
                hid_t m = H5Tget_member_type(type, (unsigned)i);
                size_t off = H5Tget_member_offset(type, (unsigned)i);
                rc = m >= 0 ? h5fl_blob_encode(ctx, m, (const uint8_t *)elem + off, out) : -1;
                if (m >= 0)
                    H5Tclose(m);
            }
        } else {
            hid_t base = H5Tget_super(type);
            size_t bs = base >= 0 ? H5Tget_size(base) : 0;
            for (size_t i = 0; base >= 0 && bs && rc == 0 && i < size / bs; i++)
                rc = h5fl_blob_encode(ctx, base, (const uint8_t *)elem + i * bs, out);
            if (base >= 0)
                H5Tclose(base);
            else
                rc = -1;
        }
        return rc;
    }
    return put(out, elem, size);
}

static void *blob_alloc(h5fl_blob_ctx_t *ctx, size_t n)
{
    return ctx && ctx->alloc ? ctx->alloc(n, ctx->alloc_info) : malloc(n);
}

void h5fl_blob_ctx_set_alloc(h5fl_blob_ctx_t *ctx, hid_t dxpl)
{
    H5MM_free_t fr;
    void *fi;
    ctx->alloc = NULL;
    ctx->alloc_info = NULL;
    if (dxpl >= 0 && dxpl != H5P_DEFAULT &&
        H5Pget_vlen_mem_manager(dxpl, &ctx->alloc, &ctx->alloc_info, &fr, &fi) < 0) {
        ctx->alloc = NULL;
        ctx->alloc_info = NULL;
    }
}

static int need(const uint8_t *p, const uint8_t *end, uint64_t n)
{
    if ((uint64_t)(end - p) < n) {
        h5fl_err("a stored variable-length value is truncated (damaged data)");
        return -1;
    }
    return 0;
}

int h5fl_blob_decode(h5fl_blob_ctx_t *ctx, hid_t type, const uint8_t **pp, const uint8_t *end, void *elem)
{
    H5T_class_t cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    const uint8_t *p = *pp;
    if (cls == H5T_STRING && H5Tis_variable_str(type) > 0) {
        if (need(p, end, 8))
            return -1;
        uint64_t l = h5fl_get_u64(p);
        p += 8;
        char *s = NULL;
        if (l != UINT64_MAX) {
            if (need(p, end, l) || !(s = blob_alloc(ctx, l + 1))) {
                h5fl_err("out of memory");
                return -1;
            }
            memcpy(s, p, l);
            s[l] = '\0';
            p += l;
        }
        *(char **)elem = s;
        *pp = p;
        return 0;
    }
    if (cls == H5T_VLEN) {
        hvl_t *v = elem;
        v->len = 0;
        v->p = NULL;
        if (need(p, end, 8))
            return -1;
        uint64_t n = h5fl_get_u64(p);
        p += 8;
        hid_t base = H5Tget_super(type);
        size_t bs = base >= 0 ? H5Tget_size(base) : 0;
        int rc = base >= 0 && bs ? 0 : -1;
        if (rc == 0 && n) {
            /* every element takes at least one stored byte: a count larger than what is left is damage */
            if (n > (uint64_t)(end - p) || n > SIZE_MAX / bs) {
                h5fl_err("a stored variable-length sequence has an impossible length (damaged data)");
                rc = -1;
            } else if (!(v->p = blob_alloc(ctx, (size_t)n * bs))) {
                h5fl_err("out of memory");
                rc = -1;
            } else {
                memset(v->p, 0, (size_t)n * bs);
                v->len = (size_t)n;
                for (size_t i = 0; rc == 0 && i < v->len; i++)
                    rc = h5fl_blob_decode(ctx, base, &p, end, (uint8_t *)v->p + i * bs);
            }
        }
        if (base >= 0)
            H5Tclose(base);
        *pp = p;
        return rc;
    }
    if (cls == H5T_REFERENCE && H5Tequal(type, H5T_STD_REF) > 0)
        return decode_ref(ctx, pp, end, elem);
    if ((cls == H5T_COMPOUND || cls == H5T_ARRAY) && needs_encoding(type)) {
        memset(elem, 0, size);
        int rc = 0;
        if (cls == H5T_COMPOUND) {
            int n = H5Tget_nmembers(type);
            for (int i = 0; i < n && rc == 0; i++) {
                hid_t m = H5Tget_member_type(type, (unsigned)i);
                size_t off = H5Tget_member_offset(type, (unsigned)i);
                rc = m >= 0 ? h5fl_blob_decode(ctx, m, &p, end, (uint8_t *)elem + off) : -1;
                if (m >= 0)
                    H5Tclose(m);
            }
        } else {
            hid_t base = H5Tget_super(type);
            size_t bs = base >= 0 ? H5Tget_size(base) : 0;
            rc = base >= 0 && bs ? 0 : -1;
            for (size_t i = 0; rc == 0 && i < size / bs; i++)
                rc = h5fl_blob_decode(ctx, base, &p, end, (uint8_t *)elem + i * bs);
            if (base >= 0)
                H5Tclose(base);
        }
        *pp = p;
        return rc;
    }
    if (need(p, end, size))
        return -1;
    memcpy(elem, p, size);
    *pp = p + size;
    return 0;
}

/* H5Tdecode of a stored datatype with references inside variable-length types does not give back a
 * type equal to the one encoded (HDF5 1.14.5: the inner H5T_STD_REF keeps its on-disk form): rebuild it
 * from its parts as the memory type applications create. Returns a new id (or -1). */
hid_t h5fl_blob_memtype(hid_t t)
{
    H5T_class_t cls = H5Tget_class(t);
    if (cls == H5T_REFERENCE) {
        /* inside a decoded type a reference keeps its on-disk form, which H5Tequal finds equal to none of
         * the memory types; decoded on its own, it is in memory form */
        size_t n = 0;
        uint8_t *b = NULL;
        hid_t m = -1, r = -1;
        if (H5Tencode(t, NULL, &n) >= 0 && (b = malloc(n ? n : 1)) && H5Tencode(t, b, &n) >= 0)
            m = H5Tdecode(b);
        free(b);
        if (m < 0)
            return -1;
        if (H5Tequal(m, H5T_STD_REF_OBJ) > 0)
            r = H5Tcopy(H5T_STD_REF_OBJ);
        else if (H5Tequal(m, H5T_STD_REF_DSETREG) > 0)
            r = H5Tcopy(H5T_STD_REF_DSETREG);
        else
            r = H5Tcopy(H5T_STD_REF); /* the only other reference type the connector stores */
        H5Tclose(m);
        return r;
    }
    if (cls == H5T_VLEN && H5Tis_variable_str(t) <= 0) {
        hid_t b = H5Tget_super(t), mb = b >= 0 ? h5fl_blob_memtype(b) : -1, r = -1;
        if (mb >= 0)
            r = H5Tvlen_create(mb);
        if (b >= 0)
            H5Tclose(b);
        if (mb >= 0)
            H5Tclose(mb);
        return r;
    }
    if (cls == H5T_ARRAY) {
        int nd = H5Tget_array_ndims(t);
        hsize_t dims[H5S_MAX_RANK];
        hid_t b = H5Tget_super(t), mb = b >= 0 ? h5fl_blob_memtype(b) : -1, r = -1;
        if (mb >= 0 && nd > 0 && nd <= H5S_MAX_RANK && H5Tget_array_dims2(t, dims) == nd)
            r = H5Tarray_create2(mb, (unsigned)nd, dims);
        if (b >= 0)
            H5Tclose(b);
        if (mb >= 0)
            H5Tclose(mb);
        return r;
    }
    if (cls == H5T_COMPOUND && needs_encoding(t)) {
        int n = H5Tget_nmembers(t);
        hid_t r = n >= 0 ? H5Tcreate(H5T_COMPOUND, H5Tget_size(t)) : -1;
        for (int i = 0; r >= 0 && i < n; i++) {
            hid_t m = H5Tget_member_type(t, (unsigned)i), mm = m >= 0 ? h5fl_blob_memtype(m) : -1;
            char *name = H5Tget_member_name(t, (unsigned)i);
            if (mm < 0 || !name || H5Tinsert(r, name, H5Tget_member_offset(t, (unsigned)i), mm) < 0) {
                H5Tclose(r);
                r = -1;
            }
            if (name)
                H5free_memory(name);
            if (m >= 0)
                H5Tclose(m);
            if (mm >= 0)
                H5Tclose(mm);
        }
        return r;
    }
    return H5Tcopy(t);
}

/* Whether every member of `to`'s compounds has a member of the same name in `from` (recursively through
 * compounds, arrays and sequences): a conversion from `from` then sets every part of `to`. */
static bool covers(hid_t from, hid_t to)
{
    H5T_class_t ct = H5Tget_class(to), cf = H5Tget_class(from);
    if (ct == H5T_COMPOUND) {
        if (cf != H5T_COMPOUND)
            return false;
        int n = H5Tget_nmembers(to);
        bool ok = n >= 0;
        for (int i = 0; ok && i < n; i++) {
            char *name = H5Tget_member_name(to, (unsigned)i);
            int j = name ? H5Tget_member_index(from, name) : -1;
            H5free_memory(name);
            hid_t mt = j >= 0 ? H5Tget_member_type(to, (unsigned)i) : H5I_INVALID_HID;
            hid_t mf = j >= 0 ? H5Tget_member_type(from, (unsigned)j) : H5I_INVALID_HID;
            ok = mt >= 0 && mf >= 0 && covers(mf, mt);
            if (mt >= 0)
                H5Tclose(mt);
            if (mf >= 0)
                H5Tclose(mf);
        }
        return ok;
    }
    if ((ct == H5T_ARRAY || ct == H5T_VLEN) && cf == ct) {
        hid_t st = H5Tget_super(to), sf = H5Tget_super(from);
        bool ok = st >= 0 && sf >= 0 && covers(sf, st);
        if (st >= 0)
            H5Tclose(st);
        if (sf >= 0)
            H5Tclose(sf);
        return ok;
    }
    return true;
}

void h5fl_blob_reclaim(hid_t type, size_t n, hid_t dxpl, void *buf)
{
    hid_t sp = H5Screate_simple(1, (hsize_t[]){n ? n : 1}, NULL);
    if (sp >= 0) {
        if (n)
            H5Treclaim(type, sp, dxpl, buf);
        H5Sclose(sp);
    }
}

int h5fl_blob_convert(hid_t from, hid_t to, size_t n, void *buf, void *bkg, hid_t dxpl, bool writing,
                      const char *what, const char *name)
{
    if (H5Tdetect_class(from, H5T_REFERENCE) > 0 || H5Tdetect_class(to, H5T_REFERENCE) > 0) {
        h5fl_err("%s '%s' has variable-length parts and references: %s it with its own datatype (H5%cget_type); "
                 "h5flow_log converts values with variable-length parts only when they hold no references",
                 what, name, writing ? "write" : "read", what[0] == 'a' ? 'A' : 'D');
        return -1;
    }
    if (writing && !covers(from, to)) {
        h5fl_err("%s '%s': the memory datatype lacks members of the stored datatype; a write of a value with "
                 "variable-length parts must give every member (write it with its own datatype, H5%cget_type)",
                 what, name, what[0] == 'a' ? 'A' : 'D');
        return -1;
    }
    size_t fs = H5Tget_size(from);
    uint8_t *src = writing ? NULL : malloc(n * fs + 1); /* reading: the decoded values, freed after */
    if (!writing && !src) {
        h5fl_err("out of memory");
        return -1;
    }
    if (src)
        memcpy(src, buf, n * fs);
    int rc = 0;
    if (H5Tconvert(from, to, n, buf, bkg, dxpl) < 0) {
        h5fl_err("%s '%s': cannot convert its values between the stored and the memory datatype", what, name);
        rc = -1;
    }
    if (src) {
        h5fl_blob_reclaim(from, n, dxpl, src);
        free(src);
    }
    return rc;
}
