/*
 * test_util.c -- helpers the C tests share beyond the harness: a digest of everything a
 * minibatch delivers, to compare runs byte for byte (keys, positions, lengths, values, CSR),
 * and a log sink that keeps the formatted lines.
 */
#include "ctfio.h"
#include "test.h"

#include <string.h>

void test_log_capture(void *user, ctf_severity sev, const ctf_error *what)
{
    test_log *lb = user;
    if (!lb) return;
    if (sev == CTF_SEV_WARNING) lb->warnings++;
    char line[1200];
    ctf_error_format(what, sev, line, sizeof line);
    size_t m = strlen(line);
    if (lb->n + m + 2 < sizeof lb->text) {
        memcpy(lb->text + lb->n, line, m);
        lb->n += m;
        lb->text[lb->n++] = '\n';
        lb->text[lb->n] = 0;
    }
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n--) h = (h ^ *b++) * 0x100000001b3ull;
    return h;
}

uint64_t test_digest_minibatch(uint64_t h, const ctf_minibatch *mb)
{
    size_t ns = ctf_minibatch_num_sequences(mb);
    uint64_t pos = ctf_minibatch_position(mb);
    h = fnv(h, &pos, sizeof pos);
    if (ns) h = fnv(h, ctf_minibatch_keys(mb), ns * sizeof(uint64_t));
    for (size_t k = 0; k < ctf_minibatch_num_streams(mb); k++) {
        ctf_stream_view v;
        if (ctf_minibatch_stream(mb, k, &v)) return 0;
        if (ns) h = fnv(h, v.lengths, ns * sizeof *v.lengths);
        if (v.is_sparse) {
            h = fnv(h, v.indptr, (v.num_samples + 1) * sizeof *v.indptr);
            h = fnv(h, v.indices, v.nnz * sizeof *v.indices);
            h = fnv(h, v.values, v.nnz * (size_t)v.precision);
        } else {
            h = fnv(h, v.values, v.num_samples * v.dim * (size_t)v.precision);
        }
    }
    return h;
}
