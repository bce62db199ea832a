/*
 * mix.c -- a mix of data sets on one timeline: several part readers (each a file, a corpus or a
 * join, randomized and swept as if read alone) whose sequences are interleaved by weight. The
 * mix reader reads no data itself; it decides which part supplies each next sequence, drives
 * every part's cut (reader.c) and packs the picks of all parts into one minibatch in mixed
 * order, so the worker split, packing and limits behave as for one source.
 *
 * Which part goes next is a pure function of the parts' positions (samples taken) and the
 * weights: the lowest position / weight, ties to the lower part. Each part's position is its
 * own timeline position, so a checkpoint holds only the parts' positions (state.c), and a seek
 * replays the choice from the start of the timeline reading sequence lengths only.
 *
 * A mix's sweep ends when every part of weight > 0 has finished one more sweep of its own;
 * max_sweeps counts these, max_samples counts the mix's samples.
 *
 * The public ctf_reader_open is here: it opens a mix, or hands one source to reader.c. reader.c
 * and state.c reach the mix only through its ops table, so no file of the layer calls back.
 */
#include "reader.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>

/*======================================================================
 * The choice and the mix's sweep
 *====================================================================*/

/* The part that supplies the next sequence, given each part's samples taken. */
static size_t choose(const ctf__mix *m, const uint64_t *taken)
{
    size_t best = SIZE_MAX;
    double best_v = 0;
    for (size_t p = 0; p < m->num_parts; p++) {
        if (!(m->weights[p] > 0)) continue;
        const double v = (double)taken[p] / m->weights[p];
        if (best == SIZE_MAX || v < best_v) {
            best = p;
            best_v = v;
        }
    }
    return best;
}

/* Sweeps the mix has finished: the fewest any weighted part has finished. */
static uint64_t mix_sweep(const ctf_reader *r)
{
    const ctf__mix *m = r->mix;
    uint64_t s = UINT64_MAX;
    for (size_t p = 0; p < m->num_parts; p++)
        if (m->weights[p] > 0) s = CTF_MIN(s, m->parts[p]->cur_sweep);
    return s;
}

static bool at_end(const ctf_reader *r)
{
    return r->position >= r->limit || r->cur_sweep >= r->mix->max_sweeps;
}

/* A part failed: its error becomes the mix's; the mix can only be freed unless it was EINVAL. */
static int part_failed(ctf_reader *r, size_t p, int rc)
{
    r->err = r->mix->parts[p]->err;
    if (!r->err.code) r->err.code = rc;
    if (rc != CTF_EINVAL) r->dead = 1;
    return rc;
}

/*======================================================================
 * Open and free
 *====================================================================*/

static void mix_free(ctf__mix *m)
{
    if (!m) return;
    for (size_t p = 0; p < m->num_parts; p++)
        if (m->parts) ctf_reader_free(m->parts[p]);
    CTF_FREE(m->parts);
    CTF_FREE(m->weights);
    CTF_FREE(m->file_base);
    CTF_FREE(m->order);
    CTF_FREE(m->next_pick);
    CTF_FREE(m);
}

/* Part p's own configuration: the mix's settings with its data; it never ends by itself (the
 * mix applies the limits) and, with weight 0, parses nothing ahead. */
static ctf_config part_config(const ctf_config *cfg, size_t p)
{
    const ctf_mix_part *mp = &cfg->mix[p];
    ctf_config pc = *cfg;
    pc.mix = NULL;
    pc.num_mix = 0;
    pc.path = NULL;
    pc.paths = mp->paths;
    pc.num_paths = mp->num_paths;
    pc.joins = mp->joins;
    pc.num_joins = mp->num_joins;
    if (mp->streams) {
        pc.streams = mp->streams;
        pc.num_streams = mp->num_streams;
    }
    pc.skip_sequence_ids = cfg->skip_sequence_ids || mp->skip_sequence_ids;
    pc.max_samples = CTF_INFINITELY_REPEAT;
    pc.max_sweeps = CTF_INFINITELY_REPEAT;
    if (!(mp->weight > 0)) {
        pc.num_threads = 0;
        pc.prefetch_chunks = 0;
    }
    return pc;
}

