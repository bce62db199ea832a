/*
 * test_reader.c -- the reader (lib/reader/reader.c, lib/reader/prefetch.c): the timeline and its
 * limits (rules 6), workers (rules 7), checkpoints (rules 8), memory bound (rules 4.4), errors from
 * background threads (rules 10), frame mode and the rules 5.6 vector through the whole pipeline.
 *
 * Most properties are checked by comparing byte strings: every delivered sequence serialized
 * as key + per stream (length, dense values or sparse nnz/indices/values), independent of where
 * the minibatch cuts fell. Two runs that must agree (other minibatch sizes, a restore, other
 * thread counts) must produce identical strings.
 */
#include "reader_harness.h"

/*======================================================================
 * Limits and cutting (rules 6.1, 6.2, 6.4)
 *====================================================================*/

TEST(reader_max_sweeps_cuts_and_end)
{
    const char *path = line_file("four.ctf", 4);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.randomize = false;
    c.max_sweeps = 3;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    const uint64_t want_n[] = {5, 5, 2}, want_pos[] = {5, 10, 12};
    const uint64_t want_keys[] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 5, &mb), ctf_reader_error(r));
        ASSERT(mb);
        ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), want_n[i]);
        ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), want_n[i]);
        ASSERT_U64_EQ(ctf_minibatch_position(mb), want_pos[i]);
        ASSERT(ctf_minibatch_end_of_sweep(mb));
        ASSERT_U64_EQ(ctf_minibatch_sweep(mb), (uint64_t)i);
        for (size_t j = 0; j < ctf_minibatch_num_sequences(mb); j++)
            ASSERT_U64_EQ(ctf_minibatch_keys(mb)[j], want_keys[at++]);
        ctf_minibatch_free(mb);
    }
    for (int i = 0; i < 3; i++) {
        ctf_minibatch *mb = (ctf_minibatch *)1;
        ASSERT_OK(ctf_reader_next(r, 5, &mb), ctf_reader_error(r));
        ASSERT(mb == NULL);
    }
    ASSERT_U64_EQ(ctf_reader_position(r), 12);
    ctf_reader_free(r);
}

TEST(reader_max_samples_and_full_sweep)
{
    const char *path = line_file("four.ctf", 4);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.max_samples = 11; /* randomized: the limit does not depend on the order */
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    const uint64_t want[] = {5, 5, 1};
    for (int i = 0; i < 3; i++) {
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 5, &mb), ctf_reader_error(r));
        ASSERT(mb);
        ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), want[i]);
        ctf_minibatch_free(mb);
    }
    for (int i = 0; i < 2; i++) {
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 5, &mb), ctf_reader_error(r));
        ASSERT(mb == NULL);
    }
    ctf_reader_free(r);

    /* FULL_DATA_SWEEP: exactly one sweep, every key once, however it is cut. */
    const uint64_t sizes[] = {3, 100};
    for (int s = 0; s < 2; s++) {
        c.max_samples = CTF_FULL_DATA_SWEEP;
        r = open_or_null(&c);
        ASSERT(r);
        uint64_t seen[4] = {0}, total = 0;
        ctf_minibatch *mb;
        for (;;) {
            ASSERT_OK(ctf_reader_next(r, sizes[s], &mb), ctf_reader_error(r));
            if (!mb) break;
            for (size_t j = 0; j < ctf_minibatch_num_sequences(mb); j++)
                seen[ctf_minibatch_keys(mb)[j]]++;
            total += ctf_minibatch_num_samples(mb);
            ctf_minibatch_free(mb);
        }
        ASSERT_U64_EQ(total, 4);
        for (int k = 0; k < 4; k++) ASSERT_U64_EQ(seen[k], 1);
        ASSERT_U64_EQ(ctf_reader_position(r), 4);
        ctf_reader_free(r);
    }
}

/* max_sweeps takes CTF_FULL_DATA_SWEEP too (one sweep), so that a binding can pass either limit
 * through unchanged. */
TEST(reader_max_sweeps_full_data_sweep_is_one_sweep)
{
    const char *path = line_file("four_sweeps.ctf", 4);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.max_sweeps = CTF_FULL_DATA_SWEEP;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    uint64_t total = 0;
    ctf_minibatch *mb;
    for (;;) {
        ASSERT_OK(ctf_reader_next(r, 3, &mb), ctf_reader_error(r));
        if (!mb) break;
        total += ctf_minibatch_num_samples(mb);
        ctf_minibatch_free(mb);
    }
    ASSERT_U64_EQ(total, 4);
    ctf_reader_free(r);
}

