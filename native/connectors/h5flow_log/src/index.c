/* Index records (self-checking: length + CRC32C) and the merged interval map (latest write wins). */
#include "h5fl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- records */
size_t h5fl_record_size(unsigned rank, uint64_t nruns, uint32_t flags)
{
    return H5FL_REC_HDR + ((flags & H5FL_REC_DCRC) ? H5FL_REC_DCRC_EXT : 0) +
           ((flags & H5FL_REC_FILTER) ? H5FL_REC_FILTER_EXT : 0) + 8u * rank + 16u * (size_t)nruns + 4u;
}

size_t h5fl_record_begin(uint8_t *out, const h5fl_record_t *r)
{
    size_t total = h5fl_record_size(r->rank, r->nruns, r->flags);
    h5fl_put_u32(out, H5FL_REC_MAGIC);
    h5fl_put_u32(out + 4, (uint32_t)total);
    h5fl_put_u64(out + 8, r->seq.epoch);
    h5fl_put_u64(out + 16, r->seq.order);
    h5fl_put_u64(out + 24, r->data_off);
    h5fl_put_u64(out + 32, r->nbytes);
    h5fl_put_u64(out + 40, r->nruns);
    h5fl_put_u32(out + 48, r->rank);
    h5fl_put_u32(out + 52, r->flags);
    size_t at = H5FL_REC_HDR;
    if (r->flags & H5FL_REC_DCRC) {
        h5fl_put_u64(out + at, r->crc_start);
        h5fl_put_u32(out + at + 8, r->dcrc);
        h5fl_put_u32(out + at + 12, 0);
        at += H5FL_REC_DCRC_EXT;
    }
    if (r->flags & H5FL_REC_FILTER) {
        h5fl_put_u64(out + at, r->raw);
        h5fl_put_u32(out + at + 8, r->fmask);
        h5fl_put_u32(out + at + 12, 0);
        at += H5FL_REC_FILTER_EXT;
    }
    for (unsigned i = 0; i < r->rank; i++)
        h5fl_put_u64(out + at + 8u * i, r->dims[i]);
    return at + 8u * r->rank;
}

void h5fl_record_seal(uint8_t *rec, size_t total)
{
    h5fl_put_u32(rec + total - 4, h5fl_crc32c(0, rec, total - 4));
}

void h5fl_commit_record(uint8_t out[H5FL_COMMIT_SIZE], h5fl_seq_t seq, uint64_t at, uint64_t dend)
{
    h5fl_record_t r = {0};
    r.seq = seq;
    r.data_off = at; /* where the record itself lies: a copy elsewhere is not a commit of that place */
    r.nbytes = dend;
    r.flags = H5FL_REC_COMMIT;
    h5fl_record_begin(out, &r);
    h5fl_record_seal(out, H5FL_COMMIT_SIZE);
}

