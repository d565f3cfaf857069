"""Where evaluations go: an interface, and a local queue that runs one evaluation at a time per device
so that timings do not disturb each other. (The distributed module supplies others.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, Self

from kfoundry.search.individual import Individual
from kfoundry.types import Diagnosis, Evaluation


@dataclass
class Outcome:
    """What the search needs from an evaluation."""

    status: str
    fitness: float | None = None
    diagnosis: Diagnosis | None = None
    cost: float = 0.0  # spent on this evaluation, in the unit StopRules.max_cost counts
    roofline: float | None = None  # fraction of the roofline reached (GPU timings only)


def to_outcome(result: Any) -> Outcome:
    """Accept an Outcome or a kfoundry Evaluation: fitness is the verified speedup over eager, 1.0
    for a correct candidate that was not timed (CPU), None for a failing one."""
    if isinstance(result, Outcome):
        return result
    if isinstance(result, Evaluation):
        fitness, roof = None, None
        if result.ok:
            speedup = result.timing.speedup_eager
            fitness = speedup if speedup is not None else 1.0
            from kfoundry.diagnose.performance import roofline

            data = roofline(result)
            roof = data["fraction_of_roofline"] if data else None
        return Outcome(result.status, fitness, result.diagnosis, roofline=roof)
    raise TypeError(f"an evaluation must return an Outcome or an Evaluation, not {type(result).__name__}")


class EvaluationQueue(Protocol):
    async def submit(self, individual: Individual) -> Any:
        """Evaluate one candidate; returns an Outcome or an Evaluation."""
        ...


class LocalQueue:
    """Runs a blocking `evaluate_fn(individual)` in threads, at most `workers` at once (one per device)."""

    def __init__(self, evaluate_fn: Callable[[Individual], Any], workers: int = 1):
        self.evaluate_fn = evaluate_fn
        self.workers = workers
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kfoundry-eval")

    async def submit(self, individual: Individual) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self.evaluate_fn, individual)

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
