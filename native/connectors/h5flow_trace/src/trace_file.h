/* h5flow_trace: one process's trace file and string table (docs/TRACE.md "Format"). */
#ifndef H5FT_TRACE_FILE_H
#define H5FT_TRACE_FILE_H

#include <stddef.h>
#include <stdint.h>

#define H5FT_HEADER_SIZE 128u
#define H5FT_RECORD_SIZE 80u
#define H5FT_VERSION 1u

/* op of the last record of a complete trace: npoints = records before it, bytes = strings in the table */
#define H5FT_OP_END 0xFFFFu

enum {
    H5FT_FLAG_CONV = 1u,
    H5FT_FLAG_FAILED = 2u,
};

/* One record, in host order; written little-endian by h5ft_writer_add. */
typedef struct h5ft_record {
    uint64_t t0_ns, t1_ns, bytes, npoints, nblocks;
    uint16_t op;
    uint8_t ndims, xfer, io_actual, flags;
    uint16_t ncount;
    uint32_t no_coll_local, no_coll_global;
    uint32_t file, obj, shape, mem_type, file_type, props;
} h5ft_record;

typedef struct h5ft_writer h5ft_writer;

/* Opens rank-<rank>.trace / .strings in dir (or rank-<rank>-<pid>.* when taken). NULL and errno-style message
 * in err (of errlen bytes) on failure. block: records per flush block (0: the default 4096). */
h5ft_writer *h5ft_writer_open(const char *dir, unsigned rank, unsigned nranks, size_t block, char *err,
                              size_t errlen);
/* The id of a string in the table (0 for NULL or ""), added when new. UINT32_MAX when out of memory. */
uint32_t h5ft_writer_intern(h5ft_writer *w, const char *s);
/* Nanoseconds since the writer's clock origin. */
uint64_t h5ft_now(const h5ft_writer *w);
/* Appends a record; returns its slot (valid until the next flush) so that a caller can patch it. */
h5ft_record *h5ft_writer_add(h5ft_writer *w, const h5ft_record *rec);
/* Makes room for n consecutive records in the current block (flushing it when needed): 0 when the next n
 * h5ft_writer_add calls return slots that stay valid together until the next flush, -1 when n > the block. */
int h5ft_writer_reserve(h5ft_writer *w, size_t n);
/* Writes buffered strings then records. 0 on success, -1 on a write error (reported once on stderr). */
int h5ft_writer_flush(h5ft_writer *w);
/* Flushes and closes; frees w. */
int h5ft_writer_close(h5ft_writer *w);
/* Forgets w without writing anything (a forked child: its parent writes what was buffered); frees w. */
void h5ft_writer_abandon(h5ft_writer *w);
/* Monotonic clock in ns (the clock records use). */
uint64_t h5ft_monotonic_ns(void);

#endif
