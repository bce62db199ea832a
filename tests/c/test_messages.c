/*
 * test_messages.c -- failures a careless user meets, reported so that the message tells what
 * to do: a join whose temporary tables hit a full disk (the directory and the errno), a state
 * with more keys than any state has, and the few-chunks warning's advice in the window's unit.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ctfio.h"
#include "test.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

static const ctf_stream_def MX[] = {{.name = "x", .dim = 1}};
static const ctf_stream_def MY[] = {{.name = "y", .dim = 1}};

/* n keys in a scrambled order (so that the join sorts them), one line each. */
static const char *keyed_file(const char *name, const char *alias, size_t n)
{
    char *t = malloc(n * 40 + 1);
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = (i * 7919) % n;
        len += (size_t)sprintf(t + len, "%zu |%s %zu\n", k, alias, k);
    }
    const char *p = test_write_file(name, t, len);
    free(t);
    return p;
}

TEST(join_full_disk_names_the_directory_and_the_errno)
{
    char x[700];
    snprintf(x, sizeof x, "%s", keyed_file("jfull_x.ctf", "x", 20000));
    const char *y = keyed_file("jfull_y.ctf", "y", 20000);
    const char *ypaths[] = {y};
    ctf_join_def jd = {.paths = ypaths, .num_paths = 1, .streams = MY, .num_streams = 1};
    ctf_config c;
    ctf_config_init(&c);
    c.path = x;
    c.streams = MX;
    c.num_streams = 1;
    c.joins = &jd;
    c.num_joins = 1;
    c.num_threads = 0;
    struct rlimit old;
    ASSERT(getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {4096, old.rlim_max};
    ASSERT(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    ctf_reader *r = NULL;
    ctf_error e;
    int rc = ctf_reader_open(&c, &r, &e);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    ctf_reader_free(r);
    ASSERT_EQ(rc, CTF_EIO);
    ASSERT_STR_CONTAINS(e.message, "temporary tables in ");
    ASSERT_STR_CONTAINS(e.message, test_tmpdir());
    ASSERT_STR_CONTAINS(e.message, "EFBIG 27");
}

TEST(state_with_many_keys_says_so)
{
    const char *path = test_write_str("keys.ctf", "|x 1\n|x 2\n");
    ctf_config c;
    ctf_config_init(&c);
    c.path = path;
    c.streams = MX;
    c.num_streams = 1;
    c.num_threads = 0;
    ctf_reader *r;
    ctf_error e;
    ASSERT_OK(ctf_reader_open(&c, &r, &e), &e);
    char state[4096];
    size_t n = (size_t)sprintf(state, "{");
    for (int i = 0; i < 40; i++)
        n += (size_t)sprintf(state + n, "%s\"k%d\": %d", i ? ", " : "", i, i);
    n += (size_t)sprintf(state + n, "}");
    ASSERT_EQ(ctf_reader_restore_state(r, state, n), CTF_ESTATE);
    ASSERT_STR_CONTAINS(ctf_reader_error(r)->message, "more than 32 keys");
    ctf_reader_free(r);
}

typedef struct advice {
    int warnings;
    char text[1024];
} advice;

static void keep_warning(void *user, ctf_severity sev, const ctf_error *what)
{
    advice *a = user;
    if (sev != CTF_SEV_WARNING || !strstr(what->message, "workers")) return;
    a->warnings++;
    snprintf(a->text, sizeof a->text, "%s", what->message);
}

TEST(few_chunks_warning_advises_in_the_windows_unit)
{
    char *t = malloc(64 * 16);
    size_t len = 0;
    for (int i = 0; i < 64; i++) len += (size_t)sprintf(t + len, "|x %d\n", i);
    const char *path = test_write_file("few.ctf", t, len);
    free(t);
    for (int unit = 0; unit < 2; unit++) {
        ctf_config c;
        ctf_config_init(&c);
        c.path = path;
        c.streams = MX;
        c.num_streams = 1;
        c.num_threads = 0;
        c.num_workers = 4;
        c.trace_level = 1;
        advice a = {0};
        c.log = keep_warning;
        c.log_user = &a;
        if (unit == 0) {
            c.chunk_size_bytes = 64; /* many chunks; a window of 2 chunks */
            c.randomization_window = 2;
            c.window_in_samples = false;
        } else {
            c.chunk_size_bytes = 1 << 20; /* one chunk: only smaller chunks help */
        }
        ctf_reader *r;
        ctf_error e;
        ASSERT_OK(ctf_reader_open(&c, &r, &e), &e);
        ctf_reader_free(r);
        ASSERT_EQ(a.warnings, 1);
        if (unit == 0) {
            ASSERT_STR_CONTAINS(a.text, "raise randomizationWindow (now 2 chunks");
            ASSERT(strstr(a.text, "chunkSizeInBytes") == NULL);
        } else {
            ASSERT_STR_CONTAINS(a.text, "lower chunkSizeInBytes");
        }
    }
}
