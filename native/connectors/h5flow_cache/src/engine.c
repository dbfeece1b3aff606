/* The engine of an open file: cached writes queued in program order, migrated to the layer below by a
 * background thread, drained on the calling thread when an operation depends on them.
 *
 * Who may migrate: only a thread that holds HDF5's global lock. The application's thread holds it inside
 * every HDF5 call (H5Dwrite, H5Fflush, H5Fclose ...); the migration thread takes it with H5TSmutex_acquire
 * when the application is outside HDF5 (computing). So a record is never half-migrated while another
 * thread looks at the queue, a drain on the application's thread never waits for the migration thread (no
 * deadlock), and the migration overlaps exactly the time the application spends outside HDF5.
 *
 * One file on purpose, though it is long: the file's record queue, its migration thread, the dataset
 * writes that fill the queue and the reads that must see what is still queued hold the same lock and the
 * same records, and their order rules (above) are only checkable together. */
#include "hfc.h"

#include <H5TSdevelop.h>
#include <H5VLconnector_passthru.h>
#include <errno.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct hfc_rec {
    struct hfc_rec *next;
    hfc_dset_t *d;
    hid_t fspace; /* the file selection (a copy, never H5S_ALL) */
    uint64_t npoints;
    hfc_loc_t loc;
    hfc_runs_t runs; /* computed the first time a read overlaps */
    int runs_ok;
} hfc_rec_t;

struct hfc_dset {
    hfc_dset_t *next;
    hfc_file_t *f;
    void *under;      /* the dataset below that migrations write to */
    hid_t under_vol;  /* held */
    unsigned char token[16];
    int token_ok;
    int refs;         /* open handles */
    int owned;        /* the handle of `under` is closed: the engine closes it when nothing is pending */
    uint64_t pending; /* queued records */
    unsigned char *tenc; /* the dataset's type in the file, encoded (H5Tencode): an open type id would count
                            as an open named datatype of every file (H5Fget_obj_count(H5F_OBJ_ALL)) */
    size_t tsize;
    int plain;        /* the type is of a class the cache keeps (numbers, bitfields, fixed strings, enums) */
    int must_collective; /* filtered dataset in an MPI file: writes stay collective, never cached */
    int unallocated;  /* contiguous, its storage not allocated below yet: writes go through (storage_ready) */
};

struct hfc_file {
    hfc_file_t *next;
    unsigned long key;
    int key_ok;
    int refs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hfc_cfg_t cfg;
    hfc_tier_t tier;
    hfc_store_t *store;
    uint64_t capacity;
    hfc_rec_t *head, *tail;
    hfc_rec_t *inflight; /* taken from the queue and being written below (by the thread that took it) */
    uint64_t pending_bytes;
    hfc_dset_t *dsets;
    pthread_t thread;
    int thread_on;
    int background;   /* migrate on a thread of its own, started at the first cached write */
    uint64_t segment; /* segment size of the store, made at the first cached write */
    int stop;
    int mpio;
    pid_t pid;        /* the process that opened the file: a forked child leaves the cache to its parent */
    MPI_Comm comm;    /* the file's communicator (MPI files), for agreeing on errors at flush and close */
    char error[1024]; /* the first migration error; sticky until a drain succeeds again */
    hfc_stats_t stats;
};

/* Files open through this connector, so that a second handle of the same file below shares its engine
 * (and its cached writes: a read through the second handle sees them). */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static hfc_file_t *reg_head = NULL;


static void *migrator(void *arg);

/* fork() while a migration thread holds HDF5's global lock would leave the child a library locked by a
 * thread it does not have (its first HDF5 call, at the latest H5close at exit, would wait for ever). A
 * migration thread holds this gate for as long as it holds HDF5's lock; fork takes it first. */
static pthread_mutex_t fork_gate = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void gate_lock(void) { pthread_mutex_lock(&fork_gate); }
static void gate_unlock(void) { pthread_mutex_unlock(&fork_gate); }
/* fork: no migration thread inside HDF5 (the gate), and every engine's mutex held by the forking thread,
 * so that the child gets them all unlocked */
static void fork_prepare(void)
{
    gate_lock();
    pthread_mutex_lock(&reg_mu);
    for (hfc_file_t *f = reg_head; f; f = f->next)
        pthread_mutex_lock(&f->mu);
}

static void fork_after(void)
{
    for (hfc_file_t *f = reg_head; f; f = f->next)
        pthread_mutex_unlock(&f->mu);
    pthread_mutex_unlock(&reg_mu);
    gate_unlock();
}

static void fork_gate_install(void) { pthread_atfork(fork_prepare, fork_after, fork_after); }

static int plain_class(hid_t t)
{
    H5T_class_t c = H5Tget_class(t);
    switch (c) {
    case H5T_INTEGER:
    case H5T_FLOAT:
    case H5T_BITFIELD:
    case H5T_ENUM:
    case H5T_OPAQUE:
        return 1;
    case H5T_STRING:
        return H5Tis_variable_str(t) == 0;
    default:
        return 0;
    }
}

/* The dataset's file type as a transient id for the length of one operation (close it). */
static hid_t dset_type(const hfc_dset_t *d)
{
    hid_t t = d->tenc ? H5Tdecode(d->tenc) : H5I_INVALID_HID;
    if (t < 0)
        hfc_err("h5flow_cache: cannot rebuild a dataset's datatype");
    return t;
}

