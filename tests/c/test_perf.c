/*
 * test_perf.c -- the stage counters and the verdict (lib/stats.c and the one-line counts in
 * source.c, prefetch.c, reader.c). Invariants over real sweeps: every byte of the file parsed
 * once per sweep, reads cover the chunks, the consumer's clock splits exactly into its parts,
 * the counts match the minibatches delivered, nothing ever goes down; the struct versioned by
 * size; the verdict's rule on constructed counters and on a consumer that is really slow.
 */
#include "test.h"

#include <stddef.h>
#include <stdlib.h>
#include <time.h>

static void perf_quiet(void *user, ctf_severity sev, const ctf_error *what)
{
    (void)user;
    (void)sev;
    (void)what;
}

/* n lines of "|x a b c |y k:v" with varying widths (line mode), into name. @return : path. */
static const char *perf_file(const char *name, size_t n, size_t *size)
{
    size_t cap = n * 64 + 1, len = 0;
    char *text = malloc(cap);
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, cap - len, "|x %zu %zu.5 -%zu |y %zu:1\n", i,
                                i * 7 % 1000, i % 13, i % 5);
    const char *p = test_write_file(name, text, len);
    free(text);
    *size = len;
    return p;
}

static const ctf_stream_def PERF_S[2] = {{.name = "x", .dim = 3},
                                         {.name = "y", .dim = 5, .is_sparse = true}};

static void perf_cfg(ctf_config *c, const char *path)
{
    ctf_config_init(c);
    c->path = path;
    c->streams = PERF_S;
    c->num_streams = 2;
    c->skip_sequence_ids = true;
    c->chunk_size_bytes = 2000;
    c->max_sweeps = 1;
    c->cache_index = false;
    c->log = perf_quiet;
}

/* Bytes the minibatch delivers, from its views (what pack_bytes counts). */
static uint64_t mb_bytes(const ctf_minibatch *mb)
{
    uint64_t b = 0;
    for (size_t i = 0; i < ctf_minibatch_num_streams(mb); i++) {
        ctf_stream_view v;
        ctf_minibatch_stream(mb, i, &v);
        b += v.is_sparse ? v.nnz * (4 + 4) + (v.num_samples + 1) * 8 : v.num_samples * v.dim * 4;
    }
    return b;
}

/* Every counter but the residency (which goes up and down) never decreases. */
static bool perf_monotone(const ctf_perf *a, const ctf_perf *b)
{
    const size_t skip = offsetof(ctf_perf, chunks_resident) / sizeof(uint64_t);
    const uint64_t *x = (const uint64_t *)a, *y = (const uint64_t *)b;
    for (size_t i = 0; i < sizeof *a / sizeof(uint64_t); i++)
        if (i != skip && y[i] < x[i]) return false;
    return true;
}

