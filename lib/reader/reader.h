/*
 * reader.h -- the reader object, shared by reader.c (the timeline, workers, next)
 * and state.c (checkpoints: save, restore, the fingerprint). Private to lib/.
 */
#ifndef CTFIO_READER_H
#define CTFIO_READER_H

#include "reader/pipeline.h"

#define CTF__MAX_SKIPPED 16

struct ctf_reader {
    ctf_config cfg;              /* deep copy: path and streams point into this object; every
                                  * deserializer's streams, the primary's first */
    char *path;                  /* the first data file (names the data in messages) */
    ctf_stream_def *streams;
    char **strings;              /* owned names and aliases */
    ctf__parse_cfg pc;           /* every stream: what minibatches hold */
    ctf__source *src;            /* the chunks and sequences read (corpus.c, join.c) */
    const ctf_index *idx;        /* the first file's index (ctf_reader_index) */
    uint64_t join_hash;          /* the joins' settings, for the configuration fingerprint */
    struct ctf__remote *remote;  /* the remote backend's context shared by every deserializer */
    ctf__cache *cache;           /* held chunks, the look-ahead and its loader (prefetch.c) */
    ctf_error err;               /* last error */
    int dead;                    /* a fatal error happened: only free is allowed */

    /* Timeline. */
    bool randomized;             /* randomize and a non-zero window */
    uint64_t sweep_samples;      /* index samples in one sweep */
    uint64_t min_seq_samples;    /* the fewest index samples of any sequence (every file's) */
    uint64_t limit;              /* stop before a sequence at this position (UINT64_MAX: none) */
    ctf__sweep_gen *gen;         /* the order of sweep cur_sweep, generated window by window */
    const size_t *pos_of_chunk;  /* randomized position of each chunk in cur_sweep (gen's) */
    uint64_t cur_sweep;
    size_t cur_slot;
    uint64_t position;
    bool ended;
    /* The stretches of the timeline skipped (ctf_reader_skip), [from, to) positions, oldest
     * first, adjacent ones merged; at most CTF__MAX_SKIPPED, the oldest dropped beyond (their
     * samples still counted in skipped_samples). Written in the state. */
    uint64_t skipped[16][2];
    size_t num_skipped;
    uint64_t skipped_samples;
    size_t num_workers, rank;

    /* Per chunk. */
    uint8_t *committed;          /* its problems were reported already */

    /* Truncated BPTT: parallel slots, each holding a sequence being delivered. */
    struct bptt_slot *bp;
    size_t num_bp, bp_cap;

    ctf_stats stats;
    struct ctf__quarantine *quar; /* the bad-records file (quarantine.c), or NULL */
    uint64_t suppressed_warnings;

    /* Stage counters (stats.c): num_threads + 1 slots, the consumer's first, in perf_mem
     * (aligned to a cache line); the open's time; the consumer's clock. */
    void *perf_mem;
    ctf__perf_slot *perf;
    size_t num_perf;
    uint64_t open_ns;
    uint64_t last_return_ns;     /* when the last ctf_reader_next returned (0: no call yet) */
    uint64_t pack_t0;            /* when this request's packing began (0: not yet) */

    ctf__pick *picks;            /* scratch for next() */
    size_t picks_cap;
    struct cut_item {
        size_t seq, chunk, pick;
        bool owned;
    } *cut;
    size_t cut_cap, cut_n;       /* the cut being made: its sequences so far */
    uint64_t cut_first_sweep;    /* the sweep current when it began */
    bool cut_eos;                /* it crossed a sweep end */
    size_t peek_seq, peek_chunk; /* the sequence the last peek saw, not yet taken */
    uint64_t peek_samples;
    struct ctf__mix *mix;        /* a mix of parts (mix.c), or NULL: this reader reads src */
    ctf__mb_pool *mb_pool;       /* freed minibatches for reuse (pack.c) */
    /* The next minibatch read ahead on a thread of its own (ahead.c; the rules: reader.c). */
    struct read_ahead {
        ctf__ahead *thread;      /* NULL: not started */
        bool off;                /* does not apply, or could not be started */
        bool asked;              /* outstanding: the reader is the thread's until it is taken
                                  * or dropped */
        uint64_t num_samples;    /* what it reads */
        uint64_t period;         /* ... and its epochs' period (ctf_reader_next_within) */
        uint64_t from;           /* the caller's position when it was asked */
        ctf_minibatch *mb;       /* its result */
        int rc;
        struct held_log *logs;   /* what it logged, for the caller's thread */
        size_t num_logs, logs_cap;
        /* To undo it: the chunks it committed (room for all), and what their commits change. */
        size_t *commits;
        size_t num_commits;
        ctf_stats stats0;
        uint64_t suppressed0;
        ctf_error err0;
    } ra;
};

/* One truncated-BPTT slot. */
typedef struct bptt_slot {
    bool busy;               /* holds a sequence with samples left */
    size_t seq, chunk;       /* the sequence and its chunk */
    uint64_t sweep;          /* timeline sweep and slot it was taken from (for checkpoints) */
    size_t tslot;
    uint64_t owner_pos; /* chunk position (randomized) or sweep slot that decides its worker */
    uint32_t offset; /* samples delivered so far */
    uint32_t length; /* its index samples */
    bool skip; /* dropped (unequal stream lengths): advance without delivering */
    bool recheck; /* restored mid-sequence: redo the length check, quietly */
} bptt_slot;

