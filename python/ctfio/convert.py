"""``ctfio.convert``: other formats into CTF, the Python side of ``ctfio convert``.

    r = ctfio.convert("train.svm", "train.ctf")                      # LibSVM / svmlight (C)
    r = ctfio.convert("train.csv", "train.ctf", label="y", header=True)   # CSV (C)
    r = ctfio.convert(X, "train.ctf", labels=y)                      # NumPy / SciPy sparse
    r = ctfio.convert("train.npz", "train.ctf")                      # .npy / .npz files
    r = ctfio.convert("train.parquet", "train.ctf", label="y")       # Parquet (pyarrow)
    src = ctfio.MinibatchSource(ctfio.CTFDeserializer("train.ctf", r.stream_defs()))

The text formats run in C (lib/convert/convert.c, the code behind the command); arrays go through
``write_ctf`` a block of rows at a time. Every conversion writes a ``features`` and a ``labels``
stream (arrays: ``labels`` only when given), prints the reader configuration that reads the
result (BrainScript and Python; ``show_config=False`` keeps quiet) and returns a
``ConvertResult``. Values read back exactly: text and float64 arrays as float64
(``precision="double"``), float32 arrays as float32. See docs/convert.md.
"""

import contextlib
import os
import signal
import sys
import threading

from . import _check

__all__ = ["convert", "ConvertResult"]

_TEXT_FORMATS = {".svm": "libsvm", ".libsvm": "libsvm", ".svmlight": "libsvm",
                 ".csv": "csv", ".tsv": "csv"}
_ARRAY_FORMATS = {".npy": "numpy", ".npz": "numpy", ".parquet": "parquet", ".pq": "parquet"}
_BLOCK_ROWS = 1 << 14


class ConvertResult:
    """What a conversion wrote: ``path``, ``rows``, ``sequences``, ``features_dim``,
    ``labels_dim`` (0: no labels), ``features_sparse``, ``labels_sparse``, ``sequence_ids``
    (True when the file has ids, LibSVM's qid), ``precision`` to read it with, and ``config``
    (the reader configuration text that was printed)."""

    def __init__(self, path, info, precision):
        self.path = os.fspath(path)
        self.rows = info["rows"]
        self.sequences = info["sequences"]
        self.features_dim = info["features_dim"]
        self.labels_dim = info["labels_dim"]
        self.features_sparse = info["features_sparse"]
        self.labels_sparse = info["labels_sparse"]
        self.sequence_ids = info["sequence_ids"]
        self.features_name = info.get("features_name", "features")
        self.labels_name = info.get("labels_name", "labels")
        self.precision = precision
        self.config = info["config"]

    def stream_defs(self):
        """The ``StreamDefs`` that read the converted file."""
        from .source import StreamDef, StreamDefs
        defs = {self.features_name: StreamDef(field=self.features_name, shape=self.features_dim,
                                              is_sparse=self.features_sparse)}
        if self.labels_dim:
            defs[self.labels_name] = StreamDef(field=self.labels_name, shape=self.labels_dim,
                                               is_sparse=self.labels_sparse)
        return StreamDefs(**defs)

    def __repr__(self):
        return ("ConvertResult(%r, rows=%d, features=%s dim %d, labels=%s)"
                % (self.path, self.rows, "sparse" if self.features_sparse else "dense",
                   self.features_dim, "none" if not self.labels_dim else "%s dim %d" % (
                       "sparse" if self.labels_sparse else "dense", self.labels_dim)))


def _describe(path, fname, fdim, fsparse, lname, ldim, lsparse, precision):
    """The same text as cli_convert_describe (tools/describe.c), for the array formats."""
    q = '"%s"' % os.fspath(path).replace("\\", "\\\\").replace('"', '\\"')
    streams = [(fname, fdim, fsparse)] + ([(lname, ldim, lsparse)] if ldim else [])
    lines = ["# BrainScript reader section", "reader = ["]
    if precision == "double":
        lines.insert(1, 'precision = "double"')
    lines += ['    readerType = "CNTKTextFormatReader"', "    file = " + q, "    input = ["]
    lines += ['        %s = [ dim = %d ; format = "%s" ]' % (n, d, "sparse" if s else "dense")
              for n, d, s in streams]
    lines += ["    ]", "]", "", "# Python", "import ctfio",
              "source = ctfio.MinibatchSource(ctfio.CTFDeserializer(%s, ctfio.StreamDefs(" % q]
    defs = ['    %s=ctfio.StreamDef(field="%s", shape=%d%s)' % (n, n, d, ", is_sparse=True" if s
                                                               else "") for n, d, s in streams]
    lines += [",\n".join(defs) + ")" + (', precision="double"' if precision == "double" else "")
              + "))"]
    return "\n".join(lines) + "\n"