/* Every part must deliver the mix's streams: same names, dims, storage, definesMBSize, order. */
static int check_part_streams(const ctf_reader *r, size_t p, ctf_error *err)
{
    const ctf_reader *q = r->mix->parts[p];
    const char *where = q->path;
    if (q->cfg.num_streams != r->cfg.num_streams)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                         "mix part %zu (%s): delivers %zu streams, the mix has %zu (every part "
                         "must deliver the mix's streams)",
                         p, where, q->cfg.num_streams, r->cfg.num_streams);
    for (size_t k = 0; k < r->cfg.num_streams; k++) {
        const ctf_stream_def *a = &q->streams[k], *b = &r->streams[k];
        if (strcmp(a->name, b->name) || a->dim != b->dim || a->is_sparse != b->is_sparse ||
            a->defines_mb_size != b->defines_mb_size)
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                             "mix part %zu (%s): stream %zu is '%s' (%s, dim %zu%s), the mix's "
                             "is '%s' (%s, dim %zu%s)",
                             p, where, k, a->name, a->is_sparse ? "sparse" : "dense", a->dim,
                             a->defines_mb_size ? ", definesMBSize" : "", b->name,
                             b->is_sparse ? "sparse" : "dense", b->dim,
                             b->defines_mb_size ? ", definesMBSize" : "");
    }
    return 0;
}

static uint64_t mix_hash(const ctf_config *cfg)
{
    uint64_t h = 0x6d69785f68617368ull;
    for (size_t p = 0; p < cfg->num_mix; p++) {
        uint64_t bits;
        memcpy(&bits, &cfg->mix[p].weight, sizeof bits);
        h = (h ^ bits) * 0x100000001b3ull;
        h = (h ^ (uint64_t)p) * 0x100000001b3ull;
    }
    return h ? h : 1;
}

static const ctf__mix_ops mix_ops;

/* A mix's sweep ends when its slowest weighted part finishes one: part p does after about
 * sweep_samples[p] * (sum of weights) / weight[p] samples of the mix. A weight so small against
 * the others that this passes 2^53 samples (where the choice's arithmetic stops being exact,
 * and a run would never get there) makes a sweep that never ends: refused while max_sweeps
 * bounds the run, saying which part and why. */
static int check_sweep_length(const ctf__mix *m, ctf_error *err)
{
    if (m->max_sweeps == UINT64_MAX) return 0;
    double all = 0;
    for (size_t p = 0; p < m->num_parts; p++)
        if (m->weights[p] > 0) all += m->weights[p];
    for (size_t p = 0; p < m->num_parts; p++) {
        if (!(m->weights[p] > 0)) continue;
        const double need = (double)m->parts[p]->sweep_samples * (all / m->weights[p]);
        if (need > 9007199254740992.0)
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                             "config.mix[%zu].weight: %g is so small against the others (%g in "
                             "all) that one sweep of the mix (every weighted part finishing one "
                             "of its own) would take about %.3g samples, more than 2^53; give it "
                             "a larger weight, weight 0 to leave it out, or bound the run by "
                             "max_samples with max_sweeps infinite",
                             p, m->weights[p], all, need);
    }
    return 0;
}

