/*
 * ctfio.h -- the public C API of ctfio, a reader for the CNTK Text Format (CTF).
 *
 * This header is the manual. Read it top to bottom: version and errors, configuration,
 * configuration files, the index, the reader, the timeline, minibatches, checkpoints.
 *
 * Pipeline: parse -> index -> source -> randomize -> pack -> prefetch -> reader. A ctf_reader
 * turns CTF data into an endless, reproducible stream of minibatches.
 *
 * Data: the reader reads chunks and sequences that a deserializer describes. A CTF file is one
 * (its ctf_index, with its own index cache); a corpus (ctf_config.paths: files and glob
 * patterns) is several files read as one data set, one timeline over all of them; further
 * deserializers (ctf_config.joins) add streams looked up by sequence key. Randomization, the
 * timeline, workers, checkpoints and the memory bound are the same for all of them. A mix
 * (ctf_config.mix) interleaves several such data sets on one timeline by weight. Over a
 * corpus a key identifies a sequence within its file: ctf_minibatch_files() names the file
 * (docs/design.md, "The deserializer seam").
 *
 * Memory ownership rules:
 *  1. Whoever creates an object frees it; every *_free(NULL) is a no-op.
 *  2. Inputs are borrowed only for the duration of a call. Anything the library keeps, it copies.
 *  3. Views (ctf_stream_view, error pointers) point into the object they came from and stay valid
 *     until that object is freed (for ctf_reader_error: until the next call on the reader).
 *  4. A ctf_minibatch returned by ctf_reader_next belongs to the caller and does not refer back
 *     to the reader: it may outlive the reader, and may be freed on any thread. Freeing it
 *     hands its memory back to its reader for a later minibatch (a few at most, freed with the
 *     reader), so that a steady state allocates nothing per minibatch.
 *  5. All allocation inside lib/ goes through CTF_MALLOC / CTF_REALLOC / CTF_FREE.
 *  6. No global mutable state. One handle is used by one thread at a time; the reader's own
 *     prefetch threads are internal.
 *
 * Return convention: every fallible function returns int, 0 on success or a negative CTF_E*
 * code, and fills a ctf_error (code, message, path, line, column, byte offset).
 */
#ifndef CTFIO_H
#define CTFIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/*======================================================================
 * Version and errors
 *====================================================================*/

#define CTF_VERSION_MAJOR 0
#define CTF_VERSION_MINOR 1
#define CTF_VERSION_PATCH 0
#define CTF_VERSION_STRING "0.1.0"

/* ctf_version_string():
 * @return : the library version, e.g. "0.1.0". Static storage. */
const char *ctf_version_string(void);

/* Status codes. The numeric values are pinned: never renumber them. */
enum {
    CTF_OK = 0,
    CTF_EINVAL = -1,   /* invalid argument or configuration (names the parameter) */
    CTF_ENOMEM = -2,   /* an allocation failed */
    CTF_EIO = -3,      /* the operating system reported an I/O error */
    CTF_EPARSE = -4,   /* malformed input data, or too many errors (maxErrors) */
    CTF_ELIMIT = -5,   /* a configured or built-in limit was exceeded (names the limit) */
    CTF_ESTATE = -6,   /* a checkpoint state that does not fit this reader */
    CTF_EINDEX = -7,   /* an index (or index cache) that does not fit the data */
    CTF_ECHANGED = -8, /* the data file changed on disk since it was indexed */
    CTF_ECANCELED = -9, /* a remote request was cancelled (ctf_reader_cancel, ctf_reader_free) */
};

/* ctf_strerror(code):
 * @return : a static one-line description of a status code ("unknown error" if unknown). */
const char *ctf_strerror(int code);

/* ctf_error_name(code):
 * @return : the enum name of a status code ("CTF_EPARSE"), for logs and tests. */
const char *ctf_error_name(int code);

/* Severity of a reported problem (rules 2.5: traceLevel 0 shows errors, 1 warnings, 2 info). */
typedef enum ctf_severity {
    CTF_SEV_ERROR = 0,
    CTF_SEV_WARNING = 1,
    CTF_SEV_INFO = 2,
} ctf_severity;

#define CTF_ERROR_PATH_MAX 512
#define CTF_ERROR_MSG_MAX 512

/* An error record. Fixed-size arrays: reporting an error never allocates. */
typedef struct ctf_error {
    int code;                         /* CTF_E* status, CTF_OK if none */
    char path[CTF_ERROR_PATH_MAX];    /* file the problem is in, "" if none */
    uint64_t line;                    /* 1-based line, 0 if unknown */
    uint64_t column;                  /* 1-based column in bytes, 0 if unknown */
    int64_t offset;                   /* 0-based absolute byte offset, -1 if unknown */
    char message[CTF_ERROR_MSG_MAX];  /* what was expected and what was found, no location */
} ctf_error;

/* ctf_error_format(err, sev, buf, cap):
 * Writes "FILE:LINE:COLUMN: (byte OFFSET) SEVERITY: MESSAGE" (rules 2.1) into buf, leaving out
 * the parts that are unknown. Always NUL-terminates when cap > 0.
 * @return : buf. */
char *ctf_error_format(const ctf_error *err, ctf_severity sev, char *buf, size_t cap);

/* ctf_redact_urls(text, buf, cap):
 * Copies text into buf with what a URL may carry of credentials left out: the user and
 * password of scheme://USER:PASSWORD@host/ (shown as "***@") and the query of an http(s) URL
 * (a presigned URL's signature and token; shown as "?***"). Every error and log record of the
 * library has been through it; a program that prints paths (the ctfio tool) passes them too.
 * Always NUL-terminates when cap > 0. @return : buf. */
char *ctf_redact_urls(const char *text, char *buf, size_t cap);

/* A log callback receives warnings and info (and errors that were tolerated by maxErrors).
 * When ctf_config.log is NULL nothing is logged: the library never writes to a terminal (the
 * ctfio tool and the Python package install a sink that writes ctf_error_format() lines to
 * stderr). The callback may be called from the thread that calls into the library only. */
typedef void (*ctf_log_fn)(void *user, ctf_severity sev, const ctf_error *what);

/*======================================================================
 * Configuration
 *====================================================================*/

typedef enum ctf_precision {
    CTF_FLOAT32 = 4, /* values are float (the default, as in CNTK) */
    CTF_FLOAT64 = 8, /* values are double */
} ctf_precision;

/* One input stream. */
typedef struct ctf_stream_def {
    const char *name;      /* the stream's name (NAME in input.NAME) */
    const char *alias;     /* name used in the file after '|'; NULL or "" means name */
    size_t dim;            /* values per dense sample; exclusive index bound for sparse */
    bool is_sparse;        /* index:value pairs instead of a dense vector */
    bool defines_mb_size;  /* count minibatch sizes in samples of this stream (at most one) */
} ctf_stream_def;

/* A further deserializer joined by key to the primary one (CNTK's composite reader): its files
 * hold other streams of the same sequences, found by sequence key. The primary deserializer is
 * the one ctf_config itself describes (path or paths, streams, skip_sequence_ids); its chunks
 * and sequences drive randomization, the timeline, workers and checkpoints. A primary sequence
 * that a joined deserializer lacks is dropped and counted; a key repeated inside a joined
 * deserializer is an error at open. Stream names are unique over all deserializers; aliases are
 * per deserializer. A minibatch holds the primary's streams first, then each joined
 * deserializer's, in order. */
typedef struct ctf_join_def {
    const char *const *paths;      /* its files, read as one corpus (at least one) */
    size_t num_paths;
    const ctf_stream_def *streams; /* the streams it contributes (at least one) */
    size_t num_streams;
    bool skip_sequence_ids;        /* line mode for its files: keys are line numbers */
    const char *origin;            /* where it was configured ("train.cntk:12:5"), or NULL */
} ctf_join_def;

/* One part of a mix (ctf_config.mix): a data set read as its own deserializer (a file, a corpus,
 * a corpus with joins), randomized and swept as if it were read alone with the mix's settings.
 * A mix interleaves the parts' sequences on one timeline (docs/rules.md, "Mixing"): the part
 * whose samples taken divided by its weight is lowest supplies the next sequence, ties to the
 * lower part. Every part must deliver the mix's streams (ctf_config.streams), by name, dim,
 * storage and definesMBSize, in order; aliases may differ per part. */
