/*
 * test_reader_state.c -- the reader's state and what it rests on (lib/reader/reader.c, state.c,
 * prefetch.c): the checkpoint state (rules 8.1) and the state at any position, the memory bound
 * (rules 4.4), errors from background threads and changed files (rules 2.4, 10), frame mode and
 * the rules 5.6 vector, skipping a stretch of the timeline, and the chunks a cut loads. Compared
 * as byte strings, as in test_reader.c (reader_harness.h).
 */
#include "reader_harness.h"

/*======================================================================
 * Checkpoint state (rules 8.1)
 *====================================================================*/

TEST(reader_state_text_and_lengths)
{
    const char *path = line_file("state.ctf", 20);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_next(r, 7, &mb), ctf_reader_error(r));
    ctf_minibatch_free(mb);
    size_t len = 0;
    ASSERT_EQ(ctf_reader_save_state(r, NULL, 0, &len), 0);
    ASSERT(len > 20);
    char *buf = malloc(len + 1);
    size_t len2 = 0;
    ASSERT_EQ(ctf_reader_save_state(r, buf, len, &len2), CTF_ELIMIT); /* no room for the NUL */
    ASSERT_EQ(ctf_reader_save_state(r, buf, 5, &len2), CTF_ELIMIT);
    ASSERT_OK(ctf_reader_save_state(r, buf, len + 1, &len2), ctf_reader_error(r));
    ASSERT_EQ(len2, len);
    ASSERT_EQ(strlen(buf), len);
    ASSERT(buf[0] == '{' && buf[len - 1] == '}');
    ASSERT_STR_CONTAINS(buf, "\"minibatchSourcePosition\": 7");
    ASSERT_OK(ctf_reader_restore_state(r, buf, len), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_reader_position(r), 7);
    free(buf);
    ctf_reader_free(r);
}

/* Restores file a's state (config ca) into a reader for cb; expects CTF_ESTATE naming field. */
static int mismatch(const ctf_config *ca, const ctf_config *cb, const char *field)
{
    ctf_reader *a = open_or_null(ca), *b = open_or_null(cb);
    int ok = 0;
    if (a && b) {
        ctf_minibatch *mb = NULL;
        char *st = ctf_reader_next(a, 2, &mb) == 0 ? save_state(a) : NULL;
        ctf_minibatch_free(mb);
        mb = NULL;
        int rc = st ? ctf_reader_restore_state(b, st, strlen(st)) : 0;
        ok = rc == CTF_ESTATE && ctf_reader_error(b)->code == CTF_ESTATE &&
             strstr(ctf_reader_error(b)->message, field) != NULL;
        if (!ok)
            fprintf(stderr, "mismatch %s: rc %d: %s\n", field, rc, ctf_reader_error(b)->message);
        /* b stays usable after a refused restore */
        ok = ok && ctf_reader_next(b, 2, &mb) == 0 && mb &&
             ctf_reader_position(b) == ctf_minibatch_num_samples(mb);
        ctf_minibatch_free(mb);
        free(st);
    }
    ctf_reader_free(a);
    ctf_reader_free(b);
    return ok;
}

TEST(reader_state_mismatch_is_refused)
{
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s", gen_file("ma.ctf", 1, 30));
    snprintf(pb, sizeof pb, "%s", gen_file("mb.ctf", 2, 31));
    ctf_config a, b;
    cfg_base(&a, pa, XY, 2);
    a.chunk_size_bytes = 200;
    a.randomization_window = 3;
    b = a;
    b.path = pb;
    ASSERT(mismatch(&a, &b, "sequences"));
    b = a;
    b.randomization_seed = 5;
    ASSERT(mismatch(&a, &b, "randomization_seed"));
    b = a;
    b.randomization_window = 4;
    ASSERT(mismatch(&a, &b, "randomization_window"));
    b = a;
    b.chunk_size_bytes = 300;
    ASSERT(mismatch(&a, &b, "chunk_size"));
}

