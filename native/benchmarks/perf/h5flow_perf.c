/* h5flow-perf — an h5perf-compatible parallel I/O kernel (MPI + HDF5, C11).
 *
 * Every MPI rank moves `-e` bytes per dataset into (and back out of) `-d` datasets with transfers of
 * `-x`..`-X` bytes, laid out contiguously (rank i owns region i: "1111----2222----") or interleaved
 * (`-I`, blocks of `-B` bytes round-robin: "123123123"), through one of these APIs:
 *
 *   posix      one file PER PROCESS (N-N): the physical bound. (h5perf's POSIX shares one file.)
 *   mpiio      one shared file, MPI_File_{write,read}_at (…_all with -C) at the logical offsets
 *   phdf5      one shared HDF5 file, H5Pset_fapl_mpio, one 1-D H5T_NATIVE_UCHAR dataset per -d,
 *              hyperslab per transfer, independent transfers (collective with -C)
 *   subfiling  the same HDF5 pattern through the subfiling VFD (H5Pset_fapl_subfiling, defaults)
 *
 * HDF5 picks its VOL connector from HDF5_VOL_CONNECTOR as usual, so `phdf5` runs through any connector
 * (h5flow_log, for one); the connector that really served the file is reported as "vol".
 *
 * Timing follows h5perf: per iteration the slowest rank's time counts; "Write" is the time between the
 * file being open and it being closed (dataset create + transfers + dataset close), "Write Open-Close"
 * adds the file open and close, "Raw Data Write" counts only the transfer calls; the same for reads.
 * Maximum throughput uses the fastest iteration, MB = 2^20 bytes. Files go to $HDF5_PARAPREFIX (or `-f`)
 * and are removed after each iteration unless HDF5_NOCLEANUP is set.
 *
 * With `-D v` every byte read is compared with what was written (each byte's value is a hash of its
 * dataset and its logical offset, so misplaced data is caught); a mismatch fails the run (exit 1).
 * Besides the h5perf-style report, rank 0 prints one machine-readable line per (transfer size, API):
 *   H5FLOW_PERF {"api": ..., "write_mib_s": ..., ...}
 * which `h5flow bench perf` collects. H5FLOW_PERF_INJECT_CORRUPTION=1 makes the last rank spoil one byte it
 * read, to prove that the verifier fails the run.
 */
#define _XOPEN_SOURCE 700

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <hdf5.h>
#include <mpi.h>

#define MIB (1024.0 * 1024.0)
#define PATH_CAP 4096

enum api_id { API_POSIX, API_MPIIO, API_PHDF5, API_SUBFILING, API_COUNT };
static const char *const api_names[API_COUNT] = {"posix", "mpiio", "phdf5", "subfiling"};
static const char *const api_titles[API_COUNT] = {
    "POSIX (one file per process)", "MPIO", "PHDF5 (w/MPI-IO driver)", "PHDF5 (w/subfiling driver)"};

typedef struct {
    unsigned apis;           /* bit per enum api_id */
    size_t bytes_per_proc;   /* -e, per dataset */
    size_t xfer_min;         /* -x */
    size_t xfer_max;         /* -X */
    size_t block;            /* -B; 0 = the transfer size */
    hsize_t align;           /* -a */
    hsize_t threshold;       /* -T */
    hsize_t meta_block;      /* -m (h5flow extension) */
    bool meta_block_set;
    int datasets;            /* -d */
    int iterations;          /* -i */
    bool collective;         /* -C */
    bool interleaved;        /* -I */
    bool verify;             /* -D v */
    bool raw;                /* -D r */
    bool times;              /* -D t */
    bool write_only;         /* -w */
    const char *dir;         /* -f, else $HDF5_PARAPREFIX, else "." */
} options_t;

typedef struct {
    const options_t *opt;
    int rank;
    int nprocs;
    size_t xfer;
    size_t blk;
    enum api_id api;
    char base[PATH_CAP]; /* <dir>/<stem>: every file of the run starts with it */
    const char *stem;    /* the file-name part of base */
    unsigned char *wbuf; /* what this rank writes: datasets x bytes_per_proc */
    unsigned char *rbuf; /* what it reads back */
    char vol[128];       /* the VOL connector that served the HDF5 file */
} run_t;

/* One phase (write or read) on one rank: open, body (between open and close), raw transfers, close. */
enum { T_OPEN, T_BODY, T_RAW, T_CLOSE, T_COUNT };

static void die_at(const char *file, int line, const char *fmt, ...)
{
    int rank = -1;
    int init = 0;
    MPI_Initialized(&init);
    if (init)
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "h5flow-perf: rank %d: ", rank);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (%s:%d)\n", file, line);
    fflush(stderr);
    if (init)
        MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}
