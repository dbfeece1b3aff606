/* libh5flow: a C producer of the hdf5 transport's staging protocol (docs/STREAM.md, format version 1).
 *
 * The same files, in the same order, as src/h5flow/transports/hdf5/{staging,writer}.py and the Python
 * high-level API (api.py: each array a mesh of one cell array, each piece one image block, block ids in
 * rank order): the owner claim (flock), stream.json, the index (P/D/E/X lines, one O_APPEND write each),
 * heartbeats (a thread instead of the helper process: no GIL here), step-N/ published by rename, the queue
 * (queue_limit, quota, block/discard), garbage collection, the reservation of a step's room on disk.
 *
 * This file holds the public calls of h5flow.h and what every part shares (errors agreed across ranks, the
 * settings, the pieces a rank gives); each subject of the protocol has its own file, listed in
 * h5flow_internal.h.
 */
#define _DEFAULT_SOURCE
#include "h5flow_internal.h"

const type_info TYPES[NTYPES] = {{"<f4", 4}, {"<f8", 8}, {"<i4", 4}, {"<i8", 8},
                                 {"<u4", 4}, {"<u8", 8}, {"|i1", 1}, {"|u1", 1}};

/* ---- errors ---------------------------------------------------------------------------------------- */
int set_err(h5flow_writer *w, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->errmsg, sizeof w->errmsg, fmt, ap);
    va_end(ap);
    return code;
}

/* Collective: the code (and message) of the lowest failing rank, on every rank; 0 when none failed. */
int agree(h5flow_writer *w, int code)
{
    int mine = code ? w->rank : w->size, first;
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, w->comm);
    if (first == w->size)
        return 0;
    MPI_Bcast(&code, 1, MPI_INT, first, w->comm);
    MPI_Bcast(w->errmsg, (int)sizeof w->errmsg, MPI_CHAR, first, w->comm);
    return code;
}

/* A barrier that sleeps instead of spinning (transports/_mpiutil.py sleepy_wait): MPICH busy-polls inside
 * blocking collectives, and ranks waiting there while rank 0 waits for the queue or the file system would
 * each burn a core that consumers on the same node need. */
static void sleepy_wait(h5flow_writer *w)
{
    if (w->size == 1)
        return;
    MPI_Request req;
    MPI_Ibarrier(w->comm, &req);
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    while (!done) {
        h5fl_sleep(0.0005);
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    }
}

/* The HDF5 error stack, innermost first ("" when empty). */
typedef struct {
    char *out;
    size_t n;
} h5err_ctx;

static herr_t h5err_walk(unsigned n, const H5E_error2_t *e, void *data)
{
    h5err_ctx *c = data;
    size_t len = strlen(c->out);
    if (n < 4 && e->desc && len + 4 < c->n)
        snprintf(c->out + len, c->n - len, "%s%s", len ? "; " : "", e->desc);
    return 0;
}

void h5_errtext(char *out, size_t n)
{
    out[0] = '\0';
    h5err_ctx c = {out, n};
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5err_walk, &c);
    if (!out[0])
        snprintf(out, n, "HDF5 error");
}


