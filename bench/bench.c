/*
 * bench/bench.c -- throughput and memory benchmarks of ctfio (indexing, parsing, the reader,
 * memory), all in one process per data file so that every ratio compares numbers taken in the
 * same run.
 *
 * BENCH_BEFORE builds it against a library from before the two-level index (bench/mem.py's
 * "before" column: the same measurements on the older code).
 *
 * Built by bench/run.py:
 *   make build/bench
 *
 * Usage:
 *   bench all KIND FILE [--reps N] [--mb-samples K] [--chunks 32,4] [--threads 0,1,2]
 *                       [--window 4] [--no-reader] [--only cpu|scan|numbers|index|parse|reader]
 *   bench rss KIND FILE [--chunk-mb 4] [--window 4] [--threads 2] [--mb-samples K]
 *
 * KIND names the stream layout written by bench/gen.py: dense, mnist, sparse, seq, features.
 *
 * `all` reads FILE once (warm page cache, and the in-memory copy used by the number kernels and
 * the parse-only run), then measures, each N times (median reported; the repetitions of numbers
 * that are compared with each other alternate, so that a change in machine load hits both):
 *   cpu            calibration: a register-only loop on 1 and on 2 threads; "scaling" is what a
 *                  second thread gains right now (on a shared machine, the ceiling of every
 *                  2-thread ratio)
 *   newline_scan   pread in 4 MiB blocks + memchr('\n'): the speed limit of any line indexer
 *   strtof         glibc strtof over every number of the file (the file split on
 *                  space/tab/'|'/':'/newline; every token that starts like a number and does not
 *                  follow '|': values, sparse indices, sequence ids). Offsets are found beforehand:
 *                  only the conversions are timed
 *   parse_float    ctf__parse_float (the library's number kernel) over the same tokens
 *   strtof_scan,   the same conversions inside a scanning loop that also finds the tokens (a
 *   parse_float_scan  naive strtof-based reader)
 *   index          ctf_index_build (no cache)
 *   parse_only     ctf__parse_chunk over every chunk, from memory, on one thread (and on two
 *                  plain pthreads taking alternate chunks: parse_only_2t), after ctf_index_build
 *   read_parse     the same on one thread, each chunk first pread into a reused buffer (the
 *                  reader's load without its stat and content check): what remains of the
 *                  reader's cost once the file has to be read
 *   reader         ctf_reader_open + ctf_reader_next(K) until the sweep ends (max_sweeps = 1),
 *                  randomize false/true (window in chunks), each chunk size, each thread count.
 *                  "gbps" is file bytes / time of the ctf_reader_next loop; open (indexing) is
 *                  reported separately as open_s and in gbps_with_open; consumer_cpu_s is the
 *                  CPU time of the calling thread (packing, bookkeeping), the rest of cpu_seconds
 *                  is the prefetch threads' (reading, parsing).
 * GB/s are decimal (1e9 bytes per second) of file bytes. Every line has both wall-clock
 * ("seconds", "gbps") and process CPU time ("cpu_seconds", "cpu_gbps"): on a shared machine the
 * CPU time of a single-threaded measurement is not inflated by other jobs taking the core.
 *
 * `rss` reads FILE once through the reader (randomized, window of W chunks of C MiB, T threads)
 * in a fresh process and reports ru_maxrss, with the index size and the library's own residency
 * counters so that the part that grows with the file (the sequence table) can be told apart from
 * the part that must not (parsed chunks).
 *
 * Output: one JSON object per line per measurement.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ctfio.h"
#include "reader/pipeline.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_REPS 15

/*======================================================================
 * Small helpers
 *====================================================================*/

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void) /* CPU time of the whole process (all threads), user + system */
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
    double t[MAX_REPS];
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_dbl);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void die(const char *what, const ctf_error *e)
{
    char buf[1200];
    if (e)
        fprintf(stderr, "bench: %s: %s\n", what,
                ctf_error_format(e, CTF_SEV_ERROR, buf, sizeof buf));
    else
        fprintf(stderr, "bench: %s: %s\n", what, strerror(errno));
    exit(2);
}

