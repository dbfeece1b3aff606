/* The C twin of faulty.py: small HDF5 programs, one per `h5flow advise` rule, each with the one tuning
 * mistake its rule finds, and a clean one.
 *
 *   mpiexec -n 2 h5flow-advise-faulty [--dir DIR] [--fixed] [--fixed-dir DIR2] CASE [CASE ...]
 *   (CASE: a rule id, clean or all)
 *
 * Each case writes DIR/<case>.h5 and is otherwise well tuned. --fixed, or H5FLOW_ADVISE_FIX=rule,rule / all
 * (set by `h5flow advise --verify`), runs the fixed variant; --fixed-dir DIR2 runs each case's fixed variant
 * right after it, into DIR2. Every case reads back what it wrote and exits
 * non-zero on a mismatch or an HDF5 error. The serial cases run on rank 0 with the default driver.
 */
#define _POSIX_C_SOURCE 200809L
#include <hdf5.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int rank_, size_;

#define H(call)                                                                                   \
    do {                                                                                          \
        if ((call) < 0) {                                                                         \
            fprintf(stderr, "rank %d: %s:%d: %s failed\n", rank_, __FILE__, __LINE__, #call);     \
            MPI_Abort(MPI_COMM_WORLD, 2);                                                         \
        }                                                                                         \
    } while (0)

static void check(int ok, const char *what) {
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    if (!all) {
        if (rank_ == 0) fprintf(stderr, "%s: data read back differs from data written\n", what);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "rank %d: out of memory (%zu bytes)\n", rank_, n);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    return p;
}

/* a well-tuned parallel file access list: MPI-IO, format >= 1.10, 1 MiB alignment above 64 KiB */
static hid_t pfapl(int aligned, MPI_Info info) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H(fapl);
    H(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, info));
    H(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST));
    if (aligned) H(H5Pset_alignment(fapl, 65536, 1 << 20));
    return fapl;
}

static hid_t pcreate(const char *path, int aligned, MPI_Info info) {
    hid_t fapl = pfapl(aligned, info), f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H(f);
    H(H5Pclose(fapl));
    return f;
}

static hid_t popen_ro(const char *path) {
    hid_t fapl = pfapl(1, MPI_INFO_NULL), f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H(f);
    H(H5Pclose(fapl));
    return f;
}

static hid_t sfapl_latest(void) {
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H(fapl);
    H(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_LATEST));
    return fapl;
}

static hid_t xfer(H5FD_mpio_xfer_t mode) {
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H(dxpl);
    H(H5Pset_dxpl_mpio(dxpl, mode));
    return dxpl;
}

/* rank's share [*lo, *hi) of n */
static void share(hsize_t n, hsize_t *lo, hsize_t *hi) {
    *lo = n * (hsize_t)rank_ / (hsize_t)size_;
    *hi = n * (hsize_t)(rank_ + 1) / (hsize_t)size_;
}

/* write (or read) rows [lo, hi) of a dataset whose trailing dims are `inner` elements, one hyperslab */
static void rows_io(hid_t dset, int write, hid_t memtype, hsize_t lo, hsize_t hi, int ndims, const hsize_t *dims,
                    hid_t dxpl, void *buf) {
    hsize_t start[3] = {lo, 0, 0}, count[3] = {hi - lo, 0, 0};
    for (int d = 1; d < ndims; d++) count[d] = dims[d];
    hid_t fs = H5Dget_space(dset), ms = H5Screate_simple(ndims, count, NULL);
    H(fs);
    H(ms);
    H(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL));
    if (write)
        H(H5Dwrite(dset, memtype, ms, fs, dxpl, buf));
    else
        H(H5Dread(dset, memtype, ms, fs, dxpl, buf));
    H(H5Sclose(ms));
    H(H5Sclose(fs));
}

/* reopen a parallel file read-only and read rows [lo, hi) of a dataset collectively into back */
static void read_rows_back(const char *path, const char *name, hid_t memtype, hsize_t lo, hsize_t hi, int ndims,
                           const hsize_t *dims, void *back) {
    hid_t f = popen_ro(path), dxpl = xfer(H5FD_MPIO_COLLECTIVE), d = H5Dopen2(f, name, H5P_DEFAULT);
    H(d);
    rows_io(d, 0, memtype, lo, hi, ndims, dims, dxpl, back);
    H(H5Dclose(d));
    H(H5Pclose(dxpl));
    H(H5Fclose(f));
}

