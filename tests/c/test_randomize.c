/*
 * test_randomize.c -- the block randomizer (lib/randomize.c, SPEC 5).
 *
 * Three kinds of evidence that the order is CNTK's: the std::mt19937_64 check value, the SPEC
 * 5.6 vector, and orders taken from the conformance corpus (shared/conformance, produced by
 * CNTK's rules) with their chunk tables. Around them, property tests over random chunkings and
 * windows: permutations, window containment, sweep/seed relations, identity for window 0,
 * reuse of the output across calls, and allocation failure.
 */
#include "ctfio_internal.h"
#include "test.h"

#include <stdlib.h>

/*======================================================================
 * Helpers
 *====================================================================*/

/* splitmix64: the tests' own generator, independent of the code under test. */
static uint64_t rnd_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static size_t rnd_range(uint64_t *s, size_t lo, size_t hi) /* [lo, hi] */
{
    return lo + (size_t)(rnd_next(s) % (uint64_t)(hi - lo + 1));
}

/* Chunk tables with consecutive sequences from 0 (as the index builds them). */
static void number_chunks(ctf__chunk *ch, size_t n)
{
    size_t first = 0;
    for (size_t c = 0; c < n; c++) {
        ch[c].first_seq = first;
        first += ch[c].num_seqs;
    }
}

/* SPEC 5.4 written out again, position by position, to check the windows the randomizer used
 * without looking at its code. win must hold 2*n entries: begin, end per position. */
static void spec_windows(const ctf__chunk *ch, size_t n, const size_t *chunk_at, uint64_t w,
                         bool in_samples, size_t *win)
{
    if (!in_samples) {
        uint64_t size = w > 1 ? w : 1, half = w / 2;
        for (size_t p = 0; p < n; p++) {
            uint64_t b = p > half ? p - half : 0, e;
            if (size > n || b + size > n) {
                e = n;
                b = n > size ? n - size : 0;
            } else {
                e = b + size;
            }
            win[2 * p] = (size_t)b;
            win[2 * p + 1] = (size_t)e;
        }
        return;
    }
    uint64_t half = w / 2;
    for (size_t p = 0; p < n; p++) {
        size_t b = p ? win[2 * (p - 1)] : 0, e = p ? win[2 * (p - 1) + 1] : 1;
        /* sampleStart(q) recomputed by summation every time: slow and obvious. */
        for (;;) {
            uint64_t sp = 0, sb = 0;
            for (size_t q = 0; q < p; q++) sp += ch[chunk_at[q]].samples;
            for (size_t q = 0; q < b; q++) sb += ch[chunk_at[q]].samples;
            if (sp - sb > half) b++;
            else break;
        }
        if (b > p) b = p;
        if (e < p + 1) e = p + 1;
        for (;;) {
            if (e >= n) break;
            uint64_t sp = 0, se = 0;
            for (size_t q = 0; q < p; q++) sp += ch[chunk_at[q]].samples;
            for (size_t q = 0; q <= e; q++) se += ch[chunk_at[q]].samples;
            if (se - sp < half) e++;
            else break;
        }
        win[2 * p] = b;
        win[2 * p + 1] = e;
    }
}

/* Checks one sweep against everything SPEC 5 promises. Returns a description of the first
 * violation, or NULL. */