/* ---- open ------------------------------------------------------------------------------------------ */
static void new_run_id(char out[33])
{
    unsigned char b[16] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(b, 1, sizeof b, f) : 0;
    if (f)
        fclose(f);
    if (got != sizeof b) { /* no /dev/urandom: time and pid */
        uint64_t x = (uint64_t)(h5fl_now() * 1e9) ^ ((uint64_t)getpid() << 32);
        for (int i = 0; i < 16; i++, x = x * 6364136223846793005ULL + 1442695040888963407ULL)
            b[i] = (unsigned char)(x >> 56);
    }
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* a version 4 uuid, as Python's uuid4().hex */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static int looks_like_xml(const char *arg)
{
    size_t n = strlen(arg);
    if (n >= 4 && strcmp(arg + n - 4, ".xml") == 0)
        return 1;
    struct stat st;
    if (stat(arg, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    FILE *f = fopen(arg, "rb");
    if (!f)
        return 0;
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\n' || c == '\t' || c == '\r') {
    }
    fclose(f);
    return c == '<';
}

/* The settings from the argument (every rank; errors agreed by the caller). */
static int configure(h5flow_writer *w, const char *arg)
{
    h5fl_config_defaults(&w->cfg);
    if (!arg || !*arg)
        return set_err(w, H5FLOW_ERR_CONFIG, "h5flow_writer_open: no stream given; give an XML file or the stream's "
                                             "name (steps are staged in <name>.h5flow/)");
    if (looks_like_xml(arg)) {
        if (h5fl_config_from_xml(&w->cfg, arg, w->errmsg, sizeof w->errmsg))
            return H5FLOW_ERR_CONFIG;
    } else {
        if (strlen(arg) >= sizeof w->cfg.filename - 64)
            return set_err(w, H5FLOW_ERR_CONFIG, "h5flow_writer_open: the stream name is longer than %zu characters",
                           sizeof w->cfg.filename - 64);
        snprintf(w->cfg.filename, sizeof w->cfg.filename, "%s", arg);
        size_t n = strlen(w->cfg.filename);
        if (n > 7 && strcmp(w->cfg.filename + n - 7, ".h5flow") == 0) /* the staging directory itself */
            w->cfg.filename[n - 7] = '\0';
        while (n > 1 && w->cfg.filename[strlen(w->cfg.filename) - 1] == '/')
            w->cfg.filename[strlen(w->cfg.filename) - 1] = '\0', n--;
    }
    snprintf(w->root, sizeof w->root, "%s.h5flow", w->cfg.filename);
    struct stat st;
    if (strstr(w->cfg.vol_stack, "cache") && *w->cfg.cache_path &&
        (stat(w->cfg.cache_path, &st) != 0 || !S_ISDIR(st.st_mode) || access(w->cfg.cache_path, W_OK | X_OK) != 0))
        return set_err(w, H5FLOW_ERR_CONFIG, "rank %d: cache_path='%s' is not a writable directory on this node; "
                                             "create it (node-local storage: /dev/shm, NVMe) or give another "
                                             "cache_path, or leave it out for h5flow_cache's own choice",
                       w->rank, w->cfg.cache_path);
    return 0;
}

/* The directory holding the staging directory. */
void parent_dir(const h5flow_writer *w, char parent[H5FL_PATH_MAX])
{
    snprintf(parent, H5FL_PATH_MAX, "%s", w->root);
    char *slash = strrchr(parent, '/');
    if (!slash)
        snprintf(parent, H5FL_PATH_MAX, ".");
    else if (slash == parent)
        parent[1] = '\0';
    else
        *slash = '\0';
}

static int trusted_uid(uid_t uid)
{
    return uid == geteuid() || uid == 0;
}

/* The stream directory only this user (or root) can write, in a parent others cannot rename it out of
 * (src/h5flow/transports/_ownership.py: the same rule, the same words). */
static int check_private_dir(h5flow_writer *w, const char *parent)
{
    struct stat st, pst;
    if (lstat(w->root, &st) != 0)
        return set_err(w, H5FLOW_ERR_IO, "cannot start stream in %s: %s", w->root, strerror(errno));
    char why[160] = "";
    if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode))
        snprintf(why, sizeof why, "it is not a directory (a symbolic link or a file)");
    else if (!trusted_uid(st.st_uid))
        snprintf(why, sizeof why, "it is owned by uid %ld, not by you (uid %ld)", (long)st.st_uid, (long)geteuid());
    else if (st.st_mode & 022)
        snprintf(why, sizeof why, "it is writable by %s (mode %04o)",
                 (st.st_mode & 022) == 022 ? "group and others" : (st.st_mode & 02) ? "others" : "its group",
                 (unsigned)(st.st_mode & 07777));
    else if (stat(parent, &pst) == 0 && (pst.st_mode & 02) && !(pst.st_mode & S_ISVTX) && !trusted_uid(pst.st_uid))
        snprintf(why, sizeof why, "its directory %.60s is writable by others without the sticky bit (mode %04o)",
                 parent, (unsigned)(pst.st_mode & 07777));
    if (!why[0])
        return 0;
    return set_err(w, H5FLOW_ERR_CONFIG, "%s: refusing the stream directory: %s, so another user could change what "
                   "the stream delivers. Remove it (its owner or root can), or choose another filename, and let h5flow "
                   "create the directory itself (mode 0700) (streams are per-user, as ssh's StrictModes trusts only the "
                   "user's own, not group- or world-writable files)", w->root, why);
}

