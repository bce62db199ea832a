"""A training driver over any minibatch source: ``training_session`` (CNTK's
``cntk.train.training_session``, framework-agnostic), with epochs, minibatch-size schedules,
checkpoint/restart and cross-validation (rules 6.5, 8, 11).

    def step(data, info):                       # data: {StreamInformation: MinibatchData}
        x = data[src.streams.features].asarray()
        ...                                     # one update of your model
        return loss                             # optional: averaged into the progress lines

    ctfio.training_session(src, step, mb_size=[128] * 2 + [1024], epoch_size=50000,
                           max_samples=500000,
                           checkpoint_config=ctfio.CheckpointConfig("run.ckpt"),
                           on_checkpoint=lambda state: {"w": w},
                           on_restore=lambda state: w.__setitem__(..., state["user"]["w"]),
                           ).train()

CNTK-style calls work too: ``training_session(trainer=t, mb_source=src, mb_size=64,
model_inputs_to_streams={x: src.streams.features, y: src.streams.labels}, ...)`` drives
``t.train_minibatch(arguments)`` and ``t.save_checkpoint`` / ``t.restore_from_checkpoint``.

**Counting samples.** With a ``trainer`` that reports ``total_number_of_samples_seen`` (CNTK's
trainers do), a minibatch counts what that counter advanced by (the samples of the loss: one
label per sequence for a sequence classifier), and epochs, ``max_samples`` and every frequency
follow it, as in CNTK; ``mb_size`` still counts the source's samples. Otherwise sizes, epochs,
limits and frequencies count samples as the source reports them: a minibatch counts the
``num_samples`` of the stream that ``defines_mb_size``, else the largest ``num_samples`` over its
streams (CNTK's rule). With several workers every worker must
take the same decisions, so a minibatch counts its *global* size: given by ``aggregate_samples``
(e.g. an MPI all-reduce of the local count, as CNTK's distributed trainer does) or, when not
given, the minibatch's ``global_samples`` (the advance of the shared timeline, the same on
every worker).

**Epochs** follow ctfio/_loop.py, whose loop ``ctfio.torch`` runs too: a request never crosses
an epoch's end (nor ``max_samples``, nor a numeric checkpoint or cross-validation point), and
with ``FULL_DATA_SWEEP`` an epoch is one sweep. The minibatch size schedule moves to its next
entry at epoch boundaries. Boundaries never change the order of the data.

**Checkpoints** are one JSON file (written to a temporary file, then renamed) with the source's
``get_checkpoint_state()``, the session's counters and the user's state; with ``restore=True``
``train()`` continues from an existing file, and the continuation sees exactly the minibatches an
uninterrupted run would have seen.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable, Union, cast

from . import _check
from ._loop import (
    Epochs,
    SampleCounter,
    Step,
    count_local,
    drive,
    end_of_sweep,
    source_timeline,
    timeline,
)
from .perf import StatsLogger
from .source import FULL_DATA_SWEEP, INFINITELY_REPEAT, MinibatchSource

if TYPE_CHECKING:
    from .source import MinibatchData, PathArg, StreamInformation

    # A minibatch as step() and evaluate() get it (keyed by the model inputs when mapped).
    Data = dict[Any, MinibatchData]
    # step(data, info): one update; returns None, the loss, a tuple or a dict of averages.
    StepFn = Callable[[Data, "StepInfo"], Any]
    # An int, per-epoch sizes (the last repeats; (epochs, size) pairs) or epoch -> size.
    MbSize = Union[int, Sequence[Union[int, tuple[int, int]]], Callable[[int], int]]
    # Model input -> stream (a StreamInformation or a stream's name).
    StreamMap = Mapping[Any, Union[StreamInformation, str]]

__all__ = ["training_session", "TrainingSession", "CheckpointConfig", "CrossValidationConfig",
           "StepInfo"]

_FORMAT = "ctfio.training_session"
_VERSION = 1


# ---------------------------------------------------------------------------------------------
# Configuration objects
# ---------------------------------------------------------------------------------------------

def _frequency(value, name):
    """None (at each epoch end), a positive number of samples, or INFINITELY_REPEAT /
    sys.maxsize (only at the end of training)."""
    if value is None:
        return None
    if value in (INFINITELY_REPEAT, sys.maxsize):
        return INFINITELY_REPEAT
    return _check.positive(value, name, allow_none=True)


class CheckpointConfig:
    """Checkpointing of a training session (CNTK's ``CheckpointConfig``).

    ``filename``: the checkpoint file (JSON). ``frequency``: samples between checkpoints; None
    (default) checkpoints at the end of every epoch; ``INFINITELY_REPEAT`` / ``sys.maxsize`` only
    at the end of training (a final checkpoint is always written when training ends normally).
    ``restore``: continue from ``filename`` when it exists. ``preserve_all``: also keep a copy of
    every checkpoint as ``filename.<index>``.
    """

    def __init__(self, filename: PathArg, frequency: int | None = None, restore: bool = True,
                 preserve_all: bool = False) -> None:
        filename = os.fspath(filename) if filename is not None else None
        if not isinstance(filename, str) or not filename:
            raise ValueError("CheckpointConfig.filename: must be a non-empty path (got %r)"
                             % (filename,))
        self.filename = filename
        self.frequency = _frequency(frequency, "CheckpointConfig.frequency")
        self.restore = bool(restore)
        self.preserve_all = bool(preserve_all)

    def __repr__(self) -> str:
        return ("CheckpointConfig(%r, frequency=%r, restore=%r, preserve_all=%r)"
                % (self.filename, self.frequency, self.restore, self.preserve_all))


class CrossValidationConfig:
    """Cross-validation during training (CNTK's ``CrossValidationConfig``; CNTK's keyword names
    ``minibatch_source`` and ``minibatch_size`` are accepted too).

    Every ``frequency`` samples (None: at the end of every epoch) the session rewinds ``source``
    to its start (the state it had when training began), reads it in minibatches of ``mb_size``
    up to ``max_samples`` (None or ``FULL_DATA_SWEEP``: one sweep -- requests are cut at the
    sweep's end when the source's state tells the sweep size, as the CTF reader's and
    MinibatchSourceFromData's do, else the pass ends with the minibatch that holds the sweep
    end; a number: that many samples; ``INFINITELY_REPEAT``: until the source ends) and
    evaluates each minibatch with ``evaluate(data, info)``, which returns the minibatch's average
    metric (or a ``(metric_sum, num_samples)`` pair); with a CNTK-style trainer and no ``evaluate``,
    ``trainer.test_minibatch(arguments)`` is used. The sample-weighted average is reported and
    passed to ``callback(index, average_error, num_samples, num_minibatches)``; a callback that
    returns False stops training. ``model_inputs_to_streams`` maps the keys of ``data`` as in
    the session (default: the session's mapping); ``metric_name`` labels the progress line.
    """

    def __init__(self, source: MinibatchSource | None = None, mb_size: int = 32,
                 frequency: int | None = None, max_samples: int | None = None,
                 callback: Callable[[int, float | None, int, int], Any] | None = None,
                 evaluate: Callable[[Data, StepInfo], Any] | None = None,
                 model_inputs_to_streams: StreamMap | None = None, *,
                 metric_name: str = "metric", minibatch_source: MinibatchSource | None = None,
                 minibatch_size: int | None = None, criterion: None = None) -> None:
        if source is None:
            source = minibatch_source
        if minibatch_size is not None:
            mb_size = minibatch_size
        if source is None and callback is None:
            raise ValueError("CrossValidationConfig: a source (or a callback that validates "
                             "by itself) is required")
        if source is not None and not hasattr(source, "_next"):
            raise TypeError("CrossValidationConfig.source: must be a minibatch source (got %r)"
                            % (source,))
        if criterion is not None:
            raise ValueError("CrossValidationConfig.criterion: not supported; evaluate each "
                             "minibatch with evaluate=")
        self.source = source
        self.mb_size = _check.positive(mb_size, "CrossValidationConfig.mb_size")
        self.frequency = _frequency(frequency, "CrossValidationConfig.frequency")
        if max_samples is None:
            max_samples = FULL_DATA_SWEEP
        if max_samples not in (FULL_DATA_SWEEP, INFINITELY_REPEAT):
            _check.positive(max_samples, "CrossValidationConfig.max_samples")
        self.max_samples = max_samples
        self.callback = callback
        self.evaluate = evaluate
        self.model_inputs_to_streams = model_inputs_to_streams
        self.metric_name = str(metric_name)

    def __repr__(self) -> str:
        return ("CrossValidationConfig(%r, mb_size=%d, frequency=%r, max_samples=%r)"
                % (self.source, self.mb_size, self.frequency, self.max_samples))


class StepInfo:
    """What the session tells ``step(data, info)`` (and callbacks) about where training is.

    ``epoch`` (0-based), ``minibatch`` (0-based, over the whole run), ``epoch_minibatch``,
    ``samples_seen`` (before this minibatch), ``epoch_samples`` (samples of this epoch before
    this minibatch), ``mb_size`` (the schedule's size for this epoch), ``request`` (the size
    actually requested: the schedule's, cut at the next boundary), ``num_samples`` (this
    minibatch's samples), ``end_of_sweep``, ``session``. ``info.stop()`` ends training after
    this minibatch. For cross-validation minibatches ``cv_index`` is set too.
    """

    # What the session sets (the attributes are the keywords it makes the object with).
    epoch: int
    minibatch: int
    epoch_minibatch: int
    samples_seen: int
    epoch_samples: int
    mb_size: int
    request: int
    num_samples: int
    end_of_sweep: bool
    session: TrainingSession
    cv_index: int
    # An epoch's result (on_epoch_end): its samples, minibatches, averages and duration.
    samples: int
    minibatches: int
    metrics: dict[str, float]
    seconds: float

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)

    def stop(self) -> None:
        self.session.stop()

    def __repr__(self) -> str:
        return "StepInfo(%s)" % ", ".join("%s=%r" % kv for kv in sorted(self.__dict__.items())
                                          if kv[0] != "session")


# ---------------------------------------------------------------------------------------------
# JSON with NumPy arrays (for the user's state)
# ---------------------------------------------------------------------------------------------

def _json_default(obj):
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None  # type: ignore[assignment]
    if np is not None:
        if isinstance(obj, np.ndarray):
            return {"__ndarray__": obj.tolist(), "dtype": obj.dtype.str, "shape": obj.shape}
        if isinstance(obj, np.generic):
            return obj.item()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError("checkpoint state: %r (%s) cannot be stored in JSON; store arrays, numbers, "
                    "strings, lists and dicts" % (obj, type(obj).__name__))


def _json_hook(d):
    if "__ndarray__" in d and "dtype" in d and "shape" in d and len(d) == 3:
        import numpy as np
        return np.asarray(d["__ndarray__"], dtype=np.dtype(d["dtype"])).reshape(d["shape"])
    return d


def _write_json_atomic(path, obj):
    from .writer import _replace_atomically
    with _replace_atomically(path, fsync=True) as f:
        json.dump(obj, f, default=_json_default)


def _read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f, object_hook=_json_hook)


# ---------------------------------------------------------------------------------------------
# Schedules and counting
# ---------------------------------------------------------------------------------------------

def _schedule(mb_size):
    """int, a list of per-epoch sizes (the last repeats; ``(count, size)`` pairs allowed, as in
    CNTK schedules) or a callable epoch -> size."""
    if mb_size is None:
        mb_size = 256
    if callable(mb_size) and not isinstance(mb_size, (list, tuple)):
        def at(epoch):
            return _check.positive(mb_size(epoch), "mb_size(%d)" % epoch)
        return at, mb_size
    if isinstance(mb_size, (list, tuple)):
        sizes = []
        for item in mb_size:
            if isinstance(item, (list, tuple)):
                if len(item) != 2:
                    raise ValueError("mb_size schedule: entries are sizes or (epochs, size) "
                                     "pairs (got %r)" % (item,))
                count = _check.positive(item[0], "mb_size schedule: epochs")
                sizes.extend([_check.positive(item[1], "mb_size schedule: size")] * count)
            else:
                sizes.append(_check.positive(item, "mb_size schedule: size"))
        if not sizes:
            raise ValueError("mb_size: the schedule is empty")

        def at(epoch):
            return sizes[min(epoch, len(sizes) - 1)]
        return at, list(mb_size)
    size = _check.positive(mb_size, "mb_size")
    return (lambda epoch: size), size




def _resolve_mapping(source, mapping):
    if not mapping:
        return None
    out = {}
    for key, stream in dict(mapping).items():
        if isinstance(stream, str):
            stream = source.stream_info(stream)
        out[key] = stream
    return out


def _remap(data, mapping):
    if mapping is None:
        return data
    try:
        return {key: data[stream] for key, stream in mapping.items()}
    except KeyError as e:
        raise KeyError("model_inputs_to_streams: the source has no stream %r (streams: %s)"
                       % (e.args[0], ", ".join(str(k) for k in data))) from None


def _metrics(value):
    """A step's return value as {name: number}: None, a number (the loss) or a dict."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(k): float(v) for k, v in value.items() if v is not None}
    if isinstance(value, (tuple, list)):
        return {("loss" if i == 0 else "metric%d" % i): float(v)
                for i, v in enumerate(value) if v is not None}
    return {"loss": float(value)}


class _Averages:
    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.weights: dict[str, int] = {}

    def add(self, metrics, weight):
        w = max(int(weight), 1)
        for k, v in metrics.items():
            self.sums[k] = self.sums.get(k, 0.0) + v * w
            self.weights[k] = self.weights.get(k, 0) + w

    def result(self):
        return {k: self.sums[k] / self.weights[k] for k in self.sums}


def _fmt_metrics(m):
    return "".join(", %s %.4g" % kv for kv in m.items())


def _rest_of_sweep(state):
    """Samples from a checkpoint state's position to its sweep's end, when the state tells
    (``minibatchSourcePosition`` and ``samples_per_sweep``); else None."""
    pos, per = source_timeline(None, state) if isinstance(state, dict) else (None, None)
    return Epochs(FULL_DATA_SWEEP, 0, 0, pos, per).room()


# ---------------------------------------------------------------------------------------------
# The session
# ---------------------------------------------------------------------------------------------

class TrainingSession:
    """A configured training run; ``train()`` runs it. Build it with ``training_session``."""

    def __init__(self, mb_source: MinibatchSource, step: StepFn | None = None, *,
                 trainer: Any = None, model_inputs_to_streams: StreamMap | None = None,
                 mb_size: MbSize | None = 256, epoch_size: int | None = FULL_DATA_SWEEP,
                 max_samples: int | None = INFINITELY_REPEAT, max_epochs: int | None = None,
                 checkpoint_config: CheckpointConfig | None = None,
                 cv_config: CrossValidationConfig | None = None,
                 test_config: CrossValidationConfig | None = None,
                 progress_frequency: int | None = None,
                 progress: bool | str | Callable[[str], Any] = True,
                 number_of_workers: int = 1, worker_rank: int = 0,
                 aggregate_samples: Callable[[int], int] | None = None,
                 callbacks: Iterable[Any] | None = None,
                 on_epoch_end: Callable[[StepInfo], Any] | None = None,
                 on_checkpoint: Callable[[dict[str, Any]], Any] | None = None,
                 on_restore: Callable[[dict[str, Any]], Any] | None = None,
                 log_stats_every: float | None = None) -> None:
        if mb_source is None or not hasattr(mb_source, "_next"):
            raise TypeError("training_session.mb_source: must be a minibatch source "
                            "(MinibatchSource, UserMinibatchSource, MinibatchSourceFromData); "
                            "got %r" % (mb_source,))
        if step is None and trainer is None:
            raise ValueError("training_session: give a step(data, info) function or a "
                             "trainer with train_minibatch(arguments)")
        if step is not None and not callable(step):
            raise TypeError("training_session.step: must be callable (got %r)" % (step,))
        if trainer is not None and not hasattr(trainer, "train_minibatch"):
            raise TypeError("training_session.trainer: must have train_minibatch(arguments)")
        self.source = mb_source
        self.step = step
        self.trainer = trainer
        self.model_inputs_to_streams = _resolve_mapping(mb_source, model_inputs_to_streams)
        self._size_at, self.mb_size = _schedule(mb_size)
        if epoch_size is None:
            epoch_size = FULL_DATA_SWEEP
        if epoch_size not in (FULL_DATA_SWEEP, INFINITELY_REPEAT):
            _check.positive(epoch_size, "training_session.epoch_size")
        self.epoch_size = epoch_size
        if max_samples is None:
            max_samples = INFINITELY_REPEAT
        if max_samples not in (FULL_DATA_SWEEP, INFINITELY_REPEAT):
            _check.count(max_samples, "training_session.max_samples")
        self.max_samples = max_samples
        self.max_epochs = _check.positive(max_epochs, "training_session.max_epochs",
                                          allow_none=True)
        if checkpoint_config is not None and not isinstance(checkpoint_config, CheckpointConfig):
            raise TypeError("training_session.checkpoint_config: must be a CheckpointConfig")
        if cv_config is not None and not isinstance(cv_config, CrossValidationConfig):
            raise TypeError("training_session.cv_config: must be a CrossValidationConfig")
        if test_config is not None and not isinstance(test_config, CrossValidationConfig):
            raise TypeError("training_session.test_config: must be a CrossValidationConfig "
                            "(its frequency is ignored: the test runs once, after training)")
        self.checkpoint_config = checkpoint_config
        self.cv_config = cv_config
        self.test_config = test_config
        self.progress_frequency = _frequency(progress_frequency,
                                             "training_session.progress_frequency")
        self.number_of_workers, self.worker_rank = _check.workers(
            number_of_workers, worker_rank, "training_session: ")
        self.aggregate_samples = aggregate_samples
        self.callbacks = list(callbacks or [])
        self.on_epoch_end = on_epoch_end
        self.on_checkpoint = on_checkpoint
        self.on_restore = on_restore
        self._progress_arg = progress
        if log_stats_every is not None:
            StatsLogger(None, log_stats_every)  # checks the value when the session is made
        self.log_stats_every = log_stats_every
        # Counters: everything a checkpoint must carry to continue identically.
        self.samples_seen = 0
        self.epoch = 0
        self.epoch_start = 0          # samples_seen when the current epoch began
        self.minibatches = 0
        self.epoch_minibatches = 0
        self.sweeps = 0               # sweep ends seen
        self.checkpoint_index = 0     # checkpoints written
        self.cv_index = 0             # cross-validations run
        self.finished = False
        # Results.
        self.cv_results: list[dict[str, Any]] = []
        self.test_result: dict[str, Any] | None = None
        self.epoch_results: list[dict[str, Any]] = []
        self.restored_from: str | None = None
        self._stop = False
        self._cv_start_state = None
        self._test_start_state = None
        self._warned_workers = False
        self._out: Callable[[str], Any] | None = None
        self._bar: Any = None
        self._device = None

    # -- public -------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ends training after the current minibatch (a checkpoint is still written)."""
        self._stop = True

    def skip(self, num_samples: int) -> TrainingSession:
        """Skip ``num_samples`` samples of the source's global timeline when ``train()`` next
        runs, after the checkpoint it restores (``MinibatchSource.skip``: a loss spike's
        stretch; call it with the same number on every rank). The skipped samples are not
        trained on and not counted in ``samples_seen``; the next checkpoint's source state lists
        them under ``"skipped"``. Calls add up. Returns the session."""
        if num_samples < 0:
            raise ValueError("skip: num_samples must be >= 0 (got %r)" % (num_samples,))
        if not hasattr(self.source, "skip"):
            raise TypeError("skip: the source %r cannot skip" % (self.source,))
        self._skip = getattr(self, "_skip", 0) + int(num_samples)
        return self

    def train(self, device: Any = None) -> TrainingSession:
        """Runs the session: restores from the checkpoint when configured and present, trains
        until ``max_samples`` / ``max_epochs`` / the end of the data / ``stop()``, then writes
        a final checkpoint and runs the test configuration. Returns the session."""
        self._device = device
        self._stop = False
        self._open_progress()
        try:
            self._capture_cv_start()
            ck = self.checkpoint_config
            if ck is not None and ck.restore and os.path.exists(ck.filename):
                self.restore_from_checkpoint(ck.filename)
            if getattr(self, "_skip", 0):
                self.source.skip(self._skip)
                self._skip = 0
            self._loop()
            if ck is not None:
                self.save_checkpoint()
            if self.test_config is not None and self.test_config.source is not None:
                self.test_result = self._validate(self.test_config, "test", None)
        finally:
            self._close_progress()
        return self

    def save_checkpoint(self, filename: PathArg | None = None) -> dict[str, Any]:
        """Writes a checkpoint now (to the configured file unless ``filename`` is given)."""
        ck = self.checkpoint_config
        if filename is None:
            if ck is None:
                raise ValueError("save_checkpoint: no filename and no checkpoint_config")
            filename = ck.filename
        filename = os.fspath(filename)
        index = self.checkpoint_index
        state = {
            "format": _FORMAT, "version": _VERSION,
            "session": self._counters(),
            "source": self.source.get_checkpoint_state(),
            "trainer": None,
            "user": {},
        }
        if self.trainer is not None and hasattr(self.trainer, "save_checkpoint"):
            # Two alternating files, so that the pair (JSON, trainer file) on disk is always
            # consistent: the JSON names the file that belongs to it.
            name = "%s.trainer%d" % (os.path.basename(filename),
                                     index if ck and ck.preserve_all else index % 2)
            external = {"ctfio_session": state["session"], "ctfio_source": state["source"]}
            self.trainer.save_checkpoint(os.path.join(os.path.dirname(filename) or ".", name),
                                         external)
            state["trainer"] = name
        if self.on_checkpoint is not None:
            user = self.on_checkpoint(state)
            if user is not None:
                state["user"] = user
        for cb in self.callbacks:
            if hasattr(cb, "on_checkpoint"):
                cb.on_checkpoint(state)
        _write_json_atomic(filename, state)
        if ck is not None and ck.preserve_all and filename == ck.filename:
            _write_json_atomic("%s.%d" % (filename, index), state)
        self.checkpoint_index = index + 1
        return state

    def restore_from_checkpoint(self, filename: PathArg | None = None) -> dict[str, Any]:
        """Restores the source, the counters and the user's state from a checkpoint file."""
        if filename is None:
            if self.checkpoint_config is None:
                raise ValueError("restore_from_checkpoint: no filename and no checkpoint_config")
            filename = self.checkpoint_config.filename
        filename = os.fspath(filename)
        state = _read_json(filename)
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise ValueError("%s: not a ctfio training session checkpoint" % filename)
        if state.get("version") != _VERSION:
            raise ValueError("%s: checkpoint version %r, this ctfio reads version %d"
                             % (filename, state.get("version"), _VERSION))
        s = state["session"]
        if s.get("epoch_size") != self._json_epoch_size():
            warnings.warn("%s: the checkpoint was taken with epoch_size %r, the session has %r; "
                          "epoch numbering continues from the checkpoint"
                          % (filename, s.get("epoch_size"), self._json_epoch_size()),
                          stacklevel=1)
        self.source.restore_from_checkpoint(state["source"])
        for key in ("samples_seen", "epoch", "epoch_start", "minibatches", "epoch_minibatches",
                    "sweeps", "checkpoint_index", "cv_index", "finished"):
            setattr(self, key, s[key])
        if state.get("trainer") and self.trainer is not None and \
                hasattr(self.trainer, "restore_from_checkpoint"):
            path = os.path.join(os.path.dirname(filename) or ".", state["trainer"])
            self.trainer.restore_from_checkpoint(path)
        if self.on_restore is not None:
            self.on_restore(state)
        for cb in self.callbacks:
            if hasattr(cb, "on_restore"):
                cb.on_restore(state)
        self.restored_from = filename
        self._print("restored %s: epoch %d, %d samples, %d minibatches seen"
                    % (filename, self.epoch, self.samples_seen, self.minibatches))
        return state

    # -- the loop -----------------------------------------------------------------------------

    def _json_epoch_size(self):
        return {FULL_DATA_SWEEP: "FULL_DATA_SWEEP",
                INFINITELY_REPEAT: "INFINITELY_REPEAT"}.get(self.epoch_size, self.epoch_size)

    def _counters(self):
        return {"samples_seen": self.samples_seen, "epoch": self.epoch,
                "epoch_start": self.epoch_start, "minibatches": self.minibatches,
                "epoch_minibatches": self.epoch_minibatches, "sweeps": self.sweeps,
                "checkpoint_index": self.checkpoint_index, "cv_index": self.cv_index,
                "finished": self.finished, "epoch_size": self._json_epoch_size(),
                "number_of_workers": self.number_of_workers, "worker_rank": self.worker_rank}

    def _done(self):
        if self._stop:
            return True
        if self.max_samples == FULL_DATA_SWEEP:
            if self.sweeps >= 1:
                return True
        elif self.max_samples != INFINITELY_REPEAT and self.samples_seen >= self.max_samples:
            return True
        return self.max_epochs is not None and self.epoch >= self.max_epochs

    @staticmethod
    def _next_point(freq: int | None, seen: int) -> int | None:
        """The next multiple of a numeric frequency after ``seen`` (None if not numeric)."""
        if freq is None or freq == INFINITELY_REPEAT:
            return None
        return (seen // freq + 1) * freq

    def _request(self, size):
        """The request before the epoch's cut (_loop.Epochs): the size, cut at max_samples and
        at the next checkpoint and cross-validation points."""
        limits = [size]
        if self.max_samples not in (FULL_DATA_SWEEP, INFINITELY_REPEAT):
            limits.append(self.max_samples - self.samples_seen)
        for cfg in (self.checkpoint_config, self.cv_config):
            if cfg is not None:
                point = self._next_point(cfg.frequency, self.samples_seen)
                if point is not None:
                    limits.append(point - self.samples_seen)
        return max(1, min(limits))

    def _counter(self, source):
        """The count of one source's minibatches (_loop.SampleCounter)."""
        workers, reports = self.number_of_workers, source_timeline(source)[0] is not None
        if workers > 1 and self.aggregate_samples is None and not reports and \
                not self._warned_workers:
            self._warned_workers = True
            warnings.warn("training_session: %d workers, but the source reports no timeline "
                          "position (minibatchSourcePosition) and no aggregate_samples was "
                          "given; counting this worker's own samples, so workers may disagree "
                          "on epoch boundaries" % workers, stacklevel=1)
        return SampleCounter(workers, self.aggregate_samples, reports)

    def _call(self, data, info):
        if self.step is not None:
            return _metrics(self.step(_remap(data, self.model_inputs_to_streams), info))
        args = _remap(data, self.model_inputs_to_streams)
        self.trainer.train_minibatch(args)
        m = {}
        for name, attr in (("loss", "previous_minibatch_loss_average"),
                           ("metric", "previous_minibatch_evaluation_average")):
            v = getattr(self.trainer, attr, None)
            if v is not None:
                with contextlib.suppress(TypeError, ValueError):
                    m[name] = float(v)
        return m

    def _trainer_seen(self):
        """The trainer's ``total_number_of_samples_seen`` when it reports one (an int), else
        None: then the session counts the source's samples."""
        if self.trainer is None:
            return None
        v = getattr(self.trainer, "total_number_of_samples_seen", None)
        if isinstance(v, bool) or not isinstance(v, int):
            try:
                v = int(v) if v is not None and not isinstance(v, bool) and \
                    float(v) == int(v) else None
            except (TypeError, ValueError, OverflowError):
                v = None
        return v

    def _next_data(self, source, request, period=0):
        extra = {"period": period} if period else {}
        if self._device is None:
            return source._next(request, self.number_of_workers, self.worker_rank, **extra)
        return source._next(request, self.number_of_workers, self.worker_rank, self._device,
                            **extra)

    def _loop(self):
        if self._progress_arg is True and self._out is not None and self._bar is None:
            self._open_bar()
        count = self._counter(self.source)
        epochs = Epochs(self.epoch_size, self.epoch, self.samples_seen,
                        *source_timeline(self.source))
        epoch_avg = _Averages()
        line_avg = _Averages()
        epoch_t0 = time.time()
        last_line = self.samples_seen
        ran = 0
        stats_log = None if self.log_stats_every is None else \
            StatsLogger(self.source, self.log_stats_every)

        # ctfio's reader cuts at the epochs' ends itself where it can, so that every request
        # has the same size and the minibatch it read ahead is the one asked for next.
        bounded = bool(getattr(self.source, "_cuts_at_period", False))

        def read(request, wanted):
            size, period = epochs.bound(wanted, request) if bounded else (request, 0)
            data = self._next_data(self.source, size, period)
            if not data:
                return None   # the source's own limit (max_samples / max_sweeps) ended the data
            after, _, per = timeline(data)
            local = count_local(data)
            return Step((data, local), count(data, local), after, per, end_of_sweep(data))

        for step, _ in drive(read, epochs, lambda: self._request(self._size_at(self.epoch)),
                             more=lambda: not self._done()):
            (data, local), samples, sweep_end = step.payload, step.samples, step.sweep_end
            info = StepInfo(epoch=self.epoch, minibatch=self.minibatches,
                            epoch_minibatch=self.epoch_minibatches,
                            samples_seen=self.samples_seen,
                            epoch_samples=self.samples_seen - self.epoch_start,
                            mb_size=self._size_at(self.epoch), request=step.request,
                            num_samples=samples, local_samples=local,
                            end_of_sweep=sweep_end, session=self)
            before = self._trainer_seen()
            metrics = self._call(data, info)
            after_t = self._trainer_seen() if before is not None else None
            if after_t is not None and after_t >= before:
                # CNTK counts what the trainer counts (the loss's samples: one per sequence
                # for a sequence classifier); the request above stays in the source's unit.
                samples = info.num_samples = after_t - before
            ran += 1
            epoch_avg.add(metrics, local)
            line_avg.add(metrics, local)
            epoch_end = step.finish(samples)
            self.samples_seen = epochs.counted
            self.minibatches += 1
            self.epoch_minibatches += 1
            if sweep_end:
                self.sweeps += 1
            if self._bar is not None:
                self._bar.update(samples)
                if metrics:
                    self._bar.set_postfix(metrics, refresh=False)
            if stats_log is not None:
                stats_log.tick()
            for cb in self.callbacks:
                fn = cb if callable(cb) and not hasattr(cb, "on_minibatch_end") else \
                    getattr(cb, "on_minibatch_end", None)
                if fn is not None and fn(info) is False:
                    self._stop = True
            pf = self.progress_frequency
            if pf not in (None, INFINITELY_REPEAT) and self.samples_seen // pf > last_line // pf:
                self._print("  %d samples, %d minibatches%s"
                            % (self.samples_seen, self.minibatches,
                               _fmt_metrics(line_avg.result())))
                line_avg = _Averages()
                last_line = self.samples_seen
            prev = self.samples_seen - samples
            if epoch_end:
                self._end_epoch(epoch_avg, epoch_t0)
                epoch_avg = _Averages()
                epoch_t0 = time.time()
            cv = self.cv_config
            if cv is not None and (epoch_end if cv.frequency is None else
                                   self._crossed(cv.frequency, prev)):
                self._run_cv()
            ck = self.checkpoint_config
            if ck is not None and (epoch_end if ck.frequency is None else
                                   self._crossed(ck.frequency, prev)):
                self.save_checkpoint()
        stopped = self._stop
        if stats_log is not None and ran:
            stats_log.final()
        if self.epoch_minibatches and ran:
            # An epoch that training left before its end is reported, not ended: the counters
            # stay as they are, so that a resumed run continues this epoch.
            self._print("epoch %d (partial): %d samples, %d minibatches%s, %.2f s"
                        % (self.epoch + 1, self.samples_seen - self.epoch_start,
                           self.epoch_minibatches, _fmt_metrics(epoch_avg.result()),
                           time.time() - epoch_t0))
        self.finished = not stopped

    def _crossed(self, freq, prev):
        if freq == INFINITELY_REPEAT:
            return False
        return self.samples_seen // freq > prev // freq

    def _end_epoch(self, avg, t0):
        result = StepInfo(epoch=self.epoch, samples=self.samples_seen - self.epoch_start,
                          minibatches=self.epoch_minibatches, samples_seen=self.samples_seen,
                          metrics=avg.result(), seconds=time.time() - t0, session=self)
        self.epoch_results.append({k: v for k, v in result.__dict__.items() if k != "session"})
        self._print("epoch %d: %d samples, %d minibatches%s, %.2f s"
                    % (self.epoch + 1, result.samples, result.minibatches,
                       _fmt_metrics(result.metrics), result.seconds))
        self.epoch += 1
        self.epoch_start = self.samples_seen
        self.epoch_minibatches = 0
        stop = False
        if self.on_epoch_end is not None and self.on_epoch_end(result) is False:
            stop = True
        for cb in self.callbacks:
            if hasattr(cb, "on_epoch_end") and cb.on_epoch_end(result) is False:
                stop = True
        if stop:
            self._stop = True

    # -- cross-validation ---------------------------------------------------------------------

    def _capture_cv_start(self):
        for cfg, attr in ((self.cv_config, "_cv_start_state"),
                          (self.test_config, "_test_start_state")):
            if cfg is not None and cfg.source is not None and getattr(self, attr) is None:
                if cfg.source is self.source:
                    raise ValueError("training_session: the cross-validation source must be "
                                     "another source object than the training source")
                setattr(self, attr, cfg.source.get_checkpoint_state())

    def _run_cv(self):
        cfg = cast(CrossValidationConfig, self.cv_config)  # called only with one
        index = self.cv_index
        self.cv_index += 1
        if cfg.source is None:
            ok = cfg.callback(index, None, 0, 0)  # type: ignore[misc]  # given without a source
            if ok is False:
                self._stop = True
            return
        result = self._validate(cfg, "cv %d" % (index + 1), index)
        self.cv_results.append(result)
        if cfg.callback is not None and cfg.callback(index, result["metric"], result["samples"],
                                                     result["minibatches"]) is False:
            self._stop = True

    def _validate(self, cfg, label, index):
        src = cfg.source
        start = self._cv_start_state if cfg is self.cv_config else self._test_start_state
        if start is not None:
            src.restore_from_checkpoint(start)
        mapping = _resolve_mapping(src, cfg.model_inputs_to_streams) \
            if cfg.model_inputs_to_streams else self.model_inputs_to_streams
        limit = cfg.max_samples
        if limit == FULL_DATA_SWEEP:
            # One sweep: cut the requests at the sweep's end when the source tells its size
            # (the CTF reader and MinibatchSourceFromData do), else stop at end_of_sweep.
            limit = _rest_of_sweep(start) or FULL_DATA_SWEEP
        total = 0.0
        weight = 0
        count = self._counter(src)
        t0 = time.time()
        # The validation pass is one "epoch" of `limit` samples on the loop of training.
        epochs = Epochs(limit, 0, 0, None, None)

        def read(request, _wanted):
            data = self._next_data(src, request)
            if not data:
                return None
            local = count_local(data)
            return Step((data, local), count(data, local), None, None, end_of_sweep(data))

        minibatches = 0
        for step, _ in drive(read, epochs, lambda: cfg.mb_size, one_epoch=True):
            data, local = step.payload
            args = _remap(data, mapping)
            info = StepInfo(cv_index=index, minibatch=minibatches, samples_seen=epochs.counted,
                            num_samples=step.samples, request=step.request,
                            end_of_sweep=step.sweep_end, epoch=self.epoch, session=self)
            value = None
            if cfg.evaluate is not None:
                value = cfg.evaluate(args, info)
            elif self.trainer is not None and hasattr(self.trainer, "test_minibatch"):
                value = self.trainer.test_minibatch(args)
            if isinstance(value, (tuple, list)):
                total += float(value[0])
                weight += int(value[1])
            elif value is not None:
                total += float(value) * local
                weight += local
            minibatches += 1
        samples = epochs.counted
        metric = total / weight if weight else None
        result = {"index": index, "samples_seen": self.samples_seen, "epoch": self.epoch,
                  "metric": metric, "samples": samples, "minibatches": minibatches,
                  "seconds": time.time() - t0}
        shown = "%s %.4g" % (cfg.metric_name, metric) if metric is not None else "no metric"
        self._print("%s: %s over %d samples (%d minibatches)"
                    % (label, shown, samples, minibatches))
        return result

    # -- progress -----------------------------------------------------------------------------

    def _open_progress(self):
        p = self._progress_arg
        self._out = None
        self._bar = None
        if p is False or p is None:
            return
        if callable(p):
            self._out = p
            return
        def out(line):
            if self._bar is not None:
                self._bar.write(line)
            else:
                print(line, flush=True)
        self._out = out

    def _open_bar(self):
        try:
            import tqdm
        except ImportError:
            return
        total = None
        if self.max_samples not in (FULL_DATA_SWEEP, INFINITELY_REPEAT):
            total = self.max_samples
        # disable=None: tqdm draws only on a terminal (no bar in logs, pipes, CI)
        self._bar = tqdm.tqdm(total=total, unit="sample", leave=False, disable=None,
                              initial=self.samples_seen, dynamic_ncols=True)

    def _close_progress(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _print(self, line):
        if self._out is not None:
            self._out(line)


def training_session(
    mb_source: Any = None, step: Any = None, *cntk_args: Any, trainer: Any = None,
    model_inputs_to_streams: StreamMap | None = None, mb_size: MbSize | None = 256,
    epoch_size: int | None = FULL_DATA_SWEEP, max_samples: int | None = INFINITELY_REPEAT,
    max_epochs: int | None = None, checkpoint_config: CheckpointConfig | None = None,
    cv_config: CrossValidationConfig | None = None,
    test_config: CrossValidationConfig | None = None, progress_frequency: int | None = None,
    progress: bool | str | Callable[[str], Any] = True, number_of_workers: int = 1,
    worker_rank: int = 0, aggregate_samples: Callable[[int], int] | None = None,
    callbacks: Iterable[Any] | None = None,
    on_epoch_end: Callable[[StepInfo], Any] | None = None,
    on_checkpoint: Callable[[dict[str, Any]], Any] | None = None,
    on_restore: Callable[[dict[str, Any]], Any] | None = None,
    minibatch_source: MinibatchSource | None = None, minibatch_size: MbSize | None = None,
    var_to_stream: StreamMap | None = None, log_stats_every: float | None = None,
) -> TrainingSession:
    """A ``TrainingSession`` over any minibatch source; call ``.train()`` to run it.

    ``training_session(mb_source, step, ...)``: ``step(data, info)`` does one update;
    ``data`` is ``{StreamInformation: MinibatchData}`` (keyed by the model inputs when
    ``model_inputs_to_streams`` is given; its values may be StreamInformation or stream names),
    ``info`` a ``StepInfo``. It may return the minibatch's loss (a number), or a dict of named
    averages, for the progress lines.

    CNTK's form ``training_session(trainer, mb_source, mb_size, model_inputs_to_streams, ...)``
    (or ``trainer=`` as a keyword) drives ``trainer.train_minibatch(arguments)`` instead, reads
    ``previous_minibatch_loss_average`` / ``previous_minibatch_evaluation_average`` for progress,
    and checkpoints through ``trainer.save_checkpoint(filename, external_state)`` /
    ``trainer.restore_from_checkpoint(filename)`` when it has them.

    Keywords: ``mb_size`` (int, per-epoch list such as ``[128] * 2 + [1024]`` whose last entry
    repeats, ``(epochs, size)`` pairs, or a callable epoch -> size), ``epoch_size`` (samples, or
    ``FULL_DATA_SWEEP``: one sweep; ``INFINITELY_REPEAT``: a single endless epoch),
    ``max_samples`` (``INFINITELY_REPEAT``, a number of samples, or ``FULL_DATA_SWEEP``: stop
    after one sweep), ``max_epochs``, ``checkpoint_config``, ``cv_config``, ``test_config`` (a
    CrossValidationConfig run once after training), ``progress_frequency`` (samples between
    progress lines; there is always one per epoch), ``progress`` (True: the lines, plus a tqdm
    bar when tqdm is installed and stderr is a terminal; ``"plain"``; a callable that receives
    each line; False: silent),
    ``number_of_workers`` / ``worker_rank``, ``aggregate_samples`` (local count -> global count
    when several workers train), ``callbacks`` (callables called with ``info`` after every
    minibatch, or objects with any of ``on_minibatch_end(info)``, ``on_epoch_end(result)``,
    ``on_checkpoint(state)``, ``on_restore(state)``; returning False stops training),
    ``on_epoch_end(result)``, ``on_checkpoint(state)`` (returns the user's JSON-able state -- NumPy
    arrays allowed -- stored as ``state["user"]``) and ``on_restore(state)`` (gets the loaded
    checkpoint; the user's state is ``state["user"]``), ``log_stats_every`` (seconds: log the
    source's input-pipeline summary, ``ctfio.perf.summary``, through the ``"ctfio"`` logger
    this often while training and once at the end; None: never).
    """
    if mb_source is not None and hasattr(mb_source, "train_minibatch") and \
            not hasattr(mb_source, "_next"):
        # CNTK's positional order: (trainer, mb_source, mb_size, model_inputs_to_streams,
        # max_samples, progress_frequency, checkpoint_config, cv_config, test_config)
        if trainer is not None:
            raise TypeError("training_session: trainer given twice")
        trainer, mb_source = mb_source, step
        step = None
        names = ("mb_size", "model_inputs_to_streams", "max_samples", "progress_frequency",
                 "checkpoint_config", "cv_config", "test_config")
        if len(cntk_args) > len(names):
            raise TypeError("training_session: too many positional arguments")
        given = dict(zip(names, cntk_args))
        mb_size = given.get("mb_size", mb_size)
        model_inputs_to_streams = given.get("model_inputs_to_streams", model_inputs_to_streams)
        max_samples = given.get("max_samples", max_samples)
        progress_frequency = given.get("progress_frequency", progress_frequency)
        checkpoint_config = given.get("checkpoint_config", checkpoint_config)
        cv_config = given.get("cv_config", cv_config)
        test_config = given.get("test_config", test_config)
    elif cntk_args:
        raise TypeError("training_session(mb_source, step, ...): the other arguments are "
                        "keywords")
    if mb_source is None:
        mb_source = minibatch_source
    if minibatch_size is not None:
        mb_size = minibatch_size
    if var_to_stream is not None:
        model_inputs_to_streams = var_to_stream
    return TrainingSession(
        mb_source, step, trainer=trainer, model_inputs_to_streams=model_inputs_to_streams,
        mb_size=mb_size, epoch_size=epoch_size, max_samples=max_samples, max_epochs=max_epochs,
        checkpoint_config=checkpoint_config, cv_config=cv_config, test_config=test_config,
        progress_frequency=progress_frequency, progress=progress,
        number_of_workers=number_of_workers, worker_rank=worker_rank,
        aggregate_samples=aggregate_samples, callbacks=callbacks, on_epoch_end=on_epoch_end,
        on_checkpoint=on_checkpoint, on_restore=on_restore, log_stats_every=log_stats_every)
