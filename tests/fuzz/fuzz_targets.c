/*
 * fuzz_targets.c -- the fuzz targets: one entry point per attack surface, each taking arbitrary
 * bytes and never crashing, leaking or tripping a sanitizer, whatever the input.
 *
 *   ctf_fuzz_parse   the bytes as a CTF file, read with a configuration derived from a header
 *   ctf_fuzz_index   the index and its cache: build, reload from cache, corrupt the cache
 *   ctf_fuzz_config  the bytes as a BrainScript configuration, with and without overrides
 *   ctf_fuzz_state   the bytes as a checkpoint state restored into a reader
 *   ctf_fuzz_cbf     the bytes as a CBF file (CNTK's binary format), or as edits of a valid one
 *   ctf_fuzz_record  the bytes as packed records of user samples (providers), or as a batch of them
 *
 * Besides "no crash", the targets check properties that must hold for every input and abort()
 * (a crash the drivers catch) when one fails: minibatch views are well formed (lengths add up,
 * CSR offsets grow, sparse indices < dim), background threads deliver exactly what the caller's
 * thread delivers, an index loaded from the cache equals the scanned one, a restore returns 0 or
 * CTF_ESTATE.
 *
 * Drivers: tests/fuzz/regression.c (a plain main, corpus replay + mutation) and libFuzzer (built
 * by tests/fuzz/fuzz.mk with -DCTF_LIBFUZZER -DCTF_FUZZ_TARGET=parse|index|config|state|cbf|record,
 * one binary per target).
 *
 * Every target also records what it observed (status codes, error and log messages with digits
 * and quoted text removed, counts by order of magnitude) in ctf_fuzz_events, which the
 * regression driver uses as cheap feedback: a mutated input that shows an event not seen before
 * joins its in-memory corpus.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "dump_json.h"
#include "reader/pipeline.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

const ctf_fuzz_target ctf_fuzz_targets[] = {
    {"parse", ctf_fuzz_parse}, {"index", ctf_fuzz_index}, {"config", ctf_fuzz_config},
    {"state", ctf_fuzz_state}, {"cbf", ctf_fuzz_cbf},     {"record", ctf_fuzz_record},
};
const size_t ctf_fuzz_num_targets = sizeof ctf_fuzz_targets / sizeof ctf_fuzz_targets[0];
uint64_t ctf_fuzz_events[CTF_FUZZ_MAX_EVENTS];
size_t ctf_fuzz_num_events;

/*======================================================================
 * Helpers
 *====================================================================*/

#define FUZZ_CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "fuzz check failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__); \
            fputc('\n', stderr); \
            abort(); \
        } \
    } while (0)

/* Records one observed event (the regression driver keeps inputs that show a new one). */
static void sig_event(uint64_t v)
{
    uint64_t h = v * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
    if (ctf_fuzz_num_events < CTF_FUZZ_MAX_EVENTS) ctf_fuzz_events[ctf_fuzz_num_events++] = h;
}

/* An event for a count, by order of magnitude. */
static void sig_count(uint64_t what, uint64_t v)
{
    int lg = 0;
    while (v) {
        lg++;
        v >>= 1;
    }
    sig_event(what * 1000 + (uint64_t)lg);
}

/* Records a status and the shape of a message: only its words made of lowercase letters (and
 * a trailing , ; :), the first 6, so that "line 7" and "line 8" or two different excerpts of
 * bad input count as the same event. */
static void sig_error(int rc, const char *msg)
{
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)(int64_t)rc;
    if (msg && !strncmp(msg, "override '", 10)) {
        /* The override's own text (which may hold quotes and "': ") says nothing. */
        h = (h ^ 'o') * 0x100000001b3ull;
        for (const char *q = strstr(msg, "': "); q; q = strstr(q + 1, "': ")) msg = q + 3;
    }
    int words = 0;
    char quote = 0; /* inside a quoted excerpt of the input: skip to its end */
    for (const char *p = msg ? msg : ""; *p && words < 6;) {
        while (*p == ' ') p++;
        const char *w = p;
        while (*p && *p != ' ') p++;
        const char *e = p;
        if (quote) {
            const char *t = e;
            while (t > w && strchr(",;:.)?!", t[-1])) t--;
            if (t > w && t[-1] == quote) quote = 0;
            continue;
        }
        if (*w == '\'' || *w == '"') {
            const char *t = e;
            while (t > w + 1 && strchr(",;:.)?!", t[-1])) t--;
            if (!(t > w + 1 && t[-1] == *w)) quote = *w;
            continue;
        }
        if (e > w && (e[-1] == ',' || e[-1] == ';' || e[-1] == ':')) e--;
        bool plain = e > w;
        for (const char *q = w; q < e && plain; q++) plain = *q >= 'a' && *q <= 'z';
        if (!plain) continue;
        for (const char *q = w; q < e; q++) h = (h ^ (unsigned char)*q) * 0x100000001b3ull;
        h = (h ^ ' ') * 0x100000001b3ull;
        words++;
    }
    sig_event(h);
}

/* A log sink that formats (exercising ctf_error_format) and keeps the shape of the message. */
static void fuzz_log(void *user, ctf_severity sev, const ctf_error *e)
{
    (void)user;
    char line[CTF_ERROR_PATH_MAX + CTF_ERROR_MSG_MAX + 96];
    ctf_error_format(e, sev, line, sizeof line);
    FUZZ_CHECK(strlen(line) < sizeof line, "unterminated log line");
    sig_error(100 + (int)sev, e->message);
}

static char tmpdir[256];

static void remove_tmpdir(void)
{
    if (!tmpdir[0]) return;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    tmpdir[0] = 0;
}

/* A per-process directory, on tmpfs when there is one (the index cache is fsync'ed). */
const char *ctf_fuzz_tmpdir(void)
{
    if (tmpdir[0]) return tmpdir;
    const char *env = getenv("TMPDIR");
    const char *bases[] = {"/dev/shm", env && env[0] ? env : "/tmp", "/tmp"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(tmpdir, sizeof tmpdir, "%s/ctfio_fuzz.XXXXXX", bases[i]);
        if (mkdtemp(tmpdir)) {
            atexit(remove_tmpdir);
            return tmpdir;
        }
    }
    perror("mkdtemp");
    abort();
}

static const char *tmp_path(const char *name, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s", ctf_fuzz_tmpdir(), name);
    return buf;
}

