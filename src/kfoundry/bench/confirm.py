"""The search's gain timed again: a finished run's generation-0 best and its final best, evaluated one after the
other by one evaluator with nothing else in flight, so that both times come from the same machine, the same
set-up and the same moment.

Why: on one H100, gemm_suite 5's generation-0 lead timed 0.853 ms in one run and 0.971 ms in the next (the same
source, byte for byte), while the two runs' final bests agreed within 2%. A gain read as the final best's speed
over generation 0's, each timed when it was found, carries that difference.

`confirm_run(run_dir, problem, options)` gives a `Confirmation`: the two candidates, each one's verdict and median
time, and the gain (generation 0's median over the final best's) where both were correct and timed. A run whose
final best is generation 0's needs none (None).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CONFIRM_DIR = "confirm"  # a bench directory's confirmations: OUT/confirm/<problem>.json


@dataclass(frozen=True)
class Timed:
    """One candidate timed again: its id in the run, its verdict and its median time (None where not timed)."""

    candidate: int
    status: str
    ms: float | None
    message: str = ""


@dataclass(frozen=True)
class Confirmation:
    generation0: Timed
    final: Timed
    device: str | None = None

    @property
    def gain(self) -> float | None:
        """Generation 0's best time over the final best's, both correct and timed; else None."""
        a, b = self.generation0, self.final
        if a.status != "ok" or b.status != "ok" or not a.ms or not b.ms:
            return None
        return a.ms / b.ms

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "gain": self.gain}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Confirmation:
        return cls(Timed(**data["generation0"]), Timed(**data["final"]), data.get("device"))


def candidates_to_confirm(run_dir: Path) -> tuple[int, int] | None:
    """(generation 0's best, the final best) by candidate id from the run's result.json; None where the run has no
    such pair (no correct candidate, or the final best is generation 0's)."""
    try:
        result = json.loads((Path(run_dir) / "result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    first = (result.get("generation0") or {}).get("candidate_id")
    best = (result.get("best") or {}).get("candidate_id")
    if not isinstance(first, int) or not isinstance(best, int) or first == best:
        return None
    return first, best


def confirmation_of_run(run_dir: Path) -> Confirmation | None:
    """The Confirmation a run's own result.json holds (optimize's time_again, kfoundry.optimize.driver), or None."""
    try:
        again = json.loads((Path(run_dir) / "result.json").read_text(encoding="utf-8")).get("timed_again")
        return Confirmation.from_dict(again) if again else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def confirm_run(run_dir: Path, problem: Path, options: Any) -> Confirmation | None:
    """Generation 0's best, then the final best, through one evaluator (kfoundry.evaluate.Evaluator with `options`,
    the bench's EvalOptions) on `problem` (the problem file the run was made from: a user's problem may import
    modules beside it, which the run's copy would not find)."""
    pair = candidates_to_confirm(run_dir)
    if pair is None:
        return None
    from kfoundry.evaluate import Evaluator

    timed = []
    with Evaluator(problem, options) as evaluator:
        evaluator.prepare()
        for candidate in pair:  # one at a time: nothing else in flight while either is timed
            verdict = evaluator.evaluate(Path(run_dir) / "candidates" / f"{candidate}.py")
            timed.append(Timed(candidate, verdict.status, verdict.timing.runtime_ms,
                               "" if verdict.status == "ok" and verdict.timing.runtime_ms else
                               (verdict.message or verdict.timing.reason or "")[:300]))
            device = verdict.timing.device
    return Confirmation(timed[0], timed[1], device)


def read_confirmations(out: Path) -> dict[str, Confirmation]:
    """A bench directory's confirmations, by problem name."""
    found = {}
    for path in sorted((Path(out) / CONFIRM_DIR).glob("*.json")):
        try:
            found[path.stem] = Confirmation.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a file cut short by a kill: the next call confirms that problem again
    return found


def write_confirmation(out: Path, name: str, confirmation: Confirmation) -> Path:
    path = Path(out) / CONFIRM_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(confirmation.to_dict(), indent=1) + "\n", encoding="utf-8")
    temporary.replace(path)  # whole or absent: a kill never leaves half a file
    return path
