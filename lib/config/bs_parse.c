/*
 * bs_parse.c -- the parser: CNTK configuration text into a syntax tree (bs_expr).
 *
 *   file     := member*                                  (the top level is a dictionary)
 *   member   := NAME ['[' NAME ':' expr '..' expr ']'] [params] '=' expr [';']
 *   params   := '(' args ')' | '{' args '}'              (a function definition)
 *   expr     := operand (infix operand | '.' NAME | '[' expr ']' | '(' args ')' | '{' args '}')*
 *   operand  := NUMBER | STRING | true | false | NAME | $X$ | raw word | '(' expr ')'
 *             | '[' member* ']' | '{' member* '}' | '[|' expr (';' expr)* '|]'
 *             | '-' operand | '+' operand | '!' operand | new NAME operand
 *             | if expr then expr else expr | array '[' expr '..' expr ']' '(' expr ')'
 * Infix operators bind as in CNTK: * / .* ** % (10), + - with (9), comparisons (8), && (7),
 * || (6), << >> (5), ':' (4, builds an array), '=>' (0, a lambda). Members end at ';', a line
 * break or the closing bracket. Inside parentheses ';' and line breaks also separate array
 * items, and `(;a;b)` uses the separator written after '(' (CNTK's older array syntax).
 *
 * The value of NDLNetworkBuilder or of any member whose name contains "ndl" (the older network
 * description language) that does not parse is skipped as balanced brackets instead: it is
 * never evaluated, and NDL has forms BrainScript lacks (`CE.tag = ...`, `F(x) { ... }`).
 * Everything else must parse, whether or not it is evaluated later.
 */
#include "bs.h"

#include <ctype.h>
#include <stdio.h>
#include <strings.h>

typedef struct parser {
    bs_lexer lx;
    bs_arena *a;
    ctf_error *err;
    int depth;
    bs_expr *scope;             /* the dictionary whose members are being parsed */
    const bs_expr *overrides;   /* command-line definitions, for $X$ in include paths */
    const char *last_end;       /* end of the last token consumed */
    const bs_src *last_src;
    bool in_items;              /* inside ( ): a line break separates items */
} parser;

#define TRY(x) \
    do { \
        int rc_ = (x); \
        if (rc_) return rc_; \
    } while (0)

bs_expr *ctf__bs_new(bs_arena *a, bs_kind kind, const bs_src *src, uint32_t line, uint32_t col)
{
    bs_expr *e = ctf__bs_alloc(a, sizeof *e);
    if (e) {
        e->kind = kind;
        e->src = src;
        e->line = line;
        e->col = col;
    }
    return e;
}

int ctf__bs_add_kid(bs_arena *a, bs_expr *parent, bs_expr *kid)
{
    if (ctf__bs_grow(a, &parent->kids, &parent->cap, parent->nkids + 1, sizeof *parent->kids))
        return CTF_ENOMEM;
    parent->kids[parent->nkids++] = kid;
    return 0;
}

static bool name_matches(const bs_expr *m, const char *name, size_t n, bool any_case)
{
    return m->kind == E_DEF && m->n == n &&
           (any_case ? strncasecmp(m->s, name, n) == 0 : memcmp(m->s, name, n) == 0);
}

bs_expr *ctf__bs_dict_find(const bs_expr *d, const char *name, size_t n, bool any_case)
{
    if (!d || d->kind != E_DICT) return NULL;
    for (size_t i = d->nkids; i-- > 0;)
        if (name_matches(d->kids[i], name, n, false)) return d->kids[i];
    if (any_case)
        for (size_t i = d->nkids; i-- > 0;)
            if (name_matches(d->kids[i], name, n, true)) return d->kids[i];
    return NULL;
}

const bs_expr *ctf__bs_lookup(const bs_expr *scope, const char *name, size_t n, bool any_case,
                              const bs_expr *skip, const bs_expr **bad_include)
{
    for (const bs_expr *d = scope; d; d = d->scope) {
        for (size_t i = d->nkids; i-- > 0;) {
            const bs_expr *m = d->kids[i];
            if (m != skip && name_matches(m, name, n, any_case)) return m;
            if (m->kind == E_BADINC && bad_include && !*bad_include) *bad_include = m;
        }
    }
    return NULL;
}

