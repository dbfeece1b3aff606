/* Internal helpers of libh5flow (not installed): strings, files, JSON scraps, the XML configuration. */
#ifndef H5FLOW_UTIL_H
#define H5FLOW_UTIL_H

#include <stddef.h>
#include <stdint.h>

#define H5FL_MSG_MAX 4096
#define H5FL_PATH_MAX 4096

/* The producer settings of an hdf5 transport (docs/CONFIG.md); defaults are TransportConfig's. */
typedef struct h5fl_config {
    char filename[H5FL_PATH_MAX]; /* the stream's name: staged in <filename>.h5flow/ */
    char source[H5FL_PATH_MAX + 32]; /* "file.xml:3" or "" */
    int collective;
    int collective_given;  /* collective= was given (a contradiction with method="sc" is refused) */
    int method_collective; /* method's second character is 'c' */
    int layout_given;
    int async_write; /* recorded only: the library writes each step inside h5flow_end_step */
    int layout_nn; /* layout: 1 n-n (one file per rank, the default), 0 n-1 (one shared file per step) */
    int64_t queue_limit;
    int discard; /* queue_policy: 0 block, 1 discard */
    uint64_t quota;
    int keep_all;
    int dead_consumer; /* a consumer group that stopped beating, the producer blocked on it: 0 wait, 1 drop, 2 error */
    double heartbeat, poll_min, poll_max;
    /* vol_stack: the connectors each rank file is written through, top first ("" = native); their options */
    char vol_stack[32];
    uint64_t async_max_mem;
    char cache_path[H5FL_PATH_MAX];
    uint64_t cache_capacity;
} h5fl_config;

void h5fl_config_defaults(h5fl_config *cfg);
/* Parse an XML configuration; 0 or -1 with `err` set (what was wrong and what to do). */
int h5fl_config_from_xml(h5fl_config *cfg, const char *path, char *err, size_t errlen);

/* A growable string. */
typedef struct h5fl_buf {
    char *data;
    size_t len, cap;
    int oom;
} h5fl_buf;
void h5fl_buf_printf(h5fl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void h5fl_buf_free(h5fl_buf *b);

/* The shortest text that reads back as `x` (Python's repr of a float: "1.0", "0.2", "1e-05"). */
void h5fl_repr(double x, char out[32]);
double h5fl_now(void);
void h5fl_sleep(double seconds);

/* Files. Each returns 0 or an errno value. */
int h5fl_rmtree(const char *path);
int h5fl_read_file(const char *path, char **text, size_t limit);
int h5fl_atomic_write(const char *path, const char *text, size_t len);
int h5fl_append_line(const char *path, const char *line);
int h5fl_is_full_errno(int e);
int64_t h5fl_free_bytes(const char *path);
int64_t h5fl_capacity_bytes(const char *path);

/* JSON scraps: the value of "key" in a flat object written by h5flow (no escapes in strings). 0 or -1. */
int h5fl_json_str(const char *text, const char *key, char *out, size_t n);
int h5fl_json_num(const char *text, const char *key, double *out);
/* CRC-32 (zlib's, polynomial 0xEDB88320) of `n` bytes. */
uint32_t h5fl_crc32(const void *data, size_t n);
/* `s` as a JSON string body (quotes and backslashes escaped, control characters dropped). */
void h5fl_json_escape(h5fl_buf *b, const char *s);

#endif