hfc_file_t *hfc_file_open(const hfc_cfg_t *cfg, hid_t fapl_id, unsigned long key, int key_ok)
{
    if (key_ok) {
        pthread_mutex_lock(&reg_mu);
        for (hfc_file_t *f = reg_head; f; f = f->next)
            if (f->key_ok && f->key == key) {
                pthread_mutex_lock(&f->mu);
                f->refs++;
                pthread_mutex_unlock(&f->mu);
                pthread_mutex_unlock(&reg_mu);
                return f;
            }
        pthread_mutex_unlock(&reg_mu);
    }
    hfc_file_t *f = calloc(1, sizeof *f);
    if (!f) {
        hfc_err("h5flow_cache: out of memory");
        return NULL;
    }
    f->cfg = *cfg;
    if (hfc_tier_choose(cfg->path, "connector settings", &f->tier) != 0) {
        free(f);
        return NULL;
    }
    /* default capacity: half of the tier's free space, at most 4 GiB */
    f->capacity = cfg->capacity;
    if (!f->capacity) {
        uint64_t half = f->tier.free_bytes / 2;
        f->capacity = half < (4ull << 30) ? half : (4ull << 30);
        if (f->capacity < (1u << 20))
            f->capacity = 1u << 20;
    }
    uint64_t seg = f->capacity / 4;
    if (seg > (64u << 20))
        seg = 64u << 20;
    if (seg < (64u << 10))
        seg = 64u << 10;
    f->segment = seg;
    f->pid = getpid();
    f->key = key;
    f->key_ok = key_ok;
    f->refs = 1;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
    f->mpio = fapl_id > 0 && fapl_id != H5P_DEFAULT && H5Pget_driver(fapl_id) == H5FD_MPIO;
    f->comm = MPI_COMM_NULL;
    if (f->mpio) {
        MPI_Info minfo = MPI_INFO_NULL;
        if (H5Pget_fapl_mpio(fapl_id, &f->comm, &minfo) < 0) { /* a duplicate, ours to free */
            H5Eclear2(H5E_DEFAULT);
            f->comm = MPI_COMM_NULL;
        }
        if (minfo != MPI_INFO_NULL)
            MPI_Info_free(&minfo);
    }
    int background = cfg->background;
    if (background && f->mpio) {
        /* the migration thread writes with MPI-IO while the application may be in MPI itself */
        int inited = 0, level = MPI_THREAD_SINGLE;
        if (MPI_Initialized(&inited) == MPI_SUCCESS && inited)
            MPI_Query_thread(&level);
        if (level < MPI_THREAD_MULTIPLE) {
            background = 0;
            static atomic_int said = 0;
            if (atomic_exchange(&said, 1) == 0)
                fprintf(stderr, "h5flow_cache: MPI runs below MPI_THREAD_MULTIPLE, so cached writes of MPI "
                                "files migrate at flush, close and when the cache is full, not in the "
                                "background (initialise MPI with MPI_THREAD_MULTIPLE for background migration)\n");
        }
    }
    f->background = background;
    pthread_mutex_lock(&reg_mu);
    f->next = reg_head;
    reg_head = f;
    pthread_mutex_unlock(&reg_mu);
    return f;
}

hfc_file_t *hfc_file_open_for(const hfc_file_t *handle, unsigned long key)
{
    hfc_cfg_t cfg = handle->cfg;
    if (handle->mpio)
        cfg.background = 0; /* no communicator known here: migration stays on the application's thread */
    return hfc_file_open(&cfg, H5P_DEFAULT, key, 1);
}

int hfc_file_key(const hfc_file_t *f, unsigned long *key)
{
    *key = f->key;
    return f->key_ok;
}

const char *hfc_file_cache_dir(const hfc_file_t *f) { return f->store ? hfc_store_dir(f->store) : ""; }

/* The cache directory and the migration thread exist from the first cached write on: a file only read, or
 * written only through, costs neither. Called by the thread that writes (HDF5's lock held). */
static int ensure_started(hfc_file_t *f)
{
    if (!f->store) {
        hfc_tier_sweep(f->tier.dir); /* directories of dead processes of this host go first */
        f->store = hfc_store_open(f->tier.dir, f->segment);
        if (!f->store)
            return -1;
    }
    if (f->background && !f->thread_on) {
        pthread_once(&fork_once, fork_gate_install);
        if (pthread_create(&f->thread, NULL, migrator, f) == 0)
            f->thread_on = 1;
    }
    return 0;
}

void hfc_file_stats(hfc_file_t *f, hfc_stats_t *out)
{
    pthread_mutex_lock(&f->mu);
    *out = f->stats;
    out->pending_bytes = f->pending_bytes;
    pthread_mutex_unlock(&f->mu);
}

static void dset_free(hfc_dset_t *d)
{
    hfc_file_t *f = d->f;
    for (hfc_dset_t **pp = &f->dsets; *pp; pp = &(*pp)->next)
        if (*pp == d) {
            *pp = d->next;
            break;
        }
    free(d->tenc);
    H5Idec_ref(d->under_vol);
    free(d);
}

/* The engine closes a dataset whose handles are all gone once nothing of it is queued. */
static int dset_maybe_close(hfc_dset_t *d)
{
    if (d->refs > 0 || d->pending > 0 || !d->owned)
        return 0;
    int rc = 0;
    if (H5VLdataset_close(d->under, d->under_vol, H5P_DATASET_XFER_DEFAULT, NULL) < 0) {
        char msg[512];
        hfc_h5_error_text(msg, sizeof msg);
        hfc_err("h5flow_cache: closing a dataset below after its writes migrated failed: %s", msg);
        rc = -1;
    }
    dset_free(d);
    return rc;
}

/* Migrate the oldest record. The caller holds HDF5's global lock. Returns 1 if one was migrated, 0 if the
 * queue is empty, -1 if the write below failed (the record stays first in the queue). */
