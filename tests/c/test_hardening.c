/*
 * test_hardening.c -- regression tests for inputs that once crashed, hung or were accepted
 * silently: huge dimensions and thread counts, FIFOs where files are expected, a key changed in
 * place on a line that does not start a sequence, corrupt and forged index caches, short dense
 * rows of a large dimension, checkpoint states of any size, and the CLI's handling of them.
 * Every test that opens a reader checks that no allocation leaks.
 */
#include "reader/pipeline.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/*======================================================================
 * Helpers
 *====================================================================*/

typedef struct logbook {
    int infos, warnings, errors;
    ctf_error last;
} logbook;

static void keep_log(void *user, ctf_severity sev, const ctf_error *e)
{
    logbook *lb = user;
    if (sev == CTF_SEV_INFO)
        lb->infos++;
    else if (sev == CTF_SEV_WARNING)
        lb->warnings++;
    else
        lb->errors++;
    lb->last = *e;
}

static void base_cfg(ctf_config *cfg, const char *path, const ctf_stream_def *s, size_t n,
                     logbook *lb)
{
    ctf_config_init(cfg);
    cfg->path = path;
    cfg->streams = s;
    cfg->num_streams = n;
    cfg->randomize = false;
    cfg->max_sweeps = 1;
    cfg->num_threads = 0;
    cfg->trace_level = 2;
    cfg->log = keep_log;
    cfg->log_user = lb;
}

/* Reads one sweep in minibatches of mb samples. @return : the reader's status; *digest over
 * the data, *samples delivered (index samples of the first stream). */
static int read_all(const ctf_config *cfg, uint64_t mb, uint64_t *digest, ctf_error *err)
{
    ctf_reader *r;
    int rc = ctf_reader_open(cfg, &r, err);
    if (rc) return rc;
    uint64_t h = 1469598103934665603ull;
    ctf_minibatch *m;
    while ((rc = ctf_reader_next(r, mb, &m)) == 0 && m) {
        h = test_digest_minibatch(h, m);
        ctf_minibatch_free(m);
    }
    if (rc) *err = *ctf_reader_error(r);
    ctf_reader_free(r);
    if (digest) *digest = h;
    return rc;
}

/* Sets a file's modification time (nanoseconds) back to what it was. */
static int set_mtime(const char *path, const struct stat *st)
{
    struct timespec ts[2] = {st->st_atim, st->st_mtim};
    return utimensat(AT_FDCWD, path, ts, 0);
}

/* Rewrites `len` bytes at `off` of path in place, keeping its size and restoring its mtime. */
static int patch_keep_mtime(const char *path, uint64_t off, const char *bytes, size_t len)
{
    struct stat st;
    if (stat(path, &st)) return -1;
    int fd = open(path, O_WRONLY);
    if (fd < 0) return -1;
    ssize_t w = pwrite(fd, bytes, len, (off_t)off);
    close(fd);
    if (w != (ssize_t)len) return -1;
    return set_mtime(path, &st);
}

__attribute__((unused)) static const char *cli(void)
{
    const char *c = getenv("CTFIO_CLI");
    return c && c[0] ? c : "build/ctfio";
}

