/*
 * ctfio_stats.c -- what the tool shows about a run: the stage counters and the verdict of
 * `ctfio dump --stats` (ctf_perf, ctf_perf_verdict), and the progress line that check, stats
 * and index draw on a terminal for large inputs (the same line convert draws).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "cli.h"
#include "ctfio.h"

#include <inttypes.h>
#include <stdio.h>
#include <unistd.h>

static double ms(uint64_t ns) { return (double)ns * 1e-6; }

static double mbps(uint64_t bytes, uint64_t ns)
{
    return ns ? (double)bytes * 1e3 / (double)ns : 0;
}

static int share(uint64_t part, uint64_t whole)
{
    return whole ? (int)((double)part * 100.0 / (double)whole + 0.5) : 0;
}

void ctfio_cli_print_perf(FILE *out, const ctf_reader *r)
{
    ctf_perf p;
    ctf_reader_get_perf(r, &p, sizeof p);
    ctf_verdict v;
    ctf_perf_verdict(&p, sizeof p, &v);
    const uint64_t e = p.elapsed_ns;
    fprintf(out,
            "stats: open %.1f ms (indexing %.1f ms, %" PRIu64 " bytes scanned, index cache "
            "%" PRIu64 " hits, %" PRIu64 " misses)\n",
            ms(p.open_ns), ms(p.index_ns), p.index_bytes, p.index_cache_hits, p.index_cache_misses);
    fprintf(out,
            "stats: consumer %.1f ms over %" PRIu64 " calls, %" PRIu64 " minibatches: "
            "its own work %d%%, waiting for data %d%% (%" PRIu64 " waits), cut %d%%, "
            "pack %d%%\n",
            ms(e), p.next_calls, p.minibatches, share(p.consumer_ns, e), share(p.wait_ns, e),
            p.waits, share(p.cut_ns, e), share(p.pack_ns, e));
    fprintf(out,
            "stats: cut %" PRIu64 " sequences, %" PRIu64 " samples; packed %" PRIu64
            " bytes (%.0f MB/s)\n",
            p.cut_sequences, p.cut_samples, p.pack_bytes, mbps(p.pack_bytes, p.pack_ns));
    fprintf(out,
            "stats: loads on %" PRIu64 " threads: read %" PRIu64 " bytes in %.1f ms "
            "(%.0f MB/s, %" PRIu64 " reads), re-scan %.1f ms, parse %" PRIu64
            " bytes in %.1f ms (%.0f MB/s), all loads %.1f ms\n",
            p.num_threads, p.read_bytes, ms(p.read_ns), mbps(p.read_bytes, p.read_ns), p.reads,
            ms(p.rescan_ns), p.parse_bytes, ms(p.parse_ns), mbps(p.parse_bytes, p.parse_ns),
            ms(p.load_ns));
    fprintf(out,
            "stats: chunks loaded %" PRIu64 ", evicted %" PRIu64 ", resident %" PRIu64
            "; chunk cache %" PRIu64 " hits, %" PRIu64 " misses; remote %" PRIu64
            " requests, %" PRIu64 " retries, %" PRIu64 " bytes\n",
            p.chunks_loaded, p.chunks_evicted, p.chunks_resident, p.chunk_cache_hits,
            p.chunk_cache_misses, p.remote_requests, p.remote_retries, p.remote_bytes);
    fprintf(out, "stats: verdict (%s): %s\n", v.stage_name, v.text);
}

/* Inputs below this many bytes are read too fast for a line to be worth drawing. */
#define PROGRESS_MIN_BYTES ((uint64_t)32 << 20)

void ctfio_progress_init(ctfio_progress *p, const char *what, int mode, uint64_t total_bytes)
{
    p->what = what;
    p->mode = mode;
    p->last_permille = -1;
    p->drawn = false;
    p->decided = total_bytes != 0;
    p->on = mode > 0 || (mode == 0 && total_bytes >= PROGRESS_MIN_BYTES && isatty(STDERR_FILENO));
}

void ctfio_progress_draw(ctfio_progress *p, uint64_t done, uint64_t total)
{
    if (!p->decided) ctfio_progress_init(p, p->what, p->mode, total ? total : 1);
    if (!p->on) return;
    const int pm = total ? (int)(done >= total ? 1000 : done * 1000 / total) : 1000;
    if (pm == p->last_permille) return;
    p->last_permille = pm;
    fprintf(stderr, "\r%s: %5.1f%%", p->what, pm / 10.0);
    fflush(stderr);
    p->drawn = true;
}

void ctfio_progress_end(ctfio_progress *p)
{
    if (p->drawn) fprintf(stderr, "\n");
    p->drawn = false;
}

int ctfio_progress_fn(void *user, uint64_t done, uint64_t total)
{
    ctfio_progress_draw(user, done, total);
    return 0;
}
