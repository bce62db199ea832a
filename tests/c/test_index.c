/*
 * test_index.c -- ctf_index_build (rules 4): the sequence table (keys, offsets, first lines,
 * line counts, index samples), definesMBSize counting, line mode, the chunk rule of rules 4.2 for
 * every kind of chunk size, and the index cache: where it goes, that it is loaded, and that it
 * is rebuilt (never trusted) whenever the data, the cache or the index-shaping options change.
 */
#include "reader/pipeline.h"
#include "test.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/*======================================================================
 * Helpers
 *====================================================================*/

#define MAX_LOG 64

typedef struct ilog {
    size_t n;
    size_t count[3];
    ctf_severity sev[MAX_LOG];
    ctf_error e[MAX_LOG];
} ilog;

static void ilog_cb(void *user, ctf_severity sev, const ctf_error *e)
{
    ilog *l = user;
    if ((int)sev >= 0 && (int)sev < 3) l->count[sev]++;
    if (l->n < MAX_LOG) {
        l->sev[l->n] = sev;
        l->e[l->n] = *e;
        l->n++;
    }
}

static bool ilog_has(const ilog *l, ctf_severity sev, const char *needle)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->sev[i] == sev && strstr(l->e[i].message, needle)) return true;
    for (size_t i = 0; i < l->n; i++) fprintf(stderr, "  log %d: %s\n", l->sev[i], l->e[i].message);
    return false;
}

static const ctf_stream_def AB[] = {
    {"feat", "a", 3, false, false},
    {"lab", "b", 5, true, false},
};

static void icfg(ctf_config *cfg, const char *path, const ctf_stream_def *s, size_t n, ilog *l)
{
    ctf_config_init(cfg);
    cfg->path = path;
    cfg->streams = s;
    cfg->num_streams = n;
    cfg->randomize = false;
    if (l) {
        memset(l, 0, sizeof *l);
        cfg->log = ilog_cb;
        cfg->log_user = l;
    }
}

/* The whole sequence table of idx, re-made chunk by chunk (the index keeps only its chunk
 * table); the last two tables are kept, so that a check walking one index re-makes it once. */
static const ctf__seq *table_of(const ctf_index *idx)
{
    static struct {
        const ctf_index *idx;
        uint64_t hash;
        size_t n;
        ctf__seq *p;
    } slot[2];
    static unsigned last; /* the slot returned last: kept, so that two tables can be compared */
    for (unsigned i = 0; i < 2; i++)
        if (slot[i].idx == idx && slot[i].hash == idx->hash && slot[i].n == idx->num_seqs &&
            slot[i].p) {
            last = i;
            return slot[i].p;
        }
    unsigned k = last = 1 - last;
    free(slot[k].p);
    slot[k].p = calloc(idx->num_seqs ? idx->num_seqs : 1, sizeof *slot[k].p);
    slot[k].idx = idx;
    slot[k].hash = idx->hash;
    slot[k].n = idx->num_seqs;
    ctf__seqbuf b = {0};
    ctf_error err;
    for (size_t c = 0; c < idx->num_chunks && slot[k].p; c++) {
        if (ctf__index_chunk_seqs(idx, c, NULL, &b, &err)) {
            fprintf(stderr, "  re-making chunk %zu: %s\n", c, err.message);
            break;
        }
        memcpy(slot[k].p + idx->chunks[c].first_seq, b.p, idx->chunks[c].num_seqs * sizeof *b.p);
    }
    CTF_FREE(b.p);
    return slot[k].p;
}

/* Checks sequence i of idx. */
static bool seq_is(const ctf_index *idx, size_t i, uint64_t key, uint64_t offset, uint64_t line,
                   uint32_t lines, uint32_t samples)
{
    if (i >= idx->num_seqs) {
        fprintf(stderr, "  no sequence %zu (%zu sequences)\n", i, idx->num_seqs);
        return false;
    }
    const ctf__seq *s = &table_of(idx)[i];
    if (s->key == key && s->offset == offset && s->line == line && s->lines == lines &&
        s->samples == samples && ctf_index_sequence_samples(idx, i) == samples)
        return true;
    fprintf(stderr,
            "  sequence %zu: key %llu offset %llu line %llu lines %u samples %u; want %llu %llu "
            "%llu %u %u\n",
            i, (unsigned long long)s->key, (unsigned long long)s->offset,
            (unsigned long long)s->line, s->lines, s->samples, (unsigned long long)key,
            (unsigned long long)offset, (unsigned long long)line, lines, samples);
    return false;
}

/* The exact rule of rules 4.2, checked on a built index: chunks cover the sequences in file
 * order, each spans its sequences' bytes, a chunk holds more than one sequence only if it fits
 * the limit, and a chunk ends only because its next sequence would not fit. */
static bool chunks_follow_rule(const ctf_index *idx, uint64_t limit)
{
    size_t next = 0;
    for (size_t c = 0; c < idx->num_chunks; c++) {
        const ctf__chunk *ch = &idx->chunks[c];
        if (ch->first_seq != next || ch->num_seqs == 0) return false;
        uint64_t span = 0, samples = 0;
        for (size_t i = ch->first_seq; i < ch->first_seq + ch->num_seqs; i++) {
            uint64_t end = i + 1 < idx->num_seqs ? table_of(idx)[i + 1].offset : idx->file.size;
            span += end - table_of(idx)[i].offset;
            samples += table_of(idx)[i].samples;
        }
        if (ch->offset != table_of(idx)[ch->first_seq].offset || ch->size != span ||
            ch->samples != samples) {
            fprintf(stderr, "  chunk %zu: offset %llu size %llu samples %llu, want span %llu\n", c,
                    (unsigned long long)ch->offset, (unsigned long long)ch->size,
                    (unsigned long long)ch->samples, (unsigned long long)span);
            return false;
        }
        if (ch->num_seqs > 1 && ch->size > limit) {
            fprintf(stderr, "  chunk %zu exceeds %llu with %zu sequences\n", c,
                    (unsigned long long)limit, ch->num_seqs);
            return false;
        }
        next = ch->first_seq + ch->num_seqs;
        if (next < idx->num_seqs) {
            uint64_t end = next + 1 < idx->num_seqs ? table_of(idx)[next + 1].offset
                                                    : idx->file.size;
            if (ch->size + (end - table_of(idx)[next].offset) <= limit) {
                fprintf(stderr, "  chunk %zu ended although sequence %zu fits\n", c, next);
                return false;
            }
        }
    }
    return next == idx->num_seqs;
}

