/*
 * _provider.c -- part of the ctfio._ctfio extension: the C side of the PaddlePaddle-style
 * providers (python/ctfio/paddle/, rules 12). Samples become compact records
 * (provider_encode, with the GIL) and lists of records become batch arrays (provider_pack,
 * mostly without the GIL). Split from _ctfio.c, which registers the two functions, to keep each
 * file under 1500 lines.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_provider.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/*======================================================================
 * 7b. Provider samples: encoding and batch assembly (ctfio.provider, rules 12)
 *====================================================================*/

/*
 * The PaddlePaddle-style provider (python/ctfio/paddle/) turns every sample its
 * generator yields into one compact, self-describing record (provider_encode), keeps records in
 * its pool and cache, and assembles a batch from a list of records (provider_pack).
 *
 *   provider_encode(sample, slots, check, double) -> bytes
 *       Runs WITH the GIL (it reads Python objects): one pass over the sample converts every
 *       number into a C buffer, validating the layout of the input types (always), the sparse
 *       indices (always: 0 <= index < dim) and, with check, the other ranges
 *       (0 <= integer < range, no empty sequence).
 *       NumPy arrays and other buffers of dense vectors (1-D) or dense sequences (2-D) of
 *       float/double/integer items are copied without creating Python objects.
 *   provider_pack(records, slots, double) -> [(steps, data, indptr, indices, seq_starts,
 *                                              sub_seq_starts) per slot]
 *       Holds the GIL only to snapshot the list of records (a tuple keeps them alive) and to
 *       allocate the output bytearrays; validating the records, computing the sizes and start
 *       positions and copying the values all run WITHOUT the GIL, so the reader threads keep
 *       running their generators meanwhile.
 *
 * slots: a tuple of (name, kind, seq_type, dim) with kind 0 dense_vector, 1 sparse_binary_vector,
 * 2 sparse_vector, 3 integer_value and seq_type 0 NO_SEQUENCE, 1 SEQUENCE, 2 SUB_SEQUENCE.
 *
 * Record layout (native byte order; every section starts 8-byte aligned):
 *   uint32 magic "CTFP", uint32 flags (bit 0: values are double), uint64 nslots,
 *   uint64 offset[nslots] of each slot's section from the record start, then the sections:
 *   int64 steps T, int64 sub-sequences S (0 unless SUB_SEQUENCE), int32 dim, uint8 kind,
 *   uint8 seq_type, 2 bytes zero, int64 sub_length[S], then the payload:
 *     dense    T * dim values (float or double), padded to 8 bytes;
 *     integer  T int64;
 *     sparse   per step: int64 nnz, int32 index[nnz] padded to 8, then for sparse_vector
 *              value[nnz] padded to 8.
 * provider_pack re-validates every record (bounds, counts, sums) before it trusts it, so a
 * damaged or foreign bytes object is a ValueError, never an out-of-bounds read.
 *
 * Keeping two places in step: the kind and seq_type numbers are also written down in
 * python/ctfio/paddle/types.py (DataType, SequenceType), and data_provider.py's _batch reads
 * the tuple provider_pack returns.
 */

enum { PV_DENSE = 0, PV_SPARSE_BINARY = 1, PV_SPARSE = 2, PV_INTEGER = 3 };
enum { PV_NO_SEQ = 0, PV_SEQ = 1, PV_SUB_SEQ = 2 };

#define PV_MAGIC 0x50544643u     /* "CTFP" read as little-endian bytes */
#define PV_MAX_SLOTS 1024
#define PV_HEADER_BYTES 16       /* magic, flags, nslots */
#define PV_SECTION_BYTES 24      /* steps, subs, dim, kind, seq_type, padding */

typedef struct {
    PyObject *name;              /* borrowed from the slots tuple */
    int kind;                    /* PV_DENSE .. PV_INTEGER */
    int seq;                     /* PV_NO_SEQ .. PV_SUB_SEQ */
    int64_t dim;                 /* vector dimension, or the integer range */
} pv_slot;

