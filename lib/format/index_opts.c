/*
 * index_opts.c -- the options that shape an index, made from a configuration (with the hash the
 * index cache's header keeps) and copied for an index that outlives the configuration.
 */
#include "format/index_opts.h"


int ctf__index_opts_init(index_opts *o, const ctf_config *cfg)
{
    memset(o, 0, sizeof *o);
    o->skip_ids = cfg->skip_sequence_ids;
    o->aliases = CTF_CALLOC(cfg->num_streams, sizeof *o->aliases);
    o->alias_lens = CTF_CALLOC(cfg->num_streams, sizeof *o->alias_lens);
    if (!o->aliases || !o->alias_lens) {
        CTF_FREE(o->aliases);
        CTF_FREE(o->alias_lens);
        return CTF_ENOMEM;
    }
    uint64_t h = 0xcbf29ce484222325ull;
    h = ctf__hash_bytes(h, &o->skip_ids, 1);
    for (size_t i = 0; i < cfg->num_streams; i++) {
        const char *a = ctf__stream_field(&cfg->streams[i]);
        o->aliases[i] = a;
        o->alias_lens[i] = strlen(a);
        /* `|#` opens a comment even when an alias starts with '#' */
        if (o->alias_lens[i] && a[0] != '#') o->first[(unsigned char)a[0]] = true;
        h = ctf__hash_bytes(h, a, o->alias_lens[i] + 1);
        if (cfg->streams[i].defines_mb_size) {
            o->mb_alias = a;
            o->mb_alias_len = o->alias_lens[i];
            h = ctf__hash_bytes(h, "mb:", 3);
            h = ctf__hash_bytes(h, a, o->alias_lens[i] + 1);
        }
    }
    o->num_aliases = cfg->num_streams;
    o->hash = h;
    return 0;
}

void ctf__index_opts_free(index_opts *o)
{
    CTF_FREE(o->aliases);
    CTF_FREE(o->alias_lens);
    CTF_FREE(o->store);
}

index_opts *ctf__index_opts_keep(const index_opts *o)
{
    index_opts *k = CTF_MALLOC(sizeof *k);
    if (!k) return NULL;
    *k = *o;
    size_t total = 0;
    for (size_t i = 0; i < o->num_aliases; i++) total += o->alias_lens[i] + 1;
    k->aliases = CTF_CALLOC(o->num_aliases ? o->num_aliases : 1, sizeof *k->aliases);
    k->alias_lens = CTF_CALLOC(o->num_aliases ? o->num_aliases : 1, sizeof *k->alias_lens);
    k->store = CTF_MALLOC(total ? total : 1);
    if (!k->aliases || !k->alias_lens || !k->store) {
        ctf__index_opts_free(k);
        CTF_FREE(k);
        return NULL;
    }
    char *w = k->store;
    for (size_t i = 0; i < o->num_aliases; i++) {
        memcpy(w, o->aliases[i], o->alias_lens[i] + 1);
        k->aliases[i] = w;
        k->alias_lens[i] = o->alias_lens[i];
        if (o->mb_alias == o->aliases[i]) k->mb_alias = w;
        w += o->alias_lens[i] + 1;
    }
    return k;
}
