/*
 * platform.c -- the POSIX layer: file identity (size, nanosecond mtime, inode), whole reads at an
 * offset, the one way of writing a file atomically (a fresh temporary file that no link can
 * redirect, fsync, rename), the trust check of cache directories, the monotonic clock of the
 * stage counters, and (test builds only) the I/O fault-injection counters of the reliability
 * tests. Threads are not wrapped here: the files that run them (reader/prefetch.c,
 * reader/ahead.c, io/http.c) use pthreads directly.
 */

#include "common/common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef CTF_TESTING
atomic_long ctf__io_fail_at;
atomic_long ctf__io_count;
/* Two more test hooks on the same count: the pread with count ctf__io_short_at returns at most
 * half of what was asked (a legal short read, which must be retried transparently); the one
 * with count ctf__io_eof_at returns 0 (the file ended under the read). */
atomic_long ctf__io_short_at;
atomic_long ctf__io_eof_at;
void (*_Atomic ctf__io_after_read)(int fd, uint64_t offset, size_t n);

/* One pread, or the fault the hooks ask for at this count. */
static ssize_t hooked_pread(int fd, void *p, size_t n, uint64_t off)
{
    long k = atomic_fetch_add(&ctf__io_count, 1) + 1;
    long at = atomic_load(&ctf__io_fail_at);
    if (at > 0 && k == at) {
        errno = EIO;
        return -1;
    }
    if (k == atomic_load(&ctf__io_eof_at)) return 0;
    size_t ask = k == atomic_load(&ctf__io_short_at) && n > 1 ? n / 2 : n;
    ssize_t got = pread(fd, p, ask, (off_t)off);
    void (*after)(int, uint64_t, size_t) = atomic_load(&ctf__io_after_read);
    if (got > 0 && after) after(fd, off, (size_t)got);
    return got;
}
#define PREAD hooked_pread

#else
#define PREAD(fd, p, n, off) pread((fd), (p), (n), (off_t)(off))
#endif

uint64_t ctf__now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

int ctf__file_stat(const char *path, ctf__file_id *id, ctf_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return ctf__fail(err, CTF_EIO, (ctf__where){path, 0, 0, -1}, "cannot stat file: %s",
                         strerror(errno));
    if (!S_ISREG(st.st_mode))
        return ctf__fail(err, CTF_EIO, (ctf__where){path, 0, 0, -1}, "not a regular file");
    id->size = (uint64_t)st.st_size;
    id->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    id->inode = (uint64_t)st.st_ino;
    return 0;
}

/* Opens for reading without blocking (a FIFO or a device at the path must not hang the open)
 * and keeps the descriptor only when it is a regular file. @return : fd, or -1 with errno set
 * (EINVAL for a file that is not regular). */
static int open_regular(const char *path, int flags)
{
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        errno = S_ISREG(st.st_mode) ? e : EINVAL;
        return -1;
    }
    /* Regular files ignore O_NONBLOCK; clear it anyway so that later reads are plain reads. */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int ctf__file_unchanged(const char *path, const ctf__file_id *was, const ctf__file_id *now,
                        uint64_t offset, ctf_error *err)
{
    if (now->size == was->size && now->mtime_ns == was->mtime_ns) return 0;
    return ctf__fail(err, CTF_ECHANGED, (ctf__where){path, 0, 0, (int64_t)offset},
                     "the data file changed on disk since it was indexed (size %llu -> %llu "
                     "bytes, or a new modification time); reopen the reader",
                     (unsigned long long)was->size, (unsigned long long)now->size);
}

int ctf__file_open(const char *path, ctf_error *err)
{
    int fd = open_regular(path, O_RDONLY);
    if (fd < 0)
        return ctf__fail(err, CTF_EIO, (ctf__where){path, 0, 0, -1}, "cannot open file: %s",
                         errno == EINVAL ? "not a regular file" : strerror(errno));
    return fd;
}

