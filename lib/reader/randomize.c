/*
 * randomize.c -- the block randomizer (rules 5): the order of the sequences in one sweep.
 *
 * In:  the chunk table of the index (file order; chunk c holds sequences first_seq ..
 *      first_seq+num_seqs-1 and `samples` index samples), a window (in chunks or in index
 *      samples), the randomization seed and the sweep number k.
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
 *
 * The full pass above is the reference. The reader uses the lazy generator at the end of this
 * file (ctf__sweepgen_*): the same order, produced window by window in O(chunks + window)
 * memory instead of two words per sequence.
 */
#include "reader/pipeline.h"

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

/* MATRIX_A when the low bit of y is set, else 0: a mask, not a branch (the bit is a coin flip,
 * and a mispredicted branch per word made the twist a third of the shuffle's time). */
#define MT_MAG(y) ((0 - ((y) & 1)) & MT_MATRIX_A)

static void mt64_twist(ctf__mt64 *g)
{
    uint64_t *mt = g->mt;
    size_t i;
    for (i = 0; i < MT_N - MT_M; i++) {
        uint64_t y = (mt[i] & MT_UPPER) | (mt[i + 1] & MT_LOWER);
        mt[i] = mt[i + MT_M] ^ (y >> 1) ^ MT_MAG(y);
    }
    for (; i < MT_N - 1; i++) {
        uint64_t y = (mt[i] & MT_UPPER) | (mt[i + 1] & MT_LOWER);
        mt[i] = mt[i + MT_M - MT_N] ^ (y >> 1) ^ MT_MAG(y);
    }
    uint64_t y = (mt[MT_N - 1] & MT_UPPER) | (mt[0] & MT_LOWER);
    mt[MT_N - 1] = mt[MT_M - 1] ^ (y >> 1) ^ MT_MAG(y);
    g->mti = 0;
}

static inline uint64_t mt64_temper(uint64_t y)
{
    y ^= (y >> 29) & 0x5555555555555555ULL;
    y ^= (y << 17) & 0x71D67FFFEDA60000ULL;
    y ^= (y << 37) & 0xFFF7EEE000000000ULL;
    y ^= y >> 43;
    return y;
}

/* Inlined into the shuffle loops, which draw once per step. */
static inline uint64_t mt64_next(ctf__mt64 *g)
{
    if (g->mti >= MT_N) mt64_twist(g);
    return mt64_temper(g->mt[g->mti++]);
}

uint64_t ctf__mt64_next(ctf__mt64 *g) { return mt64_next(g); }

/* The output d draws ahead (0: the next one) without drawing, when it lies in the current
 * block: the lazy generator uses it to prefetch the slot a later step will touch.
 * @return : false when it would need the next block (the twist cannot run before the block is
 *           used up). */
static inline bool mt64_peek(const ctf__mt64 *g, size_t d, uint64_t *out)
{
    if (g->mti + d >= MT_N) return false;
    *out = mt64_temper(g->mt[g->mti + d]);
    return true;
}

/*======================================================================
 * Output arrays
 *====================================================================*/

#ifdef CTF_TESTING
/* The whole-sweep form (ctf__randomize_sweep and what it needs) is the reference the tests
 * hold the lazy generator to; the release build has only the generator. */

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

#endif /* CTF_TESTING */

static size_t count_slots(const ctf__chunk *chunks, size_t num_chunks)
{
    size_t n = 0;
    for (size_t c = 0; c < num_chunks; c++) n += chunks[c].num_seqs;
    return n;
}

#ifdef CTF_TESTING
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
#endif /* CTF_TESTING */

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

/* rules 5.4, window in chunks. A window at least as wide as everything covers everything;
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

/* rules 5.4, window in samples: each position starts from its left neighbour's window, so both
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

/* The part of a sweep that is O(chunks): seeds rng with s (= seed + sweep_no; both generators
 * start from it, as CNTK seeds its chunk and sequence randomizers separately with the sweep's
 * seed; wrap-around matches C++ unsigned math), shuffles the chunks into a (n entries), fills
 * slot0/sample0 of pi (n + 1 entries) and the windows, and leaves rng freshly reseeded with s:
 * the chunk generator has served its purpose and the sequence generator is a fresh one. */
