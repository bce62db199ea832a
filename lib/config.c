/*
 * config.c -- the reader configuration: defaults and validation of struct ctf_config, and the
 * BrainScript configuration files of SPEC 3 (ctf_bsconfig_*).
 *
 * ctf_bsconfig_parse reads a file in three steps:
 *   1. A tokenizer and a recursive-descent parser build a small tree of dictionaries ([ ] and
 *      { }), arrays (( ) or a:b:c) and scalars. Scalars keep their text, because CNTK's
 *      configuration language is untyped: whether "5" is a number is decided only when a
 *      parameter reads it. Every node remembers its line and column for messages.
 *   2. The reader is selected (the top-level `reader`, or that of a named block or of the only
 *      block that has one; in the composite form also its one CNTKTextFormatDeserializer), and
 *      the command-line overrides are grafted on as assignments written after the file.
 *   3. `$name$` references in the selected reader, and in a `precision` inherited from an
 *      enclosing block, are expanded in place. Nothing else is: a full CNTK configuration may
 *      use variables elsewhere (network, SGD) that only CNTK defines.
 * ctf_bsconfig_apply walks the reader's keys once, rejects unknown ones, type-checks each value
 * and fills a ctf_config. It allocates nothing (parse sized the stream array), so allocation
 * failures only matter in parse, and a failed apply leaves the caller's ctf_config untouched.
 *
 * Errors: syntax errors carry the file, line and column of the offending token, value errors
 * those of the value, unknown keys those of the key. Nodes from command-line overrides have
 * line 0, and their messages say so.
 *
 * Adding a reader parameter: extend enum key_id and key_names[] together, read the value in
 * ctf_bsconfig_apply and add a row to the key table of docs/config.md (ctfio.h lists the other
 * places a new ctf_config field must reach).
 */
#include "ctfio_internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <strings.h>
#include <unistd.h>

#define MAX_DEPTH 64            /* nesting of blocks and arrays: bounds the parser's recursion */
#define MAX_SUBST_DEPTH 16      /* $a$ -> $b$ -> ...: deeper is treated as a cycle */
#define MAX_VALUE_BYTES 65536   /* length of one value after substitution */
#define MAX_FILE_BYTES (16u << 20) /* a larger "configuration" is almost surely the wrong file */
#define MAX_OVERRIDE_PARTS 16   /* components of a dotted override key */

#if defined(__GNUC__)
#define PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define PRINTF_LIKE(f, a)
#endif

/*======================================================================
 * ctf_config: defaults and validation
 *====================================================================*/

