/*
 * test_corpus.c -- the deserializer seam: corpora of many files (lib/source/corpus.c) and
 * deserializers joined by key (lib/source/join.c), through the public reader API.
 *
 * Data are generated as sequences in memory and written out in several shapes: one file with
 * every stream, one file per stream group (the joined deserializers, in another key order),
 * the sequences split over N files (a corpus) and their concatenation. Runs that must agree are
 * compared as byte strings of the delivered sequences (key, then per stream its length and
 * data), minibatch by minibatch.
 */
#include "reader/pipeline.h"
#include "test.h"
#include "test_bytes.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/*======================================================================
 * Helpers
 *====================================================================*/

static uint64_t rnd(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static uint64_t rng(uint64_t *s, uint64_t lo, uint64_t hi) { return lo + rnd(s) % (hi - lo + 1); }

/* Reads to the end (at most max_calls minibatches of k samples); every minibatch is appended
 * to b followed by a separator holding its sequence count and position. @return : calls, or
 * -1 on an error. */
static long read_all(ctf_reader *r, uint64_t k, bytes *b, long max_calls)
{
    long calls = 0;
    while (calls < max_calls) {
        ctf_minibatch *mb;
        if (ctf_reader_next(r, k, &mb) != 0) {
            fprintf(stderr, "read_all: %s\n", ctf_reader_error(r)->message);
            return -1;
        }
        if (!mb) break;
        for (size_t i = 0; i < ctf_minibatch_num_sequences(mb); i++) append_seq(b, mb, i);
        uint64_t sep[2] = {ctf_minibatch_num_sequences(mb), ctf_minibatch_position(mb)};
        b_add(b, sep, sizeof sep);
        ctf_minibatch_free(mb);
        calls++;
    }
    return calls;
}

static ctf_reader *open_or_null(const ctf_config *c)
{
    ctf_reader *r = NULL;
    ctf_error e;
    if (ctf_reader_open(c, &r, &e) != 0) {
        fprintf(stderr, "ctf_reader_open: %s:%llu: %s\n", e.path, (unsigned long long)e.line,
                e.message);
        return NULL;
    }
    return r;
}

/* Generated sequences: dense x (dim 2) and sparse y (dim 10), each 1-3 samples. */
typedef struct gseq {
    uint64_t key;
    int nx, ny;
    int x[3][2];
    int y[3][2]; /* index, value */
} gseq;

static gseq *gen_seqs(uint64_t seed, size_t n, uint64_t key_base)
{
    gseq *g = calloc(n, sizeof *g);
    for (size_t i = 0; i < n; i++) {
        g[i].key = key_base + i;
        g[i].nx = (int)rng(&seed, 1, 3);
        g[i].ny = (int)rng(&seed, 1, 3);
        for (int l = 0; l < 3; l++) {
            g[i].x[l][0] = (int)rng(&seed, 0, 99);
            g[i].x[l][1] = (int)rng(&seed, 0, 99);
            g[i].y[l][0] = (int)rng(&seed, 0, 9);
            g[i].y[l][1] = (int)rng(&seed, 1, 9);
        }
    }
    return g;
}

/* Renders sequences [from, to) in the order given by perm (NULL: in order): with x, with y, or
 * both. */
static char *render(const gseq *g, const size_t *perm, size_t from, size_t to, bool wx, bool wy)
{
    size_t cap = (to - from) * 3 * 64 + 1, n = 0;
    char *t = malloc(cap);
    t[0] = 0;
    for (size_t a = from; a < to; a++) {
        const gseq *s = &g[perm ? perm[a] : a];
        int lines = CTF_MAX(wx ? s->nx : 0, wy ? s->ny : 0);
        for (int l = 0; l < lines; l++) {
            n += (size_t)snprintf(t + n, cap - n, "%llu", (unsigned long long)s->key);
            if (wx && l < s->nx)
                n += (size_t)snprintf(t + n, cap - n, " |x %d %d", s->x[l][0], s->x[l][1]);
            if (wy && l < s->ny)
                n += (size_t)snprintf(t + n, cap - n, " |y %d:%d", s->y[l][0], s->y[l][1]);
            n += (size_t)snprintf(t + n, cap - n, "\n");
        }
    }
    return t;
}

static const char *write_render(const char *name, const gseq *g, const size_t *perm, size_t from,
                                size_t to, bool wx, bool wy)
{
    char *t = render(g, perm, from, to, wx, wy);
    const char *p = test_write_str(name, t);
    free(t);
    return p;
}

static const ctf_stream_def SX[] = {{.name = "x", .dim = 2}};
static const ctf_stream_def SY[] = {{.name = "y", .dim = 10, .is_sparse = true}};
static const ctf_stream_def SXY[] = {{.name = "x", .dim = 2},
                                     {.name = "y", .dim = 10, .is_sparse = true}};

static void cfg_init(ctf_config *c, const ctf_stream_def *s, size_t ns)
{
    ctf_config_init(c);
    c->streams = s;
    c->num_streams = ns;
    c->log = test_log_capture;
    c->log_user = NULL;
}

/* Writes the sequences split over nf files (names "<stem>-NNN.ctf" in a directory of their
 * own) and their concatenation; paths get strdup'ed copies. */
static void write_corpus(const char *stem, const gseq *g, size_t n, size_t nf, char **paths,
                         char **concat)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s", test_tmpdir(), stem);
    mkdir(dir, 0755);
    for (size_t f = 0; f < nf; f++) {
        char name[64];
        snprintf(name, sizeof name, "%s/part-%03zu.ctf", stem, f);
        paths[f] = strdup(write_render(name, g, NULL, f * n / nf, (f + 1) * n / nf, true, true));
    }
    char name[64];
    snprintf(name, sizeof name, "%s-all.ctf", stem);
    *concat = strdup(write_render(name, g, NULL, 0, n, true, true));
}

