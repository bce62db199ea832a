/*
 * test_chunk_cache.c -- the chunk cache (ctf_config.chunk_cache): minibatches identical with and
 * without it over sweeps, thread counts, precisions, corpora and joins; later opens served from
 * it without parsing; a changed file, a damaged entry, an unwritable directory, a limit and the
 * temporary files of writers that died.
 */
#include "ctfio.h"
#include "test.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const ctf_stream_def S2[] = {{.name = "x", .alias = "a", .dim = 5},
                                    {.name = "y", .dim = 50, .is_sparse = true}};
static const ctf_stream_def SJ[] = {{.name = "z", .dim = 2}};

static uint64_t next_rand(uint64_t *s)
{
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n sequences of 1-4 lines: x dense on every line, y sparse on some (always on the first) with
 * indices in no order, sometimes an empty sample; bad_at: text added to some lines, and some
 * short rows. */
static char *gen_text(uint64_t seed, size_t n, const char *bad_at)
{
    size_t cap = n * 400 + 64, len = 0;
    char *t = malloc(cap);
    uint64_t s = seed;
    for (size_t q = 0; q < n; q++) {
        const int lines = 1 + (int)(next_rand(&s) % 4);
        for (int l = 0; l < lines; l++) {
            len += (size_t)snprintf(t + len, cap - len, "%zu |a", q);
            /* With bad_at, a short row (a warning) now and then too. */
            const int nx = bad_at && q % 50 == 3 && l == 0 ? 2 : 5;
            for (int x = 0; x < nx; x++)
                len += (size_t)snprintf(t + len, cap - len, " %.9g",
                                        (double)(int64_t)(next_rand(&s) % 20001 - 10000) /
                                            (double)(1 + next_rand(&s) % 97));
            if (l == 0 || next_rand(&s) % 3) {
                len += (size_t)snprintf(t + len, cap - len, " |y");
                const int ny = (int)(next_rand(&s) % 5), base = (int)(next_rand(&s) % 50);
                for (int x = 0; x < ny; x++) /* distinct indices, in no order */
                    len += (size_t)snprintf(t + len, cap - len, " %d:%.6g", (base + 13 * x) % 50,
                                            (double)(next_rand(&s) % 1000) / 7.0);
            }
            if (bad_at && q % 40 == 7 && l == 0)
                len += (size_t)snprintf(t + len, cap - len, " %s", bad_at);
            t[len++] = '\n';
        }
    }
    t[len] = 0;
    return t;
}

static void cfg_for(ctf_config *c, const char *path, ctf_precision prec, size_t threads)
{
    ctf_config_init(c);
    c->path = path;
    c->streams = S2;
    c->num_streams = 2;
    c->precision = prec;
    c->chunk_size_bytes = 2048;
    c->randomization_window = 3;
    c->randomization_seed = 5;
    c->num_threads = threads;
    c->max_sweeps = 3;
    c->log = test_log_capture;
    c->log_user = NULL;
}

/* Every minibatch's digest until the end; *perf the reader's counters at the end. */
static uint64_t digest_run(const ctf_config *c, ctf_perf *perf, ctf_stats *stats, int *failed)
{
    ctf_reader *r = NULL;
    ctf_error e;
    *failed = 0;
    if (ctf_reader_open(c, &r, &e)) {
        fprintf(stderr, "open: %s\n", e.message);
        *failed = 1;
        return 0;
    }
    uint64_t h = 14695981039346656037ull, calls = 0;
    for (;;) {
        ctf_minibatch *mb;
        if (ctf_reader_next(r, 1 + calls % 37, &mb)) {
            fprintf(stderr, "next: %s\n", ctf_reader_error(r)->message);
            *failed = 1;
            break;
        }
        if (!mb) break;
        h = test_digest_minibatch(h, mb);
        ctf_minibatch_free(mb);
        calls++;
    }
    if (perf) ctf_reader_get_perf(r, perf, sizeof *perf);
    if (stats) ctf_reader_get_stats(r, stats);
    ctf_reader_free(r);
    return h;
}

static char *fresh_dir(const char *name)
{
    char *d = malloc(600);
    snprintf(d, 600, "%s/%s", test_tmpdir(), name);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    if (system(cmd) != 0) return d;
    return d;
}

/* The entries in dir: how many, *bytes their sizes. */
static size_t entries(const char *dir, uint64_t *bytes, char names[][1000], size_t max)
{
    size_t n = 0;
    if (bytes) *bytes = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l < 7 || strcmp(e->d_name + l - 6, ".chunk")) continue;
        char p[900];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(p, &st)) continue;
        if (bytes) *bytes += (uint64_t)st.st_size;
        if (names && n < max) snprintf(names[n], 1000, "%s", p);
        n++;
    }
    closedir(d);
    return n;
}

