/* h5flow-async-loop: the compute + write loop of `h5flow bench async`, timed step by step in C.
 *
 * The loop is the one of the Python kernel (src/h5flow/benchmarks/async_kernel.py, write_loop): a file with one
 * float64 dataset of STEPS rows of STEP_BYTES each; per step a busy-wait compute of COMPUTE_S seconds (CPU work,
 * never a sleep), then one row written the way h5py writes `d[s] = row`: the file space from H5Dget_space with a
 * one-row hyperslab selected, a fresh memory space, H5Dwrite, and both spaces closed right after the write. The
 * stack is whatever HDF5_VOL_CONNECTOR selects (native when unset).
 *
 * --mode explicit writes the rows with HDF5's event-set API instead, as vol-async's documentation recommends: one
 * event set for the file, H5Dwrite_async of a step's row, and two row buffers used in turn. Step k computes into
 * buffer k % 2, then H5ESwait waits for the write of step k - 1 (which ran behind step k's compute and read the
 * other buffer), then H5Dwrite_async queues step k's row. So a write is waited for after the compute of the next
 * step, and a buffer is filled again only after the write that read it has completed (as HDF5's contract for
 * asynchronous calls asks: a connector may write from the program's buffer until the wait). With HDF5's native
 * connector the *_async calls run at the call and the wait returns at once.
 *
 * Timed per step (wall and the calling thread's CPU time): from H5Dget_space to the last H5Sclose (explicit mode:
 * from the H5ESwait before it, so that its blocking time counts as the write's); the two closes also on their
 * own; the wait also on its own. Then the closing of the file (explicit: from the wait for the last write), which
 * waits for whatever a connector still holds.
 * Before the loop, the floor: a memcpy of one row (the least a write that copies its buffer costs).
 * After the timed part the file is opened again through the same stack and every row is compared with what was
 * written (each row carries its step number in its first element), unless --no-verify.
 *
 * Prints one JSON line; medians are over the steps after the first (the first pays for the file's first
 * allocation and a connector's start; it is reported on its own as step0_ms).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROG "h5flow-async-loop"
#define FLOOR_SAMPLES 64

struct options {
    const char *path;
    long steps;
    unsigned long long step_bytes;
    double compute_s;
    int verify;
    int explicit_mode; /* --mode explicit: H5Dwrite_async + H5ESwait on two alternating buffers */
};