class _Progress:
    """progress=None: a tqdm bar when tqdm is installed and stderr is a terminal; True: a tqdm
    bar (tqdm decides on a non-terminal); False: nothing; a callable: called (done, total)."""

    def __init__(self, progress, what):
        self.fn = None
        self.bar = None
        if callable(progress):
            self.fn = progress
            return
        if progress is False:
            return
        if progress is None and not (hasattr(sys.stderr, "isatty") and sys.stderr.isatty()):
            return
        try:
            import tqdm
        except ImportError:
            return
        self.bar = tqdm.tqdm(total=None, unit="B", unit_scale=True, desc="converting " + what,
                             leave=False, disable=None if progress is None else False)
        self.fn = self._update

    def _update(self, done, total):
        if self.bar.total != total:
            self.bar.total = total
        self.bar.update(done - self.bar.n)

    def __call__(self, done, total):
        if self.fn is not None:
            self.fn(done, total)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def _label_spec(label):
    if label is None:
        raise ValueError("convert: CSV needs label= (column numbers or header names)")
    if isinstance(label, (str, int)):
        label = [label]
    return ",".join(str(c) for c in label)


def _convert_text(fmt, src, dst, dim, zero_based, classes, label, delimiter, header, fname,
                  lname, progress):
    from ._ctfio import convert_file
    kw = dict(features=fname, labels=lname)
    if fmt == "libsvm":
        if label is not None or header:
            raise ValueError("convert: label= and header= are for CSV")
        kw.update(dim=int(dim or 0), classes=int(classes or 0),
                  index_base=-1 if zero_based is None else (0 if zero_based else 1))
    else:
        if dim or classes or zero_based is not None:
            raise ValueError("convert: dim=, classes= and zero_based= are for LibSVM")
        kw.update(label_columns=_label_spec(label), delimiter=delimiter,
                  header=bool(header))
    bar = _Progress(progress, os.fspath(src))
    try:
        info = convert_file(src, dst, fmt, progress=bar if bar.fn else None, **kw)
    finally:
        bar.close()
    info["features_name"], info["labels_name"] = fname, lname
    return ConvertResult(dst, info, "double")


def _one_hot(y, classes):
    import numpy as np
    import scipy.sparse
    y = np.asarray(y)
    cls = y.astype(np.int64)
    bad = (cls != y) | (cls < 0) | (cls >= classes)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError("convert: label %r of row %d is not a class number in 0..%d"
                         % (y[i].item(), i, classes - 1))
    n = len(cls)
    return scipy.sparse.csr_matrix((np.ones(n), (np.arange(n), cls)), shape=(n, classes))


def _write_blocks(dst, blocks, fname, lname, precision, classes):
    """Writes (X, y) blocks through write_ctf, one file, line mode; returns the row count."""
    from .writer import _replace_atomically, write_ctf
    path = os.fspath(dst)
    rows = 0
    with _replace_atomically(path) as f:
        for X, y in blocks:
            streams = {fname: X}
            if y is not None:
                streams[lname] = _one_hot(y, classes) if classes else y
            rows += write_ctf(f, streams, sequence_ids=False, precision=precision)
    return rows


def _refuse_same_file(dst, *inputs):
    """An output that is one of the inputs (the same path, or the same file under another name)
    would destroy it: refused before anything is written."""
    try:
        out = os.stat(dst)
    except (OSError, TypeError, ValueError):
        out = None
    for src in inputs:
        if not isinstance(src, (str, bytes, os.PathLike)):
            continue
        same = os.fsdecode(os.fspath(src)) == os.fsdecode(os.fspath(dst))
        if not same and out is not None:
            try:
                st = os.stat(src)
                same = (st.st_dev, st.st_ino) == (out.st_dev, out.st_ino)
            except OSError:
                pass
        if same:
            raise ValueError("convert: the output %s is the input file %s: converting would "
                             "destroy it; name another output" % (os.fspath(dst), os.fspath(src)))


