/*
 * test_reliability.c -- changed files (rules 2.4), I/O faults at the platform layer,
 * index-cache writer failures (rules 4.3) and a long run (1,000 sweeps, two workers).
 *
 * Changed files: a reader opened on a file, after its first minibatch, sees the file truncated,
 * extended, rewritten in place with the same size and the old modification time restored
 * (the content check in lib/reader/prefetch.c must catch that), replaced by rename, or deleted. A
 * change must surface as a fatal error naming the file at the next chunk load, never as data.
 *
 * What happens to a file that is replaced by rename or deleted while a reader has it open: the
 * reader's descriptor still reads the original, indexed bytes, but every chunk load checks the
 * path. A replacement with another size or modification time is CTF_ECHANGED; one with the same
 * size and modification time is invisible and the reader keeps delivering the original data
 * (exactly the data it indexed: never garbage). A deleted file is CTF_EIO ("cannot stat file")
 * naming the file: the run could not be resumed from a checkpoint anyway.
 *
 * I/O faults: ctf__io_fail_at (EIO), ctf__io_short_at (a short read, retried) and ctf__io_eof_at
 * (the file ends under the read) on every pread of a multi-chunk read, with and without threads.
 *
 * Every test frees what it opened and checks ctf__alloc.live and the number of open file
 * descriptors (/proc/self/fd) against their values before it; the I/O tests reset the hooks.
 */
#include "reader/pipeline.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/*======================================================================
 * Helpers
 *====================================================================*/

static void reset_io_hooks(void)
{
    atomic_store(&ctf__io_fail_at, 0);
    atomic_store(&ctf__io_short_at, 0);
    atomic_store(&ctf__io_eof_at, 0);
    ctf__alloc.fail_at = 0;
    ctf__alloc.fail_sticky = false;
}

/* Open file descriptors of this process (entries of /proc/self/fd, minus the one that lists). */
static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n - 1;
}

static void quiet(void *user, ctf_severity sev, const ctf_error *what)
{
    (void)user;
    (void)sev;
    (void)what;
}

/* Log records kept by a test. */
typedef struct logbook {
    int warnings;
    int errors;
    ctf_error last_warning;
} logbook;

static void keep_log(void *user, ctf_severity sev, const ctf_error *what)
{
    logbook *lb = user;
    if (sev == CTF_SEV_WARNING) {
        lb->warnings++;
        lb->last_warning = *what;
    } else if (sev == CTF_SEV_ERROR) {
        lb->errors++;
    }
}


static const ctf_stream_def streams_ab[2] = {
    {.name = "s0", .alias = "a", .dim = 2},
    {.name = "s1", .alias = "b", .dim = 4, .is_sparse = true},
};

/* File order, one sweep, small chunks: a multi-chunk read. */
static void cfg_file_order(ctf_config *c, const char *path, size_t threads)
{
    ctf_config_init(c);
    c->path = path;
    c->streams = streams_ab;
    c->num_streams = 2;
    c->randomize = false;
    c->chunk_size_bytes = 60;
    c->max_sweeps = 1;
    c->num_threads = threads;
    c->prefetch_chunks = threads ? 1 : 0;
    c->log = quiet;
}

/* Reads r to its end (or first error) in minibatches of k; digest of everything delivered.
 * @return : 0 or the error status (*err filled). */
static int read_rest(ctf_reader *r, uint64_t k, uint64_t *digest, int *calls, ctf_error *err)
{
    for (;;) {
        ctf_minibatch *mb = NULL;
        int rc = ctf_reader_next(r, k, &mb);
        if (rc) {
            if (err) *err = *ctf_reader_error(r);
            return rc;
        }
        if (!mb) return 0;
        if (calls) (*calls)++;
        if (digest) *digest = test_digest_minibatch(*digest, mb);
        ctf_minibatch_free(mb);
    }
}

/* Opens path and reads it all. @return : 0 or the failure (open or read), err filled. */
static int read_file(const ctf_config *c, uint64_t *digest, ctf_error *err)
{
    ctf_reader *r = NULL;
    *digest = 0xcbf29ce484222325ull;
    int rc = ctf_reader_open(c, &r, err);
    if (rc) return rc;
    rc = read_rest(r, 3, digest, NULL, err);
    ctf_reader_free(r);
    return rc;
}

/*
 * The data of the changed-file tests: id mode, 24 sequences of 1-3 lines, every value of stream
 * a two digits wide, so that a variant can move one line boundary without changing the size:
 * `shift_at` = i makes the first value of line i one digit (5) and that of line i+1 three digits
 * (100). `key_swap` = i gives the sequence with key i the key i+50 (same width).
 */
#define CH_SEQS 24

