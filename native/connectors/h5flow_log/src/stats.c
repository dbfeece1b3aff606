/* Per-write statistics, user data functions, and the statistics query (docs/FORMAT.md, "Statistics"). */
#include "stats.h"

#include "h5flow_udf.h"
#include "stats_bytes.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SREC_HDR 128u          /* fixed part of a statistics record */
#define SBUF_FLUSH (1u << 20)  /* buffered records past this are written at the next index flush */
#define UDF_MSG_MAX 512u       /* bytes of a UDF failure message kept */

enum { K_NONE = 0, K_INT = 1, K_UINT = 2, K_FLOAT = 3 };
enum { UDF_NONE = 0, UDF_OK = 1, UDF_FAILED = 2 };

struct h5flow_udf_result {
    unsigned n;
    char key[H5FLOW_UDF_KEYS_MAX][H5FLOW_UDF_KEY_MAX + 1];
    double val[H5FLOW_UDF_KEYS_MAX];
};

typedef struct h5fl_stats_w {
    int fd;
    char *path;
    uint64_t end;  /* bytes of the sidecar written */
    bool broken;   /* a write failed: no more records from this writer (readers use the data) */
    uint8_t *buf;
    size_t len, cap;
    int kind;
    size_t esize;
    /* the user data function (@udf), loaded at the first write */
    bool udf_tried;
    char *udf_lib, *udf_sym;
    void *lib;
    h5flow_udf_fn fn;
    void (*free_fn)(void *);
    void *state;
    char *udf_err; /* why the function could not be loaded (every write's result says it) */
    /* the fused passes over the write being appended (h5fl_stats_arm) */
    bool armed;
    uint64_t want, seen, hseen; /* bytes of the write; seen by the first pass; by the histogram */
    struct acc *pend;
    h5fl_bytecount_t *bc; /* 1-byte integers: the count table of the write being appended (pend->bc) */
} h5fl_stats_w_t;

/* ---------------------------------------------------------------- element kinds and the accumulator */

static int kind_of(hid_t type, size_t *esize)
{
    H5T_class_t c = H5Tget_class(type);
    size_t sz = H5Tget_size(type);
    *esize = sz;
    if (c == H5T_INTEGER) {
        if (H5Tget_order(type) != H5Tget_order(H5T_NATIVE_INT) || !(sz == 1 || sz == 2 || sz == 4 || sz == 8))
            return K_NONE;
        if (H5Tget_precision(type) != sz * 8 || H5Tget_offset(type) != 0)
            return K_NONE;
        return H5Tget_sign(type) == H5T_SGN_2 ? K_INT : K_UINT;
    }
    if (c == H5T_FLOAT) {
        if ((sz == 4 && H5Tequal(type, H5T_NATIVE_FLOAT) > 0) || (sz == 8 && H5Tequal(type, H5T_NATIVE_DOUBLE) > 0))
            return K_FLOAT;
    }
    return K_NONE;
}

typedef union sval {
    int64_t i;
    uint64_t u;
    double f;
} sval_t;

typedef struct acc {
    int kind;
    size_t esize;
    uint64_t n, nan;
    bool any; /* a value that is not NaN was seen: min, max, kmin, kmax are set */
    sval_t min, max;
    uint64_t kmin, kmax; /* element index (0-based, in the order the elements were given) */
    double sum; /* floats; integers: the exact sums below, rounded once by acc_sum */
    __extension__ __int128 isum;
    __extension__ unsigned __int128 usum;
    uint64_t hist[H5FL_STATS_BINS];
    bool has_hist;
    /* 1-byte integers (stats_bytes.h): the elements seen are counted in this table, and min/max/kmin/kmax
     * are kept from it as they come; the sum and the histogram are taken from it (bytes_settle,
     * hist_scan) — NULL: the scans below */
    h5fl_bytecount_t *bc;
    bool hist_done; /* the histogram was taken from bc */
} acc_t;

/* The sum: integers exactly over all the elements seen, rounded once to a double. */
static double acc_sum(const struct acc *a)
{
    return a->kind == K_INT ? (double)a->isum : a->kind == K_UINT ? (double)a->usum : a->sum;
}

static double as_double(int kind, sval_t v) { return kind == K_INT ? (double)v.i : kind == K_UINT ? (double)v.u : v.f; }

/* The scans run at memory speed: one pass of branch-free min / max / sum / NaN count over blocks that the
 * compiler vectorises (this file is built with -O3), then the first position of the min and of the max
 * (a search that stops there). Integer sums are exact (64-bit partial sums per block, 128-bit total),
 * rounded once to a double. */
__extension__ typedef __int128 i128_t;
__extension__ typedef unsigned __int128 u128_t;
#define SBLK 4096u /* elements per block: 64-bit partial sums of 32-bit values cannot overflow */
#define LANES 8

/* Wider vectors where the processor has them: each scan and histogram is also compiled for AVX2 (_256)
 * and AVX-512 (_512), and simd_level() picks one at run time. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define H5FL_SIMD 1
#define AVX512 __attribute__((target("avx2,avx512f,avx512dq,avx512bw,avx512vl")))
#define AVX2 __attribute__((target("avx2")))
#else
#define H5FL_SIMD 0
#endif

/* One scan: per block of SBLK elements, branch-free lane reductions (min, max, sum, NaN count) that the
 * compiler vectorises; the block where the min (max) first reached its final value is remembered, and
 * only that block is searched for the position afterwards. NaN compares false: it is never the min or
 * max and adds 0 to the sum. */