/* Put a record taken by migrate_one back first in the queue (its write failed). */
static void requeue(hfc_file_t *f, hfc_rec_t *r)
{
    pthread_mutex_lock(&f->mu);
    r->next = f->head;
    f->head = r;
    if (!f->tail)
        f->tail = r;
    f->inflight = NULL;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static int migrate_one(hfc_file_t *f)
{
    /* The record is taken from the queue before it is written, so that no two threads write it. Normally
     * that cannot happen (both would need HDF5's lock), but HDF5 shuts down from atexit without its lock,
     * and the migration thread may then take the lock while the exiting thread closes the file. */
    pthread_mutex_lock(&f->mu);
    hfc_rec_t *r = f->head;
    if (r) {
        f->head = r->next;
        if (!f->head)
            f->tail = NULL;
        r->next = NULL;
        f->inflight = r;
    }
    pthread_mutex_unlock(&f->mu);
    if (!r)
        return 0;
    hfc_dset_t *d = r->d;
    /* the cached bytes as they lie in the tier (no copy, no buffer to fault in); a copy when they cannot be */
    hfc_view_t view;
    const void *mapped = hfc_store_map(f->store, &r->loc, &view);
    void *buf = mapped ? NULL : malloc(r->loc.len ? r->loc.len : 1);
    if (!mapped && !buf) {
        pthread_mutex_lock(&f->mu);
        if (!f->error[0])
            snprintf(f->error, sizeof f->error, "h5flow_cache: out of memory migrating a cached write");
        pthread_mutex_unlock(&f->mu);
        requeue(f, r);
        return -1;
    }
    if (!mapped && hfc_store_get(f->store, &r->loc, buf) != 0) {
        pthread_mutex_lock(&f->mu);
        if (!f->error[0])
            snprintf(f->error, sizeof f->error, "%s", hfc_err_msg());
        pthread_mutex_unlock(&f->mu);
        hfc_err_clear();
        free(buf);
        requeue(f, r);
        return -1;
    }
    hsize_t n = r->npoints;
    hid_t ms = H5Screate_simple(1, &n, NULL);
    hid_t ft = dset_type(d);
    hfc_err_clear();
    const void *bufs[1] = {mapped ? mapped : buf};
    void *objs[1] = {d->under};
    hid_t mts[1] = {ft}, mss[1] = {ms}, fss[1] = {r->fspace};
    herr_t w = ft < 0 ? -1
                      : H5VLdataset_write(1, objs, d->under_vol, mts, mss, fss, H5P_DATASET_XFER_DEFAULT, bufs, NULL);
    H5Sclose(ms);
    if (ft >= 0)
        H5Tclose(ft);
    free(buf);
    hfc_store_unmap(&view);
    if (w < 0) {
        char msg[700];
        hfc_h5_error_text(msg, sizeof msg);
        H5Eclear2(H5E_DEFAULT);
        pthread_mutex_lock(&f->mu);
        if (!f->error[0])
            snprintf(f->error, sizeof f->error,
                     "h5flow_cache: writing %llu cached bytes to the layer below failed: %s",
                     (unsigned long long)r->loc.len, msg);
        pthread_mutex_unlock(&f->mu);
        requeue(f, r);
        return -1;
    }
    pthread_mutex_lock(&f->mu);
    f->inflight = NULL;
    f->pending_bytes -= r->loc.len;
    f->stats.migrated_writes++;
    d->pending--;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    hfc_store_release(f->store, &r->loc);
    H5Sclose(r->fspace);
    hfc_runs_free(&r->runs);
    free(r);
    dset_maybe_close(d);
    return 1;
}

/* Wait ns, or less when the file is closed meanwhile (f->stop is set with f->cv broadcast): a close never
 * waits out the migration thread's pause before it can join it. */
static void nap(hfc_file_t *f, long ns)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    long t = until.tv_nsec + ns;
    until.tv_sec += t / 1000000000L;
    until.tv_nsec = t % 1000000000L;
    pthread_mutex_lock(&f->mu);
    while (!f->stop && pthread_cond_timedwait(&f->cv, &f->mu, &until) != ETIMEDOUT)
        ;
    pthread_mutex_unlock(&f->mu);
}

static void *migrator(void *arg)
{
    hfc_file_t *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->stop && (!f->head || f->error[0]))
            pthread_cond_wait(&f->cv, &f->mu);
        if (f->stop)
            break;
        pthread_mutex_unlock(&f->mu);
        /* HDF5's global lock: free while the application computes */
        gate_lock();
        bool got = false;
        long wait_ns = 100 * 1000; /* doubled up to 1 ms while the program stays inside HDF5 */
        /* The lock is tried only once no HDF5 call has begun for a whole wait (the program's attempt count
         * unchanged), or after waits of 1 ms: the write that queued this record is usually followed at once
         * by a few more calls (h5py closes the write's dataspaces), which would otherwise wait for the whole
         * migration. */
        unsigned seen = 0, now = 0;
        H5TSmutex_get_attempt_count(&seen);
        for (;;) {
            nap(f, wait_ns);
            if (H5TSmutex_get_attempt_count(&now) < 0 || now == seen || wait_ns >= 1000 * 1000) {
                if (H5TSmutex_acquire(1, &got) < 0)
                    got = false;
            }
            seen = now;
            if (got)
                break;
            pthread_mutex_lock(&f->mu);
            int stop = f->stop;
            pthread_mutex_unlock(&f->mu);
            if (stop)
                break;
            if (wait_ns < 1000 * 1000)
                wait_ns *= 2;
        }
        if (got && H5VLstart_lib_state() < 0) { /* an API context of this thread for the calls below */
            unsigned cnt = 0;
            H5TSmutex_release(&cnt);
            got = false;
            nap(f, 1000 * 1000);
        }
        if (got) {
            /* a bounded batch, then the lock goes back so that the application is never kept out long */
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (;;) {
                pthread_mutex_lock(&f->mu);
                int stop = f->stop;
                pthread_mutex_unlock(&f->mu);
                if (stop || migrate_one(f) <= 0)
                    break;
                clock_gettime(CLOCK_MONOTONIC, &t1);
                if ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) > 5000000L)
                    break;
            }
            H5VLfinish_lib_state();
            unsigned cnt = 0;
            H5TSmutex_release(&cnt);
        }
        gate_unlock();
        pthread_mutex_lock(&f->mu);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* Migrate records (all, or only those of d and everything queued before them) on the calling thread. */
/* A child forked while the file was open: the queued writes, the cache files and the migration thread
 * are its parent's. The child caches nothing and migrates nothing (it writes straight below, as HDF5 lets
 * it), and its exit leaves the parent's cache alone. */
static int forked(const hfc_file_t *f) { return getpid() != f->pid; }