/* Runs a shell command with a time limit. @return : its exit status, 124 on timeout. */
__attribute__((unused)) static int run_cmd(const char *cmd)
{
    char full[8400];
    snprintf(full, sizeof full, "timeout 60 sh -c '%s'", cmd);
    int st = system(full);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

__attribute__((unused)) static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *b = malloc(cap + 1);
    size_t got;
    while (b && (got = fread(b + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (b) b[len] = 0;
    if (n) *n = len;
    return b;
}

/*======================================================================
 * Dimensions and thread counts are bounded at configuration time
 *====================================================================*/

TEST(config_dims_and_threads_are_bounded)
{
    ctf_config c;
    ctf_error err;
    ctf_stream_def s = {.name = "x", .dim = SIZE_MAX};
    base_cfg(&c, "one.ctf", &s, 1, NULL);
    c.log = NULL;
    ASSERT_EQ(ctf_config_validate(&c, &err), CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "config.streams[0].dim");
    ASSERT_STR_CONTAINS(err.message, "18446744073709551615");
    s.dim = CTF_MAX_DENSE_DIM + 1;
    ASSERT_EQ(ctf_config_validate(&c, &err), CTF_EINVAL);
    s.dim = CTF_MAX_DENSE_DIM;
    ASSERT_OK(ctf_config_validate(&c, &err), &err);
    s.is_sparse = true;
    s.dim = CTF_MAX_SPARSE_DIM + 1;
    ASSERT_EQ(ctf_config_validate(&c, &err), CTF_EINVAL);
    s.dim = SIZE_MAX;
    ASSERT_EQ(ctf_config_validate(&c, &err), CTF_EINVAL);
    s.dim = CTF_MAX_SPARSE_DIM;
    ASSERT_OK(ctf_config_validate(&c, &err), &err);
    c.num_threads = CTF_MAX_THREADS + 1;
    ASSERT_EQ(ctf_config_validate(&c, &err), CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "config.num_threads");
    c.num_threads = 100000;
    ASSERT_EQ(ctf_config_validate(&c, &err), CTF_EINVAL);
    c.num_threads = CTF_MAX_THREADS;
    ASSERT_OK(ctf_config_validate(&c, &err), &err);
}

/* The crash of a dense dim near 2^64: a reader (and a BrainScript configuration) refuses it. */
TEST(huge_dense_dim_is_refused_before_parsing)
{
    const char *path = test_write_str("hugedim.ctf", "|x 1 2 3\n");
    long live = atomic_load(&ctf__alloc.live);
    ctf_stream_def s = {.name = "x", .dim = SIZE_MAX};
    ctf_config c;
    ctf_error err;
    base_cfg(&c, path, &s, 1, NULL);
    c.log = NULL;
    ASSERT_EQ(read_all(&c, 10, NULL, &err), CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "dim");
    static const char text[] =
        "reader = [ readerType = CNTKTextFormatReader\n"
        "  file = \"hugedim.ctf\"\n"
        "  input = [ x = [ dim = 18446744073709551615; format = dense ] ]\n]\n";
    const char *cpath = test_write_str("hugedim.cntk", text);
    ctf_bsconfig *doc = NULL;
    int rc = ctf_bsconfig_load(cpath, NULL, NULL, 0, &doc, &err);
    if (rc == 0) rc = ctf_bsconfig_apply(doc, &c, &err);
    ctf_bsconfig_free(doc);
    ASSERT_EQ(rc, CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "dim");
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live);
}

/*======================================================================
 * FIFOs and other non-regular files never block an open
 *====================================================================*/

TEST(fifo_at_the_cache_path_does_not_hang)
{
    const char *path = test_write_str("fifo.ctf", "|x 1 2\n|x 3 4\n");
    char cpath[1100];
    ctf_index_cache_path(path, cpath, sizeof cpath);
    unlink(cpath);
    ASSERT_EQ(mkfifo(cpath, 0600), 0);
    long live = atomic_load(&ctf__alloc.live);
    /* A hang is a failure: the alarm ends the test run. */
    alarm(30);
    ctf_stream_def s = {.name = "x", .dim = 2};
    ctf_config c;
    logbook lb = {0};
    ctf_error err;
    base_cfg(&c, path, &s, 1, &lb);
    c.cache_index = true;
    uint64_t d1, d2;
    ASSERT_OK(read_all(&c, 10, &d1, &err), &err);
    c.cache_index = false;
    ASSERT_OK(read_all(&c, 10, &d2, &err), &err);
    alarm(0);
    ASSERT_U64_EQ(d1, d2);
    /* The FIFO was replaced by a real cache (written beside it and renamed over it). */
    struct stat st;
    ASSERT_EQ(stat(cpath, &st), 0);
    ASSERT(S_ISREG(st.st_mode));
    unlink(cpath);

    /* A FIFO as the configuration file or the data file: an error naming it, at once. */
    char fpath[1100];
    snprintf(fpath, sizeof fpath, "%s/fifo.cntk", test_tmpdir());
    unlink(fpath);
    ASSERT_EQ(mkfifo(fpath, 0600), 0);
    alarm(30);
    ctf_bsconfig *doc = NULL;
    ASSERT_EQ(ctf_bsconfig_load(fpath, NULL, NULL, 0, &doc, &err), CTF_EIO);
    ASSERT_STR_CONTAINS(err.message, "not a regular file");
    c.path = fpath;
    ASSERT_EQ(read_all(&c, 10, NULL, &err), CTF_EIO);
    ASSERT_STR_CONTAINS(err.message, "not a regular file");
    alarm(0);
    unlink(fpath);
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live);
}

/*======================================================================
 * A changed key or input on a line that does not start a sequence
 *====================================================================*/

/* 2000 lines "i/2 |x i i"; line 11 (0-based, the second line of sequence 5) gets key 6 with the
 * size and modification time kept: through the index cache and through a live reader the
 * chunk no longer matches the index, which is CTF_ECHANGED, never a silent regrouping. */
TEST(changed_key_on_a_continuation_line_is_detected)
{
    char *text = malloc(2000 * 32);
    ASSERT(text != NULL);
    size_t n = 0;
    uint64_t off11 = 0;
    for (int i = 0; i < 2000; i++) {
        if (i == 11) off11 = n;
        n += (size_t)sprintf(text + n, "%d |x %d %d\n", i / 2, i, i);
    }
    const char *path = test_write_file("changed_key.ctf", text, n);
    free(text);
    char cpath[1100];
    ctf_index_cache_path(path, cpath, sizeof cpath);
    unlink(cpath);
    long live = atomic_load(&ctf__alloc.live);
    ctf_stream_def s = {.name = "x", .dim = 2};
    ctf_config c;
    logbook lb = {0};
    ctf_error err;
    base_cfg(&c, path, &s, 1, &lb);
    c.trace_level = 1;
    c.cache_index = true;
    uint64_t d;
    ASSERT_OK(read_all(&c, 64, &d, &err), &err);
    ASSERT_EQ(patch_keep_mtime(path, off11, "6", 1), 0);
    /* Through the cache (its header still matches the file). */
    ASSERT_EQ(read_all(&c, 64, &d, &err), CTF_ECHANGED);
    ASSERT_STR_CONTAINS(err.path, "changed_key.ctf");
    ASSERT_U64_EQ(err.line, 12);
    ASSERT_STR_CONTAINS(err.message, "changed since it was indexed");
    /* A live reader: indexed before the change, reading after it. */
    ASSERT_EQ(patch_keep_mtime(path, off11, "5", 1), 0);
    c.cache_index = false;
    ctf_reader *r;
    ASSERT_OK(ctf_reader_open(&c, &r, &err), &err);
    ASSERT_EQ(patch_keep_mtime(path, off11, "6", 1), 0);
    ctf_minibatch *mb = NULL;
    int rc;
    while ((rc = ctf_reader_next(r, 64, &mb)) == 0 && mb) ctf_minibatch_free(mb);
    ASSERT_EQ(rc, CTF_ECHANGED);
    /* Without the cache the index holds no sequence records to compare: the changed chunk is
     * named by its first line. */
    ASSERT_U64_EQ(ctf_reader_error(r)->line, 1);
    ctf_reader_free(r);
    unlink(cpath);
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live);
}