static long maxrss_kb(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Resident set size now (not the peak), from /proc/self/statm; 0 if unavailable. */
static long rss_now_kb(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Common JSON prefix of a timing line; the caller adds fields and the closing brace. */
static void emit_head(const char *bench, const char *kind, const char *path, uint64_t bytes,
                      const double *secs, const double *cpus, int reps)
{
    double med = median(secs, reps), cmed = median(cpus, reps);
    printf("{\"bench\":\"%s\",\"kind\":\"%s\",\"file\":\"%s\",\"bytes\":%llu,\"reps\":%d,"
           "\"parse_variant\":\"%s\",\"seconds\":[",
           bench, kind, path, (unsigned long long)bytes, reps, ctf__parse_variant());
    for (int i = 0; i < reps; i++) printf("%s%.6f", i ? "," : "", secs[i]);
    printf("],\"cpu_seconds\":[");
    for (int i = 0; i < reps; i++) printf("%s%.6f", i ? "," : "", cpus[i]);
    printf("],\"median_s\":%.6f,\"gbps\":%.4f,\"median_cpu_s\":%.6f,\"cpu_gbps\":%.4f", med,
           med > 0 ? (double)bytes / med / 1e9 : 0.0, cmed,
           cmed > 0 ? (double)bytes / cmed / 1e9 : 0.0);
}

/*======================================================================
 * Stream layouts of bench/gen.py
 *====================================================================*/

static const ctf_stream_def DENSE[] = {{"x", NULL, 100, false, false}};
static const ctf_stream_def MNIST[] = {{"labels", NULL, 10, false, false},
                                       {"features", NULL, 784, false, false}};
static const ctf_stream_def SPARSE[] = {{"src", NULL, 50000, true, false},
                                        {"tgt", NULL, 50000, true, false}};
static const ctf_stream_def SEQ[] = {{"x", NULL, 20, false, false}, {"y", NULL, 1000, true, false}};
static const ctf_stream_def FEATURES[] = {{"features", NULL, 256, false, false}};
/* Rows "|x 1" (bench/mem.py). */
static const ctf_stream_def SHORT[] = {{"x", NULL, 1, false, false}};

static void layout(const char *kind, const ctf_stream_def **s, size_t *n)
{
    if (!strcmp(kind, "dense"))
        *s = DENSE, *n = 1;
    else if (!strcmp(kind, "mnist"))
        *s = MNIST, *n = 2;
    else if (!strcmp(kind, "sparse"))
        *s = SPARSE, *n = 2;
    else if (!strcmp(kind, "seq"))
        *s = SEQ, *n = 2;
    else if (!strcmp(kind, "features"))
        *s = FEATURES, *n = 1;
    else if (!strcmp(kind, "short"))
        *s = SHORT, *n = 1;
    else {
        fprintf(stderr, "bench: unknown kind '%s' (dense, mnist, sparse, seq, features)\n", kind);
        exit(2);
    }
}

static void base_config(ctf_config *cfg, const char *path, const char *kind)
{
    ctf_config_init(cfg);
    cfg->path = path;
    layout(kind, &cfg->streams, &cfg->num_streams);
    cfg->cache_index = false;
    cfg->trace_level = 0;
}

/*======================================================================
 * The file in memory
 *====================================================================*/

static char *slurp(const char *path, uint64_t *size)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) die(path, NULL);
    struct stat st;
    if (fstat(fd, &st)) die(path, NULL);
    *size = (uint64_t)st.st_size;
    char *buf = malloc((size_t)*size + 64);
    if (!buf) die("malloc", NULL);
    uint64_t got = 0;
    while (got < *size) {
        ssize_t r = pread(fd, buf + got, (size_t)(*size - got), (off_t)got);
        if (r <= 0) die(path, NULL);
        got += (uint64_t)r;
    }
    memset(buf + *size, 0, 64);
    close(fd);
    return buf;
}

/*======================================================================
 * newline scan
 *====================================================================*/

static uint64_t newline_scan(const char *path)
{
    enum { BLOCK = 4 << 20 };
    static char block[BLOCK];
    int fd = open(path, O_RDONLY);
    if (fd < 0) die(path, NULL);
    uint64_t lines = 0;
    off_t off = 0;
    for (;;) {
        ssize_t r = pread(fd, block, BLOCK, off);
        if (r < 0) die(path, NULL);
        if (r == 0) break;
        const char *p = block, *end = block + r;
        while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
            lines++;
            p++;
        }
        off += r;
    }
    close(fd);
    return lines;
}

