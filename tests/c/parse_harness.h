/*
 * parse_harness.h -- the harness shared by test_parse.c and test_parse_format.c: run a reader
 * over a file in file order, keep every minibatch it delivered and every record that reached the
 * log callback, and compare locations and values. Functions are static inline so that each test
 * file uses what it needs without unused-function warnings.
 */
#ifndef CTF_PARSE_HARNESS_H
#define CTF_PARSE_HARNESS_H

#include "reader/pipeline.h"
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

static inline void log_cb(void *user, ctf_severity sev, const ctf_error *e)
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

static inline void run_clear(run *r)
{
    for (size_t i = 0; i < r->nmb; i++) ctf_minibatch_free(r->mb[i]);
    memset(r, 0, sizeof *r);
}

/* A configuration reading file `path` once, in file order, with the given streams. */
static inline void cfg_for(ctf_config *cfg, const char *path, const ctf_stream_def *s, size_t n)
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
static inline void run_mb(ctf_config *cfg, run *r, uint64_t mb_size)
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
static inline void run_cfg(ctf_config *cfg, run *r) { run_mb(cfg, r, 1); }

/* Writes text to `name` and runs it with default settings and max_errors. */
static inline const char *run_text(const char *name, const char *text, const ctf_stream_def *s,
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

/* run_text with float32 (dbl false) or float64 values. */
static inline void run_text_prec(const char *name, const char *text, const ctf_stream_def *s,
                                 size_t ns, bool dbl)
{
    ctf_config cfg;
    cfg_for(&cfg, test_write_str(name, text), s, ns);
    cfg.precision = dbl ? CTF_FLOAT64 : CTF_FLOAT32;
    run_cfg(&cfg, &R);
}

static inline ctf_stream_view view_of(const run *r, size_t mb, size_t k)
{
    ctf_stream_view v;
    memset(&v, 0, sizeof v);
    if (mb < r->nmb) ctf_minibatch_stream(r->mb[mb], k, &v);
    return v;
}

static inline uint64_t key_of(const run *r, size_t mb)
{
    return mb < r->nmb && ctf_minibatch_num_sequences(r->mb[mb]) ? ctf_minibatch_keys(r->mb[mb])[0]
                                                                 : UINT64_MAX;
}

static inline uint64_t line_of(const run *r, size_t mb)
{
    return mb < r->nmb && ctf_minibatch_num_sequences(r->mb[mb]) ? ctf_minibatch_lines(r->mb[mb])[0]
                                                                 : UINT64_MAX;
}

/* Float value i of a dense float view. */
static inline float fval(const ctf_stream_view *v, size_t i)
{
    return ((const float *)v->values)[i];
}
static inline double dval(const ctf_stream_view *v, size_t i)
{
    return ((const double *)v->values)[i];
}

/* Compares a dense float view with want[0..n) (n = num_samples * dim). */
static inline bool dense_is(const ctf_stream_view *v, const float *want, size_t n)
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
static inline bool sparse_is(const ctf_stream_view *v, size_t s, const int32_t *idx,
                             const float *val, size_t n)
{
    if (!v->is_sparse || s >= v->num_samples) return false;
    int64_t b = v->indptr[s], e = v->indptr[s + 1];
    if ((size_t)(e - b) != n) {
        fprintf(stderr, "  sparse sample %zu has %lld entries, want %zu\n", s, (long long)(e - b),
                n);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if (v->indices[b + (int64_t)i] != idx[i] ||
            ((const float *)v->values)[b + (int64_t)i] != val[i]) {
            fprintf(stderr, "  sparse entry %zu is %d:%g, want %d:%g\n", i,
                    v->indices[b + (int64_t)i], ((const float *)v->values)[b + (int64_t)i], idx[i],
                    val[i]);
            return false;
        }
    return true;
}

static inline bool at(const ctf_error *e, uint64_t line, uint64_t col, int64_t off)
{
    if (e->line == line && e->column == col && e->offset == off) return true;
    fprintf(stderr, "  location %llu:%llu (byte %lld), want %llu:%llu (byte %lld): %s\n",
            (unsigned long long)e->line, (unsigned long long)e->column, (long long)e->offset,
            (unsigned long long)line, (unsigned long long)col, (long long)off, e->message);
    return false;
}

static inline void dump_log(const logbuf *l)
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


#endif