static char *change_text(int shift_at, int key_swap, bool line_mode, size_t *len_out)
{
    size_t cap = 4096, n = 0;
    char *t = malloc(cap);
    if (!t) abort();
    int line = 0;
    for (int s = 0; s < CH_SEQS; s++) {
        int lines = 1 + (s * 5) % 3;
        for (int j = 0; j < lines; j++, line++) {
            int key = s == key_swap ? s + 50 : s;
            int v0 = 10 + (line * 7) % 90;
            char v0s[8];
            if (line == shift_at)
                snprintf(v0s, sizeof v0s, "5");
            else if (line == shift_at + 1)
                snprintf(v0s, sizeof v0s, "100");
            else
                snprintf(v0s, sizeof v0s, "%d", v0);
            char keys[16] = "";
            if (!line_mode) snprintf(keys, sizeof keys, "%02d ", key);
            n += (size_t)snprintf(t + n, cap - n, "%s|a %s %d |b %d:1\n", keys, v0s,
                                  10 + (line * 3) % 90, line % 4);
        }
    }
    *len_out = n;
    return t;
}

/* The first line of the sequence with key s (0-based), in change_text's layout. */
static int first_line_of(int s)
{
    int line = 0;
    for (int i = 0; i < s; i++) line += 1 + (i * 5) % 3;
    return line;
}

/* Writes data over path in place (same inode), without truncating first, so that a file of the
 * same size never looks shorter to a concurrent stat; then cuts it to n bytes. */
static int write_bytes(const char *path, const char *data, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(fd, data + done, n - done, (off_t)done);
        if (w <= 0) break;
        done += (size_t)w;
    }
    int rc = done == n && ftruncate(fd, (off_t)n) == 0 ? 0 : -1;
    return close(fd) == 0 ? rc : -1;
}

static int set_mtime(const char *path, const struct timespec *ts)
{
    struct timespec t[2] = {*ts, *ts};
    return utimensat(AT_FDCWD, path, t, 0);
}

typedef enum change_kind {
    CH_SHIFT_SAME_SIZE_OLD_MTIME,  /* in place, same size, line boundary moved, mtime restored */
    CH_KEY_SAME_SIZE_OLD_MTIME, /* in place, same size, a sequence key changed, mtime restored */
    CH_VALUES_NEW_MTIME, /* in place, same size, new mtime */
    CH_TRUNCATE, /* truncated to half (mtime restored: the size tells) */
    CH_EXTEND, /* a line appended */
    CH_RENAME_OTHER, /* another file renamed over it (new size) */
    CH_DELETE, /* unlinked */
} change_kind;

/* Applies a change to path (written by change_text with no variant); the same-size kinds change
 * the last sequences (the last chunk), which the reader has not loaded yet. */
static int apply_change(change_kind kind, const char *path, bool line_mode)
{
    struct stat st;
    if (stat(path, &st) != 0) return -1;
    size_t n = 0;
    char *t = NULL;
    int rc = 0;
    switch (kind) {
    case CH_SHIFT_SAME_SIZE_OLD_MTIME:
        t = change_text(first_line_of(CH_SEQS - 1) - 1, -1, line_mode, &n);
        if (n != (size_t)st.st_size) rc = -1;
        if (!rc) rc = write_bytes(path, t, n);
        if (!rc) rc = set_mtime(path, &st.st_mtim);
        break;
    case CH_KEY_SAME_SIZE_OLD_MTIME:
        t = change_text(-10, CH_SEQS - 2, line_mode, &n);
        if (n != (size_t)st.st_size) rc = -1;
        if (!rc) rc = write_bytes(path, t, n);
        if (!rc) rc = set_mtime(path, &st.st_mtim);
        break;
    case CH_VALUES_NEW_MTIME: {
        t = change_text(-10, -1, line_mode, &n);
        t[n - 4] = t[n - 4] == '1' ? '2' : '1'; /* the last sparse index */
        rc = write_bytes(path, t, n);
        /* A later mtime, also where the clock is coarser than the two writes. */
        struct timespec later = st.st_mtim;
        later.tv_sec += 1;
        if (!rc) rc = set_mtime(path, &later);
        break;
    }
    case CH_TRUNCATE:
        rc = truncate(path, st.st_size / 2);
        if (!rc) rc = set_mtime(path, &st.st_mtim);
        break;
    case CH_EXTEND: {
        FILE *f = fopen(path, "ab");
        if (!f) return -1;
        fputs(line_mode ? "|a 1 2\n" : "99 |a 1 2\n", f);
        rc = fclose(f);
        if (!rc) rc = set_mtime(path, &st.st_mtim);
        break;
    }
    case CH_RENAME_OTHER: {
        char tmp[1100];
        snprintf(tmp, sizeof tmp, "%s.new", path);
        t = change_text(-10, -1, line_mode, &n);
        rc = write_bytes(tmp, t, n - 8);
        if (!rc) rc = rename(tmp, path);
        break;
    }
    case CH_DELETE: rc = unlink(path); break;
    }
    free(t);
    return rc;
}