static void count_log(void *user, ctf_severity sev, const ctf_error *what)
{
    if (sev == CTF_SEV_WARNING && strstr(what->message, "chunks for 2 workers")) ++*(int *)user;
}

/* The window-smaller-than-workers warning comes when the worker count changes after open too
 * (bindings open with one worker and pass the partition with each call). */
TEST(reader_set_worker_warns_about_few_chunks)
{
    const char *path = line_file("few_chunks.ctf", 8);
    ctf_config c;
    int warned = 0;
    cfg_base(&c, path, X1, 1);
    c.log = count_log;
    c.log_user = &warned;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ASSERT(warned == 0);
    ASSERT_OK(ctf_reader_set_worker(r, 2, 1), ctf_reader_error(r));
    ASSERT(warned == 1);
    ASSERT_OK(ctf_reader_set_worker(r, 2, 0), ctf_reader_error(r)); /* same count: no repeat */
    ASSERT(warned == 1);
    ctf_reader_free(r);
}

/* The warning counts the chunks of every file of a corpus, not the first file's. */
TEST(reader_few_chunks_counts_the_whole_corpus)
{
    char *a = strdup(line_file("few_a.ctf", 8)), *b = strdup(line_file("few_b.ctf", 8));
    const char *both[] = {a, b};
    for (size_t files = 1; files <= 2; files++) {
        ctf_config c;
        int warned = 0;
        cfg_base(&c, NULL, X1, 1);
        c.paths = both;
        c.num_paths = files;
        c.num_workers = 2;
        c.log = count_log;
        c.log_user = &warned;
        ctf_reader *r = open_or_null(&c);
        ASSERT(r);
        ctf_reader_free(r);
        /* one chunk a file: one file is too few for 2 workers, two files are not */
        ASSERT_EQ(warned, files == 1 ? 1 : 0);
    }
    free(a);
    free(b);
}

TEST(reader_request_spans_many_sweeps)
{
    const char *path = test_write_str("seven.ctf", "5 |x 1\n5 |x 2\n5 |x 3\n5 |x 4\n5 |x 5\n"
                                                   "5 |x 6\n5 |x 7\n");
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_next(r, 1000, &mb), ctf_reader_error(r));
    ASSERT(mb);
    ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), 142);
    ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), 994);
    ASSERT_U64_EQ(ctf_minibatch_position(mb), 994);
    ASSERT_U64_EQ(ctf_minibatch_sweep(mb), 0);
    ASSERT(ctf_minibatch_end_of_sweep(mb));
    ctf_stream_view v;
    ASSERT_OK(ctf_minibatch_stream(mb, 0, &v), ctf_reader_error(r));
    ASSERT_U64_EQ(v.num_samples, 994);
    ASSERT_DBL_EQ(((const float *)v.values)[993], 7.0);
    for (size_t i = 0; i < 142; i++) ASSERT_EQ(v.lengths[i], 7);
    ctf_minibatch_free(mb);
    ASSERT_OK(ctf_reader_next(r, 1000, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_position(mb), 1988);
    ASSERT_U64_EQ(ctf_minibatch_sweep(mb), 142);
    ctf_minibatch_free(mb);
    /* A sequence longer than the request comes alone. */
    ASSERT_OK(ctf_reader_next(r, 3, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), 1);
    ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), 7);
    ASSERT_U64_EQ(ctf_minibatch_position(mb), 1995);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
}

/* A request of more than CTF_MAX_MB_SWEEPS sweeps is refused (it would grow until memory runs
 * out with endless sweeps), unless the data limit makes the minibatch smaller; the reader stays
 * usable. Found by the fuzzer (truncationLength = 2^64 - 1). */
