/*
 * bench/next_loop.c -- the C side of bench/py_overhead.py on its own: CPU microseconds of
 * ctf_reader_next(K) + ctf_minibatch_free on the calling thread, on the file py_overhead.py
 * writes (dense x dim 16, sparse y dim 10, kept in memory), warmed up, best of 5 runs.
 *
 *   make build/next_loop
 *   build/next_loop FILE K N
 */
#include "ctfio.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double thread_cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: next_loop FILE K N\n");
        return 2;
    }
    const ctf_stream_def s[2] = {{.name = "x", .alias = "x", .dim = 16},
                                 {.name = "y", .alias = "y", .dim = 10, .is_sparse = true}};
    ctf_config c;
    ctf_config_init(&c);
    c.path = argv[1];
    c.streams = s;
    c.num_streams = 2;
    c.keep_data_in_memory = true;
    const uint64_t k = strtoull(argv[2], NULL, 10);
    const long n = atol(argv[3]);
    ctf_reader *r = NULL;
    ctf_minibatch *mb = NULL;
    ctf_error e;
    if (ctf_reader_open(&c, &r, &e) != 0) {
        fprintf(stderr, "next_loop: %s\n", e.message);
        return 1;
    }
    for (int i = 0; i < 300; i++) {
        if (ctf_reader_next(r, k, &mb) != 0) return 1;
        ctf_minibatch_free(mb);
    }
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        const double t0 = thread_cpu();
        for (long i = 0; i < n; i++) {
            if (ctf_reader_next(r, k, &mb) != 0) return 1;
            ctf_minibatch_free(mb);
        }
        const double t = thread_cpu() - t0;
        if (t < best) best = t;
    }
    printf("ctf_reader_next(%llu) + ctf_minibatch_free: %.2f CPU us per minibatch\n",
           (unsigned long long)k, best / (double)n * 1e6);
    ctf_reader_free(r);
    return 0;
}
