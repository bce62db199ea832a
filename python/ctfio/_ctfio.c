/*
 * _ctfio.c -- the CPython extension ctfio._ctfio: a thin, zero-copy binding of the C reader
 * (include/ctfio.h) for the pure-Python layer in ctfio/source.py.
 *
 * What it exposes:
 *   Reader      owns a ctf_reader; next() returns a Minibatch (or None at the end of the data)
 *               and undo() takes it back, get_state()/restore_state()/state_at() are the JSON
 *               checkpoint, position is read/write; stats(), io_counters(), perf() and
 *               index_info() are the counters as dicts (_stats.c); close() frees the reader.
 *   Minibatch   owns a ctf_minibatch; stream(i) describes one stream as a dict of Buffers;
 *               stream_data(cls, keys, frame_mode) makes the {key: cls} dict of
 *               MinibatchSource.next_minibatch in one call, whose objects ask buffer(i, part)
 *               for a Buffer when an array is first wanted.
 *   Buffer      the buffer protocol over memory owned by a Minibatch (format, shape, strides,
 *               read-only). It holds a strong reference to its Minibatch, so NumPy arrays made
 *               from it keep the data alive after the Minibatch, later next() calls and even the
 *               Reader are gone. NumPy is never needed at build time.
 *   CTFError, ParseError(CTFError, ValueError) and its subclass DataChangedError,
 *               StateError(CTFError, ValueError), bsconfig_load; the providers' encoder and
 *               pool (_provider.c) and the command-line tool and converters (_tools.c).
 *   The Buffer type lives in _buffer.c, the dicts of Reader.stats()/index_info() in _stats.c,
 *   Reader() argument parsing and the configuration dicts in _config.c.
 *
 * Threads: the GIL is released around every call that may index, parse or join threads
 * (ctf_reader_open/next/seek/restore_state/free). The library may call the log callback inside
 * those calls, so the C callback (always installed: the library itself prints nothing) only
 * appends the record to a C array on the Reader; the records are handed to the Python callable,
 * or to Python's logging (logger "ctfio") when there is none, in order, once the GIL is back.
 * A Reader must be used by one thread at a time (ctfio.h rule 6): a `busy` flag, read and written
 * under the GIL, turns a second concurrent call into RuntimeError instead of a data race.
 * Ctrl-C: Python runs signal handlers on the main thread only, between bytecodes, so a next()
 * of a reader of remote data called there runs on a helper thread of the Reader while the main
 * thread waits and checks for signals every 50 ms; a handler that raises (KeyboardInterrupt)
 * cancels the reader's requests (ctf_reader_cancel) if the call has not ended 250 ms later.
 *
 * Layout: boxed sections in the order module state (_module.h), exceptions and error mapping,
 * configuration (bsconfig_load; the argument parsing lives in _config.c), Buffer (_buffer.c),
 * Minibatch (_minibatch.c), Reader, checkpoint helpers, module init. Types are heap types with
 * module state (as CPython's _csv.c); every function that owns references has one `error` exit.
 *
 * Adding a ctf_config field: update ctf_py_reader_args_parse and ctf_py_config_dict (_config.c),
 * the Reader signature in _ctfio.pyi and ctfio/source.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "ctfio.h"
#include "_buffer.h"   /* section 4, the Buffer type, lives in _buffer.c */
#include "_module.h"   /* section 1, the module state; section 5, Minibatch, in _minibatch.c */
#include "_config.h"   /* section 3, Reader() arguments and config dicts, in _config.c */
#include "_pyutil.h"   /* text_obj, opt_path, dict_put */
#include "_stats.h"    /* stats() and index_info() as dicts, in _stats.c */
#include "_provider.h" /* section 7b, provider batch assembly, lives in _provider.c */
#include "_tools.h"    /* the command-line tool and converters, in _tools.c */

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

PyMODINIT_FUNC PyInit__ctfio(void);


/*======================================================================
 * 1. Module state: _module.h (shared with _minibatch.c)
 *====================================================================*/

/* One log record buffered while the GIL was released. */
typedef struct {
    ctf_severity sev;
    ctf_error err;
} log_record;

typedef struct {
    PyObject_HEAD
    ctf_reader *reader;          /* NULL once closed */
    PyObject *path;              /* str: the data file (repr) */
    PyObject *names;             /* tuple of the stream names, config order (stats) */
    PyObject *log;               /* the log callable, or NULL for Python's logger "ctfio" */
    log_record *logs; /* records waiting for delivery (PyMem_Raw*: filled without GIL) */
    size_t num_logs, logs_cap; /* records held, capacity */
    size_t logs_lost; /* records dropped because the buffer could not grow */
    size_t num_workers; /* the current partition (next() keeps it unless given) */
    size_t worker_rank;
    int busy; /* a call is in progress (possibly without the GIL) */
    uint64_t samples_per_sweep; /* index samples in one sweep (every file, joined) */
    int bptt; /* truncation_length > 0 or a mix: undo restores a state (a
                                  * mix's seek replays its timeline from the start) */
    int undo_ok; /* the fields below can take back the last next() */
    uint64_t undo_pos; /* the position before it */
    char *undo_state; /* bptt: the state before it (PyMem) */
    pid_t pid; /* the process that opened it: a fork() copy has no threads */
    int remote; /* reads remote data: next() on the main thread waits on the helper */
    struct call_helper *helper; /* the thread that runs such a next(), or NULL */
} ReaderObject;


/*======================================================================
 * 2. Exceptions and error mapping
 *====================================================================*/

#if PY_VERSION_HEX >= 0x030C0000
static PyObject *exc_take(void) { return PyErr_GetRaisedException(); }
static void exc_give(PyObject *exc) { PyErr_SetRaisedException(exc); }
#else
/* The pending exception as one normalized object (its traceback attached), or NULL. */
static PyObject *exc_take(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (!type) return NULL;
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb) {
        PyException_SetTraceback(value, tb);
        Py_DECREF(tb);
    }
    Py_DECREF(type);
    return value;
}

/* Raises exc again (steals the reference). */
static void exc_give(PyObject *exc)
{
    PyObject *type = (PyObject *)Py_TYPE(exc);
    Py_INCREF(type);
    PyErr_Restore(type, exc, PyException_GetTraceback(exc));
}
#endif

static PyObject *opt_u64(uint64_t v)
{
    if (v == 0) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(v);
}

