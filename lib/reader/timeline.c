/*
 * timeline.c -- the cut and the worker split as pure functions: a position and a request in,
 * a decision out, nothing held between calls. The reader (reader.c, mix.c, prefetch.c) makes
 * every decision of its timeline through them, and the Python package's in-memory source calls
 * them through the extension, so the two cannot drift apart (rules 6.1-6.4, 7.2-7.6).
 *
 * The reader's sweeps come from the sweep generator one sequence at a time, so it drives
 * ctf_cut_offer itself. A source whose sweeps repeat one known order (lengths in memory) hands
 * the whole order to ctf_sweep_cut, which offers the sequences the same way.
 */
#include "common/common.h"

#include <inttypes.h>

ctf_cut ctf_cut_start(uint64_t position, uint64_t request, uint64_t limit)
{
    return (ctf_cut){.request = request, .limit = limit, .position = position};
}

bool ctf_cut_open(const ctf_cut *cut) { return cut->position < cut->limit; }

bool ctf_cut_offer(ctf_cut *cut, uint64_t samples)
{
    const uint64_t left = cut->samples < cut->request ? cut->request - cut->samples : 0;
    /* The first sequence goes in whatever its length: a minibatch is never empty while data
     * is left, and a sequence is never split. */
    if (cut->sequences && samples > left) return false;
    cut->samples += samples;
    cut->position += samples;
    cut->sequences++;
    return true;
}

bool ctf_worker_owns(uint64_t index, size_t num_workers, size_t rank)
{
    return num_workers <= 1 || index % num_workers == rank;
}

uint64_t ctf_worker_first(uint64_t from, size_t num_workers, size_t rank)
{
    if (num_workers <= 1) return from;
    return from + (rank + num_workers - from % num_workers) % num_workers;
}

/* The first i with starts[i] >= within (num_seqs when none). */
static size_t first_at(const uint64_t *starts, size_t num_seqs, uint64_t within)
{
    size_t lo = 0, hi = num_seqs;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (starts[mid] < within)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int ctf_sweep_cut(const uint64_t *starts, size_t num_seqs, ctf_cut *cut, bool *end_of_sweep,
                  ctf_error *err)
{
    if (!starts || num_seqs == 0 || starts[0] != 0 || starts[num_seqs] == 0)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                         "sweep: need at least one sequence, starting at 0, and samples");
    if (cut->request == 0)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE, "num_samples: must be > 0 (got 0)");
    if (cut->position > CTF_MAX_POSITION)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                         "position: must be <= %" PRIu64 " (got %" PRIu64 ")",
                         (uint64_t)CTF_MAX_POSITION, cut->position);
    const uint64_t sweep_samples = starts[num_seqs];
    size_t i = first_at(starts, num_seqs, cut->position % sweep_samples);
    if (starts[i] != cut->position % sweep_samples)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                         "position: %" PRIu64 " is not a sequence boundary", cut->position);
    ctf_cut c = *cut;
    bool eos = false;
    while (ctf_cut_open(&c) && ctf_cut_offer(&c, starts[i + 1] - starts[i]))
        if (++i == num_seqs) {
            i = 0;
            eos = true;
        }
    *cut = c;
    *end_of_sweep = eos;
    return 0;
}

uint64_t ctf_sweep_boundary(const uint64_t *starts, size_t num_seqs, uint64_t position)
{
    const uint64_t sweep_samples = starts[num_seqs], sweep = position / sweep_samples;
    return sweep * sweep_samples + starts[first_at(starts, num_seqs, position % sweep_samples)];
}

size_t ctf_sweep_owned(const uint64_t *starts, size_t num_seqs, uint64_t from, uint64_t to,
                       size_t num_workers, size_t rank, uint64_t *out)
{
    const uint64_t sweep_samples = starts[num_seqs], step = num_workers ? num_workers : 1;
    size_t n = 0;
    while (from < to) {
        const uint64_t base = from / sweep_samples * sweep_samples;
        const size_t a = first_at(starts, num_seqs, from - base);
        const size_t b = first_at(starts, num_seqs, CTF_MIN(to - base, sweep_samples));
        for (uint64_t i = ctf_worker_first(a, num_workers, rank); i < b; i += step) out[n++] = i;
        from = base + starts[b];
    }
    return n;
}
