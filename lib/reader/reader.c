/*
 * reader.c -- the reader: wires source -> randomize -> chunk cache/parse -> pack into a
 * ctf_reader, and owns the timeline, the worker split and the error budget; state.c holds
 * its checkpoints (save, restore, fingerprint). It reads chunks and sequences through the
 * deserializer seam (ctf__source: a file, a corpus, a join by key), never a file directly.
 *
 * The timeline: sweep k is the source's sequences in the order the sweep generator (randomize.c,
 * window by window) gives for k; positions count index samples from 0 over the endless
 * repetition of sweeps. The reader's state is (sweep, slot, position) plus, with truncated
 * BPTT, the slots' partly delivered sequences: a checkpoint is the position (and those slots),
 * since the sweep order is a pure function of (file, configuration, seed, k).
 *
 * next(K) cuts the GLOBAL minibatch from the timeline (first sequence always, then while the
 * total stays <= K, stopping at the first that does not fit), then keeps the sequences this
 * worker owns: with randomization, those whose chunk's position in the sweep that is current
 * after the cut is r mod N (docs/design.md says why "after"); without, the i-th sequence of a
 * sweep goes to worker i mod N. Every worker advances to the same position, and the union over
 * workers is the single-worker minibatch.
 *
 * Chunk residency and prefetch scheduling belong to the chunk cache (prefetch.c): the reader
 * tells it which chunks the timeline cut (ctf__cache_consumed) and which a BPTT slot holds
 * (_pin/_unpin), and asks it for chunks (ctf__cache_get); the cache decides what is held, what
 * is evicted (the memory bound) and what the loader parses ahead.
 *
 * Problems a chunk's parse recorded are reported and counted the first time the consumer
 * reaches the chunk, in timeline order, and never again when the chunk is re-parsed in a later
 * sweep: the budget and the log do not depend on threads, prefetch depth or eviction.
 */
#include "reader.h"
#include "io/io.h"
#include "reader/quarantine.h"

#include <inttypes.h>
#include <stdio.h>

/*======================================================================
 * Configuration copy and logging
 *====================================================================*/

/* A log record the read-ahead made (it reaches the callback on the caller's thread). */
typedef struct held_log {
    ctf_severity sev;
    bool bad; /* a skipped record, for the bad-records file too */
    ctf_error err;
} held_log;

static void hold_log(ctf_reader *r, ctf_severity sev, const ctf_error *e, bool bad)
{
    struct read_ahead *ra = &r->ra;
    if (ra->num_logs == ra->logs_cap &&
        ctf__grow((void **)&ra->logs, &ra->logs_cap, ra->num_logs + 1, sizeof *ra->logs))
        return; /* dropped, as by a log callback that fails */
    ra->logs[ra->num_logs++] = (held_log){sev, bad, *e};
}

static void reader_log(const ctf_reader *r, ctf_severity sev, const ctf_error *e)
{
    if (r->ra.asked) { /* on the read-ahead thread: kept for the caller's */
        hold_log((ctf_reader *)r, sev, e, false);
        return;
    }
    if (r->cfg.log) r->cfg.log(r->cfg.log_user, sev, e);
}

/* Writes a skipped record to the bad-records file, on the caller's thread. */
static int quarantine(ctf_reader *r, const ctf_error *e)
{
    if (!r->quar) return 0;
    ctf_error werr;
    int rc = ctf__quar_add(r->quar, r->remote, r->src, e, &werr);
    if (rc) {
        r->err = werr;
        return rc;
    }
    r->stats.bad_records = ctf__quar_count(r->quar);
    return 0;
}

/* A record skipped for error e: logged, and written to the bad-records file. A read-ahead
 * holds both for the caller's thread (an undone one leaves no line in the file). */
static int skip_record(ctf_reader *r, const ctf_error *e)
{
    if (r->ra.asked) {
        hold_log(r, CTF_SEV_ERROR, e, true);
        return 0;
    }
    reader_log(r, CTF_SEV_ERROR, e);
    return quarantine(r, e);
}

/* The stream i of all deserializers' streams (the primary's first, then each join's). */
static const ctf_stream_def *any_stream(const ctf_config *cfg, size_t i)
{
    if (i < cfg->num_streams) return &cfg->streams[i];
    i -= cfg->num_streams;
    for (size_t j = 0;; j++) {
        if (i < cfg->joins[j].num_streams) return &cfg->joins[j].streams[i];
        i -= cfg->joins[j].num_streams;
    }
}

static int copy_config(ctf_reader *r, const ctf_config *cfg, ctf_error *err)
{
    r->cfg = *cfg;
    /* A few chunks ahead per thread: enough to keep every thread busy while the consumer
     * works through one. */
    if (r->cfg.prefetch_chunks == CTF_PREFETCH_AUTO)
        r->cfg.prefetch_chunks = 2 * r->cfg.num_threads + 2;
    size_t ns = cfg->num_streams;
    for (size_t j = 0; j < cfg->num_joins; j++) ns += cfg->joins[j].num_streams;
    r->path = ctf__strdup(cfg->num_mix     ? cfg->mix[0].paths[0]
                          : cfg->num_paths ? cfg->paths[0]
                                           : cfg->path);
    r->streams = CTF_CALLOC(ns, sizeof *r->streams);
    r->strings = CTF_CALLOC(ns * 2, sizeof *r->strings);
    if (!r->path || !r->streams || !r->strings) goto oom;
    r->cfg.num_streams = ns;
    for (size_t i = 0; i < ns; i++) {
        const ctf_stream_def *d = any_stream(cfg, i);
        r->streams[i] = *d;
        r->strings[2 * i] = ctf__strdup(d->name);
        if (!r->strings[2 * i]) goto oom;
        r->streams[i].name = r->strings[2 * i];
        if (d->alias && d->alias[0]) {
            r->strings[2 * i + 1] = ctf__strdup(d->alias);
            if (!r->strings[2 * i + 1]) goto oom;
        }
        r->streams[i].alias = r->strings[2 * i + 1];
    }
    r->cfg.path = r->path;
    r->cfg.streams = r->streams;
    /* The file lists and joins are read while opening and not kept. */
    r->cfg.paths = NULL;
    r->cfg.num_paths = 0;
    r->cfg.joins = NULL;
    r->cfg.num_joins = 0;
    return 0;
oom:
    return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory copying the configuration");
}

int ctf__reader_copy_config(ctf_reader *r, const ctf_config *cfg, ctf_error *err)
{
    return copy_config(r, cfg, err);
}

/*======================================================================
 * Sweeps and ownership
 *====================================================================*/

/* Ownership of a randomized chunk: its randomized position in the CURRENT sweep mod N. The
 * reader applies this after cutting a minibatch, so a minibatch that reaches or crosses a sweep
 * end is split by the next sweep's positions (what CNTK does, and what the conformance corpus
 * expects; docs/design.md). */
static bool chunk_owned(const ctf_reader *r, size_t c)
{
    return ctf_worker_owns(r->pos_of_chunk[c], r->num_workers, r->rank);
}

/* Makes sweep k current: a fresh generator (O(chunks)) or the look-ahead's, the cache's
 * per-chunk counters reset. */
static int load_sweep(ctf_reader *r, uint64_t k)
{
    int rc = ctf__cache_open_sweep(r->cache, k, &r->gen, &r->err);
    if (rc) return rc;
    r->pos_of_chunk = ctf__sweepgen_pos_of(r->gen);
    return 0;
}

/* The sequence in slot t of the current sweep and its chunk: the chunk at the sequence's home
 * position (no search of the chunk table per sequence). */
static int slot_seq(ctf_reader *r, size_t t, size_t *seq, size_t *chunk)
{
    size_t home;
    int rc = ctf__sweepgen_get(r->gen, t, seq, &home, &r->err);
    if (!rc) *chunk = ctf__sweepgen_chunk_at(r->gen)[home];
    return rc;
}

