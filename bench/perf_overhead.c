/*
 * bench/perf_overhead.c -- what the always-on stage counters cost: one randomized sweep at the
 * default settings (ctf_config_init: window, chunk size, one thread per core), timed in wall
 * and process CPU seconds. bench/perf_overhead.sh builds it twice, against the library with
 * the counters and against one without them, and alternates the two.
 *
 *   perf_overhead FILE DIM MB_SAMPLES   ->  "wall_s cpu_s samples"
 */
#include "ctfio.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: perf_overhead FILE DIM MB_SAMPLES\n");
        return 2;
    }
    const ctf_stream_def s = {.name = "x", .dim = (size_t)atol(argv[2])};
    ctf_config c;
    ctf_config_init(&c);
    c.path = argv[1];
    c.streams = &s;
    c.num_streams = 1;
    c.skip_sequence_ids = true;
    c.max_sweeps = 1;
    const uint64_t k = strtoull(argv[3], NULL, 10);
    const double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
    ctf_reader *r;
    ctf_error e;
    if (ctf_reader_open(&c, &r, &e)) {
        fprintf(stderr, "open: %s\n", e.message);
        return 1;
    }
    uint64_t samples = 0;
    for (;;) {
        ctf_minibatch *mb;
        if (ctf_reader_next(r, k, &mb)) {
            fprintf(stderr, "next: %s\n", ctf_reader_error(r)->message);
            return 1;
        }
        if (!mb) break;
        samples += ctf_minibatch_num_samples(mb);
        ctf_minibatch_free(mb);
    }
    ctf_reader_free(r);
    printf("%.4f %.4f %llu\n", now(CLOCK_MONOTONIC) - w0, now(CLOCK_PROCESS_CPUTIME_ID) - c0,
           (unsigned long long)samples);
    return 0;
}