static PyObject *opt_offset(int64_t v)
{
    if (v < 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(v);
}

static int attr_put(PyObject *obj, const char *name, PyObject *value)
{
    if (!value) return -1;
    int rc = PyObject_SetAttrString(obj, name, value);
    Py_DECREF(value);
    return rc;
}

/* The library puts strerror(errno) at the end of its I/O messages ("cannot open file: No such
 * file or directory"); recovering the number lets OSError pick FileNotFoundError and friends. */
static int guess_errno(const char *message)
{
    const size_t n = strlen(message);
    for (int e = 1; e < 134; e++) {
        const char *s = strerror(e);
        const size_t k = strlen(s);
        if (k + 2 <= n && memcmp(message + n - k, s, k) == 0 && message[n - k - 2] == ':') return e;
    }
    return EIO;
}

/* Raises the Python exception for a library error record. @return : NULL, always. */
static PyObject *raise_error(modstate *st, const ctf_error *e)
{
    char text[CTF_ERROR_PATH_MAX + CTF_ERROR_MSG_MAX + 96];
    PyObject *type = st->CTFError, *exc = NULL;
    ctf_error_format(e, CTF_SEV_ERROR, text, sizeof text);
    switch (e->code) {
    case CTF_EINVAL: /* a plain ValueError; the message names the parameter */
        exc = text_obj(e->path[0] ? text : e->message);
        if (exc) PyErr_SetObject(PyExc_ValueError, exc);
        goto error;
    case CTF_ENOMEM:
        exc = text_obj(e->message[0] ? e->message : "out of memory");
        if (exc) PyErr_SetObject(PyExc_MemoryError, exc);
        goto error;
    case CTF_EIO: /* OSError(errno, message, filename) picks the subclass from errno */
        exc = PyObject_CallFunction(PyExc_OSError, "iNN", guess_errno(e->message),
                                    text_obj(e->message), opt_path(e->path));
        if (exc) PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        goto error;
    case CTF_ESTATE: type = st->StateError; break;
    case CTF_ECHANGED: type = st->DataChangedError; break;
    case CTF_ECANCELED: break; /* CTFError, code "CTF_ECANCELED": the reader was cancelled */
    case CTF_EPARSE:
    case CTF_ELIMIT:
    case CTF_EINDEX: type = st->ParseError; break;
    default: break;
    }
    exc = PyObject_CallFunction(type, "N", text_obj(text));
    if (!exc) goto error;
    if (attr_put(exc, "code", PyUnicode_FromString(ctf_error_name(e->code))) < 0 ||
        attr_put(exc, "path", opt_path(e->path)) < 0 ||
        attr_put(exc, "line", opt_u64(e->line)) < 0 ||
        attr_put(exc, "column", opt_u64(e->column)) < 0 ||
        attr_put(exc, "offset", opt_offset(e->offset)) < 0 ||
        attr_put(exc, "message", text_obj(e->message)) < 0)
        goto error;
    PyErr_SetObject(type, exc);
error:
    Py_XDECREF(exc);
    return NULL;
}

/* raise_error for the extension's other files (_tools.c: the converters), so that one mapping
 * turns a library error into a Python exception. @return : NULL, always. */
PyObject *ctf_py_raise_error(PyObject *module, const ctf_error *e)
{
    return raise_error(module_state(module), e);
}

/* Raises for a status code that came without an error record. @return : NULL. */
static PyObject *raise_code(modstate *st, int code, const char *what)
{
    ctf_error e = {.code = code, .offset = -1};
    snprintf(e.message, sizeof e.message, "%s: %s", what, ctf_strerror(code));
    return raise_error(st, &e);
}

/*======================================================================
 * 3. Configuration: Reader() arguments and config dicts live in _config.c
 *====================================================================*/

PyDoc_STRVAR(
    bsconfig_load_doc,
    "bsconfig_load(path, section=None, overrides=()) -> dict\n\n"
    "Reads a BrainScript reader configuration and returns Reader keyword arguments plus 'path'\n"
    "and 'streams'; a corpus adds 'paths' (its files and patterns), a composite reader 'joins'\n"
    "(paths, streams, skip_sequence_ids, origin) per joined deserializer. Raises ValueError\n"
    "naming the file and line on invalid configurations.");

static PyObject *bsconfig_load(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"path", "section", "overrides", NULL};
    modstate *st = module_state(module);
    PyObject *path = NULL, *overrides = NULL, *seq = NULL, *result = NULL;
    const char *section = NULL;
    const char **ov = NULL;
    ctf_bsconfig *doc = NULL;
    ctf_config cfg;
    ctf_error err;
    Py_ssize_t n = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|zO:bsconfig_load", kwlist,
                                     PyUnicode_FSConverter, &path, &section, &overrides))
        goto error;
    if (overrides) {
        if (PyUnicode_Check(overrides)) {
            PyErr_SetString(PyExc_TypeError, "overrides: must be a sequence of 'KEY=VALUE' "
                                             "strings (got a single string)");
            goto error;
        }
        seq = PySequence_Fast(overrides, "overrides: must be a sequence of 'KEY=VALUE' strings");
        if (!seq) goto error;
        n = PySequence_Fast_GET_SIZE(seq);
    }
    ov = PyMem_Calloc((size_t)(n ? n : 1), sizeof *ov);
    if (!ov) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyUnicode_Check(item)) {
            PyErr_Format(PyExc_TypeError, "overrides[%zd]: must be a 'KEY=VALUE' str (got %R)", i,
                         item);
            goto error;
        }
        if (!(ov[i] = PyUnicode_AsUTF8(item))) goto error;
    }
    ctf_config_init(&cfg);
    int rc = ctf_bsconfig_load(PyBytes_AS_STRING(path), section, ov, (size_t)n, &doc, &err);
    if (!rc) rc = ctf_bsconfig_apply(doc, &cfg, &err);
    if (rc) {
        raise_error(st, &err);
        goto error;
    }
    result = ctf_py_config_dict(&cfg);
error:
    ctf_bsconfig_free(doc);
    PyMem_Free(ov);
    Py_XDECREF(seq);
    Py_XDECREF(path);
    return result;
}

/*======================================================================
 * 4. Buffer (_buffer.c) and 5. Minibatch (_minibatch.c)
 *====================================================================*/

/*======================================================================
 * 6. Reader
 *====================================================================*/

/* Checkpoint helpers (section 7). */
static PyObject *state_save(ReaderObject *self, const uint64_t *at);
static int state_restore(ReaderObject *self, PyObject *state);
static int reader_seek(ReaderObject *self, PyObject *value);

/* The library's log sink, always installed (the library itself never writes to a terminal).
 * Runs WITHOUT the GIL: it only appends to a C array (PyMem_Raw* is safe without the GIL);
 * reader_flush_logs delivers later, to the log callable or to Python's logging module. */
static void reader_log_cb(void *user, ctf_severity sev, const ctf_error *what)
{
    ReaderObject *self = user;
    if (self->num_logs == self->logs_cap) {
        size_t cap = self->logs_cap ? 2 * self->logs_cap : 16;
        log_record *p = PyMem_RawRealloc(self->logs, cap * sizeof *p);
        if (!p) {
            self->logs_lost++;
            return;
        }
        self->logs = p;
        self->logs_cap = cap;
    }
    self->logs[self->num_logs].sev = sev;
    self->logs[self->num_logs].err = *what;
    self->num_logs++;
}

