"""Where the input pipeline's time goes, for people: a one-line summary of a source's
``stats()`` (the verdict the C library computes, then the figures it rests on), and a logger
that writes it through :mod:`logging` every N seconds while a loop reads.

The rule that names the limiting stage lives in the C library (``ctf_perf_verdict``), so that
``ctfio dump --stats``, this module and ``docs/performance.md`` agree.
"""

import logging
import time

from . import _check

__all__ = ["summary", "StatsLogger"]

LOGGER = logging.getLogger("ctfio")


def _rate(nbytes, ns):
    return "%.0f MB/s" % (nbytes * 1e3 / ns) if ns else "-"


def summary(stats):
    """One line from a ``stats()`` dict: the verdict, then the consumer's split of its time and
    the load stages' throughput. ``None`` when the source has no stage counters."""
    perf = stats.get("perf") if isinstance(stats, dict) else None
    if not perf:
        return None
    e = perf["elapsed_ns"] or 1
    return (
        "%s | %d minibatches in %.2f s: consumer %d%%, waiting for data %d%%, cut %d%%, "
        "pack %d%% | read %s, parse %s, %d chunks loaded, %d evicted"
        % (
            perf["verdict"]["text"],
            perf["minibatches"],
            perf["elapsed_ns"] * 1e-9,
            round(100 * perf["consumer_ns"] / e),
            round(100 * perf["wait_ns"] / e),
            round(100 * perf["cut_ns"] / e),
            round(100 * perf["pack_ns"] / e),
            _rate(perf["read_bytes"], perf["read_ns"]),
            _rate(perf["parse_bytes"], perf["parse_ns"]),
            perf["chunks_loaded"],
            perf["chunks_evicted"],
        )
    )


class StatsLogger:
    """Logs ``summary(source.stats())`` at most every ``every`` seconds: call ``tick()`` once per
    minibatch (cheap between logs: one clock read) and ``final()`` at the end of a run.

    ``every``: seconds (a positive number); ``logger``: a :class:`logging.Logger` (default the
    ``"ctfio"`` logger); ``level``: the records' level (default INFO)."""

    def __init__(self, source, every, logger=None, level=logging.INFO, clock=time.monotonic):
        _check.number(every, "log_stats_every")  # seconds
        self.source = source
        self.every = float(every)
        self.logger = logger if logger is not None else LOGGER
        self.level = level
        self._clock = clock
        self._next = clock() + self.every
        self.logged = 0

    def tick(self):
        now = self._clock()
        if now < self._next:
            return False
        self._next = now + self.every
        return self._log()

    def final(self):
        return self._log()

    def _log(self):
        line = summary(self.source.stats())
        if line is None:
            return False
        self.logger.log(self.level, "input pipeline: %s", line)
        self.logged += 1
        return True
