/*
 * _config.c -- Reader() arguments (path or corpus, streams, joins, a mix, keyword options) to a
 * ctf_config, and a ctf_config back to Reader keyword arguments (what bsconfig_load returns).
 *
 * The reader parameters come from the table (lib/config/params.def): a row's field is its
 * Reader keyword, checked here by the table's rules; reader_params() hands the table to Python
 * (tools/gen_stub.py writes the stub's keywords from it).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_config.h"
#include "_pyutil.h"

#include <string.h>

/* Converts an integer-like object to [0, max], naming the parameter in the message. */
int ctf_py_to_u64(PyObject *obj, const char *name, uint64_t max, uint64_t *out)
{
    PyObject *v = PyNumber_Index(obj);
    if (!v) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: must be an int (got %.100s)", name,
                         Py_TYPE(obj)->tp_name);
        }
        return -1;
    }
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if ((x == (unsigned long long)-1 && PyErr_Occurred()) || x > max) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s: must be an integer between 0 and %llu (got %R)", name,
                     (unsigned long long)max, obj);
        return -1;
    }
    *out = x;
    return 0;
}

static void path_list_clear(path_list *pl)
{
    Py_CLEAR(pl->keep);
    PyMem_Free(pl->v);
    pl->v = NULL;
    pl->n = 0;
}

void ctf_py_reader_args_clear(ctf_py_reader_args *ra)
{
    Py_CLEAR(ra->path);
    Py_CLEAR(ra->keep);
    Py_CLEAR(ra->names);
    Py_CLEAR(ra->remote_keep);
    Py_CLEAR(ra->chunk_cache);
    Py_CLEAR(ra->bad_records);
    PyMem_Free(ra->defs);
    ra->defs = NULL;
    path_list_clear(&ra->paths);
    for (size_t j = 0; ra->jargs && j < ra->num_joins; j++) ctf_py_reader_args_clear(&ra->jargs[j]);
    PyMem_Free(ra->jargs);
    PyMem_Free(ra->joins);
    ra->jargs = NULL;
    ra->joins = NULL;
    ra->num_joins = 0;
    for (size_t p = 0; ra->margs && p < ra->num_mix; p++) ctf_py_reader_args_clear(&ra->margs[p]);
    PyMem_Free(ra->margs);
    PyMem_Free(ra->mix);
    ra->margs = NULL;
    ra->mix = NULL;
    ra->num_mix = 0;
}

/* A str, bytes or os.PathLike is one path; any other sequence a list of them (a corpus; the
 * library expands glob patterns in either). */
static int parse_paths(PyObject *obj, const char *what, path_list *pl)
{
    PyObject *seq = NULL;
    int status = -1;
    pl->list = !(PyUnicode_Check(obj) || PyBytes_Check(obj) ||
                 PyObject_HasAttrString(obj, "__fspath__"));
    if (!pl->list) {
        seq = PyTuple_Pack(1, obj);
    } else {
        seq = PySequence_Tuple(obj);
        if (!seq) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: must be a path or a list of paths (got %.100s)",
                         what, Py_TYPE(obj)->tp_name);
            return -1;
        }
    }
    if (!seq) return -1;
    const Py_ssize_t n = PyTuple_GET_SIZE(seq);
    if (n == 0) {
        PyErr_Format(PyExc_ValueError, "%s: the list of files is empty", what);
        goto error;
    }
    if (!(pl->keep = PyList_New(0))) goto error;
    if (!(pl->v = PyMem_Calloc((size_t)n, sizeof *pl->v))) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = NULL;
        if (!PyUnicode_FSConverter(PyTuple_GET_ITEM(seq, i), &b)) goto error;
        int rc = PyList_Append(pl->keep, b);
        Py_DECREF(b); /* the list holds it */
        if (rc) goto error;
        pl->v[pl->n++] = PyBytes_AS_STRING(b);
    }
    status = 0;
error:
    Py_XDECREF(seq);
    return status;
}

static int parse_streams(PyObject *streams, ctf_config *cfg, ctf_py_reader_args *ra);

/* remote: a dict of the remote options (endpoint, region, access_key_id, secret_access_key,
 * session_token, cache_dir: str or None; max_retries, timeout_ms, connect_timeout_ms,
 * backoff_ms: int). The Python layer fills it from storage_options and the environment. */
