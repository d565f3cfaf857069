"""What a person sees while a bench runs. On a terminal: a bar for the problems and one for the
evaluations (done, of how many, the time spent and an estimate of the time left), the step in
progress beneath them, and above them a line for each problem that ends or is noted. Otherwise (a
log, a pipe): a timestamped line for each of those and for every step, and a heartbeat with the
counts while a step runs long. Every message also goes into the run's log (kfoundry.logs).

It reads the bench runner's progress lines (kfoundry.bench.runner: steps start with two spaces, the
evaluator's among them) and is told when a problem is finished (`finished`)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Self

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.text import Text

from kfoundry import logs
from kfoundry.phase_log import PhaseLog
from kfoundry.types import STATUSES

if TYPE_CHECKING:
    from kfoundry.run_config import RunConfig

# the evaluator's line for a judged candidate, as the runner passes it on: "  PROBLEM: candidate ID: STATUS"
_VERDICT = re.compile(r"^  (?P<problem>.+?): candidate \S+: (?:" + "|".join(STATUSES) + r")$")


def evaluations_per_problem(config: RunConfig) -> int | None:
    """The most evaluations one problem takes: one by the evaluation methods; a search's --max-evals
    (32 when no other budget bounds it, as optimize does), None when only its time or cost does."""
    from kfoundry.optimize.settings import DEFAULT_MAX_EVALS

    if config.bench.method != "optimize":
        return 1
    search = config.search
    if search.max_evals:
        return search.max_evals
    if config.bench.time_per_problem is None and search.max_cost is None:
        return DEFAULT_MAX_EVALS
    return None


class _Bars(Progress):
    """rich's progress bars, with the step in progress on a line beneath them."""

    step = ""

    def get_renderables(self) -> Iterable[RenderableType]:
        yield self.make_tasks_table(self.tasks)
        if self.step:
            yield Text(f"now: {self.step}", style="dim", no_wrap=True, overflow="ellipsis")


class BenchProgress:
    def __init__(self, console: Console, problems: int, per_problem: int | None):
        self.console = console
        self.problems, self.per_problem = problems, per_problem
        self.done = 0
        self.evaluations = 0
        self.total = per_problem * problems if per_problem else None  # shrinks as problems take fewer
        self._counted: dict[str, int] = {}
        self._lock = threading.Lock()
        self._bars: _Bars | None = None
        self._log: PhaseLog | None = None
        if console.is_terminal:
            self._bars = _Bars(TextColumn("{task.description:<11}"), BarColumn(), MofNCompleteColumn(),
                               TextColumn("elapsed"), TimeElapsedColumn(), TextColumn("left"),
                               TimeRemainingColumn(), console=console)
            self._problem_bar = self._bars.add_task("problems", total=problems)
            self._evaluation_bar = self._bars.add_task("evaluations", total=self.total)
        else:
            self._log = PhaseLog(stream=console.file, heartbeat_s=logs.heartbeat_s(), describe=self.summary)

    def __enter__(self) -> Self:
        if self._bars is not None:
            self._bars.start()
        else:
            self._log.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bars is not None:
            self._bars.step = ""
            self._bars.stop()
        else:
            self._log.stop()

    def __call__(self, message: str) -> None:
        """One line of the runner: a step (two spaces first) or a line of its own."""
        logs.progress(message.strip())
        verdict = _VERDICT.match(message)
        if verdict:
            with self._lock:
                self.evaluations += 1
                name = verdict["problem"]
                self._counted[name] = self._counted.get(name, 0) + 1
            if self._bars is not None:
                self._bars.advance(self._evaluation_bar)
        step = message.startswith("  ")
        if self._log is not None:
            (self._log.phase if step else self._log.note)(message.strip())
        elif step:
            self._bars.step = message.strip()
        else:
            self._bars.console.print(escape(message), highlight=False)

    def finished(self, name: str) -> None:
        """`name` is done (judged, kept from an earlier call, or stopped): a problem more, and the
        evaluations it did not take come off the total."""
        with self._lock:
            self.done += 1
            if self.total is not None:
                self.total -= max(self.per_problem - self._counted.get(name, 0), 0)
            total = self.total
        if self._bars is not None:
            self._bars.advance(self._problem_bar)
            self._bars.update(self._evaluation_bar, total=total)

    def summary(self) -> str:
        """The counts and the step in progress, in one line (the heartbeat of a log)."""
        with self._lock:
            evaluations = f"{self.evaluations}" + (f" of {self.total}" if self.total is not None else "")
            counts = f"problems {self.done} of {self.problems} done; evaluations {evaluations}"
        now = self._log.current if self._log is not None else ""
        return f"{counts}; now: {now}" if now else counts
