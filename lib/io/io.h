/*
 * io.h -- the I/O seam: every byte the core reads from a data file comes through here. A path
 * is a local file or a URL (s3://BUCKET/KEY, http://..., https://...); the core sees the same
 * five operations for both (stat, open, read a range, close, expand a pattern) and never
 * learns which backend served them. The remote backend (http.c, on libcurl) shares one context
 * per deserializer: its options, its idle connections and its request counters.
 */
#ifndef CTF_IO_H
#define CTF_IO_H

#include "common/common.h"

#include <stdbool.h>
#include <stdint.h>

/*======================================================================
 * The seam (io.c: dispatch and the local backend)
 *====================================================================*/

/* An open byte source; reads may run on several threads at once. */
typedef struct ctf__io ctf__io;
/* The remote backend's shared context (reference counted; NULL for local-only work). */
typedef struct ctf__remote ctf__remote;

/* True for s3://, http:// and https:// paths. */
bool ctf__io_is_remote(const char *path);

/* True when path holds glob characters (*, ?, [): in an http(s) URL only before its query,
 * so that a presigned URL is a path. */
bool ctf__io_is_pattern(const char *path);

/* The identity of path now: size and a fingerprint (local: mtime and inode; remote: the ETag,
 * whose hash also fills mtime_ns so that comparisons of identities need not know the
 * backend). rem may be NULL for a local path. @return : 0 or CTF_EIO/CTF_EINVAL naming path. */
int ctf__io_stat(ctf__remote *rem, const char *path, ctf__file_id *id, ctf_error *err);

/* Opens path for range reads. id: the identity the caller indexed (remote reads then demand
 * that ETag), or NULL. @return : 0 and *out, or CTF_EIO/CTF_ENOMEM with err filled. */
int ctf__io_open(ctf__remote *rem, const char *path, const ctf__file_id *id, ctf__io **out,
                 ctf_error *err);

/* Reads exactly n bytes at offset. A read past the end, or of a remote object replaced since
 * its identity was taken, is CTF_ECHANGED. @return : 0, CTF_EIO or CTF_ECHANGED. */
int ctf__io_read(ctf__io *h, void *buf, size_t n, uint64_t offset, ctf_error *err);

/* NULL is a no-op. */
void ctf__io_close(ctf__io *h);

/* The objects a remote pattern (glob characters in the key) matches, byte-wise sorted, as
 * full URLs; strings and array are freed with ctf__free_paths. None matching is CTF_EIO. */
int ctf__io_glob(ctf__remote *rem, const char *pattern, char ***out, size_t *n, ctf_error *err);

/* The index cache file of a remote object, in the cache directory and keyed by URL, ETag and
 * size. The directory is made (0700) if missing and must be private (ctf__private_dir).
 * @return : false when no cache is kept: no cache directory was given, or it is not usable;
 *           then why (why_cap bytes) says why, once per context (empty on later calls). */
bool ctf__io_cache_path(const ctf__remote *rem, const char *url, const ctf__file_id *id, char *buf,
                        size_t cap, char *why, size_t why_cap);

/* Preferred block for a sequential scan: larger for a remote path (fewer requests). */
size_t ctf__io_scan_block(const ctf__io *h, size_t local_block);

/*======================================================================
 * The remote context (http.c)
 *====================================================================*/

/* Creates a context from the caller's options (copied). Works without libcurl too: a
 * remote path then fails at stat with a message saying the build lacks it. */
int ctf__remote_new(const ctf_remote_options *opt, ctf__remote **out, ctf_error *err);
ctf__remote *ctf__remote_ref(ctf__remote *rem);
void ctf__remote_unref(ctf__remote *rem);
/* The counters so far (requests, retries, bytes). */
void ctf__remote_counters(const ctf__remote *rem, ctf_io_counters *out);
/* Cancels every request of rem, in flight (within about a second) or to come: each fails with
 * CTF_ECANCELED. Any thread; NULL is a no-op. */
void ctf__remote_cancel(ctf__remote *rem);

/* Backend entry points behind ctf__io_*. */
int ctf__http_stat(ctf__remote *rem, const char *url, ctf__file_id *id, ctf_error *err);
int ctf__http_read(ctf__remote *rem, const char *url, const char *etag, void *buf, size_t n,
                   uint64_t offset, uint64_t size, ctf_error *err);
int ctf__http_glob(ctf__remote *rem, const char *pattern, char ***out, size_t *n, ctf_error *err);

/*======================================================================
 * Digests and request signing (sigv4.c)
 *====================================================================*/

typedef struct ctf__sha256 {
    uint32_t h[8];          /* chaining state */
    uint64_t len;           /* bytes hashed so far */
    unsigned char buf[64];  /* a partial block */
    size_t fill;            /* bytes in buf */
} ctf__sha256_ctx;

void ctf__sha256_init(ctf__sha256_ctx *s);
void ctf__sha256_update(ctf__sha256_ctx *s, const void *data, size_t n);
void ctf__sha256_final(ctf__sha256_ctx *s, unsigned char out[32]);
void ctf__sha256(const void *data, size_t n, unsigned char out[32]);
void ctf__hmac_sha256(const void *key, size_t klen, const void *msg, size_t mlen,
                      unsigned char out[32]);
/* Lower-case hex of n bytes into out (2n + 1 chars). */
void ctf__hex(const unsigned char *p, size_t n, char *out);

/* RFC 3986 encoding as SigV4 wants it (unreserved characters kept, the rest %XX; '/' kept when
 * keep_slash). @return : the encoded length (out holds at most cap - 1 of it). */
size_t ctf__uri_encode(const char *s, bool keep_slash, char *out, size_t cap);

typedef struct ctf__hdr {
    const char *name;   /* lower case */
    const char *value;  /* trimmed */
} ctf__hdr;

/* One request to sign. headers: the signed ones, sorted by name, host among them. */
typedef struct ctf__sigv4 {
    const char *method;          /* "GET" */
    const char *canonical_uri;   /* the encoded path, "/bucket/key" */
    const char *canonical_query; /* encoded name=value pairs sorted by name, joined by '&' */
    const ctf__hdr *headers;
    size_t num_headers;
    const char *payload_hash;    /* hex SHA-256 of the body */
    const char *amz_date;        /* "YYYYMMDDTHHMMSSZ" */
    const char *region;
    const char *service;         /* "s3" */
    const char *access_key;
    const char *secret_key;
} ctf__sigv4;

/* The Authorization header's value for req. @return : 0, or -1 when a part is too long. */
int ctf__sigv4_authorization(const ctf__sigv4 *req, char *out, size_t cap);

#endif /* CTF_IO_H */