static void write_file(const char *path, const void *data, size_t len)
{
    /* Replace, never rewrite in place: a new inode, so no index cache can match by accident
     * (the reader checks size, mtime and inode). */
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    FUZZ_CHECK(fd >= 0, "cannot create %s: %s", tmp, strerror(errno));
    const char *p = data;
    while (len > 0) {
        ssize_t k = write(fd, p, len);
        FUZZ_CHECK(k > 0, "cannot write %s: %s", tmp, strerror(errno));
        p += k;
        len -= (size_t)k;
    }
    close(fd);
    FUZZ_CHECK(rename(tmp, path) == 0, "cannot rename %s: %s", tmp, strerror(errno));
}

/* The allocation counter must come back to where it started (a leak the sanitizer could miss:
 * blocks still referenced from a static). */
#define LIVE_BEGIN() long live0_ = atomic_load(&ctf__alloc.live)
#define LIVE_END(what) \
    FUZZ_CHECK(atomic_load(&ctf__alloc.live) == live0_, "%s leaked %ld blocks", what, \
               atomic_load(&ctf__alloc.live) - live0_)

/*======================================================================
 * Minibatch checks and transcripts
 *====================================================================*/

static void check_minibatch(const ctf_minibatch *mb, const ctf_config *cfg, FILE *transcript)
{
    size_t nseq = ctf_minibatch_num_sequences(mb);
    FUZZ_CHECK(ctf_minibatch_num_streams(mb) == cfg->num_streams, "stream count");
    const uint64_t *keys = ctf_minibatch_keys(mb), *lines = ctf_minibatch_lines(mb);
    FUZZ_CHECK(nseq == 0 || (keys && lines), "keys/lines missing");
    for (size_t i = 0; i < nseq; i++) FUZZ_CHECK(lines[i] >= 1, "line numbers are 1-based");
    for (size_t k = 0; k < cfg->num_streams; k++) {
        ctf_stream_view v;
        FUZZ_CHECK(ctf_minibatch_stream(mb, k, &v) == 0, "stream view %zu", k);
        FUZZ_CHECK(v.num_sequences == nseq, "num_sequences");
        FUZZ_CHECK(v.dim == cfg->streams[k].dim, "dim");
        FUZZ_CHECK(v.is_sparse == cfg->streams[k].is_sparse, "sparse flag");
        FUZZ_CHECK(v.precision == cfg->precision, "precision");
        uint64_t sum = 0;
        for (size_t i = 0; i < nseq; i++) sum += v.lengths[i];
        FUZZ_CHECK(sum == v.num_samples, "lengths add up to %llu, not %zu samples",
                   (unsigned long long)sum, v.num_samples);
        if (v.is_sparse) {
            FUZZ_CHECK(v.indptr && v.indptr[0] == 0, "indptr[0]");
            for (size_t s = 0; s < v.num_samples; s++)
                FUZZ_CHECK(v.indptr[s] <= v.indptr[s + 1], "indptr decreases at %zu", s);
            FUZZ_CHECK((size_t)v.indptr[v.num_samples] == v.nnz, "indptr end != nnz");
            for (size_t e = 0; e < v.nnz; e++)
                FUZZ_CHECK(v.indices[e] >= 0 && (size_t)v.indices[e] < v.dim,
                           "sparse index %d outside dim %zu", (int)v.indices[e], v.dim);
        } else {
            /* Touch every value: ASan reports a buffer shorter than num_samples * dim. */
            volatile unsigned char acc = 0;
            const unsigned char *b = v.values;
            size_t bytes = v.num_samples * v.dim * (size_t)v.precision;
            for (size_t x = 0; x < bytes; x++) acc ^= b[x];
            (void)acc;
        }
    }
    if (transcript) {
        fprintf(transcript, "mb seqs=%zu samples=%llu pos=%llu sweep=%llu eos=%d\n", nseq,
                (unsigned long long)ctf_minibatch_num_samples(mb),
                (unsigned long long)ctf_minibatch_position(mb),
                (unsigned long long)ctf_minibatch_sweep(mb), (int)ctf_minibatch_end_of_sweep(mb));
        FUZZ_CHECK(dump_json_sequences(mb, transcript, true) == 0, "print_json");
        FUZZ_CHECK(dump_json_minibatch(mb, transcript, 0) == 0, "print_json_mb");
        fputc('\n', transcript);
    }
}

/* Opens a reader on cfg, reads up to max_mb minibatches of mb_size (with a save/restore round
 * trip in the middle when asked), writes everything delivered and every status to transcript.
 * @return : the first non-zero status, or 0. */
static int read_some(const ctf_config *cfg, uint64_t mb_size, int max_mb, bool roundtrip,
                     FILE *transcript)
{
    ctf_reader *r = NULL;
    ctf_error err;
    int rc = ctf_reader_open(cfg, &r, &err);
    if (transcript) fprintf(transcript, "open rc=%d %s\n", rc, rc ? err.message : "");
    if (rc) {
        FUZZ_CHECK(r == NULL, "failed open returned a reader");
        FUZZ_CHECK(err.code == rc, "error record code %d != rc %d", err.code, rc);
        sig_error(rc, err.message);
        return rc;
    }
    ctf_index_info info;
    ctf_index_get_info(ctf_reader_index(r), &info);
    FUZZ_CHECK(info.sequences > 0 && info.chunks > 0 && info.chunks <= info.sequences,
               "index shape: %llu sequences, %llu chunks", (unsigned long long)info.sequences,
               (unsigned long long)info.chunks);
    uint64_t last_pos = 0;
    for (int i = 0; i < max_mb; i++) {
        ctf_minibatch *mb = NULL;
        rc = ctf_reader_next(r, mb_size, &mb);
        if (transcript) fprintf(transcript, "next rc=%d\n", rc);
        if (rc) {
            FUZZ_CHECK(mb == NULL, "failed next returned a minibatch");
            const ctf_error *e = ctf_reader_error(r);
            FUZZ_CHECK(e->code == rc, "reader error code %d != rc %d", e->code, rc);
            if (transcript) fprintf(transcript, "error %s\n", e->message);
            sig_error(rc, e->message);
            /* A dead reader keeps failing the same way. */
            ctf_minibatch *mb2 = NULL;
            FUZZ_CHECK(ctf_reader_next(r, mb_size, &mb2) == rc && !mb2, "dead reader revived");
            break;
        }
        if (!mb) {
            sig_event(7);
            break;
        }
        check_minibatch(mb, cfg, transcript);
        FUZZ_CHECK(ctf_minibatch_position(mb) >= last_pos, "position went back");
        last_pos = ctf_minibatch_position(mb);
        FUZZ_CHECK(ctf_reader_position(r) == last_pos, "reader/minibatch position");
        ctf_minibatch_free(mb);
        if (roundtrip && i == 1) {
            char st[16384]; /* BPTT states grow with the number of slots */
            size_t len = 0;
            FUZZ_CHECK(ctf_reader_save_state(r, NULL, 0, &len) == 0 && len < sizeof st,
                       "state length");
            FUZZ_CHECK(ctf_reader_save_state(r, st, sizeof st, &len) == 0, "save_state");
            int rr = ctf_reader_restore_state(r, st, len);
            FUZZ_CHECK(rr == 0, "restoring the reader's own state failed: %d %s", rr,
                       ctf_reader_error(r)->message);
            FUZZ_CHECK(ctf_reader_position(r) == last_pos, "restore moved the position");
        }
    }
    ctf_stats stats;
    ctf_reader_get_stats(r, &stats);
    FUZZ_CHECK(stats.num_streams == cfg->num_streams, "stats streams");
    if (transcript)
        fprintf(transcript, "stats seq=%llu err=%llu warn=%llu rows=%llu\n",
                (unsigned long long)stats.sequences, (unsigned long long)stats.errors,
                (unsigned long long)stats.warnings, (unsigned long long)stats.dropped_rows);
    sig_count(1, stats.errors);
    sig_count(2, stats.warnings);
    sig_count(3, stats.dropped_rows);
    sig_count(4, stats.sequences);
    sig_count(5, stats.dropped_sequences);
    sig_count(6, stats.chunks_loaded);
    ctf_reader_free(r);
    return rc;
}

