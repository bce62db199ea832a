/*
 * _tools.c -- the command-line tool and the text converters, bound for Python.
 *
 * cli_main(argv) runs tools/ctfio.c's main() (compiled into this extension under the name
 * ctfio_cli_main, see setup.py), so the `ctfio` console script and `python -m ctfio` are the
 * same program as build/ctfio: same options, messages and exit statuses. It is meant to be the
 * last thing a process does: the tool may call exit() itself (usage errors), and SIGINT and
 * SIGPIPE get their default actions back (Python ignores SIGPIPE and turns SIGINT into an
 * exception that C code would never see), as they have for the compiled binary.
 *
 * convert_file(...) runs ctf_convert_file() with the GIL released; the progress callback takes
 * the GIL back every few MiB to run Python's signal handlers and the Python callable (if any),
 * whose exception (KeyboardInterrupt) cancels the conversion. A failure returns the error
 * record as a tuple; ctfio/convert.py raises it.
 *
 * cbf_streams(path) lists a CBF file's streams (ctfio.CBFDeserializer completes its StreamDefs
 * from them); cbf_write(...) runs ctf_cbf_write with the GIL released (ctfio.convert "cbf").
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_config.h"
#include "_tools.h"
#include "cli.h"
#include "ctfio.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

int ctfio_cli_main(int argc, char **argv);

const char ctf_py_cli_main_doc[] =
    "cli_main(argv) -> int\n\nRuns the ctfio command-line tool with argv (argv[0] is the program "
    "name) and returns its exit status. It may end the process itself.";

PyObject *ctf_py_cli_main(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *list, *result = NULL;
    if (!PyArg_ParseTuple(args, "O!:cli_main", &PyList_Type, &list)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list);
    char **argv = PyMem_Calloc((size_t)n + 1, sizeof *argv);
    PyObject **keep = PyMem_Calloc((size_t)n + 1, sizeof *keep);
    if (!argv || !keep) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        /* Bytes as the OS gave them (surrogateescape), as a compiled main() receives them. */
        if (!PyUnicode_FSConverter(PyList_GET_ITEM(list, i), &keep[i])) goto error;
        argv[i] = PyBytes_AS_STRING(keep[i]);
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    fflush(stdout);
    fflush(stderr);
    int rc = ctfio_cli_main((int)n, argv);
    fflush(stdout);
    fflush(stderr);
    result = PyLong_FromLong(rc);
error:
    if (keep)
        for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(keep[i]);
    PyMem_Free(keep);
    PyMem_Free(argv);
    return result;
}

typedef struct py_progress {
    PyObject *fn;
    PyThreadState *ts;
    bool failed;
} py_progress;

static int call_progress(void *user, uint64_t done, uint64_t total)
{
    py_progress *p = user;
    PyEval_RestoreThread(p->ts);
    int stop = 0;
    /* Python's own signal handlers run here (a pending Ctrl-C becomes KeyboardInterrupt), with
     * or without a callable: otherwise they would wait for the end of the conversion. */
    if (PyErr_CheckSignals() < 0)
        stop = 1;
    else if (p->fn != Py_None) {
        PyObject *r = PyObject_CallFunction(p->fn, "KK", (unsigned long long)done,
                                            (unsigned long long)total);
        if (!r) stop = 1;
        Py_XDECREF(r);
    }
    if (stop) p->failed = true; /* the exception stays set for the caller */
    p->ts = PyEval_SaveThread();
    return stop;
}

const char ctf_py_convert_file_doc[] =
    "convert_file(src, dst, format, *, dim=0, index_base=-1, classes=0, label_columns=None, "
    "delimiter=',', header=False, features=None, labels=None, progress=None)\n\n"
    "Runs ctf_convert_file. Returns the result dict (with 'config'); a library error raises\n"
    "as every reader call's does (ParseError, DataChangedError, OSError, ...).";

