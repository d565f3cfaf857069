"""The generalisation check: a candidate verified at one size set judged again at a second one
(kfoundry.size_sets derives it, or the user gives it), on the same device, for correctness only.

Once per run (optimize and bench check the final best) and on request (`kfoundry eval --check-sizes`):
it costs one reference and one candidate evaluation at the second sizes, never a search's budget."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kfoundry.errors import ProblemError
from kfoundry.evaluate.parent.options import EvalOptions
from kfoundry.size_sets import SizeSet, derive_other_sizes, given_sizes, size_constants
from kfoundry.types import SizeCheck

CHECK_TRIALS = 2


def check_sizes(problem: str | Path, candidate: str | Path, options: EvalOptions,
                second: dict[str, Any] | None = None, progress=None) -> SizeCheck:
    """The candidate judged at the second size set (`second`: given by hand, else derived from the problem).
    An environment fault propagates (kfoundry.errors.EnvironmentFault), as in any evaluation."""
    from kfoundry.evaluate.parent.evaluator import evaluate

    verified = size_constants(problem, options.set_values)
    sizes: SizeSet | str = (given_sizes(problem, options.set_values, second) if second
                            else derive_other_sizes(problem, options.set_values, options.eval_mode))
    if isinstance(sizes, str):
        return SizeCheck(verified_at=verified, message=sizes)
    other = {name: new for name, (_, new) in sizes.changes.items()}
    if not other:
        return SizeCheck(verified_at=verified, message="the second set given is the verified one")
    if progress is not None:
        progress(f"checking the candidate at other sizes: {sizes.text()}")
    settings = dataclasses.replace(options, set_values=sizes.values, baselines=(), timing_trials=1,
                                   trials=min(options.trials, CHECK_TRIALS), ncu=False, sanitize=False)
    try:
        evaluation = evaluate(problem, candidate, settings)
    except ProblemError as exc:  # the reference itself fails there: says nothing of the candidate
        return SizeCheck(verified_at=verified, other=other,
                         message=f"the reference does not run at {sizes.text()}: {exc}")
    first_line = (evaluation.message or "").strip().splitlines()[0] if evaluation.message else ""
    return SizeCheck(verified_at=verified, other=other, holds=evaluation.ok, status=evaluation.status,
                     message=first_line[:400])