TEST(reader_refuses_runaway_minibatch)
{
    const char *path = test_write_str("two.ctf", "|x 1\n|x 2\n");
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb = NULL;
    ASSERT_EQ(ctf_reader_next(r, (uint64_t)2 * CTF_MAX_MB_SWEEPS + 2, &mb), CTF_EINVAL);
    ASSERT(!mb);
    ASSERT(strstr(ctf_reader_error(r)->message, "sweeps"));
    ASSERT_OK(ctf_reader_next(r, (uint64_t)2 * CTF_MAX_MB_SWEEPS, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), (uint64_t)2 * CTF_MAX_MB_SWEEPS);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    /* With a limit of one sweep the same request is one sweep. */
    c.max_sweeps = 1;
    r = open_or_null(&c);
    ASSERT(r);
    ASSERT_OK(ctf_reader_next(r, UINT64_MAX, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), 2);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    /* Truncated BPTT: the window length counts. */
    c.max_sweeps = CTF_INFINITELY_REPEAT;
    c.truncation_length = SIZE_MAX;
    r = open_or_null(&c);
    ASSERT(r);
    ASSERT_EQ(ctf_reader_next(r, 4, &mb), CTF_EINVAL);
    ASSERT(strstr(ctf_reader_error(r)->message, "truncation_length"));
    ctf_reader_free(r);
}

TEST(reader_first_sequence_always_no_lookahead)
{
    /* Sequences of 2, 5 and 1 samples. */
    const char *path = test_write_str("nolook.ctf", "1 |x 1\n1 |x 1\n2 |x 2\n2 |x 2\n2 |x 2\n"
                                                    "2 |x 2\n2 |x 2\n3 |x 3\n");
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.randomize = false;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    const struct {
        size_t n;
        uint64_t k0, k1, samples;
    } want[] = {
        {1, 1, 0, 2}, /* 2 + 5 > 4: the 5 ends it, the 1 behind it is not pulled forward */
        {1, 2, 0, 5}, /* 5 > 4 but the first sequence is always taken */
        {2, 3, 1, 3}, /* 1 + 2 (next sweep), then 5 does not fit */
        {1, 2, 0, 5},
    };
    for (int i = 0; i < 4; i++) {
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 4, &mb), ctf_reader_error(r));
        ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), want[i].n);
        ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), want[i].samples);
        ASSERT_U64_EQ(ctf_minibatch_keys(mb)[0], want[i].k0);
        if (want[i].n > 1) ASSERT_U64_EQ(ctf_minibatch_keys(mb)[1], want[i].k1);
        ASSERT_EQ(ctf_minibatch_end_of_sweep(mb), i == 2);
        ctf_minibatch_free(mb);
    }
    ctf_reader_free(r);
}

TEST(reader_defines_mb_size_counts_labels)
{
    /* Three lines of features, one label per sequence: index samples are 1 per sequence. */
    const char *path = test_write_str("labels.ctf", "1 |x 1 |l 0:1\n1 |x 2\n1 |x 3\n"
                                                    "2 |x 4 |l 1:1\n2 |x 5\n2 |x 6\n"
                                                    "3 |x 7 |l 0:1\n3 |x 8\n3 |x 9\n");
    const ctf_stream_def defs[] = {
        {.name = "x", .dim = 1},
        {.name = "l", .dim = 2, .is_sparse = true, .defines_mb_size = true}};
    ctf_config c;
    cfg_base(&c, path, defs, 2);
    c.randomize = false;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_next(r, 2, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), 2);
    ASSERT_U64_EQ(ctf_minibatch_num_samples(mb), 2);
    ASSERT_U64_EQ(ctf_minibatch_position(mb), 2);
    ctf_stream_view v;
    ASSERT_OK(ctf_minibatch_stream(mb, 0, &v), ctf_reader_error(r));
    ASSERT_U64_EQ(v.num_samples, 6);
    ASSERT_OK(ctf_minibatch_stream(mb, 1, &v), ctf_reader_error(r));
    ASSERT_U64_EQ(v.num_samples, 2);
    ASSERT_EQ(v.lengths[0], 1);
    ctf_minibatch_free(mb);
    ASSERT_OK(ctf_reader_next(r, 2, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), 2); /* 3, then 1 of the next sweep */
    ASSERT(ctf_minibatch_end_of_sweep(mb));
    ASSERT_U64_EQ(ctf_reader_position(r), 4);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
}

/*======================================================================
 * The nominal time axis (rules 6.8)
 *====================================================================*/

