/*
 * test_randomize.c -- the block randomizer (lib/reader/randomize.c, rules 5).
 *
 * Three kinds of evidence that the order is CNTK's: the std::mt19937_64 check value, the
 * 5.6 vector, and orders taken from the conformance corpus (shared/conformance, produced by
 * CNTK's rules) with their chunk tables. Around them, property tests over random chunkings and
 * windows: permutations, window containment, sweep/seed relations, identity for window 0,
 * reuse of the output across calls, and allocation failure.
 */
#include "reader/pipeline.h"
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

/* rules 5.4 written out again, position by position, to check the windows the randomizer used
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
            if (sp - sb > half)
                b++;
            else
                break;
        }
        if (b > p) b = p;
        if (e < p + 1) e = p + 1;
        for (;;) {
            if (e >= n) break;
            uint64_t sp = 0, se = 0;
            for (size_t q = 0; q < p; q++) sp += ch[chunk_at[q]].samples;
            for (size_t q = 0; q <= e; q++) se += ch[chunk_at[q]].samples;
            if (se - sp < half)
                e++;
            else
                break;
        }
        win[2 * p] = b;
        win[2 * p + 1] = e;
    }
}

/* Checks one sweep against everything rules 5 promises. Returns a description of the first
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
                snprintf(why, sizeof why, "slot %zu: home %zu is not the position of chunk %zu", t,
                         s->home[t], chunk_of[q]);
                bad = why;
                goto done;
            }
            if (s->home[t] < win[2 * p] || s->home[t] >= win[2 * p + 1]) {
                snprintf(why, sizeof why,
                         "slot %zu (position %zu, window [%zu,%zu)) holds home %zu", t, p,
                         win[2 * p], win[2 * p + 1], s->home[t]);
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
 * rules 5.6 and CNTK-derived vectors
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

/* Conformance corpus orders (shared/conformance/cases): the chunk tables are the rules 4.2
 * chunking of each case file (first_seq, num_seqs, samples = index samples, with definesMBSize
 * where noted); the orders are the keys of the expected minibatches, concatenated and mapped to
 * file-order sequence indices, covering whole sweeps 0 and 1 (case008: the first 18 slots of
 * sweep 0). */
/* case004: case004.ctf, chunkSizeInBytes 400, randomizationWindow 55 (samples), seed 3. */
static const ctf__chunk case004_chunks[] = {
    {0, 6, 0, 0, 8},   {6, 3, 0, 0, 10}, {9, 2, 0, 0, 9},   {11, 2, 0, 0, 9}, {13, 2, 0, 0, 8},
    {15, 4, 0, 0, 12}, {19, 3, 0, 0, 6}, {22, 3, 0, 0, 10}, {25, 3, 0, 0, 8}, {28, 1, 0, 0, 4},
};
static const size_t case004_order[] = {
    23, 14, 24, 28, 15, 22, 13, 3,  0,  17, 2, 27, 1,  18, 4,  12, 5,  26, 16, 11,
    7,  10, 20, 8,  6,  9,  25, 21, 19, 7,  8, 27, 26, 17, 15, 6,  13, 16, 25, 14,
    23, 19, 18, 10, 2,  0,  24, 4,  21, 3,  1, 12, 22, 5,  20, 28, 11, 9,
};
/* case031: case031.ctf, chunkSizeInBytes 40, randomizationWindow 9 (samples), seed 3,
 * definesMBSize c0. */
