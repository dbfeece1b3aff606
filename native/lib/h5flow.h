/* h5flow.h: publish a simulation's steps from C into an h5flow stream (the hdf5 transport).
 *
 * The library speaks the hdf5 transport's on-disk protocol (docs/STREAM.md, format version 1): the
 * producer claim, heartbeats, queue_limit / quota / queue_policy, atomic publication of each step,
 * garbage collection, the end-of-stream and error lines. Python consumers read a C producer unchanged
 * (h5flow.open(name, "r"), `h5flow consume`). Layouts n-n (one file per rank, the default) and n-1 (one shared
 * parallel HDF5 file per step, MPI-IO; implied by collective="true" / method="sc" when layout is left out);
 * driver mpio.
 *
 *     h5flow_writer *w;
 *     if (h5flow_writer_open(MPI_COMM_WORLD, "/dev/shm/heat", &w) != H5FLOW_OK) {
 *         fprintf(stderr, "%s\n", h5flow_errmsg(w)); h5flow_writer_close(w); MPI_Abort(...);
 *     }
 *     for (step...) {
 *         h5flow_begin_step(w, step, time);
 *         h5flow_write(w, "temperature", H5FLOW_FLOAT64, 2, global_dims, offset, count, local);
 *         h5flow_end_step(w, &published);
 *     }
 *     h5flow_writer_close(w);
 *
 * Every call except h5flow_write and h5flow_errmsg is collective over the writer's communicator, and
 * returns the same code on every rank. Errors: a non-zero h5flow_status; h5flow_errmsg(w) says what was
 * wrong and what to do. Each writer keeps its own message: two writers share no mutable state.
 */
#ifndef H5FLOW_H
#define H5FLOW_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define H5FLOW_VERSION_MAJOR 0
#define H5FLOW_VERSION_MINOR 1

typedef enum h5flow_status {
    H5FLOW_OK = 0,
    H5FLOW_ERR_ARGUMENT = 1, /* a bad argument or a call out of order (begin_step twice, ...) */
    H5FLOW_ERR_CONFIG = 2,   /* the stream name or XML file is unusable, or asks for what is not offered */
    H5FLOW_ERR_CLAIMED = 3,  /* another producer holds the stream */
    H5FLOW_ERR_IO = 4,       /* a file-system, HDF5 or MPI error; the stream is stopped (consumers see ERROR) */
    H5FLOW_ERR_QUOTA = 5,    /* a step larger than the staging quota */
    H5FLOW_ERR_NOMEM = 6,
    H5FLOW_ERR_STOPPED = 7,  /* the writer stopped on an earlier error: only h5flow_writer_close is left */
    H5FLOW_ERR_CONSUMER = 8  /* a consumer group stopped beating (dead_consumer="error"), or steps were dropped for
                                one (dead_consumer="drop", at close) */
} h5flow_status;

/* Element types of h5flow_write (the numpy dtypes '<f4', '<f8', '<i4', '<i8', '<u4', '<u8', '|i1', '|u1'). */
typedef enum h5flow_type {
    H5FLOW_FLOAT32 = 0,
    H5FLOW_FLOAT64 = 1,
    H5FLOW_INT32 = 2,
    H5FLOW_INT64 = 3,
    H5FLOW_UINT32 = 4,
    H5FLOW_UINT64 = 5,
    H5FLOW_INT8 = 6,
    H5FLOW_UINT8 = 7
} h5flow_type;

typedef struct h5flow_writer h5flow_writer;

#if defined(__GNUC__)
#define H5FLOW_API __attribute__((visibility("default")))
#else
#define H5FLOW_API
#endif

/* Open the stream for writing (collective over comm; comm is duplicated: close the writer before
 * MPI_Finalize). MPI must be initialised; no thread level is required (the library's heartbeat thread
 * makes no MPI calls).
 * xml_or_dir: a SENSEI-style XML file (its one enabled <transport>/<analysis type="hdf5">; the attributes
 *   of docs/CONFIG.md that concern a producer), or the stream's name: steps are staged in
 *   <name>.h5flow/ (a name ending in ".h5flow" is taken as that directory). The same name is what
 *   Python consumers open.
 * *writer is set even on failure (NULL only when out of memory) so that h5flow_errmsg(*writer) says why;
 * free it with h5flow_writer_close. */
H5FLOW_API int h5flow_writer_open(MPI_Comm comm, const char *xml_or_dir, h5flow_writer **writer);

/* Start step `step` (>= 0, increasing) at simulation time `time` (finite). Collective. */
H5FLOW_API int h5flow_begin_step(h5flow_writer *w, int64_t step, double time);

/* Add this rank's piece of the global array `name` (1 to 3 dimensions, C order, row-major buffer of
 * count[0] * ... * count[ndims-1] elements). offset + count must lie inside global_dims on every axis;
 * every rank writing `name` in a step must give the same type, ndims and global_dims. The data is copied:
 * the buffer may be reused when the call returns. A rank may write several pieces of one array, or none; every
 * element once per step: a piece overlapping one this rank already wrote of `name` in the step is refused
 * (H5FLOW_ERR_ARGUMENT), and pieces of two ranks that overlap fail h5flow_end_step on every rank.
 * Not collective (call it any number of times between begin_step and end_step). Names: 1-128 letters,
 * digits, '_', '.', '+', '-', not starting with '.', '+' or '-'. */
H5FLOW_API int h5flow_write(h5flow_writer *w, const char *name, h5flow_type type, int ndims, const uint64_t *global_dims,
                 const uint64_t *offset, const uint64_t *count, const void *buffer);

/* Publish the step (collective): consumers see it once this returns. *published (may be NULL) is 1, or 0
 * when queue_policy="discard" dropped the step because the queue was full. H5FLOW_ERR_IO on every rank when a
 * rank's heartbeat file (hb/<rank>) was removed or replaced since: its peers report it lost, so the stream stops. */
H5FLOW_API int h5flow_end_step(h5flow_writer *w, int *published);

/* End the stream (consumers see end of stream after the last step) and free the writer. Collective.
 * After an error, or on a writer that failed to open, it ends without the end-of-stream mark (consumers
 * see the error or the producer lost) and returns the earlier error's code; so does a writer whose heartbeat file
 * was taken (as h5flow_end_step). NULL is accepted. */
H5FLOW_API int h5flow_writer_close(h5flow_writer *w);

/* Leave without ending the stream (consumers report the producer lost, or the error it wrote) and free
 * the writer. Collective. NULL is accepted. */
H5FLOW_API void h5flow_writer_abort(h5flow_writer *w);

/* The message of the last error on this writer ("" when none). Valid until the next call on w. */
H5FLOW_API const char *h5flow_errmsg(const h5flow_writer *w);

/* Check the XML file `path` as h5flow_writer_open reads it, without MPI and without touching the stream:
 * 0 when the library accepts it, else H5FLOW_ERR_CONFIG with what is wrong and what to do in msg (cut to
 * len bytes; msg may be NULL). Not collective. */
H5FLOW_API int h5flow_config_check(const char *path, char *msg, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* H5FLOW_H */
