/*
 * test_tokenize.c -- the parser's structural pass (lib/format/tokenize.h), unit by unit:
 *  - ctf__classify against a byte-by-byte reference on random blocks of every byte class;
 *  - ctf__walk (the values of a sample, and its end) against a byte loop, values up to 200 bytes
 *    long (open across blocks, filling a block from its first byte);
 *  - ctf__tok_float / ctf__tok_double (tokenize_values.h, in each variant this processor runs:
 *    the SSE2 copy and the SSSE3 one) against the full converter (number.c, itself checked
 *    bit for bit against strtof / strtod in test_number.c): same acceptance, same bits, for
 *    every short shape the fast path takes or refuses (signs, '.' anywhere, 1..10 digits, a
 *    stray byte), with room to read ahead and without (the fallback at a buffer's end);
 *  - the float scaling by a double reciprocal, exhaustively: every w <= 2^24 and every m <= 8.
 * CTFIO_NUMBER_ITERATIONS scales the random part (default 2,000,000 tokens of each precision;
 * 200,000,000 is a long soak).
 */
#include "reader/pipeline.h"
#include "test.h"
#include "format/tokenize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#if CTF_TOKENIZE

/* The converters of each variant, out of line (an SSSE3-target function may not be inlined into
 * this file's default-target code). */
typedef bool (*tok_f_fn)(const char *, size_t, const char *, const char *, float *);
typedef bool (*tok_d_fn)(const char *, size_t, const char *, const char *, double *);

#define CTF_V(x) x##_sse2
#include "format/tokenize_values.h"
#undef CTF_V
static bool tok_f_sse2(const char *s, size_t len, const char *end, const char *limit, float *o)
{
    return ctf__tok_float_sse2(s, len, end, limit, false, o);
}
static bool tok_d_sse2(const char *s, size_t len, const char *end, const char *limit, double *o)
{
    return ctf__tok_double_sse2(s, len, end, limit, false, o);
}

#if CTF_SSSE3_VARIANT
#pragma GCC push_options
#pragma GCC target("ssse3")
#define CTF_V(x) x##_ssse3
#include "format/tokenize_values.h"
#undef CTF_V
static bool tok_f_ssse3(const char *s, size_t len, const char *end, const char *limit, float *o)
{
    return ctf__tok_float_ssse3(s, len, end, limit, false, o);
}
static bool tok_d_ssse3(const char *s, size_t len, const char *end, const char *limit, double *o)
{
    return ctf__tok_double_ssse3(s, len, end, limit, false, o);
}
#pragma GCC pop_options
#endif

static const struct {
    const char *name;
    tok_f_fn f;
    tok_d_fn d;
} variants[] = {
    {"sse2", tok_f_sse2, tok_d_sse2},
#if CTF_SSSE3_VARIANT
    {"ssse3", tok_f_ssse3, tok_d_ssse3},
#endif
};

/* The variants this processor can run. */
static size_t num_variants(void)
{
#if CTF_SSSE3_VARIANT
    __builtin_cpu_init();
    return __builtin_cpu_supports("ssse3") ? 2 : 1;
#else
    return 1;
#endif
}

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
            size_t len = r < 80   ? 1 + tk_below(12)
                         : r < 95 ? 60 + tk_below(10)
                                  : 64 + tk_below(140);
            for (size_t k = 0; k < len && n < cap; k++)
                buf[n++] = vbytes[tk_below(sizeof vbytes - 1)];
            size_t gap = 1 + tk_below(3);
            for (size_t k = 0; k < gap && n < cap; k++)
                buf[n++] = dbytes[tk_below(sizeof dbytes - 1)];
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
        size_t k = 0;
        ctf__walk_init(&w, buf + start, buf + end, buf + room);
        bool same = true;
#define TK_SAME(s, e) \
    do { \
        if (k >= nr || (s) != rs[k] || (e) != re[k]) same = false; \
        k++; \
    } while (0)
        while (same && ctf__walk_block(&w)) {
            if (w.roomy && buf + room - w.blk < 64 + 32) same = false; /* may not read ahead */
            if (w.os) TK_SAME(w.os, w.oe);
            for (uint64_t st = w.starts; same && st; st &= st - 1) {
                const unsigned b = (unsigned)__builtin_ctzll(st);
                TK_SAME(w.blk + b, w.blk + b + ctf__walk_len(w.tok, b));
            }
        }
#undef TK_SAME
        if (!same) k--;
        if (!same || k != nr || w.stop != rstop) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "iteration %d: value %zu of %zu (start %zu, end %zu), stop %td vs %td", it, k,
                     nr, start, end, w.stop - buf, rstop - buf);
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

