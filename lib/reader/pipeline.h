/*
 * pipeline.h -- the reader's stages after the source: packing (pack.c), chunk loading on
 * background threads (prefetch.c), randomization (randomize.c) and the chunk cache
 * (prefetch.c). reader.h adds the reader itself.
 */
#ifndef CTFIO_PIPELINE_H
#define CTFIO_PIPELINE_H

#include "source/source.h"

/*======================================================================
 * Packing (pack.c): picked sequences of parsed chunks -> an owned minibatch.
 *====================================================================*/

/* Freed minibatches kept for reuse: at most this many per reader. */
#define CTF__MB_POOL_SLOTS 4
/* A pooled block up to this size is kept however small the next minibatch (larger ones are
 * replaced when more than four times too large). */
#define CTF__MB_KEEP_BYTES ((size_t)64 << 10)
typedef struct ctf__mb_pool ctf__mb_pool;

/* ctf__mb_pool_close(pool): the reader is done with its pool: the minibatches it holds are
 * freed, and those still out are freed (not pooled) when their owner frees them; the pool
 * goes with the last of them. NULL is a no-op. */
void ctf__mb_pool_close(ctf__mb_pool *pool);

/* One sequence chosen for a minibatch. */
typedef struct ctf__pick {
    const ctf__chunk_data *cd;  /* its parsed chunk */
    size_t local;               /* its index inside the chunk */
    uint64_t key;               /* sequence key */
    uint64_t line;              /* 0-based first line */
    uint64_t samples;           /* index samples */
    uint32_t from;              /* first sample to deliver (truncated BPTT), else 0 */
    uint32_t count;             /* samples to deliver; UINT32_MAX = all */
    uint32_t file;              /* the source's file it comes from */
} ctf__pick;

/* The minibatch-level facts the reader decides. */
typedef struct ctf__mb_info {
    uint64_t position;          /* timeline position after the global minibatch */
    uint64_t sweep;             /* sweep of its first sequence */
    bool end_of_sweep;          /* the global minibatch held the last sequence of a sweep */
    bool corpus;                /* the source has several files: the JSON names each one */
    /* Optional: runs fn(arg, 0), ..., fn(arg, parts - 1), possibly on several threads, and
     * returns when all are done (NULL: the copies run on the caller's thread). */
    void (*run_parts)(void *ctx, void (*fn)(void *arg, size_t part), void *arg, size_t parts);
    void *run_ctx;
    size_t max_parts;           /* at most this many parts (the threads that can help) */
    /* Optional: the reader's pool of freed minibatches (made here on first use, the reader
     * frees it with ctf__mb_pool_close); NULL: every minibatch is allocated and freed. */
    ctf__mb_pool **pool;
} ctf__mb_info;

/* Each part of a parallel copy moves at least this much (smaller minibatches: one part). */
#define CTF__PACK_PART_BYTES ((size_t)256 << 10)
/* The sizes pass of a minibatch of at least CTF__PACK_SPLIT_PICKS (pick, stream) pairs is split
 * into parts of at least CTF__PACK_PART_PICKS: before the sizes are known the picks are what
 * the pass costs (a few misses each when randomized). Below the split, waking the threads cost
 * about 4% more CPU than the pass alone for no time saved. */
#define CTF__PACK_PART_PICKS ((size_t)256)
#define CTF__PACK_SPLIT_PICKS ((size_t)1024)

/* ctf__pack(pc, picks, n, info, out, err): copies the picked sequences' samples into one owned
 * minibatch, stream by stream, in pick order. Dropped sequences must not be passed.
 * @return : 0 or CTF_ENOMEM. */
int ctf__pack(const ctf__parse_cfg *pc, const ctf__pick *picks, size_t n, const ctf__mb_info *info,
              ctf_minibatch **out, ctf_error *err);


/*======================================================================
 * Prefetch (prefetch.c): chunk loading (read + parse) on background threads.
 *====================================================================*/

typedef struct ctf__loader ctf__loader;

/* How a chunk's sequence records may be got when nobody holds them yet. */
typedef enum ctf__seqs_how {
    CTF__SEQS_HELD,  /* only records at hand (held, loaded, published): never waits or reads */
    CTF__SEQS_ANY,   /* else a running load's (waiting for them), else the source's `seqs` */
    CTF__SEQS_LOAD   /* else the chunk's load, run on the caller's thread if nobody runs it */
} ctf__seqs_how;

/* ctf__loader_create(pc, src, threads, hold, out, err): starts `threads` workers (0: every load
 * runs on the caller's thread) that load src's chunks; its buffer pool also keeps the buffers of
 * `hold` chunks (ctf__bufpool_for). pc (all streams, for the buffer pool) and src must outlive
 * it. @return : 0 or CTF_ENOMEM. */
