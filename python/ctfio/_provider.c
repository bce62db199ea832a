/*
 * _provider.c -- part of the ctfio._ctfio extension: the Python side of the PaddlePaddle-style
 * providers' samples (python/ctfio/paddle/, rules 12). provider_encode reads one sample's Python
 * objects into a record (lib/format/record.c writes the layout); provider_pack hands a list of
 * records to ctf_records_measure / ctf_records_pack and wraps the arrays, the GIL released
 * while the library checks and copies. Split from _ctfio.c, which registers the two functions.
 *
 *   provider_encode(sample, slots, check, double) -> bytes
 *       Runs WITH the GIL (it reads Python objects): one pass over the sample converts every
 *       number into the record, validating the layout of the input types (always), the sparse
 *       indices (always: 0 <= index < dim) and, with check, the other ranges
 *       (0 <= integer < range, no empty sequence). NumPy arrays and other buffers of dense
 *       vectors (1-D) or dense sequences (2-D) of float/double/integer items are copied
 *       without creating Python objects.
 *   provider_pack(records, slots, double) -> [(steps, data, indptr, indices, seq_starts,
 *                                              sub_seq_starts) per slot]
 *       Holds the GIL only to snapshot the list of records (a tuple keeps them alive) and to
 *       allocate the output bytearrays.
 *
 * slots: a tuple of (name, kind, seq_type, dim), kind and seq_type numbered as ctf_slot_kind
 * and ctf_slot_seq in ctfio.h; python/ctfio/paddle/types.py (DataType, SequenceType) writes
 * the same numbers down.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_provider.h"
#include "ctfio.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

enum { PV_DENSE = CTF_SLOT_DENSE, PV_SPARSE = CTF_SLOT_SPARSE, PV_INTEGER = CTF_SLOT_INTEGER };
enum { PV_NO_SEQ = CTF_SLOT_NO_SEQUENCE, PV_SEQ = CTF_SLOT_SEQUENCE };

/* The parsed slots tuple: names borrowed from it. */
typedef struct {
    PyObject *names[CTF_MAX_SLOTS];
    ctf_slot s[CTF_MAX_SLOTS];
} pv_slots;

/* Where an encoding error happened, for its message. */
typedef struct {
    int index;                   /* slot number */
    PyObject *name;
    const ctf_slot *slot;
    Py_ssize_t sub;              /* sub-sequence number, or -1 */
    Py_ssize_t step;             /* element number within the (sub-)sequence, or -1 */
} pv_ctx;

static const char *const pv_kind_names[] = {"dense_vector", "sparse_binary_vector", "sparse_vector",
                                            "integer_value"};
static const char *const pv_seq_suffix[] = {"", "_sequence", "_sub_sequence"};

/* Raises type("input I 'NAME' (KIND), sub-sequence S, element T: MESSAGE"). @return : -1. */
static int pv_fail(PyObject *type, const pv_ctx *c, const char *fmt, ...)
{
    va_list va;
    va_start(va, fmt);
    PyObject *msg = PyUnicode_FromFormatV(fmt, va);
    va_end(va);
    if (!msg) return -1;
    char pos[96] = "";
    if (c->sub >= 0 && c->step >= 0)
        snprintf(pos, sizeof pos, ", sub-sequence %zd, element %zd", c->sub, c->step);
    else if (c->sub >= 0)
        snprintf(pos, sizeof pos, ", sub-sequence %zd", c->sub);
    else if (c->step >= 0)
        snprintf(pos, sizeof pos, ", element %zd", c->step);
    PyErr_Format(type, "input %d %R (%s%s(%lld))%s: %U", c->index, c->name,
                 pv_kind_names[c->slot->kind], pv_seq_suffix[c->slot->seq], (long long)c->slot->dim,
                 pos, msg);
    Py_DECREF(msg);
    return -1;
}

/* ctf_record_grow with MemoryError. @return : the offset, or (size_t)-1. */
static size_t pv_grow(ctf_record_writer *b, size_t n)
{
    const size_t at = ctf_record_grow(b, n);
    if (at == SIZE_MAX) PyErr_NoMemory();
    return at == SIZE_MAX ? (size_t)-1 : at;
}

static void pv_set_i64(ctf_record_writer *b, size_t at, int64_t v)
{
    memcpy(b->p + at, &v, sizeof v);
}