/* A growable byte buffer (GIL held): starts in the caller's stack array, moves to PyMem. */
typedef struct {
    char *p;
    size_t len;                  /* bytes written */
    size_t cap;                  /* bytes available at p */
    bool heap;                   /* p is PyMem memory (else the caller's array) */
} pv_buf;

/* Where an encoding error happened, for its message. */
typedef struct {
    int index;                   /* slot number */
    const pv_slot *slot;
    Py_ssize_t sub;              /* sub-sequence number, or -1 */
    Py_ssize_t step;             /* element number within the (sub-)sequence, or -1 */
} pv_ctx;

static const char *const pv_kind_names[] = {"dense_vector", "sparse_binary_vector",
                                            "sparse_vector", "integer_value"};
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
    PyErr_Format(type, "input %d %R (%s%s(%lld))%s: %U", c->index, c->slot->name,
                 pv_kind_names[c->slot->kind], pv_seq_suffix[c->slot->seq],
                 (long long)c->slot->dim, pos, msg);
    Py_DECREF(msg);
    return -1;
}

/* Makes room for n more bytes. @return : 0, or -1 with MemoryError. */
static int pv_reserve(pv_buf *b, size_t n)
{
    if (n <= b->cap - b->len) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *p = b->heap ? PyMem_Realloc(b->p, cap) : PyMem_Malloc(cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    if (!b->heap && b->len) memcpy(p, b->p, b->len);
    b->p = p;
    b->cap = cap;
    b->heap = true;
    return 0;
}

/* Appends n zero bytes. @return : their offset, or (size_t)-1 with MemoryError. */
static size_t pv_grow(pv_buf *b, size_t n)
{
    if (pv_reserve(b, n) < 0) return (size_t)-1;
    const size_t at = b->len;
    memset(b->p + at, 0, n);
    b->len += n;
    return at;
}

static int pv_pad8(pv_buf *b) { return pv_grow(b, (8 - b->len % 8) % 8) == (size_t)-1 ? -1 : 0; }

static void pv_set_i64(pv_buf *b, size_t at, int64_t v) { memcpy(b->p + at, &v, sizeof v); }

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

/* Converts n buffer items of struct format fmt at src into float/double at dst.
 * @return : 0, or -1 for a format this path does not handle. */
static int pv_convert_items(const char *fmt, const char *src, size_t n, int dbl, char *dst)
{
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') {
        static const union { uint16_t u; uint8_t b[2]; } probe = {1};
        if (*fmt == '<' && !probe.b[0]) return -1; /* little-endian data on a big-endian host */
        fmt++;
    }
    if (!fmt[0] || fmt[1]) return -1;
    const size_t out = dbl ? sizeof(double) : sizeof(float);
#define PV_CONVERT(ctype)                                                                   \
    for (size_t i = 0; i < n; i++) {                                                        \
        ctype x;                                                                            \
        memcpy(&x, src + i * sizeof x, sizeof x);                                           \
        if (dbl) {                                                                          \
            const double d = (double)x;                                                     \
            memcpy(dst + i * out, &d, out);                                                 \
        } else {                                                                            \
            const float f = (float)x;                                                       \
            memcpy(dst + i * out, &f, out);                                                 \
        }                                                                                   \
    }                                                                                       \
    return 0
    switch (*fmt) {
    case 'f':
        if (!dbl) {
            memcpy(dst, src, n * sizeof(float));
            return 0;
        }
        PV_CONVERT(float);
    case 'd':
        if (dbl) {
            memcpy(dst, src, n * sizeof(double));
            return 0;
        }
        PV_CONVERT(double);
    case 'b': PV_CONVERT(signed char);
    case 'B': PV_CONVERT(unsigned char);
    case 'h': PV_CONVERT(short);
    case 'H': PV_CONVERT(unsigned short);
    case 'i': PV_CONVERT(int);
    case 'I': PV_CONVERT(unsigned int);
    case 'l': PV_CONVERT(long);
    case 'L': PV_CONVERT(unsigned long);
    case 'q': PV_CONVERT(long long);
    case 'Q': PV_CONVERT(unsigned long long);
    default: return -1;
    }
#undef PV_CONVERT
}

