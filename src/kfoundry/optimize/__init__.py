"""`kfoundry.optimize(problem, ...)`: the whole search on one problem, returning the result record
that result.json holds. `kfoundry optimize` is the command over it."""

import sys
import types

from kfoundry.optimize.driver import optimize
from kfoundry.optimize.settings import OptimizeSettings

__all__ = ["OptimizeSettings", "optimize"]


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return optimize(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
