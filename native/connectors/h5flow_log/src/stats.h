/* h5flow_log — per-write statistics and user data functions (stats.c; docs/FORMAT.md, "Statistics").
 *
 * Every write of a numeric dataset gets a statistics record (count, min, max, sum, NaN count, arg-min/max,
 * a 16-bin histogram, and the key -> value output of the dataset's user data function) appended to the
 * writer's own sidecar @stats.<epoch>.<writer>, after the write's index record reached the index log. A
 * record names the write it describes by sequence number, data log end and data checksum; a reader uses it
 * only while every element of that write is still visible (latest write wins), and computes the numbers
 * from the data otherwise. */
#ifndef H5FL_STATS_H
#define H5FL_STATS_H

#include "dset.h"

#define H5FL_STATS_PREFIX "@stats." /* @stats.<epoch>.<writer>: one writer's statistics records */
#define H5FL_UDF_FILE "@udf"        /* the dataset's user data function: "h5flow_log udf 1\nLIB\nSYMBOL\n" */
#define H5FL_STATS_MAGIC 0x54534C48u /* "HLST" */
#define H5FL_STATS_BINS 16u

/* Open the statistics sidecar of writer `w` of dataset `d` (at the end of h5fl_writer_open). Never fails
 * the writer: a sidecar that cannot be opened turns statistics off for this writer (readers then compute
 * from the data). */
void h5fl_stats_open(h5fl_dset_t *d, h5fl_writer_t *w);
/* The write whose index record `r` (runs in `runs`) was just appended: compute its statistics from
 * `data` (r->nbytes bytes, the elements in the dataset's type, packed in selection order; NULL for fill
 * records and for types without statistics), run the user data function, buffer the record. */
void h5fl_stats_note(h5fl_dset_t *d, const h5fl_record_t *r, const runs_ctx_t *runs, const void *data);
/* The fused path (docs/FORMAT.md, "Statistics", Cost). vol_dataset_io.c arms the writer before it appends
 * the `nbytes` bytes of a write's stored elements (unfiltered, dataset type, selection order); the
 * appending code (dset_writer.c) then hands them, in order and block by block while each block is in
 * cache, to h5fl_stats_scan (first pass: count, min, max, sum, NaN count, positions; with the checksum)
 * and, where it writes them to the disk itself, chunk by chunk to h5fl_stats_hist (second pass: the
 * histogram, just before each chunk's pwrite); h5fl_stats_note then takes what they computed and does
 * only the rest. Anything short of the whole write (a failure between, a mismatch) is dropped and
 * h5fl_stats_note computes from `data` as without arming. */
void h5fl_stats_arm(h5fl_dset_t *d, uint64_t nbytes);
bool h5fl_stats_armed(const h5fl_writer_t *w);
void h5fl_stats_scan(h5fl_writer_t *w, const void *p, size_t len);
void h5fl_stats_hist(h5fl_writer_t *w, const void *p, size_t len);
/* Write the buffered records (after the index log was written: h5fl_writer_flush). Never fails. */
void h5fl_stats_flush(h5fl_writer_t *w, bool sync);
void h5fl_stats_close(h5fl_writer_t *w);
/* At dataset creation (rank 0): store the user data function named in `dcpl` (property
 * H5FLOW_UDF_PROP) as the dataset's @udf. 0, or -1 with an error recorded. */
int h5fl_udf_persist(const char *dir, hid_t dcpl, bool sync);
/* At H5Dopen: a user data function named in the access list `dapl` applies to this process's writes
 * (instead of the dataset's @udf). -1 with an error if this process already writes the dataset. `first`: no
 * other handle of the dataset is open (the caller then keeps all of `dapl`; otherwise only the function's
 * property is added to the dataset's access list). */
int h5fl_udf_check_dapl(h5fl_dset_t *d, hid_t dapl, bool first);

#endif
