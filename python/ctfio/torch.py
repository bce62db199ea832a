"""PyTorch adapter: ``CTFIterableDataset`` turns any ctfio source into an iterable of dicts of
``torch.Tensor`` (rules 7-10, docs/torch.md).

    import ctfio, ctfio.torch
    ds = ctfio.torch.CTFIterableDataset(lambda: ctfio.MinibatchSource(...), minibatch_size=256)
    for epoch in range(10):
        for batch in ds:                   # or torch.utils.data.DataLoader(ds, batch_size=None)
            x, y = batch["features"], batch["labels"]
    torch.save({"data": ds.state_dict(), ...}, "ckpt.pt")   # ds.load_state_dict(...) resumes

What it does, in order, for every step:

1. **Workers.** The rank and worker count come from the arguments, else an initialised
   ``torch.distributed`` process group, else the environment (``RANK``/``WORLD_SIZE``,
   ``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE``, ``PMI_RANK``/``PMI_SIZE``), else one worker
   (``detect_workers``). Inside a ``DataLoader`` worker process each loader worker is a worker
   of its own: ``rank * num_workers + id`` of ``world_size * num_workers``.
2. **Cut.** ``source._next(K, N, r)``: K is the *global* minibatch size; every rank receives its
   share of the same global minibatch and all ranks advance to the same position, so epochs
   end at the same step on every rank and a rank with no data gets empty tensors. Requests are
   cut at epoch ends by the rules of ctfio/_loop.py, which training_session follows too; the
   position comes with every minibatch (``MinibatchData.position``).
3. **Tensors.** The minibatch buffers become tensors without copying (``torch.from_numpy`` over
   the C reader's memory; the tensor keeps the minibatch alive; the lengths and CSR row pointers
   are converted, a copy of one number per sequence or sample). Dense streams are ``packed``
   (``(num_samples, dim)`` plus ``<name>_lengths``) or ``padded`` (``(num_sequences, max_len,
   dim)`` plus a boolean ``<name>_mask``; a view when all sequences have one length, else the
   one copy padding needs); sparse streams are ``torch.sparse_csr`` ``(num_samples, dim)`` whose
   values and column indices are the reader's memory, plus ``<name>_lengths``. In frame mode a
   stream is ``(num_sequences, dim)``. From ctfio's file source the tensors are made from the C
   minibatch's buffers by a plan worked out once per iteration (``_reader_plan``); other
   sources go through their ``MinibatchData`` (``_dense``, ``_sparse``): the same tensors.
4. **Device.** The next minibatch is read one step ahead. With ``device="cuda"`` it is copied
   through pinned host buffers on a side stream while the caller trains on the current one
   (double buffering, ctfio/_staging.py, shared with the providers); before a batch is handed
   out the current stream waits for its copy event and the tensors are ``record_stream``-ed on
   it. With ``device="cpu"`` the tensors are handed out as they are.
5. **State.** ``state_dict()`` is the source's checkpoint state after the last batch handed out
   (the batch read ahead does not count); ``load_state_dict()`` restores it before the next
   iteration (torchdata's ``StatefulDataLoader`` convention). The state is the same on every
   rank, so it can be restored with another rank count (elastic). Where a position determines
   the state it is built from the position when asked, not taken per minibatch.

torch is imported by this module only: ``import ctfio`` never imports it, and ctfio works
without PyTorch installed.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, Callable, Union

try:
    import torch
    import torch.utils.data
except ImportError as e:  # pragma: no cover - exercised only without torch
    raise ImportError("ctfio.torch needs PyTorch (pip install torch==2.13.0, or ctfio[torch]); "
                      "the rest of ctfio works without it") from e

from . import _check, _staging
from ._loop import Epochs, Step, count_local, drive, end_of_sweep, source_timeline, timeline
from .perf import StatsLogger
from .source import FULL_DATA_SWEEP, INFINITELY_REPEAT, MinibatchData, MinibatchSource, _np

if TYPE_CHECKING:
    # What CTFIterableDataset reads: a source, or a callable that creates one.
    SourceArg = Union[MinibatchSource, Callable[[], MinibatchSource]]
    # One batch: stream name (and its "_lengths"/"_mask" companions, "_keys") -> tensor.
    Batch = dict[str, torch.Tensor]

__all__ = ["CTFIterableDataset", "detect_workers"]

_STATE_VERSION = 1
_EPOCH_NAMES = {FULL_DATA_SWEEP: "FULL_DATA_SWEEP", INFINITELY_REPEAT: "INFINITELY_REPEAT"}

# (rank variable, size variable), in the order they are consulted.
_ENV_PAIRS = (("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
              ("PMI_RANK", "PMI_SIZE"))

# Live C readers inherited through fork() by DataLoader worker processes. Their prefetch threads
# did not survive the fork, so they must never be used or freed there; keeping them referenced
# until the worker calls os._exit() means their destructor never runs.
_FORKED_SOURCES: list[MinibatchSource] = []


def _quiet_once_warnings():
    """torch warns once per process when a tensor wraps read-only memory, when the first
    sparse CSR tensor is made, and when one is made without saying whether to check it (as its
    DataLoader worker transport does). ctfio's buffers are read-only exports of memory that only
    this minibatch owns, so in-place writes are harmless: trigger the three warnings here,
    silenced, instead of in the user's training loop."""
    np = _np()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = np.zeros(1, np.float32)
        a.flags.writeable = False
        torch.frombuffer(a, dtype=torch.float32)
        torch.from_numpy(a)
        parts = (torch.zeros(2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32),
                 torch.zeros(1))
        torch.sparse_csr_tensor(*parts, size=(1, 1), check_invariants=False)
        torch.sparse_csr_tensor(*parts, size=(1, 1))


