/*
 * parse_values.h -- the hot loops of parse.c (the values of a dense sample, the entries of a
 * sparse one) for one instruction-set variant: parse.c includes it once per variant, with
 * CTF_V(name) naming this variant's copies (x##_sse2, then x##_ssse3 after a target pragma), and
 * picks a variant at run time. A part of parse.c (its types and out-of-line paths), not a header
 * of its own: no include guard, on purpose.
 */
#if !CTF_TOKENIZE || !defined(CTF_V)
#error "parse_values.h: included by parse.c only"
#endif

#include "tokenize_values.h"

/* One value [s, e) of a dense sample, stored at dst[*n] (the buffer has one slot of slack past
 * dim, so the store need not wait for the count test). `elt` is a constant after inlining.
 * @return : false after recording an error (not a number, or one value too many), or after a
 * value out of range was stored (dense_value_refused; parse_dense goes on after it). */
static inline __attribute__((always_inline)) bool
CTF_V(dense_value)(pstate *ps, const ctf_stream_def *def, char *dst, size_t *n, const char *s,
                   size_t len, const char *end, const char *limit, bool roomy, size_t elt,
                   size_t dim)
{
    bool ok;
    /* Typed stores (not memcpy through char *), so that nothing the loop keeps in registers
     * has to be reloaded after each value. */
    if (elt == 4) {
        float v;
        ok = CTF_V(ctf__tok_float)(s, len, end, limit, roomy, &v);
        ((float *)(void *)dst)[*n] = v;
    } else {
        double v;
        ok = CTF_V(ctf__tok_double)(s, len, end, limit, roomy, &v);
        ((double *)(void *)dst)[*n] = v;
    }
    if (__builtin_expect(!ok, 0)) {
        dense_value_refused(ps, def, dst, *n, s, end, elt);
        return false;
    }
    if (__builtin_expect(++*n > dim, 0)) {
        too_many_values(ps, def, s);
        return false;
    }
    return true;
}

/* The values of the current block of a walk that begin and end in it (its starts). roomy: every
 * one may be read 33 bytes ahead (w->roomy, a constant after inlining: the loop exists once with
 * the read-ahead tests and once without). @return : false after recording an error. */
static inline __attribute__((always_inline)) bool
CTF_V(dense_starts)(pstate *ps, const ctf_stream_def *def, char *dst, size_t *n, const ctf__walk *w,
                    const char *end, bool roomy, size_t elt, size_t dim)
{
    const char *const blk = w->blk;
    const uint64_t tok = w->tok;
    for (uint64_t st = w->starts; st; st &= st - 1) {
        const unsigned i = (unsigned)__builtin_ctzll(st);
        if (!CTF_V(dense_value)(ps, def, dst, n, blk + i, ctf__walk_len(tok, i), end, w->limit,
                                roomy, elt, dim))
            return false;
    }
    return true;
}

/* The values of a dense sample from p (after its name) to its '|' or the row's end, found by
 * the structural walk of tokenize.h. @return : the sample's end, or NULL after recording an
 * error. */
static inline __attribute__((always_inline)) const char *
CTF_V(dense_values)(pstate *ps, const ctf_stream_def *def, char *dst, size_t *np, const char *p,
                    const char *end, size_t elt)
{
    const char *const limit = ps->limit;
    const size_t dim = def->dim;
    size_t n = *np; /* 0, or the values before p when parse_dense resumes a sample */
    ctf__walk w;
    ctf__walk_init(&w, p, end, limit);
    while (ctf__walk_block(&w)) {
        if (w.os && !CTF_V(dense_value)(ps, def, dst, &n, w.os, (size_t)(w.oe - w.os), end, limit,
                                        false, elt, dim))
            return NULL;
        if (!(w.roomy ? CTF_V(dense_starts)(ps, def, dst, &n, &w, end, true, elt, dim)
                      : CTF_V(dense_starts)(ps, def, dst, &n, &w, end, false, elt, dim)))
            return NULL;
    }
    *np = n;
    return w.stop;
}

/* One entry [s, e) found by the structural pass: "digits:number" with at most 8 index digits in
 * the fast shapes of tokenize.h, a new largest index and room in the buffers is stored here;
 * anything else (and any error) goes to sparse_store / sparse_entry, which stops at e when it
 * succeeds (an entry never crosses a delimiter or '|'). @return : false after an error. */
