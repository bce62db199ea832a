/*
 * prefetch.c -- the prefetch stage: a chunk cache (which parsed chunks are held, which are
 * evicted, which are loaded ahead) over a loader that loads chunks (pread + parse) on background
 * threads ahead of the consumer, so that parsing overlaps training and uses every core.
 *
 * The cache's look-ahead asks for chunks in the order the timeline will need them
 * (ctf__loader_request) and the reader's get later takes them (ctf__loader_take). A load is a
 * pure function of the chunk id: the source (corpus.c, join.c) reads the chunk's bytes and
 * parses them, recording problems in the result instead of reporting them. So the delivered
 * data, the error budget and the log do not depend on the number of threads or on how far ahead
 * they run; threads only change when the work happens. A load also checks that the chunk's file
 * has not changed since it was indexed (CTF_ECHANGED naming the file).
 *
 * Locking: one mutex guards the loader's per-chunk state table and the FIFO queue; workers drop
 * it while they read and parse. Errors of a background load travel with its result to the
 * taker. The cache itself runs on the consumer's thread only and takes no lock.
 */
#include "reader/pipeline.h"

#include <pthread.h>

enum { ST_NONE = 0, ST_QUEUED, ST_RUNNING, ST_DONE };

typedef struct load_result {
    ctf__chunk_data *cd;    /* parsed data, or NULL on failure */
    int rc;                 /* status of the load */
    ctf_error *err;         /* allocated only on failure */
    /* The records the load handed over (ctf__readbuf.publish), set as its last block completes
     * them: owned here while cd is NULL, then cd's (cd->seqs, the same buffer). */
    ctf__seq *seqs;
    size_t seqs_cap;
} load_result;

struct ctf__loader {
    ctf__parse_cfg pcv;         /* the reader's, with this loader's buffer pool */
    ctf__source *src;           /* what is loaded */
    bool sync_ok;               /* the mutex and conditions exist */
    pthread_mutex_t mu;
    pthread_cond_t work;    /* queue not empty, or stopping */
    pthread_cond_t done;    /* some load finished */
    uint8_t *state;         /* per chunk: ST_* */
    uint8_t *discard;       /* per chunk: drop the result when the running load ends */
    load_result *res;       /* per chunk */
    size_t *queue;          /* ring buffer of chunk ids, num_chunks entries */
    size_t q_head, q_len;
    pthread_t *threads;
    size_t num_threads;
    bool stop;
    size_t held_chunks, held_bytes;
    /* The parts of one ctf__loader_run_parts call (the caller's minibatch copies). */
    void (*job_fn)(void *arg, size_t part);
    void *job_arg;
    size_t job_parts, job_next, job_running;
    ctf__readbuf caller_buf;    /* for loads run by ctf__loader_take on the caller's thread */
    ctf__perf_slot *perf;       /* the caller's slot, then one per thread (NULL: no counting) */
    size_t started;             /* threads that took their slot number */
};

/* rb->publish of this loader's loads: the records wait in the chunk's result, and whoever
 * waits for them (ctf__loader_seqs) is woken (a corpus publishes them at the end of its load). */
static void publish_seqs(void *ctx, size_t c, ctf__seq *seqs, size_t cap)
{
    ctf__loader *l = ctx;
    pthread_mutex_lock(&l->mu);
    l->res[c].seqs = seqs;
    l->res[c].seqs_cap = cap;
    pthread_cond_broadcast(&l->done);
    pthread_mutex_unlock(&l->mu);
}

/* Frees what a result owns: its data (with the records), or the records of a failed load. */
static void result_free(ctf__loader *l, load_result *r)
{
    if (r->cd)
        ctf__chunk_data_free(r->cd);
    else if (r->seqs && l->pcv.pool)
        ctf__bufpool_give(l->pcv.pool, r->seqs, r->seqs_cap * sizeof *r->seqs);
    else
        CTF_FREE(r->seqs);
    CTF_FREE(r->err);
    *r = (load_result){0};
}

/* Reads and parses chunk c (state ST_RUNNING, its result empty) through the source, without the
 * lock: called and returning with it held. The records the load hands over go with the data.
 * err: where the error goes (the caller's own load), or NULL to keep it in the result.
 * @return : the load's status. */
