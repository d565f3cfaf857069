"""Evaluation throughput on 1 worker against N workers: the same optimize budget, measured in one run.

For each device list (default: `cuda:0`, then every visible GPU), one `kfoundry optimize --llm none`
search on the same problem with the same budget, seed and settings, each in a fresh run directory and
without an experience library (so the second search learns nothing from the first). The throughput is
read from the run store: evaluations per minute over the search phase (from the first evaluation's start
to the last one's end; the reference set-up, which each device does once, is left out) and over the whole
call (set-up included).

    python benchmarks/scale_out.py [PROBLEM] [--max-evals 24] [--configs cuda:0 all] [--set NAME=VALUE]
        [--out DIR] [--json PATH]

On a machine without a GPU, `--configs cpu cpu:2` runs the same comparison with CPU workers (Triton's
interpreter: correctness only, and the CPU cores are shared, so it says little about GPUs).
Prints a table and writes JSON to benchmarks/results/scale_out-<UTC stamp>.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sqlite3
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

DEFAULT_PROBLEM = ROOT / "benchmarks" / "suite" / "4_linear_epilogue.py"
RESULTS_DIR = ROOT / "benchmarks" / "results"
FORMAT = "kfoundry-scale-out/1"


def store_figures(run_dir: Path) -> dict[str, Any]:
    """Evaluations, their span and rate, and which worker device ran them, from a run's run.sqlite."""
    conn = sqlite3.connect(str(run_dir / "run.sqlite"))
    try:
        rows = conn.execute("SELECT started_at, finished_at, status, evaluation_json FROM evaluations "
                            "WHERE finished_at IS NOT NULL").fetchall()
    finally:
        conn.close()
    devices: Counter[str] = Counter()
    phases: dict[str, list[float]] = {}
    for row in rows:
        record = json.loads(row[3] or "{}")
        for key, value in (record.get("durations_s") or {}).items():
            if isinstance(value, (int, float)):
                phases.setdefault(key, []).append(float(value))
        device = record.get("device") or (record.get("timing") or {}).get("device")
        if device:
            devices[device] += 1
    count = len(rows)
    span = max(r[1] for r in rows) - min(r[0] for r in rows) if rows else 0.0
    busy = sum(r[1] - r[0] for r in rows)
    return {"evaluations": count, "search_span_s": round(span, 2), "evaluation_s_sum": round(busy, 2),
            "mean_evaluation_s": round(busy / count, 2) if count else None,
            "evals_per_min_search": round(count / span * 60, 3) if span > 0 else None,
            "statuses": dict(Counter(r[2] for r in rows)), "by_device": dict(devices),
            "mean_durations_s": {k: round(sum(v) / len(v), 3) for k, v in phases.items()}}


def run_one(problem: Path, devices: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from kfoundry.evaluate.parent.options import EvalOptions
    from kfoundry.evaluate.parent.pool import parse_devices
    from kfoundry.optimize import OptimizeSettings, optimize
    from kfoundry.problem import parse_set_values

    workers = parse_devices(devices)
    options = EvalOptions(set_values=parse_set_values(args.set), timeout_s=args.timeout)
    settings = OptimizeSettings(library="off", max_evals=args.max_evals, seed=args.seed, devices=devices,
                                stagnation=10**6)
    run_dir = out / devices.replace(":", "").replace(",", "_")
    print(f"[{devices}] optimize {problem.name}: {args.max_evals} evaluations on {len(workers)} worker(s)",
          file=sys.stderr, flush=True)
    started = time.perf_counter()
    result = optimize(problem, out=run_dir, options=options, settings=settings, llm=["none"], quiet=True)
    wall = time.perf_counter() - started
    figures = store_figures(Path(result.get("run_dir") or run_dir))
    figures.update({"devices": devices, "workers": len(workers), "wall_s": round(wall, 2),
                    "evals_per_min_wall": round(figures["evaluations"] / wall * 60, 3) if wall > 0 else None,
                    "stop_reason": result.get("stop_reason"),
                    "best_speedup_eager": (result.get("best") or {}).get("speedup_eager"),
                    "run_dir": str(run_dir)})
    print(f"[{devices}] {figures['evaluations']} evaluations, search {figures['search_span_s']} s, "
          f"wall {figures['wall_s']} s", file=sys.stderr, flush=True)
    return figures


def labels() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if torch.cuda.is_available():
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def render(document: dict[str, Any]) -> str:
    head = ("devices", "workers", "evals", "search s", "evals/min (search)", "wall s", "evals/min (wall)",
            "mean eval s", "by device")
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for r in document["runs"]:
        lines.append(" | ".join(str(v) for v in (
            r["devices"], r["workers"], r["evaluations"], r["search_span_s"], r["evals_per_min_search"],
            r["wall_s"], r["evals_per_min_wall"], r["mean_evaluation_s"],
            ", ".join(f"{k}: {v}" for k, v in sorted(r["by_device"].items())) or "-")))
    for r in document["runs"]:
        lines.append(f"{r['devices']} mean seconds per evaluation: " + ", ".join(
            f"{k} {v:g}" for k, v in r["mean_durations_s"].items()))
    for key, value in document["ratios"].items():
        lines.append(f"{key}: {value}")
    lines.append("labels: " + json.dumps(document["labels"]))
    return "\n".join(lines)


def ratios(runs: list[dict[str, Any]]) -> dict[str, Any]:
    base = runs[0]
    out = {}
    for r in runs[1:]:
        for key in ("evals_per_min_search", "evals_per_min_wall"):
            if base.get(key) and r.get(key):
                out[f"{key} {r['devices']} / {base['devices']}"] = round(r[key] / base[key], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", nargs="?", type=Path, default=DEFAULT_PROBLEM)
    parser.add_argument("--max-evals", type=int, default=24, help="evaluations per search (the same for each)")
    parser.add_argument("--configs", nargs="+", default=["cuda:0", "all"],
                        help="device lists, the first is the base of the ratios (default: cuda:0 all)")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=ROOT / "kfoundry-runs" / "scale_out")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not args.problem.is_file():
        print(f"error: no problem file {args.problem}", file=sys.stderr)
        return 2
    if args.max_evals < 1:
        print("error: --max-evals must be at least 1", file=sys.stderr)
        return 2
    from kfoundry.errors import KFoundryError

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = args.out / stamp
    try:
        runs = [run_one(args.problem, devices, args, out) for devices in args.configs]
    except KFoundryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    document = {"format": FORMAT, "created_utc": stamp, "command": ["python", "benchmarks/scale_out.py", *sys.argv[1:]],
                "problem": str(args.problem), "max_evals": args.max_evals, "seed": args.seed,
                "labels": labels(), "runs": runs, "ratios": ratios(runs)}
    path = args.json or RESULTS_DIR / f"scale_out-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(render(document))
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
