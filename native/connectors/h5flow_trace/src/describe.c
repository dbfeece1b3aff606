/* h5flow_trace: descriptions of datatypes, selections and property lists, written into the string table. */
#include "describe.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char *buf;
    size_t len, pos;
} out_t;

static void emit(out_t *o, const char *fmt, ...)
{
    if (o->pos + 1 >= o->len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->pos, o->len - o->pos, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->pos += (size_t)n < o->len - o->pos ? (size_t)n : o->len - o->pos - 1;
}

void h5ft_type_str(hid_t type, char *buf, size_t len)
{
    buf[0] = 0;
    if (type < 0)
        return;
    H5T_class_t cls = H5Tget_class(type);
    size_t size = H5Tget_size(type);
    const char *order = H5Tget_order(type) == H5T_ORDER_BE ? "be" : "le";
    switch (cls) {
    case H5T_INTEGER:
        snprintf(buf, len, "%c%zu%s", H5Tget_sign(type) == H5T_SGN_NONE ? 'u' : 'i', size * 8, order);
        break;
    case H5T_FLOAT:
        snprintf(buf, len, "f%zu%s", size * 8, order);
        break;
    case H5T_STRING:
        if (H5Tis_variable_str(type) > 0)
            snprintf(buf, len, "vlen-str");
        else
            snprintf(buf, len, "str(%zu)", size);
        break;
    case H5T_VLEN: {
        hid_t base = H5Tget_super(type);
        char b[64];
        h5ft_type_str(base, b, sizeof b);
        if (base >= 0)
            H5Tclose(base);
        snprintf(buf, len, "vlen(%s)", b);
        break;
    }
    case H5T_COMPOUND: snprintf(buf, len, "compound(%zu)", size); break;
    case H5T_ARRAY: snprintf(buf, len, "array(%zu)", size); break;
    case H5T_ENUM: snprintf(buf, len, "enum(%zu)", size); break;
    case H5T_OPAQUE: snprintf(buf, len, "opaque(%zu)", size); break;
    case H5T_BITFIELD: snprintf(buf, len, "bitfield(%zu)", size); break;
    case H5T_REFERENCE: snprintf(buf, len, "ref"); break;
    case H5T_TIME: snprintf(buf, len, "time(%zu)", size); break;
    case H5T_NO_CLASS:
    case H5T_NCLASSES:
    default: snprintf(buf, len, "?"); break;
    }
}

void h5ft_space_sel(hid_t space, h5ft_sel *out)
{
    memset(out, 0, sizeof *out);
    if (space < 0)
        return;
    H5S_class_t cls = H5Sget_simple_extent_type(space);
    if (cls == H5S_NULL) {
        snprintf(out->shape, sizeof out->shape, "null");
        return;
    }
    if (cls == H5S_SCALAR)
        snprintf(out->shape, sizeof out->shape, "scalar");
    int nd = H5Sget_simple_extent_ndims(space);
    if (nd > 0 && nd <= H5S_MAX_RANK) {
        hsize_t dims[H5S_MAX_RANK];
        H5Sget_simple_extent_dims(space, dims, NULL);
        out->ndims = (unsigned)nd;
        out_t o = {out->shape, sizeof out->shape, 0};
        for (int i = 0; i < nd; i++)
            emit(&o, i ? "x%llu" : "%llu", (unsigned long long)dims[i]);
    }
    hssize_t np = H5Sget_select_npoints(space);
    out->npoints = np > 0 ? (uint64_t)np : 0;
    switch (H5Sget_select_type(space)) {
    case H5S_SEL_ALL: out->nblocks = 1; break;
    case H5S_SEL_POINTS: {
        hssize_t n = H5Sget_select_elem_npoints(space);
        out->nblocks = n > 0 ? (uint64_t)n : 0;
        break;
    }
    case H5S_SEL_HYPERSLABS: {
        hssize_t n = H5Sget_select_hyper_nblocks(space);
        out->nblocks = n > 0 ? (uint64_t)n : 0;
        break;
    }
    case H5S_SEL_NONE:
    case H5S_SEL_ERROR:
    case H5S_SEL_N:
    default: out->nblocks = 0; break;
    }
}

static const char *libver_name(H5F_libver_t v)
{
    switch (v) {
    case H5F_LIBVER_EARLIEST: return "earliest";
    case H5F_LIBVER_V18: return "v18";
    case H5F_LIBVER_V110: return "v110";
    case H5F_LIBVER_V112: return "v112";
    case H5F_LIBVER_V114: return "v114";
    case H5F_LIBVER_ERROR:
    case H5F_LIBVER_NBOUNDS:
    default: return "?";
    }
}

static void emit_json_str(out_t *o, const char *s)
{
    emit(o, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            emit(o, "\\%c", c);
        else if (c < 0x20)
            emit(o, "\\u%04x", c);
        else
            emit(o, "%c", c);
    }
    emit(o, "\"");
}

void h5ft_dcpl_json(hid_t dcpl, char *buf, size_t len)
{
    out_t o = {buf, len, 0};
    buf[0] = 0;
    if (dcpl < 0)
        return;
    H5D_layout_t layout = H5Pget_layout(dcpl);
    const char *ln = layout == H5D_CHUNKED ? "chunked"
                     : layout == H5D_COMPACT ? "compact"
                     : layout == H5D_VIRTUAL ? "virtual"
                                             : "contiguous";
    emit(&o, "{\"layout\": \"%s\"", ln);
    if (layout == H5D_CHUNKED) {
        hsize_t dims[H5S_MAX_RANK];
        int nd = H5Pget_chunk(dcpl, H5S_MAX_RANK, dims);
        emit(&o, ", \"chunk\": [");
        for (int i = 0; i < nd; i++)
            emit(&o, i ? ", %llu" : "%llu", (unsigned long long)dims[i]);
        emit(&o, "]");
    }
    H5D_fill_time_t ft = H5D_FILL_TIME_ERROR;
    H5Pget_fill_time(dcpl, &ft);
    emit(&o, ", \"fill_time\": \"%s\"",
         ft == H5D_FILL_TIME_ALLOC ? "alloc" : ft == H5D_FILL_TIME_NEVER ? "never" : "ifset");
    H5D_alloc_time_t at = H5D_ALLOC_TIME_ERROR;
    H5Pget_alloc_time(dcpl, &at);
    emit(&o, ", \"alloc_time\": \"%s\"",
         at == H5D_ALLOC_TIME_EARLY  ? "early"
         : at == H5D_ALLOC_TIME_INCR ? "incr"
         : at == H5D_ALLOC_TIME_LATE ? "late"
                                     : "default");
    H5D_fill_value_t fv = H5D_FILL_VALUE_ERROR;
    H5Pfill_value_defined(dcpl, &fv);
    emit(&o, ", \"fill_value_set\": \"%s\"",
         fv == H5D_FILL_VALUE_USER_DEFINED ? "user" : fv == H5D_FILL_VALUE_UNDEFINED ? "undefined" : "default");
    emit(&o, ", \"filters\": [");
    int nf = H5Pget_nfilters(dcpl);
    for (int i = 0; i < nf; i++) {
        unsigned flags = 0, cd[8];
        size_t ncd = 8;
        char name[64] = "";
        H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cd, sizeof name, name, NULL);
        if (i)
            emit(&o, ", ");
        emit_json_str(&o, name);
    }
    emit(&o, "]}");
}

