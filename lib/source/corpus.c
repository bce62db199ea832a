/*
 * corpus.c -- the CTF file deserializer and corpora of files: what a ctf__source is made of
 * when the data are CTF files (the seam is described in source/source.h and docs/design.md).
 *
 * A corpus of n files is one chunk table: file 0's chunks, then file 1's, ...; a chunk never
 * spans two files, and each file keeps its own ctf_index (with its own index cache). A corpus
 * of one file has exactly that file's chunk table, so its order, minibatches and checkpoints
 * are the file's own.
 *
 * Loading a chunk checks that its file still has the size and modification time it had when
 * indexed, then reads the chunk block by block, re-making the records of each block's complete
 * sequences and parsing them with the file's parse configuration (its path for messages, its
 * line mode); at the end the records must be the index's, so that a file changed under the
 * reader is CTF_ECHANGED naming the file, never garbage.
 *
 * Open descriptors are bounded: files are opened when a load needs them and kept in a small
 * LRU table (a corpus of 100,000 files never holds 100,000 descriptors). The table's mutex is
 * held while a descriptor is opened or closed, never during a read.
 */
#include "source/source.h"
#include "io/io.h"

#include <glob.h>
#include <pthread.h>

void ctf__source_free(ctf__source *s)
{
    if (s) s->destroy(s);
}

/*======================================================================
 * File lists and glob patterns
 *====================================================================*/

void ctf__free_paths(char **paths, size_t n)
{
    if (!paths) return;
    for (size_t i = 0; i < n; i++) CTF_FREE(paths[i]);
    CTF_FREE(paths);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_pattern(const char *p) { return ctf__io_is_pattern(p); }

int ctf__expand_paths(struct ctf__remote *rem, const char *const *patterns, size_t n, char ***out,
                      size_t *num_out, ctf_error *err)
{
    char **v = NULL;
    size_t len = 0, cap = 0;
    *out = NULL;
    *num_out = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = patterns[i];
        if (!p || !p[0]) {
            ctf__free_paths(v, len);
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                             "config.paths[%zu]: must be a non-empty path (got %s)", i,
                             p ? "\"\"" : "NULL");
        }
        if (!is_pattern(p)) {
            if (ctf__grow((void **)&v, &cap, len + 1, sizeof *v)) goto oom;
            if (!(v[len] = ctf__strdup(p))) goto oom;
            len++;
            continue;
        }
        if (ctf__io_is_remote(p)) {
            /* An object store's listing, sorted as below. */
            char **m;
            size_t nm;
            int rc = ctf__io_glob(rem, p, &m, &nm, err);
            if (rc) {
                ctf__free_paths(v, len);
                return rc;
            }
            int grown = ctf__grow((void **)&v, &cap, len + nm, sizeof *v);
            for (size_t j = 0; j < nm; j++) {
                if (grown)
                    CTF_FREE(m[j]);
                else
                    v[len++] = m[j];
            }
            CTF_FREE(m);
            if (grown) goto oom;
            continue;
        }
        glob_t g;
        int grc = glob(p, GLOB_NOSORT, NULL, &g);
        if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
            if (grc == 0) globfree(&g);
            ctf__free_paths(v, len);
            return ctf__fail(err, CTF_EIO, (ctf__where){p, 0, 0, -1},
                             "config.paths[%zu]: no file matches the pattern", i);
        }
        if (grc != 0) {
            ctf__free_paths(v, len);
            return ctf__fail(err, grc == GLOB_NOSPACE ? CTF_ENOMEM : CTF_EIO,
                             (ctf__where){p, 0, 0, -1},
                             "config.paths[%zu]: the pattern could not be expanded", i);
        }
        /* Byte-wise order, not the locale's: the corpus order must not depend on LC_COLLATE. */
        qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, cmp_str);
        for (size_t j = 0; j < g.gl_pathc; j++) {
            if (ctf__grow((void **)&v, &cap, len + 1, sizeof *v) ||
                !(v[len] = ctf__strdup(g.gl_pathv[j]))) {
                globfree(&g);
                goto oom;
            }
            len++;
        }
        globfree(&g);
    }
    *out = v;
    *num_out = len;
    return 0;
