/*
 * randomize.c -- the block randomizer (SPEC 5): the order of the sequences in one sweep.
 *
 * In:  the chunk table of the index (file order; chunk c holds sequences first_seq ..
 *      first_seq+num_seqs-1 and `samples` index samples), a window (in chunks or in index
 *      samples), the seed and the sweep number k.
 * Out: a ctf__sweep: slot -> sequence, slot -> home (the randomized position of the sequence's
 *      chunk, which decides worker ownership), randomized position -> chunk.
 *
 * The algorithm is CNTK's BlockRandomizer, step for step, because its orders are published
 * test vectors and because a training run must be able to move between CNTK and ctfio:
 *   1. two std::mt19937_64 generators seeded with seed + k (one for chunks, one for sequences);
 *   2. chunk shuffle: for i in 0..n-1 swap a[i] with a[next() mod n];
 *   3. each randomized position p gets a window [b, e) of positions (in chunks, or grown and
 *      shrunk by cumulative sample counts in randomized order);
 *   4. sequence shuffle: lay the sequences out in randomized chunk order; for every slot t draw
 *      j uniformly from the slots of t's window and swap when each of the two sequences would
 *      stay inside the window of the position it moves to (rejection sampling, retried with the
 *      same generator).
 * Every draw consumes exactly one 64-bit output and "r mod m" is a plain modulo, so any change
 * to the order of draws or to a comparison changes the result: keep it literal.
 *
 * Invariants of the result: seq is a permutation of all sequences; a sequence at slot t has its
 * home inside window(c(t)) where c(t) is the position owning slot t; slot counts per position
 * are those of the chunk at that position. The result is a pure function of the inputs, so a
 * restore can recompute any sweep. Cost: O(n) for chunks plus O(slots x expected retries); the
 * only allocations are the three output arrays (reused when their sizes do not change) and one
 * O(n) table of per-position windows per call.
 */
#include "ctfio_internal.h"

/*======================================================================
 * std::mt19937_64
 *====================================================================*/

#define MT_N 312
#define MT_M 156
#define MT_MATRIX_A 0xB5026F5AA96619E9ULL
#define MT_UPPER 0xFFFFFFFF80000000ULL /* the most significant 33 bits */
#define MT_LOWER 0x000000007FFFFFFFULL /* the least significant 31 bits */

void ctf__mt64_seed(ctf__mt64 *g, uint64_t seed)
{
    g->mt[0] = seed;
    for (size_t i = 1; i < MT_N; i++) {
        uint64_t p = g->mt[i - 1];
        g->mt[i] = 6364136223846793005ULL * (p ^ (p >> 62)) + (uint64_t)i;
    }
    /* The C++ engine generates its first block lazily, on the first call. */
    g->mti = MT_N;
}

static void mt64_twist(ctf__mt64 *g)
{
    uint64_t *mt = g->mt;
    size_t i;
    for (i = 0; i < MT_N - MT_M; i++) {
        uint64_t y = (mt[i] & MT_UPPER) | (mt[i + 1] & MT_LOWER);
        mt[i] = mt[i + MT_M] ^ (y >> 1) ^ ((y & 1) ? MT_MATRIX_A : 0);
    }
    for (; i < MT_N - 1; i++) {
        uint64_t y = (mt[i] & MT_UPPER) | (mt[i + 1] & MT_LOWER);
        mt[i] = mt[i + MT_M - MT_N] ^ (y >> 1) ^ ((y & 1) ? MT_MATRIX_A : 0);
    }
    uint64_t y = (mt[MT_N - 1] & MT_UPPER) | (mt[0] & MT_LOWER);
    mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ ((y & 1) ? MT_MATRIX_A : 0);
    g->mti = 0;
}

uint64_t ctf__mt64_next(ctf__mt64 *g)
{
    if (g->mti >= MT_N) mt64_twist(g);
    uint64_t y = g->mt[g->mti++];
    y ^= (y >> 29) & 0x5555555555555555ULL;
    y ^= (y << 17) & 0x71D67FFFEDA60000ULL;
    y ^= (y << 37) & 0xFFF7EEE000000000ULL;
    y ^= y >> 43;
    return y;
}

