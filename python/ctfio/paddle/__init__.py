"""``ctfio.paddle``: PaddlePaddle-style data providers (``paddle.trainer.PyDataProvider2``'s
names), so that a provider module ports by changing one import::

    from paddle.trainer.PyDataProvider2 import *    # before
    from ctfio.paddle import *                      # after

``@provider`` turns a generator ``process(settings, filename)`` that yields one sample at a
time into a ``DataProvider`` class, a ``UserMinibatchSource`` that reads files in background
threads, shuffles through a seeded pool, caches passes in memory and assembles the batches in
C::

    @provider(input_types={"pixel": dense_vector(784), "label": integer_value(10)})
    def process(settings, filename):
        with open(filename) as f:
            for line in f:
                label, pixels = line.split(";")
                yield {"pixel": [float(x) for x in pixels.split()], "label": int(label)}

    for batch in process("train.list", batch_size=128):   # one pass
        x, y = batch["pixel"].value, batch["label"].ids     # (n, 784) float32, (n,) int64

The subpackage: types.py (input types, options, settings, errors), _reading.py (the reading
threads), data_provider.py (DataProvider: files, cache, batches, checkpoints); the encoder is in
the extension (_provider.c), the pool, its draws and the packer in lib/ (lib/reader/pool.c,
lib/format/record.c), the double buffering is ctfio/_staging.py (shared
with ctfio.torch). ``ctfio.provider`` is the same API under its older name, and also callable
as the decorator (``@ctfio.provider(...)``). See docs/providers.md.
"""

import importlib

from .data_provider import Batch, DataProvider, ProviderData, StagedData  # noqa: F401
from .types import (  # noqa: F401 - re-exported
    OPTION_DEFAULTS,
    CacheType,
    DataType,
    InputType,
    SampleError,
    SequenceType,
    Settings,
    check_options,
    dense_slot,
    dense_vector,
    dense_vector_sequence,
    dense_vector_sub_sequence,
    index_slot,
    integer_sequence,
    integer_value,
    integer_value_sequence,
    integer_value_sub_sequence,
    sparse_binary_vector,
    sparse_binary_vector_sequence,
    sparse_binary_vector_sub_sequence,
    sparse_non_value_slot,
    sparse_value_slot,
    sparse_vector,
    sparse_vector_sequence,
    sparse_vector_sub_sequence,
)

__all__ = [
    "provider", "define_py_data_sources2", "DataProvider", "CacheType", "SequenceType", "DataType",
    "InputType", "Settings",
    "SampleError", "Batch", "ProviderData", "StagedData",
    "dense_vector", "sparse_binary_vector", "sparse_vector", "integer_value",
    "dense_vector_sequence", "dense_vector_sub_sequence",
    "sparse_binary_vector_sequence", "sparse_binary_vector_sub_sequence",
    "sparse_vector_sequence", "sparse_vector_sub_sequence",
    "integer_value_sequence", "integer_value_sub_sequence", "integer_sequence",
    "dense_slot", "sparse_non_value_slot", "sparse_value_slot", "index_slot",
]


