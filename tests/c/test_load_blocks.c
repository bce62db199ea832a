/*
 * test_load_blocks.c -- a load reads its chunk block by block (lib/source/corpus.c load_blocks):
 * the records of each block's complete sequences are re-made and those sequences parsed before the
 * next block is read. Whatever the block size (test builds lower ctf__load_block: blocks of one
 * byte up to the whole chunk, sequences longer than a block), a sweep delivers the same
 * minibatches, logs the same problems in the same order with the same locations, stops at the
 * same error under maxErrors, and reports a file changed under the index with the same error.
 * Dense and sparse streams, id and line mode, a stream defining the minibatch size (the rows of
 * a chunk are then not known before its blocks are read), and the records of other workers'
 * chunks, which the consumer re-makes from their bytes block by block as well.
 */
#include "reader/pipeline.h"
#include "test.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

static const ctf_stream_def LB[] = {{"a", NULL, 3, false, false}, {"b", NULL, 40, true, false}};
static const ctf_stream_def LB_MB[] = {{"a", NULL, 3, false, false}, {"b", NULL, 40, true, true}};

/* Sequences of 1-6 lines (one of 300 lines: longer than the small blocks), dense and sparse
 * values, sparse only on some lines; in line mode no ids. A few bad values when `bad`. */
static char *blocks_text(bool line_mode, bool bad, size_t *len)
{
    size_t cap = 4 << 20, n = 0;
    char *t = malloc(cap);
    uint64_t s = 99;
    for (int id = 0; id < 900; id++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int lines = line_mode ? 1 : id == 400 ? 300 : 1 + (int)((s >> 33) % 6);
        for (int l = 0; l < lines; l++) {
            if (!line_mode) n += (size_t)snprintf(t + n, cap - n, "%d ", id);
            if (bad && (id * 31 + l) % 97 == 5)
                n += (size_t)snprintf(t + n, cap - n, "|a 1 x%d 3", l);
            else
                n += (size_t)snprintf(t + n, cap - n, "|a %d %d.25 -%d", id % 89, l, id % 7);
            if (l % 2 == 0 || line_mode)
                n += (size_t)snprintf(t + n, cap - n, " |b %d:1.5 %d:-2 %d:%d", id % 40,
                                      (id * 7 + l) % 40, (id + 3) % 40, l);
            t[n++] = '\n';
            if (line_mode && id % 13 == 0) n += (size_t)snprintf(t + n, cap - n, "|# note\n");
        }
    }
    *len = n;
    return t;
}

typedef struct sweep {
    uint64_t digest;
    int rc;
    ctf_error err;
    size_t logged;
    uint64_t log_hash;
    uint64_t errors, minibatches;
} sweep;

static void log_sink(void *user, ctf_severity sev, const ctf_error *e)
{
    sweep *w = user;
    char line[1400];
    int n = snprintf(line, sizeof line, "%d %d %s:%llu:%llu@%lld %s", (int)sev, e->code, e->path,
                     (unsigned long long)e->line, (unsigned long long)e->column,
                     (long long)e->offset, e->message);
    w->log_hash = ctf__hash_bytes(w->log_hash, line, (size_t)CTF_MAX(n, 0));
    w->logged++;
}

/* The workers sharing the file (the sweeps read as the last of them): with more than one, the
 * cut needs the records of chunks other workers load, re-made from the bytes on the consumer's
 * side, block by block too. */
static size_t sweep_workers = 1;

/* Called between the reader's open and its first read (the changed-file test), or NULL. */
static void (*between_open_and_read)(const char *path);

static void run_sweep(const char *path, const ctf_stream_def *streams, size_t block, size_t threads,
                      bool randomize, uint64_t max_errors, sweep *w)
{
    memset(w, 0, sizeof *w);
    w->digest = w->log_hash = 0xcbf29ce484222325ull;
    const size_t saved = ctf__load_block;
    ctf__load_block = block;
    ctf_config cfg;
    ctf_config_init(&cfg);
    cfg.path = path;
    cfg.streams = streams;
    cfg.num_streams = 2;
    cfg.chunk_size_bytes = 4096;
    cfg.randomize = randomize;
    cfg.randomization_seed = 3;
    cfg.max_sweeps = 1;
    cfg.num_threads = threads;
    cfg.num_workers = sweep_workers;
    cfg.worker_rank = sweep_workers - 1;
    cfg.max_errors = max_errors;
    cfg.trace_level = 2;
    cfg.log = log_sink;
    cfg.log_user = w;
    ctf_reader *r;
    ctf__error_clear(&w->err);
    w->rc = ctf_reader_open(&cfg, &r, &w->err);
    if (!w->rc) {
        if (between_open_and_read) between_open_and_read(path);
        for (;;) {
            ctf_minibatch *mb = NULL;
            w->rc = ctf_reader_next(r, 53, &mb);
            if (w->rc) {
                w->err = *ctf_reader_error(r);
                break;
            }
            if (!mb) break;
            w->digest = test_digest_minibatch(w->digest, mb);
            w->minibatches++;
            ctf_minibatch_free(mb);
        }
        ctf_stats st;
        ctf_reader_get_stats(r, &st);
        w->errors = st.errors;
        ctf_reader_free(r);
    }
    ctf__load_block = saved;
}

static bool same_sweep(const sweep *a, const sweep *b)
{
    return a->digest == b->digest && a->rc == b->rc && a->logged == b->logged &&
           a->log_hash == b->log_hash && a->errors == b->errors &&
           a->minibatches == b->minibatches && a->err.code == b->err.code &&
           a->err.line == b->err.line && a->err.column == b->err.column &&
           a->err.offset == b->err.offset && strcmp(a->err.message, b->err.message) == 0;
}