/*======================================================================
 * Number tokens (for strtof vs ctf__parse_float)
 *====================================================================*/

static inline int is_sep(char c)
{
    return c == ' ' || c == '\t' || c == '|' || c == ':' || c == '\n' || c == '\r';
}

static inline int starts_number(char c)
{
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.';
}

/* Offsets of every number of the file: the file split on space/tab/'|'/':'/newline, keeping
 * the tokens that start like a number and do not follow '|' (those are stream names). That is
 * values, sparse indices and sequence ids: everything a strtof-based reader would convert. */
static uint32_t *number_tokens(const char *buf, uint64_t size, size_t *n)
{
    size_t cap = 1 << 20, k = 0;
    uint32_t *off = malloc(cap * sizeof *off);
    if (!off) die("malloc", NULL);
    if (size >= UINT32_MAX) {
        fprintf(stderr, "bench: the number test needs a file under 4 GiB\n");
        exit(2);
    }
    uint64_t i = 0;
    while (i < size) {
        while (i < size && is_sep(buf[i])) i++;
        if (i >= size) break;
        uint64_t s = i;
        while (i < size && !is_sep(buf[i])) i++;
        if ((s == 0 || buf[s - 1] != '|') && starts_number(buf[s])) {
            if (k == cap) {
                cap *= 2;
                off = realloc(off, cap * sizeof *off);
                if (!off) die("realloc", NULL);
            }
            off[k++] = (uint32_t)s;
        }
    }
    *n = k;
    return off;
}

/* A naive strtof-style reader loop: walk the buffer, skip separators and stream names, convert
 * every number with strtof (use_ctf = 0) or ctf__parse_float (1). Tokenizing is timed here. */
static float scan_convert(const char *buf, const char *end, int use_ctf, size_t *count)
{
    float acc = 0;
    size_t n = 0;
    const char *p = buf;
    while (p < end) {
        char c = *p;
        if (is_sep(c)) {
            p++;
            continue;
        }
        if (p > buf && p[-1] == '|') { /* a stream name */
            while (p < end && !is_sep(*p)) p++;
            continue;
        }
        float v;
        const char *q;
        if (use_ctf) {
            q = ctf__parse_float(p, end, &v);
        } else {
            char *e;
            v = strtof(p, &e);
            q = e;
        }
        if (!q || q == p) { /* not a number: skip the token */
            while (p < end && !is_sep(*p)) p++;
            continue;
        }
        acc += v;
        n++;
        p = q;
    }
    *count = n;
    return acc;
}

/*======================================================================
 * Parse-only on two plain threads (the scaling ceiling of the parser itself)
 *====================================================================*/

typedef struct po_job {
    const ctf__parse_cfg *pc;
    const ctf_index *idx;
    const char *buf;  /* the whole file in memory, or NULL: pread each chunk from fd */
    int fd;
    size_t first, step;
    uint64_t samples;
    int bad;
} po_job;

static void *po_run(void *arg)
{
    po_job *j = arg;
    char *rbuf = NULL;
#ifdef BENCH_BEFORE
    struct {
        void *p;
    } sb = {0};
#else
    ctf__seqbuf sb = {0};
#endif
    if (!j->buf) {
        uint64_t most = 0;
        for (size_t c = 0; c < j->idx->num_chunks; c++)
            if (j->idx->chunks[c].size > most) most = j->idx->chunks[c].size;
        rbuf = malloc((size_t)most + 1);
        if (!rbuf) die("malloc", NULL);
    }
    for (size_t c = j->first; c < j->idx->num_chunks; c += j->step) {
        ctf__chunk_data *cd = NULL;
        ctf_error e;
        const ctf__chunk *ch = &j->idx->chunks[c];
        const char *at = j->buf + ch->offset;
        if (rbuf) { /* as the reader's load does, without its stat and content check */
            if (ctf__file_pread(j->fd, j->idx->path, rbuf, (size_t)ch->size, ch->offset, &e))
                die("pread", &e);
            at = rbuf;
        }
#ifdef BENCH_BEFORE
        if (ctf__parse_chunk(j->pc, j->idx, c, at, 0, &cd, &e)) die("parse", &e);
#else
        /* The chunk's sequence records are re-made from its bytes, as the reader's load does. */
        if (ctf__index_chunk_seqs(j->idx, c, at, &sb, &e)) die("records", &e);
        if (ctf__parse_chunk(j->pc, j->idx, c, sb.p, at, 0, &cd, &e)) die("parse", &e);
#endif
        if (cd->num_errors || cd->fatal) j->bad = 1;
        for (size_t k = 0; k < cd->num_streams; k++) j->samples += cd->streams[k].samples;
        ctf__chunk_data_free(cd);
    }
    free(rbuf);
    free(sb.p);
    return NULL;
}

