/*
 * test_main.c -- runs every registered C test, or those whose name (or file) contains argv[1].
 * Last line: "N passed, N failed"; exit status 1 on any failure, and also when a filter matches
 * no test (a misspelt filter in a make target would otherwise pass having run nothing).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "test.h"

#include <stdlib.h>
#include <unistd.h>

typedef struct test_entry {
    const char *name, *file;
    test_fn fn;
    int order;
} test_entry;

/* Grown as the constructors register (no fixed bound that would drop a test unseen). */
static test_entry *tests;
static int num_tests, cap_tests;
static int current_failed;

void test_register(const char *name, const char *file, test_fn fn)
{
    if (num_tests == cap_tests) {
        const int cap = cap_tests ? 2 * cap_tests : 512;
        test_entry *grown = realloc(tests, (size_t)cap * sizeof *grown);
        if (!grown) {
            fprintf(stderr, "out of memory registering test %s\n", name);
            exit(2);
        }
        tests = grown;
        cap_tests = cap;
    }
    tests[num_tests] = (test_entry){name, file, fn, num_tests};
    num_tests++;
}

void test_fail(const char *file, int line, const char *expr, const char *detail)
{
    current_failed = 1;
    fprintf(stderr, "FAIL %s:%d: %s %s\n", file, line, expr, detail);
}

static char tmpdir[256];

const char *test_tmpdir(void)
{
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/ctfio_tests.XXXXXX");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return tmpdir;
}

const char *test_write_file(const char *name, const void *data, size_t len)
{
    static char paths[16][512];
    static int slot;
    char *p = paths[slot++ % 16];
    snprintf(p, 512, "%s/%s", test_tmpdir(), name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        exit(2);
    }
    if (len) fwrite(data, 1, len, f);
    fclose(f);
    return p;
}

const char *test_write_str(const char *name, const char *text)
{
    return test_write_file(name, text, strlen(text));
}

static int cmp_tests(const void *a, const void *b)
{
    const test_entry *ta = a, *tb = b;
    int c = strcmp(ta->file, tb->file);
    return c ? c : ta->order - tb->order;
}

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    int passed = 0, failed = 0;
    /* Stable order: by file, then registration order within a file. */
    qsort(tests, (size_t)num_tests, sizeof tests[0], cmp_tests);
    for (int i = 0; i < num_tests; i++) {
        if (filter && !strstr(tests[i].name, filter) && !strstr(tests[i].file, filter)) continue;
        current_failed = 0;
        tests[i].fn();
        if (current_failed) {
            failed++;
            fprintf(stderr, "  in test %s (%s)\n", tests[i].name, tests[i].file);
        } else {
            passed++;
        }
    }
    if (tmpdir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    }
    free(tests);
    if (filter && passed + failed == 0) {
        fprintf(stderr, "no test matches the filter '%s'\n", filter);
        return 1;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
