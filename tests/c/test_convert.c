/*
 * test_convert.c -- ctf_convert_file: LibSVM and CSV into CTF (exact text, index bases, qid
 * sequences, one-hot classes, inferred dimensions), every error with its line and column, the
 * progress callback and cancelling, the reader configuration text, and no file left on failure.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cli.h"
#include "ctfio.h"
#include "test.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

static int run(ctf_convert_format fmt, const char *text, ctf_convert_options *o,
               ctf_convert_result *r, ctf_error *e, char *out, size_t cap)
{
    char in[600];
    snprintf(in, sizeof in, "%s",
             test_write_str(fmt == CTF_CONVERT_CSV ? "in.csv" : "in.svm", text));
    snprintf(out, cap, "%s/out.ctf", test_tmpdir());
    unlink(out);
    o->format = fmt;
    return ctf_convert_file(in, out, o, r, e);
}

TEST(convert_libsvm_auto_base_and_dim)
{
    ctf_convert_options o = {.index_base = -1};
    ctf_convert_result r;
    ctf_error e;
    char out[600];
    ASSERT_OK(run(CTF_CONVERT_LIBSVM,
                  "1 1:0.5 3:2e3  # a comment\n\n-1 2:.25 4:1.0000000000000002\r\n0\n", &o, &r, &e,
                  out, sizeof out),
              &e);
    ASSERT_STR_EQ(slurp(out), "|labels 1 |features 0:0.5 2:2e3\n" /* CTF numbers as written */
                              "|labels -1 |features 1:0.25 3:1.0000000000000002\n"
                              "|labels 0 |features\n");
    ASSERT_EQ(r.index_base, 1);
    ASSERT_EQ(r.features_dim, 4);
    ASSERT_EQ(r.rows, 3);
    ASSERT_EQ(r.sequences, 3);
    ASSERT(!r.sequence_ids && r.features_sparse && !r.labels_sparse && r.labels_dim == 1);
}

TEST(convert_libsvm_zero_based_qid_classes)
{
    ctf_convert_options o = {.index_base = -1, .classes = 3, .dim = 10};
    ctf_convert_result r;
    ctf_error e;
    char out[600];
    ASSERT_OK(run(CTF_CONVERT_LIBSVM, "2 qid:7 0:1\n0 qid:7 5:3\n1 qid:9 9:-4\n", &o, &r, &e, out,
                  sizeof out),
              &e);
    ASSERT_STR_EQ(slurp(out), "7\t|labels 2:1 |features 0:1\n7\t|labels 0:1 |features 5:3\n"
                              "9\t|labels 1:1 |features 9:-4\n");
    ASSERT_EQ(r.index_base, 0);
    ASSERT_EQ(r.sequences, 2);
    ASSERT_EQ(r.max_sequence_length, 2);
    ASSERT(r.sequence_ids && r.labels_sparse && r.labels_dim == 3 && r.features_dim == 10);
    /* The printed configuration names what was written. */
    char text[2048];
    size_t need = cli_convert_describe(&r, &o, out, text, sizeof text);
    ASSERT(need < sizeof text);
    ASSERT_STR_CONTAINS(text, "features = [ dim = 10 ; format = \"sparse\" ]");
    ASSERT_STR_CONTAINS(text, "labels = [ dim = 3 ; format = \"sparse\" ]");
    ASSERT_STR_CONTAINS(text, "labels=ctfio.StreamDef(field=\"labels\", shape=3, is_sparse=True)");
    char small[16];
    ASSERT_EQ(cli_convert_describe(&r, &o, out, small, sizeof small), need);
    ASSERT_EQ(strlen(small), sizeof small - 1);
}

