/* Test-only program for tests/test_clib.py (built by the test with mpicc against build/native's libh5flow):
 * two writers in one process keep their own state and messages; 1-D float32 and 3-D int64 arrays.
 *
 *     clib_two_writers STREAM_A STREAM_B      exit 0 when every check held, else the failed check on stderr
 */
#include <h5flow.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "check failed (line %d): %s\n  a: %s\n  b: %s\n", __LINE__, #cond, h5flow_errmsg(a),       \
                    h5flow_errmsg(b));                                                                                 \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                                              \
        }                                                                                                              \
    } while (0)

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    h5flow_writer *a = NULL, *b = NULL;
    CHECK(argc == 3);
    CHECK(h5flow_writer_open(MPI_COMM_WORLD, argv[1], &a) == H5FLOW_OK);
    CHECK(h5flow_writer_open(MPI_COMM_WORLD, argv[2], &b) == H5FLOW_OK);
    uint64_t g1[1] = {5}, o1[1] = {0}, c1[1] = {5}, g3[3] = {2, 2, 2}, o3[3] = {0, 0, 0}, c3[3] = {2, 2, 2};
    float f[5] = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f};
    int64_t v[8] = {-4, -3, -2, -1, 0, 1, 2, 3};
    /* b: a write before begin_step fails on b only */
    CHECK(h5flow_write(b, "x", H5FLOW_FLOAT32, 1, g1, o1, c1, f) == H5FLOW_ERR_ARGUMENT);
    CHECK(strstr(h5flow_errmsg(b), "no step begun; call h5flow_begin_step first") != NULL);
    CHECK(strcmp(h5flow_errmsg(a), "") == 0);
    /* a publishes a step with two arrays while b's step fails on a piece outside its global array */
    CHECK(h5flow_begin_step(a, 7, 1.25) == H5FLOW_OK);
    CHECK(h5flow_begin_step(b, 0, 0.0) == H5FLOW_OK);
    CHECK(h5flow_write(a, "f32", H5FLOW_FLOAT32, 1, g1, o1, c1, f) == H5FLOW_OK);
    uint64_t bad[1] = {3};
    CHECK(h5flow_write(b, "x", H5FLOW_FLOAT32, 1, g1, bad, c1, f) == H5FLOW_ERR_ARGUMENT);
    CHECK(strstr(h5flow_errmsg(b), "axis 0: the piece covers [3, 8) but the global array has 5 there") != NULL);
    CHECK(h5flow_write(a, "i64", H5FLOW_INT64, 3, g3, o3, c3, v) == H5FLOW_OK);
    v[0] = 99; /* copied at write: the published value stays -4 */
    int published = -1;
    CHECK(h5flow_end_step(a, &published) == H5FLOW_OK && published == 1);
    CHECK(strcmp(h5flow_errmsg(a), "") == 0);
    CHECK(h5flow_end_step(b, &published) == H5FLOW_ERR_ARGUMENT && published == 0);
    CHECK(strstr(h5flow_errmsg(b), "step 0 was not published: rank 0: h5flow_write(\"x\"): axis 0") != NULL);
    CHECK(h5flow_begin_step(b, 1, 0.0) == H5FLOW_ERR_STOPPED);
    CHECK(h5flow_begin_step(a, 7, 0.0) == H5FLOW_ERR_ARGUMENT); /* steps increase */
    CHECK(strstr(h5flow_errmsg(a), "steps must be >= 0 and increasing (the last was 7)") != NULL);
    CHECK(h5flow_writer_close(a) == H5FLOW_OK);   /* end of stream */
    CHECK(h5flow_writer_close(b) == H5FLOW_ERR_ARGUMENT); /* no end-of-stream mark after an error */
    MPI_Finalize();
    return 0;
}
