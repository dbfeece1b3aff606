/* h5flow_log — a log-structured, object-per-directory HDF5 VOL connector.
 *
 * Internal interfaces shared by the connector's translation units. The on-disk format is described in
 * docs/FORMAT.md; the constants below are its single source of truth in C.
 */
#ifndef H5FL_H
#define H5FL_H

#include <mpi.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <hdf5.h>
#include <H5VLconnector.h>

#define H5FL_NAME "h5flow_log"
#define H5FL_VALUE 311 /* in the 256-511 range HDF5 reserves for testing new connectors */
/* Container format written (the marker's "format" line); H5FL_FORMAT_OLDEST.. are read. Format 2 added
 * the epoch claims (@epochs/), commit records and data checksums in the index logs; format 3 the per-write
 * statistics sidecars (@stats.<epoch>.<writer>) and user data functions (@udf) (docs/FORMAT.md). */
#define H5FL_FORMAT_VERSION 4
#define H5FL_FORMAT_OLDEST 1
/* ... written by every writable open of a container without hard links (older connectors keep reading it);
 * format 4 (H5FL_FORMAT_VERSION) is written when the first second hard link is created (hardlinks.c), so a
 * connector that does not know @hardlink stubs refuses the container instead of showing half of it. */
#define H5FL_FORMAT_BASE 3
#define H5FL_SIDECAR_VERSION 1 /* version field of @dataset and @attr.* files (unchanged by format 2) */
/* ... 2 for an object whose datatype has variable-length parts (blob.c): older connectors refuse such a
 * dataset instead of misreading its data */
#define H5FL_SIDECAR_VERSION_VLEN 2
/* ... 3 for a virtual dataset's @dataset (vds.c): older connectors would read it as a dataset without
 * data (the fill value), so they must refuse it */
#define H5FL_SIDECAR_VERSION_VDS 3
/* ... 4 for a dataset with filters (filter.c): its index records carry H5FL_REC_FILTER, which an older
 * connector would call corruption; the version makes it refuse the dataset with a clear message instead */
#define H5FL_SIDECAR_VERSION_FILTER 4
/* ... 5 for a restructured dataset (restructure.c): its data is in @shards.<gen>.dat and its older logs are
 * gone, so an older connector must refuse it rather than read fill values */
#define H5FL_SIDECAR_VERSION_LAYOUT 5
#define H5FL_EPOCH_MAX ((uint64_t)INT64_MAX) /* writer epochs are 1..this */
#define H5FL_WRITER_MAX 0xFFFFFu /* writer ids (MPI ranks) are 0..this: the low 20 bits of an order */

/* Reserved file names inside an object directory. User link and attribute names are escaped so that
 * they never start with '@' (see h5fl_escape), hence can never collide with these. */
#define H5FL_MARKER "@h5flow_log"   /* container root: format name + version + epoch */
#define H5FL_USERBLOCK_FILE "@userblock" /* container root: the userblock (H5Pset_userblock), its size in bytes */
#define H5FL_GROUP_FILE "@group"    /* a directory holding this file is a group */
#define H5FL_DSET_FILE "@dataset"   /* a directory holding this file is a dataset; its metadata */
#define H5FL_DTYPE_FILE "@datatype" /* a directory holding this file is a committed datatype */
#define H5FL_DTYPE_USE_FILE "@dtype" /* in a dataset: the id of the committed datatype it was created with */
#define H5FL_ID_FILE "@id"           /* an object's reference id (refs.c); never copied with the object */
#define H5FL_ATTR_PREFIX "@attr."   /* @attr.<escaped name>: one attribute */
#define H5FL_LOG_PREFIX "@log."     /* @log.<epoch>.<writer>.dat / .idx: one writer's logs */
#define H5FL_ANON_PREFIX "@anon." /* @anon.<epoch>.<n>: an anonymous dataset not linked yet */
#define H5FL_EPOCH_DIR "@epochs"  /* @epochs/<epoch>: one file per writer epoch, created O_EXCL (the claim) */
#define H5FL_GONE_PREFIX "@gone." /* @gone.<epoch>.<n>: a deleted object still open somewhere */
#define H5FL_XATTR "user.h5flow_log.meta"
/* A directory holding @softlink is a soft link (links.c): the file holds the target path. */
#define H5FL_SOFT_FILE "@softlink"
#define H5FL_I_SOFT ((H5I_type_t)1000) /* h5fl_dir_type of a soft link (never an HDF5 id type) */
#define H5FL_EXT_FILE "@extlink" /* a directory holding this file is an external link (its H5Lget_val bytes) */
#define H5FL_I_EXT ((H5I_type_t)1001)
/* Hard links (hardlinks.c, docs/FORMAT.md "Hard links"): an object with two or more names lives in the object
 * store @objects/<id as 16 hex digits> at the container root, and each of its names is a directory holding
 * @hardlink (the id, as @id holds it); the object holds its link count in @nlink. */
#define H5FL_HARD_FILE "@hardlink"
#define H5FL_I_HARD ((H5I_type_t)1002)
#define H5FL_STORE_DIR "@objects"
#define H5FL_BLOB_DIR "@blobs" /* at the root: the VOL blobs (refs.c), e.g. 1.10 region references' selections */
#define H5FL_NLINK_FILE "@nlink"
/* The root group's persistent id (refs.c): its stubs name the container directory; it never moves. */
#define H5FL_ROOT_ID (UINT64_C(1) << 63)
#define H5FL_SOFT_DEPTH 16             /* soft links followed per resolution, as HDF5's H5L_NUM_LINKS */
/* Creation order (links.c): @corder in a group that tracks it for links, @acorder in an object that tracks
 * it for attributes (the next order to give); @crt in a link's directory, @acrt.<name> beside an attribute. */
#define H5FL_CORDER_FILE "@corder"
#define H5FL_ACORDER_FILE "@acorder"
#define H5FL_CRT_FILE "@crt"


/* ---------------------------------------------------------------- errors (util.c) */
/* A failing internal function records one message; the VOL callback that returns the failure pushes it
 * on the HDF5 error stack as its last act (pushing earlier would be wiped by the next API call we make). */
void h5fl_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void h5fl_err_clear(void);
const char *h5fl_err_msg(void);
/* Push the pending message (or a generic one) onto HDF5's error stack, filed under the caller's file and
 * line; FUNC is the caller's __func__. */
void h5fl_err_push_at(const char *file, const char *func, unsigned line);
#define h5fl_err_push(func) h5fl_err_push_at(__FILE__, (func), __LINE__)
int h5fl_err_init(void);
/* The caller's error stack taken aside (h5fl_estack_save) and put back (h5fl_estack_restore, which takes the
 * saved stack): around connector work that calls HDF5 API functions, each of which clears the calling thread's
 * stack on entry, where HDF5 may call the connector for a program that did not select it (its open fallback). */
