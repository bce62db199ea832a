"""``ctfio.paddle``: the names of PaddlePaddle's ``paddle.trainer.PyDataProvider2``, so that a
provider module ports by changing one import::

    from paddle.trainer.PyDataProvider2 import *    # before
    from ctfio.paddle import *                      # after

Everything here is ``ctfio.provider``'s (see that module and docs/providers.md).
"""

from .provider import *  # noqa: F401,F403 - the alias module
from .provider import __all__  # noqa: F401