static void emit_mpi_hints(out_t *o, hid_t fapl)
{
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Info info = MPI_INFO_NULL;
    if (H5Pget_fapl_mpio(fapl, &comm, &info) < 0)
        return;
    emit(o, ", \"mpi_hints\": {");
    if (info != MPI_INFO_NULL) {
        int nkeys = 0;
        MPI_Info_get_nkeys(info, &nkeys);
        for (int i = 0; i < nkeys; i++) {
            char key[MPI_MAX_INFO_KEY + 1], val[256];
            int vlen = 0, flag = 0;
            MPI_Info_get_nthkey(info, i, key);
            MPI_Info_get_valuelen(info, key, &vlen, &flag);
            if (!flag || vlen >= (int)sizeof val)
                continue;
            MPI_Info_get(info, key, (int)sizeof val - 1, val, &flag);
            if (i)
                emit(o, ", ");
            emit_json_str(o, key);
            emit(o, ": ");
            emit_json_str(o, val);
        }
        MPI_Info_free(&info);
    }
    emit(o, "}");
    if (comm != MPI_COMM_NULL)
        MPI_Comm_free(&comm);
}

void h5ft_fapl_json(hid_t fapl, char *buf, size_t len)
{
    out_t o = {buf, len, 0};
    buf[0] = 0;
    if (fapl < 0)
        return;
    H5F_libver_t low = H5F_LIBVER_EARLIEST, high = H5F_LIBVER_LATEST;
    H5Pget_libver_bounds(fapl, &low, &high);
    emit(&o, "{\"libver\": [\"%s\", \"%s\"]", libver_name(low), libver_name(high));
    hsize_t thr = 0, align = 0;
    H5Pget_alignment(fapl, &thr, &align);
    emit(&o, ", \"alignment\": [%llu, %llu]", (unsigned long long)thr, (unsigned long long)align);
    hsize_t mbs = 0;
    H5Pget_meta_block_size(fapl, &mbs);
    emit(&o, ", \"meta_block_size\": %llu", (unsigned long long)mbs);
    hid_t drv = H5Pget_driver(fapl);
    static const struct {
        const char *name;
        int which;
    } names[] = {{"mpio", 0}, {"sec2", 1}, {"core", 2}, {"stdio", 3}, {"family", 4}, {"multi", 5}, {"log", 6},
                 {"subfiling", 7}};
    const char *dname = "other";
    for (size_t i = 0; drv >= 0 && i < sizeof names / sizeof names[0]; i++) {
        hid_t id = H5I_INVALID_HID;
        switch (names[i].which) {
        case 0: id = H5FD_MPIO; break;
        case 1: id = H5FD_SEC2; break;
        case 2: id = H5FD_CORE; break;
        case 3: id = H5FD_STDIO; break;
        case 4: id = H5FD_FAMILY; break;
        case 5: id = H5FD_MULTI; break;
        case 6: id = H5FD_LOG; break;
        /* H5FD_SUBFILING registers the driver on first use, and that initializes MPI: asked only once the
         * program has registered it itself (a file access list cannot carry it otherwise) */
        default: id = H5FDis_driver_registered_by_value(H5_VFD_SUBFILING) > 0 ? H5FD_SUBFILING : H5I_INVALID_HID;
            break;
        }
        if (id == drv) {
            dname = names[i].name;
            break;
        }
    }
    emit(&o, ", \"driver\": \"%s\"", dname);
    if (drv == H5FD_MPIO)
        emit_mpi_hints(&o, fapl);
    emit(&o, "}");
}
