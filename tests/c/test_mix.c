/*
 * test_mix.c -- mixes of data sets (lib/mix.c) through the public reader API: each part's
 * sequences come in the order the part has when read alone, the part that goes next follows the
 * weights at every prefix, and the data do not depend on minibatch size, threads, prefetch
 * depth or workers; checkpoints, elastic restore, seeks, sweeps, weight 0 and a changed part.
 *
 * Part p's keys are p * 10000 + i, so a delivered key names its part; runs that must agree are
 * compared as byte strings of the delivered sequences (test_bytes.h).
 */
#include "test.h"
#include "test_bytes.h"

#include <math.h>
#include <stdlib.h>

/*======================================================================
 * Helpers
 *====================================================================*/

static uint64_t mrnd(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* n sequences of 1..maxlen samples, dense x (dim 2) and sparse y (dim 10), keys base + i. */
static const char *write_part(const char *name, uint64_t seed, size_t n, uint64_t base,
                              unsigned maxlen)
{
    size_t cap = n * maxlen * 64 + 1, at = 0;
    char *t = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        unsigned len = 1 + (unsigned)(mrnd(&seed) % maxlen);
        for (unsigned l = 0; l < len; l++)
            at += (size_t)snprintf(t + at, cap - at, "%llu |x %u %u |y %u:%u\n",
                                   (unsigned long long)(base + i), (unsigned)(mrnd(&seed) % 100),
                                   (unsigned)(mrnd(&seed) % 100), (unsigned)(mrnd(&seed) % 10),
                                   1 + (unsigned)(mrnd(&seed) % 9));
    }
    t[at] = 0;
    const char *p = test_write_str(name, t);
    free(t);
    return p;
}

static const ctf_stream_def MS[] = {{.name = "x", .dim = 2},
                                    {.name = "y", .dim = 10, .is_sparse = true}};

typedef struct mixset {
    char *path[3];
    const char *paths[3][1];
    ctf_mix_part parts[3];
} mixset;

/* Three parts: 40 sequences of 1-3 samples, 25 of 1-5, 60 of 1-2. */
static void mixset_make(mixset *m, const char *stem)
{
    static const size_t n[3] = {40, 25, 60};
    static const unsigned len[3] = {3, 5, 2};
    for (size_t p = 0; p < 3; p++) {
        char name[64];
        snprintf(name, sizeof name, "%s-%zu.ctf", stem, p);
        m->path[p] = strdup(write_part(name, 100 + p, n[p], p * 10000, len[p]));
        m->paths[p][0] = m->path[p];
        m->parts[p] = (ctf_mix_part){.paths = m->paths[p], .num_paths = 1, .weight = 1.0};
    }
}

static void mixset_free(mixset *m)
{
    for (size_t p = 0; p < 3; p++) free(m->path[p]);
}

static void mix_cfg(ctf_config *c, mixset *m, size_t nparts, const double *w)
{
    ctf_config_init(c);
    c->streams = MS;
    c->num_streams = 2;
    c->mix = m->parts;
    c->num_mix = nparts;
    for (size_t p = 0; p < nparts; p++) m->parts[p].weight = w[p];
    c->chunk_size_bytes = 150; /* several chunks per part */
    c->randomization_window = 3;
    c->randomization_seed = 7;
    c->num_threads = 2;
}

static ctf_reader *mopen(const ctf_config *c)
{
    ctf_reader *r = NULL;
    ctf_error e;
    if (ctf_reader_open(c, &r, &e) != 0) {
        fprintf(stderr, "ctf_reader_open: %s: %s\n", e.path, e.message);
        return NULL;
    }
    return r;
}

/* Reads up to max_calls minibatches of k samples; appends every sequence, then per minibatch
 * its position and sweep. @return : the calls, -1 on error. */
static long mread(ctf_reader *r, uint64_t k, bytes *b, long max_calls, bool marks)
{
    long calls = 0;
    while (calls < max_calls) {
        ctf_minibatch *mb;
        if (ctf_reader_next(r, k, &mb) != 0) {
            fprintf(stderr, "mread: %s\n", ctf_reader_error(r)->message);
            return -1;
        }
        if (!mb) break;
        for (size_t i = 0; i < ctf_minibatch_num_sequences(mb); i++) append_seq(b, mb, i);
        if (marks) {
            uint64_t sep[2] = {ctf_minibatch_position(mb), ctf_minibatch_sweep(mb)};
            b_add(b, sep, sizeof sep);
        }
        ctf_minibatch_free(mb);
        calls++;
    }
    return calls;
}

