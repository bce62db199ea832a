/*
 * _timeline.h -- the timeline's pure functions (lib/reader/timeline.c) for the in-memory source:
 * what _timeline.c gives the ctfio._ctfio module table.
 */
#ifndef CTFIO_TIMELINE_PY_H
#define CTFIO_TIMELINE_PY_H

#include <Python.h>

PyObject *ctf_py_sweep_cut(PyObject *module, PyObject *args);
PyObject *ctf_py_sweep_boundary(PyObject *module, PyObject *args);
extern const char ctf_py_sweep_cut_doc[];
extern const char ctf_py_sweep_boundary_doc[];

#define CTF_PY_TIMELINE_METHODS                                                               \
    {"sweep_cut", (PyCFunction)(void (*)(void))ctf_py_sweep_cut, METH_VARARGS,                \
     ctf_py_sweep_cut_doc},                                                                   \
    {"sweep_boundary", (PyCFunction)(void (*)(void))ctf_py_sweep_boundary, METH_VARARGS,      \
     ctf_py_sweep_boundary_doc},

#endif
