/*
 * test_cbf.c -- CNTK's binary format: ctf_cbf_write (CTF -> CBF) and reading CBF files through
 * the ordinary reader. A CBF file written from a CTF file must deliver the text's sequences
 * value for value, at both precisions, in file order and randomized, over workers, threads and
 * a checkpoint restore; damaged files must be clear errors.
 */
#include "reader/pipeline.h"
#include "test.h"
#include "test_bytes.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t rnd(uint64_t *s) /* splitmix64 */
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* A CTF text of n sequences: dense x (dim 3) on every line, sparse y (dim 50, unsorted
 * indices) on the first line and some others, sequences of 1..4 lines (the first `single` of
 * one line each). */
static char *make_ctf_from(size_t n, uint64_t seed, size_t single)
{
    size_t cap = n * 400 + 64, len = 0;
    char *t = malloc(cap);
    if (!t) abort();
    for (size_t s = 0; s < n; s++) {
        const size_t lines = s < single ? 1 : 1 + rnd(&seed) % 4;
        for (size_t l = 0; l < lines; l++) {
            len += (size_t)snprintf(t + len, cap - len, "%zu |x", 7 * s + 3);
            for (int d = 0; d < 3; d++)
                len += (size_t)snprintf(t + len, cap - len, " %.7g",
                                        (double)(int64_t)(rnd(&seed) % 2000001 - 1000000) / 997.0);
            if (l == 0 || rnd(&seed) % 3) {
                len += (size_t)snprintf(t + len, cap - len, " |y");
                const int k = (int)(rnd(&seed) % 4);
                for (int e = 0; e < k; e++)
                    len += (size_t)snprintf(t + len, cap - len, " %d:%.5g", 49 - 13 * e,
                                            (double)(rnd(&seed) % 1000) / 7.0);
            }
            t[len++] = '\n';
        }
    }
    t[len] = 0;
    return t;
}

static char *make_ctf(size_t n, uint64_t seed) { return make_ctf_from(n, seed, 0); }

static const ctf_stream_def ctf_streams[2] = {
    {.name = "a", .alias = "x", .dim = 3},
    {.name = "b", .alias = "y", .dim = 50, .is_sparse = true},
};

/* Serializes sequence i of mb without its key (the text's keys are ids, CBF's positions):
 * per stream its length, then dense values, or per sample its entries sorted by index (CBF
 * stores them sorted, the text reader delivers them in the text's order). */
static void append_values(bytes *b, const ctf_minibatch *mb, size_t i)
{
    for (size_t k = 0; k < ctf_minibatch_num_streams(mb); k++) {
        ctf_stream_view v;
        if (ctf_minibatch_stream(mb, k, &v)) abort();
        size_t first = 0, elt = (size_t)v.precision;
        for (size_t j = 0; j < i; j++) first += v.lengths[j];
        uint32_t len = v.lengths[i];
        b_add(b, &len, sizeof len);
        if (!v.is_sparse) {
            b_add(b, (const char *)v.values + first * v.dim * elt, (size_t)len * v.dim * elt);
            continue;
        }
        for (size_t s = first; s < first + len; s++) {
            int64_t lo = v.indptr[s], hi = v.indptr[s + 1], cnt = hi - lo;
            b_add(b, &cnt, sizeof cnt);
            bool *done = calloc((size_t)cnt + 1, 1);
            for (int64_t n = 0; n < cnt; n++) { /* selection by index, stable */
                int64_t best = -1;
                for (int64_t x = 0; x < cnt; x++)
                    if (!done[x] && (best < 0 || v.indices[lo + x] < v.indices[lo + best]))
                        best = x;
                done[best] = true;
                b_add(b, v.indices + lo + best, sizeof *v.indices);
                b_add(b, (const char *)v.values + (size_t)(lo + best) * elt, elt);
            }
            free(done);
        }
    }
}

/* Every sequence, in delivery order, minibatches of k samples; keys into *keys when not NULL.
 * @return : sequences, or -1. */
static long read_values(const ctf_config *c, uint64_t k, bytes *out, bytes *keys)
{
    ctf_reader *r;
    ctf_error e;
    if (ctf_reader_open(c, &r, &e)) {
        fprintf(stderr, "open: %s\n", e.message);
        return -1;
    }
    long n = 0;
    for (;;) {
        ctf_minibatch *mb;
        if (ctf_reader_next(r, k, &mb)) {
            fprintf(stderr, "next: %s\n", ctf_reader_error(r)->message);
            ctf_reader_free(r);
            return -1;
        }
        if (!mb) break;
        for (size_t i = 0; i < ctf_minibatch_num_sequences(mb); i++, n++) {
            append_values(out, mb, i);
            if (keys) b_add(keys, &ctf_minibatch_keys(mb)[i], 8);
        }
        ctf_minibatch_free(mb);
    }
    ctf_reader_free(r);
    return n;
}