static const char *check_sweep(const ctf__chunk *ch, size_t n, uint64_t w, bool in_samples,
                               const ctf__sweep *s)
{
    static char why[200];
    size_t total = 0;
    for (size_t c = 0; c < n; c++) total += ch[c].num_seqs;
    if (s->num_slots != total) return "num_slots is not the number of sequences";
    if (s->num_chunks != n) return "num_chunks is wrong";
    unsigned char *seen = calloc(total + n + 1, 1);
    size_t *chunk_of = malloc((total + 1) * sizeof *chunk_of);
    size_t *win = malloc((2 * n + 1) * sizeof *win);
    const char *bad = NULL;
    if (!seen || !chunk_of || !win) {
        bad = "test out of memory";
        goto done;
    }
    for (size_t c = 0; c < n; c++)
        for (size_t i = 0; i < ch[c].num_seqs; i++) chunk_of[ch[c].first_seq + i] = c;
    for (size_t p = 0; p < n; p++) {
        if (s->chunk_at[p] >= n || seen[total + s->chunk_at[p]]++) {
            bad = "chunk_at is not a permutation";
            goto done;
        }
    }
    if (w == 0) {
        for (size_t p = 0; p < n; p++) win[2 * p] = 0, win[2 * p + 1] = n;
    } else {
        spec_windows(ch, n, s->chunk_at, w, in_samples, win);
    }
    size_t t = 0;
    for (size_t p = 0; p < n; p++) {
        /* Slot counts per position are those of the chunk placed there. */
        for (size_t k = 0; k < ch[s->chunk_at[p]].num_seqs; k++, t++) {
            size_t q = s->seq[t];
            if (q >= total || seen[q]++) {
                snprintf(why, sizeof why, "slot %zu: sequence %zu repeated or out of range", t, q);
                bad = why;
                goto done;
            }
            if (s->chunk_at[s->home[t]] != chunk_of[q]) {
                snprintf(why, sizeof why, "slot %zu: home %zu is not the position of chunk %zu",
                         t, s->home[t], chunk_of[q]);
                bad = why;
                goto done;
            }
            if (s->home[t] < win[2 * p] || s->home[t] >= win[2 * p + 1]) {
                snprintf(why, sizeof why, "slot %zu (position %zu, window [%zu,%zu)) holds home %zu",
                         t, p, win[2 * p], win[2 * p + 1], s->home[t]);
                bad = why;
                goto done;
            }
        }
    }
done:
    free(seen);
    free(chunk_of);
    free(win);
    return bad;
}

static bool same_sweep(const ctf__sweep *a, const ctf__sweep *b)
{
    return a->num_slots == b->num_slots && a->num_chunks == b->num_chunks &&
           memcmp(a->seq, b->seq, a->num_slots * sizeof(size_t)) == 0 &&
           memcmp(a->home, b->home, a->num_slots * sizeof(size_t)) == 0 &&
           memcmp(a->chunk_at, b->chunk_at, a->num_chunks * sizeof(size_t)) == 0;
}

static bool is_file_order(const ctf__chunk *ch, size_t n, const ctf__sweep *s)
{
    size_t t = 0;
    for (size_t c = 0; c < n; c++) {
        if (s->chunk_at[c] != c) return false;
        for (size_t i = 0; i < ch[c].num_seqs; i++, t++)
            if (s->seq[t] != ch[c].first_seq + i || s->home[t] != c) return false;
    }
    return t == s->num_slots;
}

/*======================================================================
 * The generator
 *====================================================================*/

TEST(mt64_matches_std_mt19937_64)
{
    ctf__mt64 g;
    ctf__mt64_seed(&g, 5489);
    ASSERT_U64_EQ(ctf__mt64_next(&g), 14514284786278117030ULL); /* first output, C++ default */
    for (int i = 2; i < 10000; i++) ctf__mt64_next(&g);
    ASSERT_U64_EQ(ctf__mt64_next(&g), 9981545732273789042ULL); /* the standard's check value */
}

TEST(mt64_reseed_restarts)
{
    ctf__mt64 g;
    ctf__mt64_seed(&g, 12345);
    uint64_t first[700];
    for (int i = 0; i < 700; i++) first[i] = ctf__mt64_next(&g);
    ctf__mt64_seed(&g, 12345);
    for (int i = 0; i < 700; i++) ASSERT_U64_EQ(ctf__mt64_next(&g), first[i]);
    ctf__mt64_seed(&g, 12346);
    ASSERT(ctf__mt64_next(&g) != first[0]);
}

/*======================================================================
 * SPEC 5.6 and CNTK-derived vectors
 *====================================================================*/

TEST(spec_5_6_vector)
{
    ctf__chunk ch[5];
    for (size_t c = 0; c < 5; c++) ch[c] = (ctf__chunk){.num_seqs = 2, .samples = 2};
    number_chunks(ch, 5);
    const size_t expect[10] = {6, 3, 1, 5, 9, 0, 4, 2, 7, 8};
    ctf__sweep s = {0};
    ctf_error err = {0};
    ASSERT_OK(ctf__randomize_sweep(ch, 5, 5, false, 0, 0, &s, &err), &err);
    ASSERT_EQ(s.num_slots, 10);
    for (size_t t = 0; t < 10; t++) ASSERT_EQ(s.seq[t], expect[t]);
    ASSERT(check_sweep(ch, 5, 5, false, &s) == NULL);
    /* Any window that covers all chunks gives the same order, in either unit. */
    ctf__sweep s2 = {0};
    ASSERT_OK(ctf__randomize_sweep(ch, 5, 1000, false, 0, 0, &s2, &err), &err);
    ASSERT(same_sweep(&s, &s2));
    ASSERT_OK(ctf__randomize_sweep(ch, 5, UINT64_MAX, true, 0, 0, &s2, &err), &err);
    ASSERT(same_sweep(&s, &s2));
    ctf__sweep_free(&s);
    ctf__sweep_free(&s2);
}