hid_t h5fl_estack_save(void);
void h5fl_estack_restore(hid_t saved);
void h5fl_err_term(void);

/* ---------------------------------------------------------------- checksums, names, files (util.c) */
uint32_t h5fl_crc32c(uint32_t crc, const void *buf, size_t len);
uint32_t h5fl_crc32c_portable(uint32_t crc, const void *buf, size_t len); /* the table code, for tests */
/* A property list argument that is neither H5P_DEFAULT nor of class `cls` is an error (as in native). */
int h5fl_check_plist(hid_t id, hid_t cls, const char *what);
/* Whether converting to/from `t` needs a background buffer (compound types). */
bool h5fl_needs_bkg(hid_t t);
/* Creation-order tracking asked for in a group/file/object creation property list: not supported. */
int h5fl_check_no_crt_order(hid_t ocpl, bool links);
/* The file creation (create only; else H5I_INVALID_HID) and access property lists of file NAME ask only
 * for what h5flow_log honours (fapl.c; docs/FORMAT.md "File drivers and file properties"). Returns 0,
 * or -1 with an error recorded that names the property and what to do. */
int h5fl_check_file_plists(const char *name, hid_t fcpl, hid_t fapl);
/* The core driver without a backing store: the container lives in memory (vol_file.c). */
bool h5fl_fapl_in_memory(hid_t fapl);

/* Escape one HDF5 link/attribute name into a single file-name component. Returns 0, or -1 with an
 * error recorded (empty name, too long). The result never starts with '@' or '.', never contains '/'. */
int h5fl_escape(const char *name, char *out, size_t outsz);
/* Inverse of h5fl_escape; -1 if `comp` is not a valid escaped name (e.g. a layout file). */
int h5fl_unescape(const char *comp, char *out, size_t outsz);

char *h5fl_strdup(const char *s);
char *h5fl_join(const char *dir, const char *comp); /* dir + "/" + comp, malloc'd */
/* prefix.c: where a file named inside a container is looked for, in native HDF5's order. */
typedef struct h5fl_file h5fl_file_t;
/* The directory holding the container f, absolute (native's H5F_EXTPATH); NULL with an error. */
char *h5fl_file_extpath(const h5fl_file_t *f);
/* A prefix built as native builds a dataset's (H5D__build_file_prefix): $env_var when set and not empty,
 * else prop; a leading "${ORIGIN}" is f's directory; NULL for none ("", ".", NULL), or on error (*err). */
char *h5fl_build_prefix(const char *env_var, const char *prop, const h5fl_file_t *f, bool *err);
/* The names native HDF5 tries for a file `name` (H5F_prefix_open_file), in its order: an absolute name as
 * given; then, with only the last component of an absolute name, each entry of $env_var (a ':' list),
 * `prefix` (may be NULL), f's directory, and the name itself (the working directory). A NULL-terminated
 * list to free with h5fl_lookup_free; NULL with an error on failure. */
char **h5fl_lookup_candidates(const char *name, const char *env_var, const char *prefix, const h5fl_file_t *f);
void h5fl_lookup_free(char **list);
/* An HDF5 path + "/" + name ("/" + name under the root), malloc'd; NULL with an error recorded. */
char *h5fl_path_join(const char *path, const char *name);
/* Write dir/name via a temporary file and rename(2); with `sync`, fsync before the rename. */
int h5fl_write_file_atomic(const char *dir, const char *name, const void *buf, size_t len, bool sync);
int h5fl_read_file(const char *path, void **buf, size_t *len); /* malloc'd contents */
/* open(2) of a file of the layout: never blocks (a FIFO), never follows a symbolic link, refuses anything
 * but a regular file. Returns the descriptor, or -1 with an error recorded and errno set (ENOENT: none). */
int h5fl_open_file(const char *path, int flags, mode_t mode);
int h5fl_rm_rf(const char *path);
int h5fl_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);
int h5fl_pread_all(int fd, void *buf, size_t len, uint64_t off);
bool h5fl_exists(const char *dir, const char *name);
void h5fl_put_u32(uint8_t *p, uint32_t v);
void h5fl_put_u64(uint8_t *p, uint64_t v);
uint32_t h5fl_get_u32(const uint8_t *p);
uint64_t h5fl_get_u64(const uint8_t *p);

/* Sorted, decoded names of the children (objects or attributes) of a directory. */
typedef struct h5fl_names {
    char **v;
    size_t n;
} h5fl_names_t;
int h5fl_list_children(const char *dir, h5fl_names_t *out); /* sub-directories that are objects */
int h5fl_list_attrs(const char *dir, h5fl_names_t *out);
void h5fl_names_free(h5fl_names_t *n);

/* ---------------------------------------------------------------- merged index (index.c) */
typedef struct h5fl_seq {
    uint64_t epoch;
    uint64_t order; /* (counter << 20) | writer */
} h5fl_seq_t;

typedef struct h5fl_extent {
    uint64_t start, len; /* in elements, row-major linear order of the current extent */
    h5fl_seq_t seq;
    uint32_t log;  /* index into the index's log table */
    uint32_t rec;  /* index into the index's checksummed-record table, H5FL_NO_REC if none */
    uint64_t loff; /* byte offset in that data log of element `start` */
} h5fl_extent_t;
#define H5FL_NO_REC UINT32_MAX

/* Sorted, non-overlapping extents: for every element, the latest write covering it. */
typedef struct h5fl_map {
    h5fl_extent_t *ext;
    size_t n, cap;
} h5fl_map_t;

void h5fl_map_free(h5fl_map_t *m);
/* Replace `m` by the merge of its own extents and `runs` (latest sequence wins). O(n log n). */
int h5fl_map_merge(h5fl_map_t *m, h5fl_extent_t *runs, size_t nruns, size_t esize);
/* Index of the first extent whose end is > pos (n if none). */
size_t h5fl_map_find(const h5fl_map_t *m, uint64_t pos);

/* One index record: a write of `nbytes` at `data_off` in the data log covering `nruns` runs. */
typedef struct h5fl_record {
    h5fl_seq_t seq;
    uint64_t data_off, nbytes;
    uint32_t rank;
    uint32_t flags; /* H5FL_REC_FILL: no data, the runs read as the fill value (a shrink); H5FL_REC_COMMIT;
                     * H5FL_REC_DCRC: crc_start and dcrc are set */
    uint64_t crc_start; /* H5FL_REC_DCRC: dcrc is the CRC32C of data log bytes [crc_start, data_off+nbytes) */
    uint32_t dcrc;
    uint64_t dims[H5S_MAX_RANK];
    uint64_t nruns;
    const uint8_t *runs; /* nruns * (u64 start, u64 len), little endian, in selection order */
    uint64_t raw;   /* H5FL_REC_FILTER: the write's bytes before filtering (nbytes: after) */
    uint32_t fmask; /* H5FL_REC_FILTER: filters skipped (bit i: the dcpl's filter i), as HDF5's chunk mask */
} h5fl_record_t;

