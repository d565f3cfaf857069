"""`kfoundry library ...`: look into the experience library. Mounted by the main CLI as
`app.add_typer(library_app, name="library")`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from kfoundry.cli_help import LibraryItemType
from kfoundry.library.errors import LibraryError
from kfoundry.sqlite_files import DamagedFile

if TYPE_CHECKING:
    from kfoundry.library.store import Library

EXIT_BAD_INPUT = 2

library_app = typer.Typer(help="The experience library: kernels, insights and steps kept across runs.",
                          no_args_is_help=True)

LIBRARY_OPTION = typer.Option(None, "--library", help="Library file (default: the cache dir's library.sqlite).")
JSON_OPTION = typer.Option(False, "--json", help="Print exactly one JSON object on stdout.")


@contextmanager
def _open(path: Optional[Path]) -> Iterator[Library]:
    """The library for one command; a file damaged anywhere (found at open or at any query: DamagedFile)
    is one line and exit code 2, never a traceback."""
    from kfoundry.library.store import Library  # numpy: not for `kfoundry --help`

    try:
        library = Library(path)
    except (LibraryError, DamagedFile) as exc:
        _fail(exc)
    try:
        with library:
            yield library
    except DamagedFile as exc:
        _fail(exc)


def _fail(exc: Exception):
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(EXIT_BAD_INPUT)


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=1, sort_keys=True, default=str))


def _speedups(step: dict) -> str:
    from kfoundry.library.distil import measured

    before, after = step.get("speedup_before"), step.get("speedup_after")
    if not measured(step):
        return "not measured"
    if after is None:
        return "none (failed)"
    return f"{'-' if before is None else f'{before:.3g}x'} -> {after:.3g}x"


def _line(item: dict) -> str:
    score = f"  score {item['score']:.3f}" if "score" in item else ""
    kind = item.get("kind") or ""
    return f"#{item['id']:<5} {item['type']:<8} {kind:<16} {item['title']}{score}"


@library_app.command("list")
def list_items(kind: Optional[str] = typer.Option(None, help="Only items of this problem kind (e.g. gemm+pointwise)."),
               type_: Optional[LibraryItemType] = typer.Option(None, "--type", help="Only kernel, insight or step."),
               library: Optional[Path] = LIBRARY_OPTION, as_json: bool = JSON_OPTION) -> None:
    """List the items, newest first."""
    with _open(library) as lib:
        items = lib.list(kind=kind, type=type_)
    if as_json:
        _print_json({"items": items})
        return
    for item in items:
        typer.echo(_line(item))
    if not items:
        typer.echo("no items")


@library_app.command("show")
def show(item_id: int = typer.Argument(..., metavar="ID", help="The item's id (see `list`)."),
         library: Optional[Path] = LIBRARY_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Show one item in full: its text, signature and code."""
    with _open(library) as lib:
        try:
            item = lib.get(item_id)
        except LibraryError as exc:
            _fail(exc)
    if as_json:
        _print_json(item)
        return
    sig = item["signature"]
    typer.echo(f"#{item['id']} {item['type']} ({item['origin']}): {item['title']}")
    typer.echo(f"kind: {item.get('kind') or '-'}   ops: {' '.join(sig.get('ops', [])) or '-'}")
    if item["type"] == "step":
        typer.echo(f"expert: {item['expert']}   outcome: {item['outcome']}   diagnosis: "
                   f"{', '.join(item['diagnosis']) or '-'}   speedup: {_speedups(item)}")
    if item.get("evidence"):
        typer.echo(f"evidence: {', '.join(f'#{i}' for i in item['evidence'])}")
    if item.get("text"):
        typer.echo("\n" + item["text"])
    if item.get("code"):
        typer.echo("\n" + item["code"])


@library_app.command("search")
def search(text: str = typer.Argument(..., help="Free text, e.g. 'softmax online rows'."),
           k: int = typer.Option(10, "-k", help="How many results."),
           library: Optional[Path] = LIBRARY_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Search the items' text (BM25)."""
    with _open(library) as lib:
        results = lib.search(text, k=k)
    if as_json:
        _print_json({"query": text, "results": results})
        return
    for item in results:
        typer.echo(f"#{item['id']:<5} {item['type']:<8} {item['title']}  score {item['score']:.3f}")
    if not results:
        typer.echo("no matches")


@library_app.command("stats")
def stats(library: Optional[Path] = LIBRARY_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Counts by type, kind, origin and step outcome."""
    with _open(library) as lib:
        facts = lib.stats()
    if as_json:
        _print_json(facts)
        return
    typer.echo(f"library {facts['path']} (schema {facts['schema_version']}, seed {facts['seed_version']}): "
               f"{facts['items']} items")
    for key in ("by_type", "by_kind", "by_origin", "step_outcomes"):
        values = ", ".join(f"{k} {v}" for k, v in facts[key].items()) or "-"
        typer.echo(f"  {key.replace('_', ' ')}: {values}")


@library_app.command("export")
def export(path: Path = typer.Argument(..., help="JSONL file to write."),
           library: Optional[Path] = LIBRARY_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Write every item to a JSONL file."""
    with _open(library) as lib:
        try:
            count = lib.export(path)
        except OSError as exc:
            _fail(LibraryError(f"cannot write {path}: {exc}"))
    if as_json:
        _print_json({"path": str(path), "exported": count})
    else:
        typer.echo(f"exported {count} items to {path}")


@library_app.command("import")
def import_(path: Path = typer.Argument(..., help="JSONL file written by `export`."),
            library: Optional[Path] = LIBRARY_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Add the items of an export that are not already in the library."""
    with _open(library) as lib:
        try:
            count = lib.import_(path)
        except LibraryError as exc:
            _fail(exc)
    if as_json:
        _print_json({"path": str(path), "imported": count})
    else:
        typer.echo(f"imported {count} new items from {path}")


@library_app.command("prune")
def prune(unmeasured: bool = typer.Option(False, "--unmeasured",
                                          help="Remove the steps whose child passed but was not timed (a CPU run) "
                                               "and the insights built only from them."),
          dry_run: bool = typer.Option(False, "--dry-run", help="Only print what would be removed."),
          library: Optional[Path] = LIBRARY_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Remove unmeasured experience from the library, printing what was removed."""
    if not unmeasured:
        _fail(LibraryError("say what to prune: --unmeasured"))
    with _open(library) as lib:
        removed = lib.prune_unmeasured(dry_run=dry_run)
    if as_json:
        _print_json({"dry_run": dry_run, **removed})
        return
    verb = "would remove" if dry_run else "removed"
    for item in removed["steps"] + removed["insights"]:
        typer.echo(f"{verb} #{item['id']:<5} {item['title']}")
    typer.echo(f"{verb} {len(removed['steps'])} unmeasured steps and {len(removed['insights'])} insights "
               "that rested on them")