static int drain(hfc_file_t *f, hfc_dset_t *d)
{
    if (forked(f))
        return 0;
    pthread_mutex_lock(&f->mu);
    f->stats.drains++;
    f->error[0] = '\0'; /* try again: the cause may have been fixed */
    pthread_mutex_unlock(&f->mu);
    for (;;) {
        if (d) {
            pthread_mutex_lock(&f->mu);
            uint64_t p = d->pending;
            pthread_mutex_unlock(&f->mu);
            if (!p)
                break;
        }
        int r = migrate_one(f);
        if (r < 0) {
            hfc_err("%s; the unwritten data stays in the cache (%s) and is written again at the next flush "
                    "or close", f->error, hfc_store_dir(f->store));
            return -1;
        }
        if (r == 0) {
            /* the queue is empty; a record the migration thread is writing (only possible while HDF5
             * shuts down without its lock) is waited for: after the drain everything is below */
            pthread_mutex_lock(&f->mu);
            int waited = 0;
            while (f->inflight) {
                pthread_cond_wait(&f->cv, &f->mu);
                waited = 1;
            }
            int more = f->head != NULL;
            pthread_mutex_unlock(&f->mu);
            if (waited && more)
                continue; /* it failed and went back into the queue */
            break;
        }
    }
    pthread_mutex_lock(&f->mu);
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    return 0;
}

int hfc_file_drain(hfc_file_t *f) { return drain(f, NULL); }

void hfc_file_retain(hfc_file_t *f)
{
    pthread_mutex_lock(&f->mu);
    f->refs++;
    pthread_mutex_unlock(&f->mu);
}
int hfc_dset_drain(hfc_dset_t *d) { return drain(d->f, d); }

static void unregister(hfc_file_t *f)
{
    pthread_mutex_lock(&reg_mu);
    for (hfc_file_t **pp = &reg_head; *pp; pp = &(*pp)->next)
        if (*pp == f) {
            *pp = f->next;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
}

/* The engine's memory freed in a forked child: nothing below is touched, no thread joined (the child has
 * none), the parent's cache files stay. */
static int forget(hfc_file_t *f)
{
    unregister(f);
    while (f->head) {
        hfc_rec_t *r = f->head;
        f->head = r->next;
        H5Sclose(r->fspace);
        hfc_runs_free(&r->runs);
        free(r);
    }
    while (f->dsets) {
        hfc_dset_t *d = f->dsets;
        f->dsets = d->next;
        free(d->tenc);
        free(d);
    }
    hfc_store_forget(f->store);
    free(f);
    return 0;
}

int hfc_file_close(hfc_file_t *f)
{
    if (forked(f)) /* the child has one thread: no lock (the parent's threads may have held it at fork) */
        return --f->refs == 0 ? forget(f) : 0;
    pthread_mutex_lock(&f->mu);
    int last = --f->refs == 0;
    pthread_mutex_unlock(&f->mu);
    if (!last)
        return 0;
    int rc = drain(f, NULL);
    char cause[1024] = "";
    if (rc != 0) {
        snprintf(cause, sizeof cause, "%s", f->error);
        hfc_err_clear();
    }
    pthread_mutex_lock(&f->mu);
    f->stop = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    if (f->thread_on)
        pthread_join(f->thread, NULL);
    unregister(f);
    /* what a failed drain left: the writes are lost now, and said so */
    uint64_t lost = 0;
    while (f->head) {
        hfc_rec_t *r = f->head;
        f->head = r->next;
        lost += r->loc.len;
        r->d->pending--;
        hfc_store_release(f->store, &r->loc);
        H5Sclose(r->fspace);
        hfc_runs_free(&r->runs);
        free(r);
    }
    while (f->dsets) {
        hfc_dset_t *d = f->dsets;
        if (d->owned)
            H5VLdataset_close(d->under, d->under_vol, H5P_DATASET_XFER_DEFAULT, NULL);
        dset_free(d);
    }
    if (hfc_store_close(f->store) != 0)
        rc = -1;
    if (lost)
        hfc_err("%s; %llu bytes of cached writes could not be written to the layer below and are lost", cause,
                (unsigned long long)lost);
    if (f->comm != MPI_COMM_NULL) {
        int fin = 0;
        if (MPI_Finalized(&fin) == MPI_SUCCESS && !fin)
            MPI_Comm_free(&f->comm);
    }
    pthread_cond_destroy(&f->cv);
    pthread_mutex_destroy(&f->mu);
    free(f);
    return rc;
}

int hfc_file_is_mpi(const hfc_file_t *f) { return f->comm != MPI_COMM_NULL; }

int hfc_file_agree(hfc_file_t *f, int rc)
{
    if (f->comm == MPI_COMM_NULL)
        return rc;
    int rank = 0, size = 1, first = 0;
    MPI_Comm_rank(f->comm, &rank);
    MPI_Comm_size(f->comm, &size);
    int mine = rc != 0 ? rank : size;
    if (MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, f->comm) != MPI_SUCCESS) {
        hfc_err("h5flow_cache: the ranks could not agree on the migration's outcome (MPI_Allreduce failed)");
        return -1;
    }
    if (first == size)
        return 0;
    if (rc == 0)
        hfc_err("h5flow_cache: cached writes could not be written below on rank %d (its error says why)", first);
    return -1;
}

