/*
 * test_parse.c -- the CTF format and its errors (SPEC 1 and 2), driven through the public API:
 * write a file, open a reader in file order, read every sequence, and inspect the delivered
 * views, the keys, the counters and every problem that reached the log callback, with its
 * exact line, column and byte offset.
 *
 * One test per rule and per error kind; the error-kind tests run each file twice: with
 * maxErrors 0 (the reader must stop at the error, naming it) and with maxErrors 1 (the error is
 * logged, the sample or row is dropped and the rest of the sequence is delivered).
 */
#include "ctfio_internal.h"
#include "test.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>

/*======================================================================
 * Harness: run a reader over a file, keep what it delivered and logged
 *====================================================================*/

#define MAX_LOG 256
#define MAX_MB 256

typedef struct logbuf {
    size_t n;                 /* records stored (at most MAX_LOG) */
    size_t count[3];          /* records per severity, stored or not */
    ctf_severity sev[MAX_LOG];
    ctf_error e[MAX_LOG];
} logbuf;

static void log_cb(void *user, ctf_severity sev, const ctf_error *e)
{
    logbuf *l = user;
    if ((int)sev >= 0 && (int)sev < 3) l->count[sev]++;
    if (l->n < MAX_LOG) {
        l->sev[l->n] = sev;
        l->e[l->n] = *e;
        l->n++;
    }
}

typedef struct run {
    int open_rc;              /* ctf_reader_open */
    ctf_error open_err;
    int next_rc;              /* the first failing ctf_reader_next, 0 if the data ended */
    ctf_error next_err;       /* ctf_reader_error after that failure */
    size_t nmb;               /* minibatches delivered with at least one sequence */
    size_t empty_mb;          /* minibatches with no sequence (dropped ones) */
    ctf_minibatch *mb[MAX_MB];
    ctf_stats stats;
    ctf_index_info info;
    logbuf log;
} run;

static run R; /* the run of the current test (static: big) */

static void run_clear(run *r)
{
    for (size_t i = 0; i < r->nmb; i++) ctf_minibatch_free(r->mb[i]);
    memset(r, 0, sizeof *r);
}

/* A configuration reading file `path` once, in file order, with the given streams. */
static void cfg_for(ctf_config *cfg, const char *path, const ctf_stream_def *s, size_t n)
{
    ctf_config_init(cfg);
    cfg->path = path;
    cfg->streams = s;
    cfg->num_streams = n;
    cfg->randomize = false;
    cfg->max_sweeps = 1;
}

/* Opens a reader with cfg (its log redirected to r->log) and reads minibatches of `mb_size`
 * index samples until the end or the first error. */
static void run_mb(ctf_config *cfg, run *r, uint64_t mb_size)
{
    run_clear(r);
    cfg->log = log_cb;
    cfg->log_user = &r->log;
    ctf__error_clear(&r->open_err);
    ctf__error_clear(&r->next_err);
    ctf_reader *rd = NULL;
    r->open_rc = ctf_reader_open(cfg, &rd, &r->open_err);
    if (r->open_rc) return;
    ctf_index_get_info(ctf_reader_index(rd), &r->info);
    for (;;) {
        ctf_minibatch *mb = NULL;
        int rc = ctf_reader_next(rd, mb_size, &mb);
        if (rc) {
            r->next_rc = rc;
            r->next_err = *ctf_reader_error(rd);
            /* A dead reader keeps failing the same way. */
            ctf_minibatch *again = NULL;
            if (ctf_reader_next(rd, mb_size, &again) != rc || again) r->next_rc = 12345;
            break;
        }
        if (!mb) break;
        if (ctf_minibatch_num_sequences(mb) == 0) {
            r->empty_mb++;
            ctf_minibatch_free(mb);
            continue;
        }
        if (r->nmb == MAX_MB) {
            ctf_minibatch_free(mb);
            break;
        }
        r->mb[r->nmb++] = mb;
    }
    ctf_reader_get_stats(rd, &r->stats);
    ctf_reader_free(rd);
}

/* One sequence per minibatch (sequences here always have >= 1 index sample). */
static void run_cfg(ctf_config *cfg, run *r) { run_mb(cfg, r, 1); }

/* Writes text to `name` and runs it with default settings and max_errors. */
static const char *run_text(const char *name, const char *text, const ctf_stream_def *s,
                            size_t ns, uint64_t max_errors)
{
    static char path[512];
    snprintf(path, sizeof path, "%s", test_write_str(name, text));
    ctf_config cfg;
    cfg_for(&cfg, path, s, ns);
    cfg.max_errors = max_errors;
    run_cfg(&cfg, &R);
    return path;
}

static ctf_stream_view view_of(const run *r, size_t mb, size_t k)
{
    ctf_stream_view v;
    memset(&v, 0, sizeof v);
    if (mb < r->nmb) ctf_minibatch_stream(r->mb[mb], k, &v);
    return v;
}

static uint64_t key_of(const run *r, size_t mb)
{
    return mb < r->nmb && ctf_minibatch_num_sequences(r->mb[mb])
               ? ctf_minibatch_keys(r->mb[mb])[0]
               : UINT64_MAX;
}

static uint64_t line_of(const run *r, size_t mb)
{
    return mb < r->nmb && ctf_minibatch_num_sequences(r->mb[mb])
               ? ctf_minibatch_lines(r->mb[mb])[0]
               : UINT64_MAX;
}

/* Float value i of a dense float view. */
static float fval(const ctf_stream_view *v, size_t i) { return ((const float *)v->values)[i]; }
static double dval(const ctf_stream_view *v, size_t i) { return ((const double *)v->values)[i]; }

/* Compares a dense float view with want[0..n) (n = num_samples * dim). */
static bool dense_is(const ctf_stream_view *v, const float *want, size_t n)
{
    if (v->is_sparse || v->precision != CTF_FLOAT32 || v->num_samples * v->dim != n) {
        fprintf(stderr, "  dense view: %zu samples x dim %zu, want %zu values\n", v->num_samples,
                v->dim, n);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if (fval(v, i) != want[i]) {
            fprintf(stderr, "  value %zu is %.9g, want %.9g\n", i, fval(v, i), want[i]);
            return false;
        }
    return true;
}

/* Compares sparse sample s of a float view with the pairs idx/val. */
static bool sparse_is(const ctf_stream_view *v, size_t s, const int32_t *idx, const float *val,
                      size_t n)
{
    if (!v->is_sparse || s >= v->num_samples) return false;
    int64_t b = v->indptr[s], e = v->indptr[s + 1];
    if ((size_t)(e - b) != n) {
        fprintf(stderr, "  sparse sample %zu has %lld entries, want %zu\n", s,
                (long long)(e - b), n);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if (v->indices[b + (int64_t)i] != idx[i] ||
            ((const float *)v->values)[b + (int64_t)i] != val[i]) {
            fprintf(stderr, "  sparse entry %zu is %d:%g, want %d:%g\n", i,
                    v->indices[b + (int64_t)i], ((const float *)v->values)[b + (int64_t)i],
                    idx[i], val[i]);
            return false;
        }
    return true;
}

static bool at(const ctf_error *e, uint64_t line, uint64_t col, int64_t off)
{
    if (e->line == line && e->column == col && e->offset == off) return true;
    fprintf(stderr, "  location %llu:%llu (byte %lld), want %llu:%llu (byte %lld): %s\n",
            (unsigned long long)e->line, (unsigned long long)e->column, (long long)e->offset,
            (unsigned long long)line, (unsigned long long)col, (long long)off, e->message);
    return false;
}

static void dump_log(const logbuf *l)
{
    for (size_t i = 0; i < l->n; i++) {
        char buf[1200];
        fprintf(stderr, "  log: %s\n", ctf_error_format(&l->e[i], l->sev[i], buf, sizeof buf));
    }
}

/* Streams used by most tests: a dense stream of dim 3 and a sparse one of dim 5, both by
 * alias, so that messages (which use the names) differ from the file's tokens. */
static const ctf_stream_def AB[] = {
    {"feat", "a", 3, false, false},
    {"lab", "b", 5, true, false},
};

/*======================================================================
 * Error kinds: exact location, maxErrors 0 stops, maxErrors 1 drops and goes on
 *====================================================================*/

/* text: a file whose only problem is one error at (line, col, off) with a message containing
 * needle. dropped: the stream whose sample it drops (-1: none); row_dropped: the row yields
 * no sample. With maxErrors 1 the file's sequences (nseq) are all delivered. */
static bool expect_error(const char *name, const char *text, uint64_t line, uint64_t col,
                         int64_t off, const char *needle, int dropped, bool row_dropped,
                         size_t nseq)
{
    const char *path = run_text(name, text, AB, 2, 0);
    char want[700];
    snprintf(want, sizeof want, "; reached the maximum number of allowed errors (0) reading %s",
             path);
    bool ok = true;
    if (R.open_rc != 0 || R.next_rc != CTF_EPARSE || R.nmb != 0 || R.log.n != 0) {
        fprintf(stderr, "  maxErrors 0: open %d next %d, %zu minibatches, %zu logged: %s\n",
                R.open_rc, R.next_rc, R.nmb, R.log.n, R.open_rc ? R.open_err.message : "");
        ok = false;
    }
    if (!at(&R.next_err, line, col, off)) ok = false;
    if (!strstr(R.next_err.message, needle) || !strstr(R.next_err.message, want) ||
        strcmp(R.next_err.path, path) != 0 || R.next_err.code != CTF_EPARSE) {
        fprintf(stderr, "  maxErrors 0 message: '%s' (code %d), want '%s' and '%s'\n",
                R.next_err.message, R.next_err.code, needle, want);
        ok = false;
    }
    if (R.stats.errors != 1) {
        fprintf(stderr, "  maxErrors 0: %llu errors counted\n",
                (unsigned long long)R.stats.errors);
        ok = false;
    }
    run_clear(&R);

    run_text(name, text, AB, 2, 1);
    if (R.open_rc != 0 || R.next_rc != 0 || R.nmb != nseq || R.log.count[CTF_SEV_ERROR] != 1 ||
        R.log.count[CTF_SEV_WARNING] != 0) {
        fprintf(stderr, "  maxErrors 1: open %d next %d (%s), %zu minibatches, %zu errors %zu "
                "warnings logged\n",
                R.open_rc, R.next_rc, R.next_err.message, R.nmb, R.log.count[CTF_SEV_ERROR],
                R.log.count[CTF_SEV_WARNING]);
        dump_log(&R.log);
        ok = false;
    } else {
        const ctf_error *e = &R.log.e[0];
        if (!at(e, line, col, off)) ok = false;
        if (!strstr(e->message, needle) || strstr(e->message, "reached the maximum") ||
            strcmp(e->path, path) != 0) {
            fprintf(stderr, "  maxErrors 1 message: '%s', want '%s'\n", e->message, needle);
            ok = false;
        }
    }
    for (int k = 0; k < 2; k++) {
        uint64_t want_drop = k == dropped ? 1 : 0;
        if (R.stats.streams[k].dropped_samples != want_drop) {
            fprintf(stderr, "  stream %d: %llu dropped samples, want %llu\n", k,
                    (unsigned long long)R.stats.streams[k].dropped_samples,
                    (unsigned long long)want_drop);
            ok = false;
        }
    }
    if (R.stats.errors != 1 || R.stats.dropped_rows != (row_dropped ? 1u : 0u) ||
        R.stats.dropped_sequences != 0) {
        fprintf(stderr, "  maxErrors 1: errors %llu, dropped rows %llu, dropped sequences %llu\n",
                (unsigned long long)R.stats.errors, (unsigned long long)R.stats.dropped_rows,
                (unsigned long long)R.stats.dropped_sequences);
        ok = false;
    }
    return ok;
}

/* The first line of every error file: sequence 1 with a good sample in both streams (18 bytes,
 * so the second line starts at byte 18). */
#define GOOD1 "1 |a 1 2 3 |b 0:1\n"

TEST(parse_error_value_dot_exponent)
{
    ASSERT(expect_error("e_dotexp.ctf", GOOD1 "1 |b 1:1 |a 1 1.e5 3\n", 2, 15, 32,
                        "stream 'feat': expected a number (value 2 of the dense sample), found "
                        "'1.e5'",
                        0, false, 1));
    ASSERT_EQ(view_of(&R, 0, 0).num_samples, 1); /* the bad sample is dropped... */
    ASSERT_EQ(view_of(&R, 0, 1).num_samples, 2); /* ...the rest of the sequence delivered */
    const float want[] = {1, 2, 3};
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, want, 3));
    run_clear(&R);
}