const char *ctf__bs_kind_name(const bs_expr *e)
{
    switch (e->kind) {
    case E_CALL: return "a function call";
    case E_LAMBDA: return "a function";
    case E_NEW: return "a 'new' object";
    case E_ARRAYFN: return "an 'array' constructor";
    case E_SKIPPED: return "an NDL description";
    case E_NAMED: return "a named argument";
    default: return "this expression";
    }
}

/*======================================================================
 * Tokens
 *====================================================================*/

static int advance(parser *P)
{
    P->last_end = P->lx.cur.end;
    P->last_src = P->lx.cur.src;
    return ctf__bs_lex_next(&P->lx);
}

static int expected(parser *P, const char *what)
{
    char found[80];
    const bs_tok *t = &P->lx.cur;
    return ctf__bs_fail(P->err, t->src, t->line, t->col, "expected %s, found %s", what,
                        ctf__bs_tok_desc(t, found, sizeof found));
}

static int expect_op(parser *P, const char *op)
{
    char what[16];
    if (!ctf__bs_is_op(&P->lx.cur, op)) {
        snprintf(what, sizeof what, "'%s'", op);
        return expected(P, what);
    }
    return advance(P);
}

static bs_expr *node_at(parser *P, bs_kind kind, const bs_tok *t)
{
    bs_expr *e = ctf__bs_new(P->a, kind, t->src, t->line, t->col);
    if (e) e->beg = t->beg;
    if (e && t->src->no_lines) e->line = e->col = 0;
    return e;
}

/* Closes a node's source span at the last token consumed (if it is still in the same file). */
static void finish(parser *P, bs_expr *e)
{
    e->end = P->last_src == e->src ? P->last_end : NULL;
    if (!e->end) e->beg = NULL;
}

static int enter(parser *P, const bs_tok *t)
{
    if (++P->depth > BS_MAX_DEPTH)
        return ctf__bs_fail(P->err, t->src, t->line, t->col,
                            "nesting deeper than %d levels (blocks, "
                            "parentheses or operators)",
                            BS_MAX_DEPTH);
    return 0;
}

static int parse_expr(parser *P, int min_prec, bs_expr **out);
static int parse_members(parser *P, bs_expr *dict, const char *closer, const bs_tok *open);

/*======================================================================
 * Operands
 *====================================================================*/

/* Arguments of a call or parameters of a definition: expr or NAME = expr, comma-separated. */
static int parse_args(parser *P, bool defining, bs_expr *into)
{
    bs_tok open = P->lx.cur;
    const char *closer = ctf__bs_is_op(&open, "(") ? ")" : "}";
    bool outer_items = P->in_items;
    P->in_items = false;
    TRY(advance(P));
    if (ctf__bs_is_op(&P->lx.cur, closer)) {
        P->in_items = outer_items;
        return advance(P);
    }
    for (;;) {
        bs_tok at = P->lx.cur;
        bs_expr *arg = NULL;
        TRY(parse_expr(P, 0, &arg));
        if (arg->kind == E_ID && ctf__bs_is_op(&P->lx.cur, "=")) {
            bs_expr *named = node_at(P, E_NAMED, &at), *val = NULL;
            if (!named) return ctf__bs_oom(P->err);
            named->s = arg->s;
            named->n = arg->n;
            TRY(advance(P));
            TRY(parse_expr(P, 0, &val));
            if (ctf__bs_add_kid(P->a, named, val)) return ctf__bs_oom(P->err);
            arg = named;
        } else if (defining && arg->kind != E_ID) {
            return ctf__bs_fail(P->err, at.src, at.line, at.col, "expected a parameter name");
        }
        if (ctf__bs_add_kid(P->a, into, arg)) return ctf__bs_oom(P->err);
        if (!ctf__bs_is_op(&P->lx.cur, ",")) break;
        TRY(advance(P));
    }
    if (!ctf__bs_is_op(&P->lx.cur, closer)) {
        char what[80];
        snprintf(what, sizeof what, "',' or '%s' to close the '%s' on line %u", closer,
                 open.s[0] == '(' ? "(" : "{", open.line);
        return expected(P, what);
    }
    P->in_items = outer_items;
    return advance(P);
}

