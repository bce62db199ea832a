"""The reading threads of a provider: one feed per open file, filled by a pool of threads that
resume the file's generator and encode every sample in C (provider_encode), taken by the pass
on the caller's thread (data_provider.py). The threads never decide anything about the order:
they only read ahead (see data_provider.py's docstring).
"""

import collections
import queue
import sys
import threading
import weakref

from .. import _ctfio
from .types import SampleError, _note

# ---------------------------------------------------------------------------------------------
# Reading threads
# ---------------------------------------------------------------------------------------------

_IDLE, _QUEUED = 0, 1
_CHUNK = 32  # samples: the consumer's wake-up granularity, and the least read-ahead per file
_PUSH = 8    # samples a reading thread hands over at once


class _Feed:
    """The samples of one file, in file order, filled by the reading threads (or, for a cached
    file, complete from the start) and taken by the pool; at most ``readahead`` samples wait.

    Reading threads serve feeds cooperatively: a thread resumes a feed's generator until its
    queue is full, then marks it idle and moves on, and the consumer queues it for service
    again when it runs low. No thread ever blocks on a full queue, so any number of threads can
    serve any number of open files, and the thread count cannot change the data."""

    __slots__ = ("index", "path", "job", "readers", "cond", "items", "done", "error",
                 "cancelled", "state", "it", "count", "kept", "want", "__weakref__")

    def __init__(self, index, path, job=None, readers=None, replay=None):
        self.index = index            # position in the provider's full file list
        self.path = path
        self.job, self.readers = job, readers
        self.cond = threading.Condition(threading.Lock())
        self.items = collections.deque(replay or ())  # (record bytes, units)
        self.done = replay is not None
        self.error = None             # raised to the consumer after the samples before it
        self.cancelled = False
        self.state = _IDLE            # _QUEUED: waiting for or being served by a thread
        self.it = None                # the generator (iterator) while the file is open
        self.count = 0                # samples the generator yielded so far
        self.kept = [] if job is not None and job.cache is not None else None
        self.want = 0                 # items the consumer waits for (0: it does not wait)

    def _serve_locked(self):
        """Queues the feed for a reading thread unless it is queued, finished or cancelled."""
        if self.state == _IDLE and not self.done:
            self.state = _QUEUED
            self.readers.jobs.put(self)

    def take(self, k, room, oversize_ok):
        """Up to k (record, units) items in file order, fewer only where the file ends or the
        next item's units would exceed ``room`` (unless ``oversize_ok`` and nothing was taken:
        a sample larger than the pool enters an empty pool). @return : a list, [] when the
        next item does not fit, None once the file is finished. Raises the reading thread's
        error in place of the items after which it happened.

        When fewer than k items are queued this waits for a whole chunk (_CHUNK), not for one
        item, so a consumer that outpaces the reading threads wakes once per chunk. What is
        taken depends only on k, room and the file: never on the timing."""
        with self.cond:
            items = self.items
            if len(items) < k and not self.done:
                self.want = max(k, _CHUNK)
                while len(items) < self.want and not self.done:
                    self._serve_locked()
                    self.cond.wait()
                self.want = 0
            if not items:
                if self.error is not None:
                    raise self.error
                return None if self.done else []
            out = []
            while items and len(out) < k:
                u = items[0][1]
                if u > room and not (oversize_ok and not out):
                    break
                out.append(items.popleft())
                room -= u
            if self.job is not None and len(items) * 2 <= self.job.readahead:
                self._serve_locked()
            return out

    def cancel(self):
        """Ends the feed; an open generator is closed by a reading thread."""
        with self.cond:
            self.cancelled = True
            self.items.clear()
            if self.it is not None:
                self._serve_locked()
            self.cond.notify_all()


class _Counters:
    """Counters shared by the reading threads and the consumer (under one lock)."""

    FIELDS = ("generators_alive", "generators_alive_peak", "files_opened", "samples_read",
              "samples_dropped", "cache_files", "cache_samples")

    def __init__(self):
        self.lock = threading.Lock()
        for f in self.FIELDS:
            setattr(self, f, 0)
        self.drops = []               # the first 100 (path, sample, message) dropped

    def opened(self, delta):
        with self.lock:
            self.generators_alive += delta
            if delta > 0:
                self.files_opened += 1
                self.generators_alive_peak = max(self.generators_alive_peak,
                                                 self.generators_alive)


class _Job:
    """What the reading threads need to read a provider's files (no reference to the
    DataProvider itself)."""

    __slots__ = ("generator", "settings", "slots", "check", "fail_continue", "calc", "double",
                 "readahead", "counters", "cache", "logger")


def _units(calc, sample, path, n):
    """The units of a sample. 0 counts as 1: a sample always takes room, or a pool (and a
    batch) of zero-unit samples from an endless generator would never fill."""
    u = calc(sample)
    if not isinstance(u, int) or isinstance(u, bool) or u < 0:
        raise SampleError(path, n, "calc_batch_size must return an int >= 0 (got %r)" % (u,))
    return u or 1


_ENCODE_ERRORS = (TypeError, ValueError, OverflowError, RuntimeError)


