/*
 * pool.c -- one pass of a provider's samples: records from the user's sources enter a bounded
 * pool and leave it in batches, shuffled by a seeded draw or first in, first out. The caller
 * owns the sources (they run user code) and refills the pool through a fill function; which
 * source feeds next, when the pool is refilled and what a batch draws are decided here from
 * (seed, pass) and the records alone, so threads and timing never change a batch, and a pass
 * is a fixed sequence of records that the batch sizes only cut (what a checkpoint counts).
 */
#include "reader/pipeline.h"

#define FILL_CHUNK 32 /* a refill goes this far past min_units (minus one) */

typedef struct item {
    char *rec;
    size_t len;
    uint64_t units;
} item;

struct ctf_pool {
    ctf_pool_options o;
    ctf__pyrandom rng;          /* the "pool" stream: source picks and draws */
    item *items;                /* shuffling: [0, n); FIFO: [head, n) */
    size_t n, head, cap;
    item carry;                 /* drawn, but no room left in the last batch */
    bool has_carry, exhausted;
    uint64_t units, target, limit;
    item *batch;                /* the last batch's records (owned) */
    ctf_record_ref *refs;
    size_t batch_n, batch_cap, refs_cap;
    ctf_pool_info stat;
};

static int seed_stream(ctf__pyrandom *r, uint64_t seed, uint64_t pass, const char *what)
{
    char text[96];
    snprintf(text, sizeof text, "ctfio.provider:%llu:%llu:%s", (unsigned long long)seed,
             (unsigned long long)pass, what);
    return ctf__pyrandom_seed(r, text);
}

int ctf_pool_open(const ctf_pool_options *opt, ctf_pool **out, ctf_error *err)
{
    *out = NULL;
    if (opt->min_units < -1 || opt->max_units < -1 || opt->max_units == 0)
        return ctf__fail(err, CTF_EINVAL, CTF__NOWHERE,
                         "min_units: -1 or >= 0, max_units: -1 or >= 1 expected");
    ctf_pool *p = CTF_CALLOC(1, sizeof *p);
    if (!p) return ctf__fail(err, CTF_ENOMEM, CTF__NOWHERE, "out of memory (pool)");
    p->o = *opt;
    seed_stream(&p->rng, opt->seed, opt->pass, "pool");
    /* Without shuffling min_units buys nothing: the order is the sources' order whatever the
     * pool holds, so it is refilled only when empty. */
    p->target = !opt->shuffle          ? 1
                : opt->min_units == -1 ? UINT64_MAX
                                       : (uint64_t)CTF_MAX(opt->min_units, 1);
    p->limit = opt->max_units == -1 ? UINT64_MAX : (uint64_t)opt->max_units;
    *out = p;
    return 0;
}

static void drop_batch(ctf_pool *p)
{
    for (size_t i = 0; i < p->batch_n; i++) CTF_FREE(p->batch[i].rec);
    p->batch_n = 0;
}

void ctf_pool_free(ctf_pool *p)
{
    if (!p) return;
    drop_batch(p);
    for (size_t i = p->head; i < p->n; i++) CTF_FREE(p->items[i].rec);
    if (p->has_carry) CTF_FREE(p->carry.rec);
    CTF_FREE(p->items);
    CTF_FREE(p->batch);
    CTF_FREE(p->refs);
    CTF_FREE(p);
}

int ctf_pool_files(const ctf_pool *p, size_t num_files, size_t num_workers, size_t rank,
                   size_t *out, size_t *n)
{
    *n = 0;
    if (num_workers < 1 || rank >= num_workers) return CTF_EINVAL;
    size_t *all = CTF_MALLOC((num_files ? num_files : 1) * sizeof *all);
    if (!all) return CTF_ENOMEM;
    for (size_t i = 0; i < num_files; i++) all[i] = i;
    if (p->o.shuffle) {
        ctf__pyrandom r;
        seed_stream(&r, p->o.seed, p->o.pass, "files");
        ctf__pyrandom_shuffle(&r, all, num_files);
    }
    for (size_t i = rank; i < num_files; i += num_workers) out[(*n)++] = all[i];
    CTF_FREE(all);
    return 0;
}

size_t ctf_pool_pick(ctf_pool *p, size_t n)
{
    /* A pick among one source still takes its number from the stream, as it always did. */
    return p->o.shuffle && n ? (size_t)ctf__pyrandom_below(&p->rng, n) : 0;
}

