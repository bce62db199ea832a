/*
 * _provider.h -- the provider functions _provider.c gives the ctfio._ctfio module table.
 */
#ifndef CTFIO_PROVIDER_H
#define CTFIO_PROVIDER_H

#include <Python.h>

PyObject *ctf_py_provider_encode(PyObject *module, PyObject *args);
PyObject *ctf_py_provider_pack(PyObject *module, PyObject *args);
extern const char ctf_py_provider_encode_doc[];
extern const char ctf_py_provider_pack_doc[];

#endif
