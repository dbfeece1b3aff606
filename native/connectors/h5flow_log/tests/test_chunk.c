/* Direct chunk I/O and chunk queries through h5flow_log (the connector chosen by HDF5_VOL_CONNECTOR), each
 * scenario run on a native HDF5 file too and compared: chunk bytes, filter masks, storage sizes, the chunks
 * listed, and the data read back (also after the dataset grows and shrinks). */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"

#define NF 2 /* 0: native, 1: h5flow_log */

typedef struct chunk_rec {
    hsize_t off[2];
    unsigned mask;
    hsize_t size;
} chunk_rec_t;

typedef struct chunk_list {
    chunk_rec_t v[64];
    int n;
} chunk_list_t;

static int collect(const hsize_t *off, unsigned mask, haddr_t addr, hsize_t size, void *data)
{
    (void)addr;
    chunk_list_t *l = data;
    if (l->n < 64)
        l->v[l->n++] = (chunk_rec_t){{off[0], off[1]}, mask, size};
    return 0;
}

static int stop_at_second(const hsize_t *off, unsigned mask, haddr_t addr, hsize_t size, void *data)
{
    (void)off;
    (void)mask;
    (void)addr;
    (void)size;
    return ++*(int *)data == 2 ? 5 : 0;
}

static hid_t open_file(const char *dir, int which, const char *name, unsigned flags, int create)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s.h5", dir, name, which ? "log" : "native");
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (which == 0)
        H5Pset_vol(fapl, H5VL_NATIVE, NULL);
    hid_t f = create ? H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl) : H5Fopen(path, flags, fapl);
    H5Pclose(fapl);
    CHECK(f >= 0);
    if (create && which == 1) {
        char cname[64] = "";
        H5VLget_connector_name(f, cname, sizeof cname);
        CHECK(!strcmp(cname, "h5flow_log"));
    }
    return f;
}

static hid_t make_dset(hid_t f, const char *name, hsize_t r0, hsize_t r1, hsize_t c0, hsize_t c1, int gzip,
                       int fill)
{
    hsize_t dims[2] = {r0, r1}, maxd[2] = {H5S_UNLIMITED, H5S_UNLIMITED}, chunk[2] = {c0, c1};
    hid_t sp = H5Screate_simple(2, dims, maxd), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, chunk);
    H5Pset_fill_value(dcpl, H5T_NATIVE_INT, &fill);
    if (gzip) {
        H5Pset_shuffle(dcpl);
        H5Pset_deflate(dcpl, 6);
    }
    hid_t d = H5Dcreate2(f, name, H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    CHECK(d >= 0);
    H5Sclose(sp);
    H5Pclose(dcpl);
    return d;
}

