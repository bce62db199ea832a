"""Writing CNTK Text Format: ``sequence_to_cntk_text_format`` (CNTK's ``cntk.io`` function of the
same name) and ``write_ctf``, which turns NumPy / SciPy data into a CTF file that ctfio (and
CNTK) read back to the same values.

    ctfio.write_ctf("train.ctf", {"features": X, "labels": scipy.sparse.csr_matrix(Y)})

Values are written with the shortest text that reads back to the same number in the chosen
precision (float32 for ``precision="float"``, float64 for ``"double"``); integral values are
written without a fraction (``1``, not ``1.0``). Sparse zeros are not written.
"""

import contextlib
import io
import os
import secrets
import signal
import stat
import threading

__all__ = ["sequence_to_cntk_text_format", "write_ctf"]

# How much is turned into text at once (at most this many samples, and about this many values):
# bounds write_ctf's memory whatever the file's size.
_CHUNK_SAMPLES = 1 << 16
_CHUNK_VALUES = 1 << 18


def _np():
    import numpy
    return numpy


def _is_sparse_matrix(x):
    return hasattr(x, "tocsr") and hasattr(x, "nnz")


# ---------------------------------------------------------------------------------------------
# sequence_to_cntk_text_format: CNTK's function, same output
# ---------------------------------------------------------------------------------------------

def _is_tensor(data):
    """CNTK's test: a NumPy array, or nested lists whose innermost items are numbers."""
    np = _np()
    if isinstance(data, np.ndarray):
        return True
    if not isinstance(data, list):
        return False
    while len(data) > 0:
        try:
            data[0][0]
        except Exception:
            try:
                data[0] + 0
                return True
            except Exception:
                return False
        if isinstance(data, np.ndarray):
            return True
        if not isinstance(data[0], list):
            return False
        data = data[0]
    return True


def _dense_to_str(data):
    return " ".join(_np().asarray(data).ravel(order="C").astype(str))


def _sparse_to_str(data):
    return " ".join("%s:%s" % (k, v) for k, v in sorted(data.items()))


def _sparse_row_to_str(matrix, row):
    np = _np()
    r = matrix.getrow(row).tocsr()
    r.sum_duplicates()
    keep = r.data != 0
    values = np.asarray(r.data[keep]).astype(str)
    return " ".join("%d:%s" % (i, v) for i, v in zip(r.indices[keep].tolist(), values))


def sequence_to_cntk_text_format(seq_idx, alias_tensor_map):
    """The CTF lines of one sequence, as CNTK's ``cntk.io.sequence_to_cntk_text_format``.

    ``alias_tensor_map`` maps an alias to the sequence's data for that input: a ``(len, dim)``
    NumPy array (or nested lists of numbers), a SciPy sparse matrix with one row per time step
    (written as ``index:value``, zeros left out) or, as in CNTK, a list of ``{index: value}``
    dicts. Aliases are written in sorted order; there is one line per time step up to the
    longest input, an input being left out of the lines past its end::

        >>> sequence_to_cntk_text_format(2, {'a': np.array([[0, 1, 2], [3, 4, 5]]),
        ...                                  'b': [{1: 1}]})
        '2\\t|a 0 1 2 |b 1:1\\n2\\t|a 3 4 5'

    Returns the lines joined by ``\\n`` (no trailing newline); ``''`` for an empty sequence.
    Raises ValueError for an empty map or data of another kind.
    """
    if not alias_tensor_map:
        raise ValueError("sequence_to_cntk_text_format: alias_tensor_map is empty")

    def length(t):
        return t.shape[0] if _is_sparse_matrix(t) else len(t)

    max_seq_length = max(length(t) for t in alias_tensor_map.values())
    if max_seq_length == 0:
        return ""

    converted = {}
    for alias, tensor in alias_tensor_map.items():
        if _is_sparse_matrix(tensor):
            converted[alias] = ("csr", tensor.tocsr())
        elif _is_tensor(tensor):
            converted[alias] = ("dense", _np().asarray(tensor))
        elif isinstance(tensor, (list, tuple)) and len(tensor) and \
                all(isinstance(x, dict) for x in tensor):
            converted[alias] = ("dict", tensor)
        elif isinstance(tensor, (list, tuple)) and len(tensor) and \
                all(isinstance(x, _np().ndarray) for x in tensor):
            converted[alias] = ("dense", _np().asarray(tensor))
        else:
            raise ValueError('expected a tensor (dense), a SciPy sparse matrix or a list of '
                             'dicts (sparse) for alias %r, but got "%s"' % (alias, type(tensor)))

    lines = []
    for elem_idx in range(max_seq_length):
        line = []
        for alias, (kind, tensor) in sorted(converted.items()):
            if elem_idx >= length(tensor):
                continue  # this input has no more sequence elements
            if kind == "dense":
                text = _dense_to_str(tensor[elem_idx])
            elif kind == "dict":
                text = _sparse_to_str(tensor[elem_idx])
            else:
                text = _sparse_row_to_str(tensor, elem_idx)
            line.append("%s %s" % (alias, text))
        lines.append("%i\t|" % seq_idx + " |".join(line))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# write_ctf
