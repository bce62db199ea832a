/*
 * pack.c -- the packing stage: the sequences the reader picked for a minibatch, each living in
 * some parsed chunk, are copied into one owned ctf_minibatch (rules 9).
 *
 * In:  picks (chunk data + sequence index), in delivery order.
 * Out: per stream one contiguous block: dense (num_samples, dim) values, or sparse CSR
 *      (indptr over samples, int32 indices, values); per-sequence lengths; keys and lines.
 *
 * The minibatch owns all of its memory and points at nothing in the reader, so it outlives the
 * next call and the reader itself (the Python layer wraps these buffers without copying).
 * Freeing a minibatch hands its blocks back to its reader's pool (a few minibatches at most),
 * from which the next ctf__pack takes them: in a steady state reading allocates nothing.
 * This file also holds the minibatch accessors (the JSON that `ctfio dump` prints is made
 * from them, in tools/dump_json.c).
 */
#include "reader/pipeline.h"

#include <stdio.h>

/*======================================================================
 * The minibatch object
 *====================================================================*/

typedef struct mb_stream {
    char *name;            /* owned copy of the stream name */
    bool is_sparse;
    size_t dim;
    size_t samples;        /* samples in this stream */
    size_t nnz;            /* sparse entries */
    void *values;          /* dense samples*dim or sparse nnz elements */
    uint32_t *lengths;     /* per sequence */
    int64_t *indptr;       /* sparse: samples + 1 */
    int32_t *indices;      /* sparse: nnz */
    size_t *shorts;        /* dense: (sample, values present) pairs for samples the end of the
                              file cut short (a file's last sample; a minibatch spanning sweeps
                              can hold it more than once) */
    size_t num_shorts;
    /* Bytes each block holds (a pooled minibatch's blocks may be larger than its data). */
    size_t values_cap, lengths_cap, indptr_cap, indices_cap, shorts_cap;
} mb_stream;

struct ctf_minibatch {
    size_t num_seqs;
    size_t num_streams;
    ctf_precision precision;
    uint64_t num_samples;  /* index samples of the sequences here */
    uint64_t position;
    uint64_t sweep;
    bool end_of_sweep;
    uint64_t *keys;        /* per sequence */
    uint64_t *lines;       /* per sequence, 1-based */
    uint32_t *files;       /* per sequence: its file in the reader's file list */
    size_t keys_cap, lines_cap, files_cap; /* bytes of each block */
    bool corpus;           /* several files: the JSON names each sequence's file */
    mb_stream *streams;
    ctf__mb_pool *pool;    /* where ctf_minibatch_free hands it back (NULL: freed) */
};

/* A reader's pool of freed minibatches. Minibatches are freed by their owner, on any thread,
 * at any time (also during a ctf_reader_next on another thread, and after the reader is gone),
 * so the slots are atomic and the pool is reference-counted: one reference for the reader, one
 * for each minibatch out of the pool that will come back to it. A minibatch in a slot holds
 * none; the last reference frees what the slots hold and the pool. */
struct ctf__mb_pool {
    atomic_long refs;
    atomic_bool closed;          /* the reader is gone: minibatches freed from now are freed */
    _Atomic(ctf_minibatch *) slots[CTF__MB_POOL_SLOTS];
    size_t *scratch;             /* ctf__pack's prefix sums (the reader's thread only) */
    size_t scratch_cap;          /* elements */
};

/* The part of sequence `pick`'s slice of one stream that the pick delivers (truncated BPTT
 * delivers a window of a sequence; everything else the whole slice). */
static ctf__slice pick_slice(const ctf__pick *pick, size_t ns, size_t k)
{
    /* A chunk of one-sample sequences needs no look-up (in a randomized minibatch, a miss). */
    ctf__slice sl = pick->cd->one_sample ? (ctf__slice){(uint32_t)pick->local, 1}
                                         : pick->cd->slices[pick->local * ns + k];
    uint32_t from = CTF_MIN(pick->from, sl.count);
    sl.first += from;
    sl.count = CTF_MIN(pick->count, sl.count - from);
    return sl;
}