typedef struct ctf_mix_part {
    const char *const *paths;      /* its files and glob patterns, read as one corpus (>= 1) */
    size_t num_paths;
    const ctf_stream_def *streams; /* its primary's streams (aliases); NULL: the mix's streams */
    size_t num_streams;
    const ctf_join_def *joins;     /* deserializers joined to it by key (may be NULL) */
    size_t num_joins;
    bool skip_sequence_ids;        /* line mode for its files (or set on the mix for all) */
    double weight;                 /* its share of the samples: finite, >= 0; 0 never reads */
} ctf_mix_part;

#define CTF_MAX_MIX_PARTS 64

/* Limits checked by ctf_config_validate. A dense sample of the largest dimension takes 1 GiB
 * (float32); a sparse index must fit int32; more parse threads than this only cost memory. */
#define CTF_MAX_DENSE_DIM ((size_t)1 << 28)
#define CTF_MAX_SPARSE_DIM ((size_t)INT32_MAX)
#define CTF_MAX_THREADS 1024
/* The largest timeline position ctf_reader_seek and ctf_reader_restore_state accept (2^63 - 1):
 * beyond it an endless stream could not go on without wrapping. */
#define CTF_MAX_POSITION ((uint64_t)INT64_MAX)

/* Special values for max_samples (the two largest uint64 values). */
#define CTF_INFINITELY_REPEAT UINT64_MAX
#define CTF_FULL_DATA_SWEEP (UINT64_MAX - 1)

/* prefetch_chunks's default: 2 * num_threads + 2, worked out when the reader opens, so that it
 * follows the num_threads the caller sets. */
#define CTF_PREFETCH_AUTO SIZE_MAX

#define CTF_DEFAULT_CHUNK_SIZE_BYTES 33554432u
#define CTF_DEFAULT_WINDOW_CHUNKS 128u

/* Data on object storage (docs/remote.md): a path may be s3://BUCKET/KEY (a pattern in the key
 * is listed with ListObjectsV2) or an http(s):// URL, read by range requests. These options
 * say where and as whom; the library never reads the environment: the ctfio tool and the
 * Python package resolve the AWS variables and the shared credentials file into them. Strings
 * are copied at open. A build without libcurl refuses remote paths with a message saying so. */
typedef struct ctf_remote_options {
    const char *endpoint;          /* S3 endpoint, "http://127.0.0.1:9000" (path-style
                                    * addressing); NULL: AWS, https://BUCKET.s3.REGION... */
    const char *region;            /* signing region; NULL: "us-east-1" */
    const char *access_key_id;     /* NULL: unsigned requests (public buckets, plain http) */
    const char *secret_access_key;
    const char *session_token;     /* temporary credentials' token, or NULL */
    const char *cache_dir;         /* where remote objects' index caches go, keyed by URL, ETag
                                    * and size; NULL: none are kept */
    unsigned max_retries;          /* retries of a failed request (5xx, 429, resets, timeouts,
                                    * short bodies); default 8 */
    unsigned timeout_ms;           /* stall limit: a request that moves no byte for this long
                                    * (whole seconds) is given up and retried; a slow transfer
                                    * that keeps moving is never cut; 0: 60 s */
    unsigned connect_timeout_ms;   /* 0: 10 s */
    unsigned backoff_ms;           /* the first retry's delay (doubling, with jitter); 0: 50 */
} ctf_remote_options;

/* Requests made for remote data, over a reader's life (ctf_reader_get_io_counters). */
typedef struct ctf_io_counters {
    uint64_t requests;   /* HTTP requests sent, retries included */
    uint64_t retries;    /* requests that were retries of a failed one */
    uint64_t bytes;      /* body bytes received */
} ctf_io_counters;
/* Progress of a long operation: work done so far and the total, in bytes (indexing: see
 * ctf_config.progress; conversion: ctf_convert_options.progress). A non-zero return cancels. */
typedef int (*ctf_progress_fn)(void *user, uint64_t done, uint64_t total);

/* The reader configuration. Fill it with ctf_config_init(), then set fields. A new scalar
 * parameter is one row of lib/config/params.def (docs/design.md, "Adding a reader parameter"). */
typedef struct ctf_config {
    const char *path;                 /* the data file (or use paths) */
    const char *const *paths;         /* a corpus: several files read as one data set, in this
                                       * order (num_paths > 0 replaces path). A path holding
                                       * '*', '?' or '[' is a glob pattern, expanded in byte-wise
                                       * sorted order; one that matches nothing is an error. */
    size_t num_paths;
    const ctf_join_def *joins;        /* further deserializers joined by key (may be NULL) */
    size_t num_joins;
    const ctf_stream_def *streams;    /* input streams (required, at least one) */
    size_t num_streams;               /* number of entries in streams */
    ctf_precision precision;          /* element type of the delivered values */
    bool randomize;                   /* false: file order in every sweep */
    uint64_t randomization_seed;      /* sweep k uses seed + k */
    uint64_t randomization_window;    /* window size; 0 disables randomization */
    bool window_in_samples;           /* window unit: samples (true) or chunks (false) */
    bool skip_sequence_ids;           /* treat every line as its own sequence (rules 1.4) */
    uint64_t max_errors;              /* errors tolerated over the reader's life (rules 2.3) */
    int trace_level;                  /* 0 errors, 1 also warnings, 2 also info */
    uint64_t chunk_size_bytes;        /* target chunk span in bytes (rules 4.2) */
    bool keep_data_in_memory;         /* keep parsed chunks after their window has passed */
    bool frame_mode;                  /* every sequence must be one sample per stream */
    bool cache_index;                 /* write/load the index cache next to the file */
    uint64_t max_samples;             /* end after this many index samples (or special values) */
    uint64_t max_sweeps;              /* end after this many sweeps; CTF_INFINITELY_REPEAT: none,
                                       * CTF_FULL_DATA_SWEEP: one (as for max_samples) */
    size_t truncation_length;         /* truncated BPTT length in samples; 0 off (rules 6.6) */
    size_t num_workers;               /* number of workers sharing the data (>= 1) */
    size_t worker_rank;               /* this worker, < num_workers */
    size_t num_threads;               /* background parse threads (default: cores); 0 = caller */
    size_t prefetch_chunks;           /* chunks parsed ahead of the consumer (CTF_PREFETCH_AUTO:
                                       * 2 * num_threads + 2) */
    ctf_remote_options remote;        /* endpoint, credentials and caches for remote paths */
    ctf_log_fn log;                   /* warning/info sink; NULL = no logging */
    void *log_user;                   /* passed to log */
    /* Indexing a file by scanning it (no usable index cache) reports its progress here, on the
     * calling thread: bytes scanned and bytes to scan, per file. A non-zero return cancels the
     * open (CTF_EINVAL, "indexing cancelled"). NULL: none. Not part of the fingerprint. */
    ctf_progress_fn progress;
    void *progress_user;              /* passed to progress */
    const ctf_mix_part *mix;          /* a mix of data sets (num_mix > 0 replaces path, paths
                                       * and joins; streams are the mix's); see ctf_mix_part */
    size_t num_mix;
    /* The chunk cache (docs/chunk-cache.md): a directory where each parsed text chunk is kept
     * in CBF's chunk layout, so that later sweeps and later opens decode it instead of parsing
     * it again. NULL: none (the default). Not part of the fingerprint: it never changes what
     * is delivered. */
    const char *chunk_cache;
    uint64_t chunk_cache_limit;       /* bytes the directory may hold (least recently used
                                       * entries go first); 0: no limit */
    /* The bad-records file (docs/reliability.md, "Quarantine"): with max_errors > 0, each
     * record skipped for an error is written there as one JSON line (file, line, column, byte
     * offset, error, raw text); the file appears whole at this path at the end of the data and
     * when the reader is freed.
     * NULL: none (the default). Not part of the fingerprint. */
    const char *bad_records;
} ctf_config;

/* ctf_config_init(cfg):
 * Fills cfg with the defaults of rules 3: float, randomize, seed 0, window 128 chunks, maxErrors 0,
 * traceLevel 1, 32 MiB chunks, one worker, infinite repetition, one parse thread per core and
 * CTF_PREFETCH_AUTO chunks parsed ahead (2 * num_threads + 2 of the num_threads at open). */
