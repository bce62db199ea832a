/*
 * test_pool.c -- pool.c and random.c: the random streams equal CPython's random.Random(text)
 * (values taken from CPython), the pass's file order and worker share, first-in-first-out and
 * shuffled draws, the pool bound and its one exception, batches cut by units with and without
 * can_over, a fill error that ends a batch, and skipping to a position.
 */
#include "common/common.h"
#include "test.h"

TEST(pyrandom_matches_cpython)
{
    unsigned char d[64];
    ctf__sha512("abc", 3, d);
    ASSERT_EQ(d[0], 0xdd);
    ASSERT_EQ(d[1], 0xaf);
    ASSERT_EQ(d[15], 0x31);
    char a200[201];
    memset(a200, 'a', 200);
    a200[200] = 0;
    ctf__sha512(a200, 200, d); /* two blocks */
    ASSERT_EQ(d[0], 0x4b);
    ASSERT_EQ(d[15], 0x50);
    /* random.Random('ctfio.provider:0:0:pool'): randrange(1000) six times, then
     * randrange(2**40) and randrange(3). */
    ctf__pyrandom r;
    ASSERT_EQ(ctf__pyrandom_seed(&r, "ctfio.provider:0:0:pool"), 0);
    const uint64_t want[6] = {461, 226, 568, 396, 559, 924};
    for (int i = 0; i < 6; i++) ASSERT_U64_EQ(ctf__pyrandom_below(&r, 1000), want[i]);
    ASSERT_U64_EQ(ctf__pyrandom_below(&r, (uint64_t)1 << 40), 424474643728ull);
    ASSERT_U64_EQ(ctf__pyrandom_below(&r, 3), 2);
    /* random.Random('ctfio.provider:7:3:files').shuffle(list(range(10))) */
    ASSERT_EQ(ctf__pyrandom_seed(&r, "ctfio.provider:7:3:files"), 0);
    size_t x[10];
    for (size_t i = 0; i < 10; i++) x[i] = i;
    ctf__pyrandom_shuffle(&r, x, 10);
    const size_t order[10] = {9, 4, 5, 7, 1, 6, 0, 8, 2, 3};
    for (int i = 0; i < 10; i++) ASSERT_EQ(x[i], order[i]);
    ASSERT_EQ(ctf__pyrandom_seed(&r, ""), CTF_EINVAL);
}

TEST(pool_files)
{
    ctf_pool_options o =
        {.seed = 7, .pass = 3, .shuffle = true, .min_units = -1, .max_units = -1, .can_over = true};
    ctf_pool *p;
    ctf_error err;
    ASSERT_EQ(ctf_pool_open(&o, &p, &err), 0);
    size_t f[10], n;
    ASSERT_EQ(ctf_pool_files(p, 10, 3, 1, f, &n), 0);
    ASSERT_EQ(n, 3); /* every third of 9 4 5 7 1 6 0 8 2 3, from the second */
    ASSERT_EQ(f[0], 4);
    ASSERT_EQ(f[1], 1);
    ASSERT_EQ(f[2], 8);
    ASSERT_EQ(ctf_pool_files(p, 10, 3, 3, f, &n), CTF_EINVAL);
    ctf_pool_free(p);
    o.shuffle = false;
    ASSERT_EQ(ctf_pool_open(&o, &p, &err), 0);
    ASSERT_EQ(ctf_pool_files(p, 5, 2, 0, f, &n), 0);
    ASSERT_EQ(n, 3);
    ASSERT_EQ(f[2], 4);
    ctf_pool_free(p);
    o.max_units = 0;
    ASSERT_EQ(ctf_pool_open(&o, &p, &err), CTF_EINVAL);
}

/* A source of numbered one-byte records, each weighing weights[i % nw] units. */
typedef struct {
    int next, end, fail_at, fills;
    const uint64_t *weights;
    int nw;
} src;