void ctf_config_init(ctf_config *cfg)
{
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    cfg->precision = CTF_FLOAT32;
    cfg->randomize = true;
    cfg->randomization_window = CTF_DEFAULT_WINDOW_CHUNKS;
    cfg->trace_level = 1;
    cfg->chunk_size_bytes = CTF_DEFAULT_CHUNK_SIZE_BYTES;
    cfg->max_samples = CTF_INFINITELY_REPEAT;
    cfg->max_sweeps = CTF_INFINITELY_REPEAT;
    cfg->num_workers = 1;
    /* SPEC 10: as many parse threads as cores (at least one), a few chunks ahead each. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cfg->num_threads = cores > 0 ? (size_t)cores : 1;
    cfg->prefetch_chunks = 2 * cfg->num_threads + 2;
}

static const char *stream_alias(const ctf_stream_def *s)
{
    return s->alias && s->alias[0] ? s->alias : s->name;
}

#define BAD(...) ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, __VA_ARGS__)

int ctf_config_validate(const ctf_config *cfg, ctf_error *err)
{
    if (!cfg) return BAD("config: NULL configuration");
    if (!cfg->path || !cfg->path[0])
        return BAD("config.path: the data file is required (got %s)", cfg->path ? "\"\"" : "NULL");
    if (cfg->num_streams == 0 || !cfg->streams)
        return BAD("config.streams: at least one input stream is required (got none)");
    if (cfg->num_streams > CTF_MAX_STREAMS)
        return BAD("config.num_streams: at most %d streams are supported (got %zu)",
                   CTF_MAX_STREAMS, cfg->num_streams);
    const ctf_stream_def *mb = NULL;
    for (size_t i = 0; i < cfg->num_streams; i++) {
        const ctf_stream_def *s = &cfg->streams[i];
        if (!s->name || !s->name[0])
            return BAD("config.streams[%zu].name: must be a non-empty string (got %s)", i,
                       s->name ? "\"\"" : "NULL");
        if (s->dim == 0) return BAD("config.streams[%zu].dim: must be > 0 (got 0)", i);
        if (s->is_sparse && s->dim > (size_t)INT32_MAX)
            return BAD("config.streams[%zu].dim: a sparse dimension must be <= %d because "
                       "indices are int32 (got %zu)", i, INT32_MAX, s->dim);
        for (size_t j = 0; j < i; j++) {
            const ctf_stream_def *o = &cfg->streams[j];
            if (strcmp(s->name, o->name) == 0)
                return BAD("config.streams[%zu].name: duplicate name '%s' (also used by "
                           "config.streams[%zu])", i, s->name, j);
            if (strcmp(stream_alias(s), stream_alias(o)) == 0)
                return BAD("input.%s.alias: duplicate alias '%s' (also used by input.%s)",
                           s->name, stream_alias(s), o->name);
        }
        if (s->defines_mb_size) {
            if (mb)
                return BAD("input.%s.definesMBSize: only one stream may define the minibatch "
                           "size (also set on input.%s)", s->name, mb->name);
            mb = s;
        }
    }
    if (cfg->max_samples != CTF_INFINITELY_REPEAT && cfg->max_sweeps != CTF_INFINITELY_REPEAT)
        return BAD("config.max_samples: cannot be combined with config.max_sweeps; set one of "
                   "them (got max_samples %llu, max_sweeps %llu)",
                   (unsigned long long)cfg->max_samples, (unsigned long long)cfg->max_sweeps);
    if (cfg->frame_mode && cfg->truncation_length > 0)
        return BAD("config.truncation_length: truncation cannot be combined with frame_mode "
                   "(got %zu)", cfg->truncation_length);
    if (cfg->chunk_size_bytes == 0)
        return BAD("config.chunk_size_bytes: must be >= 1 (got 0)");
    if (cfg->num_workers == 0) return BAD("config.num_workers: must be >= 1 (got 0)");
    if (cfg->worker_rank >= cfg->num_workers)
        return BAD("config.worker_rank: must be < num_workers (got rank %zu with %zu workers)",
                   cfg->worker_rank, cfg->num_workers);
    if (cfg->precision != CTF_FLOAT32 && cfg->precision != CTF_FLOAT64)
        return BAD("config.precision: must be CTF_FLOAT32 (4) or CTF_FLOAT64 (8) (got %d)",
                   (int)cfg->precision);
    if (cfg->trace_level < 0 || cfg->trace_level > 2)
        return BAD("config.trace_level: must be 0, 1 or 2 (got %d)", cfg->trace_level);
    return 0;
}

/*======================================================================
 * The syntax tree
 *====================================================================*/

typedef enum node_kind { N_SCALAR, N_DICT, N_ARRAY } node_kind;

typedef struct node node;
struct node {
    node_kind kind;
    bool quoted;             /* scalar written in quotes */
    bool expanded;           /* $name$ references already substituted into text */
    uint32_t line, col;      /* where the value starts, 1-based; 0 for command-line overrides */
    uint32_t key_line, key_col; /* where this entry's key is */
    char *key;               /* entry name in a dictionary; NULL for array items and the root */
    char *text;              /* scalar text */
    node *parent;            /* enclosing dictionary or array; NULL for the root */
    node **kids;             /* dictionary entries or array items, in file order */
    size_t num_kids, cap_kids;
};

struct ctf_bsconfig {
    char *name;               /* the path used in messages */
    node *root;               /* the whole file plus the overrides */
    node *section;            /* the top-level block holding the reader; NULL: top-level reader */
    node *reader;             /* the selected reader block */
    node *deser;              /* composite form: its CNTKTextFormatDeserializer block, else NULL */
    node *input;              /* the input block that applies (deserializer's, else reader's) */
    node *outer_precision;    /* `precision` inherited from an enclosing block, or NULL */
    ctf_stream_def *streams;  /* one per entry of input; ctf_bsconfig_apply fills them */
};

static int oom(ctf_error *err)
{
    return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading the configuration");
}

static void node_free(node *n)
{
    if (!n) return;
    for (size_t i = 0; i < n->num_kids; i++) node_free(n->kids[i]);
    CTF_FREE(n->kids);
    CTF_FREE(n->key);
    CTF_FREE(n->text);
    CTF_FREE(n);
}

/* Frees a node that could not be attached and reports the allocation failure. */
static int free_oom(node *n, ctf_error *err)
{
    node_free(n);
    return oom(err);
}

static node *node_new(node_kind kind, uint32_t line, uint32_t col)
{
    node *n = CTF_CALLOC(1, sizeof *n);
    if (n) {
        n->kind = kind;
        n->line = line;
        n->col = col;
    }
    return n;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = CTF_MALLOC(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

static bool name_eq(const char *a, const char *b, size_t bn)
{
    return strlen(a) == bn && strncasecmp(a, b, bn) == 0;
}

static bool name_is(const char *a, const char *b, size_t bn)
{
    return strlen(a) == bn && memcmp(a, b, bn) == 0;
}

/* CNTK's configuration is case-insensitive, so lookups are too; the last definition wins. */
static node *dict_find_n(const node *d, const char *key, size_t n, const node *skip)
{
    if (!d || d->kind != N_DICT) return NULL;
    for (size_t i = d->num_kids; i-- > 0;)
        if (d->kids[i] != skip && name_eq(d->kids[i]->key, key, n)) return d->kids[i];
    return NULL;
}

static node *dict_find(const node *d, const char *key)
{
    return dict_find_n(d, key, strlen(key), NULL);
}

/* Appends child to d, taking ownership even on failure. In a dictionary a later assignment to
 * exactly the same name replaces the earlier one in place (CNTK: the last definition wins);
 * names that differ only in case stay apart because stream names are case-sensitive. */
static int node_add(node *d, node *child)
{
    child->parent = d;
    if (d->kind == N_DICT)
        for (size_t i = 0; i < d->num_kids; i++)
            if (strcmp(d->kids[i]->key, child->key) == 0) {
                node_free(d->kids[i]);
                d->kids[i] = child;
                return 0;
            }
    void *p = d->kids;
    if (ctf__grow(&p, &d->cap_kids, d->num_kids + 1, sizeof *d->kids)) {
        node_free(child);
        return CTF_ENOMEM;
    }
    d->kids = p;
    d->kids[d->num_kids++] = child;
    return 0;
}

static void node_forget_lines(node *n)
{
    n->line = n->col = n->key_line = n->key_col = 0;
    for (size_t i = 0; i < n->num_kids; i++) node_forget_lines(n->kids[i]);
}

/* A short description of a value for "(got ...)". */
static const char *describe(const node *n, char *buf, size_t cap)
{
    if (n->kind == N_DICT) return "a block";
    if (n->kind == N_ARRAY) return "an array";
    snprintf(buf, cap, "\"%.60s%s\"", n->text, strlen(n->text) > 60 ? "..." : "");
    return buf;
}

/*======================================================================
 * Tokenizer
 *====================================================================*/

typedef enum tok_kind {
    T_EOF, T_NL, T_WORD, T_STRING, T_LBRACK, T_RBRACK, T_LBRACE, T_RBRACE, T_LPAREN, T_RPAREN,
    T_EQ, T_SEMI, T_COLON
} tok_kind;

static const char punct_chars[] = "[]{}()=;:";
static const tok_kind punct_kinds[] = {T_LBRACK, T_RBRACK, T_LBRACE, T_RBRACE, T_LPAREN,
                                       T_RPAREN, T_EQ, T_SEMI, T_COLON};

typedef struct tok {
    tok_kind kind;
    const char *s;          /* the token's text (a string's content, without quotes) */
    size_t n;
    uint32_t line, col;
} tok;

typedef struct lexer {
    const char *p, *end, *line_start;
    uint32_t line;
    const char *name;       /* path for messages */
    ctf_error *err;
    tok cur;                /* the lookahead token */
    int depth;              /* blocks open around the parser's position */
} lexer;

/* Bare words stop at white space, punctuation and '#': a path needs no quotes unless it holds
 * one of those. Bytes >= 0x80 are allowed so that UTF-8 names and paths pass through. */
static bool is_word_byte(unsigned char c)
{
    return c > ' ' && c != 0x7f && !strchr(punct_chars, c) && c != '#';
}

static bool is_name(const char *s, size_t n)
{
    if (n == 0) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_') return false;
    return true;
}

PRINTF_LIKE(4, 5) static int lex_fail(lexer *lx, uint32_t line, uint32_t col, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = ctf__vfail(lx->err, CTF_EINVAL, (ctf__where){lx->name, line, col, -1}, fmt, ap);
    va_end(ap);
    return rc;
}

static int lex_next(lexer *lx)
{
    const char *p = lx->p, *end = lx->end;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\f' || *p == '\v')) p++;
        if (p == end || *p != '#') break;
        while (p < end && *p != '\n') p++;
    }
    tok *t = &lx->cur;
    t->s = p;
    t->n = 1;
    t->line = lx->line;
    t->col = (uint32_t)(p - lx->line_start) + 1;
    if (p == end) {
        t->kind = T_EOF;
        t->n = 0;
        return 0;
    }
    unsigned char c = (unsigned char)*p;
    const char *q = c ? strchr(punct_chars, c) : NULL;
    if (c == '\n') {
        t->kind = T_NL;
        lx->line++;
        lx->line_start = lx->p = p + 1;
        return 0;
    }
    if (q) {
        t->kind = punct_kinds[q - punct_chars];
        lx->p = p + 1;
        return 0;
    }
    if (c == '"' || c == '\'') {
        /* No escapes: BrainScript strings hold Windows paths with backslashes verbatim. */
        const char *s = ++p;
        while (p < end && *p != (char)c && *p != '\n') p++;
        if (p == end || *p != (char)c)
            return lex_fail(lx, t->line, t->col,
                            "unterminated string: expected the closing %c on the same line", c);
        t->kind = T_STRING;
        t->s = s;
        t->n = (size_t)(p - s);
        lx->p = p + 1;
        return 0;
    }
    if (!is_word_byte(c))
        return lex_fail(lx, t->line, t->col, "unexpected character (byte 0x%02x)", c);
    const char *s = p;
    while (p < end && is_word_byte((unsigned char)*p)) p++;
    /* ':' separates array items, but an unquoted Windows drive (c:\data, c:/data) keeps it. */
    if (p - s == 1 && isalpha(c) && end - p >= 2 && p[0] == ':' && (p[1] == '\\' || p[1] == '/')) {
        p++;
        while (p < end && is_word_byte((unsigned char)*p)) p++;
    }
    t->kind = T_WORD;
    t->s = s;
    t->n = (size_t)(p - s);
    lx->p = p;
    return 0;
}

static int expected(lexer *lx, const char *what)
{
    char found[80];
    const tok *t = &lx->cur;
    switch (t->kind) {
    case T_EOF: snprintf(found, sizeof found, "the end of the file"); break;
    case T_NL: snprintf(found, sizeof found, "a line break"); break;
    case T_WORD: snprintf(found, sizeof found, "'%.*s'", (int)CTF_MIN(t->n, 40), t->s); break;
    case T_STRING: snprintf(found, sizeof found, "a string"); break;
    default: snprintf(found, sizeof found, "'%c'", *t->s); break;
    }
    return lex_fail(lx, t->line, t->col, "expected %s, found %s", what, found);
}

/*======================================================================
 * Parser: document := entries; entry := NAME '=' value; value := primary (':' primary)*;
 * primary := WORD | STRING | '[' entries ']' | '{' entries '}' | '(' items ')'
 *====================================================================*/

#define TRY(x)                          \
    do {                                \
        int rc_ = (x);                  \
        if (rc_) return rc_;            \
    } while (0)

static int parse_primary(lexer *lx, node **out);

static char closer_char(tok_kind k)
{
    return k == T_RBRACK ? ']' : k == T_RBRACE ? '}' : ')';
}

static bool is_closer(tok_kind k) { return k == T_RBRACK || k == T_RBRACE || k == T_RPAREN; }

static int unclosed(lexer *lx, const node *blk, tok_kind closer)
{
    const char *what = blk->kind == N_ARRAY ? "array" : "block";
    if (lx->cur.kind == T_EOF)
        return lex_fail(lx, lx->cur.line, lx->cur.col, "expected '%c' to close the %s opened on "
                        "line %u, found the end of the file", closer_char(closer), what, blk->line);
    return lex_fail(lx, lx->cur.line, lx->cur.col, "expected '%c' to close the %s opened on line "
                    "%u, found '%c'", closer_char(closer), what, blk->line, *lx->cur.s);
}

static int parse_entries(lexer *lx, node *d, tok_kind closer)
{
    for (;;) {
        while (lx->cur.kind == T_NL || lx->cur.kind == T_SEMI) TRY(lex_next(lx));
        if (lx->cur.kind == closer) return 0;
        if (lx->cur.kind == T_EOF || is_closer(lx->cur.kind)) {
            if (closer == T_EOF) return expected(lx, "a name");
            return unclosed(lx, d, closer);
        }
        if (lx->cur.kind != T_WORD || !is_name(lx->cur.s, lx->cur.n))
            return expected(lx, "a name (letters, digits, '_')");
        tok key = lx->cur;
        TRY(lex_next(lx));
        while (lx->cur.kind == T_NL) TRY(lex_next(lx));
        char what[96];
        if (lx->cur.kind != T_EQ) {
            snprintf(what, sizeof what, "'=' after '%.*s'", (int)CTF_MIN(key.n, 40), key.s);
            return expected(lx, what);
        }
        TRY(lex_next(lx));
        /* CNTK writes `name =` and the block's opening bracket on the next line. */
        if (lx->cur.kind == T_NL) {
            while (lx->cur.kind == T_NL) TRY(lex_next(lx));
            if (lx->cur.kind != T_LBRACK && lx->cur.kind != T_LBRACE && lx->cur.kind != T_LPAREN) {
                snprintf(what, sizeof what, "a value after '%.*s =' (only a block may start on "
                         "the next line)", (int)CTF_MIN(key.n, 40), key.s);
                return expected(lx, what);
            }
        }
        node *v = NULL;
        TRY(parse_primary(lx, &v));
        if (lx->cur.kind == T_COLON) {
            node *arr = node_new(N_ARRAY, v->line, v->col);
            if (!arr) return free_oom(v, lx->err);
            int rc = node_add(arr, v) ? oom(lx->err) : 0;
            while (!rc && lx->cur.kind == T_COLON) {
                node *item = NULL;
                if (!(rc = lex_next(lx)) && !(rc = parse_primary(lx, &item)))
                    rc = node_add(arr, item) ? oom(lx->err) : 0;
            }
            if (rc) {
                node_free(arr);
                return rc;
            }
            v = arr;
        }
        v->key_line = key.line;
        v->key_col = key.col;
        if (!(v->key = dup_n(key.s, key.n))) return free_oom(v, lx->err);
        if (node_add(d, v)) return oom(lx->err);
        if (lx->cur.kind == T_NL || lx->cur.kind == T_SEMI || lx->cur.kind == closer) continue;
        if (is_closer(lx->cur.kind) || lx->cur.kind == T_EOF) return unclosed(lx, d, closer);
        snprintf(what, sizeof what, "';' or a line break after the value of '%.*s'",
                 (int)CTF_MIN(key.n, 40), key.s);
        return expected(lx, what);
    }
}

/* Array items are separated by ':', ';' or line breaks, as CNTK allows all three. */
static int parse_items(lexer *lx, node *arr)
{
    for (;;) {
        while (lx->cur.kind == T_NL || lx->cur.kind == T_SEMI || lx->cur.kind == T_COLON)
            TRY(lex_next(lx));
        if (lx->cur.kind == T_RPAREN) return 0;
        if (lx->cur.kind == T_EOF || is_closer(lx->cur.kind)) return unclosed(lx, arr, T_RPAREN);
        node *item = NULL;
        TRY(parse_primary(lx, &item));
        if (node_add(arr, item)) return oom(lx->err);
        tok_kind k = lx->cur.kind;
        if (k != T_NL && k != T_SEMI && k != T_COLON && k != T_RPAREN)
            return expected(lx, "':', ';', a line break or ')'");
    }
}

static int parse_primary(lexer *lx, node **out)
{
    tok t = lx->cur;
    node *n = NULL;
    int rc;
    switch (t.kind) {
    case T_WORD:
    case T_STRING:
        n = node_new(N_SCALAR, t.line, t.col);
        if (!n || !(n->text = dup_n(t.s, t.n))) return free_oom(n, lx->err);
        n->quoted = t.kind == T_STRING;
        rc = lex_next(lx);
        break;
    case T_LBRACK:
    case T_LBRACE:
    case T_LPAREN:
        if (lx->depth >= MAX_DEPTH)
            return lex_fail(lx, t.line, t.col, "blocks nested more than %d levels deep", MAX_DEPTH);
        if (!(n = node_new(t.kind == T_LPAREN ? N_ARRAY : N_DICT, t.line, t.col)))
            return oom(lx->err);
        lx->depth++;
        rc = lex_next(lx);
        if (!rc && t.kind == T_LPAREN) rc = parse_items(lx, n);
        else if (!rc) rc = parse_entries(lx, n, t.kind == T_LBRACK ? T_RBRACK : T_RBRACE);
        if (!rc) rc = lex_next(lx); /* the closing bracket */
        lx->depth--;
        break;
    default:
        return expected(lx, "a value");
    }
    if (rc) {
        node_free(n);
        return rc;
    }
    *out = n;
    return 0;
}

static void lexer_init(lexer *lx, const char *text, size_t len, const char *name, ctf_error *err)
{
    memset(lx, 0, sizeof *lx);
    lx->p = lx->line_start = text;
    lx->end = text + len;
    lx->line = 1;
    lx->name = name;
    lx->err = err;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) lx->p = lx->line_start = text + 3;
}

static int parse_text(const char *text, size_t len, const char *name, ctf_error *err, node **out)
{
    lexer lx;
    lexer_init(&lx, text, len, name, err);
    node *root = node_new(N_DICT, 1, 1);
    if (!root) return oom(err);
    int rc = lex_next(&lx);
    if (!rc) rc = parse_entries(&lx, root, T_EOF);
    if (rc) {
        node_free(root);
        return rc;
    }
    *out = root;
    return 0;
}

/*======================================================================
 * Document-level errors and $name$ substitution
 *====================================================================*/

PRINTF_LIKE(5, 6) static int doc_fail(const ctf_bsconfig *doc, const node *at, bool at_key,
                                      ctf_error *err, const char *fmt, ...)
{
    char msg[CTF_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint32_t line = at ? (at_key ? at->key_line : at->line) : 0;
    uint32_t col = at ? (at_key ? at->key_col : at->col) : 0;
    return ctf__fail(err, CTF_EINVAL, (ctf__where){doc->name, line, col, -1}, "%s%s", msg,
                     at && !line ? " (from a command-line override)" : "");
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static int sbuf_put(sbuf *b, const char *s, size_t n)
{
    void *p = b->p;
    if (ctf__grow(&p, &b->cap, b->n + n + 1, 1)) return CTF_ENOMEM;
    b->p = p;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* Looks $name$ up in each enclosing dictionary from the inside out (arrays are not scopes).
 * The entry being expanded is skipped, so `dir = "$dir$/sub"` refines an outer dir. Overrides
 * live at the top level, which makes them the outermost scope. */
static const node *lookup_var(const node *at, const char *name, size_t n)
{
    for (const node *d = at->parent; d; d = d->parent) {
        const node *v = dict_find_n(d, name, n, at);
        if (v) return v;
    }
    return NULL;
}

static int expand_text(const ctf_bsconfig *doc, const char *text, const node *at, int depth,
                       sbuf *out, ctf_error *err)
{
    const char *p = text;
    while (*p) {
        const char *q = p + 1;
        if (*p == '$')
            while (isalnum((unsigned char)*q) || *q == '_') q++;
        if (*p != '$' || q == p + 1 || *q != '$') {
            /* A '$' that does not start a reference is kept literally. */
            const char *e = strchr(p + 1, '$');
            if (!e) e = p + strlen(p);
            if (sbuf_put(out, p, (size_t)(e - p))) return oom(err);
            p = e;
        } else {
            int n = (int)(q - p - 1);
            const node *v = lookup_var(at, p + 1, (size_t)n);
            if (!v)
                return doc_fail(doc, at, false, err, "undefined variable '$%.*s$': not defined in "
                                "an enclosing block or by a command-line override", n, p + 1);
            if (v->kind != N_SCALAR)
                return doc_fail(doc, at, false, err, "'$%.*s$' names a block (line %u); only "
                                "single values can be substituted", n, p + 1, v->line);
            if (depth >= MAX_SUBST_DEPTH)
                return doc_fail(doc, at, false, err, "'$%.*s$': substitutions nested more than %d "
                                "deep (is there a cycle?)", n, p + 1, MAX_SUBST_DEPTH);
            if (v->expanded) {
                if (sbuf_put(out, v->text, strlen(v->text))) return oom(err);
            } else {
                TRY(expand_text(doc, v->text, v, depth + 1, out, err));
            }
            p = q + 1;
        }
        if (out->n > MAX_VALUE_BYTES)
            return doc_fail(doc, at, false, err, "value longer than %d bytes after substitution",
                            MAX_VALUE_BYTES);
    }
    return 0;
}

static int expand_node(const ctf_bsconfig *doc, node *n, ctf_error *err)
{
    for (size_t i = 0; i < n->num_kids; i++) TRY(expand_node(doc, n->kids[i], err));
    if (n->kind != N_SCALAR || n->expanded) return 0;
    if (strchr(n->text, '$')) {
        sbuf b = {0};
        int rc = expand_text(doc, n->text, n, 0, &b, err);
        if (!rc && !b.p && sbuf_put(&b, "", 0)) rc = oom(err);
        if (rc) {
            CTF_FREE(b.p);
            return rc;
        }
        CTF_FREE(n->text);
        n->text = b.p;
    }
    n->expanded = true;
    return 0;
}

/*======================================================================
 * Reader parameters (keys of the reader and deserializer blocks)
 *====================================================================*/

typedef enum key_id {
    K_FILE, K_INPUT, K_PRECISION, K_RANDOMIZE, K_SEED, K_WINDOW, K_SAMPLE_WINDOW, K_SKIP_IDS,
    K_MAX_ERRORS, K_TRACE, K_VERBOSITY, K_CHUNK, K_KEEP, K_FRAME, K_CACHE, K_MAX_SAMPLES,
    K_MAX_SWEEPS, K_TRUNC, K_THREADS, K_PREFETCH,
    /* Keys below are structure, not parameters: an undotted override never targets them. */
    K_READER_TYPE, K_TYPE, K_MODULE, K_DESERIALIZERS, K_COUNT
} key_id;

static const char *const key_names[K_COUNT] = {
    "file", "input", "precision", "randomize", "randomizationSeed", "randomizationWindow",
    "sampleBasedRandomizationWindow", "skipSequenceIds", "maxErrors", "traceLevel", "verbosity",
    "chunkSizeInBytes", "keepDataInMemory", "frameMode", "cacheIndex", "maxSamples", "maxSweeps",
    "truncationLength", "numThreads", "prefetchChunks", "readerType", "type", "module",
    "deserializers",
};

static int key_lookup(const char *s, size_t n)
{
    for (int i = 0; i < K_COUNT; i++)
        if (name_eq(key_names[i], s, n)) return i;
    return -1;
}

static bool is_param(int k) { return k >= 0 && k < K_READER_TYPE; }

/* Case-insensitive edit distance, capped: enough to suggest the intended key for a typo. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[48];
    if (la >= 48 || lb >= 48) return 99;
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t sub = diag + (tolower((unsigned char)a[i - 1]) !=
                                 tolower((unsigned char)b[j - 1]));
            row[j] = CTF_MIN(CTF_MIN(row[j] + 1, row[j - 1] + 1), sub);
            diag = up;
        }
    }
    return row[lb];
}

static const char *suggest(const char *key, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t bestd = 3;
    for (size_t i = 0; i < n; i++) {
        size_t d = edit_distance(key, names[i]);
        if (d < bestd) {
            bestd = d;
            best = names[i];
        }
    }
    return best;
}

static int unknown_key(const ctf_bsconfig *doc, const node *e, const char *where,
                       const char *const *names, size_t n, ctf_error *err)
{
    const char *s = suggest(e->key, names, n);
    char hint[96] = "";
    if (s) snprintf(hint, sizeof hint, " (did you mean '%s'?)", s);
    return doc_fail(doc, e, true, err, "%s: unknown parameter '%s'%s", where, e->key, hint);
}

/*======================================================================
 * Selecting the reader and the deserializer
 *====================================================================*/

/* Lists the top-level blocks (those holding a reader, if need_reader) for messages. */
static size_t list_blocks(const node *root, bool need_reader, char *buf, size_t cap, node **only)
{
    size_t count = 0, used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < root->num_kids; i++) {
        node *b = root->kids[i];
        if (b->kind != N_DICT || (need_reader && !dict_find(b, "reader"))) continue;
        *only = b;
        if (used < cap) {
            int k = snprintf(buf + used, cap - used, "%s'%.40s' (line %u)", count ? ", " : "",
                             b->key, b->key_line);
            if (k > 0) used += (size_t)k;
        }
        count++;
    }
    return count;
}

static int select_reader(ctf_bsconfig *doc, const char *section, ctf_error *err)
{
    char list[256], got[80];
    node *only = NULL, *r;
    size_t count = list_blocks(doc->root, true, list, sizeof list, &only);
    if (section) {
        node *sec = dict_find(doc->root, section);
        if (!sec || sec->kind != N_DICT)
            return doc_fail(doc, NULL, false, err, "section '%s': no top-level block of that name "
                            "(blocks with a reader: %s)", section, count ? list : "none");
        if (!(r = dict_find(sec, "reader")))
            return doc_fail(doc, sec, true, err, "section '%s' has no 'reader' block", section);
        doc->section = sec;
    } else if (!(r = dict_find(doc->root, "reader"))) {
        if (count == 0) {
            bool any = list_blocks(doc->root, false, list, sizeof list, &only) > 0;
            return doc_fail(doc, NULL, false, err, "no reader: expected a top-level 'reader' block "
                            "or a top-level block that holds one (top-level blocks: %s)",
                            any ? list : "none");
        }
        if (count > 1)
            return doc_fail(doc, NULL, false, err, "several blocks hold a 'reader' (%s): select "
                            "one by its section name", list);
        doc->section = only;
        r = dict_find(only, "reader");
    }
    if (r->kind != N_DICT)
        return doc_fail(doc, r, false, err, "reader: must be a block [ ... ] or { ... } (got %s)",
                        describe(r, got, sizeof got));
    doc->reader = r;
    return 0;
}

static int select_deserializer(ctf_bsconfig *doc, ctf_error *err)
{
    char got[80];
    node *ds = dict_find(doc->reader, "deserializers");
    if (!ds) return 0;
    node *const *items = &ds;
    size_t n = 1;
    if (ds->kind == N_ARRAY) {
        items = ds->kids;
        n = ds->num_kids;
    } else if (ds->kind != N_DICT) {
        return doc_fail(doc, ds, false, err, "deserializers: must be an array of blocks "
                        "({ type = ...; ... }) (got %s)", describe(ds, got, sizeof got));
    }
    if (n == 0)
        return doc_fail(doc, ds, false, err, "deserializers: empty; expected one "
                        "CNTKTextFormatDeserializer block");
    for (size_t i = 0; i < n; i++) {
        node *d = items[i], *t;
        if (d->kind != N_DICT)
            return doc_fail(doc, d, false, err, "deserializers[%zu]: must be a block "
                            "{ type = ...; ... } (got %s)", i, describe(d, got, sizeof got));
        if (!(t = dict_find(d, "type")))
            return doc_fail(doc, d, false, err, "deserializers[%zu].type: missing; ctfio supports "
                            "type = \"CNTKTextFormatDeserializer\"", i);
        TRY(expand_node(doc, t, err));
        if (t->kind != N_SCALAR || strcasecmp(t->text, "CNTKTextFormatDeserializer") != 0)
            return doc_fail(doc, t, false, err, "deserializers[%zu].type: %s is not supported; "
                            "ctfio reads only CNTKTextFormatDeserializer", i,
                            describe(t, got, sizeof got));
        if (doc->deser)
            return doc_fail(doc, d, false, err, "deserializers[%zu]: a second "
                            "CNTKTextFormatDeserializer (the first is on line %u); ctfio supports "
                            "exactly one", i, doc->deser->line);
        doc->deser = d;
    }
    return 0;
}

/*======================================================================
 * Command-line overrides ("KEY=VALUE")
 *====================================================================*/

typedef struct ov_parts {
    const char *comp[MAX_OVERRIDE_PARTS]; /* the dotted KEY's components */
    size_t len[MAX_OVERRIDE_PARTS];
    size_t n;
    const char *value;                    /* text after '=', trimmed */
    size_t value_len;
} ov_parts;

static int ov_fail(ctf_error *err, const char *ov, const char *what)
{
    return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "override '%.200s': %s", ov, what);
}

static int split_override(const char *ov, ov_parts *o, ctf_error *err)
{
    const char *eq = strchr(ov, '='), *p = ov, *e;
    if (!eq) return ov_fail(err, ov, "expected KEY=VALUE");
    while (p < eq && isspace((unsigned char)*p)) p++;
    e = eq;
    while (e > p && isspace((unsigned char)e[-1])) e--;
    o->n = 0;
    for (;;) {
        const char *dot = memchr(p, '.', (size_t)(e - p));
        const char *stop = dot ? dot : e;
        if (o->n == MAX_OVERRIDE_PARTS || !is_name(p, (size_t)(stop - p)))
            return ov_fail(err, ov, "KEY must be a name or a dotted path of names such as "
                           "input.features.dim");
        o->comp[o->n] = p;
        o->len[o->n++] = (size_t)(stop - p);
        if (!dot) break;
        p = dot + 1;
    }
    p = eq + 1;
    while (isspace((unsigned char)*p)) p++;
    e = p + strlen(p);
    while (e > p && isspace((unsigned char)e[-1])) e--;
    o->value = p;
    o->value_len = (size_t)(e - p);
    return 0;
}

/* A value that opens a bracket is parsed as configuration text; anything else is taken
 * literally (shells leave paths unquoted), minus one pair of surrounding quotes. */
static int override_value(const ctf_bsconfig *doc, const ov_parts *o, const char *ov, node **out,
                          ctf_error *err)
{
    const char *v = o->value;
    size_t n = o->value_len;
    node *val = NULL;
    if (n && strchr("[{(", v[0])) {
        ctf_error e;
        lexer lx;
        lexer_init(&lx, v, n, doc->name, &e);
        int rc = lex_next(&lx);
        if (!rc) rc = parse_primary(&lx, &val);
        if (!rc && lx.cur.kind != T_EOF) {
            rc = expected(&lx, "the end of the value");
            node_free(val);
        }
        if (rc == CTF_ENOMEM) return oom(err);
        if (rc)
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "override '%.200s': %s", ov, e.message);
        node_forget_lines(val);
    } else {
        size_t q = n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0];
        if (!(val = node_new(N_SCALAR, 0, 0)) || !(val->text = dup_n(v + q, n - 2 * q)))
            return free_oom(val, err);
        val->quoted = q;
    }
    *out = val;
    return 0;
}