/* A list or tuple view of obj (new reference), refusing str/bytes, which are sequences too. */
static PyObject *pv_fast(PyObject *obj, const pv_ctx *c, const char *what)
{
    if (PyUnicode_Check(obj) || PyBytes_Check(obj) || PyByteArray_Check(obj) ||
        !PySequence_Check(obj)) {
        pv_fail(PyExc_TypeError, c, "expected %s (got %.100s)", what, Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyObject *fast = PySequence_Fast(obj, "not a sequence");
    if (!fast && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        pv_fail(PyExc_TypeError, c, "expected %s (got %.100s)", what, Py_TYPE(obj)->tp_name);
    }
    return fast;
}

/* Item i of a list or tuple as a new reference. Conversions may call back into Python
 * (__float__, __index__), which could resize a list under us: re-check the size every time. */
static PyObject *pv_item(PyObject *fast, Py_ssize_t i, Py_ssize_t n, const pv_ctx *c)
{
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        pv_fail(PyExc_RuntimeError, c, "a list changed size while it was converted");
        return NULL;
    }
    return Py_NewRef(PySequence_Fast_GET_ITEM(fast, i));
}

/* A Python int (or an object with __index__) as int64; floats are refused. */
static int pv_int(PyObject *obj, const pv_ctx *c, const char *what, int64_t *out)
{
    PyObject *idx = NULL;
    if (!PyLong_Check(obj)) {
        if (PyFloat_Check(obj) || !PyIndex_Check(obj))
            return pv_fail(PyExc_TypeError, c, "%s must be an int (got %.100s)", what,
                           Py_TYPE(obj)->tp_name);
        if (!(idx = PyNumber_Index(obj))) return -1;
        obj = idx;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    Py_XDECREF(idx);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (overflow) return pv_fail(PyExc_ValueError, c, "%s does not fit 64 bits", what);
    *out = (int64_t)v;
    return 0;
}

/* Stores one number as float or double at dst. */
static int pv_real(PyObject *obj, const pv_ctx *c, int dbl, char *dst)
{
    double v;
    if (PyFloat_CheckExact(obj)) {
        v = PyFloat_AS_DOUBLE(obj);
    } else {
        v = PyFloat_AsDouble(obj);
        if (v == -1.0 && PyErr_Occurred()) {
            if (!PyErr_ExceptionMatches(PyExc_TypeError)) return -1;
            PyErr_Clear();
            return pv_fail(PyExc_TypeError, c, "expected a number (got %.100s)",
                           Py_TYPE(obj)->tp_name);
        }
    }
    if (dbl) {
        memcpy(dst, &v, sizeof v);
    } else {
        const float f = (float)v;
        memcpy(dst, &f, sizeof f);
    }
    return 0;
}

/* Fast path for dense data held in a buffer (NumPy arrays, array.array): one vector (want_rows
 * -1: a 1-D buffer of dim items) or a whole sequence (want_rows 0: a 2-D (T, dim) buffer).
 * @return : 1 done (*rows set), 0 not applicable (nothing written, no error), -1 error. */
static int pv_dense_buffer(ctf_record_writer *b, PyObject *obj, int64_t dim, int want_rows,
                           Py_ssize_t *rows)
{
    Py_buffer view;
    int rc = 0;
    if (PyList_Check(obj) || PyTuple_Check(obj) || !PyObject_CheckBuffer(obj)) return 0;
    if (PyObject_GetBuffer(obj, &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear(); /* not contiguous or no format: the element-wise path handles it */
        return 0;
    }
    const int ndim = want_rows < 0 ? 1 : 2;
    if (view.ndim != ndim || !view.format || view.shape[ndim - 1] != (Py_ssize_t)dim) goto done;
    const Py_ssize_t n_rows = ndim == 2 ? view.shape[0] : 1;
    const size_t items = (size_t)n_rows * (size_t)dim;
    if (items && (size_t)view.itemsize * items != (size_t)view.len) goto done;
    rc = ctf_record_dense_items(b, view.format, view.buf, items);
    if (rc == CTF_ENOMEM) PyErr_NoMemory();
    if (rc) { /* an unsupported item type: the element-wise path tries */
        rc = rc == CTF_ENOMEM ? -1 : 0;
        goto done;
    }
    *rows = n_rows;
    rc = 1;
done:
    PyBuffer_Release(&view);
    return rc;
}

/* One dense vector of exactly dim numbers. */
static int pv_dense_step(ctf_record_writer *b, PyObject *obj, const pv_ctx *c, int dbl)
{
    const int64_t dim = c->slot->dim;
    Py_ssize_t rows;
    int rc = pv_dense_buffer(b, obj, dim, -1, &rows);
    if (rc) return rc < 0 ? -1 : 0;
    PyObject *fast = pv_fast(obj, c, "a list of floats");
    if (!fast) return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    const size_t elt = dbl ? sizeof(double) : sizeof(float);
    size_t at;
    rc = -1;
    if (n != dim) {
        pv_fail(PyExc_ValueError, c, "expected %lld values (got %zd)", (long long)dim, n);
        goto error;
    }
    if ((at = pv_grow(b, (size_t)n * elt)) == (size_t)-1) goto error;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = pv_item(fast, i, n, c);
        if (!item) goto error;
        const int bad = pv_real(item, c, dbl, b->p + at + (size_t)i * elt);
        Py_DECREF(item);
        if (bad) goto error;
    }
    rc = 0;
error:
    Py_DECREF(fast);
    return rc;
}

/* One integer_value. */
static int pv_integer_step(ctf_record_writer *b, PyObject *obj, const pv_ctx *c, int check)
{
    int64_t v;
    if (pv_int(obj, c, "the value", &v) < 0) return -1;
    if (check && (v < 0 || v >= c->slot->dim))
        return pv_fail(PyExc_ValueError, c, "value %lld out of range [0, %lld)", (long long)v,
                       (long long)c->slot->dim);
    const size_t at = pv_grow(b, sizeof v);
    if (at == (size_t)-1) return -1;
    pv_set_i64(b, at, v);
    return 0;
}

/* One sparse vector: [i, ...] (binary) or [(i, f), ...]; int64 nnz, int32 indices, values. */
static int pv_sparse_step(ctf_record_writer *b, PyObject *obj, const pv_ctx *c, int dbl)
{
    const int valued = c->slot->kind == PV_SPARSE;
    PyObject *fast = pv_fast(obj, c,
                             valued ? "a list of (index, value) pairs" : "a list of indices");
    if (!fast) return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    const size_t elt = dbl ? sizeof(double) : sizeof(float);
    size_t val_at = 0;
    const size_t idx_at = ctf_record_sparse_step(b, (size_t)n, valued, &val_at);
    PyObject *item = NULL, *index = NULL, *value = NULL;
    int rc = -1;
    if (idx_at == SIZE_MAX) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!(item = pv_item(fast, i, n, c))) goto error;
        if (valued) {
            if (!(PyTuple_Check(item) || PyList_Check(item)) ||
                PySequence_Fast_GET_SIZE(item) != 2) {
                pv_fail(PyExc_TypeError, c,
                        "non-zero %zd: expected an (index, value) pair "
                        "(got %R)",
                        i, item);
                goto error;
            }
            index = Py_NewRef(PySequence_Fast_GET_ITEM(item, 0));
            value = Py_NewRef(PySequence_Fast_GET_ITEM(item, 1));
        } else {
            index = Py_NewRef(item);
        }
        int64_t k;
        if (pv_int(index, c, "a sparse index", &k) < 0) goto error;
        /* Always checked, whatever `check` says: an index outside [0, dim) in a CSR array
           makes SciPy and torch read out of bounds. */
        if (k < 0 || k >= c->slot->dim) {
            pv_fail(PyExc_ValueError, c, "index %lld out of range [0, %lld)", (long long)k,
                    (long long)c->slot->dim);
            goto error;
        }
        const int32_t k32 = (int32_t)k;
        memcpy(b->p + idx_at + (size_t)i * sizeof k32, &k32, sizeof k32);
        if (valued && pv_real(value, c, dbl, b->p + val_at + (size_t)i * elt) < 0) goto error;
        Py_CLEAR(item);
        Py_CLEAR(index);
        Py_CLEAR(value);
    }
    rc = 0;
error:
    Py_XDECREF(item);
    Py_XDECREF(index);
    Py_XDECREF(value);
    Py_DECREF(fast);
    return rc;
}

