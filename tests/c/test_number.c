/*
 * test_number.c -- number.c: the CTF number grammar, correct rounding bit-for-bit against glibc's
 * strtod / strtof (the oracle), and the shortest round-trip formatters.
 *
 * Every input is placed flush against a PROT_NONE page, so a parser that reads at or past `end`
 * crashes instead of passing by luck. The randomized comparison runs CTFIO_NUMBER_ITERATIONS
 * values (default 2,000,000; CTFIO_NUMBER_SEED picks another stream for long runs).
 */
#include "reader/pipeline.h"
#include "test.h"

#include <errno.h>
#include <float.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/*======================================================================
 * Helpers
 *====================================================================*/

/* One page of text followed by an inaccessible page; set up once, never freed (the harness
 * has no teardown, and the test process exits right after). */
static char *guard_page_end(void)
{
    static char *end;
    if (!end) {
        long pg = sysconf(_SC_PAGESIZE);
        char *m = mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        if (m == MAP_FAILED) abort();
        if (mprotect(m + pg, (size_t)pg, PROT_NONE) != 0) abort();
        end = m + pg;
    }
    return end;
}

/* Copies s (len bytes, len <= 4000) so that its last byte is the last readable one. */
static const char *guarded(const char *s, size_t len)
{
    char *end = guard_page_end();
    memcpy(end - len, s, len);
    return end - len;
}

/* Long inputs do not fit one page: a separately mapped guarded buffer of any size. */
static const char *guarded_big(const char *s, size_t len, void **map, size_t *maplen)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t pages = (len + (size_t)pg - 1) / (size_t)pg + 1;
    char *m = mmap(NULL, pages * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED) abort();
    char *end = m + (pages - 1) * (size_t)pg;
    if (mprotect(end, (size_t)pg, PROT_NONE) != 0) abort();
    memcpy(end - len, s, len);
    *map = m;
    *maplen = pages * (size_t)pg;
    return end - len;
}

