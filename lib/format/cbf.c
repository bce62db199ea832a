/*
 * cbf.c -- CNTK's binary format (CBF, the files of CNTKBinaryReader): a .bin file's header
 * becomes the file's index, and a chunk's bytes decode into the same parsed chunk the text
 * parser makes, so that randomization, packing, workers and checkpoints are the text reader's.
 *
 * Layout (little-endian; docs/cbf.md): uint64 magic, uint32 version 1, the chunks, then the
 * header: magic, uint32 chunks, uint32 streams; per stream a byte (0 dense, 1 sparse), uint32
 * name length and the name, a byte (0 float, 1 double) and uint32 dim; per chunk int64 offset,
 * uint32 sequences, uint32 samples; the file's last 8 bytes hold the header's offset. A chunk
 * holds a uint32 length per sequence, then stream after stream, per sequence: dense, uint32
 * samples and samples * dim values; sparse, uint32 samples, int32 nnz, nnz values, nnz int32
 * indices (within the sample) and an int32 count of entries per sample.
 *
 * Every count is checked against the bytes that hold it before anything is read or allocated
 * by it: a truncated or damaged file is CTF_EPARSE naming the byte, never a crash.
 */
#include "format/format.h"
#include "io/io.h"

#define CBF_MAGIC 0x636e746b5f62696eull
#define CBF_VERSION 1u
/* Longest stream name read from a header (CNTK has no limit; names are identifiers). */
#define CBF_MAX_NAME 4096u

struct ctf__cbf {
    size_t num_streams;
    ctf__cbf_stream *streams;
    uint64_t header_offset;
    /* Per stream of the file: the configured stream it feeds, or -1 (not delivered). */
    int to_cfg[CTF_MAX_STREAMS];
};

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* FNV-1a over n bytes, continuing h: the file's fingerprint (index.c's checksum is not called
 * from here, so that index.c, which calls this file, and this file do not call each other). */
