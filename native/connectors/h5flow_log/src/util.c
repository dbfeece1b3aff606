/* Errors, CRC32C, name escaping and small file-system helpers. */
#include "h5fl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- errors */
/* Pending message of the current thread's failing callback (not shared between files or threads). */
static _Thread_local char err_msg[1024];
/* Error class and message ids registered once per library lifetime (not per file). */
static hid_t err_class = H5I_INVALID_HID, err_major = H5I_INVALID_HID, err_minor = H5I_INVALID_HID;

void h5fl_err(const char *fmt, ...)
{
    if (err_msg[0]) /* keep the first (root-cause) message */
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
}

void h5fl_err_clear(void) { err_msg[0] = '\0'; }
const char *h5fl_err_msg(void) { return err_msg; }

void h5fl_err_push_at(const char *file, const char *func, unsigned line)
{
    const char *msg = err_msg[0] ? err_msg : "operation failed (no reason recorded: please report this)";
    /* Without the connector's own class (registration failed) the library's class carries the message,
     * so that it is never dropped. */
    if (err_class >= 0)
        H5Epush2(H5E_DEFAULT, file, func, line, err_class, err_major, err_minor, "%s", msg);
    else
        H5Epush2(H5E_DEFAULT, file, func, line, H5E_ERR_CLS, H5E_VOL, H5E_CANTOPERATE, "h5flow_log: %s",
                 msg);
    err_msg[0] = '\0';
}

/* HDF5 clears the calling thread's default error stack on entry to every API function, also when a
 * connector calls one from inside a callback. initialize and terminate also run for programs that never
 * selected this connector: when a native H5Fopen fails, HDF5 loads every VOL plugin on HDF5_PLUGIN_PATH
 * to ask whether it can open the file, which initialises and terminates us. The API calls they make are
 * therefore bracketed by these two, so that the caller's error stack (h5py derives FileNotFoundError
 * from it, and h5py.File(name, 'a') creates a missing file only on FileNotFoundError) comes back as it
 * was. */
hid_t h5fl_estack_save(void) { return H5Eget_current_stack(); }
void h5fl_estack_restore(hid_t saved)
{
    if (saved >= 0 && H5Eset_current_stack(saved) < 0)
        H5Eclose_stack(saved);
}

static void err_unregister(void)
{
    if (err_minor >= 0)
        H5Eclose_msg(err_minor);
    if (err_major >= 0)
        H5Eclose_msg(err_major);
    if (err_class >= 0)
        H5Eunregister_class(err_class);
    err_class = err_major = err_minor = H5I_INVALID_HID;
}

int h5fl_err_init(void)
{
    if (err_class >= 0)
        return 0;
    hid_t saved = h5fl_estack_save();
    int rc = 0;
    err_class = H5Eregister_class(H5FL_NAME, H5FL_NAME, "1");
    if (err_class >= 0) {
        err_major = H5Ecreate_msg(err_class, H5E_MAJOR, "h5flow_log VOL connector");
        err_minor = H5Ecreate_msg(err_class, H5E_MINOR, "operation failed");
    }
    if (err_class < 0 || err_major < 0 || err_minor < 0) {
        err_unregister();
        rc = -1;
    }
    h5fl_estack_restore(saved);
    return rc;
}

void h5fl_err_term(void)
{
    if (err_class < 0)
        return;
    hid_t saved = h5fl_estack_save();
    err_unregister();
    h5fl_estack_restore(saved);
}

int h5fl_check_plist(hid_t id, hid_t cls, const char *what)
{
    if (id == H5P_DEFAULT)
        return 0;
    htri_t ok;
    H5E_BEGIN_TRY { ok = H5Pisa_class(id, cls); }
    H5E_END_TRY
    if (ok <= 0) {
        h5fl_err("invalid %s", what);
        return -1;
    }
    return 0;
}