# ---------------------------------------------------------------------------------------------

def _dtype_of(precision):
    np = _np()
    if precision in ("float", "float32", np.float32):
        return np.dtype(np.float32)
    if precision in ("double", "float64", np.float64, float):
        return np.dtype(np.float64)
    raise ValueError("write_ctf.precision: must be 'float' or 'double' (got %r)" % (precision,))


def _check_finite(values, alias):
    np = _np()
    if values.size and not np.isfinite(values).all():
        raise ValueError("write_ctf: stream %r holds NaN or infinity, which CTF cannot represent"
                         % (alias,))


def _integral_mask(v):
    """Values written as integers: integral, exactly representable, and not -0.0."""
    np = _np()
    with np.errstate(invalid="ignore"):
        return (v == np.rint(v)) & (np.abs(v) < 2.0 ** 53) & ~((v == 0) & np.signbit(v))


def _float_strings(v):
    """Shortest round-trip text of each value of a 1-D float32/float64 array (``1.0`` -> ``1``)."""
    np = _np()
    # NumPy's shortest float32 repr, Python's shortest float64 repr
    strs = map(str, v) if v.dtype == np.float32 else map(repr, v.tolist())
    return [s[:-2] if s.endswith(".0") else s for s in strs]


def _value_strings(v):
    np = _np()
    if v.size == 0:
        return []
    if _integral_mask(v).all():
        return list(map(str, v.astype(np.int64).tolist()))
    return _float_strings(v)


def _dense_rows(block):
    """One text per row of a 2-D array: its values separated by spaces."""
    np = _np()
    n = block.shape[0]
    if block.shape[1] == 0:
        return [""] * n
    out = [None] * n
    row_int = _integral_mask(block).all(axis=1)
    idx = np.nonzero(row_int)[0]
    if idx.size:
        for i, row in zip(idx.tolist(), block[idx].astype(np.int64).tolist()):
            out[i] = " ".join(map(str, row))
    idx = np.nonzero(~row_int)[0]
    if idx.size:
        sub = block[idx]
        if sub.dtype == np.float32:
            rows = (" ".join(map(str, row)) for row in sub)
        else:
            rows = (" ".join(map(repr, row)) for row in sub.tolist())
        for i, s in zip(idx.tolist(), rows):
            out[i] = (s + " ").replace(".0 ", " ")[:-1]
    return out


def _sparse_rows(m, dtype, alias):
    """One text per row of a SciPy sparse matrix: ``index:value`` pairs, zeros left out."""
    m = m.tocsr().astype(dtype, copy=True)
    m.sum_duplicates()
    m.eliminate_zeros()
    _check_finite(m.data, alias)
    values = _value_strings(m.data)
    indices = m.indices.tolist()
    ptr = m.indptr.tolist()
    pairs = ["%d:%s" % iv for iv in zip(indices, values)]
    return [" ".join(pairs[ptr[i]:ptr[i + 1]]) for i in range(m.shape[0])]


