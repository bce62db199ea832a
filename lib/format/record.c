/*
 * record.c -- samples that user code hands over (PaddlePaddle-style providers) as compact,
 * self-describing records, and the packing of a list of records into one batch's arrays.
 * The writer side is for whoever converts the user's objects (the Python extension); the
 * packer trusts nothing it reads: every record is checked against the slots before a byte is
 * copied, so a damaged or foreign record is an error, never an out-of-bounds read.
 *
 * Layout (native byte order; every section starts 8-byte aligned):
 *   uint32 magic "CTFP", uint32 flags (bit 0: values are double), uint64 nslots,
 *   uint64 offset[nslots] of each slot's section from the record start, then the sections:
 *   int64 steps T, int64 sub-sequences S (0 unless a sub-sequence slot), int32 dim,
 *   uint8 kind, uint8 seq, 2 bytes zero, int64 sub_length[S], then the payload:
 *     dense    T * dim values (float or double), padded to 8 bytes;
 *     integer  T int64;
 *     sparse   per step: int64 nnz, int32 index[nnz] padded to 8, then for valued sparse
 *              value[nnz] padded to 8.
 */
#include "format/format.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define REC_MAGIC 0x50544643u /* "CTFP" read as little-endian bytes */
#define REC_HEADER 16         /* magic, flags, nslots */
#define REC_SECTION 24        /* steps, subs, dim, kind, seq, padding */

static size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

static int64_t get_i64(const char *p)
{
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t get_u64(const char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static void put_i64(char *p, int64_t v) { memcpy(p, &v, sizeof v); }

/*======================================================================
 * Writing
 *====================================================================*/

void ctf_record_writer_init(ctf_record_writer *w, void *stack, size_t cap)
{
    w->p = stack;
    w->len = 0;
    w->cap = stack ? cap : 0;
    w->stack = stack;
    w->stack_cap = w->cap;
    w->section = 0;
    w->dbl = false;
}

void ctf_record_writer_free(ctf_record_writer *w)
{
    if (w->p != w->stack) CTF_FREE(w->p);
    ctf_record_writer_init(w, w->stack, w->stack_cap);
}

size_t ctf_record_grow(ctf_record_writer *w, size_t n)
{
    if (n > w->cap - w->len) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap - w->len < n) {
            if (cap > SIZE_MAX / 4) return SIZE_MAX;
            cap *= 2;
        }
        char *p = w->p == w->stack ? CTF_MALLOC(cap) : CTF_REALLOC(w->p, cap);
        if (!p) return SIZE_MAX;
        if (w->p == w->stack && w->len) memcpy(p, w->p, w->len);
        w->p = p;
        w->cap = cap;
    }
    const size_t at = w->len;
    if (n) memset(w->p + at, 0, n);
    w->len += n;
    return at;
}

static int pad8(ctf_record_writer *w)
{
    return ctf_record_grow(w, round8(w->len) - w->len) == SIZE_MAX ? CTF_ENOMEM : 0;
}

int ctf_record_begin(ctf_record_writer *w, size_t nslots, bool dbl)
{
    w->len = 0;
    w->dbl = dbl;
    if (nslots < 1 || nslots > CTF_MAX_SLOTS) return CTF_EINVAL;
    if (ctf_record_grow(w, REC_HEADER + nslots * sizeof(uint64_t)) == SIZE_MAX) return CTF_ENOMEM;
    const uint32_t magic = REC_MAGIC, flags = dbl ? 1u : 0u;
    const uint64_t n = nslots;
    memcpy(w->p, &magic, 4);
    memcpy(w->p + 4, &flags, 4);
    memcpy(w->p + 8, &n, 8);
    return 0;
}

int ctf_record_section_begin(ctf_record_writer *w, size_t k)
{
    const uint64_t off = w->len;
    memcpy(w->p + REC_HEADER + k * sizeof off, &off, sizeof off);
    w->section = w->len;
    return ctf_record_grow(w, REC_SECTION) == SIZE_MAX ? CTF_ENOMEM : 0;
}

