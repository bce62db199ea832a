"""The training loop over a minibatch source, written once for both drivers,
``training_session`` (training.py) and ``ctfio.torch.CTFIterableDataset`` (torch.py, its file
reader path and its general path): ``drive`` asks for a size, cuts the request at the epoch's
end, reads, counts the minibatch and decides the epoch's end (``Epochs``); a driver only says how
to read and what to do with a minibatch (docs/torch.md, "Epochs"). tests/python/test_loop.py
holds the drivers to the same minibatches and epoch ends.

The timeline comes from the minibatches themselves (``MinibatchData.position``,
``global_samples``, ``samples_per_sweep``, ``end_of_sweep``); a source is asked for its position
only before the first request (``_timeline()``, or once its checkpoint state for user sources).

Epoch rules:

* ``FULL_DATA_SWEEP``: an epoch is one sweep. When the source reports its position and the
  samples of a sweep, a request never crosses the end of the sweep, so every epoch holds
  exactly one sweep's samples; otherwise the epoch ends with the minibatch that holds the
  sweep's last sequence (``end_of_sweep``).
* a number E of samples: epoch k ends once (k + 1) * E samples were counted, and a request
  never crosses that point (an epoch is longer only when one sequence is longer than what is
  left).
* ``INFINITELY_REPEAT``: one epoch that never ends (the source's own limits end the data).

Cutting a request never changes the order of the data, only where minibatches begin and end.
"""

from .source import FULL_DATA_SWEEP, INFINITELY_REPEAT

__all__ = [
    "count_local",
    "end_of_sweep",
    "timeline",
    "source_timeline",
    "SampleCounter",
    "Epochs",
    "Step",
    "drive",
]


def count_local(data):
    """The samples of a minibatch as this worker sees them: the stream that
    ``defines_mb_size``, else the largest ``num_samples`` over its streams (CNTK's rule)."""
    best = 0
    for key, md in data.items():
        if getattr(key, "defines_mb_size", False):
            return int(md.num_samples)
        best = max(best, int(md.num_samples))
    return best


def end_of_sweep(data):
    """The minibatch holds the last sequence of a sweep."""
    return any(getattr(md, "end_of_sweep", False) for md in data.values())