TEST(reader_nominal_time_axis)
{
    uint64_t rs = 11;
    for (int trial = 0; trial < 6; trial++) {
        const char *path = gen_file("axis.ctf", rnd_next(&rs), 30 + trial * 5);
        ctf_config c;
        rnd_cfg(&c, path, &rs);
        ctf_reader *r = open_or_null(&c);
        ASSERT(r);
        ctf_index_info info;
        ctf_index_get_info(ctf_reader_index(r), &info);
        const uint64_t sweep = info.samples;
        ctf_reader_free(r);
        c.max_samples = sweep * 5 / 2 + 1; /* the same sequences whatever the cuts */
        const uint64_t k = rnd_range(&rs, 2, 9);
        const long sizes[] = {(long)k, 2 * (long)k, 1, -(long)(2 * k), -1000};
        bytes ref = {0};
        for (int s = 0; s < 5; s++) {
            c.num_threads = (size_t)s % 3;
            r = open_or_null(&c);
            ASSERT(r);
            bytes got = {0};
            uint64_t seed = rs + (uint64_t)s;
            long calls = read_rest(r, sizes[s], &seed, &got, 100000);
            ASSERT(calls > 0);
            ASSERT(ctf_reader_position(r) >= c.max_samples);
            ctf_reader_free(r);
            if (s == 0)
                ref = got;
            else {
                bool same = b_eq(&ref, &got);
                b_free(&got);
                if (!same) b_free(&ref);
                ASSERT(same);
            }
        }
        b_free(&ref);
    }
}

/*======================================================================
 * Exactness of checkpoints, threads and re-partitioning (rules 8, 10)
 *====================================================================*/


TEST(reader_restore_new_reader_is_exact)
{
    const char *path;
    ctf_config c;
    exact_cfg(&c, &path);
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    run x;
    bool ok = record_run(r, 9, &x);
    ctf_reader_free(r);
    ASSERT(ok);
    ASSERT(x.n > 20);
    bool good = true;
    for (size_t i = 0; good && i <= x.n; i++) {
        c.num_threads = i % 3;
        c.prefetch_chunks = i % 5;
        r = open_or_null(&c);
        bytes want = {0}, got = {0};
        run_slice(&x, i, x.n, &want);
        good = r && ctf_reader_restore_state(r, x.state[i], strlen(x.state[i])) == 0 &&
               read_rest(r, 9, NULL, &got, 100000) == (long)(x.n - i) && b_eq(&want, &got);
        if (!good) fprintf(stderr, "restore at minibatch %zu of %zu differs\n", i, x.n);
        ctf_reader_free(r);
        b_free(&want);
        b_free(&got);
    }
    run_free(&x);
    ASSERT(good);
}

TEST(reader_restore_same_reader_is_exact)
{
    const char *path;
    ctf_config c;
    exact_cfg(&c, &path);
    c.num_threads = 2;
    c.prefetch_chunks = 3;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    run x;
    bool ok = record_run(r, 9, &x);
    ASSERT(ok);
    /* Jump back and forth, reading three minibatches after each restore (prefetch in flight),
     * and once to the end. */
    uint64_t rs = 5;
    bool good = true;
    for (int t = 0; t < 40 && good; t++) {
        size_t i = (size_t)rnd_range(&rs, 0, x.n);
        size_t upto = t == 39 ? x.n : i + 3;
        good = ctf_reader_restore_state(r, x.state[i], strlen(x.state[i])) == 0;
        bytes want = {0}, got = {0};
        run_slice(&x, i, upto, &want);
        long calls = good ? read_rest(r, 9, NULL, &got, (long)(upto - i)) : -1;
        good = calls == (long)(CTF_MIN(upto, x.n) - i) && b_eq(&want, &got);
        if (!good) fprintf(stderr, "restore to minibatch %zu of %zu differs\n", i, x.n);
        b_free(&want);
        b_free(&got);
    }
    ctf_reader_free(r);
    run_free(&x);
    ASSERT(good);
}

TEST(reader_threads_and_prefetch_do_not_change_data)
{
    const char *path;
    ctf_config c;
    exact_cfg(&c, &path);
    const size_t threads[] = {0, 1, 2, 4}, depth[] = {0, 1, 3, 16};
    for (size_t w = 1; w <= 3; w += 2) {
        bytes ref = {0};
        uint64_t ref_pos = 0;
        for (int ti = 0; ti < 4; ti++)
            for (int di = 0; di < 4; di++) {
                c.num_threads = threads[ti];
                c.prefetch_chunks = depth[di];
                c.num_workers = w;
                c.worker_rank = w - 1;
                ctf_reader *r = open_or_null(&c);
                ASSERT(r);
                bytes got = {0};
                uint64_t rs = 99; /* the same random sizes in every run */
                long calls = read_rest(r, -13, &rs, &got, 100000);
                uint64_t pos = ctf_reader_position(r);
                ctf_reader_free(r);
                ASSERT(calls > 0);
                if (ti == 0 && di == 0) {
                    ref = got;
                    ref_pos = pos;
                    continue;
                }
                bool same = b_eq(&ref, &got);
                b_free(&got);
                if (!same) {
                    fprintf(stderr, "threads %zu prefetch %zu workers %zu differ\n", threads[ti],
                            depth[di], w);
                    b_free(&ref);
                }
                ASSERT(same);
                ASSERT_U64_EQ(pos, ref_pos);
            }
        b_free(&ref);
    }
}

