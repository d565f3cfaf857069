"""`kfoundry report RUN_DIR`: write a run's HTML report. Mounted on the main app by `register(app)`."""

from __future__ import annotations

from pathlib import Path

import typer

from kfoundry.errors import KFoundryError

EXIT_BAD_INPUT = 2


RUN_DIR_ARG = typer.Argument(..., help="A run directory (holding run.sqlite), e.g. one kfoundry optimize wrote.")
OUT_OPT = typer.Option(None, "-o", "--out", help="Where to write the page (default RUN_DIR/report.html).")


def report_command(run_dir: Path = RUN_DIR_ARG, out: Path | None = OUT_OPT) -> None:
    """Write RUN_DIR/report.html: the best kernel (highlighted, with its diff from the first correct
    candidate), speedup and correctness over the run, experts and LLM spend, the best's lineage and
    its place on the roofline. One self-contained file: it opens offline.

    Exit code: 0 when written, 2 when RUN_DIR holds no readable run store.
    """
    from kfoundry.runs.report import write_report

    try:
        path = write_report(run_dir, out)
    except (KFoundryError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(EXIT_BAD_INPUT)
    typer.echo(f"report written to {path}")


def register(app: typer.Typer) -> None:
    """Add the `report` command to `app`."""
    app.command("report")(report_command)
