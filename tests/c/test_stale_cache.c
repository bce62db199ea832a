/*
 * test_stale_cache.c -- an index cache that the data contradicts is not a dead end. A file
 * rewritten in place with its size, modification time and inode kept passes the cache's header
 * check; the first read that finds other bytes fails (CTF_ECHANGED) and invalidates the cache, so
 * the next open indexes the file again and reads the new data. ctf_index_verify (and `ctfio
 * index`) checks a loaded cache against the data, not only against the header.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ctfio.h"
#include "test.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Old data: sequences 1 (two rows), 2, 3. New data, same length: 1, 2 (two rows), 3. */
static const char OLD[] = "1 |x 1\n1 |x 2\n2 |x 3\n3 |x 4\n";
static const char NEW[] = "1 |x 1\n2 |x 2\n2 |x 3\n3 |x 4\n";

/* Rewrites path in place (same inode, same size) and puts its modification time back. */
static int rewrite_keeping_identity(const char *path, const char *text)
{
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    int fd = open(path, O_WRONLY);
    if (fd < 0) return -1;
    ssize_t n = pwrite(fd, text, strlen(text), 0);
    close(fd);
    if (n != (ssize_t)strlen(text)) return -1;
    struct timespec times[2] = {st.st_atim, st.st_mtim};
    if (utimensat(AT_FDCWD, path, times, 0) != 0) return -1;
    struct stat now;
    if (stat(path, &now) != 0 || now.st_ino != st.st_ino || now.st_size != st.st_size) return -1;
    return 0;
}

static const ctf_stream_def x_stream = {"x", NULL, 1, false, false};

static void config(ctf_config *c, const char *path)
{
    ctf_config_init(c);
    c->path = path;
    c->streams = &x_stream;
    c->num_streams = 1;
    c->randomize = false;
    c->cache_index = true;
    c->max_sweeps = 1;
    c->num_threads = 0;
}

/* Opens a reader and reads one sweep: sequences read, *from_cache, and the status. */
static int read_sweep(const char *path, size_t *seqs, bool *from_cache, ctf_error *err)
{
    ctf_config c;
    config(&c, path);
    ctf_reader *r;
    int rc = ctf_reader_open(&c, &r, err);
    if (rc) return rc;
    ctf_index_info info;
    ctf_index_get_info(ctf_reader_index(r), &info);
    *from_cache = info.from_cache;
    *seqs = 0;
    for (;;) {
        ctf_minibatch *mb = NULL;
        rc = ctf_reader_next(r, 1, &mb);
        if (rc) {
            *err = *ctf_reader_error(r);
            break;
        }
        if (!mb) break;
        *seqs += ctf_minibatch_num_sequences(mb);
        ctf_minibatch_free(mb);
    }
    ctf_reader_free(r);
    return rc;
}

TEST(stale_index_cache_is_invalidated_by_the_read_that_proves_it_wrong)
{
    const char *path = test_write_str("stale.ctf", OLD);
    char cpath[700];
    ctf_index_cache_path(path, cpath, sizeof cpath);
    unlink(cpath);
    size_t seqs;
    bool cached;
    ctf_error e;
    ASSERT_OK(read_sweep(path, &seqs, &cached, &e), &e);
    ASSERT(!cached && seqs == 3 && access(cpath, F_OK) == 0);
    ASSERT_OK(read_sweep(path, &seqs, &cached, &e), &e);
    ASSERT(cached && seqs == 3);
    ASSERT_EQ(rewrite_keeping_identity(path, NEW), 0);
    /* The header still matches: the cache is loaded, and the data contradicts it. */
    ASSERT_EQ(read_sweep(path, &seqs, &cached, &e), CTF_ECHANGED);
    ASSERT(cached);
    ASSERT_STR_CONTAINS(e.message, "index cache was invalidated");
    /* Reopening helps: the file is indexed again and the new data read. */
    ASSERT_OK(read_sweep(path, &seqs, &cached, &e), &e);
    ASSERT(!cached && seqs == 3);
    ASSERT_OK(read_sweep(path, &seqs, &cached, &e), &e);
    ASSERT(cached && seqs == 3);
}

TEST(stale_index_cache_built_by_the_same_reader_is_invalidated_too)
{
    /* The reader that wrote the cache meets the change: the cache it wrote goes as well. */
    const char *path = test_write_str("stale2.ctf", OLD);
    char cpath[700];
    ctf_index_cache_path(path, cpath, sizeof cpath);
    unlink(cpath);
    ctf_config c;
    config(&c, path);
    c.chunk_size_bytes = 1; /* a chunk per sequence: the first can be read before the change */
    ctf_reader *r;
    ctf_error e;
    ASSERT_OK(ctf_reader_open(&c, &r, &e), &e);
    ASSERT(access(cpath, F_OK) == 0);
    ASSERT_EQ(rewrite_keeping_identity(path, NEW), 0);
    int rc = 0;
    for (;;) {
        ctf_minibatch *mb = NULL;
        rc = ctf_reader_next(r, 1, &mb);
        if (rc || !mb) break;
        ctf_minibatch_free(mb);
    }
    ASSERT_EQ(rc, CTF_ECHANGED);
    ctf_reader_free(r);
    ctf_index *idx;
    ASSERT_OK(ctf_index_build(&c, &idx, &e), &e);
    ctf_index_info info;
    ctf_index_get_info(idx, &info);
    ASSERT(!info.from_cache && info.sequences == 3);
    ctf_index_free(idx);
}

