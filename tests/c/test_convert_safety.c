/*
 * test_convert_safety.c -- what a conversion may touch: only the named output. The input named
 * again as the output (by its path, a link, another spelling) is refused; a file or a link that
 * happens to carry a temporary-looking name is never written or removed; two conversions to one
 * output leave one whole result; a full disk names its errno and keeps the old output. Also the
 * input oddities a careless user produces: a UTF-8 BOM, NUL bytes, CR-only line ends, indices
 * past what the reader takes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ctfio.h"
#include "test.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    if (len) *len = (size_t)n;
    return buf;
}

static bool file_is(const char *path, const char *text)
{
    size_t n;
    char *s = read_all(path, &n);
    bool same = s && n == strlen(text) && !memcmp(s, text, n);
    free(s);
    return same;
}

/* Files in the test directory whose name starts with prefix and is longer than it. */
static int leftovers(const char *prefix)
{
    DIR *d = opendir(test_tmpdir());
    int n = 0;
    size_t k = strlen(prefix);
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, prefix, k) && strlen(e->d_name) > k) n++;
    if (d) closedir(d);
    return n;
}

static const char *path_in_tmp(char *buf, size_t cap, const char *name)
{
    snprintf(buf, cap, "%s/%s", test_tmpdir(), name);
    return buf;
}

static const ctf_convert_options svm = {.format = CTF_CONVERT_LIBSVM, .index_base = -1};

TEST(convert_refuses_an_output_that_is_the_input)
{
    const char *text = "1 1:1\n0 2:2\n";
    const char *in = test_write_str("same.svm", text);
    char other[600], lnk[600], hard[600], dotted[700];
    path_in_tmp(lnk, sizeof lnk, "same_link.svm");
    path_in_tmp(hard, sizeof hard, "same_hard.svm");
    unlink(lnk);
    unlink(hard);
    ASSERT(symlink(in, lnk) == 0);
    ASSERT(link(in, hard) == 0);
    snprintf(dotted, sizeof dotted, "%s/./same.svm", test_tmpdir());
    const char *outs[] = {in, lnk, hard, dotted};
    for (size_t i = 0; i < 4; i++) {
        ctf_error e;
        ctf_convert_result r;
        ASSERT_EQ(ctf_convert_file(in, outs[i], &svm, &r, &e), CTF_EINVAL);
        ASSERT_STR_CONTAINS(e.message, "is the input file");
        ASSERT(file_is(in, text));
    }
    /* Through the link as the input, the real file as the output: refused the same way. */
    ctf_error e;
    ASSERT_EQ(ctf_convert_file(lnk, in, &svm, NULL, &e), CTF_EINVAL);
    ASSERT(file_is(in, text));
    ASSERT_EQ(leftovers("same.svm."), 0);
    ASSERT_OK(ctf_convert_file(in, path_in_tmp(other, sizeof other, "same.ctf"), &svm, NULL, &e),
              &e);
}

TEST(convert_never_touches_a_file_with_a_temporary_looking_name)
{
    /* A browser's partial download named like the old temporary file is a valid input. */
    const char *in = test_write_str("dl.svm.part", "1 1:1\n");
    char out[600];
    path_in_tmp(out, sizeof out, "dl.svm");
    unlink(out);
    ctf_error e;
    ASSERT_OK(ctf_convert_file(in, out, &svm, NULL, &e), &e);
    ASSERT(file_is(in, "1 1:1\n"));
    ASSERT(file_is(out, "|labels 1 |features 0:1\n"));
    /* A regular file and a link planted where the old temporary file went stay as they were. */
    const char *victim = test_write_str("victim.txt", "mine\n");
    char planted[700], out2[600];
    path_in_tmp(out2, sizeof out2, "pl.ctf");
    snprintf(planted, sizeof planted, "%s.part", out2);
    unlink(planted);
    ASSERT(symlink(victim, planted) == 0);
    ASSERT_OK(ctf_convert_file(in, out2, &svm, NULL, &e), &e);
    ASSERT(file_is(victim, "mine\n"));
    struct stat st;
    ASSERT(lstat(planted, &st) == 0 && S_ISLNK(st.st_mode));
    unlink(planted);
    test_write_str("pl.ctf.part", "also mine\n");
    ASSERT_OK(ctf_convert_file(in, out2, &svm, NULL, &e), &e);
    ASSERT(file_is(planted, "also mine\n"));
    ASSERT(file_is(out2, "|labels 1 |features 0:1\n"));
    ASSERT_EQ(leftovers("pl.ctf.part."), 0);
    ASSERT_EQ(leftovers("pl.ctf."), 1); /* pl.ctf.part itself */
}