/* Sequences per chunk, as a compact string like "2,1,1,1". */
static const char *chunk_shape(const ctf_index *idx)
{
    static char buf[512];
    size_t n = 0;
    buf[0] = 0;
    for (size_t c = 0; c < idx->num_chunks && n + 12 < sizeof buf; c++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%zu", c ? "," : "",
                              idx->chunks[c].num_seqs);
    return buf;
}

static bool file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/*======================================================================
 * The sequence table
 *====================================================================*/

TEST(index_id_mode_sequence_table)
{
    /* Offsets: 0, 16 (+9 +1) -> 26... see each line's length in the comments. */
    const char *text = "100 |a 1 |b 1:1\n" /* 0, 16 bytes */
                       "100 |a 2\n"        /* 16, 9 */
                       "\n"                /* 25, blank: joins 100 */
                       "200 |a 3 |b 0:1\n" /* 26, 16 */
                       "300 |b 2:1 |a 4\n" /* 42, 16 */
                       "|a 5\n"            /* 58, no id: joins 300 */
                       "  |a 6";           /* 63, last line without newline */
    ctf_config cfg;
    icfg(&cfg, test_write_str("ix_id.ctf", text), AB, 2, NULL);
    ctf_error err;
    ctf_index *idx;
    ASSERT_OK(ctf_index_build(&cfg, &idx, &err), &err);
    ASSERT_EQ(idx->num_seqs, 3);
    ASSERT(seq_is(idx, 0, 100, 0, 0, 3, 3));
    ASSERT(seq_is(idx, 1, 200, 26, 3, 1, 1));
    ASSERT(seq_is(idx, 2, 300, 42, 4, 3, 3));
    ctf_index_info info;
    ctf_index_get_info(idx, &info);
    ASSERT_U64_EQ(info.file_size, strlen(text));
    ASSERT_U64_EQ(info.sequences, 3);
    ASSERT_U64_EQ(info.samples, 7);
    ASSERT_U64_EQ(info.lines, 7);
    ASSERT_U64_EQ(info.chunks, 1);
    ASSERT_U64_EQ(info.max_sequence_samples, 3);
    ASSERT(!info.line_mode && !info.from_cache);
    ASSERT_EQ(ctf_index_sequence_samples(idx, 3), 0); /* out of range */
    ctf_index_free(idx);
    ctf_index_free(NULL);
}

TEST(index_blank_lines_before_first_id_and_bom)
{
    const char *text = "\xef\xbb\xbf\n \n5 |a 1\n5 |a 2\n6 |a 3\n \t ";
    ctf_config cfg;
    icfg(&cfg, test_write_str("ix_lead.ctf", text), AB, 2, NULL);
    ctf_error err;
    ctf_index *idx;
    ASSERT_OK(ctf_index_build(&cfg, &idx, &err), &err);
    ASSERT_EQ(idx->num_seqs, 2);
    ASSERT_U64_EQ(idx->data_start, 3);
    ASSERT(seq_is(idx, 0, 5, 6, 2, 2, 2));
    /* A trailing run of blanks without a newline is not a line. */
    ASSERT(seq_is(idx, 1, 6, 20, 4, 1, 1));
    ASSERT_U64_EQ(idx->total_lines, 5);
    ASSERT_U64_EQ(idx->chunks[0].offset, 6);
    ASSERT_U64_EQ(idx->chunks[0].size, strlen(text) - 6);
    ctf_index_free(idx);
}

TEST(index_line_mode_skips_lines_without_input)
{
    const char *text = "|a 1\n"       /* 0: seq 0 */
                       "\n"           /* 5 */
                       "100 |a 2\n"   /* 6: seq 2 */
                       "|# c\n"       /* 15 */
                       "|zz 1\n"      /* 20 */
                       "|a 3 |b 1:1\n" /* 26: seq 5 */
                       "   \n";       /* 38 */
    ctf_config cfg;
    icfg(&cfg, test_write_str("ix_line.ctf", text), AB, 2, NULL);
    ctf_error err;
    ctf_index *idx;
    ASSERT_OK(ctf_index_build(&cfg, &idx, &err), &err);
    ASSERT(idx->line_mode);
    ASSERT_EQ(idx->num_seqs, 3);
    ASSERT(seq_is(idx, 0, 0, 0, 0, 2, 1));
    ASSERT(seq_is(idx, 1, 2, 6, 2, 3, 1));
    ASSERT(seq_is(idx, 2, 5, 26, 5, 2, 1));
    ASSERT_U64_EQ(idx->total_lines, 7);
    ASSERT_U64_EQ(idx->total_samples, 3);
    ctf_index_free(idx);
    /* Leading skipped lines: the first sequence starts at its own line. */
    icfg(&cfg, test_write_str("ix_line2.ctf", "|# head\n\n|a 1\n|a 2\n"), AB, 2, NULL);
    ASSERT_OK(ctf_index_build(&cfg, &idx, &err), &err);
    ASSERT_EQ(idx->num_seqs, 2);
    ASSERT(seq_is(idx, 0, 2, 9, 2, 1, 1));
    ASSERT(seq_is(idx, 1, 3, 14, 3, 1, 1));
    ASSERT_U64_EQ(idx->chunks[0].offset, 9);
    ctf_index_free(idx);
    /* skipSequenceIds: every line of an id file is its own sequence keyed by its line. */
    icfg(&cfg, test_write_str("ix_skip.ctf", "1 |a 1\n1 |a 2\n\n2 |a 3\n"), AB, 2, NULL);
    cfg.skip_sequence_ids = true;
    ASSERT_OK(ctf_index_build(&cfg, &idx, &err), &err);
    ASSERT(idx->line_mode);
    ASSERT_EQ(idx->num_seqs, 3);
    ASSERT(seq_is(idx, 0, 0, 0, 0, 1, 1));
    ASSERT(seq_is(idx, 1, 1, 7, 1, 2, 1));
    ASSERT(seq_is(idx, 2, 3, 15, 3, 1, 1));
    ctf_index_free(idx);
}