int ctf__loader_create(const ctf__parse_cfg *pc, ctf__source *src, size_t threads, size_t hold,
                       ctf__loader **out, ctf_error *err);
/* Counts the loader's work into perf (threads + 1 slots: the caller's, then its threads'), from
 * the next load on. */
void ctf__loader_set_perf(ctf__loader *l, ctf__perf_slot *perf);
#ifdef CTF_TESTING
/* Test builds: chunks put on the loader's queue (not those a caller loaded itself at once). */
extern atomic_long ctf__loader_queued;
#endif
/* Queues chunk c for a background load unless it is queued, loading or loaded already. */
int ctf__loader_request(ctf__loader *l, size_t c);
/* Hands over chunk c's parsed data, waiting for its load or loading it now. The caller owns
 * *out. @return : 0, or the load's error (CTF_EIO, CTF_ECHANGED, CTF_ENOMEM) with err filled. */
int ctf__loader_take(ctf__loader *l, size_t c, ctf__chunk_data **out, ctf_error *err);
/* ctf__loader_seqs(l, c, how, out): chunk c's sequence records as its load makes them (a
 * source with hands_seqs): those of a loaded chunk, or of a running load as soon as it has
 * published them (CTF__SEQS_ANY and _LOAD wait that long: a corpus's load publishes them at its
 * end, as its last block completes them); with CTF__SEQS_LOAD a chunk queued or not requested
 * is loaded on the caller's thread now, its data then waiting for ctf__loader_take, and while
 * it would wait the caller runs the next queued loads the same way. The records stay valid
 * until the chunk is taken (then they are its data's) or cancelled.
 * @return : true and *out, or false (no load made them: not requested, a failed load, a source
 *           without hands_seqs). */
bool ctf__loader_seqs(ctf__loader *l, size_t c, ctf__seqs_how how, const ctf__seq **out);
/* Forgets every request and loaded-but-untaken chunk (after a seek). */
void ctf__loader_drop_all(ctf__loader *l);
/* Forgets the request for chunk c and its loaded data, if any (a request no longer needed). */
void ctf__loader_cancel(ctf__loader *l, size_t c);
/* Runs fn(arg, 0 .. parts - 1): idle threads take parts before any queued load, the caller runs
 * every part nobody has started, then waits for the running ones. Without threads the caller
 * runs them all. The signature of ctf__mb_info.run_parts (ctx: the loader). */
void ctf__loader_run_parts(void *loader, void (*fn)(void *arg, size_t part), void *arg,
                           size_t parts);
/* Bytes held in loaded-but-untaken chunks, and their number. */
void ctf__loader_held(ctf__loader *l, size_t *chunks, size_t *bytes);
void ctf__loader_free(ctf__loader *l);

/*======================================================================
 * Read-ahead (ahead.c): a thread that runs one job at a time.
 *====================================================================*/

typedef struct ctf__ahead ctf__ahead;
/* Starts the thread; each ask runs run(arg) there once. @return : 0 or CTF_ENOMEM. */
int ctf__ahead_create(void (*run)(void *arg), void *arg, ctf__ahead **out);
/* Runs the job (the asker wrote its inputs before; none may run). */
void ctf__ahead_ask(ctf__ahead *a);
/* Until the asked job returned (at once if none was asked); its results are then the
 * asker's to read. */
void ctf__ahead_wait(ctf__ahead *a);
/* Waits for a job, then stops the thread. NULL is a no-op. */
void ctf__ahead_free(ctf__ahead *a);

/*======================================================================
 * Randomization (randomize.c): rules 5.
 *====================================================================*/

/* std::mt19937_64. */
typedef struct ctf__mt64 {
    uint64_t mt[312];
    size_t mti;
} ctf__mt64;

void ctf__mt64_seed(ctf__mt64 *g, uint64_t seed);
uint64_t ctf__mt64_next(ctf__mt64 *g);

/* The order of one sweep. */
typedef struct ctf__sweep {
    uint64_t sweep;        /* sweep number k */
    size_t num_slots;      /* = number of sequences */
    size_t *seq;           /* slot -> sequence index (file order numbering) */
    size_t *home;          /* slot -> randomized chunk position of that sequence's chunk */
    size_t *chunk_at;      /* randomized position -> chunk id; num_chunks entries */
    size_t num_chunks;
} ctf__sweep;

#ifdef CTF_TESTING /* the whole-sweep reference of the tests; the reader uses the generator */
/* ctf__randomize_sweep(chunks, num_chunks, window, window_in_samples, seed, sweep_no, out, err):
 * Computes sweep sweep_no's order exactly as rules 5 (seed + sweep_no seeds both generators;
 * chunk shuffle; windows in chunks or samples; sequence shuffle). window == 0 gives file order.
 * Sequences are numbered as in the index: chunk c holds first_seq .. first_seq+num_seqs-1.
 * out must be zeroed or previously filled (its arrays are reused/grown).
 * @return : 0 or CTF_ENOMEM. */
