/*
 * chunkstore.c -- the chunk cache (docs/chunk-cache.md): a stage on a corpus's load that keeps
 * each parsed text chunk in a directory, in CBF's chunk layout, so that a later sweep or a later
 * open decodes the stored chunk instead of reading and parsing the text again.
 *
 * An entry is one file, DIR/<key>.chunk: a small header, the chunk's sequence records, then the
 * chunk's bytes as cbf_build.c writes them (at the reader's precision, sparse entries in the
 * text's order), which cbf.c decodes into the very values the parse made. The key is a 128-bit
 * hash of everything the parse depends on: the file's identity (path, size, modification time
 * and inode, or URL, ETag and size), the chunk's place in it, the index's fingerprint, the
 * streams, the precision, the line and frame modes and the trace level. A changed file has
 * another key, so its old entries are never read (they age out under the limit).
 *
 * Only clean chunks are stored: one whose parse recorded any problem, dropped anything or cut a
 * sample short is parsed again each time, so that its errors, warnings and their order and
 * budget are exactly the parse's. An entry is written through the atomic writer (platform.c: a
 * temporary file of its own, 0600, never through a link) and renamed into place, so readers
 * (threads or processes sharing the directory) see a whole entry or none (an open removes the
 * temporary files of writers that died); a header checksum over the rest catches a torn or
 * damaged one, which is then parsed again and overwritten. The checksum detects damage, not
 * forgery: the directory must be ours alone (made 0700; one another user owns or can write is
 * not used at all, docs/chunk-cache.md "Trust"), and an entry another user owns is a miss. Writing
 * never fails a load: a directory that cannot be written is one warning at open, a write that
 * fails later (a full disk) one warning carried by the chunk, and from then on chunks are only
 * read. A limit in bytes keeps the directory small: a hit touches its entry's modification
 * time, and a store that takes the directory over the limit removes the least recently touched
 * entries.
 */
#include "source/source.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ENTRY_MAGIC "ctfchk01"
#define ENTRY_SUFFIX ".chunk"
#define TEMP_SUFFIX ".tmp"
/* A writer keeps its temporary file for one chunk's write: one older than this was left by a
 * writer that died (killed, crashed, a machine that went down with DIR on shared storage). */
#define STALE_TEMP_SECONDS 3600

/* The entry's header (native byte order: the key covers the layout, so another machine's entry
 * is another key). */
typedef struct entry_head {
    char magic[8];
    uint64_t key[2];
    uint64_t num_seqs;
    uint64_t samples;        /* the CBF chunk's sequence lengths, summed */
    uint64_t cbf_size;       /* bytes of the CBF chunk, after the records */
    uint64_t sum;            /* ctf__hash_bytes over everything after the header */
} entry_head;

struct ctf__chunkstore {
    char *dir;
    uint64_t limit;
    atomic_int refs;
    atomic_bool writable;
    atomic_bool warned;          /* the one warning about writing has been given */
    atomic_uint_least64_t total; /* bytes of entries, as far as this process knows */
    pthread_mutex_t evict_mu;    /* one eviction scan at a time */
};

static void hex_key(char *out, const uint64_t key[2])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)key[0], (unsigned long long)key[1]);
}

/* DIR/<key>.chunk into a fresh string, or NULL. */
static char *entry_path(const ctf__chunkstore *s, const uint64_t key[2])
{
    char hex[33];
    hex_key(hex, key);
    size_t n = strlen(s->dir) + 1 + 32 + sizeof ENTRY_SUFFIX;
    char *p = CTF_MALLOC(n);
    if (p) snprintf(p, n, "%s/%s%s", s->dir, hex, ENTRY_SUFFIX);
    return p;
}

/*======================================================================
 * Eviction
 *====================================================================*/

typedef struct aged {
    char *name;
    uint64_t size;
    int64_t mtime_ns;
} aged;

static int cmp_aged(const void *a, const void *b)
{
    const aged *x = a, *y = b;
    if (x->mtime_ns != y->mtime_ns) return x->mtime_ns < y->mtime_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

static bool is_entry(const char *name)
{
    size_t n = strlen(name), k = strlen(ENTRY_SUFFIX);
    return n == 32 + k && name[0] != '.' && !strcmp(name + 32, ENTRY_SUFFIX);
}

/* Lists the entries (name, size, mtime) of the directory; @return : how many, *total their
 * bytes; *out NULL when none or out of memory. */
static size_t list_entries(const ctf__chunkstore *s, aged **out, uint64_t *total)
{
    *out = NULL;
    *total = 0;
    DIR *d = opendir(s->dir);
    if (!d) return 0;
    aged *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_entry(e->d_name)) continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
            continue;
        if (n == cap && ctf__grow((void **)&v, &cap, n + 1, sizeof *v)) break;
        if (!(v[n].name = ctf__strdup(e->d_name))) break;
        v[n].size = (uint64_t)st.st_size;
        v[n].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        *total += v[n].size;
        n++;
    }
    closedir(d);
    *out = v;
    return n;
}