/* Conformance corpus orders (shared/conformance/cases): the chunk tables are the SPEC 4.2
 * chunking of each case file (first_seq, num_seqs, samples = index samples, with definesMBSize
 * where noted); the orders are the keys of the expected minibatches, concatenated and mapped to
 * file-order sequence indices, covering whole sweeps 0 and 1 (case008: the first 18 slots of
 * sweep 0). */
/* case004: case004.ctf, chunkSizeInBytes 400, randomizationWindow 55 (samples), seed 3. */
static const ctf__chunk case004_chunks[] = {
    {0, 6, 0, 0, 8}, {6, 3, 0, 0, 10}, {9, 2, 0, 0, 9}, {11, 2, 0, 0, 9}, {13, 2, 0, 0, 8},
    {15, 4, 0, 0, 12}, {19, 3, 0, 0, 6}, {22, 3, 0, 0, 10}, {25, 3, 0, 0, 8}, {28, 1, 0, 0, 4},
};
static const size_t case004_order[] = {
    23, 14, 24, 28, 15, 22, 13, 3, 0, 17, 2, 27, 1, 18, 4, 12, 5, 26, 16, 11, 7, 10, 20, 8, 6,
    9, 25, 21, 19,
    7, 8, 27, 26, 17, 15, 6, 13, 16, 25, 14, 23, 19, 18, 10, 2, 0, 24, 4, 21, 3, 1, 12, 22, 5,
    20, 28, 11, 9,
};
/* case031: case031.ctf, chunkSizeInBytes 40, randomizationWindow 9 (samples), seed 3, definesMBSize c0. */
static const ctf__chunk case031_chunks[] = {
    {0, 1, 0, 0, 4}, {1, 1, 0, 0, 1}, {2, 1, 0, 0, 5}, {3, 1, 0, 0, 3}, {4, 1, 0, 0, 4},
    {5, 1, 0, 0, 4}, {6, 1, 0, 0, 3}, {7, 1, 0, 0, 1}, {8, 1, 0, 0, 2}, {9, 1, 0, 0, 5},
    {10, 1, 0, 0, 4}, {11, 1, 0, 0, 5}, {12, 1, 0, 0, 4}, {13, 1, 0, 0, 5}, {14, 1, 0, 0, 3},
    {15, 1, 0, 0, 4},
};
static const size_t case031_order[] = {
    13, 7, 0, 9, 4, 2, 1, 15, 10, 5, 14, 3, 11, 6, 12, 8,
    9, 6, 11, 4, 5, 14, 2, 0, 7, 8, 12, 3, 1, 13, 10, 15,
};
/* case034: case034.ctf, chunkSizeInBytes 128, randomizationWindow 4 (chunks), seed 1. */
static const ctf__chunk case034_chunks[] = {
    {0, 1, 0, 0, 5}, {1, 1, 0, 0, 1}, {2, 1, 0, 0, 5}, {3, 1, 0, 0, 3}, {4, 1, 0, 0, 3},
    {5, 1, 0, 0, 1}, {6, 1, 0, 0, 3}, {7, 1, 0, 0, 2}, {8, 1, 0, 0, 5}, {9, 1, 0, 0, 3},
    {10, 1, 0, 0, 5}, {11, 1, 0, 0, 3}, {12, 1, 0, 0, 4}, {13, 1, 0, 0, 4}, {14, 1, 0, 0, 4},
    {15, 1, 0, 0, 5}, {16, 1, 0, 0, 4}, {17, 1, 0, 0, 5}, {18, 1, 0, 0, 5}, {19, 1, 0, 0, 5},
};
static const size_t case034_order[] = {
    19, 10, 2, 5, 7, 18, 0, 3, 1, 13, 6, 17, 12, 15, 9, 8, 16, 11, 4, 14,
    12, 17, 5, 11, 1, 14, 6, 10, 7, 9, 3, 4, 8, 18, 16, 19, 15, 0, 13, 2,
};
/* case036: case036.ctf, chunkSizeInBytes 128, randomizationWindow 27 (samples), seed 9. */
static const ctf__chunk case036_chunks[] = {
    {0, 1, 0, 0, 3}, {1, 1, 0, 0, 4}, {2, 2, 0, 0, 3}, {4, 1, 0, 0, 4}, {5, 1, 0, 0, 2},
    {6, 2, 0, 0, 4}, {8, 1, 0, 0, 5}, {9, 1, 0, 0, 3}, {10, 1, 0, 0, 2}, {11, 1, 0, 0, 4},
};
static const size_t case036_order[] = {
    8, 9, 10, 1, 11, 3, 0, 6, 2, 4, 7, 5,
    5, 8, 1, 10, 9, 11, 0, 6, 7, 3, 4, 2,
};
/* case008: case008.ctf, chunkSizeInBytes 400, randomizationWindow 2 (chunks), seed 0, definesMBSize feat0. */
static const ctf__chunk case008_chunks[] = {
    {0, 3, 0, 0, 4}, {3, 2, 0, 0, 6}, {5, 2, 0, 0, 10}, {7, 2, 0, 0, 7}, {9, 1, 0, 0, 4},
    {10, 1, 0, 0, 5}, {11, 2, 0, 0, 9}, {13, 2, 0, 0, 8}, {15, 2, 0, 0, 9}, {17, 2, 0, 0, 6},
    {19, 3, 0, 0, 9}, {22, 3, 0, 0, 7}, {25, 3, 0, 0, 7}, {28, 2, 0, 0, 9}, {30, 3, 0, 0, 9},
    {33, 2, 0, 0, 7},
};
static const size_t case008_order[] = {
    12, 30, 11, 31, 32, 17, 18, 21, 19, 20, 27, 25, 26, 7, 8, 28, 29, 15,
};


