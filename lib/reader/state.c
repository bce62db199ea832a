/*
 * state.c -- checkpoints of a reader: the state it saves (a small flat JSON object), the
 * fingerprint of its data and configuration, and the restore that checks the fingerprint field
 * by field, file by file, and continues at the saved position (with truncated BPTT, mid-way
 * through the slots' sequences). docs/design.md, "Checkpoints", describes the format.
 */
#include "reader.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>

/* The configuration that shapes the timeline, hashed for the checkpoint fingerprint. */
static uint64_t config_hash(const ctf_reader *r)
{
    uint64_t h = 0xcbf29ce484222325ull;
#define MIX(v) \
    do { \
        uint64_t v_ = (uint64_t)(v); \
        for (int b_ = 0; b_ < 8; b_++) h = (h ^ ((v_ >> (8 * b_)) & 0xff)) * 0x100000001b3ull; \
    } while (0)
    MIX(r->randomized);
    /* The parameters the table marks as shaping the timeline, in its order. */
    for (size_t i = 0; i < ctf_param_count(); i++)
        if (ctf_param_at(i)->fingerprint) MIX(ctf_param_get(&r->cfg, ctf_param_at(i)));
    MIX(r->cfg.num_streams);
    for (size_t k = 0; k < r->cfg.num_streams; k++) {
        const ctf_stream_def *s = &r->streams[k];
        for (const char *p = s->name; *p; p++) MIX(*p);
        const char *a = s->alias ? s->alias : "";
        MIX(0);
        for (const char *p = a; *p; p++) MIX(*p);
        MIX(s->dim);
        MIX(s->is_sparse);
        MIX(s->defines_mb_size);
    }
    if (r->join_hash) MIX(r->join_hash); /* joins only: a single file's hash stays as it was */
#undef MIX
    return h;
}

uint64_t ctf_reader_samples_per_sweep(const ctf_reader *r) { return r->sweep_samples; }

int ctf__reader_fingerprint(const ctf_reader *r, char *buf, size_t cap)
{
    return snprintf(buf, cap, "%" PRIu64 ".%zu.%016" PRIx64 ".%016" PRIx64, r->src->total_bytes,
                    r->src->num_seqs, r->src->hash, config_hash(r));
}

/* The state text tmp (at bytes, NUL-terminated) into the caller's buffer, snprintf-style, and
 * tmp freed. @return : 0, or CTF_ELIMIT when cap (not 0) is too small. */
static int copy_out(char *tmp, size_t at, char *buf, size_t cap)
{
    int rc = 0;
    if (cap != 0) {
        if (at + 1 > cap)
            rc = CTF_ELIMIT;
        else
            memcpy(buf, tmp, at + 1);
    }
    CTF_FREE(tmp);
    return rc;
}

/* The skipped stretches up to position pos, as ", \"skipped\": \"from-to;...\",
 * \"skipped_samples\": N" (nothing when none was skipped, so that states without a skip are
 * as they were): every rank skips the same stretches, so every rank writes the same. */
#define SKIPPED_BYTES (48 + CTF__MAX_SKIPPED * 42)
static size_t write_skipped(const ctf_reader *r, uint64_t pos, char *tmp, size_t need)
{
    uint64_t total = r->skipped_samples;
    size_t m = r->num_skipped;
    while (m && r->skipped[m - 1][1] > pos) {
        total -= r->skipped[m - 1][1] - r->skipped[m - 1][0];
        m--;
    }
    if (!m) return 0;
    size_t at = (size_t)snprintf(tmp, need, ", \"skipped\": \"");
    for (size_t i = 0; i < m; i++)
        at += (size_t)snprintf(tmp + at, need - at, "%s%" PRIu64 "-%" PRIu64, i ? ";" : "",
                               r->skipped[i][0], r->skipped[i][1]);
    at += (size_t)snprintf(tmp + at, need - at, "\", \"skipped_samples\": %" PRIu64, total);
    return at;
}

