/* The hdf5-iotest experiment: S steps x A arrays of (rows x cols) double tiles on a prows x pcols
 * process grid, written through one of the dataset layouts (rank 2/3/4, step- or array-slowest), then
 * read back and verified. Timers follow hdf5-iotest's metric definitions (README "Metrics"), except
 * that generating and checking the data is kept out of the phase timers (it is not HDF5 time). */
#include "iotest.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { T_WPHASE, T_CREATE, T_WRITE, T_RPHASE, T_READ, T_COUNT };

void iot_fail(const iot_env *env, const iot_case *c, const char *what, const char *where, int line)
{
    fprintf(stderr, "h5flow-iotest: rank %d, case %d: HDF5 call failed: %s (%s:%d)\n", env->rank,
            c != NULL ? c->index : -1, what, where, line);
    H5Eprint2(H5E_DEFAULT, stderr);
    fflush(stderr);
    MPI_Abort(env->comm, 2);
}

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int is_dir(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Bytes in the regular files under `path` (a file or a directory tree); with `remove`, delete them and
 * the directories as it goes. Symbolic links are neither followed nor counted. */
static double walk(const char *path, int remove, int depth)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return 0;
    if (!S_ISDIR(st.st_mode)) {
        if (remove)
            unlink(path);
        return S_ISREG(st.st_mode) ? (double)st.st_size : 0;
    }
    double total = 0;
    DIR *d = depth < 64 ? opendir(path) : NULL;
    if (d != NULL) {
        struct dirent *e;
        char sub[PATH_MAX];
        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name) < (int)sizeof(sub))
                total += walk(sub, remove, depth + 1);
        }
        closedir(d);
    }
    if (remove)
        rmdir(path);
    return total;
}

/* Remove the case's file (a container directory, for a VOL connector that stores one, was created by the
 * case: an existing directory is refused before the case starts) and what the split and subfiling drivers
 * put beside it. */
void iot_remove_files(const char *path)
{
    char buf[2 * PATH_MAX + 512]; /* a directory, a '/', and a d_name */
    if (is_dir(path))
        walk(path, 1, 0);
    unlink(path);
    snprintf(buf, sizeof(buf), "%s-m.h5", path);
    unlink(buf);
    snprintf(buf, sizeof(buf), "%s-r.h5", path);
    unlink(buf);
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    const char *base = path;
    if (slash != NULL) {
        size_t n = (size_t)(slash - path);
        if (n == 0)
            n = 1; /* "/name" */
        memcpy(dir, path, n);
        dir[n] = '\0';
        base = slash + 1;
    } else {
        strcpy(dir, ".");
    }
    char prefix[PATH_MAX];
    snprintf(prefix, sizeof(prefix), "%s.subfile_", base);
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (starts_with(e->d_name, prefix)) {
            snprintf(buf, sizeof(buf), "%s/%s", dir, e->d_name);
            unlink(buf);
        }
    }
    closedir(d);
}

static H5F_libver_t libver(const char *name)
{
    if (strcmp(name, "earliest") == 0)
        return H5F_LIBVER_EARLIEST;
    if (strcmp(name, "v18") == 0)
        return H5F_LIBVER_V18;
    if (strcmp(name, "v110") == 0)
        return H5F_LIBVER_V110;
    if (strcmp(name, "v112") == 0)
        return H5F_LIBVER_V112;
    if (strcmp(name, "v114") == 0)
        return H5F_LIBVER_V114;
    return H5F_LIBVER_LATEST;
}

/* MPI-IO based (mpio or subfiling) when parallel, or on one rank unless single-process asks for posix/core. */
static int uses_mpi(const iot_env *env, const iot_case *c)
{
    return env->size > 1 || (strcmp(c->io, "posix") != 0 && strcmp(c->io, "core") != 0);
}

