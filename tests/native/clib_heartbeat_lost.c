/* Test-only program for tests/test_clib.py (built by the test with mpicc against build/native's libh5flow):
 * a producer whose heartbeat file is taken from under it (removed or replaced) while it computes.
 *
 *     clib_heartbeat_lost XML SYNC_DIR step|close
 *
 * Publishes step 0, says SYNC_DIR/ready (rank 0) and waits for SYNC_DIR/go, then either ends step 1 (rank 0
 * says SYNC_DIR/ending first) or closes at once. Each rank prints "rank R end_step rc=C published=P: MSG" / "rank R close rc=C" on stdout.
 */
#define _POSIX_C_SOURCE 200809L
#include <h5flow.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void wait_for(const char *path)
{
    struct timespec nap = {0, 20 * 1000 * 1000};
    for (int i = 0; access(path, F_OK) != 0; i++) {
        if (i > 3000) {
            fprintf(stderr, "%s did not appear within 60 s\n", path);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        nanosleep(&nap, NULL);
    }
}

static void put_step(h5flow_writer *w, int rank, int size, int64_t step)
{
    uint64_t g[1] = {2 * (uint64_t)size}, o[1] = {2 * (uint64_t)rank}, c[1] = {2};
    double v[2] = {(double)step, (double)rank};
    if (h5flow_begin_step(w, step, (double)step) || h5flow_write(w, "x", H5FLOW_FLOAT64, 1, g, o, c, v)) {
        fprintf(stderr, "rank %d: step %lld: %s\n", rank, (long long)step, h5flow_errmsg(w));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, published = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    h5flow_writer *w = NULL;
    if (argc != 4 || h5flow_writer_open(MPI_COMM_WORLD, argv[1], &w) != H5FLOW_OK) {
        fprintf(stderr, "usage: clib_heartbeat_lost XML SYNC_DIR step|close (%s)\n", h5flow_errmsg(w));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    put_step(w, rank, size, 0);
    if (h5flow_end_step(w, &published) != H5FLOW_OK || published != 1) {
        fprintf(stderr, "rank %d: step 0: %s\n", rank, h5flow_errmsg(w));
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char ready[4096], go[4096];
    snprintf(ready, sizeof ready, "%s/ready", argv[2]);
    snprintf(go, sizeof go, "%s/go", argv[2]);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        fclose(fopen(ready, "w"));
    wait_for(go); /* the "computation": the test takes the heartbeat file meanwhile */
    if (strcmp(argv[3], "step") == 0) {
        put_step(w, rank, size, 1);
        if (rank == 0) {
            char ending[4096];
            snprintf(ending, sizeof ending, "%s/ending", argv[2]);
            fclose(fopen(ending, "w"));
        }
        int rc = h5flow_end_step(w, &published);
        printf("rank %d end_step rc=%d published=%d: %s\n", rank, rc, published, h5flow_errmsg(w));
        fflush(stdout);
    }
    int rc = h5flow_writer_close(w);
    printf("rank %d close rc=%d\n", rank, rc);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
