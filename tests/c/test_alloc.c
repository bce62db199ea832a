/*
 * test_alloc.c -- SQLite-style fault injection through the public API.
 *
 * A scenario parses a BrainScript configuration (with a command-line override), opens a reader,
 * reads minibatches across a sweep end, saves its state, opens a second reader, restores the
 * state into it, reads more, and frees everything. Run once without failures it gives the number
 * of allocations N and a digest of everything delivered. Then, for every k = 1..N, the k-th
 * allocation fails (ctf__alloc.fail_at = k; also "sticky", every later one failing too, for a
 * sample of k): every call must succeed or return CTF_ENOMEM with its error record saying so,
 * a scenario that succeeds must deliver exactly the baseline, and after freeing everything
 * ctf__alloc.live must be back where it started. The same with the index cache (the second
 * reader loads what the first saved), and sticky failures with two prefetch threads.
 *
 * I/O faults: ctf__io_fail_at = k fails the k-th pread of a read through the whole file; the
 * read must stop with CTF_EIO naming the file, leaking nothing.
 *
 * Every test resets the hooks before it returns, whatever happened.
 */
#include "reader/pipeline.h"
#include "test.h"

#include <stdlib.h>
#include <unistd.h>

/* Ten sequences; a short dense sample (warning), a bad number and a sparse index out of range
 * (errors, tolerated by maxErrors), a comment, a multi-line sequence. */
static const char alloc_data[] = "1 |a 1 2 |b 0:1\n"
                                 "1 |a 3 4\n"
                                 "2 |a 5 6 |b 1:2 3:4\n"
                                 "3 |a 7 8 |# note |b 2:1\n"
                                 "3 |a 9\n"
                                 "4 |a 13 14 |b 3:3\n"
                                 "5 |a x 16 |b 1:1\n"
                                 "5 |a 17 18 |b 1:1\n"
                                 "6 |a 19 20 |b 0:5\n"
                                 "7 |a 1 2 |b 3:1\n"
                                 "7 |a 3 4 |b 9:1\n"
                                 "8 |a 5 6 |b 2:2\n"
                                 "9 |a 7 8 |b 1:1 2:2 3:3\n"
                                 "10 |a 9 10 |b 0:1\n";

static const char alloc_config[] = "precision = \"double\"\n"
                                   "reader = [\n"
                                   "  readerType = \"CNTKTextFormatReader\"\n"
                                   "  file = \"$dataFile$\"\n"
                                   "  randomize = true\n"
                                   "  randomizationSeed = 5\n"
                                   "  randomizationWindow = 2\n"
                                   "  chunkSizeInBytes = 40\n"
                                   "  maxErrors = 10\n"
                                   "  input = [\n"
                                   "    s0 = [ alias = \"a\" ; dim = 2 ; format = \"dense\" ]\n"
                                   "    s1 = [ alias = \"b\" ; dim = 4 ; format = \"sparse\" ]\n"
                                   "  ]\n"
                                   "]\n";

static void quiet(void *user, ctf_severity sev, const ctf_error *what)
{
    (void)user;
    (void)sev;
    (void)what;
}

static void reset_hooks(void)
{
    ctf__alloc.fail_at = 0;
    ctf__alloc.fail_sticky = false;
    atomic_store(&ctf__io_fail_at, 0);
}


typedef struct outcome {
    int rc;              /* first failure, 0 if none */
    const char *step;    /* the call that failed */
    ctf_error err;       /* its error record */
    uint64_t digest;     /* of everything delivered */
} outcome;

#define STEP(name, call, errp) \
    do { \
        int rc_ = (call); \
        if (rc_) { \
            o->rc = rc_; \
            o->step = name; \
            if ((errp) != &o->err) o->err = *(errp); \
            goto out; \
        } \
    } while (0)

