/*
 * ctfio_internal.h -- declarations shared by the files of lib/ (prefix ctf__), allocation
 * macros, assertions and error helpers. Nothing here is part of the public API.
 *
 * Stages and the one-way dependencies between them (a stage calls only stages to its left):
 *   number -> parse -> index -> source/join -> randomize -> pack -> prefetch -> reader
 * config.c (BrainScript files) and error.c / platform.c are leaves used by everyone.
 */
#ifndef CTFIO_INTERNAL_H
#define CTFIO_INTERNAL_H

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

/* Opens for reading. @return : fd >= 0, or CTF_EIO with err filled. */
int ctf__file_open(const char *path, ctf_error *err);
void ctf__file_close(int fd);

/* fopen for the library's own small files (index cache, configuration): opens without
 * blocking; a read refuses anything that is not a regular file (a FIFO, a device, a directory:
 * errno EINVAL). Writing creates or truncates. @return : the stream, or NULL with errno set. */
FILE *ctf__fopen_regular(const char *path, bool for_write);

/* Reads exactly n bytes at offset (retrying short reads); a read past the end is CTF_ECHANGED.
 * @return : 0, CTF_EIO or CTF_ECHANGED with err naming path. */
int ctf__file_pread(int fd, const char *path, void *buf, size_t n, uint64_t offset,
                    ctf_error *err);

#ifdef CTF_TESTING
/* I/O fault injection, test builds only: when > 0, the pread with that 1-based count fails
 * with EIO. */
extern atomic_long ctf__io_fail_at;
extern atomic_long ctf__io_count;
/* The pread with count ctf__io_short_at returns half of what was asked (a legal short read);
 * the one with count ctf__io_eof_at returns 0 (the file ended under the read). */
extern atomic_long ctf__io_short_at;
extern atomic_long ctf__io_eof_at;
#endif

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

/* ctf__format_double / ctf__format_float: shortest decimal that round-trips ("%.17g" style
 * search), JSON-compatible: +inf and -inf print as 1e999 and -1e999 (JSON readers round them
 * back to infinities), nan as null. @return : length written. */
int ctf__format_double(double v, char *buf, size_t cap);
int ctf__format_float(float v, char *buf, size_t cap);

/*======================================================================
 * Index (index.c)
 *====================================================================*/

/* One sequence, in file order. */
typedef struct ctf__seq {
    uint64_t offset;      /* byte offset of its first line */
    uint64_t key;         /* sequence id (id mode) or 0-based line number (line mode) */
    uint64_t line;        /* 0-based number of its first line */
    uint32_t samples;     /* index samples (lines, or lines holding the definesMBSize stream) */
    uint32_t lines;       /* physical lines it spans (up to the next sequence) */
} ctf__seq;

/* One chunk: consecutive whole sequences (rules 4.2). */
typedef struct ctf__chunk {
    size_t first_seq;     /* index of its first sequence */
    size_t num_seqs;      /* sequences in it (>= 1) */
    uint64_t offset;      /* byte offset of its first sequence */
    uint64_t size;        /* bytes spanned, up to the next chunk's first byte */
    uint64_t samples;     /* index samples in it */
    uint64_t line;        /* 0-based first line of its first sequence */
    uint64_t hash;        /* fold of its sequence records: a re-made table must match it */
} ctf__chunk;

/* A growable table of one chunk's sequence records (re-made per chunk, see ctf_index). */
typedef struct ctf__seqbuf {
    ctf__seq *p;
    size_t cap;
} ctf__seqbuf;

/* The two-level index of one file. In memory only the chunk table (a few dozen bytes per
 * chunk) and totals; a chunk's sequence records are re-made when needed
 * (ctf__index_chunk_seqs): read from the index cache, or found again by scanning the chunk's
 * bytes. */
struct ctf_index {
    char *path;            /* data file */
    char *cache_path;      /* its index cache, or NULL when none is kept */
    struct ctf__remote *remote; /* a remote object's backend context (a reference), or NULL */
    ctf__file_id file;     /* identity of the file when indexed */
    size_t num_seqs;
    ctf__chunk *chunks;    /* chunks, file order */
    size_t num_chunks;
    uint64_t total_samples;  /* index samples over all sequences */
    uint64_t total_lines;    /* physical lines */
    uint64_t max_seq_samples;
    uint64_t data_start;   /* first byte after a BOM */
    uint64_t chunk_size_bytes; /* the chunk size the chunks were built with */
    bool line_mode;
    bool from_cache;
    uint64_t hash;         /* checksum over the sequence table (fingerprints, cache) */
    uint64_t min_seq_samples;
    uint64_t hist[65];     /* sequences by index samples: bucket b holds 2^(b-1) <= n < 2^b */
    struct ctf__index_opts *opts; /* the index-shaping options (owned), for re-scans */
    bool cache_ok;         /* the index cache holds this table: chunks are read from it */
    struct ctf__index_one *one; /* ctf_index_sequence_samples's chunk (owned) */
    uint64_t warnings;     /* warnings the indexing pass reported (the reader counts them) */
    /* The indexing pass's one warning (rules 1.5: an id that reappears after other ids), kept
     * in the index cache so that an open from the cache reports it too. */
    struct {
        bool on;
        uint64_t id, line, first_line; /* 0-based lines: where it reappears, where first used */
        uint64_t offset;               /* byte offset of the reappearance */
    } repeat;
};

/* The index cache's checksum step (FNV-1a over 8-byte words, with a mix): continues hash h over
 * n bytes. Not adversarial; it catches corruption. The fuzz target uses it to forge caches. */
uint64_t ctf__hash_bytes(uint64_t h, const void *data, size_t n);