/* Frees mb and every block it holds (not its pool reference). */
static void mb_destroy(ctf_minibatch *mb)
{
    if (mb->streams)
        for (size_t k = 0; k < mb->num_streams; k++) {
            mb_stream *s = &mb->streams[k];
            CTF_FREE(s->name);
            CTF_FREE(s->values);
            CTF_FREE(s->lengths);
            CTF_FREE(s->indptr);
            CTF_FREE(s->indices);
            CTF_FREE(s->shorts);
        }
    CTF_FREE(mb->streams);
    CTF_FREE(mb->keys);
    CTF_FREE(mb->lines);
    CTF_FREE(mb->files);
    CTF_FREE(mb);
}

/* Frees the minibatches the slots hold. */
static void pool_drain(ctf__mb_pool *pool)
{
    for (size_t i = 0; i < CTF__MB_POOL_SLOTS; i++) {
        ctf_minibatch *mb = atomic_exchange(&pool->slots[i], NULL);
        if (mb) mb_destroy(mb);
    }
}

static void pool_release(ctf__mb_pool *pool)
{
    if (atomic_fetch_sub(&pool->refs, 1) != 1) return;
    pool_drain(pool);
    CTF_FREE(pool->scratch);
    CTF_FREE(pool);
}

void ctf__mb_pool_close(ctf__mb_pool *pool)
{
    if (!pool) return;
    atomic_store(&pool->closed, true);
    pool_drain(pool);
    CTF_FREE(pool->scratch);
    pool->scratch = NULL;
    pool->scratch_cap = 0;
    pool_release(pool);
}

/* A pooled minibatch (holding a reference again), or NULL when the slots are empty. */
static ctf_minibatch *pool_take(ctf__mb_pool *pool)
{
    for (size_t i = 0; i < CTF__MB_POOL_SLOTS; i++) {
        if (!atomic_load_explicit(&pool->slots[i], memory_order_relaxed)) continue;
        ctf_minibatch *mb = atomic_exchange(&pool->slots[i], NULL);
        if (mb) {
            atomic_fetch_add(&pool->refs, 1);
            return mb;
        }
    }
    return NULL;
}

void ctf_minibatch_free(ctf_minibatch *mb)
{
    if (!mb) return;
    ctf__mb_pool *pool = mb->pool;
    if (pool && !atomic_load(&pool->closed))
        for (size_t i = 0; i < CTF__MB_POOL_SLOTS; i++) {
            ctf_minibatch *expected = NULL;
            /* A minibatch put here after the reader's close is freed by the last release. */
            if (atomic_compare_exchange_strong(&pool->slots[i], &expected, mb)) {
                pool_release(pool);
                return;
            }
        }
    mb_destroy(mb);
    if (pool) pool_release(pool);
}

/* A block of at least n bytes (1 for 0) in place of block p of *cap bytes (NULL: none); what
 * p held is not kept. A block that is large enough is kept unless it is more than four times
 * (and 64 KiB) too large; a block replaced because it was too small gets a quarter more, so
 * that a pooled minibatch settles on blocks that fit the sizes a reader delivers.
 * @return : the block (*cap its size), or NULL when out of memory (p freed, *cap 0). */
static void *reserve(void *p, size_t *cap, size_t n)
{
    if (!n) n = 1;
    if (p && *cap >= n && (*cap / 4 <= n || *cap <= CTF__MB_KEEP_BYTES)) return p;
    const size_t want = p && *cap < n && n <= SIZE_MAX - n / 4 ? n + n / 4 : n;
    CTF_FREE(p);
    *cap = 0;
    if (!(p = CTF_MALLOC(want))) return NULL;
    *cap = want;
    return p;
}

/* Asks for the cache lines of [p, p + n) (at most 4 KiB of them: a longer range streams well
 * by itself once the copy starts). */
