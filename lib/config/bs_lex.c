/*
 * bs_lex.c -- the arena, source files and the tokenizer of CNTK's configuration language.
 *
 * Tokens are BrainScript's: numbers (with exponents), '...' and "..." strings (no escapes, may
 * span lines), identifiers and keywords, and its punctuation (one or two characters). Comments
 * are '#' and '//' to the end of the line and '/' '*' ... '*' '/'. `include "file"` is expanded
 * here, as in CNTK: the included file's tokens take its place.
 *
 * CNTK's configuration files are older than BrainScript, and the older syntax survives in them:
 * `$X$` substitutions (CNTK replaces them as text before parsing) and unquoted paths such as
 * `../Data`, `$OutDir$/log` or `train-01.ctf`. Such a run of path characters that does not read
 * as a BrainScript expression is one T_RAW token; an exact `$X$` is one T_SUBST token.
 */
#include "bs.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/*======================================================================
 * Arena
 *====================================================================*/

struct bs_block {
    bs_block *next;
    size_t used, cap;
    max_align_t data[];
};

void *ctf__bs_alloc(bs_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    bs_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = CTF_MALLOC(sizeof *b + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = a->head;
        a->head = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *ctf__bs_strndup(bs_arena *a, const char *s, size_t n)
{
    char *d = ctf__bs_alloc(a, n + 1);
    if (d) memcpy(d, s, n);
    return d;
}

int ctf__bs_grow(bs_arena *a, void *items_ptr, size_t *cap, size_t need, size_t elt)
{
    void **items = items_ptr;
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 4;
    while (nc < need) nc *= 2;
    void *p = ctf__bs_alloc(a, nc * elt);
    if (!p) return CTF_ENOMEM;
    if (*items) memcpy(p, *items, *cap * elt);
    *items = p;
    *cap = nc;
    return 0;
}

void ctf__bs_arena_free(bs_arena *a)
{
    while (a->head) {
        bs_block *n = a->head->next;
        CTF_FREE(a->head);
        a->head = n;
    }
}

int ctf__bs_oom(ctf_error *err)
{
    return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading the configuration");
}

int ctf__bs_fail(ctf_error *err, const bs_src *src, uint32_t line, uint32_t col, const char *fmt,
                 ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = ctf__vfail(err, CTF_EINVAL, (ctf__where){src ? src->name : NULL, line, col, -1}, fmt,
                        ap);
    va_end(ap);
    return rc;
}

int ctf__bs_read_file(bs_arena *a, const char *path, bs_src **out, ctf_error *err)
{
    const ctf__where w = {path, 0, 0, -1};
    FILE *f = ctf__fopen_regular(path);
    if (!f)
        return ctf__fail(err, CTF_EIO, w, "cannot open the configuration file: %s",
                         errno == EINVAL ? "not a regular file" : strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        void *p = buf;
        if (ctf__grow(&p, &cap, n + 4096, 1)) {
            rc = ctf__bs_oom(err);
            break;
        }
        buf = p;
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f))
                rc = ctf__fail(err, CTF_EIO, w, "cannot read the configuration file: %s",
                               strerror(errno));
            break;
        }
        if (n > BS_MAX_FILE) {
            rc = ctf__fail(err, CTF_EINVAL, w, "larger than %u bytes: not a configuration file?",
                           BS_MAX_FILE);
            break;
        }
    }
    fclose(f);
    bs_src *s = NULL;
    if (!rc &&
        (!(s = ctf__bs_alloc(a, sizeof *s)) || !(s->text = ctf__bs_strndup(a, buf ? buf : "", n)) ||
         !(s->name = ctf__bs_strndup(a, path, strlen(path)))))
        rc = ctf__bs_oom(err);
    CTF_FREE(buf);
    if (!rc) {
        s->len = n;
        *out = s;
    }
    return rc;
}

/*======================================================================
 * Characters and raw words
 *====================================================================*/

static bool id_start(unsigned char c) { return isalpha(c) || c == '_' || c >= 0x80; }
static bool id_char(unsigned char c) { return isalnum(c) || c == '_' || c >= 0x80; }

/* Characters of an unquoted path or of a $X$ glued to text. */
static bool path_char(unsigned char c)
{
    return id_char(c) || c == '.' || c == '-' || c == '/' || c == '\\' || c == '$' || c == '~' ||
           c == '*' || c == '?' || c == '+';
}