FILE *ctf__fopen_regular(const char *path)
{
    int fd = open_regular(path, O_RDONLY);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

void ctf__file_close(int fd)
{
    if (fd >= 0) close(fd);
}

int ctf__file_pread(int fd, const char *path, void *buf, size_t n, uint64_t offset, ctf_error *err)
{
    char *p = buf;
    uint64_t off = offset;
    while (n > 0) {
        ssize_t got = PREAD(fd, p, n, off);
        if (got < 0) {
            if (errno == EINTR) continue;
            return ctf__fail(err, CTF_EIO, (ctf__where){path, 0, 0, (int64_t)off},
                             "read failed: %s", strerror(errno));
        }
        if (got == 0)
            return ctf__fail(err, CTF_ECHANGED, (ctf__where){path, 0, 0, (int64_t)off},
                             "file ended early (expected %zu more bytes): the file changed "
                             "since it was indexed",
                             n);
        p += got;
        n -= (size_t)got;
        off += (uint64_t)got;
    }
    return 0;
}

/*======================================================================
 * Writing a file atomically
 *====================================================================*/

#ifdef CTF_TESTING
atomic_int ctf__atomic_fail_step;
atomic_int ctf__atomic_fail_errno;

/* Whether the test hook fails this step (errno set when it does). */
static bool atomic_fault(int step)
{
    if (atomic_load(&ctf__atomic_fail_step) != step) return false;
    errno = atomic_load(&ctf__atomic_fail_errno);
    return true;
}
#else
#define atomic_fault(step) false
#endif

/* 64 bits that another process cannot guess: the kernel's random bytes, or (should getrandom
 * be refused) the clock, the pid and a counter, which O_EXCL still makes safe, only guessable. */
static uint64_t random_bits(void)
{
    static atomic_uint_least64_t counter;
    uint64_t r = 0;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) == (ssize_t)sizeof r) return r;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)getpid() << 40;
    r ^= atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull;
    return ctf__hash_bytes(r, &ts, sizeof ts);
}

int ctf__atomic_open(ctf__atomic_file *af, const char *path, const char *suffix, int flags)
{
    *af = (ctf__atomic_file){.fd = -1, .flags = flags, .step = "create"};
    const size_t n = strlen(path) + strlen(suffix) + 48;
    af->final = ctf__strdup(path);
    af->tmp = CTF_MALLOC(n);
    if (!af->final || !af->tmp) {
        ctf__atomic_abort(af);
        af->step = "create";
        return ENOMEM;
    }
    /* Never through a link (O_NOFOLLOW) and never a file that exists (O_EXCL: a link planted at
     * the name, even one to a missing file, is EEXIST too), so a name another user guessed is
     * only another try, and 100 taken names in a row are someone trying to stop us. */
    const int oflags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    const mode_t mode = (flags & CTF__ATOMIC_PRIVATE) ? 0600 : 0666;
    int e = EEXIST;
    for (int attempt = 0; attempt < 100 && e == EEXIST; attempt++) {
        snprintf(af->tmp, n, "%s.%ld-%016llx%s", path, (long)getpid(),
                 (unsigned long long)random_bits(), suffix);
        if (atomic_fault(CTF__ATOMIC_STEP_CREATE)) {
            e = errno;
            break;
        }
        af->fd = open(af->tmp, oflags, mode);
        e = af->fd < 0 ? errno : 0;
    }
    if (e) {
        CTF_FREE(af->tmp);
        af->tmp = NULL; /* nothing of ours to remove */
        ctf__atomic_abort(af);
        af->step = "create";
        return e;
    }
    /* 0600 whatever the umask: open's mode is masked by it, which could leave out the owner's
     * own bits but never adds any for group or others. */
    if (flags & CTF__ATOMIC_PRIVATE) (void)fchmod(af->fd, 0600);
    return 0;
}

FILE *ctf__atomic_stream(ctf__atomic_file *af)
{
    if (af->f) return af->f;
    if (af->fd < 0) return NULL;
    af->f = fdopen(af->fd, "wb");
    return af->f;
}