/* ------------------------------------------------------------------ datasets */
hfc_dset_t *hfc_dset_attach(hfc_file_t *f, void *under_dset, hid_t under_vol, const void *token16,
                            int token_ok)
{
    pthread_mutex_lock(&f->mu);
    if (token_ok)
        for (hfc_dset_t *d = f->dsets; d; d = d->next)
            if (d->token_ok && !memcmp(d->token, token16, 16)) {
                d->refs++;
                pthread_mutex_unlock(&f->mu);
                return d;
            }
    pthread_mutex_unlock(&f->mu);
    hfc_dset_t *d = calloc(1, sizeof *d);
    if (!d) {
        hfc_err("h5flow_cache: out of memory");
        return NULL;
    }
    d->f = f;
    d->under = under_dset;
    d->under_vol = under_vol;
    H5Iinc_ref(under_vol);
    d->token_ok = token_ok;
    if (token_ok)
        memcpy(d->token, token16, 16);
    d->refs = 1;
    H5VL_dataset_get_args_t ga = {.op_type = H5VL_DATASET_GET_TYPE};
    if (H5VLdataset_get(under_dset, under_vol, &ga, H5P_DATASET_XFER_DEFAULT, NULL) >= 0) {
        hid_t t = ga.args.get_type.type_id;
        size_t nb = 0;
        if (H5Tencode(t, NULL, &nb) >= 0 && (d->tenc = malloc(nb ? nb : 1)) != NULL &&
            H5Tencode(t, d->tenc, &nb) < 0) {
            free(d->tenc);
            d->tenc = NULL;
        }
        if (!d->tenc)
            H5Eclear2(H5E_DEFAULT); /* the dataset is then simply never cached */
        d->tsize = H5Tget_size(t);
        d->plain = d->tenc && plain_class(t) && d->tsize > 0;
        H5Tclose(t);
    }
    else
        H5Eclear2(H5E_DEFAULT); /* the dataset is then simply never cached */
    H5VL_dataset_get_args_t pa = {.op_type = H5VL_DATASET_GET_DCPL};
    if (H5VLdataset_get(under_dset, under_vol, &pa, H5P_DATASET_XFER_DEFAULT, NULL) >= 0) {
        hid_t dcpl = pa.args.get_dcpl.dcpl_id;
        d->must_collective = f->mpio && H5Pget_nfilters(dcpl) > 0;
        d->unallocated = H5Pget_layout(dcpl) == H5D_CONTIGUOUS && H5Pget_external_count(dcpl) == 0;
        H5Pclose(dcpl);
    }
    else {
        H5Eclear2(H5E_DEFAULT);
        d->must_collective = f->mpio;
        d->unallocated = 1; /* asked below at each write until its storage is there */
    }
    pthread_mutex_lock(&f->mu);
    d->next = f->dsets;
    f->dsets = d;
    pthread_mutex_unlock(&f->mu);
    return d;
}

int hfc_dset_detach(hfc_dset_t *d, void *under_dset)
{
    hfc_file_t *f = d->f;
    pthread_mutex_lock(&f->mu);
    d->refs--;
    int engines = under_dset == d->under;
    int keep = 0;
    if (engines) {
        d->owned = 1; /* the engine's handle is the one closing: the engine closes it below later */
        keep = 1;
    }
    int done = d->refs == 0 && d->pending == 0;
    pthread_mutex_unlock(&f->mu);
    if (done) {
        if (engines) { /* nothing pending: the caller closes it below now */
            dset_free(d);
            return 1;
        }
        dset_maybe_close(d);
    }
    return keep ? 0 : 1;
}

/* The selection of `old` in a new dataspace of extent dims (each at least the old one): same elements. */
static hid_t reextent(hid_t old, int rank, const hsize_t *dims)
{
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    if (sp < 0)
        return sp;
    H5S_sel_type st = H5Sget_select_type(old);
    herr_t rc = H5Sselect_none(sp);
    if (st == H5S_SEL_ALL) {
        hsize_t start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
        if (H5Sget_simple_extent_dims(old, count, NULL) < 0)
            rc = -1;
        else
            rc = H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL);
    }
    else if (st == H5S_SEL_POINTS) {
        hssize_t n = H5Sget_select_elem_npoints(old);
        hsize_t *c = n > 0 ? malloc((size_t)n * (size_t)rank * sizeof *c) : NULL;
        if (!c || H5Sget_select_elem_pointlist(old, 0, (hsize_t)n, c) < 0 ||
            H5Sselect_elements(sp, H5S_SELECT_SET, (size_t)n, c) < 0)
            rc = -1;
        free(c);
    }
    else if (st == H5S_SEL_HYPERSLABS) {
        hssize_t nb = H5Sget_select_hyper_nblocks(old);
        hsize_t *b = nb > 0 ? malloc((size_t)nb * 2 * (size_t)rank * sizeof *b) : NULL;
        if (!b || H5Sget_select_hyper_blocklist(old, 0, (hsize_t)nb, b) < 0)
            rc = -1;
        for (hssize_t i = 0; rc >= 0 && i < nb; i++) {
            const hsize_t *lo = b + (size_t)i * 2 * (size_t)rank, *hi = lo + rank;
            hsize_t count[H5S_MAX_RANK];
            for (int k = 0; k < rank; k++)
                count[k] = hi[k] - lo[k] + 1;
            rc = H5Sselect_hyperslab(sp, i ? H5S_SELECT_OR : H5S_SELECT_SET, lo, NULL, count, NULL);
        }
        free(b);
    }
    else
        rc = -1;
    if (rc < 0 || H5Sget_select_npoints(sp) != H5Sget_select_npoints(old)) {
        H5Sclose(sp);
        return H5I_INVALID_HID;
    }
    return sp;
}

int hfc_dset_set_extent(hfc_dset_t *d, const hsize_t *new_dims, int (*set_extent)(void *arg), void *arg)
{
    hfc_file_t *f = d->f;
    H5VL_dataset_get_args_t ga = {.op_type = H5VL_DATASET_GET_SPACE};
    int grows = 0, rank = 0;
    if (H5VLdataset_get(d->under, d->under_vol, &ga, H5P_DATASET_XFER_DEFAULT, NULL) >= 0) {
        hsize_t cur[H5S_MAX_RANK];
        rank = H5Sget_simple_extent_dims(ga.args.get_space.space_id, cur, NULL);
        grows = rank > 0;
        for (int k = 0; k < rank; k++)
            grows &= new_dims[k] >= cur[k];
        H5Sclose(ga.args.get_space.space_id);
    }
    else
        H5Eclear2(H5E_DEFAULT);
    if (!grows) { /* shrinking (or unknown): the writes go below first, in order */
        int dr = drain(f, d);
        if (f->comm != MPI_COMM_NULL) /* set_extent is collective: fail on every rank or on none */
            dr = hfc_file_agree(f, dr);
        if (dr != 0)
            return -1;
    }
    int rc = set_extent(arg);
    if (rc < 0 || !grows)
        return rc;
    /* the cached writes keep their elements in the larger extent */
    int lost = 0;
    pthread_mutex_lock(&f->mu);
    for (hfc_rec_t *r = f->head; r; r = r->next) {
        if (r->d != d)
            continue;
        hid_t sp = reextent(r->fspace, rank, new_dims);
        if (sp < 0) {
            lost = 1;
            break;
        }
        H5Sclose(r->fspace);
        r->fspace = sp;
        hfc_runs_free(&r->runs);
        r->runs_ok = 0;
    }
    pthread_mutex_unlock(&f->mu);
    if (lost) {
        H5Eclear2(H5E_DEFAULT);
        return drain(f, d); /* could not carry a selection over: migrate now (the layer below judges it) */
    }
    return rc;
}