int ctf_pool_push(ctf_pool *p, const void *rec, size_t len, uint64_t units)
{
    if (p->n == p->cap && p->head) { /* FIFO: reuse the drawn front before growing */
        memmove(p->items, p->items + p->head, (p->n - p->head) * sizeof *p->items);
        p->n -= p->head;
        p->head = 0;
    }
    if (p->n == p->cap && ctf__grow((void **)&p->items, &p->cap, p->n + 1, sizeof *p->items))
        return CTF_ENOMEM;
    char *copy = CTF_MALLOC(len ? len : 1);
    if (!copy) return CTF_ENOMEM;
    memcpy(copy, rec, len);
    units = units ? units : 1;
    p->items[p->n++] = (item){copy, len, units};
    p->units = units > UINT64_MAX - p->units ? UINT64_MAX : p->units + units;
    const uint64_t held = p->n - p->head;
    if (p->units > p->stat.peak_units) p->stat.peak_units = p->units;
    if (held > p->stat.peak_samples) p->stat.peak_samples = held;
    return 0;
}

void ctf_pool_get_info(const ctf_pool *p, ctf_pool_info *info)
{
    *info = p->stat;
    info->units = p->units;
    info->samples = p->n - p->head;
    info->empty = p->n == p->head && !p->has_carry;
    const uint64_t high = p->target > UINT64_MAX - (FILL_CHUNK - 1) ? UINT64_MAX
                                                                    : p->target + FILL_CHUNK - 1;
    info->goal = CTF_MIN(high, p->limit);
    info->room = p->limit - CTF_MIN(p->units, p->limit);
}

/* Runs the fill function once. @return : 0, or its negative code. */
static int fill_once(ctf_pool *p, ctf_pool_fill_fn fill, void *user)
{
    const int rc = fill(user, p);
    if (rc > 0) p->exhausted = true;
    return rc < 0 ? rc : 0;
}

/* The next record of the pass into *it. @return : 1, 0 at the end, or a fill error. */
static int draw(ctf_pool *p, ctf_pool_fill_fn fill, void *user, item *it)
{
    if (p->has_carry) {
        *it = p->carry;
        p->has_carry = false;
        return 1;
    }
    if (p->units < p->target && !p->exhausted) {
        const int rc = fill_once(p, fill, user);
        if (rc) return rc;
    }
    if (p->n == p->head) return 0;
    if (!p->o.shuffle) {
        *it = p->items[p->head++];
        if (p->head == p->n) p->head = p->n = 0;
    } else {
        const size_t i = (size_t)ctf__pyrandom_below(&p->rng, p->n);
        *it = p->items[i];
        p->items[i] = p->items[--p->n];
    }
    p->units -= it->units;
    return 1;
}

int ctf_pool_next(ctf_pool *p, uint64_t size, ctf_pool_fill_fn fill, void *user,
                  const ctf_record_ref **recs, size_t *n, uint64_t *units)
{
    drop_batch(p);
    *recs = NULL;
    *n = 0;
    *units = 0;
    uint64_t total = 0;
    while (total < size) {
        item it;
        const int rc = draw(p, fill, user, &it);
        if (rc < 0 && !p->batch_n) return rc;
        if (rc <= 0) break; /* an error after some records: they come first, it comes again */
        if (p->batch_n && it.units > size - total && !p->o.can_over) {
            p->carry = it;
            p->has_carry = true;
            break;
        }
        if (ctf__grow((void **)&p->batch, &p->batch_cap, p->batch_n + 1, sizeof *p->batch) ||
            ctf__grow((void **)&p->refs, &p->refs_cap, p->batch_n + 1, sizeof *p->refs)) {
            CTF_FREE(it.rec);
            return CTF_ENOMEM;
        }
        p->batch[p->batch_n] = it;
        p->refs[p->batch_n++] = (ctf_record_ref){it.rec, it.len};
        total = it.units > UINT64_MAX - total ? UINT64_MAX : total + it.units;
    }
    if (p->batch_n) {
        p->stat.delivered += p->batch_n;
        p->stat.batches++;
    }
    *recs = p->refs;
    *n = p->batch_n;
    *units = total;
    return 0;
}

int ctf_pool_at_end(ctf_pool *p, ctf_pool_fill_fn fill, void *user)
{
    if (p->has_carry || p->n > p->head) return 0;
    if (!p->exhausted) {
        const int rc = fill_once(p, fill, user);
        if (rc) return rc;
    }
    return p->n == p->head;
}

int ctf_pool_skip(ctf_pool *p, uint64_t count, ctf_pool_fill_fn fill, void *user, uint64_t *skipped)
{
    *skipped = 0;
    while (*skipped < count) {
        item it;
        const int rc = draw(p, fill, user, &it);
        if (rc <= 0) return rc;
        CTF_FREE(it.rec);
        ++*skipped;
        p->stat.delivered++;
    }
    return 0;
}