#define H5FL_REC_MAGIC 0x58494C48u /* "HLIX" */
#define H5FL_REC_FILL 1u
#define H5FL_REC_COMMIT 2u /* format 2: everything before this record was completely written */
#define H5FL_REC_DCRC 4u   /* format 2: the record carries a CRC32C of its data */
#define H5FL_REC_FILTER 8u /* format 2, filtered datasets: the data went through the filter pipeline */
#define H5FL_REC_KNOWN (H5FL_REC_FILL | H5FL_REC_COMMIT | H5FL_REC_DCRC | H5FL_REC_FILTER)
#define H5FL_FILL_LOG UINT32_MAX /* extent "log" of a range that reads as the fill value */
#define H5FL_REC_HDR 56u /* magic,len | epoch,order,data_off,nbytes,nruns | rank,flags; [dcrc ext]; dims, runs, crc */
#define H5FL_REC_DCRC_EXT 16u /* with H5FL_REC_DCRC: u64 crc_start, u32 dcrc, u32 0 after the header */
#define H5FL_REC_FILTER_EXT 16u /* with H5FL_REC_FILTER: u64 raw, u32 fmask, u32 0 (after the dcrc ext) */
#define H5FL_COMMIT_SIZE (H5FL_REC_HDR + 4u)
/* Bytes of a record with this rank, number of runs and flags. */
size_t h5fl_record_size(unsigned rank, uint64_t nruns, uint32_t flags);
/* Encode a record header; the caller writes the runs at out + header size and then calls seal. */
size_t h5fl_record_begin(uint8_t *out, const h5fl_record_t *r);
void h5fl_record_seal(uint8_t *rec, size_t total);
/* Parse the record at buf[0..avail). Returns bytes consumed, 0 at an incomplete record, or -1 for a
 * complete record that fails its checksum or is malformed (error recorded). */
ssize_t h5fl_record_parse(const uint8_t *buf, size_t avail, h5fl_record_t *r);
/* The next record of an index log buf[0..len) at byte pos: bytes consumed, 0 at the end of the log or at
 * a torn tail (an incomplete record after the last commit record: a writer died while appending), -1
 * for corruption (error recorded: what and at which byte): a record that fails its checks, or one that
 * looks incomplete although a commit record after it proves it was written completely. */
ssize_t h5fl_index_next(const uint8_t *buf, size_t len, size_t pos, h5fl_record_t *r);
/* Encode the commit record of a log whose index ends at byte `at` and data log at byte `dend`. */
void h5fl_commit_record(uint8_t out[H5FL_COMMIT_SIZE], h5fl_seq_t seq, uint64_t at, uint64_t dend);

/* ---------------------------------------------------------------- objects (vol_*.c) */
typedef struct h5fl_file h5fl_file_t;
typedef struct h5fl_dset h5fl_dset_t;

struct h5fl_file;
typedef struct h5fl_obj {
    H5I_type_t type; /* H5I_FILE, H5I_GROUP, H5I_DATASET, H5I_ATTR */
    int rc;
    h5fl_file_t *file;
    char *path; /* HDF5 absolute path ("/" for the root) */
    char *dir;  /* file-system directory of the object (of the owner object, for attributes) */
    bool anon;  /* created anonymously (H5Dcreate_anon), not linked yet: lives under @anon.* */
    /* registry.c: the process's open objects; datasets and attributes are keyed by the device and inode
     * of their directory (of the owner's, for attributes) */
    struct h5fl_obj *reg_prev, *reg_next;
    bool in_reg;
    bool gone; /* its link was deleted while it was open: it lives on, unnamed, until closed */
    dev_t dev;
    ino_t ino;
} h5fl_obj_t;

/* ---------------------------------------------------------------- open objects (registry.c) */
void h5fl_reg_add(h5fl_obj_t *o); /* records the identity of o->dir */
void h5fl_reg_remove(h5fl_obj_t *o);
/* Whether p is one of this process's open h5flow_log objects (compares pointers only). */
bool h5fl_reg_holds(const void *p);
h5fl_obj_t *h5fl_reg_next(h5fl_obj_t *o); /* iteration: NULL gives the first */
/* The open object of `type` whose directory is the one `dir` names now (and that `match` accepts). */
h5fl_obj_t *h5fl_reg_find(H5I_type_t type, const char *dir, bool (*match)(const h5fl_obj_t *, const void *),
                          const void *arg);
/* An open file handle on the container directory `dir` (NULL if none). */
struct h5fl_file *h5fl_reg_find_file(const char *dir);
/* An open serial file handle on `dir` that writes (intent read-write; NULL if none). */
struct h5fl_file *h5fl_reg_find_serial_writer(const char *dir);
/* The link at container-relative directory `from_rel` (HDF5 path `from_path`) now lives at `to_rel`
 * (`to_path`; NULL: deleted, the objects become unnamed): rewrite every open object of container
 * `fileno` at or under it. */
int h5fl_reg_moved(unsigned long fileno, const char *from_rel, const char *to_rel, const char *from_path,
                   const char *to_path);
/* Whether an object of container `fileno` at or under `rel` is open in this process. */
bool h5fl_reg_busy(unsigned long fileno, const char *rel);

struct h5fl_file {
    h5fl_obj_t o;   /* the root group; o.type == H5I_FILE */
    int handles;    /* open file ids */
    char *name;     /* name as given to H5Fcreate/H5Fopen */
    char *memdir;   /* the core driver without a backing store: the private directory holding it, or NULL */
    unsigned intent;
    hid_t fapl, fcpl;
    MPI_Comm comm; /* MPI_COMM_NULL when serial */
    int rank, size;
    uint64_t epoch;
    bool fsync; /* H5FLOW_LOG_FSYNC=1: fdatasync logs at flush/close and fsync metadata files */
    bool verify; /* data checksums checked on read (default; H5FLOW_LOG_VERIFY=0 turns it off) */
    uint64_t anon_counter; /* advances identically on every rank (creation is collective) */
    uint64_t gone_counter; /* likewise, for H5Ldelete */
    uint64_t ref_minted;   /* object ids minted by this open (refs.c) */
    uint64_t create_counter; /* rank 0: names of this open's private creation directories (util.c) */
    unsigned long fileno;
    /* A second writable open of a container this process already writes (serial) writes in the first
     * open's epoch, so that writes through either handle order as they were made (a new epoch would put
     * every write of the second handle after every write of the first, later ones included). Names and
     * ids that carry the epoch then come from the first open's counters: this points to it (held), NULL
     * when the counters are this open's own. h5fl_epoch_owner(f) is the open whose counters to use. */
    struct h5fl_file *epoch_of;
};