#define DIE(...) die_at(__FILE__, __LINE__, __VA_ARGS__)
#define H5TRY(call)                                                                                   \
    do {                                                                                                \
        if ((call) < 0)                                                                                 \
            DIE("%s failed", #call);                                                                    \
    } while (0)
#define MPICHECK(call)                                                                                  \
    do {                                                                                                \
        int rc_ = (call);                                                                               \
        if (rc_ != MPI_SUCCESS) {                                                                       \
            char msg_[MPI_MAX_ERROR_STRING];                                                            \
            int len_ = 0;                                                                               \
            MPI_Error_string(rc_, msg_, &len_);                                                         \
            DIE("%s failed: %s", #call, msg_);                                                          \
        }                                                                                               \
    } while (0)

/* ---------------------------------------------------------------- options */

/* "256K", "1M", "1M+10" (h5flow extension: a sum), suffixes K/M/G are powers of 1024 like h5perf. */
static int parse_size(const char *s, size_t *out)
{
    size_t total = 0;
    const char *p = s;
    for (;;) {
        if (*p < '0' || *p > '9')
            return -1;
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull(p, &end, 10);
        if (errno != 0)
            return -1;
        unsigned long long mult = 1;
        switch (*end) {
        case 'k': case 'K': mult = 1ULL << 10; end++; break;
        case 'm': case 'M': mult = 1ULL << 20; end++; break;
        case 'g': case 'G': mult = 1ULL << 30; end++; break;
        default: break;
        }
        if (v > SIZE_MAX / mult || total > SIZE_MAX - v * mult)
            return -1;
        total += (size_t)(v * mult);
        if (*end == '\0')
            break;
        if (*end != '+')
            return -1;
        p = end + 1;
    }
    *out = total;
    return 0;
}

static void usage(FILE *to)
{
    fprintf(to,
            "usage: mpiexec -n N h5flow-perf [options]\n"
            "h5perf-compatible options:\n"
            "  -A AL  APIs, comma separated: posix, mpiio, phdf5, subfiling (default posix,mpiio,phdf5)\n"
            "  -a S   alignment (H5Pset_alignment) [default 1]\n"
            "  -B S   block size inside a transfer (interleaving unit) [default: the transfer size]\n"
            "  -C     collective I/O for MPI-IO and HDF5 [default independent]\n"
            "  -d N   datasets per file [default 1]\n"
            "  -D DL  debug flags: v = verify data read back, r = raw data throughput, t = open/close times\n"
            "  -e S   bytes per process per dataset [default 256K]\n"
            "  -i N   iterations [default 1]\n"
            "  -I     interleaved block pattern [default contiguous]\n"
            "  -T S   alignment threshold [default 1]\n"
            "  -w     write only (no read phase)\n"
            "  -x S   minimum transfer size [default half of -e]\n"
            "  -X S   maximum transfer size, doubling from -x [default -e]\n"
            "h5flow extensions:\n"
            "  -f DIR directory for the files [default $HDF5_PARAPREFIX, else .]\n"
            "  -m S   metadata block size (H5Pset_meta_block_size) [default HDF5's 2048]\n"
            "Sizes take K/M/G (powers of 1024) and may be sums such as 1M+10.\n"
            "The process count is the MPI job size; run one job per count (h5perf's -p/-P loop).\n"
            "Environment: HDF5_PARAPREFIX, HDF5_NOCLEANUP (as h5perf), HDF5_VOL_CONNECTOR.\n");
}

/* Returns 0 to run, 1 when help was asked for, 2 on a usage error (reported on rank 0). */
static int parse_options(int argc, char **argv, options_t *o, int rank)
{
    memset(o, 0, sizeof *o);
    o->apis = (1u << API_POSIX) | (1u << API_MPIIO) | (1u << API_PHDF5);
    o->bytes_per_proc = 256 * 1024;
    o->align = 1;
    o->threshold = 1;
    o->datasets = 1;
    o->iterations = 1;
    o->dir = getenv("HDF5_PARAPREFIX");
    if (o->dir == NULL || o->dir[0] == '\0')
        o->dir = ".";
    bool xmin_set = false, xmax_set = false;
    int c;
    opterr = 0;
    while ((c = getopt(argc, argv, "A:a:B:Cd:D:e:f:hi:Im:T:wx:X:")) != -1) {
        size_t sz = 0;
        const char *bad = NULL;
        switch (c) {
        case 'A': {
            o->apis = 0;
            char *copy = strdup(optarg);
            if (copy == NULL)
                DIE("out of memory");
            char *save = NULL;
            for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                int found = -1;
                for (int a = 0; a < API_COUNT; a++)
                    if (strcmp(tok, api_names[a]) == 0)
                        found = a;
                if (found < 0) {
                    if (rank == 0)
                        fprintf(stderr, "h5flow-perf: -A: unknown API '%s' (choose from posix, mpiio, "
                                        "phdf5, subfiling)\n", tok);
                    free(copy);
                    return 2;
                }
                o->apis |= 1u << found;
            }
            free(copy);
            if (o->apis == 0)
                bad = "-A needs at least one API";
            break;
        }
        case 'a': if (parse_size(optarg, &sz) || sz == 0) bad = "-a needs a positive size"; else o->align = sz; break;
        case 'B': if (parse_size(optarg, &sz) || sz == 0) bad = "-B needs a positive size"; else o->block = sz; break;
        case 'C': o->collective = true; break;
        case 'd': o->datasets = atoi(optarg); if (o->datasets < 1) bad = "-d needs a count >= 1"; break;
        case 'D':
            for (const char *f = optarg; *f; f++) {
                if (*f == 'v') o->verify = true;
                else if (*f == 'r') o->raw = true;
                else if (*f == 't') o->times = true;
                else if (*f >= '1' && *f <= '4') ; /* h5perf's verbosity levels: accepted */
                else if (*f != ',') bad = "-D takes a list of v, r, t, 1-4";
            }
            break;
        case 'e': if (parse_size(optarg, &sz) || sz == 0) bad = "-e needs a positive size"; else o->bytes_per_proc = sz; break;
        case 'f': o->dir = optarg; break;
        case 'h': if (rank == 0) usage(stdout); return 1;
        case 'i': o->iterations = atoi(optarg); if (o->iterations < 1) bad = "-i needs a count >= 1"; break;
        case 'I': o->interleaved = true; break;
        case 'm': if (parse_size(optarg, &sz)) bad = "-m needs a size"; else { o->meta_block = sz; o->meta_block_set = true; } break;
        case 'T': if (parse_size(optarg, &sz)) bad = "-T needs a size"; else o->threshold = sz; break;
        case 'w': o->write_only = true; break;
        case 'x': if (parse_size(optarg, &sz) || sz == 0) bad = "-x needs a positive size"; else { o->xfer_min = sz; xmin_set = true; } break;
        case 'X': if (parse_size(optarg, &sz) || sz == 0) bad = "-X needs a positive size"; else { o->xfer_max = sz; xmax_set = true; } break;
        default: bad = "unknown option or missing value (see -h)"; break;
        }
        if (bad != NULL) {
            if (rank == 0)
                fprintf(stderr, "h5flow-perf: %s\n", bad);
            return 2;
        }
    }
    if (optind < argc) {
        if (rank == 0)
            fprintf(stderr, "h5flow-perf: unexpected argument '%s' (see -h)\n", argv[optind]);
        return 2;
    }
    if (!xmin_set)
        o->xfer_min = o->bytes_per_proc / 2 ? o->bytes_per_proc / 2 : 1;
    if (!xmax_set)
        o->xfer_max = o->bytes_per_proc;
    const char *bad = NULL;
    if (o->xfer_min > o->xfer_max)
        bad = "-x must not exceed -X";
    else if (o->write_only && o->verify)
        bad = "-D v needs the read phase: drop -w";
    else if (o->xfer_max > (size_t)INT32_MAX)
        bad = "transfer sizes above 2 GiB are not supported";
    for (size_t x = o->xfer_min; bad == NULL && x <= o->xfer_max; x *= 2) {
        if (o->bytes_per_proc % x != 0)
            bad = "every transfer size (-x doubling to -X) must divide the bytes per process (-e)";
        else if (o->block != 0 && x % o->block != 0)
            bad = "the block size (-B) must divide every transfer size";
        if (x > SIZE_MAX / 2)
            break;
    }
    if (bad != NULL) {
        if (rank == 0)
            fprintf(stderr, "h5flow-perf: %s\n", bad);
        return 2;
    }
    return 0;
}

/* ---------------------------------------------------------------- data pattern */

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* Logical offset, inside its dataset, of this rank's q-th byte. */
static uint64_t logical_offset(const run_t *r, uint64_t q)
{
    uint64_t e = r->opt->bytes_per_proc;
    if (!r->opt->interleaved)
        return (uint64_t)r->rank * e + q;
    uint64_t blk = r->blk;
    return ((q / blk) * (uint64_t)r->nprocs + (uint64_t)r->rank) * blk + q % blk;
}

/* wbuf[k][q] = byte (logical offset of q) of a per-dataset hash stream. */
static void fill_expected(const run_t *r)
{
    size_t e = r->opt->bytes_per_proc;
    size_t run = r->opt->interleaved ? r->blk : e; /* bytes that are contiguous in the dataset */
    for (int k = 0; k < r->opt->datasets; k++) {
        unsigned char *p = r->wbuf + (size_t)k * e;
        uint64_t salt = (uint64_t)(k + 1) << 52;
        for (size_t start = 0; start < e; start += run) {
            uint64_t g = logical_offset(r, start);
            uint64_t word = g >> 3;
            uint64_t h = mix64(word ^ salt);
            for (size_t w = 0; w < run; w++, g++) {
                if ((g >> 3) != word) {
                    word = g >> 3;
                    h = mix64(word ^ salt);
                }
                p[start + w] = (unsigned char)(h >> (8 * (g & 7)));
            }
        }
    }
}

/* ---------------------------------------------------------------- file naming and cleanup */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    if (remove(path) != 0 && errno != ENOENT)
        fprintf(stderr, "h5flow-perf: could not remove %s: %s\n", path, strerror(errno));
    return 0;
}