_quiet_once_warnings()


# ---------------------------------------------------------------------------------------------
# Workers
# ---------------------------------------------------------------------------------------------

def _env_int(name):
    text = os.environ.get(name)
    try:
        return int(text)  # type: ignore[arg-type]  # None: the TypeError below
    except (TypeError, ValueError):
        raise ValueError("environment variable %s: must be an integer (got %r)"
                         % (name, text)) from None


def detect_workers(number_of_workers: int | None = None,
                   worker_rank: int | None = None) -> tuple[int, int]:
    """``(number_of_workers, worker_rank)`` of this process: the explicit arguments where given,
    else an initialised ``torch.distributed`` process group, else the first complete pair of
    ``RANK``/``WORLD_SIZE``, ``OMPI_COMM_WORLD_RANK``/``OMPI_COMM_WORLD_SIZE``,
    ``PMI_RANK``/``PMI_SIZE`` in the environment, else ``(1, 0)``."""
    n, r = 1, 0
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        n, r = dist.get_world_size(), dist.get_rank()
    else:
        for rank_var, size_var in _ENV_PAIRS:
            if rank_var in os.environ and size_var in os.environ:
                n, r = _env_int(size_var), _env_int(rank_var)
                try:
                    _check.workers(n, r)
                except ValueError:
                    raise ValueError("environment: %s=%s, %s=%s: need %s >= 1 and 0 <= %s < %s"
                                     % (rank_var, os.environ[rank_var], size_var,
                                        os.environ[size_var], size_var, rank_var, size_var)) \
                        from None
                break
    if number_of_workers is not None:
        n = number_of_workers
    if worker_rank is not None:
        r = worker_rank
    return _check.workers(n, r, "workers: ")


# ---------------------------------------------------------------------------------------------
# Minibatch buffers -> tensors (zero-copy)
# ---------------------------------------------------------------------------------------------

class _CSR:
    """The parts of a sparse CSR tensor; assembled after the device transfer so that only dense
    tensors travel (pinning, non_blocking copies and record_stream are all plain there)."""

    __slots__ = ("crow", "col", "values", "size")

    def __init__(self, crow: torch.Tensor, col: torch.Tensor, values: torch.Tensor,
                 size: tuple[int, int]) -> None:
        self.crow, self.col, self.values, self.size = crow, col, values, size

    def parts(self):
        return (self.crow, self.col, self.values)

    def build(self, crow, col, values):
        return torch.sparse_csr_tensor(crow, col, values, size=self.size, check_invariants=False)


def _array(a):
    """``a`` as a NumPy array (the reader's are already: no call)."""
    np = _np()
    return a if type(a) is np.ndarray else np.asarray(a)