/* Hands one record to logging.getLogger("ctfio") at the level of its severity; Python's
 * logging prints warnings and errors to stderr when the application configured nothing.
 * @return : 0, or -1 with an exception set. */
static int log_to_logging(modstate *st, ctf_severity sev, const char *text)
{
    if (!st->logger) {
        PyObject *logging = PyImport_ImportModule("logging");
        if (!logging) return -1;
        st->logger = PyObject_CallMethod(logging, "getLogger", "s", "ctfio");
        Py_DECREF(logging);
        if (!st->logger) return -1;
    }
    const int level = sev == CTF_SEV_ERROR ? 40 : sev == CTF_SEV_WARNING ? 30 : 20;
    PyObject *res = PyObject_CallMethod(st->logger, "log", "isN", level, "%s", text_obj(text));
    if (!res) return -1;
    Py_DECREF(res);
    return 0;
}

/* Calls the log callable (or the "ctfio" logger) for every buffered record, in order. If it
 * raises, the rest are still delivered (later exceptions go to sys.unraisablehook) and the first
 * is re-raised.
 * @return : 0, or -1 with an exception set. */
static int reader_flush_logs(ReaderObject *self)
{
    char text[CTF_ERROR_PATH_MAX + CTF_ERROR_MSG_MAX + 96];
    PyObject *first = NULL;
    for (size_t i = 0; i < self->num_logs; i++) {
        const log_record *rec = &self->logs[i];
        ctf_error_format(&rec->err, rec->sev, text, sizeof text);
        int ok;
        if (self->log) {
            PyObject *res = PyObject_CallFunction(self->log, "iNNNNN", (int)rec->sev,
                                                  text_obj(text), opt_path(rec->err.path),
                                                  opt_u64(rec->err.line), opt_u64(rec->err.column),
                                                  opt_offset(rec->err.offset));
            ok = res != NULL;
            Py_XDECREF(res);
        } else {
            ok = log_to_logging(type_state(Py_TYPE(self)), rec->sev, text) == 0;
        }
        if (ok)
            continue;
        else if (!first)
            first = exc_take();
        else
            PyErr_WriteUnraisable(self->log ? self->log : Py_None);
    }
    self->num_logs = 0;
    if (self->logs_cap > 256) { /* do not keep a burst's buffer for the reader's life */
        PyMem_RawFree(self->logs);
        self->logs = NULL;
        self->logs_cap = 0;
    }
    if (self->logs_lost && !first &&
        PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                         "ctfio: %zu log records were lost (out of "
                         "memory)",
                         self->logs_lost) < 0)
        first = exc_take();
    self->logs_lost = 0;
    if (!first) return 0;
    exc_give(first);
    return -1;
}

/* Ends a call into the library: delivers the buffered log records, then raises for rc != 0.
 * When both fail, the library error is raised with the callback's exception as __context__.
 * @return : 0, or -1 with an exception set. */
static int reader_finish(ReaderObject *self, int rc, const ctf_error *err)
{
    PyObject *log_exc = NULL, *exc;
    if ((self->num_logs || self->logs_lost) && reader_flush_logs(self) < 0) {
        if (!rc) return -1;
        log_exc = exc_take();
    }
    if (!rc) return 0;
    raise_error(type_state(Py_TYPE(self)), err);
    if (log_exc && (exc = exc_take()) != NULL) {
        PyException_SetContext(exc, log_exc); /* steals log_exc */
        log_exc = NULL;
        exc_give(exc);
    }
    Py_XDECREF(log_exc);
    return -1;
}

/* Guards every method: the reader must be open and not inside another call. */
static int reader_enter(ReaderObject *self)
{
    if (!self->reader) {
        PyErr_SetString(PyExc_ValueError, "reader is closed");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Reader is already in use (a Reader must not be "
                        "used from two threads at once, nor from its own log callback)");
        return -1;
    }
    if (self->pid != getpid()) {
        PyErr_Format(PyExc_RuntimeError,
                     "Reader was opened in process %ld and this is a "
                     "fork() of it, where its prefetch threads do not run; open a new one here",
                     (long)self->pid);
        return -1;
    }
    return 0;
}

/* The main thread of the process (signal handlers run there only), from module init. */
static unsigned long main_thread_ident;

/* A thread that runs a Reader's next() while the main thread waits on it (see the top). The
 * fields below mu are the job and its result, handed over under mu. */
typedef struct call_helper {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    enum { HELPER_IDLE, HELPER_POSTED, HELPER_DONE, HELPER_EXIT } state;
    ctf_reader *reader;
    int set;               /* ctf_reader_set_worker(nw, rank) first */
    size_t nw, rank;
    uint64_t num_samples, period;
    int wrc, rc;           /* set_worker's and next's status */
    uint64_t before;       /* the position before next */
    ctf_minibatch *mb;
} call_helper;

static void *helper_main(void *arg)
{
    call_helper *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (h->state != HELPER_POSTED && h->state != HELPER_EXIT)
            pthread_cond_wait(&h->cv, &h->mu);
        if (h->state == HELPER_EXIT) break;
        pthread_mutex_unlock(&h->mu);
        ctf_reader *r = h->reader;
        h->wrc = h->set ? ctf_reader_set_worker(r, h->nw, h->rank) : 0;
        h->before = ctf_reader_position(r);
        h->rc = h->wrc ? h->wrc : ctf_reader_next_within(r, h->num_samples, h->period, &h->mb);
        pthread_mutex_lock(&h->mu);
        h->state = HELPER_DONE;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* The Reader's helper, started on first use. @return : NULL when it cannot start (the call
 * then runs on the caller's thread, as for local data). */
static call_helper *helper_get(ReaderObject *self)
{
    if (self->helper) return self->helper;
    call_helper *h = PyMem_RawCalloc(1, sizeof *h);
    if (!h) return NULL;
    if (pthread_mutex_init(&h->mu, NULL)) goto fail_mu;
    if (pthread_cond_init(&h->cv, NULL)) goto fail_cv;
    h->state = HELPER_IDLE;
    if (pthread_create(&h->thread, NULL, helper_main, h)) goto fail_thread;
    return self->helper = h;
fail_thread:
    pthread_cond_destroy(&h->cv);
fail_cv:
    pthread_mutex_destroy(&h->mu);
fail_mu:
    PyMem_RawFree(h);
    return NULL;
}

/* Ends and joins the helper (idle: no call is in flight when a Reader is freed). */
static void helper_stop(ReaderObject *self)
{
    call_helper *h = self->helper;
    self->helper = NULL;
    if (!h) return;
    pthread_mutex_lock(&h->mu);
    h->state = HELPER_EXIT;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->thread, NULL);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    PyMem_RawFree(h);
}