/* what the loop measured; times in seconds */
struct results {
    double total;
    double in_write;
    double close;
    double floor;
    double step0;
    double med_write;
    double med_cpu;
    double med_post;
    double med_wait;
    char connector[64];
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " PROG " FILE [--steps N] [--step-bytes B] [--compute-s S] [--mode implicit|explicit]\n"
            "                         [--no-verify]\n"
            "\n"
            "Creates FILE with one float64 dataset of N rows of B bytes and, N times, computes for S seconds\n"
            "(busy CPU work) then writes one row the way h5py does (H5Dget_space + hyperslab, a fresh memory\n"
            "space, H5Dwrite, both spaces closed). The VOL stack is the one HDF5_VOL_CONNECTOR selects.\n"
            "Then reads FILE back through the same stack and checks every row (--no-verify: skip that).\n"
            "\n"
            "  --steps N        rows written, one per step (default 20)\n"
            "  --step-bytes B   bytes per row, a multiple of 8 (default 8388608)\n"
            "  --compute-s S    compute before each write, in seconds (default 0.05)\n"
            "  --mode M         implicit (default): plain H5Dwrite, as h5py; explicit: an event set, two row\n"
            "                   buffers in turn, H5Dwrite_async of step k, and H5ESwait for it after the compute\n"
            "                   of step k+1, before the write of step k+1 (a buffer is refilled only after the\n"
            "                   write that read it completed)\n"
            "  --no-verify      do not read the file back\n"
            "  --help           this text\n"
            "\n"
            "Prints one JSON line: total_s (file create to file closed), in_write_s (sum of the steps' write\n"
            "times), close_s (the file's close; explicit: with the wait for the last write), compute_s (S x N),\n"
            "memcpy_floor_ms (median memcpy of one row), med_write_ms and med_cpu_ms (median wall and CPU time\n"
            "of a step's write, steps after the first; explicit: the H5ESwait before it included), post_ms\n"
            "(median time of the two H5Sclose after a write), wait_ms (explicit: median time blocked in the\n"
            "H5ESwait of a step; implicit: 0), step0_ms (the first step's write), steps, step_bytes, mode,\n"
            "connector (the connector the file was opened through), verified.\n");
}

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double wall_now(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

static double cpu_now(void)
{
    return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a;
    double y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median of v[0..n-1] (sorts v); n >= 1 */
static double median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, compare_doubles);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* the steady-state median: over the steps after the first, or the only step */
static double steady_median(double *v, long n)
{
    return n > 1 ? median(v + 1, n - 1) : v[0];
}

/* CPU work for `seconds` of wall time, as a simulation step would do; never sleeps */
static void compute(double seconds)
{
    double end = wall_now() + seconds;
    volatile double x = 1.0;
    while (wall_now() < end) {
        for (int k = 0; k < 1000; k++)
            x = x * 1.0000001;
    }
}

static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"steps", required_argument, NULL, 's'},     {"step-bytes", required_argument, NULL, 'b'},
        {"compute-s", required_argument, NULL, 'c'}, {"no-verify", no_argument, NULL, 'n'},
        {"mode", required_argument, NULL, 'm'},      {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (struct options){.steps = 20, .step_bytes = 8ull << 20, .compute_s = 0.05, .verify = 1};
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        errno = 0;
        switch (c) {
        case 's':
            o->steps = strtol(optarg, &end, 10);
            if (*end || errno || o->steps < 1) {
                fprintf(stderr, PROG ": --steps wants a whole number >= 1, not '%s'\n", optarg);
                return 2;
            }
            break;
        case 'b':
            o->step_bytes = strtoull(optarg, &end, 10);
            if (*end || errno || optarg[0] == '-' || o->step_bytes < 8 || o->step_bytes % 8) {
                fprintf(stderr, PROG ": --step-bytes wants a multiple of 8, at least 8, not '%s'\n", optarg);
                return 2;
            }
            break;
        case 'c':
            o->compute_s = strtod(optarg, &end);
            if (*end || errno || !(o->compute_s >= 0)) {
                fprintf(stderr, PROG ": --compute-s wants seconds >= 0, not '%s'\n", optarg);
                return 2;
            }
            break;
        case 'n':
            o->verify = 0;
            break;
        case 'm':
            if (strcmp(optarg, "implicit") && strcmp(optarg, "explicit")) {
                fprintf(stderr, PROG ": --mode wants implicit or explicit, not '%s'\n", optarg);
                return 2;
            }
            o->explicit_mode = !strcmp(optarg, "explicit");
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, PROG ": one FILE expected (%d given); --help for the usage\n", argc - optind);
        return 2;
    }
    o->path = argv[optind];
    return 0;
}

#define CHECK(call)                                                                                               \
    do {                                                                                                          \
        if ((call) < 0) {                                                                                         \
            fprintf(stderr, PROG ": %s failed (%s:%d)\n", #call, __FILE__, __LINE__);                            \
            goto fail;                                                                                            \
        }                                                                                                         \
    } while (0)

/* the median time of a memcpy of one row, in the calling thread's CPU time */
static double memcpy_floor(const double *row, size_t bytes, long steps)
{
    /* called through a volatile pointer: the copy into a buffer that is never read must not be optimised away */
    void *(*volatile copy)(void *, const void *, size_t) = memcpy;
    double samples[FLOOR_SAMPLES];
    long n = steps < FLOOR_SAMPLES ? steps : FLOOR_SAMPLES;
    double *dst = malloc(bytes);
    if (!dst)
        return -1.0;
    memset(dst, 1, bytes);
    for (long i = 0; i < n; i++) {
        double t = cpu_now();
        copy(dst, row, bytes);
        samples[i] = cpu_now() - t;
    }
    free(dst);
    return median(samples, n);
}

/* one step's write, as h5py makes `d[step] = row`: both spaces made for the write and closed right after it;
 * es >= 0: H5Dwrite_async into that event set */
static int write_row(hid_t dset, hsize_t step, hsize_t cols, const double *row, hid_t es, double *post_s)
{
    hsize_t start[2] = {step, 0};
    hsize_t count[2] = {1, cols};
    hid_t fspace = H5Dget_space(dset);
    CHECK(fspace);
    CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL));
    hid_t mspace = H5Screate_simple(1, &cols, NULL);
    CHECK(mspace);
    if (es >= 0)
        CHECK(H5Dwrite_async(dset, H5T_NATIVE_DOUBLE, mspace, fspace, H5P_DEFAULT, row, es));
    else
        CHECK(H5Dwrite(dset, H5T_NATIVE_DOUBLE, mspace, fspace, H5P_DEFAULT, row));
    double t = wall_now();
    CHECK(H5Sclose(mspace));
    CHECK(H5Sclose(fspace));
    *post_s = wall_now() - t;
    return 0;
fail:
    return -1;
}

