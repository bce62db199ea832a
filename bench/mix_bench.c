/*
 * bench/mix_bench.c -- the cost of mixing: reads the same samples from one file (ALL) and from a
 * mix of its two halves (A, B; ALL is A then B), weighted by their sizes in samples so that both
 * parts end their sweep together. Each run reads SWEEPS sweeps' samples (the steady state of a
 * training run: no limit, so nothing is cut short) in minibatches of K; runs alternate one / mix;
 * prints the median wall and process CPU seconds per million samples of each and their ratios
 * (one ÷ mix: the mix's throughput relative to the single file). bench/mix.sh drives it.
 *
 *   make build/mix_bench
 *   build/mix_bench ALL A B DIM K RUNS THREADS CHUNK_BYTES SWEEPS
 */
#include "ctfio.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) * 1e-6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t samples_of(const char *path, const ctf_stream_def *s)
{
    ctf_config c;
    ctf_config_init(&c);
    c.path = path;
    c.streams = s;
    c.num_streams = 1;
    ctf_index *idx;
    ctf_error e;
    if (ctf_index_build(&c, &idx, &e)) {
        fprintf(stderr, "%s: %s\n", path, e.message);
        exit(1);
    }
    ctf_index_info info;
    ctf_index_get_info(idx, &info);
    ctf_index_free(idx);
    return info.samples;
}

/* Reads `total` samples in minibatches of k; returns wall and CPU seconds per million. */
static void run(const ctf_config *c, uint64_t total, uint64_t k, double *wall, double *cpus)
{
    ctf_reader *r;
    ctf_error e;
    double t0 = now(), c0 = cpu();
    if (ctf_reader_open(c, &r, &e)) {
        fprintf(stderr, "open: %s\n", e.message);
        exit(1);
    }
    uint64_t got = 0;
    while (got < total) {
        ctf_minibatch *mb;
        if (ctf_reader_next(r, k, &mb) || !mb) {
            fprintf(stderr, "next: %s\n", ctf_reader_error(r)->message);
            exit(1);
        }
        got += ctf_minibatch_num_samples(mb);
        ctf_minibatch_free(mb);
    }
    ctf_reader_free(r);
    *wall = (now() - t0) * 1e6 / (double)got;
    *cpus = (cpu() - c0) * 1e6 / (double)got;
}

int main(int argc, char **argv)
{
    if (argc != 10) {
        fprintf(stderr, "usage: mix_bench ALL A B DIM K RUNS THREADS CHUNK_BYTES SWEEPS\n");
        return 2;
    }
    const ctf_stream_def s[1] = {{.name = "x", .dim = (size_t)atol(argv[4])}};
    const uint64_t k = strtoull(argv[5], NULL, 10);
    const int runs = atoi(argv[6]);
    const uint64_t total = samples_of(argv[1], s);
    const uint64_t na = samples_of(argv[2], s), nb = samples_of(argv[3], s);
    if (na + nb != total || runs < 1 || runs > 64) {
        fprintf(stderr, "A and B must split ALL (samples %llu + %llu != %llu)\n",
                (unsigned long long)na, (unsigned long long)nb, (unsigned long long)total);
        return 1;
    }
    const char *pa[1] = {argv[2]}, *pb[1] = {argv[3]};
    const ctf_mix_part parts[2] = {{.paths = pa, .num_paths = 1, .weight = (double)na},
                                   {.paths = pb, .num_paths = 1, .weight = (double)nb}};
    ctf_config one, mix;
    ctf_config_init(&one);
    one.path = argv[1];
    one.streams = s;
    one.num_streams = 1;
    one.num_threads = (size_t)atol(argv[7]);
    one.chunk_size_bytes = strtoull(argv[8], NULL, 10);
    const uint64_t want = total * strtoull(argv[9], NULL, 10);
    mix = one;
    mix.path = NULL;
    mix.mix = parts;
    mix.num_mix = 2;
    double w1[64], c1[64], w2[64], c2[64], d;
    run(&one, want, k, &d, &d); /* warm the page cache */
    for (int i = 0; i < runs; i++) {
        run(&one, want, k, &w1[i], &c1[i]);
        run(&mix, want, k, &w2[i], &c2[i]);
    }
    qsort(w1, (size_t)runs, sizeof *w1, cmp);
    qsort(c1, (size_t)runs, sizeof *c1, cmp);
    qsort(w2, (size_t)runs, sizeof *w2, cmp);
    qsort(c2, (size_t)runs, sizeof *c2, cmp);
    const int m = runs / 2;
    printf("{\"samples\": %llu, \"one_wall\": %.4f, \"mix_wall\": %.4f, \"one_cpu\": %.4f, "
           "\"mix_cpu\": %.4f, \"ratio_wall\": %.3f, \"ratio_cpu\": %.3f}\n",
           (unsigned long long)want, w1[m], w2[m], c1[m], c2[m], w1[m] / w2[m], c1[m] / c2[m]);
    return 0;
}
