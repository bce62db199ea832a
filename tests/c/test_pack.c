/*
 * test_pack.c -- the packing stage (lib/reader/pack.c) on its own: picked sequences of hand-built
 * parsed chunks -> one owned minibatch. Dense and sparse CSR streams, per-sequence lengths,
 * keys/lines/files, pick order, truncated-BPTT windows, samples stored short (zero-filled),
 * samples cut short by the end of a file (the JSON prints only their values), the empty
 * minibatch, that the minibatch owns its memory (the chunks may go first), and that every
 * allocation failure is CTF_ENOMEM with nothing leaked. The pool of freed minibatches: reuse
 * without allocating, held minibatches untouched, at most CTF__MB_POOL_SLOTS kept, closing it
 * with minibatches still out, allocation failures. A sizes pass split into parts (run out of
 * order) gives the bytes of one part.
 */
#include "dump_json.h"
#include "reader/pipeline.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

/*======================================================================
 * Fixture: one chunk of three sequences, streams x (dense, dim 2) and y (sparse, dim 10)
 *
 *   seq 0: x [1 2] [3 4]            y {3:1}
 *   seq 1: x [5 6]                  y {1:2 4:3} {}
 *   seq 2: x [7 8] [9 10] [11 12]   y (no samples)
 *====================================================================*/

static const ctf_stream_def DEFS[2] = {
    {.name = "x", .dim = 2, .is_sparse = false},
    {.name = "y", .dim = 10, .is_sparse = true},
};

typedef struct fixture {
    float xv[12];
    float yv[3];
    int32_t yi[3];
    int64_t yp[5];
    ctf__stream_data sd[2];
    ctf__slice slices[6];
    ctf__chunk_data cd;
    ctf__parse_cfg pc;
} fixture;

static void fixture_init(fixture *f)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < 12; i++) f->xv[i] = (float)(i + 1);
    const float yv[3] = {1, 2, 3};
    const int32_t yi[3] = {3, 1, 4};
    const int64_t yp[5] = {0, 1, 3, 3, 3};
    memcpy(f->yv, yv, sizeof yv);
    memcpy(f->yi, yi, sizeof yi);
    memcpy(f->yp, yp, sizeof yp);
    f->sd[0] = (ctf__stream_data){.values = f->xv, .samples = 6, .short_sample = -1};
    f->sd[1] = (ctf__stream_data){.values = f->yv,
                                  .indices = f->yi,
                                  .indptr = f->yp,
                                  .samples = 3,
                                  .nnz = 3,
                                  .short_sample = -1};
    const ctf__slice sl[6] = {{0, 2}, {0, 1}, {2, 1}, {1, 2}, {3, 3}, {3, 0}};
    memcpy(f->slices, sl, sizeof sl);
    f->cd.num_seqs = 3;
    f->cd.num_streams = 2;
    f->cd.streams = f->sd;
    f->cd.slices = f->slices;
    f->cd.elt = sizeof(float);
    f->pc = (ctf__parse_cfg){.path = "t.ctf",
                             .streams = DEFS,
                             .num_streams = 2,
                             .precision = CTF_FLOAT32};
}

static ctf__pick pick_of(const fixture *f, size_t local, uint64_t samples)
{
    return (ctf__pick){.cd = &f->cd,
                       .local = local,
                       .key = 100 + local,
                       .line = 10 * local,
                       .samples = samples,
                       .from = 0,
                       .count = UINT32_MAX,
                       .file = 0};
}

