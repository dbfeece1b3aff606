/* h5flow_cache: writes staged in a node-local tier, migrated to the connector below in the background.
 *
 * Layers (docs/CACHE.md):
 *   tier.c    the node-local directory: which one, the per-file cache directory, its segment files, sweeping
 *             directories left by dead processes;
 *   sel.c     selections as sorted runs of linear element indices, and the overlay of cached writes on a read;
 *   engine.c  per-file state: the queue of cached writes, capacity and policy, the migration thread, draining,
 *             the sticky migration error;
 *   connector.c  the VOL class (built on the shared pass-through core). */
#ifndef H5FLOW_CACHE_HFC_H
#define H5FLOW_CACHE_HFC_H

#include <hdf5.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HFC_NAME "h5flow_cache"
#define HFC_VALUE 313 /* in the 256-511 range HDF5 reserves for testing new connectors */

/* ------------------------------------------------------------------ errors */
/* The calling thread's pending message (the first one wins); the connector pushes it on HDF5's error stack
 * in the pass-through core's error class. */
void hfc_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void hfc_err_clear(void);
const char *hfc_err_msg(void);
/* The innermost message on the calling thread's HDF5 error stack, into buf (for errors of the layer below). */
void hfc_h5_error_text(char *buf, size_t n);

/* ------------------------------------------------------------------ configuration */
typedef enum { HFC_POLICY_BLOCK = 0, HFC_POLICY_WRITE_THROUGH = 1 } hfc_policy_t;

typedef struct {
    char path[PATH_MAX];     /* tier directory given (info "path=" or H5FLOW_CACHE_DIR); "" = choose one */
    uint64_t capacity;       /* bytes of cached, not yet migrated writes per open file; 0 = default */
    hfc_policy_t policy;     /* what a write does when the cache is full */
    int background;          /* 1 (default): migrate on a background thread; 0: only at flush/close/full */
    unsigned given;          /* HFC_GIVEN_* bits: the keys set explicitly */
} hfc_cfg_t;
enum { HFC_GIVEN_PATH = 1, HFC_GIVEN_CAPACITY = 2, HFC_GIVEN_POLICY = 4, HFC_GIVEN_BACKGROUND = 8 };
/* The settings a file opens with: defaults, then the environment, then the keys given in `info`.
 * Returns 0, or -1 with a message (a bad environment variable). */
int hfc_cfg_effective(const hfc_cfg_t *info, hfc_cfg_t *out);

void hfc_cfg_defaults(hfc_cfg_t *cfg);
/* Apply the environment (H5FLOW_CACHE_DIR, _CAPACITY, _POLICY, _BACKGROUND); the info string's keys are
 * applied after it and win. */
int hfc_cfg_from_env(hfc_cfg_t *cfg);
/* One "key=value" of the info string. Returns 0, or -1 with a message (hfc_err). */
int hfc_cfg_set(hfc_cfg_t *cfg, const char *key, const char *value);
/* The info keys as text ("path=...;capacity=...;policy=...;background=..."), for to_str. */
int hfc_cfg_to_str(const hfc_cfg_t *cfg, char *buf, size_t n);
int hfc_parse_size(const char *s, uint64_t *out);

/* ------------------------------------------------------------------ tier */
typedef struct {
    char dir[PATH_MAX]; /* the tier root actually used */
    const char *source; /* "info string", "H5FLOW_CACHE_DIR" or "automatic" */
    uint64_t free_bytes;
} hfc_tier_t;

/* Resolve the tier root: the given directory (must exist and be writable), or the first usable of /dev/shm,
 * $TMPDIR, /var/tmp, /tmp (said once per process on stderr). */
int hfc_tier_choose(const char *given, const char *source, hfc_tier_t *out);
/* Remove cache directories of this host whose process is gone (left by a kill). */
void hfc_tier_sweep(const char *root);

typedef struct hfc_seg hfc_seg_t;
typedef struct {
    hfc_seg_t *seg;
    uint64_t off;
    uint64_t len;
} hfc_loc_t;

typedef struct hfc_store hfc_store_t;
/* A cache directory of its own under root: <root>/h5flow-cache.<host>.<pid>.<n>, segment files inside. */
hfc_store_t *hfc_store_open(const char *root, uint64_t segment_size);
const char *hfc_store_dir(const hfc_store_t *st);
int hfc_store_put(hfc_store_t *st, const void *buf, uint64_t len, hfc_loc_t *loc);
int hfc_store_get(hfc_store_t *st, const hfc_loc_t *loc, void *buf);
/* The bytes at loc, mapped read-only without a copy (NULL when they cannot be: read them with hfc_store_get).
 * The mapping stays valid until hfc_store_unmap, as long as loc is not released. */
typedef struct {
    void *base;
    size_t len;
} hfc_view_t;
const void *hfc_store_map(hfc_store_t *st, const hfc_loc_t *loc, hfc_view_t *view);
void hfc_store_unmap(hfc_view_t *view);
/* The bytes at loc are no longer needed; a segment with nothing left in it is deleted. */
void hfc_store_release(hfc_store_t *st, const hfc_loc_t *loc);
uint64_t hfc_store_nsegments(hfc_store_t *st); /* segment files existing now */
/* Delete every segment and the directory. */
int hfc_store_close(hfc_store_t *st);
/* Free the store's memory and descriptors, leaving its files alone (a forked child: they are its parent's). */
void hfc_store_forget(hfc_store_t *st);