static void plan_sweep(const ctf__chunk *chunks, size_t n, uint64_t window, bool window_in_samples,
                       uint64_t s, size_t *a, pos_info *pi, ctf__mt64 *rng)
{
    ctf__mt64_seed(rng, s);
    for (size_t i = 0; i < n; i++) a[i] = i;
    for (size_t i = 0; i < n; i++) {
        size_t j = (size_t)(ctf__mt64_next(rng) % (uint64_t)n);
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
    ctf__mt64_seed(rng, s);
}

#ifdef CTF_TESTING
int ctf__randomize_sweep(const ctf__chunk *chunks, size_t num_chunks, uint64_t window,
                         bool window_in_samples, uint64_t seed, uint64_t sweep_no, ctf__sweep *out,
                         ctf_error *err)
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

    /* Chunk shuffle and windows; rng comes back as the fresh sequence generator. */
    ctf__mt64 rng;
    size_t *a = out->chunk_at;
    plan_sweep(chunks, n, window, window_in_samples, seed + sweep_no, a, pi, &rng);

    size_t *seq = out->seq, *home = out->home;
    for (size_t p = 0; p < n; p++) {
        const ctf__chunk *ch = &chunks[a[p]];
        for (size_t i = 0; i < ch->num_seqs; i++) {
            seq[pi[p].slot0 + i] = ch->first_seq + i;
            home[pi[p].slot0 + i] = p;
        }
    }

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
#endif /* CTF_TESTING */

/*======================================================================
 * The lazy generator (rules 5.8): the same order, window by window
 *
 * Why it works. Both window ends b(p), e(p) are non-decreasing in p (in chunks: clamped
 * p - half; in samples: each window starts from its left neighbour's and only moves right), so
 * lo(p) = slot0(b(p)) and hi(p) = slot0(e(p)) are non-decreasing too. Step t of the sequence
 * shuffle (position p = c(t)) reads and writes only slots in [lo(p), hi(p)): t itself (p lies
 * in its own window) and the draws j. Hence once the steps of positions 0..q-1 have run, every
 * slot below lo(q) is final, and running the steps of the next position only needs the slots
 * [lo, hi) of its window, laid out as in the full pass (sequence = first_seq of the chunk at
 * its position + offset, home = position) when they first come into range. The draws happen
 * in the full pass's order from the same generator, so every slot gets the same sequence.
 *
 * To hand out slot s, the generator runs the positions q in order while lo(q) <= s (then slot
 * s is final: the first unrun position has lo > s, and s < hi of the last run one because
 * q(s) itself has run). It holds the slots [live_lo, mat_end) in a power-of-two ring indexed by
 * slot & mask, where mat_end = hi of the last position run and live_lo = min(release point,
 * lo(next position)): below both, nobody reads a slot again.
 *
 * Memory bound. Let Wmax = max_p (hi(p) - lo(p)), the slots of the widest window, and let a
 * consumer whose release point is r ask slot s >= r. Running position q (lo(q) <= s) holds
 * hi(q) - min(r, lo(q)) slots: hi(q) - lo(q) <= Wmax when r >= lo(q), else
 * (hi(q) - lo(q)) + (lo(q) - r) <= Wmax + (s - r). Releases only shrink the held range. So
 * peak_slots <= Wmax + L, L = the largest look-ahead s - r over the gets (0 for a consumer that
 * releases each slot before asking the next), and the ring's capacity is below 2 x peak_slots.
 * The rest is O(chunks): positions (window, slot start, first sequence), chunk_at, pos_of, and
 * per position the range of positions whose window holds it (cover_lo/cover_hi).
 *====================================================================*/

typedef struct gen_slot {
    size_t seq;   /* sequence index (file-order numbering) */
    size_t home;  /* randomized position of its chunk */
} gen_slot;

struct ctf__sweep_gen {
    uint64_t sweep;
    size_t n;               /* positions = chunks */
    size_t num_slots;
    bool identity;          /* file order: every get is computed directly */
    pos_info *pi;           /* n + 1 entries: windows and slot starts per position */
    size_t *chunk_at;       /* position -> chunk id */
    size_t *pos_of;         /* chunk id -> position */
    size_t *first_at;       /* position -> first sequence of the chunk there */
    size_t *cover_lo;       /* randomized: the positions whose window holds position h are */
    size_t *cover_hi;       /* [cover_lo[h], cover_hi[h]) (contiguous: window ends only grow) */
    ctf__mt64 rng;          /* the sequence generator, after the positions run so far */
    size_t next_p;          /* first position whose shuffle steps have not run */
    size_t release;         /* slots below it will not be asked again */
    size_t live_lo;         /* slots [live_lo, mat_end) are held in the ring */
    size_t mat_end;         /* slots below it have been laid out */
    size_t mat_pos;         /* the position owning slot mat_end (layout cursor) */
    gen_slot *ring;         /* slot s at ring[s & (cap - 1)] */
    size_t cap;             /* 0 or a power of two */
    size_t peak;            /* largest mat_end - live_lo so far */
    size_t cursor;          /* identity: the position of the last slot asked */
};

/* The first slot the next unrun position can touch; num_slots once all have run. */
static size_t gen_lo_next(const ctf__sweep_gen *g)
{
    return g->next_p < g->n ? g->pi[g->pi[g->next_p].b].slot0 : g->num_slots;
}

/* live_lo = min(release, lo(next position)); both only grow, and lo(next) <= mat_end (the next
 * step t has lo <= t <= hi of the step before it), so live_lo never passes mat_end. */
static void gen_update_live(ctf__sweep_gen *g)
{
    size_t lo = gen_lo_next(g);
    size_t keep = g->release < lo ? g->release : lo;
    CTF_ASSERT(keep >= g->live_lo && keep <= g->mat_end);
    g->live_lo = keep;
}

/* Grows the ring to hold at least need slots, keeping the held ones. On failure nothing
 * changes, so the generator stays usable and freeable. */
static int gen_reserve(ctf__sweep_gen *g, size_t need, ctf_error *err)
{
    if (need <= g->cap) return 0;
    size_t cap = g->cap ? g->cap : 16;
    while (cap < need && cap <= SIZE_MAX / 2) cap *= 2;
    gen_slot *ring = NULL;
    if (cap >= need && cap <= SIZE_MAX / sizeof *ring) ring = CTF_MALLOC(cap * sizeof *ring);
    if (!ring) {
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE,
                         "out of memory for the randomization window (%zu sequences)", need);
    }
    const size_t old_mask = g->cap - 1, mask = cap - 1;
    for (size_t s = g->live_lo; s < g->mat_end; s++) ring[s & mask] = g->ring[s & old_mask];
    CTF_FREE(g->ring);
    g->ring = ring;
    g->cap = cap;
    return 0;
}

