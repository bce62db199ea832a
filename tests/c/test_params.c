/*
 * test_params.c -- the reader parameter table walked row by row: each parameter set from a
 * configuration file, from its ctfio flag and through ctf_param_set gives the same value in
 * ctf_config; a value outside its range is refused by all of them, and each message starts with
 * the parameter as that front end spells it. (The Python keywords: tests/python/test_params.py.)
 */
#include "cli.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

/* A value of row p other than its default that every front end accepts, as text and number. */
static uint64_t other_value(const ctf_param *p, char *text, size_t cap)
{
    uint64_t v;
    if (p->kind == CTF_PARAM_BOOL)
        v = !p->def;
    else if (p->kind == CTF_PARAM_PRECISION)
        v = p->def == CTF_FLOAT32 ? CTF_FLOAT64 : CTF_FLOAT32;
    else
        v = p->def == p->max || p->def >= 1000 ? p->min + 1 : p->def + 1;
    if (p->kind == CTF_PARAM_BOOL)
        snprintf(text, cap, "%s", v ? "true" : "false");
    else if (p->kind == CTF_PARAM_PRECISION)
        snprintf(text, cap, "%s", v == CTF_FLOAT64 ? "double" : "float");
    else
        snprintf(text, cap, "%llu", (unsigned long long)v);
    return v;
}

/* A value just outside row p's range as text, or false when the range has no outside. */
static bool bad_value(const ctf_param *p, char *text, size_t cap)
{
    if (p->kind == CTF_PARAM_BOOL)
        snprintf(text, cap, "maybe");
    else if (p->kind == CTF_PARAM_PRECISION)
        snprintf(text, cap, "half");
    else if (p->max < UINT64_MAX && p->max < SIZE_MAX)
        snprintf(text, cap, "%llu", (unsigned long long)p->max + 1);
    else if (p->min > 0)
        snprintf(text, cap, "%llu", (unsigned long long)p->min - 1);
    else
        return false;
    return true;
}

static int from_bs(const ctf_param *p, const char *text, ctf_config *cfg, ctf_error *err)
{
    char src[512];
    snprintf(src, sizeof src,
             "reader = [\n file = \"d.ctf\"\n %s = %s\n input = [ x = [ dim = 3; "
             "format = \"dense\" ] ]\n]\n",
             p->bs_key, text);
    ctf_bsconfig *doc = NULL;
    ctf_config_init(cfg);
    int rc = ctf_bsconfig_parse(src, strlen(src), "t.cntk", NULL, NULL, 0, &doc, err);
    if (!rc) rc = ctf_bsconfig_apply(doc, cfg, err);
    ctf_bsconfig_free(doc);
    return rc;
}

static int from_cli(const ctf_param *p, const char *text, ctf_config *cfg, ctf_error *err)
{
    const char *texts[CLI_MAX_PARAMS] = {0};
    int k = cli_param_flag(p->cli_flag);
    if (k < 0 || ctf_param_at((size_t)k) != p) return -1;
    texts[k] = p->cli_switch ? "true" : text;
    ctf_config_init(cfg);
    return cli_params_apply(cfg, texts, err);
}

TEST(params_table_is_whole)
{
    ASSERT(ctf_param_count() > 0 && ctf_param_count() <= CLI_MAX_PARAMS);
    ASSERT(ctf_param_at(ctf_param_count()) == NULL);
    for (size_t i = 0; i < ctf_param_count(); i++) {
        const ctf_param *p = ctf_param_at(i);
        ASSERT(p->field && p->help && p->min <= p->max);
        ASSERT(ctf_param_find(p->field) == p);
        if (p->bs_key) ASSERT(ctf_param_find(p->bs_key) == p);
        if (p->cli_flag) ASSERT(ctf_param_find(p->cli_flag) == p && !strncmp(p->cli_flag, "--", 2));
        if (p->py_keyword) ASSERT(ctf_param_find(p->py_keyword) == p);
        ASSERT(!p->cli_switch || (p->kind == CTF_PARAM_BOOL && p->def == 0));
        /* The default is what ctf_config_init sets (num_threads: worked out, said in words). */
        ctf_config c;
        ctf_config_init(&c);
        if (!p->def_text) ASSERT_U64_EQ(ctf_param_get(&c, p), p->def);
        ctf_error err;
        ASSERT_EQ(ctf_param_set(&c, p, p->field, p->def == CTF_PREFETCH_AUTO ? 0 : p->min, &err),
                  0);
    }
    ASSERT(ctf_param_find("no_such_parameter") == NULL);
}

