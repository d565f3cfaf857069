"""Several programmatic_suite result files joined: per problem, per suite and over all of them, our speedups over
eager and torch.compile and the search's goal (issue 41).

A figure quoted over several calls (each suite is its own bench, and a call on one machine rarely finishes every
problem) joins their results; this script does that join from the JSON files the calls wrote, so the quoted
figures are reproducible from files in benchmarks/results/:

    python benchmarks/join_results.py FILE[@PROBLEMS] [FILE[@PROBLEMS] ...] [--json PATH]

FILE is a programmatic_suite JSON (its `--json`); @PROBLEMS picks problems by leading number (1-8,12), all of the
file's otherwise. A problem of one suite named by two arguments is an error, never a silent double count. The
speedups are geometric means over the correct problems with a time (programmatic_suite's `speedup_eager` and
`speedup_compile`). The goal's rule is programmatic_suite's `search_goal`: the correct problems whose generation
0 reached under 70% of the floor count; their median gain against 1.10x, and at least a quarter of them at 1.25x
or more; those already near the floor count as met. A problem's gain is the one timed again where its bench ran
with --confirm-gain (`goal_gain`).

Exit code 0 when the goal was computed (met or not), 2 for bad usage (a missing or unreadable file, a bad
selection, a problem named twice, nothing selected).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kfoundry.bench.suite import parse_selection  # noqa: E402
from kfoundry.errors import UsageError  # noqa: E402


@functools.cache
def _programmatic_suite():
    spec = importlib.util.spec_from_file_location("programmatic_suite", ROOT / "benchmarks" / "programmatic_suite.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Source:
    """One argument: a result file and the problems picked from it (None: all)."""

    path: Path
    numbers: frozenset[int] | None

    @classmethod
    def parse(cls, text: str) -> Source:
        path, _, selection = text.partition("@")
        return cls(Path(path), frozenset(parse_selection(selection)) if selection else None)


def load_rows(sources: list[Source]) -> list[dict[str, Any]]:
    """The picked problems of every file, each with `suite` (the file's suite directory's name) and `file` added."""
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[str, int], Path] = {}
    for source in sources:
        try:
            data = json.loads(source.path.read_text())
            suite = Path(data["settings"]["suite"]).name
            problems = data["problems"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"{source.path}: not a programmatic_suite result file ({exc})") from exc
        picked = [p for p in problems if source.numbers is None or p["number"] in source.numbers]
        missing = sorted((source.numbers or set()) - {p["number"] for p in problems})
        if missing:
            raise UsageError(f"{source.path}: no problem numbered {', '.join(map(str, missing))}")
        for problem in picked:
            key = (suite, problem["number"])
            if key in seen:
                raise UsageError(f"{suite} problem {problem['number']} is in both {seen[key]} and {source.path}")
            seen[key] = source.path
            rows.append({**problem, "suite": suite, "file": source.path.name})
    if not rows:
        raise UsageError("no problem selected")
    return rows


def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Some rows' speedups (geomeans over the correct, timed ones) and the search's goal, as programmatic_suite's
    summary gives them."""
    summary = _programmatic_suite().summarize(rows)
    solved = summary["solved"]
    return {"problems": summary["problems"], "correct": summary["correct"], "vs_eager": solved["ours_vs_eager"],
            "vs_eager_over": solved["timed"], "vs_compile": solved["ours_vs_compile"],
            "vs_compile_over": solved["ours_vs_compile_over"], "goal": summary["search"]["goal"]}


def join(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`figures` per suite (in the order the suites first appear) and over all rows."""
    suites = list(dict.fromkeys(r["suite"] for r in rows))
    return {"suites": {s: figures([r for r in rows if r["suite"] == s]) for s in suites}, "all": figures(rows),
            "failed": [f"{r['suite']}/{r['name']}" for r in rows if not r.get("correct")]}


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}x"


def render(rows: list[dict[str, Any]], result: dict[str, Any], below: float) -> str:
    lines = [f"{'suite':<14} {'problem':<52} {'vs eager':>8} {'vs compile':>10} {'gen 0 of floor':>14} {'gain':>7}"
             f"  counted in the goal", "-" * 130]
    for r in rows:
        of_floor, gain = r.get("gen0_of_floor"), _programmatic_suite().goal_gain(r)
        if not r.get("correct"):
            counted = "no (not correct)"
        elif of_floor is None or gain is None:
            counted = "no (no floor or gain)"
        else:
            counted = "yes" if of_floor < below else "near the floor (met)"
        again = " (timed again)" if r.get("confirmed_gain") is not None else ""
        lines.append(f"{r['suite']:<14} {r['name']:<52} {_x(r.get('speedup_eager')):>8} "
                     f"{_x(r.get('speedup_compile')):>10} {'n/a' if of_floor is None else f'{of_floor:.1%}':>14} "
                     f"{_x(gain):>7}  {counted}{again}")
    lines.append("")
    for name, fig in [*result["suites"].items(), ("all", result["all"])]:
        goal = fig["goal"]
        met = {True: "yes", False: "no", None: "n/a"}[goal["met"]]
        lines.append(f"{name}: {fig['correct']} of {fig['problems']} correct; ours vs eager {_x(fig['vs_eager'])} "
                     f"(over {fig['vs_eager_over']}), vs torch.compile {_x(fig['vs_compile'])} (over "
                     f"{fig['vs_compile_over']}); the search's goal: {goal['below_floor']} below {below:.0%} of the "
                     f"floor, median gain {_x(goal['median_gain'])}, >= 1.25x on {goal['large_gains']}; met: {met}")
    if result["failed"]:
        lines.append(f"not correct (left out): {', '.join(result['failed'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="programmatic_suite result files joined: speedups and the search's goal.")
    parser.add_argument("files", nargs="+", metavar="FILE[@PROBLEMS]", help="a result JSON, optionally @1-8,12")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows and goals here")
    args = parser.parse_args(argv)
    try:
        rows = load_rows([Source.parse(text) for text in args.files])
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = join(rows)
    print(render(rows, result, _programmatic_suite().GOAL_BELOW_FLOOR))
    if args.json:
        keep = ("suite", "file", "number", "name", "correct", "speedup_eager", "speedup_compile", "gen0_of_floor",
                "search_gain", "confirmed_gain")
        args.json.write_text(json.dumps({"sources": args.files, "rows": [{k: r.get(k) for k in keep} for r in rows],
                                         **result}, indent=1) + "\n")
        print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