/* Remove every entry of the run's directory whose name starts with the run's stem (HDF5 files, subfiling
 * subfiles and configs, a connector's side files or directories). */
static void cleanup(const run_t *r)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (r->rank == 0 && getenv("HDF5_NOCLEANUP") == NULL) {
        DIR *d = opendir(r->opt->dir);
        if (d == NULL)
            DIE("cannot list %s: %s", r->opt->dir, strerror(errno));
        size_t n = strlen(r->stem);
        struct dirent *ent;
        char path[PATH_CAP + 256];
        while ((ent = readdir(d)) != NULL) {
            if (strncmp(ent->d_name, r->stem, n) != 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", r->opt->dir, ent->d_name);
            nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        }
        closedir(d);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* ---------------------------------------------------------------- the APIs */

static void full_pio(int fd, unsigned char *buf, size_t n, off_t off, bool writing, const char *path)
{
    while (n > 0) {
        ssize_t got = writing ? pwrite(fd, buf, n, off) : pread(fd, buf, n, off);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            DIE("%s %s: %s", writing ? "pwrite" : "pread", path, strerror(errno));
        if (got == 0)
            DIE("pread %s: unexpected end of file at offset %lld", path, (long long)off);
        buf += got;
        n -= (size_t)got;
        off += got;
    }
}

static void posix_phase(run_t *r, bool writing, double t[T_COUNT])
{
    char path[PATH_CAP + 64];
    snprintf(path, sizeof path, "%s.posix.%d", r->base, r->rank);
    size_t e = r->opt->bytes_per_proc;
    size_t ntransfers = e / r->xfer;
    unsigned char *buf = writing ? r->wbuf : r->rbuf;
    double raw = 0.0;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int fd = writing ? open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644) : open(path, O_RDONLY);
    if (fd < 0)
        DIE("open %s: %s", path, strerror(errno));
    double t1 = MPI_Wtime();
    for (int k = 0; k < r->opt->datasets; k++)
        for (size_t j = 0; j < ntransfers; j++) {
            size_t off = (size_t)k * e + j * r->xfer;
            double a = MPI_Wtime();
            full_pio(fd, buf + off, r->xfer, (off_t)off, writing, path);
            raw += MPI_Wtime() - a;
        }
    double t2 = MPI_Wtime();
    if (close(fd) != 0)
        DIE("close %s: %s", path, strerror(errno));
    double t3 = MPI_Wtime();
    t[T_OPEN] = t1 - t0;
    t[T_BODY] = t2 - t1;
    t[T_RAW] = raw;
    t[T_CLOSE] = t3 - t2;
}

static void mpiio_phase(run_t *r, bool writing, double t[T_COUNT])
{
    char path[PATH_CAP + 64];
    snprintf(path, sizeof path, "%s.mpio", r->base);
    size_t e = r->opt->bytes_per_proc;
    size_t ntransfers = e / r->xfer;
    /* contiguous: a transfer is one contiguous piece; interleaved: one piece per block */
    size_t piece = r->opt->interleaved ? r->blk : r->xfer;
    size_t pieces = r->xfer / piece;
    unsigned char *buf = writing ? r->wbuf : r->rbuf;
    double raw = 0.0;
    MPI_File fh;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    MPICHECK(MPI_File_open(MPI_COMM_WORLD, path, writing ? MPI_MODE_CREATE | MPI_MODE_WRONLY : MPI_MODE_RDONLY,
                           MPI_INFO_NULL, &fh));
    double t1 = MPI_Wtime();
    for (int k = 0; k < r->opt->datasets; k++) {
        MPI_Offset dset_base = (MPI_Offset)k * (MPI_Offset)e * r->nprocs;
        for (size_t j = 0; j < ntransfers; j++)
            for (size_t b = 0; b < pieces; b++) {
                size_t q = j * r->xfer + b * piece;
                MPI_Offset off = dset_base + (MPI_Offset)logical_offset(r, q);
                unsigned char *p = buf + (size_t)k * e + q;
                MPI_Status st;
                double a = MPI_Wtime();
                if (writing && r->opt->collective)
                    MPICHECK(MPI_File_write_at_all(fh, off, p, (int)piece, MPI_BYTE, &st));
                else if (writing)
                    MPICHECK(MPI_File_write_at(fh, off, p, (int)piece, MPI_BYTE, &st));
                else if (r->opt->collective)
                    MPICHECK(MPI_File_read_at_all(fh, off, p, (int)piece, MPI_BYTE, &st));
                else
                    MPICHECK(MPI_File_read_at(fh, off, p, (int)piece, MPI_BYTE, &st));
                raw += MPI_Wtime() - a;
                int count = 0;
                MPI_Get_count(&st, MPI_BYTE, &count);
                if ((size_t)count != piece)
                    DIE("%s %s: %d of %zu bytes at offset %lld", writing ? "write" : "read", path, count,
                        piece, (long long)off);
            }
    }
    double t2 = MPI_Wtime();
    MPICHECK(MPI_File_close(&fh));
    double t3 = MPI_Wtime();
    t[T_OPEN] = t1 - t0;
    t[T_BODY] = t2 - t1;
    t[T_RAW] = raw;
    t[T_CLOSE] = t3 - t2;
}

static hid_t make_fapl(const run_t *r)
{
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5TRY(fapl);
    if (r->api == API_SUBFILING) {
#ifdef H5_HAVE_SUBFILING_VFD
        H5TRY(H5Pset_fapl_subfiling(fapl, NULL));
#else
        DIE("this HDF5 was built without the subfiling VFD");
#endif
    } else {
        H5TRY(H5Pset_fapl_mpio(fapl, MPI_COMM_WORLD, MPI_INFO_NULL));
    }
    if (r->opt->align > 1)
        H5TRY(H5Pset_alignment(fapl, r->opt->threshold, r->opt->align));
    if (r->opt->meta_block_set)
        H5TRY(H5Pset_meta_block_size(fapl, r->opt->meta_block));
    return fapl;
}

static void hdf5_phase(run_t *r, bool writing, double t[T_COUNT])
{
    char path[PATH_CAP + 64];
    snprintf(path, sizeof path, "%s.h5", r->base);
    size_t e = r->opt->bytes_per_proc;
    size_t ntransfers = e / r->xfer;
    unsigned char *buf = writing ? r->wbuf : r->rbuf;
    double raw = 0.0;

    hid_t fapl = make_fapl(r);
    hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
    H5TRY(dxpl);
    if (r->api == API_PHDF5)
        H5TRY(H5Pset_dxpl_mpio(dxpl, r->opt->collective ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT));
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5TRY(dcpl);
    /* no fill writes: the write phase times the transfers (`h5flow bench tuning` measures the fill) */
    H5TRY(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    hsize_t dims = (hsize_t)e * (hsize_t)r->nprocs;
    hsize_t mdims = r->xfer;
    hid_t fspace = H5Screate_simple(1, &dims, NULL);
    hid_t mspace = H5Screate_simple(1, &mdims, NULL);
    H5TRY(fspace);
    H5TRY(mspace);

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    hid_t fid = writing ? H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl) : H5Fopen(path, H5F_ACC_RDONLY, fapl);
    if (fid < 0)
        DIE("cannot %s %s through HDF5", writing ? "create" : "open", path);
    double t1 = MPI_Wtime();
    for (int k = 0; k < r->opt->datasets; k++) {
        char name[32];
        snprintf(name, sizeof name, "Dataset%d", k);
        hid_t did = writing ? H5Dcreate2(fid, name, H5T_NATIVE_UCHAR, fspace, H5P_DEFAULT, dcpl, H5P_DEFAULT)
                            : H5Dopen2(fid, name, H5P_DEFAULT);
        if (did < 0)
            DIE("cannot %s dataset %s in %s", writing ? "create" : "open", name, path);
        for (size_t j = 0; j < ntransfers; j++) {
            hsize_t start, stride, count, block;
            if (r->opt->interleaved) {
                start = logical_offset(r, j * r->xfer);
                stride = (hsize_t)r->blk * (hsize_t)r->nprocs;
                count = r->xfer / r->blk;
                block = r->blk;
            } else {
                start = logical_offset(r, j * r->xfer);
                stride = 1;
                count = 1;
                block = r->xfer;
            }
            H5TRY(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, &start, &stride, &count, &block));
            unsigned char *p = buf + (size_t)k * e + j * r->xfer;
            double a = MPI_Wtime();
            if (writing)
                H5TRY(H5Dwrite(did, H5T_NATIVE_UCHAR, mspace, fspace, dxpl, p));
            else
                H5TRY(H5Dread(did, H5T_NATIVE_UCHAR, mspace, fspace, dxpl, p));
            raw += MPI_Wtime() - a;
        }
        H5TRY(H5Dclose(did));
    }
    double t2 = MPI_Wtime();
    if (H5VLget_connector_name(fid, r->vol, sizeof r->vol) < 0)
        snprintf(r->vol, sizeof r->vol, "unknown");
    H5TRY(H5Fclose(fid));
    double t3 = MPI_Wtime();
    H5Sclose(mspace);
    H5Sclose(fspace);
    H5Pclose(dcpl);
    H5Pclose(dxpl);
    H5Pclose(fapl);
    t[T_OPEN] = t1 - t0;
    t[T_BODY] = t2 - t1;
    t[T_RAW] = raw;
    t[T_CLOSE] = t3 - t2;
}