/* ctf__index_chunk_seqs(idx, c, bytes, out, err): chunk c's sequence records, in file order,
 * into out->p (idx->chunks[c].num_seqs of them). bytes: the chunk's bytes (its size), already
 * read, or NULL to read them (from the index cache when it holds the table, else from the data
 * file). The records are checked against the chunk's record (count, fold): a file changed
 * under the index is CTF_ECHANGED. Thread-safe (idx is not modified). */
int ctf__index_chunk_seqs(const ctf_index *idx, size_t c, const char *bytes, ctf__seqbuf *out,
                          ctf_error *err);
/* A chunk's records re-made block by block, as its load reads it (source.c): begin, then
 * ctf__rescan_block over consecutive byte ranges of the chunk in file order (each call scans
 * the complete lines of its range; the chunk's last range also its unterminated last line and
 * the sequence still open), then ctf__rescan_end, which checks the records against the chunk's
 * record exactly as ctf__index_chunk_seqs does (same errors). The records go into out
 * (ctf__rescan_kept of them are complete); out->p may move while blocks are scanned. */
typedef struct ctf__rescan ctf__rescan;
int ctf__rescan_begin(const ctf_index *idx, size_t c, ctf__seqbuf *out, ctf__rescan **r,
                      ctf_error *err);
/* Scans [p, end) (base: the file offset of p; p starts a line). @return : 0, or a status kept
 * for ctf__rescan_end (later calls do nothing); *rest: the first byte not scanned (the start
 * of an incomplete last line). */
int ctf__rescan_block(ctf__rescan *r, const char *p, const char *end, uint64_t base, bool last,
                      const char **rest);
size_t ctf__rescan_kept(const ctf__rescan *r);
/* @return : true and the file offset of the sequence still open, if one is. */
bool ctf__rescan_open(const ctf__rescan *r, uint64_t *offset);
/* Frees r. @return : 0, CTF_ENOMEM, or CTF_ECHANGED (the records do not match the index). */
int ctf__rescan_end(ctf__rescan *r, ctf_error *err);
#ifdef CTF_TESTING
/* Test builds: chunks whose records were re-made from their bytes (every load, and every
 * consumer lookup that no load answered), so that tests can count the re-makes of a sweep. */
extern atomic_long ctf__rescan_count;
#endif
/* Chunk c's records from the index cache, when it holds them and they match the chunk.
 * @return : true when out holds them. */
bool ctf__index_chunk_seqs_cached(const ctf_index *idx, size_t c, ctf__seqbuf *out);
/* Bytes the index holds in memory (chunk table, options, path; not a re-made chunk's table). */
uint64_t ctf__index_bytes(const ctf_index *idx);
/* Files of at least this many bytes are indexed by two threads when cfg->num_threads >= 2 and
 * the file is in line mode; and the sequence records the second indexing thread may keep
 * before it stops and the first thread scans the rest alone. Variables only in test builds,
 * which lower them. */
#define CTF__INDEX_PARALLEL_MIN ((uint64_t)64 << 20)
#define CTF__INDEX_HALF_KEEP ((size_t)1 << 20) /* 32 MB of records */
#ifdef CTF_TESTING
extern uint64_t ctf__index_parallel_min;
extern size_t ctf__index_half_keep;
#else
#define ctf__index_parallel_min CTF__INDEX_PARALLEL_MIN
#define ctf__index_half_keep CTF__INDEX_HALF_KEEP
#endif

/*======================================================================
 * Parsing (parse.c): bytes of whole sequences -> a parsed chunk.
 *====================================================================*/

/* The parser's view of the configuration. */
/* A pool of freed chunk buffers (parse.c): a chunk's stream buffers go back to it when the
 * chunk is freed and the next parse takes them, so that their pages are not faulted in and
 * zeroed by the kernel again for every chunk (up to a fifth of the parse with 32 MiB chunks,
 * BENCHMARKS.md). Thread-safe; reference counted, since chunks may outlive their loader. */
typedef struct ctf__bufpool ctf__bufpool;
/* Keeps at most max_bufs buffers. @return : NULL when out of memory. */
ctf__bufpool *ctf__bufpool_create(size_t max_bufs);
/* Drops the creator's reference; the pool and what it holds go with the last one. */
void ctf__bufpool_unref(ctf__bufpool *p);

typedef struct ctf__parse_cfg {
    const char *path;            /* for messages */
    const ctf_stream_def *streams;
    size_t num_streams;
    ctf_precision precision;
    bool line_mode;              /* from the index */
    bool frame_mode;
    int trace_level;             /* info problems are recorded only at 2 */
    ctf__bufpool *pool;          /* where stream buffers come from and go back to; may be NULL */
} ctf__parse_cfg;

/* The pool for `threads` parse threads over pc's streams: the buffers of (threads + 2 + hold)
 * chunks (each thread holds a set while the consumer gives one back, plus one in flight, plus
 * the `hold` chunks a window holds at once, so that a later sweep reuses the buffers of the
 * chunks the last one freed), each set with its sequence records. */
ctf__bufpool *ctf__bufpool_for(const ctf__parse_cfg *pc, size_t threads, size_t hold);
#ifdef CTF_TESTING
/* Test builds: pool takes that found no buffer (a fresh allocation followed). */
extern atomic_long ctf__bufpool_misses;
#endif
/* The smallest pooled buffer of at least `need` bytes (*got: its capacity), or NULL. */
void *ctf__bufpool_take(ctf__bufpool *p, size_t need, size_t *got);
/* Keeps buf (bytes of capacity) for a later take, or frees it when the pool is full. */
void ctf__bufpool_give(ctf__bufpool *p, void *buf, size_t bytes);

