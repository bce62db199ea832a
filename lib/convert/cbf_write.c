/*
 * cbf_write.c -- CTF into CNTK's binary format (CBF): the writer of `ctfio convert cbf`.
 *
 * The text is indexed and parsed chunk by chunk exactly as the reader does (the same sequences,
 * the same values), always in double precision: CNTK's ctf2bin.py reads every value as a Python
 * float (a double) and rounds that to float when it writes float, and so does this writer, so
 * that its float values are ctf2bin's bit for bit. Sequences go into an output chunk until the
 * chunk holds chunk_size bytes; then the chunk is written (its lengths, then stream after
 * stream) and the next begins. Sparse entries are sorted by index within a sample (stably, as
 * ctf2bin's sort). A sequence's length is the most samples any of its streams has (ctf2bin's).
 * The output goes to OUT.part, renamed over OUT when complete; it is never the input.
 */
#include "format/format.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#define CBF_MAGIC 0x636e746b5f62696eull

/* A growable byte buffer. */
typedef struct bytes {
    unsigned char *p;
    size_t len, cap;
} bytes;

static int put(bytes *b, const void *src, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n) cap *= 2;
        unsigned char *q = CTF_REALLOC(b->p, cap);
        if (!q) return CTF_ENOMEM;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
    return 0;
}

static int put32(bytes *b, uint32_t v)
{
    unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    return put(b, x, 4);
}

static int put64(bytes *b, uint64_t v)
{
    return put32(b, (uint32_t)v) || put32(b, (uint32_t)(v >> 32));
}

static int put_value(bytes *b, double v, ctf_precision prec)
{
    if (prec == CTF_FLOAT64) {
        uint64_t u;
        memcpy(&u, &v, 8);
        return put64(b, u);
    }
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return put32(b, u);
}

typedef struct writer {
    const ctf_config *cfg;
    ctf_precision prec;
    uint64_t chunk_size;
    FILE *out;
    const char *tmp;
    uint64_t pos;           /* bytes written */
    bytes lens;             /* the open chunk's sequence lengths */
    bytes st[CTF_MAX_STREAMS]; /* the open chunk's data, per stream */
    uint32_t seqs;          /* sequences in the open chunk */
    uint64_t samples;       /* their samples */
    bytes table;            /* the chunk table */
    uint32_t chunks;
    struct { int32_t ind; uint32_t at; } *pairs; /* a sample's entries, sorted */
    size_t pairs_cap;
    ctf_cbf_write_result *res;
} writer;

static int write_out(writer *w, const void *p, size_t n, ctf_error *err)
{
    if (n && fwrite(p, 1, n, w->out) != n)
        return ctf__fail(err, CTF_EIO, (ctf__where){w->tmp, 0, 0, (int64_t)w->pos},
                         "write error on %s: %s", w->tmp, strerror(errno));
    w->pos += n;
    return 0;
}

static int flush_chunk(writer *w, ctf_error *err)
{
    if (!w->seqs) return 0;
    if (w->samples > UINT32_MAX)
        return ctf__fail(err, CTF_ELIMIT, CTF__NOWHERE, "a CBF chunk holds at most 2^32 - 1 "
                         "samples: use a smaller chunk size");
    if (put64(&w->table, w->pos) || put32(&w->table, w->seqs) ||
        put32(&w->table, (uint32_t)w->samples))
        return CTF_ENOMEM;
    int rc = write_out(w, w->lens.p, w->lens.len, err);
    for (size_t k = 0; !rc && k < w->cfg->num_streams; k++) {
        rc = write_out(w, w->st[k].p, w->st[k].len, err);
        w->st[k].len = 0;
    }
    w->lens.len = 0;
    w->seqs = 0;
    w->samples = 0;
    w->chunks++;
    return rc;
}

static int cmp_pair(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const uint32_t i = ((const uint32_t *)a)[1], j = ((const uint32_t *)b)[1];
    return x != y ? (x < y ? -1 : 1) : (i < j ? -1 : i > j);
}

