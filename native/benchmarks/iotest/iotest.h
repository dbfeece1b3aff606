/* h5flow-iotest: an hdf5-iotest-compatible kernel driven case by case from a case file.
 *
 * The Python driver (src/h5flow/benchmarks/iotest/) parses the hdf5-iotest .ini, expands the sweep and
 * writes one case per line ("key=value" tokens, `file=` last and running to the end of the line). This
 * program runs every case under MPI and prints, on rank 0, one line per case:
 *   RESULT index=N wall=.. fsize=.. write-phase-min=.. ... read-max=.. checked=..
 * Exit status: 0 all cases ran and verified; 2 bad case file or HDF5 failure; 3 data read back differs. */
#ifndef H5FLOW_IOTEST_H
#define H5FLOW_IOTEST_H

#include <hdf5.h>
#include <limits.h>
#include <mpi.h>

#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

typedef enum { IOT_OP_IOTEST, IOT_OP_FILECREATE, IOT_OP_OBJSCAN } iot_op;

typedef struct {
    int index;
    iot_op op;
    unsigned steps, arrays;
    unsigned long rows, cols;
    unsigned prows, pcols;
    int strong;          /* 0 weak, 1 strong scaling */
    int rank;            /* dataset rank 2, 3, 4 */
    int slow_array;      /* slowest dimension: 0 step, 1 array */
    int chunked;         /* layout: 0 contiguous, 1 chunked */
    int fill_alloc;      /* fill values: 1 H5D_FILL_TIME_ALLOC, 0 H5D_FILL_TIME_NEVER */
    hsize_t align_inc, align_thr, mblk;
    char fmt_low[16], fmt_high[16];
    char io[16];         /* independent, collective (parallel); posix, core, mpi-io-uni (one rank) */
    char vfd[16];        /* mpio, subfiling: the parallel storage path */
    int split;           /* H5Pset_fapl_split: -m.h5 metadata + -r.h5 raw data files */
    int gzip;            /* deflate level on chunked layout, -1 off */
    int szip_mask, szip_ppb; /* szip on chunked layout, mask 0 off */
    long delay_us;       /* emulated compute between steps */
    long seed, read_seed;/* data pattern written / expected on read (differ only to test verification) */
    unsigned count;      /* filecreate / objscan: number of files / objects */
    int keep;            /* keep the file after the case */
    char file[PATH_MAX];
} iot_case;

typedef struct {
    double wall;                       /* max over ranks */
    double fsize;
    double min[5], max[5];             /* write-phase, create, write, read-phase, read */
    unsigned long long checked;        /* values verified (all ranks) or objects counted */
} iot_result;

typedef struct {
    MPI_Comm comm;
    int rank, size;
} iot_env;

/* case.c */
int iot_parse_case(char *line, int lineno, iot_case *c, char *err, size_t errlen);

/* kernel.c: returns 0 ok, 3 verification failure; HDF5 failures abort the job */
int iot_run_iotest(const iot_env *env, const iot_case *c, iot_result *r);

/* meta.c */
int iot_run_filecreate(const iot_env *env, const iot_case *c, iot_result *r);
int iot_run_objscan(const iot_env *env, const iot_case *c, iot_result *r);

/* shared helpers (kernel.c) */
void iot_fail(const iot_env *env, const iot_case *c, const char *what, const char *where, int line);
void iot_remove_files(const char *path);
#define IOT_CHECK(expr, env, c)                                                                   \
    do {                                                                                          \
        if ((expr) < 0)                                                                           \
            iot_fail((env), (c), #expr, __FILE__, __LINE__);                                      \
    } while (0)

#endif
