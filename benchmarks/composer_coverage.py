"""What the composer covers: over a folder of problems, how many it composes, and for the rest the op it lacks
and why. Compose only (no evaluation), on the CPU: on the meta device where the problem allows it (shapes alone,
instant at any size), else on the CPU.

    python benchmarks/composer_coverage.py [FOLDER ...] [--problems 1-9,12] [--json PATH]

FOLDER defaults to benchmarks/suite and benchmarks/coverage. Prints one table per folder and a summary line
(composed / problems; composer errors), and writes JSON to benchmarks/results/composer_coverage-<UTC stamp>.json
(or --json). Exit code 0 when it ran, 1 when the composer itself failed on any problem (`composer error (...)`:
a bug, not a missing template), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

DEFAULT_FOLDERS = (ROOT / "benchmarks" / "suite", ROOT / "benchmarks" / "coverage")
RESULTS_DIR = ROOT / "benchmarks" / "results"
FORMAT = "kfoundry-composer-coverage/1"
COMPOSER_ERROR = "composer error"


@dataclass
class Coverage:
    """One problem: composed or not, and what stopped it."""

    number: int | None
    name: str
    composed: bool
    variants: int
    unsupported: list[str]
    message: str
    seconds: float

    @property
    def crashed(self) -> bool:
        return any(u.startswith(COMPOSER_ERROR) for u in self.unsupported)


def cover(path: Path, number: int | None = None) -> Coverage:
    from kfoundry.errors import ProblemError
    from kfoundry.experts.composer import compose

    started = time.perf_counter()
    try:
        result = compose(path, max_variants=1)
        composed, variants, unsupported, message = bool(result.candidates), len(result.candidates), \
            list(result.unsupported), result.message
    except ProblemError as exc:
        composed, variants, unsupported, message = False, 0, ["problem error"], str(exc)
    return Coverage(number, path.stem, composed, variants, unsupported, message,
                    round(time.perf_counter() - started, 2))


def folder_coverage(folder: Path, problems: str | None = None,
                    progress=lambda message: None) -> list[Coverage]:
    from kfoundry.bench.suite import discover

    suite = discover(folder, problems=problems)
    rows = []
    for index, problem in enumerate(suite.problems, start=1):
        progress(f"[{index}/{len(suite.problems)}] {problem.name}")
        rows.append(cover(problem.path, problem.number))
    return rows


def summary(rows: Sequence[Coverage]) -> dict:
    missing = Counter(op for r in rows if not r.composed for op in r.unsupported)
    return {"problems": len(rows), "composed": sum(r.composed for r in rows),
            "composer_errors": [r.name for r in rows if r.crashed], "unsupported_ops": dict(missing.most_common())}


def table_lines(rows: Sequence[Coverage]) -> list[str]:
    columns = ("#", "problem", "composed", "unsupported", "why")
    body = [["" if r.number is None else str(r.number), r.name, "yes" if r.composed else "no",
             ", ".join(r.unsupported) or "-", "-" if r.composed else r.message] for r in rows]
    widths = [max([len(c)] + [len(line[i]) for line in body]) for i, c in enumerate(columns[:-1])]

    def line(cells: Sequence[str]) -> str:
        fixed = "  ".join(cell.rjust(w) if i == 0 else cell.ljust(w) for i, (cell, w) in enumerate(zip(cells, widths)))
        return f"{fixed}  {cells[-1]}".rstrip()

    return [line(columns), line(["-" * w for w in widths] + ["---"]), *(line(cells) for cells in body)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="*", type=Path, help="folders of problems (default: suite and coverage)")
    parser.add_argument("--problems", default=None, help="pick problems by leading number, e.g. 1-9,12")
    parser.add_argument("--json", type=Path, default=None, help="where to write the JSON")
    args = parser.parse_args(argv)
    from kfoundry.errors import KFoundryError

    document = {"format": FORMAT, "created_utc": dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ"),
                "command": ["python", "benchmarks/composer_coverage.py", *(argv if argv is not None else sys.argv[1:])],
                "folders": []}
    crashed = False
    for folder in args.folders or DEFAULT_FOLDERS:
        try:
            rows = folder_coverage(folder, args.problems, lambda m: print(m, file=sys.stderr, flush=True))
        except KFoundryError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        figures = summary(rows)
        crashed = crashed or bool(figures["composer_errors"])
        print(f"\n{folder}:")
        print("\n".join(table_lines(rows)))
        print(f"composed {figures['composed']} of {figures['problems']}; composer errors: "
              f"{', '.join(figures['composer_errors']) or 'none'}")
        document["folders"].append({"folder": str(folder), "summary": figures, "problems": [asdict(r) for r in rows]})
    path = args.json or RESULTS_DIR / f"composer_coverage-{document['created_utc']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"written: {path}")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