/*======================================================================
 * Order and proportions
 *====================================================================*/

/* Keys (and samples) of each sequence, one minibatch of 1 sample at a time. */
static size_t mix_keys(ctf_reader *r, size_t max, uint64_t *keys, uint64_t *samples)
{
    size_t n = 0;
    while (n < max) {
        ctf_minibatch *mb;
        if (ctf_reader_next(r, 1, &mb) != 0 || !mb) break;
        if (ctf_minibatch_num_sequences(mb) == 1) {
            keys[n] = ctf_minibatch_keys(mb)[0];
            samples[n] = ctf_minibatch_num_samples(mb);
            n++;
        }
        ctf_minibatch_free(mb);
    }
    return n;
}

TEST(mix_parts_keep_their_own_order)
{
    mixset m;
    mixset_make(&m, "order");
    const double w[3] = {2, 1, 0.5};
    enum { N = 600 };
    static uint64_t mk[N], ms[N], pk[N], psm[N];
    ctf_config c;
    mix_cfg(&c, &m, 3, w);
    ctf_reader *r = mopen(&c);
    ASSERT(r);
    ASSERT_U64_EQ(ctf_reader_samples_per_sweep(r), 0);
    ASSERT_EQ(ctf_reader_num_files(r), 3);
    ASSERT_STR_EQ(ctf_reader_file_path(r, 2), m.path[2]);
    size_t n = mix_keys(r, N, mk, ms);
    /* The stage counters of a mix: its calls, and the parts' loads. */
    ctf_perf perf;
    ctf_reader_get_perf(r, &perf, sizeof perf);
    ASSERT_U64_EQ(perf.cut_sequences, N);
    ASSERT_U64_EQ(perf.minibatches, N);
    ASSERT(perf.parse_bytes > 0 && perf.chunks_loaded > 0);
    ctf_reader_free(r);
    ASSERT_EQ(n, N);
    for (size_t p = 0; p < 3; p++) {
        /* The part read alone with the same settings. */
        ctf_config a = c;
        a.mix = NULL;
        a.num_mix = 0;
        a.path = m.path[p];
        ctf_reader *ra = mopen(&a);
        ASSERT(ra);
        size_t got = 0, j = 0;
        for (size_t i = 0; i < n; i++) got += mk[i] / 10000 == p;
        size_t alone = mix_keys(ra, got, pk, psm);
        ctf_reader_free(ra);
        ASSERT_EQ(alone, got);
        for (size_t i = 0; i < n; i++) {
            if (mk[i] / 10000 != p) continue;
            ASSERT_U64_EQ(mk[i], pk[j]);
            ASSERT_U64_EQ(ms[i], psm[j]);
            j++;
        }
    }
    mixset_free(&m);
}

TEST(mix_proportions_hold_at_every_prefix)
{
    mixset m;
    mixset_make(&m, "prop");
    const double ws[3][3] = {{1, 1, 1}, {0.7, 0.2, 0.1}, {3, 0, 1}};
    const uint64_t maxlen[3] = {3, 5, 2};
    enum { N = 500 };
    static uint64_t mk[N], ms[N];
    for (size_t t = 0; t < 3; t++) {
        ctf_config c;
        mix_cfg(&c, &m, 3, ws[t]);
        ctf_reader *r = mopen(&c);
        ASSERT(r);
        size_t n = mix_keys(r, N, mk, ms);
        ctf_reader_free(r);
        ASSERT_EQ(n, N);
        double W = 0, D = 0;
        for (size_t p = 0; p < 3; p++) {
            W += ws[t][p];
            if (ws[t][p] > 0) D = fmax(D, (double)maxlen[p] / ws[t][p]);
        }
        uint64_t taken[3] = {0}, T = 0;
        for (size_t i = 0; i < n; i++) {
            taken[mk[i] / 10000] += ms[i];
            T += ms[i];
            for (size_t p = 0; p < 3; p++) {
                double want = (double)T * ws[t][p] / W;
                ASSERT(fabs((double)taken[p] - want) <= ws[t][p] * D + 1e-9);
            }
        }
        ASSERT_U64_EQ(taken[1] == 0, ws[t][1] == 0); /* weight 0: never read */
    }
    mixset_free(&m);
}