oom:
    ctf__free_paths(v, len);
    return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory expanding the file list");
}

/*======================================================================
 * The corpus
 *====================================================================*/

typedef struct fd_slot {
    ctf__io *io;         /* NULL: free */
    size_t file;
    uint64_t used;       /* LRU clock */
    unsigned busy;       /* reads in progress */
} fd_slot;

typedef struct corpus {
    ctf__source src;     /* first: a corpus is a source */
    ctf__source_file *files;
    size_t num_files;
    ctf__chunk *chunks;
    uint32_t *chunk_file;
    size_t *chunk_local; /* the chunk's number in its file's index */
    uint64_t max_errors;
    pthread_mutex_t mu;
    bool mu_ok;
    ctf__remote *remote; /* the remote backend's context (a reference), or NULL */
    fd_slot *fds;
    size_t num_fds;
    uint64_t tick;
    ctf__seqset sq;        /* the records of the chunks the consumer works in */
    ctf__readbuf cbuf;     /* the consumer's chunk bytes for re-making records */
    ctf__chunkstore *store; /* the chunk cache for text chunks (a reference), or NULL */
} corpus;

/* An open handle for file f: from the table, or opened into the least recently used idle slot.
 * When every slot is busy (more loading threads than slots) the caller gets a private one
 * (*slot = SIZE_MAX) to close itself. @return : 0 and *io, or CTF_EIO with err filled. */
static int io_acquire(corpus *k, size_t f, size_t *slot, ctf__io **io, ctf_error *err)
{
    const ctf_index *idx = k->files[f].idx;
    pthread_mutex_lock(&k->mu);
    size_t pick = SIZE_MAX;
    for (size_t i = 0; i < k->num_fds; i++) {
        fd_slot *s = &k->fds[i];
        if (s->io && s->file == f) {
            s->busy++;
            s->used = ++k->tick;
            pthread_mutex_unlock(&k->mu);
            *slot = i;
            *io = s->io;
            return 0;
        }
        if (s->busy) continue;
        /* A free slot first, else the least recently used idle one. */
        if (!s->io) {
            if (pick == SIZE_MAX || k->fds[pick].io) pick = i;
        } else if (pick == SIZE_MAX || (k->fds[pick].io && s->used < k->fds[pick].used)) {
            pick = i;
        }
    }
    if (pick == SIZE_MAX) {
        pthread_mutex_unlock(&k->mu);
        *slot = SIZE_MAX;
        return ctf__io_open(k->remote, k->files[f].path, &idx->file, io, err);
    }
    fd_slot *s = &k->fds[pick];
    ctf__io_close(s->io);
    s->io = NULL;
    int rc = ctf__io_open(k->remote, k->files[f].path, &idx->file, &s->io, err);
    if (rc) {
        pthread_mutex_unlock(&k->mu);
        return rc;
    }
    s->file = f;
    s->busy = 1;
    s->used = ++k->tick;
    pthread_mutex_unlock(&k->mu);
    *slot = pick;
    *io = s->io;
    return 0;
}

static void io_release(corpus *k, size_t slot, ctf__io *io)
{
    if (slot == SIZE_MAX) {
        ctf__io_close(io);
        return;
    }
    pthread_mutex_lock(&k->mu);
    k->fds[slot].busy--;
    pthread_mutex_unlock(&k->mu);
}

/* The chunk's boundaries: the byte before it (when pre_ok) ends a line, and a chunk that is not
 * the file's last ends with '\n' (its last byte: last). Its sequences are then checked by
 * re-making their records from the bytes, which must give the index's. @return : the offset
 * of the first mismatch, or -1. */
static int64_t check_chunk_bounds(const ctf_index *idx, const ctf__chunk *ch, char pre, bool pre_ok,
                                  char last)
{
    if (pre_ok && pre != '\n') return (int64_t)ch->offset;
    if (ch->offset + ch->size < idx->file.size && ch->size && last != '\n')
        return (int64_t)(ch->offset + ch->size - 1);
    return -1;
}

