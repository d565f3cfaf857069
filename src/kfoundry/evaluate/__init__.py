"""Evaluation: worker processes, correctness, timing, baselines, device facts, verdicts.

`kfoundry.evaluate(problem, candidate, **settings)` evaluates one candidate; this module is
callable for that. `Evaluator` evaluates many candidates against one prepared problem.

Its subpackages follow the processes that run them; imports point down this list, never up:

- `parent/`: the parent process (the Evaluator, its workers and their pool, the memory plan, the guard's
  hooks, environment faults, the options);
- `worker/`: inside every worker process: its entry (which runs the job it is sent), the candidate's job
  and its replay, and the fork server that CPU workers are forked from;
- `reference/`: the reference side, the judge process and the baseline process (expected outputs,
  comparisons, the float64 truth, baseline timings); they never import a candidate;
- `timing/`: GPU timing and the GPU lock, in every process that uses the GPU;
- `shared/`: what the processes share: the protocol's names, tensor transport, device facts.

The names below are imported on first use: the evaluation processes (the judge, the baseline process,
candidate workers: kfoundry.evaluate.worker.entry) import this package too, and they need none of the
evaluator's own modules (the parent's orchestration, its diagnosis and static guard).
"""

import sys
import types
from importlib import import_module
from typing import Any

_WHERE = {"EvalOptions": "parent.options", "Evaluator": "parent.evaluator", "evaluate": "parent.evaluator"}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'kfoundry.evaluate' has no attribute {name!r}")
    return getattr(import_module(f"kfoundry.evaluate.{_WHERE[name]}"), name)


class _CallableModule(types.ModuleType):
    def __call__(self, *args, **kwargs):
        from kfoundry.evaluate.parent.evaluator import evaluate

        return evaluate(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