TEST(reader_state_garbage_is_refused)
{
    const char *path = line_file("garbage.ctf", 8);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    char *good = save_state(r);
    ASSERT(good);
    size_t n = strlen(good);
    const char *bad[] = {"",
                         "   ",
                         "{",
                         "}",
                         "[]",
                         "null",
                         "{\"version\": 1}",
                         "{\"minibatchSourcePosition\": 3}",
                         "\x01\x02\xff garbage",
                         "{\"version\": 1, \"minibatchSourcePosition\": -3}",
                         "{\"version\": 2, \"minibatchSourcePosition\": 3}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = ctf_reader_restore_state(r, bad[i], strlen(bad[i]));
        if (rc != CTF_ESTATE) free(good);
        ASSERT_EQ(rc, CTF_ESTATE);
    }
    ASSERT_EQ(ctf_reader_restore_state(r, NULL, 0), CTF_ESTATE);
    for (size_t cut = 0; cut < n; cut++) { /* every truncation */
        int rc = ctf_reader_restore_state(r, good, cut);
        if (rc != CTF_ESTATE) free(good);
        ASSERT_EQ(rc, CTF_ESTATE);
    }
    /* A valid state is still accepted afterwards. */
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_restore_state(r, good, n), ctf_reader_error(r));
    free(good);
    ASSERT_OK(ctf_reader_next(r, 3, &mb), ctf_reader_error(r));
    ASSERT(mb);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
}

/*======================================================================
 * Memory (rules 4.4)
 *====================================================================*/

TEST(reader_memory_bounded_by_window)
{
    const char *path = line_file("many.ctf", 400); /* 200 chunks of 2 lines */
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.chunk_size_bytes = 10;
    c.randomization_window = 4;
    c.max_sweeps = 3;
    c.num_threads = 2;
    c.prefetch_chunks = 3;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_index_info info;
    ctf_index_get_info(ctf_reader_index(r), &info);
    ASSERT_U64_EQ(info.chunks, 200);
    bytes sink = {0};
    ASSERT_EQ(read_rest(r, 7, NULL, &sink, 100000) > 0, 1);
    b_free(&sink);
    ctf_stats st;
    ctf_reader_get_stats(r, &st);
    ctf_reader_free(r);
    ASSERT(st.chunks_resident_peak >= 1);
    ASSERT(st.chunks_resident_peak <= 2 * 4 + 3 + 2);
    ASSERT(st.chunks_loaded >= 2 * 200); /* chunks were dropped and parsed again */

    /* keepDataInMemory: everything stays, nothing is parsed twice. */
    c.keep_data_in_memory = true;
    r = open_or_null(&c);
    ASSERT(r);
    uint64_t loaded_after_first = 0;
    ctf_minibatch *mb;
    for (;;) {
        ASSERT_OK(ctf_reader_next(r, 7, &mb), ctf_reader_error(r));
        if (!mb) break;
        if (!loaded_after_first && ctf_minibatch_position(mb) >= 400) {
            ctf_reader_get_stats(r, &st);
            loaded_after_first = st.chunks_loaded;
        }
        ctf_minibatch_free(mb);
    }
    ctf_reader_get_stats(r, &st);
    ctf_reader_free(r);
    ASSERT_U64_EQ(loaded_after_first, 200);
    ASSERT_U64_EQ(st.chunks_loaded, 200);
    ASSERT_U64_EQ(st.chunks_resident_peak, 200);

    /* One thread, no prefetch: one sweep parses every chunk exactly once. */
    c.keep_data_in_memory = false;
    c.num_threads = 1;
    c.prefetch_chunks = 0;
    c.max_sweeps = CTF_INFINITELY_REPEAT;
    c.max_samples = CTF_FULL_DATA_SWEEP;
    r = open_or_null(&c);
    ASSERT(r);
    sink = (bytes){0};
    ASSERT(read_rest(r, 7, NULL, &sink, 100000) > 0);
    b_free(&sink);
    ctf_reader_get_stats(r, &st);
    ctf_reader_free(r);
    ASSERT_U64_EQ(st.chunks_loaded, 200);
    ASSERT(st.chunks_resident_peak <= 2 * 4 + 2);
}

/*======================================================================
 * Errors from background threads, changed files (rules 2.4, 10)
 *====================================================================*/