@contextlib.contextmanager
def _sigterm_cancels():
    """SIGTERM during a conversion cancels it like Ctrl-C: the temporary file is removed, then
    the process ends by SIGTERM as it would have. Only where SIGTERM has its default action and
    this is the main thread (the only place Python runs signal handlers); a program that
    handles SIGTERM itself keeps its handler."""
    installed = False
    if threading.current_thread() is threading.main_thread():
        try:
            installed = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        except (AttributeError, ValueError):
            installed = False
    if not installed:
        yield
        return
    got = []

    def on_term(signum, frame):
        got.append(signum)
        raise _Terminated()
    signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    except _Terminated:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if got:
        os.kill(os.getpid(), signal.SIGTERM)


class _Terminated(BaseException):
    """Raised by the SIGTERM handler of a conversion; never escapes ``convert``."""


def _is_sparse(x):
    return hasattr(x, "tocsr") and hasattr(x, "nnz")


def _precision(*arrays):
    import numpy as np
    kinds = [a.dtype for a in arrays if a is not None and hasattr(a, "dtype")]
    return "float" if kinds and all(k == np.float32 for k in kinds) else "double"


def _load_numpy(src, features, labels):
    """(X, y) from an array, a SciPy matrix, a .npy or a .npz path."""
    import numpy as np
    if not isinstance(src, (str, bytes, os.PathLike)):
        return src, labels
    path = os.fspath(src)
    if path.endswith(".npy"):
        X = np.load(path, mmap_mode="r")
        y = np.load(labels, mmap_mode="r") if isinstance(labels, (str, os.PathLike)) else labels
        return X, y
    with np.load(path, allow_pickle=False) as z:
        keys = set(z.files)
        if {"data", "indices", "indptr", "shape"} <= keys:   # scipy.sparse.save_npz
            import scipy.sparse
            return scipy.sparse.load_npz(path).tocsr(), labels
        fk = features or next((k for k in ("features", "X", "x") if k in keys), None)
        if fk is None or fk not in keys:
            raise ValueError("convert: %s has no features array (keys %s); give features=KEY"
                             % (path, sorted(keys)))
        lk = labels if isinstance(labels, str) else next(
            (k for k in ("labels", "y") if k in keys), None)
        if isinstance(labels, str) and labels not in keys:
            raise ValueError("convert: %s has no array %r (keys %s)" % (path, labels, sorted(keys)))
        y = z[lk] if lk is not None else (None if isinstance(labels, str) else labels)
        return z[fk], y


def _convert_numpy(src, dst, labels, features_key, classes, fname, lname, precision, progress):
    import numpy as np
    X, y = _load_numpy(src, features_key, labels)
    if _is_sparse(X):
        X = X.tocsr()
    else:
        X = np.asarray(X) if not isinstance(X, np.ndarray) else X
        if X.ndim == 1:
            X = X.reshape(-1, 1)
        if X.ndim != 2:
            raise ValueError("convert: features must be 2-D (rows, dim), got shape %s"
                             % (X.shape,))
    n = X.shape[0]
    if y is not None:
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1 and classes:
            y = y[:, 0]
        if y.shape[0] != n:
            raise ValueError("convert: %d labels for %d rows of features" % (y.shape[0], n))
    precision = precision or _precision(None if _is_sparse(X) else X, y)
    if _is_sparse(X):
        precision = precision if precision else "double"
    bar = _Progress(progress, "arrays")

    def blocks():
        for lo in range(0, n, _BLOCK_ROWS):
            hi = min(n, lo + _BLOCK_ROWS)
            yield X[lo:hi], (None if y is None else y[lo:hi])
            bar(hi, n)
    try:
        rows = _write_blocks(dst, blocks(), fname, lname, precision, classes)
    finally:
        bar.close()
    ldim = 0 if y is None else (classes or (1 if y.ndim == 1 else y.shape[1]))
    return _result(dst, rows, fname, X.shape[1], _is_sparse(X), lname, ldim, bool(classes),
                   precision)