static void base_cfg(ctf_config *c, const char *path, const ctf_stream_def *s, size_t ns,
                     ctf_precision p)
{
    ctf_config_init(c);
    c->path = path;
    c->streams = s;
    c->num_streams = ns;
    c->precision = p;
    c->randomize = false;
    c->max_sweeps = 1;
    c->num_threads = 2;
}

/* Writes the text and its CBF twin (chunks of chunk bytes); paths into ctf/cbf (64 bytes). */
static int make_pair(size_t n, uint64_t seed, uint64_t chunk, ctf_precision p, char *ctf, char *cbf,
                     const char *tag)
{
    char *t = make_ctf(n, seed);
    char name[64];
    snprintf(name, sizeof name, "cbf_%s.ctf", tag);
    snprintf(ctf, 256, "%s", test_write_file(name, t, strlen(t)));
    free(t);
    snprintf(cbf, 256, "%s/cbf_%s.bin", test_tmpdir(), tag);
    ctf_config c;
    base_cfg(&c, ctf, ctf_streams, 2, CTF_FLOAT32);
    ctf_error e;
    ctf_cbf_write_result res;
    int rc = ctf_cbf_write(&c, cbf, chunk, p, &res, &e);
    if (rc) fprintf(stderr, "ctf_cbf_write: %s\n", e.message);
    return rc;
}

TEST(cbf_round_trip_both_precisions)
{
    for (int pi = 0; pi < 2; pi++) {
        const ctf_precision p = pi ? CTF_FLOAT64 : CTF_FLOAT32;
        for (uint64_t chunk = 200; chunk <= (1u << 20); chunk *= 64) {
            char ctf[256], cbf[256];
            ASSERT_EQ(make_pair(300, 11 + (uint64_t)pi, chunk, p, ctf, cbf, "rt"), 0);
            ctf_stream_def *fs;
            size_t nfs;
            ctf_precision fp;
            ctf_error e;
            ASSERT_EQ(ctf_cbf_streams(cbf, &fs, &nfs, &fp, &e), 0);
            ASSERT_EQ(nfs, 2);
            ASSERT_STR_EQ(fs[0].name, "a");
            ASSERT_STR_EQ(fs[1].name, "b");
            ASSERT(fs[1].is_sparse && !fs[0].is_sparse);
            ASSERT_EQ(fs[1].dim, 50);
            ASSERT_EQ(fp, p);
            ctf_config a, b;
            base_cfg(&a, ctf, ctf_streams, 2, p);
            base_cfg(&b, cbf, fs, nfs, p);
            bytes va = {0}, vb = {0}, keys = {0};
            ASSERT_EQ(read_values(&a, 64, &va, NULL), 300);
            ASSERT_EQ(read_values(&b, 64, &vb, &keys), 300);
            ASSERT(b_eq(&va, &vb));
            for (uint64_t i = 0; i < 300; i++) ASSERT_U64_EQ(((uint64_t *)keys.p)[i], i);
            ctf_index *idx;
            ASSERT_EQ(ctf_index_build(&b, &idx, &e), 0);
            ctf_index_info info;
            ctf_index_get_info(idx, &info);
            ASSERT_EQ(info.sequences, 300);
            if (chunk == 200) ASSERT(info.chunks > 10);
            if (chunk > 12800) ASSERT_EQ(info.chunks, 1);
            ctf_index_free(idx);
            b_free(&va);
            b_free(&vb);
            b_free(&keys);
            ctf_cbf_streams_free(fs, nfs);
        }
    }
}

/* Randomized reading over CBF chunks: the same whatever the threads and minibatch size, each
 * worker's share disjoint and together the data; a restore continues exactly. */
