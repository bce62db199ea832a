/*
 * test_prefetch.c -- the prefetch stage (lib/reader/prefetch.c). Its threads as helpers: a parallel
 * run of parts (the minibatch copies) runs every part exactly once, whatever the number of threads,
 * and returns only when all are done. The chunk cache over a fake source: a chunk is held while
 * the sweep is inside it or a slot pins it, evicted once passed (never with
 * keep_data_in_memory), the loaded-ahead chunks stay within prefetch_chunks, and a request the
 * consumer never takes is cancelled when the sweep changes.
 */
#include "reader/pipeline.h"
#include "test.h"

#include <pthread.h>

typedef struct parts_log {
    pthread_mutex_t mu;
    unsigned runs[64];
    size_t calls;
} parts_log;

static void count_part(void *arg, size_t part)
{
    parts_log *p = arg;
    pthread_mutex_lock(&p->mu);
    if (part < 64) p->runs[part]++;
    p->calls++;
    pthread_mutex_unlock(&p->mu);
}

TEST(prefetch_run_parts_runs_each_part_once)
{
    ctf__parse_cfg pc;
    memset(&pc, 0, sizeof pc);
    ctf__source src;
    memset(&src, 0, sizeof src);
    const size_t threads[] = {0, 1, 3};
    for (size_t ti = 0; ti < 3; ti++) {
        ctf__loader *l = NULL;
        ctf_error e;
        ASSERT_EQ(ctf__loader_create(&pc, &src, threads[ti], 0, &l, &e), 0);
        for (size_t parts = 1; parts <= 40; parts += 3)
            for (int rep = 0; rep < 5; rep++) {
                parts_log log;
                memset(&log, 0, sizeof log);
                pthread_mutex_init(&log.mu, NULL);
                ctf__loader_run_parts(l, count_part, &log, parts);
                /* Returned only after every part ran: the counts are final here. */
                pthread_mutex_lock(&log.mu);
                size_t calls = log.calls;
                bool once = true;
                for (size_t i = 0; i < 64; i++) once &= log.runs[i] == (i < parts ? 1u : 0u);
                pthread_mutex_unlock(&log.mu);
                pthread_mutex_destroy(&log.mu);
                ASSERT_EQ(calls, parts);
                ASSERT(once);
            }
        ctf__loader_free(l);
    }
}

/* A source of NC chunks of SEQS sequences (one sample each) whose loads are counted, and whose
 * data counts its frees; chunk c's data claims 100 * (c + 1) bytes. */
enum { NC = 8, SEQS = 2 };

typedef struct fake_source {
    ctf__source src; /* first: the cache sees only this */
    ctf__chunk chunks[NC];
    pthread_mutex_t mu;
    unsigned loads, frees;
} fake_source;

static void fake_on_free(void *ctx, const ctf__chunk_data *cd)
{
    (void)cd;
    fake_source *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->frees++;
    pthread_mutex_unlock(&f->mu);
}

static int fake_load(ctf__source *s, ctf__readbuf *rb, size_t c, ctf__bufpool *pool,
                     ctf__chunk_data **out, ctf_error *err)
{
    (void)rb;
    (void)pool;
    fake_source *f = (fake_source *)s;
    ctf__chunk_data *cd = CTF_CALLOC(1, sizeof *cd);
    if (!cd) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    cd->chunk = c;
    cd->num_seqs = SEQS;
    cd->bytes = 100 * (c + 1);
    cd->on_free = fake_on_free;
    cd->on_free_ctx = f;
    pthread_mutex_lock(&f->mu);
    f->loads++;
    pthread_mutex_unlock(&f->mu);
    *out = cd;
    return 0;
}

static void fake_init(fake_source *f)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    for (size_t c = 0; c < NC; c++)
        f->chunks[c] = (ctf__chunk){c * SEQS, SEQS, c * 1000, 1000, SEQS};
    f->src.chunks = f->chunks;
    f->src.num_chunks = NC;
    f->src.num_seqs = NC * SEQS;
    f->src.total_samples = NC * SEQS;
    f->src.load = fake_load;
}

static ctf__cache_cfg fake_cfg(size_t threads, size_t prefetch, bool keep, ctf_stats *st)
{
    return (ctf__cache_cfg){.num_threads = threads,
                            .prefetch_chunks = prefetch,
                            .keep_data_in_memory = keep,
                            .randomized = false,
                            .window = 4,
                            .seed = 1,
                            .sweep_samples = NC * SEQS,
                            .limit = UINT64_MAX,
                            .stats = st};
}