/*======================================================================
 * The same data whatever the minibatch size, threads, prefetch, workers
 *====================================================================*/

TEST(mix_same_data_for_any_minibatch_size_and_threads)
{
    mixset m;
    mixset_make(&m, "same");
    const double w[3] = {0.5, 0.3, 0.2};
    ctf_config c;
    mix_cfg(&c, &m, 3, w);
    c.max_samples = 700;
    bytes ref = {0};
    ctf_reader *r = mopen(&c);
    ASSERT(r);
    ASSERT(mread(r, 1, &ref, 100000, false) > 0);
    ctf_reader_free(r);
    const uint64_t sizes[] = {2, 9, 64, 1000};
    for (size_t si = 0; si < 4; si++)
        for (size_t th = 0; th < 3; th += 2)
            for (size_t pf = 0; pf < 2; pf++) {
                ctf_config d = c;
                d.num_threads = th;
                d.prefetch_chunks = pf ? CTF_PREFETCH_AUTO : 0;
                bytes b = {0};
                r = mopen(&d);
                ASSERT(r);
                ASSERT(mread(r, sizes[si], &b, 100000, false) > 0);
                ctf_reader_free(r);
                ASSERT(b_eq(&ref, &b));
                b_free(&b);
            }
    b_free(&ref);
    mixset_free(&m);
}

/* The union over N workers of each minibatch holds the single worker's sequences. */
TEST(mix_workers_split_the_global_minibatch)
{
    mixset m;
    mixset_make(&m, "workers");
    const double w[3] = {1, 2, 1};
    for (int randomize = 0; randomize < 2; randomize++) {
        ctf_config c;
        mix_cfg(&c, &m, 3, w);
        c.randomize = randomize;
        c.max_samples = 500;
        enum { W = 3 };
        ctf_reader *one = mopen(&c), *rs[W];
        ASSERT(one);
        for (size_t k = 0; k < W; k++) {
            ctf_config d = c;
            d.num_workers = W;
            d.worker_rank = k;
            rs[k] = mopen(&d);
            ASSERT(rs[k]);
        }
        for (;;) {
            ctf_minibatch *mb, *parts[W];
            ASSERT_OK(ctf_reader_next(one, 17, &mb), ctf_reader_error(one));
            size_t total = 0;
            for (size_t k = 0; k < W; k++) {
                ASSERT_OK(ctf_reader_next(rs[k], 17, &parts[k]), ctf_reader_error(rs[k]));
                ASSERT((mb == NULL) == (parts[k] == NULL));
                if (parts[k]) total += ctf_minibatch_num_sequences(parts[k]);
            }
            if (!mb) break;
            ASSERT_EQ(total, ctf_minibatch_num_sequences(mb));
            /* Every sequence of the global minibatch is in exactly one share (keys are
             * unique within the first sweep of each part, which 500 samples stay in... or
             * not: count by multiplicity). */
            for (size_t i = 0; i < ctf_minibatch_num_sequences(mb); i++) {
                uint64_t key = ctf_minibatch_keys(mb)[i];
                size_t want = 0, got = 0;
                for (size_t j = 0; j < ctf_minibatch_num_sequences(mb); j++)
                    want += ctf_minibatch_keys(mb)[j] == key;
                for (size_t k = 0; k < W; k++)
                    for (size_t j = 0; j < ctf_minibatch_num_sequences(parts[k]); j++)
                        got += ctf_minibatch_keys(parts[k])[j] == key;
                ASSERT_EQ(got, want);
            }
            for (size_t k = 0; k < W; k++) {
                ASSERT_U64_EQ(ctf_minibatch_position(parts[k]), ctf_minibatch_position(mb));
                ctf_minibatch_free(parts[k]);
            }
            ctf_minibatch_free(mb);
        }
        ctf_reader_free(one);
        for (size_t k = 0; k < W; k++) ctf_reader_free(rs[k]);
    }
    mixset_free(&m);
}

/*======================================================================
 * Checkpoints, seeks, elastic restore
 *====================================================================*/

static char *save(ctf_reader *r)
{
    size_t len;
    if (ctf_reader_save_state(r, NULL, 0, &len)) return NULL;
    char *s = malloc(len + 1);
    if (ctf_reader_save_state(r, s, len + 1, &len)) {
        free(s);
        return NULL;
    }
    return s;
}

