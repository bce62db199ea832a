/*
 * http.c -- the seam's remote backend: S3 objects (s3://BUCKET/KEY) and plain http(s):// URLs
 * read by range GETs on libcurl. One context per deserializer keeps the options (copied; the
 * library never reads the environment), a pool of idle curl handles (each keeps its
 * connection alive, so requests reuse connections across threads and objects) and the request
 * counters. Transient failures (5xx, 429/SlowDown, resets, timeouts, short bodies) are retried
 * with exponential backoff and jitter, within a bounded count; 403, 404, 412 and an
 * unreachable endpoint fail at once with a message that says which. No answer's bytes are used
 * before it has shown the range asked (Content-Range), the indexed size and the fingerprint
 * taken at open (the ETag, or Last-Modified where a server has none).
 */

#include "io.h"

#include <errno.h>
#include <fnmatch.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef CTF_HAVE_CURL
#include <curl/curl.h>
#endif

struct ctf__remote {
    atomic_long refs;
    char *endpoint;         /* scheme://host[:port] without a trailing '/', or NULL: AWS */
    char *region;
    char *access_key, *secret_key, *session_token; /* NULL: unsigned requests */
    char *cache_dir;        /* NULL: no index caches for remote objects */
    atomic_int cache_dir_state; /* 0 not judged yet, 1 usable, 2 not (judged once per context) */
    atomic_bool cache_dir_warned; /* the one warning about an unusable one has been given */
    unsigned max_retries;
    unsigned timeout_ms, connect_timeout_ms;
    unsigned backoff_ms;    /* the first retry's delay; doubles up to backoff_max_ms */
    unsigned backoff_max_ms;
    pthread_mutex_t mu;     /* guards idle and rng */
    void **idle;            /* idle curl handles, each with its live connection */
    size_t num_idle, cap_idle;
    uint64_t rng;           /* jitter only: never touches the data */
    /* Identities (ETag, size) a listing gave, sorted by URL: opening the objects a pattern
     * matched then asks nothing more of the server when their index caches are valid. */
    struct known_id {
        char *url;
        ctf__file_id id;
    } *known;
    size_t num_known, cap_known;
    atomic_ullong requests, retries, bytes;
    /* Set by ctf__remote_cancel (a reader closing, Ctrl-C): libcurl's progress callback stops
     * the transfers in flight, and no request starts or retries after it. */
    atomic_bool cancelled;
    /* The sockets of this context's connections: a cancel shuts them down, which wakes a
     * transfer waiting on a silent server at once (the progress callback alone may wait a
     * second for libcurl's next look). Its own lock: libcurl closes sockets under any other. */
    pthread_mutex_t sock_mu;
    int *socks;
    size_t num_socks, cap_socks;
};

static char *dup_opt(const char *s, bool *oom)
{
    if (!s || !s[0]) return NULL;
    char *d = ctf__strdup(s);
    if (!d) *oom = true;
    return d;
}

int ctf__remote_new(const ctf_remote_options *opt, ctf__remote **out, ctf_error *err)
{
    *out = NULL;
    ctf__remote *r = CTF_CALLOC(1, sizeof *r);
    if (!r) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    bool oom = false;
    ctf_remote_options def;
    if (!opt) {
        memset(&def, 0, sizeof def);
        opt = &def;
    }
    r->endpoint = dup_opt(opt->endpoint, &oom);
    if (r->endpoint) {
        size_t n = strlen(r->endpoint);
        while (n && r->endpoint[n - 1] == '/') r->endpoint[--n] = '\0';
    }
    r->region = dup_opt(opt->region ? opt->region : "us-east-1", &oom);
    r->access_key = dup_opt(opt->access_key_id, &oom);
    r->secret_key = dup_opt(opt->secret_access_key, &oom);
    r->session_token = dup_opt(opt->session_token, &oom);
    r->cache_dir = dup_opt(opt->cache_dir, &oom);
    r->max_retries = opt->max_retries;
    r->timeout_ms = opt->timeout_ms ? opt->timeout_ms : 60000;
    r->connect_timeout_ms = opt->connect_timeout_ms ? opt->connect_timeout_ms : 10000;
    r->backoff_ms = opt->backoff_ms ? opt->backoff_ms : 50;
    r->backoff_max_ms = r->backoff_ms * 64 < 5000 ? 5000 : r->backoff_ms * 64;
    r->rng = (uint64_t)(uintptr_t)r ^ (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull;
    atomic_init(&r->refs, 1);
    atomic_init(&r->cache_dir_state, 0);
    atomic_init(&r->cache_dir_warned, false);
    atomic_init(&r->cancelled, false);
    bool mu_ok = false;
    if (!oom && !(r->access_key && !r->secret_key) && pthread_mutex_init(&r->mu, NULL) == 0) {
        mu_ok = true;
        if (pthread_mutex_init(&r->sock_mu, NULL) != 0) {
            pthread_mutex_destroy(&r->mu);
            mu_ok = false;
        }
    }
    if (!mu_ok) {
        bool bad_keys = !oom && r->access_key && !r->secret_key;
        CTF_FREE(r->endpoint);
        CTF_FREE(r->region);
        CTF_FREE(r->access_key);
        CTF_FREE(r->secret_key);
        CTF_FREE(r->session_token);
        CTF_FREE(r->cache_dir);
        CTF_FREE(r);
        if (bad_keys)
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                             "config.remote.secret_access_key: an access key id needs its "
                             "secret key");
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    *out = r;
    return 0;
}

ctf__remote *ctf__remote_ref(ctf__remote *rem)
{
    if (rem) atomic_fetch_add(&rem->refs, 1);
    return rem;
}

void ctf__remote_unref(ctf__remote *rem)
{
    if (!rem || atomic_fetch_sub(&rem->refs, 1) != 1) return;
#ifdef CTF_HAVE_CURL
    for (size_t i = 0; i < rem->num_idle; i++) curl_easy_cleanup(rem->idle[i]);
#endif
    CTF_FREE(rem->idle);
    for (size_t i = 0; i < rem->num_known; i++) CTF_FREE(rem->known[i].url);
    CTF_FREE(rem->known);
    pthread_mutex_destroy(&rem->mu);
    pthread_mutex_destroy(&rem->sock_mu);
    CTF_FREE(rem->socks);
    if (rem->secret_key) memset(rem->secret_key, 0, strlen(rem->secret_key));
    CTF_FREE(rem->endpoint);
    CTF_FREE(rem->region);
    CTF_FREE(rem->access_key);
    CTF_FREE(rem->secret_key);
    CTF_FREE(rem->session_token);
    CTF_FREE(rem->cache_dir);
    CTF_FREE(rem);
}

void ctf__remote_counters(const ctf__remote *rem, ctf_io_counters *out)
{
    memset(out, 0, sizeof *out);
    if (!rem) return;
    out->requests = atomic_load(&((ctf__remote *)rem)->requests);
    out->retries = atomic_load(&((ctf__remote *)rem)->retries);
    out->bytes = atomic_load(&((ctf__remote *)rem)->bytes);
}

void ctf__remote_cancel(ctf__remote *rem)
{
    if (!rem) return;
    atomic_store(&rem->cancelled, true);
    /* Under sock_mu no socket of the list can be closed (and its number reused) meanwhile. */
    pthread_mutex_lock(&rem->sock_mu);
    for (size_t i = 0; i < rem->num_socks; i++) shutdown(rem->socks[i], SHUT_RDWR);
    pthread_mutex_unlock(&rem->sock_mu);
}

bool ctf__io_cache_path(const ctf__remote *rem, const char *url, const ctf__file_id *id, char *buf,
                        size_t cap, char *why, size_t why_cap)
{
    if (why_cap) why[0] = '\0';
    if (!rem || !rem->cache_dir) return false;
    /* Made (0700) and judged once per context: a 10,000-object open would otherwise pay a
     * mkdir and a stat per object. A directory another user owns or can write is not used
     * (docs/chunk-cache.md, "Trust"): its caches could be anyone's. */
    ctf__remote *r = (ctf__remote *)rem;
    int state = atomic_load(&r->cache_dir_state);
    if (state == 0) {
        char w[160];
        state = ctf__private_dir(rem->cache_dir, true, w, sizeof w) ? 2 : 1;
        atomic_store(&r->cache_dir_state, state);
        if (state == 2 && why_cap && !atomic_exchange(&r->cache_dir_warned, true))
            snprintf(why, why_cap, "%s: %s", rem->cache_dir, w);
    }
    if (state != 1) return false;
    /* The key: the URL, the ETag and the size, so that a replaced object never meets the
     * cache of its predecessor, and two endpoints' objects of one name stay apart. */
    ctf__sha256_ctx s;
    ctf__sha256_init(&s);
    const char *ep = rem->endpoint ? rem->endpoint : "";
    ctf__sha256_update(&s, ep, strlen(ep) + 1);
    ctf__sha256_update(&s, url, strlen(url) + 1);
    ctf__sha256_update(&s, id->etag, strlen(id->etag) + 1);
    ctf__sha256_update(&s, &id->size, sizeof id->size);
    unsigned char d[32];
    char hex[65];
    ctf__sha256_final(&s, d);
    ctf__hex(d, 20, hex);
    int n = snprintf(buf, cap, "%s/%s.ctfidx", rem->cache_dir, hex);
    return n > 0 && (size_t)n < cap;
}

#ifndef CTF_HAVE_CURL

static int no_curl(const char *url, ctf_error *err)
{
    return ctf__fail(err, CTF_EIO, (ctf__where){url, 0, 0, -1},
                     "remote paths need libcurl, and this build of ctfio has none (install "
                     "libcurl's development files and rebuild)");
}

int ctf__http_stat(ctf__remote *rem, const char *url, ctf__file_id *id, ctf_error *err)
{
    (void)rem;
    (void)id;
    return no_curl(url, err);
}

int ctf__http_read(ctf__remote *rem, const char *url, const char *etag, void *buf, size_t n,
                   uint64_t offset, uint64_t size, ctf_error *err)
{
    (void)rem, (void)etag, (void)buf, (void)n, (void)offset, (void)size;
    return no_curl(url, err);
}

int ctf__http_glob(ctf__remote *rem, const char *pattern, char ***out, size_t *n, ctf_error *err)
{
    (void)rem, (void)out, (void)n;
    return no_curl(pattern, err);
}

#else

/*======================================================================
 * Targets: what a path means as a request
 *====================================================================*/

typedef struct target {
    char url[4096];          /* what curl fetches (without the query) */
    char host[512];          /* the Host header (signed) */
    char canon_uri[4096];    /* the encoded path, as signed */
    char bucket[256];        /* s3:// only, for messages */
    const char *key;         /* s3:// only: the key within the path given */
    bool sign;               /* S3 with credentials */
    bool s3;
} target;

/* Host (and port) of a scheme://host[:port][/...] URL. */
static void url_host(const char *url, char *host, size_t cap)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t n = strcspn(p, "/?#");
    if (n >= cap) n = cap - 1;
    memcpy(host, p, n);
    host[n] = '\0';
}

