/* The copy buffers of one open file: large buffers freed by the background thread are kept and handed
 * to the next queued write of that file, so that a program writing the same amount every step copies into
 * memory that is already mapped (no page faults, no zeroing by the kernel, no munmap) after the first few
 * steps. Each file handle has its own pool (its own mutex): nothing is shared between two open files.
 *
 * Bound: the bytes a file's pool holds, free and handed out together, stay within the file's max_mem;
 * a buffer coming back past that bound is freed instead of kept. A buffer is handed out to one write at a
 * time and comes back only after the write below has returned, so no queued write can see another's
 * bytes (docs/ASYNC.md, "Copy buffers"). */
#include "h5fa.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Smaller copies come from malloc, which reuses small blocks well by itself. */
#define POOL_MIN_BYTES (256u << 10)
/* Buffers of at least this size are aligned to it and asked to be backed by huge pages. */
#define HUGE_BYTES (2u << 20)
/* Free buffers kept at most (besides the max_mem bound). */
#define POOL_MAX_FREE 32

typedef struct h5fa_pool_buf {
    struct h5fa_pool_buf *next;
    void *mem;
    size_t cap;
} pool_buf_t;

void h5fa_pool_init(h5fa_pool_t *p)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
}

void h5fa_pool_fini(h5fa_pool_t *p)
{
    while (p->free_list) {
        pool_buf_t *b = p->free_list;
        p->free_list = b->next;
        free(b->mem);
        free(b);
    }
    pthread_mutex_destroy(&p->mu);
}

static size_t round_cap(size_t bytes)
{
    size_t unit = bytes >= HUGE_BYTES ? HUGE_BYTES : 4096u;
    return (bytes + unit - 1) / unit * unit;
}

static void *fresh(size_t cap)
{
    void *mem = NULL;
    if (cap >= HUGE_BYTES) {
        if (posix_memalign(&mem, HUGE_BYTES, cap) != 0)
            return NULL;
#ifdef MADV_HUGEPAGE
        (void)madvise(mem, cap, MADV_HUGEPAGE); /* a hint: fewer page faults and TLB misses when honoured */
#endif
        return mem;
    }
    return malloc(cap);
}

void *h5fa_pool_get(h5fa_pool_t *p, size_t bytes, uint64_t bound, size_t *cap)
{
    if (bytes < POOL_MIN_BYTES) {
        *cap = 0; /* not the pool's */
        return malloc(bytes ? bytes : 1);
    }
    pool_buf_t *best = NULL, **best_at = NULL, *drop = NULL;
    pthread_mutex_lock(&p->mu);
    for (pool_buf_t **at = &p->free_list; *at; at = &(*at)->next) {
        pool_buf_t *b = *at;
        /* the smallest that fits, serving a write of at least half its size (no 1 GiB buffer taken by a
         * 300 KiB write) */
        if (b->cap >= bytes && b->cap / 2 <= bytes && (!best || b->cap < best->cap)) {
            best = b;
            best_at = at;
        }
    }
    if (best) {
        *best_at = best->next;
        p->free_bytes -= best->cap;
        p->nfree--;
        p->out_bytes += best->cap;
        p->reused++;
    }
    else {
        /* a new buffer: first let go of free ones that would take the pool past its bound */
        size_t need = round_cap(bytes);
        while (p->free_list && p->free_bytes + p->out_bytes + need > bound) {
            pool_buf_t *b = p->free_list;
            p->free_list = b->next;
            p->free_bytes -= b->cap;
            p->nfree--;
            b->next = drop;
            drop = b;
        }
        p->out_bytes += need;
        p->fresh++;
    }
    pthread_mutex_unlock(&p->mu);
    while (drop) { /* outside the mutex: free() of a large block may unmap it */
        pool_buf_t *b = drop;
        drop = b->next;
        free(b->mem);
        free(b);
    }
    if (best) {
        void *mem = best->mem;
        *cap = best->cap;
        free(best);
        return mem;
    }
    size_t need = round_cap(bytes);
    void *mem = fresh(need);
    if (!mem) {
        pthread_mutex_lock(&p->mu);
        p->out_bytes -= need;
        pthread_mutex_unlock(&p->mu);
        return NULL;
    }
    *cap = need;
    return mem;
}

void h5fa_pool_put(h5fa_pool_t *p, void *mem, size_t cap, uint64_t bound)
{
    if (!mem)
        return;
    if (!cap) {
        free(mem);
        return;
    }
    pool_buf_t *b = malloc(sizeof *b);
    pthread_mutex_lock(&p->mu);
    p->out_bytes -= cap;
    bool keep = b && p->nfree < POOL_MAX_FREE && p->free_bytes + p->out_bytes + cap <= bound;
    if (keep) {
        b->mem = mem;
        b->cap = cap;
        b->next = p->free_list;
        p->free_list = b;
        p->free_bytes += cap;
        p->nfree++;
    }
    pthread_mutex_unlock(&p->mu);
    if (!keep) {
        free(b);
        free(mem);
    }
}