static hid_t mkdset(hid_t loc, const char *name, hid_t type, int ndims, const hsize_t *dims, hid_t dcpl) {
    hid_t space = H5Screate_simple(ndims, dims, NULL);
    H(space);
    hid_t d = H5Dcreate2(loc, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H(d);
    H(H5Sclose(space));
    return d;
}

static void dtype_conversion(const char *path, int fixed) {
    /* Warp: float64 data into a float32 dataset; 8 MiB per rank exceeds HDF5's 1 MiB conversion buffer */
    const hsize_t n = 128, dims[3] = {n, n, n};
    hsize_t lo, hi;
    share(n, &lo, &hi);
    size_t cnt = (size_t)((hi - lo) * n * n);
    double *buf = xmalloc(cnt * sizeof *buf), *back = xmalloc(cnt * sizeof *back);
    for (size_t i = 0; i < cnt; i++) buf[i] = (double)(i % 1000) / 7.0 + rank_;
    hid_t f = pcreate(path, 1, MPI_INFO_NULL), dxpl = xfer(H5FD_MPIO_COLLECTIVE);
    hid_t d = mkdset(f, "field", fixed ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT, 3, dims, H5P_DEFAULT);
    rows_io(d, 1, H5T_NATIVE_DOUBLE, lo, hi, 3, dims, dxpl, buf);
    H(H5Dclose(d));
    H(H5Fclose(f));
    H(H5Pclose(dxpl));
    read_rows_back(path, "field", H5T_NATIVE_DOUBLE, lo, hi, 3, dims, back);
    int ok = 1;
    for (size_t i = 0; i < cnt && ok; i++) ok = fixed ? back[i] == buf[i] : back[i] == (double)(float)buf[i];
    check(ok, "dtype-conversion");
    free(buf);
    free(back);
}

static void collective_fallback(const char *path, int fixed) {
    /* a data transform on the transfer list makes HDF5 write independently */
    const hsize_t n = 1 << 20, dims[1] = {n};
    hsize_t lo, hi;
    share(n, &lo, &hi);
    size_t cnt = (size_t)(hi - lo);
    double *buf = xmalloc(cnt * sizeof *buf), *back = xmalloc(cnt * sizeof *back);
    for (size_t i = 0; i < cnt; i++) buf[i] = (double)(lo + i);
    hid_t f = pcreate(path, 1, MPI_INFO_NULL), dxpl = xfer(H5FD_MPIO_COLLECTIVE);
    hid_t d = mkdset(f, "x", H5T_NATIVE_DOUBLE, 1, dims, H5P_DEFAULT);
    if (fixed) {
        for (size_t i = 0; i < cnt; i++) buf[i] *= 2;
    } else {
        H(H5Pset_data_transform(dxpl, "x*2"));
    }
    rows_io(d, 1, H5T_NATIVE_DOUBLE, lo, hi, 1, dims, dxpl, buf);
    H(H5Dclose(d));
    H(H5Fclose(f));
    H(H5Pclose(dxpl));
    read_rows_back(path, "x", H5T_NATIVE_DOUBLE, lo, hi, 1, dims, back);
    int ok = 1;
    for (size_t i = 0; i < cnt && ok; i++) ok = back[i] == 2.0 * (double)(lo + i);
    check(ok, "collective-fallback");
    free(buf);
    free(back);
}

static void fill_time(const char *path, int fixed) {
    /* seed 003's chunk shape on an 80 MiB dataset; each rank writes one chunk */
    const hsize_t dims[2] = {96, 218750}, chunk[2] = {60, 15625};
    hsize_t start[2] = {(hsize_t)rank_ * chunk[0] % (dims[0] - chunk[0] + 1), (hsize_t)rank_ * chunk[1]};
    size_t cnt = (size_t)(chunk[0] * chunk[1]);
    float *tile = xmalloc(cnt * sizeof *tile), *back = xmalloc(cnt * sizeof *back);
    for (size_t i = 0; i < cnt; i++) tile[i] = (float)(rank_ + 1);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H(dcpl);
    H(H5Pset_chunk(dcpl, 2, chunk));
    if (fixed) H(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    hid_t f = pcreate(path, 1, MPI_INFO_NULL), dxpl = xfer(H5FD_MPIO_COLLECTIVE);
    hid_t d = mkdset(f, "data", H5T_NATIVE_FLOAT, 2, dims, dcpl);
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(2, chunk, NULL);
    H(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, chunk, NULL));
    H(H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, dxpl, tile));
    H(H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, dxpl, back)); /* only what was written: with NEVER the rest is undefined */
    check(memcmp(tile, back, cnt * sizeof *tile) == 0, "fill-time");
    H(H5Sclose(ms));
    H(H5Sclose(fs));
    H(H5Dclose(d));
    H(H5Fclose(f));
    H(H5Pclose(dcpl));
    H(H5Pclose(dxpl));
    free(tile);
    free(back);
}