/* resolve H5S_ALL / H5S_BLOCK: the file space (a copy with its selection) and the memory space */
static int resolve_spaces(hfc_dset_t *d, hid_t mem_space, hid_t file_space, hid_t *fs, hid_t *ms)
{
    *fs = *ms = H5I_INVALID_HID;
    if (file_space == H5S_ALL) {
        H5VL_dataset_get_args_t ga = {.op_type = H5VL_DATASET_GET_SPACE};
        if (H5VLdataset_get(d->under, d->under_vol, &ga, H5P_DATASET_XFER_DEFAULT, NULL) < 0) {
            hfc_err("h5flow_cache: cannot get a dataset's dataspace from the layer below");
            return -1;
        }
        *fs = ga.args.get_space.space_id;
        H5Sselect_all(*fs);
    }
    else
        *fs = H5Scopy(file_space);
    if (*fs < 0)
        return -1;
    if (mem_space == H5S_ALL)
        *ms = H5Scopy(*fs);
    else if (mem_space == H5S_BLOCK) {
        hsize_t n = (hsize_t)H5Sget_select_npoints(*fs);
        *ms = H5Screate_simple(1, &n, NULL);
    }
    else
        *ms = H5Scopy(mem_space);
    if (*ms < 0) {
        H5Sclose(*fs);
        *fs = H5I_INVALID_HID;
        return -1;
    }
    return 0;
}

/* Whether a selection was moved with H5Soffset_simple. HDF5's selection queries (block and point lists)
 * give the unmoved coordinates, so such a write is not cached and such a read is not overlaid: the
 * dataset's cached writes go below first and the layer below does the I/O. (H5S_ALL and H5S_BLOCK carry
 * no offset.) */
static int moved(hid_t space)
{
    if (space == H5S_ALL || space == H5S_BLOCK || space == H5S_PLIST)
        return 0;
    H5S_sel_type st = H5Sget_select_type(space);
    if (st != H5S_SEL_HYPERSLABS && st != H5S_SEL_POINTS)
        return 0;
    int rank = H5Sget_simple_extent_ndims(space);
    if (rank <= 0)
        return 0;
    hsize_t a0[H5S_MAX_RANK], a1[H5S_MAX_RANK], b0[H5S_MAX_RANK], b1[H5S_MAX_RANK];
    hssize_t zero[H5S_MAX_RANK] = {0};
    hid_t c = H5Scopy(space);
    int differs = 1; /* when in doubt, treat it as moved: the safe side */
    if (c >= 0 && H5Soffset_simple(c, zero) >= 0 && H5Sget_select_bounds(space, a0, a1) >= 0 &&
        H5Sget_select_bounds(c, b0, b1) >= 0)
        differs = memcmp(a0, b0, (size_t)rank * sizeof *a0) != 0;
    if (c >= 0)
        H5Sclose(c);
    if (differs)
        H5Eclear2(H5E_DEFAULT);
    return differs;
}

static int has_transform(hid_t dxpl)
{
    if (dxpl == H5P_DEFAULT || dxpl == H5P_DATASET_XFER_DEFAULT)
        return 0;
    ssize_t n = H5Pget_data_transform(dxpl, NULL, 0);
    if (n < 0)
        H5Eclear2(H5E_DEFAULT);
    return n > 0;
}

static int forward_write(hfc_dset_t *d, hid_t mt, hid_t ms, hid_t fs, hid_t dxpl, const void *buf, void **req);

/* Whether d's storage exists below. A contiguous dataset's storage is allocated by its first write, and that
 * allocation must happen in the program's order: made at the migration, after a delete or a shrink freed file
 * space, it could reuse that space, and the elements no write covers would read as the freed data (native
 * HDF5 writes no fill value into late-allocated contiguous storage by default). */
static int storage_ready(hfc_dset_t *d)
{
    if (!d->unallocated)
        return 1;
    H5D_space_status_t status = H5D_SPACE_STATUS_ERROR;
    H5VL_dataset_get_args_t ga = {.op_type = H5VL_DATASET_GET_SPACE_STATUS};
    ga.args.get_space_status.status = &status;
    if (H5VLdataset_get(d->under, d->under_vol, &ga, H5P_DATASET_XFER_DEFAULT, NULL) < 0) {
        H5Eclear2(H5E_DEFAULT);
        return 0;
    }
    if (status == H5D_SPACE_STATUS_ALLOCATED)
        d->unallocated = 0; /* contiguous storage, once allocated, stays */
    return !d->unallocated;
}

/* Allocate d's storage below now (storage_ready): the first element of the write being cached (file
 * selection fs, its values `src` in the file's type ft, in selection order) is written below at once. The
 * cached record writes it again, with the same value, when it migrates. */
static int allocate_below(hfc_dset_t *d, hid_t fs, hid_t ft, const void *src, hid_t dxpl)
{
    hsize_t off = 0;
    size_t len = 0, nseq = 0, nelem = 0;
    hid_t it = H5Ssel_iter_create(fs, 1, 0);
    int rc = -1;
    if (it < 0 || H5Ssel_iter_get_seq_list(it, 1, 1, &nseq, &nelem, &off, &len) < 0 || nseq != 1) {
        hfc_err("h5flow_cache: cannot find the first element of a write");
        goto out;
    }
    int rank = H5Sget_simple_extent_ndims(fs);
    hsize_t dims[H5S_MAX_RANK], coord[H5S_MAX_RANK], one = 1;
    H5Sget_simple_extent_dims(fs, dims, NULL);
    for (int k = rank - 1; k >= 0; k--) { /* the linear index of the first element, as coordinates */
        coord[k] = dims[k] ? off % dims[k] : 0;
        off = dims[k] ? off / dims[k] : 0;
    }
    hid_t pfs = H5Scopy(fs), pms = H5Screate_simple(1, &one, NULL);
    if (pfs >= 0 && pms >= 0 && (rank == 0 ? H5Sselect_all(pfs) : H5Sselect_elements(pfs, H5S_SELECT_SET, 1, coord)) >= 0)
        rc = forward_write(d, ft, pms, pfs, dxpl, src, NULL);
    if (pfs >= 0)
        H5Sclose(pfs);
    if (pms >= 0)
        H5Sclose(pms);
    if (rc == 0)
        storage_ready(d);
out:
    if (it >= 0)
        H5Ssel_iter_close(it);
    return rc;
}

