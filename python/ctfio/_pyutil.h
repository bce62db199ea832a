/*
 * _pyutil.h -- small conversions the extension's files share (_ctfio.c, _config.c, _stats.c).
 */
#ifndef CTFIO_PYUTIL_H
#define CTFIO_PYUTIL_H

#include <Python.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *ctf_py_newref(PyObject *obj) /* Python 3.9 has no Py_NewRef */
{
    Py_INCREF(obj);
    return obj;
}
#define Py_NewRef(obj) ctf_py_newref((PyObject *)(obj))
#endif

/* Library messages may quote bytes of the data file, which need not be UTF-8. */
static inline PyObject *text_obj(const char *s)
{
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

/* A path, or None for none. */
static inline PyObject *opt_path(const char *p)
{
    if (!p || !p[0]) Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(p);
}

/* Sets d[key] = value and releases value. @return : 0, or -1 (also when value is NULL). */
static inline int dict_put(PyObject *d, const char *key, PyObject *value)
{
    if (!value) return -1;
    int rc = PyDict_SetItemString(d, key, value);
    Py_DECREF(value);
    return rc;
}

#endif
