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
 * The output goes to a temporary file of its own next to OUT (convert.h), renamed over OUT when
 * complete; it is never the input.
 */
#include "convert/convert.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define CBF_MAGIC 0x636e746b5f62696eull

typedef struct writer {
    const ctf_config *cfg;
    ctf_precision prec;
    uint64_t chunk_size;
    FILE *out;
    const char *tmp;
    uint64_t pos;           /* ctf__cbf_bytes written */
    ctf__cbf_build open;    /* the open chunk (cbf_build.c), in ctf2bin's order */
    ctf__cbf_bytes table;            /* the chunk table */
    uint32_t chunks;
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
    ctf__cbf_build *b = &w->open;
    if (!b->seqs) return 0;
    if (b->samples > UINT32_MAX)
        return ctf__fail(err, CTF_ELIMIT, CTF__NOWHERE,
                         "a CBF chunk holds at most 2^32 - 1 "
                         "samples: use a smaller chunk size");
    if (ctf__cbf_put64(&w->table, w->pos) || ctf__cbf_put32(&w->table, b->seqs) ||
        ctf__cbf_put32(&w->table, (uint32_t)b->samples))
        return CTF_ENOMEM;
    int rc = write_out(w, b->lens.p, b->lens.len, err);
    for (size_t k = 0; !rc && k < b->num_streams; k++)
        rc = write_out(w, b->st[k].p, b->st[k].len, err);
    ctf__cbf_build_reset(b);
    w->chunks++;
    return rc;
}

/* Appends sequence i of cd (local index) to the open chunk. */
static int add_seq(writer *w, const ctf__chunk_data *cd, size_t i)
{
    const uint64_t samples = w->open.samples;
    int rc = ctf__cbf_build_seq(&w->open, cd, i);
    if (rc) return rc;
    w->res->sequences++;
    w->res->samples += w->open.samples - samples;
    w->res->nonzeros = w->open.nonzeros;
    return 0;
}

/* The header: magic, counts, the stream table, the chunk table, then its own offset. */
static int write_header(writer *w, ctf_error *err)
{
    ctf__cbf_bytes h = {0};
    const uint64_t at = w->pos;
    int rc = ctf__cbf_put64(&h, CBF_MAGIC) || ctf__cbf_put32(&h, w->chunks) ||
             ctf__cbf_put32(&h, (uint32_t)w->cfg->num_streams);
    for (size_t k = 0; !rc && k < w->cfg->num_streams; k++) {
        const ctf_stream_def *d = &w->cfg->streams[k];
        const unsigned char enc = d->is_sparse, et = w->prec == CTF_FLOAT64;
        rc = ctf__cbf_put(&h, &enc, 1) || ctf__cbf_put32(&h, (uint32_t)strlen(d->name)) ||
             ctf__cbf_put(&h, d->name, strlen(d->name)) || ctf__cbf_put(&h, &et, 1) ||
             ctf__cbf_put32(&h, (uint32_t)d->dim);
    }
    if (!rc) rc = ctf__cbf_put(&h, w->table.p, w->table.len) || ctf__cbf_put64(&h, at);
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
    ctf__parse_cfg pc = {.path = idx->path,
                         .streams = w->cfg->streams,
                         .num_streams = w->cfg->num_streams,
                         .precision = CTF_FLOAT64,
                         .line_mode = idx->line_mode,
                         .frame_mode = w->cfg->frame_mode,
                         .trace_level = 0,
                         .pool = NULL};
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
            if (!rc && ctf__cbf_build_size(&w->open) >= w->chunk_size) rc = flush_chunk(w, err);
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
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                         "ctf_cbf_write: one input file, without "
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
    if (!c.path || !c.path[0] || !c.streams || !c.num_streams || c.num_streams > CTF_MAX_STREAMS)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                         "ctf_cbf_write: an input file and 1 to "
                         "%d streams are required",
                         CTF_MAX_STREAMS);
    for (size_t k = 0; k < c.num_streams; k++) {
        const ctf_stream_def *d = &c.streams[k];
        if (!d->name || !d->name[0] || strlen(d->name) > 4096)
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                             "streams[%zu]: a name of 1 to 4096 "
                             "ctf__cbf_bytes is required",
                             k);
        if (d->dim == 0 || d->dim > (d->is_sparse ? CTF_MAX_SPARSE_DIM : CTF_MAX_DENSE_DIM))
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "input.%s.dim: %zu is out of range",
                             d->name, d->dim);
        for (size_t j = 0; j < k; j++)
            if (!strcmp(c.streams[j].name, d->name))
                return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "input.%s: named twice", d->name);
    }
    ctf__file_id in_id, out_id;
    if ((rc = ctf__file_stat(c.path, &in_id, err))) return rc;
    ctf_index *idx = NULL;
    if ((rc = ctf_index_build(&c, &idx, err))) return rc;
    if (idx->cbf) {
        ctf_index_free(idx);
        return ctf__fail(err, CTF_EINVAL, (ctf__where){c.path, 0, 0, -1},
                         "the input is a CBF file already");
    }
    writer w = {.cfg = &c, .prec = precision, .chunk_size = chunk_size, .res = result};
    w.open = (ctf__cbf_build){.streams = c.streams,
                              .num_streams = c.num_streams,
                              .prec = precision,
                              .sort = true};
    /* A temporary file of its own next to the output, the input refused as the output. */
    ctf__out_file of = {0};
    rc = ctf__out_open(&of, c.path, -1, out_path, err);
    if (!rc) {
        w.out = of.f;
        w.tmp = of.af.tmp ? of.af.tmp : out_path;
        ctf__cbf_bytes head = {0};
        rc = ctf__cbf_put64(&head, CBF_MAGIC) || ctf__cbf_put32(&head, 1)
                 ? ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory")
                 : write_out(&w, head.p, head.len, err);
        CTF_FREE(head.p);
        if (!rc) rc = convert_chunks(&w, idx, err);
        if (!rc) rc = flush_chunk(&w, err);
        if (!rc) rc = write_header(&w, err);
        if (!rc && ctf__file_stat(c.path, &out_id, err) == 0 &&
            (out_id.size != in_id.size || out_id.mtime_ns != in_id.mtime_ns))
            rc = ctf__fail(err, CTF_ECHANGED, (ctf__where){c.path, 0, 0, -1},
                           "the input changed while it was converted");
        rc = ctf__out_finish(&of, rc, out_path, err);
    }
    result->chunks = w.chunks;
    result->bytes_written = w.pos;
    ctf__cbf_build_free(&w.open);
    CTF_FREE(w.table.p);
    ctf_index_free(idx);
    return rc;
}