int h5fl_check_no_crt_order(hid_t ocpl, bool links)
{
    if (ocpl == H5P_DEFAULT || ocpl < 0)
        return 0;
    unsigned flags = 0;
    herr_t st;
    H5E_BEGIN_TRY
    {
        st = links ? H5Pget_link_creation_order(ocpl, &flags) : -1;
        unsigned aflags = 0;
        if (H5Pget_attr_creation_order(ocpl, &aflags) >= 0) {
            flags |= aflags;
            st = 0;
        }
    }
    H5E_END_TRY
    (void)st;
    (void)flags; /* creation order is tracked (links.c): nothing is refused */
    return 0;
}

bool h5fl_needs_bkg(hid_t t)
{
    return H5Tget_class(t) == H5T_COMPOUND || H5Tdetect_class(t, H5T_COMPOUND) > 0;
}

/* ---------------------------------------------------------------- CRC32C (Castagnoli)
 * Data checksums cover every byte written and read, so this is on the I/O path: the SSE4.2 crc32
 * instruction where the processor has it (three independent streams over 8 KiB blocks, combined with a
 * zero-extension operator), else slicing-by-8 tables. Same function either way (tests/test_names.c). */
static uint32_t crc_table[8][256];
static int crc_ready;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    crc_ready = 1;
}

static uint32_t crc_sw(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        len--;
    }
    while (len >= 8) {
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^ crc_table[5][(lo >> 16) & 0xff] ^
              crc_table[4][lo >> 24] ^ crc_table[3][p[4]] ^ crc_table[2][p[5]] ^ crc_table[1][p[6]] ^
              crc_table[0][p[7]];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define CRC_BLOCK 8192u /* bytes per stream in the 3-stream loop */
/* Multiplication by x^(8*CRC_BLOCK) mod P as a 4x256 table: shifts a CRC over CRC_BLOCK zero bytes. */
static uint32_t crc_shift[4][256];
static int crc_hw = -1; /* -1: not probed yet */

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (int i = 0; vec; i++, vec >>= 1)
        if (vec & 1)
            sum ^= mat[i];
    return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        sq[n] = gf2_times(mat, mat[n]);
}

static void crc_hw_init(void)
{
    /* the operator for one zero bit, squared up to CRC_BLOCK zero bytes (as zlib's crc32_combine) */
    uint32_t odd[32], even[32];
    odd[0] = 0x82F63B78u;
    for (int n = 1; n < 32; n++)
        odd[n] = 1u << (n - 1);
    gf2_square(even, odd); /* 2 bits */
    gf2_square(odd, even); /* 4 bits */
    gf2_square(even, odd); /* 1 byte */
    uint32_t *op = even, *tmp = odd;
    for (unsigned bytes = 1; bytes < CRC_BLOCK; bytes *= 2) {
        gf2_square(tmp, op);
        uint32_t *t = op;
        op = tmp;
        tmp = t;
    }
    for (int k = 0; k < 4; k++)
        for (uint32_t i = 0; i < 256; i++)
            crc_shift[k][i] = gf2_times(op, i << (8 * k));
}

static uint32_t shift_block(uint32_t crc)
{
    return crc_shift[0][crc & 0xff] ^ crc_shift[1][(crc >> 8) & 0xff] ^ crc_shift[2][(crc >> 16) & 0xff] ^
           crc_shift[3][crc >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw_run(uint32_t crc, const uint8_t *p, size_t len)
{
    uint64_t c0 = crc;
    while (len && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        len--;
    }
    while (len >= 3 * CRC_BLOCK) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *p1 = p + CRC_BLOCK, *p2 = p + 2 * CRC_BLOCK;
        for (size_t i = 0; i < CRC_BLOCK; i += 8) {
            uint64_t a, b, c;
            memcpy(&a, p + i, 8);
            memcpy(&b, p1 + i, 8);
            memcpy(&c, p2 + i, 8);
            c0 = _mm_crc32_u64(c0, a);
            c1 = _mm_crc32_u64(c1, b);
            c2 = _mm_crc32_u64(c2, c);
        }
        c0 = shift_block(shift_block((uint32_t)c0) ^ (uint32_t)c1) ^ (uint32_t)c2;
        p += 3 * CRC_BLOCK;
        len -= 3 * CRC_BLOCK;
    }
    while (len >= 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        c0 = _mm_crc32_u64(c0, a);
        p += 8;
        len -= 8;
    }
    while (len--)
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#endif

uint32_t h5fl_crc32c(uint32_t crc, const void *buf, size_t len)
{
    if (!crc_ready) /* idempotent: concurrent first calls compute the same tables */
        crc_init();
    crc = ~crc;
#if defined(__x86_64__) && defined(__GNUC__)
    if (crc_hw < 0) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("sse4.2"))
            crc_hw_init();
        crc_hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    if (crc_hw == 1)
        return ~crc_hw_run(crc, buf, len);
#endif
    return ~crc_sw(crc, buf, len);
}

uint32_t h5fl_crc32c_portable(uint32_t crc, const void *buf, size_t len)
{
    if (!crc_ready)
        crc_init();
    return ~crc_sw(~crc, buf, len);
}

/* ---------------------------------------------------------------- little-endian helpers */
void h5fl_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
void h5fl_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
uint32_t h5fl_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
uint64_t h5fl_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---------------------------------------------------------------- names */
static bool safe_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.' || c == '+' || c == ',' || c == '=';
}

