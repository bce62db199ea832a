/*
 * test_mb_reuse.c -- a reader reuses the blocks of freed minibatches (lib/reader/pack.c's pool):
 * in a steady state ctf_reader_next + ctf_minibatch_free allocate nothing, a minibatch that is
 * held keeps its data while later ones are read, and minibatches freed on another thread
 * (also after the reader is gone) deliver exactly what a plain run delivers, leaking nothing.
 */
#include "reader/pipeline.h"
#include "test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static void quiet(void *user, ctf_severity sev, const ctf_error *what)
{
    (void)user;
    (void)sev;
    (void)what;
}

static const ctf_stream_def XY[] = {{.name = "x", .dim = 3},
                                    {.name = "y", .dim = 10, .is_sparse = true}};

/* n one-sample sequences "|x a b c |y k:v", the sparse ones with 0-2 entries. */
static const char *xy_file(const char *name, size_t n)
{
    size_t cap = n * 48 + 1, len = 0;
    char *text = malloc(cap);
    if (!text) return NULL;
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(text + len, cap - len, "|x %zu %zu.5 -%zu |y", i, i % 7, i % 3);
        for (size_t e = 0; e < i % 3; e++)
            len += (size_t)snprintf(text + len, cap - len, " %zu:%zu", (i + e) % 10, e + 1);
        text[len++] = '\n';
    }
    const char *path = test_write_file(name, text, len);
    free(text);
    return path;
}

static ctf_reader *open_xy(const char *path, bool randomize, size_t threads)
{
    ctf_config c;
    ctf_config_init(&c);
    c.path = path;
    c.streams = XY;
    c.num_streams = 2;
    c.log = quiet;
    c.randomize = randomize;
    c.randomization_seed = 3;
    c.chunk_size_bytes = 4096;
    c.keep_data_in_memory = true;
    c.num_threads = threads;
    ctf_reader *r = NULL;
    ctf_error e;
    if (ctf_reader_open(&c, &r, &e) != 0) {
        fprintf(stderr, "ctf_reader_open: %s\n", e.message);
        return NULL;
    }
    return r;
}

TEST(mb_reuse_steady_state_allocates_nothing)
{
    const char *path = xy_file("reuse_steady.ctf", 20000);
    ASSERT(path != NULL);
    for (int randomize = 0; randomize < 2; randomize++) {
        const long live0 = atomic_load(&ctf__alloc.live);
        ctf_reader *r = open_xy(path, randomize, 0);
        ASSERT(r != NULL);
        ctf_minibatch *mb = NULL;
        /* Warm: a whole sweep (20000 samples), so that every chunk is parsed and resident,
         * and the pool's blocks have grown to fit. The count runs inside the second sweep
         * (a new sweep makes its order: a few allocations per sweep, none per minibatch). */
        for (int i = 0; i < 320; i++) {
            ASSERT_OK(ctf_reader_next(r, 64, &mb), ctf_reader_error(r));
            ASSERT(mb != NULL);
            ctf_minibatch_free(mb);
        }
        atomic_store(&ctf__alloc.count, 0);
        for (int i = 0; i < 250; i++) {
            ASSERT_OK(ctf_reader_next(r, 64, &mb), ctf_reader_error(r));
            ASSERT(mb != NULL);
            ASSERT_EQ(ctf_minibatch_num_sequences(mb), 64);
            ctf_minibatch_free(mb);
        }
        ASSERT_EQ(atomic_load(&ctf__alloc.count), 0);
        ctf_reader_free(r);
        ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
    }
}

/* The digests of `count` minibatches of k samples, read and freed one by one. */
static void plain_digests(const char *path, bool randomize, uint64_t k, size_t count, uint64_t *out)
{
    ctf_reader *r = open_xy(path, randomize, 1);
    for (size_t i = 0; r && i < count; i++) {
        ctf_minibatch *mb = NULL;
        out[i] = 0;
        if (ctf_reader_next(r, k, &mb) != 0 || !mb) break;
        out[i] = test_digest_minibatch(0xcbf29ce484222325ull, mb);
        ctf_minibatch_free(mb);
    }
    ctf_reader_free(r);
}

