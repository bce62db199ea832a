/*
 * parse.c -- the parsing stage: the bytes of one chunk (whole sequences, located by the index)
 * become typed sample buffers, one per stream, with per-sequence slices (rules 1 and 2).
 *
 * In:  a chunk's bytes, the index (sequence offsets, first lines), the stream definitions.
 * Out: a ctf__chunk_data: per stream a growing buffer of values (dense: dim values per sample,
 *      sparse: CSR), per (sequence, stream) the slice of samples it owns, and the problems found.
 *
 * Values are converted straight into the stream buffers: no allocation per value. A sample in
 * error is rolled back by resetting the buffer lengths, so a dropped sample costs nothing.
 *
 * Problems are not reported here. They are recorded, in file order, with their exact location
 * (line, column, byte offset), and the reader reports and counts them when the consumer reaches
 * the chunk. That keeps the maxErrors budget and the log identical whatever thread parsed the
 * chunk and however far ahead (rules 10: threads never change what is delivered).
 *
 * Rules that are easy to get wrong (docs/format.md has the full list):
 *  - in id mode every physical line of a sequence is a row; a row that yields no sample costs
 *    one error unless the row already had one (no double counting), and is counted as dropped;
 *  - in line mode only a sequence's first line is parsed: the index put the lines that hold no
 *    configured input (blank, comment-only, unknown inputs only) after it;
 *  - a stream absent from a whole sequence is fatal (CNTK: "Malformed input file").
 */
#include "format/format.h"
#include "number_fast.h"
#include "tokenize.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/*======================================================================
 * Problem recording
 *====================================================================*/

typedef struct pstate {
    const ctf__parse_cfg *pc;
    const ctf_index *idx;
    const ctf__seq *seqs;     /* the chunk's sequence records */
    size_t hi;                /* the sequences being parsed end before seqs[hi], */
    uint64_t range_end;       /* at this file offset */
    ctf__chunk_data *cd;
    const char *buf;          /* the bytes at hand: the chunk's, or a block of them */
    const char *limit; /* end of the bytes at hand: how far the number fast path may read */
    uint64_t base; /* file offset of buf[0] */
    const char *line_start; /* current line, for columns */
    uint64_t line_no; /* 0-based current line */
    uint64_t max_errors; /* stop after max_errors + 1 errors */
    size_t *alias_len; /* per stream */
    const char **alias; /* per stream */
    uint32_t row_errors; /* errors in the current row */
    bool row_unterminated; /* the current row is the file's last line, without a newline */
    int oom; /* an allocation failed */
#if CTF_TOKENIZE
    const struct value_fns *fns; /* the hot loops' variant (value_fns_get) */
    const char *resume; /* a dense value out of range was stored: go on from here, */
    size_t resume_n; /* with this many values (dense_value_refused) */
#endif
} pstate;

static ctf__where where_at(const pstate *ps, const char *p)
{
    return (ctf__where){ps->pc->path, ps->line_no + 1, (uint64_t)(p - ps->line_start) + 1,
                        (int64_t)(ps->base + (uint64_t)(p - ps->buf))};
}