int ctf_record_section_end(ctf_record_writer *w, const ctf_slot *slot, int64_t steps, int64_t subs)
{
    if (pad8(w)) return CTF_ENOMEM;
    char *h = w->p + w->section;
    const int32_t dim = (int32_t)slot->dim;
    const uint8_t kind = (uint8_t)slot->kind, seq = (uint8_t)slot->seq;
    put_i64(h, steps);
    put_i64(h + 8, subs);
    memcpy(h + 16, &dim, sizeof dim);
    memcpy(h + 20, &kind, 1);
    memcpy(h + 21, &seq, 1);
    return 0;
}

size_t ctf_record_sparse_step(ctf_record_writer *w, size_t nnz, bool valued, size_t *values)
{
    const size_t elt = w->dbl ? sizeof(double) : sizeof(float);
    if (nnz > (SIZE_MAX / 4 - 64) / (sizeof(int32_t) + elt)) return SIZE_MAX;
    const size_t at = ctf_record_grow(w, 8 + round8(nnz * sizeof(int32_t)));
    if (at == SIZE_MAX) return SIZE_MAX;
    put_i64(w->p + at, (int64_t)nnz);
    *values = 0;
    if (valued && (*values = ctf_record_grow(w, round8(nnz * elt))) == SIZE_MAX) return SIZE_MAX;
    return at + 8;
}

/* Converts n items of type T at src to float or double at dst. */
#define CONVERT(T) \
    for (size_t i = 0; i < n; i++) { \
        T x; \
        memcpy(&x, src + i * sizeof x, sizeof x); \
        if (dbl) { \
            const double d = (double)x; \
            memcpy(dst + i * sizeof d, &d, sizeof d); \
        } else { \
            const float f = (float)x; \
            memcpy(dst + i * sizeof f, &f, sizeof f); \
        } \
    } \
    break

int ctf_record_dense_items(ctf_record_writer *w, const char *format, const void *items, size_t n)
{
    static const union {
        uint16_t u;
        uint8_t b[2];
    } probe = {1};
    const char *fmt = format, *src = items;
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') {
        if (*fmt == '<' && !probe.b[0]) return CTF_EINVAL; /* little-endian data, big host */
        fmt++;
    }
    if (!fmt[0] || fmt[1] || !strchr("fdbBhHiIlLqQ", fmt[0])) return CTF_EINVAL;
    const bool dbl = w->dbl;
    const size_t elt = dbl ? sizeof(double) : sizeof(float);
    if (n > SIZE_MAX / 2 / elt) return CTF_ENOMEM;
    const size_t at = ctf_record_grow(w, n * elt);
    if (at == SIZE_MAX) return CTF_ENOMEM;
    char *dst = w->p + at;
    if (n && ((fmt[0] == 'f' && !dbl) || (fmt[0] == 'd' && dbl))) {
        memcpy(dst, src, n * elt);
        return 0;
    }
    switch (fmt[0]) {
    case 'f': CONVERT(float);
    case 'd': CONVERT(double);
    case 'b': CONVERT(signed char);
    case 'B': CONVERT(unsigned char);
    case 'h': CONVERT(short);
    case 'H': CONVERT(unsigned short);
    case 'i': CONVERT(int);
    case 'I': CONVERT(unsigned int);
    case 'l': CONVERT(long);
    case 'L': CONVERT(unsigned long);
    case 'q': CONVERT(long long);
    default: CONVERT(unsigned long long);
    }
    return 0;
}
#undef CONVERT

/*======================================================================
 * Reading and packing
 *====================================================================*/

/* Bounds of slot k's section in record r: [*at, *end). @return : 0, or -1. */
static int section_bounds(const ctf_record_ref *r, size_t k, size_t nslots, size_t *at, size_t *end)
{
    const char *p = r->data;
    const size_t head = REC_HEADER + nslots * sizeof(uint64_t);
    const uint64_t a = get_u64(p + REC_HEADER + k * sizeof(uint64_t));
    const uint64_t e = k + 1 < nslots ? get_u64(p + REC_HEADER + (k + 1) * sizeof(uint64_t))
                                      : (uint64_t)r->len;
    if (a < head || a % 8 || a > e || e > r->len || e - a < REC_SECTION) return -1;
    *at = (size_t)a;
    *end = (size_t)e;
    return 0;
}