/* A mix: its own configuration copy and packing, its parts opened as readers of one source. */
static int mix_open(const ctf_config *cfg, ctf_reader **out, ctf_error *err)
{
    int rc = ctf_config_validate(cfg, err);
    if (rc) return rc;
    if (cfg->truncation_length)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                         "config.truncation_length: not supported for a mix (got %zu)",
                         cfg->truncation_length);
    const uint64_t t_open = ctf__now_ns();
    ctf_reader *r = CTF_CALLOC(1, sizeof *r);
    if (!r) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    ctf__error_clear(&r->err);
    /* One counter slot, the consumer's: the parts count their own loads (stats.c sums them). */
    if (ctf__reader_perf_init(r, 0)) {
        CTF_FREE(r);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    rc = ctf__reader_copy_config(r, cfg, err);
    if (rc) goto fail;
    r->cfg.mix = NULL;
    r->cfg.num_mix = 0;
    r->pc = (ctf__parse_cfg){.path = r->path,
                             .streams = r->streams,
                             .num_streams = r->cfg.num_streams,
                             .precision = cfg->precision,
                             .frame_mode = cfg->frame_mode,
                             .trace_level = cfg->trace_level};
    ctf__mix *m = r->mix = CTF_CALLOC(1, sizeof *m);
    const size_t np = cfg->num_mix;
    if (m) m->ops = &mix_ops; /* from here on, freeing the reader frees the mix */
    if (!m || !(m->parts = CTF_CALLOC(np, sizeof *m->parts)) ||
        !(m->weights = CTF_CALLOC(np, sizeof *m->weights)) ||
        !(m->file_base = CTF_CALLOC(np, sizeof *m->file_base)) ||
        !(m->next_pick = CTF_CALLOC(np, sizeof *m->next_pick))) {
        rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
        goto fail;
    }
    m->num_parts = np;
    for (size_t p = 0; p < np; p++) {
        const ctf_config pc = part_config(cfg, p);
        m->weights[p] = cfg->mix[p].weight;
        rc = ctf__reader_open_source(&pc, &m->parts[p], err);
        if (rc) {
            if (err) {
                char msg[CTF_ERROR_MSG_MAX];
                memcpy(msg, err->message, sizeof msg);
                snprintf(err->message, sizeof err->message, "mix part %zu: %.480s", p, msg);
            }
            goto fail;
        }
        rc = check_part_streams(r, p, err);
        if (rc) goto fail;
        m->file_base[p] = m->num_files;
        m->num_files += m->parts[p]->src->num_files;
    }
    m->hash = mix_hash(cfg);
    r->join_hash = m->hash; /* the weights and the number of parts join the fingerprint */
    r->idx = m->parts[0]->idx;
    r->randomized = ctf__randomized(cfg);
    r->sweep_samples = 0;
    const bool one = cfg->max_samples == CTF_FULL_DATA_SWEEP ||
                     cfg->max_sweeps == CTF_FULL_DATA_SWEEP;
    m->max_sweeps = one                                        ? 1
                    : cfg->max_sweeps == CTF_INFINITELY_REPEAT ? UINT64_MAX
                                                               : cfg->max_sweeps;
    r->limit = cfg->max_samples == CTF_INFINITELY_REPEAT || one ? UINT64_MAX : cfg->max_samples;
    rc = check_sweep_length(m, err);
    if (rc) goto fail;
    r->num_workers = cfg->num_workers;
    r->rank = cfg->worker_rank;
    r->stats.num_streams = r->cfg.num_streams;
    r->cur_sweep = mix_sweep(r);
    r->ended = at_end(r);
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

static int mix_next(ctf_reader *r, uint64_t num_samples, ctf_minibatch **out)
{
    ctf__mix *m = r->mix;
    const size_t P = m->num_parts;
    /* As for one source: a request spanning more sweeps of all the data than anyone means is
     * refused rather than built until memory runs out. */
    uint64_t all = 0;
    for (size_t p = 0; p < P; p++)
        if (m->weights[p] > 0) all += m->parts[p]->sweep_samples;
    const uint64_t take = CTF_MIN(num_samples, r->limit - CTF_MIN(r->position, r->limit));
    if (take / all > CTF_MAX_MB_SWEEPS)
        return ctf__fail(&r->err, CTF_EINVAL, CTF__NOWHERE,
                         "num_samples: a minibatch of %llu samples would span more than %u "
                         "sweeps of the mix's data (%llu samples over its weighted parts); use "
                         "a smaller minibatch",
                         (unsigned long long)num_samples, CTF_MAX_MB_SWEEPS,
                         (unsigned long long)all);
    for (size_t p = 0; p < P; p++) {
        ctf__reader_cut_begin(m->parts[p]);
        m->next_pick[p] = 0;
    }
    uint64_t taken[CTF_MAX_MIX_PARTS];
    for (size_t p = 0; p < P; p++) taken[p] = m->parts[p]->position;
    const uint64_t first_sweep = r->cur_sweep;
    ctf_cut cut = ctf_cut_start(r->position, num_samples, UINT64_MAX); /* at_end: the limits */
    size_t n = 0;
    int rc;
    /* 1. The cut: the chosen part's next sequence while it fits (the first always). */
    while (!at_end(r)) {
        const size_t p = choose(m, taken);
        ctf_reader *q = m->parts[p];
        uint64_t smp;
        rc = ctf__reader_cut_peek(q, num_samples - CTF_MIN(cut.samples, num_samples), false, &smp);
        if (rc < 0) return part_failed(r, p, rc);
        if (rc == 0 || !ctf_cut_offer(&cut, smp)) break;
        if (n == m->order_cap &&
            ctf__grow((void **)&m->order, &m->order_cap, n + 1, sizeof *m->order)) {
            r->dead = 1;
            return ctf__fail(&r->err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
        }
        const uint64_t sweep_before = q->cur_sweep;
        rc = ctf__reader_cut_take(q);
        if (rc) return part_failed(r, p, rc);
        m->order[n++] = (uint8_t)p;
        taken[p] += smp;
        r->position += smp;
        if (q->cur_sweep != sweep_before) r->cur_sweep = mix_sweep(r);
    }
    for (size_t p = 0; p < P; p++) ctf__reader_cut_close(m->parts[p]);
    ctf__perf_add(r->perf, CTF__PERF_CUT_SEQS, n);
    if (n == 0) {
        r->ended = true;
        return 0;
    }

    /* 2. Each part picks this worker's share of its sequences; they are merged in mixed order. */
    for (size_t p = 0; p < P; p++) {
        size_t np_p;
        if (!m->parts[p]->cut_n) continue;
        rc = ctf__reader_cut_pick(m->parts[p], &np_p);
        if (rc) return part_failed(r, p, rc);
    }
    size_t np = 0;
    for (size_t i = 0; i < n; i++) {
        const size_t p = m->order[i];
        const ctf_reader *q = m->parts[p];
        const size_t at = q->cut[m->next_pick[p]++].pick;
        if (at == SIZE_MAX) continue;
        if (np == r->picks_cap &&
            ctf__grow((void **)&r->picks, &r->picks_cap, np + 1, sizeof *r->picks)) {
            r->dead = 1;
            return ctf__fail(&r->err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
        }
        r->picks[np] = q->picks[at];
        r->picks[np].file += (uint32_t)m->file_base[p];
        np++;
    }

    /* 3. Pack on the threads of the first weighted part, then let every part move on. */
    ctf_reader *helper = m->parts[choose(m, (uint64_t[CTF_MAX_MIX_PARTS]){0})];
    ctf__mb_info info = {r->position,
                         first_sweep,
                         r->cur_sweep != first_sweep,
                         m->num_files > 1,
                         ctf__loader_run_parts,
                         ctf__cache_loader(helper->cache),
                         helper->cfg.num_threads + 1,
                         &r->mb_pool};
    r->pack_t0 = ctf__now_ns(); /* the stage counters: packing runs to the end of the call */
    rc = ctf__pack(&r->pc, r->picks, np, &info, out, &r->err);
    if (rc) {
        r->dead = 1;
        return rc;
    }
    ctf__perf_add(r->perf, CTF__PERF_PACK_BYTES, ctf__minibatch_bytes(*out));
    ctf__perf_add(r->perf, CTF__PERF_MINIBATCHES, 1);
    /* At the end of the mix no part reads on: nothing is loaded ahead for a next sweep. */
    r->ended = at_end(r);
    for (size_t p = 0; p < P; p++)
        if (m->parts[p]->cut_n) ctf__reader_cut_done(m->parts[p], !r->ended);
    return 0;
}

/*======================================================================
 * Position, workers, files, counters
 *====================================================================*/

static int mix_set_positions(ctf_reader *r, const uint64_t *positions)
{
    ctf__mix *m = r->mix;
    uint64_t sum = 0;
    for (size_t p = 0; p < m->num_parts; p++) {
        int rc = ctf_reader_seek(m->parts[p], positions[p]);
        if (rc) return part_failed(r, p, rc);
        sum += m->parts[p]->position;
    }
    r->position = sum;
    r->cur_sweep = mix_sweep(r);
    r->ended = at_end(r);
    return 0;
}

/* One part's timeline walked for sequence lengths only, sweep by sweep (a seek's replay). */
typedef struct walker {
    ctf__sweep_gen *g;
    uint64_t sweep;
    size_t slot;
} walker;

static int walk_next(ctf_reader *q, walker *w, uint64_t *len)
{
    int rc;
    if (!w->g) {
        rc = ctf__sweepgen_create(q->src->chunks, q->src->num_chunks, q->cfg.randomization_window,
                                  q->cfg.window_in_samples, q->cfg.randomization_seed, w->sweep,
                                  q->randomized, &w->g, &q->err);
        if (rc) return rc;
        w->slot = 0;
    }
    size_t seq, home;
    rc = ctf__sweepgen_get(w->g, w->slot, &seq, &home, &q->err);
    if (rc) return rc;
    const ctf__seq *s;
    rc = ctf__reader_seq(q, ctf__sweepgen_chunk_at(w->g)[home], seq, CTF__SEQS_ANY, &s);
    if (rc) return rc;
    *len = s->samples;
    ctf__sweepgen_release(w->g, ++w->slot);
    if (w->slot == ctf__sweepgen_num_slots(w->g)) {
        ctf__sweepgen_free(w->g);
        w->g = NULL;
        w->sweep++;
    }
    return 0;
}

/* The choice replayed from the start of the timeline up to the first sequence boundary at or
 * after `position`: O(sequences before it). A checkpoint restores without it. */
static int mix_seek(ctf_reader *r, uint64_t position)
{
    ctf__mix *m = r->mix;
    uint64_t taken[CTF_MAX_MIX_PARTS] = {0};
    walker w[CTF_MAX_MIX_PARTS];
    memset(w, 0, sizeof w);
    uint64_t at = 0;
    int rc = 0;
    size_t p = 0;
    while (at < position) {
        p = choose(m, taken);
        uint64_t len;
        rc = walk_next(m->parts[p], &w[p], &len);
        if (rc) break;
        taken[p] += len;
        at += len;
    }
    for (size_t i = 0; i < m->num_parts; i++) ctf__sweepgen_free(w[i].g);
    if (rc) return part_failed(r, p, rc);
    return mix_set_positions(r, taken);
}

static int mix_set_worker(ctf_reader *r, size_t num_workers, size_t rank)
{
    ctf__mix *m = r->mix;
    for (size_t p = 0; p < m->num_parts; p++) {
        int rc = ctf_reader_set_worker(m->parts[p], num_workers, rank);
        if (rc) return part_failed(r, p, rc);
    }
    r->num_workers = num_workers;
    r->rank = rank;
    return 0;
}

/* The part holding file i of the mix's list, and i within it. */
static const ctf_reader *file_part(const ctf_reader *r, size_t *i)
{
    const ctf__mix *m = r->mix;
    if (*i >= m->num_files) return NULL;
    size_t p = m->num_parts - 1;
    while (m->file_base[p] > *i) p--;
    *i -= m->file_base[p];
    return m->parts[p];
}

static const char *mix_file_path(const ctf_reader *r, size_t i)
{
    const ctf_reader *q = file_part(r, &i);
    return q ? ctf_reader_file_path(q, i) : NULL;
}

static const ctf_index *mix_file_index(const ctf_reader *r, size_t i)
{
    const ctf_reader *q = file_part(r, &i);
    return q ? ctf_reader_file_index(q, i) : NULL;
}

static void mix_stats(const ctf_reader *r, ctf_stats *st)
{
    const ctf__mix *m = r->mix;
    memset(st, 0, sizeof *st);
    st->num_streams = r->cfg.num_streams;
    for (size_t p = 0; p < m->num_parts; p++) {
        ctf_stats s;
        ctf_reader_get_stats(m->parts[p], &s);
        st->sequences += s.sequences;
        st->errors += s.errors;
        st->warnings += s.warnings;
        st->dropped_rows += s.dropped_rows;
        st->dropped_sequences += s.dropped_sequences;
        st->chunks_loaded += s.chunks_loaded;
        st->chunks_resident += s.chunks_resident;
        st->chunks_resident_peak += s.chunks_resident_peak; /* a bound: peaks may differ */
        st->bytes_resident += s.bytes_resident;
        st->bytes_resident_peak += s.bytes_resident_peak;
        st->keys_missing += s.keys_missing;
        st->keys_unmatched += s.keys_unmatched;
        for (size_t k = 0; k < st->num_streams; k++) {
            st->streams[k].samples += s.streams[k].samples;
            st->streams[k].nonzeros += s.streams[k].nonzeros;
            st->streams[k].dropped_samples += s.streams[k].dropped_samples;
        }
    }
}

static const ctf__mix_ops mix_ops = {mix_free,  mix_next,      mix_seek,       mix_set_worker,
                                     mix_stats, mix_file_path, mix_file_index, mix_set_positions};

/*======================================================================
 * The public open: a mix, or one source (reader.c)
 *====================================================================*/

int ctf_reader_open(const ctf_config *cfg, ctf_reader **out, ctf_error *err)
{
    if (cfg && cfg->num_mix) {
        *out = NULL;
        return mix_open(cfg, out, err);
    }
    return ctf__reader_open_source(cfg, out, err);
}
