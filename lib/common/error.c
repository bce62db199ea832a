/*
 * error.c -- status names and texts, the error record and the allocator hooks. There is no
 * default log sink: a reader without one logs nothing. Leaf module: everything in lib/ may
 * call it.
 *
 * Errors are formatted compiler-style (rules 2.1):
 *   FILE:LINE:COLUMN: (byte OFFSET) SEVERITY: MESSAGE
 * so that editors can jump to the spot; the byte offset matches the index, which addresses
 * chunks by byte.
 */
#include "common/common.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/*======================================================================
 * Version and status codes
 *====================================================================*/

const char *ctf_version_string(void) { return CTF_VERSION_STRING; }

const char *ctf_strerror(int code)
{
    switch (code) {
    case CTF_OK: return "no error";
    case CTF_EINVAL: return "invalid argument or configuration";
    case CTF_ENOMEM: return "out of memory";
    case CTF_EIO: return "input/output error";
    case CTF_EPARSE: return "malformed input data";
    case CTF_ELIMIT: return "limit exceeded";
    case CTF_ESTATE: return "checkpoint state does not fit this reader";
    case CTF_EINDEX: return "index does not fit the data";
    case CTF_ECHANGED: return "data file changed since it was indexed";
    case CTF_ECANCELED: return "remote request cancelled";
    default: return "unknown error";
    }
}

const char *ctf_error_name(int code)
{
    switch (code) {
    case CTF_OK: return "CTF_OK";
    case CTF_EINVAL: return "CTF_EINVAL";
    case CTF_ENOMEM: return "CTF_ENOMEM";
    case CTF_EIO: return "CTF_EIO";
    case CTF_EPARSE: return "CTF_EPARSE";
    case CTF_ELIMIT: return "CTF_ELIMIT";
    case CTF_ESTATE: return "CTF_ESTATE";
    case CTF_EINDEX: return "CTF_EINDEX";
    case CTF_ECHANGED: return "CTF_ECHANGED";
    case CTF_ECANCELED: return "CTF_ECANCELED";
    default: return "CTF_E?";
    }
}

/*======================================================================
 * Error records
 *====================================================================*/

void ctf__error_clear(ctf_error *err)
{
    if (!err) return;
    err->code = CTF_OK;
    err->path[0] = 0;
    err->line = 0;
    err->column = 0;
    err->offset = -1;
    err->message[0] = 0;
}

/* Where a URL's text ends inside a message: at a blank, a quote or a bracket. */
static bool url_char(char c)
{
    return c && c != ' ' && c != '\t' && c != '\n' && c != '\'' && c != '"' && c != '(' &&
           c != ')' && c != '<' && c != '>';
}

static bool scheme_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '-' || c == '.';
}

/* Appends the first n bytes of s, as far as they fit (one byte stays for the NUL). */
static void put(char *buf, size_t cap, size_t *len, const char *s, size_t n)
{
    for (size_t i = 0; i < n && *len + 1 < cap; i++) buf[(*len)++] = s[i];
}

char *ctf_redact_urls(const char *text, char *buf, size_t cap)
{
    if (!buf || cap == 0) return buf;
    size_t n = 0;
    const char *p = text ? text : "";
    while (*p) {
        const char *sep = strstr(p, "://");
        if (!sep) {
            put(buf, cap, &n, p, strlen(p));
            break;
        }
        const char *scheme = sep;
        while (scheme > p && scheme_char(scheme[-1])) scheme--;
        const size_t sl = (size_t)(sep - scheme);
        const bool http = (sl == 4 && !strncasecmp(scheme, "http", 4)) ||
                          (sl == 5 && !strncasecmp(scheme, "https", 5));
        put(buf, cap, &n, p, (size_t)(sep + 3 - p));
        p = sep + 3;
        /* The authority: up to the path, the query or the URL's end; its user part goes. */
        const char *a = p, *at = NULL;
        for (; url_char(*a) && *a != '/' && *a != '?' && *a != '#'; a++)
            if (*a == '@') at = a;
        if (at) {
            put(buf, cap, &n, "***", 3);
            p = at;
        }
        /* The rest of the URL; an http(s) query goes (an s3:// '?' is a pattern's). */
        for (; url_char(*p); p++) {
            if (http && *p == '?') {
                put(buf, cap, &n, "?***", 4);
                while (url_char(p[1]) && p[1] != '#') p++;
                continue;
            }
            put(buf, cap, &n, p, 1);
        }
    }
    buf[n] = '\0';
    return buf;
}

