/*
 * bs.h -- the BrainScript configuration language, as CNTK's configuration files use it: an
 * arena, the lexer (bs_lex.c), the parser into a syntax tree (bs_parse.c) and the evaluator that
 * turns the reader's part of that tree into plain values (bs_eval.c). config.c maps those values
 * onto a ctf_config; nothing on the reading path includes this header.
 */
#ifndef CTFIO_BS_H
#define CTFIO_BS_H

#include "common/common.h"

#define BS_MAX_DEPTH 64        /* nesting of blocks, parentheses and operators (recursion) */
#define BS_MAX_CHAIN 500         /* operators in one chain (a + b + ...): the tree's depth */
#define BS_MAX_EVAL 1000         /* evaluation recursion (bounds the stack) */
#define BS_MAX_INCLUDE 16      /* include files open at once: deeper is taken as a cycle */
#define BS_MAX_SUBST 16        /* $a$ -> $b$ -> ...: deeper is taken as a cycle */
#define BS_MAX_VALUE 65536     /* bytes of one value after substitution */
#define BS_MAX_FILE (16u << 20) /* a larger "configuration" is almost surely the wrong file */
#define BS_MAX_WORK 200000     /* evaluation steps and copied values for one reader */
#define BS_MAX_INCLUDES 1024   /* include directives followed in one document, all files */
#define BS_MAX_INCLUDED (64u << 20) /* bytes of all included files together */
#define BS_UNRESOLVED 1        /* eval: a bare word that names nothing (old-style string) */

#if defined(__GNUC__)
#define BS_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define BS_PRINTF(f, a)
#endif

/*---- Arena: every tree node and string of one document; freed at once ----*/

typedef struct bs_block bs_block;
typedef struct bs_arena {
    bs_block *head;
} bs_arena;

void *ctf__bs_alloc(bs_arena *a, size_t n);                  /* zeroed; NULL when out of memory */
char *ctf__bs_strndup(bs_arena *a, const char *s, size_t n); /* NUL-terminated copy */
int ctf__bs_grow(bs_arena *a, void *items_ptr, size_t *cap, size_t need, size_t elt);
void ctf__bs_arena_free(bs_arena *a);

/*---- Sources (the file, included files, the command line) ----*/

typedef struct bs_src {
    const char *name;    /* path for messages and for resolving includes */
    const char *text;
    size_t len;
    bool no_lines;       /* the command line: positions are reported as line 0 */
} bs_src;

int ctf__bs_read_file(bs_arena *a, const char *path, bs_src **out, ctf_error *err);

/*---- Syntax tree ----*/

typedef enum bs_kind {
    E_NUM,
    E_STR,
    E_BOOL,
    E_ID,
    E_SUBST,
    E_RAW,
    E_DICT,
    E_ARRAY,
    E_UNARY,
    E_BINARY,
    E_IF,
    E_CALL,
    E_MEMBER,
    E_INDEX,
    E_LAMBDA,
    E_NEW,
    E_ARRAYFN,
    E_NAMED,
    E_DEF,
    E_BADINC,
    E_SKIPPED
} bs_kind;

typedef struct bs_expr bs_expr;
struct bs_expr {
    bs_kind kind;
    const bs_src *src;
    uint32_t line, col;
    const char *beg, *end;  /* the source text it was parsed from (same source), or NULL */
    const char *s;          /* name, string content, operator, raw word, include error */
    size_t n;
    double num;
    bool b;
    bs_expr **kids;         /* operands, items, arguments; a dictionary's E_DEF members */
    size_t nkids, cap;
    bs_expr *scope;         /* E_DICT: the enclosing dictionary; E_DEF: its dictionary */
};

/* Parses a whole file (its top-level members) into a dictionary, following includes; $X$ in an
 * include path looks in overrides (a dictionary, may be NULL) first. */
int ctf__bs_parse_file(bs_arena *a, const bs_src *src, const bs_expr *overrides, bs_expr **out,
                       ctf_error *err);
/* Parses one value (a command-line override); the source must hold exactly one expression. */
int ctf__bs_parse_value(bs_arena *a, const bs_src *src, bs_expr *scope, bs_expr **out,
                        ctf_error *err);
int ctf__bs_add_kid(bs_arena *a, bs_expr *parent, bs_expr *kid);
bs_expr *ctf__bs_new(bs_arena *a, bs_kind kind, const bs_src *src, uint32_t line, uint32_t col);
/* The last member of dictionary d named name (exact case, else any case), or NULL. */
bs_expr *ctf__bs_dict_find(const bs_expr *d, const char *name, size_t n, bool any_case);
const char *ctf__bs_kind_name(const bs_expr *e);

/*---- Values: what a reader section evaluates to ----*/

