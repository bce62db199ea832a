/*
 * test.h -- the C unit-test harness: a self-registering TEST() macro, ASSERT macros that print
 * both operands, and temp-file helpers. test_main.c runs the tests and prints "N passed, N failed".
 *
 * A test file needs no registration list: TEST(name) registers itself at load time (a GCC/Clang
 * constructor), so adding tests/c/test_foo.c is enough.
 */
#ifndef CTF_TEST_H
#define CTF_TEST_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ctfio.h"

typedef void (*test_fn)(void);
void test_register(const char *name, const char *file, test_fn fn);
void test_fail(const char *file, int line, const char *expr, const char *detail);

#define TEST(name) \
    static void test_##name(void); \
    __attribute__((constructor)) static void test_reg_##name(void) \
    { \
        test_register(#name, __FILE__, test_##name); \
    } \
    static void test_##name(void)

#define ASSERT(x) \
    do { \
        if (!(x)) { \
            test_fail(__FILE__, __LINE__, #x, ""); \
            return; \
        } \
    } while (0)

#define ASSERT_EQ(a, b) \
    do { \
        long long a_ = (long long)(a), b_ = (long long)(b); \
        if (a_ != b_) { \
            char m_[96]; \
            snprintf(m_, sizeof m_, "(a=%lld, b=%lld)", a_, b_); \
            test_fail(__FILE__, __LINE__, #a " == " #b, m_); \
            return; \
        } \
    } while (0)

#define ASSERT_U64_EQ(a, b) \
    do { \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b); \
        if (a_ != b_) { \
            char m_[96]; \
            snprintf(m_, sizeof m_, "(a=%llu, b=%llu)", a_, b_); \
            test_fail(__FILE__, __LINE__, #a " == " #b, m_); \
            return; \
        } \
    } while (0)

#define ASSERT_DBL_EQ(a, b) \
    do { \
        double a_ = (double)(a), b_ = (double)(b); \
        if (!(a_ == b_)) { \
            char m_[96]; \
            snprintf(m_, sizeof m_, "(a=%.17g, b=%.17g)", a_, b_); \
            test_fail(__FILE__, __LINE__, #a " == " #b, m_); \
            return; \
        } \
    } while (0)

#define ASSERT_STR_EQ(a, b) \
    do { \
        const char *a_ = (a), *b_ = (b); \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) { \
            char m_[1200]; \
            snprintf(m_, sizeof m_, "(a=\"%.560s\", b=\"%.560s\")", a_ ? a_ : "(null)", \
                     b_ ? b_ : "(null)"); \
            test_fail(__FILE__, __LINE__, #a " == " #b, m_); \
            return; \
        } \
    } while (0)

#define ASSERT_STR_CONTAINS(hay, needle) \
    do { \
        const char *h_ = (hay), *n_ = (needle); \
        if (!h_ || !strstr(h_, n_)) { \
            char m_[1200]; \
            snprintf(m_, sizeof m_, "(\"%.560s\" lacks \"%.560s\")", h_ ? h_ : "(null)", n_); \
            test_fail(__FILE__, __LINE__, #hay " contains " #needle, m_); \
            return; \
        } \
    } while (0)

#define ASSERT_MEM_EQ(a, b, n) \
    do { \
        if (memcmp((a), (b), (n)) != 0) { \
            test_fail(__FILE__, __LINE__, "memcmp(" #a ", " #b ", " #n ") == 0", ""); \
            return; \
        } \
    } while (0)

/* ASSERT_OK(call_returning_status, err): fails with the formatted error record. */
#define ASSERT_OK(expr, errp) \
    do { \
        int rc_ = (expr); \
        if (rc_ != 0) { \
            char m_[1200]; \
            snprintf(m_, sizeof m_, "(rc=%d: %s:%llu:%llu: %.500s)", rc_, (errp)->path, \
                     (unsigned long long)(errp)->line, (unsigned long long)(errp)->column, \
                     (errp)->message); \
            test_fail(__FILE__, __LINE__, #expr, m_); \
            return; \
        } \
    } while (0)

/* Writes len bytes to a fresh file in the test run's temp directory.
 * @return : its path (static storage per call slot; copy if you need it long). */
const char *test_write_file(const char *name, const void *data, size_t len);
/* Same, for a NUL-terminated string. */
const char *test_write_str(const char *name, const char *text);
/* The test run's temp directory. */
const char *test_tmpdir(void);

/* Continues digest h over everything minibatch mb delivers (test_util.c). */
struct ctf_minibatch;
uint64_t test_digest_minibatch(uint64_t h, const struct ctf_minibatch *mb);

/* A log sink (ctf_config.log with user = a test_log): the formatted lines, one per entry, as
 * many as fit, and the count of warnings (test_util.c). */
typedef struct test_log {
    char text[16384];
    size_t n;
    int warnings;
} test_log;
void test_log_capture(void *user, ctf_severity sev, const ctf_error *what);

#endif
