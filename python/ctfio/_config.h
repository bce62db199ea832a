/*
 * _config.h -- Reader() arguments to a ctf_config, and a ctf_config back to Reader keyword
 * arguments (_config.c), for the Reader type and bsconfig_load in _ctfio.c.
 */
#ifndef CTFIO_CONFIG_H
#define CTFIO_CONFIG_H

#include <Python.h>
#include <stdbool.h>
#include <stdint.h>

#include "ctfio.h"

/* A path or a list of paths (a corpus), converted with PyUnicode_FSConverter. */
typedef struct {
    PyObject *keep;              /* list of the bytes objects v points into */
    const char **v;              /* PyMem */
    size_t n;
    bool list;                   /* given as a list (a corpus), not a single path */
} path_list;

/* The parsed arguments of Reader(); the ctf_config points into these objects. */
typedef struct reader_args {
    PyObject *path;              /* bytes (PyUnicode_FSConverter): the first file */
    PyObject *keep;              /* tuple of the stream tuples whose strings defs point into */
    PyObject *names;             /* tuple of the stream names */
    PyObject *log;               /* borrowed; NULL for None */
    PyObject *remote_keep;       /* list of the bytes the remote options' strings point into */
    PyObject *chunk_cache;       /* the bytes cfg->chunk_cache points into, or NULL */
    PyObject *bad_records;       /* the bytes cfg->bad_records points into, or NULL */
    ctf_stream_def *defs;        /* PyMem */
    path_list paths;             /* a corpus: path was a list */
    struct reader_args *jargs;   /* per join: its streams and files (PyMem) */
    ctf_join_def *joins;         /* PyMem */
    size_t num_joins;
    struct reader_args *margs;   /* per mix part: its files, streams and joins (PyMem) */
    ctf_mix_part *mix;           /* PyMem */
    size_t num_mix;
} ctf_py_reader_args;

/* Parses Reader(path, streams, **options) into cfg (which ctf_config_init filled); cfg points
 * into ra until ctf_py_reader_args_clear. @return : 0, or -1 with an exception set. */
int ctf_py_reader_args_parse(PyObject *args, PyObject *kwargs, ctf_config *cfg,
                             ctf_py_reader_args *ra);

/* Releases what ctf_py_reader_args_parse kept (ra zeroed: safe to call twice). */
void ctf_py_reader_args_clear(ctf_py_reader_args *ra);
/* The remote options dict (as MinibatchSource resolves it) into cfg->remote; its strings stay
 * in ra (cleared with ctf_py_reader_args_clear). @return : 0, or -1 with an exception set. */
int ctf_py_parse_remote(PyObject *d, ctf_config *cfg, ctf_py_reader_args *ra);

/* Converts an integer-like object (operator.index) to [0, max], naming the parameter in the
 * message. @return : 0, or -1 with an exception set. */
int ctf_py_to_u64(PyObject *obj, const char *name, uint64_t max, uint64_t *out);

/* A configuration as Reader keyword arguments plus "path" and "streams" ("paths" for a corpus,
 * "joins" for joined deserializers, "mix" for a mix's parts).
 * @return : a new dict, or NULL with an exception set. */
PyObject *ctf_py_config_dict(const ctf_config *c);

/* reader_params() -> the parameter table, one dict per row (the stub generator and the
 * Python layer read it). */
PyObject *ctf_py_reader_params(PyObject *module, PyObject *unused);

/* check_workers(number_of_workers, worker_rank): the library's worker rule; TypeError for a
 * non-int (bool included), ValueError otherwise. */
PyObject *ctf_py_check_workers(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* reader_config(path, streams, **options) -> dict: Reader's arguments parsed and validated
 * without opening anything (the configuration as bsconfig_load returns one). */
PyObject *ctf_py_reader_config(PyObject *module, PyObject *args, PyObject *kwargs);

#define CTF_PY_CONFIG_METHODS \
    {"reader_params", (PyCFunction)(void (*)(void))ctf_py_reader_params, METH_NOARGS, \
     "reader_params() -> tuple of dict: the reader parameter table"}, \
        {"check_workers", (PyCFunction)(void (*)(void))ctf_py_check_workers, METH_FASTCALL, \
         "check_workers(number_of_workers, worker_rank): the worker rule (ValueError)"}, \
        {"reader_config", (PyCFunction)(void (*)(void))ctf_py_reader_config, \
         METH_VARARGS | METH_KEYWORDS, "reader_config(path, streams, **options) -> dict"},

#endif