static uint64_t fold(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int corrupt(ctf_error *err, const char *path, uint64_t off, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static int corrupt(ctf_error *err, const char *path, uint64_t off, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ctf__fail(err, CTF_EPARSE, (ctf__where){path, 0, 0, (int64_t)off},
                     "not a valid CBF file: %s", msg);
}

int ctf__cbf_sniff(ctf__io *io, uint64_t size, bool *yes, ctf_error *err)
{
    unsigned char b[8];
    *yes = false;
    if (size < 8) return 0;
    int rc = ctf__io_read(io, b, 8, 0, err);
    if (rc) return rc;
    *yes = rd64(b) == CBF_MAGIC;
    return 0;
}

void ctf__cbf_free(ctf__cbf *cbf)
{
    if (!cbf) return;
    for (size_t i = 0; i < cbf->num_streams; i++) CTF_FREE(cbf->streams[i].name);
    CTF_FREE(cbf->streams);
    CTF_FREE(cbf);
}

/* The raw chunk table entry. */
typedef struct raw_chunk {
    uint64_t offset;
    uint32_t seqs, samples;
} raw_chunk;

/* Reads and checks the header: the stream table into cbf, the chunk table into *raw. */
static int read_header(ctf__io *io, const char *path, uint64_t size, ctf__cbf *cbf, raw_chunk **raw,
                       uint32_t *nraw, ctf_error *err)
{
    unsigned char b[16];
    int rc;
    *raw = NULL;
    if (size < 12 + 16 + 8)
        return corrupt(err, path, 0, "%llu bytes is shorter than the smallest CBF file",
                       (unsigned long long)size);
    if ((rc = ctf__io_read(io, b, 12, 0, err))) return rc;
    if (rd64(b) != CBF_MAGIC) return corrupt(err, path, 0, "the magic number is missing");
    if (rd32(b + 8) != CBF_VERSION)
        return ctf__fail(err, CTF_EPARSE, (ctf__where){path, 0, 0, 8},
                         "CBF version %u is not supported (ctfio reads version %u)", rd32(b + 8),
                         CBF_VERSION);
    if ((rc = ctf__io_read(io, b, 8, size - 8, err))) return rc;
    const uint64_t h = rd64(b);
    if (h < 12 || h > size - 8 - 16)
        return corrupt(err, path, size - 8, "the header offset %llu is outside the file",
                       (unsigned long long)h);
    cbf->header_offset = h;
    if ((rc = ctf__io_read(io, b, 16, h, err))) return rc;
    if (rd64(b) != CBF_MAGIC)
        return corrupt(err, path, h, "the header does not start with the magic number");
    const uint32_t nc = rd32(b + 8), ns = rd32(b + 12);
    const uint64_t table = (uint64_t)nc * 16;
    if (table > size - 8 - h - 16)
        return corrupt(err, path, h + 8, "the header's %u chunks do not fit in the file", nc);
    const uint64_t st_at = h + 16, st_len = size - 8 - table - st_at;
    if (ns == 0) return corrupt(err, path, h + 12, "the file has no streams");
    if (ns > CTF_MAX_STREAMS)
        return ctf__fail(err, CTF_ELIMIT, (ctf__where){path, 0, 0, (int64_t)h + 12},
                         "the CBF file has %u streams; ctfio reads at most %d", ns,
                         CTF_MAX_STREAMS);
    if (st_len < (uint64_t)ns * 10 || st_len > (uint64_t)ns * (10 + CBF_MAX_NAME))
        return corrupt(err, path, st_at, "the stream table (%llu bytes) does not fit %u streams",
                       (unsigned long long)st_len, ns);
    unsigned char *st = CTF_MALLOC((size_t)st_len);
    cbf->streams = CTF_CALLOC(ns, sizeof *cbf->streams);
    if (!st || !cbf->streams) {
        CTF_FREE(st);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading %s", path);
    }
    if ((rc = ctf__io_read(io, st, (size_t)st_len, st_at, err))) {
        CTF_FREE(st);
        return rc;
    }
    uint64_t p = 0;
    for (uint32_t i = 0; i < ns; i++) {
        ctf__cbf_stream *s = &cbf->streams[i];
        const uint64_t at = st_at + p;
        if (st_len - p < 10) {
            rc = corrupt(err, path, at, "stream %u's description is cut short", i);
            break;
        }
        const unsigned enc = st[p];
        const uint32_t len = rd32(st + p + 1);
        if (enc > 1) {
            rc = corrupt(err, path, at, "stream %u has the unknown encoding %u", i, enc);
            break;
        }
        if (len == 0 || len > CBF_MAX_NAME || st_len - p - 10 < len) {
            rc = corrupt(err, path, at + 1, "stream %u's name length %u is not possible", i, len);
            break;
        }
        const unsigned char *nm = st + p + 5;
        if (memchr(nm, 0, len)) {
            rc = corrupt(err, path, at + 5, "stream %u's name holds a NUL byte", i);
            break;
        }
        const unsigned et = st[p + 5 + len];
        const uint32_t dim = rd32(st + p + 6 + len);
        if (et > 1) {
            rc = corrupt(err, path, at + 5 + len, "stream %u has the unknown element type %u", i,
                         et);
            break;
        }
        if (dim == 0 || (enc == 1 ? dim > CTF_MAX_SPARSE_DIM : dim > CTF_MAX_DENSE_DIM)) {
            rc = corrupt(err, path, at + 6 + len, "stream %u's dimension %u is out of range", i,
                         dim);
            break;
        }
        if (!(s->name = CTF_MALLOC(len + 1))) {
            rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading %s", path);
            break;
        }
        memcpy(s->name, nm, len);
        s->name[len] = 0;
        s->sparse = enc == 1;
        s->precision = et ? CTF_FLOAT64 : CTF_FLOAT32;
        s->dim = dim;
        cbf->num_streams = i + 1;
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(cbf->streams[j].name, s->name)) {
                rc = corrupt(err, path, at + 5, "the stream name '%s' appears twice", s->name);
                break;
            }
        if (rc) break;
        p += 10 + len;
    }
    CTF_FREE(st);
    if (rc) return rc;
    if (p != st_len)
        return corrupt(err, path, st_at + p, "%llu bytes follow the stream table",
                       (unsigned long long)(st_len - p));
    unsigned char *tb = CTF_MALLOC(table ? (size_t)table : 1);
    *raw = CTF_MALLOC((nc ? nc : 1) * sizeof **raw);
    if (!tb || !*raw) {
        CTF_FREE(tb);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading %s", path);
    }
    if (table && (rc = ctf__io_read(io, tb, (size_t)table, st_at + st_len, err))) {
        CTF_FREE(tb);
        return rc;
    }
    uint64_t prev = 12;
    for (uint32_t c = 0; c < nc; c++) {
        const unsigned char *e = tb + (size_t)c * 16;
        raw_chunk *r = &(*raw)[c];
        r->offset = rd64(e);
        r->seqs = rd32(e + 8);
        r->samples = rd32(e + 12);
        if (r->offset < prev || r->offset > h) {
            rc = corrupt(err, path, st_at + st_len + (uint64_t)c * 16,
                         "chunk %u's offset %llu is out of order or past the header", c,
                         (unsigned long long)r->offset);
            break;
        }
        prev = r->offset;
    }
    CTF_FREE(tb);
    *nraw = nc;
    return rc;
}

/* Checks the chunk's sequence lengths (its first 4 * seqs bytes) against its samples, and
 * makes its records. first_key: the file's number of the chunk's first sequence. */
static int lens_to_seqs(const char *path, const ctf__chunk *ch, const unsigned char *lens,
                        uint64_t first_key, ctf__seq *out, ctf_error *err)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < ch->num_seqs; i++) {
        const uint32_t n = rd32(lens + 4 * i);
        sum += n;
        if (out)
            out[i] = (ctf__seq){.offset = ch->offset,
                                .key = first_key + i,
                                .line = first_key + i,
                                .samples = n,
                                .lines = 1};
    }
    if (sum != ch->samples)
        return corrupt(err, path, ch->offset,
                       "the chunk at byte %llu holds %llu samples, its "
                       "table entry says %llu",
                       (unsigned long long)ch->offset, (unsigned long long)sum,
                       (unsigned long long)ch->samples);
    return 0;
}