/* With definesMBSize, a sequence's index samples are its lines that hold that stream. */
TEST(index_defines_mb_size_counts_lines_with_the_stream)
{
    const char *text = "1 |a 1 |b 1:1\n"
                       "1 |a 2\n"
                       "1 |# b is not here |a 3\n"   /* the comment ends at '|a' */
                       "1 |# x |b 2:1 |a 4\n"         /* comment ends at '|b': counts */
                       "1 |bb 1 |a 5\n"               /* another name */
                       "2 |a 6\n"                     /* none: 0 samples */
                       "3 |b 1:1\n3 |b 1:1 |a 1\n";   /* 2 */
    ctf_stream_def s[2] = {AB[0], AB[1]};
    s[1].defines_mb_size = true;
    ctf_config cfg;
    icfg(&cfg, test_write_str("ix_mb.ctf", text), s, 2, NULL);
    ctf_error err;
    ctf_index *idx;
    ASSERT_OK(ctf_index_build(&cfg, &idx, &err), &err);
    ASSERT_EQ(idx->num_seqs, 3);
    ASSERT_EQ(table_of(idx)[0].samples, 2);
    ASSERT_EQ(table_of(idx)[0].lines, 5);
    ASSERT_EQ(table_of(idx)[1].samples, 0);
    ASSERT_EQ(table_of(idx)[2].samples, 2);
    ctf_index_info info;
    ctf_index_get_info(idx, &info);
    ASSERT_U64_EQ(info.samples, 4);
    ASSERT_U64_EQ(info.max_sequence_samples, 2);
    ctf_index_free(idx);
    /* The other stream defining: lines holding a. */
    s[1].defines_mb_size = false;
    s[0].defines_mb_size = true;
    ASSERT_OK(ctf_index_build(&cfg, &idx, &err), &err);
    ASSERT_EQ(table_of(idx)[0].samples, 5);
    ASSERT_EQ(table_of(idx)[1].samples, 1);
    ASSERT_EQ(table_of(idx)[2].samples, 1);
    ctf_index_free(idx);
    /* Line mode: a line without the defining stream is a sequence of 0 index samples. */
    s[0].defines_mb_size = false;
    s[1].defines_mb_size = true;
    icfg(&cfg, test_write_str("ix_mb2.ctf", "|a 1 |b 1:1\n|a 2\n|b 0:1\n"), s, 2, NULL);
    ASSERT_OK(ctf_index_build(&cfg, &idx, &err), &err);
    ASSERT_EQ(idx->num_seqs, 3);
    ASSERT_EQ(table_of(idx)[0].samples, 1);
    ASSERT_EQ(table_of(idx)[1].samples, 0);
    ASSERT_EQ(table_of(idx)[2].samples, 1);
    ASSERT_U64_EQ(idx->total_samples, 2);
    ctf_index_free(idx);
}

/* Lines that cross the scan's internal block boundary, and a line longer than a block. */
TEST(index_long_lines_and_block_boundaries)
{
    const size_t n = 300000;
    size_t cap = n * 24 + (6u << 20) + 64;
    char *text = malloc(cap);
    uint64_t *offs = malloc((n + 2) * sizeof *offs);
    ASSERT(text && offs);
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        offs[i] = len;
        len += (size_t)snprintf(text + len, cap - len, "%zu |a %zu\n", i, i % 1000);
    }
    /* One 6 MiB line (longer than the 4 MiB read block). */
    offs[n] = len;
    len += (size_t)snprintf(text + len, cap - len, "%zu |b", n);
    while (len < offs[n] + (6u << 20)) {
        memcpy(text + len, " 1:1", 4);
        len += 4;
    }
    text[len++] = '\n';
    offs[n + 1] = len;
    len += (size_t)snprintf(text + len, cap - len, "%zu |a 1", n + 1);
    ctf_config cfg;
    icfg(&cfg, test_write_file("ix_big.ctf", text, len), AB, 2, NULL);
    cfg.chunk_size_bytes = 1u << 20;
    ctf_error err;
    ctf_index *idx;
    int rc = ctf_index_build(&cfg, &idx, &err);
    free(text);
    if (rc) free(offs);
    ASSERT_OK(rc, &err);
    bool ok = idx->num_seqs == n + 2;
    for (size_t i = 0; ok && i < n + 2; i++) ok = seq_is(idx, i, i, offs[i], i, 1, 1);
    free(offs);
    ASSERT(ok);
    ASSERT(chunks_follow_rule(idx, 1u << 20));
    /* The long line is a chunk of its own. */
    const ctf__chunk *last = &idx->chunks[idx->num_chunks - 2];
    ASSERT_EQ(last->num_seqs, 1);
    ASSERT_EQ(last->first_seq, n);
    ctf_index_free(idx);
}

/*======================================================================
 * Chunks (rules 4.2)
 *====================================================================*/

/* Sequences of 5, 6, 7, 8 and 5 bytes (31 in all). */
static const char *const chunk_text = "|a 1\n|a 22\n|a 333\n|a 4444\n|a 5\n";

static const char *chunks_for(uint64_t limit)
{
    ctf_config cfg;
    icfg(&cfg, test_write_str("ix_chunks.ctf", chunk_text), AB, 2, NULL);
    cfg.chunk_size_bytes = limit;
    ctf_error err;
    ctf_index *idx;
    if (ctf_index_build(&cfg, &idx, &err)) return "build failed";
    static char shape[128];
    snprintf(shape, sizeof shape, "%s", chunk_shape(idx));
    if (!chunks_follow_rule(idx, limit)) snprintf(shape, sizeof shape, "rule broken");
    ctf_index_info info;
    ctf_index_get_info(idx, &info);
    if (info.chunks != idx->num_chunks) snprintf(shape, sizeof shape, "info.chunks wrong");
    ctf_index_free(idx);
    return shape;
}