int ctf_py_parse_remote(PyObject *d, ctf_config *cfg, ctf_py_reader_args *ra)
{
    if (!PyDict_Check(d)) {
        PyErr_Format(PyExc_TypeError, "remote: must be a dict (got %.100s)", Py_TYPE(d)->tp_name);
        return -1;
    }
    ctf_remote_options *o = &cfg->remote;
    const struct {
        const char *name;
        const char **str;
        unsigned *num;
    } fields[] = {
        {"endpoint", &o->endpoint, NULL},
        {"region", &o->region, NULL},
        {"access_key_id", &o->access_key_id, NULL},
        {"secret_access_key", &o->secret_access_key, NULL},
        {"session_token", &o->session_token, NULL},
        {"cache_dir", &o->cache_dir, NULL},
        {"max_retries", NULL, &o->max_retries},
        {"timeout_ms", NULL, &o->timeout_ms},
        {"connect_timeout_ms", NULL, &o->connect_timeout_ms},
        {"backoff_ms", NULL, &o->backoff_ms},
    };
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &key, &val)) {
        const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        size_t i = 0;
        while (k && i < sizeof fields / sizeof fields[0] && strcmp(fields[i].name, k)) i++;
        if (!k || i == sizeof fields / sizeof fields[0]) {
            PyErr_Format(PyExc_TypeError, "remote: unknown option %R", key);
            return -1;
        }
        if (val == Py_None) continue;
        if (fields[i].num) {
            uint64_t v;
            char what[64];
            snprintf(what, sizeof what, "remote.%s", k);
            if (ctf_py_to_u64(val, what, UINT32_MAX, &v) < 0) return -1;
            *fields[i].num = (unsigned)v;
            continue;
        }
        PyObject *b = NULL;
        if (!PyUnicode_FSConverter(val, &b)) return -1;
        if (!ra->remote_keep && !(ra->remote_keep = PyList_New(0))) {
            Py_DECREF(b);
            return -1;
        }
        int rc = PyList_Append(ra->remote_keep, b);
        Py_DECREF(b); /* the list holds it */
        if (rc) return -1;
        *fields[i].str = PyBytes_AS_STRING(b);
    }
    return 0;
}

/* joins: a sequence of (paths, streams, skip_sequence_ids) for the deserializers joined by key
 * to the primary one (ctf_join_def). */
static int parse_joins(PyObject *joins, ctf_config *cfg, ctf_py_reader_args *ra)
{
    PyObject *seq = PySequence_Fast(joins, "joins: must be a sequence of (paths, streams, "
                                           "skip_sequence_ids) tuples");
    if (!seq) return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int status = -1;
    ra->jargs = PyMem_Calloc((size_t)(n ? n : 1), sizeof *ra->jargs);
    ra->joins = PyMem_Calloc((size_t)(n ? n : 1), sizeof *ra->joins);
    if (!ra->jargs || !ra->joins) {
        PyErr_NoMemory();
        goto error;
    }
    ra->num_joins = (size_t)n;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, j);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_Format(PyExc_TypeError,
                         "joins[%zd]: must be a (paths, streams, "
                         "skip_sequence_ids) tuple (got %R)",
                         j, item);
            goto error;
        }
        ctf_py_reader_args *ja = &ra->jargs[j];
        ctf_config jc;
        ctf_config_init(&jc);
        if (parse_paths(PyTuple_GET_ITEM(item, 0), "joins[].paths", &ja->paths) < 0 ||
            parse_streams(PyTuple_GET_ITEM(item, 1), &jc, ja) < 0)
            goto error;
        int skip = PyObject_IsTrue(PyTuple_GET_ITEM(item, 2));
        if (skip < 0) goto error;
        ra->joins[j] = (ctf_join_def){.paths = ja->paths.v,
                                      .num_paths = ja->paths.n,
                                      .streams = jc.streams,
                                      .num_streams = jc.num_streams,
                                      .skip_sequence_ids = skip};
        /* Every stream's name, the primary's first, for stats(). */
        PyObject *all = PySequence_Concat(ra->names, ja->names);
        if (!all) goto error;
        Py_SETREF(ra->names, all);
    }
    cfg->joins = ra->joins;
    cfg->num_joins = ra->num_joins;
    status = 0;
