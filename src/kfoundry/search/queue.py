"""Where evaluations go: an interface, and a local queue that runs one evaluation at a time per device
so that timings do not disturb each other. (The distributed module supplies others.)"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, Self

from kfoundry.search.individual import Individual
from kfoundry.types import Diagnosis


@dataclass
class Outcome:
    """What the search needs from an evaluation (kfoundry.optimize.outcome makes one of an Evaluation)."""

    status: str
    fitness: float | None = None  # the verified speedup over eager; 1.0 for a correct untimed one; None: failing
    diagnosis: Diagnosis | None = None
    cost: float = 0.0  # spent on this evaluation, in the unit StopRules.max_cost counts
    roofline: float | None = None  # fraction of the roofline reached (GPU timings only)
    parent_info: Any = None  # what an expert is shown of this candidate as a parent; the search only carries it


class EvaluationQueue(Protocol):
    async def submit(self, individual: Individual) -> Any:
        """Evaluate one candidate; returns its Outcome."""
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
