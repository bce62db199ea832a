/*
 * test_reader.c -- the reader (lib/reader/reader.c, lib/reader/prefetch.c): the timeline and its
 * limits (rules 6), workers (rules 7), checkpoints (rules 8), memory bound (rules 4.4), errors from
 * background threads (rules 10), frame mode and the rules 5.6 vector through the whole pipeline.
 *
 * Most properties are checked by comparing byte strings: every delivered sequence serialized
 * as key + per stream (length, dense values or sparse nnz/indices/values), independent of where
 * the minibatch cuts fell. Two runs that must agree (other minibatch sizes, a restore, other
 * thread counts) must produce identical strings.
 */
#include "reader/pipeline.h" /* the randomizer, to predict chunk ownership */
#include "test.h"
#include "test_bytes.h"

#include <stdlib.h>
#include <unistd.h>

/*======================================================================
 * Helpers
 *====================================================================*/

static uint64_t rnd_next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t rnd_range(uint64_t *s, uint64_t lo, uint64_t hi) /* [lo, hi] */
{
    return lo + rnd_next(s) % (hi - lo + 1);
}

static void quiet_log(void *user, ctf_severity sev, const ctf_error *what)
{
    (void)user;
    (void)sev;
    (void)what;
}

static void append_mb(bytes *b, const ctf_minibatch *mb)
{
    for (size_t i = 0; i < ctf_minibatch_num_sequences(mb); i++) append_seq(b, mb, i);
}

/* Reads until the end of the data (or max_calls), appending every sequence. K <= 0 draws each
 * size from [1, -K] with *rs. @return : calls that delivered a minibatch, or -1 on an error. */
static long read_rest(ctf_reader *r, long k, uint64_t *rs, bytes *b, long max_calls)
{
    long calls = 0;
    while (calls < max_calls) {
        ctf_minibatch *mb;
        uint64_t want = k > 0 ? (uint64_t)k : rnd_range(rs, 1, (uint64_t)-k);
        if (ctf_reader_next(r, want, &mb) != 0) {
            fprintf(stderr, "read_rest: %s\n", ctf_reader_error(r)->message);
            return -1;
        }
        if (!mb) break;
        append_mb(b, mb);
        ctf_minibatch_free(mb);
        calls++;
    }
    return calls;
}

static void cfg_base(ctf_config *c, const char *path, const ctf_stream_def *s, size_t ns)
{
    ctf_config_init(c);
    c->path = path;
    c->streams = s;
    c->num_streams = ns;
    c->log = quiet_log;
}

static ctf_reader *open_or_null(const ctf_config *c)
{
    ctf_reader *r = NULL;
    ctf_error e;
    if (ctf_reader_open(c, &r, &e) != 0) {
        fprintf(stderr, "ctf_reader_open: %s:%llu: %s\n", e.path, (unsigned long long)e.line,
                e.message);
        return NULL;
    }
    return r;
}

static const ctf_stream_def X1[] = {{.name = "x", .dim = 1}};
static const ctf_stream_def XY[] = {{.name = "x", .dim = 3},
                                    {.name = "y", .dim = 10, .is_sparse = true}};

/* A line-mode file of n lines "|x D\n" (5 bytes each): chunk size 5*m gives m lines a chunk. */
static const char *line_file(const char *name, size_t n)
{
    char *t = malloc(n * 5 + 1);
    for (size_t i = 0; i < n; i++) {
        memcpy(t + 5 * i, "|x 0\n", 5);
        t[5 * i + 3] = (char)('0' + i % 10);
    }
    t[n * 5] = 0;
    const char *p = test_write_str(name, t);
    free(t);
    return p;
}

/* A random id-mode file of nseq sequences of 1-3 lines: dense x (dim 3) on every line, sparse
 * y (dim 10) on the first line of every sequence and on some others. Keys are 1000 + i. */
static const char *gen_file(const char *name, uint64_t seed, size_t nseq)
{
    size_t cap = nseq * 3 * 96 + 1, n = 0;
    char *t = malloc(cap);
    for (size_t s = 0; s < nseq; s++) {
        int lines = (int)rnd_range(&seed, 1, 3);
        for (int l = 0; l < lines; l++) {
            n += (size_t)snprintf(t + n, cap - n, "%zu |x %d %d.%02d -%d", 1000 + s,
                                  (int)rnd_range(&seed, 0, 99), (int)rnd_range(&seed, 0, 9),
                                  (int)rnd_range(&seed, 0, 99), (int)rnd_range(&seed, 0, 9));
            if (l == 0 || rnd_range(&seed, 0, 1)) {
                n += (size_t)snprintf(t + n, cap - n, " |y");
                int idx = (int)rnd_range(&seed, 0, 3);
                while (idx < 10) {
                    n += (size_t)snprintf(t + n, cap - n, " %d:%d.5", idx,
                                          (int)rnd_range(&seed, 0, 9));
                    idx += (int)rnd_range(&seed, 2, 6);
                }
            }
            n += (size_t)snprintf(t + n, cap - n, "\n");
        }
    }
    const char *p = test_write_str(name, t);
    free(t);
    return p;
}

/* A random randomized configuration for gen_file data. */
static void rnd_cfg(ctf_config *c, const char *path, uint64_t *rs)
{
    cfg_base(c, path, XY, 2);
    c->chunk_size_bytes = rnd_range(rs, 60, 260);
    c->randomization_seed = rnd_range(rs, 0, 1000);
    c->window_in_samples = rnd_range(rs, 0, 2) == 0;
    c->randomization_window = c->window_in_samples ? rnd_range(rs, 1, 40) : rnd_range(rs, 1, 6);
}

/* Whether m's sequences are a subsequence of g's (same keys and data, in order), all at the
 * same position; marks the global indices used in used[] (NULL: no marks). */
static bool subseq_ok(const ctf_minibatch *g, const ctf_minibatch *m, unsigned char *used)
{
    size_t ng = ctf_minibatch_num_sequences(g), j = 0;
    if (!m || ctf_minibatch_position(m) != ctf_minibatch_position(g) ||
        ctf_minibatch_end_of_sweep(m) != ctf_minibatch_end_of_sweep(g))
        return false;
    for (size_t i = 0; i < ctf_minibatch_num_sequences(m); i++, j++) {
        while (j < ng && ctf_minibatch_keys(g)[j] != ctf_minibatch_keys(m)[i]) j++;
        if (j == ng || (used && used[j]++)) return false;
        bytes a = {0}, b = {0};
        append_seq(&a, m, i);
        append_seq(&b, g, j);
        bool same = b_eq(&a, &b);
        b_free(&a);
        b_free(&b);
        if (!same) return false;
    }
    return true;
}

/* The per-call worker property: every rank's share is a subsequence of the global minibatch g
 * and together they hold each of g's sequences exactly once (keys are unique within g here). */
static bool split_ok(const ctf_minibatch *g, ctf_minibatch *const *mbs, size_t nw)
{
    size_t ng = ctf_minibatch_num_sequences(g), total = 0;
    unsigned char *used = calloc(ng + 1, 1);
    bool ok = true;
    for (size_t w = 0; ok && w < nw; w++) {
        ok = subseq_ok(g, mbs[w], used);
        total += ok ? ctf_minibatch_num_sequences(mbs[w]) : 0;
    }
    free(used);
    return ok && total == ng;
}

/*======================================================================
 * Limits and cutting (rules 6.1, 6.2, 6.4)
 *====================================================================*/

TEST(reader_max_sweeps_cuts_and_end)
{
    const char *path = line_file("four.ctf", 4);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.randomize = false;
    c.max_sweeps = 3;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    const uint64_t want_n[] = {5, 5, 2}, want_pos[] = {5, 10, 12};
    const uint64_t want_keys[] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 5, &mb), ctf_reader_error(r));
        ASSERT(mb);
        ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), want_n[i]);
        ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), want_n[i]);
        ASSERT_U64_EQ(ctf_minibatch_position(mb), want_pos[i]);
        ASSERT(ctf_minibatch_end_of_sweep(mb));
        ASSERT_U64_EQ(ctf_minibatch_sweep(mb), (uint64_t)i);
        for (size_t j = 0; j < ctf_minibatch_num_sequences(mb); j++)
            ASSERT_U64_EQ(ctf_minibatch_keys(mb)[j], want_keys[at++]);
        ctf_minibatch_free(mb);
    }
    for (int i = 0; i < 3; i++) {
        ctf_minibatch *mb = (ctf_minibatch *)1;
        ASSERT_OK(ctf_reader_next(r, 5, &mb), ctf_reader_error(r));
        ASSERT(mb == NULL);
    }
    ASSERT_U64_EQ(ctf_reader_position(r), 12);
    ctf_reader_free(r);
}