TEST(parse_error_value_leading_dot)
{
    ASSERT(expect_error("e_dot.ctf", GOOD1 "1 |a .5 2 3 |b 1:1\n", 2, 6, 23,
                        "stream 'feat': expected a number (value 1 of the dense sample), found "
                        "'.5'",
                        0, false, 1));
    run_clear(&R);
}

TEST(parse_error_value_word)
{
    ASSERT(expect_error("e_abc.ctf", GOOD1 "1 |a 1 2 abc |b 1:1\n", 2, 10, 27,
                        "stream 'feat': expected a number (value 3 of the dense sample), found "
                        "'abc'",
                        0, false, 1));
    run_clear(&R);
}

TEST(parse_error_value_decimal_comma)
{
    ASSERT(expect_error("e_comma.ctf", GOOD1 "1 |a 1,5 2 3 |b 1:1\n", 2, 6, 23,
                        "stream 'feat': expected a number (value 1 of the dense sample), found "
                        "'1,5'",
                        0, false, 1));
    run_clear(&R);
}

/* The other malformed numbers of SPEC 1.6 fail the same way; the valid odd ones parse. */
TEST(parse_error_value_other_malformed_numbers)
{
    static const char *bad[] = {"1e", "1e+", "inf", "nan", "-inf", "0x10", "+", "-", "1.5.2",
                                "1e5.5", "--1", "1..2", "e5", "1.5e", "1f", "NaN", "Infinity"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[128], needle[128];
        snprintf(text, sizeof text, GOOD1 "1 |b 1:1 |a %s 2 3\n", bad[i]);
        snprintf(needle, sizeof needle, "(value 1 of the dense sample), found '%s'", bad[i]);
        if (!expect_error("e_num.ctf", text, 2, 13, 30, needle, 0, false, 1)) {
            fprintf(stderr, "  for '%s'\n", bad[i]);
            ASSERT(0);
        }
        run_clear(&R);
    }
    /* In a sparse value too. */
    ASSERT(expect_error("e_spnum.ctf", GOOD1 "1 |a 4 5 6 |b 2:1.e5\n", 2, 17, 34,
                        "stream 'lab': expected a number directly after '2:', found '1.e5'", 1,
                        false, 1));
    run_clear(&R);
    static const ctf_stream_def X[] = {{"x", NULL, 8, false, false}};
    run_text("e_numok.ctf", "|x 45. +3.5 -0 1.5e-3 1E5 007 1e+2 -2.5E-1\n", X, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    const float want[] = {45.f, 3.5f, -0.f, 1.5e-3f, 1e5f, 7.f, 100.f, -0.25f};
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, want, 8));
    ASSERT(signbit(fval(&v, 2)));
    ASSERT_EQ(R.log.n, 0);
    run_clear(&R);
}

TEST(parse_error_dense_oversize)
{
    /* The error points at the first value beyond dim. */
    ASSERT(expect_error("e_over.ctf", GOOD1 "1 |b 1:1 |a 1 2 3 4 5\n", 2, 19, 36,
                        "stream 'feat': dense sample has more than dim=3 values; sample dropped",
                        0, false, 1));
    ASSERT_EQ(view_of(&R, 0, 0).num_samples, 1);
    run_clear(&R);
}

TEST(parse_error_sparse_index_out_of_range)
{
    /* dim 5: index 5 is the first out of range; the error points at the entry. */
    ASSERT(expect_error("e_spdim.ctf", GOOD1 "1 |a 4 5 6 |b 4:1 5:2\n", 2, 19, 36,
                        "stream 'lab': sparse index 5 is out of range (dim=5)", 1, false, 1));
    ASSERT_EQ(view_of(&R, 0, 1).num_samples, 1); /* the whole sample is dropped */
    ASSERT_EQ(view_of(&R, 0, 1).nnz, 1);
    run_clear(&R);
    /* A huge index does not wrap around. */
    ASSERT(expect_error("e_spbig.ctf", GOOD1 "1 |a 4 5 6 |b 4294967296:1\n", 2, 15, 32,
                        "stream 'lab': sparse index", 1, false, 1));
    run_clear(&R);
}

TEST(parse_error_sparse_missing_colon)
{
    ASSERT(expect_error("e_spcolon.ctf", GOOD1 "1 |a 4 5 6 |b 3 1\n", 2, 16, 33,
                        "stream 'lab': expected ':' directly after sparse index 3, found ' 1'", 1,
                        false, 1));
    run_clear(&R);
    /* A blank between the index and ':' is the same error. */
    ASSERT(expect_error("e_spcolon2.ctf", GOOD1 "1 |a 4 5 6 |b 3 :1\n", 2, 16, 33,
                        "expected ':' directly after sparse index 3", 1, false, 1));
    run_clear(&R);
}

TEST(parse_error_sparse_missing_value)
{
    /* At the end of the line... */
    ASSERT(expect_error("e_spval.ctf", GOOD1 "1 |a 4 5 6 |b 3:\n", 2, 17, 34,
                        "stream 'lab': expected a number directly after '3:', found 'end of "
                        "line'",
                        1, false, 1));
    run_clear(&R);
    /* ...and before a blank: what was found is named, not "end of line". */
    ASSERT(expect_error("e_spval2.ctf", GOOD1 "1 |b 3: 4:1 |a 4 5 6\n", 2, 8, 25,
                        "stream 'lab': expected a number directly after '3:', found ' 4:1'",
                        1, false, 1));
    run_clear(&R);
}

TEST(parse_error_sparse_negative_index)
{
    ASSERT(expect_error("e_spneg.ctf", GOOD1 "1 |a 4 5 6 |b -3:1\n", 2, 15, 32,
                        "stream 'lab': expected a sparse index (an unsigned integer before "
                        "':'), found '-3:1' (indices cannot be negative)",
                        1, false, 1));
    run_clear(&R);
}