void ctf_config_init(ctf_config *cfg);

/* ctf_config_validate(cfg, err):
 * Checks a configuration without touching the file: missing path or streams, dim 0 or above
 * CTF_MAX_DENSE_DIM / CTF_MAX_SPARSE_DIM, duplicate names or aliases, two definesMBSize streams,
 * both max_samples and max_sweeps, frame mode with truncation, a rank outside the workers, more
 * than CTF_MAX_THREADS threads, a chunk size of 0. Messages name the parameter.
 * @return : 0, or CTF_EINVAL with err filled. */
int ctf_config_validate(const ctf_config *cfg, ctf_error *err);

/*======================================================================
 * Reader parameters: one table (lib/config/params.def)
 *====================================================================*/

/* Every scalar reader parameter of ctf_config is one row of a table that says how each front
 * end spells it (BrainScript key, ctfio flag, Python keyword), its default and its range. The
 * BrainScript mapping, the command-line tool and the Python extension all parse and check
 * through it, so one parameter is checked by one rule and named the same way everywhere. */
typedef enum ctf_param_kind {
    CTF_PARAM_BOOL,      /* true / false (text: true, false, 1, 0; any case) */
    CTF_PARAM_UINT,      /* an integer in [min, max] */
    CTF_PARAM_LIMIT,     /* as UINT; text "infinite" is CTF_INFINITELY_REPEAT */
    CTF_PARAM_PRECISION  /* "float" / "float32" (CTF_FLOAT32), "double" / "float64" */
} ctf_param_kind;

typedef struct ctf_param {
    const char *field;       /* the ctf_config member; also the keyword of _ctfio.Reader */
    const char *bs_key;      /* key of a CNTK reader section, or NULL */
    const char *cli_flag;    /* "--seed", or NULL */
    const char *py_keyword;  /* keyword of ctfio.MinibatchSource, or NULL */
    ctf_param_kind kind;
    bool cli_switch;         /* the flag takes no value: it sets true */
    bool fingerprint;        /* enters the configuration hash checkpoints are checked against */
    uint64_t def;            /* what ctf_config_init sets */
    const char *def_text;    /* the default in words when it is worked out later, or NULL */
    uint64_t min, max;       /* the range (an int field: min and max fit an int) */
    const char *help;        /* one line */
} ctf_param;

/* ctf_param_count() / ctf_param_at(i): the table, in its order; NULL past the end. */
size_t ctf_param_count(void);
const ctf_param *ctf_param_at(size_t i);

/* ctf_param_find(name): the row whose field, BrainScript key (any case), flag or Python
 * keyword is name, or NULL. */
const ctf_param *ctf_param_find(const char *name);

/* ctf_param_get(cfg, p): the parameter's value as an integer (bools 0/1, precision the enum). */
uint64_t ctf_param_get(const ctf_config *cfg, const ctf_param *p);

/* ctf_param_set(cfg, p, name, value, err):
 * Sets the parameter after checking its range; `name` is how the caller's user spelled it and
 * starts the message ("--window: must be ..."). cfg is untouched on failure.
 * @return : 0, or CTF_EINVAL. */
int ctf_param_set(ctf_config *cfg, const ctf_param *p, const char *name, uint64_t value,
                  ctf_error *err);

/* ctf_param_parse(cfg, p, name, text, err):
 * As ctf_param_set from text as the command line and configuration files write it.
 * @return : 0, or CTF_EINVAL. */
int ctf_param_parse(ctf_config *cfg, const ctf_param *p, const char *name, const char *text,
                    ctf_error *err);

/* ctf_workers_check(num_workers, worker_rank, err):
 * The rule for a worker partition, in one place: num_workers >= 1 and worker_rank <
 * num_workers. The reader, the configuration and the Python layer all check with it.
 * @return : 0, or CTF_EINVAL. */
int ctf_workers_check(size_t num_workers, size_t worker_rank, ctf_error *err);

/*======================================================================
 * CNTK configuration files (BrainScript; docs/config.md)
 *====================================================================*/

/* A parsed BrainScript reader configuration. It owns every string a ctf_config filled from it
 * points to, so it must outlive that ctf_config (ctf_reader_open copies what it keeps, so the
 * document may be freed right after). */
typedef struct ctf_bsconfig ctf_bsconfig;

/* ctf_bsconfig_load(path, section, overrides, num_overrides, out, err):
 * Reads a whole CNTK configuration file (networks, SGD and NDL sections are parsed, never run;
 * includes are followed) and evaluates its reader: `section` names the top-level block that
 * holds `reader`, such as "Train", or a dotted path to a block ("train.cvreader"); NULL: the
 * top-level `reader`, or that of the only block that has one. overrides are "KEY=VALUE"
 * strings from the command line: they define $KEY$ substitutions and override reader
 * parameters (a dotted KEY addresses a nested entry, e.g. "input.features.dim=10"). The
 * composite form's first CTF deserializer fills path/paths/streams; the others become joins.
 * Relative data file paths are kept as written (they resolve against the current directory).
 * @return : 0 and *out set, or CTF_EINVAL / CTF_EIO / CTF_ENOMEM with err naming the config file
 *           and line. */
int ctf_bsconfig_load(const char *path, const char *section, const char *const *overrides,
                      size_t num_overrides, ctf_bsconfig **out, ctf_error *err);

/* ctf_bsconfig_parse(text, len, name, section, overrides, num_overrides, out, err):
 * As ctf_bsconfig_load, from a buffer; `name` is used as the path in error messages. */
int ctf_bsconfig_parse(const char *text, size_t len, const char *name, const char *section,
                       const char *const *overrides, size_t num_overrides, ctf_bsconfig **out,
                       ctf_error *err);

/* ctf_bsconfig_apply(doc, cfg, err):
 * Sets every reader parameter the document gives on cfg (which should come from
 * ctf_config_init), validating names and values; strings point into doc.
 * @return : 0, or CTF_EINVAL naming the parameter and its line. */
int ctf_bsconfig_apply(const ctf_bsconfig *doc, ctf_config *cfg, ctf_error *err);

/* ctf_bsconfig_free(doc): frees a document; NULL is a no-op. */
void ctf_bsconfig_free(ctf_bsconfig *doc);

/*======================================================================
 * Counters (rules 2.7: nothing is lost silently)
 *====================================================================*/

#define CTF_MAX_STREAMS 64
/* ctf_reader_next refuses (CTF_EINVAL) a minibatch that would span more sweeps than this
 * (max(num_samples, truncation_length) samples, within the data limit). */
#define CTF_MAX_MB_SWEEPS 65536u

typedef struct ctf_stream_stats {
    uint64_t samples;          /* samples delivered or checked */
    uint64_t nonzeros;         /* sparse: index:value pairs; dense: samples * dim */
    uint64_t dropped_samples;  /* samples dropped because of an error */
} ctf_stream_stats;

typedef struct ctf_stats {
    uint64_t sequences;          /* sequences parsed */
    uint64_t errors;             /* errors counted against maxErrors */
    uint64_t warnings;           /* warnings reported (whether shown or not) */
    uint64_t dropped_rows;       /* rows (lines) that yielded no sample */
    uint64_t dropped_sequences;  /* sequences dropped as a whole */
    uint64_t chunks_loaded;      /* chunk parses performed */
    uint64_t chunks_resident;    /* parsed chunks held in memory now */
    uint64_t chunks_resident_peak; /* the most parsed chunks held at once */
    uint64_t bytes_resident;     /* bytes of parsed data held now */
    uint64_t bytes_resident_peak;  /* the most bytes of parsed data held at once */
    size_t num_streams;          /* entries used in streams[] */
    ctf_stream_stats streams[CTF_MAX_STREAMS]; /* per stream, in config order (the primary
                                                * deserializer's, then each join's) */
    uint64_t keys_missing;       /* joins: primary sequences some joined deserializer lacks
                                  * (dropped at open, also in dropped_sequences) */
    uint64_t keys_unmatched;     /* joins: joined sequences whose key the primary lacks */
    uint64_t bad_records;        /* records written to the bad-records file */
} ctf_stats;

