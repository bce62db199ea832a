"""Minibatch sources with CNTK's ``cntk.io`` names: ``MinibatchSource`` over CTF files (the C
reader), ``CTFDeserializer``, ``StreamDef(s)``, ``StreamInformation``, ``MinibatchData`` and the
``UserMinibatchSource`` base class (rules 3, 6-9, 11).

Porting a CNTK script means changing ``cntk.io`` to ``ctfio``. The differences are deliberate
(rules 13): ``max_errors`` reaches the parser, minibatches stay valid after later calls, and all
workers share one timeline, so checkpoints are the same on every worker and can be restored with
another worker count.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, Union, cast

from . import _check, _ctfio
from . import remote as _remote

if TYPE_CHECKING:
    import numpy
    from numpy.typing import ArrayLike, DTypeLike, NDArray

    # A path as the reader takes it; a deserializer's files: one, a pattern, or a list.
    PathArg = Union[str, "os.PathLike[str]"]
    Files = Union[PathArg, Sequence[PathArg]]
    # The log callback of MinibatchSource (_ctfio.LogCallback).
    from ._ctfio import LogCallback

__all__ = [
    "INFINITELY_REPEAT", "FULL_DATA_SWEEP", "DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS",
    "StreamDef", "StreamDefs", "CTFDeserializer", "Mix", "mix", "StreamInformation",
    "MinibatchData", "MinibatchSource", "UserMinibatchSource", "Value",
]

#: ``max_samples`` / ``max_sweeps`` / ``epoch_size``: no limit (the library's own encoding;
#: the one spelling of "no limit" in Python).
INFINITELY_REPEAT = _check.INFINITELY_REPEAT
#: ``max_samples`` / ``epoch_size``: exactly one sweep over the data.
FULL_DATA_SWEEP = _check.FULL_DATA_SWEEP
#: ``randomization_window_in_chunks`` when not given: the library's own default.
DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS = _ctfio.DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS


_numpy = None


def _np() -> Any:
    global _numpy
    if _numpy is None:
        import numpy  # imported lazily: `import ctfio` must not pull in NumPy
        _numpy = numpy
    return _numpy


class _Record(dict[str, Any]):
    """A dict whose items are also attributes (CNTK's ``mb_source.streams.features``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


# ---------------------------------------------------------------------------------------------
# Stream definitions and deserializers
# ---------------------------------------------------------------------------------------------

class StreamDef(_Record):
    """One input stream of a CTF file: ``field`` is the alias used after ``|`` in the file
    (default: the stream's name), ``shape`` its dimension, ``is_sparse`` its format."""

    def __init__(self, field: str | None = None, shape: int | Sequence[int] | None = None,
                 is_sparse: bool = False, transforms: None = None, context: None = None,
                 scp: None = None, mlf: None = None, broadcast: None = None,
                 defines_mb_size: bool = False, max_sequence_length: int = 65535) -> None:
        if isinstance(shape, (tuple, list)):
            if len(shape) != 1:
                raise ValueError("StreamDef.shape: CTF streams are vectors, must be an int or a "
                                 "1-tuple (got %r)" % (shape,))
            shape = shape[0]
        # None: the file's (a CBF file stores each stream's dimension; CTF needs it given).
        if shape is not None:
            shape = _check.positive(shape, "StreamDef.shape")
        for name, val in (("transforms", transforms), ("context", context), ("scp", scp),
                          ("mlf", mlf), ("broadcast", broadcast)):
            if val is not None:
                raise ValueError("StreamDef.%s: not supported by the CTF deserializer (got %r)"
                                 % (name, val))
        super().__init__(field=field, shape=shape, is_sparse=bool(is_sparse),
                         defines_mb_size=bool(defines_mb_size))

    def __repr__(self) -> str:
        return ("StreamDef(field=%r, shape=%r, is_sparse=%r, defines_mb_size=%r)"
                % (self["field"], self["shape"], self["is_sparse"], self["defines_mb_size"]))


def StreamDefs(**kwargs: StreamDef) -> _Record:
    """``StreamDefs(features=StreamDef(...), labels=StreamDef(...))``: name -> StreamDef."""
    for name, sd in kwargs.items():
        if not isinstance(sd, StreamDef):
            raise TypeError("StreamDefs(%s=...): must be a StreamDef (got %r)" % (name, sd))
    return _Record(kwargs)


# Reader parameters a deserializer may carry (rules 3); they override the source's.
_DESERIALIZER_OPTIONS = ("precision", "skip_sequence_ids", "max_errors", "trace_level",
                         "chunk_size_in_bytes", "keep_data_in_memory", "cache_index",
                         "chunk_cache", "chunk_cache_limit")


class CTFDeserializer(_Record):
    """``CTFDeserializer(filename, streams, **reader_options)``: CTF data and its streams.

    ``filename`` is a file, a glob pattern (``"data/part-*.ctf"``, matches in byte-wise sorted
    order) or a list of files and patterns, local or remote (``s3://``, ``http(s)://``):
    several files are read as one corpus, one timeline over all of them in the order given.
    ``file=`` is the same argument by keyword (``CTFDeserializer(file="s3://b/part-*.ctf",
    streams=...)``); ``filename`` is CNTK's name for it. Several deserializers given to
    ``MinibatchSource`` are joined by sequence key: the first drives the order, the others add
    their streams."""

    def __init__(self, filename: Files | None = None,
                 streams: Mapping[str, StreamDef] | None = None, file: Files | None = None,
                 **options: Any) -> None:
        if file is not None:
            if filename is not None:
                raise TypeError("CTFDeserializer: the data is given twice (filename=%r and "
                                "file=%r); give one" % (filename, file))
            filename = file
        if filename is None:
            raise TypeError("CTFDeserializer: the data's path is required (filename, or the "
                            "keyword file=)")
        if isinstance(filename, (list, tuple)):
            filename = [os.fspath(f) for f in filename]
            if not filename or not all(isinstance(f, str) and f for f in filename):
                raise ValueError("CTFDeserializer.filename: must be a non-empty list of "
                                 "non-empty paths (got %r)" % (filename,))
        elif isinstance(filename, os.PathLike):
            filename = os.fspath(filename)
        if not isinstance(filename, (str, list)) or not filename:
            raise ValueError("CTFDeserializer.filename: must be a non-empty path (got %r)"
                             % (filename,))
        if not streams:
            raise ValueError("CTFDeserializer.streams: at least one stream is required")
        for name, sd in dict(streams).items():
            if isinstance(sd, StreamDef) and sd["shape"] is None:
                raise ValueError("StreamDef.shape: the dimension of stream %r is required "
                                 "(got None)" % (name,))
        for key in options:
            if key not in _DESERIALIZER_OPTIONS:
                raise TypeError("CTFDeserializer: unknown option %r (known: %s)"
                                % (key, ", ".join(_DESERIALIZER_OPTIONS)))
        super().__init__(type="CNTKTextFormatDeserializer", file=filename,
                         input=dict(streams), options=options)

    def __repr__(self) -> str:
        return "CTFDeserializer(%r, %r)" % (self["file"], self["input"])


class Mix(_Record):
    """``mix([part, ...], weights=[...])``: several data sets interleaved on one timeline
    (docs/rules.md, "Mixing"). A part is a ``CTFDeserializer`` (a file or a corpus) or a list of
    them (a join by key: the first drives the order). Every part delivers the same streams, by
    name, shape and storage; each keeps its own randomization and sweeps, and the part whose
    samples taken divided by its weight is lowest supplies the next sequence. Use it wherever a
    deserializer goes: ``MinibatchSource(ctfio.mix([a, b], weights=[0.7, 0.3]), ...)``."""

    def __init__(self, parts: Iterable[CTFDeserializer | Iterable[CTFDeserializer]],
                 weights: Iterable[float] | None = None) -> None:
        if isinstance(parts, (CTFDeserializer, str, bytes)):
            raise TypeError("mix: the parts must be a list of deserializers (got %r)" % (parts,))
        norm = []
        for i, part in enumerate(parts):
            part = [part] if isinstance(part, CTFDeserializer) else list(part)
            if not part or not all(isinstance(d, CTFDeserializer) for d in part):
                raise TypeError("mix: part %d must be a CTFDeserializer or a list of them (a "
                                "join; got %r)" % (i, part))
            norm.append(part)
        if not norm:
            raise ValueError("mix: at least one part is required")
        weights = [1.0] * len(norm) if weights is None else [float(w) for w in weights]
        if len(weights) != len(norm):
            raise ValueError("mix: %d weights for %d parts" % (len(weights), len(norm)))
        super().__init__(type="Mix", parts=norm, weights=weights)

    def __repr__(self) -> str:
        return "mix(%r, weights=%r)" % (self["parts"], self["weights"])


def mix(parts: Iterable[CTFDeserializer | Iterable[CTFDeserializer]],
        weights: Iterable[float] | None = None) -> Mix:
    """``mix([source_a, source_b, ...], weights=[0.7, 0.3, ...])``: see ``Mix``."""
    return Mix(parts, weights)


def _cbf_stream_defs(info, streams):
    """StreamDefs completed from a CBF file's streams (info: the list cbf_streams returns)."""
    by_name = {name: (dim, sparse) for name, dim, sparse, _ in info}
    if streams is None:
        return {name: StreamDef(field=name, shape=dim, is_sparse=sparse)
                for name, dim, sparse, _ in info}
    done = {}
    for name, sd in dict(streams).items():
        if not isinstance(sd, StreamDef):
            raise TypeError("CBFDeserializer.streams[%r]: must be a StreamDef (got %r)"
                            % (name, sd))
        field = sd["field"] or name
        if field not in by_name:
            raise ValueError("CBFDeserializer.streams[%r]: the file has no stream %r "
                             "(it has: %s)" % (name, field, ", ".join(by_name)))
        dim, sparse = by_name[field]
        done[name] = StreamDef(field=field, shape=sd["shape"] or dim,
                               is_sparse=sparse if sd["shape"] is None else sd["is_sparse"],
                               defines_mb_size=sd["defines_mb_size"])
    return done


class CBFDeserializer(CTFDeserializer):
    """``CBFDeserializer(filename, streams=None, **reader_options)``: a file of CNTK's binary
    format (CBF: ``ctfio convert cbf`` or CNTK's ``ctf2bin.py``), read like CTF.

    The file names its streams: without ``streams`` every stream of the file is delivered under
    its own name; ``StreamDefs(new=StreamDef(field="name_in_file"))`` picks and renames them
    (``shape`` and ``is_sparse`` default to the file's). The precision defaults to the file's
    element type, which it must match. ``filename`` may be a list or pattern of files with the
    same streams (a corpus)."""

    def __init__(self, filename: Files, streams: Mapping[str, StreamDef] | None = None,
                 **options: Any) -> None:
        first: Any = filename[0] if isinstance(filename, (list, tuple)) and filename else filename
        if isinstance(first, os.PathLike):
            first = os.fspath(first)
        if isinstance(first, str) and any(c in first for c in "*?["):
            import glob
            matches = sorted(glob.glob(first))
            first = matches[0] if matches else first
        if not isinstance(first, str) or not first:
            raise ValueError("CBFDeserializer.filename: must be a non-empty path (got %r)"
                             % (filename,))
        if _remote.is_remote(first):
            # The object's header is read once the MinibatchSource knows the storage options;
            # until then the streams are a placeholder.
            self._cbf_pending = (first, streams)
            super().__init__(filename, {"_": StreamDef(shape=1)}, **options)
            self["type"] = "CNTKBinaryFormatDeserializer"
            return
        info = _ctfio.cbf_streams(first)
        options.setdefault("precision", info[0][3])
        super().__init__(filename, _cbf_stream_defs(info, streams), **options)
        self["type"] = "CNTKBinaryFormatDeserializer"

    def _cbf_resolve(self, remote):
        """Reads a remote object's streams with the reader's remote options."""
        first, streams = self.__dict__.pop("_cbf_pending")
        info = _ctfio.cbf_streams(first, remote)
        self["input"] = _cbf_stream_defs(info, streams)
        self["options"].setdefault("precision", info[0][3])

    def __repr__(self) -> str:
        return "CBFDeserializer(%r, %r)" % (self["file"], self["input"])


# ---------------------------------------------------------------------------------------------
# Stream information and minibatch data
# ---------------------------------------------------------------------------------------------

class StreamInformation:
    """``StreamInformation(name, stream_id, storage_format, dtype, shape)``: describes one stream
    of a source; hashable, used as the key of the dict ``next_minibatch`` returns."""

    __slots__ = ("name", "stream_id", "storage_format", "dtype", "shape", "defines_mb_size",
                 "_hash")
    name: str
    stream_id: int
    storage_format: str
    dtype: numpy.dtype[Any]
    shape: tuple[int, ...]
    defines_mb_size: bool
    _hash: int | None

    def __init__(self, name: str, stream_id: int, storage_format: str, dtype: DTypeLike,
                 shape: int | tuple[int, ...] | list[int], defines_mb_size: bool = False) -> None:
        if storage_format not in ("dense", "sparse"):
            raise ValueError("StreamInformation.storage_format: must be 'dense' or 'sparse' "
                             "(got %r)" % (storage_format,))
        self.name = name
        self.stream_id = stream_id
        self.storage_format = storage_format
        self.dtype = _np().dtype(dtype)
        self.shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        self.defines_mb_size = bool(defines_mb_size)

    @property
    def is_sparse(self) -> bool:
        return self.storage_format == "sparse"

    def __setattr__(self, attr: str, value: Any) -> None:
        object.__setattr__(self, attr, value)
        if attr in ("name", "stream_id"):
            # Every minibatch's dict hashes its keys: the hash is made here, once (and again
            # when the name or id changes), not on every call of __hash__.
            try:
                h = hash((self.name, self.stream_id))
            except (AttributeError, TypeError):
                h = None
            object.__setattr__(self, "_hash", h)

    def __hash__(self) -> int:
        h = self._hash
        return h if h is not None else hash((self.name, self.stream_id))

    def __reduce__(self) -> tuple[Any, ...]:
        # Not the slots: a str's hash differs between processes.
        return (StreamInformation, (self.name, self.stream_id, self.storage_format,
                                    self.dtype, self.shape, self.defines_mb_size))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, StreamInformation) and self.name == other.name
                and self.stream_id == other.stream_id)

    def __repr__(self) -> str:
        return ("StreamInformation(%r, %d, %r, %s, %r)"
                % (self.name, self.stream_id, self.storage_format, self.dtype.name, self.shape))