/* ------------------------------------------------------------------ selections */
typedef struct {
    uint64_t off; /* linear index of the first element in the dataspace */
    uint64_t len; /* elements */
    uint64_t pos; /* index of the first element in the selection's iteration order */
} hfc_run_t;

typedef struct {
    hfc_run_t *runs; /* sorted by off, disjoint */
    size_t n;
    uint64_t npoints;
} hfc_runs_t;

/* The selection of space as runs (hyperslab/all: iteration order = increasing linear index; points: list
 * order). Returns 0, or -1 with a message. */
int hfc_runs_of(hid_t space, hfc_runs_t *out);
void hfc_runs_free(hfc_runs_t *r);
/* Calls fn(src_pos, dst_pos, len, arg) for every piece where a (source) and b (destination) overlap. */
typedef void (*hfc_overlap_fn)(uint64_t a_pos, uint64_t b_pos, uint64_t len, void *arg);
void hfc_runs_overlap(const hfc_runs_t *a, const hfc_runs_t *b, hfc_overlap_fn fn, void *arg);

/* ------------------------------------------------------------------ engine */
typedef struct hfc_file hfc_file_t;
typedef struct hfc_dset hfc_dset_t;

/* Open (or join, for a second handle of the same file below) the engine state of a file. fapl_id is the
 * file's access list (MPI-IO or not); key identifies the file below (its fileno); key_ok == 0 means it
 * could not be had, and the state is private to this handle. */
hfc_file_t *hfc_file_open(const hfc_cfg_t *cfg, hid_t fapl_id, unsigned long key, int key_ok);
/* The engine of the file numbered key (joined when one is open, else opened with the settings of the engine
 * `handle`): for a dataset that lies in another file than its handle's (an external link, a mounted file), so
 * that every handle of that file sees the same cached writes. */
hfc_file_t *hfc_file_open_for(const hfc_file_t *handle, unsigned long key);
/* The number of the file below the engine is keyed by: 1 with it in *key, 0 when it is not known. */
int hfc_file_key(const hfc_file_t *f, unsigned long *key);
/* Wait for every cached write of the file to reach the layer below (on the calling thread). Returns -1 with
 * the migration error if one happened (sticky: flush and close report it again). */
int hfc_file_drain(hfc_file_t *f);
/* Last handle: drain, close datasets whose close was deferred, stop the thread, delete the cache directory.
 * The caller then closes the file below. Returns -1 if any write was lost (message set). */
int hfc_file_close(hfc_file_t *f);
/* MPI files: every rank learns whether a drain failed on any rank (collective on the file's communicator;
 * call it where the operation below is collective: flush, close). Returns 0 when none failed; else -1 with
 * the local error or one naming the first failing rank. Other files: returns rc. */
int hfc_file_agree(hfc_file_t *f, int rc);
/* Whether the file is open with MPI-IO (its flush and close are collective). */
int hfc_file_is_mpi(const hfc_file_t *f);
/* One more reference (a handle of an object in the file). */
void hfc_file_retain(hfc_file_t *f);
const char *hfc_file_cache_dir(const hfc_file_t *f);

/* The engine side of an open dataset (shared by every handle of the same dataset). */
hfc_dset_t *hfc_dset_attach(hfc_file_t *f, void *under_dset, hid_t under_vol, const void *token16,
                            int token_ok);
/* A handle whose dataset below is under_dset closes: returns 1 if the caller must close under_dset now, 0
 * if the engine keeps it open until its cached writes are migrated (it then closes it itself). */
int hfc_dset_detach(hfc_dset_t *d, void *under_dset);
/* Drain the dataset's cached writes (an operation that depends on them follows). */
int hfc_dset_drain(hfc_dset_t *d);
/* H5Dset_extent to new_dims. Growing in every dimension: the cached writes stay cached (their selections
 * are carried over to the new extent) and set_extent(arg) is called; otherwise they are migrated first.
 * Returns what set_extent returned, or -1 with a message. */
int hfc_dset_set_extent(hfc_dset_t *d, const hsize_t *new_dims, int (*set_extent)(void *arg), void *arg);
/* A write: cached, or written through; returns 0 or -1 (message set). */
int hfc_dset_write(hfc_dset_t *d, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t dxpl,
                   const void *buf, void **req);
/* A read: from the layer below, with cached writes overlaid. */
int hfc_dset_read(hfc_dset_t *d, hid_t mem_type, hid_t mem_space, hid_t file_space, hid_t dxpl, void *buf,
                  void **req);

/* Statistics of a file's engine, for tests and docs. */
typedef struct {
    uint64_t cached_writes, cached_bytes, written_through, migrated_writes, drains, pending_bytes;
} hfc_stats_t;
void hfc_file_stats(hfc_file_t *f, hfc_stats_t *out);

#endif