/* Maps the configured streams onto the file's, by name in the file (alias, else name). */
static int map_streams(ctf__cbf *cbf, const ctf_config *cfg, const char *path, ctf_error *err)
{
    for (size_t j = 0; j < CTF_MAX_STREAMS; j++) cbf->to_cfg[j] = -1;
    for (size_t k = 0; k < cfg->num_streams; k++) {
        const ctf_stream_def *d = &cfg->streams[k];
        const char *want = ctf__stream_field(d);
        size_t j = 0;
        while (j < cbf->num_streams && strcmp(cbf->streams[j].name, want)) j++;
        if (j == cbf->num_streams) {
            char names[512];
            size_t o = 0;
            names[0] = 0;
            for (size_t x = 0; x < cbf->num_streams && o < sizeof names - 1; x++)
                o += (size_t)snprintf(names + o, sizeof names - o, "%s%s", x ? ", " : "",
                                      cbf->streams[x].name);
            return ctf__fail(err, CTF_EINVAL, (ctf__where){path, 0, 0, -1},
                             "input.%s: the CBF file has no stream '%s' (it has: %s)", d->name,
                             want, names);
        }
        const ctf__cbf_stream *s = &cbf->streams[j];
        if (cbf->to_cfg[j] >= 0)
            return ctf__fail(err, CTF_EINVAL, (ctf__where){path, 0, 0, -1},
                             "input.%s: the file's stream '%s' is already delivered as '%s'",
                             d->name, want, cfg->streams[cbf->to_cfg[j]].name);
        if (s->sparse != d->is_sparse || s->dim != d->dim)
            return ctf__fail(err, CTF_EINVAL, (ctf__where){path, 0, 0, -1},
                             "input.%s: the CBF file stores '%s' as %s of dimension %u, not %s "
                             "of dimension %zu",
                             d->name, want, s->sparse ? "sparse" : "dense", s->dim,
                             d->is_sparse ? "sparse" : "dense", d->dim);
        if (s->precision != cfg->precision)
            return ctf__fail(err, CTF_EINVAL, (ctf__where){path, 0, 0, -1},
                             "precision: the CBF file stores '%s' as %s; the precision must "
                             "match it (as in CNTK)",
                             want, s->precision == CTF_FLOAT64 ? "double" : "float");
        if (d->defines_mb_size)
            return ctf__fail(err, CTF_EINVAL, (ctf__where){path, 0, 0, -1},
                             "input.%s.definesMBSize: a CBF file stores each sequence's length; "
                             "no stream can define it",
                             d->name);
        cbf->to_cfg[j] = (int)k;
    }
    return 0;
}