/* One stream's data for the sequences of a parsed chunk. */
typedef struct ctf__stream_data {
    void *values;          /* dense: samples*dim elements; sparse: nnz elements */
    size_t values_cap;     /* capacity in elements */
    int32_t *indices;      /* sparse: nnz column indices */
    size_t indices_cap;
    int64_t *indptr;       /* sparse: samples+1 offsets into indices/values */
    size_t indptr_cap;
    size_t samples;        /* samples stored */
    size_t nnz;            /* sparse: entries stored */
    int64_t short_sample;  /* dense: a sample cut short by the end of the file, or -1 */
    uint32_t short_count;  /* its values actually present (the rest are zero padding) */
    /* Dense, after the chunk's first sample with fewer than dim values (zero-filled when
     * delivered): samples+1 offsets into values, sample i holding values [off[i], off[i+1])
     * and zeros after them up to dim. NULL: sample i is values [i*dim, (i+1)*dim). Short rows
     * of a large dim so cost their text, not dim values each. */
    size_t *dense_off;
    size_t dense_off_cap;
} ctf__stream_data;

/* Dense: where sample i's values start, and how many are stored (the rest of dim are zeros). */
static inline size_t ctf__dense_at(const ctf__stream_data *sd, size_t dim, size_t i)
{
    return sd->dense_off ? sd->dense_off[i] : i * dim;
}
static inline size_t ctf__dense_len(const ctf__stream_data *sd, size_t dim, size_t i)
{
    return sd->dense_off ? sd->dense_off[i + 1] - sd->dense_off[i] : dim;
}

/* A range of samples of one stream belonging to one sequence. */
typedef struct ctf__slice {
    uint32_t first;        /* first sample in ctf__stream_data */
    uint32_t count;        /* samples */
} ctf__slice;

/* A problem found while parsing, kept until the consumer reaches the chunk, so that errors are
 * counted and reported in timeline order whatever thread parsed the chunk. */
typedef struct ctf__problem {
    ctf_severity sev;
    ctf_error err;
} ctf__problem;

typedef struct ctf__chunk_data {
    size_t chunk;              /* chunk id in the index */
    size_t num_seqs;           /* sequences (= the chunk's) */
    size_t num_streams;
    ctf__stream_data *streams; /* per stream */
    ctf__slice *slices;        /* num_seqs * num_streams, sequence-major */
    uint8_t *dropped;          /* per sequence: 1 if dropped as a whole */
    ctf__problem *problems;    /* errors and warnings in file order */
    size_t num_problems, problems_cap;
    uint64_t num_errors;       /* errors (counted against maxErrors) */
    uint64_t num_warnings;     /* warnings, including ones not stored */
    uint64_t num_infos;        /* info lines recorded (trace level 2 only) */
    uint64_t dropped_rows;
    uint64_t dropped_seqs;
    uint64_t *dropped_samples; /* per stream */
    bool fatal;                /* problems ends with a fatal error: the chunk is unusable */
    int fatal_code;
    size_t bytes;              /* memory held, for the residency counters */
    size_t elt;                /* bytes per value (the precision) */
    ctf__bufpool *pool;        /* a reference: the buffers go back there when freed */
    /* The chunk's sequence records as its load made them (owned, seqs_cap of them, counted in
     * bytes), so that the consumer does not make them again; NULL when the source does not
     * hand them over (a join: its records are its own). */
    ctf__seq *seqs;
    size_t seqs_cap;
    /* Called first by ctf__chunk_data_free (a join releases the joined chunks it used). */
    void (*on_free)(void *ctx, const struct ctf__chunk_data *cd);
    void *on_free_ctx;
} ctf__chunk_data;

/* Limits on how many problems one chunk keeps in detail (counts are always exact). */
#define CTF__MAX_STORED_WARNINGS 64

/* ctf__parse_chunk(pc, idx, chunk, seqs, buf, max_errors, out, err):
 * Parses the sequences of chunk `chunk` (its records: seqs, from ctf__index_chunk_seqs) whose
 * bytes are buf (idx->chunks[chunk].size bytes starting at the chunk's offset). Problems are
 * recorded in the result, not reported; parsing stops after max_errors + 1 errors (the
 * consumer's budget can never allow more).
 * @return : 0 and *out (owned by the caller), or CTF_ENOMEM. A fatal data problem is not a
 *           failure of this call: it is recorded (out->fatal) so that it surfaces in order. */
int ctf__parse_chunk(const ctf__parse_cfg *pc, const ctf_index *idx, size_t chunk,
                     const ctf__seq *seqs, const char *buf, uint64_t max_errors,
                     ctf__chunk_data **out, ctf_error *err);
void ctf__chunk_data_free(ctf__chunk_data *cd);
/* ctf__parse_chunk in steps, for a chunk whose bytes come block by block (source.c): begin
 * (seqs and buf: the chunk's records and bytes when at hand, for pre-sizing the buffers; NULL
 * and NULL: they are sized as the ranges come), then ctf__parse_seqs for consecutive
 * ranges of sequences, then ctf__parse_end (which gives *out) or ctf__parse_abort (which frees
 * everything; NULL is fine). ctf__parse_seqs parses sequences [the end of the last range, hi)
 * of seqs; the last of them ends at file offset range_end; buf holds the file's bytes
 * [base, base + len), all of theirs among them. ctf__parse_stopped: the error budget is
 * spent (or a fatal problem was met); later ranges parse nothing. Errors: CTF_ENOMEM. */
typedef struct ctf__parse_run ctf__parse_run;
int ctf__parse_begin(const ctf__parse_cfg *pc, const ctf_index *idx, size_t chunk,
                     const ctf__seq *seqs, const char *buf, uint64_t max_errors,
                     ctf__parse_run **out, ctf_error *err);