/* Whether the '/' '*' at p, glued to a word, opens a comment: CNTK's networks put comments
 * right after a number (`0` then a comment on why), while `data/` '*' `.ctf` is a pattern. A
 * comment closes on its line before another '/' '*' opens; a pattern does not close at all. */
static bool glued_comment(const char *p, const char *end)
{
    if (end - p < 2 || p[0] != '/' || p[1] != '*') return false;
    for (const char *q = p + 2; q + 1 < end && *q != '\n'; q++) {
        if (q[0] == '*' && q[1] == '/') return true;
        if (q[0] == '/' && q[1] == '*') return false;
    }
    return false;
}

/* Scans a number at p (digits, fraction unless '..', exponent). @return : its end, or p. */
static const char *scan_number(const char *p, const char *end)
{
    const char *q = p;
    while (q < end && isdigit((unsigned char)*q)) q++;
    if (q < end && *q == '.' && q + 1 < end && isdigit((unsigned char)q[1])) {
        q++;
        while (q < end && isdigit((unsigned char)*q)) q++;
    }
    if (q == p) return p;
    if (q < end && (*q == 'e' || *q == 'E')) {
        const char *r = q + 1;
        if (r < end && (*r == '+' || *r == '-')) r++;
        if (r < end && isdigit((unsigned char)*r)) {
            while (r < end && isdigit((unsigned char)*r)) r++;
            q = r;
        }
    }
    return q;
}

/* Whether the run [p, e) reads as BrainScript: operands (names with .member, numbers) joined by
 * - + * / ** or .. . `maxLayer-1`, `1/256`, `0..n-1`, `out.z` do; `../Data`, `part-01.ctf`,
 * `0.7b`, `a//b` do not. A trailing operator is fine (the expression goes on after the run). */
static bool run_is_expression(const char *p, const char *e)
{
    bool want_operand = true;
    while (p < e) {
        if (want_operand) {
            if (*p == '-' || *p == '+') {
                p++;
                continue;
            }
            if (id_start((unsigned char)*p)) {
                while (p < e && id_char((unsigned char)*p)) p++;
                while (p + 1 < e && p[0] == '.' && id_start((unsigned char)p[1])) {
                    p++;
                    while (p < e && id_char((unsigned char)*p)) p++;
                }
            } else {
                const char *q = scan_number(p, e);
                if (q == p) return false;
                p = q;
            }
            want_operand = false;
        } else {
            if (p + 1 < e && p[0] == '.' && p[1] == '.')
                p += 2;
            else if (p + 1 < e && p[0] == '*' && p[1] == '*')
                p += 2;
            else if (*p == '-' || *p == '+' || *p == '*')
                p++;
            else if (*p == '/' && !(p + 1 < e && (p[1] == '/' || p[1] == '*')))
                p++;
            else
                return false;
            want_operand = true;
        }
    }
    return true;
}

/*======================================================================
 * Tokenizer
 *====================================================================*/

void ctf__bs_lex_init(bs_lexer *lx, bs_arena *a, const bs_src *src, ctf_error *err)
{
    memset(lx, 0, sizeof *lx);
    lx->arena = a;
    lx->err = err;
    bs_frame *f = &lx->stack[0];
    f->src = src;
    f->p = f->line_start = src->text;
    f->line = 1;
    if (src->len >= 3 && memcmp(src->text, "\xEF\xBB\xBF", 3) == 0)
        f->p = f->line_start = src->text + 3;
}

bool ctf__bs_is_op(const bs_tok *t, const char *op)
{
    return t->kind == T_PUNCT && t->n == strlen(op) && memcmp(t->s, op, t->n) == 0;
}

bool ctf__bs_is_kw(const bs_tok *t, const char *kw)
{
    return t->kind == T_ID && t->n == strlen(kw) && memcmp(t->s, kw, t->n) == 0;
}

const char *ctf__bs_tok_desc(const bs_tok *t, char *buf, size_t cap)
{
    switch (t->kind) {
    case T_EOF: snprintf(buf, cap, "the end of the file"); break;
    case T_STR: snprintf(buf, cap, "a string"); break;
    case T_BADINC: snprintf(buf, cap, "an include"); break;
    case T_SUBST: snprintf(buf, cap, "'$%.*s$'", (int)CTF_MIN(t->n, 40), t->s); break;
    default: snprintf(buf, cap, "'%.*s'", (int)CTF_MIN(t->n, 40), t->s); break;
    }
    return buf;
}