int ctf__randomize_sweep(const ctf__chunk *chunks, size_t num_chunks, uint64_t window,
                         bool window_in_samples, uint64_t seed, uint64_t sweep_no, ctf__sweep *out,
                         ctf_error *err);
/* ctf__sweep_identity: file order (randomize = false). */
int ctf__sweep_identity(const ctf__chunk *chunks, size_t num_chunks, uint64_t sweep_no,
                        ctf__sweep *out, ctf_error *err);
void ctf__sweep_free(ctf__sweep *s);
#endif

/* The order of one sweep, generated lazily (rules 5.8): slot by slot, running the sequence
 * shuffle only as far as the slots asked for need, with the same result as
 * ctf__randomize_sweep. Memory is O(chunks) plus the slots held: at most Wmax + L, where Wmax
 * is the number of slots in the widest window and L the largest look-ahead (slot asked minus
 * release point) of the consumer. File order (randomized false, or window 0) holds no slots. */
typedef struct ctf__sweep_gen ctf__sweep_gen;

/* ctf__sweepgen_create(chunks, num_chunks, window, window_in_samples, seed, sweep_no,
 *                      randomized, out, err):
 * Prepares sweep sweep_no (randomized when `randomized` and window > 0, else file order):
 * chunk shuffle and windows, O(chunks) work and memory. Only this call reads the chunk table
 * (it need not outlive the generator). chunk_at/pos_of are available at once.
 * @return : 0 and *out, or CTF_ENOMEM (*out NULL). */
int ctf__sweepgen_create(const ctf__chunk *chunks, size_t num_chunks, uint64_t window,
                         bool window_in_samples, uint64_t seed, uint64_t sweep_no, bool randomized,
                         ctf__sweep_gen **out, ctf_error *err);
/* ctf__sweepgen_get(g, slot, seq, home, err): the final sequence (file-order index) and home
 * position of slot `slot` (seq or home may be NULL). Slots may be asked in any order at or
 * above the release point; asking one ahead runs the shuffle up to it. File order: O(1) for
 * sequential asks.
 * @return : 0; CTF_EINVAL for a slot below the release point or past the end (nothing
 *           changes); CTF_ENOMEM (nothing changes: the generator stays usable). */
int ctf__sweepgen_get(ctf__sweep_gen *g, size_t slot, size_t *seq, size_t *home, ctf_error *err);
/* Whether asking for slot `slot` (within the sweep) would run shuffle steps first, and if so
 * the positions [*lo, *hi) whose chunks its sequence comes from: they can be loaded while the
 * shuffle runs. O(log chunks), nothing changes. */
bool ctf__sweepgen_pending(const ctf__sweep_gen *g, size_t slot, size_t *lo, size_t *hi);
/* The consumer will not ask for slots below `slot` again: their memory can be reused. A point
 * below the current one is ignored; one past the end counts as the end. */
void ctf__sweepgen_release(ctf__sweep_gen *g, size_t slot);
size_t ctf__sweepgen_num_slots(const ctf__sweep_gen *g);
uint64_t ctf__sweepgen_sweep(const ctf__sweep_gen *g);
const size_t *ctf__sweepgen_chunk_at(const ctf__sweep_gen *g); /* position -> chunk id */
const size_t *ctf__sweepgen_pos_of(const ctf__sweep_gen *g);   /* chunk id -> position */
#ifdef CTF_TESTING
/* Largest number of slots held at once so far (the ring's capacity is a power of two below
 * max(32, 2 x this)). */
size_t ctf__sweepgen_peak_slots(const ctf__sweep_gen *g);
#endif
void ctf__sweepgen_free(ctf__sweep_gen *g);

/*======================================================================
 * Chunk cache (prefetch.c): which parsed chunks are held and which are loaded ahead.
 *
 * The reader asks the cache for a chunk (ctf__cache_get) and tells it what the timeline
 * consumed (ctf__cache_consumed, _pin, _unpin); the cache holds a chunk while the sweep is
 * inside it or a BPTT slot pins it (or always, with keep_data_in_memory), evicts passed chunks
 * (ctf__cache_evict_passed), and decides what the loader parses ahead (ctf__cache_schedule: a
 * look-ahead over the sweep generator, into the next sweep near a sweep's end).
 *====================================================================*/
typedef struct ctf__cache ctf__cache;

