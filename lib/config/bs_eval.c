/*
 * bs_eval.c -- evaluates the reader's part of a configuration into plain values (cfg_node:
 * scalars that keep their text, dictionaries and arrays). Only what the reader needs is ever
 * evaluated; networks, SGD blocks and functions are parsed but never run.
 *
 * What evaluation understands: numbers, strings, booleans, blocks, arrays (a:b:c, (a;b),
 * [| a; b |]), $X$ (CNTK's substitution: the named definition in this or an enclosing block or
 * on the command line, any case, the definition being made skipped so that
 * `dir = "$dir$/x"` refines an outer dir), $X$ inside strings and unquoted words, names of
 * definitions in enclosing blocks (BrainScript's lookup, exact case), member access a.b,
 * indexing a[i], unary - + !, arithmetic + - * / % **, string concatenation with +,
 * comparisons, && || and if-then-else. A name that is defined nowhere is CNTK's older unquoted
 * string: the value is then its text as written (`format = dense`, `file = Train.txt`).
 * Function calls, lambdas, `new` and NDL are refused with their location: a reader section
 * that needs them cannot be read without CNTK.
 */
#include "bs.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#define TRY(x) \
    do { \
        int rc_ = (x); \
        if (rc_) return rc_; \
    } while (0)

cfg_node *ctf__cfg_new(bs_arena *a, cfg_kind kind)
{
    cfg_node *n = ctf__bs_alloc(a, sizeof *n);
    if (n) n->kind = kind;
    return n;
}

/* In a dictionary a later definition of exactly the same name replaces the earlier one in place
 * (the last definition wins); names that differ in case stay apart, as stream names do. */
int ctf__cfg_add(bs_arena *a, cfg_node *d, cfg_node *child)
{
    child->parent = d;
    if (d->kind == N_DICT)
        for (size_t i = 0; i < d->num_kids; i++)
            if (strcmp(d->kids[i]->key, child->key) == 0) {
                d->kids[i] = child;
                return 0;
            }
    if (ctf__bs_grow(a, &d->kids, &d->cap_kids, d->num_kids + 1, sizeof *d->kids))
        return CTF_ENOMEM;
    d->kids[d->num_kids++] = child;
    return 0;
}

/* CNTK's configuration keys are case-insensitive; the last definition wins. */
cfg_node *ctf__cfg_find(const cfg_node *d, const char *key, size_t n)
{
    if (!d || d->kind != N_DICT) return NULL;
    for (size_t i = d->num_kids; i-- > 0;)
        if (strlen(d->kids[i]->key) == n && strncasecmp(d->kids[i]->key, key, n) == 0)
            return d->kids[i];
    return NULL;
}

/*======================================================================
 * Helpers
 *====================================================================*/

BS_PRINTF(3, 4) static int fail_at(bs_eval_ctx *cx, const bs_expr *e, const char *fmt, ...)
{
    char msg[CTF_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ctf__bs_fail(cx->err, e->src, e->line, e->col, "%s%s", msg,
                        e->line ? "" : " (from a command-line override)");
}

static int scalar(bs_eval_ctx *cx, const bs_expr *at, const char *s, size_t n, bool quoted,
                  cfg_node **out)
{
    cfg_node *v = ctf__cfg_new(cx->arena, N_SCALAR);
    if (!v || !(v->text = ctf__bs_strndup(cx->arena, s, n))) return ctf__bs_oom(cx->err);
    v->quoted = quoted;
    v->line = at->line;
    v->col = at->col;
    v->src = at->src ? at->src->name : NULL;
    *out = v;
    return 0;
}

static int number(bs_eval_ctx *cx, const bs_expr *at, double d, cfg_node **out)
{
    char buf[64];
    if (!isfinite(d)) return fail_at(cx, at, "the result is not a finite number");
    if (d == floor(d) && fabs(d) < 1e15)
        snprintf(buf, sizeof buf, "%.0f", d);
    else
        snprintf(buf, sizeof buf, "%.15g", d);
    return scalar(cx, at, buf, strlen(buf), false, out);
}

/* An integer written as digits (with a sign), within int64: arithmetic on two of them is exact.
 * @return : 1 an integer, 0 not an integer, -1 an integer outside int64 */
static int as_int(const cfg_node *v, int64_t *i)
{
    if (v->kind != N_SCALAR || v->quoted) return 0;
    const char *p = v->text;
    if (*p == '-' || *p == '+') p++;
    if (!isdigit((unsigned char)*p)) return 0;
    while (isdigit((unsigned char)*p)) p++;
    if (*p) return 0;
    errno = 0;
    char *end;
    long long x = strtoll(v->text, &end, 10);
    if (errno == ERANGE) return -1;
    *i = (int64_t)x;
    return 1;
}

static int integer(bs_eval_ctx *cx, const bs_expr *at, int64_t i, cfg_node **out)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)i);
    return scalar(cx, at, buf, strlen(buf), false, out);
}