/* Fast path for dense data held in a buffer (NumPy arrays, array.array): one vector (want_rows
 * -1: a 1-D buffer of dim items) or a whole sequence (want_rows 0: a 2-D (T, dim) buffer).
 * @return : 1 done (*rows set), 0 not applicable (nothing written, no error), -1 error. */
static int pv_dense_buffer(pv_buf *b, PyObject *obj, int64_t dim, int dbl, int want_rows,
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
    if (view.ndim != ndim || !view.format || view.shape[ndim - 1] != (Py_ssize_t)dim)
        goto done;
    const Py_ssize_t n_rows = ndim == 2 ? view.shape[0] : 1;
    const size_t items = (size_t)n_rows * (size_t)dim;
    const size_t elt = dbl ? sizeof(double) : sizeof(float);
    if (items && (size_t)view.itemsize * items != (size_t)view.len) goto done;
    const size_t at = pv_grow(b, items * elt);
    if (at == (size_t)-1) {
        rc = -1;
        goto done;
    }
    if (items && pv_convert_items(view.format, view.buf, items, dbl, b->p + at) < 0) {
        b->len = at; /* an unsupported item type: undo, let the element-wise path try */
        goto done;
    }
    *rows = n_rows;
    rc = 1;
done:
    PyBuffer_Release(&view);
    return rc;
}

