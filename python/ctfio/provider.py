"""``ctfio.provider``: the PaddlePaddle-style providers under their older name, kept working
as an alias of ``ctfio.paddle`` (see that package and docs/providers.md)::

    from ctfio.provider import *          # the same as: from ctfio.paddle import *

This module is also callable: ``import ctfio; @ctfio.provider(...)`` works as the decorator, and
``ctfio.provider.CacheType`` reaches its names.
"""

import sys
import types

from .paddle import *  # noqa: F401,F403 - the alias
from .paddle import (  # noqa: F401 - names that are not in __all__
    OPTION_DEFAULTS,
    __all__,
    check_options,
    provider,
)


class _CallableModule(types.ModuleType):
    """``ctfio.provider`` is both this module and the decorator (``@ctfio.provider(...)``)."""

    def __call__(self, *args, **kwargs):
        return provider(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
