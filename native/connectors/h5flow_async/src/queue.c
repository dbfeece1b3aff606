/* The background thread and its queue: copied writes (merged when adjacent, batched into one
 * multi-dataset call when several datasets of a file follow each other), explicit reads, completion
 * of event-set requests, failures kept until reported.
 *
 * One queue and one thread per process, by design: operations run in the program's order across all
 * files, so the collective operations of parallel files run in the same order on every rank, and an
 * operation of the application on a parallel file never runs beside a collective of the background
 * thread (each waits for the queue first). Each file keeps its own counters and failures. An operation on
 * a serial file waits only for the queued work it depends on (h5fa_wait_for): each task carries the handle
 * it was queued through and the number of the file its datasets lie in.
 *
 * Locking: HDF5's library lock and the queue's mutex. The application thread runs inside HDF5 calls
 * (holding the library lock) and may take the queue's mutex; the background thread never makes an
 * HDF5 call while it holds the queue's mutex. The background thread takes tasks off the queue only while
 * it holds the library lock, and keeps it until they are done: a thread inside HDF5 that must wait for the
 * queue therefore finds no task half run and runs the rest itself (run_here), never letting go of the
 * library lock in the middle of a call. Only at library shutdown, when the caller may not hold the lock,
 * does it wait for the background thread (the library lock let go first, taken back afterwards).
 *
 * One file on purpose, though it is long: the queue, its thread, waiting and requests are one subject, the
 * queue's mutex and condition variables, and every rule of the locking above is kept in this file alone. */
#include "h5fa.h"

#include <H5TSdevelop.h>

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct done { /* the completion of one application call (an event-set request) */
    atomic_uint refs;
    int state; /* 0: pending, 1: succeeded, -1: failed (under Q.mu) */
    char msg[512];
    uint64_t exec_ts, exec_time;
} done_t;

typedef struct block { /* a file selection that is one block */
    int rank;
    hsize_t dims[H5S_MAX_RANK], start[H5S_MAX_RANK], count[H5S_MAX_RANK];
} block_t;

typedef struct item { /* one dataset of a queued call */
    h5fpt_obj_t *dset;  /* held */
    hid_t mem_type;     /* owned copy */
    hid_t mem_space;    /* read and borrowed write: owned copy or H5S_ALL/H5S_BLOCK; copied write: made at
                           run (1-D, contiguous) */
    hid_t file_space;   /* owned copy or H5S_ALL; H5I_INVALID_HID when is_block (made at run) */
    bool is_block;
    bool borrowed;      /* write: buf is the application's (explicit_copy=0), never copied, freed or merged */
    block_t blk;
    void *buf;          /* copied write: owned copy of the selected elements; read, borrowed write: the
                           application's */
    size_t cap;         /* copied write: the copy's capacity, from the file's pool (0: malloc) */
    hsize_t npoints;
    size_t bytes;
    /* the dataset itself, whatever the handle (batching never puts one dataset twice in a call) */
    bool has_id;
    unsigned long fileno;
    H5O_token_t token;
} item_t;

typedef struct task {
    struct task *next;
    uint64_t seq;
    bool write, running;
    h5fa_file_t *file; /* held */
    bool fileno_ok;    /* the number of the file its datasets lie in is known (all in one file) */
    unsigned long fileno;
    hid_t dxpl;        /* owned copy */
    bool dxpl_default; /* equal to the default transfer list: batching joins only such writes */
    void *lib_state;   /* the library's state at the call (API context), restored on the thread */
    size_t n;
    item_t *items;
    done_t **done; /* the requests it completes */
    size_t ndone;
    size_t bytes;
} task_t;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work, progress;
    task_t *head, *tail;
    uint64_t next_seq, done_seq;
    uint64_t release_seq; /* deferred tasks up to this one may start (defer=1) */
    uint64_t waited_ns;   /* when h5fa_drain (the whole queue) last returned after waiting (0: never) */
    uint64_t bytes;
    bool started, stop;
    atomic_int app_waiting; /* the application waits for the library lock: the thread leaves it a gap */
    atomic_int app_draining; /* the application waits for the queue (the library lock let go): no gap needed */
    pthread_t thread;
} Q = {.mu = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .progress = PTHREAD_COND_INITIALIZER};

/* Let deferred tasks queued up to task `upto` start (Q.mu held). */
static void release_deferred_to(uint64_t upto)
{
    if (Q.release_seq < upto) {
        Q.release_seq = upto;
        pthread_cond_signal(&Q.work);
    }
}

/* Let every deferred task queued so far start (Q.mu held). */
static void release_deferred(void) { release_deferred_to(Q.next_seq); }

/* ----------------------------------------------------------------------------- the library lock */

/* Let go of the library lock if this thread holds it; the count to take back. H5TSmutex_release
 * releases the lock whoever holds it, so first make sure it is ours: take it once more (that succeeds
 * only when this thread holds it or nobody does), then release everything and give back the extra one.
 * A thread that does not hold it (library shutdown from atexit) releases nothing. */
static unsigned lib_release(void)
{
    bool mine = false;
    if (H5TSmutex_acquire(1, &mine) < 0 || !mine)
        return 0;
    unsigned count = 0;
    if (H5TSmutex_release(&count) < 0 || count == 0)
        return 0;
    return count - 1;
}

static void lib_reacquire(unsigned count)
{
    if (!count)
        return;
    atomic_fetch_add(&Q.app_waiting, 1);
    for (unsigned spins = 0;; spins++) {
        bool acquired = false;
        if (H5TSmutex_acquire(count, &acquired) >= 0 && acquired)
            break;
        if (spins < 100)
            sched_yield();
        else
            nanosleep(&(struct timespec){0, 20000}, NULL);
    }
    atomic_fetch_sub(&Q.app_waiting, 1);
}

/* How long the program must have made no HDF5 call before the thread takes the library lock for a queued
 * operation, and how long the thread waits for such a gap at most. A write returns to a program that usually
 * makes a few more calls at once (h5py closes the write's dataspaces right after it): taken at once, the
 * lock would keep those calls waiting for the whole write below. */
#define QUIET_NS 100000L
#define QUIET_MAX_NS 2000000L

/* Before a batch: take the library lock once the program has been out of HDF5 for QUIET_NS (no API call
 * began meanwhile and the lock is free), or at once when the program waits for the queue (it let go of the
 * lock) or made no call since the last batch. Returns true with the lock held (let go with H5TSmutex_release
 * after the batch); false past QUIET_MAX_NS: the batch's calls then wait for the lock as any call does.
 * `since_last` is the attempt count of the library lock when the last batch ended. */
