/*
 * test_record.c -- record.c: samples written as records, batches packed from them (arrays and
 * start positions checked value by value), and records that were cut, flipped or written for
 * other slots refused without a read out of bounds (the sanitizer build runs these too).
 */
#include "common/common.h"
#include "test.h"

#include <stdlib.h>

/* The four kinds across the three sequence types. */
static const ctf_slot slots[4] = {
    {CTF_SLOT_DENSE, CTF_SLOT_NO_SEQUENCE, 3},
    {CTF_SLOT_SPARSE_BINARY, CTF_SLOT_SEQUENCE, 10},
    {CTF_SLOT_SPARSE, CTF_SLOT_SUB_SEQUENCE, 5},
    {CTF_SLOT_INTEGER, CTF_SLOT_SEQUENCE, 100},
};

/* Sample i: dense (i, i+1, i+2); binary steps {i}, {i+1, 0}; valued sub-sequences of 1 and i
 * steps, step t holding (t % 5, t + 0.5); integers i, i * 2, ..., i + 1 of them. */
static int write_sample(ctf_record_writer *w, int i, bool dbl)
{
    const size_t elt = dbl ? sizeof(double) : sizeof(float);
    if (ctf_record_begin(w, 4, dbl)) return -1;
    /* dense */
    if (ctf_record_section_begin(w, 0)) return -1;
    size_t at = ctf_record_grow(w, 3 * elt);
    if (at == SIZE_MAX) return -1;
    for (int j = 0; j < 3; j++) {
        const double d = i + j;
        const float f = (float)d;
        memcpy(w->p + at + (size_t)j * elt, dbl ? (const void *)&d : (const void *)&f, elt);
    }
    if (ctf_record_section_end(w, &slots[0], 1, 0)) return -1;
    /* sparse binary sequence of two steps */
    if (ctf_record_section_begin(w, 1)) return -1;
    for (int t = 0; t < 2; t++) {
        size_t vals;
        const size_t idx = ctf_record_sparse_step(w, (size_t)t + 1, false, &vals);
        if (idx == SIZE_MAX) return -1;
        const int32_t ix[2] = {(i + t) % 10, 0};
        memcpy(w->p + idx, ix, (size_t)(t + 1) * sizeof(int32_t));
    }
    if (ctf_record_section_end(w, &slots[1], 2, 0)) return -1;
    /* valued sparse sub-sequences: 1 step, then i steps */
    if (ctf_record_section_begin(w, 2)) return -1;
    const size_t lens = ctf_record_grow(w, 2 * sizeof(int64_t));
    if (lens == SIZE_MAX) return -1;
    const int64_t l[2] = {1, i};
    memcpy(w->p + lens, l, sizeof l);
    for (int t = 0; t < 1 + i; t++) {
        size_t vals;
        const size_t idx = ctf_record_sparse_step(w, 1, true, &vals);
        if (idx == SIZE_MAX) return -1;
        const int32_t ix = t % 5;
        const double d = t + 0.5;
        const float f = (float)d;
        memcpy(w->p + idx, &ix, sizeof ix);
        memcpy(w->p + vals, dbl ? (const void *)&d : (const void *)&f, elt);
    }
    if (ctf_record_section_end(w, &slots[2], 1 + i, 2)) return -1;
    /* integer sequence */
    if (ctf_record_section_begin(w, 3)) return -1;
    for (int t = 0; t <= i; t++) {
        const int64_t v = (int64_t)i * (t + 1);
        if ((at = ctf_record_grow(w, 8)) == SIZE_MAX) return -1;
        memcpy(w->p + at, &v, sizeof v);
    }
    return ctf_record_section_end(w, &slots[3], i + 1, 0);
}

/* n records of samples 0..n-1 in one heap block each. */
static ctf_record_ref *make_records(int n, bool dbl)
{
    ctf_record_ref *r = calloc((size_t)n, sizeof *r);
    char stack[64]; /* small: the writer must move to the heap */
    ctf_record_writer w;
    ctf_record_writer_init(&w, stack, sizeof stack);
    for (int i = 0; i < n; i++) {
        if (write_sample(&w, i, dbl)) abort();
        void *copy = malloc(w.len);
        memcpy(copy, w.p, w.len);
        r[i] = (ctf_record_ref){copy, w.len};
    }
    ctf_record_writer_free(&w);
    return r;
}

