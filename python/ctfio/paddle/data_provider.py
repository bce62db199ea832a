"""``DataProvider``: the batches of a ``@provider`` generator over a list of files, with its
cache and double buffering (ctfio/_staging.py), built on the reading threads of _reading.py and
the C pass (_ctfio.SamplePool over lib/reader/pool.c: file order, pool, draws, packing).

How a pass runs::

    file list --(seeded shuffle when training, worker shard)--> pending files
    pending --(at most open_files open at once)--> active feeds
        num_threads reading threads serve them: generator -> provider_encode (C) -> queue
    active feeds --(a seeded pick of the feed when shuffling, else file order)--> pool
    pool --(seeded draw when shuffling, else FIFO)--> batch --packed (C, GIL free)--> arrays

Determinism: the background threads only read ahead into one queue per file. Which file the pool
takes its next sample from, when the pool is filled and which sample a batch draws are decided
on the consumer's side from (seed, pass) alone, waiting for the feed it picked when necessary.
Thread timing, thread count and read-ahead depth therefore never change the batches, a cached
pass gives the same batches as an uncached one, and a pass is a fixed sequence of samples that
the batch sizes only cut (which is what the checkpoint records).

Memory: the pool holds at most ``pool_size`` units (``calc_batch_size`` units, 1 per sample by
default); a sample larger than the whole pool is admitted only into an empty pool and then
delivered alone. Besides the pool, each open file has a read-ahead queue of at most
``max(readahead, 32)`` samples, and at most ``open_files`` generators are alive at once; a
generator is dropped the moment it is exhausted (it cannot keep its context alive until a random
pick revisits it: a reading thread always asks its generator for the next sample right away, so
it learns that it is finished at once, not when a random pick reaches it again).
"""

import collections
import logging
import os
import weakref

from .. import _check, _ctfio
from .._staging import Staging
from ..source import MinibatchData, StreamInformation, UserMinibatchSource, _np
from ._reading import _CHUNK, _Counters, _Feed, _Job, _Readers
from .types import (
    OPTION_DEFAULTS,
    CacheType,
    DataType,
    SequenceType,
    Settings,
    _slots,
    check_options,
)

__all__ = ["DataProvider", "ProviderData", "StagedData", "Batch"]

_STATE_VERSION = 1


# ---------------------------------------------------------------------------------------------
# Batches
# ---------------------------------------------------------------------------------------------

class Batch(dict):
    """One batch: ``{input name: ProviderData}`` in input_types order; ``batch[i]`` also picks
    the i-th input. ``size`` is the batch in calc_batch_size units, ``num_samples`` its samples
    (one sequence each), ``end_of_pass`` marks the last batch of a pass."""

    __slots__ = ("size", "num_samples", "end_of_pass", "pass_index")

    def __getitem__(self, key):
        if isinstance(key, int) and not isinstance(key, bool):
            return list(self.values())[key]
        return dict.__getitem__(self, key)

    def __repr__(self):
        return "Batch(pass=%d, samples=%d, size=%d%s, inputs=%s)" % (
            self.pass_index, self.num_samples, self.size,
            ", end_of_pass" if self.end_of_pass else "", list(self))


# ProviderData's _view: not None, so that MinibatchData reads the arrays given to it (it never
# asks this object for a buffer: all four are set).
_PACKED = object()


