"""When a search ends: evaluations, cost, time, a target speedup reached, or no progress."""

from __future__ import annotations

import threading
from dataclasses import dataclass

# Set by a caller that runs searches in other threads (kfoundry bench on several devices) when the user
# interrupts it: each search stops at its next generation, once its evaluations in flight are judged.
_STOP_REQUESTED = threading.Event()
INTERRUPTED = "interrupted: a stop was requested"
OUT_OF_PROPOSALS = "the experts proposed nothing new"  # how a stop for lack of proposals begins


def request_stop() -> None:
    _STOP_REQUESTED.set()


def clear_stop_request() -> None:
    _STOP_REQUESTED.clear()


def stop_requested() -> bool:
    return _STOP_REQUESTED.is_set()


@dataclass
class SearchState:
    evals: int = 0
    cost: float = 0.0
    elapsed_s: float = 0.0
    best_fitness: float | None = None
    generation: int = 0
    stalled_generations: int = 0  # generations since the overall best improved
    empty_generations: int = 0  # generations in a row that evaluated nothing new (duplicates, no proposals)
    best_roofline: float | None = None  # the highest fraction of the roofline a verified candidate reached


@dataclass
class StopRules:
    max_evals: int | None = None
    max_cost: float | None = None
    max_time_s: float | None = None
    target_speedup: float | None = None
    stagnation_generations: int | None = None
    max_generations: int | None = None
    target_roofline: float | None = None  # a fraction of the roofline, e.g. 0.8
    max_empty_generations: int | None = 6

    def budgeted(self) -> bool:
        """Whether any rule bounds the work (evaluations, cost, time or generations)."""
        return any(v is not None for v in (self.max_evals, self.max_cost, self.max_time_s, self.max_generations))

    def should_stop(self, state: SearchState) -> str | None:
        """The reason to stop now, or None to go on."""
        if stop_requested():
            return INTERRUPTED
        if self.target_speedup is not None and state.best_fitness is not None \
                and state.best_fitness >= self.target_speedup:
            return f"target speedup {self.target_speedup:g}x reached ({state.best_fitness:.3g}x)"
        if self.target_roofline is not None and state.best_roofline is not None \
                and state.best_roofline >= self.target_roofline:
            return f"{self.target_roofline:.0%} of the roofline reached ({state.best_roofline:.0%})"
        if self.max_evals is not None and state.evals >= self.max_evals:
            return f"evaluation budget spent ({state.evals} of {self.max_evals})"
        if self.max_cost is not None and state.cost >= self.max_cost:
            return f"cost budget spent ({state.cost:.4g} of {self.max_cost:g})"
        if self.max_time_s is not None and state.elapsed_s >= self.max_time_s:
            return f"time budget spent ({state.elapsed_s:.1f} s of {self.max_time_s:g} s)"
        if self.stagnation_generations is not None and state.stalled_generations >= self.stagnation_generations:
            return f"no improvement for {state.stalled_generations} generation(s)"
        if self.max_empty_generations is not None and state.empty_generations >= self.max_empty_generations:
            return f"{OUT_OF_PROPOSALS} for {state.empty_generations} generation(s)"
        if self.max_generations is not None and state.generation >= self.max_generations:
            return f"generation limit reached ({state.generation})"
        return None

    def evals_left(self, state: SearchState) -> int | None:
        return None if self.max_evals is None else max(self.max_evals - state.evals, 0)