static void libver_earliest(const char *path, int fixed) {
    const int units = 120; /* 1,200 objects: a group, a subgroup and 8 datasets per unit */
    const hsize_t dims[1] = {16};
    long long payload[16], back[16];
    for (int i = 0; i < 16; i++) payload[i] = i;
    hid_t fapl = fixed ? sfapl_latest() : H5P_DEFAULT, f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H(f);
    for (int u = 0; u < units; u++) {
        char name[32];
        snprintf(name, sizeof name, "group%04d", u);
        hid_t g = H5Gcreate2(f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H(g);
        hid_t sub = H5Gcreate2(g, "sub", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H(sub);
        H(H5Gclose(sub));
        for (int k = 0; k < 8; k++) {
            snprintf(name, sizeof name, "d%d", k);
            hid_t d = mkdset(g, name, H5T_NATIVE_LLONG, 1, dims, H5P_DEFAULT);
            H(H5Dwrite(d, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, payload));
            H(H5Dclose(d));
        }
        H(H5Gclose(g));
    }
    H(H5Fclose(f));
    if (fixed) H(H5Pclose(fapl));
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    H(f);
    hid_t d = H5Dopen2(f, "group0119/d7", H5P_DEFAULT);
    H(d);
    H(H5Dread(d, H5T_NATIVE_LLONG, H5S_ALL, H5S_ALL, H5P_DEFAULT, back));
    if (memcmp(back, payload, sizeof back) != 0) {
        fprintf(stderr, "libver-earliest: data read back differs\n");
        exit(3);
    }
    H(H5Dclose(d));
    H(H5Fclose(f));
}

static void alignment(const char *path, int fixed) {
    /* HACC-IO: 9 variables, each rank one contiguous 2 MiB slice per variable */
    static const char *vars[9] = {"xx", "yy", "zz", "vx", "vy", "vz", "phi", "pid", "mask"};
    const hsize_t per = 1 << 18, dims[1] = {per * (hsize_t)size_};
    double *buf = xmalloc(per * sizeof *buf), *back = xmalloc(per * sizeof *back);
    for (hsize_t i = 0; i < per; i++) buf[i] = rank_;
    hid_t f = pcreate(path, fixed, MPI_INFO_NULL), dxpl = xfer(H5FD_MPIO_COLLECTIVE);
    for (int v = 0; v < 9; v++) {
        hid_t d = mkdset(f, vars[v], H5T_NATIVE_DOUBLE, 1, dims, H5P_DEFAULT);
        rows_io(d, 1, H5T_NATIVE_DOUBLE, per * (hsize_t)rank_, per * (hsize_t)(rank_ + 1), 1, dims, dxpl, buf);
        H(H5Dclose(d));
    }
    H(H5Fclose(f));
    H(H5Pclose(dxpl));
    read_rows_back(path, "mask", H5T_NATIVE_DOUBLE, per * (hsize_t)rank_, per * (hsize_t)(rank_ + 1), 1, dims, back);
    check(memcmp(buf, back, per * sizeof *buf) == 0, "alignment");
    free(buf);
    free(back);
}

static void small_independent_writes(const char *path, int fixed) {
    const hsize_t rows = 100, width = 128, dims[2] = {rows * (hsize_t)size_, width};
    const hsize_t base = rows * (hsize_t)rank_;
    double *block = xmalloc(rows * width * sizeof *block), *back = xmalloc(rows * width * sizeof *back);
    for (hsize_t i = 0; i < rows * width; i++) block[i] = (double)i + rank_;
    hid_t f = pcreate(path, 1, MPI_INFO_NULL), coll = xfer(H5FD_MPIO_COLLECTIVE);
    hid_t d = mkdset(f, "particles", H5T_NATIVE_DOUBLE, 2, dims, H5P_DEFAULT);
    if (fixed) {
        rows_io(d, 1, H5T_NATIVE_DOUBLE, base, base + rows, 2, dims, coll, block);
    } else {
        for (hsize_t i = 0; i < rows; i++)
            rows_io(d, 1, H5T_NATIVE_DOUBLE, base + i, base + i + 1, 2, dims, H5P_DEFAULT, block + i * width);
    }
    rows_io(d, 0, H5T_NATIVE_DOUBLE, base, base + rows, 2, dims, coll, back);
    check(memcmp(block, back, rows * width * sizeof *block) == 0, "small-independent-writes");
    H(H5Dclose(d));
    H(H5Fclose(f));
    H(H5Pclose(coll));
    free(block);
    free(back);
}

static void chunk_shape(const char *path, int fixed) {
    const hsize_t n = 1 << 18, dims[1] = {n}, chunk[1] = {fixed ? 131072 : 64}; /* 2 MiB in chunks of 512 B */
    double *buf = xmalloc(n * sizeof *buf), *back = xmalloc(n * sizeof *back);
    for (hsize_t i = 0; i < n; i++) buf[i] = (double)i;
    hid_t fapl = sfapl_latest(), f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H(f);
    H(H5Pset_chunk(dcpl, 1, chunk));
    hid_t d = mkdset(f, "c", H5T_NATIVE_DOUBLE, 1, dims, dcpl);
    H(H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf));
    H(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, back));
    if (memcmp(buf, back, n * sizeof *buf) != 0) {
        fprintf(stderr, "chunk-shape: data read back differs\n");
        exit(3);
    }
    H(H5Dclose(d));
    H(H5Fclose(f));
    H(H5Pclose(dcpl));
    H(H5Pclose(fapl));
    free(buf);
    free(back);
}

