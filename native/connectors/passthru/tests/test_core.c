/* The pass-through core under a connector made here: options parsed by the connector's callback,
 * info strings both ways, every forwarded call seen before and after by the observer, every wrapper
 * released, and a round trip (groups, datasets, multi-dataset write, attributes, links, iteration,
 * object info, file checks) stacked on native and on h5flow_log.
 *   h5fpt_test_core <scratch dir>    (HDF5_PLUGIN_PATH must reach h5flow_log) */
#include "h5fpt.h"

#include "../../h5flow_log/tests/check.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct opts {
    int level;
    char tag[32];
} opts_t;

static void opts_default(void *p)
{
    opts_t *o = p;
    o->level = 1;
    strcpy(o->tag, "none");
}

static int opts_set(void *p, const char *key, const char *value, char *err, size_t errlen)
{
    opts_t *o = p;
    if (!strcmp(key, "level")) {
        char *end;
        long v = strtol(value, &end, 10);
        if (*value == '\0' || *end || v < 0 || v > 9) {
            snprintf(err, errlen, "an integer from 0 to 9");
            return -1;
        }
        o->level = (int)v;
        return 0;
    }
    if (!strcmp(key, "tag")) {
        if (strlen(value) >= sizeof o->tag) {
            snprintf(err, errlen, "at most %zu characters", sizeof o->tag - 1);
            return -1;
        }
        strcpy(o->tag, value);
        return 0;
    }
    snprintf(err, errlen, "unknown setting (level, tag)");
    return -1;
}

static int opts_to_str(const void *p, char *buf, size_t len)
{
    const opts_t *o = p;
    int n = snprintf(buf, len, "level=%d;tag=%s", o->level, o->tag);
    return (n < 0 || (size_t)n >= len) ? -1 : n;
}

/* what the hooks saw */
static long live_objects, files_opened, befores[H5FPT_OP_COUNT], afters[H5FPT_OP_COUNT], failed_calls;
static int last_level = -1;
static size_t max_write_count;

typedef struct ext {
    int level; /* from the file's options, inherited by everything opened from it */
} ext_t;

static herr_t obj_init(h5fpt_obj_t *obj, const h5fpt_obj_t *parent, const h5fpt_info_t *info)
{
    ext_t *e = malloc(sizeof *e);
    if (!e)
        return -1;
    if (parent)
        e->level = ((const ext_t *)parent->ext)->level;
    else {
        CHECK(info != NULL && obj->type == H5I_FILE);
        e->level = ((const opts_t *)info->opts)->level;
        files_opened++;
    }
    last_level = e->level;
    obj->ext = e;
    live_objects++;
    return 0;
}

static void obj_fini(h5fpt_obj_t *obj)
{
    free(obj->ext);
    live_objects--;
}

static void observe(h5fpt_call_t *c)
{
    CHECK(c->op >= 0 && c->op < H5FPT_OP_COUNT && h5fpt_op_name(c->op));
    if (!c->after) {
        CHECK(c->scratch == 0);
        c->scratch = 1000 + (uint64_t)c->op;
        befores[c->op]++;
        return;
    }
    CHECK(c->scratch == 1000 + (uint64_t)c->op); /* the same call struct before and after */
    afters[c->op]++;
    failed_calls += c->failed != 0;
    if (c->op == H5FPT_DATASET_WRITE && c->count > max_write_count)
        max_write_count = c->count;
}

static const h5fpt_desc_t desc = {
    .name = "h5fpt_test",
    .value = 400,
    .conn_version = 1,
    .cap_flags = 0,
    .opts_size = sizeof(opts_t),
    .opts_default = opts_default,
    .opts_set = opts_set,
    .opts_to_str = opts_to_str,
    .obj_init = obj_init,
    .obj_fini = obj_fini,
    .observe = observe,
};

static H5VL_class_t cls;

static herr_t count_link(hid_t g, const char *name, const H5L_info2_t *info, void *data)
{
    (void)g;
    (void)name;
    (void)info;
    ++*(int *)data;
    return 0;
}