static bool starts_operand(const bs_tok *t)
{
    if (t->kind == T_NUM || t->kind == T_STR || t->kind == T_SUBST || t->kind == T_RAW ||
        t->kind == T_BADINC)
        return true;
    if (t->kind == T_ID)
        return !ctf__bs_is_kw(t, "then") && !ctf__bs_is_kw(t, "else") && !ctf__bs_is_kw(t, "with");
    return ctf__bs_is_op(t, "(") || ctf__bs_is_op(t, "[") || ctf__bs_is_op(t, "{") ||
           ctf__bs_is_op(t, "[|") || ctf__bs_is_op(t, "!");
}

/* Appends item to arr, flattening an a:b:c array into its items. */
static int add_item(parser *P, bs_expr *arr, bs_expr *item)
{
    if (item->kind == E_ARRAY && item->b) {
        for (size_t i = 0; i < item->nkids; i++)
            if (ctf__bs_add_kid(P->a, arr, item->kids[i])) return ctf__bs_oom(P->err);
        return 0;
    }
    return ctf__bs_add_kid(P->a, arr, item) ? ctf__bs_oom(P->err) : 0;
}

/* '(' ... ')': grouping, or an array when ';', line breaks or a leading separator split it. */
static int parse_paren(parser *P, bs_expr **out)
{
    bs_tok open = P->lx.cur;
    bool more = open.end < open.src->text + open.src->len;
    char lead = more ? open.end[0] : 0;
    char sep = lead == ';' || lead == ',' ? lead : ';';
    TRY(advance(P));
    bs_expr *arr = node_at(P, E_ARRAY, &open), *first = NULL;
    if (!arr) return ctf__bs_oom(P->err);
    size_t parts = 0;
    bool split = false, outer_items = P->in_items;
    /* Without a separator written after '(', commas separate items too, as in CNTK's older
     * syntax: `outputNodeNames = (ol, regrLabels, rmse)`. */
    bool commas = lead != sep;
    P->in_items = true;
    for (;;) {
        while (P->lx.cur.kind == T_PUNCT && P->lx.cur.n == 1 &&
               (P->lx.cur.s[0] == sep || (commas && P->lx.cur.s[0] == ','))) {
            split = true;
            TRY(advance(P));
        }
        if (ctf__bs_is_op(&P->lx.cur, ")")) break;
        if (parts && !split && !(P->lx.cur.line_initial && starts_operand(&P->lx.cur))) break;
        bs_expr *item = NULL;
        TRY(parse_expr(P, 0, &item));
        if (parts++) split = true;
        if (!first) first = item;
        TRY(add_item(P, arr, item));
        split = false;
    }
    if (!ctf__bs_is_op(&P->lx.cur, ")")) {
        char what[96];
        snprintf(what, sizeof what, "')' to close the '(' opened on line %u", open.line);
        return expected(P, what);
    }
    P->in_items = outer_items;
    TRY(advance(P));
    if (parts == 1 && lead != sep) {
        *out = first; /* plain parentheses */
        return 0;
    }
    finish(P, arr);
    *out = arr;
    return 0;
}

