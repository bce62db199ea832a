/*
 * _minibatch.c -- the extension's Minibatch: one C minibatch (this worker's share) owned by a
 * Python object. Its getters give the counts and the timeline, stream(i) a stream as a dict of
 * Buffers, buffer(i, part) one Buffer, stream_data() the {key: cls} dict of next_minibatch in one
 * call. Every Buffer holds a reference to its Minibatch, so arrays outlive it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_module.h"
#include "_pyutil.h"

#include <string.h>

/* Wraps mb (taking ownership: freed here on failure). */
PyObject *ctf_py_minibatch_wrap(modstate *st, ctf_minibatch *mb)
{
    MinibatchObject *self = (MinibatchObject *)st->MinibatchType->tp_alloc(st->MinibatchType, 0);
    if (!self) {
        ctf_minibatch_free(mb);
        return NULL;
    }
    self->mb = mb;
    return (PyObject *)self;
}

static void Minibatch_dealloc(MinibatchObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    ctf_minibatch_free(self->mb);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *Minibatch_num_sequences(MinibatchObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t(ctf_minibatch_num_sequences(self->mb));
}

static PyObject *Minibatch_num_samples(MinibatchObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(ctf_minibatch_num_samples(self->mb));
}

static PyObject *Minibatch_num_streams(MinibatchObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSize_t(ctf_minibatch_num_streams(self->mb));
}

static PyObject *Minibatch_end_of_sweep(MinibatchObject *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(ctf_minibatch_end_of_sweep(self->mb));
}

static PyObject *Minibatch_position(MinibatchObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(ctf_minibatch_position(self->mb));
}

static PyObject *Minibatch_sweep(MinibatchObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(ctf_minibatch_sweep(self->mb));
}

static PyObject *Minibatch_global_samples(MinibatchObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->global_samples);
}

static PyObject *Minibatch_samples_per_sweep(MinibatchObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->samples_per_sweep);
}

static PyObject *Minibatch_keys(MinibatchObject *self, void *Py_UNUSED(closure))
{
    return buffer_new(type_state(Py_TYPE(self)), (PyObject *)self, ctf_minibatch_keys(self->mb),
                      "Q", 8, ctf_minibatch_num_sequences(self->mb), -1);
}

static PyObject *Minibatch_lines(MinibatchObject *self, void *Py_UNUSED(closure))
{
    return buffer_new(type_state(Py_TYPE(self)), (PyObject *)self, ctf_minibatch_lines(self->mb),
                      "Q", 8, ctf_minibatch_num_sequences(self->mb), -1);
}

static PyObject *Minibatch_files(MinibatchObject *self, void *Py_UNUSED(closure))
{
    return buffer_new(type_state(Py_TYPE(self)), (PyObject *)self, ctf_minibatch_files(self->mb),
                      "I", 4, ctf_minibatch_num_sequences(self->mb), -1);
}

PyDoc_STRVAR(
    Minibatch_stream_doc,
    "stream(i) -> dict\n\n"
    "Stream i (config order): name, is_sparse, dim, num_samples, num_sequences, nnz, precision,\n"
    "and zero-copy Buffers values ((num_samples, dim) dense, (nnz,) sparse), lengths (uint32),\n"
    "indptr (int64, num_samples + 1) and indices (int32); indptr/indices are None when dense.");