/* Each run parses with a buffer pool, as the reader does (prefetch.c): stream buffers are reused
 * from chunk to chunk instead of being faulted in again, so that "parsing alone" and the
 * reader's parse cost the same. */
static uint64_t parse_only(const ctf__parse_cfg *pc0, const ctf_index *idx, const char *buf, int fd,
                           int threads)
{
    po_job jobs[2];
    pthread_t th[2];
    ctf__parse_cfg pcv = *pc0;
#ifdef BENCH_BEFORE
    pcv.pool = ctf__bufpool_for(pc0, (size_t)threads);
#else
    pcv.pool = ctf__bufpool_for(pc0, (size_t)threads, 0, false);
#endif
    if (!pcv.pool) die("ctf__bufpool_create", NULL);
    const ctf__parse_cfg *pc = &pcv;
    for (int t = 0; t < threads; t++) {
        jobs[t] = (po_job){pc, idx, buf, fd, (size_t)t, (size_t)threads, 0, 0};
        if (t) pthread_create(&th[t], NULL, po_run, &jobs[t]);
    }
    po_run(&jobs[0]);
    uint64_t samples = jobs[0].samples;
    for (int t = 1; t < threads; t++) {
        pthread_join(th[t], NULL);
        samples += jobs[t].samples;
    }
    ctf__bufpool_unref(pcv.pool);
    for (int t = 0; t < threads; t++)
        if (jobs[t].bad) {
            fprintf(stderr, "bench: parse errors in the benchmark data\n");
            exit(2);
        }
    return samples;
}

/*======================================================================
 * Reader sweep
 *====================================================================*/

typedef struct sweep_result {
    double open_s, read_s;
    double read_cpu_s;      /* process CPU time (all threads) of the ctf_reader_next loop */
    double consumer_cpu_s;  /* CPU time of the calling thread in that loop (packing etc.) */
    uint64_t samples, minibatches;
    ctf_stats stats;
} sweep_result;

static void reader_sweep(const ctf_config *cfg, uint64_t mb_samples, sweep_result *out)
{
    ctf_error err;
    ctf_reader *r = NULL;
    double t0 = now_s();
    if (ctf_reader_open(cfg, &r, &err)) die("ctf_reader_open", &err);
    double t1 = now_s(), c1 = cpu_s(), k1 = thread_cpu_s();
    uint64_t samples = 0, mbs = 0;
    for (;;) {
        ctf_minibatch *mb = NULL;
        if (ctf_reader_next(r, mb_samples, &mb)) die("ctf_reader_next", ctf_reader_error(r));
        if (!mb) break;
        samples += ctf_minibatch_num_samples(mb);
        mbs++;
        ctf_minibatch_free(mb);
    }
    double t2 = now_s(), c2 = cpu_s(), k2 = thread_cpu_s();
    ctf_reader_get_stats(r, &out->stats);
    out->read_cpu_s = c2 - c1;
    out->consumer_cpu_s = k2 - k1;
    ctf_reader_free(r);
    out->open_s = t1 - t0;
    out->read_s = t2 - t1;
    out->samples = samples;
    out->minibatches = mbs;
}

/*======================================================================
 * Options
 *====================================================================*/