/*======================================================================
 * Index (rules 4)
 *====================================================================*/

typedef struct ctf_index ctf_index;

typedef struct ctf_index_info {
    uint64_t file_size;       /* bytes of the data file when indexed */
    uint64_t sequences;       /* sequences found */
    uint64_t samples;         /* index samples over all sequences (rules 0) */
    uint64_t lines;           /* physical lines in the file */
    uint64_t chunks;          /* chunks built with the configured chunk size */
    uint64_t max_sequence_samples; /* index samples of the longest sequence */
    bool line_mode;           /* every line its own sequence (rules 1.4) */
    bool from_cache;          /* loaded from the index cache instead of scanning */
    uint64_t min_sequence_samples; /* index samples of the shortest sequence */
    /* Sequences by length: bucket 0 holds those of 0 samples, bucket b >= 1 those of
     * 2^(b-1) <= samples < 2^b (counted while indexing). */
    uint64_t length_buckets[65];
    /* Bytes the index holds in memory: its chunk table (a few dozen bytes per chunk) and its
     * options; a chunk's sequence records are re-made when a chunk is read, not kept. */
    uint64_t index_bytes;
    /* Sequences whose id was already used by lines before other ids (rules 1.5: CNTK's
     * documentation calls such a file invalid; ctfio reads them as separate sequences, warns
     * once per file and counts every one here). */
    uint64_t repeated_ids;
} ctf_index_info;

/* ctf_index_build(cfg, out, err):
 * Indexes cfg->path (rules 4.1-4.2), using and refreshing the index cache when cfg->cache_index.
 * @return : 0 and *out set, or CTF_EIO / CTF_EPARSE (fatal format problems) / CTF_ENOMEM. */
int ctf_index_build(const ctf_config *cfg, ctf_index **out, ctf_error *err);

/* ctf_index_get_info(idx, info): fills info. */
void ctf_index_get_info(const ctf_index *idx, ctf_index_info *info);

/* ctf_index_sequence_samples(idx, i): index samples of sequence i in file order. The index
 * keeps only its chunk table: the chunk holding i is re-made (from the index cache or by
 * re-scanning its bytes) unless it is the chunk of the previous call, so walk i in order;
 * for the distribution of lengths use ctf_index_info.length_buckets. 0 when i is out of range
 * or the chunk cannot be read. */
uint64_t ctf_index_sequence_samples(const ctf_index *idx, size_t i);

/* ctf_index_cache_path(data_path, buf, cap): the cache file used for a data file. @return buf. */
char *ctf_index_cache_path(const char *data_path, char *buf, size_t cap);

/* ctf_index_cache_file(idx): the index cache file this index used or wrote: beside a local
 * file (PATH.ctfidx), in the cache directory for a remote object (named by a hash of its
 * endpoint, URL, ETag and size). NULL when it has none (cache_index off, or a remote object
 * without a cache directory). Valid while idx lives. */
const char *ctf_index_cache_file(const ctf_index *idx);

/* ctf_index_verify(idx, err):
 * Reads the whole data file and checks it against the index, chunk by chunk, as a chunk load
 * does: the file's size, modification time and inode, and the sequences the indexing rule
 * finds in each chunk's bytes. An index loaded from the cache is thereby checked against the
 * data, not only against the cache header. On a mismatch the index cache, when it holds this
 * index, is invalidated (its header cleared), so that the next ctf_index_build scans the file
 * again.
 * @return : 0, CTF_ECHANGED (naming the file and where), CTF_EIO, CTF_ENOMEM. */
int ctf_index_verify(const ctf_index *idx, ctf_error *err);

/* ctf_index_free(idx): NULL is a no-op. */
void ctf_index_free(ctf_index *idx);

/*======================================================================
 * CNTK's binary format (CBF; docs/cbf.md)
 *
 * A reader opens a CBF file (written by CNTK's ctf2bin.py or `ctfio convert cbf`) wherever it
 * opens a CTF file: the file is recognised by its magic number. Its streams are found by alias
 * (else name) among the file's; kind and dimension must match the file's, and the precision its
 * element type. A sequence's key is its number in the file. A chunk is copied into memory the
 * reader owns, never mapped: what was loaded does not change when the file does, and a file
 * changed or cut short during a run is CTF_ECHANGED at the next chunk load, never a crash.
 *====================================================================*/

/* ctf_cbf_streams(path, streams, num_streams, precision, err):
 * The streams a CBF file holds, in file order (name, dim, is_sparse; alias NULL), and the
 * precision of its first stream (precision may be NULL). Free with ctf_cbf_streams_free.
 * @return : 0, or CTF_EPARSE (not a valid CBF file), CTF_EIO, CTF_ENOMEM. */
int ctf_cbf_streams(const char *path, ctf_stream_def **streams, size_t *num_streams,
                    ctf_precision *precision, ctf_error *err);
void ctf_cbf_streams_free(ctf_stream_def *streams, size_t num_streams);
/* ctf_cbf_streams_at(path, remote, ...): ctf_cbf_streams of a local path or of a remote object
 * (s3://, http(s)://) read with the remote options (range requests for its first bytes and its
 * header). remote may be NULL for a local path. A path that is not CBF is CTF_EPARSE. */
int ctf_cbf_streams_at(const char *path, const ctf_remote_options *remote, ctf_stream_def **streams,
                       size_t *num_streams, ctf_precision *precision, ctf_error *err);

typedef struct ctf_cbf_write_result {
    uint64_t sequences;      /* sequences written */
    uint64_t samples;        /* their lengths' sum (a sequence: its longest stream) */
    uint64_t nonzeros;       /* sparse entries written */
    uint64_t chunks;         /* CBF chunks written */
    uint64_t bytes_written;  /* the output's size */
} ctf_cbf_write_result;

/* ctf_cbf_write(cfg, out_path, chunk_size, precision, result, err):
 * Writes the CTF file cfg describes (path, or paths with one file; streams; skipSequenceIds,
 * frameMode) as the CBF file out_path: the streams under their names, in cfg's order, values
 * stored at `precision`, chunks of about chunk_size bytes (each closed once it holds that
 * much). The sequences and values are those a reader of cfg delivers; input with an error is
 * refused (its first error). Written to a temporary file of its own next to OUT and renamed
 * (as ctf_convert_file); out_path must not be the input.
 * result may be NULL. @return : 0, CTF_EINVAL, CTF_EIO, CTF_EPARSE, CTF_ELIMIT, CTF_ENOMEM,
 * CTF_ECHANGED (the input changed meanwhile). */
int ctf_cbf_write(const ctf_config *cfg, const char *out_path, uint64_t chunk_size,
                  ctf_precision precision, ctf_cbf_write_result *result, ctf_error *err);

/*======================================================================
 * Reader
 *====================================================================*/

typedef struct ctf_reader ctf_reader;
typedef struct ctf_minibatch ctf_minibatch;

/* ctf_reader_open(cfg, out, err):
 * Validates cfg, copies everything it keeps, indexes the file (or loads the cache) and prepares
 * the first sweep. Parsing happens lazily, chunk by chunk, on ctf_reader_next.
 * @return : 0 and *out set, or a CTF_E* code with err filled. */
int ctf_reader_open(const ctf_config *cfg, ctf_reader **out, ctf_error *err);

/* ctf_reader_next(reader, num_samples, out):
 * Cuts the next global minibatch of num_samples index samples from the timeline (rules 6) and
 * returns this worker's share of it (rules 7) in *out, owned by the caller. At the end of the data
 * returns 0 with *out == NULL; every later call does the same until a restore. A worker that owns
 * no sequence of this minibatch gets a minibatch with zero sequences (not NULL).
 * With prefetch threads (a reader of one data set, without truncation_length) the same call is
 * then run ahead on a thread of the reader's own while the caller works: a following call for
 * the same num_samples takes its result; any other call puts the reader back where the caller
 * is first, undoing it. What each call returns (minibatch, status, counters, log lines) is
 * what a reader without threads returns; log lines reach cfg.log on the calling thread.
 * @return : 0, or a CTF_E* code; the reader's error record says where. After an error other than
 *           CTF_EINVAL the reader can only be freed. */