int h5fl_escape(const char *name, char *out, size_t outsz)
{
    static const char hex[] = "0123456789ABCDEF";
    if (!name || !*name) {
        h5fl_err("empty names are not allowed");
        return -1;
    }
    size_t o = 0;
    for (size_t i = 0; name[i]; i++) {
        unsigned char c = (unsigned char)name[i];
        bool keep = safe_char(c) && !(i == 0 && c == '.'); /* no leading '.', hence no "." or ".." */
        size_t need = keep ? 1 : 3;
        if (o + need >= outsz || o + need > NAME_MAX) {
            h5fl_err("name '%.64s%s' is too long for the file system once escaped (limit %d bytes)", name,
                     strlen(name) > 64 ? "..." : "", NAME_MAX);
            return -1;
        }
        if (keep) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int h5fl_unescape(const char *comp, char *out, size_t outsz)
{
    size_t o = 0;
    if (!comp[0])
        return -1;
    for (size_t i = 0; comp[i]; i++) {
        unsigned char c = (unsigned char)comp[i];
        int v;
        if (c == '%') {
            int hi = hexval(comp[i + 1]), lo = hi < 0 ? -1 : hexval(comp[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            v = hi * 16 + lo;
            if (v == 0 || (safe_char((unsigned char)v) && !(i == 0 && v == '.')))
                return -1; /* not canonical: h5fl_escape never writes this */
            i += 2;
        } else if (safe_char(c) && !(i == 0 && c == '.')) {
            v = c;
        } else {
            return -1;
        }
        if (o + 1 >= outsz)
            return -1;
        out[o++] = (char)v;
    }
    out[o] = '\0';
    return 0;
}

/* ---------------------------------------------------------------- files */
char *h5fl_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    else
        h5fl_err("out of memory");
    return d;
}

char *h5fl_path_join(const char *path, const char *name)
{
    size_t a = strlen(path), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) {
        h5fl_err("out of memory");
        return NULL;
    }
    memcpy(p, path, a);
    size_t k = a;
    if (k == 0 || p[k - 1] != '/')
        p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

char *h5fl_join(const char *dir, const char *comp)
{
    size_t a = strlen(dir), b = strlen(comp);
    char *p = malloc(a + b + 2);
    if (!p) {
        h5fl_err("out of memory");
        return NULL;
    }
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, comp, b + 1);
    return p;
}

int h5fl_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = pwrite(fd, p, len, (off_t)off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            h5fl_err("write failed: %s", strerror(errno));
            return -1;
        }
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

int h5fl_pread_all(int fd, void *buf, size_t len, uint64_t off)
{
    uint8_t *p = buf;
    while (len) {
        ssize_t n = pread(fd, p, len, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            h5fl_err("read failed: %s", n < 0 ? strerror(errno) : "unexpected end of file");
            return -1;
        }
        p += n;
        len -= (size_t)n;
        off += (uint64_t)n;
    }
    return 0;
}

/* Nothing of a failed write stays behind: the temporary file is removed on every error path (ENOSPC at
 * the write, at the fsync or, on NFS, at the close) and the destination keeps its previous contents. */
int h5fl_write_file_atomic(const char *dir, const char *name, const void *buf, size_t len, bool sync)
{
    char tmp[PATH_MAX], dst[PATH_MAX];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s/@tmp.%ld.%s", dir, (long)getpid(), name) >= sizeof tmp ||
        (size_t)snprintf(dst, sizeof dst, "%s/%s", dir, name) >= sizeof dst) {
        h5fl_err("path too long under %s", dir);
        return -1;
    }
    int fd = h5fl_open_file(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644); /* a FIFO planted there: refused */
    if (fd < 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", h5fl_err_msg());
        h5fl_err("cannot write %s: %.900s", dst, msg);
        return -1;
    }
    int rc = 0, e = 0;
    const char *step = "";
    const uint8_t *p = buf;
    for (size_t done = 0; done < len;) {
        ssize_t n = pwrite(fd, p + done, len - done, (off_t)done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            e = n < 0 ? errno : EIO;
            step = "writing";
            rc = -1;
            break;
        }
        done += (size_t)n;
    }
    if (rc == 0 && sync && fsync(fd) != 0) {
        e = errno;
        step = "fsync of";
        rc = -1;
    }
    if (close(fd) != 0 && rc == 0) {
        e = errno;
        step = "closing";
        rc = -1;
    }
    if (rc == 0 && rename(tmp, dst) != 0) {
        e = errno;
        step = "renaming";
        rc = -1;
    }
    if (rc != 0) {
        unlink(tmp);
        h5fl_err("cannot write %s (%zu bytes): %s %s failed: %s (errno %d)%s", dst, len, step, tmp,
                 strerror(e), e,
                 (e == ENOSPC || e == EDQUOT) ? "; free space on the file system"
                 : e == EFBIG                 ? "; the file size limit (ulimit -f) is too low"
                                              : "");
    }
    return rc;
}

int h5fl_open_file(const char *path, int flags, mode_t mode)
{
    /* O_NONBLOCK: opening a FIFO (or some devices) would otherwise wait for ever for its other end;
     * O_NOFOLLOW: a symbolic link at a file of the layout is refused, never followed out of the container */
    int fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    if (fd < 0) {
        int e = errno;
        if (e == ELOOP)
            h5fl_err("cannot open %s: it is a symbolic link; h5flow_log never follows a link at a file of its "
                     "layout (the container was altered: restore the file)", path);
        else if (e == ENXIO)
            h5fl_err("cannot open %s: it is a FIFO or device, not a file of the container (restore the file)",
                     path);
        else
            h5fl_err("cannot open %s: %s (errno %d)", path, strerror(e), e);
        errno = e;
        return -1;
    }
    struct stat st;
    int fl = fcntl(fd, F_GETFL);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        if (!S_ISREG(st.st_mode)) {
            h5fl_err("cannot open %s: it is a %s, not a regular file of the container (restore the file)", path,
                     S_ISFIFO(st.st_mode) ? "FIFO" : S_ISDIR(st.st_mode) ? "directory" : S_ISSOCK(st.st_mode) ? "socket"
                                                                                                          : "device");
            e = EINVAL;
        } else {
            h5fl_err("cannot open %s: %s", path, strerror(e));
        }
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

int h5fl_read_file(const char *path, void **buf, size_t *len)
{
    int fd = h5fl_open_file(path, O_RDONLY, 0);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        h5fl_err("cannot stat %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    size_t n = (size_t)st.st_size;
    uint8_t *p = malloc(n ? n : 1);
    if (!p || (n && h5fl_pread_all(fd, p, n, 0) != 0)) {
        if (!p)
            h5fl_err("out of memory reading %s", path);
        free(p);
        close(fd);
        return -1;
    }
    close(fd);
    *buf = p;
    *len = n;
    return 0;
}

bool h5fl_exists(const char *dir, const char *name)
{
    char p[PATH_MAX];
    struct stat st;
    if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, name) >= sizeof p)
        return false;
    return lstat(p, &st) == 0;
}

int h5fl_rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode))
        return unlink(path);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char *c = h5fl_join(path, e->d_name);
        if (!c || h5fl_rm_rf(c) != 0)
            rc = -1;
        free(c);
    }
    closedir(d);
    if (rmdir(path) != 0)
        rc = -1;
    if (rc)
        h5fl_err("cannot remove %s: %s", path, strerror(errno));
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void h5fl_names_free(h5fl_names_t *n)
{
    for (size_t i = 0; i < n->n; i++)
        free(n->v[i]);
    free(n->v);
    n->v = NULL;
    n->n = 0;
}