int ctf__parse_seqs(ctf__parse_run *r, const ctf__seq *seqs, size_t hi, uint64_t range_end,
                    const char *buf, uint64_t base, size_t len, ctf_error *err);
bool ctf__parse_stopped(const ctf__parse_run *r);
int ctf__parse_end(ctf__parse_run *r, ctf__chunk_data **out, ctf_error *err);
void ctf__parse_abort(ctf__parse_run *r);

/* The parser's hot-loop variant in use: "ssse3", "sse2" or "portable" (no SSE2, or
 * -DCTF_NO_SSE2). Chosen from the processor at the first parse. */
const char *ctf__parse_variant(void);
#ifdef CTF_TESTING
/* Test builds: selects the hot-loop variant by name ("sse2", or "ssse3" where the processor
 * has it) for the following parses, so that the tests compare the variants on one machine.
 * @return : 0, or CTF_EINVAL for a variant this build or processor cannot run. */
int ctf__parse_set_variant(const char *name);
#endif

/*======================================================================
 * Packing (pack.c): picked sequences of parsed chunks -> an owned minibatch.
 *====================================================================*/

/* Freed minibatches kept for reuse: at most this many per reader. */
#define CTF__MB_POOL_SLOTS 4
/* A pooled block up to this size is kept however small the next minibatch (larger ones are
 * replaced when more than four times too large). */
#define CTF__MB_KEEP_BYTES ((size_t)64 << 10)
typedef struct ctf__mb_pool ctf__mb_pool;

/* ctf__mb_pool_close(pool): the reader is done with its pool: the minibatches it holds are
 * freed, and those still out are freed (not pooled) when their owner frees them; the pool
 * goes with the last of them. NULL is a no-op. */
void ctf__mb_pool_close(ctf__mb_pool *pool);

/* One sequence chosen for a minibatch. */
typedef struct ctf__pick {
    const ctf__chunk_data *cd;  /* its parsed chunk */
    size_t local;               /* its index inside the chunk */
    uint64_t key;               /* sequence key */
    uint64_t line;              /* 0-based first line */
    uint64_t samples;           /* index samples */
    uint32_t from;              /* first sample to deliver (truncated BPTT), else 0 */
    uint32_t count;             /* samples to deliver; UINT32_MAX = all */
    uint32_t file;              /* the source's file it comes from */
} ctf__pick;

/* The minibatch-level facts the reader decides. */
typedef struct ctf__mb_info {
    uint64_t position;          /* timeline position after the global minibatch */
    uint64_t sweep;             /* sweep of its first sequence */
    bool end_of_sweep;          /* the global minibatch held the last sequence of a sweep */
    bool corpus;                /* the source has several files: the JSON names each one */
    /* Optional: runs fn(arg, 0), ..., fn(arg, parts - 1), possibly on several threads, and
     * returns when all are done (NULL: the copies run on the caller's thread). */
    void (*run_parts)(void *ctx, void (*fn)(void *arg, size_t part), void *arg, size_t parts);
    void *run_ctx;
    size_t max_parts;           /* at most this many parts (the threads that can help) */
    /* Optional: the reader's pool of freed minibatches (made here on first use, the reader
     * frees it with ctf__mb_pool_close); NULL: every minibatch is allocated and freed. */
    ctf__mb_pool **pool;
} ctf__mb_info;

/* Each part of a parallel copy moves at least this much (smaller minibatches: one part). */
#define CTF__PACK_PART_BYTES ((size_t)256 << 10)
/* The sizes pass of a minibatch of at least CTF__PACK_SPLIT_PICKS (pick, stream) pairs is split
 * into parts of at least CTF__PACK_PART_PICKS: before the sizes are known the picks are what
 * the pass costs (a few misses each when randomized). Below the split, waking the threads cost
 * about 4% more CPU than the pass alone for no time saved. */
#define CTF__PACK_PART_PICKS ((size_t)256)
#define CTF__PACK_SPLIT_PICKS ((size_t)1024)

/* ctf__pack(pc, picks, n, info, out, err): copies the picked sequences' samples into one owned
 * minibatch, stream by stream, in pick order. Dropped sequences must not be passed.
 * @return : 0 or CTF_ENOMEM. */
int ctf__pack(const ctf__parse_cfg *pc, const ctf__pick *picks, size_t n,
              const ctf__mb_info *info, ctf_minibatch **out, ctf_error *err);

/*======================================================================
 * Deserializers (source.c, join.c): the chunks and sequences the reader works on.
 *
 * The reader never sees a file. It sees a ctf__source: a table of chunks (what the randomizer
 * shuffles), each chunk's sequence records (samples for the timeline, key and line for the
 * minibatch), the file each chunk lives in, and a load function that reads and parses one
 * chunk into a ctf__chunk_data holding every configured stream. A CTF file is the elementary
 * deserializer (its ctf_index); a corpus of files puts their chunks one after another
 * (source.c); a join by key wraps a primary corpus and looks its sequences up in further
 * corpora (join.c). Randomization, the timeline, workers, packing, checkpoints and the
 * memory bound are written once, in the reader, against this table.
 *====================================================================*/

/* A chunk read buffer kept from one load to the next (one per loading thread). */
typedef struct ctf__readbuf {
    char *p;            /* a block of the chunk being loaded (CTF__LOAD_BLOCK) */
    size_t cap;
    ctf__seqbuf seqs;   /* the loaded chunk's sequence records */
    /* Set by the loader for a source with hands_seqs: the load hands chunk c's records over
     * once they are made and checked (a corpus: at the end of its block load). The receiver
     * owns them from then on and keeps them alive at least until the load returns; the load
     * leaves rb->seqs empty. */
    void (*publish)(void *ctx, size_t c, ctf__seq *seqs, size_t cap);
    void *publish_ctx;
} ctf__readbuf;
/* @return : rb's buffer with at least `need` bytes, or NULL (out of memory; rb is empty then). */
char *ctf__readbuf_get(ctf__readbuf *rb, size_t need);
/* A load reads its chunk in blocks of this many bytes (more for a longer sequence: a block holds
 * at least one whole sequence). A variable only in test builds, which lower it. */
