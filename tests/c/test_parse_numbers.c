/*
 * test_parse_numbers.c -- the numbers the reader delivers are bit-for-bit strtof / strtod of the
 * text, through the whole parse path (parse.c's inlined fast path in lib/format/number_fast.h, its
 * fallback to ctf__parse_float / ctf__parse_double, chunk ends where the fast path may not read
 * ahead). test_number.c checks the library converters alone; this drives parse.c with a file.
 *
 * The values are mostly the shapes the fast path takes ("-0.5936", "45.", "+7", up to 8 digits)
 * and their edges (mantissas around 2^24, 8 digits in all, leading zeros), mixed with shapes it
 * must hand over (exponents, 9+ digits), separated by spaces, tabs, '|' and line ends.
 */
#include "reader/pipeline.h"
#include "test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define PN_LINES 10000
#define PN_DIM 100   /* dense values per line: 1M values in all */
#define PN_SPARSE 6  /* sparse entries per line */

static uint64_t pn_state;

static uint64_t pn_rnd(void)
{
    pn_state ^= pn_state >> 12; /* xorshift64* */
    pn_state ^= pn_state << 25;
    pn_state ^= pn_state >> 27;
    return pn_state * UINT64_C(2685821657736338717);
}

static unsigned pn_below(unsigned n) { return (unsigned)((pn_rnd() >> 32) % n); }

static size_t pn_digits(char *o, unsigned count)
{
    for (unsigned i = 0; i < count; i++) o[i] = (char)('0' + pn_below(10));
    return count;
}

/* One number text at o (NUL-terminated). @return : its length. */
static size_t pn_number(char *o)
{
    size_t n = 0;
    unsigned kind = pn_below(100);
    if (pn_below(3) == 0)
        o[n++] = '-';
    else if (pn_below(30) == 0)
        o[n++] = '+';
    if (kind < 55) { /* the fast path's shape: int digits [. frac digits], up to 8 in all */
        unsigned id = 1 + pn_below(8);
        n += pn_digits(o + n, id);
        if (pn_below(5)) {
            o[n++] = '.';
            n += pn_digits(o + n, pn_below(10 - id)); /* 0 gives "45." */
        }
    } else if (kind < 70) { /* mantissas around 2^24 (float's exact limit), dot anywhere */
        char d[16];
        int len = snprintf(d, sizeof d, "%u", (1u << 24) - 300 + pn_below(600));
        unsigned dot = pn_below((unsigned)len + 1);
        for (int i = 0; i < len; i++) {
            if ((unsigned)i == dot && i) o[n++] = '.';
            o[n++] = d[i];
        }
    } else if (kind < 78) { /* leading zeros */
        o[n++] = '0';
        if (pn_below(2)) o[n++] = '0';
        o[n++] = '.';
        for (unsigned z = pn_below(7); z; z--) o[n++] = '0';
        n += pn_digits(o + n, 1 + pn_below(4));
    } else if (kind < 86) { /* %.4g-style exponents, as the fast path hands over */
        n += pn_digits(o + n, 1);
        o[n++] = '.';
        n += pn_digits(o + n, 1 + pn_below(4));
        n += (size_t)sprintf(o + n, "%c%d", pn_below(2) ? 'e' : 'E', (int)pn_below(81) - 40);
    } else if (kind < 92) { /* single digits (MNIST-like) */
        n += pn_digits(o + n, 1);
    } else { /* 9 to 20 digits */
        unsigned total = 9 + pn_below(12);
        unsigned id = 1 + pn_below(total);
        n += pn_digits(o + n, id);
        if (id < total) {
            o[n++] = '.';
            n += pn_digits(o + n, total - id);
        }
    }
    o[n] = 0;
    return n;
}

static const char *pn_sep(void)
{
    static const char *const seps[] = {" ", " ", " ", " ", " ", " ", "\t", "  ", " \t "};
    return seps[pn_below(sizeof seps / sizeof *seps)];
}

typedef struct pn_text {
    char *file;      /* the CTF text */
    size_t len;
    char *tok;       /* every number, NUL-terminated, dense values then sparse ones per line */
    size_t *dense;   /* offsets into tok: PN_LINES * PN_DIM */
    size_t *sparse;  /* offsets into tok: PN_LINES * PN_SPARSE */
} pn_text;

static void pn_make(pn_text *t, uint64_t seed)
{
    pn_state = seed * UINT64_C(0x9E3779B97F4A7C15) + UINT64_C(0x2545F4914F6CDD1D);
    size_t cap = (size_t)PN_LINES * (PN_DIM + PN_SPARSE) * 40 + 4096;
    t->file = malloc(cap);
    t->tok = malloc(cap);
    t->dense = malloc(sizeof *t->dense * PN_LINES * PN_DIM);
    t->sparse = malloc(sizeof *t->sparse * PN_LINES * PN_SPARSE);
    size_t n = 0, nt = 0;
    for (size_t l = 0; l < PN_LINES; l++) {
        n += (size_t)sprintf(t->file + n, "|x%s", pn_sep());
        for (size_t i = 0; i < PN_DIM; i++) {
            t->dense[l * PN_DIM + i] = nt;
            size_t k = pn_number(t->tok + nt);
            memcpy(t->file + n, t->tok + nt, k);
            n += k;
            nt += k + 1;
            if (i + 1 < PN_DIM) n += (size_t)sprintf(t->file + n, "%s", pn_sep());
        }
        /* The dense sample ends at '|' directly, or after blanks. */
        n += (size_t)sprintf(t->file + n, "%s|s ", pn_below(4) ? " " : "");
        for (size_t i = 0; i < PN_SPARSE; i++) {
            t->sparse[l * PN_SPARSE + i] = nt;
            size_t k = pn_number(t->tok + nt);
            n += (size_t)sprintf(t->file + n, "%zu:%s", i * 7, t->tok + nt);
            nt += k + 1;
            if (i + 1 < PN_SPARSE) n += (size_t)sprintf(t->file + n, "%s", pn_sep());
        }
        /* The last line has no newline: its last value runs into the end of the file. */
        if (l + 1 < PN_LINES) t->file[n++] = '\n';
    }
    t->len = n;
}