static bool lock_when_quiet(unsigned since_last)
{
    unsigned seen = 0;
    bool acquired = false;
    if (H5TSmutex_get_attempt_count(&seen) < 0)
        return false;
    if (seen == since_last || atomic_load(&Q.app_draining) > 0) {
        if (H5TSmutex_acquire(1, &acquired) >= 0 && acquired)
            return true;
    }
    for (long waited = 0; waited < QUIET_MAX_NS; waited += QUIET_NS) {
        nanosleep(&(struct timespec){0, QUIET_NS}, NULL);
        unsigned now = 0;
        if (H5TSmutex_get_attempt_count(&now) < 0)
            return false;
        if ((now == seen || atomic_load(&Q.app_draining) > 0) && H5TSmutex_acquire(1, &acquired) >= 0 && acquired)
            return true;
        seen = now;
    }
    return false;
}

/* ------------------------------------------------------------------------------------ per file */

h5fa_file_t *h5fa_file_new(const h5fa_opts_t *opts)
{
    h5fa_file_t *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    atomic_init(&f->refs, 1u);
    f->opts = *opts;
    h5fa_pool_init(&f->pool);
    return f;
}

void h5fa_file_retain(h5fa_file_t *f) { atomic_fetch_add(&f->refs, 1u); }

void h5fa_file_release(h5fa_file_t *f)
{
    if (f && atomic_fetch_sub(&f->refs, 1u) == 1u) {
        h5fa_pool_fini(&f->pool);
        free(f);
    }
}

void h5fa_write_stats(h5fa_file_t *f)
{
    if (!f->opts.stats[0])
        return;
    FILE *out = fopen(f->opts.stats, "a");
    if (!out)
        return;
    pthread_mutex_lock(&Q.mu);
    fprintf(out,
            "{\"file\": \"%s\", \"writes\": %llu, \"queued\": %llu, \"merged\": %llu, \"calls_below\": %llu, "
            "\"multi_calls\": %llu, \"bytes\": %llu, \"failures\": %llu, \"buffers_reused\": %llu, "
            "\"buffers_allocated\": %llu, \"ran_at_call\": %llu, \"uncopied\": %llu, \"waits\": %llu}\n",
            f->name, (unsigned long long)f->writes, (unsigned long long)f->queued,
            (unsigned long long)f->merged, (unsigned long long)f->calls_below,
            (unsigned long long)f->multi_calls, (unsigned long long)f->bytes, (unsigned long long)f->failures,
            (unsigned long long)f->pool.reused, (unsigned long long)f->pool.fresh,
            (unsigned long long)f->ran_at_call, (unsigned long long)f->uncopied, (unsigned long long)f->waits);
    pthread_mutex_unlock(&Q.mu);
    fclose(out);
}

/* ---------------------------------------------------------------------------------------- tasks */

static void done_release(done_t *d)
{
    if (d && atomic_fetch_sub(&d->refs, 1u) == 1u)
        free(d);
}

/* Let go of what a task holds in the library (HDF5 calls: never with Q.mu held). */
static void task_release_resources(task_t *t)
{
    for (size_t i = 0; i < t->n; i++) {
        item_t *it = &t->items[i];
        if (it->mem_type >= 0)
            H5Tclose(it->mem_type);
        if (it->mem_space > H5S_PLIST)
            H5Sclose(it->mem_space);
        if (it->file_space > H5S_PLIST)
            H5Sclose(it->file_space);
        it->mem_type = it->mem_space = it->file_space = H5I_INVALID_HID;
        if (t->write && !it->borrowed) /* the write below has returned (or never ran): nothing reads the copy */
            h5fa_pool_put(&t->file->pool, it->buf, it->cap, t->file->opts.max_mem);
        it->buf = NULL;
        it->cap = 0;
        if (it->dset)
            h5fpt_obj_release(it->dset);
        it->dset = NULL;
    }
    if (t->dxpl >= 0)
        H5Pclose(t->dxpl);
    t->dxpl = H5I_INVALID_HID;
    if (t->lib_state)
        H5VLfree_lib_state(t->lib_state);
    t->lib_state = NULL;
}

/* Free a task. */
static void task_free(task_t *t)
{
    task_release_resources(t);
    for (size_t i = 0; i < t->ndone; i++)
        done_release(t->done[i]);
    free(t->done);
    free(t->items);
    h5fa_file_release(t->file);
    free(t);
}

