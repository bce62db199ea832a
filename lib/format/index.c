/*
 * index.c -- the indexing stage: one sequential pass over a CTF file that finds every sequence
 * (key, byte offset, first line, line count, index samples) without converting a single value,
 * then cuts the sequences into chunks (rules 4.1-4.2); plus the on-disk index cache (rules 4.3).
 *
 * In:  the data file and the index-shaping options (skipSequenceIds, the stream aliases, the
 *      definesMBSize alias).
 * Out: a ctf_index: the chunk table (per chunk: byte range, first line, sequence and sample
 *      counts, a fold of its sequence records); the records themselves are made again per chunk
 *      when a load needs them (the re-scan below, fed block by block) or read from the cache.
 *
 * The scan is line-oriented. In id mode (the default when the file starts with a digit) a line
 * starting with an id different from the previous one opens a sequence; every other line joins
 * the current one, blank lines included (rules 1.5, 1.10), so index-sample counts match CNTK's.
 * Only with definesMBSize or in line mode does the scan look inside lines, for `|NAME` tokens:
 * that is what keeps the common case at newline-scan speed.
 *
 * Cache file (DATA.ctfidx): a fixed header (magic, format version, data file size, mtime in ns,
 * inode, a hash of the index-shaping options, counts) followed by the raw sequence table and a
 * checksum over both. Anything that does not match means "ignore and rebuild", never an error.
 */
#include "format/format.h"
#include "format/index_opts.h"
#include "io/io.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

/* Blocks small enough to stay in the L2 cache between the read's copy and the newline scan
 * (4 MiB blocks went to memory and back: 8.0 vs 8.3-8.5 GB/s per CPU-s, 256 MiB dense). */
#define INDEX_BLOCK_BYTES (256u << 10)
#define INDEX_MAX_LINE_BYTES ((size_t)1 << 31)

/*======================================================================
 * Small helpers
 *====================================================================*/

static inline bool is_blank(unsigned char c) { return c == ' ' || c == '\t' || c == '\r'; }
static inline bool ends_name(unsigned char c) { return c <= ' ' || c == '|' || c == 127; }

static void log_problem(const ctf_config *cfg, ctf_severity sev, const ctf_error *e)
{
    if ((int)sev > cfg->trace_level) return;
    /* No sink, no logging: the library never writes to a terminal itself. */
    if (cfg->log) cfg->log(cfg->log_user, sev, e);
}

static void log_at(const ctf_config *cfg, ctf_severity sev, ctf__where w, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void log_at(const ctf_config *cfg, ctf_severity sev, ctf__where w, const char *fmt, ...)
{
    if ((int)sev > cfg->trace_level) return;
    ctf_error e;
    va_list ap;
    va_start(ap, fmt);
    ctf__vfail(&e, CTF_OK, w, fmt, ap);
    va_end(ap);
    log_problem(cfg, sev, &e);
}

/* The repeated-id warning (rules 1.5), from the scan or from the index cache: counted whether
 * shown or not, reported once per file. */
static void warn_repeat(const ctf_config *cfg, ctf_index *idx)
{
    idx->warnings++;
    log_at(cfg, CTF_SEV_WARNING,
           (ctf__where){idx->path, idx->repeat.line + 1, 1, (int64_t)idx->repeat.offset},
           "sequence id %llu reappears here after other ids (first used on line %llu); the "
           "lines form a separate sequence (reported once per file)",
           (unsigned long long)idx->repeat.id, (unsigned long long)idx->repeat.first_line + 1);
}

/*======================================================================
 * Id set: detects ids that reappear on non-consecutive lines (rules 1.5, a warning).
 *====================================================================*/

typedef struct id_set {
    uint64_t *keys;   /* open addressing; slot holds key+1 (0 = empty) */
    uint64_t *lines;  /* first line (0-based) of the key */
    size_t cap, n;
} id_set;

static int id_set_add(id_set *s, uint64_t key, uint64_t line, uint64_t *prev_line)
{
    if ((s->n + 1) * 2 > s->cap) {
        size_t ncap = s->cap ? s->cap * 2 : 1024;
        uint64_t *k = CTF_CALLOC(ncap, sizeof *k), *l = CTF_MALLOC(ncap * sizeof *l);
        if (!k || !l) {
            CTF_FREE(k);
            CTF_FREE(l);
            return CTF_ENOMEM;
        }
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->keys[i]) continue;
            size_t j = (size_t)((s->keys[i] * 0x9E3779B97F4A7C15ull) >> 20) & (ncap - 1);
            while (k[j]) j = (j + 1) & (ncap - 1);
            k[j] = s->keys[i];
            l[j] = s->lines[i];
        }
        CTF_FREE(s->keys);
        CTF_FREE(s->lines);
        s->keys = k;
        s->lines = l;
        s->cap = ncap;
    }
    uint64_t k1 = key + 1; /* key UINT64_MAX wraps to 0: treat it as "seen" never; rare */
    if (k1 == 0) return 0;
    size_t j = (size_t)((k1 * 0x9E3779B97F4A7C15ull) >> 20) & (s->cap - 1);
    while (s->keys[j]) {
        if (s->keys[j] == k1) {
            *prev_line = s->lines[j];
            return 1;
        }
        j = (j + 1) & (s->cap - 1);
    }
    s->keys[j] = k1;
    s->lines[j] = line;
    s->n++;
    return 0;
}

static void id_set_free(id_set *s)
{
    CTF_FREE(s->keys);
    CTF_FREE(s->lines);
}

/*======================================================================
 * Options that shape the index (they go into the cache header)
 *====================================================================*/

/* index_opts.h: what the options hold, made and kept there. */

static inline bool same_name(const char *n, const char *a, size_t len)
{
    return n[0] == a[0] && (len == 1 || !memcmp(n + 1, a + 1, len - 1));
}

/* Scans one line for `|NAME` tokens. *has_known: some configured alias appears; *has_mb: the
 * definesMBSize alias appears. Comments (`|#...`) run to the next '|'. Names whose first byte
 * starts no alias are skipped without measuring them (a name holds no '|'). */
static void scan_names(const index_opts *o, const char *p, const char *end, bool *has_known,
                       bool *has_mb)
{
    bool known = false, mb = false;
    for (;;) {
        /* The common line starts with its '|': no memchr call for it. */
        if (p >= end) break;
        if (*p != '|') {
            p = memchr(p, '|', (size_t)(end - p));
            if (!p) break;
        }
        p++;
        /* An empty name ('|' then a blank or the line's end) is an error the parser reports:
         * in line mode the line must be a sequence for that, as in id mode. */
        if (p >= end || ends_name((unsigned char)*p)) {
            known = true;
            if (p >= end) break;
            continue;
        }
        /* A comment (`|#...`) ends at the next '|'; so does a name no alias starts like. */
        if (!o->first[(unsigned char)*p]) continue;
        const char *n = p;
        while (p < end && !ends_name((unsigned char)*p)) p++;
        size_t len = (size_t)(p - n);
        if (!len) continue;
        if (o->mb_alias && len == o->mb_alias_len && same_name(n, o->mb_alias, len)) mb = true;
        if (!known)
            for (size_t i = 0; i < o->num_aliases; i++)
                if (len == o->alias_lens[i] && same_name(n, o->aliases[i], len)) {
                    known = true;
                    break;
                }
        if (known && (mb || !o->mb_alias)) break;
    }
    *has_known = known;
    *has_mb = mb;
}

/*======================================================================
 * The scan
 *====================================================================*/

