/*
 * test_hygiene.c -- what the release library may and may not link against: it never writes to
 * a terminal and never reads the environment (`nm -u` over every object in build/lib), it holds
 * no test-only code and exactly one archive member per source, it logs nothing without a sink,
 * and the test-only parser variant switch gives the same data as the default.
 */
#include "reader/pipeline.h"
#include "test.h"

#include <glob.h>
#include <stdlib.h>
#include <unistd.h>

/* Undefined symbols of the release objects that would mean printing or reading the
 * environment. fprintf/fputs/fputc/fwrite are allowed only where the library writes a file it
 * opened itself (writers[]: the index cache, converted output, a join's spill files). */
static const char *const forbidden[] = {"stdout",        "stderr",        "stdin",   "getenv",
                                        "secure_getenv", "printf",        "vprintf", "puts",
                                        "putchar",       "perror",        "dprintf", "vdprintf",
                                        "__printf_chk",  "__vprintf_chk", "psignal", "syslog"};
static const char *const stream_writers[] = {"fprintf", "__fprintf_chk", "vfprintf", "fputs",
                                             "fputc",   "putc",          "fwrite"};
static const char *const writers[] = {"format/index.o", "convert/convert.o", "convert/cbf_write.o"};

static bool is_writer(const char *path)
{
    for (size_t k = 0; k < sizeof writers / sizeof *writers; k++) {
        size_t n = strlen(path), m = strlen(writers[k]);
        if (n >= m && !strcmp(path + n - m, writers[k])) return true;
    }
    return false;
}

static bool in_list(const char *sym, const char *const *list, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (!strcmp(sym, list[k])) return true;
    return false;
}

/* Every object of the release library (build/lib/<layer>/<stage>.o), whatever files lib/ has. */
TEST(release_library_never_prints_nor_reads_the_environment)
{
    glob_t g;
    ASSERT_EQ(glob("build/lib/*/*.o", 0, NULL, &g), 0);
    size_t sources = 0;
    glob_t gs;
    if (glob("lib/*/*.c", 0, NULL, &gs) == 0) sources = gs.gl_pathc, globfree(&gs);
    ASSERT_EQ(g.gl_pathc, sources); /* one object per lib/ source: none left out */
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *path = g.gl_pathv[i];
        char cmd[512];
        snprintf(cmd, sizeof cmd, "nm -u %s", path);
        FILE *p = popen(cmd, "r");
        ASSERT(p != NULL);
        char line[512];
        while (fgets(line, sizeof line, p)) {
            char sym[256] = "";
            if (sscanf(line, " U %255s", sym) != 1) continue;
            char *at = strchr(sym, '@');
            if (at) *at = 0;
            char m[600];
            snprintf(m, sizeof m, "%s uses %s", path, sym);
            if (in_list(sym, forbidden, sizeof forbidden / sizeof *forbidden))
                test_fail(__FILE__, __LINE__, "no terminal output or environment", m);
            if (in_list(sym, stream_writers, sizeof stream_writers / sizeof *stream_writers) &&
                !is_writer(path))
                test_fail(__FILE__, __LINE__, "stdio writes only to files lib/ opened", m);
            /* The allocation counters are test-build only: no atomic add per malloc. */
            if (strstr(path, "common/error.o") && strstr(sym, "atomic"))
                test_fail(__FILE__, __LINE__, "release allocator has no atomics", sym);
        }
        ASSERT_EQ(pclose(p), 0);
    }
    globfree(&g);
    /* The release objects define no test hook, and none of the functions that only the tests
     * call (the whole-sweep reference of the randomizer, the cache's counters). */
    /* (The I/O fault hooks by name: the I/O seam's own ctf__io_* functions are not hooks.) */
    static const char *const test_only[] = {" ctf__alloc\n",        "ctf__io_fail_at",
                                            "ctf__io_count",        "ctf__io_short_at",
                                            "ctf__io_eof_at",       "ctf__parse_set_variant",
                                            "ctf__randomize_sweep", "ctf__sweep_identity",
                                            "ctf__sweep_free",      "ctf__sweepgen_peak_slots",
                                            "ctf__cache_held",      "ctf__cache_outstanding"};
    FILE *p = popen("nm build/lib/*/*.o", "r");
    ASSERT(p != NULL);
    char line[512];
    while (fgets(line, sizeof line, p)) {
        for (size_t k = 0; k < sizeof test_only / sizeof *test_only; k++)
            if (strstr(line, test_only[k]))
                test_fail(__FILE__, __LINE__, "no test-only code in the release objects", line);
    }
    ASSERT_EQ(pclose(p), 0);
}

/* The archive the release build links holds exactly one member per lib/ source: `ar r` adds and
 * replaces members but never drops one, so a removed or renamed source would otherwise stay in
 * build/libctfio.a, and two sources with one file name in different folders would replace each
 * other's object. */