TEST(cbf_randomized_workers_restore)
{
    char ctf[256], cbf[256];
    ASSERT_EQ(make_pair(400, 5, 600, CTF_FLOAT32, ctf, cbf, "rnd"), 0);
    ctf_stream_def *fs;
    size_t nfs;
    ctf_error e;
    ASSERT_EQ(ctf_cbf_streams(cbf, &fs, &nfs, NULL, &e), 0);
    ctf_config c;
    base_cfg(&c, cbf, fs, nfs, CTF_FLOAT32);
    c.randomize = true;
    c.randomization_window = 3;
    c.max_sweeps = 2;
    bytes r1 = {0}, r2 = {0};
    c.num_threads = 0;
    ASSERT_EQ(read_values(&c, 16, &r1, NULL), 800);
    c.num_threads = 3;
    ASSERT_EQ(read_values(&c, 7, &r2, NULL), 800);
    ASSERT(b_eq(&r1, &r2));
    /* Two workers share the data. */
    bytes w0 = {0}, w1 = {0};
    c.num_workers = 2;
    c.worker_rank = 0;
    long n0 = read_values(&c, 16, &w0, NULL);
    c.worker_rank = 1;
    long n1 = read_values(&c, 16, &w1, NULL);
    ASSERT_EQ(n0 + n1, 800);
    ASSERT(n0 > 300 && n1 > 300);
    c.num_workers = 1;
    c.worker_rank = 0;
    /* Save after 5 minibatches, restore into a new reader: the rest is the same. */
    ctf_reader *r, *q;
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), 0);
    bytes head = {0}, tail = {0}, rest = {0};
    for (int i = 0; i < 5; i++) {
        ctf_minibatch *mb;
        ASSERT_EQ(ctf_reader_next(r, 16, &mb), 0);
        for (size_t s = 0; s < ctf_minibatch_num_sequences(mb); s++) append_values(&head, mb, s);
        ctf_minibatch_free(mb);
    }
    char state[4096];
    size_t len;
    ASSERT_EQ(ctf_reader_save_state(r, state, sizeof state, &len), 0);
    ASSERT(strstr(state, "fingerprint") || len > 0);
    for (;;) {
        ctf_minibatch *mb;
        ASSERT_EQ(ctf_reader_next(r, 16, &mb), 0);
        if (!mb) break;
        for (size_t s = 0; s < ctf_minibatch_num_sequences(mb); s++) append_values(&tail, mb, s);
        ctf_minibatch_free(mb);
    }
    ctf_reader_free(r);
    ASSERT_EQ(ctf_reader_open(&c, &q, &e), 0);
    ASSERT_EQ(ctf_reader_restore_state(q, state, len), 0);
    for (;;) {
        ctf_minibatch *mb;
        ASSERT_EQ(ctf_reader_next(q, 16, &mb), 0);
        if (!mb) break;
        for (size_t s = 0; s < ctf_minibatch_num_sequences(mb); s++) append_values(&rest, mb, s);
        ctf_minibatch_free(mb);
    }
    ctf_reader_free(q);
    ASSERT(b_eq(&tail, &rest));
    ASSERT_EQ(head.n + tail.n, r1.n);
    /* A state of the CBF file does not restore into a reader of its text twin. */
    ctf_config t;
    base_cfg(&t, ctf, ctf_streams, 2, CTF_FLOAT32);
    t.randomize = true;
    t.randomization_window = 3;
    t.max_sweeps = 2;
    ASSERT_EQ(ctf_reader_open(&t, &q, &e), 0);
    ASSERT(ctf_reader_restore_state(q, state, len) != 0);
    ctf_reader_free(q);
    b_free(&r1);
    b_free(&r2);
    b_free(&w0);
    b_free(&w1);
    b_free(&head);
    b_free(&tail);
    b_free(&rest);
    ctf_cbf_streams_free(fs, nfs);
}

/* Streams are found by their name in the file (alias), renamed by name; kind, dim and
 * precision must match; a missing stream names the file's streams. */
TEST(cbf_stream_checks)
{
    char ctf[256], cbf[256];
    ASSERT_EQ(make_pair(20, 9, 1 << 20, CTF_FLOAT32, ctf, cbf, "chk"), 0);
    ctf_config c;
    ctf_reader *r;
    ctf_error e;
    const ctf_stream_def renamed[1] = {
        {.name = "labels", .alias = "b", .dim = 50, .is_sparse = true}};
    base_cfg(&c, cbf, renamed, 1, CTF_FLOAT32);
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), 0);
    ctf_minibatch *mb;
    ASSERT_EQ(ctf_reader_next(r, 1000, &mb), 0);
    ASSERT_EQ(ctf_minibatch_num_streams(mb), 1);
    ASSERT_EQ(ctf_minibatch_num_sequences(mb), 20);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    const ctf_stream_def missing[1] = {{.name = "z", .dim = 3}};
    base_cfg(&c, cbf, missing, 1, CTF_FLOAT32);
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EINVAL);
    ASSERT(strstr(e.message, "no stream 'z'") && strstr(e.message, "a, b"));
    const ctf_stream_def wrong_dim[1] = {{.name = "a", .dim = 4}};
    base_cfg(&c, cbf, wrong_dim, 1, CTF_FLOAT32);
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EINVAL);
    ASSERT(strstr(e.message, "dimension 3"));
    const ctf_stream_def dense_a[1] = {{.name = "a", .dim = 3}};
    base_cfg(&c, cbf, dense_a, 1, CTF_FLOAT64);
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EINVAL);
    ASSERT(strstr(e.message, "precision"));
    /* The writer never writes over its input. */
    base_cfg(&c, ctf, ctf_streams, 2, CTF_FLOAT32);
    ASSERT_EQ(ctf_cbf_write(&c, ctf, 1 << 20, CTF_FLOAT32, NULL, &e), CTF_EINVAL);
    ASSERT(strstr(e.message, "input"));
}