class ProviderData(MinibatchData):
    """One input of a provider batch, as NumPy arrays, plus the MinibatchData API.

    * ``value``: dense ``(num_samples, dim)``; integer ``(num_samples,)`` int64 (also ``ids``);
      sparse the non-zero values ``(nnz,)`` (ones for sparse_binary_vector), with ``indptr``
      (int64, num_samples + 1) and ``indices`` (int32): CSR over the samples (``csr()``).
    * ``seq_starts``: SEQUENCE / SUB_SEQUENCE inputs, int64 ``(num_sequences + 1,)`` start
      positions of the sequences in samples (PaddlePaddle's sequenceStartPositions);
      ``sub_seq_starts``: SUB_SEQUENCE inputs, the start positions of every sub-sequence in
      samples (subSequenceStartPositions). Both end with num_samples. None otherwise.
    * A sample of the batch is one sequence: ``num_sequences`` is the batch's sample count and
      ``num_samples`` the time steps (equal for NO_SEQUENCE inputs).
    The arrays are owned by this object (fresh per batch) and stay valid. They are read-only
    views of the one buffer the batch was packed into (no copy after the packing; ``values``,
    ``indptr``, ``indices`` and ``asarray()`` without padding are views too); ``lengths`` is
    computed (one number per sequence), and ``asarray()`` with padding and ``csr()`` of a
    dense input copy, as for MinibatchData."""

    def __init__(self, name, input_type, packed, num_records, dtype, end_of_pass):
        np = _np()
        steps, data, indptr, indices, starts, subs = packed
        t = input_type
        self.name, self.input_type = name, t
        self.ids = indptr_a = indices_a = None
        if t.type == DataType.Dense:
            self.value = np.frombuffer(data, dtype).reshape(steps, t.dim)
            values, dim = self.value, t.dim
        elif t.type == DataType.Index:
            self.value = self.ids = np.frombuffer(data, np.int64)
            values, dim = self.ids.reshape(steps, 1), 1
        else:
            self.value = values = np.frombuffer(data, dtype)
            indptr_a = np.frombuffer(indptr, np.int64)
            indices_a = np.frombuffer(indices, np.int32)
            dim = t.dim
        self.seq_starts = None if starts is None else np.frombuffer(starts, np.int64)
        self.sub_seq_starts = None if subs is None else np.frombuffer(subs, np.int64)
        lengths = (np.ones(steps, np.uint32) if self.seq_starts is None
                   else np.diff(self.seq_starts).astype(np.uint32))
        MinibatchData.__init__(self, None, num_records, steps, end_of_pass)
        # The arrays MinibatchData would make from a reader's buffers, given here: views of
        # the packed batch (a sparse stream's indptr/indices, None for dense ones).
        self._view = _PACKED
        self._is_sparse, self._dim = t.is_sparse, dim
        self._values, self._lengths = values, lengths
        self._indptr, self._indices = indptr_a, indices_a
        self._frame_mode = t.seq_type == SequenceType.NO_SEQUENCE

    @property
    def keys(self):
        return None

    @property
    def files(self):
        return None

    def __repr__(self):
        return "ProviderData(%r, %r, num_sequences=%d, num_samples=%d)" % (
            self.name, self.input_type, self.num_sequences, self.num_samples)


class StagedData:
    """One input of a batch staged for a device (``DataProvider(device=...)``): the arrays of
    ProviderData (value, ids, indptr, indices, seq_starts, sub_seq_starts) as tensors on the
    device (PyTorch), or as NumPy arrays in the staging buffers when PyTorch is absent and the
    device is the CPU."""

    __slots__ = ("name", "input_type", "num_sequences", "num_samples", "value", "ids", "indptr",
                 "indices", "seq_starts", "sub_seq_starts")

    def __repr__(self):
        return "StagedData(%r, %r, num_sequences=%d, num_samples=%d)" % (
            self.name, self.input_type, self.num_sequences, self.num_samples)


_STAGED_FIELDS = ("value", "indptr", "indices", "seq_starts", "sub_seq_starts")


class _Stager:
    """A provider's double buffering: the batch's arrays through ctfio/_staging.py (two staging
    buffers per array, pinned for CUDA; on the CPU the batch is the staging buffer, valid until
    the next batch is requested), handed over as StagedData."""

    def __init__(self, device):
        self.staging = Staging(device, copy_on_cpu=True)

    def stage(self, batch):
        arrays = {}
        for name, d in batch.items():
            for field in _STAGED_FIELDS:
                arr = getattr(d, field)
                if arr is not None:
                    arrays[(name, field)] = arr
        return batch, self.staging.start(arrays)

    def hand_over(self, staged):
        batch, handle = staged
        moved = self.staging.finish(handle)
        out = Batch()
        for attr in Batch.__slots__:
            setattr(out, attr, getattr(batch, attr))
        for name, d in batch.items():
            s = StagedData()
            s.name, s.input_type = d.name, d.input_type
            s.num_sequences, s.num_samples = d.num_sequences, d.num_samples
            for field in _STAGED_FIELDS:
                setattr(s, field, moved.get((name, field)))
            s.ids = s.value if d.ids is not None else None
            out[name] = s
        return out