/*======================================================================
 * Prefetch and problems
 *====================================================================*/

int ctf__reader_seq(ctf_reader *r, size_t c, size_t seq, ctf__seqs_how how, const ctf__seq **out)
{
    const ctf__seq *q;
    int rc = ctf__cache_seqs(r->cache, c, how, &q, &r->err);
    if (!rc && !q) rc = ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE, "no records for chunk %zu", c);
    if (!rc) *out = q + (seq - r->src->chunks[c].first_seq);
    return rc;
}

/* What the cut needs of a sequence's record. */
typedef struct seq_brief {
    uint64_t key, line;
    uint32_t samples;
} seq_brief;

/* ctf__reader_seq for the cut: a regular chunk's sequence is known from its first record. */
static int reader_brief(ctf_reader *r, size_t c, size_t seq, ctf__seqs_how how, seq_brief *out)
{
    const ctf__seq *q;
    int rc = ctf__reader_seq(r, c, r->src->chunks[c].first_seq, how, &q);
    if (rc) return rc;
    const size_t local = seq - r->src->chunks[c].first_seq;
    if (ctf__cache_regular(r->cache, c)) {
        *out = (seq_brief){q->key + local, q->line + local, 1};
    } else {
        q += local;
        *out = (seq_brief){q->key, q->line, q->samples};
    }
    return 0;
}

/* How the timeline gets chunk c's records when it reaches one of its sequences: from the
 * chunk's load when this worker will load the chunk (loading it now if nobody has started: it
 * is needed for this minibatch or, for the sequence that ends the cut, the next one: one chunk
 * read ahead, so not with prefetch_chunks = 0), else made by the source (a chunk another worker
 * parses). In file order the i-th sequence of a sweep goes to worker i mod N. */
static ctf__seqs_how cut_how(const ctf_reader *r, size_t c)
{
    if (!r->cfg.prefetch_chunks) return CTF__SEQS_ANY;
    if (r->num_workers == 1) return CTF__SEQS_LOAD;
    if (r->randomized) return chunk_owned(r, c) ? CTF__SEQS_LOAD : CTF__SEQS_ANY;
    const ctf__chunk *ch = &r->src->chunks[c];
    const uint64_t mine = ctf_worker_first(ch->first_seq, r->num_workers, r->rank);
    return mine - ch->first_seq < ch->num_seqs ? CTF__SEQS_LOAD : CTF__SEQS_ANY;
}

/* Asks the cache to load ahead what this worker needs next (see ctf__cache_schedule). */
static void schedule_prefetch(ctf_reader *r)
{
    /* At the end of the data the cursor stands at the next sweep's start: nothing more will
     * be read, so nothing is loaded for it. */
    if (r->position >= r->limit) return;
    ctf__cache_schedule(r->cache, r->gen, r->cur_sweep, r->cur_slot, r->num_workers, r->rank);
}

/* The file chunk c lives in. */
static const char *chunk_path(const ctf_reader *r, size_t c)
{
    return r->src->files[r->src->chunk_file[c]].path;
}

/* A chunk the read-ahead committed (room for every chunk was made when it started). */
static void ahead_note_commit(ctf_reader *r, size_t c)
{
    if (r->ra.asked) r->ra.commits[r->ra.num_commits++] = c;
}

/* Reports chunk problems once, in timeline order; counts errors against maxErrors. */
static int commit_chunk(ctf_reader *r, const ctf__chunk_data *cd)
{
    if (r->committed[cd->chunk]) return cd->fatal ? r->err.code : 0;
    r->committed[cd->chunk] = 1;
    ahead_note_commit(r, cd->chunk);
    const size_t ns = r->cfg.num_streams;
    /* A chunk of whole one-sample sequences adds up without a pass over its sequences. */
    const bool whole = cd->one_sample && !cd->dropped_seqs;
    if (whole) {
        r->stats.sequences += cd->num_seqs;
        for (size_t k = 0; k < ns; k++) {
            const ctf__stream_data *sd = &cd->streams[k];
            r->stats.streams[k].samples += cd->num_seqs;
            r->stats.streams[k].nonzeros += r->streams[k].is_sparse
                                                ? (uint64_t)(sd->indptr[cd->num_seqs] -
                                                             sd->indptr[0])
                                                : (uint64_t)cd->num_seqs * r->streams[k].dim;
        }
    }
    for (size_t i = 0; !whole && i < cd->num_seqs; i++) {
        if (cd->dropped[i]) continue;
        r->stats.sequences++;
        for (size_t k = 0; k < ns; k++) {
            const ctf__slice *sl = &cd->slices[i * ns + k];
            r->stats.streams[k].samples += sl->count;
            if (r->streams[k].is_sparse) {
                const ctf__stream_data *sd = &cd->streams[k];
                if (sl->count)
                    r->stats.streams[k].nonzeros += (uint64_t)(sd->indptr[sl->first + sl->count] -
                                                               sd->indptr[sl->first]);
            } else {
                r->stats.streams[k].nonzeros += (uint64_t)sl->count * r->streams[k].dim;
            }
        }
    }
    for (size_t k = 0; k < ns; k++) r->stats.streams[k].dropped_samples += cd->dropped_samples[k];
    r->stats.dropped_rows += cd->dropped_rows;
    r->stats.dropped_sequences += cd->dropped_seqs;
    r->stats.warnings += cd->num_warnings;
    if (r->cfg.trace_level < 1) r->suppressed_warnings += cd->num_warnings;

    for (size_t i = 0; i < cd->num_problems; i++) {
        const ctf__problem *pr = &cd->problems[i];
        if (pr->sev != CTF_SEV_ERROR) {
            if ((int)pr->sev <= r->cfg.trace_level) reader_log(r, pr->sev, &pr->err);
            continue;
        }
        const bool fatal = cd->fatal && i + 1 == cd->num_problems;
        if (!fatal) r->stats.errors++;
        if (fatal || r->stats.errors > r->cfg.max_errors) {
            r->err = pr->err;
            r->err.code = fatal ? cd->fatal_code : CTF_EPARSE;
            char note[160] = "";
            if (r->suppressed_warnings)
                snprintf(note, sizeof note,
                         " (%" PRIu64 " warnings were not shown: set traceLevel = 1 to see them)",
                         r->suppressed_warnings);
            if (!fatal) {
                ctf__where w = {pr->err.path, pr->err.line, pr->err.column, pr->err.offset};
                char last[CTF_ERROR_MSG_MAX];
                memcpy(last, pr->err.message, sizeof last);
                ctf__fail(&r->err, CTF_EPARSE, w,
                          "%s; reached the maximum number of allowed errors (%" PRIu64
                          ") reading %s%s",
                          last, r->cfg.max_errors, chunk_path(r, cd->chunk), note);
            } else if (note[0]) {
                size_t n = strlen(r->err.message);
                snprintf(r->err.message + n, sizeof r->err.message - n, "%s", note);
            }
            return r->err.code;
        }
        int rc = skip_record(r, &pr->err);
        if (rc) return rc;
    }
    uint64_t stored = CTF_MIN(cd->num_warnings, (uint64_t)CTF__MAX_STORED_WARNINGS);
    if (cd->num_warnings > stored && r->cfg.trace_level >= 1) {
        ctf_error e;
        ctf__fail(&e, CTF_OK,
                  (ctf__where){chunk_path(r, cd->chunk), 0, 0,
                               (int64_t)r->src->chunks[cd->chunk].offset},
                  "%" PRIu64 " more warnings in this chunk were not shown",
                  cd->num_warnings - stored);
        reader_log(r, CTF_SEV_WARNING, &e);
    }
    return 0;
}

static int get_chunk(ctf_reader *r, size_t c, const ctf__chunk_data **out)
{
    const ctf__chunk_data *cd;
    int rc = ctf__cache_get(r->cache, c, &cd, &r->err);
    if (rc) return rc;
    rc = commit_chunk(r, cd);
    if (rc) return rc;
    *out = cd;
    return 0;
}