class MinibatchData:
    """One stream of one minibatch.

    Built by the CTF reader, it wraps the C buffers without copying: ``values`` is the
    ``(num_samples, dim)`` block (dense) or the non-zeros (sparse, with ``indptr`` over samples
    and ``indices``), ``lengths`` the samples per sequence. It stays valid after later calls:
    its arrays keep the reader's minibatch alive, and the reader reuses a minibatch's memory
    only once nothing refers to it any more. User sources build it as
    ``MinibatchData(data, num_sequences, num_samples, sweep_end)`` (rules 11) where data is an
    array, a list of per-sequence arrays, a ``Value`` or a SciPy sparse matrix.
    """

    # The CTF reader makes its objects without __init__ (``Minibatch.stream_data``: the C
    # minibatch as ``_view``, the stream index ``_i``, ``_is_sparse``, ``_dim``, the counts and
    # the timeline); what it does not set comes from here. The arrays are made on first use.
    _view: Any = None
    _i: int
    _is_sparse: bool
    _dim: int
    _files: Any
    _frame_mode = False
    _user_layout: tuple[NDArray[Any], int, DTypeLike] | None = None
    _values: NDArray[Any] | None = None
    _lengths: NDArray[Any] | None = None
    _indptr: NDArray[Any] | None = None
    _indices: NDArray[Any] | None = None
    data: Any = None
    num_sequences: int
    num_samples: int
    end_of_sweep: bool
    position: int | None = None
    sweep: int | None = None
    global_samples: int | None = None
    samples_per_sweep: int | None = None

    def __init__(self, data: Any, num_sequences: int, num_samples: int,
                 sweep_end: bool = False) -> None:
        self.data = data
        self.num_sequences = int(num_sequences)
        self.num_samples = int(num_samples)
        self.end_of_sweep = bool(sweep_end)
        self._view = None
        self._frame_mode = False
        # (lengths, dim, dtype), set by ctfio's own in-memory sources (MinibatchSourceFromData):
        # the sequence layout of a flat block of samples, and the shape of an empty minibatch.
        self._user_layout = None
        self._values = None
        self.position = self.sweep = self.global_samples = self.samples_per_sweep = None

    # The timeline (the same on every stream of a minibatch and on every worker), for the
    # sources that have one; None where a source does not say:
    #   position          the timeline position after this minibatch (index samples since the
    #                     start of sweep 0), what a checkpoint restores;
    #   sweep             the sweep of its first sequence;
    #   global_samples    index samples of the whole (global) minibatch, all workers together:
    #                     the advance of the position;
    #   samples_per_sweep index samples in one sweep;
    #   end_of_sweep      the global minibatch holds the last sequence of a sweep.

    # CNTK spells it both ways.
    @property
    def sweep_end(self) -> bool:
        return self.end_of_sweep

    @property
    def is_sparse(self) -> bool:
        if self._view is not None:
            return self._is_sparse
        if isinstance(self.data, Value):
            return self.data.is_sparse
        return hasattr(self.data, "tocsr")

    @property
    def dim(self) -> int:
        if self._view is not None:
            return self._dim
        if self._user_layout is not None:
            return self._user_layout[1]
        return self._user_arrays()[0].shape[-1]

    @property
    def shape(self) -> tuple[int, ...]:
        """(num_sequences, max_length, dim); (num_sequences, dim) in frame mode."""
        if self._frame_mode:
            return (self.num_sequences, self.dim)
        lengths = self.lengths
        return (self.num_sequences, int(lengths.max()) if len(lengths) else 0, self.dim)

    # -- zero-copy arrays of the C minibatch -------------------------------------------------
    # Each is the reader's buffer wrapped once (numpy.asarray over a Buffer: a read-only view,
    # never a copy), on first access, then the same array.

    @property
    def values(self) -> NDArray[Any]:
        """Dense: (num_samples, dim) array; sparse: the non-zero values. A read-only view of
        the C reader's buffer (no copy). For user data given as one block, that block; given as
        per-sequence pieces, they are joined once (a copy), on the first access."""
        v = self._values
        if v is None:
            if self._view is None:
                v = self._user_csr().data if self.is_sparse else self._user_values()
            else:
                v = _np().asarray(self._view.buffer(self._i, 0))
            self._values = v
        return v

    @property
    def lengths(self) -> NDArray[Any]:
        """Samples per sequence (uint32): a view of the reader's buffer (no copy)."""
        if self._view is None:
            if self._user_layout is not None:
                return self._user_layout[0]
            return _np().asarray([len(a) for a in self._user_arrays()], dtype=_np().uint32)
        v = self._lengths
        if v is None:
            v = self._lengths = _np().asarray(self._view.buffer(self._i, 1))
        return v

    @property
    def indptr(self) -> NDArray[Any] | None:
        """Sparse: row offsets over samples (int64, num_samples + 1), a view of the reader's
        buffer; None for a dense stream of the reader."""
        if self._view is None:
            return self._user_csr().indptr
        v = self._indptr
        if v is None and self._is_sparse:
            v = self._indptr = _np().asarray(self._view.buffer(self._i, 2))
        return v

    @property
    def indices(self) -> NDArray[Any] | None:
        """Sparse: column index of each non-zero (int32), a view of the reader's buffer; None
        for a dense stream of the reader."""
        if self._view is None:
            return self._user_csr().indices
        v = self._indices
        if v is None and self._is_sparse:
            v = self._indices = _np().asarray(self._view.buffer(self._i, 3))
        return v

    @property
    def keys(self) -> NDArray[Any] | None:
        """Sequence keys (ids, or line numbers in line mode) of the CTF reader's minibatch: a
        view of its buffer (uint64)."""
        mb = self._view
        return _np().asarray(mb.keys) if mb is not None else None

    @property
    def files(self) -> NDArray[Any] | None:
        """Per sequence, its file: an index into the source's ``files`` (0 for a single file).
        Over a corpus a key identifies a sequence within its file: (file, key) identifies it."""
        mb = self._view
        files = mb.files if mb is not None else getattr(self, "_files", None)
        return _np().asarray(files) if files is not None else None

    def csr(self) -> Any:
        """The samples as a SciPy CSR matrix (num_samples, dim); needs SciPy. Sparse streams:
        its data and indices are the reader's buffers (no copy); indptr (num_samples + 1
        entries, int64 in the reader) is converted to int32 by SciPy, which wants one index
        type (a copy of num_samples + 1 numbers). Dense streams: a copy (CSR is another
        layout)."""
        import scipy.sparse
        if self._view is None:
            return self._user_csr()
        if not self.is_sparse:
            return scipy.sparse.csr_matrix(self.values)
        return scipy.sparse.csr_matrix((self.values, self.indices, self.indptr),
                                       shape=(self.num_samples, self.dim), copy=False)

    def _dense_samples(self):
        if self.is_sparse:
            np = _np()
            indptr = cast("NDArray[Any]", self.indptr)  # a sparse stream has one
            out = np.zeros((len(indptr) - 1, self.dim), dtype=self.values.dtype)
            rows = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
            np.add.at(out, (rows, self.indices), self.values)
            return out
        return self.values

    def as_sequences(self) -> list[Any]:
        """A list of per-sequence arrays (views into the minibatch for dense data); sparse
        sequences are SciPy CSR matrices when SciPy is installed, dense arrays otherwise."""
        if self._view is None:
            if hasattr(self.data, "tocsr"):
                m = self.data.tocsr()
                b = self._user_bounds(m.shape[0])
                return [m[b[i]:b[i + 1]] for i in range(len(b) - 1)]
            return list(self._user_arrays())
        np = _np()
        bounds = np.concatenate(([0], np.cumsum(self.lengths, dtype=np.int64)))
        if self.is_sparse:
            try:
                m = self.csr()
                return [m[bounds[i]:bounds[i + 1]] for i in range(self.num_sequences)]
            except ImportError:
                pass
        dense = self._dense_samples()
        return [dense[bounds[i]:bounds[i + 1]] for i in range(self.num_sequences)]

    @property
    def mask(self) -> NDArray[Any]:
        """(num_sequences, max_length) array: 1 where a sample exists, 0 for padding."""
        np = _np()
        lengths = self.lengths
        width = int(lengths.max()) if len(lengths) else 0
        return (np.arange(width)[None, :] < lengths[:, None]).astype(np.float32)

    def asarray(self) -> NDArray[Any]:
        """Dense NumPy data: padded (num_sequences, max_length, dim) (see ``mask``); in frame
        mode (num_sequences, dim). For dense data whose sequences all have one length (frame
        mode, one-sample sequences, fixed-length sequences) there is no padding and the result
        is a view of ``values`` (no copy); otherwise, and for sparse data, a new array."""
        np = _np()
        if self._frame_mode:
            if self._view is not None or self._user_layout is not None:
                return self._dense_samples()
            return np.asarray([a[0] for a in self._user_arrays()])
        if not self.is_sparse and (self._view is not None or self._user_layout is not None):
            lengths = self.lengths
            n = len(lengths)
            width = int(lengths.max()) if n else 0
            # n lengths of at most `width` sum to n * width only when all equal it; the
            # reader's values (a view) have one row per sample, so their count is the sum.
            total = len(self.values) if self._view is not None else int(lengths.sum())
            if n and width * n == total:
                vals = self.values
                return vals.reshape(n, width, vals.shape[-1])
        seqs = self.as_sequences()
        seqs = [s.toarray() if hasattr(s, "toarray") else np.asarray(s) for s in seqs]
        lens = [len(s) for s in seqs]
        width = max(lens) if lens else 0
        dtype = seqs[0].dtype if seqs else np.float32
        out = np.zeros((len(seqs), width, self.dim if seqs else 0), dtype=dtype)
        for i, s in enumerate(seqs):
            out[i, :len(s)] = s
        return out

    # -- user-provided data -------------------------------------------------------------------

    def _user_arrays(self):
        np = _np()
        d = self.data
        if isinstance(d, Value):
            return d.sequences()
        if hasattr(d, "tocsr"):
            a = np.asarray(d.toarray())
            b = self._user_bounds(a.shape[0])
            return [a[b[i]:b[i + 1]] for i in range(len(b) - 1)]
        if isinstance(d, (list, tuple)):
            return [np.atleast_2d(np.asarray(x)) for x in d]
        a = np.asarray(d)
        if a.ndim == 3:
            return list(a)
        if a.ndim == 2:
            b = self._user_bounds(a.shape[0])
            return [a[b[i]:b[i + 1]] for i in range(len(b) - 1)]
        return [np.atleast_2d(a)]

    def _user_bounds(self, rows):
        """Sequence boundaries over the rows of a flat (num_samples, dim) block of user data:
        from ``_user_layout``'s lengths, else one row per sequence when num_sequences == rows,
        else a single sequence."""
        np = _np()
        if self._user_layout is not None:
            return np.concatenate(([0], np.cumsum(self._user_layout[0], dtype=np.int64)))
        if self.num_sequences == rows:
            return np.arange(rows + 1)
        return np.asarray([0, rows])

    def _user_values(self):
        np = _np()
        if isinstance(self.data, np.ndarray) and self.data.ndim == 2:
            return self.data                   # a flat (num_samples, dim) block: itself
        arrays = self._user_arrays()
        if arrays:
            return np.concatenate(arrays)
        if self._user_layout is not None:
            return np.zeros((0, self._user_layout[1]), self._user_layout[2])
        return np.zeros((0, 0), np.float32)

    def _user_csr(self):
        import scipy.sparse
        if isinstance(self.data, Value) and self.data.is_sparse:
            return self.data.csr()
        if hasattr(self.data, "tocsr"):
            return self.data.tocsr()
        return scipy.sparse.csr_matrix(self._user_values())

    def __len__(self) -> int:
        return self.num_sequences

    def __repr__(self) -> str:
        return ("MinibatchData(num_sequences=%d, num_samples=%d, end_of_sweep=%r, sparse=%r)"
                % (self.num_sequences, self.num_samples, self.end_of_sweep, self.is_sparse))


