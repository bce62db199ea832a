/*
 * test_prefetch.c -- the prefetch stage's threads as helpers (lib/prefetch.c): a parallel run of
 * parts (the minibatch copies) runs every part exactly once, whatever the number of threads,
 * and returns only when all are done.
 */
#include "ctfio_internal.h"
#include "test.h"

#include <pthread.h>

typedef struct parts_log {
    pthread_mutex_t mu;
    unsigned runs[64];
    size_t calls;
} parts_log;

static void count_part(void *arg, size_t part)
{
    parts_log *p = arg;
    pthread_mutex_lock(&p->mu);
    if (part < 64) p->runs[part]++;
    p->calls++;
    pthread_mutex_unlock(&p->mu);
}

TEST(prefetch_run_parts_runs_each_part_once)
{
    ctf__parse_cfg pc;
    memset(&pc, 0, sizeof pc);
    ctf__source src;
    memset(&src, 0, sizeof src);
    const size_t threads[] = {0, 1, 3};
    for (size_t ti = 0; ti < 3; ti++) {
        ctf__loader *l = NULL;
        ctf_error e;
        ASSERT_EQ(ctf__loader_create(&pc, &src, threads[ti], &l, &e), 0);
        for (size_t parts = 1; parts <= 40; parts += 3)
            for (int rep = 0; rep < 5; rep++) {
                parts_log log;
                memset(&log, 0, sizeof log);
                pthread_mutex_init(&log.mu, NULL);
                ctf__loader_run_parts(l, count_part, &log, parts);
                /* Returned only after every part ran: the counts are final here. */
                pthread_mutex_lock(&log.mu);
                size_t calls = log.calls;
                bool once = true;
                for (size_t i = 0; i < 64; i++) once &= log.runs[i] == (i < parts ? 1u : 0u);
                pthread_mutex_unlock(&log.mu);
                pthread_mutex_destroy(&log.mu);
                ASSERT_EQ(calls, parts);
                ASSERT(once);
            }
        ctf__loader_free(l);
    }
}
