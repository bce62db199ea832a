"""The input types, options, settings and errors of PaddlePaddle-style providers
(``paddle.trainer.PyDataProvider2``'s names): ``dense_vector``, ``integer_value_sequence``, ...,
``CacheType``, ``SequenceType``, the ``@provider`` option defaults and their validation,
``Settings`` and ``SampleError``. The numbers of the types are those the C encoder
(_provider.c) understands.
"""

import logging

from .. import _check

__all__ = [
    "SequenceType", "DataType", "CacheType", "InputType", "Settings", "SampleError",
    "OPTION_DEFAULTS", "check_options",
    "dense_slot", "sparse_non_value_slot", "sparse_value_slot", "index_slot",
    "dense_vector", "sparse_binary_vector", "sparse_vector", "integer_value",
    "dense_vector_sequence", "dense_vector_sub_sequence",
    "sparse_binary_vector_sequence", "sparse_binary_vector_sub_sequence",
    "sparse_vector_sequence", "sparse_vector_sub_sequence",
    "integer_value_sequence", "integer_value_sub_sequence", "integer_sequence",
]


# ---------------------------------------------------------------------------------------------
# Input types (PyDataProvider2's table; the numbers are those of the C encoder, _provider.c)
# ---------------------------------------------------------------------------------------------

class SequenceType:
    NO_SEQUENCE = 0
    SEQUENCE = 1
    SUB_SEQUENCE = 2


class DataType:
    Dense = 0
    SparseNonValue = 1
    SparseValue = 2
    Index = 3


class CacheType:
    NO_CACHE = 0            # every pass calls the generators
    CACHE_PASS_IN_MEM = 1   # later passes replay the converted samples of the first from memory


_KIND_NAMES = ("dense_vector", "sparse_binary_vector", "sparse_vector", "integer_value")
_SEQ_SUFFIX = ("", "_sequence", "_sub_sequence")


class InputType:
    """One input: ``dim`` (vector dimension, or the integer range), ``seq_type`` and ``type``."""

    __slots__ = ("dim", "seq_type", "type")

    def __init__(self, dim, seq_type, tp):
        if not 1 <= _check.index(dim, "InputType.dim") < 2**31:
            raise ValueError("InputType.dim: must be an int in [1, 2**31) (got %r)" % (dim,))
        if seq_type not in (0, 1, 2):
            raise ValueError("InputType.seq_type: must be a SequenceType (got %r)" % (seq_type,))
        if tp not in (0, 1, 2, 3):
            raise ValueError("InputType.type: must be a DataType (got %r)" % (tp,))
        self.dim, self.seq_type, self.type = dim, seq_type, tp

    @property
    def is_sparse(self):
        return self.type in (DataType.SparseNonValue, DataType.SparseValue)

    def __eq__(self, other):
        return isinstance(other, InputType) and (self.dim, self.seq_type, self.type) == (
            other.dim, other.seq_type, other.type)

    def __hash__(self):
        return hash((self.dim, self.seq_type, self.type))

    def __repr__(self):
        return "%s%s(%d)" % (_KIND_NAMES[self.type], _SEQ_SUFFIX[self.seq_type], self.dim)


def dense_slot(dim, seq_type=SequenceType.NO_SEQUENCE):
    return InputType(dim, seq_type, DataType.Dense)


def sparse_non_value_slot(dim, seq_type=SequenceType.NO_SEQUENCE):
    return InputType(dim, seq_type, DataType.SparseNonValue)


def sparse_value_slot(dim, seq_type=SequenceType.NO_SEQUENCE):
    return InputType(dim, seq_type, DataType.SparseValue)


def index_slot(value_range, seq_type=SequenceType.NO_SEQUENCE):
    return InputType(value_range, seq_type, DataType.Index)


dense_vector = dense_slot
sparse_binary_vector = sparse_non_value_slot
sparse_vector = sparse_value_slot
integer_value = index_slot


def dense_vector_sequence(dim):
    return dense_vector(dim, seq_type=SequenceType.SEQUENCE)


def dense_vector_sub_sequence(dim):
    return dense_vector(dim, seq_type=SequenceType.SUB_SEQUENCE)


def sparse_binary_vector_sequence(dim):
    return sparse_binary_vector(dim, seq_type=SequenceType.SEQUENCE)


def sparse_binary_vector_sub_sequence(dim):
    return sparse_binary_vector(dim, seq_type=SequenceType.SUB_SEQUENCE)


def sparse_vector_sequence(dim):
    return sparse_vector(dim, seq_type=SequenceType.SEQUENCE)


def sparse_vector_sub_sequence(dim):
    return sparse_vector(dim, seq_type=SequenceType.SUB_SEQUENCE)


def integer_value_sequence(value_range):
    return integer_value(value_range, seq_type=SequenceType.SEQUENCE)


def integer_value_sub_sequence(value_range):
    return integer_value(value_range, seq_type=SequenceType.SUB_SEQUENCE)