#ifdef CTF_TESTING
size_t ctf__load_block = CTF__LOAD_BLOCK;
#endif

/* n bytes of file f at off into buf. A file that ends early says how many bytes the chunk still
 * expected (up to chunk_end), as one read of the whole chunk would. */
static int read_at(corpus *k, size_t f, char *buf, size_t n, uint64_t off, uint64_t chunk_end,
                   ctf__perf_slot *perf, ctf_error *err)
{
    const char *path = k->files[f].idx->path;
    size_t slot;
    const uint64_t t0 = ctf__now_ns();
    ctf__io *io;
    int rc = io_acquire(k, f, &slot, &io, err);
    if (rc) return rc;
    rc = ctf__io_read(io, buf, n, off, err);
    io_release(k, slot, io);
    ctf__perf_since(perf, CTF__PERF_READ_NS, t0);
    ctf__perf_add(perf, CTF__PERF_READ_BYTES, rc ? 0 : n);
    ctf__perf_add(perf, CTF__PERF_READS, 1);
    /* (A remote object's answer says itself what changed: its ETag, its size, a 412.) */
    if (rc == CTF_ECHANGED && !ctf__io_is_remote(path) && err->offset >= 0 &&
        (uint64_t)err->offset < chunk_end)
        rc = ctf__fail(err, CTF_ECHANGED, (ctf__where){path, 0, 0, err->offset},
                       "file ended early (expected %zu more bytes): the file changed since it "
                       "was indexed",
                       (size_t)(chunk_end - (uint64_t)err->offset));
    return rc;
}

/* Drops the block's first `keep` bytes (done with) and moves the rest to the front of rb; when
 * the rest fills more than half the block (a line or a sequence longer than it), the block
 * doubles until one holds it whole. @return : 0 or CTF_ENOMEM. */
static int block_slide(ctf__readbuf *rb, size_t *blk, size_t *have, uint64_t *base, size_t keep,
                       const ctf_index *idx, size_t lc, ctf_error *err)
{
    *have -= keep;
    memmove(rb->p, rb->p + keep, *have);
    *base += keep;
    if (*have <= *blk / 2) return 0;
    if (rb->cap < 2 * *blk + 1) {
        char *nb = CTF_REALLOC(rb->p, 2 * *blk + 1);
        if (!nb)
            return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading chunk %zu of %s",
                             lc, idx->path);
        rb->p = nb;
        rb->cap = 2 * *blk + 1;
    }
    *blk *= 2;
    return 0;
}

/* Chunk c's records re-made from its bytes, read block by block as a load reads them (the
 * line being scanned moves to the front for the next block). Every block is read even after
 * the scan stopped, so that a read error comes first, as with one read of the whole chunk. */
static int rescan_blocks(corpus *k, size_t c, ctf__readbuf *rb, ctf__seqbuf *out, ctf_error *err)
{
    const size_t f = k->chunk_file[c], lc = k->chunk_local[c];
    const ctf_index *idx = k->files[f].idx;
    const ctf__chunk *ch = &idx->chunks[lc];
    const uint64_t chunk_end = ch->offset + ch->size;
    size_t blk = (size_t)CTF_MIN((uint64_t)ctf__load_block, ch->size);
    if (blk == 0) blk = 1;
    char *buf = ctf__readbuf_get(rb, blk + 1);
    if (!buf)
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading chunk %zu of %s", lc,
                         idx->path);
    ctf__rescan *scan;
    int rc = ctf__rescan_begin(idx, lc, out, &scan, err);
    if (rc) return rc;
    uint64_t pos = ch->offset, base = pos; /* the next byte to read; the offset of buf[0] */
    size_t have = 0;
    bool scanning = true;
    for (;;) {
        const size_t want = (size_t)CTF_MIN((uint64_t)(blk - have), chunk_end - pos);
        if ((rc = read_at(k, f, buf + have, want, pos, chunk_end, rb->perf, err))) break;
        have += want;
        pos += want;
        const bool last = pos == chunk_end;
        const char *rest = buf + have;
        if (scanning) scanning = !ctf__rescan_block(scan, buf, buf + have, base, last, &rest);
        if (last) break;
        if ((rc = block_slide(rb, &blk, &have, &base, (size_t)(rest - buf), idx, lc, err))) break;
        buf = rb->p;
    }
    if (rc) {
        ctf_error ignored;
        ctf__rescan_end(scan, &ignored);
        return rc;
    }
    return ctf__rescan_end(scan, err);
}