static void chunk_cache(const char *path, int fixed) {
    const hsize_t dims[2] = {2048, 1024}, chunk[2] = {512, 1024}, row[2] = {1, 1024};
    size_t n = (size_t)(dims[0] * dims[1]);
    float *data = xmalloc(n * sizeof *data), back[1024];
    for (size_t i = 0; i < n; i++) data[i] = (float)(i % 977);
    hid_t fapl = sfapl_latest(), f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H(f);
    H(H5Pset_chunk(dcpl, 2, chunk));
    H(H5Pset_deflate(dcpl, 1));
    hid_t d = mkdset(f, "z", H5T_NATIVE_FLOAT, 2, dims, dcpl);
    H(H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    H(H5Dclose(d));
    H(H5Fclose(f));
    f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H(f);
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    if (fixed) H(H5Pset_chunk_cache(dapl, 10007, 16 << 20, 1.0));
    d = H5Dopen2(f, "z", dapl);
    H(d);
    hid_t ms = H5Screate_simple(2, row, NULL), fs = H5Dget_space(d);
    for (hsize_t i = 0; i < dims[0]; i += 64) {
        hsize_t start[2] = {i, 0};
        H(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, row, NULL));
        H(H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, back));
        if (memcmp(back, data + i * dims[1], sizeof back) != 0) {
            fprintf(stderr, "chunk-cache: data read back differs\n");
            exit(3);
        }
    }
    H(H5Sclose(ms));
    H(H5Sclose(fs));
    H(H5Dclose(d));
    H(H5Fclose(f));
    H(H5Pclose(dapl));
    H(H5Pclose(dcpl));
    H(H5Pclose(fapl));
    free(data);
}

static void write_at(hid_t d, hsize_t i, double v) {
    hsize_t one[1] = {1}, start[1] = {i};
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, one, NULL);
    H(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, one, NULL));
    H(H5Dwrite(d, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, &v));
    H(H5Sclose(ms));
    H(H5Sclose(fs));
}

static void read_all_check(const char *path, const char *name, size_t n, const double *want, const char *what) {
    double *back = xmalloc(n * sizeof *back);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    H(f);
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    H(d);
    H(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, back));
    if (memcmp(back, want, n * sizeof *back) != 0) {
        fprintf(stderr, "%s: data read back differs\n", what);
        exit(3);
    }
    H(H5Dclose(d));
    H(H5Fclose(f));
    free(back);
}