class Value:
    """A batch of sequences as user sources build them (CNTK's ``cntk.Value``):
    ``Value(batch)`` for dense data (an array, or a list of per-sequence arrays) and
    ``Value.one_hot(batch, num_classes)`` for sequences of class indices. ``device`` is accepted
    for CNTK compatibility; ctfio data lives in host memory until a framework adapter moves it."""

    is_sparse: bool
    device: Any
    num_classes: int
    dtype: numpy.dtype[Any]
    _seqs: list[NDArray[Any]]
    _index_seqs: list[NDArray[Any]]

    def __init__(self, batch: Iterable[ArrayLike], device: Any = None,
                 dtype: DTypeLike | None = None) -> None:
        np = _np()
        self.is_sparse = False
        self.device = device
        if isinstance(batch, np.ndarray) and batch.ndim >= 2:
            self._seqs = [np.asarray(x, dtype=dtype) if x.ndim >= 1 else x for x in batch]
        else:
            self._seqs = [np.atleast_1d(np.asarray(x, dtype=dtype)) for x in batch]
        self._seqs = [s.reshape(-1, s.shape[-1]) if s.ndim != 2 else s for s in self._seqs]

    @classmethod
    def one_hot(cls, batch: Iterable[ArrayLike], num_classes: int,
                dtype: DTypeLike | None = None, device: Any = None) -> Value:
        """``batch``: a list of sequences of class indices -> one-hot sparse sequences."""
        np = _np()
        self = cls.__new__(cls)
        self.is_sparse = True
        self.device = device
        self.num_classes = int(num_classes)
        self.dtype = np.dtype(dtype or np.float32)
        self._index_seqs = []
        for seq in batch:
            idx = np.atleast_1d(np.asarray(seq, dtype=np.int64))
            if idx.size and (idx.min() < 0 or idx.max() >= num_classes):
                raise ValueError("Value.one_hot: index out of range for num_classes=%d"
                                 % num_classes)
            self._index_seqs.append(idx)
        return self

    def sequences(self) -> list[NDArray[Any]]:
        if not self.is_sparse:
            return self._seqs
        np = _np()
        out = []
        for idx in self._index_seqs:
            a = np.zeros((len(idx), self.num_classes), dtype=self.dtype)
            a[np.arange(len(idx)), idx] = 1
            out.append(a)
        return out

    def csr(self) -> Any:
        import scipy.sparse
        np = _np()
        idx = (np.concatenate(self._index_seqs) if self._index_seqs
               else np.zeros(0, np.int64))
        n = len(idx)
        return scipy.sparse.csr_matrix((np.ones(n, self.dtype), idx.astype(np.int32),
                                        np.arange(n + 1)), shape=(n, self.num_classes))

    @property
    def shape(self) -> tuple[int, ...]:
        seqs = self.sequences()
        return (len(seqs), max((len(s) for s in seqs), default=0),
                seqs[0].shape[-1] if seqs else 0)


