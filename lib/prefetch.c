/*
 * prefetch.c -- the prefetch stage: loads chunks (pread + parse) on background threads ahead of
 * the consumer, so that parsing overlaps training and uses every core.
 *
 * The reader asks for chunks in the order the timeline will need them (ctf__loader_request) and
 * later takes them (ctf__loader_take). A load is a pure function of the chunk id: the source
 * (source.c, join.c) reads the chunk's bytes and parses them, recording problems in the result
 * instead of reporting them. So the delivered data, the error budget and the log do not depend
 * on the number of threads or on how far ahead they run; threads only change when the work
 * happens. A load also checks that the chunk's file has not changed since it was indexed
 * (CTF_ECHANGED naming the file).
 *
 * Locking: one mutex guards the per-chunk state table and the FIFO queue; workers drop it while
 * they read and parse. Errors of a background load travel with its result to the taker.
 */
#include "ctfio_internal.h"

#include <pthread.h>

enum { ST_NONE = 0, ST_QUEUED, ST_RUNNING, ST_DONE };

typedef struct load_result {
    ctf__chunk_data *cd;    /* parsed data, or NULL on failure */
    int rc;                 /* status of the load */
    ctf_error *err;         /* allocated only on failure */
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
};

/* Reads and parses chunk c through the source; runs without the lock. */
static int load_chunk(ctf__loader *l, ctf__readbuf *rb, size_t c, ctf__chunk_data **out,
                      ctf_error *err)
{
    return l->src->load(l->src, rb, c, l->pcv.pool, out, err);
}

static void *worker_main(void *arg)
{
    ctf__loader *l = arg;
    ctf__readbuf rb = {0};
    pthread_mutex_lock(&l->mu);
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
        pthread_mutex_unlock(&l->mu);

        ctf__chunk_data *cd = NULL;
        ctf_error e;
        ctf__error_clear(&e);
        int rc = load_chunk(l, &rb, c, &cd, &e);
        ctf_error *ecopy = NULL;
        if (rc) {
            ecopy = CTF_MALLOC(sizeof *ecopy);
            if (ecopy) *ecopy = e;
        }

        pthread_mutex_lock(&l->mu);
        if (l->discard[c]) {
            l->discard[c] = 0;
            l->state[c] = ST_NONE;
            ctf__chunk_data_free(cd);
            CTF_FREE(ecopy);
        } else {
            l->res[c] = (load_result){cd, rc, ecopy};
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

int ctf__loader_create(const ctf__parse_cfg *pc, ctf__source *src, size_t threads,
                       ctf__loader **out, ctf_error *err)
{
    *out = NULL;
    ctf__loader *l = CTF_CALLOC(1, sizeof *l);
    if (!l) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    l->src = src;
    l->pcv = *pc;
    l->pcv.pool = ctf__bufpool_for(pc, threads);
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

int ctf__loader_request(ctf__loader *l, size_t c)
{
    if (!l->num_threads) return 0;
    pthread_mutex_lock(&l->mu);
    if (l->state[c] == ST_NONE) {
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

static void queue_remove(ctf__loader *l, size_t c)
{
    size_t n = l->src->num_chunks, w = 0;
    for (size_t i = 0; i < l->q_len; i++) {
        size_t x = l->queue[(l->q_head + i) % n];
        if (x != c) l->queue[(l->q_head + w++) % n] = x;
    }
    l->q_len = w;
}

int ctf__loader_take(ctf__loader *l, size_t c, ctf__chunk_data **out, ctf_error *err)
{
    *out = NULL;
    if (l->num_threads) {
        pthread_mutex_lock(&l->mu);
        if (l->state[c] == ST_QUEUED) {
            /* Not started yet: do it here rather than wait behind other chunks. */
            queue_remove(l, c);
            l->state[c] = ST_NONE;
        }
        if (l->state[c] == ST_RUNNING) l->discard[c] = 0;
        while (l->state[c] == ST_RUNNING) pthread_cond_wait(&l->done, &l->mu);
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
                if (r.err && err) *err = *r.err;
                else ctf__fail(err, r.rc, CTF__NOWHERE, "loading chunk %zu failed", c);
                CTF_FREE(r.err);
                return r.rc;
            }
            *out = r.cd;
            return 0;
        }
        pthread_mutex_unlock(&l->mu);
    }
    return load_chunk(l, &l->caller_buf, c, out, err);
}

void ctf__loader_drop_all(ctf__loader *l)
{
    if (!l->num_threads) return;
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < l->q_len; i++)
        l->state[l->queue[(l->q_head + i) % l->src->num_chunks]] = ST_NONE;
    l->q_len = 0;
    for (size_t c = 0; c < l->src->num_chunks; c++) {
        if (l->state[c] == ST_RUNNING) l->discard[c] = 1;
        if (l->state[c] == ST_DONE) {
            ctf__chunk_data_free(l->res[c].cd);
            CTF_FREE(l->res[c].err);
            l->res[c] = (load_result){0};
            l->state[c] = ST_NONE;
        }
    }
    l->held_chunks = 0;
    l->held_bytes = 0;
    pthread_mutex_unlock(&l->mu);
}

void ctf__loader_cancel(ctf__loader *l, size_t c)
{
    if (!l->num_threads) return;
    pthread_mutex_lock(&l->mu);
    if (l->state[c] == ST_QUEUED) {
        queue_remove(l, c);
        l->state[c] = ST_NONE;
    } else if (l->state[c] == ST_RUNNING) {
        l->discard[c] = 1;
    } else if (l->state[c] == ST_DONE) {
        if (l->res[c].cd) {
            l->held_chunks--;
            l->held_bytes -= l->res[c].cd->bytes;
        }
        ctf__chunk_data_free(l->res[c].cd);
        CTF_FREE(l->res[c].err);
        l->res[c] = (load_result){0};
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
    if (!l->num_threads) {
        *chunks = 0;
        *bytes = 0;
        return;
    }
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
        for (size_t c = 0; c < l->src->num_chunks; c++) {
            ctf__chunk_data_free(l->res[c].cd);
            CTF_FREE(l->res[c].err);
        }
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