/* The minibatch's JSON lines (dump_json_sequences), in a static buffer. */
static const char *json_of(const ctf_minibatch *mb, bool with_line)
{
    static char text[4096];
    FILE *f = tmpfile();
    if (!f) return "(tmpfile failed)";
    if (dump_json_sequences(mb, f, with_line) != 0) {
        fclose(f);
        return "(print failed)";
    }
    rewind(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

/*======================================================================
 * Tests
 *====================================================================*/

TEST(pack_dense_sparse_lengths_keys_in_pick_order)
{
    static fixture f;
    fixture_init(&f);
    /* Picked out of chunk order: the minibatch follows the picks. */
    ctf__pick picks[3] = {pick_of(&f, 2, 3), pick_of(&f, 0, 2), pick_of(&f, 1, 2)};
    picks[2].file = 4;
    ctf__mb_info info = {.position = 77, .sweep = 2, .end_of_sweep = true};
    ctf_minibatch *mb = NULL;
    ctf_error err;
    ASSERT_OK(ctf__pack(&f.pc, picks, 3, &info, &mb, &err), &err);
    ASSERT_EQ(ctf_minibatch_num_sequences(mb), 3);
    ASSERT_EQ(ctf_minibatch_num_streams(mb), 2);
    ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), 7);
    ASSERT_U64_EQ(ctf_minibatch_position(mb), 77);
    ASSERT_U64_EQ(ctf_minibatch_sweep(mb), 2);
    ASSERT(ctf_minibatch_end_of_sweep(mb));
    ASSERT_U64_EQ(ctf_minibatch_keys(mb)[0], 102);
    ASSERT_U64_EQ(ctf_minibatch_keys(mb)[1], 100);
    ASSERT_U64_EQ(ctf_minibatch_keys(mb)[2], 101);
    ASSERT_U64_EQ(ctf_minibatch_lines(mb)[0], 21); /* 1-based */
    ASSERT_U64_EQ(ctf_minibatch_lines(mb)[1], 1);
    ASSERT_EQ(ctf_minibatch_files(mb)[2], 4);

    ctf_stream_view x, y;
    ASSERT_EQ(ctf_minibatch_stream(mb, 0, &x), 0);
    ASSERT_EQ(ctf_minibatch_stream(mb, 1, &y), 0);
    ASSERT_EQ(ctf_minibatch_stream(mb, 2, &y), CTF_EINVAL);
    ASSERT_EQ(ctf_minibatch_stream(mb, 1, &y), 0);
    ASSERT_STR_EQ(x.name, "x");
    ASSERT(!x.is_sparse);
    ASSERT_EQ(x.precision, CTF_FLOAT32);
    ASSERT_EQ(x.dim, 2);
    ASSERT_EQ(x.num_sequences, 3);
    ASSERT_EQ(x.num_samples, 6);
    const float xw[12] = {7, 8, 9, 10, 11, 12, 1, 2, 3, 4, 5, 6};
    ASSERT_MEM_EQ(x.values, xw, sizeof xw);
    ASSERT_EQ(x.lengths[0], 3);
    ASSERT_EQ(x.lengths[1], 2);
    ASSERT_EQ(x.lengths[2], 1);

    ASSERT_STR_EQ(y.name, "y");
    ASSERT(y.is_sparse);
    ASSERT_EQ(y.dim, 10);
    ASSERT_EQ(y.num_samples, 3);
    ASSERT_EQ(y.nnz, 3);
    ASSERT_EQ(y.lengths[0], 0);
    ASSERT_EQ(y.lengths[1], 1);
    ASSERT_EQ(y.lengths[2], 2);
    const int64_t ip[4] = {0, 1, 3, 3};
    const int32_t ix[3] = {3, 1, 4};
    const float yv[3] = {1, 2, 3};
    ASSERT_MEM_EQ(y.indptr, ip, sizeof ip);
    ASSERT_MEM_EQ(y.indices, ix, sizeof ix);
    ASSERT_MEM_EQ(y.values, yv, sizeof yv);

    /* The minibatch owns its memory: the chunk's buffers may change or go away. */
    memset(f.xv, 0, sizeof f.xv);
    memset(f.yv, 0, sizeof f.yv);
    ASSERT_MEM_EQ(x.values, xw, sizeof xw);
    ASSERT_MEM_EQ(y.values, yv, sizeof yv);
    ctf_minibatch_free(mb);
}

TEST(pack_json_lines_and_corpus_files)
{
    static fixture f;
    fixture_init(&f);
    ctf__pick picks[2] = {pick_of(&f, 1, 2), pick_of(&f, 0, 2)};
    picks[0].file = 1;
    ctf__mb_info info = {.position = 4, .corpus = false};
    ctf_minibatch *mb = NULL;
    ctf_error err;
    ASSERT_OK(ctf__pack(&f.pc, picks, 2, &info, &mb, &err), &err);
    ASSERT_STR_EQ(json_of(mb, true),
                  "{\"key\": 101, \"line\": 11, \"streams\": {\"x\": [[5, 6]], "
                  "\"y\": [[[1, 2], [4, 3]], []]}}\n"
                  "{\"key\": 100, \"line\": 1, \"streams\": {\"x\": [[1, 2], [3, 4]], "
                  "\"y\": [[[3, 1]]]}}\n");
    ctf_minibatch_free(mb);
    /* A corpus names each sequence's file. */
    info.corpus = true;
    ASSERT_OK(ctf__pack(&f.pc, picks, 2, &info, &mb, &err), &err);
    ASSERT_STR_CONTAINS(json_of(mb, false), "{\"key\": 101, \"file\": 1, \"streams\"");
    ASSERT_STR_CONTAINS(json_of(mb, false), "{\"key\": 100, \"file\": 0, \"streams\"");
    ctf_minibatch_free(mb);
}