class _Stream:
    """One stream of write_ctf's input, normalized: its number of sequences, the length of
    each, and the text of the samples of a range of sequences."""

    def __init__(self, alias, data, dtype):
        np = _np()
        self.alias = alias
        self.dtype = dtype
        if not isinstance(alias, str) or not alias or any(c.isspace() for c in alias) \
                or "|" in alias or alias.startswith("#"):
            raise ValueError("write_ctf: %r is not a valid CTF alias (non-empty, no blanks, "
                             "no '|', not starting with '#')" % (alias,))
        if _is_sparse_matrix(data):
            self.kind = "sparse"
            self.data = data.tocsr()
            self.lengths = np.ones(self.data.shape[0], dtype=np.int64)
        elif isinstance(data, (list, tuple)):
            if all(_is_sparse_matrix(x) for x in data) and len(data):
                self.kind = "sparse_seqs"
                self.data = [x.tocsr() for x in data]
                dims = {x.shape[1] for x in self.data}
            else:
                self.kind = "dense_seqs"
                self.data = []
                for x in data:
                    if _is_sparse_matrix(x):
                        raise ValueError("write_ctf: stream %r mixes sparse and dense sequences"
                                         % (alias,))
                    a = np.atleast_2d(np.asarray(x, dtype=dtype))
                    dim = int(np.prod(a.shape[1:]))
                    self.data.append(a.reshape(a.shape[0], dim))
                dims = {x.shape[1] for x in self.data}
            if len(dims) > 1:
                raise ValueError("write_ctf: the sequences of stream %r have different "
                                 "dimensions %s" % (alias, sorted(dims)))
            self.lengths = np.asarray([x.shape[0] for x in self.data], dtype=np.int64)
        else:
            a = np.asarray(data, dtype=dtype)
            if a.ndim == 1:           # N sequences of one scalar sample
                a = a.reshape(-1, 1)
            if a.ndim == 2:           # N sequences of one sample
                self.kind = "dense"
                self.data = a
                self.lengths = np.ones(a.shape[0], dtype=np.int64)
            elif a.ndim >= 3:         # N sequences of T samples
                self.kind = "dense_seqs"
                self.data = list(a.reshape(a.shape[0], a.shape[1], int(np.prod(a.shape[2:]))))
                self.lengths = np.full(a.shape[0], a.shape[1], dtype=np.int64)
            else:
                raise ValueError("write_ctf: stream %r must be an array, a list of arrays or "
                                 "a sparse matrix (got a scalar)" % (alias,))
        if self.kind in ("dense", "dense_seqs"):
            for block in ([self.data] if self.kind == "dense" else self.data):
                _check_finite(block, alias)
        self.count = len(self.lengths)

    def width(self):
        """About how many values one sample of this stream writes."""
        if self.kind == "dense":
            return self.data.shape[1]
        if self.kind == "sparse":
            return self.data.nnz / max(1, self.data.shape[0])
        if not self.data:
            return 1
        if self.kind == "dense_seqs":
            return self.data[0].shape[1]
        return sum(x.nnz for x in self.data) / max(1, int(self.lengths.sum()))

    def texts(self, lo, hi):
        """The sample texts of sequences lo..hi-1: a flat list, and the lengths."""
        np = _np()
        lengths = self.lengths[lo:hi]
        if self.kind == "dense":
            return _dense_rows(self.data[lo:hi]), lengths
        if self.kind == "sparse":
            return _sparse_rows(self.data[lo:hi], self.dtype, self.alias), lengths
        parts = self.data[lo:hi]
        if not parts:
            return [], lengths
        if self.kind == "dense_seqs":
            return _dense_rows(np.concatenate(parts)), lengths
        import scipy.sparse
        return _sparse_rows(scipy.sparse.vstack(parts, format="csr"), self.dtype,
                            self.alias), lengths


