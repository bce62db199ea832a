/*
 * test_tokenize.c -- the parser's structural pass (lib/tokenize.h), unit by unit:
 *  - ctf__classify against a byte-by-byte reference on random blocks of every byte class;
 *  - ctf__walk (the values of a sample, and its end) against a byte loop, values up to 200 bytes
 *    long (open across blocks, filling a block from its first byte);
 *  - ctf__tok_float / ctf__tok_double against the full converter (number.c, itself checked
 *    bit for bit against strtof / strtod in test_number.c): same acceptance, same bits, for
 *    every short shape the fast path takes or refuses (signs, '.' anywhere, 1..10 digits, a
 *    stray byte), with room to read ahead and without (the fallback at a buffer's end).
 * CTFIO_NUMBER_ITERATIONS scales the random part (default 2,000,000 tokens of each precision;
 * 200,000,000 is a long soak).
 */
#include "ctfio_internal.h"
#include "test.h"
#include "tokenize.h"

#include <stdio.h>
#include <stdlib.h>

#if CTF_TOKENIZE

static uint64_t tk_state = 0x243F6A8885A308D3ULL;

static uint64_t tk_next(void) /* splitmix64 */
{
    uint64_t z = (tk_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static unsigned tk_below(unsigned n) { return (unsigned)(tk_next() % n); }

static bool ref_delim(unsigned char c) { return (c <= ' ' && c != '\n') || c == 127; }

TEST(tokenize_classify_matches_bytes)
{
    static const char pool[] = " \t\r\n\x0b\x01\x7f|:.-+0123456789eE#xa\x80\xff";
    char buf[64 + 80];
    for (int it = 0; it < 200000; it++) {
        const size_t n = 1 + tk_below(64);
        /* limit: sometimes exactly n bytes (the copy path), sometimes room for 64 */
        const size_t room = tk_below(2) ? n : 64 + tk_below(16);
        for (size_t i = 0; i < room; i++) buf[i] = pool[tk_below(sizeof pool - 1)];
        ctf__block b = ctf__classify(buf, n, buf + room);
        for (size_t i = 0; i < 64; i++) {
            const unsigned char c = (unsigned char)buf[i];
            const bool in = i < n;
            const bool tok = in && !ref_delim(c) && c != '|';
            const bool bar = in && c == '|';
            if (((b.tok >> i) & 1) != tok || ((b.bar >> i) & 1) != bar) {
                char msg[128];
                snprintf(msg, sizeof msg, "byte %zu (0x%02x) of %zu: tok %d bar %d", i, c, n,
                         (int)((b.tok >> i) & 1), (int)((b.bar >> i) & 1));
                test_fail(__FILE__, __LINE__, "classify matches the byte classes", msg);
                return;
            }
        }
    }
}

/* ctf__walk against a byte loop: the same values (start, end) and the same sample end, on random
 * samples of short and long values (up to 200 bytes: across one and several blocks, filling a
 * block from its first byte), every delimiter, '|' anywhere, with and without read-ahead room. */
TEST(tokenize_walk_matches_bytes)
{
    static const char vbytes[] = "0123456789.-+e:x\x80";
    static const char dbytes[] = " \t\r\x0b\x01\x7f";
    char buf[1200];
    for (int it = 0; it < 20000; it++) {
        size_t n = 0, cap = 900 + tk_below(100);
        while (n < cap) {
            const unsigned r = tk_below(100);
            size_t len = r < 80 ? 1 + tk_below(12) : r < 95 ? 60 + tk_below(10) : 64 + tk_below(140);
            for (size_t k = 0; k < len && n < cap; k++) buf[n++] = vbytes[tk_below(sizeof vbytes - 1)];
            size_t gap = 1 + tk_below(3);
            for (size_t k = 0; k < gap && n < cap; k++) buf[n++] = dbytes[tk_below(sizeof dbytes - 1)];
            if (tk_below(200) == 0 && n < cap) buf[n++] = '|';
        }
        const size_t start = tk_below(70), end = start + tk_below((unsigned)(n - start) + 1);
        const size_t room = tk_below(2) ? end : n;
        /* reference: the byte loop */
        const char *rs[1200], *re[1200];
        size_t nr = 0, i = start;
        const char *rstop = buf + end;
        while (i < end) {
            const unsigned char c = (unsigned char)buf[i];
            if (c == '|') {
                rstop = buf + i;
                break;
            }
            if (ref_delim(c)) {
                i++;
                continue;
            }
            size_t j = i;
            while (j < end && !ref_delim((unsigned char)buf[j]) && buf[j] != '|') j++;
            rs[nr] = buf + i;
            re[nr++] = buf + j;
            i = j;
        }
        ctf__walk w;
        const char *s, *e;
        size_t k = 0;
        ctf__walk_init(&w, buf + start, buf + end, buf + room);
        bool same = true;
        while (ctf__walk_next(&w, &s, &e)) {
            if (k >= nr || s != rs[k] || e != re[k]) {
                same = false;
                break;
            }
            k++;
        }
        if (!same || k != nr || w.stop != rstop) {
            char msg[160];
            snprintf(msg, sizeof msg, "iteration %d: value %zu of %zu (start %zu, end %zu), stop %td vs %td",
                     it, k, nr, start, end, w.stop - buf, rstop - buf);
            test_fail(__FILE__, __LINE__, "walk matches the byte loop", msg);
            return;
        }
    }
}

/* A random short token: the shapes around the fast path's edges. */
static size_t gen_token(char *o)
{
    size_t n = 0;
    const unsigned sign = tk_below(6);
    if (sign == 0) o[n++] = '-';
    if (sign == 1) o[n++] = '+';
    if (sign == 2 && tk_below(8) == 0) o[n++] = '-'; /* "--1" sometimes */
    const unsigned digits = tk_below(11);            /* 0..10 */
    const unsigned dot = tk_below(digits + 3);       /* > digits: none */
    for (unsigned i = 0; i <= digits; i++) {
        if (i == dot) o[n++] = '.';
        if (i < digits) o[n++] = (char)('0' + (tk_below(4) ? tk_below(10) : tk_below(2) * 9));
    }
    if (tk_below(12) == 0) o[n++] = '.'; /* "1..2", "1.2." */
    if (tk_below(16) == 0) {
        static const char stray[] = "eE:x#\x80";
        o[tk_below((unsigned)n + 1)] = stray[tk_below(sizeof stray - 1)];
        if (n == 0) n = 1;
    }
    if (n == 0) o[n++] = '0';
    return n;
}

static bool check_token(const char *s, size_t len, const char *limit, char *msg, size_t cap)
{
    float f1 = 0, f2 = 0;
    double d1 = 0, d2 = 0;
    const char *end = s + len;
    bool a1 = ctf__tok_float(s, len, end, limit, &f1);
    const char *q = ctf__parse_float(s, end, &f2);
    bool a2 = q == end;
    bool b1 = ctf__tok_double(s, len, end, limit, &d1);
    const char *r = ctf__parse_double(s, end, &d2);
    bool b2 = r == end;
    uint32_t u1, u2;
    uint64_t v1, v2;
    memcpy(&u1, &f1, 4);
    memcpy(&u2, &f2, 4);
    memcpy(&v1, &d1, 8);
    memcpy(&v2, &d2, 8);
    if (a1 == a2 && (!a1 || u1 == u2) && b1 == b2 && (!b1 || v1 == v2)) return true;
    snprintf(msg, cap, "'%.*s': float %s %08x vs converter %s %08x; double %s vs %s", (int)len, s,
             a1 ? "ok" : "no", u1, a2 ? "ok" : "no", u2, b1 ? "ok" : "no", b2 ? "ok" : "no");
    return false;
}

TEST(tokenize_values_match_the_converter)
{
    long iters = 2000000;
    const char *env = getenv("CTFIO_NUMBER_ITERATIONS");
    if (env && *env) iters = strtol(env, NULL, 10);
    char buf[64], msg[256];
    /* Fixed cases first: the edges of the fast shape. */
    static const char *const fixed[] = {
        "0", "-0", "+0", "5.", "-5.", ".5", "-.5", "+.5", ".", "-", "+", "-.", "1..2",
        "12345678", "123456789", "1234567.8", "1.2345678", "0.00000001", "16777216",
        "16777217", "99999999", "9999999.9", "-0.0000001", "00000000", "1e5", "1.5e-3", "--1",
        "+-1", "1-", "1.-2"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        size_t len = strlen(fixed[i]);
        memset(buf, ' ', sizeof buf);
        memcpy(buf, fixed[i], len);
        if (!check_token(buf, len, buf + sizeof buf, msg, sizeof msg)) {
            test_fail(__FILE__, __LINE__, "fixed token matches the converter", msg);
            return;
        }
    }
    for (long it = 0; it < iters; it++) {
        memset(buf, ' ', sizeof buf);
        size_t len = gen_token(buf);
        /* Mostly with room to read ahead; sometimes the token ends the buffer. */
        const char *limit = tk_below(8) ? buf + sizeof buf : buf + len;
        if (!check_token(buf, len, limit, msg, sizeof msg)) {
            char where[48];
            snprintf(where, sizeof where, " (iteration %ld)", it);
            strncat(msg, where, sizeof msg - strlen(msg) - 1);
            test_fail(__FILE__, __LINE__, "random token matches the converter", msg);
            return;
        }
    }
}

#endif /* CTF_TOKENIZE */
