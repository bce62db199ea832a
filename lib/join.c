/*
 * join.c -- several deserializers joined by sequence key (CNTK's composite reader), built on the
 * source seam: the primary corpus's chunks are the join's chunks, so the primary alone drives
 * randomization, the timeline, workers and checkpoints; every other deserializer ("part") is a
 * corpus of its own, with its own index, in which each primary sequence is looked up by key.
 *
 * At open: each part's keys go into a key -> sequence table (a key twice in a part is an error
 * naming both places); each primary sequence is looked up in every part. One that a part lacks
 * is dropped from the chunk table before randomization (warned with its key and the part,
 * counted); keys found only in parts are counted. A sequence's length on the timeline is its
 * length in the part holding the definesMBSize stream, else the largest over the parts.
 *
 * Loading chunk c: the primary chunk is loaded through the primary corpus, every part chunk
 * holding one of its sequences is taken from a reference-counted cache (read and parsed on
 * first need), and the sequences' streams are put together into one chunk of every stream
 * (the primary's buffers are moved, the parts' samples copied). The part chunks stay referenced
 * until the joined chunk is freed, so a part chunk is held while a held primary chunk (in the
 * window or parsed ahead) needs it, and freed when none does. A part's problems are reported
 * with the joined chunk whose sequence they concern, so that they come in timeline order.
 */
#include "ctfio_internal.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>

/* key -> sequence number of a part: open addressing, seq SIZE_MAX marks an empty slot. */
typedef struct keymap {
    uint64_t *keys;
    size_t *seq;
    size_t mask;
} keymap;

typedef struct jpart {
    ctf__source *src;
    keymap map;
    const char *origin;
    ctf__chunk_data **cd;  /* per chunk: parsed, while refs > 0 */
    uint32_t *refs;
    uint8_t *loading;
    ctf__seq *mat;         /* every record of the part (materialize) */
    const ctf__seq **mat_cs;
} jpart;

typedef struct join {
    ctf__source src;       /* first: a join is a source */
    ctf__source *prim;
    jpart *parts;
    size_t np;
    size_t prim_ns;        /* streams of the primary; each part's follow in order */
    size_t *part_base;     /* first stream of each part */
    size_t total_ns;
    const ctf_stream_def *streams; /* every stream, the primary's first */
    size_t *part_ns;       /* streams of each part */
    int mb_part;           /* the part whose definesMBSize stream sets lengths (0: primary), -1 */
    ctf__chunk *chunks;
    size_t *pchunk;        /* chunk -> the primary's chunk */
    ctf__seq *seqs;        /* sequence records, chunk after chunk */
    const ctf__seq **chunk_seqs;
    uint32_t *chunk_file;
    uint32_t *plocal;      /* per sequence: its index in the primary chunk */
    size_t *jseq;          /* per sequence and part: the part's sequence number */
    ctf__source_file *fp;  /* every file, the primary's first */
    ctf__seq *pmat;        /* every record of the primary (materialize) */
    const ctf__seq **pmat_cs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool sync_ok;
    size_t held_chunks, held_bytes; /* part chunks in the cache (under mu) */
} join;