ssize_t h5fl_record_parse(const uint8_t *buf, size_t avail, h5fl_record_t *r)
{
    if (avail < 8)
        return 0; /* incomplete: not even the length made it */
    if (h5fl_get_u32(buf) != H5FL_REC_MAGIC) {
        h5fl_err("corrupt index record: bad magic");
        return -1;
    }
    size_t len = h5fl_get_u32(buf + 4);
    if (len < H5FL_REC_HDR + 4) {
        h5fl_err("corrupt index record: impossible length %zu", len);
        return -1;
    }
    if (len > avail)
        return 0; /* incomplete (a torn tail, or a damaged length: h5fl_index_next tells them apart) */
    uint32_t want = h5fl_get_u32(buf + len - 4);
    if (h5fl_crc32c(0, buf, len - 4) != want) {
        h5fl_err("corrupt index record: checksum mismatch");
        return -1;
    }
    r->seq.epoch = h5fl_get_u64(buf + 8);
    r->seq.order = h5fl_get_u64(buf + 16);
    r->data_off = h5fl_get_u64(buf + 24);
    r->nbytes = h5fl_get_u64(buf + 32);
    r->nruns = h5fl_get_u64(buf + 40);
    r->rank = h5fl_get_u32(buf + 48);
    r->flags = h5fl_get_u32(buf + 52);
    r->crc_start = 0;
    r->dcrc = 0;
    r->raw = 0;
    r->fmask = 0;
    uint32_t fl = r->flags;
    bool commit = fl & H5FL_REC_COMMIT;
    if ((fl & ~H5FL_REC_KNOWN) || ((fl & H5FL_REC_FILL) && (fl & (H5FL_REC_DCRC | H5FL_REC_FILTER))) ||
        (commit && (fl != H5FL_REC_COMMIT || r->rank || r->nruns))) {
        h5fl_err("corrupt index record: impossible flags %#x", fl);
        return -1;
    }
    if (r->rank > H5S_MAX_RANK || r->nruns > (len / 16) || len != h5fl_record_size(r->rank, r->nruns, fl)) {
        h5fl_err("corrupt index record: inconsistent header (rank %u, %llu runs, length %zu)", r->rank,
                 (unsigned long long)r->nruns, len);
        return -1;
    }
    size_t at = H5FL_REC_HDR;
    if (fl & H5FL_REC_DCRC) {
        r->crc_start = h5fl_get_u64(buf + at);
        r->dcrc = h5fl_get_u32(buf + at + 8);
        if (h5fl_get_u32(buf + at + 12) != 0 || r->crc_start > r->data_off) {
            h5fl_err("corrupt index record: impossible data checksum range (from byte %llu, data at %llu)",
                     (unsigned long long)r->crc_start, (unsigned long long)r->data_off);
            return -1;
        }
        at += H5FL_REC_DCRC_EXT;
    }
    if (fl & H5FL_REC_FILTER) {
        r->raw = h5fl_get_u64(buf + at);
        r->fmask = h5fl_get_u32(buf + at + 8);
        if (h5fl_get_u32(buf + at + 12) != 0) {
            h5fl_err("corrupt index record: nonzero reserved field after the filter mask");
            return -1;
        }
        at += H5FL_REC_FILTER_EXT;
    }
    for (unsigned i = 0; i < r->rank; i++)
        r->dims[i] = h5fl_get_u64(buf + at + 8u * i);
    r->runs = buf + at + 8u * r->rank;
    return (ssize_t)len;
}

/* Whether a commit record lies somewhere in buf(pos, len): one that states its own offset and passes its
 * checksum. Such a record was appended after everything before it had been written completely. */
static bool commit_after(const uint8_t *buf, size_t len, size_t pos, size_t *at)
{
    static const uint8_t magic[4] = {0x48, 0x4C, 0x49, 0x58}; /* H5FL_REC_MAGIC, little endian */
    for (size_t q = pos + 1; len >= H5FL_COMMIT_SIZE && q <= len - H5FL_COMMIT_SIZE; q++) {
        const uint8_t *c = memchr(buf + q, magic[0], len - H5FL_COMMIT_SIZE + 1 - q);
        if (!c)
            break;
        q = (size_t)(c - buf);
        if (memcmp(c, magic, 4) != 0 || h5fl_get_u32(c + 4) != H5FL_COMMIT_SIZE ||
            h5fl_get_u32(c + 52) != H5FL_REC_COMMIT || h5fl_get_u64(c + 24) != q)
            continue;
        if (h5fl_crc32c(0, c, H5FL_COMMIT_SIZE - 4) == h5fl_get_u32(c + H5FL_COMMIT_SIZE - 4)) {
            *at = q;
            return true;
        }
    }
    return false;
}

ssize_t h5fl_index_next(const uint8_t *buf, size_t len, size_t pos, h5fl_record_t *r)
{
    if (pos >= len)
        return 0;
    ssize_t k = h5fl_record_parse(buf + pos, len - pos, r);
    if (k < 0) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", h5fl_err_msg());
        h5fl_err_clear();
        h5fl_err("%s at byte %zu", msg, pos);
        return -1;
    }
    if (k == 0) {
        size_t at;
        if (commit_after(buf, len, pos, &at)) {
            h5fl_err("corrupt index record at byte %zu: its length field (%llu) runs past the end of the "
                     "log, but the commit record at byte %zu shows the log was written completely up to "
                     "there",
                     pos, (unsigned long long)(len - pos >= 8 ? h5fl_get_u32(buf + pos + 4) : 0), at);
            return -1;
        }
        return 0; /* a torn tail: the writer died while appending it */
    }
    if ((r->flags & H5FL_REC_COMMIT) && r->data_off != pos) {
        h5fl_err("corrupt index record at byte %zu: a commit record that belongs at byte %llu", pos,
                 (unsigned long long)r->data_off);
        return -1;
    }
    return k;
}

/* ---------------------------------------------------------------- merged map */
void h5fl_map_free(h5fl_map_t *m)
{
    free(m->ext);
    m->ext = NULL;
    m->n = m->cap = 0;
}

static int seq_cmp(h5fl_seq_t a, h5fl_seq_t b)
{
    if (a.epoch != b.epoch)
        return a.epoch < b.epoch ? -1 : 1;
    if (a.order != b.order)
        return a.order < b.order ? -1 : 1;
    return 0;
}

