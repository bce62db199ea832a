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
 * `starts` (ctf__walk_end gives each one's end). A value that reaches the block's last byte while
 * more bytes follow is not among the starts: it is carried (`open`) to the block where it ends,
 * a test made once per block rather than once per value. The first '|' ends the sample (stop).
 * The caller writes the loop over the starts itself, so that its conversions stay inlined in a
 * plain loop (an iterator returning one value per call was a state machine the compiler kept
 * partly in memory). */
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
    w->os = w->oe = NULL;
    w->tok = w->starts = w->carry = 0;
    w->more = p < end;
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
    w->tok = tok;
    w->starts = starts;
    w->carry = tok >> 63;
    w->more = more;
    return true;
}

/* The end of the value starting at bit i of the current block (a bit of starts). */
static inline __attribute__((always_inline)) const char *ctf__walk_end(const char *blk,
                                                                       uint64_t tok, unsigned i)
{
    /* tok >> i has zeros above bit 63 - i, so rest is 0 only for a value filling the whole
     * last block from byte 0 (ctz of 0 is undefined: bsf leaves garbage). The length is the run
     * of value bits from the start: the values of a block do not wait on each other. */
    const uint64_t rest = ~(tok >> i);
    return blk + i + (rest ? (unsigned)__builtin_ctzll(rest) : 64);
}

/* Scale factors of the converters of tokenize_values.h, indexed [negative][fraction digits]. */
static const double ctf__scale_f[2][9] = {
    {1e0, 1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8},
    {-1e0, -1e-1, -1e-2, -1e-3, -1e-4, -1e-5, -1e-6, -1e-7, -1e-8}};
static const double ctf__pow10_d[2][9] = {{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8},
                                          {-1e0, -1e1, -1e2, -1e3, -1e4, -1e5, -1e6, -1e7, -1e8}};

/* The digit shuffle of the SSSE3 converter: for an unsigned token of L bytes (L <= 9) whose
 * first non-digit is at I (I = L: none; else the '.'), the pshufb control that puts its digits,
 * in order, at the end of the low 8 bytes and zeros (0x80) before them; [1]: the same past a
 * sign byte. Constant expressions, so the table is data; entries of impossible shapes (I > L,
 * more than 8 digits) are all 0x80. */
#define CTF__ND(L, I) ((L) - ((I) < (L)))
#define CTF__J(L, I, K) ((K) - (8 - CTF__ND(L, I)))
#define CTF__POS(L, I, K, S)                                                                    \
    ((uint64_t)(CTF__J(L, I, K) < 0 ? 0x80                                                      \
                : (S) + (CTF__J(L, I, K) < (I) ? CTF__J(L, I, K) : CTF__J(L, I, K) + 1))        \
     << (8 * (K)))
#define CTF__SHUF(L, I, S)                                                                      \
    ((I) > (L) || CTF__ND(L, I) > 8 ? UINT64_C(0x8080808080808080)                              \
                                    : CTF__POS(L, I, 0, S) | CTF__POS(L, I, 1, S) |             \
                                          CTF__POS(L, I, 2, S) | CTF__POS(L, I, 3, S) |         \
                                          CTF__POS(L, I, 4, S) | CTF__POS(L, I, 5, S) |         \
                                          CTF__POS(L, I, 6, S) | CTF__POS(L, I, 7, S))
#define CTF__SHUF_ROW(L, S)                                                                     \
    CTF__SHUF(L, 0, S), CTF__SHUF(L, 1, S), CTF__SHUF(L, 2, S), CTF__SHUF(L, 3, S),            \
        CTF__SHUF(L, 4, S), CTF__SHUF(L, 5, S), CTF__SHUF(L, 6, S), CTF__SHUF(L, 7, S),        \
        CTF__SHUF(L, 8, S), CTF__SHUF(L, 9, S)
#define CTF__SHUF_TAB(S)                                                                        \
    {CTF__SHUF_ROW(0, S), CTF__SHUF_ROW(1, S), CTF__SHUF_ROW(2, S), CTF__SHUF_ROW(3, S),       \
     CTF__SHUF_ROW(4, S), CTF__SHUF_ROW(5, S), CTF__SHUF_ROW(6, S), CTF__SHUF_ROW(7, S),       \
     CTF__SHUF_ROW(8, S), CTF__SHUF_ROW(9, S)}
static const uint64_t ctf__digit_shuf[2][100] = {CTF__SHUF_TAB(0), CTF__SHUF_TAB(1)};

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