static inline h5fl_file_t *h5fl_epoch_owner(h5fl_file_t *f) { return f->epoch_of ? f->epoch_of : f; }

/* ---------------------------------------------------------------- creating a name (util.c)
 * Every new link appears at its name complete, by one rename(2) of a directory built privately
 * (docs/FORMAT.md "Creating a name"): exactly one of two processes creating the same name wins. */
/* A new, empty private directory at the container root (@tmp.new.<epoch>.<n>), malloc'd; NULL with an
 * error recorded. */
char *h5fl_create_tmp(h5fl_file_t *f);
/* Rename the directory `tmp` (complete, holding its marker file) to `dir`. A directory at `dir` without
 * any marker (a creation that died half-way, before this protocol) is emptied and replaced. Returns 0;
 * H5FL_CREATE_EXISTS (no error recorded) when a link named `dir` exists already; -1 with an error recorded
 * naming `what` and `path`. `tmp` is removed whenever the rename did not happen. */
#define H5FL_CREATE_EXISTS 1
int h5fl_create_publish(const char *tmp, const char *dir, const char *what, const char *path);
/* The same, recording "cannot create <what> '<path>': a link with this name already exists" for
 * H5FL_CREATE_EXISTS (returns 0 or -1). */
int h5fl_create_publish_new(const char *tmp, const char *dir, const char *what, const char *path);
/* Rename the complete object directory `src` (an anonymous object) to `dir` as h5fl_create_publish_new
 * does, but `src` stays where it is when that fails. Returns 0, or -1 with an error recorded. */
int h5fl_name_publish(const char *src, const char *dir, const char *what, const char *path);
/* Remove a private creation directory that will not be published (keeps the recorded error). */
void h5fl_create_abandon(const char *tmp);
/* Whether `dir` is an anonymous object's directory of the container at `root` (@anon.* at the root). */
bool h5fl_is_anon_dir(const char *root, const char *dir);

typedef struct h5fl_log {
    char *path; /* data log */
    int fd;
    uint8_t *map;
    size_t mapsize;
    /* A filtered write (H5FL_REC_FILTER) is a log of its own in the index: its bytes [foff, foff+flen) of
     * log `src`, decoded at the first read that touches it into map (mapsize = raw bytes; fd -1). */
    bool filtered;
    uint32_t src, fmask;
    uint64_t foff, flen, raw;
} h5fl_log_t;

typedef struct h5fl_writer {
    int dfd, ifd;
    uint64_t dend, iend; /* file sizes reached by pwrite */
    /* File space secured (fallocate, FALLOC_FL_KEEP_SIZE) up to these offsets: every byte a write has
     * been acknowledged for lies below them, so flushing the buffers cannot fail for lack of space. */
    uint64_t dres, ires;
    bool through; /* the file system cannot reserve space: every write is flushed before it returns */
    uint8_t *dbuf, *ibuf;
    size_t dlen, dcap, ilen, icap;
    uint64_t counter;
    uint32_t id;
    uint64_t epoch;
    bool dirty_sync; /* written since the last fsync */
    uint64_t committed; /* index log bytes covered by the last commit record (0: none yet) */
    uint32_t crc;       /* CRC32C of the data appended since the last checksummed record ... */
    uint64_t crc_start, crc_len; /* ... which starts at this data log offset and is this long */
    char *dpath, *ipath;
    char *dname; /* the dataset's HDF5 path, for error messages */
    struct h5fl_stats_w *stats; /* per-write statistics sidecar (stats.c), NULL if none */
} h5fl_writer_t;

/* A write whose data carries a checksum (H5FL_REC_DCRC), checked the first time a read touches it. */
typedef struct h5fl_crcrec {
    uint64_t from, to; /* data log bytes [from, to) */
    uint64_t ipos;     /* byte offset of the record in its index log (for the error message) */
    uint32_t log, crc;
    bool checked;
} h5fl_crcrec_t;

typedef struct h5fl_index {
    h5fl_log_t *logs;
    size_t nlogs, caplogs; /* filtered writes add one each (h5fl_log_t.filtered): capacity doubles */
    h5fl_crcrec_t *recs;
    size_t nrecs, caprecs;
    h5fl_map_t map;
    h5fl_extent_t *pending; /* own writes since the map was built */
    size_t npending, cappending;
    int own_log; /* index of this process's data log in logs, -1 if none yet */
    struct h5fl_base *base; /* the restructured contents under the logs (restructure.c), NULL if none */
    uint64_t max_epoch;     /* the latest epoch of the logs loaded */
    struct h5fl_cview *cview; /* the chunk view built from this index (dset_chunk.c), NULL if none */
} h5fl_index_t;
void h5fl_cview_free(struct h5fl_cview *cv); /* dset_chunk.c */

struct h5fl_dset {
    h5fl_obj_t o;
    hid_t type, space, dcpl, dapl;
    size_t esize; /* bytes per element in the data log (16 for variable-length strings) */
    bool vstr;    /* variable-length strings: the log holds the bytes, then (offset, length) pairs */
    bool blob;    /* variable-length sequences or members: like vstr, the bytes are each element's
                   * encoding (blob.c); tsize: bytes of one element in memory */
    size_t tsize;
    bool filtered; /* the creation list has filters: every write is filtered (filter.c, H5FL_REC_FILTER) */
    H5MM_allocate_t valloc; /* during a read: the transfer list's allocator (see h5fl_blob_ctx_t) */
    void *valloc_info;
    uint8_t *fill;
    char *vfill;  /* variable-length strings: the fill value (NULL: none defined, reads as "") */
    h5fl_writer_t *w;
    h5fl_index_t *ix;
    uint64_t min_counter; /* after a collective shrink: later writes order after its fill record */
    /* HDF5 closed its last handle but the final flush failed: it stays in the registry, holding the
     * writer and its unwritten buffers, is flushed again at every H5Fflush and file close of its
     * container, and released (dset_free) by the first that succeeds; opening it again revives it. */
    bool closed;
    bool vds; /* a virtual dataset (H5D_VIRTUAL): no logs, reads and writes go to its sources (vds.c) */
    struct h5fl_ext *ext; /* external storage (H5Pset_external): no logs, the data is in those files (extfile.c) */
};

/* External storage (extfile.c). */
int h5fl_ext_check(hid_t type, hid_t space, hid_t dcpl, const char *name); /* at creation */
int h5fl_ext_setup(h5fl_dset_t *d); /* d->ext from the creation list, names resolved (access list's prefix) */
/* At a dataset's open while another handle of it is open: -1 with an error when the external file prefix
 * `dapl` gives differs from the dataset's (native HDF5 refuses such an open too). */
