/* The cache engine against the native connector, with a twin dataset written straight through HDF5 as the
 * oracle: every read through the engine (cached writes overlaid, and after migration) must equal the
 * twin's. Also: settings, the tier's directory choice and sweep, selections as runs, capacity policies.
 * Usage: hfc_test_engine <scratch dir> */
#include "hfc.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h" /* h5flow_log's C tests' CHECK and xr() */


/* Engine calls are made by connector callbacks, inside an HDF5 call: with HDF5's global lock and an API
 * context. The test makes the same conditions around each of its engine calls. */
#include <H5TSdevelop.h>
#include <H5VLconnector_passthru.h>
#include <time.h>
static void enter(void)
{
    bool got = false;
    while (H5TSmutex_acquire(1, &got) < 0 || !got) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    H5VLstart_lib_state();
}
static void leave(void)
{
    unsigned cnt = 0;
    H5VLfinish_lib_state();
    H5TSmutex_release(&cnt);
}
#define E(call) (enter(), _e = (call), leave(), _e)
static long _e;

static void test_settings(void)
{
    hfc_cfg_t c;
    hfc_cfg_defaults(&c);
    CHECK(hfc_cfg_set(&c, "capacity", "512M") == 0 && c.capacity == 512ull << 20);
    CHECK(hfc_cfg_set(&c, "capacity", "1.5GiB") == 0 && c.capacity == 3ull << 29);
    CHECK(hfc_cfg_set(&c, "capacity", "lots") != 0 && strstr(hfc_err_msg(), "capacity=lots"));
    hfc_err_clear();
    CHECK(hfc_cfg_set(&c, "policy", "write_through") == 0 && c.policy == HFC_POLICY_WRITE_THROUGH);
    CHECK(hfc_cfg_set(&c, "policy", "drop") != 0 && strstr(hfc_err_msg(), "block, write_through"));
    hfc_err_clear();
    CHECK(hfc_cfg_set(&c, "colour", "red") != 0 && strstr(hfc_err_msg(), "unknown setting 'colour'"));
    hfc_err_clear();
    char s[256];
    CHECK(hfc_cfg_to_str(&c, s, sizeof s) > 0 && !strcmp(s, "capacity=1610612736;policy=write_through"));
    /* the environment under the info keys */
    setenv("H5FLOW_CACHE_POLICY", "write_through", 1);
    setenv("H5FLOW_CACHE_CAPACITY", "1M", 1);
    hfc_cfg_t info, eff;
    hfc_cfg_defaults(&info);
    hfc_cfg_set(&info, "capacity", "2M");
    CHECK(hfc_cfg_effective(&info, &eff) == 0 && eff.capacity == 2u << 20 && eff.policy == HFC_POLICY_WRITE_THROUGH);
    setenv("H5FLOW_CACHE_CAPACITY", "huge", 1);
    CHECK(hfc_cfg_effective(&info, &eff) != 0 && strstr(hfc_err_msg(), "H5FLOW_CACHE_CAPACITY"));
    hfc_err_clear();
    unsetenv("H5FLOW_CACHE_POLICY");
    unsetenv("H5FLOW_CACHE_CAPACITY");
}