# ---------------------------------------------------------------------------------------------
# One pass: pool and batches
# ---------------------------------------------------------------------------------------------

class _Pass:
    """The consumer's side of one pass: the open files and their reading, around the C pool
    (_ctfio.SamplePool, lib/reader/pool.c), which picks the file that feeds it, draws the
    batches and packs them. Everything here runs on the caller's thread and depends only on
    (seed, pass index, data): see the module docstring."""

    def __init__(self, dp, index):
        self.dp, self.index = dp, index
        o = dp.options
        self.pool = _ctfio.SamplePool(dp._slot_spec, dp.dtype == _np().float64, dp.seed, index,
                                      dp._shuffle, o["min_pool_size"], o["pool_size"],
                                      o["can_over_batch_size"])
        self.pending = collections.deque(self.pool.files(len(dp.file_list), dp.num_workers,
                                                         dp.worker_rank))
        self.active = []              # open feeds, at most open_files (finished ones leave)
        self.cancelled = False        # a newer pass, a restore or close() ended this one

    def _pick(self):
        dp = self.dp
        while len(self.active) < dp.open_files and self.pending:
            i = self.pending.popleft()
            cached = dp._cache.get(i)
            if cached is not None:
                feed = _Feed(i, dp.file_list[i], replay=cached)
            else:
                readers = dp._readers_start()
                feed = _Feed(i, dp.file_list[i], dp._job, readers)
                readers.open(feed)
            self.active.append(feed)
        active = self.active      # close() on another thread may replace the list
        return active[self.pool.pick(len(active))] if active else None

    def _fill(self):
        """The pool's fill: takes samples from the picked files until the pool holds its goal
        (target + _CHUNK - 1 units, never past pool_size). @return : True once the pass has no
        more data. Stops early when the pool is full (a draw must make room first)."""
        pool = self.pool
        while True:
            units, _, empty, goal, room = pool.info()[:5]
            if units >= goal:
                return False
            feed = self._pick()
            if feed is None:
                return True
            need = goal - units
            try:
                got = feed.take(_CHUNK if need >= _CHUNK else need, room, empty)
            except Exception:
                if empty:
                    raise
                return False  # the pool's samples come first; the error is raised again later
            if got is None:
                if feed in self.active:   # not after a cancel() from another thread
                    self.active.remove(feed)
                continue
            if not got:
                return False  # full: draw first (never wait for room that only a draw makes)
            pool.push(got)

    @property
    def delivered(self):
        return self.pool.info()[7]

    def at_end(self):
        return self.pool.at_end(self._fill)

    def next_batch(self, size):
        """(arrays per input, samples, units) of the next batch of `size` units; None at the
        end of the pass."""
        if self.cancelled:
            raise RuntimeError("ctfio.provider: this pass was ended by a newer pass, a restore "
                               "or close(); iterate the provider again for a new pass")
        return self.pool.next(size, self._fill)

    def cancel(self):
        self.cancelled = True
        stats, peaks = self.dp._pool_stats, self.pool.info()[5:7]  # kept across passes
        for key, peak in zip(("pool_peak_units", "pool_peak_samples"), peaks):
            stats[key] = max(stats[key], peak)
        for feed in self.active:  # a feed leaves `active` only once it is finished
            if not feed.done:
                feed.cancel()
        self.active = []
        self.pending.clear()


# ---------------------------------------------------------------------------------------------
# DataProvider
# ---------------------------------------------------------------------------------------------

def _read_file_list(file_list):
    if isinstance(file_list, (str, bytes, os.PathLike)):
        with open(file_list, encoding="utf-8") as f:
            files = [line.strip() for line in f]
        files = [p for p in files if p]
    elif isinstance(file_list, (list, tuple)):
        files = [os.fspath(p) for p in file_list]
    else:
        raise TypeError("file_list: must be the path of a list file (one data file per line) or "
                        "a list of paths (got %r)" % (file_list,))
    if not files:
        raise ValueError("file_list: holds no file (got %r)" % (file_list,))
    return files