TEST(cache_get_consume_evict)
{
    const size_t threads[] = {0, 2};
    for (size_t ti = 0; ti < 2; ti++) {
        fake_source f;
        fake_init(&f);
        ctf__parse_cfg pc;
        memset(&pc, 0, sizeof pc);
        ctf_stats st;
        memset(&st, 0, sizeof st);
        ctf__cache_cfg cfg = fake_cfg(threads[ti], 0, false, &st);
        ctf__cache *k = NULL;
        ctf__sweep_gen *gen = NULL;
        ctf_error e;
        ASSERT_EQ(ctf__cache_create(&pc, &f.src, &cfg, &k, &e), 0);
        ASSERT_EQ(ctf__cache_open_sweep(k, 0, &gen, &e), 0);
        ASSERT_EQ(ctf__sweepgen_sweep(gen), 0);

        const ctf__chunk_data *cd = NULL, *again = NULL;
        size_t held, bytes;
        ASSERT_EQ(ctf__cache_get(k, 3, &cd, &e), 0);
        ASSERT_EQ(cd->chunk, 3);
        ASSERT_EQ(ctf__cache_get(k, 3, &again, &e), 0); /* held: no second load */
        ASSERT(again == cd);
        ASSERT_EQ(f.loads, 1);
        ASSERT_U64_EQ(st.chunks_loaded, 1);
        ctf__cache_held(k, &held, &bytes);
        ASSERT_EQ(held, 1);
        ASSERT_EQ(bytes, 400);

        /* Half of chunk 3 cut: the sweep is inside it, it stays. */
        ctf__cache_consumed(k, 3);
        ctf__cache_evict_passed(k);
        ctf__cache_held(k, &held, &bytes);
        ASSERT_EQ(held, 1);
        /* All of it cut: passed, freed. */
        ctf__cache_consumed(k, 3);
        ctf__cache_evict_passed(k);
        ctf__cache_held(k, &held, &bytes);
        ASSERT_EQ(held, 0);
        ASSERT_EQ(bytes, 0);
        ASSERT_EQ(f.frees, 1);

        /* Pinned by a slot, held even with nothing cut; unpinned and not entered, evicted. */
        ASSERT_EQ(ctf__cache_get(k, 5, &cd, &e), 0);
        ctf__cache_pin(k, 5);
        ctf__cache_evict_passed(k);
        ctf__cache_held(k, &held, &bytes);
        ASSERT_EQ(held, 1);
        ctf__cache_unpin(k, 5);
        ctf__cache_evict_passed(k);
        ctf__cache_held(k, &held, &bytes);
        ASSERT_EQ(held, 0);
        ASSERT_EQ(f.frees, 2);

        /* A new sweep starts with nothing cut: chunk 3 is loaded again. */
        ASSERT_EQ(ctf__cache_open_sweep(k, 1, &gen, &e), 0);
        ASSERT_EQ(ctf__sweepgen_sweep(gen), 1);
        ASSERT_EQ(ctf__cache_get(k, 3, &cd, &e), 0);
        ASSERT_EQ(f.loads, 3);
        ASSERT_U64_EQ(st.chunks_loaded, 3);
        ctf__cache_update_stats(k);
        ASSERT_U64_EQ(st.chunks_resident, 1);
        ASSERT_U64_EQ(st.bytes_resident, 400);
        ASSERT_U64_EQ(st.bytes_resident_peak, 600);
        ctf__cache_free(k);
        ctf__sweepgen_free(gen);
        ASSERT_EQ(f.frees, f.loads);
        pthread_mutex_destroy(&f.mu);
    }
}

/* Walks one sweep and the first sequence of the next as the reader does: cut a sequence, take
 * its chunk, evict what is passed, schedule the look-ahead. *most: the most chunks in memory
 * at once after a step, held or loaded ahead. */
static int walk_sweep(ctf__cache *k, ctf__sweep_gen **gen, ctf_stats *st, uint64_t *most)
{
    ctf_error e;
    *most = 0;
    size_t slot = 0;
    uint64_t sweep = 0;
    ctf__cache_schedule(k, *gen, sweep, slot, 1, 0);
    for (size_t step = 0; step < NC * SEQS + 1; step++) {
        size_t seq, home;
        int rc = ctf__sweepgen_get(*gen, slot, &seq, &home, &e);
        if (rc) return rc;
        size_t c = ctf__sweepgen_chunk_at(*gen)[home];
        ctf__cache_consumed(k, c);
        if (++slot == ctf__sweepgen_num_slots(*gen)) {
            slot = 0;
            rc = ctf__cache_open_sweep(k, ++sweep, gen, &e);
            if (rc) return rc;
        }
        const ctf__chunk_data *cd;
        rc = ctf__cache_get(k, c, &cd, &e);
        if (rc) return rc;
        if (cd->chunk != c) return -1;
        ctf__cache_evict_passed(k);
        ctf__cache_schedule(k, *gen, sweep, slot, 1, 0);
        ctf__cache_update_stats(k);
        if (st->chunks_resident > *most) *most = st->chunks_resident;
    }
    return 0;
}

