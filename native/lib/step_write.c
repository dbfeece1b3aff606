/* libh5flow, writing a step: the meshes of a step from every rank's pieces, meta.json, and the step's files:
 * data.h5 (layout n-1, collective) or rank-<r>.h5 (layout n-n) (transports/hdf5/layout_n1.py, layout_nn.py). */
#define _DEFAULT_SOURCE
#include "h5flow_internal.h"

static hid_t mem_type(int t)
{
    switch (t) {
    case H5FLOW_FLOAT32: return H5T_NATIVE_FLOAT;
    case H5FLOW_FLOAT64: return H5T_NATIVE_DOUBLE;
    case H5FLOW_INT32: return H5T_NATIVE_INT32;
    case H5FLOW_INT64: return H5T_NATIVE_INT64;
    case H5FLOW_UINT32: return H5T_NATIVE_UINT32;
    case H5FLOW_UINT64: return H5T_NATIVE_UINT64;
    case H5FLOW_INT8: return H5T_NATIVE_INT8;
    default: return H5T_NATIVE_UINT8;
    }
}

static hid_t file_type(int t)
{
    switch (t) {
    case H5FLOW_FLOAT32: return H5T_IEEE_F32LE;
    case H5FLOW_FLOAT64: return H5T_IEEE_F64LE;
    case H5FLOW_INT32: return H5T_STD_I32LE;
    case H5FLOW_INT64: return H5T_STD_I64LE;
    case H5FLOW_UINT32: return H5T_STD_U32LE;
    case H5FLOW_UINT64: return H5T_STD_U64LE;
    case H5FLOW_INT8: return H5T_STD_I8LE;
    default: return H5T_STD_U8LE;
    }
}


static uint64_t piece_elements(const piece_desc *d)
{
    return d->cnt[0] * d->cnt[1] * d->cnt[2];
}

/* Every rank alike, after the gather: empty pieces are dropped, except the first one of an array that has no
 * element on any rank (a particle code's step without particles), so consumers still find that array, of shape
 * (0, ...), as the Python API publishes it. Compacts `all` and `owner` and this rank's own pieces. */