/* Opens a reader on a fresh copy of the data, reads one minibatch, applies the change, and
 * reads to the end. @return : the status of the read (0 if it ended normally). */
static int run_change(change_kind kind, bool line_mode, size_t threads, const char *name,
                      char *path_out, ctf_error *err, uint64_t *digest)
{
    size_t n;
    char *t = change_text(-10, -1, line_mode, &n);
    const char *p = test_write_file(name, t, n);
    free(t);
    snprintf(path_out, 600, "%s", p);
    ctf_config c;
    cfg_file_order(&c, path_out, threads);
    ctf_reader *r = NULL;
    ctf__error_clear(err);
    int rc = ctf_reader_open(&c, &r, err);
    if (rc) return 1000 + rc;
    ctf_index_info info;
    ctf_index_get_info(ctf_reader_index(r), &info);
    if (info.chunks < 6 || info.line_mode != line_mode) {
        ctf_reader_free(r);
        return 2000;
    }
    *digest = 0xcbf29ce484222325ull;
    ctf_minibatch *mb = NULL;
    rc = ctf_reader_next(r, 1, &mb);
    if (rc || !mb) {
        ctf_reader_free(r);
        return 3000;
    }
    *digest = test_digest_minibatch(*digest, mb);
    ctf_minibatch_free(mb);
    if (apply_change(kind, path_out, line_mode) != 0) {
        ctf_reader_free(r);
        return 4000;
    }
    rc = read_rest(r, 1, digest, NULL, err);
    /* A failed reader stays failed. */
    if (rc) {
        mb = (ctf_minibatch *)1;
        if (ctf_reader_next(r, 1, &mb) != rc || mb != NULL) rc = 5000;
    }
    ctf_reader_free(r);
    return rc;
}

/* Checks that `kind` is reported as `code` with a message containing `what`, with 0 and 2
 * threads, in id mode and (when line_mode_too) in line mode. With threads a background load may
 * run in the middle of the change (between the rewrite and the restored mtime, or between its
 * stat and its read) and see another symptom first: then the message need only say "changed". */
static bool expect_change_error(change_kind kind, bool line_mode_too, int code, const char *what)
{
    bool ok = true;
    for (int lm = 0; lm <= (line_mode_too ? 1 : 0); lm++)
        for (size_t threads = 0; threads <= 2; threads += 2) {
            long live0 = atomic_load(&ctf__alloc.live);
            int fds0 = count_fds();
            char path[600];
            ctf_error err;
            uint64_t digest;
            int rc = run_change(kind, lm, threads, lm ? "changed_lines.ctf" : "changed_ids.ctf",
                                path, &err, &digest);
            bool fine = rc == code && err.code == code && strcmp(err.path, path) == 0 &&
                        (strstr(err.message, what) != NULL ||
                         (threads && code == CTF_ECHANGED && strstr(err.message, "changed"))) &&
                        atomic_load(&ctf__alloc.live) == live0 && count_fds() == fds0;
            if (!fine) {
                fprintf(stderr,
                        "  change %d, %s mode, %zu threads: rc %d (%s), error %s %s: %s; "
                        "%ld blocks, %d fds leaked\n",
                        (int)kind, lm ? "line" : "id", threads, rc, ctf_error_name(rc),
                        ctf_error_name(err.code), err.path, err.message,
                        atomic_load(&ctf__alloc.live) - live0, count_fds() - fds0);
                ok = false;
            }
        }
    return ok;
}

/*======================================================================
 * Changed files (rules 2.4)
 *====================================================================*/

TEST(changed_same_size_rewrite_with_old_mtime_is_caught_by_the_content_check)
{
    /* The stat cannot see it (same size, same mtime); the moved line start can. */
    ASSERT(expect_change_error(CH_SHIFT_SAME_SIZE_OLD_MTIME, true, CTF_ECHANGED,
                               "no longer matches the index"));
}

TEST(changed_sequence_key_with_old_mtime_is_caught_by_the_content_check)
{
    ASSERT(expect_change_error(CH_KEY_SAME_SIZE_OLD_MTIME, false, CTF_ECHANGED,
                               "no longer matches the index"));
}

TEST(changed_in_place_with_new_mtime)
{
    ASSERT(expect_change_error(CH_VALUES_NEW_MTIME, true, CTF_ECHANGED, "changed on disk"));
}

TEST(changed_truncated)
{
    ASSERT(expect_change_error(CH_TRUNCATE, true, CTF_ECHANGED, "changed on disk"));
}