TEST(parse_error_empty_alias)
{
    /* '| x': the error points at the '|'; the next sample is parsed as usual. */
    ASSERT(expect_error("e_alias1.ctf", GOOD1 "1 |a 4 5 6 | x |b 1:1\n", 2, 12, 29,
                        "expected an input name directly after '|'", -1, false, 1));
    ASSERT_EQ(view_of(&R, 0, 1).num_samples, 2);
    run_clear(&R);
    /* '||b': the first '|' has an empty name; the second starts sample b. */
    ASSERT(expect_error("e_alias2.ctf", GOOD1 "1 |a 4 5 6 ||b 1:1\n", 2, 12, 29,
                        "expected an input name directly after '|'", -1, false, 1));
    ASSERT_EQ(view_of(&R, 0, 1).num_samples, 2);
    run_clear(&R);
}

TEST(parse_error_text_before_first_bar)
{
    ASSERT(expect_error("e_text.ctf", GOOD1 "1 xyz |a 4 5 6 |b 1:1\n", 2, 3, 20,
                        "expected '|' and an input name, found 'xyz'", -1, false, 1));
    ASSERT_EQ(view_of(&R, 0, 0).num_samples, 2);
    run_clear(&R);
    /* In line mode too (digits at a line start are ignored, other text is not). */
    ASSERT(expect_error("e_text2.ctf", "|a 1 2 3 |b 0:1\n7 x |a 4 5 6 |b 1:1\n", 2, 3, 18,
                        "expected '|' and an input name, found 'x'", -1, false, 2));
    run_clear(&R);
}

TEST(parse_error_stream_twice_on_a_line)
{
    ASSERT(expect_error("e_twice.ctf", GOOD1 "1 |a 4 5 6 |b 1:1 |a 7 8 9\n", 2, 19, 36,
                        "stream 'feat' appears twice on one line (one sample per stream per "
                        "line); the second sample is dropped",
                        0, false, 1));
    const float want[] = {1, 2, 3, 4, 5, 6}; /* the first occurrence is kept */
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, want, 6));
    run_clear(&R);
}

TEST(parse_error_empty_row_in_sequence)
{
    /* A blank line, a blank-only line, a comment-only line, a line with only unknown inputs and
     * a line with only the id: each is a row of the sequence that yields no sample. */
    static const char *rows[] = {"", "  \t", "1 |# just a comment", "|zz 1 2", "1", "1 \r"};
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        char text[128];
        snprintf(text, sizeof text, GOOD1 "%s\n1 |a 4 5 6 |b 1:1\n", rows[i]);
        if (!expect_error("e_row.ctf", text, 2, 1, 18,
                          "row yields no sample (blank, comment-only or unknown inputs only) "
                          "inside sequence 1",
                          -1, true, 1)) {
            fprintf(stderr, "  for row '%s'\n", rows[i]);
            ASSERT(0);
        }
        ASSERT_EQ(view_of(&R, 0, 0).num_samples, 2);
        ASSERT_EQ(R.info.samples, 3); /* the empty row still counts as an index sample */
        run_clear(&R);
    }
    /* A row whose only sample is in error costs one error, not two. */
    ASSERT(expect_error("e_row1.ctf", GOOD1 "1 |a 1 x 3\n1 |a 4 5 6 |b 1:1\n", 2, 8, 25,
                        "found 'x'", 0, true, 1));
    run_clear(&R);
}

TEST(parse_error_longest_stream_too_short)
{
    /* Two rows with data, but no stream has two samples. */
    ASSERT(expect_error("e_short.ctf", "1 |a 1 2 3\n1 |b 0:1\n", 1, 1, 0,
                        "sequence 1 has 2 rows with data but its longest stream has only 1 "
                        "samples",
                        -1, false, 1));
    ASSERT_EQ(view_of(&R, 0, 0).num_samples, 1); /* the sequence is still delivered */
    ASSERT_EQ(view_of(&R, 0, 1).num_samples, 1);
    run_clear(&R);
    /* Located at the sequence's first line, wherever it is. */
    ASSERT(expect_error("e_short2.ctf", GOOD1 "2 |a 1 2 3\n2 |b 0:1\n", 2, 1, 18,
                        "sequence 2 has 2 rows with data", -1, false, 2));
    run_clear(&R);
}

/* A stream absent from a whole sequence is fatal whatever maxErrors says. */
TEST(parse_error_absent_stream_is_fatal)
{
    const char *text = GOOD1 "2 |a 4 5 6\n2 |a 7 8 9\n3 |a 1 2 3 |b 1:1\n";
    for (uint64_t me = 0; me <= 100; me += 100) {
        const char *path = test_write_str("e_absent.ctf", text);
        ctf_config cfg;
        cfg_for(&cfg, path, AB, 2);
        cfg.max_errors = me;
        cfg.chunk_size_bytes = 1; /* every sequence its own chunk: sequence 1 is delivered */
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.open_rc, 0);
        ASSERT_EQ(R.nmb, 1);
        ASSERT_EQ(key_of(&R, 0), 1);
        ASSERT_EQ(R.next_rc, CTF_EPARSE);
        ASSERT(at(&R.next_err, 2, 1, 18));
        ASSERT_STR_CONTAINS(R.next_err.message,
                            "malformed input file: stream 'lab' is absent from sequence 2 "
                            "(lines 2-3)");
        ASSERT(!strstr(R.next_err.message, "maximum number of allowed errors"));
        ASSERT_EQ(R.log.count[CTF_SEV_ERROR], 0);
        ASSERT_EQ(R.stats.errors, 0); /* fatal errors are not counted against the budget */
        run_clear(&R);
    }
}

/* A sample dropped for an error can leave its stream with no sample in the sequence: the
 * sequence is dropped (counted, with a warning), not a fatal "absent stream", so that maxErrors
 * also works for one-line sequences; with maxErrors 0 the error itself stops the reader. */
TEST(parse_error_absent_after_dropped_sample)
{
    run_text("e_absent2.ctf", "|a 1 2 3 |b 0:1\n|a 1 x 3 |b 1:1\n", AB, 2, 10);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT_EQ(key_of(&R, 0), 0);
    ASSERT_EQ(R.log.count[CTF_SEV_ERROR], 1);
    ASSERT(at(&R.log.e[0], 2, 6, 21));
    ASSERT_EQ(R.log.count[CTF_SEV_WARNING], 1);
    ASSERT_STR_CONTAINS(R.log.e[1].message,
                        "sequence 1 dropped: every sample of stream 'feat' in it was in error");
    ASSERT_EQ(R.stats.dropped_sequences, 1);
    ASSERT_EQ(R.stats.errors, 1);
    run_clear(&R);
    run_text("e_absent3.ctf", "|a 1 2 3 |b 0:1\n|a 1 x 3 |b 1:1\n", AB, 2, 0);
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    ASSERT_STR_CONTAINS(R.next_err.message, "maximum number of allowed errors (0)");
    run_clear(&R);
}

/* Fatal problems found by the index: ctf_reader_open fails with the location. */
static bool expect_open_fatal(const char *name, const void *data, size_t len, uint64_t line,
                              uint64_t col, int64_t off, const char *needle)
{
    const char *path = test_write_file(name, data, len);
    char p[512];
    snprintf(p, sizeof p, "%s", path);
    bool ok = true;
    for (uint64_t me = 0; me <= 1000; me += 1000) {
        ctf_config cfg;
        cfg_for(&cfg, p, AB, 2);
        cfg.max_errors = me;
        run_cfg(&cfg, &R);
        if (R.open_rc != CTF_EPARSE) {
            fprintf(stderr, "  open returned %d, want CTF_EPARSE\n", R.open_rc);
            ok = false;
        }
        if (!at(&R.open_err, line, col, off)) ok = false;
        if (!strstr(R.open_err.message, needle) || strcmp(R.open_err.path, p) != 0 ||
            R.open_err.code != CTF_EPARSE) {
            fprintf(stderr, "  message '%s' (path %s), want '%s'\n", R.open_err.message,
                    R.open_err.path, needle);
            ok = false;
        }
        run_clear(&R);
    }
    return ok;
}
#define OPEN_FATAL(name, lit, line, col, off, needle)                                      \
    ASSERT(expect_open_fatal(name, lit, sizeof(lit) - 1, line, col, off, needle))

TEST(parse_fatal_id_overflow)
{
    /* UINT64_MAX itself is a valid id; one more is fatal, located at the line start. */
    OPEN_FATAL("f_ovf.ctf", "18446744073709551615 |a 1 2 3 |b 0:1\n18446744073709551616 |a 1\n",
               2, 1, 37, "sequence id '18446744073709551616' does not fit in 64 bits");
    OPEN_FATAL("f_ovf2.ctf", "99999999999999999999999 |a 1 2 3 |b 0:1\n", 1, 1, 0,
               "sequence id '99999999999999999999999' does not fit in 64 bits");
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    ctf_config cfg;
    cfg_for(&cfg, test_write_str("f_max.ctf", "18446744073709551615 |a 1\n1 |a 2\n"), A1, 1);
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.nmb, 2);
    ASSERT_U64_EQ(key_of(&R, 0), UINT64_MAX);
    run_clear(&R);
}

TEST(parse_fatal_utf16_bom)
{
    OPEN_FATAL("f_u16le.ctf", "\xff\xfe|\0a\0 \0001\0\n\0", 1, 1, 0, "UTF-16 is not supported");
    OPEN_FATAL("f_u16be.ctf", "\xfe\xff\0|\0a\0 \0001\0\n", 1, 1, 0, "UTF-16 is not supported");
}