/* Reads n minibatches of 3 samples from r into the digest. */
static int read_n(ctf_reader *r, int n, uint64_t *digest)
{
    for (int i = 0; i < n; i++) {
        ctf_minibatch *mb = NULL;
        int rc = ctf_reader_next(r, 3, &mb);
        if (rc) return rc;
        if (!mb) break;
        *digest = test_digest_minibatch(*digest, mb);
        ctf_minibatch_free(mb);
    }
    return 0;
}

static void scenario(const char *data_path, size_t threads, bool cache, outcome *o)
{
    memset(o, 0, sizeof *o);
    o->digest = 0xcbf29ce484222325ull;
    ctf__error_clear(&o->err);
    ctf_bsconfig *doc = NULL;
    ctf_reader *r1 = NULL, *r2 = NULL;
    char ov_buf[600];
    snprintf(ov_buf, sizeof ov_buf, "dataFile=%s", data_path);
    const char *ov[2] = {ov_buf, "reader.keepDataInMemory=false"};
    if (cache) {
        char cpath[700];
        remove(ctf_index_cache_path(data_path, cpath, sizeof cpath));
    }

    STEP("ctf_bsconfig_parse",
         ctf_bsconfig_parse(alloc_config, sizeof alloc_config - 1, "alloc.cntk", NULL, ov, 2, &doc,
                            &o->err),
         &o->err);
    ctf_config cfg;
    ctf_config_init(&cfg);
    STEP("ctf_bsconfig_apply", ctf_bsconfig_apply(doc, &cfg, &o->err), &o->err);
    cfg.num_threads = threads;
    /* Without threads, no look-ahead either: then every allocation is one a call needs, and the
     * exhaustive loops can demand that each failure surfaces. The look-ahead is optional work
     * that stops quietly when an allocation fails (the runs with threads cover it: they demand
     * CTF_ENOMEM or identical data, and no leak). */
    cfg.prefetch_chunks = threads ? 3 : 0;
    cfg.cache_index = cache;
    cfg.log = quiet;

    STEP("ctf_reader_open(1)", ctf_reader_open(&cfg, &r1, &o->err), &o->err);
    STEP("ctf_reader_next(1)", read_n(r1, 4, &o->digest), ctf_reader_error(r1));
    char state[1024];
    size_t len = 0;
    /* save_state takes a const reader: a failure has no error record, only its status. */
    ctf_error save_err;
    ctf__error_clear(&save_err);
    int save_rc = ctf_reader_save_state(r1, state, sizeof state, &len);
    if (save_rc) ctf__fail(&save_err, save_rc, CTF__NOWHERE, "ctf_reader_save_state failed");
    STEP("ctf_reader_save_state", save_rc, &save_err);
    STEP("ctf_reader_next(1b)", read_n(r1, 4, &o->digest), ctf_reader_error(r1));

    STEP("ctf_reader_open(2)", ctf_reader_open(&cfg, &r2, &o->err), &o->err);
    STEP("ctf_reader_restore_state", ctf_reader_restore_state(r2, state, len),
         ctf_reader_error(r2));
    STEP("ctf_reader_next(2)", read_n(r2, 7, &o->digest), ctf_reader_error(r2));
out:
    ctf_reader_free(r1);
    ctf_reader_free(r2);
    ctf_bsconfig_free(doc);
}

/* Checks one run under fault injection against the baseline. @return : whether it is fine. */
static bool check_run(const outcome *o, const outcome *base, long k, bool sticky, long live0,
                      int *failed_runs)
{
    long live = atomic_load(&ctf__alloc.live);
    bool ok = true;
    if (o->rc != 0 && o->rc != CTF_ENOMEM) ok = false;
    if (o->rc == CTF_ENOMEM && (o->err.code != CTF_ENOMEM || !o->err.message[0])) ok = false;
    if (o->rc == 0 && o->digest != base->digest) ok = false;
    if (live != live0) ok = false;
    if (o->rc) (*failed_runs)++;
    if (!ok)
        fprintf(stderr,
                "  fail_at=%ld%s: %s returned %d (%s) [error record code %d: %s]; digest %s; "
                "%ld blocks leaked\n",
                k, sticky ? " sticky" : "", o->step ? o->step : "-", o->rc, ctf_error_name(o->rc),
                o->err.code, o->err.message, o->digest == base->digest ? "same" : "DIFFERENT",
                live - live0);
    return ok;
}