/*======================================================================
 * Configuration from the first input bytes
 *====================================================================*/

typedef struct fuzz_cfg {
    ctf_config cfg;
    ctf_stream_def streams[3];
    char aliases[3][17];
    uint64_t mb_size;
    bool threads;        /* also read with one background thread and compare */
    bool roundtrip;      /* save/restore in the middle */
} fuzz_cfg;

/* An input that starts with CONFIG_MARKER carries HEADER_BYTES of configuration, then the file.
 * Any other input is the file as a whole; the configuration comes from a hash of it, and the
 * aliases from the first `|NAME`s in it (so that real CTF files in the corpus parse). */
#define CONFIG_MARKER 0xC7
#define HEADER_BYTES 4

/* The first up to 3 distinct names after '|' (not comments), at most 16 bytes each. */
static size_t find_aliases(const uint8_t *d, size_t n, char out[3][17])
{
    size_t found = 0;
    for (size_t i = 0; i + 1 < n && found < 3 && i < 4096; i++) {
        if (d[i] != '|' || d[i + 1] == '#') continue;
        size_t j = i + 1;
        while (j < n && j - i - 1 < 16 && d[j] > ' ' && d[j] != '|' && d[j] != 127) j++;
        size_t len = j - i - 1;
        if (!len || (j < n && d[j] > ' ' && d[j] != '|' && d[j] != 127)) continue;
        char name[17];
        memcpy(name, d + i + 1, len);
        name[len] = 0;
        if (strlen(name) != len) continue; /* a NUL inside */
        bool dup = false;
        for (size_t k = 0; k < found; k++) dup = dup || !strcmp(out[k], name);
        if (!dup) memcpy(out[found++], name, len + 1);
    }
    return found;
}

/* Splits an input into configuration bytes and file bytes and derives the configuration. */
static void derive_config(fuzz_cfg *f, const uint8_t *data, size_t size, const char *path,
                          const uint8_t **file, size_t *file_len)
{
    uint8_t b[HEADER_BYTES];
    memset(f, 0, sizeof *f);
    size_t nalias = 0;
    if (size >= 1 + HEADER_BYTES && data[0] == CONFIG_MARKER) {
        memcpy(b, data + 1, HEADER_BYTES);
        *file = data + 1 + HEADER_BYTES;
        *file_len = size - 1 - HEADER_BYTES;
    } else {
        uint64_t h = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 0x100000001b3ull;
        h ^= h >> 29;
        memcpy(b, &h, HEADER_BYTES);
        *file = data;
        *file_len = size;
        nalias = find_aliases(data, size, f->aliases);
    }
    ctf_config *c = &f->cfg;
    ctf_config_init(c);
    static const char *const names[3] = {"s0", "s1", "s2"};
    static const char *const fixed_aliases[3] = {"a", "b", "c"};
    size_t ns = 1 + (b[0] & 3) % 3;
    if (nalias && ns > nalias) ns = nalias;
    const uint32_t dims = (uint32_t)b[1] | ((uint32_t)(b[2] & 1) << 8);
    for (size_t i = 0; i < ns; i++) {
        ctf_stream_def *s = &f->streams[i];
        s->name = names[i];
        s->alias = nalias ? f->aliases[i] : fixed_aliases[i];
        s->dim = 1 + ((dims >> (3 * i)) & 7);
        s->is_sparse = (b[2] >> (1 + i)) & 1;
    }
    const unsigned mb = (b[2] >> 4) & 3; /* definesMBSize: none or stream mb-1 */
    if (mb && mb <= ns) f->streams[mb - 1].defines_mb_size = true;
    c->path = path;
    c->streams = f->streams;
    c->num_streams = ns;
    c->skip_sequence_ids = (b[0] >> 2) & 1;
    c->precision = ((b[0] >> 3) & 1) ? CTF_FLOAT64 : CTF_FLOAT32;
    static const uint64_t chunk_sizes[4] = {1, 16, 64, CTF_DEFAULT_CHUNK_SIZE_BYTES};
    c->chunk_size_bytes = chunk_sizes[(b[0] >> 4) & 3];
    c->randomize = (b[0] >> 6) & 1;
    c->window_in_samples = (b[0] >> 7) & 1;
    static const uint64_t windows[4] = {0, 1, 2, 5};
    c->randomization_window = windows[b[3] & 3];
    c->randomization_seed = (b[3] >> 2) & 1;
    static const uint64_t max_errors[4] = {0, 1, 5, 1000};
    c->max_errors = max_errors[(b[2] >> 6) & 3];
    c->trace_level = (b[3] >> 3) & 1 ? 2 : 1;
    c->frame_mode = ((b[3] >> 4) & 7) == 7;
    c->keep_data_in_memory = ((b[3] >> 4) & 7) == 6;
    if (((b[3] >> 4) & 7) == 5) c->max_sweeps = 1;
    if (((b[3] >> 4) & 7) == 4) c->max_samples = CTF_FULL_DATA_SWEEP;
    if (((b[3] >> 4) & 7) == 2) c->truncation_length = 1 + (b[1] & 3);
    if (((b[3] >> 4) & 7) == 3) {
        c->num_workers = 2;
        c->worker_rank = b[1] >> 7;
    }
    c->num_threads = 0;
    c->prefetch_chunks = 2;
    c->log = fuzz_log;
    static const uint64_t mb_sizes[4] = {1, 2, 3, 16};
    f->mb_size = mb_sizes[(b[1] >> 6) & 1 ? 3 : (b[3] >> 6) & 3];
    f->threads = (b[3] >> 7) & (b[1] >> 5) & 1; /* about one input in four */
    f->roundtrip = (b[1] >> 6) & 1;
}

