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

/* The strings the options point to live as long as the tool. */
static char g_key[256], g_secret[256], g_token[2048], g_region[64], g_cache[1024];

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    return s;
}

/* KEY's value in [SECTION] of an INI file into out (unchanged when absent). */
static void ini_get(const char *path, const char *section, const char *key, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[4096];
    bool in = false;
    while (fgets(line, sizeof line, f)) {
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
        if (!strcmp(trim(s), key)) snprintf(out, cap, "%s", trim(eq + 1));
    }
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
            snprintf(g_key, sizeof g_key, "%s", env("AWS_ACCESS_KEY_ID"));
            snprintf(g_secret, sizeof g_secret, "%s",
                     env("AWS_SECRET_ACCESS_KEY") ? env("AWS_SECRET_ACCESS_KEY") : "");
            snprintf(g_token, sizeof g_token, "%s",
                     env("AWS_SESSION_TOKEN") ? env("AWS_SESSION_TOKEN") : "");
        } else {
            ini_get(cred, profile, "aws_access_key_id", g_key, sizeof g_key);
            ini_get(cred, profile, "aws_secret_access_key", g_secret, sizeof g_secret);
            ini_get(cred, profile, "aws_session_token", g_token, sizeof g_token);
        }
        o->access_key_id = g_key[0] ? g_key : NULL;
        o->secret_access_key = g_secret[0] ? g_secret : NULL;
        o->session_token = g_token[0] ? g_token : NULL;
    }
    if (env("AWS_REGION") || env("AWS_DEFAULT_REGION")) {
        snprintf(g_region, sizeof g_region, "%s",
                 env("AWS_REGION") ? env("AWS_REGION") : env("AWS_DEFAULT_REGION"));
    } else {
        if (strcmp(profile, "default"))
            snprintf(section, sizeof section, "profile %s", profile);
        else
            snprintf(section, sizeof section, "default");
        ini_get(conf, section, "region", g_region, sizeof g_region);
    }
    o->region = g_region[0] ? g_region : NULL;
    const char *xdg = env("XDG_CACHE_HOME"), *mine = env("CTFIO_CACHE_DIR");
    if (cache_dir)
        snprintf(g_cache, sizeof g_cache, "%s", cache_dir);
    else if (mine)
        snprintf(g_cache, sizeof g_cache, "%s", mine);
    else if (xdg)
        snprintf(g_cache, sizeof g_cache, "%s/ctfio", xdg);
    else
        snprintf(g_cache, sizeof g_cache, "%s/.cache/ctfio", home);
    o->cache_dir = g_cache;
}