static int pv_step(ctf_record_writer *b, PyObject *obj, const pv_ctx *c, int check, int dbl)
{
    switch (c->slot->kind) {
    case PV_DENSE: return pv_dense_step(b, obj, c, dbl);
    case PV_INTEGER: return pv_integer_step(b, obj, c, check);
    default: return pv_sparse_step(b, obj, c, dbl);
    }
}

/* The elements of one sequence (or sub-sequence). @return : their number, or -1. */
static Py_ssize_t pv_steps(ctf_record_writer *b, PyObject *obj, pv_ctx *c, int check, int dbl)
{
    Py_ssize_t rows;
    if (c->slot->kind == PV_DENSE) { /* a 2-D array of the whole sequence */
        int rc = pv_dense_buffer(b, obj, c->slot->dim, 0, &rows);
        if (rc) return rc < 0 ? -1 : rows;
    }
    PyObject *fast = pv_fast(obj, c, "a sequence (list) of elements");
    if (!fast) return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    for (Py_ssize_t t = 0; t < n; t++) {
        c->step = t;
        PyObject *item = pv_item(fast, t, n, c);
        const int bad = !item || pv_step(b, item, c, check, dbl) < 0;
        Py_XDECREF(item);
        if (bad) {
            Py_DECREF(fast);
            return -1;
        }
    }
    c->step = -1;
    Py_DECREF(fast);
    return n;
}