int ctf__cbf_index(ctf_index *idx, const ctf_config *cfg, ctf__io *io, ctf_error *err)
{
    const char *path = idx->path;
    const uint64_t size = idx->file.size;
    ctf__cbf *cbf = idx->cbf = CTF_CALLOC(1, sizeof *cbf);
    if (!cbf) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    raw_chunk *raw = NULL;
    uint32_t nraw = 0;
    unsigned char *lens = NULL;
    size_t lens_cap = 0;
    int rc = read_header(io, path, size, cbf, &raw, &nraw, err);
    if (!rc && cfg->num_streams) rc = map_streams(cbf, cfg, path, err);
    if (rc) goto done;
    size_t n = 0;
    for (uint32_t c = 0; c < nraw; c++) n += raw[c].seqs != 0;
    idx->chunks = CTF_CALLOC(n ? n : 1, sizeof *idx->chunks);
    if (!idx->chunks) {
        rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading %s", path);
        goto done;
    }
    idx->min_seq_samples = UINT64_MAX;
    uint64_t hash = fold(0xcbf0cbf0cbf0cbf0ull, &size, sizeof size);
    /* A remote object's ETag joins it, as for text: a checkpoint taken on one version of an
     * object does not restore on another, even one with the same header and lengths. */
    if (idx->file.etag[0]) hash = fold(hash, idx->file.etag, strlen(idx->file.etag));
    for (uint32_t c = 0; c < nraw; c++) {
        const raw_chunk *r = &raw[c];
        const uint64_t end = c + 1 < nraw ? raw[c + 1].offset : cbf->header_offset;
        if (!r->seqs) continue; /* an empty chunk (ctf2bin writes one for an empty input) */
        if ((uint64_t)r->seqs * 4 > end - r->offset) {
            rc = corrupt(err, path, r->offset,
                         "chunk %u's %u sequence lengths do not fit in "
                         "its %llu bytes",
                         c, r->seqs, (unsigned long long)(end - r->offset));
            goto done;
        }
        ctf__chunk *ch = &idx->chunks[idx->num_chunks];
        *ch = (ctf__chunk){.first_seq = idx->num_seqs,
                           .num_seqs = r->seqs,
                           .offset = r->offset,
                           .size = end - r->offset,
                           .samples = r->samples,
                           .line = idx->num_seqs};
        /* The lengths, read now: the open checks them and takes the length statistics. */
        const size_t nb = (size_t)r->seqs * 4;
        if (nb > lens_cap) {
            CTF_FREE(lens);
            lens_cap = nb;
            if (!(lens = CTF_MALLOC(lens_cap))) {
                lens_cap = 0;
                rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading %s", path);
                goto done;
            }
        }
        if ((rc = ctf__io_read(io, lens, nb, r->offset, err))) goto done;
        if ((rc = lens_to_seqs(path, ch, lens, idx->num_seqs, NULL, err))) goto done;
        for (size_t i = 0; i < r->seqs; i++) {
            const uint64_t s = rd32(lens + 4 * i);
            idx->max_seq_samples = CTF_MAX(idx->max_seq_samples, s);
            idx->min_seq_samples = CTF_MIN(idx->min_seq_samples, s);
            unsigned b = 0;
            while (b < 64 && (s >> b)) b++;
            idx->hist[b]++;
        }
        ch->hash = fold(0x9e3779b97f4a7c15ull, lens, nb);
        const uint64_t w[4] = {ch->offset, ch->num_seqs, ch->samples, ch->hash};
        hash = fold(hash, w, sizeof w);
        idx->num_seqs += r->seqs;
        idx->total_samples += r->samples;
        idx->num_chunks++;
    }
    if (!idx->num_seqs) idx->min_seq_samples = 0;
    for (size_t i = 0; i < cbf->num_streams; i++) {
        const ctf__cbf_stream *s = &cbf->streams[i];
        const uint64_t w[3] = {s->sparse, (uint64_t)s->precision, s->dim};
        hash = fold(fold(hash, s->name, strlen(s->name)), w, sizeof w);
    }
    idx->hash = hash;
    idx->data_start = 12;
    idx->total_lines = idx->num_seqs;
done:
    CTF_FREE(raw);
    CTF_FREE(lens);
    return rc;
}

int ctf__cbf_chunk_seqs(const ctf_index *idx, size_t c, const char *bytes, ctf__seqbuf *out,
                        ctf_error *err)
{
    const ctf__chunk *ch = &idx->chunks[c];
    if (out->cap < ch->num_seqs &&
        ctf__grow((void **)&out->p, &out->cap, ch->num_seqs, sizeof *out->p))
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading chunk %zu of %s", c,
                         idx->path);
    if (bytes)
        return lens_to_seqs(idx->path, ch, (const unsigned char *)bytes, ch->first_seq, out->p,
                            err);
    const size_t nb = ch->num_seqs * 4;
    int rc = 0;
    if (!idx->file.etag[0]) {
        /* A remote object is not asked again: its range request demands the indexed ETag. */
        ctf__file_id now;
        rc = ctf__file_stat(idx->path, &now, err);
        if (rc) return rc;
        if ((rc = ctf__file_unchanged(idx->path, &idx->file, &now, ch->offset, err))) return rc;
    }
    unsigned char *own = CTF_MALLOC(nb);
    if (!own)
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory reading chunk %zu of %s", c,
                         idx->path);
    ctf__io *io;
    rc = ctf__io_open(idx->remote, idx->path, &idx->file, &io, err);
    if (!rc) rc = ctf__io_read(io, own, nb, ch->offset, err);
    ctf__io_close(io);
    if (!rc) rc = lens_to_seqs(idx->path, ch, own, ch->first_seq, out->p, err);
    CTF_FREE(own);
    return rc;
}

/*======================================================================
 * Decoding a chunk
 *====================================================================*/

/* Sequences ahead whose counts the walk fetches (about a memory latency of its work). */
#define WALK_AHEAD 16

