/* HDF5's error stack stays sound through h5flow_log (connector chosen by HDF5_VOL_CONNECTOR); the test
 * of third_party/hdf5/patches/0002.
 *
 * HDF5 1.14.5 refuses references on non-native connectors with an error record that carries the
 * *major* message H5E_VOL in its *minor* slot; clearing the stack then frees the library's H5E_VOL
 * message, after which no VOL error can be described or printed (H5Eprint2 recursed into a segfault).
 * Checked here: every record of every refusal has a major message in the major slot and a minor one in
 * the minor slot; H5E_VOL survives clearing; a later error prints; and after 200 failing calls the
 * connector's errors are still its own, specific ones. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"

typedef struct {
    const char *what;
    int n, bad;
    char bottom_desc[512], bottom_cls[64];
} walk_t;

/* Walks a *copy* of the stack: H5Eget_msg/H5Eget_class_name clear the default stack on entry. */
static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *data)
{
    walk_t *w = data;
    H5E_type_t t;
    char buf[256];
    if (H5Eget_msg(e->maj_num, &t, buf, sizeof buf) < 0 || t != H5E_MAJOR) {
        fprintf(stderr, "%s: record #%u (%s in %s) has no major message in its major slot\n", w->what, n,
                e->desc ? e->desc : "?", e->func_name ? e->func_name : "?");
        w->bad++;
    }
    if (H5Eget_msg(e->min_num, &t, buf, sizeof buf) < 0 || t != H5E_MINOR) {
        fprintf(stderr, "%s: record #%u (%s in %s) has no minor message in its minor slot\n", w->what, n,
                e->desc ? e->desc : "?", e->func_name ? e->func_name : "?");
        w->bad++;
    }
    if (w->n++ == 0) { /* H5E_WALK_UPWARD starts at the innermost record, the first one pushed */
        snprintf(w->bottom_desc, sizeof w->bottom_desc, "%s", e->desc ? e->desc : "");
        if (H5Eget_class_name(e->cls_id, w->bottom_cls, sizeof w->bottom_cls) < 0)
            w->bottom_cls[0] = '\0';
    }
    return 0;
}

/* Check the current error stack (then clear it); fills *w with the bottom (first pushed) record. */
static void check_stack(const char *what, walk_t *w)
{
    memset(w, 0, sizeof *w);
    w->what = what;
    hid_t stk = H5Eget_current_stack(); /* takes the records, leaving the default stack empty */
    CHECK(stk >= 0);
    CHECK(H5Eget_num(stk) > 0);
    CHECK(H5Ewalk2(stk, H5E_WALK_UPWARD, walk_cb, w) >= 0);
    CHECK(w->bad == 0);
    CHECK(H5Eclose_stack(stk) >= 0); /* releases the records: where the bad ones did their damage */
}