def _encode_single(sample, job):
    """(record, sample as a list) with one input: as in PaddlePaddle, a non-dict sample is the
    value of that input itself (``yield 3``, ``yield [0.1, 0.2]``). The list form, the value
    in a one-item list (``yield [3]``), is still read when the value form does not fit the
    type: the two forms differ by a level of nesting, which the type fixes."""
    wrapped = [sample]
    try:
        return _ctfio.provider_encode(wrapped, job.slots, job.check, job.double), wrapped
    except _ENCODE_ERRORS:
        if not (isinstance(sample, (list, tuple)) and len(sample) == 1):
            raise
        first = sys.exc_info()[1]
    try:
        return _ctfio.provider_encode(sample, job.slots, job.check, job.double), sample
    except _ENCODE_ERRORS:
        raise first from None


def _convert(feed, job, sample):
    """(record, units) of one sample, or None when check_fail_continue drops it."""
    n = feed.count
    try:
        if len(job.slots) == 1 and not isinstance(sample, dict):
            rec, sample = _encode_single(sample, job)
        else:
            rec = _ctfio.provider_encode(sample, job.slots, job.check, job.double)
    except _ENCODE_ERRORS as e:
        if not (job.check and job.fail_continue):
            raise SampleError(feed.path, n, str(e)) from None
        c = job.counters
        with c.lock:
            c.samples_dropped += 1
            first = c.samples_dropped <= 10
            if len(c.drops) < 100:
                c.drops.append((feed.path, n, str(e)))
        if first:
            job.logger.warning("%s: sample %d dropped: %s", feed.path, n, e)
        return None
    return rec, 1 if job.calc is None else _units(job.calc, sample, feed.path, n)


def _close(feed, job, error, complete):
    """Releases the generator at once and finishes the feed (the cache keeps complete files)."""
    it, feed.it = feed.it, None
    if it is not None:
        close = getattr(it, "close", None)
        if close is not None and not complete:
            try:
                close()  # runs the generator's finally blocks here, in a reading thread
            except Exception as e:  # noqa: BLE001 - reported like any reading error
                error = error or e
        del it
        job.counters.opened(-1)
    with job.counters.lock:
        job.counters.samples_read += feed.count
        if complete and error is None and feed.kept is not None and not feed.cancelled:
            job.cache[feed.index] = feed.kept
            job.counters.cache_files += 1
            job.counters.cache_samples += len(feed.kept)
    feed.kept = None
    with feed.cond:
        feed.done, feed.error = True, error
        feed.cond.notify_all()


def _push(feed, job, items):
    """Hands a reading thread's local items to the consumer. @return : True when the queue is
    full (the feed goes idle); raises _Stop when the feed was cancelled."""
    with feed.cond:
        if feed.cancelled:
            raise _Stop
        feed.items.extend(items)
        if feed.want and len(feed.items) >= feed.want:
            feed.cond.notify()
        if len(feed.items) >= job.readahead:
            feed.state = _IDLE
            return True
        return False


def _serve(feed):
    """One turn of a reading thread on a feed: resume its generator until the queue is full,
    the file ends or the feed is cancelled. Items are handed over _PUSH at a time (at once
    while the consumer waits), which keeps lock traffic low for small samples."""
    job = feed.job
    with feed.cond:
        if feed.done:
            return
        if not feed.cancelled and len(feed.items) >= job.readahead:
            feed.state = _IDLE
            return
    local = []
    try:
        if feed.cancelled:
            raise _Stop
        if feed.it is None:
            feed.it = iter(job.generator(job.settings, feed.path))
            job.counters.opened(+1)
        it = feed.it
        kept = feed.kept
        while True:
            try:
                sample = next(it)
            except StopIteration:
                del it
                if local:
                    _push(feed, job, local)
                _close(feed, job, None, True)
                return
            item = _convert(feed, job, sample)
            feed.count += 1
            if item is None:
                continue
            if kept is not None:
                kept.append(item)
            local.append(item)
            if len(local) >= _PUSH or feed.want:
                full = _push(feed, job, local)
                local = []
                if full:
                    return
    except _Stop:
        _close(feed, job, None, False)
    except BaseException as e:  # surfaces in the consumer, at this point of the file
        if not isinstance(e, SampleError):
            _note(e, "ctfio.provider: while reading %r (after %d samples)"
                  % (feed.path, feed.count))
        try:
            if local:
                _push(feed, job, local)  # the samples before the error come first
        except _Stop:
            pass
        _close(feed, job, e, False)


class _Stop(Exception):
    """The feed was cancelled while a reading thread served it."""


def _reader_main(jobs):
    while True:
        feed = jobs.get()
        if feed is None:
            return
        _serve(feed)


class _Readers:
    """The reading threads of one provider. Holds no reference to the DataProvider, so that a
    forgotten provider is collected and its threads stopped (weakref.finalize)."""

    def __init__(self, count):
        self.jobs = queue.SimpleQueue()
        self.live = weakref.WeakSet()  # feeds that may still hold a generator
        self.threads = []
        for i in range(count):
            t = threading.Thread(target=_reader_main, args=(self.jobs,),
                                 name="ctfio-provider-%d" % i, daemon=True)
            t.start()
            self.threads.append(t)

    def open(self, feed):
        self.live.add(feed)
        with feed.cond:
            feed._serve_locked()  # start reading ahead at once

    def shutdown(self):
        for feed in list(self.live):
            feed.cancel()  # queued before the stop markers: their generators get closed
        for _ in self.threads:
            self.jobs.put(None)
        current = threading.current_thread()
        for t in self.threads:
            if t is not current:
                t.join(timeout=5)
        self.threads = []