/* A mix's state: its position and sweep, its own configuration's hash, then per part its
 * position ("mix_positions", ';'-separated) and its fingerprint ("mix_parts"), so that a
 * restore moves every part back and names a part whose data or settings changed. */
static int save_mix_state(const ctf_reader *r, char *buf, size_t cap, size_t *len)
{
    const ctf__mix *m = r->mix;
    const size_t need = 512 + m->num_parts * 96 + SKIPPED_BYTES;
    char *tmp = CTF_MALLOC(need);
    if (!tmp) return CTF_ENOMEM;
    size_t at = (size_t)snprintf(tmp, need,
                                 "{\"version\": 1, \"minibatchSourcePosition\": %" PRIu64
                                 ", \"sweep\": %" PRIu64 ", \"samples_per_sweep\": 0"
                                 ", \"config_hash\": \"%016" PRIx64
                                 "\", \"randomization_seed\": %" PRIu64 ", \"mix_positions\": \"",
                                 r->position, r->cur_sweep, config_hash(r),
                                 r->cfg.randomization_seed);
    for (size_t p = 0; p < m->num_parts; p++)
        at += (size_t)snprintf(tmp + at, need - at, "%s%" PRIu64, p ? ";" : "",
                               m->parts[p]->position);
    at += (size_t)snprintf(tmp + at, need - at, "\", \"mix_parts\": \"");
    for (size_t p = 0; p < m->num_parts; p++) {
        if (p) tmp[at++] = ';';
        at += (size_t)ctf__reader_fingerprint(m->parts[p], tmp + at, need - at);
    }
    tmp[at++] = '"';
    at += write_skipped(r, r->position, tmp + at, need - at);
    at += (size_t)snprintf(tmp + at, need - at, "}");
    *len = at;
    return copy_out(tmp, at, buf, cap);
}

/* The state of one source at timeline position `pos` of sweep `sweep`; with truncated BPTT
 * also the slots (only the current position has them). */
static int save_state_at(const ctf_reader *r, uint64_t pos, uint64_t sweep, char *buf, size_t cap,
                         size_t *len);

int ctf_reader_save_state(const ctf_reader *r, char *buf, size_t cap, size_t *len)
{
    if (r->mix) return save_mix_state(r, buf, cap, len);
    /* The caller's position, not a read-ahead's; without BPTT it alone is the timeline's
     * state (its sweep is the position's, the slot is found again by a seek). */
    const bool ahead = ctf__reader_ahead_asked(r);
    const uint64_t pos = ctf__reader_position_now(r);
    return save_state_at(r, pos, ahead ? pos / r->sweep_samples : r->cur_sweep, buf, cap, len);
}

int ctf_reader_state_at(const ctf_reader *r, uint64_t position, char *buf, size_t cap, size_t *len)
{
    /* A mix's parts and BPTT's slots at another position depend on the data before it. */
    if (r->mix || r->cfg.truncation_length || position > CTF_MAX_POSITION) return CTF_EINVAL;
    return save_state_at(r, position, position / r->sweep_samples, buf, cap, len);
}