static void free_records(ctf_record_ref *r, int n)
{
    for (int i = 0; i < n; i++) free((void *)r[i].data);
    free(r);
}

/* Packs with fresh arrays sized by measure; frees them. @return : the measure status. */
static int pack_all(const ctf_record_ref *r, size_t n, bool dbl, ctf_batch_size *sz, ctf_error *err,
                    void (*check)(const ctf_batch_out *, const ctf_batch_size *))
{
    int rc = ctf_records_measure(r, n, slots, 4, dbl, sz, err);
    if (rc) return rc;
    const size_t elt = dbl ? sizeof(double) : sizeof(float);
    ctf_batch_out o[4];
    memset(o, 0, sizeof o);
    for (size_t k = 0; k < 4; k++) {
        const ctf_slot *s = &slots[k];
        const size_t steps = (size_t)sz[k].steps, nnz = (size_t)sz[k].nnz;
        o[k].data = malloc(1 + (s->kind == CTF_SLOT_DENSE     ? steps * (size_t)s->dim * elt
                                : s->kind == CTF_SLOT_INTEGER ? steps * 8
                                                              : nnz * elt));
        if (s->kind == CTF_SLOT_SPARSE || s->kind == CTF_SLOT_SPARSE_BINARY) {
            o[k].indptr = malloc((steps + 1) * 8);
            o[k].indices = malloc(nnz * 4 + 1);
        }
        if (s->seq != CTF_SLOT_NO_SEQUENCE) o[k].seq_starts = malloc((n + 1) * 8);
        if (s->seq == CTF_SLOT_SUB_SEQUENCE) o[k].sub_starts = malloc(((size_t)sz[k].subs + 1) * 8);
    }
    ctf_records_pack(r, n, slots, 4, dbl, o);
    if (check) check(o, sz);
    for (size_t k = 0; k < 4; k++) {
        free(o[k].data);
        free(o[k].indptr);
        free(o[k].indices);
        free(o[k].seq_starts);
        free(o[k].sub_starts);
    }
    return 0;
}

/* Three samples (0, 1, 2) packed in float. */
static void check_three(const ctf_batch_out *o, const ctf_batch_size *sz)
{
    const float *dense = o[0].data;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) ASSERT_DBL_EQ(dense[i * 3 + j], i + j);
    /* binary: 2 steps per sample, 1 + 2 non-zeros */
    ASSERT_EQ(sz[1].steps, 6);
    ASSERT_EQ(sz[1].nnz, 9);
    const int64_t ip[7] = {0, 1, 3, 4, 6, 7, 9};
    for (int t = 0; t < 7; t++) ASSERT_EQ(o[1].indptr[t], ip[t]);
    ASSERT_EQ(o[1].indices[3], 1);
    ASSERT_EQ(o[1].indices[4], 2);
    ASSERT_EQ(o[1].indices[5], 0);
    ASSERT_DBL_EQ(((const float *)o[1].data)[8], 1.0);
    for (int i = 0; i <= 3; i++) ASSERT_EQ(o[1].seq_starts[i], 2 * i);
    /* valued sub-sequences: sample i has 1 + i steps in 2 sub-sequences */
    ASSERT_EQ(sz[2].steps, 6);
    ASSERT_EQ(sz[2].subs, 6);
    const int64_t seq[4] = {0, 1, 3, 6}, sub[7] = {0, 1, 1, 2, 3, 4, 6};
    for (int i = 0; i < 4; i++) ASSERT_EQ(o[2].seq_starts[i], seq[i]);
    for (int i = 0; i < 7; i++) ASSERT_EQ(o[2].sub_starts[i], sub[i]);
    ASSERT_DBL_EQ(((const float *)o[2].data)[5], 2.5);
    ASSERT_EQ(o[2].indices[5], 2);
    /* integers: sample i has i + 1 values i, 2i, ... */
    const int64_t *ids = o[3].data;
    const int64_t want[6] = {0, 1, 2, 2, 4, 6};
    for (int t = 0; t < 6; t++) ASSERT_EQ(ids[t], want[t]);
    ASSERT_EQ(o[3].seq_starts[3], 6);
}