static int forward_write(hfc_dset_t *d, hid_t mt, hid_t ms, hid_t fs, hid_t dxpl, const void *buf, void **req)
{
    void *objs[1] = {d->under};
    hid_t mts[1] = {mt}, mss[1] = {ms}, fss[1] = {fs};
    const void *bufs[1] = {buf};
    if (H5VLdataset_write(1, objs, d->under_vol, mts, mss, fss, dxpl, bufs, req) < 0) {
        char msg[700];
        hfc_h5_error_text(msg, sizeof msg);
        hfc_err("h5flow_cache: the write below failed: %s", msg);
        return -1;
    }
    return 0;
}

int hfc_dset_write(hfc_dset_t *d, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t dxpl,
                   const void *buf, void **req)
{
    hfc_file_t *f = d->f;
    if (dxpl == H5P_DEFAULT)
        dxpl = H5P_DATASET_XFER_DEFAULT;
    if (d->must_collective) /* every rank makes this call below (none is ever cached): no local refusal */
        return forward_write(d, mem_type, mem_space, file_space, dxpl, buf, req);
    pthread_mutex_lock(&f->mu);
    int failed = f->error[0] != 0;
    pthread_mutex_unlock(&f->mu);
    if (failed && drain(f, NULL) != 0) /* a migration failed: say so now, not only at close */
        return -1;
    int cacheable = !forked(f) && d->plain && plain_class(mem_type) && mem_space != H5S_PLIST &&
                    file_space != H5S_PLIST && !has_transform(dxpl) && !moved(mem_space) && !moved(file_space);
    if (!cacheable) {
        if (drain(f, d) != 0)
            return -1;
        pthread_mutex_lock(&f->mu);
        f->stats.written_through++;
        pthread_mutex_unlock(&f->mu);
        return forward_write(d, mem_type, mem_space, file_space, dxpl, buf, req);
    }
    hid_t fs, ms;
    if (resolve_spaces(d, mem_space, file_space, &fs, &ms) != 0)
        return -1;
    hssize_t np = H5Sget_select_npoints(fs);
    size_t msize = H5Tget_size(mem_type);
    if (np < 0 || msize == 0 || H5Sget_select_npoints(ms) != np) {
        H5Sclose(fs);
        H5Sclose(ms);
        /* let the layer below say what is wrong with this call */
        if (drain(f, d) != 0)
            return -1;
        return forward_write(d, mem_type, mem_space, file_space, dxpl, buf, req);
    }
    if (np == 0) {
        H5Sclose(fs);
        H5Sclose(ms);
        return 0;
    }
    size_t esz = msize > d->tsize ? msize : d->tsize;
    uint64_t len = (uint64_t)np * d->tsize;
    char *tmp = NULL;
    const char *src = NULL; /* the bytes to cache: the caller's buffer itself, or tmp */
    int rc = -1;
    hid_t ft = dset_type(d);
    if (ft < 0)
        goto out;
    if (H5Sget_select_type(ms) == H5S_SEL_ALL && H5Tequal(mem_type, ft) > 0)
        src = buf; /* already contiguous, in the file's type (h5py's usual write): no copy before the cache */
    else {
        if (!(tmp = malloc((size_t)np * esz))) {
            hfc_err("h5flow_cache: out of memory copying a write of %lld elements", (long long)np);
            goto out;
        }
        if (H5Dgather(ms, buf, mem_type, (size_t)np * msize, tmp, NULL, NULL) < 0) {
            hfc_err("h5flow_cache: cannot gather the write's memory selection");
            goto out;
        }
        if (H5Tequal(mem_type, ft) <= 0 && H5Tconvert(mem_type, ft, (size_t)np, tmp, NULL, dxpl) < 0) {
            hfc_err("h5flow_cache: cannot convert the written values to the dataset's type");
            goto out;
        }
        src = tmp;
    }
    if (!storage_ready(d) && allocate_below(d, fs, ft, src, dxpl) != 0)
        goto out;
    int through = len > f->capacity;
    while (!through) {
        pthread_mutex_lock(&f->mu);
        int fits = f->pending_bytes + len <= f->capacity;
        pthread_mutex_unlock(&f->mu);
        if (fits)
            break;
        if (f->cfg.policy == HFC_POLICY_WRITE_THROUGH) {
            through = 1;
            break;
        }
        /* block: the oldest writes migrate on this thread until this one fits */
        int m = migrate_one(f);
        if (m < 0) {
            hfc_err("%s", f->error);
            goto out;
        }
        if (m == 0)
            break;
    }
    hfc_loc_t loc;
    if (!through && (ensure_started(f) != 0 || hfc_store_put(f->store, src, len, &loc) != 0)) {
        /* the tier is full or failing: this write goes straight below, nothing is lost */
        hfc_err_clear();
        through = 1;
    }
    if (through) {
        if (drain(f, d) != 0)
            goto out;
        hsize_t n = (hsize_t)np;
        hid_t ls = H5Screate_simple(1, &n, NULL);
        rc = forward_write(d, ft, ls, fs, dxpl, src, NULL);
        H5Sclose(ls);
        pthread_mutex_lock(&f->mu);
        f->stats.written_through++;
        pthread_mutex_unlock(&f->mu);
        goto out;
    }
    hfc_rec_t *r = calloc(1, sizeof *r);
    if (!r) {
        hfc_store_release(f->store, &loc);
        hfc_err("h5flow_cache: out of memory");
        goto out;
    }
    r->d = d;
    r->fspace = fs;
    fs = H5I_INVALID_HID;
    r->npoints = (uint64_t)np;
    r->loc = loc;
    pthread_mutex_lock(&f->mu);
    if (f->tail)
        f->tail->next = r;
    else
        f->head = r;
    f->tail = r;
    f->pending_bytes += len;
    d->pending++;
    f->stats.cached_writes++;
    f->stats.cached_bytes += len;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
    rc = 0;
out:
    free(tmp);
    if (ft >= 0)
        H5Tclose(ft);
    if (fs >= 0)
        H5Sclose(fs);
    H5Sclose(ms);
    return rc;
}