/* Lays out slots [mat_end, hi) as in the full pass: the sequences of the chunk at each
 * position, in file order, at home = the position. The ring has room for them. */
static void gen_layout(ctf__sweep_gen *g, size_t hi)
{
    const pos_info *pi = g->pi;
    const size_t mask = g->cap - 1;
    size_t s = g->mat_end, p = g->mat_pos;
    while (s < hi) {
        while (pi[p + 1].slot0 <= s) p++; /* stops below n: s < hi <= slot0(n) */
        const size_t end = hi < pi[p + 1].slot0 ? hi : pi[p + 1].slot0;
        const size_t first = g->first_at[p], s0 = pi[p].slot0;
        for (; s < end; s++) g->ring[s & mask] = (gen_slot){first + (s - s0), p};
    }
    g->mat_end = s;
    g->mat_pos = p;
}

/* How many draws ahead the shuffle prefetches a slot (about a memory latency's worth of steps). */
#define GEN_PREFETCH_AHEAD 16

#if defined(__GNUC__)
#define GEN_PREFETCH(p) __builtin_prefetch((p), 1)
#else
#define GEN_PREFETCH(p) ((void)(p))
#endif

/* Runs the shuffle steps of position next_p: the full pass's inner loop on the ring. */
static int gen_run_position(ctf__sweep_gen *g, ctf_error *err)
{
    const pos_info *pi = g->pi;
    const size_t p = g->next_p;
    const size_t b = pi[p].b, e = pi[p].e;
    const size_t lo = pi[b].slot0, hi = pi[e].slot0, range = hi - lo;
    gen_update_live(g);
    if (hi > g->mat_end) {
        int rc = gen_reserve(g, hi - g->live_lo, err);
        if (rc) return rc;
        gen_layout(g, hi);
    }
    if (g->mat_end - g->live_lo > g->peak) g->peak = g->mat_end - g->live_lo;

    gen_slot *ring = g->ring;
    const size_t mask = g->cap - 1;
    /* The ring spans a whole window (megabytes), so nearly every draw's slot is a cache miss.
     * The draws are known ahead (mt64_peek): at draw i the offset of draw i + AHEAD is computed,
     * its slot prefetched, and the offset kept (tagged i + AHEAD + 1; the range is fixed for the
     * whole position) so that draw i + AHEAD does not divide again. */
    size_t ahead_off[GEN_PREFETCH_AHEAD];
    uint64_t ahead_tag[GEN_PREFETCH_AHEAD] = {0};
    uint64_t i = 0;
    for (size_t t = pi[p].slot0; t < pi[p + 1].slot0; t++) {
        gen_slot *st = &ring[t & mask], *sj;
        /* The full pass's second test, "t's home lies in the window of j's position", holds
         * exactly for the positions [cover_lo, cover_hi) of t's home, i.e. for j in the slots
         * [jlo, jhi) of those inside [b, e): fixed for the whole step, so no search per draw. */
        const size_t h = st->home;
        const size_t jlo = pi[CTF_MAX(b, g->cover_lo[h])].slot0;
        const size_t jhi = pi[CTF_MIN(e, g->cover_hi[h])].slot0;
        for (;;) {
            const size_t k = (size_t)(i % GEN_PREFETCH_AHEAD);
            const bool known = ahead_tag[k] == i + 1;
            const size_t off = known ? ahead_off[k] : 0;
            uint64_t later;
            if (mt64_peek(&g->rng, GEN_PREFETCH_AHEAD, &later)) {
                ahead_off[k] = (size_t)(later % (uint64_t)range);
                ahead_tag[k] = i + GEN_PREFETCH_AHEAD + 1;
                GEN_PREFETCH(&ring[(lo + ahead_off[k]) & mask]);
            }
            const uint64_t r = mt64_next(&g->rng);
            i++;
            const size_t j = lo + (known ? off : (size_t)(r % (uint64_t)range));
            sj = &ring[j & mask];
            if (sj->home < b || sj->home >= e) continue;
            if (j >= jlo && j < jhi) break;
        }
        gen_slot tmp = *st;
        *st = *sj;
        *sj = tmp;
    }
    g->next_p = p + 1;
    gen_update_live(g);
    return 0;
}