/* One slot's section. */
static int pv_section(ctf_record_writer *b, size_t k, PyObject *obj, pv_ctx *c, int check, int dbl)
{
    PyObject *outer = NULL;
    int64_t steps = 0, subs = 0;
    int rc = -1;
    if (ctf_record_section_begin(b, k) < 0) {
        PyErr_NoMemory();
        goto error;
    }
    switch (c->slot->seq) {
    case PV_NO_SEQ:
        if (pv_step(b, obj, c, check, dbl) < 0) goto error;
        steps = 1;
        break;
    case PV_SEQ:
        if ((steps = pv_steps(b, obj, c, check, dbl)) < 0) goto error;
        if (check && steps == 0) {
            pv_fail(PyExc_ValueError, c, "empty sequence");
            goto error;
        }
        break;
    default: {
        if (!(outer = pv_fast(obj, c, "a list of sub-sequences"))) goto error;
        subs = PySequence_Fast_GET_SIZE(outer);
        if (check && subs == 0) {
            pv_fail(PyExc_ValueError, c, "empty sequence");
            goto error;
        }
        const size_t lens = pv_grow(b, (size_t)subs * sizeof(int64_t));
        if (lens == (size_t)-1) goto error;
        for (Py_ssize_t s = 0; s < subs; s++) {
            c->sub = s;
            PyObject *item = pv_item(outer, s, (Py_ssize_t)subs, c);
            const Py_ssize_t n = item ? pv_steps(b, item, c, check, dbl) : -1;
            Py_XDECREF(item);
            if (n < 0) goto error;
            if (check && n == 0) {
                pv_fail(PyExc_ValueError, c, "empty sub-sequence");
                goto error;
            }
            pv_set_i64(b, lens + (size_t)s * sizeof(int64_t), n);
            steps += n;
        }
        c->sub = -1;
    }
    }
    if (ctf_record_section_end(b, c->slot, steps, subs) < 0) {
        PyErr_NoMemory();
        goto error;
    }
    rc = 0;
error:
    Py_XDECREF(outer);
    return rc;
}

/* Parses the slots tuple into out (borrowed names). @return : the number of slots, or -1. */
static Py_ssize_t pv_parse_slots(PyObject *slots, pv_slots *out)
{
    if (!PyTuple_Check(slots) || PyTuple_GET_SIZE(slots) < 1 ||
        PyTuple_GET_SIZE(slots) > CTF_MAX_SLOTS) {
        PyErr_Format(PyExc_TypeError,
                     "slots: must be a tuple of 1 to %d (name, kind, "
                     "seq_type, dim) tuples",
                     CTF_MAX_SLOTS);
        return -1;
    }
    const Py_ssize_t n = PyTuple_GET_SIZE(slots);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(slots, i);
        long kind = -1, seq = -1, dim = -1;
        if (PyTuple_Check(t) && PyTuple_GET_SIZE(t) == 4 &&
            PyLong_CheckExact(PyTuple_GET_ITEM(t, 1)) &&
            PyLong_CheckExact(PyTuple_GET_ITEM(t, 2)) &&
            PyLong_CheckExact(PyTuple_GET_ITEM(t, 3))) {
            out->names[i] = PyTuple_GET_ITEM(t, 0);
            kind = PyLong_AsLong(PyTuple_GET_ITEM(t, 1));
            seq = PyLong_AsLong(PyTuple_GET_ITEM(t, 2));
            dim = PyLong_AsLong(PyTuple_GET_ITEM(t, 3));
        }
        if (kind < CTF_SLOT_DENSE || kind > CTF_SLOT_INTEGER || seq < CTF_SLOT_NO_SEQUENCE ||
            seq > CTF_SLOT_SUB_SEQUENCE || dim < 1 || dim > INT32_MAX) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError,
                         "slots[%zd]: must be (name, kind 0-3, seq_type 0-2, "
                         "1 <= dim < 2**31) (got %R)",
                         i, t);
            return -1;
        }
        out->s[i] = (ctf_slot){.kind = (int)kind, .seq = (int)seq, .dim = (int64_t)dim};
    }
    return n;
}