TEST(reader_max_samples_and_full_sweep)
{
    const char *path = line_file("four.ctf", 4);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.max_samples = 11; /* randomized: the limit does not depend on the order */
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    const uint64_t want[] = {5, 5, 1};
    for (int i = 0; i < 3; i++) {
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 5, &mb), ctf_reader_error(r));
        ASSERT(mb);
        ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), want[i]);
        ctf_minibatch_free(mb);
    }
    for (int i = 0; i < 2; i++) {
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 5, &mb), ctf_reader_error(r));
        ASSERT(mb == NULL);
    }
    ctf_reader_free(r);

    /* FULL_DATA_SWEEP: exactly one sweep, every key once, however it is cut. */
    const uint64_t sizes[] = {3, 100};
    for (int s = 0; s < 2; s++) {
        c.max_samples = CTF_FULL_DATA_SWEEP;
        r = open_or_null(&c);
        ASSERT(r);
        uint64_t seen[4] = {0}, total = 0;
        ctf_minibatch *mb;
        for (;;) {
            ASSERT_OK(ctf_reader_next(r, sizes[s], &mb), ctf_reader_error(r));
            if (!mb) break;
            for (size_t j = 0; j < ctf_minibatch_num_sequences(mb); j++)
                seen[ctf_minibatch_keys(mb)[j]]++;
            total += ctf_minibatch_num_samples(mb);
            ctf_minibatch_free(mb);
        }
        ASSERT_U64_EQ(total, 4);
        for (int k = 0; k < 4; k++) ASSERT_U64_EQ(seen[k], 1);
        ASSERT_U64_EQ(ctf_reader_position(r), 4);
        ctf_reader_free(r);
    }
}

/* max_sweeps takes CTF_FULL_DATA_SWEEP too (one sweep), so that a binding can pass either limit
 * through unchanged. */
TEST(reader_max_sweeps_full_data_sweep_is_one_sweep)
{
    const char *path = line_file("four_sweeps.ctf", 4);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.max_sweeps = CTF_FULL_DATA_SWEEP;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    uint64_t total = 0;
    ctf_minibatch *mb;
    for (;;) {
        ASSERT_OK(ctf_reader_next(r, 3, &mb), ctf_reader_error(r));
        if (!mb) break;
        total += ctf_minibatch_num_samples(mb);
        ctf_minibatch_free(mb);
    }
    ASSERT_U64_EQ(total, 4);
    ctf_reader_free(r);
}

static void count_log(void *user, ctf_severity sev, const ctf_error *what)
{
    if (sev == CTF_SEV_WARNING && strstr(what->message, "chunks for 2 workers")) ++*(int *)user;
}

/* The window-smaller-than-workers warning comes when the worker count changes after open too
 * (bindings open with one worker and pass the partition with each call). */
TEST(reader_set_worker_warns_about_few_chunks)
{
    const char *path = line_file("few_chunks.ctf", 8);
    ctf_config c;
    int warned = 0;
    cfg_base(&c, path, X1, 1);
    c.log = count_log;
    c.log_user = &warned;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ASSERT(warned == 0);
    ASSERT_OK(ctf_reader_set_worker(r, 2, 1), ctf_reader_error(r));
    ASSERT(warned == 1);
    ASSERT_OK(ctf_reader_set_worker(r, 2, 0), ctf_reader_error(r)); /* same count: no repeat */
    ASSERT(warned == 1);
    ctf_reader_free(r);
}

/* The warning counts the chunks of every file of a corpus, not the first file's. */
TEST(reader_few_chunks_counts_the_whole_corpus)
{
    char *a = strdup(line_file("few_a.ctf", 8)), *b = strdup(line_file("few_b.ctf", 8));
    const char *both[] = {a, b};
    for (size_t files = 1; files <= 2; files++) {
        ctf_config c;
        int warned = 0;
        cfg_base(&c, NULL, X1, 1);
        c.paths = both;
        c.num_paths = files;
        c.num_workers = 2;
        c.log = count_log;
        c.log_user = &warned;
        ctf_reader *r = open_or_null(&c);
        ASSERT(r);
        ctf_reader_free(r);
        /* one chunk a file: one file is too few for 2 workers, two files are not */
        ASSERT_EQ(warned, files == 1 ? 1 : 0);
    }
    free(a);
    free(b);
}

TEST(reader_request_spans_many_sweeps)
{
    const char *path = test_write_str("seven.ctf", "5 |x 1\n5 |x 2\n5 |x 3\n5 |x 4\n5 |x 5\n"
                                                   "5 |x 6\n5 |x 7\n");
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_next(r, 1000, &mb), ctf_reader_error(r));
    ASSERT(mb);
    ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), 142);
    ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), 994);
    ASSERT_U64_EQ(ctf_minibatch_position(mb), 994);
    ASSERT_U64_EQ(ctf_minibatch_sweep(mb), 0);
    ASSERT(ctf_minibatch_end_of_sweep(mb));
    ctf_stream_view v;
    ASSERT_OK(ctf_minibatch_stream(mb, 0, &v), ctf_reader_error(r));
    ASSERT_U64_EQ(v.num_samples, 994);
    ASSERT_DBL_EQ(((const float *)v.values)[993], 7.0);
    for (size_t i = 0; i < 142; i++) ASSERT_EQ(v.lengths[i], 7);
    ctf_minibatch_free(mb);
    ASSERT_OK(ctf_reader_next(r, 1000, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_position(mb), 1988);
    ASSERT_U64_EQ(ctf_minibatch_sweep(mb), 142);
    ctf_minibatch_free(mb);
    /* A sequence longer than the request comes alone. */
    ASSERT_OK(ctf_reader_next(r, 3, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), 1);
    ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), 7);
    ASSERT_U64_EQ(ctf_minibatch_position(mb), 1995);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
}

/* A request of more than CTF_MAX_MB_SWEEPS sweeps is refused (it would grow until memory runs
 * out with endless sweeps), unless the data limit makes the minibatch smaller; the reader stays
 * usable. Found by the fuzzer (truncationLength = 2^64 - 1). */
TEST(reader_refuses_runaway_minibatch)
{
    const char *path = test_write_str("two.ctf", "|x 1\n|x 2\n");
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb = NULL;
    ASSERT_EQ(ctf_reader_next(r, (uint64_t)2 * CTF_MAX_MB_SWEEPS + 2, &mb), CTF_EINVAL);
    ASSERT(!mb);
    ASSERT(strstr(ctf_reader_error(r)->message, "sweeps"));
    ASSERT_OK(ctf_reader_next(r, (uint64_t)2 * CTF_MAX_MB_SWEEPS, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), (uint64_t)2 * CTF_MAX_MB_SWEEPS);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    /* With a limit of one sweep the same request is one sweep. */
    c.max_sweeps = 1;
    r = open_or_null(&c);
    ASSERT(r);
    ASSERT_OK(ctf_reader_next(r, UINT64_MAX, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), 2);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    /* Truncated BPTT: the window length counts. */
    c.max_sweeps = CTF_INFINITELY_REPEAT;
    c.truncation_length = SIZE_MAX;
    r = open_or_null(&c);
    ASSERT(r);
    ASSERT_EQ(ctf_reader_next(r, 4, &mb), CTF_EINVAL);
    ASSERT(strstr(ctf_reader_error(r)->message, "truncation_length"));
    ctf_reader_free(r);
}

TEST(reader_first_sequence_always_no_lookahead)
{
    /* Sequences of 2, 5 and 1 samples. */
    const char *path = test_write_str("nolook.ctf", "1 |x 1\n1 |x 1\n2 |x 2\n2 |x 2\n2 |x 2\n"
                                                    "2 |x 2\n2 |x 2\n3 |x 3\n");
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.randomize = false;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    const struct {
        size_t n;
        uint64_t k0, k1, samples;
    } want[] = {
        {1, 1, 0, 2}, /* 2 + 5 > 4: the 5 ends it, the 1 behind it is not pulled forward */
        {1, 2, 0, 5}, /* 5 > 4 but the first sequence is always taken */
        {2, 3, 1, 3}, /* 1 + 2 (next sweep), then 5 does not fit */
        {1, 2, 0, 5},
    };
    for (int i = 0; i < 4; i++) {
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 4, &mb), ctf_reader_error(r));
        ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), want[i].n);
        ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), want[i].samples);
        ASSERT_U64_EQ(ctf_minibatch_keys(mb)[0], want[i].k0);
        if (want[i].n > 1) ASSERT_U64_EQ(ctf_minibatch_keys(mb)[1], want[i].k1);
        ASSERT_EQ(ctf_minibatch_end_of_sweep(mb), i == 2);
        ctf_minibatch_free(mb);
    }
    ctf_reader_free(r);
}