int ctf_reader_next(ctf_reader *reader, uint64_t num_samples, ctf_minibatch **out);

/* ctf_reader_next_within(reader, num_samples, period, out):
 * ctf_reader_next for a driver whose epochs end at every multiple of `period` timeline samples
 * (0: never): the minibatch asks for min(num_samples, period - position % period), with position
 * the reader's position when it is made, so no minibatch crosses an epoch's end. A driver that
 * cuts its requests at its epochs' ends itself asks for another size before each end, and every
 * such change undoes the read-ahead; with the cut done here it asks for the same num_samples
 * every step and the read-ahead reads what the next call takes (it matches num_samples and
 * period). ctf_reader_next(r, n, out) is ctf_reader_next_within(r, n, 0, out).
 * @return : as ctf_reader_next. */
int ctf_reader_next_within(ctf_reader *reader, uint64_t num_samples, uint64_t period,
                           ctf_minibatch **out);

/* ctf_reader_set_worker(reader, num_workers, rank):
 * Changes the partition for the following calls (rules 8.3: the order is kept).
 * @return : 0 or CTF_EINVAL. */
int ctf_reader_set_worker(ctf_reader *reader, size_t num_workers, size_t rank);

/* ctf_reader_error(reader): the last error record (code CTF_OK if none); read it after a call
 * that failed (a read-ahead may be filling it while the caller works). */
const ctf_error *ctf_reader_error(const ctf_reader *reader);

/* ctf_reader_get_stats(reader, stats): counters since open. */
void ctf_reader_get_stats(const ctf_reader *reader, ctf_stats *stats);

/* ctf_reader_get_io_counters(reader, out): the remote requests of every deserializer so far
 * (all zero for local files). */
void ctf_reader_get_io_counters(const ctf_reader *reader, ctf_io_counters *out);
/* Where a reader's time goes: counters per stage, always on (ctf_reader_get_perf). Times are
 * nanoseconds of a monotonic clock; bytes are bytes. The consumer is the thread that calls
 * ctf_reader_next: elapsed_ns = next_ns + consumer_ns. Making a minibatch takes wait_ns +
 * cut_ns + pack_ns: inside ctf_reader_next, or, where the next minibatch is read ahead (a
 * reader with prefetch threads), on the read-ahead thread while the consumer works, next_ns
 * then being what the consumer waited for it. The load stages (read, rescan, parse) add up
 * over every thread that loads, the prefetch threads' and the consumer's own loads. New
 * fields are only ever added at the end: a caller passes the size of the struct it was
 * compiled with. */
typedef struct ctf_perf {
    /* The consumer. */
    uint64_t elapsed_ns;      /* from the first ctf_reader_next call to the last return */
    uint64_t next_calls;
    uint64_t next_ns;         /* inside ctf_reader_next (waiting for the read-ahead) */
    uint64_t consumer_ns;     /* between calls: the caller's own work (training) */
    uint64_t wait_ns;         /* blocked for chunk data: waiting for a prefetch thread's load,
                               * or loading the chunk on its own thread */
    uint64_t waits;           /* times it blocked */
    uint64_t cut_ns;          /* the rest of making minibatches: the timeline's cut, the
                               * sweep's order and the sequence records it looks up */
    uint64_t cut_sequences;   /* sequences cut from the timeline (every worker's share) */
    uint64_t cut_samples;     /* index samples the timeline advanced */
    uint64_t pack_ns;         /* copying the picked sequences into minibatches (and the
                               * request's last steps: dropping passed chunks, the look-ahead) */
    uint64_t pack_bytes;      /* bytes delivered: values, indices, offsets */
    uint64_t minibatches;
    /* Opening. */
    uint64_t open_ns;         /* ctf_reader_open, indexing included */
    uint64_t index_ns;        /* building or loading every file's index */
    uint64_t index_bytes;     /* bytes scanned to index (0 for an index from its cache) */
    uint64_t index_cache_hits;   /* files whose index came from the index cache */
    uint64_t index_cache_misses; /* files scanned while cache_index was on */
    /* Loading chunks, every thread. */
    uint64_t read_ns;         /* reading chunk bytes */
    uint64_t read_bytes;
    uint64_t reads;           /* read calls (one per block of a chunk) */
    uint64_t rescan_ns;       /* re-making a chunk's sequence records from its bytes */
    uint64_t parse_ns;        /* parsing values */
    uint64_t parse_bytes;     /* bytes of the chunks parsed to the end */
    uint64_t load_ns;         /* whole loads (the three above and their bookkeeping) */
    uint64_t chunks_loaded;   /* loads completed or failed */
    uint64_t chunks_evicted;  /* parsed chunks the cache let go of */
    uint64_t chunks_resident; /* parsed chunks held now (as ctf_stats) */
    /* Stages other back ends add (0 where they are absent). */
    uint64_t chunk_cache_hits;   /* chunks served from a binary chunk cache */
    uint64_t chunk_cache_misses; /* chunks that cache had to build */
    uint64_t remote_requests;    /* requests to a remote object store */
    uint64_t remote_retries;
    uint64_t remote_bytes;
    uint64_t num_threads;     /* prefetch threads */
    uint64_t prefetch_chunks; /* chunks loaded ahead at most (the resolved setting) */
    uint64_t work_ns;         /* making minibatches, on the consumer's thread or read ahead:
                               * wait_ns + cut_ns + pack_ns, waits outside next excepted */
} ctf_perf;

/* ctf_reader_get_perf(reader, perf, size):
 * Fills the first `size` bytes of perf (pass sizeof(ctf_perf)); a size larger than the
 * library's struct fills the library's part and zeroes the rest. The counters of every
 * thread are summed at the call; the reader's threads keep counting meanwhile.
 * @return : the number of bytes the library knows (its sizeof(ctf_perf)). */
size_t ctf_reader_get_perf(const ctf_reader *reader, ctf_perf *perf, size_t size);

/* The stage that limits a reader's throughput, named by ctf_perf_verdict. */
typedef enum ctf_stage {
    CTF_STAGE_NONE = 0,     /* nothing read yet, or too little to tell */
    CTF_STAGE_CONSUMER = 1, /* the caller: the reader waits for it */
    CTF_STAGE_READ = 2,     /* the consumer waits for chunk reads (storage) */
    CTF_STAGE_PARSE = 3,    /* ... for parsing (and re-making sequence records) */
    CTF_STAGE_CUT = 4,      /* the timeline's cut and record look-ups */
    CTF_STAGE_PACK = 5,     /* copying into minibatches */
    CTF_STAGE_OPEN = 6,     /* opening (indexing) took longer than all the reading since */
} ctf_stage;

typedef struct ctf_verdict {
    ctf_stage stage;
    const char *stage_name; /* "consumer", "read", "parse", "cut", "pack", "open", "none" */
    double share;           /* the stage's share of the consumer's elapsed time (open: of
                             * open + elapsed), 0..1 */
    char text[320];         /* one line: what limits, its share, what to change */
} ctf_verdict;

/* ctf_perf_verdict(perf, size, out):
 * Names the stage that limits throughput from counters of ctf_reader_get_perf (size: as
 * passed there), with its share of the consumer's time and the setting to change, e.g.
 * "waiting for parse: 71% of the consumer's time; raise num_threads (now 2)" or "the consumer
 * is the bottleneck: the reader is idle 80% of the time". The rule is in docs/performance.md. */
void ctf_perf_verdict(const ctf_perf *perf, size_t size, ctf_verdict *out);

/* ctf_reader_samples_per_sweep(reader): index samples in one sweep of all the data (every file
 * of a corpus; for joined deserializers the joined sequences), the checkpoint's
 * "samples_per_sweep": a minibatch's position divided by it is its sweep. 0 for a mix, whose
 * sweep ends when every part of weight > 0 has finished one more sweep of its own (not at a
 * fixed number of samples): its minibatches' sweep and end_of_sweep say where. */
uint64_t ctf_reader_samples_per_sweep(const ctf_reader *reader);

/* ctf_reader_index(reader): the index of the reader's (first) data file (owned by the reader).
 * A corpus has one index per file: ctf_reader_file_index. */
const ctf_index *ctf_reader_index(const ctf_reader *reader);

