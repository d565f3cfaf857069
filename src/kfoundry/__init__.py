"""Kernel Foundry: turn PyTorch reference programs into fast, verified GPU kernels.

`kfoundry.evaluate(problem_path, candidate_path, **settings)` returns an `Evaluation`;
`kfoundry.optimize(problem_path, **settings)` runs a search and returns its result record.
"""

__version__ = "0.1.0"

_LAZY = {"evaluate", "Evaluator", "EvalOptions", "optimize"}


def __getattr__(name: str):
    # torch loads only when the evaluator is used, so `kfoundry --help` stays fast
    if name in _LAZY:
        import importlib

        if name == "optimize":
            return importlib.import_module("kfoundry.optimize")  # a callable module, like evaluate
        module = importlib.import_module("kfoundry.evaluate")
        return module if name == "evaluate" else getattr(module, name)
    raise AttributeError(f"module 'kfoundry' has no attribute {name!r}")
