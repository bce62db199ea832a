/*
 * params.c -- the reader parameter table (params.def) as data, and the one place that sets,
 * parses and range-checks a parameter. Every front end reports a bad value with the same words,
 * starting with the parameter's name as that front end spells it.
 */
#include "params.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* A row of the table, with where its field lives in ctf_config. */
typedef struct param_row {
    ctf_param pub; /* first: a ctf_param pointer from ctf_param_at is a row pointer */
    size_t offset, size;
    bool is_signed;
} param_row;

#define FIELD_SIZE(f) sizeof(((ctf_config *)0)->f)
#define FIELD_SIGNED(f) _Generic(((ctf_config *)0)->f, int: true, default: false)

static const param_row rows[] = {
#define CTF_PARAM(field, kind, bs, flag, py, sw, fp, def, min, max, def_text, help) \
    {{#field, bs, flag, py, CTF_PARAM_##kind, sw, fp, (uint64_t)(def), def_text, (uint64_t)(min), \
      (uint64_t)(max), help}, \
     offsetof(ctf_config, field), \
     FIELD_SIZE(field), \
     FIELD_SIGNED(field)},
#include "params.def"
#undef CTF_PARAM
};

#define NUM_ROWS (sizeof rows / sizeof rows[0])

size_t ctf_param_count(void) { return NUM_ROWS; }

const ctf_param *ctf_param_at(size_t i) { return i < NUM_ROWS ? &rows[i].pub : NULL; }

const ctf_param *ctf_param_find(const char *name)
{
    for (size_t i = 0; name && i < NUM_ROWS; i++) {
        const ctf_param *p = &rows[i].pub;
        if (!strcmp(p->field, name) || (p->bs_key && !strcasecmp(p->bs_key, name)) ||
            (p->cli_flag && !strcmp(p->cli_flag, name)) ||
            (p->py_keyword && !strcmp(p->py_keyword, name)))
            return p;
    }
    return NULL;
}

static const param_row *row_of(const ctf_param *p) { return (const param_row *)p; }

/* The field's value, sign-extended for an int field. */
static int64_t get_signed(const ctf_config *cfg, const param_row *r)
{
    const char *at = (const char *)cfg + r->offset;
    if (r->size == sizeof(bool) && r->pub.kind == CTF_PARAM_BOOL) {
        bool b;
        memcpy(&b, at, sizeof b);
        return b;
    }
    if (r->size == sizeof(int)) {
        int v;
        memcpy(&v, at, sizeof v);
        return r->is_signed ? (int64_t)v : (int64_t)(unsigned)v;
    }
    uint64_t v = 0;
    if (r->size == sizeof(uint64_t))
        memcpy(&v, at, sizeof v);
    else if (r->size == sizeof(size_t)) {
        size_t s;
        memcpy(&s, at, sizeof s);
        v = s;
    }
    return (int64_t)v;
}

uint64_t ctf_param_get(const ctf_config *cfg, const ctf_param *p)
{
    return cfg && p ? (uint64_t)get_signed(cfg, row_of(p)) : 0;
}

/* Writes a value already checked against the row's range. */
static void put(ctf_config *cfg, const param_row *r, uint64_t v)
{
    char *at = (char *)cfg + r->offset;
    if (r->pub.kind == CTF_PARAM_BOOL) {
        bool b = v != 0;
        memcpy(at, &b, sizeof b);
    } else if (r->size == sizeof(int)) {
        int i = (int)v;
        memcpy(at, &i, sizeof i);
    } else if (r->size == sizeof(uint64_t)) {
        memcpy(at, &v, sizeof v);
    } else {
        size_t s = (size_t)v;
        memcpy(at, &s, sizeof s);
    }
}

void ctf__params_init(ctf_config *cfg)
{
    for (size_t i = 0; i < NUM_ROWS; i++) put(cfg, &rows[i], rows[i].pub.def);
}

#define BAD(...) ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, __VA_ARGS__)

static bool open_top(const ctf_param *p) { return p->max == UINT64_MAX || p->max == SIZE_MAX; }

/* The one message for a value outside the range (or not a number at all). */
static int range_fail(const ctf_param *p, const char *name, const char *got, bool integer,
                      bool below, ctf_error *err)
{
    if (p->kind == CTF_PARAM_BOOL) return BAD("%s: must be true or false (got %s)", name, got);
    if (p->kind == CTF_PARAM_PRECISION)
        return BAD("%s: must be \"float\" or \"double\" (got %s)", name, got);
    if ((!integer || (below && open_top(p))) && p->min <= 1)
        return BAD("%s: must be a %s integer (got %s)", name, p->min ? "positive" : "non-negative",
                   got);
    return BAD("%s: must be between %llu and %llu (got %s)", name, (unsigned long long)p->min,
               (unsigned long long)p->max, got);
}