static int save_state_at(const ctf_reader *r, uint64_t pos, uint64_t sweep, char *buf, size_t cap,
                         size_t *len)
{
    char head[640];
    int n = snprintf(head, sizeof head,
                     "{\"version\": 1, \"minibatchSourcePosition\": %" PRIu64
                     ", \"sweep\": %" PRIu64 ", \"file_size\": %" PRIu64
                     ", \"sequences\": %zu, \"samples_per_sweep\": %" PRIu64
                     ", \"index_hash\": \"%016" PRIx64 "\", \"config_hash\": \"%016" PRIx64
                     "\", \"randomization_seed\": %" PRIu64 ", \"randomization_window\": %" PRIu64
                     ", \"window_in_samples\": %d, \"chunk_size_bytes\": %" PRIu64
                     ", \"mtime_ns\": %" PRId64,
                     pos, sweep, r->src->total_bytes, r->src->num_seqs, r->sweep_samples,
                     r->src->hash, config_hash(r), r->cfg.randomization_seed,
                     r->cfg.randomization_window, (int)r->cfg.window_in_samples,
                     r->cfg.chunk_size_bytes, r->idx->file.mtime_ns);
    if (n < 0 || (size_t)n >= sizeof head) return CTF_EINVAL;
    /* Truncated BPTT: the slots' partly delivered sequences, as "sweep.slot.offset.owner" (or
     * "-" for an idle slot), ';'-separated, so that a restore continues mid-sequence. */
    const size_t nfp = r->src->num_fp_files;
    size_t need = (size_t)n + 16 + r->num_bp * 84 + 3 + (nfp > 1 ? 16 + nfp * 64 : 0) +
                  SKIPPED_BYTES;
    char *tmp = CTF_MALLOC(need);
    if (!tmp) return CTF_ENOMEM;
    size_t at = (size_t)n;
    memcpy(tmp, head, at);
    /* Several files: each one's fingerprint in order, "size.mtime.indexhash;...", so that a
     * restore names the file that changed (one file: the fields above are the file's). */
    if (nfp > 1) {
        at += (size_t)snprintf(tmp + at, need - at, ", \"files\": \"");
        for (size_t f = 0; f < nfp; f++) {
            const ctf_index *fi = r->src->fp_files[f].idx;
            at += (size_t)snprintf(tmp + at, need - at, "%s%" PRIu64 ".%" PRId64 ".%016" PRIx64,
                                   f ? ";" : "", fi->file.size, fi->file.mtime_ns, fi->hash);
        }
        tmp[at++] = '"';
    }
    if (r->cfg.truncation_length) {
        at += (size_t)snprintf(tmp + at, need - at, ", \"bptt\": \"");
        for (size_t j = 0; j < r->num_bp; j++) {
            const bptt_slot *sl = &r->bp[j];
            if (j) tmp[at++] = ';';
            if (!sl->busy)
                tmp[at++] = '-';
            else
                at += (size_t)snprintf(tmp + at, need - at, "%" PRIu64 ".%zu.%u.%" PRIu64,
                                       sl->sweep, sl->tslot, sl->offset, sl->owner_pos);
        }
        tmp[at++] = '"';
    }
    at += write_skipped(r, pos, tmp + at, need - at);
    tmp[at++] = '}';
    tmp[at] = 0;
    *len = at;
    return copy_out(tmp, at, buf, cap);
}

/* A flat JSON object reader for the state: string keys, number / string / bool values, kept as
 * spans of the input. It accepts nothing else, so arbitrary bytes fail cleanly (fuzzed). */
typedef struct kv {
    const char *key, *val;
    size_t klen, vlen;
} kv;

static const char *json_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    return p;
}

static const char *json_str(const char *p, const char *e, const char **out, size_t *len)
{
    if (p >= e || *p != '"') return NULL;
    const char *b = ++p;
    while (p < e && *p != '"') {
        if (*p == '\\' || (unsigned char)*p < 32) return NULL;
        p++;
    }
    if (p >= e) return NULL;
    *out = b;
    *len = (size_t)(p - b);
    return p + 1;
}

static int json_flat(const char *s, size_t len, kv *kvs, size_t max, size_t *count)
{
    const char *p = s, *e = s + len;
    *count = 0;
    p = json_ws(p, e);
    if (p >= e || *p++ != '{') return -1;
    p = json_ws(p, e);
    if (p < e && *p == '}') return json_ws(p + 1, e) == e ? 0 : -1;
    for (;;) {
        if (*count == max) return -2; /* well formed or not, more keys than a state has */
        kv *x = &kvs[(*count)++];
        p = json_str(json_ws(p, e), e, &x->key, &x->klen);
        if (!p) return -1;
        p = json_ws(p, e);
        if (p >= e || *p++ != ':') return -1;
        p = json_ws(p, e);
        if (p < e && *p == '"') {
            p = json_str(p, e, &x->val, &x->vlen);
            if (!p) return -1;
        } else {
            x->val = p;
            while (p < e && (isalnum((unsigned char)*p) || *p == '-' || *p == '+' || *p == '.'))
                p++;
            x->vlen = (size_t)(p - x->val);
            if (!x->vlen) return -1;
        }
        p = json_ws(p, e);
        if (p >= e) return -1;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p++ != '}') return -1;
        p = json_ws(p, e);
        return p == e ? 0 : -1;
    }
}