static void expect_error(ctf_convert_format fmt, ctf_convert_options *o, const char *text,
                         uint64_t line, uint64_t column, const char *msg, int *failed)
{
    ctf_convert_result r;
    ctf_error e;
    char out[600], part[620];
    int rc = run(fmt, text, o, &r, &e, out, sizeof out);
    snprintf(part, sizeof part, "%s.part", out);
    if (rc == 0 || e.line != line || e.column != column || !strstr(e.message, msg) ||
        access(out, F_OK) == 0 || access(part, F_OK) == 0) {
        fprintf(stderr, "  %s: rc %d line %llu column %llu: %s\n", text, rc,
                (unsigned long long)e.line, (unsigned long long)e.column, e.message);
        *failed = 1;
    }
}

TEST(convert_libsvm_errors)
{
    int failed = 0;
    ctf_convert_options o = {.index_base = -1};
    expect_error(CTF_CONVERT_LIBSVM, &o, "1 1:2\nx 1:2\n", 2, 1, "the label", &failed);
    expect_error(CTF_CONVERT_LIBSVM, &o, "1 1:2\n1 3:2 2:1\n", 2, 7, "must increase", &failed);
    expect_error(CTF_CONVERT_LIBSVM, &o, "1 1:2\n1 a:1\n", 2, 3, "expected index:value", &failed);
    expect_error(CTF_CONVERT_LIBSVM, &o, "1 1:2\n1 4:nan\n", 2, 5, "expected a number", &failed);
    expect_error(CTF_CONVERT_LIBSVM, &o, "1 qid:1 1:2\n1 1:3\n", 2, 1, "no qid", &failed);
    expect_error(CTF_CONVERT_LIBSVM, &o, "1,2 1:2\n", 1, 1, "multi-label", &failed);
    o.dim = 3;
    o.index_base = 0;
    expect_error(CTF_CONVERT_LIBSVM, &o, "1 0:2\n1 3:1\n", 2, 3, "out of range (dim=3", &failed);
    o.index_base = 1;
    expect_error(CTF_CONVERT_LIBSVM, &o, "1 0:2\n", 1, 3, "one-based", &failed);
    o = (ctf_convert_options){.index_base = -1, .classes = 2};
    expect_error(CTF_CONVERT_LIBSVM, &o, "1 1:2\n2 1:2\n", 2, 1, "class number in 0..1", &failed);
    expect_error(CTF_CONVERT_LIBSVM, &o, "\n# nothing\n", 0, 0, "no data line", &failed);
    ASSERT(!failed);
}

TEST(convert_csv_header_names_and_errors)
{
    ctf_convert_options o = {.label_columns = "y,2", .header = true};
    ctf_convert_result r;
    ctf_error e;
    char out[600];
    ASSERT_OK(run(CTF_CONVERT_CSV, "a, y ,b,c\n1,2,3,4\n\n\"5\",6e-1,-0,8.5\n", &o, &r, &e, out,
                  sizeof out),
              &e);
    ASSERT_STR_EQ(slurp(out), "|labels 2 3 |features 1 4\n|labels 6e-1 -0 |features 5 8.5\n");
    ASSERT(r.features_dim == 2 && r.labels_dim == 2 && r.rows == 2 && !r.features_sparse);
    o = (ctf_convert_options){.label_columns = "0", .delimiter = ';'};
    ASSERT_OK(run(CTF_CONVERT_CSV, "1;2\n", &o, &r, &e, out, sizeof out), &e);
    ASSERT_STR_EQ(slurp(out), "|labels 1 |features 2\n");

    int failed = 0;
    o = (ctf_convert_options){.label_columns = "0"};
    expect_error(CTF_CONVERT_CSV, &o, "1,2,3\n4,x5,6\n", 2, 3,
                 "field 2: expected a number, found 'x5'", &failed);
    expect_error(CTF_CONVERT_CSV, &o, "1,2,3\n4,,6\n", 2, 3, "field 2 is empty", &failed);
    expect_error(CTF_CONVERT_CSV, &o, "1,2,3\n4,5\n", 2, 0, "2 fields, expected 3", &failed);
    ASSERT(!failed);
    o = (ctf_convert_options){.label_columns = "y"};
    ASSERT_EQ(run(CTF_CONVERT_CSV, "1,2\n", &o, &r, &e, out, sizeof out), CTF_EINVAL);
    ASSERT_STR_CONTAINS(e.message, "needs a header");
    o = (ctf_convert_options){.label_columns = "0,1"};
    ASSERT_EQ(run(CTF_CONVERT_CSV, "1,2\n", &o, &r, &e, out, sizeof out), CTF_EINVAL);
    o = (ctf_convert_options){.label_columns = "7"};
    ASSERT_EQ(run(CTF_CONVERT_CSV, "1,2\n", &o, &r, &e, out, sizeof out), CTF_EINVAL);
    ASSERT_STR_CONTAINS(e.message, "does not exist");
}

