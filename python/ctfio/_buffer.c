/*
 * _buffer.c -- the Buffer type of ctfio._ctfio: the buffer protocol (read-only, C order) over
 * memory owned by another object (a Minibatch), which it keeps alive. numpy.asarray(buffer)
 * shares that memory; nothing is copied.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_buffer.h"

#include <stdint.h>

#if PY_VERSION_HEX < 0x030A0000
static PyObject *Py_NewRef(PyObject *obj) /* Python 3.9 */
{
    Py_INCREF(obj);
    return obj;
}
#define Py_NewRef(obj) Py_NewRef((PyObject *)(obj))
#endif

typedef struct {
    PyObject_HEAD
    PyObject *owner;             /* the Minibatch that owns the memory (strong reference) */
    const void *ptr;             /* first element; never NULL */
    const char *format;          /* struct-module format of one element (static string) */
    Py_ssize_t itemsize;         /* bytes per element */
    int ndim;                    /* 1, or 2 for dense values */
    Py_ssize_t shape[2];         /* elements per dimension */
    Py_ssize_t strides[2];       /* bytes, C order */
    Py_ssize_t exports;          /* Py_buffers currently handed out */
} BufferObject;

/* A Buffer over n0 elements (1-D, n1 < 0) or n0 x n1 elements (2-D) at ptr, owned by owner. */
PyObject *ctf_py_buffer_new(PyTypeObject *type, PyObject *owner, const void *ptr,
                            const char *format, Py_ssize_t itemsize, size_t n0, Py_ssize_t n1)
{
    static const uint64_t empty[1];
    BufferObject *self = (BufferObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    Py_INCREF(owner);
    self->owner = owner;
    self->ptr = ptr ? ptr : (const void *)empty;
    self->format = format;
    self->itemsize = itemsize;
    self->shape[0] = (Py_ssize_t)n0;
    if (n1 < 0) {
        self->ndim = 1;
        self->strides[0] = itemsize;
    } else {
        self->ndim = 2;
        self->shape[1] = n1;
        self->strides[0] = n1 * itemsize;
        self->strides[1] = itemsize;
    }
    return (PyObject *)self;
}

static Py_ssize_t buffer_nbytes(const BufferObject *self)
{
    Py_ssize_t n = self->itemsize;
    for (int i = 0; i < self->ndim; i++) n *= self->shape[i];
    return n;
}

static int Buffer_getbuffer(BufferObject *self, Py_buffer *view, int flags)
{
    if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE) {
        PyErr_SetString(PyExc_BufferError, "ctfio minibatch buffers are read-only");
        view->obj = NULL;
        return -1;
    }
    if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS && self->ndim == 2 &&
        self->shape[0] > 1 && self->shape[1] > 1) {
        PyErr_SetString(PyExc_BufferError, "ctfio minibatch buffers are C-contiguous only");
        view->obj = NULL;
        return -1;
    }
    Py_INCREF(self);
    view->obj = (PyObject *)self;
    view->buf = (void *)self->ptr;
    view->len = buffer_nbytes(self);
    view->readonly = 1;
    view->itemsize = self->itemsize;
    view->format = (flags & PyBUF_FORMAT) ? (char *)self->format : NULL;
    view->ndim = self->ndim;
    view->shape = (flags & PyBUF_ND) == PyBUF_ND ? self->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    self->exports++;
    return 0;
}

static void Buffer_releasebuffer(BufferObject *self, Py_buffer *Py_UNUSED(view))
{
    self->exports--;
}

static void Buffer_dealloc(BufferObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    Py_CLEAR(self->owner);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static Py_ssize_t Buffer_len(BufferObject *self) { return self->shape[0]; }

static PyObject *Buffer_shape(BufferObject *self, void *Py_UNUSED(closure))
{
    if (self->ndim == 1) return Py_BuildValue("(n)", self->shape[0]);
    return Py_BuildValue("(nn)", self->shape[0], self->shape[1]);
}

static PyObject *Buffer_format(BufferObject *self, void *Py_UNUSED(closure))
{
    return PyUnicode_FromString(self->format);
}

static PyObject *Buffer_itemsize(BufferObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(self->itemsize);
}

static PyObject *Buffer_nbytes(BufferObject *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(buffer_nbytes(self));
}

static PyObject *Buffer_obj(BufferObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->owner);
}

static PyObject *Buffer_repr(BufferObject *self)
{
    PyObject *shape = Buffer_shape(self, NULL), *r = NULL;
    if (!shape) return NULL;
    r = PyUnicode_FromFormat("<ctfio._ctfio.Buffer format='%s' shape=%R>", self->format, shape);
    Py_DECREF(shape);
    return r;
}

static PyGetSetDef Buffer_getset[] = {
    {"shape", (getter)Buffer_shape, NULL, "Elements per dimension.", NULL},
    {"format", (getter)Buffer_format, NULL, "struct-module format of one element.", NULL},
    {"itemsize", (getter)Buffer_itemsize, NULL, "Bytes per element.", NULL},
    {"nbytes", (getter)Buffer_nbytes, NULL, "Bytes in all.", NULL},
    {"obj", (getter)Buffer_obj, NULL, "The Minibatch that owns the memory.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(Buffer_doc,
             "Read-only, zero-copy buffer over minibatch memory (numpy.asarray(buf) shares it).\n"
             "Keeps its Minibatch alive.");

static PyType_Slot Buffer_slots[] = {
    {Py_tp_doc, (void *)Buffer_doc},
    {Py_tp_dealloc, (void *)Buffer_dealloc},
    {Py_tp_repr, (void *)Buffer_repr},
    {Py_tp_getset, Buffer_getset},
    {Py_sq_length, (void *)Buffer_len},
    {Py_bf_getbuffer, (void *)Buffer_getbuffer},
    {Py_bf_releasebuffer, (void *)Buffer_releasebuffer},
    {0, NULL},
};

PyType_Spec ctf_py_buffer_spec = {
    .name = "ctfio._ctfio.Buffer",
    .basicsize = sizeof(BufferObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = Buffer_slots,
};
