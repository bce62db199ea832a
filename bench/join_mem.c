/*
 * bench/join_mem.c -- peak memory and open time of a join by key: one randomized sweep over
 * PRIMARY joined with PART (one dense stream of dimension 1 each, 1 MiB chunks, a window of 4
 * chunks), then the open's CPU and wall time, the sweep's wall time, the sequences read and the
 * process's peak RSS. Only the public API, so that the same file builds against any version.
 *
 *   make build/join_mem
 *   build/join_mem PRIMARY PART
 *   build/join_mem PRIMARY -       (PRIMARY alone, for comparison)
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
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s PRIMARY PART\n", argv[0]);
        return 2;
    }
    static const ctf_stream_def sx[] = {{.name = "x", .dim = 1}}, sy[] = {{.name = "y", .dim = 1}};
    const char *yp[] = {argv[2]};
    ctf_join_def jd = {.paths = yp, .num_paths = 1, .streams = sy, .num_streams = 1};
    ctf_config c;
    ctf_config_init(&c);
    c.path = argv[1];
    c.streams = sx;
    c.num_streams = 1;
    const int alone = argv[2][0] == '-' && !argv[2][1];
    c.joins = alone ? NULL : &jd;
    c.num_joins = alone ? 0 : 1;
    c.chunk_size_bytes = 1 << 20;
    c.randomization_window = 4;
    c.max_sweeps = 1;
    c.num_threads = 2;
    ctf_reader *r;
    ctf_error e;
    double t0 = now(), c0 = cpu();
    if (ctf_reader_open(&c, &r, &e)) {
        fprintf(stderr, "open: %s\n", e.message);
        return 1;
    }
    double t1 = now(), c1 = cpu();
    ctf_minibatch *mb;
    unsigned long long n = 0;
    int rc;
    while ((rc = ctf_reader_next(r, 4096, &mb)) == 0 && mb) {
        n += ctf_minibatch_num_sequences(mb);
        ctf_minibatch_free(mb);
    }
    if (rc) {
        fprintf(stderr, "read: %s\n", ctf_reader_error(r)->message);
        return 1;
    }
    double t2 = now();
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("open_cpu_s %.2f open_wall_s %.2f sweep_wall_s %.2f sequences %llu peak_rss_mb %.1f\n",
           c1 - c0, t1 - t0, t2 - t1, n, (double)ru.ru_maxrss / 1024.0);
    ctf_reader_free(r);
    return 0;
}