static void set_driver(const iot_env *env, const iot_case *c, hid_t fapl)
{
    if (uses_mpi(env, c)) {
        if (strcmp(c->vfd, "subfiling") == 0) {
            IOT_CHECK(H5Pset_mpi_params(fapl, env->comm, MPI_INFO_NULL), env, c);
            IOT_CHECK(H5Pset_fapl_subfiling(fapl, NULL), env, c);
        } else {
            IOT_CHECK(H5Pset_fapl_mpio(fapl, env->comm, MPI_INFO_NULL), env, c);
        }
    } else if (strcmp(c->io, "core") == 0) {
        IOT_CHECK(H5Pset_fapl_core(fapl, (size_t)64 << 20, 1), env, c);
    } else {
        IOT_CHECK(H5Pset_fapl_sec2(fapl), env, c);
    }
}

static hid_t make_fapl(const iot_env *env, const iot_case *c)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    IOT_CHECK(fapl, env, c);
    if (c->split) {
        hid_t member = H5Pcreate(H5P_FILE_ACCESS);
        IOT_CHECK(member, env, c);
        set_driver(env, c, member);
        IOT_CHECK(H5Pset_fapl_split(fapl, "-m.h5", member, "-r.h5", member), env, c);
        IOT_CHECK(H5Pclose(member), env, c);
    } else {
        set_driver(env, c, fapl);
    }
    if (uses_mpi(env, c)) {
        IOT_CHECK(H5Pset_all_coll_metadata_ops(fapl, 1), env, c);
        IOT_CHECK(H5Pset_coll_metadata_write(fapl, 1), env, c);
    }
    IOT_CHECK(H5Pset_alignment(fapl, c->align_thr, c->align_inc), env, c);
    IOT_CHECK(H5Pset_meta_block_size(fapl, c->mblk), env, c);
    IOT_CHECK(H5Pset_libver_bounds(fapl, libver(c->fmt_low), libver(c->fmt_high)), env, c);
    return fapl;
}

typedef struct {
    hsize_t mr, mc;    /* this rank's tile */
    hsize_t gr, gc;    /* global array */
    hsize_t r0, c0;    /* tile origin */
} geom;

static geom geometry(const iot_env *env, const iot_case *c)
{
    geom g;
    unsigned prow = (unsigned)env->rank / c->pcols, pcol = (unsigned)env->rank % c->pcols;
    if (c->strong) {
        g.mr = c->rows / c->prows;
        g.mc = c->cols / c->pcols;
        g.gr = c->rows;
        g.gc = c->cols;
    } else {
        g.mr = c->rows;
        g.mc = c->cols;
        g.gr = (hsize_t)c->rows * c->prows;
        g.gc = (hsize_t)c->cols * c->pcols;
    }
    g.r0 = prow * g.mr;
    g.c0 = pcol * g.mc;
    return g;
}

/* When a dataset handle is opened (or created) and closed in the (step, array) loop. */
static int opens_at(const iot_case *c, unsigned a)
{
    if (c->rank == 2 || (c->rank == 3 && c->slow_array))
        return 1;
    return a == 0; /* rank 3 step-slowest: one dataset per step; rank 4: reopened every step */
}

static int closes_at(const iot_case *c, unsigned a)
{
    if (c->rank == 2 || (c->rank == 3 && c->slow_array))
        return 1;
    return a == c->arrays - 1;
}

static int creates_at(const iot_case *c, unsigned s, unsigned a)
{
    if (c->rank == 2)
        return 1;
    if (c->rank == 3)
        return c->slow_array ? s == 0 : a == 0;
    return s == 0 && a == 0;
}

static void dataset_name(const iot_case *c, unsigned s, unsigned a, char *name, size_t n)
{
    if (c->rank == 2)
        snprintf(name, n, c->slow_array ? "array=%u/step=%u" : "step=%u/array=%u", c->slow_array ? a : s,
                 c->slow_array ? s : a);
    else if (c->rank == 3)
        snprintf(name, n, c->slow_array ? "array=%u" : "step=%u", c->slow_array ? a : s);
    else
        snprintf(name, n, "dataset");
}