/* 40 lines, chunks of 2: line 11 (chunk 5) holds "|x a". Reads K = 1 until the error. */
static int read_to_error(size_t threads, size_t prefetch, ctf_error *out, int *ok_calls)
{
    char *t = malloc(40 * 5 + 1);
    for (int i = 0; i < 40; i++) memcpy(t + 5 * i, i == 10 ? "|x a\n" : "|x 1\n", 5);
    t[200] = 0;
    const char *path = test_write_str("bad5.ctf", t);
    free(t);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.randomize = false;
    c.chunk_size_bytes = 10;
    c.num_threads = threads;
    c.prefetch_chunks = prefetch;
    ctf_reader *r = open_or_null(&c);
    if (!r) return 0;
    int rc = 0;
    *ok_calls = 0;
    for (int i = 0; i < 40 && rc == 0; i++) {
        ctf_minibatch *mb = NULL;
        rc = ctf_reader_next(r, 1, &mb);
        if (rc == 0 && mb) (*ok_calls)++;
        ctf_minibatch_free(mb);
        if (i == 0 && threads) usleep(30000); /* let the threads parse chunk 5 */
    }
    *out = *ctf_reader_error(r);
    ctf_minibatch *mb = (ctf_minibatch *)1;
    int again = ctf_reader_next(r, 1, &mb); /* the reader stays failed */
    ctf_reader_free(r);
    return again == rc && mb == NULL ? rc : 0;
}

TEST(reader_background_error_surfaces_in_order)
{
    ctf_error a, b;
    int calls_a, calls_b;
    ASSERT_EQ(read_to_error(2, 16, &a, &calls_a), CTF_EPARSE);
    ASSERT_EQ(calls_a, 10); /* keys 0..9 delivered, the call that reaches chunk 5 fails */
    ASSERT_EQ(a.code, CTF_EPARSE);
    ASSERT_U64_EQ(a.line, 11);
    ASSERT_U64_EQ(a.column, 4);
    ASSERT_EQ(a.offset, 53);
    ASSERT_STR_CONTAINS(a.path, "bad5.ctf");
    ASSERT_STR_CONTAINS(a.message, "'a'");
    ASSERT_EQ(read_to_error(0, 0, &b, &calls_b), CTF_EPARSE);
    ASSERT_EQ(calls_b, 10);
    ASSERT_EQ(b.code, a.code);
    ASSERT_STR_EQ(b.path, a.path);
    ASSERT_U64_EQ(b.line, a.line);
    ASSERT_U64_EQ(b.column, a.column);
    ASSERT_EQ(b.offset, a.offset);
    ASSERT_STR_EQ(b.message, a.message);
    ASSERT_EQ(read_to_error(4, 1, &b, &calls_b), CTF_EPARSE);
    ASSERT_STR_EQ(b.message, a.message);
}

TEST(reader_file_changed_on_disk)
{
    for (size_t threads = 0; threads <= 2; threads += 2) {
        char path[512];
        snprintf(path, sizeof path, "%s", line_file("changing.ctf", 20));
        ctf_config c;
        cfg_base(&c, path, X1, 1);
        c.randomize = false;
        c.chunk_size_bytes = 10;
        c.num_threads = threads;
        c.prefetch_chunks = threads ? 2 : 0;
        ctf_reader *r = open_or_null(&c);
        ASSERT(r);
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 1, &mb), ctf_reader_error(r));
        ctf_minibatch_free(mb);
        line_file("changing.ctf", 30); /* rewritten: another size */
        int rc = 0, calls = 0;
        while (rc == 0 && calls < 40) {
            rc = ctf_reader_next(r, 1, &mb);
            ctf_minibatch_free(mb);
            calls++;
        }
        ctf_error e = *ctf_reader_error(r);
        ctf_reader_free(r);
        ASSERT_EQ(rc, CTF_ECHANGED);
        if (!threads) ASSERT_EQ(calls, 2); /* key 1 is in the held chunk 0; chunk 1 fails */
        ASSERT(calls <= 6);
        ASSERT_STR_EQ(e.path, path);
        ASSERT_STR_CONTAINS(e.message, "changed");
    }
}

/*======================================================================
 * Frame mode (rules 6.7) and the rules 5.6 vector
 *====================================================================*/

