/* h5flow-trace-bench: what `h5flow bench trace` times, in C so that the numbers are HDF5's and the connector's.
 *
 *   h5flow-trace-bench bulk FILE TOTAL_MIB WRITE_MIB   one float64 dataset of TOTAL_MIB written in WRITE_MIB
 *                                                      hyperslabs, then the file closed; timed: writes + close
 *   h5flow-trace-bench meta FILE COUNT                 COUNT times: H5Gcreate2 + H5Gclose + H5Lexists
 *                                                      (3 VOL callbacks); timed: the loop
 * Prints "RESULT mode=... seconds=... cpu=... calls=..." (seconds: wall time of the timed part; cpu: the
 * process's CPU time in it; calls: write calls (bulk) or VOL callbacks (meta) in it). */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef CLOCK_PROCESS_CPUTIME_ID
#error "needs CLOCK_PROCESS_CPUTIME_ID"
#endif

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* wall time, and the process's CPU time (user + system: what a loaded machine's waiting does not inflate) */
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
static double cpu(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }

#define CHECK(x)                                                                                                  \
    do {                                                                                                          \
        if ((x) < 0) {                                                                                            \
            fprintf(stderr, "h5flow-trace-bench: %s failed\n", #x);                                               \
            return 1;                                                                                             \
        }                                                                                                         \
    } while (0)

static int bulk(const char *path, unsigned long total_mib, unsigned long write_mib)
{
    if (write_mib == 0 || total_mib % write_mib) {
        fprintf(stderr, "h5flow-trace-bench: TOTAL_MIB must be a multiple of WRITE_MIB\n");
        return 2;
    }
    hsize_t per = (hsize_t)write_mib * (1u << 20) / 8, n = (hsize_t)total_mib * (1u << 20) / 8;
    double *buf = malloc(per * sizeof *buf);
    if (!buf)
        return 1;
    for (hsize_t i = 0; i < per; i++)
        buf[i] = (double)i;
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(f);
    hid_t space = H5Screate_simple(1, &n, NULL);
    hid_t d = H5Dcreate2(f, "d", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(d);
    hid_t mem = H5Screate_simple(1, &per, NULL);
    double t0 = now(), c0 = cpu();
    for (hsize_t off = 0; off < n; off += per) {
        CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, &off, NULL, &per, NULL));
        CHECK(H5Dwrite(d, H5T_NATIVE_DOUBLE, mem, space, H5P_DEFAULT, buf));
    }
    CHECK(H5Dclose(d));
    CHECK(H5Fclose(f));
    double t = now() - t0, c = cpu() - c0;
    H5Sclose(mem);
    H5Sclose(space);
    free(buf);
    printf("RESULT mode=bulk seconds=%.6f cpu=%.6f calls=%llu bytes=%llu\n", t, c, (unsigned long long)(n / per),
           (unsigned long long)n * 8);
    return 0;
}

static int meta(const char *path, unsigned long count)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(f);
    char name[32];
    double t0 = now(), c0 = cpu();
    for (unsigned long i = 0; i < count; i++) {
        snprintf(name, sizeof name, "g%lu", i);
        hid_t g = H5Gcreate2(f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        CHECK(g);
        CHECK(H5Gclose(g));
        if (H5Lexists(f, name, H5P_DEFAULT) <= 0) {
            fprintf(stderr, "h5flow-trace-bench: group %s missing after its creation\n", name);
            return 1;
        }
    }
    double t = now() - t0, c = cpu() - c0;
    CHECK(H5Fclose(f));
    printf("RESULT mode=meta seconds=%.6f cpu=%.6f calls=%lu bytes=0\n", t, c, 3 * count);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "bulk"))
        return bulk(argv[2], strtoul(argv[3], NULL, 10), strtoul(argv[4], NULL, 10));
    if (argc == 4 && !strcmp(argv[1], "meta"))
        return meta(argv[2], strtoul(argv[3], NULL, 10));
    fprintf(stderr, "usage: h5flow-trace-bench bulk FILE TOTAL_MIB WRITE_MIB | meta FILE COUNT\n");
    return 2;
}
