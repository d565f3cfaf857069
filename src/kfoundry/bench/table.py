"""The bench on the terminal: one row per problem, then the metrics and how they were obtained; when piped,
the same as plain aligned text."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kfoundry.bench.figures import (RECIPE, credit_text, floor_text, metric_rows, ms_text, of_floor_text,
                                     samples_ok, speedup_text)

if TYPE_CHECKING:
    from kfoundry.bench.results import ProblemResult
    from kfoundry.bench.report import BenchReport

GAP = "  "
MESSAGE_MIN_WIDTH = 20


@dataclass(frozen=True)
class Column:
    header: str
    cell: Callable[[ProblemResult], str]
    right: bool = False  # numbers


def compare_recipe_needed(report: BenchReport) -> bool:
    """Whether the bench ran with other settings than published KernelBench numbers use."""
    options = report.config.eval
    return report.config.bench.method != "reference" and (options.policy != "permissive" or options.atol != 1e-2)


def one_line(text: str) -> str:
    return " ".join(text.split())


def columns(report: BenchReport) -> list[Column]:
    """The table's columns but the message: samples only where a problem has several, the floor only where a
    problem has one (a GPU run), the PyTorch mark only where a problem passed calling PyTorch compute."""
    chosen = [Column("#", lambda r: "" if r.number is None else str(r.number), right=True),
              Column("problem", lambda r: r.name), Column("status", lambda r: r.status),
              Column("compiled", lambda r: "yes" if r.compiled else "no")]
    if any(len(r.samples) > 1 for r in report.results):
        chosen.append(Column("samples ok", samples_ok, right=True))
    chosen += [Column("vs eager", lambda r: speedup_text(r.speedup_eager, r.correct), right=True),
               Column("vs compile", lambda r: speedup_text(r.speedup_compile, r.correct), right=True),
               Column("ms", lambda r: ms_text(r.runtime_ms), right=True),
               Column("eager ms", lambda r: ms_text(r.eager_ms), right=True),
               Column("compile ms", lambda r: ms_text(r.compile_ms), right=True)]
    if any(r.floor for r in report.results):  # a GPU run: each problem's speed of light (kfoundry.bench.floor)
        chosen += [Column("floor ms", lambda r: floor_text(r.floor_record()), right=True),
                   Column("ours/eager/compile of floor", lambda r: of_floor_text(r.floor_record()), right=True)]
    if any(r.generation0_speedup is not None for r in report.results):  # optimize runs: gen 0 -> final (gain)
        chosen.append(Column("gen 0 -> best (gain)", credit_text, right=True))
    if any(r.other_sizes for r in report.results):
        chosen.append(Column("other sizes", other_sizes_text))
    if any(r.calls_pytorch for r in report.results):
        chosen.append(Column("calls PyTorch", lambda r: "yes" if r.calls_pytorch else ""))
    if any(r.out_of_resource for r in report.results):  # our experts' kernels over the GPU's limits (target: none)
        chosen.append(Column("out of resource", lambda r: "" if r.out_of_resource is None else str(r.out_of_resource),
                             right=True))
    return chosen


def other_sizes_text(result: ProblemResult) -> str:
    """Whether the reported candidate holds at the second size set: yes, no, or '-' (not checked)."""
    holds = result.holds_at_other_sizes
    return "-" if holds is None else "yes" if holds else "NO"


def rows(report: BenchReport, headers: list[Column]) -> list[list[str]]:
    """The cells of each problem, then of each problem not run yet. '#' is the problem's number, or its place
    in the table where its name has none."""
    found = []
    for place, result in enumerate(report.results, start=1):
        cells = [column.cell(result) for column in headers]
        cells[0] = cells[0] or str(place)
        found.append(cells)
    numbers = {p.name: p.number for p in report.suite.problems}
    for place, name in enumerate(report.pending, start=len(report.results) + 1):
        number = numbers.get(name)
        found.append([str(place if number is None else number), name, "not run"] + [""] * (len(headers) - 3))
    return found


def _widths(headers: list[Column], body: list[list[str]]) -> list[int]:
    return [max([len(c.header)] + [len(cells[i]) for cells in body]) for i, c in enumerate(headers)]


def fits(console: Console, headers: list[Column], body: list[list[str]]) -> bool:
    """Whether the rich table fits the console with every cell whole and some room for the message."""
    return sum(_widths(headers, body)) + 3 * len(headers) + 4 + MESSAGE_MIN_WIDTH <= console.width


def plain_lines(headers: list[Column], body: list[list[str]]) -> list[str]:
    """An aligned text table: every column as wide as its widest cell, nothing cut."""
    return aligned_lines([c.header for c in headers], body, {c.header for c in headers if c.right})


def aligned_lines(headers: list[str] | tuple[str, ...], body: list[list[str]], right: set[str] = frozenset()) -> list[str]:
    """Header, rule and rows of a text table, each column as wide as its widest cell; the columns named in `right`
    (numbers) aligned right, the others left. The benchmark scripts print theirs with it too."""
    widths = [max([len(h)] + [len(cells[i]) for cells in body]) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return GAP.join(cell.rjust(w) if h in right else cell.ljust(w)
                        for cell, w, h in zip(cells, widths, headers, strict=True)).rstrip()

    return [line(list(headers)), line(["-" * w for w in widths]), *(line(cells) for cells in body)]


def _rich_table(title: str, headers: list[Column], body: list[list[str]], messages: list[str]) -> Table:
    """The terminal's table: as wide as the terminal, the message taking what the other columns leave."""
    table = Table(title=title, title_justify="left", expand=True)
    for column in headers:
        table.add_column(column.header, justify="right" if column.right else "left", no_wrap=True,
                         min_width=len(column.header))
    table.add_column("message", ratio=1, no_wrap=True, overflow="ellipsis")
    status = [c.header for c in headers].index("status")
    for cells, message in zip(body, messages, strict=True):
        colour = {"ok": "green", "not run": "dim"}.get(cells[status], "red")
        shown = [f"[{colour}]{escape(cell)}[/]" if i == status else escape(cell) for i, cell in enumerate(cells)]
        table.add_row(*shown, escape(message))
    return table