static const ctf__chunk case031_chunks[] = {
    {0, 1, 0, 0, 4},  {1, 1, 0, 0, 1},  {2, 1, 0, 0, 5},  {3, 1, 0, 0, 3},
    {4, 1, 0, 0, 4},  {5, 1, 0, 0, 4},  {6, 1, 0, 0, 3},  {7, 1, 0, 0, 1},
    {8, 1, 0, 0, 2},  {9, 1, 0, 0, 5},  {10, 1, 0, 0, 4}, {11, 1, 0, 0, 5},
    {12, 1, 0, 0, 4}, {13, 1, 0, 0, 5}, {14, 1, 0, 0, 3}, {15, 1, 0, 0, 4},
};
static const size_t case031_order[] = {
    13, 7, 0,  9, 4, 2,  1, 15, 10, 5, 14, 3, 11, 6,  12, 8,
    9,  6, 11, 4, 5, 14, 2, 0,  7,  8, 12, 3, 1,  13, 10, 15,
};
/* case034: case034.ctf, chunkSizeInBytes 128, randomizationWindow 4 (chunks), seed 1. */
static const ctf__chunk case034_chunks[] = {
    {0, 1, 0, 0, 5},  {1, 1, 0, 0, 1},  {2, 1, 0, 0, 5},  {3, 1, 0, 0, 3},  {4, 1, 0, 0, 3},
    {5, 1, 0, 0, 1},  {6, 1, 0, 0, 3},  {7, 1, 0, 0, 2},  {8, 1, 0, 0, 5},  {9, 1, 0, 0, 3},
    {10, 1, 0, 0, 5}, {11, 1, 0, 0, 3}, {12, 1, 0, 0, 4}, {13, 1, 0, 0, 4}, {14, 1, 0, 0, 4},
    {15, 1, 0, 0, 5}, {16, 1, 0, 0, 4}, {17, 1, 0, 0, 5}, {18, 1, 0, 0, 5}, {19, 1, 0, 0, 5},
};
static const size_t case034_order[] = {
    19, 10, 2, 5,  7, 18, 0, 3,  1, 13, 6, 17, 12, 15, 9,  8,  16, 11, 4,  14,
    12, 17, 5, 11, 1, 14, 6, 10, 7, 9,  3, 4,  8,  18, 16, 19, 15, 0,  13, 2,
};
/* case036: case036.ctf, chunkSizeInBytes 128, randomizationWindow 27 (samples), seed 9. */
static const ctf__chunk case036_chunks[] = {
    {0, 1, 0, 0, 3}, {1, 1, 0, 0, 4}, {2, 2, 0, 0, 3}, {4, 1, 0, 0, 4},  {5, 1, 0, 0, 2},
    {6, 2, 0, 0, 4}, {8, 1, 0, 0, 5}, {9, 1, 0, 0, 3}, {10, 1, 0, 0, 2}, {11, 1, 0, 0, 4},
};
static const size_t case036_order[] = {
    8, 9, 10, 1, 11, 3, 0, 6, 2, 4, 7, 5, 5, 8, 1, 10, 9, 11, 0, 6, 7, 3, 4, 2,
};
/* case008: case008.ctf, chunkSizeInBytes 400, randomizationWindow 2 (chunks), seed 0,
 * definesMBSize feat0. */
