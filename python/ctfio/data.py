"""``MinibatchSourceFromData``: CNTK's in-memory minibatch source (rules 11) with the file
reader's minibatch, sweep, worker and checkpoint semantics (rules 6-8).

    src = ctfio.MinibatchSourceFromData(dict(x=features, y=labels))
    mb = src.next_minibatch(64)
    x = mb[src.streams.x].asarray()

Each stream's data is one of

* a dense NumPy array ``(num_samples, dim)`` (or ``(num_samples,)`` for dim 1): every row is one
  sample and its own sequence of length 1;
* a list of per-sequence arrays, each ``(length, dim)`` (or ``(length,)``): variable-length
  sequences;
* a SciPy sparse matrix ``(num_samples, dim)``: every row one sample, a sequence of length 1;
* a list of SciPy sparse matrices, each ``(length, dim)``: sparse sequences;
* a ``ctfio.Value`` (dense sequences, or ``Value.one_hot`` sparse ones).

Every stream must hold the same number of sequences. float32 and float64 data keep their type,
other numeric types become float32.

The sequences are delivered in the given order in every sweep (no randomization, as in CNTK).
The minibatches are the file reader's with ``randomize=False``: the cut and the worker split are
the C library's own functions (ctf_sweep_cut, ctf_sweep_owned), fed with where each sequence
starts, a sequence counting with the length of its longest stream: the first sequence is always
taken, then sequences follow while the total stays <= K (no look-ahead), across sweep
boundaries, and worker r of N receives the sequences whose index in the sweep is r mod N. Every
``MinibatchData`` carries the timeline (``position``, ``sweep``, ``global_samples``,
``samples_per_sweep``, ``end_of_sweep``) like the file reader's, and holds one gathered block
per stream: ``values`` is that block, ``as_sequences()`` and (for sequences of one length)
``asarray()`` are views of it. Differences from CNTK
(rules 11, 13): a sequence longer than the request is returned alone (CNTK returned an empty
minibatch forever), the counts of a worker's MinibatchData are its own (CNTK reported the global
ones), minibatches cross sweep boundaries and workers share one position, so the checkpoint is
the same on every worker and can be restored with another worker count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from . import _check, _ctfio
from .source import (
    FULL_DATA_SWEEP,
    INFINITELY_REPEAT,
    MinibatchData,
    StreamInformation,
    UserMinibatchSource,
    Value,
    _np,
    _resolve,
)

__all__ = ["MinibatchSourceFromData"]

_STATE_VERSION = 1


def _float_dtype(dtype, where):
    """float32/float64 are kept, other numeric types become float32."""
    np = _np()
    dtype = np.dtype(dtype)
    if dtype in (np.float32, np.float64):
        return dtype
    if dtype.kind in "biuf":
        return np.dtype(np.float32)
    raise ValueError("%s: data must be numeric (got dtype %s)" % (where, dtype))


def _dense_block(arr, where):
    """A (rows, dim) float array from a 1-D or 2-D array-like."""
    np = _np()
    a = np.asarray(arr)
    if a.ndim == 1:
        a = a.reshape(-1, 1)
    if a.ndim != 2:
        raise ValueError(
            "%s: must be 1-D or 2-D (samples x dim), got shape %s; pass "
            "sequences as a list of (length, dim) arrays" % (where, a.shape)
        )
    return a


class _Stream:
    """One stream held in memory: a flat (total_samples, dim) block (NumPy or SciPy CSR) and the
    sequence offsets into it."""

    __slots__ = ("name", "sparse", "block", "offsets", "lengths", "dim", "dtype")

    def __init__(self, name: str, data: Any) -> None:
        np = _np()
        where = "MinibatchSourceFromData: stream %r" % (name,)
        self.name = name
        if isinstance(data, tuple):
            raise TypeError(
                "%s: CNTK's (data, type) form is not supported; pass the data alone "
                "(the type is taken from it)" % where
            )
        if isinstance(data, Value):
            if data.is_sparse:
                import scipy.sparse

                data = [scipy.sparse.csr_matrix(s) for s in data.sequences()]
            else:
                data = list(data.sequences())
        if isinstance(data, list):
            self._from_sequences(data, where)
        elif hasattr(data, "tocsr"):
            m = data.tocsr()
            if m.ndim != 2:
                raise ValueError(
                    "%s: a sparse matrix must be 2-D (got shape %s)" % (where, m.shape)
                )
            self.sparse = True
            self.dtype = _float_dtype(m.dtype, where)
            self.block = m.astype(self.dtype)
            self.lengths = np.ones(m.shape[0], np.int64)
        else:
            a = _dense_block(data, where)
            self.sparse = False
            self.dtype = _float_dtype(a.dtype, where)
            self.block = np.ascontiguousarray(a, dtype=self.dtype)
            self.lengths = np.ones(a.shape[0], np.int64)
        self.dim = int(self.block.shape[1])
        if self.dim < 1:
            raise ValueError("%s: the sample dimension must be >= 1 (got %d)" % (where, self.dim))
        if len(self.lengths) == 0:
            raise ValueError("%s: holds no sequence" % where)
        self.offsets = np.concatenate(([0], np.cumsum(self.lengths))).astype(np.int64)

    def _from_sequences(self, seqs, where):
        np = _np()
        if not seqs:
            raise ValueError("%s: holds no sequence" % where)
        kinds = {hasattr(s, "tocsr") for s in seqs}
        if len(kinds) != 1:
            raise ValueError("%s: the sequences mix SciPy sparse matrices and dense arrays" % where)
        self.sparse = kinds.pop()
        if self.sparse:
            import scipy.sparse

            mats = [s.tocsr() for s in seqs]
            parts = mats
        else:
            parts = [_dense_block(s, "%s, sequence %d" % (where, i)) for i, s in enumerate(seqs)]
        dims = {p.shape[1] for p in parts}
        if len(dims) != 1:
            raise ValueError(
                "%s: the sequences have different sample dimensions %s" % (where, sorted(dims))
            )
        for i, p in enumerate(parts):
            if p.shape[0] == 0:
                raise ValueError(
                    "%s: sequence %d is empty (every sequence needs >= 1 sample)" % (where, i)
                )
        self.dtype = _float_dtype(np.result_type(*[p.dtype for p in parts]), where)
        self.lengths = np.asarray([p.shape[0] for p in parts], np.int64)
        if self.sparse:
            self.block = scipy.sparse.vstack(parts, format="csr").astype(self.dtype)
        else:
            self.block = np.concatenate(parts).astype(self.dtype, copy=False)
            self.block = np.ascontiguousarray(self.block)

    def take(self, seq_idx):
        """The samples of the sequences ``seq_idx`` (in that order): (block, lengths)."""
        np = _np()
        starts = self.offsets[seq_idx]
        lens = self.lengths[seq_idx]
        if len(seq_idx) == 0:
            rows = np.zeros(0, np.int64)
        else:
            # rows of sequence k: starts[k] .. starts[k] + lens[k] - 1
            first = np.concatenate(([0], np.cumsum(lens)[:-1]))
            rows = np.repeat(starts - first, lens) + np.arange(int(lens.sum()))
        return self.block[rows], lens.astype(np.uint32)


class MinibatchSourceFromData(UserMinibatchSource):
    """``MinibatchSourceFromData(data_streams, max_samples=INFINITELY_REPEAT)``: a minibatch
    source over in-memory data (CNTK's ``cntk.io.MinibatchSourceFromData``).

    ``data_streams`` maps each stream name to its data (see the module docstring); the streams
    are numbered in dict order. ``max_samples`` ends the data after that many samples (each
    sequence counted with its longest stream; ``FULL_DATA_SWEEP`` means one sweep,
    ``INFINITELY_REPEAT`` no limit); afterwards ``next_minibatch`` returns an empty dict.
    """

    def __init__(self, data_streams: dict[str, Any], max_samples: int = INFINITELY_REPEAT) -> None:
        super().__init__()
        np = _np()
        if not isinstance(data_streams, dict) or not data_streams:
            raise ValueError(
                "MinibatchSourceFromData.data_streams: must be a non-empty dict "
                "name -> data (got %r)" % (type(data_streams).__name__,)
            )
        self._streams = [_Stream(name, data) for name, data in data_streams.items()]
        first = self._streams[0]
        for s in self._streams[1:]:
            if len(s.lengths) != len(first.lengths):
                raise ValueError(
                    "MinibatchSourceFromData: stream %r has %d sequences but stream "
                    "%r has %d; all streams must have the same number"
                    % (s.name, len(s.lengths), first.name, len(first.lengths))
                )
        self._infos = [
            StreamInformation(s.name, i, "sparse" if s.sparse else "dense", s.dtype, (s.dim,))
            for i, s in enumerate(self._streams)
        ]
        # A sequence counts with its longest stream; _starts[i] is its position in the sweep.
        seq_len = np.max(np.stack([s.lengths for s in self._streams]), axis=0)
        self._num_seqs = len(seq_len)
        self._starts = np.concatenate(([0], np.cumsum(seq_len))).astype(np.uint64)
        self._sweep_samples = int(self._starts[-1])
        limit = _check.limit(max_samples, "MinibatchSourceFromData.max_samples")
        self._limit = self._sweep_samples if limit == FULL_DATA_SWEEP else limit
        self._pos = 0

    # -- cntk.io API --------------------------------------------------------------------------

    def stream_infos(self) -> list[StreamInformation]:
        return list(self._infos)

    # UserMinibatchSource's signature (CNTK's), with MinibatchSource's keywords too.
    def next_minibatch(  # type: ignore[override]
        self,
        num_samples: int,
        number_of_workers: int = 1,
        worker_rank: int = 0,
        device: Any = None,
        *,
        input_map: Mapping[Any, StreamInformation | str] | None = None,
        num_data_partitions: int | None = None,
        partition_index: int | None = None,
    ) -> dict[Any, MinibatchData]:
        """The next minibatch, ``{StreamInformation: MinibatchData}`` (keyed by ``input_map``'s
        keys when given), or ``{}`` once ``max_samples`` is reached. ``num_samples`` is the
        global minibatch size; the worker gets its share of it (possibly no sequence at all:
        MinibatchData with num_sequences 0, which is not the end). ``device`` is accepted for
        CNTK compatibility (the data stays in host memory)."""
        if num_data_partitions is not None:
            number_of_workers = num_data_partitions
        if partition_index is not None:
            worker_rank = partition_index
        k = _check.positive(num_samples, "next_minibatch: num_samples")
        n, r = _check.workers(number_of_workers, worker_rank, "next_minibatch: ")
        before = self._pos
        try:
            return self._minibatch(k, n, r, before, input_map)
        except BaseException:
            self._pos = before  # Ctrl-C or an error: the minibatch never reached the caller
            raise

    def _minibatch(self, k, n, r, before, input_map):
        idx, self._pos, end_of_sweep = _ctfio.sweep_cut(self._starts, before, k, self._limit, n, r)
        if self._pos == before:
            return {}
        first_sweep = before // self._sweep_samples
        np = _np()
        idx = np.frombuffer(idx, np.uint64).astype(np.int64)
        out = {}
        for si, s in zip(self._infos, self._streams):
            # One gathered block per stream; MinibatchData cuts sequences from it as views.
            block, lengths = s.take(idx)
            md = MinibatchData(block, len(idx), int(lengths.sum()), end_of_sweep)
            md._user_layout = (lengths, s.dim, s.dtype)
            md.position, md.sweep = self._pos, first_sweep
            md.global_samples, md.samples_per_sweep = self._pos - before, self._sweep_samples
            out[si] = md
        if input_map:
            return {var: out[_resolve(self, si)] for var, si in input_map.items()}
        return out

    def get_checkpoint_state(self) -> dict[str, Any]:
        """``{"position": p, ...}``: the global sample position after the last minibatch (the
        same on every worker; also under the file reader's key ``minibatchSourcePosition``),
        with the number of sequences and samples per sweep as a fingerprint of the data."""
        return {
            "version": _STATE_VERSION,
            "position": self._pos,
            "minibatchSourcePosition": self._pos,
            "sequences": self._num_seqs,
            "samples_per_sweep": self._sweep_samples,
        }

    def restore_from_checkpoint(self, state: dict[str, Any] | str | bytes) -> None:
        """Continue from a state of ``get_checkpoint_state`` (of this source or one over the
        same data, with any worker count); raises ``ctfio.StateError`` for another data set."""
        if isinstance(state, (str, bytes)):
            try:
                state = json.loads(state)
            except ValueError as e:
                raise _ctfio.StateError("checkpoint state: not valid JSON (%s)" % e) from None
        if not isinstance(state, dict):
            raise _ctfio.StateError(
                "checkpoint state: must be a dict (got %r)" % (type(state).__name__,)
            )
        pos = state.get("position", state.get("minibatchSourcePosition"))
        if (
            "position" in state
            and "minibatchSourcePosition" in state
            and state["position"] != state["minibatchSourcePosition"]
        ):
            raise _ctfio.StateError(
                "checkpoint state: position %r and minibatchSourcePosition "
                "%r differ" % (state["position"], state["minibatchSourcePosition"])
            )
        if not isinstance(pos, int) or isinstance(pos, bool) or pos < 0:
            raise _ctfio.StateError(
                "checkpoint state: missing or invalid position (got %r); "
                "not a MinibatchSourceFromData state?" % (pos,)
            )
        if state.get("version", _STATE_VERSION) != _STATE_VERSION:
            raise _ctfio.StateError(
                "checkpoint state: version %r (this ctfio writes %d)"
                % (state.get("version"), _STATE_VERSION)
            )
        for key, mine in (
            ("sequences", self._num_seqs),
            ("samples_per_sweep", self._sweep_samples),
        ):
            if state.get(key) != mine:
                raise _ctfio.StateError(
                    "checkpoint state: it was saved for data with %s=%r, this source has %r "
                    "(different data)" % (key, state.get(key), mine)
                )
        try:
            self._pos = _ctfio.sweep_boundary(self._starts, pos)
        except (ValueError, OverflowError) as e:
            raise _ctfio.StateError("checkpoint state: position %r: %s" % (pos, e)) from None

    # -- the timeline -------------------------------------------------------------------------

    def _timeline(self):  # type: ignore[override]  # this source has a timeline
        """(position, samples_per_sweep) now: where the next minibatch starts."""
        return self._pos, self._sweep_samples

    _positional_state = True

    def _state_at(self, position):
        """The checkpoint state at an earlier ``position`` of the timeline."""
        return dict(
            self.get_checkpoint_state(), position=position, minibatchSourcePosition=position
        )

    def __repr__(self) -> str:
        return (
            "MinibatchSourceFromData(streams=%s, sequences=%d, samples_per_sweep=%d, "
            "max_samples=%s)"
            % ([si.name for si in self._infos], self._num_seqs, self._sweep_samples, self._limit)
        )