TEST(mix_checkpoint_restores_exactly)
{
    mixset m;
    mixset_make(&m, "ckpt");
    const double w[3] = {0.6, 0.25, 0.15};
    ctf_config c;
    mix_cfg(&c, &m, 3, w);
    c.max_samples = 900;
    ctf_reader *r = mopen(&c);
    ASSERT(r);
    bytes head = {0}, tail = {0}, again = {0}, seeked = {0};
    ASSERT_EQ(mread(r, 13, &head, 20, true), 20);
    char *st = save(r);
    ASSERT(st);
    ASSERT_STR_CONTAINS(st, "\"mix_positions\"");
    ASSERT_STR_CONTAINS(st, "\"mix_parts\"");
    const uint64_t pos = ctf_reader_position(r);
    ASSERT(mread(r, 13, &tail, 100000, true) > 0);
    ctf_reader_free(r);

    r = mopen(&c);
    ASSERT(r);
    ASSERT_OK(ctf_reader_restore_state(r, st, strlen(st)), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_reader_position(r), pos);
    ASSERT(mread(r, 13, &again, 100000, true) > 0);
    ASSERT(b_eq(&tail, &again));
    ctf_reader_free(r);

    /* A seek replays the choice from the start to the same place. */
    r = mopen(&c);
    ASSERT(r);
    ASSERT_OK(ctf_reader_seek(r, pos), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_reader_position(r), pos);
    ASSERT(mread(r, 13, &seeked, 100000, true) > 0);
    ASSERT(b_eq(&tail, &seeked));
    char *st2 = NULL;
    ctf_reader_free(r);

    /* Elastic: two workers restored from the one-worker state share the rest. */
    size_t total = 0, want = 0;
    for (size_t k = 0; k < 2; k++) {
        ctf_config d = c;
        d.num_workers = 2;
        d.worker_rank = k;
        r = mopen(&d);
        ASSERT(r);
        ASSERT_OK(ctf_reader_restore_state(r, st, strlen(st)), ctf_reader_error(r));
        ctf_minibatch *mb;
        for (;;) {
            ASSERT_OK(ctf_reader_next(r, 13, &mb), ctf_reader_error(r));
            if (!mb) break;
            total += ctf_minibatch_num_sequences(mb);
            ctf_minibatch_free(mb);
        }
        ctf_reader_free(r);
    }
    r = mopen(&c);
    ASSERT(r);
    ASSERT_OK(ctf_reader_restore_state(r, st, strlen(st)), ctf_reader_error(r));
    for (;;) {
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 13, &mb), ctf_reader_error(r));
        if (!mb) break;
        want += ctf_minibatch_num_sequences(mb);
        ctf_minibatch_free(mb);
    }
    st2 = save(r);
    ctf_reader_free(r);
    ASSERT(want > 0);
    ASSERT_EQ(total, want);
    ASSERT(st2);
    free(st2);
    free(st);
    b_free(&head);
    b_free(&tail);
    b_free(&again);
    b_free(&seeked);
    mixset_free(&m);
}

TEST(mix_restore_refuses_a_changed_part_by_name)
{
    mixset m;
    mixset_make(&m, "changed");
    const double w[3] = {1, 1, 1};
    ctf_config c;
    mix_cfg(&c, &m, 3, w);
    ctf_reader *r = mopen(&c);
    ASSERT(r);
    bytes b = {0};
    ASSERT_EQ(mread(r, 10, &b, 5, false), 5);
    char *st = save(r);
    ctf_reader_free(r);
    ASSERT(st);
    write_part("changed-1.ctf", 999, 25, 10000, 5); /* other values, same keys */
    r = mopen(&c);
    ASSERT(r);
    ASSERT_EQ(ctf_reader_restore_state(r, st, strlen(st)), CTF_ESTATE);
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "mix part 1");
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, m.path[1]);
    ctf_reader_free(r);

    /* Other weights: the mix's own fingerprint. */
    const double w2[3] = {1, 2, 1};
    mix_cfg(&c, &m, 3, w2);
    write_part("changed-1.ctf", 101, 25, 10000, 5); /* back as it was */
    r = mopen(&c);
    ASSERT(r);
    ASSERT_EQ(ctf_reader_restore_state(r, st, strlen(st)), CTF_ESTATE);
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "weights");
    ctf_reader_free(r);

    /* A one-file reader refuses a mix's state, a mix of two parts one of three. */
    ctf_config one = c;
    one.mix = NULL;
    one.num_mix = 0;
    one.path = m.path[0];
    r = mopen(&one);
    ASSERT(r);
    ASSERT_EQ(ctf_reader_restore_state(r, st, strlen(st)), CTF_ESTATE);
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "mix");
    ctf_reader_free(r);
    mix_cfg(&c, &m, 2, w);
    r = mopen(&c);
    ASSERT(r);
    ASSERT_EQ(ctf_reader_restore_state(r, st, strlen(st)), CTF_ESTATE);
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "3 parts");
    ctf_reader_free(r);
    free(st);
    b_free(&b);
    mixset_free(&m);
}