TEST(parse_fatal_empty_and_blank_files)
{
    ASSERT(expect_open_fatal("f_empty.ctf", "", 0, 0, 0, -1, "the file is empty"));
    OPEN_FATAL("f_blank.ctf", "  \n\t\n\r\n\n   ", 0, 0, -1, "the file holds only blank lines");
    OPEN_FATAL("f_bom.ctf", "\xef\xbb\xbf", 0, 0, -1, "blank");
}

TEST(parse_fatal_first_char)
{
    OPEN_FATAL("f_first.ctf", "x |a 1 2 3\n", 1, 1, 0,
               "expected a sequence id or '|' at the start of the file, found 'x'");
    /* After blank lines, at the first non-blank character. */
    OPEN_FATAL("f_first2.ctf", "\n  \n  # |a 1 2 3\n", 3, 3, 6,
               "expected a sequence id or '|' at the start of the file, found '#'");
    OPEN_FATAL("f_first3.ctf", "-1 |a 1 2 3\n", 1, 1, 0, "found '-'");
    OPEN_FATAL("f_first4.ctf", "\xc3\xa9 |a 1 2 3\n", 1, 1, 0, "found byte 0xc3");
    /* A first id after a blank is a first line without an id. */
    OPEN_FATAL("f_first5.ctf", " 1 |a 1 2 3 |b 0:1\n", 1, 1, 0,
               "expected a sequence id at the start of the first line");
}

/* Line mode needs some line with a configured input. */
TEST(parse_fatal_no_configured_input)
{
    OPEN_FATAL("f_noinput.ctf", "|zz 1\n|# c\n", 0, 0, -1,
               "no line holds any of the configured inputs");
}

/*======================================================================
 * The format: BOM, line ends, delimiters, comments, aliases, unknown inputs
 *====================================================================*/

TEST(parse_utf8_bom_skipped_offsets_absolute)
{
    run_text("bom.ctf", "\xef\xbb\xbf|a 1 2 3 |b 0:1\n|a 4 x 6 |b 1:1\n", AB, 2, 0);
    ASSERT_EQ(R.open_rc, 0);
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    /* Line 2 starts at byte 3 + 16 = 19; 'x' is its 6th byte. */
    ASSERT(at(&R.next_err, 2, 6, 24));
    run_clear(&R);
    /* On the first line the byte offset counts the BOM, the column does not. */
    run_text("bom1.ctf", "\xef\xbb\xbf|a 1 x 3 |b 0:1\n", AB, 2, 0);
    ASSERT(at(&R.next_err, 1, 6, 8));
    run_clear(&R);
    /* And a valid file reads as without the BOM, in line mode (first character '|'). */
    run_text("bom2.ctf", "\xef\xbb\xbf|a 1 2 3 |b 0:1\n|a 4 5 6 |b 1:1\n", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 2);
    ASSERT(R.info.line_mode);
    ASSERT_EQ(key_of(&R, 0), 0);
    ASSERT_EQ(key_of(&R, 1), 1);
    run_clear(&R);
    run_text("bom3.ctf", "\xef\xbb\xbf" "7 |a 1 2 3 |b 0:1\n", AB, 2, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT(!R.info.line_mode);
    ASSERT_EQ(key_of(&R, 0), 7);
    run_clear(&R);
}

TEST(parse_crlf_and_lf_mixed)
{
    run_text("crlf.ctf", "1 |a 1 2 3 |b 0:1\r\n1 |a 4 5 6\n1 |b 4:2.5 |a 7 8 9\r\n", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    const float want[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, want, 9));
    v = view_of(&R, 0, 1);
    ASSERT(sparse_is(&v, 1, (const int32_t[]){4}, (const float[]){2.5f}, 1));
    ASSERT_EQ(R.log.n, 0);
    ASSERT_EQ(R.info.lines, 3);
    run_clear(&R);
    /* Offsets count the '\r' bytes. */
    run_text("crlf2.ctf", "1 |a 1 2 3 |b 0:1\r\n1 |a 4 5 6\n1 |a 7 x 9\r\n", AB, 2, 0);
    ASSERT(at(&R.next_err, 3, 8, 37));
    run_clear(&R);
    /* A '\r' directly after a value ends it (no "1\r" number error), also in sparse values. */
    static const ctf_stream_def X[] = {{"x", NULL, 1, false, false}, {"y", NULL, 3, true, false}};
    run_text("crlf3.ctf", "|x 1\r\n|y 2:3\r\n", X, 2, 0);
    ASSERT_EQ(R.open_rc, 0);
    /* Line mode: line 1 lacks y, which is fatal; but no value error was reported. */
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    ASSERT_STR_CONTAINS(R.next_err.message, "absent");
    run_clear(&R);
    run_text("crlf4.ctf", "|x 1\r|y 2:3\r\n|y 1:1\r|x -1\r\r\n", X, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 2);
    ctf_stream_view v2 = view_of(&R, 1, 0);
    ASSERT_DBL_EQ(fval(&v2, 0), -1.0);
    v2 = view_of(&R, 0, 1);
    ASSERT(sparse_is(&v2, 0, (const int32_t[]){2}, (const float[]){3}, 1));
    run_clear(&R);
}

TEST(parse_tabs_and_spaces)
{
    run_text("tabs.ctf", "5\t|a\t1 \t2\t\t3  |b\t0:1\t 4:2 \t\n5 |b 1:1|a 4\t5 6|# c\t\n", AB, 2,
             0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT_EQ(key_of(&R, 0), 5);
    const float want[] = {1, 2, 3, 4, 5, 6};
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, want, 6));
    v = view_of(&R, 0, 1);
    ASSERT(sparse_is(&v, 0, (const int32_t[]){0, 4}, (const float[]){1, 2}, 2));
    ASSERT(sparse_is(&v, 1, (const int32_t[]){1}, (const float[]){1}, 1));
    ASSERT_EQ(R.log.n, 0);
    run_clear(&R);
}

TEST(parse_last_line_without_newline)
{
    run_text("nonl.ctf", "1 |a 1 2 3 |b 0:1\n1 |b 1:1 |a 4 5 6", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    const float want[] = {1, 2, 3, 4, 5, 6};
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, want, 6));
    ASSERT_EQ(R.info.lines, 2);
    ASSERT_EQ(R.log.n, 0);
    run_clear(&R);
    /* Sparse at the very end, and a value ending the file. */
    run_text("nonl2.ctf", "|a 1 2 3 |b 0:1 3:7", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    v = view_of(&R, 0, 1);
    ASSERT(sparse_is(&v, 0, (const int32_t[]){0, 3}, (const float[]){1, 7}, 2));
    run_clear(&R);
    /* An error on the unterminated last line is located as usual. */
    run_text("nonl3.ctf", "1 |a 1 2 3 |b 0:1\n1 |b 1:1 |a 4 5 6e", AB, 2, 0);
    ASSERT(at(&R.next_err, 2, 17, 34));
    ASSERT_STR_CONTAINS(R.next_err.message, "found '6e'");
    run_clear(&R);
}

/* A trailing run of blanks without a newline is not a line; a blank line is one. */
TEST(parse_trailing_blanks_at_eof)
{
    run_text("trail.ctf", "1 |a 1 2 3 |b 0:1\n \t ", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT_EQ(R.info.lines, 1);
    ASSERT_EQ(R.info.samples, 1);
    run_clear(&R);
    run_text("trail2.ctf", "1 |a 1 2 3 |b 0:1\n \t \n", AB, 2, 0);
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    ASSERT(at(&R.next_err, 2, 1, 18));
    ASSERT_STR_CONTAINS(R.next_err.message, "row yields no sample");
    run_clear(&R);
    /* In line mode neither is a sequence. */
    run_text("trail3.ctf", "|a 1 2 3 |b 0:1\n\n \t ", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT_EQ(R.info.sequences, 1);
    run_clear(&R);
}

TEST(parse_comments)
{
    run_text("comm.ctf",
             "|# leading comment |a 1 2 3 |# middle |b 0:1 |#trailing\n"
             "|b 2:2|#no blank before|a 4 5 6|#\n"
             "|#|#|a 7 8 9 |b 1:3\n",
             AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 3);
    ASSERT_EQ(R.log.n, 0);
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, (const float[]){1, 2, 3}, 3));
    v = view_of(&R, 1, 0);
    ASSERT(dense_is(&v, (const float[]){4, 5, 6}, 3));
    v = view_of(&R, 2, 0);
    ASSERT(dense_is(&v, (const float[]){7, 8, 9}, 3));
    run_clear(&R);
    /* "|#|a 9 9 9": the comment body is empty, it ends at the next '|', and "|a 9 9 9" is a
     * sample. */
    run_text("comm2.ctf", "|#|a 9 9 9 |b 1:3\n", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, (const float[]){9, 9, 9}, 3));
    run_clear(&R);
    /* A comment-only line in id mode inside a sequence is an empty row (tested above); as the
     * first line of a file it makes the file line mode. */
    run_text("comm3.ctf", "|# header\n1 |a 1 2 3 |b 0:1\n2 |a 1 2 3 |b 0:1\n", AB, 2, 0);
    ASSERT(R.info.line_mode);
    ASSERT_EQ(R.nmb, 2);
    ASSERT_EQ(key_of(&R, 0), 1);
    ASSERT_EQ(key_of(&R, 1), 2);
    run_clear(&R);
}

/* The seed's simple example, verbatim, including the "escaped pipe" comment: '|#' inside a
 * comment starts another comment, which ends at the next '|'. */
