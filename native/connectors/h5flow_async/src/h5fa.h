/* h5flow_async internals: settings, per-file state, the queue of background operations. */
#ifndef H5FA_H
#define H5FA_H

#include "h5fpt.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define H5FA_NAME "h5flow_async"
#define H5FA_VALUE 312 /* in the 256-511 range HDF5 reserves for testing new connectors */

/* The connector's settings (info string keys; docs/ASYNC.md). Plain data: copied by value. */
typedef struct h5fa_opts {
    uint64_t max_mem;  /* max_mem=SIZE: bytes of copied write buffers queued at once (past it, writes wait) */
    int implicit;      /* implicit=1|0: plain H5Dwrite is queued too (1), or only the *_async calls (0) */
    int merge;         /* merge=1|0: adjacent queued writes to one dataset become one write; writes to
                          several datasets of a file become one multi-dataset write */
    int defer;         /* defer=1|0: a file's queued work starts only when the application waits for it
                          (flush, close, read, a dependent operation) or the memory bound is reached */
    uint64_t adapt;    /* adapt=SIZE|off: an implicit write of at least SIZE bytes with nothing to hide behind
                          (work still queued, or no time spent since the last write or wait) runs at the call
                          after the queue, uncopied (0: off; queue.c adapt_at_call) */
    int explicit_copy; /* explicit_copy=1|0: an event-set write (H5Dwrite_async) copies its buffer (1), or is
                          queued without a copy and written from the program's buffer, which must stay
                          unchanged until its request completes (0) */
    char stats[1024];  /* stats=PATH: one JSON line per closed file appended there ("" = none) */
} h5fa_opts_t;

/* The copy buffers of one open file (pool.c). */
typedef struct h5fa_pool {
    pthread_mutex_t mu;
    struct h5fa_pool_buf *free_list;
    unsigned nfree;
    uint64_t free_bytes; /* capacity of the free buffers */
    uint64_t out_bytes;  /* capacity of the pool's buffers handed out to queued writes */
    uint64_t reused;     /* buffers handed out again */
    uint64_t fresh;      /* buffers allocated */
} h5fa_pool_t;

void h5fa_pool_init(h5fa_pool_t *p);
void h5fa_pool_fini(h5fa_pool_t *p); /* frees the free buffers (none may be out) */
/* A buffer of at least `bytes`: *cap is its capacity, to give back with it (0: a plain malloc block, for a
 * copy too small to pool). NULL when out of memory. The pool's buffers, free and out, stay within bound. */
void *h5fa_pool_get(h5fa_pool_t *p, size_t bytes, uint64_t bound, size_t *cap);
/* Give back a buffer of h5fa_pool_get once nothing reads it any more: kept for reuse, or freed. */
void h5fa_pool_put(h5fa_pool_t *p, void *mem, size_t cap, uint64_t bound);

/* What one open file handle shares with every object opened from it. */
typedef struct h5fa_file {
    atomic_uint refs;
    h5fa_opts_t opts;
    bool parallel; /* opened with MPI-IO or subfiling: everything else waits for its queued operations */
    /* the file number below (H5VL_FILE_GET_FILENO): two handles of one file share it; !fileno_ok: unknown,
     * and every wait of this handle waits for the whole queue */
    bool fileno_ok;
    unsigned long fileno;
    char name[512];
    h5fa_pool_t pool; /* its copy buffers */
    /* the queue's work of this handle (under the queue's lock): tasks not yet done and their bytes */
    uint64_t pending;
    uint64_t pending_bytes;
    uint64_t waited_ns; /* when an operation of this handle last had to wait for unfinished work (0: never) */
    /* counters (under the queue's lock) */
    uint64_t waits;        /* operations of this handle that waited for unfinished queued work */
    uint64_t writes;       /* dataset writes the application made (one per dataset of a multi-dataset call) */
    uint64_t queued;       /* of which queued for the background thread */
    uint64_t merged;       /* queued writes folded into the previous one */
    uint64_t calls_below;  /* write calls made to the connector below */
    uint64_t multi_calls;  /* of which carried several datasets */
    uint64_t bytes;        /* bytes queued */
    uint64_t failures;     /* background operations that failed */
    uint64_t ran_at_call;  /* dataset writes that ran at the call (after the queue), uncopied */
    uint64_t uncopied;     /* queued event-set writes written from the program's buffer (explicit_copy=0) */
    /* the adaptive rule (adapt=): when the last write that ran at the call returned (0: the file's last
     * write was queued), and what copying a byte cost in the last large copy (picoseconds) */
    uint64_t at_call_end_ns;
    uint64_t copy_ps_per_byte;
    /* the oldest background failure not yet reported to the application ("" = none) */
    char pending_error[512];
} h5fa_file_t;

