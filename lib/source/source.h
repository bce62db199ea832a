/*
 * source.h -- deserializers: the chunk table the reader works on, made from a corpus of CTF
 * files (corpus.c), sequence records re-made on demand (seqset.c), joins by key (join.c,
 * join_table.c) and the source a configuration describes (open.c).
 */
#ifndef CTFIO_SOURCE_H
#define CTFIO_SOURCE_H

#include "format/format.h"

/*======================================================================
 * Deserializers (corpus.c, join.c): the chunks and sequences the reader works on.
 *
 * The reader never sees a file. It sees a ctf__source: a table of chunks (what the randomizer
 * shuffles), each chunk's sequence records (samples for the timeline, key and line for the
 * minibatch), the file each chunk lives in, and a load function that reads and parses one
 * chunk into a ctf__chunk_data holding every configured stream. A CTF file is the elementary
 * deserializer (its ctf_index); a corpus of files puts their chunks one after another
 * (corpus.c); a join by key wraps a primary corpus and looks its sequences up in further
 * corpora (join.c). Randomization, the timeline, workers, packing, checkpoints and the
 * memory bound are written once, in the reader, against this table.
 *====================================================================*/

/* A chunk read buffer kept from one load to the next (one per loading thread). */
typedef struct ctf__readbuf {
    char *p;            /* a block of the chunk being loaded (CTF__LOAD_BLOCK) */
    size_t cap;
    ctf__seqbuf seqs;   /* the loaded chunk's sequence records */
    /* Set by the loader for a source with hands_seqs: the load hands chunk c's records over
     * once they are made and checked (a corpus: at the end of its block load). The receiver
     * owns them from then on and keeps them alive at least until the load returns; the load
     * leaves rb->seqs empty. */
    void (*publish)(void *ctx, size_t c, ctf__seq *seqs, size_t cap);
    void *publish_ctx;
    /* The loading thread's stage counters (NULL: none), set by the loader. */
    ctf__perf_slot *perf;
} ctf__readbuf;
/* @return : rb's buffer with at least `need` bytes, or NULL (out of memory; rb is empty then). */
char *ctf__readbuf_get(ctf__readbuf *rb, size_t need);
/* A load reads its chunk in blocks of this many bytes (more for a longer sequence: a block holds
 * at least one whole sequence). A variable only in test builds, which lower it. */
#define CTF__LOAD_BLOCK ((size_t)4 << 20)
#ifdef CTF_TESTING
extern size_t ctf__load_block;
#else
#define ctf__load_block CTF__LOAD_BLOCK
#endif

typedef struct ctf__source ctf__source;

/* One file of a source, with its own index (and index cache). */
typedef struct ctf__source_file {
    char *path;
    ctf_index *idx;
    ctf__parse_cfg pc;          /* the source's parse configuration with this file's path/mode */
} ctf__source_file;

struct ctf__source {
    /* The chunk table: sequences numbered 0..num_seqs-1 chunk after chunk, file after file
     * (chunks[c].first_seq); offset/size are within the chunk's file. */
    const ctf__chunk *chunks;
    size_t num_chunks;
    size_t num_seqs;
    uint64_t total_samples;
    const uint32_t *chunk_file;        /* per chunk: index into files */
    const ctf__source_file *files;     /* the files that chunks and keys refer to */
    size_t num_files;
    /* Every file read, primary and joined (for checkpoints: each one's fingerprint). */
    const ctf__source_file *fp_files;
    size_t num_fp_files;
    uint64_t total_bytes;              /* bytes over all files */
    uint64_t hash;                     /* over every file's index (fingerprints) */
    uint64_t warnings;                 /* warnings counted while opening */
    uint64_t dropped_sequences;        /* sequences dropped while opening (missing keys) */
    uint64_t keys_missing;             /* primary sequences a joined deserializer lacks */
    uint64_t keys_unmatched;           /* joined sequences whose key the primary lacks */
    /* Indexing at open, every file's: time, bytes scanned (0 for an index from its cache),
     * files whose index came from the index cache, files scanned while cache_index was on. */
    uint64_t index_ns, index_bytes, index_cache_hits, index_cache_misses;
    /* Reads and parses chunk c into data holding every stream the source delivers, with
     * cd->chunk == c. Thread-safe; rb is the calling thread's buffer, pool may be NULL. */
    int (*load)(ctf__source *s, ctf__readbuf *rb, size_t c, ctf__bufpool *pool,
                ctf__chunk_data **out, ctf_error *err);
    /* The load's records are this source's `seqs` for the chunk: it hands them over through
     * rb->publish, and the loader attaches them to the chunk's data (cd->seqs), so that the
     * consumer reads them there instead of asking `seqs` to make them again. */
    bool hands_seqs;
    /* Chunk c's sequence records, in chunk order. The records stay valid until the next call
     * of `seqs` on this source, so a source may produce them on demand per chunk (read from an
     * index cache, rescan the chunk) instead of holding every file's table: the reader asks for
     * a chunk's records only while the chunk is at the cursor, in the look-ahead or in a seek,
     * and uses them at once. Called from the reader's thread only. @return : 0, or an error
     * (CTF_EIO, CTF_ECHANGED, CTF_ENOMEM) with err filled. */
    int (*seqs)(ctf__source *s, size_t c, const ctf__seq **out, ctf_error *err);
    /* Parsed data the source holds itself (a join's part chunks), for the residency counters;
     * NULL when it holds none. Thread-safe. */
    void (*held)(ctf__source *s, size_t *chunks, size_t *bytes);
    void (*destroy)(ctf__source *s);
};