static void open_close_loop(const char *path, int fixed) {
    const hsize_t n = 200, dims[1] = {n};
    double want[200];
    hid_t fapl = sfapl_latest(), f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H(f);
    H(H5Dclose(mkdset(f, "field", H5T_NATIVE_DOUBLE, 1, dims, H5P_DEFAULT)));
    hid_t d = fixed ? H5Dopen2(f, "field", H5P_DEFAULT) : H5I_INVALID_HID;
    for (hsize_t i = 0; i < n; i++) {
        want[i] = (double)i;
        if (!fixed) {
            d = H5Dopen2(f, "field", H5P_DEFAULT);
            H(d);
        }
        write_at(d, i, want[i]);
        if (!fixed) H(H5Dclose(d));
    }
    if (fixed) H(H5Dclose(d));
    H(H5Fclose(f));
    H(H5Pclose(fapl));
    read_all_check(path, "field", n, want, "open-close-loop");
}

static void file_reopen(const char *path, int fixed) {
    const hsize_t steps = 20, width = 1024, dims[2] = {steps, width};
    double *row = xmalloc(width * sizeof *row), *want = xmalloc(steps * width * sizeof *want);
    hid_t fapl = sfapl_latest(), f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H(f);
    H(H5Dclose(mkdset(f, "field", H5T_NATIVE_DOUBLE, 2, dims, H5P_DEFAULT)));
    H(H5Fclose(f));
    f = fixed ? H5Fopen(path, H5F_ACC_RDWR, fapl) : H5I_INVALID_HID;
    for (hsize_t s = 0; s < steps; s++) {
        for (hsize_t j = 0; j < width; j++) row[j] = want[s * width + j] = (double)s;
        if (!fixed) f = H5Fopen(path, H5F_ACC_RDWR, fapl);
        H(f);
        hid_t d = H5Dopen2(f, "field", H5P_DEFAULT);
        H(d);
        rows_io(d, 1, H5T_NATIVE_DOUBLE, s, s + 1, 2, dims, H5P_DEFAULT, row);
        H(H5Dclose(d));
        if (fixed)
            H(H5Fflush(f, H5F_SCOPE_LOCAL));
        else
            H(H5Fclose(f));
    }
    if (fixed) H(H5Fclose(f));
    H(H5Pclose(fapl));
    read_all_check(path, "field", (size_t)(steps * width), want, "file-reopen");
    free(row);
    free(want);
}

enum { IMBALANCE_MAX_STEPS = 64 };
static const double IMBALANCE_SECONDS = 0.3; /* time steps go on until the busiest rank has spent this long writing */

static void rank_imbalance(const char *path, int fixed) {
    /* rank 0 owns 98 % of the rows (a skewed decomposition): independent writes of 64 rows (4 MiB), 47 on rank 0,
     * one on rank 1; the fixed variant gives each rank half of the rows. Each time step rewrites every rank's
     * share; the steps go on until the busiest rank has spent IMBALANCE_SECONDS writing: one step's 188 MiB takes
     * under 0.1 s where the page cache takes 2 GB/s, and the rule reports only a slowest rank at least 0.05 s above
     * the mean */
    const hsize_t rows = 3072, width = 1 << 14, dims[2] = {rows, width};
    hsize_t cut = fixed ? rows / 2 : rows * 98 / 100 / 64 * 64;
    hsize_t lo = rank_ == 0 ? 0 : cut, hi = rank_ == 0 ? cut : rows;
    if (size_ > 2 && rank_ > 1) lo = hi = rows; /* only two ranks write */
    float *buf = xmalloc(64 * width * sizeof *buf), *back = xmalloc(width * sizeof *back);
    hid_t f = pcreate(path, 1, MPI_INFO_NULL);
    hid_t d = mkdset(f, "field", H5T_NATIVE_FLOAT, 2, dims, H5P_DEFAULT);
    double spent = 0, busiest = 0; /* seconds in the writes themselves, as the trace counts them */
    for (int step = 0; step < IMBALANCE_MAX_STEPS && busiest < IMBALANCE_SECONDS; step++) {
        for (hsize_t r = lo; r < hi; r += 64) {
            hsize_t end = r + 64 < hi ? r + 64 : hi;
            for (hsize_t i = 0; i < (end - r) * width; i++) buf[i] = (float)r;
            double t0 = MPI_Wtime();
            rows_io(d, 1, H5T_NATIVE_FLOAT, r, end, 2, dims, H5P_DEFAULT, buf);
            spent += MPI_Wtime() - t0;
        }
        MPI_Allreduce(&spent, &busiest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }
    int ok = 1;
    if (hi > lo) {
        rows_io(d, 0, H5T_NATIVE_FLOAT, lo, lo + 1, 2, dims, H5P_DEFAULT, back);
        ok = back[0] == (float)lo && back[width - 1] == (float)lo;
    }
    check(ok, "rank-imbalance");
    H(H5Dclose(d));
    H(H5Fclose(f));
    free(buf);
    free(back);
}

static void mpi_hints(const char *path, int fixed) {
    const hsize_t n = 1 << 19, dims[1] = {n};
    hsize_t lo, hi;
    share(n, &lo, &hi);
    size_t cnt = (size_t)(hi - lo);
    double *buf = xmalloc(cnt * sizeof *buf), *back = xmalloc(cnt * sizeof *back);
    for (size_t i = 0; i < cnt; i++) buf[i] = (double)(lo + i);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "romio_cb_write", fixed ? "enable" : "disable");
    MPI_Info_set(info, "romio_ds_write", fixed ? "disable" : "enable");
    hid_t f = pcreate(path, 1, info), dxpl = xfer(H5FD_MPIO_COLLECTIVE);
    hid_t d = mkdset(f, "x", H5T_NATIVE_DOUBLE, 1, dims, H5P_DEFAULT);
    rows_io(d, 1, H5T_NATIVE_DOUBLE, lo, hi, 1, dims, dxpl, buf);
    rows_io(d, 0, H5T_NATIVE_DOUBLE, lo, hi, 1, dims, dxpl, back);
    check(memcmp(buf, back, cnt * sizeof *buf) == 0, "mpi-hints");
    H(H5Dclose(d));
    H(H5Fclose(f));
    H(H5Pclose(dxpl));
    MPI_Info_free(&info);
    free(buf);
    free(back);
}