TEST(reader_frame_mode)
{
    const char *path = test_write_str("frames.ctf", "1 |x 1\n2 |x 2\n3 |x 3\n");
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.frame_mode = true;
    c.randomize = false;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_next(r, 3, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), 3);
    ctf_stream_view v;
    ASSERT_OK(ctf_minibatch_stream(mb, 0, &v), ctf_reader_error(r));
    ASSERT_U64_EQ(v.num_samples, 3);
    ASSERT_DBL_EQ(((const float *)v.values)[2], 3.0);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);

    path = test_write_str("frames2.ctf", "1 |x 1\n2 |x 2\n7 |x 3\n7 |x 4\n8 |x 5\n");
    c.path = path;
    r = open_or_null(&c);
    ASSERT(r);
    int rc = ctf_reader_next(r, 1, &mb);
    ASSERT_EQ(rc, CTF_EPARSE);
    ASSERT(mb == NULL);
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "sequence 7");
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "frame mode");
    ASSERT_U64_EQ(ctf_reader_error(r)->line, 3);
    ctf_reader_free(r);
}

TEST(reader_spec_5_6_vector)
{
    const char *path = line_file("vector.ctf", 10);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.chunk_size_bytes = 10; /* 5 chunks of 2 */
    c.randomization_seed = 0;
    c.randomization_window = 5;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_index_info info;
    ctf_index_get_info(ctf_reader_index(r), &info);
    ASSERT_U64_EQ(info.chunks, 5);
    ASSERT(info.line_mode);
    const uint64_t want[] = {6, 3, 1, 5, 9, 0, 4, 2, 7, 8};
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_next(r, 10, &mb), ctf_reader_error(r));
    ASSERT_U64_EQ(ctf_minibatch_num_sequences(mb), 10);
    for (int i = 0; i < 10; i++) ASSERT_U64_EQ(ctf_minibatch_keys(mb)[i], want[i]);
    ASSERT(ctf_minibatch_end_of_sweep(mb));
    ctf_stream_view v;
    ASSERT_OK(ctf_minibatch_stream(mb, 0, &v), ctf_reader_error(r));
    for (int i = 0; i < 10; i++) ASSERT_DBL_EQ(((const float *)v.values)[i], (double)want[i]);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
}

/* The chunks resident once the thread has had time to load ahead after one minibatch of one
 * sample in file order (the counters are brought up to date by the next call, which stays in
 * the first chunk): what the look-ahead holds. */
static uint64_t resident_after_pause(const char *path, size_t prefetch)
{
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.randomize = false;
    c.chunk_size_bytes = 10; /* two lines a chunk: 40 chunks */
    c.num_threads = 1;
    if (prefetch) c.prefetch_chunks = prefetch;
    ctf_reader *r = open_or_null(&c);
    if (!r) return 0;
    ctf_minibatch *mb = NULL;
    uint64_t resident = 0;
    if (ctf_reader_next(r, 1, &mb) == 0 && mb) {
        usleep(200000);
        ctf_minibatch_free(mb);
        mb = NULL;
        (void)ctf_reader_next(r, 1, &mb);
        ctf_stats st;
        ctf_reader_get_stats(r, &st);
        resident = mb ? st.chunks_resident : 0;
    }
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    return resident;
}

TEST(reader_prefetch_default_follows_num_threads)
{
    /* The default look-ahead is 2 * num_threads + 2 of the threads the reader is given, not of
     * the machine's cores: one thread holds 4 chunks (6 or more with the cores' default on a
     * machine of 2 cores or more), and one more once the next minibatch, read ahead, enters
     * the next chunk (the look-ahead then starts one chunk later). */
    const char *path = line_file("prefetch_auto.ctf", 80);
    const uint64_t auto_resident = resident_after_pause(path, 0);
    ASSERT(auto_resident >= 2);
    ASSERT(auto_resident <= 5);
    /* An explicit depth is taken as given (and the pause is long enough to see it). */
    ASSERT(resident_after_pause(path, 20) >= 12);
}

/* A randomized minibatch that needs every chunk of its window (the default window, a small
 * file) asks the threads for all of them at once, not only for the look-ahead's few: past the
 * look-ahead the caller would otherwise load them alone, one after another. */
