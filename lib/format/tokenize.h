/*
 * tokenize.h -- the parser's structural pass (SSE2): where the values of a sample start and end,
 * found 64 bytes at a time from byte masks; and the tables of the conversion of a value whose
 * length is known (tokenize_values.h, built once per instruction-set variant).
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
 * -DCTF_NO_SSE2 (make portable), parse.c keeps its byte loop; tests/parse_diff compares them.
 */
#ifndef CTF_TOKENIZE_H
#define CTF_TOKENIZE_H

#include "number_fast.h"

#if CTF_FAST_NUMBERS && defined(__SSE2__) && !defined(CTF_NO_SSE2)
#define CTF_TOKENIZE 1
#include <emmintrin.h>
#include <tmmintrin.h> /* usable without -mssse3 inside SSSE3-target code (GCC, Clang) */

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

/* The walk over one sample's values: the structural pass of the header comment, a block at a
 * time. ctf__walk_block classifies the next block; its values are then the value that ran into it
 * from earlier blocks and ends in it ([os, oe), when os is set) followed by one value per bit of
 * `starts` (ctf__walk_len gives each one's length). A value that reaches the block's last byte
 * while more bytes follow is not among the starts: it is carried (`open`) to the block where it
 * ends, a test made once per block rather than once per value. The first '|' ends the sample
 * (stop). The caller writes the loop over the starts itself, so that its conversions stay
 * inlined in a plain loop (an iterator returning one value per call was a state machine the
 * compiler kept partly in memory). */
typedef struct ctf__walk {
    const char *p, *end, *limit;
    size_t next;       /* offset of the next block from p */
    const char *blk;   /* the current block */
    const char *open;  /* start of a value that runs past the current block, or NULL */
    const char *stop;  /* the sample's end: its '|', else end */
    const char *os, *oe; /* a value from earlier blocks that ends in this one (os NULL: none) */
    uint64_t tok;      /* the current block's value bytes (cut at the '|') */
    uint64_t starts;   /* starts of the values that begin and end in the current block */
    uint64_t carry;    /* the byte before the current block belongs to a value */
    bool more;         /* bytes of the sample follow the current block */
    bool roomy;        /* 33 bytes may be read from every byte of the current block (limit) */
} ctf__walk;

static inline __attribute__((always_inline)) void ctf__walk_init(ctf__walk *w, const char *p,
                                                                 const char *end, const char *limit)
{
    w->p = p;
    w->end = end;
    w->limit = limit;
    w->next = 0;
    w->blk = p;
    w->open = NULL;
    w->stop = end;
    w->os = w->oe = NULL;
    w->tok = w->starts = w->carry = 0;
    w->more = p < end;
    w->roomy = false;
}

/* Classifies the next block. @return : false when the sample has no more blocks. */
static inline __attribute__((always_inline)) bool ctf__walk_block(ctf__walk *w)
{
    if (!w->more) return false;
    const char *const blk = w->p + w->next;
    w->next += 64;
    const size_t avail = (size_t)(w->end - blk);
    const ctf__block b = ctf__classify(blk, avail < 64 ? avail : 64, w->limit);
    uint64_t tok = b.tok;
    if (b.bar) {
        const unsigned c = (unsigned)__builtin_ctzll(b.bar);
        tok &= (UINT64_C(1) << c) - 1; /* c < 64 */
        w->stop = blk + c;
    }
    uint64_t starts = tok & ~((tok << 1) | w->carry);
    const bool more = avail > 64 && !b.bar;
    const char *const open = w->open;
    const bool through = more && tok == ~UINT64_C(0); /* a value runs on past this block */
    w->os = NULL;
    if (open && !through) { /* the carried value ends here: at the first non-value byte */
        w->os = open;
        w->oe = blk + (~tok ? (unsigned)__builtin_ctzll(~tok) : 64);
    }
    if (through) {
        if (!open) w->open = blk; /* it starts here (bit 0 of starts) */
        starts = 0;
    } else if (tok == ~UINT64_C(0) && !open) {
        /* The sample's last block, one value filling it from its first byte: given as
         * [os, oe), so that every start of `starts` has a non-value byte after it in the block
         * (ctf__walk_len). */
        w->os = blk;
        w->oe = blk + 64;
        starts = 0;
        w->open = NULL;
    } else if (more && (tok >> 63)) {
        /* The last value runs into the next block: it starts after the last non-value byte
         * (bit 63 is a value byte, so that byte is at most bit 62). */
        const unsigned at = 64 - (unsigned)__builtin_clzll(~tok);
        starts &= ~(UINT64_C(1) << at);
        w->open = blk + at;
    } else {
        w->open = NULL;
    }
    w->blk = blk;
    w->roomy = w->limit - blk >= 64 + 32;
    w->tok = tok;
    w->starts = starts;
    w->carry = tok >> 63;
    w->more = more;
    return true;
}

