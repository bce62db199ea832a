/*
 * test_ahead.c -- the read-ahead (lib/reader/ahead.c, its rules in reader.c): a reader with
 * prefetch threads hands over exactly what a reader without them hands over, call for call,
 * whatever the caller does between the calls: change the minibatch size, ask for the position,
 * save and restore a checkpoint, seek, change the worker partition, free the reader. Its log
 * lines reach the callback on the caller's thread, in the same calls; an error it meets is
 * the next call's.
 */
#include "test.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static const ctf_stream_def AS[] = {{"a", NULL, 3, false, false}, {"b", NULL, 40, true, false}};

/* 2000 sequences of 1-3 lines; with `bad`, sequences 700 and 1500 have a malformed value. */
static const char *ahead_file(bool bad)
{
    static char path[2][600];
    if (path[bad][0]) return path[bad];
    size_t cap = 1 << 20, n = 0;
    char *text = malloc(cap);
    uint64_t s = 99;
    for (int id = 0; id < 2000; id++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const int lines = 1 + (int)((s >> 33) % 3);
        for (int l = 0; l < lines; l++) {
            if (bad && (id == 700 || id == 1500) && l == 0)
                n += (size_t)snprintf(text + n, cap - n, "%d |a 1 x2 3", id);
            else
                n += (size_t)snprintf(text + n, cap - n, "%d |a %d %d.25 %d", id, id % 89, l, -id);
            if (l == 0) n += (size_t)snprintf(text + n, cap - n, " |b %d:1.5", (id * 3) % 40);
            text[n++] = '\n';
        }
    }
    snprintf(path[bad], sizeof path[bad], "%s",
             test_write_file(bad ? "ahead-bad.ctf" : "ahead.ctf", text, n));
    free(text);
    return path[bad];
}

static void ahead_cfg(ctf_config *c, bool bad, size_t threads)
{
    ctf_config_init(c);
    c->path = ahead_file(bad);
    c->streams = AS;
    c->num_streams = 2;
    c->chunk_size_bytes = 4096;
    c->randomize = true;
    c->randomization_window = 3;
    c->randomization_seed = 5;
    c->max_sweeps = 3;
    c->num_threads = threads;
}

/* A log sink that notes whether every line came on the thread that opened the reader. */
typedef struct thread_log {
    test_log lines;
    pthread_t caller;
    int elsewhere;
} thread_log;

static void thread_log_capture(void *user, ctf_severity sev, const ctf_error *what)
{
    thread_log *t = user;
    if (!pthread_equal(pthread_self(), t->caller)) t->elsewhere++;
    test_log_capture(&t->lines, sev, what);
}

/* What one call hands over, to compare call for call. */
typedef struct call_out {
    int rc;
    uint64_t digest, position;
    size_t log_len;
    char state[2048];
} call_out;

/* One step of a script, done on both readers. */
enum { NEXT, SEEK, SEEK_HERE, SAVE_LOAD, WORKER, RESTORE };
typedef struct step {
    int op;
    uint64_t arg, arg2;
} step;

/* Runs the script on reader r; out[i] is step i's result. The saved state of step `save_at`
 * is what RESTORE steps restore. */
static void run_script(ctf_reader *r, const step *steps, size_t n, size_t save_at,
                       const thread_log *log, call_out *out)
{
    char saved[2048] = "";
    for (size_t i = 0; i < n; i++) {
        call_out *o = &out[i];
        memset(o, 0, sizeof *o);
        if (steps[i].op == NEXT) {
            ctf_minibatch *mb = NULL;
            o->rc = ctf_reader_next(r, steps[i].arg, &mb);
            o->digest = mb ? test_digest_minibatch(1, mb) : 0;
            ctf_minibatch_free(mb);
        } else if (steps[i].op == SEEK) {
            o->rc = ctf_reader_seek(r, steps[i].arg);
        } else if (steps[i].op == SEEK_HERE) {
            o->rc = ctf_reader_seek(r, ctf_reader_position(r));
        } else if (steps[i].op == SAVE_LOAD) { /* a checkpoint of here, restored at once */
            char st[2048];
            size_t len = 0;
            o->rc = ctf_reader_save_state(r, st, sizeof st, &len);
            if (!o->rc) o->rc = ctf_reader_restore_state(r, st, len);
        } else if (steps[i].op == WORKER) {
            o->rc = ctf_reader_set_worker(r, (size_t)steps[i].arg, (size_t)steps[i].arg2);
        } else {
            o->rc = ctf_reader_restore_state(r, saved, strlen(saved));
        }
        o->position = ctf_reader_position(r);
        size_t len = 0;
        if (ctf_reader_save_state(r, o->state, sizeof o->state, &len)) o->state[0] = 0;
        if (i == save_at) memcpy(saved, o->state, sizeof saved);
        o->log_len = log->lines.n;
    }
}