/* A stream's totals over the chunk, found by the first pass. */
typedef struct stream_sum {
    uint64_t samples, nnz;
} stream_sum;

/* Walks the stream data of a chunk (after the lengths), checking every count against the bytes
 * left. With cd NULL it only sums; with cd it copies into cd's buffers (sized by a first walk)
 * and checks each sparse entry. @return : 0, or CTF_EPARSE naming the byte. */
static int walk(const ctf__cbf *cbf, const ctf_index *idx, const ctf__chunk *ch,
                const unsigned char *buf, stream_sum *sum, ctf__chunk_data *cd, ctf_error *err)
{
    const char *path = idx->path;
    const uint64_t size = ch->size, base = ch->offset;
    uint64_t p = (uint64_t)ch->num_seqs * 4;
    const size_t ns_cfg = cd ? cd->num_streams : 0;
    for (size_t j = 0; j < cbf->num_streams; j++) {
        const ctf__cbf_stream *s = &cbf->streams[j];
        const int k = cbf->to_cfg[j];
        const size_t elt = (size_t)s->precision;
        const unsigned shift = elt == 8 ? 3 : 2;
        ctf__stream_data *sd = cd && k >= 0 ? &cd->streams[k] : NULL;
        /* Each count says where the next one lies: a chain of dependent loads a row apart,
         * which the hardware does not fetch ahead (one cache miss per sequence and pass, most
         * of a float chunk's decode). The lengths at the chunk's start predict where the count
         * of sequence i + WALK_AHEAD lies (exactly for a dense stream that has each sequence's
         * length in samples, as a file of one stream does): that line is fetched ahead, and
         * the prediction starts again from each real count. Wrong guesses cost nothing but
         * the fetch (wrapping unsigned sums; only a guess inside the chunk is fetched). */
        uint64_t window = 0; /* predicted bytes of sequences i .. i + WALK_AHEAD - 1 */
        const size_t ahead = s->sparse ? 0 : CTF_MIN((size_t)WALK_AHEAD, ch->num_seqs);
        for (size_t i = 0; i < ahead; i++) window += 4 + (uint64_t)rd32(buf + 4 * i) * s->dim * elt;
        for (size_t i = 0; i < ch->num_seqs; i++) {
            const uint64_t at = p;
            if (ahead) {
                if (window < size - p) __builtin_prefetch(buf + p + window);
                const size_t far = i + ahead;
                if (far < ch->num_seqs) window += 4 + (uint64_t)rd32(buf + 4 * far) * s->dim * elt;
                window -= 4 + (uint64_t)rd32(buf + 4 * i) * s->dim * elt;
            }
            if (size - p < (s->sparse ? 8u : 4u))
                return corrupt(err, path, base + at,
                               "stream '%s' of sequence %zu of the chunk "
                               "at byte %llu is cut short",
                               s->name, i, (unsigned long long)base);
            const uint32_t n = rd32(buf + p);
            p += 4;
            if (!s->sparse) {
                const uint64_t vals = (uint64_t)n * s->dim;
                if (vals > (size - p) >> shift)
                    return corrupt(err, path, base + at,
                                   "stream '%s': %u samples of dimension "
                                   "%u do not fit in the chunk",
                                   s->name, n, s->dim);
                if (sd && sd->view) {
                    /* No copy: the samples' places in the chunk's bytes. The first sequence's
                     * values are the base; later ones lie past counts of other sequences. */
                    if (!sd->values) sd->values = (void *)(uintptr_t)(buf + p);
                    const size_t o = (size_t)(buf + p - (const unsigned char *)sd->values) / elt;
                    for (uint32_t t = 0; t <= n; t++)
                        sd->dense_off[sd->samples + t] = o + (size_t)t * s->dim;
                    cd->slices[i * ns_cfg + (size_t)k] = (ctf__slice){(uint32_t)sd->samples, n};
                    sd->samples += n;
                } else if (sd) {
                    memcpy((char *)sd->values + sd->samples * s->dim * elt, buf + p,
                           (size_t)vals * elt);
                    cd->slices[i * ns_cfg + (size_t)k] = (ctf__slice){(uint32_t)sd->samples, n};
                    sd->samples += n;
                } else if (k >= 0) {
                    sum[j].samples += n;
                }
                p += vals * elt;
                continue;
            }
            const int32_t nnz = (int32_t)rd32(buf + p);
            p += 4;
            if (nnz < 0 || (uint64_t)nnz * (elt + 4) > size - p ||
                (uint64_t)n * 4 > size - p - (uint64_t)nnz * (elt + 4))
                return corrupt(err, path, base + at,
                               "stream '%s': %u samples with %d entries "
                               "do not fit in the chunk",
                               s->name, n, (int)nnz);
            const unsigned char *vals = buf + p, *ind = vals + (size_t)nnz * elt,
                                *cnt = ind + (size_t)nnz * 4;
            if (sd) {
                const size_t first = sd->samples;
                memcpy((char *)sd->values + sd->nnz * elt, vals, (size_t)nnz * elt);
                int32_t *di = sd->indices + sd->nnz;
                for (int32_t e = 0; e < nnz; e++) {
                    const int32_t x = (int32_t)rd32(ind + 4 * (size_t)e);
                    if (x < 0 || (uint32_t)x >= s->dim)
                        return corrupt(err, path, base + (uint64_t)(ind - buf) + 4 * (size_t)e,
                                       "stream '%s': index %d is outside dimension %u", s->name,
                                       (int)x, s->dim);
                    di[e] = x;
                }
                int64_t at_nnz = (int64_t)sd->nnz;
                for (uint32_t t = 0; t < n; t++) {
                    const int32_t c = (int32_t)rd32(cnt + 4 * (size_t)t);
                    if (c < 0 || c > nnz || at_nnz + c > (int64_t)sd->nnz + nnz)
                        return corrupt(err, path, base + (uint64_t)(cnt - buf) + 4 * (size_t)t,
                                       "stream '%s': the sample entry counts do not add up to "
                                       "%d",
                                       s->name, (int)nnz);
                    at_nnz += c;
                    sd->indptr[sd->samples + t + 1] = at_nnz;
                }
                if (at_nnz != (int64_t)sd->nnz + nnz)
                    return corrupt(err, path, base + (uint64_t)(cnt - buf),
                                   "stream '%s': the "
                                   "sample entry counts do not add up to %d",
                                   s->name, (int)nnz);
                sd->nnz += (size_t)nnz;
                sd->samples += n;
                cd->slices[i * ns_cfg + (size_t)k] = (ctf__slice){(uint32_t)first, n};
            } else if (k >= 0) {
                sum[j].samples += n;
                sum[j].nnz += (uint64_t)nnz;
            }
            p += (uint64_t)nnz * (elt + 4) + (uint64_t)n * 4;
        }
    }
    if (p != size)
        return corrupt(err, path, base + p,
                       "%llu bytes of the chunk at byte %llu are left over "
                       "after its streams",
                       (unsigned long long)(size - p), (unsigned long long)base);
    return 0;
}