/* The value of `key` as a NUL-terminated string in buf (cut to cap), or NULL if absent. */
static const char *kv_get(const kv *kvs, size_t n, const char *key, char *buf, size_t cap)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < n; i++)
        if (kvs[i].klen == kl && !memcmp(kvs[i].key, key, kl)) {
            size_t m = CTF_MIN(kvs[i].vlen, cap - 1);
            memcpy(buf, kvs[i].val, m);
            buf[m] = 0;
            return buf;
        }
    return NULL;
}

static const kv *kv_find(const kv *kvs, size_t n, const char *key)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < n; i++)
        if (kvs[i].klen == kl && !memcmp(kvs[i].key, key, kl)) return &kvs[i];
    return NULL;
}

static bool parse_u64(const char *s, uint64_t *v)
{
    if (!s || !*s) return false;
    uint64_t x = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9') return false;
        unsigned d = (unsigned)(*s - '0');
        if (x > (UINT64_MAX - d) / 10) return false;
        x = x * 10 + d;
    }
    *v = x;
    return true;
}

/* Parses "a.b.c.d" (four unsigned numbers) from [p, e). */
static bool parse_quad(const char *p, const char *e, uint64_t q[4])
{
    for (int i = 0; i < 4; i++) {
        if (p >= e || *p < '0' || *p > '9') return false;
        uint64_t x = 0;
        while (p < e && *p >= '0' && *p <= '9') {
            unsigned d = (unsigned)(*p - '0');
            if (x > (UINT64_MAX - d) / 10) return false;
            x = x * 10 + d;
            p++;
        }
        q[i] = x;
        if (i < 3) {
            if (p >= e || *p != '.') return false;
            p++;
        }
    }
    return p == e;
}

/* Rebuilds the BPTT slots from the state's "bptt" field (after the seek). The sequence of an
 * entry is found by running a temporary generator of its sweep up to its slot; entries are
 * visited in (sweep, slot) order so one pass per sweep suffices. */
typedef struct bptt_entry {
    uint64_t v[4];           /* sweep, slot, offset, owner */
    size_t at;               /* index of the BPTT slot */
} bptt_entry;

static int cmp_entry(const void *a, const void *b)
{
    const bptt_entry *x = a, *y = b;
    if (x->v[0] != y->v[0]) return x->v[0] < y->v[0] ? -1 : 1;
    if (x->v[1] != y->v[1]) return x->v[1] < y->v[1] ? -1 : 1;
    return 0;
}