/* One dense vector of exactly dim numbers. */
static int pv_dense_step(pv_buf *b, PyObject *obj, const pv_ctx *c, int dbl)
{
    const int64_t dim = c->slot->dim;
    Py_ssize_t rows;
    int rc = pv_dense_buffer(b, obj, dim, dbl, -1, &rows);
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
static int pv_integer_step(pv_buf *b, PyObject *obj, const pv_ctx *c, int check)
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
static int pv_sparse_step(pv_buf *b, PyObject *obj, const pv_ctx *c, int check, int dbl)
{
    const int valued = c->slot->kind == PV_SPARSE;
    PyObject *fast = pv_fast(obj, c, valued ? "a list of (index, value) pairs"
                                            : "a list of indices");
    if (!fast) return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    const size_t elt = dbl ? sizeof(double) : sizeof(float);
    const size_t at = pv_grow(b, sizeof(int64_t));
    size_t idx_at, val_at = 0;
    PyObject *item = NULL, *index = NULL, *value = NULL;
    int rc = -1;
    if (at == (size_t)-1) goto error;
    pv_set_i64(b, at, (int64_t)n);
    if ((idx_at = pv_grow(b, (size_t)n * sizeof(int32_t))) == (size_t)-1 || pv_pad8(b) < 0)
        goto error;
    if (valued && ((val_at = pv_grow(b, (size_t)n * elt)) == (size_t)-1 || pv_pad8(b) < 0))
        goto error;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!(item = pv_item(fast, i, n, c))) goto error;
        if (valued) {
            if (!(PyTuple_Check(item) || PyList_Check(item)) ||
                PySequence_Fast_GET_SIZE(item) != 2) {
                pv_fail(PyExc_TypeError, c, "non-zero %zd: expected an (index, value) pair "
                        "(got %R)", i, item);
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

static int pv_step(pv_buf *b, PyObject *obj, const pv_ctx *c, int check, int dbl)
{
    switch (c->slot->kind) {
    case PV_DENSE: return pv_dense_step(b, obj, c, dbl);
    case PV_INTEGER: return pv_integer_step(b, obj, c, check);
    default: return pv_sparse_step(b, obj, c, check, dbl);
    }
}

/* The elements of one sequence (or sub-sequence). @return : their number, or -1. */
static Py_ssize_t pv_steps(pv_buf *b, PyObject *obj, pv_ctx *c, int check, int dbl)
{
    Py_ssize_t rows;
    if (c->slot->kind == PV_DENSE) { /* a 2-D array of the whole sequence */
        int rc = pv_dense_buffer(b, obj, c->slot->dim, dbl, 0, &rows);
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
static int pv_section(pv_buf *b, PyObject *obj, pv_ctx *c, int check, int dbl)
{
    const size_t head = pv_grow(b, PV_SECTION_BYTES);
    PyObject *outer = NULL;
    int64_t steps = 0, subs = 0;
    int rc = -1;
    if (head == (size_t)-1) goto error;
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
    if (pv_pad8(b) < 0) goto error;
    pv_set_i64(b, head, steps);
    pv_set_i64(b, head + sizeof(int64_t), subs);
    const int32_t dim = (int32_t)c->slot->dim;
    const uint8_t kind = (uint8_t)c->slot->kind, seq = (uint8_t)c->slot->seq;
    memcpy(b->p + head + 16, &dim, sizeof dim);
    memcpy(b->p + head + 20, &kind, 1);
    memcpy(b->p + head + 21, &seq, 1);
    rc = 0;
error:
    Py_XDECREF(outer);
    return rc;
}

/* Parses the slots tuple into out[] (borrowed names). @return : the number of slots, or -1. */
static Py_ssize_t pv_parse_slots(PyObject *slots, pv_slot *out)
{
    if (!PyTuple_Check(slots) || PyTuple_GET_SIZE(slots) < 1 ||
        PyTuple_GET_SIZE(slots) > PV_MAX_SLOTS) {
        PyErr_Format(PyExc_TypeError, "slots: must be a tuple of 1 to %d (name, kind, "
                     "seq_type, dim) tuples", PV_MAX_SLOTS);
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
            out[i].name = PyTuple_GET_ITEM(t, 0);
            kind = PyLong_AsLong(PyTuple_GET_ITEM(t, 1));
            seq = PyLong_AsLong(PyTuple_GET_ITEM(t, 2));
            dim = PyLong_AsLong(PyTuple_GET_ITEM(t, 3));
        }
        if (kind < PV_DENSE || kind > PV_INTEGER || seq < PV_NO_SEQ || seq > PV_SUB_SEQ ||
            dim < 1 || dim > INT32_MAX) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "slots[%zd]: must be (name, kind 0-3, seq_type 0-2, "
                         "1 <= dim < 2**31) (got %R)", i, t);
            return -1;
        }
        out[i].kind = (int)kind;
        out[i].seq = (int)seq;
        out[i].dim = (int64_t)dim;
    }
    return n;
}

const char ctf_py_provider_encode_doc[] =
"provider_encode(sample, slots, check=False, double=False) -> bytes\n\n"
"One provider sample (a list in slot order, or a dict keyed by slot name) as a record for\n"
"provider_pack. slots: tuple of (name, kind, seq_type, dim). Layout errors always raise\n"
"TypeError/ValueError naming the input and element; check adds the range checks. Holds the GIL.";

PyObject *ctf_py_provider_encode(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *sample, *slots, *fast = NULL, *result = NULL;
    int check = 0, dbl = 0;
    pv_slot spec[PV_MAX_SLOTS];
    char stack[2048];
    pv_buf b = {.p = stack, .cap = sizeof stack};
    if (!PyArg_ParseTuple(args, "OO|pp:provider_encode", &sample, &slots, &check, &dbl))
        return NULL;
    const Py_ssize_t n = pv_parse_slots(slots, spec);
    if (n < 0) goto error;
    if (PyDict_Check(sample)) {
        if (check && PyDict_GET_SIZE(sample) != n) {
            PyErr_Format(PyExc_ValueError, "the sample has %zd inputs, input_types %zd (keys: "
                         "%R)", PyDict_GET_SIZE(sample), n, sample);
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
        PyErr_Format(PyExc_TypeError, "a sample must be a list or tuple in input_types order, "
                     "or a dict keyed by input name (got %.100s)", Py_TYPE(sample)->tp_name);
        goto error;
    }
    const size_t head = PV_HEADER_BYTES + (size_t)n * sizeof(uint64_t);
    if (pv_grow(&b, head) == (size_t)-1) goto error;
    const uint32_t magic = PV_MAGIC, flags = dbl ? 1u : 0u;
    const uint64_t nslots = (uint64_t)n;
    memcpy(b.p, &magic, 4);
    memcpy(b.p + 4, &flags, 4);
    memcpy(b.p + 8, &nslots, 8);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *obj;
        if (fast) {
            obj = PySequence_Fast_GET_ITEM(fast, i);
        } else if (!(obj = PyDict_GetItemWithError(sample, spec[i].name))) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "the sample has no input %R (keys: %R)",
                             spec[i].name, sample);
            goto error;
        }
        const uint64_t off = (uint64_t)b.len;
        memcpy(b.p + PV_HEADER_BYTES + (size_t)i * sizeof off, &off, sizeof off);
        pv_ctx c = {.index = (int)i, .slot = &spec[i], .sub = -1, .step = -1};
        Py_INCREF(obj); /* a dict value must survive callbacks into __float__/__index__ */
        const int rc = pv_section(&b, obj, &c, check, dbl);
        Py_DECREF(obj);
        if (rc < 0) goto error;
    }
    result = PyBytes_FromStringAndSize(b.p, (Py_ssize_t)b.len);
error:
    if (b.heap) PyMem_Free(b.p);
    Py_XDECREF(fast);
    return result;
}

