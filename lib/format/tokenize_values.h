/*
 * tokenize_values.h -- the converters of one value whose extent the structural pass found
 * (tokenize.h), for one instruction-set variant: included once per variant, with CTF_V(name)
 * naming this variant's copies (parse.c: CTF_V(x) = x##_sse2, then x##_ssse3 after a target
 * pragma). No include guard, on purpose.
 *
 * The SSSE3 copy differs in one place, the digits of a value with a '.' (ctf__tok_short): a
 * table shuffle and two multiply-adds instead of two overlapping loads merged by masks and a
 * three-step SWAR reduction, ~25 instructions fewer; the rest is the same source compiled for
 * the target.
 */
#if !CTF_TOKENIZE || !defined(CTF_V)
#error "tokenize_values.h: include after tokenize.h, with CTF_V defined"
#endif
/* The digits of a token [s, s + len) in the fast shape "[-]digits[.digits]" with 1..8 digits
 * ("5." included, ".5" and "+5" not), as an integer w. @return : the token's entry of `tab`
 * (ctf__shape_f or ctf__shape_d), which says how to scale w, or NULL when the shape does not fit
 * or the bytes may not be read: 17 from s, below limit (the caller runs the full converter,
 * which also reports errors). */
static inline __attribute__((always_inline)) const ctf__shape *
CTF_V(ctf__tok_short)(const char *s, size_t len, const char *limit, bool roomy,
                      const ctf__shape *tab, uint32_t *w)
{
    /* roomy: the caller knows that 17 bytes may be read (a constant after inlining). */
    if (len - 1 > 9 || (!roomy && limit - s < 17)) return NULL; /* sign + 8 digits + '.' = 10 */
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)s);
    __m128i t = _mm_sub_epi8(v, _mm_set1_epi8('0'));
    const unsigned lm = (1u << len) - 1;
    const unsigned dm = (unsigned)_mm_movemask_epi8(
        _mm_cmpeq_epi8(_mm_min_epu8(t, _mm_set1_epi8(9)), t));
    if ((dm & lm) == lm) { /* an unsigned integer (all of integer data): no sign, no '.' */
        if (len > 8) return NULL;
        uint64_t a;
        memcpy(&a, s, 8);
        *w = ctf__digits_value(a, (unsigned)len);
        return &tab[ctf__shape_index(0, (unsigned)len, (unsigned)len)];
    }
    const unsigned neg = *s == '-';
    const unsigned dot = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8('.')));
    const unsigned dp = (unsigned)__builtin_ctz(dot | (1u << len)); /* len: no '.' */
    /* Every byte a digit but a leading '-' and the first '.' (a second '.' is a hole); the table
     * refuses the shapes without an integer digit or with more than 8 digits. */
    if (~(dm | neg | (1u << dp)) & lm) return NULL;
    const ctf__shape *sh = &tab[ctf__shape_index(neg, (unsigned)len, dp)];
    if (!sh->ctl) return NULL;
#if defined(__SSSE3__)
    /* The table's shuffle lines the digits up whatever the '.''s place and two multiply-adds
     * convert them (~25 instructions fewer than the loads, masks and SWAR steps below). */
    const __m128i ctl = _mm_loadl_epi64((const __m128i *)(const void *)&sh->ctl);
    const __m128i d2 = _mm_maddubs_epi16(_mm_shuffle_epi8(t, ctl),
                                         _mm_setr_epi8(10, 1, 10, 1, 10, 1, 10, 1, 10, 1, 10, 1, 10,
                                                       1, 10, 1));
    const __m128i d4 = _mm_madd_epi16(d2, _mm_setr_epi16(100, 1, 100, 1, 100, 1, 100, 1));
    const uint64_t q = (uint64_t)_mm_cvtsi128_si64(d4);
    *w = (uint32_t)q * 10000u + (uint32_t)(q >> 32);
#else
    /* The digits made contiguous: those before the '.' from one load, those after it from a load
     * one byte further on. */
    /* keep[i]: the low i bytes of a word (i = 0..8). */
    static const uint64_t keep_tab[9] = {0,
                                         0xFF,
                                         0xFFFF,
                                         0xFFFFFF,
                                         0xFFFFFFFF,
                                         0xFFFFFFFFFFULL,
                                         0xFFFFFFFFFFFFULL,
                                         0xFFFFFFFFFFFFFFULL,
                                         0xFFFFFFFFFFFFFFFFULL};
    uint64_t a, b;
    memcpy(&a, s + neg, 8);
    memcpy(&b, s + neg + 1, 8);
    const uint64_t keep = keep_tab[dp - neg]; /* integer digits, 1..8 */
    *w = ctf__digits_value((a & keep) | (b & ~keep), (unsigned)len - neg - (dp < len));
#endif
    return sh;
}


/* A whole token as one float / double: the fast shape, else the full converter, which must stop
 * exactly at the token's end (it never crosses a delimiter or '|'). @return : false = not a
 * number, or one beyond the precision's range (an infinity: the caller converts it again with
 * the reference converter, which says which, and warns of the infinity). */
static inline __attribute__((always_inline)) bool CTF_V(ctf__tok_float)(const char *s, size_t len,
                                                                        const char *end,
                                                                        const char *limit,
                                                                        bool roomy, float *out)
{
    /* k = (neg ? -1 : 1) / 10^m, rounded to double. w <= 2^24 and m <= 8 (the table holds
     * m <= 7): w * 10^-m in double, rounded to float, is the correctly rounded w / 10^m -- the
     * product's relative error (<= 2^-52) is below the smallest relative distance of such a
     * quotient from a float rounding boundary (>= 1 / (10^8 * 2^25) = 2^-51.6), and no such
     * quotient is a boundary itself; test_tokenize checks every w against each of the table's
     * factors, by the float division. A multiply instead
     * of a divide (the parse's hottest instruction), and the sign in the factor: a branch on it
     * mispredicts on half of the values of signed data, and applying it to the bits moved the
     * value through an integer register. */
    uint32_t w;
    const ctf__shape *sh = CTF_V(ctf__tok_short)(s, len, limit, roomy, ctf__shape_f, &w);
    if (__builtin_expect(sh && w <= (UINT32_C(1) << 24), 1)) {
        *out = (float)((double)w * sh->k);
        return true;
    }
    return ctf__parse_float(s, end, out) == s + len && !__builtin_isinf(*out);
}

static inline __attribute__((always_inline)) bool CTF_V(ctf__tok_double)(const char *s, size_t len,
                                                                         const char *end,
                                                                         const char *limit,
                                                                         bool roomy, double *out)
{
    /* k = (neg ? -1 : 1) * 10^m, exact: w / 10^m is one correctly rounded division
     * (w < 10^8 < 2^53), the sign in the divisor as above. */
    uint32_t w;
    const ctf__shape *sh = CTF_V(ctf__tok_short)(s, len, limit, roomy, ctf__shape_d, &w);
    if (__builtin_expect(sh != NULL, 1)) {
        *out = (double)w / sh->k;
        return true;
    }
    return ctf__parse_double(s, end, out) == s + len && !__builtin_isinf(*out);
}