/* The exhaustive loop. @return : whether every run was fine. */
static bool fail_each(size_t threads, bool cache, long step_sticky, long *count_out,
                      int *failed_runs)
{
    const char *path = test_write_str(cache ? "alloc_cache.ctf" : "alloc.ctf", alloc_data);
    char data_path[600];
    snprintf(data_path, sizeof data_path, "%s", path);
    long live0 = atomic_load(&ctf__alloc.live);
    outcome base;
    reset_hooks();
    atomic_store(&ctf__alloc.count, 0);
    scenario(data_path, threads, cache, &base);
    long count = atomic_load(&ctf__alloc.count);
    *count_out = count;
    if (base.rc || atomic_load(&ctf__alloc.live) != live0) {
        fprintf(stderr, "  baseline: %s returned %d (%s), %ld blocks leaked\n", base.step, base.rc,
                base.err.message, atomic_load(&ctf__alloc.live) - live0);
        return false;
    }
    bool all_ok = true;
    int bad = 0;
    for (long k = 1; k <= count && bad < 5; k++) {
        for (int sticky = 0; sticky < 2; sticky++) {
            if (sticky && (step_sticky <= 0 || k % step_sticky != 1 % step_sticky)) continue;
            outcome o;
            atomic_store(&ctf__alloc.count, 0);
            ctf__alloc.fail_sticky = sticky;
            ctf__alloc.fail_at = k;
            scenario(data_path, threads, cache, &o);
            reset_hooks();
            if (!check_run(&o, &base, k, sticky, live0, failed_runs)) {
                all_ok = false;
                bad++;
                atomic_store(&ctf__alloc.live, live0); /* report each leak once */
            }
        }
    }
    return all_ok;
}

TEST(alloc_fail_each_allocation)
{
    long count = 0;
    int failed = 0;
    bool ok = fail_each(0, false, 4, &count, &failed);
    reset_hooks();
    ASSERT(ok);
    ASSERT(count > 50);
    /* Without threads nothing is optional work: the reader's look-ahead only reads records
     * already at hand, so every failed allocation fails the run (check_run proved each
     * outcome). */
    const long all = count + (count + 3) / 4;
    ASSERT_EQ(failed, all);
}

TEST(alloc_fail_each_allocation_with_index_cache)
{
    long count = 0;
    int failed = 0;
    bool ok = fail_each(0, true, 0, &count, &failed);
    reset_hooks();
    ASSERT(ok);
    ASSERT(count > 50);
    ASSERT(failed <= count && failed >= count - count / 20); /* the look-ahead, as above */
}

TEST(alloc_sticky_failures_with_threads)
{
    const char *path = test_write_str("alloc_threads.ctf", alloc_data);
    char data_path[600];
    snprintf(data_path, sizeof data_path, "%s", path);
    long live0 = atomic_load(&ctf__alloc.live);
    outcome base;
    reset_hooks();
    atomic_store(&ctf__alloc.count, 0);
    scenario(data_path, 2, false, &base);
    long count = atomic_load(&ctf__alloc.count);
    bool ok = base.rc == 0 && atomic_load(&ctf__alloc.live) == live0;
    if (!ok)
        fprintf(stderr, "  baseline: %s returned %d (%s)\n", base.step, base.rc, base.err.message);
    int failed = 0, bad = 0;
    for (long k = 1; ok && k <= count + 10 && bad < 5; k += 3) {
        outcome o;
        atomic_store(&ctf__alloc.count, 0);
        ctf__alloc.fail_sticky = true;
        ctf__alloc.fail_at = k;
        scenario(data_path, 2, false, &o);
        reset_hooks();
        if (!check_run(&o, &base, k, true, live0, &failed)) {
            bad++;
            atomic_store(&ctf__alloc.live, live0);
        }
    }
    reset_hooks();
    ASSERT(ok);
    ASSERT_EQ(bad, 0);
    ASSERT(failed > 0);
}