/* Waits up to ms for h's job to end, without the GIL. @return : 1 when it ended (h is idle
 * again), else 0. */
static int helper_wait(call_helper *h, long ms)
{
    pthread_mutex_lock(&h->mu);
    if (h->state != HELPER_DONE) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += ms * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
    }
    const int done = h->state == HELPER_DONE;
    if (done) h->state = HELPER_IDLE;
    pthread_mutex_unlock(&h->mu);
    return done;
}

/* Runs h's posted job and waits for it with the GIL released, running the signal handlers
 * every 50 ms. A handler that raises has its exception kept in *sig (the first only); 250 ms
 * later the reader's requests are cancelled if the call has not ended. Called with the GIL. */
static void helper_run(call_helper *h, PyObject **sig)
{
    *sig = NULL;
    int since_sig_ms = 0, cancelled = 0, done = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&h->mu);
    h->state = HELPER_POSTED;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    Py_END_ALLOW_THREADS
    while (!done) {
        Py_BEGIN_ALLOW_THREADS
        done = helper_wait(h, 50);
        Py_END_ALLOW_THREADS
        if (done) break;
        if (!*sig) {
            if (PyErr_CheckSignals() < 0) *sig = exc_take();
        } else if (!cancelled && (since_sig_ms += 50) >= 250) {
            ctf_reader_cancel(h->reader);
            cancelled = 1;
        }
    }
}

/* Frees the C reader (joining its prefetch threads without holding the GIL). */
static void reader_free(ReaderObject *self)
{
    ctf_reader *r = self->reader;
    self->reader = NULL;
    if (!r) return;
    /* In a fork() child the prefetch threads do not exist (and may have held the reader's
       locks at the fork): joining them would wait forever, so the copy is leaked instead. */
    if (self->pid != getpid()) return;
    Py_BEGIN_ALLOW_THREADS
    helper_stop(self);
    ctf_reader_free(r); /* cancels its requests first: a stuck server is not waited for */
    Py_END_ALLOW_THREADS
}

static PyObject *Reader_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    ctf_py_reader_args ra = {0};
    ReaderObject *self = NULL;
    ctf_reader *reader = NULL;
    ctf_config cfg;
    ctf_error err;
    int rc;
    ctf_config_init(&cfg);
    if (ctf_py_reader_args_parse(args, kwargs, &cfg, &ra) < 0) goto error;
    if (!(self = (ReaderObject *)type->tp_alloc(type, 0))) goto error;
    if (!(self->path = PyUnicode_DecodeFSDefault(cfg.num_mix ? cfg.mix[0].paths[0] : cfg.path)))
        goto error;
    self->names = ra.names;
    ra.names = NULL;
    if (ra.log) {
        Py_INCREF(ra.log);
        self->log = ra.log;
    }
    cfg.log = reader_log_cb;
    cfg.log_user = self;
    self->num_workers = cfg.num_workers;
    self->worker_rank = cfg.worker_rank;
    self->busy = 1;
    self->pid = getpid();
    Py_BEGIN_ALLOW_THREADS
    rc = ctf_reader_open(&cfg, &reader, &err);
    Py_END_ALLOW_THREADS
    self->reader = reader;
    if (reader_finish(self, rc, &err) < 0) goto error;
    self->samples_per_sweep = ctf_reader_samples_per_sweep(reader);
    ctf_io_counters io;
    ctf_reader_get_io_counters(reader, &io);
    self->remote = io.requests > 0; /* every remote open asks the server something */
    self->bptt = cfg.truncation_length > 0 || cfg.num_mix > 0;
    self->busy = 0;
    ctf_py_reader_args_clear(&ra);
    return (PyObject *)self;
error:
    if (self) self->busy = 0;
    ctf_py_reader_args_clear(&ra);
    Py_XDECREF(self);
    return NULL;
}

static int Reader_traverse(ReaderObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->log);
    Py_VISIT(self->path);
    Py_VISIT(self->names);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int Reader_clear(ReaderObject *self)
{
    Py_CLEAR(self->log);
    Py_CLEAR(self->path);
    Py_CLEAR(self->names);
    return 0;
}

static void Reader_dealloc(ReaderObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    reader_free(self);
    Reader_clear(self);
    PyMem_RawFree(self->logs);
    PyMem_Free(self->undo_state);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

/* Remembers where the reader is before a next(), so that an interrupt can take it back: the
 * position, and with truncated BPTT (whose slots a position does not describe) the state.
 * @return : 0, or -1 with an exception set. */
static int undo_capture(ReaderObject *self)
{
    self->undo_ok = 0;
    self->undo_pos = ctf_reader_position(self->reader);
    if (self->bptt) {
        PyMem_Free(self->undo_state);
        self->undo_state = NULL;
        size_t len = 0;
        int rc = ctf_reader_save_state(self->reader, NULL, 0, &len);
        if (!rc && !(self->undo_state = PyMem_Malloc(len + 1))) {
            PyErr_NoMemory();
            return -1;
        }
        if (!rc) rc = ctf_reader_save_state(self->reader, self->undo_state, len + 1, &len);
        if (rc) {
            raise_code(type_state(Py_TYPE(self)), rc, "next");
            return -1;
        }
    }
    self->undo_ok = 1;
    return 0;
}

/* Takes back the last next(): the reader continues where it was before it.
 * @return : 0, or -1 with an exception set. */
static int undo_apply(ReaderObject *self)
{
    ctf_reader *r = self->reader;
    int rc;
    if (!self->undo_ok) {
        PyErr_SetString(PyExc_RuntimeError, "undo: nothing to take back (one next() at most)");
        return -1;
    }
    self->undo_ok = 0;
    const char *state = self->bptt ? self->undo_state : NULL;
    const uint64_t pos = self->undo_pos;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = state ? ctf_reader_restore_state(r, state, strlen(state)) : ctf_reader_seek(r, pos);
    Py_END_ALLOW_THREADS
    rc = reader_finish(self, rc, ctf_reader_error(r));
    self->busy = 0;
    return rc;
}

PyDoc_STRVAR(
    Reader_next_doc,
    "next(num_samples, num_workers=None, worker_rank=None, period=None) -> Minibatch | None\n\n"
    "Cuts the next global minibatch of num_samples index samples and returns this worker's share;\n"
    "None at the end of the data. Giving num_workers / worker_rank changes the partition first.\n"
    "period: epochs end at its multiples and no minibatch crosses one (the request is cut there,\n"
    "by the reader, so that the minibatch read ahead is the one the next call takes).\n"
    "A signal that arrives during the call (Ctrl-C) is handled when it returns: if its handler\n"
    "raises, the position is taken back to where it was and the exception propagates. For remote\n"
    "data on the main thread the handler runs within 50 ms, and if the call has not ended 250 ms\n"
    "later its requests are cancelled: the exception then has the cancelled request's CTFError\n"
    "(code CTF_ECANCELED) as __context__, and the reader can only be closed.");

/* next()'s arguments (vectorcall: this is the per-minibatch path, PyArg_ParseTupleAndKeywords
 * cost more than the rest of the binding). @return : 0, or -1 with an exception set. */
static int next_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject *slot[4])
{
    static const char *const names[4] = {"num_samples", "num_workers", "worker_rank", "period"};
    if (nargs > 4) {
        PyErr_Format(PyExc_TypeError, "next() takes at most 4 arguments (%zd given)", nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) slot[i] = args[i];
    const Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nk; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int j = 0;
        while (j < 4 && PyUnicode_CompareWithASCIIString(name, names[j]) != 0) j++;
        if (j == 4) {
            PyErr_Format(PyExc_TypeError, "next() got an unexpected keyword argument %R", name);
            return -1;
        }
        if (slot[j]) {
            PyErr_Format(PyExc_TypeError, "next() got multiple values for argument '%s'", names[j]);
            return -1;
        }
        slot[j] = args[nargs + k];
    }
    if (!slot[0]) {
        PyErr_SetString(PyExc_TypeError, "next() missing required argument 'num_samples'");
        return -1;
    }
    return 0;
}