TEST(parse_seed_simple_example_escaped_pipe)
{
    static const ctf_stream_def S[] = {
        {"A", NULL, 5, false, false}, {"B", NULL, 1000000, true, false}, {"C", NULL, 1, false, false}};
    run_text("seed_simple.ctf",
             "|B 100:3 123:4 |C 8 |A 0 1 2 3 4 |# a CTF comment\n"
             "|# another comment |A 0 1.1 22 0.3 54 |C 123917 |B 1134:1.911 13331:0.014\n"
             "|C -0.001 |# a comment with an escaped pipe: '|#' |A 3.9 1.11 121.2 99.13 0.04 "
             "|B 999:0.001 918918:-9.19\n",
             S, 3, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 3);
    ASSERT_EQ(R.log.n, 0);
    ASSERT(R.info.line_mode);
    ctf_stream_view a = view_of(&R, 2, 0), b = view_of(&R, 2, 1), c = view_of(&R, 2, 2);
    ASSERT(dense_is(&a, (const float[]){3.9f, 1.11f, 121.2f, 99.13f, 0.04f}, 5));
    ASSERT(sparse_is(&b, 0, (const int32_t[]){999, 918918}, (const float[]){0.001f, -9.19f}, 2));
    ASSERT(dense_is(&c, (const float[]){-0.001f}, 1));
    b = view_of(&R, 0, 1);
    ASSERT(sparse_is(&b, 0, (const int32_t[]){100, 123}, (const float[]){3, 4}, 2));
    c = view_of(&R, 1, 2);
    ASSERT(dense_is(&c, (const float[]){123917}, 1));
    run_clear(&R);
}

TEST(parse_aliases)
{
    static const ctf_stream_def S[] = {
        {"Some_very_long_input_name", "a", 3, false, false},
        {"Some_other_also_very_long_input_name", "b", 2, false, false}};
    /* The file uses the aliases; a name is then an unknown input, skipped. */
    ctf_config cfg;
    cfg_for(&cfg,
            test_write_str("alias.ctf", "|a 1 2 3 |b 4 5 |Some_very_long_input_name 9 9 9\n"), S,
            2);
    cfg.trace_level = 2;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT_STR_EQ(v.name, "Some_very_long_input_name");
    ASSERT(dense_is(&v, (const float[]){1, 2, 3}, 3));
    v = view_of(&R, 0, 1);
    ASSERT_STR_EQ(v.name, "Some_other_also_very_long_input_name");
    ASSERT(dense_is(&v, (const float[]){4, 5}, 2));
    ASSERT_EQ(R.log.count[CTF_SEV_INFO] >= 1, 1);
    bool found = false;
    for (size_t i = 0; i < R.log.n; i++)
        if (strstr(R.log.e[i].message, "unknown input 'Some_very_long_input_name'")) found = true;
    ASSERT(found);
    run_clear(&R);
    /* A prefix or extension of an alias is another name. */
    run_text("alias2.ctf", "|a 1 2 3 |b 0:1 |ab 7 |bb 1:1 |aa\n", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.log.n, 0);
    run_clear(&R);
}

TEST(parse_unknown_inputs_info_at_trace_level_2_only)
{
    const char *text = "|a 1 2 3 |zz 1 2 3 4 x y |b 0:1 |q\n";
    for (int tl = 0; tl <= 2; tl++) {
        ctf_config cfg;
        cfg_for(&cfg, test_write_str("unk.ctf", text), AB, 2);
        cfg.trace_level = tl;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.next_rc, 0);
        ASSERT_EQ(R.nmb, 1);
        ASSERT_EQ(R.stats.errors, 0);
        ASSERT_EQ(R.log.count[CTF_SEV_ERROR] + R.log.count[CTF_SEV_WARNING], 0);
        size_t unknown = 0;
        for (size_t i = 0; i < R.log.n; i++)
            if (R.log.sev[i] == CTF_SEV_INFO && strstr(R.log.e[i].message, "unknown input")) {
                if (unknown == 0) {
                    ASSERT(at(&R.log.e[i], 1, 10, 9));
                    ASSERT_STR_CONTAINS(R.log.e[i].message, "'zz'");
                } else {
                    ASSERT(at(&R.log.e[i], 1, 33, 32));
                    ASSERT_STR_CONTAINS(R.log.e[i].message, "'q'");
                }
                unknown++;
            }
        ASSERT_EQ(unknown, tl == 2 ? 2 : 0);
        ctf_stream_view v = view_of(&R, 0, 0);
        ASSERT(dense_is(&v, (const float[]){1, 2, 3}, 3));
        run_clear(&R);
    }
}

/*======================================================================
 * Id mode and line mode
 *====================================================================*/

TEST(parse_id_mode_grouping_no_id_lines_join)
{
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    run_text("group.ctf", "5 |a 1\n|a 2\n  |a 3\n5 |a 4\n6 |a 5\n\t|a 6\n007|a 7\n", A1, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 3);
    ASSERT_EQ(key_of(&R, 0), 5);
    ASSERT_EQ(key_of(&R, 1), 6);
    ASSERT_EQ(key_of(&R, 2), 7);
    ASSERT_EQ(line_of(&R, 0), 1);
    ASSERT_EQ(line_of(&R, 1), 5);
    ASSERT_EQ(line_of(&R, 2), 7);
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, (const float[]){1, 2, 3, 4}, 4));
    v = view_of(&R, 1, 0);
    ASSERT(dense_is(&v, (const float[]){5, 6}, 2));
    ASSERT_EQ(R.info.samples, 7);
    ASSERT(!R.info.line_mode);
    ASSERT_EQ(R.log.n, 0);
    run_clear(&R);
    /* Blank lines before the first id belong to no sequence. */
    run_text("group2.ctf", "\n  \n5 |a 1\n5 |a 2\n", A1, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT_EQ(line_of(&R, 0), 3);
    ASSERT_EQ(R.info.samples, 2);
    run_clear(&R);
}

TEST(parse_non_consecutive_repeated_id)
{
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    const char *text = "1 |a 1\n2 |a 2\n1 |a 3\n2 |a 4\n3 |a 5\n1 |a 6\n";
    for (int tl = 0; tl <= 1; tl++) {
        ctf_config cfg;
        cfg_for(&cfg, test_write_str("repeat.ctf", text), A1, 1);
        cfg.trace_level = tl;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.next_rc, 0);
        ASSERT_EQ(R.nmb, 6); /* every reappearance is a separate sequence */
        const uint64_t keys[] = {1, 2, 1, 2, 3, 1};
        for (size_t i = 0; i < 6; i++) {
            ASSERT_U64_EQ(key_of(&R, i), keys[i]);
            ASSERT_U64_EQ(line_of(&R, i), i + 1);
            ctf_stream_view v = view_of(&R, i, 0);
            ASSERT_DBL_EQ(fval(&v, 0), (double)(i + 1));
        }
        ASSERT_EQ(R.stats.errors, 0);
        if (tl == 0) {
            ASSERT_EQ(R.log.n, 0);
        } else {
            /* One warning per file, naming both lines. */
            ASSERT_EQ(R.log.n, 1);
            ASSERT_EQ(R.log.sev[0], CTF_SEV_WARNING);
            ASSERT(at(&R.log.e[0], 3, 1, 14));
            ASSERT_STR_CONTAINS(R.log.e[0].message,
                                "sequence id 1 reappears here after other ids (first used on "
                                "line 1)");
        }
        run_clear(&R);
    }
}

TEST(parse_skip_sequence_ids)
{
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    ctf_config cfg;
    cfg_for(&cfg, test_write_str("skip.ctf", "1 |a 1\n1 |a 2\n2 |a 3\n|a 4\n"), A1, 1);
    cfg.skip_sequence_ids = true;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT(R.info.line_mode);
    ASSERT_EQ(R.nmb, 4);
    for (size_t i = 0; i < 4; i++) {
        ASSERT_U64_EQ(key_of(&R, i), i);
        ctf_stream_view v = view_of(&R, i, 0);
        ASSERT_EQ(v.num_samples, 1);
        ASSERT_DBL_EQ(fval(&v, 0), (double)(i + 1));
    }
    run_clear(&R);
    /* With skipSequenceIds the mode is line mode whatever the first character: text before
     * the first '|' is then an error of that line, not a fatal "expected a sequence id". */
    cfg_for(&cfg, test_write_str("skip2.ctf", "x |a 1\n"), A1, 1);
    cfg.skip_sequence_ids = true;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.open_rc, 0);
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    ASSERT(at(&R.next_err, 1, 1, 0));
    ASSERT_STR_CONTAINS(R.next_err.message, "expected '|' and an input name, found 'x'");
    run_clear(&R);
}