/* + - * / % ** on two integers, exactly. @return : 0 and *out, 1 when the result is not an
 * integer (a quotient with a remainder, a negative power: the caller computes it in floating
 * point), or an error (overflow, division by zero). */
static int int_arith(bs_eval_ctx *cx, const bs_expr *e, const char *op, int64_t x, int64_t y,
                     cfg_node **out);

static bool as_number(const cfg_node *v, double *d)
{
    if (v->kind != N_SCALAR || v->quoted || !v->text[0]) return false;
    char *end;
    *d = strtod(v->text, &end);
    return *end == 0;
}

static bool as_bool(const cfg_node *v, bool *b)
{
    if (v->kind != N_SCALAR || v->quoted) return false;
    if (!strcasecmp(v->text, "true"))
        *b = true;
    else if (!strcasecmp(v->text, "false"))
        *b = false;
    else
        return false;
    return true;
}

static const char *describe(const cfg_node *n, char *buf, size_t cap)
{
    if (n->kind == N_DICT) return "a block";
    if (n->kind == N_ARRAY) return "an array";
    snprintf(buf, cap, "\"%.60s%s\"", n->text, strlen(n->text) > 60 ? "..." : "");
    return buf;
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static int sbuf_put(bs_eval_ctx *cx, sbuf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > BS_MAX_VALUE) return CTF_ELIMIT;
    if (ctf__bs_grow(cx->arena, &b->p, &b->cap, b->n + n + 1, 1)) return CTF_ENOMEM;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/*======================================================================
 * $X$
 *====================================================================*/

/* Finds and evaluates the definition $X$ names (any case; `self` is passed over). */
static int substitute(bs_eval_ctx *cx, const bs_expr *at, const char *name, size_t n,
                      const bs_expr *scope, const bs_expr *self, cfg_node **out)
{
    const bs_expr *bad = NULL;
    const bs_expr *def = ctf__bs_lookup(scope, name, n, true, self, &bad);
    if (!def && bad)
        return fail_at(cx, at,
                       "'$%.*s$' is not defined here, and a file that might define it "
                       "could not be included (line %u: %.*s)",
                       (int)n, name, bad->line, (int)bad->n, bad->s);
    if (!def)
        return fail_at(cx, at,
                       "undefined variable '$%.*s$': not defined in an enclosing block "
                       "or by a command-line override",
                       (int)n, name);
    if (cx->depth >= BS_MAX_SUBST)
        return fail_at(cx, at,
                       "'$%.*s$': substitutions nested more than %d deep (is there a "
                       "cycle?)",
                       (int)n, name, BS_MAX_SUBST);
    cx->active[cx->depth++] = def;
    int rc = ctf__bs_eval_def(cx, def, out);
    cx->depth--;
    /* A single value is reported where it was substituted; a block keeps its own lines. */
    if (!rc && (*out)->kind == N_SCALAR) {
        (*out)->line = at->line;
        (*out)->col = at->col;
        (*out)->src = at->src ? at->src->name : NULL;
    }
    return rc;
}

/* Replaces every $X$ in s by the text of X's value; a '$' that starts no reference stays. */
static int expand(bs_eval_ctx *cx, const bs_expr *at, const char *s, size_t n, const bs_expr *scope,
                  const bs_expr *self, sbuf *out)
{
    const char *p = s, *end = s + n;
    int rc = sbuf_put(cx, out, "", 0);
    while (!rc && p < end) {
        const char *q = p + 1;
        if (*p == '$')
            while (q < end && (isalnum((unsigned char)*q) || *q == '_')) q++;
        if (*p != '$' || q == p + 1 || q >= end || *q != '$') {
            const char *e = memchr(p + 1, '$', (size_t)(end - p - 1));
            if (!e) e = end;
            rc = sbuf_put(cx, out, p, (size_t)(e - p));
            p = e;
            continue;
        }
        cfg_node *v = NULL;
        TRY(substitute(cx, at, p + 1, (size_t)(q - p - 1), scope, self, &v));
        if (v->kind != N_SCALAR) {
            const bs_expr *def = ctf__bs_lookup(scope, p + 1, (size_t)(q - p - 1), true, self,
                                                NULL);
            return fail_at(cx, at,
                           "'$%.*s$' names a block (line %u); only single values can be "
                           "substituted into text",
                           (int)(q - p - 1), p + 1, def ? def->line : 0);
        }
        rc = sbuf_put(cx, out, v->text, strlen(v->text));
        p = q + 1;
    }
    if (rc == CTF_ELIMIT)
        return fail_at(cx, at, "value longer than %d bytes after substitution", BS_MAX_VALUE);
    return rc ? ctf__bs_oom(cx->err) : 0;
}

/* The older syntax's value: the text as written (one pair of quotes removed), $X$ expanded. */
static int raw_value(bs_eval_ctx *cx, const bs_expr *e, const bs_expr *scope, const bs_expr *self,
                     cfg_node **out)
{
    if (!e->beg || !e->end)
        return fail_at(cx, e, "cannot evaluate this value (it spans an included file)");
    const char *s = e->beg;
    size_t n = (size_t)(e->end - e->beg);
    bool quoted = n >= 2 && (s[0] == '"' || s[0] == '\'') && s[n - 1] == s[0];
    sbuf b = {0};
    TRY(expand(cx, e, s + quoted, n - 2 * quoted, scope, self, &b));
    return scalar(cx, e, b.p, b.n, quoted, out);
}

/*======================================================================
 * Expressions
 *====================================================================*/

static int eval(bs_eval_ctx *cx, const bs_expr *e, const bs_expr *scope, const bs_expr *self,
                cfg_node **out);
static int eval_base(bs_eval_ctx *cx, const bs_expr *e, const bs_expr *scope, const bs_expr *self,
                     cfg_node **out);

static int eval_item(bs_eval_ctx *cx, const bs_expr *e, const bs_expr *scope, const bs_expr *self,
                     cfg_node **out)
{
    int rc = eval(cx, e, scope, self, out);
    return rc == BS_UNRESOLVED ? raw_value(cx, e, scope, self, out) : rc;
}

static int int_arith(bs_eval_ctx *cx, const bs_expr *e, const char *op, int64_t x, int64_t y,
                     cfg_node **out)
{
    int64_t v = 0;
    bool over = false;
    if (!strcmp(op, "+"))
        over = __builtin_add_overflow(x, y, &v);
    else if (!strcmp(op, "-"))
        over = __builtin_sub_overflow(x, y, &v);
    else if (!strcmp(op, "*") || !strcmp(op, ".*"))
        over = __builtin_mul_overflow(x, y, &v);
    else if (!strcmp(op, "/") || !strcmp(op, "%")) {
        if (y == 0) return fail_at(cx, e, "division by zero");
        if (x == INT64_MIN && y == -1)
            over = op[0] == '/';
        else if (op[0] == '/' && x % y)
            return 1;
        else
            v = op[0] == '/' ? x / y : x % y;
    } else if (!strcmp(op, "**")) {
        if (y < 0) return 1;
        if (x == 0 || x == 1)
            v = y == 0 ? 1 : x;
        else if (x == -1)
            v = y % 2 ? -1 : 1;
        else /* |x| >= 2: overflow within 64 steps */
            for (v = 1; y-- > 0 && !over;) over = __builtin_mul_overflow(v, x, &v);
    } else {
        return 1;
    }
    if (over)
        return fail_at(cx, e, "integer overflow: %lld %s %lld is outside the 64-bit range",
                       (long long)x, op, (long long)y);
    return integer(cx, e, v, out);
}

static int eval_binary(bs_eval_ctx *cx, const bs_expr *e, const cfg_node *l, const cfg_node *r,
                       cfg_node **out)
{
    char op[3] = {0}, g1[80], g2[80];
    memcpy(op, e->s, CTF_MIN(e->n, 2));
    double x, y;
    bool a, b;
    int64_t ix = 0, iy = 0;
    int il = as_int(l, &ix), ir = as_int(r, &iy);
    if ((il < 0 || ir < 0) && (il != 0 && ir != 0) && strchr("+-*/%", op[0]))
        return fail_at(cx, e, "integer overflow: %s is outside the 64-bit range",
                       il < 0 ? l->text : r->text);
    bool ints = il > 0 && ir > 0;
    if (ints) {
        int rc = int_arith(cx, e, op, ix, iy, out);
        if (rc != 1) return rc;
    }
    bool nums = as_number(l, &x) && as_number(r, &y);
    if (nums) {
        double v;
        if (!strcmp(op, "+"))
            v = x + y;
        else if (!strcmp(op, "-"))
            v = x - y;
        else if (!strcmp(op, "*") || !strcmp(op, ".*"))
            v = x * y;
        else if (!strcmp(op, "/") || !strcmp(op, "%")) {
            if (y == 0) return fail_at(cx, e, "division by zero");
            v = op[0] == '/' ? x / y : fmod(x, y);
        } else if (!strcmp(op, "**"))
            v = pow(x, y);
        else
            goto compare;
        return number(cx, e, v, out);
    }
    if (!strcmp(op, "+") && l->kind == N_SCALAR && r->kind == N_SCALAR) {
        cfg_node *v = NULL;
        size_t ln = strlen(l->text), rn = strlen(r->text);
        char *s = ctf__bs_alloc(cx->arena, ln + rn + 1);
        if (!s) return ctf__bs_oom(cx->err);
        memcpy(s, l->text, ln);
        memcpy(s + ln, r->text, rn);
        TRY(scalar(cx, e, s, ln + rn, true, &v));
        *out = v;
        return 0;
    }
compare:
    if (!strcmp(op, "&&") || !strcmp(op, "||")) {
        if (!as_bool(l, &a) || !as_bool(r, &b))
            return fail_at(cx, e, "'%s' needs true or false on both sides (got %s and %s)", op,
                           describe(l, g1, sizeof g1), describe(r, g2, sizeof g2));
        bool v = op[0] == '&' ? a && b : a || b;
        return scalar(cx, e, v ? "true" : "false", v ? 4 : 5, false, out);
    }
    static const char *const cmps[] = {"==", "!=", "<", "<=", ">", ">="};
    for (int i = 0; i < 6; i++) {
        if (strcmp(op, cmps[i])) continue;
        int c;
        if (ints)
            c = ix < iy ? -1 : ix > iy;
        else if (nums)
            c = x < y ? -1 : x > y;
        else if (l->kind == N_SCALAR && r->kind == N_SCALAR && i < 2)
            c = strcmp(l->text, r->text);
        else
            break;
        bool v = i == 0   ? c == 0
                 : i == 1 ? c != 0
                 : i == 2 ? c < 0
                 : i == 3 ? c <= 0
                 : i == 4 ? c > 0
                          : c >= 0;
        return scalar(cx, e, v ? "true" : "false", v ? 4 : 5, false, out);
    }
    return fail_at(cx, e, "'%s' cannot combine %s and %s", op, describe(l, g1, sizeof g1),
                   describe(r, g2, sizeof g2));
}

/* The left side of a.b or a[i]: there a name may stand for a block (BrainScript's records). */
static int eval_base(bs_eval_ctx *cx, const bs_expr *e, const bs_expr *scope, const bs_expr *self,
                     cfg_node **out)
{
    if (e->kind == E_ID) {
        const bs_expr *def = ctf__bs_lookup(scope, e->s, e->n, false, self, NULL);
        if (def && def->kids[0]->kind == E_DICT) {
            for (int i = 0; i < cx->depth; i++)
                if (cx->active[i] == def) return cx->cycle = true, BS_UNRESOLVED;
            if (cx->depth >= BS_MAX_SUBST)
                return fail_at(cx, e, "'%.*s': definitions nested more than %d deep", (int)e->n,
                               e->s, BS_MAX_SUBST);
            cx->active[cx->depth++] = def;
            int rc = ctf__bs_eval_def(cx, def, out);
            cx->depth--;
            return rc;
        }
    }
    return eval(cx, e, scope, self, out);
}

static int eval_node(bs_eval_ctx *cx, const bs_expr *e, const bs_expr *scope, const bs_expr *self,
                     cfg_node **out);

static int too_much_work(bs_eval_ctx *cx, const bs_expr *e)
{
    return fail_at(cx, e,
                   "evaluating the reader takes more than %d steps (do definitions use "
                   "each other many times over?)",
                   BS_MAX_WORK);
}

static int eval(bs_eval_ctx *cx, const bs_expr *e, const bs_expr *scope, const bs_expr *self,
                cfg_node **out)
{
    if (cx->eval_depth >= BS_MAX_EVAL)
        return fail_at(cx, e, "expression nested too deeply to evaluate (more than %d levels)",
                       BS_MAX_EVAL);
    if (++cx->work > BS_MAX_WORK) return too_much_work(cx, e);
    cx->eval_depth++;
    int rc = eval_node(cx, e, scope, self, out);
    cx->eval_depth--;
    return rc;
}

static int eval_node(bs_eval_ctx *cx, const bs_expr *e, const bs_expr *scope, const bs_expr *self,
                     cfg_node **out)
{
    cfg_node *v = NULL, *w = NULL;
    sbuf b = {0};
    char got[80];
    switch (e->kind) {
    case E_NUM: return scalar(cx, e, e->s, e->n, false, out);
    case E_BOOL: return scalar(cx, e, e->b ? "true" : "false", e->b ? 4 : 5, false, out);
    case E_STR:
    case E_RAW:
        TRY(expand(cx, e, e->s, e->n, scope, self, &b));
        return scalar(cx, e, b.p, b.n, e->kind == E_STR, out);
    case E_SUBST: return substitute(cx, e, e->s, e->n, scope, self, out);
    case E_ID: {
        /* A name stands for a definition's value only where that is a plain value: in CNTK's
         * older syntax, which reader sections use, `alias = y` or `file = train.ctf` are words
         * even when a block y or train exists. A definition in progress (a cycle) is a word. */
        const bs_expr *def = ctf__bs_lookup(scope, e->s, e->n, false, self, NULL);
        if (!def) return BS_UNRESOLVED;
        bs_kind k = def->kids[0]->kind;
        if (k == E_DICT && cx->want_block) return eval_base(cx, e, scope, self, out);
        if (k == E_DICT || k == E_LAMBDA || k == E_NEW || k == E_CALL || k == E_SKIPPED ||
            k == E_ARRAYFN || k == E_BADINC)
            return BS_UNRESOLVED;
        for (int i = 0; i < cx->depth; i++)
            if (cx->active[i] == def) return cx->cycle = true, BS_UNRESOLVED;
        if (cx->depth >= BS_MAX_SUBST)
            return fail_at(cx, e, "'%.*s': definitions nested more than %d deep", (int)e->n, e->s,
                           BS_MAX_SUBST);
        cx->active[cx->depth++] = def;
        int rc = ctf__bs_eval_def(cx, def, out);
        cx->depth--;
        return rc;
    }
    case E_DICT:
        if (!(v = ctf__cfg_new(cx->arena, N_DICT))) return ctf__bs_oom(cx->err);
        v->line = e->line;
        v->col = e->col;
        v->src = e->src ? e->src->name : NULL;
        for (size_t i = 0; i < e->nkids; i++) {
            const bs_expr *m = e->kids[i];
            if (m->kind == E_BADINC) return fail_at(cx, m, "%.*s", (int)m->n, m->s);
            if (m->kids[0]->kind == E_LAMBDA && m->kids[0]->b) continue; /* not data */
            TRY(ctf__bs_eval_def(cx, m, &w));
            if (ctf__cfg_add(cx->arena, v, w)) return ctf__bs_oom(cx->err);
        }
        *out = v;
        return 0;
    case E_ARRAY:
        if (!(v = ctf__cfg_new(cx->arena, N_ARRAY))) return ctf__bs_oom(cx->err);
        v->line = e->line;
        v->col = e->col;
        v->src = e->src ? e->src->name : NULL;
        for (size_t i = 0; i < e->nkids; i++) {
            TRY(eval_item(cx, e->kids[i], scope, self, &w));
            if (ctf__cfg_add(cx->arena, v, w)) return ctf__bs_oom(cx->err);
        }
        *out = v;
        return 0;
    case E_UNARY: {
        TRY(eval(cx, e->kids[0], scope, self, &v));
        double d;
        bool t;
        if (e->s[0] == '!') {
            if (!as_bool(v, &t))
                return fail_at(cx, e, "'!' needs true or false (got %s)",
                               describe(v, got, sizeof got));
            return scalar(cx, e, t ? "false" : "true", t ? 5 : 4, false, out);
        }
        int64_t i;
        int ik = as_int(v, &i);
        if (ik > 0) {
            if (e->s[0] == '-' && i == INT64_MIN)
                return fail_at(cx, e, "integer overflow: -(%lld) is outside the 64-bit range",
                               (long long)i);
            return integer(cx, e, e->s[0] == '-' ? -i : i, out);
        }
        if (ik < 0 && e->s[0] == '-' && !strcmp(v->text, "9223372036854775808"))
            return integer(cx, e, INT64_MIN, out);
        if (ik < 0)
            return fail_at(cx, e, "integer overflow: %s is outside the 64-bit range", v->text);
        if (!as_number(v, &d))
            return fail_at(cx, e, "'%c' needs a number (got %s)", e->s[0],
                           describe(v, got, sizeof got));
        return number(cx, e, e->s[0] == '-' ? -d : d, out);
    }
    case E_BINARY:
        TRY(eval(cx, e->kids[0], scope, self, &v));
        TRY(eval(cx, e->kids[1], scope, self, &w));
        return eval_binary(cx, e, v, w, out);
    case E_IF: {
        bool t;
        TRY(eval(cx, e->kids[0], scope, self, &v));
        if (!as_bool(v, &t))
            return fail_at(cx, e->kids[0], "the condition of 'if' must be true or false (got %s)",
                           describe(v, got, sizeof got));
        return eval(cx, e->kids[t ? 1 : 2], scope, self, out);
    }
    case E_MEMBER:
        TRY(eval_base(cx, e->kids[0], scope, self, &v));
        if (v->kind == N_DICT && e->kids[0]->kind == E_ID && !ctf__cfg_find(v, e->s, e->n))
            return BS_UNRESOLVED; /* `file = train.ctf` beside a block named train */
        if (v->kind != N_DICT)
            return fail_at(cx, e, "'.%.*s': %s has no members", (int)e->n, e->s,
                           describe(v, got, sizeof got));
        if (!(*out = ctf__cfg_find(v, e->s, e->n)))
            return fail_at(cx, e, "no member '%.*s' in the block of line %u", (int)e->n, e->s,
                           v->line);
        return 0;
    case E_INDEX: {
        double d;
        TRY(eval_base(cx, e->kids[0], scope, self, &v));
        TRY(eval(cx, e->kids[1], scope, self, &w));
        if (v->kind != N_ARRAY)
            return fail_at(cx, e, "indexing needs an array (got %s)", describe(v, got, sizeof got));
        if (!as_number(w, &d) || d != floor(d) || d < 0 || d >= (double)v->num_kids)
            return fail_at(cx, e->kids[1], "index %s is not within the array's %zu items",
                           describe(w, got, sizeof got), v->num_kids);
        *out = v->kids[(size_t)d];
        return 0;
    }
    case E_BADINC: return fail_at(cx, e, "%.*s", (int)e->n, e->s);
    default:
        return fail_at(cx, e,
                       "%s cannot be evaluated in a reader section (only values, blocks, "
                       "arrays, $X$, names and operators can)",
                       ctf__bs_kind_name(e));
    }
}

int ctf__bs_eval_expr(bs_eval_ctx *cx, const bs_expr *e, const bs_expr *scope, const bs_expr *self,
                      cfg_node **out)
{
    return eval_item(cx, e, scope, self, out);
}

/*======================================================================
 * Each definition once
 *====================================================================*/

struct bs_memo {
    const bs_expr *def;
    cfg_node *value;        /* never handed out: callers get copies, which they may change */
};

static size_t memo_slot(const bs_eval_ctx *cx, const bs_expr *def)
{
    size_t h = (size_t)(((uintptr_t)def >> 4) * 0x9E3779B97F4A7C15u);
    size_t i = h & (cx->memo_cap - 1);
    while (cx->memo[i].def && cx->memo[i].def != def) i = (i + 1) & (cx->memo_cap - 1);
    return i;
}

static int memo_put(bs_eval_ctx *cx, const bs_expr *def, cfg_node *v)
{
    if (2 * (cx->memo_n + 1) > cx->memo_cap) {
        size_t cap = cx->memo_cap ? 2 * cx->memo_cap : 64;
        bs_memo *old = cx->memo, *m = ctf__bs_alloc(cx->arena, cap * sizeof *m);
        if (!m) return CTF_ENOMEM;
        size_t old_cap = cx->memo_cap;
        cx->memo = m;
        cx->memo_cap = cap;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].def) cx->memo[memo_slot(cx, old[i].def)] = old[i];
    }
    size_t i = memo_slot(cx, def);
    if (!cx->memo[i].def) cx->memo_n++;
    cx->memo[i].def = def;
    cx->memo[i].value = v;
    return 0;
}