int ctf_param_set(ctf_config *cfg, const ctf_param *p, const char *name, uint64_t value,
                  ctf_error *err)
{
    if (!cfg || !p) return BAD("ctf_param_set: NULL argument");
    if (p->kind == CTF_PARAM_PRECISION && value != CTF_FLOAT32 && value != CTF_FLOAT64) {
        char got[32];
        snprintf(got, sizeof got, "%llu", (unsigned long long)value);
        return BAD("%s: must be CTF_FLOAT32 (4) or CTF_FLOAT64 (8) (got %s)", name, got);
    }
    if (value < p->min || value > p->max) {
        char got[32];
        snprintf(got, sizeof got, "%llu", (unsigned long long)value);
        return range_fail(p, name, got, true, value < p->min, err);
    }
    put(cfg, row_of(p), value);
    return 0;
}

static bool word_is(const char *s, const char *const *words, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(s, words[i])) return true;
    return false;
}

int ctf__parse_decimal(const char *text, uint64_t *v)
{
    const char *s = text + (*text == '+');
    bool overflow = false;
    *v = 0;
    if (!*s) return CTF__DECIMAL_BAD;
    for (; *s; s++) {
        const unsigned d = (unsigned)(*s - '0');
        if (d > 9) return CTF__DECIMAL_BAD;
        if (*v > (UINT64_MAX - d) / 10)
            overflow = true;
        else if (!overflow)
            *v = *v * 10 + d;
    }
    return overflow ? CTF__DECIMAL_OVERFLOW : 0;
}

int ctf__param_parse_shown(ctf_config *cfg, const ctf_param *p, const char *name, const char *text,
                           const char *shown, ctf_error *err)
{
    static const char *const yes[] = {"true", "1"}, *const no[] = {"false", "0"};
    static const char *const f32[] = {"float", "float32"}, *const f64[] = {"double", "float64"};
    char quoted[80];
    if (!cfg || !p || !text) return BAD("ctf_param_parse: NULL argument");
    snprintf(quoted, sizeof quoted, "\"%.60s%s\"", text, strlen(text) > 60 ? "..." : "");
    const char *got = shown ? shown : quoted;
    uint64_t v = 0;
    switch (p->kind) {
    case CTF_PARAM_BOOL:
        if (word_is(text, yes, 2))
            v = 1;
        else if (!word_is(text, no, 2))
            return range_fail(p, name, got, false, false, err);
        break;
    case CTF_PARAM_PRECISION:
        if (word_is(text, f32, 2))
            v = CTF_FLOAT32;
        else if (word_is(text, f64, 2))
            v = CTF_FLOAT64;
        else
            return range_fail(p, name, got, false, false, err);
        break;
    case CTF_PARAM_LIMIT:
    case CTF_PARAM_UINT: {
        if (p->kind == CTF_PARAM_LIMIT && !strcasecmp(text, "infinite")) {
            v = CTF_INFINITELY_REPEAT;
            break;
        }
        const int bad = ctf__parse_decimal(text, &v);
        const bool overflow = bad == CTF__DECIMAL_OVERFLOW;
        if (bad == CTF__DECIMAL_BAD) return range_fail(p, name, got, false, false, err);
        if (overflow || v < p->min || v > p->max)
            return range_fail(p, name, got, true, !overflow && v < p->min, err);
        break;
    }
    }
    put(cfg, row_of(p), v);
    return 0;
}

int ctf_param_parse(ctf_config *cfg, const ctf_param *p, const char *name, const char *text,
                    ctf_error *err)
{
    return ctf__param_parse_shown(cfg, p, name, text, NULL, err);
}

int ctf__params_validate(const ctf_config *cfg, const char *prefix, ctf_error *err)
{
    for (size_t i = 0; i < NUM_ROWS; i++) {
        const param_row *r = &rows[i];
        const ctf_param *p = &r->pub;
        if (p->kind == CTF_PARAM_BOOL) continue;
        int64_t v = get_signed(cfg, r);
        bool below = r->is_signed ? v < (int64_t)p->min : (uint64_t)v < p->min;
        if (!below && (r->is_signed ? v <= (int64_t)p->max : (uint64_t)v <= p->max)) continue;
        char name[64], got[32];
        snprintf(name, sizeof name, "%s%s", prefix, p->field);
        if (r->is_signed)
            snprintf(got, sizeof got, "%lld", (long long)v);
        else
            snprintf(got, sizeof got, "%llu", (unsigned long long)(uint64_t)v);
        if (p->kind == CTF_PARAM_PRECISION)
            return BAD("%s: must be CTF_FLOAT32 (4) or CTF_FLOAT64 (8) (got %s)", name, got);
        return range_fail(p, name, got, true, below, err);
    }
    return 0;
}

int ctf__workers_check(size_t num_workers, size_t worker_rank, const char *prefix, ctf_error *err)
{
    if (num_workers == 0) return BAD("%snum_workers: must be a positive integer (got 0)", prefix);
    if (worker_rank >= num_workers)
        return BAD("%sworker_rank: must be < num_workers (got rank %zu with %zu workers)", prefix,
                   worker_rank, num_workers);
    return 0;
}

int ctf_workers_check(size_t num_workers, size_t worker_rank, ctf_error *err)
{
    return ctf__workers_check(num_workers, worker_rank, "", err);
}