static void test_tier(const char *scratch)
{
    hfc_tier_t t;
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s/does-not-exist", scratch);
    CHECK(hfc_tier_choose(p, "info string", &t) != 0 && strstr(hfc_err_msg(), "not a writable directory"));
    hfc_err_clear();
    CHECK(hfc_tier_choose(scratch, "info string", &t) == 0 && !strcmp(t.dir, scratch));
    CHECK(hfc_tier_choose(NULL, NULL, &t) == 0 && !strcmp(t.source, "automatic") && t.dir[0]);
    /* a directory left by a dead process of this host is swept; ours is not */
    pid_t child = fork();
    if (child == 0) {
        hfc_store_t *st = hfc_store_open(scratch, 0);
        char b[16] = "x";
        hfc_loc_t l;
        hfc_store_put(st, b, 1, &l);
        _exit(st ? 0 : 1); /* exits without closing: the directory stays, as after a kill */
    }
    int status = 0;
    waitpid(child, &status, 0);
    hfc_store_t *mine = hfc_store_open(scratch, 1024);
    CHECK(mine != NULL);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    for (char *c = host; *c; c++)
        if (*c == '/' || *c == '.')
            *c = '_';
    snprintf(p, sizeof p, "%s/h5flow-cache.%s.%ld.0", scratch, host, (long)child);
    struct stat sb;
    CHECK(stat(p, &sb) == 0);
    hfc_tier_sweep(scratch);
    CHECK(stat(p, &sb) != 0 && errno == ENOENT);
    CHECK(stat(hfc_store_dir(mine), &sb) == 0);
    /* segments: a full one is deleted when its last bytes are released */
    char buf[600];
    memset(buf, 7, sizeof buf);
    hfc_loc_t a, b, c;
    CHECK(hfc_store_put(mine, buf, 600, &a) == 0);
    CHECK(hfc_store_put(mine, buf, 600, &b) == 0); /* does not fit in the first 1024-byte segment */
    CHECK(hfc_store_nsegments(mine) == 2);
    hfc_store_release(mine, &a);
    CHECK(hfc_store_nsegments(mine) == 1);
    CHECK(hfc_store_put(mine, buf, 100, &c) == 0);
    char back[100];
    CHECK(hfc_store_get(mine, &c, back) == 0 && back[0] == 7 && back[99] == 7);
    /* a mapped view of a record at an offset that is not page-aligned holds exactly its bytes */
    {
        hfc_loc_t m;
        char pat[700];
        for (int i = 0; i < 700; i++)
            pat[i] = (char)(i * 7 + 3);
        CHECK(hfc_store_put(mine, pat, 300, &m) == 0 && m.off % 4096 != 0);
        hfc_view_t view;
        const char *mp = hfc_store_map(mine, &m, &view);
        CHECK(mp != NULL && memcmp(mp, pat, 300) == 0);
        hfc_store_unmap(&view);
        CHECK(view.base == NULL);
        hfc_store_release(mine, &m);
    }
    hfc_store_release(mine, &b);
    hfc_store_release(mine, &c);
    CHECK(hfc_store_close(mine) == 0);
}

static void test_runs(void)
{
    hsize_t dims[2] = {6, 10};
    hid_t s = H5Screate_simple(2, dims, NULL);
    hsize_t st[2] = {1, 2}, cnt[2] = {2, 3};
    H5Sselect_hyperslab(s, H5S_SELECT_SET, st, NULL, cnt, NULL);
    hfc_runs_t r;
    CHECK(hfc_runs_of(s, &r) == 0 && r.n == 2 && r.npoints == 6);
    CHECK(r.runs[0].off == 12 && r.runs[0].len == 3 && r.runs[0].pos == 0);
    CHECK(r.runs[1].off == 22 && r.runs[1].len == 3 && r.runs[1].pos == 3);
    hfc_runs_free(&r);
    /* whole rows merge into one run */
    hsize_t st2[2] = {2, 0}, cnt2[2] = {3, 10};
    H5Sselect_hyperslab(s, H5S_SELECT_SET, st2, NULL, cnt2, NULL);
    CHECK(hfc_runs_of(s, &r) == 0 && r.n == 1 && r.runs[0].off == 20 && r.runs[0].len == 30);
    hfc_runs_free(&r);
    /* points keep list order as positions */
    hsize_t pts[3][2] = {{5, 9}, {0, 0}, {0, 1}};
    H5Sselect_elements(s, H5S_SELECT_SET, 3, &pts[0][0]);
    CHECK(hfc_runs_of(s, &r) == 0 && r.n == 3);
    CHECK(r.runs[0].off == 0 && r.runs[0].pos == 1 && r.runs[2].off == 59 && r.runs[2].pos == 0);
    hfc_runs_free(&r);
    H5Sclose(s);
}

/* ------------------------------------------------------------------ engine vs twin */
#define N0 40
#define N1 30

