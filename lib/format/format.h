/*
 * format.h -- the CTF text format: the index of a file's chunks and sequences (index.c) and the
 * parser that turns the bytes of whole sequences into a parsed chunk (parse.c); CNTK's binary
 * format, whose header is a file's index and whose chunks decode into parsed chunks (cbf.c).
 */
#ifndef CTFIO_FORMAT_H
#define CTFIO_FORMAT_H

#include "common/common.h"

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
    ctf__file_id cache_file; /* the cache file's identity when cache_ok (for invalidation) */
    struct ctf__index_one *one; /* ctf_index_sequence_samples's chunk (owned) */
    uint64_t warnings;     /* warnings the indexing pass reported (the reader counts them) */
    struct ctf__cbf *cbf;  /* a CBF file's stream table (cbf.c), or NULL for a text file */
    /* The indexing pass's one warning (rules 1.5: an id that reappears after other ids), kept
     * in the index cache so that an open from the cache reports it too. */
    struct {
        bool on;
        uint64_t id, line, first_line; /* 0-based lines: where it reappears, where first used */
        uint64_t offset;               /* byte offset of the reappearance */
        uint64_t count;                /* reappearances in the whole file (each one counted) */
    } repeat;
};


/* ctf__index_cache_invalidate(idx): a read proved the data different from the index (same
 * size, modification time and inode, other bytes: the cache's header cannot tell). Clears the
 * index cache's header when the cache is still the file that holds this index, so that the
 * next open scans the data again instead of failing the same way forever; the records stay
 * readable for the readers that hold the index. Any thread; idempotent.
 * @return : true when the cache is invalid now (by this call or an earlier one). */
bool ctf__index_cache_invalidate(const ctf_index *idx);

/* ctf__index_stale(idx, err): the same, after err (CTF_ECHANGED) proved the index wrong; when
 * the cache is invalid, err's message says so (once). */
void ctf__index_stale(const ctf_index *idx, ctf_error *err);

/* ctf__index_chunk_seqs(idx, c, bytes, out, err): chunk c's sequence records, in file order,
 * into out->p (idx->chunks[c].num_seqs of them). bytes: the chunk's bytes (its size), already
 * read, or NULL to read them (from the index cache when it holds the table, else from the data
 * file). The records are checked against the chunk's record (count, fold): a file changed
 * under the index is CTF_ECHANGED. Thread-safe (idx is not modified). */
int ctf__index_chunk_seqs(const ctf_index *idx, size_t c, const char *bytes, ctf__seqbuf *out,
                          ctf_error *err);
/* A chunk's records re-made block by block, as its load reads it (corpus.c): begin, then
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
/* One more reference (a chunk made outside parse.c that gives its buffers back to p). */
void ctf__bufpool_ref(ctf__bufpool *p);

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
 * chunks the last one freed), each set with its sequence records and, with raw (a source with
 * CBF files), the chunk's bytes as read (cd->raw). */
ctf__bufpool *ctf__bufpool_for(const ctf__parse_cfg *pc, size_t threads, size_t hold, bool raw);
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
    /* values point into the chunk's copy of its file's bytes (cd->raw), not into a buffer of
     * their own: sample i is dim values at dense_off[i], and a stored gap between two samples
     * (CBF's per-sequence counts) is why dense_len takes the smaller of the step and dim. */
    bool view;
    /* Dense, nonzero: sample i is dim values at i * dense_step (dense_off, when kept, agrees).
     * Set by ctf__chunk_data_shape, so that reaching a sample costs no look-up. */
    size_t dense_step;
} ctf__stream_data;