/* Line mode: a comment line `|# 2` that becomes `|x 2` with the same size and mtime would be a
 * sample the index never counted; it is CTF_ECHANGED. A line split or joined in place is too. */
TEST(changed_line_mode_comment_into_data_is_detected)
{
    static const char text[] = "|x 0\n|# 2\n|x 3\n|x 4\n";
    const char *path = test_write_str("changed_line.ctf", text);
    char cpath[1100];
    ctf_index_cache_path(path, cpath, sizeof cpath);
    unlink(cpath);
    long live = atomic_load(&ctf__alloc.live);
    ctf_stream_def s = {.name = "x", .dim = 1};
    ctf_config c;
    logbook lb = {0};
    ctf_error err;
    base_cfg(&c, path, &s, 1, &lb);
    c.trace_level = 1;
    c.cache_index = true;
    uint64_t d0, d;
    ASSERT_OK(read_all(&c, 64, &d0, &err), &err);
    ASSERT_EQ(patch_keep_mtime(path, 6, "x", 1), 0);
    ASSERT_EQ(read_all(&c, 64, &d, &err), CTF_ECHANGED);
    ASSERT_U64_EQ(err.line, 2);
    /* Back to the comment: the cache is valid again and the data as before. */
    ASSERT_EQ(patch_keep_mtime(path, 6, "#", 1), 0);
    ASSERT_OK(read_all(&c, 64, &d, &err), &err);
    ASSERT_U64_EQ(d, d0);
    /* The comment's newline turned into a blank: the sequence now has one line less. */
    ASSERT_EQ(patch_keep_mtime(path, 9, " ", 1), 0);
    ASSERT_EQ(read_all(&c, 64, &d, &err), CTF_ECHANGED);
    unlink(cpath);
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live);
}