TEST(reader_randomized_cut_asks_for_its_whole_window)
{
    const char *path = line_file("whole_window.ctf", 160);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.chunk_size_bytes = 100; /* 20 lines a chunk: 8 chunks, all in the default window */
    c.num_threads = 2;
    c.prefetch_chunks = 2;
    c.max_sweeps = 1;
    const long queued0 = atomic_load(&ctf__loader_queued);
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ASSERT_EQ(ctf_reader_index(r)->num_chunks, 8);
    ctf_minibatch *mb = NULL;
    ASSERT_OK(ctf_reader_next(r, 160, &mb), ctf_reader_error(r)); /* the whole sweep */
    ASSERT(mb && ctf_minibatch_num_sequences(mb) == 160);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    ASSERT(atomic_load(&ctf__loader_queued) - queued0 >= 8);
}

TEST(reader_state_at_is_the_state_the_run_has_there)
{
    /* ctf_reader_state_at(p), asked of a reader that reads nothing, is the text the run saves
     * when it reaches p, in any sweep (so a restore of it is a restore of the run's own).
     * Truncated BPTT refuses: its state at p depends on the data before it (a mix's too). */
    const char *path = gen_file("state_at.ctf", 17, 400);
    ctf_config c;
    cfg_base(&c, path, XY, 2);
    c.chunk_size_bytes = 2048;
    c.randomize = true;
    c.randomization_window = 3;
    c.max_sweeps = 3;
    c.num_threads = 2;
    ctf_reader *r = open_or_null(&c), *ask = open_or_null(&c);
    ASSERT(r && ask);
    size_t checked = 0;
    for (;;) {
        char *now = save_state(r);
        size_t len;
        ASSERT_EQ(ctf_reader_state_at(ask, ctf_reader_position(r), NULL, 0, &len), 0);
        char *at = malloc(len + 1);
        ASSERT_EQ(ctf_reader_state_at(ask, ctf_reader_position(r), at, len + 1, &len), 0);
        ASSERT(now != NULL);
        ASSERT_EQ(strcmp(now, at), 0);
        free(now);
        free(at);
        checked++;
        ctf_minibatch *mb;
        ASSERT_OK(ctf_reader_next(r, 97, &mb), ctf_reader_error(r));
        if (!mb) break;
        ctf_minibatch_free(mb);
    }
    ASSERT(checked > 10);
    ASSERT_EQ(ctf_reader_position(ask), 0); /* nothing moved */
    size_t len;
    ASSERT_EQ(ctf_reader_state_at(ask, CTF_MAX_POSITION + 1, NULL, 0, &len), CTF_EINVAL);
    ctf_reader_free(r);
    ctf_reader_free(ask);
    c.truncation_length = 4;
    ASSERT((r = open_or_null(&c)) != NULL);
    ASSERT_EQ(ctf_reader_state_at(r, 10, NULL, 0, &len), CTF_EINVAL);
    ctf_reader_free(r);
}

/*======================================================================
 * Skipping a stretch of the timeline
 *====================================================================*/

/* The rest of a run (minibatches of k) after `skip` samples skipped, from a fresh reader or
 * from the state `state` restored first. */
static bool skipped_rest(const ctf_config *c, const char *state, uint64_t skip, long k, bytes *out)
{
    ctf_reader *r = open_or_null(c);
    bool ok = r && (!state || ctf_reader_restore_state(r, state, strlen(state)) == 0) &&
              ctf_reader_skip(r, skip) == 0 && read_rest(r, k, NULL, out, 100000) >= 0;
    ctf_reader_free(r);
    return ok;
}

/* Several-sample sequences: skipping from the state at minibatch i to the position of
 * minibatch j (inside a chunk, across chunks, across a sweep's end) delivers what the run
 * delivered from j on, on every rank of 1 and 3 workers. */