/* Rank 0: claim the stream and prepare a new run. */
static int start_run(h5flow_writer *w)
{
    char parent[H5FL_PATH_MAX];
    parent_dir(w, parent);
    struct stat st;
    if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
        return set_err(w, H5FLOW_ERR_CONFIG, "cannot start stream in %s: the directory %s of the stream's filename "
                       "does not exist: create it (on fast storage: a burst buffer, NVMe, /dev/shm) or point filename "
                       "elsewhere", w->root, parent);
    if (mkdir(w->root, 0700) != 0 && errno != EEXIST)
        return set_err(w, H5FLOW_ERR_IO, "cannot start stream in %s: mkdir: %s", w->root, strerror(errno));
    int rc = check_private_dir(w, parent);
    if (rc)
        return rc;
    rc = claim(w);
    if (rc)
        return rc;
    rc = refuse_if_live(w);
    if (!rc)
        rc = reset(w);
    if (rc)
        release_claim(w);
    return rc;
}

static int announce(h5flow_writer *w, double created)
{
    char p[H5FL_PATH_MAX], hb[32], cr[32];
    path_of(w, p, "stream.json");
    h5fl_repr(w->cfg.heartbeat, hb);
    h5fl_repr(created, cr);
    char text[512];
    int n = snprintf(text, sizeof text,
                     "{\"run_id\": \"%s\", \"producers\": %d, \"layout\": \"%s\", \"driver\": \"mpio\", \"heartbeat\": "
                     "%s, \"created\": %s, \"keep\": \"%s\", \"format\": \"h5flow-stream\", \"version\": 1}",
                     w->run_id, w->size, w->cfg.layout_nn ? "n-n" : "n-1", hb, cr, w->cfg.keep_all ? "all" : "released");
    int e = h5fl_atomic_write(p, text, (size_t)n);
    if (e)
        return set_err(w, H5FLOW_ERR_IO, "cannot announce the stream in %s: %s", w->root, strerror(e));
    return 0;
}

int h5flow_writer_open(MPI_Comm comm, const char *xml_or_dir, h5flow_writer **writer)
{
    if (!writer)
        return H5FLOW_ERR_ARGUMENT;
    h5flow_writer *w = calloc(1, sizeof *w);
    *writer = w;
    if (!w)
        return H5FLOW_ERR_NOMEM;
    w->claim_fd = -1;
    w->comm = MPI_COMM_NULL;
    w->last_step = -1;
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized)
        return w->failed = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_writer_open: MPI is not initialised: call "
                                                           "MPI_Init first");
    if (comm == MPI_COMM_NULL || MPI_Comm_dup(comm, &w->comm) != MPI_SUCCESS)
        return w->failed = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_writer_open: give a valid communicator (the "
                                                           "producer ranks)");
    MPI_Comm_rank(w->comm, &w->rank);
    MPI_Comm_size(w->comm, &w->size);
    int rc = agree(w, configure(w, xml_or_dir));
    if (!rc) {
        if (w->rank == 0)
            new_run_id(w->run_id);
        MPI_Bcast(w->run_id, sizeof w->run_id, MPI_CHAR, 0, w->comm);
        rc = agree(w, w->rank == 0 ? start_run(w) : 0);
    }
    if (!rc)
        rc = agree(w, hb_start(w));
    double created = h5fl_now();
    if (!rc)
        rc = agree(w, w->rank == 0 ? announce(w, created) : 0);
    if (rc) {
        hb_stop(&w->hb);
        release_claim(w);
        w->failed = rc;
        return rc;
    }
    w->opened = 1;
    return H5FLOW_OK;
}

/* ---- steps ----------------------------------------------------------------------------------------- */
static int usable(h5flow_writer *w, const char *what)
{
    if (!w)
        return H5FLOW_ERR_ARGUMENT;
    if (w->failed)
        return set_err(w, H5FLOW_ERR_STOPPED, "%s: the writer stopped on an earlier error; call h5flow_writer_close",
                       what);
    return 0;
}

static void free_pieces(h5flow_writer *w)
{
    for (size_t i = 0; i < w->npieces; i++)
        free(w->pieces[i].data);
    w->npieces = 0;
}

