/*
 * test_quarantine.c -- the bad-records file (ctf_config.bad_records, lib/reader/quarantine.c):
 * each record skipped for an error is one JSON line with its file, line, column, byte offset,
 * error and raw text; the same file with and without prefetch threads (the read-ahead's undone
 * work leaves no line); nothing at the path until the reader is freed; refused without
 * max_errors.
 */
#include "reader/quarantine.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const ctf_stream_def QS[] = {{"a", NULL, 3, false, false}};

/* 300 one-line sequences; lines 21, 150 and 277 (1-based) have a malformed value. Fills
 * where[k] with the byte offset of bad line k's start. */
static const char *quar_file(uint64_t where[3])
{
    static char path[600];
    static uint64_t at[3];
    static char text[64 << 10];
    if (!path[0]) {
        size_t n = 0, k = 0;
        for (int id = 0; id < 300; id++) {
            const bool bad = id == 20 || id == 149 || id == 276;
            if (bad) at[k++] = n;
            if (bad)
                n += (size_t)snprintf(text + n, sizeof text - n, "%d |a 1 x%d 3\n", id, id);
            else
                n += (size_t)snprintf(text + n, sizeof text - n, "%d |a %d 2 3\n", id, id);
        }
        snprintf(path, sizeof path, "%s", test_write_file("quar.ctf", text, n));
    }
    memcpy(where, at, sizeof at);
    return path;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    *len = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    if (buf) buf[*len] = 0;
    return buf;
}

/* Reads two sweeps in minibatches of 7, seeking where it is every second call and back near
 * the start once (an undone read-ahead each time, with threads), with the bad-records file at
 * out. @return : the reader's bad_records count,
 * or -1 when something failed; *early: the file existed before the end of the data, *at_end: at
 * the end, before the free. */
static long long quar_run(size_t threads, const char *out, bool *early, bool *at_end)
{
    uint64_t where[3];
    ctf_config c;
    ctf_config_init(&c);
    c.path = quar_file(where);
    c.streams = QS;
    c.num_streams = 1;
    c.chunk_size_bytes = 256;
    c.randomize = false;
    c.max_sweeps = 2;
    c.max_errors = 5;
    c.num_threads = threads;
    c.bad_records = out;
    ctf_reader *r = NULL;
    ctf_error err;
    unlink(out);
    if (ctf_reader_open(&c, &r, &err)) return -1;
    long long rc = 0;
    for (int i = 0; i < 44 && !rc; i++) {
        ctf_minibatch *mb = NULL;
        rc = ctf_reader_next(r, 7, &mb);
        ctf_minibatch_free(mb);
        /* A seek drops the read-ahead asked for after every second call (undone). */
        if (!rc && i % 2) rc = ctf_reader_seek(r, ctf_reader_position(r));
    }
    *early = access(out, F_OK) == 0; /* every record skipped, the data not at its end */
    if (!rc) rc = ctf_reader_seek(r, 10);
    for (;;) {
        ctf_minibatch *mb = NULL;
        if (rc || (rc = ctf_reader_next(r, 7, &mb)) || !mb) break;
        ctf_minibatch_free(mb);
    }
    ctf_stats st;
    ctf_reader_get_stats(r, &st);
    *at_end = access(out, F_OK) == 0;
    ctf_reader_free(r);
    return rc ? -1 : (long long)st.bad_records;
}

TEST(quarantine_lists_each_skipped_record_with_its_text)
{
    uint64_t where[3];
    const char *data = quar_file(where);
    char out[700];
    snprintf(out, sizeof out, "%s/quar-0.jsonl", test_tmpdir());
    bool early = true, at_end = false;
    ASSERT_EQ(quar_run(0, out, &early, &at_end), 3);
    ASSERT(!early);
    ASSERT(at_end);
    size_t len = 0;
    char *got = slurp(out, &len);
    ASSERT(got);
    const int lines[3] = {21, 150, 277};
    const int ids[3] = {20, 149, 276};
    char *p = got;
    for (int k = 0; k < 3; k++) {
        char *nl = strchr(p, '\n');
        ASSERT(nl);
        *nl = 0;
        char want[1400];
        /* The error's byte is that of the bad value: the line's start plus "ID |a 1 ". */
        const int col = snprintf(NULL, 0, "%d |a 1 ", ids[k]) + 1;
        snprintf(want, sizeof want,
                 "{\"file\": \"%s\", \"line\": %d, \"column\": %d, \"offset\": %llu, \"error\": ",
                 data, lines[k], col, (unsigned long long)(where[k] + (uint64_t)col - 1));
        ASSERT_STR_EQ(strncmp(p, want, strlen(want)) ? p : want, want);
        char text[100];
        snprintf(text, sizeof text, ", \"text\": \"%d |a 1 x%d 3\", \"truncated\": false}", ids[k],
                 ids[k]);
        ASSERT(strlen(p) > strlen(text));
        ASSERT_STR_EQ(p + strlen(p) - strlen(text), text);
        p = nl + 1;
    }
    ASSERT_EQ(*p, 0);
    free(got);
}

TEST(quarantine_same_file_with_and_without_threads)
{
    char out0[700], out2[700];
    snprintf(out0, sizeof out0, "%s/quar-t0.jsonl", test_tmpdir());
    snprintf(out2, sizeof out2, "%s/quar-t2.jsonl", test_tmpdir());
    bool early = true, at_end = false;
    ASSERT_EQ(quar_run(0, out0, &early, &at_end), 3);
    ASSERT_EQ(quar_run(2, out2, &early, &at_end), 3);
    ASSERT(!early && at_end);
    size_t n0 = 0, n2 = 0;
    char *a = slurp(out0, &n0), *b = slurp(out2, &n2);
    ASSERT(a && b);
    ASSERT(n0 > 0);
    ASSERT_EQ(n0, n2);
    ASSERT(memcmp(a, b, n0) == 0);
    free(a);
    free(b);
}