static const char *const two_char_ops[] = {"[|", "|]", "**", ".*", "||", "&&", "<<",
                                           ">>", "==", "!=", "<=", ">=", "=>", ".."};
static const char one_char_ops[] = "=;,[](){}+-*/%!<>:.";
/* Characters that begin no expression: after '=' they begin a legacy unquoted value. */
static const char legacy_value_start[] = "%|&^@";

static int lex_include(bs_lexer *lx, bs_tok *t);

/* Skips white space and comments; sets *nl when a line ends on the way. */
static int skip_space(bs_lexer *lx, bool *nl)
{
    for (;;) {
        bs_frame *f = &lx->stack[lx->depth];
        const char *p = f->p, *end = f->src->text + f->src->len;
        for (;;) {
            while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\f' || *p == '\v'))
                p++;
            if (p < end && *p == '\n') {
                *nl = true;
                f->line++;
                f->line_start = ++p;
            } else if (p < end && (*p == '#' || (*p == '/' && p + 1 < end && p[1] == '/'))) {
                while (p < end && *p != '\n') p++;
            } else if (p + 1 < end && p[0] == '/' && p[1] == '*') {
                uint32_t line = f->line, col = (uint32_t)(p - f->line_start) + 1;
                p += 2;
                while (p < end && !(p[0] == '*' && p + 1 < end && p[1] == '/')) {
                    if (*p == '\n') {
                        f->line++;
                        f->line_start = p + 1;
                        *nl = true;
                    }
                    p++;
                }
                if (p >= end) {
                    f->p = p;
                    return ctf__bs_fail(lx->err, f->src, line, col, "comment without closing */");
                }
                p += 2;
            } else {
                break;
            }
        }
        f->p = p;
        if (p < end || lx->depth == 0) return 0;
        lx->depth--; /* the end of an included file: go on after the include */
        *nl = true;
    }
}