TEST(pack_truncated_bptt_windows)
{
    static fixture f;
    fixture_init(&f);
    /* Sequence 2, samples [1, 2) of x; y has no samples, so its window is empty. */
    ctf__pick p = pick_of(&f, 2, 3);
    p.from = 1;
    p.count = 1;
    /* Sequence 1 from sample 1 on: x has one sample only (window empty), y its second. */
    ctf__pick q = pick_of(&f, 1, 2);
    q.from = 1;
    ctf__pick picks[2] = {p, q};
    ctf__mb_info info = {0};
    ctf_minibatch *mb = NULL;
    ctf_error err;
    ASSERT_OK(ctf__pack(&f.pc, picks, 2, &info, &mb, &err), &err);
    ctf_stream_view x, y;
    ASSERT_EQ(ctf_minibatch_stream(mb, 0, &x), 0);
    ASSERT_EQ(ctf_minibatch_stream(mb, 1, &y), 0);
    ASSERT_EQ(x.num_samples, 1);
    ASSERT_EQ(x.lengths[0], 1);
    ASSERT_EQ(x.lengths[1], 0);
    const float xw[2] = {9, 10};
    ASSERT_MEM_EQ(x.values, xw, sizeof xw);
    ASSERT_EQ(y.num_samples, 1);
    ASSERT_EQ(y.lengths[0], 0);
    ASSERT_EQ(y.lengths[1], 1);
    ASSERT_EQ(y.nnz, 0);
    ASSERT_EQ(y.indptr[0], 0);
    ASSERT_EQ(y.indptr[1], 0);
    /* The window of a longer run: sequence 2's x from sample 1, as many as remain. */
    picks[0].count = 100;
    ctf_minibatch_free(mb);
    ASSERT_OK(ctf__pack(&f.pc, picks, 1, &info, &mb, &err), &err);
    ASSERT_EQ(ctf_minibatch_stream(mb, 0, &x), 0);
    ASSERT_EQ(x.lengths[0], 2);
    const float xw2[4] = {9, 10, 11, 12};
    ASSERT_MEM_EQ(x.values, xw2, sizeof xw2);
    ctf_minibatch_free(mb);
}

TEST(pack_short_dense_samples_zero_filled)
{
    /* One dense stream of dim 3 stored short: sample 0 has 3 values, sample 1 one (its zeros
     * were not kept), sample 2 none. The end of the file cut sample 1 short. */
    static const ctf_stream_def def = {.name = "d", .dim = 3};
    double v[4] = {1, 2, 3, 4};
    size_t off[4] = {0, 3, 4, 4};
    ctf__stream_data sd = {.values = v,
                           .samples = 3,
                           .short_sample = 1,
                           .short_count = 1,
                           .dense_off = off};
    ctf__slice sl[1] = {{0, 3}};
    ctf__chunk_data cd = {.num_seqs = 1,
                          .num_streams = 1,
                          .streams = &sd,
                          .slices = sl,
                          .elt = sizeof(double)};
    ctf__parse_cfg pc = {.path = "t.ctf",
                         .streams = &def,
                         .num_streams = 1,
                         .precision = CTF_FLOAT64};
    ctf__pick pick = {.cd = &cd, .local = 0, .key = 5, .samples = 3, .count = UINT32_MAX};
    ctf__mb_info info = {0};
    ctf_minibatch *mb = NULL;
    ctf_error err;
    ASSERT_OK(ctf__pack(&pc, &pick, 1, &info, &mb, &err), &err);
    ctf_stream_view d;
    ASSERT_EQ(ctf_minibatch_stream(mb, 0, &d), 0);
    ASSERT_EQ(d.precision, CTF_FLOAT64);
    ASSERT_EQ(d.num_samples, 3);
    const double want[9] = {1, 2, 3, 4, 0, 0, 0, 0, 0};
    ASSERT_MEM_EQ(d.values, want, sizeof want);
    /* The JSON prints what the file held for the sample cut short, not the padding. */
    ASSERT_STR_EQ(json_of(mb, false),
                  "{\"key\": 5, \"streams\": {\"d\": [[1, 2, 3], [4], [0, 0, 0]]}}\n");
    ctf_minibatch_free(mb);
    /* A window that starts after the short sample records no short sample. */
    pick.from = 2;
    ASSERT_OK(ctf__pack(&pc, &pick, 1, &info, &mb, &err), &err);
    ASSERT_STR_EQ(json_of(mb, false), "{\"key\": 5, \"streams\": {\"d\": [[0, 0, 0]]}}\n");
    ctf_minibatch_free(mb);
}

