/* A user data function that fails (tests/test_vol_h5flow_log_stats.py): every write's result is recorded
 * as failed with this message, and the write itself lands. `udf_fail_odd` fails on odd-numbered calls
 * only and reports `n` (the elements of the write) otherwise. */
#include "h5flow_udf.h"

#include <stdio.h>

int udf_fail(const h5flow_udf_write_t *w, h5flow_udf_result_t *res, h5flow_udf_put_fn put, char *err,
             size_t errlen);
int udf_fail_odd(const h5flow_udf_write_t *w, h5flow_udf_result_t *res, h5flow_udf_put_fn put, char *err,
                 size_t errlen);

int udf_fail(const h5flow_udf_write_t *w, h5flow_udf_result_t *res, h5flow_udf_put_fn put, char *err,
             size_t errlen)
{
    (void)res;
    (void)put;
    snprintf(err, errlen, "sensor calibration missing for %s (%llu elements)", w->dataset,
             (unsigned long long)w->nelems);
    return 1;
}

int udf_fail_odd(const h5flow_udf_write_t *w, h5flow_udf_result_t *res, h5flow_udf_put_fn put, char *err,
                 size_t errlen)
{
    static unsigned long calls; /* test code: one dataset per process */
    if (calls++ % 2) {
        snprintf(err, errlen, "odd call %lu", calls);
        return -1;
    }
    return put(res, "n", (double)w->nelems);
}
