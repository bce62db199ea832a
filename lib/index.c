/*
 * index.c -- the indexing stage: one sequential pass over a CTF file that finds every sequence
 * (key, byte offset, first line, line count, index samples) without converting a single value,
 * then cuts the sequences into chunks (SPEC 4.1-4.2); plus the on-disk index cache (SPEC 4.3).
 *
 * In:  the data file and the index-shaping options (skipSequenceIds, the stream aliases, the
 *      definesMBSize alias).
 * Out: a ctf_index: the sequence table in file order and the chunk table.
 *
 * The scan is line-oriented. In id mode (the default when the file starts with a digit) a line
 * starting with an id different from the previous one opens a sequence; every other line joins
 * the current one, blank lines included (SPEC 1.5, 1.10), so index-sample counts match CNTK's.
 * Only with definesMBSize or in line mode does the scan look inside lines, for `|NAME` tokens:
 * that is what keeps the common case at newline-scan speed.
 *
 * Cache file (DATA.ctfidx): a fixed header (magic, format version, data file size, mtime in ns,
 * inode, a hash of the index-shaping options, counts) followed by the raw sequence table and a
 * checksum over both. Anything that does not match means "ignore and rebuild", never an error.
 */
#include "ctfio_internal.h"

#include <errno.h>
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

uint64_t ctf__hash_bytes(uint64_t h, const void *data, size_t n)
{
    /* FNV-1a over 8-byte words with a final mix: fast enough for the sequence table and good
     * enough to catch corruption (not an adversarial checksum). */
    const unsigned char *p = data;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    while (n--) h = (h ^ *p++) * 0x100000001b3ull;
    return h;
}

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

/* The repeated-id warning (SPEC 1.5), from the scan or from the index cache: counted whether
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
 * Id set: detects ids that reappear on non-consecutive lines (SPEC 1.5, a warning).
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

typedef struct index_opts {
    bool skip_ids;
    const char *mb_alias;     /* alias of the definesMBSize stream, or NULL */
    size_t mb_alias_len;
    const char **aliases;     /* every configured alias (line mode: does a line hold data?) */
    size_t *alias_lens;
    size_t num_aliases;
    uint64_t hash;            /* of all of the above */
    bool first[256];          /* first bytes of the non-empty aliases: a cheap pre-filter */
} index_opts;

static const char *stream_alias(const ctf_stream_def *s)
{
    return (s->alias && s->alias[0]) ? s->alias : s->name;
}

static int opts_init(index_opts *o, const ctf_config *cfg)
{
    memset(o, 0, sizeof *o);
    o->skip_ids = cfg->skip_sequence_ids;
    o->aliases = CTF_CALLOC(cfg->num_streams, sizeof *o->aliases);
    o->alias_lens = CTF_CALLOC(cfg->num_streams, sizeof *o->alias_lens);
    if (!o->aliases || !o->alias_lens) {
        CTF_FREE(o->aliases);
        CTF_FREE(o->alias_lens);
        return CTF_ENOMEM;
    }
    uint64_t h = 0xcbf29ce484222325ull;
    h = ctf__hash_bytes(h, &o->skip_ids, 1);
    for (size_t i = 0; i < cfg->num_streams; i++) {
        const char *a = stream_alias(&cfg->streams[i]);
        o->aliases[i] = a;
        o->alias_lens[i] = strlen(a);
        /* `|#` opens a comment even when an alias starts with '#' */
        if (o->alias_lens[i] && a[0] != '#') o->first[(unsigned char)a[0]] = true;
        h = ctf__hash_bytes(h, a, o->alias_lens[i] + 1);
        if (cfg->streams[i].defines_mb_size) {
            o->mb_alias = a;
            o->mb_alias_len = o->alias_lens[i];
            h = ctf__hash_bytes(h, "mb:", 3);
            h = ctf__hash_bytes(h, a, o->alias_lens[i] + 1);
        }
    }
    o->num_aliases = cfg->num_streams;
    o->hash = h;
    return 0;
}

static void opts_free(index_opts *o)
{
    CTF_FREE(o->aliases);
    CTF_FREE(o->alias_lens);
}

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
    const ctf_config *cfg;
    const index_opts *opts;
    size_t seqs_cap;
    int mode;               /* -1 undecided, 0 id mode, 1 line mode */
    bool have_seq;          /* a sequence is open */
    uint64_t cur_id;
    uint64_t line_no;       /* 0-based number of the line being scanned */
    id_set ids;
    uint64_t hash;          /* table_hash over the finished entries, folded in as they close */
    uint64_t lines_before;  /* lines counted before the first sequence (parallel merge) */
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