static int restore_bptt(ctf_reader *r, const kv *field)
{
    for (size_t j = 0; j < r->num_bp; j++) ctf__reader_bptt_release(r, &r->bp[j]);
    r->num_bp = 0;
    if (!field) return 0;
    const char *p = field->val, *e = field->val + field->vlen;
    bptt_entry *ents = NULL;
    size_t nents = 0, cap = 0;
    ctf__sweep_gen *g = NULL;
    int rc = 0;
    while (p < e) {
        const char *q = memchr(p, ';', (size_t)(e - p));
        if (!q) q = e;
        if (ctf__grow((void **)&r->bp, &r->bp_cap, r->num_bp + 1, sizeof *r->bp)) goto oom;
        memset(&r->bp[r->num_bp], 0, sizeof *r->bp);
        if (!(q - p == 1 && *p == '-')) {
            if (ctf__grow((void **)&ents, &cap, nents + 1, sizeof *ents)) goto oom;
            if (!parse_quad(p, q, ents[nents].v)) goto bad;
            ents[nents++].at = r->num_bp;
        }
        r->num_bp++;
        p = q < e ? q + 1 : e;
    }
    if (nents) qsort(ents, nents, sizeof *ents, cmp_entry); /* ents is NULL when none */
    size_t next_slot = 0;
    for (size_t i = 0; i < nents; i++) {
        const uint64_t *v = ents[i].v;
        if (v[1] >= r->src->num_seqs) goto bad;
        if (!g || ctf__sweepgen_sweep(g) != v[0] || v[1] < next_slot) {
            ctf__sweepgen_free(g);
            g = NULL;
            rc = ctf__sweepgen_create(r->src->chunks, r->src->num_chunks,
                                      r->cfg.randomization_window, r->cfg.window_in_samples,
                                      r->cfg.randomization_seed, v[0], r->randomized, &g, &r->err);
            if (rc) goto fail;
            next_slot = 0;
        }
        size_t seq, home;
        for (; next_slot < v[1]; next_slot++) {
            rc = ctf__sweepgen_get(g, next_slot, &seq, &home, &r->err);
            if (rc) goto fail;
            ctf__sweepgen_release(g, next_slot + 1);
        }
        rc = ctf__sweepgen_get(g, (size_t)v[1], &seq, &home, &r->err);
        if (rc) goto fail;
        bptt_slot *s = &r->bp[ents[i].at];
        s->seq = seq;
        s->chunk = ctf__reader_chunk_of_seq(r, seq);
        const ctf__seq *q;
        rc = ctf__reader_seq(r, s->chunk, seq, CTF__SEQS_ANY, &q);
        if (rc) goto fail;
        s->length = q->samples;
        if (v[2] >= s->length) goto bad;
        s->busy = true;
        s->skip = false;
        s->recheck = true;
        s->sweep = v[0];
        s->tslot = (size_t)v[1];
        s->offset = (uint32_t)v[2];
        s->owner_pos = v[3];
        ctf__cache_pin(r->cache, s->chunk);
    }
    ctf__sweepgen_free(g);
    CTF_FREE(ents);
    return 0;
oom:
    rc = ctf__fail(&r->err, CTF_ENOMEM, CTF__NOWHERE, "out of memory");
    goto fail;
bad:
    rc = ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                   "checkpoint state: malformed \"bptt\" slot list");
fail:
    for (size_t j = 0; j < r->num_bp; j++) ctf__reader_bptt_release(r, &r->bp[j]);
    r->num_bp = 0;
    ctf__sweepgen_free(g);
    CTF_FREE(ents);
    return rc;
}

/* Compares the state's per-file fingerprints ("size.mtime.indexhash;...") with the source's
 * files in order; the first mismatch is written to diff, naming the file. The modification time
 * is recorded but not compared, as for one file. @return : 0 (diff may be filled). */
static int check_files(const ctf_reader *r, const kv *field, char *diff, size_t cap, size_t *dl)
{
    const size_t nfp = r->src->num_fp_files;
    if (!field) {
        *dl += (size_t)snprintf(diff + *dl, *dl < cap ? cap - *dl : 0,
                                "%sfiles: the state was saved for one file, the reader reads %zu",
                                *dl ? "; " : "", nfp);
        return 0;
    }
    const char *p = field->val, *e = field->val + field->vlen;
    size_t saved = p < e ? 1 : 0;
    for (const char *t = p; t < e; t++) saved += *t == ';';
    if (saved != nfp) {
        *dl += (size_t)snprintf(diff + *dl, *dl < cap ? cap - *dl : 0,
                                "%sfiles: the state was saved for %zu files, the reader reads %zu "
                                "(a changed file list)",
                                *dl ? "; " : "", saved, nfp);
        return 0;
    }
    for (size_t f = 0; f < nfp; f++) {
        const char *q = memchr(p, ';', (size_t)(e - p));
        if (!q) q = e;
        const ctf_index *fi = r->src->fp_files[f].idx;
        char size[32], hash[20];
        int sl = snprintf(size, sizeof size, "%" PRIu64 ".", fi->file.size);
        snprintf(hash, sizeof hash, "%016" PRIx64, fi->hash);
        const char *dot2 = NULL;
        for (const char *t = q; t > p; t--)
            if (t[-1] == '.') {
                dot2 = t - 1;
                break;
            }
        bool same = q - p > sl && !memcmp(p, size, (size_t)sl) && dot2 && q - dot2 - 1 == 16 &&
                    !memcmp(dot2 + 1, hash, 16);
        if (!same) {
            *dl += (size_t)snprintf(diff + *dl, *dl < cap ? cap - *dl : 0,
                                    "%sfile %zu of the data, %s, differs from the one the state "
                                    "was saved with (size.mtime.index_hash: state has %.*s, the "
                                    "file has %" PRIu64 ".%" PRId64 ".%s)",
                                    *dl ? "; " : "", f, r->src->fp_files[f].path,
                                    (int)CTF_MIN(q - p, 80), p, fi->file.size, fi->file.mtime_ns,
                                    hash);
            return 0;
        }
        p = q < e ? q + 1 : e;
    }
    return 0;
}

