/*
 * io.c -- the seam's dispatch and its local backend. A local path reads through one descriptor
 * with pread (threads may share it); a URL goes to the remote backend (http.c). The test
 * builds' I/O fault hooks sit on the local reads, as they always did.
 */

#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ctf__io {
    char *path;             /* as opened (a URL for a remote object) */
    int fd;                 /* local: the descriptor; remote: -1 */
    ctf__remote *rem;       /* remote: the shared context (a reference) */
    ctf__file_id id;        /* remote: the identity reads must find (ETag, size) */
};

bool ctf__io_is_remote(const char *path)
{
    return path && (!strncmp(path, "s3://", 5) || !strncmp(path, "http://", 7) ||
                    !strncmp(path, "https://", 8));
}

bool ctf__io_is_pattern(const char *path)
{
    if (!path) return false;
    /* In an http(s) URL '?' begins the query (a presigned URL's signature), not a pattern. */
    if (!strncmp(path, "http://", 7) || !strncmp(path, "https://", 8)) {
        const size_t n = strcspn(path, "?#");
        for (size_t i = 0; i < n; i++)
            if (path[i] == '*' || path[i] == '[') return true;
        return false;
    }
    return strpbrk(path, "*?[") != NULL;
}

int ctf__io_stat(ctf__remote *rem, const char *path, ctf__file_id *id, ctf_error *err)
{
    if (ctf__io_is_remote(path)) {
        if (!rem)
            return ctf__fail(err, CTF_EINVAL, (ctf__where){path, 0, 0, -1},
                             "a remote path needs the remote options of a reader");
        return ctf__http_stat(rem, path, id, err);
    }
    memset(id, 0, sizeof *id);
    return ctf__file_stat(path, id, err);
}

int ctf__io_open(ctf__remote *rem, const char *path, const ctf__file_id *id, ctf__io **out,
                 ctf_error *err)
{
    *out = NULL;
    const bool remote = ctf__io_is_remote(path);
    if (remote && !rem)
        return ctf__fail(err, CTF_EINVAL, (ctf__where){path, 0, 0, -1},
                         "a remote path needs the remote options of a reader");
    ctf__io *h = CTF_CALLOC(1, sizeof *h);
    if (!h || !(h->path = ctf__strdup(path))) {
        CTF_FREE(h);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory opening %s", path);
    }
    h->fd = -1;
    if (remote) {
        /* Nothing to open: each read is a request of its own, on a pooled connection. */
        if (id)
            h->id = *id;
        else {
            int rc = ctf__http_stat(rem, path, &h->id, err);
            if (rc) {
                CTF_FREE(h->path);
                CTF_FREE(h);
                return rc;
            }
        }
        h->rem = ctf__remote_ref(rem);
    } else {
        int fd = ctf__file_open(path, err);
        if (fd < 0) {
            CTF_FREE(h->path);
            CTF_FREE(h);
            return fd;
        }
        h->fd = fd;
    }
    *out = h;
    return 0;
}

int ctf__io_read(ctf__io *h, void *buf, size_t n, uint64_t offset, ctf_error *err)
{
    if (h->rem) return ctf__http_read(h->rem, h->path, h->id.etag, buf, n, offset, h->id.size, err);
    return ctf__file_pread(h->fd, h->path, buf, n, offset, err);
}


void ctf__io_close(ctf__io *h)
{
    if (!h) return;
    if (h->fd >= 0) ctf__file_close(h->fd);
    ctf__remote_unref(h->rem);
    CTF_FREE(h->path);
    CTF_FREE(h);
}

int ctf__io_glob(ctf__remote *rem, const char *pattern, char ***out, size_t *n, ctf_error *err)
{
    if (!rem)
        return ctf__fail(err, CTF_EINVAL, (ctf__where){pattern, 0, 0, -1},
                         "a remote pattern needs the remote options of a reader");
    return ctf__http_glob(rem, pattern, out, n, err);
}

size_t ctf__io_scan_block(const ctf__io *h, size_t local_block)
{
    /* A request costs a round trip; 8 MiB keeps the indexing pass streaming at the network's
     * speed while its memory stays a few blocks. */
    return h->rem ? (size_t)8 << 20 : local_block;
}