/* Appends sequence i of cd (local index) to the open chunk. */
static int add_seq(writer *w, const ctf__chunk_data *cd, size_t i)
{
    const size_t ns = w->cfg->num_streams;
    uint32_t len = 0;
    for (size_t k = 0; k < ns; k++) len = CTF_MAX(len, cd->slices[i * ns + k].count);
    if (put32(&w->lens, len)) return CTF_ENOMEM;
    for (size_t k = 0; k < ns; k++) {
        const ctf_stream_def *d = &w->cfg->streams[k];
        const ctf__stream_data *sd = &cd->streams[k];
        const ctf__slice sl = cd->slices[i * ns + k];
        const double *v = sd->values;
        bytes *b = &w->st[k];
        if (put32(b, sl.count)) return CTF_ENOMEM;
        if (!d->is_sparse) {
            for (uint32_t t = sl.first; t < sl.first + sl.count; t++) {
                const size_t at = ctf__dense_at(sd, d->dim, t), n = ctf__dense_len(sd, d->dim, t);
                for (size_t x = 0; x < d->dim; x++)
                    if (put_value(b, x < n ? v[at + x] : 0.0, w->prec)) return CTF_ENOMEM;
            }
            continue;
        }
        const int64_t lo = sd->indptr[sl.first], hi = sd->indptr[sl.first + sl.count];
        if (hi - lo > INT32_MAX) return CTF_ELIMIT;
        if (put32(b, (uint32_t)(hi - lo))) return CTF_ENOMEM;
        const size_t vals_at = b->len;
        /* Values and indices are written sample by sample in sorted order: values first (all
         * of the sequence's), then the indices, then the per-sample counts. */
        size_t need = (size_t)(hi - lo);
        if (need > w->pairs_cap) {
            void *q = CTF_REALLOC(w->pairs, need * sizeof *w->pairs);
            if (!q) return CTF_ENOMEM;
            w->pairs = q;
            w->pairs_cap = need;
        }
        for (uint32_t t = sl.first; t < sl.first + sl.count; t++) {
            const int64_t a = sd->indptr[t], e = sd->indptr[t + 1];
            for (int64_t x = a; x < e; x++) {
                w->pairs[x - lo].ind = sd->indices[x];
                w->pairs[x - lo].at = (uint32_t)(x - a);
            }
            if (e - a > 1) qsort(w->pairs + (a - lo), (size_t)(e - a), sizeof *w->pairs, cmp_pair);
            for (int64_t x = a; x < e; x++)
                if (put_value(b, v[a + w->pairs[x - lo].at], w->prec)) return CTF_ENOMEM;
        }
        for (int64_t x = lo; x < hi; x++)
            if (put32(b, (uint32_t)w->pairs[x - lo].ind)) return CTF_ENOMEM;
        for (uint32_t t = sl.first; t < sl.first + sl.count; t++)
            if (put32(b, (uint32_t)(sd->indptr[t + 1] - sd->indptr[t]))) return CTF_ENOMEM;
        CTF_UNUSED(vals_at);
        w->res->nonzeros += (uint64_t)(hi - lo);
    }
    w->seqs++;
    w->samples += len;
    w->res->sequences++;
    w->res->samples += len;
    return 0;
}

/* The header: magic, counts, the stream table, the chunk table, then its own offset. */
static int write_header(writer *w, ctf_error *err)
{
    bytes h = {0};
    const uint64_t at = w->pos;
    int rc = put64(&h, CBF_MAGIC) || put32(&h, w->chunks) ||
             put32(&h, (uint32_t)w->cfg->num_streams);
    for (size_t k = 0; !rc && k < w->cfg->num_streams; k++) {
        const ctf_stream_def *d = &w->cfg->streams[k];
        const unsigned char enc = d->is_sparse, et = w->prec == CTF_FLOAT64;
        rc = put(&h, &enc, 1) || put32(&h, (uint32_t)strlen(d->name)) ||
             put(&h, d->name, strlen(d->name)) || put(&h, &et, 1) || put32(&h, (uint32_t)d->dim);
    }
    if (!rc) rc = put(&h, w->table.p, w->table.len) || put64(&h, at);
    if (rc) {
        CTF_FREE(h.p);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory writing %s", w->tmp);
    }
    rc = write_out(w, h.p, h.len, err);
    CTF_FREE(h.p);
    return rc;
}