static int fill_src(void *user, ctf_pool *p)
{
    src *s = user;
    s->fills++;
    ctf_pool_info in;
    for (;;) {
        ctf_pool_get_info(p, &in);
        if (in.units >= in.goal) return 0;
        if (s->next == s->fail_at) return in.empty ? CTF_EIO : 0;
        if (s->next == s->end) return 1;
        const uint64_t w = s->weights ? s->weights[s->next % s->nw] : 1;
        if (w > in.room && !in.empty) return 0;
        const unsigned char b = (unsigned char)s->next++;
        if (ctf_pool_push(p, &b, 1, w)) return CTF_ENOMEM;
    }
}

static int batch_of(ctf_pool *p, uint64_t size, src *s, int *out, size_t *n)
{
    const ctf_record_ref *r;
    uint64_t units;
    const int rc = ctf_pool_next(p, size, fill_src, s, &r, n, &units);
    for (size_t i = 0; i < *n; i++) out[i] = *(const unsigned char *)r[i].data;
    return rc;
}

TEST(pool_fifo_batches)
{
    ctf_pool_options o = {.seed = 0,
                          .pass = 0,
                          .shuffle = false,
                          .min_units = 100,
                          .max_units = 5,
                          .can_over = true};
    ctf_pool *p;
    ASSERT_EQ(ctf_pool_open(&o, &p, NULL), 0);
    src s = {.end = 12, .fail_at = -1};
    int got[16];
    size_t n;
    for (int b = 0; b < 3; b++) {
        ASSERT_EQ(batch_of(p, 4, &s, got, &n), 0);
        ASSERT_EQ(n, 4);
        for (int i = 0; i < 4; i++) ASSERT_EQ(got[i], b * 4 + i);
        ctf_pool_info in;
        ctf_pool_get_info(p, &in);
        ASSERT(in.peak_units <= 5);
    }
    ASSERT_EQ(ctf_pool_at_end(p, fill_src, &s), 1);
    ASSERT_EQ(batch_of(p, 4, &s, got, &n), 0);
    ASSERT_EQ(n, 0);
    ctf_pool_info in;
    ctf_pool_get_info(p, &in);
    ASSERT_U64_EQ(in.delivered, 12);
    ASSERT_U64_EQ(in.batches, 3);
    ctf_pool_free(p);
}

TEST(pool_units_and_carry)
{
    static const uint64_t w[4] = {1, 3, 2, 9};
    ctf_pool_options o = {.shuffle = false, .min_units = -1, .max_units = 8, .can_over = false};
    ctf_pool *p;
    ASSERT_EQ(ctf_pool_open(&o, &p, NULL), 0);
    src s = {.end = 5, .fail_at = -1, .weights = w, .nw = 4};
    int got[8];
    size_t n;
    ASSERT_EQ(batch_of(p, 5, &s, got, &n), 0); /* 1 + 3, then 2 would make 6: kept */
    ASSERT_EQ(n, 2);
    ASSERT_EQ(batch_of(p, 5, &s, got, &n), 0); /* the kept 2, then 9 does not fit */
    ASSERT_EQ(n, 1);
    ASSERT_EQ(got[0], 2);
    ASSERT_EQ(batch_of(p, 5, &s, got, &n), 0); /* 9 > the pool's 8: alone, in an empty pool */
    ASSERT_EQ(n, 1);
    ASSERT_EQ(got[0], 3);
    ASSERT_EQ(batch_of(p, 5, &s, got, &n), 0);
    ASSERT_EQ(n, 1);
    ASSERT_EQ(got[0], 4);
    ASSERT_EQ(ctf_pool_at_end(p, fill_src, &s), 1);
    ctf_pool_free(p);
    o.can_over = true; /* the overflowing record joins and closes the batch */
    ASSERT_EQ(ctf_pool_open(&o, &p, NULL), 0);
    s = (src){.end = 5, .fail_at = -1, .weights = w, .nw = 4};
    ASSERT_EQ(batch_of(p, 5, &s, got, &n), 0);
    ASSERT_EQ(n, 3);
    ctf_pool_free(p);
}