static int list_dir(const char *dir, bool attrs, h5fl_names_t *out)
{
    out->v = NULL;
    out->n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        h5fl_err("cannot list %s: %s", dir, strerror(errno));
        return -1;
    }
    size_t cap = 0;
    struct dirent *e;
    size_t plen = strlen(H5FL_ATTR_PREFIX);
    while ((e = readdir(d))) {
        char name[NAME_MAX + 1];
        const char *comp = e->d_name;
        if (attrs) {
            if (strncmp(comp, H5FL_ATTR_PREFIX, plen) != 0)
                continue;
            comp += plen;
        }
        if (h5fl_unescape(comp, name, sizeof name) != 0)
            continue; /* a layout file or something that is not ours */
        if (!attrs) {
            char *sub = h5fl_join(dir, e->d_name);
            H5I_type_t t = sub ? h5fl_dir_type(sub, false) : H5I_BADID;
            free(sub);
            if (t == H5I_BADID)
                continue; /* not an object (e.g. a creation that never completed) */
        }
        if (out->n == cap) {
            cap = cap ? 2 * cap : 16;
            char **nv = realloc(out->v, cap * sizeof *nv);
            if (!nv) {
                closedir(d);
                h5fl_names_free(out);
                h5fl_err("out of memory");
                return -1;
            }
            out->v = nv;
        }
        if (!(out->v[out->n] = h5fl_strdup(name))) {
            closedir(d);
            h5fl_names_free(out);
            return -1;
        }
        out->n++;
    }
    closedir(d);
    if (out->n > 1)
        qsort(out->v, out->n, sizeof *out->v, cmp_str);
    return 0;
}