/* Assigns the override's value at base.comp[first].comp[first+1]..., creating blocks. */
static int set_path(ctf_bsconfig *doc, node *base, const ov_parts *o, size_t first,
                    const char *ov, ctf_error *err)
{
    node *d = base, *v = NULL;
    for (size_t i = first; i + 1 < o->n; i++) {
        node *c = NULL;
        for (size_t k = 0; k < d->num_kids && !c; k++) /* exact first: stream names keep case */
            if (name_is(d->kids[k]->key, o->comp[i], o->len[i])) c = d->kids[k];
        if (!c) c = dict_find_n(d, o->comp[i], o->len[i], NULL);
        if (!c) {
            if (!(c = node_new(N_DICT, 0, 0)) || !(c->key = dup_n(o->comp[i], o->len[i])))
                return free_oom(c, err);
            if (node_add(d, c)) return oom(err);
        } else if (c->kind != N_DICT) {
            return ov_fail(err, ov, "the path goes through a value that is not a block");
        }
        d = c;
    }
    size_t last = o->n - 1;
    /* Replacing the selected reader or a block around it would leave doc pointing at freed
     * nodes; it is also never what the user meant once the reader is chosen. */
    for (const node *a = doc->deser ? doc->deser : doc->reader; a; a = a->parent)
        if (a->parent == d && name_is(a->key, o->comp[last], o->len[last]))
            return ov_fail(err, ov, "cannot replace the block that holds the selected reader; "
                           "set its parameters instead");
    TRY(override_value(doc, o, ov, &v, err));
    if (!(v->key = dup_n(o->comp[last], o->len[last]))) return free_oom(v, err);
    return node_add(d, v) ? oom(err) : 0;
}