static task_t *task_new(size_t n, bool write, h5fa_file_t *f, hid_t dxpl_id)
{
    task_t *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->items = calloc(n, sizeof *t->items);
    t->write = write;
    t->file = f;
    h5fa_file_retain(f);
    t->dxpl = H5I_INVALID_HID;
    if (!t->items) {
        task_free(t);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        t->items[i].mem_type = t->items[i].mem_space = t->items[i].file_space = H5I_INVALID_HID;
    t->n = n;
    hid_t src = dxpl_id == H5P_DEFAULT ? H5P_DATASET_XFER_DEFAULT : dxpl_id;
    t->dxpl = H5Pcopy(src);
    t->dxpl_default = dxpl_id == H5P_DEFAULT || H5Pequal(dxpl_id, H5P_DATASET_XFER_DEFAULT) > 0;
    if (t->dxpl < 0 || H5VLretrieve_lib_state(&t->lib_state) < 0) {
        task_free(t);
        return NULL;
    }
    return t;
}

/* Whether a datatype holds pointers (variable-length data, variable strings, references): such
 * buffers cannot be copied by value, so their writes run at the call. */
static bool has_pointers(hid_t type)
{
    switch (H5Tget_class(type)) {
    case H5T_VLEN:
    case H5T_REFERENCE: return true;
    case H5T_STRING: return H5Tis_variable_str(type) > 0;
    case H5T_ARRAY: {
        hid_t base = H5Tget_super(type);
        bool r = base < 0 || has_pointers(base);
        if (base >= 0)
            H5Tclose(base);
        return r;
    }
    case H5T_COMPOUND: {
        int n = H5Tget_nmembers(type);
        for (int i = 0; i < n; i++) {
            hid_t m = H5Tget_member_type(type, (unsigned)i);
            bool r = m < 0 || has_pointers(m);
            if (m >= 0)
                H5Tclose(m);
            if (r)
                return true;
        }
        return n < 0;
    }
    default: return false;
    }
}

/* The selection of space as one block (regular hyperslab of one block per dimension, or all). */
static bool as_block(hid_t space, block_t *b)
{
    int rank = H5Sget_simple_extent_ndims(space);
    if (rank <= 0 || rank > H5S_MAX_RANK)
        return false;
    b->rank = rank;
    if (H5Sget_simple_extent_dims(space, b->dims, NULL) < 0)
        return false;
    H5S_sel_type sel = H5Sget_select_type(space);
    if (sel == H5S_SEL_ALL) {
        for (int d = 0; d < rank; d++) {
            b->start[d] = 0;
            b->count[d] = b->dims[d];
        }
        return true;
    }
    if (sel != H5S_SEL_HYPERSLABS || H5Sis_regular_hyperslab(space) <= 0)
        return false;
    hsize_t start[H5S_MAX_RANK], stride[H5S_MAX_RANK], count[H5S_MAX_RANK], block[H5S_MAX_RANK];
    if (H5Sget_regular_hyperslab(space, start, stride, count, block) < 0)
        return false;
    for (int d = 0; d < rank; d++) {
        b->start[d] = start[d];
        if (count[d] == 1)
            b->count[d] = block[d];
        else if (block[d] == 1 && stride[d] == 1)
            b->count[d] = count[d];
        else
            return false;
    }
    /* a selection moved by H5Soffset_simple is not where its hyperslab says: keep the space itself */
    hsize_t lo[H5S_MAX_RANK], hi[H5S_MAX_RANK];
    if (H5Sget_select_bounds(space, lo, hi) < 0)
        return false;
    for (int d = 0; d < rank; d++)
        if (b->count[d] == 0 || lo[d] != b->start[d] || hi[d] != b->start[d] + b->count[d] - 1)
            return false;
    return true;
}

/* Whether the selection of memory space msel is one run of consecutive elements: its first element's
 * index in *first. Such a selection is copied with one memcpy instead of the library's gather. */
static bool contiguous_run(hid_t msel, hsize_t *first)
{
    if (msel == H5S_BLOCK || H5Sget_select_type(msel) == H5S_SEL_ALL) {
        *first = 0;
        return true;
    }
    block_t b;
    if (!as_block(msel, &b))
        return false;
    /* trailing dimensions selected whole, one partial dimension, leading ones of one index each */
    int k = b.rank - 1;
    while (k >= 0 && b.count[k] == b.dims[k])
        k--;
    for (int d = 0; d < k; d++)
        if (b.count[d] != 1)
            return false;
    hsize_t idx = 0;
    for (int d = 0; d < b.rank; d++)
        idx = idx * b.dims[d] + b.start[d];
    *first = idx;
    return true;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* What a byte's copy costs before the file has measured one (picoseconds: 5 GB/s). */
#define COPY_PS_GUESS 200u
/* Copies from this size on are timed for the estimate (smaller ones are dominated by the call's overhead). */
#define COPY_TIMED_MIN (256u << 10)

/* The adaptive rule (adapt=, docs/ASYNC.md): whether an implicit write of `bytes` to f runs at the call
 * instead of being copied and queued. It does when the queue still holds work the background thread has not
 * finished (the program writes faster than the storage drains: a copy would hide nothing, and it would hold
 * the library lock the background write needs), and when the program, since f's last write ran at the call
 * or since it last had to wait for unfinished queued work (a flush, a resize; on a parallel file any call),
 * has spent less time than copying this write would take: back-to-back writes stay at the call rather than
 * alternate between queued and at the call. A write that follows time spent computing is copied and queued. */
static bool adapt_at_call(h5fa_file_t *f, size_t bytes)
{
    if (!f->opts.adapt || bytes < f->opts.adapt || f->opts.defer)
        return false;
    pthread_mutex_lock(&Q.mu);
    bool busy = f->pending > 0; /* this handle's work: other files' queued work does not count */
    uint64_t end = f->at_call_end_ns > Q.waited_ns ? f->at_call_end_ns : Q.waited_ns;
    if (f->waited_ns > end)
        end = f->waited_ns;
    uint64_t ps = f->copy_ps_per_byte ? f->copy_ps_per_byte : COPY_PS_GUESS;
    pthread_mutex_unlock(&Q.mu);
    if (busy)
        return true;
    if (!end)
        return false;
    uint64_t now = now_ns();
    return now < end || (now - end) * 1000u < (uint64_t)bytes * ps;
}

/* Fill item i of t from the application's write arguments: copy the selected elements, or with `borrow`
 * (an event-set write with explicit_copy=0) keep the application's buffer and copy only its type and
 * spaces. 1: cannot be queued (run it at the call: pointers, or the adaptive rule when `adaptive`),
 * -1: error, 0: done. */
static int prepare_write_item(item_t *it, h5fa_file_t *f, h5fpt_obj_t *dset, hid_t mem_type, hid_t mem_space,
                              hid_t file_space, const void *buf, bool adaptive, bool borrow)
{
    if (mem_space == H5S_PLIST || file_space == H5S_PLIST || has_pointers(mem_type))
        return 1;
    hid_t dspace = H5I_INVALID_HID;
    int rc = 1;
    if (file_space == H5S_ALL || mem_space == H5S_ALL) {
        H5VL_dataset_get_args_t get = {.op_type = H5VL_DATASET_GET_SPACE};
        if (H5VLdataset_get(dset->under_object, dset->under_vol_id, &get, H5P_DATASET_XFER_DEFAULT, NULL) < 0)
            return -1;
        dspace = get.args.get_space.space_id;
    }
    hid_t fsel = file_space == H5S_ALL ? dspace : file_space;
    hid_t msel = mem_space == H5S_ALL ? fsel : mem_space; /* H5S_ALL in memory: the file's selection */
    hssize_t np = H5Sget_select_npoints(fsel);
    size_t esize = H5Tget_size(mem_type);
    if (np < 0 || esize == 0)
        goto out;
    if (msel != H5S_BLOCK && H5Sget_select_npoints(msel) != np)
        goto out; /* let the library below report the mismatch at the call */
    if (np > 0 && !buf)
        goto out; /* no buffer: the library below reports it at the call */
    it->npoints = (hsize_t)np;
    it->bytes = (size_t)np * esize;
    if (adaptive && adapt_at_call(f, it->bytes))
        goto out; /* rc 1: at the call */
    if (borrow) { /* written from the application's buffer; the spaces it may close at once are copied */
        it->borrowed = true;
        it->buf = (void *)(uintptr_t)buf;
        it->mem_type = H5Tcopy(mem_type);
        it->mem_space = mem_space <= H5S_BLOCK ? mem_space : H5Scopy(mem_space);
        it->file_space = file_space == H5S_ALL ? H5S_ALL : H5Scopy(file_space);
        if (it->mem_type < 0 || it->mem_space < 0 || it->file_space < 0) {
            rc = -1;
            goto out;
        }
        goto keep;
    }
    it->buf = h5fa_pool_get(&f->pool, it->bytes, f->opts.max_mem, &it->cap);
    if (!it->buf) {
        rc = -1;
        H5FPT_ERR("out of memory copying a %zu-byte write", it->bytes);
        goto out;
    }
    hsize_t first = 0;
    uint64_t t0 = now_ns();
    if (np > 0 && contiguous_run(msel, &first))
        memcpy(it->buf, (const char *)buf + first * esize, it->bytes);
    else if (np > 0 && H5Dgather(msel, buf, mem_type, it->bytes, it->buf, NULL, NULL) < 0) {
        rc = -1;
        goto out;
    }
    if (it->bytes >= COPY_TIMED_MIN) {
        uint64_t t1 = now_ns(), ps = t1 > t0 ? (t1 - t0) * 1000u / it->bytes : 0;
        pthread_mutex_lock(&Q.mu);
        f->copy_ps_per_byte = ps ? ps : 1;
        pthread_mutex_unlock(&Q.mu);
    }
    it->mem_type = H5Tcopy(mem_type);
    if (as_block(fsel, &it->blk))
        it->is_block = true;
    else
        it->file_space = file_space == H5S_ALL ? H5S_ALL : H5Scopy(file_space);
    if (it->mem_type < 0 || (!it->is_block && it->file_space < 0)) {
        rc = -1;
        goto out;
    }
keep:
    it->dset = dset;
    h5fpt_obj_retain(dset);
    rc = 0;
out:
    if (dspace >= 0)
        H5Sclose(dspace);
    return rc;
}

/* ------------------------------------------------------------------------------- the background */

static herr_t first_message(unsigned n, const H5E_error2_t *e, void *data)
{
    if (n == 0 && e->desc)
        snprintf(data, 384, "%s", e->desc);
    return 0;
}

/* Run a batch (the thread, no Q.mu held): 0, or -1 with the reason in msg. */
static int run_batch(task_t **batch, size_t nb, char *msg, size_t msglen)
{
    size_t total = 0;
    for (size_t b = 0; b < nb; b++)
        total += batch[b]->n;
    void **objs = calloc(total, sizeof *objs);
    void **bufs = calloc(total, sizeof *bufs);
    hid_t *types = calloc(total, sizeof *types), *mspaces = calloc(total, sizeof *mspaces),
          *fspaces = calloc(total, sizeof *fspaces);
    bool *made_m = calloc(total, sizeof *made_m), *made_f = calloc(total, sizeof *made_f);
    int rc = -1;
    if (!objs || !bufs || !types || !mspaces || !fspaces || !made_m || !made_f) {
        snprintf(msg, msglen, "out of memory running %zu queued operations", total);
        goto out;
    }
    hid_t uvid = batch[0]->items[0].dset->under_vol_id;
    size_t k = 0;
    for (size_t b = 0; b < nb; b++)
        for (size_t i = 0; i < batch[b]->n; i++, k++) {
            item_t *it = &batch[b]->items[i];
            objs[k] = it->dset->under_object;
            types[k] = it->mem_type;
            bufs[k] = it->buf;
            if (batch[b]->write && !it->borrowed) {
                hsize_t n = it->npoints;
                mspaces[k] = H5Screate_simple(1, &n, NULL);
                made_m[k] = true;
            }
            else
                mspaces[k] = it->mem_space;
            if (it->is_block) {
                fspaces[k] = H5Screate_simple(it->blk.rank, it->blk.dims, NULL);
                made_f[k] = true;
                if (fspaces[k] >= 0 && H5Sselect_hyperslab(fspaces[k], H5S_SELECT_SET, it->blk.start, NULL,
                                                           it->blk.count, NULL) < 0) {
                    snprintf(msg, msglen, "cannot rebuild a queued write's selection");
                    goto out;
                }
            }
            else
                fspaces[k] = it->file_space;
            if (mspaces[k] < 0 || fspaces[k] < 0) {
                snprintf(msg, msglen, "cannot rebuild a queued operation's dataspaces");
                goto out;
            }
        }
    hid_t dxpl = batch[0]->dxpl;
    herr_t r = -1;
    /* the calls below run in the library state of the application's call (its API context) */
    if (H5VLstart_lib_state() >= 0) {
        if (H5VLrestore_lib_state(batch[0]->lib_state) >= 0)
            r = batch[0]->write ? H5VLdataset_write(total, objs, uvid, types, mspaces, fspaces, dxpl,
                                                    (const void **)bufs, NULL)
                                : H5VLdataset_read(total, objs, uvid, types, mspaces, fspaces, dxpl, bufs, NULL);
        hid_t err = r < 0 ? H5Eget_current_stack() : H5I_INVALID_HID; /* finishing clears it */
        H5VLfinish_lib_state();
        if (err >= 0)
            H5Eset_current_stack(err);
    }
    if (r < 0) {
        /* the most specific message of the stack below */
        char inner[384] = "";
        hid_t stack = H5Eget_current_stack();
        if (stack >= 0) {
            H5Ewalk2(stack, H5E_WALK_UPWARD, first_message, inner);
            H5Eclose_stack(stack);
        }
        snprintf(msg, msglen, "a background %s of %zu dataset(s) in '%.120s' failed below%s%.300s",
                 batch[0]->write ? "write" : "read", total, batch[0]->file->name, inner[0] ? ": " : "", inner);
        goto out;
    }
    rc = 0;
out:
    for (size_t j = 0; j < total && made_m && made_f; j++) {
        if (made_m[j] && mspaces[j] >= 0)
            H5Sclose(mspaces[j]);
        if (made_f[j] && fspaces[j] >= 0)
            H5Sclose(fspaces[j]);
    }
    free(objs);
    free(bufs);
    free(types);
    free(mspaces);
    free(fspaces);
    free(made_m);
    free(made_f);
    return rc;
}

/* Whether it's dataset (through any handle: two handles of one dataset have two objects below) is among
 * the first n tasks' datasets. One dataset twice in one multi-dataset call would leave the order of its two
 * writes to the connector below (h5flow_log refuses such a call). */
static bool in_batch(task_t **batch, size_t n, const item_t *it)
{
    for (size_t b = 0; b < n; b++)
        for (size_t i = 0; i < batch[b]->n; i++) {
            const item_t *o = &batch[b]->items[i];
            if (o->dset->under_object == it->dset->under_object || !o->has_id || !it->has_id ||
                (o->fileno == it->fileno && !memcmp(&o->token, &it->token, sizeof o->token)))
                return true;
        }
    return false;
}

/* Learn which dataset a queued write's handle names (its file number and object token, looked up once per
 * handle), for in_batch; unknown: never batched with another dataset. */
static void identify(item_t *it) { it->has_id = h5fa_identity_of(it->dset, &it->fileno, &it->token); }

#define MAX_BATCH 32

/* Take the first tasks of the queue as one batch (Q.mu held, the library lock held by this thread): the
 * head, and after it, several datasets of one serial file written one after the other (one multi-dataset
 * call). Marks them running; returns how many. */
static size_t take_batch(task_t **batch)
{
    size_t nb = 0;
    task_t *first = Q.head;
    batch[nb++] = first;
    first->running = true;
    if (first->write && first->file->opts.merge && !first->file->parallel && first->dxpl_default)
        for (task_t *t = first->next; t && nb < MAX_BATCH && t->write && t->file == first->file &&
                                      t->dxpl_default && t->n == 1 &&
                                      !in_batch(batch, nb, &t->items[0]);
             t = t->next) {
            t->running = true;
            batch[nb++] = t;
        }
    return nb;
}

/* Run a batch taken by take_batch, unlink it and complete its requests, then free it (no Q.mu held; the
 * library lock held by this thread from before take_batch until after this returns, so that a thread that
 * holds the library lock never sees a batch half done). */
static void run_taken(task_t **batch, size_t nb)
{
    task_t *first = batch[0];
    char msg[512] = "";
    uint64_t t0 = now_ns();
    pthread_mutex_lock(&Q.mu);
    bool earlier_failed = !first->write && first->file->pending_error[0];
    if (earlier_failed) /* a read after a failed write would return what was never written */
        snprintf(msg, sizeof msg, "not read: an earlier background write failed (%.400s)",
                 first->file->pending_error);
    pthread_mutex_unlock(&Q.mu);
    int rc = earlier_failed ? -1 : run_batch(batch, nb, msg, sizeof msg);
    uint64_t t1 = now_ns();
    for (size_t b = 0; b < nb; b++)
        task_release_resources(batch[b]);

    pthread_mutex_lock(&Q.mu);
    h5fa_file_t *f = first->file;
    if (first->write) {
        f->calls_below++;
        if (nb > 1 || first->n > 1)
            f->multi_calls++;
    }
    for (size_t b = 0; b < nb; b++) {
        task_t *t = batch[b];
        Q.head = t->next;
        if (!Q.head)
            Q.tail = NULL;
        Q.done_seq = t->seq;
        Q.bytes -= t->bytes;
        t->file->pending--;
        t->file->pending_bytes -= t->bytes;
        for (size_t d = 0; d < t->ndone; d++) {
            t->done[d]->state = rc < 0 ? -1 : 1;
            t->done[d]->exec_ts = t0;
            t->done[d]->exec_time = t1 - t0;
            if (rc < 0)
                snprintf(t->done[d]->msg, sizeof t->done[d]->msg, "%s", msg);
        }
        if (rc < 0 && !earlier_failed) {
            t->file->failures++;
            if (!t->file->pending_error[0])
                snprintf(t->file->pending_error, sizeof t->file->pending_error, "%s", msg);
        }
    }
    pthread_cond_broadcast(&Q.progress);
    pthread_mutex_unlock(&Q.mu);
    for (size_t b = 0; b < nb; b++)
        task_free(batch[b]);
}

/* The library lock for the thread's next batch: after a quiet gap (lock_when_quiet), else as soon as it is
 * free. The whole batch then runs under it. */
static void lock_for_batch(unsigned since_last)
{
    if (lock_when_quiet(since_last))
        return;
    for (long wait = 20000;; wait = wait < 1000000 ? wait * 2 : wait) {
        bool acquired = false;
        if (H5TSmutex_acquire(1, &acquired) >= 0 && acquired)
            return;
        nanosleep(&(struct timespec){0, wait}, NULL);
    }
}

static void *worker(void *arg)
{
    (void)arg;
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* failures go to the application, not to this thread's stderr */
    unsigned attempts_after_batch = 0;
    H5TSmutex_get_attempt_count(&attempts_after_batch);
    pthread_mutex_lock(&Q.mu);
    for (;;) {
        while (!Q.stop && (!Q.head || (Q.head->file->opts.defer && Q.head->seq > Q.release_seq)))
            pthread_cond_wait(&Q.work, &Q.mu);
        if (!Q.head)
            break;
        pthread_mutex_unlock(&Q.mu);

        /* let an application thread that waits for the library lock have it first */
        while (atomic_load(&Q.app_waiting) > 0)
            nanosleep(&(struct timespec){0, 50000}, NULL);
        lock_for_batch(attempts_after_batch);
        /* the batch is taken only with the library lock held: a thread inside HDF5 that waits for the
         * queue (h5fa_drain) finds every task either done or not begun, and runs what is left itself */
        pthread_mutex_lock(&Q.mu);
        task_t *batch[MAX_BATCH];
        size_t nb = Q.head && !(Q.head->file->opts.defer && Q.head->seq > Q.release_seq) ? take_batch(batch) : 0;
        pthread_mutex_unlock(&Q.mu);
        if (nb)
            run_taken(batch, nb);
        unsigned count = 0;
        H5TSmutex_release(&count);
        H5TSmutex_get_attempt_count(&attempts_after_batch);
        pthread_mutex_lock(&Q.mu);
    }
    pthread_mutex_unlock(&Q.mu);
    return NULL;
}

/* Run queued tasks on the calling thread, which holds the library lock (it is inside an HDF5 call), until
 * until(arg) holds or the queue is empty (until evaluated with Q.mu held). The background thread takes and
 * runs a batch only with the library lock held, so no task is half run here. The library lock is never let
 * go: a connector stacked above (h5flow_cache's migration) or the program's other threads never run in the
 * middle of the call that waits. Returns whether anything was run. */
static bool run_here(bool (*until)(const void *), const void *arg)
{
    bool ran = false;
    H5E_auto2_t func = NULL;
    void *data = NULL;
    bool quiet = false;
    pthread_mutex_lock(&Q.mu);
    while (Q.head && !until(arg)) {
        task_t *batch[MAX_BATCH];
        size_t nb = take_batch(batch);
        pthread_mutex_unlock(&Q.mu);
        if (!quiet) { /* a queued operation's failure is reported later, by h5fa_check: not printed here */
            H5Eget_auto2(H5E_DEFAULT, &func, &data);
            H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
            quiet = true;
        }
        run_taken(batch, nb);
        ran = true;
        pthread_mutex_lock(&Q.mu);
    }
    pthread_mutex_unlock(&Q.mu);
    if (quiet)
        H5Eset_auto2(H5E_DEFAULT, func, data);
    return ran;
}

/* Whether the calling thread holds the library lock: every VOL callback runs inside an HDF5 call, which
 * holds it, except during the library's shutdown (H5close from atexit may close files without it). */
static bool in_library_call(void)
{
    hbool_t terminating = false;
    return H5is_library_terminating(&terminating) >= 0 && !terminating;
}

/* A child of fork() has no background thread: it starts afresh (the parent's queued work is the
 * parent's to finish), instead of waiting for ever on a thread that is not there. */
static void forget_in_child(void)
{
    for (task_t *t = Q.head; t; t = t->next) { /* the parent's tasks: no handle of the child waits for them */
        t->file->pending = 0;
        t->file->pending_bytes = 0;
    }
    pthread_mutex_init(&Q.mu, NULL);
    pthread_cond_init(&Q.work, NULL);
    pthread_cond_init(&Q.progress, NULL);
    Q.head = Q.tail = NULL;
    Q.next_seq = Q.done_seq = Q.release_seq = Q.waited_ns = 0;
    Q.bytes = 0;
    Q.started = Q.stop = false;
    atomic_store(&Q.app_waiting, 0);
    atomic_store(&Q.app_draining, 0);
}

static void register_atfork(void) { pthread_atfork(NULL, NULL, forget_in_child); }

/* Link t at the tail (Q.mu held), starting the thread if needed: 0, or -1 when it cannot start. */
static int link_task(task_t *t)
{
    static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
    pthread_once(&atfork_once, register_atfork);
    if (!Q.started) {
        if (pthread_create(&Q.thread, NULL, worker, NULL) != 0)
            return -1;
        Q.started = true;
        Q.stop = false;
    }
    t->seq = ++Q.next_seq;
    if (Q.tail)
        Q.tail->next = t;
    else
        Q.head = t;
    Q.tail = t;
    Q.bytes += t->bytes;
    t->file->pending++;
    t->file->pending_bytes += t->bytes;
    pthread_cond_signal(&Q.work);
    return 0;
}

/* Merging saves calls below, which matters for small writes; a large write gains nothing from it and
 * the merged buffer would be copied as it grows. */
#define MERGE_MAX_BYTES (4u << 20)

/* Fold write t (one dataset, a block) into the queue's last task when that is a write of the same
 * dataset whose block ends where t's begins along the first dimension (Q.mu held). */
static bool try_merge(task_t *t)
{
    task_t *p = Q.tail;
    if (!p || p->running || !p->write || p->n != 1 || t->n != 1 || p->file != t->file || !t->file->opts.merge ||
        t->file->parallel)
        return false;
    item_t *a = &p->items[0], *b = &t->items[0];
    if (a->bytes + b->bytes > MERGE_MAX_BYTES)
        return false;
    /* a borrowed write is the application's memory: never grown, never written into, never folded into a copy */
    if (a->borrowed || b->borrowed || a->dset->under_object != b->dset->under_object || !a->is_block ||
        !b->is_block || a->blk.rank != b->blk.rank)
        return false;
    for (int d = 0; d < a->blk.rank; d++)
        if (a->blk.dims[d] != b->blk.dims[d] || (d > 0 && (a->blk.start[d] != b->blk.start[d] ||
                                                            a->blk.count[d] != b->blk.count[d])))
            return false;
    if (b->blk.start[0] != a->blk.start[0] + a->blk.count[0])
        return false;
    if (!(p->dxpl_default && t->dxpl_default) && H5Pequal(p->dxpl, t->dxpl) <= 0)
        return false;
    if (H5Tequal(a->mem_type, b->mem_type) <= 0)
        return false;
    done_t **dn = realloc(p->done, (p->ndone + t->ndone + 1) * sizeof *dn);
    if (!dn)
        return false;
    p->done = dn;
    h5fa_pool_t *pool = &t->file->pool;
    uint64_t bound = t->file->opts.max_mem;
    if (a->cap ? a->cap < a->bytes + b->bytes : true) { /* a larger copy buffer (a malloc block grows in place) */
        size_t cap = 0;
        void *grown = a->cap ? h5fa_pool_get(pool, a->bytes + b->bytes, bound, &cap)
                             : realloc(a->buf, a->bytes + b->bytes);
        if (!grown)
            return false;
        if (a->cap) {
            memcpy(grown, a->buf, a->bytes);
            h5fa_pool_put(pool, a->buf, a->cap, bound);
        }
        a->buf = grown;
        a->cap = cap;
    }
    memcpy((char *)a->buf + a->bytes, b->buf, b->bytes);
    a->bytes += b->bytes;
    a->npoints += b->npoints;
    a->blk.count[0] += b->blk.count[0];
    for (size_t d = 0; d < t->ndone; d++)
        p->done[p->ndone++] = t->done[d];
    t->ndone = 0;
    p->bytes += b->bytes;
    Q.bytes += b->bytes;
    p->file->pending_bytes += b->bytes;
    return true;
}

/* Whether f's queued writes leave room for `need` more bytes (Q.mu held): the bound is per file handle,
 * so a write never waits for another file's queued bytes. */
static bool queue_has_room(const h5fa_file_t *f, uint64_t need)
{
    return f->pending == 0 || f->pending_bytes + need <= f->opts.max_mem;
}

typedef struct room {
    const h5fa_file_t *f;
    uint64_t need;
} room_t;

static bool has_room_for(const void *arg)
{
    const room_t *r = arg;
    return queue_has_room(r->f, r->need);
}

/* The last queued task of handle f, 0 if none (Q.mu held). */
static uint64_t last_task_of(const h5fa_file_t *f)
{
    uint64_t last = 0;
    for (task_t *t = Q.head; t && f->pending; t = t->next)
        if (t->file == f)
            last = t->seq;
    return last;
}

/* The number of the file t's datasets lie in, when they all lie in one whose number is known. */
static void task_fileno(task_t *t)
{
    t->fileno_ok = t->n > 0;
    for (size_t i = 0; i < t->n && t->fileno_ok; i++) {
        unsigned long no = 0;
        t->fileno_ok = h5fa_fileno_of(t->items[i].dset, &no) && (i == 0 || no == t->fileno);
        t->fileno = no;
    }
}

/* A request for done d (one more reference), in the wrapper form the class's request callbacks take. */
static void *new_request(done_t *d)
{
    h5fpt_obj_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->under_vol_id = H5I_INVALID_HID; /* ours, not a request of the connector below */
    r->under_object = d;
    r->type = H5I_BADID;
    atomic_init(&r->refs, 1u);
    atomic_fetch_add(&d->refs, 1u);
    return r;
}

/* Queue t (prepared) for file f; req: hand back a request. */
static int enqueue(task_t *t, h5fa_file_t *f, void **req)
{
    task_fileno(t);
    done_t *d = NULL;
    if (req) {
        d = calloc(1, sizeof *d);
        t->done = malloc(sizeof *t->done);
        if (!d || !t->done) {
            free(d);
            task_free(t);
            H5FPT_ERR("out of memory for an event-set request");
            return -1;
        }
        atomic_init(&d->refs, 1u);
        t->done[0] = d;
        t->ndone = 1;
        *req = new_request(d);
        if (!*req) {
            task_free(t);
            H5FPT_ERR("out of memory for an event-set request");
            return -1;
        }
    }
    uint64_t all_bytes = 0, borrowed = 0;
    for (size_t i = 0; i < t->n && t->write; i++) {
        all_bytes += t->items[i].bytes;
        if (t->items[i].borrowed)
            borrowed++;
        else
            t->bytes += t->items[i].bytes; /* what the queue holds in copies: max_mem's count */
    }
    /* memory bound (per file handle): the oldest queued work runs here, on this thread, until this
     * handle's queued copies leave room; a write that copied nothing takes no room and never waits */
    pthread_mutex_lock(&Q.mu);
    if (t->bytes && !queue_has_room(f, t->bytes)) {
        release_deferred_to(last_task_of(f));
        f->waits++;
        pthread_mutex_unlock(&Q.mu);
        const room_t need = {f, t->bytes};
        run_here(has_room_for, &need);
        pthread_mutex_lock(&Q.mu);
    }
    bool merged = t->write && try_merge(t);
    int rc = 0;
    if (merged)
        f->merged++;
    else if (link_task(t) < 0)
        rc = -1;
    if (t->write) {
        f->queued += t->n;
        f->uncopied += borrowed;
        f->bytes += all_bytes;
        f->at_call_end_ns = 0;
    }
    pthread_mutex_unlock(&Q.mu);
    if (merged)
        task_free(t);
    if (rc < 0) {
        if (req && *req) {
            h5fa_request_free(*req);
            *req = NULL;
        }
        task_free(t);
        H5FPT_ERR("cannot start the background thread");
    }
    return rc;
}

int h5fa_queue_write(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                     hid_t file_space_id[], hid_t dxpl_id, const void *buf[], void **req)
{
    h5fa_file_t *f = h5fa_file_of(dset[0]);
    pthread_mutex_lock(&Q.mu);
    f->writes += count;
    pthread_mutex_unlock(&Q.mu);
    if (!req && !f->opts.implicit)
        return 1;
    for (size_t i = 1; i < count; i++)
        if (h5fa_file_of(dset[i]) != f)
            return 1; /* datasets of several file handles in one call: run it at the call */
    task_t *t = task_new(count, true, f, dxpl_id);
    if (!t) {
        H5FPT_ERR("out of memory queueing a write");
        return -1;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < count; i++) {
        int rc = prepare_write_item(&t->items[i], f, dset[i], mem_type_id[i], mem_space_id[i], file_space_id[i],
                                    buf[i], !req, req && !f->opts.explicit_copy);
        total += t->items[i].borrowed ? 0 : t->items[i].bytes; /* the copies' bytes: max_mem's count */
        if (rc != 0 || total > f->opts.max_mem) { /* larger than the bound: run it at the call */
            task_free(t);
            return rc < 0 ? -1 : 1;
        }
        if (f->opts.merge && !f->parallel)
            identify(&t->items[i]); /* for batching (take_batch) */
    }
    return enqueue(t, f, req);
}

int h5fa_queue_read(size_t count, void *dset[], hid_t mem_type_id[], hid_t mem_space_id[],
                    hid_t file_space_id[], hid_t dxpl_id, void *buf[], void **req)
{
    h5fa_file_t *f = h5fa_file_of(dset[0]);
    for (size_t i = 1; i < count; i++)
        if (h5fa_file_of(dset[i]) != f)
            return 1;
    task_t *t = task_new(count, false, f, dxpl_id);
    if (!t) {
        H5FPT_ERR("out of memory queueing a read");
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        item_t *it = &t->items[i];
        if (mem_space_id[i] == H5S_PLIST || file_space_id[i] == H5S_PLIST) {
            task_free(t);
            return 1;
        }
        it->dset = dset[i];
        h5fpt_obj_retain(dset[i]);
        it->mem_type = H5Tcopy(mem_type_id[i]);
        it->mem_space = mem_space_id[i] <= H5S_BLOCK ? mem_space_id[i] : H5Scopy(mem_space_id[i]);
        it->file_space = file_space_id[i] <= H5S_BLOCK ? file_space_id[i] : H5Scopy(file_space_id[i]);
        it->buf = buf[i];
        if (it->mem_type < 0 || it->mem_space < 0 || it->file_space < 0) {
            task_free(t);
            return -1;
        }
    }
    return enqueue(t, f, req);
}

/* -------------------------------------------------------------------------------------- waiting */

static bool reached_seq(const void *arg) { return Q.done_seq >= *(const uint64_t *)arg; }

/* Wait until task `target` has run (Q.mu held on entry, not on return). Inside an HDF5 call the queued
 * work up to it runs here, on this thread, the library lock kept (run_here); at the library's shutdown the
 * background thread finishes it. f: the handle that waits (counted), NULL for the whole queue. */
static void wait_until(uint64_t target, h5fa_file_t *f)
{
    release_deferred_to(target);
    bool done = Q.done_seq >= target;
    if (!done && f)
        f->waits++;
    pthread_mutex_unlock(&Q.mu);
    if (done)
        return;
    if (in_library_call()) {
        run_here(reached_seq, &target);
    } else { /* shutdown: the background thread finishes the queue */
        unsigned held = lib_release();
        atomic_fetch_add(&Q.app_draining, 1);
        pthread_mutex_lock(&Q.mu);
        while (Q.done_seq < target)
            pthread_cond_wait(&Q.progress, &Q.mu);
        pthread_mutex_unlock(&Q.mu);
        atomic_fetch_sub(&Q.app_draining, 1);
        lib_reacquire(held);
    }
    pthread_mutex_lock(&Q.mu);
    /* the program needed the queued work before it was done: nothing was hidden */
    if (f)
        f->waited_ns = now_ns();
    else
        Q.waited_ns = now_ns();
    pthread_mutex_unlock(&Q.mu);
}

void h5fa_drain(void)
{
    pthread_mutex_lock(&Q.mu);
    wait_until(Q.next_seq, NULL);
}

void h5fa_wait_for(h5fa_file_t *f, const h5fpt_obj_t *obj)
{
    unsigned long fileno = 0;
    bool known = f && !f->parallel && (obj ? h5fa_fileno_of(obj, &fileno) : (fileno = f->fileno, f->fileno_ok));
    pthread_mutex_lock(&Q.mu);
    if (!known) {
        if (f)
            f->waits += Q.done_seq < Q.next_seq;
        wait_until(Q.next_seq, NULL);
        return;
    }
    /* the last task queued through f, on the same file, or on a file whose number is not known */
    uint64_t target = 0;
    for (task_t *t = Q.head; t; t = t->next)
        if (t->file == f || !t->fileno_ok || t->fileno == fileno)
            target = t->seq;
    wait_until(target, f);
}

void h5fa_count_at_call(h5fa_file_t *f, size_t count)
{
    uint64_t end = now_ns();
    pthread_mutex_lock(&Q.mu);
    f->calls_below++;
    f->ran_at_call += count;
    f->at_call_end_ns = end;
    pthread_mutex_unlock(&Q.mu);
}

int h5fa_wait_and_check(h5fa_file_t *f, const h5fpt_obj_t *obj)
{
    h5fa_wait_for(f, obj);
    return h5fa_check(f);
}

int h5fa_check(h5fa_file_t *f)
{
    char msg[sizeof f->pending_error] = "";
    pthread_mutex_lock(&Q.mu);
    if (f && f->pending_error[0]) {
        memcpy(msg, f->pending_error, sizeof msg);
        f->pending_error[0] = '\0';
    }
    pthread_mutex_unlock(&Q.mu);
    if (msg[0]) {
        H5FPT_ERR("%s", msg);
        return -1;
    }
    return 0;
}

void h5fa_queue_stop(void)
{
    pthread_mutex_lock(&Q.mu);
    bool started = Q.started;
    Q.stop = true;
    pthread_cond_broadcast(&Q.work);
    pthread_mutex_unlock(&Q.mu);
    if (started) {
        unsigned held = lib_release();
        pthread_join(Q.thread, NULL);
        lib_reacquire(held);
    }
    pthread_mutex_lock(&Q.mu);
    Q.started = false;
    pthread_mutex_unlock(&Q.mu);
}

/* ------------------------------------------------------------------------------------- requests */

static bool is_ours(const h5fpt_obj_t *r) { return r->under_vol_id == H5I_INVALID_HID; }

static bool request_done(const void *arg) { return ((const done_t *)arg)->state != 0; }

herr_t h5fa_request_wait(void *req, uint64_t timeout, H5VL_request_status_t *status)
{
    h5fpt_obj_t *r = req;
    if (!is_ours(r))
        return h5fpt_request_wait(req, timeout, status);
    done_t *d = r->under_object;
    pthread_mutex_lock(&Q.mu);
    int state = d->state;
    if (state == 0)
        release_deferred(); /* waited for: deferred work starts */
    pthread_mutex_unlock(&Q.mu);
    if (state == 0 && timeout > 0 && in_library_call()) {
        run_here(request_done, d); /* the queue runs here, in order, until d's operation has run */
        pthread_mutex_lock(&Q.mu);
        state = d->state;
        pthread_mutex_unlock(&Q.mu);
    }
    else if (state == 0 && timeout > 0) {
        unsigned held = lib_release();
        atomic_fetch_add(&Q.app_draining, 1);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        uint64_t ns = (uint64_t)until.tv_nsec + (timeout == H5ES_WAIT_FOREVER ? 0 : timeout % 1000000000ull);
        until.tv_sec += (time_t)(timeout == H5ES_WAIT_FOREVER ? 0 : timeout / 1000000000ull) + (time_t)(ns / 1000000000ull);
        until.tv_nsec = (long)(ns % 1000000000ull);
        pthread_mutex_lock(&Q.mu);
        while (d->state == 0) {
            if (timeout == H5ES_WAIT_FOREVER)
                pthread_cond_wait(&Q.progress, &Q.mu);
            else if (pthread_cond_timedwait(&Q.progress, &Q.mu, &until) == ETIMEDOUT)
                break;
        }
        state = d->state;
        pthread_mutex_unlock(&Q.mu);
        atomic_fetch_sub(&Q.app_draining, 1);
        lib_reacquire(held);
    }
    *status = state == 0 ? H5VL_REQUEST_STATUS_IN_PROGRESS
              : state > 0 ? H5VL_REQUEST_STATUS_SUCCEED
                          : H5VL_REQUEST_STATUS_FAIL;
    return 0;
}

herr_t h5fa_request_notify(void *req, H5VL_request_notify_t cb, void *ctx)
{
    h5fpt_obj_t *r = req;
    if (!is_ours(r))
        return h5fpt_request_notify(req, cb, ctx);
    H5FPT_ERR("completion callbacks are not supported; wait on the event set");
    return -1;
}

herr_t h5fa_request_cancel(void *req, H5VL_request_status_t *status)
{
    h5fpt_obj_t *r = req;
    if (!is_ours(r))
        return h5fpt_request_cancel(req, status);
    *status = H5VL_REQUEST_STATUS_CANT_CANCEL; /* queued work always runs: program order */
    return 0;
}

herr_t h5fa_request_specific(void *req, H5VL_request_specific_args_t *args)
{
    h5fpt_obj_t *r = req;
    if (!is_ours(r))
        return h5fpt_request_specific(req, args);
    done_t *d = r->under_object;
    char msg[sizeof d->msg];
    pthread_mutex_lock(&Q.mu);
    int state = d->state;
    uint64_t exec_ts = d->exec_ts, exec_time = d->exec_time;
    memcpy(msg, d->msg, sizeof msg);
    pthread_mutex_unlock(&Q.mu);
    if (args->op_type == H5VL_REQUEST_GET_EXEC_TIME) {
        *args->args.get_exec_time.exec_ts = exec_ts;
        *args->args.get_exec_time.exec_time = exec_time;
        return 0;
    }
    if (args->op_type == H5VL_REQUEST_GET_ERR_STACK) {
        hid_t stack = H5Ecreate_stack();
        if (stack < 0)
            return -1;
        if (state < 0)
            h5fpt_error_on(stack, __FILE__, __func__, __LINE__, "%s", msg);
        args->args.get_err_stack.err_stack_id = stack;
        return 0;
    }
    H5FPT_ERR("request operation %d is not supported", (int)args->op_type);
    return -1;
}

herr_t h5fa_request_optional(void *req, H5VL_optional_args_t *args)
{
    h5fpt_obj_t *r = req;
    if (!is_ours(r))
        return h5fpt_request_optional(req, args);
    H5FPT_ERR("optional request operations are not supported");
    return -1;
}

herr_t h5fa_request_free(void *req)
{
    h5fpt_obj_t *r = req;
    if (!is_ours(r))
        return h5fpt_request_free(req);
    done_release(r->under_object);
    free(r);
    return 0;
}