const char ctf_py_provider_encode_doc[] =
    "provider_encode(sample, slots, check=False, double=False) -> bytes\n\n"
    "One provider sample (a list in slot order, or a dict keyed by slot name) as a record for\n"
    "provider_pack. slots: tuple of (name, kind, seq_type, dim). Layout errors always raise\n"
    "TypeError/ValueError naming the input and element; check adds the range checks. Holds the "
    "GIL.";

PyObject *ctf_py_provider_encode(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *sample, *slots, *fast = NULL, *result = NULL;
    int check = 0, dbl = 0;
    pv_slots spec;
    char stack[2048];
    ctf_record_writer b;
    ctf_record_writer_init(&b, stack, sizeof stack);
    if (!PyArg_ParseTuple(args, "OO|pp:provider_encode", &sample, &slots, &check, &dbl))
        return NULL;
    const Py_ssize_t n = pv_parse_slots(slots, &spec);
    if (n < 0) goto error;
    if (PyDict_Check(sample)) {
        if (check && PyDict_GET_SIZE(sample) != n) {
            PyErr_Format(PyExc_ValueError,
                         "the sample has %zd inputs, input_types %zd (keys: "
                         "%R)",
                         PyDict_GET_SIZE(sample), n, sample);
            goto error;
        }
    } else if (PyList_Check(sample) || PyTuple_Check(sample)) {
        if (!(fast = PySequence_Tuple(sample))) goto error; /* a list may change under us */
        if (PySequence_Fast_GET_SIZE(fast) != n) {
            PyErr_Format(PyExc_ValueError, "the sample has %zd inputs, input_types %zd",
                         PySequence_Fast_GET_SIZE(fast), n);
            goto error;
        }
    } else {
        PyErr_Format(PyExc_TypeError,
                     "a sample must be a list or tuple in input_types order, "
                     "or a dict keyed by input name (got %.100s)",
                     Py_TYPE(sample)->tp_name);
        goto error;
    }
    if (ctf_record_begin(&b, (size_t)n, dbl) < 0) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *obj;
        if (fast) {
            obj = PySequence_Fast_GET_ITEM(fast, i);
        } else if (!(obj = PyDict_GetItemWithError(sample, spec.names[i]))) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "the sample has no input %R (keys: %R)",
                             spec.names[i], sample);
            goto error;
        }
        pv_ctx c = {.index = (int)i,
                    .name = spec.names[i],
                    .slot = &spec.s[i],
                    .sub = -1,
                    .step = -1};
        Py_INCREF(obj); /* a dict value must survive callbacks into __float__/__index__ */
        const int rc = pv_section(&b, (size_t)i, obj, &c, check, dbl);
        Py_DECREF(obj);
        if (rc < 0) goto error;
    }
    result = PyBytes_FromStringAndSize(b.p, (Py_ssize_t)b.len);
error:
    ctf_record_writer_free(&b);
    Py_XDECREF(fast);
    return result;
}

/* A new bytearray of n bytes; *p receives its storage. */
static PyObject *pv_bytearray(size_t n, char **p)
{
    if (n > PY_SSIZE_T_MAX) return PyErr_NoMemory();
    PyObject *ba = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (ba) *p = PyByteArray_AS_STRING(ba);
    return ba;
}

/* Slot k's tuple (steps, data, indptr, indices, seq_starts, sub_seq_starts), its storage in o.
 * @return : a new reference, or NULL with an exception. */