/*======================================================================
 * Index caches: corrupt counts and forged tables are ignored and rebuilt
 *====================================================================*/

#define CACHE_HEADER_BYTES 120 /* sizeof(cache_header) in index.c */
#define SEQ_BYTES 32           /* sizeof(ctf__seq) */

/* Rewrites the cache with one 8-byte header field or one sequence field replaced and the
 * checksum recomputed, as a forger would. */
static int forge_cache(const char *cpath, size_t at, const void *val, size_t n)
{
    size_t len;
    char *c = slurp(cpath, &len);
    if (!c || len < CACHE_HEADER_BYTES + 8 || at + n > len - 8) {
        free(c);
        return -1;
    }
    memcpy(c + at, val, n);
    uint64_t sum = ctf__hash_bytes(0xcbf29ce484222325ull, c, CACHE_HEADER_BYTES);
    sum = ctf__hash_bytes(sum, c + CACHE_HEADER_BYTES, len - CACHE_HEADER_BYTES - 8);
    memcpy(c + len - 8, &sum, 8);
    FILE *f = fopen(cpath, "r+b");
    int rc = f && fwrite(c, 1, len, f) == len ? 0 : -1;
    if (f) fclose(f);
    free(c);
    return rc;
}

/* Builds the index with the cache, applies one forgery, and checks that the next build ignores
 * the cache, rebuilds it and equals the honest index. @return : NULL, or what went wrong. */
static const char *cache_forgery_is_ignored(const char *path, size_t at, uint64_t val, size_t n)
{
    static char msg[600];
    char cpath[1100];
    ctf_index_cache_path(path, cpath, sizeof cpath);
    unlink(cpath);
    ctf_stream_def s = {.name = "x", .dim = 1};
    ctf_config c;
    logbook lb = {0};
    ctf_error err;
    base_cfg(&c, path, &s, 1, &lb);
    c.cache_index = true;
    ctf_index *a, *b;
    if (ctf_index_build(&c, &a, &err)) return "first build failed";
    ctf_index_info ia, ib;
    ctf_index_get_info(a, &ia);
    ctf_index_free(a);
    if (forge_cache(cpath, at, &val, n)) return "cannot forge";
    memset(&lb, 0, sizeof lb);
    int rc = ctf_index_build(&c, &b, &err);
    if (rc) {
        snprintf(msg, sizeof msg, "build with a forged cache failed: %s", err.message);
        return msg;
    }
    ctf_index_get_info(b, &ib);
    ctf_index_free(b);
    if (ib.from_cache) return "the forged cache was used";
    if (ia.samples != ib.samples || ia.sequences != ib.sequences || ia.lines != ib.lines)
        return "the rebuilt index differs";
    /* The rebuild wrote a good cache again. */
    if (ctf_index_build(&c, &b, &err)) return "third build failed";
    ctf_index_get_info(b, &ib);
    ctf_index_free(b);
    if (!ib.from_cache) return "the cache was not rewritten";
    unlink(cpath);
    return NULL;
}

