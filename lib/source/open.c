/*
 * open.c -- the source a configuration describes: checks the joins' settings, opens the primary
 * corpus and each joined part, and wraps them in a join by key when there are parts (join.c).
 * The corpus (corpus.c) knows nothing of joins; this file is the only one that knows both.
 */
#include "source/source.h"
#include "io/io.h"

int ctf__joins_validate(const ctf_config *cfg, ctf_error *err)
{
    if (cfg->num_joins && !cfg->joins)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "config.joins: NULL with num_joins %zu",
                         cfg->num_joins);
    size_t total = cfg->num_streams;
    const char *mb = NULL;
    for (size_t i = 0; i < cfg->num_streams; i++)
        if (cfg->streams[i].defines_mb_size) mb = cfg->streams[i].name;
    for (size_t j = 0; j < cfg->num_joins; j++) {
        const ctf_join_def *J = &cfg->joins[j];
        const char *where = J->origin ? J->origin : "";
        if (!J->num_paths || !J->paths)
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                             "config.joins[%zu].paths: a joined deserializer needs at least one "
                             "file%s%s",
                             j, where[0] ? ", at " : "", where);
        if (!J->num_streams || !J->streams)
            return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                             "config.joins[%zu].streams: a joined deserializer needs at least one "
                             "stream%s%s",
                             j, where[0] ? ", at " : "", where);
        ctf_config jc = *cfg;
        jc.path = J->paths[0];
        jc.paths = NULL;
        jc.num_paths = 0;
        jc.streams = J->streams;
        jc.num_streams = J->num_streams;
        jc.skip_sequence_ids = J->skip_sequence_ids;
        jc.joins = NULL;
        jc.num_joins = 0;
        ctf_error e;
        if (ctf_config_validate(&jc, &e))
            return ctf__fail(err, e.code, CTF__NOWHERE, "config.joins[%zu]%s%s: %s", j,
                             where[0] ? " at " : "", where, e.message);
        for (size_t i = 0; i < J->num_streams; i++) {
            const ctf_stream_def *s = &J->streams[i];
            for (size_t o = 0; o < total + i; o++) {
                const ctf_stream_def *d = o < cfg->num_streams ? &cfg->streams[o] : NULL;
                if (!d) {
                    size_t x = o - cfg->num_streams;
                    for (size_t jj = 0; jj <= j; jj++) {
                        if (x < cfg->joins[jj].num_streams) {
                            d = &cfg->joins[jj].streams[x];
                            break;
                        }
                        x -= cfg->joins[jj].num_streams;
                    }
                }
                if (d && strcmp(d->name, s->name) == 0)
                    return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                                     "config.joins[%zu].streams[%zu].name: '%s' is already a "
                                     "stream of another deserializer (stream names are unique "
                                     "over all deserializers)",
                                     j, i, s->name);
            }
            if (s->defines_mb_size) {
                if (mb)
                    return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                                     "input.%s.definesMBSize: only one stream may define the "
                                     "minibatch size (also set on input.%s)",
                                     s->name, mb);
                mb = s->name;
            }
        }
        total += J->num_streams;
    }
    if (total > CTF_MAX_STREAMS)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                         "config.joins: at most %d streams over all deserializers (got %zu)",
                         CTF_MAX_STREAMS, total);
    return 0;
}

/* Opens one deserializer's corpus: its files (patterns expanded) with its streams. */
static int open_part(const ctf_config *cfg, ctf__remote *rem, const char *const *paths, size_t n,
                     bool expand, const ctf_stream_def *streams, size_t ns, bool skip_ids,
                     const ctf__parse_cfg *pc, ctf__chunkstore *store, ctf__source **out,
                     ctf_error *err)
{
    char **list = NULL;
    size_t len = 0;
    int rc;
    if (expand) {
        rc = ctf__expand_paths(rem, paths, n, &list, &len, err);
        if (rc) return rc;
    }
    ctf_config c = *cfg;
    c.streams = streams;
    c.num_streams = ns;
    c.skip_sequence_ids = skip_ids;
    ctf__parse_cfg p = *pc;
    p.streams = streams;
    p.num_streams = ns;
    rc = ctf__corpus_open(&c, rem, expand ? (const char *const *)list : paths, expand ? len : n, &p,
                          cfg->max_errors, cfg->num_threads, out, err);
    ctf__free_paths(list, len);
    if (!rc && store) ctf__corpus_set_store(*out, store);
    return rc;
}