PyObject *ctf_py_convert_file(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"src",     "dst",           "format",    "dim",    "index_base",
                         "classes", "label_columns", "delimiter", "header", "features",
                         "labels",  "progress",      NULL};
    PyObject *src_o = NULL, *dst_o = NULL, *progress = Py_None, *result = NULL;
    const char *format, *labels_cols = NULL, *delim = ",", *fname = NULL, *lname = NULL;
    Py_ssize_t dim = 0, classes = 0;
    int base = -1, header = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&O&s|ninzspzzO:convert_file", kw,
                                     PyUnicode_FSConverter, &src_o, PyUnicode_FSConverter, &dst_o,
                                     &format, &dim, &base, &classes, &labels_cols, &delim, &header,
                                     &fname, &lname, &progress))
        goto done;
    ctf_convert_options opt = {0};
    if (!strcmp(format, "libsvm"))
        opt.format = CTF_CONVERT_LIBSVM;
    else if (!strcmp(format, "csv"))
        opt.format = CTF_CONVERT_CSV;
    else {
        PyErr_Format(PyExc_ValueError, "convert: unknown text format '%s' (libsvm or csv)", format);
        goto done;
    }
    if (dim < 0 || classes < 0 || strlen(delim) != 1) {
        PyErr_SetString(PyExc_ValueError, "convert: dim and classes must be >= 0, the delimiter "
                                          "one character");
        goto done;
    }
    opt.dim = (size_t)dim;
    opt.index_base = base;
    opt.classes = (size_t)classes;
    opt.label_columns = labels_cols;
    opt.delimiter = delim[0];
    opt.header = header != 0;
    opt.features_name = fname;
    opt.labels_name = lname;
    py_progress pp = {progress, NULL, false};
    opt.progress = call_progress;
    opt.progress_user = &pp;
    const char *src = PyBytes_AS_STRING(src_o), *dst = PyBytes_AS_STRING(dst_o);
    ctf_convert_result r;
    ctf_error err;
    pp.ts = PyEval_SaveThread();
    int rc = ctf_convert_file(src, dst, &opt, &r, &err);
    PyEval_RestoreThread(pp.ts);
    if (pp.failed) goto done;
    if (rc) {
        ctf_py_raise_error(module, &err);
        goto done;
    }
    size_t need = cli_convert_describe(&r, &opt, dst, NULL, 0);
    char *text = PyMem_Malloc(need + 1);
    if (!text) {
        PyErr_NoMemory();
        goto done;
    }
    cli_convert_describe(&r, &opt, dst, text, need + 1);
    result = Py_BuildValue("{sKsKsKsKsnsnsOsOsOsisKss}", "rows", (unsigned long long)r.rows,
                           "sequences", (unsigned long long)r.sequences, "bytes_read",
                           (unsigned long long)r.bytes_read, "bytes_written",
                           (unsigned long long)r.bytes_written, "features_dim",
                           (Py_ssize_t)r.features_dim, "labels_dim", (Py_ssize_t)r.labels_dim,
                           "features_sparse", r.features_sparse ? Py_True : Py_False,
                           "labels_sparse", r.labels_sparse ? Py_True : Py_False, "sequence_ids",
                           r.sequence_ids ? Py_True : Py_False, "index_base", r.index_base,
                           "max_sequence_length", (unsigned long long)r.max_sequence_length,
                           "config", text);
    PyMem_Free(text);
done:
    Py_XDECREF(src_o);
    Py_XDECREF(dst_o);
    return result;
}

const char ctf_py_cbf_streams_doc[] =
    "cbf_streams(path, remote=None) -> [(name, dim, is_sparse, precision), ...]\n\n"
    "The streams a CBF file holds, in file order; precision is 'float' or 'double'. remote: the\n"
    "remote options dict of a reader, for an s3:// or http(s):// object.";

