/*
 * reader_harness.h -- what the reader tests share (test_reader.c, test_reader_state.c): small
 * files made on the fly, configurations, a run recorded minibatch by minibatch with the state
 * before each, and the byte strings two runs are compared by. Static inline: each test file
 * takes what it uses.
 */
#ifndef CTFIO_READER_HARNESS_H
#define CTFIO_READER_HARNESS_H

#include "reader/pipeline.h" /* the randomizer, to predict chunk ownership */
#include "test.h"
#include "test_bytes.h"

#include <stdlib.h>
#include <unistd.h>

#define TEST_UNUSED __attribute__((unused))

/*======================================================================
 * Helpers
 *====================================================================*/

static inline uint64_t rnd_next(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t rnd_range(uint64_t *s, uint64_t lo, uint64_t hi) /* [lo, hi] */
{
    return lo + rnd_next(s) % (hi - lo + 1);
}

static inline void quiet_log(void *user, ctf_severity sev, const ctf_error *what)
{
    (void)user;
    (void)sev;
    (void)what;
}

static inline void append_mb(bytes *b, const ctf_minibatch *mb)
{
    for (size_t i = 0; i < ctf_minibatch_num_sequences(mb); i++) append_seq(b, mb, i);
}

/* Reads until the end of the data (or max_calls), appending every sequence. K <= 0 draws each
 * size from [1, -K] with *rs. @return : calls that delivered a minibatch, or -1 on an error. */
static inline long read_rest(ctf_reader *r, long k, uint64_t *rs, bytes *b, long max_calls)
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

static inline void cfg_base(ctf_config *c, const char *path, const ctf_stream_def *s, size_t ns)
{
    ctf_config_init(c);
    c->path = path;
    c->streams = s;
    c->num_streams = ns;
    c->log = quiet_log;
}

static inline ctf_reader *open_or_null(const ctf_config *c)
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

TEST_UNUSED static const ctf_stream_def X1[] = {{.name = "x", .dim = 1}};
TEST_UNUSED static const ctf_stream_def XY[] = {{.name = "x", .dim = 3},
                                                {.name = "y", .dim = 10, .is_sparse = true}};

/* A line-mode file of n lines "|x D\n" (5 bytes each): chunk size 5*m gives m lines a chunk. */
static inline const char *line_file(const char *name, size_t n)
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
static inline const char *gen_file(const char *name, uint64_t seed, size_t nseq)
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
static inline void rnd_cfg(ctf_config *c, const char *path, uint64_t *rs)
{
    cfg_base(c, path, XY, 2);
    c->chunk_size_bytes = rnd_range(rs, 60, 260);
    c->randomization_seed = rnd_range(rs, 0, 1000);
    c->window_in_samples = rnd_range(rs, 0, 2) == 0;
    c->randomization_window = c->window_in_samples ? rnd_range(rs, 1, 40) : rnd_range(rs, 1, 6);
}

/* Whether m's sequences are a subsequence of g's (same keys and data, in order), all at the
 * same position; marks the global indices used in used[] (NULL: no marks). */
static inline bool subseq_ok(const ctf_minibatch *g, const ctf_minibatch *m, unsigned char *used)
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
static inline bool split_ok(const ctf_minibatch *g, ctf_minibatch *const *mbs, size_t nw)
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
 * A run recorded: each minibatch's bytes and the state before it
 *====================================================================*/

typedef struct run {
    size_t n;          /* minibatches */
    bytes *mb;         /* per minibatch */
    char **state;      /* state before minibatch i (n + 1 entries) */
} run;

static inline void run_free(run *x)
{
    for (size_t i = 0; i < x->n; i++) b_free(&x->mb[i]);
    for (size_t i = 0; i <= x->n && x->state; i++) free(x->state[i]);
    free(x->mb);
    free(x->state);
    *x = (run){0};
}

static inline char *save_state(ctf_reader *r)
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
static inline bool record_run(ctf_reader *r, uint64_t k, run *x)
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
static inline void run_slice(const run *x, size_t from, size_t to, bytes *out)
{
    for (size_t i = from; i < to && i < x->n; i++) b_add(out, x->mb[i].p, x->mb[i].n);
}

static inline void exact_cfg(ctf_config *c, const char **pathp)
{
    uint64_t rs = 77;
    *pathp = gen_file("exact.ctf", 12345, 40);
    rnd_cfg(c, *pathp, &rs);
    c->chunk_size_bytes = 120;
    c->randomization_window = 3;
    c->window_in_samples = false;
    c->max_sweeps = 3;
}

#endif