/* A run_parts that runs the parts on the caller's thread, last first, and counts its calls. */
typedef struct parts_log {
    int calls;
    size_t parts[4];
} parts_log;

static void parts_reversed(void *ctx, void (*fn)(void *arg, size_t part), void *arg, size_t parts)
{
    parts_log *log = ctx;
    if (log->calls < 4) log->parts[log->calls] = parts;
    log->calls++;
    for (size_t p = parts; p-- > 0;) fn(arg, p);
}

/* The minibatch's whole JSON, malloc'd (NULL on failure). */
static char *json_all(const ctf_minibatch *mb)
{
    FILE *f = tmpfile();
    if (!f) return NULL;
    char *t = NULL;
    long n;
    if (dump_json_sequences(mb, f, true) == 0 && (n = ftell(f)) >= 0 &&
        (t = malloc((size_t)n + 1))) {
        rewind(f);
        t[fread(t, 1, (size_t)n, f)] = '\0';
    }
    fclose(f);
    return t;
}

TEST(pack_sizes_pass_in_parts_matches_one_part)
{
    static fixture f;
    fixture_init(&f);
    f.sd[0].short_sample = 4; /* x's sample [9 10] was cut short: one value present */
    f.sd[0].short_count = 1;
    enum { N = 600 };
    static ctf__pick picks[N];
    for (size_t i = 0; i < N; i++) {
        picks[i] = pick_of(&f, (i * 7 + i / 5) % 3, 2);
        if (i % 11 == 0) picks[i].from = 1; /* windows: shorter slices, some empty */
    }
    ctf_error err;
    ctf_minibatch *one = NULL, *split = NULL;
    ctf__mb_info info = {0};
    ASSERT_OK(ctf__pack(&f.pc, picks, N, &info, &one, &err), &err);
    /* 600 picks of 2 streams: the sizes pass in 4 parts; the copies (a few KiB) in one. */
    parts_log log = {0};
    info = (ctf__mb_info){.run_parts = parts_reversed, .run_ctx = &log, .max_parts = 4};
    ASSERT_OK(ctf__pack(&f.pc, picks, N, &info, &split, &err), &err);
    ASSERT_EQ(log.calls, 1);
    ASSERT_EQ(log.parts[0], 4);

    /* The sparse stream against the picks' own entries. */
    ctf_stream_view y;
    ASSERT_EQ(ctf_minibatch_stream(split, 1, &y), 0);
    size_t sample = 0, nnz = 0;
    for (size_t i = 0; i < N; i++) {
        ctf__slice sl = f.slices[picks[i].local * 2 + 1];
        const uint32_t from = CTF_MIN(picks[i].from, sl.count);
        sl.first += from;
        sl.count -= from;
        ASSERT_EQ(y.lengths[i], sl.count);
        for (uint32_t r = 0; r < sl.count; r++, sample++) {
            ASSERT_EQ(y.indptr[sample], (int64_t)nnz);
            for (int64_t e = f.yp[sl.first + r]; e < f.yp[sl.first + r + 1]; e++, nnz++) {
                ASSERT_EQ(y.indices[nnz], f.yi[e]);
                ASSERT(y.values && ((const float *)y.values)[nnz] == f.yv[e]);
            }
        }
    }
    ASSERT_EQ(y.num_samples, sample);
    ASSERT_EQ(y.nnz, nnz);
    ASSERT_EQ(y.indptr[sample], (int64_t)nnz);

    /* Everything else (the dense stream, its samples cut short) as one part has it. */
    char *a = json_all(one), *b = json_all(split);
    const bool same = a && b && strcmp(a, b) == 0;
    ASSERT(!a || strstr(a, "\"x\": [[9]")); /* the short sample is in there */
    free(a);
    free(b);
    ASSERT(same);
    ctf_minibatch_free(one);
    ctf_minibatch_free(split);
}

