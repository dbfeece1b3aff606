/* h5flow_async from C, stacked on native and on h5flow_log (the plugin from HDF5_PLUGIN_PATH):
 * explicit mode (event sets), implicit mode (a write returns once its buffer is copied), program order
 * (reads see writes; sync and async calls mixed), merged and batched writes counted in the stats file,
 * a failure below reported through the event set and at close, never lost.
 *   h5fa_test_async <scratch dir> */
#include <hdf5.h>

#include <H5TSdevelop.h>

#include "../../h5flow_log/tests/check.h"

#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define ROWS 64
#define COLS 16

static char dir[2048];

/* a FAPL with h5flow_async stacked as `below` says, stats to stats_path */
static hid_t fapl_for(const char *below, const char *stats_path, const char *extra)
{
    char info[4096];
    snprintf(info, sizeof info, "stats=%s;%sunder_vol=%s;under_info={}", stats_path, extra, below);
    hid_t conn = H5VLregister_connector_by_name("h5flow_async", H5P_DEFAULT);
    CHECK(conn >= 0);
    void *vi = NULL;
    CHECK(H5VLconnector_str_to_info(info, conn, &vi) >= 0);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    CHECK(H5Pset_vol(fapl, conn, vi) >= 0);
    H5VLfree_connector_info(conn, vi);
    H5VLclose(conn);
    return fapl;
}

/* the last JSON line of the stats file: value of "key" */
static long stat_of(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[2048], last[2048] = "";
    while (fgets(line, sizeof line, f))
        strcpy(last, line);
    fclose(f);
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(last, pat);
    return p ? strtol(p + strlen(pat), NULL, 10) : -1;
}

static void row_values(int *row, int r, int gen)
{
    for (int c = 0; c < COLS; c++)
        row[c] = gen * 100000 + r * COLS + c;
}

/* whether a message of an error stack contains `part` */
static herr_t find_message(unsigned n, const H5E_error2_t *e, void *data)
{
    (void)n;
    const char **want = data;
    if (e->desc && strstr(e->desc, want[0]))
        want[1] = "found";
    return 0;
}

static int stack_says(hid_t stack, const char *part)
{
    const char *want[2] = {part, NULL};
    H5Ewalk2(stack, H5E_WALK_UPWARD, find_message, want);
    return want[1] != NULL;
}

/* A write the library below refuses (no conversion from strings to integers), queued in es: H5ESwait says it
 * failed, H5ESget_err_info names the call and carries the connector's message. */
static void refused_write_is_reported(hid_t es, hid_t d, hid_t ms, hid_t fs, const void *buf)
{
    size_t in_progress = 0, nerr = 0, ncleared = 0;
    hbool_t failed = 0;
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, sizeof(int));
    herr_t queued;
    H5E_BEGIN_TRY
    {
        queued = H5Dwrite_async(d, str, ms, fs, H5P_DEFAULT, buf, es);
        H5ESwait(es, H5ES_WAIT_FOREVER, &in_progress, &failed);
    }
    H5E_END_TRY
    H5Tclose(str);
    CHECK(queued >= 0 && failed);
    H5ES_err_info_t info;
    CHECK(H5ESget_err_count(es, &nerr) >= 0 && nerr == 1);
    if (nerr == 1 && H5ESget_err_info(es, 1, &info, &ncleared) >= 0) {
        CHECK(strstr(info.api_name, "H5Dwrite_async") != NULL);
        CHECK(stack_says(info.err_stack_id, "a background write"));
        H5ESfree_err_info(1, &info);
    }
}

/* Explicit mode: everything through one event set; rows appended one by one (merged), a read after
 * the writes sees them, a multi-dataset batch, then a failing write reported by H5ESwait/get_err. */