static void prefetch_range(const void *p, size_t n)
{
#if defined(__GNUC__)
    const char *c = p, *e = c + CTF_MIN(n, (size_t)4096);
    for (; c < e; c += 64) __builtin_prefetch(c, 0, 3);
#else
    (void)p;
    (void)n;
#endif
}

/* One part of a minibatch's sizes pass or of its copies: picks [n * part / parts,
 * n * (part + 1) / parts) of every stream. */
typedef struct pack_job {
    const ctf__parse_cfg *pc;
    const ctf__pick *picks;
    size_t n, parts;
    ctf_minibatch *mb;
    size_t *offsets;        /* per stream: n + 1 sample offsets, then n + 1 entry offsets */
} pack_job;

/* The sizes pass of one part (the picks' lengths, and in place of the entry offsets what
 * ctf__pack sums into them: a sparse pick's entries, or 1 + where a dense pick holds the sample
 * the end of the file cut short, 0 if none). The same pass prefetches what the copies will
 * read: in a randomized minibatch every sequence lies somewhere else in the window's chunks
 * (megabytes), and reaching its samples is a chain of misses: its slices, then (sparse) its CSR
 * offsets, then the values. Walked one sequence after another, the chains run one at a time;
 * the first two passes start the first links of all of the part's chains together, the last
 * starts the values. Sparse streams only for the first two: with two links (dense) the extra
 * pass cost more than it saved. */
static void size_part(void *arg, size_t part)
{
    const pack_job *j = arg;
    const size_t ns = j->pc->num_streams, elt = (size_t)j->pc->precision, n = j->n;
    const size_t i0 = n * part / j->parts, i1 = n * (part + 1) / j->parts;
    const ctf__pick *picks = j->picks;
    bool any_sparse = false;
    for (size_t k = 0; k < ns; k++) any_sparse |= j->pc->streams[k].is_sparse;
    for (size_t i = i0; any_sparse && i < i1; i++)
        if (!picks[i].cd->one_sample) prefetch_range(&picks[i].cd->slices[picks[i].local * ns], 1);
    for (size_t k = 0; k < ns; k++) {
        if (!j->pc->streams[k].is_sparse) continue;
        for (size_t i = i0; i < i1; i++) {
            const ctf__slice sl = pick_slice(&picks[i], ns, k);
            if (sl.count) prefetch_range(&picks[i].cd->streams[k].indptr[sl.first], 1);
        }
    }
    for (size_t k = 0; k < ns; k++) {
        const ctf_stream_def *def = &j->pc->streams[k];
        uint32_t *lengths = j->mb->streams[k].lengths;
        size_t *counts = j->offsets + 2 * k * (n + 1) + (n + 1);
        for (size_t i = i0; i < i1; i++) {
            const ctf__slice sl = pick_slice(&picks[i], ns, k);
            lengths[i] = sl.count;
            counts[i] = 0;
            if (!sl.count) continue;
            const ctf__stream_data *sd = &picks[i].cd->streams[k];
            if (def->is_sparse) {
                const int64_t b = sd->indptr[sl.first], e = sd->indptr[sl.first + sl.count];
                counts[i] = (size_t)(e - b);
                if (e > b) {
                    prefetch_range((const char *)sd->values + (size_t)b * elt,
                                   (size_t)(e - b) * elt);
                    prefetch_range(sd->indices + b, (size_t)(e - b) * sizeof *sd->indices);
                }
            } else {
                const size_t a = ctf__dense_at(sd, def->dim, sl.first);
                const uint32_t last = sl.first + sl.count - 1;
                prefetch_range((const char *)sd->values + a * elt,
                               (ctf__dense_at(sd, def->dim, last) +
                                ctf__dense_len(sd, def->dim, last) - a) *
                                   elt);
                if (sd->short_sample >= (int64_t)sl.first && sd->short_sample <= (int64_t)last)
                    counts[i] = 1 + (size_t)sd->short_sample - sl.first;
            }
        }
    }
}