static void free_paths(char **p, size_t n)
{
    for (size_t i = 0; i < n; i++) free(p[i]);
}

/*======================================================================
 * Corpora
 *====================================================================*/

TEST(corpus_equals_concatenation_in_file_order)
{
    enum { N = 120, NF = 5 };
    gseq *g = gen_seqs(11, N, 1000);
    char *paths[NF], *all;
    write_corpus("cat", g, N, NF, paths, &all);
    const uint64_t sizes[] = {1, 3, 7, 64};
    for (size_t workers = 1; workers <= 3; workers++)
        for (size_t si = 0; si < 4; si++) {
            ctf_config a, b;
            cfg_init(&a, SXY, 2);
            a.paths = (const char *const *)paths;
            a.num_paths = NF;
            a.randomize = false;
            a.chunk_size_bytes = 200;
            a.max_sweeps = 2;
            a.num_workers = workers;
            a.worker_rank = workers - 1;
            b = a;
            b.paths = NULL;
            b.num_paths = 0;
            b.path = all;
            ctf_reader *ra = open_or_null(&a), *rb = open_or_null(&b);
            ASSERT(ra && rb);
            ASSERT_EQ(ctf_reader_num_files(ra), NF);
            /* One sweep is every file's samples, as for the concatenation. */
            ctf_index_info i0, iall;
            ctf_index_get_info(ctf_reader_file_index(ra, 0), &i0);
            ctf_index_get_info(ctf_reader_index(rb), &iall);
            ASSERT_U64_EQ(ctf_reader_samples_per_sweep(ra), iall.samples);
            ASSERT_U64_EQ(ctf_reader_samples_per_sweep(rb), iall.samples);
            ASSERT(i0.samples < iall.samples);
            bytes x = {0}, y = {0};
            long ca = read_all(ra, sizes[si], &x, 100000), cb = read_all(rb, sizes[si], &y, 100000);
            ASSERT(ca > 0);
            ASSERT_EQ(ca, cb);
            ASSERT(b_eq(&x, &y));
            b_free(&x);
            b_free(&y);
            ctf_reader_free(ra);
            ctf_reader_free(rb);
        }
    free_paths(paths, NF);
    free(all);
    free(g);
}

TEST(corpus_of_one_file_is_that_file)
{
    gseq *g = gen_seqs(12, 80, 1);
    const char *p = write_render("one.ctf", g, NULL, 0, 80, true, true);
    char *path = strdup(p);
    const char *list[] = {path};
    ctf_config a, b;
    cfg_init(&a, SXY, 2);
    a.path = path;
    a.chunk_size_bytes = 150;
    a.randomization_window = 3;
    a.randomization_seed = 5;
    a.max_sweeps = 3;
    b = a;
    b.path = NULL;
    b.paths = list;
    b.num_paths = 1;
    ctf_reader *ra = open_or_null(&a), *rb = open_or_null(&b);
    ASSERT(ra && rb);
    bytes x = {0}, y = {0};
    ASSERT(read_all(ra, 5, &x, 7) == 7);
    ASSERT(read_all(rb, 5, &y, 7) == 7);
    ASSERT(b_eq(&x, &y));
    char sa[4096], sb[4096];
    size_t la, lb;
    ASSERT_EQ(ctf_reader_save_state(ra, sa, sizeof sa, &la), 0);
    ASSERT_EQ(ctf_reader_save_state(rb, sb, sizeof sb, &lb), 0);
    ASSERT_STR_EQ(sa, sb);
    ASSERT(!strstr(sa, "\"files\""));
    /* The state of one moves to the other. */
    ASSERT_EQ(ctf_reader_restore_state(ra, sb, lb), 0);
    b_free(&x);
    b_free(&y);
    ASSERT(read_all(ra, 5, &x, 1000) > 0);
    ASSERT(read_all(rb, 5, &y, 1000) > 0);
    ASSERT(b_eq(&x, &y));
    b_free(&x);
    b_free(&y);
    ctf_reader_free(ra);
    ctf_reader_free(rb);
    free(path);
    free(g);
}