static int run_load(ctf__loader *l, ctf__readbuf *rb, size_t c, ctf__chunk_data **out,
                    ctf_error *err)
{
    pthread_mutex_unlock(&l->mu);
    ctf__chunk_data *cd = NULL;
    ctf_error e;
    ctf__error_clear(&e);
    rb->publish = l->src->hands_seqs ? publish_seqs : NULL;
    rb->publish_ctx = l;
    const uint64_t t0 = ctf__now_ns();
    int rc = l->src->load(l->src, rb, c, l->pcv.pool, &cd, err ? err : &e);
    ctf__perf_since(rb->perf, CTF__PERF_LOAD_NS, t0);
    ctf__perf_add(rb->perf, CTF__PERF_LOADS, 1);
    ctf_error *ecopy = NULL;
    if (rc && !err) {
        ecopy = CTF_MALLOC(sizeof *ecopy);
        if (ecopy) *ecopy = e;
    }
    pthread_mutex_lock(&l->mu);
    load_result *r = &l->res[c];
    if (cd && r->seqs) {
        cd->seqs = r->seqs;
        cd->seqs_cap = r->seqs_cap;
        cd->bytes += cd->num_seqs * sizeof *r->seqs; /* not the capacity: a pooled buffer's */
    }
    r->cd = cd;
    r->rc = rc;
    r->err = ecopy;
    *out = cd;
    return rc;
}

static void *worker_main(void *arg)
{
    ctf__loader *l = arg;
    ctf__readbuf rb = {0};
    pthread_mutex_lock(&l->mu);
    const size_t me = ++l->started; /* slot 0 is the caller's */
    for (;;) {
        while (!l->stop && l->q_len == 0 && l->job_next >= l->job_parts)
            pthread_cond_wait(&l->work, &l->mu);
        if (l->stop) break;
        if (l->job_next < l->job_parts) {
            /* The caller is waiting for these copies now; a queued load is for later. */
            size_t part = l->job_next++;
            l->job_running++;
            void (*fn)(void *, size_t) = l->job_fn;
            void *jarg = l->job_arg;
            pthread_mutex_unlock(&l->mu);
            fn(jarg, part);
            pthread_mutex_lock(&l->mu);
            l->job_running--;
            pthread_cond_broadcast(&l->done);
            continue;
        }
        size_t c = l->queue[l->q_head];
        l->q_head = (l->q_head + 1) % l->src->num_chunks;
        l->q_len--;
        l->state[c] = ST_RUNNING;
        ctf__chunk_data *cd;
        rb.perf = l->perf ? &l->perf[me] : NULL;
        (void)run_load(l, &rb, c, &cd, NULL);
        if (l->discard[c]) {
            l->discard[c] = 0;
            l->state[c] = ST_NONE;
            result_free(l, &l->res[c]);
        } else {
            l->state[c] = ST_DONE;
            if (cd) {
                l->held_chunks++;
                l->held_bytes += cd->bytes;
            }
        }
        pthread_cond_broadcast(&l->done);
    }
    pthread_mutex_unlock(&l->mu);
    CTF_FREE(rb.p);
    CTF_FREE(rb.seqs.p);
    return NULL;
}

int ctf__loader_create(const ctf__parse_cfg *pc, ctf__source *src, size_t threads, size_t hold,
                       ctf__loader **out, ctf_error *err)
{
    *out = NULL;
    ctf__loader *l = CTF_CALLOC(1, sizeof *l);
    if (!l) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    l->src = src;
    l->pcv = *pc;
    bool raw = false; /* a CBF file's chunks keep their bytes: one buffer more per chunk */
    for (size_t f = 0; f < src->num_fp_files; f++) raw |= src->fp_files[f].idx->cbf != NULL;
    l->pcv.pool = ctf__bufpool_for(pc, threads, hold, raw);
    if (!l->pcv.pool) {
        ctf__loader_free(l);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    size_t n = src->num_chunks ? src->num_chunks : 1;
    l->state = CTF_CALLOC(n, 1);
    l->discard = CTF_CALLOC(n, 1);
    l->res = CTF_CALLOC(n, sizeof *l->res);
    l->queue = CTF_MALLOC(n * sizeof *l->queue);
    if (!l->state || !l->discard || !l->res || !l->queue) {
        ctf__loader_free(l);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    l->sync_ok = true;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->done, NULL);
    if (threads) {
        l->threads = CTF_CALLOC(threads, sizeof *l->threads);
        if (!l->threads) {
            ctf__loader_free(l);
            return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
        }
        for (size_t i = 0; i < threads; i++) {
            if (pthread_create(&l->threads[i], NULL, worker_main, l) != 0) {
                ctf__loader_free(l);
                return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE,
                                 "could not start prefetch thread %zu", i);
            }
            l->num_threads++;
        }
    }
    *out = l;
    return 0;
}

void ctf__loader_set_perf(ctf__loader *l, ctf__perf_slot *perf)
{
    pthread_mutex_lock(&l->mu);
    l->perf = perf;
    l->caller_buf.perf = perf;
    pthread_mutex_unlock(&l->mu);
}

#ifdef CTF_TESTING
atomic_long ctf__loader_queued;
#endif