TEST(reader_defines_mb_size_counts_labels)
{
    /* Three lines of features, one label per sequence: index samples are 1 per sequence. */
    const char *path = test_write_str("labels.ctf", "1 |x 1 |l 0:1\n1 |x 2\n1 |x 3\n"
                                                    "2 |x 4 |l 1:1\n2 |x 5\n2 |x 6\n"
                                                    "3 |x 7 |l 0:1\n3 |x 8\n3 |x 9\n");
    const ctf_stream_def defs[] = {
        {.name = "x", .dim = 1},
        {.name = "l", .dim = 2, .is_sparse = true, .defines_mb_size = true}};
    ctf_config c;
    cfg_base(&c, path, defs, 2);
    c.randomize = false;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_next(r, 2, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), 2);
    ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), 2);
    ASSERT_U64_EQ(ctf_minibatch_position(mb), 2);
    ctf_stream_view v;
    ASSERT_OK(ctf_minibatch_stream(mb, 0, &v), ctf_reader_error(r));
    ASSERT_U64_EQ(v.num_samples, 6);
    ASSERT_OK(ctf_minibatch_stream(mb, 1, &v), ctf_reader_error(r));
    ASSERT_U64_EQ(v.num_samples, 2);
    ASSERT_EQ(v.lengths[0], 1);
    ctf_minibatch_free(mb);
    ASSERT_OK(ctf_reader_next(r, 2, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), 2); /* 3, then 1 of the next sweep */
    ASSERT(ctf_minibatch_end_of_sweep(mb));
    ASSERT_U64_EQ(ctf_reader_position(r), 4);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
}

/*======================================================================
 * The nominal time axis (rules 6.8)
 *====================================================================*/

TEST(reader_nominal_time_axis)
{
    uint64_t rs = 11;
    for (int trial = 0; trial < 6; trial++) {
        const char *path = gen_file("axis.ctf", rnd_next(&rs), 30 + trial * 5);
        ctf_config c;
        rnd_cfg(&c, path, &rs);
        ctf_reader *r = open_or_null(&c);
        ASSERT(r);
        ctf_index_info info;
        ctf_index_get_info(ctf_reader_index(r), &info);
        const uint64_t sweep = info.samples;
        ctf_reader_free(r);
        c.max_samples = sweep * 5 / 2 + 1; /* the same sequences whatever the cuts */
        const uint64_t k = rnd_range(&rs, 2, 9);
        const long sizes[] = {(long)k, 2 * (long)k, 1, -(long)(2 * k), -1000};
        bytes ref = {0};
        for (int s = 0; s < 5; s++) {
            c.num_threads = (size_t)s % 3;
            r = open_or_null(&c);
            ASSERT(r);
            bytes got = {0};
            uint64_t seed = rs + (uint64_t)s;
            long calls = read_rest(r, sizes[s], &seed, &got, 100000);
            ASSERT(calls > 0);
            ASSERT(ctf_reader_position(r) >= c.max_samples);
            ctf_reader_free(r);
            if (s == 0)
                ref = got;
            else {
                bool same = b_eq(&ref, &got);
                b_free(&got);
                if (!same) b_free(&ref);
                ASSERT(same);
            }
        }
        b_free(&ref);
    }
}

/*======================================================================
 * Exactness of checkpoints, threads and re-partitioning (rules 8, 10)
 *====================================================================*/

typedef struct run {
    size_t n;          /* minibatches */
    bytes *mb;         /* per minibatch */
    char **state;      /* state before minibatch i (n + 1 entries) */
} run;

static void run_free(run *x)
{
    for (size_t i = 0; i < x->n; i++) b_free(&x->mb[i]);
    for (size_t i = 0; i <= x->n && x->state; i++) free(x->state[i]);
    free(x->mb);
    free(x->state);
    *x = (run){0};
}

static char *save_state(ctf_reader *r)
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

/* The uninterrupted run: per-minibatch bytes and the state before each. */
static bool record_run(ctf_reader *r, uint64_t k, run *x)
{
    *x = (run){0};
    size_t cap = 0;
    for (;;) {
        if (x->n + 1 >= cap) {
            cap = cap ? 2 * cap : 64;
            x->mb = realloc(x->mb, cap * sizeof *x->mb);
            x->state = realloc(x->state, (cap + 1) * sizeof *x->state);
        }
        x->state[x->n] = save_state(r);
        ctf_minibatch *mb;
        if (ctf_reader_next(r, k, &mb)) return false;
        if (!mb) return x->state[x->n] != NULL;
        x->mb[x->n] = (bytes){0};
        append_mb(&x->mb[x->n], mb);
        ctf_minibatch_free(mb);
        x->n++;
    }
}

/* bytes of minibatches [from, to) */
static void run_slice(const run *x, size_t from, size_t to, bytes *out)
{
    for (size_t i = from; i < to && i < x->n; i++) b_add(out, x->mb[i].p, x->mb[i].n);
}

static void exact_cfg(ctf_config *c, const char **pathp)
{
    uint64_t rs = 77;
    *pathp = gen_file("exact.ctf", 12345, 40);
    rnd_cfg(c, *pathp, &rs);
    c->chunk_size_bytes = 120;
    c->randomization_window = 3;
    c->window_in_samples = false;
    c->max_sweeps = 3;
}

TEST(reader_restore_new_reader_is_exact)
{
    const char *path;
    ctf_config c;
    exact_cfg(&c, &path);
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    run x;
    bool ok = record_run(r, 9, &x);
    ctf_reader_free(r);
    ASSERT(ok);
    ASSERT(x.n > 20);
    bool good = true;
    for (size_t i = 0; good && i <= x.n; i++) {
        c.num_threads = i % 3;
        c.prefetch_chunks = i % 5;
        r = open_or_null(&c);
        bytes want = {0}, got = {0};
        run_slice(&x, i, x.n, &want);
        good = r && ctf_reader_restore_state(r, x.state[i], strlen(x.state[i])) == 0 &&
               read_rest(r, 9, NULL, &got, 100000) == (long)(x.n - i) && b_eq(&want, &got);
        if (!good) fprintf(stderr, "restore at minibatch %zu of %zu differs\n", i, x.n);
        ctf_reader_free(r);
        b_free(&want);
        b_free(&got);
    }
    run_free(&x);
    ASSERT(good);
}

TEST(reader_restore_same_reader_is_exact)
{
    const char *path;
    ctf_config c;
    exact_cfg(&c, &path);
    c.num_threads = 2;
    c.prefetch_chunks = 3;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    run x;
    bool ok = record_run(r, 9, &x);
    ASSERT(ok);
    /* Jump back and forth, reading three minibatches after each restore (prefetch in flight),
     * and once to the end. */
    uint64_t rs = 5;
    bool good = true;
    for (int t = 0; t < 40 && good; t++) {
        size_t i = (size_t)rnd_range(&rs, 0, x.n);
        size_t upto = t == 39 ? x.n : i + 3;
        good = ctf_reader_restore_state(r, x.state[i], strlen(x.state[i])) == 0;
        bytes want = {0}, got = {0};
        run_slice(&x, i, upto, &want);
        long calls = good ? read_rest(r, 9, NULL, &got, (long)(upto - i)) : -1;
        good = calls == (long)(CTF_MIN(upto, x.n) - i) && b_eq(&want, &got);
        if (!good) fprintf(stderr, "restore to minibatch %zu of %zu differs\n", i, x.n);
        b_free(&want);
        b_free(&got);
    }
    ctf_reader_free(r);
    run_free(&x);
    ASSERT(good);
}