/* A key as S3 must receive it: each segment encoded, and a '.' or '..' segment with its dots
 * as %2E, so that nothing between here and the bucket (libcurl, a proxy, the server's own
 * path handling) takes it for a relative step: s3://b/a/../x.ctf reads the key "a/../x.ctf".
 * The same text is signed. @return : the encoded length (as ctf__uri_encode). */
static size_t encode_key(const char *key, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = key;;) {
        const size_t sl = strcspn(p, "/");
        char seg[1200], tmp[3600];
        const bool dots = (sl == 1 && p[0] == '.') || (sl == 2 && p[0] == '.' && p[1] == '.');
        size_t m;
        if (dots) {
            m = 3 * sl;
            snprintf(tmp, sizeof tmp, "%s", sl == 1 ? "%2E" : "%2E%2E");
        } else if (sl < sizeof seg) {
            memcpy(seg, p, sl);
            seg[sl] = '\0';
            m = ctf__uri_encode(seg, false, tmp, sizeof tmp);
        } else {
            m = cap; /* longer than any key S3 takes */
            tmp[0] = '\0';
        }
        if (n + m < cap) memcpy(out + n, tmp, m);
        n += m;
        p += sl;
        if (!*p) break;
        if (n + 1 < cap) out[n] = '/';
        n++;
        p++;
    }
    if (cap) out[n < cap ? n : cap - 1] = '\0';
    return n;
}

static int resolve(const ctf__remote *rem, const char *path, target *t, ctf_error *err)
{
    memset(t, 0, sizeof *t);
    if (strncmp(path, "s3://", 5) != 0) {
        int n = snprintf(t->url, sizeof t->url, "%s", path);
        if (n < 0 || (size_t)n >= sizeof t->url) goto long_url;
        url_host(path, t->host, sizeof t->host);
        return 0;
    }
    t->s3 = true;
    const char *b = path + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    if (bl == 0 || bl >= sizeof t->bucket || !slash || !slash[1])
        return ctf__fail(err, CTF_EINVAL, (ctf__where){path, 0, 0, -1},
                         "an S3 URL is s3://BUCKET/KEY (a bucket and a key are required)");
    memcpy(t->bucket, b, bl);
    t->key = slash + 1;
    char ekey[4096];
    if (encode_key(t->key, ekey, sizeof ekey) >= sizeof ekey) goto long_url;
    int n;
    if (rem->endpoint) {
        /* A custom endpoint (MinIO, Ceph, a test server): path-style addressing. */
        url_host(rem->endpoint, t->host, sizeof t->host);
        n = snprintf(t->canon_uri, sizeof t->canon_uri, "/%s/%s", t->bucket, ekey);
        if (n < 0 || (size_t)n >= sizeof t->canon_uri) goto long_url;
        n = snprintf(t->url, sizeof t->url, "%s%s", rem->endpoint, t->canon_uri);
    } else {
        n = snprintf(t->host, sizeof t->host, "%s.s3.%s.amazonaws.com", t->bucket, rem->region);
        if (n < 0 || (size_t)n >= sizeof t->host) goto long_url;
        n = snprintf(t->canon_uri, sizeof t->canon_uri, "/%s", ekey);
        if (n < 0 || (size_t)n >= sizeof t->canon_uri) goto long_url;
        n = snprintf(t->url, sizeof t->url, "https://%s%s", t->host, t->canon_uri);
    }
    if (n < 0 || (size_t)n >= sizeof t->url) goto long_url;
    t->sign = rem->access_key != NULL;
    return 0;
long_url:
    return ctf__fail(err, CTF_ELIMIT, (ctf__where){path, 0, 0, -1}, "URL too long");
}