/* Reads every minibatch of every worker until the end; counts each (file, key) delivered. */
static int count_keys(ctf_reader **rs, size_t nw, uint64_t k, uint32_t *count, size_t nfiles,
                      size_t keys_per_file, size_t max_calls)
{
    for (size_t call = 0; call < max_calls; call++) {
        int ended = 0;
        for (size_t w = 0; w < nw; w++) {
            ctf_minibatch *mb;
            if (ctf_reader_next(rs[w], k, &mb)) return -1;
            if (!mb) {
                ended++;
                continue;
            }
            const uint64_t *keys = ctf_minibatch_keys(mb);
            const uint32_t *files = ctf_minibatch_files(mb);
            for (size_t i = 0; i < ctf_minibatch_num_sequences(mb); i++) {
                if (files[i] >= nfiles) return -2;
                count[files[i] * keys_per_file + (keys[i] % keys_per_file)]++;
            }
            ctf_minibatch_free(mb);
        }
        if (ended == (int)nw) return 0;
        if (ended) return -3; /* workers end together */
    }
    return 0;
}

TEST(corpus_randomized_sweeps_deliver_every_sequence_once)
{
    enum { NF = 7, PER = 30 };
    char *paths[NF];
    for (size_t f = 0; f < NF; f++) {
        gseq *g = gen_seqs(100 + f, PER, 0); /* the same keys in every file: (file, key) */
        char name[64];
        snprintf(name, sizeof name, "rnd-%zu.ctf", f);
        paths[f] = strdup(write_render(name, g, NULL, 0, PER, true, true));
        free(g);
    }
    for (size_t nw = 1; nw <= 4; nw++) {
        ctf_reader *rs[4];
        for (size_t w = 0; w < nw; w++) {
            ctf_config c;
            cfg_init(&c, SXY, 2);
            c.paths = (const char *const *)paths;
            c.num_paths = NF;
            c.chunk_size_bytes = 120;
            c.randomization_window = 4;
            c.randomization_seed = 17;
            c.max_sweeps = 3;
            c.num_workers = nw;
            c.worker_rank = w;
            rs[w] = open_or_null(&c);
            ASSERT(rs[w]);
        }
        uint32_t count[NF * PER] = {0};
        ASSERT_EQ(count_keys(rs, nw, 9, count, NF, PER, 100000), 0);
        for (size_t i = 0; i < NF * PER; i++) ASSERT_EQ(count[i], 3);
        for (size_t w = 0; w < nw; w++) ctf_reader_free(rs[w]);
    }
    /* Elastic restore: two workers read a while, three continue from worker 0's state. */
    {
        ctf_reader *rs[3];
        ctf_config c;
        cfg_init(&c, SXY, 2);
        c.paths = (const char *const *)paths;
        c.num_paths = NF;
        c.chunk_size_bytes = 120;
        c.randomization_window = 4;
        c.randomization_seed = 17;
        c.max_sweeps = 2;
        c.num_workers = 2;
        for (size_t w = 0; w < 2; w++) {
            c.worker_rank = w;
            rs[w] = open_or_null(&c);
            ASSERT(rs[w]);
        }
        uint32_t count[NF * PER] = {0};
        ASSERT_EQ(count_keys(rs, 2, 9, count, NF, PER, 23), 0);
        char st[8192];
        size_t len;
        ASSERT_EQ(ctf_reader_save_state(rs[0], st, sizeof st, &len), 0);
        ASSERT(strstr(st, "\"files\""));
        ctf_reader_free(rs[0]);
        ctf_reader_free(rs[1]);
        c.num_workers = 3;
        for (size_t w = 0; w < 3; w++) {
            c.worker_rank = w;
            rs[w] = open_or_null(&c);
            ASSERT(rs[w]);
            ASSERT_EQ(ctf_reader_restore_state(rs[w], st, len), 0);
        }
        ASSERT_EQ(count_keys(rs, 3, 9, count, NF, PER, 100000), 0);
        /* Minibatch cuts fall on sequence boundaries: nothing lost, nothing twice. */
        for (size_t i = 0; i < NF * PER; i++) ASSERT_EQ(count[i], 2);
        for (size_t w = 0; w < 3; w++) ctf_reader_free(rs[w]);
    }
    free_paths(paths, NF);
}