/* <key>.chunk.<pid>-<random>.tmp, as ctf__atomic_open names put()'s temporary files, or
 * .<key>-<pid>-<n>.tmp, as earlier versions did. */
static bool is_temp(const char *name)
{
    size_t n = strlen(name), k = strlen(TEMP_SUFFIX);
    if (n < 1 + 32 + k || strcmp(name + n - k, TEMP_SUFFIX)) return false;
    const size_t at = name[0] == '.' ? 1 : 0;
    for (size_t i = at; i < at + 32; i++)
        if (!isxdigit((unsigned char)name[i])) return false;
    if (at) return name[33] == '-';
    const size_t e = strlen(ENTRY_SUFFIX);
    return n > 32 + e + 1 + k && !strncmp(name + 32, ENTRY_SUFFIX, e) && name[32 + e] == '.';
}

/* Removes the temporary files that writers which died left behind: nothing else would, and
 * each can be as large as a chunk. */
static void sweep_temps(const ctf__chunkstore *s)
{
    DIR *d = opendir(s->dir);
    if (!d) return;
    const time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        if (!is_temp(e->d_name) || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
            !S_ISREG(st.st_mode))
            continue;
        if (now - st.st_mtim.tv_sec > STALE_TEMP_SECONDS) unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

/* Removes the least recently used entries until the directory holds at most 7/8 of the limit
 * (so that the next few stores do not each scan it again). */
static void evict(ctf__chunkstore *s)
{
    pthread_mutex_lock(&s->evict_mu);
    aged *v;
    uint64_t total;
    size_t n = list_entries(s, &v, &total);
    if (total > s->limit) {
        qsort(v, n, sizeof *v, cmp_aged);
        const uint64_t goal = s->limit - s->limit / 8;
        int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        for (size_t i = 0; dfd >= 0 && i < n && total > goal; i++)
            /* Another process may have removed it first: its bytes are gone all the same. */
            if (!unlinkat(dfd, v[i].name, 0) || errno == ENOENT) total -= v[i].size;
        if (dfd >= 0) close(dfd);
    }
    atomic_store(&s->total, total);
    for (size_t i = 0; i < n; i++) CTF_FREE(v[i].name);
    CTF_FREE(v);
    pthread_mutex_unlock(&s->evict_mu);
}

/*======================================================================
 * Opening
 *====================================================================*/

static void warn(const ctf_config *cfg, const char *dir, const char *why, const char *fate)
{
    if (!cfg->log) return;
    ctf_error w;
    ctf__fail(&w, CTF_OK, (ctf__where){dir, 0, 0, -1},
              "chunk cache %s: %s; chunks are parsed and %s", dir, why, fate);
    cfg->log(cfg->log_user, CTF_SEV_WARNING, &w);
}

/* Whether the directory may be used (made 0700 if missing; docs/chunk-cache.md, "Trust"):
 * ours alone, then writable (a file created and removed). @return : 0, or an errno value with
 * why saying what is wrong. */
static int probe(const char *dir, char *why, size_t cap)
{
    int e = ctf__private_dir(dir, true, why, cap);
    if (e) return e;
    ctf__atomic_file af;
    size_t n = strlen(dir) + 16;
    char *p = CTF_MALLOC(n);
    if (!p) return ENOMEM;
    snprintf(p, n, "%s/.probe", dir);
    e = ctf__atomic_open(&af, p, ".tmp", CTF__ATOMIC_PRIVATE);
    ctf__atomic_abort(&af);
    CTF_FREE(p);
    if (e) snprintf(why, cap, "cannot be written (%s)", strerror(e));
    return e;
}

int ctf__chunkstore_open(const ctf_config *cfg, ctf__chunkstore **out, ctf_error *err)
{
    *out = NULL;
    if (!cfg->chunk_cache || !cfg->chunk_cache[0]) return 0;
    ctf__chunkstore *s = CTF_CALLOC(1, sizeof *s);
    if (!s || !(s->dir = ctf__strdup(cfg->chunk_cache))) {
        CTF_FREE(s);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    size_t n = strlen(s->dir);
    while (n > 1 && s->dir[n - 1] == '/') s->dir[--n] = 0;
    s->limit = cfg->chunk_cache_limit;
    atomic_init(&s->refs, 1);
    atomic_init(&s->warned, false);
    atomic_init(&s->total, 0);
    pthread_mutex_init(&s->evict_mu, NULL);
    char why[160];
    const int e = probe(s->dir, why, sizeof why);
    atomic_init(&s->writable, e == 0);
    if (e) {
        /* A directory that another user owns or can write is not read either: its entries
         * could be anyone's. The load goes on without the cache (one warning), as for a
         * directory that cannot be written. */
        if (e == EPERM) {
            warn(cfg, s->dir, why, "the cache is not used");
            ctf__chunkstore_unref(s);
            return 0;
        }
        atomic_store(&s->warned, true);
        warn(cfg, s->dir, why, "not stored");
    } else {
        sweep_temps(s);
        if (s->limit) evict(s); /* a smaller limit than the last run's applies at once */
    }
    *out = s;
    return 0;
}

ctf__chunkstore *ctf__chunkstore_ref(ctf__chunkstore *s)
{
    if (s) atomic_fetch_add(&s->refs, 1);
    return s;
}

void ctf__chunkstore_unref(ctf__chunkstore *s)
{
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
    pthread_mutex_destroy(&s->evict_mu);
    CTF_FREE(s->dir);
    CTF_FREE(s);
}

/*======================================================================
 * The key
 *====================================================================*/

static void mix(uint64_t key[2], const void *p, size_t n)
{
    key[0] = ctf__hash_bytes(key[0], p, n);
    key[1] = ctf__hash_bytes(key[1] ^ 0x9e3779b97f4a7c15ull, p, n);
}

static void mix_str(uint64_t key[2], const char *s)
{
    const uint64_t n = s ? strlen(s) : UINT64_MAX;
    mix(key, &n, sizeof n);
    if (s) mix(key, s, (size_t)n);
}

static void chunk_key(const ctf__parse_cfg *pc, const ctf_index *idx, size_t lc, uint64_t key[2])
{
    const ctf__chunk *ch = &idx->chunks[lc];
    key[0] = 0xcbf0c4a11ca5e001ull;
    key[1] = 0x243f6a8885a308d3ull;
    /* The layout of this file's entries on this machine. */
    const uint64_t layout[4] = {1, sizeof(ctf__seq), sizeof(entry_head), 0x0102030405060708ull};
    mix(key, layout, sizeof layout);
    mix_str(key, idx->path);
    mix_str(key, idx->file.etag);
    const uint64_t file[4] = {idx->file.size, (uint64_t)idx->file.mtime_ns, idx->file.inode,
                              idx->hash};
    mix(key, file, sizeof file);
    const uint64_t chunk[5] = {ch->offset, ch->size, ch->num_seqs, ch->samples, ch->hash};
    mix(key, chunk, sizeof chunk);
    const uint64_t parse[5] = {(uint64_t)pc->precision, pc->line_mode, pc->frame_mode,
                               (uint64_t)pc->trace_level, pc->num_streams};
    mix(key, parse, sizeof parse);
    for (size_t k = 0; k < pc->num_streams; k++) {
        const ctf_stream_def *d = &pc->streams[k];
        mix_str(key, d->name);
        mix_str(key, ctf__stream_field(d));
        const uint64_t w[3] = {d->dim, d->is_sparse, d->defines_mb_size};
        mix(key, w, sizeof w);
    }
}

/*======================================================================
 * Reading an entry
 *====================================================================*/

/* Chunk c from its entry: *out and the records (handed over as the load would), or a miss
 * (false) for an entry that is absent, torn, damaged or not this chunk's. */
static bool get(ctf__chunkstore *s, const char *path, const uint64_t key[2],
                const ctf__parse_cfg *pc, const ctf__chunk *ch, size_t c, ctf__readbuf *rb,
                ctf__bufpool *pool, ctf__chunk_data **out)
{
    const uint64_t t0 = ctf__now_ns();
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    struct stat st;
    bool ok = false;
    entry_head h;
    char *buf = NULL;
    size_t size = 0;
    /* An entry someone else made is not ours to trust, whatever the directory let happen
     * (a directory made private only after others wrote in it). */
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (uint64_t)st.st_size < sizeof h || (uint64_t)st.st_size > SIZE_MAX / 2)
        goto done;
    size = (size_t)st.st_size;
    if (!(buf = ctf__readbuf_get(rb, size))) goto done;
    for (size_t got = 0; got < size;) {
        ssize_t r = pread(fd, buf + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) goto done;
        got += (size_t)r;
    }
    ctf__perf_since(rb->perf, CTF__PERF_READ_NS, t0);
    ctf__perf_add(rb->perf, CTF__PERF_READ_BYTES, size);
    ctf__perf_add(rb->perf, CTF__PERF_READS, 1);
    memcpy(&h, buf, sizeof h);
    const uint64_t rec = (uint64_t)ch->num_seqs * sizeof(ctf__seq);
    if (memcmp(h.magic, ENTRY_MAGIC, 8) || h.key[0] != key[0] || h.key[1] != key[1] ||
        h.num_seqs != ch->num_seqs || h.cbf_size > size || size - h.cbf_size < sizeof h ||
        size - h.cbf_size - sizeof h != rec ||
        ctf__hash_bytes(0x5bd1e9955bd1e995ull, buf + sizeof h, size - sizeof h) != h.sum)
        goto done;
    const uint64_t t1 = ctf__now_ns();
    ctf_error e;
    if (ctf__cbf_decode_bytes(pc, path, buf + sizeof h + rec, h.cbf_size, ch->num_seqs, h.samples,
                              pool, out, &e))
        goto done;
    ctf__perf_since(rb->perf, CTF__PERF_PARSE_NS, t1);
    if (!rb->seqs.p && pool) {
        size_t got = 0;
        rb->seqs.p = ctf__bufpool_take(pool, (size_t)rec, &got);
        rb->seqs.cap = rb->seqs.p ? got / sizeof *rb->seqs.p : 0;
    }
    if (rb->seqs.cap < ch->num_seqs &&
        ctf__grow((void **)&rb->seqs.p, &rb->seqs.cap, ch->num_seqs, sizeof *rb->seqs.p)) {
        ctf__chunk_data_free(*out);
        *out = NULL;
        goto done;
    }
    memcpy(rb->seqs.p, buf + sizeof h, (size_t)rec);
    (*out)->chunk = c;
    if (rb->publish) {
        rb->publish(rb->publish_ctx, c, rb->seqs.p, rb->seqs.cap);
        rb->seqs = (ctf__seqbuf){0};
    }
    /* Recently used: the limit removes the entries touched longest ago first. A directory
     * that cannot be written keeps the old time (its entries are only read). */
    if (atomic_load(&s->writable)) (void)futimens(fd, NULL);
    ok = true;
done:
    close(fd);
    return ok;
}

/*======================================================================
 * Writing an entry
 *====================================================================*/

/* Whether the parse of cd is what a decode of its stored bytes gives, errors and all. */
static bool clean(const ctf__chunk_data *cd, size_t num_seqs)
{
    if (cd->num_problems || cd->num_errors || cd->num_warnings || cd->num_infos || cd->fatal ||
        cd->dropped_rows || cd->dropped_seqs || cd->num_seqs != num_seqs)
        return false;
    for (size_t i = 0; i < cd->num_seqs; i++)
        if (cd->dropped[i]) return false;
    for (size_t k = 0; k < cd->num_streams; k++)
        if (cd->dropped_samples[k] || cd->streams[k].short_sample >= 0) return false;
    return true;
}

/* The one warning about a write that failed, carried by the chunk that found it, so that it
 * reaches the log on the consumer's thread in timeline order like the parse's own. */
static void warn_in_chunk(ctf__chunkstore *s, ctf__chunk_data *cd, const char *what, int e)
{
    atomic_store(&s->writable, false);
    if (atomic_exchange(&s->warned, true)) return;
    if (cd->num_problems == cd->problems_cap &&
        ctf__grow((void **)&cd->problems, &cd->problems_cap, cd->num_problems + 1,
                  sizeof *cd->problems))
        return;
    ctf__problem *pr = &cd->problems[cd->num_problems++];
    pr->sev = CTF_SEV_WARNING;
    ctf__fail(&pr->err, CTF_OK, (ctf__where){s->dir, 0, 0, -1},
              "chunk cache %s: %s (%s); chunks are parsed and no more are stored", s->dir, what,
              strerror(e));
    cd->num_warnings++;
}

static void put(ctf__chunkstore *s, const char *path, const uint64_t key[2],
                const ctf__parse_cfg *pc, ctf__chunk_data *cd, const ctf__seq *seqs)
{
    ctf__cbf_build b = {.streams = pc->streams,
                        .num_streams = pc->num_streams,
                        .prec = pc->precision,
                        .sort = false};
    ctf__cbf_bytes out = {0};
    entry_head h;
    memset(&h, 0, sizeof h);
    const size_t rec = cd->num_seqs * sizeof *seqs;
    int rc = 0;
    for (size_t i = 0; !rc && i < cd->num_seqs; i++) rc = ctf__cbf_build_seq(&b, cd, i);
    const uint64_t samples = b.samples;
    /* The entry in one buffer of its exact size: header, records, chunk. */
    const uint64_t total = sizeof h + rec + ctf__cbf_build_size(&b);
    if (!rc && total < SIZE_MAX && (out.p = CTF_MALLOC((size_t)total)) != NULL) {
        out.cap = (size_t)total;
        rc = ctf__cbf_put(&out, &h, sizeof h) || ctf__cbf_put(&out, seqs, rec) ||
             ctf__cbf_build_take(&b, &out);
    } else {
        rc = rc ? rc : CTF_ENOMEM;
    }
    ctf__cbf_build_free(&b);
    /* Out of memory, or a sequence CBF cannot hold: this chunk is simply not stored. */
    if (rc || (s->limit && out.len > s->limit)) {
        CTF_FREE(out.p);
        return;
    }
    memcpy(h.magic, ENTRY_MAGIC, 8);
    h.key[0] = key[0];
    h.key[1] = key[1];
    h.num_seqs = cd->num_seqs;
    h.samples = samples;
    h.cbf_size = out.len - sizeof h - rec;
    h.sum = ctf__hash_bytes(0x5bd1e9955bd1e995ull, out.p + sizeof h, out.len - sizeof h);
    memcpy(out.p, &h, sizeof h);
    /* A temporary file of its own (platform.c: a fresh name, 0600, never through a link),
     * then one rename: a reader sees the old entry, the new one, or none. No fsync: an entry
     * torn by a crash fails its checksum and is a miss, and a sync per chunk would cost what
     * the cache saves. The rename and its count under the eviction lock: an eviction's
     * listing either sees the entry (and sets the total with it) or comes after its count,
     * never loses it. */
    ctf__atomic_file af;
    int e = ctf__atomic_open(&af, path, TEMP_SUFFIX, CTF__ATOMIC_PRIVATE | CTF__ATOMIC_NO_SYNC);
    if (!e) e = ctf__atomic_write(&af, out.p, out.len);
    bool over = false;
    if (!e) {
        pthread_mutex_lock(&s->evict_mu);
        e = ctf__atomic_commit(&af);
        if (!e) over = s->limit && atomic_fetch_add(&s->total, out.len) + out.len > s->limit;
        pthread_mutex_unlock(&s->evict_mu);
    } else {
        ctf__atomic_abort(&af);
    }
    if (e)
        warn_in_chunk(s, cd, "a chunk could not be stored", e);
    else if (over)
        evict(s);
    CTF_FREE(out.p);
}

/*======================================================================
 * The load
 *====================================================================*/

/* The records a load hands over, seen on their way to the loader's receiver. */
typedef struct seen {
    void (*publish)(void *ctx, size_t c, ctf__seq *seqs, size_t cap);
    void *ctx;
    ctf__seq *seqs;
} seen;

static void see(void *ctx, size_t c, ctf__seq *seqs, size_t cap)
{
    seen *v = ctx;
    v->seqs = seqs;
    v->publish(v->ctx, c, seqs, cap);
}

int ctf__chunkstore_load(ctf__chunkstore *s, const ctf__parse_cfg *pc, const ctf_index *idx,
                         size_t lc, size_t c, ctf__readbuf *rb, ctf__bufpool *pool,
                         ctf__load_fn load, void *ctx, ctf__chunk_data **out, ctf_error *err)
{
    uint64_t key[2];
    chunk_key(pc, idx, lc, key);
    char *path = entry_path(s, key);
    if (path && get(s, path, key, pc, &idx->chunks[lc], c, rb, pool, out)) {
        ctf__perf_add(rb->perf, CTF__PERF_CHUNK_CACHE_HITS, 1);
        CTF_FREE(path);
        return 0;
    }
    ctf__perf_add(rb->perf, CTF__PERF_CHUNK_CACHE_MISSES, 1);
    seen v = {rb->publish, rb->publish_ctx, NULL};
    if (rb->publish) {
        rb->publish = see;
        rb->publish_ctx = &v;
    }
    int rc = load(ctx, c, rb, pool, out, err);
    if (v.publish) {
        rb->publish = v.publish;
        rb->publish_ctx = v.ctx;
    }
    /* The records stay the receiver's at least until this load returns. */
    const ctf__seq *seqs = v.publish ? v.seqs : rb->seqs.p;
    if (!rc && path && seqs && atomic_load(&s->writable) && clean(*out, idx->chunks[lc].num_seqs))
        put(s, path, key, pc, *out, seqs);
    CTF_FREE(path);
    return rc;
}