/*======================================================================
 * One request
 *====================================================================*/

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static CURL *handle_get(ctf__remote *rem)
{
    pthread_once(&curl_once, curl_init_once);
    CURL *c = NULL;
    pthread_mutex_lock(&rem->mu);
    if (rem->num_idle) c = rem->idle[--rem->num_idle];
    pthread_mutex_unlock(&rem->mu);
    if (c)
        curl_easy_reset(c); /* keeps the connection */
    else
        c = curl_easy_init();
    return c;
}

static void handle_put(ctf__remote *rem, CURL *c)
{
    pthread_mutex_lock(&rem->mu);
    bool kept = !ctf__grow((void **)&rem->idle, &rem->cap_idle, rem->num_idle + 1,
                           sizeof *rem->idle);
    if (kept) rem->idle[rem->num_idle++] = c;
    pthread_mutex_unlock(&rem->mu);
    if (!kept) curl_easy_cleanup(c);
}

typedef struct resp {
    long status;
    char etag[CTF__ETAG_MAX];
    char last_modified[64];
    char content_range[96];  /* as sent (cut to fit) */
    uint64_t total;          /* the object's size (ctf__http_stat's) */
    bool ranged;             /* Content-Range seen */
    uint64_t length;         /* Content-Length */
    bool have_length;
    int verdict;             /* check_answer's (ANSWER_*), and why */
    char why[320];
    char *dst;               /* a 2xx body goes here (at most dst_cap bytes) */
    size_t dst_cap, got;
    bool overflow;           /* more body than asked for */
    bool keep_body;          /* collect the 2xx body in body (a listing) */
    char *body;              /* an error's body (its first bytes), or a listing */
    size_t body_len, body_cap, body_limit;
    bool oom;
} resp;

static size_t on_header(char *p, size_t size, size_t nitems, void *user)
{
    resp *r = user;
    size_t n = size * nitems;
    char line[1024];
    size_t l = n < sizeof line - 1 ? n : sizeof line - 1;
    memcpy(line, p, l);
    line[l] = '\0';
    while (l && (line[l - 1] == '\r' || line[l - 1] == '\n')) line[--l] = '\0';
    if (!strncmp(line, "HTTP/", 5)) {
        /* A new response (after a redirect or a 100): forget the previous one's headers. The
         * status comes first, so that on_body can tell data from an error. */
        const char *sp = strchr(line, ' ');
        r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        r->etag[0] = r->last_modified[0] = r->content_range[0] = '\0';
        r->ranged = r->have_length = false;
        return n;
    }
    char *colon = strchr(line, ':');
    if (!colon) return n;
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    size_t vl = strlen(v);
    while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t')) v[--vl] = '\0';
    if (!strcasecmp(line, "etag")) {
        snprintf(r->etag, sizeof r->etag, "%s", v);
    } else if (!strcasecmp(line, "last-modified")) {
        snprintf(r->last_modified, sizeof r->last_modified, "%s", v);
    } else if (!strcasecmp(line, "content-range")) {
        snprintf(r->content_range, sizeof r->content_range, "%s", v);
        r->ranged = true;
    } else if (!strcasecmp(line, "content-length")) {
        char *end;
        errno = 0;
        r->length = strtoull(v, &end, 10);
        r->have_length = end != v && !*end && errno == 0 && v[0] != '-';
    }
    return n;
}

static size_t on_body(char *p, size_t size, size_t nitems, void *user)
{
    resp *r = user;
    size_t n = size * nitems;
    if (r->dst && r->status / 100 == 2) {
        if (r->got + n > r->dst_cap) {
            r->overflow = true;
            return 0; /* aborts the transfer */
        }
        memcpy(r->dst + r->got, p, n);
        r->got += n;
        return n;
    }
    /* An error's body (for its code) or a listing. */
    size_t room = r->body_limit > r->body_len ? r->body_limit - r->body_len : 0;
    size_t take = n < room ? n : room;
    if (take) {
        if (ctf__grow((void **)&r->body, &r->body_cap, r->body_len + take + 1, 1)) {
            r->oom = true;
            return 0;
        }
        memcpy(r->body + r->body_len, p, take);
        r->body_len += take;
        r->body[r->body_len] = '\0';
    }
    if (r->keep_body && take < n) {
        r->overflow = true;
        return 0;
    }
    r->got += n;
    return n;
}

#define SIZE_UNKNOWN UINT64_MAX
/* Redirects one request follows (plain http(s) only): a server that sends more is in a loop,
 * or near enough. */
#define MAX_REDIRECTS 5

typedef struct request {
    const char *method; /* "GET" or "HEAD" */
    const char *query; /* canonical query ("" for none) */
    const char *range; /* "bytes=A-B" or NULL */
    const char *fp; /* the indexed fingerprint (fp_of) the answer must show, or NULL */
    uint64_t from, to; /* the range's first and last byte (with range) */
    uint64_t size; /* the indexed size the answer must show; SIZE_UNKNOWN: a probe */
} request;

/*======================================================================
 * Fingerprints and Content-Range: what an answer must show
 *====================================================================*/

/* A remote object's fingerprint (ctf__file_id.etag). Its ETag in one form, "core" or
 * W/"core" (servers and listings differ in the quotes); for a server that sends none, " lm "
 * and its Last-Modified; with neither, " size" (the size is then all there is to compare).
 * The leading blank keeps the two apart from any ETag: header values are trimmed. */
static void etag_canon(const char *e, char *out, size_t cap)
{
    const bool weak = (e[0] == 'W' || e[0] == 'w') && e[1] == '/';
    if (weak) e += 2;
    size_t n = strlen(e);
    if (n >= 2 && e[0] == '"' && e[n - 1] == '"') e++, n -= 2;
    snprintf(out, cap, "%s\"%.*s\"", weak ? "W/" : "", (int)n, e);
}

static bool fp_is_lm(const char *fp) { return !strncmp(fp, " lm ", 4); }
static bool fp_is_etag(const char *fp) { return fp[0] && fp[0] != ' '; }

static void fp_of(const resp *r, char *fp, size_t cap)
{
    if (r->etag[0])
        etag_canon(r->etag, fp, cap);
    else if (r->last_modified[0])
        snprintf(fp, cap, " lm %s", r->last_modified);
    else
        snprintf(fp, cap, " size");
}

/* Two ETags that differ only in quotes or a weak prefix name one version. */
static bool same_etag(const char *a, const char *b)
{
    char x[CTF__ETAG_MAX + 4], y[CTF__ETAG_MAX + 4];
    etag_canon(a, x, sizeof x);
    etag_canon(b, y, sizeof y);
    return !strcmp(x + (x[0] == 'W' ? 2 : 0), y + (y[0] == 'W' ? 2 : 0));
}

static bool same_time(const char *a, const char *b)
{
    const time_t x = curl_getdate(a, NULL), y = curl_getdate(b, NULL);
    return x != -1 && y != -1 ? x == y : !strcmp(a, b);
}

static bool cr_num(const char **p, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    if (*s < '0' || *s > '9') return false;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - 9) / 10) return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    *p = s;
    return true;
}

typedef struct content_range {
    uint64_t first, last, total;
    bool unsatisfied; /* a 416's form: a star for the range, then the total */
    bool total_known; /* not a star for the total */
} content_range;

/* "bytes A-B/T", or a star for the total (unknown) or for the range (a 416's, RFC 9110).
 * @return : false for anything else. */