/*======================================================================
 * Target: parse
 *====================================================================*/

#define PARSE_MAX_MB 6

/* A dimension above the documented bounds is refused by validation, and by a reader open before
 * it touches the file (a dim near 2^64 once wrapped a buffer size in the parser). */
static void check_dim_bounds(const ctf_config *c)
{
    bool over = false;
    for (size_t i = 0; i < c->num_streams; i++)
        over |= c->streams[i].dim >
                (c->streams[i].is_sparse ? CTF_MAX_SPARSE_DIM : CTF_MAX_DENSE_DIM);
    if (!over) return;
    ctf_error err;
    int rc = ctf_config_validate(c, &err);
    FUZZ_CHECK(rc == CTF_EINVAL, "a dim above the bounds validated (%d)", rc);
    ctf_reader *r = NULL;
    rc = ctf_reader_open(c, &r, &err);
    FUZZ_CHECK(rc == CTF_EINVAL && !r, "a reader opened with a dim above the bounds (%d)", rc);
    sig_event(40);
}


int ctf_fuzz_parse(const uint8_t *data, size_t size)
{
    LIVE_BEGIN();
    char path[512];
    tmp_path("parse.ctf", path, sizeof path);
    fuzz_cfg f;
    const uint8_t *file;
    size_t file_len;
    derive_config(&f, data, size, path, &file, &file_len);
    write_file(path, file, file_len);
    sig_event(f.cfg.num_streams);
    /* One input in 32 (the file's first byte): the first stream gets a dimension at or beyond
     * the bounds; beyond them, the configuration is refused before the file is read. */
    if (file_len && (file[0] & 31) == 31) {
        static const size_t huge[8] = {
            SIZE_MAX,           SIZE_MAX / 2,          SIZE_MAX / 4 + 1,
            (size_t)1 << 32,    CTF_MAX_DENSE_DIM + 1, CTF_MAX_SPARSE_DIM + 1,
            CTF_MAX_SPARSE_DIM, (size_t)1 << 40};
        ctf_config c = f.cfg;
        ctf_stream_def s[3];
        memcpy(s, c.streams, c.num_streams * sizeof *s);
        s[0].dim = huge[(file_len > 1 ? file[1] : 0) & 7];
        c.streams = s;
        check_dim_bounds(&c);
        if (s[0].is_sparse && s[0].dim <= CTF_MAX_SPARSE_DIM)
            read_some(&c, f.mb_size, PARSE_MAX_MB, false, NULL);
    }

    if (!f.threads) {
        read_some(&f.cfg, f.mb_size, PARSE_MAX_MB, f.roundtrip, NULL);
        LIVE_END("parse");
        return 0;
    }
    /* Threads must not change what is delivered, nor the errors and their order. */
    char *t0 = NULL, *t1 = NULL;
    size_t n0 = 0, n1 = 0;
    FILE *m0 = open_memstream(&t0, &n0), *m1 = open_memstream(&t1, &n1);
    FUZZ_CHECK(m0 && m1, "open_memstream");
    int rc0 = read_some(&f.cfg, f.mb_size, PARSE_MAX_MB, f.roundtrip, m0);
    f.cfg.num_threads = 1;
    int rc1 = read_some(&f.cfg, f.mb_size, PARSE_MAX_MB, f.roundtrip, m1);
    fclose(m0);
    fclose(m1);
    if (rc0 != rc1 || n0 != n1 || memcmp(t0, t1, n0) != 0) {
        fprintf(stderr, "---- 0 threads (rc %d):\n%s---- 1 thread (rc %d):\n%s----\n", rc0, t0, rc1,
                t1);
        FUZZ_CHECK(0, "a background thread delivered something else than the caller's thread");
    }
    free(t0);
    free(t1);
    LIVE_END("parse");
    return 0;
}

/*======================================================================
 * Target: index
 *====================================================================*/

/* Forged caches use index.c's own checksum (ctf__hash_bytes) to reach the structural checks. */
#define CACHE_HEADER_BYTES 120 /* sizeof(cache_header) in index.c */

static bool read_file(const char *path, uint8_t **out, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return false;
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *nb = realloc(buf, cap);
            FUZZ_CHECK(nb, "realloc");
            buf = nb;
        }
        size_t k = fread(buf + n, 1, cap - n, fp);
        if (!k) break;
        n += k;
    }
    fclose(fp);
    *out = buf;
    *len = n;
    return true;
}

static void same_info(const ctf_index_info *a, const ctf_index_info *b, const char *what)
{
    FUZZ_CHECK(a->file_size == b->file_size && a->sequences == b->sequences &&
                   a->samples == b->samples && a->lines == b->lines && a->chunks == b->chunks &&
                   a->max_sequence_samples == b->max_sequence_samples &&
                   a->line_mode == b->line_mode,
               "%s: index differs (seqs %llu/%llu samples %llu/%llu lines %llu/%llu chunks "
               "%llu/%llu)",
               what, (unsigned long long)a->sequences, (unsigned long long)b->sequences,
               (unsigned long long)a->samples, (unsigned long long)b->samples,
               (unsigned long long)a->lines, (unsigned long long)b->lines,
               (unsigned long long)a->chunks, (unsigned long long)b->chunks);
}

static int build(const ctf_config *cfg, ctf_index_info *info)
{
    ctf_index *idx = NULL;
    ctf_error err;
    int rc = ctf_index_build(cfg, &idx, &err);
    if (rc) {
        FUZZ_CHECK(!idx && err.code == rc, "failed build");
        sig_error(rc, err.message);
        return rc;
    }
    ctf_index_get_info(idx, info);
    for (size_t i = 0; i < info->sequences; i++) (void)ctf_index_sequence_samples(idx, i);
    FUZZ_CHECK(ctf_index_sequence_samples(idx, (size_t)info->sequences) == 0, "past the end");
    ctf_index_free(idx);
    sig_event(20 + info->from_cache);
    sig_count(21, info->sequences);
    sig_count(22, info->chunks);
    return 0;
}