/* The chunk holding sequence `seq` (numbered over the whole source): a binary search over the
 * chunks' first sequences. */
static inline size_t ctf__source_chunk_of(const ctf__source *s, size_t seq)
{
    size_t lo = 0, hi = s->num_chunks;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->chunks[mid].first_seq <= seq)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

void ctf__source_free(ctf__source *s);

/* ctf__source_open(cfg, rem, pc, out, join_hash, err): the source a reader configuration
 * describes: cfg->paths (or cfg->path) as a corpus, joined by key with cfg->joins; rem serves
 * the remote paths among them (NULL: none may be remote). pc covers every stream,
 * the primary's then each join's (its streams must outlive the source). *join_hash receives a
 * fingerprint of the join settings (0 without joins). @return : 0 and *out, or an error. */
int ctf__source_open(const ctf_config *cfg, struct ctf__remote *rem, const ctf__parse_cfg *pc,
                     ctf__source **out, uint64_t *join_hash, ctf_error *err);
/* Checks cfg->joins (paths, streams, names unique over all deserializers, at most one
 * definesMBSize stream over all). @return : 0 or CTF_EINVAL naming the parameter. */
int ctf__joins_validate(const ctf_config *cfg, ctf_error *err);

/* ctf__corpus_open(cfg, paths, n, pc, max_errors, threads, out, err): a corpus of n files
 * (already expanded) with cfg's stream and index settings; pc is the parse configuration of its
 * streams (its path and line mode are set per file). @return : 0 and *out, or an error naming
 * the file. */
int ctf__corpus_open(const ctf_config *cfg, struct ctf__remote *rem, const char *const *paths,
                     size_t n, const ctf__parse_cfg *pc, uint64_t max_errors, size_t threads,
                     ctf__source **out, ctf_error *err);

/* Chunk c's sequence records of a corpus into out (from the index cache, or re-made from its
 * bytes read into rb): the fill of the corpus's own set, and, leaving that set alone, a pass
 * over every chunk once (a join's open). @return : 0, or an error (CTF_EIO, CTF_ECHANGED,
 * CTF_ENOMEM). */
int ctf__corpus_chunk_seqs(ctf__source *s, size_t c, ctf__readbuf *rb, ctf__seqbuf *out,
                           ctf_error *err);

/* The records of the chunks the consumer works in (at the cursor, in BPTT slots, in a seek's
 * walk), which a source keeps for its `seqs` (seqset.c); the source only fills an entry. It
 * holds at first the window in chunks (a window in samples over the mean chunk) and two more,
 * at least 3; least recently used first out. A chunk that comes back within `cap` misses of
 * being dropped doubles it, so a window wider than guessed costs one fill per chunk, not one
 * per sequence. When it would hold every chunk (keepDataInMemory, or a window over all of
 * them) each chunk has its own entry, filled once, exactly its size. */
typedef struct ctf__seqset_entry {
    size_t chunk;          /* SIZE_MAX: empty */
    uint64_t used;         /* LRU clock */
    ctf__seqbuf buf;
} ctf__seqset_entry;
typedef struct ctf__seqset {
    ctf__seqset_entry *e;
    size_t len, cap;
    size_t num_chunks;
    bool direct;           /* e[c] is chunk c's */
    uint64_t tick, misses;
    uint64_t *dropped;     /* per chunk: the miss count when it was last dropped (0: never) */
} ctf__seqset;
/* Fills out (grown to the chunk's count already) with chunk c's records. @return : 0 or an
 * error with err filled. */