int ctf__bs_lex_next(bs_lexer *lx)
{
    bool nl = false;
    int rc = skip_space(lx, &nl);
    if (rc) return rc;
    bs_frame *f = &lx->stack[lx->depth];
    const char *p = f->p, *end = f->src->text + f->src->len;
    bs_tok *t = &lx->cur;
    memset(t, 0, sizeof *t);
    t->src = f->src;
    t->line = f->line;
    t->col = (uint32_t)(p - f->line_start) + 1;
    t->line_initial = nl || (f->line == 1 && p == f->line_start);
    t->beg = t->s = p;
    bool after_operand = lx->prev_operand && !nl;
    const bool after_assign = lx->prev_assign && !nl;
    lx->prev_assign = false;
    if (p == end) {
        t->kind = T_EOF;
        t->end = p;
        return 0;
    }
    unsigned char c = (unsigned char)*p;
    const char *q = p;
    if (c == '"' || c == '\'') {
        const char *s = ++q;
        uint32_t line = f->line;
        const char *ls = f->line_start;
        while (q < end && *q != (char)c) {
            if (*q == '\n') {
                line++;
                ls = q + 1;
            }
            q++;
        }
        if (q == end)
            return ctf__bs_fail(lx->err, f->src, t->line, t->col,
                                "unterminated string: no closing %c "
                                "before the end of the file",
                                c);
        /* A value is a C string from here on: a NUL would silently cut it (a path, above all). */
        const char *nul = memchr(s, 0, (size_t)(q - s));
        if (nul) {
            uint32_t nl_line = t->line, ncol = t->col + 1 + (uint32_t)(nul - s);
            for (const char *r = s; r < nul; r++)
                if (*r == '\n') {
                    nl_line++;
                    ncol = (uint32_t)(nul - r);
                }
            return ctf__bs_fail(lx->err, f->src, nl_line, ncol, "a NUL byte inside a string");
        }
        f->line = line;
        f->line_start = ls;
        t->kind = T_STR;
        t->s = s;
        t->n = (size_t)(q - s);
        f->p = t->end = q + 1;
        lx->prev_operand = true;
        return 0;
    }
    /* CNTK's older configuration syntax takes what follows '=' as a string when it is no
     * expression: `RootDir = .` (the directory itself), and a writer's
     * `sequencePrologue=%d\t|w.shape %x\n` (a format, to the end of its line). */
    if (after_assign) {
        const char *r = q + 1;
        if (c == '.' && (r == end || isspace((unsigned char)*r) || *r == ';' || *r == ']')) {
            t->kind = T_RAW;
            t->n = 1;
            f->p = t->end = r;
            lx->prev_operand = true;
            return 0;
        }
        if (c && strchr(legacy_value_start, (int)c)) {
            r = q;
            while (r < end && *r != '\n' && *r != '\r') r++;
            while (r > q && isspace((unsigned char)r[-1])) r--;
            /* The brackets that close sections on the same line are not the value's. */
            while (r > q + 1 && r[-1] == ']' && isspace((unsigned char)r[-2])) {
                r -= 2;
                while (r > q && isspace((unsigned char)r[-1])) r--;
            }
            t->kind = T_RAW;
            t->n = (size_t)(r - q);
            f->p = t->end = r;
            lx->prev_operand = true;
            return 0;
        }
    }
    /* A run of path characters: an identifier or number, a $X$, or an old-style raw word. */
    bool path_start = (c == '.' && !(q + 1 < end && isdigit((unsigned char)q[1]))) || c == '/' ||
                      c == '\\' || c == '~';
    if (id_char(c) || c == '$' ||
        (path_start && !after_operand && q + 1 < end &&
         (path_char((unsigned char)q[1]) || c == '~'))) {
        const char *r = q;
        while (r < end && path_char((unsigned char)*r)) {
            /* '//' ends the word (a comment); '/' '*' glued to a word is a path pattern
             * (data/'*'.ctf), since a comment follows white space in practice. */
            if (r > q && r[0] == '/' && r + 1 < end && r[1] == '/' && !path_start) break;
            if (r > q && glued_comment(r, end)) break;
            r++;
        }
        /* An unquoted Windows drive (c:\data, c:/data) keeps its ':'. */
        if (r - q == 1 && isalpha(c) && end - r >= 2 && r[0] == ':' &&
            (r[1] == '\\' || r[1] == '/')) {
            r++;
            while (r < end && path_char((unsigned char)*r)) r++;
        }
        bool has_dollar = memchr(q, '$', (size_t)(r - q)) != NULL;
        const char *name_end = q + 1;
        while (name_end < r && id_char((unsigned char)*name_end)) name_end++;
        if (c == '$' && name_end > q + 1 && name_end < r && *name_end == '$' && name_end + 1 == r) {
            t->kind = T_SUBST;
            t->s = q + 1;
            t->n = (size_t)(name_end - q - 1);
            f->p = t->end = r;
            lx->prev_operand = true;
            return 0;
        }
        if (has_dollar || path_start || memchr(q, '\\', (size_t)(r - q)) ||
            memchr(q, '?', (size_t)(r - q)) || memchr(q, ':', (size_t)(r - q)) ||
            !run_is_expression(q, r)) {
            t->kind = T_RAW;
            t->n = (size_t)(r - q);
            f->p = t->end = r;
            lx->prev_operand = true;
            return 0;
        }
    }
    if (isdigit(c) || (c == '.' && q + 1 < end && isdigit((unsigned char)q[1]))) {
        const char *r = scan_number(c == '.' ? q + 1 : q, end);
        if (c == '.') {
            r = q + 1;
            while (r < end && isdigit((unsigned char)*r)) r++;
        }
        char buf[64];
        size_t n = (size_t)(r - q);
        if (n >= sizeof buf)
            return ctf__bs_fail(lx->err, f->src, t->line, t->col, "number too long");
        memcpy(buf, q, n);
        buf[n] = 0;
        t->kind = T_NUM;
        t->num = strtod(buf, NULL);
        t->n = n;
        f->p = t->end = r;
        lx->prev_operand = true;
        return 0;
    }
    if (id_start(c)) {
        while (q < end && id_char((unsigned char)*q)) q++;
        t->kind = T_ID;
        t->n = (size_t)(q - p);
        f->p = t->end = q;
        if (ctf__bs_is_kw(t, "include")) return lex_include(lx, t);
        lx->prev_operand = !(ctf__bs_is_kw(t, "if") || ctf__bs_is_kw(t, "then") ||
                             ctf__bs_is_kw(t, "else") || ctf__bs_is_kw(t, "new") ||
                             ctf__bs_is_kw(t, "with") || ctf__bs_is_kw(t, "array"));
        return 0;
    }
    t->kind = T_PUNCT;
    for (size_t i = 0; i < sizeof two_char_ops / sizeof *two_char_ops; i++)
        if (end - p >= 2 && p[0] == two_char_ops[i][0] && p[1] == two_char_ops[i][1]) t->n = 2;
    if (!t->n) {
        if (!c || !strchr(one_char_ops, c)) {
            if (isprint(c))
                return ctf__bs_fail(lx->err, f->src, t->line, t->col, "unexpected character '%c'",
                                    c);
            return ctf__bs_fail(lx->err, f->src, t->line, t->col,
                                "unexpected character (byte 0x%02x)", c);
        }
        t->n = 1;
    }
    f->p = t->end = p + t->n;
    lx->prev_operand = ctf__bs_is_op(t, ")") || ctf__bs_is_op(t, "]") || ctf__bs_is_op(t, "}") ||
                       ctf__bs_is_op(t, "|]");
    lx->prev_assign = ctf__bs_is_op(t, "=");
    return 0;
}

