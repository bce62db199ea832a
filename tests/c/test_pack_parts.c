/*
 * test_pack_parts.c -- the packing stage (lib/reader/pack.c) through the reader: a minibatch large
 * enough to be copied in parts on the prefetch threads holds the same bytes as one copied on the
 * caller's thread alone, for dense and sparse streams, sequences of several samples, randomized
 * with the default window and in file order.
 */
#include "reader/pipeline.h"
#include "test.h"
#include "test_bytes.h"

#include <stdlib.h>

/* The whole minibatch as the caller sees it: keys, and per stream lengths and buffers. */
static void append_mb(bytes *b, const ctf_minibatch *mb)
{
    size_t n = ctf_minibatch_num_sequences(mb);
    b_add(b, ctf_minibatch_keys(mb), n * 8);
    for (size_t k = 0; k < ctf_minibatch_num_streams(mb); k++) {
        ctf_stream_view v;
        if (ctf_minibatch_stream(mb, k, &v)) abort();
        size_t elt = (size_t)v.precision;
        b_add(b, v.lengths, n * sizeof *v.lengths);
        if (!v.is_sparse) {
            b_add(b, v.values, v.num_samples * v.dim * elt);
            continue;
        }
        b_add(b, v.indptr, (v.num_samples + 1) * sizeof *v.indptr);
        b_add(b, v.indices, v.nnz * sizeof *v.indices);
        b_add(b, v.values, v.nnz * elt);
    }
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define DIM 200

/* nseq sequences of 1-4 lines: a dense x of DIM on every line, a sparse y on the first line
 * of each and on some others. */
static const char *big_file(size_t nseq)
{
    size_t cap = nseq * 4 * (DIM * 4 + 64) + 1, n = 0;
    char *t = malloc(cap);
    uint64_t s = 7;
    for (size_t q = 0; q < nseq; q++) {
        int lines = 1 + (int)(splitmix(&s) % 4);
        for (int l = 0; l < lines; l++) {
            n += (size_t)snprintf(t + n, cap - n, "%zu |x", q);
            for (int d = 0; d < DIM; d++)
                n += (size_t)snprintf(t + n, cap - n, " %d", (int)(splitmix(&s) % 100));
            if (l == 0 || splitmix(&s) % 3)
                n += (size_t)snprintf(t + n, cap - n, " |y %d:1 %d:2", (int)(splitmix(&s) % 50),
                                      50 + (int)(splitmix(&s) % 50));
            n += (size_t)snprintf(t + n, cap - n, "\n");
        }
    }
    const char *p = test_write_str("pack_big.ctf", t);
    free(t);
    return p;
}

static const ctf_stream_def XY[] = {{.name = "x", .dim = DIM},
                                    {.name = "y", .dim = 100, .is_sparse = true}};

static void quiet(void *user, ctf_severity sev, const ctf_error *what)
{
    (void)user;
    (void)sev;
    (void)what;
}

static bool read_all(const char *path, bool randomize, size_t threads, uint64_t k, bytes *out)
{
    ctf_config c;
    ctf_config_init(&c);
    c.path = path;
    c.streams = XY;
    c.num_streams = 2;
    c.log = quiet;
    c.randomize = randomize;
    c.max_sweeps = 2;
    c.chunk_size_bytes = 64 << 10; /* many chunks, all in the default window */
    c.num_threads = threads;
    ctf_reader *r = NULL;
    ctf_error e;
    if (ctf_reader_open(&c, &r, &e)) {
        fprintf(stderr, "open: %s\n", e.message);
        return false;
    }
    for (;;) {
        ctf_minibatch *mb;
        if (ctf_reader_next(r, k, &mb)) {
            fprintf(stderr, "next: %s\n", ctf_reader_error(r)->message);
            ctf_reader_free(r);
            return false;
        }
        if (!mb) break;
        append_mb(out, mb);
        ctf_minibatch_free(mb);
    }
    ctf_reader_free(r);
    return true;
}

TEST(pack_parallel_copies_match_one_thread)
{
    const char *path = big_file(2000);
    ASSERT(path);
    /* 2000 samples of DIM floats: 1.6 MB a minibatch, copied in parts with threads. */
    const uint64_t sizes[] = {2000, 1};
    for (int rnd = 0; rnd < 2; rnd++)
        for (size_t si = 0; si < 2; si++) {
            bytes ref = {0};
            ASSERT(read_all(path, rnd, 0, sizes[si], &ref));
            ASSERT(ref.n > 0);
            const size_t threads[] = {2, 5};
            for (size_t ti = 0; ti < 2; ti++) {
                bytes got = {0};
                bool ok = read_all(path, rnd, threads[ti], sizes[si], &got);
                bool same = ok && got.n == ref.n && memcmp(got.p, ref.p, ref.n) == 0;
                free(got.p);
                if (!same)
                    fprintf(stderr, "randomize %d, minibatch %llu, %zu threads differ\n", rnd,
                            (unsigned long long)sizes[si], threads[ti]);
                if (!same) free(ref.p);
                ASSERT(same);
            }
            free(ref.p);
        }
}