/* the name of the connector `obj` goes through (the top of its stack) */
static void connector_name(hid_t obj, char *name, size_t size)
{
    if (H5VLget_connector_name(obj, name, size) < 0)
        snprintf(name, size, "unknown");
    for (char *p = name; *p; p++) {
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = '?';
    }
}

/* H5ESwait for everything in es; *blocked: the time it took. -1 (reported) when an operation in it failed */
static int wait_all(hid_t es, double *blocked)
{
    size_t pending = 0, nerr = 0, cleared = 0;
    hbool_t failed = 0;
    double t = wall_now();
    herr_t rc = H5ESwait(es, H5ES_WAIT_FOREVER, &pending, &failed);
    *blocked = wall_now() - t;
    if (rc >= 0 && !failed && !pending)
        return 0;
    fprintf(stderr, PROG ": H5ESwait %s (%zu operation(s) still pending)\n",
            rc < 0 ? "failed" : failed ? "reports a failed operation" : "returned early", pending);
    H5ES_err_info_t info;
    if (failed && H5ESget_err_count(es, &nerr) >= 0 && nerr > 0 && H5ESget_err_info(es, 1, &info, &cleared) >= 0) {
        fprintf(stderr, PROG ": %s failed:\n", info.api_name);
        H5Eprint2(info.err_stack_id, stderr);
        H5ESfree_err_info(1, &info);
    }
    return -1;
}