def _tensor(arr):
    """A tensor over a NumPy array's memory: no copy when it is C-contiguous (the C reader's
    buffers always are; another array is copied into a C-contiguous one). The tensor holds the
    array, which holds the reader's buffer and so the minibatch: the memory stays valid (the
    reader does not reuse it) as long as the tensor lives."""
    if not arr.flags.c_contiguous:
        arr = _np().ascontiguousarray(arr)
    return torch.from_numpy(arr)


def _lengths(md):
    """int64 lengths: a copy (torch has no uint32 arithmetic) of num_sequences values."""
    return torch.from_numpy(_array(md.lengths).astype(_np().int64))


def _dense(md, name, layout, frame_mode, out):
    """Dense stream -> ``out[name]`` (and its lengths or mask): the values tensor is the
    reader's buffer (no copy); ``padded`` copies only when sequences differ in length."""
    values = _array(md.values)
    if values.ndim != 2:
        values = values.reshape(-1, md.dim)
    values = _tensor(values)
    if frame_mode:
        out[name] = values
        return
    if layout == "packed":
        out[name] = values
        out[name + "_lengths"] = _lengths(md)
        return
    _padded(values, _lengths(md), md.dim, name, name + "_mask", out)


def _padded(values, lengths, dim, name, mask_name, out):
    """``(num_sequences, max_len, dim)`` from packed ``values`` and int64 ``lengths``, plus the
    mask: a view when every sequence has one length, else the one copy padding needs."""
    n = lengths.shape[0]
    width = int(lengths.max()) if n else 0
    mask = torch.arange(width)[None, :] < lengths[:, None]
    if n and bool((lengths == width).all()):
        out[name] = values.view(n, width, dim)        # equal lengths: still a view (no copy)
    else:
        padded = values.new_zeros((n, width, dim))
        padded[mask] = values                         # row-major mask order = sequence order
        out[name] = padded
    out[mask_name] = mask


def _sparse(md, name, frame_mode, out):
    """Sparse stream -> CSR parts in ``out[name]`` (and its lengths): values and column
    indices are the reader's buffers (no copy); the row pointers are converted (a copy of
    num_samples + 1 numbers)."""
    np = _np()
    values_a = _array(md.values)
    values = _tensor(values_a)
    indices = _array(md.indices)
    indptr = _array(md.indptr)
    # torch needs one dtype for both index arrays: the reader's column indices are int32 and
    # shared; the row pointers (num_samples + 1 of them) are converted, unless nnz needs int64.
    if values_a.shape[0] < 2**31 and indices.dtype == np.int32:
        crow = torch.from_numpy(indptr.astype(np.int32))
        col = _tensor(indices)
    else:
        crow = _tensor(indptr.astype(np.int64, copy=False))
        col = torch.from_numpy(indices.astype(np.int64))
    out[name] = _CSR(crow, col, values, (len(indptr) - 1, md.dim))
    if not frame_mode:
        out[name + "_lengths"] = _lengths(md)


# ---------------------------------------------------------------------------------------------
# The reader's path: a C minibatch -> tensors, planned once per iteration
# ---------------------------------------------------------------------------------------------

# What one selected stream becomes (the first field of a plan entry).
_PLAIN, _PACKED, _PADDED, _CSR_PLAIN, _CSR_LENGTHS = range(5)


def _reader_source(src):
    """Whether ``src`` is ctfio's file source as ctfio defines it (no method of the per-batch
    path overridden), so that batches can be made from its C minibatches directly."""
    from .source import MinibatchSource
    if not isinstance(src, MinibatchSource) or getattr(src, "_reader", None) is None:
        return False
    tp = type(src)
    return all(getattr(tp, m) is getattr(MinibatchSource, m) for m in (
        "next_minibatch", "_next", "_read", "_timeline", "_state_at", "get_checkpoint_state",
        "restore_from_checkpoint", "_positional_state"))


