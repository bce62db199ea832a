/*
 * test_private_files.c -- what the library writes on disk is written the one atomic way
 * (ctf__atomic_open in platform.c) and kept private where it is a cache: a symbolic link planted
 * at a temporary file's name (another user who can write the directory) is never followed and
 * the file it names is untouched; a failed step leaves no temporary file and the old file as it
 * was; every user (the index cache, the chunk cache, the two converters) fsyncs its output
 * (the chunk cache excepted, by design) and gets the mode it should. A cache directory that
 * another user owns or can write is not used (docs/chunk-cache.md, "Trust"), whoever owns the
 * entries in it.
 */
#include "common/common.h"
#include "io/io.h"
#include "test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define VICTIM_TEXT "secret: nobody may write this file"

/* An empty directory of the given name under the test directory. */
static char *fresh_dir(const char *name)
{
    char *d = malloc(600);
    snprintf(d, 600, "%s/%s", test_tmpdir(), name);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null; rm -rf '%s'", d, d);
    if (system(cmd) != 0) return d;
    return d;
}

static bool write_text(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0) return false;
    bool ok = write(fd, text, strlen(text)) == (ssize_t)strlen(text);
    close(fd);
    return chmod(path, mode) == 0 && ok;
}

static bool has_text(const char *path, const char *text)
{
    char buf[4096];
    int fd = open(path, O_RDONLY);
    if (fd < 0) return false;
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    return n == (ssize_t)strlen(text) && !memcmp(buf, text, (size_t)n);
}

/* A victim file (0600) whose text and mode must survive: @return whether they did. */
static bool victim_intact(const char *victim)
{
    struct stat st;
    return has_text(victim, VICTIM_TEXT) && stat(victim, &st) == 0 && (st.st_mode & 07777) == 0600;
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 ? st.st_mode : 0;
}

/* How many names in dir start with prefix and are longer than it. */
static int count_prefixed(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    const size_t k = strlen(prefix);
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += !strncmp(e->d_name, prefix, k) && strlen(e->d_name) > k;
    closedir(d);
    return n;
}

/*======================================================================
 * The helper itself
 *====================================================================*/