static bool parse_content_range(const char *v, content_range *c)
{
    memset(c, 0, sizeof *c);
    if (strncasecmp(v, "bytes ", 6) != 0) return false;
    const char *p = v + 6;
    while (*p == ' ') p++;
    if (*p == '*') {
        c->unsatisfied = true;
        p++;
    } else if (!cr_num(&p, &c->first) || *p++ != '-' || !cr_num(&p, &c->last) || c->last < c->first)
        return false;
    if (*p++ != '/') return false;
    if (p[0] == '*' && !p[1]) return !c->unsatisfied;
    if (!cr_num(&p, &c->total) || *p) return false;
    c->total_known = true;
    return c->unsatisfied || c->last < c->total;
}

enum { ANSWER_OK, ANSWER_RETRY, ANSWER_EIO, ANSWER_CHANGED };

/* The checks a 2xx answer to a range request passes before its bytes are used: the range it
 * holds is the one asked (a stale answer on a reused connection, or a server's mistake, is
 * another range said honestly), its total is the indexed size, its fingerprint the indexed
 * one. @return : ANSWER_*, with why filled unless ANSWER_OK. */
static int check_answer(const request *q, const resp *r, char *why, size_t cap)
{
    const bool probe = q->size == SIZE_UNKNOWN;
    if (!q->range || r->status / 100 != 2) return ANSWER_OK;
    if (r->status != 206) {
        /* The whole object: right only when the whole object was asked (or to a probe). */
        if (probe || (q->from == 0 && q->to + 1 == q->size)) {
            if (!probe && r->have_length && r->length != q->size) {
                snprintf(why, cap,
                         "the object's size is now %llu bytes (Content-Length), indexed %llu",
                         (unsigned long long)r->length, (unsigned long long)q->size);
                return ANSWER_CHANGED;
            }
        } else {
            snprintf(why, cap,
                     "the server ignored the range request (HTTP %ld with the whole object for "
                     "%s); it cannot serve this data",
                     r->status, q->range);
            return ANSWER_EIO;
        }
    } else {
        content_range c;
        if (!r->ranged) {
            snprintf(why, cap,
                     "HTTP 206 without a Content-Range header: the bytes cannot be placed (asked "
                     "%s)",
                     q->range);
            return ANSWER_EIO;
        }
        if (!parse_content_range(r->content_range, &c) || c.unsatisfied) {
            snprintf(why, cap, "a Content-Range header that cannot be read ('%s') for %s",
                     r->content_range, q->range);
            return ANSWER_EIO;
        }
        if (c.first != q->from || c.last != q->to) {
            snprintf(why, cap, "the server sent another range (Content-Range: %s) for %s",
                     r->content_range, q->range);
            return ANSWER_RETRY;
        }
        if (!probe && c.total_known && c.total != q->size) {
            snprintf(why, cap,
                     "the object's size is now %llu bytes (Content-Range: %s), indexed %llu",
                     (unsigned long long)c.total, r->content_range, (unsigned long long)q->size);
            return ANSWER_CHANGED;
        }
    }
    if (q->fp && fp_is_etag(q->fp) && r->etag[0] && !same_etag(q->fp, r->etag)) {
        snprintf(why, cap, "its ETag is now %s, indexed %s", r->etag, q->fp);
        return ANSWER_CHANGED;
    }
    if (q->fp && fp_is_lm(q->fp) && r->last_modified[0] &&
        !same_time(q->fp + 4, r->last_modified)) {
        snprintf(why, cap, "its Last-Modified is now %s, indexed %s", r->last_modified, q->fp + 4);
        return ANSWER_CHANGED;
    }
    return ANSWER_OK;
}

/* Appends "name: value" (any length). @return : false when memory is short. */
static bool add_hdr(struct curl_slist **hl, const char *name, const char *value)
{
    const size_t nl = strlen(name), vl = strlen(value);
    char *h = CTF_MALLOC(nl + vl + 3);
    if (!h) return false;
    memcpy(h, name, nl);
    memcpy(h + nl, ": ", 2);
    memcpy(h + nl + 2, value, vl + 1);
    struct curl_slist *n = curl_slist_append(*hl, h);
    CTF_FREE(h);
    if (!n) return false;
    *hl = n;
    return true;
}

/* libcurl calls it often during a transfer, and about once a second while nothing arrives: a
 * cancelled context ends the transfer with CURLE_ABORTED_BY_CALLBACK. */
static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return atomic_load(&((ctf__remote *)user)->cancelled) ? 1 : 0;
}

/* libcurl opens and closes this context's sockets through these two, which keep the list that
 * a cancel shuts down. A connection keeps the close callback it was opened with, also in the
 * pool after curl_easy_reset. */
static curl_socket_t on_open_socket(void *user, curlsocktype purpose, struct curl_sockaddr *a)
{
    ctf__remote *rem = user;
    (void)purpose;
    if (atomic_load(&rem->cancelled)) return CURL_SOCKET_BAD;
    curl_socket_t fd = socket(a->family, a->socktype, a->protocol);
    if (fd == CURL_SOCKET_BAD) return fd;
    pthread_mutex_lock(&rem->sock_mu);
    if (!ctf__grow((void **)&rem->socks, &rem->cap_socks, rem->num_socks + 1, sizeof(int)))
        rem->socks[rem->num_socks++] = fd; /* unlisted when memory is short: no fast cancel */
    pthread_mutex_unlock(&rem->sock_mu);
    return fd;
}

static int on_close_socket(void *user, curl_socket_t fd)
{
    ctf__remote *rem = user;
    pthread_mutex_lock(&rem->sock_mu);
    for (size_t i = 0; i < rem->num_socks; i++)
        if (rem->socks[i] == fd) {
            rem->socks[i] = rem->socks[--rem->num_socks];
            break;
        }
    pthread_mutex_unlock(&rem->sock_mu);
    return close(fd);
}

/* Sends one request; r receives the status, headers and body. @return : the curl code
 * (CURLE_ABORTED_BY_CALLBACK, without a request, once rem is cancelled). */
