/* Metadata micro-kernels of the h5py-vs-C table (seed 004, "H5py Metadata Performance"):
 *   filecreate: create then close `count` files (each rank its own files), timed;
 *   objscan:    open a file, open a group of `count` objects (groups, datasets, soft links) and open
 *               every member by name, counting what each is; only the scan is timed.
 * Files go to c->file with a per-rank, per-item suffix and are removed afterwards. */
#include "iotest.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void reduce_result(const iot_env *env, double elapsed, unsigned long long counted, iot_result *r)
{
    memset(r, 0, sizeof(*r));
    MPI_Reduce(&elapsed, &r->wall, 1, MPI_DOUBLE, MPI_MAX, 0, env->comm);
    MPI_Reduce(&elapsed, &r->min[0], 1, MPI_DOUBLE, MPI_MIN, 0, env->comm);
    MPI_Reduce(&elapsed, &r->max[0], 1, MPI_DOUBLE, MPI_MAX, 0, env->comm);
    MPI_Reduce(&counted, &r->checked, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, env->comm);
}

int iot_run_filecreate(const iot_env *env, const iot_case *c, iot_result *r)
{
    char name[PATH_MAX + 64];
    MPI_Barrier(env->comm);
    double t0 = MPI_Wtime();
    for (unsigned i = 0; i < c->count; ++i) {
        snprintf(name, sizeof(name), "%s.r%d.%u.h5", c->file, env->rank, i);
        hid_t f = H5Fcreate(name, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        IOT_CHECK(f, env, c);
        IOT_CHECK(H5Fclose(f), env, c);
    }
    double elapsed = MPI_Wtime() - t0;
    unsigned long long made = 0;
    for (unsigned i = 0; i < c->count; ++i) {
        snprintf(name, sizeof(name), "%s.r%d.%u.h5", c->file, env->rank, i);
        if (access(name, F_OK) == 0)
            ++made;
        if (!c->keep)
            unlink(name);
    }
    reduce_result(env, elapsed, made, r);
    unsigned long long missing = c->count - made, all_missing = 0;
    MPI_Allreduce(&missing, &all_missing, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, env->comm);
    if (missing > 0)
        fprintf(stderr, "h5flow-iotest: rank %d, case %d: %llu of %u created files are missing\n", env->rank,
                c->index, missing, c->count);
    return all_missing > 0 ? 3 : 0;
}

typedef struct {
    const iot_env *env;
    const iot_case *c;
    unsigned long long groups, datasets, other;
} scan_state;

static herr_t visit(hid_t group, const char *name, const H5L_info2_t *info, void *data)
{
    (void)info;
    scan_state *st = data;
    hid_t obj = H5Oopen(group, name, H5P_DEFAULT);
    IOT_CHECK(obj, st->env, st->c);
    H5I_type_t kind = H5Iget_type(obj);
    if (kind == H5I_GROUP)
        ++st->groups;
    else if (kind == H5I_DATASET)
        ++st->datasets;
    else
        ++st->other;
    IOT_CHECK(H5Oclose(obj), st->env, st->c);
    return 0;
}

/* Member i is a group when i % 3 == 0, a 4-element dataset when i % 3 == 1, and a soft link to the
 * first dataset when i % 3 == 2 (a link resolves to the dataset it names). */
static void expected_kinds(unsigned n, unsigned long long *groups, unsigned long long *datasets)
{
    *groups = (n + 2) / 3;
    *datasets = n - *groups;
}

int iot_run_objscan(const iot_env *env, const iot_case *c, iot_result *r)
{
    char path[PATH_MAX + 64], name[64];
    snprintf(path, sizeof(path), "%s.r%d.h5", c->file, env->rank);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    IOT_CHECK(f, env, c);
    hid_t g = H5Gcreate2(f, "scan", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    IOT_CHECK(g, env, c);
    hsize_t four = 4;
    hid_t space = H5Screate_simple(1, &four, NULL);
    IOT_CHECK(space, env, c);
    const int ints[4] = {1, 2, 3, 4};
    for (unsigned i = 0; i < c->count; ++i) {
        snprintf(name, sizeof(name), "obj%07u", i);
        if (i % 3 == 0) {
            hid_t sub = H5Gcreate2(g, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            IOT_CHECK(sub, env, c);
            IOT_CHECK(H5Gclose(sub), env, c);
        } else if (i % 3 == 1) {
            hid_t d = H5Dcreate2(g, name, H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            IOT_CHECK(d, env, c);
            IOT_CHECK(H5Dwrite(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, ints), env, c);
            IOT_CHECK(H5Dclose(d), env, c);
        } else {
            IOT_CHECK(H5Lcreate_soft("/scan/obj0000001", g, name, H5P_DEFAULT, H5P_DEFAULT), env, c);
        }
    }
    IOT_CHECK(H5Sclose(space), env, c);
    IOT_CHECK(H5Gclose(g), env, c);
    IOT_CHECK(H5Fclose(f), env, c);

    scan_state st = {env, c, 0, 0, 0};
    MPI_Barrier(env->comm);
    double t0 = MPI_Wtime();
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    IOT_CHECK(f, env, c);
    g = H5Gopen2(f, "scan", H5P_DEFAULT);
    IOT_CHECK(g, env, c);
    IOT_CHECK(H5Literate2(g, H5_INDEX_NAME, H5_ITER_INC, NULL, visit, &st), env, c);
    IOT_CHECK(H5Gclose(g), env, c);
    IOT_CHECK(H5Fclose(f), env, c);
    double elapsed = MPI_Wtime() - t0;
    if (!c->keep)
        unlink(path);

    unsigned long long want_groups = 0, want_datasets = 0;
    expected_kinds(c->count, &want_groups, &want_datasets);
    int wrong = st.groups != want_groups || st.datasets != want_datasets || st.other != 0;
    if (wrong)
        fprintf(stderr, "h5flow-iotest: rank %d, case %d: scan found %llu groups, %llu datasets, %llu other; "
                "expected %llu groups, %llu datasets\n", env->rank, c->index, st.groups, st.datasets, st.other,
                want_groups, want_datasets);
    reduce_result(env, elapsed, st.groups + st.datasets + st.other, r);
    int any_wrong = 0;
    MPI_Allreduce(&wrong, &any_wrong, 1, MPI_INT, MPI_LOR, env->comm);
    return any_wrong ? 3 : 0;
}