static PyObject *pv_arrays(const ctf_slot *s, const ctf_batch_size *t, size_t n, int dbl,
                           ctf_batch_out *o)
{
    const size_t elt = dbl ? sizeof(double) : sizeof(float);
    const size_t steps = (size_t)t->steps, nnz = (size_t)t->nnz;
    PyObject *arrays = PyTuple_New(6);
    char *p = NULL;
    if (!arrays) return NULL;
    for (int j = 2; j < 6; j++) PyTuple_SET_ITEM(arrays, j, Py_NewRef(Py_None));
    PyObject *data;
    if (s->kind == CTF_SLOT_DENSE)
        data = steps > SIZE_MAX / elt / (size_t)s->dim
                   ? PyErr_NoMemory()
                   : pv_bytearray(steps * (size_t)s->dim * elt, &p);
    else if (s->kind == CTF_SLOT_INTEGER)
        data = pv_bytearray(steps * 8, &p);
    else
        data = pv_bytearray(nnz * elt, &p);
    PyObject *steps_obj = PyLong_FromSize_t(steps);
    PyTuple_SET_ITEM(arrays, 0, steps_obj ? steps_obj : Py_NewRef(Py_None));
    PyTuple_SET_ITEM(arrays, 1, data ? data : Py_NewRef(Py_None));
    if (!data || !steps_obj) goto error;
    o->data = p;
    struct {
        bool want;
        size_t bytes;
        void **at;
    } more[] = {
        {s->kind == CTF_SLOT_SPARSE || s->kind == CTF_SLOT_SPARSE_BINARY, (steps + 1) * 8,
         (void **)&o->indptr},
        {s->kind == CTF_SLOT_SPARSE || s->kind == CTF_SLOT_SPARSE_BINARY, nnz * 4,
         (void **)&o->indices},
        {s->seq != CTF_SLOT_NO_SEQUENCE, (n + 1) * 8, (void **)&o->seq_starts},
        {s->seq == CTF_SLOT_SUB_SEQUENCE, ((size_t)t->subs + 1) * 8, (void **)&o->sub_starts},
    };
    for (int j = 0; j < 4; j++) {
        if (!more[j].want) continue;
        PyObject *ba = pv_bytearray(more[j].bytes, &p);
        if (!ba) goto error;
        Py_DECREF(PyTuple_GET_ITEM(arrays, j + 2)); /* the None it replaces */
        PyTuple_SET_ITEM(arrays, j + 2, ba);
        *more[j].at = p;
    }
    return arrays;
error:
    Py_DECREF(arrays);
    return NULL;
}

/* The batch arrays of n records: per slot the tuple of pv_arrays. The GIL is released while
 * the library checks and copies the records, which the caller keeps alive and unchanged.
 * @return : a new list, or NULL with an exception. */
static PyObject *pv_pack(const ctf_record_ref *recs, size_t n, const pv_slots *spec, size_t nslots,
                         int dbl)
{
    PyObject *result = NULL;
    ctf_batch_size *tot = PyMem_Calloc(nslots, sizeof *tot);
    ctf_batch_out *outs = PyMem_Calloc(nslots, sizeof *outs);
    ctf_error err;
    int rc;
    if (!tot || !outs) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    rc = ctf_records_measure(recs, n, spec->s, nslots, dbl, tot, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, err.message);
        goto done;
    }
    if (!(result = PyList_New((Py_ssize_t)nslots))) goto done;
    for (size_t k = 0; k < nslots; k++) {
        PyObject *arrays = pv_arrays(&spec->s[k], &tot[k], n, dbl, &outs[k]);
        if (!arrays) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)k, arrays);
    }
    /* Only this function holds the new bytearrays: nothing can resize or free them while the
     * copy runs unlocked. */
    Py_BEGIN_ALLOW_THREADS
    ctf_records_pack(recs, n, spec->s, nslots, dbl, outs);
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(tot);
    PyMem_Free(outs);
    return result;
}

const char ctf_py_provider_pack_doc[] =
    "provider_pack(records, slots, double=False) -> list\n\n"
    "Assembles a batch from provider_encode records: per slot a tuple (steps, data, indptr,\n"
    "indices, seq_starts, sub_seq_starts) of bytearrays (None where the slot has none): data "
    "holds\n"
    "dense values (steps x dim), integer ids (int64) or sparse values; indptr is int64 (steps + "
    "1),\n"
    "indices int32, the start positions int64 in samples. The GIL is released while the records\n"
    "are validated and copied; it is held only to list the records and allocate the outputs.";

PyObject *ctf_py_provider_pack(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *records, *slots, *keep = NULL, *result = NULL;
    int dbl = 0;
    pv_slots spec;
    ctf_record_ref *recs = NULL;
    if (!PyArg_ParseTuple(args, "OO|p:provider_pack", &records, &slots, &dbl)) return NULL;
    const Py_ssize_t ns = pv_parse_slots(slots, &spec);
    if (ns < 0) goto done;
    if (!(keep = PySequence_Tuple(records))) goto done; /* holds the records while unlocked */
    const size_t n = (size_t)PyTuple_GET_SIZE(keep);
    if (!(recs = PyMem_Calloc(n ? n : 1, sizeof *recs))) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        PyObject *r = PyTuple_GET_ITEM(keep, (Py_ssize_t)i);
        if (!PyBytes_Check(r)) {
            PyErr_Format(PyExc_TypeError,
                         "records[%zu]: must be bytes from provider_encode "
                         "(got %.100s)",
                         i, Py_TYPE(r)->tp_name);
            goto done;
        }
        recs[i] = (ctf_record_ref){PyBytes_AS_STRING(r), (size_t)PyBytes_GET_SIZE(r)};
    }
    result = pv_pack(recs, n, &spec, (size_t)ns, dbl);