static int parse_operand(parser *P, bs_expr **out)
{
    bs_tok t = P->lx.cur;
    bs_expr *e = NULL;
    switch (t.kind) {
    case T_NUM:
    case T_STR:
    case T_SUBST:
    case T_RAW:
    case T_BADINC:
        e = node_at(P,
                    t.kind == T_NUM     ? E_NUM
                    : t.kind == T_STR   ? E_STR
                    : t.kind == T_SUBST ? E_SUBST
                    : t.kind == T_RAW   ? E_RAW
                                        : E_BADINC,
                    &t);
        if (!e) return ctf__bs_oom(P->err);
        e->s = t.s;
        e->n = t.n;
        e->num = t.num;
        TRY(advance(P));
        break;
    case T_ID:
        if (ctf__bs_is_kw(&t, "true") || ctf__bs_is_kw(&t, "false")) {
            if (!(e = node_at(P, E_BOOL, &t))) return ctf__bs_oom(P->err);
            e->b = t.s[0] == 't';
            e->s = t.s;
            e->n = t.n;
            TRY(advance(P));
        } else if (ctf__bs_is_kw(&t, "if")) {
            bs_expr *c = NULL, *y = NULL, *n = NULL;
            TRY(advance(P));
            TRY(parse_expr(P, 0, &c));
            if (!ctf__bs_is_kw(&P->lx.cur, "then")) return expected(P, "'then'");
            TRY(advance(P));
            TRY(parse_expr(P, 0, &y));
            if (!ctf__bs_is_kw(&P->lx.cur, "else")) return expected(P, "'else'");
            TRY(advance(P));
            TRY(parse_expr(P, 0, &n));
            if (!(e = node_at(P, E_IF, &t)) || ctf__bs_add_kid(P->a, e, c) ||
                ctf__bs_add_kid(P->a, e, y) || ctf__bs_add_kid(P->a, e, n))
                return ctf__bs_oom(P->err);
        } else if (ctf__bs_is_kw(&t, "new")) {
            bs_expr *body = NULL;
            TRY(advance(P));
            if (P->lx.cur.kind != T_ID) return expected(P, "a class name after 'new'");
            bs_tok cls = P->lx.cur;
            TRY(advance(P));
            TRY(parse_operand(P, &body));
            if (!(e = node_at(P, E_NEW, &t)) || ctf__bs_add_kid(P->a, e, body))
                return ctf__bs_oom(P->err);
            e->s = cls.s;
            e->n = cls.n;
        } else if (ctf__bs_is_kw(&t, "array")) {
            bs_expr *from = NULL, *to = NULL, *fn = NULL;
            TRY(advance(P));
            TRY(expect_op(P, "["));
            TRY(parse_expr(P, 0, &from));
            TRY(expect_op(P, ".."));
            TRY(parse_expr(P, 0, &to));
            TRY(expect_op(P, "]"));
            TRY(expect_op(P, "("));
            TRY(parse_expr(P, 0, &fn));
            TRY(expect_op(P, ")"));
            if (!(e = node_at(P, E_ARRAYFN, &t)) || ctf__bs_add_kid(P->a, e, from) ||
                ctf__bs_add_kid(P->a, e, to) || ctf__bs_add_kid(P->a, e, fn))
                return ctf__bs_oom(P->err);
        } else if (!starts_operand(&t)) {
            return expected(P, "a value");
        } else {
            if (!(e = node_at(P, E_ID, &t))) return ctf__bs_oom(P->err);
            e->s = t.s;
            e->n = t.n;
            TRY(advance(P));
        }
        break;
    case T_PUNCT:
        if (ctf__bs_is_op(&t, "(")) {
            TRY(enter(P, &t));
            TRY(parse_paren(P, &e));
            P->depth--;
            *out = e;
            return 0;
        }
        if (ctf__bs_is_op(&t, "[") || ctf__bs_is_op(&t, "{")) {
            TRY(enter(P, &t));
            if (!(e = node_at(P, E_DICT, &t))) return ctf__bs_oom(P->err);
            e->scope = P->scope;
            TRY(advance(P));
            TRY(parse_members(P, e, t.s[0] == '[' ? "]" : "}", &t));
            P->depth--;
            break;
        }
        if (ctf__bs_is_op(&t, "[|")) {
            TRY(enter(P, &t));
            if (!(e = node_at(P, E_ARRAY, &t))) return ctf__bs_oom(P->err);
            TRY(advance(P));
            while (!ctf__bs_is_op(&P->lx.cur, "|]")) {
                bs_expr *item = NULL;
                TRY(parse_expr(P, 0, &item));
                if (ctf__bs_add_kid(P->a, e, item)) return ctf__bs_oom(P->err);
                if (!ctf__bs_is_op(&P->lx.cur, ";")) break;
                TRY(advance(P));
            }
            TRY(expect_op(P, "|]"));
            P->depth--;
            break;
        }
        if (ctf__bs_is_op(&t, "-") || ctf__bs_is_op(&t, "+") || ctf__bs_is_op(&t, "!")) {
            bs_expr *arg = NULL;
            TRY(enter(P, &t));
            TRY(advance(P));
            TRY(parse_expr(P, 90, &arg));
            P->depth--;
            if (!(e = node_at(P, E_UNARY, &t)) || ctf__bs_add_kid(P->a, e, arg))
                return ctf__bs_oom(P->err);
            e->s = t.s;
            e->n = 1;
            break;
        }
        return expected(P, "a value");
    default: return expected(P, "a value");
    }
    finish(P, e);
    *out = e;
    return 0;
}

/*======================================================================
 * Infix expressions
 *====================================================================*/