/* The next ';'-separated item of [*p, e) as [*b, return). */
static const char *list_item(const char **p, const char *e, const char **b)
{
    *b = *p;
    const char *q = memchr(*p, ';', (size_t)(e - *p));
    if (!q) q = e;
    *p = q < e ? q + 1 : e;
    return q;
}

/* Reads "skipped" ("from-to;...", at most CTF__MAX_SKIPPED stretches, each from < to <= pos,
 * in order) and "skipped_samples" (at least their sum); both absent: nothing was skipped. */
typedef struct skipped_list {
    uint64_t st[CTF__MAX_SKIPPED][2], total;
    size_t m;
} skipped_list;

static int parse_skipped(ctf_reader *r, const kv *kvs, size_t n, uint64_t pos, skipped_list *out)
{
    const kv *f = kv_find(kvs, n, "skipped");
    char b1[72];
    const char *ts = kv_get(kvs, n, "skipped_samples", b1, sizeof b1);
    uint64_t (*st)[2] = out->st, total = 0, sum = 0, last = 0;
    size_t m = 0;
    if (!f && !ts) goto done;
    if (!f || !parse_u64(ts, &total) || !f->vlen || f->val[f->vlen - 1] == ';') goto bad;
    for (const char *p = f->val, *e = f->val + f->vlen, *b; p < e;) {
        const char *q = list_item(&p, e, &b);
        char num[48];
        const char *dash = memchr(b, '-', (size_t)(q - b));
        if (m == CTF__MAX_SKIPPED || !dash || dash - b >= 24 || q - dash > 24) goto bad;
        memcpy(num, b, (size_t)(dash - b));
        num[dash - b] = 0;
        if (!parse_u64(num, &st[m][0])) goto bad;
        memcpy(num, dash + 1, (size_t)(q - dash - 1));
        num[q - dash - 1] = 0;
        if (!parse_u64(num, &st[m][1])) goto bad;
        if (st[m][0] < last || st[m][1] <= st[m][0] || st[m][1] > pos) goto bad;
        last = st[m][1];
        sum += st[m][1] - st[m][0];
        m++;
    }
    if (total < sum) goto bad;
done:
    out->m = m;
    out->total = total;
    return 0;
bad:
    return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                     "checkpoint state: malformed \"skipped\" (at most %d stretches "
                     "\"from-to\", ';'-separated, in order, none past minibatchSourcePosition, "
                     "with \"skipped_samples\" at least their sum)",
                     CTF__MAX_SKIPPED);
}

static void keep_skipped(ctf_reader *r, const skipped_list *sk)
{
    memcpy(r->skipped, sk->st, sk->m * sizeof sk->st[0]);
    r->num_skipped = sk->m;
    r->skipped_samples = sk->total;
}