TEST(reader_skip_equals_read_and_discard)
{
    const char *path;
    ctf_config c;
    exact_cfg(&c, &path);
    for (size_t w = 1; w <= 3; w += 2)
        for (size_t rank = 0; rank < w; rank++) {
            c.num_workers = w;
            c.worker_rank = rank;
            ctf_reader *r = open_or_null(&c);
            ASSERT(r);
            run x;
            bool ok = record_run(r, 9, &x);
            uint64_t *pos = malloc((x.n + 1) * sizeof *pos);
            for (size_t i = 0; ok && i <= x.n; i++) {
                ctf_reader *q = open_or_null(&c);
                ok = q && ctf_reader_restore_state(q, x.state[i], strlen(x.state[i])) == 0;
                pos[i] = ok ? ctf_reader_position(q) : 0;
                ctf_reader_free(q);
            }
            ctf_reader_free(r);
            ASSERT(ok && x.n > 24);
            const size_t from[] = {0, 0, 0, 3, 11, 5}, to[] = {1, 4, 20, 5, 21, 0};
            for (size_t t = 0; ok && t < 6; t++) {
                const size_t j = to[t] ? to[t] : x.n - 2;
                bytes want = {0}, got = {0};
                run_slice(&x, j, x.n, &want);
                ok = skipped_rest(&c, from[t] ? x.state[from[t]] : NULL, pos[j] - pos[from[t]], 9,
                                  &got) &&
                     b_eq(&want, &got);
                if (!ok)
                    fprintf(stderr, "skip %zu -> %zu (rank %zu of %zu) differs\n", from[t], j, rank,
                            w);
                b_free(&want);
                b_free(&got);
            }
            free(pos);
            run_free(&x);
            ASSERT(ok);
        }
}

/* One-sample sequences: skip(n) == next(n) discarded, then the rest, for n inside a chunk,
 * across chunks and across the sweep's end; skipping whole chunks loads and parses none, and
 * the state after a skip records it (kept by a restore, the same on every rank). */
TEST(reader_skip_one_sample_reads_nothing)
{
    const char *path = line_file("skip_lines.ctf", 60);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.chunk_size_bytes = 25; /* 5 lines a chunk */
    c.randomization_window = 4;
    c.max_sweeps = 3;
    c.num_threads = 0;
    c.prefetch_chunks = 0;
    c.cache_index = false; /* a record kept in the index cache would hide a re-scan */
    const uint64_t ns[] = {3, 12, 70, 20};
    for (size_t w = 1; w <= 3; w += 2)
        for (size_t rank = 0; rank < w; rank++) {
            c.num_workers = w;
            c.worker_rank = rank;
            for (size_t t = 0; t < 4; t++) {
                ctf_reader *a = open_or_null(&c), *b = open_or_null(&c);
                ASSERT(a && b);
                ctf_minibatch *mb;
                ASSERT_EQ(ctf_reader_next(a, ns[t], &mb), 0);
                ctf_minibatch_free(mb);
                /* The data away while skipping: a skip that read any of it would fail (the
                 * consumer's own re-scans are not in ctf_perf). */
                char away[4200];
                snprintf(away, sizeof away, "%s.away", path);
                ASSERT_EQ(rename(path, away), 0);
                const int src = ctf_reader_skip(b, ns[t]);
                ASSERT_EQ(rename(away, path), 0);
                ASSERT_EQ(src, 0);
                ASSERT_EQ(ctf_reader_position(b), ns[t]);
                ctf_perf perf;
                ctf_reader_get_perf(b, &perf, sizeof perf);
                ASSERT_EQ(perf.chunks_loaded, 0);
                ASSERT_EQ(perf.parse_bytes, 0);
                char *st = save_state(b);
                char want[64];
                snprintf(want, sizeof want, "\"skipped\": \"0-%llu\", \"skipped_samples\": %llu",
                         (unsigned long long)ns[t], (unsigned long long)ns[t]);
                ASSERT(st && strstr(st, want));
                bytes x = {0}, y = {0};
                ASSERT(read_rest(a, 7, NULL, &x, 100000) > 0);
                ASSERT(read_rest(b, 7, NULL, &y, 100000) > 0);
                ASSERT(b_eq(&x, &y));
                /* Restored elsewhere, the list stays; a second adjacent skip merges. */
                ctf_reader *d = open_or_null(&c);
                ASSERT(d && ctf_reader_restore_state(d, st, strlen(st)) == 0);
                ASSERT_EQ(ctf_reader_skip(d, 2), 0);
                char *st2 = save_state(d);
                snprintf(want, sizeof want, "\"skipped\": \"0-%llu\", \"skipped_samples\": %llu",
                         (unsigned long long)ns[t] + 2, (unsigned long long)ns[t] + 2);
                ASSERT(st2 && strstr(st2, want));
                free(st);
                free(st2);
                b_free(&x);
                b_free(&y);
                ctf_reader_free(a);
                ctf_reader_free(b);
                ctf_reader_free(d);
            }
        }
}

