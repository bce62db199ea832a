/*
 * test_listing.c -- ListObjectsV2 answers are checked, not trusted: a raw-socket server on
 * 127.0.0.1 (http_stub.h) serves crafted listing pages to ctf__io_glob. A whole two-page listing
 * gives its keys; a page cut short, a true IsTruncated without a token, a token handed out
 * twice, a key listed twice and a listing without end are each an error naming the page, after
 * a counted number of requests.
 */

#include "test.h"

#include "http_stub.h"
#include "io/io.h"

enum {
    GOOD,        /* two pages, three keys */
    CUT,         /* one page without IsTruncated and without its closing tag */
    CUT_LATE,    /* IsTruncated false first (as S3 orders it), then cut inside Contents */
    NO_TOKEN,    /* IsTruncated true, no NextContinuationToken */
    REPEAT,      /* t1 -> t2 -> t1 ... */
    DUP_PAGES,   /* d/b.ctf on both pages */
    DUP_PAGE,    /* d/a.ctf twice on one page */
    ENDLESS,     /* a new token on every page */
};

typedef struct {
    int mode;
} plan;

/* A page of keys (comma-separated), with IsTruncated and the token when given. */
static void page(char *body, size_t cap, const char *keys, const char *trunc, const char *token)
{
    size_t n = (size_t)snprintf(body, cap,
                                "<?xml version=\"1.0\"?>\n<ListBucketResult><Name>b"
                                "</Name>");
    if (trunc) n += (size_t)snprintf(body + n, cap - n, "<IsTruncated>%s</IsTruncated>", trunc);
    if (token)
        n += (size_t)snprintf(body + n, cap - n,
                              "<NextContinuationToken>%s</NextContinuationToken>", token);
    for (const char *k = keys; *k;) {
        size_t kl = strcspn(k, ",");
        n += (size_t)snprintf(body + n, cap - n,
                              "<Contents><Key>%.*s</Key><ETag>&quot;e1&quot;</ETag>"
                              "<Size>9</Size></Contents>",
                              (int)kl, k);
        k += kl + (k[kl] == ',');
    }
    snprintf(body + n, cap - n, "</ListBucketResult>\n");
}

static int answer(stub *s, const char *req, char *hdrs, size_t hcap, char *body, size_t cap)
{
    (void)hdrs, (void)hcap;
    const plan *p = s->user;
    char tok[256];
    stub_query(req, "continuation-token", tok, sizeof tok);
    const bool first = !tok[0];
    switch (p->mode) {
    case GOOD:
        if (first)
            page(body, cap, "d/a.ctf,d/b.ctf,d/x.txt", "true", "t1");
        else
            page(body, cap, "d/c.ctf", "false", NULL);
        break;
    case CUT:
        snprintf(body, cap,
                 "<?xml version=\"1.0\"?>\n<ListBucketResult><Name>b</Name>"
                 "<Contents><Key>d/a.ctf</Key><Size>9</Size></Contents>");
        break;
    case CUT_LATE:
        page(body, cap, "d/a.ctf,d/b.ctf", "false", NULL);
        body[strlen(body) / 2 + 10] = '\0';
        break;
    case NO_TOKEN: page(body, cap, first ? "d/a.ctf" : "d/z.ctf", "true", NULL); break;
    case REPEAT:
        if (first)
            page(body, cap, "d/a.ctf", "true", "t1");
        else if (!strcmp(tok, "t1"))
            page(body, cap, "d/b.ctf", "true", "t2");
        else
            page(body, cap, "d/c.ctf", "true", "t1");
        break;
    case DUP_PAGES:
        if (first)
            page(body, cap, "d/a.ctf,d/b.ctf", "true", "t1");
        else
            page(body, cap, "d/b.ctf,d/c.ctf", "false", NULL);
        break;
    case DUP_PAGE: page(body, cap, "d/a.ctf,d/a.ctf,d/b.ctf", "false", NULL); break;
    case ENDLESS: {
        char next[32];
        unsigned k = first ? 0 : (unsigned)strtoul(tok + 1, NULL, 10);
        char key[32];
        snprintf(next, sizeof next, "t%u", k + 1);
        snprintf(key, sizeof key, "d/k%07u.ctf", k);
        page(body, cap, key, "true", next);
        break;
    }
    }
    return 200;
}

