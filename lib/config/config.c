/*
 * config.c -- the reader configuration: defaults and validation of struct ctf_config, and the
 * mapping of a CNTK configuration file's reader section onto it (ctf_bsconfig_*).
 *
 * ctf_bsconfig_parse works in four steps:
 *   1. The whole file is parsed as CNTK's configuration language (bs_parse.c): every part,
 *      networks and SGD blocks included, so that a syntax error anywhere is reported with its
 *      file, line and column. Command-line overrides KEY=VALUE become top-level definitions
 *      written after the file (the last definition wins), so $KEY$ sees them.
 *   2. The reader is selected: the one in the named section (`Train`, or a dotted path such as
 *      `train.cvreader`), else the top-level `reader`, else the one of the only top-level block
 *      that holds one.
 *   3. Only that reader definition is evaluated (bs_eval.c) into plain values, and its composite
 *      form is split into deserializers: the first CNTKTextFormatDeserializer is the primary one,
 *      the others are joined by key. Dotted overrides (input.x.dim=10, reader.file=...) are then
 *      set on the evaluated reader.
 *   4. Storage for the streams, file lists and joins is sized, so ctf_bsconfig_apply allocates
 *      nothing and a failed apply leaves the caller's ctf_config untouched.
 * ctf_bsconfig_apply walks the reader's keys once, rejects unknown ones, type-checks each value
 * and fills a ctf_config.
 *
 * Errors: syntax errors carry the file, line and column of the offending token, value errors
 * those of the value, unknown keys those of the key. Values from command-line overrides have
 * line 0, and their messages say so.
 *
 * The reader parameters themselves are rows of params.def: enum key_id and key_names[] take
 * their BrainScript keys from it, and get_param parses them with the table's rules. Only keys
 * the language adds (verbosity, truncated, CNTK's randomize words) are read here by hand.
 */
#include "bs.h"
#include "params.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <strings.h>
#include <unistd.h>

#define MAX_OVERRIDE_PARTS 16   /* components of a dotted override key */
#define WINDOW_ALL_SAMPLES (UINT64_MAX / 2) /* a window in samples that holds any data set */

/*======================================================================
 * ctf_config: defaults and validation
 *====================================================================*/

void ctf_config_init(ctf_config *cfg)
{
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    ctf__params_init(cfg);
    /* As many parse threads as cores (at least one), a few chunks ahead each. */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    cfg->num_threads = cores > 0 ? (size_t)CTF_MIN((long)CTF_MAX_THREADS, cores) : 1;
    cfg->remote.max_retries = 8;
}


#define BAD(...) ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, __VA_ARGS__)

#define TRY(x) \
    do { \
        int rc_ = (x); \
        if (rc_) return rc_; \
    } while (0)

/* A mix takes its data from its parts only; their streams are checked when they open. */
static int validate_mix(const ctf_config *cfg, ctf_error *err)
{
    if (!cfg->mix) return BAD("config.mix: NULL with num_mix %zu", cfg->num_mix);
    if (cfg->num_mix > CTF_MAX_MIX_PARTS)
        return BAD("config.mix: at most %d parts (got %zu)", CTF_MAX_MIX_PARTS, cfg->num_mix);
    if ((cfg->path && cfg->path[0]) || cfg->num_paths || cfg->num_joins)
        return BAD("config.mix: a mix reads its parts' data; leave config.path, paths and joins "
                   "unset");
    bool any = false;
    for (size_t p = 0; p < cfg->num_mix; p++) {
        const ctf_mix_part *mp = &cfg->mix[p];
        if (!mp->num_paths || !mp->paths)
            return BAD("config.mix[%zu].paths: at least one file is required", p);
        for (size_t i = 0; i < mp->num_paths; i++)
            if (!mp->paths[i] || !mp->paths[i][0])
                return BAD("config.mix[%zu].paths[%zu]: must be a non-empty path", p, i);
        if (!isfinite(mp->weight) || mp->weight < 0)
            return BAD("config.mix[%zu].weight: must be a finite number >= 0 (got %g)", p,
                       mp->weight);
        if (mp->streams && !mp->num_streams)
            return BAD("config.mix[%zu].streams: at least one stream, or NULL for the mix's", p);
        any |= mp->weight > 0;
    }
    if (!any) return BAD("config.mix: at least one part needs a weight > 0 (all are 0)");
    return 0;
}

int ctf_config_validate(const ctf_config *cfg, ctf_error *err)
{
    if (!cfg) return BAD("config: NULL configuration");
    if (cfg->num_mix) {
        int rc = validate_mix(cfg, err);
        if (rc) return rc;
    } else if (cfg->num_paths) {
        if (!cfg->paths) return BAD("config.paths: NULL with num_paths %zu", cfg->num_paths);
        for (size_t i = 0; i < cfg->num_paths; i++)
            if (!cfg->paths[i] || !cfg->paths[i][0])
                return BAD("config.paths[%zu]: must be a non-empty path (got %s)", i,
                           cfg->paths[i] ? "\"\"" : "NULL");
    } else if (!cfg->path || !cfg->path[0]) {
        return BAD("config.path: the data file is required (got %s)", cfg->path ? "\"\"" : "NULL");
    }
    if (cfg->bad_records && cfg->bad_records[0] && cfg->max_errors == 0)
        return BAD("config.bad_records: needs max_errors > 0 (with max_errors 0 the first bad "
                   "record ends the read, so none is skipped)");
    if (cfg->bad_records && cfg->bad_records[0] && cfg->num_mix)
        return BAD("config.bad_records: not supported for a mix (yet): read its parts one by one");
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
        if (s->is_sparse && s->dim > CTF_MAX_SPARSE_DIM)
            return BAD("config.streams[%zu].dim: a sparse dimension must be <= %d because "
                       "indices are int32 (got %zu)",
                       i, INT32_MAX, s->dim);
        if (!s->is_sparse && s->dim > CTF_MAX_DENSE_DIM)
            return BAD("config.streams[%zu].dim: a dense dimension must be <= %llu (input.%s; "
                       "got %zu)",
                       i, (unsigned long long)CTF_MAX_DENSE_DIM, s->name, s->dim);
        for (size_t j = 0; j < i; j++) {
            const ctf_stream_def *o = &cfg->streams[j];
            if (strcmp(s->name, o->name) == 0)
                return BAD("config.streams[%zu].name: duplicate name '%s' (also used by "
                           "config.streams[%zu])",
                           i, s->name, j);
            if (strcmp(ctf__stream_field(s), ctf__stream_field(o)) == 0)
                return BAD("input.%s.alias: duplicate alias '%s' (also used by input.%s)", s->name,
                           ctf__stream_field(s), o->name);
        }
        if (s->defines_mb_size) {
            if (mb)
                return BAD("input.%s.definesMBSize: only one stream may define the minibatch "
                           "size (also set on input.%s)",
                           s->name, mb->name);
            mb = s;
        }
    }
    if (cfg->max_samples != CTF_INFINITELY_REPEAT && cfg->max_sweeps != CTF_INFINITELY_REPEAT)
        return BAD("config.max_samples: cannot be combined with config.max_sweeps; set one of "
                   "them (got max_samples %llu, max_sweeps %llu)",
                   (unsigned long long)cfg->max_samples, (unsigned long long)cfg->max_sweeps);
    if (cfg->frame_mode && cfg->truncation_length > 0)
        return BAD("config.truncation_length: truncation cannot be combined with frame_mode "
                   "(got %zu)",
                   cfg->truncation_length);
    TRY(ctf__params_validate(cfg, "config.", err));
    TRY(ctf__workers_check(cfg->num_workers, cfg->worker_rank, "config.", err));
    return 0;
}

