/* Test-only: values with variable-length members (a compound of an integer, a variable-length string and a
 * sequence) read and written through H5Dread/H5Dwrite/H5Aread/H5Awrite with memory types other than the
 * stored one, as HDF5's tools do with H5Tget_native_type: members reordered and widened, a subset with a
 * background, a selection. Prints every value read; the output must be the same natively and through a
 * connector. Usage: vlen_convert FILE */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 3
#define CHECK(x)                                                                                              \
    do {                                                                                                      \
        if ((x) < 0) {                                                                                        \
            printf("FAILED: %s (line %d)\n", #x, __LINE__);                                                   \
            return 1;                                                                                         \
        }                                                                                                     \
    } while (0)

typedef struct {
    int a;
    char *s;
    hvl_t v; /* of short */
} stored_t;
typedef struct {
    hvl_t v; /* of long long */
    char *s;
    long long a;
} wide_t;
typedef struct {
    char *s;
    double k;
} part_t;

static hid_t str_type(void)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    return t;
}

/* A compound of `size` bytes with members (name, offset, type); the member types are closed. */
static hid_t compound(size_t size, int n, const char *const names[], const size_t offs[], const hid_t types[])
{
    hid_t t = H5Tcreate(H5T_COMPOUND, size);
    for (int i = 0; i < n; i++) {
        H5Tinsert(t, names[i], offs[i], types[i]);
        H5Tclose(types[i]);
    }
    return t;
}

static hid_t stored_type(void)
{
    return compound(sizeof(stored_t), 3, (const char *const[]){"a", "s", "v"},
                    (size_t[]){HOFFSET(stored_t, a), HOFFSET(stored_t, s), HOFFSET(stored_t, v)},
                    (hid_t[]){H5Tcopy(H5T_NATIVE_INT), str_type(), H5Tvlen_create(H5T_NATIVE_SHORT)});
}

static hid_t wide_type(void)
{
    return compound(sizeof(wide_t), 3, (const char *const[]){"v", "s", "a"},
                    (size_t[]){HOFFSET(wide_t, v), HOFFSET(wide_t, s), HOFFSET(wide_t, a)},
                    (hid_t[]){H5Tvlen_create(H5T_NATIVE_LLONG), str_type(), H5Tcopy(H5T_NATIVE_LLONG)});
}

static hid_t part_type(void)
{
    return compound(sizeof(part_t), 2, (const char *const[]){"s", "k"},
                    (size_t[]){HOFFSET(part_t, s), HOFFSET(part_t, k)},
                    (hid_t[]){str_type(), H5Tcopy(H5T_NATIVE_DOUBLE)});
}

static void show_wide(const char *label, const wide_t *w, int n)
{
    printf("%s:", label);
    for (int i = 0; i < n; i++) {
        printf(" (%lld '%s' [", w[i].a, w[i].s ? w[i].s : "(null)");
        for (size_t j = 0; j < w[i].v.len; j++)
            printf("%s%lld", j ? "," : "", ((long long *)w[i].v.p)[j]);
        printf("])");
    }
    printf("\n");
}

static void show_part(const char *label, const part_t *p, int n)
{
    printf("%s:", label);
    for (int i = 0; i < n; i++)
        printf(" ('%s' %g)", p[i].s ? p[i].s : "(null)", p[i].k);
    printf("\n");
}

static void reclaim(hid_t t, int n, void *buf)
{
    hsize_t d = (hsize_t)n;
    hid_t sp = H5Screate_simple(1, &d, NULL);
    H5Treclaim(t, sp, H5P_DEFAULT, buf);
    H5Sclose(sp);
}