TEST(reader_threads_and_prefetch_do_not_change_data)
{
    const char *path;
    ctf_config c;
    exact_cfg(&c, &path);
    const size_t threads[] = {0, 1, 2, 4}, depth[] = {0, 1, 3, 16};
    for (size_t w = 1; w <= 3; w += 2) {
        bytes ref = {0};
        uint64_t ref_pos = 0;
        for (int ti = 0; ti < 4; ti++)
            for (int di = 0; di < 4; di++) {
                c.num_threads = threads[ti];
                c.prefetch_chunks = depth[di];
                c.num_workers = w;
                c.worker_rank = w - 1;
                ctf_reader *r = open_or_null(&c);
                ASSERT(r);
                bytes got = {0};
                uint64_t rs = 99; /* the same random sizes in every run */
                long calls = read_rest(r, -13, &rs, &got, 100000);
                uint64_t pos = ctf_reader_position(r);
                ctf_reader_free(r);
                ASSERT(calls > 0);
                if (ti == 0 && di == 0) {
                    ref = got;
                    ref_pos = pos;
                    continue;
                }
                bool same = b_eq(&ref, &got);
                b_free(&got);
                if (!same) {
                    fprintf(stderr, "threads %zu prefetch %zu workers %zu differ\n", threads[ti],
                            depth[di], w);
                    b_free(&ref);
                }
                ASSERT(same);
                ASSERT_U64_EQ(pos, ref_pos);
            }
        b_free(&ref);
    }
}

TEST(reader_changing_k_n_r_keeps_global_order)
{
    const char *path;
    ctf_config c;
    exact_cfg(&c, &path);
    c.num_threads = 2;
    ctf_reader *a = open_or_null(&c), *ref = NULL, *probe = NULL;
    c.num_threads = 0;
    ref = open_or_null(&c);
    probe = open_or_null(&c);
    ASSERT(a && ref && probe);
    uint64_t rs = 3;
    bool good = true;
    int calls = 0;
    for (; good; calls++) {
        uint64_t k = rnd_range(&rs, 1, 15);
        size_t n = (size_t)rnd_range(&rs, 1, 4), rank = (size_t)rnd_range(&rs, 0, n - 1);
        uint64_t before = ctf_reader_position(ref);
        ctf_minibatch *ma = NULL, *mr = NULL, *mp = NULL;
        good = ctf_reader_set_worker(a, n, rank) == 0 && ctf_reader_next(a, k, &ma) == 0 &&
               ctf_reader_next(ref, k, &mr) == 0;
        /* The same call on a reader that jumps there with this partition. */
        good = good && ctf_reader_seek(probe, before) == 0 &&
               ctf_reader_set_worker(probe, n, rank) == 0 && ctf_reader_next(probe, k, &mp) == 0;
        if (good && !mr) {
            good = !ma && !mp;
            ctf_minibatch_free(ma);
            ctf_minibatch_free(mp);
            break;
        }
        if (good) {
            bytes ba = {0}, bp = {0};
            append_mb(&ba, ma);
            append_mb(&bp, mp);
            good = b_eq(&ba, &bp);
            if (n == 1) {
                bytes br = {0};
                append_mb(&br, mr);
                good = good && b_eq(&ba, &br);
                b_free(&br);
            }
            good = good && subseq_ok(mr, ma, NULL); /* a's share of the global minibatch */
            b_free(&ba);
            b_free(&bp);
            if (!good)
                fprintf(stderr, "call %d (K=%llu N=%zu r=%zu) differs\n", calls,
                        (unsigned long long)k, n, rank);
        }
        ctf_minibatch_free(ma);
        ctf_minibatch_free(mr);
        ctf_minibatch_free(mp);
    }
    ctf_reader_free(a);
    ctf_reader_free(ref);
    ctf_reader_free(probe);
    ASSERT(good);
    ASSERT(calls > 20);
}

TEST(reader_elastic_restore_loses_and_repeats_nothing)
{
    const char *path = gen_file("elastic.ctf", 4242, 60);
    ctf_config c;
    uint64_t rs = 8;
    rnd_cfg(&c, path, &rs);
    c.chunk_size_bytes = 100;
    c.randomization_window = 4;
    c.window_in_samples = false;
    c.max_samples = CTF_FULL_DATA_SWEEP;
    c.num_threads = 1;
    ctf_reader *g = open_or_null(&c), *two[2] = {NULL, NULL}, *three[3] = {NULL, NULL, NULL};
    c.num_workers = 2;
    for (size_t w = 0; w < 2; w++) {
        c.worker_rank = w;
        two[w] = open_or_null(&c);
        ASSERT(two[w]);
    }
    ASSERT(g);
    size_t nseq = 60, seen[60] = {0};
    bool good = true;
    int calls = 0;
    /* Six calls with two workers, checkpoint, then three workers to the end. */
    char *st[2] = {NULL, NULL};
    for (; good; calls++) {
        const size_t nw = calls < 6 ? 2 : 3;
        ctf_reader **rd = calls < 6 ? two : three;
        if (calls == 6) {
            st[0] = save_state(two[0]);
            st[1] = save_state(two[1]);
            good = st[0] && st[1] && !strcmp(st[0], st[1]); /* the same on every worker */
            c.num_workers = 3;
            for (size_t w = 0; good && w < 3; w++) {
                c.worker_rank = w;
                three[w] = open_or_null(&c);
                good = three[w] && !ctf_reader_restore_state(three[w], st[0], strlen(st[0]));
            }
            if (!good) break;
        }
        ctf_minibatch *gm = NULL, *m[3] = {NULL, NULL, NULL};
        good = ctf_reader_next(g, 7, &gm) == 0;
        for (size_t w = 0; good && w < nw; w++) good = ctf_reader_next(rd[w], 7, &m[w]) == 0;
        if (good && !gm) {
            for (size_t w = 0; w < nw; w++) good = good && !m[w];
        } else if (good) {
            good = split_ok(gm, m, nw);
            for (size_t w = 0; w < nw; w++)
                for (size_t i = 0; good && i < ctf_minibatch_num_sequences(m[w]); i++)
                    seen[ctf_minibatch_keys(m[w])[i] - 1000]++;
        }
        bool end = !gm;
        ctf_minibatch_free(gm);
        for (size_t w = 0; w < 3; w++) ctf_minibatch_free(m[w]);
        if (end) break;
    }
    ctf_reader_free(g);
    for (size_t w = 0; w < 2; w++) ctf_reader_free(two[w]);
    for (size_t w = 0; w < 3; w++) ctf_reader_free(three[w]);
    free(st[0]);
    free(st[1]);
    ASSERT(good);
    ASSERT(calls > 8);
    for (size_t i = 0; i < nseq; i++) ASSERT_EQ(seen[i], 1);
}

/*======================================================================
 * Workers (rules 7)
 *====================================================================*/

TEST(reader_workers_partition_every_call)
{
    const char *path = gen_file("workers.ctf", 777, 50);
    for (size_t nw = 1; nw <= 5; nw++) {
        ctf_config c;
        uint64_t rs = 21 + nw;
        rnd_cfg(&c, path, &rs);
        c.chunk_size_bytes = 80;
        c.max_sweeps = 2;
        c.num_threads = nw % 3;
        ctf_reader *g = open_or_null(&c), *w[5] = {NULL};
        ASSERT(g);
        c.num_workers = nw;
        for (size_t i = 0; i < nw; i++) {
            c.worker_rank = i;
            w[i] = open_or_null(&c);
            ASSERT(w[i]);
        }
        size_t seen[50] = {0}, empties = 0;
        bool good = true, ended = false;
        while (good && !ended) {
            uint64_t k = rnd_range(&rs, 1, 12);
            ctf_minibatch *gm = NULL, *m[5] = {NULL};
            good = ctf_reader_next(g, k, &gm) == 0;
            for (size_t i = 0; good && i < nw; i++) good = ctf_reader_next(w[i], k, &m[i]) == 0;
            ended = !gm;
            if (good && ended) {
                for (size_t i = 0; i < nw; i++) good = good && !m[i]; /* same call for all */
            } else if (good) {
                good = split_ok(gm, m, nw);
                for (size_t i = 0; good && i < nw; i++) {
                    ctf_stream_view v; /* an empty share is a valid, empty minibatch */
                    good = ctf_minibatch_stream(m[i], 1, &v) == 0 &&
                           (v.num_sequences > 0 || (v.num_samples == 0 && v.nnz == 0 &&
                                                    ctf_minibatch_num_samples(m[i]) == 0));
                    empties += ctf_minibatch_num_sequences(m[i]) == 0;
                    for (size_t j = 0; j < ctf_minibatch_num_sequences(m[i]); j++)
                        seen[ctf_minibatch_keys(m[i])[j] - 1000]++;
                }
            }
            ctf_minibatch_free(gm);
            for (size_t i = 0; i < nw; i++) ctf_minibatch_free(m[i]);
        }
        ctf_reader_free(g);
        for (size_t i = 0; i < nw; i++) ctf_reader_free(w[i]);
        if (!good) fprintf(stderr, "workers N=%zu\n", nw);
        ASSERT(good);
        for (int i = 0; i < 50; i++) ASSERT_EQ(seen[i], 2); /* once per sweep */
        if (nw >= 3) ASSERT(empties > 0); /* empty shares happened and were not NULL */
    }
}