int ctf__loader_request(ctf__loader *l, size_t c)
{
    if (!l->num_threads) return 0;
    pthread_mutex_lock(&l->mu);
    if (l->state[c] == ST_NONE) {
#ifdef CTF_TESTING
        atomic_fetch_add(&ctf__loader_queued, 1);
#endif
        l->queue[(l->q_head + l->q_len) % l->src->num_chunks] = c;
        l->q_len++;
        l->state[c] = ST_QUEUED;
        pthread_cond_signal(&l->work);
    } else if (l->state[c] == ST_RUNNING) {
        l->discard[c] = 0;
    }
    pthread_mutex_unlock(&l->mu);
    return 0;
}

/* Takes queued chunk c off the queue: nobody is loading it (ST_NONE). */
static void queue_remove(ctf__loader *l, size_t c)
{
    size_t n = l->src->num_chunks, w = 0;
    for (size_t i = 0; i < l->q_len; i++) {
        size_t x = l->queue[(l->q_head + i) % n];
        if (x != c) l->queue[(l->q_head + w++) % n] = x;
    }
    l->q_len = w;
    l->state[c] = ST_NONE;
}

/* A load run on the caller's thread (state ST_NONE, lock held) keeps its result for a later
 * take: its records are wanted now, its data when the chunk is reached. */
static void load_here(ctf__loader *l, size_t c)
{
    ctf__chunk_data *cd;
    l->state[c] = ST_RUNNING;
    (void)run_load(l, &l->caller_buf, c, &cd, NULL);
    l->state[c] = ST_DONE;
    if (cd) {
        l->held_chunks++;
        l->held_bytes += cd->bytes;
    }
}

/* The consumer blocked for data since t0 (a wait, or a load on its own thread): counted on
 * the caller's slot, the first. */
static void count_wait(ctf__loader *l, uint64_t t0)
{
    ctf__perf_since(l->perf, CTF__PERF_WAIT_NS, t0);
    ctf__perf_add(l->perf, CTF__PERF_WAITS, 1);
}

int ctf__loader_take(ctf__loader *l, size_t c, ctf__chunk_data **out, ctf_error *err)
{
    *out = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->state[c] == ST_QUEUED) {
        /* Not started yet: do it here rather than wait behind other chunks. */
        queue_remove(l, c);
    }
    if (l->state[c] == ST_RUNNING) {
        l->discard[c] = 0;
        const uint64_t t0 = ctf__now_ns();
        while (l->state[c] == ST_RUNNING) pthread_cond_wait(&l->done, &l->mu);
        count_wait(l, t0);
    }
    if (l->state[c] == ST_DONE) {
        load_result r = l->res[c];
        l->res[c] = (load_result){0};
        l->state[c] = ST_NONE;
        if (r.cd) {
            l->held_chunks--;
            l->held_bytes -= r.cd->bytes;
        }
        pthread_mutex_unlock(&l->mu);
        if (r.rc) {
            const int rc = r.rc;
            if (r.err && err)
                *err = *r.err;
            else
                ctf__fail(err, rc, CTF__NOWHERE, "loading chunk %zu failed", c);
            result_free(l, &r);
            return rc;
        }
        *out = r.cd;
        return 0;
    }
    /* Nobody loaded it: load it here, its error straight into err. */
    l->state[c] = ST_RUNNING;
    const uint64_t t0 = ctf__now_ns();
    int rc = run_load(l, &l->caller_buf, c, out, err);
    count_wait(l, t0);
    if (rc) result_free(l, &l->res[c]);
    l->res[c] = (load_result){0};
    l->state[c] = ST_NONE;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

bool ctf__loader_seqs(ctf__loader *l, size_t c, ctf__seqs_how how, const ctf__seq **out)
{
    *out = NULL;
    if (!l->src->hands_seqs) return false;
    pthread_mutex_lock(&l->mu);
    uint64_t t0 = 0; /* when the caller began to block, if it did */
    if (how == CTF__SEQS_LOAD) {
        if (l->state[c] == ST_RUNNING) l->discard[c] = 0; /* wanted after all */
        if (l->state[c] == ST_QUEUED) {
            queue_remove(l, c);
        }
        if (l->state[c] == ST_NONE) {
            t0 = ctf__now_ns();
            load_here(l, c);
        }
    }
    /* A running load publishes its records when it ends: meanwhile a caller that would only
     * wait runs the next queued load itself (with CTF__SEQS_LOAD, which may load here), as it
     * would if it asked for that chunk next. Waiting for a load that will be thrown away would
     * be for nothing. */
    if (how != CTF__SEQS_HELD && !l->discard[c])
        while (l->state[c] == ST_RUNNING && !l->res[c].seqs) {
            if (!t0) t0 = ctf__now_ns();
            if (how == CTF__SEQS_LOAD && l->q_len) {
                const size_t x = l->queue[l->q_head];
                queue_remove(l, x);
                load_here(l, x);
                continue;
            }
            pthread_cond_wait(&l->done, &l->mu);
        }
    if (t0) count_wait(l, t0);
    if ((l->state[c] == ST_RUNNING && !l->discard[c]) || l->state[c] == ST_DONE)
        *out = l->res[c].seqs;
    pthread_mutex_unlock(&l->mu);
    return *out != NULL;
}