/*======================================================================
 * include "file"
 *====================================================================*/

/* Expands $X$ in an include path through the parser's resolver (the members defined so far). */
static int include_path(bs_lexer *lx, const bs_tok *name, char *buf, size_t cap)
{
    size_t n = 0;
    for (const char *p = name->s, *e = name->s + name->n; p < e;) {
        const char *q = p + 1;
        while (q < e && id_char((unsigned char)*q)) q++;
        const char *v = NULL;
        size_t vn = 0;
        if (*p == '$' && q > p + 1 && q < e && *q == '$') {
            if (lx->resolve) v = lx->resolve(lx->resolve_ctx, p + 1, (size_t)(q - p - 1), &vn);
            if (!v) {
                snprintf(buf, cap, "undefined variable '$%.*s$' in the include path",
                         (int)(q - p - 1), p + 1);
                return -1;
            }
            p = q + 1;
        } else {
            v = p++;
            vn = 1;
        }
        if (n + vn >= cap) {
            snprintf(buf, cap, "include path too long");
            return -1;
        }
        memcpy(buf + n, v, vn);
        n += vn;
    }
    buf[n] = 0;
    return 0;
}

/* Reads an included file. A relative path is looked for next to the including file, then
 * (as CNTK did) relative to the current directory. @return : 0 and *out, 1 with why filled
 * (the file cannot be read), or an error. */
static int open_include(bs_lexer *lx, const bs_tok *kw, const char *rel, bs_src **out, char *why,
                        size_t cap)
{
    char path[2200];
    const char *from = kw->src->name, *slash = strrchr(from, '/');
    if (rel[0] != '/' && slash)
        snprintf(path, sizeof path, "%.*s/%.1023s", (int)CTF_MIN(slash - from, 1024), from, rel);
    else
        snprintf(path, sizeof path, "%.1023s", rel);
    if (lx->depth >= BS_MAX_INCLUDE)
        return ctf__bs_fail(lx->err, kw->src, kw->line, kw->col,
                            "include \"%s\": includes nested "
                            "more than %d deep (does a file include itself?)",
                            path, BS_MAX_INCLUDE);
    /* Each include puts a whole file in its place: a few files that include each other many
     * times multiply (k files, each including the next n times, are n^k copies). */
    if (lx->includes >= BS_MAX_INCLUDES)
        return ctf__bs_fail(lx->err, kw->src, kw->line, kw->col,
                            "include \"%s\": more than %d "
                            "includes in one configuration (do files include each other many "
                            "times?)",
                            path, BS_MAX_INCLUDES);
    ctf_error e;
    int rc = ctf__bs_read_file(lx->arena, path, out, &e);
    if (rc == CTF_EIO && strcmp(path, rel) != 0) rc = ctf__bs_read_file(lx->arena, rel, out, &e);
    if (rc == CTF_ENOMEM) return ctf__bs_oom(lx->err);
    if (!rc) {
        lx->includes++;
        lx->included += (*out)->len;
        if (lx->included > BS_MAX_INCLUDED)
            return ctf__bs_fail(lx->err, kw->src, kw->line, kw->col,
                                "include \"%s\": the included "
                                "files exceed %u bytes in all (do files include each other many "
                                "times?)",
                                path, BS_MAX_INCLUDED);
        return 0;
    }
    snprintf(why, cap, "include \"%.1000s\": %.400s", path, e.message);
    return 1;
}