/* ctf_reader_num_files(reader): the files of the (primary) deserializer, after pattern
 * expansion: 1 for a single path. A mix lists each part's primary files in part order.
 * ctf_minibatch_files() indexes this list. */
size_t ctf_reader_num_files(const ctf_reader *reader);
/* ctf_reader_file_path(reader, i), ctf_reader_file_index(reader, i): file i's path and index
 * (owned by the reader), or NULL when i >= ctf_reader_num_files(). */
const char *ctf_reader_file_path(const ctf_reader *reader, size_t i);
const ctf_index *ctf_reader_file_index(const ctf_reader *reader, size_t i);

/* ctf_reader_position(reader): the timeline position after the last delivered minibatch. */
uint64_t ctf_reader_position(const ctf_reader *reader);

/* ctf_reader_save_state(reader, buf, cap, len):
 * Writes the checkpoint state, a small JSON text (rules 8.1), snprintf-style: *len receives the
 * length without the NUL; pass cap 0 to learn it.
 * @return : 0, CTF_ELIMIT when cap was too small (buf then holds nothing useful), or CTF_ENOMEM
 *           (the reader is const, so no error record is filled). */
int ctf_reader_save_state(const ctf_reader *reader, char *buf, size_t cap, size_t *len);

/* ctf_reader_state_at(reader, position, buf, cap, len):
 * The checkpoint state the reader had, or will have, at another timeline position (any sweep),
 * as ctf_reader_save_state writes it, without reading or moving anything: for one data set
 * without truncation_length a position is the whole of the timeline's state. Restoring it
 * continues exactly as the uninterrupted run did from there.
 * @return : 0; CTF_ELIMIT as for ctf_reader_save_state; CTF_EINVAL for a mix or truncated BPTT
 *           (their state at another position depends on the data before it) or a position past
 *           CTF_MAX_POSITION. */
int ctf_reader_state_at(const ctf_reader *reader, uint64_t position, char *buf, size_t cap,
                        size_t *len);

/* ctf_reader_restore_state(reader, state, len):
 * Continues from a saved state (rules 8.2). The fingerprint must match this reader's file and
 * configuration; the worker count may differ (elastic restore).
 * @return : 0, or CTF_ESTATE explaining the mismatch field by field. */
int ctf_reader_restore_state(ctf_reader *reader, const char *state, size_t len);

/* ctf_reader_seek(reader, position): continue from a timeline position (the first sequence
 * boundary at or after it). @return : 0; CTF_EINVAL for a position above CTF_MAX_POSITION (the
 * reader is unchanged). */
int ctf_reader_seek(ctf_reader *reader, uint64_t position);

/* ctf_reader_skip(reader, num_samples):
 * Skips a stretch of the global timeline: continues from the first sequence boundary at or
 * after the position plus num_samples, delivering nothing of it (the same on every rank: the
 * position is global). The stretch [from, to) is kept in the checkpoint state ("skipped") and
 * kept by a restore. Where every sequence is one sample, skipping whole chunks reads none of
 * them. Works for a mix (its parts move as its seek moves them).
 * @return : 0; CTF_EINVAL with truncation_length or past CTF_MAX_POSITION (the reader is
 *           unchanged). */
int ctf_reader_skip(ctf_reader *reader, uint64_t num_samples);

/* ctf_reader_cancel(reader):
 * Cancels the reader's remote requests: those in flight stop within about a second (libcurl's
 * progress callback looks at a flag) and every later one fails at once, each with
 * CTF_ECANCELED, never retried. The one function that may be called from any thread while
 * another is inside a call on the reader (Ctrl-C handling, a watchdog): that call then returns
 * CTF_ECANCELED, and the reader can only be freed. Local reads are not interrupted. NULL is a
 * no-op. */
void ctf_reader_cancel(ctf_reader *reader);

/* ctf_reader_free(reader): cancels the remote requests (ctf_reader_cancel: a read-ahead or
 * prefetch thread waiting on a server that does not answer is not waited for), stops the
 * prefetch threads and frees everything; NULL is a no-op. */
void ctf_reader_free(ctf_reader *reader);

/*======================================================================
 * The timeline as pure functions (rules 6.1-6.4, 7.2-7.6)
 *
 * What the reader decides for every minibatch, with the position in and the decision out, for
 * a caller that keeps its own timeline (the Python package's in-memory source). The reader uses
 * these same functions, so such a source cuts and splits exactly as the reader does.
 *====================================================================*/

/* A minibatch being cut: the caller offers the timeline's sequences one by one in timeline
 * order and ctf_cut_offer answers take or stop. */
typedef struct ctf_cut {
    uint64_t request;    /* the global minibatch size K in index samples (> 0) */
    uint64_t limit;      /* the data ends before a sequence starting here; UINT64_MAX: never */
    uint64_t position;   /* the timeline position after the sequences taken */
    uint64_t samples;    /* index samples taken */
    size_t sequences;    /* sequences taken */
} ctf_cut;

/* ctf_cut_start(position, request, limit): a cut of `request` samples starting at `position`
 * (a sequence boundary). */
ctf_cut ctf_cut_start(uint64_t position, uint64_t request, uint64_t limit);

/* ctf_cut_open(cut): whether a further sequence may be offered (false once the position has
 * reached the limit: the data ended, rules 6.4). */
bool ctf_cut_open(const ctf_cut *cut);

/* ctf_cut_offer(cut, samples):
 * Offers the next sequence, of `samples` index samples. The first is always taken; a later one
 * only while the total stays within the request (rules 6.1: nothing further ahead is tried).
 * @return : true and the sequence counted in *cut, or false (the minibatch ends before it). */
bool ctf_cut_offer(ctf_cut *cut, uint64_t samples);

/* ctf_worker_owns(index, num_workers, rank): whether worker `rank` of `num_workers` receives
 * what sits at `index`: a sequence's index in its sweep without randomization, its chunk's
 * randomized position with it (rules 7.3). */
bool ctf_worker_owns(uint64_t index, size_t num_workers, size_t rank);

/* ctf_worker_first(from, num_workers, rank): the first index at or after `from` that worker
 * `rank` owns (the next are every num_workers-th). */
uint64_t ctf_worker_first(uint64_t from, size_t num_workers, size_t rank);

/* ctf_sweep_cut(starts, num_seqs, cut, end_of_sweep, err):
 * Cuts a minibatch from a timeline whose every sweep is the same order of num_seqs sequences:
 * starts[i] is where sequence i begins within the sweep (starts[0] = 0, increasing, and
 * starts[num_seqs] the sweep's samples). cut comes from ctf_cut_start; on return it holds the
 * minibatch's end. *end_of_sweep tells whether the minibatch holds a sweep's last sequence.
 * @return : 0, or CTF_EINVAL (bad starts, a position off a sequence boundary or past
 *           CTF_MAX_POSITION) with err filled and *cut unchanged. */
int ctf_sweep_cut(const uint64_t *starts, size_t num_seqs, ctf_cut *cut, bool *end_of_sweep,
                  ctf_error *err);

/* ctf_sweep_boundary(starts, num_seqs, position): the first sequence boundary at or after
 * `position` (where a restore continues, rules 8.2); starts as for ctf_sweep_cut. */
uint64_t ctf_sweep_boundary(const uint64_t *starts, size_t num_seqs, uint64_t position);

/* ctf_sweep_owned(starts, num_seqs, from, to, num_workers, rank, out):
 * The indices within their sweep of the sequences between the boundaries `from` and `to` that
 * worker `rank` owns (rules 7.3 without randomization), in timeline order, into out (room for
 * the sequences cut is always enough). @return : how many. */
size_t ctf_sweep_owned(const uint64_t *starts, size_t num_seqs, uint64_t from, uint64_t to,
                       size_t num_workers, size_t rank, uint64_t *out);

/*======================================================================
 * Minibatches (rules 9)
 *====================================================================*/