TEST(release_archive_has_one_member_per_source)
{
    FILE *p = popen("ar t build/libctfio.a", "r");
    ASSERT(p != NULL);
    char members[64][128];
    size_t n = 0;
    char line[256];
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        ASSERT(n < 64);
        snprintf(members[n++], sizeof members[0], "%.127s", line);
    }
    ASSERT_EQ(pclose(p), 0);
    glob_t gs;
    ASSERT_EQ(glob("lib/*/*.c", 0, NULL, &gs), 0);
    ASSERT_EQ(n, gs.gl_pathc);
    for (size_t i = 0; i < gs.gl_pathc; i++) {
        const char *base = strrchr(gs.gl_pathv[i], '/') + 1;
        char obj[128];
        snprintf(obj, sizeof obj, "%.*s.o", (int)(strlen(base) - 2), base);
        size_t found = 0;
        for (size_t k = 0; k < n; k++) found += !strcmp(members[k], obj);
        char m[300];
        snprintf(m, sizeof m, "%s: %zu members named %s", gs.gl_pathv[i], found, obj);
        if (found != 1) test_fail(__FILE__, __LINE__, "one archive member per source", m);
    }
    globfree(&gs);
}

/* A reader with no log sink logs nothing and still counts its warnings: stderr stays empty
 * (the child's stderr is a file the test reads back). */
TEST(no_log_sink_means_no_output)
{
    const char *path = test_write_str("nolog.ctf", "0 |x 1\n0 |x 1 2\n1 |x 3\n");
    char out[1024];
    snprintf(out, sizeof out, "%s/nolog.stderr", test_tmpdir());
    fflush(stderr);
    int saved = dup(2);
    ASSERT(saved >= 0);
    FILE *f = freopen(out, "w", stderr);
    ASSERT(f != NULL);
    ctf_stream_def s = {.name = "x", .dim = 2};
    ctf_config cfg;
    ctf_config_init(&cfg);
    cfg.path = path;
    cfg.streams = &s;
    cfg.num_streams = 1;
    cfg.randomize = false;
    cfg.max_sweeps = 1;
    cfg.num_threads = 0;
    cfg.trace_level = 2;
    ctf_reader *r;
    ctf_error err;
    int rc = ctf_reader_open(&cfg, &r, &err);
    ctf_minibatch *mb = NULL;
    if (!rc) {
        while (ctf_reader_next(r, 10, &mb) == 0 && mb) ctf_minibatch_free(mb);
    }
    ctf_stats st;
    if (!rc) ctf_reader_get_stats(r, &st);
    ctf_reader_free(r);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ASSERT_OK(rc, &err);
    ASSERT(st.warnings >= 1);
    FILE *in = fopen(out, "rb");
    ASSERT(in != NULL);
    char buf[64];
    size_t n = fread(buf, 1, sizeof buf, in);
    fclose(in);
    ASSERT_EQ(n, 0);
}

/* The test hook that picks the parser's hot loops: every variant this machine runs gives the
 * same bytes (it replaced an environment variable the library used to read). */
TEST(parser_variants_chosen_by_the_test_hook_agree)
{
    const char *path = test_write_str("variants.ctf",
                                      "0 |x 1 2.5 -3e2 |y 0:1 7:2.25\n0 |x 4 5 6 |y 3:1e-3\n"
                                      "1 |x 0.125 1e1 7 |y 9:-4\n");
    ctf_stream_def s[2] = {{.name = "x", .dim = 3}, {.name = "y", .dim = 10, .is_sparse = true}};
    const char *names[] = {"sse2", "ssse3"};
    uint64_t digest[2] = {0, 0};
    const char *orig = ctf__parse_variant();
    int ran = 0;
    for (int v = 0; v < 2; v++) {
        if (ctf__parse_set_variant(names[v]) != 0) continue;
        ASSERT_STR_EQ(ctf__parse_variant(), names[v]);
        ctf_config cfg;
        ctf_config_init(&cfg);
        cfg.path = path;
        cfg.streams = s;
        cfg.num_streams = 2;
        cfg.randomize = false;
        cfg.max_sweeps = 1;
        cfg.num_threads = 0;
        ctf_reader *r;
        ctf_error err;
        ASSERT_OK(ctf_reader_open(&cfg, &r, &err), &err);
        ctf_minibatch *mb;
        uint64_t h = 1469598103934665603ull;
        while (ctf_reader_next(r, 2, &mb) == 0 && mb) {
            h = test_digest_minibatch(h, mb);
            ctf_minibatch_free(mb);
        }
        ASSERT_EQ(ctf_reader_error(r)->code, CTF_OK);
        ctf_reader_free(r);
        digest[v] = h;
        ran++;
    }
    ASSERT(ran >= 1 || !strcmp(ctf__parse_variant(), "portable"));
    if (ran == 2) ASSERT_U64_EQ(digest[0], digest[1]);
    ASSERT_EQ(ctf__parse_set_variant("no-such-variant"), CTF_EINVAL);
    ASSERT_EQ(ctf__parse_set_variant(orig), 0);
}
