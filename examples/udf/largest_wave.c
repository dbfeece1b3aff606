/* The seed's example of a user data function: "the height of the largest wave, and where it is".
 *
 * For every write it reports `height` (the largest value written), `index` (its row-major linear element
 * index in the dataset) and `pos0`, `pos1`, ... (its coordinates), plus `running_height`, the largest value
 * this process wrote to the dataset so far (kept in the function's state). NaN values are skipped; a
 * write of a type that is not an integer or float fails (the write still lands; its result says why).
 *
 * Built by `make setup` into build/native/udf/liblargest_wave.so. Use it from C:
 *     hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
 *     h5flow_udf_set(dcpl, "build/native/udf/liblargest_wave.so", "largest_wave");
 *     H5Dcreate2(file, "sea/elevation", H5T_NATIVE_DOUBLE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
 * or from Python: h5flow.stats.set_udf(dcpl, lib, "largest_wave"), then create_dataset(..., dcpl=dcpl);
 * read the results with `h5flow stats CONTAINER` or h5flow.stats.read_stats(). */
#include "h5flow_udf.h"

#include <stdio.h>
#include <stdlib.h>

int largest_wave(const h5flow_udf_write_t *w, h5flow_udf_result_t *res, h5flow_udf_put_fn put, char *err,
                 size_t errlen);
void largest_wave_free(void *state);

static double value(const h5flow_udf_write_t *w, uint64_t i)
{
    const unsigned char *p = (const unsigned char *)w->buf + i * w->esize;
    if (w->kind == H5FLOW_UDF_FLOAT)
        return w->esize == 4 ? (double)*(const float *)(const void *)p : *(const double *)(const void *)p;
    if (w->kind == H5FLOW_UDF_INT)
        switch (w->esize) {
            case 1: return *(const signed char *)p;
            case 2: return *(const int16_t *)(const void *)p;
            case 4: return *(const int32_t *)(const void *)p;
            default: return (double)*(const int64_t *)(const void *)p;
        }
    switch (w->esize) {
        case 1: return *p;
        case 2: return *(const uint16_t *)(const void *)p;
        case 4: return *(const uint32_t *)(const void *)p;
        default: return (double)*(const uint64_t *)(const void *)p;
    }
}

int largest_wave(const h5flow_udf_write_t *w, h5flow_udf_result_t *res, h5flow_udf_put_fn put, char *err,
                 size_t errlen)
{
    if (w->abi_version != H5FLOW_UDF_ABI_VERSION) {
        snprintf(err, errlen, "built for UDF ABI %d, called with %u", H5FLOW_UDF_ABI_VERSION, w->abi_version);
        return -1;
    }
    if (w->kind == H5FLOW_UDF_OTHER) {
        snprintf(err, errlen, "dataset %s: largest_wave needs integers or floats", w->dataset);
        return -1;
    }
    uint64_t best = UINT64_MAX;
    double h = 0;
    for (uint64_t i = 0; i < w->nelems; i++) {
        double v = value(w, i);
        if (v == v && (best == UINT64_MAX || v > h)) {
            h = v;
            best = i;
        }
    }
    if (best == UINT64_MAX)
        return 0; /* nothing but NaN: no wave */
    uint64_t lin = UINT64_MAX, k = best; /* the element's place in the dataset, through the runs */
    for (uint64_t r = 0; r < w->nruns; r++) {
        if (k < w->runs[2 * r + 1]) {
            lin = w->runs[2 * r] + k;
            break;
        }
        k -= w->runs[2 * r + 1];
    }
    if (put(res, "height", h) != 0 || put(res, "index", (double)lin) != 0)
        return -1;
    uint64_t rest = lin;
    for (int d = w->rank - 1; d >= 0; d--) {
        char key[16];
        snprintf(key, sizeof key, "pos%d", d);
        uint64_t dim = w->dims[d] ? w->dims[d] : 1;
        if (put(res, key, (double)(d ? rest % dim : rest)) != 0)
            return -1;
        rest /= dim;
    }
    double *run = *w->state;
    if (!run) {
        if (!(run = malloc(sizeof *run))) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        *run = h;
        *w->state = run;
    } else if (h > *run) {
        *run = h;
    }
    return put(res, "running_height", *run);
}

void largest_wave_free(void *state) { free(state); }