static void run_phase(run_t *r, bool writing, double t[T_COUNT])
{
    switch (r->api) {
    case API_POSIX: posix_phase(r, writing, t); break;
    case API_MPIIO: mpiio_phase(r, writing, t); break;
    case API_PHDF5:
    case API_SUBFILING: hdf5_phase(r, writing, t); break;
    default: DIE("bad API %d", (int)r->api);
    }
}

/* ---------------------------------------------------------------- verification and reporting */

/* All ranks: compare what was read with what was written; false (on every rank) if any rank differs. */
static bool verify_all(const run_t *r)
{
    size_t total = (size_t)r->opt->datasets * r->opt->bytes_per_proc;
    int ok = memcmp(r->wbuf, r->rbuf, total) == 0;
    if (!ok) {
        size_t i = 0;
        while (i < total && r->wbuf[i] == r->rbuf[i])
            i++;
        size_t e = r->opt->bytes_per_proc;
        fprintf(stderr,
                "h5flow-perf: rank %d: %s: verification failed: dataset %zu, logical byte %llu: read 0x%02x, "
                "wrote 0x%02x\n",
                r->rank, api_names[r->api], i / e, (unsigned long long)logical_offset(r, i % e), r->rbuf[i],
                r->wbuf[i]);
    }
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    return all != 0;
}