static void explicit_mode(const char *below, const char *tag)
{
    char path[4096], stats[4096];
    snprintf(path, sizeof path, "%s/explicit-%s.h5", dir, tag);
    snprintf(stats, sizeof stats, "%s/explicit-%s.stats", dir, tag);
    remove(stats);
    hid_t fapl = fapl_for(below, stats, "defer=1;"); /* starts when waited for: every row merges */
    hid_t es = H5EScreate();
    hid_t f = H5Fcreate_async(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl, es);
    CHECK(f >= 0);
    hsize_t dims[2] = {ROWS, COLS};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t d = H5Dcreate_async(f, "rows", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT, es);
    hid_t e = H5Dcreate_async(f, "other", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT, es);
    CHECK(d >= 0 && e >= 0);
    int row[COLS];
    hsize_t one[2] = {1, COLS};
    hid_t ms = H5Screate_simple(2, one, NULL);
    for (int r = 0; r < ROWS; r++) {
        hsize_t start[2] = {(hsize_t)r, 0};
        hid_t fs = H5Scopy(sp);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, one, NULL);
        row_values(row, r, 1);
        CHECK(H5Dwrite_async(d, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, row, es) >= 0);
        memset(row, 0xff, sizeof row); /* the connector copied it */
        H5Sclose(fs);
    }
    /* read after write, through the same event set: sees every row */
    int *got = calloc(ROWS * COLS, sizeof *got);
    CHECK(H5Dread_async(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got, es) >= 0);
    /* a whole-dataset write to the other dataset, then a sync overwrite of one row (mixing is safe) */
    int *all = malloc(ROWS * COLS * sizeof *all);
    for (int i = 0; i < ROWS * COLS; i++)
        all[i] = -i;
    CHECK(H5Dwrite_async(e, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, all, es) >= 0);
    hsize_t start5[2] = {5, 0};
    hid_t fs5 = H5Scopy(sp);
    H5Sselect_hyperslab(fs5, H5S_SELECT_SET, start5, NULL, one, NULL);
    row_values(row, 5, 2);
    CHECK(H5Dwrite(e, H5T_NATIVE_INT, ms, fs5, H5P_DEFAULT, row) >= 0);
    size_t in_progress = 0;
    hbool_t failed = 0;
    CHECK(H5ESwait(es, H5ES_WAIT_FOREVER, &in_progress, &failed) >= 0);
    CHECK(in_progress == 0 && !failed);
    for (int r = 0; r < ROWS; r++) {
        row_values(row, r, 1);
        if (memcmp(got + r * COLS, row, sizeof row)) {
            fprintf(stderr, "%s: row %d read after the queued writes differs\n", tag, r);
            failures++;
            break;
        }
    }
    int *got_e = calloc(ROWS * COLS, sizeof *got_e);
    CHECK(H5Dread(e, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got_e) >= 0);
    row_values(row, 5, 2);
    CHECK(got_e[0] == 0 && got_e[6 * COLS] == -6 * COLS && memcmp(got_e + 5 * COLS, row, sizeof row) == 0);

    refused_write_is_reported(es, d, ms, fs5, row);
    H5Sclose(fs5);
    H5Sclose(ms);
    H5Sclose(sp);
    H5Dclose(d);
    H5Dclose(e);
    /* the failure is also reported once at close: the close changes nothing, the handle stays valid and
     * usable (a close that closed the file below left the next call on it a freed object), the second
     * close succeeds */
    herr_t rc;
    H5E_BEGIN_TRY { rc = H5Fclose(f); }
    H5E_END_TRY
    CHECK(rc < 0);
    CHECK(H5Lexists(f, "rows", H5P_DEFAULT) > 0);
    hid_t again = H5Dopen2(f, "rows", H5P_DEFAULT);
    CHECK(again >= 0 && H5Dread(again, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
    int first[COLS];
    row_values(first, 0, 1);
    CHECK(memcmp(got, first, sizeof first) == 0);
    H5Dclose(again);
    CHECK(H5Fclose(f) >= 0);
    CHECK(H5ESclose(es) >= 0);
    H5Pclose(fapl);
    /* ROWS single-row writes became one call below; failures counted */
    CHECK(stat_of(stats, "merged") == ROWS - 1);
    CHECK(stat_of(stats, "failures") == 1);
    free(got);
    free(got_e);
    free(all);
}

/* Implicit mode: plain H5Dwrite returns once the buffer is copied; rows of several datasets; a tight
 * memory bound makes writes wait, never lose; the file reopened has every value. */
static void implicit_mode(const char *below, const char *tag, const char *extra, int expect_merge)
{
    char path[4096], stats[4096];
    snprintf(path, sizeof path, "%s/implicit-%s.h5", dir, tag);
    snprintf(stats, sizeof stats, "%s/implicit-%s.stats", dir, tag);
    remove(stats);
    hid_t fapl = fapl_for(below, stats, extra);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(f >= 0);
    hsize_t dims[2] = {ROWS, COLS}, one[2] = {1, COLS};
    hid_t sp = H5Screate_simple(2, dims, NULL), ms = H5Screate_simple(2, one, NULL);
    hid_t ds[3];
    for (int k = 0; k < 3; k++) {
        char name[16];
        snprintf(name, sizeof name, "d%d", k);
        ds[k] = H5Dcreate2(f, name, H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        CHECK(ds[k] >= 0);
    }
    int row[COLS];
    for (int r = 0; r < ROWS; r++)
        for (int k = 0; k < 3; k++) {
            hsize_t start[2] = {(hsize_t)r, 0};
            hid_t fs = H5Scopy(sp);
            H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, one, NULL);
            row_values(row, r, k);
            CHECK(H5Dwrite(ds[k], H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, row) >= 0);
            memset(row, 0xab, sizeof row);
            H5Sclose(fs);
        }
    /* read back before close: sees every write */
    int *got = calloc(ROWS * COLS, sizeof *got);
    CHECK(H5Dread(ds[1], H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
    row_values(row, ROWS - 1, 1);
    CHECK(memcmp(got + (ROWS - 1) * COLS, row, sizeof row) == 0);
    for (int k = 0; k < 3; k++)
        H5Dclose(ds[k]);
    H5Sclose(ms);
    H5Sclose(sp);
    CHECK(H5Fclose(f) >= 0);
    CHECK(stat_of(stats, "writes") == 3 * ROWS && stat_of(stats, "failures") == 0);
    if (expect_merge > 0) /* deferred: each row of the three datasets is one multi-dataset call */
        CHECK(stat_of(stats, "calls_below") == ROWS && stat_of(stats, "multi_calls") == ROWS);
    else if (expect_merge == 0)
        CHECK(stat_of(stats, "merged") == 0 && stat_of(stats, "multi_calls") == 0);

    /* natively readable (when native stores it), every value */
    hid_t rf = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    CHECK(rf >= 0);
    for (int k = 0; k < 3; k++) {
        char name[16];
        snprintf(name, sizeof name, "d%d", k);
        hid_t d = H5Dopen2(rf, name, H5P_DEFAULT);
        CHECK(H5Dread(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
        for (int r = 0; r < ROWS; r++) {
            row_values(row, r, k);
            if (memcmp(got + r * COLS, row, sizeof row)) {
                fprintf(stderr, "%s: d%d row %d differs after reopening\n", tag, k, r);
                failures++;
                break;
            }
        }
        H5Dclose(d);
    }
    H5Fclose(rf);
    H5Pclose(fapl);
    free(got);
}

/* explicit_copy: with 0, an H5Dwrite_async is written from the program's buffer (defer=1 keeps it queued
 * until the wait, so a change made to the buffer before the wait lands: that is the contract; with 1 the
 * value at the call lands). The spaces are the connector's copies (the program closes its own at once);
 * several datasets with memory selections of their own go below in one multi-dataset call; a read queued
 * after the writes sees them; nothing waits on max_mem, nothing merges into a copy; a failed uncopied
 * write is reported through the event set and at close; `uncopied` counts them. */
static void explicit_buffers(const char *below, const char *tag, int copy)
{
    char path[4096], stats[4096], extra[128];
    snprintf(path, sizeof path, "%s/borrow-%s-%d.h5", dir, tag, copy);
    snprintf(stats, sizeof stats, "%s/borrow-%s-%d.stats", dir, tag, copy);
    /* max_mem below one write: a copied write that large would run at the call, an uncopied one is queued */
    snprintf(extra, sizeof extra, "defer=1;explicit_copy=%d;%s", copy, copy ? "" : "max_mem=1K;");
    remove(stats);
    hid_t fapl = fapl_for(below, stats, extra);
    hid_t es = H5EScreate();
    hid_t f = H5Fcreate_async(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl, es);
    CHECK(f >= 0);
    hsize_t dims[2] = {ROWS, COLS}, one[2] = {1, COLS}, rest[2] = {ROWS - 1, COLS}, n = ROWS * COLS;
    hsize_t twice = 2 * n, stride = 2, blk = 1;
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t d = H5Dcreate_async(f, "rows", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT, es);
    hid_t e = H5Dcreate_async(f, "whole", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT, es);
    hid_t g = H5Dcreate_async(f, "strided", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT, es);
    CHECK(d >= 0 && e >= 0 && g >= 0);
    size_t in_progress = 0;
    hbool_t failed = 0;

    /* row 0 from `row`, changed after the call and before the wait */
    int row[COLS];
    hsize_t zero[2] = {0, 0}, first[2] = {1, 0};
    hid_t ms = H5Screate_simple(2, one, NULL), fs = H5Scopy(sp);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, zero, NULL, one, NULL);
    row_values(row, 0, 1);
    CHECK(H5Dwrite_async(d, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, row, es) >= 0);
    H5Sclose(ms);
    H5Sclose(fs);
    row_values(row, 0, 2);
    CHECK(H5ESwait(es, H5ES_WAIT_FOREVER, &in_progress, &failed) >= 0 && in_progress == 0 && !failed);
    row_values(row, 0, 3); /* after the wait: the file keeps what was there at the wait */

    /* rows 1.. of `rows` from rows 1.. of a whole buffer; all of `whole`; `strided` from every second
     * element of a buffer twice as long; each program space closed at once */
    int *all = malloc(n * sizeof *all), *whole = malloc(n * sizeof *whole), *sparse = malloc(twice * sizeof *sparse);
    for (hsize_t i = 0; i < n; i++) {
        all[i] = (int)i + 7;
        whole[i] = -(int)i;
        sparse[2 * i] = (int)i * 3;
        sparse[2 * i + 1] = -1;
    }
    ms = H5Screate_simple(2, dims, NULL);
    fs = H5Scopy(sp);
    H5Sselect_hyperslab(ms, H5S_SELECT_SET, first, NULL, rest, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, first, NULL, rest, NULL);
    CHECK(H5Dwrite_async(d, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, all, es) >= 0);
    H5Sclose(ms);
    H5Sclose(fs);
    CHECK(H5Dwrite_async(e, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, whole, es) >= 0);
    hsize_t start0 = 0;
    ms = H5Screate_simple(1, &twice, NULL);
    H5Sselect_hyperslab(ms, H5S_SELECT_SET, &start0, &stride, &n, &blk);
    CHECK(H5Dwrite_async(g, H5T_NATIVE_INT, ms, H5S_ALL, H5P_DEFAULT, sparse, es) >= 0);
    H5Sclose(ms);
    int *got = calloc(n, sizeof *got), *got_e = calloc(n, sizeof *got_e);
    CHECK(H5Dread_async(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got, es) >= 0);
    CHECK(H5ESwait(es, H5ES_WAIT_FOREVER, &in_progress, &failed) >= 0 && in_progress == 0 && !failed);
    row_values(row, 0, copy ? 1 : 2);
    if (memcmp(got, row, sizeof row))
        fprintf(stderr, "%s: row 0 is not the buffer's value %s\n", tag, copy ? "at the call" : "at the wait"),
            failures++;
    CHECK(got[COLS] == COLS + 7 && got[n - 1] == (int)n - 1 + 7);
    CHECK(H5Dread(e, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got_e) >= 0);
    CHECK(got_e[1] == -1 && got_e[n - 1] == -(int)(n - 1));
    CHECK(H5Dread(g, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got_e) >= 0);
    CHECK(got_e[1] == 3 && got_e[n - 1] == 3 * (int)(n - 1));

    refused_write_is_reported(es, d, H5S_ALL, H5S_ALL, all); /* uncopied or not */
    H5Sclose(sp);
    H5Dclose(d);
    H5Dclose(e);
    H5Dclose(g);
    herr_t rc;
    H5E_BEGIN_TRY { rc = H5Fclose(f); } /* reported once more at close, then closed */
    H5E_END_TRY
    CHECK(rc < 0);
    CHECK(H5Fclose(f) >= 0);
    CHECK(H5ESclose(es) >= 0);
    H5Pclose(fapl);
    CHECK(stat_of(stats, "writes") == 5 && stat_of(stats, "queued") == 5 && stat_of(stats, "ran_at_call") == 0);
    CHECK(stat_of(stats, "uncopied") == (copy ? 0 : 5) && stat_of(stats, "merged") == 0);
    /* row 0; the three datasets as one multi-dataset call; the failed write */
    CHECK(stat_of(stats, "calls_below") == 3 && stat_of(stats, "multi_calls") == 1);
    CHECK(stat_of(stats, "failures") == 1);
    /* the file, reopened, holds row 0 as it was at the wait, not as changed after it */
    hid_t rf = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t rd = H5Dopen2(rf, "rows", H5P_DEFAULT);
    CHECK(H5Dread(rd, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
    row_values(row, 0, copy ? 1 : 2);
    CHECK(memcmp(got, row, sizeof row) == 0 && got[COLS] == COLS + 7);
    H5Dclose(rd);
    H5Fclose(rf);
    free(all);
    free(whole);
    free(sparse);
    free(got);
    free(got_e);
}

/* Implicit mode: a failing queued write is reported at the next flush; the next close succeeds. */
static void implicit_failure(const char *below, const char *tag)
{
    char path[4096], stats[4096];
    snprintf(path, sizeof path, "%s/fail-%s.h5", dir, tag);
    snprintf(stats, sizeof stats, "%s/fail-%s.stats", dir, tag);
    hid_t fapl = fapl_for(below, stats, "");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    hsize_t n = 8;
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t d = H5Dcreate2(f, "x", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t str = H5Tcopy(H5T_C_S1); /* no conversion to integers: the library below refuses the write */
    H5Tset_size(str, sizeof(int));
    int v[8] = {7};
    herr_t queued, flushed, closed;
    H5E_BEGIN_TRY
    {
        queued = H5Dwrite(d, str, H5S_ALL, H5S_ALL, H5P_DEFAULT, v);
        flushed = H5Fflush(f, H5F_SCOPE_GLOBAL);
    }
    H5E_END_TRY
    H5Tclose(str);
    CHECK(queued >= 0); /* it returned once copied */
    CHECK(flushed < 0); /* and its failure came back */
    H5Dclose(d);
    H5Sclose(sp);
    H5E_BEGIN_TRY { closed = H5Fclose(f); }
    H5E_END_TRY
    CHECK(closed >= 0); /* reported once, at the flush */
    H5Pclose(fapl);
}

/* A file selection moved with H5Soffset_simple lands where the offset puts it. */
static void offset_selection(const char *below, const char *tag)
{
    char path[4096], stats[4096];
    snprintf(path, sizeof path, "%s/offset-%s.h5", dir, tag);
    snprintf(stats, sizeof stats, "%s/offset-%s.stats", dir, tag);
    hid_t fapl = fapl_for(below, stats, "");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    hsize_t n = 16, start = 2, count = 4;
    hssize_t shift = 5;
    hid_t sp = H5Screate_simple(1, &n, NULL);
    hid_t d = H5Dcreate2(f, "x", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t fs = H5Scopy(sp), ms = H5Screate_simple(1, &count, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    H5Soffset_simple(fs, &shift); /* elements 7..10 */
    int v[4] = {71, 72, 73, 74}, got[16];
    CHECK(H5Dwrite(d, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, v) >= 0);
    CHECK(H5Dread(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
    for (int i = 0; i < 16; i++) {
        int want = (i >= 7 && i <= 10) ? 71 + (i - 7) : 0;
        if (got[i] != want) {
            fprintf(stderr, "%s: element %d is %d, not %d (selection offset lost)\n", tag, i, got[i], want);
            failures++;
            break;
        }
    }
    /* and a memory selection moved the same way: elements 3..6 of an 8-element buffer go to 0..3 */
    hsize_t eight = 8, zero = 0, mstart = 1;
    hssize_t mshift = 2;
    int src[8] = {0, 0, 0, 91, 92, 93, 94, 0};
    hid_t m8 = H5Screate_simple(1, &eight, NULL), f0 = H5Scopy(sp);
    H5Sselect_hyperslab(m8, H5S_SELECT_SET, &mstart, NULL, &count, NULL);
    H5Soffset_simple(m8, &mshift);
    H5Sselect_hyperslab(f0, H5S_SELECT_SET, &zero, NULL, &count, NULL);
    CHECK(H5Dwrite(d, H5T_NATIVE_INT, m8, f0, H5P_DEFAULT, src) >= 0);
    CHECK(H5Dread(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
    CHECK(got[0] == 91 && got[3] == 94 && got[7] == 71);
    H5Sclose(m8);
    H5Sclose(f0);
    H5Sclose(fs);
    H5Sclose(ms);
    H5Sclose(sp);
    H5Dclose(d);
    CHECK(H5Fclose(f) >= 0);
    H5Pclose(fapl);
}

/* Copy buffers reused: many queued writes of different sizes (pooled and not, one contiguous run of a
 * larger memory buffer copied at an offset, and a scattered memory selection gathered), each from a buffer
 * the program scribbles on as soon as the write returns, under a memory bound that keeps buffers going
 * back to the pool and out again. Every row reads back bit-identical, and buffers were reused. */
#define PCOLS (96 * 1024) /* 384 KiB rows of int */
#define PROWS 40
static int pool_value(int r, int i) { return (int)((unsigned)r * 2654435761u ^ (unsigned)i * 40503u); }

static void pool_reuse(const char *below, const char *tag)
{
    char path[4096], stats[4096];
    snprintf(path, sizeof path, "%s/pool-%s.h5", dir, tag);
    snprintf(stats, sizeof stats, "%s/pool-%s.stats", dir, tag);
    remove(stats);
    hid_t fapl = fapl_for(below, stats, "max_mem=2M;merge=0;");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(f >= 0);
    hsize_t dims[2] = {PROWS, PCOLS}, mdims[2] = {4, PCOLS};
    hid_t sp = H5Screate_simple(2, dims, NULL), ms = H5Screate_simple(2, mdims, NULL);
    hid_t d = H5Dcreate2(f, "d", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(d >= 0);
    int *mem = malloc(sizeof(int) * 4 * PCOLS), *want = calloc((size_t)PROWS * PCOLS, sizeof(int));
    for (int r = 0; r < PROWS; r++) {
        hsize_t len = PCOLS - (hsize_t)(r % 5) * (PCOLS / 6); /* 384 KiB down to 128 KiB */
        hsize_t fstart[2] = {(hsize_t)r, 0}, fcount[2] = {1, len};
        hid_t fs = H5Scopy(sp);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, fstart, NULL, fcount, NULL);
        hid_t msel = H5Scopy(ms);
        int *w = want + (size_t)r * PCOLS;
        if (r % 3 == 2) { /* two half rows of the memory buffer: gathered */
            hsize_t mstart[2] = {1, 0}, mcount[2] = {2, len / 2};
            H5Sselect_hyperslab(msel, H5S_SELECT_SET, mstart, NULL, mcount, NULL);
            for (hsize_t i = 0; i < len / 2; i++) {
                mem[1 * PCOLS + i] = w[i] = pool_value(r, (int)i);
                mem[2 * PCOLS + i] = w[len / 2 + i] = pool_value(r, (int)(len / 2 + i));
            }
        }
        else { /* one run of row r % 4: copied at its offset */
            hsize_t mstart[2] = {(hsize_t)(r % 4), 0}, mcount[2] = {1, len};
            H5Sselect_hyperslab(msel, H5S_SELECT_SET, mstart, NULL, mcount, NULL);
            for (hsize_t i = 0; i < len; i++)
                mem[(r % 4) * PCOLS + i] = w[i] = pool_value(r, (int)i);
        }
        CHECK(H5Dwrite(d, H5T_NATIVE_INT, msel, fs, H5P_DEFAULT, mem) >= 0);
        memset(mem, 0xab, sizeof(int) * 4 * PCOLS); /* the program's buffer is its own again */
        H5Sclose(msel);
        H5Sclose(fs);
    }
    H5Dclose(d);
    H5Sclose(ms);
    H5Sclose(sp);
    CHECK(H5Fclose(f) >= 0);
    CHECK(stat_of(stats, "writes") == PROWS && stat_of(stats, "failures") == 0);
    CHECK(stat_of(stats, "buffers_reused") > 0);
    hid_t rf = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    CHECK(rf >= 0);
    hid_t rd = H5Dopen2(rf, "d", H5P_DEFAULT);
    int *got = malloc(sizeof(int) * (size_t)PROWS * PCOLS);
    CHECK(H5Dread(rd, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
    for (int r = 0; r < PROWS; r++)
        if (memcmp(got + (size_t)r * PCOLS, want + (size_t)r * PCOLS, sizeof(int) * PCOLS)) {
            fprintf(stderr, "%s: pooled write of row %d differs after reopening\n", tag, r);
            failures++;
            break;
        }
    H5Dclose(rd);
    H5Fclose(rf);
    H5Pclose(fapl);
    free(got);
    free(want);
    free(mem);
}

/* The adaptive rule for large writes (adapt=, 1 MiB by default). */
#define AROWS 8
#define ACOLS (512 * 1024) /* 2 MiB rows */

static int adapt_value(int r, size_t i) { return (int)((unsigned)r * 2246822519u ^ (unsigned)i * 3266489917u); }

/* Rows rows..rows+n-1 of the program's buffer written back to back, each scribbled on after its call. */
static void adapt_rows(hid_t d, int *mem, int from, int n)
{
    hsize_t dims[2] = {AROWS, ACOLS}, one[2] = {1, ACOLS};
    hid_t fs = H5Screate_simple(2, dims, NULL), ms = H5Screate_simple(2, dims, NULL);
    for (int r = from; r < from + n; r++) {
        hsize_t start[2] = {(hsize_t)r, 0};
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, one, NULL);
        H5Sselect_hyperslab(ms, H5S_SELECT_SET, start, NULL, one, NULL);
        CHECK(H5Dwrite(d, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, mem) >= 0);
        int *row = mem + (size_t)r * ACOLS; /* the program's buffer is its own again */
        row[0] ^= 0x5a5a5a5a;
        row[ACOLS - 1] ^= 0x5a5a5a5a;
    }
    H5Sclose(ms);
    H5Sclose(fs);
}

/* Reopen path and compare rows [0, n) of dataset name with adapt_value. */
static void adapt_check(const char *path, const char *name, int n, const char *tag)
{
    hid_t rf = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t rd = H5Dopen2(rf, name, H5P_DEFAULT);
    int *got = malloc(sizeof(int) * (size_t)AROWS * ACOLS);
    CHECK(rd >= 0 && got && H5Dread(rd, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < ACOLS; i++)
            if (got[(size_t)r * ACOLS + i] != adapt_value(r, i)) {
                fprintf(stderr, "%s: %s row %d differs at %zu after reopening\n", tag, name, r, i);
                failures++;
                r = n;
                break;
            }
    H5Dclose(rd);
    H5Fclose(rf);
    free(got);
}

static hid_t adapt_dataset(hid_t f, const char *name)
{
    hsize_t dims[2] = {AROWS, ACOLS};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    hid_t d = H5Dcreate2(f, name, H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Sclose(sp);
    CHECK(d >= 0);
    return d;
}

static void adapt_fill(int *mem)
{
    for (int r = 0; r < AROWS; r++)
        for (size_t i = 0; i < ACOLS; i++)
            mem[(size_t)r * ACOLS + i] = adapt_value(r, i);
}

/* Back-to-back large writes run at the call (after the queue, uncopied) and read back bit-identical; a write
 * after time spent computing is queued, whether the write before it was queued or ran at the call; a queued write
 * that fails below is still reported at the next flush when the write after it ran at the call; adapt=off
 * queues every write. */
static void adaptive(const char *below, const char *tag)
{
    char path[4096], stats[4096];
    int *mem = malloc(sizeof(int) * (size_t)AROWS * ACOLS);
    CHECK(mem != NULL);
    adapt_fill(mem);

    snprintf(path, sizeof path, "%s/adapt-%s.h5", dir, tag);
    snprintf(stats, sizeof stats, "%s/adapt-%s.stats", dir, tag);
    remove(stats);
    hid_t fapl = fapl_for(below, stats, "");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    hid_t d = adapt_dataset(f, "d");
    adapt_rows(d, mem, 0, AROWS - 1);                       /* the first queued, the next ones at the call */
    nanosleep(&(struct timespec){0, 150000000L}, NULL);      /* "compute" 150 ms */
    adapt_rows(d, mem, AROWS - 1, 1);                       /* queued */
    H5Dclose(d);
    CHECK(H5Fclose(f) >= 0);
    long at_call = stat_of(stats, "ran_at_call"), queued = stat_of(stats, "queued");
    CHECK(stat_of(stats, "writes") == AROWS && stat_of(stats, "failures") == 0);
    CHECK(at_call + queued == AROWS);
    CHECK(at_call >= 3 && queued >= 2);
    adapt_fill(mem);
    adapt_check(path, "d", AROWS, tag);

    /* writes after a wait for the queue and time spent computing are queued */
    snprintf(path, sizeof path, "%s/adapt-wait-%s.h5", dir, tag);
    snprintf(stats, sizeof stats, "%s/adapt-wait-%s.stats", dir, tag);
    remove(stats);
    H5Pclose(fapl);
    fapl = fapl_for(below, stats, "");
    f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    d = adapt_dataset(f, "d");
    for (int r = 0; r < 4; r++) { /* the queue empty (flush), then "compute" far longer than a copy takes */
        CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0);
        nanosleep(&(struct timespec){0, 150000000L}, NULL);
        adapt_rows(d, mem, r, 1);
    }
    CHECK(H5Fflush(f, H5F_SCOPE_GLOBAL) >= 0);
    /* a queued write (small: always queued) fails below; the large write right after it runs at the call when it
     * finds the failing one still queued: the failure is reported at the flush all the same */
    hid_t str = H5Tcopy(H5T_C_S1); /* no conversion to integers: the library below refuses the write */
    H5Tset_size(str, sizeof(int));
    hsize_t dims[2] = {AROWS, ACOLS}, one[2] = {1, 1000}, start[2] = {5, 0};
    hid_t fs = H5Screate_simple(2, dims, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, one, NULL);
    hid_t ms = H5Screate_simple(2, one, NULL);
    herr_t bad, flushed;
    H5E_BEGIN_TRY
    {
        bad = H5Dwrite(d, str, ms, fs, H5P_DEFAULT, mem + 5 * (size_t)ACOLS);
        adapt_rows(d, mem, 4, 1);
        flushed = H5Fflush(f, H5F_SCOPE_GLOBAL);
    }
    H5E_END_TRY
    CHECK(bad >= 0);     /* queued */
    CHECK(flushed < 0);  /* its failure came back */
    H5Sclose(ms);
    H5Sclose(fs);
    H5Tclose(str);
    H5Dclose(d);
    CHECK(H5Fclose(f) >= 0);
    CHECK(stat_of(stats, "writes") == 6 && stat_of(stats, "failures") == 1);
    CHECK(stat_of(stats, "queued") >= 5 && stat_of(stats, "queued") + stat_of(stats, "ran_at_call") == 6);
    adapt_fill(mem);
    adapt_check(path, "d", 5, tag);

    /* adapt=off: back-to-back writes are all queued */
    H5Pclose(fapl);
    snprintf(path, sizeof path, "%s/adapt-off-%s.h5", dir, tag);
    snprintf(stats, sizeof stats, "%s/adapt-off-%s.stats", dir, tag);
    remove(stats);
    fapl = fapl_for(below, stats, "adapt=off;");
    f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    d = adapt_dataset(f, "d");
    adapt_rows(d, mem, 0, 4);
    H5Dclose(d);
    CHECK(H5Fclose(f) >= 0);
    CHECK(stat_of(stats, "queued") == 4 && stat_of(stats, "ran_at_call") == 0);
    adapt_fill(mem);
    adapt_check(path, "d", 4, tag);
    H5Pclose(fapl);
    free(mem);
}

/* A ROWS x COLS dataset "d" of ints in a new file at path (created through fapl), left open. */
static hid_t new_rows_file(const char *path, hid_t fapl, hid_t *d)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(f >= 0);
    hsize_t dims[2] = {ROWS, COLS};
    hid_t sp = H5Screate_simple(2, dims, NULL);
    *d = H5Dcreate2(f, "d", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(*d >= 0);
    H5Sclose(sp);
    return f;
}

/* Every row of dataset d through h5dread equals generation gen. */
static void check_rows(hid_t d, int gen, const char *what)
{
    int *got = calloc(ROWS * COLS, sizeof *got), row[COLS];
    CHECK(H5Dread(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, got) >= 0);
    for (int r = 0; r < ROWS; r++) {
        row_values(row, r, gen);
        if (memcmp(got + r * COLS, row, sizeof row)) {
            fprintf(stderr, "%s: row %d differs from what was written\n", what, r);
            failures++;
            break;
        }
    }
    free(got);
}

/* Write generation gen into every row of d (whole dataset, one call). */
static void write_rows(hid_t d, int gen, hid_t es)
{
    int *mem = malloc(ROWS * COLS * sizeof *mem);
    for (int r = 0; r < ROWS; r++)
        row_values(mem + r * COLS, r, gen);
    CHECK((es >= 0 ? H5Dwrite_async(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, mem, es)
                   : H5Dwrite(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, mem)) >= 0);
    memset(mem, 0xab, ROWS * COLS * sizeof *mem); /* the queued copy, not this buffer, is written */
    free(mem);
}

/* Two handles of one file share one file below: a read through the second sees a write still queued
 * through the first; the same through an external link, whose dataset lies in another file than its handle. */
static void second_handle(const char *below, const char *tag, int external)
{
    char path[4096], stats[4096], other[4096];
    snprintf(path, sizeof path, "%s/twice-%s.h5", dir, tag);
    snprintf(other, sizeof other, "%s/twice-%s-link.h5", dir, tag);
    snprintf(stats, sizeof stats, "%s/twice-%s.stats", dir, tag);
    hid_t fapl = fapl_for(below, stats, "defer=1;"); /* queued work waits until something needs it */
    hid_t d1 = H5I_INVALID_HID;
    hid_t f1 = new_rows_file(path, fapl, &d1);
    hid_t f2 = H5I_INVALID_HID, d2 = H5I_INVALID_HID;
    if (external) { /* a second file whose "e" is an external link to the first file's "d" */
        f2 = H5Fcreate(other, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
        CHECK(f2 >= 0 && H5Lcreate_external(path, "d", f2, "e", H5P_DEFAULT, H5P_DEFAULT) >= 0);
        d2 = H5Dopen2(f2, "e", H5P_DEFAULT);
    }
    else {
        f2 = H5Fopen(path, H5F_ACC_RDONLY, fapl);
        CHECK(f2 >= 0);
        d2 = H5Dopen2(f2, "d", H5P_DEFAULT);
    }
    CHECK(d2 >= 0);
    write_rows(d1, 1, H5I_INVALID_HID); /* queued after both handles are open */
    check_rows(d2, 1, tag);
    if (external) { /* and the other way round: written through the link, read through the file's handle */
        write_rows(d2, 2, H5I_INVALID_HID);
        check_rows(d1, 2, tag);
    }
    H5Dclose(d2);
    CHECK(H5Fclose(f2) >= 0);
    H5Dclose(d1);
    CHECK(H5Fclose(f1) >= 0);
    H5Pclose(fapl);
}

/* Waits are per file: with a write to file A queued (deferred, so it stays queued until something needs it),
 * a read, a flush and a close of file B neither wait for it nor start it; A's own read then does. */
static void per_file_waits(const char *below, const char *tag)
{
    char pa[4096], pb[4096], sa[4096], sb[4096];
    snprintf(pa, sizeof pa, "%s/perfile-%s-a.h5", dir, tag);
    snprintf(pb, sizeof pb, "%s/perfile-%s-b.h5", dir, tag);
    snprintf(sa, sizeof sa, "%s/perfile-%s-a.stats", dir, tag);
    snprintf(sb, sizeof sb, "%s/perfile-%s-b.stats", dir, tag);
    remove(sa);
    remove(sb);
    hid_t fa = fapl_for(below, sa, "defer=1;"), fb = fapl_for(below, sb, "defer=1;");
    hid_t da = H5I_INVALID_HID, db = H5I_INVALID_HID;
    hid_t a = new_rows_file(pa, fa, &da), b = new_rows_file(pb, fb, &db);
    write_rows(db, 3, H5I_INVALID_HID);
    CHECK(H5Fflush(b, H5F_SCOPE_LOCAL) >= 0); /* B's own write done before A's is queued */
    hid_t es = H5EScreate();
    write_rows(da, 4, es);
    check_rows(db, 3, "file B while A's write is queued");
    CHECK(H5Fflush(b, H5F_SCOPE_LOCAL) >= 0);
    /* A's write is still queued: nothing of B needed it (a timeout of 0 looks without waiting) */
    size_t in_progress = 0;
    hbool_t err = 0;
    CHECK(H5ESwait(es, 0, &in_progress, &err) >= 0 && in_progress == 1 && !err);
    H5Dclose(db);
    CHECK(H5Fclose(b) >= 0);
    CHECK(stat_of(sb, "waits") == 1); /* the first flush, for B's own write */
    check_rows(da, 4, "file A after its queued write");
    CHECK(H5ESwait(es, H5ES_WAIT_FOREVER, &in_progress, &err) >= 0 && in_progress == 0 && !err);
    H5ESclose(es);
    H5Dclose(da);
    CHECK(H5Fclose(a) >= 0);
    /* A's read may or may not have found its write still queued: the H5ESwait above, a test that finds the
     * request in progress, lets deferred work start (a program that only tests must not wait for ever), so the
     * background thread may have written it already. */
    CHECK(stat_of(sa, "waits") <= 1 && stat_of(sa, "failures") == 0);
    H5Pclose(fa);
    H5Pclose(fb);
}

/* A serial file through the connector leaves MPI alone: telling a parallel file from a serial one must not
 * initialize MPI (registering HDF5's subfiling driver does: tens of milliseconds at the first open, and a
 * program that initializes MPI later then fails). Runs first, before anything else could initialize MPI. */
static void serial_open_leaves_mpi_alone(const char *below, const char *tag)
{
    char path[4096], stats[4096];
    snprintf(path, sizeof path, "%s/serial-%s.h5", dir, tag);
    snprintf(stats, sizeof stats, "%s/serial-%s.stats", dir, tag);
    hid_t fapl = fapl_for(below, stats, "");
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(f >= 0);
    CHECK(H5Fclose(f) >= 0);
    f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    CHECK(f >= 0);
    CHECK(H5Fclose(f) >= 0);
    H5Pclose(fapl);
    int inited = 1;
    MPI_Initialized(&inited);
    CHECK(inited == 0);
}

/* A thread that holds HDF5's library lock across a call into the connector (h5flow_cache's migration
 * thread does: it takes the lock with H5TSmutex_acquire and migrates for a few ms) must keep it for the whole
 * call, also when the connector waits for its queue: otherwise the program's thread runs HDF5 calls in the
 * middle of that thread's work (h5flow_cache over h5flow_async then freed what the migration still used).
 * A watcher thread tries the library lock all the time; it must never get it while the caller is inside. */
static atomic_int lock_inside, lock_stop, lock_broken;

static void *lock_watch(void *arg)
{
    (void)arg;
    while (!atomic_load(&lock_stop)) {
        bool got = false;
        if (atomic_load(&lock_inside) && H5TSmutex_acquire(1, &got) >= 0 && got) {
            if (atomic_load(&lock_inside))
                atomic_fetch_add(&lock_broken, 1);
            unsigned count = 0;
            H5TSmutex_release(&count);
        }
        sched_yield();
    }
    return NULL;
}

static void lock_kept_while_waiting(const char *below, const char *tag)
{
    char files[2][2300];
    for (int k = 0; k < 2; k++)
        snprintf(files[k], sizeof files[k], k ? "%s/lock-%s.jsonl" : "%s/lock-%s.h5", dir, tag);
    hid_t fapl = fapl_for(below, files[1], "defer=1;max_mem=64K;");
    hid_t f = H5Fcreate(files[0], H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    CHECK(f >= 0);
    enum { N = 4096, ROUNDS = 12 };
    hsize_t dims[1] = {N};
    hid_t space = H5Screate_simple(1, dims, NULL);
    hid_t d = H5Dcreate2(f, "d", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(d >= 0);
    static int buf[N], back[N];
    atomic_store(&lock_broken, 0);
    atomic_store(&lock_stop, 0);
    pthread_t watcher;
    CHECK(pthread_create(&watcher, NULL, lock_watch, NULL) == 0);
    for (int r = 0; r < ROUNDS; r++) {
        for (int i = 0; i < N; i++)
            buf[i] = r * N + i;
        /* deferred: queued, run only when waited for (the flush below, or the memory bound) */
        for (int part = 0; part < 8; part++) {
            hsize_t start[1] = {(hsize_t)part * (N / 8)}, count[1] = {N / 8};
            hid_t fs = H5Scopy(space);
            H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
            hid_t ms = H5Screate_simple(1, count, NULL);
            CHECK(H5Dwrite(d, H5T_NATIVE_INT, ms, fs, H5P_DEFAULT, buf + start[0]) >= 0);
            H5Sclose(ms);
            H5Sclose(fs);
        }
        bool got = false;
        while (!(H5TSmutex_acquire(1, &got) >= 0 && got))
            sched_yield();
        atomic_store(&lock_inside, 1);
        herr_t rc = (r % 2) ? H5Fflush(f, H5F_SCOPE_LOCAL) : H5Dread(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL,
                                                                     H5P_DEFAULT, back);
        atomic_store(&lock_inside, 0);
        unsigned count = 0;
        H5TSmutex_release(&count);
        CHECK(rc >= 0);
    }
    atomic_store(&lock_stop, 1);
    pthread_join(watcher, NULL);
    if (atomic_load(&lock_broken)) {
        fprintf(stderr, "FAIL [%s]: the library lock was let go %d time(s) inside a call that waited for the "
                        "queue\n", tag, atomic_load(&lock_broken));
        failures++;
    }
    CHECK(H5Dread(d, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back) >= 0);
    CHECK(memcmp(back, buf, sizeof buf) == 0);
    H5Dclose(d);
    H5Sclose(space);
    CHECK(H5Fclose(f) >= 0);
    H5Pclose(fapl);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s <scratch dir>\n", argv[0]);
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    mkdir(dir, 0777);
    const char *below[][2] = {{"0", "native"}, {"h5flow_log", "log"}};
    for (int b = 0; b < 2; b++)
        serial_open_leaves_mpi_alone(below[b][0], below[b][1]);
    second_handle("0", "native", 0);
    second_handle("0", "native-extlink", 1);
    second_handle("h5flow_log", "log", 0);
    per_file_waits("0", "native");
    per_file_waits("h5flow_log", "log");
    for (int b = 0; b < 2; b++) {
        explicit_mode(below[b][0], below[b][1]);
        explicit_buffers(below[b][0], below[b][1], 0);
        explicit_buffers(below[b][0], below[b][1], 1);
        implicit_mode(below[b][0], below[b][1], "", -1); /* timing decides what merges */
        char tag[64];
        snprintf(tag, sizeof tag, "%s-deferred", below[b][1]);
        implicit_mode(below[b][0], tag, "defer=1;", 1);
        snprintf(tag, sizeof tag, "%s-tight", below[b][1]);
        implicit_mode(below[b][0], tag, "max_mem=200;merge=0;", 0); /* three rows of the queue at most */
        implicit_failure(below[b][0], below[b][1]);
        offset_selection(below[b][0], below[b][1]);
        pool_reuse(below[b][0], below[b][1]);
        adaptive(below[b][0], below[b][1]);
        lock_kept_while_waiting(below[b][0], below[b][1]);
    }
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    else
        printf("h5flow_async: all checks passed\n");
    return failures ? 1 : 0;
}
