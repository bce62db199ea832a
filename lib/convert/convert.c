/*
 * convert.c -- converters into CTF: LibSVM / svmlight and CSV text, streamed line by line.
 *
 * Both read the input front to back with one buffer that grows only to the longest line and
 * parse every value as float64. A value already written as a CTF number is copied as it is (the
 * reader converts that text to the same float64); any other (".5", "1.e5") is written as the
 * shortest text that reads back to the same float64 (ctf_format_double). Either way a value
 * survives the conversion bit for bit. LibSVM needs a first
 * pass when the dimension or the index base is to be inferred; CSV never does. Nothing here
 * prints: progress goes to the caller's callback, problems to the error record.
 */
#include "convert/convert.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/*======================================================================
 * Line reader
 *====================================================================*/

#define CONV_BLOCK (1u << 20)
#define CONV_PROGRESS_EVERY ((uint64_t)1 << 22)

typedef struct lines {
    FILE *f;
    const char *path;
    char *buf;
    size_t cap, len, pos;      /* buf[pos..len) not yet returned */
    bool eof;
    uint64_t base;             /* file offset of buf[0] */
    uint64_t line_no;          /* 1-based number of the line last returned */
    uint64_t line_off;         /* its file offset */
} lines;

static int lines_open(lines *L, const char *path, ctf_error *err)
{
    memset(L, 0, sizeof *L);
    L->path = path;
    L->f = fopen(path, "rb");
    if (!L->f)
        return ctf__fail(err, CTF_EIO, (ctf__where){path, 0, 0, -1}, "cannot open %s: %s", path,
                         strerror(errno));
    L->cap = CONV_BLOCK;
    L->buf = CTF_MALLOC(L->cap);
    if (!L->buf) {
        fclose(L->f);
        L->f = NULL;
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory (line buffer)");
    }
    return 0;
}

static void lines_close(lines *L)
{
    if (L->f) fclose(L->f);
    CTF_FREE(L->buf);
    L->f = NULL;
    L->buf = NULL;
}

static int lines_rewind(lines *L, ctf_error *err)
{
    if (fseek(L->f, 0, SEEK_SET) != 0)
        return ctf__fail(err, CTF_EIO, (ctf__where){L->path, 0, 0, -1}, "cannot rewind %s: %s",
                         L->path, strerror(errno));
    L->len = L->pos = 0;
    L->eof = false;
    L->base = 0;
    L->line_no = 0;
    L->line_off = 0;
    return 0;
}

/* Next line without its "\n" (and "\r").
 * @return : 1 with *line and *n set, 0 at the end, <0 error. */
static int lines_next(lines *L, const char **line, size_t *n, ctf_error *err)
{
    for (;;) {
        char *nl = L->pos < L->len ? memchr(L->buf + L->pos, '\n', L->len - L->pos) : NULL;
        if (nl || (L->eof && L->pos < L->len)) {
            size_t start = L->pos, stop = nl ? (size_t)(nl - L->buf) : L->len;
            L->pos = nl ? stop + 1 : L->len;
            L->line_no++;
            L->line_off = L->base + start;
            if (stop > start && L->buf[stop - 1] == '\r') stop--;
            /* A UTF-8 byte order mark (spreadsheets write one) is not part of the first cell. */
            if (L->line_no == 1 && stop - start >= 3 &&
                !memcmp(L->buf + start, "\xEF\xBB\xBF", 3)) {
                start += 3;
                L->line_off += 3;
            }
            *line = L->buf + start;
            *n = stop - start;
            return 1;
        }
        if (L->eof) return 0;
        /* Keep the partial line, growing the buffer only when the line fills it. */
        if (L->pos > 0) {
            memmove(L->buf, L->buf + L->pos, L->len - L->pos);
            L->base += L->pos;
            L->len -= L->pos;
            L->pos = 0;
        }
        if (L->len == L->cap) {
            if (L->cap > SIZE_MAX / 2)
                return ctf__fail(err, CTF_ELIMIT, (ctf__where){L->path, L->line_no + 1, 0, -1},
                                 "line too long");
            char *nb = CTF_REALLOC(L->buf, L->cap * 2);
            if (!nb) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory (line buffer)");
            L->buf = nb;
            L->cap *= 2;
        }
        size_t got = fread(L->buf + L->len, 1, L->cap - L->len, L->f);
        if (got == 0) {
            if (ferror(L->f))
                return ctf__fail(err, CTF_EIO, (ctf__where){L->path, L->line_no + 1, 0, -1},
                                 "read error in %s", L->path);
            L->eof = true;
        }
        L->len += got;
    }
}