static PyObject *Minibatch_stream(MinibatchObject *self, PyObject *arg)
{
    modstate *st = type_state(Py_TYPE(self));
    PyObject *owner = (PyObject *)self, *d = NULL;
    ctf_stream_view v;
    const Py_ssize_t ns = (Py_ssize_t)ctf_minibatch_num_streams(self->mb);
    Py_ssize_t i = PyNumber_AsSsize_t(arg, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred()) goto error;
    if (i < 0) i += ns;
    if (i < 0 || i >= ns || ctf_minibatch_stream(self->mb, (size_t)i, &v) != 0) {
        PyErr_Format(PyExc_IndexError,
                     "stream index out of range (got %R, the minibatch has "
                     "%zd streams)",
                     arg, ns);
        goto error;
    }
    const bool dbl = v.precision == CTF_FLOAT64;
    const char *fmt = dbl ? "d" : "f";
    const Py_ssize_t elt = dbl ? 8 : 4;
    if (!(d = PyDict_New())) goto error;
    int rc = dict_put(d, "name", text_obj(v.name));
#define PUT(key, value) rc = rc ? rc : dict_put(d, key, value)
    PUT("is_sparse", PyBool_FromLong(v.is_sparse));
    PUT("dim", PyLong_FromSize_t(v.dim));
    PUT("num_samples", PyLong_FromSize_t(v.num_samples));
    PUT("num_sequences", PyLong_FromSize_t(v.num_sequences));
    PUT("nnz", PyLong_FromSize_t(v.is_sparse ? v.nnz : v.num_samples * v.dim));
    PUT("precision", PyUnicode_FromString(dbl ? "double" : "float"));
    PUT("values",
        v.is_sparse ? buffer_new(st, owner, v.values, fmt, elt, v.nnz, -1)
                    : buffer_new(st, owner, v.values, fmt, elt, v.num_samples, (Py_ssize_t)v.dim));
    PUT("lengths", buffer_new(st, owner, v.lengths, "I", 4, v.num_sequences, -1));
    PUT("indptr", v.is_sparse ? buffer_new(st, owner, v.indptr, "q", 8, v.num_samples + 1, -1)
                              : Py_NewRef(Py_None));
    PUT("indices",
        v.is_sparse ? buffer_new(st, owner, v.indices, "i", 4, v.nnz, -1) : Py_NewRef(Py_None));
#undef PUT
    if (rc) goto error;
    return d;
error:
    Py_XDECREF(d);
    return NULL;
}

PyDoc_STRVAR(
    Minibatch_buffer_doc,
    "buffer(i, part) -> Buffer | None\n\n"
    "One zero-copy Buffer of stream i: part 0 values, 1 lengths, 2 indptr, 3 indices (None for\n"
    "a dense stream's indptr and indices); see stream().");

/* One Buffer of stream i (see the doc). */
static PyObject *minibatch_buffer(MinibatchObject *self, size_t i, long part)
{
    modstate *st = type_state(Py_TYPE(self));
    PyObject *owner = (PyObject *)self;
    ctf_stream_view v;
    if (ctf_minibatch_stream(self->mb, i, &v) != 0) {
        PyErr_Format(PyExc_IndexError,
                     "stream index out of range (got %zu, the minibatch has "
                     "%zu streams)",
                     i, ctf_minibatch_num_streams(self->mb));
        return NULL;
    }
    const bool dbl = v.precision == CTF_FLOAT64;
    const char *fmt = dbl ? "d" : "f";
    const Py_ssize_t elt = dbl ? 8 : 4;
    switch (part) {
    case 0:
        return v.is_sparse
                   ? buffer_new(st, owner, v.values, fmt, elt, v.nnz, -1)
                   : buffer_new(st, owner, v.values, fmt, elt, v.num_samples, (Py_ssize_t)v.dim);
    case 1: return buffer_new(st, owner, v.lengths, "I", 4, v.num_sequences, -1);
    case 2:
        return v.is_sparse ? buffer_new(st, owner, v.indptr, "q", 8, v.num_samples + 1, -1)
                           : Py_NewRef(Py_None);
    case 3:
        return v.is_sparse ? buffer_new(st, owner, v.indices, "i", 4, v.nnz, -1)
                           : Py_NewRef(Py_None);
    default:
        PyErr_Format(PyExc_ValueError,
                     "part: must be 0 (values), 1 (lengths), 2 (indptr) or "
                     "3 (indices) (got %ld)",
                     part);
        return NULL;
    }
}