static void *take(ctf__bufpool *pool, size_t n, size_t elt, size_t *cap)
{
    size_t bytes = (n ? n : 1) * elt, got = 0;
    void *p = pool ? ctf__bufpool_take(pool, bytes, &got) : NULL;
    if (!p) {
        p = CTF_MALLOC(bytes);
        got = bytes;
    }
    *cap = p ? got / elt : 0;
    return p;
}

/* Decodes the chunk's bytes; with own (the caller's buffer holding them, own_cap bytes of
 * capacity) a dense float stream is a view of it and the chunk takes it over. */
static int decode(const ctf__parse_cfg *pc, const ctf_index *idx, size_t chunk, const char *bytes,
                  char **own, size_t own_cap, ctf__bufpool *pool, ctf__seqbuf *seqs,
                  ctf__chunk_data **out, ctf_error *err)
{
    const ctf__cbf *cbf = idx->cbf;
    const ctf__chunk *ch = &idx->chunks[chunk];
    const unsigned char *buf = (const unsigned char *)bytes;
    const size_t ns = pc->num_streams;
    stream_sum sum[CTF_MAX_STREAMS];
    *out = NULL;
    memset(sum, 0, sizeof sum);
    if (seqs) {
        if (seqs->cap < ch->num_seqs &&
            ctf__grow((void **)&seqs->p, &seqs->cap, ch->num_seqs, sizeof *seqs->p))
            return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE,
                             "out of memory reading chunk %zu of "
                             "%s",
                             chunk, idx->path);
    }
    int rc = lens_to_seqs(idx->path, ch, buf, ch->first_seq, seqs ? seqs->p : NULL, err);
    if (rc) return rc;
    if ((rc = walk(cbf, idx, ch, buf, sum, NULL, err))) return rc;
    for (size_t j = 0; j < cbf->num_streams; j++)
        if (cbf->to_cfg[j] >= 0 && sum[j].samples > UINT32_MAX)
            return ctf__fail(err, CTF_ELIMIT, (ctf__where){idx->path, 0, 0, (int64_t)ch->offset},
                             "the chunk at byte %llu holds more than 2^32 samples of one stream",
                             (unsigned long long)ch->offset);
    bool views = false;
    ctf__chunk_data *cd = CTF_CALLOC(1, sizeof *cd);
    if (!cd) goto oom;
    cd->chunk = chunk;
    cd->elt = (size_t)pc->precision;
    if (pool) {
        ctf__bufpool_ref(pool);
        cd->pool = pool;
    }
    cd->num_seqs = ch->num_seqs;
    cd->num_streams = ns;
    cd->streams = CTF_CALLOC(ns, sizeof *cd->streams);
    cd->slices = CTF_CALLOC(ch->num_seqs * ns, sizeof *cd->slices);
    cd->dropped = CTF_CALLOC(ch->num_seqs, 1);
    cd->dropped_samples = CTF_CALLOC(ns, sizeof *cd->dropped_samples);
    if (!cd->streams || !cd->slices || !cd->dropped || !cd->dropped_samples) goto oom;
    for (size_t j = 0; j < cbf->num_streams; j++) {
        const int k = cbf->to_cfg[j];
        if (k < 0) continue;
        ctf__stream_data *sd = &cd->streams[k];
        const ctf_stream_def *d = &pc->streams[k];
        sd->short_sample = -1;
        if (d->is_sparse) {
            sd->values = take(pool, (size_t)sum[j].nnz, cd->elt, &sd->values_cap);
            sd->indices = take(pool, (size_t)sum[j].nnz, sizeof *sd->indices, &sd->indices_cap);
            sd->indptr = take(pool, (size_t)sum[j].samples + 1, sizeof *sd->indptr,
                              &sd->indptr_cap);
            if (!sd->values || !sd->indices || !sd->indptr) goto oom;
            sd->indptr[0] = 0;
        } else if (own && cd->elt == 4) {
            /* A float row lies whole in the bytes; a double one may not be 8-byte aligned
             * against the others (the 4-byte counts between sequences), so it is copied. */
            sd->view = true;
            sd->dense_off_cap = (size_t)sum[j].samples + 1;
            sd->dense_off = CTF_MALLOC(sd->dense_off_cap * sizeof *sd->dense_off);
            if (!sd->dense_off) goto oom;
            sd->dense_off[0] = 0;
            views = true;
        } else {
            sd->values = take(pool, (size_t)(sum[j].samples * d->dim), cd->elt, &sd->values_cap);
            if (!sd->values) goto oom;
        }
    }
    /* A stream the configuration does not name is skipped; the slices of a configured stream
     * of a sequence are all set by the walk (every sequence has an entry per stream). */
    if ((rc = walk(cbf, idx, ch, buf, sum, cd, err))) {
        ctf__chunk_data_free(cd);
        return rc;
    }
    size_t total = sizeof *cd + cd->num_seqs * (ns * sizeof *cd->slices + 1);
    for (size_t k = 0; k < ns; k++) {
        const ctf__stream_data *sd = &cd->streams[k];
        total += sd->values_cap * cd->elt + sd->indices_cap * sizeof(int32_t) +
                 sd->indptr_cap * sizeof(int64_t) + sd->dense_off_cap * sizeof(size_t);
    }
    if (views) {
        /* The bytes are the chunk's now: freed (or pooled) with it, counted as its memory. */
        cd->raw = *own;
        cd->raw_cap = own_cap;
        *own = NULL;
        total += own_cap;
    }
    cd->bytes = total;
    ctf__chunk_data_shape(cd, pc);
    *out = cd;
    return 0;