#define CTF__LOAD_BLOCK ((size_t)4 << 20)
#ifdef CTF_TESTING
extern size_t ctf__load_block;
#else
#define ctf__load_block CTF__LOAD_BLOCK
#endif

typedef struct ctf__source ctf__source;

/* One file of a source, with its own index (and index cache). */
typedef struct ctf__source_file {
    char *path;
    ctf_index *idx;
    ctf__parse_cfg pc;          /* the source's parse configuration with this file's path/mode */
} ctf__source_file;

struct ctf__source {
    /* The chunk table: sequences numbered 0..num_seqs-1 chunk after chunk, file after file
     * (chunks[c].first_seq); offset/size are within the chunk's file. */
    const ctf__chunk *chunks;
    size_t num_chunks;
    size_t num_seqs;
    uint64_t total_samples;
    const uint32_t *chunk_file;        /* per chunk: index into files */
    const ctf__source_file *files;     /* the files that chunks and keys refer to */
    size_t num_files;
    /* Every file read, primary and joined (for checkpoints: each one's fingerprint). */
    const ctf__source_file *fp_files;
    size_t num_fp_files;
    uint64_t total_bytes;              /* bytes over all files */
    uint64_t hash;                     /* over every file's index (fingerprints) */
    uint64_t warnings;                 /* warnings counted while opening */
    uint64_t dropped_sequences;        /* sequences dropped while opening (missing keys) */
    uint64_t keys_missing;             /* primary sequences a joined deserializer lacks */
    uint64_t keys_unmatched;           /* joined sequences whose key the primary lacks */
    /* Reads and parses chunk c into data holding every stream the source delivers, with
     * cd->chunk == c. Thread-safe; rb is the calling thread's buffer, pool may be NULL. */
    int (*load)(ctf__source *s, ctf__readbuf *rb, size_t c, ctf__bufpool *pool,
                ctf__chunk_data **out, ctf_error *err);
    /* The load's records are this source's `seqs` for the chunk: it hands them over through
     * rb->publish, and the loader attaches them to the chunk's data (cd->seqs), so that the
     * consumer reads them there instead of asking `seqs` to make them again. */
    bool hands_seqs;
    /* Chunk c's sequence records, in chunk order. The records stay valid until the next call
     * of `seqs` on this source, so a source may produce them on demand per chunk (read from an
     * index cache, rescan the chunk) instead of holding every file's table: the reader asks for
     * a chunk's records only while the chunk is at the cursor, in the look-ahead or in a seek,
     * and uses them at once. Called from the reader's thread only. @return : 0, or an error
     * (CTF_EIO, CTF_ECHANGED, CTF_ENOMEM) with err filled. */
    int (*seqs)(ctf__source *s, size_t c, const ctf__seq **out, ctf_error *err);
    /* Parsed data the source holds itself (a join's part chunks), for the residency counters;
     * NULL when it holds none. Thread-safe. */
    void (*held)(ctf__source *s, size_t *chunks, size_t *bytes);
    void (*destroy)(ctf__source *s);
};

/* The chunk holding sequence `seq` (numbered over the whole source): a binary search over the
 * chunks' first sequences. */
static inline size_t ctf__source_chunk_of(const ctf__source *s, size_t seq)
{
    size_t lo = 0, hi = s->num_chunks;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->chunks[mid].first_seq <= seq)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

void ctf__source_free(ctf__source *s);

/* ctf__source_open(cfg, rem, pc, out, join_hash, err): the source a reader configuration
 * describes: cfg->paths (or cfg->path) as a corpus, joined by key with cfg->joins; rem serves
 * the remote paths among them (NULL: none may be remote). pc covers every stream,
 * the primary's then each join's (its streams must outlive the source). *join_hash receives a
 * fingerprint of the join settings (0 without joins). @return : 0 and *out, or an error. */
int ctf__source_open(const ctf_config *cfg, struct ctf__remote *rem, const ctf__parse_cfg *pc,
                     ctf__source **out, uint64_t *join_hash, ctf_error *err);
/* Checks cfg->joins (paths, streams, names unique over all deserializers, at most one
 * definesMBSize stream over all). @return : 0 or CTF_EINVAL naming the parameter. */
int ctf__joins_validate(const ctf_config *cfg, ctf_error *err);

/* ctf__corpus_open(cfg, paths, n, pc, max_errors, threads, out, err): a corpus of n files
 * (already expanded) with cfg's stream and index settings; pc is the parse configuration of its
 * streams (its path and line mode are set per file). @return : 0 and *out, or an error naming
 * the file. */
int ctf__corpus_open(const ctf_config *cfg, struct ctf__remote *rem, const char *const *paths,
                     size_t n, const ctf__parse_cfg *pc, uint64_t max_errors, size_t threads,
                     ctf__source **out, ctf_error *err);
/* ctf__index_build(cfg, rem, out, err): ctf_index_build with the remote backend's context of
 * the caller (NULL for a local file). */
int ctf__index_build(const ctf_config *cfg, struct ctf__remote *rem, ctf_index **out,
                     ctf_error *err);

/* Chunk c's sequence records of a corpus into out (from the index cache, or re-made from its
 * bytes read into rb): the fill of the corpus's own set, and, leaving that set alone, a pass
 * over every chunk once (a join's open). @return : 0, or an error (CTF_EIO, CTF_ECHANGED,
 * CTF_ENOMEM). */