typedef struct scan_state {
    ctf_index *idx;
    const ctf_config *cfg;  /* NULL in a chunk's re-scan: nothing is logged */
    const index_opts *opts;
    int mode;               /* -1 undecided, 0 id mode, 1 line mode */
    bool have_seq;          /* a sequence is open */
    bool rescan;            /* a chunk's re-scan: no repeated-id set, no warning */
    uint64_t cur_id;
    uint64_t line_no;       /* 0-based number of the line being scanned */
    id_set ids;
    uint64_t hash;          /* table_hash over the finished entries, folded in as they close */
    uint64_t lines_before;  /* lines counted before the first sequence (parallel merge) */
    ctf__seq cur;           /* the open sequence (its lines still being counted) */
    /* Where a finished sequence goes: into `keep` (a chunk's re-scan, the parallel second
     * half), else into the chunk table (and the index cache, when one is being written). */
    ctf__seqbuf *keep;
    size_t kept;
    size_t keep_limit;      /* 0, or stop (SCAN_STOP) before keeping more (parallel half) */
    uint64_t chunk_size;
    size_t chunks_cap;
    size_t emitted;
    ctf__atomic_file cache_file; /* the index cache being written (platform.c) */
    FILE *cache;            /* its stream (NULL: none, or it failed) */
    uint64_t cache_sum;
    int cache_errno;
    ctf_error *err;
} scan_state;

/* ctf__hash_bytes over one entry (sizeof(ctf__seq) is a multiple of 8: the word chain over the
 * table is the chain over its entries, so folding entries in one by one gives the same value). */
static inline uint64_t hash_seq(uint64_t h, const ctf__seq *s)
{
    _Static_assert(sizeof(ctf__seq) % 8 == 0, "hash_seq assumes whole words");
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < sizeof *s; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}

#define CHUNK_HASH_SEED 0x9ae16a3b2f90404full
/* The parallel second half kept its limit of records: it stops (not an error). */
#define SCAN_STOP 1
/* Records the parallel second half may keep (32 MB): past that the first thread goes on alone,
 * so that indexing a file of very many short sequences never holds a table of them. */
#ifdef CTF_TESTING
size_t ctf__index_half_keep = CTF__INDEX_HALF_KEEP;
#endif

/* A chunk's fold of its records (ctf__chunk.hash). */
static uint64_t chunk_fold(const ctf__seq *s, size_t n)
{
    uint64_t h = CHUNK_HASH_SEED;
    for (size_t i = 0; i < n; i++) h = hash_seq(h, &s[i]);
    return h;
}

/* A finished sequence s (its bytes end at `end`): folded into the fingerprint, then kept, or
 * cut into the chunk table by the chunking rule (a chunk ends before the sequence that would
 * make its span exceed the chunk size; rules 4.2) and written to the index cache. */
static int emit(scan_state *st, const ctf__seq *s, uint64_t end)
{
    ctf_index *idx = st->idx;
    if (st->keep && st->keep_limit && st->kept >= st->keep_limit) return SCAN_STOP;
    st->hash = hash_seq(st->hash, s);
    if (st->keep) {
        if (st->kept == st->keep->cap &&
            ctf__grow((void **)&st->keep->p, &st->keep->cap, st->kept + 1, sizeof *s))
            return ctf__fail(st->err, CTF_ENOMEM, CTF__NOWHERE, "out of memory indexing %s",
                             idx->path);
        st->keep->p[st->kept++] = *s;
        return 0;
    }
    const uint64_t len = end - s->offset;
    ctf__chunk *c = idx->num_chunks ? &idx->chunks[idx->num_chunks - 1] : NULL;
    if (!c || c->size + len > st->chunk_size) {
        if (idx->num_chunks == st->chunks_cap &&
            ctf__grow((void **)&idx->chunks, &st->chunks_cap, idx->num_chunks + 1,
                      sizeof *idx->chunks))
            return ctf__fail(st->err, CTF_ENOMEM, CTF__NOWHERE, "out of memory building chunks");
        c = &idx->chunks[idx->num_chunks++];
        *c = (ctf__chunk){.first_seq = st->emitted,
                          .offset = s->offset,
                          .line = s->line,
                          .hash = CHUNK_HASH_SEED};
    }
    c->num_seqs++;
    c->size += len;
    c->samples += s->samples;
    c->hash = hash_seq(c->hash, s);
    st->emitted++;
    idx->total_samples += s->samples;
    if (s->samples > idx->max_seq_samples) idx->max_seq_samples = s->samples;
    if (st->emitted == 1 || s->samples < idx->min_seq_samples) idx->min_seq_samples = s->samples;
    int b = 0;
    while (b < 64 && ((uint64_t)1 << b) <= s->samples) b++;
    idx->hist[b]++;
    if (st->cache) {
        st->cache_sum = hash_seq(st->cache_sum, s);
        if (fwrite(s, sizeof *s, 1, st->cache) != 1) {
            /* The cache is optional: a write failure drops it (a warning at the end). */
            st->cache_errno = errno ? errno : EIO;
            ctf__atomic_abort(&st->cache_file);
            st->cache = NULL;
        }
    }
    return 0;
}

static int push_seq(scan_state *st, uint64_t offset, uint64_t key)
{
    if (st->have_seq) {
        int rc = emit(st, &st->cur, offset);
        if (rc) return rc;
    }
    st->cur = (ctf__seq){.offset = offset, .key = key, .line = st->line_no};
    st->idx->num_seqs++;
    st->have_seq = true;
    return 0;
}

/* Processes one line [p, end) (without its '\n') starting at byte `offset`. */
static int scan_line(scan_state *st, const char *p, const char *end, uint64_t offset)
{
    ctf_index *idx = st->idx;
    const index_opts *o = st->opts;
    const char *path = idx->path;

    if (st->mode < 0) {
        /* Mode is decided by the first non-blank character of the file (rules 1.4). */
        const char *q = p;
        while (q < end && is_blank((unsigned char)*q)) q++;
        if (q == end) goto count_line; /* blank lines before any data */
        if (*q == '|' || o->skip_ids) {
            st->mode = 1;
        } else if (*q >= '0' && *q <= '9') {
            st->mode = 0;
            if (q != p) {
                /* Leading blanks before the first id: the id is not at the line start, so the
                 * first line would have no id. */
                return ctf__fail(st->err, CTF_EPARSE,
                                 (ctf__where){path, st->line_no + 1, 1, (int64_t)offset},
                                 "expected a sequence id at the start of the first line, "
                                 "found a blank");
            }
        } else {
            uint64_t col = (uint64_t)(q - p) + 1;
            return ctf__fail(st->err, CTF_EPARSE,
                             (ctf__where){path, st->line_no + 1, col,
                                          (int64_t)(offset + (uint64_t)(q - p))},
                             (unsigned char)*q >= 32 && (unsigned char)*q < 127
                                 ? "expected a sequence id or '|' at the start of the file, "
                                   "found '%c'"
                                 : "expected a sequence id or '|' at the start of the file, "
                                   "found byte 0x%02x",
                             (unsigned char)*q);
        }
        idx->line_mode = st->mode == 1;
    }

    if (st->mode == 1) {
        bool known, mb;
        scan_names(o, p, end, &known, &mb);
        if (known) {
            int rc = push_seq(st, offset, st->line_no);
            if (rc) return rc;
            st->cur.samples = o->mb_alias ? (mb ? 1 : 0) : 1;
        } else if (p < end && st->cfg && st->cfg->trace_level >= 2) {
            const char *q = p;
            while (q < end && is_blank((unsigned char)*q)) q++;
            if (q < end)
                log_at(st->cfg, CTF_SEV_INFO,
                       (ctf__where){path, st->line_no + 1, 1, (int64_t)offset},
                       "line holds no configured input; skipped");
        }
        goto count_line;
    }

    /* Id mode. */
    if (p < end && *p >= '0' && *p <= '9') {
        uint64_t id = 0;
        const char *q = p;
        while (q < end && *q >= '0' && *q <= '9') {
            unsigned d = (unsigned)(*q - '0');
            if (id > (UINT64_MAX - d) / 10) {
                const char *dend = q; /* name only the digits, not the rest of the line */
                while (dend < end && *dend >= '0' && *dend <= '9') dend++;
                return ctf__fail(st->err, CTF_EPARSE,
                                 (ctf__where){path, st->line_no + 1, 1, (int64_t)offset},
                                 "sequence id '%.*s' does not fit in 64 bits",
                                 (int)CTF_MIN((size_t)(dend - p), (size_t)40), p);
            }
            id = id * 10 + d;
            q++;
        }
        if ((!st->have_seq || id != st->cur_id) && !st->rescan) {
            uint64_t prev;
            int r = id_set_add(&st->ids, id, st->line_no, &prev);
            if (r < 0)
                return ctf__fail(st->err, CTF_ENOMEM, CTF__NOWHERE, "out of memory indexing %s",
                                 path);
            if (r == 1) idx->repeat.count++;
            if (r == 1 && !idx->repeat.on) {
                idx->repeat.on = true;
                idx->repeat.id = id;
                idx->repeat.line = st->line_no;
                idx->repeat.first_line = prev;
                idx->repeat.offset = offset;
                warn_repeat(st->cfg, idx);
            }
        }
        if (!st->have_seq || id != st->cur_id) {
            int rc = push_seq(st, offset, id);
            if (rc) return rc;
            st->cur_id = id;
        }
    } else if (!st->have_seq) {
        /* Blank lines before the first id are not part of any sequence. */
        goto count_line;
    }
    {
        ctf__seq *s = &st->cur;
        if (o->mb_alias) {
            bool known, mb;
            scan_names(o, p, end, &known, &mb);
            if (mb) s->samples++;
        } else {
            s->samples++;
        }
    }

count_line:
    if (st->have_seq)
        st->cur.lines++;
    else
        st->lines_before++;
    st->line_no++;
    return 0;
}

