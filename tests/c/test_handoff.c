/*
 * test_handoff.c -- a chunk's sequence records are made once per load and handed to the
 * consumer (lib/reader/prefetch.c, lib/source/corpus.c): a sweep re-makes each chunk's records
 * exactly once (counted by the test build's re-scan counter), whatever the threads and the
 * order, and the minibatches are byte for byte those read with the records made by the source
 * (no read-ahead, the consumer's own re-make). And a later sweep reuses the buffers of the
 * chunks the window held instead of allocating them again.
 */
#include "reader/pipeline.h"
#include "test.h"

#include <stdio.h>

static const ctf_stream_def HS[] = {{"a", NULL, 2, false, false}, {"b", NULL, 50, true, false}};

/* Sequences of 1-4 lines with ids, dense and sparse values, deterministic. */
static const char *handoff_file(void)
{
    static char path[600];
    if (path[0]) return path;
    size_t cap = 1 << 20, n = 0;
    char *text = malloc(cap);
    uint64_t s = 12345;
    for (int id = 0; id < 1500; id++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int lines = 1 + (int)((s >> 33) % 4);
        for (int l = 0; l < lines; l++) {
            n += (size_t)snprintf(text + n, cap - n, "%d |a %d %d.5", id, id % 97, l);
            if (l == 0)
                n += (size_t)snprintf(text + n, cap - n, " |b %d:1 %d:2", id % 50, (id * 7) % 50);
            text[n++] = '\n';
        }
    }
    snprintf(path, sizeof path, "%s", test_write_file("handoff.ctf", text, n));
    free(text);
    return path;
}

typedef struct run_out {
    uint64_t digest;
    long rescans;        /* records re-made from a chunk's bytes during the sweeps */
    long misses;         /* buffer pool takes that had to allocate */
    uint64_t loaded;     /* chunks loaded */
    size_t chunks;
    size_t minibatches;
} run_out;

static int run(size_t threads, size_t prefetch, bool randomize, bool keep, uint64_t sweeps,
               run_out *o, ctf_error *err)
{
    ctf_config cfg;
    ctf_config_init(&cfg);
    cfg.path = handoff_file();
    cfg.streams = HS;
    cfg.num_streams = 2;
    cfg.chunk_size_bytes = 2048;
    cfg.randomize = randomize;
    cfg.randomization_seed = 7;
    cfg.max_sweeps = sweeps;
    cfg.num_threads = threads;
    cfg.prefetch_chunks = prefetch;
    cfg.keep_data_in_memory = keep;
    memset(o, 0, sizeof *o);
    o->digest = 0xcbf29ce484222325ull;
    ctf_reader *r;
    /* Counted from before the open: its look-ahead may start loads at once. The indexing pass
     * makes no records. */
    const long before = atomic_load(&ctf__rescan_count);
    const long misses0 = atomic_load(&ctf__bufpool_misses);
    int rc = ctf_reader_open(&cfg, &r, err);
    if (rc) return rc;
    o->chunks = ctf_reader_index(r)->num_chunks;
    for (;;) {
        ctf_minibatch *mb = NULL;
        rc = ctf_reader_next(r, 37, &mb);
        if (rc) {
            *err = *ctf_reader_error(r);
            break;
        }
        if (!mb) break;
        o->digest = test_digest_minibatch(o->digest, mb);
        o->minibatches++;
        ctf_minibatch_free(mb);
    }
    o->rescans = atomic_load(&ctf__rescan_count) - before;
    o->misses = atomic_load(&ctf__bufpool_misses) - misses0;
    ctf_stats st;
    ctf_reader_get_stats(r, &st);
    o->loaded = st.chunks_loaded;
    ctf_reader_free(r);
    return rc;
}

TEST(handoff_sweep_remakes_each_chunk_once)
{
    ctf_error err;
    for (int randomize = 0; randomize <= 1; randomize++) {
        run_out ref;
        /* The reference: no read-ahead, so the consumer's records come from the source's own
         * re-make (each chunk's records made twice: by the consumer, then by the load). */
        ASSERT_OK(run(0, 0, randomize, false, 1, &ref, &err), &err);
        ASSERT(ref.chunks > 20);
        ASSERT(ref.minibatches > 50);
        ASSERT_U64_EQ(ref.loaded, ref.chunks);
        ASSERT_EQ(ref.rescans, (long)(2 * ref.chunks));
        const size_t threads[] = {0, 1, 2, 3};
        for (size_t ti = 0; ti < 4; ti++) {
            run_out o;
            ASSERT_OK(run(threads[ti], 2 * threads[ti] + 2, randomize, false, 1, &o, &err), &err);
            ASSERT_U64_EQ(o.digest, ref.digest);
            ASSERT_EQ(o.minibatches, ref.minibatches);
            /* Every chunk loaded once, and its records made by that load only: the count is
             * the chunks', so no chunk's records were made twice. */
            ASSERT_U64_EQ(o.loaded, o.chunks);
            ASSERT_EQ(o.rescans, (long)o.chunks);
        }
    }
}

TEST(handoff_keep_data_in_memory_reads_once_over_sweeps)
{
    ctf_error err;
    run_out ref, o;
    ASSERT_OK(run(0, 0, true, true, 3, &ref, &err), &err);
    ASSERT_OK(run(2, 6, true, true, 3, &o, &err), &err);
    ASSERT_U64_EQ(o.digest, ref.digest);
    /* Later sweeps use the held chunks and their records: nothing is read again. */
    ASSERT_U64_EQ(o.loaded, o.chunks);
    ASSERT_EQ(o.rescans, (long)o.chunks);
}

TEST(handoff_later_sweeps_reuse_the_window_buffers)
{
    ctf_error err;
    run_out two, three, t3;
    /* Without threads the loads happen in a fixed order: the third sweep allocates nothing. */
    ASSERT_OK(run(0, 2, true, false, 2, &two, &err), &err);
    ASSERT_OK(run(0, 2, true, false, 3, &three, &err), &err);
    ASSERT(two.misses > 0);
    ASSERT_EQ(three.misses, two.misses);
    ASSERT_U64_EQ(three.loaded, 3 * three.chunks);
    /* With threads the same bytes. */
    ASSERT_OK(run(2, 6, true, false, 3, &t3, &err), &err);
    ASSERT_U64_EQ(t3.digest, three.digest);
}