TEST(perf_sweep_parses_every_byte_once)
{
    size_t size;
    const char *path = perf_file("perf-sweep.ctf", 3000, &size);
    for (int mode = 0; mode < 4; mode++) {
        ctf_config c;
        perf_cfg(&c, path);
        c.randomize = mode & 1;
        c.num_threads = mode & 2 ? 2 : 0;
        c.randomization_window = 4;
        ctf_reader *r;
        ctf_error e;
        ASSERT_OK(ctf_reader_open(&c, &r, &e), &e);
        ctf_index_info info;
        ctf_index_get_info(ctf_reader_index(r), &info);
        ASSERT(info.chunks > 5);
        ctf_perf last;
        ASSERT_EQ(ctf_reader_get_perf(r, &last, sizeof last), sizeof last);
        ASSERT_EQ(last.next_calls, 0);
        ASSERT_U64_EQ(last.index_bytes, size);
        ASSERT(last.open_ns >= last.index_ns && last.index_ns > 0);
        uint64_t mbs = 0, bytes = 0, seqs = 0, samples = 0;
        for (;;) {
            ctf_minibatch *mb;
            ASSERT_OK(ctf_reader_next(r, 37, &mb), ctf_reader_error(r));
            ctf_perf now;
            ctf_reader_get_perf(r, &now, sizeof now);
            ASSERT(perf_monotone(&last, &now));
            last = now;
            if (!mb) break;
            mbs++;
            bytes += mb_bytes(mb);
            seqs += ctf_minibatch_num_sequences(mb);
            samples += ctf_minibatch_num_samples(mb);
            ctf_minibatch_free(mb);
        }
        ctf_perf p;
        ctf_reader_get_perf(r, &p, sizeof p);
        ctf_stats st;
        ctf_reader_get_stats(r, &st);
        /* Each chunk parsed to its end once: every byte of the file (no BOM here). */
        ASSERT_U64_EQ(p.parse_bytes, size);
        if (!c.num_threads) {
            /* Loads on the caller only: one per chunk, and each read covers its chunk and the
             * byte before it (the line-start check) for every chunk but the first. */
            ASSERT_U64_EQ(p.chunks_loaded, info.chunks);
            ASSERT_U64_EQ(p.read_bytes, size + info.chunks - 1);
            ASSERT_U64_EQ(p.chunks_loaded, st.chunks_loaded);
        } else {
            ASSERT(p.chunks_loaded >= info.chunks);
            ASSERT(p.read_bytes >= size + info.chunks - 1);
        }
        ASSERT(p.chunks_evicted + p.chunks_resident >= info.chunks);
        ASSERT(p.chunks_evicted <= p.chunks_loaded);
        ASSERT(p.reads >= info.chunks);
        ASSERT(p.read_ns > 0 && p.parse_ns > 0 && p.load_ns >= p.parse_ns);
        ASSERT_U64_EQ(p.cut_sequences, 3000);
        ASSERT_U64_EQ(p.cut_samples, 3000);
        ASSERT_U64_EQ(seqs, 3000);
        ASSERT_U64_EQ(samples, 3000);
        ASSERT_U64_EQ(p.minibatches, mbs);
        ASSERT_U64_EQ(p.next_calls, mbs + 1); /* the last call says the data ended */
        ASSERT_U64_EQ(p.pack_bytes, bytes);
        /* The consumer's clock splits exactly, and so does the minibatches' work: inside next
         * without threads, else read ahead on a thread of its own. */
        ASSERT_U64_EQ(p.elapsed_ns, p.next_ns + p.consumer_ns);
        ASSERT_U64_EQ(p.work_ns, p.cut_ns + p.wait_ns + p.pack_ns);
        if (!c.num_threads) ASSERT(p.next_ns >= p.work_ns);
        ASSERT(p.waits <= p.chunks_loaded + info.chunks);
        ASSERT_U64_EQ(p.num_threads, c.num_threads);
        ASSERT_U64_EQ(p.chunk_cache_hits + p.chunk_cache_misses, 0);
        ASSERT_U64_EQ(p.remote_requests + p.remote_retries + p.remote_bytes, 0);
        ctf_reader_free(r);
    }
}