static int push_seq(scan_state *st, uint64_t offset, uint64_t key)
{
    ctf_index *idx = st->idx;
    if (idx->num_seqs) st->hash = hash_seq(st->hash, &idx->seqs[idx->num_seqs - 1]);
    if (idx->num_seqs == st->seqs_cap &&
        ctf__grow((void **)&idx->seqs, &st->seqs_cap, idx->num_seqs + 1, sizeof *idx->seqs))
        return ctf__fail(st->err, CTF_ENOMEM, CTF__NOWHERE, "out of memory indexing %s",
                         idx->path);
    ctf__seq *s = &idx->seqs[idx->num_seqs++];
    s->offset = offset;
    s->key = key;
    s->line = st->line_no;
    s->samples = 0;
    s->lines = 0;
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
        /* Mode is decided by the first non-blank character of the file (SPEC 1.4). */
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
            idx->seqs[idx->num_seqs - 1].samples = o->mb_alias ? (mb ? 1 : 0) : 1;
        } else if (p < end && st->cfg->trace_level >= 2) {
            const char *q = p;
            while (q < end && is_blank((unsigned char)*q)) q++;
            if (q < end)
                log_at(st->cfg, CTF_SEV_INFO, (ctf__where){path, st->line_no + 1, 1, (int64_t)offset},
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
        if (!st->have_seq || id != st->cur_id) {
            uint64_t prev;
            int r = id_set_add(&st->ids, id, st->line_no, &prev);
            if (r < 0)
                return ctf__fail(st->err, CTF_ENOMEM, CTF__NOWHERE, "out of memory indexing %s",
                                 path);
            if (r == 1 && !idx->repeat.on) {
                idx->repeat.on = true;
                idx->repeat.id = id;
                idx->repeat.line = st->line_no;
                idx->repeat.first_line = prev;
                idx->repeat.offset = offset;
                warn_repeat(st->cfg, idx);
            }
            int rc = push_seq(st, offset, id);
            if (rc) return rc;
            st->cur_id = id;
        }
    } else if (!st->have_seq) {
        /* Blank lines before the first id are not part of any sequence. */
        goto count_line;
    }
    {
        ctf__seq *s = &idx->seqs[idx->num_seqs - 1];
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
        idx->seqs[idx->num_seqs - 1].lines++;
    else
        st->lines_before++;
    st->line_no++;
    return 0;
}

/* Scans the lines of [from, size) (from: 0, or the first byte after a newline). The checks of
 * the file's first bytes (BOM, UTF-16) run when from is 0. */
static int scan_range(scan_state *st, int fd, uint64_t from, uint64_t size, ctf_error *err)
{
    ctf_index *idx = st->idx;
    const char *path = idx->path;
    /* A small file needs no whole block (this also keeps sanitizer and fuzz runs fast). */
    size_t cap = size - from < INDEX_BLOCK_BYTES ? (size_t)(size - from) + 1 : INDEX_BLOCK_BYTES;
    char *buf = CTF_MALLOC(cap);
    int rc = 0;
    if (!buf) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory indexing %s", path);

    uint64_t file_pos = from; /* file offset of buf[0] */
    size_t have = 0;          /* valid bytes in buf */
    uint64_t read_pos = from; /* next file offset to read */
    bool first = from == 0;
    bool reserved = false;

    for (;;) {
        if (read_pos < size) {
            size_t want = cap - have;
            if ((uint64_t)want > size - read_pos) want = (size_t)(size - read_pos);
            rc = ctf__file_pread(fd, path, buf + have, want, read_pos, err);
            if (rc) goto done;
            have += want;
            read_pos += want;
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
        const char *p = buf + start, *end = buf + have;
        for (;;) {
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            if (!nl) break;
            rc = scan_line(st, p, nl, file_pos + (uint64_t)(p - buf));
            if (rc) goto done;
            p = nl + 1;
        }
        size_t rest = (size_t)(end - p);
        if (!reserved && read_pos < size && idx->num_seqs) {
            /* Reserve the sequence table from the first block's density (x 9/8), so that it
             * does not grow by doubling through the whole file; growth stays as a fallback. */
            reserved = true;
            uint64_t done_bytes = file_pos + (uint64_t)(p - buf) - from;
            if (done_bytes) {
                double est =
                    (double)idx->num_seqs * ((double)(size - from) / (double)done_bytes) * 1.125;
                if (est > (double)st->seqs_cap && est < (double)(SIZE_MAX / 2 / sizeof *idx->seqs)) {
                    size_t ncap = (size_t)est;
                    ctf__seq *ns = CTF_REALLOC(idx->seqs, ncap * sizeof *ns);
                    if (ns) {
                        idx->seqs = ns;
                        st->seqs_cap = ncap;
                    }
                }
            }
        }
        if (read_pos >= size) {
            /* The last line may lack its newline; an unterminated run of blanks is not a line. */
            const char *q = p;
            while (q < end && is_blank((unsigned char)*q)) q++;
            if (q < end) {
                rc = scan_line(st, p, end, file_pos + (uint64_t)(p - buf));
                if (rc) goto done;
            }
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
    st->hash = hash_seq(st->hash, &idx->seqs[idx->num_seqs - 1]);
    return 0;
}

/* Files of at least this many bytes are scanned by two threads when the reader has parse
 * threads (a variable, so that tests can lower it). */
uint64_t ctf__index_parallel_min = (uint64_t)64 << 20;

/* The second half of the file, scanned by a thread of its own. */
typedef struct half_job {
    scan_state st;
    ctf_index idx; /* its own sequence table; path and file are the real index's */
    ctf_error err;
    int fd;
    uint64_t from;
    int rc;
} half_job;

static void *half_main(void *arg)
{
    half_job *j = arg;
    j->rc = scan_range(&j->st, j->fd, j->from, j->idx.file.size, &j->err);
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
static int scan_parallel(scan_state *st, int fd, bool *ran, ctf_error *err)
{
    ctf_index *idx = st->idx;
    const uint64_t size = idx->file.size;
    *ran = false;
    if (st->cfg->num_threads < 2 || size < ctf__index_parallel_min || size < 8192 ||
        st->cfg->trace_level >= 2)
        return 0;
    char head[4], probe[65536];
    if (ctf__file_pread(fd, idx->path, head, sizeof head, 0, err)) return 0;
    const size_t bom = (unsigned char)head[0] == 0xEF && (unsigned char)head[1] == 0xBB &&
                               (unsigned char)head[2] == 0xBF
                           ? 3
                           : 0;
    const char c0 = head[bom];
    if (!(c0 == '|' || (st->opts->skip_ids && !is_blank((unsigned char)c0) && c0 != '\n')))
        return 0; /* id mode, or decided further on: the serial scan decides */
    const uint64_t at = size / 2;
    const size_t n = (size_t)CTF_MIN((uint64_t)sizeof probe, size - at);
    if (ctf__file_pread(fd, idx->path, probe, n, at, err)) return 0;
    const char *nl = memchr(probe, '\n', n);
    if (!nl || at + (uint64_t)(nl - probe) + 1 >= size) return 0;

    half_job *j = CTF_CALLOC(1, sizeof *j);
    if (!j) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory indexing %s", idx->path);
    j->idx.path = idx->path;
    j->idx.file = idx->file;
    j->idx.line_mode = true;
    j->st = *st;
    j->st.idx = &j->idx;
    j->st.seqs_cap = 0;
    j->st.mode = 1;
    j->st.have_seq = false;
    j->st.line_no = 0;
    j->st.lines_before = 0;
    j->st.err = &j->err;
    j->fd = fd;
    j->from = at + (uint64_t)(nl - probe) + 1;
    pthread_t th;
    if (pthread_create(&th, NULL, half_main, j) != 0) {
        CTF_FREE(j);
        return 0;
    }
    *ran = true;
    int rc = scan_range(st, fd, 0, j->from, err);
    pthread_join(th, NULL);
    if (!rc && j->rc) {
        /* The first half was fine: the second half's error is the first in the file. */
        *err = j->err;
        if (err->line) err->line += st->line_no;
        rc = j->rc;
    }
    const size_t n1 = idx->num_seqs, n2 = j->idx.num_seqs;
    if (!rc && n2) {
        if (n1 + n2 > st->seqs_cap &&
            ctf__grow((void **)&idx->seqs, &st->seqs_cap, n1 + n2, sizeof *idx->seqs))
            rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory indexing %s", idx->path);
    }
    if (!rc) {
        for (size_t i = 0; i < n2; i++) {
            ctf__seq s = j->idx.seqs[i];
            s.line += st->line_no;
            s.key += st->line_no; /* line mode: the key is the line number */
            idx->seqs[n1 + i] = s;
        }
        if (n1) idx->seqs[n1 - 1].lines += j->st.lines_before;
        else st->lines_before += j->st.lines_before;
        idx->num_seqs = n1 + n2;
        st->line_no += j->st.line_no;
        st->have_seq = st->have_seq || j->st.have_seq;
        /* The serial scan folds an entry into the fingerprint when the next one opens: the
         * first half's last entry (its line count just completed) and all of the second's but
         * the last are folded here; scan_finish folds the last. */
        for (size_t i = n1 ? n1 - 1 : 0; i + 1 < n1 + n2; i++)
            st->hash = hash_seq(st->hash, &idx->seqs[i]);
    }
    CTF_FREE(j->idx.seqs);
    CTF_FREE(j);
    return rc;
}

/* The whole file (on two threads when scan_parallel can), then the checks of what it held. */
static int scan_file(scan_state *st, int fd, ctf_error *err)
{
    bool ran;
    int rc = scan_parallel(st, fd, &ran, err);
    if (!ran && !rc) rc = scan_range(st, fd, 0, st->idx->file.size, err);
    return rc ? rc : scan_finish(st, err);
}

/*======================================================================
 * Chunks (SPEC 4.2)
 *====================================================================*/

int ctf__index_make_chunks(ctf_index *idx, uint64_t chunk_size_bytes, ctf_error *err)
{
    CTF_FREE(idx->chunks);
    idx->chunks = NULL;
    idx->num_chunks = 0;
    size_t cap = 0;
    idx->total_samples = 0;
    idx->max_seq_samples = 0;
    for (size_t i = 0; i < idx->num_seqs; i++) {
        const ctf__seq *s = &idx->seqs[i];
        uint64_t end = i + 1 < idx->num_seqs ? idx->seqs[i + 1].offset : idx->file.size;
        uint64_t len = end - s->offset;
        ctf__chunk *c = idx->num_chunks ? &idx->chunks[idx->num_chunks - 1] : NULL;
        if (!c || c->size + len > chunk_size_bytes) {
            if (ctf__grow((void **)&idx->chunks, &cap, idx->num_chunks + 1, sizeof *idx->chunks))
                return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory building chunks");
            c = &idx->chunks[idx->num_chunks++];
            c->first_seq = i;
            c->num_seqs = 0;
            c->offset = s->offset;
            c->size = 0;
            c->samples = 0;
        }
        c->num_seqs++;
        c->size += len;
        c->samples += s->samples;
        idx->total_samples += s->samples;
        if (s->samples > idx->max_seq_samples) idx->max_seq_samples = s->samples;
    }
    idx->chunk_size_bytes = chunk_size_bytes;
    return 0;
}

/*======================================================================
 * Index cache (SPEC 4.3)
 *====================================================================*/

#define CACHE_MAGIC "CTFIDX\x01\n"
#define CACHE_VERSION 3u /* 2: the repeated-id warning; 3: line mode: an empty name is data */

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
    uint64_t repeat_on;       /* the scan's repeated-id warning (ctf_index.repeat), 0 or 1 */
    uint64_t repeat_id, repeat_line, repeat_first_line, repeat_offset;
} cache_header;

char *ctf_index_cache_path(const char *data_path, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.ctfidx", data_path);
    return buf;
}

static uint64_t table_hash(const cache_header *h, const ctf__seq *seqs, size_t n)
{
    uint64_t x = ctf__hash_bytes(0xcbf29ce484222325ull, h, sizeof *h);
    return ctf__hash_bytes(x, seqs, n * sizeof *seqs);
}

/* Where the checkpoint fingerprint (table_hash over a header holding only the file size)
 * starts: hashed over the first header's layout, the fields before repeat_on, so that the
 * fingerprints in saved checkpoints stay the same when the cache format grows. */
static uint64_t fingerprint_seed(uint64_t file_size)
{
    const cache_header h = {.file_size = file_size};
    return ctf__hash_bytes(0xcbf29ce484222325ull, &h, offsetof(cache_header, repeat_on));
}

/* A checksum proves no intent: the table must also agree with itself and with the file, as a
 * scan would have built it. Offsets increase inside the file; each sequence's lines follow the
 * previous one's (a sequence owns every line up to the next), the last ends at the total; a
 * sequence spans at least a byte per line and holds at most a sample per line; in line mode a
 * sequence's key is its first line and holds at most one sample. */
static bool table_consistent(const cache_header *h, const ctf__seq *seqs)
{
    const uint64_t n = h->num_seqs;
    if (seqs[0].offset < h->data_start || seqs[0].line > seqs[0].offset - h->data_start)
        return false;
    for (uint64_t i = 0; i < n; i++) {
        const ctf__seq *s = &seqs[i];
        const uint64_t end = i + 1 < n ? seqs[i + 1].offset : h->file_size;
        if (s->offset >= h->file_size || end <= s->offset) return false;
        if (s->lines == 0 || s->samples > s->lines || end - s->offset < s->lines) return false;
        if (s->line > h->total_lines || s->lines > h->total_lines - s->line) return false;
        if (i + 1 < n ? seqs[i + 1].line != s->line + s->lines
                      : s->line + s->lines != h->total_lines)
            return false;
        if (h->line_mode && (s->key != s->line || s->samples > 1)) return false;
    }
    return true;
}

/* @return : 1 loaded, 0 not usable (reason logged at info), <0 out of memory. */
static int cache_load(ctf_index *idx, const ctf_config *cfg, const index_opts *o, ctf_error *err)
{
    char cpath[CTF_ERROR_PATH_MAX + 16];
    ctf_index_cache_path(idx->path, cpath, sizeof cpath);
    FILE *f = ctf__fopen_regular(cpath, false);
    if (!f) {
        /* Present but unusable (a FIFO, a directory): say so; absent: nothing to say. */
        if (errno != ENOENT)
            log_at(cfg, CTF_SEV_INFO, (ctf__where){cpath, 0, 0, -1},
                   "index cache ignored (%s); rebuilding",
                   errno == EINVAL ? "not a regular file" : strerror(errno));
        return 0;
    }
    cache_header h;
    const char *why = NULL;
    ctf__seq *seqs = NULL;
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
    /* Every count against the cache file's own length before anything is allocated: the
     * table must be exactly what the header announces (a corrupt count is an ignored cache,
     * never an allocation of its size). */
    struct stat cst;
    if (fstat(fileno(f), &cst) != 0 || cst.st_size < (off_t)(sizeof h + sizeof(uint64_t))) {
        why = "truncated";
        goto out;
    }
    const uint64_t table_bytes = (uint64_t)cst.st_size - sizeof h - sizeof(uint64_t);
    if (h.num_seqs == 0 || h.num_seqs > h.file_size || table_bytes % sizeof *seqs ||
        h.num_seqs != table_bytes / sizeof *seqs) {
        why = "implausible sequence count";
        goto out;
    }
    if (h.total_lines > h.file_size || h.data_start > 3 || h.data_start >= h.file_size) {
        why = "implausible line count or data start";
        goto out;
    }
    seqs = CTF_MALLOC((size_t)h.num_seqs * sizeof *seqs);
    if (!seqs) {
        rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory loading the index cache");
        goto out;
    }
    uint64_t sum;
    if (fread(seqs, sizeof *seqs, (size_t)h.num_seqs, f) != h.num_seqs ||
        fread(&sum, sizeof sum, 1, f) != 1) {
        why = "truncated";
        goto out;
    }
    if (fgetc(f) != EOF) {
        why = "trailing bytes";
        goto out;
    }
    if (sum != table_hash(&h, seqs, (size_t)h.num_seqs)) {
        why = "checksum mismatch (corrupt)";
        goto out;
    }
    if (h.repeat_on > 1 ||
        (h.repeat_on && (h.line_mode || h.repeat_offset >= h.file_size ||
                         h.repeat_line >= h.total_lines || h.repeat_first_line >= h.repeat_line))) {
        why = "inconsistent warning record";
        goto out;
    }
    if (!table_consistent(&h, seqs)) {
        why = "inconsistent sequence table";
        goto out;
    }
    idx->seqs = seqs;
    seqs = NULL;
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
        warn_repeat(cfg, idx);
    }
    rc = 1;
out:
    fclose(f);
    CTF_FREE(seqs);
    if (why)
        log_at(cfg, CTF_SEV_INFO, (ctf__where){cpath, 0, 0, -1},
               "index cache ignored (%s); rebuilding", why);
    return rc;
}

static void cache_save(const ctf_index *idx, const ctf_config *cfg, const index_opts *o)
{
    char cpath[CTF_ERROR_PATH_MAX + 16], tmp[CTF_ERROR_PATH_MAX + 48];
    ctf_index_cache_path(idx->path, cpath, sizeof cpath);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", cpath, (long)getpid());
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
    h.repeat_on = idx->repeat.on;
    h.repeat_id = idx->repeat.id;
    h.repeat_line = idx->repeat.line;
    h.repeat_first_line = idx->repeat.first_line;
    h.repeat_offset = idx->repeat.offset;
    uint64_t sum = table_hash(&h, idx->seqs, idx->num_seqs);
    FILE *f = ctf__fopen_regular(tmp, true);
    const char *what = "create";
    if (!f) goto fail;
    what = "write";
    if (fwrite(&h, sizeof h, 1, f) != 1 ||
        fwrite(idx->seqs, sizeof *idx->seqs, idx->num_seqs, f) != idx->num_seqs ||
        fwrite(&sum, sizeof sum, 1, f) != 1 || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        int e = errno;
        fclose(f);
        errno = e;
        goto fail;
    }
    if (fclose(f) != 0) goto fail;
    what = "rename";
    if (rename(tmp, cpath) != 0) goto fail;
    return;
fail:;
    int e = errno;
    remove(tmp);
    log_at(cfg, CTF_SEV_WARNING, (ctf__where){cpath, 0, 0, -1},
           "could not %s the index cache (%s); continuing without it", what, strerror(e));
}

/*======================================================================
 * Public entry points
 *====================================================================*/

int ctf_index_build(const ctf_config *cfg, ctf_index **out, ctf_error *err)
{
    *out = NULL;
    if (!cfg || !cfg->path || !cfg->path[0])
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "config.path: a data file is required");
    ctf_index *idx = CTF_CALLOC(1, sizeof *idx);
    index_opts o;
    int rc;
    uint64_t scan_hash = 0;
    if (!idx) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    if (opts_init(&o, cfg)) {
        CTF_FREE(idx);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    idx->path = ctf__strdup(cfg->path);
    if (!idx->path) {
        rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
        goto fail;
    }
    rc = ctf__file_stat(idx->path, &idx->file, err);
    if (rc) goto fail;

    rc = cfg->cache_index ? cache_load(idx, cfg, &o, err) : 0;
    if (rc < 0) goto fail;
    if (rc == 0) {
        int fd = ctf__file_open(idx->path, err);
        if (fd < 0) {
            rc = fd;
            goto fail;
        }
        scan_state st;
        memset(&st, 0, sizeof st);
        st.idx = idx;
        st.cfg = cfg;
        st.opts = &o;
        st.mode = -1;
        st.err = err;
        st.hash = fingerprint_seed(idx->file.size);
        rc = scan_file(&st, fd, err);
        scan_hash = st.hash;
        idx->total_lines = st.line_no;
        id_set_free(&st.ids);
        ctf__file_close(fd);
        if (rc) goto fail;
        /* The file must not have changed while we read it. */
        ctf__file_id now;
        rc = ctf__file_stat(idx->path, &now, err);
        if (rc) goto fail;
        if (now.size != idx->file.size || now.mtime_ns != idx->file.mtime_ns) {
            rc = ctf__fail(err, CTF_ECHANGED, (ctf__where){idx->path, 0, 0, -1},
                           "the file changed while it was being indexed");
            goto fail;
        }
        if (cfg->cache_index) cache_save(idx, cfg, &o);
    }
    rc = ctf__index_make_chunks(idx, cfg->chunk_size_bytes, err);
    if (rc) goto fail;
    /* The checkpoint fingerprint: table_hash with a header holding only the file size; a scan
     * folded it in as it went (same value), a cache load computes it here. */
    idx->hash = idx->from_cache
                    ? ctf__hash_bytes(fingerprint_seed(idx->file.size), idx->seqs,
                                      idx->num_seqs * sizeof *idx->seqs)
                    : scan_hash;
    if (cfg->trace_level >= 2)
        log_at(cfg, CTF_SEV_INFO, (ctf__where){idx->path, 0, 0, -1},
               "indexed %zu sequences, %llu samples, %zu chunks%s", idx->num_seqs,
               (unsigned long long)idx->total_samples, idx->num_chunks,
               idx->from_cache ? " (from the index cache)" : "");
    opts_free(&o);
    *out = idx;
    return 0;
fail:
    opts_free(&o);
    ctf_index_free(idx);
    return rc;
}

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
}

uint64_t ctf_index_sequence_samples(const ctf_index *idx, size_t i)
{
    return i < idx->num_seqs ? idx->seqs[i].samples : 0;
}

void ctf_index_free(ctf_index *idx)
{
    if (!idx) return;
    CTF_FREE(idx->path);
    CTF_FREE(idx->seqs);
    CTF_FREE(idx->chunks);
    CTF_FREE(idx);
}