def _result(dst, rows, fname, fdim, fsparse, lname, ldim, lsparse, precision):
    info = dict(rows=rows, sequences=rows, features_dim=fdim, labels_dim=ldim,
                features_sparse=fsparse, labels_sparse=lsparse, sequence_ids=False,
                features_name=fname, labels_name=lname,
                config=_describe(dst, fname, fdim, fsparse, lname, ldim, lsparse, precision))
    return ConvertResult(dst, info, precision)


def _convert_parquet(src, dst, label, classes, fname, lname, precision, progress):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError("convert: Parquet needs pyarrow (pip install pyarrow)") from None
    import numpy as np
    pf = pq.ParquetFile(os.fspath(src))
    names = pf.schema_arrow.names
    labels = [] if label is None else ([label] if isinstance(label, (str, int)) else list(label))
    labels = [names[c] if isinstance(c, int) else c for c in labels]
    for c in labels:
        if c not in names:
            raise ValueError("convert: label column %r is not in %s (columns %s)"
                             % (c, os.fspath(src), names))
    feats = [c for c in names if c not in labels]
    import pyarrow.types as pt
    for c in feats + labels:
        t = pf.schema_arrow.field(c).type
        if not (pt.is_integer(t) or pt.is_floating(t) or pt.is_boolean(t)):
            raise ValueError("convert: column %r of %s is %s, not numeric" % (c, os.fspath(src), t))
    if not feats:
        raise ValueError("convert: every column of %s is a label" % os.fspath(src))
    all32 = all(pt.is_float32(pf.schema_arrow.field(c).type) for c in feats + labels)
    precision = precision or ("float" if all32 else "double")
    total = pf.metadata.num_rows
    bar = _Progress(progress, os.fspath(src))

    def column(batch, c):
        col = batch.column(c)
        if col.null_count:
            raise ValueError("convert: column %r of %s has missing values" % (c, os.fspath(src)))
        return col.to_numpy(zero_copy_only=False)

    def blocks():
        done = 0
        for batch in pf.iter_batches(batch_size=_BLOCK_ROWS):
            X = np.column_stack([column(batch, c) for c in feats])
            y = None
            if labels:
                y = np.column_stack([column(batch, c) for c in labels])
                if len(labels) == 1:
                    y = y[:, 0]
            done += batch.num_rows
            yield X, y
            bar(done, total)
    try:
        rows = _write_blocks(dst, blocks(), fname, lname, precision, classes)
    finally:
        bar.close()
    ldim = 0 if not labels else (classes or len(labels))
    return _result(dst, rows, fname, len(feats), False, lname, ldim, bool(classes), precision)