void ctf__loader_drop_all(ctf__loader *l)
{
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < l->q_len; i++)
        l->state[l->queue[(l->q_head + i) % l->src->num_chunks]] = ST_NONE;
    l->q_len = 0;
    for (size_t c = 0; c < l->src->num_chunks; c++) {
        if (l->state[c] == ST_RUNNING) l->discard[c] = 1;
        if (l->state[c] == ST_DONE) {
            result_free(l, &l->res[c]);
            l->state[c] = ST_NONE;
        }
    }
    l->held_chunks = 0;
    l->held_bytes = 0;
    pthread_mutex_unlock(&l->mu);
}

void ctf__loader_cancel(ctf__loader *l, size_t c)
{
    pthread_mutex_lock(&l->mu);
    if (l->state[c] == ST_QUEUED) {
        queue_remove(l, c);
    } else if (l->state[c] == ST_RUNNING) {
        l->discard[c] = 1;
    } else if (l->state[c] == ST_DONE) {
        if (l->res[c].cd) {
            l->held_chunks--;
            l->held_bytes -= l->res[c].cd->bytes;
        }
        result_free(l, &l->res[c]);
        l->state[c] = ST_NONE;
    }
    pthread_mutex_unlock(&l->mu);
}

void ctf__loader_run_parts(void *loader, void (*fn)(void *arg, size_t part), void *arg,
                           size_t parts)
{
    ctf__loader *l = loader;
    if (!l->num_threads) {
        for (size_t i = 0; i < parts; i++) fn(arg, i);
        return;
    }
    pthread_mutex_lock(&l->mu);
    l->job_fn = fn;
    l->job_arg = arg;
    l->job_next = 0;
    l->job_parts = parts;
    pthread_cond_broadcast(&l->work);
    /* Never wait for a part nobody has started: a thread busy with a load takes none. */
    while (l->job_next < l->job_parts) {
        size_t part = l->job_next++;
        pthread_mutex_unlock(&l->mu);
        fn(arg, part);
        pthread_mutex_lock(&l->mu);
    }
    while (l->job_running) pthread_cond_wait(&l->done, &l->mu);
    l->job_fn = NULL;
    l->job_arg = NULL;
    l->job_parts = l->job_next = 0;
    pthread_mutex_unlock(&l->mu);
}

void ctf__loader_held(ctf__loader *l, size_t *chunks, size_t *bytes)
{
    pthread_mutex_lock(&l->mu);
    *chunks = l->held_chunks;
    *bytes = l->held_bytes;
    pthread_mutex_unlock(&l->mu);
}

void ctf__loader_free(ctf__loader *l)
{
    if (!l) return;
    if (l->num_threads) {
        pthread_mutex_lock(&l->mu);
        l->stop = true;
        pthread_cond_broadcast(&l->work);
        pthread_mutex_unlock(&l->mu);
        for (size_t i = 0; i < l->num_threads; i++) pthread_join(l->threads[i], NULL);
    }
    if (l->res)
        for (size_t c = 0; c < l->src->num_chunks; c++) result_free(l, &l->res[c]);
    if (l->sync_ok) {
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->work);
        pthread_cond_destroy(&l->done);
    }
    ctf__bufpool_unref(l->pcv.pool); /* chunks still held keep it alive */
    CTF_FREE(l->caller_buf.p);
    CTF_FREE(l->caller_buf.seqs.p);
    CTF_FREE(l->threads);
    CTF_FREE(l->state);
    CTF_FREE(l->discard);
    CTF_FREE(l->res);
    CTF_FREE(l->queue);
    CTF_FREE(l);
}

/*======================================================================
 * The chunk cache: residency and the look-ahead that feeds the loader
 *
 * A parsed chunk is held while the sweep is inside it (some of its sequences cut in this
 * sweep, some not), while a BPTT slot holds one of its sequences, or forever with
 * keep_data_in_memory; at most prefetch_chunks more are loaded ahead, which a look-ahead over
 * the sweep generator (into the next sweep near a sweep's end) keeps fed. Because the
 * randomizer keeps every sequence inside its chunk's window, memory is bounded by the window.
 * The look-ahead only changes when parsing happens, never what is delivered.
 *====================================================================*/

struct ctf__cache {
    ctf__cache_cfg cfg;
    ctf__source *src;
    ctf__loader *loader;

    ctf__chunk_data **resident;  /* parsed chunks held, by chunk id */
    size_t *resident_list;       /* ids of held chunks */
    size_t num_resident;
    size_t resident_bytes;
    uint32_t *consumed;          /* sequences of the chunk cut in the current sweep */
    uint32_t *pins;              /* BPTT slots holding one of its sequences */

