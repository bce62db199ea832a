/*
 * join.c -- several deserializers joined by sequence key (CNTK's composite reader), built on the
 * source seam: the primary corpus's chunks are the join's chunks, so the primary alone drives
 * randomization, the timeline, workers and checkpoints; every other deserializer ("part") is a
 * corpus of its own, with its own index, in which each primary sequence is looked up by key.
 *
 * At open (join_table.c): every deserializer's keys are sorted on disk and merged; each primary
 * sequence finds its key in every part (a key twice in a part is an error naming both places).
 * One that a part lacks is dropped from the chunk table before randomization (warned with its
 * key and the part, counted); keys found only in parts are counted. A sequence's length on the
 * timeline is its length in the part holding the definesMBSize stream, else the largest over
 * the parts. The joined sequences' records and links to the parts stay on disk, read per chunk:
 * the consumer's records through the set of chunks a corpus keeps too (seqset.c), a load's links
 * with one read.
 *
 * Loading chunk c: the primary chunk is loaded through the primary corpus, every part chunk
 * holding one of its sequences is taken from a reference-counted cache (read and parsed on
 * first need), and the sequences' streams are put together into one chunk of every stream
 * (the primary's buffers are moved, the parts' samples copied). The part chunks stay referenced
 * until the joined chunk is freed, so a part chunk is held while a held primary chunk (in the
 * window or parsed ahead) needs it, and freed when none does. A part's problems are reported
 * with the joined chunk whose sequence they concern, so that they come in timeline order.
 */
#include "join.h"

#include <pthread.h>

typedef struct jpart {
    ctf__source *src;
    const char *origin;
    ctf__chunk_data **cd;  /* per chunk: parsed, while refs > 0 */
    uint32_t *refs;
    uint8_t *loading;
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
    ctf__jtable tab;       /* the chunk table; records and links on disk */
    ctf__source_file *fp;  /* every file, the primary's first */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool sync_ok;
    size_t held_chunks, held_bytes; /* part chunks in the cache (under mu) */
    ctf__seqset sq;        /* the records of the chunks the consumer works in */
} join;

/* A joined chunk's part chunks, released when it is freed. */
typedef struct jheld {
    join *J;
    size_t n;
    struct jheld_ref {
        size_t j, jc;
        bool fresh; /* loaded for this joined chunk: its chunk-wide problems go with it */
    } r[];
} jheld;

static int join_fill(void *ctx, size_t c, ctf__seqbuf *out, ctf_error *err)
{
    const join *J = ctx;
    const ctf__chunk *ch = &J->tab.chunks[c];
    return ctf__jstore_read(&J->tab.seqs, out->p, ch->num_seqs * sizeof *out->p,
                            (uint64_t)ch->first_seq * sizeof *out->p, err);
}

/* Chunk c's records for the consumer, from the set or read from the join's table into it. */
static int join_seqs(ctf__source *src, size_t c, const ctf__seq **out, ctf_error *err)
{
    join *J = (join *)src;
    return ctf__seqset_get(&J->sq, c, J->tab.chunks[c].num_seqs, join_fill, J, out, err);
}

/*======================================================================
 * The part chunk cache
 *====================================================================*/

/* Part j's chunk jc, parsed: from the cache (one reference more) or read and parsed now
 * (*fresh). Waits for a load of it in progress on another thread (such a load waits for
 * nothing). */