static void clean(const char *path, int fixed) {
    (void)fixed; /* well tuned: modern format, alignment, matching types, collective writes, 1 MiB chunks */
    const hsize_t n = 1 << 20, dims[1] = {n}, gdims[2] = {512, 1024}, chunk[2] = {128, 1024}, small[1] = {8};
    hsize_t lo, hi, rlo, rhi;
    share(n, &lo, &hi);
    share(gdims[0], &rlo, &rhi);
    size_t cnt = (size_t)(hi - lo), gcnt = (size_t)((rhi - rlo) * gdims[1]);
    double *buf = xmalloc(cnt * sizeof *buf), *back = xmalloc(cnt * sizeof *back), *ones = xmalloc(gcnt * sizeof *ones);
    for (size_t i = 0; i < cnt; i++) buf[i] = (double)(lo + i);
    for (size_t i = 0; i < gcnt; i++) ones[i] = 1.0;
    double eight[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    hid_t f = pcreate(path, 1, MPI_INFO_NULL), dxpl = xfer(H5FD_MPIO_COLLECTIVE);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H(H5Pset_chunk(dcpl, 2, chunk));
    hid_t x = mkdset(f, "x", H5T_NATIVE_DOUBLE, 1, dims, H5P_DEFAULT), grid = mkdset(f, "grid", H5T_NATIVE_DOUBLE, 2, gdims, dcpl);
    hid_t g = H5Gcreate2(f, "meta", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H(g);
    for (int k = 0; k < 4; k++) {
        char name[8];
        snprintf(name, sizeof name, "m%d", k);
        hid_t m = mkdset(g, name, H5T_NATIVE_DOUBLE, 1, small, H5P_DEFAULT);
        H(H5Dwrite(m, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, dxpl, eight));
        H(H5Dclose(m));
    }
    rows_io(x, 1, H5T_NATIVE_DOUBLE, lo, hi, 1, dims, dxpl, buf);
    rows_io(grid, 1, H5T_NATIVE_DOUBLE, rlo, rhi, 2, gdims, dxpl, ones);
    rows_io(x, 0, H5T_NATIVE_DOUBLE, lo, hi, 1, dims, dxpl, back);
    check(memcmp(buf, back, cnt * sizeof *buf) == 0, "clean");
    H(H5Gclose(g));
    H(H5Dclose(grid));
    H(H5Dclose(x));
    H(H5Fclose(f));
    H(H5Pclose(dcpl));
    H(H5Pclose(dxpl));
    free(buf);
    free(back);
    free(ones);
}

/* mkdir -p; 0 on success */
static int mkdirs(const char *dir) {
    char buf[4096];
    struct stat st;
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && stat(buf, &st) != 0) return -1;
        *p = '/';
    }
    return mkdir(buf, 0777) == 0 || (stat(buf, &st) == 0 && S_ISDIR(st.st_mode)) ? 0 : -1;
}