typedef struct conformance_case {
    const char *name;
    const ctf__chunk *chunks;
    size_t num_chunks;
    uint64_t window;
    bool in_samples;
    uint64_t seed;
    const size_t *order;   /* expected slots, sweep after sweep */
    size_t order_len;
} conformance_case;

#define CASE(c, w, smp, seed) \
    {#c, c##_chunks, sizeof c##_chunks / sizeof c##_chunks[0], w, smp, seed, c##_order, \
     sizeof c##_order / sizeof c##_order[0]}

static const conformance_case conformance_cases[] = {
    CASE(case004, 55, true, 3),
    CASE(case031, 9, true, 3),
    CASE(case034, 4, false, 1),
    CASE(case036, 27, true, 9),
    CASE(case008, 2, false, 0),
};

TEST(conformance_orders)
{
    ctf__sweep s = {0};
    ctf_error err = {0};
    for (size_t i = 0; i < sizeof conformance_cases / sizeof conformance_cases[0]; i++) {
        const conformance_case *cc = &conformance_cases[i];
        size_t got = 0;
        for (uint64_t k = 0; got < cc->order_len; k++) {
            ASSERT_OK(ctf__randomize_sweep(cc->chunks, cc->num_chunks, cc->window, cc->in_samples,
                                           cc->seed, k, &s, &err),
                      &err);
            ASSERT(check_sweep(cc->chunks, cc->num_chunks, cc->window, cc->in_samples, &s) == NULL);
            for (size_t t = 0; t < s.num_slots && got < cc->order_len; t++, got++) {
                if (s.seq[t] != cc->order[got]) {
                    char m[160];
                    snprintf(m, sizeof m, "%s sweep %llu slot %zu: got %zu, expected %zu", cc->name,
                             (unsigned long long)k, t, s.seq[t], cc->order[got]);
                    test_fail(__FILE__, __LINE__, "conformance order", m);
                    ctf__sweep_free(&s);
                    return;
                }
            }
        }
    }
    ctf__sweep_free(&s);
}

/*======================================================================
 * Properties over random chunkings and windows
 *====================================================================*/

/* A random chunk table: 1-50 chunks, 1-8 sequences each (often 1), 1-5 samples per sequence,
 * and now and then a chunk with 0 index samples (definesMBSize stream absent). */
static size_t random_chunks(uint64_t *r, ctf__chunk *ch)
{
    size_t n = rnd_range(r, 1, 50);
    size_t max_seqs = rnd_range(r, 0, 2) == 0 ? 1 : 8;
    for (size_t c = 0; c < n; c++) {
        ch[c] = (ctf__chunk){.num_seqs = rnd_range(r, 1, max_seqs)};
        for (size_t i = 0; i < ch[c].num_seqs; i++) ch[c].samples += rnd_range(r, 1, 5);
        if (rnd_range(r, 0, 30) == 0) ch[c].samples = 0;
    }
    number_chunks(ch, n);
    return n;
}

static uint64_t random_window(uint64_t *r, const ctf__chunk *ch, size_t n, bool in_samples)
{
    uint64_t total = 0;
    for (size_t c = 0; c < n; c++) total += in_samples ? ch[c].samples : 1;
    switch (rnd_range(r, 0, 7)) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 2;
    case 3: return total;
    case 4: return total + rnd_range(r, 1, 100);
    case 5: return UINT64_MAX;
    default: return rnd_range(r, 1, (size_t)total + 1);
    }
}

