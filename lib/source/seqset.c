/*
 * seqset.c -- the consumer's set of per-chunk sequence records that a source keeps for its
 * `seqs` (a corpus, a join): lookup, least-recently-used eviction and the doubling rule. Each
 * source supplies only how an entry is filled (see ctf__seqset in source/source.h).
 */
#include "source/source.h"

/* The window in chunks (a window in samples over the mean chunk) and two more, at least 3;
 * every chunk with keepDataInMemory. */
static size_t set_size(const ctf_config *cfg, size_t num_chunks, uint64_t samples)
{
    /* keepDataInMemory holds every parsed chunk for later sweeps: their records too, so that a
     * later sweep never reads the file again. */
    if (cfg->keep_data_in_memory) return num_chunks ? num_chunks : 1;
    uint64_t w = 0;
    if (ctf__randomized(cfg) && (!cfg->window_in_samples || samples))
        w = ctf__window_chunks(cfg->randomization_window, cfg->window_in_samples, samples,
                               num_chunks);
    /* The cursor's sequences come from the chunks of one window: two more cover its edges. */
    w += 2;
    if (w < 3) w = 3;
    if (num_chunks && w > num_chunks) w = num_chunks;
    return (size_t)w;
}

int ctf__seqset_init(ctf__seqset *s, const ctf_config *cfg, size_t num_chunks, uint64_t samples)
{
    *s = (ctf__seqset){0};
    s->cap = set_size(cfg, num_chunks, samples);
    s->direct = s->cap >= num_chunks;
    if (s->direct) {
        s->cap = num_chunks ? num_chunks : 1;
        s->e = CTF_MALLOC(s->cap * sizeof *s->e);
        if (!s->e) return CTF_ENOMEM;
        for (size_t i = 0; i < s->cap; i++) s->e[i] = (ctf__seqset_entry){.chunk = SIZE_MAX};
        s->len = s->cap;
        return 0;
    }
    s->num_chunks = num_chunks;
    s->e = CTF_MALLOC(s->cap * sizeof *s->e);
    s->dropped = CTF_CALLOC(num_chunks, sizeof *s->dropped);
    return s->e && s->dropped ? 0 : CTF_ENOMEM;
}

int ctf__seqset_get(ctf__seqset *s, size_t c, size_t need, ctf__seqset_fill_fn fill, void *ctx,
                    const ctf__seq **out, ctf_error *err)
{
    ctf__seqset_entry *e;
    s->tick++;
    if (s->direct) {
        e = &s->e[c];
        if (e->chunk == c) {
            *out = e->buf.p;
            return 0;
        }
        /* The entry is this chunk's for good: exactly its size. */
        if (!e->buf.p || e->buf.cap < need) {
            const size_t n = need ? need : 1;
            ctf__seq *p = CTF_REALLOC(e->buf.p, n * sizeof *p);
            if (!p)
                return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE,
                                 "out of memory for the sequence records of chunk %zu", c);
            e->buf = (ctf__seqbuf){p, n};
        }
    } else {
        for (size_t i = 0; i < s->len; i++)
            if (s->e[i].chunk == c) {
                s->e[i].used = s->tick;
                *out = s->e[i].buf.p;
                return 0;
            }
        s->misses++;
        /* Back within cap misses of being dropped: the window is wider than the set. */
        if (s->dropped[c] && s->misses - s->dropped[c] <= s->cap && s->cap < s->num_chunks) {
            ctf__seqset_entry *n = CTF_REALLOC(s->e, 2 * s->cap * sizeof *n);
            if (!n) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
            s->e = n;
            s->cap *= 2;
        }
        if (s->len < s->cap) {
            e = &s->e[s->len++];
            *e = (ctf__seqset_entry){.chunk = SIZE_MAX};
        } else {
            e = &s->e[0];
            for (size_t i = 1; i < s->len; i++)
                if (s->e[i].used < e->used) e = &s->e[i];
            if (e->chunk != SIZE_MAX) s->dropped[e->chunk] = s->misses;
        }
        e->chunk = SIZE_MAX;
        if (e->buf.cap < need && ctf__grow((void **)&e->buf.p, &e->buf.cap, need, sizeof *e->buf.p))
            return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE,
                             "out of memory for the sequence records of chunk %zu", c);
    }
    int rc = fill(ctx, c, &e->buf, err);
    if (rc) return rc;
    e->chunk = c;
    e->used = s->tick;
    *out = e->buf.p;
    return 0;
}

void ctf__seqset_free(ctf__seqset *s)
{
    if (s->e)
        for (size_t i = 0; i < s->len; i++) CTF_FREE(s->e[i].buf.p);
    CTF_FREE(s->e);
    CTF_FREE(s->dropped);
    *s = (ctf__seqset){0};
}