static size_t hash_key(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

static const ctf__seq *seq_of(const ctf__source *s, size_t seq, size_t *chunk)
{
    size_t c = ctf__source_chunk_of(s, seq);
    if (chunk) *chunk = c;
    return ctf__source_seq_mem(s, c, seq);
}

static size_t map_find(const keymap *m, uint64_t key)
{
    for (size_t i = hash_key(key) & m->mask;; i = (i + 1) & m->mask) {
        if (m->seq[i] == SIZE_MAX) return SIZE_MAX;
        if (m->keys[i] == key) return m->seq[i];
    }
}

/* A part's name in messages: where it was configured, else its position and first file. */
static void part_name(const join *J, size_t j, char *buf, size_t cap)
{
    const jpart *P = &J->parts[j];
    if (P->origin && P->origin[0])
        snprintf(buf, cap, "deserializer %zu (%s)", j + 1, P->origin);
    else
        snprintf(buf, cap, "deserializer %zu (%s%s)", j + 1, P->src->files[0].path,
                 P->src->num_files > 1 ? " ..." : "");
}

/* Every record of s in memory, chunk by chunk through its `seqs`, and s->chunk_seqs pointed at
 * them: the join's key tables and lookups work on whole tables (32 bytes per sequence of each
 * deserializer, docs/design.md), while a file source keeps only its chunk table. */
static int materialize(ctf__source *s, ctf__seq **all, const ctf__seq ***cs, ctf_error *err)
{
    *all = CTF_MALLOC((s->num_seqs ? s->num_seqs : 1) * sizeof **all);
    *cs = CTF_MALLOC((s->num_chunks ? s->num_chunks : 1) * sizeof **cs);
    if (!*all || !*cs)
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory indexing the keys");
    for (size_t c = 0; c < s->num_chunks; c++) {
        const ctf__seq *q;
        int rc = s->seqs(s, c, &q, err);
        if (rc) return rc;
        memcpy(*all + s->chunks[c].first_seq, q, s->chunks[c].num_seqs * sizeof *q);
        (*cs)[c] = *all + s->chunks[c].first_seq;
    }
    s->chunk_seqs = *cs;
    return 0;
}

static int build_map(join *J, size_t j, ctf_error *err)
{
    jpart *P = &J->parts[j];
    const ctf__source *s = P->src;
    size_t cap = 16;
    while (cap < 2 * s->num_seqs + 2) cap *= 2;
    P->map.keys = CTF_MALLOC(cap * sizeof *P->map.keys);
    P->map.seq = CTF_MALLOC(cap * sizeof *P->map.seq);
    if (!P->map.keys || !P->map.seq)
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory indexing the keys");
    memset(P->map.seq, 0xff, cap * sizeof *P->map.seq);
    P->map.mask = cap - 1;
    for (size_t c = 0; c < s->num_chunks; c++)
        for (size_t i = 0; i < s->chunks[c].num_seqs; i++) {
            const size_t g = s->chunks[c].first_seq + i;
            const ctf__seq *q = s->chunk_seqs[c] + i;
            size_t h = hash_key(q->key) & P->map.mask;
            while (P->map.seq[h] != SIZE_MAX && P->map.keys[h] != q->key) h = (h + 1) & P->map.mask;
            if (P->map.seq[h] != SIZE_MAX) {
                size_t oc;
                const ctf__seq *o = seq_of(s, P->map.seq[h], &oc);
                char name[CTF_ERROR_PATH_MAX];
                part_name(J, j, name, sizeof name);
                return ctf__fail(err, CTF_EPARSE,
                                 (ctf__where){s->files[s->chunk_file[c]].path, q->line + 1, 1,
                                              (int64_t)q->offset},
                                 "sequence key %" PRIu64 " appears twice in %s: here and at "
                                 "%s:%" PRIu64 "; a joined deserializer must hold each key once",
                                 q->key, name, s->files[s->chunk_file[oc]].path, o->line + 1);
            }
            P->map.keys[h] = q->key;
            P->map.seq[h] = g;
        }
    return 0;
}

/* Looks every primary sequence up in every part and builds the join's chunk table. */
static int build_table(join *J, ctf_log_fn log, void *log_user, int trace_level, ctf_error *err)
{
    const ctf__source *p = J->prim;
    const size_t np = J->np, n = p->num_seqs ? p->num_seqs : 1;
    J->chunks = CTF_MALLOC((p->num_chunks ? p->num_chunks : 1) * sizeof *J->chunks);
    J->pchunk = CTF_MALLOC((p->num_chunks ? p->num_chunks : 1) * sizeof *J->pchunk);
    J->chunk_seqs = CTF_MALLOC((p->num_chunks ? p->num_chunks : 1) * sizeof *J->chunk_seqs);
    J->chunk_file = CTF_MALLOC((p->num_chunks ? p->num_chunks : 1) * sizeof *J->chunk_file);
    J->seqs = CTF_MALLOC(n * sizeof *J->seqs);
    J->plocal = CTF_MALLOC(n * sizeof *J->plocal);
    J->jseq = CTF_MALLOC(n * np * sizeof *J->jseq);
    uint8_t **used = CTF_CALLOC(np, sizeof *used);
    if (!J->chunks || !J->pchunk || !J->chunk_seqs || !J->chunk_file || !J->seqs || !J->plocal ||
        !J->jseq || !used)
        goto oom;
    for (size_t j = 0; j < np; j++)
        if (!(used[j] = CTF_CALLOC(J->parts[j].src->num_seqs + 1, 1))) goto oom;
    size_t nc = 0, g = 0;
    uint64_t shown = 0;
    for (size_t c = 0; c < p->num_chunks; c++) {
        const size_t first = g;
        uint64_t samples = 0;
        for (size_t i = 0; i < p->chunks[c].num_seqs; i++) {
            const ctf__seq *q = p->chunk_seqs[c] + i;
            size_t missing = SIZE_MAX;
            /* Its length: the definesMBSize part's, else the largest over all. */
            uint32_t len = J->mb_part <= 0 ? q->samples : 0;
            for (size_t j = 0; j < np; j++) {
                size_t s = map_find(&J->parts[j].map, q->key);
                if (s == SIZE_MAX) {
                    missing = j;
                    break;
                }
                J->jseq[g * np + j] = s;
                const uint32_t o = seq_of(J->parts[j].src, s, NULL)->samples;
                if (J->mb_part < 0 || J->mb_part == (int)j + 1) len = CTF_MAX(len, o);
            }
            if (missing != SIZE_MAX) {
                J->src.dropped_sequences++;
                J->src.warnings++;
                /* The first 20 are shown, the rest summed up in one line below. */
                if (trace_level >= 1 && shown < 20) {
                    char name[CTF_ERROR_PATH_MAX];
                    part_name(J, missing, name, sizeof name);
                    ctf_error e;
                    ctf__fail(&e, CTF_OK,
                              (ctf__where){p->files[p->chunk_file[c]].path, q->line + 1, 1,
                                           (int64_t)q->offset},
                              "sequence key %" PRIu64 " has no match in %s; sequence dropped",
                              q->key, name);
                    if (log) log(log_user, CTF_SEV_WARNING, &e);
                }
                shown++;
                continue;
            }
            for (size_t j = 0; j < np; j++) used[j][J->jseq[g * np + j]] = 1;
            J->seqs[g] = *q;
            J->seqs[g].samples = len;
            J->plocal[g] = (uint32_t)i;
            samples += len;
            g++;
        }
        if (g == first) continue; /* every sequence of the chunk was dropped */
        J->chunks[nc] = p->chunks[c];
        J->chunks[nc].first_seq = first;
        J->chunks[nc].num_seqs = g - first;
        J->chunks[nc].samples = samples;
        J->pchunk[nc] = c;
        J->chunk_file[nc] = p->chunk_file[c];
        nc++;
    }
    for (size_t c = 0; c < nc; c++) J->chunk_seqs[c] = &J->seqs[J->chunks[c].first_seq];
    if (shown > 20 && trace_level >= 1) {
        ctf_error e;
        ctf__fail(&e, CTF_OK, (ctf__where){p->files[0].path, 0, 0, -1},
                  "%" PRIu64 " more sequences without a match in a joined deserializer were "
                  "dropped", shown - 20);
        if (log) log(log_user, CTF_SEV_WARNING, &e);
    }
    for (size_t j = 0; j < np; j++) {
        uint64_t unmatched = 0;
        for (size_t s = 0; s < J->parts[j].src->num_seqs; s++) unmatched += !used[j][s];
        J->src.keys_unmatched += unmatched;
        if (unmatched && trace_level >= 2) {
            char name[CTF_ERROR_PATH_MAX];
            part_name(J, j, name, sizeof name);
            ctf_error e;
            ctf__fail(&e, CTF_OK, CTF__NOWHERE,
                      "%" PRIu64 " sequences of %s have keys the primary deserializer lacks; "
                      "they are not read", unmatched, name);
            if (log) log(log_user, CTF_SEV_INFO, &e);
        }
    }
    J->src.keys_missing = J->src.dropped_sequences;
    J->src.chunks = J->chunks;
    J->src.num_chunks = nc;
    J->src.num_seqs = g;
    J->src.chunk_seqs = J->chunk_seqs;
    J->src.chunk_file = J->chunk_file;
    for (size_t c = 0; c < nc; c++) J->src.total_samples += J->chunks[c].samples;
    for (size_t j = 0; j < np; j++) CTF_FREE(used[j]);
    CTF_FREE(used);
    return 0;
oom:
    if (used)
        for (size_t j = 0; j < np; j++) CTF_FREE(used[j]);
    CTF_FREE(used);
    return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory joining the deserializers");
}

/*======================================================================
 * The part chunk cache
 *====================================================================*/

/* Part j's chunk jc, parsed: from the cache (one reference more) or read and parsed now. Waits
 * for a load of it in progress on another thread (such a load waits for nothing). */
static int part_acquire(join *J, size_t j, size_t jc, ctf__readbuf *rb,
                        const ctf__chunk_data **out, ctf_error *err)
{
    jpart *P = &J->parts[j];
    pthread_mutex_lock(&J->mu);
    for (;;) {
        if (P->cd[jc]) {
            P->refs[jc]++;
            *out = P->cd[jc];
            pthread_mutex_unlock(&J->mu);
            return 0;
        }
        if (!P->loading[jc]) break;
        pthread_cond_wait(&J->cv, &J->mu);
    }
    P->loading[jc] = 1;
    pthread_mutex_unlock(&J->mu);
    ctf__chunk_data *cd = NULL;
    int rc = P->src->load(P->src, rb, jc, NULL, &cd, err);
    pthread_mutex_lock(&J->mu);
    P->loading[jc] = 0;
    if (!rc) {
        P->cd[jc] = cd;
        P->refs[jc] = 1;
        *out = cd;
        J->held_chunks++;
        J->held_bytes += cd->bytes;
    }
    pthread_cond_broadcast(&J->cv);
    pthread_mutex_unlock(&J->mu);
    return rc;
}

static void part_release(join *J, size_t j, size_t jc)
{
    jpart *P = &J->parts[j];
    ctf__chunk_data *gone = NULL;
    pthread_mutex_lock(&J->mu);
    if (--P->refs[jc] == 0) {
        gone = P->cd[jc];
        P->cd[jc] = NULL;
        J->held_chunks--;
        J->held_bytes -= gone->bytes;
    }
    pthread_mutex_unlock(&J->mu);
    ctf__chunk_data_free(gone);
}

/* Releases the part chunks of the first `n` (sequence, part) pairs of joined chunk c, in the
 * order join_load acquired them. */
static void release_pairs(join *J, size_t c, size_t n)
{
    const size_t first = J->chunks[c].first_seq;
    for (size_t x = 0; x < n; x++) {
        size_t i = x / J->np, j = x % J->np;
        part_release(J, j,
                     ctf__source_chunk_of(J->parts[j].src, J->jseq[(first + i) * J->np + j]));
    }
}

static void join_held(ctf__source *src, size_t *chunks, size_t *bytes)
{
    join *J = (join *)src;
    pthread_mutex_lock(&J->mu);
    *chunks = J->held_chunks;
    *bytes = J->held_bytes;
    pthread_mutex_unlock(&J->mu);
}

static void on_joined_free(void *ctx, const ctf__chunk_data *cd)
{
    join *J = ctx;
    release_pairs(J, cd->chunk, J->chunks[cd->chunk].num_seqs * J->np);
}

/*======================================================================
 * Loading a joined chunk
 *====================================================================*/

static int add_problem(ctf__chunk_data *cd, const ctf__problem *pr)
{
    if (cd->num_problems == cd->problems_cap &&
        ctf__grow((void **)&cd->problems, &cd->problems_cap, cd->num_problems + 1,
                  sizeof *cd->problems))
        return CTF_ENOMEM;
    cd->problems[cd->num_problems++] = *pr;
    if (pr->sev == CTF_SEV_WARNING) cd->num_warnings++;
    if (pr->sev == CTF_SEV_INFO) cd->num_infos++;
    if (pr->sev == CTF_SEV_ERROR) cd->num_errors++;
    return 0;
}

/* Copies stream kk of part j for the joined chunk's sequences (each in its part chunk, jcd and
 * jlocal per (sequence, part)) into stream data of the joined chunk's own, column col. */
static int copy_part_stream(const join *J, ctf__chunk_data *cd, size_t j, size_t kk,
                            const ctf__chunk_data *const *jcd, const size_t *jlocal, size_t col)
{
    const size_t n = cd->num_seqs, np = J->np, elt = cd->elt;
    const size_t jns = J->part_ns[j];
    const ctf_stream_def *def = &J->streams[col];
    ctf__stream_data *out = &cd->streams[col];
    out->short_sample = -1;
    size_t samples = 0, nnz = 0;
    for (size_t i = 0; i < n; i++) {
        const ctf__chunk_data *pcd = jcd[i * np + j];
        const ctf__slice sl = pcd->slices[jlocal[i * np + j] * jns + kk];
        const ctf__stream_data *sd = &pcd->streams[kk];
        samples += sl.count;
        if (def->is_sparse && sl.count)
            nnz += (size_t)(sd->indptr[sl.first + sl.count] - sd->indptr[sl.first]);
    }
    const size_t dim = def->dim;
    if (def->is_sparse) {
        out->indptr = CTF_MALLOC((samples + 1) * sizeof *out->indptr);
        out->indices = CTF_MALLOC((nnz ? nnz : 1) * sizeof *out->indices);
        out->values = CTF_MALLOC((nnz ? nnz : 1) * elt);
        if (!out->indptr || !out->indices || !out->values) return CTF_ENOMEM;
        out->indptr_cap = samples + 1;
        out->indices_cap = out->values_cap = nnz ? nnz : 1;
        out->indptr[0] = 0;
    } else {
        out->values = CTF_MALLOC((samples ? samples : 1) * dim * elt);
        if (!out->values) return CTF_ENOMEM;
        out->values_cap = (samples ? samples : 1) * dim;
    }
    size_t at = 0, at_nz = 0;
    for (size_t i = 0; i < n; i++) {
        const ctf__chunk_data *pcd = jcd[i * np + j];
        const ctf__slice sl = pcd->slices[jlocal[i * np + j] * jns + kk];
        const ctf__stream_data *sd = &pcd->streams[kk];
        cd->slices[i * cd->num_streams + col] = (ctf__slice){(uint32_t)at, sl.count};
        if (def->is_sparse) {
            for (uint32_t t = 0; t < sl.count; t++) {
                int64_t b = sd->indptr[sl.first + t], e = sd->indptr[sl.first + t + 1];
                size_t m = (size_t)(e - b);
                memcpy(out->indices + at_nz, sd->indices + b, m * sizeof *out->indices);
                memcpy((char *)out->values + at_nz * elt,
                       (const char *)sd->values + (size_t)b * elt, m * elt);
                at_nz += m;
                out->indptr[at + t + 1] = (int64_t)at_nz;
            }
        } else {
            memcpy((char *)out->values + at * dim * elt,
                   (const char *)sd->values + (size_t)sl.first * dim * elt,
                   (size_t)sl.count * dim * elt);
            /* A sample cut short by the end of its file (at most one is kept per stream). */
            if (sd->short_sample >= (int64_t)sl.first &&
                sd->short_sample < (int64_t)sl.first + sl.count && out->short_sample < 0) {
                out->short_sample = (int64_t)(at + (size_t)(sd->short_sample - sl.first));
                out->short_count = sd->short_count;
            }
        }
        at += sl.count;
    }
    out->samples = samples;
    out->nnz = nnz;
    return 0;
}

/* Part j's problems that concern its sequence js (by byte offset, within the sequence's
 * bytes), added to cd; a fatal one is added last by the caller. */
static int add_part_problems(const join *J, ctf__chunk_data *cd, size_t j,
                             const ctf__chunk_data *pcd, size_t js)
{
    const ctf__source *s = J->parts[j].src;
    size_t jc;
    const ctf__seq *q = seq_of(s, js, &jc);
    const ctf__chunk *ch = &s->chunks[jc];
    const size_t li = js - ch->first_seq;
    const uint64_t b = q->offset;
    const uint64_t e = li + 1 < ch->num_seqs ? q[1].offset : ch->offset + ch->size;
    const size_t last = pcd->fatal ? pcd->num_problems - 1 : pcd->num_problems;
    for (size_t x = 0; x < last; x++) {
        const ctf__problem *pr = &pcd->problems[x];
        if (pr->err.offset < 0 || (uint64_t)pr->err.offset < b || (uint64_t)pr->err.offset >= e)
            continue;
        if (add_problem(cd, pr)) return CTF_ENOMEM;
    }
    return 0;
}

static int join_load(ctf__source *src, ctf__readbuf *rb, size_t c, ctf__bufpool *pool,
                     ctf__chunk_data **out, ctf_error *err)
{
    join *J = (join *)src;
    const size_t n = J->chunks[c].num_seqs, first = J->chunks[c].first_seq, np = J->np;
    const size_t NS = J->total_ns, pns = J->prim_ns;
    *out = NULL;
    ctf__chunk_data *pcd = NULL, *cd = NULL;
    const ctf__chunk_data **jcd = CTF_CALLOC(n * np, sizeof *jcd);
    size_t *jlocal = CTF_CALLOC(n * np, sizeof *jlocal);
    size_t got = 0;
    int rc = 0;
    if (!jcd || !jlocal) goto oom;
    rc = J->prim->load(J->prim, rb, J->pchunk[c], pool, &pcd, err);
    if (rc) goto done;
    /* The primary's bytes are parsed: rb is free for the parts' chunks. */
    for (; got < n * np; got++) {
        size_t i = got / np, j = got % np, jc;
        const size_t js = J->jseq[(first + i) * np + j];
        (void)seq_of(J->parts[j].src, js, &jc);
        rc = part_acquire(J, j, jc, rb, &jcd[got], err);
        if (rc) goto done;
        jlocal[got] = js - J->parts[j].src->chunks[jc].first_seq;
    }
    cd = CTF_CALLOC(1, sizeof *cd);
    if (!cd) goto oom;
    cd->chunk = c;
    cd->num_seqs = n;
    cd->num_streams = NS;
    cd->elt = pcd->elt;
    cd->pool = pcd->pool; /* the primary's reference, with its buffers */
    pcd->pool = NULL;
    cd->streams = CTF_CALLOC(NS, sizeof *cd->streams);
    cd->slices = CTF_CALLOC(n * NS, sizeof *cd->slices);
    cd->dropped = CTF_CALLOC(n, 1);
    cd->dropped_samples = CTF_CALLOC(NS, sizeof *cd->dropped_samples);
    if (!cd->streams || !cd->slices || !cd->dropped || !cd->dropped_samples) goto oom;
    for (size_t k = 0; k < pns; k++) {
        cd->streams[k] = pcd->streams[k];
        memset(&pcd->streams[k], 0, sizeof pcd->streams[k]);
        cd->dropped_samples[k] = pcd->dropped_samples[k];
    }
    for (size_t i = 0; i < n; i++) {
        const size_t pl = J->plocal[first + i];
        memcpy(&cd->slices[i * NS], &pcd->slices[pl * pns], pns * sizeof *cd->slices);
        cd->dropped[i] = pcd->dropped[pl];
        for (size_t j = 0; j < np; j++) cd->dropped[i] |= jcd[i * np + j]->dropped[jlocal[i * np + j]];
    }
    for (size_t j = 0; j < np; j++)
        for (size_t kk = 0; kk < J->part_ns[j]; kk++)
            if (copy_part_stream(J, cd, j, kk, jcd, jlocal, J->part_base[j] + kk)) goto oom;
    /* Problems: the primary chunk's, then each sequence's in the parts; a fatal one last. */
    const size_t plast = pcd->fatal ? pcd->num_problems - 1 : pcd->num_problems;
    for (size_t x = 0; x < plast; x++)
        if (add_problem(cd, &pcd->problems[x])) goto oom;
    cd->num_warnings += pcd->num_warnings - CTF_MIN(pcd->num_warnings,
                                                    (uint64_t)CTF__MAX_STORED_WARNINGS);
    const ctf__problem *fatal = pcd->fatal ? &pcd->problems[pcd->num_problems - 1] : NULL;
    int fatal_code = pcd->fatal_code;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < np; j++) {
            const ctf__chunk_data *p = jcd[i * np + j];
            if (add_part_problems(J, cd, j, p, J->jseq[(first + i) * np + j])) goto oom;
            if (p->fatal && !fatal) {
                fatal = &p->problems[p->num_problems - 1];
                fatal_code = p->fatal_code;
            }
        }
    if (fatal) {
        if (add_problem(cd, fatal)) goto oom;
        cd->num_errors--; /* a fatal error is not counted against maxErrors */
        cd->fatal = true;
        cd->fatal_code = fatal_code;
    }
    cd->dropped_rows = pcd->dropped_rows;
    for (size_t i = 0; i < n; i++) cd->dropped_seqs += cd->dropped[i];
    size_t bytes = sizeof *cd + n * (NS * sizeof *cd->slices + 1);
    for (size_t k = 0; k < NS; k++) {
        const ctf__stream_data *sd = &cd->streams[k];
        bytes += sd->values_cap * cd->elt + sd->indices_cap * sizeof(int32_t) +
                 sd->indptr_cap * sizeof(int64_t);
    }
    cd->bytes = bytes + cd->problems_cap * sizeof(ctf__problem);
    cd->on_free = on_joined_free;
    cd->on_free_ctx = J;
    *out = cd;
    cd = NULL;
    got = 0; /* the references now belong to the joined chunk */
    goto done;
oom:
    rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory joining chunk %zu", c);
done:
    if (got) release_pairs(J, c, got);
    ctf__chunk_data_free(cd);
    ctf__chunk_data_free(pcd);
    CTF_FREE(jcd);
    CTF_FREE(jlocal);
    return rc;
}

