/* h5flow_log user data functions (UDF): the C ABI (docs/FORMAT.md, "Statistics and user data functions").
 *
 * A UDF is a function in a shared library. Name it in the dataset creation property list with
 * h5flow_udf_set() (a property "h5flow_log.udf" inserted into the list) before H5Dcreate; the connector
 * stores the name with the dataset (@udf) so that every process that later writes to the dataset, in any
 * epoch, applies it too. The connector dlopen()s the library in each writing process and calls the
 * function once per write (H5Dwrite) with the elements written; what the function reports with `put`
 * (key -> double) is kept with that write's statistics record (@stats.<epoch>.<writer>) and shown by
 * `h5flow stats` / h5flow.stats.read_stats().
 *
 * Semantics: the function runs after the write's data and index record were appended to the writer's
 * logs (buffers), so a UDF that returns an error does not fail the write: the write lands and the UDF
 * result of that write is recorded as failed with the message the function put in `err`. A UDF that
 * crashes crashes the process: the container stays readable (as after any crash: writes not yet flushed
 * by H5Fflush/H5Dflush/close are lost, nothing else), and a write whose statistics record was not written
 * has its statistics computed from its data at query time.
 */
#ifndef H5FLOW_UDF_H
#define H5FLOW_UDF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <hdf5.h>

#define H5FLOW_UDF_ABI_VERSION 1
#define H5FLOW_UDF_PROP "h5flow_log.udf" /* dataset creation property: H5FLOW_UDF_SPEC_MAX bytes */
#define H5FLOW_UDF_SPEC_MAX 1024         /* "LIBRARY\nSYMBOL\0", padded with zero bytes */
#define H5FLOW_UDF_KEY_MAX 64            /* bytes of a key, without the terminating zero */
#define H5FLOW_UDF_KEYS_MAX 64           /* keys per write */

enum { H5FLOW_UDF_OTHER = 0, H5FLOW_UDF_INT = 1, H5FLOW_UDF_UINT = 2, H5FLOW_UDF_FLOAT = 3 };

typedef struct h5flow_udf_write {
    unsigned abi_version; /* H5FLOW_UDF_ABI_VERSION */
    const char *dataset;  /* HDF5 path of the dataset */
    hid_t type;           /* the dataset's datatype, the layout of buf (valid during the call only) */
    int kind;             /* H5FLOW_UDF_INT/UINT/FLOAT for native-order integers and floats, else OTHER */
    size_t esize;         /* bytes per element */
    const void *buf;      /* nelems elements, packed in the order of the selection */
    uint64_t nelems;
    int rank;
    const uint64_t *dims; /* extent of the dataset at this write */
    uint64_t nruns;       /* (start, len) pairs, row-major linear element indices in dims: where the */
    const uint64_t *runs; /* elements of buf went, in order */
    uint32_t writer;      /* the writer (MPI rank) */
    void **state;         /* the function's own state for this dataset in this process: NULL at the first
                           * call; the optional function SYMBOL_free(void *state) is called at close */
} h5flow_udf_write_t;

typedef struct h5flow_udf_result h5flow_udf_result_t; /* opaque */
/* Report key -> value for this write (a later put of the same key replaces it). 0, or -1 for an empty or
 * too long key or too many keys. */
typedef int (*h5flow_udf_put_fn)(h5flow_udf_result_t *res, const char *key, double value);
/* 0: success. Else a failure: write a message into err (errlen bytes) saying what went wrong. */
typedef int (*h5flow_udf_fn)(const h5flow_udf_write_t *w, h5flow_udf_result_t *res, h5flow_udf_put_fn put,
                             char *err, size_t errlen);

/* Name the UDF `symbol` of shared library `library` in the dataset creation (or access) property list
 * `plist`. Returns a negative value on failure (names too long, or the property cannot be set). */
static inline herr_t h5flow_udf_set(hid_t plist, const char *library, const char *symbol)
{
    char spec[H5FLOW_UDF_SPEC_MAX];
    size_t a = strlen(library), b = strlen(symbol);
    if (a == 0 || b == 0 || a + b + 2 > sizeof spec || memchr(library, '\n', a))
        return -1;
    memset(spec, 0, sizeof spec);
    memcpy(spec, library, a);
    spec[a] = '\n';
    memcpy(spec + a + 1, symbol, b);
    htri_t ex = H5Pexist(plist, H5FLOW_UDF_PROP);
    if (ex < 0)
        return -1;
    if (ex > 0)
        return H5Pset(plist, H5FLOW_UDF_PROP, spec);
    return H5Pinsert2(plist, H5FLOW_UDF_PROP, sizeof spec, spec, NULL, NULL, NULL, NULL, NULL, NULL);
}

#endif