/* A read-only view of one stream inside a minibatch. Points into the minibatch. */
typedef struct ctf_stream_view {
    const char *name;            /* the stream's name */
    bool is_sparse;              /* CSR layout below */
    ctf_precision precision;     /* element type of values */
    size_t dim;                  /* values per sample (dense) or index bound (sparse) */
    size_t num_sequences;        /* sequences in this minibatch (same for every stream) */
    size_t num_samples;          /* samples actually parsed for this stream */
    const void *values;          /* dense: num_samples*dim elements; sparse: nnz elements */
    const uint32_t *lengths;     /* samples per sequence, num_sequences entries */
    const int64_t *indptr;       /* sparse: num_samples+1 offsets into indices/values */
    const int32_t *indices;      /* sparse: nnz column indices */
    size_t nnz;                  /* sparse: stored entries */
    /* Dense: samples the end of the file cut short (a file's last line gave fewer than dim
     * values; the rest of the sample reads as zeros): num_short (sample, values given) pairs. */
    size_t num_short;
    const size_t *short_samples;
} ctf_stream_view;

/* Accessors. A minibatch with zero sequences is valid (a worker without data this call). */
size_t ctf_minibatch_num_sequences(const ctf_minibatch *mb);
uint64_t ctf_minibatch_num_samples(const ctf_minibatch *mb);  /* index samples of this share */
size_t ctf_minibatch_num_streams(const ctf_minibatch *mb);
bool ctf_minibatch_end_of_sweep(const ctf_minibatch *mb);     /* it held a sweep's end */
uint64_t ctf_minibatch_position(const ctf_minibatch *mb);     /* timeline position after it */
uint64_t ctf_minibatch_sweep(const ctf_minibatch *mb);        /* sweep of its first sequence */
const uint64_t *ctf_minibatch_keys(const ctf_minibatch *mb);  /* sequence keys */
const uint64_t *ctf_minibatch_lines(const ctf_minibatch *mb); /* 1-based first line per sequence */
/* Per sequence, its file: an index into the reader's file list (ctf_reader_file_path). A key
 * identifies a sequence within its file; over a corpus (file, key) does, and (file, line)
 * locates it. With joins the file is the primary deserializer's. */
const uint32_t *ctf_minibatch_files(const ctf_minibatch *mb);

/* ctf_minibatch_stream(mb, i, view): fills view for stream i (config order).
 * @return : 0, or CTF_EINVAL if i is out of range. */
int ctf_minibatch_stream(const ctf_minibatch *mb, size_t i, ctf_stream_view *view);

/* ctf_format_double(v, buf, cap) / ctf_format_float(v, buf, cap): the shortest decimal that
 * reads back as exactly v in its precision, JSON-compatible: +inf and -inf print as 1e999 and
 * -1e999 (JSON readers round them back to infinities), nan as null. 32 bytes always suffice.
 * @return : the length written (snprintf-style). */
int ctf_format_double(double v, char *buf, size_t cap);
int ctf_format_float(float v, char *buf, size_t cap);

/* ctf_minibatch_has_files(mb): the minibatch comes from a reader of several files (a corpus),
 * so that ctf_minibatch_files() tells its sequences' files apart. */
bool ctf_minibatch_has_files(const ctf_minibatch *mb);

/* ctf_minibatch_free(mb): NULL is a no-op. Any thread, any time (rules 4): while its reader
 * lives, the memory goes back to the reader for reuse, else it is freed. */
void ctf_minibatch_free(ctf_minibatch *mb);

/*======================================================================
 * Samples from user code (record.c)
 *====================================================================*/

/* A sample that user code yields (a PaddlePaddle-style provider) enters the library as one
 * record: a compact, self-describing byte string holding every input ("slot") of the sample.
 * Whoever reads the user's objects writes records with the ctf_record_* calls; a list of
 * records becomes one batch's arrays with ctf_records_measure and ctf_records_pack, which check
 * every record against the slots first (a damaged or foreign record is CTF_EPARSE, never a read
 * out of bounds). docs/providers.md describes the slots and the arrays. */
typedef enum ctf_slot_kind {
    CTF_SLOT_DENSE = 0, /* dim values per step */
    CTF_SLOT_SPARSE_BINARY = 1, /* indices per step, every value 1 */
    CTF_SLOT_SPARSE = 2, /* (index, value) pairs per step */
    CTF_SLOT_INTEGER = 3, /* one int64 per step (dim is its range) */
} ctf_slot_kind;

typedef enum ctf_slot_seq {
    CTF_SLOT_NO_SEQUENCE = 0, /* one step per sample */
    CTF_SLOT_SEQUENCE = 1, /* any number of steps */
    CTF_SLOT_SUB_SEQUENCE = 2, /* sub-sequences of steps */
} ctf_slot_seq;

#define CTF_MAX_SLOTS 1024

typedef struct ctf_slot {
    int kind; /* ctf_slot_kind */
    int seq; /* ctf_slot_seq */
    int64_t dim; /* 1 <= dim < 2**31 */
} ctf_slot;

/* A record being written: starts in the caller's (stack) buffer, moves to the heap when it
 * grows. Offsets stay valid across growth; pointers into p do not. */
typedef struct ctf_record_writer {
    char *p;
    size_t len, cap;
    void *stack;
    size_t stack_cap;
    size_t section; /* offset of the open section's header */
    bool dbl; /* values are double (else float) */
} ctf_record_writer;

/* ctf_record_writer_init(w, stack, cap): an empty writer over the caller's buffer (may be NULL).
 * ctf_record_writer_free(w): releases the heap buffer; the writer can be used again. */
void ctf_record_writer_init(ctf_record_writer *w, void *stack, size_t cap);
void ctf_record_writer_free(ctf_record_writer *w);

/* ctf_record_begin(w, nslots, dbl): starts a record of nslots slots (the writer's old content
 * is dropped). Then per slot k, in order: ctf_record_section_begin(w, k), its payload,
 * ctf_record_section_end(w, slot, steps, subs). @return : 0, CTF_EINVAL (nslots outside 1 to
 * CTF_MAX_SLOTS), CTF_ENOMEM. */
int ctf_record_begin(ctf_record_writer *w, size_t nslots, bool dbl);
int ctf_record_section_begin(ctf_record_writer *w, size_t k);
int ctf_record_section_end(ctf_record_writer *w, const ctf_slot *slot, int64_t steps, int64_t subs);

/* ctf_record_grow(w, n): appends n zero bytes (a dense step: dim values; an integer step: one
 * int64; a sub-sequence slot, right after section_begin: one int64 length per sub-sequence).
 * @return : their offset in w->p, or SIZE_MAX when out of memory. */
size_t ctf_record_grow(ctf_record_writer *w, size_t n);

/* ctf_record_sparse_step(w, nnz, valued, &values): appends one sparse step of nnz non-zeros.
 * @return : the offset of its nnz int32 indices (each must be in [0, dim)), *values the offset
 * of its nnz values when valued; SIZE_MAX when out of memory. */
size_t ctf_record_sparse_step(ctf_record_writer *w, size_t nnz, bool valued, size_t *values);

/* ctf_record_dense_items(w, format, items, n): appends n dense values converted from n items
 * of one type, named by its Python struct-module code (an optional '@', '=' or '<', then one
 * of f d b B h H i I l L q Q: NumPy's and the buffer protocol's names).
 * @return : 0, CTF_EINVAL for another format (nothing appended), CTF_ENOMEM. */
int ctf_record_dense_items(ctf_record_writer *w, const char *format, const void *items, size_t n);

typedef struct ctf_record_ref {
    const void *data;
    size_t len;
} ctf_record_ref;

/* One slot's totals over a batch. */
typedef struct ctf_batch_size {
    int64_t steps; /* time steps (samples) */
    int64_t subs; /* sub-sequences */
    int64_t nnz; /* sparse non-zeros */
} ctf_batch_size;

/* One slot's output arrays, allocated by the caller from ctf_batch_size: data holds steps * dim
 * values (dense), steps int64 (integer) or nnz values (sparse); indptr steps + 1 and indices nnz
 * (sparse); seq_starts n + 1 (sequence slots); sub_starts subs + 1 (sub-sequence slots). The
 * others are NULL. Start positions count time steps. */
typedef struct ctf_batch_out {
    void *data;
    int64_t *indptr;
    int32_t *indices;
    int64_t *seq_starts;
    int64_t *sub_starts;
} ctf_batch_out;