TEST(convert_through_a_symlinked_output)
{
    const char *in = test_write_str("ln.svm", "1 1:1\n");
    const char *target = test_write_str("ln_target.ctf", "old\n");
    char lnk[600], dangling[600];
    path_in_tmp(lnk, sizeof lnk, "ln_link.ctf");
    path_in_tmp(dangling, sizeof dangling, "ln_dangling.ctf");
    unlink(lnk);
    unlink(dangling);
    ASSERT(symlink(target, lnk) == 0);
    ctf_error e;
    ASSERT_OK(ctf_convert_file(in, lnk, &svm, NULL, &e), &e);
    struct stat st;
    ASSERT(lstat(lnk, &st) == 0 && S_ISLNK(st.st_mode)); /* the link is kept */
    ASSERT(file_is(target, "|labels 1 |features 0:1\n"));
    /* A link to nothing: refused, and nothing is created where it points. */
    char missing[600];
    path_in_tmp(missing, sizeof missing, "ln_missing.ctf");
    unlink(missing);
    ASSERT(symlink(missing, dangling) == 0);
    ASSERT_EQ(ctf_convert_file(in, dangling, &svm, NULL, &e), CTF_EIO);
    ASSERT_STR_CONTAINS(e.message, "symbolic link to a missing file");
    ASSERT(access(missing, F_OK) != 0);
    /* A directory as the output is refused by name. */
    char dir[600];
    path_in_tmp(dir, sizeof dir, "ln_dir.ctf");
    mkdir(dir, 0755);
    ASSERT_EQ(ctf_convert_file(in, dir, &svm, NULL, &e), CTF_EIO);
    ASSERT_STR_CONTAINS(e.message, "directory");
}

typedef struct job {
    const char *in, *out;
    int rc;
} job;

static void *convert_job(void *arg)
{
    job *j = arg;
    ctf_error e;
    j->rc = ctf_convert_file(j->in, j->out, &svm, NULL, &e);
    return NULL;
}

static char *svm_text(int label, size_t lines)
{
    char *t = malloc(lines * 32 + 1);
    size_t n = 0;
    for (size_t i = 0; i < lines; i++)
        n += (size_t)sprintf(t + n, "%d %zu:%d\n", label, i % 50 + 1, label);
    return t;
}

TEST(convert_concurrent_conversions_to_one_output_never_mix)
{
    char *a = svm_text(1, 200000), *b = svm_text(2, 150000);
    char ina[600], inb[600], out[600];
    snprintf(ina, sizeof ina, "%s", test_write_str("cc_a.svm", a));
    snprintf(inb, sizeof inb, "%s", test_write_str("cc_b.svm", b));
    path_in_tmp(out, sizeof out, "cc.ctf");
    ctf_error e;
    char pa[600], pb[600];
    path_in_tmp(pa, sizeof pa, "cc_a.ctf");
    path_in_tmp(pb, sizeof pb, "cc_b.ctf");
    ASSERT_OK(ctf_convert_file(ina, pa, &svm, NULL, &e), &e);
    ASSERT_OK(ctf_convert_file(inb, pb, &svm, NULL, &e), &e);
    char *want_a = read_all(pa, NULL), *want_b = read_all(pb, NULL);
    ASSERT(want_a && want_b);
    for (int round = 0; round < 4; round++) {
        job ja = {ina, out, -1}, jb = {inb, out, -1};
        pthread_t ta, tb;
        ASSERT(pthread_create(&ta, NULL, convert_job, &ja) == 0);
        ASSERT(pthread_create(&tb, NULL, convert_job, &jb) == 0);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        ASSERT_EQ(ja.rc, 0);
        ASSERT_EQ(jb.rc, 0);
        char *got = read_all(out, NULL);
        ASSERT(got && (!strcmp(got, want_a) || !strcmp(got, want_b)));
        free(got);
        ASSERT_EQ(leftovers("cc.ctf."), 0);
    }
    free(a);
    free(b);
    free(want_a);
    free(want_b);
}