/* The list stays bounded (the oldest stretches dropped, their samples still counted), a
 * malformed list is refused, and a state without one restores as before. */
TEST(reader_skip_state_list_is_bounded_and_checked)
{
    const char *path = line_file("skip_bound.ctf", 200);
    ctf_config c;
    cfg_base(&c, path, X1, 1);
    c.chunk_size_bytes = 25;
    ctf_reader *r = open_or_null(&c);
    ASSERT(r);
    ctf_minibatch *mb;
    for (int i = 0; i < 20; i++) {
        ASSERT_EQ(ctf_reader_skip(r, 1), 0);
        ASSERT_EQ(ctf_reader_next(r, 1, &mb), 0);
        ctf_minibatch_free(mb);
    }
    char *st = save_state(r);
    ASSERT(st && strstr(st, "\"skipped\": \"8-9;") && strstr(st, ";38-39\"") &&
           strstr(st, "\"skipped_samples\": 20"));
    ASSERT_EQ(ctf_reader_restore_state(r, st, strlen(st)), 0);
    char *back = save_state(r);
    ASSERT(back && !strcmp(st, back));
    const char *bad[] = {"5-3", "3-3", "1-2;0-1", "0-99999", "x-1", "0-1;", "1"};
    for (size_t i = 0; i < 7; i++) {
        char s[1024];
        snprintf(s, sizeof s, "%.*s\"skipped\": \"%s\", \"skipped_samples\": 9}",
                 (int)(strstr(st, "\"skipped\"") - st), st, bad[i]);
        ASSERT_EQ(ctf_reader_restore_state(r, s, strlen(s)), CTF_ESTATE);
        ASSERT(strstr(ctf_reader_error(r)->message, "skipped"));
    }
    ASSERT_EQ(ctf_reader_skip(r, CTF_MAX_POSITION), CTF_EINVAL);
    free(st);
    free(back);
    ctf_reader_free(r);
}

TEST(reader_a_cut_reaching_the_sweep_end_loads_each_chunk_once)
{
    /* The cut loads a chunk for its records before the pick takes it; a cut that reaches the
     * sweep's end opens the next sweep in between, whose change of sweep used to cancel those
     * loads, so the pick loaded them again. One sweep, one load per chunk: with one minibatch
     * for the whole sweep, with one that ends on it, with threads and without, in both orders. */
    char names[3][600];
    const char *paths[3];
    for (int f = 0; f < 3; f++) { /* a corpus of three files of 20 lines, 2 chunks each */
        char n[32];
        snprintf(n, sizeof n, "sweep_end_%d.ctf", f);
        snprintf(names[f], sizeof names[f], "%s", line_file(n, 20));
        paths[f] = names[f];
    }
    const uint64_t sizes[] = {4096, 60, 7};
    for (int randomize = 0; randomize < 2; randomize++)
        for (size_t threads = 0; threads <= 2; threads += 2)
            for (size_t si = 0; si < 3; si++) {
                ctf_config c;
                cfg_base(&c, paths[0], X1, 1);
                c.paths = paths;
                c.num_paths = 3;
                c.chunk_size_bytes = 50; /* 6 chunks of 10 lines */
                c.randomize = randomize;
                c.num_threads = threads;
                c.max_sweeps = 1;
                ctf_reader *r = open_or_null(&c);
                ASSERT(r != NULL);
                uint64_t samples = 0;
                for (;;) {
                    ctf_minibatch *mb;
                    ASSERT_OK(ctf_reader_next(r, sizes[si], &mb), ctf_reader_error(r));
                    if (!mb) break;
                    samples += ctf_minibatch_num_sequences(mb);
                    ctf_minibatch_free(mb);
                }
                ctf_perf pf; /* loads run, also those whose result was dropped */
                ctf_reader_get_perf(r, &pf, sizeof pf);
                ASSERT_EQ(samples, 60);
                ASSERT_EQ(pf.chunks_loaded, 6);
                ASSERT_EQ(pf.parse_bytes, 300);
                ctf_reader_free(r);
            }
}