/* Every truncation and every single-byte change of a small file opens and reads to the end or
 * fails cleanly (never a crash or a hang; under the sanitizers, no bad access). */
TEST(cbf_damaged_files)
{
    char ctf[256], cbf[256];
    ASSERT_EQ(make_pair(12, 3, 300, CTF_FLOAT32, ctf, cbf, "dmg"), 0);
    FILE *f = fopen(cbf, "rb");
    ASSERT(f);
    unsigned char good[8192];
    size_t n = fread(good, 1, sizeof good, f);
    fclose(f);
    ASSERT(n > 100 && n < sizeof good);
    ctf_stream_def *fs;
    size_t nfs;
    ctf_error e;
    ASSERT_EQ(ctf_cbf_streams(cbf, &fs, &nfs, NULL, &e), 0);
    unsigned char bad[8192];
    size_t failures = 0, cases = 0;
    for (size_t len = 0; len <= n; len += len < 40 || n - len < 40 ? 1 : 13) {
        for (size_t at = 0; at <= len; at += at < 16 || len - at < 40 ? 1 : 11) {
            memcpy(bad, good, len);
            if (at < len)
                bad[at] ^= (unsigned char)(0x41 + at % 7);
            else if (len == n)
                continue;
            const char *p = test_write_file("cbf_dmg_case.bin", bad, len);
            ctf_config c;
            base_cfg(&c, p, fs, nfs, CTF_FLOAT32);
            c.num_threads = 0;
            bytes v = {0};
            ctf_reader *r;
            cases++;
            if (ctf_reader_open(&c, &r, &e)) {
                failures++;
                ASSERT(e.code != CTF_OK && e.message[0]);
                continue;
            }
            for (int i = 0; i < 1000; i++) {
                ctf_minibatch *mb;
                if (ctf_reader_next(r, 8, &mb)) {
                    failures++;
                    ASSERT(ctf_reader_error(r)->message[0]);
                    break;
                }
                if (!mb) break;
                ctf_minibatch_free(mb);
            }
            ctf_reader_free(r);
            b_free(&v);
        }
    }
    ASSERT(cases > 500);
    ASSERT(failures > cases / 2);
    /* Clear messages for the commonest damage. */
    const char *p = test_write_file("cbf_dmg_case.bin", good, n - 1);
    ctf_config c;
    base_cfg(&c, p, fs, nfs, CTF_FLOAT32);
    ctf_reader *r;
    ASSERT(ctf_reader_open(&c, &r, &e) != 0);
    ASSERT(strstr(e.message, "not a valid CBF file"));
    memcpy(bad, good, n);
    bad[8] = 2; /* version */
    p = test_write_file("cbf_dmg_case.bin", bad, n);
    base_cfg(&c, p, fs, nfs, CTF_FLOAT32);
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), CTF_EPARSE);
    ASSERT(strstr(e.message, "version 2"));
    ctf_cbf_streams_free(fs, nfs);
}

/* CNTK's configuration forms of the binary reader: readerType = "CNTKBinaryReader" (streams
 * renamed by `original`) and a CNTKBinaryFormatDeserializer, with every stream of the file when
 * input is left out. */