static hid_t random_sel(hid_t space, int allow_points)
{
    hid_t s = H5Scopy(space);
    int kind = (int)(xr() % (allow_points ? 3 : 2));
    if (kind == 0 || kind == 1) {
        hsize_t st[2] = {xr() % N0, xr() % N1};
        hsize_t cnt[2] = {1 + xr() % (N0 - st[0]), 1 + xr() % (N1 - st[1])};
        H5Sselect_hyperslab(s, H5S_SELECT_SET, st, NULL, cnt, NULL);
        if (kind == 1) { /* a union of two blocks, maybe overlapping */
            hsize_t st2[2] = {xr() % N0, xr() % N1};
            hsize_t cnt2[2] = {1 + xr() % (N0 - st2[0]), 1 + xr() % (N1 - st2[1])};
            H5Sselect_hyperslab(s, H5S_SELECT_OR, st2, NULL, cnt2, NULL);
        }
    }
    else {
        size_t n = 1 + xr() % 20;
        hsize_t c[20][2];
        for (size_t i = 0; i < n; i++) { /* distinct points, in random order */
            c[i][0] = (i * 7 + xr() % 3 * 100) % N0;
            c[i][1] = (i * 13) % N1;
            for (size_t j = 0; j < i; j++)
                if (c[j][0] == c[i][0] && c[j][1] == c[i][1]) {
                    n = i;
                    break;
                }
        }
        H5Sselect_elements(s, H5S_SELECT_SET, n, &c[0][0]);
    }
    return s;
}

static int reads_agree(hfc_dset_t *d, hid_t dset, hid_t twin, hid_t space, int rounds)
{
    int ok = 1;
    for (int k = 0; k < rounds; k++) {
        hid_t fs = k == 0 ? H5S_ALL : random_sel(space, 1);
        hssize_t n = k == 0 ? N0 * N1 : H5Sget_select_npoints(fs);
        hsize_t nn = (hsize_t)n;
        hid_t ms = k == 0 ? H5S_ALL : H5Screate_simple(1, &nn, NULL);
        hid_t mt = (k % 2) ? H5T_NATIVE_DOUBLE : H5T_NATIVE_INT64;
        double *a = calloc((size_t)n, 8), *b = calloc((size_t)n, 8);
        int r1 = E(hfc_dset_read(d, mt, ms, fs, H5P_DEFAULT, a, NULL));
        (void)dset;
        int r2 = H5Dread(twin, mt, ms, fs, H5P_DEFAULT, b);
        if (r1 != 0 || r2 < 0 || memcmp(a, b, (size_t)n * 8) != 0) {
            fprintf(stderr, "read %d differs from the twin (rc %d %d) %s\n", k, r1, r2, hfc_err_msg());
            ok = 0;
        }
        free(a);
        free(b);
        if (k) {
            H5Sclose(fs);
            H5Sclose(ms);
        }
    }
    return ok;
}