# ---------------------------------------------------------------------------------------------
# Sources
# ---------------------------------------------------------------------------------------------

# The reader parameters MinibatchSource takes by their CNTK keyword (lib/config/params.def).
_PARAMS = {p["py_keyword"]: p for p in _ctfio.reader_params() if p["py_keyword"]}


def _table_default(keyword):
    """The library's default for a MinibatchSource keyword, as Python spells it."""
    p = _PARAMS.get(keyword)
    if p is None:  # chunk_cache: no directory unless one is given
        return None
    if p["kind"] == "bool":
        return bool(p["default"])
    if p["kind"] == "precision":
        return "double" if p["default"] == 8 else "float"
    return p["default"]


def _workers(num_data_partitions, partition_index, number_of_workers=None, worker_rank=None):
    n = number_of_workers if number_of_workers is not None else num_data_partitions
    r = worker_rank if worker_rank is not None else partition_index
    # Integers only (2.5 is refused, not truncated); the range is checked in C.
    return ((1 if n is None else _check.index(n, "number_of_workers")),
            (0 if r is None else _check.index(r, "worker_rank")))


_S = TypeVar("_S", bound="MinibatchSource")


class MinibatchSource:
    """The CTF minibatch source (CNTK's ``cntk.io.MinibatchSource`` over ``CTFDeserializer``).

    ``next_minibatch(K)`` cuts K index samples from one shared, endless, reproducible timeline
    (rules 6); with ``num_data_partitions=N, partition_index=r`` each worker receives its own
    sequences of the global minibatch (rules 7).
    """

    def __init__(self, deserializers: CTFDeserializer | Mix | Iterable[CTFDeserializer],
                 max_samples: int | None = None, max_sweeps: int | None = None,
                 randomization_window_in_chunks: int | None = None,
                 randomization_window_in_samples: int | None = None,
                 randomization_seed: int | None = None, trace_level: int | None = None,
                 multithreaded_deserializer: bool | None = None, frame_mode: bool | None = None,
                 truncation_length: int | None = None, randomize: bool | None = None,
                 max_errors: int | None = None, *, num_threads: int | None = None,
                 prefetch_chunks: int | None = None, keep_data_in_memory: bool | None = None,
                 cache_index: bool | None = None, chunk_size_in_bytes: int | None = None,
                 precision: str | None = None, skip_sequence_ids: bool | None = None,
                 log: LogCallback | None = None, storage_options: Mapping[str, Any] | None = None,
                 cache_dir: PathArg | None = None, chunk_cache: PathArg | None = None,
                 chunk_cache_limit: int | None = None,
                 bad_records: PathArg | None = None) -> None:
        # Every reader parameter left as None is left out: the C library owns the defaults
        # (docs/config.md), the checks and the encoding of the limits (INFINITELY_REPEAT,
        # FULL_DATA_SWEEP).
        mixed = deserializers if isinstance(deserializers, Mix) else None
        if mixed is not None:
            deserializers = mixed["parts"][0]
        if isinstance(deserializers, CTFDeserializer):
            deserializers = [deserializers]
        deserializers = list(cast("Iterable[CTFDeserializer]", deserializers))
        if not deserializers or not all(isinstance(d, CTFDeserializer) for d in deserializers):
            raise ValueError("MinibatchSource.deserializers: one or more CTFDeserializers are "
                             "supported (got %r)" % (deserializers,))
        if randomization_window_in_samples and randomization_window_in_chunks not in (
                None, DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS):
            raise ValueError("MinibatchSource: randomization_window_in_chunks and "
                             "randomization_window_in_samples are mutually exclusive")
        # A remote CBF object's streams come from its header, read with the remote options.
        every = [x for part in (mixed["parts"] if mixed is not None else [deserializers])
                 for x in part]
        pending = [x for x in every if "_cbf_pending" in getattr(x, "__dict__", {})]
        if pending:
            remote = _remote.resolve(storage_options, cache_dir)
            for x in pending:
                x._cbf_resolve(remote)
        d = deserializers[0]
        given: dict[str, Any] = dict(max_samples=max_samples, max_sweeps=max_sweeps,
                     randomization_seed=randomization_seed, trace_level=trace_level,
                     frame_mode=frame_mode, truncation_length=truncation_length,
                     randomize=randomize, max_errors=max_errors, num_threads=num_threads,
                     prefetch_chunks=prefetch_chunks, keep_data_in_memory=keep_data_in_memory,
                     cache_index=cache_index, chunk_size_in_bytes=chunk_size_in_bytes,
                     precision=precision, skip_sequence_ids=skip_sequence_ids,
                     chunk_cache=chunk_cache, chunk_cache_limit=chunk_cache_limit,
                     bad_records=bad_records)
        opts = {k: v for k, v in given.items() if v is not None}
        opts.update(d["options"])
        infos: list[StreamInformation] = []
        dtype = "float64" if opts.get("precision") in ("double", "float64") else "float32"

        def stream_tuples(des, record=True):
            out = []
            for name, sd in des["input"].items():
                if not isinstance(sd, StreamDef):
                    raise TypeError("CTFDeserializer.streams[%r]: must be a StreamDef (got %r)"
                                    % (name, sd))
                out.append((name, sd["field"], sd["shape"], sd["is_sparse"],
                            sd["defines_mb_size"]))
                if record:
                    infos.append(StreamInformation(name, len(infos),
                                               "sparse" if sd["is_sparse"] else "dense",
                                                   dtype, (sd["shape"],),
                                                   sd["defines_mb_size"]))
            return out

        streams = stream_tuples(d)
        # Reader parameters apply to the whole source at once, as in the configuration language:
        # a joined deserializer may repeat what the source or the first deserializer says, and
        # only skip_sequence_ids is its own. Anything else would be silently ignored: refused.
        for i, j in enumerate(deserializers[1:], 1):
            for key, value in j["options"].items():
                mine = opts.get(key, _table_default(key))
                if key != "skip_sequence_ids" and value != mine:
                    raise ValueError(
                        "MinibatchSource.deserializers[%d].%s: reader parameters apply to all "
                        "deserializers at once; set it on the MinibatchSource or the first "
                        "deserializer (got %r here, %r for the source)" % (i, key, value, mine))
        # Further deserializers are joined by sequence key to the first (the primary); their
        # streams follow the primary's in every minibatch.
        joins = [(j["file"] if isinstance(j["file"], list) else [j["file"]], stream_tuples(j),
                  bool(j["options"].get("skip_sequence_ids", skip_sequence_ids)))
                 for j in deserializers[1:]]
        self._frame_mode = bool(frame_mode)
        # The values go to the C library as given, under its own names (the table's fields).
        # chunk_cache and bad_records, paths, are not table rows: they keep their names.
        self._params: dict[str, Any] = {_PARAMS[k]["field"] if k in _PARAMS else k: v
                                        for k, v in opts.items()}
        if randomization_window_in_samples:
            self._params["randomization_window"] = randomization_window_in_samples
            self._params["window_in_samples"] = True
        elif randomization_window_in_chunks is not None:
            self._params["randomization_window"] = randomization_window_in_chunks
        if log is not None:
            self._params["log"] = log
        self._path = d["file"]
        # Remote paths (s3://, http(s)://): endpoint, credentials and the index cache directory
        # resolved here from storage_options and the environment (docs/remote.md).
        every = [x for part in (mixed["parts"] if mixed is not None else [deserializers])
                 for x in part]
        if any(_remote.any_remote(x["file"]) for x in every):
            self._params["remote"] = _remote.resolve(storage_options, cache_dir, s3=any(
                _remote.any_s3(x["file"]) for x in every))
        self._mixed = mixed is not None
        if mixed is not None:
            # The mix's streams are every stream of its first part (primary, then joins); each
            # part names its own primary's streams (aliases) and joins.
            parts = []
            for part, weight in zip(mixed["parts"], mixed["weights"]):
                primary = part[0]
                pj = [(j["file"] if isinstance(j["file"], list) else [j["file"]],
                       stream_tuples(j, False),
                       bool(j["options"].get("skip_sequence_ids", skip_sequence_ids)))
                      for j in part[1:]]
                parts.append((primary["file"] if isinstance(primary["file"], list)
                              else [primary["file"]], stream_tuples(primary, False),
                              pj or None,
                              bool(primary["options"].get("skip_sequence_ids", False)),
                              weight))
            all_streams = streams + [t for j in joins for t in j[1]]
            self._path = [p[0] for p in parts]
            self._params.pop("skip_sequence_ids", None)  # per part otherwise
            if skip_sequence_ids is not None:
                self._params["skip_sequence_ids"] = skip_sequence_ids
            self._params["mix"] = parts
            self._reader = _ctfio.Reader(None, all_streams, **self._params)
        else:
            if joins:
                self._params["joins"] = joins
            self._reader = _ctfio.Reader(d["file"], streams, **self._params)
        self._infos = infos
        self._keys = tuple(infos)
        self.streams = _Record((si.name, si) for si in infos)

    # -- cntk.io API --------------------------------------------------------------------------

    def stream_infos(self) -> list[StreamInformation]:
        return list(self._infos)

    def stream_info(self, name: str) -> StreamInformation:
        try:
            return self.streams[name]
        except KeyError:
            raise KeyError("no stream named %r (streams: %s)"
                           % (name, ", ".join(self.streams))) from None

    def next_minibatch(self, minibatch_size_in_samples: int,
                       input_map: Mapping[Any, StreamInformation | str] | None = None,
                       device: Any = None, num_data_partitions: int | None = None,
                       partition_index: int | None = None, *,
                       number_of_workers: int | None = None,
                       worker_rank: int | None = None) -> dict[Any, MinibatchData]:
        """The next minibatch: {StreamInformation: MinibatchData} (keyed by ``input_map``'s keys
        when given), or an empty dict at the end of the data. Workers: ``number_of_workers`` /
        ``worker_rank`` (rules 7.1) or CNTK's ``num_data_partitions`` / ``partition_index``."""
        if num_data_partitions is None and partition_index is None and \
                number_of_workers is None and worker_rank is None:
            n, r = 1, 0
        else:
            n, r = _workers(num_data_partitions, partition_index, number_of_workers,
                            worker_rank)
        return self._read(minibatch_size_in_samples, n, r, input_map)

    def _read(self, num_samples, n, r, input_map=None, period=0):
        """next_minibatch's work: one call into the C reader, then one that makes every
        stream's MinibatchData (no array yet: each is made when first asked for). ``period``:
        the reader cuts the request at its multiples (``Reader.next``)."""
        reader = self._reader
        mb = reader.next(num_samples, n, r, period)
        if mb is None:
            return {}
        try:
            out = mb.stream_data(MinibatchData, self._keys, self._frame_mode)
            if input_map:
                out = {var: out[_resolve(self, si)] for var, si in input_map.items()}
        except BaseException:
            # Ctrl-C (or any error) between the C call and the return: the minibatch never
            # reaches the caller, so the reader goes back to where it was before it.
            reader.undo()
            raise
        return out

    def _timeline(self):
        """(position, samples_per_sweep) now: where the next minibatch starts."""
        return self._reader.position, self._reader.samples_per_sweep

    @property
    def _positional_state(self):
        """A timeline position determines the checkpoint state (not with truncated BPTT,
        whose state also holds the partly delivered sequences, nor for a mix, whose state holds
        every part's position)."""
        return not self._params.get("truncation_length") and not self._mixed

    def _state_at(self, position):
        """The checkpoint state this reader had, or will have, at ``position`` of its timeline
        (``_positional_state`` readers only), made by the C reader without reading anything."""
        return json.loads(self._reader.state_at(position))

    def state_at(self, position: int) -> dict[str, Any]:
        """The checkpoint state at ``position`` of the global timeline (any sweep, the same on
        every worker): ``restore_from_checkpoint`` of it continues exactly as the
        uninterrupted run did from there, with any number of workers (a replay of any step).
        For one data set (files, a corpus, a join, remote objects) without truncated BPTT it is
        made from the position alone, reading nothing. For a mix it is found by a seek of this
        reader (which reads the records of each part's data before the position), and the
        reader is then put back where it was. Truncated BPTT raises ValueError: its state at a
        position depends on how earlier minibatches split the sequences."""
        position = _check.count(position, "state_at: position")
        if self._positional_state:
            return self._state_at(position)
        if self._params.get("truncation_length"):
            raise ValueError("state_at: a truncated-BPTT reader's state at another position "
                             "depends on the minibatches before it; take its state there")
        here = self._reader.get_state()
        try:
            self._reader.position = position
            state: dict[str, Any] = json.loads(self._reader.get_state())
        finally:
            self._reader.restore_state(here)
        return state

    def get_checkpoint_state(self) -> dict[str, Any]:
        state: dict[str, Any] = json.loads(self._reader.get_state())
        return state

    def restore_from_checkpoint(self, state: dict[str, Any] | str | bytes) -> None:
        """Continue from a ``get_checkpoint_state()`` (a dict, or its JSON text)."""
        if isinstance(state, dict):
            state = json.dumps(state)
        elif not isinstance(state, (str, bytes)):
            raise TypeError("restore_from_checkpoint: the state must be the dict "
                            "get_checkpoint_state() returned, or its JSON text (got %s)"
                            % type(state).__name__)
        self._reader.restore_state(state)

    def skip(self, num_samples: int) -> None:
        """Skip ``num_samples`` samples of the global timeline without delivering them: the
        next minibatch starts at the first sequence boundary at or after the position plus
        ``num_samples`` (the same on every worker, so call it on every rank). The checkpoint
        state then lists the stretch under ``"skipped"`` (``"from-to;..."``) and
        ``"skipped_samples"``, and a restore keeps them. Where every sequence is one sample,
        the skipped chunks are not read. Not with ``truncation_length`` (ValueError)."""
        self._reader.skip(num_samples)

    @property
    def current_position(self) -> dict[str, Any]:
        return self.get_checkpoint_state()

    @current_position.setter
    def current_position(self, state: dict[str, Any] | str | bytes) -> None:
        self.restore_from_checkpoint(state)

    # -- ctfio extras -------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters: sequences, samples, errors, dropped samples/rows/sequences, residency;
        ``"perf"``: where the time goes, per stage (times in nanoseconds, bytes), with
        ``["perf"]["verdict"]``, the stage that limits throughput (``stage``, its ``share`` of
        the consumer's time, and a ``text`` saying what to change). docs/performance.md."""
        s: dict[str, Any] = dict(self._reader.stats())
        s["perf"] = self._reader.perf()
        return s

    @property
    def files(self) -> list[str]:
        """The primary deserializer's files, patterns expanded: a minibatch's per-sequence file
        indices (``MinibatchData.files``) index this list; (file, key) identifies a sequence."""
        return self._reader.files

    def close(self) -> None:
        self._reader.close()

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def _cuts_at_period(self):
        """``_next`` takes ``period`` (the C reader cuts requests at its multiples); not when a
        subclass reads its own way."""
        return type(self).next_minibatch is MinibatchSource.next_minibatch

    def _next(self, num_samples, number_of_workers=1, worker_rank=0, device=None, period=0):
        if not self._cuts_at_period:  # a subclass's next_minibatch (drivers pass no period)
            return self.next_minibatch(num_samples, device=device,
                                       num_data_partitions=number_of_workers,
                                       partition_index=worker_rank)
        return self._read(num_samples, number_of_workers, worker_rank, period=period)

    def __repr__(self) -> str:
        return "MinibatchSource(%r, %s)" % (self._path, ", ".join(
            "%s=%r" % kv for kv in sorted(self._params.items()) if kv[0] not in ("log", "remote")))

    @classmethod
    def from_config(cls: type[_S], path: PathArg, section: str | None = None,
                    overrides: Iterable[str] = (), **kwargs: Any) -> _S:
        """A source from a BrainScript reader configuration file (rules 3)."""
        c = cast("dict[str, Any]", _ctfio.bsconfig_load(path, section, tuple(overrides)))

        def stream_defs(defs):
            return {name: StreamDef(field=alias, shape=dim, is_sparse=sparse,
                                    defines_mb_size=mbs)
                    for name, alias, dim, sparse, mbs in defs}
        binary = any(dim == 0 for _n, _a, dim, _s, _m in c["streams"])
        streams = None if binary else stream_defs(c["streams"])
        # A corpus (several files or a pattern) and joined deserializers are passed on as
        # written, so that nothing the configuration names is dropped on the way.
        files = c["paths"] if len(c.get("paths", ())) > 1 else c["path"]
        joined = [CTFDeserializer(j_paths if len(j_paths) > 1 else j_paths[0],
                                  stream_defs(j_streams))
                  for j_paths, j_streams, _skip, _origin in c.get("joins", ())]
        # Every table parameter MinibatchSource has a keyword for, as the file set it.
        args = {kw: c[p["field"]] for kw, p in _PARAMS.items()}
        args["chunk_cache"] = c.get("chunk_cache")
        args["bad_records"] = c.get("bad_records")
        if c["window_in_samples"]:
            args["randomization_window_in_samples"] = c["randomization_window"]
        else:
            args["randomization_window_in_chunks"] = c["randomization_window"]
        args.update(kwargs)
        if c.get("mix"):
            # The mix form: every part a deserializer of its own, with the mix's streams unless
            # it names its own (aliases).
            parts = [CTFDeserializer(m_paths if len(m_paths) > 1 else m_paths[0],
                                     stream_defs(m_streams) if m_streams else streams,
                                     skip_sequence_ids=m_skip)
                     for m_paths, m_streams, m_skip, _w in c["mix"]]
            return cls(Mix(parts, [w for *_rest, w in c["mix"]]), **args)
        primary: CTFDeserializer
        if binary:
            # The binary reader's form (input = [ NAME = [ original = ... ] ]): the file
            # holds the dimensions and kinds.
            primary = CBFDeserializer(files, {
                name: StreamDef(field=alias or name, shape=dim or None, is_sparse=sparse,
                                defines_mb_size=mbs)
                for name, alias, dim, sparse, mbs in c["streams"]})
        else:
            primary = CTFDeserializer(files, streams)
        return cls([primary] + joined if joined else primary, **args)


def _resolve(source, si):
    if isinstance(si, StreamInformation):
        return si
    return source.stream_info(si)


class UserMinibatchSource(MinibatchSource):
    """Base class of user-defined sources (rules 11). Implement ``stream_infos()`` and
    ``next_minibatch(num_samples, number_of_workers, worker_rank, device=None)`` returning
    ``{StreamInformation: MinibatchData}``; optionally ``get_checkpoint_state()`` and
    ``restore_from_checkpoint(state)``. Accepted wherever a MinibatchSource is."""

    # Unknown for user sources: drivers read the timeline from the checkpoint state (once) and
    # the minibatches' attributes, and keep a checkpoint state per minibatch.
    _timeline = None  # type: ignore[assignment]  # no timeline: None, not a method
    _positional_state = False

    def __init__(self) -> None:
        self._frame_mode = False

    @property
    def streams(self) -> _Record:  # type: ignore[override]  # made from stream_infos()
        return _Record((si.name, si) for si in self.stream_infos())

    def stream_infos(self) -> list[StreamInformation]:
        raise NotImplementedError("UserMinibatchSource subclasses implement stream_infos()")

    def stream_info(self, name: str) -> StreamInformation:
        for si in self.stream_infos():
            if si.name == name:
                return si
        raise KeyError("no stream named %r" % (name,))

    # CNTK's UserMinibatchSource signature, not MinibatchSource's.
    def next_minibatch(  # type: ignore[override]
        self, num_samples: int, number_of_workers: int = 1, worker_rank: int = 0,
        device: Any = None,
    ) -> dict[Any, MinibatchData]:
        raise NotImplementedError("UserMinibatchSource subclasses implement next_minibatch()")

    def get_checkpoint_state(self) -> dict[str, Any]:
        return {}

    def restore_from_checkpoint(self, state: Any) -> None:
        pass

    # CNTK's signature, without MinibatchSource's `period` (drivers pass none to user sources).
    def _next(  # type: ignore[override]
        self, num_samples, number_of_workers=1, worker_rank=0, device=None
    ):
        return self.next_minibatch(num_samples, number_of_workers, worker_rank, device)

    def stats(self) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return "%s(streams=%s)" % (type(self).__name__, [si.name for si in self.stream_infos()])
