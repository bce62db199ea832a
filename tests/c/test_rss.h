/*
 * test_rss.h -- peak resident set of one reader's sweep, measured in a child process so that
 * nothing the test runner allocated before counts, for the tests of the memory bound.
 */
#ifndef CTF_TEST_RSS_H
#define CTF_TEST_RSS_H

#include "ctfio.h"
#include "test.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* A sanitizer's allocator keeps freed blocks in quarantine: resident sets say nothing there. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_RSS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_RSS_SANITIZED 1
#endif
#endif
#ifndef TEST_RSS_SANITIZED
#define TEST_RSS_SANITIZED 0
#endif

/* Writes `lines` copies of `row` (e.g. "|x 1\n", one short sequence each in line mode) to a
 * file of the test directory. @return : its path (malloc'd), or NULL. */
static inline char *test_write_rows(const char *name, const char *row, size_t lines)
{
    char *path = malloc(700);
    if (!path) return NULL;
    snprintf(path, 700, "%s/%s", test_tmpdir(), name);
    const size_t len = strlen(row);
    char *block = malloc(len * 4096);
    FILE *f = block ? fopen(path, "wb") : NULL;
    size_t left = lines;
    if (f) {
        for (size_t i = 0; i < 4096; i++) memcpy(block + len * i, row, len);
        while (left) {
            size_t n = left < 4096 ? left : 4096;
            if (fwrite(block, len, n, f) != n) break;
            left -= n;
        }
    }
    free(block);
    if (!f || fclose(f) != 0 || left) {
        free(path);
        return NULL;
    }
    return path;
}

/* In a child: opens a reader on *c, reads it to the end in minibatches of 4096 samples, then
 * sends its peak RSS in KiB (ru_maxrss) and the sequences read back through a pipe.
 * @return : the peak, or -1 (the child failed). */
static inline long test_child_sweep_peak_kib(const ctf_config *c, uint64_t *sequences)
{
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(fds[0]);
        long out[2] = {-1, 0};
        ctf_reader *r = NULL;
        ctf_error err;
        if (ctf_reader_open(c, &r, &err) == 0) {
            ctf_minibatch *mb = NULL;
            uint64_t n = 0;
            int rc;
            while ((rc = ctf_reader_next(r, 4096, &mb)) == 0 && mb) {
                n += ctf_minibatch_num_sequences(mb);
                ctf_minibatch_free(mb);
            }
            struct rusage ru;
            if (rc == 0 && getrusage(RUSAGE_SELF, &ru) == 0) {
                out[0] = ru.ru_maxrss;
                out[1] = (long)n;
            }
            ctf_reader_free(r);
        }
        ssize_t w = write(fds[1], out, sizeof out);
        _exit(w == (ssize_t)sizeof out ? 0 : 1);
    }
    close(fds[1]);
    long in[2] = {-1, 0};
    ssize_t got = read(fds[0], in, sizeof in);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got != (ssize_t)sizeof in || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
    *sequences = (uint64_t)in[1];
    return in[0];
}

#endif
