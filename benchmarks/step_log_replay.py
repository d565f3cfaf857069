"""Recompose's gene-step log (kfoundry.experts.genome_moves.StepLog) replayed over finished runs: which of
recompose's children took a gene's step that was already harmful when the child was proposed, and how those
children did.

The runs were made by a search that did not keep the log (or did): this asks what the log would have known. Before
each recompose child (in the order they were created), the log holds the recompose children whose evaluations
had finished by then, each against its parent's speed, as the search would have seen them. A child that takes a
step harmful at that point would have come after every other child of its parent; the replay counts those
children and says whether any of them beat its run's best so far (a deferral that would have cost a gain). The
later course of a run that kept the log differs from the recorded one, so this is an estimate of the budget the
log frees, not of a speedup.

    python benchmarks/step_log_replay.py RUN_DIR [RUN_DIR ...] [--json PATH]

RUN_DIR: an optimize run directory (its run.sqlite), or a bench directory (every run under its runs/). Exit code
0 when every directory was read, 2 for bad usage (no run store found).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kfoundry.errors import KFoundryError  # noqa: E402
from kfoundry.experts.genome_moves import StepLog, gene_steps  # noqa: E402
from kfoundry.runs.store import DB_NAME, RunStore  # noqa: E402


def run_dirs(paths: list[Path]) -> list[Path]:
    """Each path as run directories: itself where it holds a run store, else the runs under its runs/."""
    found: list[Path] = []
    for path in paths:
        if (path / DB_NAME).is_file():
            found.append(path)
        else:
            inside = sorted(p.parent for p in (path / "runs").glob(f"*/{DB_NAME}"))
            if not inside:
                raise KFoundryError(f"{path}: no run store ({DB_NAME}) in it or in its runs/")
            found.extend(inside)
    return found


def replay(run_dir: Path) -> dict[str, Any]:
    """One run: its recompose children, those that took a step harmful when they were proposed (with their status,
    speedup and the run's best finished before theirs), and how many of those beat that best."""
    with RunStore.open(run_dir, resume=False) as store:
        candidates = store.candidates()
        finished = store.finished_evaluations()
        moves = {e["candidate_id"]: e.get("move") or {} for e in store.events("move") if "candidate_id" in e}
    children = [c for c in sorted(candidates, key=lambda c: c["created_at"])
                if c["expert"] == "recompose" and c["id"] in moves and c["parent_ids"]]

    def speed(candidate_id: int) -> float | None:
        evaluation = finished.get(candidate_id)
        return evaluation["speedup_eager"] if evaluation and evaluation["status"] == "ok" else None

    deferred = []
    for child in children:
        log = StepLog()
        for earlier in children:
            done = finished.get(earlier["id"])
            if done is not None and done["finished_at"] < child["created_at"]:
                parent_speed = speed(earlier["parent_ids"][0])
                if parent_speed is not None:
                    log.observe(gene_steps(moves[earlier["id"]].get("changed")), parent_speed,
                                done["speedup_eager"], done["status"] == "ok")
        harmful = log.harmful()
        if not any(step in harmful for step in gene_steps(moves[child["id"]].get("changed"))):
            continue
        mine = finished.get(child["id"])
        at = mine["finished_at"] if mine else float("inf")
        best = max((e["speedup_eager"] for e in finished.values() if e["status"] == "ok" and e["speedup_eager"]
                    and e["finished_at"] < at), default=None)
        deferred.append({"candidate": child["id"], "status": mine["status"] if mine else None,
                         "speedup_eager": speed(child["id"]), "best_before": best})
    beat = [d for d in deferred if d["speedup_eager"] is not None and (d["best_before"] is None
                                                                       or d["speedup_eager"] > d["best_before"])]
    return {"run": run_dir.name, "recompose_children": len(children), "deferred": deferred,
            "deferred_beat_best": len(beat)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Recompose's gene-step log replayed over finished runs.")
    parser.add_argument("dirs", nargs="+", type=Path, metavar="RUN_DIR", help="a run or bench directory")
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = parser.parse_args(argv)
    try:
        rows = [replay(d) for d in run_dirs(args.dirs)]
    except KFoundryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{'run':<48} {'recompose':>9} {'deferred':>8} {'of them beat the best':>22}  deferred (status, speedup)")
    for row in rows:
        shown = ", ".join(f"{d['candidate']} ({d['status']}, "
                          f"{'n/a' if d['speedup_eager'] is None else format(d['speedup_eager'], '.3f')})"
                          for d in row["deferred"])
        print(f"{row['run']:<48} {row['recompose_children']:>9} {len(row['deferred']):>8} "
              f"{row['deferred_beat_best']:>22}  {shown}")
    total = sum(r["recompose_children"] for r in rows)
    deferred = sum(len(r["deferred"]) for r in rows)
    print(f"over {len(rows)} run(s): {deferred} of {total} recompose children took a step already harmful; "
          f"{sum(r['deferred_beat_best'] for r in rows)} of them beat their run's best")
    if args.json:
        args.json.write_text(json.dumps({"dirs": [str(d) for d in args.dirs], "runs": rows}, indent=1) + "\n")
        print(f"written: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