typedef struct reasons {
    char text[8][200];
    int n;
} reasons;

static void keep_reasons(void *user, ctf_severity sev, const ctf_error *e)
{
    reasons *r = user;
    if (sev == CTF_SEV_INFO && strstr(e->message, "index cache ignored") && r->n < 8)
        snprintf(r->text[r->n++], sizeof r->text[0], "%.190s", e->message);
}

/* The reason the cache was ignored after one forgery. */
static const char *forged_reason(const char *path, size_t at, uint64_t val, size_t n)
{
    static char out[200];
    char cpath[1100];
    ctf_index_cache_path(path, cpath, sizeof cpath);
    ctf_stream_def s = {.name = "x", .dim = 1};
    ctf_config c;
    ctf_error err;
    reasons rs = {0};
    base_cfg(&c, path, &s, 1, NULL);
    c.log = keep_reasons;
    c.log_user = &rs;
    c.cache_index = true;
    unlink(cpath);
    ctf_index *idx;
    if (ctf_index_build(&c, &idx, &err)) return "build failed";
    ctf_index_free(idx);
    if (forge_cache(cpath, at, &val, n)) return "cannot forge";
    if (ctf_index_build(&c, &idx, &err)) return "rebuild failed";
    ctf_index_free(idx);
    unlink(cpath);
    snprintf(out, sizeof out, "%s", rs.n ? rs.text[0] : "(none)");
    return out;
}

TEST(cache_corrupt_counts_are_checked_against_the_cache_length)
{
    const char *path = test_write_str("cache_counts.ctf", "0 |x 1\n0 |x 2\n1 |x 3\n\n2 |x 4\n");
    long live = atomic_load(&ctf__alloc.live);
    /* num_seqs (header offset 48): larger than the table, up to the data size, and huge. */
    const uint64_t counts[] = {4, 20, (uint64_t)1 << 40, UINT64_MAX};
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        const char *m = cache_forgery_is_ignored(path, 48, counts[i], 8);
        if (m) test_fail(__FILE__, __LINE__, "corrupt num_seqs is ignored", m);
        ASSERT_STR_CONTAINS(forged_reason(path, 48, counts[i], 8), "implausible sequence count");
    }
    /* total_lines and data_start beyond the file. */
    ASSERT(cache_forgery_is_ignored(path, 56, 1000, 8) == NULL);
    ASSERT(cache_forgery_is_ignored(path, 64, 7, 8) == NULL);
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live);
}

/* A table with a valid checksum that contradicts itself or the file: sample and line counts,
 * line numbers and the total are checked against each other and the file size. */
TEST(cache_forged_with_a_valid_checksum_is_ignored)
{
    const char *path = test_write_str("cache_forged.ctf", "0 |x 1\n0 |x 2\n1 |x 3\n\n2 |x 4\n");
    long live = atomic_load(&ctf__alloc.live);
    const size_t t = CACHE_HEADER_BYTES;
    struct {
        size_t at, n;
        uint64_t val;
        const char *what;
    } forgeries[] = {
        {t + 24, 4, 100, "samples of sequence 0 above its lines"},
        {t + 28, 4, 1, "lines of sequence 0 (the next starts later)"},
        {t + SEQ_BYTES + 28, 4, 3, "lines of sequence 1 past the next"},
        {t + 2 * SEQ_BYTES + 28, 4, 9, "lines of the last sequence past the total"},
        {t + SEQ_BYTES + 16, 8, 7, "first line of sequence 1"},
        {56, 8, 9, "total lines"},
    };
    for (size_t i = 0; i < sizeof forgeries / sizeof *forgeries; i++) {
        const char *m = cache_forgery_is_ignored(path, forgeries[i].at, forgeries[i].val,
                                                 forgeries[i].n);
        if (m) {
            char d[300];
            snprintf(d, sizeof d, "%s: %s", forgeries[i].what, m);
            test_fail(__FILE__, __LINE__, "forged cache is ignored", d);
        }
    }
    ASSERT_STR_CONTAINS(forged_reason(path, t + 24, 100, 4), "inconsistent sequence table");
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live);
}