TEST(reader_workers_randomized_ownership_rule)
{
    /* 40 one-sample sequences in 20 chunks: sequence (= key) s is in chunk s / 2. A sequence
     * belongs to worker (randomized position of its chunk) mod N, positions taken from the
     * sweep that is current after the global minibatch was cut. */
    const char *path = line_file("owner.ctf", 40);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.chunk_size_bytes = 10;
    c.randomization_window = 4;
    c.randomization_seed = 3;
    c.max_sweeps = 4;
    const size_t nw = 3;
    ctf_reader *g = open_or_null(&c), *w[3] = {NULL, NULL, NULL};
    ASSERT(g);
    c.num_workers = nw;
    for (size_t i = 0; i < nw; i++) {
        c.worker_rank = i;
        w[i] = open_or_null(&c);
        ASSERT(w[i]);
    }
    const ctf_index *idx = ctf_reader_index(g);
    ASSERT_EQ(idx->num_chunks, 20);
    ctf__sweep sw = {0};
    ctf_error err;
    size_t pos_of[20];
    uint64_t rs = 17;
    bool good = true, ended = false, crossed = false;
    while (good && !ended) {
        uint64_t k = rnd_range(&rs, 1, 7);
        ctf_minibatch *gm = NULL, *m[3] = {NULL, NULL, NULL};
        good = ctf_reader_next(g, k, &gm) == 0;
        for (size_t i = 0; good && i < nw; i++) good = ctf_reader_next(w[i], k, &m[i]) == 0;
        ended = !gm;
        if (good && gm) {
            uint64_t after = ctf_minibatch_position(gm) / 40;
            crossed |= ctf_minibatch_end_of_sweep(gm) && ctf_minibatch_position(gm) % 40 != 0;
            good = ctf__randomize_sweep(idx->chunks, idx->num_chunks, 4, false, 3, after, &sw,
                                        &err) == 0;
            for (size_t p = 0; good && p < 20; p++) pos_of[sw.chunk_at[p]] = p;
            size_t at[3] = {0, 0, 0};
            for (size_t j = 0; good && j < ctf_minibatch_num_sequences(gm); j++) {
                uint64_t key = ctf_minibatch_keys(gm)[j];
                size_t owner = pos_of[key / 2] % nw;
                good = at[owner] < ctf_minibatch_num_sequences(m[owner]) &&
                       ctf_minibatch_keys(m[owner])[at[owner]++] == key;
                if (!good)
                    fprintf(stderr, "key %llu at position %llu: expected worker %zu\n",
                            (unsigned long long)key, (unsigned long long)ctf_minibatch_position(gm),
                            owner);
            }
            for (size_t i = 0; good && i < nw; i++)
                good = at[i] == ctf_minibatch_num_sequences(m[i]);
        }
        ctf_minibatch_free(gm);
        for (size_t i = 0; i < nw; i++) ctf_minibatch_free(m[i]);
    }
    ctf__sweep_free(&sw);
    ctf_reader_free(g);
    for (size_t i = 0; i < nw; i++) ctf_reader_free(w[i]);
    ASSERT(good);
    ASSERT(crossed); /* some minibatch crossed a sweep end */
}

TEST(reader_workers_no_randomization_i_mod_n)
{
    const char *path = line_file("imodn.ctf", 10);
    for (size_t nw = 2; nw <= 4; nw++)
        for (size_t rank = 0; rank < nw; rank++) {
            ctf_config c;
            cfg_base(&c, path, X1, 1);
            c.randomize = false;
            c.chunk_size_bytes = 15;
            c.num_workers = nw;
            c.worker_rank = rank;
            c.max_sweeps = 2;
            ctf_reader *r = open_or_null(&c);
            ASSERT(r);
            size_t n = 0;
            uint64_t expect = rank;
            ctf_minibatch *mb;
            for (;;) {
                ASSERT_OK(ctf_reader_next(r, 3, &mb), ctf_reader_error(r));
                if (!mb) break;
                for (size_t j = 0; j < ctf_minibatch_num_sequences(mb); j++, n++) {
                    ASSERT_U64_EQ(ctf_minibatch_keys(mb)[j], expect);
                    expect += nw;
                    if (expect >= 10) expect = rank; /* slot numbers restart every sweep */
                }
                ctf_minibatch_free(mb);
            }
            ctf_reader_free(r);
            ASSERT_EQ(n, 2 * ((10 - rank + nw - 1) / nw));
        }
}

/*======================================================================
 * Checkpoint state (rules 8.1)
 *====================================================================*/

TEST(reader_state_text_and_lengths)
{
    const char *path = line_file("state.ctf", 20);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_next(r, 7, &mb), ctf_reader_error(r));
    ctf_minibatch_free(mb);
    size_t len = 0;
    ASSERT_EQ(ctf_reader_save_state(r, NULL, 0, &len), 0);
    ASSERT(len > 20);
    char *buf = malloc(len + 1);
    size_t len2 = 0;
    ASSERT_EQ(ctf_reader_save_state(r, buf, len, &len2), CTF_ELIMIT); /* no room for the NUL */
    ASSERT_EQ(ctf_reader_save_state(r, buf, 5, &len2), CTF_ELIMIT);
    ASSERT_OK(ctf_reader_save_state(r, buf, len + 1, &len2), ctf_reader_error(r));
    ASSERT_EQ(len2, len);
    ASSERT_EQ(strlen(buf), len);
    ASSERT(buf[0] == '{' && buf[len - 1] == '}');
    ASSERT_STR_CONTAINS(buf, "\"minibatchSourcePosition\": 7");
    ASSERT_OK(ctf_reader_restore_state(r, buf, len), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_reader_position(r), 7);
    free(buf);
    ctf_reader_free(r);
}

/* Restores file a's state (config ca) into a reader for cb; expects CTF_ESTATE naming field. */
static int mismatch(const ctf_config *ca, const ctf_config *cb, const char *field)
{
    ctf_reader *a = open_or_null(ca), *b = open_or_null(cb);
    int ok = 0;
    if (a && b) {
        ctf_minibatch *mb = NULL;
        char *st = ctf_reader_next(a, 2, &mb) == 0 ? save_state(a) : NULL;
        ctf_minibatch_free(mb);
        mb = NULL;
        int rc = st ? ctf_reader_restore_state(b, st, strlen(st)) : 0;
        ok = rc == CTF_ESTATE && ctf_reader_error(b)->code == CTF_ESTATE &&
             strstr(ctf_reader_error(b)->message, field) != NULL;
        if (!ok)
            fprintf(stderr, "mismatch %s: rc %d: %s\n", field, rc, ctf_reader_error(b)->message);
        /* b stays usable after a refused restore */
        ok = ok && ctf_reader_next(b, 2, &mb) == 0 && mb &&
             ctf_reader_position(b) == ctf_minibatch_num_samples(mb);
        ctf_minibatch_free(mb);
        free(st);
    }
    ctf_reader_free(a);
    ctf_reader_free(b);
    return ok;
}

TEST(reader_state_mismatch_is_refused)
{
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s", gen_file("ma.ctf", 1, 30));
    snprintf(pb, sizeof pb, "%s", gen_file("mb.ctf", 2, 31));
    ctf_config a, b;
    cfg_base(&a, pa, XY, 2);
    a.chunk_size_bytes = 200;
    a.randomization_window = 3;
    b = a;
    b.path = pb;
    ASSERT(mismatch(&a, &b, "sequences"));
    b = a;
    b.randomization_seed = 5;
    ASSERT(mismatch(&a, &b, "randomization_seed"));
    b = a;
    b.randomization_window = 4;
    ASSERT(mismatch(&a, &b, "randomization_window"));
    b = a;
    b.chunk_size_bytes = 300;
    ASSERT(mismatch(&a, &b, "chunk_size"));
}