/* The first recorded error of a parsed chunk, as the conversion's error. */
static int chunk_error(const ctf__chunk_data *cd, ctf_error *err)
{
    for (size_t i = 0; i < cd->num_problems; i++)
        if (cd->problems[i].sev == CTF_SEV_ERROR) {
            if (err) *err = cd->problems[i].err;
            return cd->problems[i].err.code ? cd->problems[i].err.code : CTF_EPARSE;
        }
    return ctf__fail(err, CTF_EPARSE, CTF__NOWHERE, "the input has errors");
}

static int convert_chunks(writer *w, const ctf_index *idx, ctf_error *err)
{
    ctf__parse_cfg pc = {.path = idx->path, .streams = w->cfg->streams,
                         .num_streams = w->cfg->num_streams, .precision = CTF_FLOAT64,
                         .line_mode = idx->line_mode, .frame_mode = w->cfg->frame_mode,
                         .trace_level = 0, .pool = NULL};
    ctf__seqbuf seqs = {0};
    char *buf = NULL;
    size_t cap = 0;
    int rc = 0;
    int fd = ctf__file_open(idx->path, err);
    if (fd < 0) return fd;
    for (size_t c = 0; !rc && c < idx->num_chunks; c++) {
        const ctf__chunk *ch = &idx->chunks[c];
        if (ch->size + 1 > cap) {
            CTF_FREE(buf);
            cap = (size_t)ch->size + 1;
            if (!(buf = CTF_MALLOC(cap))) {
                cap = 0;
                rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
                break;
            }
        }
        if ((rc = ctf__file_pread(fd, idx->path, buf, (size_t)ch->size, ch->offset, err))) break;
        if ((rc = ctf__index_chunk_seqs(idx, c, buf, &seqs, err))) break;
        ctf__chunk_data *cd = NULL;
        if ((rc = ctf__parse_chunk(&pc, idx, c, seqs.p, buf, 0, &cd, err))) break;
        if (cd->num_errors || cd->fatal) {
            rc = chunk_error(cd, err);
            ctf__chunk_data_free(cd);
            break;
        }
        for (size_t i = 0; !rc && i < cd->num_seqs; i++) {
            if ((rc = add_seq(w, cd, i)))
                rc = rc == CTF_ELIMIT
                         ? ctf__fail(err, rc, CTF__NOWHERE, "a sequence has 2^31 entries or more")
                         : ctf__fail(err, rc, CTF__NOWHERE, "out of memory converting %s",
                                     idx->path);
            uint64_t held = w->lens.len;
            for (size_t k = 0; k < w->cfg->num_streams; k++) held += w->st[k].len;
            if (!rc && held >= w->chunk_size) rc = flush_chunk(w, err);
        }
        ctf__chunk_data_free(cd);
    }
    ctf__file_close(fd);
    CTF_FREE(buf);
    CTF_FREE(seqs.p);
    return rc;
}