/*======================================================================
 * Open / free
 *====================================================================*/

void ctf_reader_cancel(ctf_reader *r)
{
    if (!r) return;
    ctf__remote_cancel(r->remote);
    if (r->mix)
        for (size_t p = 0; r->mix->parts && p < r->mix->num_parts; p++)
            ctf_reader_cancel(r->mix->parts[p]);
}

void ctf_reader_free(ctf_reader *r)
{
    if (!r) return;
    /* A thread of the reader's waiting on a server that never answers ends now, not after the
     * request's timeouts and retries. */
    ctf_reader_cancel(r);
    if (r->ra.thread) {
        ctf__ahead_free(r->ra.thread); /* waits for a job first */
        ctf_minibatch_free(r->ra.mb);
    }
    CTF_FREE(r->ra.logs);
    CTF_FREE(r->ra.commits);
    ctf__quar_close(r->quar); /* the bad-records file appears at its path now */
    if (r->mix) r->mix->ops->free(r->mix);
    ctf__mb_pool_close(r->mb_pool);
    ctf__cache_free(r->cache);
    CTF_FREE(r->committed);
    CTF_FREE(r->bp);
    ctf__sweepgen_free(r->gen);
    ctf__source_free(r->src);
    ctf__remote_unref(r->remote);
    if (r->strings)
        for (size_t i = 0; i < r->cfg.num_streams * 2; i++) CTF_FREE(r->strings[i]);
    CTF_FREE(r->strings);
    CTF_FREE(r->streams);
    CTF_FREE(r->path);
    CTF_FREE(r->picks);
    CTF_FREE(r->cut);
    CTF_FREE(r->perf_mem);
    CTF_FREE(r);
}

static uint64_t compute_limit(const ctf_config *cfg, uint64_t sweep_samples)
{
    if (cfg->max_samples == CTF_FULL_DATA_SWEEP) return sweep_samples;
    if (cfg->max_samples != CTF_INFINITELY_REPEAT) return cfg->max_samples;
    if (cfg->max_sweeps == CTF_FULL_DATA_SWEEP) return sweep_samples; /* one sweep, as above */
    if (cfg->max_sweeps != CTF_INFINITELY_REPEAT) {
        if (sweep_samples && cfg->max_sweeps > UINT64_MAX / sweep_samples) return UINT64_MAX;
        return cfg->max_sweeps * sweep_samples;
    }
    return UINT64_MAX;
}

/* Warns when the randomization window holds fewer chunks than there are workers: some workers
 * then get no data for long stretches. Called at open and whenever the worker count changes. */
static void warn_few_chunks(ctf_reader *r)
{
    const ctf_config *cfg = &r->cfg;
    const size_t nc = r->src->num_chunks; /* every file's, and a join's primary's */
    if (!r->randomized || r->num_workers <= 1 || cfg->trace_level < 1) return;
    const uint64_t window_chunks = cfg->window_in_samples ? nc : cfg->randomization_window;
    if (CTF_MIN(window_chunks, (uint64_t)nc) >= r->num_workers) return;
    ctf_error e;
    /* The advice follows the window's unit: a window counted in chunks that is smaller than
     * the data is widened; otherwise only smaller chunks give more of them. */
    if (!cfg->window_in_samples && nc >= r->num_workers)
        ctf__fail(&e, CTF_OK, (ctf__where){r->path, 0, 0, -1},
                  "the randomization window holds %llu chunks for %zu workers: some workers "
                  "will get no data for long stretches; raise randomizationWindow (now %llu "
                  "chunks; the data has %zu) to at least %zu",
                  (unsigned long long)window_chunks, r->num_workers,
                  (unsigned long long)cfg->randomization_window, nc, r->num_workers);
    else
        ctf__fail(&e, CTF_OK, (ctf__where){r->path, 0, 0, -1},
                  "the randomization window holds %llu chunks for %zu workers: some workers "
                  "will get no data for long stretches; lower chunkSizeInBytes (now %llu) to "
                  "get more chunks",
                  (unsigned long long)CTF_MIN(window_chunks, (uint64_t)nc), r->num_workers,
                  (unsigned long long)cfg->chunk_size_bytes);
    reader_log(r, CTF_SEV_WARNING, &e);
}

/* A CBF file names its streams: with none configured the reader delivers every stream of the
 * (first) file, and a stream of dim 0 takes the file's dimension and kind. *own (to free, with
 * *file) holds the completed streams when cfg needs them, and *use the configuration to open. */
static int cbf_streams(const ctf_config *cfg, ctf_config *use, ctf_stream_def **own,
                       ctf_stream_def **file, size_t *nfile, ctf_error *err)
{
    *use = *cfg;
    *own = *file = NULL;
    *nfile = 0;
    bool needs = cfg->num_streams == 0 || !cfg->streams;
    for (size_t k = 0; !needs && k < cfg->num_streams; k++) needs = cfg->streams[k].dim == 0;
    const char *path = cfg->num_paths && cfg->paths ? cfg->paths[0] : cfg->path;
    if (!needs || !path || !path[0]) return 0;
    /* A remote object is asked for its first bytes and header (a few range requests). */
    ctf__remote *rem = NULL;
    if (ctf__io_is_remote(path)) {
        ctf_error ignored;
        if (ctf__remote_new(&cfg->remote, &rem, &ignored)) return 0;
    }
    char **list = NULL;
    size_t len = 0;
    int rc = 0;
    if (cfg->num_paths) {
        rc = ctf__expand_paths(rem, cfg->paths, 1, &list, &len, err);
        if (!rc) path = list[0];
    }
    bool is_cbf = false;
    if (!rc) rc = ctf__cbf_file_streams(rem, path, &is_cbf, file, nfile, NULL, err);
    ctf__remote_unref(rem);
    ctf__free_paths(list, len);
    if (rc || !is_cbf) return rc == CTF_ENOMEM ? rc : 0; /* the usual checks will say more */
    const size_t n = cfg->num_streams ? cfg->num_streams : *nfile;
    if (!(*own = CTF_CALLOC(n, sizeof **own)))
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    for (size_t k = 0; k < n; k++) {
        if (!cfg->num_streams) {
            (*own)[k] = (*file)[k];
            continue;
        }
        ctf_stream_def d = cfg->streams[k];
        const char *want = ctf__stream_field(&d);
        for (size_t j = 0; d.dim == 0 && want && j < *nfile; j++)
            if (!strcmp((*file)[j].name, want)) {
                d.dim = (*file)[j].dim;
                d.is_sparse = (*file)[j].is_sparse;
            }
        if (d.dim == 0)
            return ctf__fail(err, CTF_EINVAL, (ctf__where){path, 0, 0, -1},
                             "input.%s: the CBF file has no stream '%s'", d.name ? d.name : "",
                             want ? want : "");
        (*own)[k] = d;
    }
    use->streams = *own;
    use->num_streams = n;
    return 0;
}

static int reader_open(const ctf_config *cfg, ctf_reader **out, ctf_error *err);

/* The reader of one source; ctf_reader_open (mix.c) hands it every configuration without a
 * mix. */
int ctf__reader_open_source(const ctf_config *cfg, ctf_reader **out, ctf_error *err)
{
    if (!out) return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "ctf_reader_open: out is NULL");
    *out = NULL;
    if (!cfg) return ctf_config_validate(cfg, err);
    ctf_config use;
    ctf_stream_def *own, *file;
    size_t nfile;
    int rc = cbf_streams(cfg, &use, &own, &file, &nfile, err);
    if (!rc) rc = reader_open(&use, out, err);
    CTF_FREE(own);
    ctf_cbf_streams_free(file, nfile);
    return rc;
}