def _reader_plan(src, streams, layout, frame_mode):
    """One entry per delivered stream, ``(kind, stream index, name, lengths or mask name,
    dim)``: everything a batch needs that does not change between minibatches (which streams,
    in which order, sparse or not, the layout, the key names). Unknown names raise here,
    before anything is read."""
    infos = list(src._keys)
    index = {si.name: i for i, si in enumerate(infos)}
    plan = []
    for name in (streams if streams is not None else [si.name for si in infos]):
        i = index.get(name)
        if i is None:
            raise KeyError("CTFIterableDataset.streams: the source has no stream %r "
                           "(streams: %s)" % (name, ", ".join(si.name for si in infos)))
        si = infos[i]
        dim = int(si.shape[0])
        if si.is_sparse:
            plan.append((_CSR_PLAIN if frame_mode else _CSR_LENGTHS, i, name,
                         name + "_lengths", dim))
        elif frame_mode:
            plan.append((_PLAIN, i, name, None, dim))
        elif layout == "packed":
            plan.append((_PACKED, i, name, name + "_lengths", dim))
        else:
            plan.append((_PADDED, i, name, name + "_mask", dim))
    return tuple(plan)


def _reader_batch(mb, plan, with_keys, build_csr):
    """The batch of C minibatch ``mb`` by ``plan``: the same tensors as ``_dense`` /
    ``_sparse`` make from its MinibatchData (values and column indices are the reader's
    buffers; lengths and row pointers converted), without making the MinibatchData. Sparse
    streams are CSR tensors when ``build_csr``, else ``_CSR`` parts for the device transfer."""
    np = _np()
    asarray, from_numpy, int64, buf = np.asarray, torch.from_numpy, np.int64, mb.buffer
    out: dict[str, Any] = {}
    for kind, i, name, aux, dim in plan:
        values = from_numpy(asarray(buf(i, 0)))
        if kind == _PACKED:
            out[name] = values
            out[aux] = from_numpy(asarray(buf(i, 1)).astype(int64))
        elif kind == _PLAIN:
            out[name] = values
        elif kind == _PADDED:
            _padded(values, from_numpy(asarray(buf(i, 1)).astype(int64)), dim, name, aux, out)
        else:
            indptr = asarray(buf(i, 2))
            if values.shape[0] < 2**31:     # the reader's column indices are int32: shared
                crow = from_numpy(indptr.astype(np.int32))
                col = from_numpy(asarray(buf(i, 3)))
            else:
                crow = from_numpy(indptr)
                col = from_numpy(asarray(buf(i, 3)).astype(int64))
            size = (indptr.shape[0] - 1, dim)
            out[name] = torch.sparse_csr_tensor(crow, col, values, size=size,
                                                check_invariants=False) \
                if build_csr else _CSR(crow, col, values, size)
            if kind == _CSR_LENGTHS:
                out[aux] = from_numpy(asarray(buf(i, 1)).astype(int64))
    if with_keys:
        out["_keys"] = from_numpy(asarray(mb.keys).astype(int64))
    return out


# ---------------------------------------------------------------------------------------------
# Device transfer (double buffering)
# ---------------------------------------------------------------------------------------------

class _Transfer:
    """Host -> device copies through ctfio/_staging.py (shared with the providers): ``start``
    issues the copy of batch t+1 while the caller still trains on batch t; ``finish`` makes the
    batch safe to use on the caller's stream and builds the sparse tensors. CPU: no copy."""

    def __init__(self, device: torch.device) -> None:
        self.staging = _staging.Staging(device)
        self.passthrough = self.staging.device.type == "cpu"   # the tensors are the batch

    def start(self, batch):
        if self.passthrough:
            return batch, None
        flat = {}
        for k, v in batch.items():
            if isinstance(v, _CSR):
                for i, part in enumerate(v.parts()):
                    flat[(k, i)] = part
            else:
                flat[k] = v
        return batch, self.staging.start(flat)

    def finish(self, started):
        batch, handle = started
        if handle is None:
            return {k: v.build(*v.parts()) if isinstance(v, _CSR) else v
                    for k, v in batch.items()}
        moved = self.staging.finish(handle)
        return {k: v.build(moved[(k, 0)], moved[(k, 1)], moved[(k, 2)]) if isinstance(v, _CSR)
                else moved[k] for k, v in batch.items()}


_DONE = object()   # the batch needs no transfer.finish (tensors made in place on the CPU)


