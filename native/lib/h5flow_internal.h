/* libh5flow's internal header: the writer's state and the calls its source files share (never installed;
 * the library is built with hidden visibility, so none of these names leaves libh5flow.so).
 *
 *   h5flow.c          the public calls (h5flow.h), errors agreed across ranks, the settings and the pieces
 *   heartbeat.c       the heartbeat thread and its leases
 *   staging_claim.c   the owner claim and the check for a live earlier run
 *   staging_index.c   a new run's files, index lines, the X line that stops the stream
 *   staging_groups.c  consumer groups: registration files, dead_consumer
 *   staging_queue.c   garbage collection, the queue's verdict, a step's room on disk
 *   step_write.c      a step's meshes, meta.json, data.h5 (n-1) and rank-<r>.h5 (n-n)
 */
#ifndef H5FLOW_INTERNAL_H
#define H5FLOW_INTERNAL_H

#include "extents.h"
#include "h5flow.h"
#include "h5flow_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NAME_LEN 128
#define EMERGENCY_RESERVE (64 * 1024)
#define FILE_OVERHEAD (64 * 1024)
#define DATASET_OVERHEAD (8 * 1024)
#define WRITE_LEASE_MIN 30.0
#define WRITE_RATE 20e6

/* ---- heartbeat: a thread refreshing hb/<rank> while the writer makes progress --------------------- */
typedef struct {
    char path[H5FL_PATH_MAX];
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    double deadline; /* < 0: no lease */
    char what[H5FL_PATH_MAX + 128];
    double period;
    int fd;            /* the heartbeat file this thread made, open: it beats this inode, never a file of that name */
    dev_t dev;         /* made by someone else (a clear of hb/, a new run) */
    ino_t ino;
    char gone[H5FL_PATH_MAX + 128]; /* why the thread stopped beating ("" while it beats), under mu */
} heartbeat_t;

/* An array seen in an earlier step and its element type: an array keeps its type for the whole stream. */
typedef struct {
    char name[NAME_LEN + 1];
    int32_t type;
} known_t;

/* A piece's description, gathered from every rank as raw bytes. */
typedef struct {
    char name[NAME_LEN + 1];
    int32_t type, ndims;
    uint64_t gdims[3], off[3], cnt[3];
} piece_desc;

typedef struct {
    piece_desc d;
    void *data;
} piece_t;

typedef struct {
    int64_t seq, step;
    uint64_t nbytes;
    int gone;
} published_t;

/* One mesh (array) of a step: its blocks are gathered[first..] entries with that name, in rank order. */
typedef struct {
    const char *name;
    int type, ndims;
    uint64_t gdims[3];
    size_t nblocks;
    size_t *idx;      /* indices into the gathered descriptors */
    int *owner;       /* rank of each block */
    uint64_t *rows;   /* first row of each block; rows[nblocks] = total */
    int64_t gext[6];
} mesh_t;

struct h5flow_writer {
    MPI_Comm comm;
    int rank, size, opened, in_step, stopped, failed, local_code;
    h5fl_config cfg;
    char root[H5FL_PATH_MAX];
    char run_id[33];
    int claim_fd;
    heartbeat_t hb;
    int64_t step, last_step;
    double time;
    piece_t *pieces;
    size_t npieces, cap;
    published_t *pub;
    size_t npub, cappub;
    known_t *known; /* every array of the steps published so far, with its type */
    size_t nknown, capknown;
    int64_t next_seq;
    char told[2048];    /* rank 0: consumer groups said to have stopped beating ("name\n" each; dead_consumer) */
    char dropped[2048]; /* rank 0: consumer groups dropped (dead_consumer="drop"), "name\n" each */
    char errmsg[H5FL_MSG_MAX];
    char local_msg[H5FL_MSG_MAX];
};

/* The element types by h5flow_type: numpy dtype string and size in bytes. */
typedef struct {
    const char *dtype;
    size_t size;
} type_info;
extern const type_info TYPES[];
#define NTYPES 8

/* The error of an array whose type changed (h5flow_write, and build_meshes after the gather). */
#define TYPE_CHANGED "array \"%s\" was %s in earlier steps and is %s now; an array keeps its type for the whole " \
                     "stream (convert it, or write it under another name)"

/* heartbeat.c */
int hb_start(h5flow_writer *w);
void hb_lease(heartbeat_t *hb, double seconds, const char *what);
void hb_stop(heartbeat_t *hb);
int hb_failure(h5flow_writer *w);
int hb_lost_while_waiting(h5flow_writer *w);
/* staging_claim.c */
void path_of(const h5flow_writer *w, char out[H5FL_PATH_MAX], const char *name);
int claim(h5flow_writer *w);
void release_claim(h5flow_writer *w);
int refuse_if_live(h5flow_writer *w);
/* staging_index.c */
int reset(h5flow_writer *w);
int append(h5flow_writer *w, const char *line);
void stop_stream(h5flow_writer *w, const char *reason);
/* staging_groups.c */
int load_groups(const h5flow_writer *w, int64_t *released, char *names, size_t n);
int check_dead(h5flow_writer *w);
int dropped_error(h5flow_writer *w);
/* staging_queue.c */
void queue_state(h5flow_writer *w, int64_t *unreleased, uint64_t *staged, char *names, size_t n);
int admit(h5flow_writer *w, uint64_t nbytes, int *publish, int64_t *seq, char *reason, size_t rlen);
int reserve_room(h5flow_writer *w, uint64_t need);
/* step_write.c */
void drop_empty(h5flow_writer *w, piece_desc *all, int *owner, size_t *total, size_t first_mine);
int build_meshes(h5flow_writer *w, const piece_desc *all, const int *owner, size_t total, mesh_t **out,
                 size_t *nout);
void free_meshes(mesh_t *m, size_t n);
void step_json(const h5flow_writer *w, const piece_desc *all, const mesh_t *m, size_t n, h5fl_buf *b);
int write_shared(h5flow_writer *w, const char *path, const piece_desc *all, const mesh_t *m, size_t n,
                 const char *meta, size_t metalen);
int write_per_rank(h5flow_writer *w, const char *path, const mesh_t *m, size_t n);
/* h5flow.c */
int set_err(h5flow_writer *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int agree(h5flow_writer *w, int code);
void h5_errtext(char *out, size_t n);
void parent_dir(const h5flow_writer *w, char parent[H5FL_PATH_MAX]);
int pieces_overlap(const piece_desc *a, const piece_desc *b);
void piece_text(const piece_desc *d, char *out, size_t n);
int known_type(const h5flow_writer *w, const char *name);
int remember_types(h5flow_writer *w, const mesh_t *m, size_t n);

#endif