TEST(chunk_cache_same_minibatches_over_threads_and_precisions)
{
    char *text = gen_text(1, 300, NULL);
    const char *path = test_write_file("cc_same.ctf", text, strlen(text));
    const ctf_precision precs[] = {CTF_FLOAT32, CTF_FLOAT64};
    const size_t threads[] = {0, 1, 3};
    for (size_t pi = 0; pi < 2; pi++) {
        char *dir = fresh_dir(pi ? "cc_same_d" : "cc_same_f");
        ctf_config c;
        int failed;
        cfg_for(&c, path, precs[pi], 2);
        const uint64_t want = digest_run(&c, NULL, NULL, &failed);
        ASSERT(!failed);
        for (size_t ti = 0; ti < 3; ti++) {
            cfg_for(&c, path, precs[pi], threads[ti]);
            c.chunk_cache = dir;
            ctf_perf p;
            ASSERT_U64_EQ(digest_run(&c, &p, NULL, &failed), want);
            ASSERT(!failed);
            if (ti == 0) {
                /* The first run stores every chunk; its later sweeps read them back. */
                ASSERT(p.chunk_cache_misses > 0);
                ASSERT(p.chunk_cache_hits > 0);
            } else {
                /* Later opens parse nothing. */
                ASSERT_U64_EQ(p.chunk_cache_misses, 0);
                ASSERT(p.chunk_cache_hits > 0);
                ASSERT_U64_EQ(p.parse_bytes, 0);
            }
        }
        ASSERT(entries(dir, NULL, NULL, 0) > 10);
        free(dir);
    }
    free(text);
}

TEST(chunk_cache_corpus_and_join)
{
    char *t0 = gen_text(2, 90, NULL), *t1 = gen_text(3, 70, NULL);
    char p0[600], p1[600], pj[600];
    snprintf(p0, sizeof p0, "%s", test_write_file("cc_c0.ctf", t0, strlen(t0)));
    snprintf(p1, sizeof p1, "%s", test_write_file("cc_c1.ctf", t1, strlen(t1)));
    /* The joined part: a z for every key of the first file, in another order. */
    char jt[90 * 40];
    size_t jl = 0;
    for (int q = 89; q >= 0; q--)
        jl += (size_t)snprintf(jt + jl, sizeof jt - jl, "%d |z %d %d\n", q, q, -q);
    snprintf(pj, sizeof pj, "%s", test_write_file("cc_j.ctf", jt, jl));
    const char *paths[] = {p0, p1};
    const char *jpaths[] = {pj};
    ctf_join_def J = {.paths = jpaths, .num_paths = 1, .streams = SJ, .num_streams = 1};
    for (int join = 0; join < 2; join++) {
        char *dir = fresh_dir(join ? "cc_join" : "cc_corpus");
        ctf_config c;
        cfg_for(&c, NULL, CTF_FLOAT32, 2);
        if (join) {
            c.path = p0;
            c.joins = &J;
            c.num_joins = 1;
            c.chunk_size_bytes = 512;
        } else {
            c.paths = paths;
            c.num_paths = 2;
        }
        int failed;
        const uint64_t want = digest_run(&c, NULL, NULL, &failed);
        ASSERT(!failed);
        c.chunk_cache = dir;
        ctf_perf p;
        ASSERT_U64_EQ(digest_run(&c, &p, NULL, &failed), want);
        ASSERT(!failed && p.chunk_cache_misses > 0);
        ASSERT_U64_EQ(digest_run(&c, &p, NULL, &failed), want);
        ASSERT(!failed);
        ASSERT_U64_EQ(p.chunk_cache_misses, 0);
        ASSERT_U64_EQ(p.parse_bytes, 0);
        free(dir);
    }
    free(t0);
    free(t1);
}

TEST(chunk_cache_changed_file_is_not_served)
{
    char *text = gen_text(4, 120, NULL);
    const char *path0 = test_write_file("cc_change.ctf", text, strlen(text));
    char path[600];
    snprintf(path, sizeof path, "%s", path0);
    char *dir = fresh_dir("cc_change");
    ctf_config c;
    int failed;
    cfg_for(&c, path, CTF_FLOAT32, 1);
    c.chunk_cache = dir;
    digest_run(&c, NULL, NULL, &failed);
    ASSERT(!failed);
    /* The same size, other values (a digit of the first value changed), an older time. */
    char *v = strstr(text, "|a ");
    ASSERT(v);
    v += 3;
    while (*v < '0' || *v > '9') v++;
    *v = *v == '9' ? '1' : (char)(*v + 1);
    FILE *f = fopen(path, "wb");
    ASSERT(f && fwrite(text, 1, strlen(text), f) == strlen(text));
    fclose(f);
    c.chunk_cache = NULL;
    const uint64_t want = digest_run(&c, NULL, NULL, &failed);
    c.chunk_cache = dir;
    ctf_perf p;
    ASSERT_U64_EQ(digest_run(&c, &p, NULL, &failed), want);
    ASSERT(!failed);
    ASSERT(p.chunk_cache_misses > 0);
    free(dir);
    free(text);
}