TEST(corpus_changed_file_refused_at_restore)
{
    enum { NF = 3 };
    char *paths[NF];
    for (size_t f = 0; f < NF; f++) {
        gseq *g = gen_seqs(200 + f, 20, 0);
        char name[64];
        snprintf(name, sizeof name, "chg-%zu.ctf", f);
        paths[f] = strdup(write_render(name, g, NULL, 0, 20, true, true));
        free(g);
    }
    ctf_config c;
    cfg_init(&c, SXY, 2);
    c.paths = (const char *const *)paths;
    c.num_paths = NF;
    c.chunk_size_bytes = 100;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    bytes b = {0};
    ASSERT(read_all(r, 10, &b, 4) == 4);
    b_free(&b);
    char st[4096];
    size_t len;
    ASSERT_EQ(ctf_reader_save_state(r, st, sizeof st, &len), 0);
    ctf_reader_free(r);
    /* Same data: the state fits. */
    r = open_or_null(&c);
    ASSERT(r);
    ASSERT_EQ(ctf_reader_restore_state(r, st, len), 0);
    ctf_reader_free(r);
    /* File 1 rewritten with other values. */
    {
        gseq *g = gen_seqs(999, 20, 0);
        write_render("chg-1.ctf", g, NULL, 0, 20, true, true);
        free(g);
    }
    r = open_or_null(&c);
    ASSERT(r);
    ASSERT_EQ(ctf_reader_restore_state(r, st, len), CTF_ESTATE);
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "file 1 of the data");
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, paths[1]);
    ctf_reader_free(r);
    /* A changed list: one file fewer. */
    c.num_paths = 2;
    r = open_or_null(&c);
    ASSERT(r);
    ASSERT_EQ(ctf_reader_restore_state(r, st, len), CTF_ESTATE);
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "saved for 3 files, the reader reads 2");
    ctf_reader_free(r);
    free_paths(paths, NF);
}

TEST(corpus_errors_name_the_file_and_budget_spans_files)
{
    const char *a = test_write_str("err-a.ctf", "1 |x 1 2\n2 |x 1 zz\n3 |x 3 4\n");
    char *pa = strdup(a);
    const char *b = test_write_str("err-b.ctf", "1 |x 1 2\n2 |x 1 yy\n3 |x 3 4\n");
    char *pb = strdup(b);
    const char *list[] = {pa, pb};
    ctf_config c;
    cfg_init(&c, SX, 1);
    c.paths = list;
    c.num_paths = 2;
    c.randomize = false;
    c.max_errors = 1;
    test_log lb = {0};
    c.log_user = &lb;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb;
    int rc = 0;
    for (int i = 0; i < 10 && rc == 0; i++) {
        rc = ctf_reader_next(r, 2, &mb);
        if (!rc && !mb) break;
        ctf_minibatch_free(mb);
    }
    /* The first error (file a) is tolerated and logged naming a; the second (file b) ends it. */
    ASSERT_EQ(rc, CTF_EPARSE);
    ASSERT_STR_CONTAINS(lb.text, pa);
    ASSERT_STR_EQ(ctf_reader_error(r)->path, pb);
    ASSERT_EQ(ctf_reader_error(r)->line, 2);
    ctf_reader_free(r);
    free(pa);
    free(pb);
}

TEST(corpus_patterns_expand_sorted_and_no_match_is_an_error)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/glob", test_tmpdir());
    mkdir(dir, 0755);
    /* Written out of order; "B" sorts before "a" byte-wise. */
    test_write_str("glob/b.ctf", "2 |x 2 2\n");
    test_write_str("glob/a.ctf", "1 |x 1 1\n");
    test_write_str("glob/B.ctf", "3 |x 3 3\n");
    test_write_str("glob/c.txt", "4 |x 4 4\n");
    char pat[450];
    snprintf(pat, sizeof pat, "%s/*.ctf", dir);
    const char *list[] = {pat};
    ctf_config c;
    cfg_init(&c, SX, 1);
    c.paths = list;
    c.num_paths = 1;
    c.randomize = false;
    c.max_sweeps = 1;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ASSERT_EQ(ctf_reader_num_files(r), 3);
    ASSERT_STR_CONTAINS(ctf_reader_file_path(r, 0), "/B.ctf");
    ASSERT_STR_CONTAINS(ctf_reader_file_path(r, 1), "/a.ctf");
    ASSERT_STR_CONTAINS(ctf_reader_file_path(r, 2), "/b.ctf");
    ASSERT(ctf_reader_file_path(r, 3) == NULL);
    ctf_minibatch *mb;
    ASSERT_EQ(ctf_reader_next(r, 10, &mb), 0);
    ASSERT(mb);
    ASSERT_EQ(ctf_minibatch_num_sequences(mb), 3);
    ASSERT_EQ(ctf_minibatch_keys(mb)[0], 3);
    ASSERT_EQ(ctf_minibatch_keys(mb)[1], 1);
    ASSERT_EQ(ctf_minibatch_files(mb)[2], 2);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    snprintf(pat, sizeof pat, "%s/*.nothing", dir);
    ctf_error e;
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EIO);
    ASSERT_STR_CONTAINS(e.message, "no file matches");
    ASSERT_STR_CONTAINS(e.path, "*.nothing");
}

static size_t open_fds(void)
{
    size_t n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d) return 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