static void check_library_messages(const char *after)
{
    H5E_type_t t = H5E_MINOR;
    char buf[128] = "";
    ssize_t n = H5Eget_msg(H5E_VOL, &t, buf, sizeof buf);
    if (n <= 0 || t != H5E_MAJOR || strcmp(buf, "Virtual Object Layer") != 0) {
        fprintf(stderr, "after %s: HDF5's own H5E_VOL message is gone (H5Eget_msg -> %zd, '%s')\n", after, n,
                buf);
        failures++;
    }
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "errstack-tmp";
    mkdir(dir, 0755);
    char path[4096], missing[4096];
    snprintf(path, sizeof path, "%s/errstack.h5", dir);
    snprintf(missing, sizeof missing, "%s/no-such-container.h5", dir);

    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(f >= 0);
    char cname[64] = "";
    H5VLget_connector_name(f, cname, sizeof cname);
    CHECK(!strcmp(cname, "h5flow_log"));
    hsize_t dims[1] = {20};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    hid_t d = H5Dcreate2(f, "d", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(d >= 0);
    hsize_t start[1] = {0}, count[1] = {10};
    H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL);

    /* Every H5R entry point that refuses a non-native connector or a null reference. (A region reference
     * itself works through the connector since HDF5 patch 0004: made here, it must not fail.) */
    walk_t w;
    hdset_reg_ref_t rref, zref;
    hobj_ref_t oref = 0;
    memset(&rref, 0, sizeof rref);
    memset(&zref, 0, sizeof zref);
    H5O_type_t otype;
    herr_t st = H5Rcreate(&rref, f, "d", H5R_DATASET_REGION, sp);
    hid_t id;
    CHECK(st >= 0);
    H5E_BEGIN_TRY { st = H5Rget_obj_type2(d, H5R_OBJECT, &oref, &otype); }
    H5E_END_TRY
    CHECK(st < 0);
    check_stack("H5Rget_obj_type2", &w);
    check_library_messages("H5Rget_obj_type2");
    H5E_BEGIN_TRY { id = H5Rdereference2(d, H5P_DEFAULT, H5R_OBJECT, &oref); }
    H5E_END_TRY
    CHECK(id < 0);
    check_stack("H5Rdereference2", &w);
    check_library_messages("H5Rdereference2");
    H5E_BEGIN_TRY { id = H5Rget_region(d, H5R_DATASET_REGION, &zref); }
    H5E_END_TRY
    CHECK(id < 0);
    check_stack("H5Rget_region", &w);
    check_library_messages("H5Rget_region");
#ifndef H5_NO_DEPRECATED_SYMBOLS
    H5G_obj_t gtype;
    H5E_BEGIN_TRY { gtype = H5Rget_obj_type1(d, H5R_OBJECT, &oref); }
    H5E_END_TRY
    CHECK(gtype == H5G_UNKNOWN);
    check_stack("H5Rget_obj_type1", &w);
    check_library_messages("H5Rget_obj_type1");
    H5E_BEGIN_TRY { id = H5Rdereference1(d, H5R_OBJECT, &oref); }
    H5E_END_TRY
    CHECK(id < 0);
    check_stack("H5Rdereference1", &w);
    check_library_messages("H5Rdereference1");
#endif

    /* A later error (a VOL one: every connector error is) can still be printed. */
    H5E_BEGIN_TRY { id = H5Dopen2(f, "missing", H5P_DEFAULT); }
    H5E_END_TRY
    CHECK(id < 0);
    hid_t stk = H5Eget_current_stack();
    FILE *tf = tmpfile();
    CHECK(tf != NULL);
    if (tf) {
        CHECK(H5Eprint2(stk, tf) >= 0);
        char text[8192] = "";
        rewind(tf);
        size_t got = fread(text, 1, sizeof text - 1, tf);
        text[got] = '\0';
        CHECK(strstr(text, "Virtual Object Layer") != NULL);
        CHECK(strstr(text, "dataset 'missing' does not exist") != NULL);
        fclose(tf);
    }
    H5Eclose_stack(stk);

    /* 200 failing calls of several kinds, then a connector error is still specific and its own. */
    for (int i = 0; i < 200; i++) {
        H5E_BEGIN_TRY
        {
            switch (i % 5) {
                case 0: st = (herr_t)H5Rget_region(d, H5R_DATASET_REGION, &zref); break;
                case 1: st = (herr_t)H5Dopen2(f, "missing", H5P_DEFAULT); break;
                case 2:
                    st = (herr_t)H5Dcreate2(f, "d", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
                    break;
                case 3: st = (herr_t)H5Aopen(d, "no-such-attribute", H5P_DEFAULT); break;
                default: st = (herr_t)H5Fopen(missing, H5F_ACC_RDONLY, H5P_DEFAULT); break;
            }
        }
        H5E_END_TRY
        CHECK(st < 0);
        H5Eclear2(H5E_DEFAULT);
    }
    check_library_messages("200 failing calls");
    H5E_BEGIN_TRY { id = H5Gopen2(f, "zzz", H5P_DEFAULT); }
    H5E_END_TRY
    CHECK(id < 0);
    check_stack("H5Gopen2 after 200 failures", &w);
    CHECK(!strcmp(w.bottom_cls, "h5flow_log"));
    if (strcmp(w.bottom_desc, "group 'zzz' does not exist") != 0) {
        fprintf(stderr, "after 200 failures the connector's error reads '%s' (class '%s')\n", w.bottom_desc,
                w.bottom_cls);
        failures++;
    }

    H5Sclose(sp);
    H5Dclose(d);
    CHECK(H5Fclose(f) >= 0);
    check_library_messages("closing the file");
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