/* Checks slot k of record r and adds its sizes to tot. @return : 0, or -1. */
static int scan_section(const ctf_record_ref *r, size_t k, size_t nslots, const ctf_slot *s,
                        size_t elt, ctf_batch_size *tot)
{
    const char *p = r->data;
    size_t at, end;
    if (section_bounds(r, k, nslots, &at, &end) < 0) return -1;
    const int64_t steps = get_i64(p + at), subs = get_i64(p + at + 8);
    int32_t dim;
    memcpy(&dim, p + at + 16, sizeof dim);
    size_t room = end - at - REC_SECTION;
    const char *q = p + at + REC_SECTION;
    if (dim != s->dim || (uint8_t)p[at + 20] != s->kind || (uint8_t)p[at + 21] != s->seq ||
        p[at + 22] || p[at + 23])
        return -1;
    if (steps < 0 || subs < 0 || (s->seq == CTF_SLOT_NO_SEQUENCE && steps != 1) ||
        (s->seq != CTF_SLOT_SUB_SEQUENCE && subs != 0) || (uint64_t)subs > room / 8)
        return -1;
    int64_t sum = 0;
    for (int64_t j = 0; j < subs; j++) {
        const int64_t len = get_i64(q + 8 * j);
        if (len < 0 || len > steps - sum) return -1;
        sum += len;
    }
    if (s->seq == CTF_SLOT_SUB_SEQUENCE && sum != steps) return -1;
    q += 8 * subs;
    room -= 8 * (size_t)subs;
    if (s->kind == CTF_SLOT_DENSE) {
        if ((uint64_t)steps > room / ((size_t)s->dim * elt)) return -1;
    } else if (s->kind == CTF_SLOT_INTEGER) {
        if ((uint64_t)steps > room / 8) return -1;
    } else {
        const size_t per = sizeof(int32_t) + (s->kind == CTF_SLOT_SPARSE ? elt : 0);
        for (int64_t t = 0; t < steps; t++) {
            if (room < 8) return -1;
            const int64_t nnz = get_i64(q);
            if (nnz < 0 || (uint64_t)nnz > (room - 8) / per) return -1;
            size_t need = 8 + round8((size_t)nnz * sizeof(int32_t));
            if (s->kind == CTF_SLOT_SPARSE) need += round8((size_t)nnz * elt);
            if (need > room) return -1;
            /* Indices were checked against dim when written; a record is not trusted. */
            for (int64_t j = 0; j < nnz; j++) {
                int32_t ix;
                memcpy(&ix, q + 8 + 4 * j, sizeof ix);
                if (ix < 0 || ix >= s->dim) return -1;
            }
            q += need;
            room -= need;
            tot->nnz += nnz;
        }
    }
    tot->steps += steps;
    tot->subs += subs;
    return 0;
}

