"""Evaluation: worker processes, correctness, timing, baselines, device facts, verdicts.

`kfoundry.evaluate(problem, candidate, **settings)` evaluates one candidate; this module is
callable for that. `Evaluator` evaluates many candidates against one prepared problem.

The names below are imported on first use: the evaluation processes (the judge, the baseline process,
candidate workers: kfoundry.evaluate.worker) import this package too, and they need none of the
evaluator's own modules (the parent's orchestration, its diagnosis and static guard).
"""

import sys
import types
from importlib import import_module
from typing import Any

_WHERE = {"EvalOptions": "options", "Evaluator": "evaluator", "evaluate": "evaluator"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'kfoundry.evaluate' has no attribute {name!r}")
    return getattr(import_module(f"kfoundry.evaluate.{_WHERE[name]}"), name)


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from kfoundry.evaluate.evaluator import evaluate

        return evaluate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