/*======================================================================
 * Sweeps, limits, weight 0, one part
 *====================================================================*/

TEST(mix_sweep_ends_when_every_weighted_part_finished_one)
{
    mixset m;
    mixset_make(&m, "sweep");
    const double w[3] = {5, 1, 0};
    ctf_config c;
    mix_cfg(&c, &m, 3, w);
    c.max_sweeps = 1;
    ctf_reader *r = mopen(&c);
    ASSERT(r);
    /* Count each key per part; part 1 (weight 1) finishes last, part 0 sweeps several times. */
    static unsigned seen[3][64];
    memset(seen, 0, sizeof seen);
    uint64_t last_sweep = 0;
    bool eos = false;
    for (;;) {
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 7, &mb), ctf_reader_error(r));
        if (!mb) break;
        ASSERT(!eos); /* the minibatch that ends the sweep is the last one */
        eos = ctf_minibatch_end_of_sweep(mb);
        last_sweep = ctf_minibatch_sweep(mb);
        for (size_t i = 0; i < ctf_minibatch_num_sequences(mb); i++) {
            uint64_t k = ctf_minibatch_keys(mb)[i];
            seen[k / 10000][k % 10000]++;
        }
        ctf_minibatch_free(mb);
    }
    ASSERT(eos);
    ASSERT_U64_EQ(last_sweep, 0);
    for (size_t i = 0; i < 25; i++) ASSERT_EQ(seen[1][i], 1); /* once: its one sweep */
    for (size_t i = 0; i < 60; i++) ASSERT_EQ(seen[2][i], 0); /* weight 0 */
    /* Part 0 went through whole sweeps and part of one more: every key k or k + 1 times. */
    unsigned lo = 1000, hi = 0;
    for (size_t i = 0; i < 40; i++) {
        lo = seen[0][i] < lo ? seen[0][i] : lo;
        hi = seen[0][i] > hi ? seen[0][i] : hi;
    }
    ASSERT(lo >= 1);
    ASSERT(hi <= lo + 1);
    ctf_reader_free(r);
    mixset_free(&m);
}

TEST(mix_of_one_part_reads_as_the_part)
{
    mixset m;
    mixset_make(&m, "single");
    const double w[1] = {0.3};
    ctf_config c;
    mix_cfg(&c, &m, 1, w);
    c.max_sweeps = 3;
    ctf_config a = c;
    a.mix = NULL;
    a.num_mix = 0;
    a.path = m.path[0];
    bytes x = {0}, y = {0};
    ctf_reader *r = mopen(&c), *ra = mopen(&a);
    ASSERT(r && ra);
    ASSERT(mread(r, 11, &x, 100000, true) > 0);
    ASSERT(mread(ra, 11, &y, 100000, true) > 0);
    ASSERT(b_eq(&x, &y)); /* the same sequences, positions and sweeps */
    ctf_reader_free(r);
    ctf_reader_free(ra);
    b_free(&x);
    b_free(&y);
    mixset_free(&m);
}