/* ------------------------------------------------------------------ reads */
typedef struct {
    const char *src;
    char *dst;
    size_t esz;
} copy_t;

static void copy_piece(uint64_t a_pos, uint64_t b_pos, uint64_t len, void *arg)
{
    copy_t *c = arg;
    memcpy(c->dst + b_pos * c->esz, c->src + a_pos * c->esz, (size_t)(len * c->esz));
}

static herr_t scatter_src(const void **src_buf, size_t *src_buf_bytes_used, void *op_data)
{
    copy_t *c = op_data;
    *src_buf = c->dst;
    *src_buf_bytes_used = c->esz;
    return 0;
}

int hfc_dset_read(hfc_dset_t *d, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t dxpl, void *buf,
                  void **req)
{
    hfc_file_t *f = d->f;
    if (dxpl == H5P_DEFAULT)
        dxpl = H5P_DATASET_XFER_DEFAULT;
    pthread_mutex_lock(&f->mu);
    uint64_t pending = d->pending;
    pthread_mutex_unlock(&f->mu);
    int overlay = pending > 0 && !forked(f);
    if (overlay && (mem_space == H5S_PLIST || file_space == H5S_PLIST || has_transform(dxpl) ||
                    !plain_class(mem_type) || moved(mem_space) || moved(file_space))) {
        if (drain(f, d) != 0)
            return -1;
        overlay = 0;
    }
    void *objs[1] = {d->under};
    hid_t mts[1] = {mem_type}, mss[1] = {mem_space}, fss[1] = {file_space};
    void *bufs[1] = {buf};
    if (H5VLdataset_read(1, objs, d->under_vol, mts, mss, fss, dxpl, bufs, overlay ? NULL : req) < 0) {
        char msg[700];
        hfc_h5_error_text(msg, sizeof msg);
        hfc_err("h5flow_cache: the read below failed: %s", msg);
        return -1;
    }
    if (!overlay)
        return 0;
    /* the cached writes of this dataset, oldest first, laid over what the layer below returned */
    hid_t fs, ms;
    if (resolve_spaces(d, mem_space, file_space, &fs, &ms) != 0)
        return -1;
    int rc = -1;
    hfc_runs_t rr = {0};
    char *g = NULL, *rec = NULL;
    hfc_rec_t **recs = NULL;
    hid_t ft = H5I_INVALID_HID;
    size_t msize = H5Tget_size(mem_type);
    hssize_t np = H5Sget_select_npoints(fs);
    if (np <= 0) {
        rc = np == 0 ? 0 : -1;
        goto out;
    }
    if (hfc_runs_of(fs, &rr) != 0)
        goto out;
    g = malloc((size_t)np * msize);
    if (!g || H5Dgather(ms, buf, mem_type, (size_t)np * msize, g, NULL, NULL) < 0) {
        hfc_err("h5flow_cache: cannot gather a read's memory selection");
        goto out;
    }
    /* the records of this dataset, oldest first (none can go meanwhile: migration needs HDF5's lock, which
     * this thread holds) */
    pthread_mutex_lock(&f->mu);
    size_t nrecs = 0;
    for (hfc_rec_t *r = f->head; r; r = r->next)
        nrecs += r->d == d;
    recs = malloc((nrecs ? nrecs : 1) * sizeof *recs);
    nrecs = 0;
    for (hfc_rec_t *r = f->head; recs && r; r = r->next)
        if (r->d == d)
            recs[nrecs++] = r;
    pthread_mutex_unlock(&f->mu);
    if (!recs) {
        hfc_err("h5flow_cache: out of memory");
        goto out;
    }
    int changed = 0;
    for (size_t k = 0; k < nrecs; k++) {
        hfc_rec_t *r = recs[k];
        if (!r->runs_ok) {
            if (hfc_runs_of(r->fspace, &r->runs) != 0)
                goto out;
            r->runs_ok = 1;
        }
        /* quick test: any overlap at all? */
        int any = 0;
        size_t i = 0, j = 0;
        while (i < r->runs.n && j < rr.n && !any) {
            const hfc_run_t *x = &r->runs.runs[i], *y = &rr.runs[j];
            if (x->off < y->off + y->len && y->off < x->off + x->len)
                any = 1;
            else if (x->off + x->len <= y->off + y->len)
                i++;
            else
                j++;
        }
        if (!any)
            continue;
        size_t esz = msize > d->tsize ? msize : d->tsize;
        char *nrec = realloc(rec, (size_t)r->npoints * esz);
        if (!nrec) {
            hfc_err("h5flow_cache: out of memory reading cached data");
            goto out;
        }
        rec = nrec;
        if (hfc_store_get(f->store, &r->loc, rec) != 0)
            goto out;
        if (ft < 0 && (ft = dset_type(d)) < 0)
            goto out;
        if (H5Tequal(ft, mem_type) <= 0 && H5Tconvert(ft, mem_type, (size_t)r->npoints, rec, NULL, dxpl) < 0) {
            hfc_err("h5flow_cache: cannot convert cached values to the read's type");
            goto out;
        }
        copy_t c = {rec, g, msize};
        hfc_runs_overlap(&r->runs, &rr, copy_piece, &c);
        changed = 1;
    }
    if (changed) {
        copy_t c = {NULL, g, (size_t)np * msize};
        if (H5Dscatter(scatter_src, &c, mem_type, ms, buf) < 0) {
            hfc_err("h5flow_cache: cannot scatter cached data into the read's memory selection");
            goto out;
        }
    }
    rc = 0;
out:
    if (ft >= 0)
        H5Tclose(ft);
    free(recs);
    free(g);
    free(rec);
    hfc_runs_free(&rr);
    H5Sclose(fs);
    H5Sclose(ms);
    return rc;
}