TEST(perf_index_cache_hits_and_join_sums)
{
    size_t size;
    const char *path = perf_file("perf-cache.ctf", 500, &size);
    ctf_config c;
    perf_cfg(&c, path);
    c.cache_index = true;
    ctf_perf p[2];
    for (int open = 0; open < 2; open++) {
        ctf_reader *r;
        ctf_error e;
        ASSERT_OK(ctf_reader_open(&c, &r, &e), &e);
        ctf_reader_get_perf(r, &p[open], sizeof p[open]);
        ctf_reader_free(r);
    }
    ASSERT_U64_EQ(p[0].index_cache_hits, 0);
    ASSERT_U64_EQ(p[0].index_cache_misses, 1);
    ASSERT_U64_EQ(p[0].index_bytes, size);
    ASSERT_U64_EQ(p[1].index_cache_hits, 1);
    ASSERT_U64_EQ(p[1].index_cache_misses, 0);
    ASSERT_U64_EQ(p[1].index_bytes, 0);

    /* A join: the primary's and the joined files' indexing add up. */
    size_t ysize;
    const char *y = test_write_str("perf-join-y.ctf", "0 |z 1\n1 |z 2\n2 |z 3\n");
    ysize = strlen("0 |z 1\n1 |z 2\n2 |z 3\n");
    const char *x = test_write_str("perf-join-x.ctf", "0 |x 1 2 3\n1 |x 4 5 6\n2 |x 7 8 9\n");
    const size_t xsize = strlen("0 |x 1 2 3\n1 |x 4 5 6\n2 |x 7 8 9\n");
    static const ctf_stream_def sx = {.name = "x", .dim = 3}, sz = {.name = "z", .dim = 1};
    const char *ypaths[] = {y};
    ctf_join_def jd = {.paths = ypaths, .num_paths = 1, .streams = &sz, .num_streams = 1};
    ctf_config j;
    ctf_config_init(&j);
    j.path = x;
    j.streams = &sx;
    j.num_streams = 1;
    j.joins = &jd;
    j.num_joins = 1;
    j.cache_index = false;
    j.log = perf_quiet;
    j.num_threads = 0;
    ctf_reader *r;
    ctf_error e;
    ASSERT_OK(ctf_reader_open(&j, &r, &e), &e);
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_next(r, 3, &mb), ctf_reader_error(r));
    ASSERT(mb != NULL);
    ctf_minibatch_free(mb);
    ctf_perf q;
    ctf_reader_get_perf(r, &q, sizeof q);
    ASSERT_U64_EQ(q.index_bytes, xsize + ysize);
    /* The joined chunk's load read and parsed both files' chunks. */
    ASSERT_U64_EQ(q.parse_bytes, xsize + ysize);
    ctf_reader_free(r);
}

TEST(perf_struct_is_versioned_by_size)
{
    size_t size;
    const char *path = perf_file("perf-size.ctf", 200, &size);
    ctf_config c;
    perf_cfg(&c, path);
    ctf_reader *r;
    ctf_error e;
    ASSERT_OK(ctf_reader_open(&c, &r, &e), &e);
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_next(r, 50, &mb), ctf_reader_error(r));
    ctf_minibatch_free(mb);
    /* An older caller's struct: only its prefix is written. */
    unsigned char buf[sizeof(ctf_perf) + 64];
    memset(buf, 0xAB, sizeof buf);
    const size_t old = offsetof(ctf_perf, open_ns);
    ASSERT_EQ(ctf_reader_get_perf(r, (ctf_perf *)(void *)buf, old), sizeof(ctf_perf));
    ASSERT_EQ(buf[old], 0xAB);
    ASSERT_EQ(buf[sizeof buf - 1], 0xAB);
    ctf_perf full;
    ctf_reader_get_perf(r, &full, sizeof full);
    ASSERT_U64_EQ(((ctf_perf *)(void *)buf)->next_calls, full.next_calls);
    /* A newer caller's larger struct: the library's part, then zeros. */
    memset(buf, 0xAB, sizeof buf);
    ctf_reader_get_perf(r, (ctf_perf *)(void *)buf, sizeof buf);
    for (size_t i = sizeof(ctf_perf); i < sizeof buf; i++) ASSERT_EQ(buf[i], 0);
    /* The verdict reads what an older struct lacks as zero. */
    ctf_verdict v;
    ctf_perf part = full;
    ctf_perf_verdict(&part, old, &v);
    ASSERT(v.stage_name != NULL);
    ctf_reader_free(r);
}

/* Counters of a run of 1 s on the consumer's clock with the given shares (per mille). */
static ctf_perf shaped(unsigned consumer, unsigned wait, unsigned pack, unsigned cut)
{
    ctf_perf p;
    memset(&p, 0, sizeof p);
    p.next_calls = 100;
    p.consumer_ns = consumer * 1000000ull;
    p.wait_ns = wait * 1000000ull;
    p.pack_ns = pack * 1000000ull;
    p.cut_ns = cut * 1000000ull;
    p.next_ns = p.wait_ns + p.pack_ns + p.cut_ns;
    p.elapsed_ns = p.next_ns + p.consumer_ns;
    p.open_ns = 1000000;
    p.num_threads = 2;
    p.prefetch_chunks = 6;
    return p;
}