TEST(mix_refuses_bad_configurations)
{
    mixset m;
    mixset_make(&m, "bad");
    ctf_config c;
    ctf_error e;
    ctf_reader *r = NULL;
    const double zero[2] = {0, 0}, neg[2] = {1, -1}, ok[2] = {1, 1};
    mix_cfg(&c, &m, 2, zero);
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EINVAL);
    ASSERT_STR_CONTAINS(e.message, "weight > 0");
    mix_cfg(&c, &m, 2, neg);
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EINVAL);
    ASSERT_STR_CONTAINS(e.message, "config.mix[1].weight");
    m.parts[1].weight = NAN;
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EINVAL);
    mix_cfg(&c, &m, 2, ok);
    c.path = m.path[0];
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EINVAL);
    c.path = NULL;
    c.truncation_length = 4;
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EINVAL);
    ASSERT_STR_CONTAINS(e.message, "truncation_length");
    c.truncation_length = 0;
    /* A part whose streams differ from the mix's is named. */
    static const ctf_stream_def other[] = {{.name = "x", .dim = 3},
                                           {.name = "y", .dim = 10, .is_sparse = true}};
    m.parts[1].streams = other;
    m.parts[1].num_streams = 2;
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EINVAL);
    ASSERT_STR_CONTAINS(e.message, "mix part 1");
    ASSERT(r == NULL);
    /* A part that cannot be read is named too. */
    m.parts[1].streams = NULL;
    const char *missing[1] = {"/nonexistent/mix-part.ctf"};
    m.parts[1].paths = missing;
    ASSERT(ctf_reader_open(&c, &r, &e) != 0);
    ASSERT_STR_CONTAINS(e.message, "mix part 1");
    /* A weight so small that one sweep of the mix would never end, while max_sweeps bounds
     * the run: refused, naming the part; bounded by max_samples alone it reads. */
    m.parts[1].paths = m.paths[1];
    const double tiny[2] = {1, 1e-300};
    mix_cfg(&c, &m, 2, tiny);
    c.max_sweeps = 1;
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EINVAL);
    ASSERT_STR_CONTAINS(e.message, "config.mix[1].weight");
    ASSERT_STR_CONTAINS(e.message, "sweep of the mix");
    c.max_sweeps = CTF_INFINITELY_REPEAT;
    c.max_samples = 100;
    r = mopen(&c);
    ASSERT(r);
    ctf_reader_free(r);
    mix_cfg(&c, &m, 2, ok);
    /* A minibatch of more sweeps than anyone means is refused (EINVAL: the reader goes on). */
    r = mopen(&c);
    ASSERT(r);
    ctf_minibatch *mb;
    ASSERT_EQ(ctf_reader_next(r, UINT64_MAX / 2, &mb), CTF_EINVAL);
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "num_samples");
    ASSERT_OK(ctf_reader_next(r, 5, &mb), ctf_reader_error(r));
    ASSERT(mb && ctf_minibatch_num_sequences(mb) > 0);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    mixset_free(&m);
}

/*======================================================================
 * The configuration language
 *====================================================================*/

