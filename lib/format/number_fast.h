/*
 * number_fast.h -- the parser's inlined fast path for the commonest number shapes, in front of
 * ctf__parse_float / ctf__parse_double (number.c).
 *
 * Why: the out-of-line converter costs ~180 instructions for "-0.5936" (two SWAR digit passes,
 * the general exponent and long-mantissa bookkeeping, the call itself) and was 37-81% of the
 * parse time (BENCHMARKS.md). Nearly every value in real CTF files is "[-+]digits[.digits]" with
 * few digits and no exponent, followed by a blank, '|' or the end of the line. This handles
 * exactly that shape and hands everything else to the full converter, unchanged.
 *
 * Exactness: the value is w / 10^m with w < 10^8 (float: also w <= 2^24) and m <= 7, so w and
 * 10^m are both exact in the target type and one IEEE divide (or nothing, for m = 0) rounds
 * correctly: Clinger's fast path, computed in the target type itself (a float narrowed from a
 * correctly rounded double could round twice). Hence bit-for-bit the result of strtof / strtod
 * and of the full converter. With excess precision (FLT_EVAL_METHOD != 0) it is compiled out.
 *
 * Sameness of the end pointer: the fast path only accepts a number that is followed by the end
 * of the row or a byte <= ' ' or '|', none of which can continue a number in the grammar, so the
 * full converter would stop at the same byte. Anything else ('e', a third digit run, 'x', a
 * stray letter) goes to the full converter, which also produces the errors.
 *
 * Speed: the parse loop is a chain of positions (each value starts where the previous one and
 * its blanks end), so what matters is how soon the end of a number is known, not how many
 * instructions convert it. With SSE2 the end is found from one 16-byte load and three byte masks
 * (digits, '.', terminators); the digit values are computed off that chain. Without SSE2 (or with
 * -DCTF_NO_SSE2, which the tests can use to exercise it) two dependent 8-byte SWAR passes do it.
 * A single digit followed by a blank ("0 ": most of an MNIST file, and sparse "i:1") takes a
 * shortcut of two byte tests.
 *
 * Reading ahead: up to 17 bytes from the number's first byte (SWAR: 16 past the sign) must lie
 * before `limit` (the end of the chunk's buffer, which may lie beyond the row's `end`), else the
 * full converter runs. Bytes past `end` never count: a number that would cross `end` is handed
 * over too.
 */
#ifndef CTF_NUMBER_FAST_H
#define CTF_NUMBER_FAST_H

#include "common/common.h"

#include <float.h>
#if defined(__SSE2__) && !defined(CTF_NO_SSE2)
#include <emmintrin.h>
#endif

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ && defined(__GNUC__) && \
    defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
#define CTF_FAST_NUMBERS 1
#else
#define CTF_FAST_NUMBERS 0
#endif

#if CTF_FAST_NUMBERS
/* The number of leading digit bytes of the 8 bytes v (first byte lowest) and, in *val, their
 * value (up to 7 digits; 8 are reported but not converted: the caller gives up on them). Same
 * test as number.c's eight_digits: a byte is a digit iff its high nibble is 3 and stays 3 after
 * adding 6; a carry out of a byte >= 0xFA only disturbs bytes after the first non-digit. */
static inline __attribute__((always_inline)) unsigned ctf__lead_digits(uint64_t v, uint32_t *val)
{
    const uint64_t hi = UINT64_C(0xF0F0F0F0F0F0F0F0), threes = UINT64_C(0x3030303030303030);
    uint64_t bad = ((v & hi) ^ threes) | (((v + UINT64_C(0x0606060606060606)) & hi) ^ threes);
    unsigned k = bad ? (unsigned)__builtin_ctzll(bad) >> 3 : 8;
    if (k == 0 || k == 8) {
        *val = 0;
        return k;
    }
    /* Shift the k digits to the top so that the missing ones act as leading zeros, then combine
     * pairs, quads and octets. */
    uint64_t x = (v & UINT64_C(0x0F0F0F0F0F0F0F0F)) << (8 * (8 - k));
    x = (x * 10 + (x >> 8)) & UINT64_C(0x00FF00FF00FF00FF);
    x = (x * 100 + (x >> 16)) & UINT64_C(0x0000FFFF0000FFFF);
    x = (x * 10000 + (x >> 32)) & UINT64_C(0xFFFFFFFF);
    *val = (uint32_t)x;
    return k;
}

#if defined(__SSE2__) && !defined(CTF_NO_SSE2)
/* The value of the first k (1..8) digit bytes of v (first byte lowest). */
static inline __attribute__((always_inline)) uint32_t ctf__digits_value(uint64_t v, unsigned k)
{
    uint64_t x = (v & UINT64_C(0x0F0F0F0F0F0F0F0F)) << (8 * (8 - k));
    x = (x * 10 + (x >> 8)) & UINT64_C(0x00FF00FF00FF00FF);
    x = (x * 100 + (x >> 16)) & UINT64_C(0x0000FFFF0000FFFF);
    x = (x * 10000 + (x >> 32)) & UINT64_C(0xFFFFFFFF);
    return (uint32_t)x;
}
#endif

