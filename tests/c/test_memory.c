/*
 * test_memory.c -- the memory bound over the index: a randomized sweep over a file of many
 * short sequences, in a child process, measured by its peak resident set. The index keeps
 * only chunk records, so a file with 4x the sequences must not cost 32 bytes per sequence more.
 */
#include "test.h"
#include "reader/pipeline.h"
#include "test_rss.h"

#include <stdio.h>
#include <stdlib.h>


/* One randomized sweep (1 MiB chunks, a window of 4 chunks, 2 threads) over path, in a child.
 * @return : its peak RSS in KiB, or -1. */
static long sweep_peak_kib(const char *path, uint64_t *sequences)
{
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
    return test_child_sweep_peak_kib(&c, sequences);
}

TEST(memory_index_is_per_chunk_not_per_sequence)
{
    if (TEST_RSS_SANITIZED) return;
    /* 19 MB and 58 MB of 5-byte rows: both fill the window and the read-ahead (4 + 6 chunks of
     * 1 MiB), so what the window holds is the same in both, and the big file holds 14 times the
     * sequences of the window. Only a per-sequence table would grow between them. */
    const size_t small = 4000000, big = 12000000;
    char *p1 = test_write_rows("mem_small.ctf", "|x 1\n", small);
    char *p2 = test_write_rows("mem_big.ctf", "|x 1\n", big);
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