TEST(mix_configuration_form)
{
    mixset m;
    mixset_make(&m, "cfgform");
    char text[2048];
    snprintf(text, sizeof text,
             "reader = {\n"
             "    randomizationWindow = 3 ; randomizationSeed = 7 ; chunkSizeInBytes = 150\n"
             "    input = { x = { dim = 2 ; format = \"dense\" }\n"
             "              y = { dim = 10 ; format = \"sparse\" } }\n"
             "    mix = ( { file = \"%s\" ; weight = 0.5 }\n"
             "          : { file = \"%s\" ; weight = 0.3 }\n"
             "          : { file = \"%s\" ; weight = 0.2 ;\n"
             "              input = { x = { dim = 2 ; format = \"dense\" }\n"
             "                        y = { dim = 10 ; format = \"sparse\" } } } )\n"
             "}\n",
             m.path[0], m.path[1], m.path[2]);
    ctf_bsconfig *doc;
    ctf_error e;
    ASSERT_OK(ctf_bsconfig_parse(text, strlen(text), "mix.cntk", NULL, NULL, 0, &doc, &e), &e);
    ctf_config fromdoc;
    ctf_config_init(&fromdoc);
    fromdoc.num_threads = 2;
    ASSERT_OK(ctf_bsconfig_apply(doc, &fromdoc, &e), &e);
    ASSERT_EQ(fromdoc.num_mix, 3);
    ASSERT_DBL_EQ(fromdoc.mix[1].weight, 0.3);
    ASSERT(fromdoc.mix[2].streams != NULL);
    ctf_config c;
    const double w[3] = {0.5, 0.3, 0.2};
    mix_cfg(&c, &m, 3, w);
    c.max_samples = 400;
    fromdoc.max_samples = 400;
    bytes x = {0}, y = {0};
    ctf_reader *ra = mopen(&fromdoc), *rb = mopen(&c);
    ASSERT(ra && rb);
    ASSERT(mread(ra, 16, &x, 100000, true) > 0);
    ASSERT(mread(rb, 16, &y, 100000, true) > 0);
    ASSERT(b_eq(&x, &y));
    ctf_reader_free(ra);
    ctf_reader_free(rb);
    ctf_bsconfig_free(doc);

    /* file next to mix, and a part without a weight, are refused with their line. */
    const char *bad[] = {
        "reader = { file = \"a.ctf\" ; input = { x = { dim = 2 ; format = \"dense\" } }\n"
        "  mix = ( { file = \"a.ctf\" ; weight = 1 } ) }\n",
        "reader = { input = { x = { dim = 2 ; format = \"dense\" } }\n"
        "  mix = ( { file = \"a.ctf\" } ) }\n",
        "reader = { input = { x = { dim = 2 ; format = \"dense\" } }\n"
        "  mix = ( { file = \"a.ctf\" ; weight = 1 ; wieght = 2 } ) }\n"};
    const char *want[] = {"file: a mix reads its parts' files",
                          "mix[0]: missing the required "
                          "parameter 'weight'",
                          "unknown parameter 'wieght'"};
    for (size_t i = 0; i < 3; i++) {
        ASSERT_OK(ctf_bsconfig_parse(bad[i], strlen(bad[i]), "bad.cntk", NULL, NULL, 0, &doc, &e),
                  &e);
        ctf_config_init(&fromdoc);
        ASSERT_EQ(ctf_bsconfig_apply(doc, &fromdoc, &e), CTF_EINVAL);
        ASSERT_STR_CONTAINS(e.message, want[i]);
        ASSERT(e.line > 0);
        ctf_bsconfig_free(doc);
    }
    b_free(&x);
    b_free(&y);
    mixset_free(&m);
}

/* A mix skips through its seek: skipping to the position of minibatch 20 (from the start and
 * from the state at minibatch 5) continues as the run did; the state lists the stretch and a
 * restore keeps it. */
TEST(mix_skip_equals_read_and_discard)
{
    mixset m;
    mixset_make(&m, "skip");
    const double w[3] = {0.6, 0.25, 0.15};
    ctf_config c;
    mix_cfg(&c, &m, 3, w);
    c.max_samples = 900;
    ctf_reader *r = mopen(&c);
    ASSERT(r);
    bytes head = {0}, tail = {0}, got = {0}, got2 = {0};
    ASSERT_EQ(mread(r, 13, &head, 5, true), 5);
    char *st5 = save(r);
    const uint64_t p5 = ctf_reader_position(r);
    ASSERT_EQ(mread(r, 13, &head, 15, true), 15);
    const uint64_t p20 = ctf_reader_position(r);
    ASSERT(mread(r, 13, &tail, 100000, true) > 0);
    ctf_reader_free(r);

    ASSERT((r = mopen(&c)) != NULL);
    ASSERT_OK(ctf_reader_skip(r, p20), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_reader_position(r), p20);
    char *st = save(r), want[96];
    snprintf(want, sizeof want, "\"skipped\": \"0-%llu\"", (unsigned long long)p20);
    ASSERT_STR_CONTAINS(st, want);
    ASSERT(mread(r, 13, &got, 100000, true) > 0);
    ASSERT(b_eq(&tail, &got));
    ASSERT_OK(ctf_reader_restore_state(r, st, strlen(st)), ctf_reader_error(r));
    char *back = save(r);
    ASSERT(back && !strcmp(back, st));
    ctf_reader_free(r);

    ASSERT((r = mopen(&c)) != NULL);
    ASSERT_OK(ctf_reader_restore_state(r, st5, strlen(st5)), ctf_reader_error(r));
    ASSERT_OK(ctf_reader_skip(r, p20 - p5), ctf_reader_error(r));
    ASSERT(mread(r, 13, &got2, 100000, true) > 0);
    ASSERT(b_eq(&tail, &got2));
    ctf_reader_free(r);
    free(st5);
    free(st);
    free(back);
    b_free(&head);
    b_free(&tail);
    b_free(&got);
    b_free(&got2);
    mixset_free(&m);
}
