/*
 * _tools.h -- the command-line tool inside the extension: the functions _tools.c gives the
 * ctfio._ctfio module table (`ctfio` / `python -m ctfio`, and ctfio.convert's text formats),
 * and _timeline.c's (the library's cut and worker split for ctfio.MinibatchSourceFromData).
 */
#ifndef CTFIO_TOOLS_H
#define CTFIO_TOOLS_H

#include <Python.h>

#include "ctfio.h"

/* The one mapping of a library error record to a Python exception (_ctfio.c's). */
PyObject *ctf_py_raise_error(PyObject *module, const ctf_error *e);

PyObject *ctf_py_cli_main(PyObject *module, PyObject *args);
PyObject *ctf_py_convert_file(PyObject *module, PyObject *args, PyObject *kwargs);
extern const char ctf_py_cli_main_doc[];
extern const char ctf_py_convert_file_doc[];
PyObject *ctf_py_cbf_streams(PyObject *module, PyObject *args);
PyObject *ctf_py_cbf_write(PyObject *module, PyObject *args, PyObject *kwargs);
extern const char ctf_py_cbf_streams_doc[];
extern const char ctf_py_cbf_write_doc[];
PyObject *ctf_py_sweep_cut(PyObject *module, PyObject *args);
PyObject *ctf_py_sweep_boundary(PyObject *module, PyObject *args);
extern const char ctf_py_sweep_cut_doc[];
extern const char ctf_py_sweep_boundary_doc[];

#define CTF_PY_TOOLS_METHODS \
    {"cli_main", (PyCFunction)(void (*)(void))ctf_py_cli_main, METH_VARARGS, ctf_py_cli_main_doc}, \
        {"convert_file", (PyCFunction)(void (*)(void))ctf_py_convert_file, \
         METH_VARARGS | METH_KEYWORDS, ctf_py_convert_file_doc}, \
        {"cbf_streams", (PyCFunction)(void (*)(void))ctf_py_cbf_streams, METH_VARARGS, \
         ctf_py_cbf_streams_doc}, \
        {"cbf_write", (PyCFunction)(void (*)(void))ctf_py_cbf_write, METH_VARARGS | METH_KEYWORDS, \
         ctf_py_cbf_write_doc}, \
        {"sweep_cut", (PyCFunction)(void (*)(void))ctf_py_sweep_cut, METH_VARARGS, \
         ctf_py_sweep_cut_doc}, \
        {"sweep_boundary", (PyCFunction)(void (*)(void))ctf_py_sweep_boundary, METH_VARARGS, \
         ctf_py_sweep_boundary_doc},

#endif
