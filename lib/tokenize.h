/*
 * tokenize.h -- the parser's structural pass (SSE2): where the values of a sample start and end,
 * found 64 bytes at a time from byte masks, and the conversion of a value whose length is known.
 *
 * Why two stages (as simdjson does): the byte-at-a-time parse loop was a chain of positions, each
 * value starting where the previous one's conversion found its end, so every value paid the full
 * latency of a load, its masks and the conversion (~11 ns a value, BENCHMARKS.md). Here the
 * positions come from bit operations on masks of whole 64-byte blocks (the chain advances 64
 * bytes per step, independently of the values), and the conversions of a block's values do not
 * depend on each other, so the processor overlaps them.
 *
 * A "token" (a value) is a maximal run of bytes that are neither a delimiter (parse.c's is_delim:
 * bytes <= ' ' but '\n', and DEL) nor '|'. A sample is the tokens between its name and the next
 * '|' or the row's end (ctf__walk); a dense value must be exactly one number, a sparse one
 * "index:number" (the full converter, number.c, and parse.c's byte-level entry parser decide
 * everything the fast shapes here do not cover, so results and errors are the byte loop's).
 *
 * Reading ahead: blocks and conversions read at most 64 (blocks) or 17 (values) bytes from their
 * first byte, and only below `limit`; a block that would cross it is copied into a padded buffer,
 * a value that would is handed to the full converter. Bytes at or past the row's `end` never count.
 *
 * Only built with SSE2 on a little-endian GCC/Clang target (CTF_TOKENIZE); elsewhere, and with
 * -DCTF_NO_SSE2 (make portable), parse.c keeps its byte loop; tests/parse_diff compares the two.
 */
#ifndef CTF_TOKENIZE_H
#define CTF_TOKENIZE_H

#include "number_fast.h"

#if CTF_FAST_NUMBERS && defined(__SSE2__) && !defined(CTF_NO_SSE2)
#define CTF_TOKENIZE 1
#include <emmintrin.h>

/* Masks of one 64-byte block: bit i describes byte i. */
typedef struct ctf__block {
    uint64_t tok; /* bytes of tokens (neither delimiter nor '|'), below the row's end */
    uint64_t bar; /* '|' bytes below the row's end */
} ctf__block;

static inline __attribute__((always_inline)) uint64_t ctf__mask16(__m128i m, unsigned i)
{
    return (uint64_t)(unsigned)_mm_movemask_epi8(m) << (16 * i);
}

/* Classifies the n (1..64) bytes at p; reads 64 bytes when p + 64 <= limit, else copies. */
static inline __attribute__((always_inline)) ctf__block ctf__classify(const char *p, size_t n,
                                                                      const char *limit)
{
    char pad[64];
    const char *src = p;
    if ((size_t)(limit - p) < 64) {
        memset(pad, ' ', sizeof pad);
        memcpy(pad, p, n);
        src = pad;
    }
    uint64_t delim = 0, bar = 0;
    const __m128i sp = _mm_set1_epi8(' '), nl = _mm_set1_epi8('\n'), del = _mm_set1_epi8(127),
                  vb = _mm_set1_epi8('|');
    for (unsigned i = 0; i < 4; i++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(src + 16 * i));
        __m128i low = _mm_cmpeq_epi8(_mm_min_epu8(v, sp), v); /* <= ' ' */
        __m128i d = _mm_or_si128(_mm_andnot_si128(_mm_cmpeq_epi8(v, nl), low),
                                 _mm_cmpeq_epi8(v, del));
        delim |= ctf__mask16(d, i);
        bar |= ctf__mask16(_mm_cmpeq_epi8(v, vb), i);
    }
    const uint64_t in = n >= 64 ? ~UINT64_C(0) : (UINT64_C(1) << n) - 1;
    ctf__block b = {~(delim | bar) & in, bar & in};
    return b;
}