error:
    Py_DECREF(seq);
    return status;
}

/* mix: a sequence of (paths, streams, joins, skip_sequence_ids, weight), one per part
 * (ctf_mix_part); streams None: the mix's streams; joins None: none. */
static int parse_mix(PyObject *mix, ctf_config *cfg, ctf_py_reader_args *ra)
{
    PyObject *seq = PySequence_Fast(mix, "mix: must be a sequence of (paths, streams, joins, "
                                         "skip_sequence_ids, weight) tuples");
    if (!seq) return -1;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    int status = -1;
    ra->margs = PyMem_Calloc((size_t)(n ? n : 1), sizeof *ra->margs);
    ra->mix = PyMem_Calloc((size_t)(n ? n : 1), sizeof *ra->mix);
    if (!ra->margs || !ra->mix) {
        PyErr_NoMemory();
        goto error;
    }
    ra->num_mix = (size_t)n;
    for (Py_ssize_t p = 0; p < n; p++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, p);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 5) {
            PyErr_Format(PyExc_TypeError,
                         "mix[%zd]: must be a (paths, streams, joins, "
                         "skip_sequence_ids, weight) tuple (got %R)",
                         p, item);
            goto error;
        }
        ctf_py_reader_args *ma = &ra->margs[p];
        ctf_config pc;
        ctf_config_init(&pc);
        pc.streams = NULL;
        pc.num_streams = 0;
        PyObject *streams = PyTuple_GET_ITEM(item, 1), *joins = PyTuple_GET_ITEM(item, 2);
        if (parse_paths(PyTuple_GET_ITEM(item, 0), "mix[].paths", &ma->paths) < 0) goto error;
        if (streams != Py_None && parse_streams(streams, &pc, ma) < 0) goto error;
        if (joins != Py_None) {
            if (streams == Py_None) {
                PyErr_Format(PyExc_TypeError,
                             "mix[%zd]: a part with joins names its primary's "
                             "streams (got None)",
                             p);
                goto error;
            }
            if (parse_joins(joins, &pc, ma) < 0) goto error;
        }
        int skip = PyObject_IsTrue(PyTuple_GET_ITEM(item, 3));
        if (skip < 0) goto error;
        double w = PyFloat_AsDouble(PyTuple_GET_ITEM(item, 4));
        if (w == -1.0 && PyErr_Occurred()) goto error;
        ra->mix[p] = (ctf_mix_part){.paths = ma->paths.v,
                                    .num_paths = ma->paths.n,
                                    .streams = pc.streams,
                                    .num_streams = pc.num_streams,
                                    .joins = pc.joins,
                                    .num_joins = pc.num_joins,
                                    .skip_sequence_ids = skip,
                                    .weight = w};
    }
    cfg->mix = ra->mix;
    cfg->num_mix = ra->num_mix;
    status = 0;
error:
    Py_DECREF(seq);
    return status;
}