static int reader_open(const ctf_config *cfg, ctf_reader **out, ctf_error *err)
{
    *out = NULL;
    /* The joins are checked by open.c, which knows their files. */
    int rc = ctf_config_validate(cfg, err);
    if (!rc) rc = ctf__joins_validate(cfg, err);
    if (rc) return rc;
    const uint64_t t_open = ctf__now_ns();
    ctf_reader *r = CTF_CALLOC(1, sizeof *r);
    if (!r) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    ctf__error_clear(&r->err);
    if (ctf__reader_perf_init(r, cfg->num_threads)) {
        CTF_FREE(r);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    rc = copy_config(r, cfg, err);
    if (rc) goto fail;
    r->pc = (ctf__parse_cfg){.path = r->path,
                             .streams = r->streams,
                             .num_streams = r->cfg.num_streams,
                             .precision = cfg->precision,
                             .frame_mode = cfg->frame_mode,
                             .trace_level = cfg->trace_level};
    rc = ctf__remote_new(&cfg->remote, &r->remote, err);
    if (rc) goto fail;
    rc = ctf__source_open(cfg, r->remote, &r->pc, &r->src, &r->join_hash, err);
    if (rc) goto fail;
    r->idx = r->src->files[0].idx;
    r->pc.line_mode = r->idx->line_mode;
    if (r->src->total_samples == 0) {
        rc = ctf__fail(err, CTF_EPARSE, (ctf__where){r->path, 0, 0, -1},
                       "the %s no samples of the definesMBSize stream, so minibatch "
                       "sizes cannot be counted",
                       r->src->num_files > 1 || cfg->num_joins ? "data hold" : "file holds");
        goto fail;
    }
    r->randomized = ctf__randomized(cfg);
    r->sweep_samples = r->src->total_samples;
    r->min_seq_samples = UINT64_MAX;
    for (size_t f = 0; f < r->src->num_files; f++)
        r->min_seq_samples = CTF_MIN(r->min_seq_samples, r->src->files[f].idx->min_seq_samples);
    r->limit = compute_limit(cfg, r->sweep_samples);
    r->num_workers = cfg->num_workers;
    r->rank = cfg->worker_rank;
    const size_t nc = r->src->num_chunks;
    r->committed = CTF_CALLOC(nc, 1);
    if (!r->committed) {
        rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
        goto fail;
    }
    if (cfg->bad_records && cfg->bad_records[0]) {
        rc = ctf__quar_open(cfg->bad_records, &r->quar, err);
        if (rc) goto fail;
    }
    r->stats.num_streams = r->cfg.num_streams;
    r->stats.warnings = r->src->warnings; /* e.g. a repeated sequence id found while indexing */
    r->stats.dropped_sequences = r->src->dropped_sequences; /* keys a join did not find */
    r->stats.keys_missing = r->src->keys_missing;
    r->stats.keys_unmatched = r->src->keys_unmatched;
    const ctf__cache_cfg cc = {.num_threads = cfg->num_threads,
                               .prefetch_chunks = r->cfg.prefetch_chunks,
                               .keep_data_in_memory = cfg->keep_data_in_memory,
                               .randomized = r->randomized,
                               .same_sweep_only = cfg->truncation_length != 0,
                               .window = cfg->randomization_window,
                               .window_in_samples = cfg->window_in_samples,
                               .seed = cfg->randomization_seed,
                               .sweep_samples = r->sweep_samples,
                               .limit = r->limit,
                               .stats = &r->stats,
                               .perf = r->perf};
    rc = ctf__cache_create(&r->pc, r->src, &cc, &r->cache, err);
    if (rc) goto fail;
    rc = load_sweep(r, 0);
    if (rc) {
        if (err) *err = r->err;
        goto fail;
    }
    warn_few_chunks(r);
    r->ended = r->position >= r->limit;
    schedule_prefetch(r);
    r->open_ns = ctf__now_ns() - t_open;
    *out = r;
    return 0;
fail:
    ctf_reader_free(r);
    return rc;
}

/*======================================================================
 * next()
 *====================================================================*/

static int fail_dead(ctf_reader *r, int rc)
{
    if (rc != CTF_EINVAL) r->dead = 1;
    return rc;
}

/* Packs the picks into *out, then drops what the timeline has passed and asks for what comes
 * next. Shared by ordinary and truncated-BPTT minibatches. */
static int finish_minibatch(ctf_reader *r, size_t np, uint64_t first_sweep, bool end_of_sweep,
                            ctf_minibatch **out)
{
    ctf__mb_info info = {r->position,
                         first_sweep,
                         end_of_sweep,
                         r->src->num_files > 1,
                         ctf__loader_run_parts,
                         ctf__cache_loader(r->cache),
                         r->cfg.num_threads + 1,
                         &r->mb_pool};
    /* Packing runs to the end of the request (ctf_reader_next reads the clock there). */
    r->pack_t0 = ctf__now_ns();
    int rc = ctf__pack(&r->pc, r->picks, np, &info, out, &r->err);
    if (rc) return fail_dead(r, rc);
    ctf__perf_add(r->perf, CTF__PERF_PACK_BYTES, ctf__minibatch_bytes(*out));
    ctf__perf_add(r->perf, CTF__PERF_MINIBATCHES, 1);
    ctf__cache_evict_passed(r->cache);
    schedule_prefetch(r);
    ctf__cache_update_stats(r->cache);
    return 0;
}

/* Asks the threads for every chunk the cut needs that nobody is loading yet, before the first
 * take. The look-ahead stops at prefetch_chunks, but a minibatch of a randomized sweep can need
 * every chunk of its window (with the default window, every chunk of a small file): taken one
 * after another, the chunks past the look-ahead would be parsed on the caller's thread alone
 * while the threads sit idle. Requested here, they are parsed by the threads and the caller
 * together (a take parses a still-queued chunk itself). These chunks are held for this
 * minibatch anyway, so the memory bound is unchanged; only a cut within one sweep does it (at a
 * sweep boundary the request flags already belong to the next sweep). */
static void request_cut(ctf_reader *r, size_t n, uint64_t first_sweep)
{
    if (!r->cfg.num_threads || first_sweep != r->cur_sweep) return;
    for (size_t i = 0; i < n; i++)
        if (r->cut[i].owned) ctf__cache_request(r->cache, r->cut[i].chunk);
}

/* The cut reached a chunk nobody was asked to load. A randomized minibatch needs most chunks of
 * its window (with the default window, every chunk of a small file, before the first
 * minibatch), and past the look-ahead they would be loaded on the caller's thread one after
 * another while the threads sit idle. So the chunks of every slot the rest of the cut can span
 * are asked for at once: `left` samples cover at most left / min_seq_samples + 1 slots, and no
 * more chunks are asked for than the window holds (or the look-ahead, if more). They are held
 * for this minibatch anyway; the caller loads its share while the threads load theirs. */
static void request_ahead(ctf_reader *r, uint64_t left)
{
    if (!r->cfg.num_threads || !r->cfg.prefetch_chunks) return;
    const size_t slots = ctf__sweepgen_num_slots(r->gen);
    uint64_t span = left / (r->min_seq_samples ? r->min_seq_samples : 1) + 1;
    size_t cap = r->cfg.window_in_samples ? 0 : (size_t)r->cfg.randomization_window;
    if (cap < r->cfg.prefetch_chunks) cap = r->cfg.prefetch_chunks;
    for (size_t t = r->cur_slot; t < slots && span && cap; t++, span--) {
        size_t seq, home;
        ctf_error ignored; /* optional work: a failed get changes nothing */
        if (ctf__sweepgen_get(r->gen, t, &seq, &home, &ignored)) return;
        const size_t c = ctf__sweepgen_chunk_at(r->gen)[home];
        if (!ctf__cache_asked(r->cache, c) && cut_how(r, c) == CTF__SEQS_LOAD) {
            ctf__cache_request(r->cache, c);
            cap--;
        }
    }
}

static int add_pick(ctf_reader *r, size_t np, ctf__pick pick)
{
    if (np == r->picks_cap &&
        ctf__grow((void **)&r->picks, &r->picks_cap, np + 1, sizeof *r->picks))
        return ctf__fail(&r->err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    r->picks[np] = pick;
    return 0;
}

/*======================================================================
 * The cut, one sequence at a time: begin, then peek at the next sequence and take it while it
 * fits, then pick this worker's share. next() drives it for one source; a mix (mix.c) drives
 * one cut per part and decides which part's next sequence comes next.
 *====================================================================*/

static void cut_begin(ctf_reader *r)
{
    r->cut_n = 0;
    r->cut_first_sweep = r->cur_sweep;
    r->cut_eos = false;
}

/* The timeline's next sequence, not taken yet: its index samples in *samples. `left` is what
 * the minibatch may still take (for the loads asked ahead); `walk`: only its length is wanted
 * (nothing is loaded for it). @return : 1, 0 at the limit, or a negative code. */
static int cut_peek(ctf_reader *r, uint64_t left, bool walk, uint64_t *samples)
{
    if (r->position >= r->limit) return 0;
    size_t seq, chunk;
    int rc = slot_seq(r, r->cur_slot, &seq, &chunk);
    if (rc) return rc;
    /* In a randomized sweep each sequence's index entry is a cache miss of its own: ask for
     * the one a few slots ahead (optional work: a failed get changes nothing). */
    if (!walk && r->randomized && r->cur_slot + 8 < ctf__sweepgen_num_slots(r->gen)) {
        size_t ahead;
        ctf_error ignored;
        size_t home, ac;
        const ctf__seq *aq;
        if (!ctf__sweepgen_get(r->gen, r->cur_slot + 8, &ahead, &home, &ignored) &&
            !ctf__cache_seqs(r->cache, ac = ctf__sweepgen_chunk_at(r->gen)[home], CTF__SEQS_HELD,
                             &aq, &ignored) &&
            aq && !ctf__cache_regular(r->cache, ac))
            CTF_PREFETCH(aq + (ahead - r->src->chunks[ac].first_seq));
    }
    const ctf__seqs_how how = walk ? CTF__SEQS_ANY : cut_how(r, chunk);
    if (how == CTF__SEQS_LOAD && r->randomized && !ctf__cache_asked(r->cache, chunk))
        request_ahead(r, left);
    seq_brief q;
    rc = reader_brief(r, chunk, seq, how, &q);
    if (rc) return rc;
    r->peek_seq = seq;
    r->peek_chunk = chunk;
    r->peek_samples = q.samples;
    *samples = q.samples;
    return 1;
}

/* Takes the sequence cut_peek saw into the cut and moves the timeline past it. */
static int cut_take(ctf_reader *r)
{
    const size_t n = r->cut_n;
    if (n == r->cut_cap && ctf__grow((void **)&r->cut, &r->cut_cap, n + 1, sizeof *r->cut))
        return ctf__fail(&r->err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    r->cut[n].seq = r->peek_seq;
    r->cut[n].chunk = r->peek_chunk;
    /* Without randomization the i-th sequence of a sweep goes to worker i mod N. */
    r->cut[n].owned = r->randomized || ctf_worker_owns(r->cur_slot, r->num_workers, r->rank);
    r->cut_n = n + 1;
    r->position += r->peek_samples;
    ctf__cache_consumed(r->cache, r->peek_chunk);
    if (++r->cur_slot == ctf__sweepgen_num_slots(r->gen)) {
        r->cut_eos = true;
        r->cur_sweep++;
        r->cur_slot = 0;
        /* Keep chunks of the new sweep's head; the old sweep's are all passed. */
        int rc = load_sweep(r, r->cur_sweep);
        if (rc) return rc;
    }
    return 0;
}

/* Decides which sequences of the cut this worker owns, loads their chunks (in timeline order)
 * and makes r->picks: *np of them; cut[i].pick is sequence i's pick, or SIZE_MAX. */
static int cut_pick(ctf_reader *r, size_t *np_out)
{
    const size_t n = r->cut_n;
    if (r->randomized)
        for (size_t i = 0; i < n; i++) r->cut[i].owned = chunk_owned(r, r->cut[i].chunk);
    request_cut(r, n, r->cut_first_sweep);
    size_t np = 0;
    for (size_t i = 0; i < n; i++) {
        r->cut[i].pick = SIZE_MAX;
        if (!r->cut[i].owned) continue;
        const ctf__chunk_data *cd;
        int rc = get_chunk(r, r->cut[i].chunk, &cd);
        if (rc) return rc;
        size_t local = r->cut[i].seq - r->src->chunks[r->cut[i].chunk].first_seq;
        /* dropped_seqs first: a chunk that dropped nothing (most) costs no miss per sequence. */
        if (cd->dropped_seqs && cd->dropped[local]) continue;
        seq_brief s;
        rc = reader_brief(r, r->cut[i].chunk, r->cut[i].seq, CTF__SEQS_ANY, &s);
        if (rc) return rc;
        r->cut[i].pick = np;
        rc = add_pick(r, np++,
                      (ctf__pick){cd, local, s.key, s.line, s.samples, 0, UINT32_MAX,
                                  r->src->chunk_file[r->cut[i].chunk]});
        if (rc) return rc;
    }
    *np_out = np;
    return 0;
}

void ctf__reader_cut_begin(ctf_reader *r) { cut_begin(r); }
int ctf__reader_cut_peek(ctf_reader *r, uint64_t left, bool walk, uint64_t *samples)
{
    return cut_peek(r, left, walk, samples);
}
int ctf__reader_cut_take(ctf_reader *r) { return cut_take(r); }
void ctf__reader_cut_close(ctf_reader *r) { ctf__sweepgen_release(r->gen, r->cur_slot); }
int ctf__reader_cut_pick(ctf_reader *r, size_t *np) { return cut_pick(r, np); }
void ctf__reader_cut_done(ctf_reader *r, bool more)
{
    ctf__cache_evict_passed(r->cache);
    if (more) schedule_prefetch(r);
    ctf__cache_update_stats(r->cache);
}

/*======================================================================
 * Truncated BPTT (rules 6.6)
 *
 * P = max(1, K div T) slots are fed whole sequences from the shared timeline, one after another;
 * each minibatch takes T consecutive samples from every slot (a slot that finishes a sequence
 * mid-window takes the next one), so sequences continue across minibatches. A sequence enters
 * the timeline position when it enters a slot. Its worker is decided then, as for ordinary
 * minibatches (randomized: its chunk's position in the sweep current after taking it; else its
 * index in the sweep mod N). A chunk stays resident while a slot holds one of its sequences.
 * If K changes, slots beyond the new P finish their sequence and then retire.
 *====================================================================*/

static void bptt_release(ctf_reader *r, bptt_slot *s)
{
    if (s->busy) ctf__cache_unpin(r->cache, s->chunk);
    s->busy = false;
}

/* Puts the next timeline sequence into slot s. @return : 1 taken, 0 at the limit, <0 error. */
static int bptt_fetch(ctf_reader *r, bptt_slot *s, bool *end_of_sweep)
{
    if (r->position >= r->limit) return 0;
    size_t seq, chunk;
    int rc = slot_seq(r, r->cur_slot, &seq, &chunk);
    if (rc) return rc;
    s->busy = true;
    s->skip = false;
    s->recheck = false;
    s->seq = seq;
    s->chunk = chunk;
    s->sweep = r->cur_sweep;
    s->tslot = r->cur_slot;
    s->offset = 0;
    const ctf__seq *q;
    rc = ctf__reader_seq(r, chunk, seq, cut_how(r, chunk), &q);
    if (rc) return rc;
    s->length = q->samples;
    ctf__cache_pin(r->cache, s->chunk);
    ctf__cache_consumed(r->cache, s->chunk);
    ctf__perf_add(r->perf, CTF__PERF_CUT_SEQS, 1);
    r->position += s->length;
    if (++r->cur_slot == ctf__sweepgen_num_slots(r->gen)) {
        *end_of_sweep = true;
        r->cur_sweep++;
        r->cur_slot = 0;
        rc = load_sweep(r, r->cur_sweep);
        if (rc) return rc;
    }
    ctf__sweepgen_release(r->gen, r->cur_slot);
    s->owner_pos = r->randomized ? r->pos_of_chunk[s->chunk] : s->tslot;
    return 1;
}

/* Checks, once per sequence, that its streams have equal lengths (a BPTT requirement). A slot
 * restored in the middle of a sequence (quiet) was checked, counted and reported before the
 * checkpoint: only its verdict is wanted again. */
static int bptt_check(ctf_reader *r, bptt_slot *s, const ctf__chunk_data *cd, size_t local,
                      bool quiet)
{
    const size_t ns = r->cfg.num_streams;
    const ctf__slice *sl = &cd->slices[local * ns];
    for (size_t k = 1; k < ns; k++) {
        if (sl[k].count == sl[0].count) continue;
        if (quiet) {
            s->skip = true;
            return 0;
        }
        const ctf__seq *q;
        int rc = ctf__reader_seq(r, s->chunk, s->seq, CTF__SEQS_ANY, &q);
        if (rc) return rc;
        ctf_error e;
        ctf__fail(&e, CTF_EPARSE,
                  (ctf__where){chunk_path(r, s->chunk), q->line + 1, 1, (int64_t)q->offset},
                  "truncation_length: sequence %llu has %u samples in stream '%s' but %u in "
                  "'%s' (truncated BPTT needs equal lengths); sequence dropped",
                  (unsigned long long)q->key, sl[0].count, r->streams[0].name, sl[k].count,
                  r->streams[k].name);
        r->stats.errors++;
        r->stats.dropped_sequences++;
        if (r->stats.errors > r->cfg.max_errors) {
            return ctf__fail(&r->err, CTF_EPARSE, (ctf__where){e.path, e.line, e.column, e.offset},
                             "%s; reached the maximum number of allowed errors (%" PRIu64
                             ") reading %s",
                             e.message, r->cfg.max_errors, e.path);
        }
        rc = skip_record(r, &e);
        if (rc) return rc;
        s->skip = true;
        return 0;
    }
    return 0;
}

static int bptt_next(ctf_reader *r, uint64_t num_samples, ctf_minibatch **out)
{
    const uint64_t T = r->cfg.truncation_length;
    size_t P = (size_t)CTF_MAX(num_samples / T, 1u);
    if (P > r->num_bp) {
        if (ctf__grow((void **)&r->bp, &r->bp_cap, P, sizeof *r->bp))
            return fail_dead(r, ctf__fail(&r->err, CTF_ENOMEM, CTF__NOWHERE, "out of memory"));
        memset(r->bp + r->num_bp, 0, (P - r->num_bp) * sizeof *r->bp);
        r->num_bp = P;
    }
    bool end_of_sweep = false, any = false;
    uint64_t first_sweep = r->cur_sweep;
    size_t np = 0;
    int rc;
    for (size_t j = 0; j < r->num_bp; j++) {
        bptt_slot *s = &r->bp[j];
        uint64_t taken = 0;
        while (taken < T) {
            if (!s->busy) {
                if (j >= P) break; /* retiring slot */
                rc = bptt_fetch(r, s, &end_of_sweep);
                if (rc < 0) return fail_dead(r, rc);
                if (rc == 0) break;
                /* The fetch may have moved to the next sweep: positions of later fetches in
                 * this call use it, as for ordinary minibatches. */
            }
            uint32_t cnt = (uint32_t)CTF_MIN(T - taken, (uint64_t)(s->length - s->offset));
            bool owned = ctf_worker_owns(s->owner_pos, r->num_workers, r->rank);
            any = true;
            if (owned) {
                const ctf__chunk_data *cd;
                rc = get_chunk(r, s->chunk, &cd);
                if (rc) return fail_dead(r, rc);
                size_t local = s->seq - r->src->chunks[s->chunk].first_seq;
                if ((s->offset == 0 || s->recheck) && !cd->dropped[local]) {
                    rc = bptt_check(r, s, cd, local, s->offset != 0);
                    if (rc) return fail_dead(r, rc);
                }
                s->recheck = false;
                if (!cd->dropped[local] && !s->skip) {
                    const ctf__seq *q;
                    rc = ctf__reader_seq(r, s->chunk, s->seq, CTF__SEQS_ANY, &q);
                    if (rc) return fail_dead(r, rc);
                    rc = add_pick(r, np++,
                                  (ctf__pick){cd, local, q->key, q->line, cnt, s->offset, cnt,
                                              r->src->chunk_file[s->chunk]});
                    if (rc) return fail_dead(r, rc);
                }
            }
            s->offset += cnt;
            taken += cnt;
            if (s->offset >= s->length) bptt_release(r, s);
        }
    }
    while (r->num_bp > P && !r->bp[r->num_bp - 1].busy) r->num_bp--;
    if (!any) {
        r->ended = true;
        return 0;
    }
    return finish_minibatch(r, np, first_sweep, end_of_sweep, out);
}

static int reader_next(ctf_reader *r, uint64_t num_samples, uint64_t period, ctf_minibatch **out);

/* One next() on this thread (the caller's or the read-ahead's): its stages are timed here, in
 * counters the caller's own clock (ctf_reader_next) does not touch. */
static int next_now(ctf_reader *r, uint64_t num_samples, uint64_t period, ctf_minibatch **out)
{
    const uint64_t t0 = ctf__now_ns(), pos = r->position;
    r->pack_t0 = 0;
    const int rc = reader_next(r, num_samples, period, out);
    const uint64_t t1 = ctf__perf_since(r->perf, CTF__PERF_WORK_NS, t0);
    if (r->pack_t0) ctf__perf_add(r->perf, CTF__PERF_PACK_NS, t1 - r->pack_t0);
    ctf__perf_add(r->perf, CTF__PERF_CUT_SAMPLES, r->position - pos);
    return rc;
}

/*======================================================================
 * Read-ahead: after next(n) hands over a minibatch, the same next(n) runs at once on the
 * read-ahead thread (ahead.c) while the caller works, as CNTK's reader shim prefetches the next
 * minibatch. The following next(n) takes its result; any other call that moves the reader
 * first puts it back where the caller is. So the minibatches handed over are exactly those of
 * a reader without read-ahead: only the time the work happens moves.
 *
 * While a read-ahead is asked the reader is its thread's: every call that reads the reader's
 * state waits for it first, the caller's position is kept in ra.from (a checkpoint is made
 * from it, state.c), and what it logs is kept for the caller's thread.
 *
 * Taken: its minibatch, status and log lines are the call's, as if the call had made them.
 * Dropped (any other call): it is undone. The chunks it committed are uncommitted and the
 * counts their commit added (ctf_stats' per-sequence and error-budget fields) are put back,
 * with the error record; its log lines are forgotten (the chunks report again when the
 * timeline reaches them); then a seek to ra.from rebuilds the timeline (a seek lands on the
 * state a run had there: that is what exact restarts rest on). So even an error it met, fatal
 * or past maxErrors, belongs to whichever call reaches it again, as without read-ahead.
 *
 * It runs for a reader of one source with prefetch threads (num_threads > 0) without
 * truncated BPTT: a mix drives its parts' cuts itself, and BPTT's slots are not a position.
 *====================================================================*/

static void ahead_run(void *arg)
{
    ctf_reader *r = arg;
    r->ra.mb = NULL;
    r->ra.rc = next_now(r, r->ra.num_samples, r->ra.period, &r->ra.mb);
}

/* Takes the asked read-ahead's result: its log lines go to the callback, and its skipped
 * records to the bad-records file, here. @return : 0, or the file's write error. */
static int ahead_take(ctf_reader *r)
{
    struct read_ahead *ra = &r->ra;
    ctf__ahead_wait(ra->thread);
    ra->asked = false;
    int rc = 0;
    for (size_t i = 0; i < ra->num_logs; i++) {
        reader_log(r, ra->logs[i].sev, &ra->logs[i].err);
        if (ra->logs[i].bad && !rc) rc = quarantine(r, &ra->logs[i].err);
    }
    ra->num_logs = 0;
    return rc;
}

/* The counters as the caller has them: those of the commits from before the read-ahead, and
 * the cache's counts of work done and of what is held now. The read-ahead has finished. */
static void ahead_stats(const ctf_reader *r, ctf_stats *out)
{
    const ctf_stats now = r->stats;
    *out = r->ra.stats0;
    out->chunks_loaded = now.chunks_loaded;
    out->chunks_resident = now.chunks_resident;
    out->chunks_resident_peak = now.chunks_resident_peak;
    out->bytes_resident = now.bytes_resident;
    out->bytes_resident_peak = now.bytes_resident_peak;
}

/* Undoes the asked read-ahead, if any, but for the timeline (the caller seeks next). */
static void ahead_undo(ctf_reader *r)
{
    struct read_ahead *ra = &r->ra;
    if (!ra->asked) return;
    ctf__ahead_wait(ra->thread);
    ra->asked = false;
    ra->num_logs = 0;
    ctf_minibatch_free(ra->mb);
    ra->mb = NULL;
    for (size_t i = 0; i < ra->num_commits; i++) r->committed[ra->commits[i]] = 0;
    ahead_stats(r, &r->stats);
    r->suppressed_warnings = ra->suppressed0;
    r->err = ra->err0;
    r->dead = 0; /* it was alive when asked */
}

static int seek_now(ctf_reader *r, uint64_t position);

int ctf__reader_take_back(ctf_reader *r)
{
    if (!r->ra.asked) return 0;
    ahead_undo(r);
    return seek_now(r, r->ra.from);
}

bool ctf__reader_ahead_asked(const ctf_reader *r) { return r->ra.asked; }
uint64_t ctf__reader_position_now(const ctf_reader *r)
{
    return r->ra.asked ? r->ra.from : r->position;
}

/* The minibatch of next(num_samples): the read-ahead's when it read that, else read here;
 * then the following one is asked for. */
static int ahead_next(ctf_reader *r, uint64_t num_samples, uint64_t period, ctf_minibatch **out)
{
    struct read_ahead *ra = &r->ra;
    if (!ra->thread && !ra->off) {
        ra->off = !r->cfg.num_threads || r->cfg.truncation_length || r->mix ||
                  ctf__ahead_create(ahead_run, r, &ra->thread) != 0;
    }
    int rc;
    if (ra->asked && ra->num_samples == num_samples && ra->period == period) {
        const int qrc = ahead_take(r);
        *out = ra->mb;
        ra->mb = NULL;
        rc = ra->rc;
        if (qrc) {
            ctf_minibatch_free(*out);
            *out = NULL;
            rc = qrc;
        }
    } else {
        rc = ctf__reader_take_back(r);
        if (!rc) rc = next_now(r, num_samples, period, out);
    }
    if (rc || !*out || r->ended || !ra->thread) return rc;
    if (!ra->commits && !(ra->commits = CTF_MALLOC(r->src->num_chunks * sizeof *ra->commits)))
        return 0; /* optional: without room to undo it, nothing is read ahead this time */
    ra->num_samples = num_samples;
    ra->period = period;
    ra->from = r->position;
    ra->num_commits = 0;
    ra->stats0 = r->stats;
    ra->suppressed0 = r->suppressed_warnings;
    ra->err0 = r->err;
    ra->asked = true;
    ctf__ahead_ask(ra->thread);
    return 0;
}

/* Times the call and the caller's work since the last one (the consumer's own time). */
int ctf_reader_next(ctf_reader *r, uint64_t num_samples, ctf_minibatch **out)
{
    return ctf_reader_next_within(r, num_samples, 0, out);
}

int ctf_reader_next_within(ctf_reader *r, uint64_t num_samples, uint64_t period,
                           ctf_minibatch **out)
{
    const uint64_t t0 = ctf__now_ns();
    if (r->last_return_ns) ctf__perf_add(r->perf, CTF__PERF_CONSUMER_NS, t0 - r->last_return_ns);
    *out = NULL;
    const int rc = ahead_next(r, num_samples, period, out);
    /* At the end of the data the bad-records file appears at its path (no read-ahead is asked
     * then, so r->ended is the caller's). */
    if (!rc && r->quar && !r->ra.asked && (!*out || r->ended)) (void)ctf__quar_commit(r->quar);
    r->last_return_ns = ctf__perf_since(r->perf, CTF__PERF_NEXT_NS, t0);
    ctf__perf_add(r->perf, CTF__PERF_NEXT_CALLS, 1);
    return rc;
}

static int reader_next(ctf_reader *r, uint64_t num_samples, uint64_t period, ctf_minibatch **out)
{
    *out = NULL;
    if (r->dead)
        return r->err.code ? r->err.code
                           : ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE, "reader is unusable");
    if (num_samples == 0)
        return ctf__fail(&r->err, CTF_EINVAL, CTF__NOWHERE, "num_samples: must be > 0 (got 0)");
    if (r->ended) return 0;
    /* The epoch's end, from the position this minibatch starts at (the caller's or, read ahead,
     * the one after the caller's minibatch). */
    if (period && num_samples) num_samples = CTF_MIN(num_samples, period - r->position % period);
    /* A request that spans more sweeps than anyone means (a typo, an unset size) would build a
     * minibatch until memory runs out when no limit ends the data: refused up front instead. */
    const uint64_t want = CTF_MAX(num_samples, (uint64_t)r->cfg.truncation_length);
    const uint64_t take = CTF_MIN(want, r->limit - CTF_MIN(r->position, r->limit));
    if (r->sweep_samples && take / r->sweep_samples > CTF_MAX_MB_SWEEPS)
        return ctf__fail(&r->err, CTF_EINVAL, CTF__NOWHERE,
                         "num_samples: a minibatch of %llu samples%s would span more than %u "
                         "sweeps of %s (%llu samples each); use a smaller minibatch or "
                         "truncation_length",
                         (unsigned long long)want, num_samples < want ? " (truncation_length)" : "",
                         CTF_MAX_MB_SWEEPS, r->path, (unsigned long long)r->sweep_samples);
    if (r->cfg.truncation_length) return bptt_next(r, num_samples, out);
    if (r->mix) return r->mix->ops->next(r, num_samples, out);

    /* 1. Cut the global minibatch from the timeline. */
    ctf_cut cut = ctf_cut_start(r->position, num_samples, r->limit);
    int rc;
    cut_begin(r);
    while (ctf_cut_open(&cut)) {
        uint64_t smp;
        rc = cut_peek(r, num_samples - CTF_MIN(cut.samples, num_samples), false, &smp);
        if (rc < 0) return fail_dead(r, rc);
        if (rc == 0 || !ctf_cut_offer(&cut, smp)) break;
        rc = cut_take(r);
        if (rc) return fail_dead(r, rc);
    }
    ctf__sweepgen_release(r->gen, r->cur_slot);
    ctf__perf_add(r->perf, CTF__PERF_CUT_SEQS, r->cut_n);
    if (r->cut_n == 0) {
        r->ended = true;
        return 0;
    }

    /* 2. Load this worker's chunks (in timeline order) and pick its sequences. */
    size_t np;
    rc = cut_pick(r, &np);
    if (rc) return fail_dead(r, rc);
    rc = finish_minibatch(r, np, r->cut_first_sweep, r->cut_eos, out);
    if (!rc && r->position >= r->limit) r->ended = true;
    return rc;
}

/*======================================================================
 * Position, workers, checkpoints
 *====================================================================*/

int ctf_reader_seek(ctf_reader *r, uint64_t position)
{
    /* A position refused leaves the reader where the caller is: back there first. */
    if (position > CTF_MAX_POSITION) {
        const int rc = ctf__reader_take_back(r);
        if (rc) return rc;
    }
    ahead_undo(r);
    return seek_now(r, position);
}

int ctf_reader_skip(ctf_reader *r, uint64_t num_samples)
{
    if (r->ra.asked) ctf__ahead_wait(r->ra.thread);
    if (r->dead) return r->err.code;
    if (r->cfg.truncation_length)
        return ctf__fail(&r->err, CTF_EINVAL, CTF__NOWHERE,
                         "skip: not with truncation_length (the slots' partly delivered "
                         "sequences have no place on a skipped stretch); seek instead");
    const uint64_t from = ctf__reader_position_now(r);
    if (num_samples > CTF_MAX_POSITION - from)
        return ctf__fail(&r->err, CTF_EINVAL, CTF__NOWHERE,
                         "skip: position %" PRIu64 " + %" PRIu64 " passes %" PRIu64, from,
                         num_samples, (uint64_t)CTF_MAX_POSITION);
    if (num_samples == 0) return 0;
    int rc = ctf_reader_seek(r, from + num_samples);
    if (rc) return rc;
    ctf__reader_note_skip(r, from, ctf__reader_position_now(r));
    return 0;
}

void ctf__reader_note_skip(ctf_reader *r, uint64_t from, uint64_t to)
{
    if (to <= from) return;
    r->skipped_samples += to - from;
    if (r->num_skipped && r->skipped[r->num_skipped - 1][1] == from) {
        r->skipped[r->num_skipped - 1][1] = to;
        return;
    }
    if (r->num_skipped == CTF__MAX_SKIPPED) {
        memmove(r->skipped, r->skipped + 1, (CTF__MAX_SKIPPED - 1) * sizeof r->skipped[0]);
        r->num_skipped--;
    }
    r->skipped[r->num_skipped][0] = from;
    r->skipped[r->num_skipped][1] = to;
    r->num_skipped++;
}

static int seek_now(ctf_reader *r, uint64_t position)
{
    if (r->dead) return r->err.code;
    /* Positions the timeline cannot reach (an endless stream would wrap its 64-bit position
     * and end without a word): refused, the reader unchanged. */
    if (position > CTF_MAX_POSITION)
        return ctf__fail(&r->err, CTF_EINVAL, CTF__NOWHERE,
                         "position: must be <= %" PRIu64 " (got %" PRIu64 ")",
                         (uint64_t)CTF_MAX_POSITION, position);
    if (r->mix) return r->mix->ops->seek(r, position);
    uint64_t k = position / r->sweep_samples;
    uint64_t within = position - k * r->sweep_samples;
    /* A fresh generator for sweep k (the current one may have released earlier slots). */
    ctf__sweepgen_free(r->gen);
    r->gen = NULL;
    ctf__cache_drop_next_sweep(r->cache);
    int rc = load_sweep(r, k);
    if (rc) return fail_dead(r, rc);
    /* Continue from the first sequence boundary at or after the position. The walk marks the
     * passed sequences as cut, so residency and eviction see the sweep as the run saw it. */
    uint64_t acc = 0;
    size_t slot = 0, seq, chunk;
    const size_t n = ctf__sweepgen_num_slots(r->gen);
    /* Every sequence one sample (the index's totals say so): a passed slot's samples are
     * known without its records, so the walk loads and parses nothing (the sweep's order
     * still gives each slot's chunk, for the residency counts). Longer sequences need their
     * chunk's records to learn their lengths, and so does a join (min_seq_samples is the
     * primary's; a joined sequence's length is the join's). */
    const bool one_sample = !r->cfg.num_joins && r->min_seq_samples >= 1 &&
                            r->src->total_samples == r->src->num_seqs;
    while (slot < n && acc < within) {
        rc = slot_seq(r, slot, &seq, &chunk);
        if (rc) return fail_dead(r, rc);
        if (one_sample)
            acc++;
        else {
            const ctf__seq *q;
            rc = ctf__reader_seq(r, chunk, seq, CTF__SEQS_ANY, &q);
            if (rc) return fail_dead(r, rc);
            acc += q->samples;
        }
        ctf__cache_consumed(r->cache, chunk);
        ctf__sweepgen_release(r->gen, ++slot);
    }
    if (slot == n) {
        k++;
        slot = 0;
        acc = 0;
        rc = load_sweep(r, k);
        if (rc) return fail_dead(r, rc);
    }
    r->cur_sweep = k;
    r->cur_slot = slot;
    r->position = k * r->sweep_samples + acc;
    r->ended = r->position >= r->limit;
    ctf__cache_restart(r->cache, slot);
    ctf__cache_evict_passed(r->cache);
    schedule_prefetch(r);
    return 0;
}

uint64_t ctf_reader_position(const ctf_reader *r) { return ctf__reader_position_now(r); }
/* No wait for a read-ahead: callers read the record after a call that failed, and a failed
 * call leaves none running. */
const ctf_error *ctf_reader_error(const ctf_reader *r) { return &r->err; }
const ctf_index *ctf_reader_index(const ctf_reader *r) { return r->idx; }
size_t ctf_reader_num_files(const ctf_reader *r)
{
    return r->mix ? r->mix->num_files : r->src->num_files;
}

const char *ctf_reader_file_path(const ctf_reader *r, size_t i)
{
    if (r->mix) return r->mix->ops->file_path(r, i);
    return i < r->src->num_files ? r->src->files[i].path : NULL;
}

const ctf_index *ctf_reader_file_index(const ctf_reader *r, size_t i)
{
    if (r->mix) return r->mix->ops->file_index(r, i);
    return i < r->src->num_files ? r->src->files[i].idx : NULL;
}

void ctf_reader_get_io_counters(const ctf_reader *r, ctf_io_counters *out)
{
    ctf__remote_counters(r->remote, out);
    /* A mix reads nothing itself: its parts' requests. */
    for (size_t p = 0; r->mix && r->mix->parts && p < r->mix->num_parts; p++) {
        if (!r->mix->parts[p]) continue;
        ctf_io_counters c;
        ctf_reader_get_io_counters(r->mix->parts[p], &c);
        out->requests += c.requests;
        out->retries += c.retries;
        out->bytes += c.bytes;
    }
}

void ctf_reader_get_stats(const ctf_reader *r, ctf_stats *stats)
{
    if (r->mix)
        r->mix->ops->stats(r, stats);
    else if (r->ra.asked) {
        ctf__ahead_wait(r->ra.thread);
        ahead_stats(r, stats);
    } else
        *stats = r->stats;
}

int ctf_reader_set_worker(ctf_reader *r, size_t num_workers, size_t rank)
{
    if (r->ra.asked) ctf__ahead_wait(r->ra.thread); /* its error record, the partition */
    int rc = ctf_workers_check(num_workers, rank, &r->err);
    if (rc) return rc;
    if (num_workers == r->num_workers && rank == r->rank) return 0;
    if (r->mix) return r->mix->ops->set_worker(r, num_workers, rank);
    rc = ctf__reader_take_back(r);
    if (rc) return rc;
    const bool changed = num_workers != r->num_workers;
    r->num_workers = num_workers;
    r->rank = rank;
    if (changed) warn_few_chunks(r);
    ctf__cache_restart(r->cache, r->cur_slot);
    schedule_prefetch(r);
    return 0;
}

/*======================================================================
 * For the checkpoint code (state.c)
 *====================================================================*/

int ctf__reader_fail_dead(ctf_reader *r, int rc) { return fail_dead(r, rc); }
void ctf__reader_evict_passed(ctf_reader *r) { ctf__cache_evict_passed(r->cache); }
void ctf__reader_schedule_prefetch(ctf_reader *r) { schedule_prefetch(r); }
void ctf__reader_bptt_release(ctf_reader *r, bptt_slot *s) { bptt_release(r, s); }
size_t ctf__reader_chunk_of_seq(const ctf_reader *r, size_t seq)
{
    return ctf__source_chunk_of(r->src, seq);
}