/* Scans the complete lines of [p, end) (base: the file offset of p). @return : the status;
 * *rest is the first byte of the incomplete last line (end when there is none). */
static int scan_lines(scan_state *st, const char *p, const char *end, uint64_t base,
                      const char **rest)
{
    const char *const p0 = p;
    for (;;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break;
        int rc = scan_line(st, p, nl, base + (uint64_t)(p - p0));
        if (rc) return rc;
        p = nl + 1;
    }
    *rest = p;
    return 0;
}

/* The file's last line, which may lack its newline; an unterminated run of blanks is not a
 * line. */
static int scan_tail(scan_state *st, const char *p, const char *end, uint64_t offset)
{
    const char *q = p;
    while (q < end && is_blank((unsigned char)*q)) q++;
    return q < end ? scan_line(st, p, end, offset) : 0;
}

/* Scans the lines of [from, size) (from: 0, or the first byte after a newline). The checks of
 * the file's first bytes (BOM, UTF-16) run when from is 0. */
static int scan_range(scan_state *st, ctf__io *io, uint64_t from, uint64_t size, ctf_error *err)
{
    ctf_index *idx = st->idx;
    const char *path = idx->path;
    /* A small file needs no whole block (this also keeps sanitizer and fuzz runs fast). */
    const size_t block = ctf__io_scan_block(io, INDEX_BLOCK_BYTES);
    size_t cap = size - from < block ? (size_t)(size - from) + 1 : block;
    char *buf = CTF_MALLOC(cap);
    int rc = 0;
    if (!buf) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory indexing %s", path);

    uint64_t file_pos = from; /* file offset of buf[0] */
    size_t have = 0;          /* valid bytes in buf */
    uint64_t read_pos = from; /* next file offset to read */
    bool first = from == 0;

    for (;;) {
        if (read_pos < size) {
            size_t want = cap - have;
            if ((uint64_t)want > size - read_pos) want = (size_t)(size - read_pos);
            rc = ctf__io_read(io, buf + have, want, read_pos, err);
            if (rc) goto done;
            have += want;
            read_pos += want;
            /* Only the caller's own scan reports (not a re-scan, not the parallel half). */
            const ctf_config *cfg = st->cfg;
            if (cfg && cfg->progress && !st->keep &&
                cfg->progress(cfg->progress_user, read_pos - from, size - from)) {
                rc = ctf__fail(err, CTF_EINVAL, (ctf__where){path, 0, 0, (int64_t)read_pos},
                               "indexing cancelled");
                goto done;
            }
        }
        size_t start = 0;
        if (first) {
            first = false;
            const unsigned char *u = (const unsigned char *)buf;
            /* UTF-32 first: its little-endian mark begins like UTF-16's (FF FE 00 00). */
            if (have >= 4 && ((u[0] == 0xFF && u[1] == 0xFE && !u[2] && !u[3]) ||
                              (!u[0] && !u[1] && u[2] == 0xFE && u[3] == 0xFF))) {
                rc = ctf__fail(err, CTF_EPARSE, (ctf__where){path, 1, 1, 0},
                               "UTF-32 is not supported (found a UTF-32 %s byte order mark); "
                               "convert the file to UTF-8",
                               u[0] ? "little-endian" : "big-endian");
                goto done;
            }
            if (have >= 2 && ((u[0] == 0xFF && u[1] == 0xFE) || (u[0] == 0xFE && u[1] == 0xFF))) {
                rc = ctf__fail(err, CTF_EPARSE, (ctf__where){path, 1, 1, 0},
                               "UTF-16 is not supported (found a UTF-16 byte order mark); "
                               "convert the file to UTF-8");
                goto done;
            }
            if (have >= 3 && u[0] == 0xEF && u[1] == 0xBB && u[2] == 0xBF) start = 3;
            idx->data_start = start;
        }
        /* Complete lines in buf[start..have). */
        const char *p, *end = buf + have;
        rc = scan_lines(st, buf + start, end, file_pos + start, &p);
        if (rc) goto done;
        size_t rest = (size_t)(end - p);
        if (read_pos >= size) {
            rc = scan_tail(st, p, end, file_pos + (uint64_t)(p - buf));
            break;
        }
        /* Keep the partial line, grow the buffer if one line fills it. */
        if (rest == have) {
            if (cap >= INDEX_MAX_LINE_BYTES) {
                rc = ctf__fail(err, CTF_ELIMIT,
                               (ctf__where){path, st->line_no + 1, 1, (int64_t)file_pos},
                               "line longer than the limit of %zu bytes", INDEX_MAX_LINE_BYTES);
                goto done;
            }
            char *nb = CTF_REALLOC(buf, cap * 2);
            if (!nb) {
                rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory indexing %s", path);
                goto done;
            }
            buf = nb;
            cap *= 2;
        } else {
            memmove(buf, p, rest);
            file_pos += (uint64_t)(p - buf);
            have = rest;
        }
    }
done:
    CTF_FREE(buf);
    return rc;
}

/* What the scanned file must have held; then the last entry goes into the fingerprint. */
static int scan_finish(scan_state *st, ctf_error *err)
{
    ctf_index *idx = st->idx;
    if (st->mode < 0)
        return ctf__fail(err, CTF_EPARSE, (ctf__where){idx->path, 0, 0, -1},
                         idx->file.size ? "the file holds only blank lines" : "the file is empty");
    if (idx->num_seqs == 0)
        return ctf__fail(err, CTF_EPARSE, (ctf__where){idx->path, 0, 0, -1},
                         "no line holds any of the configured inputs");
    return emit(st, &st->cur, idx->file.size);
}

#ifdef CTF_TESTING
uint64_t ctf__index_parallel_min = CTF__INDEX_PARALLEL_MIN;
#endif

/* The second half of the file, scanned by a thread of its own. */
typedef struct half_job {
    scan_state st;
    ctf__seqbuf keep; /* its finished sequences (the open one is st.cur) */
    ctf_index idx; /* its own counts; path and file are the real index's */
    ctf_error err;
    ctf__io *io;
    uint64_t from;
    int rc;
} half_job;

static void *half_main(void *arg)
{
    half_job *j = arg;
    j->rc = scan_range(&j->st, j->io, j->from, j->idx.file.size, &j->err);
    return NULL;
}