int ctf_records_measure(const ctf_record_ref *recs, size_t n, const ctf_slot *slots, size_t nslots,
                        bool dbl, ctf_batch_size *sizes, ctf_error *err)
{
    const size_t elt = dbl ? sizeof(double) : sizeof(float);
    if (nslots < 1 || nslots > CTF_MAX_SLOTS)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "slots: 1 to %d expected (got %zu)",
                         CTF_MAX_SLOTS, nslots);
    for (size_t k = 0; k < nslots; k++) {
        const ctf_slot *s = &slots[k];
        if (s->kind < CTF_SLOT_DENSE || s->kind > CTF_SLOT_INTEGER ||
            s->seq < CTF_SLOT_NO_SEQUENCE || s->seq > CTF_SLOT_SUB_SEQUENCE || s->dim < 1 ||
            s->dim > INT32_MAX)
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                             "slots[%zu]: kind 0-3, seq 0-2 and 1 <= dim < 2**31 expected", k);
        sizes[k] = (ctf_batch_size){0, 0, 0};
    }
    for (size_t i = 0; i < n; i++) {
        const ctf_record_ref *r = &recs[i];
        const char *p = r->data;
        uint32_t magic, flags;
        if (r->len < REC_HEADER) goto bad;
        memcpy(&magic, p, 4);
        memcpy(&flags, p + 4, 4);
        if (magic != REC_MAGIC || get_u64(p + 8) != nslots ||
            r->len < REC_HEADER + nslots * sizeof(uint64_t))
            goto bad;
        if ((flags & 1u) != (dbl ? 1u : 0u))
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                             "records[%zu]: encoded as %s, packed as %s", i,
                             (flags & 1u) ? "double" : "float", dbl ? "double" : "float");
        for (size_t k = 0; k < nslots; k++)
            if (scan_section(r, k, nslots, &slots[k], elt, &sizes[k]) < 0) goto bad;
        continue;
    bad:
        return ctf__fail(err, CTF_EPARSE, CTF__NOWHERE,
                         "records[%zu]: not a provider record for these slots", i);
    }
    return 0;
}

/* Copies slot k of every record into o (measured by ctf_records_measure). */
static void pack_slot(const ctf_record_ref *recs, size_t n, size_t k, size_t nslots,
                      const ctf_slot *s, size_t elt, const ctf_batch_out *o)
{
    const float one_f = 1.0f;
    const double one_d = 1.0;
    const void *one = elt == sizeof(double) ? (const void *)&one_d : (const void *)&one_f;
    char *data = o->data;
    int64_t step = 0, sub = 0, nnz = 0;
    for (size_t i = 0; i < n; i++) {
        size_t at, end;
        section_bounds(&recs[i], k, nslots, &at, &end);
        const char *q = (const char *)recs[i].data + at;
        const int64_t steps = get_i64(q), subs = get_i64(q + 8);
        q += REC_SECTION;
        if (o->seq_starts) o->seq_starts[i] = step;
        for (int64_t j = 0, pos = step; j < subs; j++) {
            o->sub_starts[sub++] = pos;
            pos += get_i64(q + 8 * j);
        }
        q += 8 * subs;
        if (s->kind == CTF_SLOT_DENSE) {
            const size_t bytes = (size_t)steps * (size_t)s->dim * elt;
            if (bytes) memcpy(data + (size_t)step * (size_t)s->dim * elt, q, bytes);
        } else if (s->kind == CTF_SLOT_INTEGER) {
            if (steps) memcpy(data + (size_t)step * 8, q, (size_t)steps * 8);
        } else {
            for (int64_t t = 0; t < steps; t++) {
                const int64_t m = get_i64(q);
                const size_t idx_bytes = (size_t)m * sizeof(int32_t);
                o->indptr[step + t] = nnz;
                q += 8;
                if (m) memcpy(o->indices + nnz, q, idx_bytes);
                q += round8(idx_bytes);
                char *val = data + (size_t)nnz * elt;
                if (s->kind == CTF_SLOT_SPARSE) {
                    if (m) memcpy(val, q, (size_t)m * elt);
                    q += round8((size_t)m * elt);
                } else {
                    for (int64_t j = 0; j < m; j++) memcpy(val + (size_t)j * elt, one, elt);
                }
                nnz += m;
            }
        }
        step += steps;
    }
    if (o->seq_starts) o->seq_starts[n] = step;
    if (o->sub_starts) o->sub_starts[sub] = step;
    if (o->indptr) o->indptr[step] = nnz;
}

void ctf_records_pack(const ctf_record_ref *recs, size_t n, const ctf_slot *slots, size_t nslots,
                      bool dbl, const ctf_batch_out *outs)
{
    const size_t elt = dbl ? sizeof(double) : sizeof(float);
    for (size_t k = 0; k < nslots; k++) pack_slot(recs, n, k, nslots, &slots[k], elt, &outs[k]);
}