TEST(index_chunk_boundaries)
{
    ASSERT_STR_EQ(chunks_for(0), "1,1,1,1,1");   /* every sequence its own chunk */
    ASSERT_STR_EQ(chunks_for(1), "1,1,1,1,1");
    ASSERT_STR_EQ(chunks_for(6), "1,1,1,1,1");   /* tiny: 5+6 > 6 */
    ASSERT_STR_EQ(chunks_for(10), "1,1,1,1,1");  /* 5+6 = 11 > 10 */
    ASSERT_STR_EQ(chunks_for(11), "2,1,1,1");    /* exactly 5+6: fits */
    ASSERT_STR_EQ(chunks_for(12), "2,1,1,1");    /* 11+7 > 12, 7+8 > 12, 8+5 > 12 */
    ASSERT_STR_EQ(chunks_for(13), "2,1,2");      /* 8+5 = 13 fits */
    ASSERT_STR_EQ(chunks_for(18), "3,2");        /* 5+6+7 = 18 exactly */
    ASSERT_STR_EQ(chunks_for(30), "4,1");        /* 26+5 = 31 > 30 */
    ASSERT_STR_EQ(chunks_for(31), "5");          /* the whole file exactly */
    ASSERT_STR_EQ(chunks_for(1000000), "5");     /* larger than the file */
    ASSERT_STR_EQ(chunks_for(UINT64_MAX), "5");
    /* Every limit from 0 to 40 obeys the rule. */
    for (uint64_t lim = 0; lim <= 40; lim++) ASSERT(strcmp(chunks_for(lim), "rule broken"));
}

TEST(index_chunk_sequence_larger_than_limit)
{
    /* 5, 6, 40, 5, 5 bytes with a limit of 12: the big one is a chunk of its own. */
    const char *text = "|a 1\n|a 22\n|a 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 \n|a 5\n|a 6\n";
    ctf_config cfg;
    icfg(&cfg, test_write_str("ix_bigseq.ctf", text), AB, 2, NULL);
    cfg.chunk_size_bytes = 12;
    ctf_error err;
    ctf_index *idx;
    ASSERT_OK(ctf_index_build(&cfg, &idx, &err), &err);
    ASSERT_STR_EQ(chunk_shape(idx), "2,1,2");
    ASSERT_U64_EQ(idx->chunks[1].size, 40);
    ASSERT_U64_EQ(idx->chunks[1].offset, 11);
    ASSERT_U64_EQ(idx->chunks[2].offset, 51);
    ASSERT_U64_EQ(idx->chunks[2].size, 10);
    ASSERT_U64_EQ(idx->chunks[2].samples, 2);
    ASSERT(chunks_follow_rule(idx, 12));
    ctf_index_free(idx);
    /* Id mode: a multi-line sequence is never split, its blank lines included. */
    const char *t2 = "1 |a 1\n1 |a 2\n\n2 |a 3\n3 |a 4\n3 |a 5\n";
    icfg(&cfg, test_write_str("ix_bigseq2.ctf", t2), AB, 2, NULL);
    cfg.chunk_size_bytes = 8;
    ASSERT_OK(ctf_index_build(&cfg, &idx, &err), &err);
    ASSERT_STR_EQ(chunk_shape(idx), "1,1,1");
    ASSERT_U64_EQ(idx->chunks[0].size, 15);
    ASSERT_U64_EQ(idx->chunks[0].samples, 3);
    ASSERT(chunks_follow_rule(idx, 8));
    ctf_index_free(idx);
}

/* The reader delivers the same data whatever the chunk size. */
TEST(index_chunk_size_does_not_change_data)
{
    char text[4096] = "";
    for (int i = 0; i < 40; i++) {
        char line[64];
        snprintf(line, sizeof line, "%d |a %d |b %d:1\n%s", i / 3, i, i % 5,
                 i % 7 == 0 ? "|a 0 |b 0:0\n" : "");
        strcat(text, line);
    }
    const char *p = test_write_str("ix_same.ctf", text);
    char path[512];
    snprintf(path, sizeof path, "%s", p);
    static const ctf_stream_def S[] = {{"a", NULL, 1, false, false}, {"b", NULL, 5, true, false}};
    float ref[256];
    size_t nref = 0;
    /* 0 is refused by ctf_config_validate (config_validate_errors) */
    const uint64_t sizes[] = {1, 17, 64, 100, 1u << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        ctf_config cfg;
        icfg(&cfg, path, S, 2, NULL);
        cfg.chunk_size_bytes = sizes[k];
        cfg.max_sweeps = 1;
        ctf_error err;
        ctf_reader *r;
        ASSERT_OK(ctf_reader_open(&cfg, &r, &err), &err);
        size_t n = 0;
        for (;;) {
            ctf_minibatch *mb;
            int rc = ctf_reader_next(r, 7, &mb);
            if (rc) ctf_reader_free(r);
            ASSERT_EQ(rc, 0);
            if (!mb) break;
            ctf_stream_view v;
            ctf_minibatch_stream(mb, 0, &v);
            for (size_t i = 0; i < v.num_samples && n < 256; i++, n++) {
                float x = ((const float *)v.values)[i];
                if (k == 0)
                    ref[n] = x;
                else if (ref[n] != x) {
                    ctf_minibatch_free(mb);
                    ctf_reader_free(r);
                    ASSERT(0);
                }
            }
            ctf_minibatch_free(mb);
        }
        ctf_reader_free(r);
        if (k == 0)
            nref = n;
        else
            ASSERT_EQ(n, nref);
    }
    ASSERT_EQ(nref, 46);
}

/*======================================================================
 * Index cache (rules 4.3)
 *====================================================================*/

/* Builds with cache_index at trace level 2; returns from_cache, or -1 on failure. */
static int cached_build(ctf_config *cfg, ilog *l, ctf_index **out)
{
    memset(l, 0, sizeof *l);
    cfg->cache_index = true;
    cfg->trace_level = 2;
    cfg->log = ilog_cb;
    cfg->log_user = l;
    ctf_error err;
    ctf_index *idx;
    if (ctf_index_build(cfg, &idx, &err)) {
        fprintf(stderr, "  build failed: %s\n", err.message);
        return -1;
    }
    int fc = idx->from_cache ? 1 : 0;
    ctf_index_info info;
    ctf_index_get_info(idx, &info);
    if (info.from_cache != (fc == 1)) fc = -1;
    if (out)
        *out = idx;
    else
        ctf_index_free(idx);
    return fc;
}

static bool same_index(const ctf_index *a, const ctf_index *b)
{
    return a->num_seqs == b->num_seqs &&
           !memcmp(table_of(a), table_of(b), a->num_seqs * sizeof *table_of(a)) &&
           a->num_chunks == b->num_chunks &&
           !memcmp(a->chunks, b->chunks, a->num_chunks * sizeof *a->chunks) &&
           a->total_lines == b->total_lines && a->total_samples == b->total_samples &&
           a->line_mode == b->line_mode && a->data_start == b->data_start && a->hash == b->hash;
}

