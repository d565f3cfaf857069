"""`kfoundry.optimize(problem, ...)`: the whole search on one problem, returning the result record
that result.json holds. `kfoundry optimize` is the command over it."""

import types

from kfoundry.optimize import driver
from kfoundry.optimize.settings import OptimizeSettings

__all__ = ["OptimizeSettings", "optimize"]


def _public(function: types.FunctionType, namespace: dict) -> types.FunctionType:
    """`function` itself (same code, signature and docstring) whose attributes are `namespace`. The package binds
    `kfoundry.optimize` to it (kfoundry.__init__), so `help()` and `inspect.signature` see the function, while
    `kfoundry.optimize.OptimizeSettings` and `kfoundry.optimize.driver` still read this module, and setting
    `kfoundry.optimize.optimize` (a test's monkeypatch) still reaches `from kfoundry.optimize import optimize`."""
    public = types.FunctionType(function.__code__, function.__globals__, function.__name__, function.__defaults__,
                                function.__closure__)
    public.__kwdefaults__, public.__annotations__ = function.__kwdefaults__, function.__annotations__
    public.__doc__, public.__qualname__, public.__module__ = function.__doc__, function.__qualname__, __name__
    public.__dict__ = namespace
    return public


optimize = _public(driver.optimize, globals())