int h5fl_ext_check_dapl(h5fl_dset_t *d, hid_t dapl);
void h5fl_ext_free(h5fl_dset_t *d);
/* Bytes [pos, pos+len) of the dataset's external address space (row-major elements) to or from buf. */
int h5fl_ext_io(h5fl_dset_t *d, uint64_t pos, uint64_t len, uint8_t *buf, bool write);

typedef struct h5fl_attr {
    h5fl_obj_t o;
    char *name;
    hid_t type, space;
    uint8_t *data; /* fixed types: npoints*size bytes; vlen strings: char*[npoints] */
    size_t npoints;
    bool vlen_str;
    bool blob;   /* variable-length sequences or members (blob.c): data is the encoding, blen bytes */
    bool has_dtype;    /* created with a committed datatype of its container: */
    uint64_t dtype_id; /* that type's reference id (vol_datatype.c) */
    size_t blen;
    bool utf8; /* name character set from the creation property list */
} h5fl_attr_t;

/* Cross-container object copy of one attribute file `fname` of `sdir` into `ddir` (the copy's directory):
 * object references become NULL, as native H5Ocopy makes them (keep_refs: kept, for copy.c to map them to the
 * copies of their objects); the committed type's id is dropped. */
int h5fl_attr_copy_across(h5fl_file_t *sf, const char *sdir, const char *spath, h5fl_file_t *df, const char *ddir,
                          const char *dpath, const char *fname, bool keep_refs);
/* Object copy (copy.c), H5O_COPY_EXPAND_REFERENCE_FLAG: every non-NULL object reference held by attribute
 * file `fname` of `dir` (object `path`) replaced by map(ctx, &id), and the attribute stored again; map NULL:
 * an attribute of a reference type holds NULL references after (native's copy without the flag). Other
 * attributes untouched. */
int h5fl_attr_map_refs(h5fl_file_t *f, const char *dir, const char *path, const char *fname,
                       int (*map)(void *ctx, uint64_t *id), void *ctx);

/* util for objects (vol_file.c) */
void h5fl_obj_init(h5fl_obj_t *o, H5I_type_t type, h5fl_file_t *f, const char *path, const char *dir);
void h5fl_obj_release(h5fl_obj_t *o); /* drop the object's reference on its file */
void h5fl_file_decref(h5fl_file_t *f);
bool h5fl_writable(const h5fl_file_t *f);
/* Run `op` on rank 0 only (or locally when serial) and make its status (and message) collective. */
int h5fl_collective(h5fl_file_t *f, int local_status);
/* Wait for a non-blocking MPI operation, yielding the processor between tests. A rank waiting in a
 * blocking collective busy-polls (MPICH), so when ranks outnumber cores every collective round trip costs
 * scheduler time slices (measured: 8 ms for a barrier + broadcast with 4 ranks on 2 cores, 0.1 ms with
 * this wait); with a core per rank sched_yield returns at once and this is MPI_Wait. */
void h5fl_mpi_wait(MPI_Request *req);
/* Start of a collective change: no rank may still be reading the state before it (a barrier), so that
 * independent queries between two collective calls (H5Aexists, H5Lexists, ...) agree on every rank. */
void h5fl_collective_begin(h5fl_file_t *f);
int h5fl_file_flush(h5fl_file_t *f, bool sync);

/* Path resolution (vol_group.c). */
typedef struct h5fl_loc {
    char *dir;  /* file-system directory */
    char *path; /* HDF5 path */
    H5I_type_t type; /* H5I_GROUP or H5I_DATASET, H5I_BADID if it does not exist */
    char *ldir; /* the last name is a hard link stub (hardlinks.c): its directory (dir is the object's), else NULL */
    struct h5fl_file *file; /* reached through an external link: that container (a reference), else NULL */
} h5fl_loc_t;
void h5fl_loc_free(h5fl_loc_t *l);
H5I_type_t h5fl_dir_type(const char *dir, bool is_root);
/* Resolve `name` (HDF5 path rules: absolute or relative, empty and "." components skipped) relative to
 * object `o`. A missing object gives type H5I_BADID and success. */
int h5fl_resolve(const h5fl_obj_t *o, const char *name, h5fl_loc_t *out);
/* Resolve all but the last component of `name` into `parent` and return the last one escaped in `leaf`
 * and verbatim in *leafname (malloc'd). Modes: H5FL_CHECK (parents must exist), H5FL_MKPARENTS (create
 * missing intermediate groups), H5FL_COMPUTE (only compute names: ranks that do not touch the disk). */
enum { H5FL_CHECK, H5FL_MKPARENTS, H5FL_COMPUTE };
int h5fl_resolve_parent(const h5fl_obj_t *o, const char *name, int mode, h5fl_loc_t *parent, char *leaf,
                        size_t leafsz, char **leafname);
int h5fl_loc_from_params(const h5fl_obj_t *o, const H5VL_loc_params_t *lp, h5fl_loc_t *out);
/* As h5fl_loc_from_params; with !follow a soft link named last is not followed (type H5FL_I_SOFT). */
int h5fl_loc_from_params2(const h5fl_obj_t *o, const H5VL_loc_params_t *lp, h5fl_loc_t *out, bool follow);
int h5fl_resolve_link(const h5fl_obj_t *o, const char *name, h5fl_loc_t *out);

/* Links (links.c). */
extern hid_t h5fl_cur_lapl; /* the link access list of the resolution in progress (H5P_DEFAULT: none) */
/* The value of the external link at `dir` (H5Lcreate_external's encoding, as H5Lget_val returns it). */
int h5fl_extlink_read(const char *dir, void **buf, size_t *len);
/* Rank 0: write the external link value into the (private, new) directory `dir` (util.c publishes it). */
int h5fl_extlink_create(const char *dir, const char *path, const void *buf, size_t len, bool sync);
/* Open (or find open) the container an external link at `dir` of file `f` names; *obj_path is its object
 * path (malloc'd). Returns a reference the caller drops with h5fl_file_decref. */
h5fl_file_t *h5fl_extlink_open(h5fl_file_t *f, const char *dir, char **obj_path);
char *h5fl_softlink_read(const char *dir); /* the target of the soft link at `dir` (malloc'd) */
/* Rank 0: write the soft link `target` into the (private, new) directory `dir` (util.c publishes it). */
int h5fl_softlink_create(const char *dir, const char *path, const char *target, bool sync);
/* A decimal counter file `name` in `dir` (creation order counters, @crt, @nlink; links.c): 0 or -1 with the
 * error set (a missing or damaged file). */