static PyObject *Minibatch_buffer(MinibatchObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "buffer() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    const Py_ssize_t i = PyNumber_AsSsize_t(args[0], PyExc_IndexError);
    if (i == -1 && PyErr_Occurred()) return NULL;
    const long part = PyLong_AsLong(args[1]);
    if (part == -1 && PyErr_Occurred()) return NULL;
    if (i < 0) {
        PyErr_Format(PyExc_IndexError, "stream index out of range (got %zd)", i);
        return NULL;
    }
    return minibatch_buffer(self, (size_t)i, part);
}

PyDoc_STRVAR(
    Minibatch_stream_data_doc,
    "stream_data(cls, keys, frame_mode) -> dict\n\n"
    "{keys[i]: object of cls} for every stream i, made without calling cls (its __new__ only)\n"
    "and given the attributes _view (this Minibatch), _i (i), _is_sparse, _dim, _frame_mode,\n"
    "num_sequences, num_samples (stream i's), end_of_sweep, position, sweep, global_samples and\n"
    "samples_per_sweep. No array is made: buffer(i, part) gives them when asked for.");

static PyObject *Minibatch_stream_data(MinibatchObject *self, PyObject *const *args,
                                       Py_ssize_t nargs)
{
    modstate *st = type_state(Py_TYPE(self));
    PyObject *shared[NUM_DATA_ATTRS] = {NULL}, *out = NULL, *obj = NULL, *base = NULL, *d = NULL;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "stream_data() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *cls = args[0], *keys = args[1], *frame_mode = args[2];
    const size_t ns = ctf_minibatch_num_streams(self->mb);
    if (!PyType_Check(cls) || !PyTuple_Check(keys) || PyTuple_GET_SIZE(keys) != (Py_ssize_t)ns) {
        PyErr_Format(PyExc_TypeError, "stream_data: needs a class and a tuple of %zu keys", ns);
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)cls;
    const ctf_minibatch *mb = self->mb;
    /* What every stream shares, made once. */
    shared[ATTR_view] = Py_NewRef(self);
    shared[ATTR_frame_mode] = Py_NewRef(PyObject_IsTrue(frame_mode) ? Py_True : Py_False);
    shared[ATTR_num_sequences] = PyLong_FromSize_t(ctf_minibatch_num_sequences(mb));
    shared[ATTR_end_of_sweep] = PyBool_FromLong(ctf_minibatch_end_of_sweep(mb));
    shared[ATTR_position] = PyLong_FromUnsignedLongLong(ctf_minibatch_position(mb));
    shared[ATTR_sweep] = PyLong_FromUnsignedLongLong(ctf_minibatch_sweep(mb));
    shared[ATTR_global_samples] = PyLong_FromUnsignedLongLong(self->global_samples);
    shared[ATTR_samples_per_sweep] = PyLong_FromUnsignedLongLong(self->samples_per_sweep);
    for (int a = 0; a < NUM_DATA_ATTRS; a++)
        if (a != ATTR_index && a != ATTR_is_sparse && a != ATTR_dim && a != ATTR_num_samples &&
            !shared[a])
            goto error;
    /* Each object gets a copy of one dict of what the streams share, plus its own four
     * entries, as its __dict__: cheaper than setting twelve attributes one by one. */
    if (!(base = PyDict_New())) goto error;
    for (int a = 0; a < NUM_DATA_ATTRS; a++)
        if (shared[a] && PyDict_SetItem(base, st->attr[a], shared[a]) < 0) goto error;
    if (!(out = PyDict_New())) goto error;
    for (size_t i = 0; i < ns; i++) {
        ctf_stream_view v;
        ctf_minibatch_stream(mb, i, &v);
        if (!(d = PyDict_Copy(base))) goto error;
        PyObject *own[NUM_DATA_ATTRS] = {NULL};
        own[ATTR_index] = PyLong_FromSize_t(i);
        own[ATTR_is_sparse] = Py_NewRef(v.is_sparse ? Py_True : Py_False);
        own[ATTR_dim] = PyLong_FromSize_t(v.dim);
        own[ATTR_num_samples] = PyLong_FromSize_t(v.num_samples);
        int rc = 0;
        for (int a = 0; a < NUM_DATA_ATTRS; a++) {
            if (!rc && own[a] == NULL && shared[a] == NULL) rc = -1;
            if (!rc && own[a] && PyDict_SetItem(d, st->attr[a], own[a]) < 0) rc = -1;
            Py_XDECREF(own[a]);
        }
        if (rc < 0 || !(obj = tp->tp_alloc(tp, 0)) || PyObject_GenericSetDict(obj, d, NULL) < 0 ||
            PyDict_SetItem(out, PyTuple_GET_ITEM(keys, i), obj) < 0)
            goto error;
        Py_CLEAR(d);
        Py_CLEAR(obj);
    }
    for (int a = 0; a < NUM_DATA_ATTRS; a++) Py_XDECREF(shared[a]);
    Py_DECREF(base);
    return out;
error:
    for (int a = 0; a < NUM_DATA_ATTRS; a++) Py_XDECREF(shared[a]);
    Py_XDECREF(base);
    Py_XDECREF(d);
    Py_XDECREF(obj);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *Minibatch_repr(MinibatchObject *self)
{
    return PyUnicode_FromFormat(
        "<ctfio._ctfio.Minibatch sequences=%zu samples=%llu position=%llu sweep=%llu%s>",
        ctf_minibatch_num_sequences(self->mb),
        (unsigned long long)ctf_minibatch_num_samples(self->mb),
        (unsigned long long)ctf_minibatch_position(self->mb),
        (unsigned long long)ctf_minibatch_sweep(self->mb),
        ctf_minibatch_end_of_sweep(self->mb) ? " end_of_sweep" : "");
}

static PyGetSetDef Minibatch_getset[] = {
    {"num_sequences", (getter)Minibatch_num_sequences, NULL, "Sequences in this share.", NULL},
    {"num_samples", (getter)Minibatch_num_samples, NULL, "Index samples in this share.", NULL},
    {"num_streams", (getter)Minibatch_num_streams, NULL, "Configured streams.", NULL},
    {"end_of_sweep", (getter)Minibatch_end_of_sweep, NULL,
     "The global minibatch held the last sequence of a sweep.", NULL},
    {"position", (getter)Minibatch_position, NULL, "Timeline position after it.", NULL},
    {"sweep", (getter)Minibatch_sweep, NULL, "Sweep of its first sequence.", NULL},
    {"global_samples", (getter)Minibatch_global_samples, NULL,
     "Index samples of the global minibatch: the advance of the position.", NULL},
    {"samples_per_sweep", (getter)Minibatch_samples_per_sweep, NULL, "Index samples in one sweep.",
     NULL},
    {"keys", (getter)Minibatch_keys, NULL, "Sequence keys: Buffer of uint64.", NULL},
    {"files", (getter)Minibatch_files, NULL,
     "Per sequence, its file: index into Reader.files (Buffer of uint32).", NULL},
    {"lines", (getter)Minibatch_lines, NULL, "1-based first line per sequence: Buffer of uint64.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Minibatch_methods[] = {
    {"stream", (PyCFunction)(void (*)(void))Minibatch_stream, METH_O, Minibatch_stream_doc},
    {"stream_data", (PyCFunction)(void (*)(void))Minibatch_stream_data, METH_FASTCALL,
     Minibatch_stream_data_doc},
    {"buffer", (PyCFunction)(void (*)(void))Minibatch_buffer, METH_FASTCALL, Minibatch_buffer_doc},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(Minibatch_doc, "One minibatch (this worker's share), returned by Reader.next().");

static PyType_Slot Minibatch_slots[] = {
    {Py_tp_doc, (void *)Minibatch_doc},   {Py_tp_dealloc, (void *)Minibatch_dealloc},
    {Py_tp_repr, (void *)Minibatch_repr}, {Py_tp_getset, Minibatch_getset},
    {Py_tp_methods, Minibatch_methods},   {0, NULL},
};

PyType_Spec ctf_py_minibatch_spec = {
    .name = "ctfio._ctfio.Minibatch",
    .basicsize = sizeof(MinibatchObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Minibatch_slots,
};