#define SCAN(NAME, T, F, S, WIDE, LO, HI, ISF, ATTR)                                                            \
    ATTR static void NAME(acc_t *a, const void *vb, uint64_t n, uint64_t k0)                                    \
    {                                                                                                           \
        const T *p = vb;                                                                                        \
        T mn = HI, mx = LO;                                                                                     \
        S s = 0;                                                                                                \
        uint64_t nan = 0, bmin = UINT64_MAX, bmax = UINT64_MAX;                                                 \
        for (uint64_t b = 0; b < n; b += SBLK) {                                                                \
            uint64_t e = n - b < SBLK ? n - b : SBLK;                                                           \
            const T *q = p + b;                                                                                 \
            T lmn[LANES], lmx[LANES];                                                                           \
            WIDE ls[LANES];                                                                                     \
            uint64_t lnan[LANES];                                                                               \
            for (unsigned l = 0; l < LANES; l++) {                                                              \
                lmn[l] = HI;                                                                                    \
                lmx[l] = LO;                                                                                    \
                ls[l] = 0;                                                                                      \
                lnan[l] = 0;                                                                                    \
            }                                                                                                   \
            uint64_t i = 0;                                                                                     \
            for (; i + LANES <= e; i += LANES)                                                                  \
                for (unsigned l = 0; l < LANES; l++) {                                                          \
                    T v = q[i + l];                                                                             \
                    if (ISF) {                                                                                  \
                        bool isn = v != v;                                                                      \
                        lnan[l] += isn;                                                                         \
                        ls[l] += isn ? (WIDE)0 : (WIDE)v;                                                       \
                    } else {                                                                                    \
                        ls[l] += (WIDE)v;                                                                       \
                    }                                                                                           \
                    lmn[l] = v < lmn[l] ? v : lmn[l];                                                           \
                    lmx[l] = v > lmx[l] ? v : lmx[l];                                                           \
                }                                                                                               \
            for (; i < e; i++) {                                                                                \
                T v = q[i];                                                                                     \
                bool isn = ISF && v != v;                                                                       \
                lnan[0] += isn;                                                                                 \
                ls[0] += isn ? (WIDE)0 : (WIDE)v;                                                               \
                lmn[0] = v < lmn[0] ? v : lmn[0];                                                               \
                lmx[0] = v > lmx[0] ? v : lmx[0];                                                               \
            }                                                                                                   \
            T bmn = HI, bmx = LO;                                                                               \
            uint64_t bn = 0;                                                                                    \
            for (unsigned l = 0; l < LANES; l++) {                                                              \
                bmn = lmn[l] < bmn ? lmn[l] : bmn;                                                              \
                bmx = lmx[l] > bmx ? lmx[l] : bmx;                                                              \
                s += (S)ls[l];                                                                                  \
                bn += lnan[l];                                                                                  \
            }                                                                                                   \
            nan += bn;                                                                                          \
            if (bn < e) { /* a value that is not NaN: the block can hold the min or the max */                  \
                if (bmin == UINT64_MAX || bmn < mn) {                                                           \
                    mn = bmn;                                                                                   \
                    bmin = b;                                                                                   \
                }                                                                                               \
                if (bmax == UINT64_MAX || bmx > mx) {                                                           \
                    mx = bmx;                                                                                   \
                    bmax = b;                                                                                   \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
        a->F##sum += s; /* exact over every call: rounded once, by acc_sum */                                   \
        a->nan += nan;                                                                                          \
        a->n += n;                                                                                              \
        if (bmin == UINT64_MAX)                                                                                 \
            return; /* empty, or nothing but NaN */                                                             \
        /* positions only where this call improves on what the accumulator holds: a write scanned in many       \
         * blocks searches a few of them, not every one */                                                      \
        uint64_t kmn = bmin, kmx = bmax;                                                                        \
        if (!a->any || mn < (T)a->min.F) {                                                                      \
            while (!(p[kmn] == mn))                                                                             \
                kmn++;                                                                                          \
            a->min.F = mn;                                                                                      \
            a->kmin = k0 + kmn;                                                                                 \
        }                                                                                                       \
        if (!a->any || mx > (T)a->max.F) {                                                                      \
            while (!(p[kmx] == mx))                                                                             \
                kmx++;                                                                                          \
            a->max.F = mx;                                                                                      \
            a->kmax = k0 + kmx;                                                                                 \
        }                                                                                                       \
        a->any = true;                                                                                          \
    }
/* 64-bit integers: 128-bit block sums (the min/max reductions still vectorise) */
#if H5FL_SIMD /* the portable scan and its AVX2 and AVX-512 compilations */
#define SCAN3(NAME, ...)                                                                                        \
    SCAN(NAME, __VA_ARGS__, ) SCAN(NAME##_256, __VA_ARGS__, AVX2) SCAN(NAME##_512, __VA_ARGS__, AVX512)
#else
#define SCAN3(NAME, ...) SCAN(NAME, __VA_ARGS__, )
#endif
SCAN3(scan_i8, int8_t, i, i128_t, int64_t, INT8_MIN, INT8_MAX, 0)
SCAN3(scan_i16, int16_t, i, i128_t, int64_t, INT16_MIN, INT16_MAX, 0)
SCAN3(scan_i32, int32_t, i, i128_t, int64_t, INT32_MIN, INT32_MAX, 0)
SCAN3(scan_i64, int64_t, i, i128_t, i128_t, INT64_MIN, INT64_MAX, 0)
SCAN3(scan_u8, uint8_t, u, u128_t, uint64_t, 0, UINT8_MAX, 0)
SCAN3(scan_u16, uint16_t, u, u128_t, uint64_t, 0, UINT16_MAX, 0)
SCAN3(scan_u32, uint32_t, u, u128_t, uint64_t, 0, UINT32_MAX, 0)
SCAN3(scan_u64, uint64_t, u, u128_t, u128_t, 0, UINT64_MAX, 0)

/* Floats: the same scan with GCC/Clang vector extensions (SSE2 on any x86-64, NEON on aarch64), which
 * the auto-vectoriser does not produce for NaN-aware min/max; sums in double lanes. */
typedef double v2d_t __attribute__((vector_size(16)));
typedef int64_t v2l_t __attribute__((vector_size(16)));
typedef float v4f_t __attribute__((vector_size(16)));
typedef int32_t v4i_t __attribute__((vector_size(16)));
typedef double v4d_t __attribute__((vector_size(32)));
#define SEL(VI, VT, m, x, y) ((VT)((((VI)(x)) & (m)) | (((VI)(y)) & ~(m))))

#define SCANV(NAME, T, VT, VI, W, ST, CONV, ATTR)                                                               \
    ATTR static void NAME(acc_t *a, const void *vb, uint64_t n, uint64_t k0)                                    \
    {                                                                                                           \
        const T *p = vb;                                                                                        \
        T mn = INFINITY, mx = -INFINITY;                                                                        \
        double s = 0;                                                                                           \
        uint64_t nan = 0, bmin = UINT64_MAX, bmax = UINT64_MAX;                                                 \
        for (uint64_t b = 0; b < n; b += SBLK) {                                                                \
            uint64_t e = n - b < SBLK ? n - b : SBLK;                                                           \
            const T *q = p + b;                                                                                 \
            VT vmn[4], vmx[4];                                                                                  \
            ST vs[4];                                                                                           \
            VI vn[4];                                                                                           \
            for (unsigned u = 0; u < 4; u++) {                                                                  \
                vmn[u] = (VT){0} + (T)INFINITY;                                                                 \
                vmx[u] = (VT){0} - (T)INFINITY;                                                                 \
                vs[u] = (ST){0};                                                                                \
                vn[u] = (VI){0};                                                                                \
            }                                                                                                   \
            uint64_t i = 0;                                                                                     \
            for (; i + 4 * W <= e; i += 4 * W)                                                                  \
                for (unsigned u = 0; u < 4; u++) {                                                              \
                    VT v;                                                                                       \
                    memcpy(&v, q + i + u * W, sizeof v);                                                        \
                    VI isn = v != v;                                                                            \
                    vn[u] -= isn;                                                                               \
                    vs[u] += CONV((VT)((VI)v & ~isn));                                                          \
                    VI lt = v < vmn[u], gt = v > vmx[u];                                                        \
                    vmn[u] = SEL(VI, VT, lt, v, vmn[u]);                                                        \
                    vmx[u] = SEL(VI, VT, gt, v, vmx[u]);                                                        \
                }                                                                                               \
            T bmn = INFINITY, bmx = -INFINITY;                                                                  \
            uint64_t bn = 0;                                                                                    \
            for (unsigned u = 0; u < 4; u++)                                                                    \
                for (unsigned l = 0; l < W; l++) {                                                              \
                    bmn = vmn[u][l] < bmn ? vmn[u][l] : bmn;                                                    \
                    bmx = vmx[u][l] > bmx ? vmx[u][l] : bmx;                                                    \
                    bn += (uint64_t)vn[u][l];                                                                   \
                }                                                                                               \
            for (unsigned u = 0; u < 4; u++)                                                                    \
                for (unsigned l = 0; l < sizeof(ST) / sizeof(double); l++)                                      \
                    s += vs[u][l];                                                                              \
            for (; i < e; i++) {                                                                                \
                T v = q[i];                                                                                     \
                if (v != v) {                                                                                   \
                    bn++;                                                                                       \
                    continue;                                                                                   \
                }                                                                                               \
                s += (double)v;                                                                                 \
                bmn = v < bmn ? v : bmn;                                                                        \
                bmx = v > bmx ? v : bmx;                                                                        \
            }                                                                                                   \
            nan += bn;                                                                                          \
            if (bn < e) {                                                                                       \
                if (bmin == UINT64_MAX || bmn < mn) {                                                           \
                    mn = bmn;                                                                                   \
                    bmin = b;                                                                                   \
                }                                                                                               \
                if (bmax == UINT64_MAX || bmx > mx) {                                                           \
                    mx = bmx;                                                                                   \
                    bmax = b;                                                                                   \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
        a->sum += s;                                                                                            \
        a->nan += nan;                                                                                          \
        a->n += n;                                                                                              \
        if (bmin == UINT64_MAX)                                                                                 \
            return;                                                                                             \
        /* positions only where this call improves on what the accumulator holds: a write scanned in many       \
         * blocks searches a few of them, not every one */                                                      \
        uint64_t kmn = bmin, kmx = bmax;                                                                        \
        if (!a->any || mn < (T)a->min.f) {                                                                      \
            while (!(p[kmn] == mn))                                                                             \
                kmn++;                                                                                          \
            a->min.f = (double)mn;                                                                              \
            a->kmin = k0 + kmn;                                                                                 \
        }                                                                                                       \
        if (!a->any || mx > (T)a->max.f) {                                                                      \
            while (!(p[kmx] == mx))                                                                             \
                kmx++;                                                                                          \
            a->max.f = (double)mx;                                                                              \
            a->kmax = k0 + kmx;                                                                                 \
        }                                                                                                       \
        a->any = true;                                                                                          \
    }
#define CONV_ID(x) (x)
#define CONV_F2D(x) __builtin_convertvector((x), v4d_t)
SCANV(scan_f64, double, v2d_t, v2l_t, 2, v2d_t, CONV_ID, )
SCANV(scan_f32, float, v4f_t, v4i_t, 4, v4d_t, CONV_F2D, )

/* The same scans and the histogram in wider vectors where the processor has them — 512-bit (AVX-512) or
 * 256-bit (AVX2), chosen at run time by simd_level() — with the same results as the portable code: the
 * same operations on the same values (float sums aside, which add in another order: floating-point sums
 * are not exact anyway; integer sums are exact in every variant). */
#if H5FL_SIMD
typedef double v8d_t __attribute__((vector_size(64)));
typedef int64_t v8l_t __attribute__((vector_size(64)));
typedef float v16f_t __attribute__((vector_size(64)));
typedef int32_t v16i_t __attribute__((vector_size(64)));
typedef double v16d_t __attribute__((vector_size(128)));
typedef int64_t v4l_t __attribute__((vector_size(32)));
typedef float v8f_t __attribute__((vector_size(32)));
typedef int32_t v8i_t __attribute__((vector_size(32)));
#define CONV_F2D8(x) __builtin_convertvector((x), v8d_t)
#define CONV_F2D16(x) __builtin_convertvector((x), v16d_t)
SCANV(scan_f64_512, double, v8d_t, v8l_t, 8, v8d_t, CONV_ID, AVX512)
SCANV(scan_f32_512, float, v16f_t, v16i_t, 16, v16d_t, CONV_F2D16, AVX512)
SCANV(scan_f64_256, double, v4d_t, v4l_t, 4, v4d_t, CONV_ID, AVX2)
SCANV(scan_f32_256, float, v8f_t, v8i_t, 8, v8d_t, CONV_F2D8, AVX2)
#endif

/* 2: 512-bit code, 1: 256-bit, 0: portable — the widest the processor has, capped by
 * H5FLOW_LOG_STATS_SIMD ("0": portable, "256": at most AVX2; for comparing them, docs/FORMAT.md). A
 * property of the process, probed once. */
static int simd_level(void)
{
    static int v = -1; /* the same answer for every caller: a benign race */
    if (v < 0) {
        const char *env = getenv("H5FLOW_LOG_STATS_SIMD");
        int lvl = 0;
#if H5FL_SIMD
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx2"))
            lvl = 1;
        if (lvl && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
            lvl = 2;
#endif
        if (env && strcmp(env, "0") == 0)
            lvl = 0;
        else if (env && strcmp(env, "256") == 0 && lvl > 1)
            lvl = 1;
        v = lvl;
    }
    return v;
}

#if H5FL_SIMD
#define SIMD_OR(F, ARGS) (simd_level() == 2 ? F##_512 ARGS : simd_level() == 1 ? F##_256 ARGS : F ARGS)
#else
#define SIMD_OR(F, ARGS) F ARGS
#endif

/* 1-byte integers, with a count table: count the n elements, then look for values outside what the
 * accumulator held before — they can only be new, and only in the rows below its min or above its max
 * (for data that spans the whole range, none). A new min (max) occurs first in this call, so its first
 * position is the first of its byte here. */
static sval_t bytes_val(const acc_t *a, int i)
{
    sval_t v;
    if (a->kind == K_INT)
        v.i = i - 128;
    else
        v.u = (uint64_t)i;
    return v;
}

static int bytes_idx(const acc_t *a, sval_t v) { return a->kind == K_INT ? (int)(v.i + 128) : (int)v.u; }

static void scan_bytes(acc_t *a, const void *buf, uint64_t n, uint64_t k0)
{
    h5fl_bytecount_t *c = a->bc;
    unsigned flip = a->kind == K_INT ? 0x80u : 0u;
    if (!n)
        return;
    h5fl_bc_count(c, buf, n, flip);
    a->n += n;
    int lo = a->any ? h5fl_bc_first(c, 0, bytes_idx(a, a->min)) : h5fl_bc_first(c, 0, 256);
    int hi = a->any ? h5fl_bc_last(c, bytes_idx(a, a->max) + 1, 256) : h5fl_bc_last(c, 0, 256);
    /* (a new row's value is in buf: memchr finds it) */
    if (lo >= 0) {
        const uint8_t *q = memchr(buf, (int)((unsigned)lo ^ flip), n);
        a->min = bytes_val(a, lo);
        a->kmin = k0 + (q ? (uint64_t)(q - (const uint8_t *)buf) : 0);
        h5fl_bc_touch(c, lo);
    }
    if (hi >= 0) {
        const uint8_t *q = memchr(buf, (int)((unsigned)hi ^ flip), n);
        a->max = bytes_val(a, hi);
        a->kmax = k0 + (q ? (uint64_t)(q - (const uint8_t *)buf) : 0);
        h5fl_bc_touch(c, hi);
    }
    a->any = true;
}

static void acc_scan(acc_t *a, const void *buf, uint64_t n, uint64_t k0)
{
    if (a->bc) {
        scan_bytes(a, buf, n, k0);
        return;
    }
    switch (a->kind * 16 + (int)a->esize) {
        case K_INT * 16 + 1: SIMD_OR(scan_i8, (a, buf, n, k0)); break;
        case K_INT * 16 + 2: SIMD_OR(scan_i16, (a, buf, n, k0)); break;
        case K_INT * 16 + 4: SIMD_OR(scan_i32, (a, buf, n, k0)); break;
        case K_INT * 16 + 8: SIMD_OR(scan_i64, (a, buf, n, k0)); break;
        case K_UINT * 16 + 1: SIMD_OR(scan_u8, (a, buf, n, k0)); break;
        case K_UINT * 16 + 2: SIMD_OR(scan_u16, (a, buf, n, k0)); break;
        case K_UINT * 16 + 4: SIMD_OR(scan_u32, (a, buf, n, k0)); break;
        case K_UINT * 16 + 8: SIMD_OR(scan_u64, (a, buf, n, k0)); break;
        case K_FLOAT * 16 + 4: SIMD_OR(scan_f32, (a, buf, n, k0)); break;
        case K_FLOAT * 16 + 8: SIMD_OR(scan_f64, (a, buf, n, k0)); break;
        default: break;
    }
}

/* The histogram: H5FL_STATS_BINS equal bins over [min, max] of the same elements (a second pass, after
 * acc_scan saw them all; bin = floor((v - min) * bins / (max - min)), the last bin closed, as numpy's
 * histogram computes it before its edge corrections); none when min or max is infinite. */
static bool hist_ok(const acc_t *a)
{
    return a->any && isfinite(as_double(a->kind, a->min)) && isfinite(as_double(a->kind, a->max));
}

#define HIST(NAME, T)                                                                                           \
    static void NAME(acc_t *a, const void *vb, uint64_t n)                                                      \
    {                                                                                                           \
        const T *p = vb;                                                                                        \
        double lo = as_double(a->kind, a->min), w = as_double(a->kind, a->max) - lo;                            \
        double sc = w > 0 ? H5FL_STATS_BINS / w : 0;                                                            \
        uint64_t h[4][H5FL_STATS_BINS + 1];                                                                     \
        uint32_t idx[SBLK];                                                                                     \
        memset(h, 0, sizeof h);                                                                                 \
        for (uint64_t b = 0; b < n; b += SBLK) {                                                                \
            uint64_t e = n - b < SBLK ? n - b : SBLK;                                                           \
            for (uint64_t i = 0; i < e; i++) { /* NaN goes to the extra bin H5FL_STATS_BINS */                  \
                double x = ((double)p[b + i] - lo) * sc;                                                        \
                x = x > 0 ? x : 0;                                                                              \
                x = x < H5FL_STATS_BINS - 1 ? x : H5FL_STATS_BINS - 1;                                          \
                uint32_t k = (uint32_t)x;                                                                       \
                idx[i] = p[b + i] != p[b + i] ? H5FL_STATS_BINS : k;                                            \
            }                                                                                                   \
            uint64_t i = 0;                                                                                     \
            for (; i + 4 <= e; i += 4) {                                                                        \
                h[0][idx[i]]++;                                                                                 \
                h[1][idx[i + 1]]++;                                                                             \
                h[2][idx[i + 2]]++;                                                                             \
                h[3][idx[i + 3]]++;                                                                             \
            }                                                                                                   \
            for (; i < e; i++)                                                                                  \
                h[0][idx[i]]++;                                                                                 \
        }                                                                                                       \
        for (unsigned k = 0; k < H5FL_STATS_BINS; k++)                                                          \
            a->hist[k] += h[0][k] + h[1][k] + h[2][k] + h[3][k];                                                \
    }
HIST(hist_i8, int8_t)
HIST(hist_i16, int16_t)
HIST(hist_i32, int32_t)
HIST(hist_i64, int64_t)
HIST(hist_u8, uint8_t)
HIST(hist_u16, uint16_t)
HIST(hist_u32, uint32_t)
HIST(hist_u64, uint64_t)
HIST(hist_f32, float)
HIST(hist_f64, double)

#if H5FL_SIMD
/* L elements at a time as doubles (L = 8 in 512-bit vectors, 4 in 256-bit ones): the bin of each,
 * b = min(15, (v - min) * scale) truncated, becomes a one-hot nibble 1 << 4b added into a 64-bit lane —
 * 16 four-bit counters per lane, emptied into the totals every 15 vectors, so there is no scatter to
 * memory per element. v >= min, so b >= 0; NaN stays NaN through the arithmetic and converts to a
 * negative number whose shift count is out of range: it adds 0 (the portable code puts it in a bin that
 * is dropped). The scale is finite and positive here (the portable code handles the rest). */
#define HISTV(NAME, SUF, ATTR, T, LOAD, VD, VI, P, L, SET1I, STOREU)                                          \
    ATTR static void NAME##SUF(acc_t *a, const void *vb, uint64_t n)                                          \
    {                                                                                                         \
        const T *p = vb;                                                                                      \
        double lo = as_double(a->kind, a->min), w = as_double(a->kind, a->max) - lo;                          \
        if (!(w > 0 && w < INFINITY)) {                                                                       \
            NAME(a, vb, n);                                                                                   \
            return;                                                                                           \
        }                                                                                                     \
        const VD vlo = P##_set1_pd(lo), vsc = P##_set1_pd(H5FL_STATS_BINS / w);                               \
        const VD top = P##_set1_pd(H5FL_STATS_BINS - 1);                                                      \
        const VI one = SET1I(1), zero = SET1I(0);                                                             \
        uint64_t tot[H5FL_STATS_BINS] = {0}, i = 0;                                                           \
        while (n - i >= 2 * L) {                                                                              \
            uint64_t e = (n - i) / (2 * L) * (2 * L);                                                         \
            e = e < 15 * 2 * L ? e : 15 * 2 * L; /* <= 15 counts per nibble */                                \
            VI c0 = zero, c1 = zero;                                                                          \
            for (uint64_t j = i; j < i + e; j += 2 * L) {                                                     \
                VD x0 = P##_min_pd(top, P##_mul_pd(P##_sub_pd(LOAD(p + j), vlo), vsc));                       \
                VD x1 = P##_min_pd(top, P##_mul_pd(P##_sub_pd(LOAD(p + j + L), vlo), vsc));                   \
                VI s0 = P##_slli_epi64(P##_cvtepi32_epi64(P##_cvttpd_epi32(x0)), 2);                          \
                VI s1 = P##_slli_epi64(P##_cvtepi32_epi64(P##_cvttpd_epi32(x1)), 2);                          \
                c0 = P##_add_epi64(c0, P##_sllv_epi64(one, s0));                                              \
                c1 = P##_add_epi64(c1, P##_sllv_epi64(one, s1));                                              \
            }                                                                                                 \
            uint64_t l0[L], l1[L];                                                                            \
            STOREU((void *)l0, c0);                                                                           \
            STOREU((void *)l1, c1);                                                                           \
            for (unsigned l = 0; l < L; l++)                                                                  \
                for (unsigned k = 0; k < H5FL_STATS_BINS; k++)                                                \
                    tot[k] += ((l0[l] >> (4 * k)) & 15) + ((l1[l] >> (4 * k)) & 15);                          \
            i += e;                                                                                           \
        }                                                                                                     \
        NAME(a, p + i, n - i); /* the last < 2L elements */                                                   \
        for (unsigned k = 0; k < H5FL_STATS_BINS; k++)                                                        \
            a->hist[k] += tot[k];                                                                             \
    }

#define ST512(q, v) _mm512_storeu_si512((q), (v))
#define ST256(q, v) _mm256_storeu_si256((__m256i *)(q), (v))
#define HIST512(NAME, T, LOAD)                                                                                 \
    HISTV(NAME, _512, AVX512, T, LOAD, __m512d, __m512i, _mm512, 8, _mm512_set1_epi64, ST512)
#define HIST256(NAME, T, LOAD)                                                                                 \
    HISTV(NAME, _256, AVX2, T, LOAD, __m256d, __m256i, _mm256, 4, _mm256_set1_epi64x, ST256)
#define QP(q) ((const void *)(q))
#define LD_I8(q) _mm512_cvtepi32_pd(_mm256_cvtepi8_epi32(_mm_loadl_epi64(QP(q))))
#define LD_U8(q) _mm512_cvtepu32_pd(_mm256_cvtepu8_epi32(_mm_loadl_epi64(QP(q))))
#define LD_I16(q) _mm512_cvtepi32_pd(_mm256_cvtepi16_epi32(_mm_loadu_si128(QP(q))))
#define LD_U16(q) _mm512_cvtepu32_pd(_mm256_cvtepu16_epi32(_mm_loadu_si128(QP(q))))
#define LD_I32(q) _mm512_cvtepi32_pd(_mm256_loadu_si256(QP(q)))
#define LD_U32(q) _mm512_cvtepu32_pd(_mm256_loadu_si256(QP(q)))
#define LD_I64(q) _mm512_cvtepi64_pd(_mm512_loadu_si512(QP(q)))
#define LD_U64(q) _mm512_cvtepu64_pd(_mm512_loadu_si512(QP(q)))
#define LD_F32(q) _mm512_cvtps_pd(_mm256_loadu_ps(q))
#define LD_F64(q) _mm512_loadu_pd(q)
HIST512(hist_i8, int8_t, LD_I8)
HIST512(hist_i16, int16_t, LD_I16)
HIST512(hist_i32, int32_t, LD_I32)
HIST512(hist_i64, int64_t, LD_I64)
HIST512(hist_u8, uint8_t, LD_U8)
HIST512(hist_u16, uint16_t, LD_U16)
HIST512(hist_u32, uint32_t, LD_U32)
HIST512(hist_u64, uint64_t, LD_U64)
HIST512(hist_f32, float, LD_F32)
HIST512(hist_f64, double, LD_F64)
/* AVX2 converts no 64-bit or unsigned 32-bit integers to doubles: those use the portable code there */
static inline int32_t ld4(const void *q)
{
    int32_t v;
    memcpy(&v, q, sizeof v);
    return v;
}
#define LD4_I8(q) _mm256_cvtepi32_pd(_mm_cvtepi8_epi32(_mm_cvtsi32_si128(ld4(q))))
#define LD4_U8(q) _mm256_cvtepi32_pd(_mm_cvtepu8_epi32(_mm_cvtsi32_si128(ld4(q))))
#define LD4_I16(q) _mm256_cvtepi32_pd(_mm_cvtepi16_epi32(_mm_loadl_epi64(QP(q))))
#define LD4_U16(q) _mm256_cvtepi32_pd(_mm_cvtepu16_epi32(_mm_loadl_epi64(QP(q))))
#define LD4_I32(q) _mm256_cvtepi32_pd(_mm_loadu_si128(QP(q)))
#define LD4_F32(q) _mm256_cvtps_pd(_mm_loadu_ps(q))
#define LD4_F64(q) _mm256_loadu_pd(q)
HIST256(hist_i8, int8_t, LD4_I8)
HIST256(hist_i16, int16_t, LD4_I16)
HIST256(hist_i32, int32_t, LD4_I32)
HIST256(hist_u8, uint8_t, LD4_U8)
HIST256(hist_u16, uint16_t, LD4_U16)
HIST256(hist_f32, float, LD4_F32)
HIST256(hist_f64, double, LD4_F64)
#define hist_i64_256 hist_i64
#define hist_u32_256 hist_u32
#define hist_u64_256 hist_u64
#endif

/* The histogram of every element counted in a->bc at once: each value that occurs, binned with the
 * formula of HIST (bit for bit: the same operations on the same doubles; HISTV's agree with it), adds its
 * count. Valid when hist_scan is given the same elements as acc_scan was, as everywhere here: the first
 * call takes them all, later ones (the rest of the same elements) add nothing. */
static void hist_bytes(acc_t *a)
{
    if (a->hist_done)
        return;
    a->hist_done = true;
    const h5fl_bytecount_t *c = a->bc;
    double lo = as_double(a->kind, a->min), w = as_double(a->kind, a->max) - lo;
    double sc = w > 0 ? H5FL_STATS_BINS / w : 0;
    for (int i = bytes_idx(a, a->min); i <= bytes_idx(a, a->max); i++) {
        uint64_t cnt = h5fl_bc_get(c, i);
        if (!cnt)
            continue;
        double x = (as_double(a->kind, bytes_val(a, i)) - lo) * sc;
        x = x > 0 ? x : 0;
        x = x < H5FL_STATS_BINS - 1 ? x : H5FL_STATS_BINS - 1;
        a->hist[(uint32_t)x] += cnt;
    }
}

/* Done with a->bc (after the histogram, if any): the exact sum from the counts; the table may go. */
static void bytes_settle(acc_t *a)
{
    if (!a->bc)
        return;
    if (a->any)
        for (int i = bytes_idx(a, a->min); i <= bytes_idx(a, a->max); i++) {
            uint64_t cnt = h5fl_bc_get(a->bc, i);
            if (a->kind == K_INT)
                a->isum += (i128_t)(i - 128) * (i128_t)cnt;
            else
                a->usum += (u128_t)i * cnt;
        }
    a->bc = NULL;
}

static void hist_scan(acc_t *a, const void *buf, uint64_t n)
{
    if (a->bc) {
        hist_bytes(a);
        return;
    }
    switch (a->kind * 16 + (int)a->esize) {
        case K_INT * 16 + 1: SIMD_OR(hist_i8, (a, buf, n)); break;
        case K_INT * 16 + 2: SIMD_OR(hist_i16, (a, buf, n)); break;
        case K_INT * 16 + 4: SIMD_OR(hist_i32, (a, buf, n)); break;
        case K_INT * 16 + 8: SIMD_OR(hist_i64, (a, buf, n)); break;
        case K_UINT * 16 + 1: SIMD_OR(hist_u8, (a, buf, n)); break;
        case K_UINT * 16 + 2: SIMD_OR(hist_u16, (a, buf, n)); break;
        case K_UINT * 16 + 4: SIMD_OR(hist_u32, (a, buf, n)); break;
        case K_UINT * 16 + 8: SIMD_OR(hist_u64, (a, buf, n)); break;
        case K_FLOAT * 16 + 4: SIMD_OR(hist_f32, (a, buf, n)); break;
        case K_FLOAT * 16 + 8: SIMD_OR(hist_f64, (a, buf, n)); break;
        default: break;
    }
}

/* Linear element index of the k-th element of a selection given as (start, len) runs. */
static uint64_t run_pos(const uint8_t *runs, uint64_t nruns, uint64_t k)
{
    for (uint64_t i = 0; i < nruns; i++) {
        uint64_t s = h5fl_get_u64(runs + i * 16), l = h5fl_get_u64(runs + i * 16 + 8);
        if (k < l)
            return s + k;
        k -= l;
    }
    return UINT64_MAX;
}

/* ---------------------------------------------------------------- the writer side */

static void sw_free(h5fl_stats_w_t *s)
{
    if (!s)
        return;
    if (s->free_fn && s->state)
        s->free_fn(s->state);
    /* the library stays loaded: code of it may still be referenced (atexit handlers, thread keys) */
    if (s->fd >= 0)
        close(s->fd);
    free(s->path);
    free(s->buf);
    free(s->udf_lib);
    free(s->udf_sym);
    free(s->udf_err);
    free(s->pend);
    free(s->bc);
    free(s);
}

void h5fl_stats_close(h5fl_writer_t *w)
{
    sw_free(w->stats);
    w->stats = NULL;
}

/* Length of the valid statistics records at the start of buf[0..len). */
static size_t valid_prefix(const uint8_t *b, size_t len)
{
    size_t pos = 0;
    while (len - pos >= SREC_HDR + 4) {
        uint32_t tot = h5fl_get_u32(b + pos + 4);
        if (h5fl_get_u32(b + pos) != H5FL_STATS_MAGIC || tot < SREC_HDR + 4 || tot > len - pos ||
            h5fl_crc32c(0, b + pos, tot - 4) != h5fl_get_u32(b + pos + tot - 4))
            break;
        pos += tot;
    }
    return pos;
}

static int spec_from_plist(hid_t pl, const char *what, char **lib, char **sym);

static int read_udf_file(const char *dir, char **lib, char **sym)
{
    char *p = h5fl_join(dir, H5FL_UDF_FILE);
    void *b = NULL;
    size_t l = 0;
    *lib = *sym = NULL;
    if (!p)
        return -1;
    struct stat st;
    if (stat(p, &st) != 0) {
        free(p);
        return 0; /* no user data function */
    }
    int rc = h5fl_read_file(p, &b, &l);
    free(p);
    if (rc != 0)
        return -1;
    static const char head[] = "h5flow_log udf 1\n";
    char *s = b;
    char *nl1 = l > sizeof head - 1 ? memchr(s + sizeof head - 1, '\n', l - (sizeof head - 1)) : NULL;
    char *nl2 = nl1 ? memchr(nl1 + 1, '\n', l - (size_t)(nl1 + 1 - s)) : NULL;
    if (l < sizeof head - 1 || memcmp(s, head, sizeof head - 1) != 0 || !nl2 || nl2 != s + l - 1) {
        free(b);
        h5fl_err("the user data function file %s/%s is malformed (expected \"h5flow_log udf 1\\nLIBRARY\\n"
                 "SYMBOL\\n\")",
                 dir, H5FL_UDF_FILE);
        return -1;
    }
    *nl1 = *nl2 = 0;
    *lib = h5fl_strdup(s + sizeof head - 1);
    *sym = h5fl_strdup(nl1 + 1);
    free(b);
    return *lib && *sym ? 0 : -1;
}

void h5fl_stats_open(h5fl_dset_t *d, h5fl_writer_t *w)
{
    const char *env = getenv("H5FLOW_LOG_STATS"); /* "0": no statistics records (docs/FORMAT.md) */
    if (env && strcmp(env, "0") == 0)
        return;
    size_t esize;
    int kind = d->vstr || d->blob ? K_NONE : kind_of(d->type, &esize);
    char *lib = NULL, *sym = NULL;
    char udf_load_err[600] = "";
    /* the function given when this process opened the dataset (access list) wins over the dataset's */
    int st = spec_from_plist(d->dapl, "dataset access", &lib, &sym);
    if (st < 0 || (st == 0 && read_udf_file(d->o.dir, &lib, &sym) != 0)) {
        /* recorded as the failure of every write's function: the writes still land */
        snprintf(udf_load_err, sizeof udf_load_err, "%s", h5fl_err_msg()[0] ? h5fl_err_msg() : "out of memory");
        h5fl_err_clear();
        free(lib);
        free(sym);
        lib = sym = NULL;
    }
    if (kind == K_NONE && !lib && !udf_load_err[0]) {
        free(sym);
        return; /* nothing to record for this type */
    }
    h5fl_stats_w_t *s = calloc(1, sizeof *s);
    char name[64];
    snprintf(name, sizeof name, H5FL_STATS_PREFIX "%llu.%u", (unsigned long long)w->epoch, w->id);
    if (!s || !(s->path = h5fl_join(d->o.dir, name))) {
        free(s);
        free(lib);
        free(sym);
        h5fl_err_clear();
        return;
    }
    s->fd = -1;
    s->kind = kind;
    s->esize = kind == K_NONE ? 0 : esize;
    s->udf_lib = lib;
    s->udf_sym = sym;
    if (udf_load_err[0])
        s->udf_err = h5fl_strdup(udf_load_err);
    s->fd = h5fl_open_file(s->path, O_RDWR | O_CREAT, 0644);
    void *b = NULL;
    size_t l = 0;
    if (s->fd < 0 || h5fl_read_file(s->path, &b, &l) != 0) {
        h5fl_err_clear();
        sw_free(s);
        return; /* no statistics from this writer: readers compute from the data */
    }
    /* Reopened in the same epoch: continue after the last complete record (a torn tail is cut). */
    size_t v = valid_prefix(b, l);
    free(b);
    if (v != l && ftruncate(s->fd, (off_t)v) != 0) {
        sw_free(s);
        return;
    }
    s->end = v;
    w->stats = s;
}

static void udf_load(h5fl_stats_w_t *s)
{
    s->udf_tried = true;
    if (!s->udf_lib)
        return;
    char msg[UDF_MSG_MAX];
    dlerror();
    void *h = dlopen(s->udf_lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(msg, sizeof msg, "cannot load the user data function library %s: %s", s->udf_lib,
                 e ? e : "dlopen failed");
        s->udf_err = h5fl_strdup(msg);
        return;
    }
    void *f = dlsym(h, s->udf_sym);
    if (!f) {
        snprintf(msg, sizeof msg, "the library %s has no symbol '%s' (the user data function)", s->udf_lib,
                 s->udf_sym);
        s->udf_err = h5fl_strdup(msg);
        return;
    }
    char fname[H5FLOW_UDF_SPEC_MAX + 8];
    snprintf(fname, sizeof fname, "%s_free", s->udf_sym);
    s->lib = h;
    /* POSIX: a function pointer read from dlsym's object pointer */
    memcpy(&s->fn, &f, sizeof f);
    void *ff = dlsym(h, fname);
    if (ff)
        memcpy(&s->free_fn, &ff, sizeof ff);
}

static int udf_put(h5flow_udf_result_t *res, const char *key, double value)
{
    size_t kl = key ? strlen(key) : 0;
    if (kl == 0 || kl > H5FLOW_UDF_KEY_MAX)
        return -1;
    for (unsigned i = 0; i < res->n; i++)
        if (strcmp(res->key[i], key) == 0) {
            res->val[i] = value;
            return 0;
        }
    if (res->n >= H5FLOW_UDF_KEYS_MAX)
        return -1;
    memcpy(res->key[res->n], key, kl + 1);
    res->val[res->n++] = value;
    return 0;
}

static bool sbuf_room(h5fl_stats_w_t *s, size_t need)
{
    if (s->len + need <= s->cap)
        return true;
    size_t n = s->cap ? s->cap : 4096;
    while (n < s->len + need)
        n *= 2;
    uint8_t *nb = realloc(s->buf, n);
    if (!nb)
        return false;
    s->buf = nb;
    s->cap = n;
    return true;
}

void h5fl_stats_arm(h5fl_dset_t *d, uint64_t nbytes)
{
    h5fl_stats_w_t *s = d->w ? d->w->stats : NULL;
    if (!s)
        return;
    s->armed = false;
    if (s->broken || s->kind == K_NONE || nbytes % s->esize ||
        (!s->pend && !(s->pend = malloc(sizeof *s->pend))))
        return; /* h5fl_stats_note computes what it needs from the data */
    memset(s->pend, 0, sizeof *s->pend);
    s->pend->kind = s->kind;
    s->pend->esize = s->esize;
    if (s->esize == 1 && !s->bc && (s->bc = malloc(sizeof *s->bc)))
        h5fl_bc_init(s->bc);
    if (s->esize == 1 && s->bc) { /* (without one: the scans) */
        h5fl_bc_reset(s->bc);    /* clears only the rows the last write used */
        s->pend->bc = s->bc;
    }
    s->want = nbytes;
    s->seen = s->hseen = 0;
    s->armed = true;
}

bool h5fl_stats_armed(const h5fl_writer_t *w) { return w->stats && w->stats->armed; }

void h5fl_stats_scan(h5fl_writer_t *w, const void *p, size_t len)
{
    h5fl_stats_w_t *s = w->stats;
    if (!s || !s->armed)
        return;
    if (s->hseen || len > s->want - s->seen || len % s->esize) {
        s->armed = false; /* not the order this was made for: computed from the data instead */
        return;
    }
    acc_scan(s->pend, p, len / s->esize, s->seen / s->esize);
    s->seen += len;
    if (s->seen == s->want)
        s->pend->has_hist = hist_ok(s->pend);
}

void h5fl_stats_hist(h5fl_writer_t *w, const void *p, size_t len)
{
    h5fl_stats_w_t *s = w->stats;
    if (!s || !s->armed)
        return;
    if (s->seen != s->want || len > s->want - s->hseen || len % s->esize) {
        s->armed = false;
        return;
    }
    if (s->pend->has_hist)
        hist_scan(s->pend, p, len / s->esize);
    s->hseen += len;
}

void h5fl_stats_note(h5fl_dset_t *d, const h5fl_record_t *r, const runs_ctx_t *runs, const void *data)
{
    h5fl_writer_t *w = d->w;
    h5fl_stats_w_t *s = w ? w->stats : NULL;
    bool armed = s && s->armed;
    if (s)
        s->armed = false; /* what the fused passes computed belongs to this write or to none */
    if (!s || s->broken || (r->flags & H5FL_REC_FILL) || !(r->flags & H5FL_REC_DCRC) || !data)
        return;
    uint64_t n = runs->elems;
    acc_t a = {0};
    a.kind = s->kind;
    a.esize = s->esize;
    h5fl_bytecount_t bc; /* 1-byte integers not computed by the fused passes */
    /* a filtered write's record holds its filtered length; `data` is its bytes before filtering */
    uint64_t raw = (r->flags & H5FL_REC_FILTER) ? r->raw : r->nbytes;
    bool fused =
        armed && !(r->flags & H5FL_REC_FILTER) && s->seen == raw && (s->hseen == 0 || s->hseen == raw);
    if (a.kind != K_NONE && n * a.esize == raw && fused) {
        a = *s->pend; /* the first pass ran with the checksum; the histogram too if the write went out in chunks */
        if (a.has_hist && s->hseen == 0)
            hist_scan(&a, data, n);
    } else if (a.kind != K_NONE && n * a.esize == raw) {
        if (a.esize == 1) {
            h5fl_bc_init(&bc);
            a.bc = &bc;
        }
        acc_scan(&a, data, n, 0);
        if ((a.has_hist = hist_ok(&a)))
            hist_scan(&a, data, n);
    } else {
        a.kind = K_NONE;
    }
    bytes_settle(&a);
    /* the user data function */
    int ustat = UDF_NONE;
    char umsg[UDF_MSG_MAX] = "";
    h5flow_udf_result_t *res = NULL;
    if (s->udf_lib || s->udf_err) {
        if (!s->udf_tried && !s->udf_err)
            udf_load(s);
        if (s->udf_err) {
            ustat = UDF_FAILED;
            snprintf(umsg, sizeof umsg, "%s", s->udf_err);
        } else if (!(res = calloc(1, sizeof *res))) {
            ustat = UDF_FAILED;
            snprintf(umsg, sizeof umsg, "out of memory for the user data function's result");
        } else {
            size_t es;
            int k = kind_of(d->type, &es);
            h5flow_udf_write_t uw = {0};
            uw.abi_version = H5FLOW_UDF_ABI_VERSION;
            uw.dataset = d->o.path;
            uw.type = d->type;
            uw.kind = k == K_INT ? H5FLOW_UDF_INT : k == K_UINT ? H5FLOW_UDF_UINT : k == K_FLOAT ? H5FLOW_UDF_FLOAT : H5FLOW_UDF_OTHER;
            uw.esize = d->esize;
            uw.buf = data;
            uw.nelems = n;
            uw.rank = (int)r->rank;
            uw.dims = r->dims;
            uw.nruns = runs->n;
            uint64_t *rv = runs->n ? malloc(runs->n * 16) : NULL;
            for (size_t i = 0; rv && i < runs->n * 2; i++)
                rv[i] = h5fl_get_u64(runs->buf + i * 8);
            uw.runs = rv;
            uw.writer = w->id;
            uw.state = &s->state;
            char emsg[UDF_MSG_MAX] = "";
            if (runs->n && !rv) {
                ustat = UDF_FAILED;
                snprintf(umsg, sizeof umsg, "out of memory for the user data function's runs");
            } else if (s->fn(&uw, res, udf_put, emsg, sizeof emsg) != 0) {
                ustat = UDF_FAILED;
                emsg[sizeof emsg - 1] = 0;
                snprintf(umsg, sizeof umsg, "%s returned an error: %s", s->udf_sym,
                         emsg[0] ? emsg : "(no message)");
            } else {
                ustat = UDF_OK;
            }
            free(rv);
        }
    }
    if (a.kind == K_NONE && ustat == UDF_NONE) {
        free(res);
        return;
    }
    size_t ulen = 0;
    if (ustat == UDF_OK) {
        ulen = 4;
        for (unsigned i = 0; i < res->n; i++)
            ulen += 2 + strlen(res->key[i]) + 8;
    } else if (ustat == UDF_FAILED) {
        ulen = strlen(umsg);
    }
    unsigned nbins = a.has_hist ? H5FL_STATS_BINS : 0;
    size_t tot = SREC_HDR + 8 * (size_t)r->rank + 8 * (size_t)nbins + ulen + 4;
    if (!sbuf_room(s, tot)) {
        free(res);
        return; /* no record: readers compute this write's numbers from its data */
    }
    uint8_t *p = s->buf + s->len;
    memset(p, 0, SREC_HDR);
    h5fl_put_u32(p, H5FL_STATS_MAGIC);
    h5fl_put_u32(p + 4, (uint32_t)tot);
    h5fl_put_u64(p + 8, r->seq.epoch);
    h5fl_put_u64(p + 16, r->seq.order);
    h5fl_put_u64(p + 24, r->data_off + r->nbytes);
    h5fl_put_u32(p + 32, r->dcrc);
    h5fl_put_u32(p + 36, (uint32_t)a.kind | ((uint32_t)a.esize << 8));
    h5fl_put_u64(p + 40, n);
    h5fl_put_u64(p + 48, a.nan);
    h5fl_put_u64(p + 56, a.min.u);
    h5fl_put_u64(p + 64, a.max.u);
    sval_t sum = {.f = acc_sum(&a)};
    h5fl_put_u64(p + 72, sum.u);
    h5fl_put_u64(p + 80, a.any ? run_pos(runs->buf, runs->n, a.kmin) : UINT64_MAX);
    h5fl_put_u64(p + 88, a.any ? run_pos(runs->buf, runs->n, a.kmax) : UINT64_MAX);
    uint64_t first = UINT64_MAX, last = 0;
    for (size_t i = 0; i < runs->n; i++) {
        uint64_t st = h5fl_get_u64(runs->buf + i * 16), ln = h5fl_get_u64(runs->buf + i * 16 + 8);
        if (st < first)
            first = st;
        if (ln && st + ln - 1 > last)
            last = st + ln - 1;
    }
    h5fl_put_u64(p + 96, first);
    h5fl_put_u64(p + 104, last);
    h5fl_put_u32(p + 112, r->rank);
    h5fl_put_u32(p + 116, nbins);
    h5fl_put_u32(p + 120, (uint32_t)ustat);
    h5fl_put_u32(p + 124, (uint32_t)ulen);
    uint8_t *q = p + SREC_HDR;
    for (unsigned k = 0; k < r->rank; k++, q += 8)
        h5fl_put_u64(q, r->dims[k]);
    for (unsigned k = 0; k < nbins; k++, q += 8)
        h5fl_put_u64(q, a.hist[k]);
    if (ustat == UDF_OK) {
        h5fl_put_u32(q, res->n);
        q += 4;
        for (unsigned i = 0; i < res->n; i++) {
            size_t kl = strlen(res->key[i]);
            q[0] = (uint8_t)(kl & 0xFF);
            q[1] = (uint8_t)(kl >> 8);
            memcpy(q + 2, res->key[i], kl);
            sval_t v = {.f = res->val[i]};
            h5fl_put_u64(q + 2 + kl, v.u);
            q += 2 + kl + 8;
        }
    } else if (ustat == UDF_FAILED) {
        memcpy(q, umsg, ulen);
        q += ulen;
    }
    h5fl_put_u32(q, h5fl_crc32c(0, p, tot - 4));
    s->len += tot;
    free(res);
    if (s->len >= SBUF_FLUSH && h5fl_writer_flush(w, false) != 0)
        h5fl_err_clear(); /* the write itself is in the buffers; its flush error comes back at close */
}

void h5fl_stats_flush(h5fl_writer_t *w, bool sync)
{
    h5fl_stats_w_t *s = w->stats;
    if (!s || !s->len)
        return;
    if (s->broken) {
        s->len = 0;
        return;
    }
    if (h5fl_pwrite_all(s->fd, s->buf, s->len, s->end) != 0 || (sync && fdatasync(s->fd) != 0)) {
        /* Statistics are an optimisation: a failed write (full disk) does not fail the data write. Cut
         * what may have reached the file; later writes get no records (readers use the data). */
        h5fl_err_clear();
        while (ftruncate(s->fd, (off_t)s->end) != 0 && errno == EINTR)
            ;
        s->broken = true;
        s->len = 0;
        return;
    }
    s->end += s->len;
    s->len = 0;
}

/* The user data function named in property list `pl` (property H5FLOW_UDF_PROP): 1 and *lib, *sym
 * (malloc'd; the library path made absolute), 0 if the list names none, -1 with an error recorded. */
static int spec_from_plist(hid_t pl, const char *what, char **lib, char **sym)
{
    *lib = *sym = NULL;
    if (pl < 0 || pl == H5P_DEFAULT)
        return 0;
    htri_t ex = H5Pexist(pl, H5FLOW_UDF_PROP);
    if (ex <= 0)
        return 0;
    char spec[H5FLOW_UDF_SPEC_MAX + 1];
    memset(spec, 0, sizeof spec);
    size_t sz = 0;
    if (H5Pget_size(pl, H5FLOW_UDF_PROP, &sz) < 0 || sz != H5FLOW_UDF_SPEC_MAX || H5Pget(pl, H5FLOW_UDF_PROP, spec) < 0) {
        h5fl_err("the %s property %s must hold %u bytes \"LIBRARY\\nSYMBOL\" (set it with h5flow_udf_set() of "
                 "h5flow_udf.h or h5flow.stats.set_udf())",
                 what, H5FLOW_UDF_PROP, H5FLOW_UDF_SPEC_MAX);
        return -1;
    }
    char *nl = strchr(spec, '\n');
    if (!nl || nl == spec || !nl[1] || strchr(nl + 1, '\n')) {
        h5fl_err("the %s property %s is \"%.200s\": expected \"LIBRARY\\nSYMBOL\" (set it with h5flow_udf_set())",
                 what, H5FLOW_UDF_PROP, spec);
        return -1;
    }
    *nl = 0;
    /* an absolute path: later writers may run in another directory */
    char abs[PATH_MAX];
    const char *l = spec;
    if (strchr(spec, '/') && realpath(spec, abs))
        l = abs;
    *lib = h5fl_strdup(l);
    *sym = h5fl_strdup(nl + 1);
    if (!*lib || !*sym) {
        free(*lib);
        free(*sym);
        *lib = *sym = NULL;
        return -1;
    }
    return 1;
}

int h5fl_udf_persist(const char *dir, hid_t dcpl, bool sync)
{
    char *lib, *sym;
    int st = spec_from_plist(dcpl, "dataset creation", &lib, &sym);
    if (st <= 0)
        return st;
    size_t n = strlen(lib) + strlen(sym) + 64;
    char *txt = malloc(n);
    int rc = -1;
    if (!txt) {
        h5fl_err("out of memory");
    } else {
        int len = snprintf(txt, n, "h5flow_log udf 1\n%s\n%s\n", lib, sym);
        rc = h5fl_write_file_atomic(dir, H5FL_UDF_FILE, txt, (size_t)len, sync);
    }
    free(txt);
    free(lib);
    free(sym);
    return rc;
}

int h5fl_udf_check_dapl(h5fl_dset_t *d, hid_t dapl)
{
    char *lib, *sym;
    int st = spec_from_plist(dapl, "dataset access", &lib, &sym);
    free(lib);
    free(sym);
    if (st <= 0)
        return st;
    if (d->w) {
        h5fl_err("dataset '%s' is already being written by this process: a user data function given when "
                 "opening it applies only to a process's first open for writing (close every handle first)",
                 d->o.path);
        return -1;
    }
    hid_t c = H5Pcopy(dapl);
    if (c < 0) {
        h5fl_err("cannot copy the dataset access property list");
        return -1;
    }
    H5Pclose(d->dapl);
    d->dapl = c; /* h5fl_stats_open reads the function from it */
    return 0;
}

/* ---------------------------------------------------------------- the query (h5flow_log_stats_json) */

typedef struct jbuf {
    char *p;
    size_t len, cap;
    bool oom;
} jbuf_t;

static void jput(jbuf_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jput(jbuf_t *j, const char *fmt, ...)
{
    if (j->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(j->p ? j->p + j->len : NULL, j->p ? j->cap - j->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            j->oom = true;
            return;
        }
        if (j->p && (size_t)n < j->cap - j->len) {
            j->len += (size_t)n;
            return;
        }
        size_t nc = j->cap ? j->cap * 2 : 4096;
        while (nc < j->len + (size_t)n + 1)
            nc *= 2;
        char *np = realloc(j->p, nc);
        if (!np) {
            j->oom = true;
            return;
        }
        j->p = np;
        j->cap = nc;
    }
}

static void jstr(jbuf_t *j, const char *s, size_t n)
{
    jput(j, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            jput(j, "\\%c", c);
        else if (c < 0x20 || c >= 0x7F)
            jput(j, "\\u%04x", c); /* bytes above ASCII as code points: keys are meant to be ASCII */
        else
            jput(j, "%c", c);
    }
    jput(j, "\"");
}

static void jnum(jbuf_t *j, double v)
{
    if (v != v)
        jput(j, "NaN");
    else if (isinf(v))
        jput(j, v > 0 ? "Infinity" : "-Infinity");
    else
        jput(j, "%.17g", v);
}

static void jval(jbuf_t *j, int kind, sval_t v)
{
    if (kind == K_INT)
        jput(j, "%" PRId64, v.i);
    else if (kind == K_UINT)
        jput(j, "%" PRIu64, v.u);
    else
        jnum(j, v.f);
}

static void jcoords(jbuf_t *j, uint64_t lin, unsigned rank, const uint64_t *dims)
{
    if (lin == UINT64_MAX) {
        jput(j, "null");
        return;
    }
    uint64_t c[H5S_MAX_RANK];
    for (int k = (int)rank - 1; k >= 0; k--) {
        uint64_t dk = dims[k] ? dims[k] : 1;
        c[k] = k == 0 ? lin : lin % dk;
        lin /= dk;
    }
    jput(j, "[");
    for (unsigned k = 0; k < rank; k++)
        jput(j, "%s%" PRIu64, k ? "," : "", c[k]);
    jput(j, "]");
}

typedef struct srec {
    uint64_t epoch, order, dend;
    uint32_t dcrc;
    const uint8_t *p;
    uint32_t len;
} srec_t;

static int srec_cmp(const void *a, const void *b)
{
    const srec_t *x = a, *y = b;
    if (x->epoch != y->epoch)
        return x->epoch < y->epoch ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int ext_cmp(const void *a, const void *b)
{
    const h5fl_extent_t *x = a, *y = b;
    if (x->seq.epoch != y->seq.epoch)
        return x->seq.epoch < y->seq.epoch ? -1 : 1;
    if (x->seq.order != y->seq.order)
        return x->seq.order < y->seq.order ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

typedef struct sfiles {
    void **bufs;
    size_t nbufs;
    srec_t *v;
    size_t n, cap;
} sfiles_t;

/* Every complete, intact record of every @stats.* sidecar of the dataset directory (a torn or damaged
 * record ends what is read of its file: the writes after it are computed from the data). */
static int load_sidecars(const char *dir, sfiles_t *sf)
{
    DIR *dd = opendir(dir);
    if (!dd) {
        h5fl_err("cannot list %s: %s", dir, strerror(errno));
        return -1;
    }
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(dd))) {
        if (strncmp(de->d_name, H5FL_STATS_PREFIX, sizeof H5FL_STATS_PREFIX - 1) != 0)
            continue;
        char *p = h5fl_join(dir, de->d_name);
        void *b = NULL;
        size_t l = 0;
        if (!p || h5fl_read_file(p, &b, &l) != 0) {
            free(p);
            h5fl_err_clear(); /* vanished or unreadable: its writes are computed from the data */
            continue;
        }
        free(p);
        void **nb = realloc(sf->bufs, (sf->nbufs + 1) * sizeof *nb);
        if (!nb) {
            free(b);
            rc = -1;
            break;
        }
        sf->bufs = nb;
        sf->bufs[sf->nbufs++] = b;
        size_t v = valid_prefix(b, l), pos = 0;
        while (pos < v) {
            const uint8_t *q = (const uint8_t *)b + pos;
            if (sf->n == sf->cap) {
                size_t nc = sf->cap ? sf->cap * 2 : 64;
                srec_t *nv = realloc(sf->v, nc * sizeof *nv);
                if (!nv) {
                    rc = -1;
                    break;
                }
                sf->v = nv;
                sf->cap = nc;
            }
            srec_t *r = &sf->v[sf->n++];
            r->epoch = h5fl_get_u64(q + 8);
            r->order = h5fl_get_u64(q + 16);
            r->dend = h5fl_get_u64(q + 24);
            r->dcrc = h5fl_get_u32(q + 32);
            r->p = q;
            r->len = h5fl_get_u32(q + 4);
            pos += r->len;
        }
    }
    closedir(dd);
    if (rc != 0)
        h5fl_err("out of memory reading the statistics sidecars of %s", dir);
    else if (sf->n)
        qsort(sf->v, sf->n, sizeof *sf->v, srec_cmp);
    return rc;
}

static void sfiles_free(sfiles_t *sf)
{
    for (size_t i = 0; i < sf->nbufs; i++)
        free(sf->bufs[i]);
    free(sf->bufs);
    free(sf->v);
}

/* The record's fixed fields are consistent with its length (rank, bins, UDF section). */
static bool srec_sane(const srec_t *r)
{
    uint32_t rank = h5fl_get_u32(r->p + 112), nb = h5fl_get_u32(r->p + 116), ul = h5fl_get_u32(r->p + 124);
    if (rank > H5S_MAX_RANK || (nb != 0 && nb != H5FL_STATS_BINS))
        return false;
    return (uint64_t)SREC_HDR + 8ull * rank + 8ull * nb + ul + 4 == r->len;
}

/* Statistics of the visible elements of one write, computed from its data (verified like any read). */
static int from_data(h5fl_dset_t *d, int kind, size_t esize, const h5fl_extent_t *e, size_t ne, acc_t *a)
{
    a->kind = kind;
    a->esize = esize;
    const uint64_t chunk = 1u << 20;
    uint8_t *buf = malloc(chunk * esize);
    if (!buf) {
        h5fl_err("out of memory");
        return -1;
    }
    h5fl_bytecount_t bc; /* 1-byte integers: counted (stats_bytes.h), settled before returning */
    if (esize == 1) {
        h5fl_bc_init(&bc);
        a->bc = &bc;
    }
    for (int pass = 0; pass < 2; pass++) {
        uint64_t k = 0;
        for (size_t i = 0; i < ne; i++)
            for (uint64_t off = 0; off < e[i].len; off += chunk) {
                uint64_t n = e[i].len - off < chunk ? e[i].len - off : chunk;
                gather_ctx_t g = {d, buf};
                if (h5fl_gather_seq(&g, e[i].start + off, (size_t)n) != 0) {
                    a->bc = NULL;
                    free(buf);
                    return -1;
                }
                if (pass == 0)
                    acc_scan(a, buf, n, k);
                else
                    hist_scan(a, buf, n);
                k += n;
            }
        if (pass == 0 && !(a->has_hist = hist_ok(a)))
            break;
        if (pass == 0 && a->bc) { /* the histogram from the counts: no second pass over the data */
            hist_scan(a, NULL, 0);
            break;
        }
    }
    bytes_settle(a);
    free(buf);
    return 0;
}

static uint64_t ext_pos(const h5fl_extent_t *e, size_t ne, uint64_t k)
{
    for (size_t i = 0; i < ne; i++) {
        if (k < e[i].len)
            return e[i].start + k;
        k -= e[i].len;
    }
    return UINT64_MAX;
}

static const char *kind_name(int kind, size_t esize)
{
    static const char *n[4][9] = {{0}, {0, "int8", "int16", 0, "int32", 0, 0, 0, "int64"},
                                  {0, "uint8", "uint16", 0, "uint32", 0, 0, 0, "uint64"},
                                  {0, 0, 0, 0, "float32", 0, 0, 0, "float64"}};
    return kind > 0 && kind < 4 && esize <= 8 && n[kind][esize] ? n[kind][esize] : "none";
}

/* The statistics keys of a shard: count, nan, min, max, sum, argmin, argmax (coordinates in wdims), hist. */
/* from_record: `a` holds a statistics record's numbers, whose sum is already rounded; otherwise it was
 * computed from data here and an integer sum is exact until acc_sum rounds it once. */
static void emit_acc(jbuf_t *j, int kind, const acc_t *a, uint64_t lmin, uint64_t lmax, unsigned wrank,
                     const uint64_t *wdims, bool from_record)
{
    jput(j, ",\"count\":%" PRIu64 ",\"nan\":%" PRIu64 ",\"min\":", a->n, a->nan);
    if (a->any) jval(j, kind, a->min); else jput(j, "null");
    jput(j, ",\"max\":");
    if (a->any) jval(j, kind, a->max); else jput(j, "null");
    jput(j, ",\"sum\":");
    jnum(j, from_record ? a->sum : acc_sum(a));
    jput(j, ",\"argmin\":");
    jcoords(j, lmin, wrank, wdims);
    jput(j, ",\"argmax\":");
    jcoords(j, lmax, wrank, wdims);
    jput(j, ",\"hist\":");
    if (a->has_hist) {
        jput(j, "{\"lo\":");
        jnum(j, as_double(kind, a->min));
        jput(j, ",\"hi\":");
        jnum(j, as_double(kind, a->max));
        jput(j, ",\"counts\":[");
        for (unsigned k = 0; k < H5FL_STATS_BINS; k++)
            jput(j, "%s%" PRIu64, k ? "," : "", a->hist[k]);
        jput(j, "]}");
    } else {
        jput(j, "null");
    }
}

/* ---- restructured datasets (restructure.c): the shards have no statistics records; their statistics
 * are computed from the shards' visible elements (those no later write covers) at every query. */
#define BASE_ROWS_MAX 65536u /* more shards than this: one row for all of them */
typedef struct base_acc {
    acc_t *a;
    uint64_t *vis, *first, *last;
    bool all; /* one row for every shard */
    int pass;
} base_acc_t;

static int base_acc_fn(void *ctx, const uint8_t *src, uint64_t n, uint64_t shard, uint64_t lin)
{
    base_acc_t *b = ctx;
    if (!src)
        return 0; /* outside the restructured extent: the fill value, no shard's */
    uint64_t s = b->all ? 0 : shard;
    if (b->pass == 0) {
        acc_scan(&b->a[s], src, n, lin);
        b->first[s] = b->vis[s] ? b->first[s] : lin;
        b->last[s] = lin + n - 1;
        b->vis[s] += n;
    } else if (b->a[s].has_hist) {
        hist_scan(&b->a[s], src, n);
    }
    return 0;
}

/* One row per shard with visible elements (after `sep` earlier rows). */
static int base_json(h5fl_dset_t *d, jbuf_t *j, int kind, size_t esize, int rank, const hsize_t *cd,
                     const uint64_t *cdims, bool sep)
{
    h5fl_base_t *bs = d->ix->base;
    const h5fl_map_t *m = &d->ix->map;
    base_acc_t b = {.all = bs->nchunks > BASE_ROWS_MAX};
    uint64_t rows = b.all ? 1 : bs->nchunks, total = 1;
    for (int k = 0; k < rank; k++)
        total *= cdims[k];
    b.a = calloc(rows ? rows : 1, sizeof *b.a);
    b.vis = calloc(rows ? rows : 1, sizeof *b.vis);
    b.first = calloc(rows ? rows : 1, sizeof *b.first);
    b.last = calloc(rows ? rows : 1, sizeof *b.last);
    int rc = -1;
    if (!b.a || !b.vis || !b.first || !b.last) {
        h5fl_err("out of memory");
        goto done;
    }
    for (uint64_t s = 0; s < rows; s++) {
        b.a[s].kind = kind;
        b.a[s].esize = esize;
    }
    for (b.pass = 0; b.pass < 2; b.pass++) {
        uint64_t pos = 0; /* the gaps between the extents (the map covers later writes and shrinks) */
        for (size_t i = 0; i <= m->n; i++) {
            uint64_t gend = i < m->n ? m->ext[i].start : total;
            if (gend > pos && h5fl_base_walk(d, bs, cd, pos, gend, base_acc_fn, &b) != 0)
                goto done;
            if (i < m->n)
                pos = m->ext[i].start + m->ext[i].len;
        }
        for (uint64_t s = 0; b.pass == 0 && s < rows; s++)
            b.a[s].has_hist = hist_ok(&b.a[s]);
        if (kind == K_NONE)
            break;
    }
    for (uint64_t s = 0; s < rows; s++) {
        if (!b.vis[s])
            continue;
        jput(j, "%s{\"layer\":\"restructured\",\"generation\":%" PRIu64 ",\"epoch\":%" PRIu64
                ",\"writer\":null,\"write\":%s%" PRIu64 ",\"source\":\"%s\",\"visible\":%" PRIu64
                ",\"written\":null,\"first\":",
             sep ? "," : "", bs->lay.gen, bs->lay.epoch, b.all ? "null,\"shards\":" : "", b.all ? bs->nchunks : s,
             kind == K_NONE ? "none" : "data", b.vis[s]);
        sep = true;
        jcoords(j, b.first[s], (unsigned)rank, cdims);
        jput(j, ",\"last\":");
        jcoords(j, b.last[s], (unsigned)rank, cdims);
        if (kind != K_NONE)
            emit_acc(j, kind, &b.a[s], b.a[s].any ? b.a[s].kmin : UINT64_MAX, b.a[s].any ? b.a[s].kmax : UINT64_MAX,
                     (unsigned)rank, cdims, false);
        jput(j, ",\"udf_status\":\"none\"}");
    }
    rc = 0;
done:
    free(b.a);
    free(b.vis);
    free(b.first);
    free(b.last);
    return rc;
}

static int stats_json(h5fl_dset_t *d, jbuf_t *j)
{
    if (d->w && h5fl_writer_flush(d->w, false) != 0) /* this process's own records, on disk first */
        return -1;
    if (h5fl_ix_ready(d) != 0)
        return -1;
    size_t esize = 0;
    int kind = d->vstr || d->blob ? K_NONE : kind_of(d->type, &esize);
    int rank = H5Sget_simple_extent_ndims(d->space);
    hsize_t cd[H5S_MAX_RANK];
    uint64_t cdims[H5S_MAX_RANK];
    H5Sget_simple_extent_dims(d->space, cd, NULL);
    for (int k = 0; k < rank; k++)
        cdims[k] = cd[k];
    const h5fl_map_t *m = &d->ix->map;
    size_t ne = 0;
    h5fl_extent_t *ev = malloc((m->n ? m->n : 1) * sizeof *ev);
    sfiles_t sf = {0};
    int rc = -1;
    if (!ev) {
        h5fl_err("out of memory");
        goto done;
    }
    for (size_t i = 0; i < m->n; i++)
        if (m->ext[i].log != H5FL_FILL_LOG)
            ev[ne++] = m->ext[i];
    qsort(ev, ne, sizeof *ev, ext_cmp);
    if (load_sidecars(d->o.dir, &sf) != 0)
        goto done;
    jput(j, "{\"dataset\":");
    jstr(j, d->o.path, strlen(d->o.path));
    jput(j, ",\"dtype\":\"%s\",\"shape\":[", kind_name(kind, esize));
    for (int k = 0; k < rank; k++)
        jput(j, "%s%" PRIu64, k ? "," : "", cdims[k]);
    jput(j, "],\"shards\":[");
    for (size_t i = 0, gi = 0; i < ne; gi++) {
        size_t g = i;
        uint64_t vis = 0, first = UINT64_MAX, last = 0;
        bool one_rec = true;
        for (; i < ne && ev[i].seq.epoch == ev[g].seq.epoch && ev[i].seq.order == ev[g].seq.order; i++) {
            vis += ev[i].len;
            first = ev[i].start < first ? ev[i].start : first;
            last = ev[i].start + ev[i].len - 1 > last ? ev[i].start + ev[i].len - 1 : last;
            one_rec = one_rec && ev[i].rec == ev[g].rec && ev[i].log == ev[g].log;
        }
        size_t gn = i - g;
        /* the statistics record of this write: same sequence number, data log end and data checksum */
        const srec_t *sr = NULL;
        if (one_rec && ev[g].rec != H5FL_NO_REC) {
            const h5fl_crcrec_t *cr = &d->ix->recs[ev[g].rec];
            srec_t key = {.epoch = ev[g].seq.epoch, .order = ev[g].seq.order};
            srec_t *hit = sf.n ? bsearch(&key, sf.v, sf.n, sizeof *sf.v, srec_cmp) : NULL;
            while (hit && hit > sf.v && srec_cmp(hit - 1, &key) == 0)
                hit--;
            for (; hit && hit < sf.v + sf.n && srec_cmp(hit, &key) == 0; hit++)
                if (hit->dend == cr->to && hit->dcrc == cr->crc && srec_sane(hit)) {
                    sr = hit;
                    break;
                }
        }
        uint64_t written = sr ? h5fl_get_u64(sr->p + 40) : 0;
        bool whole = sr && written == vis;
        uint32_t skind = sr ? h5fl_get_u32(sr->p + 36) : 0;
        acc_t a = {0};
        const char *source = "none";
        unsigned wrank = (unsigned)rank;
        uint64_t wdims[H5S_MAX_RANK];
        memcpy(wdims, cdims, sizeof wdims);
        uint64_t lmin = UINT64_MAX, lmax = UINT64_MAX;
        if (whole && (int)(skind & 0xFF) == kind && (skind >> 8) == esize && kind != K_NONE) {
            source = "stats";
            a.kind = kind;
            a.esize = esize;
            a.n = written;
            a.nan = h5fl_get_u64(sr->p + 48);
            a.min.u = h5fl_get_u64(sr->p + 56);
            a.max.u = h5fl_get_u64(sr->p + 64);
            sval_t s = {.u = h5fl_get_u64(sr->p + 72)};
            a.sum = s.f;
            lmin = h5fl_get_u64(sr->p + 80);
            lmax = h5fl_get_u64(sr->p + 88);
            a.any = lmin != UINT64_MAX;
            wrank = h5fl_get_u32(sr->p + 112);
            for (unsigned k = 0; k < wrank; k++)
                wdims[k] = h5fl_get_u64(sr->p + SREC_HDR + 8 * k);
            a.has_hist = h5fl_get_u32(sr->p + 116) == H5FL_STATS_BINS;
            for (unsigned k = 0; a.has_hist && k < H5FL_STATS_BINS; k++)
                a.hist[k] = h5fl_get_u64(sr->p + SREC_HDR + 8 * wrank + 8 * k);
        } else if (kind != K_NONE) {
            source = "data"; /* no record, a torn or damaged one, or the write was partly overwritten */
            if (from_data(d, kind, esize, ev + g, gn, &a) != 0)
                goto done;
            if (a.any) {
                lmin = ext_pos(ev + g, gn, a.kmin);
                lmax = ext_pos(ev + g, gn, a.kmax);
            }
        }
        uint64_t order = ev[g].seq.order;
        jput(j, "%s{\"epoch\":%" PRIu64 ",\"writer\":%" PRIu64 ",\"write\":%" PRIu64 ",\"source\":\"%s\"",
             gi ? "," : "", ev[g].seq.epoch, order & H5FL_WRITER_MAX, order >> 20, source);
        jput(j, ",\"visible\":%" PRIu64 ",\"written\":", vis);
        if (sr)
            jput(j, "%" PRIu64, written);
        else
            jput(j, "null");
        jput(j, ",\"first\":");
        jcoords(j, first, (unsigned)rank, cdims);
        jput(j, ",\"last\":");
        jcoords(j, last, (unsigned)rank, cdims);
        if (strcmp(source, "none") != 0)
            emit_acc(j, kind, &a, lmin, lmax, wrank, wdims, source[0] == 's');
        uint32_t ust = sr ? h5fl_get_u32(sr->p + 120) : UDF_NONE;
        if (ust == UDF_OK || ust == UDF_FAILED) {
            uint32_t rk = h5fl_get_u32(sr->p + 112), nb = h5fl_get_u32(sr->p + 116);
            const uint8_t *u = sr->p + SREC_HDR + 8 * (size_t)rk + 8 * (size_t)nb;
            uint32_t ul = h5fl_get_u32(sr->p + 124);
            /* a partly overwritten write: its function saw values that are no longer all there */
            jput(j, ",\"udf_status\":\"%s\"", ust == UDF_FAILED ? "failed" : whole ? "ok" : "stale");
            if (ust == UDF_FAILED) {
                jput(j, ",\"udf_error\":");
                jstr(j, (const char *)u, ul);
            } else {
                jput(j, ",\"udf\":{");
                uint32_t nk = ul >= 4 ? h5fl_get_u32(u) : 0;
                size_t pos = 4;
                for (uint32_t k = 0; k < nk; k++) {
                    if (pos + 2 > ul)
                        break;
                    size_t kl = (size_t)u[pos] | ((size_t)u[pos + 1] << 8);
                    if (pos + 2 + kl + 8 > ul)
                        break;
                    sval_t v = {.u = h5fl_get_u64(u + pos + 2 + kl)};
                    jput(j, "%s", k ? "," : "");
                    jstr(j, (const char *)u + pos + 2, kl);
                    jput(j, ":");
                    jnum(j, v.f);
                    pos += 2 + kl + 8;
                }
                jput(j, "}");
            }
        } else {
            jput(j, ",\"udf_status\":\"%s\"", sr || kind == K_NONE ? "none" : "unknown");
        }
        jput(j, "}");
    }
    if (d->ix->base && base_json(d, j, kind, esize, rank, cd, cdims, ne > 0) != 0)
        goto done;
    jput(j, "]}");
    if (j->oom) {
        h5fl_err("out of memory formatting the statistics of '%s'", d->o.path);
        goto done;
    }
    rc = 0;
done:
    free(ev);
    sfiles_free(&sf);
    return rc;
}

/* Exported from the plugin for h5flow.stats (ctypes): the statistics of the open dataset `dset` as JSON
 * (docs/FORMAT.md, "Statistics"). Returns 0 and *out (free it with h5flow_log_stats_free), or -1 and *out
 * the error message (free it too). */
__attribute__((visibility("default"))) int h5flow_log_stats_json(hid_t dset, char **out);
__attribute__((visibility("default"))) void h5flow_log_stats_free(char *p);

int h5flow_log_stats_json(hid_t dset, char **out)
{
    h5fl_err_clear();
    *out = NULL;
    char name[64] = "";
    jbuf_t j = {0};
    int rc = -1;
    if (H5Iget_type(dset) != H5I_DATASET || H5VLget_connector_name(dset, name, sizeof name) < 0 ||
        strcmp(name, H5FL_NAME) != 0) {
        h5fl_err("not a dataset of an h5flow_log container (connector '%s')", name);
    } else {
        h5fl_dset_t *d = H5VLobject(dset);
        if (!d)
            h5fl_err("cannot reach the dataset's connector object");
        else if (d->vds || d->ext) /* no statistics describe its data: never "nothing written" */
            h5fl_err("dataset '%s' has no per-write statistics: its data is %s, not in its logs", d->o.path,
                     d->vds ? "in the sources of a virtual dataset" : "in external files");
        else
            rc = stats_json(d, &j);
    }
    if (rc == 0) {
        *out = j.p;
        return 0;
    }
    free(j.p);
    *out = h5fl_strdup(h5fl_err_msg()[0] ? h5fl_err_msg() : "unknown error");
    h5fl_err_clear();
    return -1;
}

void h5flow_log_stats_free(char *p) { free(p); }
