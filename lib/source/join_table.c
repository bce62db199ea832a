/*
 * join_table.c -- the tables of a join by key, built at open without a table of the whole
 * corpus in memory: every deserializer's (key, sequence) records stream chunk by chunk into
 * sorted runs of bounded size (an external merge sort on temporary files), the runs of the
 * primary and of each part are merged by key side by side (a merge join: missing, unmatched and
 * repeated keys are found there), and the result, sorted back into primary order, is written
 * as two files read per chunk: each joined sequence's record and its links to the parts.
 * Only the chunk table stays in memory. docs/design.md ("The two-level index") gives the costs.
 */
#include "join.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <unistd.h>

#ifdef CTF_TESTING
size_t ctf__join_run_bytes = CTF__JOIN_RUN_BYTES;
int ctf__join_spill_from = 0;
#endif
#ifdef CTF_TESTING
atomic_long ctf__join_runs_written;
atomic_int ctf__join_spill_used;
#endif

/* Runs merged at once, and each one's read buffer: 1 MiB per sorter while merging. */
#define XS_FANIN 16
#define XS_RBUF ((size_t)64 << 10)
/* A file store's append buffer. */
#define JS_WBUF ((size_t)256 << 10)

/*======================================================================
 * Stores: unlinked temporary files, or memory
 *====================================================================*/