TEST(parse_line_mode_ignores_leading_digits)
{
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    run_text("lm.ctf", "|a 1\n100 |a 2\n100 |a 3\n7|a 4\n", A1, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT(R.info.line_mode);
    ASSERT_EQ(R.nmb, 4);
    for (size_t i = 0; i < 4; i++) {
        ASSERT_U64_EQ(key_of(&R, i), i);
        ASSERT_U64_EQ(line_of(&R, i), i + 1);
        ctf_stream_view v = view_of(&R, i, 0);
        ASSERT_EQ(v.num_samples, 1);
    }
    run_clear(&R);
}

TEST(parse_line_mode_skips_lines_without_input)
{
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    const char *text = "|a 1\n\n100 |a 2\n|# only a comment\n|zz 5\n   \n\r\n7|a 3\n|# x |zz 1\n";
    for (int tl = 1; tl <= 2; tl++) {
        ctf_config cfg;
        cfg_for(&cfg, test_write_str("lmskip.ctf", text), A1, 1);
        cfg.trace_level = tl;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.next_rc, 0);
        ASSERT_EQ(R.nmb, 3);
        /* Keys are physical 0-based line numbers. */
        ASSERT_EQ(key_of(&R, 0), 0);
        ASSERT_EQ(key_of(&R, 1), 2);
        ASSERT_EQ(key_of(&R, 2), 7);
        ASSERT_EQ(line_of(&R, 2), 8);
        ASSERT_EQ(R.info.sequences, 3);
        ASSERT_EQ(R.info.samples, 3);
        ASSERT_EQ(R.info.lines, 9);
        ASSERT_EQ(R.stats.errors, 0);
        ASSERT_EQ(R.stats.dropped_rows, 0);
        ASSERT_EQ(R.log.count[CTF_SEV_ERROR] + R.log.count[CTF_SEV_WARNING], 0);
        if (tl == 2) {
            /* Non-blank skipped lines are named at traceLevel 2. */
            size_t skipped = 0;
            for (size_t i = 0; i < R.log.n; i++)
                if (strstr(R.log.e[i].message, "line holds no configured input")) {
                    const uint64_t lines[] = {4, 5, 9};
                    if (skipped < 3) ASSERT_U64_EQ(R.log.e[i].line, lines[skipped]);
                    skipped++;
                }
            ASSERT_EQ(skipped, 3);
        } else {
            ASSERT_EQ(R.log.n, 0);
        }
        run_clear(&R);
    }
}

/*======================================================================
 * Samples: zero fill, duplicates, precision
 *====================================================================*/

TEST(parse_dense_zero_fill_with_warning)
{
    static const ctf_stream_def A3[] = {{"a", NULL, 3, false, false}};
    run_text("zero.ctf", "|a 1\n|a 1 2 \n|a\n|a 1 2 3\n|a 7 |# c\n", A3, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 5);
    const float want[5][3] = {{1, 0, 0}, {1, 2, 0}, {0, 0, 0}, {1, 2, 3}, {7, 0, 0}};
    for (size_t i = 0; i < 5; i++) {
        ctf_stream_view v = view_of(&R, i, 0);
        ASSERT(dense_is(&v, want[i], 3));
    }
    ASSERT_EQ(R.stats.warnings, 4);
    ASSERT_EQ(R.stats.errors, 0);
    ASSERT_EQ(R.log.count[CTF_SEV_WARNING], 4);
    const uint64_t lines[] = {1, 2, 3, 5};
    const int64_t offs[] = {0, 5, 13, 25};
    for (size_t i = 0; i < 4; i++) {
        ASSERT(at(&R.log.e[i], lines[i], 1, offs[i]));
        ASSERT_STR_CONTAINS(R.log.e[i].message, "stream 'a': dense sample has");
        ASSERT_STR_CONTAINS(R.log.e[i].message, "of dim=3 values; the rest are zeros");
    }
    ASSERT_STR_CONTAINS(R.log.e[2].message, "has 0 of dim=3");
    run_clear(&R);
}

/* The last sample of an unterminated last line is delivered zero-padded without a warning, and
 * the JSON dump prints only its values (CNTK compatibility). */
TEST(parse_dense_short_at_end_of_file)
{
    static const ctf_stream_def A3[] = {{"a", NULL, 3, false, false}};
    run_text("short_eof.ctf", "|a 1 2 3\n|a 4", A3, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 2);
    ASSERT_EQ(R.log.n, 0);
    ASSERT_EQ(R.stats.warnings, 0);
    ctf_stream_view v = view_of(&R, 1, 0);
    ASSERT(dense_is(&v, (const float[]){4, 0, 0}, 3));
    FILE *f = tmpfile();
    ASSERT(f);
    ASSERT_EQ(ctf_minibatch_print_json(R.mb[1], f, true), 0);
    char buf[256] = "";
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    ASSERT_STR_EQ(buf, "{\"key\": 1, \"line\": 2, \"streams\": {\"a\": [[4]]}}\n");
    run_clear(&R);
    /* Not the last sample of the line: padded with a warning as usual. */
    static const ctf_stream_def AB1[] = {{"a", NULL, 3, false, false}, {"b", NULL, 1, false, false}};
    run_text("short_eof2.ctf", "|a 4 |b 1", AB1, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.log.count[CTF_SEV_WARNING], 1);
    ASSERT(at(&R.log.e[0], 1, 1, 0));
    run_clear(&R);
}

TEST(parse_sparse_duplicate_indices_kept_with_warning)
{
    static const ctf_stream_def B[] = {{"b", NULL, 10, true, false}};
    run_text("dup.ctf", "|b 1:1 3:2 1:3 3:4\n|b\n|b 2:5 0:6\n", B, 1, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 3);
    ctf_stream_view v = view_of(&R, 0, 0);
    /* Kept in file order; one warning per sample. */
    ASSERT(sparse_is(&v, 0, (const int32_t[]){1, 3, 1, 3}, (const float[]){1, 2, 3, 4}, 4));
    v = view_of(&R, 1, 0);
    ASSERT(sparse_is(&v, 0, NULL, NULL, 0)); /* an empty sparse sample is valid */
    v = view_of(&R, 2, 0);
    ASSERT(sparse_is(&v, 0, (const int32_t[]){2, 0}, (const float[]){5, 6}, 2)); /* unsorted ok */
    ASSERT_EQ(R.log.n, 1);
    ASSERT_EQ(R.log.sev[0], CTF_SEV_WARNING);
    ASSERT(at(&R.log.e[0], 1, 12, 11));
    ASSERT_STR_CONTAINS(R.log.e[0].message,
                        "stream 'b': sparse index 1 appears more than once in the sample; all "
                        "entries are kept");
    ASSERT_EQ(R.stats.warnings, 1);
    ASSERT_EQ(R.stats.errors, 0);
    ASSERT_EQ(R.stats.streams[0].nonzeros, 6);
    run_clear(&R);
}

static const char *const number_texts[] = {
    "0.1", "0.2", "0.3", "1", "-1", "3.14159265358979323846", "2.718281828459045",
    "1.00000005960464477539062500000001", "1.000000059604644775390625",
    "9007199254740993", "9007199254740992.5", "123456789.123456789", "1e-40", "1.4e-45",
    "3.4028234663852886e38", "1.17549435e-38", "2.2250738585072011e-308",
    "4.9406564584124654e-324", "1.7976931348623157e308", "0.000001", "1234567890123456789012",
    "45.", "-0", "+0.5", "6.02214076e23", "1.5e-3", "7E-10", "0.30000000000000004",
    "100000000000000000000000000000000000000", "0.9999999999999999999999999999",
};
#define NUM_TEXTS (sizeof number_texts / sizeof *number_texts)

/* Values are correctly rounded to the configured precision: bit-equal to strtof / strtod. */
TEST(parse_precision_float_and_double)
{
    char text[2048] = "|x";
    for (size_t i = 0; i < NUM_TEXTS; i++) {
        strcat(text, i % 2 ? "\t" : " ");
        strcat(text, number_texts[i]);
    }
    strcat(text, "\n");
    static const ctf_stream_def X[] = {{"x", NULL, NUM_TEXTS, false, false}};
    static const ctf_stream_def XS[] = {{"x", NULL, NUM_TEXTS, true, false}};
    for (int dbl = 0; dbl <= 1; dbl++) {
        ctf_config cfg;
        cfg_for(&cfg, test_write_str("prec.ctf", text), X, 1);
        cfg.precision = dbl ? CTF_FLOAT64 : CTF_FLOAT32;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.next_rc, 0);
        ASSERT_EQ(R.nmb, 1);
        ctf_stream_view v = view_of(&R, 0, 0);
        ASSERT_EQ(v.precision, cfg.precision);
        ASSERT_EQ(v.num_samples, 1);
        for (size_t i = 0; i < NUM_TEXTS; i++) {
            if (dbl) {
                double want = strtod(number_texts[i], NULL), got = dval(&v, i);
                if (memcmp(&want, &got, 8)) {
                    fprintf(stderr, "  double '%s': got %.17g want %.17g\n", number_texts[i], got,
                            want);
                    ASSERT(0);
                }
            } else {
                float want = strtof(number_texts[i], NULL), got = fval(&v, i);
                if (memcmp(&want, &got, 4)) {
                    fprintf(stderr, "  float '%s': got %.9g want %.9g\n", number_texts[i],
                            (double)got, (double)want);
                    ASSERT(0);
                }
            }
        }
        run_clear(&R);
    }
    /* Sparse values as well. */
    char stext[2048] = "|x";
    for (size_t i = 0; i < NUM_TEXTS; i++) {
        char e[80];
        snprintf(e, sizeof e, " %zu:%s", i, number_texts[i]);
        strcat(stext, e);
    }
    strcat(stext, "\n");
    for (int dbl = 0; dbl <= 1; dbl++) {
        ctf_config cfg;
        cfg_for(&cfg, test_write_str("precs.ctf", stext), XS, 1);
        cfg.precision = dbl ? CTF_FLOAT64 : CTF_FLOAT32;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.next_rc, 0);
        ctf_stream_view v = view_of(&R, 0, 0);
        ASSERT_EQ(v.nnz, NUM_TEXTS);
        for (size_t i = 0; i < NUM_TEXTS; i++) {
            ASSERT_EQ(v.indices[i], (int32_t)i);
            if (dbl) {
                double want = strtod(number_texts[i], NULL);
                ASSERT(!memcmp(&want, (const double *)v.values + i, 8));
            } else {
                float want = strtof(number_texts[i], NULL);
                ASSERT(!memcmp(&want, (const float *)v.values + i, 4));
            }
        }
        run_clear(&R);
    }
}