/*======================================================================
 * Checkpoint states: any size through the CLI, unreachable positions, duplicate keys
 *====================================================================*/

/* Truncated BPTT over 9,000 sequences of 3 samples with 8,000-sample minibatches: the state
 * holds a slot per sequence in flight, over 64 KiB. The CLI prints it whole after every
 * minibatch, and `--restore @FILE` reads it whole: the restored run continues exactly like the
 * uninterrupted one (same next state). */
TEST(cli_checkpoint_states_of_any_size)
{
    FILE *f;
    char path[1024], dir[900];
    snprintf(dir, sizeof dir, "%s", test_tmpdir());
    snprintf(path, sizeof path, "%s/big_state.ctf", dir);
    f = fopen(path, "w");
    ASSERT(f != NULL);
    for (int i = 0; i < 9000; i++)
        for (int j = 0; j < 3; j++) fprintf(f, "%d |x %d\n", i, j);
    fclose(f);
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "%s dump --file %s --input x:1:dense --mb 8000 --truncation-length 1 --count 2 "
             "--state > %s/big_state.a 2> %s/big_state.a.err",
             cli(), path, dir, dir);
    ASSERT_EQ(run_cmd(cmd), 0);
    char out[1024];
    snprintf(out, sizeof out, "%s/big_state.a", dir);
    char *a = slurp(out, NULL);
    ASSERT(a != NULL);
    /* Lines: minibatch, state, minibatch, state. */
    char *s1 = strstr(a, "\nstate {");
    ASSERT(s1 != NULL);
    s1++;
    char *e1 = strchr(s1, '\n');
    ASSERT(e1 != NULL);
    *e1 = 0;
    char *s2 = strstr(e1 + 1, "\nstate {");
    ASSERT(s2 != NULL);
    s2++;
    char *e2 = strchr(s2, '\n');
    if (e2) *e2 = 0;
    ASSERT(strlen(s1) > 65536);
    char spath[1024];
    snprintf(spath, sizeof spath, "%s/big_state.json", dir);
    f = fopen(spath, "w");
    ASSERT(f != NULL);
    fputs(s1 + 6, f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "%s dump --file %s --input x:1:dense --mb 8000 --truncation-length 1 --count 1 "
             "--state --restore @%s > %s/big_state.b 2> %s/big_state.b.err",
             cli(), path, spath, dir, dir);
    int rc = run_cmd(cmd);
    snprintf(out, sizeof out, "%s/big_state.b.err", dir);
    char *berr = slurp(out, NULL);
    if (rc != 0) test_fail(__FILE__, __LINE__, "restore from a big state", berr ? berr : "");
    free(berr);
    ASSERT_EQ(rc, 0);
    snprintf(out, sizeof out, "%s/big_state.b", dir);
    char *b = slurp(out, NULL);
    ASSERT(b != NULL);
    char *t = strstr(b, "\nstate {");
    ASSERT(t != NULL);
    t++;
    char *et = strchr(t, '\n');
    if (et) *et = 0;
    ASSERT(strcmp(t, s2) == 0);
    free(a);
    free(b);
}

/* A position the timeline cannot reach (an endless stream near 2^64 would wrap) is refused by
 * seek and restore, and a state with a key twice is refused, naming the key. */