/* Line mode on two threads: [0, mid) here and [mid, size) on a second thread, mid just after a
 * newline near the middle, then the second table appended to the first. In line mode a line's
 * entry depends on nothing before it, so the halves are independent except for what the merge
 * restores: line numbers and keys (the second half counted from 0), the lines before the second
 * half's first sequence (they belong to the first half's last one) and the fingerprint (folded
 * entry by entry in file order, as the serial scan does). Used only when the mode is known from
 * the first byte and nothing is logged per line (trace level < 2), so that every message and
 * error comes out as the serial scan's would. @return : 0 and *ran = false when the file does not
 * qualify (nothing was changed), else the status of the scan. */
static int scan_parallel(scan_state *st, ctf__io *io, bool *ran, ctf_error *err)
{
    ctf_index *idx = st->idx;
    const uint64_t size = idx->file.size;
    *ran = false;
    if (st->cfg->num_threads < 2 || size < ctf__index_parallel_min || size < 8192 ||
        st->cfg->trace_level >= 2)
        return 0;
    char head[4], probe[65536];
    if (ctf__io_read(io, head, sizeof head, 0, err)) return 0;
    const size_t bom = (unsigned char)head[0] == 0xEF && (unsigned char)head[1] == 0xBB &&
                               (unsigned char)head[2] == 0xBF
                           ? 3
                           : 0;
    const char c0 = head[bom];
    if (!(c0 == '|' || (st->opts->skip_ids && !is_blank((unsigned char)c0) && c0 != '\n')))
        return 0; /* id mode, or decided further on: the serial scan decides */
    const uint64_t at = size / 2;
    const size_t n = (size_t)CTF_MIN((uint64_t)sizeof probe, size - at);
    if (ctf__io_read(io, probe, n, at, err)) return 0;
    const char *nl = memchr(probe, '\n', n);
    if (!nl || at + (uint64_t)(nl - probe) + 1 >= size) return 0;

    half_job *j = CTF_CALLOC(1, sizeof *j);
    if (!j) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory indexing %s", idx->path);
    j->idx.path = idx->path;
    j->idx.file = idx->file;
    j->idx.line_mode = true;
    j->st = *st;
    j->st.idx = &j->idx;
    j->st.keep = &j->keep;
    j->st.kept = 0;
    j->st.keep_limit = ctf__index_half_keep ? ctf__index_half_keep : 1;
    j->st.cache = NULL; /* the cache is the first half's alone */
    j->st.cache_file = (ctf__atomic_file){.fd = -1};
    j->st.mode = 1;
    j->st.have_seq = false;
    j->st.line_no = 0;
    j->st.lines_before = 0;
    j->st.err = &j->err;
    j->io = io;
    j->from = at + (uint64_t)(nl - probe) + 1;
    pthread_t th;
    if (pthread_create(&th, NULL, half_main, j) != 0) {
        CTF_FREE(j);
        return 0;
    }
    *ran = true;
    int rc = scan_range(st, io, 0, j->from, err);
    pthread_join(th, NULL);
    /* Stopped at its limit: its open sequence (not kept) is where the first thread goes on. */
    const bool stopped = j->rc == SCAN_STOP;
    if (stopped) j->rc = 0;
    if (!rc && j->rc) {
        /* The first half was fine: the second half's error is the first in the file. */
        *err = j->err;
        if (err->line) err->line += st->line_no;
        rc = j->rc;
    }
    if (!rc) {
        /* The second half's sequences go through the first half's sink in file order, as
         * the serial scan would have emitted them: the first half's open sequence gets the
         * lines before the second half's first one, then closes when that one opens. */
        if (st->have_seq)
            st->cur.lines += (uint32_t)j->st.lines_before;
        else
            st->lines_before += j->st.lines_before;
        const uint64_t shift = st->line_no;
        for (size_t i = 0; i <= j->st.kept && !rc; i++) {
            if (i == j->st.kept && (!j->st.have_seq || stopped)) break;
            ctf__seq s = i < j->st.kept ? j->keep.p[i] : j->st.cur;
            s.line += shift;
            s.key += shift; /* line mode: the key is the line number */
            if (st->have_seq) rc = emit(st, &st->cur, s.offset);
            st->cur = s;
            st->have_seq = true;
            idx->num_seqs++;
        }
        if (!stopped) {
            st->line_no += j->st.line_no;
        } else {
            st->line_no = shift + j->st.cur.line;
            const uint64_t resume = j->st.cur.offset;
            CTF_FREE(j->keep.p);
            j->keep.p = NULL;
            if (!rc) rc = scan_range(st, io, resume, idx->file.size, err);
        }
    }
    CTF_FREE(j->keep.p);
    CTF_FREE(j);
    return rc;
}

/* The whole file (on two threads when scan_parallel can), then the checks of what it held. */
static int scan_file(scan_state *st, ctf__io *io, ctf_error *err)
{
    bool ran;
    int rc = scan_parallel(st, io, &ran, err);
    if (!ran && !rc) rc = scan_range(st, io, 0, st->idx->file.size, err);
    return rc ? rc : scan_finish(st, err);
}

/*======================================================================
 * Index cache (rules 4.3)
 *====================================================================*/

#define CACHE_MAGIC "CTFIDX\x01\n"
/* 2: the repeated-id warning; 3: line mode: an empty name is data; 4: the checksum runs over
 * the records, then the header, so that the table is written as it is scanned; 5: repeat_on
 * counts the repeated ids (it was 0 or 1). */
#define CACHE_VERSION 5u

typedef struct cache_header {
    char magic[8];
    uint32_t version;
    uint32_t line_mode;
    uint64_t file_size;
    int64_t mtime_ns;
    uint64_t inode;
    uint64_t opts_hash;
    uint64_t num_seqs;
    uint64_t total_lines;
    uint64_t data_start;
    uint64_t seq_bytes;       /* sizeof(ctf__seq), guards against layout changes */
    uint64_t repeat_on;       /* ids that reappear after other ids (ctf_index.repeat.count):
                               * 0 none, else the scan's warning below is on */
    uint64_t repeat_id, repeat_line, repeat_first_line, repeat_offset;
} cache_header;

char *ctf_index_cache_path(const char *data_path, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.ctfidx", data_path);
    return buf;
}

/* Where the checkpoint fingerprint (table_hash over a header holding only the file size)
 * starts: hashed over the first header's layout, the fields before repeat_on, so that the
 * fingerprints in saved checkpoints stay the same when the cache format grows. */
static uint64_t fingerprint_seed(const ctf__file_id *file)
{
    const cache_header h = {.file_size = file->size};
    uint64_t seed = ctf__hash_bytes(0xcbf29ce484222325ull, &h, offsetof(cache_header, repeat_on));
    /* A remote object's ETag joins the fingerprint: a checkpoint taken on one version of an
     * object does not restore on another, whatever its size. Local files hash as before. */
    if (file->etag[0]) seed = ctf__hash_bytes(seed, file->etag, strlen(file->etag));
    return seed;
}

/* A checksum proves no intent: the table must also agree with itself and with the file, as a
 * scan would have built it. Offsets increase inside the file; each sequence's lines follow the
 * previous one's (a sequence owns every line up to the next), the last ends at the total; a
 * sequence spans at least a byte per line and holds at most a sample per line; in line mode a
 * sequence's key is its first line and holds at most one sample. Checked record by record as
 * the table streams in: s, its successor nx (NULL for the last), first: s is the first. */
static bool seq_consistent(const cache_header *h, const ctf__seq *s, const ctf__seq *nx, bool first)
{
    if (first && (s->offset < h->data_start || s->line > s->offset - h->data_start)) return false;
    const uint64_t end = nx ? nx->offset : h->file_size;
    if (s->offset >= h->file_size || end <= s->offset) return false;
    if (s->lines == 0 || s->samples > s->lines || end - s->offset < s->lines) return false;
    if (s->line > h->total_lines || s->lines > h->total_lines - s->line) return false;
    if (nx ? nx->line != s->line + s->lines : s->line + s->lines != h->total_lines) return false;
    if (h->line_mode && (s->key != s->line || s->samples > 1)) return false;
    return true;
}

