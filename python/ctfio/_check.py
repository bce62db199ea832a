"""Argument checks of the Python layer, one function per kind of argument, one exception per
mistake: ``TypeError`` when the type is wrong (a bool, a float or a str where an int is wanted:
2.9 is refused, never truncated to 2), ``ValueError`` when the type is right and the value is out
of range. Messages start with the argument's name as the caller spells it. The worker rule is the
C library's (``ctf_workers_check``), reached through the extension."""

import operator

from . import _ctfio

# The limits' one spelling: the C library's own encoding (CTF_INFINITELY_REPEAT, 2**64 - 1;
# CTF_FULL_DATA_SWEEP, 2**64 - 2), as the extension exports it.
INFINITELY_REPEAT = _ctfio.INFINITELY_REPEAT
FULL_DATA_SWEEP = _ctfio.FULL_DATA_SWEEP


def index(value, name):
    """``value`` as an int: ints and integer types with ``__index__`` (NumPy's), never a bool,
    a float or a str (TypeError)."""
    if isinstance(value, bool):
        raise TypeError("%s: must be an int (got bool)" % name)
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("%s: must be an int (got %s)" % (name, type(value).__name__)) from None


def count(value, name, minimum=0, allow_none=False):
    """An int >= ``minimum`` (``None`` passes through when ``allow_none``)."""
    if value is None and allow_none:
        return None
    v = index(value, name)
    if v < minimum:
        raise ValueError("%s: must be an int >= %d (got %r)" % (name, minimum, value))
    return v


def positive(value, name, allow_none=False):
    """An int >= 1 (``None`` passes through when ``allow_none``)."""
    return count(value, name, 1, allow_none)


def number(value, name):
    """A finite number > 0 (an int or a float, not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("%s: must be a number (got %s)" % (name, type(value).__name__))
    if not value > 0 or value == float("inf"):
        raise ValueError("%s: must be a finite number > 0 (got %r)" % (name, value))
    return value


def flag(value, name):
    """A bool, strictly (``1`` is not a flag)."""
    if not isinstance(value, bool):
        raise TypeError("%s: must be a bool (got %s)" % (name, type(value).__name__))
    return value


def limit(value, name):
    """A sample or sweep limit as the Python sources use it: ``None`` for no limit (the value
    ``INFINITELY_REPEAT``, or the argument left out as None), ``FULL_DATA_SWEEP``, or a
    count."""
    if value is None or (not isinstance(value, bool) and value == INFINITELY_REPEAT):
        return None
    return count(value, name)


def workers(number_of_workers, worker_rank, prefix="", names=("number_of_workers", "worker_rank")):
    """``(number_of_workers, worker_rank)`` as ints, checked by the library's worker rule:
    at least one worker, and a rank below their number. ``names``: the caller's spelling of
    the two arguments, for the type errors."""
    n = index(number_of_workers, prefix + names[0])
    r = index(worker_rank, prefix + names[1])
    try:
        _ctfio.check_workers(n, r)
    except ValueError as e:
        raise ValueError(prefix + str(e)) from None
    return n, r