static int cmp_start(const void *pa, const void *pb)
{
    const h5fl_extent_t *a = pa, *b = pb;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    return seq_cmp(a->seq, b->seq);
}

/* max-heap of extent pointers keyed by seq */
typedef struct heap {
    const h5fl_extent_t **v;
    size_t n;
} heap_t;

static void heap_push(heap_t *h, const h5fl_extent_t *e)
{
    size_t i = h->n++;
    h->v[i] = e;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (seq_cmp(h->v[p]->seq, h->v[i]->seq) >= 0)
            break;
        const h5fl_extent_t *t = h->v[p];
        h->v[p] = h->v[i];
        h->v[i] = t;
        i = p;
    }
}

static void heap_pop(heap_t *h)
{
    h->v[0] = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && seq_cmp(h->v[l]->seq, h->v[m]->seq) > 0)
            m = l;
        if (r < h->n && seq_cmp(h->v[r]->seq, h->v[m]->seq) > 0)
            m = r;
        if (m == i)
            break;
        const h5fl_extent_t *t = h->v[m];
        h->v[m] = h->v[i];
        h->v[i] = t;
        i = m;
    }
}

static int emit(h5fl_map_t *out, const h5fl_extent_t *src, uint64_t a, uint64_t b, size_t esize)
{
    uint64_t loff = src->loff + (a - src->start) * esize;
    if (out->n) {
        h5fl_extent_t *last = &out->ext[out->n - 1];
        if (last->start + last->len == a && last->log == src->log &&
            last->loff + last->len * esize == loff && !seq_cmp(last->seq, src->seq)) {
            last->len += b - a;
            return 0;
        }
    }
    if (out->n == out->cap) {
        size_t cap = out->cap ? 2 * out->cap : 64;
        h5fl_extent_t *ne = realloc(out->ext, cap * sizeof *ne);
        if (!ne) {
            h5fl_err("out of memory building the index");
            return -1;
        }
        out->ext = ne;
        out->cap = cap;
    }
    h5fl_extent_t *e = &out->ext[out->n++];
    *e = *src;
    e->start = a;
    e->len = b - a;
    e->loff = loff;
    return 0;
}

/* Sweep over the runs sorted by start, keeping the live runs in a max-heap by sequence: every boundary
 * emits the piece owned by the latest live run; runs that ended are dropped lazily when they reach the
 * top. A piece [a,b) of run r lives at byte r.loff + (a - r.start) * esize of r's data log. */
static int merge_impl(h5fl_map_t *m, h5fl_extent_t *runs, size_t nruns, size_t esize)
{
    size_t n = m->n + nruns;
    if (n == 0)
        return 0;
    h5fl_extent_t *all = malloc(n * sizeof *all);
    heap_t h = {malloc(n * sizeof *h.v), 0};
    h5fl_map_t out = {0};
    int rc = -1;
    if (!all || !h.v) {
        h5fl_err("out of memory building the index");
        goto done;
    }
    if (m->n)
        memcpy(all, m->ext, m->n * sizeof *all);
    if (nruns)
        memcpy(all + m->n, runs, nruns * sizeof *all);
    qsort(all, n, sizeof *all, cmp_start);
    size_t i = 0;
    uint64_t pos = 0;
    while (i < n || h.n) {
        if (!h.n) {
            pos = all[i].start;
        }
        while (i < n && all[i].start <= pos) {
            if (all[i].len && all[i].start + all[i].len > pos)
                heap_push(&h, &all[i]);
            i++;
        }
        while (h.n && h.v[0]->start + h.v[0]->len <= pos)
            heap_pop(&h);
        if (!h.n)
            continue;
        const h5fl_extent_t *top = h.v[0];
        uint64_t end = top->start + top->len;
        if (i < n && all[i].start < end)
            end = all[i].start;
        if (end > pos && emit(&out, top, pos, end, esize) != 0)
            goto done;
        pos = end;
    }
    free(m->ext);
    *m = out;
    out.ext = NULL;
    rc = 0;
done:
    free(out.ext);
    free(all);
    free(h.v);
    return rc;
}

int h5fl_map_merge(h5fl_map_t *m, h5fl_extent_t *runs, size_t nruns, size_t esize)
{
    return merge_impl(m, runs, nruns, esize ? esize : 1);
}

size_t h5fl_map_find(const h5fl_map_t *m, uint64_t pos)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->ext[mid].start + m->ext[mid].len <= pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}