int h5fl_list_children(const char *dir, h5fl_names_t *out) { return list_dir(dir, false, out); }
int h5fl_list_attrs(const char *dir, h5fl_names_t *out) { return list_dir(dir, true, out); }

/* ---------------------------------------------------------------- creating a name
 * A new link (object, soft, external or hard link stub) is built in a private directory at the container
 * root and renamed to its name in one rename(2). rename(2) of a directory onto an existing directory
 * succeeds only if that one is empty, and every link directory holds its marker file before it is renamed,
 * so of two processes renaming to the same name exactly one succeeds; the other gets EEXIST/ENOTEMPTY and
 * reports that the name exists, as native HDF5 refuses a second creation. A process killed while building
 * leaves only its private directory (never a name). An empty or marker-less directory at a name is what a
 * creation killed half-way left under the earlier protocol (mkdir at the name, then the marker), or what a
 * deletion stopped half-way left: it is emptied through a descriptor of its own (so nothing else is ever
 * touched) and replaced. */
char *h5fl_create_tmp(h5fl_file_t *f)
{
    char leaf[64];
    snprintf(leaf, sizeof leaf, "@tmp.new.%llu.%llu", (unsigned long long)f->epoch,
             (unsigned long long)h5fl_epoch_owner(f)->create_counter++);
    char *t = h5fl_join(f->o.dir, leaf);
    if (t && mkdir(t, 0755) != 0) {
        h5fl_err("cannot create %s: %s", t, strerror(errno));
        free(t);
        return NULL;
    }
    return t;
}