/* Before the reader is chosen: an undotted KEY is a top-level assignment (a variable). */
static int override_top(ctf_bsconfig *doc, const char *ov, ctf_error *err)
{
    ov_parts o;
    TRY(split_override(ov, &o, err));
    return o.n == 1 ? set_path(doc, doc->root, &o, 0, ov, err) : 0;
}

/* After: reader parameters go into the innermost block that applies (the deserializer wins). */
static int override_reader(ctf_bsconfig *doc, const char *ov, ctf_error *err)
{
    ov_parts o;
    TRY(split_override(ov, &o, err));
    node *target = doc->deser ? doc->deser : doc->reader;
    bool param = is_param(key_lookup(o.comp[0], o.len[0]));
    if (o.n == 1) return param ? set_path(doc, target, &o, 0, ov, err) : 0;
    if (name_eq("reader", o.comp[0], o.len[0])) return set_path(doc, target, &o, 1, ov, err);
    if (doc->section && o.n > 2 && name_eq(doc->section->key, o.comp[0], o.len[0]) &&
        name_eq("reader", o.comp[1], o.len[1]))
        return set_path(doc, target, &o, 2, ov, err);
    return set_path(doc, param ? target : doc->root, &o, 0, ov, err);
}

/*======================================================================
 * ctf_bsconfig_parse / load / free
 *====================================================================*/