class DataProvider(UserMinibatchSource):
    """Batches from a @provider generator over a list of files.

    ``process(file_list, batch_size=128, is_train=True, seed=0, **user_args)`` where ``process``
    is the class ``@provider`` made, or ``DataProvider(file_list, process, ...)``.

    * ``file_list``: the path of a list file (``train.list``, one data file per line) or a list
      of paths; each path is passed to the generator unchanged.
    * ``batch_size``: in calc_batch_size units; needed to iterate (``next_minibatch`` takes it
      per call). Must be <= pool_size.
    * ``is_train``: picks the shuffle default (``should_shuffle=None``) and is passed to
      init_hook; ``args`` (a dict) and any other keyword arguments go to init_hook as well.
    * ``seed``: shuffling is a pure function of (seed, pass); ``open_files`` files are open at
      once (the pool mixes them; part of the order, like ``seed``), read by ``num_threads``
      threads (not part of the order), each at most ``readahead`` (at least 32) samples ahead.
    * ``dtype``: float32 or float64 for the values; ``device`` (e.g.
      ``torch.device('cuda')``) turns on double buffering for iteration; ``num_workers`` /
      ``worker_rank`` give each worker every N-th file of the pass's (shuffled) file list.

    ``for batch in dp:`` runs one pass (a new one every time) and yields ``Batch`` dicts of
    ``ProviderData`` (or of ``StagedData`` with a device); ``next_minibatch`` is the
    UserMinibatchSource view: an endless series of passes, ``end_of_sweep`` on the last batch
    of each, ``{StreamInformation: ProviderData}``.
    """

    generator = None                  # set by @provider: process(settings, filename)
    options = None                    # set by @provider: the decorator's parameters

    def __init__(self, file_list, generator=None, *, batch_size=None, is_train=True, args=None,
                 seed=0, open_files=4, num_threads=2, readahead=64, dtype="float32",
                 device=None, num_workers=1, worker_rank=0, **user_args):
        super().__init__()
        if generator is None:
            gen, opts = type(self).generator, type(self).options
        elif isinstance(generator, type) and issubclass(generator, DataProvider):
            gen, opts = generator.generator, generator.options
        else:
            raise TypeError("DataProvider.generator: must be a generator function decorated "
                            "with @provider (got %r)" % (generator,))
        if gen is None or opts is None:
            raise TypeError("DataProvider: no generator; decorate one with @provider")
        self.file_list = _read_file_list(file_list)
        self.is_train = bool(is_train)
        seed = _check.count(seed, "DataProvider.seed")
        open_files = _check.positive(open_files, "DataProvider.open_files")
        num_threads = _check.positive(num_threads, "DataProvider.num_threads")
        readahead = _check.positive(readahead, "DataProvider.readahead")
        num_workers, worker_rank = _check.workers(num_workers, worker_rank, "DataProvider.",
                                                  names=("num_workers", "worker_rank"))
        self.seed, self.num_threads, self.readahead = seed, num_threads, readahead
        self.open_files = open_files
        self.num_workers, self.worker_rank = num_workers, worker_rank
        np = _np()
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError("DataProvider.dtype: must be float32 or float64 (got %r)" % (dtype,))
        # settings: the object init_hook and process see; init_hook may change the options.
        s = self.settings = Settings()
        s.logger = logging.getLogger("ctfio.provider")
        s.is_train, s.file_list = self.is_train, list(self.file_list)
        for key, value in opts.items():
            setattr(s, key, value)
        hook_args = dict(args or {}, **user_args)
        if opts["init_hook"] is not None:
            opts["init_hook"](s, file_list=list(self.file_list), is_train=self.is_train,
                              **hook_args)
        o = self.options = check_options({k: getattr(s, k) for k in OPTION_DEFAULTS},
                                         "settings")
        if o["input_types"] is None:
            raise ValueError("input_types: not set; give it to @provider or set "
                             "settings.input_types in init_hook")
        self.names, self.types = _slots(o["input_types"], "input_types")
        self._slot_spec = tuple((n, t.type, t.seq_type, t.dim)
                                for n, t in zip(self.names, self.types))
        self._shuffle = self.is_train if o["should_shuffle"] is None else o["should_shuffle"]
        self.batch_size = None if batch_size is None else self._check_size(batch_size,
                                                                           "batch_size")
        self.device = device
        if device is not None:
            _Stager(device)  # fail now, not at the first batch, if the device cannot work
        self._infos = [StreamInformation(n, i, "sparse" if t.is_sparse else "dense",
                                         "int64" if t.type == DataType.Index else self.dtype,
                                         (t.dim,))
                       for i, (n, t) in enumerate(zip(self.names, self.types))]
        self._cache = {}              # file index -> [(record, units)] (CACHE_PASS_IN_MEM)
        self._counters = _Counters()
        job = self._job = _Job()
        job.generator, job.settings, job.slots = gen, s, self._slot_spec
        job.check, job.fail_continue, job.calc = o["check"], o["check_fail_continue"], \
            o["calc_batch_size"]
        job.double, job.readahead, job.counters = self.dtype == np.float64, \
            max(readahead, _CHUNK), self._counters
        job.cache = self._cache if o["cache"] == CacheType.CACHE_PASS_IN_MEM else None
        job.logger = s.logger
        self._pool_stats = dict(pool_peak_units=0, pool_peak_samples=0)
        self._readers = None
        self._finalizer = None
        self._pass = None
        self._next_pass = 0           # index of the next pass to start

    def _check_size(self, size, name):
        size = _check.index(size, name)
        if size < 1:
            raise ValueError("%s: must be an int >= 1 (got %r)" % (name, size))
        pool = self.options["pool_size"]
        if pool != -1 and size > pool:
            raise ValueError("%s: must be <= pool_size (got %d > %d): a batch is drawn from "
                             "the pool, which never holds more than pool_size" % (name, size,
                                                                                  pool))
        return size

    def _readers_start(self):
        if self._readers is None:
            self._readers = _Readers(self.num_threads)
            self._finalizer = weakref.finalize(self, self._readers.shutdown)
        return self._readers

    # -- passes and batches -------------------------------------------------------------------

    def _start_pass(self):
        if self._pass is not None:
            self._pass.cancel()
        self._pass = _Pass(self, self._next_pass)
        self._next_pass += 1
        return self._pass

    def _batch(self, p, size):
        got = p.next_batch(size)
        if got is None:
            return None
        packed, count, units = got
        try:
            end = p.at_end()
        except Exception:  # noqa: BLE001 - raised again by the next draw, after this batch
            end = False
        b = Batch()
        b.size, b.num_samples, b.end_of_pass, b.pass_index = units, count, end, p.index
        whole = count if self.num_workers == 1 else None
        for name, t, arrays in zip(self.names, self.types, packed):
            d = b[name] = ProviderData(name, t, arrays, count, self.dtype, end)
            # The timeline as far as a provider knows it: the pass is the sweep; a pass's size
            # is known only at its end, so there is no position or samples per sweep.
            d.sweep, d.global_samples = p.index, whole
        return b

    def __iter__(self):
        """One pass over the files (a new pass on every call), batch by batch."""
        if self.batch_size is None:
            raise ValueError("DataProvider: iterating needs batch_size (got None)")
        return self._iterate(self._start_pass(), self.batch_size, self.device)

    def _iterate(self, p, size, device):
        if device is None:
            while True:
                b = self._batch(p, size)
                if b is None:
                    return
                yield b
        stager = _Stager(device)
        b = self._batch(p, size)
        ahead = stager.stage(b) if b is not None else None
        while ahead is not None:
            current = ahead
            b = self._batch(p, size)  # staged now: its copy overlaps the use of `current`
            ahead = stager.stage(b) if b is not None else None
            yield stager.hand_over(current)

    def batches(self, batch_size=None, device=None):
        """One pass like ``iter(dp)``, with another batch size and/or device."""
        size = self._check_size(batch_size or self.batch_size or 0, "batch_size")
        return self._iterate(self._start_pass(), size, device if device is not None
                             else self.device)

    # -- UserMinibatchSource ------------------------------------------------------------------

    def stream_infos(self):
        return list(self._infos)

    def next_minibatch(self, num_samples, number_of_workers=1, worker_rank=0, device=None):
        """The next batch of ``num_samples`` calc_batch_size units as {StreamInformation:
        ProviderData}; passes follow each other endlessly, the last batch of each has
        ``end_of_sweep``. An empty dict only when a whole pass yields no sample. ``device``:
        None or the CPU gives host arrays (ProviderData); another PyTorch device (CUDA) sends
        the batch through the same staging as iteration and ``ctfio.torch`` (pinned buffers, a
        side stream) and gives StagedData with tensors on it. Iterate with ``device=`` to also
        overlap the copy with the use of the previous batch.
        """
        size = self._check_size(num_samples, "num_samples")
        if (number_of_workers, worker_rank) != (self.num_workers, self.worker_rank):
            raise ValueError("next_minibatch: this provider was created for worker %d of %d "
                             "(got %d of %d); pass num_workers/worker_rank to the constructor"
                             % (self.worker_rank, self.num_workers, worker_rank,
                                number_of_workers))
        for attempt in range(2):
            if self._pass is None or self._pass.at_end():
                if attempt and self._pass.delivered == 0:
                    return {}
                self._start_pass()
            b = self._batch(self._pass, size)
            if b is not None:
                stager = self._device_stager(device)
                if stager is not None:
                    b = stager.hand_over(stager.stage(b))
                return {si: b[si.name] for si in self._infos}
        return {}

    def _device_stager(self, device):
        """The staging for next_minibatch's ``device`` (kept while the device stays the same),
        or None for host arrays (no device, or the CPU)."""
        if device is None or str(device) == "cpu":
            return None
        held = getattr(self, "_mb_stager", None)
        if held is None or held[0] != str(device):
            held = self._mb_stager = (str(device), _Stager(device))
        return held[1]

    def get_checkpoint_state(self):
        """{version, pass, samples}: the pass in progress and the samples it delivered (a pass
        is a fixed sequence of samples), plus what must match."""
        p = self._pass
        if p is None:
            where = (self._next_pass, 0)
        elif p.at_end():
            where = (p.index + 1, 0)
        else:
            where = (p.index, p.delivered)
        return dict(version=_STATE_VERSION, kind="ctfio.provider", seed=self.seed,
                    files=len(self.file_list), workers=[self.num_workers, self.worker_rank],
                    **{"pass": where[0], "samples": where[1]})

    def restore_from_checkpoint(self, state):
        if not isinstance(state, dict):
            raise TypeError("restore_from_checkpoint: the state must be the dict "
                            "get_checkpoint_state() returned (got %s)" % type(state).__name__)
        mine = self.get_checkpoint_state()
        for key in ("version", "kind", "seed", "files", "workers"):
            if state.get(key) != mine[key]:
                raise ValueError("restore_from_checkpoint: %s differs (checkpoint %r, this "
                                 "provider %r)" % (key, state.get(key), mine[key]))
        if self._pass is not None:
            self._pass.cancel()
            self._pass = None
        self._next_pass = int(state["pass"])
        skip = int(state["samples"])
        if skip:   # replays the pass's fixed order up to the position
            p = self._start_pass()
            p.pool.skip(skip, p._fill)

    # -- the rest -----------------------------------------------------------------------------

    def stats(self):
        """Counters: generators alive now and at peak (files open at once), files opened,
        samples read, dropped (with the first 100 as (path, sample, message)), cached, the
        pool's peak in units and samples, and its current content."""
        c = self._counters
        with c.lock:
            out = {f: getattr(c, f) for f in c.FIELDS}
            out["drops"] = list(c.drops)
        p = self._pass
        units, samples, _, _, _, peak_units, peak_samples = (
            p.pool.info()[:7] if p is not None else (0,) * 7)
        out["pool_peak_units"] = max(self._pool_stats["pool_peak_units"], peak_units)
        out["pool_peak_samples"] = max(self._pool_stats["pool_peak_samples"], peak_samples)
        out["pool_units"], out["pool_samples"] = units, samples
        out["passes_started"] = self._next_pass
        return out

    def close(self):
        """Ends the current pass and stops the reading threads (open generators are closed in
        them). Using the provider again starts new threads."""
        if self._pass is not None:
            self._pass.cancel()
            self._pass = None
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = self._readers = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "%s(files=%d, inputs=%s, batch_size=%r, shuffle=%r, seed=%d)" % (
            type(self).__name__, len(self.file_list),
            ", ".join("%s=%r" % nt for nt in zip(self.names, self.types)), self.batch_size,
            self._shuffle, self.seed)