/*======================================================================
 * The document
 *====================================================================*/

/* One deserializer: the primary one (the reader itself in the plain form) or a joined one. */
typedef struct deser_slot {
    cfg_node *node;           /* its block */
    cfg_node *input;          /* its input block (the reader's, for the plain form) */
    ctf_stream_def *streams;  /* one per entry of input; ctf_bsconfig_apply fills them */
    const char **paths;       /* one per file; ctf_bsconfig_apply fills them */
    char *origin;             /* "file:line:col" */
} deser_slot;

struct ctf_bsconfig {
    char *name;               /* the path used in messages */
    bs_arena arena;           /* the syntax tree and every value */
    const char *section;      /* the name of the section holding the reader, or NULL */
    cfg_node *reader;         /* the evaluated reader block */
    cfg_node *deser;          /* composite form: the primary deserializer block, else NULL */
    cfg_node *outer_precision; /* `precision` inherited from an enclosing block, or NULL */
    deser_slot *slots;        /* [0] primary, then the joined deserializers */
    size_t num_slots;
    ctf_join_def *joins;      /* num_slots - 1 of them */
    deser_slot *mix_slots;    /* the mix form: one per part */
    ctf_mix_part *mix;
    size_t num_mix;
    bool binary;              /* CNTKBinaryReader / CNTKBinaryFormatDeserializer: CBF files */
};

#define BAD(...) ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, __VA_ARGS__)

static int oom(ctf_error *err) { return ctf__bs_oom(err); }

BS_PRINTF(5, 6)
static int doc_fail(const ctf_bsconfig *doc, const cfg_node *at, bool at_key, ctf_error *err,
                    const char *fmt, ...)
{
    char msg[CTF_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    uint32_t line = at ? (at_key ? at->key_line : at->line) : 0;
    uint32_t col = at ? (at_key ? at->key_col : at->col) : 0;
    const char *path = at && at->src && line ? at->src : doc->name;
    return ctf__fail(err, CTF_EINVAL, (ctf__where){path, line, col, -1}, "%s%s", msg,
                     at && !line ? " (from a command-line override)" : "");
}

static const char *describe(const cfg_node *n, char *buf, size_t cap)
{
    if (n->kind == N_DICT) return "a block";
    if (n->kind == N_ARRAY) return "an array";
    snprintf(buf, cap, "\"%.60s%s\"", n->text, strlen(n->text) > 60 ? "..." : "");
    return buf;
}

static bool name_eq(const char *a, const char *b, size_t bn)
{
    return strlen(a) == bn && strncasecmp(a, b, bn) == 0;
}

static bool name_is(const char *a, const char *b, size_t bn)
{
    return strlen(a) == bn && memcmp(a, b, bn) == 0;
}

static bool is_name(const char *s, size_t n)
{
    if (n == 0) return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_') return false;
    return true;
}

static cfg_node *dict_find(const cfg_node *d, const char *key)
{
    return ctf__cfg_find(d, key, strlen(key));
}

static void forget_lines(cfg_node *n)
{
    n->line = n->col = n->key_line = n->key_col = 0;
    for (size_t i = 0; i < n->num_kids; i++) forget_lines(n->kids[i]);
}

/*======================================================================
 * Reader parameters (keys of the reader and deserializer blocks)
 *====================================================================*/

/* The table's parameters first (params.def, in its order; a row without a BrainScript key has
 * a NULL name), then the keys the language adds: aliases and switches beside the table, and
 * structure. */
typedef enum key_id {
#define CTF_PARAM(field, ...) K_##field,
#include "params.def"
#undef CTF_PARAM
    K_FILE,
    K_INPUT,
    K_VERBOSITY,
    K_TRUNCATED,
    K_MT_DESER,
    K_CHUNK_CACHE,
    K_BAD_RECORDS,
    /* Keys below are structure, not parameters: an undotted override never targets them. */
    K_READER_TYPE,
    K_TYPE,
    K_MODULE,
    K_DESERIALIZERS,
    K_MIX,
    K_COUNT
} key_id;

static const char *const key_names[K_COUNT] = {
#define CTF_PARAM(field, kind, bs_key, ...) bs_key,
#include "params.def"
#undef CTF_PARAM
    "file",
    "input",
    "verbosity",
    "truncated",
    "multiThreadedDeserialization",
    "chunkCache",
    "badRecordsFile",
    "readerType",
    "type",
    "module",
    "deserializers",
    "mix",
};

static int key_lookup(const char *s, size_t n)
{
    for (int i = 0; i < K_COUNT; i++)
        if (key_names[i] && name_eq(key_names[i], s, n)) return i;
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
            size_t sub = diag +
                         (tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]));
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
        if (!names[i]) continue;
        size_t d = edit_distance(key, names[i]);
        if (d < bestd) {
            bestd = d;
            best = names[i];
        }
    }
    return best;
}

static int unknown_key(const ctf_bsconfig *doc, const cfg_node *e, const char *where,
                       const char *const *names, size_t n, ctf_error *err)
{
    const char *s = suggest(e->key, names, n);
    char hint[96] = "";
    if (s) snprintf(hint, sizeof hint, " (did you mean '%s'?)", s);
    return doc_fail(doc, e, true, err, "%s: unknown parameter '%s'%s", where, e->key, hint);
}

/*======================================================================
 * Selecting the reader (on the syntax tree) and its deserializers
 *====================================================================*/

static bool holds_reader(const bs_expr *def)
{
    const bs_expr *v = def->kind == E_DEF ? def->kids[0] : NULL;
    return v && v->kind == E_DICT && ctf__bs_dict_find(v, "reader", 6, true);
}

/* A block that is itself a reader (for --section train.cvreader). */
static bool looks_like_reader(const bs_expr *d)
{
    static const char *const keys[] = {"readerType", "deserializers", "file", "input"};
    for (size_t i = 0; i < 4; i++)
        if (ctf__bs_dict_find(d, keys[i], strlen(keys[i]), true)) return true;
    return false;
}

/* Lists the top-level blocks (those holding a reader, if need_reader) for messages. */
static size_t list_blocks(const bs_expr *root, bool need_reader, char *buf, size_t cap,
                          const bs_expr **only)
{
    size_t count = 0, used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < root->nkids; i++) {
        const bs_expr *b = root->kids[i];
        if (b->kind != E_DEF || b->kids[0]->kind != E_DICT || (need_reader && !holds_reader(b)))
            continue;
        if (ctf__bs_dict_find(root, b->s, b->n, true) != b) continue; /* redefined later */
        *only = b;
        if (used < cap) {
            int k = snprintf(buf + used, cap - used, "%s'%.*s' (line %u)", count ? ", " : "",
                             (int)CTF_MIN(b->n, 40), b->s, b->line);
            if (k > 0) used += (size_t)k;
        }
        count++;
    }
    return count;
}