/* Forgets what a sink built (a cache that failed half way is rebuilt by a scan). */
static void reset_tables(scan_state *st)
{
    ctf_index *idx = st->idx;
    CTF_FREE(idx->chunks);
    idx->chunks = NULL;
    idx->num_chunks = idx->num_seqs = 0;
    idx->total_samples = idx->max_seq_samples = idx->min_seq_samples = 0;
    memset(idx->hist, 0, sizeof idx->hist);
    st->chunks_cap = st->emitted = 0;
    st->hash = fingerprint_seed(&idx->file);
}

/* Streams the cache's table through st's sink (chunks, totals, fingerprint) a block at a time.
 * @return : 1 loaded, 0 not usable (reason logged at info; st reset), <0 out of memory. */
static int cache_load(scan_state *st, const ctf_config *cfg, const index_opts *o, ctf_error *err)
{
    ctf_index *idx = st->idx;
    const char *cpath = idx->cache_path;
    FILE *f = ctf__fopen_regular(cpath);
    if (!f) {
        /* Present but unusable (a FIFO, a directory): say so; absent: nothing to say. */
        if (errno != ENOENT)
            log_at(cfg, CTF_SEV_INFO, (ctf__where){cpath, 0, 0, -1},
                   "index cache ignored (%s); rebuilding",
                   errno == EINVAL ? "not a regular file" : strerror(errno));
        return 0;
    }
    enum { BLOCK = 4096 };
    cache_header h;
    const char *why = NULL;
    ctf__seq *blk = NULL;
    int rc = 0;
    if (fread(&h, sizeof h, 1, f) != 1) {
        why = "truncated header";
        goto out;
    }
    if (memcmp(h.magic, CACHE_MAGIC, 8) || h.version != CACHE_VERSION ||
        h.seq_bytes != sizeof(ctf__seq)) {
        why = "different format version";
        goto out;
    }
    if (h.file_size != idx->file.size || h.mtime_ns != idx->file.mtime_ns ||
        h.inode != idx->file.inode) {
        why = "the data file changed (size, modification time or inode)";
        goto out;
    }
    if (h.opts_hash != o->hash) {
        why = "index-shaping options differ (skipSequenceIds, aliases, definesMBSize)";
        goto out;
    }
    /* Every count against the cache file's own length before anything is read: the table must
     * be exactly what the header announces. */
    struct stat cst;
    if (fstat(fileno(f), &cst) != 0 || cst.st_size < (off_t)(sizeof h + sizeof(uint64_t))) {
        why = "truncated";
        goto out;
    }
    const uint64_t table_bytes = (uint64_t)cst.st_size - sizeof h - sizeof(uint64_t);
    if (h.num_seqs == 0 || h.num_seqs > h.file_size || table_bytes % sizeof(ctf__seq) ||
        h.num_seqs != table_bytes / sizeof(ctf__seq)) {
        why = "implausible sequence count";
        goto out;
    }
    if (h.total_lines > h.file_size || h.data_start > 3 || h.data_start >= h.file_size) {
        why = "implausible line count or data start";
        goto out;
    }
    if (h.repeat_on > h.total_lines ||
        (h.repeat_on && (h.line_mode || h.repeat_offset >= h.file_size ||
                         h.repeat_line >= h.total_lines || h.repeat_first_line >= h.repeat_line))) {
        why = "inconsistent warning record";
        goto out;
    }
    blk = CTF_MALLOC(BLOCK * sizeof *blk);
    if (!blk) {
        rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory loading the index cache");
        goto out;
    }
    uint64_t sum = 0xcbf29ce484222325ull, left = h.num_seqs;
    ctf__seq prev;
    bool have_prev = false, first = true;
    while (left) {
        const size_t n = (size_t)CTF_MIN(left, (uint64_t)BLOCK);
        if (fread(blk, sizeof *blk, n, f) != n) {
            why = "truncated";
            goto out;
        }
        sum = ctf__hash_bytes(sum, blk, n * sizeof *blk);
        for (size_t i = 0; i < n; i++) {
            if (have_prev) {
                if (!seq_consistent(&h, &prev, &blk[i], first)) {
                    why = "inconsistent sequence table";
                    goto out;
                }
                first = false;
                if ((rc = emit(st, &prev, blk[i].offset)) != 0) goto out;
            }
            prev = blk[i];
            have_prev = true;
        }
        left -= n;
    }
    if (!seq_consistent(&h, &prev, NULL, first)) {
        why = "inconsistent sequence table";
        goto out;
    }
    if ((rc = emit(st, &prev, h.file_size)) != 0) goto out;
    uint64_t want;
    if (fread(&want, sizeof want, 1, f) != 1) {
        why = "truncated";
        goto out;
    }
    if (fgetc(f) != EOF) {
        why = "trailing bytes";
        goto out;
    }
    if (want != ctf__hash_bytes(sum, &h, sizeof h)) {
        why = "checksum mismatch (corrupt)";
        goto out;
    }
    idx->cache_file = (ctf__file_id){(uint64_t)cst.st_size,
                                     (int64_t)cst.st_mtim.tv_sec * 1000000000 + cst.st_mtim.tv_nsec,
                                     (uint64_t)cst.st_ino};
    idx->num_seqs = (size_t)h.num_seqs;
    idx->total_lines = h.total_lines;
    idx->data_start = h.data_start;
    idx->line_mode = h.line_mode != 0;
    idx->from_cache = true;
    if (h.repeat_on) {
        idx->repeat.on = true;
        idx->repeat.id = h.repeat_id;
        idx->repeat.line = h.repeat_line;
        idx->repeat.first_line = h.repeat_first_line;
        idx->repeat.offset = h.repeat_offset;
        idx->repeat.count = h.repeat_on;
        warn_repeat(cfg, idx);
    }
    rc = 1;
out:
    fclose(f);
    CTF_FREE(blk);
    if (rc != 1) reset_tables(st);
    if (why)
        log_at(cfg, CTF_SEV_INFO, (ctf__where){cpath, 0, 0, -1},
               "index cache ignored (%s); rebuilding", why);
    return rc;
}

/* Opens the temporary cache file and reserves its header; the scan streams the records into
 * it (emit). A failure is a warning: the index is built without a cache. The file is written
 * the one atomic way (platform.c: a fresh name next to the cache, never through a link); a
 * cache in the remote cache directory is private (0600), one beside a local data file gets the
 * mode the user's umask gives, as the data's readers may share it. */
static void cache_begin(scan_state *st, const ctf_config *cfg)
{
    const ctf_index *idx = st->idx;
    const char *cpath = idx->cache_path;
    st->cache_sum = 0xcbf29ce484222325ull;
    st->cache_errno = 0;
    st->cache = NULL;
    const int flags = ctf__io_is_remote(idx->path) ? CTF__ATOMIC_PRIVATE : 0;
    int e = ctf__atomic_open(&st->cache_file, cpath, ".tmp", flags);
    if (!e && !(st->cache = ctf__atomic_stream(&st->cache_file))) e = errno ? errno : ENOMEM;
    const cache_header h = {{0}};
    if (!e && fwrite(&h, sizeof h, 1, st->cache) != 1) e = errno ? errno : EIO;
    if (e) {
        ctf__atomic_abort(&st->cache_file);
        st->cache = NULL;
        log_at(cfg, CTF_SEV_WARNING, (ctf__where){cpath, 0, 0, -1},
               "could not create the index cache (%s); continuing without it", strerror(e));
    }
}

/* Drops the temporary cache file (the scan failed). */
static void cache_abort(scan_state *st)
{
    ctf__atomic_abort(&st->cache_file);
    st->cache = NULL;
}