PyObject *ctf_py_cbf_streams(PyObject *module, PyObject *args)
{
    PyObject *arg, *remote = Py_None, *path_o = NULL, *list = NULL;
    if (!PyArg_ParseTuple(args, "O|O:cbf_streams", &arg, &remote)) return NULL;
    if (!PyUnicode_FSConverter(arg, &path_o)) return NULL;
    ctf_config cfg;
    ctf_py_reader_args ra;
    memset(&cfg, 0, sizeof cfg);
    memset(&ra, 0, sizeof ra);
    if (remote != Py_None && ctf_py_parse_remote(remote, &cfg, &ra) < 0) {
        Py_DECREF(path_o);
        ctf_py_reader_args_clear(&ra);
        return NULL;
    }
    ctf_stream_def *st = NULL;
    size_t n = 0;
    ctf_precision prec = CTF_FLOAT32;
    ctf_error err;
    int rc;
    const char *path = PyBytes_AS_STRING(path_o);
    const ctf_remote_options *ro = remote != Py_None ? &cfg.remote : NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = ctf_cbf_streams_at(path, ro, &st, &n, &prec, &err);
    Py_END_ALLOW_THREADS
    Py_DECREF(path_o);
    ctf_py_reader_args_clear(&ra);
    if (rc) return ctf_py_raise_error(module, &err);
    if (!(list = PyList_New((Py_ssize_t)n))) goto done;
    for (size_t i = 0; i < n; i++) {
        PyObject *t = Py_BuildValue("(snOs)", st[i].name, (Py_ssize_t)st[i].dim,
                                    st[i].is_sparse ? Py_True : Py_False,
                                    prec == CTF_FLOAT64 ? "double" : "float");
        if (!t) {
            Py_CLEAR(list);
            goto done;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
done:
    ctf_cbf_streams_free(st, n);
    return list;
}

const char ctf_py_cbf_write_doc[] =
    "cbf_write(path, streams, dst, chunk_size, precision, skip_sequence_ids=False)\n\n"
    "Runs ctf_cbf_write (streams as for Reader). Returns the result dict; a library error\n"
    "raises as every reader call's does.";

PyObject *ctf_py_cbf_write(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"path",      "streams",           "dst", "chunk_size",
                         "precision", "skip_sequence_ids", NULL};
    PyObject *path, *streams, *dst_o = NULL, *result = NULL, *rargs = NULL, *rkw = NULL;
    unsigned long long chunk;
    const char *prec;
    int skip = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO&Ks|p:cbf_write", kw, &path, &streams,
                                     PyUnicode_FSConverter, &dst_o, &chunk, &prec, &skip))
        return NULL;
    ctf_config cfg;
    ctf_config_init(&cfg);
    ctf_py_reader_args ra;
    memset(&ra, 0, sizeof ra);
    if (strcmp(prec, "float") && strcmp(prec, "double")) {
        PyErr_Format(PyExc_ValueError,
                     "convert: precision must be 'float' or 'double' (got "
                     "'%s')",
                     prec);
        goto done;
    }
    if (!(rargs = Py_BuildValue("(OO)", path, streams)) ||
        !(rkw = Py_BuildValue("{sO}", "skip_sequence_ids", skip ? Py_True : Py_False)))
        goto done;
    if (ctf_py_reader_args_parse(rargs, rkw, &cfg, &ra)) goto done;
    ctf_cbf_write_result r;
    ctf_error err;
    const char *dst = PyBytes_AS_STRING(dst_o);
    const ctf_precision p = strcmp(prec, "double") ? CTF_FLOAT32 : CTF_FLOAT64;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ctf_cbf_write(&cfg, dst, (uint64_t)chunk, p, &r, &err);
    Py_END_ALLOW_THREADS
    if (rc) {
        ctf_py_raise_error(module, &err);
        goto done;
    }
    result = Py_BuildValue("{sKsKsKsKsK}", "sequences", (unsigned long long)r.sequences, "samples",
                           (unsigned long long)r.samples, "nonzeros",
                           (unsigned long long)r.nonzeros, "chunks", (unsigned long long)r.chunks,
                           "bytes_written", (unsigned long long)r.bytes_written);
done:
    ctf_py_reader_args_clear(&ra);
    Py_XDECREF(rargs);
    Py_XDECREF(rkw);
    Py_XDECREF(dst_o);
    return result;
}