static int tree_fail(const ctf_bsconfig *doc, const bs_expr *at, ctf_error *err, const char *fmt,
                     const char *a, const char *b)
{
    char msg[CTF_ERROR_MSG_MAX];
    snprintf(msg, sizeof msg, fmt, a, b);
    if (!at) return ctf__fail(err, CTF_EINVAL, (ctf__where){doc->name, 0, 0, -1}, "%s", msg);
    return ctf__bs_fail(err, at->src, at->line, at->col, "%s", msg);
}

static const bs_expr *first_bad_include(const bs_expr *d)
{
    for (size_t i = 0; i < d->nkids; i++)
        if (d->kids[i]->kind == E_BADINC) return d->kids[i];
    return NULL;
}

static int bad_include(const bs_expr *b, ctf_error *err)
{
    return ctf__bs_fail(err, b->src, b->line, b->col, "%.*s", (int)b->n, b->s);
}

/* Finds the definition of the reader: see the file's top comment. */
static int select_reader(ctf_bsconfig *doc, const bs_expr *root, const char *section,
                         const bs_expr **out, ctf_error *err)
{
    char list[256];
    const bs_expr *only = NULL, *r;
    size_t count = list_blocks(root, true, list, sizeof list, &only);
    if (section) {
        const bs_expr *d = root, *sec = NULL;
        const char *p = section;
        for (;;) {
            const char *dot = strchr(p, '.');
            size_t n = dot ? (size_t)(dot - p) : strlen(p);
            sec = ctf__bs_dict_find(d, p, n, true);
            if (!sec && d == root && first_bad_include(root))
                return bad_include(first_bad_include(root), err);
            if (!sec)
                return tree_fail(doc, NULL, err,
                                 "section '%s': no top-level block of that name "
                                 "(blocks with a reader: %s)",
                                 section, count ? list : "none");
            if (sec->kids[0]->kind != E_DICT)
                return tree_fail(doc, sec, err, "section '%s' is not a block%s", section, "");
            d = sec->kids[0];
            if (!dot) break;
            p = dot + 1;
        }
        r = ctf__bs_dict_find(d, "reader", 6, true);
        if (!r && looks_like_reader(d)) r = sec;
        /* CNTK looks a setting a block lacks up in the enclosing blocks: a section closed early
         * by a ']' too many still finds its reader at the top level. */
        for (const bs_expr *o = d->scope; !r && o; o = o->scope)
            if ((r = ctf__bs_dict_find(o, "reader", 6, true)) && r->kids[0]->kind != E_DICT)
                r = NULL;
        if (!r && first_bad_include(d)) return bad_include(first_bad_include(d), err);
        if (!r)
            return tree_fail(doc, sec, err, "section '%s' has no 'reader' block%s", section, "");
        doc->section = section;
    } else if (!(r = ctf__bs_dict_find(root, "reader", 6, true))) {
        if (count == 0) {
            if (first_bad_include(root)) return bad_include(first_bad_include(root), err);
            bool any = list_blocks(root, false, list, sizeof list, &only) > 0;
            return tree_fail(doc, NULL, err,
                             "no reader: expected a top-level 'reader' block or a "
                             "top-level block that holds one (top-level blocks: %s)%s",
                             any ? list : "none", "");
        }
        if (count > 1)
            return tree_fail(doc, NULL, err,
                             "several blocks hold a 'reader' (%s): select one by "
                             "its section name%s",
                             list, "");
        r = ctf__bs_dict_find(only->kids[0], "reader", 6, true);
        if (!(doc->section = ctf__bs_strndup(&doc->arena, only->s, only->n))) return oom(err);
    }
    *out = r;
    return 0;
}

static bool is_ctf_type(const cfg_node *t)
{
    return t->kind == N_SCALAR && !strcasecmp(t->text, "CNTKTextFormatDeserializer");
}

static bool is_cbf_type(const cfg_node *t)
{
    return t->kind == N_SCALAR && !strcasecmp(t->text, "CNTKBinaryFormatDeserializer");
}

