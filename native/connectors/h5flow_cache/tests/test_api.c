/* h5flow_cache as a plugin, chosen by HDF5_VOL_CONNECTOR (set by ctest): an unmodified HDF5 program writes
 * with background migration, reads in the same run (also through a second file handle), flushes and
 * closes; the file is then read with the native connector. Run under ASan/UBSan and ThreadSanitizer too.
 * Usage: hfc_test_api <scratch dir> */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h" /* h5flow_log's C tests' CHECK and xr() */

enum { ROWS = 48, COLS = 4096 };

static double value(int r, int c) { return r * 10000.0 + c; }

/* One file reached through its own handle and through another file's external link: a read through either
 * sees a write still cached through the other, and the file keeps the last write made. */
static void external_link(const char *dir)
{
    enum { N = 256 };
    char target[4096], holder[4096];
    snprintf(target, sizeof target, "%s/ext-target.h5", dir);
    snprintf(holder, sizeof holder, "%s/ext-holder.h5", dir);
    hsize_t n = N;
    hid_t space = H5Screate_simple(1, &n, NULL);
    hid_t ft = H5Fcreate(target, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t dt = H5Dcreate2(ft, "d", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t fh = H5Fcreate(holder, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(dt >= 0 && fh >= 0 && H5Lcreate_external(target, "d", fh, "e", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    hid_t de = H5Dopen2(fh, "e", H5P_DEFAULT);
    CHECK(de >= 0);
    int buf[N], got[N];
    for (int gen = 1; gen <= 2; gen++) { /* written through the link, read through the file; then the reverse */
        for (int i = 0; i < N; i++)
            buf[i] = gen * 1000 + i;
        CHECK(H5Dwrite(gen == 1 ? de : dt, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
        CHECK(H5Dread(gen == 1 ? dt : de, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
        CHECK(!memcmp(got, buf, sizeof buf));
    }
    H5Dclose(de);
    H5Fclose(fh);
    H5Dclose(dt);
    CHECK(H5Fclose(ft) >= 0);
    hid_t nfapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_vol(nfapl, H5VL_NATIVE, NULL);
    ft = H5Fopen(target, H5F_ACC_RDONLY, nfapl);
    dt = H5Dopen2(ft, "d", H5P_DEFAULT);
    CHECK(H5Dread(dt, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
    CHECK(!memcmp(got, buf, sizeof buf)); /* the last write, not an older cached one migrated over it */
    H5Dclose(dt);
    H5Fclose(ft);
    H5Pclose(nfapl);
    H5Sclose(space);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s <scratch dir>\n", argv[0]);
        return 2;
    }
    mkdir(argv[1], 0700);
    char path[4096];
    snprintf(path, sizeof path, "%s/api.h5", argv[1]);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(file >= 0);
    char name[64] = "";
    H5VLget_connector_name(file, name, sizeof name);
    CHECK(!strcmp(name, "h5flow_cache"));
    hsize_t dims[2] = {ROWS, COLS}, chunk[2] = {8, 1024};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, chunk);
    hid_t dset = H5Dcreate2(file, "d", H5T_IEEE_F32LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(dset >= 0);
    double *row = malloc(COLS * sizeof *row);
    hsize_t one[2] = {1, COLS};
    hid_t ms = H5Screate_simple(2, one, NULL);
    for (int r = 0; r < ROWS; r++) {
        for (int c = 0; c < COLS; c++)
            row[c] = value(r, c);
        hsize_t st[2] = {(hsize_t)r, 0};
        hid_t fs = H5Scopy(space);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, one, NULL);
        CHECK(H5Dwrite(dset, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, row) >= 0);
        H5Sclose(fs);
        if (r % 8 == 7) { /* read back a column across everything written so far */
            float col[ROWS];
            hsize_t cst[2] = {0, 17}, ccnt[2] = {(hsize_t)r + 1, 1}, n = (hsize_t)r + 1;
            hid_t cfs = H5Scopy(space), cms = H5Screate_simple(1, &n, NULL);
            H5Sselect_hyperslab(cfs, H5S_SELECT_SET, cst, NULL, ccnt, NULL);
            CHECK(H5Dread(dset, H5T_NATIVE_FLOAT, cms, cfs, H5P_DEFAULT, col) >= 0);
            for (int k = 0; k <= r; k++)
                CHECK(col[k] == (float)value(k, 17));
            H5Sclose(cfs);
            H5Sclose(cms);
        }
    }
    /* a second handle of the same file */
    hid_t file2 = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    hid_t dset2 = H5Dopen2(file2, "d", H5P_DEFAULT);
    float last[COLS];
    hsize_t st[2] = {ROWS - 1, 0};
    hid_t fs = H5Scopy(space);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, one, NULL);
    CHECK(H5Dread(dset2, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, last) >= 0);
    CHECK(last[4000] == (float)value(ROWS - 1, 4000));
    H5Sclose(fs);
    H5Dclose(dset2);
    H5Fclose(file2);
    H5Dclose(dset); /* closed with writes maybe still queued: the connector keeps it until they migrate */
    CHECK(H5Fflush(file, H5F_SCOPE_GLOBAL) >= 0);
    CHECK(H5Fclose(file) >= 0);
    /* the file as the native connector stores it */
    hid_t nfapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_vol(nfapl, H5VL_NATIVE, NULL);
    file = H5Fopen(path, H5F_ACC_RDONLY, nfapl);
    CHECK(file >= 0);
    dset = H5Dopen2(file, "d", H5P_DEFAULT);
    double *all = malloc((size_t)ROWS * COLS * sizeof *all);
    CHECK(H5Dread(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, all) >= 0);
    int bad = 0;
    for (int r = 0; r < ROWS; r++)
        for (int c = 0; c < COLS; c++)
            bad += all[(size_t)r * COLS + c] != (double)(float)value(r, c);
    CHECK(bad == 0);
    free(all);
    free(row);
    H5Dclose(dset);
    H5Fclose(file);
    H5Pclose(nfapl);
    H5Pclose(fapl);
    H5Pclose(dcpl);
    H5Sclose(ms);
    H5Sclose(space);
    external_link(argv[1]);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("h5flow_cache api: all checks passed\n");
    return failures != 0;
}