int ctf__sweepgen_create(const ctf__chunk *chunks, size_t num_chunks, uint64_t window,
                         bool window_in_samples, uint64_t seed, uint64_t sweep_no, bool randomized,
                         ctf__sweep_gen **out, ctf_error *err)
{
    *out = NULL;
    const size_t n = num_chunks;
    ctf__sweep_gen *g = CTF_CALLOC(1, sizeof *g);
    if (!g) goto oom;
    g->sweep = sweep_no;
    g->n = n;
    g->num_slots = count_slots(chunks, n);
    g->identity = !randomized || window == 0;
    if (n < SIZE_MAX / sizeof *g->pi) {
        g->pi = CTF_MALLOC((n + 1) * sizeof *g->pi);
        g->chunk_at = CTF_MALLOC(n * sizeof *g->chunk_at);
        g->pos_of = CTF_MALLOC(n * sizeof *g->pos_of);
        g->first_at = CTF_MALLOC(n * sizeof *g->first_at);
    }
    if (!g->pi || !g->chunk_at || !g->pos_of || !g->first_at) goto oom;
    if (!g->identity) {
        g->cover_lo = CTF_MALLOC(n * sizeof *g->cover_lo);
        g->cover_hi = CTF_MALLOC(n * sizeof *g->cover_hi);
        if (!g->cover_lo || !g->cover_hi) goto oom;
    }

    if (g->identity) {
        g->pi[0].slot0 = 0;
        for (size_t p = 0; p < n; p++) {
            g->chunk_at[p] = p;
            g->pi[p + 1].slot0 = g->pi[p].slot0 + chunks[p].num_seqs;
        }
    } else {
        plan_sweep(chunks, n, window, window_in_samples, seed + sweep_no, g->chunk_at, g->pi,
                   &g->rng);
        /* b(q) and e(q) are non-decreasing, so {q : b(q) <= h < e(q)} is an interval whose
         * ends only grow with h: one two-pointer pass. */
        size_t q1 = 0, q2 = 0;
        for (size_t h = 0; h < n; h++) {
            while (q1 < n && g->pi[q1].e <= h) q1++;
            while (q2 < n && g->pi[q2].b <= h) q2++;
            g->cover_lo[h] = q1;
            g->cover_hi[h] = q2;
        }
    }
    for (size_t p = 0; p < n; p++) {
        g->pos_of[g->chunk_at[p]] = p;
        g->first_at[p] = chunks[g->chunk_at[p]].first_seq;
    }
    *out = g;
    return 0;
oom:
    ctf__sweepgen_free(g);
    return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE,
                     "out of memory for the order of a sweep (%zu chunks)", n);
}

