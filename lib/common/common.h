/*
 * common.h -- what every layer of lib/ shares (prefix ctf__): allocation macros, assertions,
 * error records (error.c), files and threads (platform.c) and number conversion (number.c).
 * Nothing here is part of the public API, and nothing here knows a later stage.
 *
 * The layers of lib/, each a folder with its own header; a folder calls only folders to its
 * left (tests/c/test_layers.c checks this on the library's symbols):
 *   common <- format (index, parse) <- source (corpus, joins) <- reader (randomize, prefetch,
 *   pack, timeline, state); config (BrainScript, the configuration record) sits beside format
 *   and is used by source and reader; convert (other formats into CTF) uses common.
 */
#ifndef CTFIO_COMMON_H
#define CTFIO_COMMON_H

#include "ctfio.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*======================================================================
 * Allocation: every allocation in lib/ goes through these macros, so that tests can fail
 * the k-th allocation (SQLite-style fault injection) and count live blocks.
 *====================================================================*/

#ifdef CTF_TESTING
/* The allocator hook, compiled only in test builds (-DCTF_TESTING: the C tests, the fuzz
 * driver, the sanitizer and portable builds); the release library has no counters.
 * fail_at: if > 0, the allocation with that 1-based count fails (and every later one while
 * fail_sticky). */
typedef struct ctf__alloc_hooks {
    atomic_long count;        /* allocations attempted so far */
    atomic_long live;         /* blocks allocated and not yet freed */
    long fail_at;             /* fail the allocation with this count (0: never) */
    bool fail_sticky;         /* keep failing after fail_at */
} ctf__alloc_hooks;
extern ctf__alloc_hooks ctf__alloc;
#endif

void *ctf__malloc(size_t n);
void *ctf__calloc(size_t n, size_t size);
void *ctf__realloc(void *p, size_t n);
void ctf__free(void *p);
char *ctf__strdup(const char *s);

#define CTF_MALLOC(n) ctf__malloc(n)
#define CTF_CALLOC(n, s) ctf__calloc((n), (s))
#define CTF_REALLOC(p, n) ctf__realloc((p), (n))
#define CTF_FREE(p) ctf__free(p)

/* Grows *buf (element size elt) so that it holds at least need elements; doubles capacity.
 * @return : 0 or CTF_ENOMEM (the old buffer stays valid). */
int ctf__grow(void **buf, size_t *cap, size_t need, size_t elt);

/*======================================================================
 * Assertions: for invariants the code has proved, never for input validation.
 *====================================================================*/
#ifdef CTF_DEBUG
#include <assert.h>
#define CTF_ASSERT(x) assert(x)
#else
#define CTF_ASSERT(x) ((void)0)
#endif

#define CTF_UNUSED(x) ((void)(x))
#if defined(__GNUC__)
#define CTF_PREFETCH(p) __builtin_prefetch((p), 0, 3)
#else
#define CTF_PREFETCH(p) ((void)(p))
#endif
#define CTF_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CTF_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Rules of a configuration that several layers apply, each written once. */

/* The name a stream has in the data (a CTF field, a CBF stream): its alias, else its name. */
static inline const char *ctf__stream_field(const ctf_stream_def *s)
{
    return s->alias && s->alias[0] ? s->alias : s->name;
}

/* Whether the data is randomized: randomize, with a window of more than nothing. */
static inline bool ctf__randomized(const ctf_config *cfg)
{
    return cfg->randomize && cfg->randomization_window > 0;
}

/* The window in chunks: `window` chunks, or a window of `window` samples over chunks of
 * samples / num_chunks samples each on average (rounded so that it never comes to 0). */
static inline uint64_t ctf__window_chunks(uint64_t window, bool in_samples, uint64_t samples,
                                          size_t num_chunks)
{
    if (!in_samples) return window;
    return window / (samples / (num_chunks ? num_chunks : 1) + 1) + 1;
}

/*======================================================================
 * Errors (error.c)
 *====================================================================*/

/* Where a problem is. line/column 0 and offset -1 mean unknown. */
typedef struct ctf__where {
    const char *path;
    uint64_t line;
    uint64_t column;
    int64_t offset;
} ctf__where;

#define CTF__NOWHERE ((ctf__where){NULL, 0, 0, -1})

/* Fills err (if not NULL) with code, location and a printf-style message.
 * @return : code, so that `return ctf__fail(...)` reads naturally. */
