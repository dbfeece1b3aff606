/* Test-only program for tests/test_stream_trust.py (built by the test with mpicc against build/native's
 * libh5flow): what libh5flow refuses instead of publishing.
 *
 *     clib_trust overlap-same STREAM     one rank writes two overlapping pieces of one array: refused at the call
 *     clib_trust overlap-ranks STREAM    (2 ranks) the ranks' pieces overlap: end_step fails on every rank
 *     clib_trust type-change STREAM      (2 ranks) an array's type changes in step 1: refused at the call, and
 *                                        end_step fails on every rank
 *     clib_trust empty STREAM            (2 ranks) "p" has no element on any rank, "x" none on rank 0: both
 *                                        published (p of shape (0,), x of rank 1's 4 values)
 *     clib_trust open STREAM             open the stream; on failure print the message and exit 3
 *
 * Exit 0 when every check held, else the failed check on stderr.
 */
#include <h5flow.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "check failed (line %d): %s\n  message: %s\n", __LINE__, #cond, h5flow_errmsg(w));         \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                                              \
        }                                                                                                              \
    } while (0)

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    h5flow_writer *w = NULL;
    CHECK(argc == 3);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (!strcmp(argv[1], "open")) {
        int rc = h5flow_writer_open(MPI_COMM_WORLD, argv[2], &w);
        if (rc != H5FLOW_OK) {
            if (rank == 0)
                printf("%s\n", h5flow_errmsg(w));
            h5flow_writer_close(w);
            MPI_Finalize();
            return 3;
        }
        CHECK(h5flow_writer_close(w) == H5FLOW_OK);
        MPI_Finalize();
        return 0;
    }
    CHECK(h5flow_writer_open(MPI_COMM_WORLD, argv[2], &w) == H5FLOW_OK);
    double v[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    uint64_t g[1] = {8}, count[1] = {4};
    int published = -1;
    CHECK(h5flow_begin_step(w, 0, 0.0) == H5FLOW_OK);
    if (!strcmp(argv[1], "overlap-same")) {
        uint64_t a[1] = {0}, b[1] = {2};
        CHECK(h5flow_write(w, "x", H5FLOW_FLOAT64, 1, g, a, count, v) == H5FLOW_OK);
        CHECK(h5flow_write(w, "x", H5FLOW_FLOAT64, 1, g, b, count, v) == H5FLOW_ERR_ARGUMENT);
        CHECK(strstr(h5flow_errmsg(w), "already wrote a piece of \"x\" at offset (0) count (4), which overlaps this "
                                       "one at offset (2) count (4)") != NULL);
        uint64_t c[1] = {4};
        CHECK(h5flow_write(w, "y", H5FLOW_FLOAT64, 1, g, b, count, v) == H5FLOW_OK); /* another array: fine */
        CHECK(h5flow_write(w, "x", H5FLOW_FLOAT64, 1, g, c, count, v) == H5FLOW_OK); /* the rest of x: fine */
        CHECK(h5flow_end_step(w, &published) == H5FLOW_ERR_ARGUMENT && published == 0);
    } else if (!strcmp(argv[1], "overlap-ranks")) {
        uint64_t off[1] = {(uint64_t)rank * 3}; /* [0, 4) and [3, 7): element 3 twice */
        CHECK(h5flow_write(w, "x", H5FLOW_FLOAT64, 1, g, off, count, v) == H5FLOW_OK);
        CHECK(h5flow_end_step(w, &published) == H5FLOW_ERR_ARGUMENT && published == 0);
        CHECK(strstr(h5flow_errmsg(w), "step 0: array \"x\": the piece of rank 0 at offset (0) count (4) and the piece "
                                       "of rank 1 at offset (3) count (4) overlap") != NULL);
    } else if (!strcmp(argv[1], "type-change")) {
        uint64_t off[1] = {(uint64_t)rank * 4};
        float f[4] = {0, 1, 2, 3};
        CHECK(h5flow_write(w, "x", H5FLOW_FLOAT64, 1, g, off, count, v) == H5FLOW_OK);
        CHECK(h5flow_end_step(w, &published) == H5FLOW_OK && published == 1);
        CHECK(h5flow_begin_step(w, 1, 1.0) == H5FLOW_OK);
        if (rank == 0) { /* rank 1 writes no piece of x in step 1: it learns the error at end_step */
            uint64_t all[1] = {8};
            CHECK(h5flow_write(w, "x", H5FLOW_FLOAT32, 1, g, off, all, f) == H5FLOW_ERR_ARGUMENT);
            CHECK(strstr(h5flow_errmsg(w), "h5flow_write(\"x\") in step 1: array \"x\" was <f8 in earlier steps and is "
                                           "<f4 now") != NULL);
        }
        CHECK(h5flow_end_step(w, &published) == H5FLOW_ERR_ARGUMENT && published == 0);
        CHECK(strstr(h5flow_errmsg(w), "rank 0: h5flow_write(\"x\") in step 1: array \"x\" was <f8") != NULL);
    } else if (!strcmp(argv[1], "empty")) {
        uint64_t none[1] = {0}, zero[1] = {0}, four[1] = {4}, off[1] = {(uint64_t)rank * 2};
        CHECK(h5flow_write(w, "p", H5FLOW_INT32, 1, zero, zero, none, NULL) == H5FLOW_OK);
        CHECK(h5flow_write(w, "p", H5FLOW_INT32, 1, zero, zero, none, NULL) == H5FLOW_OK); /* empty twice: fine */
        if (rank == 1)
            CHECK(h5flow_write(w, "x", H5FLOW_FLOAT64, 1, four, zero, four, v) == H5FLOW_OK);
        else
            CHECK(h5flow_write(w, "x", H5FLOW_FLOAT64, 1, four, off, none, NULL) == H5FLOW_OK);
        CHECK(h5flow_end_step(w, &published) == H5FLOW_OK && published == 1);
    } else {
        CHECK(!"unknown mode");
    }
    h5flow_writer_close(w);
    MPI_Finalize();
    return 0;
}
