/*
 * test_join_disk.c -- joins by key without whole-corpus tables in memory (lib/source/join_table.c):
 * keys sorted on disk in runs and merge-joined, or merged straight when already in order; the
 * joined records read per chunk; spills in the data's directory, the system's temporary
 * directory or memory; and the memory bound, measured in a child process.
 */
#include "reader/pipeline.h"
#include "source/join.h"
#include "test.h"
#include "test_bytes.h"
#include "test_rss.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static const ctf_stream_def JX[] = {{.name = "x", .dim = 1}};
static const ctf_stream_def JY[] = {{.name = "y", .dim = 1}};

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A permutation of [0, n) (identity when seed is 0). */
static uint64_t *perm_of(size_t n, uint64_t seed)
{
    uint64_t *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = i;
    if (seed)
        for (size_t i = n; i > 1; i--) {
            size_t j = (size_t)(mix(seed + i) % i);
            uint64_t t = p[i - 1];
            p[i - 1] = p[j];
            p[j] = t;
        }
    return p;
}

/* Writes the keys keys[0..n) in that order: x sequences (1 or 2 lines, x = 3 key + line) or y
 * sequences (one line, y = 7 key + 2). @return : the path (malloc'd). */
static char *write_keys(const char *name, const uint64_t *keys, size_t n, bool is_y)
{
    char *path = malloc(700);
    snprintf(path, 700, "%s/%s", test_tmpdir(), name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    for (size_t i = 0; i < n; i++) {
        const uint64_t k = keys[i];
        if (is_y) {
            fprintf(f, "%llu |y %llu\n", (unsigned long long)k, (unsigned long long)(7 * k + 2));
            continue;
        }
        const int lines = 1 + (int)(k % 2);
        for (int l = 0; l < lines; l++)
            fprintf(f, "%llu |x %llu\n", (unsigned long long)k, (unsigned long long)(3 * k + l));
    }
    fclose(f);
    return path;
}

static void join_cfg(ctf_config *c, const char *x, const char **ypath, ctf_join_def *jd)
{
    *jd = (ctf_join_def){.paths = ypath, .num_paths = 1, .streams = JY, .num_streams = 1};
    ctf_config_init(c);
    c->path = x;
    c->streams = JX;
    c->num_streams = 1;
    c->joins = jd;
    c->num_joins = 1;
    c->chunk_size_bytes = 256;
    c->randomization_window = 5;
    c->max_sweeps = 2;
    c->num_threads = 2;
}

/* Everything a reader delivers (byte string), with each sequence's values checked against its
 * key. @return : sequences delivered per sweep, or -1. */
static long read_checked(ctf_config *c, bytes *b, ctf_stats *st, test_log *lb)
{
    c->log = lb ? test_log_capture : NULL;
    c->log_user = lb;
    ctf_reader *r;
    ctf_error e;
    if (ctf_reader_open(c, &r, &e)) {
        fprintf(stderr, "open: %s\n", e.message);
        return -1;
    }
    long n = 0;
    ctf_minibatch *mb;
    while (ctf_reader_next(r, 13, &mb) == 0 && mb) {
        for (size_t i = 0; i < ctf_minibatch_num_sequences(mb); i++) {
            append_seq(b, mb, i);
            const uint64_t k = ctf_minibatch_keys(mb)[i];
            ctf_stream_view vx, vy;
            if (ctf_minibatch_stream(mb, 0, &vx) || ctf_minibatch_stream(mb, 1, &vy)) return -1;
            size_t fx = 0, fy = 0;
            for (size_t j = 0; j < i; j++) fx += vx.lengths[j], fy += vy.lengths[j];
            const float *xv = vx.values, *yv = vy.values;
            if (vx.lengths[i] != 1 + k % 2 || vy.lengths[i] != 1 || yv[fy] != (float)(7 * k + 2))
                return -1;
            for (uint32_t l = 0; l < vx.lengths[i]; l++)
                if (xv[fx + l] != (float)(3 * k + l)) return -1;
        }
        n += (long)ctf_minibatch_num_sequences(mb);
        ctf_minibatch_free(mb);
    }
    if (st) ctf_reader_get_stats(r, st);
    ctf_reader_free(r);
    return n / (long)c->max_sweeps;
}

/* No spill file stays behind in dir. */
static int spill_files_in(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while (d && (de = readdir(d))) n += strncmp(de->d_name, ".ctfjoin-", 9) == 0;
    if (d) closedir(d);
    return n;
}

/* Primary keys 0..N-1 without every 11th, y keys 0..N+40 without every 7th (in file orders
 * set by xseed and yseed: 0 keeps key order): the expected kept count, drops and unmatched keys. */
enum { JN = 3000 };

typedef struct jfiles {
    char *x, *y;
    long kept;
    uint64_t missing, unmatched;
} jfiles;

static void make_files(jfiles *f, uint64_t xseed, uint64_t yseed)
{
    uint64_t *px = perm_of(JN, xseed), *py = perm_of(JN + 40, yseed);
    uint64_t *kx = malloc(JN * sizeof *kx), *ky = malloc((JN + 40) * sizeof *ky);
    size_t nx = 0, ny = 0;
    for (size_t i = 0; i < JN; i++)
        if (px[i] % 11 != 5) kx[nx++] = px[i];
    for (size_t i = 0; i < JN + 40; i++)
        if (py[i] % 7 != 3) ky[ny++] = py[i];
    f->x = write_keys(xseed ? "jd-x-shuf.ctf" : "jd-x.ctf", kx, nx, false);
    f->y = write_keys(yseed ? "jd-y-shuf.ctf" : "jd-y.ctf", ky, ny, true);
    f->kept = 0;
    f->missing = f->unmatched = 0;
    for (uint64_t k = 0; k < JN + 40; k++) {
        const bool in_x = k < JN && k % 11 != 5, in_y = k % 7 != 3;
        f->kept += in_x && in_y;
        f->missing += in_x && !in_y;
        f->unmatched += in_y && !in_x;
    }
    free(px);
    free(py);
    free(kx);
    free(ky);
}

static void free_files(jfiles *f)
{
    remove(f->x);
    remove(f->y);
    free(f->x);
    free(f->y);
}

TEST(join_disk_runs_merge_and_spills_give_the_same_minibatches)
{
    /* Keys in order (merged straight), and shuffled in both deserializers (sorted on disk). */
    for (int shuffled = 0; shuffled < 2; shuffled++) {
        jfiles f;
        make_files(&f, shuffled ? 101 : 0, shuffled ? 202 : 0);
        const char *yp[] = {f.y};
        ctf_join_def jd;
        ctf_config c;
        join_cfg(&c, f.x, yp, &jd);
        bytes ref = {0};
        ctf_stats st;
        test_log lref = {0};
        ASSERT_EQ(read_checked(&c, &ref, &st, &lref), f.kept);
        ASSERT_EQ(st.keys_missing, f.missing);
        ASSERT_EQ(st.dropped_sequences, f.missing);
        ASSERT_EQ(st.keys_unmatched, f.unmatched);
        ASSERT_EQ(lref.warnings, 21); /* 20 drops shown, then one line for the rest */
        ASSERT_STR_CONTAINS(lref.text, "more sequences without a match");
        /* Runs of 5 records: hundreds of runs, merged in several passes, same minibatches and
         * the same warnings; with keys in order nothing is sorted at all. */
        const long runs0 = atomic_load(&ctf__join_runs_written);
        const size_t saved = ctf__join_run_bytes;
        ctf__join_run_bytes = 5 * 40;
        bytes tiny = {0};
        test_log ltiny = {0};
        ASSERT_EQ(read_checked(&c, &tiny, &st, &ltiny), f.kept);
        ctf__join_run_bytes = saved;
        const long runs = atomic_load(&ctf__join_runs_written) - runs0;
        if (shuffled)
            ASSERT(runs > 2 * JN / 5);
        else
            ASSERT_EQ(runs, 0);
        ASSERT(b_eq(&ref, &tiny));
        ASSERT_STR_EQ(ltiny.text, lref.text);
        ASSERT_EQ(st.keys_unmatched, f.unmatched);
        /* Spills in the system's temporary directory (the data's is read-only), then in memory
         * (no temporary file at all, said once): the same minibatches. */
        for (int level = 1; level <= 2; level++) {
            ctf__join_spill_from = level;
            ctf__join_run_bytes = 5 * 40;
            bytes o = {0};
            test_log lo = {0};
            long n = read_checked(&c, &o, &st, &lo);
            ctf__join_spill_from = 0;
            ctf__join_run_bytes = saved;
            ASSERT_EQ(n, f.kept);
            ASSERT_EQ(atomic_load(&ctf__join_spill_used), level);
            ASSERT(b_eq(&ref, &o));
            ASSERT_EQ(lo.warnings, 21 + (level == 2));
            if (level == 2) ASSERT_STR_CONTAINS(lo.text, "the join's tables are kept in memory");
            b_free(&o);
        }
        ASSERT_EQ(spill_files_in(test_tmpdir()), 0);
        b_free(&ref);
        b_free(&tiny);
        free_files(&f);
    }
}

TEST(join_disk_same_order_as_a_join_in_any_key_order)
{
    /* The joined source's order depends on the primary's chunks alone: y in another key order
     * gives the very same minibatches, checkpoints included. */
    jfiles a, b;
    make_files(&a, 0, 0);
    make_files(&b, 0, 303);
    const char *ya[] = {a.y}, *yb[] = {b.y};
    ctf_join_def ja, jb;
    ctf_config ca, cb;
    join_cfg(&ca, a.x, ya, &ja);
    join_cfg(&cb, a.x, yb, &jb);
    bytes x = {0}, y = {0};
    ASSERT_EQ(read_checked(&ca, &x, NULL, NULL), a.kept);
    ASSERT_EQ(read_checked(&cb, &y, NULL, NULL), a.kept);
    ASSERT(b_eq(&x, &y));
    /* A checkpoint taken half way continues the same order. */
    ctf_reader *r1, *r2;
    ctf_error e;
    cb.log = NULL;
    ASSERT_OK(ctf_reader_open(&cb, &r1, &e), &e);
    ASSERT_OK(ctf_reader_open(&cb, &r2, &e), &e);
    ctf_minibatch *mb;
    for (int i = 0; i < 50; i++) {
        ASSERT_EQ(ctf_reader_next(r1, 17, &mb), 0);
        ctf_minibatch_free(mb);
    }
    char state[4096];
    size_t len;
    ASSERT_EQ(ctf_reader_save_state(r1, state, sizeof state, &len), 0);
    ASSERT_EQ(ctf_reader_restore_state(r2, state, len), 0);
    for (int i = 0; i < 40; i++) {
        ctf_minibatch *m1, *m2;
        ASSERT_EQ(ctf_reader_next(r1, 17, &m1), 0);
        ASSERT_EQ(ctf_reader_next(r2, 17, &m2), 0);
        ASSERT(m1 && m2);
        bytes s1 = {0}, s2 = {0};
        for (size_t k = 0; k < ctf_minibatch_num_sequences(m1); k++) append_seq(&s1, m1, k);
        for (size_t k = 0; k < ctf_minibatch_num_sequences(m2); k++) append_seq(&s2, m2, k);
        ASSERT(b_eq(&s1, &s2));
        b_free(&s1);
        b_free(&s2);
        ctf_minibatch_free(m1);
        ctf_minibatch_free(m2);
    }
    ctf_reader_free(r1);
    ctf_reader_free(r2);
    b_free(&x);
    b_free(&y);
    free_files(&a);
    remove(b.x);
    free(b.x);
    remove(b.y);
    free(b.y);
}

TEST(join_disk_repeated_keys_in_order_and_sorted_on_disk)
{
    const char *x = test_write_str("jr-x.ctf", "1 |x 1\n2 |x 2\n3 |x 3\n4 |x 4\n5 |x 5\n");
    char *xs = strdup(x);
    /* In order over two files (a key repeated on consecutive lines of one file is one
     * sequence): 4 ends the first file and starts the second. */
    char *ya = strdup(test_write_str("jr-ya.ctf", "1 |y 1\n2 |y 1\n4 |y 1\n"));
    char *yb = strdup(test_write_str("jr-yb.ctf", "4 |y 2\n5 |y 1\n"));
    /* Out of order, two keys repeated: 2 (lines 2 and 6) and 5 (lines 1 and 4); the first
     * repeat in file order is 5's, on line 4. */
    char *yc = strdup(
        test_write_str("jr-yc.ctf", "5 |y 1\n2 |y 1\n1 |y 1\n5 |y 2\n3 |y 1\n2 |y 2\n4 |y 1\n"));
    for (int tiny = 0; tiny < 2; tiny++)
        for (int which = 0; which < 2; which++) {
            const char *yp[] = {which ? yc : ya, yb};
            ctf_join_def jd;
            ctf_config c;
            join_cfg(&c, xs, yp, &jd);
            jd.num_paths = which ? 1 : 2;
            const size_t saved = ctf__join_run_bytes;
            if (tiny) ctf__join_run_bytes = 2 * 40;
            ctf_reader *r;
            ctf_error e;
            int rc = ctf_reader_open(&c, &r, &e);
            ctf__join_run_bytes = saved;
            ASSERT_EQ(rc, CTF_EPARSE);
            ASSERT_STR_EQ(e.path, which ? yc : yb);
            ASSERT_EQ(e.line, which ? 4 : 1);
            char want[2100];
            snprintf(want, sizeof want,
                     "sequence key %d appears twice in deserializer 1 (%s%s): "
                     "here and at %s:%d;",
                     which ? 5 : 4, which ? yc : ya, which ? "" : " ...", which ? yc : ya,
                     which ? 1 : 3);
            ASSERT_STR_CONTAINS(e.message, want);
        }
    free(ya);
    free(yb);
    free(yc);
    ASSERT_EQ(spill_files_in(test_tmpdir()), 0);
    free(xs);
}

TEST(join_disk_with_index_caches_and_keep_data_in_memory)
{
    jfiles f;
    make_files(&f, 404, 505);
    const char *yp[] = {f.y};
    ctf_join_def jd;
    ctf_config c;
    join_cfg(&c, f.x, yp, &jd);
    bytes ref = {0};
    ASSERT_EQ(read_checked(&c, &ref, NULL, NULL), f.kept);
    /* The deserializers' records from their index caches: written by the first open, read by
     * the second; the same minibatches both times, and with every chunk kept in memory. */
    c.cache_index = true;
    for (int round = 0; round < 3; round++) {
        c.keep_data_in_memory = round == 2;
        bytes o = {0};
        ASSERT_EQ(read_checked(&c, &o, NULL, NULL), f.kept);
        ASSERT(b_eq(&ref, &o));
        b_free(&o);
    }
    ctf_index *idx;
    ctf_error e;
    ctf_config one = c;
    one.joins = NULL;
    one.num_joins = 0;
    ASSERT_OK(ctf_index_build(&one, &idx, &e), &e);
    ASSERT(idx->from_cache);
    ctf_index_free(idx);
    char cp[800];
    remove(ctf_index_cache_path(f.x, cp, sizeof cp));
    remove(ctf_index_cache_path(f.y, cp, sizeof cp));
    b_free(&ref);
    free_files(&f);
}

TEST(join_disk_read_only_directory)
{
    /* A directory nobody may write in (the spill goes to the system's temporary directory).
     * Root writes anyway: then the test hook acts the refusal out. */
    char dir[700];
    snprintf(dir, sizeof dir, "%s/jd-ro", test_tmpdir());
    mkdir(dir, 0755);
    jfiles f;
    make_files(&f, 606, 707);
    char x[800], y[800];
    snprintf(x, sizeof x, "%s/x.ctf", dir);
    snprintf(y, sizeof y, "%s/y.ctf", dir);
    ASSERT_EQ(rename(f.x, x), 0);
    ASSERT_EQ(rename(f.y, y), 0);
    ASSERT_EQ(chmod(dir, 0555), 0);
    const bool root = geteuid() == 0;
    if (root) ctf__join_spill_from = 1;
    const char *yp[] = {y};
    ctf_join_def jd;
    ctf_config c;
    join_cfg(&c, x, yp, &jd);
    const size_t saved = ctf__join_run_bytes;
    ctf__join_run_bytes = 64 * 40;
    bytes o = {0};
    test_log lb = {0};
    long n = read_checked(&c, &o, NULL, &lb);
    ctf__join_run_bytes = saved;
    ctf__join_spill_from = 0;
    ASSERT_EQ(n, f.kept);
    ASSERT_EQ(atomic_load(&ctf__join_spill_used), 1);
    ASSERT_EQ(lb.warnings, 21);
    ASSERT_EQ(spill_files_in(dir), 0);
    chmod(dir, 0755);
    remove(x);
    remove(y);
    rmdir(dir);
    b_free(&o);
    free(f.x);
    free(f.y);
}

/*======================================================================
 * The memory bound
 *====================================================================*/

/* One randomized sweep (1 MiB chunks, a window of 4) over the join of x and y, in a child.
 * @return : its peak RSS in KiB, or -1. */
static long join_peak_kib(const char *x, const char *y, uint64_t *sequences)
{
    const char *yp[] = {y};
    ctf_join_def jd;
    ctf_config c;
    join_cfg(&c, x, yp, &jd);
    c.chunk_size_bytes = 1 << 20;
    c.randomization_window = 4;
    c.max_sweeps = 1;
    return test_child_sweep_peak_kib(&c, sequences);
}

TEST(join_disk_memory_is_per_chunk_not_per_sequence)
{
    if (TEST_RSS_SANITIZED) return;
    /* 4 M and 12 M rows in each deserializer (20 and 60 MB): the window (4 chunks of 1 MiB,
     * about 0.84 M rows) and the read-ahead are full in both, and the big join holds 14 times
     * the window's sequences. Whole tables would cost 76 + 72 bytes per sequence: 1.2 GB more
     * for the big join. The peak moves by up to 60 MB from run to run with the threads'
     * timing (how many part chunks a window chunk holds when the consumer is late). */
    const size_t small = 4000000, big = 12000000;
    char *x1 = test_write_rows("jm-x1.ctf", "|x 1\n", small);
    char *y1 = test_write_rows("jm-y1.ctf", "|y 2\n", small);
    char *x2 = test_write_rows("jm-x2.ctf", "|x 1\n", big);
    char *y2 = test_write_rows("jm-y2.ctf", "|y 2\n", big);
    ASSERT(x1 && y1 && x2 && y2);
    uint64_t n1 = 0, n2 = 0;
    long k1 = join_peak_kib(x1, y1, &n1);
    long k2 = join_peak_kib(x2, y2, &n2);
    remove(x1);
    remove(y1);
    remove(x2);
    remove(y2);
    free(x1);
    free(y1);
    free(x2);
    free(y2);
    ASSERT(k1 > 0 && k2 > 0);
    ASSERT_U64_EQ(n1, small);
    ASSERT_U64_EQ(n2, big);
    const long extra = k2 - k1;
    const long per_sequence_kib = (long)((big - small) * 148 / 1024);
    if (extra >= per_sequence_kib / 4)
        fprintf(stderr, "  peak RSS %ld KiB (%zu sequences) vs %ld KiB (%zu sequences)\n", k1,
                small, k2, big);
    ASSERT(extra < per_sequence_kib / 4);
}

/*======================================================================
 * Failures
 *====================================================================*/

/* Opens the join of x and y (runs of 5 records, no threads) and reads one sweep.
 * @return : the status, *digest over what was delivered. */
static int fail_scenario(const char *x, const char *y, uint64_t *digest, ctf_error *e)
{
    const char *yp[] = {y};
    ctf_join_def jd;
    ctf_config c;
    join_cfg(&c, x, yp, &jd);
    c.num_threads = 0;
    c.max_sweeps = 1;
    ctf_reader *r;
    int rc = ctf_reader_open(&c, &r, e);
    if (rc) return rc;
    ctf_minibatch *mb;
    *digest = 1;
    while ((rc = ctf_reader_next(r, 13, &mb)) == 0 && mb) {
        *digest = test_digest_minibatch(*digest, mb);
        ctf_minibatch_free(mb);
    }
    if (rc) *e = *ctf_reader_error(r);
    ctf_reader_free(r);
    return rc;
}

TEST(join_disk_fails_each_allocation_cleanly)
{
    /* Shuffled keys in runs of 5 records (runs, merge passes, the tables on disk), then keys
     * in order (merged straight from the deserializers). */
    enum { N = 120 };
    for (int ordered = 0; ordered < 2; ordered++) {
        uint64_t *px = perm_of(N, ordered ? 0 : 11), *py = perm_of(N, ordered ? 0 : 12);
        char *x = write_keys("jf-x.ctf", px, N - 3, false);
        char *y = write_keys("jf-y.ctf", py, N, true);
        const size_t saved = ctf__join_run_bytes;
        ctf__join_run_bytes = 5 * 40;
        const long live0 = atomic_load(&ctf__alloc.live);
        uint64_t base = 0, d = 0;
        ctf_error e;
        atomic_store(&ctf__alloc.count, 0);
        const long runs0 = atomic_load(&ctf__join_runs_written);
        ASSERT_EQ(fail_scenario(x, y, &base, &e), 0);
        ASSERT(ordered || atomic_load(&ctf__join_runs_written) - runs0 > 2 * 16);
        const long count = atomic_load(&ctf__alloc.count);
        int bad = 0, failed = 0;
        for (long k = 1; k <= count && bad < 3; k++) {
            atomic_store(&ctf__alloc.count, 0);
            ctf__alloc.fail_at = k;
            int rc = fail_scenario(x, y, &d, &e);
            ctf__alloc.fail_at = 0;
            const long live = atomic_load(&ctf__alloc.live);
            bool ok = (rc == 0 && d == base) || (rc == CTF_ENOMEM && e.message[0]);
            failed += rc != 0;
            if (!ok || live != live0) {
                fprintf(stderr, "  fail_at=%ld: rc %d (%s), %ld blocks leaked\n", k, rc, e.message,
                        live - live0);
                atomic_store(&ctf__alloc.live, live0);
                bad++;
            }
        }
        ctf__join_run_bytes = saved;
        remove(x);
        remove(y);
        free(x);
        free(y);
        free(px);
        free(py);
        ASSERT_EQ(bad, 0);
        ASSERT(count > 100);
        /* Without threads nothing may swallow a failed allocation. */
        ASSERT_EQ(failed, count);
    }
}