/*======================================================================
 * Output arrays
 *====================================================================*/

/* Resizes *p to n elements of size_t, keeping the old block on failure so that the sweep stays
 * freeable. The ctf__sweep has no capacity fields: the element counts are the capacities. */
static int resize(size_t **p, size_t n)
{
    if (n > SIZE_MAX / sizeof(size_t)) return CTF_ENOMEM;
    size_t *q = CTF_REALLOC(*p, n * sizeof(size_t));
    if (!q) return CTF_ENOMEM;
    *p = q;
    return 0;
}

/* Sizes out for num_slots slots and num_chunks positions. On failure the counts are zeroed, so
 * that the next call resizes every array again whatever this one managed to resize. */
static int sweep_reserve(ctf__sweep *out, size_t num_slots, size_t num_chunks, ctf_error *err)
{
    bool same = out->seq && out->home && out->chunk_at && out->num_slots == num_slots &&
                out->num_chunks == num_chunks;
    if (!same) {
        if (resize(&out->seq, num_slots) || resize(&out->home, num_slots) ||
            resize(&out->chunk_at, num_chunks)) {
            out->num_slots = 0;
            out->num_chunks = 0;
            return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE,
                             "out of memory for the order of a sweep (%zu sequences, %zu chunks)",
                             num_slots, num_chunks);
        }
    }
    out->num_slots = num_slots;
    out->num_chunks = num_chunks;
    return 0;
}

static size_t count_slots(const ctf__chunk *chunks, size_t num_chunks)
{
    size_t n = 0;
    for (size_t c = 0; c < num_chunks; c++) n += chunks[c].num_seqs;
    return n;
}

int ctf__sweep_identity(const ctf__chunk *chunks, size_t num_chunks, uint64_t sweep_no,
                        ctf__sweep *out, ctf_error *err)
{
    int rc = sweep_reserve(out, count_slots(chunks, num_chunks), num_chunks, err);
    if (rc) return rc;
    size_t t = 0;
    for (size_t c = 0; c < num_chunks; c++) {
        out->chunk_at[c] = c;
        for (size_t i = 0; i < chunks[c].num_seqs; i++, t++) {
            out->seq[t] = chunks[c].first_seq + i;
            out->home[t] = c;
        }
    }
    out->sweep = sweep_no;
    return 0;
}

void ctf__sweep_free(ctf__sweep *s)
{
    if (!s) return;
    CTF_FREE(s->seq);
    CTF_FREE(s->home);
    CTF_FREE(s->chunk_at);
    memset(s, 0, sizeof *s);
}

/*======================================================================
 * The randomizer
 *====================================================================*/

/* What the sequence shuffle needs per randomized position; entry n is a sentinel holding the
 * totals, so that position p spans slots [slot0(p), slot0(p+1)). */
typedef struct pos_info {
    size_t b;          /* window begin (a position) */
    size_t e;          /* window end (a position, exclusive) */
    size_t slot0;      /* first slot of this position */
    uint64_t sample0;  /* index samples before this position, in randomized order */
} pos_info;

/* SPEC 5.4, window in chunks. A window at least as wide as everything covers everything;
 * clamping first keeps begin + size from overflowing for huge W without changing a result. */
static void windows_in_chunks(pos_info *pi, size_t n, uint64_t w)
{
    size_t size = w < (uint64_t)n ? (size_t)w : n;
    if (size < 1) size = 1;
    size_t half = size / 2;
    for (size_t p = 0; p < n; p++) {
        size_t b = p > half ? p - half : 0;
        size_t e = b + size;
        if (e > n) {
            e = n;
            b = n > size ? n - size : 0;
        }
        pi[p].b = b;
        pi[p].e = e;
    }
}

/* SPEC 5.4, window in samples: each position starts from its left neighbour's window, so both
 * ends only move right and the whole pass is O(n). The comparisons are strict on both sides,
 * as in CNTK; the subtractions cannot wrap because begin <= p < end. */