done:
    Py_XDECREF(keep);
    PyMem_Free(recs);
    return result;
}

/*======================================================================
 * SamplePool: lib/reader/pool.c for one pass of a provider
 *====================================================================*/

typedef struct {
    PyObject_HEAD
    ctf_pool *pool;
    PyObject *slots;             /* the slots tuple (spec's names are borrowed from it) */
    pv_slots spec;
    size_t nslots;
    int dbl;
    bool busy;                   /* a batch is being packed with the GIL released */
} PoolObject;

/* Calls the Python fill(): 1 when it returns true (the pass has no data left), 0 when false,
 * -1 with its exception. */
static int pool_fill(void *user, ctf_pool *Py_UNUSED(pool))
{
    PyObject *r = PyObject_CallNoArgs((PyObject *)user);
    if (!r) return -1;
    const int done = PyObject_IsTrue(r);
    Py_DECREF(r);
    return done;
}

/* A pool call's status: 0, or -1 with an exception (a fill error stays as raised). */
static int pool_status(int rc)
{
    if (rc >= 0) {
        PyErr_Clear(); /* a fill error after some records: it is raised again by the next fill */
        return 0;
    }
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return -1;
}

static int pool_ready(PoolObject *self)
{
    if (!self->busy) return 0;
    PyErr_SetString(PyExc_RuntimeError, "SamplePool: used by two threads at once");
    return -1;
}

static PyObject *Pool_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"slots",         "double",    "seed",     "pass_index", "shuffle",
                             "min_pool_size", "pool_size", "can_over", NULL};
    PyObject *slots, *seed_obj;
    int dbl, shuffle, over;
    unsigned long long pass;
    long long low, high;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OpOKpLLp:SamplePool", kwlist, &slots, &dbl,
                                     &seed_obj, &pass, &shuffle, &low, &high, &over))
        return NULL;
    const unsigned long long seed = PyLong_AsUnsignedLongLong(seed_obj); /* no silent wrap */
    if (PyErr_Occurred()) return NULL;
    PoolObject *self = (PoolObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    const Py_ssize_t ns = pv_parse_slots(slots, &self->spec);
    ctf_pool_options o = {seed, pass, shuffle, low, high, over};
    ctf_error err;
    if (ns < 0) goto error;
    self->slots = Py_NewRef(slots);
    self->nslots = (size_t)ns;
    self->dbl = dbl;
    if (ctf_pool_open(&o, &self->pool, &err) < 0) {
        PyErr_SetString(PyExc_ValueError, err.message);
        goto error;
    }
    return (PyObject *)self;
error:
    Py_DECREF(self);
    return NULL;
}

static void Pool_dealloc(PoolObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    ctf_pool_free(self->pool);
    Py_XDECREF(self->slots);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *Pool_files(PoolObject *self, PyObject *args)
{
    Py_ssize_t n, workers, rank;
    if (!PyArg_ParseTuple(args, "nnn:files", &n, &workers, &rank)) return NULL;
    size_t *out = PyMem_Malloc(((size_t)(n > 0 ? n : 1)) * sizeof *out), got;
    if (!out) return PyErr_NoMemory();
    PyObject *list = NULL;
    if (n < 0 || ctf_pool_files(self->pool, (size_t)n, (size_t)workers, (size_t)rank, out, &got))
        PyErr_SetString(PyExc_ValueError, "files: bad count, workers or rank");
    else if ((list = PyList_New((Py_ssize_t)got)))
        for (size_t i = 0; i < got; i++)
            PyList_SET_ITEM(list, (Py_ssize_t)i, PyLong_FromSize_t(out[i]));
    PyMem_Free(out);
    return list;
}

static PyObject *Pool_pick(PoolObject *self, PyObject *arg)
{
    const Py_ssize_t n = PyLong_AsSsize_t(arg);
    if (n < 1) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "pick: n < 1");
    return PyLong_FromSize_t(ctf_pool_pick(self->pool, (size_t)n));
}

/* push([(record, units), ...]) */
static PyObject *Pool_push(PoolObject *self, PyObject *items)
{
    PyObject *fast = PySequence_Fast(items, "push: a list of (record, units) expected");
    if (!fast) return NULL;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyTuple_Check(it) || PyTuple_GET_SIZE(it) != 2 ||
            !PyBytes_Check(PyTuple_GET_ITEM(it, 0))) {
            PyErr_SetString(PyExc_TypeError, "push: (bytes, units) items expected");
            goto error;
        }
        const unsigned long long u = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(it, 1));
        if (PyErr_Occurred()) goto error;
        PyObject *rec = PyTuple_GET_ITEM(it, 0);
        if (ctf_pool_push(self->pool, PyBytes_AS_STRING(rec), (size_t)PyBytes_GET_SIZE(rec), u)) {
            PyErr_NoMemory();
            goto error;
        }
    }
    Py_DECREF(fast);
    Py_RETURN_NONE;