/* One record seen from C: its bytes (kept alive by a tuple while the GIL is released). */
typedef struct {
    const char *p;
    size_t len;
} pv_rec;

/* Per-slot totals over a batch. */
typedef struct {
    int64_t steps;               /* samples (time steps) */
    int64_t subs;                /* sub-sequences */
    int64_t nnz;                 /* sparse non-zeros */
} pv_total;

static int64_t pv_get_i64(const char *p)
{
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static uint64_t pv_get_u64(const char *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static size_t pv_round8(size_t n) { return (n + 7) & ~(size_t)7; }

/* Bounds of slot k's section in record r: [*at, *end). No GIL. @return : 0, or -1. */
static int pv_section_bounds(const pv_rec *r, size_t k, size_t nslots, size_t *at, size_t *end)
{
    const size_t head = PV_HEADER_BYTES + nslots * sizeof(uint64_t);
    const uint64_t a = pv_get_u64(r->p + PV_HEADER_BYTES + k * sizeof(uint64_t));
    const uint64_t e = k + 1 < nslots
                           ? pv_get_u64(r->p + PV_HEADER_BYTES + (k + 1) * sizeof(uint64_t))
                           : (uint64_t)r->len;
    if (a < head || a % 8 || a > e || e > r->len || e - a < PV_SECTION_BYTES) return -1;
    *at = (size_t)a;
    *end = (size_t)e;
    return 0;
}

/* Checks every record against the slots and adds up the totals. Runs WITHOUT the GIL: no
 * Python calls; an error is written to msg. @return : 0, or -1. */
static int pv_scan(const pv_rec *recs, size_t n, const pv_slot *spec, size_t nslots, int dbl,
                   pv_total *tot, char *msg, size_t msg_cap)
{
    const size_t elt = dbl ? sizeof(double) : sizeof(float);
    for (size_t i = 0; i < n; i++) {
        const pv_rec *r = &recs[i];
        uint32_t magic, flags;
        if (r->len < PV_HEADER_BYTES) goto bad;
        memcpy(&magic, r->p, 4);
        memcpy(&flags, r->p + 4, 4);
        if (magic != PV_MAGIC || pv_get_u64(r->p + 8) != nslots ||
            r->len < PV_HEADER_BYTES + nslots * sizeof(uint64_t))
            goto bad;
        if ((flags & 1u) != (dbl ? 1u : 0u)) {
            snprintf(msg, msg_cap, "records[%zu]: encoded as %s, packed as %s", i,
                     (flags & 1u) ? "double" : "float", dbl ? "double" : "float");
            return -1;
        }
        for (size_t k = 0; k < nslots; k++) {
            const pv_slot *s = &spec[k];
            size_t at, end;
            if (pv_section_bounds(r, k, nslots, &at, &end) < 0) goto bad;
            const int64_t steps = pv_get_i64(r->p + at), subs = pv_get_i64(r->p + at + 8);
            int32_t dim;
            memcpy(&dim, r->p + at + 16, sizeof dim);
            size_t room = end - at - PV_SECTION_BYTES;
            const char *q = r->p + at + PV_SECTION_BYTES;
            if (dim != s->dim || (uint8_t)r->p[at + 20] != s->kind ||
                (uint8_t)r->p[at + 21] != s->seq || r->p[at + 22] || r->p[at + 23])
                goto bad;
            if (steps < 0 || subs < 0 || (s->seq == PV_NO_SEQ && steps != 1) ||
                (s->seq != PV_SUB_SEQ && subs != 0) || (uint64_t)subs > room / 8)
                goto bad;
            int64_t sum = 0;
            for (int64_t j = 0; j < subs; j++) {
                const int64_t len = pv_get_i64(q + 8 * j);
                if (len < 0 || len > steps - sum) goto bad;
                sum += len;
            }
            if (s->seq == PV_SUB_SEQ && sum != steps) goto bad;
            q += 8 * subs;
            room -= 8 * (size_t)subs;
            if (s->kind == PV_DENSE) {
                const size_t row = (size_t)s->dim * elt;
                if ((uint64_t)steps > room / row) goto bad;
            } else if (s->kind == PV_INTEGER) {
                if ((uint64_t)steps > room / 8) goto bad;
            } else {
                const size_t per = s->kind == PV_SPARSE ? sizeof(int32_t) + elt : sizeof(int32_t);
                for (int64_t t = 0; t < steps; t++) {
                    if (room < 8) goto bad;
                    const int64_t nnz = pv_get_i64(q);
                    if (nnz < 0 || (uint64_t)nnz > (room - 8) / per) goto bad;
                    size_t need = 8 + pv_round8((size_t)nnz * sizeof(int32_t));
                    if (s->kind == PV_SPARSE) need += pv_round8((size_t)nnz * elt);
                    if (need > room) goto bad;
                    q += need;
                    room -= need;
                    tot[k].nnz += nnz;
                }
            }
            tot[k].steps += steps;
            tot[k].subs += subs;
        }
        continue;
    bad:
        snprintf(msg, msg_cap, "records[%zu]: not a provider record for these slots", i);
        return -1;
    }
    return 0;
}

/* The output arrays of one slot (bytearray storage, or NULL when the slot has none). */
typedef struct {
    char *data;                  /* dense values, integer ids (int64) or sparse values */
    int64_t *indptr;             /* sparse: steps + 1 */
    int32_t *indices;            /* sparse: nnz */
    int64_t *seq_starts;         /* SEQUENCE / SUB_SEQUENCE: records + 1 */
    int64_t *sub_starts;         /* SUB_SEQUENCE: sub-sequences + 1 */
} pv_out;

/* Copies the records into the outputs. Runs WITHOUT the GIL; pv_scan validated the records. */
static void pv_fill(const pv_rec *recs, size_t n, const pv_slot *spec, size_t nslots, int dbl,
                    pv_out *outs)
{
    const size_t elt = dbl ? sizeof(double) : sizeof(float);
    const float one_f = 1.0f;
    const double one_d = 1.0;
    for (size_t k = 0; k < nslots; k++) {
        const pv_slot *s = &spec[k];
        pv_out *o = &outs[k];
        int64_t step = 0, sub = 0, nnz = 0;
        for (size_t i = 0; i < n; i++) {
            size_t at, end;
            pv_section_bounds(&recs[i], k, nslots, &at, &end);
            const char *q = recs[i].p + at;
            const int64_t steps = pv_get_i64(q), subs = pv_get_i64(q + 8);
            q += PV_SECTION_BYTES;
            if (o->seq_starts) o->seq_starts[i] = step;
            for (int64_t j = 0, pos = step; j < subs; j++) {
                o->sub_starts[sub++] = pos;
                pos += pv_get_i64(q + 8 * j);
            }
            q += 8 * subs;
            if (s->kind == PV_DENSE) {
                const size_t bytes = (size_t)steps * (size_t)s->dim * elt;
                if (bytes) memcpy(o->data + (size_t)step * (size_t)s->dim * elt, q, bytes);
            } else if (s->kind == PV_INTEGER) {
                if (steps) memcpy(o->data + (size_t)step * 8, q, (size_t)steps * 8);
            } else {
                for (int64_t t = 0; t < steps; t++) {
                    const int64_t m = pv_get_i64(q);
                    const size_t idx_bytes = (size_t)m * sizeof(int32_t);
                    o->indptr[step + t] = nnz;
                    q += 8;
                    if (m) memcpy(o->indices + nnz, q, idx_bytes);
                    q += pv_round8(idx_bytes);
                    char *val = o->data + (size_t)nnz * elt;
                    if (s->kind == PV_SPARSE) {
                        if (m) memcpy(val, q, (size_t)m * elt);
                        q += pv_round8((size_t)m * elt);
                    } else {
                        for (int64_t j = 0; j < m; j++)
                            memcpy(val + (size_t)j * elt, dbl ? (const void *)&one_d
                                                              : (const void *)&one_f, elt);
                    }
                    nnz += m;
                }
            }
            step += steps;
        }
        if (o->seq_starts) o->seq_starts[n] = step;
        if (o->sub_starts) o->sub_starts[sub] = step;
        if (o->indptr) o->indptr[step] = nnz;
    }
}

/* A new bytearray of n bytes; *p receives its storage. */
static PyObject *pv_bytearray(size_t n, char **p)
{
    if (n > PY_SSIZE_T_MAX) return PyErr_NoMemory();
    PyObject *ba = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (ba) *p = PyByteArray_AS_STRING(ba);
    return ba;
}

const char ctf_py_provider_pack_doc[] =
"provider_pack(records, slots, double=False) -> list\n\n"
"Assembles a batch from provider_encode records: per slot a tuple (steps, data, indptr,\n"
"indices, seq_starts, sub_seq_starts) of bytearrays (None where the slot has none): data holds\n"
"dense values (steps x dim), integer ids (int64) or sparse values; indptr is int64 (steps + 1),\n"
"indices int32, the start positions int64 in samples. The GIL is released while the records\n"
"are validated and copied; it is held only to list the records and allocate the outputs.";

PyObject *ctf_py_provider_pack(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *records, *slots, *keep = NULL, *result = NULL, *arrays = NULL;
    int dbl = 0, rc;
    pv_slot spec[PV_MAX_SLOTS];
    pv_total *tot = NULL;
    pv_out *outs = NULL;
    pv_rec *recs = NULL;
    char msg[160] = "";
    if (!PyArg_ParseTuple(args, "OO|p:provider_pack", &records, &slots, &dbl)) return NULL;
    const Py_ssize_t ns = pv_parse_slots(slots, spec);
    if (ns < 0) goto error;
    if (!(keep = PySequence_Tuple(records))) goto error; /* holds the records while unlocked */
    const size_t n = (size_t)PyTuple_GET_SIZE(keep), nslots = (size_t)ns;
    recs = PyMem_Calloc(n ? n : 1, sizeof *recs);
    tot = PyMem_Calloc(nslots, sizeof *tot);
    outs = PyMem_Calloc(nslots, sizeof *outs);
    if (!recs || !tot || !outs) {
        PyErr_NoMemory();
        goto error;
    }
    for (size_t i = 0; i < n; i++) {
        PyObject *r = PyTuple_GET_ITEM(keep, (Py_ssize_t)i);
        if (!PyBytes_Check(r)) {
            PyErr_Format(PyExc_TypeError, "records[%zu]: must be bytes from provider_encode "
                         "(got %.100s)", i, Py_TYPE(r)->tp_name);
            goto error;
        }
        recs[i].p = PyBytes_AS_STRING(r);
        recs[i].len = (size_t)PyBytes_GET_SIZE(r);
    }
    Py_BEGIN_ALLOW_THREADS
    rc = pv_scan(recs, n, spec, nslots, dbl, tot, msg, sizeof msg);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, msg);
        goto error;
    }
    if (!(result = PyList_New(ns))) goto error;
    const size_t elt = dbl ? sizeof(double) : sizeof(float);
    for (size_t k = 0; k < nslots; k++) {
        const pv_slot *s = &spec[k];
        pv_out *o = &outs[k];
        PyObject *data = NULL, *indptr = Py_None, *indices = Py_None;
        PyObject *starts = Py_None, *subs = Py_None;
        char *p;
        const size_t steps = (size_t)tot[k].steps, nnz = (size_t)tot[k].nnz;
        if (s->kind == PV_DENSE)
            data = steps > SIZE_MAX / elt / (size_t)s->dim
                       ? PyErr_NoMemory() : pv_bytearray(steps * (size_t)s->dim * elt, &o->data);
        else if (s->kind == PV_INTEGER)
            data = pv_bytearray(steps * 8, &o->data);
        else
            data = pv_bytearray(nnz * elt, &o->data);
        if (!data) goto error;
        arrays = PyTuple_New(6);
        if (!arrays) {
            Py_DECREF(data);
            goto error;
        }
        PyTuple_SET_ITEM(arrays, 0, PyLong_FromSize_t(steps));
        PyTuple_SET_ITEM(arrays, 1, data);
        if (!PyTuple_GET_ITEM(arrays, 0)) goto error;
        if (s->kind == PV_SPARSE || s->kind == PV_SPARSE_BINARY) {
            if (!(indptr = pv_bytearray((steps + 1) * 8, &p))) goto error;
            o->indptr = (int64_t *)(void *)p;
            PyTuple_SET_ITEM(arrays, 2, indptr);
            if (!(indices = pv_bytearray(nnz * 4, &p))) goto error;
            o->indices = (int32_t *)(void *)p;
            PyTuple_SET_ITEM(arrays, 3, indices);
        }
        if (s->seq != PV_NO_SEQ) {
            if (!(starts = pv_bytearray((n + 1) * 8, &p))) goto error;
            o->seq_starts = (int64_t *)(void *)p;
            PyTuple_SET_ITEM(arrays, 4, starts);
        }
        if (s->seq == PV_SUB_SEQ) {
            if (!(subs = pv_bytearray(((size_t)tot[k].subs + 1) * 8, &p))) goto error;
            o->sub_starts = (int64_t *)(void *)p;
            PyTuple_SET_ITEM(arrays, 5, subs);
        }
        for (int j = 2; j < 6; j++)
            if (!PyTuple_GET_ITEM(arrays, j)) PyTuple_SET_ITEM(arrays, j, Py_NewRef(Py_None));
        PyList_SET_ITEM(result, (Py_ssize_t)k, arrays);
        arrays = NULL;
    }
    /* Only this function holds the new bytearrays and the tuple of records: nothing can resize
     * or free them while the copy runs unlocked. */
    Py_BEGIN_ALLOW_THREADS
    pv_fill(recs, n, spec, nslots, dbl, outs);
    Py_END_ALLOW_THREADS
    goto done;
error:
    Py_CLEAR(result);
done:
    Py_XDECREF(arrays);
    Py_XDECREF(keep);
    PyMem_Free(recs);
    PyMem_Free(tot);
    PyMem_Free(outs);
    return result;
}