integer_sequence = integer_value_sequence


# ---------------------------------------------------------------------------------------------
# Options, settings, errors
# ---------------------------------------------------------------------------------------------

# The @provider parameters with their defaults, in PaddlePaddle's order.
OPTION_DEFAULTS = dict(input_types=None, should_shuffle=None, pool_size=-1, min_pool_size=-1,
                       can_over_batch_size=True, calc_batch_size=None,
                       cache=CacheType.NO_CACHE, check=False, check_fail_continue=False,
                       init_hook=None)


def _count(value, name, zero_ok):
    value = _check.index(value, name)
    if not (value == -1 or value >= (0 if zero_ok else 1)):
        raise ValueError("%s: must be -1 (unbounded) or an int >= %d (got %r)"
                         % (name, 0 if zero_ok else 1, value))
    return value


_SHUFFLE_WORDS = {"t": True, "true": True, "on": True, "f": False, "false": False,
                  "off": False}


def _shuffle_flag(value, where):
    """should_shuffle as PaddlePaddle reads it: None (shuffle when training), a bool, 1 or 0,
    or a word t/true/on/f/false/off in any case. Anything else is logged as a warning and
    taken as None, the default, as PaddlePaddle does."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in _SHUFFLE_WORDS:
        return _SHUFFLE_WORDS[value.lower()]
    logging.getLogger("ctfio.provider").warning(
        "%s.should_shuffle: %r is not a boolean (true/false, t/f, on/off, 1/0); using the "
        "default (shuffle when training)", where, value)
    return None


def check_options(opts, where="provider"):
    """Validates the @provider options (input_types may still be None); returns them."""
    unknown = set(opts) - set(OPTION_DEFAULTS)
    if unknown:
        raise TypeError("%s: unknown parameter(s) %s (known: %s)"
                        % (where, ", ".join(sorted(unknown)), ", ".join(OPTION_DEFAULTS)))
    o = dict(OPTION_DEFAULTS, **opts)
    if o["input_types"] is not None:
        _slots(o["input_types"], where)
    o["should_shuffle"] = _shuffle_flag(o["should_shuffle"], where)
    pool = _count(o["pool_size"], where + ".pool_size", False)
    low = _count(o["min_pool_size"], where + ".min_pool_size", True)
    if pool != -1 and low > pool:
        raise ValueError("%s.min_pool_size: must be <= pool_size (got %d > %d)"
                         % (where, low, pool))
    for name in ("can_over_batch_size", "check", "check_fail_continue"):
        _check.flag(o[name], "%s.%s" % (where, name))
    for name in ("calc_batch_size", "init_hook"):
        if o[name] is not None and not callable(o[name]):
            raise TypeError("%s.%s: must be callable or None (got %r)" % (where, name, o[name]))
    if o["cache"] not in (CacheType.NO_CACHE, CacheType.CACHE_PASS_IN_MEM):
        raise ValueError("%s.cache: must be CacheType.NO_CACHE or CacheType.CACHE_PASS_IN_MEM "
                         "(got %r)" % (where, o["cache"]))
    return o


def _slots(input_types, where):
    """(names, InputTypes) from a list (names input0, input1, ...) or a dict of InputTypes."""
    if isinstance(input_types, dict):
        names, types = list(input_types), list(input_types.values())
    elif isinstance(input_types, (list, tuple)):
        names, types = ["input%d" % i for i in range(len(input_types))], list(input_types)
    else:
        raise TypeError("%s.input_types: must be a list or a dict of input types such as "
                        "dense_vector(784) (got %r)" % (where, input_types))
    if not types:
        raise ValueError("%s.input_types: at least one input is required" % where)
    for name, t in zip(names, types):
        if not isinstance(name, str) or not isinstance(t, InputType):
            raise TypeError("%s.input_types[%r]: must be an input type such as dense_vector(784) "
                            "under a str name (got %r)" % (where, name, t))
    return names, types


class Settings:
    """The object passed to ``init_hook`` and, as its first argument, to every ``process`` call.
    It carries ``input_types``, ``logger``, ``is_train``, ``file_list``, the @provider options
    (an init_hook may change them, ``input_types`` in particular) and whatever the init_hook
    stores. Reading threads share it: treat it as read-only inside ``process``."""

    def __repr__(self):
        return "Settings(%s)" % ", ".join("%s=%r" % kv for kv in sorted(vars(self).items())
                                          if kv[0] not in ("file_list", "logger"))


class SampleError(ValueError):
    """A sample that does not match its input types: ``path`` (the file), ``sample`` (0-based
    number of the sample in that file, as yielded) and the message of the check."""

    def __init__(self, path, sample, message):
        super().__init__("%s: sample %d: %s" % (path, sample, message))
        self.path, self.sample, self.message = path, sample, message


def _note(exc, text):
    if hasattr(exc, "add_note"):  # Python 3.11+
        exc.add_note(text)