static void add_problem(pstate *ps, ctf_severity sev, int code, ctf__where w, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void add_problem(pstate *ps, ctf_severity sev, int code, ctf__where w, const char *fmt, ...)
{
    ctf__chunk_data *cd = ps->cd;
    if (sev == CTF_SEV_ERROR) {
        cd->num_errors++;
        ps->row_errors++;
    } else if (sev == CTF_SEV_WARNING) {
        cd->num_warnings++;
        /* Warnings beyond the cap are counted, not stored: a file with a short sample on every
         * line must not grow an unbounded list. */
        if (cd->num_warnings > CTF__MAX_STORED_WARNINGS) return;
    } else {
        if (ps->pc->trace_level < 2 || ++cd->num_infos > CTF__MAX_STORED_WARNINGS) return;
    }
    if (cd->num_problems == cd->problems_cap &&
        ctf__grow((void **)&cd->problems, &cd->problems_cap, cd->num_problems + 1,
                  sizeof *cd->problems)) {
        ps->oom = 1;
        return;
    }
    ctf__problem *pr = &cd->problems[cd->num_problems++];
    pr->sev = sev;
    va_list ap;
    va_start(ap, fmt);
    ctf__vfail(&pr->err, code, w, fmt, ap);
    va_end(ap);
}

static bool too_many_errors(const pstate *ps)
{
    return ps->cd->num_errors > ps->max_errors || ps->cd->fatal || ps->oom;
}

/* A short printable excerpt of what was found at p, for messages. */
static void excerpt(const char *p, const char *end, char *out, size_t cap)
{
    size_t n = 0;
    while (p < end && n + 5 < cap && n < 24) {
        unsigned char c = (unsigned char)*p;
        if (c == '\r' || c == '\n') break;
        if (c < 32 || c >= 127) {
            n += (size_t)snprintf(out + n, cap - n, "\\x%02x", c);
        } else {
            out[n++] = (char)c;
        }
        p++;
    }
    out[n] = 0;
    if (n == 0) snprintf(out, cap, "end of line");
}

/*======================================================================
 * Lexical helpers
 *====================================================================*/

/* Between values and samples: spaces, tabs and any other control byte but '\n'. */
static inline bool is_delim(unsigned char c)
{
    return c == ' ' || c == '\t' || (c < 32 && c != '\n') || c == 127;
}
static inline bool ends_value(unsigned char c) { return is_delim(c) || c == '|'; }

static const char *skip_delims(const char *p, const char *end)
{
    while (p < end && is_delim((unsigned char)*p)) p++;
    return p;
}

static const char *next_bar(const char *p, const char *end)
{
    const char *q = memchr(p, '|', (size_t)(end - p));
    return q ? q : end;
}

/*======================================================================
 * Samples
 *====================================================================*/

static int ensure_values(ctf__stream_data *sd, size_t need, size_t elt)
{
    return ctf__grow(&sd->values, &sd->values_cap, need, elt);
}

/* A dense sample's value that is not a number: recorded at its first byte. */
static void bad_dense_value(pstate *ps, const ctf_stream_def *def, size_t n, const char *p,
                            const char *end)
{
    char ex[64];
    const char *stop = p;
    while (stop < end && !ends_value((unsigned char)*stop)) stop++;
    excerpt(p, stop, ex, sizeof ex);
    add_problem(ps, CTF_SEV_ERROR, CTF_EPARSE, where_at(ps, p),
                "stream '%s': expected a number (value %zu of the dense sample), found '%s'",
                def->name, n + 1, ex);
}

static void too_many_values(pstate *ps, const ctf_stream_def *def, const char *p)
{
    add_problem(ps, CTF_SEV_ERROR, CTF_EPARSE, where_at(ps, p),
                "stream '%s': dense sample has more than dim=%zu values; sample dropped", def->name,
                def->dim);
}

/* A number beyond the range of the configured precision (1e39 as float32, 1e309 as float64):
 * its correctly rounded value is an infinity, which is kept, but never silently (rules 1.6
 * [ctfio]). [p, q) is the number. Only the full converter gets here: the fast paths take at
 * most 8 digits and no exponent. */
static void out_of_range(pstate *ps, const ctf_stream_def *def, const char *p, const char *q,
                         size_t elt, bool negative)
{
    char ex[64];
    excerpt(p, q, ex, sizeof ex);
    add_problem(ps, CTF_SEV_WARNING, CTF_OK, where_at(ps, p),
                "stream '%s': %s is beyond the range of %s; the value is %sinf", def->name, ex,
                elt == 4 ? "float32" : "float64", negative ? "-" : "");
}

/* The value at p by the reference converter, stored at dst; NULL when it is not a number (not
 * recorded: the caller says what it expected). An infinity is kept with out_of_range's warning.
 * @return : past the number. */
static const char *convert_value(pstate *ps, const ctf_stream_def *def, char *dst, const char *p,
                                 const char *end, size_t elt)
{
    const char *q;
    bool inf;
    if (elt == 4) {
        float v;
        q = ctf__fast_float(p, end, ps->limit, &v);
        inf = q && isinf(v);
        if (q) memcpy(dst, &v, 4);
    } else {
        double v;
        q = ctf__fast_double(p, end, ps->limit, &v);
        inf = q && isinf(v);
        if (q) memcpy(dst, &v, 8);
    }
    if (!q || (q < end && !ends_value((unsigned char)*q))) return NULL;
    if (inf) out_of_range(ps, def, p, q, elt, *p == '-');
    return q;
}

#if CTF_TOKENIZE
/* Value n + 1 of a dense sample, at p, that the tokenized converter refused: not a number (an
 * error), or a number out of range, which the reference converter stores at dst[n] with its
 * warning. The hot loop stops either way (going on after a call would cost it registers on
 * every value); after a stored value ps->resume says where parse_dense restarts it. */
static __attribute__((noinline)) void dense_value_refused(pstate *ps, const ctf_stream_def *def,
                                                          char *dst, size_t n, const char *p,
                                                          const char *end, size_t elt)
{
    const char *q = convert_value(ps, def, dst + n * elt, p, end, elt);
    if (!q) {
        bad_dense_value(ps, def, n, p, end);
    } else if (n + 1 > def->dim) {
        too_many_values(ps, def, p);
    } else {
        ps->resume = q;
        ps->resume_n = n + 1;
    }
}
#endif

/* The end of a dense sample of n values at p (the sample's '|' or the row's end). */
static const char *finish_dense(pstate *ps, const ctf_stream_def *def, ctf__stream_data *sd,
                                char *dst, size_t n, const char *p, const char *end,
                                const char *name_at)
{
    const size_t elt = (size_t)ps->pc->precision;
    const size_t dim = def->dim;
    size_t stored = dim; /* values kept for the sample */
    if (n < dim && !(p == end && ps->row_unterminated) && !sd->dense_off) {
        /* The first short sample: from here on each sample keeps only its values, so that
         * short rows of a large dim cannot make the chunk rows * dim values. */
        if (ctf__grow((void **)&sd->dense_off, &sd->dense_off_cap, sd->samples + 2,
                      sizeof *sd->dense_off)) {
            ps->oom = 1;
            return NULL;
        }
        for (size_t i = 0; i <= sd->samples; i++) sd->dense_off[i] = i * dim;
    }
    if (sd->dense_off && ctf__grow((void **)&sd->dense_off, &sd->dense_off_cap, sd->samples + 2,
                                   sizeof *sd->dense_off)) {
        ps->oom = 1;
        return NULL;
    }
    if (n < dim && p == end && ps->row_unterminated) {
        /* CNTK pads a short dense sample only when a delimiter ends it; one that runs into the
         * end of the file is delivered short. The arrays stay (n, dim) with zero padding; the
         * JSON dump prints the values CNTK delivers (docs/format.md, conformance corpus). */
        memset(dst + n * elt, 0, (dim - n) * elt);
        sd->short_sample = (int64_t)sd->samples;
        sd->short_count = (uint32_t)n;
    } else if (n < dim) {
        stored = n; /* the zeros are added when the sample is delivered */
        add_problem(ps, CTF_SEV_WARNING, CTF_OK, where_at(ps, name_at),
                    "stream '%s': dense sample has %zu of dim=%zu values; the rest are zeros",
                    def->name, n, dim);
    }
    if (sd->dense_off) sd->dense_off[sd->samples + 1] = sd->dense_off[sd->samples] + stored;
    sd->samples++;
    return p;
}

#if !CTF_TOKENIZE
/* The byte loop (no SSE2): the values one after another, each starting where the previous
 * conversion ended. Same contract as parse_values.h's dense_values. */
static const char *dense_values(pstate *ps, const ctf_stream_def *def, char *dst, size_t *np,
                                const char *p, const char *end, size_t elt)
{
    const size_t dim = def->dim;
    size_t n = 0;
    for (;;) {
        p = skip_delims(p, end);
        if (p == end || *p == '|') break;
        /* The buffer has one slot of slack past dim (the sample's n + 1-th value is stored
         * before it is counted, as in parse_values.h). */
        const char *q = convert_value(ps, def, dst + n * elt, p, end, elt);
        if (!q) {
            bad_dense_value(ps, def, n, p, end);
            return NULL;
        }
        if (++n > dim) {
            too_many_values(ps, def, p);
            return NULL;
        }
        p = q;
    }
    *np = n;
    return p;
}
#endif

/* The state of one sparse sample while its entries are parsed. */
typedef struct sparse_run {
    const ctf_stream_def *def;
    ctf__stream_data *sd;
    size_t nnz0; /* the sample's first entry */
    int64_t last; /* largest index so far (-1: none) */
    bool dup_warned; /* a repeated index was reported */
} sparse_run;

/* Stores entry (index, value) of the sample; warns once about a repeated index. @return : false
 * when memory ran out (ps->oom is set). */
static inline __attribute__((always_inline)) bool sparse_store(pstate *ps, sparse_run *sr,
                                                               uint64_t index, float f, double d,
                                                               size_t elt, const char *entry)
{
    ctf__stream_data *sd = sr->sd;
    /* The capacity tests are inlined: ctf__grow is out of line, and calling it twice per entry
     * cost more than the entry's index. */
    if ((sd->nnz >= sd->values_cap && ctf__grow(&sd->values, &sd->values_cap, sd->nnz + 1, elt)) ||
        (sd->nnz >= sd->indices_cap &&
         ctf__grow((void **)&sd->indices, &sd->indices_cap, sd->nnz + 1, sizeof *sd->indices))) {
        ps->oom = 1;
        return false;
    }
    if ((int64_t)index <= sr->last && !sr->dup_warned) {
        for (size_t k = sr->nnz0; k < sd->nnz; k++)
            if ((uint64_t)sd->indices[k] == index) {
                sr->dup_warned = true;
                add_problem(ps, CTF_SEV_WARNING, CTF_OK, where_at(ps, entry),
                            "stream '%s': sparse index %llu appears more than once in the "
                            "sample; all entries are kept",
                            sr->def->name, (unsigned long long)index);
                break;
            }
    }
    if ((int64_t)index > sr->last) sr->last = (int64_t)index;
    /* Typed stores (not memcpy through char *): they cannot alias sd's fields, so nnz and the
     * buffer pointers stay in registers from one entry to the next. */
    if (elt == 4)
        ((float *)sd->values)[sd->nnz] = f;
    else
        ((double *)sd->values)[sd->nnz] = d;
    sd->indices[sd->nnz++] = (int32_t)index;
    return true;
}

/* One sparse entry "index:value" at p (not a delimiter, not '|'), byte by byte: the reference
 * for every entry and error. @return : past the entry, or NULL after recording an error (or
 * running out of memory: ps->oom). */
static const char *sparse_entry(pstate *ps, sparse_run *sr, const char *p, const char *end)
{
    const ctf_stream_def *def = sr->def;
    const size_t elt = (size_t)ps->pc->precision;
    const char *entry = p;
    if (*p < '0' || *p > '9') {
        char ex[64];
        excerpt(p, end, ex, sizeof ex);
        add_problem(ps, CTF_SEV_ERROR, CTF_EPARSE, where_at(ps, p),
                    "stream '%s': expected a sparse index (an unsigned integer before ':'), "
                    "found '%s'%s",
                    def->name, ex, *p == '-' ? " (indices cannot be negative)" : "");
        return NULL;
    }
    uint64_t index = 0;
    unsigned dg;
    while (p < end && (dg = (unsigned)(unsigned char)*p - '0') < 10) {
        if (index <= UINT32_MAX) index = index * 10 + dg;
        p++;
    }
    /* Messages quote the index as written (its value stops growing past 2^32, and a number
     * cut short in a message would name another index). */
    const int ndig = (int)CTF_MIN((size_t)(p - entry), (size_t)64);
    const char *more = (size_t)(p - entry) > 64 ? "..." : "";
    if (p == end || *p != ':') {
        char ex[64];
        excerpt(p, end, ex, sizeof ex);
        add_problem(ps, CTF_SEV_ERROR, CTF_EPARSE, where_at(ps, p),
                    "stream '%s': expected ':' directly after sparse index %.*s%s, found '%s'",
                    def->name, ndig, entry, more, ex);
        return NULL;
    }
    p++;
    if (index >= def->dim) {
        add_problem(ps, CTF_SEV_ERROR, CTF_EPARSE, where_at(ps, entry),
                    "stream '%s': sparse index %.*s%s is out of range (dim=%zu)", def->name, ndig,
                    entry, more, def->dim);
        return NULL;
    }
    union {
        float f;
        double d;
    } v;
    const char *q = convert_value(ps, def, (char *)&v, p, end, elt);
    if (!q) {
        char ex[64];
        const char *stop = p;
        while (stop < end && !ends_value((unsigned char)*stop)) stop++;
        /* A blank right after ':' is what was found, not the end of the line. */
        if (stop == p) stop = skip_delims(p, end);
        while (stop < end && !ends_value((unsigned char)*stop)) stop++;
        excerpt(p, stop, ex, sizeof ex);
        add_problem(ps, CTF_SEV_ERROR, CTF_EPARSE, where_at(ps, p),
                    "stream '%s': expected a number directly after '%.*s%s:', found '%s'",
                    def->name, ndig, entry, more, ex);
        return NULL;
    }
    if (!sparse_store(ps, sr, index, elt == 4 ? v.f : 0.0f, elt == 4 ? 0.0 : v.d, elt, entry))
        return NULL;
    return q;
}

#if CTF_TOKENIZE
/* The hot state of a sparse sample in locals (registers, once inlined): the buffers, their room
 * and the count are written back to the stream only around the rare out-of-line paths. */
typedef struct sparse_hot {
    char *values;
    int32_t *indices;
    size_t nnz, cap; /* cap: room in both buffers */
    int64_t last;
} sparse_hot;

static inline __attribute__((always_inline)) void hot_load(sparse_hot *h, const sparse_run *sr)
{
    const ctf__stream_data *sd = sr->sd;
    h->values = sd->values;
    h->indices = sd->indices;
    h->nnz = sd->nnz;
    h->cap = CTF_MIN(sd->values_cap, sd->indices_cap);
    h->last = sr->last;
}

/* The hot loops, once per instruction-set variant (parse_values.h), and the choice between them:
 * the SSSE3 copy when the processor has SSSE3, unless CTFIO_SIMD=sse2 asks for the baseline (the
 * tests compare the two on this machine; docs/design.md). */
struct value_fns {
    const char *name;
    const char *(*dense[2])(pstate *, const ctf_stream_def *, char *, size_t *, const char *,
                            const char *);
    const char *(*sparse[2])(pstate *, sparse_run *, const char *, const char *);
};

#define CTF_V(x) x##_sse2
#include "parse_values.h"
#undef CTF_V
static const struct value_fns fns_sse2 = {"sse2",
                                          {dense_f32_sse2, dense_f64_sse2},
                                          {sparse_f32_sse2, sparse_f64_sse2}};

#if CTF_SSSE3_VARIANT
#pragma GCC push_options
#pragma GCC target("ssse3")
#define CTF_V(x) x##_ssse3
#include "parse_values.h"
#undef CTF_V
#pragma GCC pop_options
static const struct value_fns fns_ssse3 = {"ssse3",
                                           {dense_f32_ssse3, dense_f64_ssse3},
                                           {sparse_f32_ssse3, sparse_f64_ssse3}};
#endif

static const struct value_fns *fns_chosen;
static pthread_once_t fns_once = PTHREAD_ONCE_INIT;

static void choose_fns(void)
{
    fns_chosen = &fns_sse2;
#if CTF_SSSE3_VARIANT
    __builtin_cpu_init();
    if (__builtin_cpu_supports("ssse3")) fns_chosen = &fns_ssse3;
#endif
}

static const struct value_fns *value_fns_get(void)
{
    pthread_once(&fns_once, choose_fns);
    return fns_chosen;
}
#endif

#ifdef CTF_TESTING
int ctf__parse_set_variant(const char *name)
{
#if CTF_TOKENIZE
    pthread_once(&fns_once, choose_fns);
    if (!strcmp(name, "sse2")) {
        fns_chosen = &fns_sse2;
        return 0;
    }
#if CTF_SSSE3_VARIANT
    if (!strcmp(name, "ssse3") && __builtin_cpu_supports("ssse3")) {
        fns_chosen = &fns_ssse3;
        return 0;
    }
#endif
#endif
    return strcmp(name, ctf__parse_variant()) ? CTF_EINVAL : 0;
}
#endif

const char *ctf__parse_variant(void)
{
#if CTF_TOKENIZE
    return value_fns_get()->name;
#else
    return "portable";
#endif
}

/* Parses a dense sample's values at p (up to the next '|' or end). @return : end of the values,
 * or NULL after recording an error (the sample is dropped). */
static const char *parse_dense(pstate *ps, size_t s, const char *p, const char *end,
                               const char *name_at)
{
    const ctf_stream_def *def = &ps->pc->streams[s];
    ctf__stream_data *sd = &ps->cd->streams[s];
    const size_t elt = (size_t)ps->pc->precision;
    const size_t dim = def->dim;
    /* One slot of slack past the sample: dense_value stores before it counts. The product is
     * checked: a size that does not fit is an allocation that cannot succeed. */
    const size_t at = sd->dense_off ? sd->dense_off[sd->samples] : sd->samples * dim;
    size_t need;
    if (__builtin_add_overflow(at, dim, &need) || need > SIZE_MAX / elt - 1 ||
        ensure_values(sd, need + 1, elt)) {
        ps->oom = 1;
        return NULL;
    }
    char *dst = (char *)sd->values + at * elt;
    size_t n = 0;
#if CTF_TOKENIZE
    const char *stop = ps->fns->dense[elt == 8](ps, def, dst, &n, p, end);
    while (!stop && ps->resume) { /* a value out of range was kept: the rest of the sample */
        p = ps->resume;
        n = ps->resume_n;
        ps->resume = NULL;
        stop = ps->fns->dense[elt == 8](ps, def, dst, &n, p, end);
    }
#else
    const char *stop = dense_values(ps, def, dst, &n, p, end, elt);
#endif
    if (!stop) return NULL;
    return finish_dense(ps, def, sd, dst, n, stop, end, name_at);
}

static const char *parse_sparse(pstate *ps, size_t s, const char *p, const char *end,
                                const char *name_at)
{
    ctf__stream_data *sd = &ps->cd->streams[s];
    sparse_run sr = {&ps->pc->streams[s], sd, sd->nnz, -1, false};
    CTF_UNUSED(name_at);
    if (ctf__grow((void **)&sd->indptr, &sd->indptr_cap, sd->samples + 2, sizeof *sd->indptr)) {
        ps->oom = 1;
        return NULL;
    }
#if CTF_TOKENIZE
    p = ps->fns->sparse[ps->pc->precision == 8](ps, &sr, p, end);
    if (!p) goto drop;
#else
    for (;;) {
        p = skip_delims(p, end);
        if (p == end || *p == '|') break;
        p = sparse_entry(ps, &sr, p, end);
        if (!p) goto drop;
    }
#endif
    sd->indptr[sd->samples] = (int64_t)sr.nnz0;
    sd->samples++;
    sd->indptr[sd->samples] = (int64_t)sd->nnz;
    return p;
drop:
    sd->nnz = sr.nnz0;
    return NULL;
}

/*======================================================================
 * Rows and sequences
 *====================================================================*/

/* Parses one row [p, end). @return : samples committed. */
static size_t parse_row(pstate *ps, const char *p, const char *end, uint64_t *seen)
{
    const ctf__parse_cfg *pc = ps->pc;
    size_t got = 0;
    *seen = 0;
    while (p < end && !too_many_errors(ps)) {
        p = skip_delims(p, end);
        if (p == end) break;
        if (*p != '|') {
            char ex[64];
            const char *stop = p;
            while (stop < end && !ends_value((unsigned char)*stop)) stop++;
            excerpt(p, stop, ex, sizeof ex);
            add_problem(ps, CTF_SEV_ERROR, CTF_EPARSE, where_at(ps, p),
                        "expected '|' and an input name, found '%s'", ex);
            p = next_bar(p, end);
            continue;
        }
        const char *bar = p++;
        if (p < end && *p == '#') {
            p = next_bar(p + 1, end); /* a comment runs to the next '|' (rules 1.3) */
            continue;
        }
        const char *name = p;
        while (p < end && !ends_value((unsigned char)*p)) p++;
        size_t len = (size_t)(p - name);
        if (len == 0) {
            add_problem(ps, CTF_SEV_ERROR, CTF_EPARSE, where_at(ps, bar),
                        "expected an input name directly after '|'");
            p = next_bar(p, end);
            continue;
        }
        size_t s = pc->num_streams;
        for (size_t i = 0; i < pc->num_streams; i++)
            if (ps->alias_len[i] == len && !memcmp(ps->alias[i], name, len)) {
                s = i;
                break;
            }
        if (s == pc->num_streams) {
            add_problem(ps, CTF_SEV_INFO, CTF_OK, where_at(ps, bar),
                        "skipping unknown input '%.*s' (not in the reader configuration)",
                        (int)CTF_MIN(len, (size_t)64), name);
            p = next_bar(p, end);
            continue;
        }
        if (*seen & ((uint64_t)1 << s)) {
            add_problem(ps, CTF_SEV_ERROR, CTF_EPARSE, where_at(ps, bar),
                        "stream '%s' appears twice on one line (one sample per stream per line); "
                        "the second sample is dropped",
                        pc->streams[s].name);
            ps->cd->dropped_samples[s]++;
            p = next_bar(p, end);
            continue;
        }
        const char *q = pc->streams[s].is_sparse ? parse_sparse(ps, s, p, end, bar)
                                                 : parse_dense(ps, s, p, end, bar);
        if (!q) {
            if (ps->oom) return got;
            ps->cd->dropped_samples[s]++;
            p = next_bar(p, end);
            continue;
        }
        *seen |= (uint64_t)1 << s;
        got++;
        p = q;
    }
    return got;
}

/* The data file changed since it was indexed (same size and modification time, other bytes):
 * fatal, at the line that no longer fits the index. */
static void changed_under_index(pstate *ps, const char *at, const char *what, uint64_t a,
                                uint64_t b)
{
    ctf__chunk_data *cd = ps->cd;
    cd->fatal = true;
    cd->fatal_code = CTF_ECHANGED;
    add_problem(ps, CTF_SEV_ERROR, CTF_ECHANGED, where_at(ps, at),
                "the file changed since it was indexed: %s (%llu, the index has %llu)", what,
                (unsigned long long)a, (unsigned long long)b);
}

/* Line mode: does the line [p, eol) name a configured input? The index attached such lines
 * to the sequence before them only when they held none (blank, comments, unknown inputs). */
static bool line_has_input(const pstate *ps, const char *p, const char *eol)
{
    for (;;) {
        p = memchr(p, '|', (size_t)(eol - p));
        if (!p) return false;
        const char *n = ++p;
        if (n < eol && *n == '#') continue; /* a comment, even for an alias starting with '#' */
        while (p < eol && !(*(const unsigned char *)p <= ' ' || *p == '|' || *p == 127)) p++;
        const size_t len = (size_t)(p - n);
        if (!len) return true; /* an empty name: an error, so the index made it a sequence */
        for (size_t i = 0; len && i < ps->pc->num_streams; i++)
            if (ps->alias_len[i] == len && !memcmp(ps->alias[i], n, len)) return true;
    }
}

/* Checks that the sequence's bytes still have the shape the index recorded: its physical lines
 * (none more, none less), in id mode every id equal to its key, in line mode no configured
 * input on its trailing lines. p is where the parsed rows ended, r the rows parsed.
 * @return : false after recording CTF_ECHANGED. */
static bool sequence_matches_index(pstate *ps, const ctf__seq *seq, const char *p, const char *end,
                                   uint32_t r)
{
    for (; r < seq->lines && p < end; r++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        ps->line_start = p;
        if (ps->pc->line_mode && line_has_input(ps, p, eol)) {
            changed_under_index(ps, p, "a line the index saw without input holds one; line",
                                ps->line_no + 1, seq->line + 1);
            return false;
        }
        if (!ps->pc->line_mode && p < eol && *p >= '0' && *p <= '9') {
            changed_under_index(ps, p, "a line inside a sequence starts another one; line",
                                ps->line_no + 1, seq->line + 1);
            return false;
        }
        p = nl ? nl + 1 : end;
        ps->line_no++;
    }
    /* An unterminated run of blanks at the end of the file is not a line (as in the index). */
    const char *q = p;
    while (q < end && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
    if (r != seq->lines || q != end) {
        ps->line_start = p;
        changed_under_index(ps, p < end ? p : end, "the sequence's line count differs; lines", r,
                            seq->lines);
        return false;
    }
    return true;
}

static int parse_sequence(pstate *ps, size_t si, size_t local)
{
    const ctf_index *idx = ps->idx;
    const ctf__parse_cfg *pc = ps->pc;
    ctf__chunk_data *cd = ps->cd;
    CTF_UNUSED(si);
    const ctf__seq *seq = &ps->seqs[local];
    const uint64_t seq_end = local + 1 < ps->hi ? ps->seqs[local + 1].offset : ps->range_end;
    const char *p = ps->buf + (seq->offset - ps->base);
    const char *end = ps->buf + (seq_end - ps->base);
    ctf__slice *sl = &cd->slices[local * pc->num_streams];
    size_t nonempty_rows = 0;
    const uint64_t errors_before = cd->num_errors;
    uint64_t dropped_before[CTF_MAX_STREAMS];
    memcpy(dropped_before, cd->dropped_samples, pc->num_streams * sizeof *dropped_before);

    for (size_t k = 0; k < pc->num_streams; k++) sl[k].first = (uint32_t)cd->streams[k].samples;
    ps->line_no = seq->line;
    uint32_t rows = pc->line_mode ? 1 : seq->lines, r;
    for (r = 0; r < rows && p < end && !too_many_errors(ps); r++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        ps->line_start = p;
        ps->row_errors = 0;
        ps->row_unterminated = nl == NULL && seq_end == idx->file.size;
        const char *q = p;
        /* Skip the sequence id at the line start (ids in line mode are ignored). In id mode
         * every id in the sequence is its key: the index started a new sequence at any other,
         * so another one here means the file changed under the index (the first line's id was
         * checked when the chunk was read). */
        uint64_t id = 0;
        bool big = false;
        while (q < eol && *q >= '0' && *q <= '9') {
            const unsigned d = (unsigned)(*q - '0');
            if (id > (UINT64_MAX - d) / 10)
                big = true;
            else
                id = id * 10 + d;
            q++;
        }
        if (!pc->line_mode && q > p && (big || id != seq->key)) {
            changed_under_index(ps, p, "another sequence id inside the sequence; id",
                                big ? UINT64_MAX : id, seq->key);
            return 0;
        }
        uint64_t seen;
        size_t got = parse_row(ps, q, eol, &seen);
        if (ps->oom) return CTF_ENOMEM;
        if (got) {
            nonempty_rows++;
        } else if (!too_many_errors(ps)) {
            cd->dropped_rows++;
            if (ps->row_errors == 0)
                add_problem(ps, CTF_SEV_ERROR, CTF_EPARSE, where_at(ps, p),
                            "row yields no sample (blank, comment-only or unknown inputs only) "
                            "inside sequence %llu",
                            (unsigned long long)seq->key);
        }
        p = nl ? nl + 1 : end;
        ps->line_no++;
    }
    if (too_many_errors(ps)) return 0;
    if (!sequence_matches_index(ps, seq, p, end, r)) return 0;

    size_t longest = 0;
    for (size_t k = 0; k < pc->num_streams; k++) {
        sl[k].count = (uint32_t)(cd->streams[k].samples - sl[k].first);
        if (sl[k].count > longest) longest = sl[k].count;
    }
    const ctf__where w = {pc->path, seq->line + 1, 1, (int64_t)seq->offset};
    for (size_t k = 0; k < pc->num_streams; k++) {
        if (sl[k].count != 0) continue;
        if (cd->dropped_samples[k] > dropped_before[k] ||
            (pc->line_mode && nonempty_rows == 0 && cd->num_errors > errors_before)) {
            /* The stream is in the text but every sample of it here was in error: the errors
             * are counted already, so drop the sequence (counted) rather than fail, which
             * would make maxErrors useless for one-line sequences. */
            cd->dropped[local] = 1;
            cd->dropped_seqs++;
            for (size_t j = 0; j < pc->num_streams; j++) cd->dropped_samples[j] += sl[j].count;
            add_problem(ps, CTF_SEV_WARNING, CTF_OK, w,
                        "sequence %llu dropped: every sample of stream '%s' in it was in error",
                        (unsigned long long)seq->key, pc->streams[k].name);
            return 0;
        }
        cd->fatal = true;
        cd->fatal_code = CTF_EPARSE;
        add_problem(ps, CTF_SEV_ERROR, CTF_EPARSE, w,
                    "malformed input file: stream '%s' is absent from sequence %llu (lines "
                    "%llu-%llu)",
                    pc->streams[k].name, (unsigned long long)seq->key,
                    (unsigned long long)seq->line + 1,
                    (unsigned long long)(seq->line + (pc->line_mode ? 1 : seq->lines)));
        return 0;
    }
    if (longest < nonempty_rows) {
        add_problem(ps, CTF_SEV_ERROR, CTF_EPARSE, w,
                    "sequence %llu has %zu rows with data but its longest stream has only %zu "
                    "samples (each line must add a sample to the longest stream)",
                    (unsigned long long)seq->key, nonempty_rows, longest);
    }
    if (pc->frame_mode) {
        for (size_t k = 0; k < pc->num_streams; k++) {
            if (sl[k].count != 1) {
                add_problem(ps, CTF_SEV_ERROR, CTF_EPARSE, w,
                            "frame mode: sequence %llu has %u samples in stream '%s' (must be "
                            "exactly 1); sequence dropped",
                            (unsigned long long)seq->key, sl[k].count, pc->streams[k].name);
                cd->dropped[local] = 1;
                cd->dropped_seqs++;
                for (size_t j = 0; j < pc->num_streams; j++) cd->dropped_samples[j] += sl[j].count;
                break;
            }
        }
    }
    return 0;
}

/*======================================================================
 * Buffer pool
 *====================================================================*/

struct ctf__bufpool {
    pthread_mutex_t mu;
    size_t refs; /* the creator's, plus one per chunk that may give buffers back */
    size_t n, max; /* buffers held, and the most it keeps */
    void **buf; /* max entries */
    size_t *bytes; /* their capacities */
};

ctf__bufpool *ctf__bufpool_create(size_t max_bufs)
{
    ctf__bufpool *p = CTF_CALLOC(1, sizeof *p);
    if (!p) return NULL;
    p->buf = CTF_CALLOC(max_bufs ? max_bufs : 1, sizeof *p->buf);
    p->bytes = CTF_CALLOC(max_bufs ? max_bufs : 1, sizeof *p->bytes);
    if (!p->buf || !p->bytes || pthread_mutex_init(&p->mu, NULL)) {
        CTF_FREE(p->buf);
        CTF_FREE(p->bytes);
        CTF_FREE(p);
        return NULL;
    }
    p->refs = 1;
    p->max = max_bufs;
    return p;
}

ctf__bufpool *ctf__bufpool_for(const ctf__parse_cfg *pc, size_t threads, size_t hold, bool raw)
{
    /* its records (and a CBF chunk's bytes); dense: values; sparse: values, indices, indptr */
    size_t per_chunk = raw ? 2 : 1;
    for (size_t k = 0; k < pc->num_streams; k++) per_chunk += pc->streams[k].is_sparse ? 3 : 1;
    return ctf__bufpool_create((threads + 2 + hold) * per_chunk);
}

#ifdef CTF_TESTING
atomic_long ctf__bufpool_misses;
#endif

static void pool_ref(ctf__bufpool *p)
{
    pthread_mutex_lock(&p->mu);
    p->refs++;
    pthread_mutex_unlock(&p->mu);
}

void ctf__bufpool_ref(ctf__bufpool *p) { pool_ref(p); }

void ctf__bufpool_unref(ctf__bufpool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    const bool last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (!last) return;
    for (size_t i = 0; i < p->n; i++) CTF_FREE(p->buf[i]);
    pthread_mutex_destroy(&p->mu);
    CTF_FREE(p->buf);
    CTF_FREE(p->bytes);
    CTF_FREE(p);
}

/* The smallest pooled buffer of at least `need` bytes (and not much more than 4x: a much larger
 * one would be held by a small chunk), or NULL. */
void *ctf__bufpool_take(ctf__bufpool *p, size_t need, size_t *got)
{
    void *r = NULL;
    pthread_mutex_lock(&p->mu);
    size_t best = p->n;
    for (size_t i = 0; i < p->n; i++)
        if (p->bytes[i] >= need && p->bytes[i] / 4 <= need + 65536 &&
            (best == p->n || p->bytes[i] < p->bytes[best]))
            best = i;
    if (best < p->n) {
        r = p->buf[best];
        *got = p->bytes[best];
        p->n--;
        p->buf[best] = p->buf[p->n];
        p->bytes[best] = p->bytes[p->n];
    }
    pthread_mutex_unlock(&p->mu);
#ifdef CTF_TESTING
    if (!r) atomic_fetch_add(&ctf__bufpool_misses, 1);
#endif
    return r;
}

/* Keeps buf for a later chunk; when the pool is full the smallest buffer is freed instead. */
void ctf__bufpool_give(ctf__bufpool *p, void *buf, size_t bytes)
{
    if (!buf) return;
    pthread_mutex_lock(&p->mu);
    if (p->n < p->max) {
        p->buf[p->n] = buf;
        p->bytes[p->n++] = bytes;
        buf = NULL;
    } else if (p->max) {
        size_t small = 0;
        for (size_t i = 1; i < p->n; i++)
            if (p->bytes[i] < p->bytes[small]) small = i;
        if (p->bytes[small] < bytes) {
            void *old = p->buf[small];
            p->buf[small] = buf;
            p->bytes[small] = bytes;
            buf = old;
        }
    }
    pthread_mutex_unlock(&p->mu);
    CTF_FREE(buf);
}

/*======================================================================
 * Chunks
 *====================================================================*/

void ctf__chunk_data_free(ctf__chunk_data *cd)
{
    if (!cd) return;
    if (cd->on_free) cd->on_free(cd->on_free_ctx, cd);
    if (cd->streams)
        for (size_t k = 0; k < cd->num_streams; k++) {
            ctf__stream_data *sd = &cd->streams[k];
            if (sd->view) sd->values = NULL; /* points into raw, freed below */
            if (cd->pool) {
                ctf__bufpool_give(cd->pool, sd->values, sd->values_cap * cd->elt);
                ctf__bufpool_give(cd->pool, sd->indices, sd->indices_cap * sizeof *sd->indices);
                ctf__bufpool_give(cd->pool, sd->indptr, sd->indptr_cap * sizeof *sd->indptr);
            } else {
                CTF_FREE(sd->values);
                CTF_FREE(sd->indices);
                CTF_FREE(sd->indptr);
            }
            CTF_FREE(sd->dense_off);
        }
    if (cd->pool) {
        ctf__bufpool_give(cd->pool, cd->seqs, cd->seqs_cap * sizeof *cd->seqs);
        ctf__bufpool_give(cd->pool, cd->raw, cd->raw_cap);
    } else {
        CTF_FREE(cd->seqs);
        CTF_FREE(cd->raw);
    }
    ctf__bufpool_unref(cd->pool);
    CTF_FREE(cd->streams);
    CTF_FREE(cd->slices);
    CTF_FREE(cd->dropped);
    CTF_FREE(cd->problems);
    CTF_FREE(cd->dropped_samples);
    CTF_FREE(cd);
}

void ctf__chunk_data_shape(ctf__chunk_data *cd, const ctf__parse_cfg *pc)
{
    const size_t ns = cd->num_streams, n = cd->num_seqs;
    bool one = ns > 0;
    for (size_t i = 0; one && i < n; i++)
        for (size_t k = 0; k < ns; k++) {
            const ctf__slice sl = cd->slices[i * ns + k];
            if (sl.first != i || sl.count != 1) {
                one = false;
                break;
            }
        }
    cd->one_sample = one;
    for (size_t k = 0; k < ns; k++) {
        ctf__stream_data *sd = &cd->streams[k];
        const size_t dim = pc->streams[k].dim;
        sd->dense_step = 0;
        if (pc->streams[k].is_sparse || sd->short_sample >= 0 || !dim) continue;
        if (!sd->dense_off) {
            sd->dense_step = dim;
            continue;
        }
        /* A view's rows lie apart (CBF's counts between sequences) but often evenly. */
        const size_t m = sd->samples;
        if (m < 2 || sd->dense_off[0]) continue;
        const size_t step = sd->dense_off[1];
        size_t i = 2;
        while (i < m && sd->dense_off[i] == i * step) i++;
        if (i == m && step >= dim && sd->dense_off[m] - sd->dense_off[m - 1] >= dim)
            sd->dense_step = step;
    }
}

/* Buffer pre-sizing. Growing the stream buffers from empty by realloc doubling cost up to a
 * third of the parse time on sparse files (copies, and page faults on every new block), so each
 * buffer starts with an upper bound of what the chunk can need:
 *  - dense: one sample per row, dim values each (a short sample is zero-filled): rows * dim. That
 *    is exact when the stream is on every row. It is clamped to what the bytes can spell out
 *    ((bytes + 1) / 2 values, each at least a digit and a delimiter), so that a stream on a few
 *    rows only (or a huge dim) does not reserve rows * dim; zero-filled samples beyond the clamp
 *    fall back to doubling;
 *  - sparse: every entry "i:v" holds a ':', so nnz <= the ':' bytes of the chunk (one SSE2 pass,
 *    ~2% of the parse), and <= (bytes + 1) / 4 (an entry and the byte that ends it take 4 bytes;
 *    the +1: the file's last entry may end without a delimiter); samples + 1 <= rows + 1 for
 *    indptr. Valid input never exceeds these bounds.
 * The bounds are loose when a chunk holds several streams (each is bounded by the whole chunk),
 * but only the pages written become resident. shrink() then gives back what was not used (an
 * in-place realloc, no copy) when the slack is over half, so that cd->bytes, which counts
 * capacities for the residency counters, stays within 2x of what is used, as with doubling.
 * (A first version, bytes / 4 per sparse stream and a shrink on a quarter's slack, made 4 MiB
 * sparse chunks ~30% slower in one run (not profiled; every chunk shrank its buffers).)
 * Each pre-sized buffer is capped at CTF__PRESIZE_MAX bytes (beyond it, doubling as before), so
 * that a huge chunkSizeInBytes cannot turn a loose bound into a reservation the system refuses
 * where the real need would fit (values of chunks up to 32 MiB are never capped). Failed
 * allocations here (pre-size or shrink) are CTF_ENOMEM like any other: none is swallowed. */
#define CTF__PRESIZE_MAX ((uint64_t)256 << 20)

static int presize_one(ctf__bufpool *pool, void **buf, size_t *cap, uint64_t n, size_t elt)
{
    if (n > CTF__PRESIZE_MAX / elt) n = CTF__PRESIZE_MAX / elt;
    if (n == 0) return 0;
    size_t bytes = (size_t)n * elt, got = 0;
    void *p = pool ? ctf__bufpool_take(pool, bytes, &got) : NULL;
    if (!p) {
        /* With a pool, room for an eighth more (rounded up to 4 KiB), so that the buffers of
         * chunks of about the same size fit each other. */
        if (pool) bytes = ((bytes + bytes / 8) | 0xFFF) + 1;
        p = CTF_MALLOC(bytes);
        if (!p) return CTF_ENOMEM;
        got = bytes;
    }
    *buf = p;
    *cap = got / elt;
    return 0;
}

/* Bytes ':' in [p, p + n): every sparse entry has one, so this bounds the entries of all sparse
 * streams together (tighter than bytes / 4 by the entries' real length). */
static uint64_t count_colons(const char *p, size_t n)
{
    uint64_t c = 0;
    size_t i = 0;
#if defined(__SSE2__)
    /* Per-lane byte counters (a match is -1: subtracting counts it), summed by psadbw before
     * they can wrap; no popcount (a libgcc call on baseline x86-64). */
    const __m128i colon = _mm_set1_epi8(':'), zero = _mm_setzero_si128();
    while (i + 16 <= n) {
        __m128i acc = zero;
        for (size_t k = 0; k < 255 && i + 16 <= n; k++, i += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
            acc = _mm_sub_epi8(acc, _mm_cmpeq_epi8(v, colon));
        }
        __m128i s = _mm_sad_epu8(acc, zero);
        c += (uint64_t)_mm_cvtsi128_si32(s) + (uint64_t)_mm_cvtsi128_si32(_mm_srli_si128(s, 8));
    }
#endif
    for (; i < n; i++) c += p[i] == ':';
    return c;
}

static int presize(ctf__bufpool *pool, ctf__stream_data *sd, const ctf_stream_def *d, uint64_t rows,
                   uint64_t bytes, uint64_t colons, size_t elt)
{
    if (d->is_sparse) {
        const uint64_t n = CTF_MIN((bytes + 1) / 4, colons);
        return presize_one(pool, &sd->values, &sd->values_cap, n, elt) ||
               presize_one(pool, (void **)&sd->indices, &sd->indices_cap, n, sizeof *sd->indices);
    }
    const uint64_t by_bytes = (bytes + 1) / 2;
    const uint64_t n = d->dim && rows > by_bytes / d->dim ? by_bytes : rows * d->dim;
    return presize_one(pool, &sd->values, &sd->values_cap, n, elt);
}

/* Gives back a buffer's unused tail when it is over half the capacity (an in-place realloc);
 * an empty buffer is freed. */
static int shrink_one(ctf__bufpool *pool, void **buf, size_t *cap, size_t used, size_t elt)
{
    if (!*buf || *cap - used <= *cap / 2) return 0;
    if (used == 0) {
        if (pool)
            ctf__bufpool_give(pool, *buf, *cap * elt);
        else
            CTF_FREE(*buf);
        *buf = NULL;
        *cap = 0;
        return 0;
    }
    /* A pooled buffer keeps its size for the next chunk (cd->bytes counts all of it). */
    if (pool) return 0;
    void *p = CTF_REALLOC(*buf, used * elt);
    if (!p) return CTF_ENOMEM;
    *buf = p;
    *cap = used;
    return 0;
}

static int shrink(ctf__bufpool *pool, ctf__stream_data *sd, const ctf_stream_def *d, size_t elt)
{
    if (d->is_sparse)
        return shrink_one(pool, &sd->values, &sd->values_cap, sd->nnz, elt) ||
               shrink_one(pool, (void **)&sd->indices, &sd->indices_cap, sd->nnz,
                          sizeof *sd->indices) ||
               shrink_one(pool, (void **)&sd->indptr, &sd->indptr_cap, sd->samples + 1,
                          sizeof *sd->indptr);
    return shrink_one(pool, &sd->values, &sd->values_cap,
                      sd->dense_off ? sd->dense_off[sd->samples] : sd->samples * d->dim, elt);
}

/* A chunk being parsed, range of sequences after range. */
struct ctf__parse_run {
    pstate ps;
    const char *alias[CTF_MAX_STREAMS];
    size_t alias_len[CTF_MAX_STREAMS];
    const ctf__chunk *ch;
    size_t next; /* sequences parsed so far */
    bool sparse; /* some stream is sparse */
    bool colons_known; /* the chunk's ':' were counted up front, */
    bool rows_known; /* and its rows, */
    uint64_t colons, rows; /* else those of the sequences parsed so far */
};

static int parse_fail(const ctf__parse_cfg *pc, size_t chunk, ctf_error *err)
{
    return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory parsing chunk %zu of %s", chunk,
                     pc->path);
}

void ctf__parse_abort(ctf__parse_run *r)
{
    if (!r) return;
    ctf__chunk_data_free(r->ps.cd);
    CTF_FREE(r);
}

int ctf__parse_begin(const ctf__parse_cfg *pc, const ctf_index *idx, size_t chunk,
                     const ctf__seq *seqs, const char *buf, uint64_t max_errors,
                     ctf__parse_run **out, ctf_error *err)
{
    const ctf__chunk *ch = &idx->chunks[chunk];
    const size_t ns = pc->num_streams;
    ctf__parse_run *r = *out = CTF_CALLOC(1, sizeof *r);
    if (!r) return parse_fail(pc, chunk, err);
    ctf__chunk_data *cd = r->ps.cd = CTF_CALLOC(1, sizeof *cd);
    if (!cd) goto oom;
    cd->chunk = chunk;
    cd->elt = (size_t)pc->precision;
    if (pc->pool) {
        pool_ref(pc->pool);
        cd->pool = pc->pool;
    }
    cd->num_seqs = ch->num_seqs;
    cd->num_streams = ns;
    cd->streams = CTF_CALLOC(ns, sizeof *cd->streams);
    cd->slices = CTF_CALLOC(ch->num_seqs * ns, sizeof *cd->slices);
    cd->dropped = CTF_CALLOC(ch->num_seqs, 1);
    cd->dropped_samples = CTF_CALLOC(ns, sizeof *cd->dropped_samples);
    if (!cd->streams || !cd->slices || !cd->dropped || !cd->dropped_samples) goto oom;
    r->ch = ch;
    bool mb = false;
    for (size_t k = 0; k < ns; k++) {
        r->sparse |= pc->streams[k].is_sparse;
        mb |= pc->streams[k].defines_mb_size;
    }
    /* Rows the chunk can yield: every physical line in id mode, the first line of each
     * sequence in line mode. A stream gets at most one sample per row. Without the records,
     * the index's samples are the lines in id mode unless a stream defines the minibatch size
     * (then they are a lower bound, and the dense buffers are sized as the ranges come). */
    uint64_t rows = 0;
    r->rows_known = true;
    if (pc->line_mode) {
        rows = ch->num_seqs;
    } else if (seqs) {
        for (size_t i = 0; i < ch->num_seqs; i++) rows += seqs[i].lines;
    } else {
        rows = ch->samples;
        r->rows_known = !mb;
    }
    /* Without the chunk's bytes the sparse buffers are sized as the ranges come (reserve). */
    r->colons_known = buf != NULL;
    const uint64_t colons = buf && r->sparse ? count_colons(buf, (size_t)ch->size) : 0;
    for (size_t k = 0; k < ns; k++) {
        const ctf_stream_def *d = &pc->streams[k];
        ctf__stream_data *sd = &cd->streams[k];
        r->alias[k] = ctf__stream_field(d);
        r->alias_len[k] = strlen(r->alias[k]);
        sd->short_sample = -1;
        if (d->is_sparse) {
            if (presize_one(pc->pool, (void **)&sd->indptr, &sd->indptr_cap, rows + 1,
                            sizeof *sd->indptr))
                goto oom;
            sd->indptr[0] = 0;
        }
        if (presize(pc->pool, sd, d, rows, ch->size, colons, (size_t)pc->precision)) goto oom;
    }
    r->ps = (pstate){.pc = pc,
                     .idx = idx,
                     .cd = cd,
                     .max_errors = max_errors,
                     .alias = r->alias,
                     .alias_len = r->alias_len};
#if CTF_TOKENIZE
    r->ps.fns = value_fns_get();
#endif
    return 0;
oom:
    ctf__parse_abort(r);
    *out = NULL;
    return parse_fail(pc, chunk, err);
}

/* A buffer holding `used` elements, grown to `want` (kept from or given to the pool). */
static int regrow(ctf__bufpool *pool, void **buf, size_t *cap, size_t used, uint64_t want,
                  size_t elt)
{
    void *nb = NULL;
    size_t ncap = 0;
    if (presize_one(pool, &nb, &ncap, want, elt)) return CTF_ENOMEM;
    if (!nb) return 0;
    if (*buf) {
        memcpy(nb, *buf, used * elt);
        if (pool)
            ctf__bufpool_give(pool, *buf, *cap * elt);
        else
            CTF_FREE(*buf);
    }
    *buf = nb;
    *cap = ncap;
    return 0;
}

/* What the chunk will need, by what the sequences parsed so far needed per byte (done bytes of
 * the chunk's), 1/16 more; at least need, at most bound. */
static uint64_t extrapolate(uint64_t need, uint64_t done, uint64_t size, uint64_t bound)
{
    uint64_t want = done ? (uint64_t)((double)need * (double)size / (double)done) : need;
    want = CTF_MIN(want + want / 16, bound);
    return CTF_MAX(want, need);
}

/* Block loads: room in the buffers that could not be pre-sized for the sequences about to be
 * parsed, by the bounds of presize over their bytes (sparse: their ':'; dense: their rows). A
 * buffer that must grow is sized for the whole chunk by extrapolation, so that uniform data
 * grow it once; never past presize's bounds for the chunk (or CTF__PRESIZE_MAX: beyond, the
 * parse's own doubling, as with presize). */
static int reserve(ctf__parse_run *r, uint64_t rows, uint64_t colons, uint64_t done)
{
    const ctf__parse_cfg *pc = r->ps.pc;
    ctf__chunk_data *cd = r->ps.cd;
    const uint64_t size = r->ch->size;
    const size_t elt = (size_t)pc->precision;
    r->rows += rows;
    r->colons += colons;
    for (size_t k = 0; k < pc->num_streams; k++) {
        const ctf_stream_def *d = &pc->streams[k];
        ctf__stream_data *sd = &cd->streams[k];
        if (d->is_sparse && !r->colons_known) {
            const uint64_t need = CTF_MIN(r->colons, (size + 1) / 4);
            const uint64_t want = extrapolate(need, done, size, (size + 1) / 4);
            if (sd->values_cap < need && sd->values_cap < CTF__PRESIZE_MAX / elt &&
                regrow(pc->pool, &sd->values, &sd->values_cap, sd->nnz, want, elt))
                return CTF_ENOMEM;
            if (sd->indices_cap < need && sd->indices_cap < CTF__PRESIZE_MAX / 4 &&
                regrow(pc->pool, (void **)&sd->indices, &sd->indices_cap, sd->nnz, want, 4))
                return CTF_ENOMEM;
        } else if (!d->is_sparse && !r->rows_known && d->dim) {
            const uint64_t bound = (size + 1) / 2;
            const uint64_t need = CTF_MIN(r->rows * d->dim, bound);
            const size_t used = sd->dense_off ? sd->dense_off[sd->samples] : sd->samples * d->dim;
            if (sd->values_cap < need && sd->values_cap < CTF__PRESIZE_MAX / elt &&
                regrow(pc->pool, &sd->values, &sd->values_cap, used,
                       extrapolate(need, done, size, bound), elt))
                return CTF_ENOMEM;
        }
    }
    return 0;
}

int ctf__parse_seqs(ctf__parse_run *r, const ctf__seq *seqs, size_t hi, uint64_t range_end,
                    const char *buf, uint64_t base, size_t len, ctf_error *err)
{
    pstate *ps = &r->ps;
    const size_t lo = r->next;
    if (lo >= hi) return 0;
    ps->seqs = seqs;
    ps->hi = hi;
    ps->range_end = range_end;
    ps->buf = buf;
    ps->limit = buf + len;
    ps->base = base;
    ps->line_start = buf;
    if ((r->sparse && !r->colons_known) || !r->rows_known) {
        const uint64_t from = seqs[lo].offset - base;
        uint64_t rows = 0;
        if (!r->rows_known)
            for (size_t i = lo; i < hi; i++) rows += seqs[i].lines;
        const uint64_t colons = r->sparse && !r->colons_known
                                    ? count_colons(buf + from,
                                                   (size_t)(range_end - seqs[lo].offset))
                                    : 0;
        if (reserve(r, rows, colons, range_end - r->ch->offset))
            return parse_fail(ps->pc, ps->cd->chunk, err);
    }
    for (size_t i = lo; i < hi && !too_many_errors(ps); i++)
        if (parse_sequence(ps, r->ch->first_seq + i, i))
            return parse_fail(ps->pc, ps->cd->chunk, err);
    if (ps->oom) return parse_fail(ps->pc, ps->cd->chunk, err);
    r->next = hi;
    return 0;
}

bool ctf__parse_stopped(const ctf__parse_run *r) { return too_many_errors(&r->ps); }

int ctf__parse_end(ctf__parse_run *r, ctf__chunk_data **out, ctf_error *err)
{
    const ctf__parse_cfg *pc = r->ps.pc;
    ctf__chunk_data *cd = r->ps.cd;
    const size_t ns = pc->num_streams;
    *out = NULL;
    /* Sequences left unparsed after the error budget ran out are not delivered. */
    for (size_t k = 0; k < ns; k++)
        if (shrink(pc->pool, &cd->streams[k], &pc->streams[k], (size_t)pc->precision)) {
            ctf__parse_abort(r);
            return parse_fail(pc, cd->chunk, err);
        }
    size_t bytes = sizeof *cd + cd->num_seqs * (ns * sizeof *cd->slices + 1);
    for (size_t k = 0; k < ns; k++) {
        const ctf__stream_data *sd = &cd->streams[k];
        bytes += sd->values_cap * (size_t)pc->precision + sd->indices_cap * sizeof(int32_t) +
                 sd->indptr_cap * sizeof(int64_t) + sd->dense_off_cap * sizeof(size_t);
    }
    cd->bytes = bytes + cd->problems_cap * sizeof(ctf__problem);
    ctf__chunk_data_shape(cd, pc);
    *out = cd;
    CTF_FREE(r);
    return 0;
}

int ctf__parse_chunk(const ctf__parse_cfg *pc, const ctf_index *idx, size_t chunk,
                     const ctf__seq *seqs, const char *buf, uint64_t max_errors,
                     ctf__chunk_data **out, ctf_error *err)
{
    *out = NULL;
    const ctf__chunk *ch = &idx->chunks[chunk];
    ctf__parse_run *r;
    int rc = ctf__parse_begin(pc, idx, chunk, seqs, buf, max_errors, &r, err);
    if (!rc)
        rc = ctf__parse_seqs(r, seqs, ch->num_seqs, ch->offset + ch->size, buf, ch->offset,
                             (size_t)ch->size, err);
    if (rc) {
        ctf__parse_abort(r);
        return rc;
    }
    return ctf__parse_end(r, out, err);
}