void drop_empty(h5flow_writer *w, piece_desc *all, int *owner, size_t *total, size_t first_mine)
{
    size_t n = *total, out = 0, mine = 0;
    for (size_t i = 0; i < n; i++) {
        int keep = piece_elements(&all[i]) != 0;
        if (!keep) {
            keep = 1;
            for (size_t j = 0; j < n && keep; j++)
                if (j != i && !strcmp(all[j].name, all[i].name) && (piece_elements(&all[j]) || j < i))
                    keep = 0; /* the array has elements, or an earlier empty piece stands for it */
        }
        if (i >= first_mine && i < first_mine + w->npieces) { /* one of this rank's own pieces */
            piece_t *p = &w->pieces[i - first_mine];
            if (keep)
                w->pieces[mine++] = *p;
            else
                free(p->data);
        }
        if (keep) {
            all[out] = all[i];
            owner[out++] = owner[i];
        }
    }
    w->npieces = mine;
    *total = out;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The step's meshes from every rank's pieces (same on every rank), or an error. */
int build_meshes(h5flow_writer *w, const piece_desc *all, const int *owner, size_t total, mesh_t **out,
                        size_t *nout)
{
    *out = NULL;
    *nout = 0;
    const char **names = malloc((total ? total : 1) * sizeof *names);
    if (!names)
        return set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory", (long long)w->step);
    for (size_t i = 0; i < total; i++)
        names[i] = all[i].name;
    qsort(names, total, sizeof *names, cmp_names);
    size_t n = 0;
    for (size_t i = 0; i < total; i++)
        if (!n || strcmp(names[n - 1], names[i]))
            names[n++] = names[i];
    mesh_t *m = calloc(n ? n : 1, sizeof *m);
    if (!m) {
        free(names);
        return set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory", (long long)w->step);
    }
    *out = m;
    *nout = n;
    int rc = 0;
    for (size_t k = 0; k < n && !rc; k++) {
        m[k].name = names[k];
        size_t cnt = 0;
        for (size_t i = 0; i < total; i++)
            cnt += !strcmp(all[i].name, names[k]);
        m[k].idx = malloc(cnt * sizeof *m[k].idx);
        m[k].owner = malloc(cnt * sizeof *m[k].owner);
        m[k].rows = malloc((cnt + 1) * sizeof *m[k].rows);
        if (!m[k].idx || !m[k].owner || !m[k].rows) {
            rc = set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory", (long long)w->step);
            break;
        }
        uint64_t row = 0;
        for (size_t i = 0; i < total; i++) {
            const piece_desc *d = &all[i];
            if (strcmp(d->name, names[k]))
                continue;
            size_t b = m[k].nblocks++;
            if (b == 0) {
                m[k].type = d->type;
                m[k].ndims = d->ndims;
                memcpy(m[k].gdims, d->gdims, sizeof d->gdims);
            } else if (d->type != m[k].type || d->ndims != m[k].ndims || memcmp(d->gdims, m[k].gdims, sizeof d->gdims)) {
                const piece_desc *f = &all[m[k].idx[0]];
                rc = set_err(w, H5FLOW_ERR_ARGUMENT, "step %lld: ranks disagree on array \"%s\": rank %d gives %d-D "
                             "global_dims (%llu, %llu, %llu) of %s, rank %d %d-D (%llu, %llu, %llu) of %s; every rank must "
                             "give the same global_dims and type", (long long)w->step, d->name, m[k].owner[0],
                             f->ndims, (unsigned long long)f->gdims[0], (unsigned long long)f->gdims[1],
                             (unsigned long long)f->gdims[2], TYPES[f->type].dtype, owner[i], d->ndims,
                             (unsigned long long)d->gdims[0], (unsigned long long)d->gdims[1],
                             (unsigned long long)d->gdims[2], TYPES[d->type].dtype);
                break;
            }
            m[k].idx[b] = i;
            m[k].owner[b] = owner[i];
            m[k].rows[b] = row;
            row += d->cnt[0] * d->cnt[1] * d->cnt[2];
            /* extent i0 i1 j0 j1 k0 k1 (x, y, z) */
            int64_t e[6] = {(int64_t)d->off[2], (int64_t)(d->off[2] + d->cnt[2] - 1), (int64_t)d->off[1],
                            (int64_t)(d->off[1] + d->cnt[1] - 1), (int64_t)d->off[0],
                            (int64_t)(d->off[0] + d->cnt[0] - 1)};
            for (int a = 0; a < 6; a++)
                if (b == 0 || (a % 2 ? e[a] > m[k].gext[a] : e[a] < m[k].gext[a]))
                    m[k].gext[a] = e[a];
        }
        m[k].rows[m[k].nblocks] = row;
        /* every element by one rank, once per step: the same verdict on every rank (all see every piece) */
        for (size_t a = 0; a < m[k].nblocks && !rc; a++)
            for (size_t b = a + 1; b < m[k].nblocks && !rc; b++)
                if (pieces_overlap(&all[m[k].idx[a]], &all[m[k].idx[b]])) {
                    char ta[160], tb[160];
                    piece_text(&all[m[k].idx[a]], ta, sizeof ta);
                    piece_text(&all[m[k].idx[b]], tb, sizeof tb);
                    rc = set_err(w, H5FLOW_ERR_ARGUMENT, "step %lld: array \"%s\": the piece of rank %d at %s and the "
                                 "piece of rank %d at %s overlap; every element of an array is written by one rank, "
                                 "once per step (check each rank's offset)", (long long)w->step, m[k].name,
                                 m[k].owner[a], ta, m[k].owner[b], tb);
                }
    }
    for (size_t k = 0; k < n && !rc; k++) { /* every rank alike: a rank that wrote no piece of it checks too */
        int was = known_type(w, m[k].name);
        if (was >= 0 && was != m[k].type)
            rc = set_err(w, H5FLOW_ERR_ARGUMENT, "step %lld: " TYPE_CHANGED, (long long)w->step, m[k].name,
                         TYPES[was].dtype, TYPES[m[k].type].dtype);
    }
    if (!rc)
        rc = remember_types(w, m, n);
    free(names); /* the names themselves live in `all` */
    return rc;
}

void free_meshes(mesh_t *m, size_t n)
{
    if (!m)
        return;
    for (size_t k = 0; k < n; k++) {
        free(m[k].idx);
        free(m[k].owner);
        free(m[k].rows);
    }
    free(m);
}

/* meta.json: StepMeta as Python's json.dumps(asdict(meta), separators=(",", ":")) writes it. */
void step_json(const h5flow_writer *w, const piece_desc *all, const mesh_t *m, size_t n, h5fl_buf *b)
{
    char t[32];
    h5fl_repr(w->time, t);
    h5fl_buf_printf(b, "{\"step\":%lld,\"time\":%s,\"producers\":%d,\"meshes\":{", (long long)w->step, t, w->size);
    for (size_t k = 0; k < n; k++) {
        h5fl_buf_printf(b, "%s\"%s\":{\"name\":\"%s\",\"kind\":\"image\",\"blocks\":[", k ? "," : "", m[k].name,
                        m[k].name);
        for (size_t i = 0; i < m[k].nblocks; i++) {
            const piece_desc *d = &all[m[k].idx[i]];
            uint64_t cells = d->cnt[0] * d->cnt[1] * d->cnt[2];
            uint64_t points = (d->cnt[0] + 1) * (d->cnt[1] + 1) * (d->cnt[2] + 1);
            h5fl_buf_printf(b,
                            "%s{\"block_id\":%zu,\"owner\":%d,\"kind\":\"image\",\"num_cells\":%llu,\"num_points\":%llu,"
                            "\"extent\":[%lld,%lld,%lld,%lld,%lld,%lld],\"origin\":[0.0,0.0,0.0],\"spacing\":[1.0,%s,%s],"
                            "\"ghost\":0}",
                            i ? "," : "", i, m[k].owner[i], (unsigned long long)cells, (unsigned long long)points,
                            /* an empty piece ends one below where it starts on its empty axis */
                            (long long)d->off[2], (long long)d->off[2] + (long long)d->cnt[2] - 1,
                            (long long)d->off[1], (long long)d->off[1] + (long long)d->cnt[1] - 1,
                            (long long)d->off[0], (long long)d->off[0] + (long long)d->cnt[0] - 1,
                            m[k].ndims >= 2 ? "1.0" : "0.0", m[k].ndims == 3 ? "1.0" : "0.0");
        }
        h5fl_buf_printf(b, "],\"arrays\":[{\"name\":\"%s\",\"association\":\"cell\",\"dtype\":\"%s\",\"components\":1}],"
                        "\"global_extent\":[%lld,%lld,%lld,%lld,%lld,%lld]}", m[k].name, TYPES[m[k].type].dtype,
                        (long long)m[k].gext[0], (long long)m[k].gext[1], (long long)m[k].gext[2],
                        (long long)m[k].gext[3], (long long)m[k].gext[4], (long long)m[k].gext[5]);
    }
    h5fl_buf_printf(b, "}}");
}

/* ---- writing a step's shared file (collective) ------------------------------------------------------ */
static int attr_str(hid_t obj, const char *name, const char *value)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, t, &value) < 0 ? -1 : 0;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(s);
    H5Tclose(t);
    return rc;
}