int h5fl_read_u64(const char *dir, const char *name, uint64_t *v);
int h5fl_write_u64(const char *dir, const char *name, uint64_t v, bool sync);
/* A growing set of 64-bit values (ids, inodes): small, searched linearly (hardlinks.c). */
typedef struct h5fl_ids {
    uint64_t *v;
    size_t n, cap;
} h5fl_ids_t;
int h5fl_ids_add(h5fl_ids_t *l, uint64_t id);
bool h5fl_ids_has(const h5fl_ids_t *l, uint64_t id);
/* Hard links (hardlinks.c). The id in the stub `stubdir`: 0, or -1 with an error recorded. */
int h5fl_hard_read(const char *stubdir, uint64_t *id);
/* The store directory of object `id` of the container at `root` (malloc'd). */
char *h5fl_hard_store_dir(const char *root, uint64_t id);
/* Rank 0: the object store @objects/ exists and the marker says the format that has it. */
int h5fl_hard_store_ready(h5fl_file_t *f);
/* `*dir` (of type *t) is a stub: replace it by its object's directory in the store of container `root` and
 * *t by the object's type (H5I_BADID if the object is missing); *ldir receives the stub's directory when
 * ldir is not NULL (else it is freed). Nothing is done for other types. */
int h5fl_hard_follow(const char *root, char **dir, H5I_type_t *t, char **ldir);
/* Write the stub file of a hard link to object `id` into the (new) directory `dir`. */
int h5fl_hard_write_stub(const char *dir, uint64_t id, bool sync);
/* The link count of the object at `dir` (1 outside the store). */
unsigned h5fl_hard_nlink(const char *dir);
/* Collective (every rank): give the object `target` (a location in f) a new hard link `name` (lp) at `o`. */
int h5fl_hard_create(h5fl_obj_t *o, const H5VL_loc_params_t *lp, const h5fl_loc_t *target, hid_t lcpl);
/* Collective: give the anonymous object at `target` (its @anon.* directory) its first name (lp at `o`): one
 * rename; every open handle of it follows (vol_link.c; h5fl_hard_create calls it for such targets). */
int h5fl_anon_link(h5fl_obj_t *o, const H5VL_loc_params_t *lp, const h5fl_loc_t *target, hid_t lcpl);
/* Collective: H5Oincr_refcount/H5Odecr_refcount of open object `o` (its @nlink; moved into the store by an
 * increment, so that its count keeps it when its names are deleted; never below 1). */
int h5fl_hard_adjust(h5fl_obj_t *o, int delta);
/* Rank 0: the ids of the stubs at or under `dir` (not following them); *ids malloc'd. */
int h5fl_hard_collect(const char *dir, uint64_t **ids, size_t *n);
/* Rank 0: drop one link of each object `ids` names (a stub of it was removed); an object left without
 * links is deleted: renamed to @gone.hl.<id> (removed by the next writable open). */
int h5fl_hard_unref(h5fl_file_t *f, const uint64_t *ids, size_t n);
/* Every rank, after h5fl_hard_unref: open objects whose object was deleted become unnamed (@gone.hl.*). */
int h5fl_hard_sweep(h5fl_file_t *f);
/* Rank 0: the marker says format H5FL_FORMAT_VERSION (vol_file.c). */
int h5fl_marker_upgrade(h5fl_file_t *f);
/* Visit every object at or under `dir` once (following hard links, each object once; cycle-safe): `cb`
 * returns 0 to go on, 1 to stop (returned), -1 on error. */
typedef int (*h5fl_tree_cb)(const char *dir, const char *path, H5I_type_t t, void *arg);
int h5fl_tree_walk(const char *root, const char *dir, const char *path, h5fl_tree_cb cb, void *arg);
/* Creation order (links.c). What `ocpl` asks to track (links, attributes). */
int h5fl_crt_flags(hid_t ocpl, unsigned *links, unsigned *attrs); /* H5P_CRT_ORDER_* flags, 0: not tracked */
int h5fl_corder_enable(const char *dir, unsigned links, unsigned attrs, bool sync); /* rank 0, at creation */
unsigned h5fl_corder_flags(const char *dir, bool attrs); /* the H5P_CRT_ORDER_* flags given at creation */
bool h5fl_corder_tracked(const char *dir, bool attrs);
uint64_t h5fl_corder_next(const char *dir, bool attrs); /* the next order to give (0 if not tracked) */
/* Rank 0: give the new link `child_dir` of group `gdir` the next order (nothing if not tracked). */
int h5fl_corder_assign(const char *gdir, const char *child_dir, bool sync);
uint64_t h5fl_corder_of(const char *child_dir);
/* Rank 0, after the link at `link_dir` was deleted or moved away: its group's order restarts at 0 when the
 * group has no link left (as native HDF5). */
int h5fl_corder_reset_if_empty(const char *link_dir, bool sync);
int h5fl_acorder_assign(const char *odir, const char *name, bool sync);
int h5fl_acorder_drop(const char *odir, const char *name);
int h5fl_acorder_rename(const char *odir, const char *from, const char *to);
int64_t h5fl_acorder_of(const char *odir, const char *name); /* -1: not tracked */
/* Reorder `names` (links of group `dir`, or attributes of object `dir`) by creation order; an error if
 * `dir` does not track it (as native HDF5). */
int h5fl_corder_sort(const char *dir, h5fl_names_t *names, bool attrs);
/* Object copy (copy.c). */
herr_t h5fl_object_copy(void *, const H5VL_loc_params_t *, const char *, void *, const H5VL_loc_params_t *,
                        const char *, hid_t, hid_t, hid_t, void **);
void *h5fl_open_loc(h5fl_file_t *f, const h5fl_loc_t *loc, H5I_type_t *opened_type);
int h5fl_make_group_dir(const char *dir, bool sync);
/* The directory of the next anonymous object of f (@anon.<epoch>.<n>; every rank counts alike), malloc'd. */
char *h5fl_anon_dir(h5fl_file_t *f);
void h5fl_token_of(const char *dir, H5O_token_t *tok);
unsigned long h5fl_objno(const char *dir);

/* Object references (refs.c): the token of a reference is the object's persistent id, minted on first
 * use (tokens with the top bit set); h5fl_ref_resolve finds the one object holding it, or fails. */
bool h5fl_ref_is_id(const H5O_token_t *tok);
int h5fl_ref_token(h5fl_file_t *f, const char *dir, const char *path, H5O_token_t *tok);
int h5fl_ref_resolve(h5fl_file_t *f, const H5O_token_t *tok, h5fl_loc_t *out);
/* The id an object already has (dir/@id), minting none: 1 and *id, 0 if it has none, -1 (damaged). */
int h5fl_ref_read_id(const char *dir, uint64_t *id);
/* The datasets and attributes of f created with the committed datatype at `dir` (vol_datatype.c): what
 * native HDF5 adds to a committed datatype's reference count beside its names. */
unsigned h5fl_datatype_uses(h5fl_file_t *f, const char *dir);
/* How many attributes of the object at `dir` were created with the committed datatype `id` (vol_attr.c). */
unsigned h5fl_attr_dtype_uses(const char *dir, uint64_t id);
/* The persistent id of the object at `dir`, minted if it has none (refs.c). */
int h5fl_ref_object_id(h5fl_file_t *f, const char *dir, const char *path, uint64_t *id);
/* 0 if `type` holds no references or only H5T_STD_REF_OBJ ones; else -1 with an error naming the
 * object (`what` "dataset"/"attribute", `name`). */