/* Every read of one object (a dataset, or an attribute when attr is set). */
static int reads(hid_t obj, int attr, const char *what)
{
    hid_t wt = wide_type(), pt = part_type();
    wide_t w[N];
    part_t p[N];
    char label[64];
    memset(w, 0, sizeof w);
    CHECK(attr ? H5Aread(obj, wt, w) : H5Dread(obj, wt, H5S_ALL, H5S_ALL, H5P_DEFAULT, w));
    snprintf(label, sizeof label, "%s wide", what);
    show_wide(label, w, N);
    reclaim(wt, N, w);
    for (int i = 0; i < N; i++)
        p[i] = (part_t){NULL, 1.5 + i};
    CHECK(attr ? H5Aread(obj, pt, p) : H5Dread(obj, pt, H5S_ALL, H5S_ALL, H5P_DEFAULT, p));
    snprintf(label, sizeof label, "%s part", what);
    show_part(label, p, N); /* k keeps the caller's values */
    reclaim(pt, N, p);
    if (!attr) { /* elements 1..2 into memory elements 0 and 2 of 3 */
        hid_t fs = H5Dget_space(obj), ms = H5Screate_simple(1, (hsize_t[]){N}, NULL);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, (hsize_t[]){1}, NULL, (hsize_t[]){2}, NULL);
        H5Sselect_hyperslab(ms, H5S_SELECT_SET, (hsize_t[]){0}, (hsize_t[]){2}, (hsize_t[]){2}, NULL);
        memset(w, 0, sizeof w);
        CHECK(H5Dread(obj, wt, ms, fs, H5P_DEFAULT, w));
        show_wide("dataset selection", w, N);
        reclaim(wt, N, w);
        H5Sclose(fs);
        H5Sclose(ms);
    }
    H5Tclose(wt);
    H5Tclose(pt);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    short v0[] = {1, 2}, v2[] = {7};
    stored_t data[N] = {{1, "x", {2, v0}}, {2, "yz", {0, NULL}}, {-3, "", {1, v2}}};
    long long n0[] = {9, 8, 7}, n2[] = {5};
    wide_t nw[N] = {{{3, n0}, "p", 10}, {{0, NULL}, "qq", -20}, {{1, n2}, "", 30}};
    hid_t st = stored_type(), wt = wide_type(), pt = part_type();
    hid_t f = H5Fcreate(argv[1], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(f);
    hid_t sp = H5Screate_simple(1, (hsize_t[]){N}, NULL);
    hid_t d = H5Dcreate2(f, "cv", st, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t a = H5Acreate2(f, "cv", st, sp, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(d);
    CHECK(a);
    CHECK(H5Dwrite(d, st, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
    CHECK(H5Awrite(a, st, data));
    if (reads(d, 0, "dataset") || reads(a, 1, "attribute"))
        return 1;
    /* writes with the wide type: whole, then element 0 from memory element 2 */
    CHECK(H5Dwrite(d, wt, H5S_ALL, H5S_ALL, H5P_DEFAULT, nw));
    CHECK(H5Awrite(a, wt, nw));
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, (hsize_t[]){N}, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, (hsize_t[]){0}, NULL, (hsize_t[]){1}, NULL);
    H5Sselect_hyperslab(ms, H5S_SELECT_SET, (hsize_t[]){2}, NULL, (hsize_t[]){1}, NULL);
    CHECK(H5Dwrite(d, wt, ms, fs, H5P_DEFAULT, nw));
    H5Sclose(fs);
    H5Sclose(ms);
    H5Dclose(d);
    H5Aclose(a);
    H5Fclose(f);
    f = H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT);
    d = H5Dopen2(f, "cv", H5P_DEFAULT);
    a = H5Aopen(f, "cv", H5P_DEFAULT);
    CHECK(d);
    CHECK(a);
    if (reads(d, 0, "reopened dataset") || reads(a, 1, "reopened attribute"))
        return 1;
    H5Dclose(d);
    H5Aclose(a);
    H5Sclose(sp);
    H5Fclose(f);
    H5Tclose(st);
    H5Tclose(wt);
    H5Tclose(pt);
    printf("done\n");
    return 0;
}