static int attr_num(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *value)
{
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(obj, name, ftype, s, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a < 0 || H5Awrite(a, mtype, value) < 0 ? -1 : 0;
    if (a >= 0)
        H5Aclose(a);
    H5Sclose(s);
    return rc;
}

/* The root attributes of a step file (transports/hdf5/_layout.py _write_attrs). */
static int step_attrs(const h5flow_writer *w, hid_t f)
{
    int64_t version = 1, step = w->step, producers = w->size;
    return attr_str(f, "format", "h5flow-step") || attr_num(f, "version", H5T_STD_I64LE, H5T_NATIVE_INT64, &version) ||
           attr_num(f, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &step) ||
           attr_num(f, "time", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &w->time) ||
           attr_num(f, "producers", H5T_STD_I64LE, H5T_NATIVE_INT64, &producers) ||
           attr_str(f, "layout", w->cfg.layout_nn ? "n-n" : "n-1");
}

/* The data of this rank's `local`-th piece named `name` (its pieces of a name are its blocks in id order). */
static const void *local_piece(const h5flow_writer *w, const char *name, size_t local)
{
    for (size_t i = 0, seen = 0; i < w->npieces; i++)
        if (!strcmp(w->pieces[i].d.name, name) && seen++ == local)
            return w->pieces[i].data;
    return NULL;
}

/* Write rows [row, row + n) of a (count, 1) dataset from buf; n == 0: this rank's empty collective part. */
static int write_rows(hid_t dset, hid_t mtype, uint64_t row, uint64_t n, const void *buf, hid_t dxpl)
{
    hid_t fs = H5Dget_space(dset);
    hsize_t start[2] = {row, 0}, cnt[2] = {n, 1}, one[1] = {n ? n : 1};
    hid_t ms = H5Screate_simple(1, one, NULL);
    if (n) {
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
    } else {
        H5Sselect_none(fs);
        H5Sselect_none(ms);
    }
    static const double dummy = 0;
    herr_t r = H5Dwrite(dset, mtype, ms, fs, dxpl, n ? buf : (const void *)&dummy);
    H5Sclose(ms);
    H5Sclose(fs);
    return r < 0 ? -1 : 0;
}

/* Collective: data.h5 of the step. 0, or this rank's error in w->errmsg (the ranks agree afterwards). A failed
 * data write keeps making the collective calls, with nothing to write. */
int write_shared(h5flow_writer *w, const char *path, const piece_desc *all, const mesh_t *m, size_t n,
                        const char *meta, size_t metalen)
{
    H5E_auto2_t old_func;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_func, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int rc = 0;
    char h5msg[1024];
#define H5FAIL(what)                                                                                                   \
    do {                                                                                                               \
        if (!rc) {                                                                                                     \
            h5_errtext(h5msg, sizeof h5msg);                                                                           \
            rc = set_err(w, H5FLOW_ERR_IO, "rank %d: %s %s: %s", w->rank, what, path, h5msg);                          \
        }                                                                                                              \
    } while (0)
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_mpio(fapl, w->comm, MPI_INFO_NULL);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (f < 0) {
        H5FAIL("creating");
        H5Eset_auto2(H5E_DEFAULT, old_func, old_data);
        return rc;
    }
    hid_t indep = H5Pcreate(H5P_DATASET_XFER), dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5Pset_dxpl_mpio(indep, H5FD_MPIO_INDEPENDENT);
    H5Pset_dxpl_mpio(dxpl, w->cfg.collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT);
    if (step_attrs(w, f))
        H5FAIL("writing the attributes of");
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    hsize_t mdims[1] = {metalen};
    hid_t ms = H5Screate_simple(1, mdims, NULL);
    hid_t md = H5Dcreate2(f, "meta", H5T_STD_U8LE, ms, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Sclose(ms);
    if (md < 0) {
        H5FAIL("creating the meta dataset of");
    } else {
        hid_t fs = H5Dget_space(md), mem = H5Screate_simple(1, mdims, NULL);
        if (w->rank != 0) {
            H5Sselect_none(fs);
            H5Sselect_none(mem);
        }
        if (H5Dwrite(md, H5T_NATIVE_UINT8, mem, fs, indep, meta) < 0)
            H5FAIL("writing the meta dataset of");
        H5Sclose(fs);
        H5Sclose(mem);
        H5Dclose(md);
    }
    for (size_t k = 0; k < n; k++) {
        hid_t g = H5Gcreate2(f, m[k].name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hid_t gc = g >= 0 ? H5Gcreate2(g, "cell", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
        if (g < 0 || gc < 0 || attr_str(g, "kind", "image")) {
            H5FAIL("creating a group in");
            if (gc >= 0)
                H5Gclose(gc);
            if (g >= 0)
                H5Gclose(g);
            break;
        }
        hsize_t dims[2] = {m[k].rows[m[k].nblocks], 1};
        hid_t s = H5Screate_simple(2, dims, NULL);
        hid_t d = H5Dcreate2(gc, m[k].name, file_type(m[k].type), s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
        H5Sclose(s);
        if (d < 0) {
            H5FAIL("creating a dataset in");
            H5Gclose(gc);
            H5Gclose(g);
            break;
        }
        /* this rank's blocks, in block-id order: its pieces of this name, in the order it wrote them */
        size_t mine = 0, most = 0;
        int *per_rank = calloc((size_t)w->size, sizeof *per_rank);
        for (size_t b = 0; b < m[k].nblocks; b++) {
            if (per_rank)
                per_rank[m[k].owner[b]]++;
            mine += m[k].owner[b] == w->rank;
        }
        for (int r = 0; per_rank && r < w->size; r++)
            most = (size_t)per_rank[r] > most ? (size_t)per_rank[r] : most;
        free(per_rank);
        size_t calls = w->cfg.collective ? most : mine, done = 0, local = 0;
        for (size_t b = 0; b < m[k].nblocks && done < calls; b++) {
            if (m[k].owner[b] != w->rank)
                continue;
            /* the local piece: the (local)-th of this name among this rank's pieces */
            const void *buf = local_piece(w, m[k].name, local++);
            uint64_t nrows = m[k].rows[b + 1] - m[k].rows[b];
            if (write_rows(d, mem_type(m[k].type), m[k].rows[b], rc ? 0 : nrows, buf, dxpl))
                H5FAIL("writing");
            done++;
        }
        for (; done < calls; done++) /* collective transfers: every rank makes as many calls */
            if (write_rows(d, mem_type(m[k].type), 0, 0, NULL, dxpl))
                H5FAIL("writing");
        H5Dclose(d);
        H5Gclose(gc);
        H5Gclose(g);
    }
    (void)all;
    H5Pclose(dcpl);
    H5Pclose(indep);
    H5Pclose(dxpl);
    if (H5Fflush(f, H5F_SCOPE_LOCAL) < 0)
        H5FAIL("flushing");
    if (H5Fclose(f) < 0)
        H5FAIL("closing");
    H5Eset_auto2(H5E_DEFAULT, old_func, old_data);
#undef H5FAIL
    return rc;
}

/* The info string of the connector stack `cfg->vol_stack` (top first, native below), as connectors/stack.py
 * builds it: each layer's options, then under_vol/under_info of the layer below. */
static void stack_info(const h5fl_config *cfg, char *out, size_t n)
{
    char layers[2][8] = {"", ""}, own[2][H5FL_PATH_MAX + 64];
    sscanf(cfg->vol_stack, "%7[a-z],%7[a-z]", layers[0], layers[1]);
    int count = *layers[1] ? 2 : 1;
    for (int i = 0; i < count; i++) {
        if (!strcmp(layers[i], "async"))
            snprintf(own[i], sizeof own[i], "max_mem=%llu;", (unsigned long long)cfg->async_max_mem);
        else {
            int k = snprintf(own[i], sizeof own[i], "%s%s%s", *cfg->cache_path ? "path=" : "", cfg->cache_path,
                             *cfg->cache_path ? ";" : "");
            if (cfg->cache_capacity)
                snprintf(own[i] + k, sizeof own[i] - (size_t)k, "capacity=%llu;",
                         (unsigned long long)cfg->cache_capacity);
        }
    }
    if (count == 1)
        snprintf(out, n, "%sunder_vol=0;under_info={}", own[0]);
    else
        snprintf(out, n, "%sunder_vol=%d;under_info={%sunder_vol=0;under_info={}}", own[0],
                 !strcmp(layers[1], "async") ? 312 : 313, own[1]);
}

/* Select the connector stack `vol_stack` on `fapl` (0), or -1 with `why` set. The plugins are found on
 * HDF5_PLUGIN_PATH (h5flow's build/plugins). */
static int set_vol_stack(const h5fl_config *cfg, hid_t fapl, char *why, size_t n)
{
    /* The name handed to HDF5 must outlive the process: HDF5's plugin cache keeps the pointer a plugin was
     * first loaded by and compares later searches by name against it, so a name in memory that is reused (a
     * stack buffer) can later read "h5flow_async" and make a search for h5flow_cache load h5flow_async. */
    static const char *const known[] = {"h5flow_async", "h5flow_cache"};
    char word[8] = "";
    sscanf(cfg->vol_stack, "%5[a-z]", word);
    const char *top = NULL;
    for (size_t i = 0; i < sizeof known / sizeof known[0] && !top; i++)
        if (!strcmp(known[i] + 7, word))
            top = known[i];
    char info[2 * H5FL_PATH_MAX + 256];
    stack_info(cfg, info, sizeof info);
    if (!top) {
        snprintf(why, n, "vol_stack=\"%s\": its first layer is neither async nor cache", cfg->vol_stack);
        return -1;
    }
    hid_t id = H5VLregister_connector_by_name(top, H5P_DEFAULT);
    if (id < 0) {
        snprintf(why, n, "vol_stack=\"%s\": HDF5 cannot load the %s connector (set HDF5_PLUGIN_PATH to h5flow's "
                         "build/plugins)", cfg->vol_stack, top);
        return -1;
    }
    void *vinfo = NULL;
    int rc = H5VLconnector_str_to_info(info, id, &vinfo) < 0 || H5Pset_vol(fapl, id, vinfo) < 0 ? -1 : 0;
    if (vinfo)
        H5VLfree_connector_info(id, vinfo);
    H5VLclose(id);
    if (rc)
        snprintf(why, n, "vol_stack=\"%s\": the %s connector refused \"%s\"", cfg->vol_stack, top, info);
    return rc;
}

/* This rank's rank-<r>.h5 (layout n-n, serial HDF5; layout_nn.py _write_per_rank): per mesh a (rows, 1) dataset of
 * the blocks it owns, in block-id order ((0, 1) when it owns none); no meta dataset, no kind attribute. */
int write_per_rank(h5flow_writer *w, const char *path, const mesh_t *m, size_t n)
{
    H5E_auto2_t old_func;
    void *old_data;
    H5Eget_auto2(H5E_DEFAULT, &old_func, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    int rc = 0;
    char h5msg[1024];
    h5fl_extent *ext = NULL; /* where each dataset's raw data lies, for consumers' raw reads */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST);
    char why[H5FL_PATH_MAX + 512];
    if (*w->cfg.vol_stack && set_vol_stack(&w->cfg, fapl, why, sizeof why)) {
        H5Pclose(fapl);
        H5Eset_auto2(H5E_DEFAULT, old_func, old_data);
        return set_err(w, H5FLOW_ERR_IO, "rank %d: creating %s: %s", w->rank, path, why);
    }
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    int64_t rank = w->rank;
    const char *what = "creating";
    if (f < 0)
        goto fail;
    /* with a connector stack the rows are on storage (the connectors' queues drained, their errors raised)
     * only after a flush: each dataset's extent is read after one */
    what = "writing the attributes of";
    if (step_attrs(w, f) || attr_num(f, "rank", H5T_STD_I64LE, H5T_NATIVE_INT64, &rank))
        goto fail;
    what = "writing";
    ext = calloc(n ? n : 1, sizeof *ext);
    if (!ext)
        goto fail;
    for (size_t k = 0; k < n; k++) {
        uint64_t total = 0;
        for (size_t b = 0; b < m[k].nblocks; b++)
            if (m[k].owner[b] == w->rank)
                total += m[k].rows[b + 1] - m[k].rows[b];
        hid_t g = H5Gcreate2(f, m[k].name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        hid_t gc = g >= 0 ? H5Gcreate2(g, "cell", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
        hsize_t dims[2] = {total, 1};
        hid_t s = H5Screate_simple(2, dims, NULL);
        hid_t d = gc >= 0 ? H5Dcreate2(gc, m[k].name, file_type(m[k].type), s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)
                          : -1;
        H5Sclose(s);
        int bad = d < 0;
        uint64_t row = 0;
        size_t local = 0;
        for (size_t b = 0; b < m[k].nblocks && !bad; b++) {
            if (m[k].owner[b] != w->rank)
                continue;
            uint64_t nrows = m[k].rows[b + 1] - m[k].rows[b];
            bad = write_rows(d, mem_type(m[k].type), row, nrows, local_piece(w, m[k].name, local++), H5P_DEFAULT) != 0;
            row += nrows;
        }
        if (!bad && *w->cfg.vol_stack && H5Fflush(f, H5F_SCOPE_LOCAL) < 0)
            bad = 1; /* a connector's background write failed: the step is not published */
        if (d >= 0) {
            h5fl_extent_of(&ext[k], d, m[k].name, "cell", m[k].name, TYPES[m[k].type].dtype, total, 1);
            H5Dclose(d);
        }
        if (gc >= 0)
            H5Gclose(gc);
        if (g >= 0)
            H5Gclose(g);
        if (bad || g < 0 || gc < 0)
            goto fail;
    }
    what = "closing";
    if (H5Fclose(f) < 0) {
        f = -1;
        goto fail;
    }
    f = -1;
    H5Eset_auto2(H5E_DEFAULT, old_func, old_data);
    int e = h5fl_write_extents(path, ext, n);
    free(ext);
    if (e)
        return set_err(w, H5FLOW_ERR_IO, "rank %d: writing the extents of %s: %s", w->rank, path, strerror(e));
    return 0;
fail:
    free(ext);
    h5_errtext(h5msg, sizeof h5msg);
    rc = set_err(w, H5FLOW_ERR_IO, "rank %d: %s %s: %s", w->rank, what, path, h5msg);
    if (f >= 0)
        H5Fclose(f);
    H5Eset_auto2(H5E_DEFAULT, old_func, old_data);
    return rc;
}
