/*
 * test_memory.c -- the memory bound over the index: a randomized sweep over a file of many
 * short sequences, in a child process, measured by its peak resident set. The index keeps
 * only chunk records, so a file with 4x the sequences must not cost 32 bytes per sequence more.
 */
#include "test.h"
#include "ctfio_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define MEM_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEM_SANITIZED 1
#endif
#endif
#ifndef MEM_SANITIZED
#define MEM_SANITIZED 0
#endif

/* Writes `lines` lines "|x 1\n" to a temp file. @return : its path (malloc'd), or NULL. */
static char *write_short_rows(const char *name, size_t lines)
{
    char *path = malloc(700);
    if (!path) return NULL;
    snprintf(path, 700, "%s/%s", test_tmpdir(), name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(path);
        return NULL;
    }
    static const char row[] = "|x 1\n";
    char block[5 * 4096];
    for (size_t i = 0; i < 4096; i++) memcpy(block + 5 * i, row, 5);
    size_t left = lines;
    while (left) {
        size_t n = left < 4096 ? left : 4096;
        if (fwrite(block, 5, n, f) != n) break;
        left -= n;
    }
    if (fclose(f) != 0 || left) {
        free(path);
        return NULL;
    }
    return path;
}

/* In a child: one randomized sweep (1 MiB chunks, a window of 4 chunks) over path, then its
 * peak RSS in KiB (ru_maxrss) back through a pipe. @return : the peak, or -1. */
static long sweep_peak_kib(const char *path, uint64_t *sequences)
{
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(fds[0]);
        long out[2] = {-1, 0};
        ctf_stream_def s = {.name = "x", .dim = 1};
        ctf_config c;
        ctf_config_init(&c);
        c.path = path;
        c.streams = &s;
        c.num_streams = 1;
        c.chunk_size_bytes = 1 << 20;
        c.randomization_window = 4;
        c.max_sweeps = 1;
        c.num_threads = 2;
        ctf_reader *r = NULL;
        ctf_error err;
        if (ctf_reader_open(&c, &r, &err) == 0) {
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

TEST(memory_index_is_per_chunk_not_per_sequence)
{
    /* A sanitizer's allocator keeps freed blocks in quarantine: resident sets say nothing. */
    if (MEM_SANITIZED) return;
    /* 19 MB and 58 MB of 5-byte rows: both fill the window and the read-ahead (4 + 6 chunks of
     * 1 MiB), so what the window holds is the same in both, and the big file holds 14 times the
     * sequences of the window. Only a per-sequence table would grow between them. */
    const size_t small = 4000000, big = 12000000;
    char *p1 = write_short_rows("mem_small.ctf", small);
    char *p2 = write_short_rows("mem_big.ctf", big);
    ASSERT(p1 && p2);
    uint64_t n1 = 0, n2 = 0;
    long k1 = sweep_peak_kib(p1, &n1);
    long k2 = sweep_peak_kib(p2, &n2);
    remove(p1);
    remove(p2);
    free(p1);
    free(p2);
    ASSERT(k1 > 0 && k2 > 0);
    ASSERT_U64_EQ(n1, small);
    ASSERT_U64_EQ(n2, big);
    /* A table of every sequence would cost 32 bytes each: 256 MB more for the big file. The
     * bound allows a quarter of that for noise (allocator, page-cache accounting). */
    const long extra = k2 - k1;
    const long per_sequence_kib = (long)((big - small) * 32 / 1024);
    if (extra >= per_sequence_kib / 4)
        fprintf(stderr, "  peak RSS %ld KiB (%zu sequences) vs %ld KiB (%zu sequences)\n", k1,
                small, k2, big);
    ASSERT(extra < per_sequence_kib / 4);
}