int ctf_bsconfig_parse(const char *text, size_t len, const char *name, const char *section,
                       const char *const *overrides, size_t num_overrides, ctf_bsconfig **out,
                       ctf_error *err)
{
    if (!out) return BAD("ctf_bsconfig_parse: out is NULL");
    *out = NULL;
    if (!text && len) return BAD("ctf_bsconfig_parse: text is NULL");
    for (size_t i = 0; i < num_overrides; i++)
        if (!overrides || !overrides[i]) return BAD("ctf_bsconfig_parse: override %zu is NULL", i);
    ctf_bsconfig *doc = CTF_CALLOC(1, sizeof *doc);
    if (!doc) return oom(err);
    int rc;
    if (!(doc->name = ctf__strdup(name ? name : "<config>"))) {
        rc = oom(err);
        goto fail;
    }
    if ((rc = parse_text(text ? text : "", len, doc->name, err, &doc->root))) goto fail;
    for (size_t i = 0; i < num_overrides; i++)
        if ((rc = override_top(doc, overrides[i], err))) goto fail;
    if ((rc = select_reader(doc, section, err))) goto fail;
    if ((rc = select_deserializer(doc, err))) goto fail;
    for (size_t i = 0; i < num_overrides; i++)
        if ((rc = override_reader(doc, overrides[i], err))) goto fail;
    /* CNTK puts precision at the top level; the innermost enclosing definition applies. */
    for (node *d = doc->reader->parent; d && !doc->outer_precision; d = d->parent)
        doc->outer_precision = dict_find(d, "precision");
    if ((rc = expand_node(doc, doc->reader, err))) goto fail;
    if (doc->outer_precision && (rc = expand_node(doc, doc->outer_precision, err))) goto fail;
    doc->input = doc->deser ? dict_find(doc->deser, "input") : NULL;
    if (!doc->input) doc->input = dict_find(doc->reader, "input");
    if (doc->input && doc->input->kind == N_DICT && doc->input->num_kids &&
        !(doc->streams = CTF_CALLOC(doc->input->num_kids, sizeof *doc->streams))) {
        rc = oom(err);
        goto fail;
    }
    *out = doc;
    return 0;
fail:
    ctf_bsconfig_free(doc);
    return rc;
}