static PyObject *Reader_next(ReaderObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    PyObject *slot[4] = {NULL, NULL, NULL, NULL}, *result = NULL;
    ctf_minibatch *mb = NULL;
    uint64_t num_samples, nw, rank, period = 0, before = 0;
    int rc = 0, wrc = 0;
    if (next_args(args, nargs, kwnames, slot) < 0) return NULL;
    PyObject *ns_obj = slot[0], *nw_obj = slot[1] ? slot[1] : Py_None,
             *rank_obj = slot[2] ? slot[2] : Py_None;
    if (reader_enter(self) < 0) return NULL;
    nw = self->num_workers;
    rank = nw_obj == Py_None ? self->worker_rank : 0;
    const bool set = nw_obj != Py_None || rank_obj != Py_None;
    if (PyBool_Check(ns_obj)) {
        PyErr_SetString(PyExc_TypeError, "num_samples: must be an int (got bool)");
        return NULL;
    }
    if (ctf_py_to_u64(ns_obj, "num_samples", UINT64_MAX, &num_samples) < 0 ||
        (nw_obj != Py_None && ctf_py_to_u64(nw_obj, "num_workers", SIZE_MAX, &nw) < 0) ||
        (rank_obj != Py_None && ctf_py_to_u64(rank_obj, "worker_rank", SIZE_MAX, &rank) < 0) ||
        (slot[3] && slot[3] != Py_None &&
         ctf_py_to_u64(slot[3], "period", UINT64_MAX, &period) < 0))
        return NULL;
    if (undo_capture(self) < 0) return NULL;
    ctf_reader *r = self->reader;
    self->busy = 1;
    call_helper *h = self->remote && PyThread_get_thread_ident() == main_thread_ident
                         ? helper_get(self)
                         : NULL;
    PyObject *sig = NULL; /* a signal handler's exception raised during the call */
    if (h) {
        /* Remote data on the main thread: Ctrl-C must not wait for a server (see the top). */
        h->reader = r;
        h->set = set;
        h->nw = (size_t)nw;
        h->rank = (size_t)rank;
        h->num_samples = num_samples;
        h->period = period;
        h->mb = NULL;
        helper_run(h, &sig);
        wrc = h->wrc;
        rc = h->rc;
        before = h->before;
        mb = h->mb;
    } else {
        Py_BEGIN_ALLOW_THREADS
        if (set) wrc = ctf_reader_set_worker(r, (size_t)nw, (size_t)rank);
        before = ctf_reader_position(r);
        rc = wrc ? wrc : ctf_reader_next_within(r, num_samples, period, &mb);
        Py_END_ALLOW_THREADS
    }
    if (set && !wrc) {
        self->num_workers = (size_t)nw;
        self->worker_rank = (size_t)rank;
    }
    if (sig) {
        /* The handler's exception wins; the reader's own error (a cancelled request) is its
           context. A call that ended anyway is taken back, as below. */
        ctf_minibatch_free(mb);
        mb = NULL;
        if (reader_finish(self, rc, ctf_reader_error(r)) < 0)
            PyException_SetContext(sig, exc_take());
        else if (undo_apply(self) < 0)
            PyException_SetContext(sig, exc_take());
        exc_give(sig);
        goto error;
    }
    if (reader_finish(self, rc, ctf_reader_error(r)) < 0) goto error;
    self->busy = 0;
    /* Ctrl-C during the call: its handler runs now. Rather than lose this minibatch on the way
       back to the caller, the reader goes back to where it was. */
    if (mb && PyErr_CheckSignals() < 0) {
        PyObject *exc = exc_take();
        if (undo_apply(self) < 0) {
            PyObject *undo_exc = exc_take();
            PyException_SetContext(undo_exc, exc);
            exc = undo_exc;
        }
        exc_give(exc);
        goto error;
    }
    if (!mb) {
        result = Py_NewRef(Py_None);
    } else {
        result = ctf_py_minibatch_wrap(type_state(Py_TYPE(self)), mb);
        mb = NULL; /* owned by the Minibatch now, or freed */
        if (result) {
            MinibatchObject *m = (MinibatchObject *)result;
            m->global_samples = ctf_minibatch_position(m->mb) - before;
            m->samples_per_sweep = self->samples_per_sweep;
        }
    }
error:
    self->busy = 0;
    ctf_minibatch_free(mb);
    return result;
}