TEST(random_chunkings_properties)
{
    uint64_t r = 42;
    ctf__chunk ch[50];
    ctf__sweep s = {0}, prev = {0}, other = {0};
    ctf_error err = {0};
    for (int trial = 0; trial < 400; trial++) {
        size_t n = random_chunks(&r, ch);
        bool in_samples = rnd_range(&r, 0, 1);
        uint64_t w = random_window(&r, ch, n, in_samples);
        uint64_t seed = rnd_next(&r) % 1000;
        if (trial % 7 == 0) seed = UINT64_MAX - 2; /* seed + k wraps around */
        size_t distinct = 0;
        for (uint64_t k = 0; k < 8; k++) {
            ASSERT_OK(ctf__randomize_sweep(ch, n, w, in_samples, seed, k, &s, &err), &err);
            ASSERT_U64_EQ(s.sweep, k);
            const char *why = check_sweep(ch, n, w, in_samples, &s);
            if (why) {
                char m[300];
                snprintf(m, sizeof m, "trial %d n %zu window %llu%s sweep %llu: %s", trial, n,
                         (unsigned long long)w, in_samples ? " samples" : "",
                         (unsigned long long)k, why);
                test_fail(__FILE__, __LINE__, "check_sweep", m);
                goto out;
            }
            if (w == 0) ASSERT(is_file_order(ch, n, &s));
            if (k > 0 && !same_sweep(&s, &prev)) distinct++;
            /* Seed s, sweep k+1 is seed s+1, sweep k: both are seeded with s + k + 1. */
            if (k > 0) {
                ASSERT_OK(ctf__randomize_sweep(ch, n, w, in_samples, seed + 1, k - 1, &other, &err),
                          &err);
                ASSERT(memcmp(other.seq, s.seq, s.num_slots * sizeof(size_t)) == 0);
                ASSERT(memcmp(other.home, s.home, s.num_slots * sizeof(size_t)) == 0);
                ASSERT(memcmp(other.chunk_at, s.chunk_at, n * sizeof(size_t)) == 0);
            }
            ASSERT_OK(ctf__randomize_sweep(ch, n, w, in_samples, seed, k, &prev, &err), &err);
            ASSERT(same_sweep(&s, &prev)); /* deterministic, and reuse does not leak state */
        }
        size_t slots = s.num_slots;
        bool trivial = w == 0 || (n == 1 && slots == 1) || slots < 3;
        /* With window 1 (chunks or too few samples) and one sequence per chunk, only the chunk
         * order varies; it still must vary over 8 sweeps once there are 3 chunks. */
        if (!trivial && distinct == 0) {
            char m[160];
            snprintf(m, sizeof m, "trial %d: n %zu slots %zu window %llu: 8 identical sweeps", trial,
                     n, slots, (unsigned long long)w);
            test_fail(__FILE__, __LINE__, "sweeps differ", m);
            goto out;
        }
    }
out:
    ctf__sweep_free(&s);
    ctf__sweep_free(&prev);
    ctf__sweep_free(&other);
}