/* A CBF chunk's records: its sequence lengths, the chunk's first bytes. */
static int cbf_chunk_seqs(corpus *k, size_t c, ctf__readbuf *rb, ctf__seqbuf *out, ctf_error *err)
{
    const size_t f = k->chunk_file[c], lc = k->chunk_local[c];
    const ctf_index *idx = k->files[f].idx;
    const ctf__chunk *ch = &idx->chunks[lc];
    const size_t nb = ch->num_seqs * 4;
    /* A file replaced since the open is said to be, as a load says it, not taken for damage
     * (a remote object's range request demands the indexed ETag instead). */
    int rc;
    if (!idx->file.etag[0]) {
        ctf__file_id now;
        if ((rc = ctf__file_stat(idx->path, &now, err))) return rc;
        if ((rc = ctf__file_unchanged(idx->path, &idx->file, &now, ch->offset, err))) return rc;
    }
    char *buf = ctf__readbuf_get(rb, nb);
    if (!buf)
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading chunk %zu of %s", lc,
                         idx->path);
    rc = read_at(k, f, buf, nb, ch->offset, ch->offset + ch->size, rb->perf, err);
    return rc ? rc : ctf__index_chunk_seqs(idx, lc, buf, out, err);
}

/* A CBF chunk (its size is checked against the header at open), read whole into a buffer of the
 * reader's own (a pooled one when the pool has one, as parse buffers are) and decoded: its dense
 * float streams stay views of that copy (the packer's copy into the minibatch is the only other)
 * and the chunk keeps the buffer. The bytes are copied, never mapped, so that what was loaded
 * cannot change under the reader when the file is rewritten in place, and a file cut short is
 * a read that ends early (CTF_ECHANGED), not a fault when a mapped page is touched. A local
 * file is stat'ed again after the read (corpus_load did before it): a file written during the
 * read may have given bytes of two versions, and they are refused as CTF_ECHANGED. A remote
 * object's range request demands the indexed ETag instead. */
static int cbf_load(corpus *k, size_t c, ctf__readbuf *rb, ctf__bufpool *pool,
                    ctf__chunk_data **out, ctf_error *err)
{
    const size_t f = k->chunk_file[c], lc = k->chunk_local[c];
    const ctf__source_file *file = &k->files[f];
    const ctf_index *idx = file->idx;
    const ctf__chunk *ch = &idx->chunks[lc];
    const size_t need = ch->size ? (size_t)ch->size : 1;
    size_t cap = 0;
    char *buf = pool ? ctf__bufpool_take(pool, need, &cap) : NULL;
    if (!buf) {
        /* Room for an eighth more (rounded up to 4 KiB), as parse buffers have, so that the
         * buffers of chunks of about the same size fit each other in the pool. */
        cap = pool ? ((need + need / 8) | 0xFFF) + 1 : need;
        buf = CTF_MALLOC(cap);
        if (!buf)
            return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading chunk %zu of %s",
                             lc, idx->path);
    }
    int rc = read_at(k, f, buf, (size_t)ch->size, ch->offset, ch->offset + ch->size, rb->perf, err);
    if (!rc && !idx->file.etag[0]) {
        ctf__file_id now;
        rc = ctf__io_stat(k->remote, idx->path, &now, err);
        if (!rc) rc = ctf__file_unchanged(idx->path, &idx->file, &now, ch->offset, err);
    }
    uint64_t t = ctf__now_ns();
    if (!rc) rc = ctf__cbf_decode_owned(&file->pc, idx, lc, &buf, cap, pool, &rb->seqs, out, err);
    if (buf) { /* not taken over by the chunk */
        if (pool)
            ctf__bufpool_give(pool, buf, cap);
        else
            CTF_FREE(buf);
    }
    ctf__perf_since(rb->perf, CTF__PERF_PARSE_NS, t);
    if (rc) return rc;
    ctf__perf_add(rb->perf, CTF__PERF_PARSE_BYTES, ch->size);
    (*out)->chunk = c;
    if (rb->publish) {
        rb->publish(rb->publish_ctx, c, rb->seqs.p, rb->seqs.cap);
        rb->seqs = (ctf__seqbuf){0};
    }
    return 0;
}