def provider(input_types=None, should_shuffle=None, pool_size=-1, min_pool_size=-1,
             can_over_batch_size=True, calc_batch_size=None, cache=CacheType.NO_CACHE,
             check=False, check_fail_continue=False, init_hook=None):
    """Marks ``process(settings, filename)`` as a data provider (PaddlePaddle's @provider).

    * ``input_types``: a list of input types (inputs named ``input0``, ``input1``, ...) or a
      dict ``{name: type}``; samples are lists in that order or dicts keyed by name. May be
      left None when ``init_hook`` sets ``settings.input_types``.
    * ``should_shuffle``: None shuffles when training (``is_train=True``), not when testing.
    * ``pool_size``: the most samples (calc_batch_size units) the pool holds; -1 unbounded.
    * ``min_pool_size``: the least the pool holds before a sample is drawn, while data remains
      (the shuffle granularity); -1 the whole pass (bounded by pool_size).
    * ``can_over_batch_size``: a sample that does not fit the rest of a batch joins it anyway
      (True) or starts the next batch (False).
    * ``calc_batch_size``: ``f(sample) -> int`` units of a sample (default 1).
    * ``cache``: ``CacheType.CACHE_PASS_IN_MEM`` replays later passes from memory.
    * ``check`` / ``check_fail_continue``: validate every sample against its type; drop (and
      count) the bad ones instead of raising ``SampleError``.
    * ``init_hook(settings, file_list=..., is_train=..., **args)``: runs once per provider.

    Returns a ``DataProvider`` subclass named after the function; instantiate it with the file
    list (``process("train.list", batch_size=128)``). ``process.generator`` is the function.
    """
    options = check_options(dict(
        input_types=input_types, should_shuffle=should_shuffle, pool_size=pool_size,
        min_pool_size=min_pool_size, can_over_batch_size=can_over_batch_size,
        calc_batch_size=calc_batch_size, cache=cache, check=check,
        check_fail_continue=check_fail_continue, init_hook=init_hook), "provider")

    def wrap(generator):
        if not callable(generator):
            raise TypeError("@provider: must decorate a generator function (got %r)"
                            % (generator,))
        cls = type(generator.__name__, (DataProvider,), {
            "generator": staticmethod(generator),
            "options": options,
            "__doc__": generator.__doc__ or DataProvider.__doc__,
            "__module__": getattr(generator, "__module__", __name__),
            "__wrapped__": generator,
        })
        cls.__qualname__ = getattr(generator, "__qualname__", generator.__name__)
        return cls

    return wrap


def _pair(value, name):
    """PaddlePaddle's train/test split of a parameter: a list or tuple of two is (train, test),
    anything else serves both."""
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return value[0], value[1]
    if isinstance(value, (list, tuple)):
        raise ValueError("define_py_data_sources2.%s: a pair (train, test) or one value (got %r)"
                         % (name, value))
    return value, value


def define_py_data_sources2(train_list, test_list, module, obj, args=None, **kwargs):
    """PaddlePaddle's configuration entry point for providers: returns ``(train, test)``, the
    provider ``obj`` of ``module`` bound to each file list, ``is_train=True`` for train and
    ``False`` for test, with ``args`` (a dict for init_hook). ``module``, ``obj`` and ``args``
    may each be a pair (train, test); ``module`` is a name to import or a module; a list that
    is None gives None. Other keyword arguments (``batch_size``, ``seed``, ...) go to both
    providers. A trainer configuration ports by changing its import::

        train, test = define_py_data_sources2("train.list", "test.list", module="mnist_provider",
                                              obj="process", batch_size=128)
    """
    if train_list is None and test_list is None:
        raise ValueError("define_py_data_sources2: train_list and test_list are both None")
    if module is None or obj is None:
        raise ValueError("define_py_data_sources2: module and obj are required (got %r, %r)"
                         % (module, obj))
    modules, objs, argss = _pair(module, "module"), _pair(obj, "obj"), _pair(args, "args")
    out = []
    for i, files in enumerate((train_list, test_list)):
        if files is None:
            out.append(None)
            continue
        mod = modules[i]
        if isinstance(mod, str):
            mod = importlib.import_module(mod)
        name = objs[i]
        cls = getattr(mod, name, None) if isinstance(name, str) else name
        if not (isinstance(cls, type) and issubclass(cls, DataProvider)):
            raise TypeError("define_py_data_sources2.obj: %r in module %r is not a @provider "
                            "(got %r)" % (name, getattr(mod, "__name__", mod), cls))
        a = argss[i]
        if a is not None and a != "" and not isinstance(a, dict):
            raise TypeError("define_py_data_sources2.args: must be a dict for init_hook "
                            "(got %r)" % (a,))
        out.append(cls(files, is_train=(i == 0), args=a or None, **kwargs))
    return tuple(out)