static int restore_mix(ctf_reader *r, const kv *kvs, size_t n, uint64_t pos)
{
    const ctf__mix *m = r->mix;
    const kv *fp = kv_find(kvs, n, "mix_parts"), *ps = kv_find(kvs, n, "mix_positions");
    char b1[72], hex[24];
    if (!fp || !ps)
        return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                         "checkpoint state: saved by a reader of one data set, this reader "
                         "reads a mix of %zu parts",
                         m->num_parts);
    size_t saved = 1;
    for (size_t i = 0; i < fp->vlen; i++) saved += fp->val[i] == ';';
    if (saved != m->num_parts)
        return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                         "checkpoint state: saved for a mix of %zu parts, this reader mixes %zu",
                         saved, m->num_parts);
    const char *p = fp->val, *e = fp->val + fp->vlen, *b;
    for (size_t i = 0; i < m->num_parts; i++) {
        const char *q = list_item(&p, e, &b);
        char mine[96];
        int ml = ctf__reader_fingerprint(m->parts[i], mine, sizeof mine);
        if (q - b != ml || memcmp(b, mine, (size_t)ml))
            return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                             "checkpoint state does not fit mix part %zu (%s): its data or "
                             "settings changed (size.sequences.index_hash.config_hash: state "
                             "has %.*s, the part has %s)",
                             i, m->parts[i]->path, (int)CTF_MIN(q - b, 96), b, mine);
    }
    snprintf(hex, sizeof hex, "%016" PRIx64, config_hash(r));
    const char *h = kv_get(kvs, n, "config_hash", b1, sizeof b1);
    if (!h || strcmp(h, hex))
        return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                         "checkpoint state does not fit this mix: config_hash: state has %s, "
                         "reader has %s (the weights, streams or randomization differ)",
                         h ? h : "nothing", hex);
    uint64_t positions[CTF_MAX_MIX_PARTS], sum = 0;
    p = ps->val;
    e = ps->val + ps->vlen;
    for (size_t i = 0; i < m->num_parts; i++) {
        const char *q = list_item(&p, e, &b);
        char num[32];
        if (q - b <= 0 || q - b >= (ptrdiff_t)sizeof num) goto bad;
        memcpy(num, b, (size_t)(q - b));
        num[q - b] = 0;
        if (!parse_u64(num, &positions[i]) || positions[i] > CTF_MAX_POSITION ||
            (positions[i] && !(m->weights[i] > 0)))
            goto bad;
        sum += positions[i];
        if (sum > CTF_MAX_POSITION) goto bad;
    }
    if (p != e || sum != pos) goto bad;
    return m->ops->set_positions(r, positions);
bad:
    return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                     "checkpoint state: malformed \"mix_positions\" (one position per part, "
                     "summing to minibatchSourcePosition)");
}

int ctf_reader_restore_state(ctf_reader *r, const char *state, size_t len)
{
    /* Back where the caller is first: a state refused below leaves the reader there. */
    int rc0 = ctf__reader_take_back(r);
    if (rc0) return rc0;
    if (r->dead) return r->err.code;
    kv kvs[32];
    size_t n;
    char b1[72];
    int shape = state ? json_flat(state, len, kvs, 32, &n) : -1;
    if (shape == -2)
        return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                         "checkpoint state: more than 32 keys: not a ctfio state (a ctfio state "
                         "is a flat JSON object of at most 32 keys)");
    if (shape != 0)
        return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                         "checkpoint state: not a ctfio state (expected a flat JSON object)");
    for (size_t i = 1; i < n; i++)
        for (size_t j = 0; j < i; j++)
            if (kvs[i].klen == kvs[j].klen && !memcmp(kvs[i].key, kvs[j].key, kvs[i].klen))
                return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                                 "checkpoint state: key \"%.*s\" appears twice",
                                 (int)CTF_MIN(kvs[i].klen, (size_t)64), kvs[i].key);
    uint64_t version, pos;
    if (!parse_u64(kv_get(kvs, n, "version", b1, sizeof b1), &version) || version != 1)
        return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                         "checkpoint state: unsupported or missing version (this reader "
                         "writes version 1)");
    if (!parse_u64(kv_get(kvs, n, "minibatchSourcePosition", b1, sizeof b1), &pos) ||
        pos > CTF_MAX_POSITION)
        return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                         "checkpoint state: missing or invalid minibatchSourcePosition (a "
                         "number <= %" PRIu64 ")",
                         (uint64_t)CTF_MAX_POSITION);
    /* Checked first, so that a state refused leaves the reader's list as it was. */
    skipped_list sk;
    int src0 = parse_skipped(r, kvs, n, pos, &sk);
    if (src0) return src0;
    if (r->mix) {
        int mrc = restore_mix(r, kvs, n, pos);
        if (!mrc) keep_skipped(r, &sk);
        return mrc;
    }
    if (kv_find(kvs, n, "mix_positions"))
        return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                         "checkpoint state: saved by a mix of data sets, this reader reads one "
                         "data set");
    /* Field-by-field fingerprint check; mtime alone is not checked, so a checkpoint can move
     * with an identical copy of the data. */
    char diff[CTF_ERROR_MSG_MAX] = "";
    size_t dl = 0;
    uint64_t v;
    char hex[32];
