/*
 * _timeline.c -- the cut and the worker split (lib/reader/timeline.c) bound for
 * ctfio.MinibatchSourceFromData, which keeps its sequences in memory and its position in
 * Python: the position goes in, the decision comes out, so its minibatches are the file
 * reader's by construction. `starts` is a contiguous uint64 buffer (a NumPy array): where each
 * sequence begins in the sweep, then the sweep's samples.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_timeline.h"
#include "ctfio.h"

/* A non-negative int as uint64; None means `none`; past 2^64 - 1 it saturates. */
static int u64_arg(PyObject *o, uint64_t none, uint64_t *out)
{
    if (o == Py_None) {
        *out = none;
        return 0;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyObject *zero = PyLong_FromLong(0);
        const int neg = zero ? PyObject_RichCompareBool(o, zero, Py_LT) : -1;
        Py_XDECREF(zero);
        if (neg) return -1; /* a negative int keeps its OverflowError */
        PyErr_Clear();
    }
    *out = (uint64_t)v;
    return 0;
}

/* The sequences of a starts buffer, or -1 with an exception set. */
static Py_ssize_t num_seqs(const Py_buffer *b)
{
    if (b->len % 8 || b->len < 16) {
        PyErr_SetString(PyExc_ValueError, "starts: need a uint64 buffer of two or more entries");
        return -1;
    }
    return b->len / 8 - 1;
}

const char ctf_py_sweep_cut_doc[] =
    "sweep_cut(starts, position, request, limit, workers, rank) -> (indices, position, "
    "end_of_sweep)\n\nCuts the next global minibatch of `request` samples from `position` "
    "(limit None: no limit) and returns the sweep indices of the sequences worker `rank` of "
    "`workers` receives (bytes of uint64, in timeline order), the position after the "
    "minibatch (unchanged at the end of the data) and whether it holds a sweep's last sequence.";

PyObject *ctf_py_sweep_cut(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer b;
    PyObject *pos_o, *req_o, *lim_o, *result = NULL;
    Py_ssize_t workers, rank;
    if (!PyArg_ParseTuple(args, "y*OOOnn", &b, &pos_o, &req_o, &lim_o, &workers, &rank))
        return NULL;
    uint64_t pos, req, lim;
    const Py_ssize_t n = num_seqs(&b);
    if (n < 0 || u64_arg(pos_o, 0, &pos) || u64_arg(req_o, 0, &req) ||
        u64_arg(lim_o, UINT64_MAX, &lim))
        goto done;
    if (workers < 1 || rank < 0 || rank >= workers) {
        PyErr_SetString(PyExc_ValueError, "need workers >= 1 and 0 <= rank < workers");
        goto done;
    }
    const uint64_t *starts = b.buf;
    ctf_cut cut = ctf_cut_start(pos, req, lim);
    bool eos;
    ctf_error err;
    if (ctf_sweep_cut(starts, (size_t)n, &cut, &eos, &err)) {
        PyErr_SetString(PyExc_ValueError, err.message);
        goto done;
    }
    PyObject *idx = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(cut.sequences * 8));
    if (!idx) goto done;
    const size_t got = ctf_sweep_owned(starts, (size_t)n, pos, cut.position, (size_t)workers,
                                       (size_t)rank, (uint64_t *)(void *)PyBytes_AS_STRING(idx));
    if (_PyBytes_Resize(&idx, (Py_ssize_t)(got * 8))) goto done;
    result = Py_BuildValue("NKO", idx, (unsigned long long)cut.position,
                           eos ? Py_True : Py_False);
done:
    PyBuffer_Release(&b);
    return result;
}

const char ctf_py_sweep_boundary_doc[] =
    "sweep_boundary(starts, position) -> int\n\nThe first sequence boundary at or after "
    "`position` (where a restored source continues).";

PyObject *ctf_py_sweep_boundary(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer b;
    PyObject *pos_o, *result = NULL;
    if (!PyArg_ParseTuple(args, "y*O", &b, &pos_o)) return NULL;
    uint64_t pos;
    const Py_ssize_t n = num_seqs(&b);
    if (n >= 0 && !u64_arg(pos_o, 0, &pos)) {
        const uint64_t *starts = b.buf;
        if (starts[n] == 0 || pos > CTF_MAX_POSITION)
            PyErr_SetString(PyExc_ValueError, "sweep_boundary: no samples, or position past "
                                              "the largest the timeline reaches");
        else
            result = PyLong_FromUnsignedLongLong(ctf_sweep_boundary(starts, (size_t)n, pos));
    }
    PyBuffer_Release(&b);
    return result;
}