int ctf_fuzz_index(const uint8_t *data, size_t size)
{
    LIVE_BEGIN();
    char path[512], cpath[600];
    tmp_path("index.ctf", path, sizeof path);
    ctf_index_cache_path(path, cpath, sizeof cpath);
    remove(cpath);
    fuzz_cfg f;
    const uint8_t *payload;
    size_t plen;
    derive_config(&f, data, size, path, &payload, &plen);
    write_file(path, payload, plen);
    f.cfg.cache_index = true;

    ctf_index_info first, again, third;
    memset(&first, 0, sizeof first);
    again = third = first;
    int rc1 = build(&f.cfg, &first);
    FUZZ_CHECK(rc1 || !first.from_cache, "first build came from a cache");
    int rc2 = build(&f.cfg, &again);
    FUZZ_CHECK(rc1 == rc2, "second build: %d, first: %d", rc2, rc1);
    if (!rc1) {
        FUZZ_CHECK(again.from_cache, "second build did not use the cache");
        same_info(&first, &again, "cache load");
    }

    /* Corrupt the cache (or, when none was written, make one of the input bytes). */
    uint8_t *cache = NULL;
    size_t clen = 0;
    if (read_file(cpath, &cache, &clen) && clen > 0) {
        uint8_t mode = size ? data[size - 1] : 0;
        if (plen) {
            /* Overwrite a window of the cache with input bytes, at an input-chosen place. */
            size_t at = (size_t)(((uint32_t)payload[0] << 8 | (plen > 1 ? payload[1] : 0)) % clen);
            if ((mode & 3) == 1 && clen > CACHE_HEADER_BYTES + 8)
                at = CACHE_HEADER_BYTES + at % (clen - CACHE_HEADER_BYTES - 8); /* the table */
            size_t n = CTF_MIN(plen > 2 ? plen - 2 : plen, (size_t)(mode >> 4) + 1);
            for (size_t i = 0; i < n && at + i < clen; i++)
                cache[at + i] ^= payload[(2 + i) % plen] | 1;
        }
        if ((mode & 3) == 2) clen = clen / 2; /* truncated */
        if ((mode & 3) == 3 && clen >= CACHE_HEADER_BYTES + 8 && plen >= 1) {
            /* A header count (num_seqs, total_lines, data_start) set to an input-chosen value,
             * the checksum forged: counts are checked against the cache's length and the
             * data before anything is allocated from them. */
            static const size_t field_at[3] = {48, 56, 64};
            static const uint64_t values[8] = {
                0, 1, 2, 3, UINT64_MAX, (uint64_t)1 << 40, (uint64_t)1 << 58, 1000003};
            uint64_t v = values[payload[0] & 7];
            if (plen >= 9 && (payload[0] & 8)) memcpy(&v, payload + 1, 8);
            memcpy(cache + field_at[(payload[0] >> 4) % 3], &v, 8);
        }
        if ((mode & 1) == 1 && clen >= CACHE_HEADER_BYTES + 8) {
            /* Forge the checksum so that only the structural checks stand in the way. */
            uint64_t sum = ctf__hash_bytes(0xcbf29ce484222325ull, cache, CACHE_HEADER_BYTES);
            sum = ctf__hash_bytes(sum, cache + CACHE_HEADER_BYTES, clen - CACHE_HEADER_BYTES - 8);
            memcpy(cache + clen - 8, &sum, 8);
        }
        /* Rewrite in place: same inode, so the header's identity still matches; restore the
         * data file's modification time afterwards is not needed (the cache is a separate
         * file). */
        FILE *fp = fopen(cpath, "wb");
        FUZZ_CHECK(fp, "cannot rewrite the cache");
        if (clen) fwrite(cache, 1, clen, fp);
        fclose(fp);
    } else {
        FILE *fp = fopen(cpath, "wb");
        FUZZ_CHECK(fp, "cannot write the cache");
        if (plen) fwrite(payload, 1, plen, fp);
        fclose(fp);
    }
    free(cache);
    int rc3 = build(&f.cfg, &third);
    /* A bad cache is ignored and the file rescanned: the outcome is the first build's. A forged
     * cache that passes every check may lie about counts, but must not crash anything. */
    if (rc3 || !third.from_cache) {
        FUZZ_CHECK(rc3 == rc1, "build with a corrupt cache: %d, without: %d", rc3, rc1);
        if (!rc1) same_info(&first, &third, "rebuild after a corrupt cache");
    } else {
        /* Loaded, possibly forged: the reader must cope with whatever it says. */
        f.cfg.num_threads = 0;
        read_some(&f.cfg, f.mb_size, 3, false, NULL);
    }
    remove(cpath);
    LIVE_END("index");
    return 0;
}

/*======================================================================
 * Target: config
 *====================================================================*/

/* A data file the configurations read when they apply cleanly: the aliases that configurations
 * commonly use, dense and sparse. */
static const char config_data[] = "0 |features 1 2 3 |labels 0:1 |x 1 |a 1 |b 0:1 2:3 |f 1 |l 0\n"
                                  "0 |features 4 5 6 |labels 1:1 |x 2 |a 2 |b 1:1 |f 2 |l 1\n"
                                  "1 |features 7 8 9 |labels 2:1 |x 3 |a 3 |b 0:2 |f 3 |l 0\n"
                                  "2 |features 1e3 -2 .5 |labels 0:1 |x 4 |a 4 |b 3:4 |f 4 |l 1\n";

static void config_try_read(const ctf_config *applied)
{
    ctf_config c = *applied;
    check_dim_bounds(&c);
    for (size_t i = 0; i < c.num_streams; i++)
        if (c.streams[i].dim > 4096 && !c.streams[i].is_sparse) return; /* memory, not a bug */
    if (c.truncation_length > 4096) return; /* the same: minibatches of that many samples */
    char path[512];
    tmp_path("config.ctf", path, sizeof path);
    if (access(path, R_OK) != 0) write_file(path, config_data, sizeof config_data - 1);
    c.path = path;
    c.cache_index = false;
    c.num_threads = 0;
    c.prefetch_chunks = CTF_MIN(c.prefetch_chunks, (size_t)8);
    c.log = fuzz_log;
    read_some(&c, 4, 3, false, NULL);
}