typedef struct {
    double max, avg, min; /* MiB/s: fastest iteration, total bytes / total time, slowest iteration */
} tput_t;

static tput_t throughput(double bytes, const double *secs, int n)
{
    double lo = secs[0], hi = secs[0], sum = 0.0;
    for (int i = 0; i < n; i++) {
        lo = secs[i] < lo ? secs[i] : lo;
        hi = secs[i] > hi ? secs[i] : hi;
        sum += secs[i];
    }
    tput_t t;
    t.max = lo > 0 ? bytes / MIB / lo : 0.0;
    t.min = hi > 0 ? bytes / MIB / hi : 0.0;
    t.avg = sum > 0 ? bytes * n / MIB / sum : 0.0;
    return t;
}

static void print_tput(const char *what, int iters, tput_t t)
{
    printf("            %s (%d iteration(s)):\n", what, iters);
    printf("                Maximum Throughput: %6.2f MB/s\n", t.max);
    printf("                Average Throughput: %6.2f MB/s\n", t.avg);
    printf("                Minimum Throughput: %6.2f MB/s\n", t.min);
}

static void json_tput(const char *key, tput_t t)
{
    printf(", \"%s_mib_s\": %.6g, \"%s_avg_mib_s\": %.6g, \"%s_min_mib_s\": %.6g", key, t.max, key, t.avg, key,
           t.min);
}

