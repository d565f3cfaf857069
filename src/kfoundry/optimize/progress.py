"""What a person sees while a search runs: a live panel (generation, evaluations, best speedup,
correctness rate, LLM cost, budget left, a clock that ticks between events and an estimate of the time
left) and a line per notable event. Without a terminal (a log
file, a pipe) plain timestamped lines instead, with a heartbeat. Quiet for scripts."""

from __future__ import annotations

import time
from typing import Any, Self

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from kfoundry.llm.cost_text import cost_text
from kfoundry import logs
from kfoundry.phase_log import PhaseLog

NOTABLE = {"best", "migrated", "reseeded", "stop", "borrowed", "propose_error", "evaluate_error"}


class ProgressView:
    def __init__(self, *, quiet: bool, timed: bool, max_evals: int | None, max_time_s: float | None,
                 max_cost: float | None, console: Console | None = None, heartbeat_s: float | None = None):
        self.quiet = quiet
        self.timed = timed  # GPU: speedups; CPU: correctness only
        self.max_evals, self.max_time_s, self.max_cost = max_evals, max_time_s, max_cost
        self.console = console or Console(stderr=True)
        self.generation = 0
        self.evals = 0
        self.correct = 0
        self.best: float | None = None
        self.cost: float | None = None  # of the priced LLM calls
        self.unpriced_calls = 0
        self.elapsed_base = 0.0
        self.last = ""
        self._started = time.monotonic()
        self._search_started: float | None = None  # at its first event: the reference's preparation is apart
        self._evals_before = 0  # a resumed run's: they took no time of this session
        self._logged_status = ""
        self._live: Live | None = None
        # not a terminal: a rich Live would print nothing until the end
        self._log: PhaseLog | None = None
        if not quiet and not self.console.is_terminal:
            self._log = PhaseLog(stream=self.console.file, describe=self.summary,
                                 heartbeat_s=logs.heartbeat_s() if heartbeat_s is None else heartbeat_s)

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
        logs.progress(message)
        if self._log is not None:
            self._log.note(message)
        elif not self.quiet:
            self.console.print(escape(message), highlight=False)

    def status(self, message: str) -> None:
        # a quiet view's caller passes the phases on itself (the bench, `optimize --quiet`): it logs them
        if not self.quiet and message != self._logged_status:
            self._logged_status = message
            logs.progress(message)
        self.last = message
        if self._log is not None:
            self._log.phase(message)
        self._refresh()

    def resume_from(self, evals: int, correct: int, best: float | None, elapsed_s: float, generation: int) -> None:
        self.evals, self.correct, self.best, self.elapsed_base, self.generation = evals, correct, best, elapsed_s, generation

    def event(self, event: dict[str, Any], cost: float | None, unpriced_calls: int = 0) -> None:
        kind = event["event"]
        if self._search_started is None:
            self._search_started, self._evals_before = time.monotonic(), self.evals
        self.cost, self.unpriced_calls = cost, unpriced_calls
        self.generation = event.get("generation", self.generation)
        if kind == "evaluated":
            self.evals += 1
            self.correct += event.get("status") == "ok"
            self.last = f"candidate {event['id']} ({event.get('expert')}): {event.get('status')}"
            if self.timed and event.get("status") == "ok" and event.get("fitness") is not None:
                self.last += f", {event['fitness']:.3g}x"
            logs.progress(self.last)
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
        elif kind == "reseeded" and event.get("islands"):
            islands = ", ".join(str(index) for index, _, _ in event["islands"])
            self.note(f"generation {self.generation}: island(s) {islands} far behind the best, reseeded from it")
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
            left.append(f"${max(self.max_cost - (self.cost or 0.0), 0):.2f}")
        return {
            "generation": str(self.generation),
            "evaluations": f"{self.evals}" + (f" / {self.max_evals}" if self.max_evals else ""),
            "correct": f"{self.correct / self.evals:.0%}" if self.evals else "-",
            "best": best,
            "LLM cost": cost_text(self.cost, self.unpriced_calls),
            "budget left": ", ".join(left) or "-",
            "elapsed": f"{elapsed:.0f} s",
            "time left": self._time_left(elapsed),
            "now": self.last[:100],
        }

    def _time_left(self, elapsed: float) -> str:
        """An estimate: the evaluations left at this session's pace so far, within --max-time's seconds."""
        estimates = []
        done = self.evals - self._evals_before
        if self.max_evals and self._search_started is not None and done > 0:
            pace = (time.monotonic() - self._search_started) / done
            estimates.append(pace * max(self.max_evals - self.evals, 0))
        if self.max_time_s:
            estimates.append(max(self.max_time_s - elapsed, 0.0))
        return f"~{_duration(min(estimates))}" if estimates else "-"

    def _panel(self) -> Table:
        f = self._figures()
        table = Table.grid(padding=(0, 2))
        table.add_row("generation", f["generation"], "evaluations", f["evaluations"], "correct", f["correct"])
        table.add_row("best", f["best"], "LLM cost", f["LLM cost"], "budget left", f["budget left"])
        table.add_row("now", escape(f["now"]), "elapsed", f["elapsed"], "time left", f["time left"])
        return table


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
