/*
 * _stats.c -- the reader's counters (ctf_stats), stage counters and verdict (ctf_perf) and
 * index facts (ctf_index_info) as Python dicts: the bodies of Reader.stats(), Reader.perf()
 * and Reader.index_info().
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>

#include "_stats.h"
#include "_pyutil.h"

PyObject *ctf_py_stats_dict(const ctf_stats *s, PyObject *names)
{
    PyObject *d = NULL, *streams = NULL;
    if (!(d = PyDict_New()) || !(streams = PyList_New(0))) goto error;
    int rc = 0;
#define PUT(dict, key, value) rc = rc ? rc : dict_put(dict, key, value)
    PUT(d, "sequences", PyLong_FromUnsignedLongLong(s->sequences));
    PUT(d, "errors", PyLong_FromUnsignedLongLong(s->errors));
    PUT(d, "warnings", PyLong_FromUnsignedLongLong(s->warnings));
    PUT(d, "dropped_rows", PyLong_FromUnsignedLongLong(s->dropped_rows));
    PUT(d, "dropped_sequences", PyLong_FromUnsignedLongLong(s->dropped_sequences));
    PUT(d, "chunks_loaded", PyLong_FromUnsignedLongLong(s->chunks_loaded));
    PUT(d, "chunks_resident", PyLong_FromUnsignedLongLong(s->chunks_resident));
    PUT(d, "chunks_resident_peak", PyLong_FromUnsignedLongLong(s->chunks_resident_peak));
    PUT(d, "bytes_resident", PyLong_FromUnsignedLongLong(s->bytes_resident));
    PUT(d, "bytes_resident_peak", PyLong_FromUnsignedLongLong(s->bytes_resident_peak));
    PUT(d, "num_streams", PyLong_FromSize_t(s->num_streams));
    PUT(d, "keys_missing", PyLong_FromUnsignedLongLong(s->keys_missing));
    PUT(d, "keys_unmatched", PyLong_FromUnsignedLongLong(s->keys_unmatched));
    PUT(d, "bad_records", PyLong_FromUnsignedLongLong(s->bad_records));
    for (size_t k = 0; !rc && k < s->num_streams && k < CTF_MAX_STREAMS; k++) {
        PyObject *sd = PyDict_New();
        if (!sd) goto error;
        rc = PyList_Append(streams, sd);
        Py_DECREF(sd); /* the list holds it */
        if (k < (size_t)PyTuple_GET_SIZE(names)) {
            PyObject *name = PyTuple_GET_ITEM(names, (Py_ssize_t)k);
            Py_INCREF(name);
            PUT(sd, "name", name);
        }
        PUT(sd, "samples", PyLong_FromUnsignedLongLong(s->streams[k].samples));
        PUT(sd, "nonzeros", PyLong_FromUnsignedLongLong(s->streams[k].nonzeros));
        PUT(sd, "dropped_samples", PyLong_FromUnsignedLongLong(s->streams[k].dropped_samples));
    }
    rc = rc ? rc : PyDict_SetItemString(d, "streams", streams);
#undef PUT
    if (rc) goto error;
    Py_DECREF(streams);
    return d;
error:
    Py_XDECREF(streams);
    Py_XDECREF(d);
    return NULL;
}

PyObject *ctf_py_index_info_dict(const ctf_index_info *info)
{
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    int rc = 0;
#define PUT(key, value) rc = rc ? rc : dict_put(d, key, value)
    PUT("file_size", PyLong_FromUnsignedLongLong(info->file_size));
    PUT("sequences", PyLong_FromUnsignedLongLong(info->sequences));
    PUT("samples", PyLong_FromUnsignedLongLong(info->samples));
    PUT("lines", PyLong_FromUnsignedLongLong(info->lines));
    PUT("chunks", PyLong_FromUnsignedLongLong(info->chunks));
    PUT("max_sequence_samples", PyLong_FromUnsignedLongLong(info->max_sequence_samples));
    PUT("line_mode", PyBool_FromLong(info->line_mode));
    PUT("from_cache", PyBool_FromLong(info->from_cache));
    PUT("min_sequence_samples", PyLong_FromUnsignedLongLong(info->min_sequence_samples));
    PUT("index_bytes", PyLong_FromUnsignedLongLong(info->index_bytes));
    PUT("repeated_ids", PyLong_FromUnsignedLongLong(info->repeated_ids));
#undef PUT
    if (rc) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* The ctf_perf fields by name, in struct order (every one a uint64_t). */
static const struct {
    const char *name;
    size_t at;
} perf_fields[] = {
#define F(x) {#x, offsetof(ctf_perf, x)}
    F(elapsed_ns),
    F(next_calls),
    F(next_ns),
    F(consumer_ns),
    F(wait_ns),
    F(waits),
    F(cut_ns),
    F(cut_sequences),
    F(cut_samples),
    F(pack_ns),
    F(pack_bytes),
    F(minibatches),
    F(open_ns),
    F(index_ns),
    F(index_bytes),
    F(index_cache_hits),
    F(index_cache_misses),
    F(read_ns),
    F(read_bytes),
    F(reads),
    F(rescan_ns),
    F(parse_ns),
    F(parse_bytes),
    F(load_ns),
    F(chunks_loaded),
    F(chunks_evicted),
    F(chunks_resident),
    F(chunk_cache_hits),
    F(chunk_cache_misses),
    F(remote_requests),
    F(remote_retries),
    F(remote_bytes),
    F(num_threads),
    F(prefetch_chunks),
    F(work_ns),
#undef F
};

PyObject *ctf_py_perf_dict(const ctf_perf *p)
{
    PyObject *d = PyDict_New(), *v = NULL;
    if (!d) return NULL;
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof perf_fields / sizeof perf_fields[0]; i++) {
        uint64_t x;
        memcpy(&x, (const char *)p + perf_fields[i].at, sizeof x);
        rc = dict_put(d, perf_fields[i].name, PyLong_FromUnsignedLongLong(x));
    }
    ctf_verdict vd;
    ctf_perf_verdict(p, sizeof *p, &vd);
    if (!rc && !(v = PyDict_New())) rc = -1;
#define PUT(key, value) rc = rc ? rc : dict_put(v, key, value)
    PUT("stage", PyUnicode_FromString(vd.stage_name));
    PUT("share", PyFloat_FromDouble(vd.share));
    PUT("text", PyUnicode_FromString(vd.text));
#undef PUT
    rc = rc ? rc : PyDict_SetItemString(d, "verdict", v);
    Py_XDECREF(v);
    if (rc) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}