int ctf__corpus_chunk_seqs(ctf__source *s, size_t c, ctf__readbuf *rb, ctf__seqbuf *out,
                           ctf_error *err);

/* The records of the chunks the consumer works in (at the cursor, in BPTT slots, in a seek's
 * walk), which a source keeps for its `seqs` (seqset.c); the source only fills an entry. It
 * holds at first the window in chunks (a window in samples over the mean chunk) and two more,
 * at least 3; least recently used first out. A chunk that comes back within `cap` misses of
 * being dropped doubles it, so a window wider than guessed costs one fill per chunk, not one
 * per sequence. When it would hold every chunk (keepDataInMemory, or a window over all of
 * them) each chunk has its own entry, filled once, exactly its size. */
typedef struct ctf__seqset_entry {
    size_t chunk;          /* SIZE_MAX: empty */
    uint64_t used;         /* LRU clock */
    ctf__seqbuf buf;
} ctf__seqset_entry;
typedef struct ctf__seqset {
    ctf__seqset_entry *e;
    size_t len, cap;
    size_t num_chunks;
    bool direct;           /* e[c] is chunk c's */
    uint64_t tick, misses;
    uint64_t *dropped;     /* per chunk: the miss count when it was last dropped (0: never) */
} ctf__seqset;
/* Fills out (grown to the chunk's count already) with chunk c's records. @return : 0 or an
 * error with err filled. */
typedef int (*ctf__seqset_fill_fn)(void *ctx, size_t c, ctf__seqbuf *out, ctf_error *err);
/* @return : 0, or CTF_ENOMEM (s is then freed with ctf__seqset_free all the same). */
int ctf__seqset_init(ctf__seqset *s, const ctf_config *cfg, size_t num_chunks, uint64_t samples);
/* Chunk c's records (need of them): the set's, or filled into the entry of the least recently
 * used chunk. Valid until the next call. @return : 0, or CTF_ENOMEM or fill's error. */
int ctf__seqset_get(ctf__seqset *s, size_t c, size_t need, ctf__seqset_fill_fn fill, void *ctx,
                    const ctf__seq **out, ctf_error *err);
void ctf__seqset_free(ctf__seqset *s);

/* ctf__expand_paths(patterns, n, out, num_out, err): the corpus's file list: each pattern holding
 * '*', '?' or '[' is replaced by its matches in byte-wise sorted order (none is an error), other
 * paths are kept. *out (strings and array) is freed with ctf__free_paths. */
int ctf__expand_paths(struct ctf__remote *rem, const char *const *patterns, size_t n,
                      char ***out, size_t *num_out, ctf_error *err);
void ctf__free_paths(char **paths, size_t n);

/* ctf__join_open(cfg, primary, parts, num_parts, mb_part, origins, streams, prim_ns, ...):
 * a source that reads primary's chunks and, for each sequence, the streams of every part (a
 * corpus) found by key. streams: every stream, the primary's prim_ns first, then part_ns[j] for
 * each part (they must outlive the source). Takes ownership of primary, parts and the parts
 * array (also on failure). mb_part: the part (0 = primary, j + 1 = parts[j]) whose
 * definesMBSize stream sets the sequence lengths, or -1 for the largest. cfg: the window and
 * keepDataInMemory (how many chunks' records the consumer's set holds), the log for missing
 * keys. */
int ctf__join_open(const ctf_config *cfg, ctf__source *primary, ctf__source **parts,
                   size_t num_parts, int mb_part, const char *const *origins,
                   const ctf_stream_def *streams, size_t prim_ns, const size_t *part_ns,
                   ctf__source **out, ctf_error *err);

/*======================================================================
 * Prefetch (prefetch.c): chunk loading (read + parse) on background threads.
 *====================================================================*/

typedef struct ctf__loader ctf__loader;

/* How a chunk's sequence records may be got when nobody holds them yet. */
typedef enum ctf__seqs_how {
    CTF__SEQS_HELD,  /* only records at hand (held, loaded, published): never waits or reads */
    CTF__SEQS_ANY,   /* else a running load's (waiting for them), else the source's `seqs` */
    CTF__SEQS_LOAD   /* else the chunk's load, run on the caller's thread if nobody runs it */
} ctf__seqs_how;

/* ctf__loader_create(pc, src, threads, hold, out, err): starts `threads` workers (0: every load
 * runs on the caller's thread) that load src's chunks; its buffer pool also keeps the buffers of
 * `hold` chunks (ctf__bufpool_for). pc (all streams, for the buffer pool) and src must outlive
 * it. @return : 0 or CTF_ENOMEM. */
int ctf__loader_create(const ctf__parse_cfg *pc, ctf__source *src, size_t threads, size_t hold,
                       ctf__loader **out, ctf_error *err);
#ifdef CTF_TESTING
/* Test builds: chunks put on the loader's queue (not those a caller loaded itself at once). */
extern atomic_long ctf__loader_queued;
#endif
/* Queues chunk c for a background load unless it is queued, loading or loaded already. */
int ctf__loader_request(ctf__loader *l, size_t c);
/* Hands over chunk c's parsed data, waiting for its load or loading it now. The caller owns
 * *out. @return : 0, or the load's error (CTF_EIO, CTF_ECHANGED, CTF_ENOMEM) with err filled. */