TEST(cbf_configuration_files)
{
    char ctf[256], cbf[256];
    ASSERT_EQ(make_pair(30, 21, 1 << 20, CTF_FLOAT32, ctf, cbf, "cfg"), 0);
    char text[1024];
    snprintf(text, sizeof text,
             "train = [ reader = [ readerType = \"CNTKBinaryReader\"; file = \"%s\"; "
             "randomize = false; input = [ labels = [ original = \"b\" ]; a = [] ] ] ]\n",
             cbf);
    ctf_bsconfig *doc;
    ctf_error e;
    ASSERT_EQ(ctf_bsconfig_parse(text, strlen(text), "t.cntk", NULL, NULL, 0, &doc, &e), 0);
    ctf_config c;
    ctf_config_init(&c);
    ASSERT_EQ(ctf_bsconfig_apply(doc, &c, &e), 0);
    ASSERT_EQ(c.num_streams, 2);
    ASSERT_STR_EQ(c.streams[0].name, "labels");
    ASSERT_STR_EQ(c.streams[0].alias, "b");
    c.max_sweeps = 1;
    bytes v1 = {0}, v2 = {0};
    ASSERT_EQ(read_values(&c, 100, &v1, NULL), 30);
    ctf_bsconfig_free(doc);
    /* The text twin with the streams in the same order. */
    const ctf_stream_def swapped[2] = {ctf_streams[1], ctf_streams[0]};
    ctf_config t;
    base_cfg(&t, ctf, swapped, 2, CTF_FLOAT32);
    ASSERT_EQ(read_values(&t, 100, &v2, NULL), 30);
    ASSERT(b_eq(&v1, &v2));
    snprintf(text, sizeof text,
             "r = [ reader = [ deserializers = ( [ type = \"CNTKBinaryFormatDeserializer\"; "
             "file = \"%s\" ] ); randomize = false ] ]\n",
             cbf);
    ASSERT_EQ(ctf_bsconfig_parse(text, strlen(text), "t.cntk", NULL, NULL, 0, &doc, &e), 0);
    ctf_config_init(&c);
    ASSERT_EQ(ctf_bsconfig_apply(doc, &c, &e), 0);
    ASSERT_EQ(c.num_streams, 0);
    c.max_sweeps = 1;
    ctf_reader *r;
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), 0);
    ctf_minibatch *mb;
    ASSERT_EQ(ctf_reader_next(r, 1000, &mb), 0);
    ASSERT_EQ(ctf_minibatch_num_streams(mb), 2);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
    ctf_bsconfig_free(doc);
    /* The text reader's parameters stay refused for other reader types. */
    snprintf(text, sizeof text, "r = [ reader = [ readerType = \"HTKMLFReader\"; file = \"x\" ] ]");
    ASSERT_EQ(ctf_bsconfig_parse(text, strlen(text), "t.cntk", NULL, NULL, 0, &doc, &e), 0);
    ctf_config_init(&c);
    ASSERT_EQ(ctf_bsconfig_apply(doc, &c, &e), CTF_EINVAL);
    ASSERT(strstr(e.message, "CNTKBinaryReader"));
    ctf_bsconfig_free(doc);
    b_free(&v1);
    b_free(&v2);
}

/* A checkpoint fingerprints the CBF file: a state does not restore into a reader of the file
 * written again with other chunks; a file replaced under an open reader is CTF_ECHANGED. */
TEST(cbf_fingerprint_and_changed_file)
{
    char ctf[256], cbf[256];
    ASSERT_EQ(make_pair(80, 31, 500, CTF_FLOAT32, ctf, cbf, "fp"), 0);
    ctf_stream_def *fs;
    size_t nfs;
    ctf_error e;
    ASSERT_EQ(ctf_cbf_streams(cbf, &fs, &nfs, NULL, &e), 0);
    ctf_config c;
    base_cfg(&c, cbf, fs, nfs, CTF_FLOAT32);
    c.randomize = true;
    c.randomization_window = 2;
    c.num_threads = 0;
    ctf_reader *r;
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), 0);
    ctf_minibatch *mb;
    ASSERT_EQ(ctf_reader_next(r, 10, &mb), 0);
    ctf_minibatch_free(mb);
    char state[4096];
    size_t len;
    ASSERT_EQ(ctf_reader_save_state(r, state, sizeof state, &len), 0);
    ctf_reader_free(r);
    /* The same data in other chunks: another file as far as a checkpoint is concerned. */
    ctf_config t;
    base_cfg(&t, ctf, ctf_streams, 2, CTF_FLOAT32);
    ASSERT_EQ(ctf_cbf_write(&t, cbf, 900, CTF_FLOAT32, NULL, &e), 0);
    ASSERT_EQ(ctf_reader_open(&c, &r, &e), 0);
    ASSERT_EQ(ctf_reader_restore_state(r, state, len), CTF_ESTATE);
    /* Replaced under the open reader (a new size): the next load says so. */
    ASSERT_EQ(ctf_cbf_write(&t, cbf, 300, CTF_FLOAT32, NULL, &e), 0);
    int rc = 0;
    for (int i = 0; i < 100 && !rc; i++) {
        rc = ctf_reader_next(r, 10, &mb);
        if (!rc && !mb) break;
        if (!rc) ctf_minibatch_free(mb);
    }
    ASSERT_EQ(rc, CTF_ECHANGED);
    ctf_reader_free(r);
    ctf_cbf_streams_free(fs, nfs);
}

/* Chunk ch of an open CBF file (fd), read into *m (a buffer of its own) and decoded twice: from
 * the bytes (*a) and as the owned buffer (*b, which takes *m over where it views it). @return :
 * 0, or -1 (e says why). */
static int decode_both(int fd, const ctf_index *idx, size_t ch, const ctf__parse_cfg *pc, char **m,
                       ctf__chunk_data **a, ctf__chunk_data **b, ctf_error *e)
{
    const ctf__chunk *k = &idx->chunks[ch];
    *m = CTF_MALLOC((size_t)k->size);
    if (!*m) return -1;
    if (ctf__file_pread(fd, pc->path, *m, (size_t)k->size, k->offset, e)) return -1;
    if (ctf__cbf_decode(pc, idx, ch, *m, NULL, NULL, a, e)) return -1;
    if (ctf__cbf_decode_owned(pc, idx, ch, m, (size_t)k->size, NULL, NULL, b, e)) {
        ctf__chunk_data_free(*a);
        return -1;
    }
    return 0;
}