int ctf__sweepgen_get(ctf__sweep_gen *g, size_t slot, size_t *seq, size_t *home, ctf_error *err)
{
    if (slot >= g->num_slots) {
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                         "slot %zu is past the end of sweep %llu (%zu slots)", slot,
                         (unsigned long long)g->sweep, g->num_slots);
    }
    if (slot < g->release) {
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                         "slot %zu of sweep %llu was asked after its release (release point %zu)",
                         slot, (unsigned long long)g->sweep, g->release);
    }
    size_t q, h;
    if (g->identity) {
        /* Sequential asks stay on the cursor's position or the next: O(1); a jump searches. */
        const pos_info *pi = g->pi;
        size_t p = g->cursor;
        if (!(pi[p].slot0 <= slot && slot < pi[p + 1].slot0)) {
            if (p + 2 <= g->n && pi[p + 1].slot0 <= slot && slot < pi[p + 2].slot0)
                p++;
            else
                p = position_of_slot(pi, 0, g->n, slot);
            g->cursor = p;
        }
        q = g->first_at[p] + (slot - pi[p].slot0);
        h = p;
    } else {
        while (g->next_p < g->n && g->pi[g->pi[g->next_p].b].slot0 <= slot) {
            int rc = gen_run_position(g, err);
            if (rc) return rc;
        }
        CTF_ASSERT(slot >= g->live_lo && slot < g->mat_end);
        const gen_slot *x = &g->ring[slot & (g->cap - 1)];
        q = x->seq;
        h = x->home;
    }
    if (seq) *seq = q;
    if (home) *home = h;
    return 0;
}

bool ctf__sweepgen_pending(const ctf__sweep_gen *g, size_t slot, size_t *lo, size_t *hi)
{
    if (g->identity || slot >= g->num_slots || g->next_p >= g->n ||
        g->pi[g->pi[g->next_p].b].slot0 > slot)
        return false;
    const pos_info *pi = &g->pi[position_of_slot(g->pi, 0, g->n, slot)];
    *lo = pi->b;
    *hi = pi->e;
    return true;
}

void ctf__sweepgen_release(ctf__sweep_gen *g, size_t slot)
{
    if (slot > g->num_slots) slot = g->num_slots;
    if (slot <= g->release) return;
    g->release = slot;
    if (!g->identity) gen_update_live(g);
}

size_t ctf__sweepgen_num_slots(const ctf__sweep_gen *g) { return g->num_slots; }
uint64_t ctf__sweepgen_sweep(const ctf__sweep_gen *g) { return g->sweep; }
const size_t *ctf__sweepgen_chunk_at(const ctf__sweep_gen *g) { return g->chunk_at; }
const size_t *ctf__sweepgen_pos_of(const ctf__sweep_gen *g) { return g->pos_of; }
#ifdef CTF_TESTING
size_t ctf__sweepgen_peak_slots(const ctf__sweep_gen *g) { return g->peak; }
#endif

void ctf__sweepgen_free(ctf__sweep_gen *g)
{
    if (!g) return;
    CTF_FREE(g->pi);
    CTF_FREE(g->chunk_at);
    CTF_FREE(g->pos_of);
    CTF_FREE(g->first_at);
    CTF_FREE(g->cover_lo);
    CTF_FREE(g->cover_hi);
    CTF_FREE(g->ring);
    CTF_FREE(g);
}