static int open_source(const ctf_config *cfg, ctf__remote *rem, const ctf__parse_cfg *pc,
                       ctf__chunkstore *store, ctf__source **out, uint64_t *join_hash,
                       ctf_error *err);

int ctf__source_open(const ctf_config *cfg, ctf__remote *rem, const ctf__parse_cfg *pc,
                     ctf__source **out, uint64_t *join_hash, ctf_error *err)
{
    *out = NULL;
    *join_hash = 0;
    /* One chunk cache for every deserializer (each corpus holds a reference). */
    ctf__chunkstore *store = NULL;
    int rc = ctf__chunkstore_open(cfg, &store, err);
    if (rc) return rc;
    rc = open_source(cfg, rem, pc, store, out, join_hash, err);
    ctf__chunkstore_unref(store);
    return rc;
}

static int open_source(const ctf_config *cfg, ctf__remote *rem, const ctf__parse_cfg *pc,
                       ctf__chunkstore *store, ctf__source **out, uint64_t *join_hash,
                       ctf_error *err)
{
    ctf__source *prim = NULL, **parts = NULL;
    const char **origins = NULL;
    int rc;
    /* A single `path` is taken literally (as it always was); `paths` may hold patterns. */
    if (cfg->num_paths)
        rc = open_part(cfg, rem, cfg->paths, cfg->num_paths, true, pc->streams, cfg->num_streams,
                       cfg->skip_sequence_ids, pc, store, &prim, err);
    else
        rc = open_part(cfg, rem, &cfg->path, 1, false, pc->streams, cfg->num_streams,
                       cfg->skip_sequence_ids, pc, store, &prim, err);
    if (rc) return rc;
    if (!cfg->num_joins) {
        *out = prim;
        return 0;
    }
    parts = CTF_CALLOC(cfg->num_joins, sizeof *parts);
    origins = CTF_CALLOC(cfg->num_joins, sizeof *origins);
    if (!parts || !origins) {
        ctf__source_free(prim);
        CTF_FREE(parts);
        CTF_FREE(origins);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    size_t base = cfg->num_streams;
    int mb_part = -1;
    for (size_t i = 0; i < cfg->num_streams; i++)
        if (pc->streams[i].defines_mb_size) mb_part = 0;
    uint64_t h = 0x510e527fade682d1ull;
    for (size_t j = 0; j < cfg->num_joins; j++) {
        const ctf_join_def *J = &cfg->joins[j];
        for (size_t i = 0; i < J->num_streams; i++)
            if (pc->streams[base + i].defines_mb_size) mb_part = (int)j + 1;
        rc = open_part(cfg, rem, J->paths, J->num_paths, true, pc->streams + base, J->num_streams,
                       J->skip_sequence_ids, pc, store, &parts[j], err);
        if (rc) {
            for (size_t x = 0; x < j; x++) ctf__source_free(parts[x]);
            ctf__source_free(prim);
            CTF_FREE(parts);
            CTF_FREE(origins);
            return rc;
        }
        origins[j] = J->origin;
        uint64_t w[2] = {J->num_streams, J->skip_sequence_ids};
        h = ctf__hash_bytes(h, w, sizeof w);
        base += J->num_streams;
    }
    *join_hash = h | 1;
    size_t *part_ns = CTF_MALLOC(cfg->num_joins * sizeof *part_ns);
    if (!part_ns) {
        for (size_t j = 0; j < cfg->num_joins; j++) ctf__source_free(parts[j]);
        ctf__source_free(prim);
        CTF_FREE(parts);
        CTF_FREE(origins);
        return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    }
    for (size_t j = 0; j < cfg->num_joins; j++) part_ns[j] = cfg->joins[j].num_streams;
    rc = ctf__join_open(cfg, prim, parts, cfg->num_joins, mb_part, origins, pc->streams,
                        cfg->num_streams, part_ns, out, err);
    CTF_FREE(part_ns);
    CTF_FREE(origins);
    return rc;
}