TEST(convert_full_disk_names_the_errno_and_keeps_the_old_output)
{
    const char *in = test_write_str("fd.svm", "1 1:1\n0 2:2\n");
    ctf_error e;
    ASSERT_EQ(ctf_convert_file(in, "/dev/full", &svm, NULL, &e), CTF_EIO);
    ASSERT_STR_CONTAINS(e.message, "No space left on device");
    /* A file size limit (the disk quota of a process) hit half way. */
    char *big = svm_text(1, 100000);
    const char *bin = test_write_str("fd_big.svm", big);
    free(big);
    const char *out = test_write_str("fd.ctf", "the old output\n");
    struct rlimit old;
    ASSERT(getrlimit(RLIMIT_FSIZE, &old) == 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = {1 << 16, old.rlim_max};
    ASSERT(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    int rc = ctf_convert_file(bin, out, &svm, NULL, &e);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, old_handler);
    ASSERT_EQ(rc, CTF_EIO);
    ASSERT_STR_CONTAINS(e.message, "File too large");
    ASSERT(file_is(out, "the old output\n"));
    ASSERT_EQ(leftovers("fd.ctf."), 0);
}

TEST(convert_strips_a_utf8_bom)
{
    char out[600];
    path_in_tmp(out, sizeof out, "bom.ctf");
    ctf_convert_options csv = {.format = CTF_CONVERT_CSV, .label_columns = "a", .header = true};
    ctf_error e;
    ASSERT_OK(ctf_convert_file(test_write_str("bom.csv", "\xEF\xBB\xBF"
                                                         "a,b\n1,2\n"),
                               out, &csv, NULL, &e),
              &e);
    ASSERT(file_is(out, "|labels 1 |features 2\n"));
    csv.header = false;
    csv.label_columns = "0";
    ASSERT_OK(ctf_convert_file(test_write_str("bom2.csv", "\xEF\xBB\xBF"
                                                          "3,4\n"),
                               out, &csv, NULL, &e),
              &e);
    ASSERT(file_is(out, "|labels 3 |features 4\n"));
    ASSERT_OK(ctf_convert_file(test_write_str("bom.svm", "\xEF\xBB\xBF"
                                                         "1 2:3\n"),
                               out, &svm, NULL, &e),
              &e);
    ASSERT(file_is(out, "|labels 1 |features 1:3\n"));
    /* An error on the first line still gives the byte offset in the file. */
    ASSERT_EQ(ctf_convert_file(test_write_str("bom3.svm", "\xEF\xBB\xBF"
                                                          "x 2:3\n"),
                               out, &svm, NULL, &e),
              CTF_EPARSE);
    ASSERT_EQ(e.line, 1);
    ASSERT_EQ(e.column, 1);
    ASSERT_EQ(e.offset, 3);
}

TEST(convert_shows_nul_bytes_and_cr_only_line_ends)
{
    char out[600];
    path_in_tmp(out, sizeof out, "ctl.ctf");
    ctf_error e;
    static const char cr[] = "1 1:2\r0 1:3\r";
    ASSERT_EQ(ctf_convert_file(test_write_str("cr.svm", cr), out, &svm, NULL, &e), CTF_EPARSE);
    ASSERT_STR_CONTAINS(e.message, "found '2\\r0'");
    ASSERT_STR_CONTAINS(e.message, "not CR alone");
    static const char nul[] = "1 1:2\n0 1:3\0\n";
    ASSERT_EQ(ctf_convert_file(test_write_file("nul.svm", nul, sizeof nul - 1), out, &svm, NULL,
                               &e),
              CTF_EPARSE);
    ASSERT_EQ(e.line, 2);
    ASSERT_STR_CONTAINS(e.message, "found '3\\x00'");
    ASSERT_STR_CONTAINS(e.message, "NUL byte");
    ctf_convert_options csv = {.format = CTF_CONVERT_CSV, .label_columns = "0"};
    static const char cnul[] = "1,2\n3,\0"
                               "4\n";
    ASSERT_EQ(ctf_convert_file(test_write_file("nul.csv", cnul, sizeof cnul - 1), out, &csv, NULL,
                               &e),
              CTF_EPARSE);
    ASSERT_STR_CONTAINS(e.message, "'\\x004'");
    static const char u16[] = "\xFF\xFE"
                              "1\0 \0"
                              "1\0:\0"
                              "1\0\n\0";
    ASSERT_EQ(ctf_convert_file(test_write_file("u16.svm", u16, sizeof u16 - 1), out, &svm, NULL,
                               &e),
              CTF_EPARSE);
    ASSERT_STR_CONTAINS(e.message, "convert it to UTF-8");
    ASSERT_EQ(ctf_convert_file(test_write_file("u16.csv", u16, sizeof u16 - 1), out, &csv, NULL,
                               &e),
              CTF_EPARSE);
    ASSERT_STR_CONTAINS(e.message, "convert it to UTF-8");
    csv.header = true;
    ASSERT_EQ(ctf_convert_file(test_write_str("cr.csv", "a,b\r1,2\r3,4\r"), out, &csv, NULL, &e),
              CTF_EPARSE);
    ASSERT_STR_CONTAINS(e.message, "not CR alone");
    ASSERT(access(out, F_OK) != 0);
}

TEST(convert_refuses_indices_and_dims_past_int32)
{
    char out[600];
    path_in_tmp(out, sizeof out, "i32.ctf");
    unlink(out);
    ctf_error e;
    ctf_convert_result r;
    ASSERT_EQ(ctf_convert_file(test_write_str("i32a.svm", "1 1:1\n1 2147483648:1\n"), out, &svm, &r,
                               &e),
              CTF_EPARSE);
    ASSERT_EQ(e.line, 2);
    ASSERT_EQ(e.column, 3);
    ASSERT_STR_CONTAINS(e.message, "feature index 2147483648 is too large");
    /* Zero-based, the largest index is one less. */
    ASSERT_EQ(ctf_convert_file(test_write_str("i32b.svm", "1 0:1\n1 2147483647:1\n"), out, &svm, &r,
                               &e),
              CTF_EPARSE);
    ASSERT_EQ(e.line, 2);
    ASSERT_STR_CONTAINS(e.message, "at most 2147483646 (zero-based)");
    ASSERT(access(out, F_OK) != 0);
    /* One-based, 2^31 - 1 is the last index the reader takes: converted. */
    ASSERT_OK(ctf_convert_file(test_write_str("i32c.svm", "1 2147483647:1\n"), out, &svm, &r, &e),
              &e);
    ASSERT_EQ(r.features_dim, CTF_MAX_SPARSE_DIM);
    ctf_convert_options o = svm;
    o.dim = (size_t)1 << 31;
    ASSERT_EQ(ctf_convert_file(test_write_str("i32d.svm", "1 1:1\n"), out, &o, &r, &e), CTF_EINVAL);
    ASSERT_STR_CONTAINS(e.message, "dim: 2147483648");
    o.dim = 0;
    o.classes = (size_t)1 << 31;
    ASSERT_EQ(ctf_convert_file(test_write_str("i32d.svm", "1 1:1\n"), out, &o, &r, &e), CTF_EINVAL);
    ASSERT_STR_CONTAINS(e.message, "classes");
}

TEST(cbf_write_shares_the_output_rules)
{
    static const ctf_stream_def xs[] = {{.name = "x", .dim = 1}};
    const char *in = test_write_str("cbfin.ctf", "1 |x 1\n2 |x 2\n");
    ctf_config c;
    ctf_config_init(&c);
    c.path = in;
    c.streams = xs;
    c.num_streams = 1;
    c.num_threads = 0;
    ctf_error e;
    char lnk[600], out[600], planted[700];
    path_in_tmp(lnk, sizeof lnk, "cbfin_link.ctf");
    unlink(lnk);
    ASSERT(symlink(in, lnk) == 0);
    ASSERT_EQ(ctf_cbf_write(&c, lnk, 1 << 20, CTF_FLOAT32, NULL, &e), CTF_EINVAL);
    ASSERT(file_is(in, "1 |x 1\n2 |x 2\n"));
    const char *victim = test_write_str("cbf_victim.txt", "mine\n");
    path_in_tmp(out, sizeof out, "cbfout.bin");
    snprintf(planted, sizeof planted, "%s.part", out);
    unlink(planted);
    ASSERT(symlink(victim, planted) == 0);
    ASSERT_OK(ctf_cbf_write(&c, out, 1 << 20, CTF_FLOAT32, NULL, &e), &e);
    ASSERT(file_is(victim, "mine\n"));
    ASSERT_EQ(leftovers("cbfout.bin.part."), 0);
}
