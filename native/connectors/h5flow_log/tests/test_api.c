/* A plain C program using h5flow_log through the HDF5 API (connector chosen by HDF5_VOL_CONNECTOR),
 * including the non-deprecated iteration calls (H5Literate2, H5Ovisit3) h5dump and h5ls use. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"

static herr_t count_links(hid_t g, const char *name, const H5L_info2_t *info, void *data)
{
    (void)g;
    (void)info;
    char *names = data;
    strcat(names, name);
    strcat(names, ";");
    return 0;
}

static herr_t count_objs(hid_t o, const char *name, const H5O_info2_t *info, void *data)
{
    (void)o;
    (void)name;
    int *n = data;
    n[info->type == H5O_TYPE_DATASET]++;
    return 0;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "api-tmp";
    mkdir(dir, 0755);
    char path[4096];
    snprintf(path, sizeof path, "%s/api.h5", dir);

    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(f >= 0);
    char cname[64] = "";
    H5VLget_connector_name(f, cname, sizeof cname);
    CHECK(!strcmp(cname, "h5flow_log"));
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t g = H5Gcreate2(f, "x/y", lcpl, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(g >= 0);
    hsize_t dims[2] = {16, 16};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    int fill = -3;
    H5Pset_fill_value(dcpl, H5T_NATIVE_INT, &fill);
    hid_t d = H5Dcreate2(g, "d", H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(d >= 0);
    /* many small writes, some overlapping */
    for (int i = 0; i < 16; i++) {
        hsize_t start[2] = {(hsize_t)i, 0}, count[2] = {1, 8};
        int row[8];
        for (int j = 0; j < 8; j++)
            row[j] = i * 100 + j;
        hid_t fs = H5Scopy(sp), ms = H5Screate_simple(1, count + 1, NULL);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
        CHECK(H5Dwrite(d, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, row) >= 0);
        H5Sclose(fs);
        H5Sclose(ms);
    }
    {
        hsize_t start[2] = {4, 4}, count[2] = {2, 2};
        int v[4] = {7, 7, 7, 7};
        hid_t fs = H5Scopy(sp), ms = H5Screate_simple(2, count, NULL);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
        CHECK(H5Dwrite(d, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, v) >= 0);
        H5Sclose(fs);
        H5Sclose(ms);
    }
    int all[16][16];
    CHECK(H5Dread(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, all) >= 0); /* read after write */
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            int want = j < 8 ? i * 100 + j : -3;
            if (i >= 4 && i < 6 && j >= 4 && j < 6)
                want = 7;
            CHECK(all[i][j] == want);
        }
    double dv[16][16];
    CHECK(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, dv) >= 0); /* with conversion */
    CHECK(dv[15][7] == 1507.0 && dv[0][15] == -3.0);
    hid_t as = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(d, "scale", H5T_IEEE_F64LE, as, H5P_DEFAULT, H5P_DEFAULT);
    double scale = 2.5;
    CHECK(H5Awrite(a, H5T_NATIVE_DOUBLE, &scale) >= 0);
    H5Aclose(a);
    /* soft links: created, followed, valued */
    CHECK(H5Lcreate_soft("/x/y", f, "soft", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    {
        H5L_info2_t li;
        char val[16];
        CHECK(H5Lget_info2(f, "soft", &li, H5P_DEFAULT) >= 0 && li.type == H5L_TYPE_SOFT && li.u.val_size == 5);
        CHECK(H5Lget_val(f, "soft", val, sizeof val, H5P_DEFAULT) >= 0 && !strcmp(val, "/x/y"));
        CHECK(H5Oexists_by_name(f, "soft/d", H5P_DEFAULT) > 0);
    }
    /* a second hard link (format 4): one object, two names, a link count; deleting one name keeps it */
    {
        H5O_info2_t o1, o2;
        CHECK(H5Lcreate_hard(f, "x", f, "again", H5P_DEFAULT, H5P_DEFAULT) >= 0);
        CHECK(H5Oget_info_by_name3(f, "x", &o1, H5O_INFO_BASIC, H5P_DEFAULT) >= 0 && o1.rc == 2);
        CHECK(H5Oget_info_by_name3(f, "again/y", &o2, H5O_INFO_BASIC, H5P_DEFAULT) >= 0);
        CHECK(H5Oget_info_by_name3(f, "again", &o2, H5O_INFO_BASIC, H5P_DEFAULT) >= 0);
        int cmp = 1;
        CHECK(H5Otoken_cmp(f, &o1.token, &o2.token, &cmp) >= 0 && cmp == 0);
        CHECK(H5Ldelete(f, "again", H5P_DEFAULT) >= 0);
        CHECK(H5Oget_info_by_name3(f, "x", &o1, H5O_INFO_BASIC, H5P_DEFAULT) >= 0 && o1.rc == 1);
    }
    /* what is not supported fails cleanly */
    H5E_BEGIN_TRY
    {
        CHECK(H5Lcreate_soft("/x", f, "soft", H5P_DEFAULT, H5P_DEFAULT) < 0); /* exists */
        CHECK(H5Lcreate_hard(f, "x", f, "soft", H5P_DEFAULT, H5P_DEFAULT) < 0); /* exists */
        CHECK(H5Gcreate2(f, "missing/parent", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) < 0);
        CHECK(H5Dopen2(f, "x", H5P_DEFAULT) < 0);
    }
    H5E_END_TRY
    H5Dclose(d);
    H5Gclose(g);
    CHECK(H5Fclose(f) >= 0);

    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    CHECK(f >= 0);
    char names[256] = "";
    hsize_t idx = 0;
    CHECK(H5Literate2(f, H5_INDEX_NAME, H5_ITER_INC, &idx, count_links, names) >= 0);
    CHECK(!strcmp(names, "soft;x;"));
    names[0] = '\0';
    CHECK(H5Lvisit2(f, H5_INDEX_NAME, H5_ITER_INC, count_links, names) >= 0);
    CHECK(!strcmp(names, "soft;x;x/y;x/y/d;"));
    int n[2] = {0, 0};
    CHECK(H5Ovisit3(f, H5_INDEX_NAME, H5_ITER_INC, count_objs, n, H5O_INFO_BASIC) >= 0);
    CHECK(n[0] == 3 && n[1] == 1); /* "/", x, x/y and one dataset */
    H5O_info2_t oi;
    CHECK(H5Oget_info_by_name3(f, "x/y/d", &oi, H5O_INFO_ALL, H5P_DEFAULT) >= 0);
    CHECK(oi.type == H5O_TYPE_DATASET && oi.num_attrs == 1);
    d = H5Dopen2(f, "/x/y/d", H5P_DEFAULT);
    CHECK(H5Dread(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, all) >= 0);
    CHECK(all[5][5] == 7 && all[15][0] == 1500 && all[3][12] == -3);
    a = H5Aopen(d, "scale", H5P_DEFAULT);
    scale = 0;
    CHECK(H5Aread(a, H5T_NATIVE_DOUBLE, &scale) >= 0 && scale == 2.5);
    H5Aclose(a);
    H5E_BEGIN_TRY { CHECK(H5Dwrite(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, all) < 0); }
    H5E_END_TRY /* read-only */
    H5Dclose(d);
    CHECK(H5Fclose(f) >= 0);
    H5Sclose(sp);
    H5Sclose(as);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    else
        printf("test_api: OK\n");
    return failures != 0;
}