/* Fills cfg->streams from a sequence of (name, alias, dim, is_sparse, defines_mb_size). */
static int parse_streams(PyObject *streams, ctf_config *cfg, ctf_py_reader_args *ra)
{
    PyObject *seq = NULL;
    char name[64];
    int status = -1;
    if (PyUnicode_Check(streams) || PyBytes_Check(streams)) {
        PyErr_SetString(PyExc_TypeError, "streams: must be a sequence of (name, alias, dim, "
                                         "is_sparse, defines_mb_size) tuples (got a string)");
        goto error;
    }
    seq = PySequence_Fast(streams, "streams: must be a sequence of (name, alias, dim, "
                                   "is_sparse, defines_mb_size) tuples");
    if (!seq) goto error;
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    ra->keep = PyTuple_New(n);
    ra->names = PyTuple_New(n);
    if (!ra->keep || !ra->names) goto error;
    ra->defs = PyMem_Calloc((size_t)(n ? n : 1), sizeof *ra->defs);
    if (!ra->defs) {
        PyErr_NoMemory();
        goto error;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *t = PyTuple_Check(item) || PyList_Check(item) ? PySequence_Tuple(item) : NULL;
        if (!t || PyTuple_GET_SIZE(t) != 5) {
            Py_XDECREF(t);
            PyErr_Format(PyExc_TypeError,
                         "streams[%zd]: must be a (name, alias, dim, "
                         "is_sparse, defines_mb_size) tuple (got %R)",
                         i, item);
            goto error;
        }
        PyTuple_SET_ITEM(ra->keep, i, t); /* steals: the strings below live as long as keep */
        PyObject *nm = PyTuple_GET_ITEM(t, 0), *alias = PyTuple_GET_ITEM(t, 1);
        if (!PyUnicode_Check(nm) || !(alias == Py_None || PyUnicode_Check(alias))) {
            PyErr_Format(PyExc_TypeError,
                         "streams[%zd]: name must be a str and alias a str or "
                         "None (got %R)",
                         i, t);
            goto error;
        }
        ctf_stream_def *d = &ra->defs[i];
        if (!(d->name = PyUnicode_AsUTF8(nm))) goto error;
        if (alias != Py_None && !(d->alias = PyUnicode_AsUTF8(alias))) goto error;
        Py_INCREF(nm);
        PyTuple_SET_ITEM(ra->names, i, nm);
        uint64_t dim;
        snprintf(name, sizeof name, "streams[%zd].dim", i);
        if (ctf_py_to_u64(PyTuple_GET_ITEM(t, 2), name, SIZE_MAX, &dim) < 0) goto error;
        d->dim = (size_t)dim;
        int sparse = PyObject_IsTrue(PyTuple_GET_ITEM(t, 3));
        int mbs = PyObject_IsTrue(PyTuple_GET_ITEM(t, 4));
        if (sparse < 0 || mbs < 0) goto error;
        d->is_sparse = sparse;
        d->defines_mb_size = mbs;
    }
    cfg->streams = ra->defs;
    cfg->num_streams = (size_t)n;
    status = 0;
error:
    Py_XDECREF(seq);
    return status;
}

/* The table row whose field is key (a Reader keyword), or NULL. */
static const ctf_param *param_of(PyObject *key)
{
    const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
    if (!k) {
        PyErr_Clear();
        return NULL;
    }
    for (size_t i = 0; i < ctf_param_count(); i++)
        if (!strcmp(ctf_param_at(i)->field, k)) return ctf_param_at(i);
    return NULL;
}

/* One table parameter from a Python value: TypeError for the wrong type (a bool where an int is
 * wanted included), ValueError, with the table's words, for a value out of range. */
static int param_from_py(ctf_config *cfg, const ctf_param *p, PyObject *v)
{
    ctf_error err;
    const char *name = p->field;
    if (p->kind == CTF_PARAM_BOOL) {
        int t = PyObject_IsTrue(v);
        if (t < 0) return -1;
        return ctf_param_set(cfg, p, name, (uint64_t)t, &err) ? -1 : 0;
    }
    if (p->kind == CTF_PARAM_PRECISION) {
        const char *text = PyUnicode_Check(v) ? PyUnicode_AsUTF8(v) : NULL;
        if (!text) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s: must be a str (got %.100s)", name,
                             Py_TYPE(v)->tp_name);
            return -1;
        }
        if (ctf_param_parse(cfg, p, name, text, &err)) {
            PyErr_SetString(PyExc_ValueError, err.message);
            return -1;
        }
        return 0;
    }
    if (PyBool_Check(v) || !PyIndex_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s: must be an int (got %.100s)", name, Py_TYPE(v)->tp_name);
        return -1;
    }
    PyObject *i = PyNumber_Index(v);
    if (!i) return -1;
    int overflow = 0;
    unsigned long long x = PyLong_AsUnsignedLongLong(i);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        overflow = 1;
    }
    int rc;
    if (overflow) {
        /* Negative or beyond 64 bits: the text gives the table's message for it. */
        PyObject *text = PyObject_Str(i);
        const char *t = text ? PyUnicode_AsUTF8(text) : NULL;
        rc = t ? ctf_param_parse(cfg, p, name, t, &err) : -1;
        Py_XDECREF(text);
        if (!t) {
            Py_DECREF(i);
            return -1;
        }
    } else {
        rc = ctf_param_set(cfg, p, name, x, &err);
    }
    Py_DECREF(i);
    if (rc) {
        PyErr_SetString(PyExc_ValueError, err.message);
        return -1;
    }
    return 0;
}