TEST(changed_extended)
{
    ASSERT(expect_change_error(CH_EXTEND, true, CTF_ECHANGED, "changed on disk"));
}

TEST(changed_replaced_by_rename)
{
    ASSERT(expect_change_error(CH_RENAME_OTHER, true, CTF_ECHANGED, "changed on disk"));
}

TEST(changed_deleted_while_open_is_an_error_naming_the_file)
{
    ASSERT(expect_change_error(CH_DELETE, true, CTF_EIO, "No such file"));
}

TEST(changed_rename_with_same_size_and_mtime_keeps_the_indexed_data)
{
    /* The reader's descriptor still reads the inode it indexed: it delivers exactly the data of
     * an undisturbed run, never a mix. A new reader sees the new file. */
    for (size_t threads = 0; threads <= 2; threads += 2) {
        long live0 = atomic_load(&ctf__alloc.live);
        int fds0 = count_fds();
        size_t n;
        char *t = change_text(-10, -1, false, &n);
        char path[600];
        snprintf(path, sizeof path, "%s", test_write_file("renamed.ctf", t, n));
        free(t);
        ctf_config c;
        cfg_file_order(&c, path, threads);
        uint64_t base;
        ctf_error err;
        ASSERT_OK(read_file(&c, &base, &err), &err);

        struct stat st;
        ASSERT_EQ(stat(path, &st), 0);
        ctf_reader *r = NULL;
        ASSERT_OK(ctf_reader_open(&c, &r, &err), &err);
        uint64_t d = 0xcbf29ce484222325ull;
        ctf_minibatch *mb = NULL;
        ASSERT_OK(ctf_reader_next(r, 3, &mb), ctf_reader_error(r));
        d = test_digest_minibatch(d, mb);
        ctf_minibatch_free(mb);

        char tmp[700];
        snprintf(tmp, sizeof tmp, "%s.new", path);
        t = change_text(first_line_of(CH_SEQS - 1) - 1, -1, false, &n);
        ASSERT_EQ(write_bytes(tmp, t, n), 0);
        free(t);
        ASSERT_EQ(set_mtime(tmp, &st.st_mtim), 0);
        ASSERT_EQ(rename(tmp, path), 0);

        int rc = read_rest(r, 3, &d, NULL, &err);
        ctf_reader_free(r);
        ASSERT_OK(rc, &err);
        ASSERT_U64_EQ(d, base);

        uint64_t fresh;
        ASSERT_OK(read_file(&c, &fresh, &err), &err);
        ASSERT(fresh != base);
        ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
        ASSERT_EQ(count_fds(), fds0);
    }
}

TEST(changed_file_unchanged_reads_normally)
{
    /* The content check accepts every chunk of an unchanged file, with a BOM, CRLF and blank
     * lines before the first id, in both modes and with chunks of one sequence. */
    static const char *texts[] = {
        "\xEF\xBB\xBF"
        "1 |a 1 2 |b 0:1\r\n1 |a 3 4\r\n22 |a 5 6 |b 1:1\r\n"
        "333 |a 7 8 |b 2:1\r\n4444 |a 9 9 |b 3:1",
        "\n  \n7 |a 1 2 |b 0:1\n7 |a 3 4\n\n8 |a 5 6 |b 1:1\n"
        "18446744073709551615 |a 7 8 |b 2:1\n0 |a 1 1 |b 3:1\n",
        "\xEF\xBB\xBF"
        "|a 1 2 |b 0:1\r\n\r\n|# c\r\n|a 3 4 |b 1:1\r\n|b 1:1 |a 5 6\r\n"
        "|a 7 8 |b 2:2",
        "\n\n|a 1 2 |b 0:1\n3 |a 3 4 |b 1:1\n|# only a comment\n|a 5 6 |b 2:1\n",
    };
    long live0 = atomic_load(&ctf__alloc.live);
    int fds0 = count_fds();
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        for (uint64_t chunk = 1; chunk <= 64; chunk *= 4) {
            const char *p = test_write_str("unchanged.ctf", texts[i]);
            ctf_config c;
            cfg_file_order(&c, p, 0);
            c.chunk_size_bytes = chunk;
            c.max_errors = 100;
            uint64_t d1, d2;
            ctf_error err;
            ASSERT_OK(read_file(&c, &d1, &err), &err);
            c.chunk_size_bytes = 1u << 20;
            ASSERT_OK(read_file(&c, &d2, &err), &err);
            ASSERT_U64_EQ(d1, d2);
        }
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
    ASSERT_EQ(count_fds(), fds0);
}

/*======================================================================
 * I/O faults on every pread of a multi-chunk read
 *====================================================================*/

typedef enum io_fault { IO_EIO, IO_SHORT, IO_EOF } io_fault;