h5fa_file_t *h5fa_file_new(const h5fa_opts_t *opts);
void h5fa_file_retain(h5fa_file_t *f);
void h5fa_file_release(h5fa_file_t *f);

/* Each object's extension: its handle's file state, and the number of the file the object lies in (an
 * object reached through an external link lies in another file than its handle's), looked up once. */
typedef struct h5fa_ext {
    h5fa_file_t *file; /* held */
    int fileno_state;  /* 0: not looked up yet, 1: known, -1: cannot be had */
    unsigned long fileno;
    H5O_token_t token; /* the object's token in that file (known with fileno; not for a file) */
} h5fa_ext_t;

static inline h5fa_file_t *h5fa_file_of(const h5fpt_obj_t *o)
{
    return o && o->ext ? ((const h5fa_ext_t *)o->ext)->file : NULL;
}
/* The number of the file object o lies in: true with it in *fileno, false when it cannot be had. */
bool h5fa_fileno_of(const h5fpt_obj_t *o, unsigned long *fileno);
/* The number of the file a (non-file) object lies in and its token there, which name the object whatever the
 * handle (two handles of one dataset give the same): true with both set, false when they cannot be had. */
bool h5fa_identity_of(const h5fpt_obj_t *o, unsigned long *fileno, H5O_token_t *token);

/* --- the queue (queue.c) ----------------------------------------------------------------------- */
/* Queue a write of count datasets (their buffers copied first); req != NULL: an event-set request is
 * returned in *req. Returns 0 when queued, 1 when it must run synchronously instead (nothing queued),
 * -1 on error (pushed). */
int h5fa_queue_write(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                     hid_t file_space_id[], hid_t dxpl_id, const void *buf[], void **req);
/* Queue a read (explicit mode): the buffers are filled in the background. Same returns. */
int h5fa_queue_read(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                    hid_t file_space_id[], hid_t dxpl_id, void *buf[], void **req);
/* Wait until every operation queued so far has run (the HDF5 library lock is let go meanwhile). */
void h5fa_drain(void);
/* Wait until every queued operation that an operation of handle f on object obj depends on has run: those
 * queued through f, and those on the file obj lies in (obj NULL: f's own file), with everything queued
 * before them (one thread runs the queue in program order). A parallel file, or a file number that cannot
 * be had, waits for the whole queue (h5fa_drain). Work of other files queued after those is not waited for. */
void h5fa_wait_for(h5fa_file_t *f, const h5fpt_obj_t *obj);
/* h5fa_wait_for, then the failure of f's background operations not yet reported: -1 with it pushed. */
int h5fa_wait_and_check(h5fa_file_t *f, const h5fpt_obj_t *obj);
/* The failure of f's background operations not yet reported (no waiting): -1 with it pushed. */
int h5fa_check(h5fa_file_t *f);
/* Count a call of `count` dataset writes that ran at the call; it has returned. */
void h5fa_count_at_call(h5fa_file_t *f, size_t count);
/* Stop the background thread (library shutdown; the queue is empty by then). */
void h5fa_queue_stop(void);
/* Append f's counters to its stats file (if set). */
void h5fa_write_stats(h5fa_file_t *f);

/* --- requests (event sets) --------------------------------------------------------------------- */
herr_t h5fa_request_wait(void *req, uint64_t timeout, H5VL_request_status_t *status);
herr_t h5fa_request_notify(void *req, H5VL_request_notify_t cb, void *ctx);
herr_t h5fa_request_cancel(void *req, H5VL_request_status_t *status);
herr_t h5fa_request_specific(void *req, H5VL_request_specific_args_t *args);
herr_t h5fa_request_optional(void *req, H5VL_optional_args_t *args);
herr_t h5fa_request_free(void *req);

#endif