static void compare_runs(const step *steps, size_t n, size_t save_at, bool bad)
{
    call_out *want = calloc(n, sizeof *want), *got = calloc(n, sizeof *got);
    thread_log *logs = calloc(2, sizeof *logs);
    ASSERT(want && got && logs);
    for (int k = 0; k < 2; k++) {
        ctf_config c;
        ahead_cfg(&c, bad, k ? 2 : 0);
        c.log = thread_log_capture;
        c.log_user = &logs[k];
        c.max_errors = 1;
        logs[k].caller = pthread_self();
        ctf_reader *r;
        ctf_error e;
        ASSERT_OK(ctf_reader_open(&c, &r, &e), &e);
        run_script(r, steps, n, save_at, &logs[k], k ? got : want);
        ctf_reader_free(r);
    }
    for (size_t i = 0; i < n; i++) {
        char where[64];
        snprintf(where, sizeof where, "step %zu", i);
        if (want[i].rc != got[i].rc || want[i].digest != got[i].digest ||
            want[i].position != got[i].position || strcmp(want[i].state, got[i].state) ||
            want[i].log_len != got[i].log_len)
            test_fail(__FILE__, __LINE__, "read ahead == read on the caller's thread", where);
    }
    ASSERT_EQ(strcmp(logs[0].lines.text, logs[1].lines.text), 0);
    ASSERT_EQ(logs[1].elsewhere, 0);
    if (bad) { /* the first bad value is logged, the second ends the run */
        ASSERT(strstr(logs[1].lines.text, "ahead-bad.ctf") != NULL);
        ASSERT(want[n - 1].rc != 0);
    }
    free(want);
    free(got);
    free(logs);
}

TEST(ahead_hands_over_what_the_caller_would_read)
{
    /* Sizes that change, the position and a checkpoint after every call, a seek back and
     * forward, a new partition and back, a restore, a sweep end crossed, the data's end; a
     * position and a partition refused (the reader stays where the caller is). */
    const step steps[] = {
        {NEXT, 37, 0},  {NEXT, 37, 0},   {NEXT, 37, 0},  {SEEK, UINT64_MAX, 0}, {NEXT, 37, 0},
        {WORKER, 0, 5}, {NEXT, 37, 0},   {NEXT, 50, 0},  {NEXT, 50, 0},         {NEXT, 1, 0},
        {NEXT, 37, 0},  {SEEK, 100, 0},  {NEXT, 37, 0},  {NEXT, 37, 0},         {WORKER, 3, 1},
        {NEXT, 37, 0},  {NEXT, 37, 0},   {WORKER, 3, 1}, {NEXT, 37, 0},         {WORKER, 1, 0},
        {NEXT, 37, 0},  {RESTORE, 0, 0}, {NEXT, 37, 0},  {NEXT, 37, 0},         {SEEK, 3900, 0},
        {NEXT, 300, 0}, {NEXT, 300, 0},  {NEXT, 300, 0}, {NEXT, 999, 0},        {NEXT, 999, 0},
        {NEXT, 999, 0}, {NEXT, 999, 0},  {NEXT, 999, 0}, {NEXT, 999, 0},        {NEXT, 999, 0},
        {NEXT, 999, 0}, {NEXT, 999, 0},  {NEXT, 999, 0}, {NEXT, 999, 0},
    };
    compare_runs(steps, sizeof steps / sizeof *steps, 3, false);
}

TEST(ahead_logs_on_the_callers_thread_and_its_error_is_the_next_calls)
{
    /* max_errors 1: the first malformed value is logged in the call that reaches it, the
     * second ends the run, in the same call as without threads, after the same minibatches;
     * the calls after it repeat the error. */
    step steps[80];
    for (size_t i = 0; i < 80; i++) steps[i] = (step){NEXT, 64, 0};
    compare_runs(steps, 80, 0, true);
    /* The same with a change of size just before the error is reached. */
    for (size_t i = 40; i < 80; i++) steps[i] = (step){NEXT, 16 + (i % 3), 0};
    compare_runs(steps, 80, 0, true);
    /* A seek to where the caller is, or a checkpoint restored, after every minibatch: each
     * undoes a read-ahead, also the one that met an error (the caller has not met it yet). */
    for (int op = SEEK_HERE; op <= SAVE_LOAD; op++) {
        for (size_t i = 0; i < 80; i++) steps[i] = (step){i % 2 ? op : NEXT, 64, 0};
        compare_runs(steps, 80, 0, true);
    }
}