    /* Per chunk, the records the consumer got from its load (held or loaded ahead), so that a
     * sequence's lookup is one load of a pointer: cleared when the chunk goes. */
    const ctf__seq **seqs_at;
    uint8_t *regular;            /* per chunk: its seqs_at records are regular */
    uint8_t *requested;          /* asked for in the current sweep (1), then taken (2) */
    size_t scan_slot;            /* next slot of the current sweep to inspect */
    size_t scan_limit;           /* how far the look-ahead may run past the cursor, in slots */
    ctf__sweep_gen *gen_next;    /* the next sweep, opened early near the end of this one */
    uint8_t *requested_next;     /* asked for the next sweep (1) */
    size_t scan_next;            /* next slot of gen_next to inspect */
    size_t outstanding;          /* requested, not yet taken */
    /* Chunks a cut in progress reached in the sweep it just left (loaded for its records, not
     * yet taken): kept across the sweep change for the cut's pick, let go after it. */
    uint8_t *carried;
    size_t num_carried;
};

/* Makes q chunk c's records for the consumer (NULL: none), noting whether they are regular:
 * one sequential pass per chunk load, in place of a random read per sequence. */
static void set_seqs(ctf__cache *k, size_t c, const ctf__seq *q)
{
    k->seqs_at[c] = q;
    bool regular = q != NULL;
    for (size_t i = 0, n = k->src->chunks[c].num_seqs; regular && i < n; i++)
        regular = q[i].samples == 1 && q[i].key == q[0].key + i && q[i].line == q[0].line + i;
    k->regular[c] = regular;
}

bool ctf__cache_regular(const ctf__cache *k, size_t c) { return k->seqs_at[c] && k->regular[c]; }

/* The chunks a randomized window holds at once (a window in samples over the mean chunk): their
 * buffers stay in the pool when the window has passed, for the next sweep's (or window's)
 * chunks. Their sum with the held chunks' never exceeds the peak of held chunks, so the memory
 * bound is the window's as before. In file order two or three chunks are held: the loaders'
 * share covers them. keepDataInMemory never frees a chunk. */
static size_t window_chunks(const ctf__source *src, const ctf__cache_cfg *cfg)
{
    const size_t nc = src->num_chunks;
    if (!cfg->randomized || cfg->keep_data_in_memory || !nc) return 0;
    const uint64_t w = ctf__window_chunks(cfg->window, cfg->window_in_samples, src->total_samples,
                                          nc);
    return (size_t)CTF_MIN(w + 1, (uint64_t)nc);
}

