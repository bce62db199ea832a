/*
 * test_parse_buffers.c -- the stream buffers of a parsed chunk are pre-sized from bounds derived
 * from the chunk (parse.c, "Buffer pre-sizing"). These tests call ctf__parse_chunk directly on
 * an index built from a file and check:
 *  - data beyond a pre-sized bound (dense zero-filled samples past the bytes clamp) still parses
 *    exactly, through the doubling fallback;
 *  - sparse data packed as densely as the grammar allows ("i:v " = 4 bytes, the file's last
 *    entry without a delimiter) fits the bound and parses exactly;
 *  - after parsing, every capacity is within 2x of what is used (shrink), so cd->bytes stays
 *    honest for the residency counters; an unused buffer is freed.
 */
#include "reader/pipeline.h"
#include "test.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct parsed {
    ctf_index *idx;
    ctf__chunk_data *cd[512];
    size_t n;
} parsed;

/* Indexes `text` (written to `name`) with the given chunk size and parses every chunk. */
static int parse_all(const char *name, const char *text, const ctf_stream_def *s, size_t ns,
                     ctf_precision prec, uint64_t chunk_bytes, parsed *out)
{
    memset(out, 0, sizeof *out);
    const char *path = test_write_str(name, text);
    ctf_config cfg;
    ctf_config_init(&cfg);
    cfg.path = path;
    cfg.streams = s;
    cfg.num_streams = ns;
    cfg.chunk_size_bytes = chunk_bytes;
    ctf_error err;
    int rc = ctf_index_build(&cfg, &out->idx, &err);
    if (rc) {
        fprintf(stderr, "  index: %s\n", err.message);
        return rc;
    }
    ctf__parse_cfg pc = {.path = path,
                         .streams = s,
                         .num_streams = ns,
                         .precision = prec,
                         .line_mode = out->idx->line_mode,
                         .frame_mode = false,
                         .trace_level = 0};
    FILE *f = fopen(path, "rb");
    if (!f) return CTF_EIO;
    for (size_t c = 0; c < out->idx->num_chunks && c < 512; c++) {
        const ctf__chunk *ch = &out->idx->chunks[c];
        char *buf = malloc(ch->size + 16);
        if (!buf || fseek(f, (long)ch->offset, SEEK_SET) ||
            fread(buf, 1, ch->size, f) != ch->size) {
            free(buf);
            fclose(f);
            return CTF_EIO;
        }
        ctf__seqbuf sb = {0};
        rc = ctf__index_chunk_seqs(out->idx, c, buf, &sb, &err);
        if (!rc) rc = ctf__parse_chunk(&pc, out->idx, c, sb.p, buf, 1000, &out->cd[c], &err);
        CTF_FREE(sb.p);
        free(buf);
        if (rc) {
            fclose(f);
            return rc;
        }
        out->n++;
    }
    fclose(f);
    return 0;
}

static void parsed_free(parsed *p)
{
    for (size_t c = 0; c < p->n; c++) ctf__chunk_data_free(p->cd[c]);
    ctf_index_free(p->idx);
    memset(p, 0, sizeof *p);
}

/* Capacities within 2x of use (or exactly what a small buffer needs), and counted. */
static bool caps_honest(const ctf__chunk_data *cd, const ctf_stream_def *s, size_t elt)
{
    size_t bytes = 0;
    for (size_t k = 0; k < cd->num_streams; k++) {
        const ctf__stream_data *sd = &cd->streams[k];
        size_t used = s[k].is_sparse ? sd->nnz : ctf__dense_at(sd, s[k].dim, sd->samples);
        if (sd->values_cap > 2 * used + 16 || (used && sd->values_cap < used)) {
            fprintf(stderr, "  stream %zu: values cap %zu for %zu used\n", k, sd->values_cap, used);
            return false;
        }
        if (used == 0 && sd->values) return false;
        if (s[k].is_sparse) {
            if (sd->indices_cap > 2 * used + 16) return false;
            if (sd->indptr_cap > 2 * (sd->samples + 1) + 16) return false;
        }
        bytes += sd->values_cap * elt + sd->indices_cap * 4 + sd->indptr_cap * 8;
    }
    return cd->bytes >= bytes;
}

/* A dense stream of dim 40 given as "|a" alone on most lines (zero-filled, a warning each):
 * 40 values per 3-byte row if the zeros were stored; they are not (a chunk holds only the values
 * written), and the minibatches still get them (the reader tests compare delivered data). */