/* The length of the value starting at bit i of the current block (a bit of starts): the run of
 * value bits from there, so the values of a block do not wait on each other. */
static inline __attribute__((always_inline)) size_t ctf__walk_len(uint64_t tok, unsigned i)
{
    /* Not 0: ~(tok >> i) has ones above bit 63 - i, and a start at bit 0 of an all-value block
     * is not among the starts (ctf__walk_block). */
    return (size_t)(unsigned)__builtin_ctzll(~(tok >> i));
}

/* The shapes of the fast converter (tokenize_values.h): for a token of `len` bytes (1..10), with
 * or without a leading '-', whose first '.' is at `dp` (dp = len: none), the entry at
 * ctf__shape_index(neg, len, dp) holds what converting it takes once its digits w are known --
 * the value is w * k (float table) or w / k (double table) -- and the pshufb control of the SSSE3
 * converter, which puts the token's digits, in order, at the end of the low 8 bytes and zeros
 * (0x80) before them. ctl = 0 marks a shape the fast path does not take (no integer digit, as in
 * ".5" or "-", or more than 8 digits): a table lookup instead of the tests on the token's
 * digit counts. Constant expressions, so the tables are data. */
typedef struct ctf__shape {
    uint64_t ctl; /* pshufb control; 0: not a fast shape */
    double k;     /* float table: (neg ? -1 : 1) / 10^m; double table: (neg ? -1 : 1) * 10^m */
} ctf__shape;

static inline __attribute__((always_inline)) unsigned ctf__shape_index(unsigned neg, unsigned len,
                                                                       unsigned dp)
{
    return (neg << 8) | (len << 4) | dp;
}

/* For an unsigned token of L bytes whose first non-digit is at I (I = L: none; else the '.'):
 * the byte of the control at K, past a sign of S bytes. */
#define CTF__ND(L, I) ((L) - ((I) < (L)))
#define CTF__J(L, I, K) ((K) - (8 - CTF__ND(L, I)))
#define CTF__POS(L, I, K, S) \
    ((uint64_t)(CTF__J(L, I, K) < 0 \
                    ? 0x80 \
                    : (S) + (CTF__J(L, I, K) < (I) ? CTF__J(L, I, K) : CTF__J(L, I, K) + 1)) \
     << (8 * (K)))
#define CTF__SHUF(L, I, S) \
    (CTF__POS(L, I, 0, S) | CTF__POS(L, I, 1, S) | CTF__POS(L, I, 2, S) | CTF__POS(L, I, 3, S) | \
     CTF__POS(L, I, 4, S) | CTF__POS(L, I, 5, S) | CTF__POS(L, I, 6, S) | CTF__POS(L, I, 7, S))
/* Token (sign N, length L, '.' at D) is a fast shape: an integer digit, at most 8 digits. */
#define CTF__OK(N, L, D) \
    ((L) >= 1 && (L) <= 10 && (D) >= (N) + 1 && (D) <= (L) && CTF__ND((L) - (N), (D) - (N)) <= 8)
#define CTF__FM(L, D) ((D) < (L) ? (L) - (D) - 1 : 0) /* fraction digits */
#define CTF__P10(M) \
    ((M) == 0   ? 1e0 \
     : (M) == 1 ? 1e1 \
     : (M) == 2 ? 1e2 \
     : (M) == 3 ? 1e3 \
     : (M) == 4 ? 1e4 \
     : (M) == 5 ? 1e5 \
     : (M) == 6 ? 1e6 \
     : (M) == 7 ? 1e7 \
                : 1e8)