static CURLcode send_once(ctf__remote *rem, const target *t, const request *q, resp *r, char *cerr)
{
    if (atomic_load(&rem->cancelled)) return CURLE_ABORTED_BY_CALLBACK;
    CURL *c = handle_get(rem);
    if (!c) return CURLE_OUT_OF_MEMORY;
    struct curl_slist *hl = NULL;
    bool ok = true;
    const size_t ul = strlen(t->url) + strlen(q->query) + 2;
    char *url = CTF_MALLOC(ul);
    if (!url) {
        curl_easy_cleanup(c);
        return CURLE_OUT_OF_MEMORY;
    }
    snprintf(url, ul, "%s%s%s", t->url, q->query[0] ? "?" : "", q->query);
    ok = ok && add_hdr(&hl, "Host", t->host);
    if (q->range) ok = ok && add_hdr(&hl, "Range", q->range);
    /* The version indexed, asked of the server as well as checked in its answer. If-Match
     * compares strongly: a weak ETag would fail it always, and is only checked. */
    if (q->fp && fp_is_etag(q->fp) && q->fp[0] == '"') ok = ok && add_hdr(&hl, "If-Match", q->fp);
    if (q->fp && fp_is_lm(q->fp)) ok = ok && add_hdr(&hl, "If-Unmodified-Since", q->fp + 4);
    if (t->sign) {
        static const char empty_sha[] =
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        char date[20];
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(date, sizeof date, "%Y%m%dT%H%M%SZ", &tm);
        ctf__hdr sh[5];
        size_t ns = 0;
        sh[ns++] = (ctf__hdr){"host", t->host};
        if (q->range) sh[ns++] = (ctf__hdr){"range", q->range};
        sh[ns++] = (ctf__hdr){"x-amz-content-sha256", empty_sha};
        sh[ns++] = (ctf__hdr){"x-amz-date", date};
        if (rem->session_token) sh[ns++] = (ctf__hdr){"x-amz-security-token", rem->session_token};
        const ctf__sigv4 sg = {q->method, t->canon_uri,    q->query,       sh,
                               ns,        empty_sha,       date,           rem->region,
                               "s3",      rem->access_key, rem->secret_key};
        const size_t acap = strlen(rem->access_key) + strlen(rem->region) + 512;
        char *auth = CTF_MALLOC(acap);
        ok = ok && auth && ctf__sigv4_authorization(&sg, auth, acap) == 0 &&
             add_hdr(&hl, "Authorization", auth);
        CTF_FREE(auth);
        ok = ok && add_hdr(&hl, "x-amz-content-sha256", empty_sha);
        ok = ok && add_hdr(&hl, "x-amz-date", date);
        if (rem->session_token) ok = ok && add_hdr(&hl, "x-amz-security-token", rem->session_token);
    }
    /* curl's own "Expect" and "Accept" add nothing here. */
    struct curl_slist *last = ok ? curl_slist_append(hl, "Accept:") : NULL;
    if (!last) {
        curl_slist_free_all(hl);
        CTF_FREE(url);
        curl_easy_cleanup(c);
        return CURLE_OUT_OF_MEMORY;
    }
    hl = last;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    /* A stall limit, not a deadline: a transfer that moves no byte for timeout_ms ends (and is
     * retried), while a slow link that keeps moving completes however long it takes. */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, (long)((rem->timeout_ms + 999) / 1000));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)rem->connect_timeout_ms);
    /* The path as written: no dot segment is resolved (s3:// keys have theirs encoded). */
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
    if (!strcmp(q->method, "HEAD")) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, rem);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, on_open_socket);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, rem);
    curl_easy_setopt(c, CURLOPT_CLOSESOCKETFUNCTION, on_close_socket);
    curl_easy_setopt(c, CURLOPT_CLOSESOCKETDATA, rem);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, t->s3 ? 0L : 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)MAX_REDIRECTS);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    /* The library never reads the environment: no proxy from http_proxy and the like. */
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    cerr[0] = '\0';
    CURLcode cc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_slist_free_all(hl);
    CTF_FREE(url);
    r->verdict = ANSWER_OK;
    if (cc == CURLE_OK || (cc == CURLE_WRITE_ERROR && r->overflow))
        r->verdict = check_answer(q, r, r->why, sizeof r->why);
    /* A handle whose transfer broke may hold a dead connection, and one that brought another
     * range than asked a stale answer: do not pool it. */
    if (cc == CURLE_OK && r->verdict != ANSWER_RETRY)
        handle_put(rem, c);
    else
        curl_easy_cleanup(c);
    return cc;
}

/*======================================================================
 * Retries and errors
 *====================================================================*/

/* The text of <Name>...</Name> in an XML body, or "". */
static void xml_field(const char *body, const char *name, char *out, size_t cap)
{
    out[0] = '\0';
    if (!body) return;
    char open[64], close[64];
    snprintf(open, sizeof open, "<%s>", name);
    snprintf(close, sizeof close, "</%s>", name);
    const char *a = strstr(body, open);
    if (!a) return;
    a += strlen(open);
    const char *b = strstr(a, close);
    if (!b) return;
    size_t n = (size_t)(b - a) < cap - 1 ? (size_t)(b - a) : cap - 1;
    memcpy(out, a, n);
    out[n] = '\0';
}

static bool transient_curl(CURLcode cc)
{
    switch (cc) {
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR: return true;
    default: return false;
    }
}

static void backoff(ctf__remote *rem, unsigned attempt)
{
    uint64_t cap = rem->backoff_ms;
    for (unsigned i = 0; i < attempt && cap < rem->backoff_max_ms; i++) cap *= 2;
    if (cap > rem->backoff_max_ms) cap = rem->backoff_max_ms;
    pthread_mutex_lock(&rem->mu);
    rem->rng ^= rem->rng << 13;
    rem->rng ^= rem->rng >> 7;
    rem->rng ^= rem->rng << 17;
    const uint64_t x = rem->rng;
    pthread_mutex_unlock(&rem->mu);
    /* Full jitter over the upper half: clients that failed together do not retry together. */
    const uint64_t ms = cap / 2 + x % (cap / 2 + 1);
    /* In steps of at most 20 ms: a cancel does not wait out a 5 s backoff. */
    for (uint64_t left = ms; left && !atomic_load(&rem->cancelled);) {
        const uint64_t step = left < 20 ? left : 20;
        left -= step;
        struct timespec ts = {0, (long)step * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
        }
    }
}

/* The one message of a request that failed for good. */
static int final_error(const ctf__remote *rem, const target *t, const char *path, long status,
                       const resp *r, int64_t offset, ctf_error *err)
{
    char code[64], msg[200];
    xml_field(r->body, "Code", code, sizeof code);
    xml_field(r->body, "Message", msg, sizeof msg);
    (void)rem;
    const ctf__where w = {path, 0, 0, offset};
    if (status == 404) {
        if (!strcmp(code, "NoSuchBucket"))
            return ctf__fail(err, CTF_EIO, w, "no such bucket: '%s'", t->bucket);
        if (t->s3)
            return ctf__fail(err, CTF_EIO, w, "no such key: '%s' in bucket '%s'", t->key,
                             t->bucket);
        return ctf__fail(err, CTF_EIO, w, "not found (HTTP 404)");
    }
    if (status == 403) {
        if (!strcmp(code, "SignatureDoesNotMatch"))
            return ctf__fail(err, CTF_EIO, w,
                             "access refused (HTTP 403 SignatureDoesNotMatch): the request's "
                             "signature is wrong; check the secret access key");
        if (!strcmp(code, "InvalidAccessKeyId"))
            return ctf__fail(err, CTF_EIO, w,
                             "access refused (HTTP 403 InvalidAccessKeyId): the server does "
                             "not know the access key id");
        if (!strcmp(code, "ExpiredToken") || !strcmp(code, "InvalidToken"))
            return ctf__fail(err, CTF_EIO, w,
                             "access refused (HTTP 403 %s): the session token is not valid", code);
        if (!t->sign)
            return ctf__fail(err, CTF_EIO, w, "access refused (HTTP 403%s%s)%s%s%s",
                             code[0] ? " " : "", code,
                             t->s3 ? ": the request was unsigned (no credentials)"
                                   : ": the server does not let this URL be read",
                             msg[0] ? "; the server says: " : "", msg);
        return ctf__fail(err, CTF_EIO, w,
                         "access refused (HTTP 403%s%s): the signature was accepted but these "
                         "credentials may not read it",
                         code[0] ? " " : "", code);
    }
    if (status / 100 == 3 && t->s3)
        return ctf__fail(err, CTF_EIO, w,
                         "HTTP %ld: a redirect, which S3 requests do not follow (check the "
                         "endpoint and the region)",
                         status);
    if (status == 412)
        return ctf__fail(err, CTF_ECHANGED, w,
                         "the object changed since it was indexed (HTTP 412: the server no "
                         "longer has the version indexed); reopen the reader");
    return ctf__fail(err, CTF_EIO, w, "HTTP %ld%s%s%s%s", status, code[0] ? " " : "", code,
                     msg[0] ? ": " : "", msg);
}

/* Sends q with retries. Ends with r holding a 2xx response whose body is complete (checked by
 * expect: -1 any length), or an error. */