int ctf_bsconfig_load(const char *path, const char *section, const char *const *overrides,
                      size_t num_overrides, ctf_bsconfig **out, ctf_error *err)
{
    if (out) *out = NULL;
    if (!path || !path[0]) return BAD("ctf_bsconfig_load: no configuration file given");
    const ctf__where w = {path, 0, 0, -1};
    FILE *f = fopen(path, "rb");
    if (!f)
        return ctf__fail(err, CTF_EIO, w, "cannot open the configuration file: %s",
                         strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        void *p = buf;
        if (ctf__grow(&p, &cap, n + 4096, 1)) {
            rc = oom(err);
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
        if (n > MAX_FILE_BYTES) {
            rc = ctf__fail(err, CTF_EINVAL, w, "larger than %u bytes: not a configuration file?",
                           MAX_FILE_BYTES);
            break;
        }
    }
    fclose(f);
    if (!rc) rc = ctf_bsconfig_parse(buf, n, path, section, overrides, num_overrides, out, err);
    CTF_FREE(buf);
    return rc;
}

void ctf_bsconfig_free(ctf_bsconfig *doc)
{
    if (!doc) return;
    node_free(doc->root);
    CTF_FREE(doc->streams);
    CTF_FREE(doc->name);
    CTF_FREE(doc);
}

/*======================================================================
 * ctf_bsconfig_apply: typed values
 *====================================================================*/

static int get_uint(const ctf_bsconfig *doc, const node *n, const char *name, uint64_t min,
                    uint64_t max, uint64_t *out, ctf_error *err)
{
    char got[80];
    const char *p = n->kind == N_SCALAR ? n->text : "";
    uint64_t v = 0;
    if (*p == '+') p++;
    bool digits = *p != 0, overflow = false;
    for (; digits && *p; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (d > 9) digits = false;
        else if (v > (UINT64_MAX - d) / 10) overflow = true;
        else v = v * 10 + d;
    }
    if (!digits || v < min)
        return doc_fail(doc, n, false, err, "%s: must be a %s integer (got %s)", name,
                        min ? "positive" : "non-negative", describe(n, got, sizeof got));
    if (overflow || v > max)
        return doc_fail(doc, n, false, err, "%s: must be between %llu and %llu (got %s)", name,
                        (unsigned long long)min, (unsigned long long)max,
                        describe(n, got, sizeof got));
    *out = v;
    return 0;
}

static int get_size(const ctf_bsconfig *doc, const node *n, const char *name, size_t *out,
                    ctf_error *err)
{
    uint64_t v;
    TRY(get_uint(doc, n, name, 0, SIZE_MAX, &v, err));
    *out = (size_t)v;
    return 0;
}

/* maxSamples / maxSweeps also accept "infinite" (CTF_INFINITELY_REPEAT). */
static int get_limit(const ctf_bsconfig *doc, const node *n, const char *name, uint64_t *out,
                     ctf_error *err)
{
    if (n->kind == N_SCALAR && strcasecmp(n->text, "infinite") == 0) {
        *out = CTF_INFINITELY_REPEAT;
        return 0;
    }
    return get_uint(doc, n, name, 0, UINT64_MAX, out, err);
}

static int get_bool(const ctf_bsconfig *doc, const node *n, const char *name, bool *out,
                    ctf_error *err)
{
    char got[80];
    const char *s = n->kind == N_SCALAR ? n->text : "";
    if (!strcasecmp(s, "true") || !strcmp(s, "1")) *out = true;
    else if (!strcasecmp(s, "false") || !strcmp(s, "0")) *out = false;
    else
        return doc_fail(doc, n, false, err, "%s: must be true or false (got %s)", name,
                        describe(n, got, sizeof got));
    return 0;
}

static int get_string(const ctf_bsconfig *doc, const node *n, const char *name, bool nonempty,
                      const char **out, ctf_error *err)
{
    char got[80];
    if (n->kind != N_SCALAR)
        return doc_fail(doc, n, false, err, "%s: must be a string (got %s)", name,
                        describe(n, got, sizeof got));
    if (nonempty && !n->text[0])
        return doc_fail(doc, n, false, err, "%s: must not be empty", name);
    *out = n->text;
    return 0;
}

/* Picks one of several words (case-insensitive). @return : its index, or -1. */
static int get_word(const node *n, const char *const *words, int count)
{
    for (int i = 0; n->kind == N_SCALAR && i < count; i++)
        if (!strcasecmp(n->text, words[i])) return i;
    return -1;
}

static int collect(const ctf_bsconfig *doc, const node *blk, bool is_reader, const node **v,
                   ctf_error *err)
{
    for (size_t i = 0; i < blk->num_kids; i++) {
        const node *e = blk->kids[i];
        int k = key_lookup(e->key, strlen(e->key));
        if (k < 0 || (k == K_DESERIALIZERS && !is_reader))
            return unknown_key(doc, e, is_reader ? "reader" : "deserializer", key_names,
                               K_COUNT, err);
        v[k] = e;
    }
    return 0;
}

static int apply_streams(const ctf_bsconfig *doc, ctf_config *c, ctf_error *err)
{
    static const char *const fields[4] = {"dim", "format", "alias", "definesMBSize"};
    static const char *const formats[2] = {"dense", "sparse"};
    const node *in = doc->input, *mb = NULL;
    char got[80], name[200];
    if (!in)
        return doc_fail(doc, doc->deser ? doc->deser : doc->reader, false, err,
                        "%s: missing the required parameter 'input'",
                        doc->deser ? "deserializer" : "reader");
    if (in->kind != N_DICT)
        return doc_fail(doc, in, false, err, "input: must be a block of streams "
                        "[ NAME = [ dim = ...; format = ... ] ] (got %s)",
                        describe(in, got, sizeof got));
    if (in->num_kids == 0)
        return doc_fail(doc, in, false, err, "input: at least one stream is required (got an "
                        "empty block)");
    for (size_t i = 0; i < in->num_kids; i++) {
        const node *s = in->kids[i], *f[4] = {0};
        ctf_stream_def *d = &doc->streams[i];
        uint64_t dim;
        if (s->kind != N_DICT)
            return doc_fail(doc, s, false, err, "input.%s: must be a block [ dim = ...; format = "
                            "... ] (got %s)", s->key, describe(s, got, sizeof got));
        for (size_t j = 0; j < s->num_kids; j++) {
            const node *e = s->kids[j];
            int k = 0;
            while (k < 4 && strcasecmp(fields[k], e->key)) k++;
            if (k == 4) {
                snprintf(name, sizeof name, "input.%.120s", s->key);
                return unknown_key(doc, e, name, fields, 4, err);
            }
            f[k] = e;
        }
        memset(d, 0, sizeof *d);
        d->name = s->key;
        if (!f[0]) return doc_fail(doc, s, true, err, "input.%s.dim: missing (required)", s->key);
        if (!f[1])
            return doc_fail(doc, s, true, err, "input.%s.format: missing (required: \"dense\" or "
                            "\"sparse\")", s->key);
        snprintf(name, sizeof name, "input.%.120s.dim", s->key);
        TRY(get_uint(doc, f[0], name, 1, SIZE_MAX, &dim, err));
        d->dim = (size_t)dim;
        int fmt = get_word(f[1], formats, 2);
        if (fmt < 0)
            return doc_fail(doc, f[1], false, err, "input.%s.format: must be \"dense\" or "
                            "\"sparse\" (got %s)", s->key, describe(f[1], got, sizeof got));
        d->is_sparse = fmt == 1;
        if (d->is_sparse && dim > INT32_MAX)
            return doc_fail(doc, f[0], false, err, "input.%s.dim: a sparse dimension must be at "
                            "most %d because indices are int32 (got %s)", s->key, INT32_MAX,
                            describe(f[0], got, sizeof got));
        snprintf(name, sizeof name, "input.%.120s.alias", s->key);
        if (f[2]) TRY(get_string(doc, f[2], name, false, &d->alias, err));
        snprintf(name, sizeof name, "input.%.120s.definesMBSize", s->key);
        if (f[3]) TRY(get_bool(doc, f[3], name, &d->defines_mb_size, err));
        for (size_t j = 0; j < i; j++)
            if (!strcmp(stream_alias(d), stream_alias(&doc->streams[j])))
                return doc_fail(doc, f[2] ? f[2] : s, !f[2], err, "input.%s.alias: duplicate "
                                "alias '%s' (also used by input.%s)", s->key, stream_alias(d),
                                doc->streams[j].name);
        if (d->defines_mb_size) {
            if (mb)
                return doc_fail(doc, f[3], false, err, "input.%s.definesMBSize: only one stream "
                                "may define the minibatch size (also set on input.%s)", s->key,
                                mb->key);
            mb = s;
        }
    }
    c->streams = doc->streams;
    c->num_streams = in->num_kids;
    return 0;
}

int ctf_bsconfig_apply(const ctf_bsconfig *doc, ctf_config *cfg, ctf_error *err)
{
    static const char *const precisions[2] = {"float", "double"};
    static const char *const randomize_words[2] = {"none", "auto"};
    const node *v[K_COUNT] = {0};
    char got[80];
    uint64_t u;
    if (!doc || !cfg) return BAD("ctf_bsconfig_apply: NULL argument");
    ctf_config c = *cfg;
    TRY(collect(doc, doc->reader, true, v, err));
    if (doc->deser) TRY(collect(doc, doc->deser, false, v, err));
    if (!v[K_PRECISION]) v[K_PRECISION] = doc->outer_precision;

    if (v[K_READER_TYPE]) {
        const node *t = v[K_READER_TYPE];
        /* CNTK names the composite reader CompositeDataReader when it names it at all. */
        bool ok = t->kind == N_SCALAR &&
                  (!strcasecmp(t->text, "CNTKTextFormatReader") ||
                   (doc->deser && !strcasecmp(t->text, "CompositeDataReader")));
        if (!ok)
            return doc_fail(doc, t, false, err, "readerType: %s is not supported; ctfio "
                            "implements CNTKTextFormatReader", describe(t, got, sizeof got));
    }
    if (!v[K_FILE])
        return doc_fail(doc, doc->deser ? doc->deser : doc->reader, false, err,
                        "%s: missing the required parameter 'file'",
                        doc->deser ? "deserializer" : "reader");
    TRY(get_string(doc, v[K_FILE], "file", true, &c.path, err));
    if (v[K_PRECISION]) {
        int k = get_word(v[K_PRECISION], precisions, 2);
        if (k < 0)
            return doc_fail(doc, v[K_PRECISION], false, err, "precision: must be \"float\" or "
                            "\"double\" (got %s)", describe(v[K_PRECISION], got, sizeof got));
        c.precision = k ? CTF_FLOAT64 : CTF_FLOAT32;
    }
    if (v[K_RANDOMIZE]) {
        int k = get_word(v[K_RANDOMIZE], randomize_words, 2);
        if (k >= 0) c.randomize = k == 1;
        else if (get_bool(doc, v[K_RANDOMIZE], "randomize", &c.randomize, NULL))
            return doc_fail(doc, v[K_RANDOMIZE], false, err, "randomize: must be true, false, "
                            "\"auto\" or \"none\" (got %s)",
                            describe(v[K_RANDOMIZE], got, sizeof got));
    }
    if (v[K_SEED]) TRY(get_uint(doc, v[K_SEED], "randomizationSeed", 0, UINT64_MAX,
                                &c.randomization_seed, err));
    if (v[K_WINDOW]) TRY(get_uint(doc, v[K_WINDOW], "randomizationWindow", 0, UINT64_MAX,
                                  &c.randomization_window, err));
    if (v[K_SAMPLE_WINDOW]) TRY(get_bool(doc, v[K_SAMPLE_WINDOW], "sampleBasedRandomizationWindow",
                                         &c.window_in_samples, err));
    if (v[K_SKIP_IDS])
        TRY(get_bool(doc, v[K_SKIP_IDS], "skipSequenceIds", &c.skip_sequence_ids, err));
    if (v[K_MAX_ERRORS]) TRY(get_uint(doc, v[K_MAX_ERRORS], "maxErrors", 0, UINT64_MAX,
                                      &c.max_errors, err));
    /* CNTK's composite reader says verbosity; an explicit traceLevel anywhere wins over it. */
    if (v[K_VERBOSITY]) {
        TRY(get_uint(doc, v[K_VERBOSITY], "verbosity", 0, UINT64_MAX, &u, err));
        c.trace_level = u > 2 ? 2 : (int)u;
    }
    if (v[K_TRACE]) {
        TRY(get_uint(doc, v[K_TRACE], "traceLevel", 0, 2, &u, err));
        c.trace_level = (int)u;
    }
    if (v[K_CHUNK]) TRY(get_uint(doc, v[K_CHUNK], "chunkSizeInBytes", 1, UINT64_MAX,
                                 &c.chunk_size_bytes, err));
    if (v[K_KEEP]) TRY(get_bool(doc, v[K_KEEP], "keepDataInMemory", &c.keep_data_in_memory, err));
    if (v[K_FRAME]) TRY(get_bool(doc, v[K_FRAME], "frameMode", &c.frame_mode, err));
    if (v[K_CACHE]) TRY(get_bool(doc, v[K_CACHE], "cacheIndex", &c.cache_index, err));
    if (v[K_MAX_SAMPLES]) TRY(get_limit(doc, v[K_MAX_SAMPLES], "maxSamples", &c.max_samples, err));
    if (v[K_MAX_SWEEPS]) TRY(get_limit(doc, v[K_MAX_SWEEPS], "maxSweeps", &c.max_sweeps, err));
    if (v[K_TRUNC]) TRY(get_size(doc, v[K_TRUNC], "truncationLength", &c.truncation_length, err));
    if (v[K_THREADS]) TRY(get_size(doc, v[K_THREADS], "numThreads", &c.num_threads, err));
    if (v[K_PREFETCH]) TRY(get_size(doc, v[K_PREFETCH], "prefetchChunks", &c.prefetch_chunks, err));
    TRY(apply_streams(doc, &c, err));
    /* The combinations (maxSamples with maxSweeps, frameMode with truncation, ...) are checked
     * once, by the same code that checks configurations built in C. */
    int rc = ctf_config_validate(&c, err);
    if (rc) {
        if (err) snprintf(err->path, sizeof err->path, "%s", doc->name);
        return rc;
    }
    *cfg = c;
    return 0;
}