TEST(record_pack_values)
{
    ctf_record_ref *r = make_records(3, false);
    ctf_batch_size sz[4];
    ctf_error err;
    ASSERT_EQ(pack_all(r, 3, false, sz, &err, check_three), 0);
    /* An empty batch has empty arrays and start positions {0}. */
    ASSERT_EQ(pack_all(r, 0, false, sz, &err, NULL), 0);
    ASSERT_EQ(sz[0].steps, 0);
    free_records(r, 3);
}

static void check_double(const ctf_batch_out *o, const ctf_batch_size *sz)
{
    ASSERT_EQ(sz[0].steps, 2);
    ASSERT_DBL_EQ(((const double *)o[0].data)[5], 3.0);
    ASSERT_DBL_EQ(((const double *)o[2].data)[2], 1.5);
    ASSERT_DBL_EQ(((const double *)o[1].data)[0], 1.0);
}

TEST(record_precision)
{
    ctf_record_ref *r = make_records(2, true);
    ctf_batch_size sz[4];
    ctf_error err;
    ASSERT_EQ(pack_all(r, 2, true, sz, &err, check_double), 0);
    /* records of doubles packed as floats: refused, naming both */
    ASSERT_EQ(pack_all(r, 2, false, sz, &err, NULL), CTF_EINVAL);
    ASSERT(strstr(err.message, "encoded as double, packed as float"));
    free_records(r, 2);
}

TEST(record_bad_slots)
{
    ctf_record_ref *r = make_records(1, false);
    ctf_batch_size sz[4];
    ctf_error err;
    ctf_slot other[4];
    memcpy(other, slots, sizeof other);
    other[0].dim = 4; /* another dimension: the record does not fit */
    ASSERT_EQ(ctf_records_measure(r, 1, other, 4, false, sz, &err), CTF_EPARSE);
    ASSERT(strstr(err.message, "records[0]: not a provider record"));
    other[0].dim = 0;
    ASSERT_EQ(ctf_records_measure(r, 1, other, 4, false, sz, &err), CTF_EINVAL);
    ASSERT_EQ(ctf_records_measure(r, 1, slots, 3, false, sz, &err), CTF_EPARSE);
    ASSERT_EQ(ctf_records_measure(r, 1, slots, 0, false, sz, &err), CTF_EINVAL);
    ctf_record_writer w;
    ctf_record_writer_init(&w, NULL, 0);
    ASSERT_EQ(ctf_record_begin(&w, 0, false), CTF_EINVAL);
    ASSERT_EQ(ctf_record_begin(&w, CTF_MAX_SLOTS + 1, false), CTF_EINVAL);
    ctf_record_writer_free(&w);
    free_records(r, 1);
}

/* Every cut and every single-byte change of a record is refused or packs within its bounds:
 * what measure accepts, pack copies without reading outside the record. */
TEST(record_damage)
{
    ctf_record_ref *r = make_records(3, false);
    const size_t len = r[2].len;
    unsigned char *copy = malloc(len);
    ctf_batch_size sz[4];
    ctf_error err;
    size_t refused = 0;
    for (size_t cut = 0; cut < len; cut++) {
        /* a heap block of exactly `cut` bytes, so ASan sees any read past it */
        unsigned char *p = malloc(cut ? cut : 1);
        memcpy(p, r[2].data, cut);
        ctf_record_ref one = {p, cut};
        refused += pack_all(&one, 1, false, sz, &err, NULL) != 0;
        free(p);
    }
    ASSERT(refused + 8 >= len); /* only dropped padding may pass */
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            memcpy(copy, r[2].data, len);
            copy[i] ^= (unsigned char)(1u << bit);
            ctf_record_ref one = {copy, len};
            const int rc = pack_all(&one, 1, false, sz, &err, NULL);
            ASSERT(rc == 0 || rc == CTF_EPARSE || rc == CTF_EINVAL);
        }
    }
    /* a sparse index outside [0, dim) is refused even in an otherwise valid record */
    memcpy(copy, r[2].data, len);
    ctf_record_ref one = {copy, len};
    ASSERT_EQ(pack_all(&one, 1, false, sz, &err, NULL), 0);
    free(copy);
    free_records(r, 3);
}

