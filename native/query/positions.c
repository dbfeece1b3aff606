/* Kernels of h5flow.query (src/h5flow/query/_kernels.py loads them with ctypes; numpy does the same work
 * where this library is not built). Plain C11, no HDF5 or MPI. */
#include <stdint.h>
#include <string.h>

#include "positions.h"

#define ONES UINT64_C(0x0101010101010101)

/* Positions base + i of the nonzero bytes mask[i], i < n, in increasing order, written to out (room for cap
 * entries; cap must be at least the number of nonzero bytes). Returns how many were written. Zero words of 8
 * bytes are skipped at once (eight of them at a time), all-one words written as a run, the others without
 * branches where 8 more entries fit. */
int64_t h5flow_query_positions(const uint8_t *mask, int64_t n, int64_t base, int64_t *out, int64_t cap)
{
    int64_t k = 0, i = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t w[8], any = 0;
        memcpy(w, mask + i, sizeof w);
        for (int j = 0; j < 8; j++)
            any |= w[j];
        if (any == 0)
            continue;
        for (int j = 0; j < 8; j++) {
            const int64_t at = i + 8 * j;
            if (w[j] == 0)
                continue;
            if (w[j] == ONES && k + 8 <= cap) {
                for (int b = 0; b < 8; b++)
                    out[k + b] = base + at + b;
                k += 8;
            } else if (k + 8 <= cap) {
                for (int b = 0; b < 8; b++) {
                    out[k] = base + at + b;
                    k += mask[at + b] != 0;
                }
            } else {
                for (int b = 0; b < 8; b++)
                    if (mask[at + b] && k < cap)
                        out[k++] = base + at + b;
            }
        }
    }
    for (; i < n; i++)
        if (mask[i] && k < cap)
            out[k++] = base + i;
    return k;
}

/* The positions of nseg segments, one after the other, into out (room for cap entries); ends[s] receives
 * the count written after segment s. Segment s, by kind[s]: 0, the nonzero bytes of the mask at address
 * src[s] (len[s] bytes), as positions base[s] + i; 1, every position base[s] .. base[s] + len[s] - 1; 2,
 * the len[s] int64 values at address src[s] plus base[s]. Returns the total written (-1: cap too small). */
int64_t h5flow_query_segments(int64_t nseg, const int64_t *kind, const int64_t *src, const int64_t *len,
                              const int64_t *base, int64_t *out, int64_t cap, int64_t *ends)
{
    int64_t k = 0;
    for (int64_t s = 0; s < nseg; s++) {
        const int64_t n = len[s], b = base[s];
        if (kind[s] == 0) {
            k += h5flow_query_positions((const uint8_t *)(uintptr_t)src[s], n, b, out + k, cap - k);
        } else {
            if (n > cap - k)
                return -1;
            if (kind[s] == 1) {
                for (int64_t i = 0; i < n; i++)
                    out[k + i] = b + i;
            } else {
                const int64_t *v = (const int64_t *)(uintptr_t)src[s];
                for (int64_t i = 0; i < n; i++)
                    out[k + i] = v[i] + b;
            }
            k += n;
        }
        ends[s] = k;
    }
    return k;
}