int h5flow_begin_step(h5flow_writer *w, int64_t step, double time)
{
    int rc = usable(w, "h5flow_begin_step");
    if (rc)
        return rc;
    int64_t s = step < 0 ? -1 : step, mine[2] = {s, -s}, all[2]; /* no overflow for INT64_MIN */
    MPI_Allreduce(mine, all, 2, MPI_INT64_T, MPI_MIN, w->comm);
    if (w->in_step)
        rc = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_begin_step(%lld): step %lld is not ended yet; call "
                     "h5flow_end_step first", (long long)step, (long long)w->step);
    else if (all[0] != -all[1])
        rc = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_begin_step: the ranks give different step numbers (%lld to %lld); "
                     "every rank must begin the same step", (long long)all[0], (long long)-all[1]);
    else if (step < 0 || step <= w->last_step)
        rc = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_begin_step(%lld): steps must be >= 0 and increasing (the last "
                     "was %lld)", (long long)step, (long long)w->last_step);
    else if (!isfinite(time))
        rc = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_begin_step(%lld): the time %g is not a finite number", (long long)step,
                     time);
    rc = agree(w, rc);
    if (rc)
        return rc;
    w->in_step = 1;
    w->step = step;
    w->time = time;
    w->local_code = 0;
    free_pieces(w);
    return H5FLOW_OK;
}

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > NAME_LEN || *s == '.' || *s == '+' || *s == '-')
        return 0;
    for (; *s; s++)
        if (!(((*s | 32) >= 'a' && (*s | 32) <= 'z') || (*s >= '0' && *s <= '9') || strchr("_.+-", *s)))
            return 0;
    return 1;
}

/* Whether two pieces (padded to 3-D) share an element. */
int pieces_overlap(const piece_desc *a, const piece_desc *b)
{
    for (int k = 0; k < 3; k++)
        if (!(a->off[k] < b->off[k] + b->cnt[k] && b->off[k] < a->off[k] + a->cnt[k]))
            return 0;
    return 1;
}

/* "offset (z, y, x) count (z, y, x)" of a piece, as its caller gave them (ndims axes). */
void piece_text(const piece_desc *d, char *out, size_t n)
{
    int k0 = 3 - d->ndims, len = 0;
    len += snprintf(out + len, n - (size_t)len, "offset (");
    for (int k = k0; k < 3 && len < (int)n; k++)
        len += snprintf(out + len, n - (size_t)len, "%s%llu", k > k0 ? ", " : "", (unsigned long long)d->off[k]);
    if (len < (int)n)
        len += snprintf(out + len, n - (size_t)len, ") count (");
    for (int k = k0; k < 3 && len < (int)n; k++)
        len += snprintf(out + len, n - (size_t)len, "%s%llu", k > k0 ? ", " : "", (unsigned long long)d->cnt[k]);
    if (len < (int)n)
        snprintf(out + len, n - (size_t)len, ")");
}

static int write_error(h5flow_writer *w, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int write_error(h5flow_writer *w, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->errmsg, sizeof w->errmsg, fmt, ap);
    va_end(ap);
    if (!w->local_code) { /* end_step fails on every rank with the first such error */
        w->local_code = code;
        snprintf(w->local_msg, sizeof w->local_msg, "rank %d: %s", w->rank, w->errmsg);
    }
    return code;
}

/* The type array `name` had in earlier steps, or -1 for an array not seen before. */
int known_type(const h5flow_writer *w, const char *name)
{
    for (size_t i = 0; i < w->nknown; i++)
        if (!strcmp(w->known[i].name, name))
            return w->known[i].type;
    return -1;
}

/* Remember the types of a step's arrays (every rank alike, after build_meshes agreed). */
int remember_types(h5flow_writer *w, const mesh_t *m, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (known_type(w, m[k].name) >= 0)
            continue;
        if (w->nknown == w->capknown) {
            size_t cap = w->capknown ? 2 * w->capknown : 8;
            known_t *p = realloc(w->known, cap * sizeof *p);
            if (!p)
                return set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory", (long long)w->step);
            w->known = p;
            w->capknown = cap;
        }
        snprintf(w->known[w->nknown].name, sizeof w->known[w->nknown].name, "%s", m[k].name);
        w->known[w->nknown++].type = m[k].type;
    }
    return 0;
}