typedef int (*ctf__seqset_fill_fn)(void *ctx, size_t c, ctf__seqbuf *out, ctf_error *err);
/* @return : 0, or CTF_ENOMEM (s is then freed with ctf__seqset_free all the same). */
int ctf__seqset_init(ctf__seqset *s, const ctf_config *cfg, size_t num_chunks, uint64_t samples);
/* Chunk c's records (need of them): the set's, or filled into the entry of the least recently
 * used chunk. Valid until the next call. @return : 0, or CTF_ENOMEM or fill's error. */
int ctf__seqset_get(ctf__seqset *s, size_t c, size_t need, ctf__seqset_fill_fn fill, void *ctx,
                    const ctf__seq **out, ctf_error *err);
void ctf__seqset_free(ctf__seqset *s);

/* ctf__expand_paths(rem, patterns, n, out, num_out, err): the corpus's file list: each pattern
 * holding '*', '?' or '[' is replaced by its matches in byte-wise sorted order (none is an
 * error; a remote pattern is listed through rem), other paths are kept. *out (strings and
 * array) is freed with ctf__free_paths. */
int ctf__expand_paths(struct ctf__remote *rem, const char *const *patterns, size_t n, char ***out,
                      size_t *num_out, ctf_error *err);
void ctf__free_paths(char **paths, size_t n);

/* ctf__join_open(cfg, primary, parts, num_parts, mb_part, origins, streams, prim_ns, ...):
 * a source that reads primary's chunks and, for each sequence, the streams of every part (a
 * corpus) found by key. streams: every stream, the primary's prim_ns first, then part_ns[j] for
 * each part (they must outlive the source). Takes ownership of primary, parts and the parts
 * array (also on failure). mb_part: the part (0 = primary, j + 1 = parts[j]) whose
 * definesMBSize stream sets the sequence lengths, or -1 for the largest. cfg: the window and
 * keepDataInMemory (how many chunks' records the consumer's set holds), the log for missing
 * keys. */
int ctf__join_open(const ctf_config *cfg, ctf__source *primary, ctf__source **parts,
                   size_t num_parts, int mb_part, const char *const *origins,
                   const ctf_stream_def *streams, size_t prim_ns, const size_t *part_ns,
                   ctf__source **out, ctf_error *err);


/*======================================================================
 * The chunk cache (chunkstore.c): parsed chunks kept on disk in CBF's chunk layout.
 *====================================================================*/

typedef struct ctf__chunkstore ctf__chunkstore;
/* The store of cfg->chunk_cache (*out NULL when there is none). A directory that cannot be
 * written is one warning through cfg->log, not an error: chunks are then only read from it.
 * @return : 0, or CTF_ENOMEM. */
int ctf__chunkstore_open(const ctf_config *cfg, ctf__chunkstore **out, ctf_error *err);
ctf__chunkstore *ctf__chunkstore_ref(ctf__chunkstore *s);
void ctf__chunkstore_unref(ctf__chunkstore *s);
/* A source's own load of chunk c (ctx: the source). */
typedef int (*ctf__load_fn)(void *ctx, size_t c, ctf__readbuf *rb, ctf__bufpool *pool,
                            ctf__chunk_data **out, ctf_error *err);
/* ctf__chunkstore_load(s, pc, idx, lc, c, rb, pool, load, ctx, out, err): chunk c (chunk lc of
 * idx's file, parsed with pc) decoded from its stored entry, or else loaded by `load` and, when
 * its parse was clean, stored. Either way the records are handed over as `load` hands them.
 * @return : 0, or load's error (the store's own failures only make misses). */
int ctf__chunkstore_load(ctf__chunkstore *s, const ctf__parse_cfg *pc, const ctf_index *idx,
                         size_t lc, size_t c, ctf__readbuf *rb, ctf__bufpool *pool,
                         ctf__load_fn load, void *ctx, ctf__chunk_data **out, ctf_error *err);
/* Gives a corpus (ctf__corpus_open's source) a reference to s for its text chunks. */
void ctf__corpus_set_store(ctf__source *corpus, ctf__chunkstore *s);

#endif /* CTFIO_SOURCE_H */