int ctf__atomic_write(ctf__atomic_file *af, const void *data, size_t n)
{
    const unsigned char *p = data;
    af->step = "write";
    if (atomic_fault(CTF__ATOMIC_STEP_WRITE)) return errno;
    while (n) {
        ssize_t w = write(af->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? errno : ENOSPC;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int ctf__atomic_commit(ctf__atomic_file *af)
{
    int e = 0;
    af->step = "write";
    /* ferror: a write through the stream that failed earlier, whose caller did not look. */
    if (af->f && (fflush(af->f) != 0 || ferror(af->f))) e = errno ? errno : EIO;
    if (!e && atomic_fault(CTF__ATOMIC_STEP_WRITE)) e = errno;
    if (!e && !(af->flags & CTF__ATOMIC_NO_SYNC)) {
        af->step = "sync";
        if (atomic_fault(CTF__ATOMIC_STEP_SYNC) || fsync(af->fd) != 0) e = errno;
    }
    /* close reports what a network file system kept back until then. */
    const int c = af->f ? fclose(af->f) : close(af->fd);
    af->f = NULL;
    af->fd = -1;
    if (!e && c != 0) {
        af->step = "write";
        e = errno ? errno : EIO;
    }
    if (!e) {
        af->step = "rename";
        if (atomic_fault(CTF__ATOMIC_STEP_RENAME) || rename(af->tmp, af->final) != 0)
            e = errno;
        else {
            CTF_FREE(af->tmp); /* renamed: nothing to remove */
            af->tmp = NULL;
        }
    }
    const char *step = af->step;
    ctf__atomic_abort(af);
    af->step = e ? step : NULL;
    return e;
}

void ctf__atomic_abort(ctf__atomic_file *af)
{
    if (af->f)
        fclose(af->f);
    else if (af->fd >= 0)
        close(af->fd);
    if (af->tmp) unlink(af->tmp);
    CTF_FREE(af->tmp);
    CTF_FREE(af->final);
    const char *step = af->step;
    *af = (ctf__atomic_file){.fd = -1, .step = step};
}

/*======================================================================
 * Private directories
 *====================================================================*/

int ctf__private_dir(const char *dir, bool make, char *why, size_t cap)
{
    why[0] = '\0';
    char p[CTF_ERROR_PATH_MAX];
    const size_t n = strlen(dir);
    if (n == 0 || n >= sizeof p) {
        snprintf(why, cap, "%s", strerror(ENAMETOOLONG));
        return ENAMETOOLONG;
    }
    memcpy(p, dir, n + 1);
    for (size_t k = n; k > 1 && p[k - 1] == '/'; k--) p[k - 1] = '\0';
    const size_t len = strlen(p);
    /* mkdir -p: the parents as a user's mkdir -p would make them (0777 less the umask), the
     * directory itself 0700. */
    for (size_t i = 1; make && i <= len; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        const char c = p[i];
        p[i] = '\0';
        if (mkdir(p, c ? 0777 : 0700) != 0 && errno != EEXIST) {
            const int e = errno;
            snprintf(why, cap, "cannot be made (%s)", strerror(e));
            return e;
        }
        p[i] = c;
    }
    /* stat, not lstat: a link named in a configuration is the user's choice; what is judged is
     * the directory it leads to. */
    struct stat st;
    if (stat(p, &st) != 0) {
        const int e = errno;
        snprintf(why, cap, "%s", strerror(e));
        return e;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, cap, "not a directory");
        return ENOTDIR;
    }
    if (st.st_uid != geteuid()) {
        snprintf(why, cap, "owned by another user (uid %ld, we are %ld)", (long)st.st_uid,
                 (long)geteuid());
        return EPERM;
    }
    /* The sticky bit protects entries from being removed or renamed by others, not from being
     * created: a writer other than the owner can still plant a file at a name not yet taken. */
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, cap, "writable by %s (mode %04o); chmod go-w it",
                 (st.st_mode & S_IWOTH) ? "other users" : "its group",
                 (unsigned)(st.st_mode & 07777));
        return EPERM;
    }
    return 0;
}