/* Completes the cache: the header, the checksum (records, then header), then the atomic
 * commit (flush, fsync, rename). @return : true when the cache now holds the index's table. */
static bool cache_end(scan_state *st, const ctf_config *cfg, const index_opts *o)
{
    const ctf_index *idx = st->idx;
    const char *cpath = idx->cache_path;
    const char *what = "write";
    FILE *f = st->cache;
    st->cache = NULL;
    int e = st->cache_errno;
    if (!f) {
        if (!e) return false; /* never opened: already reported */
        goto fail;
    }
    cache_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CACHE_MAGIC, 8);
    h.version = CACHE_VERSION;
    h.line_mode = idx->line_mode;
    h.file_size = idx->file.size;
    h.mtime_ns = idx->file.mtime_ns;
    h.inode = idx->file.inode;
    h.opts_hash = o->hash;
    h.num_seqs = idx->num_seqs;
    h.total_lines = idx->total_lines;
    h.data_start = idx->data_start;
    h.seq_bytes = sizeof(ctf__seq);
    h.repeat_on = idx->repeat.on ? CTF_MAX(idx->repeat.count, 1) : 0;
    h.repeat_id = idx->repeat.id;
    h.repeat_line = idx->repeat.line;
    h.repeat_first_line = idx->repeat.first_line;
    h.repeat_offset = idx->repeat.offset;
    const uint64_t sum = ctf__hash_bytes(st->cache_sum, &h, sizeof h);
    struct stat cst;
    if (fwrite(&sum, sizeof sum, 1, f) != 1 || fseek(f, 0, SEEK_SET) != 0 ||
        fwrite(&h, sizeof h, 1, f) != 1 || fflush(f) != 0) {
        e = errno ? errno : EIO;
        ctf__atomic_abort(&st->cache_file);
        goto fail;
    }
    /* The identity of what is renamed into place (for ctf__index_cache_invalidate). */
    if (fstat(fileno(f), &cst) == 0)
        st->idx->cache_file = (ctf__file_id){(uint64_t)cst.st_size,
                                             (int64_t)cst.st_mtim.tv_sec * 1000000000 +
                                                 cst.st_mtim.tv_nsec,
                                             (uint64_t)cst.st_ino};
    else
        memset(&st->idx->cache_file, 0, sizeof st->idx->cache_file);
    if ((e = ctf__atomic_commit(&st->cache_file)) != 0) {
        what = st->cache_file.step;
        memset(&st->idx->cache_file, 0, sizeof st->idx->cache_file);
        goto fail;
    }
    return true;
fail:
    log_at(cfg, CTF_SEV_WARNING, (ctf__where){cpath, 0, 0, -1},
           "could not %s the index cache (%s); continuing without it", what, strerror(e));
    return false;
}

bool ctf__index_cache_invalidate(const ctf_index *idx)
{
    if (!idx->cache_ok || !idx->cache_file.inode) return false;
    char cpath[CTF_ERROR_PATH_MAX + 16];
    ctf_index_cache_path(idx->path, cpath, sizeof cpath);
    /* The header's magic is cleared in place rather than the file removed: readers that hold
     * this index (this one included: its error locations come from the indexed records) keep
     * reading their records from it, while every later open finds no valid header and scans.
     * Only the very file that holds this index: a cache another process has rebuilt since
     * (renamed into place: another inode) is left alone. */
    int fd = open(cpath, O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errno == ENOENT;
    struct stat now;
    static const char cleared[8] = {0};
    bool done = fstat(fd, &now) == 0 && S_ISREG(now.st_mode) &&
                (uint64_t)now.st_ino == idx->cache_file.inode &&
                (uint64_t)now.st_size == idx->cache_file.size &&
                pwrite(fd, cleared, sizeof cleared, 0) == (ssize_t)sizeof cleared;
    close(fd);
    return done;
}

void ctf__index_stale(const ctf_index *idx, ctf_error *err)
{
    static const char note[] = " (its index cache was invalidated: a new reader indexes the "
                               "file again)";
    if (!ctf__index_cache_invalidate(idx) || !err || strstr(err->message, note)) return;
    size_t n = strlen(err->message);
    snprintf(err->message + n, sizeof err->message - n, "%s", note);
}

/* Chunk ch's records from the cache file (in file order: at the header's end plus
 * first_seq records). @return : true when read in full. */
static bool cache_read_chunk(const ctf_index *idx, const ctf__chunk *ch, ctf__seq *out)
{
    const char *cpath = idx->cache_path;
    ctf_error ignored;
    if (!cpath) return false;
    int fd = ctf__file_open(cpath, &ignored);
    if (fd < 0) return false;
    int rc = ctf__file_pread(fd, cpath, out, ch->num_seqs * sizeof *out,
                             sizeof(cache_header) + (uint64_t)ch->first_seq * sizeof *out,
                             &ignored);
    ctf__file_close(fd);
    return rc == 0;
}

/*======================================================================
 * A chunk's sequence records, re-made
 *====================================================================*/

#ifdef CTF_TESTING
atomic_long ctf__rescan_count;
#endif

/* A chunk's re-scan: a newline scan of its bytes with the indexing pass's own line rule (no
 * value parsing), fed block by block; its open sequence carries from one block to the next. */
struct ctf__rescan {
    scan_state st;
    ctf_index tmp;      /* the scan's counts; path and file are the real index's */
    const ctf_index *idx;
    size_t c;
    ctf__seqbuf *out;
    int rc;             /* the first failure, kept for ctf__rescan_end */
    ctf_error e;
};

int ctf__rescan_begin(const ctf_index *idx, size_t c, ctf__seqbuf *out, ctf__rescan **r,
                      ctf_error *err)
{
#ifdef CTF_TESTING
    atomic_fetch_add(&ctf__rescan_count, 1);
#endif
    const ctf__chunk *ch = &idx->chunks[c];
    ctf__rescan *x = *r = CTF_CALLOC(1, sizeof *x);
    if (!x)
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading chunk %zu of %s", c,
                         idx->path);
    x->tmp = (ctf_index){.path = idx->path, .file = idx->file, .line_mode = idx->line_mode};
    x->idx = idx;
    x->c = c;
    x->out = out;
    x->st = (scan_state){.idx = &x->tmp,
                         .opts = idx->opts,
                         .mode = idx->line_mode ? 1 : 0,
                         .rescan = true,
                         .line_no = ch->line,
                         .keep = out,
                         .err = &x->e};
    return 0;
}

int ctf__rescan_block(ctf__rescan *r, const char *p, const char *end, uint64_t base, bool last,
                      const char **rest)
{
    *rest = p;
    if (r->rc) return r->rc;
    int rc = scan_lines(&r->st, p, end, base, rest);
    if (!rc && last) {
        const ctf__chunk *ch = &r->idx->chunks[r->c];
        rc = scan_tail(&r->st, *rest, end, base + (uint64_t)(*rest - p));
        if (!rc && r->st.have_seq) rc = emit(&r->st, &r->st.cur, ch->offset + ch->size);
        r->st.have_seq = false;
        *rest = end;
    }
    return r->rc = rc;
}

size_t ctf__rescan_kept(const ctf__rescan *r) { return r->st.kept; }

bool ctf__rescan_open(const ctf__rescan *r, uint64_t *offset)
{
    *offset = r->st.cur.offset;
    return r->st.have_seq;
}

