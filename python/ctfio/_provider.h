/*
 * _provider.h -- the provider functions and type _provider.c gives the ctfio._ctfio module table.
 */
#ifndef CTFIO_PROVIDER_H
#define CTFIO_PROVIDER_H

#include <Python.h>

PyObject *ctf_py_provider_encode(PyObject *module, PyObject *args);
PyObject *ctf_py_provider_pack(PyObject *module, PyObject *args);
extern const char ctf_py_provider_encode_doc[];
extern const char ctf_py_provider_pack_doc[];
/* Adds the SamplePool type (one pass of a provider over lib/reader/pool.c). @return : 0 or -1. */
int ctf_py_provider_add_types(PyObject *m);

#endif