/* A chunk's bytes are read once into a buffer the chunk takes over: a dense float stream is a
 * view of those bytes, not a second copy (a double one, whose rows the 4-byte counts may
 * misalign, and a sparse one are copied), and the values are those the copying decoder makes;
 * the chunk counts the buffer in its memory. */
TEST(cbf_owned_chunks_are_views)
{
    for (int pi = 0; pi < 2; pi++) {
        const ctf_precision p = pi ? CTF_FLOAT64 : CTF_FLOAT32;
        const size_t elt = (size_t)p;
        char ctf[256], cbf[256];
        ASSERT_EQ(make_pair(200, 41 + (uint64_t)pi, 700, p, ctf, cbf, "view"), 0);
        ctf_stream_def *fs;
        size_t nfs;
        ctf_error e;
        ASSERT_EQ(ctf_cbf_streams(cbf, &fs, &nfs, NULL, &e), 0);
        ctf_config c;
        base_cfg(&c, cbf, fs, nfs, p);
        ctf_index *idx;
        ASSERT_EQ(ctf_index_build(&c, &idx, &e), 0);
        ASSERT(idx->num_chunks > 3);
        const ctf__parse_cfg pc = {.path = cbf, .streams = fs, .num_streams = nfs, .precision = p};
        int fd = ctf__file_open(cbf, &e);
        ASSERT(fd >= 0);
        for (size_t ch = 0; ch < idx->num_chunks; ch++) {
            const ctf__chunk *k = &idx->chunks[ch];
            char *m;
            ctf__chunk_data *a, *b;
            ASSERT_EQ(decode_both(fd, idx, ch, &pc, &m, &a, &b, &e), 0);
            const ctf__stream_data *da = &a->streams[0], *db = &b->streams[0];
            const bool view = p == CTF_FLOAT32;
            ASSERT_EQ(db->view, view);
            ASSERT(!b->streams[1].view && !da->view);
            ASSERT_EQ(m == NULL, view); /* taken over by the chunk */
            ASSERT_EQ(b->raw != NULL, view);
            if (view) {
                const char *v = db->values;
                ASSERT(v >= b->raw && v < b->raw + k->size);
                ASSERT(b->bytes >= b->raw_cap && b->raw_cap >= k->size);
            }
            ASSERT_EQ(da->samples, db->samples);
            const size_t dim = fs[0].dim;
            for (size_t i = 0; i < da->samples; i++) {
                ASSERT_EQ(ctf__dense_len(db, dim, i), dim);
                ASSERT(!memcmp((const char *)da->values + ctf__dense_at(da, dim, i) * elt,
                               (const char *)db->values + ctf__dense_at(db, dim, i) * elt,
                               dim * elt));
            }
            for (size_t i = 0; i < a->num_seqs * nfs; i++) {
                ASSERT_EQ(a->slices[i].first, b->slices[i].first);
                ASSERT_EQ(a->slices[i].count, b->slices[i].count);
            }
            ASSERT_EQ(a->streams[1].nnz, b->streams[1].nnz);
            ctf__chunk_data_free(a);
            ctf__chunk_data_free(b);
            CTF_FREE(m);
        }
        /* A range that is not in the file (any more) is a changed file, not a fault. */
        char tail[8];
        ASSERT_EQ(ctf__file_pread(fd, cbf, tail, 8, idx->file.size - 4, &e), CTF_ECHANGED);
        ctf__file_close(fd);
        ctf_index_free(idx);
        ctf_cbf_streams_free(fs, nfs);
    }
}

/* Chunks whose sequences are one sample each are marked so (the packer then needs no slice or
 * offset look-up per sequence), and only those; the rows of a viewed float chunk lie a count
 * apart. Text and CBF still deliver the same values, and a randomized sweep the same
 * minibatches whatever the threads. */