static int count_progress(void *user, uint64_t done, uint64_t total)
{
    uint64_t *calls = user;
    if (done > total) return 1;
    calls[0]++;
    calls[1] = done;
    calls[2] = total;
    return calls[3] && calls[0] >= calls[3];
}

TEST(convert_progress_and_cancel)
{
    /* Enough bytes for several reports (one per 4 MiB), two passes (dim inferred). */
    size_t n = 0, cap = 9u << 20, top = 0;
    char *text = malloc(cap + 64);
    ASSERT(text);
    while (n < cap) {
        if (n % 97 + 200 > top) top = n % 97 + 200;
        n += (size_t)sprintf(text + n, "1 %zu:0.125 %zu:3\n", n % 97 + 1, n % 97 + 200);
    }
    uint64_t calls[4] = {0};
    ctf_convert_options o = {.index_base = -1, .progress = count_progress, .progress_user = calls};
    ctf_convert_result r;
    ctf_error e;
    char out[600];
    int rc = run(CTF_CONVERT_LIBSVM, text, &o, &r, &e, out, sizeof out);
    ASSERT_OK(rc, &e);
    ASSERT(calls[0] >= 4);
    ASSERT_U64_EQ(calls[1], 2 * (uint64_t)n);
    ASSERT_U64_EQ(calls[2], 2 * (uint64_t)n);
    ASSERT_EQ(r.features_dim, top); /* one-based: the largest index is the dim */
    calls[0] = 0;
    calls[3] = 2; /* cancel on the second report */
    rc = run(CTF_CONVERT_LIBSVM, text, &o, &r, &e, out, sizeof out);
    free(text);
    ASSERT_EQ(rc, CTF_EINVAL);
    ASSERT_STR_CONTAINS(e.message, "cancelled");
    ASSERT(access(out, F_OK) != 0);
}

TEST(convert_bad_options)
{
    ctf_convert_options o = {.index_base = 2};
    ctf_convert_result r;
    ctf_error e;
    char out[600];
    ASSERT_EQ(run(CTF_CONVERT_LIBSVM, "1 1:1\n", &o, &r, &e, out, sizeof out), CTF_EINVAL);
    o = (ctf_convert_options){.features_name = "x", .labels_name = "x"};
    ASSERT_EQ(run(CTF_CONVERT_LIBSVM, "1 1:1\n", &o, &r, &e, out, sizeof out), CTF_EINVAL);
    o = (ctf_convert_options){.format = CTF_CONVERT_LIBSVM, .index_base = -1};
    ASSERT_EQ(ctf_convert_file("/nonexistent/in.svm", out, &o, &r, &e), CTF_EIO);
    ASSERT_EQ(ctf_convert_file(test_write_str("x.svm", "1 1:1\n"), "/nonexistent/dir/o.ctf", &o, &r,
                               &e),
              CTF_EIO);
}

TEST(convert_into_a_device_writes_in_place)
{
    /* /dev/null stays the device: no temporary file is renamed over it. */
    ctf_convert_options o = {.format = CTF_CONVERT_LIBSVM, .index_base = -1};
    ctf_convert_result r;
    ctf_error e;
    ASSERT_OK(ctf_convert_file(test_write_str("d.svm", "1 1:1\n0 2:2\n"), "/dev/null", &o, &r, &e),
              &e);
    struct stat sb;
    ASSERT(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
    ASSERT(access("/dev/null.part", F_OK) != 0);
    ASSERT_EQ(r.rows, 2);
}