static int infix_prec(const parser *P, const bs_tok *t)
{
    static const struct {
        const char *op;
        int prec;
    } ops[] = {{".", 99},  {"[", 99},  {"(", 99}, {"{", 99}, {"*", 10}, {"/", 10},
               {".*", 10}, {"**", 10}, {"%", 10}, {"+", 9},  {"-", 9},  {"==", 8},
               {"!=", 8},  {"<", 8},   {"<=", 8}, {">", 8},  {">=", 8}, {"&&", 7},
               {"||", 6},  {">>", 5},  {"<<", 5}, {":", 4},  {"=>", 0}};
    if (ctf__bs_is_kw(t, "with")) return 9;
    if (t->kind != T_PUNCT) return -1;
    /* A bracket that starts a line begins something new rather than indexing or calling, except
     * a '(' where nothing new can begin (a block's members start with names): there it calls
     * what the previous line ends with, as in `model = Sequential` then `(` on the next line. */
    if (t->line_initial &&
        (ctf__bs_is_op(t, "[") || ctf__bs_is_op(t, "(") || ctf__bs_is_op(t, "{")))
        return ctf__bs_is_op(t, "(") && !P->in_items ? 99 : -1;
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (ctf__bs_is_op(t, ops[i].op)) return ops[i].prec;
    return -1;
}

static int parse_expr(parser *P, int min_prec, bs_expr **out)
{
    bs_tok first = P->lx.cur;
    bs_expr *left = NULL;
    TRY(enter(P, &first));
    TRY(parse_operand(P, &left));
    /* Each operator deepens the tree by one (a + b + c is (a + b) + c), and evaluation recurses
     * on it: bound the chain, as nesting is bounded. ':' only appends. */
    int chain = 0;
    for (;;) {
        bs_tok op = P->lx.cur;
        int prec = infix_prec(P, &op);
        if (prec < 0 || prec < min_prec) break;
        if (!ctf__bs_is_op(&op, ":") && ++chain > BS_MAX_CHAIN)
            return ctf__bs_fail(P->err, op.src, op.line, op.col,
                                "more than %d operators in one "
                                "expression",
                                BS_MAX_CHAIN);
        bs_expr *e = node_at(P, E_BINARY, &first);
        if (!e) return ctf__bs_oom(P->err);
        e->beg = left->beg;
        e->s = op.s;
        e->n = op.n;
        if (ctf__bs_is_op(&op, ".")) {
            TRY(advance(P));
            if (P->lx.cur.kind != T_ID) return expected(P, "a member name after '.'");
            e->kind = E_MEMBER;
            e->s = P->lx.cur.s;
            e->n = P->lx.cur.n;
            if (ctf__bs_add_kid(P->a, e, left)) return ctf__bs_oom(P->err);
            TRY(advance(P));
        } else if (ctf__bs_is_op(&op, "=>")) {
            bs_expr *params = node_at(P, E_ARRAY, &first), *body = NULL;
            if (left->kind != E_ID)
                return ctf__bs_fail(P->err, op.src, op.line, op.col,
                                    "expected a parameter name "
                                    "before '=>'");
            TRY(advance(P));
            TRY(parse_expr(P, 0, &body));
            e->kind = E_LAMBDA;
            if (!params || ctf__bs_add_kid(P->a, params, left) ||
                ctf__bs_add_kid(P->a, e, params) || ctf__bs_add_kid(P->a, e, body))
                return ctf__bs_oom(P->err);
        } else if (ctf__bs_is_op(&op, "(") || ctf__bs_is_op(&op, "{")) {
            e->kind = E_CALL;
            if (ctf__bs_add_kid(P->a, e, left)) return ctf__bs_oom(P->err);
            TRY(parse_args(P, false, e));
        } else if (ctf__bs_is_op(&op, "[")) {
            bs_expr *idx = NULL;
            TRY(advance(P));
            TRY(parse_expr(P, 0, &idx));
            TRY(expect_op(P, "]"));
            e->kind = E_INDEX;
            if (ctf__bs_add_kid(P->a, e, left) || ctf__bs_add_kid(P->a, e, idx))
                return ctf__bs_oom(P->err);
        } else if (ctf__bs_is_op(&op, ":")) {
            bs_expr *right = NULL;
            TRY(advance(P));
            TRY(parse_expr(P, prec + 1, &right));
            if (left->kind == E_ARRAY && left->b) {
                if (ctf__bs_add_kid(P->a, left, right)) return ctf__bs_oom(P->err);
                finish(P, left);
                continue;
            }
            e->kind = E_ARRAY;
            e->b = true; /* built by ':' (flattened when chained) */
            if (ctf__bs_add_kid(P->a, e, left) || ctf__bs_add_kid(P->a, e, right))
                return ctf__bs_oom(P->err);
        } else {
            bs_expr *right = NULL;
            TRY(advance(P));
            TRY(parse_expr(P, prec + 1, &right));
            if (ctf__bs_add_kid(P->a, e, left) || ctf__bs_add_kid(P->a, e, right))
                return ctf__bs_oom(P->err);
        }
        finish(P, e);
        left = e;
    }
    P->depth--;
    *out = left;
    return 0;
}