static void copy_part(void *arg, size_t part)
{
    const pack_job *j = arg;
    const size_t ns = j->pc->num_streams, elt = (size_t)j->pc->precision, n = j->n;
    const size_t i0 = n * part / j->parts, i1 = n * (part + 1) / j->parts;
    for (size_t k = 0; k < ns; k++) {
        const ctf_stream_def *def = &j->pc->streams[k];
        mb_stream *s = &j->mb->streams[k];
        const size_t *rows = j->offsets + 2 * k * (n + 1), *nzs = rows + (n + 1);
        for (size_t i = i0; i < i1; i++) {
            const ctf__slice sl = pick_slice(&j->picks[i], ns, k);
            if (!sl.count) continue;
            const ctf__stream_data *sd = &j->picks[i].cd->streams[k];
            if (!def->is_sparse) {
                const size_t row_bytes = def->dim * elt;
                char *dst = (char *)s->values + rows[i] * row_bytes;
                if (!row_bytes) continue;
                if (sd->view) {
                    /* A view's sequence is its samples one after another, each full. */
                    memcpy(dst,
                           (const char *)sd->values + ctf__dense_at(sd, def->dim, sl.first) * elt,
                           (size_t)sl.count * row_bytes);
                    continue;
                }
                if (sd->dense_off) {
                    /* Samples stored short (their zeros were not kept): zero-filled here. */
                    for (uint32_t r = 0; r < sl.count; r++, dst += row_bytes) {
                        const size_t a = sd->dense_off[sl.first + r];
                        const size_t len = ctf__dense_len(sd, def->dim, sl.first + r) * elt;
                        if (len) memcpy(dst, (const char *)sd->values + a * elt, len);
                        memset(dst + len, 0, row_bytes - len);
                    }
                    continue;
                }
                memcpy(dst, (const char *)sd->values + (size_t)sl.first * row_bytes,
                       (size_t)sl.count * row_bytes);
            } else {
                const int64_t b = sd->indptr[sl.first];
                const size_t at = nzs[i], cnt = nzs[i + 1] - at;
                if (cnt) { /* samples without entries: sd->values may still be NULL */
                    memcpy((char *)s->values + at * elt, (const char *)sd->values + (size_t)b * elt,
                           cnt * elt);
                    memcpy(s->indices + at, sd->indices + b, cnt * sizeof *s->indices);
                }
                for (uint32_t r = 1; r <= sl.count; r++)
                    s->indptr[rows[i] + r] = (int64_t)at + (sd->indptr[sl.first + r] - b);
            }
        }
    }
}

/* How many parts a pass over n picks is split into: `wanted` (what the pass holds over what a
 * part must hold to pay for its handover), at most one per pick and four per thread. The
 * threads take the parts as they come, so smaller parts even out the threads that start late
 * or share a core (with the consumer, threads + 1 of them run on as many cores as the host
 * has: three equal parts on two cores took two rounds of a part each). */
static size_t parts_for(const ctf__mb_info *info, size_t n, size_t wanted)
{
    if (!info->run_parts || info->max_parts < 2 || n < 2) return 1;
    const size_t parts = CTF_MIN(CTF_MIN(4 * info->max_parts, n), wanted);
    return parts ? parts : 1;
}

