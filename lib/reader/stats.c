/*
 * stats.c -- where a reader's time goes: the per-thread stage counters summed into ctf_perf,
 * and the verdict that names the stage limiting throughput. The rule lives here only; the
 * command-line tool, the Python package and docs/performance.md all take it from
 * ctf_perf_verdict.
 *
 * The stages count themselves with one-line calls (ctf__perf_add on their thread's slot):
 * source.c its reads, re-scans and parses, prefetch.c its loads, the consumer's waits and the
 * cache's evictions, reader.c the calls, the cut and the packing.
 */
#include "reader/reader.h"

#include <stdint.h>

int ctf__reader_perf_init(ctf_reader *r, size_t threads)
{
    const size_t n = threads + 1, align = _Alignof(ctf__perf_slot);
    /* Slots are a cache line each: the threads never share one. The allocator aligns to 16. */
    char *mem = CTF_CALLOC(1, n * sizeof(ctf__perf_slot) + align);
    if (!mem) return CTF_ENOMEM;
    r->perf_mem = mem;
    r->perf = (ctf__perf_slot *)(mem + (align - (uintptr_t)mem % align) % align);
    r->num_perf = n;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < CTF__PERF_NUM; k++) atomic_init(&r->perf[i].v[k], 0);
    return 0;
}

uint64_t ctf__minibatch_bytes(const ctf_minibatch *mb)
{
    uint64_t bytes = 0;
    const size_t ns = ctf_minibatch_num_streams(mb);
    for (size_t i = 0; i < ns; i++) {
        ctf_stream_view v;
        if (ctf_minibatch_stream(mb, i, &v)) continue;
        if (v.is_sparse)
            bytes += (uint64_t)v.nnz * ((size_t)v.precision + sizeof *v.indices) +
                     ((uint64_t)v.num_samples + 1) * sizeof *v.indptr;
        else
            bytes += (uint64_t)v.num_samples * v.dim * (size_t)v.precision;
    }
    return bytes;
}

size_t ctf_reader_get_perf(const ctf_reader *r, ctf_perf *out, size_t size)
{
    /* The chunks held are the reader's state, not a counter: a read-ahead changes them. */
    if (r->ra.asked) ctf__ahead_wait(r->ra.thread);
    uint64_t v[CTF__PERF_NUM] = {0};
    /* A mix: its own slot (the calls, the consumer, the packing) and every part's (the loads,
     * the waits); the index figures are the parts' sums. */
    const size_t nparts = r->mix ? r->mix->num_parts : 0;
    uint64_t index_ns = 0, index_bytes = 0, cache_hits = 0, cache_misses = 0, resident = 0;
    for (size_t q = 0; q <= nparts; q++) {
        const ctf_reader *x = q ? r->mix->parts[q - 1] : r;
        for (size_t i = 0; i < x->num_perf; i++)
            for (size_t k = 0; k < CTF__PERF_NUM; k++)
                v[k] += atomic_load_explicit(&x->perf[i].v[k], memory_order_relaxed);
        if (x->src) {
            index_ns += x->src->index_ns;
            index_bytes += x->src->index_bytes;
            cache_hits += x->src->index_cache_hits;
            cache_misses += x->src->index_cache_misses;
            resident += x->stats.chunks_resident;
        }
    }
    ctf_perf p = {0};
    p.next_calls = v[CTF__PERF_NEXT_CALLS];
    p.next_ns = v[CTF__PERF_NEXT_NS];
    p.consumer_ns = v[CTF__PERF_CONSUMER_NS];
    p.elapsed_ns = p.next_ns + p.consumer_ns;
    p.wait_ns = v[CTF__PERF_WAIT_NS];
    p.waits = v[CTF__PERF_WAITS];
    p.pack_ns = v[CTF__PERF_PACK_NS];
    p.pack_bytes = v[CTF__PERF_PACK_BYTES];
    p.minibatches = v[CTF__PERF_MINIBATCHES];
    /* A wait outside the minibatches' work (a seek's or a restore's walk over the records) is
     * not the cut's. */
    const uint64_t rest = p.wait_ns + p.pack_ns, work = v[CTF__PERF_WORK_NS];
    p.cut_ns = work > rest ? work - rest : 0;
    p.work_ns = work;
    p.cut_sequences = v[CTF__PERF_CUT_SEQS];
    p.cut_samples = v[CTF__PERF_CUT_SAMPLES];
    p.open_ns = r->open_ns;
    p.index_ns = index_ns;
    p.index_bytes = index_bytes;
    p.index_cache_hits = cache_hits;
    p.index_cache_misses = cache_misses;
    p.read_ns = v[CTF__PERF_READ_NS];
    p.read_bytes = v[CTF__PERF_READ_BYTES];
    p.reads = v[CTF__PERF_READS];
    p.rescan_ns = v[CTF__PERF_RESCAN_NS];
    p.parse_ns = v[CTF__PERF_PARSE_NS];
    p.parse_bytes = v[CTF__PERF_PARSE_BYTES];
    p.load_ns = v[CTF__PERF_LOAD_NS];
    p.chunks_loaded = v[CTF__PERF_LOADS];
    p.chunks_evicted = v[CTF__PERF_EVICTED];
    p.chunks_resident = resident;
    p.chunk_cache_hits = v[CTF__PERF_CHUNK_CACHE_HITS];
    p.chunk_cache_misses = v[CTF__PERF_CHUNK_CACHE_MISSES];
    p.remote_requests = v[CTF__PERF_REMOTE_REQUESTS];
    p.remote_retries = v[CTF__PERF_REMOTE_RETRIES];
    p.remote_bytes = v[CTF__PERF_REMOTE_BYTES];
    p.num_threads = r->cfg.num_threads;
    p.prefetch_chunks = r->cfg.prefetch_chunks;
    if (out && size) {
        memset(out, 0, size);
        memcpy(out, &p, CTF_MIN(size, sizeof p));
    }
    return sizeof p;
}