error:
    Py_DECREF(fast);
    return NULL;
}

static PyObject *Pool_info(PoolObject *self, PyObject *Py_UNUSED(ignored))
{
    ctf_pool_info in;
    ctf_pool_get_info(self->pool, &in);
    return Py_BuildValue("KKNKKKKKK", in.units, in.samples, PyBool_FromLong(in.empty), in.goal,
                         in.room, in.peak_units, in.peak_samples, in.delivered, in.batches);
}

/* next(size, fill) -> (arrays per slot, records, units), or None at the end of the pass. */
static PyObject *Pool_next(PoolObject *self, PyObject *args)
{
    unsigned long long size;
    PyObject *fill;
    const ctf_record_ref *recs;
    size_t n;
    uint64_t units;
    if (!PyArg_ParseTuple(args, "KO:next", &size, &fill) || pool_ready(self)) return NULL;
    if (pool_status(ctf_pool_next(self->pool, size, pool_fill, fill, &recs, &n, &units)))
        return NULL;
    if (!n) Py_RETURN_NONE;
    self->busy = true; /* the records belong to the pool while they are copied unlocked */
    PyObject *arrays = pv_pack(recs, n, &self->spec, self->nslots, self->dbl);
    self->busy = false;
    return arrays ? Py_BuildValue("NnK", arrays, (Py_ssize_t)n, units) : NULL;
}

static PyObject *Pool_at_end(PoolObject *self, PyObject *fill)
{
    if (pool_ready(self)) return NULL;
    const int rc = ctf_pool_at_end(self->pool, pool_fill, fill);
    if (rc < 0) return pool_status(rc), NULL;
    return PyBool_FromLong(rc);
}

static PyObject *Pool_skip(PoolObject *self, PyObject *args)
{
    unsigned long long count;
    PyObject *fill;
    uint64_t skipped;
    if (!PyArg_ParseTuple(args, "KO:skip", &count, &fill) || pool_ready(self)) return NULL;
    if (ctf_pool_skip(self->pool, count, pool_fill, fill, &skipped) < 0)
        return pool_status(-1), NULL;
    return PyLong_FromUnsignedLongLong(skipped);
}

static PyMethodDef Pool_methods[] = {
    {"files", (PyCFunction)Pool_files, METH_VARARGS,
     "files(n, workers, rank): the pass's file order and this worker's share"},
    {"pick", (PyCFunction)Pool_pick, METH_O, "pick(n): which of n open files feeds next"},
    {"push", (PyCFunction)Pool_push, METH_O, "push([(record, units), ...])"},
    {"info", (PyCFunction)Pool_info, METH_NOARGS,
     "info() -> (units, samples, empty, goal, room, peak_units, peak_samples, delivered, "
     "batches)"},
    {"next", (PyCFunction)Pool_next, METH_VARARGS,
     "next(size, fill) -> (arrays, records, units) or None at the end of the pass"},
    {"at_end", (PyCFunction)Pool_at_end, METH_O, "at_end(fill): the pass has nothing left"},
    {"skip", (PyCFunction)Pool_skip, METH_VARARGS, "skip(count, fill) -> records dropped"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot Pool_slots[] = {
    {Py_tp_doc, (void *)"SamplePool(slots, double, seed, pass_index, shuffle, min_pool_size, "
                        "pool_size, can_over): one pass of a provider (lib/reader/pool.c). "
                        "fill() pushes records and returns True once the pass has no more."},
    {Py_tp_new, (void *)Pool_new},
    {Py_tp_dealloc, (void *)Pool_dealloc},
    {Py_tp_methods, Pool_methods},
    {0, NULL},
};

static PyType_Spec Pool_spec = {"ctfio._ctfio.SamplePool", sizeof(PoolObject), 0,
                                Py_TPFLAGS_DEFAULT, Pool_slots};

int ctf_py_provider_add_types(PyObject *m)
{
    PyObject *type = PyType_FromSpec(&Pool_spec);
    if (!type) return -1;
    const int rc = PyModule_AddType(m, (PyTypeObject *)type);
    Py_DECREF(type);
    return rc;
}