int ctf__loader_take(ctf__loader *l, size_t c, ctf__chunk_data **out, ctf_error *err);
/* ctf__loader_seqs(l, c, how, out): chunk c's sequence records as its load makes them (a
 * source with hands_seqs): those of a loaded chunk, or of a running load as soon as it has
 * published them (CTF__SEQS_ANY and _LOAD wait that long: a corpus's load publishes them at its
 * end, as its last block completes them); with CTF__SEQS_LOAD a chunk queued or not requested
 * is loaded on the caller's thread now, its data then waiting for ctf__loader_take, and while
 * it would wait the caller runs the next queued loads the same way. The records stay valid
 * until the chunk is taken (then they are its data's) or cancelled.
 * @return : true and *out, or false (no load made them: not requested, a failed load, a source
 *           without hands_seqs). */
bool ctf__loader_seqs(ctf__loader *l, size_t c, ctf__seqs_how how, const ctf__seq **out);
/* Forgets every request and loaded-but-untaken chunk (after a seek). */
void ctf__loader_drop_all(ctf__loader *l);
/* Forgets the request for chunk c and its loaded data, if any (a request no longer needed). */
void ctf__loader_cancel(ctf__loader *l, size_t c);
/* Runs fn(arg, 0 .. parts - 1): idle threads take parts before any queued load, the caller runs
 * every part nobody has started, then waits for the running ones. Without threads the caller
 * runs them all. The signature of ctf__mb_info.run_parts (ctx: the loader). */
void ctf__loader_run_parts(void *loader, void (*fn)(void *arg, size_t part), void *arg,
                           size_t parts);
/* Bytes held in loaded-but-untaken chunks, and their number. */
void ctf__loader_held(ctf__loader *l, size_t *chunks, size_t *bytes);
void ctf__loader_free(ctf__loader *l);

/*======================================================================
 * Randomization (randomize.c): rules 5.
 *====================================================================*/

/* std::mt19937_64. */
typedef struct ctf__mt64 {
    uint64_t mt[312];
    size_t mti;
} ctf__mt64;

void ctf__mt64_seed(ctf__mt64 *g, uint64_t seed);
uint64_t ctf__mt64_next(ctf__mt64 *g);

/* The order of one sweep. */
typedef struct ctf__sweep {
    uint64_t sweep;        /* sweep number k */
    size_t num_slots;      /* = number of sequences */
    size_t *seq;           /* slot -> sequence index (file order numbering) */
    size_t *home;          /* slot -> randomized chunk position of that sequence's chunk */
    size_t *chunk_at;      /* randomized position -> chunk id; num_chunks entries */
    size_t num_chunks;
} ctf__sweep;

/* ctf__randomize_sweep(chunks, num_chunks, window, window_in_samples, seed, sweep_no, out, err):
 * Computes sweep sweep_no's order exactly as rules 5 (seed + sweep_no seeds both generators;
 * chunk shuffle; windows in chunks or samples; sequence shuffle). window == 0 gives file order.
 * Sequences are numbered as in the index: chunk c holds first_seq .. first_seq+num_seqs-1.
 * out must be zeroed or previously filled (its arrays are reused/grown).
 * @return : 0 or CTF_ENOMEM. */
int ctf__randomize_sweep(const ctf__chunk *chunks, size_t num_chunks, uint64_t window,
                         bool window_in_samples, uint64_t seed, uint64_t sweep_no,
                         ctf__sweep *out, ctf_error *err);
/* ctf__sweep_identity: file order (randomize = false). */
int ctf__sweep_identity(const ctf__chunk *chunks, size_t num_chunks, uint64_t sweep_no,
                        ctf__sweep *out, ctf_error *err);
void ctf__sweep_free(ctf__sweep *s);

/* The order of one sweep, generated lazily (rules 5.8): slot by slot, running the sequence
 * shuffle only as far as the slots asked for need, with the same result as
 * ctf__randomize_sweep. Memory is O(chunks) plus the slots held: at most Wmax + L, where Wmax
 * is the number of slots in the widest window and L the largest look-ahead (slot asked minus
 * release point) of the consumer. File order (randomized false, or window 0) holds no slots. */
typedef struct ctf__sweep_gen ctf__sweep_gen;

/* ctf__sweepgen_create(chunks, num_chunks, window, window_in_samples, seed, sweep_no,
 *                      randomized, out, err):
 * Prepares sweep sweep_no (randomized when `randomized` and window > 0, else file order):
 * chunk shuffle and windows, O(chunks) work and memory. Only this call reads the chunk table
 * (it need not outlive the generator). chunk_at/pos_of are available at once.
 * @return : 0 and *out, or CTF_ENOMEM (*out NULL). */
int ctf__sweepgen_create(const ctf__chunk *chunks, size_t num_chunks, uint64_t window,
                         bool window_in_samples, uint64_t seed, uint64_t sweep_no,
                         bool randomized, ctf__sweep_gen **out, ctf_error *err);
/* ctf__sweepgen_get(g, slot, seq, home, err): the final sequence (file-order index) and home
 * position of slot `slot` (seq or home may be NULL). Slots may be asked in any order at or
 * above the release point; asking one ahead runs the shuffle up to it. File order: O(1) for
 * sequential asks.
 * @return : 0; CTF_EINVAL for a slot below the release point or past the end (nothing
 *           changes); CTF_ENOMEM (nothing changes: the generator stays usable). */
int ctf__sweepgen_get(ctf__sweep_gen *g, size_t slot, size_t *seq, size_t *home, ctf_error *err);
/* The consumer will not ask for slots below `slot` again: their memory can be reused. A point
 * below the current one is ignored; one past the end counts as the end. */
void ctf__sweepgen_release(ctf__sweep_gen *g, size_t slot);
size_t ctf__sweepgen_num_slots(const ctf__sweep_gen *g);
uint64_t ctf__sweepgen_sweep(const ctf__sweep_gen *g);
const size_t *ctf__sweepgen_chunk_at(const ctf__sweep_gen *g); /* position -> chunk id */
const size_t *ctf__sweepgen_pos_of(const ctf__sweep_gen *g);   /* chunk id -> position */
/* Largest number of slots held at once so far (the ring's capacity is a power of two below
 * max(32, 2 x this)). */