TEST(cache_memory_bound)
{
    for (int keep = 0; keep < 2; keep++) {
        fake_source f;
        fake_init(&f);
        ctf__parse_cfg pc;
        memset(&pc, 0, sizeof pc);
        ctf_stats st;
        memset(&st, 0, sizeof st);
        const size_t prefetch = 2;
        ctf__cache_cfg cfg = fake_cfg(2, prefetch, keep, &st);
        ctf__cache *k = NULL;
        ctf__sweep_gen *gen = NULL;
        ctf_error e;
        ASSERT_EQ(ctf__cache_create(&pc, &f.src, &cfg, &k, &e), 0);
        ASSERT_EQ(ctf__cache_open_sweep(k, 0, &gen, &e), 0);
        uint64_t most;
        ASSERT_EQ(walk_sweep(k, &gen, &st, &most), 0);
        ASSERT(ctf__cache_outstanding(k) <= prefetch);
        size_t held, bytes;
        ctf__cache_held(k, &held, &bytes);
        if (keep) {
            /* Nothing is ever evicted: every chunk stays, each loaded once. */
            ASSERT_EQ(held, NC);
            ASSERT(most >= NC);
            ASSERT_U64_EQ(st.chunks_loaded, NC);
        } else {
            /* The chunk at the cursor, plus at most prefetch_chunks loaded ahead. */
            ASSERT_EQ(held, 1);
            ASSERT(most <= 1 + prefetch);
            ASSERT(st.chunks_resident_peak <= 1 + prefetch);
            /* The first chunk of the next sweep (half cut) is loaded again. */
            ASSERT_U64_EQ(st.chunks_loaded, NC + 1);
        }
        ctf__cache_free(k);
        ctf__sweepgen_free(gen);
        ASSERT_EQ(f.frees, f.loads);
        pthread_mutex_destroy(&f.mu);
    }
}

TEST(cache_untaken_request_is_cancelled)
{
    fake_source f;
    fake_init(&f);
    ctf__parse_cfg pc;
    memset(&pc, 0, sizeof pc);
    ctf_stats st;
    memset(&st, 0, sizeof st);
    ctf__cache_cfg cfg = fake_cfg(1, 3, false, &st);
    cfg.limit = NC * SEQS; /* one sweep: no look into the next */
    ctf__cache *k = NULL;
    ctf__sweep_gen *gen = NULL;
    ctf_error e;
    ASSERT_EQ(ctf__cache_create(&pc, &f.src, &cfg, &k, &e), 0);
    ASSERT_EQ(ctf__cache_open_sweep(k, 0, &gen, &e), 0);
    ctf__cache_schedule(k, gen, 0, 0, 1, 0);
    ASSERT_EQ(ctf__cache_outstanding(k), 3);
    /* A minibatch's own chunk, asked for at once, beyond the look-ahead's budget. */
    ctf__cache_request(k, 6);
    ASSERT_EQ(ctf__cache_outstanding(k), 4);
    ctf__cache_request(k, 6); /* asked for already */
    ASSERT_EQ(ctf__cache_outstanding(k), 4);
    /* One of them is taken: no longer outstanding. */
    const ctf__chunk_data *cd;
    ASSERT_EQ(ctf__cache_get(k, 0, &cd, &e), 0);
    ASSERT_EQ(ctf__cache_outstanding(k), 3);
    /* The sweep changes before the others are taken: they are cancelled, and their data (if
     * loaded already) freed rather than held in the loader forever. */
    ASSERT_EQ(ctf__cache_open_sweep(k, 1, &gen, &e), 0);
    ASSERT_EQ(ctf__cache_outstanding(k), 0);
    ctf__cache_update_stats(k);
    ASSERT_U64_EQ(st.chunks_resident, 1); /* chunk 0, taken */
    ctf__cache_consumed(k, 0);
    ctf__cache_consumed(k, 0);
    ctf__cache_evict_passed(k);
    ctf__cache_update_stats(k);
    ASSERT_U64_EQ(st.chunks_resident, 0);
    /* A restart (seek, worker change) forgets requests too. */
    ctf__cache_schedule(k, gen, 1, 4, 1, 0);
    ASSERT(ctf__cache_outstanding(k) > 0);
    ctf__cache_restart(k, 4);
    ASSERT_EQ(ctf__cache_outstanding(k), 0);
    ctf__cache_update_stats(k);
    ASSERT_U64_EQ(st.chunks_resident, 0);
    ctf__cache_free(k);
    ctf__sweepgen_free(gen);
    ASSERT_EQ(f.frees, f.loads);
    pthread_mutex_destroy(&f.mu);
}