bool h5fl_is_anon_dir(const char *root, const char *dir)
{
    size_t rl = strlen(root), al = strlen(H5FL_ANON_PREFIX);
    return dir && !strncmp(dir, root, rl) && dir[rl] == '/' && !strncmp(dir + rl + 1, H5FL_ANON_PREFIX, al) &&
           !strchr(dir + rl + 1, '/');
}

/* Remove everything inside the directory open as `fd` (never following symbolic links). */
static int empty_at(int fd)
{
    int dfd = dup(fd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (unlinkat(fd, e->d_name, 0) == 0 || errno == ENOENT)
            continue;
        if (errno != EISDIR && errno != EPERM) {
            rc = -1;
            continue;
        }
        int sub = openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub < 0 || empty_at(sub) != 0 || (unlinkat(fd, e->d_name, AT_REMOVEDIR) != 0 && errno != ENOENT))
            rc = -1;
        if (sub >= 0)
            close(sub);
    }
    closedir(d);
    return rc;
}

/* The directory at `dir` holds no marker: empty it (through its own descriptor, re-checking the markers
 * there first), so that the next rename(2) replaces it. */
static int clear_stale(const char *dir)
{
    static const char *const markers[] = {H5FL_DSET_FILE, H5FL_DTYPE_FILE, H5FL_GROUP_FILE, H5FL_SOFT_FILE,
                                          H5FL_EXT_FILE,  H5FL_HARD_FILE,  H5FL_MARKER};
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1; /* gone meanwhile: the caller tries again */
    for (size_t i = 0; i < sizeof markers / sizeof *markers; i++)
        if (faccessat(fd, markers[i], F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
            close(fd);
            return 0; /* a link now: the caller's next rename fails and reports it */
        }
    int rc = empty_at(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

static int publish(const char *tmp, const char *dir, const char *what, const char *path, bool drop)
{
    bool failed = false;
    for (int tries = 0; tries < 16 && !failed; tries++) {
        if (rename(tmp, dir) == 0)
            return 0;
        int e = errno;
        if (e != EEXIST && e != ENOTEMPTY) {
            h5fl_err(e == ENOTDIR ? "cannot create %s '%s': %s is not a directory (the container is damaged)"
                                  : "cannot create %s '%s': %s",
                     what, path, e == ENOTDIR ? dir : strerror(e));
            failed = true;
            continue;
        }
        if (h5fl_dir_type(dir, false) != H5I_BADID) {
            if (drop) {
                h5fl_rm_rf(tmp);
                h5fl_err_clear();
            }
            return H5FL_CREATE_EXISTS;
        }
        if (clear_stale(dir) != 0) {
            h5fl_err("cannot create %s '%s': %s holds an incomplete creation that cannot be removed: %s", what,
                     path, dir, strerror(errno));
            failed = true;
        }
    }
    if (!failed)
        h5fl_err("cannot create %s '%s': %s keeps changing under concurrent creations", what, path, dir);
    if (drop)
        h5fl_create_abandon(tmp);
    return -1;
}

int h5fl_create_publish(const char *tmp, const char *dir, const char *what, const char *path)
{
    return publish(tmp, dir, what, path, true);
}

int h5fl_name_publish(const char *src, const char *dir, const char *what, const char *path)
{
    int r = publish(src, dir, what, path, false);
    if (r != H5FL_CREATE_EXISTS)
        return r;
    h5fl_err("cannot link %s '%s': a link with this name already exists", what, path);
    return -1;
}

void h5fl_create_abandon(const char *tmp)
{
    if (!tmp)
        return;
    char keep[1024];
    snprintf(keep, sizeof keep, "%s", h5fl_err_msg());
    h5fl_rm_rf(tmp);
    h5fl_err_clear();
    if (keep[0])
        h5fl_err("%s", keep);
}

int h5fl_create_publish_new(const char *tmp, const char *dir, const char *what, const char *path)
{
    int r = h5fl_create_publish(tmp, dir, what, path);
    if (r == H5FL_CREATE_EXISTS) {
        h5fl_err("cannot create %s '%s': a link with this name already exists", what, path);
        return -1;
    }
    return r;
}
