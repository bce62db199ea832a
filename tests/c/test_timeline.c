/*
 * test_timeline.c -- the cut and the worker split as pure functions (lib/reader/timeline.c):
 * each rule on small cases, ctf_sweep_cut against a sequence-by-sequence model over random
 * lengths, requests and limits, the worker shares against the whole cut, elastic restore, and
 * the reader itself cutting and splitting a file exactly as the functions say.
 */
#include "test.h"

#include <stdlib.h>

static uint64_t trnd(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

TEST(cut_takes_the_first_sequence_and_never_looks_ahead)
{
    ctf_cut c = ctf_cut_start(10, 4, UINT64_MAX);
    ASSERT(ctf_cut_open(&c));
    ASSERT(ctf_cut_offer(&c, 7)); /* longer than the request, but first */
    ASSERT(!ctf_cut_offer(&c, 1));
    ASSERT_U64_EQ(c.position, 17);
    ASSERT_U64_EQ(c.samples, 7);
    ASSERT_EQ(c.sequences, 1);

    c = ctf_cut_start(0, 6, UINT64_MAX);
    ASSERT(ctf_cut_offer(&c, 3));
    ASSERT(!ctf_cut_offer(&c, 5)); /* 3 + 5 > 6 ends it; a 1 behind it is never tried */
    ASSERT(ctf_cut_offer(&c, 3));  /* exactly the request still fits */
    ASSERT(!ctf_cut_offer(&c, 1));
    ASSERT_U64_EQ(c.samples, 6);
    ASSERT_EQ(c.sequences, 2);
}

TEST(cut_stops_before_a_sequence_at_the_limit)
{
    ctf_cut c = ctf_cut_start(0, 100, 5);
    ASSERT(ctf_cut_open(&c));
    ASSERT(ctf_cut_offer(&c, 4));
    ASSERT(ctf_cut_open(&c));
    ASSERT(ctf_cut_offer(&c, 3)); /* starts before the limit: taken, and goes past it */
    ASSERT(!ctf_cut_open(&c));
    c = ctf_cut_start(5, 100, 5);
    ASSERT(!ctf_cut_open(&c));
}

TEST(worker_split_deals_indices_mod_n)
{
    ASSERT(ctf_worker_owns(7, 1, 0));
    ASSERT(ctf_worker_owns(7, 3, 1));
    ASSERT(!ctf_worker_owns(7, 3, 0));
    for (uint64_t from = 0; from < 20; from++)
        for (size_t n = 1; n < 6; n++)
            for (size_t r = 0; r < n; r++) {
                const uint64_t f = ctf_worker_first(from, n, r);
                ASSERT(f >= from && f < from + n);
                ASSERT(ctf_worker_owns(f, n, r));
            }
}

/* The model: sequence i of the sweep has lengths[i]; walk the timeline one sequence at a time
 * (rules 6.1, 6.2, 6.4), written without the library. */
static uint64_t model_cut(const uint64_t *len, size_t n, uint64_t pos, size_t *slot, uint64_t k,
                          uint64_t limit, bool *eos, size_t *count)
{
    uint64_t total = 0;
    *eos = false;
    *count = 0;
    while (pos < limit) {
        if (*count && total + len[*slot] > k) break;
        total += len[*slot];
        pos += len[*slot];
        ++*count;
        if (++*slot == n) {
            *slot = 0;
            *eos = true;
        }
    }
    return pos;
}

TEST(sweep_cut_matches_the_sequence_by_sequence_model)
{
    uint64_t seed = 42;
    for (int round = 0; round < 300; round++) {
        const size_t n = 1 + trnd(&seed) % 12;
        uint64_t len[12], starts[13] = {0};
        for (size_t i = 0; i < n; i++) {
            len[i] = 1 + trnd(&seed) % 6;
            starts[i + 1] = starts[i] + len[i];
        }
        const uint64_t limit = trnd(&seed) % 3 ? UINT64_MAX : trnd(&seed) % (4 * starts[n]);
        uint64_t pos = 0;
        size_t slot = 0;
        for (int call = 0; call < 20; call++) {
            const uint64_t k = 1 + trnd(&seed) % (2 * starts[n] + 3);
            bool eos, meos;
            size_t count;
            const uint64_t want = model_cut(len, n, pos, &slot, k, limit, &meos, &count);
            ctf_cut c = ctf_cut_start(pos, k, limit);
            ctf_error e;
            ASSERT_OK(ctf_sweep_cut(starts, n, &c, &eos, &e), &e);
            ASSERT_U64_EQ(c.position, want);
            ASSERT_EQ(c.sequences, count);
            ASSERT_EQ(eos, meos);
            /* The shares of N workers are disjoint, each is its indices mod N, and together
             * they are the whole cut in timeline order. */
            const size_t workers = 1 + round % 4;
            uint64_t *all = malloc((count + 1) * sizeof *all), *mine = malloc((count + 1) * 8);
            const size_t total = ctf_sweep_owned(starts, n, pos, want, 1, 0, all);
            ASSERT_EQ(total, count);
            size_t got = 0;
            for (size_t r = 0; r < workers; r++) {
                const size_t m = ctf_sweep_owned(starts, n, pos, want, workers, r, mine);
                for (size_t i = 0; i < m; i++) ASSERT(mine[i] % workers == r);
                size_t j = 0; /* mine is a subsequence of all */
                for (size_t i = 0; i < total && j < m; i++)
                    if (all[i] == mine[j]) j++;
                ASSERT_EQ(j, m);
                got += m;
            }
            ASSERT_EQ(got, count);
            free(all);
            free(mine);
            pos = want;
        }
    }
}

TEST(sweep_cut_refuses_bad_input)
{
    const uint64_t starts[] = {0, 2, 5, 6};
    ctf_error e;
    bool eos;
    ctf_cut c = ctf_cut_start(3, 4, UINT64_MAX);
    ASSERT_EQ(ctf_sweep_cut(starts, 3, &c, &eos, &e), CTF_EINVAL);
    ASSERT(strstr(e.message, "not a sequence boundary"));
    ASSERT_U64_EQ(c.position, 3); /* unchanged */
    c = ctf_cut_start(0, 0, UINT64_MAX);
    ASSERT_EQ(ctf_sweep_cut(starts, 3, &c, &eos, &e), CTF_EINVAL);
    c = ctf_cut_start(0, 4, UINT64_MAX);
    ASSERT_EQ(ctf_sweep_cut(starts + 1, 2, &c, &eos, &e), CTF_EINVAL);
    ASSERT_EQ(ctf_sweep_cut(starts, 0, &c, &eos, &e), CTF_EINVAL);
    c = ctf_cut_start(CTF_MAX_POSITION + 1, 4, UINT64_MAX);
    ASSERT_EQ(ctf_sweep_cut(starts, 3, &c, &eos, &e), CTF_EINVAL);
}

TEST(sweep_boundary_and_elastic_restore)
{
    const uint64_t starts[] = {0, 2, 5, 6};
    ASSERT_U64_EQ(ctf_sweep_boundary(starts, 3, 0), 0);
    ASSERT_U64_EQ(ctf_sweep_boundary(starts, 3, 1), 2);
    ASSERT_U64_EQ(ctf_sweep_boundary(starts, 3, 5), 5);
    ASSERT_U64_EQ(ctf_sweep_boundary(starts, 3, 6), 6);
    ASSERT_U64_EQ(ctf_sweep_boundary(starts, 3, 10), 11);
    /* Two workers for three calls, then three from the saved position: every sequence of the
     * timeline is delivered once, in order, as one worker sees it. */
    uint64_t one[64], split[64];
    size_t n1 = 0, n2 = 0;
    uint64_t pos = 0, pos1 = 0;
    for (int call = 0; call < 8; call++) {
        const size_t workers = call < 3 ? 2 : 3;
        ctf_cut c = ctf_cut_start(pos, 4, 30);
        bool eos;
        ctf_error e;
        ASSERT_OK(ctf_sweep_cut(starts, 3, &c, &eos, &e), &e);
        for (size_t r = 0; r < workers; r++)
            n2 += ctf_sweep_owned(starts, 3, pos, c.position, workers, r, split + n2);
        pos = c.position;
        c = ctf_cut_start(pos1, 4, 30);
        ASSERT_OK(ctf_sweep_cut(starts, 3, &c, &eos, &e), &e);
        n1 += ctf_sweep_owned(starts, 3, pos1, c.position, 1, 0, one + n1);
        pos1 = c.position;
    }
    ASSERT_U64_EQ(pos, pos1);
    ASSERT_EQ(n1, n2);
    uint64_t seen[3] = {0};
    for (size_t i = 0; i < n1; i++) seen[one[i]]++, seen[split[i]]--;
    ASSERT(!seen[0] && !seen[1] && !seen[2]);
}

static void quiet(void *u, ctf_severity s, const ctf_error *e) { (void)u, (void)s, (void)e; }

/* The reader over a file of known sequence lengths, without randomization, cuts and splits
 * exactly as ctf_sweep_cut and ctf_sweep_owned say, for every worker. */
TEST(reader_cuts_and_splits_as_the_functions_say)
{
    static const uint64_t len[] = {2, 5, 1, 1, 3, 4, 1, 2};
    const size_t n = sizeof len / sizeof len[0];
    uint64_t starts[9] = {0};
    char text[512];
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        starts[i + 1] = starts[i] + len[i];
        for (uint64_t s = 0; s < len[i]; s++)
            at += (size_t)snprintf(text + at, sizeof text - at, "%zu |x %llu\n", i,
                                   (unsigned long long)s);
    }
    const char *path = test_write_str("timeline.ctf", text);
    static const ctf_stream_def x = {.name = "x", .dim = 1};
    for (size_t workers = 1; workers <= 3; workers++)
        for (size_t rank = 0; rank < workers; rank++) {
            ctf_config cfg;
            ctf_config_init(&cfg);
            cfg.path = path;
            cfg.streams = &x;
            cfg.num_streams = 1;
            cfg.log = quiet;
            cfg.randomize = false;
            cfg.max_samples = 40;
            cfg.num_workers = workers;
            cfg.worker_rank = rank;
            ctf_reader *r;
            ctf_error e;
            ASSERT_OK(ctf_reader_open(&cfg, &r, &e), &e);
            uint64_t pos = 0, seed = workers * 10 + rank;
            for (;;) {
                const uint64_t k = 1 + trnd(&seed) % 9;
                ctf_cut c = ctf_cut_start(pos, k, 40);
                bool eos;
                ASSERT_OK(ctf_sweep_cut(starts, n, &c, &eos, &e), &e);
                ctf_minibatch *mb;
                ASSERT_OK(ctf_reader_next(r, k, &mb), ctf_reader_error(r));
                if (!c.sequences) {
                    ASSERT(!mb);
                    break;
                }
                ASSERT(mb);
                uint64_t mine[16];
                const size_t m = ctf_sweep_owned(starts, n, pos, c.position, workers, rank, mine);
                ASSERT_EQ(ctf_minibatch_num_sequences(mb), m);
                for (size_t i = 0; i < m; i++) ASSERT_U64_EQ(ctf_minibatch_keys(mb)[i], mine[i]);
                ASSERT_U64_EQ(ctf_minibatch_position(mb), c.position);
                ASSERT_EQ(ctf_minibatch_end_of_sweep(mb), eos);
                ctf_minibatch_free(mb);
                pos = c.position;
            }
            ctf_reader_free(r);
        }
}