static int perform(ctf__remote *rem, const target *t, const char *path, const request *q, resp *r,
                   int64_t expect, int64_t offset, ctf_error *err)
{
    char cerr[CURL_ERROR_SIZE];
    const unsigned tries = rem->max_retries + 1;
    for (unsigned attempt = 0;; attempt++) {
        cerr[0] = '\0';
        r->verdict = ANSWER_OK;
        r->status = 0;
        r->got = 0;
        r->body_len = 0;
        r->overflow = r->oom = false;
        r->etag[0] = r->last_modified[0] = r->content_range[0] = '\0';
        r->ranged = r->have_length = false;
        atomic_fetch_add(&rem->requests, 1);
        CURLcode cc = send_once(rem, t, q, r, cerr);
        atomic_fetch_add(&rem->bytes, r->got);
        const ctf__where w = {path, 0, 0, offset};
        /* libcurl refuses a header line over its limit (100 KB) as "out of memory" (8.6 on:
         * "too large"); ctfio's own allocations set r->oom. */
        bool too_large = cc == CURLE_OUT_OF_MEMORY && !r->oom;
#if LIBCURL_VERSION_NUM >= 0x080600
        too_large = too_large || cc == CURLE_TOO_LARGE;
#endif
        if (too_large)
            return ctf__fail(err, CTF_EIO, w,
                             "the server's answer could not be taken in: a header line over "
                             "libcurl's limit (100 KB), or libcurl ran out of memory%s%s",
                             cerr[0] ? ": " : "", cerr);
        if (r->oom || cc == CURLE_OUT_OF_MEMORY)
            return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading %s", path);
        if (cc == CURLE_ABORTED_BY_CALLBACK || atomic_load(&rem->cancelled))
            return ctf__fail(err, CTF_ECANCELED, (ctf__where){path, 0, 0, offset},
                             "the request to %s was cancelled (the reader was closed or "
                             "interrupted)",
                             t->host);
        const char *why = NULL;
        char whybuf[300];
        if (cc == CURLE_TOO_MANY_REDIRECTS)
            return ctf__fail(err, CTF_EIO, w,
                             "more than %d redirects from %s (a redirect loop): the data is not "
                             "reachable there",
                             MAX_REDIRECTS, t->host);
        /* Bytes that are no HTTP answer (left on a reused connection by a broken server, or
         * a proxy's): the next try opens a fresh connection. */
        const bool not_http = cc == CURLE_WEIRD_SERVER_REPLY ||
                              (cc == CURLE_UNSUPPORTED_PROTOCOL && strstr(cerr, "HTTP/0.9"));
        if (not_http) {
            snprintf(whybuf, sizeof whybuf, "the server's answer is not HTTP (%s)",
                     cerr[0] ? cerr : curl_easy_strerror(cc));
            why = whybuf;
        } else if (cc == CURLE_COULDNT_RESOLVE_HOST || cc == CURLE_COULDNT_CONNECT ||
                   cc == CURLE_COULDNT_RESOLVE_PROXY || cc == CURLE_UNSUPPORTED_PROTOCOL ||
                   cc == CURLE_URL_MALFORMAT)
            return ctf__fail(err, CTF_EIO, (ctf__where){path, 0, 0, offset}, "cannot reach %s: %s",
                             t->host, cerr[0] ? cerr : curl_easy_strerror(cc));
        if (cc == CURLE_PEER_FAILED_VERIFICATION || cc == CURLE_SSL_CACERT_BADFILE)
            return ctf__fail(err, CTF_EIO, (ctf__where){path, 0, 0, offset},
                             "TLS with %s failed: %s", t->host,
                             cerr[0] ? cerr : curl_easy_strerror(cc));
        if (cc == CURLE_WRITE_ERROR && r->overflow && r->keep_body)
            return ctf__fail(err, CTF_ELIMIT, (ctf__where){path, 0, 0, offset},
                             "the server's answer is larger than %zu bytes", r->body_limit);
        if (why) {
            /* (not HTTP: retried below) */
        } else if (r->verdict == ANSWER_EIO || r->verdict == ANSWER_CHANGED) {
            if (r->verdict == ANSWER_CHANGED)
                return ctf__fail(err, CTF_ECHANGED, w,
                                 "the object changed since it was indexed: %s; reopen the reader",
                                 r->why);
            return ctf__fail(err, CTF_EIO, w, "%s", r->why);
        } else if (r->verdict == ANSWER_RETRY) {
            why = r->why;
        } else if (cc == CURLE_WRITE_ERROR && r->overflow && expect < 0) {
            cc = CURLE_OK; /* a probe that asked for the first byte only */
            r->overflow = false;
        }
        if (why) {
            /* retried */
        } else if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && r->overflow)) {
            if (!transient_curl(cc))
                return ctf__fail(err, CTF_EIO, (ctf__where){path, 0, 0, offset},
                                 "request to %s failed: %s", t->host,
                                 cerr[0] ? cerr : curl_easy_strerror(cc));
            snprintf(whybuf, sizeof whybuf, "%s", cerr[0] ? cerr : curl_easy_strerror(cc));
            why = whybuf;
        } else if (r->overflow) {
            why = "the server sent more bytes than the range asked for";
        } else if (r->status == 429 || r->status / 100 == 5) {
            snprintf(whybuf, sizeof whybuf, "HTTP %ld", r->status);
            why = whybuf;
        } else if (r->status / 100 != 2) {
            return final_error(rem, t, path, r->status, r, offset, err);
        } else if (expect >= 0 && r->got != (uint64_t)expect) {
            /* A short body: the connection closed early. */
            snprintf(whybuf, sizeof whybuf, "short body (%zu of %lld bytes)", r->got,
                     (long long)expect);
            why = whybuf;
        } else {
            return 0;
        }
        if (attempt + 1 >= tries)
            return ctf__fail(err, CTF_EIO, (ctf__where){path, 0, 0, offset},
                             "request failed after %u attempts: %s", tries, why);
        atomic_fetch_add(&rem->retries, 1);
        backoff(rem, attempt);
    }
}

/*======================================================================
 * The backend's entry points
 *====================================================================*/

/* A short hash of the ETag (FNV-1a), for the identity's mtime field. */
static int64_t etag_hash(const char *etag)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (const unsigned char *p = (const unsigned char *)etag; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return (int64_t)(h >> 1);
}

static int cmp_known(const void *a, const void *b)
{
    return strcmp(((const struct known_id *)a)->url, ((const struct known_id *)b)->url);
}

