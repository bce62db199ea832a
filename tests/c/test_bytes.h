/*
 * test_bytes.h -- a growing byte string and the serialization of delivered sequences, for tests
 * that compare two runs byte for byte (other minibatch sizes, a restore, other thread counts,
 * copies in parts): key, then per stream its length and its dense values or sparse entries.
 */
#ifndef CTF_TEST_BYTES_H
#define CTF_TEST_BYTES_H

#include "ctfio.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

typedef struct bytes {
    unsigned char *p;
    size_t n, cap;
} bytes;

static inline void b_add(bytes *b, const void *d, size_t n)
{
    if (b->n + n > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n) c *= 2;
        unsigned char *q = realloc(b->p, c);
        if (!q) abort();
        b->p = q;
        b->cap = c;
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}

static inline void b_free(bytes *b)
{
    free(b->p);
    *b = (bytes){0};
}

static inline bool b_eq(const bytes *a, const bytes *b)
{
    return a->n == b->n && (a->n == 0 || memcmp(a->p, b->p, a->n) == 0);
}

/* Serializes sequence i of mb: key, then per stream its length and its data. */
static inline void append_seq(bytes *b, const ctf_minibatch *mb, size_t i)
{
    b_add(b, &ctf_minibatch_keys(mb)[i], 8);
    for (size_t k = 0; k < ctf_minibatch_num_streams(mb); k++) {
        ctf_stream_view v;
        if (ctf_minibatch_stream(mb, k, &v)) abort();
        size_t first = 0, elt = (size_t)v.precision;
        for (size_t j = 0; j < i; j++) first += v.lengths[j];
        uint32_t len = v.lengths[i];
        b_add(b, &len, sizeof len);
        if (!v.is_sparse) {
            b_add(b, (const char *)v.values + first * v.dim * elt, (size_t)len * v.dim * elt);
            continue;
        }
        for (size_t s = first; s < first + len; s++) {
            int64_t lo = v.indptr[s], hi = v.indptr[s + 1], cnt = hi - lo;
            b_add(b, &cnt, sizeof cnt);
            b_add(b, v.indices + lo, (size_t)cnt * sizeof *v.indices);
            b_add(b, (const char *)v.values + (size_t)lo * elt, (size_t)cnt * elt);
        }
    }
}

#endif /* CTF_TEST_BYTES_H */