int ctf__pack(const ctf__parse_cfg *pc, const ctf__pick *picks, size_t n, const ctf__mb_info *info,
              ctf_minibatch **out, ctf_error *err)
{
    const size_t ns = pc->num_streams;
    const size_t elt = (size_t)pc->precision;
    *out = NULL;
    size_t *scratch = NULL;
    ctf_minibatch *mb = NULL;
    /* The reader's pool, made on the first minibatch (without one, nothing is reused). */
    ctf__mb_pool *pool = info->pool ? *info->pool : NULL;
    if (info->pool && !pool) {
        if (!(pool = CTF_CALLOC(1, sizeof *pool))) goto oom;
        atomic_init(&pool->refs, 1);
        atomic_init(&pool->closed, false);
        for (size_t i = 0; i < CTF__MB_POOL_SLOTS; i++) atomic_init(&pool->slots[i], NULL);
        *info->pool = pool;
    }
    if (pool) mb = pool_take(pool);
    if (!mb) {
        if (!(mb = CTF_CALLOC(1, sizeof *mb))) goto oom;
        if (pool) {
            mb->pool = pool;
            atomic_fetch_add(&pool->refs, 1);
        }
        if (!(mb->streams = CTF_CALLOC(ns, sizeof *mb->streams))) goto oom;
        mb->num_streams = ns;
        for (size_t k = 0; k < ns; k++) {
            mb->streams[k].is_sparse = pc->streams[k].is_sparse;
            mb->streams[k].dim = pc->streams[k].dim;
            if (!(mb->streams[k].name = ctf__strdup(pc->streams[k].name))) goto oom;
        }
    }
    mb->num_seqs = n;
    mb->precision = pc->precision;
    mb->position = info->position;
    mb->sweep = info->sweep;
    mb->end_of_sweep = info->end_of_sweep;
    mb->corpus = info->corpus;
    mb->num_samples = 0;
    if (!(mb->keys = reserve(mb->keys, &mb->keys_cap, n * sizeof *mb->keys)) ||
        !(mb->lines = reserve(mb->lines, &mb->lines_cap, n * sizeof *mb->lines)) ||
        !(mb->files = reserve(mb->files, &mb->files_cap, n * sizeof *mb->files)))
        goto oom;
    for (size_t i = 0; i < n; i++) {
        mb->keys[i] = picks[i].key;
        mb->lines[i] = picks[i].line + 1;
        mb->files[i] = picks[i].file;
        mb->num_samples += picks[i].samples;
    }
    /* Prefix sums per stream: where each pick's samples (rows) and entries (nzs) start. */
    if (pool) {
        if (ctf__grow((void **)&pool->scratch, &pool->scratch_cap, 2 * ns * (n + 1),
                      sizeof *scratch))
            goto oom;
        scratch = pool->scratch;
    } else if (!(scratch = CTF_MALLOC(2 * ns * (n + 1) * sizeof *scratch))) {
        goto oom;
    }
    for (size_t k = 0; k < ns; k++) {
        mb_stream *s = &mb->streams[k];
        if (!(s->lengths = reserve(s->lengths, &s->lengths_cap, n * sizeof *s->lengths))) goto oom;
    }
    /* Sizes first, so each buffer is allocated once. In a randomized minibatch the sizes pass is
     * a chain of misses per pick (above all for sparse streams), so a minibatch of enough picks
     * splits it like the copies: the parts count and prefetch on the threads, the sums below
     * stay here, in order. The sizes are not known yet: the picks stand for the pass's cost. */
    const size_t pairs = n * ns;
    pack_job job = {pc, picks, n, 1, mb, scratch};
    if (pairs >= CTF__PACK_SPLIT_PICKS)
        job.parts = parts_for(info, n, pairs / CTF__PACK_PART_PICKS);
    if (job.parts > 1)
        info->run_parts(info->run_ctx, size_part, &job, job.parts);
    else
        size_part(&job, 0);
    size_t total_bytes = 0;
    for (size_t k = 0; k < ns; k++) {
        const ctf_stream_def *def = &pc->streams[k];
        mb_stream *s = &mb->streams[k];
        size_t *rows = scratch + 2 * k * (n + 1), *nzs = rows + (n + 1);
        s->num_shorts = 0;
        s->nnz = 0;
        /* The sums, and the samples the end of the file cut short, in order. */
        size_t samples = 0, nnz = 0;
        for (size_t i = 0; i < n; i++) {
            const size_t count = nzs[i];
            rows[i] = samples;
            nzs[i] = nnz;
            samples += s->lengths[i];
            if (def->is_sparse) {
                nnz += count;
            } else if (count) {
                if (!s->num_shorts &&
                    !(s->shorts = reserve(s->shorts, &s->shorts_cap, 2 * n * sizeof *s->shorts)))
                    goto oom;
                s->shorts[2 * s->num_shorts] = rows[i] + count - 1;
                s->shorts[2 * s->num_shorts + 1] = picks[i].cd->streams[k].short_count;
                s->num_shorts++;
            }
        }
        rows[n] = samples;
        nzs[n] = nnz;
        s->samples = samples;
        if (!def->is_sparse) {
            size_t vals = 1;
            if ((samples && __builtin_mul_overflow(samples, def->dim, &vals)) ||
                vals > SIZE_MAX / elt)
                goto oom;
            if (!(s->values = reserve(s->values, &s->values_cap, vals * elt))) goto oom;
            total_bytes += vals * elt;
        } else {
            s->nnz = nnz;
            if (!(s->values = reserve(s->values, &s->values_cap, nnz * elt)) ||
                !(s->indices = reserve(s->indices, &s->indices_cap, nnz * sizeof *s->indices)) ||
                !(s->indptr = reserve(s->indptr, &s->indptr_cap,
                                      (samples + 1) * sizeof *s->indptr)))
                goto oom;
            s->indptr[0] = 0;
            total_bytes += nnz * (elt + sizeof *s->indices) + samples * sizeof *s->indptr;
        }
    }
    /* The copies write disjoint ranges, so they can run on several threads with the same
     * result; a small minibatch is copied here (handing it over costs more than it saves). */
    job.parts = parts_for(info, n, total_bytes / CTF__PACK_PART_BYTES);
    if (job.parts > 1)
        info->run_parts(info->run_ctx, copy_part, &job, job.parts);
    else
        copy_part(&job, 0);
    if (!pool) CTF_FREE(scratch);
    *out = mb;
    return 0;
oom:
    if (!pool) CTF_FREE(scratch);
    if (mb) { /* possibly incomplete (no streams, a name missing): never pooled */
        ctf__mb_pool *owner = mb->pool;
        mb_destroy(mb);
        if (owner) pool_release(owner);
    }
    return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory packing a minibatch");
}