/* Parses Reader(path, streams, **options) into cfg (which ctf_config_init filled). The reader
 * parameters are the table's (lib/config/params.def), by field name; None leaves the default. */
int ctf_py_reader_args_parse(PyObject *args, PyObject *kwargs, ctf_config *cfg,
                             ctf_py_reader_args *ra)
{
    static char *kwlist[] = {"path",   "streams",     "log",         "joins", "mix",
                             "remote", "chunk_cache", "bad_records", NULL};
    PyObject *path, *streams, *log = Py_None, *joins = NULL, *mix = NULL, *remote = NULL;
    PyObject *chunk_cache = Py_None, *bad_records = Py_None;
    PyObject *rest = PyDict_New(), *key, *val;
    Py_ssize_t pos = 0;
    int status = -1;
    if (!rest) return -1;
    /* The table's keywords are set below; the rest are the structure of the data set. */
    while (kwargs && PyDict_Next(kwargs, &pos, &key, &val))
        if (!param_of(key) && PyDict_SetItem(rest, key, val) < 0) goto done;
    if (!PyArg_ParseTupleAndKeywords(args, rest, "OO|$OOOOOO:Reader", kwlist, &path, &streams, &log,
                                     &joins, &mix, &remote, &chunk_cache, &bad_records))
        goto done;
    if (bad_records != Py_None) {
        /* A str or a path-like object, as chunk_cache. */
        Py_CLEAR(ra->bad_records);
        if (!PyUnicode_FSConverter(bad_records, &ra->bad_records)) goto done;
        cfg->bad_records = PyBytes_AS_STRING(ra->bad_records);
        if (!cfg->bad_records[0] ||
            strlen(cfg->bad_records) != (size_t)PyBytes_GET_SIZE(ra->bad_records)) {
            PyErr_SetString(PyExc_ValueError, "bad_records: must be a file path");
            goto done;
        }
    }
    if (chunk_cache != Py_None) {
        /* A str or a path-like object; kept as bytes for as long as the configuration. */
        Py_CLEAR(ra->chunk_cache);
        if (!PyUnicode_FSConverter(chunk_cache, &ra->chunk_cache)) goto done;
        cfg->chunk_cache = PyBytes_AS_STRING(ra->chunk_cache);
        if (!cfg->chunk_cache[0] ||
            strlen(cfg->chunk_cache) != (size_t)PyBytes_GET_SIZE(ra->chunk_cache)) {
            PyErr_SetString(PyExc_ValueError, "chunk_cache: must be a directory path");
            goto done;
        }
    }
    if (remote && remote != Py_None && ctf_py_parse_remote(remote, cfg, ra) < 0) goto done;
    if (mix && mix != Py_None) {
        /* A mix reads its parts' files: path is None. */
        if (path != Py_None) {
            PyErr_SetString(PyExc_TypeError, "path: must be None for a mix (the parts name "
                                             "their files)");
            goto done;
        }
        if (parse_streams(streams, cfg, ra) < 0 || parse_mix(mix, cfg, ra) < 0) goto done;
    } else {
        /* path: one file, or a list of files and patterns read as one corpus. */
        if (parse_paths(path, "path", &ra->paths) < 0) goto done;
        ra->path = Py_NewRef(PyList_GET_ITEM(ra->paths.keep, 0));
        cfg->path = PyBytes_AS_STRING(ra->path);
        /* A pattern is a corpus even when given alone (as on the command line). */
        if (ra->paths.list || strpbrk(cfg->path, "*?[")) {
            cfg->paths = ra->paths.v;
            cfg->num_paths = ra->paths.n;
        }
        if (parse_streams(streams, cfg, ra) < 0) goto done;
        if (joins && joins != Py_None && parse_joins(joins, cfg, ra) < 0) goto done;
    }
    pos = 0;
    while (kwargs && PyDict_Next(kwargs, &pos, &key, &val)) {
        const ctf_param *p = param_of(key);
        if (p && val != Py_None && param_from_py(cfg, p, val) < 0) goto done;
    }
    if (log != Py_None && !PyCallable_Check(log)) {
        PyErr_Format(PyExc_TypeError, "log: must be callable or None (got %.100s)",
                     Py_TYPE(log)->tp_name);
        goto done;
    }
    ra->log = log == Py_None ? NULL : log;
    status = 0;
done:
    Py_DECREF(rest);
    return status;
}