#define CHECK_U64(name, mine) \
    do { \
        const char *s_ = kv_get(kvs, n, name, b1, sizeof b1); \
        if (!parse_u64(s_, &v) || v != (uint64_t)(mine)) \
            dl += (size_t)snprintf(diff + dl, dl < sizeof diff ? sizeof diff - dl : 0, \
                                   "%s%s: state has %s, reader has %" PRIu64, dl ? "; " : "", \
                                   name, s_ ? s_ : "nothing", (uint64_t)(mine)); \
    } while (0)
#define CHECK_HEX(name, mine) \
    do { \
        const char *s_ = kv_get(kvs, n, name, b1, sizeof b1); \
        snprintf(hex, sizeof hex, "%016" PRIx64, (uint64_t)(mine)); \
        if (!s_ || strcmp(s_, hex)) \
            dl += (size_t)snprintf(diff + dl, dl < sizeof diff ? sizeof diff - dl : 0, \
                                   "%s%s: state has %s, reader has %s", dl ? "; " : "", name, \
                                   s_ ? s_ : "nothing", hex); \
    } while (0)
    /* Several files: name the first one that differs (then the totals below differ too). */
    if (r->src->num_fp_files > 1) {
        int frc = check_files(r, kv_find(kvs, n, "files"), diff, sizeof diff, &dl);
        if (frc) return frc;
    }
    const size_t dl_data = dl;
    CHECK_U64("file_size", r->src->total_bytes);
    CHECK_U64("sequences", r->src->num_seqs);
    CHECK_U64("samples_per_sweep", r->sweep_samples);
    CHECK_HEX("index_hash", r->src->hash);
    /* One file whose data differs: name it (a replaced remote object has a new ETag in its
     * index hash even when its size and sequences are the same). */
    if (r->src->num_fp_files == 1 && dl > dl_data)
        dl += (size_t)snprintf(diff + dl, dl < sizeof diff ? sizeof diff - dl : 0,
                               " (the data file %s is not the one the state was saved with)",
                               r->src->fp_files[0].path);
    CHECK_U64("randomization_seed", r->cfg.randomization_seed);
    CHECK_U64("randomization_window", r->cfg.randomization_window);
    CHECK_U64("window_in_samples", r->cfg.window_in_samples);
    CHECK_U64("chunk_size_bytes", r->cfg.chunk_size_bytes);
    CHECK_HEX("config_hash", config_hash(r));
#undef CHECK_U64
#undef CHECK_HEX
    if (dl)
        return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                         "checkpoint state does not fit this reader's data or configuration: %s",
                         diff);
    const kv *bptt = kv_find(kvs, n, "bptt");
    if (bptt && !r->cfg.truncation_length)
        return ctf__fail(&r->err, CTF_ESTATE, CTF__NOWHERE,
                         "checkpoint state: saved with truncation_length but this reader has none");
    int rc = ctf_reader_seek(r, pos);
    if (rc) return rc;
    keep_skipped(r, &sk);
    if (r->cfg.truncation_length) {
        rc = restore_bptt(r, bptt);
        if (rc) return rc == CTF_ESTATE ? rc : ctf__reader_fail_dead(r, rc);
        r->ended = false;
        ctf__reader_evict_passed(r);
        ctf__reader_schedule_prefetch(r);
    }
    return 0;
}