typedef struct opts {
    int reps;
    uint64_t mb_samples;
    int chunks[8], nchunks;
    int threads[8], nthreads;
    uint64_t window;
    int chunk_mb;     /* rss */
    int rss_threads;  /* rss */
    bool no_reader;
    const char *only; /* run one group: scan, numbers, index, parse, reader, cpu */
} opts;

static int parse_list(const char *s, int *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *e;
        long v = strtol(s, &e, 10);
        if (e == s) break;
        out[n++] = (int)v;
        s = *e == ',' ? e + 1 : e;
    }
    return n;
}

static void parse_opts(int argc, char **argv, opts *o)
{
    *o = (opts){.reps = 3,
                .mb_samples = 512,
                .chunks = {32, 4},
                .nchunks = 2,
                .threads = {0, 1, 2},
                .nthreads = 3,
                .window = 4,
                .chunk_mb = 4,
                .rss_threads = 2};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--reps"))
            o->reps = atoi(v), i++;
        else if (!strcmp(a, "--mb-samples"))
            o->mb_samples = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--chunks"))
            o->nchunks = parse_list(v, o->chunks, 8), i++;
        else if (!strcmp(a, "--threads")) {
            o->nthreads = parse_list(v, o->threads, 8);
            if (o->nthreads) o->rss_threads = o->threads[0];
            i++;
        } else if (!strcmp(a, "--window"))
            o->window = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--chunk-mb"))
            o->chunk_mb = atoi(v), i++;
        else if (!strcmp(a, "--no-reader"))
            o->no_reader = true;
        else if (!strcmp(a, "--only"))
            o->only = v, i++;
        else {
            fprintf(stderr, "bench: unknown option '%s'\n", a);
            exit(2);
        }
    }
    if (o->reps < 1) o->reps = 1;
    if (o->reps > MAX_REPS) o->reps = MAX_REPS;
}

/*======================================================================
 * CPU calibration: how much a perfectly parallel compute loop gains from a second thread right
 * now. On a shared machine this is the ceiling for every "2 threads / 1 thread" ratio.
 *====================================================================*/