/*======================================================================
 * The verdict (docs/performance.md states the same rule in words)
 *====================================================================*/

static const char *const stage_names[] = {"none", "consumer", "read", "parse",
                                          "cut",  "pack",     "open"};

static int pct(double share) { return (int)(share * 100.0 + 0.5); }

void ctf_perf_verdict(const ctf_perf *perf, size_t size, ctf_verdict *out)
{
    ctf_perf p = {0};
    memcpy(&p, perf, CTF_MIN(size, sizeof p)); /* an older caller's struct: the rest reads 0 */
    memset(out, 0, sizeof *out);
    const double E = (double)p.elapsed_ns;
    char *t = out->text;
    const size_t cap = sizeof out->text;
    if (p.next_calls == 0 || p.elapsed_ns == 0) {
        out->stage = CTF_STAGE_NONE;
        out->stage_name = stage_names[CTF_STAGE_NONE];
        snprintf(t, cap, "no minibatch read yet: nothing to judge");
        return;
    }
    /* Opening first: a short run that spent most of its time indexing is limited by that. */
    const double open_share = (double)p.open_ns / ((double)p.open_ns + E);
    if (open_share >= 0.5) {
        out->stage = CTF_STAGE_OPEN;
        out->share = open_share;
        /* The index cache only helps when scanning was most of the open. */
        if (p.index_cache_hits == 0 && p.index_bytes > 0 && 2 * p.index_ns >= p.open_ns)
            snprintf(t, cap,
                     "opening: %d%% of the time (indexing %.1f ms of %.1f ms); set cache_index "
                     "so that later opens load the index instead of scanning the data",
                     pct(open_share), (double)p.index_ns * 1e-6, (double)p.open_ns * 1e-6);
        else
            snprintf(t, cap,
                     "opening: %d%% of the time (indexing %.1f ms of %.1f ms); the run is too "
                     "short for the reading to matter",
                     pct(open_share), (double)p.index_ns * 1e-6, (double)p.open_ns * 1e-6);
        out->stage_name = stage_names[out->stage];
        return;
    }
    const double consumer = (double)p.consumer_ns / E, wait = (double)p.wait_ns / E;
    const double pack = (double)p.pack_ns / E, cut = (double)p.cut_ns / E;
    if (consumer >= wait && consumer >= pack && consumer >= cut) {
        out->stage = CTF_STAGE_CONSUMER;
        out->share = consumer;
        snprintf(t, cap,
                 "the consumer is the bottleneck: the reader is idle %d%% of the time "
                 "(waiting for data %d%%, cutting %d%%, packing %d%%)",
                 pct(consumer), pct(wait), pct(cut), pct(pack));
    } else if (wait >= pack && wait >= cut) {
        /* Which part of a load the consumer waited for: the loads' own split. */
        const bool reads = p.read_ns > p.parse_ns + p.rescan_ns;
        out->stage = reads ? CTF_STAGE_READ : CTF_STAGE_PARSE;
        out->share = wait;
        /* Threads that are busy less than half the time are not the limit: the look-ahead
         * is too short to keep them fed. */
        const double busy = p.num_threads ? (double)p.load_ns / ((double)p.num_threads * E) : 1;
        const int n = snprintf(t, cap, "waiting for %s: %d%% of the consumer's time; ",
                               reads ? "reads" : "parse", pct(wait));
        if (p.num_threads && busy < 0.5)
            snprintf(t + n, cap - (size_t)n,
                     "the %llu prefetch threads are busy only %d%% of the time: raise "
                     "prefetch_chunks (now %llu)",
                     (unsigned long long)p.num_threads, pct(busy),
                     (unsigned long long)p.prefetch_chunks);
        else if (reads)
            snprintf(t + n, cap - (size_t)n,
                     "the storage delivers %.0f MB/s: move the data to faster storage, or "
                     "raise num_threads (now %llu) to keep more reads in flight",
                     p.read_ns ? (double)p.read_bytes * 1e3 / (double)p.read_ns : 0.0,
                     (unsigned long long)p.num_threads);
        else
            snprintf(t + n, cap - (size_t)n, "raise num_threads (now %llu)",
                     (unsigned long long)p.num_threads);
    } else if (pack >= cut) {
        out->stage = CTF_STAGE_PACK;
        out->share = pack;
        snprintf(t, cap,
                 "packing minibatches: %d%% of the consumer's time; raise num_threads (now "
                 "%llu: large minibatches are copied on the prefetch threads too)",
                 pct(pack), (unsigned long long)p.num_threads);
    } else {
        out->stage = CTF_STAGE_CUT;
        out->share = cut;
        snprintf(t, cap,
                 "cutting the timeline: %d%% of the consumer's time; each sequence of a "
                 "randomized sweep is a look-up of its own: fewer, longer sequences or a "
                 "smaller randomization_window cost less",
                 pct(cut));
    }
    out->stage_name = stage_names[out->stage];
}
