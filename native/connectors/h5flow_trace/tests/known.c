/* A known HDF5 program for h5flow_trace's round-trip test (tests/test_trace.py): every call it makes and what
 * each moves is fixed, so the trace it leaves can be checked row by row. Also the connector's sanitizer test.
 *
 *   file_create; group_create /g; dataset_create /g/d (float32 100x10, chunks 10x10, fill never, alloc early);
 *   dataset_write of 2 hyperslab blocks (rows 0-9 and 20-29) from float64 memory (conversion);
 *   attr_create /g/d/@units + attr_write (str(8)); dataset_read of all as float32 (no conversion);
 *   closes; file_open (libver v110..v114) + dataset_open + attr_open by name (g/d, units) + attr_read +
 *   attr_close + dataset_read of 5 points; close.
 * Exits nonzero when any call fails or a value read back differs from what was written. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(x)                                                                                                  \
    do {                                                                                                          \
        if ((x) < 0) {                                                                                            \
            fprintf(stderr, "known: %s failed (line %d)\n", #x, __LINE__);                                        \
            return 1;                                                                                             \
        }                                                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "known.h5";
    static double wbuf[20][10];
    static float rbuf[100][10];
    for (int i = 0; i < 20; i++)
        for (int j = 0; j < 10; j++)
            wbuf[i][j] = i * 10 + j + 0.5;

    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(f);
    hid_t g = H5Gcreate2(f, "g", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(g);
    hsize_t dims[2] = {100, 10}, chunk[2] = {10, 10};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    CHECK(H5Pset_chunk(dcpl, 2, chunk));
    CHECK(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER));
    CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
    hid_t d = H5Dcreate2(g, "d", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(d);
    hsize_t start[2] = {0, 0}, stride[2] = {20, 1}, count[2] = {2, 1}, block[2] = {10, 10};
    CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, start, stride, count, block));
    hsize_t mdims[2] = {20, 10};
    hid_t mspace = H5Screate_simple(2, mdims, NULL);
    CHECK(H5Dwrite(d, H5T_NATIVE_DOUBLE, mspace, space, H5P_DEFAULT, wbuf));

    hid_t aspace = H5Screate(H5S_SCALAR);
    hid_t str = H5Tcopy(H5T_C_S1);
    CHECK(H5Tset_size(str, 8));
    hid_t a = H5Acreate2(d, "units", str, aspace, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(a);
    CHECK(H5Awrite(a, str, "kelvin\0\0"));
    CHECK(H5Aclose(a));

    CHECK(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, rbuf));
    for (int i = 0; i < 20; i++)
        for (int j = 0; j < 10; j++) {
            int row = i < 10 ? i : i + 10;
            if (rbuf[row][j] != (float)wbuf[i][j]) {
                fprintf(stderr, "known: [%d][%d] read %g, wrote %g\n", row, j, rbuf[row][j], wbuf[i][j]);
                return 1;
            }
        }
    CHECK(H5Dclose(d));
    CHECK(H5Gclose(g));
    CHECK(H5Fclose(f));

    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    CHECK(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V114));
    f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    CHECK(f);
    d = H5Dopen2(f, "/g/d", H5P_DEFAULT);
    CHECK(d);
    hid_t a2 = H5Aopen_by_name(f, "g/d", "units", H5P_DEFAULT, H5P_DEFAULT);
    CHECK(a2);
    char units[9] = "";
    CHECK(H5Aread(a2, str, units));
    if (strcmp(units, "kelvin")) {
        fprintf(stderr, "known: attribute read '%s', wrote 'kelvin'\n", units);
        return 1;
    }
    CHECK(H5Aclose(a2));
    hsize_t coords[5][2] = {{0, 0}, {1, 1}, {2, 2}, {20, 3}, {29, 9}};
    hid_t fsel = H5Dget_space(d);
    CHECK(H5Sselect_elements(fsel, H5S_SELECT_SET, 5, &coords[0][0]));
    hsize_t five = 5;
    hid_t m5 = H5Screate_simple(1, &five, NULL);
    float pts[5];
    CHECK(H5Dread(d, H5T_NATIVE_FLOAT, m5, fsel, H5P_DEFAULT, pts));
    const float want[5] = {0.5f, 11.5f, 22.5f, 103.5f, 199.5f};
    for (int i = 0; i < 5; i++)
        if (pts[i] != want[i]) {
            fprintf(stderr, "known: point %d read %g, wrote %g\n", i, pts[i], want[i]);
            return 1;
        }
    H5Sclose(m5);
    H5Sclose(fsel);
    CHECK(H5Dclose(d));
    CHECK(H5Fclose(f));
    H5Pclose(fapl);
    H5Sclose(mspace);
    H5Sclose(aspace);
    H5Tclose(str);
    H5Pclose(dcpl);
    H5Sclose(space);
    return 0;
}