/* A mix: several part readers, one timeline (mix.c). The mix reader itself reads no source:
 * its cfg, streams, pc, position, limit, error record and minibatch pool are its own; the
 * parts hold the data, the caches and the threads. */
typedef struct ctf__mix {
    const struct ctf__mix_ops *ops; /* mix.c's functions */
    size_t num_parts;
    ctf_reader **parts;
    double *weights;
    size_t *file_base; /* each part's first entry in the mix's file list */
    size_t num_files;
    uint8_t *order; /* the part of each sequence of the cut being made */
    size_t order_cap;
    size_t *next_pick; /* per part: the next sequence of its cut to merge */
    uint64_t max_sweeps; /* end once every weighted part finished this many sweeps */
    uint64_t hash; /* the weights and parts, for the configuration fingerprint */
} ctf__mix;

/* The cut, one sequence at a time (reader.c), for the mix: begin; peek (1: *samples holds the
 * next sequence's index samples, 0: the limit) and take while it fits; close; pick this
 * worker's share (r->picks, cut[i].pick); done (evict, and prefetch when `more` is to be read)
 * after the minibatch is packed. `walk`: only lengths are wanted (a seek), nothing is loaded. */
void ctf__reader_cut_begin(ctf_reader *r);
int ctf__reader_cut_peek(ctf_reader *r, uint64_t left, bool walk, uint64_t *samples);
int ctf__reader_cut_take(ctf_reader *r);
void ctf__reader_cut_close(ctf_reader *r);
int ctf__reader_cut_pick(ctf_reader *r, size_t *np);
void ctf__reader_cut_done(ctf_reader *r, bool more);

/* The read-ahead (reader.c's rules over ahead.c's thread). asked: a read-ahead is outstanding
 * (the reader's state is then its thread's: ctf__ahead_wait(r->ra.thread) before reading
 * it). position: the caller's position (the one the last minibatch it was handed
 * ends at). take_back: undoes a read-ahead and seeks back to the caller's position (the
 * seek's status). */
bool ctf__reader_ahead_asked(const ctf_reader *r);
uint64_t ctf__reader_position_now(const ctf_reader *r);
int ctf__reader_take_back(ctf_reader *r);

/* Adds the skipped stretch [from, to) to r->skipped (merged with the last one when adjacent). */
void ctf__reader_note_skip(ctf_reader *r, uint64_t from, uint64_t to);

/* Copies cfg into r (streams, names, the first path), as ctf_reader_open does. */
int ctf__reader_copy_config(ctf_reader *r, const ctf_config *cfg, ctf_error *err);

/* The calls a mix reader hands over to mix.c: installed there, so that reader.c and state.c,
 * which mix.c builds on, name no symbol of it (the files' calls form no cycle). */
typedef struct ctf__mix_ops {
    void (*free)(ctf__mix *m);
    int (*next)(ctf_reader *r, uint64_t num_samples, ctf_minibatch **out);
    int (*seek)(ctf_reader *r, uint64_t position);
    int (*set_worker)(ctf_reader *r, size_t num_workers, size_t rank);
    void (*stats)(const ctf_reader *r, ctf_stats *stats);
    const char *(*file_path)(const ctf_reader *r, size_t i);
    const ctf_index *(*file_index)(const ctf_reader *r, size_t i);
    /* Moves every part to the given positions (a restore): the mix's position is their sum. */
    int (*set_positions)(ctf_reader *r, const uint64_t *positions);
} ctf__mix_ops;

/* The reader of one source (reader.c); ctf_reader_open (mix.c) opens a mix or this. */
int ctf__reader_open_source(const ctf_config *cfg, ctf_reader **out, ctf_error *err);

/* state.c: "size.sequences.index_hash.config_hash" of a reader's data and configuration, the
 * fingerprint a mix keeps per part. @return : its length (snprintf-style). */
int ctf__reader_fingerprint(const ctf_reader *r, char *buf, size_t cap);

/* stats.c: the slots of a reader with `threads` prefetch threads into r->perf / perf_mem.
 * @return : 0 or CTF_ENOMEM. */
int ctf__reader_perf_init(ctf_reader *r, size_t threads);
/* stats.c: bytes a minibatch delivers (values, indices, offsets), for the packing counters. */
uint64_t ctf__minibatch_bytes(const ctf_minibatch *mb);

/* reader.c's operations that state.c needs. */
int ctf__reader_fail_dead(ctf_reader *r, int rc); /* not EINVAL: the reader can only be freed */
void ctf__reader_evict_passed(ctf_reader *r);
void ctf__reader_schedule_prefetch(ctf_reader *r);
void ctf__reader_bptt_release(ctf_reader *r, bptt_slot *s);
size_t ctf__reader_chunk_of_seq(const ctf_reader *r, size_t seq);
/* Sequence seq of chunk c (numbered as in the chunk table): from the records the chunk's load
 * made when there are such (ctf__cache_seqs), else the source's; how as there. */
int ctf__reader_seq(ctf_reader *r, size_t c, size_t seq, ctf__seqs_how how, const ctf__seq **out);

#endif /* CTFIO_READER_H */