static int part_acquire(join *J, size_t j, size_t jc, ctf__readbuf *rb, const ctf__chunk_data **out,
                        bool *fresh, ctf_error *err)
{
    *fresh = false;
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
        *fresh = true;
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

static void join_held(ctf__source *src, size_t *chunks, size_t *bytes)
{
    join *J = (join *)src;
    pthread_mutex_lock(&J->mu);
    *chunks = J->held_chunks;
    *bytes = J->held_bytes;
    pthread_mutex_unlock(&J->mu);
}

static void release_held(join *J, const jheld *h, size_t n)
{
    for (size_t x = 0; x < n; x++) part_release(J, h->r[x].j, h->r[x].jc);
}

static void on_joined_free(void *ctx, const ctf__chunk_data *cd)
{
    CTF_UNUSED(cd);
    jheld *h = ctx;
    release_held(h->J, h, h->n);
    CTF_FREE(h);
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
            char *dst = (char *)out->values + at * dim * elt;
            if (!sd->dense_off) {
                memcpy(dst, (const char *)sd->values + (size_t)sl.first * dim * elt,
                       (size_t)sl.count * dim * elt);
            } else {
                /* Rows stored short or apart (a view of a binary file): one at a time. */
                for (uint32_t t = 0; t < sl.count; t++, dst += dim * elt) {
                    const size_t len = ctf__dense_len(sd, dim, sl.first + t) * elt;
                    if (len)
                        memcpy(dst,
                               (const char *)sd->values +
                                   ctf__dense_at(sd, dim, sl.first + t) * elt,
                               len);
                    memset(dst + len, 0, dim * elt - len);
                }
            }
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

/* Part j's problems that concern one of its sequences (by byte offset, within the sequence's
 * bytes [b, e)), or with b == UINT64_MAX those of the chunk as a whole (no offset: a chunk
 * cache that could not store it), added to cd; a fatal one is added last by the caller. */
static int add_part_problems(ctf__chunk_data *cd, const ctf__chunk_data *pcd, uint64_t b,
                             uint64_t e)
{
    const size_t last = pcd->fatal ? pcd->num_problems - 1 : pcd->num_problems;
    for (size_t x = 0; x < last; x++) {
        const ctf__problem *pr = &pcd->problems[x];
        const bool whole = pr->err.offset < 0;
        if (whole != (b == UINT64_MAX) ||
            (!whole && ((uint64_t)pr->err.offset < b || (uint64_t)pr->err.offset >= e)))
            continue;
        if (add_problem(cd, pr)) return CTF_ENOMEM;
    }
    return 0;
}

/* Acquires, in first-need order, each part chunk that one of the n joined sequences (links)
 * needs, once: jcd/jlocal per (sequence, part), the chunks acquired in *held. */
static int acquire_parts(join *J, size_t c, const char *links, size_t n, ctf__readbuf *rb,
                         const ctf__chunk_data **jcd, size_t *jlocal, jheld *held, ctf_error *err)
{
    const size_t np = J->np, pairs = n * np, lb = J->tab.link_bytes;
    size_t cap = 16;
    while (cap < 2 * pairs) cap *= 2;
    size_t *slot = CTF_MALLOC(cap * sizeof *slot); /* (part, chunk) -> index into held, open
                                                      addressing */
    if (!slot)
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory joining chunk %zu", c);
    memset(slot, 0xff, cap * sizeof *slot);
    int rc = 0;
    for (size_t x = 0; x < pairs; x++) {
        const size_t i = x / np, j = x % np;
        ctf__jref ref;
        memcpy(&ref, links + i * lb + 8 + j * sizeof ref, sizeof ref);
        const ctf__source *ps = J->parts[j].src;
        const size_t jc = ctf__source_chunk_of(ps, (size_t)ref.js);
        size_t h = (jc * 0x9E3779B97F4A7C15ull + j) >> 7 & (cap - 1);
        while (slot[h] != SIZE_MAX && (held->r[slot[h]].j != j || held->r[slot[h]].jc != jc))
            h = (h + 1) & (cap - 1);
        if (slot[h] == SIZE_MAX) {
            const ctf__chunk_data *got;
            bool fresh;
            rc = part_acquire(J, j, jc, rb, &got, &fresh, err);
            if (rc) break;
            slot[h] = held->n;
            held->r[held->n++] = (struct jheld_ref){j, jc, fresh};
            jcd[x] = got;
        } else {
            /* Held already: the pointer is the one acquired (refs keep it). */
            const struct jheld_ref *r = &held->r[slot[h]];
            pthread_mutex_lock(&J->mu);
            jcd[x] = J->parts[r->j].cd[r->jc];
            pthread_mutex_unlock(&J->mu);
        }
        jlocal[x] = (size_t)ref.js - ps->chunks[jc].first_seq;
    }
    CTF_FREE(slot);
    return rc;
}

static int join_load(ctf__source *src, ctf__readbuf *rb, size_t c, ctf__bufpool *pool,
                     ctf__chunk_data **out, ctf_error *err)
{
    join *J = (join *)src;
    const size_t n = J->tab.chunks[c].num_seqs, first = J->tab.chunks[c].first_seq, np = J->np;
    const size_t NS = J->total_ns, pns = J->prim_ns, lb = J->tab.link_bytes;
    *out = NULL;
    ctf__chunk_data *pcd = NULL, *cd = NULL;
    const ctf__chunk_data **jcd = CTF_CALLOC(n * np, sizeof *jcd);
    size_t *jlocal = CTF_CALLOC(n * np, sizeof *jlocal);
    char *links = CTF_MALLOC(n * lb);
    jheld *held = CTF_MALLOC(sizeof *held + n * np * sizeof held->r[0]);
    int rc = 0;
    if (held) *held = (jheld){.J = J};
    if (!jcd || !jlocal || !links || !held) goto oom;
    rc = ctf__jstore_read(&J->tab.links, links, n * lb, (uint64_t)first * lb, err);
    if (!rc) rc = J->prim->load(J->prim, rb, J->tab.pchunk[c], pool, &pcd, err);
    /* The primary's bytes are parsed: rb is free for the parts' chunks. */
    if (!rc) rc = acquire_parts(J, c, links, n, rb, jcd, jlocal, held, err);
    if (rc) goto done;
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
        uint64_t pl;
        memcpy(&pl, links + i * lb, sizeof pl);
        memcpy(&cd->slices[i * NS], &pcd->slices[pl * pns], pns * sizeof *cd->slices);
        cd->dropped[i] = pcd->dropped[pl];
        for (size_t j = 0; j < np; j++)
            cd->dropped[i] |= jcd[i * np + j]->dropped[jlocal[i * np + j]];
    }
    for (size_t j = 0; j < np; j++)
        for (size_t kk = 0; kk < J->part_ns[j]; kk++)
            if (copy_part_stream(J, cd, j, kk, jcd, jlocal, J->part_base[j] + kk)) goto oom;
    /* Problems: the primary chunk's, then each sequence's in the parts; a fatal one last. */
    const size_t plast = pcd->fatal ? pcd->num_problems - 1 : pcd->num_problems;
    for (size_t x = 0; x < plast; x++)
        if (add_problem(cd, &pcd->problems[x])) goto oom;
    cd->num_warnings += pcd->num_warnings -
                        CTF_MIN(pcd->num_warnings, (uint64_t)CTF__MAX_STORED_WARNINGS);
    const ctf__problem *fatal = pcd->fatal ? &pcd->problems[pcd->num_problems - 1] : NULL;
    int fatal_code = pcd->fatal_code;
    /* A part chunk's problems of the whole chunk, once: with the joined chunk that loaded it. */
    for (size_t x = 0; x < held->n; x++) {
        const struct jheld_ref *r = &held->r[x];
        if (!r->fresh) continue;
        pthread_mutex_lock(&J->mu);
        const ctf__chunk_data *p = J->parts[r->j].cd[r->jc];
        pthread_mutex_unlock(&J->mu);
        if (add_part_problems(cd, p, UINT64_MAX, UINT64_MAX)) goto oom;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < np; j++) {
            const ctf__chunk_data *p = jcd[i * np + j];
            ctf__jref ref;
            memcpy(&ref, links + i * lb + 8 + j * sizeof ref, sizeof ref);
            if (add_part_problems(cd, p, ref.b, ref.e)) goto oom;
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
    cd->on_free_ctx = held; /* the part chunks' references now belong to the joined chunk */
    held = NULL;
    *out = cd;
    cd = NULL;
    goto done;
oom:
    rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory joining chunk %zu", c);
done:
    if (held) release_held(J, held, held->n);
    CTF_FREE(held);
    ctf__chunk_data_free(cd);
    ctf__chunk_data_free(pcd);
    CTF_FREE(jcd);
    CTF_FREE(jlocal);
    CTF_FREE(links);
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
            ctf__source_free(P->src);
        }
    ctf__source_free(J->prim);
    if (J->sync_ok) {
        pthread_mutex_destroy(&J->mu);
        pthread_cond_destroy(&J->cv);
    }
    ctf__jtable_free(&J->tab);
    ctf__seqset_free(&J->sq);
    CTF_FREE(J->parts);
    CTF_FREE(J->part_base);
    CTF_FREE(J->part_ns);
    CTF_FREE(J->fp);
    CTF_FREE(J);
}

int ctf__join_open(const ctf_config *cfg, ctf__source *primary, ctf__source **parts,
                   size_t num_parts, int mb_part, const char *const *origins,
                   const ctf_stream_def *streams, size_t prim_ns, const size_t *part_ns,
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
    J->tab.seqs.fd = J->tab.links.fd = -1;
    J->src.load = join_load;
    J->src.seqs = join_seqs;
    J->src.held = join_held;
    J->src.destroy = join_destroy;
    J->prim = primary;
    J->np = num_parts;
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
    for (size_t j = 0; j <= num_parts; j++) { /* the primary, then each part */
        const ctf__source *x = j ? J->parts[j - 1].src : primary;
        J->src.index_ns += x->index_ns;
        J->src.index_bytes += x->index_bytes;
        J->src.index_cache_hits += x->index_cache_hits;
        J->src.index_cache_misses += x->index_cache_misses;
    }
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
    }
    J->src.hash = h;
    J->src.fp_files = J->fp;
    J->src.num_fp_files = nfp;
    J->src.files = primary->files;
    J->src.num_files = primary->num_files;
    ctf__source **ps = CTF_MALLOC((num_parts ? num_parts : 1) * sizeof *ps);
    if (!ps) goto oom;
    for (size_t j = 0; j < num_parts; j++) ps[j] = J->parts[j].src;
    const ctf__jbuild in = {.prim = primary,
                            .parts = ps,
                            .origins = origins,
                            .np = num_parts,
                            .mb_part = mb_part,
                            .log = cfg->log,
                            .log_user = cfg->log_user,
                            .trace_level = cfg->trace_level};
    rc = ctf__jtable_build(&in, &J->tab, err);
    CTF_FREE(ps);
    if (rc) goto fail;
    J->src.dropped_sequences = J->src.keys_missing = J->tab.dropped;
    J->src.warnings += J->tab.dropped;
    J->src.keys_unmatched = J->tab.unmatched;
    J->src.chunks = J->tab.chunks;
    J->src.num_chunks = J->tab.num_chunks;
    J->src.num_seqs = J->tab.num_seqs;
    J->src.total_samples = J->tab.total_samples;
    J->src.chunk_file = J->tab.chunk_file;
    if (ctf__seqset_init(&J->sq, cfg, J->tab.num_chunks, J->tab.total_samples)) goto oom;
    *out = &J->src;
    return 0;
oom:
    rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
fail:
    join_destroy(&J->src);
    return rc;
}
