/*
 * cbf_build.c -- parsed sequences into the bytes of one CBF chunk: the encoder that both the
 * converter (convert/cbf_write.c, ctf2bin's output) and the chunk store (source/chunkstore.c,
 * a parsed chunk kept for later sweeps) write with, so that there is one chunk layout in code.
 *
 * A chunk is one uint32 length per sequence, then stream after stream (docs/cbf.md). Sequences
 * are appended one by one; the lengths and each stream's bytes grow in buffers of their own and
 * are put one after another when the chunk is taken. The converter asks for ctf2bin's sparse
 * order (sorted by index within a sample) and its rounding of doubles to floats; the chunk
 * store keeps the parse's own order and bytes, so that decoding gives back exactly the parse.
 */
#include "format/format.h"

int ctf__cbf_put(ctf__cbf_bytes *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        unsigned char *q = CTF_REALLOC(b->p, cap);
        if (!q) return CTF_ENOMEM;
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

int ctf__cbf_put32(ctf__cbf_bytes *b, uint32_t v)
{
    unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    return ctf__cbf_put(b, x, 4);
}

int ctf__cbf_put64(ctf__cbf_bytes *b, uint64_t v)
{
    return ctf__cbf_put32(b, (uint32_t)v) || ctf__cbf_put32(b, (uint32_t)(v >> 32));
}

/* Value x of sd (elt bytes each) written at the chunk's precision: the bytes themselves when
 * the precisions agree (a NaN's payload included), else converted as C converts. */
static int put_value(ctf__cbf_build *b, ctf__cbf_bytes *out, const void *values, size_t elt,
                     size_t x)
{
    const unsigned char *src = (const unsigned char *)values + x * elt;
    if (elt == (size_t)b->prec) {
        if (elt == 8) {
            uint64_t u;
            memcpy(&u, src, 8);
            return ctf__cbf_put64(out, u);
        }
        uint32_t u;
        memcpy(&u, src, 4);
        return ctf__cbf_put32(out, u);
    }
    if (b->prec == CTF_FLOAT64) {
        float f;
        memcpy(&f, src, 4);
        double d = f;
        uint64_t u;
        memcpy(&u, &d, 8);
        return ctf__cbf_put64(out, u);
    }
    double d;
    memcpy(&d, src, 8);
    float f = (float)d;
    uint32_t u;
    memcpy(&u, &f, 4);
    return ctf__cbf_put32(out, u);
}

static bool little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

static int put_zero(ctf__cbf_build *b, ctf__cbf_bytes *out)
{
    return b->prec == CTF_FLOAT64 ? ctf__cbf_put64(out, 0) : ctf__cbf_put32(out, 0);
}

static int cmp_pair(const void *a, const void *b)
{
    const ctf__cbf_pair *x = a, *y = b;
    return x->ind != y->ind ? (x->ind < y->ind ? -1 : 1) : (x->at < y->at ? -1 : x->at > y->at);
}

/* One sparse stream entry of a sequence: count, nnz, values, indices, per-sample counts. */
static int put_sparse(ctf__cbf_build *b, ctf__cbf_bytes *out, const ctf__stream_data *sd,
                      size_t elt, ctf__slice sl)
{
    const int64_t lo = sd->indptr[sl.first], hi = sd->indptr[sl.first + sl.count];
    if (hi - lo > INT32_MAX) return CTF_ELIMIT;
    if (ctf__cbf_put32(out, (uint32_t)(hi - lo))) return CTF_ENOMEM;
    const size_t need = (size_t)(hi - lo);
    if (need > b->pairs_cap) {
        void *q = CTF_REALLOC(b->pairs, need * sizeof *b->pairs);
        if (!q) return CTF_ENOMEM;
        b->pairs = q;
        b->pairs_cap = need;
    }
    ctf__cbf_pair *pr = b->pairs;
    for (uint32_t t = sl.first; t < sl.first + sl.count; t++) {
        const int64_t a = sd->indptr[t], e = sd->indptr[t + 1];
        for (int64_t x = a; x < e; x++)
            pr[x - lo] = (ctf__cbf_pair){sd->indices[x], (uint32_t)(x - a)};
        if (b->sort && e - a > 1) qsort(pr + (a - lo), (size_t)(e - a), sizeof *pr, cmp_pair);
        for (int64_t x = a; x < e; x++)
            if (put_value(b, out, sd->values, elt, (size_t)a + pr[x - lo].at)) return CTF_ENOMEM;
    }
    for (int64_t x = lo; x < hi; x++)
        if (ctf__cbf_put32(out, (uint32_t)pr[x - lo].ind)) return CTF_ENOMEM;
    for (uint32_t t = sl.first; t < sl.first + sl.count; t++)
        if (ctf__cbf_put32(out, (uint32_t)(sd->indptr[t + 1] - sd->indptr[t]))) return CTF_ENOMEM;
    b->nonzeros += (uint64_t)(hi - lo);
    return 0;
}

int ctf__cbf_build_seq(ctf__cbf_build *b, const ctf__chunk_data *cd, size_t i)
{
    const size_t ns = b->num_streams;
    uint32_t len = 0;
    for (size_t k = 0; k < ns; k++) len = CTF_MAX(len, cd->slices[i * ns + k].count);
    if (ctf__cbf_put32(&b->lens, len)) return CTF_ENOMEM;
    for (size_t k = 0; k < ns; k++) {
        const ctf_stream_def *d = &b->streams[k];
        const ctf__stream_data *sd = &cd->streams[k];
        const ctf__slice sl = cd->slices[i * ns + k];
        ctf__cbf_bytes *out = &b->st[k];
        if (ctf__cbf_put32(out, sl.count)) return CTF_ENOMEM;
        if (d->is_sparse) {
            int rc = put_sparse(b, out, sd, cd->elt, sl);
            if (rc) return rc;
            continue;
        }
        /* The parse's own bytes are the file's (little-endian, same precision, every sample
         * full): the slice in one copy. */
        if (!sd->dense_off && cd->elt == (size_t)b->prec && little_endian()) {
            const size_t row = d->dim * cd->elt;
            if (ctf__cbf_put(out, (const char *)sd->values + (size_t)sl.first * row,
                             (size_t)sl.count * row))
                return CTF_ENOMEM;
            continue;
        }
        for (uint32_t t = sl.first; t < sl.first + sl.count; t++) {
            const size_t at = ctf__dense_at(sd, d->dim, t), n = ctf__dense_len(sd, d->dim, t);
            for (size_t x = 0; x < d->dim; x++)
                if (x < n ? put_value(b, out, sd->values, cd->elt, at + x) : put_zero(b, out))
                    return CTF_ENOMEM;
        }
    }
    b->seqs++;
    b->samples += len;
    return 0;
}

uint64_t ctf__cbf_build_size(const ctf__cbf_build *b)
{
    uint64_t n = b->lens.len;
    for (size_t k = 0; k < b->num_streams; k++) n += b->st[k].len;
    return n;
}

int ctf__cbf_build_take(ctf__cbf_build *b, ctf__cbf_bytes *out)
{
    int rc = ctf__cbf_put(out, b->lens.p, b->lens.len);
    for (size_t k = 0; !rc && k < b->num_streams; k++)
        rc = ctf__cbf_put(out, b->st[k].p, b->st[k].len);
    ctf__cbf_build_reset(b);
    return rc;
}

void ctf__cbf_build_reset(ctf__cbf_build *b)
{
    b->lens.len = 0;
    for (size_t k = 0; k < b->num_streams; k++) b->st[k].len = 0;
    b->seqs = 0;
    b->samples = 0;
}

void ctf__cbf_build_free(ctf__cbf_build *b)
{
    CTF_FREE(b->lens.p);
    for (size_t k = 0; k < CTF_MAX_STREAMS; k++) CTF_FREE(b->st[k].p);
    CTF_FREE(b->pairs);
    memset(b, 0, sizeof *b);
}