#define CTF__P10N(M) \
    ((M) == 0   ? 1e0 \
     : (M) == 1 ? 1e-1 \
     : (M) == 2 ? 1e-2 \
     : (M) == 3 ? 1e-3 \
     : (M) == 4 ? 1e-4 \
     : (M) == 5 ? 1e-5 \
     : (M) == 6 ? 1e-6 \
     : (M) == 7 ? 1e-7 \
                : 1e-8)
#define CTF__SHAPE(N, L, D, P) \
    {CTF__OK(N, L, D) ? CTF__SHUF((L) - (N), (D) - (N), N) : 0, \
     CTF__OK(N, L, D) ? ((N) ? -1.0 : 1.0) * P(CTF__FM(L, D)) : 0.0}
#define CTF__SHAPE_ROW(N, L, P) \
    CTF__SHAPE(N, L, 0, P), CTF__SHAPE(N, L, 1, P), CTF__SHAPE(N, L, 2, P), \
        CTF__SHAPE(N, L, 3, P), CTF__SHAPE(N, L, 4, P), CTF__SHAPE(N, L, 5, P), \
        CTF__SHAPE(N, L, 6, P), CTF__SHAPE(N, L, 7, P), CTF__SHAPE(N, L, 8, P), \
        CTF__SHAPE(N, L, 9, P), CTF__SHAPE(N, L, 10, P), CTF__SHAPE_NONE, CTF__SHAPE_NONE, \
        CTF__SHAPE_NONE, CTF__SHAPE_NONE, CTF__SHAPE_NONE
#define CTF__SHAPE_NONE {0, 0.0}
#define CTF__SHAPE_NONE16 \
    CTF__SHAPE_NONE, CTF__SHAPE_NONE, CTF__SHAPE_NONE, CTF__SHAPE_NONE, CTF__SHAPE_NONE, \
        CTF__SHAPE_NONE, CTF__SHAPE_NONE, CTF__SHAPE_NONE, CTF__SHAPE_NONE, CTF__SHAPE_NONE, \
        CTF__SHAPE_NONE, CTF__SHAPE_NONE, CTF__SHAPE_NONE, CTF__SHAPE_NONE, CTF__SHAPE_NONE, \
        CTF__SHAPE_NONE
#define CTF__SHAPE_TAB(N, P) \
    CTF__SHAPE_ROW(N, 0, P), CTF__SHAPE_ROW(N, 1, P), CTF__SHAPE_ROW(N, 2, P), \
        CTF__SHAPE_ROW(N, 3, P), CTF__SHAPE_ROW(N, 4, P), CTF__SHAPE_ROW(N, 5, P), \
        CTF__SHAPE_ROW(N, 6, P), CTF__SHAPE_ROW(N, 7, P), CTF__SHAPE_ROW(N, 8, P), \
        CTF__SHAPE_ROW(N, 9, P), CTF__SHAPE_ROW(N, 10, P), CTF__SHAPE_NONE16, CTF__SHAPE_NONE16, \
        CTF__SHAPE_NONE16, CTF__SHAPE_NONE16, CTF__SHAPE_NONE16
static const ctf__shape ctf__shape_f[512]
    __attribute__((aligned(64))) = {CTF__SHAPE_TAB(0, CTF__P10N), CTF__SHAPE_TAB(1, CTF__P10N)};
static const ctf__shape ctf__shape_d[512]
    __attribute__((aligned(64))) = {CTF__SHAPE_TAB(0, CTF__P10), CTF__SHAPE_TAB(1, CTF__P10)};

/* An SSSE3 build of the value converters next to the SSE2 one, chosen at run time
 * (parse.c): GCC's target pragma, which also defines __SSSE3__ for the code after it. Clang
 * ignores that pragma; there the variant is the SSE2 code again. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SSSE3__)
#define CTF_SSSE3_VARIANT 1
#else
#define CTF_SSSE3_VARIANT 0
#endif
#else
#define CTF_TOKENIZE 0
#endif

#endif /* CTF_TOKENIZE_H */