TEST(cbf_one_sample_chunks_are_marked)
{
    char *t = make_ctf_from(400, 5, 300);
    char ctf[256], cbf[256];
    snprintf(ctf, sizeof ctf, "%s", test_write_file("cbf_one.ctf", t, strlen(t)));
    free(t);
    snprintf(cbf, sizeof cbf, "%s/cbf_one.bin", test_tmpdir());
    ctf_config c;
    base_cfg(&c, ctf, ctf_streams, 2, CTF_FLOAT32);
    c.chunk_size_bytes = 2000;
    ctf_error e;
    ctf_cbf_write_result res;
    ASSERT_EQ(ctf_cbf_write(&c, cbf, 900, CTF_FLOAT32, &res, &e), 0);
    ctf_stream_def *fs;
    size_t nfs;
    ASSERT_EQ(ctf_cbf_streams(cbf, &fs, &nfs, NULL, &e), 0);
    ctf_config b;
    base_cfg(&b, cbf, fs, nfs, CTF_FLOAT32);
    ctf_index *idx;
    ASSERT_EQ(ctf_index_build(&b, &idx, &e), 0);
    const ctf__parse_cfg pc = {.path = cbf,
                               .streams = fs,
                               .num_streams = nfs,
                               .precision = CTF_FLOAT32};
    int fd = ctf__file_open(cbf, &e);
    ASSERT(fd >= 0);
    size_t marked = 0, unmarked = 0;
    for (size_t ch = 0; ch < idx->num_chunks; ch++) {
        const ctf__chunk *k = &idx->chunks[ch];
        char *m;
        ctf__chunk_data *a, *v;
        ASSERT_EQ(decode_both(fd, idx, ch, &pc, &m, &a, &v, &e), 0);
        const bool one = k->samples == k->num_seqs; /* no sequence here is empty */
        ASSERT_EQ(a->one_sample, one);
        ASSERT_EQ(v->one_sample, one);
        ASSERT_EQ(a->streams[0].dense_step, 3);
        ASSERT(v->streams[0].view);
        if (one || k->num_seqs == 1) ASSERT(v->streams[0].dense_step > 0);
        if (one) ASSERT_EQ(v->streams[0].dense_step, 3 + 1); /* the count between rows */
        if (k->samples == k->num_seqs + 1 && k->num_seqs > 1)
            ASSERT_EQ(v->streams[0].dense_step, 0);
        ASSERT_EQ(a->streams[1].dense_step, 0); /* sparse */
        for (size_t i = 0; i < v->streams[0].samples; i++)
            ASSERT(
                !memcmp((const float *)a->streams[0].values + ctf__dense_at(&a->streams[0], 3, i),
                        (const float *)v->streams[0].values + ctf__dense_at(&v->streams[0], 3, i),
                        3 * sizeof(float)));
        marked += one;
        unmarked += !one;
        ctf__chunk_data_free(a);
        ctf__chunk_data_free(v);
        CTF_FREE(m);
    }
    ASSERT(marked > 3 && unmarked > 3);
    ctf__file_close(fd);
    ctf_index_free(idx);
    bytes vt = {0}, vb = {0};
    ASSERT_EQ(read_values(&c, 64, &vt, NULL), 400);
    ASSERT_EQ(read_values(&b, 64, &vb, NULL), 400);
    ASSERT(b_eq(&vt, &vb));
    /* The reader's counts (a marked chunk adds up without a pass over its sequences) are
     * those of what it delivered. */
    for (int text = 0; text < 2; text++) {
        ctf_reader *r;
        ASSERT_EQ(ctf_reader_open(text ? &c : &b, &r, &e), 0);
        uint64_t seqs = 0, samples[2] = {0, 0}, nz[2] = {0, 0};
        for (;;) {
            ctf_minibatch *mb;
            ASSERT_EQ(ctf_reader_next(r, 64, &mb), 0);
            if (!mb) break;
            seqs += ctf_minibatch_num_sequences(mb);
            for (size_t k = 0; k < 2; k++) {
                ctf_stream_view v;
                ASSERT_EQ(ctf_minibatch_stream(mb, k, &v), 0);
                samples[k] += v.num_samples;
                nz[k] += v.is_sparse ? v.nnz : v.num_samples * v.dim;
            }
            ctf_minibatch_free(mb);
        }
        ctf_stats st;
        ctf_reader_get_stats(r, &st);
        ASSERT_U64_EQ(st.sequences, seqs);
        for (size_t k = 0; k < 2; k++) {
            ASSERT_U64_EQ(st.streams[k].samples, samples[k]);
            ASSERT_U64_EQ(st.streams[k].nonzeros, nz[k]);
        }
        ctf_reader_free(r);
    }
    b_free(&vb);
    b.randomize = true;
    b.randomization_window = 4;
    for (size_t threads = 0; threads <= 2; threads += 2) {
        bytes r = {0};
        b.num_threads = threads;
        ASSERT_EQ(read_values(&b, threads ? 64 : 7, &r, NULL), 400);
        ASSERT_EQ(r.n, vt.n);
        if (!threads) {
            vb = r;
            continue;
        }
        ASSERT(b_eq(&vb, &r));
        ASSERT(!b_eq(&vt, &r)); /* randomized */
        b_free(&r);
    }
    b_free(&vt);
    b_free(&vb);
    ctf_cbf_streams_free(fs, nfs);
}

/* Every read of a CBF read can fail: each one failed in turn is a clean
 * CTF_EIO naming the file (or, for the one read whose failure is data, CTF_ECHANGED), never a
 * crash or a wrong minibatch. */