/*======================================================================
 * Dictionaries (members)
 *====================================================================*/

/* Skips an NDL value as text: balanced brackets, strings and comments respected. */
static int skip_ndl(parser *P, const bs_lexer *at)
{
    bs_frame *f = &P->lx.stack[P->lx.depth];
    const char *p = at->cur.beg, *end = f->src->text + f->src->len, *ls = f->line_start;
    uint32_t line = at->cur.line;
    ls = p - (at->cur.col - 1);
    int open = 0;
    for (; p < end; p++) {
        char c = *p;
        if (c == '\n') {
            line++;
            ls = p + 1;
            if (!open) break;
        } else if (c == '"' || c == '\'') {
            const char *q = memchr(p + 1, c, (size_t)(end - p - 1));
            if (!q) return -1;
            for (const char *r = p; r < q; r++)
                if (*r == '\n') {
                    line++;
                    ls = r + 1;
                }
            p = q;
        } else if (c == '#') {
            while (p + 1 < end && p[1] != '\n') p++;
        } else if (c == '[' || c == '{' || c == '(') {
            open++;
        } else if (c == ']' || c == '}' || c == ')') {
            if (--open < 0) return -1;
            if (!open) {
                p++;
                break;
            }
        } else if (c == ';' && !open) {
            break;
        }
    }
    if (open) return -1;
    f->p = p;
    f->line = line;
    f->line_start = ls;
    P->lx.prev_operand = true;
    return 0;
}

static int parse_value(parser *P, const bs_tok *name, bs_expr **out)
{
    /* NDLNetworkBuilder, and by CNTK's naming habit any block named ndl... (ndlMacroDefine,
     * ndlFullModel), may hold NDL. */
    bool ndl = false;
    for (size_t i = 0; i + 3 <= name->n && !ndl; i++) ndl = strncasecmp(name->s + i, "ndl", 3) == 0;
    if (!ndl) return parse_expr(P, 0, out);
    parser saved = *P;
    ctf_error tmp;
    P->err = P->lx.err = &tmp;
    int rc = parse_expr(P, 0, out);
    P->err = P->lx.err = saved.err;
    if (rc != CTF_EINVAL || saved.lx.depth != P->lx.depth) {
        if (rc == CTF_EINVAL) *saved.err = tmp;
        return rc == CTF_ENOMEM ? ctf__bs_oom(saved.err) : rc;
    }
    *P = saved;
    if (skip_ndl(P, &saved.lx)) {
        *P->err = tmp;
        return CTF_EINVAL;
    }
    bs_expr *e = node_at(P, E_SKIPPED, &saved.lx.cur);
    if (!e) return ctf__bs_oom(P->err);
    TRY(ctf__bs_lex_next(&P->lx));
    *out = e;
    return 0;
}

/* After `name =`: is the value missing? It is when the line ends there and the next line
 * starts another definition (`x = ...`) or closes the block. A value may begin on the next
 * line otherwise (`decoderParams =` then `if ... then ... else ...`). */
static bool empty_value(const bs_tok *t, const char *closer)
{
    if (!t->line_initial && t->kind != T_EOF) return false;
    if (t->kind == T_EOF || (closer && ctf__bs_is_op(t, closer))) return true;
    if (t->kind != T_ID) return false;
    const char *p = t->end, *end = t->src->text + t->src->len;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p < end && *p == '=' && !(p + 1 < end && (p[1] == '=' || p[1] == '>'));
}