TEST(record_sparse_index_checked)
{
    ctf_record_writer w;
    ctf_record_writer_init(&w, NULL, 0);
    static const ctf_slot one[1] = {{CTF_SLOT_SPARSE_BINARY, CTF_SLOT_NO_SEQUENCE, 4}};
    ASSERT_EQ(ctf_record_begin(&w, 1, false), 0);
    ASSERT_EQ(ctf_record_section_begin(&w, 0), 0);
    size_t vals;
    const size_t idx = ctf_record_sparse_step(&w, 1, false, &vals);
    ASSERT(idx != SIZE_MAX);
    const int32_t bad = 4;
    memcpy(w.p + idx, &bad, sizeof bad);
    ASSERT_EQ(ctf_record_section_end(&w, &one[0], 1, 0), 0);
    ctf_record_ref r = {w.p, w.len};
    ctf_batch_size sz[1];
    ctf_error err;
    ASSERT_EQ(ctf_records_measure(&r, 1, one, 1, false, sz, &err), CTF_EPARSE);
    const int32_t good = 3;
    memcpy(w.p + idx, &good, sizeof good);
    ASSERT_EQ(ctf_records_measure(&r, 1, one, 1, false, sz, &err), 0);
    ASSERT_EQ(sz[0].nnz, 1);
    ctf_record_writer_free(&w);
}

TEST(record_dense_items)
{
    ctf_record_writer w;
    ctf_record_writer_init(&w, NULL, 0);
    ASSERT_EQ(ctf_record_begin(&w, 1, false), 0);
    const size_t at = w.len;
    const int16_t h[3] = {-2, 7, 300};
    ASSERT_EQ(ctf_record_dense_items(&w, "<h", h, 3), 0);
    float f[3];
    memcpy(f, w.p + at, sizeof f);
    ASSERT_DBL_EQ(f[0], -2.0);
    ASSERT_DBL_EQ(f[2], 300.0);
    const double d[2] = {0.1, 2.5};
    ASSERT_EQ(ctf_record_dense_items(&w, "d", d, 2), 0); /* rounded to float */
    memcpy(f, w.p + at + 12, 8);
    ASSERT_DBL_EQ(f[0], (float)0.1);
    const size_t len = w.len;
    ASSERT_EQ(ctf_record_dense_items(&w, "e", h, 3), CTF_EINVAL); /* half floats: not here */
    ASSERT_EQ(ctf_record_dense_items(&w, "hh", h, 3), CTF_EINVAL);
    ASSERT_EQ(w.len, len); /* nothing appended */
    ASSERT_EQ(ctf_record_begin(&w, 1, true), 0);
    const uint64_t q = 1ull << 53;
    ASSERT_EQ(ctf_record_dense_items(&w, "Q", &q, 1), 0);
    double back;
    memcpy(&back, w.p + w.len - 8, 8);
    ASSERT_DBL_EQ(back, 9007199254740992.0);
    ctf_record_writer_free(&w);
}

/* Every allocation of the writer failing in turn: the writer reports it and frees all. */
TEST(record_allocation_failures)
{
    for (long k = 1;; k++) {
        const long live0 = atomic_load(&ctf__alloc.live);
        atomic_store(&ctf__alloc.count, 0);
        ctf__alloc.fail_at = k;
        ctf__alloc.fail_sticky = true;
        ctf_record_writer w;
        ctf_record_writer_init(&w, NULL, 0);
        const int rc = write_sample(&w, 9, true);
        ctf_record_writer_free(&w);
        const long reached = atomic_load(&ctf__alloc.count);
        ctf__alloc.fail_at = 0;
        ctf__alloc.fail_sticky = false;
        ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
        if (reached < k) {
            ASSERT_EQ(rc, 0);
            break;
        }
        ASSERT(rc != 0);
    }
}
