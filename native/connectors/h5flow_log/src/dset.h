/* h5flow_log — internal interfaces between the dataset translation units (dset_*.c, vol_dataset.c). */
#ifndef H5FL_DSET_H
#define H5FL_DSET_H

#include "h5fl.h"

/* ---------------------------------------------------------------- metadata sidecar (dset_meta.c) */
int h5fl_sidecar_write(const char *dir, hid_t type, hid_t space, hid_t dcpl, bool sync);
int h5fl_sidecar_read(const char *dir, hid_t *type, hid_t *space, hid_t *dcpl);

/* ---------------------------------------------------------------- writer logs (dset_writer.c) */
int h5fl_writer_open(h5fl_dset_t *d);
int h5fl_writer_flush(h5fl_writer_t *w, bool sync);
/* Flush, then append a commit record (if records were appended since the last one): a reader then knows
 * that the log up to there was written completely, so an incomplete-looking record before it is damage,
 * not a torn tail. At H5Fflush, H5Dflush and close. */
int h5fl_writer_commit(h5fl_writer_t *w, bool sync);
/* Set the data checksum of the record `r` of the write just appended (flags, crc_start, dcrc): the CRC32C
 * of every data byte appended since the previous checksummed record (for variable-length strings, the
 * strings and their pairs). Fill records are left alone. */
int h5fl_writer_seal_data(h5fl_writer_t *w, h5fl_record_t *r);
void h5fl_writer_free(h5fl_writer_t *w);
int h5fl_writer_append_data(h5fl_writer_t *w, const void *src, size_t len);
/* An index record may only reach the disk after the data it points to. */
int h5fl_writer_append_index(h5fl_writer_t *w, const uint8_t *rec, size_t len);

/* ---------------------------------------------------------------- selections (dset_select.c) */
typedef int (*seq_fn)(void *ctx, hsize_t off, size_t len);
typedef struct copy_ctx {
    uint8_t *mem;  /* user buffer */
    uint8_t *flat; /* packed buffer */
    size_t pos;
    bool to_flat;
} copy_ctx_t;
typedef struct runs_ctx {
    uint8_t *buf;
    size_t n, cap;
    uint64_t elems;
} runs_ctx_t;
typedef struct sel {
    hid_t fsel, msel; /* msel may be H5S_BLOCK */
    hsize_t n;
} sel_t;

int h5fl_for_each_seq(hid_t space, size_t esize, seq_fn fn, void *ctx);
/* Whether the selection of `space` is one contiguous byte range; its offset in *off. */
bool h5fl_sel_contiguous(hid_t space, size_t esize, hsize_t npoints, hsize_t *off);
int h5fl_copy_seq(void *vctx, hsize_t off, size_t len); /* ctx: copy_ctx_t */
int h5fl_add_run(void *vctx, hsize_t off, size_t len);  /* ctx: runs_ctx_t */
int h5fl_resolve_sel(h5fl_dset_t *d, hid_t mspace, hid_t fspace, sel_t *s);

/* ---------------------------------------------------------------- merged index (dset_index.c) */
typedef struct ext_vec {
    h5fl_extent_t *v;
    size_t n, cap;
} ext_vec_t;
int h5fl_ev_push(ext_vec_t *e, uint64_t start, uint64_t len, h5fl_seq_t seq, uint32_t log, uint32_t rec,
                 uint64_t loff);
int h5fl_ix_add_log(h5fl_index_t *ix, const char *path);
void h5fl_ix_free(h5fl_index_t *ix);
/* Build the index if needed, merge this process's pending writes, map the logs. */
int h5fl_ix_ready(h5fl_dset_t *d);
/* Record this process's own write in an already built index (merged lazily at the next read). */
int h5fl_ix_note_write(h5fl_dset_t *d, const runs_ctx_t *runs, h5fl_seq_t seq, uint64_t data_off, bool fill);
/* ... of a filtered write: `filt` is its record (nbytes filtered, raw, fmask); NULL: not filtered. */
int h5fl_ix_note_write2(h5fl_dset_t *d, const runs_ctx_t *runs, h5fl_seq_t seq, uint64_t data_off, bool fill,
                        const h5fl_record_t *filt);
typedef struct gather_ctx {
    h5fl_dset_t *d;
    uint8_t *out;
} gather_ctx_t;
/* Copy elements [start, start+len) of the dataset (linear order) to g->out, advancing it. */
int h5fl_gather_seq(void *vctx, hsize_t start, size_t len);
/* Check the data checksum of checksummed record `ri` of the built index (marks it checked). */
int h5fl_verify_rec(const h5fl_dset_t *d, uint32_t ri);

/* ---------------------------------------------------------------- virtual datasets (vds.c) */
bool h5fl_vds_layout(hid_t dcpl);
/* At creation: refuse what is not supported (printf-style names, unlimited mappings), with a message. */
int h5fl_vds_check(hid_t type, hid_t dcpl, const char *name);
/* Read (fill, then every mapping's part from its source) or write (every mapping's part to its source). */
int h5fl_vds_io(h5fl_dset_t *d, hid_t mtype, hid_t mspace, hid_t fspace, hid_t dxpl, void *buf, bool write);

#endif
