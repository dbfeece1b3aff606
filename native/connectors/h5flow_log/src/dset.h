/* h5flow_log — internal interfaces between the dataset translation units (dset_*.c, vol_dataset*.c). */
#ifndef H5FL_DSET_H
#define H5FL_DSET_H

#include "h5fl.h"

/* ---------------------------------------------------------------- metadata sidecar (dset_meta.c) */
int h5fl_sidecar_write(const char *dir, hid_t type, hid_t space, hid_t dcpl, bool sync);
int h5fl_sidecar_read(const char *dir, hid_t *type, hid_t *space, hid_t *dcpl);

/* ---------------------------------------------------------------- restructured layout (restructure.c) */
/* The layout a restructure gave a dataset (docs/FORMAT.md "Restructured datasets"): kept in its @dataset
 * sidecar (version 5). The dataset's contents when the restructure ran are in @shards.<gen>.dat, cut into
 * shards of `chunk` elements; they sit under every write of a later epoch than `epoch`, and every log of
 * that epoch or an earlier one is superseded (garbage, never read). A constant-size description. */
typedef struct h5fl_layout {
    uint32_t order; /* 0: none (not restructured); H5FL_ORDER_* */
    uint32_t rank;
    uint64_t epoch; /* logs of this epoch and earlier are superseded by the shards */
    uint64_t gen;   /* generation: the shards are in @shards.<gen>.dat */
    uint64_t dims[H5S_MAX_RANK];  /* the extent the shards hold */
    uint64_t chunk[H5S_MAX_RANK]; /* the shard shape */
} h5fl_layout_t;
#define H5FL_ORDER_ROW 1u
#define H5FL_ORDER_COLUMN 2u
#define H5FL_ORDER_CHUNKS 3u
#define H5FL_LAYOUT_BLOCK(rank) (24u + 16u * (unsigned)(rank)) /* bytes of the layout in the sidecar */
/* The layout stored in dir's @dataset (lay->order 0 if none). */
int h5fl_sidecar_layout(const char *dir, h5fl_layout_t *lay);
/* The sidecar with a layout (version 5; lay NULL or order 0: as h5fl_sidecar_write without one). */
int h5fl_sidecar_write_layout(const char *dir, hid_t type, hid_t space, hid_t dcpl, const h5fl_layout_t *lay,
                              bool sync);
/* Rewrite dir's sidecar without its layout (a copy whose data is written anew is not restructured). */
int h5fl_sidecar_drop_layout(const char *dir, bool sync);
/* Whether the file `name` of a dataset directory is one the layout supersedes (never read): a log or
 * statistics file of epoch <= lay->epoch, a shard file of another generation, a restructure's temporary. */
bool h5fl_layout_superseded(const char *name, const h5fl_layout_t *lay);
/* The restructured contents of an open dataset, mapped (NULL if not restructured). */
typedef struct h5fl_base {
    h5fl_layout_t lay;
    char *path;
    int fd;
    uint8_t *map;
    size_t mapsize;
    uint64_t nch[H5S_MAX_RANK]; /* shards per dimension */
    uint64_t nchunks, cbytes;   /* shards, bytes per shard */
    uint8_t *checked;           /* per shard: its checksum was verified */
    hid_t cur_space;            /* the dataspace whose extent cur holds (reads: no HDF5 call per sequence) */
    hsize_t cur[H5S_MAX_RANK];
} h5fl_base_t;
int h5fl_base_open(const char *dir, const h5fl_layout_t *lay, size_t esize, h5fl_base_t **out);
void h5fl_base_free(h5fl_base_t *b);
/* Walk the elements [pos, stop) (linear order of the current extent `cur`): fn gets each piece, with the
 * shard's bytes (verified) and shard number, or src NULL and shard UINT64_MAX for elements outside the
 * restructured extent (they read as the fill value). `lin`: linear position of the piece's first element. */
typedef int (*h5fl_base_fn)(void *ctx, const uint8_t *src, uint64_t n, uint64_t shard, uint64_t lin);
int h5fl_base_walk(const h5fl_dset_t *d, h5fl_base_t *b, const hsize_t *cur, uint64_t pos, uint64_t stop,
                   h5fl_base_fn fn, void *ctx);

