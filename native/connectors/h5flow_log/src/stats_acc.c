/* h5flow_log — the statistics accumulator (stats_acc.h): element kinds, the min / max / sum / NaN count
 * scans and the histogram, compiled portable and for AVX2 and AVX-512 and picked at run time, and the
 * framing of statistics records. Used by the writer side (stats.c) and the query (stats_json.c). */
#include "stats_acc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- element kinds and the accumulator */

int h5fl_kind_of(hid_t type, size_t *esize)
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

/* The scans read the elements through pointers of their type. A buffer not aligned to the element size (a
 * write migrated from h5flow_cache's mapping of its cache file, any program's buffer) is copied in aligned
 * blocks first: those loads would be undefined behaviour. */
#define ALIGNED_WORDS 2048

static bool misaligned(const acc_t *a, const void *buf)
{
    return !a->bc && a->esize > 1 && ((uintptr_t)buf % a->esize) != 0;
}

void h5fl_acc_scan(acc_t *a, const void *buf, uint64_t n, uint64_t k0)
{
    if (misaligned(a, buf)) {
        uint64_t tmp[ALIGNED_WORDS];
        uint64_t per = sizeof tmp / a->esize;
        for (uint64_t i = 0; i < n; i += per) {
            uint64_t m = n - i < per ? n - i : per;
            memcpy(tmp, (const char *)buf + i * a->esize, m * a->esize);
            h5fl_acc_scan(a, tmp, m, k0 + i);
        }
        return;
    }
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
 * count. Valid when h5fl_hist_scan is given the same elements as h5fl_acc_scan was, as everywhere here: the first
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
void h5fl_bytes_settle(acc_t *a)
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

void h5fl_hist_scan(acc_t *a, const void *buf, uint64_t n)
{
    if (buf && misaligned(a, buf)) {
        uint64_t tmp[ALIGNED_WORDS];
        uint64_t per = sizeof tmp / a->esize;
        for (uint64_t i = 0; i < n; i += per) {
            uint64_t m = n - i < per ? n - i : per;
            memcpy(tmp, (const char *)buf + i * a->esize, m * a->esize);
            h5fl_hist_scan(a, tmp, m);
        }
        return;
    }
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

/* ---------------------------------------------------------------- statistics records */

/* Length of the valid statistics records at the start of b[0..len): a torn or damaged record ends them. */
size_t h5fl_stats_valid_prefix(const uint8_t *b, size_t len)
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