static void config_one(const char *text, size_t len, const char *section, const char *const *ov,
                       size_t nov, bool read)
{
    ctf_bsconfig *doc = NULL;
    ctf_error err;
    int rc = ctf_bsconfig_parse(text, len, "fuzz.cntk", section, ov, nov, &doc, &err);
    if (rc) {
        FUZZ_CHECK(!doc && err.code == rc, "failed parse");
        FUZZ_CHECK(rc == CTF_EINVAL, "parse returned %d (%s)", rc, err.message);
        sig_error(rc, err.message);
        return;
    }
    ctf_config cfg;
    ctf_config_init(&cfg);
    ctf_config before = cfg;
    rc = ctf_bsconfig_apply(doc, &cfg, &err);
    if (rc) {
        FUZZ_CHECK(rc == CTF_EINVAL, "apply returned %d (%s)", rc, err.message);
        FUZZ_CHECK(!memcmp(&cfg, &before, sizeof cfg), "a failed apply changed the config");
        sig_error(rc, err.message);
    } else {
        sig_count(30, cfg.num_streams);
        rc = ctf_config_validate(&cfg, &err);
        sig_error(rc, rc ? err.message : "");
        if (!rc) {
            for (size_t i = 0; i < cfg.num_streams; i++)
                FUZZ_CHECK(cfg.streams[i].name && cfg.streams[i].name[0], "stream name");
            if (read) config_try_read(&cfg);
        }
    }
    ctf_bsconfig_free(doc);
}

/* Lines of the input that look like KEY=VALUE become overrides (at most 4, NUL-free). */
static size_t input_overrides(const char *text, size_t len, char **ov, size_t max)
{
    size_t n = 0;
    const char *p = text, *e = text + len;
    while (p < e && n < max) {
        const char *nl = memchr(p, '\n', (size_t)(e - p));
        const char *le = nl ? nl : e;
        const char *eq = memchr(p, '=', (size_t)(le - p));
        if (eq && !memchr(p, 0, (size_t)(le - p)) && le - p < 2048) {
            ov[n] = malloc((size_t)(le - p) + 1);
            FUZZ_CHECK(ov[n], "malloc");
            memcpy(ov[n], p, (size_t)(le - p));
            ov[n][le - p] = 0;
            n++;
        }
        p = nl ? nl + 1 : e;
    }
    return n;
}

static const char base_config[] = "precision = \"float\"\n"
                                  "dataDir = \"/nonexistent\"\n"
                                  "train = [\n"
                                  "  reader = [\n"
                                  "    readerType = \"CNTKTextFormatReader\"\n"
                                  "    file = \"$dataDir$/train.ctf\"\n"
                                  "    randomize = true\n"
                                  "    input = [\n"
                                  "      features = [ dim = 3 ; format = \"dense\" ]\n"
                                  "      labels = [ dim = 4 ; format = \"sparse\" ]\n"
                                  "    ]\n"
                                  "  ]\n"
                                  "]\n";

int ctf_fuzz_config(const uint8_t *data, size_t size)
{
    LIVE_BEGIN();
    const char *text = (const char *)data;
    static const char *const fixed_ov[] = {
        "dataDir=/tmp",
        "reader.randomize=false",
        "input.features.dim=2",
        "chunkSizeInBytes=64",
        "precision=double",
        "train.reader.input.labels=[ dim = 5 ; format = sparse ; alias = l ]",
        "newVar=(1:2:3)",
    };
    const size_t nfixed = sizeof fixed_ov / sizeof fixed_ov[0];
    /* 1. As it is, and as a named section. */
    config_one(text, size, NULL, NULL, 0, true);
    config_one(text, size, "train", NULL, 0, false);
    /* 2. With fixed overrides (a sliding subset chosen by the size). */
    size_t first = size % nfixed;
    config_one(text, size, NULL, fixed_ov + first, nfixed - first, true);
    /* 3. With overrides taken from the input, on the input and on a known-good file. */
    char *ov[4];
    size_t nov = input_overrides(text, size, ov, 4);
    if (nov) {
        config_one(text, size, NULL, (const char *const *)ov, nov, false);
        config_one(base_config, sizeof base_config - 1, NULL, (const char *const *)ov, nov, true);
        config_one(base_config, sizeof base_config - 1, "train", (const char *const *)ov, nov,
                   false);
    }
    for (size_t i = 0; i < nov; i++) free(ov[i]);
    LIVE_END("config");
    return 0;
}

/*======================================================================
 * Target: state
 *====================================================================*/

static const char state_data[] = "1 |a 1 2 |b 0:1\n"
                                 "1 |a 3 4 |b 2:1\n"
                                 "2 |a 5 6 |b 1:2 3:4\n"
                                 "3 |a 7 8 |b 2:1\n"
                                 "3 |a 9 10 |b 0:1\n"
                                 "3 |a 11 12 |b\n"
                                 "4 |a 13 14 |b 3:3\n"
                                 "5 |a 15 16 |b 1:1\n"
                                 "5 |a 17 18 |b 1:1\n"
                                 "6 |a 19 20 |b 0:5\n";

static ctf_stream_def state_streams[2] = {
    {"s0", "a", 2, false, false},
    {"s1", "b", 4, true, false},
};

/* The state target's reader; bptt: with truncated BPTT (its states carry a "bptt" field). */
static void state_config(ctf_config *c, const char *path, bool bptt)
{
    ctf_config_init(c);
    c->path = path;
    c->streams = state_streams;
    c->num_streams = 2;
    c->randomize = true;
    c->randomization_window = 2;
    c->randomization_seed = 3;
    c->chunk_size_bytes = 40;
    c->num_threads = 0;
    c->truncation_length = bptt ? 2 : 0;
    c->log = fuzz_log;
}

static const char *state_file(void)
{
    static char path[512];
    if (!path[0]) {
        tmp_path("state.ctf", path, sizeof path);
        write_file(path, state_data, sizeof state_data - 1);
    }
    return path;
}

/* A valid state of the state target's reader (with truncated BPTT or not) after num_minibatches
 * minibatches of 2 samples (5 with BPTT: several slots, some mid-sequence); the regression
 * driver adds a few to its corpus.
 * @return : its length, or 0. */
int ctf_fuzz_state_example(uint64_t num_minibatches, bool bptt, char *buf, size_t cap)
{
    ctf_config c;
    state_config(&c, state_file(), bptt);
    ctf_reader *r = NULL;
    ctf_error err;
    if (ctf_reader_open(&c, &r, &err)) return 0;
    for (uint64_t i = 0; i < num_minibatches; i++) {
        ctf_minibatch *mb = NULL;
        if (ctf_reader_next(r, bptt ? 5 : 2, &mb) || !mb) break;
        ctf_minibatch_free(mb);
    }
    size_t len = 0;
    int rc = ctf_reader_save_state(r, buf, cap, &len);
    ctf_reader_free(r);
    return rc ? 0 : (int)len;
}

/* The reader variant comes from the state itself (a "bptt" field selects the BPTT reader, so
 * that valid states of either kind fit); threads, a worker change and the minibatch size come
 * from a hash of the input. */