int ctf__vfail(ctf_error *err, int code, ctf__where where, const char *fmt, va_list ap)
{
    if (!err) return code;
    err->code = code;
    char path[CTF_ERROR_PATH_MAX];
    snprintf(path, sizeof path, "%s", where.path ? where.path : ""); /* (may be err->path) */
    ctf_redact_urls(path, err->path, sizeof err->path);
    err->line = where.line;
    err->column = where.column;
    err->offset = where.offset;
    char msg[CTF_ERROR_MSG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    ctf_redact_urls(msg, err->message, sizeof err->message);
    return code;
}

int ctf__fail(ctf_error *err, int code, ctf__where where, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ctf__vfail(err, code, where, fmt, ap);
    va_end(ap);
    return code;
}

static const char *severity_name(ctf_severity sev)
{
    switch (sev) {
    case CTF_SEV_ERROR: return "error";
    case CTF_SEV_WARNING: return "warning";
    default: return "info";
    }
}

char *ctf_error_format(const ctf_error *err, ctf_severity sev, char *buf, size_t cap)
{
    if (!buf || cap == 0) return buf;
    size_t n = 0;
#define APPEND(...) \
    do { \
        if (n < cap) { \
            int k_ = snprintf(buf + n, cap - n, __VA_ARGS__); \
            if (k_ > 0) n += (size_t)k_; \
        } \
    } while (0)
    buf[0] = 0;
    if (err->path[0]) {
        APPEND("%s:", err->path);
        if (err->line) {
            APPEND("%llu:", (unsigned long long)err->line);
            if (err->column) APPEND("%llu:", (unsigned long long)err->column);
        }
        APPEND(" ");
    }
    if (err->offset >= 0) APPEND("(byte %lld) ", (long long)err->offset);
    APPEND("%s: %s", severity_name(sev), err->message);
#undef APPEND
    return buf;
}

/*======================================================================
 * Allocation with fault injection
 *====================================================================*/

#ifdef CTF_TESTING
ctf__alloc_hooks ctf__alloc;

static bool should_fail(void)
{
    long k = atomic_fetch_add(&ctf__alloc.count, 1) + 1;
    long at = ctf__alloc.fail_at;
    if (at <= 0) return false;
    return k == at || (ctf__alloc.fail_sticky && k > at);
}
#define LIVE_ADD(d) atomic_fetch_add(&ctf__alloc.live, (d))
#else
/* The release build: no counters, no atomic operation per allocation. */
#define should_fail() false
#define LIVE_ADD(d) ((void)0)
#endif

void *ctf__malloc(size_t n)
{
    if (should_fail()) return NULL;
    void *p = malloc(n ? n : 1);
    if (p) LIVE_ADD(1);
    return p;
}

void *ctf__calloc(size_t n, size_t size)
{
    if (should_fail()) return NULL;
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p) LIVE_ADD(1);
    return p;
}

void *ctf__realloc(void *p, size_t n)
{
    if (!p) return ctf__malloc(n);
    if (should_fail()) return NULL;
    return realloc(p, n ? n : 1);
}

void ctf__free(void *p)
{
    if (!p) return;
    LIVE_ADD(-1);
    free(p);
}

char *ctf__strdup(const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = ctf__malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

int ctf__grow(void **buf, size_t *cap, size_t need, size_t elt)
{
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / elt) return CTF_ENOMEM;
        ncap *= 2;
    }
    void *p = CTF_REALLOC(*buf, ncap * elt);
    if (!p) return CTF_ENOMEM;
    *buf = p;
    *cap = ncap;
    return 0;
}
