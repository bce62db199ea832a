/*
 * _module.h -- what the extension's Reader (_ctfio.c) and Minibatch (_minibatch.c) share: the
 * module's state (its types, exceptions and interned names), the Minibatch object and the one
 * way a Minibatch's memory becomes a Buffer.
 */
#ifndef CTFIO_MODULE_H
#define CTFIO_MODULE_H

#include <Python.h>

#include "ctfio.h"
#include "_buffer.h"

/* The attributes stream_data sets on each object it makes (interned once, in this order). */
/* clang-format off */
#define DATA_ATTRS(X) \
    X(view, "_view") X(index, "_i") X(is_sparse, "_is_sparse") X(dim, "_dim") \
    X(frame_mode, "_frame_mode") X(num_sequences, "num_sequences") \
    X(num_samples, "num_samples") X(end_of_sweep, "end_of_sweep") X(position, "position") \
    X(sweep, "sweep") X(global_samples, "global_samples") \
    X(samples_per_sweep, "samples_per_sweep")
/* clang-format on */
#define DATA_ENUM(id, text) ATTR_##id,
enum { DATA_ATTRS(DATA_ENUM) NUM_DATA_ATTRS };
#undef DATA_ENUM

typedef struct {
    PyObject *attr[NUM_DATA_ATTRS]; /* interned names of stream_data's attributes */
    PyObject *CTFError;          /* base of the library's exceptions */
    PyObject *ParseError;        /* malformed data, limits, changed files, bad index caches */
    PyObject *StateError;        /* checkpoint states that do not fit the reader */
    PyObject *DataChangedError;  /* ParseError: the data file changed under the reader */
    PyObject *logger;            /* logging.getLogger("ctfio"), fetched on first use */
    PyTypeObject *ReaderType;
    PyTypeObject *MinibatchType;
    PyTypeObject *BufferType;
} modstate;

static inline modstate *module_state(PyObject *module)
{
    return (modstate *)PyModule_GetState(module);
}

/* The state of the module that defined tp (every type here comes from PyType_FromModuleAndSpec). */
static inline modstate *type_state(PyTypeObject *tp)
{
    return (modstate *)PyType_GetModuleState(tp);
}

typedef struct {
    PyObject_HEAD
    ctf_minibatch *mb; /* owned */
    uint64_t global_samples; /* index samples of the global minibatch (all workers) */
    uint64_t samples_per_sweep; /* index samples in one sweep */
} MinibatchObject;

/* A Buffer over n0 elements (1-D, n1 < 0) or n0 x n1 elements (2-D) at ptr, owned by owner. */
static inline PyObject *buffer_new(modstate *st, PyObject *owner, const void *ptr,
                                   const char *format, Py_ssize_t itemsize, size_t n0,
                                   Py_ssize_t n1)
{
    return ctf_py_buffer_new(st->BufferType, owner, ptr, format, itemsize, n0, n1);
}

/* The Minibatch type (_minibatch.c) and the wrapping of a C minibatch (taking ownership: freed
 * on failure). */
extern PyType_Spec ctf_py_minibatch_spec;
PyObject *ctf_py_minibatch_wrap(modstate *st, ctf_minibatch *mb);

#endif