/*======================================================================
 * Open / free
 *====================================================================*/

static void join_destroy(ctf__source *src)
{
    join *J = (join *)src;
    if (J->parts)
        for (size_t j = 0; j < J->np; j++) {
            jpart *P = &J->parts[j];
            if (P->cd)
                for (size_t c = 0; P->src && c < P->src->num_chunks; c++)
                    ctf__chunk_data_free(P->cd[c]);
            CTF_FREE(P->cd);
            CTF_FREE(P->refs);
            CTF_FREE(P->loading);
            CTF_FREE(P->map.keys);
            CTF_FREE(P->map.seq);
            CTF_FREE(P->mat);
            CTF_FREE(P->mat_cs);
            ctf__source_free(P->src);
        }
    ctf__source_free(J->prim);
    if (J->sync_ok) {
        pthread_mutex_destroy(&J->mu);
        pthread_cond_destroy(&J->cv);
    }
    CTF_FREE(J->parts);
    CTF_FREE(J->part_base);
    CTF_FREE(J->part_ns);
    CTF_FREE(J->chunks);
    CTF_FREE(J->pchunk);
    CTF_FREE(J->seqs);
    CTF_FREE(J->chunk_seqs);
    CTF_FREE(J->chunk_file);
    CTF_FREE(J->plocal);
    CTF_FREE(J->jseq);
    CTF_FREE(J->fp);
    CTF_FREE(J->pmat);
    CTF_FREE(J->pmat_cs);
    CTF_FREE(J);
}