/*======================================================================
 * Accessors
 *====================================================================*/

size_t ctf_minibatch_num_sequences(const ctf_minibatch *mb) { return mb->num_seqs; }
uint64_t ctf_minibatch_num_samples(const ctf_minibatch *mb) { return mb->num_samples; }
size_t ctf_minibatch_num_streams(const ctf_minibatch *mb) { return mb->num_streams; }
bool ctf_minibatch_end_of_sweep(const ctf_minibatch *mb) { return mb->end_of_sweep; }
uint64_t ctf_minibatch_position(const ctf_minibatch *mb) { return mb->position; }
uint64_t ctf_minibatch_sweep(const ctf_minibatch *mb) { return mb->sweep; }
const uint64_t *ctf_minibatch_keys(const ctf_minibatch *mb) { return mb->keys; }
const uint64_t *ctf_minibatch_lines(const ctf_minibatch *mb) { return mb->lines; }
const uint32_t *ctf_minibatch_files(const ctf_minibatch *mb) { return mb->files; }

int ctf_minibatch_stream(const ctf_minibatch *mb, size_t i, ctf_stream_view *v)
{
    if (!mb || i >= mb->num_streams) return CTF_EINVAL;
    const mb_stream *s = &mb->streams[i];
    v->name = s->name;
    v->is_sparse = s->is_sparse;
    v->precision = mb->precision;
    v->dim = s->dim;
    v->num_sequences = mb->num_seqs;
    v->num_samples = s->samples;
    v->values = s->values;
    v->lengths = s->lengths;
    v->indptr = s->indptr;
    v->indices = s->indices;
    v->nnz = s->nnz;
    v->num_short = s->num_shorts;
    v->short_samples = s->shorts;
    return 0;
}

bool ctf_minibatch_has_files(const ctf_minibatch *mb) { return mb && mb->corpus; }