static const ctf__chunk case008_chunks[] = {
    {0, 3, 0, 0, 4},  {3, 2, 0, 0, 6},  {5, 2, 0, 0, 10}, {7, 2, 0, 0, 7},
    {9, 1, 0, 0, 4},  {10, 1, 0, 0, 5}, {11, 2, 0, 0, 9}, {13, 2, 0, 0, 8},
    {15, 2, 0, 0, 9}, {17, 2, 0, 0, 6}, {19, 3, 0, 0, 9}, {22, 3, 0, 0, 7},
    {25, 3, 0, 0, 7}, {28, 2, 0, 0, 9}, {30, 3, 0, 0, 9}, {33, 2, 0, 0, 7},
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
    {#c,   c##_chunks, sizeof c##_chunks / sizeof c##_chunks[0], w, smp, \
     seed, c##_order,  sizeof c##_order / sizeof c##_order[0]}

static const conformance_case conformance_cases[] = {
    CASE(case004, 55, true, 3), CASE(case031, 9, true, 3),  CASE(case034, 4, false, 1),
    CASE(case036, 27, true, 9), CASE(case008, 2, false, 0),
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
                         (unsigned long long)w, in_samples ? " samples" : "", (unsigned long long)k,
                         why);
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
            snprintf(m, sizeof m, "trial %d: n %zu slots %zu window %llu: 8 identical sweeps",
                     trial, n, slots, (unsigned long long)w);
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

/*======================================================================
 * The lazy generator (ctf__sweepgen_*, rules 5.8): the full pass's order, window by window
 *====================================================================*/

#include <time.h>

#if defined(__SANITIZE_ADDRESS__)
#define TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_SANITIZED 1
#endif
#endif
#ifndef TEST_SANITIZED
#define TEST_SANITIZED 0
#endif

/* Slots in the widest window of a sweep (Wmax in the bound of lib/reader/randomize.c), from the
 * rules' windows written out in spec_windows. 0 for file order. */
static size_t widest_window_slots(const ctf__chunk *ch, size_t n, uint64_t w, bool in_samples,
                                  const size_t *chunk_at)
{
    if (w == 0 || n == 0) return 0;
    size_t *win = malloc(2 * n * sizeof *win), *slot0 = malloc((n + 1) * sizeof *slot0);
    size_t widest = 0;
    if (win && slot0) {
        spec_windows(ch, n, chunk_at, w, in_samples, win);
        slot0[0] = 0;
        for (size_t p = 0; p < n; p++) slot0[p + 1] = slot0[p] + ch[chunk_at[p]].num_seqs;
        for (size_t p = 0; p < n; p++)
            if (slot0[win[2 * p + 1]] - slot0[win[2 * p]] > widest)
                widest = slot0[win[2 * p + 1]] - slot0[win[2 * p]];
    }
    free(win);
    free(slot0);
    return widest;
}

/* How a test consumer walks a sweep. */
typedef enum gen_mode {
    GEN_SEQUENTIAL, /* ask 0, 1, 2, ... releasing each slot after asking it */
    GEN_LOOKAHEAD,  /* ask the release point and random slots up to `ahead` past it */
    GEN_NO_RELEASE, /* ask every slot once, in a random order, never releasing */
} gen_mode;

static const char *mode_name(gen_mode m)
{
    return m == GEN_SEQUENTIAL ? "sequential" : m == GEN_LOOKAHEAD ? "look-ahead" : "no release";
}

/* Walks sweep k with the generator in the given mode and compares every slot asked, chunk_at
 * and pos_of with the full pass (ctf__randomize_sweep, or ctf__sweep_identity when not
 * randomized). ahead: the look-ahead in slots for GEN_LOOKAHEAD (0: two widest windows). Also
 * checks the memory bound: peak_slots <= Wmax + (largest look-ahead used), 0 in file order.
 * Returns NULL or a description of the first difference. */
static const char *gen_vs_full(const ctf__chunk *ch, size_t n, uint64_t w, bool in_samples,
                               uint64_t seed, uint64_t k, bool randomized, gen_mode mode,
                               size_t ahead, uint64_t *r, size_t *peak_out)
{
    static char why[300];
    ctf__sweep full = {0};
    ctf__sweep_gen *g = NULL;
    ctf_error err = {0};
    size_t *order = NULL;
    const char *bad = NULL;
    int rc = randomized ? ctf__randomize_sweep(ch, n, w, in_samples, seed, k, &full, &err)
                        : ctf__sweep_identity(ch, n, k, &full, &err);
    if (rc) {
        bad = "the full pass failed";
        goto done;
    }
    if (ctf__sweepgen_create(ch, n, w, in_samples, seed, k, randomized, &g, &err)) {
        bad = "ctf__sweepgen_create failed";
        goto done;
    }
    const size_t T = full.num_slots;
    if (ctf__sweepgen_num_slots(g) != T || ctf__sweepgen_sweep(g) != k) {
        bad = "num_slots or sweep differs";
        goto done;
    }
    const size_t *chunk_at = ctf__sweepgen_chunk_at(g), *pos_of = ctf__sweepgen_pos_of(g);
    for (size_t p = 0; p < n; p++) {
        if (chunk_at[p] != full.chunk_at[p] || pos_of[full.chunk_at[p]] != p) {
            snprintf(why, sizeof why, "position %zu: chunk_at %zu pos_of %zu, full pass chunk %zu",
                     p, chunk_at[p], pos_of[full.chunk_at[p]], full.chunk_at[p]);
            bad = why;
            goto done;
        }
    }
    const bool lazy = randomized && w != 0;
    const size_t wmax = lazy ? widest_window_slots(ch, n, w, in_samples, full.chunk_at) : 0;
    if (mode == GEN_LOOKAHEAD && ahead == 0) ahead = 2 * wmax > 0 ? 2 * wmax : 1;
    size_t max_ahead = 0; /* largest (slot asked - release point) */
    size_t release = 0;
    size_t asks = 0;
    order = malloc((T + 1) * sizeof *order);
    if (!order) {
        bad = "test out of memory";
        goto done;
    }
    if (mode == GEN_NO_RELEASE) {
        for (size_t t = 0; t < T; t++) order[t] = t;
        for (size_t t = T; t > 1; t--) {
            size_t j = (size_t)(rnd_next(r) % t), tmp = order[t - 1];
            order[t - 1] = order[j];
            order[j] = tmp;
        }
    }
    for (size_t step = 0; mode == GEN_NO_RELEASE ? step < T : release < T; step++) {
        size_t want[5], nwant = 0;
        if (mode == GEN_NO_RELEASE) {
            want[nwant++] = order[step];
        } else {
            want[nwant++] = release;
            if (mode == GEN_LOOKAHEAD) {
                size_t extra = rnd_range(r, 0, 4);
                for (size_t i = 0; i < extra; i++) {
                    size_t s = release + (size_t)(rnd_next(r) % ahead);
                    if (s < T) want[nwant++] = s;
                }
            }
        }
        for (size_t i = 0; i < nwant; i++) {
            size_t s = want[i], q = SIZE_MAX, h = SIZE_MAX;
            if (ctf__sweepgen_get(g, s, &q, &h, &err)) {
                snprintf(why, sizeof why, "%s: get(%zu) failed: %.200s", mode_name(mode), s,
                         err.message);
                bad = why;
                goto done;
            }
            asks++;
            if (s - release > max_ahead) max_ahead = s - release;
            if (q != full.seq[s] || h != full.home[s]) {
                snprintf(why, sizeof why,
                         "%s: slot %zu: seq %zu home %zu, full pass seq %zu home %zu",
                         mode_name(mode), s, q, h, full.seq[s], full.home[s]);
                bad = why;
                goto done;
            }
        }
        if (mode == GEN_SEQUENTIAL) {
            ctf__sweepgen_release(g, ++release);
        } else if (mode == GEN_LOOKAHEAD) {
            /* Mostly one slot on; now and then a jump over slots never asked. */
            release += rnd_range(r, 0, 3) ? 1 : rnd_range(r, 1, ahead);
            if (rnd_range(r, 0, 9) == 0)
                ctf__sweepgen_release(g, release - 1); /* backwards: ignored */
            ctf__sweepgen_release(g, release);
            if (release > T) release = T;
        }
    }
    if (mode != GEN_LOOKAHEAD && asks != T) {
        bad = "not every slot was asked";
        goto done;
    }
    size_t peak = ctf__sweepgen_peak_slots(g);
    if (peak_out) *peak_out = peak;
    size_t bound = lazy ? (mode == GEN_NO_RELEASE ? T : wmax + max_ahead) : 0;
    if (peak > bound) {
        snprintf(why, sizeof why, "%s: peak_slots %zu > bound %zu (Wmax %zu, look-ahead %zu)",
                 mode_name(mode), peak, bound, wmax, max_ahead);
        bad = why;
        goto done;
    }
    /* Once released, a slot is gone: asking it is a clean error. */
    if (mode != GEN_NO_RELEASE && T > 0 &&
        ctf__sweepgen_get(g, T - 1, NULL, NULL, &err) != CTF_EINVAL)
        bad = "asking a released slot did not fail with CTF_EINVAL";
done:
    ctf__sweepgen_free(g);
    ctf__sweep_free(&full);
    free(order);
    return bad;
}

#define ASSERT_GEN_SAME(call, ctx_fmt, ...) \
    do { \
        const char *why_ = (call); \
        if (why_) { \
            char m_[600]; \
            int o_ = snprintf(m_, sizeof m_, ctx_fmt, __VA_ARGS__); \
            snprintf(m_ + o_, sizeof m_ - (size_t)o_, ": %s", why_); \
            test_fail(__FILE__, __LINE__, #call, m_); \
            return; \
        } \
    } while (0)

TEST(sweepgen_random_chunkings_equal_full_pass)
{
    /* The chunkings, windows and seeds of random_chunkings_properties, every consumer mode,
     * randomized and file order. */
    uint64_t r = 42, walk = 1;
    ctf__chunk ch[50];
    for (int trial = 0; trial < 400; trial++) {
        size_t n = random_chunks(&r, ch);
        bool in_samples = rnd_range(&r, 0, 1);
        uint64_t w = random_window(&r, ch, n, in_samples);
        uint64_t seed = rnd_next(&r) % 1000;
        if (trial % 7 == 0) seed = UINT64_MAX - 2;
        for (uint64_t k = 0; k < 4; k++) {
            for (int mode = GEN_SEQUENTIAL; mode <= GEN_NO_RELEASE; mode++) {
                ASSERT_GEN_SAME(gen_vs_full(ch, n, w, in_samples, seed, k, true, (gen_mode)mode, 0,
                                            &walk, NULL),
                                "trial %d n %zu window %llu%s seed %llu sweep %llu", trial, n,
                                (unsigned long long)w, in_samples ? " samples" : "",
                                (unsigned long long)seed, (unsigned long long)k);
            }
            ASSERT_GEN_SAME(gen_vs_full(ch, n, w, in_samples, seed, k, false, (gen_mode)(trial % 3),
                                        0, &walk, NULL),
                            "file order: trial %d n %zu sweep %llu", trial, n,
                            (unsigned long long)k);
        }
        /* Look-ahead from one slot to far beyond a window. */
        size_t ahead = rnd_range(&r, 1, 200);
        ASSERT_GEN_SAME(gen_vs_full(ch, n, w, in_samples, seed, 1, true, GEN_LOOKAHEAD, ahead,
                                    &walk, NULL),
                        "trial %d look-ahead %zu", trial, ahead);
    }
}

TEST(sweepgen_conformance_orders)
{
    /* The CNTK-derived orders and the rules 5.6 vector, straight from the generator. */
    ctf_error err = {0};
    for (size_t i = 0; i < sizeof conformance_cases / sizeof conformance_cases[0]; i++) {
        const conformance_case *cc = &conformance_cases[i];
        size_t got = 0;
        for (uint64_t k = 0; got < cc->order_len; k++) {
            ctf__sweep_gen *g;
            ASSERT_OK(ctf__sweepgen_create(cc->chunks, cc->num_chunks, cc->window, cc->in_samples,
                                           cc->seed, k, true, &g, &err),
                      &err);
            size_t T = ctf__sweepgen_num_slots(g);
            for (size_t t = 0; t < T && got < cc->order_len; t++, got++) {
                size_t q;
                int rc = ctf__sweepgen_get(g, t, &q, NULL, &err);
                ctf__sweepgen_release(g, t + 1);
                if (rc || q != cc->order[got]) {
                    char m[160];
                    snprintf(m, sizeof m, "%s sweep %llu slot %zu: rc %d got %zu, expected %zu",
                             cc->name, (unsigned long long)k, t, rc, q, cc->order[got]);
                    test_fail(__FILE__, __LINE__, "conformance order", m);
                    ctf__sweepgen_free(g);
                    return;
                }
            }
            ctf__sweepgen_free(g);
            uint64_t walk = k + 1;
            for (int mode = GEN_SEQUENTIAL; mode <= GEN_NO_RELEASE; mode++)
                ASSERT_GEN_SAME(gen_vs_full(cc->chunks, cc->num_chunks, cc->window, cc->in_samples,
                                            cc->seed, k, true, (gen_mode)mode, 0, &walk, NULL),
                                "%s sweep %llu", cc->name, (unsigned long long)k);
        }
    }

    ctf__chunk ch[5];
    for (size_t c = 0; c < 5; c++) ch[c] = (ctf__chunk){.num_seqs = 2, .samples = 2};
    number_chunks(ch, 5);
    const size_t expect[10] = {6, 3, 1, 5, 9, 0, 4, 2, 7, 8};
    ctf__sweep_gen *g;
    ASSERT_OK(ctf__sweepgen_create(ch, 5, 5, false, 0, 0, true, &g, &err), &err);
    for (size_t t = 0; t < 10; t++) {
        size_t q = 0;
        ASSERT_OK(ctf__sweepgen_get(g, t, &q, NULL, &err), &err);
        ASSERT_EQ(q, expect[t]);
    }
    ctf__sweepgen_free(g);
}

TEST(sweepgen_file_order)
{
    /* randomized false or window 0: file order, home = chunk id, identity tables, nothing held;
     * sequence numbers come from first_seq (a table not starting at 0). */
    ctf__chunk ch[3] = {{.first_seq = 100, .num_seqs = 3, .samples = 3},
                        {.first_seq = 103, .num_seqs = 1, .samples = 1},
                        {.first_seq = 104, .num_seqs = 2, .samples = 2}};
    const size_t home[6] = {0, 0, 0, 1, 2, 2};
    ctf_error err = {0};
    for (int v = 0; v < 2; v++) {
        ctf__sweep_gen *g;
        ASSERT_OK(ctf__sweepgen_create(ch, 3, v ? 0 : 5, false, 7, 4, v == 1, &g, &err), &err);
        ASSERT_EQ(ctf__sweepgen_num_slots(g), 6);
        ASSERT_U64_EQ(ctf__sweepgen_sweep(g), 4);
        for (size_t p = 0; p < 3; p++) {
            ASSERT_EQ(ctf__sweepgen_chunk_at(g)[p], p);
            ASSERT_EQ(ctf__sweepgen_pos_of(g)[p], p);
        }
        /* Backwards, then jumping, then forwards: the cursor follows. */
        const size_t asks[] = {5, 0, 4, 1, 3, 2, 0, 1, 2, 3, 4, 5};
        for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
            size_t q, h;
            ASSERT_OK(ctf__sweepgen_get(g, asks[i], &q, &h, &err), &err);
            ASSERT_EQ(q, 100 + asks[i]);
            ASSERT_EQ(h, home[asks[i]]);
        }
        ASSERT_EQ(ctf__sweepgen_peak_slots(g), 0);
        ctf__sweepgen_free(g);
    }
    /* Empty tables. */
    for (int v = 0; v < 2; v++) {
        ctf__sweep_gen *g;
        ASSERT_OK(ctf__sweepgen_create(NULL, 0, 10, v, 0, 0, v, &g, &err), &err);
        ASSERT_EQ(ctf__sweepgen_num_slots(g), 0);
        ASSERT_EQ(ctf__sweepgen_get(g, 0, NULL, NULL, &err), CTF_EINVAL);
        ctf__sweepgen_release(g, 5);
        ctf__sweepgen_free(g);
    }
    ctf__sweepgen_free(NULL);
}

TEST(sweepgen_peak_slots_bound)
{
    /* 2000 chunks of 10 sequences, window 16 chunks: Wmax = 160 slots. The proven bound is
     * peak <= Wmax + L (L = largest slot asked minus release point): 160 for a sequential
     * consumer, 160 + 319 = 479 for a look-ahead of two windows (320 slots), both within the
     * brief's (3 x 16 + 2) x 10 = 500. Without releases everything stays (the whole sweep). */
    size_t n = 2000;
    ctf__chunk *ch = calloc(n, sizeof *ch);
    ASSERT(ch);
    for (size_t c = 0; c < n; c++) ch[c] = (ctf__chunk){.num_seqs = 10, .samples = 30};
    number_chunks(ch, n);
    uint64_t walk = 3;
    size_t peak_seq = 0, peak_ahead = 0, peak_all = 0, peak_smp = 0;
    const char *why = gen_vs_full(ch, n, 16, false, 11, 0, true, GEN_SEQUENTIAL, 0, &walk,
                                  &peak_seq);
    if (!why)
        why = gen_vs_full(ch, n, 16, false, 11, 0, true, GEN_LOOKAHEAD, 320, &walk, &peak_ahead);
    if (!why) why = gen_vs_full(ch, n, 16, false, 11, 1, true, GEN_NO_RELEASE, 0, &walk, &peak_all);
    /* The same table with a window of 480 samples = 16 chunks of 30 (the window in samples
     * reaches half a window each way from a chunk's start: up to 17 chunks). */
    if (!why) why = gen_vs_full(ch, n, 480, true, 11, 2, true, GEN_SEQUENTIAL, 0, &walk, &peak_smp);
    free(ch);
    ASSERT(why == NULL);
    ASSERT(peak_seq <= 160);
    ASSERT(peak_seq >= 150); /* a whole window is held: the bound is tight */
    ASSERT(peak_ahead <= 479);
    ASSERT(peak_ahead <= (3 * 16 + 2) * 10);
    ASSERT_EQ(peak_all, 20000);
    ASSERT(peak_smp <= 170);
}

TEST(sweepgen_released_slot_is_einval)
{
    ctf__chunk ch[40];
    for (size_t c = 0; c < 40; c++) ch[c] = (ctf__chunk){.num_seqs = 1 + c % 4, .samples = 5};
    number_chunks(ch, 40);
    ctf__sweep full = {0};
    ctf_error err = {0};
    ASSERT_OK(ctf__randomize_sweep(ch, 40, 6, false, 8, 0, &full, &err), &err);
    for (int randomized = 0; randomized < 2; randomized++) {
        ctf__sweep_gen *g;
        ASSERT_OK(ctf__sweepgen_create(ch, 40, 6, false, 8, 0, randomized, &g, &err), &err);
        size_t T = ctf__sweepgen_num_slots(g), q, h;
        ASSERT_OK(ctf__sweepgen_get(g, 5, &q, &h, &err), &err);
        ctf__sweepgen_release(g, 10);
        ctf_error e2 = {0};
        ASSERT_EQ(ctf__sweepgen_get(g, 9, &q, &h, &e2), CTF_EINVAL);
        ASSERT_EQ(e2.code, CTF_EINVAL);
        ASSERT_STR_CONTAINS(e2.message, "release");
        ASSERT_EQ(ctf__sweepgen_get(g, T, &q, &h, &e2), CTF_EINVAL);
        ASSERT_EQ(ctf__sweepgen_get(g, SIZE_MAX, &q, &h, &e2), CTF_EINVAL);
        ctf__sweepgen_release(g, 3); /* backwards: ignored */
        ASSERT_EQ(ctf__sweepgen_get(g, 9, &q, &h, &e2), CTF_EINVAL);
        /* The generator is unharmed: the rest of the sweep is right. */
        for (size_t t = 10; t < T; t++) {
            ASSERT_OK(ctf__sweepgen_get(g, t, &q, &h, &err), &err);
            if (randomized) {
                ASSERT_EQ(q, full.seq[t]);
                ASSERT_EQ(h, full.home[t]);
            } else {
                ASSERT_EQ(q, t);
            }
        }
        ctf__sweepgen_release(g, SIZE_MAX); /* past the end counts as the end */
        ASSERT_EQ(ctf__sweepgen_get(g, T - 1, &q, &h, &e2), CTF_EINVAL);
        ctf__sweepgen_free(g);
    }
    ctf__sweep_free(&full);
}

/* Streams sweep k through a generator, releasing as it goes, retrying a get that fails with
 * CTF_ENOMEM once (a non-sticky injected failure). Compares with full. */
static int stream_with_retries(ctf__sweep_gen *g, const ctf__sweep *full, int *failures)
{
    ctf_error err = {0};
    for (size_t t = 0; t < full->num_slots; t++) {
        size_t q, h;
        int rc = ctf__sweepgen_get(g, t, &q, &h, &err);
        if (rc) {
            if (rc != CTF_ENOMEM || err.code != CTF_ENOMEM) return -1;
            ++*failures;
            rc = ctf__sweepgen_get(g, t, &q, &h, &err);
            if (rc) return -2;
        }
        if (q != full->seq[t] || h != full->home[t]) return -3;
        if (t % 3 == 2) ctf__sweepgen_release(g, t - 1); /* lag behind a little */
    }
    return 0;
}

TEST(sweepgen_allocation_failure_is_enomem_and_freeable)
{
    /* Uneven chunks and a window in samples, so that the ring grows several times. */
    ctf__chunk ch[60];
    for (size_t c = 0; c < 60; c++)
        ch[c] = (ctf__chunk){.num_seqs = 1 + (c * 7) % 13, .samples = 1 + (c * 5) % 40};
    number_chunks(ch, 60);
    ctf__sweep full = {0};
    ctf_error err = {0};
    ASSERT_OK(ctf__randomize_sweep(ch, 60, 150, true, 4, 1, &full, &err), &err);
    long k;
    for (int sticky = 0; sticky < 2; sticky++) {
        bool clean_run = false;
        for (k = 1; k <= 200 && !clean_run; k++) {
            long live = atomic_load(&ctf__alloc.live);
            ctf__alloc.fail_sticky = sticky;
            ctf__alloc.fail_at = atomic_load(&ctf__alloc.count) + k;
            ctf__sweep_gen *g = NULL;
            int failures = 0, rc = ctf__sweepgen_create(ch, 60, 150, true, 4, 1, true, &g, &err);
            if (rc) {
                ctf__alloc.fail_at = 0;
                ASSERT_EQ(rc, CTF_ENOMEM);
                ASSERT_EQ(err.code, CTF_ENOMEM);
                ASSERT(g == NULL);
                ASSERT_EQ(atomic_load(&ctf__alloc.live), live);
                continue;
            }
            if (sticky) {
                /* Every allocation from here on fails: gets fail cleanly, then free. */
                size_t q;
                for (size_t t = 0; t < full.num_slots; t++) {
                    rc = ctf__sweepgen_get(g, t, &q, NULL, &err);
                    if (rc) break;
                }
                ctf__alloc.fail_at = 0;
                ctf__alloc.fail_sticky = false;
                clean_run = rc == 0;
                if (rc) ASSERT_EQ(rc, CTF_ENOMEM);
            } else {
                rc = stream_with_retries(g, &full, &failures);
                ctf__alloc.fail_at = 0;
                ASSERT_EQ(rc, 0);
                clean_run = failures == 0;
            }
            ctf__sweepgen_free(g);
            ASSERT_EQ(atomic_load(&ctf__alloc.live), live);
        }
        ASSERT(clean_run); /* k went past the last allocation */
        ASSERT(k > 8);     /* 7 in create, at least one ring */
    }
    ctf__alloc.fail_sticky = false;
    ctf__sweep_free(&full);
}

/* CPU time of this thread: the comparison below holds on a loaded machine too. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

TEST(sweepgen_streams_10M_sequences_as_fast_as_the_full_pass)
{
    /* 10M sequences (1M under the sanitizers) in 100k chunks, window 64 chunks: the streamed
     * order equals the full pass (positional checksum) and takes about the same CPU time. Set
     * CTFIO_TEST_TIMING=1 to print the times. */
    const size_t n = TEST_SANITIZED ? 10000 : 100000, per = 100;
    ctf__chunk *ch = calloc(n, sizeof *ch);
    ASSERT(ch);
    for (size_t c = 0; c < n; c++) ch[c] = (ctf__chunk){.num_seqs = per, .samples = 3 * per};
    number_chunks(ch, n);
    ctf__sweep full = {0};
    ctf_error err = {0};
    double t0 = now_s();
    int rc = ctf__randomize_sweep(ch, n, 64, false, 1, 0, &full, &err);
    double t_full = now_s() - t0;
    uint64_t want = 0, got = 0;
    for (size_t t = 0; !rc && t < full.num_slots; t++)
        want += (full.seq[t] * 0x9E3779B97F4A7C15ULL + full.home[t]) * (t + 1);
    ctf__sweep_free(&full);

    ctf__sweep_gen *g = NULL;
    t0 = now_s();
    int rc2 = ctf__sweepgen_create(ch, n, 64, false, 1, 0, true, &g, &err);
    for (size_t t = 0; !rc2 && t < n * per; t++) {
        size_t q, h;
        rc2 = ctf__sweepgen_get(g, t, &q, &h, &err);
        ctf__sweepgen_release(g, t + 1);
        got += (q * 0x9E3779B97F4A7C15ULL + h) * (t + 1);
    }
    double t_lazy = now_s() - t0;
    size_t peak = g ? ctf__sweepgen_peak_slots(g) : 0;
    ctf__sweepgen_free(g);
    free(ch);
    if (getenv("CTFIO_TEST_TIMING"))
        fprintf(stderr, "sweepgen %zu sequences: full pass %.3f s, lazy %.3f s, peak %zu slots\n",
                n * per, t_full, t_lazy, peak);
    ASSERT_OK(rc, &err);
    ASSERT_OK(rc2, &err);
    ASSERT_U64_EQ(got, want);
    ASSERT(peak <= 64 * per);
    if (!TEST_SANITIZED) ASSERT(t_lazy <= 2.0 * t_full + 0.2);
}