static void windows_in_samples(pos_info *pi, size_t n, uint64_t w)
{
    uint64_t half = w / 2;
    size_t b = 0, e = 1;
    for (size_t p = 0; p < n; p++) {
        if (p > 0) {
            b = pi[p - 1].b;
            e = pi[p - 1].e;
        }
        while (pi[p].sample0 - pi[b].sample0 > half) b++;
        if (b > p) b = p;
        if (e < p + 1) e = p + 1;
        while (e < n && pi[e + 1].sample0 - pi[p].sample0 < half) e++;
        pi[p].b = b;
        pi[p].e = e;
    }
}

/* The position owning slot j, known to lie in positions [b, e): binary search over the slot
 * starts of the window only, instead of a per-slot table (which would cost a word per
 * sequence on top of the output). */
static size_t position_of_slot(const pos_info *pi, size_t b, size_t e, size_t j)
{
    while (e - b > 1) {
        size_t mid = b + (e - b) / 2;
        if (pi[mid].slot0 <= j)
            b = mid;
        else
            e = mid;
    }
    return b;
}

int ctf__randomize_sweep(const ctf__chunk *chunks, size_t num_chunks, uint64_t window,
                         bool window_in_samples, uint64_t seed, uint64_t sweep_no,
                         ctf__sweep *out, ctf_error *err)
{
    if (window == 0) return ctf__sweep_identity(chunks, num_chunks, sweep_no, out, err);

    const size_t n = num_chunks;
    int rc = sweep_reserve(out, count_slots(chunks, n), n, err);
    if (rc) return rc;
    out->sweep = sweep_no;
    if (n == 0) return 0;

    pos_info *pi = NULL;
    if (n < SIZE_MAX / sizeof *pi) pi = CTF_MALLOC((n + 1) * sizeof *pi);
    if (!pi) {
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE,
                         "out of memory for the randomization windows (%zu chunks)", n);
    }

    /* Both generators start from the same seed: CNTK seeds its chunk and sequence randomizers
     * separately with the sweep's seed. Wrap-around of seed + k matches C++ unsigned math. */
    const uint64_t s = seed + sweep_no;
    ctf__mt64 rng;
    ctf__mt64_seed(&rng, s);

    size_t *a = out->chunk_at;
    for (size_t i = 0; i < n; i++) a[i] = i;
    for (size_t i = 0; i < n; i++) {
        size_t j = (size_t)(ctf__mt64_next(&rng) % (uint64_t)n);
        size_t tmp = a[i];
        a[i] = a[j];
        a[j] = tmp;
    }

    pi[0].slot0 = 0;
    pi[0].sample0 = 0;
    for (size_t p = 0; p < n; p++) {
        pi[p + 1].slot0 = pi[p].slot0 + chunks[a[p]].num_seqs;
        pi[p + 1].sample0 = pi[p].sample0 + chunks[a[p]].samples;
    }
    if (window_in_samples)
        windows_in_samples(pi, n, window);
    else
        windows_in_chunks(pi, n, window);

    size_t *seq = out->seq, *home = out->home;
    for (size_t p = 0; p < n; p++) {
        const ctf__chunk *ch = &chunks[a[p]];
        for (size_t i = 0; i < ch->num_seqs; i++) {
            seq[pi[p].slot0 + i] = ch->first_seq + i;
            home[pi[p].slot0 + i] = p;
        }
    }

    /* The chunk generator has served its purpose; the sequence generator is a fresh one. */
    ctf__mt64_seed(&rng, s);
    for (size_t p = 0; p < n; p++) {
        const size_t b = pi[p].b, e = pi[p].e;
        const size_t lo = pi[b].slot0, range = pi[e].slot0 - lo;
        for (size_t t = pi[p].slot0; t < pi[p + 1].slot0; t++) {
            size_t j;
            for (;;) {
                j = lo + (size_t)(ctf__mt64_next(&rng) % (uint64_t)range);
                if (home[j] < b || home[j] >= e) continue;
                const pos_info *pj = &pi[position_of_slot(pi, b, e, j)];
                if (home[t] >= pj->b && home[t] < pj->e) break;
            }
            size_t tmp = seq[t];
            seq[t] = seq[j];
            seq[j] = tmp;
            tmp = home[t];
            home[t] = home[j];
            home[j] = tmp;
        }
    }

    CTF_FREE(pi);
    return 0;
}