static inline __attribute__((always_inline)) bool
CTF_V(sparse_token)(pstate *ps, sparse_run *sr, sparse_hot *h, const char *s, const char *e,
                    const char *end, const char *limit, bool roomy, size_t elt)
{
    float f = 0.0f;
    double d = 0.0;
    uint64_t index = 0;
    bool ok = false;
    /* 17 bytes from the value too: it starts at most 9 bytes further on */
    if (roomy || limit - s >= 17 + 9) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)s);
        __m128i t = _mm_sub_epi8(v, _mm_set1_epi8('0'));
        const unsigned dm = (unsigned)_mm_movemask_epi8(
            _mm_cmpeq_epi8(_mm_min_epu8(t, _mm_set1_epi8(9)), t));
        const unsigned k = (unsigned)__builtin_ctz(~dm); /* index digits */
        const char *vs = s + k + 1;
        if (k - 1 < 8 && s[k] == ':' && vs < e) {
            uint64_t a;
            memcpy(&a, s, 8);
            index = ctf__digits_value(a, k);
            const size_t vlen = (size_t)(e - vs);
            const unsigned dg = (unsigned)(unsigned char)*vs - '0';
            if (vlen == 1 && dg < 10) { /* "i:1" */
                f = (float)dg;
                d = (double)dg;
                ok = true;
            } else if (elt == 4) {
                ok = CTF_V(ctf__tok_float)(vs, vlen, end, limit, true, &f);
            } else {
                ok = CTF_V(ctf__tok_double)(vs, vlen, end, limit, true, &d);
            }
            ok = ok && index < sr->def->dim;
        }
    }
    if (__builtin_expect(ok && h->nnz < h->cap && (int64_t)index > h->last, 1)) {
        if (elt == 4)
            ((float *)h->values)[h->nnz] = f;
        else
            ((double *)h->values)[h->nnz] = d;
        h->indices[h->nnz++] = (int32_t)index;
        h->last = (int64_t)index;
        return true;
    }
    sr->sd->nnz = h->nnz;
    sr->last = h->last;
    const bool done = ok ? sparse_store(ps, sr, index, f, d, elt, s)
                         : sparse_entry(ps, sr, s, end) != NULL;
    hot_load(h, sr);
    return done;
}

/* The entries of the current block of a walk that begin and end in it, as dense_starts. */
static inline __attribute__((always_inline)) bool
CTF_V(sparse_starts)(pstate *ps, sparse_run *sr, sparse_hot *h, const ctf__walk *w, const char *end,
                     bool roomy, size_t elt)
{
    const char *const blk = w->blk;
    const uint64_t tok = w->tok;
    for (uint64_t st = w->starts; st; st &= st - 1) {
        const unsigned i = (unsigned)__builtin_ctzll(st);
        if (!CTF_V(sparse_token)(ps, sr, h, blk + i, blk + i + ctf__walk_len(tok, i), end, w->limit,
                                 roomy, elt))
            return false;
    }
    return true;
}

/* The entries of a sparse sample: the same block walk as dense_values. @return : the sample's
 * end, or NULL after recording an error. */
static inline __attribute__((always_inline)) const char *
CTF_V(sparse_values)(pstate *ps, sparse_run *sr, const char *p, const char *end, size_t elt)
{
    const char *const limit = ps->limit;
    sparse_hot h;
    hot_load(&h, sr);
    ctf__walk w;
    ctf__walk_init(&w, p, end, limit);
    while (ctf__walk_block(&w)) {
        if (w.os && !CTF_V(sparse_token)(ps, sr, &h, w.os, w.oe, end, limit, false, elt))
            return NULL;
        if (!(w.roomy ? CTF_V(sparse_starts)(ps, sr, &h, &w, end, true, elt)
                      : CTF_V(sparse_starts)(ps, sr, &h, &w, end, false, elt)))
            return NULL;
    }
    sr->sd->nnz = h.nnz;
    sr->last = h.last;
    return w.stop;
}

/* The entry points a variant table holds (elt = 4: float, 8: double), out of line. */
static const char *CTF_V(dense_f32)(pstate *ps, const ctf_stream_def *def, char *dst, size_t *np,
                                    const char *p, const char *end)
{
    return CTF_V(dense_values)(ps, def, dst, np, p, end, 4);
}

static const char *CTF_V(dense_f64)(pstate *ps, const ctf_stream_def *def, char *dst, size_t *np,
                                    const char *p, const char *end)
{
    return CTF_V(dense_values)(ps, def, dst, np, p, end, 8);
}

static const char *CTF_V(sparse_f32)(pstate *ps, sparse_run *sr, const char *p, const char *end)
{
    return CTF_V(sparse_values)(ps, sr, p, end, 4);
}

static const char *CTF_V(sparse_f64)(pstate *ps, sparse_run *sr, const char *p, const char *end)
{
    return CTF_V(sparse_values)(ps, sr, p, end, 8);
}