static PyObject *Reader_undo(ReaderObject *self, PyObject *Py_UNUSED(ignored))
{
    if (reader_enter(self) < 0 || undo_apply(self) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Reader_get_state(ReaderObject *self, PyObject *Py_UNUSED(ignored))
{
    if (reader_enter(self) < 0) return NULL;
    return state_save(self, NULL);
}

static PyObject *Reader_state_at(ReaderObject *self, PyObject *arg)
{
    uint64_t position;
    if (reader_enter(self) < 0) return NULL;
    if (PyBool_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "position: must be an int (got bool)");
        return NULL;
    }
    if (ctf_py_to_u64(arg, "position", CTF_MAX_POSITION, &position) < 0) return NULL;
    return state_save(self, &position);
}

/* Skips a stretch of the timeline (ctf_reader_skip). */
static PyObject *Reader_skip(ReaderObject *self, PyObject *arg)
{
    uint64_t n;
    int rc;
    if (reader_enter(self) < 0) return NULL;
    if (ctf_py_to_u64(arg, "num_samples", CTF_MAX_POSITION, &n) < 0) return NULL;
    ctf_reader *r = self->reader;
    self->undo_ok = 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = ctf_reader_skip(r, n);
    Py_END_ALLOW_THREADS
    rc = reader_finish(self, rc, ctf_reader_error(r));
    self->busy = 0;
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Reader_restore_state(ReaderObject *self, PyObject *state)
{
    if (reader_enter(self) < 0 || state_restore(self, state) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Reader_get_position(ReaderObject *self, void *Py_UNUSED(closure))
{
    if (reader_enter(self) < 0) return NULL;
    return PyLong_FromUnsignedLongLong(ctf_reader_position(self->reader));
}

static int Reader_set_position(ReaderObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    if (!value) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete the reader's position");
        return -1;
    }
    if (reader_enter(self) < 0) return -1;
    return reader_seek(self, value);
}

PyDoc_STRVAR(Reader_stats_doc, "stats() -> dict\n\nCounters since open (ctf_stats).");

static PyObject *Reader_stats(ReaderObject *self, PyObject *Py_UNUSED(ignored))
{
    ctf_stats s;
    if (reader_enter(self) < 0) return NULL;
    ctf_reader_get_stats(self->reader, &s);
    return ctf_py_stats_dict(&s, self->names);
}

PyDoc_STRVAR(Reader_io_counters_doc, "io_counters() -> dict\n\nRemote requests, retries and "
                                     "bytes so far (zero for local files).");

static PyObject *Reader_io_counters(ReaderObject *self, PyObject *Py_UNUSED(ignored))
{
    ctf_io_counters c;
    if (reader_enter(self) < 0) return NULL;
    ctf_reader_get_io_counters(self->reader, &c);
    return Py_BuildValue("{sKsKsK}", "requests", (unsigned long long)c.requests, "retries",
                         (unsigned long long)c.retries, "bytes", (unsigned long long)c.bytes);
}

PyDoc_STRVAR(Reader_perf_doc, "perf() -> dict\n\nWhere the time goes: the stage counters "
                              "(ctf_perf) and the verdict naming the limiting stage.");

static PyObject *Reader_perf(ReaderObject *self, PyObject *Py_UNUSED(ignored))
{
    ctf_perf p;
    if (reader_enter(self) < 0) return NULL;
    ctf_reader_get_perf(self->reader, &p, sizeof p);
    return ctf_py_perf_dict(&p);
}

PyDoc_STRVAR(Reader_index_info_doc,
             "index_info() -> dict\n\nFacts about the index (ctf_index_info).");

static PyObject *Reader_index_info(ReaderObject *self, PyObject *Py_UNUSED(ignored))
{
    ctf_index_info info;
    if (reader_enter(self) < 0) return NULL;
    ctf_index_get_info(ctf_reader_index(self->reader), &info);
    return ctf_py_index_info_dict(&info);
}

static PyObject *Reader_close(ReaderObject *self, PyObject *Py_UNUSED(ignored))
{
    if (self->reader && reader_enter(self) < 0) return NULL; /* busy */
    reader_free(self);
    Py_RETURN_NONE;
}

static PyObject *Reader_enter_ctx(ReaderObject *self, PyObject *Py_UNUSED(ignored))
{
    if (!self->reader) {
        PyErr_SetString(PyExc_ValueError, "reader is closed");
        return NULL;
    }
    return Py_NewRef(self);
}

static PyObject *Reader_exit_ctx(ReaderObject *self, PyObject *Py_UNUSED(args))
{
    PyObject *r = Reader_close(self, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *Reader_closed(ReaderObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->reader == NULL);
}

static PyObject *Reader_files(ReaderObject *self, void *Py_UNUSED(closure))
{
    if (reader_enter(self) < 0) return NULL;
    const size_t n = ctf_reader_num_files(self->reader);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *p = PyUnicode_DecodeFSDefault(ctf_reader_file_path(self->reader, i));
        if (!p) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, p);
    }
    return l;
}

static PyObject *Reader_samples_per_sweep(ReaderObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->samples_per_sweep);
}

static PyObject *Reader_path(ReaderObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->path ? self->path : Py_None);
}

static PyObject *Reader_repr(ReaderObject *self)
{
    if (!self->reader) return PyUnicode_FromFormat("<ctfio._ctfio.Reader %R closed>", self->path);
    if (self->busy) return PyUnicode_FromFormat("<ctfio._ctfio.Reader %R busy>", self->path);
    return PyUnicode_FromFormat("<ctfio._ctfio.Reader %R streams=%R position=%llu>", self->path,
                                self->names, (unsigned long long)ctf_reader_position(self->reader));
}