TEST(reader_state_garbage_is_refused)
{
    const char *path = line_file("garbage.ctf", 8);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    char *good = save_state(r);
    ASSERT(good);
    size_t n = strlen(good);
    const char *bad[] = {"",
                         "   ",
                         "{",
                         "}",
                         "[]",
                         "null",
                         "{\"version\": 1}",
                         "{\"minibatchSourcePosition\": 3}",
                         "\x01\x02\xff garbage",
                         "{\"version\": 1, \"minibatchSourcePosition\": -3}",
                         "{\"version\": 2, \"minibatchSourcePosition\": 3}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = ctf_reader_restore_state(r, bad[i], strlen(bad[i]));
        if (rc != CTF_ESTATE) free(good);
        ASSERT_EQ(rc, CTF_ESTATE);
    }
    ASSERT_EQ(ctf_reader_restore_state(r, NULL, 0), CTF_ESTATE);
    for (size_t cut = 0; cut < n; cut++) { /* every truncation */
        int rc = ctf_reader_restore_state(r, good, cut);
        if (rc != CTF_ESTATE) free(good);
        ASSERT_EQ(rc, CTF_ESTATE);
    }
    /* A valid state is still accepted afterwards. */
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_restore_state(r, good, n), ctf_reader_error(r));
    free(good);
    ASSERT_OK(ctf_reader_next(r, 3, &mb), ctf_reader_error(r));
    ASSERT(mb);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
}

/*======================================================================
 * Memory (rules 4.4)
 *====================================================================*/

TEST(reader_memory_bounded_by_window)
{
    const char *path = line_file("many.ctf", 400); /* 200 chunks of 2 lines */
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.chunk_size_bytes = 10;
    c.randomization_window = 4;
    c.max_sweeps = 3;
    c.num_threads = 2;
    c.prefetch_chunks = 3;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_index_info info;
    ctf_index_get_info(ctf_reader_index(r), &info);
    ASSERT_U64_EQ(info.chunks, 200);
    bytes sink = {0};
    ASSERT_EQ(read_rest(r, 7, NULL, &sink, 100000) > 0, 1);
    b_free(&sink);
    ctf_stats st;
    ctf_reader_get_stats(r, &st);
    ctf_reader_free(r);
    ASSERT(st.chunks_resident_peak >= 1);
    ASSERT(st.chunks_resident_peak <= 2 * 4 + 3 + 2);
    ASSERT(st.chunks_loaded >= 2 * 200); /* chunks were dropped and parsed again */

    /* keepDataInMemory: everything stays, nothing is parsed twice. */
    c.keep_data_in_memory = true;
    r = open_or_null(&c);
    ASSERT(r);
    uint64_t loaded_after_first = 0;
    ctf_minibatch *mb;
    for (;;) {
        ASSERT_OK(ctf_reader_next(r, 7, &mb), ctf_reader_error(r));
        if (!mb) break;
        if (!loaded_after_first && ctf_minibatch_position(mb) >= 400) {
            ctf_reader_get_stats(r, &st);
            loaded_after_first = st.chunks_loaded;
        }
        ctf_minibatch_free(mb);
    }
    ctf_reader_get_stats(r, &st);
    ctf_reader_free(r);
    ASSERT_U64_EQ(loaded_after_first, 200);
    ASSERT_U64_EQ(st.chunks_loaded, 200);
    ASSERT_U64_EQ(st.chunks_resident_peak, 200);

    /* One thread, no prefetch: one sweep parses every chunk exactly once. */
    c.keep_data_in_memory = false;
    c.num_threads = 1;
    c.prefetch_chunks = 0;
    c.max_sweeps = CTF_INFINITELY_REPEAT;
    c.max_samples = CTF_FULL_DATA_SWEEP;
    r = open_or_null(&c);
    ASSERT(r);
    sink = (bytes){0};
    ASSERT(read_rest(r, 7, NULL, &sink, 100000) > 0);
    b_free(&sink);
    ctf_reader_get_stats(r, &st);
    ctf_reader_free(r);
    ASSERT_U64_EQ(st.chunks_loaded, 200);
    ASSERT(st.chunks_resident_peak <= 2 * 4 + 2);
}

/*======================================================================
 * Errors from background threads, changed files (rules 2.4, 10)
 *====================================================================*/

/* 40 lines, chunks of 2: line 11 (chunk 5) holds "|x a". Reads K = 1 until the error. */
static int read_to_error(size_t threads, size_t prefetch, ctf_error *out, int *ok_calls)
{
    char *t = malloc(40 * 5 + 1);
    for (int i = 0; i < 40; i++) memcpy(t + 5 * i, i == 10 ? "|x a\n" : "|x 1\n", 5);
    t[200] = 0;
    const char *path = test_write_str("bad5.ctf", t);
    free(t);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.randomize = false;
    c.chunk_size_bytes = 10;
    c.num_threads = threads;
    c.prefetch_chunks = prefetch;
    ctf_reader *r = open_or_null(&c);
    if (!r) return 0;
    int rc = 0;
    *ok_calls = 0;
    for (int i = 0; i < 40 && rc == 0; i++) {
        ctf_minibatch *mb = NULL;
        rc = ctf_reader_next(r, 1, &mb);
        if (rc == 0 && mb) (*ok_calls)++;
        ctf_minibatch_free(mb);
        if (i == 0 && threads) usleep(30000); /* let the threads parse chunk 5 */
    }
    *out = *ctf_reader_error(r);
    ctf_minibatch *mb = (ctf_minibatch *)1;
    int again = ctf_reader_next(r, 1, &mb); /* the reader stays failed */
    ctf_reader_free(r);
    return again == rc && mb == NULL ? rc : 0;
}

TEST(reader_background_error_surfaces_in_order)
{
    ctf_error a, b;
    int calls_a, calls_b;
    ASSERT_EQ(read_to_error(2, 16, &a, &calls_a), CTF_EPARSE);
    ASSERT_EQ(calls_a, 10); /* keys 0..9 delivered, the call that reaches chunk 5 fails */
    ASSERT_EQ(a.code, CTF_EPARSE);
    ASSERT_U64_EQ(a.line, 11);
    ASSERT_U64_EQ(a.column, 4);
    ASSERT_EQ(a.offset, 53);
    ASSERT_STR_CONTAINS(a.path, "bad5.ctf");
    ASSERT_STR_CONTAINS(a.message, "'a'");
    ASSERT_EQ(read_to_error(0, 0, &b, &calls_b), CTF_EPARSE);
    ASSERT_EQ(calls_b, 10);
    ASSERT_EQ(b.code, a.code);
    ASSERT_STR_EQ(b.path, a.path);
    ASSERT_U64_EQ(b.line, a.line);
    ASSERT_U64_EQ(b.column, a.column);
    ASSERT_EQ(b.offset, a.offset);
    ASSERT_STR_EQ(b.message, a.message);
    ASSERT_EQ(read_to_error(4, 1, &b, &calls_b), CTF_EPARSE);
    ASSERT_STR_EQ(b.message, a.message);
}

TEST(reader_file_changed_on_disk)
{
    for (size_t threads = 0; threads <= 2; threads += 2) {
        char path[512];
        snprintf(path, sizeof path, "%s", line_file("changing.ctf", 20));
        ctf_config c;
        cfg_base(&c, path, X1, 1);
        c.randomize = false;
        c.chunk_size_bytes = 10;
        c.num_threads = threads;
        c.prefetch_chunks = threads ? 2 : 0;
        ctf_reader *r = open_or_null(&c);
        ASSERT(r);
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 1, &mb), ctf_reader_error(r));
        ctf_minibatch_free(mb);
        line_file("changing.ctf", 30); /* rewritten: another size */
        int rc = 0, calls = 0;
        while (rc == 0 && calls < 40) {
            rc = ctf_reader_next(r, 1, &mb);
            ctf_minibatch_free(mb);
            calls++;
        }
        ctf_error e = *ctf_reader_error(r);
        ctf_reader_free(r);
        ASSERT_EQ(rc, CTF_ECHANGED);
        if (!threads) ASSERT_EQ(calls, 2); /* key 1 is in the held chunk 0; chunk 1 fails */
        ASSERT(calls <= 6);
        ASSERT_STR_EQ(e.path, path);
        ASSERT_STR_CONTAINS(e.message, "changed");
    }
}