oom:
    ctf__chunk_data_free(cd);
    return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory decoding chunk %zu of %s", chunk,
                     idx->path);
}

int ctf__cbf_decode(const ctf__parse_cfg *pc, const ctf_index *idx, size_t chunk, const char *bytes,
                    ctf__bufpool *pool, ctf__seqbuf *seqs, ctf__chunk_data **out, ctf_error *err)
{
    return decode(pc, idx, chunk, bytes, NULL, 0, pool, seqs, out, err);
}

int ctf__cbf_decode_owned(const ctf__parse_cfg *pc, const ctf_index *idx, size_t chunk,
                          char **bytes, size_t cap, ctf__bufpool *pool, ctf__seqbuf *seqs,
                          ctf__chunk_data **out, ctf_error *err)
{
    return decode(pc, idx, chunk, *bytes, bytes, cap, pool, seqs, out, err);
}

/*======================================================================
 * Public: a CBF file's streams
 *====================================================================*/

int ctf__cbf_file_streams(struct ctf__remote *rem, const char *path, bool *is_cbf,
                          ctf_stream_def **streams, size_t *num_streams, ctf_precision *precision,
                          ctf_error *err)
{
    *streams = NULL;
    *num_streams = 0;
    ctf__file_id id;
    ctf__io *io;
    int rc = ctf__io_stat(rem, path, &id, err);
    if (!rc) rc = ctf__io_open(rem, path, &id, &io, err);
    if (rc) return rc;
    bool yes = false;
    rc = ctf__cbf_sniff(io, id.size, &yes, err);
    if (is_cbf) {
        *is_cbf = yes;
        if (rc || !yes) {
            ctf__io_close(io);
            return rc;
        }
    }
    ctf__cbf cbf;
    memset(&cbf, 0, sizeof cbf);
    raw_chunk *raw = NULL;
    uint32_t nraw = 0;
    if (!rc) rc = read_header(io, path, id.size, &cbf, &raw, &nraw, err);
    ctf__io_close(io);
    CTF_FREE(raw);
    ctf_stream_def *v = NULL;
    if (!rc && !(v = CTF_CALLOC(cbf.num_streams, sizeof *v)))
        rc = ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    if (rc) {
        for (size_t i = 0; i < cbf.num_streams; i++) CTF_FREE(cbf.streams[i].name);
        CTF_FREE(cbf.streams);
        return rc;
    }
    for (size_t i = 0; i < cbf.num_streams; i++) {
        v[i].name = cbf.streams[i].name; /* the names move to the caller */
        v[i].dim = cbf.streams[i].dim;
        v[i].is_sparse = cbf.streams[i].sparse;
    }
    /* A file of mixed element types cannot be read at any one precision: the first decides,
     * and opening it says which stream disagrees. */
    if (precision) *precision = cbf.streams[0].precision;
    *streams = v;
    *num_streams = cbf.num_streams;
    CTF_FREE(cbf.streams);
    return 0;
}