TEST(params_same_value_every_front_end)
{
    for (size_t i = 0; i < ctf_param_count(); i++) {
        const ctf_param *p = ctf_param_at(i);
        char text[64];
        const uint64_t want = other_value(p, text, sizeof text);
        ctf_config c;
        ctf_error err;
        ctf_config_init(&c);
        ASSERT_EQ(ctf_param_set(&c, p, p->field, want, &err), 0);
        ASSERT_U64_EQ(ctf_param_get(&c, p), want);
        if (p->bs_key) {
            if (from_bs(p, text, &c, &err)) fprintf(stderr, "  %s: %s\n", p->bs_key, err.message);
            ASSERT_EQ(from_bs(p, text, &c, &err), 0);
            ASSERT_U64_EQ(ctf_param_get(&c, p), want);
        }
        if (p->cli_flag && (!p->cli_switch || want)) {
            ASSERT_EQ(from_cli(p, text, &c, &err), 0);
            ASSERT_U64_EQ(ctf_param_get(&c, p), want);
        }
    }
}

TEST(params_range_errors_name_the_parameter)
{
    size_t checked = 0;
    for (size_t i = 0; i < ctf_param_count(); i++) {
        const ctf_param *p = ctf_param_at(i);
        char text[64], want[96];
        ctf_config c;
        ctf_error err;
        if (!bad_value(p, text, sizeof text)) continue;
        checked++;
        if (p->bs_key) {
            ASSERT_EQ(from_bs(p, text, &c, &err), CTF_EINVAL);
            snprintf(want, sizeof want, "%s: must be ", p->bs_key);
            ASSERT(!strncmp(err.message, want, strlen(want)));
            ASSERT_EQ(err.line, 3); /* at the value */
        }
        if (p->cli_flag && !p->cli_switch) {
            ASSERT_EQ(from_cli(p, text, &c, &err), CTF_EINVAL);
            snprintf(want, sizeof want, "%s: must be ", p->cli_flag);
            ASSERT(!strncmp(err.message, want, strlen(want)));
        }
        ctf_config_init(&c);
        ctf_config before = c;
        if (p->kind == CTF_PARAM_UINT || p->kind == CTF_PARAM_LIMIT) {
            uint64_t v = strtoull(text, NULL, 10);
            ASSERT_EQ(ctf_param_set(&c, p, "kw", v, &err), CTF_EINVAL);
            ASSERT(!strncmp(err.message, "kw: must be ", 12));
            ASSERT(!memcmp(&c, &before, sizeof c)); /* untouched */
        }
    }
    ASSERT(checked >= 6);
}

TEST(params_text_forms)
{
    const ctf_param *ms = ctf_param_find("max_samples"), *tl = ctf_param_find("traceLevel");
    const ctf_param *fm = ctf_param_find("--frame-mode"), *pr = ctf_param_find("precision");
    ctf_config c;
    ctf_error err;
    ctf_config_init(&c);
    ASSERT_EQ(ctf_param_parse(&c, ms, "maxSamples", "42", &err), 0);
    ASSERT_U64_EQ(c.max_samples, 42);
    ASSERT_EQ(ctf_param_parse(&c, ms, "maxSamples", "Infinite", &err), 0);
    ASSERT_U64_EQ(c.max_samples, CTF_INFINITELY_REPEAT);
    ASSERT_EQ(ctf_param_parse(&c, ms, "maxSamples", "-1", &err), CTF_EINVAL);
    ASSERT_STR_EQ(err.message, "maxSamples: must be a non-negative integer (got \"-1\")");
    ASSERT_EQ(ctf_param_parse(&c, tl, "--trace-level", "3", &err), CTF_EINVAL);
    ASSERT_STR_EQ(err.message, "--trace-level: must be between 0 and 2 (got \"3\")");
    ASSERT_EQ(ctf_param_parse(&c, ms, "m", "99999999999999999999", &err), CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "must be between 0 and 18446744073709551615");
    ASSERT_EQ(ctf_param_parse(&c, fm, "f", "TRUE", &err), 0);
    ASSERT(c.frame_mode);
    ASSERT_EQ(ctf_param_parse(&c, fm, "f", "0", &err), 0);
    ASSERT(!c.frame_mode);
    ASSERT_EQ(ctf_param_parse(&c, pr, "p", "float64", &err), 0);
    ASSERT_EQ(c.precision, CTF_FLOAT64);
    ASSERT_EQ(ctf_param_set(&c, pr, "p", 5, &err), CTF_EINVAL);
    ASSERT_STR_CONTAINS(err.message, "CTF_FLOAT32 (4) or CTF_FLOAT64 (8)");
}

TEST(params_worker_rule)
{
    ctf_error err;
    ASSERT_EQ(ctf_workers_check(1, 0, &err), 0);
    ASSERT_EQ(ctf_workers_check(4, 3, &err), 0);
    ASSERT_EQ(ctf_workers_check(0, 0, &err), CTF_EINVAL);
    ASSERT_STR_EQ(err.message, "num_workers: must be a positive integer (got 0)");
    ASSERT_EQ(ctf_workers_check(2, 2, &err), CTF_EINVAL);
    ASSERT_STR_EQ(err.message, "worker_rank: must be < num_workers (got rank 2 with 2 workers)");
}