TEST(parse_buffers_dense_zero_fill_past_bound)
{
    enum { ROWS = 500, DIM = 40 };
    char *text = malloc(ROWS * 32);
    ASSERT(text != NULL);
    size_t n = 0;
    for (int i = 0; i < ROWS; i++)
        n += (size_t)sprintf(text + n, i % 50 == 0 ? "|a %d 1.5\n" : "|a\n", i);
    const ctf_stream_def s[] = {{.name = "a", .dim = DIM, .is_sparse = false}};
    parsed p;
    int rc = parse_all("buf_dense_zero.ctf", text, s, 1, CTF_FLOAT32, 1024, &p);
    free(text);
    ASSERT_EQ(rc, 0);
    ASSERT(p.n > 1);
    size_t row = 0;
    for (size_t c = 0; c < p.n; c++) {
        const ctf__chunk_data *cd = p.cd[c];
        const ctf__stream_data *sd = &cd->streams[0];
        ASSERT(!cd->fatal);
        ASSERT_EQ(cd->num_errors, 0);
        ASSERT_EQ(sd->samples, cd->num_seqs);
        for (size_t i = 0; i < sd->samples; i++, row++) {
            /* Short samples keep only their values (the zeros are added on delivery). */
            const float *v = (const float *)sd->values + ctf__dense_at(sd, DIM, i);
            const size_t len = ctf__dense_len(sd, DIM, i);
            ASSERT_EQ(len, row % 50 == 0 ? 2 : 0);
            for (size_t j = 0; j < len; j++) {
                float want = 0;
                if (row % 50 == 0 && j == 0) want = (float)row;
                if (row % 50 == 0 && j == 1) want = 1.5f;
                ASSERT(v[j] == want);
            }
        }
        ASSERT(caps_honest(cd, s, 4));
    }
    ASSERT_EQ(row, ROWS);
    parsed_free(&p);
}

/* Two sparse streams packed as tightly as the grammar allows, the last entry of the file
 * without a newline; double precision; several chunk sizes. */
TEST(parse_buffers_sparse_tight_and_shrunk)
{
    enum { ROWS = 300 };
    char *text = malloc(ROWS * 64);
    ASSERT(text != NULL);
    size_t n = 0;
    for (int i = 0; i < ROWS; i++)
        n += (size_t)sprintf(text + n, "|x 0:1 1:2 2:3 3:%d|y 4:5%s", i % 10,
                             i + 1 < ROWS ? " 5:6\n" : " 6:7");
    const ctf_stream_def s[] = {{.name = "x", .dim = 8, .is_sparse = true},
                                {.name = "y", .dim = 8, .is_sparse = true}};
    const uint64_t chunks[] = {1, 100, 4096, 1 << 20};
    for (size_t t = 0; t < sizeof chunks / sizeof *chunks; t++) {
        parsed p;
        ASSERT_EQ(parse_all("buf_sparse.ctf", text, s, 2, CTF_FLOAT64, chunks[t], &p), 0);
        size_t row = 0;
        for (size_t c = 0; c < p.n; c++) {
            const ctf__chunk_data *cd = p.cd[c];
            ASSERT(!cd->fatal);
            ASSERT_EQ(cd->num_errors, 0);
            const ctf__stream_data *x = &cd->streams[0], *y = &cd->streams[1];
            ASSERT_EQ(x->samples, cd->num_seqs);
            ASSERT_EQ(x->nnz, 4 * x->samples);
            ASSERT_EQ(y->nnz, 2 * y->samples);
            for (size_t i = 0; i < x->samples; i++, row++) {
                ASSERT_EQ(x->indptr[i], (int64_t)(4 * i));
                for (int j = 0; j < 4; j++) {
                    ASSERT_EQ(x->indices[4 * i + (size_t)j], j);
                    double want = j < 3 ? j + 1 : (double)(row % 10);
                    ASSERT(((const double *)x->values)[4 * i + (size_t)j] == want);
                }
                ASSERT_EQ(y->indices[2 * i + 1], row + 1 < ROWS ? 5 : 6);
                ASSERT(((const double *)y->values)[2 * i + 1] == (row + 1 < ROWS ? 6 : 7));
            }
            ASSERT_EQ(x->indptr[x->samples], (int64_t)x->nnz);
            ASSERT(caps_honest(cd, s, 8));
        }
        ASSERT_EQ(row, ROWS);
        parsed_free(&p);
    }
    free(text);
}