size_t ctf__sweepgen_peak_slots(const ctf__sweep_gen *g);
void ctf__sweepgen_free(ctf__sweep_gen *g);

/*======================================================================
 * Chunk cache (prefetch.c): which parsed chunks are held and which are loaded ahead.
 *
 * The reader asks the cache for a chunk (ctf__cache_get) and tells it what the timeline
 * consumed (ctf__cache_consumed, _pin, _unpin); the cache holds a chunk while the sweep is
 * inside it or a BPTT slot pins it (or always, with keep_data_in_memory), evicts passed chunks
 * (ctf__cache_evict_passed), and decides what the loader parses ahead (ctf__cache_schedule: a
 * look-ahead over the sweep generator, into the next sweep near a sweep's end).
 *====================================================================*/
typedef struct ctf__cache ctf__cache;

typedef struct ctf__cache_cfg {
    size_t num_threads;          /* loader threads (0: every load runs on the caller's) */
    size_t prefetch_chunks;      /* at most this many loaded ahead and not yet taken */
    bool keep_data_in_memory;    /* never evict */
    bool randomized;             /* sweeps in randomized order (ownership by chunk position) */
    bool same_sweep_only;        /* never look into the next sweep (truncated BPTT) */
    uint64_t window;             /* the sweep generator's settings, for the next sweep's */
    bool window_in_samples;
    uint64_t seed;
    uint64_t sweep_samples;      /* index samples in one sweep */
    uint64_t limit;              /* the timeline ends here (UINT64_MAX: never) */
    ctf_stats *stats;            /* kept current: chunks_loaded, *_resident and their peaks */
} ctf__cache_cfg;

/* ctf__cache_create(pc, src, cfg, out, err): the cache and its loader (cfg->num_threads
 * threads). pc, src and cfg->stats must outlive it. @return : 0 or CTF_ENOMEM. */
int ctf__cache_create(const ctf__parse_cfg *pc, ctf__source *src, const ctf__cache_cfg *cfg,
                      ctf__cache **out, ctf_error *err);
/* The loader, for ctf__loader_run_parts. */
ctf__loader *ctf__cache_loader(ctf__cache *k);
/* Makes sweep k current in *gen (a no-op if it is): adopts the look-ahead's generator when it
 * opened sweep k already, else creates one; cancels requests that will never be taken and
 * resets the consumed counters. @return : 0, or CTF_ENOMEM with *gen unchanged. */
int ctf__cache_open_sweep(ctf__cache *k, uint64_t sweep, ctf__sweep_gen **gen, ctf_error *err);
/* Forgets the look-ahead's generator of the next sweep (before a seek). */
void ctf__cache_drop_next_sweep(ctf__cache *k);
/* Chunk c's parsed data, held from now on until evicted; loaded now if nobody did.
 * @return : 0, or the load's error with err filled. */
int ctf__cache_get(ctf__cache *k, size_t c, const ctf__chunk_data **out, ctf_error *err);
/* ctf__cache_seqs(k, c, how, out, err): chunk c's sequence records for the consumer: those the
 * chunk's load made (attached to its data, held or loaded ahead), so that a chunk's records are
 * made once per load; failing that as `how` says, the source's `seqs` last. Valid while the
 * chunk is held or loaded ahead, and until the next call otherwise. *out is NULL only with
 * CTF__SEQS_HELD. @return : 0, or the source's error. */
int ctf__cache_seqs(ctf__cache *k, size_t c, ctf__seqs_how how, const ctf__seq **out,
                    ctf_error *err);
/* One more sequence of chunk c cut in the current sweep. */
void ctf__cache_consumed(ctf__cache *k, size_t c);
/* A BPTT slot takes / lets go of a sequence of chunk c: held while pinned. */
void ctf__cache_pin(ctf__cache *k, size_t c);
void ctf__cache_unpin(ctf__cache *k, size_t c);
/* Frees the held chunks the sweep has passed (none with keep_data_in_memory). */
void ctf__cache_evict_passed(ctf__cache *k);
/* Asks the loader for the chunks this worker (rank of workers) needs next from slot `slot` of
 * sweep `sweep` (gen), keeping at most prefetch_chunks outstanding. */
void ctf__cache_schedule(ctf__cache *k, ctf__sweep_gen *gen, uint64_t sweep, size_t slot,
                         size_t workers, size_t rank);
/* Whether chunk c is held, or asked for in the current sweep or for the next. */
bool ctf__cache_asked(const ctf__cache *k, size_t c);
/* Asks the loader for chunk c of the current sweep now, unless held or asked for already
 * (a minibatch's chunks, all at once). */
void ctf__cache_request(ctf__cache *k, size_t c);
/* Forgets every request (after a seek or a worker change): the look-ahead restarts at slot. */
void ctf__cache_restart(ctf__cache *k, size_t slot);
/* Updates cfg->stats' residency counters and peaks (held, loaded ahead, a join's parts). */
void ctf__cache_update_stats(ctf__cache *k);
/* Held chunks and their bytes (not counting those loaded ahead). */
void ctf__cache_held(const ctf__cache *k, size_t *chunks, size_t *bytes);
/* Requests made and not yet taken. */
size_t ctf__cache_outstanding(const ctf__cache *k);
void ctf__cache_free(ctf__cache *k);

/*======================================================================
 * BrainScript configuration (config.c)
 *====================================================================*/
/* Public API in ctfio.h (ctf_bsconfig_*). */

#endif /* CTFIO_INTERNAL_H */