/* ---------------------------------------------------------------- writer logs (dset_writer.c) */
int h5fl_writer_open(h5fl_dset_t *d);
/* Append the index record of a write whose data is at data_off (nbytes) in the writer's data log (vol_dataset_io.c;
 * also the fill record of an extent change). The record's extent is fsel's (the runs are in its linear order):
 * the dataset's, or a larger one for a direct chunk write of an edge chunk or a shrink's fill record. */
int h5fl_dset_append_record(h5fl_dset_t *d, hid_t fsel, uint64_t data_off, uint64_t nbytes, uint32_t flags,
                            const void *data);
/* ... with H5FL_REC_FILTER in flags: nbytes filtered bytes, raw before filtering, fmask filters skipped. */
int h5fl_dset_append_record_f(h5fl_dset_t *d, hid_t fsel, uint64_t data_off, uint64_t nbytes, uint32_t flags,
                              uint64_t raw, uint32_t fmask, const void *data);
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
/* A separate index of d's logs in the linear order of the extent `dims` instead of the current one (the
 * chunk view of dset_chunk.c: the current extent rounded up to whole chunks), its logs mapped. */
int h5fl_ix_build_dims(h5fl_dset_t *d, const hsize_t *dims, h5fl_index_t **out);
/* Record this process's own write in an already built index (merged lazily at the next read); its runs
 * are in the linear order of the record's extent `rdims`. */
int h5fl_ix_note_write(h5fl_dset_t *d, const runs_ctx_t *runs, const hsize_t *rdims, h5fl_seq_t seq,
                       uint64_t data_off, bool fill);
/* ... of a filtered write: `filt` is its record (nbytes filtered, raw, fmask); NULL: not filtered. */
int h5fl_ix_note_write2(h5fl_dset_t *d, const runs_ctx_t *runs, const hsize_t *rdims, h5fl_seq_t seq,
                        uint64_t data_off, bool fill, const h5fl_record_t *filt);
typedef struct gather_ctx {
    h5fl_dset_t *d;
    uint8_t *out;
} gather_ctx_t;
/* Copy elements [start, start+len) of the dataset (linear order) to g->out, advancing it. */
int h5fl_gather_seq(void *vctx, hsize_t start, size_t len);
/* Check the data checksum of checksummed record `ri` of the built index (marks it checked). */
int h5fl_verify_rec(const h5fl_dset_t *d, uint32_t ri);

/* ---------------------------------------------------------------- chunks (dset_chunk.c) */
/* H5Dwrite_chunk, H5Dread_chunk, H5Dget_chunk_storage_size, H5Dget_num_chunks, H5Dget_chunk_info(_by_coord),
 * H5Dchunk_iter (docs/FORMAT.md "Direct chunk I/O"). */
herr_t h5fl_dataset_optional(void *obj, H5VL_optional_args_t *args, hid_t dxpl, void **req);
/* What the connector's opt_query answers for a dataset optional operation. */
uint64_t h5fl_dataset_opt_flags(int op_type);
/* The extent a chunked dataset's fill record of a shrink covers: `dims` rounded up to whole chunks (an edge
 * chunk's elements past the extent are dropped with the rest, as native HDF5 prunes them). */
void h5fl_chunk_round(const h5fl_dset_t *d, int rank, const hsize_t *dims, hsize_t *out);

/* ---------------------------------------------------------------- virtual datasets (vds.c) */
bool h5fl_vds_layout(hid_t dcpl);
/* At creation: refuse what is not supported (types with variable-length sequences), with a message. */
int h5fl_vds_check(hid_t type, hid_t dcpl, const char *name);
/* Set d->space to the extent its unlimited and printf-style mappings give now (native HDF5's rules). */
int h5fl_vds_extent(h5fl_dset_t *d);
/* Read (fill, then every mapping's part from its source) or write (every mapping's part to its source). */
int h5fl_vds_io(h5fl_dset_t *d, hid_t mtype, hid_t mspace, hid_t fspace, hid_t dxpl, void *buf, bool write);

#endif