/*======================================================================
 * maxErrors, traceLevel, frame mode, counters
 *====================================================================*/

/* Three errors, each in its own sequence (and chunk): maxErrors 3 reads everything, maxErrors
 * 2 stops at the third error with the budget message and its location. */
TEST(parse_max_errors_tolerates_exactly_n)
{
    const char *text = "1 |a 1 2 3 |b 0:1\n1 |a x 2 3 |b 1:1\n"      /* error 1 */
                       "2 |a 1 2 3 |b 0:1\n2 |a 1 2 3 |b 9:1\n"      /* error 2 */
                       "3 |a 1 2 3 |b 0:1\n3 |a 1 2 3 4 |b 1:1\n"    /* error 3 */
                       "4 |a 1 2 3 |b 0:1\n";
    const char *path = NULL;
    char p[512];
    for (uint64_t me = 0; me <= 4; me++) {
        path = test_write_str("maxerr.ctf", text);
        snprintf(p, sizeof p, "%s", path);
        ctf_config cfg;
        cfg_for(&cfg, p, AB, 2);
        cfg.max_errors = me;
        cfg.chunk_size_bytes = 1;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.open_rc, 0);
        const size_t errs = me < 3 ? (size_t)me : 3;
        ASSERT_EQ(R.log.count[CTF_SEV_ERROR], errs); /* the tolerated ones are logged */
        if (me >= 3) {
            ASSERT_EQ(R.next_rc, 0);
            ASSERT_EQ(R.nmb, 4);
            ASSERT_EQ(R.stats.errors, 3);
        } else {
            ASSERT_EQ(R.next_rc, CTF_EPARSE);
            ASSERT_EQ(R.nmb, (size_t)me); /* the sequences before the failing one */
            ASSERT_EQ(R.stats.errors, me + 1);
            const uint64_t lines[] = {2, 4, 6};
            const uint64_t cols[] = {6, 15, 12};
            const int64_t offs[] = {18 + 5, 54 + 14, 90 + 11};
            ASSERT(at(&R.next_err, lines[me], cols[me], offs[me]));
            char want[700];
            snprintf(want, sizeof want,
                     "; reached the maximum number of allowed errors (%llu) reading %s",
                     (unsigned long long)me, p);
            ASSERT_STR_CONTAINS(R.next_err.message, want);
        }
        run_clear(&R);
    }
}

/* Errors are counted once per chunk over the reader's life, not again in later sweeps. */
TEST(parse_errors_counted_once_per_chunk)
{
    const char *text = "1 |a 1 2 3 |b 0:1\n1 |a x 2 3 |b 1:1\n2 |a 1 2 |b 0:1\n";
    ctf_config cfg;
    cfg_for(&cfg, test_write_str("once.ctf", text), AB, 2);
    cfg.max_errors = 1;
    cfg.max_sweeps = 3;
    cfg.keep_data_in_memory = false;
    cfg.chunk_size_bytes = 1;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 6);
    ASSERT_EQ(R.stats.errors, 1);
    ASSERT_EQ(R.stats.warnings, 1);
    ASSERT_EQ(R.log.count[CTF_SEV_ERROR], 1);
    ASSERT_EQ(R.log.count[CTF_SEV_WARNING], 1);
    ASSERT_EQ(R.stats.streams[0].dropped_samples, 1);
    run_clear(&R);
}

TEST(parse_trace_level_filtering)
{
    /* One tolerated error, one warning (zero fill), one info (unknown input). */
    const char *text = "1 |a 1 2 3 |b 0:1\n1 |a 1 x 3 |b 1:1\n2 |a 1 |b 0:1 |zz 1\n";
    size_t want_e[3] = {1, 1, 1}, want_w[3] = {0, 1, 1}, want_i[3] = {0, 0, 2};
    for (int tl = 0; tl <= 2; tl++) {
        ctf_config cfg;
        cfg_for(&cfg, test_write_str("trace.ctf", text), AB, 2);
        cfg.max_errors = 1;
        cfg.trace_level = tl;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.next_rc, 0);
        ASSERT_EQ(R.nmb, 2);
        ASSERT_EQ(R.log.count[CTF_SEV_ERROR], want_e[tl]);
        ASSERT_EQ(R.log.count[CTF_SEV_WARNING], want_w[tl]);
        /* At level 2: the unknown input and the index summary. */
        ASSERT_EQ(R.log.count[CTF_SEV_INFO], want_i[tl]);
        /* Counters do not depend on the level. */
        ASSERT_EQ(R.stats.errors, 1);
        ASSERT_EQ(R.stats.warnings, 1);
        /* File order. */
        if (tl == 2) {
            ASSERT_EQ(R.log.sev[0], CTF_SEV_INFO);
            ASSERT_STR_CONTAINS(R.log.e[0].message, "indexed 2 sequences");
            ASSERT_EQ(R.log.sev[1], CTF_SEV_ERROR);
            ASSERT(at(&R.log.e[1], 2, 8, 25));
            ASSERT_EQ(R.log.sev[2], CTF_SEV_WARNING);
            ASSERT(at(&R.log.e[2], 3, 3, 38));
            ASSERT_EQ(R.log.sev[3], CTF_SEV_INFO);
            ASSERT(at(&R.log.e[3], 3, 15, 50));
        }
        run_clear(&R);
    }
    /* Dying at traceLevel 0 with suppressed warnings says so. */
    ctf_config cfg;
    cfg_for(&cfg, test_write_str("trace0.ctf", "|a 1 |b 0:1\n|a 1 2 3 |b 1:1 9\n"), AB, 2);
    cfg.trace_level = 0;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    ASSERT_EQ(R.log.n, 0);
    ASSERT_STR_CONTAINS(R.next_err.message,
                        "(1 warnings were not shown: set traceLevel = 1 to see them)");
    run_clear(&R);
}

TEST(parse_frame_mode_multi_sample_sequence)
{
    const char *text = "1 |a 1 2 3 |b 0:1\n2 |a 1 2 3 |b 0:1\n2 |a 4 5 6\n3 |a 1 2 3 |b 0:1\n";
    ctf_config cfg;
    cfg_for(&cfg, test_write_str("frame.ctf", text), AB, 2);
    cfg.frame_mode = true;
    cfg.max_errors = 1;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 2); /* sequence 2 is dropped as a whole */
    ASSERT_EQ(R.empty_mb, 1); /* (its minibatch is empty: positions still count it) */
    ASSERT_EQ(key_of(&R, 0), 1);
    ASSERT_EQ(key_of(&R, 1), 3);
    ASSERT_EQ(R.log.count[CTF_SEV_ERROR], 1);
    ASSERT(at(&R.log.e[0], 2, 1, 18));
    ASSERT_STR_CONTAINS(R.log.e[0].message,
                        "frame mode: sequence 2 has 2 samples in stream 'feat' (must be exactly "
                        "1); sequence dropped");
    ASSERT_EQ(R.stats.dropped_sequences, 1);
    ASSERT_EQ(R.stats.sequences, 2);
    ASSERT_EQ(R.stats.streams[0].dropped_samples, 2);
    ASSERT_EQ(R.stats.streams[1].dropped_samples, 1);
    run_clear(&R);
    cfg.max_errors = 0;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, CTF_EPARSE);
    ASSERT(at(&R.next_err, 2, 1, 18));
    run_clear(&R);
    /* One-sample sequences are fine in frame mode. */
    cfg_for(&cfg, test_write_str("frame2.ctf", "|a 1 2 3 |b 0:1\n|a 1 2 3 |b 0:1\n"), AB, 2);
    cfg.frame_mode = true;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 2);
    run_clear(&R);
}

TEST(parse_dropped_counters)
{
    const char *text = "1 |a 1 2 3 |b 0:1\n"
                       "1 |a 1 2 x |b 1:1\n"       /* dense sample dropped */
                       "1 |a 1 2 3 |b 7:1\n"       /* sparse sample dropped */
                       "\n"                        /* empty row */
                       "1 |a 1 2 3 |b 1:1 |b 2:2\n" /* second b dropped */
                       "1 |a 1 x 3\n"              /* row with only an error: no extra error */
                       "2 |a 1 2 3 |b 0:1 |zz 3\n";
    ctf_config cfg;
    cfg_for(&cfg, test_write_str("drop.ctf", text), AB, 2);
    cfg.max_errors = 100;
    run_cfg(&cfg, &R);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 2);
    /* Five row errors, and sequence 1 has 4 rows with data but 3 samples per stream. */
    ASSERT_EQ(R.stats.errors, 6);
    ASSERT_EQ(R.log.count[CTF_SEV_ERROR], 6);
    ASSERT_STR_CONTAINS(R.log.e[5].message,
                        "sequence 1 has 4 rows with data but its longest stream has only 3");
    ASSERT_EQ(R.stats.dropped_rows, 2);
    ASSERT_EQ(R.stats.dropped_sequences, 0);
    ASSERT_EQ(R.stats.streams[0].dropped_samples, 2);
    ASSERT_EQ(R.stats.streams[1].dropped_samples, 2);
    ASSERT_EQ(R.stats.sequences, 2);
    ASSERT_EQ(R.stats.streams[0].samples, 4);
    ASSERT_EQ(R.stats.streams[1].samples, 4);
    ASSERT_EQ(R.stats.streams[1].nonzeros, 4);
    ASSERT_EQ(R.stats.streams[0].nonzeros, 12);
    ASSERT_EQ(view_of(&R, 0, 0).num_samples, 3);
    ASSERT_EQ(view_of(&R, 0, 1).num_samples, 3);
    /* The log is in file order. */
    const uint64_t lines[] = {2, 3, 4, 5, 6, 1};
    for (size_t i = 0; i < 6; i++) ASSERT_U64_EQ(R.log.e[i].line, lines[i]);
    run_clear(&R);
}

