"""What a person sees while a search runs: a live panel (generation, evaluations, best speedup,
correctness rate, LLM cost, budget left) and a line per notable event. Without a terminal (a log
file, a pipe) plain timestamped lines instead, with a heartbeat. Quiet for scripts."""

from __future__ import annotations

import time
from typing import Any, Self

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from kfoundry.phase_log import PhaseLog

NOTABLE = {"best", "migrated", "stop", "borrowed", "propose_error", "evaluate_error"}


class ProgressView:
    def __init__(self, *, quiet: bool, timed: bool, max_evals: int | None, max_time_s: float | None,
                 max_cost: float | None, console: Console | None = None, heartbeat_s: float = 30.0):
        self.quiet = quiet
        self.timed = timed  # GPU: speedups; CPU: correctness only
        self.max_evals, self.max_time_s, self.max_cost = max_evals, max_time_s, max_cost
        self.console = console or Console(stderr=True)
        self.generation = 0
        self.evals = 0
        self.correct = 0
        self.best: float | None = None
        self.cost = 0.0
        self.elapsed_base = 0.0
        self.last = ""
        self._started = time.monotonic()
        self._live: Live | None = None
        # not a terminal: a rich Live would print nothing until the end
        self._log: PhaseLog | None = None
        if not quiet and not self.console.is_terminal:
            self._log = PhaseLog(stream=self.console.file, heartbeat_s=heartbeat_s, describe=self.summary)

    def __enter__(self) -> Self:
        if self._log is not None:
            self._log.start()
        elif not self.quiet:
            # get_renderable: every refresh recomputes the panel, so "elapsed" moves between events
            self._live = Live(get_renderable=self._panel, console=self.console, refresh_per_second=4,
                              transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._log is not None:
            self._log.stop()
            self._log.note(f"summary: {self.summary()}")
        if self._live is not None:
            self._live.refresh()
            self._live.__exit__(*exc)
            self._live = None
            self.console.print()

    def note(self, message: str) -> None:
        if self._log is not None:
            self._log.note(message)
        elif not self.quiet:
            self.console.print(escape(message), highlight=False)

    def status(self, message: str) -> None:
        self.last = message
        if self._log is not None:
            self._log.phase(message)
        self._refresh()

    def resume_from(self, evals: int, correct: int, best: float | None, elapsed_s: float, generation: int) -> None:
        self.evals, self.correct, self.best, self.elapsed_base, self.generation = evals, correct, best, elapsed_s, generation

    def event(self, event: dict[str, Any], cost: float) -> None:
        kind = event["event"]
        self.cost = cost
        self.generation = event.get("generation", self.generation)
        if kind == "evaluated":
            self.evals += 1
            self.correct += event.get("status") == "ok"
            self.last = f"candidate {event['id']} ({event.get('expert')}): {event.get('status')}"
            if self.timed and event.get("status") == "ok" and event.get("fitness") is not None:
                self.last += f", {event['fitness']:.3g}x"
            if self._log is not None:
                self._log.note(self.last)
        elif kind == "proposed":
            self.last = f"evaluating candidate {event['id']} from {event.get('expert')}"
        if kind == "best" and event.get("fitness") is not None:
            self.best = event["fitness"]
            what = f"{self.best:.3g}x over eager" if self.timed else "correct"
            self.note(f"generation {self.generation}: new best, candidate {event['id']} ({what})")
        elif kind == "migrated" and event.get("moves"):
            self.note(f"generation {self.generation}: {len(event['moves'])} migrant(s) between islands")
        elif kind in ("propose_error", "evaluate_error"):
            self.note(f"{kind.replace('_', ' ')}: {event.get('error')}")
        self._refresh()

    def summary(self) -> str:
        """The panel's figures in one line (the heartbeat of a log)."""
        figures = {name: value for name, value in self._figures().items() if value not in ("", "-")}
        now = figures.pop("now", None)
        return "; ".join([f"{name} {value}" for name, value in figures.items()] + ([f"now: {now}"] if now else []))

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.refresh()

    def _figures(self) -> dict[str, str]:
        elapsed = self.elapsed_base + time.monotonic() - self._started
        if self.best is None:
            best = "-"
        else:
            best = f"{self.best:.3g}x vs eager" if self.timed else "a correct candidate (CPU: not timed)"
        left = []
        if self.max_evals:
            left.append(f"{max(self.max_evals - self.evals, 0)} evals")
        if self.max_time_s:
            left.append(f"{max(self.max_time_s - elapsed, 0):.0f} s")
        if self.max_cost:
            left.append(f"${max(self.max_cost - self.cost, 0):.2f}")
        return {
            "generation": str(self.generation),
            "evaluations": f"{self.evals}" + (f" / {self.max_evals}" if self.max_evals else ""),
            "correct": f"{self.correct / self.evals:.0%}" if self.evals else "-",
            "best": best,
            "LLM cost": f"${self.cost:.4f}",
            "budget left": ", ".join(left) or "-",
            "elapsed": f"{elapsed:.0f} s",
            "now": self.last[:100],
        }

    def _panel(self) -> Table:
        f = self._figures()
        table = Table.grid(padding=(0, 2))
        table.add_row("generation", f["generation"], "evaluations", f["evaluations"], "correct", f["correct"])
        table.add_row("best", f["best"], "LLM cost", f["LLM cost"], "budget left", f["budget left"])
        table.add_row("now", escape(f["now"]), "elapsed", f["elapsed"], "", "")
        return table