static void *spin(void *arg)
{
    uint64_t x = 88172645463325252ull, n = *(uint64_t *)arg;
    for (uint64_t i = 0; i < n; i++) { /* xorshift: register-only work */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    *(uint64_t *)arg = x;
    return NULL;
}

static volatile uint64_t cpu_sink;

static double cpu_run(int threads, uint64_t n)
{
    uint64_t w[2] = {n, n};
    pthread_t th;
    double t = now_s();
    if (threads == 2) pthread_create(&th, NULL, spin, &w[1]);
    spin(&w[0]);
    if (threads == 2) pthread_join(th, NULL);
    double dt = now_s() - t;
    cpu_sink = w[0] ^ w[1];
    return dt;
}

static void bench_cpu(const char *kind, const opts *o)
{
    const uint64_t n = 200000000ull; /* ~0.15-0.3 s */
    double s1[MAX_REPS], s2[MAX_REPS];
    for (int i = 0; i < o->reps; i++) {
        s1[i] = cpu_run(1, n);
        s2[i] = cpu_run(2, n);
    }
    double m1 = median(s1, o->reps), m2 = median(s2, o->reps);
    printf("{\"bench\":\"cpu\",\"kind\":\"%s\",\"reps\":%d,\"one_thread_s\":%.4f,"
           "\"two_threads_s\":%.4f,\"scaling\":%.3f}\n",
           kind, o->reps, m1, m2, 2.0 * m1 / m2);
    fflush(stdout);
}

/* strtof vs ctf__parse_float: over pre-found number tokens (conversion only) and in a scanning
 * loop (tokenizing + conversion, what a strtof-based reader does). */
static void bench_numbers(const char *kind, const char *path, const char *buf, uint64_t size, int R)
{
    size_t ntok;
    uint32_t *tok = number_tokens(buf, size, &ntok);
    const char *end = buf + size;
    size_t mismatches = 0;
    for (size_t k = 0; k < ntok; k++) {
        float a, b = strtof(buf + tok[k], NULL);
        const char *q = ctf__parse_float(buf + tok[k], end, &a);
        if (!q || memcmp(&a, &b, sizeof a)) mismatches++;
    }
    /* Repetitions alternate between the two converters so that a change in machine load hits
     * both alike. */
    volatile float sink;
    double ws[4][MAX_REPS], cs[4][MAX_REPS];
    size_t nscan[2] = {0, 0};
    for (int i = 0; i < R; i++) {
        for (int use_ctf = 0; use_ctf <= 1; use_ctf++) {
            double *secs_ = ws[use_ctf], *cpus_ = cs[use_ctf];
            double w0 = now_s(), c0 = cpu_s();
            float acc = 0;
            if (use_ctf) {
                for (size_t k = 0; k < ntok; k++) {
                    float v;
                    ctf__parse_float(buf + tok[k], end, &v);
                    acc += v;
                }
            } else {
                for (size_t k = 0; k < ntok; k++) acc += strtof(buf + tok[k], NULL);
            }
            cpus_[i] = cpu_s() - c0;
            secs_[i] = now_s() - w0;
            sink = acc;
        }
        for (int use_ctf = 0; use_ctf <= 1; use_ctf++) {
            double *secs_ = ws[2 + use_ctf], *cpus_ = cs[2 + use_ctf];
            double w0 = now_s(), c0 = cpu_s();
            sink = scan_convert(buf, end, use_ctf, &nscan[use_ctf]);
            cpus_[i] = cpu_s() - c0;
            secs_[i] = now_s() - w0;
        }
    }
    for (int use_ctf = 0; use_ctf <= 1; use_ctf++) {
        emit_head(use_ctf ? "parse_float" : "strtof", kind, path, size, ws[use_ctf], cs[use_ctf],
                  R);
        printf(",\"numbers\":%zu,\"mnumbers_per_s\":%.2f", ntok,
               (double)ntok / median(cs[use_ctf], R) / 1e6);
        if (use_ctf) printf(",\"mismatches_vs_strtof\":%zu", mismatches);
        printf("}\n");
    }
    for (int use_ctf = 0; use_ctf <= 1; use_ctf++) {
        emit_head(use_ctf ? "parse_float_scan" : "strtof_scan", kind, path, size, ws[2 + use_ctf],
                  cs[2 + use_ctf], R);
        printf(",\"numbers\":%zu}\n", nscan[use_ctf]);
    }
    (void)sink;
    fflush(stdout);
    free(tok);
}

static bool want(const opts *o, const char *group) { return !o->only || !strcmp(o->only, group); }

/*======================================================================
 * bench all
 *====================================================================*/

static void bench_all(const char *kind, const char *path, const opts *o)
{
    const int R = o->reps;
    uint64_t size;
    char *buf = slurp(path, &size); /* also warms the page cache */

    if (want(o, "cpu")) bench_cpu(kind, o);

    /* Newline scan and indexing, repetitions alternating (a load change hits both alike). */
    ctf_config cfg;
    base_config(&cfg, path, kind);
    ctf_error err;
    ctf_index_info info;
    uint64_t lines = 0;
    double ws[4][MAX_REPS], cs[4][MAX_REPS]; /* [1], [2]: threads; [3]: read + parse */
    const bool scan = want(o, "scan"), index = want(o, "index");
    for (int i = 0; i < ((scan || index) ? R : 1); i++) {
        if (scan) {
            double *secs_ = ws[0], *cpus_ = cs[0];
            double w0 = now_s(), c0 = cpu_s();
            lines = newline_scan(path);
            cpus_[i] = cpu_s() - c0;
            secs_[i] = now_s() - w0;
        }
        ctf_index *idx = NULL;
        double w0 = now_s(), c0 = cpu_s();
        if (ctf_index_build(&cfg, &idx, &err)) die("ctf_index_build", &err);
        cs[1][i] = cpu_s() - c0;
        ws[1][i] = now_s() - w0;
        ctf_index_get_info(idx, &info);
        ctf_index_free(idx);
    }
    if (scan) {
        emit_head("newline_scan", kind, path, size, ws[0], cs[0], R);
        printf(",\"lines\":%llu}\n", (unsigned long long)lines);
    }
    if (index) {
        emit_head("index", kind, path, size, ws[1], cs[1], R);
        printf(",\"sequences\":%llu,\"samples\":%llu,\"lines\":%llu}\n",
               (unsigned long long)info.sequences, (unsigned long long)info.samples,
               (unsigned long long)info.lines);
    }
    fflush(stdout);
    const uint64_t total_samples = info.samples;

    if (want(o, "numbers")) bench_numbers(kind, path, buf, size, R);

    /* Parse-only, per chunk size, on 1 and 2 threads (alternating). */
    for (int c = 0; want(o, "parse") && c < o->nchunks; c++) {
        base_config(&cfg, path, kind);
        cfg.chunk_size_bytes = (uint64_t)o->chunks[c] << 20;
        ctf_index *idx = NULL;
        if (ctf_index_build(&cfg, &idx, &err)) die("ctf_index_build", &err);
        ctf__parse_cfg pc = {
            path, cfg.streams, cfg.num_streams, cfg.precision, idx->line_mode, false, 0, NULL};
        int fd = ctf__file_open(path, &err);
        if (fd < 0) die("open", &err);
        uint64_t samples = 0;
        for (int i = 0; i < R; i++)
            for (int m = 1; m <= 3; m++) {
                double w0 = now_s(), c0 = cpu_s();
                samples = m < 3 ? parse_only(&pc, idx, buf, -1, m)
                                : parse_only(&pc, idx, NULL, fd, 1);
                cs[m][i] = cpu_s() - c0;
                ws[m][i] = now_s() - w0;
            }
        static const char *const names[] = {"", "parse_only", "parse_only_2t", "read_parse"};
        for (int m = 1; m <= 3; m++) {
            emit_head(names[m], kind, path, size, ws[m], cs[m], R);
            printf(",\"chunk_mb\":%d,\"threads\":%d,\"chunks\":%zu,\"stream_samples\":%llu}\n",
                   o->chunks[c], m == 2 ? 2 : 1, idx->num_chunks, (unsigned long long)samples);
        }
        fflush(stdout);
        close(fd);
        ctf_index_free(idx);
    }
    free(buf);

    if (o->no_reader || !want(o, "reader")) return;
    /* The reader: per randomization and chunk size, the thread counts alternate. */
    for (int rnd = 0; rnd <= 1; rnd++)
        for (int c = 0; c < o->nchunks; c++) {
            double rw[8][MAX_REPS], rc[8][MAX_REPS], opens[8][MAX_REPS], totals[8][MAX_REPS];
            double consumer[8][MAX_REPS];
            sweep_result sr[8];
            for (int i = 0; i < R; i++)
                for (int t = 0; t < o->nthreads; t++) {
                    base_config(&cfg, path, kind);
                    cfg.randomize = rnd;
                    cfg.randomization_window = rnd ? o->window : 0;
                    cfg.chunk_size_bytes = (uint64_t)o->chunks[c] << 20;
                    cfg.num_threads = (size_t)o->threads[t];
                    cfg.max_sweeps = 1;
                    reader_sweep(&cfg, o->mb_samples, &sr[t]);
                    if (sr[t].samples != total_samples) {
                        fprintf(stderr, "bench: reader delivered %llu samples, index has %llu\n",
                                (unsigned long long)sr[t].samples,
                                (unsigned long long)total_samples);
                        exit(2);
                    }
                    rw[t][i] = sr[t].read_s;
                    rc[t][i] = sr[t].read_cpu_s;
                    consumer[t][i] = sr[t].consumer_cpu_s;
                    opens[t][i] = sr[t].open_s;
                    totals[t][i] = sr[t].open_s + sr[t].read_s;
                }
            for (int t = 0; t < o->nthreads; t++) {
                emit_head("reader", kind, path, size, rw[t], rc[t], R);
                printf(",\"randomize\":%s,\"window_chunks\":%llu,\"chunk_mb\":%d,\"threads\":%d,"
                       "\"mb_samples\":%llu,\"minibatches\":%llu,\"consumer_cpu_s\":%.6f,"
                       "\"open_s\":%.6f,\"gbps_with_open\":%.4f,\"chunks_resident_peak\":%llu,"
                       "\"bytes_resident_peak\":%llu}\n",
                       rnd ? "true" : "false", (unsigned long long)(rnd ? o->window : 0),
                       o->chunks[c], o->threads[t], (unsigned long long)o->mb_samples,
                       (unsigned long long)sr[t].minibatches, median(consumer[t], R),
                       median(opens[t], R), (double)size / median(totals[t], R) / 1e9,
                       (unsigned long long)sr[t].stats.chunks_resident_peak,
                       (unsigned long long)sr[t].stats.bytes_resident_peak);
            }
            fflush(stdout);
        }
}

/*======================================================================
 * bench rss
 *====================================================================*/

static void bench_rss(const char *kind, const char *path, const opts *o)
{
    ctf_config cfg;
    base_config(&cfg, path, kind);
    cfg.randomize = true;
    cfg.randomization_window = o->window;
    cfg.chunk_size_bytes = (uint64_t)o->chunk_mb << 20;
    cfg.num_threads = (size_t)o->rss_threads;
    cfg.max_sweeps = 1;
    const char *pattern[1] = {path};
    if (strpbrk(path, "*?[")) { /* a corpus: every file the pattern matches */
        cfg.path = NULL;
        cfg.paths = pattern;
        cfg.num_paths = 1;
    }
    long rss_start = maxrss_kb();
    ctf_error err;
    ctf_reader *r = NULL;
    double t0 = now_s();
    if (ctf_reader_open(&cfg, &r, &err)) die("ctf_reader_open", &err);
    long rss_open = maxrss_kb(), rss_open_now = rss_now_kb();
    uint64_t index_bytes = 0, file_bytes = 0;
    size_t nseq = 0, nchunks = 0;
    for (size_t f = 0; f < ctf_reader_num_files(r); f++) {
        ctf_index_info info;
        ctf_index_get_info(ctf_reader_file_index(r, f), &info);
#ifdef BENCH_BEFORE /* the library before the two-level index: 32 bytes per sequence */
        index_bytes += info.sequences * 32 + info.chunks * 40;
#else
        index_bytes += info.index_bytes;
#endif
        file_bytes += info.file_size;
        nseq += (size_t)info.sequences;
        nchunks += (size_t)info.chunks;
    }
    uint64_t samples = 0;
    for (;;) {
        ctf_minibatch *mb = NULL;
        if (ctf_reader_next(r, o->mb_samples, &mb)) die("ctf_reader_next", ctf_reader_error(r));
        if (!mb) break;
        samples += ctf_minibatch_num_samples(mb);
        ctf_minibatch_free(mb);
    }
    double secs = now_s() - t0;
    ctf_stats st;
    ctf_reader_get_stats(r, &st);
    ctf_reader_free(r);
    printf("{\"bench\":\"rss\",\"kind\":\"%s\",\"file\":\"%s\",\"bytes\":%llu,\"chunk_mb\":%d,"
           "\"window_chunks\":%llu,\"threads\":%d,\"seconds\":%.3f,\"samples\":%llu,"
           "\"sequences\":%zu,\"chunks\":%zu,\"index_bytes\":%llu,\"maxrss_start_kb\":%ld,"
           "\"maxrss_after_open_kb\":%ld,\"rss_after_open_kb\":%ld,\"maxrss_kb\":%ld,\"chunks_"
           "resident_peak\":%llu,"
           "\"bytes_resident_peak\":%llu}\n",
           kind, path, (unsigned long long)file_bytes, o->chunk_mb, (unsigned long long)o->window,
           o->rss_threads, secs, (unsigned long long)samples, nseq, nchunks,
           (unsigned long long)index_bytes, rss_start, rss_open, rss_open_now, maxrss_kb(),
           (unsigned long long)st.chunks_resident_peak, (unsigned long long)st.bytes_resident_peak);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: bench all|rss KIND FILE [options]  (see the comment in bench.c)\n");
        return 2;
    }
    opts o;
    parse_opts(argc - 4, argv + 4, &o);
    if (!strcmp(argv[1], "all"))
        bench_all(argv[2], argv[3], &o);
    else if (!strcmp(argv[1], "rss"))
        bench_rss(argv[2], argv[3], &o);
    else {
        fprintf(stderr, "bench: unknown mode '%s'\n", argv[1]);
        return 2;
    }
    return 0;
}
