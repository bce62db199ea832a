/*
 * test_cancel.c -- a server that stops answering is not waited for: against a raw-socket server
 * on 127.0.0.1 (http_stub.h) that accepts and never answers, a cancelled request returns
 * CTF_ECANCELED at once and is never retried, and a reader whose next() is stuck in a chunk
 * load returns CTF_ECANCELED after ctf_reader_cancel from another thread, and frees at once.
 * The requests' own timeouts are long (30 s, retried 5 times), so a wait for them would show.
 */

#include "test.h"

#include "http_stub.h"
#include "io/io.h"

#include <time.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Waits (at most 10 s) until the stub has read more than n requests. */
static bool wait_requests(stub *s, unsigned n)
{
    for (int i = 0; i < 1000 && atomic_load(&s->requests) <= n; i++) {
        struct timespec ts = {0, 10000000L};
        nanosleep(&ts, NULL);
    }
    return atomic_load(&s->requests) > n;
}

static int never(stub *s, const char *req, char *hdrs, size_t hcap, char *body, size_t cap)
{
    (void)s, (void)req, (void)hdrs, (void)hcap;
    snprintf(body, cap, "unused");
    return 500;
}

static void slow_options(ctf_remote_options *o, char *ep, size_t cap, int port)
{
    memset(o, 0, sizeof *o);
    snprintf(ep, cap, "http://127.0.0.1:%d", port);
    o->endpoint = ep;
    o->max_retries = 5;
    o->timeout_ms = 30000;
    o->backoff_ms = 1000;
}

typedef struct {
    ctf__remote *rem;
    int rc;
    ctf_error err;
} stat_job;

static void *stat_main(void *arg)
{
    stat_job *j = arg;
    ctf__file_id id;
    j->rc = ctf__io_stat(j->rem, "s3://b/x.ctf", &id, &j->err);
    return NULL;
}

TEST(cancel_stops_a_stuck_request_without_retrying)
{
    stub s;
    ASSERT_EQ(stub_start(&s, never, NULL, true), 0);
    char ep[64];
    ctf_remote_options o;
    slow_options(&o, ep, sizeof ep, s.port);
    stat_job j = {0};
    ctf_error err;
    ASSERT_EQ(ctf__remote_new(&o, &j.rem, &err), 0);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, stat_main, &j), 0);
    const bool stuck = wait_requests(&s, 0); /* the connection is accepted, never answered */
    const double t0 = now_s();
    ctf__remote_cancel(j.rem);
    pthread_join(th, NULL);
    const double waited = now_s() - t0;
    ctf_io_counters c;
    ctf__remote_counters(j.rem, &c);
    /* Later requests fail at once, without a connection. */
    ctf__file_id id;
    ctf_error e2;
    const int rc2 = ctf__io_stat(j.rem, "s3://b/y.ctf", &id, &e2);
    ctf__remote_unref(j.rem);
    stub_stop(&s);
    ASSERT(stuck);
    ASSERT_EQ(j.rc, CTF_ECANCELED);
    ASSERT(strstr(j.err.message, "was cancelled"));
    ASSERT_STR_EQ(j.err.path, "s3://b/x.ctf");
    ASSERT_U64_EQ(c.requests, 1);
    ASSERT_U64_EQ(c.retries, 0);
    ASSERT_EQ(atomic_load(&s.requests), 1);
    ASSERT_EQ(rc2, CTF_ECANCELED);
    ASSERT(waited < 5.0); /* not the 30 s timeout */
}

/* A CTF text of 3000 one-line sequences, served by range requests until hang mode. */
static char served[1 << 17];
static size_t served_len;

static int ranges(stub *s, const char *req, char *hdrs, size_t hcap, char *body, size_t cap)
{
    (void)s;
    const char *r = strstr(req, "\r\nRange: bytes=");
    unsigned long long a = 0, b = served_len - 1;
    if (r) sscanf(r + 15, "%llu-%llu", &a, &b);
    if (b >= served_len) b = served_len - 1;
    if (a >= served_len || b - a + 1 >= cap) {
        snprintf(hdrs, hcap, "Content-Range: bytes */%zu\r\n", served_len);
        body[0] = '\0';
        return 416;
    }
    memcpy(body, served + a, b - a + 1);
    body[b - a + 1] = '\0';
    snprintf(hdrs, hcap, "ETag: \"v1\"\r\nContent-Range: bytes %llu-%llu/%zu\r\n", a, b,
             served_len);
    return 206;
}

typedef struct {
    ctf_reader *r;
    int rc;
    unsigned calls;
} next_job;

static void *next_main(void *arg)
{
    next_job *j = arg;
    for (j->calls = 0; j->calls < 100000; j->calls++) {
        ctf_minibatch *mb = NULL;
        j->rc = ctf_reader_next(j->r, 50, &mb);
        ctf_minibatch_free(mb);
        if (j->rc || !mb) break;
    }
    return NULL;
}

TEST(cancel_ends_a_next_stuck_in_a_chunk_load)
{
    served_len = 0;
    for (int i = 0; i < 3000; i++)
        served_len += (size_t)snprintf(served + served_len, sizeof served - served_len,
                                       "%d |a %d %d\n", i, i % 7, i % 11);
    static const ctf_stream_def st[] = {{"a", NULL, 2, false, false}};
    stub s;
    ASSERT_EQ(stub_start(&s, ranges, NULL, false), 0);
    char ep[64];
    ctf_config cfg;
    ctf_config_init(&cfg);
    slow_options(&cfg.remote, ep, sizeof ep, s.port);
    cfg.path = "s3://b/data.ctf";
    cfg.streams = st;
    cfg.num_streams = 1;
    cfg.chunk_size_bytes = 1024;
    cfg.randomization_window = 4;
    cfg.num_threads = 2;
    ctf_reader *r = NULL;
    ctf_error err;
    const int orc = ctf_reader_open(&cfg, &r, &err);
    /* From here on the server reads requests and answers none. */
    const unsigned opened = atomic_load(&s.requests);
    atomic_store(&s.hang_after, opened);
    next_job j = {r, 0, 0};
    pthread_t th;
    bool stuck = false, started = false;
    if (!orc) {
        started = pthread_create(&th, NULL, next_main, &j) == 0;
        stuck = wait_requests(&s, opened);
    }
    ctf_io_counters before, after;
    if (r) ctf_reader_get_io_counters(r, &before);
    const double t0 = now_s();
    ctf_reader_cancel(r);
    if (started) pthread_join(th, NULL);
    const double waited = now_s() - t0;
    char msg[CTF_ERROR_MSG_MAX] = "";
    if (r) {
        ctf_reader_get_io_counters(r, &after);
        snprintf(msg, sizeof msg, "%s", ctf_reader_error(r)->message);
    }
    const double t1 = now_s();
    ctf_reader_free(r);
    const double freed = now_s() - t1;
    stub_stop(&s);
    ASSERT_EQ(orc, 0);
    ASSERT(stuck);
    ASSERT_EQ(j.rc, CTF_ECANCELED);
    ASSERT(strstr(msg, "was cancelled"));
    ASSERT_U64_EQ(after.retries, before.retries); /* a cancelled request is not retried */
    ASSERT(waited < 5.0);
    ASSERT(freed < 5.0);
}
