/*
 * dump_json.c -- `ctfio dump`'s JSON: a minibatch read through the public accessors and printed
 * sequence by sequence, every number as the shortest decimal that reads back exactly.
 */
#include "dump_json.h"

static void put_number(FILE *out, const void *values, size_t i, ctf_precision prec)
{
    char buf[40];
    if (prec == CTF_FLOAT32)
        ctf_format_float(((const float *)values)[i], buf, sizeof buf);
    else
        ctf_format_double(((const double *)values)[i], buf, sizeof buf);
    fputs(buf, out);
}

static void put_json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 32)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

/* A dense sample's values: dim, or fewer where the end of its file cut it short. */
static size_t dense_dims(const ctf_stream_view *v, size_t smp)
{
    size_t dims = v->dim;
    for (size_t x = 0; x < v->num_short; x++)
        if (v->short_samples[2 * x] == smp) dims = v->short_samples[2 * x + 1];
    return dims;
}

static void put_sample(FILE *out, const ctf_stream_view *v, size_t smp)
{
    fputc('[', out);
    if (!v->is_sparse) {
        const size_t dims = dense_dims(v, smp);
        for (size_t d = 0; d < dims; d++) {
            if (d) fputs(", ", out);
            put_number(out, v->values, smp * v->dim + d, v->precision);
        }
    } else {
        for (int64_t e = v->indptr[smp]; e < v->indptr[smp + 1]; e++) {
            if (e > v->indptr[smp]) fputs(", ", out);
            fprintf(out, "[%d, ", (int)v->indices[e]);
            put_number(out, v->values, (size_t)e, v->precision);
            fputc(']', out);
        }
    }
    fputc(']', out);
}

/* Prints {"key": K, ["file": F,] ["line": L,] "streams": {...}} for sequence i; first[k] is
 * stream k's first sample of sequence i and moves past it. */
/* `r`: also the sequence's file path (a replay). */
static void put_sequence(const ctf_minibatch *mb, const ctf_stream_view *views, size_t i,
                         size_t *first, FILE *out, bool with_line, const ctf_reader *r)
{
    fprintf(out, "{\"key\": %llu, ", (unsigned long long)ctf_minibatch_keys(mb)[i]);
    const bool files = ctf_minibatch_has_files(mb);
    if (files) fprintf(out, "\"file\": %lu, ", (unsigned long)ctf_minibatch_files(mb)[i]);
    if (r) {
        const char *path = ctf_reader_file_path(r, files ? ctf_minibatch_files(mb)[i] : 0);
        fputs("\"path\": ", out);
        put_json_string(out, path ? path : "");
        fputs(", ", out);
    }
    if (with_line) fprintf(out, "\"line\": %llu, ", (unsigned long long)ctf_minibatch_lines(mb)[i]);
    fputs("\"streams\": {", out);
    const size_t ns = ctf_minibatch_num_streams(mb);
    for (size_t k = 0; k < ns; k++) {
        const ctf_stream_view *v = &views[k];
        if (k) fputs(", ", out);
        put_json_string(out, v->name);
        fputs(": [", out);
        for (uint32_t j = 0; j < v->lengths[i]; j++) {
            if (j) fputs(", ", out);
            put_sample(out, v, first[k] + j);
        }
        fputc(']', out);
        first[k] += v->lengths[i];
    }
    fputs("}}", out);
}

static void get_views(const ctf_minibatch *mb, ctf_stream_view *views)
{
    const size_t ns = ctf_minibatch_num_streams(mb);
    for (size_t k = 0; k < ns; k++) ctf_minibatch_stream(mb, k, &views[k]);
}

int dump_json_sequences(const ctf_minibatch *mb, FILE *out, bool with_line)
{
    size_t first[CTF_MAX_STREAMS] = {0};
    ctf_stream_view views[CTF_MAX_STREAMS];
    get_views(mb, views);
    const size_t n = ctf_minibatch_num_sequences(mb);
    for (size_t i = 0; i < n; i++) {
        put_sequence(mb, views, i, first, out, with_line, NULL);
        fputc('\n', out);
    }
    return ferror(out) ? CTF_EIO : 0;
}

static int put_minibatch(const ctf_minibatch *mb, FILE *out, uint64_t index, const ctf_reader *r);

int dump_json_minibatch(const ctf_minibatch *mb, FILE *out, uint64_t index)
{
    return put_minibatch(mb, out, index, NULL);
}

int dump_json_replay(const ctf_minibatch *mb, FILE *out, uint64_t index, const ctf_reader *r)
{
    return put_minibatch(mb, out, index, r);
}

static int put_minibatch(const ctf_minibatch *mb, FILE *out, uint64_t index, const ctf_reader *r)
{
    size_t first[CTF_MAX_STREAMS] = {0};
    ctf_stream_view views[CTF_MAX_STREAMS];
    get_views(mb, views);
    fprintf(out, "{\"index\": %llu, \"position\": %llu, \"end_of_sweep\": %s, \"sequences\": [",
            (unsigned long long)index, (unsigned long long)ctf_minibatch_position(mb),
            ctf_minibatch_end_of_sweep(mb) ? "true" : "false");
    const size_t n = ctf_minibatch_num_sequences(mb);
    for (size_t i = 0; i < n; i++) {
        if (i) fputs(", ", out);
        put_sequence(mb, views, i, first, out, r != NULL, r);
    }
    fputs("]}\n", out);
    return ferror(out) ? CTF_EIO : 0;
}