TEST(restore_refuses_unreachable_positions_and_duplicate_keys)
{
    const char *path = test_write_str("position.ctf", "|x 1\n|x 2\n|x 3\n");
    long live = atomic_load(&ctf__alloc.live);
    ctf_stream_def s = {.name = "x", .dim = 1};
    ctf_config c;
    ctf_error err;
    base_cfg(&c, path, &s, 1, NULL);
    c.log = NULL;
    c.max_sweeps = CTF_INFINITELY_REPEAT; /* endless */
    ctf_reader *r;
    ASSERT_OK(ctf_reader_open(&c, &r, &err), &err);
    ASSERT_EQ(ctf_reader_seek(r, UINT64_MAX - 1), CTF_EINVAL);
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "position");
    ASSERT_EQ(ctf_reader_seek(r, (uint64_t)CTF_MAX_POSITION + 1), CTF_EINVAL);
    /* The reader is unchanged and still usable. */
    ctf_minibatch *mb;
    ASSERT_EQ(ctf_reader_next(r, 2, &mb), 0);
    ASSERT(mb != NULL);
    ctf_minibatch_free(mb);
    char st[4096];
    size_t len;
    ASSERT_EQ(ctf_reader_save_state(r, st, sizeof st, &len), 0);
    /* The same state with the position replaced by 2^64 - 2. */
    char forged[4200];
    const char *p = strstr(st, "\"minibatchSourcePosition\": ");
    ASSERT(p != NULL);
    const char *q = strchr(p, ',');
    ASSERT(q != NULL);
    snprintf(forged, sizeof forged, "%.*s\"minibatchSourcePosition\": 18446744073709551614%s",
             (int)(p - st), st, q);
    ASSERT_EQ(ctf_reader_restore_state(r, forged, strlen(forged)), CTF_ESTATE);
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "minibatchSourcePosition");
    /* A key twice (the second would silently win or lose). */
    snprintf(forged, sizeof forged, "%.*s, \"sweep\": 0}", (int)len - 1, st);
    ASSERT_EQ(ctf_reader_restore_state(r, forged, strlen(forged)), CTF_ESTATE);
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "\"sweep\" appears twice");
    /* The genuine state still restores, and the endless stream goes on. */
    ASSERT_EQ(ctf_reader_restore_state(r, st, len), 0);
    for (int i = 0; i < 5; i++) {
        ASSERT_EQ(ctf_reader_next(r, 2, &mb), 0);
        ASSERT(mb != NULL);
        ctf_minibatch_free(mb);
    }
    ctf_reader_free(r);
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live);
}

/*======================================================================
 * Short dense rows of a large dimension: a chunk holds their text, not rows * dim values
 *====================================================================*/

TEST(short_dense_rows_of_a_large_dim_stay_small)
{
    enum { ROWS = 20000, DIM = 2000, FULL_EVERY = 1000 };
    char path[1024];
    snprintf(path, sizeof path, "%s/short_rows.ctf", test_tmpdir());
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    for (int i = 0; i < ROWS; i++) {
        fprintf(f, "|x %d", i);
        if (i % FULL_EVERY == 0)
            for (int j = 1; j < DIM; j++) fprintf(f, " %d", j % 7);
        fputc('\n', f);
    }
    fclose(f);
    long live = atomic_load(&ctf__alloc.live);
    ctf_stream_def s = {.name = "x", .dim = DIM};
    ctf_config c;
    ctf_error err;
    base_cfg(&c, path, &s, 1, NULL);
    c.log = NULL;
    c.trace_level = 0;
    ctf_reader *r;
    ASSERT_OK(ctf_reader_open(&c, &r, &err), &err);
    ctf_minibatch *mb;
    size_t row = 0;
    bool ok = true;
    while (ok && ctf_reader_next(r, 512, &mb) == 0 && mb) {
        ctf_stream_view v;
        ASSERT_EQ(ctf_minibatch_stream(mb, 0, &v), 0);
        const float *x = v.values;
        for (size_t i = 0; i < v.num_samples; i++, row++)
            for (size_t j = 0; j < DIM; j++) {
                float want = j == 0 ? (float)row : row % FULL_EVERY == 0 ? (float)(j % 7) : 0.0f;
                if (x[i * DIM + j] != want) ok = false;
            }
        ctf_minibatch_free(mb);
    }
    ASSERT(ok);
    ASSERT_EQ(ctf_reader_error(r)->code, CTF_OK);
    ASSERT_EQ(row, ROWS);
    ctf_stats st;
    ctf_reader_get_stats(r, &st);
    /* Zero-filled, the chunk would be ROWS * DIM * 4 = 160 MB; its text is under 1 MB. */
    ASSERT(st.bytes_resident_peak < ((uint64_t)8 << 20));
    ASSERT_EQ(st.warnings, ROWS - ROWS / FULL_EVERY);
    ctf_reader_free(r);
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live);
}