int ctf_cbf_write(const ctf_config *cfg, const char *out_path, uint64_t chunk_size,
                  ctf_precision precision, ctf_cbf_write_result *result, ctf_error *err)
{
    ctf_cbf_write_result ignored;
    if (!result) result = &ignored;
    memset(result, 0, sizeof *result);
    if (!cfg || !out_path || !out_path[0])
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "ctf_cbf_write: NULL argument");
    if (cfg->num_paths > 1 || cfg->num_joins)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "ctf_cbf_write: one input file, without "
                         "joined deserializers");
    if (precision != CTF_FLOAT32 && precision != CTF_FLOAT64)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "precision: must be float or double");
    if (chunk_size == 0)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "chunk size: must be at least 1 byte");
    ctf_config c = *cfg;
    if (cfg->num_paths == 1) {
        c.path = cfg->paths[0];
        c.paths = NULL;
        c.num_paths = 0;
    }
    int rc;
    /* The streams' own checks (this layer does not call the configuration's validator). */
    if (!c.path || !c.path[0] || !c.streams || !c.num_streams ||
        c.num_streams > CTF_MAX_STREAMS)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "ctf_cbf_write: an input file and 1 to "
                         "%d streams are required", CTF_MAX_STREAMS);
    for (size_t k = 0; k < c.num_streams; k++) {
        const ctf_stream_def *d = &c.streams[k];
        if (!d->name || !d->name[0] || strlen(d->name) > 4096)
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "streams[%zu]: a name of 1 to 4096 "
                             "bytes is required", k);
        if (d->dim == 0 || d->dim > (d->is_sparse ? CTF_MAX_SPARSE_DIM : CTF_MAX_DENSE_DIM))
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "input.%s.dim: %zu is out of range",
                             d->name, d->dim);
        for (size_t j = 0; j < k; j++)
            if (!strcmp(c.streams[j].name, d->name))
                return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "input.%s: named twice", d->name);
    }
    ctf__file_id in_id, out_id;
    if ((rc = ctf__file_stat(c.path, &in_id, err))) return rc;
    struct stat a, b;
    if (stat(c.path, &a) == 0 && stat(out_path, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino)
        return ctf__fail(err, CTF_EINVAL, (ctf__where){out_path, 0, 0, -1},
                         "the output is the input file: choose another output path");
    ctf_index *idx = NULL;
    if ((rc = ctf_index_build(&c, &idx, err))) return rc;
    if (idx->cbf) {
        ctf_index_free(idx);
        return ctf__fail(err, CTF_EINVAL, (ctf__where){c.path, 0, 0, -1},
                         "the input is a CBF file already");
    }
    const size_t plen = strlen(out_path);
    char *tmp = CTF_MALLOC(plen + 6);
    writer w = {.cfg = &c, .prec = precision, .chunk_size = chunk_size, .res = result};
    if (!tmp) {
        ctf_index_free(idx);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    memcpy(tmp, out_path, plen);
    memcpy(tmp + plen, ".part", 6);
    w.tmp = tmp;
    w.out = fopen(tmp, "wb");
    if (!w.out) {
        rc = ctf__fail(err, CTF_EIO, (ctf__where){tmp, 0, 0, -1}, "cannot create %s: %s", tmp,
                       strerror(errno));
    } else {
        bytes head = {0};
        rc = put64(&head, CBF_MAGIC) || put32(&head, 1)
                 ? ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory")
                 : write_out(&w, head.p, head.len, err);
        CTF_FREE(head.p);
        if (!rc) rc = convert_chunks(&w, idx, err);
        if (!rc) rc = flush_chunk(&w, err);
        if (!rc) rc = write_header(&w, err);
        if (fclose(w.out) != 0 && !rc)
            rc = ctf__fail(err, CTF_EIO, (ctf__where){tmp, 0, 0, -1}, "write error on %s: %s",
                           tmp, strerror(errno));
        if (!rc && ctf__file_stat(c.path, &out_id, err) == 0 &&
            (out_id.size != in_id.size || out_id.mtime_ns != in_id.mtime_ns))
            rc = ctf__fail(err, CTF_ECHANGED, (ctf__where){c.path, 0, 0, -1},
                           "the input changed while it was converted");
        if (!rc && rename(tmp, out_path) != 0)
            rc = ctf__fail(err, CTF_EIO, (ctf__where){out_path, 0, 0, -1},
                           "cannot rename %s to %s: %s", tmp, out_path, strerror(errno));
        if (rc) remove(tmp);
    }
    result->chunks = w.chunks;
    result->bytes_written = w.pos;
    CTF_FREE(w.lens.p);
    CTF_FREE(w.table.p);
    CTF_FREE(w.pairs);
    for (size_t k = 0; k < CTF_MAX_STREAMS; k++) CTF_FREE(w.st[k].p);
    CTF_FREE(tmp);
    ctf_index_free(idx);
    return rc;
}