TEST(chunk_cache_damaged_entries_are_parsed_again)
{
    char *text = gen_text(5, 150, NULL);
    const char *path = test_write_file("cc_damage.ctf", text, strlen(text));
    char *dir = fresh_dir("cc_damage");
    ctf_config c;
    int failed;
    cfg_for(&c, path, CTF_FLOAT64, 2);
    const uint64_t want = digest_run(&c, NULL, NULL, &failed);
    c.chunk_cache = dir;
    ASSERT_U64_EQ(digest_run(&c, NULL, NULL, &failed), want);
    static char names[256][1000];
    size_t n = entries(dir, NULL, names, 256);
    ASSERT(n >= 4);
    /* One entry cut short, one with a byte flipped in its data, one emptied. */
    struct stat st;
    ASSERT(stat(names[0], &st) == 0);
    ASSERT(truncate(names[0], st.st_size / 2) == 0);
    FILE *f = fopen(names[1], "r+b");
    ASSERT(f);
    fseek(f, -3, SEEK_END);
    int ch = fgetc(f);
    fseek(f, -3, SEEK_END);
    fputc(ch ^ 0x40, f);
    fclose(f);
    ASSERT(truncate(names[2], 0) == 0);
    ctf_perf p;
    ASSERT_U64_EQ(digest_run(&c, &p, NULL, &failed), want);
    ASSERT(!failed);
    ASSERT(p.chunk_cache_misses >= 3);
    /* They were stored again: the next open parses nothing. */
    ASSERT_U64_EQ(digest_run(&c, &p, NULL, &failed), want);
    ASSERT_U64_EQ(p.chunk_cache_misses, 0);
    free(dir);
    free(text);
}

TEST(chunk_cache_unwritable_directory_is_one_warning)
{
    char *text = gen_text(6, 100, NULL);
    const char *path = test_write_file("cc_ro.ctf", text, strlen(text));
    /* A file where the directory should be. */
    const char *notdir = test_write_str("cc_not_a_dir", "x");
    ctf_config c;
    int failed;
    cfg_for(&c, path, CTF_FLOAT32, 2);
    const uint64_t want = digest_run(&c, NULL, NULL, &failed);
    test_log lg;
    memset(&lg, 0, sizeof lg);
    c.log_user = &lg;
    c.chunk_cache = notdir;
    ctf_stats st;
    ASSERT_U64_EQ(digest_run(&c, NULL, &st, &failed), want);
    ASSERT(!failed);
    if (lg.warnings != 1) fprintf(stderr, "%s", lg.text);
    ASSERT_EQ(lg.warnings, 1);
    ASSERT_STR_CONTAINS(lg.text, "chunk cache");
    free(text);
}

TEST(chunk_cache_chunks_with_problems_are_not_stored)
{
    char *text = gen_text(7, 200, "|a 1 2 oops");
    const char *path = test_write_file("cc_bad.ctf", text, strlen(text));
    char *dir = fresh_dir("cc_bad");
    ctf_config c;
    int failed;
    cfg_for(&c, path, CTF_FLOAT32, 2);
    c.max_errors = 1000;
    ctf_stats s0, s1, s2;
    const uint64_t want = digest_run(&c, NULL, &s0, &failed);
    ASSERT(!failed);
    ASSERT(s0.errors + s0.warnings > 0);
    c.chunk_cache = dir;
    ASSERT_U64_EQ(digest_run(&c, NULL, &s1, &failed), want);
    ctf_perf p;
    ASSERT_U64_EQ(digest_run(&c, &p, &s2, &failed), want);
    ASSERT(!failed);
    ASSERT_U64_EQ(s1.errors, s0.errors);
    ASSERT_U64_EQ(s2.errors, s0.errors);
    ASSERT_U64_EQ(s2.warnings, s0.warnings);
    ASSERT_U64_EQ(s2.dropped_rows, s0.dropped_rows);
    ASSERT(p.chunk_cache_misses > 0 && p.chunk_cache_hits > 0);
    free(dir);
    free(text);
}