class _Saved:
    """A checkpoint state as the reader's JSON text, parsed only when asked for (sources
    whose state a position does not determine: one C call per minibatch, no JSON)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


class _At:
    """The source's state at an earlier timeline position, made only when asked for
    (``source._state_at``): for the sources whose state a position determines, the batch read
    ahead costs no checkpoint state per minibatch."""

    __slots__ = ("position",)

    def __init__(self, position: int) -> None:
        self.position = position


def _position(state):
    pos = state.get("minibatchSourcePosition") if isinstance(state, dict) else None
    return pos if isinstance(pos, int) and not isinstance(pos, bool) else None


# ---------------------------------------------------------------------------------------------
# The dataset
# ---------------------------------------------------------------------------------------------

class CTFIterableDataset(torch.utils.data.IterableDataset["Batch"]):
    """An iterable of ``{name: torch.Tensor}`` minibatches from a ctfio source.

    ``source``: a ``ctfio.MinibatchSource`` / ``UserMinibatchSource`` (anything with
    ``_next``), or a zero-argument callable that creates one; the callable is needed when a
    ``DataLoader`` uses worker processes with a file source (each worker opens its own reader).
    ``minibatch_size``: the *global* minibatch size in index samples (rules 6, 7).
    ``epoch_size``: what one ``iter()`` covers: ``FULL_DATA_SWEEP`` (default; one sweep; the
    last request of a sweep is cut at its end so that epochs are exact sweeps),
    ``INFINITELY_REPEAT`` (until the source's own ``max_samples``/``max_sweeps``), or a number of
    index samples (requests are cut at its multiples). Iterations continue from where the last
    one stopped; ``break`` out of a loop rewinds the one batch read ahead.
    ``number_of_workers`` / ``worker_rank``: override ``detect_workers()``.
    ``layout``: ``"packed"`` or ``"padded"`` for dense sequence streams (see the module doc).
    ``streams``: names to deliver (default: all). ``with_keys``: add ``"_keys"``, the int64
    sequence keys of the C reader's minibatch. ``device``: where the tensors go (``"cpu"``,
    ``"cuda"``, ``"cuda:1"``, ...). Use it without worker processes; with a ``DataLoader`` with
    workers keep ``"cpu"`` and let ``pin_memory=True`` do the rest.
    ``log_stats_every``: seconds; while iterating, log the source's input-pipeline summary
    (``ctfio.perf.summary``: the limiting stage and what to change) through the ``"ctfio"``
    logger at INFO this often, and once when an iteration ends (None: never).
    """

    def __init__(self, source: SourceArg, minibatch_size: int, *,
                 epoch_size: int = FULL_DATA_SWEEP, number_of_workers: int | None = None,
                 worker_rank: int | None = None, layout: str = "packed",
                 streams: Iterable[str] | None = None, with_keys: bool = False,
                 device: str | torch.device = "cpu",
                 log_stats_every: float | None = None) -> None:
        super().__init__()
        if log_stats_every is not None:
            StatsLogger(None, log_stats_every)  # checks the value now, not at the first batch
        self.log_stats_every = log_stats_every
        self._factory: Callable[[], MinibatchSource] | None
        self._src: MinibatchSource | None
        if callable(source) and not hasattr(source, "_next"):
            self._factory, self._src = source, None
        elif hasattr(source, "_next"):
            self._factory, self._src = None, source  # type: ignore[assignment]  # has _next
        else:
            raise TypeError("CTFIterableDataset.source: must be a ctfio source or a callable "
                            "that returns one (got %r)" % (source,))
        self._src_pid = os.getpid()
        _check.positive(minibatch_size, "CTFIterableDataset.minibatch_size")
        # FULL_DATA_SWEEP and INFINITELY_REPEAT are counts too: the largest two.
        _check.positive(epoch_size, "CTFIterableDataset.epoch_size")
        if layout not in ("packed", "padded"):
            raise ValueError("CTFIterableDataset.layout: must be 'packed' or 'padded' (got %r)"
                             % (layout,))
        self.minibatch_size = minibatch_size
        self.epoch_size = epoch_size
        self.number_of_workers = number_of_workers
        self.worker_rank = worker_rank
        self.layout = layout
        self.streams = None if streams is None else list(streams)
        self.with_keys = bool(with_keys)
        self.device = torch.device(device)
        self._state: Any = None     # source state after the last batch handed out
        self._restore: Any = None   # a loaded state to apply before the next read
        self._ahead = False         # the source is one batch past self._state
        self._local_samples = 0     # this worker's samples, for sources without a position
        self._batches = 0           # batches handed out, over all iterations
        self._epochs = 0            # epochs whose last batch was handed out
        self._last_keys: Any = None  # (keys, frame_mode) to make last_minibatch from a C one
        self.last_minibatch = None  # the source's {StreamInformation: MinibatchData} of it

    # -- source and workers --------------------------------------------------------------------

    @property
    def source(self) -> MinibatchSource:
        """The source of this process (created from the factory on first use)."""
        if self._src is not None and self._src_pid != os.getpid():
            # A copy made by fork() (a DataLoader worker): a C reader lost its threads.
            if self._factory is None and hasattr(self._src, "_reader"):
                raise RuntimeError(
                    "CTFIterableDataset: a file MinibatchSource cannot be shared with DataLoader "
                    "worker processes; pass a callable that creates it, e.g. "
                    "CTFIterableDataset(lambda: ctfio.MinibatchSource(...), ...), or use "
                    "num_workers=0 (ctfio parses on its own threads)")
            if self._factory is not None:
                if hasattr(self._src, "_reader"):
                    _FORKED_SOURCES.append(self._src)
                self._src = None
            self._src_pid = os.getpid()
            if self._state is not None and self._restore is None:
                self._restore = self._state
            self._ahead = False
        if self._src is None:
            self._src = self._factory()  # type: ignore[misc]  # set when _src is not
            self._src_pid = os.getpid()
            if not hasattr(self._src, "_next"):
                raise TypeError("CTFIterableDataset.source: the callable returned %r, not a "
                                "ctfio source" % (self._src,))
            if self._state is not None and self._restore is None:
                self._restore = self._state
        return self._src

    def workers(self) -> tuple[int, int]:
        """``(number_of_workers, worker_rank)`` this process reads with: the distributed ones
        (``detect_workers``), split further over the workers of a DataLoader."""
        n, r = detect_workers(self.number_of_workers, self.worker_rank)
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            n, r = n * info.num_workers, r * info.num_workers + info.id
        return n, r

    def _resolved(self, state):
        """A state as a dict (an _At is turned into one by the source that made it)."""
        if isinstance(state, _At):
            return self.source._state_at(state.position)
        if isinstance(state, _Saved):
            return json.loads(state.text)
        return state

    def _sync_source(self):
        src = self.source
        if self._restore is not None:
            self._restore = self._resolved(self._restore)
            src.restore_from_checkpoint(self._restore)
            self._state, self._restore, self._ahead = self._restore, None, False
        elif self._ahead:
            self._state = self._resolved(self._state)
            src.restore_from_checkpoint(self._state)   # rewind the batch read ahead
            self._ahead = False
        return src

    def skip(self, num_samples: int) -> None:
        """Skip ``num_samples`` samples of the global timeline (``MinibatchSource.skip``) before
        the next iteration, after a ``load_state_dict`` if one is pending: call it with the same
        number on every rank. ``state_dict()`` afterwards holds the state after the skip (its
        ``source`` lists the stretch under ``"skipped"``)."""
        src = self._sync_source()
        if not hasattr(src, "skip"):
            raise TypeError("CTFIterableDataset.skip: the source %r cannot skip" % (src,))
        src.skip(num_samples)
        self._restore = src.get_checkpoint_state()
        self.last_minibatch = None

    # -- iteration -----------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Batch]:
        if self.log_stats_every is None:
            return self._iter_batches()
        return self._logged(self._iter_batches())

    def _logged(self, batches):
        log = StatsLogger(self.source, self.log_stats_every)
        for batch in batches:
            log.tick()
            yield batch
        log.final()

    def _iter_batches(self):
        if self.device.type != "cpu" and torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("CTFIterableDataset: device=%r inside a DataLoader worker; use "
                               "device='cpu' with DataLoader(pin_memory=True), or num_workers=0"
                               % str(self.device))
        src = self._sync_source()
        n, r = self.workers()
        transfer = _Transfer(self.device)
        frame_mode = bool(getattr(src, "_frame_mode", False))
        if self._state is None:
            self._state = src.get_checkpoint_state()
        pos, per = source_timeline(src, self._state)
        if pos is None and n > 1 and self.epoch_size not in (FULL_DATA_SWEEP,
                                                            INFINITELY_REPEAT):
            warnings.warn("CTFIterableDataset: the source reports no timeline position "
                          "(minibatchSourcePosition); epochs count this worker's own "
                          "samples, so workers may disagree on epoch ends", stacklevel=1)
        # Epochs count the timeline position (the same on every rank) where there is one.
        counted = pos if pos is not None else self._local_samples
        epoch_index = counted // self.epoch_size if self.epoch_size not in (
            FULL_DATA_SWEEP, INFINITELY_REPEAT) else 0
        epochs = Epochs(self.epoch_size, epoch_index, counted, pos, per)
        if pos is not None and _reader_source(src):
            read = self._reader_read(src, n, r, epochs, frame_mode, transfer)
        else:
            read = self._general_read(src, n, r, epochs, frame_mode, transfer)
        k = self.minibatch_size
        # Double buffering: batch t+1 is read (and its device copy issued) before batch t is
        # handed out, except after the batch that ends the epoch.
        for step, ahead in drive(read, epochs, lambda: k, ahead=True, one_epoch=True):
            started, self._state, mb, data, local = step.payload
            batch = started[0] if started[1] is _DONE else transfer.finish(started)
            self._ahead = ahead
            self._batches += 1
            self._epochs += step.ends
            if mb is not None:
                self._last_mb, self._last_data = mb, None
            else:
                self.last_minibatch, self._local_samples = data, local
            yield batch

    def _reader_read(self, src, n, r, epochs, frame_mode, transfer):
        """How ``__iter__`` reads ctfio's file source: the batches, states and epochs of the
        general path, made from the C minibatch directly. What does not change between
        minibatches is worked out here, once (the plan of the streams, whether a position
        determines the state); per minibatch there remain the C call, the tensors and a few
        reads of what the minibatch carries (its position, its end of sweep). The reader's
        position is both the count and the timeline; the worker's own sample count
        (``_local_samples``) stands in for a position, which the reader always reports, so it
        is left as it is."""
        reader = src._reader
        plan = _reader_plan(src, self.streams, self.layout, frame_mode)
        with_keys, direct = self.with_keys, transfer.passthrough
        lazy = bool(src._positional_state)
        self._last_keys = (src._keys, frame_mode)

        def read(request, wanted):
            before = epochs.position
            size, period = epochs.bound(wanted, request)
            mb = reader.next(size, n, r, period)
            if mb is None:
                return None
            try:
                batch = _reader_batch(mb, plan, with_keys, direct)
                started = (batch, _DONE) if direct else transfer.start(batch)
                after = mb.position
                state = _At(after) if lazy else _Saved(reader.get_state())
                sweep_end = mb.end_of_sweep
            except BaseException:
                reader.undo()   # as MinibatchSource._read: the minibatch never got out
                raise
            return Step((started, state, mb, None, None), after - before, after, None, sweep_end)
        return read

    def _general_read(self, src, n, r, epochs, frame_mode, transfer):
        """How ``__iter__`` reads any other source: ``_next``, then tensors from its
        MinibatchData; None at the source's end (which every rank reaches at the same call)."""
        lazy = epochs.position is not None and bool(getattr(src, "_positional_state", False))
        local = [self._local_samples]

        bounded = bool(getattr(src, "_cuts_at_period", False))

        def read(request, wanted):
            pos = epochs.position
            if bounded:
                size, period = epochs.bound(wanted, request)
                data = src._next(size, n, r, period=period)
            else:
                data = src._next(request, n, r)
            if not data:
                return None
            pos_after = timeline(data)[0] if pos is not None else None
            after = _At(pos_after) if lazy and pos_after is not None else \
                src.get_checkpoint_state()
            by_name = {getattr(si, "name", si): md for si, md in data.items()}
            batch: dict[str, Any] = {}
            for name in (self.streams if self.streams is not None else by_name):
                try:
                    md = by_name[name]
                except KeyError:
                    raise KeyError("CTFIterableDataset.streams: the source has no stream %r "
                                   "(streams: %s)" % (name, ", ".join(map(str, by_name)))) \
                        from None
                if md.is_sparse:
                    _sparse(md, name, frame_mode, batch)
                else:
                    _dense(md, name, self.layout, frame_mode, batch)
            mine = count_local(data)
            local[0] += mine
            if self.with_keys:
                md = next(iter(data.values()))
                if getattr(md, "_view", None) is not None:
                    batch["_keys"] = torch.from_numpy(md.keys.astype(_np().int64))
            if pos is not None and pos_after is None:   # a source whose state tells, not data
                pos_after = _position(after)
            samples = pos_after - pos if pos_after is not None else mine
            return Step((transfer.start(batch), after, None, data, local[0]), samples, pos_after,
                        None, end_of_sweep(data))
        return read

    @property
    def last_minibatch(self) -> dict[Any, MinibatchData] | None:
        """The source's ``{StreamInformation: MinibatchData}`` behind the last batch handed out
        (None before the first). From ctfio's file source it is made when first asked for, from
        the C minibatch the batch's tensors already hold."""
        data = self._last_data
        if data is None and self._last_mb is not None:
            keys, frame_mode = self._last_keys
            data = self._last_data = self._last_mb.stream_data(MinibatchData, keys, frame_mode)
        return data

    @last_minibatch.setter
    def last_minibatch(self, data: dict[Any, MinibatchData] | None) -> None:
        self._last_data, self._last_mb = data, None

    # -- checkpoints (torchdata StatefulDataLoader convention) ---------------------------------

    def state_dict(self) -> dict[str, Any]:
        """``{"version", "source", "epoch", "batches", "minibatch_size", "epoch_size"}``:
        ``source`` is the source's checkpoint state after the last batch handed out (prefetched
        data does not count); ``epoch`` and ``batches`` count the epochs completed and the
        batches handed out. The whole dict is the same on every
        rank; save it next to the model's and optimizer's. JSON-serialisable."""
        state = self._restore if self._restore is not None else self._resolved(self._state)
        if state is None:
            state = self.source.get_checkpoint_state()
        out = {"version": _STATE_VERSION, "source": state, "epoch": self._epochs,
               "batches": self._batches, "minibatch_size": self.minibatch_size,
               "epoch_size": _EPOCH_NAMES.get(self.epoch_size, self.epoch_size)}
        if _position(state) is None:
            out["local_samples"] = self._local_samples   # the count epochs use instead
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a ``state_dict()`` (of this dataset or one over the same data, with any
        number of ranks, minibatch size or layout) at the next iteration. A bare source state
        (``source.get_checkpoint_state()``) is accepted too. A state for other data raises
        ``ctfio.StateError`` when it is applied."""
        if not isinstance(state_dict, dict):
            raise TypeError("CTFIterableDataset.load_state_dict: must be a dict (got %r)"
                            % (state_dict,))
        if "source" in state_dict:
            if state_dict.get("version") != _STATE_VERSION:
                raise ValueError("CTFIterableDataset.load_state_dict: version %r (this ctfio "
                                 "writes %d)" % (state_dict.get("version"), _STATE_VERSION))
            source_state = state_dict["source"]
            self._batches = int(state_dict.get("batches", 0))
            self._epochs = int(state_dict.get("epoch", 0))
            self._local_samples = int(state_dict.get("local_samples", 0))
        else:
            source_state = state_dict
        self._restore = source_state
        self._ahead = False
        self.last_minibatch = None

    @property
    def epoch(self) -> int:
        """The number of epochs completed: it counts up when the last batch of an epoch is
        handed out, and comes back with ``load_state_dict``. Resume loops with
        ``for epoch in range(ds.epoch, num_epochs): for batch in ds: ...``."""
        return self._epochs

    def close(self) -> None:
        """Closes a source this dataset created from its factory."""
        if self._factory is not None and self._src is not None and \
                self._src_pid == os.getpid():
            self._src.close()
            self._src = None

    def __getstate__(self) -> dict[str, Any]:
        # For DataLoader workers started by spawn/forkserver: a factory travels, a live
        # source does not need to (the worker creates its own).
        d = dict(self.__dict__)
        if self._factory is not None:
            d["_src"] = None
            d["_restore"] = d["_restore"] if d["_restore"] is not None else (
                self._resolved(d["_state"]) if self._src_pid == os.getpid() else d["_state"])
        d["_last_data"] = d["_last_mb"] = None
        return d

    def __repr__(self) -> str:
        src = self._src if self._src is not None else self._factory
        return ("CTFIterableDataset(%r, minibatch_size=%d, epoch_size=%r, layout=%r, "
                "device=%r)" % (src, self.minibatch_size, self.epoch_size, self.layout,
                                str(self.device)))