/* Dataset extent, maximum extent, chunk, and this rank's selection origin for (s, a). */
static void shape(const iot_case *c, const geom *g, unsigned s, unsigned a, hsize_t *dims, hsize_t *maxdims,
                  hsize_t *chunk, hsize_t *start, hsize_t *count)
{
    int k = c->rank;
    dims[k - 2] = g->gr;
    dims[k - 1] = g->gc;
    chunk[k - 2] = g->mr;
    chunk[k - 1] = g->mc;
    start[k - 2] = g->r0;
    start[k - 1] = g->c0;
    count[k - 2] = g->mr;
    count[k - 1] = g->mc;
    for (int i = 0; i < k - 2; ++i)
        count[i] = 1;
    if (k == 3) {
        dims[0] = c->slow_array ? c->steps : c->arrays;
        chunk[0] = 1;
        start[0] = c->slow_array ? s : a;
    } else if (k == 4) {
        unsigned first = c->slow_array ? c->arrays : c->steps, second = c->slow_array ? c->steps : c->arrays;
        dims[0] = first;
        dims[1] = second;
        chunk[0] = c->slow_array ? c->arrays : 1;
        chunk[1] = c->slow_array ? 1 : c->arrays;
        start[0] = c->slow_array ? a : s;
        start[1] = c->slow_array ? s : a;
    }
    for (int i = 0; i < k; ++i)
        maxdims[i] = dims[i];
    if (c->chunked && k == 3 && c->slow_array)
        maxdims[0] = H5S_UNLIMITED;
    if (c->chunked && k == 4)
        maxdims[c->slow_array ? 1 : 0] = H5S_UNLIMITED;
}

static double value(const iot_case *c, const geom *g, unsigned s, unsigned a, hsize_t i, hsize_t j, long seed)
{
    return (double)((((hsize_t)s * c->arrays + a) * g->gr + g->r0 + i) * g->gc + g->c0 + j) + (double)seed;
}

static void generate(const iot_case *c, const geom *g, unsigned s, unsigned a, double *buf)
{
    for (hsize_t i = 0; i < g->mr; ++i)
        for (hsize_t j = 0; j < g->mc; ++j)
            buf[i * g->mc + j] = value(c, g, s, a, i, j, c->seed);
}

static unsigned long long verify(const iot_case *c, const geom *g, unsigned s, unsigned a, const double *buf,
                                 long long *first)
{
    unsigned long long bad = 0;
    for (hsize_t i = 0; i < g->mr; ++i)
        for (hsize_t j = 0; j < g->mc; ++j)
            if (buf[i * g->mc + j] != value(c, g, s, a, i, j, c->read_seed)) {
                if (bad == 0 && *first < 0)
                    *first = (long long)(((hsize_t)s * c->arrays + a) * g->mr * g->mc + i * g->mc + j);
                ++bad;
            }
    return bad;
}

static hid_t make_dcpl(const iot_env *env, const iot_case *c, const hsize_t *chunk)
{
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    IOT_CHECK(dcpl, env, c);
    if (c->chunked) {
        IOT_CHECK(H5Pset_chunk(dcpl, c->rank, chunk), env, c);
        /* parallel compression needs collective I/O (hdf5-iotest applies filters only then) */
        int filters_ok = env->size == 1 || strcmp(c->io, "collective") == 0;
        if (filters_ok && c->gzip >= 0)
            IOT_CHECK(H5Pset_deflate(dcpl, (unsigned)c->gzip), env, c);
        if (filters_ok && c->szip_mask > 0)
            IOT_CHECK(H5Pset_szip(dcpl, (unsigned)c->szip_mask, (unsigned)c->szip_ppb), env, c);
    }
    IOT_CHECK(H5Pset_fill_time(dcpl, c->fill_alloc ? H5D_FILL_TIME_ALLOC : H5D_FILL_TIME_NEVER), env, c);
    return dcpl;
}