static uint64_t dbits(double v)
{
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

static uint32_t fbits(float v)
{
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    return b;
}

/* Parses s (len bytes; z: room for a NUL-terminated copy; g: s against a guard page) fully
 * with both parsers and compares with strtod/strtof, which must consume all of s too.
 * @return : 0, or 1 with msg describing the first difference. */
static int check_parsed(const char *s, size_t len, char *z, const char *g, char *msg, size_t msgcap)
{
    memcpy(z, s, len);
    z[len] = '\0';
    char *e1, *e2;
    double rd = strtod(z, &e1);
    float rf = strtof(z, &e2);
    if ((size_t)(e1 - z) != len || (size_t)(e2 - z) != len) {
        snprintf(msg, msgcap, "libc does not consume all of \"%.200s\"", z);
        return 1;
    }
    double pd = 0;
    float pf = 0;
    const char *ed = ctf__parse_double(g, g + len, &pd);
    if (ed != g + len || dbits(pd) != dbits(rd)) {
        snprintf(msg, msgcap, "double \"%.300s\": got %.17g (%s), strtod %.17g", z, pd,
                 ed == g + len ? "end ok" : "bad end", rd);
        return 1;
    }
    const char *ef = ctf__parse_float(g, g + len, &pf);
    if (ef != g + len || fbits(pf) != fbits(rf)) {
        snprintf(msg, msgcap, "float \"%.300s\": got %.9g (%s), strtof %.9g", z, (double)pf,
                 ef == g + len ? "end ok" : "bad end", (double)rf);
        return 1;
    }
    return 0;
}

/* check_parsed for any length of text. */
static int check_vs_libc(const char *s, size_t len, char *msg, size_t msgcap)
{
    char zbuf[4096];
    char *z = len < sizeof zbuf ? zbuf : malloc(len + 1);
    void *map = NULL;
    size_t maplen = 0;
    const char *g = len < 4000 ? guarded(s, len) : guarded_big(s, len, &map, &maplen);
    int rc = check_parsed(s, len, z, g, msg, msgcap);
    if (z != zbuf) free(z);
    if (map) munmap(map, maplen);
    return rc;
}

#define ASSERT_LIBC(str) \
    do { \
        const char *s_ = (str); \
        char m_[512]; \
        if (check_vs_libc(s_, strlen(s_), m_, sizeof m_)) { \
            test_fail(__FILE__, __LINE__, "matches libc: " #str, m_); \
            return; \
        } \
    } while (0)

/* Parses a NUL-terminated text placed against the guard page. @return : end offset or -1. */
static long pd_off(const char *s, double *v)
{
    size_t n = strlen(s);
    const char *g = guarded(s, n);
    const char *e = ctf__parse_double(g, g + n, v);
    return e ? (long)(e - g) : -1;
}

static long pf_off(const char *s, float *v)
{
    size_t n = strlen(s);
    const char *g = guarded(s, n);
    const char *e = ctf__parse_float(g, g + n, v);
    return e ? (long)(e - g) : -1;
}

/*======================================================================
 * Grammar
 *====================================================================*/

TEST(number_valid_forms)
{
    static const struct {
        const char *text;
        double value;
        long end;
    } cases[] = {
        {"45.", 45.0, 3},
        {"1.5e-3", 1.5e-3, 6},
        {"-0.92E3", -920.0, 7},
        {"+3", 3.0, 2},
        {"007", 7.0, 3},
        {"1e+10", 1e10, 5},
        {"0", 0.0, 1},
        {"-4.68", -4.68, 5},
        {"3.23E2", 323.0, 6},
        {"8e-4", 8e-4, 4},
        {"1E5", 1e5, 3},
        {"0.0", 0.0, 3},
        {"123456789", 123456789.0, 9},
        {"1.25", 1.25, 4},
        {"00000.5000", 0.5, 10},
        {"9e0", 9.0, 3},
        {"-7e-0", -7.0, 5},
        {"1e0000000000000000000000000000002", 100.0, 33},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double d = -1;
        float f = -1;
        ASSERT_EQ(pd_off(cases[i].text, &d), cases[i].end);
        ASSERT_DBL_EQ(d, cases[i].value);
        ASSERT_EQ(pf_off(cases[i].text, &f), cases[i].end);
        ASSERT_LIBC(cases[i].text);
    }
}

TEST(number_invalid_forms)
{
    static const char *bad[] = {
        ".5",
        "1.e5",
        "1.E5",
        "1e",
        "1e+",
        "1E-",
        "+",
        "-",
        "inf",
        "nan",
        "INF",
        "NaN",
        "-inf",
        "0x1p3",
        "0X10",
        "-0x1",
        "x1p3",
        "e5",
        "+.5",
        "-.5",
        "1ex",
        "1e+x",
        "1.e",
        "1.e+5x",
        ".",
        "..",
        "+-1",
        "-+1",
        " 1",
        "\t1",
        "1e-+5",
        "1e--5",
        ",5",
        "|1",
        "x",
        "1E",
        "2e ",
        "3.e-1",
        "4e\n",
        "\xc2\xa0"
        "1",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double d = 123;
        float f = 123;
        if (pd_off(bad[i], &d) != -1 || pf_off(bad[i], &f) != -1) {
            test_fail(__FILE__, __LINE__, "rejected", bad[i]);
            return;
        }
    }
    /* An empty range, and ranges cut before the number is complete. */
    const char *g = guarded("1e5", 3);
    double d;
    float f;
    ASSERT(ctf__parse_double(g, g, &d) == NULL);
    ASSERT(ctf__parse_float(g, g, &f) == NULL);
    ASSERT(ctf__parse_double(g, g + 2, &d) == NULL); /* "1e" */
    ASSERT(ctf__parse_double(g, g + 1, &d) == g + 1);
    ASSERT_DBL_EQ(d, 1.0);
    /* Other digits before an 'x' end the number there; the caller rejects the delimiter. */
    ASSERT_EQ(pd_off("00x1", &d), 2);
    ASSERT_EQ(pd_off("1x", &d), 1);
    ASSERT_EQ(pd_off("0.0x1", &d), 3);
}

TEST(number_end_pointer)
{
    static const struct {
        const char *text;
        double value;
        long end;
    } cases[] = {
        {"1,5", 1.0, 1},       {"1e5x", 1e5, 3},    {"45. ", 45.0, 3}, {"45.x", 45.0, 3},
        {"-0.92E3|", -920, 7}, {"12 34", 12.0, 2},  {"3\t4", 3.0, 1},  {"2.5:7", 2.5, 3},
        {"6\r\n", 6.0, 1},     {"1.5.5", 1.5, 3},   {"1e5e5", 1e5, 3}, {"7-", 7.0, 1},
        {"1e+05,", 1e5, 5},    {"0.25|a", 0.25, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double d = -1;
        float f = -1;
        ASSERT_EQ(pd_off(cases[i].text, &d), cases[i].end);
        ASSERT_DBL_EQ(d, cases[i].value);
        ASSERT_EQ(pf_off(cases[i].text, &f), cases[i].end);
        ASSERT_DBL_EQ(f, (float)cases[i].value);
    }
    /* The range ends in the middle of digits: the number ends there too. */
    const char *g = guarded("123456", 6);
    double d;
    ASSERT(ctf__parse_double(g, g + 3, &d) == g + 3);
    ASSERT_DBL_EQ(d, 123.0);
}

TEST(number_negative_zero)
{
    static const char *zeros[] = {
        "-0",
        "-0.0",
        "-0e10",
        "-0.000e-999",
        "-1e-400",
        "-1e-99999999",
        "-0000000000000000000000000000000.00000000000000000000000001e-400",
    };
    for (size_t i = 0; i < sizeof zeros / sizeof zeros[0]; i++) {
        double d = 1;
        float f = 1;
        ASSERT(pd_off(zeros[i], &d) == (long)strlen(zeros[i]));
        ASSERT(d == 0 && signbit(d));
        ASSERT(pf_off(zeros[i], &f) == (long)strlen(zeros[i]));
        ASSERT(f == 0 && signbit(f));
        ASSERT_LIBC(zeros[i]);
    }
    double d = -1;
    ASSERT(pd_off("0e999999999999999999999999", &d) > 0);
    ASSERT(d == 0 && !signbit(d));
    ASSERT(pd_off("-1e-50", &d) > 0 && d < 0);
    float f = 1;
    ASSERT(pf_off("-1e-50", &f) > 0 && f == 0 && signbit(f));
}

/*======================================================================
 * Hard values
 *====================================================================*/

TEST(number_extremes)
{
    static const char *cases[] = {
        /* subnormals */
        "4.9e-324",
        "5e-324",
        "2.4703282292062327e-324",
        "2.4703282292062328e-324",
        "2.47032822920623272e-324",
        "1e-323",
        "2.2250738585072009e-308",
        "4.4501477170144023e-308",
        "1.401298464324817e-45",
        "7.006492321624085e-46",
        "7.006492321624086e-46",
        "1e-45",
        "1.1754942e-38",
        "1.17549435e-38",
        "1.1754943508222875e-38",
        /* largest finite and overflow */
        "1.7976931348623157e308",
        "1.7976931348623158e308",
        "1.7976931348623159e308",
        "1.797693134862315807e308",
        "1.7976931348623157081452742373170435e308",
        "1e309",
        "3.4028235e38",
        "3.4028236e38",
        "3.40282356779733661637539395458142568448e38",
        "3.40282357e38",
        "1e39",
        "99999999999999999999e300",
        /* halfway and near-halfway */
        "9007199254740993",
        "9007199254740993.0000000000000000001",
        "9007199254740995",
        "1.00000005960464477539062500",
        "1.00000005960464477539062501",
        "1.0000000596046447753906249",
        "16777217",
        "16777219",
        "0.1",
        "0.2",
        "0.3",
        "2.2250738585072011e-308",
        "2.2250738585072012e-308",
        "2.2250738585072014e-308",
        "8.988465674311580536566680e307",
        "1.448997445238699",
        "7.0385307e-26",
        "3.518437208883201171875e13",
        "1e23",
        "8.5e-1",
        "4.35679e-10",
        "1090544144181609348835077142190",
        "2.4e-7",
        "9.999999999999999e22",
        "1.0e22",
        "123456789012345678",
        "12345678901234567890123",
        "0.000000000000000000001",
        "1e-342",
        "1e-343",
        "1e308",
        "9.5e-325",
        "1e-46",
        "1.5e-45",
        "2.1019476964872256e-45",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) ASSERT_LIBC(cases[i]);

    double d;
    float f;
    ASSERT(pd_off("4.9e-324", &d) > 0 && d == 4.9406564584124654e-324);
    ASSERT(pd_off("2.4703282292062327e-324", &d) > 0 && d == 0); /* below the tie */
    ASSERT(pd_off("2.4703282292062328e-324", &d) > 0 && d == 4.9406564584124654e-324);
    ASSERT(pd_off("1.7976931348623157e308", &d) > 0 && d == DBL_MAX);
    ASSERT(pd_off("1.7976931348623159e308", &d) > 0 && isinf(d) && d > 0);
    ASSERT(pd_off("-1.7976931348623159e308", &d) > 0 && isinf(d) && d < 0);
    ASSERT(pf_off("1.401298464324817e-45", &f) > 0 && fbits(f) == 1);
    ASSERT(pf_off("3.4028235e38", &f) > 0 && f == FLT_MAX);
    ASSERT(pf_off("3.4028236e38", &f) > 0 && isinf(f));
    ASSERT(pd_off("9007199254740993", &d) > 0 && d == 9007199254740992.0);
    ASSERT(pf_off("1.00000005960464477539062500", &f) > 0 && f == 1.0f);
    ASSERT(pf_off("1.00000005960464477539062501", &f) > 0 && f == 1.00000011920928955078125f);
    ASSERT(pd_off("0.1", &d) > 0 && d == 0.1);
    ASSERT(pd_off("2.2250738585072011e-308", &d) > 0 && dbits(d) == UINT64_C(0x000fffffffffffff));
}

/* Returns a malloc'd exact decimal expansion of x (long double) with digits padded by zeros
 * to total_digits and `tail` appended, in the form "d.ddd...e-NNN". */
static char *exact_text(long double x, int total_digits, const char *tail)
{
    char *buf = malloc((size_t)total_digits + 64);
    int n = snprintf(buf, (size_t)total_digits + 64, "%.*Le", total_digits - 1, x);
    char *e = strchr(buf, 'e');
    char ex[16];
    snprintf(ex, sizeof ex, "%s", e);
    size_t tl = strlen(tail);
    /* replace the last digits by tail */
    memcpy(e - tl, tail, tl);
    memcpy(e, ex, strlen(ex) + 1);
    (void)n;
    return buf;
}

TEST(number_long_mantissas)
{
    char msg[512];
    /* A 1000-digit integer-and-fraction number. */
    char big[4000];
    size_t n = 0;
    for (int i = 0; i < 1000; i++) big[n++] = (char)('0' + (i * 7 + 3) % 10);
    big[n++] = '.';
    for (int i = 0; i < 500; i++) big[n++] = (char)('0' + (i * 3 + 1) % 10);
    big[n] = '\0';
    ASSERT_LIBC(big + 700); /* 300 integer digits */
    memcpy(big + n, "e-800", 6);
    ASSERT_LIBC(big);

    /* 0.000...0001 with many zeros, and the same in the integer part. */
    char z[3500];
    strcpy(z, "0.");
    memset(z + 2, '0', 3000);
    strcpy(z + 3002, "1e3010");
    ASSERT_LIBC(z);
    strcpy(z + 3002, "17976931348623157e3309");
    ASSERT_LIBC(z);
    memset(z, '0', 3000);
    strcpy(z + 3000, "1e-300");
    ASSERT_LIBC(z);

    /* Exact ties between doubles with hundreds of digits: the tie rounds to even, one nonzero
     * digit far past the 780 kept ones must round up. */
    static const struct {
        long double x;
        int digits;
    } ties[] = {
        {0x1p-1075L, 800},                                 /* half the smallest subnormal */
        {0x3p-1075L, 800},                                 /* 1.5 subnormal units */
        {0x1.fffffffffffffp-1023L, 800},                   /* largest subnormal + half unit */
        {0x1.00000000000008p-1000L, 800},                  /* 1 + 2^-53, scaled */
        {0x1.fffffffffffff8p+1023L, 400},                  /* DBL_MAX + half ulp: overflows */
        {0x1p-150L, 200},                                  /* float: half the smallest */
        {0x1.000001p-126L, 200},                           /* float tie near the normal limit */
        {0x1.ffffffp+127L, 100},                           /* FLT_MAX + half ulp */
    };
    for (size_t i = 0; i < sizeof ties / sizeof ties[0]; i++) {
        char *t = exact_text(ties[i].x, ties[i].digits, "0");
        if (check_vs_libc(t, strlen(t), msg, sizeof msg)) {
            test_fail(__FILE__, __LINE__, "exact tie", msg);
            free(t);
            return;
        }
        free(t);
        for (int k = 0; k < 3; k++) {
            static const char *tails[] = {"1", "9", "00000000001"};
            t = exact_text(ties[i].x, ties[i].digits + 1200, tails[k]);
            if (check_vs_libc(t, strlen(t), msg, sizeof msg)) {
                test_fail(__FILE__, __LINE__, "tie + sticky", msg);
                free(t);
                return;
            }
            free(t);
        }
    }
    /* The smallest tie with the sticky digit at position 2001: rounds up to 4.9e-324. */
    char *t = exact_text(0x1p-1075L, 2000, "1");
    void *map;
    size_t maplen;
    const char *g = guarded_big(t, strlen(t), &map, &maplen);
    double d = 0;
    ASSERT(ctf__parse_double(g, g + strlen(t), &d) == g + strlen(t));
    ASSERT(d == 4.9406564584124654e-324);
    munmap(map, maplen);
    free(t);
    t = exact_text(0x1p-1075L, 2000, "0");
    g = guarded_big(t, strlen(t), &map, &maplen);
    ASSERT(ctf__parse_double(g, g + strlen(t), &d) == g + strlen(t));
    ASSERT(d == 0);
    munmap(map, maplen);
    free(t);

    /* 9007199254740993 followed by a fraction with a nonzero digit 1000 places out. */
    char h[1200];
    strcpy(h, "9007199254740993.");
    memset(h + 17, '0', 1000);
    strcpy(h + 1017, "1");
    d = 0;
    ASSERT(pd_off(h, &d) == (long)strlen(h) && d == 9007199254740994.0);
    ASSERT_LIBC(h);
}

TEST(number_errno_untouched)
{
    double d;
    errno = 0;
    ASSERT(pd_off("1e999", &d) > 0 && isinf(d));
    char s[900];
    memset(s, '9', 850);
    strcpy(s + 850, "e400");
    ASSERT(pd_off(s, &d) > 0 && isinf(d));
    ASSERT_EQ(errno, 0);
}

/*======================================================================
 * Randomized comparison with strtod / strtof
 *====================================================================*/

static uint64_t rng_state;

static uint64_t rnd(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * UINT64_C(2685821657736338717);
}

static unsigned rnd_below(unsigned n) { return (unsigned)((rnd() >> 32) % n); }

static size_t put_digits(char *o, int count, bool nonzero_first)
{
    for (int i = 0; i < count; i++)
        o[i] = (char)((i == 0 && nonzero_first) ? '1' + rnd_below(9) : '0' + rnd_below(10));
    return (size_t)count;
}

static double rnd_finite_double(void)
{
    for (;;) {
        uint64_t b = rnd();
        double v;
        memcpy(&v, &b, sizeof v);
        if (isfinite(v)) return v;
    }
}

static float rnd_finite_float(void)
{
    for (;;) {
        uint32_t b = (uint32_t)(rnd() >> 32);
        float v;
        memcpy(&v, &b, sizeof v);
        if (isfinite(v)) return v;
    }
}

/* One random valid number text in the CTF grammar. @return : its length. */
static size_t gen_number(char *o)
{
    size_t n = 0;
    unsigned kind = rnd_below(100);
    if (kind < 30) {
        /* CTF data: "-4.68", "3.23E2", "8e-4", "45.", "0.5" */
        if (rnd_below(3) == 0)
            o[n++] = '-';
        else if (rnd_below(20) == 0)
            o[n++] = '+';
        n += put_digits(o + n, 1 + (int)rnd_below(3), rnd_below(4) != 0);
        unsigned f = rnd_below(6);
        if (f > 0) {
            o[n++] = '.';
            n += put_digits(o + n, (int)f - 1, false);
        }
        if (f != 1 && rnd_below(4) == 0) { /* no "45.e1" */
            o[n++] = rnd_below(2) ? 'e' : 'E';
            unsigned s = rnd_below(3);
            if (s) o[n++] = s == 1 ? '-' : '+';
            n += put_digits(o + n, 1 + (int)rnd_below(2), false);
        }
    } else if (kind < 38) {
        /* integers, a few with leading zeros or more than 19 digits */
        if (rnd_below(4) == 0) o[n++] = '-';
        n += put_digits(o + n, 1 + (int)rnd_below(24), rnd_below(8) != 0);
    } else if (kind < 55) {
        /* 15-25 digit mantissas, exponents -350..350 */
        if (rnd_below(2)) o[n++] = '-';
        int digits = 15 + (int)rnd_below(11);
        int before = 1 + (int)rnd_below((unsigned)digits);
        n += put_digits(o + n, before, true);
        if (before < digits) {
            o[n++] = '.';
            n += put_digits(o + n, digits - before, false);
        }
        n += (size_t)sprintf(o + n, "e%d", (int)rnd_below(701) - 350);
    } else if (kind < 67) {
        /* random doubles, shortest-ish and full precision */
        int prec = rnd_below(3) ? 17 : 1 + (int)rnd_below(17);
        n += (size_t)sprintf(o + n, "%.*g", prec, rnd_finite_double());
    } else if (kind < 77) {
        int prec = rnd_below(3) ? 9 : 1 + (int)rnd_below(9);
        n += (size_t)sprintf(o + n, "%.*g", prec, (double)rnd_finite_float());
    } else if (kind < 86) {
        /* near (or exactly at) the midpoint of two neighbouring doubles */
        double a = fabs(rnd_finite_double());
        if (rnd_below(4) == 0) /* moderate magnitudes too, where ties are short */
            a = ldexp(1.0 + (double)(rnd() >> 11) * 0x1p-53, (int)rnd_below(60) - 30);
        double b = nextafter(a, INFINITY);
        if (isinf(b)) b = a;
        long double mid = ((long double)a + (long double)b) / 2;
        n += (size_t)sprintf(o + n, "%.*Le", 16 + (int)rnd_below(30), mid);
    } else if (kind < 95) {
        /* near the midpoint of two neighbouring floats (exact in double) */
        float a = fabsf(rnd_finite_float());
        float b = nextafterf(a, INFINITY);
        if (isinf(b)) b = a;
        double mid = ((double)a + (double)b) / 2;
        n += (size_t)sprintf(o + n, "%.*e", 7 + (int)rnd_below(25), mid);
    } else if (kind < 97) {
        /* leading zeros: more than 19 digits, not all of them significant */
        if (rnd_below(2)) o[n++] = '-';
        int zeros = (int)rnd_below(30);
        if (rnd_below(2)) {
            memset(o + n, '0', (size_t)zeros + 1);
            n += (size_t)zeros + 1;
            o[n++] = '.';
        } else {
            o[n++] = '0';
            o[n++] = '.';
            memset(o + n, '0', (size_t)zeros);
            n += (size_t)zeros;
        }
        n += put_digits(o + n, 1 + (int)rnd_below(22), true);
        if (rnd_below(2)) n += (size_t)sprintf(o + n, "e%d", (int)rnd_below(701) - 350);
    } else {
        /* long mantissas, sometimes with long runs of zeros or nines */
        if (rnd_below(2)) o[n++] = '-';
        int digits = 26 + (int)rnd_below(100);
        n += put_digits(o + n, 1, true);
        o[n++] = '.';
        char run = rnd_below(2) ? '0' : '9';
        for (int i = 0; i < digits; i++)
            o[n++] = rnd_below(4) == 0 ? run : (char)('0' + rnd_below(10));
        n += (size_t)sprintf(o + n, "e%d", (int)rnd_below(701) - 350);
    }
    o[n] = '\0';
    return n;
}

static long env_long(const char *name, long dflt)
{
    const char *s = getenv(name);
    return s && *s ? strtol(s, NULL, 10) : dflt;
}

TEST(number_random_vs_libc)
{
    long iters = env_long("CTFIO_NUMBER_ITERATIONS", 2000000);
    rng_state = (uint64_t)env_long("CTFIO_NUMBER_SEED", 0) * UINT64_C(0x9E3779B97F4A7C15) +
                UINT64_C(0x2545F4914F6CDD1D);
    char text[256], msg[512];
    for (long i = 0; i < iters; i++) {
        size_t n = gen_number(text);
        if (check_vs_libc(text, n, msg, sizeof msg)) {
            char where[64];
            snprintf(where, sizeof where, " (iteration %ld)", i);
            strncat(msg, where, sizeof msg - strlen(msg) - 1);
            test_fail(__FILE__, __LINE__, "random number matches libc", msg);
            return;
        }
    }
}

/*======================================================================
 * Formatting
 *====================================================================*/

TEST(number_format_examples)
{
    char b[64];
    ASSERT_EQ(ctf_format_float(4.79f, b, sizeof b), 4);
    ASSERT_STR_EQ(b, "4.79");
    ctf_format_float(-0.457f, b, sizeof b);
    ASSERT_STR_EQ(b, "-0.457");
    ctf_format_double(1e30, b, sizeof b);
    ASSERT_STR_EQ(b, "1e+30");
    ctf_format_double(0.0, b, sizeof b);
    ASSERT_STR_EQ(b, "0");
    ctf_format_double(-0.0, b, sizeof b);
    ASSERT_STR_EQ(b, "-0");
    ctf_format_float(-0.0f, b, sizeof b);
    ASSERT_STR_EQ(b, "-0");
    ctf_format_float(185.0f, b, sizeof b);
    ASSERT_STR_EQ(b, "185");
    ctf_format_double(INFINITY, b, sizeof b);
    ASSERT_STR_EQ(b, "1e999");
    ctf_format_double(-INFINITY, b, sizeof b);
    ASSERT_STR_EQ(b, "-1e999");
    ctf_format_float(-INFINITY, b, sizeof b);
    ASSERT_STR_EQ(b, "-1e999");
    ctf_format_float(NAN, b, sizeof b);
    ASSERT_STR_EQ(b, "null");
    ctf_format_double(0.1, b, sizeof b);
    ASSERT_STR_EQ(b, "0.1");
    ctf_format_float(0.1f, b, sizeof b);
    ASSERT_STR_EQ(b, "0.1");
    ctf_format_double((double)0.1f, b, sizeof b);
    ASSERT_STR_EQ(b, "0.10000000149011612");
    ctf_format_double(1200, b, sizeof b);
    ASSERT_STR_EQ(b, "1200");
    ctf_format_double(1e17, b, sizeof b);
    ASSERT_STR_EQ(b, "1e+17");
    ctf_format_double(0.0001, b, sizeof b);
    ASSERT_STR_EQ(b, "0.0001");
    ctf_format_double(1.5e-5, b, sizeof b);
    ASSERT_STR_EQ(b, "1.5e-05");
    ctf_format_double(4.9406564584124654e-324, b, sizeof b);
    ASSERT_STR_EQ(b, "5e-324");
    ctf_format_double(DBL_MAX, b, sizeof b);
    ASSERT_STR_EQ(b, "1.7976931348623157e+308");
    ctf_format_float(FLT_MAX, b, sizeof b);
    ASSERT_STR_EQ(b, "3.4028235e+38");
    ctf_format_float(0x1p-149f, b, sizeof b);
    ASSERT_STR_EQ(b, "1e-45");
    ctf_format_float(16777216.0f, b, sizeof b);
    ASSERT_STR_EQ(b, "16777216");
    ctf_format_float(1e9f, b, sizeof b);
    ASSERT_STR_EQ(b, "1e+09");
    ctf_format_double(-123.456, b, sizeof b);
    ASSERT_STR_EQ(b, "-123.456");
    /* snprintf's contract: truncated, NUL-terminated, full length returned. */
    ASSERT_EQ(ctf_format_float(4.79f, b, 3), 4);
    ASSERT_STR_EQ(b, "4.");
    ASSERT_EQ(ctf_format_double(1e30, NULL, 0), 5);
}

TEST(number_format_roundtrip)
{
    long iters = env_long("CTFIO_NUMBER_ITERATIONS", 2000000) / 10;
    rng_state = UINT64_C(0x853C49E6748FEA9B);
    char b[64], ref[64], msg[256];
    for (long i = 0; i < iters; i++) {
        /* double */
        double v = rnd_finite_double();
        if (i % 4 == 1) v = (double)(int)rnd_below(2000) / 100 - 10; /* short decimals */
        int n = ctf_format_double(v, b, sizeof b);
        int rn = snprintf(ref, sizeof ref, "%.17g", v);
        double back = 0;
        if (n != (int)strlen(b) || n > rn || ctf__parse_double(b, b + n, &back) != b + n ||
            dbits(back) != dbits(v)) {
            snprintf(msg, sizeof msg, "double %s -> \"%s\"", ref, b);
            test_fail(__FILE__, __LINE__, "format_double round trip", msg);
            return;
        }
        /* float */
        float f = rnd_finite_float();
        if (i % 4 == 1) f = (float)rnd_below(100000) / 1000 - 50;
        n = ctf_format_float(f, b, sizeof b);
        rn = snprintf(ref, sizeof ref, "%.9g", (double)f);
        float fb = 0;
        if (n != (int)strlen(b) || n > rn || ctf__parse_float(b, b + n, &fb) != b + n ||
            fbits(fb) != fbits(f)) {
            snprintf(msg, sizeof msg, "float %s -> \"%s\"", ref, b);
            test_fail(__FILE__, __LINE__, "format_float round trip", msg);
            return;
        }
    }
}

TEST(number_format_short_decimals_survive)
{
    /* Any decimal of at most 6 significant digits is its float's shortest form (FLT_DIG = 6),
     * so data read from a CTF file dumps back as written. */
    rng_state = UINT64_C(0xDA3E39CB94B95BDB);
    char text[64], b[64];
    for (int i = 0; i < 100000; i++) {
        int ip = (int)rnd_below(1000), fp = (int)rnd_below(1000);
        if (ip == 0 && fp == 0) continue;
        int len = snprintf(text, sizeof text, "%s%d.%03d", rnd_below(2) ? "-" : "", ip, fp);
        while (text[len - 1] == '0') text[--len] = '\0';
        if (text[len - 1] == '.') text[--len] = '\0';
        float f;
        ASSERT(ctf__parse_float(text, text + len, &f) == text + len);
        ctf_format_float(f, b, sizeof b);
        ASSERT_STR_EQ(b, text);
    }
}

TEST(number_locale_independent)
{
    /* A host (Python) may switch to a locale whose decimal point is ','. Neither direction may
     * notice. Skipped where no such locale is installed. */
    static const char *names[] = {"de_DE.UTF-8", "de_DE.utf8",  "fr_FR.UTF-8",
                                  "fr_FR.utf8",  "ru_RU.UTF-8", "nl_NL.UTF-8"};
    locale_t loc = (locale_t)0;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !loc; i++)
        loc = newlocale(LC_NUMERIC_MASK, names[i], (locale_t)0);
    if (!loc) return;
    locale_t old = uselocale(loc);
    char b[64];
    double d = 0;
    ctf_format_double(-123.456, b, sizeof b);
    bool fmt_ok = strcmp(b, "-123.456") == 0;
    ctf_format_float(4.79f, b, sizeof b);
    fmt_ok = fmt_ok && strcmp(b, "4.79") == 0;
    bool parse_ok = pd_off("2.5e1", &d) == 5 && d == 25.0;
    /* The slow path goes through strtod: a 30-digit near-tie. */
    parse_ok = parse_ok && pd_off("9007199254740993.00000000000001", &d) == 31 &&
               d == 9007199254740994.0;
    uselocale(old);
    freelocale(loc);
    ASSERT(fmt_ok);
    ASSERT(parse_ok);
}