def _ids(sequence_ids, n):
    if sequence_ids is True:
        return None
    if sequence_ids is False or sequence_ids is None:
        return False
    ids = [int(x) for x in sequence_ids]
    if len(ids) != n:
        raise ValueError("write_ctf.sequence_ids: %d ids for %d sequences" % (len(ids), n))
    for i, x in enumerate(ids):
        if x < 0 or x >= 2 ** 64:
            raise ValueError("write_ctf.sequence_ids: id %d out of range" % x)
        if i and ids[i - 1] == x:
            raise ValueError("write_ctf.sequence_ids: sequences %d and %d share the id %d; "
                             "consecutive lines with one id form one sequence" % (i - 1, i, x))
    return ids


def write_ctf(path, streams, *, sequence_ids=True, precision="float"):
    """Write data as a CTF file; returns the number of sequences written.

    ``streams`` maps an alias (the name after ``|`` in the file) to the data of that input,
    one entry per sequence:

    - a dense 2-D array ``(N, dim)``: N sequences of one sample each (a 1-D array: N scalars;
      a 3-D array ``(N, T, dim)``: N sequences of T samples);
    - a list of N per-sequence arrays ``(len_i, dim)`` (a 1-D array is one sample);
    - a SciPy sparse matrix ``(N, dim)``: N one-sample sequences, written as ``index:value``;
    - a list of N SciPy sparse matrices ``(len_i, dim)``.

    All streams must have the same number of sequences. Sequence i takes as many lines as its
    longest stream; a shorter stream appears on its first lines only (e.g. one label per
    sequence). ``sequence_ids``: True writes ids 0..N-1, a list gives the ids (consecutive ids
    must differ), False writes no ids (line mode: every sequence must be one line).
    ``precision``: ``"float"`` writes each value as the shortest text that reads back to the
    same float32, ``"double"`` the same for float64. NaN and infinity are rejected.

    ``path`` is a file name (written to a temporary file in the same folder, then renamed, so a
    reader never sees half a file) or an open text file. The text is produced a chunk of
    sequences at a time, so memory does not grow with the file.
    """
    np = _np()
    dtype = _dtype_of(precision)
    if not streams:
        raise ValueError("write_ctf.streams: at least one stream is required")
    items = [_Stream(alias, data, dtype) for alias, data in dict(streams).items()]
    counts = {s.alias: s.count for s in items}
    if len(set(counts.values())) != 1:
        raise ValueError("write_ctf: all streams must have the same number of sequences (got %s)"
                         % ", ".join("%s=%d" % kv for kv in counts.items()))
    n = items[0].count
    ids = _ids(sequence_ids, n)
    seq_lines = np.max(np.stack([s.lengths for s in items]), axis=0) if n else \
        np.zeros(0, np.int64)
    empty = np.nonzero(seq_lines == 0)[0]
    if empty.size:
        raise ValueError("write_ctf: sequence %d has no sample in any stream" % empty[0])
    if ids is False and n and seq_lines.max() > 1:
        i = int(np.argmax(seq_lines > 1))
        raise ValueError("write_ctf: sequence_ids=False writes one line per sequence, but "
                         "sequence %d has %d samples" % (i, seq_lines[i]))

    width = max(1.0, sum(s.width() for s in items))
    per_chunk = max(1, min(_CHUNK_SAMPLES, int(_CHUNK_VALUES / width)))

    def chunks():
        lo = 0
        while lo < n:
            hi = lo + 1
            total = int(seq_lines[lo])
            while hi < n and total + seq_lines[hi] <= per_chunk:
                total += int(seq_lines[hi])
                hi += 1
            yield lo, hi
            lo = hi

    def write_all(f):
        for lo, hi in chunks():
            per_stream = []
            for s in items:
                texts, lengths = s.texts(lo, hi)
                starts = np.concatenate(([0], np.cumsum(lengths))).tolist()
                per_stream.append((s.alias, texts, starts, lengths.tolist()))
            out = []
            for k in range(hi - lo):
                seq = lo + k
                prefix = "" if ids is False else "%d\t" % (seq if ids is None else ids[seq])
                for t in range(int(seq_lines[seq])):
                    parts = []
                    for alias, texts, starts, lens in per_stream:
                        if t < lens[k]:
                            text = texts[starts[k] + t]
                            parts.append("|%s %s" % (alias, text) if text else "|" + alias)
                    out.append(prefix + " ".join(parts))
            out.append("")
            f.write("\n".join(out))

    if hasattr(path, "write"):
        write_all(path)
        return n
    with _replace_atomically(os.fspath(path)) as f:
        write_all(f)
    return n