int h5flow_write(h5flow_writer *w, const char *name, h5flow_type type, int ndims, const uint64_t *global_dims,
                 const uint64_t *offset, const uint64_t *count, const void *buffer)
{
    int rc = usable(w, "h5flow_write");
    if (rc)
        return rc;
    const char *shown = name ? name : "(null)";
    if (!w->in_step)
        return set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%.140s\"): no step begun; call h5flow_begin_step first",
                       shown);
    if (!name || !valid_name(name))
        return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write: array name \"%.140s\" is not allowed: use 1-128 "
                           "letters, digits, '_', '.', '+', '-', not starting with '.', '+' or '-'", shown);
    if ((int)type < 0 || (int)type >= NTYPES)
        return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): element type %d; accepted: H5FLOW_FLOAT32 "
                           "(0) to H5FLOW_UINT8 (%d)", name, (int)type, NTYPES - 1);
    if (ndims < 1 || ndims > 3)
        return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): ndims %d; accepted: 1 to 3", name, ndims);
    int was = known_type(w, name);
    if (was >= 0 && was != (int)type)
        return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\") in step %lld: " TYPE_CHANGED, name,
                           (long long)w->step, name, TYPES[was].dtype, TYPES[type].dtype);
    if (!global_dims || !offset || !count)
        return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): global_dims, offset and count must not be "
                           "NULL", name);
    uint64_t elements = 1;
    for (int a = 0; a < ndims; a++) {
        if (offset[a] > global_dims[a] || count[a] > global_dims[a] - offset[a])
            return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): axis %d: the piece covers [%llu, %llu) "
                               "but the global array has %llu there; check offset, count and global_dims", name, a,
                               (unsigned long long)offset[a], (unsigned long long)(offset[a] + count[a]),
                               (unsigned long long)global_dims[a]);
        if (global_dims[a] > ((uint64_t)1 << 40))
            return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): global_dims[%d] = %llu; accepted: up to "
                               "2^40", name, a, (unsigned long long)global_dims[a]);
        elements *= count[a];
    }
    if (!buffer && elements)
        return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): buffer is NULL for %llu elements", name,
                           (unsigned long long)elements);
    piece_desc desc = {0};
    snprintf(desc.name, sizeof desc.name, "%s", name);
    desc.type = (int32_t)type;
    desc.ndims = ndims;
    for (int a = 0; a < 3; a++) { /* padded to 3-D at the front: (z, y, x) */
        int k = a - (3 - ndims);
        desc.gdims[a] = k >= 0 ? global_dims[k] : 1;
        desc.off[a] = k >= 0 ? offset[k] : 0;
        desc.cnt[a] = k >= 0 ? count[k] : 1;
    }
    for (size_t i = 0; i < w->npieces && elements; i++) { /* each element once per step: at the call, on this rank */
        const piece_desc *old = &w->pieces[i].d;
        if (!strcmp(old->name, name) && old->ndims == ndims && pieces_overlap(old, &desc)) {
            char a[160], b[160];
            piece_text(old, a, sizeof a);
            piece_text(&desc, b, sizeof b);
            return write_error(w, H5FLOW_ERR_ARGUMENT, "h5flow_write(\"%s\"): in step %lld this rank already wrote a "
                               "piece of \"%s\" at %s, which overlaps this one at %s: every element of an array is "
                               "written once per step (a consumer would get both pieces); write each piece once", name,
                               (long long)w->step, name, a, b);
        }
    }
    size_t nbytes = (size_t)elements * TYPES[type].size;
    if (w->npieces == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 8;
        piece_t *p = realloc(w->pieces, cap * sizeof *p);
        if (!p)
            return write_error(w, H5FLOW_ERR_NOMEM, "h5flow_write(\"%s\"): out of memory", name);
        w->pieces = p;
        w->cap = cap;
    }
    piece_t *p = &w->pieces[w->npieces];
    memset(p, 0, sizeof *p);
    p->data = malloc(nbytes ? nbytes : 1); /* an empty piece is kept until end_step (see drop_empty) */
    if (!p->data)
        return write_error(w, H5FLOW_ERR_NOMEM, "h5flow_write(\"%s\"): out of memory for a copy of %zu bytes", name,
                           nbytes);
    memcpy(p->data, buffer, nbytes);
    p->d = desc;
    w->npieces++;
    return H5FLOW_OK;
}


