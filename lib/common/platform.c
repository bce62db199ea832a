/*
 * platform.c -- the POSIX layer: file identity (size, nanosecond mtime, inode), whole reads at an
 * offset, the monotonic clock of the stage counters, and (test builds only) the I/O
 * fault-injection counters of the reliability tests. Threads use pthreads directly through
 * platform.h-style wrappers in prefetch.c.
 */

#include "common/common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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

/* Opens without blocking (a FIFO or a device at the path must not hang the open) and, for
 * reading, keeps the descriptor only when it is a regular file. A write goes wherever the path
 * leads (a full device fails the write, as a full disk would). @return : fd, or -1 with errno
 * set (EINVAL for a file that is not regular). */
static int open_regular(const char *path, int flags)
{
    int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC, 0666);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || (!S_ISREG(st.st_mode) && (flags & O_ACCMODE) == O_RDONLY)) {
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

FILE *ctf__fopen_regular(const char *path, bool for_write)
{
    int fd = open_regular(path, for_write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, for_write ? "wb" : "rb");
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