int ctf__corpus_chunk_seqs(ctf__source *src, size_t c, ctf__readbuf *rb, ctf__seqbuf *out,
                           ctf_error *err)
{
    corpus *k = (corpus *)src;
    const size_t f = k->chunk_file[c], lc = k->chunk_local[c];
    const ctf_index *idx = k->files[f].idx;
    const ctf__chunk *ch = &idx->chunks[lc];
    if (out->cap < ch->num_seqs &&
        ctf__grow((void **)&out->p, &out->cap, ch->num_seqs, sizeof *out->p))
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading chunk %zu of %s", lc,
                         idx->path);
    if (idx->cbf) return cbf_chunk_seqs(k, c, rb, out, err);
    if (ctf__index_chunk_seqs_cached(idx, lc, out)) return 0;
    return rescan_blocks(k, c, rb, out, err);
}

static int corpus_fill(void *ctx, size_t c, ctf__seqbuf *out, ctf_error *err)
{
    corpus *k = ctx;
    return ctf__corpus_chunk_seqs(&k->src, c, &k->cbuf, out, err);
}

/* Chunk c's records for the consumer, from the set or re-made into it. */
static int corpus_seqs(ctf__source *src, size_t c, const ctf__seq **out, ctf_error *err)
{
    corpus *k = (corpus *)src;
    return ctf__seqset_get(&k->sq, c, k->chunks[c].num_seqs, corpus_fill, k, out, err);
}

/* Chunk c, block by block: each block's complete sequences get their records (the chunk's
 * re-scan goes on where the last block stopped) and are parsed while the block is in cache; the
 * bytes of the sequence still open move to the front for the next block. Every block is read
 * even after the scan or the parse stopped, so that the errors and their order are those of one
 * read of the whole chunk: the read's, then the chunk's bounds, then its records', then the
 * parse's. */