static int parse_member(parser *P, bs_expr *dict, const char *closer)
{
    bs_tok name = P->lx.cur;
    bs_expr *def = node_at(P, E_DEF, &name), *params = NULL, *idx = NULL, *from = NULL, *to = NULL,
            *value = NULL;
    if (!def) return ctf__bs_oom(P->err);
    def->s = name.s;
    def->n = name.n;
    def->scope = dict;
    TRY(advance(P));
    if (ctf__bs_is_op(&P->lx.cur, "[") && !P->lx.cur.line_initial) {
        TRY(advance(P));
        if (P->lx.cur.kind != T_ID) return expected(P, "an index name");
        bs_tok i = P->lx.cur;
        if (!(idx = node_at(P, E_ID, &i))) return ctf__bs_oom(P->err);
        idx->s = i.s;
        idx->n = i.n;
        TRY(advance(P));
        TRY(expect_op(P, ":"));
        TRY(parse_expr(P, 0, &from));
        TRY(expect_op(P, ".."));
        TRY(parse_expr(P, 0, &to));
        TRY(expect_op(P, "]"));
    }
    if ((ctf__bs_is_op(&P->lx.cur, "(") || ctf__bs_is_op(&P->lx.cur, "{")) &&
        !P->lx.cur.line_initial) {
        if (!(params = node_at(P, E_ARRAY, &P->lx.cur))) return ctf__bs_oom(P->err);
        TRY(parse_args(P, true, params));
    }
    if (!ctf__bs_is_op(&P->lx.cur, "=")) {
        char what[96];
        snprintf(what, sizeof what, "'=' after '%.*s'", (int)CTF_MIN(name.n, 40), name.s);
        return expected(P, what);
    }
    bs_tok eq = P->lx.cur;
    TRY(advance(P));
    if (empty_value(&P->lx.cur, closer)) {
        /* CNTK's older syntax: `name =` with nothing after it on the line is the empty string. */
        if (!(value = node_at(P, E_STR, &eq))) return ctf__bs_oom(P->err);
        value->s = "";
    } else {
        TRY(parse_value(P, &name, &value));
    }
    if (params) {
        bs_expr *fn = node_at(P, E_LAMBDA, &name);
        if (!fn || ctf__bs_add_kid(P->a, fn, params) || ctf__bs_add_kid(P->a, fn, value))
            return ctf__bs_oom(P->err);
        fn->b = true; /* written as f(x) = ...: a function definition, not a value */
        value = fn;
    }
    if (idx) {
        bs_expr *fn = node_at(P, E_LAMBDA, &name), *arr = node_at(P, E_ARRAYFN, &name),
                *ps = node_at(P, E_ARRAY, &name);
        if (!fn || !arr || !ps || ctf__bs_add_kid(P->a, ps, idx) || ctf__bs_add_kid(P->a, fn, ps) ||
            ctf__bs_add_kid(P->a, fn, value) || ctf__bs_add_kid(P->a, arr, from) ||
            ctf__bs_add_kid(P->a, arr, to) || ctf__bs_add_kid(P->a, arr, fn))
            return ctf__bs_oom(P->err);
        value = arr;
    }
    if (ctf__bs_add_kid(P->a, def, value) || ctf__bs_add_kid(P->a, dict, def))
        return ctf__bs_oom(P->err);
    const bs_tok *t = &P->lx.cur;
    if (ctf__bs_is_op(t, ";")) return advance(P);
    if (t->line_initial || t->kind == T_EOF || (closer && ctf__bs_is_op(t, closer))) return 0;
    if (ctf__bs_is_op(t, "]") || ctf__bs_is_op(t, "}") || ctf__bs_is_op(t, ")"))
        return 0; /* caller reports */
    if (ctf__bs_is_op(t, "=") && value->kind == E_ID)
        return ctf__bs_fail(P->err, value->src, value->line, value->col,
                            "expected a value after "
                            "'%.*s =', found the definition of '%.*s'",
                            (int)CTF_MIN(name.n, 40), name.s, (int)CTF_MIN(value->n, 40), value->s);
    char what[96];
    snprintf(what, sizeof what, "';' or a line break after the value of '%.*s'",
             (int)CTF_MIN(name.n, 40), name.s);
    return expected(P, what);
}

/* A name that begins with a digit (`1x1 = [ ... ]`, `10x10_dense = [ ... ]`): CNTK's reader
 * tests name sections so, and CNTK takes any text before '=' as a name. Digits, letters and '_'
 * followed by '='. */
