"""`kfoundry doctor`: mounted on the main app by `register(app)`; imports nothing heavy until it runs."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from kfoundry.errors import KFoundryError

EXIT_OK, EXIT_PROBLEM, EXIT_BAD_INPUT = 0, 1, 2


def doctor_command(
    device: Optional[str] = typer.Option(None, help="Where the worker and the tiny evaluation run: cpu, cuda or "
                                         "cuda:N (default: the first GPU where there is one, else the CPU)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout: ok, and every check."),
) -> None:
    """Check this machine before a run: torch, Triton and CUDA versions, the GPUs with their free memory and
    who holds it, JAX's preallocation, the import path a worker reads, the candidates' sandbox, one real
    sandboxed worker and one tiny evaluation.

    Each line is ok, or a problem with its fix. Exit code: 0 when every check is ok, 1 when one is a problem,
    2 for bad usage.
    """
    from kfoundry.doctor import run_doctor

    err = Console(stderr=True)
    progress = (lambda message: None) if as_json else (lambda message: err.print(f"checking: {escape(message)}",
                                                                                 highlight=False))
    try:
        checks = run_doctor(device, progress)
    except KFoundryError as exc:
        if as_json:
            print(json.dumps({"status": "error", "message": str(exc)}))
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(EXIT_BAD_INPUT)
    ok = all(check.ok for check in checks)
    if as_json:
        print(json.dumps({"ok": ok, "checks": [check.to_dict() for check in checks]}))
    else:
        console = Console(soft_wrap=True)
        for check in checks:
            console.print(escape(check.text()), style=None if check.ok else "red", highlight=False)
        problems = sum(not check.ok for check in checks)
        console.print("all ok" if ok else f"{problems} problem(s)", highlight=False)
    raise typer.Exit(EXIT_OK if ok else EXIT_PROBLEM)


def register(app: typer.Typer) -> None:
    """Add the `doctor` command to `app`."""
    app.command("doctor")(doctor_command)