static void set_mtime(const char *path, time_t sec, long nsec)
{
    struct timespec ts[2] = {{sec, nsec}, {sec, nsec}};
    utimensat(AT_FDCWD, path, ts, 0);
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) ? -1 : (long)st.st_size;
}

static void flip_byte(const char *path, long at)
{
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

static const char *const cache_text = "\xef\xbb\xbf"
                                      "1 |a 1 |b 1:1\n1 |a 2\n2 |a 3 |b 0:1\n3 |a 4 |b 2:1\n";

/* A fresh data file (and no cache) with mtime set to a fixed time. */
static const char *cache_data(const char *name, char *path, size_t cap)
{
    snprintf(path, cap, "%s", test_write_str(name, cache_text));
    char cpath[600];
    ctf_index_cache_path(path, cpath, sizeof cpath);
    remove(cpath);
    set_mtime(path, 1500000000, 123456789);
    return path;
}

/* The indexing pass's warning (an id that reappears after other ids, rules 1.5) comes from an
 * open from the cache too, at the same place, and counts in the reader's statistics; the
 * checkpoint fingerprint is the same whether the index was scanned or loaded. */
TEST(index_cache_keeps_the_repeated_id_warning)
{
    static const ctf_stream_def A1[] = {{"a", NULL, 1, false, false}};
    const char *path = test_write_str("ixc_rep.ctf", "1 |a 1\n2 |a 2\n2 |a 3\n1 |a 4\n3 |a 5\n"
                                                     "2 |a 6\n1 |a 7\n");
    char cpath[600];
    remove(ctf_index_cache_path(path, cpath, sizeof cpath));
    ctf_config cfg;
    ilog l;
    icfg(&cfg, path, A1, 1, NULL);
    uint64_t hash[2];
    for (int pass = 0; pass < 2; pass++) {
        ctf_index *idx;
        ASSERT_EQ(cached_build(&cfg, &l, &idx), pass);
        ASSERT_EQ(l.count[CTF_SEV_WARNING], 1);
        ASSERT(ilog_has(&l, CTF_SEV_WARNING,
                        "sequence id 1 reappears here after other ids (first used on line 1)"));
        for (size_t i = 0; i < l.n; i++)
            if (l.sev[i] == CTF_SEV_WARNING) {
                ASSERT_U64_EQ(l.e[i].line, 4);
                ASSERT_EQ(l.e[i].column, 1);
                ASSERT_EQ(l.e[i].offset, 21);
                ASSERT_STR_EQ(l.e[i].path, path);
            }
        ASSERT_U64_EQ(idx->warnings, 1);
        ASSERT_EQ(idx->num_seqs, 6);
        /* Warned once, counted every time (scanned or from the cache). */
        ctf_index_info info;
        ctf_index_get_info(idx, &info);
        ASSERT_U64_EQ(info.repeated_ids, 3);
        hash[pass] = idx->hash;
        ctf_index_free(idx);
        /* The reader counts it, shown or not. */
        ctf_config rc = cfg;
        rc.trace_level = 0;
        rc.log = NULL;
        rc.max_sweeps = 1;
        ctf_reader *r;
        ctf_error err;
        ASSERT_OK(ctf_reader_open(&rc, &r, &err), &err);
        ctf_stats st;
        ctf_reader_get_stats(r, &st);
        ASSERT_U64_EQ(st.warnings, 1);
        ctf_reader_free(r);
    }
    ASSERT_U64_EQ(hash[0], hash[1]);
    /* A file without the problem has no warning record in its cache. */
    path = test_write_str("ixc_rep2.ctf", "1 |a 1\n2 |a 2\n");
    remove(ctf_index_cache_path(path, cpath, sizeof cpath));
    icfg(&cfg, path, A1, 1, NULL);
    for (int pass = 0; pass < 2; pass++) {
        ASSERT_EQ(cached_build(&cfg, &l, NULL), pass);
        ASSERT_EQ(l.count[CTF_SEV_WARNING], 0);
    }
}

TEST(index_cache_written_next_to_data_and_loaded)
{
    char path[512], cpath[600];
    cache_data("ixc.ctf", path, sizeof path);
    ASSERT_STR_EQ(ctf_index_cache_path(path, cpath, sizeof cpath),
                  strcat(strcpy((char[600]){0}, path), ".ctfidx"));
    ctf_config cfg;
    ilog l;
    icfg(&cfg, path, AB, 2, NULL);
    /* Without cacheIndex nothing is written. */
    ctf_error err;
    ctf_index *idx0, *idx1, *idx2;
    ASSERT_OK(ctf_index_build(&cfg, &idx0, &err), &err);
    ASSERT(!file_exists(cpath));
    ASSERT_EQ(cached_build(&cfg, &l, &idx1), 0);
    ASSERT(file_exists(cpath));
    ASSERT_EQ(l.count[CTF_SEV_WARNING], 0);
    ASSERT_EQ(cached_build(&cfg, &l, &idx2), 1);
    ASSERT(ilog_has(&l, CTF_SEV_INFO, "(from the index cache)"));
    ASSERT(same_index(idx0, idx1));
    ASSERT(same_index(idx0, idx2));
    ASSERT_U64_EQ(idx2->data_start, 3);
    ctf_index_free(idx0);
    ctf_index_free(idx1);
    ctf_index_free(idx2);
    /* No temporary file is left behind. */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls '%s'.*.tmp >/dev/null 2>&1", cpath);
    ASSERT(system(cmd) != 0);
    /* A cached index gives the reader the same data. */
    cfg.max_sweeps = 1;
    cfg.trace_level = 0;
    ctf_reader *r;
    ASSERT_OK(ctf_reader_open(&cfg, &r, &err), &err);
    ctf_index_info info;
    ctf_index_get_info(ctf_reader_index(r), &info);
    ASSERT(info.from_cache);
    ctf_minibatch *mb;
    ASSERT_OK(ctf_reader_next(r, 100, &mb), ctf_reader_error(r));
    ASSERT(mb);
    ASSERT_EQ(ctf_minibatch_num_sequences(mb), 3);
    ASSERT_EQ(ctf_minibatch_keys(mb)[2], 3);
    ASSERT_EQ(ctf_minibatch_lines(mb)[2], 4);
    ctf_minibatch_free(mb);
    ctf_reader_free(r);
}

/* The data file rewritten with the same size, different sequences and a new mtime. */
TEST(index_cache_rebuilt_when_data_modified_same_size)
{
    char path[512];
    cache_data("ixc_mod.ctf", path, sizeof path);
    ctf_config cfg;
    ilog l;
    icfg(&cfg, path, AB, 2, NULL);
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 0);
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 1);
    /* Same size: sequence 3 becomes part of sequence 2. */
    char t2[256];
    snprintf(t2, sizeof t2, "%s", cache_text);
    char *p3 = strstr(t2, "3 |a 4");
    ASSERT(p3);
    *p3 = '2';
    FILE *f = fopen(path, "r+b"); /* in place: same inode */
    ASSERT(f);
    fwrite(t2, 1, strlen(t2), f);
    fclose(f);
    set_mtime(path, 1500000000, 123456790); /* one nanosecond later */
    ASSERT_EQ(file_size(path), (long)strlen(cache_text));
    ctf_index *idx;
    ASSERT_EQ(cached_build(&cfg, &l, &idx), 0);
    ASSERT(ilog_has(&l, CTF_SEV_INFO, "index cache ignored (the data file changed"));
    ASSERT_EQ(idx->num_seqs, 2);
    ASSERT_EQ(table_of(idx)[1].samples, 2);
    ctf_index_free(idx);
    /* The rebuilt cache is written and then trusted. */
    ASSERT_EQ(cached_build(&cfg, &l, &idx), 1);
    ASSERT_EQ(idx->num_seqs, 2);
    ctf_index_free(idx);
    /* Replaced by rename (a new inode) with the same size and the same mtime. */
    char other[600];
    snprintf(other, sizeof other, "%s.new", path);
    f = fopen(other, "wb");
    ASSERT(f);
    fwrite(cache_text, 1, strlen(cache_text), f);
    fclose(f);
    set_mtime(other, 1500000000, 123456790);
    ASSERT_EQ(rename(other, path), 0);
    ASSERT_EQ(cached_build(&cfg, &l, &idx), 0);
    ASSERT_EQ(idx->num_seqs, 3);
    ctf_index_free(idx);
}