/* Reads a 24-sequence file (about 15 chunks) once per pread, injecting `fault` at that pread.
 * EIO must stop the read with CTF_EIO naming the file; EOF (the file ended under the read) with
 * CTF_ECHANGED naming the file; a short read must be retried and change nothing. */
static bool io_fault_each(io_fault fault, size_t threads, long *count_out)
{
    size_t n;
    char *t = change_text(-10, -1, false, &n);
    char path[600];
    snprintf(path, sizeof path, "%s", test_write_file("io_faults.ctf", t, n));
    free(t);
    ctf_config c;
    cfg_file_order(&c, path, threads);
    long live0 = atomic_load(&ctf__alloc.live);
    int fds0 = count_fds();
    reset_io_hooks();
    atomic_store(&ctf__io_count, 0);
    uint64_t base;
    ctf_error err;
    int rc = read_file(&c, &base, &err);
    long count = atomic_load(&ctf__io_count);
    *count_out = count;
    if (rc) {
        fprintf(stderr, "  baseline failed: %s\n", err.message);
        return false;
    }
    bool ok = true;
    for (long k = 1; k <= count; k++) {
        ctf__error_clear(&err);
        atomic_store(&ctf__io_count, 0);
        atomic_store(fault == IO_EIO     ? &ctf__io_fail_at
                     : fault == IO_SHORT ? &ctf__io_short_at
                                         : &ctf__io_eof_at,
                     k);
        uint64_t d;
        rc = read_file(&c, &d, &err);
        reset_io_hooks();
        bool fine;
        if (fault == IO_SHORT)
            fine = rc == 0 && d == base;
        else if (rc == 0) /* a background load the read never took (threads only) */
            fine = threads > 0 && d == base;
        else
            fine = rc == (fault == IO_EIO ? CTF_EIO : CTF_ECHANGED) && err.code == rc &&
                   strcmp(err.path, path) == 0 &&
                   strstr(err.message, fault == IO_EIO ? "read failed" : "ended early");
        long leaked = atomic_load(&ctf__alloc.live) - live0;
        int fds = count_fds() - fds0;
        if (!fine || leaked || fds) {
            fprintf(stderr,
                    "  fault %d at pread %ld, %zu threads: rc %d (%s) %s: %s; %ld blocks, "
                    "%d fds leaked\n",
                    (int)fault, k, threads, rc, ctf_error_name(rc), err.path, err.message, leaked,
                    fds);
            ok = false;
            atomic_store(&ctf__alloc.live, live0);
        }
    }
    return ok;
}

TEST(io_eio_on_each_pread)
{
    for (size_t threads = 0; threads <= 2; threads += 2) {
        long count = 0;
        bool ok = io_fault_each(IO_EIO, threads, &count);
        ASSERT(ok);
        ASSERT(count >= 10); /* the index scan and every chunk */
    }
}

TEST(io_short_read_on_each_pread_is_retried)
{
    for (size_t threads = 0; threads <= 2; threads += 2) {
        long count = 0;
        bool ok = io_fault_each(IO_SHORT, threads, &count);
        ASSERT(ok);
        ASSERT(count >= 10);
    }
}

TEST(io_file_ends_under_each_pread)
{
    for (size_t threads = 0; threads <= 2; threads += 2) {
        long count = 0;
        bool ok = io_fault_each(IO_EOF, threads, &count);
        ASSERT(ok);
        ASSERT(count >= 10);
    }
}

TEST(io_missing_file_names_it)
{
    char path[600];
    snprintf(path, sizeof path, "%s/does_not_exist.ctf", test_tmpdir());
    ctf_config c;
    cfg_file_order(&c, path, 0);
    ctf_reader *r = NULL;
    ctf_error err;
    long live0 = atomic_load(&ctf__alloc.live);
    int fds0 = count_fds();
    ASSERT_EQ(ctf_reader_open(&c, &r, &err), CTF_EIO);
    ASSERT(r == NULL);
    ASSERT_STR_EQ(err.path, path);
    ASSERT_STR_CONTAINS(err.message, "No such file");
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
    ASSERT_EQ(count_fds(), fds0);
}

/*======================================================================
 * Index cache writer failures (rules 4.3): a warning, the existing cache untouched
 *====================================================================*/

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    size_t got;
    while (b && (got = fread(b + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) b = realloc(b, cap *= 2);
    }
    fclose(f);
    *n = len;
    return b;
}

static int make_dir(const char *p) { return mkdir(p, 0755) == 0 || errno == EEXIST ? 0 : -1; }

typedef enum cache_fault {
    CF_CREATE, /* the temporary file cannot be created */
    CF_NO_SPACE, /* a write fails with ENOSPC */
    CF_SYNC, /* the fsync fails */
    CF_RENAME, /* the rename fails */
    CF_READ_ONLY_DIR, /* the directory is read-only (only when not running as root) */
} cache_fault;

