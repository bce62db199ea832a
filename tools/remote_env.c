/*
 * remote_env.c -- the tool's side of remote data (docs/remote.md): the library never reads
 * the environment, so the tool resolves what the AWS tools users already have into
 * ctf_config.remote: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION / AWS_DEFAULT_REGION, AWS_PROFILE with
 * the shared credentials and config files, and CTFIO_CACHE_DIR for the index caches. Flags
 * given on the command line come first.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The strings the options point to live as long as the tool; any length (an STS session token
 * runs to thousands of characters). */
static char *g_key, *g_secret, *g_token, *g_region, *g_cache;

/* *dst = a copy of s (the previous value freed); out of memory leaves it unset. */
static void set(char **dst, const char *s)
{
    free(*dst);
    *dst = s ? strdup(s) : NULL;
}

/* "%s/suffix" into *dst. */
static void set_join(char **dst, const char *a, const char *b)
{
    free(*dst);
    size_t n = strlen(a) + strlen(b) + 1;
    *dst = malloc(n);
    if (*dst) snprintf(*dst, n, "%s%s", a, b);
}

static const char *nonempty(const char *s) { return s && s[0] ? s : NULL; }

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* KEY's value in [SECTION] of an INI file into *out (unchanged when absent); lines of any
 * length. */
static void ini_get(const char *path, const char *section, const char *key, char **out)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *line = NULL;
    size_t cap = 0;
    bool in = false;
    while (getline(&line, &cap, f) > 0) {
        char *s = trim(line);
        if (*s == '[') {
            char *e = strchr(s, ']');
            if (e) *e = '\0';
            in = !strcmp(trim(s + 1), section);
            continue;
        }
        char *eq = strchr(s, '=');
        if (!in || !eq || *s == '#' || *s == ';') continue;
        *eq = '\0';
        if (!strcmp(trim(s), key)) set(out, trim(eq + 1));
    }
    free(line);
    fclose(f);
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

void cli_remote_options(ctf_remote_options *o, const char *endpoint, const char *cache_dir,
                        bool unsigned_requests)
{
    const char *home = env("HOME") ? env("HOME") : ".";
    o->endpoint = endpoint                     ? endpoint
                  : env("AWS_ENDPOINT_URL_S3") ? env("AWS_ENDPOINT_URL_S3")
                                               : env("AWS_ENDPOINT_URL");
    const char *profile = env("AWS_PROFILE") ? env("AWS_PROFILE") : "default";
    char cred[1024], conf[1024], section[300];
    snprintf(cred, sizeof cred, "%s",
             env("AWS_SHARED_CREDENTIALS_FILE") ? env("AWS_SHARED_CREDENTIALS_FILE") : "");
    if (!cred[0]) snprintf(cred, sizeof cred, "%s/.aws/credentials", home);
    snprintf(conf, sizeof conf, "%s", env("AWS_CONFIG_FILE") ? env("AWS_CONFIG_FILE") : "");
    if (!conf[0]) snprintf(conf, sizeof conf, "%s/.aws/config", home);
    if (!unsigned_requests) {
        if (env("AWS_ACCESS_KEY_ID")) {
            set(&g_key, env("AWS_ACCESS_KEY_ID"));
            set(&g_secret, env("AWS_SECRET_ACCESS_KEY"));
            set(&g_token, env("AWS_SESSION_TOKEN"));
        } else {
            ini_get(cred, profile, "aws_access_key_id", &g_key);
            ini_get(cred, profile, "aws_secret_access_key", &g_secret);
            ini_get(cred, profile, "aws_session_token", &g_token);
        }
        o->access_key_id = nonempty(g_key);
        o->secret_access_key = nonempty(g_secret);
        o->session_token = nonempty(g_token);
    }
    if (env("AWS_REGION") || env("AWS_DEFAULT_REGION")) {
        set(&g_region, env("AWS_REGION") ? env("AWS_REGION") : env("AWS_DEFAULT_REGION"));
    } else {
        if (strcmp(profile, "default"))
            snprintf(section, sizeof section, "profile %s", profile);
        else
            snprintf(section, sizeof section, "default");
        ini_get(conf, section, "region", &g_region);
    }
    o->region = nonempty(g_region);
    const char *xdg = env("XDG_CACHE_HOME"), *mine = env("CTFIO_CACHE_DIR");
    if (cache_dir)
        set(&g_cache, cache_dir);
    else if (mine)
        set(&g_cache, mine);
    else if (xdg)
        set_join(&g_cache, xdg, "/ctfio");
    else
        set_join(&g_cache, home, "/.cache/ctfio");
    o->cache_dir = g_cache;
}