TEST(index_cache_rebuilt_when_data_truncated_or_extended)
{
    char path[512];
    cache_data("ixc_len.ctf", path, sizeof path);
    ctf_config cfg;
    ilog l;
    icfg(&cfg, path, AB, 2, NULL);
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 0);
    /* Truncated (the last line removed), mtime put back: the size alone must tell. */
    ASSERT_EQ(truncate(path, (off_t)(strlen(cache_text) - strlen("3 |a 4 |b 2:1\n"))), 0);
    set_mtime(path, 1500000000, 123456789);
    ctf_index *idx;
    ASSERT_EQ(cached_build(&cfg, &l, &idx), 0);
    ASSERT(ilog_has(&l, CTF_SEV_INFO, "index cache ignored"));
    ASSERT_EQ(idx->num_seqs, 2);
    ctf_index_free(idx);
    /* Extended. */
    FILE *f = fopen(path, "ab");
    ASSERT(f);
    fputs("3 |a 4 |b 2:1\n4 |a 5 |b 3:1\n", f);
    fclose(f);
    set_mtime(path, 1500000000, 123456789);
    ASSERT_EQ(cached_build(&cfg, &l, &idx), 0);
    ASSERT_EQ(idx->num_seqs, 4);
    ctf_index_free(idx);
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 1);
}

TEST(index_cache_rebuilt_when_cache_corrupt_or_truncated)
{
    char path[512], cpath[600];
    cache_data("ixc_bad.ctf", path, sizeof path);
    ctf_index_cache_path(path, cpath, sizeof cpath);
    ctf_config cfg;
    ilog l;
    icfg(&cfg, path, AB, 2, NULL);
    ctf_index *ref;
    ASSERT_EQ(cached_build(&cfg, &l, &ref), 0);
    const long size = file_size(cpath);
    /* Header, 3 sequences of sizeof(ctf__seq), an 8-byte checksum. */
    const long table = size - 8 - 3 * (long)sizeof(ctf__seq);
    ASSERT(table > 0);
    /* Bytes in the table (each field of the last sequence), the checksum, the header. */
    const long spots[] = {table + 1,
                          size - 8 - 1,
                          size - 8 - 12,
                          size - 8 - 20,
                          table + (long)sizeof(ctf__seq),
                          size - 1,
                          size - 8,
                          0,
                          9,
                          table - 1,
                          table - 9};
    for (size_t i = 0; i < sizeof spots / sizeof *spots; i++) {
        ASSERT_EQ(cached_build(&cfg, &l, NULL), 1);
        flip_byte(cpath, spots[i]);
        ctf_index *idx;
        if (cached_build(&cfg, &l, &idx) != 0) {
            fprintf(stderr, "  flipped byte %ld of %ld was trusted\n", spots[i], size);
            ASSERT(0);
        }
        ASSERT(ilog_has(&l, CTF_SEV_INFO, "index cache ignored"));
        ASSERT_EQ(l.count[CTF_SEV_WARNING] + l.count[CTF_SEV_ERROR], 0);
        ASSERT(same_index(idx, ref));
        ctf_index_free(idx);
    }
    /* Truncations: inside the header, inside the table, the checksum, empty. */
    const long cuts[] = {0, 10, table - 1, table, table + 5, size - 8, size - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        ASSERT_EQ(cached_build(&cfg, &l, NULL), 1);
        ASSERT_EQ(truncate(cpath, cuts[i]), 0);
        ctf_index *idx;
        if (cached_build(&cfg, &l, &idx) != 0) {
            fprintf(stderr, "  cache cut to %ld bytes was trusted\n", cuts[i]);
            ASSERT(0);
        }
        ASSERT(ilog_has(&l, CTF_SEV_INFO, "index cache ignored"));
        ASSERT(same_index(idx, ref));
        ctf_index_free(idx);
    }
    /* Trailing garbage. */
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 1);
    FILE *f = fopen(cpath, "ab");
    ASSERT(f);
    fputc('x', f);
    fclose(f);
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 0);
    ctf_index_free(ref);
}