/* The composite form: every item of deserializers must be a CNTKTextFormatDeserializer. */
static int select_deserializers(ctf_bsconfig *doc, cfg_node ***items_out, size_t *n_out,
                                ctf_error *err)
{
    char got[80];
    cfg_node *ds = dict_find(doc->reader, "deserializers");
    *n_out = 0;
    if (!ds) return 0;
    cfg_node **items = &doc->deser;
    size_t n = 1;
    if (ds->kind == N_ARRAY) {
        items = ds->kids;
        n = ds->num_kids;
    } else if (ds->kind != N_DICT) {
        return doc_fail(doc, ds, false, err,
                        "deserializers: must be an array of blocks "
                        "({ type = ...; ... }) (got %s)",
                        describe(ds, got, sizeof got));
    } else {
        doc->deser = ds;
    }
    if (n == 0)
        return doc_fail(doc, ds, false, err,
                        "deserializers: empty; expected at least one "
                        "CNTKTextFormatDeserializer block");
    for (size_t i = 0; i < n; i++) {
        cfg_node *d = items[i], *t;
        if (d->kind != N_DICT)
            return doc_fail(doc, d, false, err,
                            "deserializers[%zu]: must be a block "
                            "{ type = ...; ... } (got %s)",
                            i, describe(d, got, sizeof got));
        if (!(t = dict_find(d, "type")))
            return doc_fail(doc, d, false, err,
                            "deserializers[%zu].type: missing; ctfio reads "
                            "type = \"CNTKTextFormatDeserializer\"",
                            i);
        if (is_cbf_type(t) && n == 1) {
            doc->binary = true;
            continue;
        }
        if (is_cbf_type(t))
            return doc_fail(doc, t, false, err,
                            "deserializers[%zu].type: a "
                            "CNTKBinaryFormatDeserializer is read alone; ctfio joins only "
                            "CNTKTextFormatDeserializers",
                            i);
        if (!is_ctf_type(t))
            return doc_fail(doc, t, false, err,
                            "deserializers[%zu].type: %s is not supported; "
                            "ctfio reads CNTKTextFormatDeserializer and "
                            "CNTKBinaryFormatDeserializer",
                            i, describe(t, got, sizeof got));
    }
    doc->deser = items[0];
    *items_out = items;
    *n_out = n;
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
            return ov_fail(err, ov,
                           "KEY must be a name or a dotted path of names such as "
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
static int override_expr(ctf_bsconfig *doc, const ov_parts *o, const char *ov, bs_expr *scope,
                         bs_expr **out, ctf_error *err)
{
    const char *v = o->value;
    size_t n = o->value_len;
    bs_arena *a = &doc->arena;
    if (n && strchr("[{(", v[0])) {
        bs_src *src = ctf__bs_alloc(a, sizeof *src);
        if (!src || !(src->text = ctf__bs_strndup(a, v, n))) return oom(err);
        src->name = doc->name;
        src->len = n;
        src->no_lines = true;
        ctf_error e;
        int rc = ctf__bs_parse_value(a, src, scope, out, &e);
        if (rc == CTF_ENOMEM) return oom(err);
        if (rc)
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "override '%.200s': %s", ov, e.message);
        return 0;
    }
    size_t q = n >= 2 && (v[0] == '"' || v[0] == '\'') && v[n - 1] == v[0];
    bs_expr *s = ctf__bs_new(a, q ? E_STR : E_RAW, NULL, 0, 0);
    if (!s || !(s->s = ctf__bs_strndup(a, v + q, n - 2 * q))) return oom(err);
    s->n = n - 2 * q;
    *out = s;
    return 0;
}

/* Undotted KEY=VALUE: a top-level definition (a variable), after the file's own. */
static int override_define(ctf_bsconfig *doc, bs_expr *dict, const char *ov, ctf_error *err)
{
    ov_parts o;
    bs_expr *val = NULL, *def;
    TRY(split_override(ov, &o, err));
    if (o.n != 1) return 0;
    TRY(override_expr(doc, &o, ov, dict, &val, err));
    if (!(def = ctf__bs_new(&doc->arena, E_DEF, NULL, 0, 0)) ||
        !(def->s = ctf__bs_strndup(&doc->arena, o.comp[0], o.len[0])))
        return oom(err);
    def->n = o.len[0];
    def->scope = dict;
    if (ctf__bs_add_kid(&doc->arena, def, val) || ctf__bs_add_kid(&doc->arena, dict, def))
        return oom(err);
    return 0;
}

/* Adds src's definitions to dst, after dst's own. As on CNTK's command line, a block assigned
 * to the name of an existing block is merged into it (Train=[SGD=[maxEpochs=1]] changes one
 * parameter of Train), recursively; anything else is a later definition, which wins. */
static int merge_defs(bs_arena *a, bs_expr *dst, bs_expr *src, ctf_error *err)
{
    for (size_t i = 0; i < src->nkids; i++) {
        bs_expr *m = src->kids[i];
        bs_expr *old = m->kind == E_DEF ? ctf__bs_dict_find(dst, m->s, m->n, true) : NULL;
        if (old && old->kids[0]->kind == E_DICT && m->kids[0]->kind == E_DICT) {
            TRY(merge_defs(a, old->kids[0], m->kids[0], err));
            continue;
        }
        m->scope = dst;
        if (m->kind == E_DEF && m->kids[0]->kind == E_DICT) m->kids[0]->scope = dst;
        if (ctf__bs_add_kid(a, dst, m)) return oom(err);
    }
    return 0;
}

/* Assigns the override's value at base.comp[first].comp[first+1]..., creating blocks. */
static int set_path(ctf_bsconfig *doc, cfg_node *base, const ov_parts *o, size_t first,
                    const char *ov, bs_expr *root, ctf_error *err)
{
    bs_arena *a = &doc->arena;
    cfg_node *d = base, *v = NULL;
    for (size_t i = first; i + 1 < o->n; i++) {
        cfg_node *c = NULL;
        for (size_t k = 0; k < d->num_kids && !c; k++) /* exact first: stream names keep case */
            if (name_is(d->kids[k]->key, o->comp[i], o->len[i])) c = d->kids[k];
        if (!c) c = ctf__cfg_find(d, o->comp[i], o->len[i]);
        if (!c) {
            if (!(c = ctf__cfg_new(a, N_DICT)) ||
                !(c->key = ctf__bs_strndup(a, o->comp[i], o->len[i])) || ctf__cfg_add(a, d, c))
                return oom(err);
            c->src = doc->name;
        } else if (c->kind != N_DICT) {
            return ov_fail(err, ov, "the path goes through a value that is not a block");
        }
        d = c;
    }
    size_t last = o->n - 1;
    bs_expr *e = NULL;
    bs_eval_ctx cx = {.arena = a, .err = err};
    TRY(override_expr(doc, o, ov, root, &e, err));
    int rc = ctf__bs_eval_expr(&cx, e, root, NULL, &v);
    if (rc) return rc;
    forget_lines(v);
    if (!(v->key = ctf__bs_strndup(a, o->comp[last], o->len[last])) || ctf__cfg_add(a, d, v))
        return oom(err);
    return 0;
}

/* After the reader is evaluated: reader parameters go into the innermost block that applies
 * (the primary deserializer wins); other dotted keys address things outside the reader. */
static int override_reader(ctf_bsconfig *doc, bs_expr *root, const char *ov, ctf_error *err)
{
    ov_parts o;
    TRY(split_override(ov, &o, err));
    cfg_node *target = doc->deser ? doc->deser : doc->reader;
    bool param = is_param(key_lookup(o.comp[0], o.len[0]));
    size_t skip = 0;
    if (o.n == 1) return param ? set_path(doc, target, &o, 0, ov, root, err) : 0;
    if (name_eq("reader", o.comp[0], o.len[0]))
        skip = 1;
    else if (doc->section && name_eq(doc->section, o.comp[0], o.len[0]) &&
             name_eq("reader", o.comp[1], o.len[1]))
        skip = 2;
    else if (param)
        skip = 0;
    else
        return 0;
    if (skip == o.n)
        return ov_fail(err, ov,
                       "cannot replace the block that holds the selected reader; set "
                       "its parameters instead");
    if (skip && doc->deser && !is_param(key_lookup(o.comp[skip], o.len[skip])))
        target = doc->reader; /* reader.deserializers..., reader.verbosity... */
    return set_path(doc, target, &o, skip, ov, root, err);
}

/*======================================================================
 * ctf_bsconfig_parse / load / free
 *====================================================================*/

static int count_files(const cfg_node *f) { return f && f->kind == N_ARRAY ? (int)f->num_kids : 1; }

/* The mix form: reader.mix is an array of part blocks, each with its file (or files), its
 * weight and optionally its own input (the aliases of its files) and skipSequenceIds. */
static int prepare_mix(ctf_bsconfig *doc, ctf_error *err)
{
    bs_arena *a = &doc->arena;
    cfg_node *m = dict_find(doc->reader, "mix");
    char got[80];
    if (!m) return 0;
    if (doc->deser)
        return doc_fail(doc, m, true, err,
                        "mix: cannot be combined with deserializers; a mix "
                        "interleaves whole data sets, a join adds streams by key");
    /* One block alone is a mix of one part (as ( { ... } ) evaluates to the block). */
    cfg_node **parts = &m;
    size_t n = 1;
    if (m->kind == N_ARRAY) {
        parts = m->kids;
        n = m->num_kids;
    }
    if ((m->kind != N_ARRAY && m->kind != N_DICT) || !n)
        return doc_fail(doc, m, false, err,
                        "mix: must be an array of part blocks ({ file = ...; "
                        "weight = ... } : { ... }) (got %s)",
                        describe(m, got, sizeof got));
    doc->num_mix = n;
    if (!(doc->mix_slots = ctf__bs_alloc(a, doc->num_mix * sizeof *doc->mix_slots)) ||
        !(doc->mix = ctf__bs_alloc(a, doc->num_mix * sizeof *doc->mix)))
        return oom(err);
    for (size_t i = 0; i < doc->num_mix; i++) {
        deser_slot *s = &doc->mix_slots[i];
        memset(s, 0, sizeof *s);
        s->node = parts[i];
        if (s->node->kind != N_DICT)
            return doc_fail(doc, s->node, false, err,
                            "mix[%zu]: must be a block { file = ...; "
                            "weight = ... } (got %s)",
                            i, describe(s->node, got, sizeof got));
        s->input = dict_find(s->node, "input");
        const cfg_node *f = dict_find(s->node, "file");
        size_t ns = s->input && s->input->kind == N_DICT ? s->input->num_kids : 0;
        if ((ns && !(s->streams = ctf__bs_alloc(a, ns * sizeof *s->streams))) ||
            !(s->paths = ctf__bs_alloc(a, (size_t)count_files(f) * sizeof *s->paths)))
            return oom(err);
    }
    return 0;
}

/* Sizes the storage ctf_bsconfig_apply fills: streams and files of every deserializer. */
static int prepare(ctf_bsconfig *doc, cfg_node **items, size_t n, ctf_error *err)
{
    bs_arena *a = &doc->arena;
    doc->num_slots = n ? n : 1;
    if (!(doc->slots = ctf__bs_alloc(a, doc->num_slots * sizeof *doc->slots))) return oom(err);
    if (doc->num_slots > 1 &&
        !(doc->joins = ctf__bs_alloc(a, (doc->num_slots - 1) * sizeof *doc->joins)))
        return oom(err);
    for (size_t i = 0; i < doc->num_slots; i++) {
        deser_slot *s = &doc->slots[i];
        s->node = n ? items[i] : doc->reader;
        s->input = dict_find(s->node, "input");
        if (!s->input && i == 0) s->input = dict_find(doc->reader, "input");
        const cfg_node *f = dict_find(s->node, "file");
        if (!f && i == 0) f = dict_find(doc->reader, "file");
        size_t ns = s->input && s->input->kind == N_DICT ? s->input->num_kids : 0;
        if ((ns && !(s->streams = ctf__bs_alloc(a, ns * sizeof *s->streams))) ||
            !(s->paths = ctf__bs_alloc(a, (size_t)count_files(f) * sizeof *s->paths)))
            return oom(err);
        char origin[CTF_ERROR_PATH_MAX + 40];
        snprintf(origin, sizeof origin, "%s:%u:%u", s->node->src ? s->node->src : doc->name,
                 s->node->line, s->node->col);
        if (!(s->origin = ctf__bs_strndup(a, origin, strlen(origin)))) return oom(err);
    }
    return prepare_mix(doc, err);
}

int ctf_bsconfig_parse(const char *text, size_t len, const char *name, const char *section,
                       const char *const *overrides, size_t num_overrides, ctf_bsconfig **out,
                       ctf_error *err)
{
    if (!out) return BAD("ctf_bsconfig_parse: out is NULL");
    *out = NULL;
    if (!text && len) return BAD("ctf_bsconfig_parse: text is NULL");
    for (size_t i = 0; i < num_overrides; i++)
        if (!overrides || !overrides[i]) return BAD("ctf_bsconfig_parse: override %zu is NULL", i);
    if (section && !section[0]) section = NULL;
    ctf_bsconfig *doc = CTF_CALLOC(1, sizeof *doc);
    if (!doc) return oom(err);
    int rc = 0;
    bs_arena *a = &doc->arena;
    bs_src src = {0};
    bs_expr *root = NULL, *ovs = NULL;
    const bs_expr *rdef = NULL;
    cfg_node **items = NULL;
    size_t n_items = 0;
    if (!(doc->name = ctf__strdup(name ? name : "<config>"))) {
        rc = oom(err);
        goto fail;
    }
    src.name = doc->name;
    src.text = text ? text : "";
    src.len = text ? len : 0;
    /* The overrides are parsed first so that $X$ in include paths can use them. */
    if (!(ovs = ctf__bs_new(a, E_DICT, NULL, 0, 0))) {
        rc = oom(err);
        goto fail;
    }
    for (size_t i = 0; i < num_overrides; i++)
        if ((rc = override_define(doc, ovs, overrides[i], err))) goto fail;
    if ((rc = ctf__bs_parse_file(a, &src, ovs, &root, err))) goto fail;
    ovs->scope = root; /* blocks inside override values see the file's definitions */
    if ((rc = merge_defs(a, root, ovs, err))) goto fail;
    if ((rc = select_reader(doc, root, section, &rdef, err))) goto fail;
    /* In these members a bare name may stand for a block (`input = commonInputs`). */
    static const char *const block_keys[] = {"reader", "input", "deserializers", "mix", NULL};
    bs_eval_ctx cx = {.arena = a, .err = err, .block_keys = block_keys};
    if ((rc = ctf__bs_eval_def(&cx, rdef, &doc->reader))) goto fail;
    if (doc->reader->kind != N_DICT) {
        char got[80];
        rc = doc_fail(doc, doc->reader, false, err,
                      "reader: must be a block [ ... ] or { ... } "
                      "(got %s)",
                      describe(doc->reader, got, sizeof got));
        goto fail;
    }
    if ((rc = select_deserializers(doc, &items, &n_items, err))) goto fail;
    for (size_t i = 0; i < num_overrides; i++)
        if ((rc = override_reader(doc, root, overrides[i], err))) goto fail;
    /* CNTK puts precision at the top level; the innermost enclosing definition applies. */
    if (!dict_find(doc->reader, "precision") &&
        !(doc->deser && dict_find(doc->deser, "precision"))) {
        const bs_expr *p = ctf__bs_lookup(rdef->scope, "precision", 9, true, rdef, NULL);
        if (p && (rc = ctf__bs_eval_def(&cx, p, &doc->outer_precision))) goto fail;
    }
    if ((rc = prepare(doc, items, n_items, err))) goto fail;
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
    bs_arena a = {0};
    bs_src *src = NULL;
    int rc = ctf__bs_read_file(&a, path, &src, err);
    if (!rc)
        rc = ctf_bsconfig_parse(src->text, src->len, path, section, overrides, num_overrides, out,
                                err);
    ctf__bs_arena_free(&a);
    return rc;
}

void ctf_bsconfig_free(ctf_bsconfig *doc)
{
    if (!doc) return;
    ctf__bs_arena_free(&doc->arena);
    CTF_FREE(doc->name);
    CTF_FREE(doc);
}

/*======================================================================
 * ctf_bsconfig_apply: typed values
 *====================================================================*/

static int get_uint(const ctf_bsconfig *doc, const cfg_node *n, const char *name, uint64_t min,
                    uint64_t max, uint64_t *out, ctf_error *err)
{
    char got[80];
    const char *p = n->kind == N_SCALAR ? n->text : "";
    uint64_t v;
    const int bad = ctf__parse_decimal(p, &v);
    const bool overflow = bad == CTF__DECIMAL_OVERFLOW;
    if (bad == CTF__DECIMAL_BAD || (!overflow && v < min))
        return doc_fail(doc, n, false, err, "%s: must be a %s integer (got %s)", name,
                        min ? "positive" : "non-negative", describe(n, got, sizeof got));
    if (overflow || v > max)
        return doc_fail(doc, n, false, err, "%s: must be between %llu and %llu (got %s)", name,
                        (unsigned long long)min, (unsigned long long)max,
                        describe(n, got, sizeof got));
    *out = v;
    return 0;
}

static int get_bool(const ctf_bsconfig *doc, const cfg_node *n, const char *name, bool *out,
                    ctf_error *err)
{
    char got[80];
    const char *s = n->kind == N_SCALAR ? n->text : "";
    if (!strcasecmp(s, "true") || !strcmp(s, "1"))
        *out = true;
    else if (!strcasecmp(s, "false") || !strcmp(s, "0"))
        *out = false;
    else
        return doc_fail(doc, n, false, err, "%s: must be true or false (got %s)", name,
                        describe(n, got, sizeof got));
    return 0;
}

static int get_string(const ctf_bsconfig *doc, const cfg_node *n, const char *name, bool nonempty,
                      const char **out, ctf_error *err)
{
    char got[80];
    if (n->kind != N_SCALAR)
        return doc_fail(doc, n, false, err, "%s: must be a string (got %s)", name,
                        describe(n, got, sizeof got));
    if (nonempty && !n->text[0]) return doc_fail(doc, n, false, err, "%s: must not be empty", name);
    *out = n->text;
    return 0;
}

/* Picks one of several words (case-insensitive). @return : its index, or -1. */
static int get_word(const cfg_node *n, const char *const *words, int count)
{
    for (int i = 0; n->kind == N_SCALAR && i < count; i++)
        if (!strcasecmp(n->text, words[i])) return i;
    return -1;
}

/* A table parameter (params.def): parsed and range-checked as every front end does, the
 * message placed at the value. */
static int get_param(const ctf_bsconfig *doc, const cfg_node *n, int k, ctf_config *c,
                     ctf_error *err)
{
    char got[80];
    const ctf_param *p = ctf_param_at((size_t)k);
    bool scalar = n->kind == N_SCALAR;
    if (!ctf__param_parse_shown(c, p, p->bs_key, scalar ? n->text : "",
                                scalar ? NULL : describe(n, got, sizeof got), err))
        return 0;
    char msg[CTF_ERROR_MSG_MAX];
    snprintf(msg, sizeof msg, "%s", err ? err->message : "");
    return doc_fail(doc, n, false, err, "%s", msg);
}

static int collect(const ctf_bsconfig *doc, const cfg_node *blk, bool is_reader, const cfg_node **v,
                   ctf_error *err)
{
    for (size_t i = 0; i < blk->num_kids; i++) {
        const cfg_node *e = blk->kids[i];
        int k = key_lookup(e->key, strlen(e->key));
        if (k < 0 || ((k == K_DESERIALIZERS || k == K_MIX) && !is_reader))
            return unknown_key(doc, e, is_reader ? "reader" : "deserializer", key_names, K_COUNT,
                               err);
        v[k] = e;
    }
    return 0;
}

/* file: one path, or an array of them (a corpus). A pattern (* ? [) is one path to expand. */
static int apply_files(const ctf_bsconfig *doc, const cfg_node *f, const char *where,
                       const char **paths, size_t *n, ctf_error *err)
{
    char got[80];
    const cfg_node *const *items = &f;
    size_t count = 1;
    if (f->kind == N_ARRAY) {
        items = (const cfg_node *const *)f->kids;
        count = f->num_kids;
        if (!count) return doc_fail(doc, f, false, err, "%s: an empty list of files", where);
    }
    for (size_t i = 0; i < count; i++) {
        const cfg_node *p = items[i];
        if (p->kind != N_SCALAR)
            return doc_fail(doc, p, false, err,
                            "%s: must be a string or a list of strings (got "
                            "%s)",
                            where, describe(p, got, sizeof got));
        if (!p->text[0]) return doc_fail(doc, p, false, err, "%s: must not be empty", where);
        paths[i] = p->text;
    }
    *n = count;
    return 0;
}

/* As ctf__io_is_pattern (this layer does not call io): an http(s) URL's query is no pattern. */
static bool has_pattern(const char *s)
{
    if (!strncmp(s, "http://", 7) || !strncmp(s, "https://", 8)) {
        const size_t n = strcspn(s, "?#");
        return strcspn(s, "*[") < n;
    }
    return strpbrk(s, "*?[") != NULL;
}

/* A CBF reader's streams: none (every stream of the file), or per stream the file's name for it
 * (`original`, else the stream's own name); dim and format are the file's (dim 0 here, filled
 * in when the reader reads the file's header) unless given, and then they must match. */
static int apply_cbf_streams(const ctf_bsconfig *doc, const deser_slot *slot, size_t *count,
                             ctf_error *err)
{
    static const char *const fields[3] = {"original", "dim", "format"};
    static const char *const formats[2] = {"dense", "sparse"};
    const cfg_node *in = slot->input;
    char got[80], name[200];
    *count = 0;
    if (!in) return 0;
    if (in->kind != N_DICT)
        return doc_fail(doc, in, false, err,
                        "input: must be a block of streams "
                        "[ NAME = [ original = ... ] ] (got %s)",
                        describe(in, got, sizeof got));
    for (size_t i = 0; i < in->num_kids; i++) {
        const cfg_node *s = in->kids[i], *f[3] = {0};
        ctf_stream_def *d = &slot->streams[i];
        uint64_t dim;
        if (s->kind != N_DICT)
            return doc_fail(doc, s, false, err,
                            "input.%s: must be a block [ original = ... ] "
                            "(got %s)",
                            s->key, describe(s, got, sizeof got));
        for (size_t j = 0; j < s->num_kids; j++) {
            const cfg_node *e = s->kids[j];
            int k = 0;
            while (k < 3 && strcasecmp(fields[k], e->key)) k++;
            if (k == 3) {
                snprintf(name, sizeof name, "input.%.120s", s->key);
                return unknown_key(doc, e, name, fields, 3, err);
            }
            f[k] = e;
        }
        memset(d, 0, sizeof *d);
        d->name = s->key;
        snprintf(name, sizeof name, "input.%.120s.original", s->key);
        if (f[0]) TRY(get_string(doc, f[0], name, false, &d->alias, err));
        snprintf(name, sizeof name, "input.%.120s.dim", s->key);
        if (f[1]) {
            TRY(get_uint(doc, f[1], name, 1, SIZE_MAX, &dim, err));
            d->dim = (size_t)dim;
        }
        int fmt = f[2] ? get_word(f[2], formats, 2) : 0;
        if (fmt < 0)
            return doc_fail(doc, f[2], false, err,
                            "input.%s.format: must be \"dense\" or "
                            "\"sparse\" (got %s)",
                            s->key, describe(f[2], got, sizeof got));
        d->is_sparse = fmt == 1;
        if (!f[1] && f[2])
            return doc_fail(doc, f[2], false, err,
                            "input.%s.format: give dim with it, or "
                            "neither (the file's)",
                            s->key);
    }
    *count = in->num_kids;
    return 0;
}

static int apply_streams(const ctf_bsconfig *doc, const deser_slot *slot, const char *where,
                         size_t *count, ctf_error *err)
{
    static const char *const fields[4] = {"dim", "format", "alias", "definesMBSize"};
    static const char *const formats[2] = {"dense", "sparse"};
    const cfg_node *in = slot->input, *mb = NULL;
    char got[80], name[200];
    if (!in)
        return doc_fail(doc, slot->node, false, err, "%s: missing the required parameter 'input'",
                        where);
    if (in->kind != N_DICT)
        return doc_fail(doc, in, false, err,
                        "input: must be a block of streams "
                        "[ NAME = [ dim = ...; format = ... ] ] (got %s)",
                        describe(in, got, sizeof got));
    if (in->num_kids == 0)
        return doc_fail(doc, in, false, err,
                        "input: at least one stream is required (got an "
                        "empty block)");
    for (size_t i = 0; i < in->num_kids; i++) {
        const cfg_node *s = in->kids[i], *f[4] = {0};
        ctf_stream_def *d = &slot->streams[i];
        uint64_t dim;
        if (s->kind != N_DICT)
            return doc_fail(doc, s, false, err,
                            "input.%s: must be a block [ dim = ...; format = "
                            "... ] (got %s)",
                            s->key, describe(s, got, sizeof got));
        for (size_t j = 0; j < s->num_kids; j++) {
            const cfg_node *e = s->kids[j];
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
            return doc_fail(doc, s, true, err,
                            "input.%s.format: missing (required: \"dense\" or "
                            "\"sparse\")",
                            s->key);
        snprintf(name, sizeof name, "input.%.120s.dim", s->key);
        TRY(get_uint(doc, f[0], name, 1, SIZE_MAX, &dim, err));
        d->dim = (size_t)dim;
        int fmt = get_word(f[1], formats, 2);
        if (fmt < 0)
            return doc_fail(doc, f[1], false, err,
                            "input.%s.format: must be \"dense\" or "
                            "\"sparse\" (got %s)",
                            s->key, describe(f[1], got, sizeof got));
        d->is_sparse = fmt == 1;
        if (d->is_sparse && dim > INT32_MAX)
            return doc_fail(doc, f[0], false, err,
                            "input.%s.dim: a sparse dimension must be at "
                            "most %d because indices are int32 (got %s)",
                            s->key, INT32_MAX, describe(f[0], got, sizeof got));
        snprintf(name, sizeof name, "input.%.120s.alias", s->key);
        if (f[2]) TRY(get_string(doc, f[2], name, false, &d->alias, err));
        snprintf(name, sizeof name, "input.%.120s.definesMBSize", s->key);
        if (f[3]) TRY(get_bool(doc, f[3], name, &d->defines_mb_size, err));
        for (size_t j = 0; j < i; j++)
            if (!strcmp(ctf__stream_field(d), ctf__stream_field(&slot->streams[j])))
                return doc_fail(doc, f[2] ? f[2] : s, !f[2], err,
                                "input.%s.alias: duplicate "
                                "alias '%s' (also used by input.%s)",
                                s->key, ctf__stream_field(d), slot->streams[j].name);
        if (d->defines_mb_size) {
            if (mb)
                return doc_fail(doc, f[3], false, err,
                                "input.%s.definesMBSize: only one stream "
                                "may define the minibatch size (also set on input.%s)",
                                s->key, mb->key);
            mb = s;
        }
    }
    *count = in->num_kids;
    return 0;
}

/* A joined deserializer: its files, streams and line mode. Reader parameters apply once to the
 * whole source, so one repeated here must say what the reader or first deserializer says. */
static int apply_join(const ctf_bsconfig *doc, size_t i, const cfg_node *const *primary,
                      ctf_join_def *j, ctf_error *err)
{
    const deser_slot *slot = &doc->slots[i];
    const cfg_node *v[K_COUNT] = {0};
    char where[48], got[80];
    snprintf(where, sizeof where, "deserializers[%zu]", i);
    TRY(collect(doc, slot->node, false, v, err));
    for (int k = 0; k < K_READER_TYPE; k++) {
        if (!v[k] || k == K_FILE || k == K_INPUT || k == K_skip_sequence_ids) continue;
        const cfg_node *p = primary[k];
        if (!p || p->kind != N_SCALAR || v[k]->kind != N_SCALAR || strcasecmp(p->text, v[k]->text))
            return doc_fail(doc, v[k], true, err,
                            "%s.%s: reader parameters apply to all "
                            "deserializers at once; set it on the reader or the first "
                            "deserializer (got %s here)",
                            where, key_names[k], describe(v[k], got, sizeof got));
    }
    memset(j, 0, sizeof *j);
    if (!v[K_FILE])
        return doc_fail(doc, slot->node, false, err, "%s: missing the required parameter 'file'",
                        where);
    char name[64];
    snprintf(name, sizeof name, "%s.file", where);
    TRY(apply_files(doc, v[K_FILE], name, slot->paths, &j->num_paths, err));
    j->paths = slot->paths;
    /* As in CNTK, a parameter not given in the deserializer's block is looked for in the
     * reader's (not in another deserializer's). */
    const cfg_node *skip = v[K_skip_sequence_ids] ? v[K_skip_sequence_ids]
                                                  : dict_find(doc->reader, "skipSequenceIds");
    if (skip) TRY(get_bool(doc, skip, "skipSequenceIds", &j->skip_sequence_ids, err));
    TRY(apply_streams(doc, slot, where, &j->num_streams, err));
    j->streams = slot->streams;
    j->origin = slot->origin;
    return 0;
}

/* Part i of the mix form: its files, weight, line mode and (optionally) its own streams. */
static int apply_mix_part(const ctf_bsconfig *doc, size_t i, ctf_mix_part *mp, ctf_error *err)
{
    static const char *const keys[] = {"file", "weight", "input", "skipSequenceIds",
                                       "type", "module"};
    const deser_slot *slot = &doc->mix_slots[i];
    const cfg_node *f = NULL, *w = NULL, *skip = NULL;
    char where[48], name[64], got[80];
    snprintf(where, sizeof where, "mix[%zu]", i);
    for (size_t k = 0; k < slot->node->num_kids; k++) {
        const cfg_node *e = slot->node->kids[k];
        size_t j = 0;
        while (j < 6 && strcasecmp(keys[j], e->key)) j++;
        if (j == 6) return unknown_key(doc, e, where, keys, 6, err);
        if (j == 0) f = e;
        if (j == 1) w = e;
        if (j == 3) skip = e;
    }
    memset(mp, 0, sizeof *mp);
    if (!f)
        return doc_fail(doc, slot->node, false, err,
                        "%s: missing the required parameter "
                        "'file'",
                        where);
    if (!w)
        return doc_fail(doc, slot->node, false, err,
                        "%s: missing the required parameter "
                        "'weight'",
                        where);
    snprintf(name, sizeof name, "%s.file", where);
    TRY(apply_files(doc, f, name, slot->paths, &mp->num_paths, err));
    mp->paths = slot->paths;
    char *end = NULL;
    errno = 0;
    mp->weight = w->kind == N_SCALAR ? strtod(w->text, &end) : -1;
    if (w->kind != N_SCALAR || end == w->text || *end || errno || !isfinite(mp->weight) ||
        mp->weight < 0)
        return doc_fail(doc, w, false, err, "%s.weight: must be a number >= 0 (got %s)", where,
                        describe(w, got, sizeof got));
    const cfg_node *sk = skip ? skip : dict_find(doc->reader, "skipSequenceIds");
    if (sk) TRY(get_bool(doc, sk, "skipSequenceIds", &mp->skip_sequence_ids, err));
    if (slot->input) {
        TRY(apply_streams(doc, slot, where, &mp->num_streams, err));
        mp->streams = slot->streams;
    }
    return 0;
}

int ctf_bsconfig_apply(const ctf_bsconfig *doc, ctf_config *cfg, ctf_error *err)
{
    static const char *const randomize_words[2] = {"none", "auto"};
    const cfg_node *v[K_COUNT] = {0};
    char got[80];
    uint64_t u;
    bool truncated = true;
    if (!doc || !cfg) return BAD("ctf_bsconfig_apply: NULL argument");
    ctf_config c = *cfg;
    TRY(collect(doc, doc->reader, true, v, err));
    if (doc->deser) TRY(collect(doc, doc->deser, false, v, err));
    if (!v[K_precision]) v[K_precision] = doc->outer_precision;

    bool binary = doc->binary;
    if (v[K_READER_TYPE]) {
        const cfg_node *t = v[K_READER_TYPE];
        /* CNTK names the composite reader CompositeDataReader when it names it at all. */
        const bool cbf = t->kind == N_SCALAR && !strcasecmp(t->text, "CNTKBinaryReader");
        bool ok = t->kind == N_SCALAR &&
                  (!strcasecmp(t->text, "CNTKTextFormatReader") || (cbf && !doc->deser) ||
                   (doc->deser && !strcasecmp(t->text, "CompositeDataReader")));
        if (!ok)
            return doc_fail(doc, t, false, err,
                            "readerType: %s is not supported; ctfio "
                            "implements CNTKTextFormatReader and CNTKBinaryReader",
                            describe(t, got, sizeof got));
        binary |= cbf;
    }
    if (doc->num_mix && v[K_FILE])
        return doc_fail(doc, v[K_FILE], true, err,
                        "file: a mix reads its parts' files; give "
                        "file in each block of mix");
    if (!v[K_FILE] && !doc->num_mix)
        return doc_fail(doc, doc->deser ? doc->deser : doc->reader, false, err,
                        "%s: missing the required parameter 'file'",
                        doc->deser ? "deserializer" : "reader");
    c.path = NULL;
    c.paths = NULL;
    c.num_paths = 0;
    c.mix = NULL;
    c.num_mix = 0;
    if (v[K_FILE]) {
        size_t np = 0;
        TRY(apply_files(doc, v[K_FILE], "file", doc->slots[0].paths, &np, err));
        c.path = doc->slots[0].paths[0];
        if (np > 1 || has_pattern(c.path)) {
            c.paths = doc->slots[0].paths;
            c.num_paths = np;
        }
    }
    /* CNTK's composite reader says verbosity; an explicit traceLevel anywhere wins over it. */
    if (v[K_VERBOSITY]) {
        TRY(get_uint(doc, v[K_VERBOSITY], "verbosity", 0, UINT64_MAX, &u, err));
        c.trace_level = u > 2 ? 2 : (int)u;
    }
    /* randomize also takes CNTK's words "none" and "auto". */
    if (v[K_randomize]) {
        int k = get_word(v[K_randomize], randomize_words, 2);
        if (k >= 0) {
            c.randomize = k == 1;
        } else if (v[K_randomize]->kind != N_SCALAR ||
                   ctf_param_parse(&c, ctf_param_at(K_randomize), "randomize", v[K_randomize]->text,
                                   NULL)) {
            return doc_fail(doc, v[K_randomize], false, err,
                            "randomize: must be true, false, "
                            "\"auto\" or \"none\" (got %s)",
                            describe(v[K_randomize], got, sizeof got));
        }
    }
    for (int k = 0; k < (int)ctf_param_count(); k++) {
        if (!v[k] || k == K_randomize) continue;
        TRY(get_param(doc, v[k], k, &c, err));
    }
    /* A window in samples without a size is the whole data set, as CNTK's reader documents:
     * a count beyond any data set (and small enough that window arithmetic cannot wrap). */
    if (v[K_window_in_samples] && c.window_in_samples && !v[K_randomization_window])
        c.randomization_window = WINDOW_ALL_SAMPLES;
    /* CNTK's switch for truncated BPTT: false turns truncation off whatever the length says. */
    if (v[K_TRUNCATED]) {
        TRY(get_bool(doc, v[K_TRUNCATED], "truncated", &truncated, err));
        if (!truncated)
            c.truncation_length = 0;
        else if (!c.truncation_length)
            return doc_fail(doc, v[K_TRUNCATED], false, err,
                            "truncated: true needs "
                            "truncationLength (the number of samples per piece)");
    }
    /* CNTK's multiThreadedDeserialization is accepted: ctfio parses in numThreads threads. */
    bool mt;
    if (v[K_MT_DESER]) TRY(get_bool(doc, v[K_MT_DESER], "multiThreadedDeserialization", &mt, err));
    if (v[K_CHUNK_CACHE])
        TRY(get_string(doc, v[K_CHUNK_CACHE], "chunkCache", true, &c.chunk_cache, err));
    if (v[K_BAD_RECORDS])
        TRY(get_string(doc, v[K_BAD_RECORDS], "badRecordsFile", true, &c.bad_records, err));
    if (binary)
        TRY(apply_cbf_streams(doc, &doc->slots[0], &c.num_streams, err));
    else
        TRY(apply_streams(doc, &doc->slots[0], doc->deser ? "deserializer" : "reader",
                          &c.num_streams, err));
    c.streams = doc->slots[0].streams;
    c.joins = NULL;
    c.num_joins = 0;
    for (size_t i = 1; i < doc->num_slots; i++) TRY(apply_join(doc, i, v, &doc->joins[i - 1], err));
    /* Stream names are unique over all deserializers (aliases only within one). */
    for (size_t i = 1; i < doc->num_slots; i++)
        for (size_t s = 0; s < doc->joins[i - 1].num_streams; s++) {
            const char *nm = doc->joins[i - 1].streams[s].name;
            for (size_t k = 0; k < i; k++) {
                const ctf_stream_def *o = k ? doc->joins[k - 1].streams : c.streams;
                size_t no = k ? doc->joins[k - 1].num_streams : c.num_streams;
                for (size_t t = 0; t < no; t++)
                    if (!strcmp(o[t].name, nm))
                        return doc_fail(doc, doc->slots[i].input->kids[s], true, err,
                                        "deserializers[%zu].input.%s: the stream name is also "
                                        "used by deserializers[%zu]; names must be unique over "
                                        "all deserializers",
                                        i, nm, k);
            }
        }
    if (doc->num_slots > 1) {
        c.joins = doc->joins;
        c.num_joins = doc->num_slots - 1;
    }
    for (size_t i = 0; i < doc->num_mix; i++) TRY(apply_mix_part(doc, i, &doc->mix[i], err));
    if (doc->num_mix) {
        c.mix = doc->mix;
        c.num_mix = doc->num_mix;
    }
    /* The combinations (maxSamples with maxSweeps, frameMode with truncation, ...) are checked
     * once, by the same code that checks configurations built in C. */
    ctf_config check = c;
    bool from_file = binary && !c.num_streams;
    for (size_t k = 0; k < c.num_streams; k++) from_file |= binary && !c.streams[k].dim;
    /* A CBF file's streams are completed when the reader reads its header: here the other
     * parameters are checked with a stand-in stream. */
    static const ctf_stream_def stand_in = {.name = "stream", .dim = 1};
    if (from_file) {
        check.streams = &stand_in;
        check.num_streams = 1;
    }
    int rc = ctf_config_validate(&check, err);
    if (rc) {
        if (err) snprintf(err->path, sizeof err->path, "%s", doc->name);
        return rc;
    }
    *cfg = c;
    return 0;
}