TEST(corpus_bounds_open_descriptors_and_memory)
{
    enum { NF = 300, PER = 12 };
    char dir[400];
    snprintf(dir, sizeof dir, "%s/many", test_tmpdir());
    mkdir(dir, 0755);
    for (size_t f = 0; f < NF; f++) {
        gseq *g = gen_seqs(300 + f, PER, 0);
        char name[64];
        snprintf(name, sizeof name, "many/f%04zu.ctf", f);
        write_render(name, g, NULL, 0, PER, true, true);
        free(g);
    }
    char pat[450];
    snprintf(pat, sizeof pat, "%s/f*.ctf", dir);
    const char *list[] = {pat};
    ctf_config c;
    cfg_init(&c, SXY, 2);
    c.paths = list;
    c.num_paths = 1;
    c.chunk_size_bytes = 150; /* several chunks per file */
    c.randomization_window = 4;
    c.max_sweeps = 1;
    c.num_threads = 2;
    c.prefetch_chunks = 4;
    const size_t before = open_fds();
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    size_t most = 0, seqs = 0;
    ctf_minibatch *mb;
    while (ctf_reader_next(r, 16, &mb) == 0 && mb) {
        seqs += ctf_minibatch_num_sequences(mb);
        most = CTF_MAX(most, open_fds());
        ctf_minibatch_free(mb);
    }
    ASSERT_EQ(ctf_reader_error(r)->code, 0);
    ASSERT_EQ(seqs, NF * PER);
    ASSERT(most <= before + 16);
    ctf_stats st;
    ctf_reader_get_stats(r, &st);
    /* The window (4) plus the chunks parsed ahead (4) plus the ones a window straddles. */
    ASSERT(st.chunks_loaded >= 2 * NF);
    ASSERT(st.chunks_resident_peak <= 4 + 4 + 4);
    ctf_reader_free(r);
}

/*======================================================================
 * Joins by key
 *====================================================================*/

/* A permutation of [0, n). */
static size_t *shuffled(size_t n, uint64_t seed)
{
    size_t *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)rng(&seed, 0, i - 1), t = p[i - 1];
        p[i - 1] = p[j];
        p[j] = t;
    }
    return p;
}

TEST(join_equals_the_single_file_with_both_streams)
{
    enum { N = 70 };
    gseq *g = gen_seqs(21, N, 500);
    char *both = strdup(write_render("j-both.ctf", g, NULL, 0, N, true, true));
    char *xs = strdup(write_render("j-x.ctf", g, NULL, 0, N, true, false));
    /* The joined deserializer: y in another key order, over two files. */
    size_t *perm = shuffled(N, 77);
    char *y1 = strdup(write_render("j-y1.ctf", g, perm, 0, N / 2, false, true));
    char *y2 = strdup(write_render("j-y2.ctf", g, perm, N / 2, N, false, true));
    const char *ypaths[] = {y1, y2};
    ctf_join_def jd = {.paths = ypaths, .num_paths = 2, .streams = SY, .num_streams = 1};
    const uint64_t sizes[] = {1, 4, 9, 100};
    for (int mode = 0; mode < 6; mode++) {
        ctf_config a, b;
        cfg_init(&b, SXY, 2);
        b.path = both;
        /* One sequence per chunk (any chunk size below a sequence), so that both chunk tables
         * agree; or one chunk for everything. */
        b.chunk_size_bytes = mode == 3 ? 1u << 20 : 1;
        b.randomization_window = mode == 2 ? 25 : 6;
        b.window_in_samples = mode == 2;
        b.randomization_seed = 3 + (uint64_t)mode;
        b.max_sweeps = 3;
        if (mode == 4) {
            /* Truncated BPTT needs equal stream lengths: the same data with y as long as x. */
            b.truncation_length = 2;
            for (size_t i = 0; i < N; i++) g[i].ny = g[i].nx;
            write_render("j-both.ctf", g, NULL, 0, N, true, true);
            write_render("j-y1.ctf", g, perm, 0, N / 2, false, true);
            write_render("j-y2.ctf", g, perm, N / 2, N, false, true);
        }
        if (mode == 5) {
            b.keep_data_in_memory = true;
            b.num_workers = 2;
            b.worker_rank = 1;
        }
        if (mode == 1) b.randomize = false;
        a = b;
        a.path = xs;
        a.streams = SX;
        a.num_streams = 1;
        a.joins = &jd;
        a.num_joins = 1;
        for (size_t si = 0; si < 4; si++) {
            ctf_reader *ra = open_or_null(&a), *rb = open_or_null(&b);
            ASSERT(ra && rb);
            bytes x = {0}, y = {0};
            long ca = read_all(ra, sizes[si], &x, 100000), cb = read_all(rb, sizes[si], &y, 100000);
            if (ca <= 0 || ca != cb || !b_eq(&x, &y))
                fprintf(stderr, "mode %d size %llu: %ld vs %ld calls\n", mode,
                        (unsigned long long)sizes[si], ca, cb);
            ASSERT(ca > 0);
            ASSERT_EQ(ca, cb);
            ASSERT(b_eq(&x, &y));
            ctf_stats sa, sb;
            ctf_reader_get_stats(ra, &sa);
            ctf_reader_get_stats(rb, &sb);
            ASSERT_EQ(sa.keys_missing, 0);
            ASSERT_EQ(sa.streams[1].samples, sb.streams[1].samples);
            b_free(&x);
            b_free(&y);
            ctf_reader_free(ra);
            ctf_reader_free(rb);
        }
        /* A checkpoint of the joined source continues it exactly. */
        ctf_reader *r1 = open_or_null(&a), *r2 = open_or_null(&a);
        ASSERT(r1 && r2);
        bytes x = {0}, y = {0};
        ASSERT(read_all(r1, 7, &x, 5) == 5);
        char st[4096];
        size_t len;
        ASSERT_EQ(ctf_reader_save_state(r1, st, sizeof st, &len), 0);
        ASSERT(strstr(st, "\"files\"")); /* three files: x, y1, y2 */
        ASSERT_EQ(ctf_reader_restore_state(r2, st, len), 0);
        b_free(&x);
        ASSERT(read_all(r1, 7, &x, 100000) > 0);
        ASSERT(read_all(r2, 7, &y, 100000) > 0);
        if (!b_eq(&x, &y)) fprintf(stderr, "mode %d: restore differs\n", mode);
        ASSERT(b_eq(&x, &y));
        b_free(&x);
        b_free(&y);
        ctf_reader_free(r1);
        ctf_reader_free(r2);
    }
    free(perm);
    free(both);
    free(xs);
    free(y1);
    free(y2);
    free(g);
}