static void pause_us(long us)
{
    if (us <= 0)
        return;
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static double file_size(const iot_case *c, hid_t file)
{
    if (!c->split) {
        hsize_t n = 0;
        herr_t rc = -1;
        H5E_BEGIN_TRY
        {
            rc = H5Fget_filesize(file, &n);
        }
        H5E_END_TRY
        if (rc >= 0)
            return (double)n;
        /* a VOL connector without the native file-size query: what it stored on disk */
        return walk(c->file, 0, 0);
    }
    /* H5Fget_filesize does not see the split driver's two files: add their sizes */
    double total = 0;
    char buf[PATH_MAX + 16];
    struct stat st;
    snprintf(buf, sizeof(buf), "%s-m.h5", c->file);
    if (stat(buf, &st) == 0)
        total += (double)st.st_size;
    snprintf(buf, sizeof(buf), "%s-r.h5", c->file);
    if (stat(buf, &st) == 0)
        total += (double)st.st_size;
    return total;
}

int iot_run_iotest(const iot_env *env, const iot_case *c, iot_result *r)
{
    const geom g = geometry(env, c);
    const size_t nval = (size_t)(g.mr * g.mc);
    double *buf = malloc(nval * sizeof(double));
    if (buf == NULL) {
        fprintf(stderr, "h5flow-iotest: case %d: out of memory for a %llu x %llu tile\n", c->index,
                (unsigned long long)g.mr, (unsigned long long)g.mc);
        MPI_Abort(env->comm, 2);
    }
    double t[T_COUNT] = {0};
    double fsize = 0;
    hsize_t dims[4], maxdims[4], chunk[4], start[4], count[4];
    char name[64];
    hsize_t mdims[2] = {g.mr, g.mc};
    hid_t mspace = H5Screate_simple(2, mdims, NULL);
    IOT_CHECK(mspace, env, c);
    hid_t fapl = make_fapl(env, c);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    IOT_CHECK(dxpl, env, c);
    if (uses_mpi(env, c))
        IOT_CHECK(H5Pset_dxpl_mpio(dxpl, (strcmp(c->io, "collective") == 0 && !c->split)
                                             ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT), env, c);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    IOT_CHECK(lcpl, env, c);
    IOT_CHECK(H5Pset_create_intermediate_group(lcpl, 1), env, c);
    shape(c, &g, 0, 0, dims, maxdims, chunk, start, count);
    hid_t dcpl = make_dcpl(env, c, chunk);

    int existed = env->rank == 0 && is_dir(c->file);
    MPI_Bcast(&existed, 1, MPI_INT, 0, env->comm);
    if (existed) {
        if (env->rank == 0)
            fprintf(stderr, "h5flow-iotest: case %d: %s is an existing directory; the benchmark only writes "
                    "and removes files it creates: choose another hdf5-file or --dir\n", c->index, c->file);
        MPI_Abort(env->comm, 2);
    }
    MPI_Barrier(env->comm);
    const double wall0 = MPI_Wtime();

    /* ---- write phase ---- */
    double t0 = MPI_Wtime(), seg = t0;
    hid_t file = H5Fcreate(c->file, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    IOT_CHECK(file, env, c);
    t[T_CREATE] += MPI_Wtime() - t0;
    hid_t dset = H5I_INVALID_HID;
    for (unsigned s = 0; s < c->steps; ++s) {
        for (unsigned a = 0; a < c->arrays; ++a) {
            t[T_WPHASE] += MPI_Wtime() - seg;
            generate(c, &g, s, a, buf);
            seg = MPI_Wtime();
            shape(c, &g, s, a, dims, maxdims, chunk, start, count);
            t0 = MPI_Wtime();
            if (opens_at(c, a)) {
                dataset_name(c, s, a, name, sizeof(name));
                if (creates_at(c, s, a)) {
                    hid_t fspace = H5Screate_simple(c->rank, dims, maxdims);
                    IOT_CHECK(fspace, env, c);
                    dset = H5Dcreate2(file, name, H5T_NATIVE_DOUBLE, fspace, lcpl, dcpl, H5P_DEFAULT);
                    IOT_CHECK(dset, env, c);
                    IOT_CHECK(H5Sclose(fspace), env, c);
                } else {
                    dset = H5Dopen2(file, name, H5P_DEFAULT);
                    IOT_CHECK(dset, env, c);
                }
            }
            hid_t fspace = H5Dget_space(dset);
            IOT_CHECK(fspace, env, c);
            IOT_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL), env, c);
            double t1 = MPI_Wtime();
            t[T_CREATE] += t1 - t0;
            IOT_CHECK(H5Dwrite(dset, H5T_NATIVE_DOUBLE, mspace, fspace, dxpl, buf), env, c);
            t[T_WRITE] += MPI_Wtime() - t1;
            IOT_CHECK(H5Sclose(fspace), env, c);
            if (closes_at(c, a))
                IOT_CHECK(H5Dclose(dset), env, c);
        }
        if (c->delay_us > 0 && s + 1 < c->steps) {
            t[T_WPHASE] += MPI_Wtime() - seg;
            pause_us(c->delay_us);
            seg = MPI_Wtime();
        }
    }
    t0 = MPI_Wtime();
    IOT_CHECK(H5Fclose(file), env, c);
    double t1 = MPI_Wtime();
    t[T_CREATE] += t1 - t0;
    t[T_WPHASE] += t1 - seg;

    /* ---- read phase ---- */
    unsigned long long bad = 0;
    long long first_bad = -1;
    MPI_Barrier(env->comm);
    seg = MPI_Wtime();
    file = H5Fopen(c->file, H5F_ACC_RDONLY, fapl);
    IOT_CHECK(file, env, c);
    t[T_RPHASE] += MPI_Wtime() - seg;
    fsize = file_size(c, file);
    seg = MPI_Wtime();
    for (unsigned s = 0; s < c->steps; ++s) {
        for (unsigned a = 0; a < c->arrays; ++a) {
            shape(c, &g, s, a, dims, maxdims, chunk, start, count);
            if (opens_at(c, a)) {
                dataset_name(c, s, a, name, sizeof(name));
                dset = H5Dopen2(file, name, H5P_DEFAULT);
                IOT_CHECK(dset, env, c);
            }
            hid_t fspace = H5Dget_space(dset);
            IOT_CHECK(fspace, env, c);
            IOT_CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL), env, c);
            t0 = MPI_Wtime();
            IOT_CHECK(H5Dread(dset, H5T_NATIVE_DOUBLE, mspace, fspace, dxpl, buf), env, c);
            t[T_READ] += MPI_Wtime() - t0;
            IOT_CHECK(H5Sclose(fspace), env, c);
            if (closes_at(c, a))
                IOT_CHECK(H5Dclose(dset), env, c);
            t[T_RPHASE] += MPI_Wtime() - seg;
            bad += verify(c, &g, s, a, buf, &first_bad);
            for (size_t k = 0; k < nval; ++k) /* a later read that does nothing must not pass */
                buf[k] = -1.0;
            seg = MPI_Wtime();
        }
    }
    IOT_CHECK(H5Fclose(file), env, c);
    t[T_RPHASE] += MPI_Wtime() - seg;
    MPI_Barrier(env->comm);
    double wall = MPI_Wtime() - wall0;

    IOT_CHECK(H5Pclose(dcpl), env, c);
    IOT_CHECK(H5Pclose(lcpl), env, c);
    IOT_CHECK(H5Pclose(dxpl), env, c);
    IOT_CHECK(H5Pclose(fapl), env, c);
    IOT_CHECK(H5Sclose(mspace), env, c);
    free(buf);

    MPI_Reduce(&wall, &r->wall, 1, MPI_DOUBLE, MPI_MAX, 0, env->comm);
    MPI_Reduce(t, r->min, T_COUNT, MPI_DOUBLE, MPI_MIN, 0, env->comm);
    MPI_Reduce(t, r->max, T_COUNT, MPI_DOUBLE, MPI_MAX, 0, env->comm);
    r->fsize = fsize;
    unsigned long long total_bad = 0, checked = (unsigned long long)c->steps * c->arrays * nval, total = 0;
    MPI_Allreduce(&bad, &total_bad, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, env->comm);
    MPI_Reduce(&checked, &total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, env->comm);
    r->checked = total;
    if (bad > 0)
        fprintf(stderr, "h5flow-iotest: rank %d, case %d: %llu of %llu values read back differ from what was "
                "written (first at element %lld of this rank's data)\n", env->rank, c->index, bad, checked,
                first_bad);
    if (env->rank == 0 && !c->keep)
        iot_remove_files(c->file);
    MPI_Barrier(env->comm);
    return total_bad > 0 ? 3 : 0;
}