def _create_exclusive(path, chosen):
    """A new temporary file next to `path` that no one else has. This mirrors the C library's one
    atomic writer (ctf__atomic_open in lib/common/platform.c, documented in lib/common/common.h)
    and keeps its rules: a name with 64 random bits (PATH.PID-RANDOM.part), O_EXCL (never a file
    that exists, a user's file named like it included, nor a link planted at the name) and
    O_NOFOLLOW (never through a link), O_CLOEXEC, a taken name retried (100 in all), mode 0666
    less the umask as the file it replaces would get (user outputs; the library's caches are
    0600). Each name is handed to `chosen` before it is tried (None after a name someone else
    has), so that a caller interrupted inside this call knows which file may have been made."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | \
        getattr(os, "O_CLOEXEC", 0)
    for _ in range(100):
        tmp = "%s.%d-%s.part" % (path, os.getpid(), secrets.token_hex(8))
        chosen(tmp)
        try:
            return os.open(tmp, flags, 0o666)
        except FileExistsError:
            chosen(None)
    raise FileExistsError("cannot create a temporary file next to %s: every name tried exists"
                          % path)


class _replace_atomically:
    """A context manager: a text file (UTF-8, '\\n' line ends) that replaces `path` only when the
    block completes: on any exception `path` stays as it was and the temporary file is removed.
    The temporary file is created exclusively (`_create_exclusive`), so two writers of one path
    never mix: the last rename wins, whole. A `path` that is a symbolic link keeps the link and
    has the file it names replaced; a device or a pipe is written in place. The file is flushed
    to the disk (fsync) before the rename, as the C writer's commit does; fsync=False skips
    that, for scratch files only."""

    def __init__(self, path, fsync=True):
        self.path, self.fsync, self.tmp, self.f = path, fsync, None, None

    def __enter__(self):
        path = self.path
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            # A device or a pipe (/dev/stdout, /dev/null): a rename would replace it.
            self.f = open(path, "w", encoding="utf-8", newline="\n")
            return self.f
        if os.path.islink(path):
            if st is None:
                raise FileNotFoundError("%s is a symbolic link to a missing file; remove it or "
                                        "name another output" % path)
            self.path = path = os.path.realpath(path)
        # Ctrl-C or SIGTERM between the creation of the temporary file and the moment the
        # block runs would leave it behind. They are held (blocked) in this thread until
        # __exit__ is sure to run, and the temporary file's name is known before the file
        # exists: another thread (numpy's, the reader's) may still take the signal, and Python
        # then raises it in the main thread at its next check, which can come inside
        # _create_exclusive. A signal let through by the last call here is handled inside the
        # try below; none can come between this method's return and the block.
        mask = hasattr(signal, "pthread_sigmask") and \
            threading.current_thread() is threading.main_thread()
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM}) \
            if mask else None
        try:
            fd = _create_exclusive(path, lambda name: setattr(self, "tmp", name))
            # Layer by layer, so that a signal raised inside (the text layer runs Python code)
            # closes the descriptor once: through the raw file once one owns it.
            raw = None
            try:
                raw = io.FileIO(fd, "w")
                self.f = io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8",
                                          newline="\n")
            except BaseException:
                if raw is None:
                    os.close(fd)
                else:
                    raw.close()
                raise
        except BaseException:
            self._discard()
            if mask:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
            raise
        if mask:
            try:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
            except BaseException:
                self._discard()
                raise
        return self.f

    def _discard(self):
        try:
            if self.f is not None:
                self.f.close()
        finally:
            if self.tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.tmp)

    def __exit__(self, exc_type, exc, tb):
        if self.tmp is None:
            self.f.close()
            return False
        try:
            if exc_type is None:
                if self.fsync:
                    self.f.flush()
                    os.fsync(self.f.fileno())
                self.f.close()
                os.replace(self.tmp, self.path)
                return False
        except BaseException:
            self._discard()
            raise
        self._discard()
        return False