static void json_string(const char *key, const char *value)
{
    printf(", \"%s\": \"", key);
    for (const char *c = value; *c; c++)
        putchar((*c == '"' || *c == '\\' || (unsigned char)*c < 0x20) ? '_' : *c);
    putchar('"');
}

static void run_api(run_t *r)
{
    const options_t *o = r->opt;
    int n = o->iterations;
    double *wt = calloc((size_t)n * T_COUNT, sizeof *wt);
    double *rt = calloc((size_t)n * T_COUNT, sizeof *rt);
    if (wt == NULL || rt == NULL)
        DIE("out of memory");
    snprintf(r->vol, sizeof r->vol, "%s", r->api == API_PHDF5 || r->api == API_SUBFILING ? "unknown" : "none");
    bool verified = o->verify;
    size_t total = (size_t)o->datasets * o->bytes_per_proc;
    for (int it = 0; it < n; it++) {
        double mine[T_COUNT];
        run_phase(r, true, mine);
        MPI_Reduce(mine, wt + (size_t)it * T_COUNT, T_COUNT, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (!o->write_only) {
            memset(r->rbuf, 0, total);
            run_phase(r, false, mine);
            MPI_Reduce(mine, rt + (size_t)it * T_COUNT, T_COUNT, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            /* self-test of the verifier: the last rank spoils one byte it read */
            if (getenv("H5FLOW_PERF_INJECT_CORRUPTION") != NULL && r->rank == r->nprocs - 1)
                r->rbuf[total / 2] ^= 0x5a;
            if (o->verify && !verify_all(r)) {
                cleanup(r);
                if (r->rank == 0)
                    fprintf(stderr, "h5flow-perf: %s: data read back differs from data written (iteration %d)\n",
                            api_names[r->api], it + 1);
                MPI_Finalize();
                exit(1);
            }
        }
        cleanup(r);
    }
    if (r->rank == 0) {
        double bytes = (double)total * r->nprocs;
        double *sec = calloc((size_t)n, sizeof *sec);
        if (sec == NULL)
            DIE("out of memory");
        tput_t res[6];
        const double *src[2] = {wt, rt};
        for (int phase = 0; phase < 2; phase++) {
            for (int i = 0; i < n; i++)
                sec[i] = src[phase][i * T_COUNT + T_BODY];
            res[phase * 3 + 0] = throughput(bytes, sec, n);
            for (int i = 0; i < n; i++)
                sec[i] = src[phase][i * T_COUNT + T_OPEN] + src[phase][i * T_COUNT + T_BODY] +
                         src[phase][i * T_COUNT + T_CLOSE];
            res[phase * 3 + 1] = throughput(bytes, sec, n);
            for (int i = 0; i < n; i++)
                sec[i] = src[phase][i * T_COUNT + T_RAW];
            res[phase * 3 + 2] = throughput(bytes, sec, n);
        }
        double open_close[2] = {0.0, 0.0};
        for (int phase = 0; phase < 2; phase++)
            for (int i = 0; i < n; i++)
                open_close[phase] += src[phase][i * T_COUNT + T_OPEN] + src[phase][i * T_COUNT + T_CLOSE];
        printf("        IO API = %s\n", api_titles[r->api]);
        if (o->raw)
            print_tput("Raw Data Write", n, res[2]);
        print_tput("Write", n, res[0]);
        print_tput("Write Open-Close", n, res[1]);
        if (o->times)
            printf("            Write File Open/Close: %.6f s (accumulated)\n", open_close[0]);
        if (!o->write_only) {
            if (o->raw)
                print_tput("Raw Data Read", n, res[5]);
            print_tput("Read", n, res[3]);
            print_tput("Read Open-Close", n, res[4]);
            if (o->times)
                printf("            Read File Open/Close: %.6f s (accumulated)\n", open_close[1]);
        }
        printf("H5FLOW_PERF {\"api\": \"%s\", \"collective\": %s", api_names[r->api],
               o->collective ? "true" : "false");
        json_string("vol", r->vol);
        json_string("pattern", o->interleaved ? "interleaved" : "contiguous");
        printf(", \"processes\": %d, \"transfer_size\": %zu, \"block_size\": %zu, \"bytes_per_process\": %zu"
               ", \"datasets\": %d, \"iterations\": %d, \"alignment\": %llu, \"alignment_threshold\": %llu"
               ", \"meta_block_size\": %lld, \"bytes_total\": %.0f, \"verified\": %s",
               r->nprocs, r->xfer, r->blk, o->bytes_per_proc, o->datasets, n, (unsigned long long)o->align,
               (unsigned long long)o->threshold, o->meta_block_set ? (long long)o->meta_block : -1LL, bytes,
               verified ? "true" : "false");
        json_tput("write", res[0]);
        json_tput("write_open_close", res[1]);
        json_tput("write_raw", res[2]);
        if (!o->write_only) {
            json_tput("read", res[3]);
            json_tput("read_open_close", res[4]);
            json_tput("read_raw", res[5]);
        }
        printf(", \"write_open_close_s\": %.6g, \"read_open_close_s\": %.6g}\n", open_close[0], open_close[1]);
        fflush(stdout);
        free(sec);
    }
    free(wt);
    free(rt);
}

static void print_parameters(const options_t *o, int nprocs)
{
    printf("HDF5 Library: Version %d.%d.%d\n", H5_VERS_MAJOR, H5_VERS_MINOR, H5_VERS_RELEASE);
    printf("rank 0: ==== Parameters ====\n");
    printf("rank 0: IO API=");
    for (int a = 0; a < API_COUNT; a++)
        if (o->apis & (1u << a))
            printf("%s ", api_names[a]);
    printf("\nrank 0: Number of files=1\n");
    printf("rank 0: Number of datasets=%d\n", o->datasets);
    printf("rank 0: Number of iterations=%d\n", o->iterations);
    printf("rank 0: Number of processes=%d:%d\n", nprocs, nprocs);
    printf("rank 0: Number of bytes per process per dataset=%zu\n", o->bytes_per_proc);
    printf("rank 0: Transfer buffer size=%zu:%zu\n", o->xfer_min, o->xfer_max);
    if (o->block)
        printf("rank 0: Block size=%zu\n", o->block);
    else
        printf("rank 0: Block size=transfer size\n");
    printf("rank 0: Block Pattern in Dataset=%s\n", o->interleaved ? "Interleaved" : "Contiguous");
    printf("rank 0: I/O Method for MPI and HDF5=%s\n", o->collective ? "Collective" : "Independent");
    printf("rank 0: Geometry=1D\n");
    printf("rank 0: Data storage method in HDF5=Contiguous\n");
    printf("rank 0: Alignment=%llu, threshold=%llu\n", (unsigned long long)o->align,
           (unsigned long long)o->threshold);
    if (o->meta_block_set)
        printf("rank 0: Metadata block size=%llu\n", (unsigned long long)o->meta_block);
    printf("rank 0: Directory=%s\n", o->dir);
    printf("rank 0: Env HDF5_VOL_CONNECTOR=%s\n", getenv("HDF5_VOL_CONNECTOR") ? getenv("HDF5_VOL_CONNECTOR")
                                                                                : "not set");
    printf("rank 0: Data verification=%s\n", o->verify ? "on" : "off");
    printf("rank 0: ==== End of Parameters ====\n\n");
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, nprocs = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nprocs);

    options_t opt;
    int prc = parse_options(argc, argv, &opt, rank);
    if (prc != 0) {
        MPI_Finalize();
        return prc == 1 ? 0 : 2;
    }
    if ((opt.apis & (1u << API_SUBFILING)) && provided != MPI_THREAD_MULTIPLE) {
        if (rank == 0)
            fprintf(stderr, "h5flow-perf: subfiling needs MPI_THREAD_MULTIPLE, this MPI provides level %d\n",
                    provided);
        MPI_Finalize();
        return 2;
    }
    if ((opt.apis & (1u << API_SUBFILING)) && nprocs == 1) {
        /* measured: HDF5 1.14.5's subfiling VFD never returns from H5Fcreate/H5Fopen on one rank */
        if (rank == 0)
            fprintf(stderr, "h5flow-perf: subfiling needs 2 or more processes (HDF5 1.14.5's subfiling VFD hangs "
                            "on a single rank)\n");
        MPI_Finalize();
        return 2;
    }
    struct stat st;
    int dir_ok = stat(opt.dir, &st) == 0 && S_ISDIR(st.st_mode) && access(opt.dir, W_OK) == 0;
    MPI_Bcast(&dir_ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!dir_ok) {
        if (rank == 0)
            fprintf(stderr, "h5flow-perf: %s is not a writable directory (set -f or HDF5_PARAPREFIX)\n", opt.dir);
        MPI_Finalize();
        return 2;
    }

    run_t r;
    memset(&r, 0, sizeof r);
    r.opt = &opt;
    r.rank = rank;
    r.nprocs = nprocs;
    long ids[2] = {(long)getpid(), (long)time(NULL)};
    MPI_Bcast(ids, 2, MPI_LONG, 0, MPI_COMM_WORLD);
    int len = snprintf(r.base, sizeof r.base, "%s/h5flow_perf_%ld_%ld", opt.dir, ids[0], ids[1]);
    if (len < 0 || (size_t)len >= sizeof r.base)
        DIE("directory name too long: %s", opt.dir);
    r.stem = r.base + strlen(opt.dir) + 1;
    size_t total = (size_t)opt.datasets * opt.bytes_per_proc;
    if (opt.bytes_per_proc != 0 && total / opt.bytes_per_proc != (size_t)opt.datasets)
        DIE("-d x -e overflows");
    /* Page-aligned, like the file offsets of every API's transfers: the kernel copies between a buffer and the
     * page cache fastest when both have the same alignment, and on some CPUs several times slower when the
     * destination lies a few bytes past the source modulo 4 KiB (malloc's large blocks start 16 bytes into a
     * page). Aligned buffers measure each API, not where malloc put the buffer. */
    if (posix_memalign((void **)&r.wbuf, 4096, total ? total : 1) != 0 ||
        posix_memalign((void **)&r.rbuf, 4096, total ? total : 1) != 0)
        DIE("cannot allocate 2 x %zu bytes of buffers", total);

    if (rank == 0)
        print_parameters(&opt, nprocs);
    for (size_t x = opt.xfer_min; x <= opt.xfer_max; x *= 2) {
        r.xfer = x;
        r.blk = opt.block ? opt.block : x;
        fill_expected(&r);
        if (rank == 0) {
            printf("Number of processors = %d\n", nprocs);
            printf("Transfer Buffer Size: %zu bytes, File size: %.2f MB\n", x, (double)total * nprocs / MIB);
            printf("      # of files: 1, # of datasets: %d, dataset size: %.2f MB\n", opt.datasets,
                   (double)opt.bytes_per_proc * nprocs / MIB);
            fflush(stdout);
        }
        for (int a = 0; a < API_COUNT; a++) {
            if (!(opt.apis & (1u << a)))
                continue;
            r.api = (enum api_id)a;
            run_api(&r);
        }
        if (x > SIZE_MAX / 2)
            break;
    }
    free(r.wbuf);
    free(r.rbuf);
    MPI_Finalize();
    return 0;
}