TEST(pool_shuffle_deterministic)
{
    ctf_pool_options o =
        {.seed = 5, .pass = 1, .shuffle = true, .min_units = 10, .max_units = 20, .can_over = true};
    int first[64], second[64];
    for (int run = 0; run < 2; run++) {
        ctf_pool *p;
        ASSERT_EQ(ctf_pool_open(&o, &p, NULL), 0);
        src s = {.end = 60, .fail_at = -1};
        int *out = run ? second : first, got[8];
        size_t n, total = 0;
        while (batch_of(p, 7, &s, got, &n) == 0 && n) {
            memcpy(out + total, got, n * sizeof *got);
            total += n;
        }
        ASSERT_EQ(total, 60);
        int seen[60] = {0};
        for (int i = 0; i < 60; i++) seen[out[i]]++;
        for (int i = 0; i < 60; i++) ASSERT_EQ(seen[i], 1);
        ctf_pool_free(p);
    }
    ASSERT(!memcmp(first, second, sizeof(int) * 60));
    int moved = 0;
    for (int i = 0; i < 60; i++) moved += first[i] != i;
    ASSERT(moved > 30);
}

TEST(pool_fill_error_and_skip)
{
    ctf_pool_options o = {.shuffle = false, .min_units = -1, .max_units = -1, .can_over = true};
    ctf_pool *p;
    ASSERT_EQ(ctf_pool_open(&o, &p, NULL), 0);
    src s = {.end = 20, .fail_at = 6};
    int got[16];
    size_t n;
    ASSERT_EQ(batch_of(p, 4, &s, got, &n), 0);
    ASSERT_EQ(batch_of(p, 4, &s, got, &n), 0); /* the records before the error come first */
    ASSERT_EQ(n, 2);
    ASSERT_EQ(batch_of(p, 4, &s, got, &n), CTF_EIO); /* then the error, with no record */
    ASSERT_EQ(n, 0);
    ctf_pool_free(p);
    ASSERT_EQ(ctf_pool_open(&o, &p, NULL), 0);
    s = (src){.end = 20, .fail_at = -1};
    uint64_t skipped;
    ASSERT_EQ(ctf_pool_skip(p, 7, fill_src, &s, &skipped), 0);
    ASSERT_U64_EQ(skipped, 7);
    ASSERT_EQ(batch_of(p, 4, &s, got, &n), 0);
    ASSERT_EQ(got[0], 7);
    ASSERT_EQ(ctf_pool_skip(p, 100, fill_src, &s, &skipped), 0);
    ASSERT_U64_EQ(skipped, 9);
    ctf_pool_free(p);
}

/* Every allocation of a pass failing in turn: CTF_ENOMEM comes back or the pass goes on, and
 * nothing leaks. */
TEST(pool_allocation_failures)
{
    for (long k = 1;; k++) {
        const long live0 = atomic_load(&ctf__alloc.live);
        atomic_store(&ctf__alloc.count, 0);
        ctf__alloc.fail_at = k;
        ctf__alloc.fail_sticky = false;
        ctf_pool_options o = {.seed = 1,
                              .shuffle = true,
                              .min_units = 4,
                              .max_units = 16,
                              .can_over = true};
        ctf_pool *p = NULL;
        int rc = ctf_pool_open(&o, &p, NULL);
        if (!rc) {
            size_t f[8], n;
            rc = ctf_pool_files(p, 8, 2, 1, f, &n);
            ASSERT(rc == 0 || rc == CTF_ENOMEM);
            src s = {.end = 40, .fail_at = -1};
            int got[16];
            for (int b = 0; b < 20; b++) {
                rc = batch_of(p, 5, &s, got, &n);
                ASSERT(rc == 0 || rc == CTF_ENOMEM);
                if (!rc && !n) break;
            }
            ctf_pool_free(p);
        } else {
            ASSERT_EQ(rc, CTF_ENOMEM);
        }
        const long reached = atomic_load(&ctf__alloc.count);
        ctf__alloc.fail_at = 0;
        ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
        if (reached < k) break; /* past the pass's last allocation */
    }
}
