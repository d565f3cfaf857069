"""The bench on the terminal: one row per problem, then the metrics and how they were obtained."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kfoundry.bench.figures import metric_rows, ms_text, speedup_text

if TYPE_CHECKING:
    from kfoundry.bench.runner import BenchReport

MESSAGE_WIDTH = 70


def _clip(text: str, width: int = MESSAGE_WIDTH) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def print_report(report: BenchReport, console: Console) -> None:
    method = report.config.bench.method
    table = Table(title=f"kfoundry bench {report.suite.directory} --method {method}", title_justify="left")
    for column, justify in (("#", "right"), ("problem", "left"), ("status", "left"), ("vs eager", "right"),
                            ("vs compile", "right"), ("ms", "right"), ("eager ms", "right"),
                            ("compile ms", "right"), ("message", "left")):
        table.add_column(column, justify=justify, no_wrap=column != "message",
                         overflow="ellipsis" if column == "message" else "fold")
    for r in report.results:
        colour = "green" if r.correct else "red"
        table.add_row("" if r.number is None else str(r.number), escape(r.name), f"[{colour}]{r.status}[/]",
                      speedup_text(r.speedup_eager, r.correct), speedup_text(r.speedup_compile, r.correct),
                      ms_text(r.runtime_ms), ms_text(r.eager_ms), ms_text(r.compile_ms), escape(_clip(r.message)))
    for name in report.pending:
        table.add_row("", escape(name), "[dim]not run[/]", "", "", "", "", "", "")
    console.print(table)
    metrics = Table(title="metrics", show_header=False, title_justify="left")
    metrics.add_column("metric")
    metrics.add_column("value", justify="right")
    for label, value in metric_rows(report.metrics()):
        metrics.add_row(escape(label), escape(value))
    console.print(metrics)
    labels = report.labels()
    console.print("how obtained: " + "; ".join(f"{k}: {v}" for k, v in labels.items()), style="dim",
                  highlight=False, markup=False)
    for path, reason in report.suite.skipped:
        console.print(f"skipped {path}: {reason}", style="yellow", highlight=False, markup=False)
    if report.reused:
        console.print(f"{len(report.reused)} problem(s) kept from an earlier call (--resume)", style="dim")
    if not report.complete:
        console.print(f"incomplete: {len(report.pending)} problem(s) not run; run the same command with --resume "
                      "to finish", style="yellow")