TEST(atomic_file_modes_links_and_cleanup)
{
    char *dir = fresh_dir("pf_helper");
    ASSERT_EQ(mkdir(dir, 0700), 0);
    char path[700], victim[700], link_at[700];
    snprintf(path, sizeof path, "%s/out", dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(link_at, sizeof link_at, "%s/linked", dir);
    ASSERT(write_text(victim, VICTIM_TEXT, 0600));
    const mode_t um = umask(027);
    ctf__atomic_file af;
    /* A private file is 0600; another gets what the umask leaves of 0666. */
    ASSERT_EQ(ctf__atomic_open(&af, path, ".tmp", CTF__ATOMIC_PRIVATE), 0);
    ASSERT_EQ(ctf__atomic_write(&af, "one", 3), 0);
    ASSERT_EQ(ctf__atomic_commit(&af), 0);
    ASSERT(af.tmp == NULL && af.final == NULL && af.fd == -1);
    ASSERT_EQ(mode_of(path) & 07777, 0600);
    ASSERT(has_text(path, "one"));
    ASSERT_EQ(ctf__atomic_open(&af, path, ".tmp", 0), 0);
    ASSERT(ctf__atomic_stream(&af) != NULL);
    ASSERT_EQ(fputs("two", ctf__atomic_stream(&af)) >= 0, 1);
    ASSERT_EQ(ctf__atomic_commit(&af), 0);
    ASSERT_EQ(mode_of(path) & 07777, 0640);
    ASSERT(has_text(path, "two"));
    umask(um);
    /* A link at the final name is replaced itself; the file it names is not written. */
    ASSERT_EQ(symlink(victim, link_at), 0);
    ASSERT_EQ(ctf__atomic_open(&af, link_at, ".tmp", CTF__ATOMIC_PRIVATE), 0);
    ASSERT_EQ(ctf__atomic_write(&af, "three", 5), 0);
    ASSERT_EQ(ctf__atomic_commit(&af), 0);
    ASSERT(S_ISREG(mode_of(link_at)));
    ASSERT(has_text(link_at, "three"));
    ASSERT(victim_intact(victim));
    /* Each step that fails leaves the old file and no temporary file, and is named. */
    static const int steps[] = {CTF__ATOMIC_STEP_CREATE, CTF__ATOMIC_STEP_WRITE,
                                CTF__ATOMIC_STEP_SYNC, CTF__ATOMIC_STEP_RENAME};
    static const char *names[] = {"create", "write", "sync", "rename"};
    const long live0 = atomic_load(&ctf__alloc.live);
    for (int k = 0; k < 4; k++) {
        atomic_store(&ctf__atomic_fail_errno, ENOSPC);
        atomic_store(&ctf__atomic_fail_step, steps[k]);
        int e = ctf__atomic_open(&af, path, ".tmp", 0);
        if (!e) e = ctf__atomic_write(&af, "four", 4);
        if (!e)
            e = ctf__atomic_commit(&af);
        else
            ctf__atomic_abort(&af);
        atomic_store(&ctf__atomic_fail_step, 0);
        ASSERT_EQ(e, ENOSPC);
        ASSERT_STR_EQ(af.step, names[k]);
        ASSERT(has_text(path, "two"));
        ASSERT_EQ(count_prefixed(dir, "out."), 0);
    }
    ASSERT_EQ(atomic_load(&ctf__alloc.live), live0);
    ctf__atomic_abort(&af); /* safe on an af that holds nothing */
    free(dir);
}

/*======================================================================
 * The index cache
 *====================================================================*/

static const ctf_stream_def S1[] = {{.name = "a", .dim = 2}};

static void index_cfg(ctf_config *c, const char *path)
{
    ctf_config_init(c);
    c->path = path;
    c->streams = S1;
    c->num_streams = 1;
    c->cache_index = true;
}

TEST(index_cache_never_follows_links_planted_at_temporary_names)
{
    char *dir = fresh_dir("pf_index");
    ASSERT_EQ(mkdir(dir, 0755), 0);
    char data[700], victim[700], cpath[800], planted[900];
    snprintf(data, sizeof data, "%s/data.ctf", dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    ASSERT(write_text(data, "1 |a 1 2\n2 |a 3 4\n3 |a 5 6\n", 0644));
    ASSERT(write_text(victim, VICTIM_TEXT, 0600));
    ctf_index_cache_path(data, cpath, sizeof cpath);
    /* The names a scheme of "<cache>.tmp.<pid>" would take, for this process and the next
     * ones (a CLI run started after the links were planted). */
    const long pid = (long)getpid();
    for (long k = 0; k < 64; k++) {
        snprintf(planted, sizeof planted, "%s.tmp.%ld", cpath, pid + k);
        ASSERT_EQ(symlink(victim, planted), 0);
    }
    ctf_config c;
    index_cfg(&c, data);
    ctf_index *idx = NULL;
    ctf_error err;
    const mode_t um = umask(022);
    ASSERT_OK(ctf_index_build(&c, &idx, &err), &err);
    umask(um);
    ctf_index_free(idx);
    ASSERT(victim_intact(victim));
    /* The cache is a regular file of its own, beside the data: the umask's mode. */
    ASSERT(S_ISREG(mode_of(cpath)));
    ASSERT_EQ(mode_of(cpath) & 07777, 0644);
    /* The links are still links (none written through, none renamed), nothing else is left. */
    for (long k = 0; k < 64; k++) {
        snprintf(planted, sizeof planted, "%s.tmp.%ld", cpath, pid + k);
        ASSERT(S_ISLNK(mode_of(planted)));
    }
    ASSERT_EQ(count_prefixed(dir, "data.ctf.ctfidx."), 64);
    /* The cache is used by the next open. */
    ASSERT_OK(ctf_index_build(&c, &idx, &err), &err);
    ctf_index_info info;
    ctf_index_get_info(idx, &info);
    ASSERT(info.from_cache);
    ctf_index_free(idx);
    /* A link planted at the cache's own name: the rebuilt cache replaces the link, never the
     * file it names. */
    ASSERT_EQ(unlink(cpath), 0);
    ASSERT_EQ(symlink(victim, cpath), 0);
    ASSERT_OK(ctf_index_build(&c, &idx, &err), &err);
    ctf_index_free(idx);
    ASSERT(victim_intact(victim));
    ASSERT(S_ISREG(mode_of(cpath)));
    free(dir);
}

/* The attack as it was met: links planted for the next PIDs, then `ctfio index` (as root in
 * the tests' runs) run by another process. */
TEST(cli_index_never_follows_links_planted_for_the_next_pids)
{
    char *dir = fresh_dir("pf_cli");
    ASSERT_EQ(mkdir(dir, 0755), 0);
    char data[700], victim[700], cpath[800], planted[900], cmd[3000];
    snprintf(data, sizeof data, "%s/data.ctf", dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    ASSERT(write_text(data, "1 |x 1\n2 |x 2\n", 0644));
    ASSERT(write_text(victim, VICTIM_TEXT, 0600));
    ctf_index_cache_path(data, cpath, sizeof cpath);
    long last = (long)getpid();
    FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "r");
    if (f) {
        if (fscanf(f, "%ld", &last) != 1) last = (long)getpid();
        fclose(f);
    }
    enum { AHEAD = 256 };
    for (long k = 1; k <= AHEAD; k++) {
        snprintf(planted, sizeof planted, "%s.tmp.%ld", cpath, last + k);
        ASSERT_EQ(symlink(victim, planted), 0);
    }
    const char *cli = getenv("CTFIO_CLI");
    snprintf(cmd, sizeof cmd, "%s index --file %s --input x:1:dense >/dev/null 2>&1",
             cli && cli[0] ? cli : "build/ctfio", data);
    ASSERT_EQ(system(cmd), 0);
    ASSERT(victim_intact(victim));
    ASSERT(S_ISREG(mode_of(cpath)));
    ASSERT_EQ(count_prefixed(dir, "data.ctf.ctfidx."), AHEAD); /* the links, still links */
    free(dir);
}

/* The remote objects' index cache directory: made 0700, refused when another user owns it or
 * anyone else can write it, with a reason for the warning (once per context). */
static bool cache_dir_usable(const char *dir, char *why, size_t cap)
{
    ctf_remote_options o;
    memset(&o, 0, sizeof o);
    o.cache_dir = dir;
    ctf__remote *rem = NULL;
    ctf_error err;
    if (ctf__remote_new(&o, &rem, &err)) return false;
    const ctf__file_id id = {.size = 10, .etag = "\"e\""};
    char buf[1200], again[160];
    bool ok = ctf__io_cache_path(rem, "s3://b/k.ctf", &id, buf, sizeof buf, why, cap);
    /* Judged once: the second call gives the same answer and no second reason. */
    bool ok2 = ctf__io_cache_path(rem, "s3://b/k.ctf", &id, buf, sizeof buf, again, sizeof again);
    ctf__remote_unref(rem);
    return ok && ok2 && !again[0];
}

TEST(index_cache_directory_must_be_private)
{
    char *base = fresh_dir("pf_idxdir");
    char dir[700], why[160];
    snprintf(dir, sizeof dir, "%s/a/b/cache", base);
    /* Made on first use, 0700, whatever the umask. */
    const mode_t um = umask(0);
    ASSERT(cache_dir_usable(dir, why, sizeof why));
    umask(um);
    ASSERT(S_ISDIR(mode_of(dir)));
    ASSERT_EQ(mode_of(dir) & 07777, 0700);
    /* Writable by others (the sticky bit changes nothing), or by the group: not used. */
    static const mode_t modes[] = {0777, 01777, 0770, 0722};
    for (size_t k = 0; k < sizeof modes / sizeof *modes; k++) {
        ASSERT_EQ(chmod(dir, modes[k]), 0);
        ASSERT(!cache_dir_usable(dir, why, sizeof why));
        ASSERT_STR_CONTAINS(why, dir);
        ASSERT_STR_CONTAINS(why, "writable by");
    }
    ASSERT_EQ(chmod(dir, 0755), 0);
    ASSERT(cache_dir_usable(dir, why, sizeof why));
    if (geteuid() == 0) { /* only root can give a directory away */
        ASSERT_EQ(chown(dir, 12345, 12345), 0);
        ASSERT(!cache_dir_usable(dir, why, sizeof why));
        ASSERT_STR_CONTAINS(why, "owned by another user");
    } else {
        fprintf(stderr, "  (skipped: a directory owned by another user needs root)\n");
    }
    free(base);
}

/*======================================================================
 * The chunk cache
 *====================================================================*/

static const ctf_stream_def S2[] = {{.name = "x", .dim = 3}};

static const char *chunk_data(void)
{
    char text[200 * 40];
    size_t n = 0;
    for (int i = 0; i < 200; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "%d |x %d.5 %d %d\n", i, i, 2 * i, 8);
    return test_write_str("pf_chunks.ctf", text);
}

static void chunk_cfg(ctf_config *c, const char *path, const char *dir, test_log *lg)
{
    ctf_config_init(c);
    c->path = path;
    c->streams = S2;
    c->num_streams = 1;
    c->chunk_size_bytes = 512;
    c->max_sweeps = 1;
    c->randomization_window = 0;
    c->chunk_cache = dir;
    c->log = test_log_capture;
    memset(lg, 0, sizeof *lg);
    c->log_user = lg;
}

/* Reads everything; @return the sum of every value (-1 on failure), *hits the cache's hits,
 * *misses (when not NULL) its misses. A chunk may be loaded twice in a run (the look-ahead's
 * timing decides): on a cache that starts empty, one miss and one hit. */
static double chunk_run_m(const ctf_config *c, uint64_t *hits, uint64_t *misses)
{
    ctf_reader *r = NULL;
    ctf_error e;
    if (ctf_reader_open(c, &r, &e)) return -1;
    double sum = 0;
    for (;;) {
        ctf_minibatch *mb;
        if (ctf_reader_next(r, 37, &mb)) {
            sum = -1;
            break;
        }
        if (!mb) break;
        ctf_stream_view v;
        if (ctf_minibatch_stream(mb, 0, &v) == 0)
            for (size_t i = 0; i < v.num_samples * v.dim; i++) sum += ((const float *)v.values)[i];
        ctf_minibatch_free(mb);
    }
    ctf_perf p;
    ctf_reader_get_perf(r, &p, sizeof p);
    *hits = p.chunk_cache_hits;
    if (misses) *misses = p.chunk_cache_misses;
    ctf_reader_free(r);
    return sum;
}

static double chunk_run(const ctf_config *c, uint64_t *hits) { return chunk_run_m(c, hits, NULL); }

/* The entries (*.chunk) in dir, their names in names (up to max). */
static size_t chunk_entries(const char *dir, char names[][700], size_t max)
{
    size_t n = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const size_t k = strlen(e->d_name);
        if (k < 6 || strcmp(e->d_name + k - 6, ".chunk")) continue;
        if (n < max) snprintf(names[n], 700, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

TEST(chunk_cache_is_private_and_never_follows_links)
{
    char *base = fresh_dir("pf_cc");
    ASSERT_EQ(mkdir(base, 0755), 0);
    char dir[700], victim[700];
    snprintf(dir, sizeof dir, "%s/cache", base);
    snprintf(victim, sizeof victim, "%s/victim", base);
    ASSERT(write_text(victim, VICTIM_TEXT, 0600));
    const char *data = chunk_data();
    ctf_config c;
    test_log lg;
    chunk_cfg(&c, data, dir, &lg);
    uint64_t hits, m;
    const mode_t um = umask(0);
    const double want = chunk_run_m(&c, &hits, &m);
    umask(um);
    ASSERT(want > 0);
    ASSERT_EQ(lg.warnings, 0);
    /* The directory it made is 0700, its entries 0600 (whatever the umask). */
    ASSERT_EQ(mode_of(dir) & 07777, 0700);
    static char names[64][700];
    const size_t n = chunk_entries(dir, names, 64);
    ASSERT(n >= 4 && n <= 64);
    for (size_t i = 0; i < n; i++) ASSERT_EQ(mode_of(names[i]) & 07777, 0600);
    /* Every entry replaced by a link to the victim: read as misses, stored again as files of
     * their own; the victim is untouched. */
    for (size_t i = 0; i < n; i++) {
        ASSERT_EQ(unlink(names[i]), 0);
        ASSERT_EQ(symlink(victim, names[i]), 0);
    }
    ASSERT(chunk_run_m(&c, &hits, &m) == want);
    ASSERT(m >= n); /* every entry missed (a chunk loaded twice may hit the second time) */
    ASSERT(victim_intact(victim));
    for (size_t i = 0; i < n; i++) ASSERT(S_ISREG(mode_of(names[i])));
    ASSERT(chunk_run_m(&c, &hits, &m) == want);
    ASSERT(hits >= n);
    ASSERT_U64_EQ(m, 0);
    static char all[64][700];
    ASSERT_EQ(chunk_entries(dir, all, 64), n); /* and nothing else: no temporary file left */
    ASSERT_EQ(count_prefixed(dir, ""), (int)n + 2); /* with "." and ".." */
    free(base);
}

/* A cache another user could have written: a warning through the log sink, and neither read
 * nor written. */
static void expect_not_used(const ctf_config *c, const test_log *lg, const char *dir, double want,
                            size_t n, const char *why)
{
    uint64_t hits = 1;
    ASSERT(chunk_run(c, &hits) == want);
    ASSERT_U64_EQ(hits, 0);
    ASSERT_EQ(lg->warnings, 1);
    ASSERT_STR_CONTAINS(lg->text, dir);
    ASSERT_STR_CONTAINS(lg->text, why);
    ASSERT_STR_CONTAINS(lg->text, "not used");
    static char names[64][700];
    ASSERT_EQ(chunk_entries(dir, names, 64), n); /* nothing stored either */
}

TEST(chunk_cache_in_a_directory_others_can_write_is_not_used)
{
    char *dir = fresh_dir("pf_cc_shared");
    const char *data = chunk_data();
    ctf_config c;
    test_log lg;
    chunk_cfg(&c, data, dir, &lg);
    uint64_t hits;
    const double want = chunk_run(&c, &hits);
    ASSERT(want > 0);
    static char names[64][700];
    const size_t n = chunk_entries(dir, names, 64);
    ASSERT(n >= 4);
    /* One entry forged: a value changed and the checksum recomputed would be served as is
     * (the checksum is no key); the directory's mode is what keeps forgers out. */
    static const mode_t modes[] = {0777, 01777, 0775};
    static const char *why[] = {"writable by other users", "writable by other users",
                                "writable by its group"};
    for (size_t k = 0; k < 3; k++) {
        ASSERT_EQ(chmod(dir, modes[k]), 0);
        memset(&lg, 0, sizeof lg);
        expect_not_used(&c, &lg, dir, want, n, why[k]);
    }
    ASSERT_EQ(chmod(dir, 0700), 0);
    uint64_t m;
    ASSERT(chunk_run_m(&c, &hits, &m) == want);
    ASSERT(hits >= n);
    ASSERT_U64_EQ(m, 0);
    free(dir);
}

TEST(chunk_cache_owned_by_another_user_is_not_used)
{
    if (geteuid() != 0) {
        fprintf(stderr, "  (skipped: a directory owned by another user needs root)\n");
        return;
    }
    char *dir = fresh_dir("pf_cc_theirs");
    const char *data = chunk_data();
    ctf_config c;
    test_log lg;
    chunk_cfg(&c, data, dir, &lg);
    uint64_t hits, m;
    const double want = chunk_run_m(&c, &hits, &m);
    ASSERT(want > 0);
    static char names[64][700];
    const size_t n = chunk_entries(dir, names, 64);
    ASSERT(n >= 4);
    /* Entries another user made in our private directory are misses (and are replaced). */
    for (size_t i = 0; i < n; i++) ASSERT_EQ(chown(names[i], 12345, 12345), 0);
    ASSERT(chunk_run_m(&c, &hits, &m) == want);
    ASSERT(m >= n); /* every entry missed (a chunk loaded twice may hit the second time) */
    ASSERT(chunk_run_m(&c, &hits, &m) == want);
    ASSERT(hits >= n);
    ASSERT_U64_EQ(m, 0);
    /* A directory another user owns, even one only its owner can write: not used. */
    ASSERT_EQ(chown(dir, 12345, 12345), 0);
    ASSERT_EQ(chmod(dir, 0755), 0);
    memset(&lg, 0, sizeof lg);
    expect_not_used(&c, &lg, dir, want, n, "owned by another user");
    ASSERT_EQ(chmod(dir, 0777), 0);
    memset(&lg, 0, sizeof lg);
    expect_not_used(&c, &lg, dir, want, n, "owned by another user");
    free(dir);
}

/*======================================================================
 * The converters
 *====================================================================*/

TEST(convert_output_is_synced_and_written_only_through_its_own_file)
{
    char *dir = fresh_dir("pf_conv");
    ASSERT_EQ(mkdir(dir, 0755), 0);
    char in[700], out[700], victim[700], planted[900];
    snprintf(in, sizeof in, "%s/in.svm", dir);
    snprintf(out, sizeof out, "%s/out.ctf", dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    ASSERT(write_text(in, "1 1:0.5 3:2\n0 2:1\n", 0644));
    ASSERT(write_text(out, "old output\n", 0644));
    ASSERT(write_text(victim, VICTIM_TEXT, 0600));
    snprintf(planted, sizeof planted, "%s.part", out);
    ASSERT_EQ(symlink(victim, planted), 0);
    ctf_convert_options o;
    memset(&o, 0, sizeof o);
    o.format = CTF_CONVERT_LIBSVM;
    o.index_base = -1;
    ctf_convert_result r;
    ctf_error err;
    /* The output reaches the disk before it replaces the old one: a failed fsync fails the
     * conversion and keeps the old output. */
    atomic_store(&ctf__atomic_fail_errno, EIO);
    atomic_store(&ctf__atomic_fail_step, CTF__ATOMIC_STEP_SYNC);
    int rc = ctf_convert_file(in, out, &o, &r, &err);
    atomic_store(&ctf__atomic_fail_step, 0);
    ASSERT_EQ(rc, CTF_EIO);
    ASSERT_STR_CONTAINS(err.message, "cannot sync");
    ASSERT(has_text(out, "old output\n"));
    ASSERT_EQ(count_prefixed(dir, "out.ctf."), 1); /* the planted link alone */
    /* Done: the mode the umask gives, the link and its victim untouched. */
    const mode_t um = umask(027);
    ASSERT_OK(ctf_convert_file(in, out, &o, &r, &err), &err);
    umask(um);
    ASSERT(!has_text(out, "old output\n"));
    ASSERT_EQ(mode_of(out) & 07777, 0640);
    ASSERT(S_ISLNK(mode_of(planted)));
    ASSERT(victim_intact(victim));
    ASSERT_EQ(count_prefixed(dir, "out.ctf."), 1);
    free(dir);
}

TEST(cbf_write_output_is_synced_and_written_only_through_its_own_file)
{
    char *dir = fresh_dir("pf_cbf");
    ASSERT_EQ(mkdir(dir, 0755), 0);
    char in[700], out[700], victim[700], planted[900];
    snprintf(in, sizeof in, "%s/in.ctf", dir);
    snprintf(out, sizeof out, "%s/out.bin", dir);
    snprintf(victim, sizeof victim, "%s/victim", dir);
    ASSERT(write_text(in, "1 |a 1 2\n2 |a 3 4\n", 0644));
    ASSERT(write_text(out, "old output\n", 0644));
    ASSERT(write_text(victim, VICTIM_TEXT, 0600));
    snprintf(planted, sizeof planted, "%s.part", out);
    ASSERT_EQ(symlink(victim, planted), 0);
    ctf_config c;
    ctf_config_init(&c);
    c.path = in;
    c.streams = S1;
    c.num_streams = 1;
    ctf_cbf_write_result r;
    ctf_error err;
    atomic_store(&ctf__atomic_fail_errno, EIO);
    atomic_store(&ctf__atomic_fail_step, CTF__ATOMIC_STEP_SYNC);
    int rc = ctf_cbf_write(&c, out, 1 << 20, CTF_FLOAT32, &r, &err);
    atomic_store(&ctf__atomic_fail_step, 0);
    ASSERT_EQ(rc, CTF_EIO);
    ASSERT_STR_CONTAINS(err.message, "cannot sync");
    ASSERT(has_text(out, "old output\n"));
    ASSERT_EQ(count_prefixed(dir, "out.bin."), 1);
    const mode_t um = umask(022);
    ASSERT_OK(ctf_cbf_write(&c, out, 1 << 20, CTF_FLOAT32, &r, &err), &err);
    umask(um);
    ASSERT(!has_text(out, "old output\n"));
    ASSERT_EQ(mode_of(out) & 07777, 0644);
    ASSERT(S_ISLNK(mode_of(planted)));
    ASSERT(victim_intact(victim));
    ASSERT_EQ(count_prefixed(dir, "out.bin."), 1);
    free(dir);
}