typedef struct ctf__cache_cfg {
    size_t num_threads;          /* loader threads (0: every load runs on the caller's) */
    size_t prefetch_chunks;      /* at most this many loaded ahead and not yet taken */
    bool keep_data_in_memory;    /* never evict */
    bool randomized;             /* sweeps in randomized order (ownership by chunk position) */
    bool same_sweep_only;        /* never look into the next sweep (truncated BPTT) */
    uint64_t window;             /* the sweep generator's settings, for the next sweep's */
    bool window_in_samples;
    uint64_t seed;
    uint64_t sweep_samples;      /* index samples in one sweep */
    uint64_t limit;              /* the timeline ends here (UINT64_MAX: never) */
    ctf_stats *stats;            /* kept current: chunks_loaded, *_resident and their peaks */
    /* Stage counters, num_threads + 1 slots: the consumer's first, then one per loader
     * thread (NULL: none counted). Must outlive the cache. */
    ctf__perf_slot *perf;
} ctf__cache_cfg;

/* ctf__cache_create(pc, src, cfg, out, err): the cache and its loader (cfg->num_threads
 * threads). pc, src and cfg->stats must outlive it. @return : 0 or CTF_ENOMEM. */
int ctf__cache_create(const ctf__parse_cfg *pc, ctf__source *src, const ctf__cache_cfg *cfg,
                      ctf__cache **out, ctf_error *err);
/* The loader, for ctf__loader_run_parts. */
ctf__loader *ctf__cache_loader(ctf__cache *k);
/* Makes sweep k current in *gen (a no-op if it is): adopts the look-ahead's generator when it
 * opened sweep k already, else creates one; cancels requests that will never be taken and
 * resets the consumed counters. @return : 0, or CTF_ENOMEM with *gen unchanged. */
int ctf__cache_open_sweep(ctf__cache *k, uint64_t sweep, ctf__sweep_gen **gen, ctf_error *err);
/* Forgets the look-ahead's generator of the next sweep (before a seek). */
void ctf__cache_drop_next_sweep(ctf__cache *k);
/* Chunk c's parsed data, held from now on until evicted; loaded now if nobody did.
 * @return : 0, or the load's error with err filled. */
int ctf__cache_get(ctf__cache *k, size_t c, const ctf__chunk_data **out, ctf_error *err);
/* ctf__cache_seqs(k, c, how, out, err): chunk c's sequence records for the consumer: those the
 * chunk's load made (attached to its data, held or loaded ahead), so that a chunk's records are
 * made once per load; failing that as `how` says, the source's `seqs` last. Valid while the
 * chunk is held or loaded ahead, and until the next call otherwise. *out is NULL only with
 * CTF__SEQS_HELD. @return : 0, or the source's error. */
int ctf__cache_seqs(ctf__cache *k, size_t c, ctf__seqs_how how, const ctf__seq **out,
                    ctf_error *err);
/* Whether the records ctf__cache_seqs gave for chunk c are regular: the i-th sequence of the
 * chunk is one sample, its key and line the first record's plus i (a sequence's record need
 * not be read: in a randomized sweep, a cache miss each). */
bool ctf__cache_regular(const ctf__cache *k, size_t c);
/* One more sequence of chunk c cut in the current sweep. */
void ctf__cache_consumed(ctf__cache *k, size_t c);
/* A BPTT slot takes / lets go of a sequence of chunk c: held while pinned. */
void ctf__cache_pin(ctf__cache *k, size_t c);
void ctf__cache_unpin(ctf__cache *k, size_t c);
/* Frees the held chunks the sweep has passed (none with keep_data_in_memory). */
void ctf__cache_evict_passed(ctf__cache *k);
/* Asks the loader for the chunks this worker (rank of workers) needs next from slot `slot` of
 * sweep `sweep` (gen), keeping at most prefetch_chunks outstanding. */
void ctf__cache_schedule(ctf__cache *k, ctf__sweep_gen *gen, uint64_t sweep, size_t slot,
                         size_t workers, size_t rank);
/* Whether chunk c is held, or asked for in the current sweep or for the next. */
bool ctf__cache_asked(const ctf__cache *k, size_t c);
/* Asks the loader for chunk c of the current sweep now, unless held or asked for already
 * (a minibatch's chunks, all at once). */
void ctf__cache_request(ctf__cache *k, size_t c);
/* Forgets every request (after a seek or a worker change): the look-ahead restarts at slot. */
void ctf__cache_restart(ctf__cache *k, size_t slot);
/* Updates cfg->stats' residency counters and peaks (held, loaded ahead, a join's parts). */
void ctf__cache_update_stats(ctf__cache *k);
#ifdef CTF_TESTING /* for the tests of the cache */
/* Held chunks and their bytes (not counting those loaded ahead). */
void ctf__cache_held(const ctf__cache *k, size_t *chunks, size_t *bytes);
/* Requests made and not yet taken. */
size_t ctf__cache_outstanding(const ctf__cache *k);
#endif
void ctf__cache_free(ctf__cache *k);


#endif /* CTFIO_PIPELINE_H */