TEST(cbf_io_faults_at_every_read)
{
    char ctf[256], cbf[256];
    ASSERT_EQ(make_pair(150, 77, 900, CTF_FLOAT32, ctf, cbf, "faults"), 0);
    ctf_stream_def *fs;
    size_t nfs;
    ctf_error e;
    ASSERT_EQ(ctf_cbf_streams(cbf, &fs, &nfs, NULL, &e), 0);
    ctf_config c;
    base_cfg(&c, cbf, fs, nfs, CTF_FLOAT32);
    c.randomize = true;
    c.randomization_window = 2;
    bytes ref = {0};
    atomic_store(&ctf__io_count, 0);
    ASSERT_EQ(read_values(&c, 16, &ref, NULL), 150);
    const long count = atomic_load(&ctf__io_count);
    ASSERT(count > 5);
    for (long k = 1; k <= count; k++) {
        for (int eof = 0; eof < 2; eof++) {
            atomic_store(&ctf__io_count, 0);
            atomic_store(eof ? &ctf__io_eof_at : &ctf__io_fail_at, k);
            bytes got = {0};
            long n = read_values(&c, 16, &got, NULL);
            atomic_store(&ctf__io_fail_at, 0);
            atomic_store(&ctf__io_eof_at, 0);
            /* Either the fault hit a read this run made (an error) or none (the same data). */
            ASSERT(n == -1 || (n == 150 && b_eq(&got, &ref)));
            b_free(&got);
        }
    }
    b_free(&ref);
    ctf_cbf_streams_free(fs, nfs);
}

/* The chunk whose read the hook below disturbs (its offset and size in the file: the read of
 * its sequence lengths alone is not it), and the file. */
static _Atomic uint64_t touch_offset, touch_size;
static const char *touch_path;
static atomic_int touched;

/* Gives the file a new modification time once the read of that chunk has its bytes, as a
 * writer in another process finishing then would. */
static void touch_after_read(int fd, uint64_t off, size_t n)
{
    (void)fd;
    if (off != atomic_load(&touch_offset) || n != atomic_load(&touch_size) ||
        atomic_exchange(&touched, 1))
        return;
    struct stat st;
    if (stat(touch_path, &st) != 0) return;
    struct timespec t[2] = {st.st_atim, st.st_mtim};
    t[1].tv_sec += 1;
    utimensat(AT_FDCWD, touch_path, t, 0);
}

/* A file written while a chunk is read (its size and modification time were those of the open
 * before the read) is CTF_ECHANGED at that chunk's load: the bytes it read may be of two
 * versions. The load is the source's own, so that no other check (a later load, the consumer's
 * records) could say it instead. */
TEST(cbf_file_changed_during_a_chunk_read_is_echanged)
{
    char ctf[256], cbf[256];
    ASSERT_EQ(make_pair(120, 5, 600, CTF_FLOAT32, ctf, cbf, "during"), 0);
    ctf_stream_def *fs;
    size_t nfs;
    ctf_error e;
    ASSERT_EQ(ctf_cbf_streams(cbf, &fs, &nfs, NULL, &e), 0);
    ctf_config c;
    base_cfg(&c, cbf, fs, nfs, CTF_FLOAT32);
    const ctf__parse_cfg pc = {.path = cbf,
                               .streams = fs,
                               .num_streams = nfs,
                               .precision = CTF_FLOAT32};
    ctf__source *src;
    uint64_t jh;
    ASSERT_EQ(ctf__source_open(&c, NULL, &pc, &src, &jh, &e), 0);
    ASSERT(src->num_chunks > 2);
    touch_path = cbf;
    ctf__readbuf rb = {0};
    for (size_t ch = 0; ch < 2; ch++) {
        /* Chunk 0 read undisturbed; chunk 1's file gets a new time once its bytes are read. */
        atomic_store(&touch_offset, ch ? src->chunks[ch].offset : UINT64_MAX);
        atomic_store(&touch_size, src->chunks[ch].size);
        atomic_store(&touched, 0);
        atomic_store(&ctf__io_after_read, touch_after_read);
        ctf__chunk_data *cd = NULL;
        int rc = src->load(src, &rb, ch, NULL, &cd, &e);
        atomic_store(&ctf__io_after_read, NULL);
        ASSERT_EQ(atomic_load(&touched), (int)ch);
        ASSERT_EQ(rc, ch ? CTF_ECHANGED : 0);
        ASSERT_EQ(cd == NULL, ch == 1);
        ctf__chunk_data_free(cd);
    }
    ASSERT(strstr(e.message, "changed on disk") != NULL);
    CTF_FREE(rb.p);
    CTF_FREE(rb.seqs.p);
    ctf__source_free(src);
    ctf_cbf_streams_free(fs, nfs);
}