int ctf_fuzz_state(const uint8_t *data, size_t size)
{
    LIVE_BEGIN();
    const bool bptt = memmem(data, size, "\"bptt\"", 6) != NULL;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size; i++) h = (h ^ data[i]) * 0x100000001b3ull;
    const unsigned mode = (unsigned)(h ^ (h >> 32));
    ctf_config c;
    state_config(&c, state_file(), bptt);
    if (mode & 1) c.num_threads = 1;
    ctf_reader *r = NULL;
    ctf_error err;
    int rc = ctf_reader_open(&c, &r, &err);
    FUZZ_CHECK(rc == 0, "the state target's reader does not open: %s", err.message);
    ctf_minibatch *mb = NULL;
    rc = ctf_reader_next(r, 2, &mb);
    FUZZ_CHECK(rc == 0 && mb, "first minibatch");
    ctf_minibatch_free(mb);
    char own[4096];
    size_t own_len = 0;
    FUZZ_CHECK(ctf_reader_save_state(r, own, sizeof own, &own_len) == 0, "save_state");
    FUZZ_CHECK(ctf_reader_save_state(r, own, 8, &own_len) == CTF_ELIMIT, "small buffer");
    FUZZ_CHECK(ctf_reader_save_state(r, own, sizeof own, &own_len) == 0, "save_state");

    rc = ctf_reader_restore_state(r, (const char *)data, size);
    FUZZ_CHECK(rc == 0 || rc == CTF_ESTATE, "restore returned %d (%s)", rc,
               ctf_reader_error(r)->message);
    sig_error(rc, rc ? ctf_reader_error(r)->message : "");
    if (mode & 2) {
        FUZZ_CHECK(ctf_reader_set_worker(r, 2, (mode >> 2) & 1) == 0, "set_worker");
    }
    for (int i = 0; i < 3; i++) {
        mb = NULL;
        rc = ctf_reader_next(r, 1 + ((mode >> 4) & 15), &mb);
        FUZZ_CHECK(rc == 0, "next after a restore: %d (%s)", rc, ctf_reader_error(r)->message);
        if (!mb) break;
        check_minibatch(mb, &c, NULL);
        ctf_minibatch_free(mb);
    }
    sig_count(40, ctf_reader_position(r));
    /* Restoring its own earlier state always works. */
    rc = ctf_reader_restore_state(r, own, own_len);
    FUZZ_CHECK(rc == 0, "restoring the reader's own state: %d (%s)", rc,
               ctf_reader_error(r)->message);
    mb = NULL;
    rc = ctf_reader_next(r, 2, &mb);
    FUZZ_CHECK(rc == 0 && mb, "next after restoring its own state: %d", rc);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    LIVE_END("state");
    return 0;
}

/*======================================================================
 * libFuzzer entry point
 *====================================================================*/

#ifdef CTF_LIBFUZZER
#ifndef CTF_FUZZ_TARGET
#error "define CTF_FUZZ_TARGET as parse, index, config, state, cbf or record"
#endif
#define CTF_FUZZ_CAT_(t) ctf_fuzz_##t
#define CTF_FUZZ_CAT(t) CTF_FUZZ_CAT_(t)
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    return CTF_FUZZ_CAT(CTF_FUZZ_TARGET)(data, size);
}
#endif

/*======================================================================
 * ctf_fuzz_cbf: CNTK's binary format
 *====================================================================*/

/* The text of the valid CBF file the edits start from (written in chunks of a few sequences). */
static const char cbf_text[] = "1 |a 1 2 |b 0:1 3:2\n1 |a 3 4\n2 |a 5 6 |b 1:1\n3 |a 7 8 |b 2:0.5\n"
                               "4 |a 9 10 |b 0:1 1:1 2:1\n5 |a -1 -2\n5 |a 0 0 |b 3:3\n";

static const uint8_t *cbf_base(size_t *len)
{
    static uint8_t *base;
    static size_t base_len;
    if (base) {
        *len = base_len;
        return base;
    }
    char src[512], out[512];
    tmp_path("cbf_base.ctf", src, sizeof src);
    tmp_path("cbf_base.bin", out, sizeof out);
    write_file(src, cbf_text, sizeof cbf_text - 1);
    static const ctf_stream_def st[2] = {{"a", NULL, 2, false, false}, {"b", NULL, 4, true, false}};
    ctf_config c;
    ctf_config_init(&c);
    c.path = src;
    c.streams = st;
    c.num_streams = 2;
    ctf_error err;
    FUZZ_CHECK(ctf_cbf_write(&c, out, 40, CTF_FLOAT32, NULL, &err) == 0, "cbf base: %s",
               err.message);
    FUZZ_CHECK(read_file(out, &base, &base_len), "cbf base unreadable");
    *len = base_len;
    return base;
}

int ctf_fuzz_cbf(const uint8_t *data, size_t size)
{
    size_t blen;
    const uint8_t *base = cbf_base(&blen); /* before LIVE_BEGIN: kept for the process */
    LIVE_BEGIN();
    uint8_t *buf;
    size_t len;
    static const uint8_t magic[8] = {0x6e, 0x69, 0x62, 0x5f, 0x6b, 0x74, 0x6e, 0x63};
    if (size >= 8 && !memcmp(data, magic, 8)) {
        /* A whole file. */
        buf = malloc(size ? size : 1);
        FUZZ_CHECK(buf != NULL, "oom");
        memcpy(buf, data, size);
        len = size;
    } else {
        /* Edits of the valid file: per 3 input bytes, a byte at an input-chosen place XORed; an
         * odd length also cuts the file at an input-chosen length. */
        buf = malloc(blen);
        FUZZ_CHECK(buf != NULL, "oom");
        memcpy(buf, base, blen);
        len = blen;
        for (size_t i = 0; i + 3 <= size; i += 3)
            buf[((size_t)data[i] << 8 | data[i + 1]) % len] ^= (uint8_t)(data[i + 2] | 1);
        if (size & 1) len = size ? (size_t)data[0] * 7 % (len + 1) : len;
    }
    char path[512];
    tmp_path("fuzz.bin", path, sizeof path);
    write_file(path, buf, len);
    free(buf);
    ctf_stream_def *st = NULL;
    size_t ns = 0;
    ctf_precision prec = CTF_FLOAT32;
    ctf_error err;
    int rc = ctf_cbf_streams(path, &st, &ns, &prec, &err);
    if (rc) {
        FUZZ_CHECK(st == NULL && err.code == rc, "failed ctf_cbf_streams");
        sig_error(rc, err.message);
    } else {
        bool small = true; /* a huge dense dimension is legal: memory, not a bug */
        for (size_t k = 0; k < ns; k++) small &= st[k].is_sparse || st[k].dim <= 4096;
        if (small) {
            ctf_config c;
            ctf_config_init(&c);
            c.path = path;
            c.streams = st;
            c.num_streams = ns;
            c.precision = prec;
            c.randomize = size && (data[0] & 1);
            c.randomization_window = 2;
            c.max_sweeps = 2;
            c.num_threads = 0;
            c.log = fuzz_log;
            int a = read_some(&c, 3, 40, true, NULL);
            c.num_threads = 2;
            int b = read_some(&c, 3, 40, true, NULL);
            FUZZ_CHECK(a == b, "threads 0: %d, threads 2: %d", a, b);
        }
    }
    ctf_cbf_streams_free(st, ns);
    LIVE_END("cbf");
    return 0;
}

