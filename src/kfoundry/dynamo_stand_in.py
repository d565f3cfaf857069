"""A problem run on the meta device without importing torch._dynamo.

torch's Python meta kernels and decompositions (torch._refs, torch._decomp: a Linear's addmm, a LayerNorm's
var_mean on meta tensors) are wrapped in torch._disable_dynamo, whose wrapper imports torch._dynamo on the first
call of each function (torch/_compile.py), only to wrap it so that torch.compile does not trace into it: a
CPU-second in a main process that sizes a problem (evaluate.parent.memory_plan) and never compiles anything.

While `no_dynamo_import()` is open, `import torch._dynamo` finds a stand-in whose `disable(fn)` is a call of
the function itself (what torch's own wrapper does outside a compiled region). Any other attribute loads the
real module and answers from it, and the stand-in retires there and then: code that needs the real one (make_fx
imports torch._inductor) gets it, and from then on everything is as torch made it. Once the context is closed
(or the stand-in retired), the stand-in is gone from sys.modules, the wrappers it gave are taken off the
functions at the close, and a wrapper that some thread still holds hands over to the real
torch._dynamo.disable on its next call. Where torch._dynamo is imported already there is nothing to save and
the context does nothing.
"""

from __future__ import annotations

import importlib
import sys
import types
from contextlib import contextmanager
from typing import Any, Callable, Iterator

NAME = "torch._dynamo"
CACHED = "__dynamo_disable"  # the attribute torch._disable_dynamo's wrapper caches the wrapped function in


def _real(stand_in: "_StandIn") -> types.ModuleType:
    """torch._dynamo itself, imported now where it was not; the stand-in retires: from now on every wrapper it
    gave hands over to the real torch._dynamo.disable, as after the context."""
    stand_in.open = False
    if sys.modules.get(NAME) is stand_in:
        del sys.modules[NAME]
    return importlib.import_module(NAME)


class _StandIn(types.ModuleType):
    """What `import torch._dynamo` finds while the context is open."""

    def __init__(self) -> None:
        super().__init__(NAME)
        self.open = True
        self.given: list[tuple[Callable[..., Any], Callable[..., Any]]] = []  # (function, the wrapper given)

    def disable(self, fn: Callable[..., Any] | None = None, recursive: bool = True, **kwargs: Any) -> Any:
        if fn is None or not self.open:  # a decorator factory, or a call after the context: torch's own
            return _real(self).disable(fn, recursive, **kwargs)

        def call(*args: Any, **kw: Any) -> Any:
            if self.open:
                return fn(*args, **kw)
            real = importlib.import_module(NAME).disable(fn, recursive, **kwargs)
            setattr(fn, CACHED, real)  # from now on torch's wrapper calls the real one directly
            return real(*args, **kw)

        self.given.append((fn, call))
        return call

    def __getattr__(self, name: str) -> Any:  # anything but `disable`: the real module's
        return getattr(_real(self), name)

    def close(self) -> None:
        self.open = False
        if sys.modules.get(NAME) is self:
            del sys.modules[NAME]
        for fn, call in self.given:
            if getattr(fn, CACHED, None) is call:
                delattr(fn, CACHED)


@contextmanager
def no_dynamo_import() -> Iterator[None]:
    """Run torch's meta kernels and decompositions without importing torch._dynamo (see the module's docstring)."""
    if NAME in sys.modules:
        yield
        return
    stand_in = _StandIn()
    sys.modules[NAME] = stand_in
    try:
        yield
    finally:
        stand_in.close()