static int open_spill_file(ctf__jspill *sp)
{
    if (sp->level == 0) {
        char path[CTF_ERROR_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/.ctfjoin-XXXXXX", sp->dir);
        int fd = mkostemp(path, O_CLOEXEC);
        if (fd >= 0) {
            unlink(path);
            return fd;
        }
        sp->why = errno;
        sp->level = 1;
    }
    if (sp->level == 1) {
        FILE *f = tmpfile();
        int fd = f ? fcntl(fileno(f), F_DUPFD_CLOEXEC, 0) : -1;
        if (fd < 0) sp->why = errno;
        if (f) fclose(f);
        if (fd >= 0) return fd;
        sp->level = 2;
    }
    return -1;
}

int ctf__jstore_open(ctf__jstore *s, ctf__jspill *sp, ctf_error *err)
{
    *s = (ctf__jstore){.fd = -1};
    if (sp->level < ctf__join_spill_from) sp->level = ctf__join_spill_from;
    s->fd = sp->level < 2 ? open_spill_file(sp) : -1;
    s->dir = sp->level == 0 ? sp->dir : "the system's temporary directory";
#ifdef CTF_TESTING
    atomic_store(&ctf__join_spill_used, sp->level);
#endif
    if (s->fd < 0 && !sp->warned) {
        sp->warned = true;
        if (sp->log && sp->trace_level >= 1) {
            ctf_error w;
            ctf__fail(&w, CTF_OK, (ctf__where){sp->dir, 0, 0, -1},
                      "no temporary file could be created here or in the system's temporary "
                      "directory%s%s%s; the join's tables are kept in memory (about 100 bytes "
                      "per sequence)",
                      sp->why ? " (" : "", sp->why ? strerror(sp->why) : "", sp->why ? ")" : "");
            sp->log(sp->log_user, CTF_SEV_WARNING, &w);
        }
    }
    if (s->fd >= 0 && !(s->wbuf = CTF_MALLOC(JS_WBUF))) {
        close(s->fd);
        s->fd = -1;
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory joining the deserializers");
    }
    return 0;
}

/* The errno names a full disk is reported with (the text alone varies with the C library). */
static const char *errno_name(int e)
{
    switch (e) {
    case ENOSPC: return "ENOSPC";
    case EFBIG: return "EFBIG";
#ifdef EDQUOT
    case EDQUOT: return "EDQUOT";
#endif
    case EIO: return "EIO";
    default: return "errno";
    }
}

static int write_all(const ctf__jstore *s, const char *p, size_t n, uint64_t off, ctf_error *err)
{
    while (n) {
        ssize_t w = pwrite(s->fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            /* A write that stores nothing without an error is a full disk too. */
            const int e = w < 0 ? errno : ENOSPC;
            return ctf__fail(err, CTF_EIO, (ctf__where){s->dir, 0, 0, -1},
                             "could not write the join's temporary tables in %s: %s (%s %d)",
                             s->dir, strerror(e), errno_name(e), e);
        }
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

int ctf__jstore_flush(ctf__jstore *s, ctf_error *err)
{
    if (s->fd < 0 || !s->wlen) return 0;
    int rc = write_all(s, s->wbuf, s->wlen, s->len - s->wlen, err);
    s->wlen = 0;
    return rc;
}

int ctf__jstore_append(ctf__jstore *s, const void *p, size_t n, ctf_error *err)
{
    if (s->fd < 0) {
        if (s->len + n > s->cap) {
            uint64_t cap = s->cap ? s->cap : 4096;
            while (cap < s->len + n) cap *= 2;
            char *m = CTF_REALLOC(s->mem, (size_t)cap);
            if (!m)
                return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE,
                                 "out of memory joining the deserializers");
            s->mem = m;
            s->cap = cap;
        }
        memcpy(s->mem + s->len, p, n);
        s->len += n;
        return 0;
    }
    if (s->wlen + n > JS_WBUF) {
        int rc = ctf__jstore_flush(s, err);
        if (rc) return rc;
    }
    if (n >= JS_WBUF) {
        s->len += n;
        return write_all(s, p, n, s->len - n, err);
    }
    memcpy(s->wbuf + s->wlen, p, n);
    s->wlen += n;
    s->len += n;
    return 0;
}

int ctf__jstore_read(const ctf__jstore *s, void *p, size_t n, uint64_t off, ctf_error *err)
{
    if (off > s->len || n > s->len - off)
        return ctf__fail(err, CTF_EIO, CTF__NOWHERE, "the join's temporary tables are short");
    if (s->fd < 0) {
        memcpy(p, s->mem + off, n);
        return 0;
    }
    char *q = p;
    while (n) {
        ssize_t r = pread(s->fd, q, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return ctf__fail(err, CTF_EIO, CTF__NOWHERE,
                             "could not read the join's temporary tables (%s)",
                             r < 0 ? strerror(errno) : "unexpected end");
        q += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

void ctf__jstore_close(ctf__jstore *s)
{
    if (s->fd >= 0) close(s->fd);
    CTF_FREE(s->mem);
    CTF_FREE(s->wbuf);
    *s = (ctf__jstore){.fd = -1};
}

/*======================================================================
 * External sort of fixed-size records by their first two words
 *====================================================================*/

typedef struct xrun {
    uint64_t off, len;
} xrun;

typedef struct xcur {
    uint64_t off, end;     /* what is left of the run in the store */
    char *buf;
    size_t pos, len;       /* bytes in buf */
} xcur;

typedef struct xsort {
    size_t rec;            /* bytes per record, a multiple of 8 */
    char *buf;             /* records not yet in a run */
    size_t n, cap;
    ctf__jstore st;
    bool st_open;
    ctf__jspill *sp;
    xrun *runs;
    size_t nruns, runs_cap;
    char *last;            /* the last run's last record: a sorted batch after it extends it */
    /* Reading, sorted: from the source itself (its keys were in order), from buf (mem_only),
     * or by merging the runs. */
    ctf__source *src;
    bool part;
    size_t sc, si;         /* the source's next record: chunk, index in it */
    ctf__readbuf srb;
    bool mem_only;
    size_t mpos;
    xcur *cur;
    size_t ncur;
    size_t *heap;
    size_t nheap;
} xsort;

static inline int rec_cmp(const void *a, const void *b)
{
    uint64_t x[2], y[2];
    memcpy(x, a, 16);
    memcpy(y, b, 16);
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

static int xs_init(xsort *x, size_t rec, ctf__jspill *sp, ctf_error *err)
{
    *x = (xsort){.rec = rec, .sp = sp, .st = {.fd = -1}};
    x->cap = CTF_MAX(ctf__join_run_bytes / rec, (size_t)2);
    x->buf = CTF_MALLOC(x->cap * rec);
    x->last = CTF_MALLOC(rec);
    if (!x->buf || !x->last)
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory joining the deserializers");
    return 0;
}

static void xs_free(xsort *x)
{
    CTF_FREE(x->buf);
    CTF_FREE(x->last);
    CTF_FREE(x->runs);
    if (x->cur)
        for (size_t i = 0; i < x->ncur; i++) CTF_FREE(x->cur[i].buf);
    CTF_FREE(x->cur);
    CTF_FREE(x->heap);
    if (x->st_open) ctf__jstore_close(&x->st);
    CTF_FREE(x->srb.p);
    CTF_FREE(x->srb.seqs.p);
    *x = (xsort){.st = {.fd = -1}};
}

static void sort_batch(xsort *x)
{
    for (size_t i = 1; i < x->n; i++)
        if (rec_cmp(x->buf + (i - 1) * x->rec, x->buf + i * x->rec) > 0) {
            qsort(x->buf, x->n, x->rec, rec_cmp);
            return;
        }
}

/* Sorts the batch in buf and writes it as a run (or as the continuation of the last run, when
 * it follows it: data already in key order make one run, and no merge). */
static int xs_flush(xsort *x, ctf_error *err)
{
    if (!x->n) return 0;
    sort_batch(x);
    int rc;
    if (!x->st_open) {
        if ((rc = ctf__jstore_open(&x->st, x->sp, err))) return rc;
        x->st_open = true;
    }
    const uint64_t bytes = (uint64_t)x->n * x->rec;
    if (x->nruns && rec_cmp(x->last, x->buf) <= 0) {
        x->runs[x->nruns - 1].len += bytes;
    } else {
        if (ctf__grow((void **)&x->runs, &x->runs_cap, x->nruns + 1, sizeof *x->runs))
            return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE,
                             "out of memory joining the deserializers");
        x->runs[x->nruns++] = (xrun){x->st.len, bytes};
#ifdef CTF_TESTING
        atomic_fetch_add(&ctf__join_runs_written, 1);
#endif
    }
    rc = ctf__jstore_append(&x->st, x->buf, (size_t)bytes, err);
    memcpy(x->last, x->buf + (x->n - 1) * x->rec, x->rec);
    x->n = 0;
    return rc;
}

static int xs_add(xsort *x, const void *rec, ctf_error *err)
{
    if (x->n == x->cap) {
        int rc = xs_flush(x, err);
        if (rc) return rc;
    }
    memcpy(x->buf + x->n * x->rec, rec, x->rec);
    x->n++;
    return 0;
}

static int cur_fill(xsort *x, xcur *c, ctf_error *err)
{
    const size_t want = XS_RBUF / x->rec * x->rec;
    const size_t n = (size_t)CTF_MIN((uint64_t)want, c->end - c->off);
    c->pos = 0;
    c->len = n;
    if (!n) return 0;
    int rc = ctf__jstore_read(&x->st, c->buf, n, c->off, err);
    c->off += n;
    return rc;
}

static bool heap_less(const xsort *x, size_t a, size_t b)
{
    const xcur *p = &x->cur[a], *q = &x->cur[b];
    int c = rec_cmp(p->buf + p->pos, q->buf + q->pos);
    return c < 0 || (c == 0 && a < b);
}

static void heap_down(xsort *x, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l < x->nheap && heap_less(x, x->heap[l], x->heap[m])) m = l;
        if (l + 1 < x->nheap && heap_less(x, x->heap[l + 1], x->heap[m])) m = l + 1;
        if (m == i) return;
        size_t t = x->heap[i];
        x->heap[i] = x->heap[m];
        x->heap[m] = t;
        i = m;
    }
}

/* Prepares merging runs[0..k) (cursors and the heap). */
static int merge_open(xsort *x, const xrun *runs, size_t k, ctf_error *err)
{
    if (!x->cur) {
        x->cur = CTF_CALLOC(XS_FANIN, sizeof *x->cur);
        x->heap = CTF_MALLOC(XS_FANIN * sizeof *x->heap);
        if (!x->cur || !x->heap) goto oom;
        x->ncur = XS_FANIN;
        for (size_t i = 0; i < XS_FANIN; i++)
            if (!(x->cur[i].buf = CTF_MALLOC(XS_RBUF))) goto oom;
    }
    x->nheap = 0;
    for (size_t i = 0; i < k; i++) {
        x->cur[i].off = runs[i].off;
        x->cur[i].end = runs[i].off + runs[i].len;
        int rc = cur_fill(x, &x->cur[i], err);
        if (rc) return rc;
        if (x->cur[i].len) x->heap[x->nheap++] = i;
    }
    for (size_t i = x->nheap / 2; i-- > 0;) heap_down(x, i);
    return 0;
oom:
    return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory joining the deserializers");
}

/* The next record of the merge (*out NULL at the end), valid until the next call. */
static int merge_next(xsort *x, const void **out, ctf_error *err)
{
    *out = NULL;
    if (!x->nheap) return 0;
    xcur *c = &x->cur[x->heap[0]];
    *out = c->buf + c->pos;
    c->pos += x->rec;
    if (c->pos == c->len) {
        /* The record handed out stays valid: it is copied out of the way of the refill. */
        memcpy(x->last, *out, x->rec);
        *out = x->last;
        int rc = cur_fill(x, c, err);
        if (rc) return rc;
        if (!c->len) x->heap[0] = x->heap[--x->nheap];
    }
    if (x->nheap) heap_down(x, 0);
    return 0;
}

/* No more records: sorts what is in memory, or writes it as the last run and merges the runs
 * down to at most XS_FANIN; then xs_next hands out every record in order. */
static int xs_finish(xsort *x, ctf_error *err)
{
    if (!x->nruns) {
        sort_batch(x);
        x->mem_only = true;
        x->mpos = 0;
        return 0;
    }
    int rc = xs_flush(x, err);
    if (!rc) rc = ctf__jstore_flush(&x->st, err);
    if (rc) return rc;
    CTF_FREE(x->buf);
    x->buf = NULL;
    x->cap = 0;
    while (x->nruns > XS_FANIN) {
        size_t out = 0;
        for (size_t g = 0; g < x->nruns; g += XS_FANIN) {
            const size_t k = CTF_MIN((size_t)XS_FANIN, x->nruns - g);
            xrun merged = {x->st.len, 0};
            if ((rc = merge_open(x, x->runs + g, k, err))) return rc;
            for (;;) {
                const void *r;
                if ((rc = merge_next(x, &r, err))) return rc;
                if (!r) break;
                if ((rc = ctf__jstore_append(&x->st, r, x->rec, err))) return rc;
                merged.len += x->rec;
            }
            if ((rc = ctf__jstore_flush(&x->st, err))) return rc;
            x->runs[out++] = merged;
#ifdef CTF_TESTING
            atomic_fetch_add(&ctf__join_runs_written, 1);
#endif
        }
        x->nruns = out;
    }
    return merge_open(x, x->runs, x->nruns, err);
}

static int src_next(xsort *x, const void **out, ctf_error *err);

static int xs_next(xsort *x, const void **out, ctf_error *err)
{
    if (x->src) return src_next(x, out, err);
    if (x->mem_only) {
        *out = x->mpos < x->n ? x->buf + x->mpos * x->rec : NULL;
        if (*out) x->mpos++;
        return 0;
    }
    return merge_next(x, out, err);
}

/*======================================================================
 * The join
 *====================================================================*/

/* A primary sequence, sorted by (key, sequence). */
typedef struct prec {
    uint64_t key, g, offset, line;
    uint32_t samples, lines;
} prec;

/* A part's sequence, sorted by (key, sequence). */
typedef struct qrec {
    uint64_t key, js, b, e, samples;
} qrec;

/* A primary sequence joined, sorted back by its number: the head, then a ctf__jref per part. */
typedef struct orec {
    uint64_t g, key, offset, line;
    uint32_t samples, lines;
    uint32_t len;          /* its length on the timeline */
    uint32_t missing;      /* 0, or 1 + the first part that lacks its key */
} orec;

void ctf__join_part_name(const ctf__source *src, const char *origin, size_t j, char *buf,
                         size_t cap)
{
    if (origin && origin[0])
        snprintf(buf, cap, "deserializer %zu (%s)", j + 1, origin);
    else
        snprintf(buf, cap, "deserializer %zu (%s%s)", j + 1, src->files[0].path,
                 src->num_files > 1 ? " ..." : "");
}

static int oom(ctf_error *err)
{
    return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory joining the deserializers");
}

/* Record i of chunk c (its records q) of s, as x sorts it (part: qrec, else prec), into out. */
static void make_rec(const ctf__source *s, bool part, size_t c, const ctf__seq *q, size_t i,
                     void *out)
{
    const ctf__chunk *ch = &s->chunks[c];
    const uint64_t g = ch->first_seq + i;
    if (part) {
        const uint64_t e = i + 1 < ch->num_seqs ? q[i + 1].offset : ch->offset + ch->size;
        const qrec r = {q[i].key, g, q[i].offset, e, q[i].samples};
        memcpy(out, &r, sizeof r);
    } else {
        const prec r = {q[i].key, g, q[i].offset, q[i].line, q[i].samples, q[i].lines};
        memcpy(out, &r, sizeof r);
    }
}

static int src_next(xsort *x, const void **out, ctf_error *err)
{
    *out = NULL;
    const ctf__source *s = x->src;
    if (x->sc >= s->num_chunks) return 0;
    if (x->si == 0) {
        int rc = ctf__corpus_chunk_seqs(x->src, x->sc, &x->srb, &x->srb.seqs, err);
        if (rc) return rc;
    }
    make_rec(s, x->part, x->sc, x->srb.seqs.p, x->si, x->last);
    *out = x->last;
    if (++x->si == s->chunks[x->sc].num_seqs) {
        x->sc++;
        x->si = 0;
    }
    return 0;
}


/* Checks whether s's keys are in order (a pass over its records, stopped at the first one out
 * of order). A part's repeated key is then the first pair of equal neighbours: *dup_at is the
 * second one's sequence (UINT64_MAX: none). @return : 0 and *sorted, or an error. */
static int keys_in_order(ctf__source *s, ctf__readbuf *rb, bool *sorted, uint64_t *dup_at,
                         ctf_error *err)
{
    *sorted = true;
    *dup_at = UINT64_MAX;
    bool have = false;
    uint64_t prev = 0;
    for (size_t c = 0; c < s->num_chunks; c++) {
        int rc = ctf__corpus_chunk_seqs(s, c, rb, &rb->seqs, err);
        if (rc) return rc;
        const ctf__seq *q = rb->seqs.p;
        for (size_t i = 0; i < s->chunks[c].num_seqs; i++) {
            if (have && q[i].key < prev) {
                *sorted = false;
                return 0;
            }
            if (have && q[i].key == prev && *dup_at == UINT64_MAX)
                *dup_at = s->chunks[c].first_seq + i;
            prev = q[i].key;
            have = true;
        }
    }
    return 0;
}

/* Makes x hand out s's records sorted by (key, sequence): straight from s when its keys are in
 * order already (nothing is written), else through sorted runs. */
static int sort_source(ctf__source *s, bool part, xsort *x, ctf__readbuf *rb, bool *sorted,
                       uint64_t *dup_at, ctf_error *err)
{
    int rc = keys_in_order(s, rb, sorted, dup_at, err);
    if (rc) return rc;
    if (*sorted) {
        x->src = s;
        x->part = part;
        CTF_FREE(x->buf);
        x->buf = NULL;
        x->cap = 0;
        return 0;
    }
    for (size_t c = 0; c < s->num_chunks; c++) {
        if ((rc = ctf__corpus_chunk_seqs(s, c, rb, &rb->seqs, err))) return rc;
        for (size_t i = 0; i < s->chunks[c].num_seqs; i++) {
            if (x->n == x->cap && (rc = xs_flush(x, err))) return rc;
            make_rec(s, part, c, rb->seqs.p, i, x->buf + x->n * x->rec);
            x->n++;
        }
    }
    return xs_finish(x, err);
}

/* Sequence g of s and its file (for the repeated-key error). */
static int seq_place(ctf__source *s, uint64_t g, ctf__readbuf *rb, const char **path, ctf__seq *q,
                     ctf_error *err)
{
    const size_t c = ctf__source_chunk_of(s, (size_t)g);
    int rc = ctf__corpus_chunk_seqs(s, c, rb, &rb->seqs, err);
    if (rc) return rc;
    *path = s->files[s->chunk_file[c]].path;
    *q = rb->seqs.p[g - s->chunks[c].first_seq];
    return 0;
}

/* A part's cursor in the merge join. */
typedef struct pcur {
    const qrec *q;         /* current record (NULL: the part is exhausted) */
    qrec at;               /* a copy of it */
    bool used;             /* a kept primary sequence took it */
    uint64_t unmatched;
    uint64_t group_js;     /* the first sequence holding the current key */
    bool dup;
    uint64_t dup_first, dup_second; /* the earliest repeat of a key, and its first place */
} pcur;

static int pcur_next(xsort *x, pcur *p, ctf_error *err)
{
    const void *r;
    int rc = xs_next(x, &r, err);
    if (rc) return rc;
    const bool had = p->q != NULL;
    const qrec prev = p->at;
    if (had && !p->used) p->unmatched++;
    p->q = r;
    p->used = false;
    if (!r) return 0;
    p->at = *p->q;
    if (had && prev.key == p->at.key) {
        if (!p->dup || p->at.js < p->dup_second) {
            p->dup = true;
            p->dup_first = p->group_js;
            p->dup_second = p->at.js;
        }
    } else {
        p->group_js = p->at.js;
    }
    return 0;
}

static void warn_drop(const ctf__jbuild *in, const orec *o, size_t pc)
{
    const ctf__source *p = in->prim;
    const size_t j = o->missing - 1;
    char name[CTF_ERROR_PATH_MAX];
    ctf__join_part_name(in->parts[j], in->origins[j], j, name, sizeof name);
    ctf_error e;
    ctf__fail(&e, CTF_OK,
              (ctf__where){p->files[p->chunk_file[pc]].path, o->line + 1, 1, (int64_t)o->offset},
              "sequence key %" PRIu64 " has no match in %s; sequence dropped", o->key, name);
    if (in->log) in->log(in->log_user, CTF_SEV_WARNING, &e);
}

/* Closes primary chunk pc in the joined chunk table (kept when one of its sequences is). */
static void close_chunk(const ctf__jbuild *in, ctf__jtable *t, size_t pc, size_t first,
                        uint64_t samples)
{
    if (t->num_seqs == first) return; /* every sequence of the chunk was dropped */
    const size_t nc = t->num_chunks++;
    t->chunks[nc] = in->prim->chunks[pc];
    t->chunks[nc].first_seq = first;
    t->chunks[nc].num_seqs = t->num_seqs - first;
    t->chunks[nc].samples = samples;
    t->pchunk[nc] = pc;
    t->chunk_file[nc] = in->prim->chunk_file[pc];
    t->total_samples += samples;
}

/* Writing the joined table: the merged records come in primary order. */
typedef struct wstate {
    size_t pc, first;      /* the primary chunk being filled, its first joined sequence */
    uint64_t samples;
    uint64_t shown;        /* drops warned */
    char *link;
} wstate;

/* One merged record (an orec and its refs) into the joined chunk table and the two files. */
static int emit(const ctf__jbuild *in, ctf__jtable *t, wstate *w, const void *r, ctf_error *err)
{
    const ctf__source *p = in->prim;
    orec o;
    memcpy(&o, r, sizeof o);
    while (o.g >= p->chunks[w->pc].first_seq + p->chunks[w->pc].num_seqs) {
        close_chunk(in, t, w->pc++, w->first, w->samples);
        w->first = t->num_seqs;
        w->samples = 0;
    }
    if (o.missing) {
        t->dropped++;
        /* The first 20 are shown, the rest summed up in one line. */
        if (in->trace_level >= 1 && w->shown < 20) warn_drop(in, &o, w->pc);
        w->shown++;
        return 0;
    }
    const ctf__seq s = {.offset = o.offset,
                        .key = o.key,
                        .line = o.line,
                        .samples = o.len,
                        .lines = o.lines};
    const uint64_t plocal = o.g - p->chunks[w->pc].first_seq;
    memcpy(w->link, &plocal, 8);
    memcpy(w->link + 8, (const char *)r + sizeof o, in->np * sizeof(ctf__jref));
    int rc = ctf__jstore_append(&t->seqs, &s, sizeof s, err);
    if (!rc) rc = ctf__jstore_append(&t->links, w->link, t->link_bytes, err);
    w->samples += o.len;
    t->num_seqs++;
    return rc;
}

static int emit_end(const ctf__jbuild *in, ctf__jtable *t, wstate *w, ctf_error *err)
{
    const ctf__source *p = in->prim;
    if (p->num_chunks) {
        close_chunk(in, t, w->pc++, w->first, w->samples);
        for (; w->pc < p->num_chunks; w->pc++) close_chunk(in, t, w->pc, t->num_seqs, 0);
    }
    int rc = ctf__jstore_flush(&t->seqs, err);
    if (!rc) rc = ctf__jstore_flush(&t->links, err);
    return rc;
}

/* Merges the primary's sorted records with every part's: each primary sequence finds its key in
 * every part (or is marked missing). The result goes to `out` (sorted back by sequence), or
 * straight into the table when every deserializer's keys were in order (it then comes in
 * sequence order). */
static int merge_join(const ctf__jbuild *in, ctf__jtable *t, xsort *px, xsort *qx, pcur *pcs,
                      xsort *out, wstate *w, char *orbuf, ctf_error *err)
{
    const size_t np = in->np;
    int rc;
    for (size_t j = 0; j < np; j++)
        if ((rc = pcur_next(&qx[j], &pcs[j], err))) return rc;
    for (;;) {
        const void *r;
        if ((rc = xs_next(px, &r, err))) return rc;
        if (!r) break;
        prec pr;
        memcpy(&pr, r, sizeof pr);
        orec o = {pr.g, pr.key, pr.offset, pr.line, pr.samples, pr.lines, 0, 0};
        ctf__jref *refs = (ctf__jref *)(orbuf + sizeof o);
        /* Its length: the definesMBSize part's, else the largest over all. */
        uint32_t len = in->mb_part <= 0 ? pr.samples : 0;
        for (size_t j = 0; j < np; j++) {
            pcur *pj = &pcs[j];
            while (pj->q && pj->at.key < pr.key)
                if ((rc = pcur_next(&qx[j], pj, err))) return rc;
            if (!pj->q || pj->at.key != pr.key) {
                if (!o.missing) o.missing = (uint32_t)j + 1;
                refs[j] = (ctf__jref){0, 0, 0};
                continue;
            }
            refs[j] = (ctf__jref){pj->at.js, pj->at.b, pj->at.e};
            const uint32_t s = (uint32_t)pj->at.samples;
            if (in->mb_part < 0 || in->mb_part == (int)j + 1) len = CTF_MAX(len, s);
        }
        if (!o.missing)
            for (size_t j = 0; j < np; j++) pcs[j].used = true;
        o.len = len;
        memcpy(orbuf, &o, sizeof o);
        if ((rc = out ? xs_add(out, orbuf, err) : emit(in, t, w, orbuf, err))) return rc;
    }
    for (size_t j = 0; j < np; j++)
        while (pcs[j].q)
            if ((rc = pcur_next(&qx[j], &pcs[j], err))) return rc;
    return out ? xs_finish(out, err) : 0;
}

static int dup_error(const ctf__jbuild *in, size_t j, uint64_t first, uint64_t second,
                     ctf__readbuf *rb, ctf_error *err)
{
    ctf__source *s = in->parts[j];
    const char *p1, *p2;
    ctf__seq q1, q2;
    int rc = seq_place(s, first, rb, &p1, &q1, err);
    if (!rc) rc = seq_place(s, second, rb, &p2, &q2, err);
    if (rc) return rc;
    char name[CTF_ERROR_PATH_MAX];
    ctf__join_part_name(s, in->origins[j], j, name, sizeof name);
    return ctf__fail(err, CTF_EPARSE, (ctf__where){p2, q2.line + 1, 1, (int64_t)q2.offset},
                     "sequence key %" PRIu64 " appears twice in %s: here and at %s:%" PRIu64
                     "; a joined deserializer must hold each key once",
                     q2.key, name, p1, q1.line + 1);
}

int ctf__jtable_build(const ctf__jbuild *in, ctf__jtable *t, ctf_error *err)
{
    const ctf__source *p = in->prim;
    const size_t np = in->np;
    const size_t ncap = p->num_chunks ? p->num_chunks : 1;
    t->seqs = (ctf__jstore){.fd = -1};
    t->links = (ctf__jstore){.fd = -1};
    t->link_bytes = 8 + np * sizeof(ctf__jref);
    ctf__jspill sp = {.log = in->log, .log_user = in->log_user, .trace_level = in->trace_level};
    ctf__readbuf rb = {0};
    xsort px = {.st = {.fd = -1}}, out = {.st = {.fd = -1}};
    xsort *qx = CTF_CALLOC(np, sizeof *qx);
    pcur *pcs = CTF_CALLOC(np, sizeof *pcs);
    char *orbuf = CTF_MALLOC(sizeof(orec) + np * sizeof(ctf__jref));
    wstate w = {.link = CTF_MALLOC(t->link_bytes)};
    t->chunks = CTF_MALLOC(ncap * sizeof *t->chunks);
    t->pchunk = CTF_MALLOC(ncap * sizeof *t->pchunk);
    t->chunk_file = CTF_MALLOC(ncap * sizeof *t->chunk_file);
    /* Spills go next to the primary's first file (the disk the data lives on). */
    const char *path0 = p->files[0].path, *slash = strrchr(path0, '/');
    const size_t dlen = slash ? (size_t)(slash - path0) + (slash == path0) : 1;
    sp.dir = CTF_MALLOC(dlen + 1);
    int rc;
    if (!qx || !pcs || !orbuf || !w.link || !t->chunks || !t->pchunk || !t->chunk_file || !sp.dir) {
        rc = oom(err);
        goto done;
    }
    memcpy(sp.dir, slash ? path0 : ".", dlen);
    sp.dir[dlen] = 0;
    for (size_t j = 0; j < np; j++) qx[j].st.fd = -1;
    /* Every part's records sorted by key (a repeated key is an error as soon as it is seen in
     * keys already in order), then the primary's. */
    bool all_sorted = true, sorted;
    uint64_t dup_at;
    for (size_t j = 0; j < np; j++) {
        if ((rc = xs_init(&qx[j], sizeof(qrec), &sp, err)) ||
            (rc = sort_source(in->parts[j], true, &qx[j], &rb, &sorted, &dup_at, err)))
            goto done;
        if (sorted && dup_at != UINT64_MAX) {
            rc = dup_error(in, j, dup_at - 1, dup_at, &rb, err);
            goto done;
        }
        all_sorted = all_sorted && sorted;
    }
    if ((rc = xs_init(&px, sizeof(prec), &sp, err)) ||
        (rc = sort_source(in->prim, false, &px, &rb, &sorted, &dup_at, err)))
        goto done;
    /* With every deserializer's keys in order, the merge comes in primary order and goes
     * straight into the table; else through one more sort, and a repeated key in a part is
     * reported before anything is written or warned. */
    const bool direct = all_sorted && sorted;
    if ((rc = ctf__jstore_open(&t->seqs, &sp, err)) || (rc = ctf__jstore_open(&t->links, &sp, err)))
        goto done;
    if (!direct && (rc = xs_init(&out, sizeof(orec) + np * sizeof(ctf__jref), &sp, err))) goto done;
    rc = merge_join(in, t, &px, qx, pcs, direct ? NULL : &out, &w, orbuf, err);
    if (rc) goto done;
    xs_free(&px);
    for (size_t j = 0; j < np; j++) {
        xs_free(&qx[j]);
        if (pcs[j].dup) {
            rc = dup_error(in, j, pcs[j].dup_first, pcs[j].dup_second, &rb, err);
            goto done;
        }
    }
    if (!direct)
        for (;;) {
            const void *r;
            if ((rc = xs_next(&out, &r, err))) goto done;
            if (!r) break;
            if ((rc = emit(in, t, &w, r, err))) goto done;
        }
    if ((rc = emit_end(in, t, &w, err))) goto done;
    if (w.shown > 20 && in->trace_level >= 1 && in->log) {
        ctf_error e;
        ctf__fail(&e, CTF_OK, (ctf__where){p->files[0].path, 0, 0, -1},
                  "%" PRIu64 " more sequences without a match in a joined deserializer were "
                  "dropped",
                  w.shown - 20);
        in->log(in->log_user, CTF_SEV_WARNING, &e);
    }
    for (size_t j = 0; j < np; j++) {
        const uint64_t unmatched = pcs[j].unmatched;
        t->unmatched += unmatched;
        if (unmatched && in->trace_level >= 2 && in->log) {
            char name[CTF_ERROR_PATH_MAX];
            ctf__join_part_name(in->parts[j], in->origins[j], j, name, sizeof name);
            ctf_error e;
            ctf__fail(&e, CTF_OK, CTF__NOWHERE,
                      "%" PRIu64 " sequences of %s have keys the primary deserializer lacks; "
                      "they are not read",
                      unmatched, name);
            in->log(in->log_user, CTF_SEV_INFO, &e);
        }
    }
done:
    xs_free(&px);
    xs_free(&out);
    if (qx)
        for (size_t j = 0; j < np; j++) xs_free(&qx[j]);
    CTF_FREE(qx);
    CTF_FREE(pcs);
    CTF_FREE(orbuf);
    CTF_FREE(w.link);
    CTF_FREE(sp.dir);
    CTF_FREE(rb.p);
    CTF_FREE(rb.seqs.p);
    return rc;
}

void ctf__jtable_free(ctf__jtable *t)
{
    CTF_FREE(t->chunks);
    CTF_FREE(t->pchunk);
    CTF_FREE(t->chunk_file);
    ctf__jstore_close(&t->seqs);
    ctf__jstore_close(&t->links);
    t->chunks = NULL;
    t->pchunk = NULL;
    t->chunk_file = NULL;
}