/*======================================================================
 * ctf_fuzz_record: samples from user code, as records packed into a batch
 *====================================================================*/

static const ctf_slot record_slots[3] = {
    {CTF_SLOT_DENSE, CTF_SLOT_SEQUENCE, 2},
    {CTF_SLOT_SPARSE, CTF_SLOT_SUB_SEQUENCE, 7},
    {CTF_SLOT_INTEGER, CTF_SLOT_NO_SEQUENCE, 3},
};

/* A valid record: a dense sequence of 2 steps, 2 sub-sequences of valued sparse steps, one
 * integer. */
static void record_base(ctf_record_writer *w)
{
    FUZZ_CHECK(ctf_record_begin(w, 3, false) == 0, "record begin");
    FUZZ_CHECK(ctf_record_section_begin(w, 0) == 0, "section");
    size_t at = ctf_record_grow(w, 4 * sizeof(float));
    FUZZ_CHECK(at != SIZE_MAX, "grow");
    const float v[4] = {1, 2, 3, 4};
    memcpy(w->p + at, v, sizeof v);
    FUZZ_CHECK(ctf_record_section_end(w, &record_slots[0], 2, 0) == 0, "section end");
    FUZZ_CHECK(ctf_record_section_begin(w, 1) == 0, "section");
    const int64_t lens[2] = {1, 2};
    FUZZ_CHECK((at = ctf_record_grow(w, sizeof lens)) != SIZE_MAX, "grow");
    memcpy(w->p + at, lens, sizeof lens);
    for (int t = 0; t < 3; t++) {
        size_t vals;
        const size_t idx = ctf_record_sparse_step(w, (size_t)t + 1, true, &vals);
        FUZZ_CHECK(idx != SIZE_MAX, "sparse step");
        for (int j = 0; j <= t; j++) {
            const int32_t ix = (int32_t)(t + j);
            const float f = (float)j + 0.5f;
            memcpy(w->p + idx + 4 * (size_t)j, &ix, 4);
            memcpy(w->p + vals + 4 * (size_t)j, &f, 4);
        }
    }
    FUZZ_CHECK(ctf_record_section_end(w, &record_slots[1], 3, 2) == 0, "section end");
    FUZZ_CHECK(ctf_record_section_begin(w, 2) == 0, "section");
    FUZZ_CHECK((at = ctf_record_grow(w, 8)) != SIZE_MAX, "grow");
    const int64_t two = 2;
    memcpy(w->p + at, &two, 8);
    FUZZ_CHECK(ctf_record_section_end(w, &record_slots[2], 1, 0) == 0, "section end");
}

int ctf_fuzz_record(const uint8_t *data, size_t size)
{
    LIVE_BEGIN();
    ctf_record_writer w;
    ctf_record_writer_init(&w, NULL, 0);
    record_base(&w);
    uint8_t *buf;
    size_t len;
    if (size >= 4 && !memcmp(data, "CTFP", 4)) {
        buf = malloc(size); /* a whole record */
        FUZZ_CHECK(buf != NULL, "oom");
        memcpy(buf, data, size);
        len = size;
    } else {
        /* Edits of the valid record, as for ctf_fuzz_cbf; an odd length also cuts it. */
        len = w.len;
        buf = malloc(len);
        FUZZ_CHECK(buf != NULL, "oom");
        memcpy(buf, w.p, len);
        for (size_t i = 0; i + 3 <= size; i += 3)
            buf[((size_t)data[i] << 8 | data[i + 1]) % len] ^= (uint8_t)(data[i + 2] | 1);
        if (size & 1) len = (size_t)data[0] * 3 % (len + 1);
    }
    /* The edited record twice beside the valid one: positions in the messages count. */
    ctf_record_ref recs[3] = {{w.p, w.len}, {buf, len}, {buf, len}};
    ctf_batch_size sz[3];
    ctf_error err;
    const int rc = ctf_records_measure(recs, 3, record_slots, 3, false, sz, &err);
    if (rc) {
        FUZZ_CHECK(rc == CTF_EPARSE || rc == CTF_EINVAL, "measure: %d", rc);
        FUZZ_CHECK(strstr(err.message, "records[1]") != NULL, "names the record: %s", err.message);
        sig_error(rc, err.message);
    } else {
        /* Accepted: the sizes bound every write (ASan checks the arrays to the byte). */
        ctf_batch_out o[3] = {{0}};
        o[0].data = malloc((size_t)sz[0].steps * 2 * sizeof(float) + 1);
        o[0].seq_starts = malloc(4 * 8);
        o[1].data = malloc((size_t)sz[1].nnz * sizeof(float) + 1);
        o[1].indptr = malloc(((size_t)sz[1].steps + 1) * 8);
        o[1].indices = malloc((size_t)sz[1].nnz * 4 + 1);
        o[1].seq_starts = malloc(4 * 8);
        o[1].sub_starts = malloc(((size_t)sz[1].subs + 1) * 8);
        o[2].data = malloc((size_t)sz[2].steps * 8 + 1);
        ctf_records_pack(recs, 3, record_slots, 3, false, o);
        FUZZ_CHECK(o[0].seq_starts[3] == sz[0].steps && o[1].indptr[sz[1].steps] == sz[1].nnz,
                   "totals");
        for (int64_t i = 0; i < sz[1].nnz; i++)
            FUZZ_CHECK(o[1].indices[i] >= 0 && o[1].indices[i] < 7, "index in range");
        sig_count(1, (uint64_t)sz[1].nnz);
        for (int k = 0; k < 3; k++) {
            free(o[k].data);
            free(o[k].indptr);
            free(o[k].indices);
            free(o[k].seq_starts);
            free(o[k].sub_starts);
        }
    }
    free(buf);
    ctf_record_writer_free(&w);
    LIVE_END("record");
    return 0;
}