int ctf__rescan_end(ctf__rescan *r, ctf_error *err)
{
    const ctf_index *idx = r->idx;
    const size_t c = r->c, kept = r->st.kept;
    const ctf__chunk *ch = &idx->chunks[c];
    const ctf__seqbuf *out = r->out;
    const int rc = r->rc;
    if (rc == CTF_ENOMEM) *err = r->e;
    CTF_FREE(r);
    if (rc == CTF_ENOMEM) return rc;
    if (!rc && kept == ch->num_seqs && chunk_fold(out->p, kept) == ch->hash) return 0;
    /* Where: the first line whose sequence differs from the index's, when the index cache
     * holds the indexed records; else the chunk's first line. */
    uint64_t line = ch->line, at = ch->offset;
    ctf__seq *was = idx->cache_ok ? CTF_MALLOC(ch->num_seqs * sizeof *was) : NULL;
    if (was && cache_read_chunk(idx, ch, was) && chunk_fold(was, ch->num_seqs) == ch->hash) {
        const size_t n = CTF_MIN(kept, ch->num_seqs);
        size_t i = 0;
        while (i < n && !memcmp(&was[i], &out->p[i], sizeof *was)) i++;
        const ctf__seq *a = &was[i < ch->num_seqs ? i : ch->num_seqs - 1];
        line = a->line;
        at = a->offset;
        if (i < n) {
            const ctf__seq *b = &out->p[i];
            if (a->offset == b->offset && a->lines != b->lines)
                line = a->line + CTF_MIN(a->lines, b->lines);
            else if (b->offset < a->offset) {
                line = b->line;
                at = b->offset;
            }
        } else if (i < ch->num_seqs && i == kept && kept) {
            line = a->line;
        }
    }
    CTF_FREE(was);
    ctf__fail(err, CTF_ECHANGED, (ctf__where){idx->path, line + 1, 1, (int64_t)at},
              "the file changed since it was indexed: chunk %zu no longer matches the "
              "index (the data file changed on disk); reopen the reader",
              c);
    ctf__index_stale(idx, err);
    return CTF_ECHANGED;
}

/* Re-makes chunk c's records from its bytes, all at hand, into out. */
static int rescan_chunk(const ctf_index *idx, size_t c, const char *bytes, ctf__seqbuf *out,
                        ctf_error *err)
{
    const ctf__chunk *ch = &idx->chunks[c];
    ctf__rescan *r;
    int rc = ctf__rescan_begin(idx, c, out, &r, err);
    if (rc) return rc;
    const char *rest;
    ctf__rescan_block(r, bytes, bytes + ch->size, ch->offset, true, &rest);
    return ctf__rescan_end(r, err);
}

bool ctf__index_chunk_seqs_cached(const ctf_index *idx, size_t c, ctf__seqbuf *out)
{
    const ctf__chunk *ch = &idx->chunks[c];
    if (!idx->cache_ok) return false;
    if (out->cap < ch->num_seqs &&
        ctf__grow((void **)&out->p, &out->cap, ch->num_seqs, sizeof *out->p))
        return false;
    return cache_read_chunk(idx, ch, out->p) && chunk_fold(out->p, ch->num_seqs) == ch->hash;
}

int ctf__index_chunk_seqs(const ctf_index *idx, size_t c, const char *bytes, ctf__seqbuf *out,
                          ctf_error *err)
{
    const ctf__chunk *ch = &idx->chunks[c];
    if (idx->cbf) return ctf__cbf_chunk_seqs(idx, c, bytes, out, err);
    if (out->cap < ch->num_seqs &&
        ctf__grow((void **)&out->p, &out->cap, ch->num_seqs, sizeof *out->p))
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading chunk %zu of %s", c,
                         idx->path);
    /* A cache that fails the chunk's fold (replaced, damaged) is passed over for the data. */
    if (!bytes && ctf__index_chunk_seqs_cached(idx, c, out)) return 0;
    if (bytes) return rescan_chunk(idx, c, bytes, out, err);
    char *own = CTF_MALLOC(ch->size ? (size_t)ch->size : 1);
    if (!own)
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading chunk %zu of %s", c,
                         idx->path);
    ctf__io *io;
    int rc = ctf__io_open(idx->remote, idx->path, &idx->file, &io, err);
    if (!rc) rc = ctf__io_read(io, own, (size_t)ch->size, ch->offset, err);
    ctf__io_close(io);
    if (!rc) rc = rescan_chunk(idx, c, own, out, err);
    CTF_FREE(own);
    return rc;
}

/*======================================================================
 * Public entry points
 *====================================================================*/

/* ctf_index_sequence_samples's one re-made chunk. */
struct ctf__index_one {
    pthread_mutex_t mu;
    size_t chunk;       /* SIZE_MAX: none */
    ctf__seqbuf buf;
};

int ctf_index_build(const ctf_config *cfg, ctf_index **out, ctf_error *err)
{
    *out = NULL;
    if (!cfg || !cfg->path || !ctf__io_is_remote(cfg->path))
        return ctf__index_build(cfg, NULL, out, err);
    ctf__remote *rem;
    int rc = ctf__remote_new(&cfg->remote, &rem, err);
    if (rc) return rc;
    rc = ctf__index_build(cfg, rem, out, err);
    ctf__remote_unref(rem);
    return rc;
}

/* A CBF file (its magic number) is indexed by its own header: no scan, no cache; a remote
 * one by range requests for its first bytes, its header and its sequence lengths. */
static int try_cbf(ctf_index *idx, const ctf_config *cfg, ctf__remote *rem, bool *cbf,
                   ctf_error *err)
{
    ctf__io *io;
    int rc = ctf__io_open(rem, idx->path, &idx->file, &io, err);
    if (rc) return rc;
    rc = ctf__cbf_sniff(io, idx->file.size, cbf, err);
    if (!rc && *cbf) rc = ctf__cbf_index(idx, cfg, io, err);
    ctf__io_close(io);
    return rc;
}