/* A stream on a few rows only: its buffer must not keep the rows * dim bound. */
TEST(parse_buffers_sparse_presence_shrinks)
{
    enum { ROWS = 400, DIM = 16 };
    char *text = malloc(ROWS * 96);
    ASSERT(text != NULL);
    size_t n = 0;
    for (int i = 0; i < ROWS; i++)
        n += (size_t)sprintf(text + n, "%d |f 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16%s\n", i / 20,
                             i % 20 == 0 ? " |l 1 0 1 0 1 0 1 0 1 0 1 0 1 0 1 0 |s 3:1" : "");
    const ctf_stream_def s[] = {{.name = "f", .dim = DIM, .is_sparse = false},
                                {.name = "l", .dim = DIM, .is_sparse = false},
                                {.name = "s", .dim = 4, .is_sparse = true}};
    parsed p;
    int rc = parse_all("buf_presence.ctf", text, s, 3, CTF_FLOAT32, 2048, &p);
    free(text);
    ASSERT_EQ(rc, 0);
    for (size_t c = 0; c < p.n; c++) {
        const ctf__chunk_data *cd = p.cd[c];
        ASSERT(!cd->fatal);
        ASSERT_EQ(cd->streams[1].samples, cd->num_seqs);
        ASSERT_EQ(cd->streams[0].samples, 20 * cd->num_seqs);
        ASSERT(caps_honest(cd, s, 4));
    }
    parsed_free(&p);
}

/* The buffer pool (parse.c): a chunk freed gives its stream buffers back and the next chunk of
 * about the same size parses into them (no new pages to fault in); the values are the same as
 * without a pool; a chunk may outlive the pool's creator (reference counted). */
TEST(parse_buffers_pool_reuses_and_outlives)
{
    char *text = malloc(200000);
    ASSERT(text);
    size_t n = 0;
    for (int i = 0; i < 2000; i++)
        n += (size_t)snprintf(text + n, 200000 - n, "|x %d.5 %d -%d.25 |y %d:1 %d:%d.5\n", i, i % 7,
                              i % 13, i % 50, 50 + i % 40, i % 9);
    static const ctf_stream_def s[2] = {{"x", "x", 3, false, false}, {"y", "y", 100, true, false}};
    const char *path = test_write_str("pool.ctf", text);
    free(text);
    ctf_config cfg;
    ctf_config_init(&cfg);
    cfg.path = path;
    cfg.streams = s;
    cfg.num_streams = 2;
    cfg.chunk_size_bytes = 4096;
    ctf_index *idx = NULL;
    ctf_error err;
    ASSERT_OK(ctf_index_build(&cfg, &idx, &err), &err);
    ASSERT(idx->num_chunks > 8);
    ctf__bufpool *pool = ctf__bufpool_create(8);
    ASSERT(pool);
    ctf__parse_cfg plain = {.path = path,
                            .streams = s,
                            .num_streams = 2,
                            .precision = CTF_FLOAT32,
                            .line_mode = idx->line_mode};
    ctf__parse_cfg pooled = plain;
    pooled.pool = pool;
    FILE *f = fopen(path, "rb");
    ASSERT(f);
    size_t reused = 0;
    const void *prev_values = NULL;
    ctf__chunk_data *last = NULL;
    for (size_t c = 0; c < idx->num_chunks; c++) {
        const ctf__chunk *ch = &idx->chunks[c];
        char *buf = malloc(ch->size + 16);
        ASSERT(buf);
        ASSERT(!fseek(f, (long)ch->offset, SEEK_SET) && fread(buf, 1, ch->size, f) == ch->size);
        ctf__chunk_data *a = NULL, *b = NULL;
        ctf__seqbuf sb = {0};
        ASSERT_OK(ctf__index_chunk_seqs(idx, c, buf, &sb, &err), &err);
        ASSERT_OK(ctf__parse_chunk(&plain, idx, c, sb.p, buf, 0, &a, &err), &err);
        ASSERT_OK(ctf__parse_chunk(&pooled, idx, c, sb.p, buf, 0, &b, &err), &err);
        CTF_FREE(sb.p);
        free(buf);
        for (size_t k = 0; k < 2; k++) {
            const ctf__stream_data *x = &a->streams[k], *y = &b->streams[k];
            ASSERT_U64_EQ(x->samples, y->samples);
            ASSERT_U64_EQ(x->nnz, y->nnz);
            size_t nv = s[k].is_sparse ? x->nnz : x->samples * s[k].dim;
            ASSERT(!memcmp(x->values, y->values, nv * 4));
            if (s[k].is_sparse) {
                ASSERT(!memcmp(x->indices, y->indices, x->nnz * sizeof *x->indices));
                ASSERT(!memcmp(x->indptr, y->indptr, (x->samples + 1) * sizeof *x->indptr));
            }
        }
        if (b->streams[0].values == prev_values) reused++;
        prev_values = b->streams[0].values;
        ctf__chunk_data_free(a);
        if (c + 1 < idx->num_chunks) {
            ctf__chunk_data_free(b); /* back to the pool before the next chunk */
        } else {
            last = b;
        }
    }
    fclose(f);
    /* Every chunk but the first (and a short last one) reuses the previous chunk's buffer. */
    ASSERT(reused + 2 >= idx->num_chunks);
    ctf__bufpool_unref(pool); /* the creator lets go first: the last chunk keeps the pool alive */
    ASSERT(last->streams[0].samples > 0);
    ctf__chunk_data_free(last);
    ctf_index_free(idx);
}