/* Walks `sweeps` sweeps as the reader does (cut a sequence, take its chunk, evict, schedule)
 * and counts, per sweep, the chunks taken (each a load) and the takes that found the chunk
 * neither held nor asked for: a load the caller does alone while the threads sit idle. *most:
 * the most chunks in memory at once after a step, held or loaded ahead. */
static int walk_sweeps(ctf__cache *k, ctf__sweep_gen **gen, ctf_stats *st, size_t sweeps,
                       uint64_t *loaded, unsigned *unasked, uint64_t *most)
{
    ctf_error e;
    size_t slot = 0;
    uint64_t sweep = 0, loaded0 = 0;
    *most = 0;
    ctf__cache_schedule(k, *gen, sweep, slot, 1, 0);
    for (;;) {
        size_t seq, home;
        int rc = ctf__sweepgen_get(*gen, slot, &seq, &home, &e);
        if (rc) return rc;
        const size_t c = ctf__sweepgen_chunk_at(*gen)[home];
        const uint64_t of = sweep; /* the sweep this sequence belongs to */
        ctf__cache_consumed(k, c);
        if (++slot == ctf__sweepgen_num_slots(*gen)) {
            loaded[sweep] = st->chunks_loaded - loaded0;
            loaded0 = st->chunks_loaded;
            if (++sweep == sweeps) return 0;
            slot = 0;
            rc = ctf__cache_open_sweep(k, sweep, gen, &e);
            if (rc) return rc;
        }
        if (!ctf__cache_asked(k, c)) unasked[of]++;
        const ctf__chunk_data *cd;
        rc = ctf__cache_get(k, c, &cd, &e);
        if (rc) return rc;
        if (cd->chunk != c) return -1;
        ctf__cache_evict_passed(k);
        ctf__cache_schedule(k, *gen, sweep, slot, 1, 0);
        ctf__cache_update_stats(k);
        if (st->chunks_resident > *most) *most = st->chunks_resident;
    }
}

TEST(cache_every_sweep_is_loaded_ahead)
{
    /* Every sweep, not only the first, finds its chunks asked for ahead: the look-ahead into
     * the next sweep must not use up the slots whose chunks the old sweep still held (or had
     * taken), and a chunk taken from a request for the next sweep is asked for again there.
     * Each chunk is loaded once a sweep; held plus asked-for chunks stay within the window's
     * chunks and prefetch_chunks. File order and randomized, a short and a whole-file
     * look-ahead. */
    enum { SWEEPS = 4 };
    const size_t prefetches[] = {3, NC};
    for (int randomized = 0; randomized < 2; randomized++)
        for (size_t pi = 0; pi < 2; pi++) {
            fake_source f;
            fake_init(&f);
            ctf__parse_cfg pc;
            memset(&pc, 0, sizeof pc);
            ctf_stats st;
            memset(&st, 0, sizeof st);
            const size_t prefetch = prefetches[pi];
            ctf__cache_cfg cfg = fake_cfg(2, prefetch, false, &st);
            cfg.randomized = randomized;
            cfg.window = 2;
            ctf__cache *k = NULL;
            ctf__sweep_gen *gen = NULL;
            ctf_error e;
            ASSERT_EQ(ctf__cache_create(&pc, &f.src, &cfg, &k, &e), 0);
            ASSERT_EQ(ctf__cache_open_sweep(k, 0, &gen, &e), 0);
            uint64_t loaded[SWEEPS] = {0}, most;
            unsigned unasked[SWEEPS] = {0};
            ASSERT_EQ(walk_sweeps(k, &gen, &st, SWEEPS, loaded, unasked, &most), 0);
            for (size_t s = 0; s < SWEEPS; s++) {
                ASSERT_U64_EQ(loaded[s], NC);
                ASSERT_EQ(unasked[s], 0);
            }
            ASSERT(most <= cfg.window + 1 + prefetch);
            ASSERT(ctf__cache_outstanding(k) <= prefetch);
            ctf__cache_free(k);
            ctf__sweepgen_free(gen);
            ASSERT_EQ(f.frees, f.loads);
            pthread_mutex_destroy(&f.mu);
        }
}