int ctf__fail(ctf_error *err, int code, ctf__where where, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
int ctf__vfail(ctf_error *err, int code, ctf__where where, const char *fmt, va_list ap);

/* Clears an error record to CTF_OK. */
void ctf__error_clear(ctf_error *err);

/*======================================================================
 * Platform (platform.c): files, threads.
 *====================================================================*/

#define CTF__ETAG_MAX 128
typedef struct ctf__file_id {
    uint64_t size;        /* bytes */
    int64_t mtime_ns;     /* modification time in nanoseconds since the epoch */
    uint64_t inode;       /* inode number (detects replacement by rename) */
    char etag[CTF__ETAG_MAX]; /* a remote object's ETag ("" for a local file) */
} ctf__file_id;

/* Stats a path. @return : 0 or CTF_EIO with err naming the path. */
int ctf__file_stat(const char *path, ctf__file_id *id, ctf_error *err);

/* ctf__file_unchanged(path, was, now, offset, err): a load's check that a file still is the one
 * indexed: now (a fresh stat) must have was's size and modification time.
 * @return : 0, or CTF_ECHANGED naming path at offset. */
int ctf__file_unchanged(const char *path, const ctf__file_id *was, const ctf__file_id *now,
                        uint64_t offset, ctf_error *err);

/* Opens for reading. @return : fd >= 0, or CTF_EIO with err filled. */
int ctf__file_open(const char *path, ctf_error *err);
void ctf__file_close(int fd);

/* fopen "rb" for the library's own small files (index cache, configuration): opens without
 * blocking and refuses anything that is not a regular file (a FIFO, a device, a directory:
 * errno EINVAL). Files are written through ctf__atomic_open, never opened for writing in
 * place. @return : the stream, or NULL with errno set. */
FILE *ctf__fopen_regular(const char *path);

/*======================================================================
 * Writing a file atomically (platform.c): the one way lib/ writes a file whole, used by the
 * index cache, the chunk cache's entries and the converters' outputs.
 *
 *   ctf__atomic_file af;
 *   int e = ctf__atomic_open(&af, path, ".tmp", CTF__ATOMIC_PRIVATE);   // or 0
 *   ... ctf__atomic_write(&af, p, n), or fwrite on ctf__atomic_stream(&af) ...
 *   e = e ? e : ctf__atomic_commit(&af);        // or ctf__atomic_abort(&af) to give up
 *
 * The temporary file is made next to path (same directory, so the rename cannot cross file
 * systems), named path.<pid>-<64 random bits><suffix>, with O_CREAT|O_EXCL|O_NOFOLLOW|
 * O_CLOEXEC: it is never a file that exists nor one a symbolic link leads to, a link planted
 * at the name (by a user who can write the directory) is only a name taken, and the next name
 * is tried (100 in all). Commit flushes, fsyncs (unless CTF__ATOMIC_NO_SYNC), closes and
 * renames over path: readers see the old file or the new one, whole. rename replaces a link
 * at path itself, never the file it names (a caller that means to replace a link's target
 * resolves it first, as the converters do). Any failure removes the temporary file; nothing
 * of it is left after commit or abort, and af holds no memory and no descriptor.
 * Return values are errno values (0: done); af.step names the step that failed ("create",
 * "write", "sync", "rename") for the caller's message.
 *
 * python/ctfio/writer.py (_create_exclusive) follows the same rules for the files Python
 * writes.
 *====================================================================*/

/* CTF__ATOMIC_PRIVATE: mode 0600 (caches: what they hold is the user's alone); without it,
 * 0666 less the umask, as for any file the user asks for.
 * CTF__ATOMIC_NO_SYNC: no fsync, for files whose damage is detected and rebuilt (the chunk
 * cache's checksummed entries), where one sync per chunk would cost more than it saves. */
#define CTF__ATOMIC_PRIVATE 1
#define CTF__ATOMIC_NO_SYNC 2

typedef struct ctf__atomic_file {
    int fd;           /* the temporary file, open for writing; -1 when none */
    FILE *f;          /* the stream on fd, once ctf__atomic_stream made it (it owns fd) */
    char *tmp;        /* the temporary file's name, next to final; NULL when none to remove */
    char *final;      /* the name it takes on commit */
    int flags;        /* CTF__ATOMIC_* */
    const char *step; /* after a failure: the step that failed ("create", "write", ...) */
} ctf__atomic_file;

/* @return : 0 with af->fd open, or an errno value (af then holds nothing). */
int ctf__atomic_open(ctf__atomic_file *af, const char *path, const char *suffix, int flags);
/* A stdio stream on the temporary file (made once; commit and abort close it), or NULL. */
FILE *ctf__atomic_stream(ctf__atomic_file *af);
/* Writes all n bytes to af->fd (not for use with a stream). @return : 0 or an errno value. */
int ctf__atomic_write(ctf__atomic_file *af, const void *data, size_t n);
/* Flush, fsync, close, rename. @return : 0, or an errno value with the temporary removed. */
int ctf__atomic_commit(ctf__atomic_file *af);
/* Closes and removes the temporary file. Safe on an af that holds nothing. */
void ctf__atomic_abort(ctf__atomic_file *af);

#ifdef CTF_TESTING
/* Fault injection, test builds only: the step ctf__atomic_fail_step (CTF__ATOMIC_STEP_*, 0:
 * none) fails with errno ctf__atomic_fail_errno, in every atomic write until reset. */
enum {
    CTF__ATOMIC_STEP_CREATE = 1,
    CTF__ATOMIC_STEP_WRITE,
    CTF__ATOMIC_STEP_SYNC,
    CTF__ATOMIC_STEP_RENAME
};
extern atomic_int ctf__atomic_fail_step;
extern atomic_int ctf__atomic_fail_errno;
#endif

/* ctf__private_dir(dir, make, why, cap): whether dir may hold a cache that only this user
 * trusts (docs/chunk-cache.md, "Trust"): made first when make (mkdir -p, the last component
 * 0700), it must be a directory (a symbolic link to one is judged by the directory it leads
 * to) owned by the effective user and writable by no one else (group and other write bits
 * clear; a sticky bit is not enough: it stops others removing entries, not planting new
 * ones). The directories above it are not judged.
 * @return : 0, or an errno value (EPERM: owned by another user or writable by others) with why
 *           (cap bytes) saying what is wrong, in words for a warning. */
int ctf__private_dir(const char *dir, bool make, char *why, size_t cap);

/* Reads exactly n bytes at offset (retrying short reads); a read past the end is CTF_ECHANGED.
 * @return : 0, CTF_EIO or CTF_ECHANGED with err naming path. */
int ctf__file_pread(int fd, const char *path, void *buf, size_t n, uint64_t offset, ctf_error *err);

#ifdef CTF_TESTING
/* I/O fault injection, test builds only: when > 0, the pread with that 1-based count fails
 * with EIO. */
extern atomic_long ctf__io_fail_at;
extern atomic_long ctf__io_count;
/* The pread with count ctf__io_short_at returns half of what was asked (a legal short read);
 * the one with count ctf__io_eof_at returns 0 (the file ended under the read). */
extern atomic_long ctf__io_short_at;
extern atomic_long ctf__io_eof_at;
/* Called after each successful pread with its descriptor, offset and length (a test changes
 * the file there, as another process could during the read); NULL: none. */
extern void (*_Atomic ctf__io_after_read)(int fd, uint64_t offset, size_t n);
#endif

/* A monotonic clock in nanoseconds (CLOCK_MONOTONIC), for the stage counters below. */
uint64_t ctf__now_ns(void);

/*======================================================================
 * Stage counters: where the time goes (merged and judged in reader/stats.c)
 *
 * Each thread that works for a reader (the consumer calling ctf_reader_next, each prefetch
 * thread) adds to its own slot, so counting takes no lock and shares no cache line; a reader
 * sums the slots when asked (ctf_reader_get_perf). A slot has a single writer: its updates are
 * a relaxed load and store, as cheap as a plain add, and a concurrent read of another thread's
 * slot is still a defined (if slightly stale) value. A NULL slot counts nothing.
 *====================================================================*/
typedef enum ctf__perf_key {
    CTF__PERF_READ_NS,      /* reading a chunk's bytes (every thread) */
    CTF__PERF_READ_BYTES,
    CTF__PERF_READS,        /* read calls */
    CTF__PERF_RESCAN_NS,    /* re-making a chunk's sequence records as it is read */
    CTF__PERF_PARSE_NS,     /* parsing a chunk's sequences into values */
    CTF__PERF_PARSE_BYTES,  /* bytes of the chunks parsed to the end */
    CTF__PERF_LOAD_NS,      /* whole chunk loads (read, rescan, parse and the rest) */
    CTF__PERF_LOADS,
    CTF__PERF_WAIT_NS,      /* the consumer blocked for a chunk (waiting, or loading it) */
    CTF__PERF_WAITS,
    CTF__PERF_EVICTED,      /* chunks the cache let go of */
    CTF__PERF_NEXT_NS,      /* inside ctf_reader_next (the caller's thread) */
    CTF__PERF_WORK_NS,      /* cutting and packing minibatches (the caller's or read-ahead) */
    CTF__PERF_NEXT_CALLS,
    CTF__PERF_CONSUMER_NS,  /* between two ctf_reader_next calls: the caller's own work */
    CTF__PERF_PACK_NS,      /* copying picked sequences into minibatches */
    CTF__PERF_PACK_BYTES,   /* bytes of the values, indices and offsets delivered */
    CTF__PERF_MINIBATCHES,
    CTF__PERF_CUT_SEQS,     /* sequences and samples the timeline cut (every worker's) */
    CTF__PERF_CUT_SAMPLES,
    /* Hooks for stages that other layers add: a binary chunk cache counts a chunk it serves
     * (or has to build) on the loading thread's slot, a remote object store each request,
     * retry and byte received, all through ctf__perf_add on ctf__readbuf.perf. */
    CTF__PERF_CHUNK_CACHE_HITS,
    CTF__PERF_CHUNK_CACHE_MISSES,
    CTF__PERF_REMOTE_REQUESTS,
    CTF__PERF_REMOTE_RETRIES,
    CTF__PERF_REMOTE_BYTES,
    CTF__PERF_NUM
} ctf__perf_key;

typedef struct ctf__perf_slot {
    _Alignas(64) atomic_uint_least64_t v[CTF__PERF_NUM];
} ctf__perf_slot;

static inline void ctf__perf_add(ctf__perf_slot *s, ctf__perf_key k, uint64_t x)
{
    if (!s) return;
    uint64_t v = atomic_load_explicit(&s->v[k], memory_order_relaxed);
    atomic_store_explicit(&s->v[k], v + x, memory_order_relaxed);
}

/* Adds the time since t0 (a ctf__now_ns reading) to key k. @return : the time now. */
static inline uint64_t ctf__perf_since(ctf__perf_slot *s, ctf__perf_key k, uint64_t t0)
{
    const uint64_t t = ctf__now_ns();
    ctf__perf_add(s, k, t - t0);
    return t;
}

/*======================================================================
 * Hashing (hash.c)
 *====================================================================*/

/* The checksum step of index caches and fingerprints (FNV-1a over 8-byte words, with a mix):
 * continues hash h over n bytes. Not adversarial; it catches corruption. The fuzz target uses it
 * to forge caches. */
uint64_t ctf__hash_bytes(uint64_t h, const void *data, size_t n);

/*======================================================================
 * Number conversion (number.c)
 *====================================================================*/

/* ctf__parse_double / ctf__parse_float:
 * Parses one number at p (p < end) in the CTF grammar (rules 1.6):
 *   [+-] digits [ . digits* ] [ (e|E) [+-] digits ]
 * ('45.' is valid; '.5', '1.e5', '1e', 'inf', 'nan', hex are not). The result is correctly
 * rounded to the target type (bit-for-bit equal to strtod / strtof on the same text).
 * The number ends at the first byte that cannot continue it; the caller checks that this byte
 * is a delimiter.
 * @return : pointer just past the number, or NULL if no valid number starts at p. Out-of-range
 *           magnitudes give +-inf / 0 like strtod (the caller decides whether that is an error). */
const char *ctf__parse_double(const char *p, const char *end, double *out);
const char *ctf__parse_float(const char *p, const char *end, float *out);


/*======================================================================
 * Python-compatible random streams (random.c)
 *====================================================================*/

/* A Mersenne Twister seeded as CPython's random.Random(text): the provider pool's streams. */
#define CTF__PYRANDOM_TEXT_MAX 192
typedef struct ctf__pyrandom {
    uint32_t mt[624];
    int mti;
} ctf__pyrandom;

void ctf__sha512(const void *data, size_t len, unsigned char out[64]);
/* @return : 0, or CTF_EINVAL for a text that is empty or longer than CTF__PYRANDOM_TEXT_MAX. */
int ctf__pyrandom_seed(ctf__pyrandom *r, const char *text);
/* random.Random.randrange(n), n >= 1. */
uint64_t ctf__pyrandom_below(ctf__pyrandom *r, uint64_t n);
/* random.Random.shuffle(x). */
void ctf__pyrandom_shuffle(ctf__pyrandom *r, size_t *x, size_t n);

#endif /* CTFIO_COMMON_H */
