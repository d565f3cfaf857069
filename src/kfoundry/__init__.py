"""Kernel Foundry: turn PyTorch reference programs into fast, verified GPU kernels.

`kfoundry.evaluate(problem_path, candidate_path, **settings)` returns an `Evaluation`;
`kfoundry.optimize(problem_path, **settings)` runs a search and returns its result record.
"""

import sys
import types

__version__ = "0.1.0"

_LAZY = {"evaluate", "Evaluator", "EvalOptions", "optimize"}


def __getattr__(name: str):
    # torch loads only when the evaluator is used, so `kfoundry --help` stays fast
    if name in _LAZY:
        import importlib

        if name == "optimize":
            return importlib.import_module("kfoundry.optimize").optimize
        module = importlib.import_module("kfoundry.evaluate")
        return module if name == "evaluate" else getattr(module, name)
    raise AttributeError(f"module 'kfoundry' has no attribute {name!r}")


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value) -> None:
        # Importing kfoundry.optimize binds the submodule here; bind its function instead, which reads the
        # submodule's attributes (kfoundry.optimize._public), so `help(kfoundry.optimize)` shows the function.
        if name == "optimize" and isinstance(value, types.ModuleType):
            value = value.optimize
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