/* ctf_records_measure(recs, n, slots, nslots, dbl, sizes, err): checks every record against
 * the slots and fills sizes[nslots]. @return : 0, CTF_EINVAL (bad slots, or records written
 * in the other precision), CTF_EPARSE (a record that does not fit, naming its position). */
int ctf_records_measure(const ctf_record_ref *recs, size_t n, const ctf_slot *slots, size_t nslots,
                        bool dbl, ctf_batch_size *sizes, ctf_error *err);

/* ctf_records_pack(recs, n, slots, nslots, dbl, outs): copies the records, measured by a
 * successful ctf_records_measure, into outs[nslots]. Takes no lock and calls nothing: safe to
 * run while the caller's other threads go on. */
void ctf_records_pack(const ctf_record_ref *recs, size_t n, const ctf_slot *slots, size_t nslots,
                      bool dbl, const ctf_batch_out *outs);

/*======================================================================
 * The pool of samples from user code (pool.c)
 *====================================================================*/

/* One pass of a provider: records pushed in from the user's sources, drawn into batches. Each
 * record weighs some units (1 per sample by default). The pool is refilled (through the
 * caller's fill function) whenever it holds fewer than min_units and the pass has data left,
 * up to 31 units past that and never past max_units; a record heavier than max_units enters
 * only an empty pool. Shuffling draws at random (and ctf_pool_pick picks the source that
 * feeds next at random), from streams that depend on (seed, pass) only; otherwise the pool is
 * first in, first out. docs/providers.md gives the rules. */
typedef struct ctf_pool ctf_pool;

typedef struct ctf_pool_options {
    uint64_t seed;
    uint64_t pass; /* the pass number: each pass has its own streams */
    bool shuffle;
    int64_t min_units; /* -1: the whole pass (bounded by max_units); 0 acts as 1 */
    int64_t max_units; /* -1: unbounded */
    bool can_over; /* the record that overflows a batch joins it (else waits) */
} ctf_pool_options;

/* The fill function: pushes records (ctf_pool_push) up to ctf_pool_goal units, or fewer when
 * the pool is full or a source must be waited for. @return : 0, 1 when the pass has no data
 * left, or a negative code to stop (the batch in progress ends; an empty one fails with it). */
typedef int (*ctf_pool_fill_fn)(void *user, ctf_pool *pool);

/* ctf_pool_open(opt, out, err) / ctf_pool_free(pool). @return : 0, CTF_EINVAL, CTF_ENOMEM. */
int ctf_pool_open(const ctf_pool_options *opt, ctf_pool **out, ctf_error *err);
void ctf_pool_free(ctf_pool *pool);

/* ctf_pool_files(pool, num_files, num_workers, rank, out, n): the pass's file order (shuffled
 * when shuffling), then every num_workers-th file from rank; out holds num_files entries.
 * @return : 0, CTF_EINVAL (rank >= num_workers), CTF_ENOMEM. */
int ctf_pool_files(const ctf_pool *pool, size_t num_files, size_t num_workers, size_t rank,
                   size_t *out, size_t *n);

/* ctf_pool_pick(pool, n): which of n open sources feeds the pool next (0 unless shuffling). */
size_t ctf_pool_pick(ctf_pool *pool, size_t n);

/* ctf_pool_push(pool, rec, len, units): copies one record in; units 0 counts as 1.
 * @return : 0 or CTF_ENOMEM. */
int ctf_pool_push(ctf_pool *pool, const void *rec, size_t len, uint64_t units);

typedef struct ctf_pool_info {
    uint64_t units, samples; /* held now (a record kept for the next batch not counted) */
    bool empty; /* nothing held, nothing kept */
    uint64_t goal; /* what a fill aims at */
    uint64_t room; /* units that still fit (UINT64_MAX - units when unbounded) */
    uint64_t peak_units, peak_samples;
    uint64_t delivered, batches;
} ctf_pool_info;
void ctf_pool_get_info(const ctf_pool *pool, ctf_pool_info *info);

/* ctf_pool_next(pool, size, fill, user, recs, n, units): draws the next batch of up to size
 * units (a first record heavier than size comes alone). *recs points at its n records, owned
 * by the pool until the next call. @return : 0 (n = 0 at the end of the pass), or the fill
 * function's code when it failed before a record was drawn. */
int ctf_pool_next(ctf_pool *pool, uint64_t size, ctf_pool_fill_fn fill, void *user,
                  const ctf_record_ref **recs, size_t *n, uint64_t *units);

/* ctf_pool_at_end(pool, fill, user): 1 when the pass has nothing left, 0 if it has,
 * or the fill function's negative code. */
int ctf_pool_at_end(ctf_pool *pool, ctf_pool_fill_fn fill, void *user);

/* ctf_pool_skip(pool, count, fill, user, skipped): draws and drops count records (restoring a
 * position: a pass is one fixed sequence of records). @return : 0 or the fill function's
 * negative code. */
int ctf_pool_skip(ctf_pool *pool, uint64_t count, ctf_pool_fill_fn fill, void *user,
                  uint64_t *skipped);

/*======================================================================
 * Converters into CTF (convert.c)
 *====================================================================*/

/* A converter reads a text file of another format once or twice, front to back, and writes a
 * CTF file: memory stays bounded by the longest input line, whatever the file's size. It never
 * prints; it reports progress through a callback and problems through the error record
 * (file, line, column, byte offset). The output is written to a temporary file of its own,
 * created exclusively next to OUT ("OUT.PID-XXXX.part"), and renamed over OUT when complete, so
 * a failed or cancelled conversion leaves no half file and the old OUT as it was, and two
 * conversions to one OUT leave one of them whole. An OUT that is the input (the same path or the
 * same file under another name) is refused; an OUT that is a symbolic link has the file it names
 * replaced; an existing OUT that is not a regular file (/dev/stdout, a pipe) is written in place.
 * See docs/convert.md. */
typedef enum ctf_convert_format {
    CTF_CONVERT_LIBSVM = 1, /* "label [qid:Q] index:value ... [# comment]" */
    CTF_CONVERT_CSV = 2, /* delimited numeric columns, some of them labels */
} ctf_convert_format;

/* Progress (ctf_progress_fn, with the configuration): bytes of input processed so far (over all
 * passes) and the total (file size times the number of passes). A non-zero return cancels the
 * conversion (CTF_EINVAL, "cancelled"). */

typedef struct ctf_convert_options {
    ctf_convert_format format;
    const char *features_name; /* the output's name for the features; NULL: "features" */
    const char *labels_name; /* ... for the labels; NULL: "labels" */
    /* LibSVM */
    size_t dim; /* features' dim; 0: the largest index + 1 (a first pass) */
    int index_base; /* 0 or 1; -1: automatic (1 unless an index 0 appears) */
    size_t classes; /* 0: labels dense of dim 1; K: one-hot sparse of dim K */
    /* CSV */
    const char *label_columns; /* comma-separated 0-based column numbers, or header names */
    char delimiter; /* 0: ',' */
    bool header; /* the first line names the columns */
    ctf_progress_fn progress; /* NULL: none */
    void *progress_user;
} ctf_convert_options;

typedef struct ctf_convert_result {
    uint64_t rows; /* data lines converted */
    uint64_t sequences; /* sequences written (rows, or queries with qid) */
    uint64_t bytes_read; /* input size */
    uint64_t bytes_written; /* output size */
    size_t features_dim, labels_dim;
    bool features_sparse, labels_sparse;
    bool sequence_ids; /* the output has sequence ids (LibSVM qid), else line mode */
    int index_base; /* LibSVM: the base that was used */
    uint64_t max_sequence_length; /* rows of the longest sequence */
} ctf_convert_result;

/* ctf_convert_file(in_path, out_path, opt, result, err):
 * Converts in_path (LibSVM or CSV, opt->format) into the CTF file out_path. Values are parsed
 * as float64 and written as the shortest text that reads back to the same float64.
 * @return : 0, CTF_EINVAL (options, OUT is the input), CTF_EIO (with the errno's text),
 *           CTF_EPARSE (malformed input, with its line and column), CTF_ENOMEM. */
int ctf_convert_file(const char *in_path, const char *out_path, const ctf_convert_options *opt,
                     ctf_convert_result *result, ctf_error *err);

#ifdef __cplusplus
}
#endif
#endif /* CTFIO_H */