static void test_engine(const char *scratch, int background, hfc_policy_t policy, uint64_t capacity,
                        int chunked)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/engine-%d-%d-%d.h5", scratch, background, (int)policy, chunked);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {N0, N1};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (chunked) {
        hsize_t ch[2] = {7, 9};
        H5Pset_chunk(dcpl, 2, ch);
    }
    hid_t dset = H5Dcreate2(file, "d", H5T_STD_I32BE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    hid_t twin = H5Dcreate2(file, "twin", H5T_STD_I32BE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    hfc_cfg_t cfg;
    hfc_cfg_defaults(&cfg);
    snprintf(cfg.path, sizeof cfg.path, "%s", scratch);
    cfg.background = background;
    cfg.policy = policy;
    cfg.capacity = capacity;
    enter();
    hfc_file_t *f = hfc_file_open(&cfg, H5P_DEFAULT, 0, 0);
    leave();
    CHECK(f != NULL);
    if (!f)
        return;
    hid_t native = H5VLget_connector_id(dset);
    enter();
    hfc_dset_t *d = hfc_dset_attach(f, H5VLobject(dset), native, NULL, 0);
    leave();
    CHECK(d != NULL);
    for (int w = 0; w < 40; w++) {
        hid_t fs = random_sel(space, 1);
        hssize_t n = H5Sget_select_npoints(fs);
        double *v = malloc((size_t)n * sizeof *v);
        for (hssize_t i = 0; i < n; i++)
            v[i] = (double)(w * 1000 + i) + ((i % 3) ? 0.25 : -0.75); /* converted to int on the way */
        hsize_t nn = (hsize_t)n;
        hid_t ms = H5Screate_simple(1, &nn, NULL);
        CHECK(E(hfc_dset_write(d, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, v, NULL)) == 0);
        CHECK(H5Dwrite(twin, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, v) >= 0);
        free(v);
        H5Sclose(ms);
        H5Sclose(fs);
        if (w % 10 == 9)
            CHECK(reads_agree(d, dset, twin, space, 6));
    }
    hfc_stats_t st;
    hfc_file_stats(f, &st);
    CHECK(st.pending_bytes <= (capacity ? capacity : UINT64_MAX));
    if (policy == HFC_POLICY_WRITE_THROUGH && capacity && capacity < 4000 && !background)
        CHECK(st.written_through > 0); /* (with the thread, migration may keep up: then none goes through) */
    if (!background && capacity == 0)
        CHECK(st.pending_bytes > 0 && st.migrated_writes == 0); /* nothing moved before the drain */
    CHECK(E(hfc_file_drain(f)) == 0);
    hfc_file_stats(f, &st);
    CHECK(st.pending_bytes == 0);
    CHECK(reads_agree(d, dset, twin, space, 6));
    /* what is in the file below now equals the twin */
    int *a = malloc(N0 * N1 * sizeof *a), *b = malloc(N0 * N1 * sizeof *b);
    CHECK(H5Dread(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, a) >= 0);
    CHECK(H5Dread(twin, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) >= 0);
    CHECK(memcmp(a, b, N0 * N1 * sizeof *a) == 0);
    free(a);
    free(b);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", hfc_file_cache_dir(f));
    CHECK(E(hfc_dset_detach(d, NULL)) == 1);
    CHECK(E(hfc_file_close(f)) == 0);
    struct stat sb;
    CHECK(stat(dir, &sb) != 0); /* the cache directory is gone after the migration */
    H5Dclose(dset);
    H5Dclose(twin);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(file);
}

/* An engine without migration thread in scratch, with the native dataset dset attached as *d. */
static hfc_file_t *open_engine(const char *scratch, hid_t dset, hfc_dset_t **d)
{
    hfc_cfg_t cfg;
    hfc_cfg_defaults(&cfg);
    snprintf(cfg.path, sizeof cfg.path, "%s", scratch);
    cfg.background = 0;
    enter();
    hfc_file_t *f = hfc_file_open(&cfg, H5P_DEFAULT, 0, 0);
    *d = f ? hfc_dset_attach(f, H5VLobject(dset), H5VLget_connector_id(dset), NULL, 0) : NULL;
    leave();
    CHECK(f != NULL && *d != NULL);
    return f;
}

/* An error of the layer below (here: the file may not grow, RLIMIT_FSIZE) reaches the next drain, stays
 * until a drain succeeds, and the data is written once the cause is gone. */
static void test_error_surfaces(const char *scratch)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/err.h5", scratch);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    enum { N = 1 << 18 };
    hsize_t dims[1] = {N};
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t dset = H5Dcreate2(file, "d", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Fflush(file, H5F_SCOPE_GLOBAL);
    hfc_dset_t *d = NULL;
    hfc_file_t *f = open_engine(scratch, dset, &d);
    int *v = malloc(N * sizeof *v);
    for (int i = 0; i < N; i++)
        v[i] = i;
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = (rlim_t)N * sizeof *v + 1024; /* the cache file fits, the target file cannot grow */
    setrlimit(RLIMIT_FSIZE, &lim);
    CHECK(E(hfc_dset_write(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v, NULL)) == 0);
    H5E_BEGIN_TRY
    {
        CHECK(E(hfc_file_drain(f)) != 0);
    }
    H5E_END_TRY
    CHECK(strstr(hfc_err_msg(), "failed") && strstr(hfc_err_msg(), "stays in the cache"));
    hfc_err_clear();
    H5E_BEGIN_TRY
    {
        CHECK(E(hfc_file_drain(f)) != 0); /* still: never forgotten */
    }
    H5E_END_TRY
    hfc_err_clear();
    /* the read still returns what was written */
    int *back = calloc(N, sizeof *back);
    CHECK(E(hfc_dset_read(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back, NULL)) == 0);
    CHECK(back[N - 1] == N - 1 && back[12345] == 12345);
    setrlimit(RLIMIT_FSIZE, &old); /* the cause is gone: the next drain writes it */
    CHECK(E(hfc_file_drain(f)) == 0);
    memset(back, 0, N * sizeof *back);
    CHECK(H5Dread(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back) >= 0);
    CHECK(back[N - 1] == N - 1 && back[12345] == 12345);
    CHECK(E(hfc_dset_detach(d, NULL)) == 1);
    CHECK(E(hfc_file_close(f)) == 0);
    free(back);
    free(v);
    H5Dclose(dset);
    H5Sclose(space);
    H5Fclose(file);
}

/* A growing extent keeps cached writes (their selections move to the new extent); reads and the file
 * below then agree with a twin that was written and extended directly. */
static int grow_cb(void *arg)
{
    hid_t *a = arg; /* dataset, new dims */
    hsize_t dims[2] = {(hsize_t)a[1], (hsize_t)a[2]};
    return H5Dset_extent(a[0], dims) < 0 ? -1 : 0;
}

static void test_grow(const char *scratch)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/grow.h5", scratch);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {4, 6}, maxd[2] = {H5S_UNLIMITED, H5S_UNLIMITED}, ch[2] = {3, 4};
    hid_t space = H5Screate_simple(2, dims, maxd);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, ch);
    hid_t dset = H5Dcreate2(file, "g", H5T_NATIVE_INT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    hid_t twin = H5Dcreate2(file, "gt", H5T_NATIVE_INT, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    hfc_dset_t *d = NULL;
    hfc_file_t *f = open_engine(scratch, dset, &d);
    int v[4 * 6];
    for (int i = 0; i < 24; i++)
        v[i] = i + 1;
    hsize_t pts[3][2] = {{3, 5}, {0, 0}, {2, 1}};
    hid_t ps = H5Scopy(space);
    H5Sselect_elements(ps, H5S_SELECT_SET, 3, &pts[0][0]);
    hsize_t three = 3;
    hid_t pms = H5Screate_simple(1, &three, NULL);
    int pv[3] = {-7, -8, -9};
    CHECK(E(hfc_dset_write(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v, NULL)) == 0);
    CHECK(E(hfc_dset_write(d, H5T_NATIVE_INT, pms, ps, H5P_DEFAULT, pv, NULL)) == 0);
    H5Dwrite(twin, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
    H5Dwrite(twin, H5T_NATIVE_INT, pms, ps, H5P_DEFAULT, pv);
    hid_t arg[3] = {dset, 7, 9};
    CHECK(E(hfc_dset_set_extent(d, (hsize_t[]){7, 9}, grow_cb, arg)) == 0);
    hsize_t nd[2] = {7, 9};
    H5Dset_extent(twin, nd);
    hfc_stats_t st;
    hfc_file_stats(f, &st);
    CHECK(st.pending_bytes == (24 + 3) * sizeof(int)); /* still cached */
    hid_t big = H5Screate_simple(2, nd, NULL);
    int a[63], b[63];
    for (int round = 0; round < 2; round++) {
        memset(a, 0, sizeof a);
        CHECK(E(hfc_dset_read(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, a, NULL)) == 0);
        CHECK(H5Dread(twin, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) >= 0);
        CHECK(memcmp(a, b, sizeof a) == 0);
        if (round == 0)
            CHECK(E(hfc_file_drain(f)) == 0);
    }
    CHECK(H5Dread(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, a) >= 0);
    CHECK(memcmp(a, b, sizeof a) == 0);
    /* shrinking migrates first */
    CHECK(E(hfc_dset_write(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, b, NULL)) == 0);
    hid_t arg2[3] = {dset, 2, 2};
    CHECK(E(hfc_dset_set_extent(d, (hsize_t[]){2, 2}, grow_cb, arg2)) == 0);
    hfc_file_stats(f, &st);
    CHECK(st.pending_bytes == 0);
    CHECK(E(hfc_dset_detach(d, NULL)) == 1);
    CHECK(E(hfc_file_close(f)) == 0);
    H5Sclose(big);
    H5Sclose(pms);
    H5Sclose(ps);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Dclose(dset);
    H5Dclose(twin);
    H5Fclose(file);
}

/* Selections moved with H5Soffset_simple (file and memory side): written and read where HDF5 puts them. */
static void test_moved_selections(const char *scratch)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/moved.h5", scratch);
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[2] = {N0, N1};
    hid_t space = H5Screate_simple(2, dims, NULL);
    hid_t dset = H5Dcreate2(file, "m", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t twin = H5Dcreate2(file, "mt", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hfc_dset_t *d = NULL;
    hfc_file_t *f = open_engine(scratch, dset, &d);
    int v[12];
    for (int i = 0; i < 12; i++)
        v[i] = 100 + i;
    hsize_t st[2] = {1, 1}, cnt[2] = {3, 4};
    hid_t fs = H5Scopy(space);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, cnt, NULL);
    hssize_t off[2] = {5, 7}; /* the slab lands at [6:9, 8:12] */
    H5Soffset_simple(fs, off);
    hid_t ms = H5Screate_simple(2, cnt, NULL);
    CHECK(E(hfc_dset_write(d, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, v, NULL)) == 0);
    CHECK(H5Dwrite(twin, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, v) >= 0);
    /* a plain cached write, then a read through a moved selection */
    hsize_t st2[2] = {0, 0};
    hid_t fs2 = H5Scopy(space);
    H5Sselect_hyperslab(fs2, H5S_SELECT_SET, st2, NULL, cnt, NULL);
    CHECK(E(hfc_dset_write(d, H5T_NATIVE_INT, ms, fs2, H5P_DEFAULT, v, NULL)) == 0);
    CHECK(H5Dwrite(twin, H5T_NATIVE_INT, ms, fs2, H5P_DEFAULT, v) >= 0);
    H5Soffset_simple(fs2, off);
    int a[12], b[12];
    CHECK(E(hfc_dset_read(d, H5T_NATIVE_INT, ms, fs2, H5P_DEFAULT, a, NULL)) == 0);
    CHECK(H5Dread(twin, H5T_NATIVE_INT, ms, fs2, H5P_DEFAULT, b) >= 0);
    CHECK(memcmp(a, b, sizeof a) == 0 && a[1 * 4 + 1] == 100); /* (6, 8): the moved write's first value */
    CHECK(E(hfc_file_drain(f)) == 0);
    int all[N0 * N1], tall[N0 * N1];
    CHECK(H5Dread(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, all) >= 0);
    CHECK(H5Dread(twin, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, tall) >= 0);
    CHECK(memcmp(all, tall, sizeof all) == 0 && all[6 * N1 + 8] == 100);
    CHECK(E(hfc_dset_detach(d, NULL)) == 1);
    CHECK(E(hfc_file_close(f)) == 0);
    H5Sclose(fs);
    H5Sclose(fs2);
    H5Sclose(ms);
    H5Sclose(space);
    H5Dclose(dset);
    H5Dclose(twin);
    H5Fclose(file);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s <scratch dir>\n", argv[0]);
        return 2;
    }
    const char *scratch = argv[1];
    mkdir(scratch, 0700);
    setenv("H5FLOW_CACHE_QUIET", "1", 1);
    test_settings();
    test_tier(scratch);
    test_runs();
    test_engine(scratch, 0, HFC_POLICY_BLOCK, 0, 0);
    test_engine(scratch, 1, HFC_POLICY_BLOCK, 0, 1);
    test_engine(scratch, 1, HFC_POLICY_BLOCK, 3000, 0);
    test_engine(scratch, 1, HFC_POLICY_WRITE_THROUGH, 3000, 1);
    test_engine(scratch, 0, HFC_POLICY_WRITE_THROUGH, 3000, 0);
    test_error_surfaces(scratch);
    test_grow(scratch);
    test_moved_selections(scratch);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("h5flow_cache engine: all checks passed\n");
    return failures != 0;
}