TEST(perf_verdict_names_the_limiting_stage)
{
    ctf_verdict v;
    ctf_perf p = shaped(800, 100, 50, 50);
    ctf_perf_verdict(&p, sizeof p, &v);
    ASSERT_EQ(v.stage, CTF_STAGE_CONSUMER);
    ASSERT_STR_EQ(v.stage_name, "consumer");
    ASSERT_STR_CONTAINS(v.text, "the consumer is the bottleneck: the reader is idle 80% of the "
                                "time");

    p = shaped(200, 710, 50, 40);
    p.parse_ns = 3000000000ull; /* two threads parsing all the time */
    p.read_ns = 200000000ull;
    p.load_ns = 1900000000ull;
    ctf_perf_verdict(&p, sizeof p, &v);
    ASSERT_EQ(v.stage, CTF_STAGE_PARSE);
    ASSERT_STR_CONTAINS(v.text, "waiting for parse: 71% of the consumer's time; raise "
                                "num_threads (now 2)");
    ASSERT(v.share > 0.70 && v.share < 0.72);

    p.read_ns = 4000000000ull; /* reads dominate the loads */
    p.read_bytes = 400000000ull;
    ctf_perf_verdict(&p, sizeof p, &v);
    ASSERT_EQ(v.stage, CTF_STAGE_READ);
    ASSERT_STR_CONTAINS(v.text, "waiting for reads: 71%");
    ASSERT_STR_CONTAINS(v.text, "100 MB/s");

    p.load_ns = 300000000ull; /* the threads mostly idle: the look-ahead is too short */
    ctf_perf_verdict(&p, sizeof p, &v);
    ASSERT_STR_CONTAINS(v.text, "busy only 15% of the time: raise prefetch_chunks (now 6)");

    p = shaped(100, 100, 600, 200);
    ctf_perf_verdict(&p, sizeof p, &v);
    ASSERT_EQ(v.stage, CTF_STAGE_PACK);
    ASSERT_STR_CONTAINS(v.text, "packing minibatches: 60%");

    p = shaped(100, 100, 200, 600);
    ctf_perf_verdict(&p, sizeof p, &v);
    ASSERT_EQ(v.stage, CTF_STAGE_CUT);
    ASSERT_STR_CONTAINS(v.text, "cutting the timeline: 60%");

    p = shaped(500, 300, 100, 100);
    p.open_ns = 3000000000ull; /* three times the reading since */
    p.index_ns = 2900000000ull;
    p.index_bytes = 1u << 30;
    ctf_perf_verdict(&p, sizeof p, &v);
    ASSERT_EQ(v.stage, CTF_STAGE_OPEN);
    ASSERT_STR_CONTAINS(v.text, "opening: 75% of the time");
    ASSERT_STR_CONTAINS(v.text, "set cache_index");

    memset(&p, 0, sizeof p);
    ctf_perf_verdict(&p, sizeof p, &v);
    ASSERT_EQ(v.stage, CTF_STAGE_NONE);
    ASSERT_STR_EQ(v.stage_name, "none");
}

TEST(perf_verdict_of_a_slow_consumer)
{
    size_t size;
    const char *path = perf_file("perf-slow.ctf", 400, &size);
    ctf_config c;
    perf_cfg(&c, path);
    c.keep_data_in_memory = true;
    c.max_sweeps = 3;
    ctf_reader *r;
    ctf_error e;
    ASSERT_OK(ctf_reader_open(&c, &r, &e), &e);
    for (int i = 0; i < 30; i++) {
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 20, &mb), ctf_reader_error(r));
        ASSERT(mb != NULL);
        ctf_minibatch_free(mb);
        /* A training step: far longer than cutting 20 sequences already in memory. */
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    ctf_perf p;
    ctf_reader_get_perf(r, &p, sizeof p);
    ctf_verdict v;
    ctf_perf_verdict(&p, sizeof p, &v);
    ASSERT_EQ(v.stage, CTF_STAGE_CONSUMER);
    ASSERT(p.consumer_ns >= 29ull * 20 * 1000 * 1000);
    ASSERT(v.share > 0.5);
    ctf_reader_free(r);
}