/* Each index-shaping option is part of the cache key. */
TEST(index_cache_rebuilt_when_options_change)
{
    char path[512];
    cache_data("ixc_opt.ctf", path, sizeof path);
    ctf_stream_def s[2] = {AB[0], AB[1]};
    ctf_config cfg;
    ilog l;
    icfg(&cfg, path, s, 2, NULL);
    ctf_index *idx;
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 0);
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 1);
    /* skipSequenceIds. */
    cfg.skip_sequence_ids = true;
    ASSERT_EQ(cached_build(&cfg, &l, &idx), 0);
    ASSERT(ilog_has(&l, CTF_SEV_INFO, "index-shaping options differ"));
    ASSERT(idx->line_mode);
    ASSERT_EQ(idx->num_seqs, 4);
    ctf_index_free(idx);
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 1);
    cfg.skip_sequence_ids = false;
    ASSERT_EQ(cached_build(&cfg, &l, &idx), 0);
    ASSERT_EQ(idx->num_seqs, 3);
    ctf_index_free(idx);
    /* definesMBSize stream. */
    s[1].defines_mb_size = true;
    ASSERT_EQ(cached_build(&cfg, &l, &idx), 0);
    ASSERT(ilog_has(&l, CTF_SEV_INFO, "index-shaping options differ"));
    ASSERT_EQ(table_of(idx)[0].samples, 1);
    ctf_index_free(idx);
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 1);
    s[1].defines_mb_size = false;
    s[0].defines_mb_size = true;
    ASSERT_EQ(cached_build(&cfg, &l, &idx), 0);
    ASSERT_EQ(table_of(idx)[0].samples, 2);
    ctf_index_free(idx);
    s[0].defines_mb_size = false;
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 0);
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 1);
    /* An alias. */
    s[1].alias = "c";
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 0);
    ASSERT(ilog_has(&l, CTF_SEV_INFO, "index-shaping options differ"));
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 1);
    s[1].alias = "b";
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 0);
    /* The chunk size does not shape the sequence table: the cache stays valid and the chunks
     * follow the new size. */
    ASSERT_EQ(cached_build(&cfg, &l, NULL), 1);
    cfg.chunk_size_bytes = 1;
    ASSERT_EQ(cached_build(&cfg, &l, &idx), 1);
    ASSERT_EQ(idx->num_chunks, 3);
    ctf_index_free(idx);
}

/* A cache that cannot be written is a warning, never an error. */
TEST(index_cache_unwritable_is_a_warning)
{
    char dir[600], path[700], cpath[800];
    snprintf(dir, sizeof dir, "%s/ro_dir", test_tmpdir());
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/d.ctf", dir);
    FILE *f = fopen(path, "wb");
    ASSERT(f);
    fputs(cache_text, f);
    fclose(f);
    ctf_index_cache_path(path, cpath, sizeof cpath);
    ctf_config cfg;
    ilog l;
    icfg(&cfg, path, AB, 2, NULL);
    if (geteuid() != 0) {
        /* A read-only directory (root ignores permissions, so only as a normal user). */
        chmod(dir, 0555);
        ctf_index *idx;
        int fc = cached_build(&cfg, &l, &idx);
        chmod(dir, 0755);
        ASSERT_EQ(fc, 0);
        ASSERT_EQ(idx->num_seqs, 3);
        ctf_index_free(idx);
        ASSERT(ilog_has(&l, CTF_SEV_WARNING, "could not create the index cache"));
        ASSERT(!file_exists(cpath));
    }
    /* The cache path taken by a directory: the rename fails. */
    ASSERT_EQ(mkdir(cpath, 0755), 0);
    char inner[900];
    snprintf(inner, sizeof inner, "%s/keep", cpath);
    f = fopen(inner, "wb");
    ASSERT(f);
    fclose(f);
    ctf_index *idx;
    ASSERT_EQ(cached_build(&cfg, &l, &idx), 0);
    ASSERT_EQ(idx->num_seqs, 3);
    ctf_index_free(idx);
    ASSERT_EQ(l.count[CTF_SEV_ERROR], 0);
    ASSERT(ilog_has(&l, CTF_SEV_WARNING, "index cache"));
    ASSERT(ilog_has(&l, CTF_SEV_WARNING, "continuing without it"));
    /* At trace level 0 the warning is not shown, and the build still succeeds. */
    memset(&l, 0, sizeof l);
    cfg.cache_index = true;
    cfg.trace_level = 0;
    ctf_error err;
    ASSERT_OK(ctf_index_build(&cfg, &idx, &err), &err);
    ctf_index_free(idx);
    ASSERT_EQ(l.n, 0);
    /* The reader opens fine too. */
    cfg.trace_level = 1;
    cfg.max_sweeps = 1;
    ctf_reader *r;
    ASSERT_OK(ctf_reader_open(&cfg, &r, &err), &err);
    ctf_reader_free(r);
    remove(inner);
    rmdir(cpath);
}

/* Fatal format problems come out of ctf_index_build itself, located. */
TEST(index_fatal_errors)
{
    ctf_config cfg;
    ctf_error err;
    ctf_index *idx = (ctf_index *)1;
    icfg(&cfg, test_write_str("ix_f1.ctf", "1 |a 1\n99999999999999999999 |a 1\n"), AB, 2, NULL);
    ASSERT_EQ(ctf_index_build(&cfg, &idx, &err), CTF_EPARSE);
    ASSERT(idx == NULL);
    ASSERT_U64_EQ(err.line, 2);
    ASSERT_EQ(err.offset, 7);
    icfg(&cfg, test_write_str("ix_f2.ctf", ""), AB, 2, NULL);
    ASSERT_EQ(ctf_index_build(&cfg, &idx, &err), CTF_EPARSE);
    ASSERT_STR_CONTAINS(err.message, "empty");
    icfg(&cfg, "/nonexistent/dir/x.ctf", AB, 2, NULL);
    ASSERT_EQ(ctf_index_build(&cfg, &idx, &err), CTF_EIO);
    ASSERT_STR_CONTAINS(err.path, "/nonexistent/dir/x.ctf");
    icfg(&cfg, NULL, AB, 2, NULL);
    ASSERT_EQ(ctf_index_build(&cfg, &idx, &err), CTF_EINVAL);
    /* A fatal error is never cached: the next build reports it again. */
    icfg(&cfg, test_write_str("ix_f3.ctf", "x |a 1\n"), AB, 2, NULL);
    cfg.cache_index = true;
    ASSERT_EQ(ctf_index_build(&cfg, &idx, &err), CTF_EPARSE);
    ASSERT_EQ(ctf_index_build(&cfg, &idx, &err), CTF_EPARSE);
    char cpath[600];
    ASSERT(!file_exists(ctf_index_cache_path(cfg.path, cpath, sizeof cpath)));
}