/*======================================================================
 * I/O faults
 *====================================================================*/

static const ctf_stream_def io_streams[2] = {
    {.name = "s0", .alias = "a", .dim = 2},
    {.name = "s1", .alias = "b", .dim = 4, .is_sparse = true},
};

/* Opens a reader on path and reads one whole sweep. */
static int io_scenario(const char *path, size_t threads, ctf_error *err)
{
    ctf_config c;
    ctf_config_init(&c);
    c.path = path;
    c.streams = io_streams;
    c.num_streams = 2;
    c.chunk_size_bytes = 40;
    c.randomization_window = 2;
    c.max_errors = 10;
    c.max_sweeps = 1;
    c.num_threads = threads;
    c.log = quiet;
    ctf_reader *r = NULL;
    int rc = ctf_reader_open(&c, &r, err);
    if (rc) return rc;
    for (;;) {
        ctf_minibatch *mb = NULL;
        rc = ctf_reader_next(r, 2, &mb);
        if (rc) {
            *err = *ctf_reader_error(r);
            break;
        }
        if (!mb) break;
        ctf_minibatch_free(mb);
    }
    ctf_reader_free(r);
    return rc;
}

/* A read may fail in work the prefetch threads do ahead and the consumer retries: then the
 * run succeeds. Without threads no read is optional, so every failed read fails the run. */
static bool io_fail_each(size_t threads, long *count_out, int *eio_runs)
{
    const char *p = test_write_str("alloc_io.ctf", alloc_data);
    char path[600];
    snprintf(path, sizeof path, "%s", p);
    long live0 = atomic_load(&ctf__alloc.live);
    ctf_error err;
    reset_hooks();
    atomic_store(&ctf__io_count, 0);
    int rc = io_scenario(path, threads, &err);
    long count = atomic_load(&ctf__io_count);
    *count_out = count;
    if (rc) {
        fprintf(stderr, "  baseline read failed: %d %s\n", rc, err.message);
        return false;
    }
    bool ok = true;
    for (long k = 1; k <= count; k++) {
        ctf__error_clear(&err);
        atomic_store(&ctf__io_count, 0);
        atomic_store(&ctf__io_fail_at, k);
        rc = io_scenario(path, threads, &err);
        reset_hooks();
        long leaked = atomic_load(&ctf__alloc.live) - live0;
        bool fine = leaked == 0 &&
                    (rc == CTF_EIO ? err.code == CTF_EIO && strstr(err.path, "alloc_io.ctf") &&
                                         strstr(err.message, "read failed")
                                   : rc == 0 && threads > 0);
        if (rc == CTF_EIO) (*eio_runs)++;
        if (!fine) {
            fprintf(stderr,
                    "  io_fail_at=%ld threads=%zu: rc %d (%s), error %d %s: %s; %ld blocks "
                    "leaked\n",
                    k, threads, rc, ctf_error_name(rc), err.code, err.path, err.message, leaked);
            ok = false;
            atomic_store(&ctf__alloc.live, live0);
        }
    }
    return ok;
}

TEST(io_fail_each_pread)
{
    long count = 0;
    int eio = 0;
    bool ok = io_fail_each(0, &count, &eio);
    reset_hooks();
    ASSERT(ok);
    ASSERT(count >= 3); /* the index scan and at least two chunks */
    ASSERT_EQ(eio, count);
}

TEST(io_fail_each_pread_with_a_thread)
{
    long count = 0;
    int eio = 0;
    bool ok = io_fail_each(1, &count, &eio);
    reset_hooks();
    ASSERT(ok);
    ASSERT(eio > 0);
}