static void write_box(hid_t d, hsize_t s0, hsize_t s1, hsize_t n0, hsize_t n1, int base)
{
    int *v = malloc(n0 * n1 * sizeof *v);
    for (hsize_t i = 0; i < n0 * n1; i++)
        v[i] = base + (int)i;
    hsize_t start[2] = {s0, s1}, count[2] = {n0, n1};
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(2, count, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    CHECK(H5Dwrite(d, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, v) >= 0);
    H5Sclose(fs);
    H5Sclose(ms);
    free(v);
}

/* The whole dataset of both files is the same. */
static void same_data(hid_t d[NF])
{
    hid_t sp[NF];
    hsize_t dims[NF][2];
    for (int w = 0; w < NF; w++) {
        sp[w] = H5Dget_space(d[w]);
        H5Sget_simple_extent_dims(sp[w], dims[w], NULL);
        H5Sclose(sp[w]);
    }
    CHECK(dims[0][0] == dims[1][0] && dims[0][1] == dims[1][1]);
    size_t n = (size_t)(dims[0][0] * dims[0][1]);
    int *a = calloc(n + 1, sizeof *a), *b = calloc(n + 1, sizeof *b);
    CHECK(H5Dread(d[0], H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, a) >= 0);
    CHECK(H5Dread(d[1], H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) >= 0);
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += a[i] != b[i];
    if (bad)
        fprintf(stderr, "  %d of %zu elements differ from native\n", bad, n);
    CHECK(bad == 0);
    free(a);
    free(b);
}

/* Every chunk the container lists is listed natively too, with the same mask and size, and its bytes
 * (H5Dread_chunk after H5Dget_chunk_storage_size) are native's. */
static void same_chunks(hid_t d[NF], int expect_n)
{
    chunk_list_t l[NF] = {0};
    hsize_t nch[NF] = {0};
    for (int w = 0; w < NF; w++) {
        CHECK(H5Dget_num_chunks(d[w], H5S_ALL, &nch[w]) >= 0);
        CHECK(H5Dchunk_iter(d[w], H5P_DEFAULT, collect, &l[w]) >= 0);
        CHECK((hsize_t)l[w].n == nch[w]);
    }
    CHECK(nch[1] == (hsize_t)expect_n);
    for (int i = 0; i < l[1].n; i++) {
        chunk_rec_t *c = &l[1].v[i];
        int j = 0;
        while (j < l[0].n && (l[0].v[j].off[0] != c->off[0] || l[0].v[j].off[1] != c->off[1]))
            j++;
        CHECK(j < l[0].n);
        if (j == l[0].n)
            continue;
        CHECK(l[0].v[j].mask == c->mask && l[0].v[j].size == c->size);
        hsize_t off[2] = {c->off[0], c->off[1]}, info_size = 0, got[NF] = {0};
        unsigned info_mask = 99;
        haddr_t addr = 0;
        CHECK(H5Dget_chunk_info_by_coord(d[1], off, &info_mask, &addr, &info_size) >= 0);
        CHECK(addr == HADDR_UNDEF && info_mask == c->mask && info_size == c->size);
        hsize_t ioff[2] = {0, 0}, isize = 0;
        CHECK(H5Dget_chunk_info(d[1], H5S_ALL, (hsize_t)i, ioff, &info_mask, &addr, &isize) >= 0);
        CHECK(ioff[0] == c->off[0] && ioff[1] == c->off[1] && isize == c->size && addr == HADDR_UNDEF);
        uint8_t *buf[NF];
        uint32_t mask[NF] = {7, 7};
        for (int w = 0; w < NF; w++) {
            CHECK(H5Dget_chunk_storage_size(d[w], off, &got[w]) >= 0);
            buf[w] = calloc(got[w] + 1, 1);
            CHECK(H5Dread_chunk(d[w], H5P_DEFAULT, off, &mask[w], buf[w]) >= 0);
        }
        CHECK(got[0] == got[1] && got[1] == c->size && mask[0] == mask[1]);
        CHECK(got[0] == got[1] && !memcmp(buf[0], buf[1], got[0]));
        free(buf[0]);
        free(buf[1]);
    }
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "chunk-tmp";
    mkdir(dir, 0755);
    hid_t f[NF], d[NF], e[NF], u[NF];
    for (int w = 0; w < NF; w++)
        f[w] = open_file(dir, w, "chunks", 0, 1);

    /* 1. shuffle + deflate, 10x7 in 4x3 chunks (edge chunks both ways), written by two overlapping writes:
     * each chunk's bytes are built from its elements and filtered as native filters them */
    for (int w = 0; w < NF; w++) {
        d[w] = make_dset(f[w], "gz", 10, 7, 4, 3, 1, -5);
        write_box(d[w], 0, 0, 10, 7, 0);
        write_box(d[w], 2, 1, 3, 4, 1000);
    }
    same_data(d);
    same_chunks(d, 9);

    /* 2. a chunk written directly (the bytes another chunk stored): read back as data and as the chunk */
    {
        hsize_t src[2] = {0, 3}, dst[2] = {4, 0}, n = 0;
        uint32_t m = 0;
        for (int w = 0; w < NF; w++) {
            CHECK(H5Dget_chunk_storage_size(d[w], src, &n) >= 0);
            uint8_t *b = malloc(n);
            CHECK(H5Dread_chunk(d[w], H5P_DEFAULT, src, &m, b) >= 0);
            CHECK(H5Dwrite_chunk(d[w], H5P_DEFAULT, m, dst, n, b) >= 0);
            free(b);
        }
        same_data(d);
        same_chunks(d, 9);
    }

    /* 3. an unfiltered edge chunk written directly: its elements past the extent appear when the dataset
     * grows, and a shrink drops them (native prunes the edge chunk) */
    for (int w = 0; w < NF; w++) {
        e[w] = make_dset(f[w], "edge", 5, 3, 4, 2, 0, -1);
        int v[8];
        for (int i = 0; i < 8; i++)
            v[i] = 100 + i;
        hsize_t off[2] = {4, 2};
        CHECK(H5Dwrite_chunk(e[w], H5P_DEFAULT, 0, off, sizeof v, v) >= 0);
    }
    same_data(e);
    same_chunks(e, 1);
    for (int w = 0; w < NF; w++) {
        hsize_t big[2] = {8, 4};
        CHECK(H5Dset_extent(e[w], big) >= 0);
    }
    same_data(e);
    for (int w = 0; w < NF; w++) {
        hsize_t small[2] = {5, 3}, big[2] = {8, 4};
        CHECK(H5Dset_extent(e[w], small) >= 0);
        CHECK(H5Dset_extent(e[w], big) >= 0);
    }
    same_data(e);

    /* 4. refused: an offset not on a chunk boundary or outside the extent, a wrong size without filters,
     * a chunk never written (reads fail; its info says size 0) */
    {
        int v[8] = {0};
        hsize_t bad1[2] = {1, 0}, bad2[2] = {8, 0}, ok[2] = {0, 0}, size = 5;
        uint32_t m;
        H5E_BEGIN_TRY
        {
            CHECK(H5Dwrite_chunk(e[1], H5P_DEFAULT, 0, bad1, sizeof v, v) < 0);
            CHECK(H5Dwrite_chunk(e[1], H5P_DEFAULT, 0, bad2, sizeof v, v) < 0);
            CHECK(H5Dwrite_chunk(e[1], H5P_DEFAULT, 0, ok, sizeof v - 4, v) < 0);
            CHECK(H5Dread_chunk(e[1], H5P_DEFAULT, ok, &m, v) < 0);
            CHECK(H5Dget_chunk_storage_size(e[1], ok, &size) < 0);
        }
        H5E_END_TRY
        unsigned fm = 0;
        haddr_t addr = 0;
        size = 5;
        CHECK(H5Dget_chunk_info_by_coord(e[1], ok, &fm, &addr, &size) >= 0 && size == 0 && addr == HADDR_UNDEF);
        int calls = 0;
        for (int w = 0; w < NF; w++) { /* a callback's positive value stops the iteration (success) */
            calls = 0;
            CHECK(H5Dchunk_iter(d[w], H5P_DEFAULT, stop_at_second, &calls) >= 0 && calls == 2);
        }
    }

    /* 5. all filters skipped (mask 0xFFFFFFFF): the raw bytes and the mask come back (native: after reopening) */
    for (int w = 0; w < NF; w++) {
        u[w] = make_dset(f[w], "raw", 4, 4, 4, 4, 1, 0);
        int v[16];
        for (int i = 0; i < 16; i++)
            v[i] = i * i;
        hsize_t off[2] = {0, 0};
        CHECK(H5Dwrite_chunk(u[w], H5P_DEFAULT, 0xFFFFFFFFu, off, sizeof v, v) >= 0);
    }
    for (int w = 0; w < NF; w++) {
        H5Dclose(d[w]);
        H5Dclose(e[w]);
        H5Dclose(u[w]);
        H5Fclose(f[w]);
        f[w] = open_file(dir, w, "chunks", H5F_ACC_RDONLY, 0);
        d[w] = H5Dopen2(f[w], "gz", H5P_DEFAULT);
        e[w] = H5Dopen2(f[w], "edge", H5P_DEFAULT);
        u[w] = H5Dopen2(f[w], "raw", H5P_DEFAULT);
    }
    same_chunks(u, 1);
    same_data(u);
    same_chunks(d, 9);
    same_data(e);
    {
        hsize_t off[2] = {0, 0};
        uint32_t m = 0;
        int v[16];
        CHECK(H5Dread_chunk(u[1], H5P_DEFAULT, off, &m, v) >= 0);
        CHECK(m == 0xFFFFFFFFu && v[3] == 9 && v[15] == 225);
        H5E_BEGIN_TRY { CHECK(H5Dwrite_chunk(u[1], H5P_DEFAULT, 0, off, sizeof v, v) < 0); } /* read-only */
        H5E_END_TRY
    }
    for (int w = 0; w < NF; w++) {
        H5Dclose(d[w]);
        H5Dclose(e[w]);
        H5Dclose(u[w]);
        H5Fclose(f[w]);
    }
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures != 0;
}