TEST(window_one_chunk_keeps_sequences_in_their_chunk)
{
    /* Window 1 chunk: each position's window is itself, so the sweep is the chunk shuffle with
     * each chunk's sequences permuted in place. */
    uint64_t r = 7;
    ctf__chunk ch[50];
    ctf__sweep s = {0};
    ctf_error err = {0};
    for (int trial = 0; trial < 50; trial++) {
        size_t n = random_chunks(&r, ch);
        ASSERT_OK(ctf__randomize_sweep(ch, n, 1, false, (uint64_t)trial, 3, &s, &err), &err);
        for (size_t t = 0; t < s.num_slots; t++) {
            size_t c = s.chunk_at[s.home[t]];
            ASSERT(s.seq[t] >= ch[c].first_seq && s.seq[t] < ch[c].first_seq + ch[c].num_seqs);
        }
        size_t t = 0;
        for (size_t p = 0; p < n; p++)
            for (size_t i = 0; i < ch[s.chunk_at[p]].num_seqs; i++, t++) ASSERT_EQ(s.home[t], p);
    }
    ctf__sweep_free(&s);
}

TEST(huge_windows_equal_full_windows)
{
    uint64_t r = 99;
    ctf__chunk ch[50];
    ctf__sweep a = {0}, b = {0};
    ctf_error err = {0};
    for (int trial = 0; trial < 30; trial++) {
        size_t n = random_chunks(&r, ch);
        uint64_t total = 0;
        for (size_t c = 0; c < n; c++) total += ch[c].samples;
        ASSERT_OK(ctf__randomize_sweep(ch, n, n, false, 5, 1, &a, &err), &err);
        ASSERT_OK(ctf__randomize_sweep(ch, n, UINT64_MAX, false, 5, 1, &b, &err), &err);
        ASSERT(same_sweep(&a, &b));
        ASSERT_OK(ctf__randomize_sweep(ch, n, 2 * total + 2, true, 5, 1, &b, &err), &err);
        ASSERT(same_sweep(&a, &b));
        ASSERT_OK(ctf__randomize_sweep(ch, n, UINT64_MAX, true, 5, 1, &b, &err), &err);
        ASSERT(same_sweep(&a, &b));
    }
    ctf__sweep_free(&a);
    ctf__sweep_free(&b);
}

TEST(sequence_numbers_come_from_first_seq)
{
    /* A chunk table that does not start at sequence 0 (e.g. a slice of an index). */
    ctf__chunk ch[3] = {{.first_seq = 100, .num_seqs = 3, .samples = 3},
                        {.first_seq = 103, .num_seqs = 1, .samples = 1},
                        {.first_seq = 104, .num_seqs = 2, .samples = 2}};
    ctf__sweep s = {0};
    ctf_error err = {0};
    ASSERT_OK(ctf__randomize_sweep(ch, 3, 3, false, 1, 0, &s, &err), &err);
    unsigned seen = 0;
    for (size_t t = 0; t < s.num_slots; t++) {
        ASSERT(s.seq[t] >= 100 && s.seq[t] < 106);
        seen |= 1u << (s.seq[t] - 100);
    }
    ASSERT_EQ(seen, 0x3f);
    ASSERT_OK(ctf__sweep_identity(ch, 3, 0, &s, &err), &err);
    for (size_t t = 0; t < 6; t++) ASSERT_EQ(s.seq[t], 100 + t);
    ctf__sweep_free(&s);
}

/*======================================================================
 * File order, edge cases, reuse, allocation failure
 *====================================================================*/

TEST(identity_is_file_order)
{
    uint64_t r = 3;
    ctf__chunk ch[50];
    ctf__sweep s = {0}, z = {0};
    ctf_error err = {0};
    for (int trial = 0; trial < 20; trial++) {
        size_t n = random_chunks(&r, ch);
        ASSERT_OK(ctf__sweep_identity(ch, n, (uint64_t)trial, &s, &err), &err);
        ASSERT_U64_EQ(s.sweep, (uint64_t)trial);
        ASSERT(is_file_order(ch, n, &s));
        ASSERT_OK(ctf__randomize_sweep(ch, n, 0, trial % 2, 77, (uint64_t)trial, &z, &err), &err);
        ASSERT(same_sweep(&s, &z));
        ASSERT_U64_EQ(z.sweep, (uint64_t)trial);
    }
    ctf__sweep_free(&s);
    ctf__sweep_free(&z);
}

