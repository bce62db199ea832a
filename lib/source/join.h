/*
 * join.h -- what join.c (the joined source: loads, the consumer's records) and join_table.c
 * (the join's tables, built at open by external sorting, kept on disk) share.
 */
#ifndef CTFIO_JOIN_H
#define CTFIO_JOIN_H

#include "source/source.h"

/* Where spilled bytes go: an unlinked temporary file (in the primary's directory, else the
 * system's temporary directory) or, when neither can be created, memory. */
typedef struct ctf__jspill {
    char *dir;             /* the primary's first file's directory (owned) */
    int level;             /* 0: dir, 1: tmpfile(), 2: memory; only goes up */
    int why;               /* errno of the last file that could not be created */
    bool warned;           /* the fall back to memory was logged */
    ctf_log_fn log;
    void *log_user;
    int trace_level;
} ctf__jspill;

/* An append-only byte store, then read at offsets by any thread (pread). */
typedef struct ctf__jstore {
    int fd;                /* -1: the bytes are in mem */
    char *mem;
    uint64_t len;          /* bytes appended (buffered ones included) */
    uint64_t cap;          /* mem's capacity */
    char *wbuf;            /* the append buffer (file stores) */
    size_t wlen;
} ctf__jstore;

int ctf__jstore_open(ctf__jstore *s, ctf__jspill *sp, ctf_error *err);
int ctf__jstore_append(ctf__jstore *s, const void *p, size_t n, ctf_error *err);
/* Writes out the append buffer: the bytes appended so far can be read. */
int ctf__jstore_flush(ctf__jstore *s, ctf_error *err);
/* Reads n bytes at off (appended and flushed). Thread-safe. */
int ctf__jstore_read(const ctf__jstore *s, void *p, size_t n, uint64_t off, ctf_error *err);
void ctf__jstore_close(ctf__jstore *s);

/* One part reference of a joined sequence: the part's sequence number and its bytes [b, e)
 * in its file (a part problem belongs to the joined sequence whose bytes hold it). */
typedef struct ctf__jref {
    uint64_t js, b, e;
} ctf__jref;

/* The join's tables: in memory its chunk table; on disk, per joined sequence (numbered as in
 * the chunk table), its record (seqs: the primary's record with the joined length) and its
 * links (links: its index in the primary chunk, then a ctf__jref per part). */
typedef struct ctf__jtable {
    ctf__chunk *chunks;
    size_t *pchunk;        /* chunk -> the primary's chunk */
    uint32_t *chunk_file;
    size_t num_chunks, num_seqs;
    uint64_t total_samples;
    uint64_t dropped;      /* primary sequences a part lacks (dropped, warned) */
    uint64_t unmatched;    /* part sequences whose key the primary lacks */
    ctf__jstore seqs;      /* ctf__seq per joined sequence */
    ctf__jstore links;     /* link_bytes per joined sequence */
    size_t link_bytes;     /* 8 + 24 x parts */
} ctf__jtable;

/* What building the table needs. */
typedef struct ctf__jbuild {
    ctf__source *prim;
    ctf__source *const *parts;
    const char *const *origins; /* per part: where it was configured, or NULL */
    size_t np;
    int mb_part;           /* the part whose definesMBSize stream sets lengths (0: primary), -1 */
    ctf_log_fn log;
    void *log_user;
    int trace_level;
} ctf__jbuild;

/* Builds t (zeroed by the caller; freed with ctf__jtable_free also on failure): streams every
 * deserializer's records chunk by chunk into sorted runs, merge-joins them by key, and writes
 * the kept sequences' records in primary order. Drops, warnings and errors as documented in
 * docs/design.md ("The deserializer seam", point 3). */
int ctf__jtable_build(const ctf__jbuild *in, ctf__jtable *t, ctf_error *err);
void ctf__jtable_free(ctf__jtable *t);

/* A part's name in messages: where it was configured, else its position and first file. */
void ctf__join_part_name(const ctf__source *src, const char *origin, size_t j, char *buf,
                         size_t cap);

/* Bytes of records one sorted run holds in memory before it is written out, and where spills
 * start: 0 the primary's directory, 1 the system's temporary directory, 2 memory. Variables
 * only in test builds (which lower the first, and raise the second to act out a read-only
 * directory and no temporary directory). */
#define CTF__JOIN_RUN_BYTES ((size_t)4 << 20)
#ifdef CTF_TESTING
extern size_t ctf__join_run_bytes;
extern int ctf__join_spill_from;
#else
#define ctf__join_run_bytes CTF__JOIN_RUN_BYTES
#define ctf__join_spill_from 0
#endif
#ifdef CTF_TESTING
/* Sorted runs written to a store, and the spill level of the last table built (tests). */
extern atomic_long ctf__join_runs_written;
extern atomic_int ctf__join_spill_used;
#endif

#endif /* CTFIO_JOIN_H */