def print_report(report: BenchReport, console: Console) -> None:
    """The per-problem table, the metrics and how they were obtained. On a terminal wide enough, rich tables
    as wide as it; otherwise (a pipe, a log, a narrow terminal) plain aligned text that cuts no header and
    no cell, each problem's message in full below the table."""
    method = report.config.bench.method
    title = f"kfoundry bench {report.suite.directory} --method {method}"
    headers = columns(report)
    body = rows(report, headers)
    messages = [one_line(r.message) for r in report.results] + [""] * len(report.pending)
    metric_lines = metric_rows(report.metrics())

    def say(text: str, style: str | None = None) -> None:
        console.print(text, style=style, highlight=False, markup=False, soft_wrap=True)

    if console.is_terminal and fits(console, headers, body):
        console.print(_rich_table(title, headers, body, messages))
        metrics = Table(title="metrics", show_header=False, title_justify="left")
        metrics.add_column("metric")
        metrics.add_column("value", justify="right", no_wrap=True)
        for label, value in metric_lines:
            metrics.add_row(escape(label), escape(value))
        console.print(metrics)
    else:
        say(title)
        for line in plain_lines(headers, body):
            say(line)
        if any(messages):
            say("")
            say("messages:")
            for result, message in zip(report.results, messages):
                if message:
                    say(f"  {result.name}: {message}")
        say("")
        say("metrics:")
        width = max(len(label) for label, _ in metric_lines)
        for label, value in metric_lines:
            say(f"  {label.ljust(width)}  {value}")
    labels = report.labels()
    say("how obtained: " + "; ".join(f"{k}: {v}" for k, v in labels.items()), style="dim")
    if compare_recipe_needed(report):
        say(RECIPE, style="dim")
    for path, reason in report.suite.skipped:
        say(f"skipped {path}: {reason}", style="yellow")
    if report.reused:
        say(f"{len(report.reused)} problem(s) kept from an earlier call (--resume)", style="dim")
    if not report.complete:
        say(f"incomplete: {len(report.pending)} problem(s) not run; run the same command with --resume to finish",
            style="yellow")