static bool check_token(size_t var, const char *s, size_t len, const char *limit, char *msg,
                        size_t cap)
{
    float f1 = 0, f2 = 0;
    double d1 = 0, d2 = 0;
    const char *end = s + len;
    bool a1 = variants[var].f(s, len, end, limit, &f1);
    /* An infinity (a number beyond the range) is refused, for parse.c to warn of it. */
    const char *q = ctf__parse_float(s, end, &f2);
    bool a2 = q == end && !isinf(f2);
    bool b1 = variants[var].d(s, len, end, limit, &d1);
    const char *r = ctf__parse_double(s, end, &d2);
    bool b2 = r == end && !isinf(d2);
    uint32_t u1, u2;
    uint64_t v1, v2;
    memcpy(&u1, &f1, 4);
    memcpy(&u2, &f2, 4);
    memcpy(&v1, &d1, 8);
    memcpy(&v2, &d2, 8);
    if (a1 == a2 && (!a1 || u1 == u2) && b1 == b2 && (!b1 || v1 == v2)) return true;
    snprintf(msg, cap, "%s: '%.*s': float %s %08x vs converter %s %08x; double %s vs %s",
             variants[var].name, (int)len, s, a1 ? "ok" : "no", u1, a2 ? "ok" : "no", u2,
             b1 ? "ok" : "no", b2 ? "ok" : "no");
    return false;
}

TEST(tokenize_values_match_the_converter)
{
    long iters = 2000000;
    const char *env = getenv("CTFIO_NUMBER_ITERATIONS");
    if (env && *env) iters = strtol(env, NULL, 10);
    char buf[64], msg[256];
    const size_t nv = num_variants();
    /* Fixed cases first: the edges of the fast shape. */
    static const char *const fixed[] = {
        "0",         "-0",        "+0",           "5.",       "-5.",
        ".5",        "-.5",       "+.5",          ".",        "-",
        "+",         "-.",        "1..2",         "12345678", "123456789",
        "1234567.8", "1.2345678", "0.00000001",   "16777216", "16777217",
        "99999999",  "9999999.9", "-0.0000001",   "00000000", "1e5",
        "1.5e-3",    "--1",       "+-1",          "1-",       "1.-2",
        "1e39",      "-1e39",     "3.4028235e38", "1e309",    "-1e309"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        size_t len = strlen(fixed[i]);
        memset(buf, ' ', sizeof buf);
        memcpy(buf, fixed[i], len);
        for (size_t v = 0; v < nv; v++)
            if (!check_token(v, buf, len, buf + sizeof buf, msg, sizeof msg)) {
                test_fail(__FILE__, __LINE__, "fixed token matches the converter", msg);
                return;
            }
    }
    for (long it = 0; it < iters; it++) {
        memset(buf, ' ', sizeof buf);
        size_t len = gen_token(buf);
        /* Mostly with room to read ahead; sometimes the token ends the buffer. */
        const char *limit = tk_below(8) ? buf + sizeof buf : buf + len;
        if (!check_token((size_t)it % nv, buf, len, limit, msg, sizeof msg)) {
            char where[48];
            snprintf(where, sizeof where, " (iteration %ld)", it);
            strncat(msg, where, sizeof msg - strlen(msg) - 1);
            test_fail(__FILE__, __LINE__, "random token matches the converter", msg);
            return;
        }
    }
}

/* The float fast path computes w / 10^m as (float)(w * k), k = 10^-m in double, from its shape
 * table (tokenize_values.h): exact by an argument on the distance of such quotients from float
 * rounding boundaries; here proved by trying all of them against the float division (both
 * operands exact, so correctly rounded), with either sign, for every m the table holds: the
 * factor of "d.ddd" (m fraction digits, len m + 2, '.' at 1) for m <= 7; m = 8 would make 9
 * digits, which no fast shape has. */
TEST(tokenize_float_scale_is_exact)
{
    static const float p10f[9] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f};
    for (unsigned m = 0; m <= 8; m++) {
        const ctf__shape *sp = &ctf__shape_f[ctf__shape_index(0, m + 2, 1)];
        const ctf__shape *sn = &ctf__shape_f[ctf__shape_index(1, m + 3, 2)];
        if (m == 8) { /* 9 digits: no fast shape */
            ASSERT(sp->ctl == 0 && sn->ctl == 0);
            continue;
        }
        ASSERT(sp->ctl != 0 && sn->ctl != 0);
        for (uint32_t w = 0; w <= (UINT32_C(1) << 24); w++) {
            const float want = (float)w / p10f[m];
            const float pos = (float)((double)w * sp->k);
            const float neg = (float)((double)w * sn->k);
            if (pos != want || neg != -want) {
                char msg[96];
                snprintf(msg, sizeof msg, "w=%u m=%u: %a / %a, want %a", w, m, (double)pos,
                         (double)neg, (double)want);
                test_fail(__FILE__, __LINE__, "w * 10^-m rounds like w / 10^m", msg);
                return;
            }
        }
    }
}

#endif /* CTF_TOKENIZE */