/* A configuration as Reader keyword arguments plus "path" and "streams". */
/* [(name, alias, dim, is_sparse, defines_mb_size), ...] */
static PyObject *streams_list(const ctf_stream_def *defs, size_t n)
{
    PyObject *streams = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; streams && i < n; i++) {
        const ctf_stream_def *s = &defs[i];
        PyObject *alias = s->alias && s->alias[0] ? text_obj(s->alias) : Py_NewRef(Py_None);
        PyObject *t = Py_BuildValue("(NNNNN)", text_obj(s->name), alias, PyLong_FromSize_t(s->dim),
                                    PyBool_FromLong(s->is_sparse),
                                    PyBool_FromLong(s->defines_mb_size));
        if (!t)
            Py_CLEAR(streams);
        else
            PyList_SET_ITEM(streams, (Py_ssize_t)i, t);
    }
    return streams;
}

static PyObject *paths_list(const char *const *paths, size_t n)
{
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *p = opt_path(paths[i]);
        if (!p)
            Py_CLEAR(l);
        else
            PyList_SET_ITEM(l, (Py_ssize_t)i, p);
    }
    return l;
}

/* The joined deserializers: [(paths, streams, skip_sequence_ids, origin), ...] */
static PyObject *joins_list(const ctf_config *c)
{
    PyObject *l = PyList_New((Py_ssize_t)c->num_joins);
    for (size_t i = 0; l && i < c->num_joins; i++) {
        const ctf_join_def *j = &c->joins[i];
        PyObject *t = Py_BuildValue("(NNNN)", paths_list(j->paths, j->num_paths),
                                    streams_list(j->streams, j->num_streams),
                                    PyBool_FromLong(j->skip_sequence_ids),
                                    j->origin ? text_obj(j->origin) : Py_NewRef(Py_None));
        if (!t)
            Py_CLEAR(l);
        else
            PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    return l;
}

/* A mix's parts: [(paths, streams or None, skip_sequence_ids, weight), ...] */
static PyObject *mix_list(const ctf_config *c)
{
    PyObject *l = PyList_New((Py_ssize_t)c->num_mix);
    for (size_t i = 0; l && i < c->num_mix; i++) {
        const ctf_mix_part *m = &c->mix[i];
        PyObject *t = Py_BuildValue("(NNNd)", paths_list(m->paths, m->num_paths),
                                    m->streams ? streams_list(m->streams, m->num_streams)
                                               : Py_NewRef(Py_None),
                                    PyBool_FromLong(m->skip_sequence_ids), m->weight);
        if (!t)
            Py_CLEAR(l);
        else
            PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    return l;
}

PyObject *ctf_py_config_dict(const ctf_config *c)
{
    PyObject *d = PyDict_New(), *streams = NULL;
    if (!d) goto error;
    if (!(streams = streams_list(c->streams, c->num_streams))) goto error;
    int rc = dict_put(d, "path", opt_path(c->path));
    rc = rc ? rc : PyDict_SetItemString(d, "streams", streams);
    /* Only present when used, so that the dict stays Reader keyword arguments otherwise. */
    if (c->num_paths) rc = rc ? rc : dict_put(d, "paths", paths_list(c->paths, c->num_paths));
    if (c->num_joins) rc = rc ? rc : dict_put(d, "joins", joins_list(c));
    if (c->num_mix) rc = rc ? rc : dict_put(d, "mix", mix_list(c));
#define PUT(key, value) rc = rc ? rc : dict_put(d, key, value)
    for (size_t i = 0; i < ctf_param_count(); i++) {
        const ctf_param *p = ctf_param_at(i);
        const uint64_t v = ctf_param_get(c, p);
        PyObject *o;
        if (p->kind == CTF_PARAM_BOOL)
            o = PyBool_FromLong(v != 0);
        else if (p->kind == CTF_PARAM_PRECISION)
            o = PyUnicode_FromString(v == CTF_FLOAT64 ? "double" : "float");
        /* A default worked out when the reader opens, encoded as the top of the range
         * (CTF_PREFETCH_AUTO), is None: the keyword left out. */
        else if (p->def_text && p->def == p->max && v == p->def)
            o = Py_NewRef(Py_None);
        else
            o = PyLong_FromUnsignedLongLong(v);
        PUT(p->field, o);
    }
    PUT("log", Py_NewRef(Py_None));
    if (c->chunk_cache) PUT("chunk_cache", PyUnicode_DecodeFSDefault(c->chunk_cache));
    if (c->bad_records) PUT("bad_records", PyUnicode_DecodeFSDefault(c->bad_records));
#undef PUT
    if (rc) goto error;
    Py_DECREF(streams);
    return d;
error:
    Py_XDECREF(streams);
    Py_XDECREF(d);
    return NULL;
}

/*======================================================================
 * The table and the worker rule, for the Python layer
 *====================================================================*/

PyObject *ctf_py_reader_params(PyObject *module, PyObject *unused)
{
    static const char *const kinds[] = {"bool", "uint", "limit", "precision"};
    (void)module;
    (void)unused;
    PyObject *t = PyTuple_New((Py_ssize_t)ctf_param_count());
    for (size_t i = 0; t && i < ctf_param_count(); i++) {
        const ctf_param *p = ctf_param_at(i);
        PyObject *d = Py_BuildValue(
            "{sssOsOsOsssOsOsKsOsKsKss}", "field", p->field, "bs_key",
            p->bs_key ? PyUnicode_FromString(p->bs_key) : Py_NewRef(Py_None), "cli_flag",
            p->cli_flag ? PyUnicode_FromString(p->cli_flag) : Py_NewRef(Py_None), "py_keyword",
            p->py_keyword ? PyUnicode_FromString(p->py_keyword) : Py_NewRef(Py_None), "kind",
            kinds[p->kind], "cli_switch", PyBool_FromLong(p->cli_switch), "fingerprint",
            PyBool_FromLong(p->fingerprint), "default", (unsigned long long)p->def, "default_text",
            p->def_text ? PyUnicode_FromString(p->def_text) : Py_NewRef(Py_None), "min",
            (unsigned long long)p->min, "max", (unsigned long long)p->max, "help", p->help);
        if (!d)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, (Py_ssize_t)i, d);
    }
    return t;
}

PyObject *ctf_py_check_workers(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    static const char *const names[2] = {"number_of_workers", "worker_rank"};
    uint64_t v[2];
    ctf_error err;
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "check_workers(number_of_workers, worker_rank)");
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        if (PyBool_Check(args[i]) || !PyIndex_Check(args[i])) {
            PyErr_Format(PyExc_TypeError, "%s: must be an int (got %.100s)", names[i],
                         Py_TYPE(args[i])->tp_name);
            return NULL;
        }
        PyObject *n = PyNumber_Index(args[i]);
        if (!n) return NULL;
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(n, &overflow);
        Py_DECREF(n);
        if (x == -1 && !overflow && PyErr_Occurred()) return NULL;
        if (overflow < 0 || (!overflow && x < 0)) {
            PyErr_Format(PyExc_ValueError, "%s: must be a non-negative integer (got %R)", names[i],
                         args[i]);
            return NULL;
        }
        v[i] = overflow ? UINT64_MAX : (uint64_t)x;
    }
    if (ctf_workers_check(v[0] > SIZE_MAX ? SIZE_MAX : (size_t)v[0],
                          v[1] > SIZE_MAX ? SIZE_MAX : (size_t)v[1], &err)) {
        PyErr_SetString(PyExc_ValueError, err.message);
        return NULL;
    }
    Py_RETURN_NONE;
}

PyObject *ctf_py_reader_config(PyObject *module, PyObject *args, PyObject *kwargs)
{
    ctf_py_reader_args ra = {0};
    ctf_config cfg;
    ctf_error err;
    (void)module;
    ctf_config_init(&cfg);
    PyObject *d = NULL;
    if (ctf_py_reader_args_parse(args, kwargs, &cfg, &ra) == 0) {
        if (ctf_config_validate(&cfg, &err))
            PyErr_SetString(PyExc_ValueError, err.message);
        else
            d = ctf_py_config_dict(&cfg);
    }
    ctf_py_reader_args_clear(&ra);
    return d;
}
