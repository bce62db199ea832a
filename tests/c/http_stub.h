/*
 * http_stub.h -- a raw-socket HTTP server for the remote-backend tests, on 127.0.0.1 only. It
 * runs on a thread of its own, one connection at a time (keep-alive), and answers each request
 * with what the test's function says (a crafted ListObjectsV2 page, say), or, in hang mode,
 * accepts connections and never answers them. Every loop is bounded: the server stops answering
 * after max_requests, each wait polls in 50 ms steps, and stub_stop ends it. hang_after turns
 * it to hang mode after that many requests (the one that reaches it is read, never answered).
 */
#ifndef CTF_HTTP_STUB_H
#define CTF_HTTP_STUB_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct stub stub;

/* Fills body (cap bytes, text) and extra header lines (hdrs, "Name: value\r\n" each, hcap
 * bytes, "" before the call) for the request whose head is req (request line and headers);
 * returns the HTTP status. */
typedef int (*stub_answer_fn)(stub *s, const char *req, char *hdrs, size_t hcap, char *body,
                              size_t cap);

struct stub {
    int lfd;                  /* the listening socket */
    int port;
    atomic_bool hang;         /* accept, read nothing, answer nothing */
    unsigned max_requests;    /* answered at most; later ones get a closed connection */
    atomic_uint hang_after;   /* requests answered before the server turns to hang mode */
    stub_answer_fn answer;
    void *user;               /* the test's state */
    atomic_int stop;
    atomic_uint requests;     /* requests read (hang mode: connections accepted) */
    pthread_t thread;
    int held[64];             /* hang mode: the connections kept open */
    size_t num_held;
    char *body;               /* the answer's buffer */
    size_t body_cap;
};

/* Waits (in 50 ms steps, while the server runs) for fd to be readable. */
static inline int stub_wait(stub *s, int fd, int ms)
{
    for (int t = 0; t < ms && !atomic_load(&s->stop); t += 50) {
        struct pollfd p = {fd, POLLIN, 0};
        int n = poll(&p, 1, 50);
        if (n > 0) return 1;
        if (n < 0) return -1;
    }
    return 0;
}

/* Serves one connection until the client closes it (or the server stops). @return : true
 * when the connection is to be held open unanswered (hang mode began on it). */
static inline bool stub_serve(stub *s, int fd)
{
    char req[16384];
    size_t have = 0;
    for (;;) {
        char *end = NULL;
        while (!(end = memmem(req, have, "\r\n\r\n", 4))) {
            if (have == sizeof req - 1 || stub_wait(s, fd, 5000) <= 0) return false;
            ssize_t n = read(fd, req + have, sizeof req - 1 - have);
            if (n <= 0) return false;
            have += (size_t)n;
        }
        const size_t len = (size_t)(end - req) + 4;
        char head[8192];
        size_t ll = len < sizeof head ? len : sizeof head - 1;
        memcpy(head, req, ll);
        head[ll] = '\0';
        memmove(req, req + len, have - len);
        have -= len;
        const unsigned k = atomic_fetch_add(&s->requests, 1);
        if (k >= s->max_requests) return false;
        if (k >= atomic_load(&s->hang_after)) {
            atomic_store(&s->hang, true);
            return true;
        }
        /* The answer after room for its head: one write (two would wait for a delayed ACK). */
        char *const body = s->body + 4096;
        char hdrs[2048] = "";
        int status = s->answer(s, head, hdrs, sizeof hdrs, body, s->body_cap - 4096);
        size_t bl = strlen(body);
        char top[4096];
        int hl = snprintf(top, sizeof top,
                          "HTTP/1.1 %d X\r\nContent-Type: application/xml\r\n%s"
                          "Content-Length: %zu\r\n\r\n",
                          status, hdrs, bl);
        memcpy(body - hl, top, (size_t)hl);
        if (write(fd, body - hl, (size_t)hl + bl) != (ssize_t)((size_t)hl + bl)) return false;
    }
}

static inline void *stub_main(void *arg)
{
    stub *s = arg;
    while (!atomic_load(&s->stop)) {
        if (stub_wait(s, s->lfd, 100) <= 0) continue;
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0) continue;
        if (atomic_load(&s->hang)) {
            atomic_fetch_add(&s->requests, 1);
        } else if (!stub_serve(s, fd)) {
            close(fd);
            continue;
        }
        if (s->num_held < sizeof s->held / sizeof s->held[0])
            s->held[s->num_held++] = fd;
        else
            close(fd);
    }
    for (size_t i = 0; i < s->num_held; i++) close(s->held[i]);
    return NULL;
}

/* Starts the server on an ephemeral port of 127.0.0.1. @return : 0, or -1. */
static inline int stub_start(stub *s, stub_answer_fn answer, void *user, bool hang)
{
    memset(s, 0, sizeof *s);
    s->answer = answer;
    s->user = user;
    atomic_init(&s->hang, hang);
    atomic_init(&s->hang_after, ~0u);
    s->max_requests = 20000;
    s->body_cap = 1 << 20;
    if (!(s->body = malloc(s->body_cap))) return -1;
    s->lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (s->lfd < 0) return -1;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (bind(s->lfd, (struct sockaddr *)&a, sizeof a) || listen(s->lfd, 64) ||
        getsockname(s->lfd, (struct sockaddr *)&a, &al)) {
        close(s->lfd);
        return -1;
    }
    s->port = ntohs(a.sin_port);
    if (pthread_create(&s->thread, NULL, stub_main, s)) {
        close(s->lfd);
        return -1;
    }
    return 0;
}

static inline void stub_stop(stub *s)
{
    atomic_store(&s->stop, 1);
    pthread_join(s->thread, NULL);
    close(s->lfd);
    free(s->body);
}

/* The value of name=... in a request line's query, or "" (out holds at most cap - 1 chars). */
static inline void stub_query(const char *req, const char *name, char *out, size_t cap)
{
    out[0] = '\0';
    const char *q = strchr(req, '?');
    size_t nl = strlen(name);
    for (const char *p = q; p && *p; p = strchr(p + 1, '&')) {
        if (strncmp(p + 1, name, nl) || p[1 + nl] != '=') continue;
        size_t n = strcspn(p + 2 + nl, "& ");
        if (n >= cap) n = cap - 1;
        memcpy(out, p + 2 + nl, n);
        out[n] = '\0';
        return;
    }
}

#endif /* CTF_HTTP_STUB_H */