static int load_blocks(corpus *k, size_t c, ctf__readbuf *rb, ctf__bufpool *pool,
                       ctf__chunk_data **out, ctf_error *err)
{
    const size_t f = k->chunk_file[c], lc = k->chunk_local[c];
    const ctf__source_file *file = &k->files[f];
    const ctf_index *idx = file->idx;
    const ctf__chunk *ch = &idx->chunks[lc];
    const uint64_t chunk_end = ch->offset + ch->size;
    /* One byte more in front, when there is one, for the line-start check of the first seq. */
    const size_t pre = ch->offset > idx->data_start ? 1 : 0;
    size_t blk = (size_t)CTF_MIN((uint64_t)ctf__load_block, ch->size + pre);
    if (blk == 0) blk = 1;
    char *buf = ctf__readbuf_get(rb, blk + 1);
    if (!buf)
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading chunk %zu of %s", lc,
                         idx->path);
    if (!rb->seqs.p && pool) {
        /* The last load's records went with its chunk: a pooled buffer, not a fresh one. */
        size_t got = 0;
        rb->seqs.p = ctf__bufpool_take(pool, ch->num_seqs * sizeof *rb->seqs.p, &got);
        rb->seqs.cap = rb->seqs.p ? got / sizeof *rb->seqs.p : 0;
    }
    if (rb->seqs.cap < ch->num_seqs &&
        ctf__grow((void **)&rb->seqs.p, &rb->seqs.cap, ch->num_seqs, sizeof *rb->seqs.p))
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading chunk %zu of %s", lc,
                         idx->path);
    ctf__rescan *scan = NULL;
    ctf__parse_run *run = NULL;
    ctf__parse_cfg pc = file->pc;
    pc.pool = pool;
    int rc = ctf__rescan_begin(idx, lc, &rb->seqs, &scan, err);
    if (rc) return rc;
    rc = ctf__parse_begin(&pc, idx, lc, NULL, NULL, k->max_errors, &run, err);
    if (rc) goto fail;

    uint64_t pos = ch->offset - pre; /* the next byte to read */
    uint64_t base = pos;             /* the file offset of buf[0] */
    size_t have = 0, scan_at = pre, parsed = 0;
    char first = 0, last_byte = '\n';
    bool scanning = true, parsing = true;
    ctf_error perr;
    int parse_rc = 0;
    for (;;) {
        const size_t want = (size_t)CTF_MIN((uint64_t)(blk - have), chunk_end - pos);
        rc = read_at(k, f, buf + have, want, pos, chunk_end, rb->perf, err);
        if (rc) goto fail;
        if (pos == ch->offset - pre) first = buf[0];
        have += want;
        pos += want;
        const bool last = pos == chunk_end;
        if (last && have) last_byte = buf[have - 1];
        const char *rest = buf + scan_at;
        uint64_t t = ctf__now_ns();
        if (scanning) {
            scanning = !ctf__rescan_block(scan, buf + scan_at, buf + have, base + scan_at, last,
                                          &rest);
            scan_at = (size_t)(rest - buf);
            t = ctf__perf_since(rb->perf, CTF__PERF_RESCAN_NS, t);
        }
        const size_t kept = ctf__rescan_kept(scan);
        uint64_t open_at = 0;
        const bool open = ctf__rescan_open(scan, &open_at);
        parsing = parsing && scanning;
        if (parsing) {
            const size_t hi = CTF_MIN(kept, ch->num_seqs);
            if (hi > parsed) {
                const ctf__seq *s = rb->seqs.p;
                const uint64_t end = hi < kept ? s[hi].offset : open ? open_at : chunk_end;
                parse_rc = ctf__parse_seqs(run, s, hi, end, buf, base, have, &perr);
                ctf__perf_since(rb->perf, CTF__PERF_PARSE_NS, t);
                parsed = hi;
                parsing = !parse_rc && !ctf__parse_stopped(run) && parsed < ch->num_seqs;
            }
        }
        if (last) break;
        /* Keep what the next block needs: the line being scanned, and while parsing the
         * sequences not yet parsed (the open one). */
        size_t keep = scanning ? scan_at : have;
        if (parsing) {
            const uint64_t from = parsed < kept ? rb->seqs.p[parsed].offset : open ? open_at : pos;
            if (from - base < keep) keep = (size_t)(from - base);
        }
        scan_at -= keep;
        if ((rc = block_slide(rb, &blk, &have, &base, keep, idx, lc, err))) goto fail;
        buf = rb->p;
    }
    int64_t bad = check_chunk_bounds(idx, ch, first, pre != 0, last_byte);
    if (bad >= 0) {
        rc = ctf__fail(err, CTF_ECHANGED, (ctf__where){idx->path, 0, 0, bad},
                       "the data file changed on disk since it was indexed (chunk %zu at "
                       "byte %lld no longer matches the index); reopen the reader",
                       lc, (long long)bad);
        goto fail;
    }
    rc = ctf__rescan_end(scan, err);
    scan = NULL;
    if (!rc && parse_rc) {
        *err = perr;
        rc = parse_rc;
    }
    if (rc) goto fail;
    if (rb->publish) {
        rb->publish(rb->publish_ctx, c, rb->seqs.p, rb->seqs.cap);
        rb->seqs = (ctf__seqbuf){0};
    }
    const uint64_t t = ctf__now_ns();
    rc = ctf__parse_end(run, out, err);
    ctf__perf_since(rb->perf, CTF__PERF_PARSE_NS, t);
    if (!rc) {
        (*out)->chunk = c;
        ctf__perf_add(rb->perf, CTF__PERF_PARSE_BYTES, ch->size);
    }
    return rc;
fail:
    if (scan) {
        ctf_error ignored;
        ctf__rescan_end(scan, &ignored);
    }
    ctf__parse_abort(run);
    return rc;
}

