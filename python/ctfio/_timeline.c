/*
 * _timeline.c -- the cut and the worker split (lib/reader/timeline.c) bound for
 * ctfio.MinibatchSourceFromData, which keeps its sequences in memory and its position in
 * Python: the position goes in, the decision comes out, so its minibatches are the file
 * reader's by construction. `starts` is a contiguous uint64 buffer (a NumPy array): where each
 * sequence begins in the sweep, then the sweep's samples.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_tools.h"
#include "ctfio.h"

/* "O&" converter: a non-negative int as uint64 (past 2^64 - 1 it saturates); None: no limit. */
static int u64_arg(PyObject *o, void *out)
{
    uint64_t v = UINT64_MAX;
    if (o != Py_None) {
        v = PyLong_AsUnsignedLongLong(o);
        if (v == (uint64_t)-1 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return 0;
            PyObject *zero = PyLong_FromLong(0);
            const int neg = zero ? PyObject_RichCompareBool(o, zero, Py_LT) : -1;
            Py_XDECREF(zero);
            if (neg) return 0; /* a negative int keeps its OverflowError */
            PyErr_Clear();
        }
    }
    *(uint64_t *)out = v;
    return 1;
}

/* The sequences of a starts buffer, or -1 with an exception set (the buffer released). */
static Py_ssize_t num_seqs(Py_buffer *b)
{
    const uint64_t *s = b->buf;
    const Py_ssize_t n = b->len / 8 - 1;
    if (b->len % 8 == 0 && n >= 1 && s[0] == 0 && s[n] > 0) return n;
    PyBuffer_Release(b);
    PyErr_SetString(PyExc_ValueError, "starts: need uint64 sequence starts from 0, then samples");
    return -1;
}

const char ctf_py_sweep_cut_doc[] =
    "sweep_cut(starts, position, request, limit, workers, rank) -> (indices, position, "
    "end_of_sweep)\n\nCuts the next global minibatch of `request` samples from `position` "
    "(limit None: no limit): the sweep indices of the sequences worker `rank` of `workers` "
    "receives (bytes of uint64, in timeline order), the position after the minibatch "
    "(unchanged at the end of the data) and whether it holds a sweep's last sequence.";

PyObject *ctf_py_sweep_cut(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer b;
    uint64_t pos, req, lim;
    Py_ssize_t n, workers, rank;
    if (!PyArg_ParseTuple(args, "y*O&O&O&nn", &b, u64_arg, &pos, u64_arg, &req, u64_arg, &lim,
                          &workers, &rank) ||
        (n = num_seqs(&b)) < 0)
        return NULL;
    ctf_cut cut = ctf_cut_start(pos, req, lim);
    bool eos;
    ctf_error err;
    PyObject *idx = NULL;
    if (workers < 1 || rank < 0 || rank >= workers)
        PyErr_Format(PyExc_ValueError,
                     "next_minibatch: need number_of_workers >= 1 and 0 <= "
                     "worker_rank < number_of_workers (got %zd, %zd)",
                     workers, rank);
    else if (ctf_sweep_cut(b.buf, (size_t)n, &cut, &eos, &err))
        PyErr_SetString(PyExc_ValueError, err.message);
    else if ((idx = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(cut.sequences * 8))))
        _PyBytes_Resize(&idx,
                        (Py_ssize_t)(8 *
                                     ctf_sweep_owned(b.buf, (size_t)n, pos, cut.position,
                                                     (size_t)workers, (size_t)rank,
                                                     (uint64_t *)(void *)PyBytes_AS_STRING(idx))));
    PyBuffer_Release(&b);
    return idx ? Py_BuildValue("NKO", idx, (unsigned long long)cut.position,
                               eos ? Py_True : Py_False)
               : NULL;
}

const char ctf_py_sweep_boundary_doc[] =
    "sweep_boundary(starts, position) -> int\n\nThe first sequence boundary at or after "
    "`position` (where a restored source continues).";

PyObject *ctf_py_sweep_boundary(PyObject *module, PyObject *args)
{
    (void)module;
    Py_buffer b;
    uint64_t pos;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "y*O&", &b, u64_arg, &pos) || (n = num_seqs(&b)) < 0) return NULL;
    const uint64_t at = pos <= CTF_MAX_POSITION ? ctf_sweep_boundary(b.buf, (size_t)n, pos) : 0;
    PyBuffer_Release(&b);
    if (pos > CTF_MAX_POSITION)
        return PyErr_Format(PyExc_ValueError, "position: must be <= %lld", (long long)INT64_MAX);
    return PyLong_FromUnsignedLongLong(at);
}