TEST(join_missing_keys_dropped_and_counted)
{
    enum { N = 40 };
    gseq *g = gen_seqs(31, N, 0);
    char *xs = strdup(write_render("m-x.ctf", g, NULL, 0, N, true, false));
    /* y lacks keys 5, 17 and 30, and has keys 100 and 101 that x lacks. */
    gseq yg[N];
    size_t ny = 0;
    for (size_t i = 0; i < N; i++)
        if (i != 5 && i != 17 && i != 30) yg[ny++] = g[i];
    yg[ny] = g[0];
    yg[ny++].key = 100;
    yg[ny] = g[1];
    yg[ny++].key = 101;
    char *ys = strdup(write_render("m-y.ctf", yg, NULL, 0, ny, false, true));
    const char *ypaths[] = {ys};
    ctf_join_def jd = {.paths = ypaths,
                       .num_paths = 1,
                       .streams = SY,
                       .num_streams = 1,
                       .origin = "train.cntk:12:5"};
    ctf_config c;
    cfg_init(&c, SX, 1);
    c.path = xs;
    c.joins = &jd;
    c.num_joins = 1;
    c.randomize = false;
    c.max_sweeps = 2;
    test_log lb = {0};
    c.log_user = &lb;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    uint32_t seen[N] = {0};
    ctf_minibatch *mb;
    while (ctf_reader_next(r, 6, &mb) == 0 && mb) {
        ASSERT_EQ(ctf_minibatch_num_streams(mb), 2);
        for (size_t i = 0; i < ctf_minibatch_num_sequences(mb); i++) {
            uint64_t k = ctf_minibatch_keys(mb)[i];
            ASSERT(k < N);
            seen[k]++;
        }
        ctf_minibatch_free(mb);
    }
    for (size_t i = 0; i < N; i++) ASSERT_EQ(seen[i], (i == 5 || i == 17 || i == 30) ? 0 : 2);
    ctf_stats st;
    ctf_reader_get_stats(r, &st);
    ASSERT_EQ(st.keys_missing, 3);
    ASSERT_EQ(st.keys_unmatched, 2);
    ASSERT_EQ(st.dropped_sequences, 3);
    ASSERT(st.warnings >= 3);
    ASSERT_EQ(lb.warnings, 3);
    ASSERT_STR_CONTAINS(lb.text,
                        "sequence key 17 has no match in deserializer 1 (train.cntk:12:5)");
    ASSERT_STR_CONTAINS(lb.text, xs);
    ctf_reader_free(r);
    free(xs);
    free(ys);
    free(g);
}

TEST(join_repeated_key_is_an_error_naming_both_places)
{
    const char *x = test_write_str("d-x.ctf", "1 |x 1 1\n2 |x 2 2\n3 |x 3 3\n");
    char *xs = strdup(x);
    const char *y = test_write_str("d-y.ctf", "3 |y 1:1\n1 |y 2:2\n3 |y 3:3\n2 |y 4:4\n");
    char *ys = strdup(y);
    const char *ypaths[] = {ys};
    ctf_join_def jd = {.paths = ypaths, .num_paths = 1, .streams = SY, .num_streams = 1};
    ctf_config c;
    cfg_init(&c, SX, 1);
    c.path = xs;
    c.joins = &jd;
    c.num_joins = 1;
    ctf_reader *r;
    ctf_error e;
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EPARSE);
    ASSERT_STR_EQ(e.path, ys);
    ASSERT_EQ(e.line, 3);
    ASSERT_STR_CONTAINS(e.message, "sequence key 3 appears twice");
    ASSERT_STR_CONTAINS(e.message, ":1;");
    /* Stream names are unique over all deserializers. */
    ctf_join_def jd2 = {.paths = ypaths, .num_paths = 1, .streams = SX, .num_streams = 1};
    c.joins = &jd2;
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EINVAL);
    ASSERT_STR_CONTAINS(e.message, "'x' is already a stream of another deserializer");
    free(xs);
    free(ys);
}