static int blocks_fn(void *ctx, size_t c, ctf__readbuf *rb, ctf__bufpool *pool,
                     ctf__chunk_data **out, ctf_error *err)
{
    return load_blocks(ctx, c, rb, pool, out, err);
}

/* A text chunk: from the chunk cache when there is one, else (and on its misses) parsed. */
static int text_load(corpus *k, size_t c, ctf__readbuf *rb, ctf__bufpool *pool,
                     ctf__chunk_data **out, ctf_error *err)
{
    if (!k->store) return load_blocks(k, c, rb, pool, out, err);
    const ctf__source_file *file = &k->files[k->chunk_file[c]];
    return ctf__chunkstore_load(k->store, &file->pc, file->idx, k->chunk_local[c], c, rb, pool,
                                blocks_fn, k, out, err);
}

void ctf__corpus_set_store(ctf__source *src, ctf__chunkstore *s)
{
    corpus *k = (corpus *)src;
    ctf__chunkstore_unref(k->store);
    k->store = ctf__chunkstore_ref(s);
}

static int corpus_load(ctf__source *src, ctf__readbuf *rb, size_t c, ctf__bufpool *pool,
                       ctf__chunk_data **out, ctf_error *err)
{
    corpus *k = (corpus *)src;
    const ctf_index *idx = k->files[k->chunk_file[c]].idx;
    const ctf__chunk *ch = &idx->chunks[k->chunk_local[c]];
    ctf__file_id now;
    *out = NULL;
    /* A remote object is not asked again: each range request demands the indexed ETag. */
    if (idx->file.etag[0])
        return idx->cbf ? cbf_load(k, c, rb, pool, out, err) : text_load(k, c, rb, pool, out, err);
    int rc = ctf__io_stat(k->remote, idx->path, &now, err);
    if (rc) return rc;
    if ((rc = ctf__file_unchanged(idx->path, &idx->file, &now, ch->offset, err))) return rc;
    if (idx->cbf) return cbf_load(k, c, rb, pool, out, err);
    rc = text_load(k, c, rb, pool, out, err);
    /* The bytes contradict the index although the file's size, modification time and inode do
     * not: the index cache would tell the next open the same lie, so it goes (the next open
     * scans the file again). The chunk's parse may have found it too (a fatal problem kept in
     * the chunk, reported when its turn comes). */
    bool contradicted = rc == CTF_ECHANGED ||
                        (!rc && *out && (*out)->fatal && (*out)->fatal_code == CTF_ECHANGED);
    if (contradicted) ctf__index_stale(idx, rc ? err : NULL);
    return rc;
}

static void corpus_destroy(ctf__source *src)
{
    corpus *k = (corpus *)src;
    if (k->files)
        for (size_t f = 0; f < k->num_files; f++) {
            ctf_index_free(k->files[f].idx);
            CTF_FREE(k->files[f].path);
        }
    if (k->fds)
        for (size_t i = 0; i < k->num_fds; i++) ctf__io_close(k->fds[i].io);
    ctf__remote_unref(k->remote);
    ctf__chunkstore_unref(k->store);
    if (k->mu_ok) pthread_mutex_destroy(&k->mu);
    CTF_FREE(k->fds);
    CTF_FREE(k->files);
    CTF_FREE(k->chunks);
    ctf__seqset_free(&k->sq);
    CTF_FREE(k->cbuf.p);
    CTF_FREE(k->chunk_file);
    CTF_FREE(k->chunk_local);
    CTF_FREE(k);
}

