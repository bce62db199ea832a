/*
 * test_bptt.c -- truncated BPTT across a checkpoint: a restore in the middle of a sequence that
 * was dropped (its streams have unequal lengths) keeps it dropped.
 */
#include "ctfio.h"
#include "test.h"

#include <stdlib.h>
#include <unistd.h>

static void quiet(void *user, ctf_severity sev, const ctf_error *what)
{
    (void)user;
    (void)sev;
    (void)what;
}

/* Appends "key:x-values;" for every sequence of mb to out. */
static void take(const ctf_minibatch *mb, char *out, size_t cap)
{
    ctf_stream_view v;
    if (ctf_minibatch_stream(mb, 0, &v)) abort();
    const float *x = v.values;
    size_t at = 0;
    for (size_t i = 0; i < v.num_sequences; i++) {
        size_t n = strlen(out);
        snprintf(out + n, cap - n, "%llu:", (unsigned long long)ctf_minibatch_keys(mb)[i]);
        for (uint32_t j = 0; j < v.lengths[i]; j++) {
            n = strlen(out);
            snprintf(out + n, cap - n, "%g,", (double)x[at++]);
        }
        n = strlen(out);
        snprintf(out + n, cap - n, ";");
    }
}

static void config(ctf_config *c, const char *path, const ctf_stream_def *s)
{
    ctf_config_init(c);
    c->path = path;
    c->streams = s;
    c->num_streams = 2;
    c->randomize = false;
    c->max_sweeps = 1;
    c->max_errors = 10;
    c->truncation_length = 1;
    c->num_threads = 0;
    c->log = quiet;
}

TEST(bptt_restore_mid_dropped_sequence_keeps_it_dropped)
{
    /* Sequence 1 has three x samples but one y sample: truncated BPTT drops it. */
    char path[] = "/tmp/ctfio_bptt_XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    const char text[] = "0 |x 1 |y 1\n0 |x 2 |y 2\n1 |x 3 |y 3\n1 |x 4\n1 |x 5\n"
                        "2 |x 6 |y 6\n2 |x 7 |y 7\n";
    ASSERT(write(fd, text, sizeof text - 1) == (ssize_t)(sizeof text - 1));
    close(fd);
    ctf_stream_def s[2] = {{.name = "x", .dim = 1}, {.name = "y", .dim = 1}};
    ctf_config c;
    config(&c, path, s);
    ctf_error err;
    char whole[512] = "", cut[512] = "";

    ctf_reader *r;
    ASSERT_EQ(ctf_reader_open(&c, &r, &err), 0);
    for (;;) {
        ctf_minibatch *mb;
        ASSERT_EQ(ctf_reader_next(r, 1, &mb), 0);
        if (!mb) break;
        take(mb, whole, sizeof whole);
        ctf_minibatch_free(mb);
    }
    ctf_reader_free(r);

    /* The same run, saved after every minibatch and continued by a new reader each time. */
    char *state = NULL;
    size_t len = 0;
    for (int step = 0;; step++) {
        ASSERT_EQ(ctf_reader_open(&c, &r, &err), 0);
        if (state) ASSERT_EQ(ctf_reader_restore_state(r, state, len), 0);
        ctf_minibatch *mb;
        ASSERT_EQ(ctf_reader_next(r, 1, &mb), 0);
        free(state);
        state = NULL;
        if (!mb) {
            ctf_reader_free(r);
            break;
        }
        take(mb, cut, sizeof cut);
        ctf_minibatch_free(mb);
        ASSERT_EQ(ctf_reader_save_state(r, NULL, 0, &len), 0);
        state = malloc(len + 1);
        ASSERT(state);
        ASSERT_EQ(ctf_reader_save_state(r, state, len + 1, &len), 0);
        ctf_reader_free(r);
        ASSERT(step < 100);
    }
    remove(path);
    if (strcmp(whole, cut) != 0) {
        test_fail(__FILE__, __LINE__, "restored run == uninterrupted run", cut);
        return;
    }
    ASSERT(strstr(whole, "1:") == NULL); /* the dropped sequence is never delivered */
}