TEST(join_frame_mode_and_definesMBSize_in_a_joined_deserializer)
{
    /* y defines the minibatch size: lengths on the timeline are y's. */
    const char *x = test_write_str("f-x.ctf", "1 |x 1 1\n1 |x 1 2\n2 |x 2 2\n3 |x 3 3\n");
    char *xs = strdup(x);
    const char *y = test_write_str("f-y.ctf", "2 |y 1:1\n1 |y 2:2\n3 |y 3:3\n3 |y 3:4\n3 |y 3:5\n");
    char *ys = strdup(y);
    const char *ypaths[] = {ys};
    ctf_stream_def ymb = {.name = "y", .dim = 10, .is_sparse = true, .defines_mb_size = true};
    ctf_join_def jd = {.paths = ypaths, .num_paths = 1, .streams = &ymb, .num_streams = 1};
    ctf_config c;
    cfg_init(&c, SX, 1);
    c.path = xs;
    c.joins = &jd;
    c.num_joins = 1;
    c.randomize = false;
    c.max_sweeps = 1;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb;
    ASSERT_EQ(ctf_reader_next(r, 2, &mb), 0);
    ASSERT_EQ(ctf_minibatch_num_sequences(mb), 2); /* keys 1 and 2: 1 + 1 samples of y */
    ASSERT_EQ(ctf_minibatch_num_samples(mb), 2);
    ctf_minibatch_free(mb);
    ASSERT_EQ(ctf_reader_next(r, 2, &mb), 0);
    ASSERT_EQ(ctf_minibatch_num_sequences(mb), 1); /* key 3: 3 samples of y */
    ASSERT_EQ(ctf_minibatch_num_samples(mb), 3);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    /* Frame mode: key 1 has two samples of x, which is an error (counted, dropped). */
    ctf_join_def jd1 = {.paths = ypaths, .num_paths = 1, .streams = SY, .num_streams = 1};
    c.joins = &jd1;
    c.frame_mode = true;
    c.max_errors = 10;
    r = open_or_null(&c);
    ASSERT(r);
    size_t seqs = 0;
    while (ctf_reader_next(r, 1, &mb) == 0 && mb) {
        seqs += ctf_minibatch_num_sequences(mb);
        ctf_minibatch_free(mb);
    }
    ASSERT_EQ(ctf_reader_error(r)->code, 0);
    ctf_stats st;
    ctf_reader_get_stats(r, &st);
    ASSERT(st.errors >= 2); /* key 1 in x, key 3 in y */
    ASSERT_EQ(seqs, 1);     /* key 2 */
    ctf_reader_free(r);
    free(xs);
    free(ys);
}

TEST(join_part_chunks_are_held_only_while_the_window_needs_them)
{
    enum { N = 300 };
    gseq *g = gen_seqs(41, N, 0);
    char *xs = strdup(write_render("h-x.ctf", g, NULL, 0, N, true, false));
    size_t *rev = malloc(N * sizeof *rev);
    for (size_t i = 0; i < N; i++) rev[i] = N - 1 - i;
    char *ys = strdup(write_render("h-y.ctf", g, rev, 0, N, false, true));
    const char *ypaths[] = {ys};
    ctf_join_def jd = {.paths = ypaths, .num_paths = 1, .streams = SY, .num_streams = 1};
    for (int threads = 0; threads <= 2; threads += 2) {
        ctf_config c;
        cfg_init(&c, SX, 1);
        c.path = xs;
        c.joins = &jd;
        c.num_joins = 1;
        c.chunk_size_bytes = 120; /* about 60 chunks in each file */
        c.randomization_window = 3;
        c.max_sweeps = 1;
        c.num_threads = (size_t)threads;
        c.prefetch_chunks = 2;
        ctf_reader *r = open_or_null(&c);
        ASSERT(r);
        size_t seqs = 0;
        ctf_minibatch *mb;
        ctf_stats st;
        while (ctf_reader_next(r, 5, &mb) == 0 && mb) {
            seqs += ctf_minibatch_num_sequences(mb);
            ctf_minibatch_free(mb);
        }
        ASSERT_EQ(ctf_reader_error(r)->code, 0);
        ASSERT_EQ(seqs, N);
        ctf_reader_get_stats(r, &st);
        ASSERT(st.chunks_loaded > 40);
        /* The window's primary chunks, the ones parsed ahead, and the part chunks they touch
         * (the part holds the keys in reverse order: still a few per primary chunk). */
        ASSERT(st.chunks_resident_peak <= 24);
        ASSERT(st.chunks_resident_peak >= 2); /* part chunks are counted too */
        /* All released at the end of the data. (With threads the prefetcher may still hold a
         * parsed chunk it was asked for, so the end is checked on the caller's thread.) */
        if (threads == 0) {
            ASSERT_EQ(st.chunks_resident, 0);
            ASSERT_EQ(st.bytes_resident, 0);
        }
        ctf_reader_free(r);
    }
    free(rev);
    free(xs);
    free(ys);
    free(g);
}