/* A copy of a value: new nodes (the text is shared: nothing changes text in place). */
static int copy_value(bs_eval_ctx *cx, const bs_expr *at, const cfg_node *v, cfg_node **out)
{
    if (++cx->work > BS_MAX_WORK) return too_much_work(cx, at);
    cfg_node *c = ctf__cfg_new(cx->arena, v->kind);
    if (!c) return ctf__bs_oom(cx->err);
    *c = *v;
    c->parent = NULL;
    c->kids = NULL;
    c->num_kids = c->cap_kids = 0;
    for (size_t i = 0; i < v->num_kids; i++) {
        cfg_node *k = NULL;
        TRY(copy_value(cx, at, v->kids[i], &k));
        k->parent = c;
        if (ctf__bs_grow(cx->arena, &c->kids, &c->cap_kids, c->num_kids + 1, sizeof *c->kids))
            return ctf__bs_oom(cx->err);
        c->kids[c->num_kids++] = k;
    }
    *out = c;
    return 0;
}

/* Values are immutable, so a definition's value is computed once and copied at every further
 * use: `b = a + a + ...` repeated over a few levels stays linear instead of exponential. A value
 * that met a cycle (a name that turned into a word because its definition was in progress)
 * depends on where the evaluation came from and is not kept. */
int ctf__bs_eval_def(bs_eval_ctx *cx, const bs_expr *def, cfg_node **out)
{
    cfg_node *v = NULL;
    if (cx->memo_cap) {
        const bs_memo *m = &cx->memo[memo_slot(cx, def)];
        if (m->def == def) return copy_value(cx, def, m->value, out);
    }
    bool outer = cx->want_block, outer_cycle = cx->cycle;
    cx->want_block = false;
    cx->cycle = false;
    for (const char *const *k = cx->block_keys; k && *k; k++)
        if (strlen(*k) == def->n && !strncasecmp(*k, def->s, def->n)) cx->want_block = true;
    int rc = eval_item(cx, def->kids[0], def->scope, def, &v);
    cx->want_block = outer;
    bool cyclic = cx->cycle;
    cx->cycle = outer_cycle || cyclic;
    if (rc) return rc;
    /* Every evaluation builds fresh nodes (a.b and a[i] pick from a fresh temporary, or from a
     * copy), so the value can take the definition's name; the kept value is a copy. */
    if (!(v->key = ctf__bs_strndup(cx->arena, def->s, def->n))) return ctf__bs_oom(cx->err);
    v->key_line = def->line;
    v->key_col = def->col;
    v->parent = NULL;
    if (!cyclic) {
        cfg_node *kept = NULL;
        TRY(copy_value(cx, def, v, &kept));
        if (memo_put(cx, def, kept)) return ctf__bs_oom(cx->err);
    }
    *out = v;
    return 0;
}