int h5fl_check_ref_types(hid_t type, const char *what, const char *name);
/* 0, or -1 with an HDF5 error when converting `from` to `to` would change a reference's kind
 * (H5T_STD_REF_OBJ <-> H5T_STD_REF), which HDF5 cannot do without a native file (it crashes). */
int h5fl_check_ref_conversion(hid_t from, hid_t to, const char *what, const char *name);
/* H5Tconvert of n elements in place, except the one conversion HDF5 cannot do for a connector: one object
 * reference per element between H5T_STD_REF_OBJ (hobj_ref_t) and H5T_STD_REF (H5R_ref_t of f's
 * container), done here (refs.c). 0, or -1 (an error recorded for the references' part). */
int h5fl_convert(h5fl_file_t *f, hid_t from, hid_t to, size_t n, void *buf, void *bkg, hid_t dxpl);
/* The VOL blob class (refs.c): 8-byte blob ids, blobs stored in @blobs/ at the container's root. */
herr_t h5fl_blob_put(void *obj, const void *buf, size_t size, void *blob_id, void *ctx);
herr_t h5fl_blob_get(void *obj, const void *blob_id, void *buf, size_t size, void *ctx);
herr_t h5fl_blob_specific(void *obj, void *blob_id, H5VL_blob_specific_args_t *args);

/* Values with variable-length parts, one byte string per element (blob.c; docs/FORMAT.md). */
typedef struct h5fl_buf {
    uint8_t *p;
    size_t len, cap;
} h5fl_buf_t;
/* The container references (H5T_STD_REF) are encoded for; end it with h5fl_blob_ctx_end. */
typedef struct h5fl_blob_ctx {
    h5fl_file_t *f;
    H5MM_allocate_t alloc; /* the transfer list's variable-length allocator (H5Pset_vlen_mem_manager), */
    void *alloc_info;      /* NULL: malloc */
    H5R_ref_t tmpl;
    bool have_tmpl;
} h5fl_blob_ctx_t;
bool h5fl_blob_type(hid_t type);
int h5fl_blob_encode(h5fl_blob_ctx_t *ctx, hid_t type, const void *elem, h5fl_buf_t *out);
/* Decode one element at *pp (advanced) into elem (memory layout of `type`; malloc'd parts, freed by
 * H5Treclaim). On failure the parts decoded so far stay in elem: reclaim it. */
int h5fl_blob_decode(h5fl_blob_ctx_t *ctx, hid_t type, const uint8_t **pp, const uint8_t *end, void *elem);
void h5fl_blob_ctx_end(h5fl_blob_ctx_t *ctx);
/* An H5R_ref_t of the context's container naming the object whose token is `tok` (all zero: the null
 * reference, a zeroed H5R_ref_t); destroy it with H5Rdestroy. 0 or -1. */
int h5fl_blob_ref_make(h5fl_blob_ctx_t *ctx, const uint8_t tok[8], H5R_ref_t *r);
/* The token of an H5R_ref_t: 1 (an object reference of the context's container), 0 (the null reference:
 * a zeroed H5R_ref_t; tok all zero) or -1 (another kind, another file: error recorded). */
int h5fl_blob_ref_take(h5fl_blob_ctx_t *ctx, const H5R_ref_t *r, uint8_t tok[8]);
/* 0 if the reference's file is the context's container, else -1 (error recorded). */
int h5fl_blob_same_container(h5fl_blob_ctx_t *ctx, const H5R_ref_t *r);
void h5fl_blob_ctx_set_alloc(h5fl_blob_ctx_t *ctx, hid_t dxpl); /* H5Pget_vlen_mem_manager of dxpl */
/* Convert n packed values with variable-length parts from `from` to `to` in buf (sized for the larger of
 * the two), with HDF5's conversion and the variable-length allocator of dxpl; bkg: the caller's values of
 * `to` for the members `from` lacks, or NULL. Reading (writing false): buf holds values decoded from the
 * container, released once converted. Writing: every member of `to` must be in `from` (a write replaces
 * whole values); the caller reclaims the converted values. References inside are refused. 0 or -1. */
int h5fl_blob_convert(hid_t from, hid_t to, size_t n, void *buf, void *bkg, hid_t dxpl, bool writing,
                      const char *what, const char *name);
/* H5Treclaim of n packed values of `type` in buf with dxpl's variable-length allocator. */
void h5fl_blob_reclaim(hid_t type, size_t n, hid_t dxpl, void *buf);
hid_t h5fl_blob_memtype(hid_t decoded); /* the memory type equal to the one that was encoded */

/* Filters (filter.c; docs/FORMAT.md "Filters"). */
bool h5fl_filtered(hid_t dcpl); /* the creation list has filters */
/* At creation: check every filter of `dcpl` is available and applies to `type` and the chunk shape, and
 * let it set its parameters in `dcpl` (can_apply, set_local, as HDF5 does). */
int h5fl_filter_prepare(hid_t dcpl, hid_t type, const char *dname);
/* Run the pipeline of `dcpl` over *buf (*nbytes used of *bufsize, allocated with H5allocate_memory; the
 * filters may replace it) forward, or with `reverse` backwards; *mask: filters skipped (set by a forward
 * run for optional filters that failed, obeyed by a reverse run). */
int h5fl_filter_run(hid_t dcpl, bool reverse, unsigned *mask, void **buf, size_t *nbytes, size_t *bufsize,
                    uint64_t nelem, const char *dname); /* nelem: elements in the extent */

/* Callbacks, one group per translation unit. */
void *h5fl_file_create(const char *, unsigned, hid_t, hid_t, hid_t, void **);
void *h5fl_file_open(const char *, unsigned, hid_t, hid_t, void **);
herr_t h5fl_file_get(void *, H5VL_file_get_args_t *, hid_t, void **);
herr_t h5fl_file_specific(void *, H5VL_file_specific_args_t *, hid_t, void **);
herr_t h5fl_file_close(void *, hid_t, void **);
herr_t h5fl_file_optional(void *, H5VL_optional_args_t *, hid_t, void **); /* copy.c: H5Fget_filesize */

void *h5fl_group_create(void *, const H5VL_loc_params_t *, const char *, hid_t, hid_t, hid_t, hid_t, void **);
void *h5fl_group_open(void *, const H5VL_loc_params_t *, const char *, hid_t, hid_t, void **);
herr_t h5fl_group_get(void *, H5VL_group_get_args_t *, hid_t, void **);
herr_t h5fl_group_specific(void *, H5VL_group_specific_args_t *, hid_t, void **);
herr_t h5fl_group_optional(void *, H5VL_optional_args_t *, hid_t, void **);
herr_t h5fl_group_close(void *, hid_t, void **);