TEST(pack_empty_minibatch)
{
    static fixture f;
    fixture_init(&f);
    ctf__mb_info info = {.position = 9, .sweep = 1};
    ctf_minibatch *mb = NULL;
    ctf_error err;
    ASSERT_OK(ctf__pack(&f.pc, NULL, 0, &info, &mb, &err), &err);
    ASSERT_EQ(ctf_minibatch_num_sequences(mb), 0);
    ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), 0);
    ASSERT_U64_EQ(ctf_minibatch_position(mb), 9);
    ctf_stream_view x, y;
    ASSERT_EQ(ctf_minibatch_stream(mb, 0, &x), 0);
    ASSERT_EQ(ctf_minibatch_stream(mb, 1, &y), 0);
    ASSERT_EQ(x.num_samples, 0);
    ASSERT_EQ(x.num_sequences, 0);
    ASSERT_EQ(y.num_samples, 0);
    ASSERT_EQ(y.nnz, 0);
    ASSERT(y.indptr != NULL);
    ASSERT_EQ(y.indptr[0], 0);
    ASSERT_STR_EQ(json_of(mb, false), "");
    ctf_minibatch_free(mb);
}

TEST(pack_each_allocation_failure_is_enomem_without_leaks)
{
    static fixture f;
    fixture_init(&f);
    ctf__pick picks[3] = {pick_of(&f, 2, 3), pick_of(&f, 0, 2), pick_of(&f, 1, 2)};
    ctf__mb_info info = {0};
    ctf_minibatch *mb = NULL;
    ctf_error err;
    /* How many allocations a successful pack makes. */
    const long live0 = atomic_load(&ctf__alloc.live);
    atomic_store(&ctf__alloc.count, 0);
    ASSERT_OK(ctf__pack(&f.pc, picks, 3, &info, &mb, &err), &err);
    const long count = atomic_load(&ctf__alloc.count);
    ctf_minibatch_free(mb);
    ASSERT(count > 5);
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
    for (long k = 1; k <= count; k++) {
        atomic_store(&ctf__alloc.count, 0);
        ctf__alloc.fail_at = k;
        mb = (ctf_minibatch *)&f; /* must be reset to NULL on failure */
        int rc = ctf__pack(&f.pc, picks, 3, &info, &mb, &err);
        ctf__alloc.fail_at = 0;
        ASSERT_EQ(rc, CTF_ENOMEM);
        ASSERT_EQ(err.code, CTF_ENOMEM);
        ASSERT(mb == NULL);
        ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
    }
}

/*======================================================================
 * The pool of freed minibatches
 *====================================================================*/

/* Allocations made by packing picks[0..n) with info. @return : the count, or -1 on failure. */
static long pack_counted(fixture *f, const ctf__pick *picks, size_t n, const ctf__mb_info *info,
                         ctf_minibatch **mb)
{
    ctf_error err;
    atomic_store(&ctf__alloc.count, 0);
    if (ctf__pack(&f->pc, picks, n, info, mb, &err) != 0) return -1;
    return atomic_load(&ctf__alloc.count);
}