/*======================================================================
 * Frame mode (rules 6.7) and the rules 5.6 vector
 *====================================================================*/

TEST(reader_frame_mode)
{
    const char *path = test_write_str("frames.ctf", "1 |x 1\n2 |x 2\n3 |x 3\n");
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.frame_mode = true;
    c.randomize = false;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_next(r, 3, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), 3);
    ctf_stream_view v;
    ASSERT_OK(ctf_minibatch_stream(mb, 0, &v), ctf_reader_error(r));
    ASSERT_U64_EQ(v.num_samples, 3);
    ASSERT_DBL_EQ(((const float *)v.values)[2], 3.0);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);

    path = test_write_str("frames2.ctf", "1 |x 1\n2 |x 2\n7 |x 3\n7 |x 4\n8 |x 5\n");
    c.path = path;
    r = open_or_null(&c);
    ASSERT(r);
    int rc = ctf_reader_next(r, 1, &mb);
    ASSERT_EQ(rc, CTF_EPARSE);
    ASSERT(mb == NULL);
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "sequence 7");
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "frame mode");
    ASSERT_U64_EQ(ctf_reader_error(r)->line, 3);
    ctf_reader_free(r);
}

TEST(reader_spec_5_6_vector)
{
    const char *path = line_file("vector.ctf", 10);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.chunk_size_bytes = 10; /* 5 chunks of 2 */
    c.randomization_seed = 0;
    c.randomization_window = 5;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_index_info info;
    ctf_index_get_info(ctf_reader_index(r), &info);
    ASSERT_U64_EQ(info.chunks, 5);
    ASSERT(info.line_mode);
    const uint64_t want[] = {6, 3, 1, 5, 9, 0, 4, 2, 7, 8};
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_next(r, 10, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), 10);
    for (int i = 0; i < 10; i++) ASSERT_U64_EQ(ctf_minibatch_keys(mb)[i], want[i]);
    ASSERT(ctf_minibatch_end_of_sweep(mb));
    ctf_stream_view v;
    ASSERT_OK(ctf_minibatch_stream(mb, 0, &v), ctf_reader_error(r));
    for (int i = 0; i < 10; i++) ASSERT_DBL_EQ(((const float *)v.values)[i], (double)want[i]);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
}

/* The chunks resident once the thread has had time to load ahead after one minibatch of one
 * sample in file order (the counters are brought up to date by the next call, which stays in
 * the first chunk): what the look-ahead holds. */
static uint64_t resident_after_pause(const char *path, size_t prefetch)
{
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.randomize = false;
    c.chunk_size_bytes = 10; /* two lines a chunk: 40 chunks */
    c.num_threads = 1;
    if (prefetch) c.prefetch_chunks = prefetch;
    ctf_reader *r = open_or_null(&c);
    if (!r) return 0;
    ctf_minibatch *mb = NULL;
    uint64_t resident = 0;
    if (ctf_reader_next(r, 1, &mb) == 0 && mb) {
        usleep(200000);
        ctf_minibatch_free(mb);
        mb = NULL;
        (void)ctf_reader_next(r, 1, &mb);
        ctf_stats st;
        ctf_reader_get_stats(r, &st);
        resident = mb ? st.chunks_resident : 0;
    }
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    return resident;
}

TEST(reader_prefetch_default_follows_num_threads)
{
    /* The default look-ahead is 2 * num_threads + 2 of the threads the reader is given, not of
     * the machine's cores: one thread holds 4 chunks (6 or more with the cores' default on a
     * machine of 2 cores or more), and one more once the next minibatch, read ahead, enters
     * the next chunk (the look-ahead then starts one chunk later). */
    const char *path = line_file("prefetch_auto.ctf", 80);
    const uint64_t auto_resident = resident_after_pause(path, 0);
    ASSERT(auto_resident >= 2);
    ASSERT(auto_resident <= 5);
    /* An explicit depth is taken as given (and the pause is long enough to see it). */
    ASSERT(resident_after_pause(path, 20) >= 12);
}

/* A randomized minibatch that needs every chunk of its window (the default window, a small
 * file) asks the threads for all of them at once, not only for the look-ahead's few: past the
 * look-ahead the caller would otherwise load them alone, one after another. */
TEST(reader_randomized_cut_asks_for_its_whole_window)
{
    const char *path = line_file("whole_window.ctf", 160);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.chunk_size_bytes = 100; /* 20 lines a chunk: 8 chunks, all in the default window */
    c.num_threads = 2;
    c.prefetch_chunks = 2;
    c.max_sweeps = 1;
    const long queued0 = atomic_load(&ctf__loader_queued);
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ASSERT_EQ(ctf_reader_index(r)->num_chunks, 8);
    ctf_minibatch *mb = NULL;
    ASSERT_OK(ctf_reader_next(r, 160, &mb), ctf_reader_error(r)); /* the whole sweep */
    ASSERT(mb && ctf_minibatch_num_sequences(mb) == 160);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    ASSERT(atomic_load(&ctf__loader_queued) - queued0 >= 8);
}

TEST(reader_state_at_is_the_state_the_run_has_there)
{
    /* ctf_reader_state_at(p), asked of a reader that reads nothing, is the text the run saves
     * when it reaches p, in any sweep (so a restore of it is a restore of the run's own).
     * Truncated BPTT refuses: its state at p depends on the data before it (a mix's too). */
    const char *path = gen_file("state_at.ctf", 17, 400);
    ctf_config c;
    cfg_base(&c, path, XY, 2);
    c.chunk_size_bytes = 2048;
    c.randomize = true;
    c.randomization_window = 3;
    c.max_sweeps = 3;
    c.num_threads = 2;
    ctf_reader *r = open_or_null(&c), *ask = open_or_null(&c);
    ASSERT(r && ask);
    size_t checked = 0;
    for (;;) {
        char *now = save_state(r);
        size_t len;
        ASSERT_EQ(ctf_reader_state_at(ask, ctf_reader_position(r), NULL, 0, &len), 0);
        char *at = malloc(len + 1);
        ASSERT_EQ(ctf_reader_state_at(ask, ctf_reader_position(r), at, len + 1, &len), 0);
        ASSERT(now != NULL);
        ASSERT_EQ(strcmp(now, at), 0);
        free(now);
        free(at);
        checked++;
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 97, &mb), ctf_reader_error(r));
        if (!mb) break;
        ctf_minibatch_free(mb);
    }
    ASSERT(checked > 10);
    ASSERT_EQ(ctf_reader_position(ask), 0); /* nothing moved */
    size_t len;
    ASSERT_EQ(ctf_reader_state_at(ask, CTF_MAX_POSITION + 1, NULL, 0, &len), CTF_EINVAL);
    ctf_reader_free(r);
    ctf_reader_free(ask);
    c.truncation_length = 4;
    ASSERT((r = open_or_null(&c)) != NULL);
    ASSERT_EQ(ctf_reader_state_at(r, 10, NULL, 0, &len), CTF_EINVAL);
    ctf_reader_free(r);
}

/*======================================================================
 * Skipping a stretch of the timeline
 *====================================================================*/

/* The rest of a run (minibatches of k) after `skip` samples skipped, from a fresh reader or
 * from the state `state` restored first. */
static bool skipped_rest(const ctf_config *c, const char *state, uint64_t skip, long k, bytes *out)
{
    ctf_reader *r = open_or_null(c);
    bool ok = r && (!state || ctf_reader_restore_state(r, state, strlen(state)) == 0) &&
              ctf_reader_skip(r, skip) == 0 && read_rest(r, k, NULL, out, 100000) >= 0;
    ctf_reader_free(r);
    return ok;
}

/* Several-sample sequences: skipping from the state at minibatch i to the position of
 * minibatch j (inside a chunk, across chunks, across a sweep's end) delivers what the run
 * delivered from j on, on every rank of 1 and 3 workers. */