int ctf__cache_create(const ctf__parse_cfg *pc, ctf__source *src, const ctf__cache_cfg *cfg,
                      ctf__cache **out, ctf_error *err)
{
    *out = NULL;
    ctf__cache *k = CTF_CALLOC(1, sizeof *k);
    if (!k) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    k->cfg = *cfg;
    k->src = src;
    const size_t nc = src->num_chunks;
    const size_t n = nc ? nc : 1;
    k->resident = CTF_CALLOC(n, sizeof *k->resident);
    k->resident_list = CTF_MALLOC(n * sizeof *k->resident_list);
    k->consumed = CTF_CALLOC(n, sizeof *k->consumed);
    k->requested = CTF_CALLOC(n, 1);
    k->requested_next = CTF_CALLOC(n, 1);
    k->pins = CTF_CALLOC(n, sizeof *k->pins);
    k->seqs_at = CTF_CALLOC(n, sizeof *k->seqs_at);
    k->regular = CTF_CALLOC(n, 1);
    k->carried = CTF_CALLOC(n, 1);
    if (!k->resident || !k->resident_list || !k->consumed || !k->requested || !k->requested_next ||
        !k->pins || !k->seqs_at || !k->regular || !k->carried) {
        ctf__cache_free(k);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    size_t widest = 1;
    for (size_t c = 0; c < nc; c++) widest = CTF_MAX(widest, src->chunks[c].num_seqs);
    k->scan_limit = (cfg->prefetch_chunks + 2) * widest;
    int rc = ctf__loader_create(pc, src, cfg->num_threads, window_chunks(src, cfg), &k->loader,
                                err);
    if (rc) {
        ctf__cache_free(k);
        return rc;
    }
    ctf__loader_set_perf(k->loader, cfg->perf);
    *out = k;
    return 0;
}

ctf__loader *ctf__cache_loader(ctf__cache *k) { return k->loader; }

/* Cancels the requests a flag array still marks outstanding (1): when the sweep changes, a chunk
 * asked for under the old sweep's ownership may never be taken (ownership is decided by the
 * sweep current after a cut), and must neither keep its parsed data in the loader nor count
 * against prefetch_chunks forever. With `carry`, a chunk the cut in progress has reached (some
 * of its sequences cut in the sweep being left) is not cancelled but carried: its pick, right
 * after, takes it, and a load for its records is not made twice. */
static void cancel_untaken(ctf__cache *k, uint8_t *flags, bool carry)
{
    for (size_t c = 0; c < k->src->num_chunks; c++) {
        if (flags[c] != 1) continue;
        if (carry && k->consumed[c] > 0) {
            k->carried[c] = 1;
            k->num_carried++;
            flags[c] = 0;
            continue;
        }
        ctf__loader_cancel(k->loader, c);
        if (!k->resident[c]) set_seqs(k, c, NULL);
        k->outstanding--;
        flags[c] = 0;
    }
}

int ctf__cache_open_sweep(ctf__cache *k, uint64_t sweep, ctf__sweep_gen **gen, ctf_error *err)
{
    if (*gen && ctf__sweepgen_sweep(*gen) == sweep) return 0;
    const size_t nc = k->src->num_chunks;
    cancel_untaken(k, k->requested, true);
    if (k->gen_next && ctf__sweepgen_sweep(k->gen_next) == sweep) {
        /* The look-ahead already opened this sweep and asked for its first chunks. */
        ctf__sweepgen_free(*gen);
        *gen = k->gen_next;
        k->gen_next = NULL;
        uint8_t *t = k->requested;
        k->requested = k->requested_next;
        k->requested_next = t;
        /* From the sweep's start again: the look-ahead passed the slots whose chunks the old
         * sweep still held or had asked for, and those are this sweep's to ask for now. */
        k->scan_slot = 0;
    } else {
        ctf__sweep_gen *g;
        int rc = ctf__sweepgen_create(k->src->chunks, nc, k->cfg.window, k->cfg.window_in_samples,
                                      k->cfg.seed, sweep, k->cfg.randomized, &g, err);
        if (rc) return rc;
        ctf__sweepgen_free(*gen);
        *gen = g;
        memset(k->requested, 0, nc);
        k->scan_slot = 0;
    }
    ctf__sweepgen_free(k->gen_next);
    k->gen_next = NULL;
    cancel_untaken(k, k->requested_next, false);
    memset(k->requested_next, 0, nc);
    k->scan_next = 0;
    memset(k->consumed, 0, nc * sizeof *k->consumed);
    return 0;
}

void ctf__cache_drop_next_sweep(ctf__cache *k)
{
    ctf__sweepgen_free(k->gen_next);
    k->gen_next = NULL;
}

void ctf__cache_consumed(ctf__cache *k, size_t c) { k->consumed[c]++; }
void ctf__cache_pin(ctf__cache *k, size_t c) { k->pins[c]++; }
void ctf__cache_unpin(ctf__cache *k, size_t c) { k->pins[c]--; }

static void evict(ctf__cache *k, size_t c)
{
    ctf__chunk_data *cd = k->resident[c];
    if (!cd) return;
    k->resident_bytes -= cd->bytes;
    ctf__chunk_data_free(cd);
    ctf__perf_add(k->cfg.perf, CTF__PERF_EVICTED, 1);
    k->resident[c] = NULL;
    set_seqs(k, c, NULL);
    for (size_t i = 0; i < k->num_resident; i++)
        if (k->resident_list[i] == c) {
            k->resident_list[i] = k->resident_list[--k->num_resident];
            break;
        }
}

/* The carried chunks the cut did not take (another worker's under the new sweep's ownership):
 * cancelled, as at the sweep change. */
static void drop_carried(ctf__cache *k)
{
    for (size_t c = 0; k->num_carried && c < k->src->num_chunks; c++) {
        if (!k->carried[c]) continue;
        k->carried[c] = 0;
        k->num_carried--;
        ctf__loader_cancel(k->loader, c);
        if (!k->resident[c]) set_seqs(k, c, NULL);
        k->outstanding--;
    }
}

void ctf__cache_evict_passed(ctf__cache *k)
{
    drop_carried(k);
    if (k->cfg.keep_data_in_memory) return;
    for (size_t i = 0; i < k->num_resident;) {
        size_t c = k->resident_list[i];
        /* Open: some of its sequences were cut in this sweep and some were not. */
        bool open = (k->consumed[c] > 0 && k->consumed[c] < k->src->chunks[c].num_seqs) ||
                    k->pins[c] > 0;
        if (!open)
            evict(k, c); /* swaps the last entry into i */
        else
            i++;
    }
}

void ctf__cache_update_stats(ctf__cache *k)
{
    ctf_stats *st = k->cfg.stats;
    size_t held_chunks, held_bytes;
    ctf__loader_held(k->loader, &held_chunks, &held_bytes);
    st->chunks_resident = k->num_resident + held_chunks;
    st->bytes_resident = k->resident_bytes + held_bytes;
    if (k->src->held) { /* a join's part chunks */
        k->src->held(k->src, &held_chunks, &held_bytes);
        st->chunks_resident += held_chunks;
        st->bytes_resident += held_bytes;
    }
    if (st->chunks_resident > st->chunks_resident_peak)
        st->chunks_resident_peak = st->chunks_resident;
    if (st->bytes_resident > st->bytes_resident_peak) st->bytes_resident_peak = st->bytes_resident;
}

int ctf__cache_get(ctf__cache *k, size_t c, const ctf__chunk_data **out, ctf_error *err)
{
    if (!k->resident[c]) {
        ctf__chunk_data *cd;
        if (k->requested[c] == 1) {
            k->requested[c] = 2; /* taken: no longer outstanding */
            k->outstanding--;
        } else if (k->requested_next[c] == 1) {
            /* Asked for the next sweep, needed already: that sweep must ask for it again. */
            k->requested_next[c] = 0;
            k->outstanding--;
        } else if (k->carried[c]) {
            k->carried[c] = 0;
            k->num_carried--;
            k->outstanding--;
        }
        int rc = ctf__loader_take(k->loader, c, &cd, err);
        /* The same records, now the held chunk's. */
        if (rc)
            set_seqs(k, c, NULL);
        else if (k->seqs_at[c])
            k->seqs_at[c] = cd->seqs;
        else
            set_seqs(k, c, cd->seqs);
        if (rc) return rc;
        k->resident[c] = cd;
        k->resident_list[k->num_resident++] = c;
        k->resident_bytes += cd->bytes;
        k->cfg.stats->chunks_loaded++;
        ctf__cache_update_stats(k);
    }
    *out = k->resident[c];
    return 0;
}

/* Asks the loader for chunk c of the current sweep (next false) or of the next one, unless it is
 * held, asked for, or (this sweep) already being cut. */
static void ask(ctf__cache *k, size_t c, bool next)
{
    if (!next) {
        if (k->requested[c] || k->resident[c] || k->consumed[c]) return;
        k->requested[c] = 1;
    } else {
        /* A chunk this sweep took and let go of is free to load again for the next one. */
        if (k->requested_next[c] || k->requested[c] == 1 || k->resident[c]) return;
        k->requested_next[c] = 1;
    }
    ctf__loader_request(k->loader, c);
    k->outstanding++;
}

/* Before the scan's first look at a slot whose shuffle has not run yet (a sweep's start, a
 * restore, a window further on), this worker's chunks of the slot's window are asked for: for a
 * large window the shuffle takes milliseconds, and their loads then overlap it instead of
 * following it. */
static void ask_window(ctf__cache *k, ctf__sweep_gen *gen, size_t slot, size_t workers, size_t rank,
                       bool next)
{
    size_t lo, hi;
    if (!k->cfg.randomized || !ctf__sweepgen_pending(gen, slot, &lo, &hi)) return;
    const size_t *chunk_at = ctf__sweepgen_chunk_at(gen);
    for (size_t p = lo; p < hi && k->outstanding < k->cfg.prefetch_chunks; p++)
        if (ctf_worker_owns(p, workers, rank)) ask(k, chunk_at[p], next);
}

void ctf__cache_schedule(ctf__cache *k, ctf__sweep_gen *gen, uint64_t sweep, size_t slot,
                         size_t workers, size_t rank)
{
    /* Without loader threads a request does nothing (the caller parses on take): the scan would
     * only run the generator early, e.g. a whole first window inside ctf_reader_open. */
    if (!k->cfg.num_threads) return;
    const size_t prefetch = k->cfg.prefetch_chunks;
    const bool randomized = k->cfg.randomized;
    const size_t *pos = ctf__sweepgen_pos_of(gen);
    /* The budget counts requests, not the loader's held chunks as well: a loaded, untaken
     * chunk is both, and counting it twice would make the look-ahead depend on how fast the
     * threads happen to run. */
    if (k->scan_slot < slot) k->scan_slot = slot;
    const size_t n = ctf__sweepgen_num_slots(gen);
    /* The look-ahead must be able to pass a whole minibatch and reach the next chunks, but the
     * slots between the cursor and it stay materialized in the generator: cap the distance at a
     * few chunks' worth of sequences. scan_slot persists, so each slot is inspected once. */
    const size_t end = CTF_MIN(n, slot + k->scan_limit);
    if (prefetch && k->scan_slot < end) ask_window(k, gen, k->scan_slot, workers, rank, false);
    while (prefetch && k->scan_slot < end && k->outstanding < prefetch) {
        size_t seq;
        ctf_error ignored;
        size_t home;
        /* The look-ahead is optional work: on a failure (out of memory) it just stops. The
         * generator stays consistent after a failed get, so the consumer's own get of the same
         * slot retries the allocation and reports it if it fails again. */
        if (ctf__sweepgen_get(gen, k->scan_slot, &seq, &home, &ignored)) return;
        size_t c = ctf__sweepgen_chunk_at(gen)[home];
        if (!randomized || ctf_worker_owns(pos[c], workers, rank)) ask(k, c, false);
        /* In file order a chunk's sequences are contiguous: jump to the next chunk. */
        if (!randomized)
            k->scan_slot = k->src->chunks[c].first_seq + k->src->chunks[c].num_seqs;
        else
            k->scan_slot++;
    }
    /* At the end of the sweep, look into the next one (unless the data ends before it), so
     * that a sweep does not start with a parse on the caller's thread. */
    const uint64_t next_start = (sweep + 1) * k->cfg.sweep_samples;
    if (k->scan_slot < n || !prefetch || k->cfg.limit <= next_start || k->cfg.same_sweep_only)
        return;
    if (!k->gen_next) {
        ctf_error ignored;
        if (ctf__sweepgen_create(k->src->chunks, k->src->num_chunks, k->cfg.window,
                                 k->cfg.window_in_samples, k->cfg.seed, sweep + 1, randomized,
                                 &k->gen_next, &ignored))
            return; /* open_sweep creates it when the sweep starts, and reports a failure */
        k->scan_next = 0;
    }
    const size_t *pos_next = ctf__sweepgen_pos_of(k->gen_next);
    const size_t budget = k->scan_limit > n - slot ? k->scan_limit - (n - slot) : 0;
    const size_t end_next = CTF_MIN(n, budget);
    if (k->scan_next < end_next) ask_window(k, k->gen_next, k->scan_next, workers, rank, true);
    while (k->scan_next < end_next && k->outstanding < prefetch) {
        size_t seq, home;
        ctf_error ignored;
        if (ctf__sweepgen_get(k->gen_next, k->scan_next, &seq, &home, &ignored)) return;
        size_t c = ctf__sweepgen_chunk_at(k->gen_next)[home];
        if (!randomized || ctf_worker_owns(pos_next[c], workers, rank)) ask(k, c, true);
        if (!randomized)
            k->scan_next = k->src->chunks[c].first_seq + k->src->chunks[c].num_seqs;
        else
            k->scan_next++;
    }
}

bool ctf__cache_asked(const ctf__cache *k, size_t c)
{
    return k->resident[c] || k->requested[c] || k->requested_next[c] == 1;
}

void ctf__cache_request(ctf__cache *k, size_t c)
{
    if (!k->cfg.num_threads || ctf__cache_asked(k, c)) return;
    k->requested[c] = 1;
    ctf__loader_request(k->loader, c);
    k->outstanding++;
}

int ctf__cache_seqs(ctf__cache *k, size_t c, ctf__seqs_how how, const ctf__seq **out,
                    ctf_error *err)
{
    if (k->seqs_at[c]) {
        *out = k->seqs_at[c];
        return 0;
    }
    const ctf__chunk_data *cd = k->resident[c];
    if (cd && cd->seqs) {
        set_seqs(k, c, *out = cd->seqs);
        return 0;
    }
    const ctf__seq *q;
    if (!cd && ctf__loader_seqs(k->loader, c, how, &q)) {
        /* A chunk the caller had loaded counts as asked for in this sweep: taken with the cut,
         * or cancelled with the sweep's other untaken requests. */
        if (how == CTF__SEQS_LOAD && !k->requested[c] && k->requested_next[c] != 1) {
            k->requested[c] = 1;
            k->outstanding++;
        }
        set_seqs(k, c, *out = q);
        return 0;
    }
    *out = NULL;
    if (how == CTF__SEQS_HELD) return 0;
    return k->src->seqs(k->src, c, out, err);
}

void ctf__cache_restart(ctf__cache *k, size_t slot)
{
    ctf__loader_drop_all(k->loader);
    for (size_t c = 0; c < k->src->num_chunks; c++)
        if (!k->resident[c]) set_seqs(k, c, NULL);
    memset(k->requested, 0, k->src->num_chunks);
    memset(k->requested_next, 0, k->src->num_chunks);
    memset(k->carried, 0, k->src->num_chunks);
    k->num_carried = 0;
    k->outstanding = 0;
    k->scan_slot = slot;
    k->scan_next = 0;
}

#ifdef CTF_TESTING
void ctf__cache_held(const ctf__cache *k, size_t *chunks, size_t *bytes)
{
    *chunks = k->num_resident;
    *bytes = k->resident_bytes;
}

size_t ctf__cache_outstanding(const ctf__cache *k) { return k->outstanding; }
#endif

void ctf__cache_free(ctf__cache *k)
{
    if (!k) return;
    ctf__loader_free(k->loader);
    if (k->resident)
        for (size_t c = 0; c < k->src->num_chunks; c++) ctf__chunk_data_free(k->resident[c]);
    CTF_FREE(k->resident);
    CTF_FREE(k->resident_list);
    CTF_FREE(k->consumed);
    CTF_FREE(k->requested);
    CTF_FREE(k->requested_next);
    ctf__sweepgen_free(k->gen_next);
    CTF_FREE(k->pins);
    CTF_FREE(k->seqs_at);
    CTF_FREE(k->regular);
    CTF_FREE(k->carried);
    CTF_FREE(k);
}