void *h5fl_dataset_create(void *, const H5VL_loc_params_t *, const char *, hid_t, hid_t, hid_t, hid_t,
                          hid_t, hid_t, void **);
void *h5fl_dataset_open(void *, const H5VL_loc_params_t *, const char *, hid_t, hid_t, void **);
herr_t h5fl_dataset_read(size_t, void *[], hid_t[], hid_t[], hid_t[], hid_t, void *[], void **);
herr_t h5fl_dataset_write(size_t, void *[], hid_t[], hid_t[], hid_t[], hid_t, const void *[], void **);
herr_t h5fl_dataset_get(void *, H5VL_dataset_get_args_t *, hid_t, void **);
herr_t h5fl_dataset_specific(void *, H5VL_dataset_specific_args_t *, hid_t, void **);
herr_t h5fl_dataset_close(void *, hid_t, void **);
int h5fl_dset_flush(h5fl_dset_t *d, bool sync);
/* A handle HDF5 closed while its flush failed (d->closed): flush it again; on success free it (0). */
int h5fl_dset_release_closed(h5fl_dset_t *d);
/* Drop the merged index: the next read rebuilds it from every writer's logs as they are now. */
void h5fl_dset_forget_index(h5fl_dset_t *d);
/* The dataset's directory changed (a move of it or of a group above it): follow it. */
int h5fl_dset_moved(h5fl_dset_t *d);
void *h5fl_dset_open_dir(h5fl_file_t *f, const char *dir, const char *path);

void *h5fl_attr_create(void *, const H5VL_loc_params_t *, const char *, hid_t, hid_t, hid_t, hid_t, hid_t,
                       void **);
void *h5fl_attr_open(void *, const H5VL_loc_params_t *, const char *, hid_t, hid_t, void **);
herr_t h5fl_attr_read(void *, hid_t, void *, hid_t, void **);
herr_t h5fl_attr_write(void *, hid_t, const void *, hid_t, void **);
herr_t h5fl_attr_get(void *, H5VL_attr_get_args_t *, hid_t, void **);
herr_t h5fl_attr_specific(void *, const H5VL_loc_params_t *, H5VL_attr_specific_args_t *, hid_t, void **);
herr_t h5fl_attr_close(void *, hid_t, void **);

herr_t h5fl_link_create(H5VL_link_create_args_t *, void *, const H5VL_loc_params_t *, hid_t, hid_t, hid_t,
                        void **);
herr_t h5fl_link_copy(void *, const H5VL_loc_params_t *, void *, const H5VL_loc_params_t *, hid_t, hid_t, hid_t,
                      void **);
herr_t h5fl_link_move(void *, const H5VL_loc_params_t *, void *, const H5VL_loc_params_t *, hid_t, hid_t,
                      hid_t, void **);
herr_t h5fl_link_get(void *, const H5VL_loc_params_t *, H5VL_link_get_args_t *, hid_t, void **);
herr_t h5fl_link_specific(void *, const H5VL_loc_params_t *, H5VL_link_specific_args_t *, hid_t, void **);

void *h5fl_object_open(void *, const H5VL_loc_params_t *, H5I_type_t *, hid_t, void **);
herr_t h5fl_object_get(void *, const H5VL_loc_params_t *, H5VL_object_get_args_t *, hid_t, void **);
herr_t h5fl_object_specific(void *, const H5VL_loc_params_t *, H5VL_object_specific_args_t *, hid_t,
                            void **);
herr_t h5fl_object_optional(void *, const H5VL_loc_params_t *, H5VL_optional_args_t *, hid_t, void **);
int h5fl_fill_oinfo(h5fl_file_t *f, const char *dir, H5I_type_t type, unsigned fields, H5O_info2_t *oi);
hid_t h5fl_register_for_callback(h5fl_file_t *f, const h5fl_loc_t *loc);
int h5fl_visit_objects(h5fl_obj_t *o, const h5fl_loc_t *loc, H5_iter_order_t order, unsigned fields,
                       H5O_iterate2_t op, void *op_data, bool crt);

/* Committed datatypes (vol_datatype.c). */
void *h5fl_datatype_commit(void *, const H5VL_loc_params_t *, const char *, hid_t, hid_t, hid_t, hid_t, hid_t,
                           void **);
void *h5fl_datatype_open(void *, const H5VL_loc_params_t *, const char *, hid_t, hid_t, void **);
herr_t h5fl_datatype_get(void *, H5VL_datatype_get_args_t *, hid_t, void **);
herr_t h5fl_datatype_specific(void *, H5VL_datatype_specific_args_t *, hid_t, void **);
herr_t h5fl_datatype_close(void *, hid_t, void **);
void *h5fl_datatype_open_dir(h5fl_file_t *f, const char *dir, const char *path);
int h5fl_datatype_note_use(h5fl_file_t *f, hid_t type, const char *objdir);
/* The committed type an object was created with, if it is still linked and equal to `stored` (the
 * object's own type); -1: none, hand out a copy of `stored`. */
hid_t h5fl_datatype_reopen(h5fl_file_t *f, const char *objdir, hid_t stored);
int h5fl_datatype_use_id(h5fl_file_t *f, hid_t type, uint64_t *id); /* 1: a committed type of f, id set */
hid_t h5fl_datatype_reopen_id(h5fl_file_t *f, uint64_t id, hid_t stored);

extern const H5VL_class_t h5fl_class;

/* The native fallback (native.c; docs/FORMAT.md "Native HDF5 files through h5flow_log"). */
/* The class HDF5 registers: `containers` (h5fl_class) for containers, the native connector underneath for
 * native HDF5 files and for drivers a container cannot live in. */
const H5VL_class_t *h5fl_nat_class(const H5VL_class_t *containers);
bool h5fl_nat_is(const void *obj);     /* an object a callback got is of a native file (not a container's) */
/* An id whose object is of a native file (H5VLobject of it is then native HDF5's own object). */
bool h5fl_nat_id(hid_t id);
bool h5fl_nat_driver(hid_t fapl);      /* the file access list's driver cannot hold a container */
bool h5fl_nat_file(const char *name);  /* a regular file with HDF5's signature */
/* The container dataset of a dataset id; NULL with an error recorded for any other id (a native file's
 * dataset included). */
h5fl_dset_t *h5fl_container_dset(hid_t dset);
/* Path resolution reached an external link into a native HDF5 file (links.c, vol_group.c): the file, the
 * object's path in it (components appended one by one) and the intent, for the calling thread's current
 * callback to open the object natively. */
void h5fl_nat_detour_set(const char *file, const char *path, unsigned intent);
void h5fl_nat_detour_append(const char *component);

#endif