def convert(src, dst, format=None, *, labels=None, label=None, dim=None, zero_based=None,
            classes=None, delimiter=None, header=False, features=None,
            features_name="features", labels_name="labels", precision=None, progress=None,
            show_config=True, streams=None, chunk_size=32 << 20, skip_sequence_ids=False):
    """Convert ``src`` into the CTF file ``dst``; returns a ``ConvertResult``.

    ``format``: ``"libsvm"``, ``"csv"``, ``"numpy"`` or ``"parquet"``; default from ``src``
    (an array or SciPy matrix: numpy; else the file's extension: .svm/.libsvm/.svmlight,
    .csv/.tsv, .npy/.npz, .parquet/.pq).

    - LibSVM (as ``ctfio convert libsvm``): ``dim`` (default: largest index + 1),
      ``zero_based`` (True/False; default: one-based unless an index 0 appears), ``classes``
      (labels one-hot sparse of that dim, else dense dim 1). qid becomes the sequence id.
    - CSV (as ``ctfio convert csv``): ``label`` (column numbers or header names), ``delimiter``
      (default ``","``, a tab for a .tsv file), ``header``.
    - NumPy: ``src`` is the features (2-D array or SciPy sparse matrix, or a .npy / .npz file;
      a .npz holds ``features``/``X`` and ``labels``/``y``, or is a ``scipy.sparse.save_npz``
      file), ``labels`` the labels (array, or for a .npz the key), ``features`` the .npz key of
      the features; ``classes`` one-hot encodes the labels.
    - Parquet: ``label`` the label column(s); the other (numeric) columns are the features.
    - CBF (as ``ctfio convert cbf``; ``src`` a CTF file, ``dst`` a .bin file): ``streams`` the
      CTF file's ``StreamDefs`` (as for ``CTFDeserializer``), ``chunk_size`` in bytes,
      ``precision`` the stored element type (default float), ``skip_sequence_ids``. Returns a
      dict: sequences, samples, nonzeros, chunks, bytes_written, path.

    ``progress``: None (a tqdm bar when tqdm is installed and stderr is a terminal), True,
    False, or a callable ``(done, total)``. ``show_config``: print the reader configuration.
    """
    if format is None:
        if not isinstance(src, (str, bytes, os.PathLike)):
            format = "numpy"
        else:
            ext = os.path.splitext(os.fsdecode(os.fspath(src)))[1].lower()
            format = _TEXT_FORMATS.get(ext) or _ARRAY_FORMATS.get(ext)
            if format is None:
                raise ValueError("convert: cannot tell the format of %r from its extension; "
                                 "give format='libsvm', 'csv', 'numpy' or 'parquet'" % (src,))
    if format in ("svmlight",):
        format = "libsvm"
    if format == "cbf":
        return _convert_cbf(src, dst, streams, chunk_size, precision or "float",
                            skip_sequence_ids, show_config)
    if delimiter is None and format == "csv":
        tsv = isinstance(src, (str, bytes, os.PathLike)) and \
            os.fsdecode(os.fspath(src)).lower().endswith(".tsv")
        delimiter = "\t" if tsv else ","
    if precision not in (None, "float", "double"):
        raise ValueError("convert: precision must be 'float' or 'double' (got %r)" % (precision,))
    _refuse_same_file(dst, src, labels)
    with _sigterm_cancels():
        result = _convert(src, dst, format, labels, label, dim, zero_based, classes, delimiter,
                          header, features, features_name, labels_name, precision, progress)
    if show_config:
        print(result.config, end="", flush=True)
    return result


def _convert(src, dst, format, labels, label, dim, zero_based, classes, delimiter, header,
             features, features_name, labels_name, precision, progress):
    if format in ("libsvm", "csv"):
        if labels is not None or features is not None:
            raise ValueError("convert: labels= and features= are for arrays; text formats take "
                             "label= (CSV columns)")
        result = _convert_text(format, src, dst, dim, zero_based, classes, label, delimiter,
                               header, features_name, labels_name, progress)
    elif format == "numpy":
        result = _convert_numpy(src, dst, labels, features, classes, features_name, labels_name,
                                precision, progress)
    elif format == "parquet":
        result = _convert_parquet(src, dst, label, classes, features_name, labels_name,
                                  precision, progress)
    else:
        raise ValueError("convert: unknown format %r (libsvm, csv, numpy, parquet, cbf)"
                         % (format,))
    return result


def _convert_cbf(src, dst, streams, chunk_size, precision, skip_sequence_ids, show_config):
    from ._ctfio import cbf_write
    from .source import StreamDef
    if not streams:
        raise ValueError("convert: format='cbf' needs streams= (the CTF file's StreamDefs)")
    tuples = []
    for name, sd in dict(streams).items():
        if not isinstance(sd, StreamDef) or sd["shape"] is None:
            raise ValueError("convert: streams[%r] must be a StreamDef with a shape" % (name,))
        tuples.append((name, sd["field"], sd["shape"], sd["is_sparse"], sd["defines_mb_size"]))
    chunk_size = _check.positive(chunk_size, "convert: chunk_size")
    src, dst = os.fspath(src), os.fspath(dst)
    info = cbf_write(src, tuples, dst, chunk_size, precision,
                     skip_sequence_ids=bool(skip_sequence_ids))
    info["path"] = dst
    if show_config:
        print("ctfio.CBFDeserializer(%r)  # %d sequences, %d chunks"
              % (dst, info["sequences"], info["chunks"]), flush=True)
    return info