typedef struct {
    int rc;
    ctf_error err;
    unsigned requests;
    size_t n;
    char **urls;
} listed;

/* Lists s3://b/d/ *.ctf from a stub serving mode (no retries: each page is asked once). */
static listed list(int mode)
{
    listed L = {0};
    plan p = {mode};
    stub s;
    if (stub_start(&s, answer, &p, false)) {
        L.rc = 1;
        return L;
    }
    char ep[64];
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", s.port);
    ctf_remote_options o = {0};
    o.endpoint = ep;
    o.max_retries = 0;
    o.timeout_ms = 10000;
    ctf__remote *rem = NULL;
    L.rc = ctf__remote_new(&o, &rem, &L.err);
    if (!L.rc) L.rc = ctf__io_glob(rem, "s3://b/d/*.ctf", &L.urls, &L.n, &L.err);
    ctf__remote_unref(rem);
    stub_stop(&s);
    L.requests = atomic_load(&s.requests);
    return L;
}

static void listed_free(listed *L)
{
    for (size_t i = 0; i < L->n; i++) free(L->urls[i]);
    free(L->urls);
}

TEST(listing_whole_pages_give_every_key_once)
{
    listed L = list(GOOD);
    ASSERT_EQ(L.rc, 0);
    ASSERT_EQ(L.requests, 2);
    ASSERT_EQ(L.n, 3);
    ASSERT_STR_EQ(L.urls[0], "s3://b/d/a.ctf");
    ASSERT_STR_EQ(L.urls[2], "s3://b/d/c.ctf");
    listed_free(&L);
}

TEST(listing_cut_short_is_an_error)
{
    for (int mode = CUT; mode <= CUT_LATE; mode++) {
        listed L = list(mode);
        ASSERT_EQ(L.rc, CTF_EIO);
        ASSERT_EQ(L.requests, 1);
        ASSERT_EQ(L.n, 0);
        ASSERT(strstr(L.err.message, "page 1 of the listing of http://127.0.0.1:"));
        ASSERT(strstr(L.err.message, "/b is cut short"));
        ASSERT_STR_EQ(L.err.path, "s3://b/d/*.ctf");
    }
}

TEST(listing_truncated_without_token_is_an_error)
{
    listed L = list(NO_TOKEN);
    ASSERT_EQ(L.rc, CTF_EIO);
    ASSERT_EQ(L.requests, 1);
    ASSERT(strstr(L.err.message, "page 1 of the listing"));
    ASSERT(strstr(L.err.message, "gives no NextContinuationToken"));
}

TEST(listing_repeated_token_is_an_error)
{
    listed L = list(REPEAT);
    ASSERT_EQ(L.rc, CTF_EIO);
    ASSERT_EQ(L.requests, 3);
    ASSERT(strstr(L.err.message, "page 3 of the listing"));
    ASSERT(strstr(L.err.message, "token of page 1 again"));
}

TEST(listing_key_listed_twice_is_an_error)
{
    for (int mode = DUP_PAGES; mode <= DUP_PAGE; mode++) {
        listed L = list(mode);
        ASSERT_EQ(L.rc, CTF_EIO);
        ASSERT_EQ(L.requests, mode == DUP_PAGES ? 2 : 1);
        ASSERT_EQ(L.n, 0);
        ASSERT(strstr(L.err.message,
                      mode == DUP_PAGES ? "key 'd/b.ctf' twice" : "key 'd/a.ctf' twice"));
    }
}

TEST(listing_pages_are_bounded)
{
    listed L = list(ENDLESS);
    ASSERT_EQ(L.rc, CTF_ELIMIT);
    ASSERT_EQ(L.requests, 10000);
    ASSERT(strstr(L.err.message, "past 10000 pages"));
}