typedef enum cfg_kind { N_SCALAR, N_DICT, N_ARRAY } cfg_kind;

typedef struct cfg_node cfg_node;
struct cfg_node {
    cfg_kind kind;
    bool quoted;             /* a string rather than a number, word or boolean */
    uint32_t line, col;      /* where the value is, 1-based; 0 for command-line overrides */
    uint32_t key_line, key_col;
    const char *src;         /* file the value is in */
    char *key;               /* entry name in a dictionary; NULL for array items */
    char *text;              /* scalar text */
    cfg_node *parent;
    cfg_node **kids;
    size_t num_kids, cap_kids;
};

cfg_node *ctf__cfg_new(bs_arena *a, cfg_kind kind);
int ctf__cfg_add(bs_arena *a, cfg_node *d, cfg_node *child); /* replaces an exact-name duplicate */
cfg_node *ctf__cfg_find(const cfg_node *d, const char *key, size_t n);

typedef struct bs_memo bs_memo;

/* Evaluation context: the arena, the error record, the recursion guard and the values of the
 * definitions evaluated so far (values are immutable: each definition is evaluated once). */
typedef struct bs_eval_ctx {
    bs_arena *arena;
    ctf_error *err;
    int depth;
    int eval_depth;
    bs_memo *memo; /* open addressing, keyed by definition */
    size_t memo_n, memo_cap;
    uint64_t work; /* steps and copied values, at most BS_MAX_WORK */
    bool cycle; /* a cycle made a name a word: the value depends on the path */
    const bs_expr *active[BS_MAX_SUBST]; /* definitions being evaluated, outermost first */
    const char *const *block_keys; /* NULL-terminated: members whose bare names mean blocks */
    bool want_block; /* evaluating the value of such a member */
} bs_eval_ctx;

/* Evaluates a member definition (its value in its own scope) into a value named after it. An
 * unresolved bare word makes the member's value its source text, as in CNTK's older syntax. */
int ctf__bs_eval_def(bs_eval_ctx *cx, const bs_expr *def, cfg_node **out);
/* Evaluates a free expression in dictionary scope (self: a definition $X$ must skip). */
int ctf__bs_eval_expr(bs_eval_ctx *cx, const bs_expr *e, const bs_expr *scope, const bs_expr *self,
                      cfg_node **out);
/* Looks name up in scope and its enclosing dictionaries (skip: a definition to pass over). */
const bs_expr *ctf__bs_lookup(const bs_expr *scope, const char *name, size_t n, bool any_case,
                              const bs_expr *skip, const bs_expr **bad_include);

BS_PRINTF(5, 6)
int ctf__bs_fail(ctf_error *err, const bs_src *src, uint32_t line, uint32_t col, const char *fmt,
                 ...);
int ctf__bs_oom(ctf_error *err);

/*---- Lexer (bs_lex.c), used by the parser ----*/

typedef enum bs_tok_kind {
    T_EOF,
    T_NUM,
    T_STR,
    T_ID,
    T_SUBST,
    T_RAW,
    T_PUNCT,
    T_BADINC
} bs_tok_kind;

typedef struct bs_tok {
    bs_tok_kind kind;
    const char *s; /* text: identifier, string content, $X$ name, raw word, operator */
    size_t n;
    const char *beg, *end; /* the token in its source */
    const bs_src *src;
    uint32_t line, col;
    bool line_initial; /* first token on its line */
    double num;
} bs_tok;

typedef struct bs_frame {
    const bs_src *src;
    const char *p, *line_start;
    uint32_t line;
} bs_frame;

/* Resolves $X$ in an include path: returns the value's text or NULL. */
typedef const char *(*bs_resolve_fn)(void *ctx, const char *name, size_t n, size_t *len);

typedef struct bs_lexer {
    bs_frame stack[BS_MAX_INCLUDE + 1];
    int depth;
    bs_tok cur;
    bool prev_operand; /* the previous token ends an operand: '/' and '.' are operators */
    bool prev_assign; /* the previous token is '=': a legacy unquoted value may follow */
    bs_arena *arena;
    ctf_error *err;
    bs_resolve_fn resolve;
    void *resolve_ctx;
    size_t includes; /* include directives followed, all files */
    uint64_t included; /* bytes of the files they read */
} bs_lexer;

void ctf__bs_lex_init(bs_lexer *lx, bs_arena *a, const bs_src *src, ctf_error *err);
int ctf__bs_lex_next(bs_lexer *lx);
bool ctf__bs_is_op(const bs_tok *t, const char *op);
bool ctf__bs_is_kw(const bs_tok *t, const char *kw);
const char *ctf__bs_tok_desc(const bs_tok *t, char *buf, size_t cap);

#endif