TEST(chunk_cache_limit_keeps_the_directory_small)
{
    char *text = gen_text(8, 400, NULL);
    const char *path = test_write_file("cc_limit.ctf", text, strlen(text));
    char *dir = fresh_dir("cc_limit");
    ctf_config c;
    int failed;
    cfg_for(&c, path, CTF_FLOAT64, 2);
    const uint64_t want = digest_run(&c, NULL, NULL, &failed);
    c.chunk_cache = dir;
    digest_run(&c, NULL, NULL, &failed);
    uint64_t all;
    const size_t n_all = entries(dir, &all, NULL, 0);
    ASSERT(n_all > 20);
    c.chunk_cache_limit = all / 4;
    for (int run = 0; run < 2; run++) {
        ctf_perf p;
        ASSERT_U64_EQ(digest_run(&c, &p, NULL, &failed), want);
        ASSERT(!failed);
        uint64_t now;
        const size_t n = entries(dir, &now, NULL, 0);
        ASSERT(now <= c.chunk_cache_limit);
        ASSERT(n > 0 && n < n_all);
        ASSERT(p.chunk_cache_misses > 0);
    }
    free(dir);
    free(text);
}

TEST(chunk_cache_stale_temporary_files_are_removed)
{
    /* A writer that died leaves its temporary file; the next open removes it once it is old
     * enough that no live writer can still own it, and leaves a fresh one (another process
     * may be writing it) and files that are not the cache's alone. */
    char *text = gen_text(9, 100, NULL);
    const char *path = test_write_file("cc_temps.ctf", text, strlen(text));
    char *dir = fresh_dir("cc_temps");
    ctf_config c;
    int failed;
    cfg_for(&c, path, CTF_FLOAT32, 2);
    const uint64_t want = digest_run(&c, NULL, NULL, &failed);
    c.chunk_cache = dir;
    ASSERT_U64_EQ(digest_run(&c, NULL, NULL, &failed), want);
    const char *names[] = {".0123456789abcdef0123456789abcdef-4242-0.tmp", /* old: removed */
                           ".0123456789abcdef0123456789abcdef-4242-1.tmp", /* fresh: kept */
                           "notes.tmp", ".other-4242-0.tmp"};          /* not ours: kept */
    const bool old[] = {true, false, true, true};
    char p[900];
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        FILE *f = fopen(p, "w");
        ASSERT(f != NULL);
        fputs("half a chunk", f);
        fclose(f);
        if (old[i]) {
            const struct timespec t[2] = {{.tv_sec = time(NULL) - 2 * 3600},
                                          {.tv_sec = time(NULL) - 2 * 3600}};
            ASSERT_EQ(utimensat(AT_FDCWD, p, t, 0), 0);
        }
    }
    ASSERT_U64_EQ(digest_run(&c, NULL, NULL, &failed), want);
    ASSERT(!failed);
    for (size_t i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        ASSERT_EQ(access(p, F_OK) == 0, i != 0);
    }
    free(dir);
    free(text);
}

TEST(chunk_cache_checkpoint_is_unaffected)
{
    char *text = gen_text(9, 200, NULL);
    const char *path = test_write_file("cc_ckpt.ctf", text, strlen(text));
    char *dir = fresh_dir("cc_ckpt");
    ctf_config c;
    cfg_for(&c, path, CTF_FLOAT32, 2);
    ctf_reader *a = NULL, *b = NULL;
    ctf_error e;
    ASSERT_OK(ctf_reader_open(&c, &a, &e), &e);
    for (int i = 0; i < 40; i++) {
        ctf_minibatch *mb;
        ASSERT(ctf_reader_next(a, 17, &mb) == 0 && mb);
        ctf_minibatch_free(mb);
    }
    static char state[1 << 16];
    size_t len = 0;
    ASSERT(ctf_reader_save_state(a, state, sizeof state, &len) == 0);
    c.chunk_cache = dir;
    for (int pass = 0; pass < 2; pass++) {
        ASSERT_OK(ctf_reader_open(&c, &b, &e), &e);
        ASSERT(ctf_reader_restore_state(b, state, len) == 0);
        ctf_reader *ref = NULL;
        c.chunk_cache = NULL;
        ASSERT_OK(ctf_reader_open(&c, &ref, &e), &e);
        c.chunk_cache = dir;
        ASSERT(ctf_reader_restore_state(ref, state, len) == 0);
        for (int i = 0; i < 200; i++) {
            ctf_minibatch *x, *y;
            ASSERT(ctf_reader_next(ref, 23, &x) == 0 && ctf_reader_next(b, 23, &y) == 0);
            ASSERT((x == NULL) == (y == NULL));
            if (!x) break;
            ASSERT_U64_EQ(test_digest_minibatch(1, x), test_digest_minibatch(1, y));
            ctf_minibatch_free(x);
            ctf_minibatch_free(y);
        }
        ctf_reader_free(ref);
        ctf_reader_free(b);
    }
    ctf_reader_free(a);
    free(dir);
    free(text);
}