/* Round trip through the connector with info string `info_str`, in file `path`. */
static void round_trip(hid_t conn, const char *info_str, const char *path, int level)
{
    void *info = NULL;
    CHECK(H5VLconnector_str_to_info(info_str, conn, &info) >= 0);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    CHECK(H5Pset_vol(fapl, conn, info) >= 0);
    CHECK(H5VLfree_connector_info(conn, info) >= 0);
    long files_before = files_opened;

    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(f >= 0);
    char name[64] = "";
    CHECK(H5VLget_connector_name(f, name, sizeof name) > 0 && !strcmp(name, "h5fpt_test"));
    CHECK(last_level == level);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t g = H5Gcreate2(f, "a/b", lcpl, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(g >= 0);
    hsize_t dims[2] = {8, 5};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t d1 = H5Dcreate2(g, "x", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t d2 = H5Dcreate2(f, "y", H5T_NATIVE_DOUBLE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(d1 >= 0 && d2 >= 0);
    int xi[40];
    double yd[40];
    for (int i = 0; i < 40; i++) {
        xi[i] = i * 7 - 3;
        yd[i] = i * 0.5;
    }
    hid_t ds[2] = {d1, d2}, mt[2] = {H5T_NATIVE_INT, H5T_NATIVE_DOUBLE}, all[2] = {H5S_ALL, H5S_ALL};
    const void *bufs[2] = {xi, yd};
    CHECK(H5Dwrite_multi(2, ds, mt, all, all, H5P_DEFAULT, bufs) >= 0);
    hid_t scalar = H5Screate(H5S_SCALAR);
    hid_t a = H5Acreate2(d1, "units", H5T_NATIVE_INT, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Sclose(scalar);
    int units = 42;
    CHECK(a >= 0 && H5Awrite(a, H5T_NATIVE_INT, &units) >= 0);
    CHECK(H5Lcreate_soft("/a/b/x", f, "soft_x", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    CHECK(H5Lcreate_hard(d2, ".", f, "hard_y", H5P_DEFAULT, H5P_DEFAULT) >= 0);
    H5Aclose(a);
    H5Dclose(d1);
    H5Dclose(d2);
    H5Gclose(g);
    H5Sclose(sp);
    H5Pclose(lcpl);
    CHECK(H5Fclose(f) >= 0);
    CHECK(live_objects == 0);

    CHECK(H5Fis_accessible(path, fapl) > 0);
    f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    CHECK(f >= 0);
    int got[40] = {0}, u = 0;
    double gotd[40] = {0};
    hid_t x = H5Dopen2(f, "soft_x", H5P_DEFAULT);
    CHECK(x >= 0 && H5Dread(x, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
    CHECK(memcmp(got, xi, sizeof got) == 0);
    hid_t ua = H5Aopen(x, "units", H5P_DEFAULT);
    CHECK(H5Aread(ua, H5T_NATIVE_INT, &u) >= 0 && u == 42);
    H5Aclose(ua);
    hid_t y = H5Oopen(f, "hard_y", H5P_DEFAULT);
    CHECK(y >= 0 && H5Iget_type(y) == H5I_DATASET);
    CHECK(H5Dread(y, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, gotd) >= 0);
    CHECK(memcmp(gotd, yd, sizeof gotd) == 0);
    int nlinks = 0;
    CHECK(H5Literate2(f, H5_INDEX_NAME, H5_ITER_INC, NULL, count_link, &nlinks) >= 0);
    CHECK(nlinks == 4); /* a, hard_y, soft_x, y */
    H5O_info2_t oi;
    CHECK(H5Oget_info3(y, &oi, H5O_INFO_BASIC) >= 0 && oi.type == H5O_TYPE_DATASET && oi.rc == 2);
    hid_t f2 = H5Iget_file_id(x);
    CHECK(f2 >= 0);
    CHECK(H5Fget_obj_count(f, H5F_OBJ_DATASET) >= 1);
    H5Fclose(f2);
    H5Oclose(y);
    H5Dclose(x);
    CHECK(H5Fclose(f) >= 0);
    H5Pclose(fapl);
    CHECK(live_objects == 0); /* every wrapper went away */
    CHECK(files_opened - files_before >= 2);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s <scratch dir>\n", argv[0]);
        return 2;
    }
    mkdir(argv[1], 0777);
    CHECK(h5fpt_class_init(&cls, &desc) >= 0);
    hid_t conn = H5VLregister_connector(&cls, H5P_DEFAULT);
    CHECK(conn >= 0);

    /* info strings: the connector's options, under_vol by value and by name, errors */
    void *info = NULL;
    CHECK(H5VLconnector_str_to_info("level=3; tag=abc ;under_vol=0;under_info={}", conn, &info) >= 0);
    CHECK(info && ((opts_t *)((h5fpt_info_t *)info)->opts)->level == 3 && !((h5fpt_info_t *)info)->refused[0]);
    char *s = NULL;
    CHECK(H5VLconnector_info_to_str(info, conn, &s) >= 0 && s);
    CHECK(s && !strcmp(s, "level=3;tag=abc;under_vol=0;under_info={}"));
    void *again = NULL;
    int cmp = 1;
    CHECK(H5VLconnector_str_to_info(s, conn, &again) >= 0);
    CHECK(H5VLcmp_connector_info(&cmp, conn, info, again) >= 0 && cmp == 0);
    H5free_memory(s);
    H5VLfree_connector_info(conn, again);
    H5VLfree_connector_info(conn, info);
    /* A refused string still parses (HDF5 would fall back to native on a failed HDF5_VOL_CONNECTOR),
     * keeps its reason, and every file create, open or check with it fails. */
    const char *bad[][2] = {{"bogus=1", "bogus"}, {"level=12", "level=12"}, {"level", "key=value"},
                            {"under_vol=77777", "77777"}, {"under_vol=no_such_connector", "no_such_connector"},
                            {"under_info={", "braces"}, {"under_info=native", "under_info"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        info = NULL;
        CHECK(H5VLconnector_str_to_info(bad[i][0], conn, &info) >= 0 && info);
        if (!info)
            continue;
        const char *why = ((h5fpt_info_t *)info)->refused;
        if (!strstr(why, bad[i][1])) {
            fprintf(stderr, "info string '%s': reason '%s' does not name '%s'\n", bad[i][0], why, bad[i][1]);
            failures++;
        }
        hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
        CHECK(H5Pset_vol(fapl, conn, info) >= 0);
        char path[4096];
        snprintf(path, sizeof path, "%s/refused.h5", argv[1]);
        hid_t f;
        htri_t acc;
        H5E_BEGIN_TRY
        {
            f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
            acc = H5Fis_accessible(path, fapl);
        }
        H5E_END_TRY
        CHECK(f < 0 && acc < 0);
        if (f >= 0)
            H5Fclose(f);
        H5Pclose(fapl);
        H5VLfree_connector_info(conn, info);
    }
    CHECK(H5VLconnector_str_to_info("", conn, &info) >= 0 && info); /* empty: native, defaults */
    CHECK(info && ((opts_t *)((h5fpt_info_t *)info)->opts)->level == 1);
    H5VLfree_connector_info(conn, info);

    char path[4096];
    long creates0 = befores[H5FPT_FILE_CREATE];
    snprintf(path, sizeof path, "%s/native.h5", argv[1]);
    round_trip(conn, "level=3;under_vol=0;under_info={}", path, 3);
    snprintf(path, sizeof path, "%s/log.h5", argv[1]);
    round_trip(conn, "level=5;under_vol=h5flow_log;under_info={}", path, 5);
    snprintf(path, sizeof path, "%s/log-by-value.h5", argv[1]);
    round_trip(conn, "under_vol=311;under_info={}", path, 1);

    /* the observer saw every call twice and the multi-dataset write as one call of two */
    for (int op = 0; op < H5FPT_OP_COUNT; op++)
        if (befores[op] != afters[op]) {
            fprintf(stderr, "%s: %ld before, %ld after\n", h5fpt_op_name((h5fpt_op_t)op), befores[op], afters[op]);
            failures++;
        }
    CHECK(befores[H5FPT_FILE_CREATE] - creates0 == 3 && befores[H5FPT_DATASET_WRITE] >= 3 && max_write_count == 2);
    CHECK(befores[H5FPT_LINK_SPECIFIC] >= 3 && befores[H5FPT_OBJECT_OPEN] >= 3);
    CHECK(live_objects == 0);
    CHECK(H5VLunregister_connector(conn) >= 0);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("passthru core: all checks passed\n");
    return failures ? 1 : 0;
}