TEST(pack_pool_reuses_freed_minibatches_keeps_held_ones)
{
    static fixture f;
    fixture_init(&f);
    ctf__pick picks[3] = {pick_of(&f, 2, 3), pick_of(&f, 0, 2), pick_of(&f, 1, 2)};
    ctf__mb_pool *pool = NULL;
    ctf__mb_info info = {.position = 7, .pool = &pool};
    const long live0 = atomic_load(&ctf__alloc.live);
    ctf_minibatch *a = NULL, *b = NULL, *c = NULL;
    ASSERT(pack_counted(&f, picks, 3, &info, &a) > 0);
    ASSERT(pool != NULL);
    char want[4096];
    snprintf(want, sizeof want, "%s", json_of(a, true));
    ctf_stream_view xa, xb, xc;
    ASSERT_EQ(ctf_minibatch_stream(a, 0, &xa), 0);
    const void *a_values = xa.values;
    ctf_minibatch_free(a);
    /* The same sizes again: the freed minibatch's blocks, nothing allocated. */
    ASSERT_EQ(pack_counted(&f, picks, 3, &info, &b), 0);
    ASSERT_EQ(ctf_minibatch_stream(b, 0, &xb), 0);
    ASSERT(xb.values == a_values);
    ASSERT_STR_EQ(json_of(b, true), want);
    /* While b is held, the next minibatch gets other blocks and b's data stays. */
    ASSERT(pack_counted(&f, picks + 1, 2, &info, &c) > 0);
    ASSERT_EQ(ctf_minibatch_stream(c, 0, &xc), 0);
    ASSERT(xc.values != xb.values);
    ASSERT_EQ(xc.num_samples, 3);
    ASSERT_STR_EQ(json_of(b, true), want);
    ctf_minibatch_free(c);
    /* A smaller minibatch fits in the blocks of a bigger one. */
    ctf_minibatch_free(b);
    ASSERT_EQ(pack_counted(&f, picks + 2, 1, &info, &b), 0);
    ASSERT_STR_EQ(json_of(b, false), "{\"key\": 101, \"streams\": {\"x\": [[5, 6]], "
                                     "\"y\": [[[1, 2], [4, 3]], []]}}\n");
    ctf_minibatch_free(b);

    /* At most CTF__MB_POOL_SLOTS freed minibatches are kept. */
    ctf_minibatch *held[CTF__MB_POOL_SLOTS + 2];
    for (size_t i = 0; i < CTF__MB_POOL_SLOTS + 2; i++)
        ASSERT(pack_counted(&f, picks, 3, &info, &held[i]) >= 0);
    for (size_t i = 0; i < CTF__MB_POOL_SLOTS + 2; i++) ctf_minibatch_free(held[i]);
    for (size_t i = 0; i < CTF__MB_POOL_SLOTS; i++)
        ASSERT_EQ(pack_counted(&f, picks, 3, &info, &held[i]), 0);
    ASSERT(pack_counted(&f, picks, 3, &info, &a) > 0);
    ASSERT_STR_EQ(json_of(a, true), want);

    /* The reader goes first: minibatches still out stay valid and are freed, not pooled. */
    for (size_t i = 0; i < CTF__MB_POOL_SLOTS; i++) ctf_minibatch_free(held[i]);
    ctf__mb_pool_close(pool);
    ASSERT_STR_EQ(json_of(a, true), want);
    ctf_minibatch_free(a);
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
}

TEST(pack_pool_allocation_failures_are_enomem_without_leaks)
{
    static fixture f;
    fixture_init(&f);
    ctf__pick picks[3] = {pick_of(&f, 2, 3), pick_of(&f, 0, 2), pick_of(&f, 1, 2)};
    const long live0 = atomic_load(&ctf__alloc.live);
    ctf_error err;
    /* A fresh pool (k counts its own allocation too: failing is CTF_ENOMEM like any other),
     * then a pooled minibatch that must grow (one sequence first, then three). */
    for (int grow = 0; grow < 2; grow++) {
        ctf__mb_pool *pool = NULL;
        ctf__mb_info info = {.pool = &pool};
        ctf_minibatch *mb = NULL;
        if (grow) {
            ASSERT(pack_counted(&f, picks + 2, 1, &info, &mb) > 0);
            ctf_minibatch_free(mb);
        }
        const long count = pack_counted(&f, picks, 3, &info, &mb);
        ASSERT(count > 0);
        ctf_minibatch_free(mb);
        if (grow) { /* the pooled one again, grown this time */
            ASSERT(pack_counted(&f, picks + 2, 1, &info, &mb) == 0);
            ctf_minibatch_free(mb);
        }
        ctf__mb_pool_close(pool);
        for (long k = 1; k <= count; k++) {
            pool = NULL;
            if (grow) {
                ASSERT(pack_counted(&f, picks + 2, 1, &info, &mb) > 0);
                ctf_minibatch_free(mb);
            }
            atomic_store(&ctf__alloc.count, 0);
            ctf__alloc.fail_at = k;
            int rc = ctf__pack(&f.pc, picks, 3, &info, &mb, &err);
            ctf__alloc.fail_at = 0;
            ASSERT_EQ(rc, CTF_ENOMEM);
            ASSERT_EQ(err.code, CTF_ENOMEM);
            ASSERT(mb == NULL);
            /* After a failure the pool still works. */
            if (pool) {
                ASSERT(pack_counted(&f, picks, 3, &info, &mb) >= 0);
                ctf_minibatch_free(mb);
            }
            ctf__mb_pool_close(pool);
            ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
        }
    }
}