typedef void (*case_fn)(const char *, int);
static const struct {
    const char *name;
    case_fn fn;
    int parallel;
} CASES[] = {
    {"dtype-conversion", dtype_conversion, 1},
    {"collective-fallback", collective_fallback, 1},
    {"fill-time", fill_time, 1},
    {"alignment", alignment, 1},
    {"small-independent-writes", small_independent_writes, 1},
    {"rank-imbalance", rank_imbalance, 1},
    {"mpi-hints", mpi_hints, 1},
    {"clean", clean, 1},
    {"libver-earliest", libver_earliest, 0},
    {"chunk-shape", chunk_shape, 0},
    {"chunk-cache", chunk_cache, 0},
    {"open-close-loop", open_close_loop, 0},
    {"file-reopen", file_reopen, 0},
};
#define NCASES (sizeof CASES / sizeof CASES[0])

static int wants_fix(const char *name, int all_fixed) {
    const char *env = getenv("H5FLOW_ADVISE_FIX");
    if (all_fixed) return 1;
    if (!env) return 0;
    size_t len = strlen(name);
    for (const char *p = env; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if ((n == len && strncmp(p, name, n) == 0) || (n == 3 && strncmp(p, "all", 3) == 0)) return 1;
        p += n + (end ? 1 : 0);
    }
    return 0;
}

static void run_case(size_t i, const char *dir, int all_fixed) {
    char path[4096];
    int fixed = wants_fix(CASES[i].name, all_fixed);
    snprintf(path, sizeof path, "%s/%s.h5", dir, CASES[i].name);
    double t0 = MPI_Wtime();
    if (CASES[i].parallel)
        CASES[i].fn(path, fixed);
    else if (rank_ == 0)
        CASES[i].fn(path, fixed);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) printf("%s%s: %.3f s\n", CASES[i].name, fixed ? " (fixed)" : "", MPI_Wtime() - t0);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    const char *dir = "advise-out", *fixed_dir = NULL;
    int all_fixed = 0, ncase = 0;
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--dir") == 0 && a + 1 < argc) {
            dir = argv[++a];
        } else if (strcmp(argv[a], "--fixed-dir") == 0 && a + 1 < argc) {
            fixed_dir = argv[++a];
        } else if (strcmp(argv[a], "--fixed") == 0) {
            all_fixed = 1;
        } else if (strcmp(argv[a], "all") != 0) {
            size_t i = 0;
            while (i < NCASES && strcmp(CASES[i].name, argv[a]) != 0) i++;
            if (i == NCASES) {
                if (rank_ == 0) {
                    fprintf(stderr, "unknown case %s; choose from all", argv[a]);
                    for (size_t k = 0; k < NCASES; k++) fprintf(stderr, ", %s", CASES[k].name);
                    fprintf(stderr, "\n");
                }
                MPI_Finalize();
                return 2;
            }
            ncase++;
        } else {
            ncase++;
        }
    }
    if (ncase == 0) {
        if (rank_ == 0) fprintf(stderr, "usage: mpiexec -n 2 %s [--dir DIR] [--fixed] [--fixed-dir DIR2] CASE... (CASE: a rule id, clean or all)\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    int made = 1;
    if (rank_ == 0) {
        made = mkdirs(dir) == 0 && (!fixed_dir || mkdirs(fixed_dir) == 0);
        if (!made) perror("h5flow-advise-faulty: cannot create the output directory");
    }
    MPI_Bcast(&made, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!made) {
        MPI_Finalize();
        return 2;
    }
    for (int a = 1; a < argc; a++) {
        if (strcmp(argv[a], "--dir") == 0 || strcmp(argv[a], "--fixed-dir") == 0) {
            a++;
            continue;
        }
        if (strcmp(argv[a], "--fixed") == 0) continue;
        for (size_t i = 0; i < NCASES; i++) {
            if (strcmp(argv[a], "all") != 0 && strcmp(argv[a], CASES[i].name) != 0) continue;
            run_case(i, dir, all_fixed);
            if (fixed_dir) run_case(i, fixed_dir, 1);
        }
    }
    MPI_Finalize();
    return 0;
}