int ctf__http_stat(ctf__remote *rem, const char *url, ctf__file_id *id, ctf_error *err)
{
    memset(id, 0, sizeof *id);
    pthread_mutex_lock(&rem->mu);
    const struct known_id key = {(char *)url, {0}};
    const struct known_id *k = rem->num_known ? bsearch(&key, rem->known, rem->num_known,
                                                        sizeof key, cmp_known)
                                              : NULL;
    if (k) *id = k->id;
    pthread_mutex_unlock(&rem->mu);
    if (k) return 0;
    target t;
    int rc = resolve(rem, url, &t, err);
    if (rc) return rc;
    /* A one-byte range GET rather than HEAD: an error then comes with its code (HEAD has no
     * body), and Content-Range gives the size. A server that ignores ranges answers 200; the
     * transfer stops after the first byte. */
    char one;
    resp r = {.dst = &one, .dst_cap = 1, .body_limit = 16384};
    const request q = {"GET", "", "bytes=0-0", NULL, 0, 0, SIZE_UNKNOWN};
    rc = perform(rem, &t, url, &q, &r, -1, -1, err);
    content_range c;
    const ctf__where w = {url, 0, 0, -1};
    if (rc == CTF_EIO && r.status == 416) {
        /* No byte 0: an empty object, if the server says so (a total of 0), or when asked. */
        ctf__error_clear(err);
        if (r.ranged) {
            if (parse_content_range(r.content_range, &c) && c.unsatisfied && c.total == 0) {
                r.total = 0;
            } else {
                rc = ctf__fail(err, CTF_EIO, w,
                               "the server refused the object's first byte (HTTP 416, "
                               "Content-Range: %s)",
                               r.content_range);
            }
        } else {
            resp h = {.body_limit = 16384};
            const request hq = {"HEAD", "", NULL, NULL, 0, 0, SIZE_UNKNOWN};
            rc = perform(rem, &t, url, &hq, &h, -1, -1, err);
            if (!rc && !h.have_length)
                rc = ctf__fail(err, CTF_EIO, w,
                               "the server refused the object's first byte (HTTP 416) and gives "
                               "no size for it");
            else if (!rc && h.length != 0)
                rc = ctf__fail(err, CTF_EIO, w,
                               "the server refused the object's first byte (HTTP 416) although "
                               "it holds %llu bytes (HEAD)",
                               (unsigned long long)h.length);
            memcpy(r.etag, h.etag, sizeof r.etag);
            memcpy(r.last_modified, h.last_modified, sizeof r.last_modified);
            CTF_FREE(h.body);
            r.total = 0;
        }
    } else if (!rc && r.status == 206) {
        /* check_answer read it: bytes 0-0 and the total or a star. */
        parse_content_range(r.content_range, &c);
        if (!c.total_known)
            rc = ctf__fail(err, CTF_EIO, w,
                           "the server gave no size for the object (Content-Range: %s)",
                           r.content_range);
        r.total = c.total;
    } else if (!rc) {
        if (!r.have_length)
            rc = ctf__fail(err, CTF_EIO, w,
                           "the server gave no size for the object (HTTP %ld without "
                           "Content-Range or Content-Length)",
                           r.status);
        r.total = r.length;
    }
    CTF_FREE(r.body);
    if (rc) return rc;
    id->size = r.total;
    fp_of(&r, id->etag, sizeof id->etag);
    id->mtime_ns = etag_hash(id->etag);
    id->inode = 0;
    return 0;
}

int ctf__http_read(ctf__remote *rem, const char *url, const char *etag, void *buf, size_t n,
                   uint64_t offset, uint64_t size, ctf_error *err)
{
    if (n == 0) return 0;
    if (offset + n > size)
        return ctf__fail(err, CTF_ECHANGED, (ctf__where){url, 0, 0, (int64_t)size},
                         "file ended early (expected %zu more bytes): the object changed since "
                         "it was indexed",
                         (size_t)(offset + n - size));
    target t;
    int rc = resolve(rem, url, &t, err);
    if (rc) return rc;
    char range[64];
    snprintf(range, sizeof range, "bytes=%llu-%llu", (unsigned long long)offset,
             (unsigned long long)(offset + n - 1));
    resp r = {.dst = buf, .dst_cap = n, .body_limit = 16384};
    const request q = {"GET",          "",  range, etag && etag[0] ? etag : NULL, offset,
                       offset + n - 1, size};
    rc = perform(rem, &t, url, &q, &r, (int64_t)n, (int64_t)offset, err);
    CTF_FREE(r.body);
    return rc;
}

/* Undoes XML's five entities and numeric references in place. */
static void xml_unescape(char *s)
{
    char *w = s;
    for (const char *p = s; *p;) {
        if (*p != '&') {
            *w++ = *p++;
            continue;
        }
        static const struct {
            const char *e;
            char c;
        } ents[] = {{"&amp;", '&'},
                    {"&lt;", '<'},
                    {"&gt;", '>'},
                    {"&quot;", '"'},
                    {"&apos;", '\''}};
        bool done = false;
        for (size_t i = 0; i < 5 && !done; i++)
            if (!strncmp(p, ents[i].e, strlen(ents[i].e))) {
                *w++ = ents[i].c;
                p += strlen(ents[i].e);
                done = true;
            }
        if (!done && p[1] == '#') {
            char *end;
            unsigned long v = p[2] == 'x' ? strtoul(p + 3, &end, 16) : strtoul(p + 2, &end, 10);
            if (*end == ';' && v > 0 && v < 128) {
                *w++ = (char)v;
                p = end + 1;
                done = true;
            }
        }
        if (!done) *w++ = *p++;
    }
    *w = '\0';
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Keeps a listed object's identity (nothing when the entry lacks one, or memory is short:
 * the object is then asked at open). */
static void remember(ctf__remote *rem, const char *url, const char *etag, const char *size)
{
    if (!etag[0] || !size[0]) return;
    char *u = ctf__strdup(url);
    if (!u) return;
    pthread_mutex_lock(&rem->mu);
    if (ctf__grow((void **)&rem->known, &rem->cap_known, rem->num_known + 1, sizeof *rem->known)) {
        pthread_mutex_unlock(&rem->mu);
        CTF_FREE(u);
        return;
    }
    struct known_id *k = &rem->known[rem->num_known++];
    memset(k, 0, sizeof *k);
    k->url = u;
    k->id.size = strtoull(size, NULL, 10);
    etag_canon(etag, k->id.etag, sizeof k->id.etag);
    k->id.mtime_ns = etag_hash(k->id.etag);
    pthread_mutex_unlock(&rem->mu);
}

/* At most this many pages in one listing: 10 million keys at S3's 1,000 a page. A server
 * that hands out new tokens forever then ends in an error, not in a listing without end. */
#define CTF__LIST_MAX_PAGES 10000

/* Checks that a listing page is whole and says how the listing goes on: the document ends in
 * </ListBucketResult>, IsTruncated is "true" or "false", and a true one comes with a token.
 * @return : 0 with token filled ("" on the last page), or CTF_EIO naming the page. */
static int list_page_check(const resp *r, const char *url, const char *pattern, size_t page,
                           char *token, size_t cap, ctf_error *err)
{
    const ctf__where w = {pattern, 0, 0, -1};
    static const char close_tag[] = "</ListBucketResult>";
    size_t n = r->body ? r->body_len : 0;
    while (n && strchr(" \t\r\n", r->body[n - 1])) n--;
    const size_t cl = sizeof close_tag - 1;
    if (n < cl || memcmp(r->body + n - cl, close_tag, cl) != 0 ||
        !strstr(r->body, "<ListBucketResult"))
        return ctf__fail(err, CTF_EIO, w,
                         "page %zu of the listing of %s is cut short (%zu bytes, no closing "
                         "</ListBucketResult>): objects may be missing",
                         page, url, r->body_len);
    char trunc[16];
    xml_field(r->body, "IsTruncated", trunc, sizeof trunc);
    if (strcmp(trunc, "true") != 0 && strcmp(trunc, "false") != 0)
        return ctf__fail(err, CTF_EIO, w,
                         "page %zu of the listing of %s has no IsTruncated true or false: "
                         "objects may be missing",
                         page, url);
    token[0] = '\0';
    if (strcmp(trunc, "true") != 0) return 0;
    xml_field(r->body, "NextContinuationToken", token, cap);
    if (strlen(token) >= cap - 1)
        return ctf__fail(err, CTF_ELIMIT, w,
                         "page %zu of the listing of %s gives a continuation token longer "
                         "than %zu bytes",
                         page, url, cap - 2);
    xml_unescape(token);
    if (!token[0])
        return ctf__fail(err, CTF_EIO, w,
                         "page %zu of the listing of %s says more follows (IsTruncated true) "
                         "but gives no NextContinuationToken",
                         page, url);
    return 0;
}