static void pn_free(pn_text *t)
{
    free(t->file);
    free(t->tok);
    free(t->dense);
    free(t->sparse);
}

/* Reads the file and compares every delivered value with libc's conversion of its text.
 * @return : values compared, or -1 after a failure. */
static long pn_check(const char *path, const pn_text *t, ctf_precision prec, size_t threads,
                     uint64_t chunk)
{
    const ctf_stream_def s[2] = {{"x", NULL, PN_DIM, false, false}, {"s", NULL, 64, true, false}};
    ctf_config cfg;
    ctf_config_init(&cfg);
    cfg.path = path;
    cfg.streams = s;
    cfg.num_streams = 2;
    cfg.randomize = false;
    cfg.max_sweeps = 1;
    cfg.precision = prec;
    cfg.num_threads = threads;
    cfg.chunk_size_bytes = chunk;
    cfg.trace_level = 0; /* the out-of-range warnings are counted below, not printed */
    ctf_reader *rd = NULL;
    ctf_error e;
    if (ctf_reader_open(&cfg, &rd, &e)) {
        test_fail(__FILE__, __LINE__, "ctf_reader_open", e.message);
        return -1;
    }
    size_t di = 0, si = 0;
    long compared = 0;
    uint64_t infinities = 0; /* values beyond the precision's range: one warning each */
    for (;;) {
        ctf_minibatch *mb = NULL;
        if (ctf_reader_next(rd, 4096, &mb)) {
            test_fail(__FILE__, __LINE__, "ctf_reader_next", ctf_reader_error(rd)->message);
            ctf_reader_free(rd);
            return -1;
        }
        if (!mb) break;
        ctf_stream_view v[2];
        ctf_minibatch_stream(mb, 0, &v[0]);
        ctf_minibatch_stream(mb, 1, &v[1]);
        size_t counts[2] = {v[0].num_samples * PN_DIM, v[1].nnz};
        const size_t *offs[2] = {t->dense + di, t->sparse + si};
        for (int k = 0; k < 2; k++) {
            for (size_t i = 0; i < counts[k]; i++) {
                const char *text = t->tok + offs[k][i];
                bool same;
                if (prec == CTF_FLOAT32) {
                    float want = strtof(text, NULL), got = ((const float *)v[k].values)[i];
                    same = !memcmp(&want, &got, sizeof got);
                    infinities += isinf(want) != 0;
                } else {
                    double want = strtod(text, NULL), got = ((const double *)v[k].values)[i];
                    same = !memcmp(&want, &got, sizeof got);
                    infinities += isinf(want) != 0;
                }
                if (!same) {
                    char msg[160];
                    snprintf(msg, sizeof msg, "'%s' (%s, precision %d, %zu threads)", text,
                             k ? "sparse" : "dense", (int)prec, threads);
                    test_fail(__FILE__, __LINE__, "delivered value == libc", msg);
                    ctf_minibatch_free(mb);
                    ctf_reader_free(rd);
                    return -1;
                }
                compared++;
            }
        }
        di += counts[0];
        si += counts[1];
        ctf_minibatch_free(mb);
    }
    ctf_stats st;
    ctf_reader_get_stats(rd, &st);
    ctf_reader_free(rd);
    if (st.warnings != infinities || st.errors != 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "%llu warnings, %llu values out of range, %llu errors",
                 (unsigned long long)st.warnings, (unsigned long long)infinities,
                 (unsigned long long)st.errors);
        test_fail(__FILE__, __LINE__, "one warning per value out of range", msg);
        return -1;
    }
    if (di != (size_t)PN_LINES * PN_DIM || si != (size_t)PN_LINES * PN_SPARSE) {
        test_fail(__FILE__, __LINE__, "every value delivered", "");
        return -1;
    }
    return compared;
}

TEST(parse_numbers_match_libc)
{
    pn_text t;
    pn_make(&t, 7);
    const char *path = test_write_file("parse_numbers.ctf", t.file, t.len);
    /* Small chunks put many values near a chunk's end, where the fast path may not read ahead;
     * threads 0 parses on the caller, 2 on the prefetch workers. */
    ASSERT(pn_check(path, &t, CTF_FLOAT32, 0, 65536) == (long)PN_LINES * (PN_DIM + PN_SPARSE));
    ASSERT(pn_check(path, &t, CTF_FLOAT64, 2, 1 << 20) == (long)PN_LINES * (PN_DIM + PN_SPARSE));
    pn_free(&t);
}