/* After hb_failure agreed: the message prefixed, and rank 0 stops the stream with it (an X line, said on
 * stderr), so consumers get this reason instead of "lost". */
static void heartbeat_lost(h5flow_writer *w, const char *fmt, ...)
{
    char msg[H5FL_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof msg)
        snprintf(msg + n, sizeof msg - (size_t)n, "%s", w->errmsg);
    set_err(w, H5FLOW_ERR_IO, "%s", msg);
    if (w->rank == 0)
        stop_stream(w, msg);
}

int h5flow_end_step(h5flow_writer *w, int *published)
{
    if (published)
        *published = 0;
    int rc = usable(w, "h5flow_end_step");
    if (rc)
        return rc;
    if (!w->in_step)
        rc = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_end_step: no step begun; call h5flow_begin_step first");
    rc = agree(w, rc);
    if (rc)
        return rc;
    w->in_step = 0;
    w->last_step = w->step;
    if (w->local_code)
        snprintf(w->errmsg, sizeof w->errmsg, "step %lld was not published: %s", (long long)w->step, w->local_msg);
    rc = agree(w, w->local_code);
    piece_desc *all = NULL;
    int *owner = NULL, *counts = NULL, *displs = NULL;
    mesh_t *meshes = NULL;
    size_t nmeshes = 0, total = 0;
    h5fl_buf meta = {0};
    if (rc)
        goto out;
    rc = agree(w, hb_failure(w)); /* a rank its peers will report lost stops the stream, with the reason */
    if (rc) {
        heartbeat_lost(w, "step %lld was not published: ", (long long)w->step);
        goto out;
    }
    /* 1. every rank's pieces -> the step's metadata, the same on every rank */
    counts = malloc((size_t)w->size * sizeof *counts);
    displs = malloc((size_t)w->size * sizeof *displs);
    int mine = (int)(w->npieces * sizeof(piece_desc)), nok = counts && displs;
    piece_desc *local = malloc(w->npieces ? w->npieces * sizeof *local : 1);
    nok = nok && local;
    MPI_Allreduce(MPI_IN_PLACE, &nok, 1, MPI_INT, MPI_MIN, w->comm);
    if (!nok) {
        free(local);
        rc = set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory gathering the step's metadata", (long long)w->step);
        goto out;
    }
    for (size_t i = 0; i < w->npieces; i++)
        local[i] = w->pieces[i].d;
    MPI_Allgather(&mine, 1, MPI_INT, counts, 1, MPI_INT, w->comm);
    size_t bytes = 0;
    for (int r = 0; r < w->size; r++) {
        displs[r] = (int)bytes;
        bytes += (size_t)counts[r];
    }
    total = bytes / sizeof(piece_desc);
    all = malloc(bytes ? bytes : 1);
    owner = malloc((total ? total : 1) * sizeof *owner);
    nok = all && owner;
    MPI_Allreduce(MPI_IN_PLACE, &nok, 1, MPI_INT, MPI_MIN, w->comm);
    if (!nok) {
        free(local);
        rc = set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory gathering the step's metadata", (long long)w->step);
        goto out;
    }
    MPI_Allgatherv(local, mine, MPI_BYTE, all, counts, displs, MPI_BYTE, w->comm);
    free(local);
    for (int r = 0, i = 0; r < w->size; r++)
        for (size_t k = 0; k < (size_t)counts[r] / sizeof(piece_desc); k++)
            owner[i++] = r;
    drop_empty(w, all, owner, &total, (size_t)displs[w->rank] / sizeof(piece_desc));
    rc = agree(w, build_meshes(w, all, owner, total, &meshes, &nmeshes)); /* deterministic: same on every rank */
    if (rc)
        goto out;
    uint64_t nbytes = 0;
    for (size_t k = 0; k < nmeshes; k++)
        nbytes += meshes[k].rows[meshes[k].nblocks] * TYPES[meshes[k].type].size;
    step_json(w, all, meshes, nmeshes, &meta);
    if (meta.oom) {
        rc = agree(w, set_err(w, H5FLOW_ERR_NOMEM, "step %lld: out of memory", (long long)w->step));
        goto out;
    }
    /* 2. rank 0 admits the step (queue_limit, quota, block/discard) and reserves its room on disk */
    int64_t decision[2] = {0, -1}; /* publish, seq */
    char reason[512] = "";
    rc = 0;
    if (w->rank == 0) {
        int pub = 0;
        rc = admit(w, nbytes, &pub, &decision[1], reason, sizeof reason);
        decision[0] = pub;
        if (!rc && pub) {
            uint64_t files = w->cfg.layout_nn ? (uint64_t)w->size : 1;
            uint64_t need = nbytes + 3 * meta.len + files * (FILE_OVERHEAD + (2 * nmeshes + 2) * DATASET_OVERHEAD);
            rc = reserve_room(w, need);
        }
    }
    sleepy_wait(w);
    rc = agree(w, rc);
    if (rc)
        goto out;
    MPI_Bcast(decision, 2, MPI_INT64_T, 0, w->comm);
    if (!decision[0]) { /* dropped (queue_policy="discard"): every rank gets rank 0's reason */
        free_pieces(w);
        if (w->rank == 0)
            snprintf(w->errmsg, sizeof w->errmsg, "%s", reason);
        MPI_Bcast(w->errmsg, (int)sizeof w->errmsg, MPI_CHAR, 0, w->comm);
        goto out;
    }
    /* 3. write .step-N.tmp/ (data.h5 collectively, meta.json by rank 0) under a heartbeat lease */
    char tmp[H5FL_PATH_MAX], data[H5FL_PATH_MAX + 16], metaf[H5FL_PATH_MAX + 16], final[H5FL_PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.step-%09lld.tmp", w->root, (long long)w->step);
    snprintf(final, sizeof final, "%s/step-%09lld", w->root, (long long)w->step);
    snprintf(data, sizeof data, "%s/data.h5", tmp);
    snprintf(metaf, sizeof metaf, "%s/meta.json", tmp);
    double lease = WRITE_LEASE_MIN + 10 * w->cfg.heartbeat + (double)nbytes / WRITE_RATE;
    char what[H5FL_PATH_MAX + 128];
    snprintf(what, sizeof what, "writing step %lld into %s for more than %.0f s", (long long)w->step, tmp, lease);
    hb_lease(&w->hb, lease, what);
    if (w->rank == 0) {
        h5fl_rmtree(tmp);
        if (mkdir(tmp, 0700) != 0)
            rc = set_err(w, H5FLOW_ERR_IO, "rank 0: cannot create %s: %s", tmp, strerror(errno));
        char space[H5FL_PATH_MAX];
        path_of(w, space, ".space");
        unlink(space); /* the room reserved at admission is the step's now */
    }
    rc = agree(w, rc);
    if (!rc) {
        if (w->cfg.layout_nn) {
            snprintf(data, sizeof data, "%s/rank-%05d.h5", tmp, w->rank);
            rc = write_per_rank(w, data, meshes, nmeshes);
        } else {
            rc = write_shared(w, data, all, meshes, nmeshes, meta.data, meta.len);
        }
        if (!rc && w->rank == 0) {
            int e = h5fl_atomic_write(metaf, meta.data, meta.len);
            if (e)
                rc = set_err(w, H5FLOW_ERR_IO, "rank 0: writing %s: %s", metaf, strerror(e));
        }
        sleepy_wait(w);
        rc = agree(w, rc);
    }
    hb_lease(&w->hb, -1, NULL);
    if (rc) {
        char msg[H5FL_MSG_MAX];
        snprintf(msg, sizeof msg, "step %lld was not published: an error while writing it in %s (the step holds %llu "
                 "bytes, %lld bytes free now): %s", (long long)w->step, w->root, (unsigned long long)nbytes,
                 (long long)h5fl_free_bytes(w->root), w->errmsg);
        set_err(w, rc, "%s", msg);
        if (w->rank == 0) {
            h5fl_rmtree(tmp);
            stop_stream(w, msg);
        }
        goto out;
    }
    /* 4. publish: rename, then the P line */
    if (w->rank == 0) {
        char line[256], t[32], at[32];
        int e = rename(tmp, final) != 0 ? errno : 0;
        h5fl_repr(w->time, t);
        h5fl_repr(h5fl_now(), at);
        snprintf(line, sizeof line, "P %lld %lld %s %llu %s\n", (long long)decision[1], (long long)w->step, t,
                 (unsigned long long)nbytes, at);
        if (!e)
            e = append(w, line);
        if (e) {
            h5fl_rmtree(tmp);
            h5fl_rmtree(final); /* no P line: never visible */
            char msg[H5FL_MSG_MAX];
            snprintf(msg, sizeof msg, "step %lld: publishing it in %s failed: %s", (long long)w->step, w->root,
                     strerror(e));
            stop_stream(w, msg);
            rc = set_err(w, H5FLOW_ERR_IO, "%s", msg);
        } else {
            if (w->npub == w->cappub) {
                size_t cap = w->cappub ? 2 * w->cappub : 64;
                published_t *p = realloc(w->pub, cap * sizeof *p);
                if (p) {
                    w->pub = p;
                    w->cappub = cap;
                }
            }
            if (w->npub < w->cappub)
                w->pub[w->npub++] = (published_t){decision[1], w->step, nbytes, 0};
            else
                fprintf(stderr, "h5flow: out of memory: step %lld is not counted against queue_limit\n",
                        (long long)w->step);
        }
    }
    sleepy_wait(w);
    rc = agree(w, rc);
    if (rc)
        goto out;
    free_pieces(w);
    if (published)
        *published = 1;
out:
    if (rc) {
        w->failed = rc;
        free_pieces(w);
    }
    free(all);
    free(owner);
    free(counts);
    free(displs);
    free_meshes(meshes, nmeshes);
    h5fl_buf_free(&meta);
    return rc;
}

/* ---- end --------------------------------------------------------------------------------------------- */
static void leave(h5flow_writer *w)
{
    hb_stop(&w->hb);
    if (w->rank == 0 && w->opened) {
        char p[H5FL_PATH_MAX];
        path_of(w, p, ".space");
        unlink(p);
        path_of(w, p, ".reserve");
        unlink(p);
    }
    release_claim(w);
    free_pieces(w);
    free(w->pieces);
    free(w->pub);
    free(w->known);
    if (w->comm != MPI_COMM_NULL)
        MPI_Comm_free(&w->comm);
    free(w);
}

int h5flow_writer_close(h5flow_writer *w)
{
    if (!w)
        return H5FLOW_OK;
    if (!w->opened || w->failed) {
        int rc = w->failed ? w->failed : H5FLOW_ERR_STOPPED;
        leave(w);
        return rc;
    }
    int rc = 0;
    if (w->in_step)
        rc = set_err(w, H5FLOW_ERR_ARGUMENT, "h5flow_writer_close: step %lld was begun but not ended; the stream ends "
                     "without an end-of-stream mark (consumers see the producer lost); call h5flow_end_step first",
                     (long long)w->step);
    rc = agree(w, rc);
    if (rc) {
        if (w->rank == 0) /* the writer is freed: say it here */
            fprintf(stderr, "h5flow: error: %s\n", w->errmsg);
        leave(w);
        return rc;
    }
    rc = agree(w, hb_failure(w)); /* no end-of-stream mark after a rank was reported lost: the reason instead */
    if (rc) {
        heartbeat_lost(w, "h5flow_writer_close: the stream ends with an error: ");
        leave(w);
        return rc;
    }
    if (w->rank == 0) {
        char line[64];
        snprintf(line, sizeof line, "E %lld\n", (long long)w->next_seq);
        int e = append(w, line);
        if (e)
            rc = set_err(w, H5FLOW_ERR_IO, "cannot end the stream in %s: %s", w->root, strerror(e));
        int64_t u;
        uint64_t s;
        queue_state(w, &u, &s, NULL, 0); /* garbage collection */
        if (!rc)
            rc = dropped_error(w); /* never silent: the producer's status says steps were lost */
    }
    sleepy_wait(w);
    rc = agree(w, rc);
    if (rc && w->rank == 0) /* the writer is freed: say it here */
        fprintf(stderr, "h5flow: error: %s\n", w->errmsg);
    leave(w);
    return rc;
}

void h5flow_writer_abort(h5flow_writer *w)
{
    if (w)
        leave(w);
}

const char *h5flow_errmsg(const h5flow_writer *w)
{
    if (!w)
        return "h5flow: no writer (h5flow_writer_open could not allocate one: out of memory, or writer was NULL)";
    return w->errmsg;
}