def _int_or_none(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def timeline(data):
    """(position after it, global samples, samples per sweep) of a minibatch; None for what
    its source does not report."""
    for md in data.values():
        return (
            _int_or_none(getattr(md, "position", None)),
            _int_or_none(getattr(md, "global_samples", None)),
            _int_or_none(getattr(md, "samples_per_sweep", None)),
        )
    return None, None, None


def source_timeline(source, state=None):
    """(position, samples per sweep) where the source's next minibatch starts, or Nones: from
    ``source._timeline()`` (ctfio's own sources), else from a checkpoint state (``state``, or
    the source's own, read once) holding ``minibatchSourcePosition`` / ``samples_per_sweep``."""
    fn = getattr(source, "_timeline", None)
    if fn is not None:
        return fn()
    if state is None:
        try:
            state = source.get_checkpoint_state()
        except Exception:  # noqa: BLE001 - a user source without a usable state
            state = None
    if not isinstance(state, dict):
        return None, None
    per = _int_or_none(state.get("samples_per_sweep"))
    return _int_or_none(state.get("minibatchSourcePosition")), per if per and per > 0 else None


class SampleCounter:
    """Turns a minibatch into the count a driver uses. One worker: its local count. Several:
    ``aggregate(local)`` when given (e.g. an all-reduce), else the minibatch's
    ``global_samples`` (the advance of the shared timeline, the same on every worker), else
    the local count (``use_global`` False: workers may then disagree)."""

    def __init__(self, workers, aggregate=None, reports_global=True):
        self.aggregate = aggregate
        self.use_global = workers > 1 and aggregate is None and reports_global

    def __call__(self, data, local):
        if self.aggregate is not None:
            return int(self.aggregate(local))
        if self.use_global:
            g = timeline(data)[1]
            if g is not None:
                return g
        return local


class Epochs:
    """Where a driver stands (the epoch, the samples counted by the driver's count, the
    timeline: position and samples per sweep, None when unknown) and the epoch rules above."""

    __slots__ = ("epoch_size", "epoch", "counted", "position", "per_sweep")

    def __init__(self, epoch_size, epoch, counted, position, per_sweep):
        self.epoch_size, self.epoch, self.counted = epoch_size, epoch, counted
        self.position, self.per_sweep = position, per_sweep

    def room(self):
        """The most samples the next request may take so that the epoch ends exactly at its
        boundary, or None for no bound."""
        if self.epoch_size == INFINITELY_REPEAT:
            return None
        if self.epoch_size == FULL_DATA_SWEEP:
            if self.position is None or not self.per_sweep:
                return None
            return self.per_sweep - self.position % self.per_sweep
        return (self.epoch + 1) * self.epoch_size - self.counted

    def request(self, k):
        """``k`` cut at the epoch's end (never below 1)."""
        room = self.room()
        return max(1, k if room is None else min(k, room))

    def bound(self, k, request):
        """``(num_samples, period)`` to ask a ctfio reader that cuts at the multiples of
        ``period`` of its timeline itself (``Reader.next(..., period=)``) for what ``request``
        (``self.request(k)``) asks. Where the epochs' ends are the multiples of one period of
        the position (sweeps, or epochs of a fixed size counted by the position) that is
        ``(k, period)``: every step then asks for the same size, and the minibatch the reader
        read ahead is the one it is asked for. Otherwise ``(request, 0)``."""
        if self.position is None or self.epoch_size == INFINITELY_REPEAT:
            return request, 0
        period = self.per_sweep if self.epoch_size == FULL_DATA_SWEEP else self.epoch_size
        if not period:
            return request, 0
        if max(1, min(k, period - self.position % period)) != request:
            return request, 0
        return k, period

    def count(self, samples, position, per_sweep, sweep_end):
        """Counts a minibatch; True when it ends the epoch (the next one then begins)."""
        self.counted += samples
        if position is not None:
            self.position, self.per_sweep = position, per_sweep or self.per_sweep
        if self.epoch_size == FULL_DATA_SWEEP:
            ends = bool(sweep_end)
        else:
            ends = (
                self.epoch_size != INFINITELY_REPEAT
                and self.counted >= (self.epoch + 1) * self.epoch_size
            )
        self.epoch += ends
        return ends


class Step:
    """One minibatch on its way through ``drive``: what the driver's ``read`` made of it
    (``payload``), its count, the timeline after it and whether it holds a sweep's end; then the
    request it answered and, once counted (``finish``), whether it ends the epoch."""

    __slots__ = (
        "payload",
        "samples",
        "position",
        "per_sweep",
        "sweep_end",
        "request",
        "ends",
        "_epochs",
    )

    def __init__(self, payload, samples, position=None, per_sweep=None, sweep_end=False):
        self.payload, self.samples, self.position = payload, samples, position
        self.per_sweep, self.sweep_end, self.request, self.ends = per_sweep, sweep_end, 0, None

    def finish(self, samples=None):
        """Counts the minibatch (with ``samples`` when the driver learnt a better count after
        using it) and says whether it ends the epoch; later calls only repeat the answer."""
        if self.ends is None:
            if samples is not None:
                self.samples = samples
            self.ends = self._epochs.count(
                self.samples, self.position, self.per_sweep, self.sweep_end
            )
        return self.ends


def drive(read, epochs, size, more=None, ahead=False, one_epoch=False):
    """The loop of every driver. Before each minibatch: ``more()`` (when given) may end it,
    ``size()`` gives the wanted size, ``epochs`` cuts it at the epoch's end, and
    ``read(request, wanted)`` returns a ``Step`` (or None: the source's data ended); ``wanted``
    is the size before the cut (for ``Epochs.bound``). Yields ``(step, read_ahead)``; the
    step is counted when the consumer calls ``step.finish`` or, at the latest, when it asks for
    the next one. ``ahead``: the next minibatch is read (and counted) before one is yielded,
    except after the one that ends an epoch (double buffering; ``read_ahead`` says whether it
    was). ``one_epoch``: the loop ends with the epoch."""

    def next_step():
        if more is not None and not more():
            return None
        wanted = size()
        request = epochs.request(wanted)
        step = read(request, wanted)
        if step is not None:
            step.request, step._epochs = request, epochs
            if ahead:
                step.finish()
        return step

    step = next_step()
    while step is not None:
        following = next_step() if ahead and not (one_epoch and step.ends) else None
        yield step, following is not None
        if step.finish() and one_epoch:
            return
        step = following if ahead else next_step()