TEST(quarantine_long_line_is_cut_at_4_KiB)
{
    char *text = malloc(20000);
    ASSERT(text);
    size_t n = (size_t)snprintf(text, 20000, "0 |a 1 2 3\n1 |a 1 y 3");
    for (int i = 0; i < 6000; i++) text[n++] = ' ';
    n += (size_t)snprintf(text + n, 20000 - n, "\n2 |a 1 2 3\n");
    const char *data = test_write_file("quar-long.ctf", text, n);
    free(text);
    char out[700];
    snprintf(out, sizeof out, "%s/quar-long.jsonl", test_tmpdir());
    ctf_config c;
    ctf_config_init(&c);
    c.path = data;
    c.streams = QS;
    c.num_streams = 1;
    c.randomize = false;
    c.max_sweeps = 1;
    c.max_errors = 1;
    c.num_threads = 0;
    c.bad_records = out;
    ctf_reader *r = NULL;
    ctf_error err;
    ASSERT_EQ(ctf_reader_open(&c, &r, &err), 0);
    ctf_minibatch *mb = NULL;
    int rc;
    while (!(rc = ctf_reader_next(r, 100, &mb)) && mb) ctf_minibatch_free(mb);
    ASSERT_EQ(rc, 0);
    ctf_reader_free(r);
    size_t len = 0;
    char *got = slurp(out, &len);
    ASSERT(got);
    ASSERT(strstr(got, "\"text\": \"1 |a 1 y 3   "));
    ASSERT(strstr(got, "\", \"truncated\": true}\n"));
    const char *t = strstr(got, "\"text\": \"") + 9;
    ASSERT_EQ(strstr(got, "\", \"truncated\"") - t, 4096);
    free(got);
}

TEST(quarantine_refused_without_max_errors)
{
    uint64_t where[3];
    ctf_config c;
    ctf_config_init(&c);
    c.path = quar_file(where);
    c.streams = QS;
    c.num_streams = 1;
    char never[700];
    snprintf(never, sizeof never, "%s/never-written.jsonl", test_tmpdir());
    c.bad_records = never;
    ctf_reader *r = NULL;
    ctf_error err;
    ASSERT_EQ(ctf_reader_open(&c, &r, &err), CTF_EINVAL);
    ASSERT(strstr(err.message, "bad_records") && strstr(err.message, "max_errors"));
    ASSERT(access(never, F_OK) != 0);
    /* A mix: refused too (its parts would each count their own errors). */
    const char *paths[1] = {c.path};
    const ctf_mix_part part = {.paths = paths, .num_paths = 1, .weight = 1.0};
    c.path = NULL;
    c.mix = &part;
    c.num_mix = 1;
    c.max_errors = 5;
    ASSERT_EQ(ctf_reader_open(&c, &r, &err), CTF_EINVAL);
    ASSERT(strstr(err.message, "bad_records") && strstr(err.message, "mix"));
}

TEST(quarantine_reader_section_key)
{
    const char *text =
        "reader = [ file = \"d.ctf\"; maxErrors = 4; badRecordsFile = \"bad.jsonl\"\n"
        "  input = [ x = [ dim = 1; format = dense ] ] ]\n";
    ctf_bsconfig *doc = NULL;
    ctf_error err;
    ctf_config c;
    ctf_config_init(&c);
    ASSERT_EQ(ctf_bsconfig_parse(text, strlen(text), "x.cntk", NULL, NULL, 0, &doc, &err), 0);
    ASSERT_EQ(ctf_bsconfig_apply(doc, &c, &err), 0);
    ASSERT(c.bad_records);
    ASSERT(strstr(c.bad_records, "bad.jsonl"));
    ASSERT_U64_EQ(c.max_errors, 4);
    ctf_bsconfig_free(doc);
}

TEST(quarantine_commit_then_more_keeps_every_line)
{
    char out[700];
    snprintf(out, sizeof out, "%s/quar-commit.jsonl", test_tmpdir());
    unlink(out);
    ctf__quarantine *q = NULL;
    ctf_error err, e1, e2;
    ASSERT_EQ(ctf__quar_open(out, &q, &err), 0);
    ctf__fail(&e1, CTF_EPARSE, (ctf__where){"a.ctf", 3, 2, 20}, "first");
    ctf__fail(&e2, CTF_EPARSE, (ctf__where){"a.ctf", 9, 4, 90}, "second \"quoted\"");
    ASSERT_EQ(ctf__quar_add(q, NULL, NULL, &e1, &err), 0);
    ASSERT(access(out, F_OK) != 0);
    ASSERT_EQ(ctf__quar_commit(q), 0);
    ASSERT(access(out, F_OK) == 0);
    ASSERT_EQ(ctf__quar_add(q, NULL, NULL, &e2, &err), 0);
    ctf__quar_close(q);
    size_t len = 0;
    char *got = slurp(out, &len);
    ASSERT(got);
    ASSERT_STR_EQ(got,
                  "{\"file\": \"a.ctf\", \"line\": 3, \"column\": 2, \"offset\": 20, "
                  "\"error\": \"first\", \"text\": null, \"truncated\": false}\n"
                  "{\"file\": \"a.ctf\", \"line\": 9, \"column\": 4, \"offset\": 90, "
                  "\"error\": \"second \\\"quoted\\\"\", \"text\": null, \"truncated\": false}\n");
    free(got);
}