/*======================================================================
 * Shared state of one conversion
 *====================================================================*/

typedef struct conv {
    const ctf_convert_options *opt;
    ctf_convert_result *res;
    ctf_error *err;
    lines in;
    FILE *out;                 /* NULL during a first pass */
    char *outbuf;
    const char *fname, *lname;
    uint64_t done_before;      /* bytes of earlier passes, for progress */
    uint64_t total;            /* file size * passes */
    uint64_t next_report;
    const char *line;          /* the current line, for error locations */
    int write_errno;           /* the first failed write's errno, 0 while every write succeeded */
} conv;

static int conv_fail(conv *c, const char *at, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int conv_fail(conv *c, const char *at, const char *fmt, ...)
{
    ctf__where w = {c->in.path, c->in.line_no, 0, -1};
    if (at) {
        w.column = (uint64_t)(at - c->line) + 1;
        w.offset = (int64_t)(c->in.line_off + (uint64_t)(at - c->line));
    }
    va_list ap;
    va_start(ap, fmt);
    int rc = ctf__vfail(c->err, CTF_EPARSE, w, fmt, ap);
    va_end(ap);
    return rc;
}

static int conv_progress(conv *c, bool final)
{
    const ctf_convert_options *o = c->opt;
    uint64_t done = c->done_before + c->in.line_off;
    if (final) done = c->done_before + c->res->bytes_read;
    if (!o->progress || (!final && done < c->next_report)) return 0;
    c->next_report = done + CONV_PROGRESS_EVERY;
    if (o->progress(o->progress_user, done, c->total))
        return ctf__fail(c->err, CTF_EINVAL, CTF__NOWHERE, "conversion of %s cancelled",
                         c->in.path);
    return 0;
}

/* A token ends at a blank or at the end of the line (CSV: at the delimiter). LibSVM has no
 * delimiter: it passes a byte no line holds, so that a NUL byte stays inside its token. */
#define NO_DELIM '\n'
static const char *token_end(const char *p, const char *end, char delim)
{
    while (p < end && *p != ' ' && *p != '\t' && *p != delim) p++;
    return p;
}

/* A number: the CTF grammar (fast path), else what strtod accepts (".5", "1.e5"); finite only.
 * *as_is tells that the text is a CTF number already: written unchanged it reads back to the
 * same float64 (the reader's conversion is the same correctly rounded one), and copying it is
 * several times cheaper than printing the shortest text anew. */
static const char *parse_number(const char *p, const char *end, double *v, bool *as_is)
{
    const char *q = p < end ? ctf__parse_double(p, end, v) : NULL;
    *as_is = q == end;
    if (q == end && isfinite(*v)) return q;
    *as_is = false;
    char tmp[128];
    size_t n = (size_t)(end - p);
    if (n == 0 || n >= sizeof tmp) return NULL;
    memcpy(tmp, p, n);
    tmp[n] = 0;
    char *e;
    errno = 0;
    double d = strtod(tmp, &e);
    if ((size_t)(e - tmp) != n || !isfinite(d) || tmp[0] == ' ') return NULL;
    *v = d;
    return end;
}

static int parse_u64(const char *p, const char *end, uint64_t *out)
{
    uint64_t v = 0;
    if (p == end) return -1;
    for (; p < end; p++) {
        if (*p < '0' || *p > '9') return -1;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

static void put(conv *c, const char *s, size_t n)
{
    if (fwrite(s, 1, n, c->out) != n && !c->write_errno) c->write_errno = errno ? errno : EIO;
}

static void put_num(conv *c, double v)
{
    char b[40];
    int n = ctf_format_double(v, b, sizeof b);
    put(c, b, (size_t)n);
}

static void put_u64(conv *c, uint64_t v)
{
    char b[24];
    int n = snprintf(b, sizeof b, "%llu", (unsigned long long)v);
    put(c, b, (size_t)n);
}

static void put_name(conv *c, const char *name)
{
    put(c, "|", 1);
    put(c, name, strlen(name));
}

/* A token as a message can show it: at most 40 bytes, control bytes escaped (a NUL or a carriage
 * return printed raw would cut the message short or overwrite it on a terminal), and a hint
 * when the bytes say why the line is wrong. out must hold SHOW_MAX bytes. */
#define SHOW_MAX 256
static const char *show(char *out, const char *p, const char *end)
{
    size_t n = 0, shown = 0;
    bool nul = false, cr = false;
    out[n++] = '\'';
    for (; p < end && shown < 40; p++, shown++) {
        unsigned char ch = (unsigned char)*p;
        nul |= ch == 0;
        cr |= ch == '\r';
        if (ch == '\r')
            n += (size_t)snprintf(out + n, SHOW_MAX - n, "\\r");
        else if (ch == '\t')
            n += (size_t)snprintf(out + n, SHOW_MAX - n, "\\t");
        else if (ch < 0x20 || ch == 0x7f)
            n += (size_t)snprintf(out + n, SHOW_MAX - n, "\\x%02x", ch);
        else
            out[n++] = (char)ch;
    }
    for (const char *q = p; q < end && !(nul && cr); q++) {
        nul |= *q == 0;
        cr |= *q == '\r';
    }
    n += (size_t)snprintf(out + n, SHOW_MAX - n, "%s'", p < end ? "..." : "");
    if (nul)
        snprintf(out + n, SHOW_MAX - n, " (a NUL byte: is the input a text file?)");
    else if (cr)
        snprintf(out + n, SHOW_MAX - n,
                 " (a carriage return inside a line: lines must end with "
                 "LF or CRLF, not CR alone)");
    return out;
}

/*======================================================================
 * LibSVM
 *====================================================================*/

typedef struct svm_pass {
    bool emit;
    int base;                  /* the index base applied when emitting */
    uint64_t max_index;        /* largest raw index seen */
    bool any_index, zero_index;
    int has_qid;               /* -1 unknown, 0 no, 1 yes (decided by the first data line) */
    uint64_t prev_qid, seq_len;
} svm_pass;

static int svm_line(conv *c, svm_pass *s, const char *line, size_t n)
{
    const ctf_convert_options *o = c->opt;
    char sh[SHOW_MAX];
    const char *p = line, *end = line + n;
    const char *hash = memchr(line, '#', n);
    if (hash) end = hash;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (p == end) return 0; /* blank or comment-only */
    const char *te = token_end(p, end, NO_DELIM);
    const char *label_text = p;
    double label;
    bool label_as_is;
    if (memchr(p, ',', (size_t)(te - p)))
        return conv_fail(c, p,
                         "multi-label rows (%s) are not supported; convert one label "
                         "per row",
                         show(sh, p, te));
    if (!parse_number(p, te, &label, &label_as_is))
        return conv_fail(c, p, "expected a number (the label), found %s", show(sh, p, te));
    uint64_t cls = 0;
    if (o->classes) {
        if (label < 0 || label != floor(label) || label >= (double)o->classes)
            return conv_fail(c, p, "label %s is not a class number in 0..%zu (--classes %zu)",
                             show(sh, p, te), o->classes - 1, o->classes);
        cls = (uint64_t)label;
    }
    const char *label_end = te;
    p = te;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    bool qid = false;
    uint64_t qv = 0;
    if (end - p >= 4 && !memcmp(p, "qid:", 4)) {
        te = token_end(p, end, NO_DELIM);
        if (parse_u64(p + 4, te, &qv))
            return conv_fail(c, p + 4,
                             "expected a query id (an unsigned integer after 'qid:'), "
                             "found %s",
                             show(sh, p + 4, te));
        qid = true;
        p = te;
    }
    if (s->has_qid < 0)
        s->has_qid = qid;
    else if (s->has_qid != (int)qid)
        return conv_fail(c, line,
                         qid ? "this line has a qid but the first data line has none"
                             : "this line has no qid but the first data line has one");
    bool new_seq = !qid || c->res->rows == 0 || qv != s->prev_qid;
    if (new_seq) {
        c->res->sequences++;
        s->seq_len = 0;
    }
    s->seq_len++;
    if (s->seq_len > c->res->max_sequence_length) c->res->max_sequence_length = s->seq_len;
    s->prev_qid = qv;
    c->res->rows++;
    if (s->emit) {
        if (qid) {
            put_u64(c, qv);
            put(c, "\t", 1);
        }
        put_name(c, c->lname);
        put(c, " ", 1);
        if (o->classes) {
            put_u64(c, cls);
            put(c, ":1", 2);
        } else if (label_as_is)
            put(c, label_text, (size_t)(label_end - label_text));
        else
            put_num(c, label);
        put(c, " ", 1);
        put_name(c, c->fname);
    }
    bool first = true;
    uint64_t prev = 0;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t')) p++;
        if (p == end) break;
        te = token_end(p, end, NO_DELIM);
        const char *colon = memchr(p, ':', (size_t)(te - p));
        uint64_t idx;
        if (!colon || parse_u64(p, colon, &idx))
            return conv_fail(c, p,
                             "expected index:value (an unsigned integer, ':', a number), "
                             "found %s",
                             show(sh, p, te));
        double v;
        bool as_is;
        if (!parse_number(colon + 1, te, &v, &as_is))
            return conv_fail(c, colon + 1, "expected a number after '%.*s', found %s",
                             (int)(colon + 1 - p), p, show(sh, colon + 1, te));
        if (!first && idx <= prev)
            return conv_fail(c, p, "feature indices must increase along a line (%llu after %llu)",
                             (unsigned long long)idx, (unsigned long long)prev);
        first = false;
        prev = idx;
        /* The reader's sparse indices are int32: an index it would refuse is refused here, at
         * its line, rather than written. Before the base is known one-based is assumed; a zero
         * index found later makes the second pass check the tighter bound. */
        uint64_t assumed_base = s->emit ? (uint64_t)s->base : 1;
        if (idx >= CTF_MAX_SPARSE_DIM && idx - assumed_base >= CTF_MAX_SPARSE_DIM)
            return conv_fail(c, p,
                             "feature index %llu is too large: a sparse dimension is at most "
                             "%zu, so an index at most %zu (%s)",
                             (unsigned long long)idx, CTF_MAX_SPARSE_DIM,
                             CTF_MAX_SPARSE_DIM - (s->emit && !s->base),
                             s->emit ? (s->base ? "one-based" : "zero-based") : "one-based");
        s->any_index = true;
        if (idx == 0) s->zero_index = true;
        if (idx > s->max_index) s->max_index = idx;
        if (s->emit) {
            if (idx < (uint64_t)s->base)
                return conv_fail(c, p, "feature index 0 in a one-based file");
            uint64_t out = idx - (uint64_t)s->base;
            if (out >= c->res->features_dim)
                return conv_fail(c, p, "feature index %llu is out of range (dim=%zu%s)",
                                 (unsigned long long)idx, c->res->features_dim,
                                 s->base ? ", one-based" : ", zero-based");
            put(c, " ", 1);
            put_u64(c, out);
            put(c, ":", 1);
            if (as_is)
                put(c, colon + 1, (size_t)(te - colon - 1));
            else
                put_num(c, v);
        }
        p = te;
    }
    if (s->emit) put(c, "\n", 1);
    return 0;
}

/* UTF-16 and UTF-32 text reads as bytes with NULs between the digits: say what it is. */
static int check_encoding(conv *c, const char *line, size_t n)
{
    if (c->in.line_no != 1 || n < 2) return 0;
    const unsigned char *u = (const unsigned char *)line;
    if ((u[0] == 0xFF && u[1] == 0xFE) || (u[0] == 0xFE && u[1] == 0xFF))
        return conv_fail(c, line,
                         "the file starts with a UTF-16 or UTF-32 byte order mark: "
                         "convert it to UTF-8 (or ASCII) text first");
    return 0;
}

static int svm_pass_run(conv *c, svm_pass *s)
{
    const char *line;
    size_t n;
    int rc;
    c->res->rows = c->res->sequences = c->res->max_sequence_length = 0;
    s->has_qid = -1;
    while ((rc = lines_next(&c->in, &line, &n, c->err)) > 0) {
        c->line = line;
        if ((rc = check_encoding(c, line, n)) || (rc = svm_line(c, s, line, n))) return rc;
        if ((rc = conv_progress(c, false))) return rc;
    }
    return rc;
}

static int convert_libsvm(conv *c)
{
    const ctf_convert_options *o = c->opt;
    ctf_convert_result *r = c->res;
    if (o->index_base < -1 || o->index_base > 1)
        return ctf__fail(c->err, CTF_EINVAL, CTF__NOWHERE,
                         "index_base: expected 0, 1 or -1 (automatic), got %d", o->index_base);
    if (o->dim > CTF_MAX_SPARSE_DIM || o->classes > CTF_MAX_SPARSE_DIM)
        return ctf__fail(c->err, CTF_EINVAL, CTF__NOWHERE,
                         "%s: %zu is above the largest sparse dimension the reader takes (%zu)",
                         o->dim > CTF_MAX_SPARSE_DIM ? "dim" : "classes",
                         o->dim > CTF_MAX_SPARSE_DIM ? o->dim : o->classes, CTF_MAX_SPARSE_DIM);
    bool first_pass = o->dim == 0 || o->index_base < 0;
    int passes = first_pass ? 2 : 1;
    c->total = r->bytes_read * (uint64_t)passes;
    svm_pass s = {0};
    int rc;
    if (first_pass) {
        if ((rc = svm_pass_run(c, &s))) return rc;
        if (r->rows == 0)
            return ctf__fail(c->err, CTF_EPARSE, (ctf__where){c->in.path, 0, 0, -1},
                             "%s holds no data line", c->in.path);
        c->done_before = r->bytes_read;
        if ((rc = lines_rewind(&c->in, c->err))) return rc;
    }
    s.base = o->index_base >= 0 ? o->index_base : (s.zero_index || !s.any_index ? 0 : 1);
    if (o->dim)
        r->features_dim = o->dim;
    else
        r->features_dim = s.any_index ? (size_t)(s.max_index + 1 - (uint64_t)s.base) : 1;
    s.emit = true;
    if ((rc = svm_pass_run(c, &s))) return rc;
    if (r->rows == 0)
        return ctf__fail(c->err, CTF_EPARSE, (ctf__where){c->in.path, 0, 0, -1},
                         "%s holds no data line", c->in.path);
    r->index_base = s.base;
    r->features_sparse = true;
    r->labels_sparse = o->classes > 0;
    r->labels_dim = o->classes ? o->classes : 1;
    r->sequence_ids = s.has_qid == 1;
    return 0;
}

/*======================================================================
 * CSV
 *====================================================================*/

typedef struct csv_state {
    size_t ncols;
    bool *is_label;           /* per column */
    double *vals;             /* per column */
    bool *as_is;              /* per column: the cell's text is a CTF number already */
    char delim;
} csv_state;

/* Splits one line into cells; cb per cell with its trimmed, unquoted text. */
typedef struct cell {
    const char *p, *end;       /* trimmed content */
    const char *at;            /* where the cell starts, for error columns */
} cell;

static size_t split_cells(const char *line, size_t n, char delim, cell *cells, size_t max)
{
    const char *p = line, *end = line + n;
    size_t k = 0;
    for (;;) {
        const char *q = memchr(p, delim, (size_t)(end - p));
        const char *ce = q ? q : end;
        if (k < max) {
            const char *a = p, *b = ce;
            while (a < b && (*a == ' ' || *a == '\t')) a++;
            while (b > a && (b[-1] == ' ' || b[-1] == '\t')) b--;
            if (b - a >= 2 && *a == '"' && b[-1] == '"') {
                a++;
                b--;
            }
            cells[k] = (cell){a, b, p};
        }
        k++;
        if (!q) break;
        p = q + 1;
    }
    return k;
}

static int csv_setup(conv *c, csv_state *st, const char *line, size_t n, bool header)
{
    const ctf_convert_options *o = c->opt;
    /* A file with CR-only line ends is one line: say so, rather than that it holds no data. */
    const char *cr = memchr(line, '\r', n);
    if (cr)
        return conv_fail(c, cr,
                         "a carriage return inside the first line: lines must end with "
                         "LF or CRLF, not CR alone");
    st->ncols = split_cells(line, n, st->delim, NULL, 0);
    cell *cells = CTF_MALLOC(st->ncols * sizeof *cells);
    st->is_label = CTF_MALLOC(st->ncols * sizeof *st->is_label);
    st->vals = CTF_MALLOC(st->ncols * sizeof *st->vals);
    st->as_is = CTF_MALLOC(st->ncols * sizeof *st->as_is);
    if (!cells || !st->is_label || !st->vals || !st->as_is) {
        CTF_FREE(cells);
        return ctf__fail(c->err, CTF_ENOMEM, CTF__NOWHERE, "out of memory (CSV columns)");
    }
    split_cells(line, n, st->delim, cells, st->ncols);
    memset(st->is_label, 0, st->ncols * sizeof *st->is_label);
    size_t nlabels = 0;
    int rc = 0;
    const char *spec = o->label_columns;
    while (*spec) {
        const char *e = strchr(spec, ',');
        if (!e) e = spec + strlen(spec);
        uint64_t col;
        size_t len = (size_t)(e - spec);
        if (parse_u64(spec, e, &col) == 0) {
            if (col >= st->ncols) {
                rc = ctf__fail(c->err, CTF_EINVAL, CTF__NOWHERE,
                               "label column %llu does not exist (%s has %zu columns)",
                               (unsigned long long)col, c->in.path, st->ncols);
                break;
            }
        } else {
            size_t k = 0;
            for (; header && k < st->ncols; k++)
                if ((size_t)(cells[k].end - cells[k].p) == len && !memcmp(cells[k].p, spec, len))
                    break;
            if (!header || k == st->ncols) {
                rc = ctf__fail(c->err, CTF_EINVAL, CTF__NOWHERE,
                               header ? "label column '%.*s' is not in the header of %s"
                                      : "label column '%.*s': a name needs a header line "
                                        "(--header); else give a 0-based column number (%s)",
                               (int)len, spec, c->in.path);
                break;
            }
            col = k;
        }
        if (!st->is_label[col]) nlabels++;
        st->is_label[col] = true;
        spec = *e ? e + 1 : e;
    }
    CTF_FREE(cells);
    if (rc) return rc;
    if (nlabels == 0) return ctf__fail(c->err, CTF_EINVAL, CTF__NOWHERE, "no label column given");
    if (nlabels == st->ncols)
        return ctf__fail(c->err, CTF_EINVAL, CTF__NOWHERE,
                         "every column of %s is a label: no feature column is left", c->in.path);
    c->res->labels_dim = nlabels;
    c->res->features_dim = st->ncols - nlabels;
    return 0;
}

static int csv_row(conv *c, csv_state *st, const char *line, size_t n)
{
    cell cells_small[64];
    cell *cells = st->ncols <= 64 ? cells_small : CTF_MALLOC(st->ncols * sizeof *cells);
    if (!cells) return ctf__fail(c->err, CTF_ENOMEM, CTF__NOWHERE, "out of memory (CSV row)");
    size_t k = split_cells(line, n, st->delim, cells, st->ncols);
    int rc = 0;
    if (k != st->ncols) {
        rc = conv_fail(c, NULL, "line has %zu fields, expected %zu (as on the first line)", k,
                       st->ncols);
        goto out;
    }
    for (size_t j = 0; j < k; j++) {
        const cell *e = &cells[j];
        if (e->p == e->end) {
            rc = conv_fail(c, e->at, "field %zu is empty (expected a number)", j + 1);
            goto out;
        }
        if (!parse_number(e->p, e->end, &st->vals[j], &st->as_is[j])) {
            char sh[SHOW_MAX];
            rc = conv_fail(c, e->p, "field %zu: expected a number, found %s", j + 1,
                           show(sh, e->p, e->end));
            goto out;
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        bool lab = pass == 0;
        if (!lab) put(c, " ", 1);
        put_name(c, lab ? c->lname : c->fname);
        for (size_t j = 0; j < k; j++) {
            if (st->is_label[j] != lab) continue;
            put(c, " ", 1);
            if (st->as_is[j])
                put(c, cells[j].p, (size_t)(cells[j].end - cells[j].p));
            else
                put_num(c, st->vals[j]);
        }
    }
    put(c, "\n", 1);
    c->res->rows++;
    c->res->sequences++;
out:
    if (cells != cells_small) CTF_FREE(cells);
    return rc;
}

static int convert_csv(conv *c)
{
    const ctf_convert_options *o = c->opt;
    csv_state st = {0};
    st.delim = o->delimiter ? o->delimiter : ',';
    if (!o->label_columns || !*o->label_columns)
        return ctf__fail(c->err, CTF_EINVAL, CTF__NOWHERE,
                         "CSV needs the label columns (--label COLS)");
    if (st.delim == ' ' || st.delim == '"' || st.delim == '\n' || st.delim == '\r')
        return ctf__fail(c->err, CTF_EINVAL, CTF__NOWHERE,
                         "delimiter: '%c' cannot separate CSV fields", st.delim);
    c->total = c->res->bytes_read;
    const char *line;
    size_t n;
    int rc;
    bool first = true;
    while ((rc = lines_next(&c->in, &line, &n, c->err)) > 0) {
        c->line = line;
        if ((rc = check_encoding(c, line, n))) break;
        size_t i = 0;
        while (i < n && (line[i] == ' ' || line[i] == '\t')) i++;
        if (i == n) continue; /* blank line */
        if (first) {
            first = false;
            if ((rc = csv_setup(c, &st, line, n, o->header))) break;
            if (o->header) continue;
        }
        if ((rc = csv_row(c, &st, line, n))) break;
        if ((rc = conv_progress(c, false))) break;
    }
    CTF_FREE(st.is_label);
    CTF_FREE(st.vals);
    CTF_FREE(st.as_is);
    if (rc) return rc;
    if (c->res->rows == 0)
        return ctf__fail(c->err, CTF_EPARSE, (ctf__where){c->in.path, 0, 0, -1},
                         "%s holds no data line", c->in.path);
    c->res->max_sequence_length = 1;
    return 0;
}

/*======================================================================
 * The output file
 *====================================================================*/

static int out_fail(ctf_error *err, const char *out_path, const char *fmt, const char *a,
                    const char *b)
{
    return ctf__fail(err, CTF_EIO, (ctf__where){out_path, 0, 0, -1}, fmt, a, b);
}

int ctf__out_finish(ctf__out_file *o, int rc, const char *out_path, ctf_error *err)
{
    if (!o->af.final) { /* in place, or never opened */
        int e = 0;
        if (o->f && fflush(o->f) != 0) e = errno ? errno : EIO;
        if (o->f && fclose(o->f) != 0 && !e) e = errno ? errno : EIO;
        o->f = NULL;
        if (!rc && e) rc = out_fail(err, out_path, "cannot write %s: %s", out_path, strerror(e));
        return rc;
    }
    o->f = NULL; /* the atomic file's own stream */
    if (rc) {
        ctf__atomic_abort(&o->af);
        return rc;
    }
    const int e = ctf__atomic_commit(&o->af);
    if (!e) return 0;
    const char *step = o->af.step ? o->af.step : "write";
    if (!strcmp(step, "rename"))
        return out_fail(err, out_path, "cannot rename the temporary file to %s: %s", out_path,
                        strerror(e));
    return out_fail(err, out_path,
                    !strcmp(step, "sync") ? "cannot sync %s to the disk: %s"
                                          : "cannot write %s: %s",
                    out_path, strerror(e));
}

static int out_create_tmp(ctf__out_file *o, ctf_error *err, const char *final, const char *out_path)
{
    int e = ctf__atomic_open(&o->af, final, ".part", 0);
    if (!e && !(o->f = ctf__atomic_stream(&o->af))) {
        e = errno ? errno : ENOMEM;
        ctf__atomic_abort(&o->af);
    }
    if (e == ENOMEM) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory (output path)");
    if (e == EEXIST)
        return out_fail(err, out_path, "cannot create a temporary file next to %s: %s", final,
                        "every name tried exists");
    if (e)
        return out_fail(err, out_path, "cannot create a temporary file next to %s: %s", final,
                        strerror(e));
    return 0;
}

int ctf__out_open(ctf__out_file *o, const char *in_path, int in_fd, const char *out_path,
                  ctf_error *err)
{
    struct stat in_st, st, lst;
    if ((in_fd >= 0 ? fstat(in_fd, &in_st) : stat(in_path, &in_st)) != 0)
        return out_fail(err, in_path, "cannot stat %s: %s", in_path, strerror(errno));
    bool exists = stat(out_path, &st) == 0;
    if (!exists && errno != ENOENT)
        return out_fail(err, out_path, "cannot stat %s: %s", out_path, strerror(errno));
    if (!strcmp(in_path, out_path) ||
        (exists && st.st_dev == in_st.st_dev && st.st_ino == in_st.st_ino))
        return ctf__fail(err, CTF_EINVAL, (ctf__where){out_path, 0, 0, -1},
                         "the output %s is the input file%s: converting would destroy it; name "
                         "another output",
                         out_path,
                         strcmp(in_path, out_path) ? " (another "
                                                     "name of it)"
                                                   : "");
    if (exists && S_ISDIR(st.st_mode))
        return out_fail(err, out_path, "cannot write %s: %s", out_path, "it is a directory");
    if (exists && !S_ISREG(st.st_mode)) {
        /* A device or a pipe (/dev/stdout, /dev/null) is written in place: renaming a file over
         * it would replace the device or the pipe itself. */
        o->f = fopen(out_path, "wb");
        if (!o->f) return out_fail(err, out_path, "cannot open %s: %s", out_path, strerror(errno));
        return 0;
    }
    bool link = lstat(out_path, &lst) == 0 && S_ISLNK(lst.st_mode);
    if (link && !exists)
        return out_fail(err, out_path,
                        "%s is a symbolic link to a missing file (%s); remove it "
                        "or name another output",
                        out_path, "nothing was written");
    /* Through a link, the file it names is replaced and the link kept, as a write would. */
    if (!link) return out_create_tmp(o, err, out_path, out_path);
    char *target = realpath(out_path, NULL);
    if (!target) return out_fail(err, out_path, "cannot resolve %s: %s", out_path, strerror(errno));
    int rc = out_create_tmp(o, err, target, out_path);
    free(target);
    return rc;
}

/*======================================================================
 * Public entry points
 *====================================================================*/

int ctf_convert_file(const char *in_path, const char *out_path, const ctf_convert_options *opt,
                     ctf_convert_result *result, ctf_error *err)
{
    ctf__error_clear(err);
    ctf_convert_result dummy;
    ctf_convert_result *r = result ? result : &dummy;
    memset(r, 0, sizeof *r);
    if (!in_path || !out_path || !opt)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                         "convert: input, output and options are required");
    if (opt->format != CTF_CONVERT_LIBSVM && opt->format != CTF_CONVERT_CSV)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "convert: unknown format %d",
                         (int)opt->format);
    conv c = {opt, r, err, {0}, NULL, NULL, NULL, NULL, 0, 0, 0, NULL, 0};
    c.fname = opt->features_name && *opt->features_name ? opt->features_name : "features";
    c.lname = opt->labels_name && *opt->labels_name ? opt->labels_name : "labels";
    if (!strcmp(c.fname, c.lname) || strpbrk(c.fname, " \t|:\n") || strpbrk(c.lname, " \t|:\n"))
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                         "convert: stream names must differ and hold no blank, '|' or ':' "
                         "('%s', '%s')",
                         c.fname, c.lname);
    ctf__out_file o = {0};
    ctf__file_id id;
    int rc = ctf__file_stat(in_path, &id, err);
    if (rc) return rc;
    r->bytes_read = id.size;
    if ((rc = lines_open(&c.in, in_path, err))) return rc;

    c.outbuf = CTF_MALLOC(CONV_BLOCK);
    if (!c.outbuf) {
        rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory (output buffer)");
        goto done;
    }
    if ((rc = ctf__out_open(&o, in_path, fileno(c.in.f), out_path, err))) goto done;
    c.out = o.f;
    setvbuf(c.out, c.outbuf, _IOFBF, CONV_BLOCK);
    rc = opt->format == CTF_CONVERT_LIBSVM ? convert_libsvm(&c) : convert_csv(&c);
    if (!rc) rc = conv_progress(&c, true);
    if (!rc) {
        long pos = ftell(c.out); /* -1 on a pipe: counted as 0 */
        r->bytes_written = pos > 0 ? (uint64_t)pos : 0;
    }
    if (!rc && c.write_errno)
        rc = out_fail(err, out_path, "cannot write %s: %s", out_path, strerror(c.write_errno));
    rc = ctf__out_finish(&o, rc, out_path, err);
    c.out = NULL;
done:
    lines_close(&c.in);
    ctf__out_finish(&o, rc ? rc : CTF_EIO, out_path, NULL);
    CTF_FREE(c.outbuf);
    return rc;
}