/* the timed part: create, STEPS x (compute, write), close */
static int run_loop(const struct options *o, double *row, struct results *r)
{
    hsize_t cols = (hsize_t)(o->step_bytes / 8);
    hsize_t dims[2] = {(hsize_t)o->steps, cols};
    double *wall = calloc((size_t)o->steps, sizeof *wall);
    double *cpu = calloc((size_t)o->steps, sizeof *cpu);
    double *post = calloc((size_t)o->steps, sizeof *post);
    double *waits = calloc((size_t)o->steps, sizeof *waits);
    /* explicit mode: two row buffers in turn, the second a copy of the first */
    double *bufs[2] = {row, o->explicit_mode ? malloc(o->step_bytes) : row};
    hid_t file = H5I_INVALID_HID, space = H5I_INVALID_HID, dset = H5I_INVALID_HID, es = H5I_INVALID_HID;
    int rc = -1;
    if (!wall || !cpu || !post || !waits || !bufs[1]) {
        fprintf(stderr, PROG ": out of memory for %ld steps\n", o->steps);
        goto fail;
    }
    if (o->explicit_mode) {
        memcpy(bufs[1], row, o->step_bytes);
        es = H5EScreate();
        CHECK(es);
    }
    double t0 = wall_now();
    file = H5Fcreate(o->path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(file);
    connector_name(file, r->connector, sizeof r->connector);
    space = H5Screate_simple(2, dims, NULL);
    CHECK(space);
    dset = H5Dcreate2(file, "steps", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(dset);
    for (long s = 0; s < o->steps; s++) {
        double *buf = bufs[s % 2]; /* explicit: its last write (step s - 2) was waited for in step s - 1 */
        compute(o->compute_s);
        buf[0] = (double)s; /* each row carries its step: a row stored in the wrong place fails the check */
        double a = wall_now();
        double ac = cpu_now();
        if (es >= 0 && wait_all(es, &waits[s]) < 0) /* the write of step s - 1 */
            goto fail;
        CHECK(write_row(dset, (hsize_t)s, cols, buf, es, &post[s]));
        wall[s] = wall_now() - a;
        cpu[s] = cpu_now() - ac;
        r->in_write += wall[s];
    }
    double a = wall_now(), last_wait = 0;
    if (es >= 0 && wait_all(es, &last_wait) < 0)
        goto fail;
    CHECK(H5Dclose(dset));
    dset = H5I_INVALID_HID;
    CHECK(H5Sclose(space));
    space = H5I_INVALID_HID;
    CHECK(H5Fclose(file));
    file = H5I_INVALID_HID;
    r->close = wall_now() - a;
    r->total = wall_now() - t0;
    r->step0 = wall[0];
    r->med_write = steady_median(wall, o->steps);
    r->med_cpu = steady_median(cpu, o->steps);
    r->med_post = steady_median(post, o->steps);
    r->med_wait = steady_median(waits, o->steps);
    if (es >= 0)
        CHECK(H5ESclose(es));
    es = H5I_INVALID_HID;
    rc = 0;
fail: /* also the way out on success: every handle is closed and invalid by then */
    if (es >= 0) { /* nothing may still read the buffers when they are freed */
        size_t pending = 0;
        hbool_t failed = 0;
        H5ESwait(es, H5ES_WAIT_FOREVER, &pending, &failed);
    }
    if (dset >= 0)
        H5Dclose(dset);
    if (space >= 0)
        H5Sclose(space);
    if (file >= 0)
        H5Fclose(file);
    if (es >= 0)
        H5ESclose(es);
    free(wall);
    free(cpu);
    free(post);
    free(waits);
    if (bufs[1] != row)
        free(bufs[1]);
    return rc;
}

/* reads FILE back through the same stack: row s must be s, then the pattern of the row buffer */
static int verify(const struct options *o, const double *row)
{
    hsize_t cols = (hsize_t)(o->step_bytes / 8);
    double *got = malloc(o->step_bytes);
    hid_t file = H5I_INVALID_HID, dset = H5I_INVALID_HID, fspace = H5I_INVALID_HID, mspace = H5I_INVALID_HID;
    int rc = -1;
    if (!got) {
        fprintf(stderr, PROG ": out of memory for the read-back\n");
        return -1;
    }
    file = H5Fopen(o->path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(file);
    dset = H5Dopen2(file, "steps", H5P_DEFAULT);
    CHECK(dset);
    fspace = H5Dget_space(dset);
    CHECK(fspace);
    mspace = H5Screate_simple(1, &cols, NULL);
    CHECK(mspace);
    for (long s = 0; s < o->steps; s++) {
        hsize_t start[2] = {(hsize_t)s, 0};
        hsize_t count[2] = {1, cols};
        CHECK(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL));
        CHECK(H5Dread(dset, H5T_NATIVE_DOUBLE, mspace, fspace, H5P_DEFAULT, got));
        if (got[0] != (double)s || memcmp(got + 1, row + 1, (size_t)(cols - 1) * sizeof *got) != 0) {
            fprintf(stderr, PROG ": row %ld of %s does not hold what was written to it\n", s, o->path);
            goto fail;
        }
    }
    H5Sclose(mspace);
    H5Sclose(fspace);
    H5Dclose(dset);
    mspace = fspace = dset = H5I_INVALID_HID;
    CHECK(H5Fclose(file));
    file = H5I_INVALID_HID;
    rc = 0;
fail: /* also the way out on success */
    if (mspace >= 0)
        H5Sclose(mspace);
    if (fspace >= 0)
        H5Sclose(fspace);
    if (dset >= 0)
        H5Dclose(dset);
    if (file >= 0)
        H5Fclose(file);
    free(got);
    return rc;
}

static void print_json(const struct options *o, const struct results *r)
{
    printf("{\"total_s\": %.6f, \"in_write_s\": %.6f, \"close_s\": %.6f, \"compute_s\": %.6f, "
           "\"memcpy_floor_ms\": %.4f, \"med_write_ms\": %.4f, \"med_cpu_ms\": %.4f, \"post_ms\": %.4f, "
           "\"wait_ms\": %.4f, \"step0_ms\": %.4f, \"steps\": %ld, \"step_bytes\": %llu, \"mode\": \"%s\", "
           "\"connector\": \"%s\", \"verified\": %s}\n",
           r->total, r->in_write, r->close, o->compute_s * (double)o->steps, r->floor * 1e3, r->med_write * 1e3,
           r->med_cpu * 1e3, r->med_post * 1e3, r->med_wait * 1e3, r->step0 * 1e3, o->steps, o->step_bytes,
           o->explicit_mode ? "explicit" : "implicit", r->connector, o->verify ? "true" : "false");
}

int main(int argc, char **argv)
{
    struct options o;
    int rc = parse_options(argc, argv, &o);
    if (rc)
        return rc;
    hsize_t cols = (hsize_t)(o.step_bytes / 8);
    double *row = malloc(o.step_bytes);
    if (!row) {
        fprintf(stderr, PROG ": cannot allocate a row of %llu bytes\n", o.step_bytes);
        return 1;
    }
    for (hsize_t i = 0; i < cols; i++)
        row[i] = 0.5 * (double)i;
    struct results r = {0};
    r.floor = memcpy_floor(row, o.step_bytes, o.steps);
    if (r.floor < 0) {
        fprintf(stderr, PROG ": cannot allocate the memcpy floor's buffer (%llu bytes)\n", o.step_bytes);
        rc = 1;
    } else if (run_loop(&o, row, &r) < 0) {
        fprintf(stderr, PROG ": the write loop on %s failed (HDF5_VOL_CONNECTOR=%s)\n", o.path,
                getenv("HDF5_VOL_CONNECTOR") ? getenv("HDF5_VOL_CONNECTOR") : "unset: native");
        rc = 1;
    } else if (o.verify && verify(&o, row) < 0) {
        rc = 1;
    } else {
        print_json(&o, &r);
    }
    free(row);
    return rc;
}