TEST(index_verify_checks_a_loaded_cache_against_the_data)
{
    const char *path = test_write_str("verify.ctf", OLD);
    char cpath[700];
    ctf_index_cache_path(path, cpath, sizeof cpath);
    unlink(cpath);
    ctf_config c;
    config(&c, path);
    ctf_index *idx;
    ctf_error e;
    ASSERT_OK(ctf_index_build(&c, &idx, &e), &e);
    ASSERT_OK(ctf_index_verify(idx, &e), &e);
    ctf_index_free(idx);
    ASSERT_OK(ctf_index_build(&c, &idx, &e), &e);
    ctf_index_info info;
    ctf_index_get_info(idx, &info);
    ASSERT(info.from_cache);
    ASSERT_OK(ctf_index_verify(idx, &e), &e);
    ASSERT_EQ(rewrite_keeping_identity(path, NEW), 0);
    ASSERT_EQ(ctf_index_verify(idx, &e), CTF_ECHANGED);
    ASSERT_STR_CONTAINS(e.message, "index cache was invalidated");
    ASSERT_STR_EQ(e.path, path);
    ctf_index_free(idx);
    ASSERT_OK(ctf_index_build(&c, &idx, &e), &e);
    ctf_index_get_info(idx, &info);
    ASSERT(!info.from_cache && info.sequences == 3);
    ASSERT_OK(ctf_index_verify(idx, &e), &e);
    ctf_index_free(idx);
    /* A cache rebuilt since by someone else (another inode) is left alone by a stale index. */
    ASSERT_OK(ctf_index_build(&c, &idx, &e), &e);
    ASSERT_EQ(rewrite_keeping_identity(path, OLD), 0);
    char moved[720];
    snprintf(moved, sizeof moved, "%s.copy", cpath);
    char cmd[3200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && mv '%s' '%s'", cpath, moved, moved, cpath);
    ASSERT_EQ(system(cmd), 0);
    ASSERT_EQ(ctf_index_verify(idx, &e), CTF_ECHANGED);
    ASSERT(strstr(e.message, "invalidated") == NULL);
    ctf_index_free(idx);
    char magic[8] = {0};
    FILE *f = fopen(cpath, "rb");
    ASSERT(f && fread(magic, 1, 8, f) == 8);
    fclose(f);
    ASSERT(!memcmp(magic, "CTFIDX", 6)); /* untouched */
}

static const char *cli(void)
{
    const char *c = getenv("CTFIO_CLI");
    return c && c[0] ? c : "build/ctfio";
}

TEST(cli_index_reports_and_rebuilds_a_stale_cache)
{
    const char *path = test_write_str("cli_stale.ctf", OLD);
    char cpath[700], cmd[3000], out[700];
    ctf_index_cache_path(path, cpath, sizeof cpath);
    unlink(cpath);
    snprintf(out, sizeof out, "%s/cli_stale.out", test_tmpdir());
    snprintf(cmd, sizeof cmd, "%s index --file %s --input x:1:dense > %s 2>&1", cli(), path, out);
    ASSERT_EQ(system(cmd), 0);
    ASSERT_EQ(system(cmd), 0);
    FILE *f = fopen(out, "r");
    char text[4096] = {0};
    ASSERT(f && fread(text, 1, sizeof text - 1, f) > 0);
    fclose(f);
    ASSERT_STR_CONTAINS(text, "(valid, loaded)");
    ASSERT_EQ(rewrite_keeping_identity(path, NEW), 0);
    ASSERT_EQ(system(cmd), 0);
    f = fopen(out, "r");
    memset(text, 0, sizeof text);
    ASSERT(f && fread(text, 1, sizeof text - 1, f) > 0);
    fclose(f);
    ASSERT_STR_CONTAINS(text, "(stale, rebuilt)");
    ASSERT_STR_CONTAINS(text, "no longer matches the index");
    ASSERT_STR_CONTAINS(text, "sequences: 3");
    ASSERT_EQ(system(cmd), 0);
    f = fopen(out, "r");
    memset(text, 0, sizeof text);
    ASSERT(f && fread(text, 1, sizeof text - 1, f) > 0);
    fclose(f);
    ASSERT_STR_CONTAINS(text, "(valid, loaded)");
}