static bool digit_name(const bs_tok *t)
{
    if ((t->kind != T_RAW && t->kind != T_NUM) || t->end != t->s + t->n) return false;
    for (size_t i = 0; i < t->n; i++)
        if (!(isalnum((unsigned char)t->s[i]) || t->s[i] == '_')) return false;
    const char *p = t->end, *end = t->src->text + t->src->len;
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p < end && *p == '=' && !(p + 1 < end && (p[1] == '=' || p[1] == '>'));
}

static int parse_members(parser *P, bs_expr *dict, const char *closer, const bs_tok *open)
{
    bs_expr *outer = P->scope;
    bool outer_items = P->in_items;
    P->scope = dict;
    P->in_items = false;
    for (;;) {
        const bs_tok *t = &P->lx.cur;
        if (ctf__bs_is_op(t, ";")) {
            TRY(advance(P));
            continue;
        }
        if (closer && ctf__bs_is_op(t, closer)) {
            TRY(advance(P));
            break;
        }
        if (t->kind == T_ID || digit_name(t)) {
            TRY(parse_member(P, dict, closer));
            continue;
        }
        if (t->kind == T_BADINC) {
            bs_expr *b = node_at(P, E_BADINC, t);
            if (!b) return ctf__bs_oom(P->err);
            b->s = t->s;
            b->n = t->n;
            if (ctf__bs_add_kid(P->a, dict, b)) return ctf__bs_oom(P->err);
            TRY(advance(P));
            continue;
        }
        if (!closer && t->kind == T_EOF) break;
        /* A closing bracket too many at the top level: CNTK reads it as a name without a value
         * and goes on, so a section closed early leaves its rest (a reader) at the top level,
         * where the section still finds it (see config.c). */
        if (!closer && (ctf__bs_is_op(t, "]") || ctf__bs_is_op(t, "}") || ctf__bs_is_op(t, ")"))) {
            TRY(advance(P));
            continue;
        }
        if (closer && (t->kind == T_EOF || ctf__bs_is_op(t, "]") || ctf__bs_is_op(t, "}") ||
                       ctf__bs_is_op(t, ")"))) {
            char what[96];
            snprintf(what, sizeof what, "'%s' to close the block opened on line %u", closer,
                     open->line);
            return expected(P, what);
        }
        return expected(P, "a name (letters, digits, '_')");
    }
    P->scope = outer;
    P->in_items = outer_items;
    finish(P, dict);
    return 0;
}

/*======================================================================
 * Entry points
 *====================================================================*/

/* $X$ in an include path: the command line first, then the members defined so far. */
static const char *resolve(void *ctx, const char *name, size_t n, size_t *len)
{
    parser *P = ctx;
    const bs_expr *d = ctf__bs_dict_find(P->overrides, name, n, true);
    if (!d) d = ctf__bs_lookup(P->scope, name, n, true, NULL, NULL);
    if (!d || !d->nkids) return NULL;
    const bs_expr *v = d->kids[0];
    if (v->kind != E_STR && v->kind != E_RAW && v->kind != E_NUM && v->kind != E_ID) return NULL;
    *len = v->n;
    return v->s;
}

static void parser_init(parser *P, bs_arena *a, const bs_src *src, ctf_error *err)
{
    memset(P, 0, sizeof *P);
    ctf__bs_lex_init(&P->lx, a, src, err);
    P->a = a;
    P->err = err;
    P->lx.resolve = resolve;
    P->lx.resolve_ctx = P;
}

int ctf__bs_parse_file(bs_arena *a, const bs_src *src, const bs_expr *overrides, bs_expr **out,
                       ctf_error *err)
{
    parser P;
    parser_init(&P, a, src, err);
    P.overrides = overrides;
    bs_expr *root = ctf__bs_new(a, E_DICT, src, 1, 1);
    if (!root) return ctf__bs_oom(err);
    TRY(ctf__bs_lex_next(&P.lx));
    TRY(parse_members(&P, root, NULL, NULL));
    *out = root;
    return 0;
}

int ctf__bs_parse_value(bs_arena *a, const bs_src *src, bs_expr *scope, bs_expr **out,
                        ctf_error *err)
{
    parser P;
    parser_init(&P, a, src, err);
    P.scope = scope;
    TRY(ctf__bs_lex_next(&P.lx));
    TRY(parse_expr(&P, 0, out));
    if (P.lx.cur.kind != T_EOF) return expected(&P, "the end of the value");
    return 0;
}