int ctf__corpus_open(const ctf_config *cfg, struct ctf__remote *rem, const char *const *paths,
                     size_t n, const ctf__parse_cfg *pc, uint64_t max_errors, size_t threads,
                     ctf__source **out, ctf_error *err)
{
    *out = NULL;
    if (n == 0) return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "config.paths: no data file given");
    if (n > UINT32_MAX)
        return ctf__fail(err, CTF_ELIMIT, CTF__NOWHERE,
                         "config.paths: at most %u files in a corpus (got %zu)", UINT32_MAX, n);
    corpus *k = CTF_CALLOC(1, sizeof *k);
    if (!k) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    k->src.load = corpus_load;
    k->src.seqs = corpus_seqs;
    k->src.destroy = corpus_destroy;
    k->src.hands_seqs = true;
    k->max_errors = max_errors;
    k->files = CTF_CALLOC(n, sizeof *k->files);
    k->num_fds = CTF_MAX(threads + 2, (size_t)8);
    k->fds = CTF_MALLOC(k->num_fds * sizeof *k->fds);
    if (k->fds)
        for (size_t i = 0; i < k->num_fds; i++) k->fds[i] = (fd_slot){NULL, 0, 0, 0};
    k->remote = ctf__remote_ref(rem);
    if (!k->files || !k->fds) goto oom;
    k->num_files = n;
    int rc;
    size_t nc = 0;
    for (size_t f = 0; f < n; f++) {
        ctf_config fc = *cfg;
        fc.path = paths[f];
        fc.num_paths = 0;
        fc.paths = NULL;
        fc.num_joins = 0;
        fc.joins = NULL;
        if (!(k->files[f].path = ctf__strdup(paths[f]))) goto oom;
        const uint64_t t0 = ctf__now_ns();
        rc = ctf__index_build(&fc, rem, &k->files[f].idx, err);
        if (rc) goto fail;
        const ctf_index *idx = k->files[f].idx;
        k->src.index_ns += ctf__now_ns() - t0;
        k->src.index_bytes += idx->from_cache ? 0 : idx->file.size;
        k->src.index_cache_hits += idx->from_cache;
        k->src.index_cache_misses += cfg->cache_index && !idx->from_cache;
        k->files[f].pc = *pc;
        k->files[f].pc.path = k->files[f].path;
        k->files[f].pc.line_mode = idx->line_mode;
        k->files[f].pc.pool = NULL;
        nc += idx->num_chunks;
        k->src.num_seqs += idx->num_seqs;
        k->src.total_samples += idx->total_samples;
        k->src.total_bytes += idx->file.size;
        k->src.warnings += idx->warnings;
    }
    k->chunks = CTF_MALLOC((nc ? nc : 1) * sizeof *k->chunks);
    k->chunk_file = CTF_MALLOC((nc ? nc : 1) * sizeof *k->chunk_file);
    k->chunk_local = CTF_MALLOC((nc ? nc : 1) * sizeof *k->chunk_local);
    if (!k->chunks || !k->chunk_file || !k->chunk_local ||
        ctf__seqset_init(&k->sq, cfg, nc, k->src.total_samples))
        goto oom;
    size_t c = 0, seq_base = 0;
    /* The fingerprint of a corpus of one file is the file's, so that its checkpoints are the
     * file's; over several files it folds each file's size and index hash in order. */
    uint64_t h = n == 1 ? k->files[0].idx->hash : 0x6a09e667f3bcc908ull;
    for (size_t f = 0; f < n; f++) {
        const ctf_index *idx = k->files[f].idx;
        for (size_t lc = 0; lc < idx->num_chunks; lc++, c++) {
            k->chunks[c] = idx->chunks[lc];
            k->chunks[c].first_seq += seq_base;
            k->chunk_file[c] = (uint32_t)f;
            k->chunk_local[c] = lc;
        }
        seq_base += idx->num_seqs;
        if (n > 1) {
            uint64_t w[2] = {idx->file.size, idx->hash};
            h = ctf__hash_bytes(h, w, sizeof w);
        }
    }
    k->src.chunks = k->chunks;
    k->src.num_chunks = nc;
    k->src.chunk_file = k->chunk_file;
    k->src.files = k->files;
    k->src.num_files = n;
    k->src.fp_files = k->files;
    k->src.num_fp_files = n;
    k->src.hash = h;
    pthread_mutex_init(&k->mu, NULL);
    k->mu_ok = true;
    *out = &k->src;
    return 0;
oom:
    rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory opening the corpus");
fail:
    corpus_destroy(&k->src);
    return rc;
}