TEST(reader_changing_k_n_r_keeps_global_order)
{
    const char *path;
    ctf_config c;
    exact_cfg(&c, &path);
    c.num_threads = 2;
    ctf_reader *a = open_or_null(&c), *ref = NULL, *probe = NULL;
    c.num_threads = 0;
    ref = open_or_null(&c);
    probe = open_or_null(&c);
    ASSERT(a && ref && probe);
    uint64_t rs = 3;
    bool good = true;
    int calls = 0;
    for (; good; calls++) {
        uint64_t k = rnd_range(&rs, 1, 15);
        size_t n = (size_t)rnd_range(&rs, 1, 4), rank = (size_t)rnd_range(&rs, 0, n - 1);
        uint64_t before = ctf_reader_position(ref);
        ctf_minibatch *ma = NULL, *mr = NULL, *mp = NULL;
        good = ctf_reader_set_worker(a, n, rank) == 0 && ctf_reader_next(a, k, &ma) == 0 &&
               ctf_reader_next(ref, k, &mr) == 0;
        /* The same call on a reader that jumps there with this partition. */
        good = good && ctf_reader_seek(probe, before) == 0 &&
               ctf_reader_set_worker(probe, n, rank) == 0 && ctf_reader_next(probe, k, &mp) == 0;
        if (good && !mr) {
            good = !ma && !mp;
            ctf_minibatch_free(ma);
            ctf_minibatch_free(mp);
            break;
        }
        if (good) {
            bytes ba = {0}, bp = {0};
            append_mb(&ba, ma);
            append_mb(&bp, mp);
            good = b_eq(&ba, &bp);
            if (n == 1) {
                bytes br = {0};
                append_mb(&br, mr);
                good = good && b_eq(&ba, &br);
                b_free(&br);
            }
            good = good && subseq_ok(mr, ma, NULL); /* a's share of the global minibatch */
            b_free(&ba);
            b_free(&bp);
            if (!good)
                fprintf(stderr, "call %d (K=%llu N=%zu r=%zu) differs\n", calls,
                        (unsigned long long)k, n, rank);
        }
        ctf_minibatch_free(ma);
        ctf_minibatch_free(mr);
        ctf_minibatch_free(mp);
    }
    ctf_reader_free(a);
    ctf_reader_free(ref);
    ctf_reader_free(probe);
    ASSERT(good);
    ASSERT(calls > 20);
}