/*======================================================================
 * Allocation failures
 *====================================================================*/

typedef struct jrun {
    int rc;
    ctf_error err;
    uint64_t digest;
} jrun;

/* A corpus of two files joined with a part of two files: open, read, save, reopen, restore,
 * read. The first failure ends it. */
static void join_scenario(const char *const *xs, const char *const *ys, jrun *o)
{
    memset(o, 0, sizeof *o);
    o->digest = 0xcbf29ce484222325ull;
    ctf_join_def jd = {.paths = ys, .num_paths = 2, .streams = SY, .num_streams = 1};
    ctf_config c;
    cfg_init(&c, SX, 1);
    c.paths = xs;
    c.num_paths = 2;
    c.joins = &jd;
    c.num_joins = 1;
    c.chunk_size_bytes = 60;
    c.randomization_window = 2;
    c.num_threads = 0;
    c.prefetch_chunks = 0;
    ctf_reader *r1 = NULL, *r2 = NULL;
    char state[2048];
    size_t len = 0;
    ctf_minibatch *mb = NULL;
#define JSTEP(call, errp) \
    do { \
        int rc_ = (call); \
        if (rc_) { \
            o->rc = rc_; \
            o->err = *(errp); \
            goto out; \
        } \
    } while (0)
    JSTEP(ctf_reader_open(&c, &r1, &o->err), &o->err);
    for (int i = 0; i < 5; i++) {
        JSTEP(ctf_reader_next(r1, 4, &mb), ctf_reader_error(r1));
        o->digest = test_digest_minibatch(o->digest, mb);
        ctf_minibatch_free(mb);
    }
    if (ctf_reader_save_state(r1, state, sizeof state, &len)) {
        o->rc = CTF_ENOMEM;
        ctf__fail(&o->err, CTF_ENOMEM, CTF__NOWHERE, "save_state failed");
        goto out;
    }
    JSTEP(ctf_reader_open(&c, &r2, &o->err), &o->err);
    JSTEP(ctf_reader_restore_state(r2, state, len), ctf_reader_error(r2));
    for (int i = 0; i < 8; i++) {
        JSTEP(ctf_reader_next(r2, 4, &mb), ctf_reader_error(r2));
        o->digest = test_digest_minibatch(o->digest, mb);
        ctf_minibatch_free(mb);
    }
#undef JSTEP
out:
    ctf_reader_free(r1);
    ctf_reader_free(r2);
}

TEST(join_and_corpus_fail_each_allocation)
{
    enum { N = 24 };
    gseq *g = gen_seqs(51, N, 0);
    char *x1 = strdup(write_render("a-x1.ctf", g, NULL, 0, N / 2, true, false));
    char *x2 = strdup(write_render("a-x2.ctf", g, NULL, N / 2, N, true, false));
    size_t *perm = shuffled(N, 5);
    char *y1 = strdup(write_render("a-y1.ctf", g, perm, 0, N / 2, false, true));
    char *y2 = strdup(write_render("a-y2.ctf", g, perm, N / 2, N, false, true));
    const char *xs[] = {x1, x2}, *ys[] = {y1, y2};
    const long live0 = atomic_load(&ctf__alloc.live);
    jrun base;
    atomic_store(&ctf__alloc.count, 0);
    join_scenario(xs, ys, &base);
    const long count = atomic_load(&ctf__alloc.count);
    int bad = 0, failed = 0;
    if (base.rc || atomic_load(&ctf__alloc.live) != live0) bad++;
    for (long k = 1; k <= count && bad < 3; k++) {
        jrun o;
        atomic_store(&ctf__alloc.count, 0);
        ctf__alloc.fail_at = k;
        join_scenario(xs, ys, &o);
        ctf__alloc.fail_at = 0;
        const long live = atomic_load(&ctf__alloc.live);
        bool ok = (o.rc == 0 && o.digest == base.digest) ||
                  (o.rc == CTF_ENOMEM && o.err.code == CTF_ENOMEM && o.err.message[0]);
        ok = ok && live == live0;
        failed += o.rc != 0;
        if (!ok) {
            fprintf(stderr, "  fail_at=%ld: rc %d (%s), %ld blocks leaked\n", k, o.rc,
                    o.err.message, live - live0);
            atomic_store(&ctf__alloc.live, live0);
            bad++;
        }
    }
    ctf__alloc.fail_at = 0;
    free(perm);
    free(x1);
    free(x2);
    free(y1);
    free(y2);
    free(g);
    ASSERT_EQ(bad, 0);
    ASSERT(count > 100);
    /* Without threads nothing may swallow a failed allocation. */
    ASSERT_EQ(failed, count);
}
