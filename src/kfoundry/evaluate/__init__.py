"""Evaluation: worker processes, correctness, timing, baselines, device facts, verdicts.

`kfoundry.evaluate(problem, candidate, **settings)` evaluates one candidate; this module is
callable for that. `Evaluator` evaluates many candidates against one prepared problem.
"""

import sys
import types

from kfoundry.evaluate.evaluator import Evaluator, evaluate
from kfoundry.evaluate.options import EvalOptions


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        return evaluate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["EvalOptions", "Evaluator", "evaluate"]