int ctf__join_open(ctf__source *primary, ctf__source **parts, size_t num_parts, int mb_part,
                   const char *const *origins, const ctf_stream_def *streams, size_t prim_ns,
                   const size_t *part_ns, ctf_log_fn log, void *log_user, int trace_level,
                   ctf__source **out, ctf_error *err)
{
    *out = NULL;
    int rc;
    join *J = CTF_CALLOC(1, sizeof *J);
    if (!J) {
        ctf__source_free(primary);
        for (size_t j = 0; j < num_parts; j++) ctf__source_free(parts[j]);
        CTF_FREE(parts);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    J->src.load = join_load;
    J->src.seqs = ctf__source_seqs_mem;
    J->src.held = join_held;
    J->src.destroy = join_destroy;
    J->prim = primary;
    J->np = num_parts;
    J->mb_part = mb_part;
    J->streams = streams;
    J->prim_ns = prim_ns;
    J->parts = CTF_CALLOC(num_parts, sizeof *J->parts);
    J->part_base = CTF_MALLOC(num_parts * sizeof *J->part_base);
    J->part_ns = CTF_MALLOC(num_parts * sizeof *J->part_ns);
    if (!J->parts || !J->part_base || !J->part_ns) {
        if (J->parts)
            for (size_t j = 0; j < num_parts; j++) J->parts[j].src = parts[j];
        else
            for (size_t j = 0; j < num_parts; j++) ctf__source_free(parts[j]);
        CTF_FREE(parts);
        join_destroy(&J->src);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    size_t base = prim_ns, nfp = primary->num_fp_files;
    for (size_t j = 0; j < num_parts; j++) {
        J->parts[j].src = parts[j];
        J->parts[j].origin = origins[j];
        J->part_base[j] = base;
        J->part_ns[j] = part_ns[j];
        base += part_ns[j];
        nfp += parts[j]->num_fp_files;
    }
    CTF_FREE(parts);
    J->total_ns = base;
    pthread_mutex_init(&J->mu, NULL);
    pthread_cond_init(&J->cv, NULL);
    J->sync_ok = true;
    J->fp = CTF_MALLOC(nfp * sizeof *J->fp);
    if (!J->fp) goto oom;
    nfp = 0;
    for (size_t f = 0; f < primary->num_fp_files; f++) J->fp[nfp++] = primary->fp_files[f];
    /* The fingerprint covers every deserializer's files, in order. */
    uint64_t h = primary->hash;
    J->src.total_bytes = primary->total_bytes;
    J->src.warnings = primary->warnings;
    for (size_t j = 0; j < num_parts; j++) {
        jpart *P = &J->parts[j];
        for (size_t f = 0; f < P->src->num_fp_files; f++) J->fp[nfp++] = P->src->fp_files[f];
        uint64_t w[2] = {P->src->total_bytes, P->src->hash};
        h = ctf__hash_bytes(h, w, sizeof w);
        J->src.total_bytes += P->src->total_bytes;
        J->src.warnings += P->src->warnings;
        size_t nc = P->src->num_chunks ? P->src->num_chunks : 1;
        P->cd = CTF_CALLOC(nc, sizeof *P->cd);
        P->refs = CTF_CALLOC(nc, sizeof *P->refs);
        P->loading = CTF_CALLOC(nc, 1);
        if (!P->cd || !P->refs || !P->loading) goto oom;
        rc = materialize(P->src, &P->mat, &P->mat_cs, err);
        if (!rc) rc = build_map(J, j, err);
        if (rc) goto fail;
    }
    J->src.hash = h;
    J->src.fp_files = J->fp;
    J->src.num_fp_files = nfp;
    J->src.files = primary->files;
    J->src.num_files = primary->num_files;
    rc = materialize(primary, &J->pmat, &J->pmat_cs, err);
    if (!rc) rc = build_table(J, log, log_user, trace_level, err);
    if (rc) goto fail;
    *out = &J->src;
    return 0;
oom:
    rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
fail:
    join_destroy(&J->src);
    return rc;
}