TEST(reader_elastic_restore_loses_and_repeats_nothing)
{
    const char *path = gen_file("elastic.ctf", 4242, 60);
    ctf_config c;
    uint64_t rs = 8;
    rnd_cfg(&c, path, &rs);
    c.chunk_size_bytes = 100;
    c.randomization_window = 4;
    c.window_in_samples = false;
    c.max_samples = CTF_FULL_DATA_SWEEP;
    c.num_threads = 1;
    ctf_reader *g = open_or_null(&c), *two[2] = {NULL, NULL}, *three[3] = {NULL, NULL, NULL};
    c.num_workers = 2;
    for (size_t w = 0; w < 2; w++) {
        c.worker_rank = w;
        two[w] = open_or_null(&c);
        ASSERT(two[w]);
    }
    ASSERT(g);
    size_t nseq = 60, seen[60] = {0};
    bool good = true;
    int calls = 0;
    /* Six calls with two workers, checkpoint, then three workers to the end. */
    char *st[2] = {NULL, NULL};
    for (; good; calls++) {
        const size_t nw = calls < 6 ? 2 : 3;
        ctf_reader **rd = calls < 6 ? two : three;
        if (calls == 6) {
            st[0] = save_state(two[0]);
            st[1] = save_state(two[1]);
            good = st[0] && st[1] && !strcmp(st[0], st[1]); /* the same on every worker */
            c.num_workers = 3;
            for (size_t w = 0; good && w < 3; w++) {
                c.worker_rank = w;
                three[w] = open_or_null(&c);
                good = three[w] && !ctf_reader_restore_state(three[w], st[0], strlen(st[0]));
            }
            if (!good) break;
        }
        ctf_minibatch *gm = NULL, *m[3] = {NULL, NULL, NULL};
        good = ctf_reader_next(g, 7, &gm) == 0;
        for (size_t w = 0; good && w < nw; w++) good = ctf_reader_next(rd[w], 7, &m[w]) == 0;
        if (good && !gm) {
            for (size_t w = 0; w < nw; w++) good = good && !m[w];
        } else if (good) {
            good = split_ok(gm, m, nw);
            for (size_t w = 0; w < nw; w++)
                for (size_t i = 0; good && i < ctf_minibatch_num_sequences(m[w]); i++)
                    seen[ctf_minibatch_keys(m[w])[i] - 1000]++;
        }
        bool end = !gm;
        ctf_minibatch_free(gm);
        for (size_t w = 0; w < 3; w++) ctf_minibatch_free(m[w]);
        if (end) break;
    }
    ctf_reader_free(g);
    for (size_t w = 0; w < 2; w++) ctf_reader_free(two[w]);
    for (size_t w = 0; w < 3; w++) ctf_reader_free(three[w]);
    free(st[0]);
    free(st[1]);
    ASSERT(good);
    ASSERT(calls > 8);
    for (size_t i = 0; i < nseq; i++) ASSERT_EQ(seen[i], 1);
}

/*======================================================================
 * Workers (rules 7)
 *====================================================================*/

TEST(reader_workers_partition_every_call)
{
    const char *path = gen_file("workers.ctf", 777, 50);
    for (size_t nw = 1; nw <= 5; nw++) {
        ctf_config c;
        uint64_t rs = 21 + nw;
        rnd_cfg(&c, path, &rs);
        c.chunk_size_bytes = 80;
        c.max_sweeps = 2;
        c.num_threads = nw % 3;
        ctf_reader *g = open_or_null(&c), *w[5] = {NULL};
        ASSERT(g);
        c.num_workers = nw;
        for (size_t i = 0; i < nw; i++) {
            c.worker_rank = i;
            w[i] = open_or_null(&c);
            ASSERT(w[i]);
        }
        size_t seen[50] = {0}, empties = 0;
        bool good = true, ended = false;
        while (good && !ended) {
            uint64_t k = rnd_range(&rs, 1, 12);
            ctf_minibatch *gm = NULL, *m[5] = {NULL};
            good = ctf_reader_next(g, k, &gm) == 0;
            for (size_t i = 0; good && i < nw; i++) good = ctf_reader_next(w[i], k, &m[i]) == 0;
            ended = !gm;
            if (good && ended) {
                for (size_t i = 0; i < nw; i++) good = good && !m[i]; /* same call for all */
            } else if (good) {
                good = split_ok(gm, m, nw);
                for (size_t i = 0; good && i < nw; i++) {
                    ctf_stream_view v; /* an empty share is a valid, empty minibatch */
                    good = ctf_minibatch_stream(m[i], 1, &v) == 0 &&
                           (v.num_sequences > 0 || (v.num_samples == 0 && v.nnz == 0 &&
                                                    ctf_minibatch_num_samples(m[i]) == 0));
                    empties += ctf_minibatch_num_sequences(m[i]) == 0;
                    for (size_t j = 0; j < ctf_minibatch_num_sequences(m[i]); j++)
                        seen[ctf_minibatch_keys(m[i])[j] - 1000]++;
                }
            }
            ctf_minibatch_free(gm);
            for (size_t i = 0; i < nw; i++) ctf_minibatch_free(m[i]);
        }
        ctf_reader_free(g);
        for (size_t i = 0; i < nw; i++) ctf_reader_free(w[i]);
        if (!good) fprintf(stderr, "workers N=%zu\n", nw);
        ASSERT(good);
        for (int i = 0; i < 50; i++) ASSERT_EQ(seen[i], 2); /* once per sweep */
        if (nw >= 3) ASSERT(empties > 0); /* empty shares happened and were not NULL */
    }
}

