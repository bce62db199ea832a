/*
 * index_opts.h -- the options that shape an index (skipSequenceIds, the stream aliases, the
 * definesMBSize alias): what the scan looks for in a line, and what the index cache's header
 * hashes. Private to lib/format (index.c, index_opts.c).
 */
#ifndef CTFIO_INDEX_OPTS_H
#define CTFIO_INDEX_OPTS_H

#include "format/format.h"

typedef struct ctf__index_opts {
    bool skip_ids;
    const char *mb_alias;     /* alias of the definesMBSize stream, or NULL */
    size_t mb_alias_len;
    const char **aliases;     /* every configured alias (line mode: does a line hold data?) */
    size_t *alias_lens;
    size_t num_aliases;
    uint64_t hash;            /* of all of the above */
    bool first[256];          /* first bytes of the non-empty aliases: a cheap pre-filter */
    char *store;              /* owned copies of the aliases (an index's own options) */
} index_opts;

/* Fills o from the configuration's streams (o borrows their strings).
 * @return : 0 or CTF_ENOMEM. */
int ctf__index_opts_init(index_opts *o, const ctf_config *cfg);
void ctf__index_opts_free(index_opts *o);
/* A copy of o that owns its strings, kept by the index for the chunks' re-scans; NULL when out
 * of memory. */
index_opts *ctf__index_opts_keep(const index_opts *o);

#endif