int ctf__index_build(const ctf_config *cfg, ctf__remote *rem, ctf_index **out, ctf_error *err)
{
    *out = NULL;
    if (!cfg || !cfg->path || !cfg->path[0])
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "config.path: a data file is required");
    ctf_index *idx = CTF_CALLOC(1, sizeof *idx);
    index_opts o;
    int rc;
    if (!idx) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    if (ctf__index_opts_init(&o, cfg)) {
        CTF_FREE(idx);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    idx->path = ctf__strdup(cfg->path);
    idx->opts = ctf__index_opts_keep(&o);
    idx->one = CTF_CALLOC(1, sizeof *idx->one);
    if (!idx->path || !idx->opts || !idx->one) {
        CTF_FREE(idx->one);
        idx->one = NULL;
        rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
        goto fail;
    }
    pthread_mutex_init(&idx->one->mu, NULL);
    idx->one->chunk = SIZE_MAX;
    idx->remote = ctf__remote_ref(rem);
    rc = ctf__io_stat(rem, idx->path, &idx->file, err);
    if (rc) goto fail;
    /* A local file's cache sits beside it (when cache_index); a remote object's in the cache
     * directory, keyed by URL, ETag and size, whenever one is given: a remote open without it
     * would read every object whole. */
    if (cfg->cache_index || (rem && ctf__io_is_remote(idx->path))) {
        char cpath[CTF_ERROR_PATH_MAX + 64], why[160];
        if (!ctf__io_is_remote(idx->path))
            ctf_index_cache_path(idx->path, cpath, sizeof cpath);
        else if (!ctf__io_cache_path(rem, idx->path, &idx->file, cpath, sizeof cpath, why,
                                     sizeof why)) {
            cpath[0] = '\0';
            if (why[0])
                log_at(cfg, CTF_SEV_WARNING, (ctf__where){idx->path, 0, 0, -1},
                       "index cache directory %s; remote objects are indexed without a cache", why);
        }
        if (cpath[0] && !(idx->cache_path = ctf__strdup(cpath))) {
            rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
            goto fail;
        }
    }
    const bool use_cache = idx->cache_path != NULL;
    /* A local file is asked first; a remote object only when no index cache names it (the
     * cache is kept for text only, and a valid one costs no request). */
    bool cbf = false;
    if (!ctf__io_is_remote(idx->path)) {
        if ((rc = try_cbf(idx, cfg, rem, &cbf, err))) goto fail;
        if (cbf) goto cbf_done;
    }

    scan_state st;
    memset(&st, 0, sizeof st);
    st.idx = idx;
    st.cfg = cfg;
    st.opts = &o;
    st.mode = -1;
    st.err = err;
    st.chunk_size = cfg->chunk_size_bytes;
    st.hash = fingerprint_seed(&idx->file);
    rc = use_cache ? cache_load(&st, cfg, &o, err) : 0;
    if (rc < 0) goto fail;
    idx->cache_ok = rc == 1;
    if (rc == 0 && ctf__io_is_remote(idx->path)) {
        if ((rc = try_cbf(idx, cfg, rem, &cbf, err))) goto fail;
        if (cbf) goto cbf_done;
    }
    if (rc == 0) {
        ctf__io *io;
        rc = ctf__io_open(rem, idx->path, &idx->file, &io, err);
        if (rc) goto fail;
        if (use_cache) cache_begin(&st, cfg);
        rc = scan_file(&st, io, err);
        idx->total_lines = st.line_no;
        id_set_free(&st.ids);
        ctf__io_close(io);
        /* The file must not have changed while we read it (a remote object's reads each
         * demanded the indexed ETag already). */
        ctf__file_id now;
        if (!rc && !idx->file.etag[0]) {
            rc = ctf__io_stat(rem, idx->path, &now, err);
            if (!rc && (now.size != idx->file.size || now.mtime_ns != idx->file.mtime_ns))
                rc = ctf__fail(err, CTF_ECHANGED, (ctf__where){idx->path, 0, 0, -1},
                               "the file changed while it was being indexed");
        }
        if (rc) {
            if (use_cache) cache_abort(&st);
            goto fail;
        }
        if (use_cache) idx->cache_ok = cache_end(&st, cfg, &o);
    }
    idx->chunk_size_bytes = cfg->chunk_size_bytes;
    /* The checkpoint fingerprint: table_hash with a header holding only the file size, folded
     * record by record as the scan (or the cache load) emitted them. */
    idx->hash = st.hash;
    if (cfg->trace_level >= 2)
        log_at(cfg, CTF_SEV_INFO, (ctf__where){idx->path, 0, 0, -1},
               "indexed %zu sequences, %llu samples, %zu chunks%s", idx->num_seqs,
               (unsigned long long)idx->total_samples, idx->num_chunks,
               idx->from_cache ? " (from the index cache)" : "");
    ctf__index_opts_free(&o);
    *out = idx;
    return 0;
cbf_done:
    idx->chunk_size_bytes = cfg->chunk_size_bytes;
    ctf__index_opts_free(&o);
    *out = idx;
    return 0;
fail:
    ctf__index_opts_free(&o);
    ctf_index_free(idx);
    return rc;
}

uint64_t ctf__index_bytes(const ctf_index *idx)
{
    uint64_t n = sizeof *idx + idx->num_chunks * sizeof *idx->chunks + strlen(idx->path) + 1;
    if (idx->cache_path) n += strlen(idx->cache_path) + 1;
    if (idx->opts) {
        n += sizeof *idx->opts + idx->opts->num_aliases * (sizeof(char *) + sizeof(size_t));
        for (size_t i = 0; i < idx->opts->num_aliases; i++) n += idx->opts->alias_lens[i] + 1;
    }
    if (idx->one) n += idx->one->buf.cap * sizeof(ctf__seq);
    return n;
}

const char *ctf_index_cache_file(const ctf_index *idx) { return idx->cache_path; }

void ctf_index_get_info(const ctf_index *idx, ctf_index_info *info)
{
    memset(info, 0, sizeof *info);
    info->file_size = idx->file.size;
    info->sequences = idx->num_seqs;
    info->samples = idx->total_samples;
    info->lines = idx->total_lines;
    info->chunks = idx->num_chunks;
    info->max_sequence_samples = idx->max_seq_samples;
    info->line_mode = idx->line_mode;
    info->from_cache = idx->from_cache;
    info->min_sequence_samples = idx->min_seq_samples;
    memcpy(info->length_buckets, idx->hist, sizeof info->length_buckets);
    info->index_bytes = ctf__index_bytes(idx);
    info->repeated_ids = idx->repeat.count;
}

uint64_t ctf_index_sequence_samples(const ctf_index *idx, size_t i)
{
    if (i >= idx->num_seqs || !idx->num_chunks) return 0;
    /* The chunk holding i (binary search over first_seq), re-made unless it is the last one
     * asked for: walking the sequences in order re-makes each chunk once. */
    size_t lo = 0, hi = idx->num_chunks - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (idx->chunks[mid].first_seq <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    struct ctf__index_one *one = idx->one;
    uint64_t n = 0;
    pthread_mutex_lock(&one->mu);
    ctf_error ignored;
    if (one->chunk != lo) {
        one->chunk = SIZE_MAX;
        if (!ctf__index_chunk_seqs(idx, lo, NULL, &one->buf, &ignored)) one->chunk = lo;
    }
    if (one->chunk == lo) n = one->buf.p[i - idx->chunks[lo].first_seq].samples;
    pthread_mutex_unlock(&one->mu);
    return n;
}

int ctf_index_verify(const ctf_index *idx, ctf_error *err)
{
    ctf__error_clear(err);
    if (idx->cbf) return 0; /* a CBF file's index is its own header, checked when it is read */
    ctf__file_id now;
    /* Through the seam: a remote object is asked its size and ETag, then read by ranges. */
    int rc = ctf__io_stat(idx->remote, idx->path, &now, err);
    if (rc) return rc;
    if (now.size != idx->file.size || now.mtime_ns != idx->file.mtime_ns ||
        now.inode != idx->file.inode)
        rc = ctf__fail(err, CTF_ECHANGED, (ctf__where){idx->path, 0, 0, -1},
                       "the file changed since it was indexed (size, modification time or "
                       "inode, or the object's ETag)");
    ctf__io *io = NULL;
    if (!rc) rc = ctf__io_open(idx->remote, idx->path, &idx->file, &io, err);
    char *bytes = NULL;
    size_t cap = 0;
    ctf__seqbuf seqs = {0};
    /* Chunk by chunk, the records the indexing rule makes from the bytes now against the index
     * (the same check as a chunk load), and every chunk but the last ends a line. */
    for (size_t c = 0; !rc && c < idx->num_chunks; c++) {
        const ctf__chunk *ch = &idx->chunks[c];
        const size_t n = (size_t)ch->size;
        if (n > cap) {
            char *nb = CTF_REALLOC(bytes, n);
            if (!nb) {
                rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory verifying %s",
                               idx->path);
                break;
            }
            bytes = nb;
            cap = n;
        }
        if ((rc = ctf__io_read(io, bytes, n, ch->offset, err))) break;
        if (c + 1 < idx->num_chunks && n && bytes[n - 1] != '\n')
            rc = ctf__fail(err, CTF_ECHANGED,
                           (ctf__where){idx->path, 0, 0, (int64_t)(ch->offset + n - 1)},
                           "the file changed since it was indexed: chunk %zu no longer ends a "
                           "line",
                           c);
        else
            rc = ctf__index_chunk_seqs(idx, c, bytes, &seqs, err);
    }
    ctf__io_close(io);
    CTF_FREE(bytes);
    CTF_FREE(seqs.p);
    if (rc == CTF_ECHANGED) ctf__index_stale(idx, err);
    return rc;
}

void ctf_index_free(ctf_index *idx)
{
    if (!idx) return;
    CTF_FREE(idx->path);
    CTF_FREE(idx->cache_path);
    ctf__remote_unref(idx->remote);
    CTF_FREE(idx->chunks);
    ctf__cbf_free(idx->cbf);
    if (idx->opts) {
        ctf__index_opts_free(idx->opts);
        CTF_FREE(idx->opts);
    }
    if (idx->one) {
        pthread_mutex_destroy(&idx->one->mu);
        CTF_FREE(idx->one->buf.p);
        CTF_FREE(idx->one);
    }
    CTF_FREE(idx);
}
