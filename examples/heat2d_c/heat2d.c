/* A user's own C simulation streamed with libh5flow: the explicit 2-D heat equation of
 * examples/heat2d/heat2d.py (same grid, same physics, same arithmetic), rows split over MPI ranks.
 *
 *     mpiexec -n 2 build/native/bin/h5flow-heat2d /dev/shm/heat --steps 20             (stream name)
 *     mpiexec -n 2 build/native/bin/h5flow-heat2d heat.xml --steps 20 --shape 64 48    (or an XML file)
 *     mpiexec -n 1 python examples/heat2d/consume.py /dev/shm/heat                     (any Python consumer)
 *
 * Each step every rank publishes its rows of "temperature" (float64, global shape NY x NX).
 */
#include <h5flow.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALPHA 0.2 /* diffusion number (stable below 0.25) */

static int fail(h5flow_writer *w, const char *what)
{
    fprintf(stderr, "heat2d: %s: %s\n", what, h5flow_errmsg(w));
    h5flow_writer_close(w);
    MPI_Finalize();
    return 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long steps = 20, ny = 64, nx = 48;
    const char *stream = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--shape") && i + 2 < argc) {
            ny = strtol(argv[++i], NULL, 10);
            nx = strtol(argv[++i], NULL, 10);
        } else
            stream = argv[i];
    }
    if (!stream || steps < 0 || ny < size || nx < 3) {
        if (rank == 0)
            fprintf(stderr, "usage: heat2d STREAM|XML [--steps N>=0] [--shape NY>=ranks NX>=3]\n");
        MPI_Finalize();
        return 2;
    }
    /* own rows [y0, y1) plus a halo row above and below */
    long q = ny / size, r = ny % size;
    long y0 = rank * q + (rank < r ? rank : r), rows = q + (rank < r);
    double *t = calloc((size_t)((rows + 2) * nx), sizeof *t), *next = calloc((size_t)(rows * nx), sizeof *t);
    for (long j = 0; j < rows; j++) /* a hot square in a cold plate */
        for (long i = 0; i < nx; i++)
            if (y0 + j >= ny / 4 && y0 + j < 3 * ny / 4 && i >= nx / 4 && i < 3 * nx / 4)
                t[(j + 1) * nx + i] = 100.0;
    int up = rank ? rank - 1 : MPI_PROC_NULL, down = rank + 1 < size ? rank + 1 : MPI_PROC_NULL;

    h5flow_writer *w;
    if (h5flow_writer_open(MPI_COMM_WORLD, stream, &w) != H5FLOW_OK)
        return fail(w, "opening the stream");
    uint64_t gdims[2] = {(uint64_t)ny, (uint64_t)nx}, off[2] = {(uint64_t)y0, 0}, cnt[2] = {(uint64_t)rows,
                                                                                         (uint64_t)nx};
    for (long step = 0; step < steps; step++) {
        MPI_Sendrecv(t + nx, (int)nx, MPI_DOUBLE, up, 0, t + (rows + 1) * nx, (int)nx, MPI_DOUBLE, down, 0,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE); /* halo exchange */
        MPI_Sendrecv(t + rows * nx, (int)nx, MPI_DOUBLE, down, 0, t, (int)nx, MPI_DOUBLE, up, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        if (rank == 0)
            memset(t, 0, (size_t)nx * sizeof *t);
        if (rank == size - 1)
            memset(t + (rows + 1) * nx, 0, (size_t)nx * sizeof *t);
        for (long j = 1; j <= rows; j++) { /* fixed 0 at the x edges: columns 0 and nx-1 keep their value */
            const double *c = t + j * nx;
            double *n = next + (j - 1) * nx;
            n[0] = c[0];
            n[nx - 1] = c[nx - 1];
            for (long i = 1; i < nx - 1; i++)
                n[i] = c[i] + ALPHA * (c[i - nx] + c[i + nx] + c[i - 1] + c[i + 1] - 4.0 * c[i]);
        }
        memcpy(t + nx, next, (size_t)(rows * nx) * sizeof *t);
        int published;
        if (h5flow_begin_step(w, step, (double)step * ALPHA) != H5FLOW_OK ||
            h5flow_write(w, "temperature", H5FLOW_FLOAT64, 2, gdims, off, cnt, t + nx) != H5FLOW_OK ||
            h5flow_end_step(w, &published) != H5FLOW_OK)
            return fail(w, "publishing a step");
    }
    int rc = h5flow_writer_close(w);
    free(t);
    free(next);
    MPI_Finalize();
    return rc == H5FLOW_OK ? 0 : 1;
}
