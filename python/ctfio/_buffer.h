/*
 * _buffer.h -- the Buffer type _buffer.c gives the ctfio._ctfio module.
 */
#ifndef CTFIO_BUFFER_H
#define CTFIO_BUFFER_H

#include <Python.h>

/* The type's spec; the module creates the type from it (instances only the module makes). */
extern PyType_Spec ctf_py_buffer_spec;

/* A Buffer of `type` over n0 elements (1-D, n1 < 0) or n0 x n1 elements (2-D, C order) at ptr
 * (NULL for none), each `itemsize` bytes of struct format `format` (a static string), owned by
 * `owner`, which the Buffer keeps alive. @return : a new reference, or NULL with an exception. */
PyObject *ctf_py_buffer_new(PyTypeObject *type, PyObject *owner, const void *ptr,
                            const char *format, Py_ssize_t itemsize, size_t n0, Py_ssize_t n1);

#endif