/* The walk over one sample's values: the structural pass of the header comment. A value that
 * reaches the last byte of a block while more bytes follow stays open into the next block; the
 * first '|' ends the sample (stop). Iterator style, so that the dense and the sparse loops share
 * it and still inline their conversions. */
typedef struct ctf__walk {
    const char *p, *end, *limit;
    size_t next;       /* offset of the next block from p */
    const char *blk;   /* the current block */
    const char *open;  /* start of a value that runs into the next block, or NULL */
    const char *stop;  /* the sample's end: its '|', else end */
    uint64_t tok;      /* the current block's value bytes (cut at the '|') */
    uint64_t starts;   /* value starts not yet returned */
    uint64_t carry;    /* the byte before the current block belongs to a value */
    bool more;         /* bytes of the sample follow the current block */
} ctf__walk;

static inline __attribute__((always_inline)) void ctf__walk_init(ctf__walk *w, const char *p,
                                                                 const char *end,
                                                                 const char *limit)
{
    w->p = p;
    w->end = end;
    w->limit = limit;
    w->next = 0;
    w->blk = p;
    w->open = NULL;
    w->stop = end;
    w->tok = w->starts = w->carry = 0;
    w->more = p < end;
}

/* The next value [*s, *e) of the sample. @return : false at the sample's end (then w->stop). */
static inline __attribute__((always_inline)) bool ctf__walk_next(ctf__walk *w, const char **s,
                                                                 const char **e)
{
    for (;;) {
        if (w->starts) {
            /* A value's length is the run of value bits from its start: the values of a block
             * do not wait on each other (a chain through the ends would serialize them). */
            const unsigned i = (unsigned)__builtin_ctzll(w->starts);
            /* tok >> i has zeros above bit 63 - i, so rest is 0 only for a value filling the
             * whole block from byte 0 (ctz of 0 is undefined: bsf leaves garbage). */
            const uint64_t rest = ~(w->tok >> i);
            const unsigned l = rest ? (unsigned)__builtin_ctzll(rest) : 64;
            w->starts &= w->starts - 1;
            if (i + l == 64 && w->more) {
                w->open = w->blk + i; /* the last start of the block */
                continue;
            }
            *s = w->blk + i;
            *e = w->blk + i + l;
            return true;
        }
        if (!w->more) return false;
        w->blk = w->p + w->next;
        w->next += 64;
        const size_t avail = (size_t)(w->end - w->blk);
        ctf__block b = ctf__classify(w->blk, avail < 64 ? avail : 64, w->limit);
        uint64_t tok = b.tok;
        if (b.bar) {
            const unsigned c = (unsigned)__builtin_ctzll(b.bar);
            tok &= (UINT64_C(1) << c) - 1; /* c < 64 */
            w->stop = w->blk + c;
        }
        w->tok = tok;
        w->starts = tok & ~((tok << 1) | w->carry);
        w->carry = tok >> 63;
        w->more = avail > 64 && !b.bar;
        if (w->open) {
            const unsigned l = ~tok ? (unsigned)__builtin_ctzll(~tok) : 64;
            if (l == 64 && w->more) continue; /* still open (no start in this block) */
            *s = w->open;
            *e = w->blk + l;
            w->open = NULL;
            return true;
        }
    }
}

/* The value of a token [s, s + len) in the fast shape "[-+]digits[.digits]" with 1..8 digits
 * ("5." included, ".5" not): w / 10^m, sign in *neg. @return : false when the shape does not fit or
 * the bytes may not be read (the caller runs the full converter, which also reports errors). */