TEST(ahead_reader_freed_while_reading_ahead)
{
    /* A read-ahead is running or done when the reader goes: nothing leaks (ASan's builds). */
    for (size_t calls = 1; calls <= 3; calls++) {
        ctf_config c;
        ahead_cfg(&c, false, 2);
        ctf_reader *r;
        ctf_error e;
        ASSERT_OK(ctf_reader_open(&c, &r, &e), &e);
        for (size_t i = 0; i < calls; i++) {
            ctf_minibatch *mb;
            ASSERT_OK(ctf_reader_next(r, 100, &mb), ctf_reader_error(r));
            ASSERT(mb != NULL);
            if (i + 1 < calls)
                ctf_minibatch_free(mb);
            else {
                ctf_reader_free(r); /* the minibatch handed over outlives its reader */
                ASSERT(ctf_minibatch_num_sequences(mb) > 0);
                ctf_minibatch_free(mb);
            }
        }
    }
}

TEST(ahead_stats_wait_for_the_read_ahead)
{
    /* Counters read while a read-ahead runs are whole: after the last call they equal those
     * of a reader without threads (every chunk committed once). */
    ctf_stats st[2];
    for (int k = 0; k < 2; k++) {
        ctf_config c;
        ahead_cfg(&c, false, k ? 2 : 0);
        c.max_sweeps = 1;
        ctf_reader *r;
        ctf_error e;
        ASSERT_OK(ctf_reader_open(&c, &r, &e), &e);
        for (;;) {
            ctf_minibatch *mb;
            ASSERT_OK(ctf_reader_next(r, 128, &mb), ctf_reader_error(r));
            ctf_stats mid;
            ctf_reader_get_stats(r, &mid);
            ASSERT(mid.sequences <= 2000);
            if (!mb) break;
            ctf_minibatch_free(mb);
        }
        ctf_reader_get_stats(r, &st[k]);
        ctf_reader_free(r);
    }
    ASSERT_U64_EQ(st[0].sequences, 2000);
    ASSERT_U64_EQ(st[1].sequences, st[0].sequences);
    ASSERT_U64_EQ(st[1].streams[0].samples, st[0].streams[0].samples);
    ASSERT_U64_EQ(st[1].streams[1].nonzeros, st[0].streams[1].nonzeros);
}

TEST(ahead_next_within_cuts_at_the_period_and_keeps_its_read_ahead)
{
    /* ctf_reader_next_within(r, n, P) on a reader with threads hands over, call for call, what
     * ctf_reader_next(r, min(n, P - position % P)) hands over without them; the read-ahead is
     * asked with the same size and period every call, so none is undone and each chunk is
     * loaded as often as without threads. P: a sweep (2000 sequences' samples), and 500. */
    ctf_config c;
    ctf_error e;
    const uint64_t periods[] = {0, 500};
    for (size_t pi = 0; pi < 2; pi++) {
        ctf_reader *r[2];
        for (int k = 0; k < 2; k++) {
            ahead_cfg(&c, false, k ? 2 : 0);
            ASSERT_OK(ctf_reader_open(&c, &r[k], &e), &e);
        }
        uint64_t period = periods[pi];
        if (!period) period = ctf_reader_samples_per_sweep(r[0]);
        ASSERT(period > 64);
        size_t calls = 0, ends = 0; /* minibatches that end on a multiple of the period */
        for (;; calls++) {
            const uint64_t pos = ctf_reader_position(r[0]);
            const uint64_t room = period - pos % period;
            ctf_minibatch *want, *got;
            ASSERT_OK(ctf_reader_next(r[0], room < 64 ? room : 64, &want), ctf_reader_error(r[0]));
            ASSERT_OK(ctf_reader_next_within(r[1], 64, period, &got), ctf_reader_error(r[1]));
            ASSERT_EQ(want == NULL, got == NULL);
            if (!want) break;
            ASSERT_EQ(test_digest_minibatch(1, want), test_digest_minibatch(1, got));
            ASSERT_EQ(ctf_reader_position(r[0]), ctf_reader_position(r[1]));
            ends += ctf_minibatch_position(got) % period == 0;
            ctf_minibatch_free(want);
            ctf_minibatch_free(got);
        }
        ASSERT(calls > 3 * 2000 / 64);
        ASSERT(ends >= 3);
        ctf_stats st[2];
        ctf_reader_get_stats(r[0], &st[0]);
        ctf_reader_get_stats(r[1], &st[1]);
        ASSERT_EQ(st[1].chunks_loaded, st[0].chunks_loaded);
        ctf_reader_free(r[0]);
        ctf_reader_free(r[1]);
    }
}