static void push_source(bs_lexer *lx, bs_src *src)
{
    bs_frame *f = &lx->stack[++lx->depth];
    f->src = src;
    f->p = f->line_start = src->text;
    f->line = 1;
    if (src->len >= 3 && memcmp(src->text, "\xEF\xBB\xBF", 3) == 0)
        f->p = f->line_start = src->text + 3;
}

/* CNTK's older form, `include=a.cntk+b.cntk`: the rest of the line lists files joined by '+'. */
static int old_include(bs_lexer *lx, const bs_tok *kw, char *why, size_t cap)
{
    bs_frame *f = &lx->stack[lx->depth];
    const char *p = f->p, *end = f->src->text + f->src->len;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    p++; /* '=' */
    const char *eol = p;
    while (eol < end && *eol != '\n' && *eol != '#') eol++;
    f->p = eol; /* the including file goes on at the line's end */
    bs_src *srcs[BS_MAX_INCLUDE];
    size_t n = 0;
    for (const char *q = p; q < eol;) {
        const char *plus = memchr(q, '+', (size_t)(eol - q));
        const char *e = plus ? plus : eol, *b = q;
        q = plus ? plus + 1 : eol;
        while (b < e && (*b == ' ' || *b == '\t' || *b == '\r')) b++;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r')) e--;
        if (e - b >= 2 && (*b == '"' || *b == '\'') && e[-1] == *b) b++, e--;
        if (b == e) continue;
        char rel[1024];
        snprintf(rel, sizeof rel, "%.*s", (int)CTF_MIN(e - b, 1023), b);
        if (n == BS_MAX_INCLUDE || lx->depth + (int)n >= BS_MAX_INCLUDE)
            return ctf__bs_fail(lx->err, kw->src, kw->line, kw->col,
                                "include: more than %d files "
                                "open at once",
                                BS_MAX_INCLUDE);
        int rc = open_include(lx, kw, rel, &srcs[n], why, cap);
        if (rc) return rc;
        n++;
    }
    if (!n) return ctf__bs_fail(lx->err, kw->src, kw->line, kw->col, "include=: no file named");
    while (n-- > 0) push_source(lx, srcs[n]); /* the first file is read first */
    return 0;
}

static int lex_include(bs_lexer *lx, bs_tok *t)
{
    bs_tok kw = *t;
    char rel[1024], why[1600];
    int rc;
    const char *p = lx->stack[lx->depth].p, *end = kw.src->text + kw.src->len;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    if (p < end && *p == '=') {
        if ((rc = old_include(lx, &kw, why, sizeof why)) < 0) return rc;
        kw.end = lx->stack[lx->depth].p;
    } else {
        if ((rc = ctf__bs_lex_next(lx))) return rc;
        bs_tok name = lx->cur;
        if (name.kind != T_STR)
            return ctf__bs_fail(lx->err, name.src, name.line, name.col,
                                "'include' must be followed "
                                "by a quoted file name");
        kw.end = name.end;
        bs_src *src = NULL;
        if (include_path(lx, &name, rel, sizeof rel)) {
            snprintf(why, sizeof why, "%s", rel);
            rc = 1;
        } else if ((rc = open_include(lx, &kw, rel, &src, why, sizeof why)) < 0) {
            return rc;
        } else if (!rc) {
            push_source(lx, src);
        }
    }
    if (!rc) {
        lx->prev_operand = false;
        if ((rc = ctf__bs_lex_next(lx))) return rc;
        lx->cur.line_initial = true;
        return 0;
    }
    /* A file that cannot be included is an error only where its content is needed: the parser
     * keeps this token in the tree and evaluation reports it if it gets there. */
    *t = kw;
    t->kind = T_BADINC;
    if (!(t->s = ctf__bs_strndup(lx->arena, why, strlen(why)))) return ctf__bs_oom(lx->err);
    t->n = strlen(why);
    lx->prev_operand = true;
    return 0;
}