TEST(reader_skip_equals_read_and_discard)
{
    const char *path;
    ctf_config c;
    exact_cfg(&c, &path);
    for (size_t w = 1; w <= 3; w += 2)
        for (size_t rank = 0; rank < w; rank++) {
            c.num_workers = w;
            c.worker_rank = rank;
            ctf_reader *r = open_or_null(&c);
            ASSERT(r);
            run x;
            bool ok = record_run(r, 9, &x);
            uint64_t *pos = malloc((x.n + 1) * sizeof *pos);
            for (size_t i = 0; ok && i <= x.n; i++) {
                ctf_reader *q = open_or_null(&c);
                ok = q && ctf_reader_restore_state(q, x.state[i], strlen(x.state[i])) == 0;
                pos[i] = ok ? ctf_reader_position(q) : 0;
                ctf_reader_free(q);
            }
            ctf_reader_free(r);
            ASSERT(ok && x.n > 24);
            const size_t from[] = {0, 0, 0, 3, 11, 5}, to[] = {1, 4, 20, 5, 21, 0};
            for (size_t t = 0; ok && t < 6; t++) {
                const size_t j = to[t] ? to[t] : x.n - 2;
                bytes want = {0}, got = {0};
                run_slice(&x, j, x.n, &want);
                ok = skipped_rest(&c, from[t] ? x.state[from[t]] : NULL, pos[j] - pos[from[t]], 9,
                                  &got) &&
                     b_eq(&want, &got);
                if (!ok)
                    fprintf(stderr, "skip %zu -> %zu (rank %zu of %zu) differs\n", from[t], j, rank,
                            w);
                b_free(&want);
                b_free(&got);
            }
            free(pos);
            run_free(&x);
            ASSERT(ok);
        }
}

/* One-sample sequences: skip(n) == next(n) discarded, then the rest, for n inside a chunk,
 * across chunks and across the sweep's end; skipping whole chunks loads and parses none, and
 * the state after a skip records it (kept by a restore, the same on every rank). */
TEST(reader_skip_one_sample_reads_nothing)
{
    const char *path = line_file("skip_lines.ctf", 60);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.chunk_size_bytes = 25; /* 5 lines a chunk */
    c.randomization_window = 4;
    c.max_sweeps = 3;
    c.num_threads = 0;
    c.prefetch_chunks = 0;
    c.cache_index = false; /* a record kept in the index cache would hide a re-scan */
    const uint64_t ns[] = {3, 12, 70, 20};
    for (size_t w = 1; w <= 3; w += 2)
        for (size_t rank = 0; rank < w; rank++) {
            c.num_workers = w;
            c.worker_rank = rank;
            for (size_t t = 0; t < 4; t++) {
                ctf_reader *a = open_or_null(&c), *b = open_or_null(&c);
                ASSERT(a && b);
                ctf_minibatch *mb;
                ASSERT_EQ(ctf_reader_next(a, ns[t], &mb), 0);
                ctf_minibatch_free(mb);
                /* The data away while skipping: a skip that read any of it would fail (the
                 * consumer's own re-scans are not in ctf_perf). */
                char away[4200];
                snprintf(away, sizeof away, "%s.away", path);
                ASSERT_EQ(rename(path, away), 0);
                const int src = ctf_reader_skip(b, ns[t]);
                ASSERT_EQ(rename(away, path), 0);
                ASSERT_EQ(src, 0);
                ASSERT_EQ(ctf_reader_position(b), ns[t]);
                ctf_perf perf;
                ctf_reader_get_perf(b, &perf, sizeof perf);
                ASSERT_EQ(perf.chunks_loaded, 0);
                ASSERT_EQ(perf.parse_bytes, 0);
                char *st = save_state(b);
                char want[64];
                snprintf(want, sizeof want, "\"skipped\": \"0-%llu\", \"skipped_samples\": %llu",
                         (unsigned long long)ns[t], (unsigned long long)ns[t]);
                ASSERT(st && strstr(st, want));
                bytes x = {0}, y = {0};
                ASSERT(read_rest(a, 7, NULL, &x, 100000) > 0);
                ASSERT(read_rest(b, 7, NULL, &y, 100000) > 0);
                ASSERT(b_eq(&x, &y));
                /* Restored elsewhere, the list stays; a second adjacent skip merges. */
                ctf_reader *d = open_or_null(&c);
                ASSERT(d && ctf_reader_restore_state(d, st, strlen(st)) == 0);
                ASSERT_EQ(ctf_reader_skip(d, 2), 0);
                char *st2 = save_state(d);
                snprintf(want, sizeof want, "\"skipped\": \"0-%llu\", \"skipped_samples\": %llu",
                         (unsigned long long)ns[t] + 2, (unsigned long long)ns[t] + 2);
                ASSERT(st2 && strstr(st2, want));
                free(st);
                free(st2);
                b_free(&x);
                b_free(&y);
                ctf_reader_free(a);
                ctf_reader_free(b);
                ctf_reader_free(d);
            }
        }
}

/* The list stays bounded (the oldest stretches dropped, their samples still counted), a
 * malformed list is refused, and a state without one restores as before. */
TEST(reader_skip_state_list_is_bounded_and_checked)
{
    const char *path = line_file("skip_bound.ctf", 200);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.chunk_size_bytes = 25;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb;
    for (int i = 0; i < 20; i++) {
        ASSERT_EQ(ctf_reader_skip(r, 1), 0);
        ASSERT_EQ(ctf_reader_next(r, 1, &mb), 0);
        ctf_minibatch_free(mb);
    }
    char *st = save_state(r);
    ASSERT(st && strstr(st, "\"skipped\": \"8-9;") && strstr(st, ";38-39\"") &&
           strstr(st, "\"skipped_samples\": 20"));
    ASSERT_EQ(ctf_reader_restore_state(r, st, strlen(st)), 0);
    char *back = save_state(r);
    ASSERT(back && !strcmp(st, back));
    const char *bad[] = {"5-3", "3-3", "1-2;0-1", "0-99999", "x-1", "0-1;", "1"};
    for (size_t i = 0; i < 7; i++) {
        char s[1024];
        snprintf(s, sizeof s, "%.*s\"skipped\": \"%s\", \"skipped_samples\": 9}",
                 (int)(strstr(st, "\"skipped\"") - st), st, bad[i]);
        ASSERT_EQ(ctf_reader_restore_state(r, s, strlen(s)), CTF_ESTATE);
        ASSERT(strstr(ctf_reader_error(r)->message, "skipped"));
    }
    ASSERT_EQ(ctf_reader_skip(r, CTF_MAX_POSITION), CTF_EINVAL);
    free(st);
    free(back);
    ctf_reader_free(r);
}

TEST(reader_a_cut_reaching_the_sweep_end_loads_each_chunk_once)
{
    /* The cut loads a chunk for its records before the pick takes it; a cut that reaches the
     * sweep's end opens the next sweep in between, whose change of sweep used to cancel those
     * loads, so the pick loaded them again. One sweep, one load per chunk: with one minibatch
     * for the whole sweep, with one that ends on it, with threads and without, in both orders. */
    char names[3][600];
    const char *paths[3];
    for (int f = 0; f < 3; f++) { /* a corpus of three files of 20 lines, 2 chunks each */
        char n[32];
        snprintf(n, sizeof n, "sweep_end_%d.ctf", f);
        snprintf(names[f], sizeof names[f], "%s", line_file(n, 20));
        paths[f] = names[f];
    }
    const uint64_t sizes[] = {4096, 60, 7};
    for (int randomize = 0; randomize < 2; randomize++)
        for (size_t threads = 0; threads <= 2; threads += 2)
            for (size_t si = 0; si < 3; si++) {
                ctf_config c;
                cfg_base(&c, paths[0], X1, 1);
                c.paths = paths;
                c.num_paths = 3;
                c.chunk_size_bytes = 50; /* 6 chunks of 10 lines */
                c.randomize = randomize;
                c.num_threads = threads;
                c.max_sweeps = 1;
                ctf_reader *r = open_or_null(&c);
                ASSERT(r != NULL);
                uint64_t samples = 0;
                for (;;) {
                    ctf_minibatch *mb;
                    ASSERT_OK(ctf_reader_next(r, sizes[si], &mb), ctf_reader_error(r));
                    if (!mb) break;
                    samples += ctf_minibatch_num_sequences(mb);
                    ctf_minibatch_free(mb);
                }
                ctf_perf pf; /* loads run, also those whose result was dropped */
                ctf_reader_get_perf(r, &pf, sizeof pf);
                ASSERT_EQ(samples, 60);
                ASSERT_EQ(pf.chunks_loaded, 6);
                ASSERT_EQ(pf.parse_bytes, 300);
                ctf_reader_free(r);
            }
}