TEST(reader_workers_randomized_ownership_rule)
{
    /* 40 one-sample sequences in 20 chunks: sequence (= key) s is in chunk s / 2. A sequence
     * belongs to worker (randomized position of its chunk) mod N, positions taken from the
     * sweep that is current after the global minibatch was cut. */
    const char *path = line_file("owner.ctf", 40);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.chunk_size_bytes = 10;
    c.randomization_window = 4;
    c.randomization_seed = 3;
    c.max_sweeps = 4;
    const size_t nw = 3;
    ctf_reader *g = open_or_null(&c), *w[3] = {NULL, NULL, NULL};
    ASSERT(g);
    c.num_workers = nw;
    for (size_t i = 0; i < nw; i++) {
        c.worker_rank = i;
        w[i] = open_or_null(&c);
        ASSERT(w[i]);
    }
    const ctf_index *idx = ctf_reader_index(g);
    ASSERT_EQ(idx->num_chunks, 20);
    ctf__sweep sw = {0};
    ctf_error err;
    size_t pos_of[20];
    uint64_t rs = 17;
    bool good = true, ended = false, crossed = false;
    while (good && !ended) {
        uint64_t k = rnd_range(&rs, 1, 7);
        ctf_minibatch *gm = NULL, *m[3] = {NULL, NULL, NULL};
        good = ctf_reader_next(g, k, &gm) == 0;
        for (size_t i = 0; good && i < nw; i++) good = ctf_reader_next(w[i], k, &m[i]) == 0;
        ended = !gm;
        if (good && gm) {
            uint64_t after = ctf_minibatch_position(gm) / 40;
            crossed |= ctf_minibatch_end_of_sweep(gm) && ctf_minibatch_position(gm) % 40 != 0;
            good = ctf__randomize_sweep(idx->chunks, idx->num_chunks, 4, false, 3, after, &sw,
                                        &err) == 0;
            for (size_t p = 0; good && p < 20; p++) pos_of[sw.chunk_at[p]] = p;
            size_t at[3] = {0, 0, 0};
            for (size_t j = 0; good && j < ctf_minibatch_num_sequences(gm); j++) {
                uint64_t key = ctf_minibatch_keys(gm)[j];
                size_t owner = pos_of[key / 2] % nw;
                good = at[owner] < ctf_minibatch_num_sequences(m[owner]) &&
                       ctf_minibatch_keys(m[owner])[at[owner]++] == key;
                if (!good)
                    fprintf(stderr, "key %llu at position %llu: expected worker %zu\n",
                            (unsigned long long)key, (unsigned long long)ctf_minibatch_position(gm),
                            owner);
            }
            for (size_t i = 0; good && i < nw; i++)
                good = at[i] == ctf_minibatch_num_sequences(m[i]);
        }
        ctf_minibatch_free(gm);
        for (size_t i = 0; i < nw; i++) ctf_minibatch_free(m[i]);
    }
    ctf__sweep_free(&sw);
    ctf_reader_free(g);
    for (size_t i = 0; i < nw; i++) ctf_reader_free(w[i]);
    ASSERT(good);
    ASSERT(crossed); /* some minibatch crossed a sweep end */
}

TEST(reader_workers_no_randomization_i_mod_n)
{
    const char *path = line_file("imodn.ctf", 10);
    for (size_t nw = 2; nw <= 4; nw++)
        for (size_t rank = 0; rank < nw; rank++) {
            ctf_config c;
            cfg_base(&c, path, X1, 1);
            c.randomize = false;
            c.chunk_size_bytes = 15;
            c.num_workers = nw;
            c.worker_rank = rank;
            c.max_sweeps = 2;
            ctf_reader *r = open_or_null(&c);
            ASSERT(r);
            size_t n = 0;
            uint64_t expect = rank;
            ctf_minibatch *mb;
            for (;;) {
                ASSERT_OK(ctf_reader_next(r, 3, &mb), ctf_reader_error(r));
                if (!mb) break;
                for (size_t j = 0; j < ctf_minibatch_num_sequences(mb); j++, n++) {
                    ASSERT_U64_EQ(ctf_minibatch_keys(mb)[j], expect);
                    expect += nw;
                    if (expect >= 10) expect = rank; /* slot numbers restart every sweep */
                }
                ctf_minibatch_free(mb);
            }
            ctf_reader_free(r);
            ASSERT_EQ(n, 2 * ((10 - rank + nw - 1) / nw));
        }
}