TEST(mb_reuse_held_minibatch_keeps_its_data)
{
    enum { N = 120 };
    const char *path = xy_file("reuse_held.ctf", 3000);
    ASSERT(path != NULL);
    uint64_t want[N];
    plain_digests(path, true, 50, N, want);
    ctf_reader *r = open_xy(path, true, 1);
    ASSERT(r != NULL);
    ctf_minibatch *held[3] = {NULL, NULL, NULL};
    for (size_t i = 0; i < N; i++) {
        ctf_minibatch *mb = NULL;
        ASSERT_OK(ctf_reader_next(r, 50, &mb), ctf_reader_error(r));
        ASSERT(mb != NULL);
        ASSERT(test_digest_minibatch(0xcbf29ce484222325ull, mb) == want[i]);
        /* Minibatches 5, 6 and 40 are kept while the others come and go (sweeps end on the
         * way: 3000 samples a sweep). */
        if (i == 5 || i == 6 || i == 40) {
            held[i == 5 ? 0 : i == 6 ? 1 : 2] = mb;
            continue;
        }
        ctf_minibatch_free(mb);
        for (size_t h = 0; h < 3; h++)
            if (held[h])
                ASSERT(test_digest_minibatch(0xcbf29ce484222325ull, held[h]) ==
                       want[h == 0   ? 5
                            : h == 1 ? 6
                                     : 40]);
    }
    ctf_reader_free(r);
    ASSERT(test_digest_minibatch(0xcbf29ce484222325ull, held[2]) == want[40]);
    for (size_t h = 0; h < 3; h++) ctf_minibatch_free(held[h]);
}

/* A second thread that checks and frees the minibatches handed to it, in order. */
typedef struct freer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ctf_minibatch *queue[16];
    size_t head, tail;           /* queue[head % 16 .. tail % 16) waits */
    bool done;
    const uint64_t *want;        /* expected digests, in order */
    size_t checked, bad;
} freer;

static void *freer_main(void *arg)
{
    freer *f = arg;
    for (;;) {
        pthread_mutex_lock(&f->mu);
        while (f->head == f->tail && !f->done) pthread_cond_wait(&f->cv, &f->mu);
        if (f->head == f->tail) {
            pthread_mutex_unlock(&f->mu);
            return NULL;
        }
        ctf_minibatch *mb = f->queue[f->head++ % 16];
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        if (test_digest_minibatch(0xcbf29ce484222325ull, mb) != f->want[f->checked]) f->bad++;
        f->checked++;
        ctf_minibatch_free(mb);
    }
}

TEST(mb_reuse_frees_on_another_thread_and_after_the_reader)
{
    enum { N = 300 };
    const char *path = xy_file("reuse_threads.ctf", 5000);
    ASSERT(path != NULL);
    static uint64_t want[N];
    plain_digests(path, true, 37, N, want);
    const long live0 = atomic_load(&ctf__alloc.live);
    static freer f;
    memset(&f, 0, sizeof f);
    pthread_mutex_init(&f.mu, NULL);
    pthread_cond_init(&f.cv, NULL);
    f.want = want;
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, freer_main, &f), 0);
    ctf_reader *r = open_xy(path, true, 1);
    ASSERT(r != NULL);
    for (size_t i = 0; i < N; i++) {
        ctf_minibatch *mb = NULL;
        ASSERT_OK(ctf_reader_next(r, 37, &mb), ctf_reader_error(r));
        ASSERT(mb != NULL);
        pthread_mutex_lock(&f.mu);
        while (f.tail - f.head == 16) pthread_cond_wait(&f.cv, &f.mu);
        f.queue[f.tail++ % 16] = mb;
        pthread_cond_broadcast(&f.cv);
        pthread_mutex_unlock(&f.mu);
        /* The reader is freed with minibatches still waiting on the other thread. */
        if (i == N - 10) {
            ctf_reader_free(r);
            r = NULL;
            break;
        }
    }
    pthread_mutex_lock(&f.mu);
    f.done = true;
    pthread_cond_broadcast(&f.cv);
    pthread_mutex_unlock(&f.mu);
    pthread_join(t, NULL);
    ctf_reader_free(r);
    ASSERT_EQ(f.bad, 0);
    ASSERT_EQ(f.checked, N - 9);
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
    pthread_mutex_destroy(&f.mu);
    pthread_cond_destroy(&f.cv);
}