/* Problems are reported in file order whatever the number of parse threads and prefetch. */
TEST(parse_log_order_independent_of_threads)
{
    char text[8192] = "";
    for (int i = 0; i < 60; i++) {
        char line[80];
        snprintf(line, sizeof line, "%d |a 1 2 3 |b 0:1\n%d |a %s 2 |b 1:1\n", i, i,
                 i % 3 ? "1" : "x");
        strcat(text, line);
    }
    const char *path = test_write_str("order.ctf", text);
    char p[512];
    snprintf(p, sizeof p, "%s", path);
    uint64_t first_lines[MAX_LOG];
    size_t first_n = 0;
    for (size_t threads = 0; threads <= 4; threads += 2) {
        ctf_config cfg;
        cfg_for(&cfg, p, AB, 2);
        cfg.max_errors = 1000;
        cfg.chunk_size_bytes = 64;
        cfg.num_threads = threads;
        cfg.prefetch_chunks = threads ? 8 : 1;
        run_cfg(&cfg, &R);
        ASSERT_EQ(R.next_rc, 0);
        ASSERT_EQ(R.nmb, 60);
        ASSERT_EQ(R.stats.errors, 20);
        ASSERT_EQ(R.stats.warnings, 40);
        for (size_t i = 1; i < R.log.n; i++) ASSERT(R.log.e[i].offset > R.log.e[i - 1].offset);
        if (threads == 0) {
            first_n = R.log.n;
            for (size_t i = 0; i < R.log.n; i++) first_lines[i] = R.log.e[i].line;
        } else {
            ASSERT_EQ(R.log.n, first_n);
            for (size_t i = 0; i < R.log.n; i++) ASSERT_U64_EQ(R.log.e[i].line, first_lines[i]);
        }
        run_clear(&R);
    }
}

/*======================================================================
 * Robustness: every truncation of valid lines
 *====================================================================*/

/* Every prefix of a valid file, as a whole file, either parses or fails cleanly with a
 * located CTF_EPARSE (never a crash, never an unlocated data error). */
static bool truncations_clean(const char *name, const char *text, const ctf_stream_def *s,
                              size_t ns, uint64_t max_lines)
{
    const size_t len = strlen(text);
    bool ok = true;
    char p[512];
    for (size_t cut = 0; cut <= len; cut++) {
        snprintf(p, sizeof p, "%s", test_write_file(name, text, cut));
        for (uint64_t me = 0; me <= 50; me += 50) {
            for (int prec = 0; prec <= 1; prec++) {
                ctf_config cfg;
                cfg_for(&cfg, p, s, ns);
                cfg.max_errors = me;
                cfg.precision = prec ? CTF_FLOAT64 : CTF_FLOAT32;
                cfg.trace_level = 2;
                run_cfg(&cfg, &R);
                const ctf_error *e = R.open_rc ? &R.open_err : &R.next_err;
                int rc = R.open_rc ? R.open_rc : R.next_rc;
                bool blank = true;
                size_t from = cut >= 3 && !memcmp(text, "\xef\xbb\xbf", 3) ? 3 : 0;
                for (size_t i = from; i < cut; i++)
                    if (!strchr(" \t\r\n", text[i])) blank = false;
                bool good;
                if (rc == 0) {
                    /* A broken last sample can drop its (only) sequence: counted, not lost. */
                    good = (R.nmb >= 1 || R.stats.dropped_sequences > 0) && !blank;
                } else if (blank || strstr(e->message, "no line holds any")) {
                    /* File-level fatal errors name the file only. */
                    good = rc == CTF_EPARSE && e->line == 0 && strcmp(e->path, p) == 0;
                } else {
                    good = rc == CTF_EPARSE && e->line >= 1 && e->line <= max_lines &&
                           e->column >= 1 && e->offset >= 0 && (size_t)e->offset <= cut &&
                           strcmp(e->path, p) == 0 && e->message[0];
                }
                for (size_t i = 0; i < R.log.n; i++) {
                    const ctf_error *l = &R.log.e[i];
                    if (l->line && (l->offset < 0 || (size_t)l->offset > cut || !l->column))
                        good = false;
                }
                if (!good) {
                    fprintf(stderr, "  prefix %zu of '%s' (maxErrors %llu): rc %d, %zu mbs, "
                            "%llu:%llu (byte %lld) %s\n",
                            cut, name, (unsigned long long)me, rc, R.nmb,
                            (unsigned long long)e->line, (unsigned long long)e->column,
                            (long long)e->offset, e->message);
                    ok = false;
                }
                run_clear(&R);
            }
        }
    }
    return ok;
}

TEST(parse_every_truncation_of_a_valid_line)
{
    static const ctf_stream_def S[] = {
        {"A", "a", 3, false, false}, {"B", "bb", 8, true, false}, {"C", "c", 2, false, false}};
    ASSERT(truncations_clean(
        "trunc1.ctf", "12 |a 1.5 -2e-3 45. |# c |# |bb 0:1 7:2.5e+1 |zz 9\t|c 3 +4\r\n", S, 3, 1));
    ASSERT(truncations_clean("trunc2.ctf",
                             "|bb 3:1e-7 |a 0.5 1 2\t|c -1 -2 |#x\n|c 1 2 |a 3 4 5 |bb\n", S, 3,
                             2));
    ASSERT(truncations_clean("trunc3.ctf",
                             "\xef\xbb\xbf" "7 |a 1 2 3 |bb 1:1 |c 1 2\n7 |a 4 5 6\n8 |a 1 2 3 |bb "
                             "2:2 |c 3 4\n",
                             S, 3, 3));
}

/*======================================================================
 * More of SPEC 1.2 and 2.4
 *====================================================================*/

/* Any control byte other than '\n' separates values and ends names, like a blank. */
TEST(parse_control_bytes_are_delimiters)
{
    run_text("ctl.ctf", "|a\x01" "1\x02" "2\x1f" "3\x7f|b\x0b" "0:1\x0c" "4:2\n", AB, 2, 0);
    ASSERT_EQ(R.next_rc, 0);
    ASSERT_EQ(R.nmb, 1);
    ASSERT_EQ(R.log.n, 0);
    ctf_stream_view v = view_of(&R, 0, 0);
    ASSERT(dense_is(&v, (const float[]){1, 2, 3}, 3));
    v = view_of(&R, 0, 1);
    ASSERT(sparse_is(&v, 0, (const int32_t[]){0, 4}, (const float[]){1, 2}, 2));
    run_clear(&R);
}

/* A file that changes on disk under an open reader is fatal (CTF_ECHANGED), never misread. */
TEST(parse_file_changed_since_indexed_is_fatal)
{
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    char p[512];
    snprintf(p, sizeof p, "%s", test_write_str("changed.ctf", "1 |a 1\n2 |a 2\n3 |a 3\n"));
    for (int grow = 0; grow <= 1; grow++) {
        FILE *f = fopen(p, "wb");
        ASSERT(f);
        fputs("1 |a 1\n2 |a 2\n3 |a 3\n", f);
        fclose(f);
        ctf_config cfg;
        cfg_for(&cfg, p, A1, 1);
        cfg.chunk_size_bytes = 1;
        cfg.num_threads = 0;
        cfg.prefetch_chunks = 0;
        ctf_error err;
        ctf_reader *r;
        ASSERT_OK(ctf_reader_open(&cfg, &r, &err), &err);
        ctf_minibatch *mb = NULL;
        ASSERT_OK(ctf_reader_next(r, 1, &mb), ctf_reader_error(r));
        ASSERT(mb);
        ctf_minibatch_free(mb);
        /* Same size with a new mtime, or a different size. */
        f = fopen(p, "r+b");
        ASSERT(f);
        fputs(grow ? "1 |a 1\n2 |a 9\n3 |a 3\n4 |a 4\n" : "1 |a 1\n2 |a 9\n", f);
        fclose(f);
        struct timespec ts[2] = {{1600000000, 1}, {1600000000, 1}};
        utimensat(AT_FDCWD, p, ts, 0);
        int rc = ctf_reader_next(r, 1, &mb);
        if (rc != CTF_ECHANGED) {
            ctf_minibatch_free(mb);
            ctf_reader_free(r);
            ASSERT_EQ(rc, CTF_ECHANGED);
        }
        ASSERT(mb == NULL);
        ASSERT_STR_EQ(ctf_reader_error(r)->path, p);
        ASSERT_EQ(ctf_reader_next(r, 1, &mb), CTF_ECHANGED); /* and it stays dead */
        ctf_reader_free(r);
    }
}