static inline __attribute__((always_inline)) bool ctf__tok_short(const char *s, size_t len,
                                                                 const char *limit, bool *neg,
                                                                 uint32_t *w, unsigned *m)
{
    /* keep[i]: the low i bytes of a word (i = 0..8). */
    static const uint64_t keep_tab[9] = {
        0, 0xFF, 0xFFFF, 0xFFFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFULL, 0xFFFFFFFFFFFFULL,
        0xFFFFFFFFFFFFFFULL, 0xFFFFFFFFFFFFFFFFULL};
    if (len - 1 > 9 || limit - s < 17) return false; /* sign + 8 digits + '.' = 10 */
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)s);
    __m128i t = _mm_sub_epi8(v, _mm_set1_epi8('0'));
    const unsigned lm = (1u << len) - 1;
    unsigned dm = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(t, _mm_set1_epi8(9)), t));
    dm &= lm;
    if (dm == lm) { /* an unsigned integer (all of integer data): no sign, no '.' */
        if (len > 8) return false;
        uint64_t a;
        memcpy(&a, s, 8);
        *w = ctf__digits_value(a, (unsigned)len);
        *m = 0;
        *neg = false;
        return true;
    }
    const unsigned dot = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('.'))) & lm;
    const unsigned c0 = (unsigned char)*s;
    const unsigned sgn = (c0 == '-') | (c0 == '+');
    /* Every byte a digit, but a leading sign and at most one '.'. */
    if ((dm | dot | sgn) != lm || (dot & (dot - 1))) return false;
    /* Without a '.', dp = len: then ip = the digits after the sign and m = 0. */
    const unsigned hasdot = dot != 0;
    const unsigned dp = (unsigned)__builtin_ctz(dot | (1u << len));
    const unsigned ip = dp - sgn;                        /* integer digits */
    const unsigned fm = (unsigned)len - dp - hasdot;      /* fraction digits */
    const unsigned nd = ip + fm;
    /* ".5" is not a number (SPEC 1.6) and "-" has no digit: the full converter says so. */
    if (!ip || nd > 8) return false;
    /* The digits made contiguous: those before the '.' from one load, those after it from a load
     * one byte further on. */
    uint64_t a, b;
    memcpy(&a, s + sgn, 8);
    memcpy(&b, s + sgn + 1, 8);
    const uint64_t keep = keep_tab[ip];
    *w = ctf__digits_value((a & keep) | (b & ~keep), nd);
    *m = fm;
    *neg = c0 == '-';
    return true;
}

/* A whole token as one float / double: the fast shape, else the full converter, which must stop
 * exactly at the token's end (it never crosses a delimiter or '|'). @return : false = not a
 * number (the caller reports it). */
static inline __attribute__((always_inline)) bool ctf__tok_float(const char *s, size_t len,
                                                                 const char *end,
                                                                 const char *limit, float *out)
{
    static const float p10f[9] = {1e0f, 1e1f, 1e2f, 1e3f, 1e4f, 1e5f, 1e6f, 1e7f, 1e8f};
    bool neg;
    uint32_t w;
    unsigned m;
    if (__builtin_expect(ctf__tok_short(s, len, limit, &neg, &w, &m) && w <= (UINT32_C(1) << 24),
                         1)) {
        /* The sign is applied to the bits: a branch on it mispredicts on half of the values of
         * signed data. */
        float v = m ? (float)w / p10f[m] : (float)w;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        bits ^= (uint32_t)neg << 31;
        memcpy(out, &bits, 4);
        return true;
    }
    return ctf__parse_float(s, end, out) == s + len;
}

static inline __attribute__((always_inline)) bool ctf__tok_double(const char *s, size_t len,
                                                                  const char *end,
                                                                  const char *limit, double *out)
{
    static const double p10d[9] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8};
    bool neg;
    uint32_t w;
    unsigned m;
    if (__builtin_expect(ctf__tok_short(s, len, limit, &neg, &w, &m), 1)) { /* w < 10^8 < 2^53 */
        double v = m ? (double)w / p10d[m] : (double)w;
        uint64_t bits;
        memcpy(&bits, &v, 8);
        bits ^= (uint64_t)neg << 63;
        memcpy(out, &bits, 8);
        return true;
    }
    return ctf__parse_double(s, end, out) == s + len;
}
#else
#define CTF_TOKENIZE 0
#endif

#endif /* CTF_TOKENIZE_H */