/* Dense: where sample i's values start, and how many are stored (the rest of dim are zeros). */
static inline size_t ctf__dense_at(const ctf__stream_data *sd, size_t dim, size_t i)
{
    if (sd->dense_step) return i * sd->dense_step;
    return sd->dense_off ? sd->dense_off[i] : i * dim;
}
static inline size_t ctf__dense_len(const ctf__stream_data *sd, size_t dim, size_t i)
{
    if (sd->dense_step || !sd->dense_off) return dim;
    const size_t step = sd->dense_off[i + 1] - sd->dense_off[i];
    return step < dim ? step : dim;
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
    /* Every sequence holds one sample of every stream: sequence i's slices are all {i, 1}
     * (set by ctf__chunk_data_shape; a consumer may skip the slices). */
    bool one_sample;
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
    /* The chunk's bytes as read from its file, which view streams point into (owned, raw_cap
     * bytes of capacity, counted in bytes; back to the pool when the chunk is freed); NULL when
     * nothing is a view. A copy, never a mapping: what was loaded cannot change under the
     * reader when the file does. */
    char *raw;
    size_t raw_cap;
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
/* Notes the regular shapes of a finished chunk that let a consumer reach a sample without
 * look-ups (one_sample, dense_step); one sequential pass over its slices and offsets. */
void ctf__chunk_data_shape(ctf__chunk_data *cd, const ctf__parse_cfg *pc);
/* ctf__parse_chunk in steps, for a chunk whose bytes come block by block (corpus.c): begin
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


/* ctf__index_build(cfg, rem, out, err): ctf_index_build with the remote backend's context of
 * the caller (NULL for a local file). */
int ctf__index_build(const ctf_config *cfg, struct ctf__remote *rem, ctf_index **out,
                     ctf_error *err);
/*======================================================================
 * CNTK's binary format (cbf.c): a .bin file's header as its index, its chunks decoded into
 * parsed chunks.
 *====================================================================*/

/* One stream of a CBF file, as its header describes it. */
typedef struct ctf__cbf_stream {
    char *name;
    bool sparse;
    ctf_precision precision;  /* the stored element type */
    uint32_t dim;
} ctf__cbf_stream;
typedef struct ctf__cbf ctf__cbf;

struct ctf__io;
struct ctf__remote;
/* Whether the byte source (size bytes) starts with CBF's magic number. @return : 0, CTF_EIO. */
int ctf__cbf_sniff(struct ctf__io *io, uint64_t size, bool *yes, ctf_error *err);
/* ctf_cbf_streams for a local path or (rem not NULL) a remote object. is_cbf not NULL: a file
 * that is not CBF is no error but *is_cbf false and no streams. */
int ctf__cbf_file_streams(struct ctf__remote *rem, const char *path, bool *is_cbf,
                          ctf_stream_def **streams, size_t *num_streams, ctf_precision *precision,
                          ctf_error *err);
/* Fills idx (path and file set) from the CBF file's header: its chunks (empty ones left out),
 * sequence counts, length statistics and fingerprint, and idx->cbf; each of cfg's streams is
 * found by its alias (else name) among the file's and must match its kind, dimension and
 * element type. On failure idx->cbf may be set (ctf_index_free frees it). @return : 0, or
 * CTF_EPARSE (not a valid file), CTF_EINVAL (the streams do not fit), CTF_EIO, CTF_ENOMEM. */
int ctf__cbf_index(ctf_index *idx, const ctf_config *cfg, struct ctf__io *io, ctf_error *err);
void ctf__cbf_free(ctf__cbf *cbf);
/* Chunk c's sequence records (key: the sequence's number in the file) from its lengths: bytes
 * (the chunk's first bytes) or, when NULL, read from the file. */
int ctf__cbf_chunk_seqs(const ctf_index *idx, size_t c, const char *bytes, ctf__seqbuf *out,
                        ctf_error *err);
/* Decodes chunk `chunk` (bytes: its ch->size bytes) into a parsed chunk of pc's streams, its
 * buffers from pool (may be NULL); its records into seqs when not NULL. @return : 0 and *out,
 * or CTF_EPARSE naming the damaged byte, CTF_ELIMIT, CTF_ENOMEM. */
int ctf__cbf_decode(const ctf__parse_cfg *pc, const ctf_index *idx, size_t chunk, const char *bytes,
                    ctf__bufpool *pool, ctf__seqbuf *seqs, ctf__chunk_data **out, ctf_error *err);
/* ctf__cbf_decode of a chunk whose bytes are in *bytes, a buffer of cap bytes the caller owns
 * (from pool, or CTF_MALLOC when pool is NULL): a dense float stream becomes a view of them (no
 * second copy) and the chunk takes the buffer over (*bytes set to NULL); with no view the
 * buffer stays the caller's. */
int ctf__cbf_decode_owned(const ctf__parse_cfg *pc, const ctf_index *idx, size_t chunk,
                          char **bytes, size_t cap, ctf__bufpool *pool, ctf__seqbuf *seqs,
                          ctf__chunk_data **out, ctf_error *err);

/* Decodes a chunk of CBF's layout that belongs to no file (the chunk store's, source/chunkstore.c):
 * size bytes holding num_seqs sequences of samples samples in all, one stream per stream of pc
 * in pc's order and precision; path names it in messages. @return : as ctf__cbf_decode. */
int ctf__cbf_decode_bytes(const ctf__parse_cfg *pc, const char *path, const char *bytes,
                          uint64_t size, size_t num_seqs, uint64_t samples, ctf__bufpool *pool,
                          ctf__chunk_data **out, ctf_error *err);

/*======================================================================
 * Writing CBF chunks (cbf_build.c): the one encoder of the chunk layout.
 *====================================================================*/

typedef struct ctf__cbf_bytes {
    unsigned char *p;
    size_t len, cap;
} ctf__cbf_bytes;
/* Appends n bytes (or a little-endian uint32 / uint64). @return : 0 or CTF_ENOMEM. */
int ctf__cbf_put(ctf__cbf_bytes *b, const void *src, size_t n);
int ctf__cbf_put32(ctf__cbf_bytes *b, uint32_t v);
int ctf__cbf_put64(ctf__cbf_bytes *b, uint64_t v);

typedef struct ctf__cbf_pair {
    int32_t ind;
    uint32_t at;
} ctf__cbf_pair;
/* One chunk being built. Set streams, num_streams, prec and sort; zero the rest. */
typedef struct ctf__cbf_build {
    const ctf_stream_def *streams;
    size_t num_streams;
    ctf_precision prec;            /* the element type written */
    bool sort;                     /* sparse entries sorted by index within a sample (ctf2bin) */
    ctf__cbf_bytes lens;           /* the chunk's sequence lengths */
    ctf__cbf_bytes st[CTF_MAX_STREAMS]; /* its data, per stream */
    uint32_t seqs;                 /* sequences in the chunk */
    uint64_t samples;              /* their lengths' sum */
    uint64_t nonzeros;             /* sparse entries written, over the builder's life */
    ctf__cbf_pair *pairs;
    size_t pairs_cap;
} ctf__cbf_build;
/* Appends sequence i of cd (cd's streams are b's, in order). Its length is the most samples any
 * of its streams has. @return : 0, CTF_ENOMEM, or CTF_ELIMIT (2^31 entries in one stream). */
int ctf__cbf_build_seq(ctf__cbf_build *b, const ctf__chunk_data *cd, size_t i);
/* The chunk's bytes so far. */
uint64_t ctf__cbf_build_size(const ctf__cbf_build *b);
/* Appends the chunk (lengths, then every stream) to out and empties b. @return : 0 or
 * CTF_ENOMEM. */
int ctf__cbf_build_take(ctf__cbf_build *b, ctf__cbf_bytes *out);
void ctf__cbf_build_reset(ctf__cbf_build *b);
void ctf__cbf_build_free(ctf__cbf_build *b);

#endif /* CTFIO_FORMAT_H */