/* Sets up the fault (the atomic writer's test hook, or the directory's mode); @return : 0, 1 to
 * skip, -1 on failure. */
static int cache_fault_setup(cache_fault f, const char *dir)
{
    static const int step[] = {CTF__ATOMIC_STEP_CREATE, CTF__ATOMIC_STEP_WRITE,
                               CTF__ATOMIC_STEP_SYNC, CTF__ATOMIC_STEP_RENAME};
    static const int code[] = {EACCES, ENOSPC, EIO, EXDEV};
    if (f == CF_READ_ONLY_DIR) {
        if (geteuid() == 0) return 1; /* root writes anyway */
        return chmod(dir, 0555);
    }
    atomic_store(&ctf__atomic_fail_errno, code[f]);
    atomic_store(&ctf__atomic_fail_step, step[f]);
    return 0;
}

static void cache_fault_cleanup(cache_fault f, const char *dir)
{
    atomic_store(&ctf__atomic_fail_step, 0);
    if (f == CF_READ_ONLY_DIR) chmod(dir, 0755);
}

/* How many names in dir start with prefix (temporary files left behind). */
static int count_prefixed(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

TEST(cache_write_failures_warn_and_keep_the_existing_cache)
{
    static const char *what[] = {"could not create", "could not write", "could not sync",
                                 "could not rename", "could not create"};
    int ran = 0;
    for (int f = CF_CREATE; f <= CF_READ_ONLY_DIR; f++) {
        char dir[600], data[700], cpath[800];
        snprintf(dir, sizeof dir, "%s/cachefail%d", test_tmpdir(), f);
        ASSERT_EQ(make_dir(dir), 0);
        snprintf(data, sizeof data, "%s/data.ctf", dir);
        size_t n;
        char *t = change_text(-10, -1, false, &n);
        ASSERT_EQ(write_bytes(data, t, n), 0);
        free(t);
        ctf_index_cache_path(data, cpath, sizeof cpath);

        /* Configuration A writes a valid cache. */
        ctf_config a;
        cfg_file_order(&a, data, 0);
        a.cache_index = true;
        uint64_t base_a, base_b, d;
        ctf_error err;
        ASSERT_OK(read_file(&a, &base_a, &err), &err);
        size_t n0;
        char *cache0 = slurp(cpath, &n0);
        ASSERT(cache0 && n0 > 64);

        /* Configuration B shapes the index differently (definesMBSize): it rebuilds the index
         * and tries to replace the cache, which fails. */
        ctf_stream_def sb[2] = {streams_ab[0], streams_ab[1]};
        sb[0].defines_mb_size = true;
        ctf_config b = a;
        b.streams = sb;
        b.cache_index = false;
        ASSERT_OK(read_file(&b, &base_b, &err), &err);
        b.cache_index = true;
        logbook lb = {0};
        b.log = keep_log;
        b.log_user = &lb;

        long live0 = atomic_load(&ctf__alloc.live);
        int fds0 = count_fds();
        int s = cache_fault_setup((cache_fault)f, dir);
        ASSERT(s >= 0);
        if (s == 1) {
            free(cache0);
            continue;
        }
        int rc = read_file(&b, &d, &err);
        cache_fault_cleanup((cache_fault)f, dir);
        size_t n1 = 0;
        char *cache1 = slurp(cpath, &n1);
        bool same = cache1 && n1 == n0 && memcmp(cache0, cache1, n0) == 0;
        free(cache0);
        free(cache1);
        ASSERT_OK(rc, &err);
        ASSERT_U64_EQ(d, base_b); /* reading works */
        ASSERT_EQ(lb.warnings, 1); /* one warning naming the cache */
        ASSERT_EQ(lb.errors, 0);
        ASSERT_STR_EQ(lb.last_warning.path, cpath);
        ASSERT_STR_CONTAINS(lb.last_warning.message, what[f]);
        ASSERT(same); /* the existing cache is untouched */
        ASSERT_EQ(count_prefixed(dir, "data.ctf.ctfidx."), 0); /* no temporary file left */
        ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
        ASSERT_EQ(count_fds(), fds0);

        /* A still loads its cache and reads the same data. */
        ctf_reader *r = NULL;
        ASSERT_OK(ctf_reader_open(&a, &r, &err), &err);
        ctf_index_info info;
        ctf_index_get_info(ctf_reader_index(r), &info);
        ctf_reader_free(r);
        ASSERT(info.from_cache);
        ASSERT_OK(read_file(&a, &d, &err), &err);
        ASSERT_U64_EQ(d, base_a);
        ran++;
    }
    ASSERT(ran >= 4); /* the read-only directory needs a non-root user */
}

TEST(cache_path_taken_by_a_directory_warns)
{
    char dir[600], data[700], cpath[800], keep[900];
    snprintf(dir, sizeof dir, "%s/cachedir", test_tmpdir());
    ASSERT_EQ(make_dir(dir), 0);
    snprintf(data, sizeof data, "%s/data.ctf", dir);
    size_t n;
    char *t = change_text(-10, -1, false, &n);
    ASSERT_EQ(write_bytes(data, t, n), 0);
    free(t);
    ctf_index_cache_path(data, cpath, sizeof cpath);
    ASSERT_EQ(make_dir(cpath), 0);
    snprintf(keep, sizeof keep, "%s/keep", cpath);
    ASSERT_EQ(write_bytes(keep, "x", 1), 0);

    ctf_config c;
    cfg_file_order(&c, data, 2);
    uint64_t base, d;
    ctf_error err;
    ASSERT_OK(read_file(&c, &base, &err), &err);
    c.cache_index = true;
    logbook lb = {0};
    c.log = keep_log;
    c.log_user = &lb;
    long live0 = atomic_load(&ctf__alloc.live);
    int fds0 = count_fds();
    for (int round = 0; round < 2; round++) { /* twice: nothing accumulates */
        lb.warnings = 0;
        ASSERT_OK(read_file(&c, &d, &err), &err);
        ASSERT_U64_EQ(d, base);
        ASSERT_EQ(lb.warnings, 1);
        ASSERT_STR_EQ(lb.last_warning.path, cpath);
        ASSERT_STR_CONTAINS(lb.last_warning.message, "could not rename");
        ASSERT_EQ(count_prefixed(dir, "data.ctf.ctfidx."), 0);
        ASSERT_EQ(access(keep, F_OK), 0);
    }
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
    ASSERT_EQ(count_fds(), fds0);
    unlink(keep);
    rmdir(cpath);
}

/*======================================================================
 * Long run: 1,000 sweeps, randomized, two workers stepping together
 *====================================================================*/

#define LR_SEQS 40

/* 40 one-line sequences of equal length: 10 chunks of 4 sequences. */
static const char *long_run_file(void)
{
    char t[LR_SEQS * 32 + 1];
    size_t n = 0;
    for (int i = 0; i < LR_SEQS; i++)
        n += (size_t)snprintf(t + n, sizeof t - n, "%02d |a %02d %02d |b %d:1\n", i, i, 2 * i,
                              i % 4);
    return test_write_str("long_run.ctf", t);
}

typedef struct long_run_result {
    bool ok;
    uint64_t sweeps;
    ctf_stats st[2]; /* at the end */
    ctf_stats st_early[2]; /* after `early` sweeps */
    long live_early_max; /* ctf__alloc.live at sweep ends, highest over the first `early` */
    long live_max; /* ... and over the whole run */
} long_run_result;

/* Runs `sweeps` sweeps with minibatches of 8 (5 per sweep) through two readers, ranks 0 and 1.
 * Every global minibatch lies inside one sweep; each sweep's keys, over both workers, must be a
 * permutation of 0..39. */
static void long_run(const char *path, size_t threads, uint64_t sweeps, uint64_t early,
                     long_run_result *res)
{
    memset(res, 0, sizeof *res);
    ctf_config c;
    ctf_config_init(&c);
    c.path = path;
    c.streams = streams_ab;
    c.num_streams = 2;
    c.randomize = true;
    c.randomization_seed = 11;
    c.randomization_window = 2;
    c.chunk_size_bytes = 4 * 19;
    c.max_sweeps = sweeps;
    c.num_threads = threads;
    c.prefetch_chunks = threads ? 2 : 0;
    c.num_workers = 2;
    c.log = quiet;
    ctf_reader *r[2] = {NULL, NULL};
    ctf_error err;
    for (size_t w = 0; w < 2; w++) {
        c.worker_rank = w;
        if (ctf_reader_open(&c, &r[w], &err)) {
            fprintf(stderr, "  open: %s\n", err.message);
            goto out;
        }
    }
    {
        ctf_index_info info;
        ctf_index_get_info(ctf_reader_index(r[0]), &info);
        if (info.chunks != 10 || info.sequences != LR_SEQS) {
            fprintf(stderr, "  %llu chunks, %llu sequences\n", (unsigned long long)info.chunks,
                    (unsigned long long)info.sequences);
            goto out;
        }
    }
    unsigned seen[LR_SEQS];
    uint64_t cur_sweep = 0, got_in_sweep = 0;
    memset(seen, 0, sizeof seen);
    for (;;) {
        ctf_minibatch *mb[2] = {NULL, NULL};
        for (size_t w = 0; w < 2; w++)
            if (ctf_reader_next(r[w], 8, &mb[w])) {
                fprintf(stderr, "  next: %s\n", ctf_reader_error(r[w])->message);
                ctf_minibatch_free(mb[0]);
                goto out;
            }
        if (!mb[0] || !mb[1]) {
            bool both = !mb[0] && !mb[1];
            ctf_minibatch_free(mb[0]);
            ctf_minibatch_free(mb[1]);
            if (!both) {
                fprintf(stderr, "  the workers ended at different calls\n");
                goto out;
            }
            break;
        }
        uint64_t pos = ctf_minibatch_position(mb[0]);
        bool bad = pos != ctf_minibatch_position(mb[1]) || pos % 8 != 0 ||
                   (pos - 1) / LR_SEQS != cur_sweep;
        size_t total = 0;
        for (size_t w = 0; w < 2 && !bad; w++) {
            size_t ns = ctf_minibatch_num_sequences(mb[w]);
            const uint64_t *keys = ctf_minibatch_keys(mb[w]);
            total += ns;
            for (size_t i = 0; i < ns; i++) {
                if (keys[i] >= LR_SEQS || seen[keys[i]]++) bad = true;
            }
        }
        ctf_minibatch_free(mb[0]);
        ctf_minibatch_free(mb[1]);
        if (bad || total != 8) {
            fprintf(stderr, "  sweep %llu: not a partition of a permutation at position %llu\n",
                    (unsigned long long)cur_sweep, (unsigned long long)pos);
            goto out;
        }
        got_in_sweep += total;
        if (got_in_sweep == LR_SEQS) {
            for (int i = 0; i < LR_SEQS; i++)
                if (seen[i] != 1) {
                    fprintf(stderr, "  sweep %llu: key %d seen %u times\n",
                            (unsigned long long)cur_sweep, i, seen[i]);
                    goto out;
                }
            memset(seen, 0, sizeof seen);
            got_in_sweep = 0;
            cur_sweep++;
            long live = atomic_load(&ctf__alloc.live);
            if (live > res->live_max) res->live_max = live;
            if (cur_sweep <= early) res->live_early_max = res->live_max;
            if (cur_sweep == early)
                for (size_t w = 0; w < 2; w++) ctf_reader_get_stats(r[w], &res->st_early[w]);
        }
    }
    res->sweeps = cur_sweep;
    for (size_t w = 0; w < 2; w++) ctf_reader_get_stats(r[w], &res->st[w]);
    res->ok = cur_sweep == sweeps && got_in_sweep == 0;
out:
    ctf_reader_free(r[0]);
    ctf_reader_free(r[1]);
}

TEST(long_run_1000_sweeps_two_workers)
{
    const char *path = long_run_file();
    long live0 = atomic_load(&ctf__alloc.live);
    int fds0 = count_fds();
    long_run_result res;
    long_run(path, 0, 1000, 10, &res);
    ASSERT(res.ok);
    ASSERT_U64_EQ(res.sweeps, 1000);
    for (int w = 0; w < 2; w++) {
        /* Memory is flat: the peaks reached in the first 10 sweeps are never exceeded. */
        ASSERT_U64_EQ(res.st[w].chunks_resident_peak, res.st_early[w].chunks_resident_peak);
        ASSERT_U64_EQ(res.st[w].bytes_resident_peak, res.st_early[w].bytes_resident_peak);
        ASSERT(res.st[w].chunks_resident_peak <= 2 * 2 + 1);
        ASSERT(res.st[w].chunks_resident <= res.st[w].chunks_resident_peak);
        ASSERT_U64_EQ(res.st[w].errors, 0);
    }
    /* Every chunk is parsed once per sweep, by the worker that owns it. */
    ASSERT(res.st[0].chunks_loaded + res.st[1].chunks_loaded >= 1000 * 10);
    ASSERT(res.st[0].chunks_loaded + res.st[1].chunks_loaded <= 1000 * 10 + 1000);
    /* The library's live allocations at sweep ends never exceed those of the first sweeps. */
    ASSERT(res.live_max <= res.live_early_max);
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
    ASSERT_EQ(count_fds(), fds0);
}

TEST(long_run_with_prefetch_threads)
{
    const char *path = long_run_file();
    long live0 = atomic_load(&ctf__alloc.live);
    int fds0 = count_fds();
    long_run_result res;
    long_run(path, 2, 150, 10, &res);
    ASSERT(res.ok);
    for (int w = 0; w < 2; w++) {
        /* Thread timing moves the peaks a little: bound them by the window and the prefetch. */
        ASSERT(res.st[w].chunks_resident_peak <= 2 * 2 + 1 + 2);
        ASSERT(res.st[w].bytes_resident_peak <= 3 * res.st_early[w].bytes_resident_peak);
    }
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
    ASSERT_EQ(count_fds(), fds0);
}