/* Line mode on two threads (index.c, scan_parallel) gives the index of the serial scan, byte for
 * byte: sequence table (offsets, first lines, line counts, samples), chunks, line count, the
 * checkpoint fingerprint. Random line-mode files: comment-only, unknown-input and blank lines
 * (anywhere, including right after the split point), a BOM, CRLF, no final newline,
 * definesMBSize, skipSequenceIds with ids in front. */
TEST(index_two_threads_equal_one)
{
    static const ctf_stream_def S[] = {{"feat", "a", 3, false, false},
                                       {"lab", "b", 5, true, false}};
    static const ctf_stream_def SMB[] = {{"feat", "a", 3, false, false},
                                         {"lab", "b", 5, true, true}};
    const uint64_t saved = ctf__index_parallel_min;
    ctf__index_parallel_min = 0;
    uint64_t rs = 12345;
    char *text = malloc(200000);
    ASSERT(text);
    for (int it = 0; it < 120; it++) {
        size_t n = 0;
        const int flavor = it % 6;
        const bool skip_ids = flavor == 4, crlf = flavor == 2, bom = flavor == 3;
        if (bom) n += (size_t)sprintf(text + n, "\xEF\xBB\xBF");
        const size_t target = 9000 + (size_t)(rs % 60000);
        size_t lines = 0;
        while (n < target) {
            rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
            const unsigned r = (unsigned)(rs >> 33) % 20;
            if (skip_ids) n += (size_t)sprintf(text + n, "%u ", (unsigned)(rs >> 40) % 50);
            if (lines == 0 || r < 12)
                n += (size_t)sprintf(text + n, "|a %u 2 3 |b %u:1", (unsigned)(rs >> 20) % 100,
                                     (unsigned)(rs >> 45) % 5);
            else if (r < 14)
                n += (size_t)sprintf(text + n, "|b 1:1");
            else if (r < 16)
                n += (size_t)sprintf(text + n, "|#just a comment");
            else if (r < 18)
                n += (size_t)sprintf(text + n, "|zz 1 2");
            else
                n += (size_t)sprintf(text + n, "   ");
            n += (size_t)sprintf(text + n, crlf ? "\r\n" : "\n");
            lines++;
        }
        if (flavor == 5 && n) n--; /* no final newline */
        text[n] = 0;
        const char *path = test_write_str("par.ctf", text);
        /* Every third file: the second thread stops after a few records and the first goes
         * on from there (the bound on what the second thread keeps). */
        const size_t keep_saved = ctf__index_half_keep;
        if (it % 3 == 0) ctf__index_half_keep = 1 + (size_t)(rs % 40);
        ctf_config c1, c2;
        icfg(&c1, path, flavor == 1 ? SMB : S, 2, NULL); /* 1: definesMBSize on b */
        c1.chunk_size_bytes = 4096;
        c1.skip_sequence_ids = skip_ids;
        c2 = c1;
        c1.num_threads = 0;
        c2.num_threads = 2;
        ctf_index *a = NULL, *b = NULL;
        ctf_error e;
        ASSERT_OK(ctf_index_build(&c1, &a, &e), &e);
        int rc2 = ctf_index_build(&c2, &b, &e);
        ctf__index_half_keep = keep_saved;
        ASSERT_OK(rc2, &e);
        if (!same_index(a, b)) {
            char msg[160];
            snprintf(msg, sizeof msg,
                     "file %d (flavor %d, %zu bytes): %zu vs %zu sequences, "
                     "lines %llu vs %llu",
                     it, flavor, n, a->num_seqs, b->num_seqs, (unsigned long long)a->total_lines,
                     (unsigned long long)b->total_lines);
            ctf_index_free(a);
            ctf_index_free(b);
            free(text);
            ctf__index_parallel_min = saved;
            test_fail(__FILE__, __LINE__, "the two-thread index equals the serial one", msg);
            return;
        }
        ctf_index_free(a);
        ctf_index_free(b);
    }
    free(text);
    ctf__index_parallel_min = saved;
}

/* The two-thread scan under allocation failures (each allocation in turn): CTF_ENOMEM or the
 * serial index, and nothing leaked, whichever thread's allocation failed. */
TEST(index_two_threads_allocation_failures)
{
    static const ctf_stream_def S[] = {{"feat", "a", 3, false, false}};
    const uint64_t saved = ctf__index_parallel_min;
    ctf__index_parallel_min = 0;
    char *text = malloc(60000);
    ASSERT(text);
    size_t n = 0;
    for (int i = 0; n < 50000; i++) n += (size_t)sprintf(text + n, "|a %d 2 3\n", i);
    const char *path = test_write_str("par_alloc.ctf", text);
    free(text);
    ctf_config c;
    icfg(&c, path, S, 1, NULL);
    c.num_threads = 0;
    ctf_index *ref = NULL;
    ctf_error e;
    ASSERT_OK(ctf_index_build(&c, &ref, &e), &e);
    c.num_threads = 2;
    bool clean = false;
    for (long k = 1; k < 200 && !clean; k++) {
        const long live = atomic_load(&ctf__alloc.live);
        atomic_store(&ctf__alloc.count, 0);
        ctf__alloc.fail_at = k;
        ctf_index *idx = NULL;
        int rc = ctf_index_build(&c, &idx, &e);
        ctf__alloc.fail_at = 0;
        clean = atomic_load(&ctf__alloc.count) < k; /* k went past the last allocation */
        if (rc) {
            ASSERT_EQ(rc, CTF_ENOMEM);
            ASSERT(!idx);
        } else {
            ASSERT(same_index(ref, idx));
            ctf_index_free(idx);
        }
        ASSERT_EQ(atomic_load(&ctf__alloc.live), live);
    }
    ASSERT(clean);
    ctf_index_free(ref);
    ctf__index_parallel_min = saved;
}