static PyMethodDef Reader_methods[] = {
    {"next", (PyCFunction)(void (*)(void))Reader_next, METH_FASTCALL | METH_KEYWORDS,
     Reader_next_doc},
    {"undo", (PyCFunction)(void (*)(void))Reader_undo, METH_NOARGS,
     "undo()\n\nTakes back the last next() (once): the reader continues where it was before it.\n"
     "For a caller interrupted before it could hand the minibatch on."},
    {"state_at", (PyCFunction)(void (*)(void))Reader_state_at, METH_O,
     "state_at(position) -> str\n\nThe checkpoint state at another timeline position (any sweep),\n"
     "without reading or moving anything (ctf_reader_state_at); ValueError for a mix or\n"
     "truncated BPTT."},
    {"get_state", (PyCFunction)(void (*)(void))Reader_get_state, METH_NOARGS,
     "get_state() -> str\n\nThe checkpoint state: a small JSON text (rules 8)."},
    {"skip", (PyCFunction)(void (*)(void))Reader_skip, METH_O,
     "skip(num_samples)\n\nSkips that many samples of the global timeline, delivering none of\n"
     "them (ctf_reader_skip); the state records the stretch."},
    {"restore_state", (PyCFunction)(void (*)(void))Reader_restore_state, METH_O,
     "restore_state(state)\n\nContinues from a get_state() text; StateError if it does not fit."},
    {"stats", (PyCFunction)(void (*)(void))Reader_stats, METH_NOARGS, Reader_stats_doc},
    {"io_counters", (PyCFunction)(void (*)(void))Reader_io_counters, METH_NOARGS,
     Reader_io_counters_doc},
    {"perf", (PyCFunction)(void (*)(void))Reader_perf, METH_NOARGS, Reader_perf_doc},
    {"index_info", (PyCFunction)(void (*)(void))Reader_index_info, METH_NOARGS,
     Reader_index_info_doc},
    {"close", (PyCFunction)(void (*)(void))Reader_close, METH_NOARGS,
     "close()\n\nStops the prefetch threads and frees the reader; minibatches stay valid."},
    {"__enter__", (PyCFunction)(void (*)(void))Reader_enter_ctx, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Reader_exit_ctx, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Reader_getset[] = {
    {"position", (getter)Reader_get_position, (setter)Reader_set_position,
     "Timeline position after the last delivered minibatch; assigning seeks.", NULL},
    {"closed", (getter)Reader_closed, NULL, "True after close().", NULL},
    {"path", (getter)Reader_path, NULL, "The (first) data file.", NULL},
    {"samples_per_sweep", (getter)Reader_samples_per_sweep, NULL,
     "Index samples in one sweep of all the data (every file; joined sequences).", NULL},
    {"files", (getter)Reader_files, NULL,
     "The data files, patterns expanded (Minibatch.files indexes this list).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(
    Reader_doc,
    "Reader(path, streams, *, precision='float', randomize=True, randomization_seed=0,\n"
    "       randomization_window=128, window_in_samples=False, skip_sequence_ids=False,\n"
    "       max_errors=0, trace_level=1, chunk_size_bytes=33554432, keep_data_in_memory=False,\n"
    "       frame_mode=False, cache_index=False, max_samples=None, max_sweeps=None,\n"
    "       truncation_length=0, num_workers=1, worker_rank=0, num_threads=None,\n"
    "       prefetch_chunks=None, log=None, joins=None, chunk_cache=None,\n"
    "       chunk_cache_limit=None, bad_records=None)\n\n"
    "A CTF reader. path: a file, or a list of files and glob patterns read as one corpus.\n"
    "streams: (name, alias, dim, is_sparse, defines_mb_size) tuples. joins: (paths, streams,\n"
    "skip_sequence_ids) tuples, deserializers joined by sequence key to the primary one.\n"
    "max_samples / max_sweeps: None, -1 or 2**64-1 no limit; -2 or 2**64-2 one sweep.\n"
    "num_threads / prefetch_chunks: left out, the library's defaults (one thread per core,\n"
    "2 * threads + 2 chunks). log: None (Python's logging, logger 'ctfio') or\n"
    "log(severity, text, path, line, column, offset). chunk_cache: a directory where parsed\n"
    "chunks are kept for later sweeps and runs; chunk_cache_limit: the bytes it may hold.\n"
    "bad_records: with max_errors > 0, a file where each skipped record is written as a JSON\n"
    "line (file, line, column, offset, error, text), whole at the end of the data or on close.");

static PyType_Slot Reader_slots[] = {
    {Py_tp_doc, (void *)Reader_doc},
    {Py_tp_new, (void *)Reader_new},
    {Py_tp_dealloc, (void *)Reader_dealloc},
    {Py_tp_traverse, (void *)Reader_traverse},
    {Py_tp_clear, (void *)Reader_clear},
    {Py_tp_repr, (void *)Reader_repr},
    {Py_tp_methods, Reader_methods},
    {Py_tp_getset, Reader_getset},
    {0, NULL},
};

static PyType_Spec Reader_spec = {
    .name = "ctfio._ctfio.Reader",
    .basicsize = sizeof(ReaderObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = Reader_slots,
};

/*======================================================================
 * 7. Checkpoint helpers
 *====================================================================*/

/* The reader's checkpoint as JSON text (ctf_reader_save_state, sized first); with `at`, the one
 * it has at that position (ctf_reader_state_at). */
static PyObject *state_save(ReaderObject *self, const uint64_t *at)
{
    modstate *st = type_state(Py_TYPE(self));
    PyObject *result = NULL;
    char *buf = NULL;
    size_t len = 0;
    int rc = at ? ctf_reader_state_at(self->reader, *at, NULL, 0, &len)
                : ctf_reader_save_state(self->reader, NULL, 0, &len);
    if (rc == CTF_EINVAL) {
        PyErr_SetString(PyExc_ValueError,
                        "state_at: a mix's or a truncated-BPTT reader's state at another "
                        "position depends on the data before it; take its state there");
        goto error;
    }
    if (rc) {
        raise_code(st, rc, at ? "state_at" : "get_state");
        goto error;
    }
    if (!(buf = PyMem_Malloc(len + 1))) {
        PyErr_NoMemory();
        goto error;
    }
    rc = at ? ctf_reader_state_at(self->reader, *at, buf, len + 1, &len)
            : ctf_reader_save_state(self->reader, buf, len + 1, &len);
    if (rc) {
        raise_code(st, rc, at ? "state_at" : "get_state");
        goto error;
    }
    result = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "strict");
error:
    PyMem_Free(buf);
    return result;
}

/* Continues from a state text (str, or bytes holding UTF-8 JSON). */
static int state_restore(ReaderObject *self, PyObject *state)
{
    const char *text;
    Py_ssize_t len;
    int rc;
    if (PyUnicode_Check(state)) {
        if (!(text = PyUnicode_AsUTF8AndSize(state, &len))) return -1;
    } else if (PyBytes_Check(state)) {
        text = PyBytes_AS_STRING(state);
        len = PyBytes_GET_SIZE(state);
    } else {
        PyErr_Format(PyExc_TypeError,
                     "state: must be the str get_state() returned (got "
                     "%.100s)",
                     Py_TYPE(state)->tp_name);
        return -1;
    }
    ctf_reader *r = self->reader;
    self->undo_ok = 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = ctf_reader_restore_state(r, text, (size_t)len);
    Py_END_ALLOW_THREADS
    rc = reader_finish(self, rc, ctf_reader_error(r));
    self->busy = 0;
    return rc;
}

/* Seeks to a timeline position (the position setter). */
static int reader_seek(ReaderObject *self, PyObject *value)
{
    uint64_t pos;
    int rc;
    if (ctf_py_to_u64(value, "position", UINT64_MAX, &pos) < 0) return -1;
    ctf_reader *r = self->reader;
    self->undo_ok = 0;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = ctf_reader_seek(r, pos);
    Py_END_ALLOW_THREADS
    rc = reader_finish(self, rc, ctf_reader_error(r));
    self->busy = 0;
    return rc;
}

/*======================================================================
 * 8. Module init
 *====================================================================*/

/* Adds obj under name, keeping the caller's reference. */
static int add_ref(PyObject *m, const char *name, PyObject *obj)
{
    Py_INCREF(obj);
    if (PyModule_AddObject(m, name, obj) < 0) {
        Py_DECREF(obj);
        return -1;
    }
    return 0;
}

/* The limits as the library encodes them: the one spelling Python has for them. */
static int add_u64(PyObject *m, const char *name, uint64_t v)
{
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    if (!o) return -1;
    int rc = add_ref(m, name, o);
    Py_DECREF(o);
    return rc;
}

/* A heap type from spec whose instances only the module creates. */
static PyTypeObject *internal_type(PyObject *m, PyType_Spec *spec)
{
#ifdef Py_TPFLAGS_DISALLOW_INSTANTIATION
    spec->flags |= Py_TPFLAGS_DISALLOW_INSTANTIATION;
#endif
    PyTypeObject *tp = (PyTypeObject *)PyType_FromModuleAndSpec(m, spec, NULL);
#ifndef Py_TPFLAGS_DISALLOW_INSTANTIATION
    if (tp) tp->tp_new = NULL; /* Python 3.9: what the flag does on later versions */
#endif
    return tp;
}

static int module_exec(PyObject *m)
{
    modstate *st = module_state(m);
    PyObject *attrs = NULL, *bases = NULL;
    int status = -1;
    {
        PyObject *th = PyImport_ImportModule("threading"), *mt = NULL, *id = NULL;
        if (th) mt = PyObject_CallMethod(th, "main_thread", NULL);
        if (mt) id = PyObject_GetAttrString(mt, "ident");
        if (id) main_thread_ident = PyLong_AsUnsignedLong(id);
        Py_XDECREF(id);
        Py_XDECREF(mt);
        Py_XDECREF(th);
        if (PyErr_Occurred()) return -1;
    }
    static const char *const data_attr_names[NUM_DATA_ATTRS] = {
#define DATA_NAME(id, text) text,
        DATA_ATTRS(DATA_NAME)
#undef DATA_NAME
    };
    for (int a = 0; a < NUM_DATA_ATTRS; a++)
        if (!(st->attr[a] = PyUnicode_InternFromString(data_attr_names[a]))) goto error;
    /* Class-level defaults, so that instances raised from Python have the attributes too. */
    attrs = Py_BuildValue("{sOsOsOsOsOsO}", "code", Py_None, "path", Py_None, "line", Py_None,
                          "column", Py_None, "offset", Py_None, "message", Py_None);
    if (!attrs) goto error;
    st->CTFError =
        PyErr_NewExceptionWithDoc("ctfio._ctfio.CTFError",
                                  "Base class of ctfio's errors; carries code, path, line, "
                                  "column, offset and message (None where unknown).",
                                  PyExc_Exception, attrs);
    if (!st->CTFError || !(bases = PyTuple_Pack(2, st->CTFError, PyExc_ValueError))) goto error;
    st->ParseError = PyErr_NewExceptionWithDoc(
        "ctfio._ctfio.ParseError",
        "Malformed input data (or a limit, a changed file, a bad "
        "index); str() is 'FILE:LINE:COLUMN: (byte OFFSET) error: MESSAGE'.",
        bases, NULL);
    if (!st->ParseError) goto error;
    st->StateError = PyErr_NewExceptionWithDoc("ctfio._ctfio.StateError",
                                               "A checkpoint state that does not fit this reader.",
                                               bases, NULL);
    if (!st->StateError) goto error;
    st->DataChangedError = PyErr_NewExceptionWithDoc(
        "ctfio._ctfio.DataChangedError",
        "The data file changed after it was indexed (size, "
        "modification time or content no longer match the index); a ParseError.",
        st->ParseError, NULL);
    if (!st->DataChangedError) goto error;
    if (!(st->BufferType = internal_type(m, &ctf_py_buffer_spec))) goto error;
    if (!(st->MinibatchType = internal_type(m, &ctf_py_minibatch_spec))) goto error;
    st->ReaderType = (PyTypeObject *)PyType_FromModuleAndSpec(m, &Reader_spec, NULL);
    if (!st->ReaderType) goto error;
    if (add_ref(m, "CTFError", st->CTFError) < 0 || add_ref(m, "ParseError", st->ParseError) < 0 ||
        add_ref(m, "StateError", st->StateError) < 0 ||
        add_ref(m, "DataChangedError", st->DataChangedError) < 0 ||
        PyModule_AddType(m, st->ReaderType) < 0 || PyModule_AddType(m, st->MinibatchType) < 0 ||
        PyModule_AddType(m, st->BufferType) < 0 || ctf_py_provider_add_types(m) < 0 ||
        add_u64(m, "INFINITELY_REPEAT", CTF_INFINITELY_REPEAT) < 0 ||
        add_u64(m, "FULL_DATA_SWEEP", CTF_FULL_DATA_SWEEP) < 0 ||
        PyModule_AddIntConstant(m, "DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS",
                                CTF_DEFAULT_WINDOW_CHUNKS) < 0 ||
        PyModule_AddStringConstant(m, "__version__", ctf_version_string()) < 0)
        goto error;
    status = 0;
error:
    Py_XDECREF(attrs);
    Py_XDECREF(bases);
    return status;
}

static int module_traverse(PyObject *m, visitproc visit, void *arg)
{
    modstate *st = module_state(m);
    for (int a = 0; a < NUM_DATA_ATTRS; a++) Py_VISIT(st->attr[a]);
    Py_VISIT(st->CTFError);
    Py_VISIT(st->ParseError);
    Py_VISIT(st->StateError);
    Py_VISIT(st->DataChangedError);
    Py_VISIT(st->logger);
    Py_VISIT(st->ReaderType);
    Py_VISIT(st->MinibatchType);
    Py_VISIT(st->BufferType);
    return 0;
}

static int module_clear(PyObject *m)
{
    modstate *st = module_state(m);
    for (int a = 0; a < NUM_DATA_ATTRS; a++) Py_CLEAR(st->attr[a]);
    Py_CLEAR(st->CTFError);
    Py_CLEAR(st->ParseError);
    Py_CLEAR(st->StateError);
    Py_CLEAR(st->DataChangedError);
    Py_CLEAR(st->logger);
    Py_CLEAR(st->ReaderType);
    Py_CLEAR(st->MinibatchType);
    Py_CLEAR(st->BufferType);
    return 0;
}

static void module_free(void *m) { module_clear((PyObject *)m); }
static PyMethodDef module_methods[] = {
    {"bsconfig_load", (PyCFunction)(void (*)(void))bsconfig_load, METH_VARARGS | METH_KEYWORDS,
     bsconfig_load_doc},
    {"provider_encode", (PyCFunction)(void (*)(void))ctf_py_provider_encode, METH_VARARGS,
     ctf_py_provider_encode_doc},
    {"provider_pack", (PyCFunction)(void (*)(void))ctf_py_provider_pack, METH_VARARGS,
     ctf_py_provider_pack_doc},
    CTF_PY_TOOLS_METHODS CTF_PY_CONFIG_METHODS{NULL, NULL, 0, NULL},
};

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, (void *)module_exec},
    {0, NULL},
};

static struct PyModuleDef ctfio_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ctfio._ctfio",
    .m_doc = "The C core of ctfio: Reader, Minibatch, Buffer, the exceptions, bsconfig_load.",
    .m_size = sizeof(modstate),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__ctfio(void) { return PyModuleDef_Init(&ctfio_module); }