int ctf_cbf_streams(const char *path, ctf_stream_def **streams, size_t *num_streams,
                    ctf_precision *precision, ctf_error *err)
{
    if (!path || !streams || !num_streams)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "ctf_cbf_streams: NULL argument");
    return ctf__cbf_file_streams(NULL, path, NULL, streams, num_streams, precision, err);
}

int ctf_cbf_streams_at(const char *path, const ctf_remote_options *remote, ctf_stream_def **streams,
                       size_t *num_streams, ctf_precision *precision, ctf_error *err)
{
    if (!path || !streams || !num_streams)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "ctf_cbf_streams_at: NULL argument");
    *streams = NULL;
    *num_streams = 0;
    if (!ctf__io_is_remote(path) || !remote)
        return ctf__cbf_file_streams(NULL, path, NULL, streams, num_streams, precision, err);
    ctf__remote *rem;
    int rc = ctf__remote_new(remote, &rem, err);
    if (rc) return rc;
    /* A pattern: the streams of the first object it lists (a corpus shares them). */
    char **list = NULL;
    size_t n = 0;
    if (ctf__io_is_pattern(path)) rc = ctf__io_glob(rem, path, &list, &n, err);
    if (!rc)
        rc = ctf__cbf_file_streams(rem, n ? list[0] : path, NULL, streams, num_streams, precision,
                                   err);
    for (size_t i = 0; i < n; i++) CTF_FREE(list[i]);
    CTF_FREE(list);
    ctf__remote_unref(rem);
    return rc;
}

void ctf_cbf_streams_free(ctf_stream_def *streams, size_t num_streams)
{
    if (!streams) return;
    for (size_t i = 0; i < num_streams; i++) CTF_FREE((char *)streams[i].name);
    CTF_FREE(streams);
}

/*======================================================================
 * A chunk that belongs to no file (the chunk store's)
 *====================================================================*/

int ctf__cbf_decode_bytes(const ctf__parse_cfg *pc, const char *path, const char *bytes,
                          uint64_t size, size_t num_seqs, uint64_t samples, ctf__bufpool *pool,
                          ctf__chunk_data **out, ctf_error *err)
{
    /* The chunk's own stream table: pc's streams, in order, at pc's precision. */
    ctf__cbf_stream st[CTF_MAX_STREAMS];
    ctf__cbf cbf = {.num_streams = pc->num_streams, .streams = st};
    for (size_t k = 0; k < pc->num_streams; k++) {
        const ctf_stream_def *d = &pc->streams[k];
        st[k] = (ctf__cbf_stream){(char *)d->name, d->is_sparse, pc->precision, (uint32_t)d->dim};
        cbf.to_cfg[k] = (int)k;
    }
    ctf__chunk ch = {.num_seqs = num_seqs, .size = size, .samples = samples};
    ctf_index idx;
    memset(&idx, 0, sizeof idx);
    idx.path = (char *)path;
    idx.chunks = &ch;
    idx.num_chunks = 1;
    idx.cbf = &cbf;
    if (size < (uint64_t)num_seqs * 4)
        return corrupt(err, path, 0, "%llu bytes cannot hold %zu sequence lengths",
                       (unsigned long long)size, num_seqs);
    return ctf__cbf_decode(pc, &idx, 0, bytes, pool, NULL, out, err);
}