static const size_t BLOCKS[] = {1, 7, 64, 333, 1000, 4096};

/* Every block size against one block per chunk (the library's block is larger than a chunk). */
static void check_blocks(const char *path, const ctf_stream_def *streams, uint64_t max_errors,
                         bool want_ok)
{
    for (int rnd = 0; rnd <= 1; rnd++)
        for (size_t threads = 0; threads <= 2; threads += 2) {
            sweep whole, w;
            run_sweep(path, streams, CTF__LOAD_BLOCK, threads, rnd, max_errors, &whole);
            ASSERT(want_ok ? whole.rc == 0 : whole.rc != 0);
            ASSERT(!want_ok || whole.minibatches > 0);
            for (size_t i = 0; i < sizeof BLOCKS / sizeof *BLOCKS; i++) {
                run_sweep(path, streams, BLOCKS[i], threads, rnd, max_errors, &w);
                if (!same_sweep(&whole, &w))
                    fprintf(stderr, "  block %zu threads %zu randomize %d: rc %d/%d (%s / %s)\n",
                            BLOCKS[i], threads, rnd, whole.rc, w.rc, whole.err.message,
                            w.err.message);
                ASSERT(same_sweep(&whole, &w));
            }
        }
}

TEST(load_blocks_id_mode_same_minibatches_for_every_block_size)
{
    size_t n;
    char *t = blocks_text(false, false, &n);
    const char *p = test_write_file("blocks_ids.ctf", t, n);
    free(t);
    check_blocks(p, LB, 0, true);
}

TEST(load_blocks_line_mode_same_minibatches_for_every_block_size)
{
    size_t n;
    char *t = blocks_text(true, false, &n);
    const char *p = test_write_file("blocks_lines.ctf", t, n);
    free(t);
    check_blocks(p, LB, 0, true);
}

TEST(load_blocks_rows_unknown_with_a_minibatch_size_stream)
{
    size_t n;
    char *t = blocks_text(false, false, &n);
    const char *p = test_write_file("blocks_mb.ctf", t, n);
    free(t);
    check_blocks(p, LB_MB, 0, true);
}

TEST(load_blocks_other_workers_records_for_every_block_size)
{
    size_t n;
    char *t = blocks_text(false, false, &n);
    const char *p = test_write_file("blocks_workers.ctf", t, n);
    free(t);
    sweep_workers = 2;
    check_blocks(p, LB, 0, true);
    sweep_workers = 1;
}

TEST(load_blocks_same_problems_and_error_budget)
{
    size_t n;
    char *t = blocks_text(false, true, &n);
    const char *p = test_write_file("blocks_bad.ctf", t, n);
    free(t);
    check_blocks(p, LB, 1000000, true); /* every problem logged, in order */
    check_blocks(p, LB, 5, false);      /* the budget runs out inside a chunk */
}

/* The file's bytes change under the index (same size, mtime restored) in the middle of a chunk
 * that spans several blocks, after the reader indexed it: the same CTF_ECHANGED, at the same
 * place, for every block size. */
static char *orig_text, *changed_text;
static size_t text_len;

static void change_file(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0) return;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t w = pwrite(fd, changed_text, text_len, 0);
    close(fd);
    struct timespec ts[2] = {st.st_mtim, st.st_mtim};
    if (w == (ssize_t)text_len) utimensat(AT_FDCWD, path, ts, 0);
}

TEST(load_blocks_changed_file_same_error)
{
    orig_text = blocks_text(false, false, &text_len);
    changed_text = malloc(text_len);
    for (int where = 0; where < 3; where++) {
        char *u = changed_text;
        const size_t n = text_len;
        memcpy(u, orig_text, n);
        /* A sequence's first line joined to the line before, a sequence id changed, a value
         * changed (no effect on the records: read normally). */
        const size_t at = n / 3 + (size_t)where * 977;
        char *nl = memchr(u + at, '\n', n - at);
        ASSERT(nl && nl + 2 < u + n);
        if (where == 0) {
            for (;;) {
                char *prev = nl - 1;
                while (*prev != '\n') prev--;
                if (strtoul(prev + 1, NULL, 10) != strtoul(nl + 1, NULL, 10)) break;
                nl = memchr(nl + 1, '\n', (size_t)(u + n - nl - 1));
            }
            nl[0] = ' ';
        } else if (where == 1) {
            nl[1] = nl[1] == '9' ? '8' : '9';
        } else {
            char *bar = memchr(nl, '|', (size_t)(u + n - nl));
            bar[3] = bar[3] == '1' ? '2' : '1';
        }
        between_open_and_read = change_file;
        sweep whole, w;
        char path[600];
        snprintf(path, sizeof path, "%s", test_write_file("blocks_changed.ctf", orig_text, n));
        run_sweep(path, LB, CTF__LOAD_BLOCK, 0, false, 0, &whole);
        if (where < 2)
            ASSERT(whole.rc == CTF_ECHANGED);
        else
            ASSERT(whole.rc == 0);
        for (size_t i = 0; i < sizeof BLOCKS / sizeof *BLOCKS; i++) {
            snprintf(path, sizeof path, "%s", test_write_file("blocks_changed.ctf", orig_text, n));
            run_sweep(path, LB, BLOCKS[i], 0, false, 0, &w);
            if (!same_sweep(&whole, &w))
                fprintf(stderr, "  where %d block %zu: rc %d/%d (%s / %s)\n", where, BLOCKS[i],
                        whole.rc, w.rc, whole.err.message, w.err.message);
            ASSERT(same_sweep(&whole, &w));
        }
        between_open_and_read = NULL;
    }
    free(orig_text);
    free(changed_text);
}