/* Scans "[-+]digits[.digits]" at p into w / 10^m. @return : past it when the shape fits (at most
 * 7 integer digits, 7 fraction digits, 8 in all, followed by `end` or a byte <= ' ' or '|'),
 * else NULL (the caller runs the full converter). */
static inline __attribute__((always_inline)) const char *
ctf__scan_short(const char *p, const char *end, const char *limit, bool *neg, uint32_t *w,
                unsigned *m)
{
    /* One digit and a blank ("0 " is most of an MNIST file): no dependency of the next position
     * on the value's bytes beyond one well-predicted test. */
    if (end - p >= 2 && p[1] == ' ' && (unsigned)(unsigned char)p[0] - '0' < 10) {
        *neg = false;
        *w = (uint32_t)(p[0] - '0');
        *m = 0;
        return p + 1;
    }
#if defined(__SSE2__) && !defined(CTF_NO_SSE2)
    /* Where the number ends is found from one 16-byte load and three byte masks (digits, dots,
     * terminators), so the next value's position depends on p through a few register operations
     * only: the parse loop is a chain of such positions, and its latency was the cost (two
     * dependent SWAR passes, each waiting on a load at an address computed by the previous one).
     * The digit values are computed off that chain. Reads stay below p + 17 <= limit. */
    if (limit - p < 17) return NULL;
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m128i t = _mm_sub_epi8(v, _mm_set1_epi8('0'));
    unsigned dm = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(t, _mm_set1_epi8(9)), t));
    unsigned dots = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('.')));
    unsigned term = (unsigned)_mm_movemask_epi8(
        _mm_or_si128(_mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(' ')), v),
                     _mm_cmpeq_epi8(v, _mm_set1_epi8('|'))));
    unsigned nd = ~dm; /* non-digits; bits 16..31 are set, so every ctz below is defined */
    unsigned sgn = *p == '-' || *p == '+';
    unsigned k = (unsigned)__builtin_ctz(nd >> sgn); /* integer digits */
    if (k - 1 > 6) return NULL;                       /* 0, or more than 7 */
    unsigned len = sgn + k, fm = 0;
    if ((dots >> len) & 1) {
        fm = (unsigned)__builtin_ctz(nd >> (len + 1)); /* fraction digits ("45." has none) */
        if (k + fm > 8) return NULL;
        len += 1 + fm; /* <= 10 */
    }
    if (len > (size_t)(end - p)) return NULL;
    if (len < (size_t)(end - p) && !((term >> len) & 1)) return NULL;
    uint64_t a, b;
    memcpy(&a, p + sgn, 8);
    uint32_t val = ctf__digits_value(a, k);
    if (fm) {
        static const uint32_t p10[8] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};
        memcpy(&b, p + sgn + k + 1, 8);
        val = val * p10[fm] + ctf__digits_value(b, fm);
    }
    *neg = *p == '-';
    *w = val;
    *m = fm;
    return p + len;
#else
    const char *s = p + (*p == '-' || *p == '+');
    if (limit - s < 16) return NULL;
    uint64_t v;
    memcpy(&v, s, 8);
    uint32_t ip;
    unsigned k = ctf__lead_digits(v, &ip);
    if (k == 0 || k == 8) return NULL;
    const char *after = s + k;
    uint32_t val = ip;
    unsigned fm = 0;
    if (*after == '.') {
        memcpy(&v, after + 1, 8);
        uint32_t fp;
        fm = ctf__lead_digits(v, &fp);
        if (k + fm > 8) return NULL;
        static const uint32_t p10[8] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};
        val = ip * p10[fm] + fp;
        after += 1 + fm;
    }
    if (after > end) return NULL;
    if (after < end && (unsigned char)*after > ' ' && *after != '|') return NULL;
    *neg = *p == '-';
    *w = val;
    *m = fm;
    return after;
#endif
}
#endif

/* ctf__fast_float / ctf__fast_double: ctf__parse_float / ctf__parse_double (same result, same
 * end pointer, same NULL), inlined for the short common shape. `limit` (>= end) bounds the bytes
 * that may be read. */
static inline __attribute__((always_inline)) const char *
ctf__fast_float(const char *p, const char *end, const char *limit, float *out)
{
#if CTF_FAST_NUMBERS
    static const float p10f[8] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f};
    bool neg;
    uint32_t w;
    unsigned m;
    const char *q = ctf__scan_short(p, end, limit, &neg, &w, &m);
    if (q && w <= (UINT32_C(1) << 24)) {
        float v = (float)w / p10f[m];
        *out = neg ? -v : v;
        return q;
    }
#else
    CTF_UNUSED(limit);
#endif
    return ctf__parse_float(p, end, out);
}

static inline __attribute__((always_inline)) const char *
ctf__fast_double(const char *p, const char *end, const char *limit, double *out)
{
#if CTF_FAST_NUMBERS
    static const double p10d[8] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7};
    bool neg;
    uint32_t w;
    unsigned m;
    const char *q = ctf__scan_short(p, end, limit, &neg, &w, &m);
    if (q) { /* w < 10^8 < 2^53 */
        double v = (double)w / p10d[m];
        *out = neg ? -v : v;
        return q;
    }
#else
    CTF_UNUSED(limit);
#endif
    return ctf__parse_double(p, end, out);
}

#endif /* CTF_NUMBER_FAST_H */
