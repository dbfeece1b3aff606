/* Values of datatypes with variable-length members (sequences, strings inside compounds or arrays),
 * serialized into one byte string per element (docs/FORMAT.md "Variable-length sequences"):
 *
 *   H5T_VLEN sequence        u64 count, then count elements of the base type
 *   variable-length string   u64 length (UINT64_MAX: a null pointer), then the bytes
 *   H5T_COMPOUND             its members in member order
 *   H5T_ARRAY                its elements
 *   anything else            the element's bytes as they are in memory (the stored datatype's layout)
 *
 * All integers are little endian. Decoding allocates with malloc (HDF5's H5Treclaim frees them). */
#include "h5fl.h"

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
bool h5fl_blob_type(hid_t type)
{
    return H5Tget_class(type) != H5T_STRING && H5Tdetect_class(type, H5T_VLEN) > 0;
}

int h5fl_blob_encode(hid_t type, const void *elem, h5fl_buf_t *out)
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
            rc = h5fl_blob_encode(base, (const uint8_t *)v->p + i * bs, out);
        if (base >= 0)
            H5Tclose(base);
        return rc;
    }
    if (cls == H5T_COMPOUND || cls == H5T_ARRAY) {
        if (H5Tdetect_class(type, H5T_VLEN) <= 0)
            return put(out, elem, size);
        int rc = 0;
        if (cls == H5T_COMPOUND) {
            int n = H5Tget_nmembers(type);
            for (int i = 0; i < n && rc == 0; i++) {
                hid_t m = H5Tget_member_type(type, (unsigned)i);
                size_t off = H5Tget_member_offset(type, (unsigned)i);
                rc = m >= 0 ? h5fl_blob_encode(m, (const uint8_t *)elem + off, out) : -1;
                if (m >= 0)
                    H5Tclose(m);
            }
        } else {
            hid_t base = H5Tget_super(type);
            size_t bs = base >= 0 ? H5Tget_size(base) : 0;
            for (size_t i = 0; base >= 0 && bs && rc == 0 && i < size / bs; i++)
                rc = h5fl_blob_encode(base, (const uint8_t *)elem + i * bs, out);
            if (base >= 0)
                H5Tclose(base);
            else
                rc = -1;
        }
        return rc;
    }
    return put(out, elem, size);
}

static int need(const uint8_t *p, const uint8_t *end, uint64_t n)
{
    if ((uint64_t)(end - p) < n) {
        h5fl_err("a stored variable-length value is truncated (damaged data)");
        return -1;
    }
    return 0;
}

int h5fl_blob_decode(hid_t type, const uint8_t **pp, const uint8_t *end, void *elem)
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
            if (need(p, end, l) || !(s = malloc(l + 1))) {
                if (!h5fl_err_msg())
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
            } else if (!(v->p = calloc((size_t)n, bs))) {
                h5fl_err("out of memory");
                rc = -1;
            } else {
                v->len = (size_t)n;
                for (size_t i = 0; rc == 0 && i < v->len; i++)
                    rc = h5fl_blob_decode(base, &p, end, (uint8_t *)v->p + i * bs);
            }
        }
        if (base >= 0)
            H5Tclose(base);
        *pp = p;
        return rc;
    }
    if ((cls == H5T_COMPOUND || cls == H5T_ARRAY) && H5Tdetect_class(type, H5T_VLEN) > 0) {
        memset(elem, 0, size);
        int rc = 0;
        if (cls == H5T_COMPOUND) {
            int n = H5Tget_nmembers(type);
            for (int i = 0; i < n && rc == 0; i++) {
                hid_t m = H5Tget_member_type(type, (unsigned)i);
                size_t off = H5Tget_member_offset(type, (unsigned)i);
                rc = m >= 0 ? h5fl_blob_decode(m, &p, end, (uint8_t *)elem + off) : -1;
                if (m >= 0)
                    H5Tclose(m);
            }
        } else {
            hid_t base = H5Tget_super(type);
            size_t bs = base >= 0 ? H5Tget_size(base) : 0;
            rc = base >= 0 && bs ? 0 : -1;
            for (size_t i = 0; rc == 0 && i < size / bs; i++)
                rc = h5fl_blob_decode(base, &p, end, (uint8_t *)elem + i * bs);
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