int ctf__http_glob(ctf__remote *rem, const char *pattern, char ***out, size_t *num, ctf_error *err)
{
    *out = NULL;
    *num = 0;
    if (strncmp(pattern, "s3://", 5) != 0)
        return ctf__fail(err, CTF_EINVAL, (ctf__where){pattern, 0, 0, -1},
                         "a pattern over http(s) cannot be expanded (HTTP has no listing); use "
                         "s3:// or name the files");
    target t;
    int rc = resolve(rem, pattern, &t, err);
    if (rc) return rc;
    const char *kpat = t.key;
    /* The listing: the bucket's path, the literal prefix of the key pattern. */
    target lt = t;
    if (rem->endpoint) {
        snprintf(lt.canon_uri, sizeof lt.canon_uri, "/%s", t.bucket);
        snprintf(lt.url, sizeof lt.url, "%s/%s", rem->endpoint, t.bucket);
    } else {
        snprintf(lt.canon_uri, sizeof lt.canon_uri, "/");
        snprintf(lt.url, sizeof lt.url, "https://%s/", t.host);
    }
    char prefix[1024], eprefix[3200], token[1024], etoken[3200], query[8192];
    size_t pl = strcspn(kpat, "*?[");
    if (pl >= sizeof prefix) pl = sizeof prefix - 1;
    memcpy(prefix, kpat, pl);
    prefix[pl] = '\0';
    ctf__uri_encode(prefix, false, eprefix, sizeof eprefix);
    token[0] = '\0';
    char **v = NULL;
    size_t len = 0, cap = 0;
    /* The tokens sent so far: a server that hands one out twice would be listed forever. */
    char **used = NULL;
    size_t num_used = 0, cap_used = 0;
    for (size_t page = 1;; page++) {
        if (page > CTF__LIST_MAX_PAGES) {
            rc = ctf__fail(err, CTF_ELIMIT, (ctf__where){pattern, 0, 0, -1},
                           "the listing of %s goes on past %d pages (%d million keys at 1,000 "
                           "a page); name a longer literal prefix before the pattern's first "
                           "wildcard",
                           lt.url, CTF__LIST_MAX_PAGES, CTF__LIST_MAX_PAGES / 1000);
            goto fail;
        }
        /* Sorted by name, as signing wants. */
        if (token[0]) {
            ctf__uri_encode(token, false, etoken, sizeof etoken);
            snprintf(query, sizeof query, "continuation-token=%s&list-type=2&prefix=%s", etoken,
                     eprefix);
        } else {
            snprintf(query, sizeof query, "list-type=2&prefix=%s", eprefix);
        }
        resp r = {.keep_body = true, .body_limit = (size_t)64 << 20};
        const request q = {"GET", query, NULL, NULL};
        rc = perform(rem, &lt, pattern, &q, &r, -1, -1, err);
        if (!rc) rc = list_page_check(&r, lt.url, pattern, page, token, sizeof token, err);
        if (!rc && token[0]) {
            for (size_t i = 0; i < num_used && !rc; i++)
                if (!strcmp(used[i], token))
                    rc = ctf__fail(err, CTF_EIO, (ctf__where){pattern, 0, 0, -1},
                                   "page %zu of the listing of %s gives the continuation token "
                                   "of page %zu again: the listing would never end",
                                   page, lt.url, i + 1);
            char *tk = rc ? NULL : ctf__strdup(token);
            if (!rc && (!tk || ctf__grow((void **)&used, &cap_used, num_used + 1, sizeof *used))) {
                CTF_FREE(tk);
                CTF_FREE(r.body);
                goto oom;
            }
            if (!rc) used[num_used++] = tk;
        }
        if (rc) {
            CTF_FREE(r.body);
            goto fail;
        }
        char *p = r.body;
        while ((p = strstr(p, "<Key>")) != NULL) {
            p += 5;
            char *e = strstr(p, "</Key>");
            if (!e) {
                CTF_FREE(r.body);
                rc = ctf__fail(err, CTF_EIO, (ctf__where){pattern, 0, 0, -1},
                               "page %zu of the listing of %s is malformed (a <Key> without "
                               "</Key>)",
                               page, lt.url);
                goto fail;
            }
            size_t kl = (size_t)(e - p);
            char *key = CTF_MALLOC(kl + 1);
            if (!key) {
                CTF_FREE(r.body);
                goto oom;
            }
            memcpy(key, p, kl);
            key[kl] = '\0';
            xml_unescape(key);
            if (fnmatch(kpat, key, FNM_PATHNAME) == 0) {
                size_t ul = 5 + strlen(t.bucket) + 1 + strlen(key) + 1;
                char *u = CTF_MALLOC(ul);
                if (!u || ctf__grow((void **)&v, &cap, len + 1, sizeof *v)) {
                    CTF_FREE(u);
                    CTF_FREE(key);
                    CTF_FREE(r.body);
                    goto oom;
                }
                snprintf(u, ul, "s3://%s/%s", t.bucket, key);
                v[len++] = u;
                /* The entry's ETag and size, for ctf__http_stat. */
                char *end = strstr(e, "</Contents>");
                if (end) {
                    *end = '\0';
                    char etag[CTF__ETAG_MAX], size[32];
                    xml_field(e, "ETag", etag, sizeof etag);
                    xml_field(e, "Size", size, sizeof size);
                    xml_unescape(etag);
                    *end = '<';
                    remember(rem, u, etag, size);
                }
            }
            CTF_FREE(key);
            p = e + 6;
        }
        CTF_FREE(r.body);
        if (!token[0]) break;
    }
    if (len == 0) {
        rc = ctf__fail(err, CTF_EIO, (ctf__where){pattern, 0, 0, -1},
                       "no object matches the pattern");
        goto fail;
    }
    /* Byte-wise, as for local patterns. */
    qsort(v, len, sizeof *v, cmp_str);
    /* A key listed twice (on one page or two) would be read twice in every sweep. */
    for (size_t i = 1; i < len; i++)
        if (!strcmp(v[i - 1], v[i])) {
            rc = ctf__fail(err, CTF_EIO, (ctf__where){pattern, 0, 0, -1},
                           "the listing of %s names the key '%s' twice: the server's answer is "
                           "not a listing one can trust",
                           lt.url, v[i] + 5 + strlen(t.bucket) + 1);
            goto fail;
        }
    for (size_t i = 0; i < num_used; i++) CTF_FREE(used[i]);
    CTF_FREE(used);
    pthread_mutex_lock(&rem->mu);
    if (rem->num_known) qsort(rem->known, rem->num_known, sizeof *rem->known, cmp_known);
    pthread_mutex_unlock(&rem->mu);
    *out = v;
    *num = len;
    return 0;
oom:
    rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory listing %s", pattern);
fail:
    for (size_t i = 0; i < len; i++) CTF_FREE(v[i]);
    CTF_FREE(v);
    for (size_t i = 0; i < num_used; i++) CTF_FREE(used[i]);
    CTF_FREE(used);
    return rc;
}

#endif /* CTF_HAVE_CURL */