TEST(empty_and_single)
{
    ctf__sweep s = {0};
    ctf_error err = {0};
    ASSERT_OK(ctf__randomize_sweep(NULL, 0, 10, false, 0, 0, &s, &err), &err);
    ASSERT_EQ(s.num_slots, 0);
    ASSERT_EQ(s.num_chunks, 0);
    ASSERT_OK(ctf__sweep_identity(NULL, 0, 0, &s, &err), &err);
    ASSERT_EQ(s.num_slots, 0);
    ctf__chunk one = {.first_seq = 0, .num_seqs = 1, .samples = 4};
    ASSERT_OK(ctf__randomize_sweep(&one, 1, 1, true, 9, 9, &s, &err), &err);
    ASSERT_EQ(s.num_slots, 1);
    ASSERT_EQ(s.seq[0], 0);
    ASSERT_EQ(s.home[0], 0);
    ASSERT_EQ(s.chunk_at[0], 0);
    ctf__sweep_free(&s);
    ctf__sweep_free(&s); /* freeing twice is harmless: free zeroes the struct */
    ctf__sweep_free(NULL);
}

TEST(reuse_across_sizes)
{
    /* One output struct through growing and shrinking tables gives what fresh ones give. */
    uint64_t r = 11;
    ctf__chunk ch[50];
    ctf__sweep reused = {0};
    ctf_error err = {0};
    for (int trial = 0; trial < 40; trial++) {
        size_t n = random_chunks(&r, ch);
        ctf__sweep fresh = {0};
        ASSERT_OK(ctf__randomize_sweep(ch, n, 3, false, 2, 0, &reused, &err), &err);
        ASSERT_OK(ctf__randomize_sweep(ch, n, 3, false, 2, 0, &fresh, &err), &err);
        bool same = same_sweep(&reused, &fresh);
        ctf__sweep_free(&fresh);
        ASSERT(same);
    }
    ctf__sweep_free(&reused);
}

TEST(allocation_failure_is_enomem_and_freeable)
{
    ctf__chunk ch[20];
    for (size_t c = 0; c < 20; c++) ch[c] = (ctf__chunk){.num_seqs = 1 + c % 3, .samples = 2};
    number_chunks(ch, 20);
    ctf__sweep want = {0};
    ctf_error err = {0};
    ASSERT_OK(ctf__randomize_sweep(ch, 20, 4, true, 1, 2, &want, &err), &err);
    for (long k = 1; k <= 8; k++) {
        for (int warm = 0; warm < 2; warm++) {
            ctf__sweep s = {0};
            /* warm: the output already holds a sweep of another size. */
            if (warm) ASSERT_OK(ctf__randomize_sweep(ch, 7, 2, false, 0, 0, &s, &err), &err);
            long live = atomic_load(&ctf__alloc.live);
            ctf__alloc.fail_at = atomic_load(&ctf__alloc.count) + k;
            int rc = ctf__randomize_sweep(ch, 20, 4, true, 1, 2, &s, &err);
            ctf__alloc.fail_at = 0;
            if (rc != 0) {
                ASSERT_EQ(rc, CTF_ENOMEM);
                ASSERT_EQ(err.code, CTF_ENOMEM);
                ASSERT(atomic_load(&ctf__alloc.live) <= live + 3);
                /* After a failure the same struct still works. */
                ASSERT_OK(ctf__randomize_sweep(ch, 20, 4, true, 1, 2, &s, &err), &err);
            }
            ASSERT(same_sweep(&s, &want));
            ctf__sweep_free(&s);
        }
    }
    ctf__sweep_free(&want);
}

TEST(large_sweep)
{
    /* 200k sequences in 1000 chunks, window 64 chunks and 20k samples: the properties hold and
     * the run is quick (the shuffle is O(slots x retries)). */
    size_t n = 1000;
    ctf__chunk *ch = calloc(n, sizeof *ch);
    ASSERT(ch);
    uint64_t r = 5;
    for (size_t c = 0; c < n; c++) {
        ch[c].num_seqs = rnd_range(&r, 100, 300);
        ch[c].samples = ch[c].num_seqs * 3;
    }
    number_chunks(ch, n);
    ctf__sweep s = {0};
    ctf_error err = {0};
    int rc = ctf__randomize_sweep(ch, n, 64, false, 0, 0, &s, &err);
    const char *why = rc ? "randomize failed" : check_sweep(ch, n, 64, false, &s);
    if (!why) {
        rc = ctf__randomize_sweep(ch, n, 20000, true, 0, 1, &s, &err);
        why = rc ? "randomize failed" : check_sweep(ch, n, 20000, true, &s);
    }
    ctf__sweep_free(&s);
    free(ch);
    ASSERT(why == NULL);
}
